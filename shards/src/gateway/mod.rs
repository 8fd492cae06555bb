//! The aggregating gateway: this server in front of other OPC UA servers
//! (docs/Gateway.md).
//!
//! Each server of `[[gateway.servers]]` is mirrored under `Objects/<name>`: its nodes, with
//! their namespaces mapped ([`names`]), found by a crawl ([`crawl`]) and refreshed when it
//! raises a model change event. A monitored item here on a mirrored Variable is served from
//! one monitored item on that server, shared by every item here on the node: the shards tell
//! the gateway when items on a mirrored node come, change or go (the demand signal of core's
//! change path, [`uaring_core::address_space::change::DemandSink`]), and the values the
//! server reports are stored into the mirrored cells, from where the change path takes them
//! to every item on every shard. Reads that the cell does not meet (maxAge), Writes and
//! Calls are forwarded.
//!
//! Threads: one gateway thread runs the client side for every mirrored server on the shards'
//! own event loop ([`crate::EventLoop`] with the gateway's [`handler`]), and one dialer
//! thread makes the TCP connections (blocking connects with a timeout). A server that stalls,
//! refuses or disappears costs these two threads, never a shard: a shard only pushes into
//! bounded lock-free queues (demand signals, forwarded operations) and wakes the gateway
//! thread; the gateway thread stores into the cells and completes the forwarded operations
//! through the deferred-response path, as any application thread does.

mod build;
pub mod config;
pub mod crawl;
mod downstream;
mod handler;
pub mod history;
pub mod names;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use crossbeam_queue::ArrayQueue;
use uaring_core::address_space::app::{AsyncCall, AsyncRead, AsyncWrite};
use uaring_core::address_space::change::{Demand, DemandSink};
use uaring_core::shared::ServerShared;
use uaring_core::types::{DataValue, NodeId, Variant};

pub use config::{GatewayConfig, IdentityMap, ServerConfig, Unmapped, WhileAway};

use crate::fleet::{Fleet, Waker};

/// Where a mirrored server's connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// Waiting to dial (after a failure: backing off).
    Waiting = 0,
    /// Connecting (TCP, the secure channel, the session).
    Connecting = 1,
    /// Connected, the mirror being built or refreshed.
    Browsing = 2,
    /// Connected and mirrored: values flow.
    Connected = 3,
    /// Removed by a reload; its nodes are gone.
    Removed = 4,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Connecting,
            2 => State::Browsing,
            3 => State::Connected,
            4 => State::Removed,
            _ => State::Waiting,
        }
    }

    /// The name the status and the metrics show.
    pub fn name(self) -> &'static str {
        match self {
            State::Waiting => "waiting",
            State::Connecting => "connecting",
            State::Browsing => "browsing",
            State::Connected => "connected",
            State::Removed => "removed",
        }
    }
}

/// The status of one mirrored server: read by the metrics endpoint and
/// [`crate::ServerHandle::gateway_status`], written by the gateway thread.
#[derive(Debug)]
pub struct ServerStatus {
    pub name: String,
    pub endpoint: String,
    state: AtomicU8,
    /// Connections lost (or refused) after the first.
    pub reconnects: AtomicU64,
    /// Sessions resumed on a new connection (ActivateSession of the old session).
    pub resumed: AtomicU64,
    /// Monitored items on the server now (one per mirrored Variable monitored here).
    pub items: AtomicU64,
    /// Nodes mirrored now.
    pub nodes: AtomicU64,
    /// Values the server reported (stored into mirrored cells).
    pub notifications: AtomicU64,
    /// Events passed on.
    pub events: AtomicU64,
    /// Reads, Writes and Calls forwarded.
    pub forwarded: AtomicU64,
    /// Crawls done (the first mirror and every refresh).
    pub crawls: AtomicU64,
    /// The server's ServiceLevel when last read (0 unknown).
    pub service_level: AtomicU8,
    /// Sessions open on the server now for mapped identities (`identities`), the main one
    /// aside.
    pub identity_sessions: AtomicU64,
    /// Logins of mapped identities the server refused (or that could not be made).
    pub identity_refusals: AtomicU64,
    last_error: Mutex<String>,
}

impl ServerStatus {
    pub(crate) fn new(name: &str, endpoint: &str) -> ServerStatus {
        ServerStatus {
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            state: AtomicU8::new(State::Waiting as u8),
            reconnects: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            items: AtomicU64::new(0),
            nodes: AtomicU64::new(0),
            notifications: AtomicU64::new(0),
            events: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            crawls: AtomicU64::new(0),
            service_level: AtomicU8::new(0),
            identity_sessions: AtomicU64::new(0),
            identity_refusals: AtomicU64::new(0),
            last_error: Mutex::new(String::new()),
        }
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Relaxed))
    }

    pub(crate) fn set_state(&self, s: State) {
        self.state.store(s as u8, Ordering::Relaxed);
    }

    /// The last error (empty when none since the start).
    pub fn last_error(&self) -> String {
        self.last_error
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default()
    }

    fn set_error(&self, e: &str) {
        if let Ok(mut g) = self.last_error.lock() {
            e.clone_into(&mut g);
        }
    }
}

/// A Read, Write or Call of a mirrored node, on its way from a shard to the gateway thread.
pub(crate) enum Forward {
    Read {
        server: u32,
        read: AsyncRead,
    },
    Write {
        server: u32,
        node: NodeId,
        value: DataValue,
        index_range: String,
        /// The caller (user name, empty when anonymous; roles): the identity it runs as
        /// there ([`config::ServerConfig::identity_for`]).
        user: String,
        roles: uaring_core::roles::Roles,
        write: AsyncWrite,
    },
    Call {
        server: u32,
        call: AsyncCall,
    },
    /// A HistoryRead operation of a mirrored Variable or event notifier (its server found
    /// by the gateway thread).
    History {
        op: uaring_core::history::HistoryReadOp,
        reply: uaring_core::history::HistoryReply,
    },
    /// A HistoryUpdate operation of a mirrored Variable or event notifier (its server found
    /// by the gateway thread).
    HistoryUpdate {
        op: uaring_core::history::HistoryUpdateOp,
        reply: uaring_core::history::HistoryUpdateReply,
    },
    /// A continuation point of a forwarded HistoryRead, released by its client here: the
    /// resume token (the gateway's session number, the server's point) to release there.
    HistoryRelease {
        node_id: NodeId,
        token: Vec<u8>,
    },
}

/// A shard's demand on one mirrored node.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DemandSignal {
    pub shard: u16,
    pub node_index: u32,
    pub generation: u32,
    pub demand: Demand,
}

/// What the shards and the gateway thread share: bounded lock-free queues and the gateway
/// loop's waker.
pub(crate) struct Shared {
    pub demand: ArrayQueue<DemandSignal>,
    pub forward: ArrayQueue<Forward>,
    /// A wake was sent and the gateway thread has not drained since.
    wake_pending: AtomicBool,
    waker: std::sync::OnceLock<Waker>,
    /// Demand signals refused for a full queue (the shards offer them again).
    pub demand_refused: AtomicU64,
    /// Forwarded operations refused for a full queue.
    pub forward_refused: AtomicU64,
}

impl Shared {
    fn wake(&self) {
        if !self.wake_pending.swap(true, Ordering::AcqRel) {
            if let Some(w) = self.waker.get() {
                w.wake();
            }
        }
    }

    /// The gateway thread is about to drain.
    pub(crate) fn drained(&self) {
        self.wake_pending.store(false, Ordering::Release);
    }

    pub(crate) fn forward(&self, f: Forward) {
        match self.forward.push(f) {
            Ok(()) => self.wake(),
            Err(f) => {
                self.forward_refused.fetch_add(1, Ordering::Relaxed);
                downstream::fail(f, uaring_core::StatusCode::BadResourceUnavailable);
            }
        }
    }
}

impl DemandSink for Shared {
    fn demand(&self, shard: usize, node_index: u32, generation: u32, demand: Demand) -> bool {
        let ok = self
            .demand
            .push(DemandSignal {
                shard: shard as u16,
                node_index,
                generation,
                demand,
            })
            .is_ok();
        if ok {
            self.wake();
        } else {
            self.demand_refused.fetch_add(1, Ordering::Relaxed);
        }
        ok
    }
}

/// The mirrored servers' status list, for readers on other threads (the metrics endpoint).
#[derive(Clone)]
pub struct StatusList(Arc<Mutex<Vec<Arc<ServerStatus>>>>);

impl StatusList {
    /// An empty list (a gateway started later fills it).
    pub(crate) fn new() -> StatusList {
        StatusList(Arc::new(Mutex::new(Vec::new())))
    }

    /// The status of every mirrored server now.
    pub fn list(&self) -> Vec<Arc<ServerStatus>> {
        self.0.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// The running gateway (owned by the [`crate::ServerHandle`]).
pub struct Gateway {
    fleet: Arc<Fleet>,
    thread: Option<JoinHandle<()>>,
    dialer: Option<JoinHandle<()>>,
    statuses: Arc<Mutex<Vec<Arc<ServerStatus>>>>,
    shared: Arc<Shared>,
    control: Arc<ArrayQueue<Vec<ServerConfig>>>,
}

/// What the gateway needs of the server it runs in.
pub(crate) struct Host {
    pub server: Arc<ServerShared>,
    /// The library's model writer (one edit at a time).
    pub writer: Arc<Mutex<()>>,
    /// The server's own certificate and key, for secured channels to mirrored servers.
    pub own: Option<Arc<uaring_crypto::OwnIdentity>>,
    /// The server's history backend, when the gateway was configured at start (HistoryRead
    /// of mirrored Variables is forwarded only then: [`history`]).
    pub history: Option<Arc<history::GatewayHistory>>,
}

impl Gateway {
    /// Starts the gateway threads for `cfg` (its servers are dialed at once); their status
    /// goes to `statuses`.
    pub(crate) fn start(
        cfg: GatewayConfig,
        host: Host,
        statuses: StatusList,
    ) -> Result<Gateway, String> {
        let shared = Arc::new(Shared {
            demand: ArrayQueue::new(cfg.demand_queue as usize),
            forward: ArrayQueue::new(cfg.forward_queue as usize),
            wake_pending: AtomicBool::new(false),
            waker: std::sync::OnceLock::new(),
            demand_refused: AtomicU64::new(0),
            forward_refused: AtomicU64::new(0),
        });
        if let Some(h) = &host.history {
            if !h.attach(shared.clone()) {
                return Err("the history backend already serves a gateway".into());
            }
        }
        if !host
            .server
            .address_space
            .changes()
            .set_demand_sink(shared.clone())
        {
            return Err("the change path already has a demand sink".into());
        }
        let statuses = statuses.0;
        let control = Arc::new(ArrayQueue::new(4));
        let (fleet, thread, dialer) =
            handler::spawn(cfg, host, shared.clone(), statuses.clone(), control.clone())?;
        Ok(Gateway {
            fleet,
            thread: Some(thread),
            dialer: Some(dialer),
            statuses,
            shared,
            control,
        })
    }

    /// The status list, to read from another thread.
    pub fn status_list(&self) -> StatusList {
        StatusList(self.statuses.clone())
    }

    /// The status of every mirrored server.
    pub fn status(&self) -> Vec<Arc<ServerStatus>> {
        self.statuses.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Replaces the list of mirrored servers (a reload): new ones are dialed, removed ones
    /// disconnected and their nodes deleted, changed ones (another endpoint, identity,
    /// subtrees …) removed and added again. Entries are checked first.
    pub fn reconfigure(&self, servers: Vec<ServerConfig>) -> Result<(), String> {
        self.control
            .push(servers)
            .map_err(|_| "a reload is still being applied".to_string())?;
        self.shared.wake();
        Ok(())
    }

    /// Demand signals and forwarded operations refused for full queues.
    pub fn refused(&self) -> (u64, u64) {
        (
            self.shared.demand_refused.load(Ordering::Relaxed),
            self.shared.forward_refused.load(Ordering::Relaxed),
        )
    }

    /// Stops the threads (the mirrored servers' sessions are closed) and waits for them.
    pub fn stop(&mut self) {
        self.fleet.stop_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(t) = self.dialer.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Raises `operation_limits.max_run_time_nodes` in the file's core table to what the
/// gateway may mirror (its nodes and its status nodes), when it is lower.
pub(crate) fn reserve_nodes(server: &mut toml::Table, cfg: &GatewayConfig) -> Result<(), String> {
    let want = i64::from(cfg.max_nodes) + 16 * cfg.servers.len() as i64 + 1024;
    let limits = server
        .entry("operation_limits")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(limits) = limits.as_table_mut() else {
        return Err("[operation_limits] is not a table".into());
    };
    let now = limits
        .get("max_run_time_nodes")
        .and_then(|v| v.as_integer())
        .unwrap_or(uaring_core::config::OperationLimits::default().max_run_time_nodes as i64);
    if now < want {
        limits.insert("max_run_time_nodes".into(), toml::Value::Integer(want));
    }
    Ok(())
}

/// A value stored while a server is away.
fn away_value(while_away: WhileAway, last: &DataValue) -> DataValue {
    match while_away {
        WhileAway::BadNotConnected => DataValue {
            value: Variant::Empty,
            status: Some(uaring_core::StatusCode::BadNotConnected),
            source_timestamp: None,
            ..Default::default()
        },
        WhileAway::UncertainLastUsableValue => DataValue {
            status: Some(uaring_core::StatusCode::UncertainLastUsableValue),
            ..last.clone()
        },
    }
}
