//! The backend-independent half of a shard's loop: connection lifecycle,
//! calls into the handler, timers, graceful stop and connection routing.
//! The io_uring and epoll backends drive it.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use uaring_core::Now;

use crate::clock;
use crate::config::RuntimeConfig;
use crate::conn::{Conn, Phase, Table};
use crate::fleet::{Handoff, ShardStats, ShardWiring};
use crate::handler::{ConnId, ConnStatus, Handler, Origin};
use crate::net;

/// Sizes and limits of one loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoopConfig {
    /// Submission queue entries (io_uring); the CQ has twice as many.
    pub ring_entries: u32,
    /// Provided receive buffers (power of two).
    pub recv_buffers: u32,
    /// Bytes per receive buffer (and per-connection buffer in the fallback).
    pub recv_buffer_bytes: u32,
    /// Use multishot accept/recv and the provided buffer ring when available.
    pub multishot: bool,
    pub max_connections: usize,
    /// Unsent bytes per connection above which reading pauses.
    pub max_pending_output_bytes: usize,
    pub tcp_nodelay: bool,
    /// Graceful stop: how long pending output may take, ms.
    pub shutdown_grace_ms: u64,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig::from(&RuntimeConfig::default())
    }
}

impl From<&RuntimeConfig> for LoopConfig {
    fn from(r: &RuntimeConfig) -> Self {
        LoopConfig {
            ring_entries: if r.ring_entries == 0 { crate::memlock::AUTO_RING_ENTRIES } else { r.ring_entries },
            recv_buffers: r.recv_buffers,
            recv_buffer_bytes: r.recv_buffer_bytes,
            multishot: r.multishot,
            max_connections: r.max_connections_per_shard,
            max_pending_output_bytes: r.max_pending_output_bytes,
            tcp_nodelay: r.tcp_nodelay,
            shutdown_grace_ms: r.shutdown_grace_ms,
        }
    }
}

/// After the grace period, how much longer a stopping loop waits for the
/// kernel to finish with its sockets before it exits regardless, ns.
pub(crate) const STOP_HARD_EXTRA_NS: u64 = 500_000_000;

pub(crate) struct ShardCore<H: Handler> {
    pub handler: H,
    pub table: Table<H::Conn>,
    pub wiring: ShardWiring,
    pub cfg: LoopConfig,
    pub now: Now,
    pub stopping: bool,
    /// Graceful stop: pending output gets until here.
    pub stop_deadline: u64,
    /// Shards to wake at the end of this iteration (hand-offs).
    pub wake: Vec<usize>,
}

impl<H: Handler> ShardCore<H> {
    pub fn new(handler: H, wiring: ShardWiring, cfg: LoopConfig) -> ShardCore<H> {
        ShardCore {
            handler,
            table: Table::new(cfg.max_connections),
            wiring,
            cfg,
            now: clock::now(),
            stopping: false,
            stop_deadline: u64::MAX,
            wake: Vec::new(),
        }
    }

    pub fn stats(&self) -> &ShardStats {
        self.wiring.stats()
    }

    pub fn refresh_now(&mut self) {
        self.now = clock::now();
    }

    fn grace_ns(&self) -> u64 {
        self.cfg.shutdown_grace_ms.saturating_mul(1_000_000)
    }

    /// Takes a new socket. Returns its id, or `None` when it was closed at once
    /// (table full, stopping).
    pub fn add_conn(&mut self, fd: OwnedFd, peer: SocketAddr, origin: Origin) -> Option<ConnId> {
        if self.stopping {
            return None;
        }
        if self.cfg.tcp_nodelay {
            net::set_nodelay(fd.as_raw_fd());
        }
        let Some(id) = self.table.insert(Conn::new(fd, peer)) else {
            ShardStats::add(&self.stats().refused, 1);
            tracing::debug!(shard = self.wiring.index, %peer, "connection table full: closing new connection");
            return None;
        };
        let stats = self.wiring.stats();
        ShardStats::add(&stats.open, 1);
        if origin == Origin::Accepted {
            ShardStats::add(&stats.accepted, 1);
        }
        let now = self.now;
        let grace = self.grace_ns();
        let c = self.table.get_mut(id)?;
        match self.handler.open(id, peer, origin, now, &mut c.output.out) {
            Some(user) => c.user = Some(user),
            None => {
                ShardStats::add(&self.wiring.stats().refused, 1);
                c.phase = Phase::Draining;
                c.drain_deadline = now.mono_ns.saturating_add(grace);
            }
        }
        self.after_call(id, ConnStatus::Open);
        Some(id)
    }

    /// Bytes arrived on `id`.
    pub fn deliver(&mut self, id: ConnId, data: &[u8]) {
        ShardStats::add(&self.wiring.stats().bytes_in, data.len() as u64);
        let now = self.now;
        let Some(c) = self.table.get_mut(id) else { return };
        if c.phase != Phase::Open {
            return;
        }
        let Some(user) = c.user.as_mut() else { return };
        let status = self.handler.recv(user, now, data, &mut c.output.out);
        self.after_call(id, status);
    }

    /// Bookkeeping after any call into a connection's handler state.
    pub fn after_call(&mut self, id: ConnId, status: ConnStatus) {
        let max_pending = self.cfg.max_pending_output_bytes;
        let now = self.now.mono_ns;
        let grace = self.grace_ns();
        let Some(c) = self.table.get_mut(id) else { return };
        let mut dirty = !c.output.out.is_empty();
        if status == ConnStatus::Close && c.phase == Phase::Open {
            c.phase = Phase::Draining;
            c.drain_deadline = now.saturating_add(grace.max(100_000_000));
            dirty = true;
        }
        c.user_deadline = match &c.user {
            Some(u) => self.handler.conn_deadline(u),
            None => u64::MAX,
        };
        if !c.paused && c.output.pending() > max_pending {
            c.paused = true;
            dirty = true;
        }
        if dirty {
            self.table.mark_dirty(id);
        }
        self.table.update_timer(id);
    }

    /// Closes `id` after its pending output (graceful) or at once (`abort`).
    pub fn begin_close(&mut self, id: ConnId, abort: bool) {
        let now = self.now.mono_ns;
        let grace = self.grace_ns().max(100_000_000);
        if let Some(c) = self.table.get_mut(id) {
            if c.phase == Phase::Open {
                c.phase = Phase::Draining;
                c.drain_deadline = now.saturating_add(grace);
            }
            if abort {
                c.output.out.clear();
                c.drain_deadline = now;
            }
        }
        self.table.mark_dirty(id);
        self.table.update_timer(id);
    }

    /// Runs due timers: the shard's and the connections'.
    pub fn fire_timers(&mut self) {
        let now = self.now;
        if self.handler.deadline() <= now.mono_ns {
            self.handler.timer(now);
        }
        while let Some(id) = self.table.pop_expired(now.mono_ns) {
            let Some(c) = self.table.get_mut(id) else { continue };
            if c.phase == Phase::Open {
                if c.user_deadline <= now.mono_ns {
                    if let Some(user) = c.user.as_mut() {
                        let status = self.handler.conn_timer(user, now, &mut c.output.out);
                        self.after_call(id, status);
                        continue;
                    }
                }
                self.table.update_timer(id);
            } else {
                // Draining past its deadline: the backend closes it on reconcile.
                self.table.mark_dirty(id);
            }
        }
    }

    /// Forgets `id`: tells the handler, closes the socket.
    pub fn finalize(&mut self, id: ConnId) {
        if let Some(c) = self.table.remove(id) {
            if let Some(user) = c.user {
                self.handler.closed(user, self.now);
            }
            tracing::trace!(shard = self.wiring.index, peer = %c.peer, "connection closed");
            let stats = self.wiring.stats();
            ShardStats::sub(&stats.open, 1);
            ShardStats::add(&stats.closed, 1);
            drop(c.fd);
        }
    }

    /// Graceful stop: every connection says goodbye and drains.
    pub fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let now = self.now;
        self.stop_deadline = now.mono_ns.saturating_add(self.grace_ns());
        for id in self.table.ids() {
            let Some(c) = self.table.get_mut(id) else { continue };
            if c.phase == Phase::Open {
                if let Some(user) = c.user.as_mut() {
                    self.handler.shutdown(user, now, &mut c.output.out);
                }
                c.phase = Phase::Draining;
                c.drain_deadline = self.stop_deadline;
            }
            c.drain_deadline = c.drain_deadline.min(self.stop_deadline);
            self.table.mark_dirty(id);
            self.table.update_timer(id);
        }
        tracing::debug!(shard = self.wiring.index, open = self.table.len(), "shard stopping");
    }

    /// After the grace period: abort every connection still open.
    pub fn abort_all(&mut self) {
        for id in self.table.ids() {
            self.begin_close(id, true);
        }
    }

    /// A socket was accepted here: keep it or hand it to another shard.
    /// Returns the id when this shard kept it.
    pub fn on_accepted(&mut self, fd: OwnedFd, peer: SocketAddr) -> Option<ConnId> {
        let target = self.wiring.route();
        if target != self.wiring.index {
            match self.wiring.hand_to(target, Handoff { fd, peer }) {
                Ok(()) => {
                    ShardStats::add(&self.wiring.stats().handed_off, 1);
                    if !self.wake.contains(&target) {
                        self.wake.push(target);
                    }
                    return None;
                }
                Err(h) => {
                    tracing::debug!(shard = self.wiring.index, target, "hand-off queue full: keeping connection");
                    return self.add_conn(h.fd, h.peer, Origin::Accepted);
                }
            }
        }
        self.add_conn(fd, peer, Origin::Accepted)
    }

    /// Takes sockets handed over by the acceptor.
    pub fn drain_inbox(&mut self, added: &mut Vec<ConnId>) {
        loop {
            let Some(inbox) = self.wiring.inbox.as_mut() else { return };
            let Some(h) = inbox.pop() else { return };
            if let Some(id) = self.add_conn(h.fd, h.peer, Origin::Accepted) {
                added.push(id);
            }
        }
    }

    /// The earliest time the loop must wake up.
    pub fn next_wakeup(&mut self) -> u64 {
        let mut d = self.handler.deadline().min(self.table.next_deadline());
        if self.stopping {
            d = d.min(self.stop_deadline.saturating_add(STOP_HARD_EXTRA_NS));
        }
        d
    }
}
