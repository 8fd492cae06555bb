//! Services, one file per service set.

pub mod attribute;
