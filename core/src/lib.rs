//! uaring-core: the OPC UA binary protocol, sans-IO.
//!
//! Bytes and the current time go in; bytes and timer deadlines come out. No sockets,
//! no threads, no clock reads, no locks.

pub mod address_space;
pub mod client;
pub mod encoding;
pub mod events;
pub mod generated;
pub mod random;
pub mod secure_channel;
pub mod server;
pub mod services;
pub mod subscription;
pub mod time;
pub mod transport;
pub mod types;

pub use encoding::{Decode, DecodeError, DecodeLimits, DecodeResult, Decoder, Encode, UaStructure};
pub use time::Now;
pub use types::*;
