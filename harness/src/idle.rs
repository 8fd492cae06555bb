//! `--idle-sessions N`: sessions held open beside a run's measured clients, silent but alive
//! (the shape of a gateway: many sessions mostly quiet, a few clients busy).
//!
//! After the server has started and before the load connects, N sessions are established one
//! after another — OpenSecureChannel, CreateSession, ActivateSession with the run's security
//! settings, through the same [`UaDriver`] as the load — on blocking sockets. One thread on the
//! client CPUs then holds them: it renews a secure channel's token when it is due and, every
//! third of the session timeout the server granted, reads the server's state
//! (`ServerStatus.State`) on each session so that none times out however long the run; it
//! sends nothing else. After the window each session is closed: its CloseSession must be
//! answered Good (the session lived through the run), then CloseSecureChannel.
//!
//! The echo floor has no sessions: its idle sessions are connections that send nothing.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::thread::JoinHandle;

use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{ReadRequest, ReadValueId, TimestampsToReturn};
use uaring_core::types::{NodeId, QualifiedName, UaString};

use crate::opcua::{BlockingSession, UaDriver, Workload};
use crate::run::{RunConfig, Running};
use crate::uring::{mono_ns, Ctx, Driver};

/// Server_ServerStatus_State (namespace 0).
const SERVER_STATE: u32 = 2259;
const ATTR_VALUE: u32 = 13;

/// An idle session's workload: no request of its own, a Read of the server's state every
/// third of the granted session timeout.
struct KeepAlive {
    interval_ns: u64,
    next_at: u64,
}

impl Workload for KeepAlive {
    fn session_created(&mut self, revised_timeout_ms: f64, now_ns: u64) {
        // A server that grants nothing usable (0, NaN) gets the harness's request, 120 s.
        let timeout_ms = if revised_timeout_ms.is_finite() && revised_timeout_ms > 0.0 { revised_timeout_ms } else { 120_000.0 };
        self.interval_ns = ((timeout_ms * 1e6 / 3.0) as u64).max(1_000_000);
        self.next_at = now_ns.saturating_add(self.interval_ns);
    }
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(&mut self, _id: u32, resp: &Response, _sent: u64, _now: u64, _ctx: &mut Ctx) -> Result<(), String> {
        match resp {
            Response::Read(r) if r.response_header.service_result.is_good() && r.results.len() == 1 && r.results[0].status_code().is_good() => Ok(()),
            other => Err(format!("keep-alive Read answered with {} {:?}", other.name(), other.response_header().service_result)),
        }
    }
    fn deadline(&self) -> Option<u64> {
        Some(self.next_at)
    }
    fn on_timer(&mut self, now: u64, _ctx: &mut Ctx) -> Vec<Request> {
        self.next_at = now.saturating_add(self.interval_ns);
        let node = ReadValueId { node_id: NodeId::ns0(SERVER_STATE), attribute_id: ATTR_VALUE, index_range: UaString::default(), data_encoding: QualifiedName::default() };
        vec![Request::Read(Box::new(ReadRequest { max_age: 0.0, timestamps_to_return: TimestampsToReturn::Neither, nodes_to_read: vec![node], ..Default::default() }))]
    }
}

/// The idle sessions of one run, held by their thread until [`IdleSessions::close`].
pub struct IdleSessions {
    /// Written (or dropped) to stop the thread.
    stop: Option<UnixStream>,
    thread: Option<JoinHandle<Result<(), String>>>,
}

impl IdleSessions {
    /// Opens `--idle-sessions` sessions (connections for the echo floor) to `running`;
    /// `None` when there are none to open.
    pub fn open(cfg: &RunConfig, running: &Running) -> Result<Option<IdleSessions>, String> {
        let n = cfg.opts.idle_sessions;
        if n == 0 {
            return Ok(None);
        }
        let (stop, stopped) = UnixStream::pair().map_err(|e| format!("idle sessions: {e}"))?;
        let cpus = cfg.client_cpus.clone();
        let thread = if cfg.scenario == "echo" {
            let mut conns = Vec::with_capacity(n);
            for i in 0..n {
                conns.push(TcpStream::connect(running.addr).map_err(|e| format!("idle connection {i}: {e}"))?);
            }
            std::thread::Builder::new()
                .name("idle-sessions".into())
                .spawn(move || hold_connections(conns, stopped))
                .map_err(|e| e.to_string())?
        } else {
            let sec = crate::security::prepare(&running.url, &cfg.security, &cfg.opts.security_policy)?;
            let mut sessions = Vec::with_capacity(n);
            for i in 0..n {
                let mut d = UaDriver::new(&running.url, Box::new(KeepAlive { interval_ns: 0, next_at: u64::MAX }), 4, sec.clone());
                let s = BlockingSession::open(running.addr, &mut d, UaDriver::is_running).map_err(|e| format!("idle session {i}: {e}"))?;
                sessions.push((s, d));
            }
            std::thread::Builder::new()
                .name("idle-sessions".into())
                .spawn(move || {
                    let _ = uaring_affinity::pin_current_thread(&cpus);
                    hold_sessions(sessions, stopped)
                })
                .map_err(|e| e.to_string())?
        };
        Ok(Some(IdleSessions { stop: Some(stop), thread: Some(thread) }))
    }

    /// Stops holding and closes every session; an error if one was lost or did not close Good.
    pub fn close(mut self) -> Result<(), String> {
        self.stop.take();
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err("the idle sessions' thread panicked".into()),
            None => Ok(()),
        }
    }
}

impl Drop for IdleSessions {
    fn drop(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits until `fds` (and `stopped`, always first) have something, or `timeout_ms` (-1:
/// no timeout). Returns the `revents` of each.
fn wait(stopped: &UnixStream, fds: &[i32], timeout_ms: i32) -> Result<Vec<i16>, String> {
    let mut p: Vec<libc::pollfd> = std::iter::once(stopped.as_raw_fd()).chain(fds.iter().copied()).map(|fd| libc::pollfd { fd, events: libc::POLLIN, revents: 0 }).collect();
    loop {
        // SAFETY: `p` is a valid array of pollfd for the length given.
        let r = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms) };
        if r >= 0 {
            return Ok(p.iter().map(|x| x.revents).collect());
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("poll: {e}"));
        }
    }
}

/// The thread of the idle sessions: timers and answers until told to stop, then the closes.
fn hold_sessions(mut sessions: Vec<(BlockingSession, UaDriver)>, stopped: UnixStream) -> Result<(), String> {
    let fds: Vec<i32> = sessions.iter().map(|(s, _)| s.stream().as_raw_fd()).collect();
    for (i, (s, _)) in sessions.iter_mut().enumerate() {
        s.flush().map_err(|e| format!("idle session {i}: {e}"))?;
    }
    loop {
        let now = mono_ns();
        for (i, (s, d)) in sessions.iter_mut().enumerate() {
            if d.next_deadline().is_some_and(|t| t <= now) {
                s.poll(d).map_err(|e| format!("idle session {i}: {e}"))?;
            }
        }
        let next = sessions.iter().filter_map(|(_, d)| d.next_deadline()).min();
        let timeout_ms = match next {
            Some(t) => (t.saturating_sub(mono_ns()).div_ceil(1_000_000)).min(i32::MAX as u64) as i32,
            None => -1,
        };
        let ready = wait(&stopped, &fds, timeout_ms)?;
        if ready[0] != 0 {
            break;
        }
        for (i, ((s, d), &r)) in sessions.iter_mut().zip(&ready[1..]).enumerate() {
            if r != 0 {
                s.receive(d).map_err(|e| format!("idle session {i}: {e}"))?;
            }
            if let Some(e) = s.first_error() {
                return Err(format!("idle session {i}: {e}"));
            }
        }
    }
    for (i, (s, mut d)) in sessions.into_iter().enumerate() {
        s.close(&mut d).map_err(|e| format!("idle session {i}: close: {e}"))?;
        match d.close_result() {
            Some(r) if r.is_good() => {}
            r => return Err(format!("idle session {i}: CloseSession answered {r:?} (the session did not live through the run)")),
        }
    }
    Ok(())
}

/// The echo floor's idle connections: open until told to stop; one the server closed is an error.
fn hold_connections(conns: Vec<TcpStream>, stopped: UnixStream) -> Result<(), String> {
    let fds: Vec<i32> = conns.iter().map(|c| c.as_raw_fd()).collect();
    let ready = wait(&stopped, &fds, -1)?;
    match ready[1..].iter().position(|&r| r != 0) {
        Some(i) if ready[0] == 0 => Err(format!("idle connection {i}: the server closed it or sent something")),
        _ => Ok(()),
    }
}
