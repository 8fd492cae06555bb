//! The OPC UA server on the shards: core's `ServerShared` (built once),
//! one `ShardState` per shard, one `ServerConnection` per socket.
//!
//! Until core's server module lands this drives the loop with the echo
//! handler, so the runtime can be exercised end to end.

use std::sync::Arc;

use crate::handler::EchoHandler;

/// The benchmark contract's ApplicationUri.
pub const CONTRACT_APPLICATION_URI: &str = "urn:o6:benchmark:server";

/// What every shard shares, built once at start.
pub struct ServerSetup {
    pub contract: bool,
}

/// Builds the shared server from the non-runtime part of the configuration.
pub fn build(server: &toml::Table, contract: bool) -> Result<Arc<ServerSetup>, String> {
    if !server.is_empty() {
        tracing::debug!(keys = server.len(), "server configuration sections present");
    }
    Ok(Arc::new(ServerSetup { contract }))
}

/// The handler of shard `shard`.
pub type ServerHandler = EchoHandler;

pub fn make_handler(_setup: &Arc<ServerSetup>, _shard: usize) -> Result<ServerHandler, String> {
    Ok(EchoHandler::default())
}
