//! The load client on uaring' event loop (io_uring with multishot
//! receive into a provided-buffer ring and batched sends, epoll fallback):
//! the same loop the server runs, in the client role. Drivers are the same
//! as on the harness's own minimal loop ([`crate::uring`]), selected with
//! `--client-io shards|harness`.

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use uaring::{ConnId, ConnStatus, EventLoop, Fleet, Handler, IoBackend, LoopConfig, Origin};
use uaring_core::Now;

use crate::run::DynDriver;
use crate::uring::{Ctx, Driver, Shared, ThreadStats, PHASE_STOP};

pub struct Conn {
    driver: DynDriver,
    failed: bool,
}

pub struct ShardsClient {
    pending: VecDeque<DynDriver>,
    shared: Arc<Shared>,
    pub stats: ThreadStats,
    last_now: u64,
}

const TICK_NS: u64 = 20_000_000;

impl ShardsClient {
    fn fail(&mut self, conn: &mut Conn, phase: u8, e: String) {
        if !conn.failed && phase != PHASE_STOP {
            conn.failed = true;
            let mut ctx = Ctx::new(phase, &mut self.stats, &self.shared);
            ctx.error(|| e);
            self.shared.failed.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Handler for ShardsClient {
    type Conn = Conn;

    fn open(
        &mut self,
        _id: ConnId,
        _peer: SocketAddr,
        _origin: Origin,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<Conn> {
        let mut driver = self.pending.pop_front()?;
        let phase = self.shared.phase.load(Ordering::Relaxed);
        let mut ctx = Ctx::new(phase, &mut self.stats, &self.shared);
        match driver.start(now.mono_ns, out, &mut ctx) {
            Ok(()) => Some(Conn {
                driver,
                failed: false,
            }),
            Err(e) => {
                ctx.error(|| e);
                self.shared.failed.fetch_add(1, Ordering::SeqCst);
                None
            }
        }
    }

    fn recv(&mut self, conn: &mut Conn, now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        let phase = self.shared.phase.load(Ordering::Relaxed);
        if phase == crate::uring::PHASE_MEASURE {
            self.stats.bytes_in += data.len() as u64;
        }
        let before = out.len();
        let mut ctx = Ctx::new(phase, &mut self.stats, &self.shared);
        let r = conn.driver.on_recv(now.mono_ns, data, out, &mut ctx);
        if phase == crate::uring::PHASE_MEASURE {
            self.stats.bytes_out += (out.len() - before) as u64;
        }
        match r {
            Ok(()) => ConnStatus::Open,
            Err(e) => {
                self.fail(conn, phase, e);
                ConnStatus::Close
            }
        }
    }

    fn conn_timer(&mut self, conn: &mut Conn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        let phase = self.shared.phase.load(Ordering::Relaxed);
        let mut ctx = Ctx::new(phase, &mut self.stats, &self.shared);
        match conn.driver.poll(now.mono_ns, out, &mut ctx) {
            Ok(()) => ConnStatus::Open,
            Err(e) => {
                self.fail(conn, phase, e);
                ConnStatus::Close
            }
        }
    }

    fn conn_deadline(&self, conn: &Conn) -> u64 {
        conn.driver.next_deadline().unwrap_or(u64::MAX)
    }

    fn closed(&mut self, mut conn: Conn, _now: Now) {
        let phase = self.shared.phase.load(Ordering::Relaxed);
        self.fail(&mut conn, phase, "connection closed".into());
    }

    fn deadline(&self) -> u64 {
        self.last_now + TICK_NS
    }

    fn timer(&mut self, now: Now) {
        self.last_now = now.mono_ns;
    }

    fn keep_running(&mut self, now: Now) -> bool {
        self.last_now = now.mono_ns;
        self.shared.phase.load(Ordering::Relaxed) != PHASE_STOP
    }
}

/// Connects `drivers.len()` sockets to `addr` and runs them on a shards
/// event loop on the calling thread until the phase is STOP.
pub fn run_client(
    addr: SocketAddr,
    drivers: Vec<DynDriver>,
    shared: Arc<Shared>,
    modes: crate::run::ClientModes,
) -> Result<ThreadStats, String> {
    let wiring = Fleet::standalone().map_err(|e| format!("shards loop wiring: {e}"))?;
    let n = drivers.len();
    let handler = ShardsClient {
        pending: drivers.into(),
        shared: shared.clone(),
        stats: ThreadStats::default(),
        last_now: crate::uring::mono_ns(),
    };
    let mut cfg = LoopConfig::default();
    cfg.max_connections = cfg.max_connections.max(n + 16);
    modes.apply(&mut cfg);
    let backend = if cfg.needs_uring() {
        IoBackend::Uring
    } else {
        IoBackend::Auto
    };
    let mut lp =
        EventLoop::new(backend, handler, wiring, cfg).map_err(|e| format!("shards loop: {e}"))?;
    for _ in 0..n {
        let s = TcpStream::connect(addr).map_err(|e| {
            shared.failed.fetch_add(1, Ordering::SeqCst);
            format!("connect {addr}: {e}")
        })?;
        let _ = s.set_nodelay(true);
        shared.register_socket(std::os::fd::AsRawFd::as_raw_fd(&s));
        lp.adopt(s).map_err(|e| format!("adopt: {e}"))?;
    }
    lp.run().map_err(|e| format!("shards loop: {e}"))?;
    Ok(std::mem::take(&mut lp.handler_mut().stats))
}
