//! ServerDiagnostics' arrays (Part 5 §6.3.3): SessionDiagnosticsArray,
//! SessionSecurityDiagnosticsArray and SubscriptionDiagnosticsArray, and the
//! PublishingIntervalCount of the summary.
//!
//! # Gathered off the request path
//!
//! Each shard owns its sessions and subscriptions, so each shard describes its own: at the
//! end of a loop iteration ([`ServiceState::publish_metrics`]) it builds a
//! [`DiagnosticsSnapshot`] of them (already encoded as ExtensionObjects) and swaps it into
//! its [`crate::metrics::ShardMetrics::diagnostics`] slot (`arc_swap`: the reader takes a
//! reference count, never a lock). A Read of an array, on any shard, concatenates the
//! shards' last snapshots. Nothing on the request path builds, locks or waits; what a
//! request adds is a few counter bumps on its own session ([`SessionDiagnostics::count`]).
//!
//! A shard rebuilds its snapshot only when something changed since the last one (requests,
//! notifications and keep-alives sent, subscriptions expired, sessions created or timed
//! out), and then at most every [`REFRESH_MS`] — unless a reader asked: a Read of an array
//! (or of the summary or its PublishingIntervalCount; a monitored item's sample of one is
//! a Read too) sets every shard's `diagnostics_requested` flag and wakes the shards it newly
//! set (one wake per shard until it has rebuilt), which rebuild at their next loop
//! iteration. So a
//! snapshot is at most [`REFRESH_MS`] behind a busy shard, and a quiet shard is brought up
//! to date by the first Read that finds it behind (the following Read sees it). Counters
//! that move without any of those events (CurrentLifetimeCount, CurrentKeepAliveCount
//! between keep-alives) are as of the last rebuild.

use crate::generated::types::{
    MessageSecurityMode, ServiceCounterDataType, SessionDiagnosticsDataType,
    SessionSecurityDiagnosticsDataType,
};
use crate::metrics::{DiagnosticsSnapshot, SERVICES};
use crate::server::service_state::{ServiceState, UserIdentity};
use crate::types::{DateTime, ExtensionObject, NodeId, StatusCode, UaString};
use crate::Now;

/// Most often a shard rebuilds its snapshot while nobody asks (milliseconds).
pub const REFRESH_MS: u64 = 250;

/// Most entries of a session's ClientUserIdHistory (Part 5 asks for at least 2); the oldest
/// go first.
pub const USER_HISTORY_MAX: usize = 8;

/// What one session's diagnostics count and remember (kept in the session, bumped by its
/// own shard).
#[derive(Clone, Debug)]
pub struct SessionDiagnostics {
    /// The EndpointUrl of CreateSession (or of the client's Hello when it sent none).
    pub endpoint_url: UaString,
    /// The MessageSecurityMode of the channel the session was created or last activated on.
    pub security_mode: MessageSecurityMode,
    /// When CreateSession ran.
    pub connected: DateTime,
    /// The last request of the session (CreateSession, ActivateSession or any other).
    pub last_contact: DateTime,
    /// Requests dispatched in the session, by service ([`SERVICES`]): total and with a
    /// Bad ServiceResult.
    counts: [[u32; 2]; SERVICES.len()],
    total: [u32; 2],
    /// Of those, answered with a security status (BadUserAccessDenied and its kind).
    unauthorized: u32,
    /// The user of the first activation.
    user_of_session: Option<UaString>,
    /// The users the session was activated for, oldest first, each change once (at most
    /// [`USER_HISTORY_MAX`]).
    user_history: Vec<UaString>,
}

impl SessionDiagnostics {
    pub fn new(now: Now) -> SessionDiagnostics {
        SessionDiagnostics {
            endpoint_url: UaString::null(),
            security_mode: MessageSecurityMode::None,
            connected: now.utc,
            last_contact: now.utc,
            counts: [[0; 2]; SERVICES.len()],
            total: [0; 2],
            unauthorized: 0,
            user_of_session: None,
            user_history: Vec::new(),
        }
    }

    /// Counts one request of service `service` (an index into [`SERVICES`]) and its result.
    #[inline]
    pub fn count(&mut self, service: usize, result: StatusCode) {
        let bad = result.is_bad() as u32;
        if let Some(c) = self.counts.get_mut(service) {
            c[0] = c[0].wrapping_add(1);
            c[1] = c[1].wrapping_add(bad);
        }
        self.total[0] = self.total[0].wrapping_add(1);
        self.total[1] = self.total[1].wrapping_add(bad);
        if bad != 0 && crate::metrics::is_security_status(result) {
            self.unauthorized = self.unauthorized.wrapping_add(1);
        }
    }

    /// The session was activated for `identity`: its user joins the history when it
    /// differs from the last one.
    pub fn activated(&mut self, identity: &UserIdentity) {
        let user = user_id(identity);
        if self.user_of_session.is_none() {
            self.user_of_session = Some(user.clone());
        }
        if self.user_history.last() != Some(&user) {
            if self.user_history.len() >= USER_HISTORY_MAX {
                self.user_history.remove(0);
            }
            self.user_history.push(user);
        }
    }

    fn counter(&self, service: &str) -> ServiceCounterDataType {
        let i = SERVICES.iter().position(|s| *s == service);
        let [total_count, error_count] = i
            .and_then(|i| self.counts.get(i))
            .copied()
            .unwrap_or([0, 0]);
        ServiceCounterDataType {
            total_count,
            error_count,
        }
    }
}

/// The user name of an identity as diagnostics show it (Part 5 §6.4.3): the user name of a
/// UserName token, the subject's common name of an X.509 token, null for an anonymous one.
fn user_id(identity: &UserIdentity) -> UaString {
    match identity {
        UserIdentity::Anonymous { .. } => UaString::null(),
        UserIdentity::UserName { user, .. } | UserIdentity::Certificate { user, .. } => {
            UaString::from(user.as_str())
        }
    }
}

/// The lexical name of the UserTokenType an identity logged in with.
fn mechanism(identity: Option<&UserIdentity>) -> UaString {
    UaString::from(match identity {
        None => "",
        Some(UserIdentity::Anonymous { .. }) => "Anonymous",
        Some(UserIdentity::UserName { .. }) => "UserName",
        Some(UserIdentity::Certificate { .. }) => "Certificate",
    })
}

/// When the shard last built its snapshot, and from what.
#[derive(Debug, Default)]
pub(crate) struct Refresh {
    /// The latest time the shard was handed (requests, timers).
    pub(crate) now_mono_ns: u64,
    /// Monotonic time of the last snapshot.
    built_ns: u64,
    built: bool,
    /// What had happened when it was built ([`fingerprint`]).
    seen: [u64; 7],
    /// Requests dispatched on the shard (part of the fingerprint).
    pub(crate) requests: u64,
}

impl Refresh {
    /// A request reached the shard at `now` (one add and one store on the request path).
    #[inline]
    pub(crate) fn note_request(&mut self, now: Now) {
        self.now_mono_ns = now.mono_ns;
        self.requests = self.requests.wrapping_add(1);
    }
}

/// What moves when the shard's diagnostics change.
fn fingerprint(state: &ServiceState, requests: u64) -> [u64; 7] {
    let e = state.subscriptions().stats();
    let m = state.metrics();
    [
        requests,
        e.notifications,
        e.keep_alives,
        e.expired,
        e.overflows,
        crate::metrics::ShardMetrics::get(&m.session_timeouts),
        state.session_count() as u64,
    ]
}

impl ServiceState {
    /// Rebuilds this shard's diagnostics snapshot when it is due (see the module docs):
    /// called by [`ServiceState::publish_metrics`], off the request path.
    pub(crate) fn refresh_diagnostics(&mut self) {
        let requested = self
            .metrics()
            .diagnostics_requested
            .load(std::sync::atomic::Ordering::Relaxed);
        let r = &self.diag;
        let seen = fingerprint(self, r.requests);
        if r.built && seen == r.seen {
            if requested {
                self.metrics()
                    .diagnostics_requested
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
            return;
        }
        let age_ns = r.now_mono_ns.saturating_sub(r.built_ns);
        if r.built && !requested && age_ns < REFRESH_MS * 1_000_000 {
            return;
        }
        let snapshot = self.diagnostics_snapshot();
        let m = self.metrics();
        m.diagnostics.store(std::sync::Arc::new(snapshot));
        m.diagnostics_requested
            .store(false, std::sync::atomic::Ordering::Relaxed);
        let r = &mut self.diag;
        r.built = true;
        r.built_ns = r.now_mono_ns;
        r.seen = seen;
    }

    /// The shard's sessions and subscriptions as ServerDiagnostics shows them now.
    pub fn diagnostics_snapshot(&self) -> DiagnosticsSnapshot {
        let server_uri =
            UaString::from(self.shared().config.application.effective_application_uri());
        let engine = self.subscriptions();
        let mut snap = DiagnosticsSnapshot::default();
        for (key, s) in self.sessions_with_keys() {
            let d = &s.diagnostics;
            let n = |v: usize| v.min(u32::MAX as usize) as u32;
            let c = |name: &str| d.counter(name);
            let sd = SessionDiagnosticsDataType {
                session_id: s.session_id.clone(),
                session_name: s.name.clone(),
                client_description: s.client_description.clone(),
                server_uri: server_uri.clone(),
                endpoint_url: d.endpoint_url.clone(),
                locale_ids: s.locale_ids.clone(),
                actual_session_timeout: s.timeout_ms,
                max_response_message_size: s.max_response_message_size,
                client_connection_time: d.connected,
                client_last_contact_time: d.last_contact,
                current_subscriptions_count: n(engine.session_subscription_count(key)),
                current_monitored_items_count: n(engine.session_monitored_item_count(key)),
                current_publish_requests_in_queue: n(engine.queued_publish_count(key)),
                total_request_count: ServiceCounterDataType {
                    total_count: d.total[0],
                    error_count: d.total[1],
                },
                unauthorized_request_count: d.unauthorized,
                read_count: c("Read"),
                history_read_count: c("HistoryRead"),
                write_count: c("Write"),
                history_update_count: c("HistoryUpdate"),
                call_count: c("Call"),
                create_monitored_items_count: c("CreateMonitoredItems"),
                modify_monitored_items_count: c("ModifyMonitoredItems"),
                set_monitoring_mode_count: c("SetMonitoringMode"),
                set_triggering_count: c("SetTriggering"),
                delete_monitored_items_count: c("DeleteMonitoredItems"),
                create_subscription_count: c("CreateSubscription"),
                modify_subscription_count: c("ModifySubscription"),
                set_publishing_mode_count: c("SetPublishingMode"),
                publish_count: c("Publish"),
                republish_count: c("Republish"),
                transfer_subscriptions_count: c("TransferSubscriptions"),
                delete_subscriptions_count: c("DeleteSubscriptions"),
                add_nodes_count: c("AddNodes"),
                add_references_count: c("AddReferences"),
                delete_nodes_count: c("DeleteNodes"),
                delete_references_count: c("DeleteReferences"),
                browse_count: c("Browse"),
                browse_next_count: c("BrowseNext"),
                translate_browse_paths_to_node_ids_count: c("TranslateBrowsePathsToNodeIds"),
                query_first_count: c("QueryFirst"),
                query_next_count: c("QueryNext"),
                register_nodes_count: c("RegisterNodes"),
                unregister_nodes_count: c("UnregisterNodes"),
            };
            snap.sessions.push(ExtensionObject::from_struct(&sd));
            let security = SessionSecurityDiagnosticsDataType {
                session_id: s.session_id.clone(),
                client_user_id_of_session: d.user_of_session.clone().unwrap_or_default(),
                client_user_id_history: d.user_history.clone(),
                authentication_mechanism: mechanism(s.identity.as_ref()),
                encoding: UaString::from("UA Binary"),
                transport_protocol: UaString::from("opc.tcp"),
                security_mode: d.security_mode,
                security_policy_uri: UaString::from(s.security_policy_uri.as_str()),
                client_certificate: s.client_certificate.clone(),
            };
            snap.security.push(ExtensionObject::from_struct(&security));
        }
        engine.subscription_diagnostics(|key, mut sd| {
            sd.session_id = key
                .and_then(|k| self.session(k))
                .map_or(NodeId::NULL, |s| s.session_id.clone());
            snap.publishing_intervals.push(sd.publishing_interval);
            snap.subscriptions.push(ExtensionObject::from_struct(&sd));
        });
        snap.publishing_intervals.sort_by(f64::total_cmp);
        snap.publishing_intervals.dedup();
        snap
    }
}
