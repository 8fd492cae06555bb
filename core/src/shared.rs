//! `ServerShared`: built once at start, `Arc`-shared read-only by every shard. Below the
//! subscription engine and the shard state, which read it; built by the services layer
//! ([`ServerShared::new_with_history`] in `services::build`), which knows the methods it
//! serves.

use std::sync::Arc;

use crate::address_space::AddressSpace;
use crate::config::ServerConfig;
use crate::types::DateTime;

/// Everything the shards share: the configuration and the address space (whose value
/// cells are the only mutable part, and lock-free).
#[derive(Debug)]
pub struct ServerShared {
    pub config: ServerConfig,
    pub address_space: AddressSpace,
    /// UTC time of the start (ServerStatus.StartTime).
    pub start_time: DateTime,
    /// Monotonic nanoseconds at the start.
    pub start_mono_ns: u64,
    /// Events: the cross-shard event bus, the Demo alarm, EventIds (docs/Events.md).
    pub events: crate::events::ServerEvents,
    /// Per-shard counters (the metrics endpoint, ServerDiagnostics); the address space's.
    pub metrics: Arc<crate::metrics::ServerMetrics>,
    /// The history store behind HistoryRead (`None`: BadServiceUnsupported).
    pub history: Option<Arc<dyn crate::history::HistoryBackend>>,
}
