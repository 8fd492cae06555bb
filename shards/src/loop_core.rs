//! The backend-independent half of a shard's loop: connection lifecycle,
//! calls into the handler, timers, graceful stop and connection routing.
//! The io_uring and epoll backends drive it.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};

use uaring_core::transport::ErrorMessage;
use uaring_core::{Now, StatusCode};

use crate::clock;
use crate::config::{RuntimeConfig, Sqpoll};
use crate::conn::{Conn, Phase, Table};
use crate::fleet::{Handoff, Moved, ShardStats, ShardWiring};
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
    /// Accepted connections from one IP address at once (this shard).
    pub max_connections_per_address: usize,
    /// Unsent bytes per connection above which reading pauses (and received
    /// input is held back) until they drain below half.
    pub max_pending_output_bytes: usize,
    /// Unsent output plus held input across the shard above which the shard stops
    /// reading and refuses new connections until the total drains below 3/4 (this shard's
    /// share of `runtime.max_buffered_bytes`).
    pub max_shard_buffered_bytes: usize,
    /// The same for the connections without an activated session: past it they are no
    /// longer read and new connections are refused, while the others go on (this shard's
    /// share of `runtime.max_pre_session_buffered_bytes`).
    pub max_pre_session_buffered_bytes: usize,
    /// A connection not read from whose output makes no progress this long is aborted, ms.
    pub send_stall_timeout_ms: u64,
    pub tcp_nodelay: bool,
    /// Batched waiting, µs (0 = off) and the completions it waits for (`RuntimeConfig`).
    pub batch_wait_us: u32,
    pub batch_completions: u32,
    /// Batched waiting uses IORING_FEAT_MIN_TIMEOUT when the kernel has it (6.12+); `false`
    /// makes it use the second bounded wait of older kernels instead (tests, embedders).
    /// Not a configuration-file key: servers always use what the kernel offers.
    pub min_timeout: bool,
    /// Graceful stop: how long pending output may take, ms.
    pub shutdown_grace_ms: u64,
    /// Kernel submission polling (io_uring): off, a poller per shard, or one shared poller
    /// (shard 0's; the other shards attach to its ring, so shard 0 must be set up first).
    pub sqpoll: Sqpoll,
    /// This shard's poller CPU (with `Shared`, the shared poller's, used by shard 0); `None`:
    /// not bound. Set per shard by the runtime from `runtime.sqpoll_cpu`.
    pub sqpoll_cpu: Option<usize>,
    /// sq_thread_idle, ms.
    pub sqpoll_idle_ms: u32,
    /// Spin-before-sleep, µs (0 = off): peek the completion queue this long before sleeping.
    pub busy_poll_us: u32,
    /// Register a sparse file table of `max_connections` slots in the ring and name the
    /// connections' sockets by slot (io_uring).
    pub fixed_files: bool,
    /// Send a batch of at least this many bytes with IORING_OP_SEND_ZC (0 = off; io_uring).
    pub zero_copy_send_min: u32,
    /// Registered send buffers in the ring (0 = off; io_uring): two per connection while
    /// they last, named by index in its sends.
    pub fixed_send_buffers: u32,
    /// The size of each registered send buffer, bytes.
    pub fixed_send_buffer_bytes: u32,
    /// NAPI busy polling registered on the ring with this timeout, µs (0 = off; io_uring).
    pub napi_busy_poll_us: u32,
    /// NAPI busy polling: prefer busy polling over interrupts.
    pub napi_prefer_busy_poll: bool,
    /// Multishot receives with IORING_RECVSEND_BUNDLE (io_uring, 6.10+).
    pub recv_bundles: bool,
}

impl LoopConfig {
    /// An io_uring-only mode is asked for: the loop must not fall back to epoll.
    pub fn needs_uring(&self) -> bool {
        self.sqpoll.is_on()
            || self.busy_poll_us > 0
            || self.fixed_files
            || self.zero_copy_send_min > 0
            || self.fixed_send_buffers > 0
            || self.napi_busy_poll_us > 0
            || self.recv_bundles
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig::from(&RuntimeConfig::default())
    }
}

impl From<&RuntimeConfig> for LoopConfig {
    fn from(r: &RuntimeConfig) -> Self {
        LoopConfig {
            ring_entries: if r.ring_entries == 0 {
                crate::memlock::AUTO_RING_ENTRIES
            } else {
                r.ring_entries
            },
            recv_buffers: r.recv_buffers,
            recv_buffer_bytes: r.recv_buffer_bytes,
            multishot: r.multishot,
            max_connections: r.max_connections_per_shard,
            max_connections_per_address: r.max_connections_per_address,
            max_pending_output_bytes: r.max_pending_output_bytes,
            max_shard_buffered_bytes: r.shard_budgets(1).0,
            max_pre_session_buffered_bytes: r.shard_budgets(1).1,
            send_stall_timeout_ms: r.send_stall_timeout_ms,
            tcp_nodelay: r.tcp_nodelay,
            batch_wait_us: r.batch_wait_us,
            batch_completions: r.batch_completions,
            min_timeout: true,
            shutdown_grace_ms: r.shutdown_grace_ms,
            sqpoll: r.sqpoll,
            sqpoll_cpu: None,
            sqpoll_idle_ms: r.sqpoll_idle_ms,
            busy_poll_us: r.busy_poll_us,
            fixed_files: r.fixed_files,
            zero_copy_send_min: r.zero_copy_send_min,
            fixed_send_buffers: r.fixed_send_buffers,
            fixed_send_buffer_bytes: r.fixed_send_buffer_bytes,
            napi_busy_poll_us: r.napi_busy_poll_us,
            napi_prefer_busy_poll: r.napi_prefer_busy_poll,
            recv_bundles: r.recv_bundles,
        }
    }
}

/// Received bytes are handed to the handler in slices of at most this size, and
/// the connection's bounds are checked after each: a slice of small requests
/// (GetEndpoints: ~100 bytes in, ~10 KiB out) multiplies into output, so this
/// caps how far one call can overshoot `max_pending_output_bytes`.
pub(crate) const DELIVER_SLICE_BYTES: usize = 4096;

/// A backlog buffer larger than this is freed rather than kept once empty.
const BACKLOG_KEEP_BYTES: usize = 64 * 1024;

/// glibc raises its mmap threshold (up to 32 MiB) each time a large block is
/// freed; from then on large output buffers come from the heap, and once freed
/// they stay resident. Measured: 60 slow readers under an 8 MiB shard budget
/// left 62 MiB resident, against 22 MiB with the threshold pinned. Pinning it
/// (which turns the adjustment off) hands large buffers back to the kernel when
/// they are freed. `MALLOC_MMAP_THRESHOLD_` in the environment still wins.
///
/// The same adjustment raises the trim threshold to twice the mmap threshold, and
/// building the address space at start frees large blocks, so by the time the
/// shards start glibc no longer gives the top of the heap back until more than
/// ~48 MiB of it is free: the ~20 MiB the build used and freed stayed resident for
/// the server's whole life. So the trim threshold is pinned back to glibc's
/// default (128 KiB; `MALLOC_TRIM_THRESHOLD_` still wins), and the free memory
/// is handed back once, here, when the first shard starts (the build is done by
/// then). Measured on the default configuration with two shards: 44 MiB resident
/// before the trim, 23 MiB after (docs/Limits.md, Soak).
fn tune_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
                // SAFETY: mallopt only changes allocator parameters; glibc's own default value.
                unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024) };
            }
            if std::env::var_os("MALLOC_TRIM_THRESHOLD_").is_none() {
                // SAFETY: as above; 128 KiB is glibc's default trim threshold.
                unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, 128 * 1024) };
            }
            // SAFETY: malloc_trim only returns free heap pages to the kernel; it locks
            // each arena itself and is safe to call from any thread.
            unsafe { libc::malloc_trim(0) };
        });
    }
}

/// Makes closing `fd` reset the connection (SO_LINGER 0) instead of queueing a
/// FIN behind unsent data. For aborts and drains that ran out of time: a peer
/// that reads nothing would otherwise keep the socket, and its send buffer, in
/// FIN-WAIT-1 in the kernel, and never learn that it was closed.
pub(crate) fn reset_on_close(fd: &OwnedFd) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a valid fd and a correctly sized linger struct; failure is harmless.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &linger as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// A connection the table has no room for: a best-effort ERR (one nonblocking send;
/// what the client already sent is read and dropped so the close is a FIN, not a
/// reset), then the socket closes when `fd` is dropped.
fn refuse_at_once(fd: &OwnedFd, status: StatusCode, reason: &str) {
    let mut msg = Vec::with_capacity(64);
    ErrorMessage::new(status, reason).write(&mut msg);
    let raw = fd.as_raw_fd();
    let mut scratch = [0u8; 1024];
    // SAFETY: send/shutdown/recv on a socket we own, with buffers of the given lengths.
    unsafe {
        libc::send(
            raw,
            msg.as_ptr() as *const libc::c_void,
            msg.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
        );
        libc::shutdown(raw, libc::SHUT_WR);
        for _ in 0..4 {
            if libc::recv(
                raw,
                scratch.as_mut_ptr() as *mut libc::c_void,
                scratch.len(),
                libc::MSG_DONTWAIT,
            ) <= 0
            {
                break;
            }
        }
    }
}

/// After the grace period, how much longer a stopping loop waits for the
/// kernel to finish with its sockets before it exits regardless, ns.
pub(crate) const STOP_HARD_EXTRA_NS: u64 = 500_000_000;

pub(crate) struct LoopCore<H: Handler> {
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
    /// Sum of every connection's `held` bytes.
    pub held_total: usize,
    /// `held_total` passed `max_shard_buffered_bytes` and has not yet drained below
    /// 3/4 of it: no connection reads, new connections are refused.
    pub over_budget: bool,
    /// Sum of the `held` bytes of the connections without an activated session.
    pub held_pre_session: usize,
    /// `held_pre_session` passed `max_pre_session_buffered_bytes` and has not yet drained
    /// below 3/4 of it: those connections are not read, new connections are refused.
    pub over_pre_session_budget: bool,
    /// Scratch list for [`LoopCore::flush_ready`].
    ready: Vec<ConnId>,
    /// Accepted connections in the table per peer address (at most one entry per
    /// connection, so bounded by the table).
    per_address: std::collections::HashMap<std::net::IpAddr, u32>,
    /// Messages for other shards whose queue was full: sent first next time.
    mail_out: Vec<(usize, crate::fleet::ShardMessage)>,
    /// The connections whose deadlines are due, taken from the timer heap at once in
    /// [`LoopCore::fire_timers`] (kept to reuse its room).
    due: Vec<ConnId>,
}

/// Which budgets are past their bound: whether a connection may be read.
#[derive(Clone, Copy)]
struct Gate {
    all: bool,
    pre_session: bool,
}

impl Gate {
    /// Is reading `c` stopped (its own bound, the shard's budget, or the pre-session share
    /// for a connection without a session)?
    fn stops<U>(self, c: &crate::conn::Conn<U>) -> bool {
        c.bounded && (c.paused || self.all || (c.pre_session && self.pre_session))
    }
}

impl<H: Handler> LoopCore<H> {
    fn gate(&self) -> Gate {
        Gate {
            all: self.over_budget,
            pre_session: self.over_pre_session_budget,
        }
    }

    pub fn new(handler: H, wiring: ShardWiring, cfg: LoopConfig) -> LoopCore<H> {
        tune_malloc();
        let mut handler = handler;
        handler.set_waker(crate::fleet::Waker::new(wiring.fleet.clone(), wiring.index));
        LoopCore {
            handler,
            table: Table::new(cfg.max_connections),
            wiring,
            cfg,
            now: clock::now(),
            stopping: false,
            stop_deadline: u64::MAX,
            wake: Vec::new(),
            held_total: 0,
            over_budget: false,
            held_pre_session: 0,
            over_pre_session_budget: false,
            ready: Vec::new(),
            per_address: std::collections::HashMap::new(),
            mail_out: Vec::new(),
            due: Vec::new(),
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
        if self.table.len() >= self.cfg.max_connections {
            ShardStats::add(&self.stats().refused, 1);
            tracing::debug!(shard = self.wiring.index, %peer, "connection table full: closing new connection");
            if matches!(origin, Origin::Accepted) {
                refuse_at_once(
                    &fd,
                    StatusCode::BadTcpNotEnoughResources,
                    "server busy: connection limit reached",
                );
            }
            return None;
        }
        let Some(id) = self.table.insert(Conn::new(fd, peer)) else {
            ShardStats::add(&self.stats().refused, 1);
            return None;
        };
        let accepted = matches!(origin, Origin::Accepted);
        // A peer's input, not our own client's: within the budgets (dialed ones too).
        let untrusted = accepted || matches!(origin, Origin::Reverse(_));
        // Counted by address like every connection of a peer (a move and the close forget it
        // again by `bounded`); only accepted ones are refused for it.
        let from_address = if untrusted {
            let n = self.per_address.entry(peer.ip()).or_insert(0);
            *n += 1;
            *n as usize
        } else {
            0
        };
        let stats = self.wiring.stats();
        ShardStats::add(&stats.open, 1);
        if accepted {
            ShardStats::add(&stats.accepted, 1);
        }
        let now = self.now;
        let grace = self.grace_ns();
        let over_budget = self.over_budget || self.over_pre_session_budget;
        let c = self.table.get_mut(id)?;
        c.bounded = untrusted;
        let too_many_from_address = from_address > self.cfg.max_connections_per_address;
        if (over_budget && untrusted) || (too_many_from_address && accepted) {
            // New pre-session work would only add to what the shard cannot hold.
            ShardStats::add(&self.wiring.stats().refused, 1);
            let (status, reason) = if over_budget {
                tracing::debug!(shard = self.wiring.index, %peer, "shard over its buffer budget: refusing new connection");
                (
                    StatusCode::BadTcpNotEnoughResources,
                    "server busy: shard buffer budget reached",
                )
            } else {
                tracing::debug!(shard = self.wiring.index, %peer, "too many connections from this address: refusing");
                (
                    StatusCode::BadTcpServerTooBusy,
                    "too many connections from this address",
                )
            };
            ErrorMessage::new(status, reason).write(&mut c.output.out);
            c.phase = Phase::Draining;
            c.drain_deadline = now.mono_ns.saturating_add(grace.max(100_000_000));
            self.after_call(id, ConnStatus::Open);
            return Some(id);
        }
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

    /// Bytes arrived on `id`. They go to the handler slice by slice while the
    /// connection and the shard are within their bounds; the rest waits in the
    /// connection's backlog (the backend stops receiving meanwhile).
    pub fn deliver(&mut self, id: ConnId, data: &[u8]) {
        ShardStats::add(&self.wiring.stats().bytes_in, data.len() as u64);
        let gate = self.gate();
        let Some(c) = self.table.get_mut(id) else {
            return;
        };
        if c.phase != Phase::Open {
            return;
        }
        if gate.stops(c) || !c.backlog.is_empty() || c.moving_to.is_some() {
            // Received after the bound was passed (a multishot receive still
            // completing, or the socket read before the pause took effect).
            c.backlog.extend_from_slice(data);
            self.account(id);
            return;
        }
        let rest = self.feed(id, data);
        if !rest.is_empty() {
            if let Some(c) = self.table.get_mut(id) {
                c.backlog.extend_from_slice(rest);
            }
            self.account(id);
        }
    }

    /// Hands `data` to the handler slice by slice while the connection may take
    /// more. Returns what is left (empty if the connection closed).
    fn feed<'a>(&mut self, id: ConnId, data: &'a [u8]) -> &'a [u8] {
        let mut data = data;
        while !data.is_empty() {
            let now = self.now;
            let gate = self.gate();
            let Some(c) = self.table.get_mut(id) else {
                return &[];
            };
            if c.phase != Phase::Open {
                return &[];
            }
            if gate.stops(c) || c.moving_to.is_some() {
                break;
            }
            let Some(user) = c.user.as_mut() else {
                return &[];
            };
            if self.handler.input_suspended(user) {
                break;
            }
            let n = data.len().min(DELIVER_SLICE_BYTES);
            if c.bounded {
                let shard = self
                    .cfg
                    .max_shard_buffered_bytes
                    .saturating_sub(self.held_total);
                let pre = self
                    .cfg
                    .max_pre_session_buffered_bytes
                    .saturating_sub(self.held_pre_session);
                self.handler.set_memory_headroom(if c.pre_session {
                    shard.min(pre)
                } else {
                    shard
                });
            }
            let status = self.handler.recv(user, now, &data[..n], &mut c.output.out);
            data = &data[n..];
            self.after_call(id, status);
        }
        data
    }

    /// Whether `id` may receive now: open, within its own bound and the shard's,
    /// nothing held back. No side effects (see [`LoopCore::resume`]).
    pub fn reading_allowed(&mut self, id: ConnId) -> bool {
        let gate = self.gate();
        match self.table.get_mut(id) {
            Some(c) => {
                c.phase == Phase::Open
                    && c.moving_to.is_none()
                    && c.backlog.is_empty()
                    && !gate.stops(c)
                    && !c
                        .user
                        .as_ref()
                        .is_some_and(|u| self.handler.input_suspended(u))
            }
            None => false,
        }
    }

    /// The backends call this when they reconcile a connection: brings its
    /// accounting up to date, lifts its pause once its output drained below half
    /// the bound, feeds input held back while it was paused, and returns whether
    /// the connection should have a receive armed.
    pub fn resume(&mut self, id: ConnId) -> bool {
        self.account(id);
        let max_pending = self.cfg.max_pending_output_bytes;
        let Some(c) = self.table.get_mut(id) else {
            return false;
        };
        if c.phase != Phase::Open {
            return false;
        }
        if c.paused && c.output.pending() <= max_pending / 2 {
            c.paused = false;
        }
        let gate = Gate {
            all: self.over_budget,
            pre_session: self.over_pre_session_budget,
        };
        if !c.backlog.is_empty() && c.moving_to.is_none() && !gate.stops(c) {
            let mut backlog = std::mem::take(&mut c.backlog);
            let left = self.feed(id, &backlog).len();
            let done = backlog.len() - left;
            backlog.drain(..done);
            if backlog.is_empty() && backlog.capacity() > BACKLOG_KEEP_BYTES {
                backlog = Vec::new();
            }
            if let Some(c) = self.table.get_mut(id) {
                if c.phase == Phase::Open {
                    c.backlog = backlog;
                }
            }
            self.account(id);
        }
        let reading = self.reading_allowed(id);
        self.watch_stall(id, reading);
        reading
    }

    /// A bounded connection that is not read from and has output waiting gets a
    /// stall deadline (kept while it stays so; the backends clear it on every
    /// send that makes progress); otherwise none.
    fn watch_stall(&mut self, id: ConnId, reading: bool) {
        let timeout_ns = self.cfg.send_stall_timeout_ms.saturating_mul(1_000_000);
        let now = self.now.mono_ns;
        let Some(c) = self.table.get_mut(id) else {
            return;
        };
        let stalled = c.bounded && c.phase == Phase::Open && !reading && c.output.pending() > 0;
        let deadline = match (stalled, c.stall_deadline) {
            (false, _) => u64::MAX,
            (true, u64::MAX) => now.saturating_add(timeout_ns),
            (true, d) => d,
        };
        if deadline != c.stall_deadline {
            c.stall_deadline = deadline;
            self.table.update_timer(id);
        }
    }

    /// Recounts the bytes `id` holds, updates the shard's total, pauses the
    /// connection past its own bound, and the shard past its budget.
    pub fn account(&mut self, id: ConnId) {
        let max_pending = self.cfg.max_pending_output_bytes;
        let Some(c) = self.table.get_mut(id) else {
            return;
        };
        if !c.bounded {
            return;
        }
        // Input the handler buffers (unfinished chunks and messages) counts against the
        // shard's budget too.
        let input = c
            .user
            .as_ref()
            .map_or(0, |u| self.handler.buffered_bytes(u));
        let pre_session = c.user.as_ref().is_some_and(|u| self.handler.pre_session(u));
        let held = c.output.held_bytes() + c.backlog.len() + input;
        let before = c.held;
        if c.pre_session {
            self.held_pre_session -= before;
        }
        if pre_session {
            self.held_pre_session += held;
        }
        c.pre_session = pre_session;
        c.held = held;
        let pause = !c.paused && c.phase == Phase::Open && c.output.pending() > max_pending;
        if pause {
            c.paused = true;
        }
        self.held_total = self.held_total - before + held;
        if pause {
            self.table.mark_dirty(id);
        }
        self.check_budget();
    }

    /// Enters or leaves the over-budget state (hysteresis: leaves below 3/4). Every
    /// open connection is reconciled on a change, so that receives stop or restart.
    fn check_budget(&mut self) {
        let pre = self.cfg.max_pre_session_buffered_bytes;
        let pre_change = if self.over_pre_session_budget {
            self.held_pre_session <= pre / 4 * 3
        } else {
            self.held_pre_session > pre
        };
        if pre_change {
            self.over_pre_session_budget = !self.over_pre_session_budget;
            tracing::debug!(
                shard = self.wiring.index,
                held_bytes = self.held_pre_session,
                budget_bytes = pre,
                "pre-session share of the buffer budget {}",
                if self.over_pre_session_budget {
                    "exceeded: connections without a session are not read"
                } else {
                    "regained: they are read again"
                }
            );
            self.table.mark_all_dirty();
        }
        let budget = self.cfg.max_shard_buffered_bytes;
        let change = if self.over_budget {
            self.held_total <= budget / 4 * 3
        } else {
            self.held_total > budget
        };
        if !change {
            return;
        }
        self.over_budget = !self.over_budget;
        tracing::debug!(
            shard = self.wiring.index,
            held_bytes = self.held_total,
            budget_bytes = budget,
            "shard buffer budget {}",
            if self.over_budget {
                "exceeded: reading stops"
            } else {
                "regained: reading resumes"
            }
        );
        self.table.mark_all_dirty();
    }

    /// Bookkeeping after any call into a connection's handler state.
    pub fn after_call(&mut self, id: ConnId, status: ConnStatus) {
        if let ConnStatus::Move(target) = status {
            return self.begin_move(id, target);
        }
        let max_pending = self.cfg.max_pending_output_bytes;
        let now = self.now.mono_ns;
        let grace = self.grace_ns();
        let Some(c) = self.table.get_mut(id) else {
            return;
        };
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
        if c.phase != Phase::Open {
            c.backlog = Vec::new();
        }
        if !c.paused && c.output.pending() > max_pending {
            dirty = true;
        }
        if dirty {
            self.table.mark_dirty(id);
        }
        self.table.update_timer(id);
        self.account(id);
    }

    /// The handler wants `id` on shard `target`: reserve a slot of the queue there and stop
    /// feeding the connection (the backend sends its output, waits for its operations and
    /// calls [`LoopCore::complete_move`]); or, when that cannot be, tell the handler.
    fn begin_move(&mut self, id: ConnId, target: usize) {
        let ok = !self.stopping
            && target != self.wiring.index
            && self
                .table
                .get_mut(id)
                .is_some_and(|c| c.phase == Phase::Open && c.moving_to.is_none())
            && self.wiring.reserve_move(target);
        if ok {
            if let Some(c) = self.table.get_mut(id) {
                c.moving_to = Some(target);
            }
            self.table.mark_dirty(id);
            self.table.update_timer(id);
            self.account(id);
            return;
        }
        ShardStats::add(&self.wiring.stats().move_refused, 1);
        tracing::debug!(
            shard = self.wiring.index,
            target,
            "cannot move connection: move queue full or shard stopping"
        );
        let now = self.now;
        let Some(c) = self.table.get_mut(id) else {
            return;
        };
        let Some(user) = c.user.as_mut() else { return };
        let status = self.handler.move_refused(user, now, &mut c.output.out);
        // A refused move answers and goes on with the input the handler held; that input
        // may ask for a move again (bounded: it only shrinks).
        self.after_call(id, status);
    }

    /// Whether a moving connection may leave now: its output is sent and the backend
    /// holds no operation for it (the backends check the latter).
    pub fn move_ready(&mut self, id: ConnId) -> bool {
        self.table.get_mut(id).is_some_and(|c| {
            c.phase == Phase::Open && c.moving_to.is_some() && c.output.pending() == 0
        })
    }

    /// Sends `id` to the shard it is moving to: the socket, the handler's state and the
    /// input received since the move began. The backend has already forgotten the socket.
    pub fn complete_move(&mut self, id: ConnId) {
        let Some(c) = self.table.remove(id) else {
            return;
        };
        self.held_total -= c.held;
        if c.pre_session {
            self.held_pre_session -= c.held;
        }
        if c.bounded {
            self.forget_address(c.peer.ip());
        }
        let stats = self.wiring.stats();
        ShardStats::sub(&stats.open, 1);
        let Some(target) = c.moving_to else { return };
        let state = c.user.and_then(|u| self.handler.detach(u, self.now));
        let Some(state) = state else {
            self.wiring.release_move(target);
            ShardStats::add(&self.wiring.stats().closed, 1);
            return;
        };
        let h = Handoff {
            fd: c.fd,
            peer: c.peer,
            moved: Some(Box::new(Moved {
                state,
                input: c.backlog,
            })),
        };
        match self.wiring.move_to(target, h) {
            Ok(()) => {
                ShardStats::add(&self.wiring.stats().moved_out, 1);
                if !self.wake.contains(&target) {
                    self.wake.push(target);
                }
            }
            Err(h) => {
                // Cannot happen (the slot was reserved); the socket closes with `h`.
                debug_assert!(false, "move queue full despite a reservation");
                ShardStats::add(&self.wiring.stats().closed, 1);
                drop(h);
            }
        }
        self.check_budget();
    }

    /// A live connection arrived from another shard.
    fn add_moved(&mut self, fd: OwnedFd, peer: SocketAddr, moved: Moved) -> Option<ConnId> {
        if self.stopping {
            return None;
        }
        let Some(id) = self.table.insert(Conn::new(fd, peer)) else {
            ShardStats::add(&self.stats().refused, 1);
            tracing::debug!(shard = self.wiring.index, %peer, "connection table full: closing moved connection");
            return None;
        };
        // Counted against its address here (it passed that check where it was accepted; a
        // move is never refused for it).
        *self.per_address.entry(peer.ip()).or_insert(0) += 1;
        let stats = self.wiring.stats();
        ShardStats::add(&stats.open, 1);
        ShardStats::add(&stats.moved_in, 1);
        let now = self.now;
        let grace = self.grace_ns();
        let c = self.table.get_mut(id)?;
        // Received on the old shard after the move began: fed after what the handler holds.
        c.backlog = moved.input;
        let (user, status) = self
            .handler
            .attach(id, peer, moved.state, now, &mut c.output.out);
        match user {
            Some(u) => c.user = Some(u),
            None => {
                c.phase = Phase::Draining;
                c.drain_deadline = now.mono_ns.saturating_add(grace.max(100_000_000));
            }
        }
        self.after_call(id, status);
        self.table.mark_dirty(id);
        Some(id)
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
                reset_on_close(&c.fd);
            }
            c.backlog = Vec::new();
        }
        self.table.mark_dirty(id);
        self.table.update_timer(id);
        self.account(id);
    }

    /// Sends what the handler produced outside connection calls (Publish responses of
    /// shard timers, or of requests handled on other connections).
    pub fn flush_ready(&mut self) {
        let mut ids = std::mem::take(&mut self.ready);
        self.handler.take_ready(&mut ids);
        let now = self.now;
        for &id in &ids {
            let Some(c) = self.table.get_mut(id) else {
                continue;
            };
            if c.phase != Phase::Open {
                continue;
            }
            let Some(user) = c.user.as_mut() else {
                continue;
            };
            let status = self.handler.flush(user, now, &mut c.output.out);
            self.after_call(id, status);
            // Its input may have been waiting (a handshake job came back): reconcile it.
            self.table.mark_dirty(id);
        }
        ids.clear();
        self.ready = ids;
    }

    /// Queues the handler's messages for other shards (those whose queue is full wait here,
    /// in order, and go first next iteration) and wakes their shards.
    fn send_mail(&mut self) {
        self.handler.take_mail(&mut self.mail_out);
        if self.mail_out.is_empty() {
            return;
        }
        let mut kept = Vec::new();
        let mut blocked: Vec<usize> = Vec::new();
        for (target, body) in std::mem::take(&mut self.mail_out) {
            if !self.wiring.has_mail_route(target) {
                debug_assert!(false, "message for shard {target}, which has no queue");
                continue;
            }
            // Keep the order per target: once one is blocked, the rest for it wait too.
            if blocked.contains(&target) {
                kept.push((target, body));
                continue;
            }
            match self.wiring.mail_to(target, body) {
                Ok(()) => {
                    if !self.wake.contains(&target) {
                        self.wake.push(target);
                    }
                }
                Err(body) => {
                    blocked.push(target);
                    kept.push((target, body));
                }
            }
        }
        self.mail_out = kept;
    }

    /// Runs due timers: the shard's and the connections'; then flushes asynchronous
    /// output (once per loop iteration, before the sends are reconciled).
    pub fn fire_timers(&mut self) {
        let now = self.now;
        if self.handler.deadline() <= now.mono_ns {
            self.handler.timer(now);
        }
        self.send_mail();
        self.flush_ready();
        // Every connection due now fires once: a handler whose deadline is still due after
        // its timer ran (a load client's pacer while it stops sending) runs again on the
        // next turn, after the sockets, instead of again and again at this frozen `now`.
        let mut due = std::mem::take(&mut self.due);
        while let Some(id) = self.table.pop_expired(now.mono_ns) {
            due.push(id);
        }
        for id in due.drain(..) {
            let Some(c) = self.table.get_mut(id) else {
                continue;
            };
            if c.phase == Phase::Open {
                if c.stall_deadline <= now.mono_ns {
                    tracing::debug!(shard = self.wiring.index, peer = %c.peer, pending = c.output.pending(), "peer reads nothing: closing");
                    self.begin_close(id, true);
                    continue;
                }
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
        self.due = due;
    }

    /// One connection from `ip` fewer on this shard.
    fn forget_address(&mut self, ip: std::net::IpAddr) {
        if let Some(n) = self.per_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&ip);
            }
        }
    }

    /// Forgets `id`: tells the handler, closes the socket.
    pub fn finalize(&mut self, id: ConnId) {
        if let Some(c) = self.table.remove(id) {
            self.held_total -= c.held;
            if c.pre_session {
                self.held_pre_session -= c.held;
            }
            if c.bounded {
                self.forget_address(c.peer.ip());
            }
            if let Some(target) = c.moving_to {
                self.wiring.release_move(target);
            }
            if let Some(user) = c.user {
                self.handler.closed(user, self.now);
            }
            tracing::trace!(shard = self.wiring.index, peer = %c.peer, "connection closed");
            let stats = self.wiring.stats();
            ShardStats::sub(&stats.open, 1);
            ShardStats::add(&stats.closed, 1);
            drop(c.fd);
            debug_assert!(
                self.table.len() > 0 || self.held_total == 0,
                "held bytes left behind: {}",
                self.held_total
            );
            self.check_budget();
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
            let Some(c) = self.table.get_mut(id) else {
                continue;
            };
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
        tracing::debug!(
            shard = self.wiring.index,
            open = self.table.len(),
            "shard stopping"
        );
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
            match self.wiring.hand_to(
                target,
                Handoff {
                    fd,
                    peer,
                    moved: None,
                },
            ) {
                Ok(()) => {
                    ShardStats::add(&self.wiring.stats().handed_off, 1);
                    if !self.wake.contains(&target) {
                        self.wake.push(target);
                    }
                    return None;
                }
                Err(h) => {
                    tracing::debug!(
                        shard = self.wiring.index,
                        target,
                        "hand-off queue full: keeping connection"
                    );
                    return self.add_conn(h.fd, h.peer, Origin::Accepted);
                }
            }
        }
        self.add_conn(fd, peer, Origin::Accepted)
    }

    /// Takes sockets handed over by the acceptor, live connections moved here and messages
    /// from other shards.
    pub fn drain_inbox(&mut self, added: &mut Vec<ConnId>) {
        while let Some(msg) = self.wiring.pop_mail() {
            let now = self.now;
            self.handler.mail(msg, now);
        }
        while let Some(h) = self.wiring.pop_incoming() {
            let id = match h.moved {
                Some(m) => self.add_moved(h.fd, h.peer, *m),
                None => self.add_conn(h.fd, h.peer, Origin::Accepted),
            };
            if let Some(id) = id {
                added.push(id);
            }
        }
        while let Some(d) = self.wiring.pop_dialed() {
            let origin = match d.lease {
                Some(lease) => Origin::Reverse(lease),
                None => Origin::Dialed(d.tag),
            };
            if let Some(id) = self.add_conn(d.fd, d.peer, origin) {
                added.push(id);
            }
            // After `open` counts it (the dialer's placement reads the two in turn).
            self.wiring
                .stats()
                .dialed_in
                .fetch_add(1, std::sync::atomic::Ordering::Release);
        }
    }

    /// The earliest time the loop must wake up.
    pub fn next_wakeup(&mut self) -> u64 {
        if self.table.has_dirty() {
            return 0;
        }
        let mut d = self.handler.deadline().min(self.table.next_deadline());
        if !self.mail_out.is_empty() {
            // A full queue to another shard: try again shortly.
            d = d.min(self.now.mono_ns.saturating_add(1_000_000));
        }
        if self.stopping {
            d = d.min(self.stop_deadline.saturating_add(STOP_HARD_EXTRA_NS));
        }
        d
    }
}
