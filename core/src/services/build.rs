//! Building [`ServerShared`], the state every shard shares: the configuration validated, the
//! address space built (with the application's nodes) and frozen, the events and the
//! history store. Here, above the shared state, because the address space must know which
//! of namespace 0's methods the services serve (the others are not executable) and which
//! aggregates the engine computes (ServerCapabilities.AggregateFunctions).

use std::sync::Arc;

use crate::address_space::build::{self, server_object};
use crate::config::ServerConfig;
use crate::history::aggregate::Aggregate;
use crate::shared::ServerShared;
use crate::Now;

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
                let aggregates: Vec<crate::types::NodeId> =
                    Aggregate::ALL.iter().map(|a| a.node_id()).collect();
                server_object::install_aggregate_functions(b, &aggregates);
                extend(b)?;
                // Namespace 0 declares methods this server does not serve (RequestServerStateChange,
                // SetSubscriptionDurable, …): not executable, as the NodeSet import makes the
                // methods of companion models without a handler.
                b.disable_methods(|id| id.namespace == 0 && !super::method::served(id));
                Ok(())
            },
            capabilities.as_ref(),
        )?;
        let events = crate::events::ServerEvents::new(&config, &address_space, now.utc);
        let metrics = address_space.metrics().clone();
        let address_space = Arc::new(address_space);
        let model = Arc::new(crate::address_space::Model::new(address_space.clone()));
        Ok(Arc::new(ServerShared {
            metrics,
            config: Arc::new(config),
            address_space,
            model,
            start_time: now.utc,
            start_mono_ns: now.mono_ns,
            events: Arc::new(events),
            history,
        }))
    }
}
