//! uaring-shards: the per-core runtime of uaring.
//!
//! One pinned thread per selected CPU runs its own event loop on io_uring
//! ([`uring::UringLoop`]) or, where io_uring cannot be set up, on epoll
//! ([`epoll::EpollLoop`]). Each loop owns its sockets and drives a
//! [`Handler`] — the OPC UA server (core's `ShardState` + `ServerConnection`)
//! or any other protocol (the load client, the echo handler). Nothing on the
//! request path is shared between shards.

pub mod clock;
pub mod config;
mod conn;
pub mod epoll;
pub mod event_loop;
pub mod fleet;
pub mod handler;
pub mod handshake;
pub mod memlock;
pub mod metrics;
pub mod net;
pub mod notify;
pub mod random;
pub mod runtime;
pub mod security;
mod shard;
pub mod spsc;
pub mod stats;
pub mod check;
pub mod cli;
pub mod server;
pub mod uring;

pub use config::{Distribution, FileConfig, IoBackend, RuntimeConfig};
pub use event_loop::EventLoop;
pub use fleet::{Fleet, ShardWiring, StatsSnapshot, Waker};
pub use handler::{ConnId, ConnStatus, EchoHandler, Handler, Origin};
pub use shard::LoopConfig;
