//! The gateway thread: the shards' event loop ([`crate::EventLoop`]) with a client
//! [`Handler`] whose connections are the mirrored servers, and the dialer thread that
//! connects them.
//!
//! The dialer makes one blocking connect at a time (name resolution included, bounded by
//! the server's `connect_timeout_ms`) and hands each socket to the loop through the queue of
//! dialed connections ([`crate::fleet::Fleet::take_dial_queues`]) with the tag the handler
//! asked for it by; a failure comes back through a small queue of its own. The loop wakes
//! for either, for the shards' demand signals and forwarded operations ([`super::Shared`]),
//! for a reload, and for the servers' timers.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::OwnedFd;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_queue::ArrayQueue;
use uaring_core::history::HistoryReadOp;
use uaring_core::types::NodeId;
use uaring_core::Now;

use super::config::{GatewayConfig, ServerConfig};
use super::downstream::{Downstream, Env};
use super::{Forward, Host, ServerStatus, Shared};
use crate::config::IoBackend;
use crate::event_loop::EventLoop;
use crate::fleet::{Fleet, Waker};
use crate::handler::{ConnId, ConnStatus, Handler, Origin};
use crate::loop_core::LoopConfig;
use crate::reverse::Dialed;
use crate::spsc::Producer;

/// A connect the handler asks the dialer for.
struct DialRequest {
    tag: u64,
    host: String,
    port: u16,
    timeout_ms: u64,
}

/// The handler's connection: which server, and which attempt.
pub(super) struct GwConn {
    server: u32,
    tag: u64,
}

pub(super) struct GatewayHandler {
    host: Host,
    shared: Arc<Shared>,
    limits: GatewayConfig,
    statuses: Arc<Mutex<Vec<Arc<ServerStatus>>>>,
    control: Arc<ArrayQueue<Vec<ServerConfig>>>,
    servers: Vec<Option<Downstream>>,
    by_node: std::collections::HashMap<u32, (u32, u32)>,
    items_total: u64,
    nodes_total: u64,
    companions: Arc<Vec<String>>,
    dial: SyncSender<DialRequest>,
    dial_failed: Arc<ArrayQueue<(u64, String)>>,
    next_tag: u64,
    now: Now,
    stopping: bool,
}

impl GatewayHandler {
    fn env(&mut self) -> (Env<'_>, &mut Vec<Option<Downstream>>) {
        (
            Env {
                host: &self.host,
                shared: &self.shared,
                limits: &self.limits,
                by_node: &mut self.by_node,
                items_total: &mut self.items_total,
                nodes_total: &mut self.nodes_total,
                companions: &self.companions,
                now: self.now,
            },
            &mut self.servers,
        )
    }

    fn publish_statuses(&self) {
        let list: Vec<Arc<ServerStatus>> = self
            .servers
            .iter()
            .flatten()
            .filter(|d| !d.removing)
            .map(|d| d.status.clone())
            .collect();
        if let Ok(mut s) = self.statuses.lock() {
            *s = list;
        }
    }

    fn add_server(&mut self, cfg: ServerConfig) {
        let status = Arc::new(ServerStatus::new(&cfg.name, &cfg.endpoint));
        let slot = match self.servers.iter().position(|s| s.is_none()) {
            Some(i) => i,
            None => {
                self.servers.push(None);
                self.servers.len() - 1
            }
        };
        let (env, servers) = self.env();
        let d = Downstream::new(slot as u32, cfg, status, &env);
        if let Some(s) = servers.get_mut(slot) {
            *s = Some(d);
        }
    }

    /// A reload's list of servers: removed and changed ones go, new and changed ones come.
    fn reconfigure(&mut self, list: Vec<ServerConfig>) {
        let mut check = self.limits.clone();
        check.servers = list.clone();
        if let Err(e) = check.validate() {
            tracing::warn!("gateway reload: {e}; servers unchanged");
            return;
        }
        let keep: Vec<bool> = self
            .servers
            .iter()
            .map(|s| s.as_ref().is_some_and(|d| list.contains(&d.cfg)))
            .collect();
        for (i, k) in keep.iter().enumerate() {
            if *k {
                continue;
            }
            let (mut env, servers) = self.env();
            if let Some(Some(d)) = servers.get_mut(i) {
                if !d.removing {
                    tracing::info!(server = %d.cfg.name, "gateway reload: removing");
                    d.remove(&mut env);
                }
            }
        }
        for c in list {
            let there = self
                .servers
                .iter()
                .flatten()
                .any(|d| !d.removing && d.cfg == c);
            if !there {
                tracing::info!(server = %c.name, "gateway reload: adding");
                self.add_server(c);
            }
        }
        self.publish_statuses();
    }

    fn drain(&mut self) {
        self.shared.drained();
        while let Some(list) = self.control.pop() {
            self.reconfigure(list);
        }
        while let Some((tag, e)) = self.dial_failed.pop() {
            let (mut env, servers) = self.env();
            if let Some(d) = servers
                .iter_mut()
                .flatten()
                .find(|d| d.tag == tag && d.conn.is_none())
            {
                d.dial_failed(&mut env, &e);
            }
        }
        // At most one queue's worth per pass, so a flood cannot hold the thread; the item
        // requests it calls for go out once, after the pass.
        let mut demanded = false;
        for _ in 0..self.shared.demand.capacity() {
            let Some(sig) = self.shared.demand.pop() else {
                break;
            };
            let Some(&(server, var)) = self.by_node.get(&sig.node_index) else {
                continue;
            };
            if let Some(Some(d)) = self.servers.get_mut(server as usize) {
                d.demand(var, sig.generation, sig.shard, sig.demand);
                demanded = true;
            }
        }
        if demanded {
            let (mut env, servers) = self.env();
            for d in servers.iter_mut().flatten() {
                d.settle_demand(&mut env);
            }
        }
        for _ in 0..self.shared.forward.capacity() {
            let Some(f) = self.shared.forward.pop() else {
                break;
            };
            let server = match &f {
                Forward::Read { server, .. }
                | Forward::Write { server, .. }
                | Forward::Call { server, .. } => *server,
                Forward::History {
                    op: HistoryReadOp { node_id, .. },
                    ..
                }
                | Forward::HistoryRelease { node_id, .. } => self.server_of(node_id),
                Forward::HistoryUpdate { op, .. } => self.server_of(op.details.node_id()),
            };
            let (mut env, servers) = self.env();
            match servers.get_mut(server as usize) {
                Some(Some(d)) if !d.removing => d.forward(&mut env, f),
                // Its server is gone (a released point went with it).
                _ => super::downstream::fail(f, uaring_core::StatusCode::BadNodeIdUnknown),
            }
        }
    }

    /// The server that mirrors `node_id` (`u32::MAX`: none): a Variable by its slot; a
    /// notifier (an event read or update) by the server that mirrors it (instance
    /// namespaces are a server's own).
    fn server_of(&self, node_id: &NodeId) -> u32 {
        self.host
            .server
            .model
            .current()
            .node_index(node_id)
            .and_then(|i| self.by_node.get(&i))
            .map(|&(server, _)| server)
            .or_else(|| {
                self.servers
                    .iter()
                    .position(|d| {
                        d.as_ref()
                            .is_some_and(|d| !d.removing && d.mirrors(node_id))
                    })
                    .map(|i| i as u32)
            })
            .unwrap_or(u32::MAX)
    }

    fn dial_due(&mut self) {
        for i in 0..self.servers.len() {
            let tag = self.next_tag + 1;
            let Some(Some(d)) = self.servers.get_mut(i) else {
                continue;
            };
            if let Some((host, port, timeout_ms)) = d.want_dial(self.now, tag) {
                self.next_tag = tag;
                match self.dial.try_send(DialRequest {
                    tag,
                    host,
                    port,
                    timeout_ms,
                }) {
                    Ok(()) => {}
                    Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                        let _ = self.dial_failed.push((tag, "the dialer is busy".into()));
                    }
                }
            }
        }
    }
}

impl Handler for GatewayHandler {
    type Conn = GwConn;

    fn open(
        &mut self,
        id: ConnId,
        _peer: SocketAddr,
        origin: Origin,
        now: uaring_core::Now,
        out: &mut Vec<u8>,
    ) -> Option<GwConn> {
        self.now = now;
        let Origin::Dialed(tag) = origin else {
            return None;
        };
        let (mut env, servers) = self.env();
        let d = servers
            .iter_mut()
            .flatten()
            .find(|d| d.tag == tag && d.conn.is_none() && !d.removing)?;
        match d.opened(&mut env, id) {
            Ok(()) => {
                out.append(&mut d.out);
                Some(GwConn { server: d.id, tag })
            }
            Err(e) => {
                d.dial_failed(&mut env, &e);
                None
            }
        }
    }

    fn recv(&mut self, conn: &mut GwConn, now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        self.now = now;
        let (mut env, servers) = self.env();
        let Some(Some(d)) = servers.get_mut(conn.server as usize) else {
            return ConnStatus::Close;
        };
        if d.tag != conn.tag {
            return ConnStatus::Close;
        }
        d.on_recv(&mut env, data);
        out.append(&mut d.out);
        if std::mem::take(&mut d.close) {
            return ConnStatus::Close;
        }
        ConnStatus::Open
    }

    fn closed(&mut self, conn: GwConn, now: Now) {
        self.now = now;
        let (mut env, servers) = self.env();
        if let Some(Some(d)) = servers.get_mut(conn.server as usize) {
            if d.tag == conn.tag {
                d.close = false;
                d.out.clear();
                d.closed(&mut env);
            }
        }
    }

    fn shutdown(&mut self, conn: &mut GwConn, now: Now, out: &mut Vec<u8>) {
        self.now = now;
        let (mut env, servers) = self.env();
        if let Some(Some(d)) = servers.get_mut(conn.server as usize) {
            if d.tag == conn.tag {
                d.goodbye(&mut env);
                out.append(&mut d.out);
            }
        }
    }

    fn deadline(&self) -> u64 {
        if !self.shared.demand.is_empty()
            || !self.shared.forward.is_empty()
            || !self.dial_failed.is_empty()
            || !self.control.is_empty()
        {
            return 0;
        }
        self.servers
            .iter()
            .flatten()
            .map(|d| d.deadline())
            .min()
            .unwrap_or(u64::MAX)
            // A slow tick besides, for the status counters.
            .min(self.now.mono_ns.saturating_add(1_000_000_000))
    }

    fn timer(&mut self, now: Now) {
        self.now = now;
        if self.stopping {
            return;
        }
        self.drain();
        for i in 0..self.servers.len() {
            let (mut env, servers) = self.env();
            if let Some(Some(d)) = servers.get_mut(i) {
                d.on_timer(&mut env);
            }
        }
        self.dial_due();
        // Servers removed by a reload whose connection is gone free their slot.
        let mut freed = false;
        for s in self.servers.iter_mut() {
            if s.as_ref().is_some_and(|d| d.removing && d.conn.is_none()) {
                *s = None;
                freed = true;
            }
        }
        if freed {
            self.publish_statuses();
        }
    }

    fn take_ready(&mut self, into: &mut Vec<ConnId>) {
        for d in self.servers.iter().flatten() {
            if let Some(c) = d.conn {
                if !d.out.is_empty() || d.close {
                    into.push(c);
                }
            }
        }
    }

    fn flush(&mut self, conn: &mut GwConn, _now: Now, out: &mut Vec<u8>) -> ConnStatus {
        let Some(Some(d)) = self.servers.get_mut(conn.server as usize) else {
            return ConnStatus::Close;
        };
        if d.tag != conn.tag {
            return ConnStatus::Close;
        }
        out.append(&mut d.out);
        if std::mem::take(&mut d.close) {
            return ConnStatus::Close;
        }
        ConnStatus::Open
    }

    fn keep_running(&mut self, now: Now) -> bool {
        self.now = now;
        true
    }
}

/// The gateway loop's fleet (to stop it), the gateway thread and the dialer thread.
type Threads = (Arc<Fleet>, JoinHandle<()>, JoinHandle<()>);

/// Starts the gateway thread and the dialer.
pub(super) fn spawn(
    cfg: GatewayConfig,
    host: Host,
    shared: Arc<Shared>,
    statuses: Arc<Mutex<Vec<Arc<ServerStatus>>>>,
    control: Arc<ArrayQueue<Vec<ServerConfig>>>,
) -> Result<Threads, String> {
    let wiring = Fleet::standalone().map_err(|e| format!("gateway loop wiring: {e}"))?;
    let fleet = wiring.fleet.clone();
    let mut queues = fleet
        .take_dial_queues()
        .ok_or("the gateway loop's dial queue was taken")?;
    let dialed = queues.pop().ok_or("no dial queue")?;
    let waker = Waker::new(fleet.clone(), 0);
    let _ = shared.waker.set(waker.clone());
    let (dial_tx, dial_rx) = sync_channel::<DialRequest>(super::config::SERVERS_MAX * 2);
    let dial_failed = Arc::new(ArrayQueue::new(super::config::SERVERS_MAX * 2));
    let dialer = {
        let failed = dial_failed.clone();
        let fleet = fleet.clone();
        std::thread::Builder::new()
            .name("uaring-gw-dial".into())
            .spawn(move || dialer(dial_rx, dialed, failed, waker, fleet))
            .map_err(|e| format!("gateway dialer thread: {e}"))?
    };
    // The companion models loaded here: their URIs are kept for the mirrored servers'
    // names and types (namespace 1 is this server's own).
    let companions: Arc<Vec<String>> = Arc::new(
        host.server
            .address_space
            .namespace_uris()
            .iter()
            .skip(2)
            .cloned()
            .collect(),
    );
    let servers = cfg.servers.clone();
    let started = Arc::new((
        Mutex::new(None::<Result<(), String>>),
        std::sync::Condvar::new(),
    ));
    let started2 = started.clone();
    let thread = std::thread::Builder::new()
        .name("uaring-gateway".into())
        .spawn(move || {
            let (dial_tx, dial_failed) = (dial_tx, dial_failed);
            let mut handler = GatewayHandler {
                host,
                shared,
                limits: cfg,
                statuses,
                control,
                servers: Vec::new(),
                by_node: Default::default(),
                items_total: 0,
                nodes_total: 0,
                companions,
                dial: dial_tx,
                dial_failed,
                next_tag: 0,
                now: crate::clock::now(),
                stopping: false,
            };
            for s in servers {
                handler.add_server(s);
            }
            handler.publish_statuses();
            let lc = LoopConfig {
                max_connections: super::config::SERVERS_MAX * 2 + 8,
                ring_entries: 256,
                recv_buffers: 64,
                recv_buffer_bytes: 64 * 1024,
                ..LoopConfig::default()
            };
            // The mirrored servers' output is the gateway's own client's input: never held
            // back for the budgets of accepted connections (an outgoing connection of the
            // loop is not bounded by them).
            let lp = EventLoop::new(IoBackend::Auto, handler, wiring, lc);
            let mut lp = match lp {
                Ok(lp) => {
                    let (m, c) = &*started2;
                    if let Ok(mut g) = m.lock() {
                        *g = Some(Ok(()));
                    }
                    c.notify_all();
                    lp
                }
                Err(e) => {
                    let (m, c) = &*started2;
                    if let Ok(mut g) = m.lock() {
                        *g = Some(Err(format!("gateway loop: {e}")));
                    }
                    c.notify_all();
                    return;
                }
            };
            if let Err(e) = lp.run() {
                tracing::error!("gateway loop: {e}");
            }
        })
        .map_err(|e| format!("gateway thread: {e}"))?;
    let (m, c) = &*started;
    let mut g = m.lock().map_err(|_| "gateway start")?;
    while g.is_none() {
        g = c.wait(g).map_err(|_| "gateway start")?;
    }
    if let Some(Err(e)) = g.take() {
        drop(g);
        fleet.stop_all();
        let _ = thread.join();
        return Err(e);
    }
    drop(g);
    Ok((fleet, thread, dialer))
}

/// The dialer thread: one blocking connect at a time.
fn dialer(
    requests: Receiver<DialRequest>,
    mut dialed: Producer<Dialed>,
    failed: Arc<ArrayQueue<(u64, String)>>,
    waker: Waker,
    fleet: Arc<Fleet>,
) {
    loop {
        let r = match requests.recv_timeout(Duration::from_millis(200)) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if fleet.stopping() {
                    return;
                }
                continue;
            }
            Err(_) => return,
        };
        match connect(&r.host, r.port, Duration::from_millis(r.timeout_ms)) {
            Ok((stream, peer)) => {
                let mut d = Dialed {
                    fd: OwnedFd::from(stream),
                    peer,
                    lease: None,
                    tag: r.tag,
                };
                // The loop takes one dialed connection per wake: a full queue empties soon.
                loop {
                    match dialed.push(d) {
                        Ok(()) => break,
                        Err(back) => {
                            if fleet.stopping() {
                                return;
                            }
                            d = back;
                            waker.wake();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }
                }
                waker.wake();
            }
            Err(e) => {
                let _ = failed.push((r.tag, e));
                waker.wake();
            }
        }
        if fleet.stopping() {
            return;
        }
    }
}

fn connect(host: &str, port: u16, timeout: Duration) -> Result<(TcpStream, SocketAddr), String> {
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .collect();
    let mut last = format!("{host}:{port}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, timeout) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok((s, a));
            }
            Err(e) => last = format!("{a}: {e}"),
        }
    }
    Err(last)
}
