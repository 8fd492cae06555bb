//! [`ServiceState`]: everything one shard thread owns on the request path for its connections —
//! the session pool, each session's browse continuation points, and the session-timeout
//! deadlines.
//!
//! # Identifiers that are unique across shards without coordination
//!
//! Shards never talk on the request path, yet channel ids and authentication tokens must be
//! unique server-wide, and a reconnecting client's ActivateSession (which arrives on whatever
//! shard accepted the new connection) must be routable to the shard that owns the session.
//! Both identifiers therefore carry the owning shard:
//!
//! * **Secure channel id** ([`ServiceState::next_channel_id`]): `shard_index << 24 | counter`,
//!   `counter` a per-shard 24-bit counter starting at 1 (0 is skipped: channel id 0 is what a
//!   client sends before it has one). Up to 256 shards; [`channel_shard`] recovers the shard.
//!   The counter wraps after 16,777,215 channels; ids of channels still open are skipped,
//!   so ids are unique among live channels.
//! * **Authentication token** (CreateSession): a ns=0 ByteString NodeId of
//!   [`AUTH_TOKEN_LEN`] = 32 bytes:
//!
//!   | bytes  | content                                                   |
//!   |--------|-----------------------------------------------------------|
//!   | 0..2   | owning shard index, u16 little-endian                     |
//!   | 2..6   | slot in that shard's session pool, u32 little-endian      |
//!   | 6..32  | 26 random bytes (208 bits: the secret part)               |
//!
//!   The whole token is compared in constant time, so knowing the shard and slot of a
//!   session does not help guess its token. [`token_shard`] reads the shard from any token
//!   without a lookup: an ActivateSession whose token names another shard makes the runtime
//!   hand the whole connection (socket, secure channel, unprocessed input) to that shard
//!   over an SPSC queue ([`ConnectionHost::session_owner`]); the session never moves.
//! * **Session id**: `ns=1;g=<random v4 Guid>`, public (it appears in diagnostics) and
//!   unrelated to the token.
//!
//! The random bytes come from the shard's [`Random`], handed in by the host
//! ([`ServiceState::new`]): the `uaring` binary's is a ChaCha20 CSPRNG seeded from the OS per
//! shard; tests seed theirs with a number.
//!
//! # Timers
//!
//! Each session has one deadline, `last use + revised timeout`. Using a session only moves
//! the deadline stored in the session; the min-heap of `(deadline, slot, generation)` is not
//! touched on the request path. When the heap's earliest entry passes, [`ServiceState::on_timer`]
//! pops it and either closes the session (its real deadline passed too) or pushes it back with
//! its current deadline. Entries of closed sessions are recognised by the slot generation and
//! dropped. The heap is compacted when stale entries make it grow past twice the pool size, so
//! it never grows without bound. Nothing walks every session on a tick.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;

use crate::config::TransportLimits;
use crate::generated::messages::Response;
use crate::generated::types::{ApplicationDescription, ReferenceDescription};
use crate::random::Random;
use crate::secure_channel::SecurityProvider;
#[cfg(doc)]
use crate::server::context::ConnectionHost;
use crate::server::recycle::Recycler;
use crate::session::SessionKey;
use crate::shared::ServerShared;
use crate::subscription::SubscriptionEngine;
use crate::time::Now;
use crate::types::{ByteString, Guid, Identifier, NodeId, StatusCode, UaString};

/// Length of an authentication token's ByteString identifier.
pub const AUTH_TOKEN_LEN: usize = 32;
/// Most shards the channel-id layout can name (defined with the change path's inboxes).
use crate::config::MAX_SHARDS;

/// The shard that issued a secure channel id.
pub fn channel_shard(channel_id: u32) -> usize {
    (channel_id >> 24) as usize
}

/// The shard that owns the session of an authentication token, if the token has this
/// server's layout. Cheap: no lookup.
pub fn token_shard(token: &NodeId) -> Option<usize> {
    token_parts(token).map(|(shard, _)| shard)
}

fn token_parts(token: &NodeId) -> Option<(usize, u32)> {
    match &token.identifier {
        Identifier::ByteString(b) if token.namespace == 0 && b.len() == AUTH_TOKEN_LEN => {
            let (&[s0, s1, l0, l1, l2, l3], _) = b.split_first_chunk::<6>()?;
            Some((
                u16::from_le_bytes([s0, s1]) as usize,
                u32::from_le_bytes([l0, l1, l2, l3]),
            ))
        }
        _ => None,
    }
}

/// Equality that takes the same time wherever the first difference is.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut d = 0u8;
    for (x, y) in a.iter().zip(b) {
        d |= x ^ y;
    }
    std::hint::black_box(d) == 0
}

/// The TransferSubscriptionsResponse with one result per requested id.
pub fn transfer_response(
    handle: u32,
    results: Vec<crate::generated::types::TransferResult>,
    now: Now,
) -> Response {
    Response::TransferSubscriptions(Box::new(
        crate::generated::types::TransferSubscriptionsResponse {
            response_header: crate::response::response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        },
    ))
}

/// The user a session was activated for, with the roles granted to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserIdentity {
    /// An AnonymousIdentityToken (or a null token) under the given user token policy id.
    Anonymous {
        policy_id: String,
        roles: crate::roles::Roles,
    },
    /// A configured user who logged in with a UserName token.
    UserName {
        policy_id: String,
        user: String,
        roles: crate::roles::Roles,
    },
    /// An X.509 user certificate (validated, its signature verified); `user` is its CN.
    Certificate {
        policy_id: String,
        user: String,
        roles: crate::roles::Roles,
    },
}

impl UserIdentity {
    /// The user name (a UserName token's) or certificate subject (an X.509 user's CN);
    /// empty when anonymous.
    pub fn user(&self) -> &str {
        match self {
            UserIdentity::Anonymous { .. } => "",
            UserIdentity::UserName { user, .. } | UserIdentity::Certificate { user, .. } => user,
        }
    }

    /// The roles of the session: Anonymous or AuthenticatedUser, and those the login gave.
    pub fn roles(&self) -> crate::roles::Roles {
        use crate::roles::WellKnownRole;
        match self {
            UserIdentity::Anonymous { roles, .. } => roles.and(WellKnownRole::Anonymous),
            UserIdentity::UserName { roles, .. } | UserIdentity::Certificate { roles, .. } => {
                roles.and(WellKnownRole::AuthenticatedUser)
            }
        }
    }
}

/// A paused Browse: the references still to return for one BrowseDescription, already
/// filtered and reduced to the requested result fields (a snapshot of the node when the
/// Browse ran).
#[derive(Debug)]
pub struct BrowseContinuationPoint {
    id: [u8; 16],
    /// The request (per-session sequence number) that created or last used it.
    request_seq: u64,
    /// Max references per BrowseNext result (>= 1).
    pub max_references: usize,
    /// Remaining references, returned from the front.
    pub remaining: VecDeque<ReferenceDescription>,
}

impl BrowseContinuationPoint {
    pub fn id(&self) -> ByteString {
        ByteString::from(&self.id[..])
    }
}

/// One session. Owned by its shard's pool.
#[derive(Debug)]
pub struct Session {
    /// The public SessionId (`ns=1;g=…`).
    pub session_id: NodeId,
    /// The secret AuthenticationToken (see the module docs for its layout).
    pub authentication_token: NodeId,
    /// SessionName from CreateSession.
    pub name: UaString,
    /// The client's ApplicationDescription from CreateSession.
    pub client_description: ApplicationDescription,
    /// The client certificate given in CreateSession (null without security).
    pub client_certificate: ByteString,
    /// The certificate the client's secure channel was opened with when the session was
    /// created (null without security). A transfer to another channel needs the same one.
    pub channel_certificate: ByteString,
    /// The secure channel the session is bound to; `None` after that channel closed.
    /// Requests are only accepted on this channel; ActivateSession moves it.
    pub channel_id: Option<u32>,
    /// SecurityPolicyUri of the channel the session was created on.
    pub security_policy_uri: String,
    /// Set by the first successful ActivateSession.
    pub identity: Option<UserIdentity>,
    /// The revised session timeout, milliseconds.
    pub timeout_ms: f64,
    /// Monotonic time of the last request, nanoseconds.
    pub last_use_ns: u64,
    /// `last_use_ns + timeout_ms`: the session is closed when this passes unused.
    pub deadline_ns: u64,
    /// The last server nonce handed out (CreateSession or ActivateSession): 32 bytes.
    pub server_nonce: ByteString,
    /// The SecurityPolicyUri the client asked ephemeral keys for (ECDHPolicyUri in a
    /// CreateSession or ActivateSession request header): from then on every successful
    /// ActivateSession response carries a fresh one (a client re-activating after a
    /// reconnect needs one and may not ask again).
    pub ecdh_policy_uri: Option<String>,
    /// The private half of the ephemeral key handed out last, until the next
    /// ActivateSession takes it (to decrypt an EccEncryptedSecret, or to drop it): one key,
    /// one use.
    pub ephemeral_key: Option<EphemeralPrivateKey>,
    /// LocaleIds from the last ActivateSession.
    pub locale_ids: Vec<UaString>,
    /// MaxResponseMessageSize from CreateSession (0: no limit requested).
    pub max_response_message_size: u32,
    /// What SessionDiagnostics shows of it ([`crate::server::diagnostics`]).
    pub diagnostics: crate::server::diagnostics::SessionDiagnostics,
    continuation_points: VecDeque<BrowseContinuationPoint>,
    /// HistoryRead continuation points, oldest first.
    history_points: VecDeque<HistoryContinuationPoint>,
    cp_counter: u64,
    request_seq: u64,
}

/// The private half of a session's ephemeral key ([`Session::ephemeral_key`]), as the
/// policy that made it left it ([`crate::secure_channel::SessionEphemeralKey::private`]).
pub struct EphemeralPrivateKey(pub Box<dyn std::any::Any + Send>);

impl std::fmt::Debug for EphemeralPrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EphemeralPrivateKey")
    }
}

/// A request's session as [`ServiceState::session_for_request`] found it: what the services
/// need of it, carried so that they do not look it up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestSession {
    pub key: SessionKey,
    /// ActivateSession has succeeded at least once ([`Session::is_activated`]).
    pub activated: bool,
    /// The roles of its user ([`UserIdentity::roles`]; none before activation).
    pub roles: crate::roles::Roles,
}

/// A HistoryRead continuation point: the backend's resume token, and the fingerprint of
/// the details and node it continues (a continuation with other details is refused).
#[derive(Debug)]
pub struct HistoryContinuationPoint {
    id: [u8; 16],
    pub fingerprint: u64,
    /// The node read (the backend's release names it).
    pub node_id: NodeId,
    pub token: Vec<u8>,
}

impl Session {
    /// Has ActivateSession succeeded at least once?
    pub fn is_activated(&self) -> bool {
        self.identity.is_some()
    }

    /// Moves the deadline: the session was used at `now`.
    pub fn touch(&mut self, now: Now) {
        self.last_use_ns = now.mono_ns;
        self.deadline_ns = now.deadline_after_ms(self.timeout_ms);
        self.diagnostics.last_contact = now.utc;
    }

    /// Starts a new request that may create continuation points; returns its sequence
    /// number for [`Session::add_continuation_point`].
    pub fn begin_request(&mut self) -> u64 {
        self.request_seq += 1;
        self.request_seq
    }

    /// Number of live browse continuation points.
    pub fn continuation_point_count(&self) -> usize {
        self.continuation_points.len()
    }

    /// Stores a continuation point created by request `request_seq`, at most `max` per
    /// session. When full, the oldest one from a *prior* request is released (Part 4 §7.9:
    /// the server frees continuation points of prior requests when a new request needs
    /// them); if every stored one belongs to this request, BadNoContinuationPoints.
    pub fn add_continuation_point(
        &mut self,
        request_seq: u64,
        max: usize,
        max_references: usize,
        remaining: VecDeque<ReferenceDescription>,
        random: &mut dyn Random,
    ) -> Result<ByteString, StatusCode> {
        if max == 0 {
            return Err(StatusCode::BadNoContinuationPoints);
        }
        while self.continuation_points.len() >= max {
            // The deque is ordered by request_seq (oldest first): a prior request's point,
            // if any, is at the front.
            match self.continuation_points.front() {
                Some(cp) if cp.request_seq < request_seq => {
                    self.continuation_points.pop_front();
                }
                _ => return Err(StatusCode::BadNoContinuationPoints),
            }
        }
        self.cp_counter += 1;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.cp_counter.to_le_bytes());
        random.fill(&mut id[8..]);
        self.continuation_points.push_back(BrowseContinuationPoint {
            id,
            request_seq,
            max_references: max_references.max(1),
            remaining,
        });
        Ok(ByteString::from(&id[..]))
    }

    /// Removes and returns the continuation point with this id.
    pub fn take_continuation_point(&mut self, id: &[u8]) -> Option<BrowseContinuationPoint> {
        let i = self
            .continuation_points
            .iter()
            .position(|cp| cp.id[..] == *id)?;
        self.continuation_points.remove(i)
    }

    /// Puts back a continuation point that still has references, as used by request
    /// `request_seq` (it becomes the newest).
    pub fn restore_continuation_point(
        &mut self,
        mut cp: BrowseContinuationPoint,
        request_seq: u64,
    ) {
        cp.request_seq = request_seq;
        self.continuation_points.push_back(cp);
    }

    /// Takes the HistoryRead continuation points (the session ends: their tokens go back to
    /// the history backend).
    fn take_history_points(&mut self) -> VecDeque<HistoryContinuationPoint> {
        std::mem::take(&mut self.history_points)
    }

    /// Number of live HistoryRead continuation points.
    pub fn history_point_count(&self) -> usize {
        self.history_points.len()
    }

    /// Stores a HistoryRead continuation point, at most `max` per session: when they are
    /// all taken, BadNoContinuationPoints (Part 11 §6.3: the client releases or finishes
    /// the ones it holds; the server does not drop a client's place in a read).
    /// `token` comes back in the error when there is no room.
    pub fn add_history_point(
        &mut self,
        max: usize,
        fingerprint: u64,
        node_id: &NodeId,
        token: Vec<u8>,
        random: &mut dyn Random,
    ) -> Result<ByteString, (StatusCode, Vec<u8>)> {
        if self.history_points.len() >= max {
            return Err((StatusCode::BadNoContinuationPoints, token));
        }
        self.cp_counter += 1;
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&self.cp_counter.to_le_bytes());
        random.fill(&mut id[8..]);
        self.history_points.push_back(HistoryContinuationPoint {
            id,
            fingerprint,
            node_id: node_id.clone(),
            token,
        });
        Ok(ByteString::from(&id[..]))
    }

    /// Removes and returns the HistoryRead continuation point with this id.
    pub fn take_history_point(&mut self, id: &[u8]) -> Option<HistoryContinuationPoint> {
        let i = self.history_points.iter().position(|cp| cp.id[..] == *id)?;
        self.history_points.remove(i)
    }
}

struct Slot {
    generation: u32,
    session: Option<Session>,
}

/// Most TransferSubscriptions requests of one shard waiting for other shards' replies; one
/// more is BadTooManyOperations.
pub const MAX_PENDING_TRANSFERS: usize = 64;

/// A message between the shards of one process. The runtime carries it over bounded SPSC
/// queues ([`ServiceState::take_messages`] on one shard, [`ServiceState::on_message`] on the
/// other); it is never dropped. Each variant's payload is boxed so that a message is 16 bytes:
/// the queues are allocated at start, n·(n−1)·`move_queue` slots of this size, and
/// messages are rare (one per subscription of a cross-shard TransferSubscriptions), so one
/// allocation per message is cheaper than slots sized for the largest payload.
#[derive(Debug)]
pub enum ShardMessage {
    /// Cross-shard TransferSubscriptions: another shard asks for one of this shard's
    /// subscriptions.
    TransferRequest(Box<TransferRequest>),
    /// The answer to a [`ShardMessage::TransferRequest`].
    TransferReply(Box<TransferReply>),
}

/// Shard `from` asks for subscription `sub_id` for a session of its own whose user is
/// `owner`, with room for `max_items` monitored items.
#[derive(Debug)]
pub struct TransferRequest {
    pub from: usize,
    pub ticket: u64,
    pub index: usize,
    pub sub_id: u32,
    pub owner: String,
    pub max_items: usize,
}

/// The subscription with everything it holds, or why not.
#[derive(Debug)]
pub struct TransferReply {
    pub ticket: u64,
    pub index: usize,
    pub result: Result<crate::subscription::MovedSubscription, StatusCode>,
}

/// A TransferSubscriptions request waiting for replies from other shards.
#[derive(Debug)]
pub struct PendingTransfer {
    key: SessionKey,
    channel_id: u32,
    request_id: u32,
    request_handle: u32,
    send_initial_values: bool,
    /// One per requested id; `None` while another shard has not replied.
    results: Vec<Option<crate::generated::types::TransferResult>>,
    /// Subscriptions and items reserved here for the replies still to come.
    reserved_subs: usize,
    reserved_items: usize,
}

impl PendingTransfer {
    pub fn new(
        key: SessionKey,
        channel_id: u32,
        request_id: u32,
        request_handle: u32,
        send_initial_values: bool,
        results: Vec<Option<crate::generated::types::TransferResult>>,
    ) -> PendingTransfer {
        PendingTransfer {
            key,
            channel_id,
            request_id,
            request_handle,
            send_initial_values,
            results,
            reserved_subs: 0,
            reserved_items: 0,
        }
    }
}

/// Why a request's authentication token was not accepted.
pub type SessionResult<T> = Result<T, StatusCode>;

impl Drop for ServiceState {
    fn drop(&mut self) {
        // No later version waits for this shard.
        self.shared.model.unregister(self.shard_index);
    }
}

/// Per-shard state. See the module docs.
pub struct ServiceState {
    shared: Arc<ServerShared>,
    shard_index: usize,
    /// Shards of this process (a token naming a shard at or past it is not routable).
    shard_count: usize,
    transport: TransportLimits,
    security: SecurityProvider,
    channel_counter: u32,
    open_channels: u32,
    /// Ids of the channels open now: a new id is never one of them.
    live_channels: std::collections::HashSet<u32>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    live_sessions: usize,
    max_sessions: usize,
    deadlines: BinaryHeap<Reverse<(u64, u32, u32)>>,
    subscriptions: SubscriptionEngine,
    /// Requests waiting for the application (asynchronous sources, writes, methods).
    deferrals: crate::server::deferred::Deferrals,
    /// Spare Read/Write request and response memory (bounded; see the module).
    pub(crate) recycler: Recycler,
    /// Nonces, tokens, session ids, continuation points (see the module docs).
    random: Box<dyn Random + Send>,
    /// What the runtime's budget leaves for decoding a request (see
    /// [`ServiceState::set_memory_headroom`]).
    memory_headroom: usize,
    /// Messages for other shards, taken by the runtime (bounded by the pending transfers of
    /// this shard and the requests of the others).
    outgoing: Vec<(usize, ShardMessage)>,
    /// TransferSubscriptions waiting for other shards, by ticket.
    transfers: std::collections::HashMap<u64, PendingTransfer>,
    transfer_ticket: u64,
    /// Subscriptions and items promised to transfers under way (counted against the limits).
    transfer_reserved_subs: usize,
    transfer_reserved_items: usize,
    /// Handshake jobs go to the runtime (its helper pool) instead of running inline.
    offload_handshakes: bool,
    /// The job the last session service left for its connection.
    parked_job: Option<crate::server::handshake::HandshakeJob>,
    /// When the diagnostics snapshot was last built ([`crate::server::diagnostics`]).
    pub(crate) diag: crate::server::diagnostics::Refresh,
}

impl ServiceState {
    /// State for shard `shard_index` (0-based, < [`MAX_SHARDS`]). Allocates the session
    /// pool's bookkeeping for `config.sessions.max_sessions_per_shard` sessions. `random`
    /// must be a CSPRNG in a server (its bytes become nonces and session tokens).
    ///
    /// # Panics
    /// When `shard_index >= MAX_SHARDS` (a configuration error caught at start).
    pub fn new(
        shared: Arc<ServerShared>,
        shard_index: usize,
        random: Box<dyn Random + Send>,
    ) -> ServiceState {
        assert!(
            shard_index < MAX_SHARDS,
            "shard index {shard_index} >= {MAX_SHARDS}"
        );
        let max_sessions =
            (shared.config.sessions.max_sessions_per_shard as usize).clamp(1, 0xFF_FFFF);
        shared
            .metrics
            .shard(shard_index)
            .active
            .store(true, std::sync::atomic::Ordering::Relaxed);
        // This shard holds the version it was made with (and later acknowledges each new
        // one): a removed node's index is not reused while it may still have items on it.
        let shared = match shared.model.version() == shared.address_space.version() {
            true => shared,
            false => Arc::new(shared.with_space(shared.model.load())),
        };
        shared
            .model
            .register(shard_index, shared.address_space.version());
        ServiceState {
            recycler: Recycler::default(),
            shard_index,
            shard_count: 1,
            transport: TransportLimits::default(),
            security: SecurityProvider::none_only(),
            channel_counter: 0,
            open_channels: 0,
            live_channels: std::collections::HashSet::new(),
            slots: Vec::with_capacity(max_sessions),
            free_slots: Vec::with_capacity(max_sessions),
            live_sessions: 0,
            max_sessions,
            deadlines: BinaryHeap::with_capacity(2 * max_sessions + 1),
            subscriptions: {
                let mut e = SubscriptionEngine::new(
                    shared.config.subscriptions.clone(),
                    shard_index,
                    shared.address_space.changes().clone(),
                );
                e.set_async_samples_max(
                    shared
                        .config
                        .operation_limits
                        .max_async_operations_per_shard as usize,
                );
                e
            },
            deferrals: crate::server::deferred::Deferrals::new(
                shared
                    .config
                    .operation_limits
                    .max_async_operations_per_shard as usize,
            ),
            memory_headroom: usize::MAX,
            offload_handshakes: false,
            parked_job: None,
            diag: Default::default(),
            shared,
            random,
            outgoing: Vec::new(),
            transfers: std::collections::HashMap::new(),
            transfer_ticket: 0,
            transfer_reserved_subs: 0,
            transfer_reserved_items: 0,
        }
    }

    /// The runtime tells the shard how many bytes its aggregate memory budget has left
    /// before it hands over received bytes; a request that would decode to more is
    /// answered BadResourceUnavailable ([`ConnectionHost::memory_headroom`]).
    pub fn set_memory_headroom(&mut self, bytes: usize) {
        self.memory_headroom = bytes;
    }

    /// This shard's counters (the metrics endpoint, ServerDiagnostics).
    #[inline]
    pub fn metrics(&self) -> &crate::metrics::ShardMetrics {
        self.shared.metrics.shard(self.shard_index)
    }

    /// Publishes the gauges and the subscription engine's counts to this shard's counters
    /// (the runtime calls it once per loop iteration: a few relaxed stores), and the
    /// diagnostics snapshot when it is due ([`crate::server::diagnostics`]).
    pub fn publish_metrics(&mut self) {
        self.publish_counters();
        self.refresh_diagnostics();
    }

    fn publish_counters(&self) {
        use crate::metrics::ShardMetrics as M;
        let m = self.metrics();
        let e = self.subscriptions.stats();
        M::set(&m.sessions, self.live_sessions as u64);
        M::set(
            &m.subscriptions,
            self.subscriptions.subscription_count() as u64,
        );
        M::set(
            &m.monitored_items,
            self.subscriptions.monitored_item_count() as u64,
        );
        M::set(&m.notifications, e.notifications);
        M::set(&m.notification_messages, e.messages);
        M::set(&m.keep_alives, e.keep_alives);
        M::set(&m.queue_overflows, e.overflows);
        M::set(&m.samples, e.samples);
        M::set(&m.subscriptions_expired, e.expired);
        M::set(&m.events_missed, e.events_missed);
    }

    /// The number of shards of the process (default 1). An ActivateSession whose token names
    /// another shard below it is handed to that shard with its connection
    /// ([`ConnectionHost::session_owner`]); with 1 it is answered here (BadSessionIdInvalid).
    pub fn with_shard_count(mut self, shard_count: usize) -> ServiceState {
        self.shard_count = shard_count.clamp(1, MAX_SHARDS);
        self
    }

    /// Hands handshake work (RSA, certificate validation, argon2id) to the runtime as jobs
    /// (see [`crate::server::handshake`]) instead of running it inline (the default).
    pub fn with_handshake_offload(mut self, on: bool) -> ServiceState {
        self.offload_handshakes = on;
        self
    }

    pub fn offloads_handshakes(&self) -> bool {
        self.offload_handshakes
    }

    /// Leaves a session service's job for its connection ([`ConnectionHost::take_job`]).
    pub(crate) fn park_job(&mut self, job: crate::server::handshake::HandshakeJob) {
        debug_assert!(
            self.parked_job.is_none(),
            "a parked handshake job was not taken"
        );
        self.parked_job = Some(job);
    }

    /// Uses these transport limits (default: `TransportLimits::default()`); they bound the
    /// shard's channels and are what CreateSession reports as maxRequestMessageSize.
    pub fn with_transport_limits(mut self, limits: TransportLimits) -> ServiceState {
        self.transport = limits;
        self
    }

    /// Uses these security policies and endpoint (policy, mode) pairs (default: None only);
    /// GetEndpoints and CreateSession advertise one endpoint per pair.
    pub fn with_security(mut self, security: SecurityProvider) -> ServiceState {
        self.security = security;
        self
    }

    /// Replaces the security provider (a new own certificate, Part 12 push management): the
    /// channels opened from now on use it. Channels already open keep the crypto they
    /// negotiated; their sessions' certificate and signatures come from the new one, so the
    /// runtime should close those channels once the change was answered.
    pub fn set_security(&mut self, security: SecurityProvider) {
        self.security = security;
    }

    pub fn shared(&self) -> &Arc<ServerShared> {
        &self.shared
    }

    /// The shard's random number generator.
    pub fn random(&mut self) -> &mut dyn Random {
        &mut *self.random
    }

    pub fn transport_limits(&self) -> &TransportLimits {
        &self.transport
    }

    pub fn security(&self) -> &SecurityProvider {
        &self.security
    }

    /// Secure channels handed out by [`ConnectionHost::open_channel`] and not yet closed.
    pub fn open_channel_count(&self) -> u32 {
        self.open_channels
    }

    pub fn shard_index(&self) -> usize {
        self.shard_index
    }

    /// The number of shards of the process ([`ServiceState::with_shard_count`]).
    pub fn shard_count(&self) -> usize {
        self.shard_count
    }

    /// Is `shard` another shard of this process that connections and subscriptions can be
    /// handed to? Never when the shard count was not set to include this shard itself (a
    /// `ServiceState` built alone, as tests do, answers everything here).
    pub fn routes_to(&self, shard: usize) -> bool {
        self.shard_index < self.shard_count && shard != self.shard_index && shard < self.shard_count
    }

    /// Asks the owning shards for the subscriptions of a TransferSubscriptions (`remote`:
    /// position in the request, subscription id, owning shard). Each one first gets room
    /// here (subscriptions of the session and of the shard, monitored items), reserved until
    /// its reply; one that finds none is answered BadTooManySubscriptions without asking.
    /// Returns the response when nothing is left to wait for.
    pub fn start_transfer(
        &mut self,
        mut pending: PendingTransfer,
        owner: String,
        remote: Vec<(usize, u32, usize)>,
        now: Now,
    ) -> Option<Response> {
        if self.transfers.len() >= MAX_PENDING_TRANSFERS {
            return Some(crate::response::fault(
                pending.request_handle,
                StatusCode::BadTooManyOperations,
                now,
            ));
        }
        self.transfer_ticket += 1;
        let ticket = self.transfer_ticket;
        for (index, sub_id, shard) in remote {
            let room = self.subscriptions.import_room(
                pending.key,
                self.transfer_reserved_subs,
                self.transfer_reserved_items,
            );
            match room {
                Ok(max_items) => {
                    self.transfer_reserved_subs += 1;
                    self.transfer_reserved_items += max_items;
                    pending.reserved_subs += 1;
                    pending.reserved_items += max_items;
                    let msg = ShardMessage::TransferRequest(Box::new(TransferRequest {
                        from: self.shard_index,
                        ticket,
                        index,
                        sub_id,
                        owner: owner.clone(),
                        max_items,
                    }));
                    self.outgoing.push((shard, msg));
                }
                Err(status) => {
                    if let Some(r) = pending.results.get_mut(index) {
                        *r = Some(crate::generated::types::TransferResult {
                            status_code: status,
                            ..Default::default()
                        });
                    }
                }
            }
        }
        if pending.results.iter().all(|r| r.is_some()) {
            let results = pending.results.into_iter().flatten().collect();
            return Some(transfer_response(pending.request_handle, results, now));
        }
        self.transfers.insert(ticket, pending);
        None
    }

    /// Messages this shard has for other shards: (target shard, message).
    pub fn take_messages(&mut self, into: &mut Vec<(usize, ShardMessage)>) {
        into.append(&mut self.outgoing);
    }

    /// A message from another shard.
    pub fn on_message(&mut self, msg: ShardMessage, now: Now) {
        self.diag.note_request(now);
        match msg {
            ShardMessage::TransferRequest(r) => {
                let TransferRequest {
                    from,
                    ticket,
                    index,
                    sub_id,
                    owner,
                    max_items,
                } = *r;
                let result = self
                    .subscriptions
                    .export_subscription(&owner, sub_id, max_items, now);
                self.outgoing.push((
                    from,
                    ShardMessage::TransferReply(Box::new(TransferReply {
                        ticket,
                        index,
                        result,
                    })),
                ));
            }
            ShardMessage::TransferReply(r) => {
                let TransferReply {
                    ticket,
                    index,
                    result,
                } = *r;
                self.on_transfer_reply(ticket, index, result, now)
            }
        }
    }

    fn on_transfer_reply(
        &mut self,
        ticket: u64,
        index: usize,
        result: Result<crate::subscription::MovedSubscription, StatusCode>,
        now: Now,
    ) {
        use crate::generated::types::TransferResult;
        let Some(p) = self.transfers.get_mut(&ticket) else {
            return;
        };
        let (key, send_initial_values) = (p.key, p.send_initial_values);
        // This reply's share of the reservation (an even share: each request reserved the
        // room it offered, released here in the order replies come; the totals stay exact).
        let items = p.reserved_items / p.reserved_subs.max(1);
        p.reserved_subs = p.reserved_subs.saturating_sub(1);
        p.reserved_items -= items.min(p.reserved_items);
        self.transfer_reserved_subs = self.transfer_reserved_subs.saturating_sub(1);
        self.transfer_reserved_items = self.transfer_reserved_items.saturating_sub(items);
        let live = self.session(key).is_some();
        let r = match result {
            Ok(moved) => {
                match self
                    .subscriptions
                    .import_subscription(key, moved, send_initial_values, now)
                {
                    Ok(available) => TransferResult {
                        status_code: StatusCode::Good,
                        available_sequence_numbers: available,
                    },
                    Err(s) => TransferResult {
                        status_code: s,
                        ..Default::default()
                    },
                }
            }
            Err(s) => TransferResult {
                status_code: s,
                ..Default::default()
            },
        };
        if !live {
            // The session closed meanwhile: the subscription stays, orphaned, as a closed
            // session's subscriptions do.
            self.subscriptions.on_session_closed(key, false, now);
        }
        let Some(p) = self.transfers.get_mut(&ticket) else {
            return;
        };
        if let Some(slot) = p.results.get_mut(index) {
            *slot = Some(r);
        }
        if p.results.iter().any(|r| r.is_none()) {
            return;
        }
        let Some(p) = self.transfers.remove(&ticket) else {
            return;
        };
        self.transfer_reserved_items = self
            .transfer_reserved_items
            .saturating_sub(p.reserved_items);
        // Answered on the channel the request came on, if the session is still bound to it.
        if self.session(key).and_then(|s| s.channel_id) == Some(p.channel_id) {
            let results = p.results.into_iter().flatten().collect();
            let response = transfer_response(p.request_handle, results, now);
            self.subscriptions
                .emit_response(p.channel_id, p.request_id, response);
        }
    }

    /// A new secure channel id, unique across shards: `shard_index << 24 | counter`, never
    /// 0 and never the id of a channel still open (the 24-bit counter wraps after
    /// 16,777,215 channels; a long-lived channel keeps its id and the counter skips it, so
    /// closing a recycled id can never unbind the sessions of a live channel).
    pub fn next_channel_id(&mut self) -> u32 {
        loop {
            self.channel_counter = (self.channel_counter + 1) & 0xFF_FFFF;
            let id = (self.shard_index as u32) << 24 | self.channel_counter;
            if id != 0 && !self.live_channels.contains(&id) {
                return id;
            }
        }
    }

    /// Starts the channel-id counter at `counter` (tests force the 24-bit wrap with it).
    #[doc(hidden)]
    pub fn set_channel_counter(&mut self, counter: u32) {
        self.channel_counter = counter & 0xFF_FFFF;
    }

    /// Sessions currently held (activated or not).
    pub fn session_count(&self) -> usize {
        self.live_sessions
    }

    /// The size of the session pool.
    pub fn max_sessions(&self) -> usize {
        self.max_sessions
    }

    /// The earliest monotonic time (ns) at which [`ServiceState::on_timer`] has work; it may
    /// find none (the session was used since, or closed), which is harmless.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.model_changed() {
            return Some(0);
        }
        if self.answers_later() {
            if self
                .shared
                .address_space
                .changes()
                .completions_pending(self.shard_index)
            {
                return Some(0);
            }
            if let Some(d) = self.deferrals.next_deadline() {
                let rest = self.next_deadline_sync();
                return Some(rest.map_or(d, |r| r.min(d)));
            }
        }
        self.next_deadline_sync()
    }

    /// Can requests of this shard wait for an answer from another thread (asynchronous
    /// sources, write hooks and methods, or a history store), or does one wait now (a
    /// NodeManagement request at the model writer)?
    fn answers_later(&self) -> bool {
        self.shared.address_space.has_async()
            || self.shared.history.is_some()
            || self.deferrals.requests() > 0
    }

    fn next_deadline_sync(&self) -> Option<u64> {
        let s = self.deadlines.peek().map(|Reverse((d, _, _))| *d);
        [
            s,
            self.subscriptions.next_deadline(),
            self.shared.events.next_shelving_tick(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The subscriptions of this shard.
    pub fn subscriptions(&self) -> &SubscriptionEngine {
        &self.subscriptions
    }

    /// The subscriptions and the shared server state, borrowed together.
    pub fn subscriptions_mut(&mut self) -> (&mut SubscriptionEngine, &ServerShared) {
        (&mut self.subscriptions, &self.shared)
    }

    /// Secure channels with Publish responses ready to send (each listed once until its
    /// responses are taken with [`ConnectionHost::take_deferred`]).
    pub fn take_ready_channels(&mut self, into: &mut Vec<u32>) {
        self.subscriptions.take_ready_channels(into);
    }

    /// Takes the application's answers to this shard's asynchronous operations, times out
    /// the overdue ones, and sends the deferred responses that are complete.
    fn on_async(&mut self, now: Now) {
        let shared = Arc::clone(&self.shared);
        let space = &shared.address_space;
        let mut finished = Vec::new();
        let mut samples = Vec::new();
        let deferrals = &mut self.deferrals;
        space
            .changes()
            .drain_completions(self.shard_index, |c| match c.target {
                crate::address_space::app::Target::Request {
                    slot,
                    generation,
                    op,
                } => {
                    if let Some(f) = deferrals.settle(space, slot, generation, op, c.outcome, now) {
                        finished.push(f);
                    }
                }
                crate::address_space::app::Target::Sample { source, generation } => {
                    samples.push((source, generation, c.outcome))
                }
            });
        deferrals.expire(space, now, &mut finished);
        if !finished.is_empty() {
            // A NodeManagement request answered by the model writer: the session sees its
            // edit in what it asks next.
            self.refresh_model(now);
        }
        for f in finished {
            let mut response = self.finish_deferred(f.kind);
            response.response_header_mut().timestamp = now.utc;
            self.subscriptions
                .emit_response(f.channel_id, f.request_id, response);
        }
        for (source, generation, outcome) in samples {
            self.subscriptions
                .on_sample_done(source, generation, outcome, now);
        }
    }

    /// Makes the response of a finished deferred request. For a HistoryRead, each result
    /// whose `continuation_point` holds a resume token from the store gets a continuation
    /// point of the session instead (or BadNoContinuationPoints, its data dropped, when the
    /// session holds as many as it may or is gone).
    pub(crate) fn finish_deferred(
        &mut self,
        kind: crate::server::deferred::PendingKind,
    ) -> Response {
        let crate::server::deferred::PendingKind::HistoryRead {
            mut response,
            session,
            ops,
        } = kind
        else {
            return kind.into_response();
        };
        let max = self
            .shared()
            .config
            .operation_limits
            .max_history_continuation_points as usize;
        for o in &ops {
            let Some(r) = response.results.get_mut(o.result as usize) else {
                continue;
            };
            if r.continuation_point.as_bytes().is_empty() {
                continue;
            }
            let token = std::mem::take(&mut r.continuation_point)
                .as_bytes()
                .to_vec();
            let added = match self.session_and_random(session) {
                Some((s, random)) => {
                    s.add_history_point(max, o.fingerprint, &o.node_id, token, random)
                }
                None => Err((StatusCode::BadNoContinuationPoints, token)),
            };
            match added {
                Ok(cp) => r.continuation_point = cp,
                Err((s, token)) => {
                    // The backend's point will not be used: it may free what it keeps.
                    if let Some(h) = &self.shared.history {
                        h.release_continuation_point(&o.node_id, token);
                    }
                    *r = crate::generated::types::HistoryReadResult {
                        status_code: s,
                        ..Default::default()
                    }
                }
            }
        }
        Response::HistoryRead(response)
    }

    /// What a service needs to defer a request: the table, the shared state, this shard's
    /// index (for the reply handles).
    pub fn deferred_parts(
        &mut self,
    ) -> (
        &mut crate::server::deferred::Deferrals,
        &Arc<ServerShared>,
        usize,
    ) {
        (&mut self.deferrals, &self.shared, self.shard_index)
    }

    /// Requests waiting for the application now.
    pub fn deferred_requests(&self) -> usize {
        self.deferrals.requests()
    }

    /// Sets the hook that wakes this shard's loop from another thread (the change path
    /// wakes a sleeping shard whose inbox fills up).
    pub fn set_waker(&self, wake: crate::address_space::change::WakeFn) {
        self.shared
            .address_space
            .changes()
            .set_waker(self.shard_index, wake);
    }

    /// Has a newer version of the address space been published than this shard holds?
    #[inline]
    pub fn model_changed(&self) -> bool {
        self.shared.model.version() != self.shared.address_space.version()
    }

    /// Takes the newest version of the address space (at the top of a loop iteration, from
    /// [`ServiceState::on_timer`]): the monitored items of nodes it removed learn of it, and
    /// the shard acknowledges the version (docs/Architecture.md, "Nodes added and removed
    /// while serving").
    pub fn refresh_model(&mut self, now: Now) {
        if !self.model_changed() {
            return;
        }
        let space = self.shared.model.load();
        let held = self.shared.address_space.version();
        for (index, generation) in space.log.removed_after(held) {
            self.subscriptions.node_removed(index, generation, now);
        }
        let version = space.version();
        self.shared = Arc::new(self.shared.with_space(space));
        self.shared.model.ack(self.shard_index, version);
    }

    /// Runs due timers: session timeouts, sampling and publishing cycles.
    pub fn on_timer(&mut self, now: Now) {
        self.diag.now_mono_ns = now.mono_ns;
        self.refresh_model(now);
        if self.answers_later() {
            self.on_async(now);
        }
        self.subscriptions.on_timer(&self.shared, now);
        self.on_session_timer(now);
        // Timed shelvings that ran out (any shard may do it; one does).
        if self
            .shared
            .events
            .next_shelving_tick()
            .is_some_and(|t| t <= now.mono_ns)
        {
            self.shared
                .events
                .shelving_tick(&self.shared.address_space, now);
        }
    }

    /// Closes every session whose timeout passed unused by `now`.
    fn on_session_timer(&mut self, now: Now) {
        while let Some(&Reverse((deadline, slot, generation))) = self.deadlines.peek() {
            if deadline > now.mono_ns {
                break;
            }
            self.deadlines.pop();
            let Some(s) = self.slots.get(slot as usize) else {
                continue;
            };
            if s.generation != generation {
                continue;
            }
            let Some(session) = &s.session else { continue };
            if session.deadline_ns <= now.mono_ns {
                crate::events::audit::publish_session_closed(
                    &self.shared.events,
                    &session.session_id,
                    true,
                    now,
                );
                crate::metrics::ShardMetrics::add(&self.metrics().session_timeouts, 1);
                self.close_session(SessionKey { slot, generation }, false, now);
            } else {
                let d = session.deadline_ns;
                self.deadlines.push(Reverse((d, slot, generation)));
            }
        }
    }

    /// The secure channel `channel_id` closed: its sessions become unbound. They survive
    /// until their timeout, so the client can activate them on a new channel.
    pub fn on_channel_closed(&mut self, channel_id: u32) {
        self.subscriptions.on_channel_closed(channel_id);
        // One pass over the pool; a channel close is rare compared to requests.
        for s in self.slots.iter_mut() {
            if let Some(session) = &mut s.session {
                if session.channel_id == Some(channel_id) {
                    session.channel_id = None;
                }
            }
        }
    }

    /// Allocates a session bound to `channel_id`. BadTooManySessions when the pool is full.
    /// The caller fills in the CreateSession details through [`ServiceState::session_mut`].
    pub fn create_session(
        &mut self,
        channel_id: u32,
        security_policy_uri: &str,
        timeout_ms: f64,
        now: Now,
    ) -> SessionResult<SessionKey> {
        if self.live_sessions >= self.max_sessions {
            return Err(StatusCode::BadTooManySessions);
        }
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                if self.slots.len() >= self.max_sessions {
                    return Err(StatusCode::BadTooManySessions);
                }
                self.slots.push(Slot {
                    generation: 0,
                    session: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let mut token = [0u8; AUTH_TOKEN_LEN];
        token[0..2].copy_from_slice(&(self.shard_index as u16).to_le_bytes());
        token[2..6].copy_from_slice(&slot.to_le_bytes());
        self.random.fill(&mut token[6..]);
        let max_cps = self
            .shared
            .config
            .operation_limits
            .max_browse_continuation_points as usize;
        let mut session = Session {
            session_id: NodeId::guid(1, Guid::random(&mut *self.random)),
            authentication_token: NodeId::byte_string(0, token.to_vec()),
            name: UaString::null(),
            client_description: ApplicationDescription::default(),
            client_certificate: ByteString::null(),
            channel_certificate: ByteString::null(),
            channel_id: Some(channel_id),
            security_policy_uri: security_policy_uri.to_owned(),
            identity: None,
            timeout_ms,
            last_use_ns: now.mono_ns,
            deadline_ns: 0,
            server_nonce: ByteString::from(crate::random::bytes(&mut *self.random, 32)),
            ecdh_policy_uri: None,
            ephemeral_key: None,
            locale_ids: Vec::new(),
            max_response_message_size: 0,
            diagnostics: crate::server::diagnostics::SessionDiagnostics::new(now),
            continuation_points: VecDeque::with_capacity(max_cps.min(64)),
            history_points: VecDeque::new(),
            cp_counter: 0,
            request_seq: 0,
        };
        session.touch(now);
        // `slot` was just taken from the free list or pushed.
        let Some(s) = self.slots.get_mut(slot as usize) else {
            return Err(StatusCode::BadInternalError);
        };
        s.generation = s.generation.wrapping_add(1);
        let key = SessionKey {
            slot,
            generation: s.generation,
        };
        self.deadlines
            .push(Reverse((session.deadline_ns, slot, s.generation)));
        s.session = Some(session);
        self.live_sessions += 1;
        crate::metrics::ShardMetrics::add(&self.metrics().sessions_created, 1);
        if self.deadlines.len() > 2 * self.max_sessions {
            self.compact_deadlines();
        }
        Ok(key)
    }

    /// Rebuilds the deadline heap from the live sessions (drops stale entries).
    fn compact_deadlines(&mut self) {
        self.deadlines.clear();
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(session) = &s.session {
                self.deadlines
                    .push(Reverse((session.deadline_ns, i as u32, s.generation)));
            }
        }
    }

    /// The session a token names, whatever channel it is bound to, if it is live and has
    /// not timed out by `now` (an expired one is closed here, before the timer gets to it).
    /// Does not touch it.
    pub fn find_session(&mut self, token: &NodeId, now: Now) -> SessionResult<SessionKey> {
        let (shard, slot) = token_parts(token).ok_or(StatusCode::BadSessionIdInvalid)?;
        if shard != self.shard_index {
            // Owned by another shard: the connection is handed there before dispatch
            // (`ConnectionHost::session_owner`); a request that still gets here (another
            // service, or a shard that does not exist) does not name a session of ours.
            return Err(StatusCode::BadSessionIdInvalid);
        }
        let s = self
            .slots
            .get(slot as usize)
            .ok_or(StatusCode::BadSessionIdInvalid)?;
        let session = s.session.as_ref().ok_or(StatusCode::BadSessionIdInvalid)?;
        let (Identifier::ByteString(a), Identifier::ByteString(b)) =
            (&session.authentication_token.identifier, &token.identifier)
        else {
            return Err(StatusCode::BadSessionIdInvalid);
        };
        if !ct_eq(a, b) {
            return Err(StatusCode::BadSessionIdInvalid);
        }
        let key = SessionKey {
            slot,
            generation: s.generation,
        };
        if session.deadline_ns <= now.mono_ns {
            crate::metrics::ShardMetrics::add(&self.metrics().session_timeouts, 1);
            self.close_session(key, false, now);
            return Err(StatusCode::BadSessionIdInvalid);
        }
        Ok(key)
    }

    /// The session for a request other than Create/ActivateSession: the token must name a
    /// live session bound to `channel_id` (else BadSessionIdInvalid). Touches it, and
    /// returns what the services need of it, read once: its key, whether it is activated and
    /// its user's roles (activation is not checked here).
    pub fn session_for_request(
        &mut self,
        token: &NodeId,
        channel_id: u32,
        now: Now,
    ) -> SessionResult<RequestSession> {
        let key = self.find_session(token, now)?;
        let session = self
            .session_mut(key)
            .ok_or(StatusCode::BadSessionIdInvalid)?;
        if session.channel_id != Some(channel_id) {
            return Err(StatusCode::BadSessionIdInvalid);
        }
        session.touch(now);
        Ok(RequestSession {
            key,
            activated: session.is_activated(),
            roles: session
                .identity
                .as_ref()
                .map_or(crate::roles::Roles::NONE, UserIdentity::roles),
        })
    }

    pub fn session(&self, key: SessionKey) -> Option<&Session> {
        let s = self.slots.get(key.slot as usize)?;
        if s.generation != key.generation {
            return None;
        }
        s.session.as_ref()
    }

    /// The session and the shard's random number generator, borrowed together.
    pub fn session_and_random(
        &mut self,
        key: SessionKey,
    ) -> Option<(&mut Session, &mut dyn Random)> {
        let slot = self.slots.get_mut(key.slot as usize)?;
        if slot.generation != key.generation {
            return None;
        }
        let session = slot.session.as_mut()?;
        Some((session, &mut *self.random))
    }

    pub fn session_mut(&mut self, key: SessionKey) -> Option<&mut Session> {
        let s = self.slots.get_mut(key.slot as usize)?;
        if s.generation != key.generation {
            return None;
        }
        s.session.as_mut()
    }

    /// The shared server state, one session and the shard's random number generator,
    /// borrowed together (services read the address space while they update the session).
    pub fn shared_and_session(
        &mut self,
        key: SessionKey,
    ) -> Option<(&ServerShared, &mut Session, &mut dyn Random)> {
        let s = self.slots.get_mut(key.slot as usize)?;
        if s.generation != key.generation {
            return None;
        }
        Some((&self.shared, s.session.as_mut()?, &mut *self.random))
    }

    /// Closes a session: its continuation points are released (a HistoryRead's to the
    /// history backend, which may keep something for it) and its slot freed; its
    /// subscriptions stay (orphaned) until their lifetime ends or a transfer takes them.
    /// Returns false when the key no longer names a session.
    pub fn remove_session(&mut self, key: SessionKey) -> bool {
        self.close_session(key, false, Now::new(0, crate::types::DateTime::NULL))
    }

    /// Closes a session; `delete_subscriptions` as in CloseSession. Its queued Publish
    /// requests are answered Bad_SessionClosed (stamped `now`).
    pub fn close_session(&mut self, key: SessionKey, delete_subscriptions: bool, now: Now) -> bool {
        let Some(s) = self.slots.get_mut(key.slot as usize) else {
            return false;
        };
        if s.generation != key.generation {
            return false;
        }
        let Some(session) = s.session.as_mut() else {
            return false;
        };
        let points = session.take_history_points();
        if let Some(h) = &self.shared.history {
            for cp in points {
                h.release_continuation_point(&cp.node_id, cp.token);
            }
        }
        self.subscriptions
            .on_session_closed(key, delete_subscriptions, now);
        let Some(s) = self.slots.get_mut(key.slot as usize) else {
            return false;
        };
        s.session = None;
        self.free_slots.push(key.slot);
        self.live_sessions -= 1;
        true
    }

    /// Every live session (for diagnostics and tests).
    pub fn sessions(&self) -> impl Iterator<Item = &Session> {
        self.slots.iter().filter_map(|s| s.session.as_ref())
    }

    /// Every live session with its key.
    pub fn sessions_with_keys(&self) -> impl Iterator<Item = (SessionKey, &Session)> {
        self.slots.iter().enumerate().filter_map(|(i, s)| {
            let key = SessionKey {
                slot: i as u32,
                generation: s.generation,
            };
            s.session.as_ref().map(|session| (key, session))
        })
    }
}

/// The shard's side of hosting its connections: channel ids, counts and limits, buffers,
/// parked handshake jobs. [`ConnectionHost`] is implemented for the shard in
/// `services::host` with these, and routes every request to the services.
impl ServiceState {
    pub(crate) fn open_channel(&mut self) -> Result<u32, StatusCode> {
        if self.open_channels >= self.transport.max_channels_per_shard {
            return Err(StatusCode::BadTcpNotEnoughResources);
        }
        self.open_channels += 1;
        let id = self.next_channel_id();
        self.live_channels.insert(id);
        Ok(id)
    }

    pub(crate) fn channel_policy(&mut self, policy_uri: &str, opened: bool) {
        use crate::metrics::{policy_index, ShardMetrics};
        let m = self.metrics();
        let i = policy_index(policy_uri);
        ShardMetrics::add(
            if opened {
                &m.channels_opened[i]
            } else {
                &m.channels_closed[i]
            },
            1,
        );
    }

    pub(crate) fn session_owner(&self, authentication_token: &NodeId) -> Option<usize> {
        token_shard(authentication_token).filter(|&s| self.routes_to(s))
    }

    pub(crate) fn adopt_channel(&mut self, channel_id: u32) -> Result<(), StatusCode> {
        if self.open_channels >= self.transport.max_channels_per_shard
            || self.live_channels.contains(&channel_id)
        {
            return Err(StatusCode::BadTcpNotEnoughResources);
        }
        self.open_channels += 1;
        self.live_channels.insert(channel_id);
        Ok(())
    }

    pub(crate) fn channel_closed(&mut self, channel_id: u32) {
        self.open_channels = self.open_channels.saturating_sub(1);
        self.live_channels.remove(&channel_id);
        self.on_channel_closed(channel_id);
    }

    pub(crate) fn take_deferred(
        &mut self,
        channel_id: u32,
        into: &mut Vec<(u32, crate::server::context::Deferred)>,
    ) {
        self.subscriptions.take_responses(channel_id, into);
    }

    pub(crate) fn memory_headroom(&self) -> usize {
        self.memory_headroom
    }

    pub(crate) fn session_max_response_size(&self, authentication_token: &NodeId) -> u32 {
        let Some((shard, slot)) = token_parts(authentication_token) else {
            return 0;
        };
        if shard != self.shard_index {
            return 0;
        }
        let Some(session) = self
            .slots
            .get(slot as usize)
            .and_then(|s| s.session.as_ref())
        else {
            return 0;
        };
        match (
            &session.authentication_token.identifier,
            &authentication_token.identifier,
        ) {
            (Identifier::ByteString(a), Identifier::ByteString(b)) if ct_eq(a, b) => {
                session.max_response_message_size
            }
            _ => 0,
        }
    }

    pub(crate) fn recycle_buffer(&mut self, buf: Vec<u8>) {
        self.subscriptions.recycle_buffer(buf);
    }

    pub(crate) fn recycler(&mut self) -> Option<&mut Recycler> {
        Some(&mut self.recycler)
    }

    pub(crate) fn offload_handshakes(&self) -> bool {
        self.offload_handshakes
    }

    pub(crate) fn take_job(&mut self) -> Option<crate::server::handshake::HandshakeJob> {
        self.parked_job.take()
    }

    /// Counts a request for the diagnostics (a resumed handshake's, which bypassed dispatch).
    pub(crate) fn note_request(&mut self, now: Now) {
        self.diag.note_request(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_and_token_layout() {
        assert_eq!(channel_shard(3 << 24 | 17), 3);
        let mut b = vec![0u8; AUTH_TOKEN_LEN];
        b[0] = 7;
        b[2] = 9;
        let t = NodeId::byte_string(0, b);
        assert_eq!(token_parts(&t), Some((7, 9)));
        assert_eq!(token_shard(&NodeId::ns0(5)), None);
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
