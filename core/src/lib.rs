//! uaring-core: the OPC UA binary protocol, sans-IO.
//!
//! Bytes and the current time go in; bytes and timer deadlines come out. No sockets,
//! no threads, no clock reads, no locks.

// No panic reachable from input: library code outside tests checks every access (the few
// proven-safe spots carry a narrow `allow` with the proof; docs/Fuzzing.md).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod address_space;
pub mod client;
pub mod config;
pub mod encoding;
pub mod events;
pub mod generated;
pub mod history;
pub mod metrics;
pub mod random;
pub mod response;
pub mod roles;
pub mod secure_channel;
pub mod server;
pub mod services;
pub mod session;
pub mod shared;
pub mod subscription;
pub mod time;
pub mod transport;
pub mod types;

pub use encoding::{Decode, DecodeError, DecodeLimits, DecodeResult, Decoder, Encode, UaStructure};
pub use time::Now;
pub use types::*;
