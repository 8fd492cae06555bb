//! Load harness.
