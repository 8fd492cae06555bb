//! What the shards of one process share: per-shard statistics (atomics, each
//! written by its own shard only), wake-up fds, the stop flag, the hand-off
//! queues the acceptor shard uses for round-robin and least-connections
//! distribution, the move queues (one per ordered pair of shards) that carry
//! a live connection to the shard owning its session, and the mail queues (one per
//! ordered pair too) that carry [`ShardMessage`]s between the shards' protocol states.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::Distribution;
use crate::reverse::Dialed;
use crate::spsc::{self, Consumer, Producer};

use uaring_core::server::connection::ServerConnection;
pub use uaring_core::server::service_state::ShardMessage;

/// Counters of one shard. Written by that shard only (relaxed stores), read by anyone.
#[repr(align(64))]
#[derive(Default)]
pub struct ShardStats {
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections this shard took on (accepted itself or received by hand-off).
    pub accepted: AtomicU64,
    /// Connections closed.
    pub closed: AtomicU64,
    /// Connections refused (table full, or handler refused).
    pub refused: AtomicU64,
    /// Connections this shard accepted and handed to another shard.
    pub handed_off: AtomicU64,
    /// Live connections this shard sent to another shard (an ActivateSession of a session
    /// owned there).
    pub moved_out: AtomicU64,
    /// Live connections this shard took from another shard.
    pub moved_in: AtomicU64,
    /// Moves refused because the queue to the owning shard was full.
    pub move_refused: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Loop iterations (one io_uring_enter or epoll_wait each).
    pub loops: AtomicU64,
    /// Time spent waiting in io_uring_enter / epoll_wait, ns.
    pub idle_ns: AtomicU64,
    /// io_uring submission queue entries submitted.
    pub submissions: AtomicU64,
    /// io_uring completions handled.
    pub completions: AtomicU64,
    /// Waits that asked the kernel for more than one completion (batched waiting,
    /// `batch_wait_us`): the min-timeout wait, or the first wait of the fallback of kernels
    /// before 6.12 (followed by its second wait when fewer were in).
    pub batch_waits: AtomicU64,
    /// Completions those waits asked for, in total (`batch_want` of each): divided by
    /// `batch_waits`, how many completions a batched wait expects on average.
    pub batch_wanted: AtomicU64,
    /// SQPOLL: submissions that found the poller asleep and woke it (IORING_SQ_NEED_WAKEUP
    /// set while entries were queued: an io_uring_enter with IORING_ENTER_SQ_WAKEUP).
    pub sqpoll_wakeups: AtomicU64,
    /// Busy polling (`busy_poll_us`): spins started (the loop had nothing to handle).
    pub busy_polls: AtomicU64,
    /// Spins that found a completion before their bound (the sleep they saved).
    pub busy_poll_hits: AtomicU64,
    /// Time spent spinning, ns (CPU the shard burns instead of sleeping).
    pub busy_poll_ns: AtomicU64,
    /// Fixed files (`fixed_files`): connections whose socket was put into a slot of the
    /// ring's file table.
    pub fixed_files_registered: AtomicU64,
    /// Zero-copy sends (`zero_copy_send_min`): IORING_OP_SEND_ZC submitted.
    pub zc_sends: AtomicU64,
    /// Bytes those sends reported sent.
    pub zc_bytes: AtomicU64,
    /// Their notifications (IORING_CQE_F_NOTIF: the kernel let go of the buffer).
    pub zc_notifs: AtomicU64,
    /// Notifications that say the kernel copied the data after all
    /// (IORING_NOTIF_USAGE_ZC_COPIED; always so on loopback).
    pub zc_copied: AtomicU64,
    /// Zero-copy sends the locked-memory limit refused (ENOMEM: without CAP_IPC_LOCK their
    /// pages count against RLIMIT_MEMLOCK), sent again as ordinary sends.
    pub zc_refused: AtomicU64,
    /// Receive bundles (`recv_bundles`): receives that filled more than one buffer.
    pub bundled_recvs: AtomicU64,
    /// Connections the Reverse Connect dialer queued for this shard that it took in (opened
    /// or refused). Bumped with Release after `open` is, so that the dialer, which loads it
    /// with Acquire before `open`, counts a connection on its way in at least once: queued
    /// (handed − taken in) or open, never neither.
    pub dialed_in: AtomicU64,
    /// Buffers those receives filled.
    pub bundled_bufs: AtomicU64,
    /// Registered send buffers (`fixed_send_buffers`): sends that named one (its batch was in
    /// a registered buffer: no page walk, no pinning per send).
    pub fixed_buf_sends: AtomicU64,
    /// Sends that could have named one but went out of an ordinary buffer: the region had
    /// none left for the connection.
    pub fixed_buf_exhausted: AtomicU64,
    /// Batches that outgrew their registered buffer (the allocator moved them; they went out
    /// of ordinary memory and the buffer's index was given new memory).
    pub fixed_buf_outgrown: AtomicU64,
    /// Registered send buffers lent to connections now (a gauge).
    pub fixed_bufs_lent: AtomicU64,
    /// NAPI busy polling (`napi_busy_poll_us`): connections whose socket had a NAPI id at its
    /// first receive here (a NIC receive queue the ring's busy polling polls) …
    pub napi_sockets: AtomicU64,
    /// … and those whose socket had none (loopback, a device without NAPI): busy polling
    /// does nothing for them.
    pub napi_none: AtomicU64,
}

impl ShardStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }
    pub(crate) fn sub(counter: &AtomicU64, n: u64) {
        counter.store(
            counter.load(Ordering::Relaxed).saturating_sub(n),
            Ordering::Relaxed,
        );
    }
}

/// A snapshot of one shard's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub open: u64,
    pub accepted: u64,
    pub closed: u64,
    pub refused: u64,
    pub handed_off: u64,
    pub moved_out: u64,
    pub moved_in: u64,
    pub move_refused: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub loops: u64,
    pub idle_ns: u64,
    pub submissions: u64,
    pub completions: u64,
    pub batch_waits: u64,
    pub batch_wanted: u64,
    pub sqpoll_wakeups: u64,
    pub busy_polls: u64,
    pub busy_poll_hits: u64,
    pub busy_poll_ns: u64,
    pub fixed_files_registered: u64,
    pub zc_sends: u64,
    pub zc_bytes: u64,
    pub zc_notifs: u64,
    pub zc_copied: u64,
    pub zc_refused: u64,
    pub bundled_recvs: u64,
    pub bundled_bufs: u64,
    pub fixed_buf_sends: u64,
    pub fixed_buf_exhausted: u64,
    pub fixed_buf_outgrown: u64,
    pub fixed_bufs_lent: u64,
    pub napi_sockets: u64,
    pub napi_none: u64,
}

impl ShardStats {
    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            open: r(&self.open),
            accepted: r(&self.accepted),
            closed: r(&self.closed),
            refused: r(&self.refused),
            handed_off: r(&self.handed_off),
            moved_out: r(&self.moved_out),
            moved_in: r(&self.moved_in),
            move_refused: r(&self.move_refused),
            bytes_in: r(&self.bytes_in),
            bytes_out: r(&self.bytes_out),
            loops: r(&self.loops),
            idle_ns: r(&self.idle_ns),
            submissions: r(&self.submissions),
            completions: r(&self.completions),
            batch_waits: r(&self.batch_waits),
            batch_wanted: r(&self.batch_wanted),
            sqpoll_wakeups: r(&self.sqpoll_wakeups),
            busy_polls: r(&self.busy_polls),
            busy_poll_hits: r(&self.busy_poll_hits),
            busy_poll_ns: r(&self.busy_poll_ns),
            fixed_files_registered: r(&self.fixed_files_registered),
            zc_sends: r(&self.zc_sends),
            zc_bytes: r(&self.zc_bytes),
            zc_notifs: r(&self.zc_notifs),
            zc_copied: r(&self.zc_copied),
            zc_refused: r(&self.zc_refused),
            bundled_recvs: r(&self.bundled_recvs),
            bundled_bufs: r(&self.bundled_bufs),
            fixed_buf_sends: r(&self.fixed_buf_sends),
            fixed_buf_exhausted: r(&self.fixed_buf_exhausted),
            fixed_buf_outgrown: r(&self.fixed_buf_outgrown),
            fixed_bufs_lent: r(&self.fixed_bufs_lent),
            napi_sockets: r(&self.napi_sockets),
            napi_none: r(&self.napi_none),
        }
    }
}

/// The shared part of one shard.
pub struct ShardLink {
    pub stats: ShardStats,
    /// Written to wake the shard (stop, hand-off without MSG_RING).
    pub eventfd: OwnedFd,
    /// The shard's io_uring fd for IORING_OP_MSG_RING, -1 when it has none.
    pub ring_fd: AtomicI32,
    /// The CPU the shard is pinned to, if any.
    pub cpu: Option<usize>,
    /// The I/O modes the shard's loop runs with, set once its loop is built (unset: epoll or
    /// not started, which report as off).
    pub io_modes: std::sync::OnceLock<IoModes>,
    /// The kernel refused receive bundles at run time (EINVAL), after the loop had started
    /// with them: the loop went on without them, and [`ShardLink::modes`] says so.
    pub recv_bundles_refused: std::sync::atomic::AtomicBool,
}

impl ShardLink {
    /// The I/O modes the shard's loop runs with now (off while unset).
    pub fn modes(&self) -> IoModes {
        let mut m = self.io_modes.get().copied().unwrap_or_default();
        if self
            .recv_bundles_refused
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            m.recv_bundles = false;
        }
        m
    }
}

/// The I/O modes one shard's loop actually runs with (statistics file, metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoModes {
    pub sqpoll: crate::config::Sqpoll,
    /// The poller's CPU (bound with IORING_SETUP_SQ_AFF); `None`: any CPU.
    pub sqpoll_cpu: Option<u32>,
    pub busy_poll_us: u32,
    /// Slots of the ring's file table (`fixed_files`); 0: off.
    pub fixed_files: u32,
    /// Zero-copy sends from this many bytes on; 0: off.
    pub zero_copy_send_min: u32,
    /// Multishot receives in bundles.
    pub recv_bundles: bool,
    /// Registered send buffers in the ring (0: off) …
    pub fixed_send_buffers: u32,
    /// … of this many bytes each …
    pub fixed_send_buffer_bytes: u32,
    /// … named by plain sends too (else by zero-copy sends only).
    pub fixed_send_plain: bool,
    /// NAPI busy polling registered on the ring, µs (0: off).
    pub napi_busy_poll_us: u32,
    pub napi_prefer_busy_poll: bool,
}

/// All shards of one process.
pub struct Fleet {
    pub shards: Vec<ShardLink>,
    pub stop: AtomicBool,
    pub policy: Distribution,
    /// The producer ends of the shards' queues of dialed connections (Reverse Connect), for
    /// the dialer to take once ([`Fleet::take_dial_queues`]).
    dial_queues: std::sync::Mutex<Option<Vec<Producer<Dialed>>>>,
}

/// Slots of each shard's queue of dialed connections (Reverse Connect): the dialer makes one
/// connection at a time and the shard takes them on its next wake-up.
const DIAL_QUEUE: usize = 16;

/// An accepted socket on its way to another shard.
pub struct Handoff {
    pub fd: OwnedFd,
    pub peer: SocketAddr,
    /// A live connection (not a fresh accept): the handler's state and the input received
    /// but not yet handed to it.
    pub moved: Option<Box<Moved>>,
}

/// What moves with a live connection besides its socket.
pub struct Moved {
    /// The handler's per-connection state (`Handler::detach` → `Handler::attach`).
    pub state: MovedConn,
    /// Bytes received on the old shard after the move began, in order.
    pub input: Vec<u8>,
}

/// The protocol state of a live connection on its way to another shard: core's connection
/// (channel, keys, the session it activates) and, for a connection dialed to a Reverse
/// Connect client, its tie to the dialer.
pub struct MovedConn {
    pub conn: ServerConnection,
    pub reverse: Option<crate::reverse::ReverseLease>,
}

fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl Fleet {
    /// A fleet of `n` shards with their wiring (one entry per shard, to move into its thread).
    pub fn new(
        cpus: &[Option<usize>],
        policy: Distribution,
        handoff_queue: usize,
        move_queue: usize,
    ) -> io::Result<(Arc<Fleet>, Vec<ShardWiring>)> {
        let n = cpus.len().max(1);
        let mut shards = Vec::with_capacity(n);
        for i in 0..n {
            shards.push(ShardLink {
                stats: ShardStats::default(),
                eventfd: eventfd()?,
                ring_fd: AtomicI32::new(-1),
                cpu: cpus.get(i).copied().flatten(),
                io_modes: std::sync::OnceLock::new(),
                recv_bundles_refused: std::sync::atomic::AtomicBool::new(false),
            });
        }
        let mut dial_out = Vec::with_capacity(n);
        let mut dial_in = Vec::with_capacity(n);
        for _ in 0..n {
            let (p, c) = spsc::channel(DIAL_QUEUE);
            dial_out.push(p);
            dial_in.push(c);
        }
        let fleet = Arc::new(Fleet {
            shards,
            stop: AtomicBool::new(false),
            policy,
            dial_queues: std::sync::Mutex::new(Some(dial_out)),
        });
        let central = policy != Distribution::Reuseport && n > 1;
        let mut outboxes: Vec<Option<Producer<Handoff>>> = Vec::new();
        let mut inboxes: Vec<Option<Consumer<Handoff>>> = Vec::new();
        for i in 0..n {
            if central && i != 0 {
                let (p, c) = spsc::channel(handoff_queue);
                outboxes.push(Some(p));
                inboxes.push(Some(c));
            } else {
                outboxes.push(None);
                inboxes.push(None);
            }
        }
        // The move mesh: move_out[from][to] feeds move_in[to][from].
        let (move_out, move_in) = mesh::<Handoff>(n, move_queue);
        let (mail_out, mail_in) = mesh::<ShardMessage>(n, move_queue);
        let mut wirings = Vec::with_capacity(n);
        let mut outboxes = Some(outboxes);
        let meshes = move_out
            .into_iter()
            .zip(move_in)
            .zip(mail_out.into_iter().zip(mail_in));
        for (((i, inbox), ((move_out, move_in), (mail_out, mail_in))), dialed) in
            inboxes.into_iter().enumerate().zip(meshes).zip(dial_in)
        {
            wirings.push(ShardWiring {
                index: i,
                fleet: fleet.clone(),
                inbox,
                outboxes: if i == 0 && central {
                    outboxes.take().unwrap_or_default()
                } else {
                    Vec::new()
                },
                move_reserved: vec![0; move_out.len()],
                move_out,
                move_in,
                mail_out,
                mail_in,
                dialed,
                rr_next: 0,
            });
        }
        Ok((fleet, wirings))
    }

    /// One shard on its own (a load client's loop, tests).
    pub fn standalone() -> io::Result<ShardWiring> {
        let (_fleet, mut w) = Fleet::new(&[None], Distribution::Reuseport, 1, 1)?;
        w.pop().ok_or_else(|| io::Error::other("no shard"))
    }

    /// Wakes shard `i` through its eventfd.
    pub fn wake(&self, i: usize) {
        if let Some(s) = self.shards.get(i) {
            let one: u64 = 1;
            // SAFETY: writes 8 bytes from a valid u64 to our eventfd. EAGAIN
            // (counter saturated) still leaves it readable, so the result is ignored.
            unsafe {
                libc::write(
                    s.eventfd.as_raw_fd(),
                    &one as *const u64 as *const libc::c_void,
                    8,
                )
            };
        }
    }

    /// Asks every shard to shut down gracefully.
    pub fn stop_all(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for i in 0..self.shards.len() {
            self.wake(i);
        }
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The queues into every shard for connections the Reverse Connect dialer made (one per
    /// shard, in shard order); `None` after the first call.
    pub fn take_dial_queues(&self) -> Option<Vec<Producer<Dialed>>> {
        self.dial_queues.lock().ok()?.take()
    }

    pub fn snapshot(&self) -> Vec<StatsSnapshot> {
        self.shards.iter().map(|s| s.stats.snapshot()).collect()
    }
}

/// One bounded SPSC queue per ordered pair of `n` shards: `out[from][to]` (`None` for
/// `from == to`) feeds one of `in[to]`.
#[allow(clippy::type_complexity)]
fn mesh<T>(n: usize, capacity: usize) -> (Vec<Vec<Option<Producer<T>>>>, Vec<Vec<Consumer<T>>>) {
    let mut outs: Vec<Vec<Option<Producer<T>>>> = (0..n).map(|_| Vec::with_capacity(n)).collect();
    let mut ins: Vec<Vec<Consumer<T>>> = (0..n).map(|_| Vec::new()).collect();
    for (from, o) in outs.iter_mut().enumerate() {
        for (to, i) in ins.iter_mut().enumerate() {
            if from == to {
                o.push(None);
            } else {
                let (p, c) = spsc::channel(capacity);
                o.push(Some(p));
                i.push(c);
            }
        }
    }
    (outs, ins)
}

/// Wakes one shard's loop from any thread (through its eventfd).
#[derive(Clone)]
pub struct Waker {
    fleet: Arc<Fleet>,
    index: usize,
}

impl Waker {
    pub fn new(fleet: Arc<Fleet>, index: usize) -> Waker {
        Waker { fleet, index }
    }

    pub fn wake(&self) {
        self.fleet.wake(self.index);
    }
}

/// One shard's end of the fleet.
pub struct ShardWiring {
    pub index: usize,
    pub fleet: Arc<Fleet>,
    /// Sockets handed to this shard by the acceptor.
    pub inbox: Option<Consumer<Handoff>>,
    /// The acceptor's queues to the other shards (index = shard; `None` for itself).
    pub outboxes: Vec<Option<Producer<Handoff>>>,
    /// Queues for live connections to every other shard (index = shard; `None` for itself).
    move_out: Vec<Option<Producer<Handoff>>>,
    /// Slots of each `move_out` queue promised to connections still draining their output.
    move_reserved: Vec<usize>,
    /// Queues of live connections from every other shard.
    move_in: Vec<Consumer<Handoff>>,
    /// Queues for messages between the shards' protocol states (cross-shard
    /// TransferSubscriptions), to every other shard / from every other shard.
    mail_out: Vec<Option<Producer<ShardMessage>>>,
    mail_in: Vec<Consumer<ShardMessage>>,
    /// Connections the Reverse Connect dialer made for this shard.
    dialed: Consumer<Dialed>,
    rr_next: usize,
}

impl ShardWiring {
    pub fn stats(&self) -> &ShardStats {
        &self.fleet.shards[self.index].stats
    }

    /// Is this shard the one that accepts for everybody?
    pub fn is_acceptor(&self) -> bool {
        !self.outboxes.is_empty()
    }

    /// The shard that should take the next connection.
    pub fn route(&mut self) -> usize {
        let n = self.fleet.shards.len();
        if self.outboxes.is_empty() || n <= 1 {
            return self.index;
        }
        match self.fleet.policy {
            Distribution::Reuseport => self.index,
            Distribution::RoundRobin => {
                let t = self.rr_next % n;
                self.rr_next = (self.rr_next + 1) % n;
                t
            }
            Distribution::LeastConnections => {
                let mut best = self.index;
                let mut best_load = u64::MAX;
                for (i, s) in self.fleet.shards.iter().enumerate() {
                    let queued = self
                        .outboxes
                        .get(i)
                        .and_then(|o| o.as_ref())
                        .map_or(0, |p| p.len() as u64);
                    let load = s.stats.open.load(Ordering::Relaxed) + queued;
                    if load < best_load {
                        best_load = load;
                        best = i;
                    }
                }
                best
            }
        }
    }

    /// Queues `h` for shard `target`; gives it back when that queue is full.
    pub fn hand_to(&mut self, target: usize, h: Handoff) -> Result<(), Handoff> {
        match self.outboxes.get_mut(target).and_then(|o| o.as_mut()) {
            Some(p) => p.push(h),
            None => Err(h),
        }
    }

    /// Promises a slot of the move queue to `target` (false: no such shard, or the queue
    /// and the slots already promised fill it). The consumer only ever frees slots, so a
    /// promised slot is there when [`ShardWiring::move_to`] runs.
    pub fn reserve_move(&mut self, target: usize) -> bool {
        let Some(Some(p)) = self.move_out.get(target) else {
            return false;
        };
        let cap = p.capacity();
        if p.len() + self.move_reserved[target] >= cap {
            return false;
        }
        self.move_reserved[target] += 1;
        true
    }

    /// Gives back a slot promised by [`ShardWiring::reserve_move`] (the connection closed).
    pub fn release_move(&mut self, target: usize) {
        if let Some(r) = self.move_reserved.get_mut(target) {
            *r = r.saturating_sub(1);
        }
    }

    /// Sends a live connection to `target` in the slot promised to it.
    pub fn move_to(&mut self, target: usize, h: Handoff) -> Result<(), Handoff> {
        self.release_move(target);
        match self.move_out.get_mut(target).and_then(|o| o.as_mut()) {
            Some(p) => p.push(h),
            None => Err(h),
        }
    }

    /// Queues a message for shard `target`; gives it back when that queue is full.
    pub fn mail_to(&mut self, target: usize, body: ShardMessage) -> Result<(), ShardMessage> {
        match self.mail_out.get_mut(target).and_then(|o| o.as_mut()) {
            Some(p) => p.push(body),
            None => Err(body),
        }
    }

    /// Is there a queue to `target` (another shard of the fleet)?
    pub fn has_mail_route(&self, target: usize) -> bool {
        matches!(self.mail_out.get(target), Some(Some(_)))
    }

    /// The next message from another shard.
    pub fn pop_mail(&mut self) -> Option<ShardMessage> {
        self.mail_in.iter_mut().find_map(|c| c.pop())
    }

    /// A connection the Reverse Connect dialer made, waiting for this shard.
    pub fn pop_dialed(&mut self) -> Option<Dialed> {
        self.dialed.pop()
    }

    /// The next socket handed to this shard: from the acceptor, or a live connection from
    /// another shard.
    pub fn pop_incoming(&mut self) -> Option<Handoff> {
        if let Some(h) = self.inbox.as_mut().and_then(|i| i.pop()) {
            return Some(h);
        }
        self.move_in.iter_mut().find_map(|c| c.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_slot_sizes_are_what_the_docs_say() {
        // docs/Configuration.md (`runtime.move_queue`) quotes these.
        assert_eq!(std::mem::size_of::<Handoff>(), 48);
        // The mail's payloads are boxed to keep its slots this small (see `ShardMessage`).
        assert_eq!(std::mem::size_of::<ShardMessage>(), 16);
    }

    #[test]
    fn move_slots_are_reserved_and_released() {
        let (_fleet, mut w) = Fleet::new(&[None, None], Distribution::Reuseport, 1, 2).unwrap();
        let mut w1 = w.pop().unwrap();
        let mut w0 = w.pop().unwrap();
        assert!(!w0.reserve_move(0), "no queue to itself");
        assert!(!w0.reserve_move(5), "no such shard");
        assert!(w0.reserve_move(1));
        assert!(w0.reserve_move(1));
        assert!(!w0.reserve_move(1), "capacity 2 promised");
        w0.release_move(1);
        assert!(w0.reserve_move(1));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let h = Handoff {
            fd: OwnedFd::from(a),
            peer: "127.0.0.1:1".parse().unwrap(),
            moved: None,
        };
        assert!(w0.move_to(1, h).is_ok());
        assert!(w1.pop_incoming().is_some());
        let request = uaring_core::server::service_state::TransferRequest {
            from: 0,
            ticket: 7,
            index: 0,
            sub_id: 3,
            owner: String::new(),
            max_items: 10,
        };
        let msg = ShardMessage::TransferRequest(Box::new(request));
        assert!(w0.mail_to(1, msg).is_ok());
        assert!(matches!(
            w1.pop_mail(),
            Some(ShardMessage::TransferRequest(r)) if r.ticket == 7 && r.sub_id == 3
        ));
        assert!(w1.pop_mail().is_none());
    }

    /// What the statistics file and the metrics report: the modes the loop started with, and
    /// receive bundles off once the kernel refused them at run time.
    #[test]
    fn modes_report_bundles_off_after_a_refusal() {
        let (fleet, _w) = Fleet::new(&[None], Distribution::Reuseport, 1, 1).unwrap();
        let link = &fleet.shards[0];
        assert_eq!(link.modes(), IoModes::default(), "unset: everything off");
        let started = IoModes {
            recv_bundles: true,
            busy_poll_us: 50,
            ..IoModes::default()
        };
        link.io_modes.set(started).unwrap();
        assert_eq!(link.modes(), started);
        link.recv_bundles_refused
            .store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(
            link.modes(),
            IoModes {
                recv_bundles: false,
                ..started
            }
        );
    }
}
