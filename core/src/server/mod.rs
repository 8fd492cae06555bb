//! The server role: configuration, the state shared by all shards, the per-connection
//! state machine and the request context.

pub mod connection;
pub mod context;
pub mod deferred;
pub mod diagnostics;
pub mod handshake;
pub mod recycle;
pub mod service_state;
