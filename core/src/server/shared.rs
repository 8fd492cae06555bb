//! `ServerShared`: built once at start, `Arc`-shared read-only by every shard.

use std::sync::Arc;

use crate::address_space::{build, AddressSpace};
use crate::config::ServerConfig;
use crate::types::DateTime;
use crate::Now;

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

impl ServerShared {
    /// Validates the configuration and builds the address space (a few milliseconds).
    pub fn new(config: ServerConfig, now: Now) -> Result<Arc<ServerShared>, String> {
        Self::new_with(config, now, &mut |_| Ok(()))
    }

    /// [`ServerShared::new`] with nodes added by `extend` before the address space is
    /// frozen ([`build::build_with`]).
    pub fn new_with(
        config: ServerConfig,
        now: Now,
        extend: &mut build::Extend<'_>,
    ) -> Result<Arc<ServerShared>, String> {
        Self::new_with_history(config, now, extend, None)
    }

    /// [`ServerShared::new_with`] with a history store serving HistoryRead.
    pub fn new_with_history(
        config: ServerConfig,
        now: Now,
        extend: &mut build::Extend<'_>,
        history: Option<Arc<dyn crate::history::HistoryBackend>>,
    ) -> Result<Arc<ServerShared>, String> {
        config.validate()?;
        let capabilities = history.as_ref().map(|h| h.capabilities());
        let address_space = build::build_with_history(
            &config,
            now,
            &mut |b| {
                extend(b)?;
                // Namespace 0 declares methods this server does not serve (RequestServerStateChange,
                // SetSubscriptionDurable, …): not executable, as the NodeSet import makes the
                // methods of companion models without a handler.
                b.disable_methods(|id| id.namespace == 0 && !crate::services::method::served(id));
                Ok(())
            },
            capabilities.as_ref(),
        )?;
        let events = crate::events::ServerEvents::new(&config, &address_space, now.utc);
        let metrics = address_space.metrics().clone();
        Ok(Arc::new(ServerShared {
            metrics,
            config,
            address_space,
            start_time: now.utc,
            start_mono_ns: now.mono_ns,
            events,
            history,
        }))
    }
}
