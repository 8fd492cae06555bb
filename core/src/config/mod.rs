//! Server configuration: a plain, serde-friendly struct with defaults.
//!
//! Every numeric limit is a hard cap; `0` is rejected by [`ServerConfig::validate`] wherever it
//! would otherwise read as "unbounded". Other parts add their own sub-structs as fields
//! (`transport`, `sessions`, …).

use serde::{Deserialize, Serialize};

mod sessions;
mod subscriptions;
mod transport;

pub use sessions::SessionLimits;
pub use subscriptions::SubscriptionLimits;
pub use transport::{
    LimitsError, TransportLimits, MAX_BUFFER_SIZE, MAX_ENDPOINT_URL_LEN, MAX_REASON_LEN,
    MIN_BUFFER_SIZE,
};

/// Most shards of one server: watcher bits, inboxes and metrics blocks are sized by it.
pub const MAX_SHARDS: usize = 256;

/// The whole server configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Who the server is and what namespace 1 holds.
    pub application: ApplicationConfig,
    /// Per-request operation limits, reported in Server.ServerCapabilities.
    pub operation_limits: OperationLimits,
    /// Session pool size, session timeouts and request age, per shard.
    pub sessions: SessionLimits,
    /// UA-TCP and secure-channel limits: buffer sizes, message size, chunk count,
    /// timeouts, token lifetimes, channels per shard, decoding limits.
    pub transport: TransportLimits,
    /// Subscriptions, monitored items, publish and retransmission queues, per session and
    /// per shard.
    pub subscriptions: SubscriptionLimits,
    /// Events: the cross-shard event bus, EventFilter limits.
    pub events: EventConfig,
    /// Non-transparent redundancy: RedundancySupport and ServerUriArray of
    /// Server.ServerRedundancy (docs/Deployment.md).
    pub redundancy: RedundancyConfig,
}

impl ServerConfig {
    /// The configuration of the benchmark contract (`--contract`): ApplicationUri
    /// `urn:o6:benchmark:server`, 100,000 operations per request.
    pub fn contract() -> ServerConfig {
        let mut c = ServerConfig::default();
        c.application.contract_mode = true;
        c.operation_limits = OperationLimits::contract();
        c
    }

    /// Checks every field; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        self.application.validate()?;
        self.operation_limits.validate()?;
        self.sessions.validate()?;
        self.transport
            .validate()
            .map_err(|e| format!("transport: {e}"))?;
        self.events.validate()?;
        self.subscriptions.validate()?;
        self.redundancy.validate()?;
        Ok(())
    }
}

/// `[redundancy]`: this server as a member of a non-transparent redundant set (Part 4
/// §6.6.2): clients pick a member by its ServiceLevel and fail over to another themselves.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedundancyConfig {
    /// RedundancySupport: "none" (default), "cold", "warm" or "hot".
    pub support: String,
    /// ApplicationUris of the other members (ServerUriArray); at most 64. Empty with "none".
    pub server_uris: Vec<String>,
}

impl Default for RedundancyConfig {
    fn default() -> Self {
        RedundancyConfig {
            support: "none".into(),
            server_uris: Vec::new(),
        }
    }
}

impl RedundancyConfig {
    /// The RedundancySupport enumeration value (Part 5 §12.5).
    pub fn support_value(&self) -> i32 {
        match self.support.as_str() {
            "cold" => 1,
            "warm" => 2,
            "hot" => 3,
            _ => 0,
        }
    }
    fn validate(&self) -> Result<(), String> {
        if !["none", "cold", "warm", "hot"].contains(&self.support.as_str()) {
            return Err(format!(
                "redundancy.support = {:?}: expected none, cold, warm or hot (transparent redundancy is not offered)",
                self.support
            ));
        }
        if self.support == "none" && !self.server_uris.is_empty() {
            return Err("redundancy.server_uris needs redundancy.support cold, warm or hot".into());
        }
        if self.server_uris.len() > 64
            || self
                .server_uris
                .iter()
                .any(|u| u.is_empty() || u.len() > 4096)
        {
            return Err(
                "redundancy.server_uris: at most 64 non-empty URIs of at most 4096 bytes".into(),
            );
        }
        Ok(())
    }
}

/// The contract-mode ApplicationUri.
pub const CONTRACT_APPLICATION_URI: &str = "urn:o6:benchmark:server";

/// Application identity (namespace 1's URI is the ApplicationUri).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApplicationConfig {
    /// ApplicationUri; also the URI of namespace 1. Ignored in contract mode
    /// (which uses `urn:o6:benchmark:server`); see [`ApplicationConfig::effective_application_uri`].
    pub application_uri: String,
    /// ProductUri (BuildInfo.ProductUri).
    pub product_uri: String,
    /// ApplicationName (English text).
    pub application_name: String,
    /// ManufacturerName (BuildInfo.ManufacturerName).
    pub manufacturer: String,
    /// BuildInfo.BuildNumber.
    pub build_number: String,
    /// BuildInfo.BuildDate, as 100 ns ticks since 1601-01-01 UTC (0 = unknown, reported as null).
    pub build_date_ticks: i64,
    /// Benchmark contract mode: ApplicationUri `urn:o6:benchmark:server`.
    pub contract_mode: bool,
}

impl Default for ApplicationConfig {
    fn default() -> Self {
        ApplicationConfig {
            application_uri: "urn:uaring:server".into(),
            product_uri: "urn:uaring".into(),
            application_name: "uaring".into(),
            manufacturer: "uaring".into(),
            build_number: env!("CARGO_PKG_VERSION").into(),
            build_date_ticks: 0,
            contract_mode: false,
        }
    }
}

impl ApplicationConfig {
    /// The ApplicationUri in force (the contract URI in contract mode).
    pub fn effective_application_uri(&self) -> &str {
        if self.contract_mode {
            CONTRACT_APPLICATION_URI
        } else {
            &self.application_uri
        }
    }
    fn validate(&self) -> Result<(), String> {
        if !self.contract_mode && self.application_uri.is_empty() {
            return Err("application.application_uri is empty".into());
        }
        if self.application_name.is_empty() {
            return Err("application.application_name is empty".into());
        }
        Ok(())
    }
}

/// Limits on one service request, reported in Server.ServerCapabilities(.OperationLimits).
/// All counts are hard caps; `0` is invalid everywhere.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OperationLimits {
    /// Most ReadValueIds in one Read (more → BadTooManyOperations).
    pub max_nodes_per_read: u32,
    /// Most WriteValues in one Write.
    pub max_nodes_per_write: u32,
    /// Most BrowseDescriptions in one Browse (and ContinuationPoints in one BrowseNext).
    pub max_nodes_per_browse: u32,
    /// Most BrowsePaths in one TranslateBrowsePathsToNodeIds.
    pub max_nodes_per_translate_browse_paths_to_node_ids: u32,
    /// Most NodeIds in one RegisterNodes / UnregisterNodes.
    pub max_nodes_per_register_nodes: u32,
    /// Most MethodToCall in one Call.
    pub max_nodes_per_method_call: u32,
    /// Most items in one Create/Modify/Delete/SetMonitoringMode/SetTriggering call.
    pub max_monitored_items_per_call: u32,
    /// Browse continuation points per session.
    pub max_browse_continuation_points: u16,
    /// Most HistoryReadValueIds in one HistoryRead of values (raw, at time, processed).
    pub max_nodes_per_history_read_data: u32,
    /// Most HistoryReadValueIds in one HistoryRead of events.
    pub max_nodes_per_history_read_events: u32,
    /// Most entries (nodes) in one HistoryUpdate.
    pub max_nodes_per_history_update_data: u32,
    /// HistoryRead continuation points per session (one more is BadNoContinuationPoints).
    pub max_history_continuation_points: u16,
    /// Most values one HistoryRead operation returns before it gives a continuation
    /// point (HistoryServerCapabilities.MaxReturnDataValues), values.
    pub max_history_values_per_node: u32,
    /// Most elements in an array value (written or read), elements.
    pub max_array_length: u32,
    /// Longest String value, bytes.
    pub max_string_length: u32,
    /// Longest ByteString value, bytes.
    pub max_byte_string_length: u32,
    /// Operations handed to the application that one shard waits for at once (asynchronous
    /// reads, samples, writes and method calls); one more is answered BadTooManyOperations
    /// (a sample is skipped). Bounds the shard's completion inbox (allocated at the first).
    pub max_async_operations_per_shard: u32,
    /// Most nodes or references in one AddNodes, AddReferences, DeleteNodes or
    /// DeleteReferences (ServerCapabilities.OperationLimits.MaxNodesPerNodeManagement; more
    /// → BadTooManyOperations). A library batch is not bounded by it.
    pub max_nodes_per_node_management: u32,
    /// Node indexes kept free at start for nodes added while the server runs (the
    /// library's `ServerHandle::apply` and the AddNodes service). A removed node's index is
    /// reused, so this bounds the nodes added and not yet removed. One more is
    /// BadResourceUnavailable. Costs 8 bytes per index (the change path's watcher word).
    pub max_run_time_nodes: u32,
    /// NodeManagement requests of all shards waiting for the runtime's model writer at once
    /// (it edits one request at a time, off the shards); one more is answered
    /// BadResourceUnavailable for each of its operations, nothing edited.
    pub max_node_management_requests_queued: u32,
}

impl Default for OperationLimits {
    fn default() -> Self {
        OperationLimits {
            max_nodes_per_read: 10_000,
            max_nodes_per_write: 10_000,
            max_nodes_per_browse: 1_000,
            max_nodes_per_translate_browse_paths_to_node_ids: 1_000,
            max_nodes_per_register_nodes: 10_000,
            max_nodes_per_method_call: 100,
            max_monitored_items_per_call: 10_000,
            max_browse_continuation_points: 10,
            max_nodes_per_history_read_data: 1_000,
            max_nodes_per_history_read_events: 100,
            max_nodes_per_history_update_data: 1_000,
            max_history_continuation_points: 10,
            max_history_values_per_node: 100_000,
            max_array_length: 1_000_000,
            max_string_length: 16 * 1024 * 1024,
            max_byte_string_length: 16 * 1024 * 1024,
            max_async_operations_per_shard: 10_000,
            max_nodes_per_node_management: 1_000,
            max_run_time_nodes: 100_000,
            max_node_management_requests_queued: 16,
        }
    }
}

impl OperationLimits {
    /// The benchmark contract: 100,000 operations per request.
    pub fn contract() -> OperationLimits {
        OperationLimits {
            max_nodes_per_read: 100_000,
            max_nodes_per_write: 100_000,
            max_nodes_per_browse: 100_000,
            max_nodes_per_translate_browse_paths_to_node_ids: 100_000,
            max_nodes_per_register_nodes: 100_000,
            max_monitored_items_per_call: 100_000,
            ..OperationLimits::default()
        }
    }

    fn validate(&self) -> Result<(), String> {
        let counts = [
            ("max_nodes_per_read", self.max_nodes_per_read),
            ("max_nodes_per_write", self.max_nodes_per_write),
            ("max_nodes_per_browse", self.max_nodes_per_browse),
            (
                "max_nodes_per_translate_browse_paths_to_node_ids",
                self.max_nodes_per_translate_browse_paths_to_node_ids,
            ),
            (
                "max_nodes_per_register_nodes",
                self.max_nodes_per_register_nodes,
            ),
            ("max_nodes_per_method_call", self.max_nodes_per_method_call),
            (
                "max_monitored_items_per_call",
                self.max_monitored_items_per_call,
            ),
            (
                "max_browse_continuation_points",
                self.max_browse_continuation_points as u32,
            ),
            (
                "max_nodes_per_history_read_data",
                self.max_nodes_per_history_read_data,
            ),
            (
                "max_nodes_per_history_read_events",
                self.max_nodes_per_history_read_events,
            ),
            (
                "max_nodes_per_history_update_data",
                self.max_nodes_per_history_update_data,
            ),
            (
                "max_history_continuation_points",
                self.max_history_continuation_points as u32,
            ),
            (
                "max_history_values_per_node",
                self.max_history_values_per_node,
            ),
            ("max_array_length", self.max_array_length),
            ("max_string_length", self.max_string_length),
            ("max_byte_string_length", self.max_byte_string_length),
            (
                "max_async_operations_per_shard",
                self.max_async_operations_per_shard,
            ),
            (
                "max_nodes_per_node_management",
                self.max_nodes_per_node_management,
            ),
            ("max_run_time_nodes", self.max_run_time_nodes),
            (
                "max_node_management_requests_queued",
                self.max_node_management_requests_queued,
            ),
        ];
        for (name, v) in counts {
            if v == 0 {
                return Err(format!(
                    "operation_limits.{name} is 0 (0 is not 'unbounded'; give a limit)"
                ));
            }
            if v > i32::MAX as u32 {
                return Err(format!("operation_limits.{name} exceeds {}", i32::MAX));
            }
        }
        Ok(())
    }
}

/// Events (docs/Events.md): the cross-shard event bus and the EventFilter limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventConfig {
    /// Events kept in the cross-shard broadcast ring (slots). A shard that falls further
    /// behind than this misses the oldest ones (counted). 16..=1,048,576. Default 4096.
    pub bus_capacity: u32,
    /// Most ContentFilterElements in one EventFilter where clause (more: the filter is
    /// BadEventFilterInvalid). 1..=1024. Default 64.
    pub max_event_filter_elements: u32,
    /// Most select clauses in one EventFilter (more: BadEventFilterInvalid). 1..=1024.
    /// Default 64.
    pub max_select_clauses: u32,
}

impl Default for EventConfig {
    fn default() -> Self {
        EventConfig {
            bus_capacity: 4096,
            max_event_filter_elements: 64,
            max_select_clauses: 64,
        }
    }
}

impl EventConfig {
    fn validate(&self) -> Result<(), String> {
        if !(16..=1_048_576).contains(&self.bus_capacity) {
            return Err("events.bus_capacity must be 16..=1048576".into());
        }
        if !(1..=1024).contains(&self.max_event_filter_elements) {
            return Err("events.max_event_filter_elements must be 1..=1024".into());
        }
        if !(1..=1024).contains(&self.max_select_clauses) {
            return Err("events.max_select_clauses must be 1..=1024".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        ServerConfig::default().validate().unwrap();
        ServerConfig::contract().validate().unwrap();
    }

    #[test]
    fn zero_limit_is_rejected() {
        let mut c = ServerConfig::default();
        c.operation_limits.max_nodes_per_read = 0;
        assert!(c.validate().unwrap_err().contains("max_nodes_per_read"));
    }

    #[test]
    fn contract_uri() {
        assert_eq!(
            ServerConfig::contract()
                .application
                .effective_application_uri(),
            "urn:o6:benchmark:server"
        );
        assert_eq!(
            ServerConfig::default()
                .application
                .effective_application_uri(),
            "urn:uaring:server"
        );
    }
}
