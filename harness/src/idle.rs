//! `--idle-sessions N`: sessions held open beside a run's measured clients, silent but alive
//! (the shape of a gateway: many sessions mostly quiet, a few clients busy).
//!
//! After the server has started and before the load connects, one thread on the client CPUs
//! opens N connections and runs them on uaring' event loop, the loop the load client
//! and the server run: each establishes its session — OpenSecureChannel, CreateSession,
//! ActivateSession with the run's security settings, through the same [`UaDriver`] as the
//! load — and the run waits until all N are activated. The thread then holds them: it renews a
//! secure channel's token when it is due and, every third of the session timeout the server
//! granted, reads the server's state (`ServerStatus.State`) on each session so that none times
//! out however long the run; it sends nothing else. After the window each session is closed:
//! its CloseSession must be answered Good (the session lived through the run), then
//! CloseSecureChannel.
//!
//! The echo floor has no sessions: its idle sessions are connections that send nothing.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uaring::{ConnId, ConnStatus, EventLoop, Fleet, Handler, IoBackend, LoopConfig, Origin};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::node_ids;
use uaring_core::generated::types::{ReadRequest, TimestampsToReturn};
use uaring_core::services::attribute::attr;
use uaring_core::types::NodeId;
use uaring_core::Now;

use crate::opcua::{read_value_id, UaDriver, Workload};
use crate::run::{RunConfig, Running};
use crate::uring::{Ctx, Driver, Shared, ThreadStats, PHASE_WARMUP};

/// How long the sessions may take to be established, and to answer their CloseSession.
const OPEN_WITHIN: Duration = Duration::from_secs(30);
const CLOSE_WITHIN: Duration = Duration::from_secs(10);
/// The holding loop's tick: how soon it notices that it is told to close.
const TICK_NS: u64 = 20_000_000;

/// An idle session's workload: no request of its own, a Read of the server's state every
/// third of the granted session timeout.
struct KeepAlive {
    interval_ns: u64,
    next_at: u64,
}

impl Workload for KeepAlive {
    fn session_created(&mut self, revised_timeout_ms: f64, now_ns: u64) {
        // A server that grants nothing usable (0, NaN) gets the harness's request, 120 s.
        let timeout_ms = if revised_timeout_ms.is_finite() && revised_timeout_ms > 0.0 {
            revised_timeout_ms
        } else {
            120_000.0
        };
        self.interval_ns = ((timeout_ms * 1e6 / 3.0) as u64).max(1_000_000);
        self.next_at = now_ns.saturating_add(self.interval_ns);
    }
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        _now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        match resp {
            Response::Read(r)
                if r.response_header.service_result.is_good()
                    && r.results.len() == 1
                    && r.results[0].status_code().is_good() =>
            {
                Ok(())
            }
            other => Err(format!(
                "keep-alive Read answered with {} {:?}",
                other.name(),
                other.response_header().service_result
            )),
        }
    }
    fn deadline(&self) -> Option<u64> {
        Some(self.next_at)
    }
    fn on_timer(&mut self, now: u64, _ctx: &mut Ctx) -> Vec<Request> {
        self.next_at = now.saturating_add(self.interval_ns);
        let node = read_value_id(
            NodeId::ns0(node_ids::Server_ServerStatus_State),
            attr::VALUE,
        );
        vec![Request::Read(Box::new(ReadRequest {
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read: vec![node],
            ..Default::default()
        }))]
    }
}

/// What the run and the holding thread share.
#[derive(Default)]
struct Control {
    /// Set by [`IdleSessions::close`]: close every session, then stop.
    stop: AtomicBool,
    /// The first failure: a session lost or refused, a keep-alive answered badly, a close not Good.
    error: Mutex<Option<String>>,
}

impl Control {
    fn fail(&self, e: String) {
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(e);
        }
    }
    fn failure(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }
}

/// One held connection: a session, or (echo floor) a connection that sends nothing.
enum Idle {
    Session(Box<UaDriver>),
    Silent,
}

struct IdleConn {
    index: usize,
    idle: Idle,
    /// Told to close (its CloseSession sent).
    closing: bool,
    /// Closed by us, as planned.
    done: bool,
}

/// The handler of the holding loop.
struct Holder {
    pending: VecDeque<Idle>,
    ids: Vec<ConnId>,
    shared: Arc<Shared>,
    stats: ThreadStats,
    ctl: Arc<Control>,
    open: usize,
    /// When the closing began.
    closing_since: Option<u64>,
    to_close: Vec<ConnId>,
    last_now: u64,
}

impl Holder {
    /// After a call into a connection: what failed (its keep-alive, a silent connection that
    /// received something), and whether its session is closed.
    fn after(
        &mut self,
        c: &mut IdleConn,
        r: Result<(), String>,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let i = c.index;
        if let Some(e) = r.err().or_else(|| self.stats.first_error.take()) {
            let what = if matches!(c.idle, Idle::Silent) {
                "connection"
            } else {
                "session"
            };
            self.ctl.fail(format!("idle {what} {i}: {e}"));
            return ConnStatus::Close;
        }
        if let Idle::Session(d) = &mut c.idle {
            if d.is_closed() {
                if !d.close_result().is_some_and(|r| r.is_good()) {
                    let r = d.close_result();
                    self.ctl.fail(format!("idle session {i}: CloseSession answered {r:?} (the session did not live through the run)"));
                }
                d.close_channel(now.mono_ns, out);
                c.done = true;
                return ConnStatus::Close;
            }
        }
        ConnStatus::Open
    }
}

impl Handler for Holder {
    type Conn = IdleConn;

    fn open(
        &mut self,
        id: ConnId,
        _peer: SocketAddr,
        _origin: Origin,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<IdleConn> {
        let mut idle = self.pending.pop_front()?;
        let index = self.ids.len();
        match &mut idle {
            Idle::Session(d) => {
                let mut ctx = Ctx::new(PHASE_WARMUP, &mut self.stats, &self.shared);
                if let Err(e) = d.start(now.mono_ns, out, &mut ctx) {
                    self.ctl.fail(format!("idle session {index}: {e}"));
                    return None;
                }
            }
            Idle::Silent => {
                self.shared.ready.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.ids.push(id);
        self.open += 1;
        Some(IdleConn {
            index,
            idle,
            closing: false,
            done: false,
        })
    }

    fn recv(&mut self, c: &mut IdleConn, now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        let r = match &mut c.idle {
            Idle::Session(d) => {
                let mut ctx = Ctx::new(PHASE_WARMUP, &mut self.stats, &self.shared);
                d.on_recv(now.mono_ns, data, out, &mut ctx)
            }
            Idle::Silent => Err("the server sent something".into()),
        };
        self.after(c, r, now, out)
    }

    fn conn_timer(&mut self, c: &mut IdleConn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        let r = match &mut c.idle {
            Idle::Session(d) => {
                let mut ctx = Ctx::new(PHASE_WARMUP, &mut self.stats, &self.shared);
                d.poll(now.mono_ns, out, &mut ctx)
            }
            Idle::Silent => Ok(()),
        };
        self.after(c, r, now, out)
    }

    fn conn_deadline(&self, c: &IdleConn) -> u64 {
        match &c.idle {
            Idle::Session(d) => d.next_deadline().unwrap_or(u64::MAX),
            Idle::Silent => u64::MAX,
        }
    }

    fn closed(&mut self, c: IdleConn, _now: Now) {
        self.open = self.open.saturating_sub(1);
        if !c.done {
            let what = if matches!(c.idle, Idle::Silent) {
                "connection"
            } else {
                "session"
            };
            self.ctl.fail(format!(
                "idle {what} {}: closed before the run ended",
                c.index
            ));
        }
    }

    fn deadline(&self) -> u64 {
        self.last_now + TICK_NS
    }

    fn timer(&mut self, now: Now) {
        self.last_now = now.mono_ns;
    }

    fn take_ready(&mut self, into: &mut Vec<ConnId>) {
        into.append(&mut self.to_close);
    }

    /// Told to close: a session sends its CloseSession (it closes once that is answered), a
    /// silent connection closes.
    fn flush(&mut self, c: &mut IdleConn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        if c.closing {
            return ConnStatus::Open;
        }
        c.closing = true;
        match &mut c.idle {
            Idle::Session(d) if d.is_running() => {
                if let Err(e) = d.close_session(now.mono_ns, out) {
                    self.ctl
                        .fail(format!("idle session {}: close: {e}", c.index));
                    return ConnStatus::Close;
                }
                ConnStatus::Open
            }
            Idle::Session(_) => {
                self.ctl.fail(format!(
                    "idle session {}: not active when the run ended",
                    c.index
                ));
                ConnStatus::Close
            }
            Idle::Silent => {
                c.done = true;
                ConnStatus::Close
            }
        }
    }

    fn keep_running(&mut self, now: Now) -> bool {
        self.last_now = now.mono_ns;
        match self.closing_since {
            None if self.ctl.stop.load(Ordering::SeqCst) => {
                self.closing_since = Some(now.mono_ns);
                self.to_close = self.ids.clone();
                true
            }
            None => true,
            Some(_) if self.open == 0 => false,
            Some(t) if now.mono_ns.saturating_sub(t) > CLOSE_WITHIN.as_nanos() as u64 => {
                self.ctl.fail(format!(
                    "{} idle sessions not closed within {CLOSE_WITHIN:?} of the run's end",
                    self.open
                ));
                false
            }
            Some(_) => true,
        }
    }
}

/// The holding thread: connects every idle connection and runs the loop until told to close
/// and every connection is closed.
fn hold(
    addr: SocketAddr,
    idle: Vec<Idle>,
    shared: Arc<Shared>,
    ctl: Arc<Control>,
) -> Result<(), String> {
    let n = idle.len();
    let wiring = Fleet::standalone().map_err(|e| format!("idle sessions: loop wiring: {e}"))?;
    let handler = Holder {
        pending: idle.into(),
        ids: Vec::with_capacity(n),
        shared,
        stats: ThreadStats::default(),
        ctl: ctl.clone(),
        open: 0,
        closing_since: None,
        to_close: Vec::new(),
        last_now: crate::uring::mono_ns(),
    };
    let mut cfg = LoopConfig::default();
    cfg.max_connections = cfg.max_connections.max(n + 16);
    let mut lp = EventLoop::new(IoBackend::Auto, handler, wiring, cfg)
        .map_err(|e| format!("idle sessions: loop: {e}"))?;
    for i in 0..n {
        let s = TcpStream::connect(addr).map_err(|e| format!("idle connection {i}: {e}"))?;
        let _ = s.set_nodelay(true);
        lp.adopt(s)
            .map_err(|e| format!("idle connection {i}: {e}"))?;
    }
    lp.run().map_err(|e| format!("idle sessions: loop: {e}"))?;
    match ctl.failure() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// The idle sessions of one run, held by their thread until [`IdleSessions::close`].
pub struct IdleSessions {
    ctl: Arc<Control>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl IdleSessions {
    /// Opens `--idle-sessions` sessions (connections for the echo floor) to `running` and
    /// returns once all are established; `None` when there are none to open.
    pub fn open(cfg: &RunConfig, running: &Running) -> Result<Option<IdleSessions>, String> {
        let n = cfg.opts.idle_sessions;
        if n == 0 {
            return Ok(None);
        }
        let idle: Vec<Idle> = if cfg.scenario == "echo" {
            (0..n).map(|_| Idle::Silent).collect()
        } else {
            let sec =
                crate::security::prepare(&running.url, &cfg.security, &cfg.opts.security_policy)?;
            (0..n)
                .map(|_| {
                    Idle::Session(Box::new(UaDriver::new(
                        &running.url,
                        Box::new(KeepAlive {
                            interval_ns: 0,
                            next_at: u64::MAX,
                        }),
                        4,
                        sec.clone(),
                    )))
                })
                .collect()
        };
        let (ctl, shared) = (Arc::new(Control::default()), Arc::new(Shared::default()));
        let (cpus, addr, ctl2, shared2) = (
            cfg.client_cpus.clone(),
            running.addr,
            ctl.clone(),
            shared.clone(),
        );
        let thread = std::thread::Builder::new()
            .name("idle-sessions".into())
            .spawn(move || {
                let _ = uaring_affinity::pin_current_thread(&cpus);
                hold(addr, idle, shared2, ctl2)
            })
            .map_err(|e| e.to_string())?;
        let held = IdleSessions {
            ctl,
            thread: Some(thread),
        };
        let until = Instant::now() + OPEN_WITHIN;
        while shared.ready.load(Ordering::SeqCst) < n {
            let finished = held.thread.as_ref().is_none_or(|t| t.is_finished());
            if let Some(e) = held.ctl.failure() {
                return Err(held.close().err().unwrap_or(e));
            }
            if finished {
                return Err(held.close().err().unwrap_or_else(|| {
                    "idle sessions: the thread ended before they were open".into()
                }));
            }
            if Instant::now() > until {
                let up = shared.ready.load(Ordering::SeqCst);
                let _ = held.close();
                return Err(format!(
                    "idle sessions: {up} of {n} established within {OPEN_WITHIN:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(Some(held))
    }

    /// Closes every session (each CloseSession must be answered Good) and stops holding; an
    /// error if one was lost during the run or did not close Good.
    pub fn close(mut self) -> Result<(), String> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), String> {
        self.ctl.stop.store(true, Ordering::SeqCst);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the idle sessions' thread panicked".into()),
            None => Ok(()),
        }
    }
}

impl Drop for IdleSessions {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}
