//! The client role: [`ClientConnection`] (sans-IO, for the load harness: pipelining,
//! pre-encoded requests). The blocking client over `std::net::TcpStream` (tests and tools)
//! is `uaring_harness::blocking`: it reads clocks and sockets, which core does not.

pub mod connection;

pub use connection::{ClientConfig, ClientConnection, ClientState};
