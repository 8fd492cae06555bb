//! The client role: [`ClientConnection`] (sans-IO, for the load harness: pipelining,
//! pre-encoded requests). The blocking client over `std::net::TcpStream` (tests and tools)
//! is `uaring_harness::blocking`: it reads clocks and sockets, which core does not.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic, clippy::unreachable, clippy::todo, clippy::unimplemented))]

pub mod connection;

pub use connection::{ClientConfig, ClientConnection, ClientState};
