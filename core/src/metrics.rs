//! Per-shard counters for the metrics endpoint and the Server object's diagnostics.
//!
//! Each shard owns one [`ShardMetrics`] block (cache-line aligned, so shards never share a
//! line) and is its only writer: a counter is bumped with a relaxed load and store, no
//! read-modify-write, no lock. Anyone may read (relaxed loads): the runtime's metrics
//! thread, and any shard computing the ServerDiagnostics summary at read time. Counters
//! that change where they happen (requests, errors, channels, sessions created, timeouts)
//! are bumped there; gauges and the subscription engine's counts are published by the
//! shard ([`crate::server::service_state::ServiceState::publish_metrics`]) once per loop iteration.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::config::MAX_SHARDS;
use crate::generated::messages::Request;

/// Service names, in the order of [`service_index`] (the schema names without `Request`).
pub const SERVICES: [&str; 40] = [
    "FindServers",
    "FindServersOnNetwork",
    "GetEndpoints",
    "RegisterServer",
    "RegisterServer2",
    "OpenSecureChannel",
    "CloseSecureChannel",
    "CreateSession",
    "ActivateSession",
    "CloseSession",
    "Cancel",
    "AddNodes",
    "AddReferences",
    "DeleteNodes",
    "DeleteReferences",
    "Browse",
    "BrowseNext",
    "TranslateBrowsePathsToNodeIds",
    "RegisterNodes",
    "UnregisterNodes",
    "QueryFirst",
    "QueryNext",
    "Read",
    "HistoryRead",
    "Write",
    "HistoryUpdate",
    "Call",
    "CreateMonitoredItems",
    "ModifyMonitoredItems",
    "SetMonitoringMode",
    "SetTriggering",
    "DeleteMonitoredItems",
    "CreateSubscription",
    "ModifySubscription",
    "SetPublishingMode",
    "Publish",
    "Republish",
    "TransferSubscriptions",
    "DeleteSubscriptions",
    "Unknown",
];

/// The index of a request's service in [`SERVICES`].
pub fn service_index(r: &Request) -> usize {
    match r {
        Request::FindServers(_) => 0,
        Request::FindServersOnNetwork(_) => 1,
        Request::GetEndpoints(_) => 2,
        Request::RegisterServer(_) => 3,
        Request::RegisterServer2(_) => 4,
        Request::OpenSecureChannel(_) => 5,
        Request::CloseSecureChannel(_) => 6,
        Request::CreateSession(_) => 7,
        Request::ActivateSession(_) => 8,
        Request::CloseSession(_) => 9,
        Request::Cancel(_) => 10,
        Request::AddNodes(_) => 11,
        Request::AddReferences(_) => 12,
        Request::DeleteNodes(_) => 13,
        Request::DeleteReferences(_) => 14,
        Request::Browse(_) => 15,
        Request::BrowseNext(_) => 16,
        Request::TranslateBrowsePathsToNodeIds(_) => 17,
        Request::RegisterNodes(_) => 18,
        Request::UnregisterNodes(_) => 19,
        Request::QueryFirst(_) => 20,
        Request::QueryNext(_) => 21,
        Request::Read(_) => 22,
        Request::HistoryRead(_) => 23,
        Request::Write(_) => 24,
        Request::HistoryUpdate(_) => 25,
        Request::Call(_) => 26,
        Request::CreateMonitoredItems(_) => 27,
        Request::ModifyMonitoredItems(_) => 28,
        Request::SetMonitoringMode(_) => 29,
        Request::SetTriggering(_) => 30,
        Request::DeleteMonitoredItems(_) => 31,
        Request::CreateSubscription(_) => 32,
        Request::ModifySubscription(_) => 33,
        Request::SetPublishingMode(_) => 34,
        Request::Publish(_) => 35,
        Request::Republish(_) => 36,
        Request::TransferSubscriptions(_) => 37,
        Request::DeleteSubscriptions(_) => 38,
    }
}

/// Security policies by the name after `#` in their URI; the last is every other URI.
pub const POLICIES: [&str; 7] = [
    "None",
    "Basic128Rsa15",
    "Basic256",
    "Basic256Sha256",
    "Aes128_Sha256_RsaOaep",
    "Aes256_Sha256_RsaPss",
    "Other",
];

/// The index of a SecurityPolicyUri in [`POLICIES`].
pub fn policy_index(uri: &str) -> usize {
    let name = uri.rsplit_once('#').map_or(uri, |(_, n)| n);
    POLICIES
        .iter()
        .take(POLICIES.len() - 1)
        .position(|p| *p == name)
        .unwrap_or(POLICIES.len() - 1)
}

/// A fixed array of counters, indexed like [`SERVICES`] or [`POLICIES`].
pub struct Counters<const N: usize>(pub [AtomicU64; N]);

impl<const N: usize> Default for Counters<N> {
    fn default() -> Self {
        Counters(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl<const N: usize> std::ops::Index<usize> for Counters<N> {
    type Output = AtomicU64;
    /// Indexes are positions in [`SERVICES`] or [`POLICIES`]; any other counts into a
    /// scratch counter that is never reported (no panic).
    fn index(&self, i: usize) -> &AtomicU64 {
        static SCRATCH: AtomicU64 = AtomicU64::new(0);
        self.0.get(i).unwrap_or(&SCRATCH)
    }
}

impl<const N: usize> Counters<N> {
    pub const fn len(&self) -> usize {
        N
    }
    pub const fn is_empty(&self) -> bool {
        N == 0
    }
}

/// One shard's counters. Written by that shard only.
#[repr(align(128))]
#[derive(Default)]
pub struct ShardMetrics {
    /// Set when the shard's state is created: the shard exists.
    pub active: AtomicBool,
    /// Service requests dispatched, by service.
    pub requests: Counters<{ SERVICES.len() }>,
    /// Of those, answered with a Bad ServiceResult.
    pub errors: Counters<{ SERVICES.len() }>,
    /// Secure channels opened and closed, by policy.
    pub channels_opened: Counters<{ POLICIES.len() }>,
    pub channels_closed: Counters<{ POLICIES.len() }>,
    /// Sessions created (cumulated).
    pub sessions_created: AtomicU64,
    /// Sessions closed because they timed out.
    pub session_timeouts: AtomicU64,
    /// CreateSession/ActivateSession answered with a security status (of `errors`).
    pub security_rejected_sessions: AtomicU64,
    /// Requests answered with a security status (of `errors`).
    pub security_rejected_requests: AtomicU64,
    /// Published by the shard (gauges and the subscription engine's counts).
    pub sessions: AtomicU64,
    pub subscriptions: AtomicU64,
    pub monitored_items: AtomicU64,
    pub notifications: AtomicU64,
    pub notification_messages: AtomicU64,
    pub keep_alives: AtomicU64,
    /// Values discarded by full monitored-item queues.
    pub queue_overflows: AtomicU64,
    pub samples: AtomicU64,
    pub subscriptions_expired: AtomicU64,
    /// Events the shared bus overwrote before this shard read them.
    pub events_missed: AtomicU64,
    /// The shard's last diagnostics snapshot (its sessions and subscriptions), replaced
    /// whole by the shard off the request path
    /// ([`crate::server::service_state::ServiceState::publish_metrics`]); any shard reads it.
    pub diagnostics: arc_swap::ArcSwap<DiagnosticsSnapshot>,
    /// Set by a reader of the diagnostics arrays: the shard refreshes its snapshot at its
    /// next loop iteration (if anything changed since the last one) and clears it.
    pub diagnostics_requested: AtomicBool,
}

/// One shard's sessions and subscriptions as ServerDiagnostics shows them (Part 5 §6.3.3),
/// each array element already an ExtensionObject (encoded once per snapshot, not per Read).
#[derive(Debug, Default)]
pub struct DiagnosticsSnapshot {
    /// SessionDiagnosticsDataType, one per session.
    pub sessions: Vec<crate::types::ExtensionObject>,
    /// SessionSecurityDiagnosticsDataType, one per session.
    pub security: Vec<crate::types::ExtensionObject>,
    /// SubscriptionDiagnosticsDataType, one per subscription.
    pub subscriptions: Vec<crate::types::ExtensionObject>,
    /// The publishing interval (ms) of every subscription, sorted, each once.
    pub publishing_intervals: Vec<f64>,
}

/// Which array of a [`DiagnosticsSnapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiagnosticsArray {
    Sessions,
    SessionSecurity,
    Subscriptions,
}

impl ShardMetrics {
    /// Adds `n` (single writer: a relaxed load and store).
    #[inline]
    pub fn add(c: &AtomicU64, n: u64) {
        c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }
    /// Sets a gauge or a published count.
    #[inline]
    pub fn set(c: &AtomicU64, v: u64) {
        if c.load(Ordering::Relaxed) != v {
            c.store(v, Ordering::Relaxed);
        }
    }
    #[inline]
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

/// Every shard's block.
pub struct ServerMetrics {
    shards: Box<[ShardMetrics]>,
    /// The block of a shard index past `MAX_SHARDS` (which `ServiceState::new` refuses): never
    /// reported.
    spare: ShardMetrics,
}

impl std::fmt::Debug for ServerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerMetrics")
            .field("shards", &self.active().count())
            .finish()
    }
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            shards: (0..MAX_SHARDS).map(|_| ShardMetrics::default()).collect(),
            spare: ShardMetrics::default(),
        }
    }
}

impl ServerMetrics {
    /// The block of shard `i` (`i < MAX_SHARDS`; another gets a block never reported).
    pub fn shard(&self, i: usize) -> &ShardMetrics {
        self.shards.get(i).unwrap_or(&self.spare)
    }

    /// The blocks of the shards that exist, with their index.
    pub fn active(&self) -> impl Iterator<Item = (usize, &ShardMetrics)> {
        self.shards
            .iter()
            .enumerate()
            .filter(|(_, m)| m.active.load(Ordering::Relaxed))
    }

    /// A sum over the shards.
    pub fn sum(&self, f: impl Fn(&ShardMetrics) -> &AtomicU64) -> u64 {
        self.active()
            .map(|(_, m)| ShardMetrics::get(f(m)))
            .fold(0, u64::wrapping_add)
    }

    /// One diagnostics array over every shard, from each shard's last snapshot.
    pub fn diagnostics_array(&self, which: DiagnosticsArray) -> Vec<crate::types::ExtensionObject> {
        let mut out = Vec::new();
        for (_, m) in self.active() {
            let snap = m.diagnostics.load();
            out.extend_from_slice(match which {
                DiagnosticsArray::Sessions => &snap.sessions,
                DiagnosticsArray::SessionSecurity => &snap.security,
                DiagnosticsArray::Subscriptions => &snap.subscriptions,
            });
        }
        out
    }

    /// PublishingIntervalCount: the distinct publishing intervals of the subscriptions on
    /// every shard, from the shards' last snapshots.
    pub fn publishing_interval_count(&self) -> u64 {
        let mut all: Vec<f64> = Vec::new();
        for (_, m) in self.active() {
            all.extend_from_slice(&m.diagnostics.load().publishing_intervals);
        }
        all.sort_by(f64::total_cmp);
        all.dedup();
        all.len() as u64
    }

    /// Asks every shard for a fresh diagnostics snapshot; calls `wake` with each shard not
    /// asked already since its last snapshot (the caller wakes its loop).
    pub fn request_diagnostics(&self, mut wake: impl FnMut(usize)) {
        for (i, m) in self.active() {
            if !m.diagnostics_requested.swap(true, Ordering::Relaxed) {
                wake(i);
            }
        }
    }

    /// The ServerDiagnosticsSummary figures (Part 5 §12.9).
    pub fn summary(&self) -> crate::generated::types::ServerDiagnosticsSummaryDataType {
        let n = |v: u64| v.min(u32::MAX as u64) as u32;
        let mut rejected = 0u64;
        let mut rejected_sessions = 0u64;
        let mut created_subs_ok = 0u64;
        for (_, m) in self.active() {
            for i in 0..SERVICES.len() {
                rejected += ShardMetrics::get(&m.errors[i]);
            }
            rejected_sessions += ShardMetrics::get(&m.errors[7]) + ShardMetrics::get(&m.errors[8]);
            created_subs_ok +=
                ShardMetrics::get(&m.requests[32]).saturating_sub(ShardMetrics::get(&m.errors[32]));
        }
        crate::generated::types::ServerDiagnosticsSummaryDataType {
            server_view_count: 0,
            current_session_count: n(self.sum(|m| &m.sessions)),
            cumulated_session_count: n(self.sum(|m| &m.sessions_created)),
            security_rejected_session_count: n(self.sum(|m| &m.security_rejected_sessions)),
            rejected_session_count: n(rejected_sessions),
            session_timeout_count: n(self.sum(|m| &m.session_timeouts)),
            session_abort_count: 0,
            current_subscription_count: n(self.sum(|m| &m.subscriptions)),
            cumulated_subscription_count: n(created_subs_ok),
            publishing_interval_count: n(self.publishing_interval_count()),
            security_rejected_requests_count: n(self.sum(|m| &m.security_rejected_requests)),
            rejected_requests_count: n(rejected),
        }
    }
}

/// Is this a rejection for security reasons (ServerDiagnostics' Security… counts)?
pub fn is_security_status(s: crate::types::StatusCode) -> bool {
    use crate::types::StatusCode as S;
    [
        S::BadSecurityChecksFailed,
        S::BadUserAccessDenied,
        S::BadIdentityTokenInvalid,
        S::BadIdentityTokenRejected,
        S::BadUserSignatureInvalid,
        S::BadApplicationSignatureInvalid,
        S::BadCertificateInvalid,
        S::BadCertificateUntrusted,
        S::BadCertificateRevoked,
        S::BadCertificateTimeInvalid,
        S::BadCertificateUriInvalid,
        S::BadSecurityPolicyRejected,
        S::BadSecurityModeRejected,
    ]
    .contains(&s)
}

/// Counts one dispatched request and its outcome on the shard's block.
#[inline]
pub fn count_request(m: &ShardMetrics, service: usize, result: crate::types::StatusCode) {
    ShardMetrics::add(&m.requests[service], 1);
    if result.is_bad() {
        ShardMetrics::add(&m.errors[service], 1);
        if is_security_status(result) {
            ShardMetrics::add(&m.security_rejected_requests, 1);
            if service == 7 || service == 8 {
                ShardMetrics::add(&m.security_rejected_sessions, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_sums_active_shards() {
        let m = ServerMetrics::default();
        for i in [0, 3] {
            let s = m.shard(i);
            s.active.store(true, Ordering::Relaxed);
            ShardMetrics::set(&s.sessions, 2);
            ShardMetrics::add(&s.sessions_created, 5);
            count_request(s, 22, crate::types::StatusCode::Good);
            count_request(s, 8, crate::types::StatusCode::BadIdentityTokenRejected);
            count_request(s, 32, crate::types::StatusCode::Good);
        }
        // An inactive shard's block is not summed.
        ShardMetrics::add(&m.shard(5).sessions_created, 100);
        let d = m.summary();
        assert_eq!(d.current_session_count, 4);
        assert_eq!(d.cumulated_session_count, 10);
        assert_eq!(d.rejected_session_count, 2);
        assert_eq!(d.security_rejected_session_count, 2);
        assert_eq!(d.rejected_requests_count, 2);
        assert_eq!(d.security_rejected_requests_count, 2);
        assert_eq!(d.cumulated_subscription_count, 2);
        assert_eq!(m.sum(|s| &s.requests[22]), 2);
        assert_eq!(
            policy_index("http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256"),
            3
        );
        assert_eq!(POLICIES[policy_index("urn:x")], "Other");
        assert_eq!(std::mem::align_of::<ShardMetrics>(), 128);
    }
}
