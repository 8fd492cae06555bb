//! The per-core runtime.
