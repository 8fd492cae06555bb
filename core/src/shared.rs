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
///
/// The address space changes while the server runs ([`crate::address_space::model`]): this
/// value holds one version of it. A shard replaces its `ServerShared` with one around the
/// new version at the top of a loop iteration ([`ServerShared::with_space`]); code off the
/// shards that must see the latest nodes asks [`ServerShared::model`].
#[derive(Debug, Clone)]
pub struct ServerShared {
    pub config: Arc<ServerConfig>,
    /// The version of the address space this holder works with.
    pub address_space: Arc<AddressSpace>,
    /// The current version and the run-time writer's entry ([`crate::address_space::Model`]).
    pub model: Arc<crate::address_space::Model>,
    /// UTC time of the start (ServerStatus.StartTime).
    pub start_time: DateTime,
    /// Monotonic nanoseconds at the start.
    pub start_mono_ns: u64,
    /// Events: the cross-shard event bus, the Demo alarm, EventIds (docs/Events.md).
    pub events: Arc<crate::events::ServerEvents>,
    /// Per-shard counters (the metrics endpoint, ServerDiagnostics); the address space's.
    pub metrics: Arc<crate::metrics::ServerMetrics>,
    /// The history store behind HistoryRead (`None`: BadServiceUnsupported).
    pub history: Option<Arc<dyn crate::history::HistoryBackend>>,
}

impl ServerShared {
    /// The same server state around another version of the address space.
    pub fn with_space(&self, space: Arc<AddressSpace>) -> ServerShared {
        ServerShared {
            address_space: space,
            ..self.clone()
        }
    }

    /// The latest version of the address space (off the shards: the library's handles).
    pub fn current_space(&self) -> Arc<AddressSpace> {
        self.model.load()
    }
}
