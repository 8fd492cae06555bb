//! One mirrored server, as the gateway's client: its connection, session and subscription,
//! its mirror (built from a [`Crawl`] and refreshed), the monitored items the demand asks
//! for, the values and events it reports, and the Reads, Writes, Calls, HistoryReads and
//! HistoryUpdates forwarded to it.
//!
//! Everything here runs on the gateway thread, driven by [`super::handler`]: bytes in
//! ([`Downstream::on_recv`]), timers ([`Downstream::on_timer`]), the demand of the shards
//! ([`Downstream::demand`]) and forwarded operations ([`Downstream::forward`]); bytes out
//! collect in [`Downstream::out`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use uaring_core::address_space::app::{
    AppMethod, AsyncCall, AsyncRead, AsyncSource, AsyncWrite, AsyncWriteHook, MethodHandler,
    ReadThrough,
};
use uaring_core::address_space::change::Demand;
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::events::{Event, EventField};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::node_ids as ids;
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, ApplicationDescription, ApplicationType,
    BrowsePath, CallMethodRequest, CallRequest, CloseSessionRequest, ContentFilter,
    CreateMonitoredItemsRequest, CreateSessionRequest, CreateSubscriptionRequest,
    DataChangeNotification, DeleteMonitoredItemsRequest, EventFilter, EventNotificationList,
    HistoryEvent, HistoryReadRequest, HistoryReadValueId, HistoryUpdateRequest,
    MessageSecurityMode, ModifyMonitoredItemsRequest, MonitoredItemCreateRequest,
    MonitoredItemModifyRequest, MonitoringMode, MonitoringParameters, NodeClass, PublishRequest,
    ReadEventDetails, ReadRequest, ReadValueId, RelativePath, RelativePathElement, RequestHeader,
    SignatureData, SimpleAttributeOperand, StatusChangeNotification, SubscriptionAcknowledgement,
    TimestampsToReturn, TransferSubscriptionsRequest, TranslateBrowsePathsToNodeIdsRequest,
    UserNameIdentityToken, UserTokenType, WriteRequest, WriteValue,
};
use uaring_core::history::{HistoryReply, HistoryUpdateReply, ReadDetails, UpdateDetails};
use uaring_core::types::{
    ByteString, DataValue, DateTime, ExtensionObject, LocalizedText, NodeId, QualifiedName,
    StatusCode, UaString, Variant,
};
use uaring_core::Now;

use super::build;
use super::config::{GatewayConfig, Root, ServerConfig};
use super::crawl::{Crawl, Found2, Job};
use super::names::Names;
use super::{away_value, Forward, Host, ServerStatus, Shared, State};
use crate::handler::ConnId;

/// The gateway's own namespace (the servers' folders and their status Properties).
pub const GATEWAY_URI: &str = "urn:uaring:gateway";

/// Publish requests kept at the server.
const PUBLISH_OUT: usize = 3;
/// Monitored item requests out at once.
const ITEM_REQUESTS_OUT: usize = 8;
/// Nodes per edit when a mirror is added (each edit is one GeneralModelChangeEvent).
const NODES_PER_EDIT: usize = 5_000;
/// The client handle of the event item (the data items' handles are their Variables'
/// indexes + 1, far below it). Neither 0 nor u32::MAX: node-opcua takes both for "no handle"
/// and reports such an item's notifications with handle 0.
const EVENT_HANDLE: u32 = u32::MAX - 1;

/// What a caller gets for an answer that was not good: the server's bad status, or
/// BadInternalError when the server said Good (or Uncertain) without the result.
fn refusal(s: StatusCode) -> StatusCode {
    if s.is_bad() {
        s
    } else {
        StatusCode::BadInternalError
    }
}

/// The client handle of the data item of Variable `slot` (never 0, see [`EVENT_HANDLE`]).
fn data_handle(slot: u32) -> u32 {
    slot + 1
}

/// The Variable slot a data item's client handle names.
fn slot_of(handle: u32) -> Option<usize> {
    handle.checked_sub(1).map(|s| s as usize)
}
/// ConditionType (namespace 0).
const CONDITION_TYPE: u32 = 2782;
/// ShelvedStateMachineType (namespace 0): an alarm's ShelvingState.
const SHELVED_STATE_MACHINE_TYPE: u32 = 2929;
/// What the EventIds of a server's events passed on begin with, before its number
/// ([`Downstream::event_tag`]) and the server's own EventId.
const EVENT_ID_PREFIX: &[u8; 2] = b"gw";
/// The keep-alive the gateway's subscription asks for, ms.
const KEEP_ALIVE_MS: f64 = 5_000.0;

/// What a response answers.
enum Pending {
    CreateSession,
    ActivateSession {
        resume: bool,
    },
    Info,
    Crawl(Job),
    CreateSubscription,
    Transfer,
    EventItem,
    CreateItems(Vec<u32>),
    ModifyItems(Vec<u32>),
    DeleteItems(Vec<(u32, u32)>),
    Publish,
    /// Values read after a resumed session: (var, the epoch when the read was sent).
    Refresh(Vec<u32>, u64),
    Read(Vec<(u32, AsyncRead)>),
    /// A Write and the var it writes (u32::MAX when unknown).
    Write(u32, AsyncWrite),
    Call(AsyncCall),
    /// A share of the browse paths of `monitor`, translated.
    Monitor,
    /// A forwarded HistoryRead operation, sent in session `session`; an event read's
    /// fields are put back together by `events`, at most `max` events.
    History {
        reply: HistoryReply,
        session: u64,
        events: Option<(super::history::EventSelect, u32)>,
    },
    /// A forwarded HistoryUpdate operation.
    HistoryUpdate(HistoryUpdateReply),
    CloseSession,
    /// A continuation point released on the server (its answer is not needed).
    HistoryRelease,
    /// CreateSession, ActivateSession of the session of `identities` entry `i`.
    IdentCreate(u16),
    IdentActivate(u16),
}

impl Pending {
    /// The service it waits on, for the log.
    fn service(&self) -> &'static str {
        match self {
            Pending::CreateSession | Pending::IdentCreate(_) => "CreateSession",
            Pending::ActivateSession { .. } | Pending::IdentActivate(_) => "ActivateSession",
            Pending::Info | Pending::Refresh(..) | Pending::Read(_) => "Read",
            Pending::Crawl(_) => "crawl (Browse or Read)",
            Pending::CreateSubscription => "CreateSubscription",
            Pending::Transfer => "TransferSubscriptions",
            Pending::EventItem | Pending::CreateItems(_) => "CreateMonitoredItems",
            Pending::ModifyItems(_) => "ModifyMonitoredItems",
            Pending::DeleteItems(_) => "DeleteMonitoredItems",
            Pending::Publish => "Publish",
            Pending::Write(..) => "Write",
            Pending::Call(_) => "Call",
            Pending::Monitor => "TranslateBrowsePathsToNodeIds",
            Pending::History { .. } | Pending::HistoryRelease => "HistoryRead",
            Pending::HistoryUpdate(_) => "HistoryUpdate",
            Pending::CloseSession => "CloseSession",
        }
    }
}

struct Out {
    what: Pending,
    deadline_ns: u64,
    /// The session it was sent on: [`MAIN`], or an `identities` entry's.
    ident: u16,
}

/// [`Out::ident`] of a request of the main session.
const MAIN: u16 = u16::MAX;
/// An identity the server refused at login (or could not log in): its operations get that
/// refusal at once for this long, then it is tried again.
const IDENT_RETRY_NS: u64 = 5_000_000_000;
/// Most operations waiting for one identity's session to be activated (one more is
/// answered BadResourceUnavailable).
const IDENT_WAITING_MAX: usize = 1_024;

/// Where the session of one `identities` entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IdentState {
    Closed,
    Creating,
    Activating,
    Ready,
}

/// The session on the server of one `identities` entry (docs/Gateway.md "Identity
/// mapping"): opened on the gateway's secure channel when a caller mapped to it first
/// forwards an operation, closed after `identity_idle_ms` unused.
struct IdentSession {
    state: IdentState,
    info: Option<SessionInfo>,
    /// Operations waiting for the session to be activated.
    waiting: Vec<Forward>,
    /// Operations out on it.
    busy: u32,
    last_use_ns: u64,
    /// Refused at login: (the server's status, until when it is given at once).
    refused: Option<(StatusCode, u64)>,
    /// Its number (continuation points of history reads belong to it), as
    /// [`Downstream::session_number`].
    number: u64,
    /// Closed when unused this long: `identity_idle_ms`, at most half the session timeout
    /// the server granted.
    idle_ns: u64,
}

impl IdentSession {
    fn new() -> IdentSession {
        IdentSession {
            state: IdentState::Closed,
            info: None,
            waiting: Vec::new(),
            busy: 0,
            last_use_ns: 0,
            refused: None,
            number: 0,
            idle_ns: u64::MAX,
        }
    }

    /// Unused (nothing out, nothing waiting) and activated: may be closed.
    fn idle(&self) -> bool {
        self.state == IdentState::Ready && self.busy == 0 && self.waiting.is_empty()
    }
}

/// Answers a forwarded operation with `s` (nothing sent).
pub(super) fn fail(f: Forward, s: StatusCode) {
    match f {
        Forward::Read { read, .. } => read.fail(s),
        Forward::Write { write, .. } => write.complete(s),
        Forward::Call { call, .. } => call.complete(Err(s)),
        Forward::History { reply, .. } => reply.fail(s),
        Forward::HistoryUpdate { reply, .. } => reply.fail(s),
        Forward::HistoryRelease { .. } => {}
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Not connected; dial at `retry_at`.
    Waiting,
    /// The dialer is connecting (tag).
    Dialing,
    /// The secure channel is opening.
    Channel,
    /// CreateSession / ActivateSession / the server's information.
    Session,
    /// Activated: crawls, items, publishing, forwarding.
    Running,
}

struct SessionInfo {
    auth: NodeId,
    server_nonce: ByteString,
    server_certificate: ByteString,
    /// The user token policies the server's endpoints offer.
    policies: Vec<uaring_core::generated::types::UserTokenPolicy>,
}

/// A mirrored Variable's monitored item on the server.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Item {
    id: u32,
    /// What the gateway asked for (the demand then).
    asked: (f64, u32),
    /// What the server granted.
    sampling_ms: f64,
    queue_size: u32,
}

/// A mirrored Variable (its slot is the client handle of its item on the server).
struct Var {
    index: u32,
    generation: u32,
    remote: NodeId,
    fresh: Arc<AtomicU64>,
    /// Each shard's demand (shards with items only).
    shards: Vec<(u16, Demand)>,
    item: Option<Item>,
    /// A create, modify or delete of its item is out.
    busy: bool,
    dirty: bool,
    /// Its node was removed (a refresh): the slot is freed once its item is gone.
    removed: bool,
    /// The epoch of the last value the server reported for it.
    notified: u64,
    /// The server refused an item for it (status kept; not asked again until the demand
    /// changes).
    refused: bool,
    /// The parameters of the create or modify out.
    asked: (f64, u32),
    /// Kept monitored whatever the demand (`monitor`), at this sampling interval, ms.
    pinned: Option<f64>,
}

impl Var {
    /// What the shards ask for together: (fastest interval, deepest queue), or `None` when
    /// no item here watches the node.
    fn want(&self) -> Option<(f64, u32)> {
        if self.removed || (self.shards.is_empty() && self.pinned.is_none()) {
            return None;
        }
        let sampling = self
            .shards
            .iter()
            .map(|(_, d)| d.sampling_ms)
            .chain(self.pinned)
            .fold(f64::INFINITY, f64::min)
            .max(0.0);
        let queue = self
            .shards
            .iter()
            .map(|(_, d)| d.queue_size)
            .max()
            .unwrap_or(1)
            .max(1);
        Some((sampling, queue))
    }
}

/// A mirrored node: its id here, its class, its var slot.
struct Mirrored {
    local: NodeId,
    var: Option<u32>,
}

/// What the gateway thread shares with every server.
pub(super) struct Env<'a> {
    pub host: &'a Host,
    pub shared: &'a Arc<Shared>,
    pub limits: &'a GatewayConfig,
    /// Mirrored Variables by node index: (server, var slot).
    pub by_node: &'a mut std::collections::HashMap<u32, (u32, u32)>,
    /// Items on the servers in all, and mirrored nodes in all.
    pub items_total: &'a mut u64,
    pub nodes_total: &'a mut u64,
    pub companions: &'a Arc<Vec<String>>,
    pub now: Now,
}

/// One mirrored server. See the module documentation.
pub(super) struct Downstream {
    pub id: u32,
    pub cfg: ServerConfig,
    pub status: Arc<ServerStatus>,
    names: Names,
    pub conn: Option<ConnId>,
    pub tag: u64,
    client: Option<ClientConnection>,
    /// Output for the connection, moved to the loop by `flush`.
    pub out: Vec<u8>,
    /// The connection is to be closed (its output sent first).
    pub close: bool,
    phase: Phase,
    backoff_ms: u64,
    retry_at: u64,
    connected_once: bool,
    pending: HashMap<u32, Out>,
    session: Option<SessionInfo>,
    ops: usize,
    // The mirror.
    crawl: Option<Crawl>,
    crawl_wanted: bool,
    crawl_retry_at: u64,
    start_time: Option<DateTime>,
    mirrored_start_time: Option<DateTime>,
    next_refresh_ns: u64,
    mirror: HashMap<NodeId, Mirrored>,
    mirrored_types: HashMap<NodeId, NodeId>,
    gateway_ns: u16,
    folder: Option<NodeId>,
    roots: Vec<NodeId>,
    // Values.
    vars: Vec<Var>,
    var_free: Vec<u32>,
    dirty: Vec<u32>,
    sub: Option<u32>,
    sub_ready: bool,
    sub_asked: bool,
    revised_interval_ms: f64,
    event_item: bool,
    event_asked: bool,
    publish_out: usize,
    acks: Vec<SubscriptionAcknowledgement>,
    item_requests: usize,
    epoch: u64,
    // Forwarding: one source for every read-through of the server (its in-flight bound).
    read_source: Option<Arc<AsyncSource>>,
    status_dirty: bool,
    status_at: u64,
    pub removing: bool,
    /// The session of this connection is one of an earlier connection's, taken over.
    resumed_now: bool,
    /// The number of the gateway's session on the server (new with each CreateSession,
    /// unique in the process): continuation points of forwarded history reads belong to it.
    session_number: u64,
    /// This server's number in the EventIds of its events here (unique in the process).
    event_tag: u64,
    /// `monitor` entries found so far, and the TranslateBrowsePathsToNodeIds requests out.
    monitor_found: Vec<NodeId>,
    monitor_out: usize,
    /// The sessions of the `identities` entries, by entry.
    idents: Vec<IdentSession>,
}

/// Session numbers and servers' event tags (see [`Downstream::session_number`],
/// [`Downstream::event_tag`]): unique in the process.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

fn header(timeout_ms: u32) -> RequestHeader {
    RequestHeader {
        timeout_hint: timeout_ms,
        ..Default::default()
    }
}

/// The parameters of a Variable's item on the server: its client handle, the
/// (sampling interval, queue size) asked for, the newest values kept when the queue is full.
fn parameters(handle: u32, asked: (f64, u32)) -> MonitoringParameters {
    MonitoringParameters {
        client_handle: handle,
        sampling_interval: asked.0,
        filter: ExtensionObject::null(),
        queue_size: asked.1,
        discard_oldest: true,
    }
}

/// The server `tag`'s EventId `theirs` as the EventId of its event here.
pub(super) fn event_id_here(tag: u64, theirs: &[u8]) -> Vec<u8> {
    let mut id = Vec::with_capacity(EVENT_ID_PREFIX.len() + 8 + theirs.len());
    id.extend_from_slice(EVENT_ID_PREFIX);
    id.extend_from_slice(&tag.to_le_bytes());
    id.extend_from_slice(theirs);
    id
}

/// The server's EventId of an EventId here, when it is one of server `tag`'s events.
pub(super) fn event_id_there(tag: u64, ours: &[u8]) -> Option<&[u8]> {
    let rest = ours.strip_prefix(EVENT_ID_PREFIX)?;
    let (t, theirs) = rest.split_at_checked(8)?;
    (t == tag.to_le_bytes() && !theirs.is_empty()).then_some(theirs)
}

/// A parsed NumericRange as text again (`None`: the empty string).
/// An IndexRange for the wire: null when there is none. Part 4 says null for "not used"; a
/// server may parse "" as a range (node-opcua does, and refuses a scalar Write with it:
/// BadTypeMismatch).
fn range_wire(r: &str) -> UaString {
    if r.is_empty() {
        UaString::null()
    } else {
        r.into()
    }
}

fn range_text(r: Option<&uaring_core::address_space::NumericRange>) -> String {
    let Some(r) = r else { return String::new() };
    r.dims
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}:{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn service_result(resp: &Response) -> StatusCode {
    resp.response_header().service_result
}

impl Downstream {
    pub fn new(id: u32, cfg: ServerConfig, status: Arc<ServerStatus>, env: &Env<'_>) -> Self {
        let names = Names::new(&cfg.name, env.companions.clone());
        Downstream {
            id,
            status,
            names,
            conn: None,
            tag: 0,
            client: None,
            out: Vec::new(),
            close: false,
            phase: Phase::Waiting,
            backoff_ms: cfg.reconnect_min_ms,
            retry_at: 0,
            connected_once: false,
            pending: HashMap::new(),
            session: None,
            ops: env.limits.operations_per_request as usize,
            crawl: None,
            crawl_wanted: true,
            crawl_retry_at: 0,
            start_time: None,
            mirrored_start_time: None,
            next_refresh_ns: u64::MAX,
            mirror: HashMap::new(),
            mirrored_types: HashMap::new(),
            gateway_ns: 0,
            folder: None,
            roots: Vec::new(),
            vars: Vec::new(),
            var_free: Vec::new(),
            dirty: Vec::new(),
            sub: None,
            sub_ready: false,
            sub_asked: false,
            revised_interval_ms: 0.0,
            event_item: false,
            event_asked: false,
            publish_out: 0,
            acks: Vec::new(),
            item_requests: 0,
            epoch: 0,
            read_source: None,
            status_dirty: true,
            status_at: 0,
            removing: false,
            resumed_now: false,
            session_number: 0,
            event_tag: SESSIONS.fetch_add(1, Ordering::Relaxed),
            monitor_found: Vec::new(),
            monitor_out: 0,
            idents: cfg.identities.iter().map(|_| IdentSession::new()).collect(),
            cfg,
        }
    }

    fn timeout_ns(&self, env: &Env<'_>) -> u64 {
        u64::from(env.limits.request_timeout_ms) * 1_000_000
    }

    // ---- connection ------------------------------------------------------------------

    /// Time to dial? Returns the host and port when it is, and notes the attempt.
    pub fn want_dial(&mut self, now: Now, tag: u64) -> Option<(String, u16, u64)> {
        if self.phase != Phase::Waiting || self.removing || now.mono_ns < self.retry_at {
            return None;
        }
        let (host, port) = crate::reverse::parse_client_url(&self.cfg.endpoint).ok()?;
        self.phase = Phase::Dialing;
        self.tag = tag;
        self.status.set_state(State::Connecting);
        self.status_dirty = true;
        Some((host, port, self.cfg.connect_timeout_ms))
    }

    /// The dial failed.
    pub fn dial_failed(&mut self, env: &mut Env<'_>, error: &str) {
        if self.phase != Phase::Dialing {
            return;
        }
        self.lost(env, &format!("connect: {error}"));
    }

    /// The dialed socket joined the loop: start the secure channel.
    pub fn opened(&mut self, env: &mut Env<'_>, conn: ConnId) -> Result<(), String> {
        let mut cfg = ClientConfig::new(&self.cfg.endpoint);
        cfg.requested_lifetime_ms = 600_000;
        if self.cfg.security_policy != "None" {
            let policy = uaring_crypto::PolicyId::from_uri(&format!(
                "http://opcfoundation.org/UA/SecurityPolicy#{}",
                self.cfg.security_policy
            ))
            .ok_or("unknown security policy")?;
            let own = env
                .host
                .own
                .clone()
                .ok_or("no application instance certificate (the server offers no RSA policy) for a secured channel")?;
            cfg.policy = uaring_crypto::RsaPolicy::client(policy, own)?;
            cfg.mode = if self.cfg.security_mode == "Sign" {
                MessageSecurityMode::Sign
            } else {
                MessageSecurityMode::SignAndEncrypt
            };
            cfg.server_certificate = Some(read_certificate(&self.cfg.server_certificate)?);
        }
        let random = crate::random::os_seeded().map_err(|e| format!("random: {e}"))?;
        let mut client = ClientConnection::new(cfg, Box::new(random));
        client.start(env.now, &mut self.out);
        self.client = Some(client);
        self.conn = Some(conn);
        self.phase = Phase::Channel;
        Ok(())
    }

    /// The connection is gone (closed by either side).
    pub fn closed(&mut self, env: &mut Env<'_>) {
        self.conn = None;
        let why = match self.client.as_ref().map(|c| c.state()) {
            Some(uaring_core::client::ClientState::Closed(s)) => format!("connection closed: {s}"),
            _ => "connection closed".to_string(),
        };
        if self.phase != Phase::Waiting {
            self.lost(env, &why);
        }
    }

    /// Connection lost or refused: every value goes to its away status, everything out is
    /// answered BadNotConnected, and the next dial is after the back-off.
    fn lost(&mut self, env: &mut Env<'_>, why: &str) {
        tracing::info!(server = %self.cfg.name, "gateway: {why}; dialing again in {} ms", self.backoff_ms);
        self.status.set_error(why);
        if self.connected_once || self.phase == Phase::Dialing {
            self.status.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        self.client = None;
        if self.conn.is_some() {
            self.close = true;
        }
        self.phase = Phase::Waiting;
        self.retry_at = env.now.mono_ns.saturating_add(self.backoff_ms * 1_000_000);
        self.backoff_ms = (self.backoff_ms * 2).min(self.cfg.reconnect_max_ms);
        for (_, o) in self.pending.drain() {
            match o.what {
                Pending::Read(reads) => {
                    for (_, r) in reads {
                        r.fail(StatusCode::BadNotConnected);
                    }
                }
                Pending::Write(_, w) => w.complete(StatusCode::BadNotConnected),
                Pending::Call(c) => c.complete(Err(StatusCode::BadNotConnected)),
                Pending::History { reply, .. } => reply.fail(StatusCode::BadNotConnected),
                Pending::HistoryUpdate(reply) => reply.fail(StatusCode::BadNotConnected),
                Pending::CreateItems(v) | Pending::ModifyItems(v) => {
                    for i in v {
                        if let Some(var) = self.vars.get_mut(i as usize) {
                            var.busy = false;
                        }
                    }
                }
                Pending::DeleteItems(v) => {
                    for (i, _) in v {
                        if let Some(var) = self.vars.get_mut(i as usize) {
                            var.busy = false;
                        }
                    }
                }
                _ => {}
            }
        }
        self.drop_identities(StatusCode::BadNotConnected);
        self.publish_out = 0;
        self.item_requests = 0;
        self.monitor_out = 0;
        self.monitor_found.clear();
        self.sub_ready = false;
        self.sub_asked = false;
        self.event_asked = false;
        self.crawl = None;
        self.acks.clear();
        // Items whose create was out are unknown now; the rest are re-checked.
        for i in 0..self.vars.len() as u32 {
            self.mark(i);
        }
        self.status.set_state(State::Waiting);
        self.status_dirty = true;
        self.store_away(env);
    }

    /// Every mirrored Variable's value while the server is away.
    fn store_away(&mut self, env: &Env<'_>) {
        let space = env.host.server.model.current();
        for v in &self.vars {
            if v.removed {
                continue;
            }
            v.fresh.store(0, Ordering::Release);
            let Some(node) = space.node_at_generation(v.index, v.generation) else {
                continue;
            };
            let last = node.value_cell().map(|c| c.load()).unwrap_or_default();
            let _ = space.store_value(v.index, away_value(self.cfg.while_away, &last));
        }
    }

    /// Bytes from the server.
    pub fn on_recv(&mut self, env: &mut Env<'_>, data: &[u8]) {
        let Some(client) = self.client.as_mut() else {
            return;
        };
        if let Err(s) = client.on_recv(env.now, data, &mut self.out) {
            self.lost(env, &format!("channel: {s}"));
            return;
        }
        if self.phase == Phase::Channel && client.is_open() {
            self.phase = Phase::Session;
            if let Err(e) = self.begin_session(env) {
                self.lost(env, &e);
                return;
            }
        }
        while let Some((id, mut resp)) = self.client.as_mut().and_then(|c| c.poll_response()) {
            let Some(o) = self.pending.remove(&id) else {
                continue;
            };
            let op = matches!(
                o.what,
                Pending::Write(..)
                    | Pending::Call(_)
                    | Pending::History { .. }
                    | Pending::HistoryUpdate(_)
                    | Pending::HistoryRelease
            );
            if o.ident != MAIN && op && self.ident_done(o.ident, service_result(&resp)) {
                // The identity's session is gone there: the caller's own session here is
                // not, so the operation is answered as when the server is away.
                resp = uaring_core::response::fault(id, StatusCode::BadNotConnected, env.now);
            }
            if let Err(e) = self.on_response(env, o.what, resp) {
                self.lost(env, &e);
                return;
            }
        }
        self.progress(env);
    }

    /// When [`Downstream::on_timer`] has work.
    pub fn deadline(&self) -> u64 {
        let mut d = u64::MAX;
        if self.phase == Phase::Waiting && !self.removing {
            d = d.min(self.retry_at);
        }
        for o in self.pending.values() {
            d = d.min(o.deadline_ns);
        }
        if let Some(c) = &self.client {
            if let Some(t) = c.next_deadline() {
                d = d.min(t);
            }
        }
        if self.phase == Phase::Running {
            d = d.min(self.next_refresh_ns);
            if self.crawl.is_none() && self.crawl_wanted {
                d = d.min(self.crawl_retry_at);
            }
            for s in self.idents.iter().filter(|s| s.idle()) {
                d = d.min(s.last_use_ns.saturating_add(s.idle_ns));
            }
        }
        d.min(self.status_at)
    }

    pub fn on_timer(&mut self, env: &mut Env<'_>) {
        let now = env.now;
        if let Some(c) = self.client.as_mut() {
            if let Err(s) = c.on_timer(now, &mut self.out) {
                self.lost(env, &format!("token renewal: {s}"));
                return;
            }
        }
        if let Some(o) = self.pending.values().find(|o| o.deadline_ns <= now.mono_ns) {
            let what = format!(
                "a {} request timed out ({} requests out)",
                o.what.service(),
                self.pending.len()
            );
            self.lost(env, &what);
            return;
        }
        if self.phase == Phase::Running {
            self.close_idle_identities(env);
        }
        if self.phase == Phase::Running && now.mono_ns >= self.next_refresh_ns {
            self.crawl_wanted = true;
            self.next_refresh_ns = u64::MAX;
        }
        if now.mono_ns >= self.status_at {
            self.status_dirty = true;
        }
        self.progress(env);
    }

    // ---- the session -------------------------------------------------------------------

    fn send(
        &mut self,
        env: &Env<'_>,
        req: Request,
        what: Pending,
        extra_ns: u64,
    ) -> Result<(), String> {
        self.send_as(env, req, what, extra_ns, None, MAIN)
    }

    /// Sends a request on the session `auth` (`None`: the main session), `ident` noted.
    fn send_as(
        &mut self,
        env: &Env<'_>,
        mut req: Request,
        what: Pending,
        extra_ns: u64,
        auth: Option<NodeId>,
        ident: u16,
    ) -> Result<(), String> {
        let timeout = env.limits.request_timeout_ms;
        let h = req.request_header_mut();
        h.timeout_hint = timeout;
        if let Some(a) = auth {
            h.authentication_token = a;
        }
        let client = self.client.as_mut().ok_or("not connected")?;
        let id = client
            .send_request(req, env.now, &mut self.out)
            .map_err(|s| format!("send: {s}"))?;
        self.pending.insert(
            id,
            Out {
                what,
                deadline_ns: env.now.mono_ns + self.timeout_ns(env) + extra_ns,
                ident,
            },
        );
        Ok(())
    }

    fn begin_session(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        if let Some(s) = &self.session {
            // A session of an earlier connection: take it over (its subscription with it).
            let auth = s.auth.clone();
            if let Some(c) = self.client.as_mut() {
                c.set_authentication_token(auth);
            }
            return self.activate(env, true);
        }
        let req = self.create_session_request(env, "")?;
        self.send(
            env,
            Request::CreateSession(Box::new(req)),
            Pending::CreateSession,
            0,
        )
    }

    /// A CreateSession request (`what`: what the session name says besides the server's).
    fn create_session_request(
        &mut self,
        env: &Env<'_>,
        what: &str,
    ) -> Result<CreateSessionRequest, String> {
        let own_cert = env.host.own.as_ref().map(|o| o.cert.der().to_vec());
        let secured = self.cfg.security_policy != "None";
        let nonce = {
            let c = self.client.as_mut().ok_or("not connected")?;
            uaring_core::random::bytes(c.random(), 32)
        };
        let app = &env.host.server.config.application;
        let req = CreateSessionRequest {
            request_header: header(0),
            client_description: ApplicationDescription {
                application_uri: app.effective_application_uri().into(),
                product_uri: "urn:uaring".into(),
                application_name: LocalizedText::text(&format!(
                    "{} (gateway)",
                    app.application_name
                )),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: self.cfg.endpoint.as_str().into(),
            session_name: format!("uaring gateway {}{what}", self.cfg.name)
                .as_str()
                .into(),
            client_nonce: ByteString::from(nonce),
            client_certificate: match (secured, own_cert) {
                (true, Some(c)) => ByteString::from(c),
                _ => ByteString::default(),
            },
            requested_session_timeout: f64::from(self.cfg.session_timeout_ms),
            max_response_message_size: 0,
            ..Default::default()
        };
        Ok(req)
    }

    fn activate(&mut self, env: &mut Env<'_>, resume: bool) -> Result<(), String> {
        let s = self.session.as_ref().ok_or("no session")?;
        let req = self.activate_request(s, None)?;
        self.send(
            env,
            Request::ActivateSession(Box::new(req)),
            Pending::ActivateSession { resume },
            0,
        )
    }

    /// The ActivateSession request of session `s`, for the server entry's own user or
    /// (`ident`) an `identities` entry's.
    fn activate_request(
        &self,
        s: &SessionInfo,
        ident: Option<&super::IdentityMap>,
    ) -> Result<ActivateSessionRequest, String> {
        let secured = self.cfg.security_policy != "None";
        let client_signature = if secured {
            let policy = self
                .client
                .as_ref()
                .map(|c| c.policy().clone())
                .ok_or("not connected")?;
            let mut data = s.server_certificate.as_bytes().to_vec();
            data.extend_from_slice(s.server_nonce.as_bytes());
            let (alg, sig) = policy
                .sign_own(&data)
                .map_err(|e| format!("client signature: {e}"))?;
            SignatureData {
                algorithm: alg.as_str().into(),
                signature: ByteString::from(sig),
            }
        } else {
            SignatureData::default()
        };
        let token = match ident {
            None => self.identity_token(s, &self.cfg.user, || self.cfg.password())?,
            Some(m) => self.identity_token(s, &m.user, || m.password())?,
        };
        Ok(ActivateSessionRequest {
            request_header: header(0),
            client_signature,
            user_identity_token: token,
            locale_ids: vec!["en".into()],
            ..Default::default()
        })
    }

    /// The identity token of `user` (anonymous when empty): a UserName token's password
    /// encrypted for the server when its token policy or the channel asks for it.
    fn identity_token(
        &self,
        s: &SessionInfo,
        user: &str,
        password: impl FnOnce() -> Result<String, String>,
    ) -> Result<ExtensionObject, String> {
        let want = if user.is_empty() {
            UserTokenType::Anonymous
        } else {
            UserTokenType::UserName
        };
        let policy = s.policies.iter().find(|p| p.token_type == want);
        let policy_id = policy.map(|p| p.policy_id.clone()).unwrap_or_else(|| {
            UaString::from(if user.is_empty() {
                "anonymous"
            } else {
                "username"
            })
        });
        if user.is_empty() {
            return Ok(ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id,
            }));
        }
        let password = password()?;
        let token_policy = policy
            .and_then(|p| p.security_policy_uri.as_opt())
            .filter(|u| !u.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| {
                format!(
                    "http://opcfoundation.org/UA/SecurityPolicy#{}",
                    self.cfg.security_policy
                )
            });
        let (password, algorithm) = match uaring_crypto::PolicyId::from_uri(&token_policy) {
            Some(p) if p.asym_encryption_algorithm_uri().is_some() => {
                let cert = uaring_crypto::Certificate::from_der(s.server_certificate.as_bytes())
                    .map_err(|e| {
                        format!("the server's certificate (to encrypt the password): 0x{e:08X}")
                    })?;
                let enc = uaring_crypto::encrypt_user_password(
                    p,
                    &cert,
                    password.as_bytes(),
                    s.server_nonce.as_bytes(),
                )
                .map_err(|e| format!("password encryption: 0x{e:08X}"))?;
                (
                    enc,
                    UaString::from(p.asym_encryption_algorithm_uri().unwrap_or_default()),
                )
            }
            _ => (password.into_bytes(), UaString::null()),
        };
        Ok(ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id,
            user_name: user.into(),
            password: ByteString::from(password),
            encryption_algorithm: algorithm,
        }))
    }

    fn read_info(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        let ops = [
            ids::Server_NamespaceArray,
            ids::Server_ServerStatus_StartTime,
            ids::Server_ServiceLevel,
            ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerRead,
            ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerBrowse,
            ids::Server_ServerCapabilities_OperationLimits_MaxMonitoredItemsPerCall,
        ]
        .into_iter()
        .map(|n| ReadValueId {
            node_id: NodeId::ns0(n),
            attribute_id: 13,
            ..Default::default()
        })
        .collect();
        let req = ReadRequest {
            request_header: header(0),
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read: ops,
        };
        self.send(env, Request::Read(Box::new(req)), Pending::Info, 0)
    }

    fn on_info(&mut self, env: &mut Env<'_>, values: Vec<DataValue>) -> Result<(), String> {
        let mut v = values.into_iter();
        let ns = v.next().unwrap_or_default();
        let Variant::Array(arr) = ns.value else {
            return Err(format!("the server's NamespaceArray: {}", ns.status_code()));
        };
        let uris: Vec<String> = arr
            .values
            .iter()
            .map(|u| match u {
                Variant::String(s) => s.as_str().to_string(),
                _ => String::new(),
            })
            .collect();
        self.names.set_namespace_array(&uris);
        let start = v.next().and_then(|d| match d.value {
            Variant::DateTime(t) => Some(t),
            _ => None,
        });
        if let Some(Variant::Byte(b)) = v.next().map(|d| d.value) {
            self.status.service_level.store(b, Ordering::Relaxed);
        }
        let mut ops = env.limits.operations_per_request as usize;
        for d in v {
            if let Variant::UInt32(n) = d.value {
                if n > 0 {
                    ops = ops.min(n as usize);
                }
            }
        }
        self.ops = ops.max(1);
        self.register_namespaces(env)?;
        if self.start_time.is_some() && start != self.start_time {
            // Another instance of the server: its model may differ.
            self.crawl_wanted = true;
        }
        self.start_time = start;
        if self.mirrored_start_time.is_none() || self.mirrored_start_time != start {
            self.crawl_wanted = true;
        }
        self.phase = Phase::Running;
        self.connected_once = true;
        self.backoff_ms = self.cfg.reconnect_min_ms;
        self.status.set_state(if self.crawl_wanted {
            State::Browsing
        } else {
            State::Connected
        });
        self.status_dirty = true;
        Ok(())
    }

    /// Local namespaces for the server's namespaces that have none yet (and the gateway's
    /// own, the first time).
    fn register_namespaces(&mut self, env: &Env<'_>) -> Result<(), String> {
        let slots = self.names.unregistered();
        if slots.is_empty() && self.gateway_ns != 0 {
            return Ok(());
        }
        let uris: Vec<(u16, String, String)> = slots
            .iter()
            .map(|&s| (s, self.names.name_uri(s), self.names.instance_uri(s)))
            .collect();
        let got = crate::builder::edit_model(&env.host.server, &env.host.writer, |e| {
            let g = e.add_namespace(GATEWAY_URI)?;
            let mut out = Vec::with_capacity(uris.len());
            for (slot, name, inst) in &uris {
                out.push((*slot, e.add_namespace(name)?, e.add_namespace(inst)?));
            }
            Ok((g, out))
        })
        .map_err(|s| format!("namespaces: {s}"))?;
        self.gateway_ns = got.0;
        for (slot, n, i) in got.1 {
            self.names.register(slot, n, i);
            if let Some(h) = &env.host.history {
                h.namespaces.mark(i);
            }
        }
        Ok(())
    }

    // ---- progress --------------------------------------------------------------------

    /// Sends what is due: the crawl's requests, the subscription, the items, Publish.
    fn progress(&mut self, env: &mut Env<'_>) {
        if self.phase == Phase::Running {
            if let Err(e) = self.progress_running(env) {
                self.lost(env, &e);
                return;
            }
        }
        if self.status_dirty {
            self.publish_status(env);
        }
    }

    fn progress_running(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        // The mirror.
        if self.crawl.is_none() && self.crawl_wanted && env.now.mono_ns >= self.crawl_retry_at {
            self.crawl_wanted = false;
            self.status.set_state(State::Browsing);
            self.status_dirty = true;
            let max = (self.cfg.max_nodes as u64).min(
                u64::from(env.limits.max_nodes).saturating_sub(*env.nodes_total)
                    + self.mirror.len() as u64,
            ) as usize;
            self.crawl = Some(Crawl::new(&self.cfg.roots(), &self.names, max, self.ops));
        }
        if let Some(mut crawl) = self.crawl.take() {
            let space = env.host.server.model.current();
            let names = &self.names;
            let types = &self.mirrored_types;
            let known = |remote: &NodeId| {
                if types.contains_key(remote) {
                    return true;
                }
                let local = names.local_name_id(remote);
                local.namespace != 0 && space.node(&local).is_some()
            };
            let reqs = crawl.poll(names, &known);
            let done = crawl.done();
            drop(space);
            for (r, job) in reqs {
                self.send(env, r, Pending::Crawl(job), 0)?;
            }
            if done {
                let found = crawl.into_found();
                self.apply(env, found)?;
                self.find_monitored(env)?;
            } else {
                self.crawl = Some(crawl);
            }
        }
        // The subscription.
        if self.sub_ready || self.mirror.is_empty() {
        } else if !self.sub_asked {
            self.sub_asked = true;
            match self.sub {
                Some(id) if self.session_is_new() => {
                    let req = TransferSubscriptionsRequest {
                        request_header: header(0),
                        subscription_ids: vec![id],
                        send_initial_values: true,
                    };
                    self.send(
                        env,
                        Request::TransferSubscriptions(Box::new(req)),
                        Pending::Transfer,
                        0,
                    )?;
                }
                Some(_) => {
                    // The session was resumed with its subscription: read the values of
                    // the monitored Variables again (the notifications sent while away
                    // are lost with the connection).
                    self.sub_ready = true;
                    self.refresh_values(env)?;
                }
                None => self.create_subscription(env)?,
            }
        }
        if self.sub_ready {
            if self.cfg.events && !self.event_item && !self.event_asked {
                self.event_asked = true;
                self.create_event_item(env)?;
            }
            self.reconcile(env)?;
            while self.publish_out < PUBLISH_OUT {
                let acks = std::mem::take(&mut self.acks);
                let req = PublishRequest {
                    request_header: header(0),
                    subscription_acknowledgements: acks,
                };
                let extra = (self.revised_interval_ms.max(1.0) as u64)
                    .saturating_mul(1_000_000)
                    .saturating_add((KEEP_ALIVE_MS as u64 + 1_000) * 1_000_000);
                self.send(
                    env,
                    Request::Publish(Box::new(req)),
                    Pending::Publish,
                    extra,
                )?;
                self.publish_out += 1;
            }
        }
        Ok(())
    }

    /// Was the session created on this connection (not resumed)?
    fn session_is_new(&self) -> bool {
        !self.resumed_now
    }

    fn create_subscription(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        let interval = f64::from(self.cfg.publishing_interval_ms);
        let keep_alive = ((KEEP_ALIVE_MS / interval).ceil() as u32).max(1);
        let req = CreateSubscriptionRequest {
            request_header: header(0),
            requested_publishing_interval: interval,
            requested_lifetime_count: keep_alive.saturating_mul(6),
            requested_max_keep_alive_count: keep_alive,
            max_notifications_per_publish: 0,
            publishing_enabled: true,
            priority: 0,
        };
        self.send(
            env,
            Request::CreateSubscription(Box::new(req)),
            Pending::CreateSubscription,
            0,
        )
    }

    fn create_event_item(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        let Some(sub) = self.sub else { return Ok(()) };
        let field = |path: &[&str]| SimpleAttributeOperand {
            type_definition_id: NodeId::ns0(2041),
            browse_path: path.iter().map(|p| QualifiedName::new(0, p)).collect(),
            attribute_id: 13,
            index_range: UaString::null(),
        };
        let mut select: Vec<SimpleAttributeOperand> =
            EVENT_FIELDS.iter().map(|f| field(&[f])).collect();
        // ConditionId: the condition's NodeId.
        select.push(SimpleAttributeOperand {
            type_definition_id: NodeId::ns0(2782),
            browse_path: Vec::new(),
            attribute_id: 1,
            index_range: UaString::null(),
        });
        select.push(SimpleAttributeOperand {
            type_definition_id: NodeId::ns0(ids::GeneralModelChangeEventType),
            browse_path: vec![QualifiedName::new(0, "Changes")],
            attribute_id: 13,
            index_range: UaString::null(),
        });
        // The condition fields (Part 9), null in events that are no conditions.
        select.extend(
            CONDITION_FIELDS
                .iter()
                .map(|&(ty, path)| SimpleAttributeOperand {
                    type_definition_id: NodeId::ns0(ty),
                    browse_path: path.split('/').map(|p| QualifiedName::new(0, p)).collect(),
                    attribute_id: 13,
                    index_range: UaString::null(),
                }),
        );
        let filter = EventFilter {
            select_clauses: select,
            where_clause: ContentFilter::default(),
        };
        let req = CreateMonitoredItemsRequest {
            request_header: header(0),
            subscription_id: sub,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: vec![MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::ns0(2253),
                    attribute_id: 12,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: EVENT_HANDLE,
                    sampling_interval: 0.0,
                    filter: ExtensionObject::from_struct(&filter),
                    queue_size: 1000,
                    discard_oldest: true,
                },
            }],
        };
        self.send(
            env,
            Request::CreateMonitoredItems(Box::new(req)),
            Pending::EventItem,
            0,
        )
    }

    /// Reads the values of the Variables with items (a resumed session) and stores those no
    /// notification overtook.
    fn refresh_values(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        let vars: Vec<u32> = (0..self.vars.len() as u32)
            .filter(|&i| {
                self.vars
                    .get(i as usize)
                    .is_some_and(|v| v.item.is_some() && !v.removed)
            })
            .collect();
        self.epoch += 1;
        for chunk in vars.chunks(self.ops) {
            let ops: Vec<ReadValueId> = chunk
                .iter()
                .filter_map(|&i| self.vars.get(i as usize))
                .map(|v| ReadValueId {
                    node_id: self.names.to_wire(&v.remote).unwrap_or_default(),
                    attribute_id: 13,
                    ..Default::default()
                })
                .collect();
            let req = ReadRequest {
                request_header: header(0),
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Both,
                nodes_to_read: ops,
            };
            let epoch = self.epoch;
            self.send(
                env,
                Request::Read(Box::new(req)),
                Pending::Refresh(chunk.to_vec(), epoch),
                0,
            )?;
        }
        Ok(())
    }

    // ---- responses -------------------------------------------------------------------

    fn on_response(
        &mut self,
        env: &mut Env<'_>,
        what: Pending,
        resp: Response,
    ) -> Result<(), String> {
        let s = service_result(&resp);
        match what {
            Pending::CreateSession => {
                let Response::CreateSession(r) = resp else {
                    return Err(format!("CreateSession: {s}"));
                };
                if s.is_bad() {
                    return Err(format!("CreateSession: {s}"));
                }
                if self.cfg.security_policy != "None" {
                    let want = read_certificate(&self.cfg.server_certificate)?;
                    if !r.server_certificate.as_bytes().is_empty()
                        && r.server_certificate.as_bytes() != want.as_slice()
                    {
                        return Err("CreateSession: the server presents another certificate than server_certificate".into());
                    }
                }
                if let Some(c) = self.client.as_mut() {
                    c.set_authentication_token(r.authentication_token.clone());
                }
                self.session = Some(SessionInfo {
                    auth: r.authentication_token.clone(),
                    server_nonce: r.server_nonce.clone(),
                    server_certificate: r.server_certificate.clone(),
                    policies: r
                        .server_endpoints
                        .iter()
                        .flat_map(|e| e.user_identity_tokens.iter().cloned())
                        .collect(),
                });
                self.resumed_now = false;
                self.session_number = SESSIONS.fetch_add(1, Ordering::Relaxed);
                self.activate(env, false)
            }
            Pending::ActivateSession { resume } => {
                let ok = matches!(&resp, Response::ActivateSession(_)) && s.is_good();
                if !ok && resume {
                    // The session is gone (timed out, or the server restarted): a new one;
                    // its subscription may still be there (TransferSubscriptions).
                    tracing::info!(server = %self.cfg.name, "gateway: the session could not be resumed ({s}); creating a new one");
                    self.session = None;
                    return self.begin_session(env);
                }
                let Response::ActivateSession(r) = resp else {
                    return Err(format!("ActivateSession: {s}"));
                };
                if s.is_bad() {
                    return Err(format!("ActivateSession: {s}"));
                }
                if let Some(sess) = self.session.as_mut() {
                    sess.server_nonce = r.server_nonce.clone();
                }
                if resume {
                    self.resumed_now = true;
                    self.status.resumed.fetch_add(1, Ordering::Relaxed);
                }
                self.read_info(env)
            }
            Pending::Info => {
                let Response::Read(r) = resp else {
                    return Err(format!("the server's information: {s}"));
                };
                if s.is_bad() {
                    return Err(format!("the server's information: {s}"));
                }
                self.on_info(env, r.results)
            }
            Pending::Crawl(job) => {
                let Some(crawl) = self.crawl.as_mut() else {
                    return Ok(());
                };
                if let Err(e) = crawl.on_response(job, resp, &self.names) {
                    tracing::warn!(server = %self.cfg.name, "gateway: mirror: {e}; trying again in 10 s");
                    self.status.set_error(&e);
                    self.crawl = None;
                    self.crawl_wanted = true;
                    self.crawl_retry_at = env.now.mono_ns + 10_000_000_000;
                    self.status_dirty = true;
                }
                Ok(())
            }
            Pending::CreateSubscription => {
                let Response::CreateSubscription(r) = resp else {
                    return Err(format!("CreateSubscription: {s}"));
                };
                if s.is_bad() {
                    return Err(format!("CreateSubscription: {s}"));
                }
                self.sub = Some(r.subscription_id);
                self.revised_interval_ms = r.revised_publishing_interval;
                self.sub_ready = true;
                self.event_item = false;
                self.event_asked = false;
                self.drop_items(env);
                Ok(())
            }
            Pending::Transfer => {
                let ok = match &resp {
                    Response::TransferSubscriptions(r) => {
                        s.is_good() && r.results.first().is_some_and(|t| t.status_code.is_good())
                    }
                    _ => false,
                };
                if ok {
                    tracing::info!(server = %self.cfg.name, "gateway: subscription transferred to the new session");
                    self.sub_ready = true;
                    Ok(())
                } else {
                    tracing::info!(server = %self.cfg.name, "gateway: the subscription could not be transferred; creating a new one");
                    self.sub = None;
                    self.create_subscription(env)
                }
            }
            Pending::EventItem => {
                if let Response::CreateMonitoredItems(r) = &resp {
                    self.event_item =
                        s.is_good() && r.results.first().is_some_and(|x| x.status_code.is_good());
                    if !self.event_item {
                        tracing::info!(server = %self.cfg.name, "gateway: the server refuses an event item on its Server object; events are not passed on");
                    }
                }
                Ok(())
            }
            Pending::CreateItems(vars) => {
                self.item_requests = self.item_requests.saturating_sub(1);
                let results = match resp {
                    Response::CreateMonitoredItems(r) if s.is_good() => r.results,
                    _ => Vec::new(),
                };
                for (k, i) in vars.into_iter().enumerate() {
                    let Some(v) = self.vars.get_mut(i as usize) else {
                        continue;
                    };
                    v.busy = false;
                    match results.get(k) {
                        Some(r) if r.status_code.is_good() => {
                            v.item = Some(Item {
                                id: r.monitored_item_id,
                                asked: v.asked,
                                sampling_ms: r.revised_sampling_interval,
                                queue_size: r.revised_queue_size,
                            });
                            v.fresh.store(u64::MAX, Ordering::Release);
                            self.status.items.fetch_add(1, Ordering::Relaxed);
                            self.status_dirty = true;
                        }
                        other => {
                            *env.items_total = env.items_total.saturating_sub(1);
                            let st = other.map_or(refusal(s), |r| r.status_code);
                            v.refused = true;
                            let (index, generation) = (v.index, v.generation);
                            let space = env.host.server.model.current();
                            if space.node_at_generation(index, generation).is_some() {
                                let _ = space.store_value(index, DataValue::status(st));
                            }
                        }
                    }
                    self.mark(i);
                }
                Ok(())
            }
            Pending::ModifyItems(vars) => {
                self.item_requests = self.item_requests.saturating_sub(1);
                let results = match resp {
                    Response::ModifyMonitoredItems(r) if s.is_good() => r.results,
                    _ => Vec::new(),
                };
                for (k, i) in vars.into_iter().enumerate() {
                    let Some(v) = self.vars.get_mut(i as usize) else {
                        continue;
                    };
                    v.busy = false;
                    if let (Some(r), Some(item)) = (results.get(k), v.item.as_mut()) {
                        if r.status_code.is_good() {
                            item.asked = v.asked;
                            item.sampling_ms = r.revised_sampling_interval;
                            item.queue_size = r.revised_queue_size;
                        }
                    }
                    self.mark(i);
                }
                Ok(())
            }
            Pending::DeleteItems(vars) => {
                self.item_requests = self.item_requests.saturating_sub(1);
                for (i, _) in vars {
                    let Some(v) = self.vars.get_mut(i as usize) else {
                        continue;
                    };
                    v.busy = false;
                    if v.item.take().is_some() {
                        *env.items_total = env.items_total.saturating_sub(1);
                        self.status.items.fetch_sub(1, Ordering::Relaxed);
                        self.status_dirty = true;
                    }
                    v.fresh.store(0, Ordering::Release);
                    if v.removed {
                        self.var_free.push(i);
                    } else {
                        // No longer kept current: an item created here later starts from the
                        // last value marked so, until the server's new item reports.
                        let space = env.host.server.model.current();
                        if let Some(node) = space.node_at_generation(v.index, v.generation) {
                            let last = node.value_cell().map(|c| c.load()).unwrap_or_default();
                            if last.status_code().is_good() {
                                let _ = space.store_value(
                                    v.index,
                                    DataValue {
                                        status: Some(StatusCode::UncertainLastUsableValue),
                                        ..last
                                    },
                                );
                            }
                        }
                        self.mark(i);
                    }
                }
                Ok(())
            }
            Pending::Publish => {
                self.publish_out = self.publish_out.saturating_sub(1);
                self.on_publish(env, resp)
            }
            Pending::Refresh(vars, epoch) => {
                let Response::Read(r) = resp else {
                    return Ok(());
                };
                let space = env.host.server.model.current();
                for (i, mut dv) in vars.into_iter().zip(r.results) {
                    let Some(v) = self.vars.get(i as usize) else {
                        continue;
                    };
                    if v.notified >= epoch || v.removed {
                        continue; // a notification came after the read was sent
                    }
                    if space.node_at_generation(v.index, v.generation).is_none() {
                        continue;
                    }
                    self.names.value_in(&mut dv.value);
                    dv.server_timestamp = None;
                    dv.server_picoseconds = None;
                    let _ = space.store_value(v.index, dv);
                }
                Ok(())
            }
            Pending::Read(reads) => {
                let results = match resp {
                    Response::Read(r) if s.is_good() => r.results,
                    _ => Vec::new(),
                };
                let space = env.host.server.model.current();
                let mut results = results.into_iter();
                for (i, read) in reads {
                    match results.next() {
                        Some(mut dv) => {
                            self.names.value_in(&mut dv.value);
                            dv.server_timestamp = None;
                            dv.server_picoseconds = None;
                            if let Some(v) = self.vars.get(i as usize) {
                                if v.item.is_none()
                                    && space.node_at_generation(v.index, v.generation).is_some()
                                {
                                    // Fresh as of now: later Reads within their maxAge are
                                    // answered from the cell.
                                    if space.store_value(v.index, dv.clone()).is_ok() {
                                        v.fresh.store(env.now.mono_ns.max(1), Ordering::Release);
                                    }
                                }
                            }
                            read.complete(dv);
                        }
                        None => read.fail(refusal(s)),
                    }
                }
                Ok(())
            }
            Pending::Write(var, w) => {
                if let Some(v) = self.vars.get(var as usize) {
                    if v.item.is_none() {
                        // The next Read asks the server (no item brings the value here).
                        v.fresh.store(0, Ordering::Release);
                    }
                }
                let st = match resp {
                    Response::Write(r) if s.is_good() => r
                        .results
                        .first()
                        .copied()
                        .unwrap_or(StatusCode::BadInternalError),
                    _ if s.is_bad() => s,
                    _ => StatusCode::BadInternalError,
                };
                w.complete(st);
                Ok(())
            }
            Pending::Call(c) => {
                match resp {
                    Response::Call(r) if s.is_good() => match r.results.into_iter().next() {
                        Some(mut res) if res.status_code.is_good() => {
                            for o in res.output_arguments.iter_mut() {
                                self.names.value_in(o);
                            }
                            c.complete(Ok(res.output_arguments))
                        }
                        Some(res) => c.complete(Err(res.status_code)),
                        None => c.complete(Err(StatusCode::BadInternalError)),
                    },
                    _ => c.complete(Err(refusal(s))),
                }
                Ok(())
            }
            Pending::Monitor => {
                if let Response::TranslateBrowsePathsToNodeIds(r) = resp {
                    for res in r.results {
                        if let Some(t) = res.targets.first().filter(|_| res.status_code.is_good()) {
                            let found = self.names.remote_expanded(&t.target_id);
                            self.monitor_found.extend(found);
                        }
                    }
                }
                self.monitor_out = self.monitor_out.saturating_sub(1);
                if self.monitor_out > 0 {
                    return Ok(());
                }
                let found = std::mem::take(&mut self.monitor_found);
                self.pin(found);
                self.reconcile(env)
            }
            Pending::History {
                reply,
                session,
                events,
            } => {
                let result = match resp {
                    Response::HistoryRead(r) if s.is_good() => r.results.into_iter().next(),
                    _ => None,
                };
                let Some(mut result) = result else {
                    reply.fail(refusal(s));
                    return Ok(());
                };
                // Values translated (NodeIds and encodings into this server's namespaces).
                let limits = uaring_core::DecodeLimits::default();
                if let Some((select, max)) = &events {
                    // Events: each one's fields for the clauses asked here. A server that
                    // gives more than it was asked for is cut to that (a response here
                    // stays within what the service budgeted); anything but events is
                    // dropped.
                    match result.history_data.decode_as::<HistoryEvent>(limits) {
                        Some(Ok(mut data)) => {
                            data.events.truncate(*max as usize);
                            for e in data.events.iter_mut() {
                                e.event_fields = select.event_in(
                                    &self.names,
                                    self.event_tag,
                                    std::mem::take(&mut e.event_fields),
                                );
                            }
                            result.history_data = ExtensionObject::from_struct(&data);
                        }
                        _ => result.history_data = ExtensionObject::null(),
                    }
                } else if let Some(Ok(mut data)) =
                    result
                        .history_data
                        .decode_as::<uaring_core::generated::types::HistoryData>(limits)
                {
                    for dv in data.data_values.iter_mut() {
                        self.names.value_in(&mut dv.value);
                    }
                    result.history_data = ExtensionObject::from_struct(&data);
                } else if let Some(Ok(mut data)) =
                    result
                        .history_data
                        .decode_as::<uaring_core::generated::types::HistoryModifiedData>(limits)
                {
                    for dv in data.data_values.iter_mut() {
                        self.names.value_in(&mut dv.value);
                    }
                    result.history_data = ExtensionObject::from_struct(&data);
                }
                if !result.continuation_point.as_bytes().is_empty() {
                    result.continuation_point = ByteString::from(super::history::token(
                        session,
                        result.continuation_point.as_bytes(),
                    ));
                }
                reply.answer(result);
                Ok(())
            }
            Pending::HistoryUpdate(reply) => {
                // The server's statuses as they are (they name no node).
                match resp {
                    Response::HistoryUpdate(r) if s.is_good() => {
                        match r.results.into_iter().next() {
                            Some(result) => reply.answer(result),
                            None => reply.fail(StatusCode::BadInternalError),
                        }
                    }
                    _ => reply.fail(refusal(s)),
                }
                Ok(())
            }
            Pending::CloseSession | Pending::HistoryRelease => Ok(()),
            Pending::IdentCreate(i) => self.ident_created(env, i, resp),
            Pending::IdentActivate(i) => self.ident_activated(env, i, resp),
        }
    }

    fn on_publish(&mut self, env: &mut Env<'_>, resp: Response) -> Result<(), String> {
        let s = service_result(&resp);
        let Response::Publish(r) = resp else {
            if s == StatusCode::BadNoSubscription || s == StatusCode::BadSubscriptionIdInvalid {
                self.subscription_lost(env);
                return Ok(());
            }
            if s == StatusCode::BadTooManyPublishRequests || s == StatusCode::BadTimeout {
                return Ok(());
            }
            return Err(format!("Publish: {s}"));
        };
        if s.is_bad() {
            if s == StatusCode::BadNoSubscription || s == StatusCode::BadSubscriptionIdInvalid {
                self.subscription_lost(env);
                return Ok(());
            }
            if s == StatusCode::BadTooManyPublishRequests || s == StatusCode::BadTimeout {
                return Ok(());
            }
            return Err(format!("Publish: {s}"));
        }
        if Some(r.subscription_id) != self.sub {
            return Ok(());
        }
        let msg = r.notification_message;
        if !msg.notification_data.is_empty() {
            self.acks.push(SubscriptionAcknowledgement {
                subscription_id: r.subscription_id,
                sequence_number: msg.sequence_number,
            });
        }
        let limits = env.host.server.config.transport.decode;
        for data in &msg.notification_data {
            if let Some(Ok(dc)) = data.decode_as::<DataChangeNotification>(limits) {
                self.on_data_change(env, dc);
            } else if let Some(Ok(ev)) = data.decode_as::<EventNotificationList>(limits) {
                self.on_events(env, ev);
            } else if let Some(Ok(sc)) = data.decode_as::<StatusChangeNotification>(limits) {
                if sc.status.is_bad() {
                    tracing::info!(server = %self.cfg.name, "gateway: the server ended the subscription ({})", sc.status);
                    self.subscription_lost(env);
                }
            }
        }
        Ok(())
    }

    /// The subscription is gone on the server: a new one, every item again.
    fn subscription_lost(&mut self, env: &mut Env<'_>) {
        if !self.sub_ready {
            return;
        }
        self.sub = None;
        self.sub_ready = false;
        self.sub_asked = false;
        self.event_item = false;
        self.event_asked = false;
        self.drop_items(env);
    }

    /// Forgets every item (their subscription is gone) so the demand creates them again.
    fn drop_items(&mut self, env: &mut Env<'_>) {
        for i in 0..self.vars.len() as u32 {
            if let Some(v) = self.vars.get_mut(i as usize) {
                if v.item.take().is_some() {
                    *env.items_total = env.items_total.saturating_sub(1);
                }
                v.refused = false;
            }
            self.mark(i);
        }
        self.status.items.store(0, Ordering::Relaxed);
    }

    fn on_data_change(&mut self, env: &mut Env<'_>, dc: DataChangeNotification) {
        let space = env.host.server.model.current();
        self.epoch += 1;
        let epoch = self.epoch;
        let mut n = 0u64;
        for mut item in dc.monitored_items {
            let Some(v) = slot_of(item.client_handle).and_then(|i| self.vars.get_mut(i)) else {
                continue;
            };
            if v.removed || v.item.is_none() {
                continue;
            }
            v.notified = epoch;
            if space.node_at_generation(v.index, v.generation).is_none() {
                continue;
            }
            self.names.value_in(&mut item.value.value);
            item.value.server_timestamp = None;
            item.value.server_picoseconds = None;
            if space.store_value(v.index, item.value).is_ok() {
                n += 1;
            }
        }
        self.status.notifications.fetch_add(n, Ordering::Relaxed);
    }

    fn on_events(&mut self, env: &mut Env<'_>, list: EventNotificationList) {
        let server = &env.host.server;
        let space = server.model.current();
        for ev in list.events {
            if ev.client_handle != EVENT_HANDLE {
                continue;
            }
            let f = |i: usize| ev.event_fields.get(i).cloned().unwrap_or_default();
            let event_type = match f(1) {
                Variant::NodeId(id) => *id,
                _ => NodeId::ns0(2041),
            };
            if event_type.namespace == 0
                && matches!(
                    event_type.as_ns0(),
                    Some(
                        ids::BaseModelChangeEventType
                            | ids::GeneralModelChangeEventType
                            | ids::SemanticChangeEventType
                    )
                )
            {
                if self.crawl.is_none() {
                    tracing::info!(server = %self.cfg.name, "gateway: the server's model changed; browsing it again");
                }
                self.crawl_wanted = true;
                continue;
            }
            // Namespace-0 event types are this server's; another one is reported as
            // BaseEventType's subtype when it was mirrored, else as BaseEventType.
            let event_type = match self.names.remote(&event_type) {
                Some(r) if r.namespace != 0 => {
                    let local = self.names.local_name_id(&r);
                    if space.node(&local).is_some() {
                        local
                    } else {
                        NodeId::ns0(2041)
                    }
                }
                _ if space.node(&event_type).is_some() => event_type,
                _ => NodeId::ns0(2041),
            };
            let source = match f(2) {
                Variant::NodeId(id) => self
                    .names
                    .remote(&id)
                    .filter(|r| r.namespace != 0)
                    .map(|r| self.names.local_instance(&r))
                    .filter(|l| space.node(l).is_some()),
                _ => None,
            }
            .or_else(|| self.folder.clone())
            .unwrap_or(NodeId::ns0(2253));
            let severity = match f(7) {
                Variant::UInt16(s) => s.clamp(1, 1000),
                _ => 1,
            };
            let time = match f(4) {
                Variant::DateTime(t) => t,
                _ => uaring_core::DateTime(crate::clock::utc_now().0),
            };
            let message = match f(6) {
                Variant::LocalizedText(t) => *t,
                _ => LocalizedText::default(),
            };
            let source_name = match f(3) {
                Variant::String(s) => s,
                _ => UaString::from(self.cfg.name.as_str()),
            };
            let condition_id = match f(8) {
                Variant::NodeId(id) => self
                    .names
                    .remote(&id)
                    .filter(|r| r.namespace != 0)
                    .map(|r| self.names.local_instance(&r)),
                _ => None,
            };
            // The server's EventId behind this server's tag: a condition method called here
            // with it (Acknowledge, Confirm) reaches the server with the server's own.
            let event_id = match f(0) {
                Variant::ByteString(b) if !b.as_bytes().is_empty() => {
                    ByteString::from(event_id_here(self.event_tag, b.as_bytes()))
                }
                _ => server.events.ids.next(),
            };
            // The condition fields the server sent, under their paths; NodeIds in them
            // (a limit alarm's InputNode, say) named here.
            let mut fields = Vec::<EventField>::new();
            for (i, &(_, path)) in CONDITION_FIELDS.iter().enumerate() {
                let mut value = f(FIRST_CONDITION_FIELD + i);
                if matches!(value, Variant::Empty) {
                    continue;
                }
                self.names.value_in(&mut value);
                fields.push(EventField::ns0(path, value));
            }
            let event = Event {
                event_id,
                type_chain: uaring_core::events::type_chain(&space, &event_type),
                event_type,
                source_name,
                source_node: source.clone(),
                time,
                receive_time: uaring_core::DateTime(crate::clock::utc_now().0),
                message,
                severity,
                condition_id,
                fields,
                notifiers: uaring_core::events::notifiers_of(&space, &source).into(),
            };
            server.events.bus.publish(event);
            self.status.events.fetch_add(1, Ordering::Relaxed);
        }
    }

    // ---- always monitored --------------------------------------------------------------

    /// After a crawl: the `monitor` entries found (NodeIds at once, browse paths by a
    /// TranslateBrowsePathsToNodeIds).
    fn find_monitored(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        let mut ids = Vec::new();
        let mut paths = Vec::new();
        for r in self.cfg.monitored() {
            match r {
                Root::Id(id) => ids.extend(self.names.remote(&id)),
                Root::UriId(uri, id) => {
                    let probe = uaring_core::types::ExpandedNodeId {
                        node_id: id,
                        namespace_uri: uri.as_str().into(),
                        server_index: 0,
                    };
                    ids.extend(self.names.remote_expanded(&probe));
                }
                Root::Path(p) => paths.push(BrowsePath {
                    starting_node: NodeId::ns0(85),
                    relative_path: RelativePath {
                        elements: p
                            .iter()
                            .map(|(ns, name)| RelativePathElement {
                                reference_type_id: NodeId::ns0(33),
                                is_inverse: false,
                                include_subtypes: true,
                                target_name: QualifiedName::new(ns.unwrap_or(0), name),
                            })
                            .collect(),
                    },
                }),
            }
        }
        if paths.is_empty() {
            self.pin(ids);
            return Ok(());
        }
        // Pinned once every share is answered (`monitor_out` back to 0).
        self.monitor_found = ids;
        self.monitor_out = 0;
        for chunk in paths.chunks(self.ops) {
            let req = TranslateBrowsePathsToNodeIdsRequest {
                request_header: header(0),
                browse_paths: chunk.to_vec(),
            };
            self.monitor_out += 1;
            self.send(
                env,
                Request::TranslateBrowsePathsToNodeIds(Box::new(req)),
                Pending::Monitor,
                0,
            )?;
        }
        Ok(())
    }

    /// Keeps the Variables `remote` monitored (and only those): their items are made or
    /// kept whatever the demand; a later `pin` without one lets its item go with the
    /// demand.
    fn pin(&mut self, remote: Vec<NodeId>) {
        let ms = f64::from(self.cfg.monitor_sampling_interval_ms);
        let want: std::collections::HashSet<&NodeId> = remote.iter().collect();
        let mut found = 0;
        for i in 0..self.vars.len() as u32 {
            let Some(v) = self.vars.get_mut(i as usize) else {
                continue;
            };
            let pinned = (!v.removed && want.contains(&v.remote)).then_some(ms);
            found += usize::from(pinned.is_some());
            if v.pinned != pinned {
                v.pinned = pinned;
                v.refused = false;
                self.mark(i);
            }
        }
        if found < self.cfg.monitor.len() {
            self.status.set_error(&format!(
                "monitor: {} of {} entries are no mirrored Variable",
                self.cfg.monitor.len() - found,
                self.cfg.monitor.len()
            ));
            self.status_dirty = true;
        }
    }

    // ---- demand and items --------------------------------------------------------------

    fn mark(&mut self, var: u32) {
        if let Some(v) = self.vars.get_mut(var as usize) {
            if !v.dirty {
                v.dirty = true;
                self.dirty.push(var);
            }
        }
    }

    /// Shard `shard`'s demand on the mirrored Variable `var`.
    pub fn demand(&mut self, var: u32, generation: u32, shard: u16, d: Demand) {
        let Some(v) = self.vars.get_mut(var as usize) else {
            return;
        };
        if v.generation != generation || v.removed {
            return;
        }
        v.shards.retain(|(s, _)| *s != shard);
        if d.items > 0 {
            v.shards.push((shard, d));
        }
        v.refused = false;
        self.mark(var);
    }

    /// Sends the item requests the demand noted since the last call asks for (the gateway
    /// thread calls it once per pass over the demand queue, so a client's
    /// CreateMonitoredItems of many items goes down in requests of `operations_per_request`,
    /// not one request per item).
    pub fn settle_demand(&mut self, env: &mut Env<'_>) {
        if self.phase == Phase::Running {
            if let Err(e) = self.reconcile(env) {
                self.lost(env, &e);
            }
        }
    }

    /// Creates, modifies and deletes items as the demand of the dirty Variables asks.
    fn reconcile(&mut self, env: &mut Env<'_>) -> Result<(), String> {
        if !self.sub_ready || self.dirty.is_empty() || self.item_requests >= ITEM_REQUESTS_OUT {
            return Ok(());
        }
        let Some(sub) = self.sub else { return Ok(()) };
        let mut create = Vec::new();
        let mut modify = Vec::new();
        let mut delete = Vec::new();
        let mut keep = Vec::new();
        let mut dirty = std::mem::take(&mut self.dirty).into_iter();
        let ops = self.ops.max(1);
        for i in dirty.by_ref() {
            let Some(v) = self.vars.get_mut(i as usize) else {
                continue;
            };
            // The requests this pass sends count against ITEM_REQUESTS_OUT too: a
            // Variable that could start one more request past it waits for an answer (a
            // hundred thousand at once went out as a hundred requests, and the last ones
            // passed request_timeout_ms at a server that creates items one by one).
            let planned = self.item_requests
                + create.len().div_ceil(ops)
                + modify.len().div_ceil(ops)
                + delete.len().div_ceil(ops);
            let starts_one = [create.len(), modify.len(), delete.len()]
                .iter()
                .any(|n| n % ops == 0);
            if planned + usize::from(starts_one) > ITEM_REQUESTS_OUT {
                // The rest wait as they are (still marked dirty).
                keep.push(i);
                break;
            }
            if v.busy {
                keep.push(i);
                continue;
            }
            v.dirty = false;
            match (v.want(), v.item) {
                (Some(_), None) if v.refused => {}
                (Some(_), None) => {
                    if *env.items_total >= u64::from(env.limits.max_items) {
                        let (index, generation) = (v.index, v.generation);
                        let space = env.host.server.model.current();
                        if space.node_at_generation(index, generation).is_some() {
                            let _ = space.store_value(
                                index,
                                DataValue::status(StatusCode::BadTooManyMonitoredItems),
                            );
                        }
                        v.refused = true;
                        self.status.set_error("gateway.max_items reached");
                        continue;
                    }
                    *env.items_total += 1;
                    v.busy = true;
                    v.asked = v.want().unwrap_or((0.0, 1));
                    tracing::debug!(server = %self.cfg.name, var = i, asked = ?v.asked, "gateway: creating an item");
                    create.push(i);
                }
                (None, Some(item)) => {
                    v.busy = true;
                    delete.push((i, item.id));
                }
                (Some(want), Some(item)) if want != item.asked => {
                    v.busy = true;
                    v.asked = want;
                    tracing::debug!(server = %self.cfg.name, var = i, asked = ?v.asked, "gateway: modifying an item");
                    modify.push(i);
                }
                (None, None) if v.removed => self.var_free.push(i),
                _ => {}
            }
        }
        keep.extend(dirty);
        for i in &keep {
            if let Some(v) = self.vars.get_mut(*i as usize) {
                v.dirty = true;
            }
        }
        self.dirty = keep;
        for chunk in create.chunks(ops) {
            let items = chunk
                .iter()
                .filter_map(|&i| {
                    let v = self.vars.get(i as usize)?;
                    Some(MonitoredItemCreateRequest {
                        item_to_monitor: ReadValueId {
                            node_id: self.names.to_wire(&v.remote).unwrap_or_default(),
                            attribute_id: 13,
                            ..Default::default()
                        },
                        monitoring_mode: MonitoringMode::Reporting,
                        requested_parameters: parameters(data_handle(i), v.asked),
                    })
                })
                .collect::<Vec<_>>();
            let req = CreateMonitoredItemsRequest {
                request_header: header(0),
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
            };
            self.item_requests += 1;
            self.send(
                env,
                Request::CreateMonitoredItems(Box::new(req)),
                Pending::CreateItems(chunk.to_vec()),
                0,
            )?;
        }
        for chunk in modify.chunks(ops) {
            let items = chunk
                .iter()
                .filter_map(|&i| {
                    let v = self.vars.get(i as usize)?;
                    Some(MonitoredItemModifyRequest {
                        monitored_item_id: v.item?.id,
                        requested_parameters: parameters(data_handle(i), v.asked),
                    })
                })
                .collect::<Vec<_>>();
            let req = ModifyMonitoredItemsRequest {
                request_header: header(0),
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_modify: items,
            };
            self.item_requests += 1;
            self.send(
                env,
                Request::ModifyMonitoredItems(Box::new(req)),
                Pending::ModifyItems(chunk.to_vec()),
                0,
            )?;
        }
        for chunk in delete.chunks(ops) {
            let req = DeleteMonitoredItemsRequest {
                request_header: header(0),
                subscription_id: sub,
                monitored_item_ids: chunk.iter().map(|(_, id)| *id).collect(),
            };
            self.item_requests += 1;
            self.send(
                env,
                Request::DeleteMonitoredItems(Box::new(req)),
                Pending::DeleteItems(chunk.to_vec()),
                0,
            )?;
        }
        Ok(())
    }

    // ---- forwarding ------------------------------------------------------------------

    /// A Read, Write, Call, HistoryRead or HistoryUpdate of one of this server's nodes.
    /// All but Reads run as the caller's mapped identity (`identities`), Reads on the main
    /// session.
    pub fn forward(&mut self, env: &mut Env<'_>, f: Forward) {
        if let Forward::HistoryRelease { node_id, token } = f {
            if let Err(e) = self.release_point(env, &node_id, &token) {
                self.lost(env, &e);
            }
            return;
        }
        let ident = match self.caller_identity(&f) {
            Ok(i) => i,
            Err(s) => return fail(f, s),
        };
        if self.phase != Phase::Running {
            match f {
                // A maxAge the server cannot meet gets the best effort (Part 4 §5.10.2): the
                // cell, BadNotConnected or (while_away) the last value, Uncertain.
                Forward::Read { read, .. } => {
                    let space = env.host.server.model.current();
                    let cell = space
                        .node(&read.node_id)
                        .and_then(|n| n.value_cell().map(|c| c.load()));
                    match cell {
                        Some(dv) => read.complete(dv),
                        None => read.fail(StatusCode::BadNotConnected),
                    }
                }
                Forward::Write { write, .. } => write.complete(StatusCode::BadNotConnected),
                Forward::Call { call, .. } => call.complete(Err(StatusCode::BadNotConnected)),
                Forward::History { reply, .. } => reply.fail(StatusCode::BadNotConnected),
                Forward::HistoryUpdate { reply, .. } => reply.fail(StatusCode::BadNotConnected),
                Forward::HistoryRelease { .. } => {}
            }
            return;
        }
        self.status.forwarded.fetch_add(1, Ordering::Relaxed);
        let r = match ident {
            Some(i) => self.forward_as(env, i, f),
            None => self.send_op(env, f, None),
        };
        if let Err(e) = r {
            self.lost(env, &e);
        }
    }

    /// Releases the server's continuation point behind resume token `token` (a client
    /// released it here), on the session it was given in while that session lasts: the
    /// main one or an identity's that is open (a point of a session gone went with it).
    /// Nothing waits for the answer.
    fn release_point(
        &mut self,
        env: &Env<'_>,
        node_id: &NodeId,
        token: &[u8],
    ) -> Result<(), String> {
        if self.phase != Phase::Running {
            return Ok(());
        }
        let ident = if super::history::point_of(token, self.session_number).is_some() {
            None
        } else {
            match self.idents.iter().position(|s| {
                s.state == IdentState::Ready && super::history::point_of(token, s.number).is_some()
            }) {
                Some(i) => Some(i as u16),
                None => return Ok(()),
            }
        };
        let session = ident.map_or(self.session_number, |i| self.idents[i as usize].number);
        let (Some(point), Some(wire)) = (
            super::history::point_of(token, session),
            self.names.wire_of_instance(node_id),
        ) else {
            return Ok(());
        };
        let req = HistoryReadRequest {
            request_header: header(0),
            // The details do not matter to a release; an event read's are the smallest.
            history_read_details: ExtensionObject::from_struct(&ReadEventDetails::default()),
            timestamps_to_return: TimestampsToReturn::Both,
            release_continuation_points: true,
            nodes_to_read: vec![HistoryReadValueId {
                node_id: wire,
                continuation_point: ByteString::from(point.to_vec()),
                ..Default::default()
            }],
        };
        self.send_on(
            env,
            Request::HistoryRead(Box::new(req)),
            Pending::HistoryRelease,
            ident,
        )
    }

    /// Is `local` one of the nodes mirrored from this server (an Object, Variable or
    /// Method)? Routes an event read of a notifier, which has no Variable slot.
    pub fn mirrors(&self, local: &NodeId) -> bool {
        self.names
            .remote_of_instance(local)
            .is_some_and(|r| self.mirror.contains_key(&r))
    }

    /// The `identities` entry a forwarded operation's caller is mapped to (`None`: the main
    /// session's user); `Err`: refused here (`unmapped = "refuse"`). Reads are not mapped.
    fn caller_identity(&self, f: &Forward) -> Result<Option<u16>, StatusCode> {
        let (user, roles) = match f {
            Forward::Read { .. } | Forward::HistoryRelease { .. } => return Ok(None),
            Forward::Write { user, roles, .. } => (user.as_str(), *roles),
            Forward::Call { call, .. } => (call.user.as_str(), call.roles),
            Forward::History { op, .. } => (&*op.user, op.roles),
            Forward::HistoryUpdate { op, .. } => (op.user.as_deref().unwrap_or(""), op.roles),
        };
        self.cfg
            .identity_for(user, roles)
            .map(|i| i.map(|i| i as u16))
    }

    /// Sends a forwarded operation on the session of `identities` entry `i`, opened first
    /// when it is not.
    fn forward_as(&mut self, env: &mut Env<'_>, i: u16, f: Forward) -> Result<(), String> {
        let now = env.now.mono_ns;
        let Some(s) = self.idents.get_mut(i as usize) else {
            fail(f, StatusCode::BadInternalError);
            return Ok(());
        };
        if let Some((st, until)) = s.refused {
            if now < until {
                fail(f, st);
                return Ok(());
            }
            s.refused = None;
        }
        s.last_use_ns = now;
        match s.state {
            IdentState::Ready => self.send_op(env, f, Some(i)),
            IdentState::Creating | IdentState::Activating => {
                if s.waiting.len() >= IDENT_WAITING_MAX {
                    fail(f, StatusCode::BadResourceUnavailable);
                } else {
                    s.waiting.push(f);
                }
                Ok(())
            }
            IdentState::Closed => {
                if !self.room_for_identity(env) {
                    fail(f, StatusCode::BadResourceUnavailable);
                    return Ok(());
                }
                self.idents[i as usize].waiting.push(f);
                self.ident_create(env, i)
            }
        }
    }

    /// Is there room for one more identity session (`max_identity_sessions`)? When all are
    /// taken, the one unused longest is closed if one is unused.
    fn room_for_identity(&mut self, env: &Env<'_>) -> bool {
        let open = self
            .idents
            .iter()
            .filter(|s| s.state != IdentState::Closed)
            .count();
        if open < self.cfg.max_identity_sessions as usize {
            return true;
        }
        let lru = (0..self.idents.len())
            .filter(|&k| self.idents[k].idle())
            .min_by_key(|&k| self.idents[k].last_use_ns);
        match lru {
            Some(k) => {
                self.close_identity(env, k as u16);
                true
            }
            None => false,
        }
    }

    /// Opens the session of `identities` entry `i` (CreateSession; ActivateSession follows).
    fn ident_create(&mut self, env: &Env<'_>, i: u16) -> Result<(), String> {
        let what = self
            .cfg
            .identities
            .get(i as usize)
            .map(|m| format!(" ({})", m.describe()))
            .unwrap_or_default();
        let req = self.create_session_request(env, &what)?;
        if let Some(s) = self.idents.get_mut(i as usize) {
            s.state = IdentState::Creating;
        }
        self.send_as(
            env,
            Request::CreateSession(Box::new(req)),
            Pending::IdentCreate(i),
            0,
            None,
            i,
        )
    }

    /// The session of entry `i` could not be opened: its waiting operations get `st`, and
    /// so do the next ones for [`IDENT_RETRY_NS`].
    fn ident_failed(&mut self, env: &Env<'_>, i: u16, st: StatusCode, why: &str) {
        let name = self
            .cfg
            .identities
            .get(i as usize)
            .map(|m| m.describe())
            .unwrap_or_default();
        tracing::warn!(server = %self.cfg.name, identity = %name, "gateway: the identity's session could not be opened: {why} ({st}); its operations get {st} for 5 s");
        self.status
            .set_error(&format!("identity {name}: {why} ({st})"));
        self.status_dirty = true;
        let Some(s) = self.idents.get_mut(i as usize) else {
            return;
        };
        s.state = IdentState::Closed;
        s.info = None;
        s.refused = Some((st, env.now.mono_ns + IDENT_RETRY_NS));
        for f in s.waiting.drain(..) {
            fail(f, st);
        }
        self.status
            .identity_refusals
            .fetch_add(1, Ordering::Relaxed);
        self.count_identities();
    }

    /// The identity sessions open now, for the status and the metrics.
    fn count_identities(&self) {
        let n = self
            .idents
            .iter()
            .filter(|s| s.state == IdentState::Ready)
            .count();
        self.status
            .identity_sessions
            .store(n as u64, Ordering::Relaxed);
    }

    /// CreateSession answered for entry `i`: activate as its user.
    fn ident_created(&mut self, env: &Env<'_>, i: u16, resp: Response) -> Result<(), String> {
        let st = service_result(&resp);
        let r = match resp {
            Response::CreateSession(r) if st.is_good() => r,
            _ => {
                let st = refusal(st);
                self.ident_failed(env, i, st, "CreateSession refused");
                return Ok(());
            }
        };
        let info = SessionInfo {
            auth: r.authentication_token.clone(),
            server_nonce: r.server_nonce.clone(),
            server_certificate: r.server_certificate.clone(),
            policies: r
                .server_endpoints
                .iter()
                .flat_map(|e| e.user_identity_tokens.iter().cloned())
                .collect(),
        };
        let req = self.activate_request(&info, self.cfg.identities.get(i as usize));
        let auth = info.auth.clone();
        let granted_ns = (r.revised_session_timeout.max(0.0) * 1e6) as u64;
        let idle_ns = (self.cfg.identity_idle_ms * 1_000_000).min(granted_ns / 2);
        if let Some(s) = self.idents.get_mut(i as usize) {
            s.idle_ns = idle_ns;
            s.info = Some(info);
            s.number = SESSIONS.fetch_add(1, Ordering::Relaxed);
            s.state = IdentState::Activating;
        }
        match req {
            Ok(req) => self.send_as(
                env,
                Request::ActivateSession(Box::new(req)),
                Pending::IdentActivate(i),
                0,
                Some(auth),
                i,
            ),
            Err(e) => {
                self.close_identity(env, i);
                self.ident_failed(env, i, StatusCode::BadConfigurationError, &e);
                Ok(())
            }
        }
    }

    /// ActivateSession answered for entry `i`: the waiting operations go, or get the
    /// server's refusal as it gave it (BadUserAccessDenied, BadIdentityTokenRejected …).
    fn ident_activated(&mut self, env: &mut Env<'_>, i: u16, resp: Response) -> Result<(), String> {
        let st = service_result(&resp);
        let r = match resp {
            Response::ActivateSession(r) if st.is_good() => r,
            _ => {
                let st = refusal(st);
                self.close_identity(env, i);
                self.ident_failed(env, i, st, "the server refused the login");
                return Ok(());
            }
        };
        let Some(s) = self.idents.get_mut(i as usize) else {
            return Ok(());
        };
        if let Some(info) = s.info.as_mut() {
            info.server_nonce = r.server_nonce.clone();
        }
        s.state = IdentState::Ready;
        let waiting = std::mem::take(&mut s.waiting);
        self.count_identities();
        if let Some(m) = self.cfg.identities.get(i as usize) {
            tracing::info!(server = %self.cfg.name, identity = %m.describe(), "gateway: identity session open");
        }
        for f in waiting {
            self.send_op(env, f, Some(i))?;
        }
        Ok(())
    }

    /// An operation sent on entry `i`'s session was answered: a session the server no
    /// longer knows (BadSessionIdInvalid …) is opened again by the next operation. True
    /// when it was so.
    fn ident_done(&mut self, i: u16, st: StatusCode) -> bool {
        let Some(s) = self.idents.get_mut(i as usize) else {
            return false;
        };
        s.busy = s.busy.saturating_sub(1);
        if matches!(
            st,
            StatusCode::BadSessionIdInvalid
                | StatusCode::BadSessionClosed
                | StatusCode::BadSessionNotActivated
        ) {
            if s.state == IdentState::Ready {
                s.state = IdentState::Closed;
                s.info = None;
            }
            self.count_identities();
            return true;
        }
        false
    }

    /// Closes entry `i`'s session (CloseSession sent when there is one).
    fn close_identity(&mut self, env: &Env<'_>, i: u16) {
        let Some(s) = self.idents.get_mut(i as usize) else {
            return;
        };
        let auth = s.info.take().map(|x| x.auth);
        s.state = IdentState::Closed;
        self.count_identities();
        if let Some(auth) = auth {
            let req = CloseSessionRequest {
                request_header: header(0),
                delete_subscriptions: true,
            };
            let _ = self.send_as(
                env,
                Request::CloseSession(Box::new(req)),
                Pending::CloseSession,
                0,
                Some(auth),
                i,
            );
        }
    }

    /// Closes the identity sessions unused for `identity_idle_ms`.
    fn close_idle_identities(&mut self, env: &Env<'_>) {
        for i in 0..self.idents.len() {
            let s = &self.idents[i];
            if s.idle() && env.now.mono_ns >= s.last_use_ns.saturating_add(s.idle_ns) {
                if let Some(m) = self.cfg.identities.get(i) {
                    tracing::info!(server = %self.cfg.name, identity = %m.describe(), "gateway: identity session closed (unused)");
                }
                self.close_identity(env, i as u16);
            }
        }
    }

    /// The connection is gone: so are the identity sessions (opened again on the next
    /// connection when used); their waiting operations get `st`.
    fn drop_identities(&mut self, st: StatusCode) {
        for s in self.idents.iter_mut() {
            s.state = IdentState::Closed;
            s.info = None;
            s.busy = 0;
            for f in s.waiting.drain(..) {
                fail(f, st);
            }
        }
        self.count_identities();
    }

    /// Sends a forwarded operation on the main session (`ident` `None`) or an identity's.
    fn send_op(&mut self, env: &mut Env<'_>, f: Forward, ident: Option<u16>) -> Result<(), String> {
        match f {
            // Sent by `release_point`, never queued for a session.
            Forward::HistoryRelease { .. } => Ok(()),
            Forward::Read { read, .. } => {
                let wire = self.names.wire_of_instance(&read.node_id);
                let Some(wire) = wire else {
                    read.fail(StatusCode::BadNodeIdUnknown);
                    return Ok(());
                };
                let var = env
                    .host
                    .server
                    .model
                    .current()
                    .node_index(&read.node_id)
                    .and_then(|i| env.by_node.get(&i))
                    .map_or(u32::MAX, |&(_, v)| v);
                let req = ReadRequest {
                    request_header: header(0),
                    max_age: 0.0,
                    timestamps_to_return: TimestampsToReturn::Both,
                    nodes_to_read: vec![ReadValueId {
                        node_id: wire,
                        attribute_id: 13,
                        ..Default::default()
                    }],
                };
                self.send(
                    env,
                    Request::Read(Box::new(req)),
                    Pending::Read(vec![(var, read)]),
                    0,
                )
            }
            Forward::Write {
                node,
                mut value,
                index_range,
                write,
                ..
            } => {
                let wire = self.names.wire_of_instance(&node);
                let Some(wire) = wire else {
                    write.complete(StatusCode::BadNodeIdUnknown);
                    return Ok(());
                };
                self.names.value_out(&mut value.value);
                value.server_timestamp = None;
                let var = env
                    .host
                    .server
                    .model
                    .current()
                    .node_index(&node)
                    .and_then(|i| env.by_node.get(&i))
                    .map_or(u32::MAX, |&(_, v)| v);
                let req = WriteRequest {
                    request_header: header(0),
                    nodes_to_write: vec![WriteValue {
                        node_id: wire,
                        attribute_id: 13,
                        index_range: range_wire(&index_range),
                        value,
                    }],
                };
                self.send_on(
                    env,
                    Request::Write(Box::new(req)),
                    Pending::Write(var, write),
                    ident,
                )
            }
            Forward::Call { call, .. } => {
                let object = self.names.wire_of_instance(&call.object_id);
                // A namespace-0 method (a condition's Acknowledge, Confirm …) is the same
                // there.
                let method = if call.method_id.namespace == 0 {
                    Some(call.method_id.clone())
                } else {
                    self.names.wire_of_instance(&call.method_id)
                };
                let (Some(object), Some(method)) = (object, method) else {
                    call.complete(Err(StatusCode::BadNodeIdUnknown));
                    return Ok(());
                };
                let mut inputs = call.inputs.clone();
                for i in inputs.iter_mut() {
                    self.names.value_out(i);
                }
                // An EventId of one of this server's events (the first argument of the
                // condition methods) goes back as the server's own.
                if let Some(Variant::ByteString(b)) = inputs.first_mut() {
                    if let Some(theirs) = event_id_there(self.event_tag, b.as_bytes()) {
                        *b = ByteString::from(theirs.to_vec());
                    }
                }
                let req = CallRequest {
                    request_header: header(0),
                    methods_to_call: vec![CallMethodRequest {
                        object_id: object,
                        method_id: method,
                        input_arguments: inputs,
                    }],
                };
                self.send_on(
                    env,
                    Request::Call(Box::new(req)),
                    Pending::Call(call),
                    ident,
                )
            }
            Forward::History { op, reply } => {
                if !self.cfg.history {
                    reply.fail(StatusCode::BadHistoryOperationUnsupported);
                    return Ok(());
                }
                let wire = self.names.wire_of_instance(&op.node_id);
                let Some(wire) = wire else {
                    reply.fail(StatusCode::BadNodeIdUnknown);
                    return Ok(());
                };
                let mut events = None;
                // Continuation points belong to the session they were given in.
                let session = match ident {
                    Some(i) => self.idents.get(i as usize).map_or(0, |s| s.number),
                    None => self.session_number,
                };
                let continuation_point = match &op.resume {
                    None => ByteString::null(),
                    Some(t) => match super::history::point_of(t, session) {
                        Some(p) => ByteString::from(p.to_vec()),
                        // A point of an earlier session: the server has forgotten it.
                        None => {
                            reply.fail(StatusCode::BadContinuationPointInvalid);
                            return Ok(());
                        }
                    },
                };
                let details = match &*op.details {
                    ReadDetails::Raw(d) => {
                        let mut d = d.clone();
                        // At most what one answer here may hold; the server gives a
                        // continuation point for the rest.
                        d.num_values_per_node = op.max_values;
                        ExtensionObject::from_struct(&d)
                    }
                    ReadDetails::AtTime(d) => ExtensionObject::from_struct(d),
                    ReadDetails::Processed(d) => {
                        let mut d = d.clone();
                        d.aggregate_type = op.aggregate.iter().cloned().collect();
                        ExtensionObject::from_struct(&d)
                    }
                    ReadDetails::Events(d) => {
                        // The filter in the server's namespaces; at most what one answer
                        // here may hold.
                        let (filter, select) = super::history::filter_out(&self.names, &d.filter);
                        events = Some((select, op.max_values));
                        ExtensionObject::from_struct(&ReadEventDetails {
                            num_values_per_node: op.max_values,
                            start_time: d.start_time,
                            end_time: d.end_time,
                            filter,
                        })
                    }
                };
                let req = HistoryReadRequest {
                    request_header: header(0),
                    history_read_details: details,
                    timestamps_to_return: op.timestamps,
                    release_continuation_points: false,
                    nodes_to_read: vec![HistoryReadValueId {
                        node_id: wire,
                        index_range: range_wire(&range_text(op.index_range.as_ref())),
                        continuation_point,
                        ..Default::default()
                    }],
                };
                self.send_on(
                    env,
                    Request::HistoryRead(Box::new(req)),
                    Pending::History {
                        reply,
                        session,
                        events,
                    },
                    ident,
                )
            }
            Forward::HistoryUpdate { op, reply } => {
                if !(self.cfg.history && self.cfg.history_updates) {
                    reply.fail(StatusCode::BadHistoryOperationUnsupported);
                    return Ok(());
                }
                let details = match self.update_out(op.details) {
                    Ok(d) => d,
                    Err(s) => {
                        reply.fail(s);
                        return Ok(());
                    }
                };
                let req = HistoryUpdateRequest {
                    request_header: header(0),
                    history_update_details: vec![details],
                };
                self.send_on(
                    env,
                    Request::HistoryUpdate(Box::new(req)),
                    Pending::HistoryUpdate(reply),
                    ident,
                )
            }
        }
    }

    /// A HistoryUpdate operation's details for the server: its node, values, event fields
    /// and EventIds in the server's namespaces and names. `Err`: the node is not mirrored
    /// from it (BadNodeIdUnknown).
    fn update_out(&self, details: UpdateDetails) -> Result<ExtensionObject, StatusCode> {
        let wire = self
            .names
            .wire_of_instance(details.node_id())
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        Ok(match details {
            UpdateDetails::Data(mut d) => {
                d.node_id = wire;
                for dv in d.update_values.iter_mut() {
                    self.names.value_out(&mut dv.value);
                }
                ExtensionObject::from_struct(&d)
            }
            UpdateDetails::DeleteRaw(mut d) => {
                d.node_id = wire;
                ExtensionObject::from_struct(&d)
            }
            UpdateDetails::DeleteAtTime(mut d) => {
                d.node_id = wire;
                ExtensionObject::from_struct(&d)
            }
            UpdateDetails::Events(mut d) => {
                d.node_id = wire;
                // The filter in the server's namespaces; each event's fields for the clauses
                // sent there, in their order.
                let (filter, select) = super::history::filter_out(&self.names, &d.filter);
                d.filter = filter;
                for e in d.event_data.iter_mut() {
                    e.event_fields = select.event_out(
                        &self.names,
                        self.event_tag,
                        std::mem::take(&mut e.event_fields),
                    );
                }
                ExtensionObject::from_struct(&d)
            }
            UpdateDetails::DeleteEvents(mut d) => {
                d.node_id = wire;
                // EventIds of the server's events passed on here go back as its own.
                for id in d.event_ids.iter_mut() {
                    if let Some(theirs) = event_id_there(self.event_tag, id.as_bytes()) {
                        *id = ByteString::from(theirs.to_vec());
                    }
                }
                ExtensionObject::from_struct(&d)
            }
        })
    }

    /// Sends an operation's request on the main session or entry `ident`'s (counted out).
    fn send_on(
        &mut self,
        env: &Env<'_>,
        req: Request,
        what: Pending,
        ident: Option<u16>,
    ) -> Result<(), String> {
        let Some(i) = ident else {
            return self.send(env, req, what, 0);
        };
        let s = self.idents.get_mut(i as usize).ok_or("no such identity")?;
        let auth = s
            .info
            .as_ref()
            .map(|x| x.auth.clone())
            .ok_or("the identity's session is gone")?;
        s.busy += 1;
        s.last_use_ns = env.now.mono_ns;
        self.send_as(env, req, what, 0, Some(auth), i)
    }

    // ---- the mirror --------------------------------------------------------------------

    /// Makes the mirror what the crawl found: removes what went, adds what came (types
    /// first, then instances, children before parents), sets their hooks and demand marks.
    fn apply(&mut self, env: &mut Env<'_>, found: Found2) -> Result<(), String> {
        self.status.crawls.fetch_add(1, Ordering::Relaxed);
        self.mirrored_start_time = self.start_time;
        if self.cfg.refresh_interval_ms > 0 {
            self.next_refresh_ns = env.now.mono_ns + self.cfg.refresh_interval_ms * 1_000_000;
        }
        if found.truncated {
            self.status.set_error(&format!(
                "the mirror stopped at {} nodes (max_nodes)",
                found.nodes.len()
            ));
        }
        self.register_namespaces(env)?;
        let server = env.host.server.clone();
        let shared = env.shared.clone();
        let id = self.id;
        let timeout_ms = env.limits.request_timeout_ms;
        if self.read_source.is_none() {
            let sh = shared.clone();
            self.read_source = Some(AsyncSource::new(
                Arc::new(move |read| sh.forward(Forward::Read { server: id, read })),
                env.limits.forward_queue,
                timeout_ms,
            ));
        }
        let read_source = self.read_source.clone().ok_or("no read source")?;
        let write_hook = {
            let sh = shared.clone();
            AsyncWriteHook {
                start: Arc::new(move |w, done| {
                    sh.forward(Forward::Write {
                        server: id,
                        node: w.node_id.clone(),
                        value: w.value.clone(),
                        index_range: w.index_range.to_string(),
                        user: w.user.to_string(),
                        roles: w.roles,
                        write: done,
                    })
                }),
                timeout_ms,
            }
        };
        let method = {
            let sh = shared.clone();
            AppMethod {
                inputs: Vec::new(),
                outputs: Vec::new(),
                needs_write: true,
                handler: MethodHandler::Forward {
                    start: Arc::new(move |call| sh.forward(Forward::Call { server: id, call })),
                    timeout_ms,
                },
            }
        };

        // Types: the ones not here yet, supertypes first.
        let space = server.model.current();
        let mut type_local: HashMap<NodeId, NodeId> = self.mirrored_types.clone();
        let mut types_to_add: Vec<(usize, NodeId, NodeId, usize)> = Vec::new();
        {
            let by_remote: HashMap<&NodeId, usize> = found
                .types
                .iter()
                .enumerate()
                .map(|(i, t)| (&t.remote, i))
                .collect();
            for (i, t) in found.types.iter().enumerate() {
                if self.mirrored_types.contains_key(&t.remote)
                    || t.browse_name.name.as_str().is_empty()
                {
                    continue;
                }
                let local = self.names.local_name_id(&t.remote);
                if local.namespace == 0 {
                    continue;
                }
                type_local.insert(t.remote.clone(), local.clone());
                if space.node(&local).is_some() {
                    continue; // another server's mirror (or a loaded NodeSet) has it
                }
                let supertype = match &t.supertype {
                    Some(s) if s.namespace == 0 && space.node(s).is_some() => s.clone(),
                    Some(s) if by_remote.contains_key(s) || self.mirrored_types.contains_key(s) => {
                        self.names.local_name_id(s)
                    }
                    Some(s) => {
                        let l = self.names.local_name_id(s);
                        if l.namespace != 0 && space.node(&l).is_some() {
                            l
                        } else {
                            build::base_type(t.class)
                        }
                    }
                    None => build::base_type(t.class),
                };
                // Depth within the found types, so supertypes are added first.
                let mut depth = 0;
                let mut at = t.supertype.clone();
                while let Some(s) = at {
                    match by_remote.get(&s) {
                        Some(&j) if depth < 64 => {
                            depth += 1;
                            at = found.types[j].supertype.clone();
                        }
                        _ => break,
                    }
                }
                types_to_add.push((i, local, supertype, depth));
            }
        }
        types_to_add.sort_by_key(|(_, _, _, d)| *d);
        drop(space);
        // What came and what went.
        let found_ids: std::collections::HashSet<&NodeId> =
            found.nodes.iter().map(|f| &f.remote).collect();
        let gone: Vec<NodeId> = self
            .mirror
            .keys()
            .filter(|r| !found_ids.contains(r))
            .cloned()
            .collect();
        // Removals first (one edit), their items deleted.
        if !gone.is_empty() {
            let locals: Vec<NodeId> = gone
                .iter()
                .filter_map(|r| self.mirror.get(r).map(|m| m.local.clone()))
                .collect();
            crate::builder::edit_model(&server, &env.host.writer, |e| {
                for l in &locals {
                    let _ = e.delete_node(l, true);
                }
                Ok(())
            })
            .map_err(|s| format!("mirror: removing nodes: {s}"))?;
            for r in &gone {
                if let Some(m) = self.mirror.remove(r) {
                    if let Some(vi) = m.var {
                        if let Some(v) = self.vars.get_mut(vi as usize) {
                            v.removed = true;
                            v.shards.clear();
                            env.by_node.remove(&v.index);
                        }
                        self.mark(vi);
                    }
                }
            }
            *env.nodes_total = env.nodes_total.saturating_sub(gone.len() as u64);
        }
        // Local ids of the types named by the nodes (known here, mirrored, or a fallback).
        let names = &self.names;
        let type_here = |remote: &Option<NodeId>, fallback: u32| -> Option<NodeId> {
            let r = remote.as_ref()?;
            if r.namespace == 0 {
                return Some(r.clone());
            }
            Some(
                type_local
                    .get(r)
                    .cloned()
                    .unwrap_or_else(|| names.local_name_id(r)),
            )
            .or(Some(NodeId::ns0(fallback)))
        };

        // What came.
        let new: Vec<usize> = (0..found.nodes.len())
            .filter(|&i| !self.mirror.contains_key(&found.nodes[i].remote))
            .collect();
        // Parents of each new node that were mirrored before (their references to it are
        // declared by the new node, inverse).
        let mut old_parents: HashMap<usize, Vec<(NodeId, NodeId)>> = HashMap::new();
        for f in &found.nodes {
            let Some(m) = self.mirror.get(&f.remote) else {
                continue;
            };
            for (rt, c) in &f.refs {
                if !self.mirror.contains_key(&found.nodes[*c].remote) {
                    let rt_local = type_here(&Some(rt.clone()), 33).unwrap_or(NodeId::ns0(33));
                    old_parents
                        .entry(*c)
                        .or_default()
                        .push((rt_local, m.local.clone()));
                }
            }
        }
        let first = self.folder.is_none();
        let folder = NodeId::string(self.gateway_ns, self.cfg.name.as_str());
        let new_roots: Vec<usize> = found
            .roots
            .iter()
            .copied()
            .filter(|r| !self.mirror.contains_key(&found.nodes[*r].remote))
            .collect();
        let writes = self.cfg.writes;
        let calls = self.cfg.calls;
        // HistoryRead is shown only where it is forwarded (docs/Gateway.md "History").
        let history = self.cfg.history && env.host.history.is_some();
        let history_updates = history && self.cfg.history_updates;
        let now_ns = env.now.mono_ns.max(1);

        // Types (one edit).
        if !types_to_add.is_empty() {
            let ts = &found.types;
            crate::builder::edit_model(&server, &env.host.writer, |e| {
                for (i, local, sup, _) in &types_to_add {
                    if e.space().node(local).is_some() {
                        continue;
                    }
                    if let Some(n) = build::type_node(&ts[*i], local.clone(), sup.clone()) {
                        e.add_node(n)?;
                    }
                }
                Ok(())
            })
            .map_err(|s| format!("mirror: adding types: {s}"))?;
            for (i, local, _, _) in &types_to_add {
                self.mirrored_types
                    .insert(found.types[*i].remote.clone(), local.clone());
            }
        }
        // Instances, children first, in edits of NODES_PER_EDIT.
        let order: Vec<usize> = new.iter().rev().copied().collect();
        let mut added: Vec<(usize, u32, u32)> = Vec::with_capacity(order.len());
        for chunk in order.chunks(NODES_PER_EDIT) {
            let nodes = &found.nodes;
            let names = &self.names;
            let mirror = &self.mirror;
            let got = crate::builder::edit_model(&server, &env.host.writer, |e| {
                let mut out = Vec::with_capacity(chunk.len());
                for &i in chunk {
                    let f = &nodes[i];
                    let local = names.local_instance(&f.remote);
                    let mut forward: Vec<(NodeId, NodeId)> = f
                        .refs
                        .iter()
                        .map(|(rt, c)| {
                            let rt_local =
                                type_here(&Some(rt.clone()), 33).unwrap_or(NodeId::ns0(33));
                            (rt_local, names.local_instance(&nodes[*c].remote))
                        })
                        .filter(|(_, t)| e.space().node(t).is_some())
                        .collect();
                    forward.dedup();
                    let type_def =
                        type_here(&f.type_def, 0).filter(|t| e.space().node(t).is_some());
                    let data_type = f
                        .var
                        .as_ref()
                        .and_then(|v| type_here(&Some(v.data_type.clone()), 24))
                        .filter(|t| e.space().node(t).is_some())
                        .unwrap_or(NodeId::ns0(24));
                    let mut node = build::instance(build::Instance {
                        local: local.clone(),
                        class: f.class,
                        browse_name: f.browse_name.clone(),
                        display_name: f.display_name.clone(),
                        type_def: type_def.clone(),
                        forward,
                        var: f.var.as_deref(),
                        data_type,
                        event_notifier: f.event_notifier,
                        executable: f.executable && calls,
                        writable: writes,
                        history,
                        history_updates,
                    });
                    // References from nodes mirrored before, declared here (inverse).
                    if let Some(ps) = old_parents.get(&i) {
                        let mut refs = node.references.load().clone();
                        for (rt, p) in ps {
                            refs.push(uaring_core::address_space::Reference {
                                reference_type: rt.clone(),
                                is_forward: false,
                                target: uaring_core::types::ExpandedNodeId::local(p.clone()),
                            });
                        }
                        node.references = refs.into();
                    }
                    if !first && new_roots.contains(&i) {
                        let mut refs = node.references.load().clone();
                        refs.push(uaring_core::address_space::Reference {
                            reference_type: NodeId::ns0(35),
                            is_forward: false,
                            target: uaring_core::types::ExpandedNodeId::local(folder.clone()),
                        });
                        node.references = refs.into();
                    }
                    let is_var = f.class == NodeClass::Variable;
                    let writable = node.as_variable().is_some_and(|v| v.access_level & 2 != 0);
                    if mirror.contains_key(&f.remote) || e.space().node(&local).is_some() {
                        continue;
                    }
                    // A condition (an Object of a ConditionType subtype) or a ShelvingState:
                    // its methods called here with its ConditionId (Acknowledge, Confirm …
                    // of namespace 0) are forwarded to it.
                    let condition = f.class == NodeClass::Object
                        && calls
                        && type_def.as_ref().is_some_and(|t| {
                            [CONDITION_TYPE, SHELVED_STATE_MACHINE_TYPE]
                                .iter()
                                .any(|&b| e.space().is_subtype_of(t, &NodeId::ns0(b)))
                        });
                    let index = e.add_node(node)?;
                    if condition {
                        e.set_method(local.clone(), method.clone());
                    }
                    let generation = e.space().node_at(index).map_or(0, |n| n.generation());
                    if is_var {
                        e.set_read_through(
                            index,
                            ReadThrough {
                                source: read_source.clone(),
                                fresh_ns: Arc::new(AtomicU64::new(now_ns)),
                            },
                        );
                        if writable {
                            e.set_async_write_hook(index, write_hook.clone());
                        }
                        e.space().changes().track_demand(index, true);
                    }
                    if f.class == NodeClass::Method && f.executable && calls {
                        e.set_method(local.clone(), method.clone());
                    }
                    out.push((i, index, generation));
                }
                Ok(out)
            })
            .map_err(|s| format!("mirror: adding nodes: {s}"))?;
            added.extend(got);
        }
        // The server's folder and status (the first time), organizing the roots.
        if first {
            let roots: Vec<NodeId> = found
                .roots
                .iter()
                .map(|&r| self.names.local_instance(&found.nodes[r].remote))
                .collect();
            let ns = self.gateway_ns;
            let name = self.cfg.name.clone();
            let endpoint = self.cfg.endpoint.clone();
            crate::builder::edit_model(&server, &env.host.writer, |e| {
                let mut node = build::server_folder(folder.clone(), &name, ns);
                let mut refs = node.references.load().clone();
                for r in &roots {
                    if e.space().node(r).is_some() {
                        refs.push(uaring_core::address_space::Reference {
                            reference_type: NodeId::ns0(35),
                            is_forward: true,
                            target: uaring_core::types::ExpandedNodeId::local(r.clone()),
                        });
                    }
                }
                node.references = refs.into();
                e.add_node(node)?;
                for (prop, value) in status_values(&name, &endpoint) {
                    e.add_node(build::status_property(
                        NodeId::string(ns, format!("{name}.{prop}")),
                        prop,
                        ns,
                        folder.clone(),
                        value,
                    ))?;
                }
                Ok(())
            })
            .map_err(|s| format!("mirror: the server's folder: {s}"))?;
            self.folder = Some(folder.clone());
            self.roots = roots;
        }
        // Bookkeeping: the mirror, the Variables.
        let space = server.model.current();
        let added_nodes = added.len() as u64;
        for (i, index, generation) in added {
            let f = &found.nodes[i];
            let local = self.names.local_instance(&f.remote);
            let var = if f.class == NodeClass::Variable {
                let fresh = space
                    .read_through(index)
                    .map(|r| r.fresh_ns.clone())
                    .unwrap_or_default();
                let v = Var {
                    index,
                    generation,
                    remote: f.remote.clone(),
                    fresh,
                    shards: Vec::new(),
                    item: None,
                    busy: false,
                    dirty: false,
                    removed: false,
                    notified: 0,
                    refused: false,
                    asked: (0.0, 0),
                    pinned: None,
                };
                let slot = match self.var_free.pop() {
                    Some(s) => {
                        if let Some(x) = self.vars.get_mut(s as usize) {
                            *x = v;
                        }
                        s
                    }
                    None => {
                        self.vars.push(v);
                        (self.vars.len() - 1) as u32
                    }
                };
                env.by_node.insert(index, (self.id, slot));
                Some(slot)
            } else {
                None
            };
            self.mirror
                .insert(f.remote.clone(), Mirrored { local, var });
        }
        // Every server's mirror counts against gateway.max_nodes.
        *env.nodes_total += added_nodes;
        self.status
            .nodes
            .store(self.mirror.len() as u64, Ordering::Relaxed);
        self.status.set_state(State::Connected);
        self.status_dirty = true;
        tracing::info!(
            server = %self.cfg.name,
            nodes = self.mirror.len(),
            types = self.mirrored_types.len(),
            removed = gone.len(),
            "gateway: mirrored"
        );
        Ok(())
    }

    /// Closes the session (a reload removed the server) and deletes its nodes.
    pub fn remove(&mut self, env: &mut Env<'_>) {
        self.removing = true;
        if self.phase == Phase::Running {
            for i in 0..self.idents.len() {
                self.close_identity(env, i as u16);
            }
            let req = CloseSessionRequest {
                request_header: header(0),
                delete_subscriptions: true,
            };
            let _ = self.send(
                env,
                Request::CloseSession(Box::new(req)),
                Pending::CloseSession,
                0,
            );
        }
        self.close = self.conn.is_some();
        let mut locals: Vec<NodeId> = Vec::new();
        if let Some(f) = &self.folder {
            locals.push(f.clone());
            for p in STATUS_PROPERTIES {
                locals.push(NodeId::string(
                    self.gateway_ns,
                    format!("{}.{p}", self.cfg.name),
                ));
            }
        }
        // Parents before children: deleting a parent drops its references from the
        // children's short lists, never the other way round.
        locals.extend(self.roots.iter().cloned());
        locals.extend(self.mirror.values().map(|m| m.local.clone()));
        let server = env.host.server.clone();
        let _ = crate::builder::edit_model(&server, &env.host.writer, |e| {
            for l in &locals {
                let _ = e.delete_node(l, true);
            }
            Ok(())
        });
        for v in &self.vars {
            env.by_node.remove(&v.index);
            if v.item.is_some() {
                *env.items_total = env.items_total.saturating_sub(1);
            }
        }
        *env.nodes_total = env.nodes_total.saturating_sub(self.mirror.len() as u64);
        for (_, o) in self.pending.drain() {
            match o.what {
                Pending::Read(reads) => reads
                    .into_iter()
                    .for_each(|(_, r)| r.fail(StatusCode::BadNotConnected)),
                Pending::Write(_, w) => w.complete(StatusCode::BadNotConnected),
                Pending::Call(c) => c.complete(Err(StatusCode::BadNotConnected)),
                Pending::History { reply, .. } => reply.fail(StatusCode::BadNotConnected),
                Pending::HistoryUpdate(reply) => reply.fail(StatusCode::BadNotConnected),
                _ => {}
            }
        }
        self.drop_identities(StatusCode::BadNotConnected);
        self.mirror.clear();
        self.vars.clear();
        self.status.set_state(State::Removed);
    }

    /// Sends CloseSession (the gateway stops).
    pub fn goodbye(&mut self, env: &mut Env<'_>) {
        if self.phase == Phase::Running {
            for i in 0..self.idents.len() {
                self.close_identity(env, i as u16);
            }
            let req = CloseSessionRequest {
                request_header: header(0),
                delete_subscriptions: true,
            };
            let _ = self.send(
                env,
                Request::CloseSession(Box::new(req)),
                Pending::CloseSession,
                0,
            );
        }
    }

    /// Stores the status Properties (on changes, and every second for the counters).
    fn publish_status(&mut self, env: &Env<'_>) {
        self.status_dirty = false;
        self.status_at = env.now.mono_ns + 1_000_000_000;
        if self.folder.is_none() || self.gateway_ns == 0 {
            return;
        }
        let space = env.host.server.model.current();
        let st = &self.status;
        let values: [(&str, Variant); 8] = [
            ("State", Variant::String(st.state().name().into())),
            (
                "Endpoint",
                Variant::String(self.cfg.endpoint.as_str().into()),
            ),
            (
                "LastError",
                Variant::String(st.last_error().as_str().into()),
            ),
            (
                "Reconnects",
                Variant::UInt64(st.reconnects.load(Ordering::Relaxed)),
            ),
            (
                "MonitoredItems",
                Variant::UInt64(st.items.load(Ordering::Relaxed)),
            ),
            ("Nodes", Variant::UInt64(st.nodes.load(Ordering::Relaxed))),
            (
                "ServiceLevel",
                Variant::Byte(st.service_level.load(Ordering::Relaxed)),
            ),
            (
                "IdentitySessions",
                Variant::UInt64(st.identity_sessions.load(Ordering::Relaxed)),
            ),
        ];
        for (p, v) in values {
            let id = NodeId::string(self.gateway_ns, format!("{}.{p}", self.cfg.name));
            let Some(i) = space.node_index(&id) else {
                continue;
            };
            let same = space
                .node_at(i)
                .and_then(|n| n.value_cell())
                .is_some_and(|c| c.load().value == v);
            if !same {
                let _ = space.store_value(i, DataValue::new(v));
            }
        }
    }
}

/// The status Properties of a server's folder.
const STATUS_PROPERTIES: [&str; 8] = [
    "State",
    "Endpoint",
    "LastError",
    "Reconnects",
    "MonitoredItems",
    "Nodes",
    "ServiceLevel",
    "IdentitySessions",
];

fn status_values(_name: &str, endpoint: &str) -> Vec<(&'static str, Variant)> {
    vec![
        ("State", Variant::String("connected".into())),
        ("Endpoint", Variant::String(endpoint.into())),
        ("LastError", Variant::String("".into())),
        ("Reconnects", Variant::UInt64(0)),
        ("MonitoredItems", Variant::UInt64(0)),
        ("Nodes", Variant::UInt64(0)),
        ("ServiceLevel", Variant::Byte(0)),
        ("IdentitySessions", Variant::UInt64(0)),
    ]
}

/// The BaseEventType fields the gateway's event item selects, in order (ConditionId and
/// Changes follow).
const EVENT_FIELDS: [&str; 8] = [
    "EventId",
    "EventType",
    "SourceNode",
    "SourceName",
    "Time",
    "ReceiveTime",
    "Message",
    "Severity",
];

/// Where the condition fields begin in the event item's select clauses (after
/// [`EVENT_FIELDS`], ConditionId and Changes).
const FIRST_CONDITION_FIELD: usize = EVENT_FIELDS.len() + 2;

/// The condition fields (Part 9 §5.5–5.8) the gateway's event item selects: (the type that
/// defines the field, its browse path). A passed-on condition event carries those the server
/// sent, so a client here filters on and shows AckedState/Id, ActiveState/Id, Retain, …
/// as it would at the server.
const CONDITION_FIELDS: [(u32, &str); 30] = [
    (ids::ConditionType, "ConditionClassId"),
    (ids::ConditionType, "ConditionClassName"),
    (ids::ConditionType, "ConditionName"),
    (ids::ConditionType, "BranchId"),
    (ids::ConditionType, "Retain"),
    (ids::ConditionType, "EnabledState"),
    (ids::ConditionType, "EnabledState/Id"),
    (ids::ConditionType, "Quality"),
    (ids::ConditionType, "Quality/SourceTimestamp"),
    (ids::ConditionType, "LastSeverity"),
    (ids::ConditionType, "LastSeverity/SourceTimestamp"),
    (ids::ConditionType, "Comment"),
    (ids::ConditionType, "Comment/SourceTimestamp"),
    (ids::ConditionType, "ClientUserId"),
    (ids::AcknowledgeableConditionType, "AckedState"),
    (ids::AcknowledgeableConditionType, "AckedState/Id"),
    (ids::AcknowledgeableConditionType, "ConfirmedState"),
    (ids::AcknowledgeableConditionType, "ConfirmedState/Id"),
    (ids::AlarmConditionType, "ActiveState"),
    (ids::AlarmConditionType, "ActiveState/Id"),
    (ids::AlarmConditionType, "InputNode"),
    (ids::AlarmConditionType, "SuppressedOrShelved"),
    (ids::AlarmConditionType, "ShelvingState/CurrentState"),
    (ids::AlarmConditionType, "ShelvingState/CurrentState/Id"),
    (ids::AlarmConditionType, "ShelvingState/UnshelveTime"),
    (ids::AlarmConditionType, "MaxTimeShelved"),
    (ids::LimitAlarmType, "HighHighLimit"),
    (ids::LimitAlarmType, "HighLimit"),
    (ids::LimitAlarmType, "LowLimit"),
    (ids::LimitAlarmType, "LowLowLimit"),
];

/// A certificate file (DER or PEM) as DER.
fn read_certificate(path: &str) -> Result<Vec<u8>, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("server_certificate {path:?}: {e}"))?;
    uaring_crypto::Certificate::from_pem_or_der(&bytes)
        .map(|c| c.der().to_vec())
        .map_err(|e| format!("server_certificate {path:?}: not a certificate (0x{e:08X})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uaring_core::address_space::NumericRange;

    #[test]
    fn event_ids_go_back_to_their_server_only() {
        let here = event_id_here(7, b"theirs");
        assert_eq!(event_id_there(7, &here), Some(&b"theirs"[..]));
        assert_eq!(event_id_there(8, &here), None, "another server's");
        assert_eq!(event_id_there(7, b"theirs"), None, "not one of ours");
        assert_eq!(event_id_there(7, &event_id_here(7, b"")), None);
    }

    #[test]
    fn ranges_are_written_as_parsed() {
        for text in ["", "3", "1:4", "0:1,2,5:9"] {
            let r = NumericRange::parse(text).unwrap();
            assert_eq!(range_text(r.as_ref()), text);
        }
        // No range goes as a null String, not "" (which node-opcua takes for a range).
        assert_eq!(range_wire(""), UaString::null());
        assert_eq!(range_wire("1:4"), UaString::from("1:4"));
    }

    #[test]
    fn the_monitor_pin_joins_the_demand() {
        let mut v = Var {
            index: 0,
            generation: 0,
            remote: NodeId::numeric(2, 1),
            fresh: Arc::new(AtomicU64::new(0)),
            shards: Vec::new(),
            item: None,
            busy: false,
            dirty: false,
            removed: false,
            notified: 0,
            refused: false,
            asked: (0.0, 0),
            pinned: None,
        };
        assert_eq!(v.want(), None);
        v.pinned = Some(1000.0);
        assert_eq!(v.want(), Some((1000.0, 1)));
        v.shards.push((
            0,
            Demand {
                items: 1,
                sampling_ms: 50.0,
                queue_size: 10,
            },
        ));
        assert_eq!(
            v.want(),
            Some((50.0, 10)),
            "faster and deeper while items ask"
        );
        v.shards.clear();
        assert_eq!(
            v.want(),
            Some((1000.0, 1)),
            "back to the configured interval"
        );
        v.removed = true;
        assert_eq!(v.want(), None);
    }
}
