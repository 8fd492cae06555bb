//! Historical Access (Part 11): what a HistoryRead asks of the store behind the server,
//! and how the answer comes back. The store itself is not here (core does no I/O): the
//! runtime gives the server a [`HistoryBackend`], and the HistoryRead service
//! (`crate::services::history`) hands each node's operation to it with a reply handle,
//! answered from the backend's own threads through the deferred-response path that
//! asynchronous Reads use (`crate::server::deferred`). A shard never waits for the store.

pub mod aggregate;
pub mod backend;
pub mod configuration;

pub use backend::{
    HistoryBackend, HistoryCapabilities, HistoryReadOp, HistoryReply, HistoryUpdateOp,
    HistoryUpdateReply, ReadDetails, UpdateDetails,
};
