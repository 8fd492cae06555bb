//! The server role: per-connection state machine and the request context.

pub mod connection;
pub mod context;
