//! The client role: [`ClientConnection`] (sans-IO, for the load harness: pipelining,
//! pre-encoded requests) and the blocking [`Client`] over `std::net::TcpStream` (tests
//! and tools).

pub mod blocking;
pub mod connection;

pub use blocking::{Client, ClientError, ClientResult};
pub use connection::{ClientConfig, ClientConnection, ClientState};
