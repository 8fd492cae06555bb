//! The server role: configuration, the state shared by all shards, per-shard state and
//! connections.

pub mod config;
pub mod shared;
