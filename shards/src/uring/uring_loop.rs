//! The io_uring event loop of one shard.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use io_uring::{cqueue, opcode, squeue, types, IoUring};

use super::sendbuf::{SendBufs, RECVSEND_FIXED_BUF};
use super::{setup_ring_with, BufRing, Features, NapiSetup, RingOptions, SetupError, SqpollSetup};
use crate::config::Sqpoll;
use crate::conn::Phase;
use crate::fleet::{IoModes, ShardStats, ShardWiring};
use crate::handler::{ConnId, Handler, Origin};
use crate::loop_core::{LoopConfig, LoopCore, STOP_HARD_EXTRA_NS};
use crate::net;

/// io_uring_enter's flag for reaping completions (linux/io_uring.h).
const IORING_ENTER_GETEVENTS: u32 = 1;

// user_data: kind (8 bits) | index (24 bits) | generation (32 bits).
const K_ACCEPT: u64 = 1;
const K_RECV: u64 = 2;
const K_SEND: u64 = 3;
const K_CANCEL: u64 = 4;
const K_EVENTFD: u64 = 5;
const K_TIMEOUT: u64 = 6;
const K_MSG_SENT: u64 = 7;
const K_MSG_HANDOFF: u64 = 8;
const K_LISTENER_CANCEL: u64 = 9;
const K_HUP_POLL: u64 = 10;
/// Completion of the cancel of a send that outlived its drain deadline (nothing to do).
const K_SEND_CANCEL: u64 = 11;
/// Completion of the cancel of a connection's peer-closed poll (it is moving to another shard).
const K_HUP_CANCEL: u64 = 12;
/// Completion of the IORING_OP_CLOSE that empties a slot of the file table (index = slot).
const K_FIXED_CLOSE: u64 = 13;

/// IORING_SEND_ZC_REPORT_USAGE: the notification says whether the kernel copied after all.
const SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// IORING_NOTIF_USAGE_ZC_COPIED, in the notification's result.
const NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// An io_uring operation on a connection's socket, named by its slot in the ring's file table
/// when it has one (`fixed_files`), else by its file descriptor.
macro_rules! on_socket {
    ($slot:expr, $raw:expr, |$f:ident| $e:expr) => {
        match $slot {
            Some(s) => {
                let $f = types::Fixed(s);
                $e
            }
            None => {
                let $f = types::Fd($raw);
                $e
            }
        }
    };
}

/// What the io_uring loop keeps per connection beside the shared table (indexed by
/// `ConnId::index`, valid for `generation`).
#[derive(Clone, Copy, Debug, Default)]
struct ConnIo {
    generation: u32,
    /// The connection's slot in the ring's file table (`fixed_files`).
    slot: Option<u32>,
    /// The send in flight is a zero-copy send whose result is in (held here until its
    /// notification arrives: until then the kernel may still read the batch).
    zc_result: Option<i32>,
    /// The send in flight is a zero-copy send.
    zc_inflight: bool,
    /// The locked-memory limit refused the last zero-copy send: the batch goes out with an
    /// ordinary send.
    plain_next: bool,
    /// The registered send buffer lent as the connection's `output.out`, by index …
    out_buf: Option<u16>,
    /// … and as its `output.sending` (checked to be still the registered memory each time it
    /// becomes the batch on the wire).
    sending_buf: Option<u16>,
    /// The batch on the wire outgrew its registered buffer (counted then, not again as a
    /// send without one).
    outgrown: bool,
    /// NAPI busy polling: the socket's NAPI id was looked at (its first receive here).
    napi_checked: bool,
}

/// The loop's own state of `id` in `io` (created, or reset for a new generation, on first use).
fn io_entry(io: &mut Vec<ConnIo>, id: ConnId) -> &mut ConnIo {
    let i = id.index as usize;
    if io.len() <= i {
        io.resize(i + 1, ConnIo::default());
    }
    let e = &mut io[i];
    if e.generation != id.generation {
        debug_assert!(
            e.slot.is_none() && e.out_buf.is_none() && e.sending_buf.is_none(),
            "a slot or send buffer left behind by a finished connection"
        );
        *e = ConnIo {
            generation: id.generation,
            ..ConnIo::default()
        };
    }
    e
}

/// SO_INCOMING_NAPI_ID: the NAPI id of the receive queue the socket's last packet came
/// through (0: none, as on loopback).
const SO_INCOMING_NAPI_ID: libc::c_int = 56;

/// The NAPI id of `fd`'s receive queue (0: none; loopback sockets and devices without NAPI).
fn napi_id(fd: RawFd) -> u32 {
    let mut id: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `id`.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_INCOMING_NAPI_ID,
            (&mut id as *mut u32).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        id
    } else {
        0
    }
}

/// The overall timeout of a min-timeout wait when the loop has no deadline of its own: the
/// kernel ends a min-timeout wait that has no overall timeout at the min-timeout even when
/// nothing arrived, which would wake an idle shard every `batch_wait_us`; with one, it goes
/// on waiting for the first completion (and returns, harmlessly, once an hour).
const IDLE_WAIT_NS: u64 = 3_600_000_000_000;

/// A relative io_uring timeout of `ns` nanoseconds.
fn timespec(ns: u64) -> types::Timespec {
    types::Timespec::new()
        .sec(ns / 1_000_000_000)
        .nsec((ns % 1_000_000_000) as u32)
}

/// How long the second wait of batched waiting without IORING_FEAT_MIN_TIMEOUT lasts, ns: the
/// rest of the bound `batch_ns` counted from `started`, the start of the wait (when the first
/// completion came after the bound, none: it is handled at once, as the min-timeout wait does),
/// and never past `deadline`. Counted from the first completion instead, every request of a
/// quiet shard would wait the whole bound on kernels before 6.12, and only there.
fn batch_rest(started: u64, batch_ns: u64, deadline: u64, now: u64) -> u64 {
    started
        .saturating_add(batch_ns)
        .min(deadline)
        .saturating_sub(now)
}

/// The shortest receive window of batched waiting ([`Receivers`]), ns: long enough to hold the
/// round trip of a busy client on a LAN (its next request comes one round trip after its
/// answer), however short `batch_wait_us`.
const RECV_WINDOW_MIN_NS: u64 = 1_000_000;

/// The connections that received recently: what a batched wait expects to complete soon
/// ([`UringLoop::batch_want`]). Time is cut into windows; each connection stamps the window of
/// its last receive, and the count is of the distinct connections that received in the
/// current window or the one before — from one to two windows back. O(1) per receive and per
/// wait, no scan of the connections. A connection counted that sends nothing more makes a wait
/// run to its bound (the documented cost, at most `batch_wait_us`); one not counted only makes
/// the batch smaller.
struct Receivers {
    window_ns: u64,
    /// The window of the last receive noted (mono ns / `window_ns`, plus one: a stamp of 0 is
    /// "never").
    window: u64,
    /// Distinct connections that received in `window`.
    current: u32,
    /// Distinct connections that received in `window` or the one before it.
    recent: u32,
}

impl Receivers {
    fn new(window_ns: u64) -> Receivers {
        Receivers {
            window_ns: window_ns.max(1),
            window: 0,
            current: 0,
            recent: 0,
        }
    }

    fn window_of(&self, now: u64) -> u64 {
        (now / self.window_ns + 1).max(self.window)
    }

    /// A connection whose last receive was in window `stamp` received at `now`.
    fn note(&mut self, stamp: &mut u64, now: u64) {
        let w = self.window_of(now);
        if w != self.window {
            self.recent = if w == self.window + 1 {
                self.current
            } else {
                0
            };
            self.current = 0;
            self.window = w;
        }
        if *stamp == w {
            return;
        }
        if stamp.saturating_add(1) != w {
            // Not in the window before either: new to `recent`.
            self.recent = self.recent.saturating_add(1);
        }
        *stamp = w;
        self.current = self.current.saturating_add(1);
    }

    /// The distinct connections that received in the window of `now` or the one before.
    fn count(&self, now: u64) -> u32 {
        let w = self.window_of(now);
        if w == self.window {
            self.recent
        } else if w == self.window + 1 {
            self.current
        } else {
            0
        }
    }
}

fn ud(kind: u64, index: u32, generation: u32) -> u64 {
    (kind << 56) | (((index as u64) & 0xFF_FFFF) << 32) | generation as u64
}

fn ud_split(u: u64) -> (u64, u32, u32) {
    (u >> 56, ((u >> 32) & 0xFF_FFFF) as u32, u as u32)
}

fn conn_ud(kind: u64, id: ConnId) -> u64 {
    ud(kind, id.index, id.generation)
}

/// The provided-buffer group id of every shard's ring (one group per ring).
const BGID: u16 = 0;

/// How the shard receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvMode {
    /// Multishot recv, buffers from the provided buffer ring.
    Multi,
    /// Multishot recv in bundles (IORING_RECVSEND_BUNDLE, 6.10): one completion for every
    /// buffer of the ring one receive filled.
    MultiBundle,
    /// Single-shot recv with buffer selection from the ring (5.19 without multishot recv).
    SingleSelect,
    /// Single-shot recv into a per-connection buffer (no buffer ring).
    SingleOwn,
}

struct Listener {
    fd: Option<OwnedFd>,
    armed: bool,
    multishot: bool,
    /// Single-shot accept writes the peer address here.
    addr: Box<(libc::sockaddr_storage, libc::socklen_t)>,
    /// Accept errors such as EMFILE: re-arm after this instant.
    backoff_until: u64,
}

/// One shard's io_uring loop, generic over the protocol handler.
pub struct UringLoop<H: Handler> {
    core: LoopCore<H>,
    // Field order matters for drop: the buffer ring is unmapped before the ring closes,
    // which is fine because `run` unregisters it first.
    bufring: Option<BufRing>,
    ring: IoUring,
    features: Features,
    recv_mode: RecvMode,
    listeners: Vec<Listener>,
    eventfd_buf: Box<[u8; 8]>,
    eventfd_armed: bool,
    timeout_ts: Box<types::Timespec>,
    timeout_armed_at: Option<u64>,
    msg_inflight: usize,
    /// Sends submitted and not yet completed (batched waiting waits for these and more).
    sends_inflight: u32,
    /// The connections that received recently (batched waiting waits for these too).
    receivers: Receivers,
    cqes: Vec<(u64, i32, u32)>,
    dirty: Vec<ConnId>,
    added: Vec<ConnId>,
    /// The buffers of the receive being delivered (more than one for a bundle), reused.
    bundle_bids: Vec<u16>,
    aborted: bool,
    /// Per-connection io_uring state (fixed-file slot, zero-copy result).
    io: Vec<ConnIo>,
    /// Free slots of the file table (`fixed_files`; empty when off). A slot comes back when
    /// the close that empties it completes.
    slots_free: Vec<u32>,
    /// Open connections waiting for a slot (all were being closed): reconciled when one frees.
    slot_waiters: Vec<ConnId>,
    /// Batches of closed connections whose zero-copy send's notification has not come (the
    /// kernel may still read them), by the send's user_data, with the registered send
    /// buffer's index when the batch is one; at most `max_connections`.
    zc_orphans: Vec<(u64, Vec<u8>, Option<u16>)>,
    /// Zero-copy sends from this many bytes on (0: off).
    zc_min: u32,
    /// The registered send buffers (`fixed_send_buffers`; `None`: off).
    sendbufs: Option<SendBufs>,
}

/// Fills the ring's sparse buffer table with the registered send buffers `cfg` asks for
/// (`None` when it asks for none). Refused when the kernel will not register them, or when
/// it names them in zero-copy sends only and `cfg` has none.
pub(crate) fn register_send_bufs(
    ring: &mut IoUring,
    features: &mut Features,
    cfg: &LoopConfig,
) -> Result<Option<SendBufs>, SetupError> {
    if cfg.fixed_send_buffers == 0 {
        return Ok(None);
    }
    if features.fixed_send_buffers < cfg.fixed_send_buffers {
        return Err(SetupError::FixedSendBuffers(
            io::Error::other("the ring has no buffer table that large"),
            cfg.fixed_send_buffers,
            cfg.fixed_send_buffer_bytes,
        ));
    }
    let bufs = SendBufs::register(ring, cfg.fixed_send_buffers, cfg.fixed_send_buffer_bytes)
        .map_err(|e| {
            SetupError::FixedSendBuffers(e, cfg.fixed_send_buffers, cfg.fixed_send_buffer_bytes)
        })?;
    features.fixed_send_plain = bufs.plain;
    if !bufs.plain && (cfg.zero_copy_send_min == 0 || !features.op_send_zc) {
        return Err(SetupError::FixedSendNeedsZc);
    }
    Ok(Some(bufs))
}

impl<H: Handler> UringLoop<H> {
    /// Sets up the ring (on the calling thread, which must be the one that runs
    /// the loop), the provided buffer ring and the wake-up read.
    pub fn new(
        handler: H,
        wiring: ShardWiring,
        cfg: LoopConfig,
    ) -> Result<UringLoop<H>, SetupError> {
        let opts = ring_options(&cfg, &wiring)?;
        let (ring, features) = setup_ring_with(cfg.ring_entries, &opts)?;
        Self::try_with_ring(ring, features, handler, wiring, cfg)
    }

    /// Builds the loop around a ring made by [`setup_ring`](super::setup_ring) on this thread.
    /// Registered send buffers the ring cannot take are left off, with a warning (the
    /// server's shards use [`UringLoop::new`], which refuses instead).
    pub fn with_ring(
        mut ring: IoUring,
        mut features: Features,
        handler: H,
        wiring: ShardWiring,
        cfg: LoopConfig,
    ) -> UringLoop<H> {
        let sendbufs = register_send_bufs(&mut ring, &mut features, &cfg).unwrap_or_else(|e| {
            tracing::warn!(shard = wiring.index, "{e}: registered send buffers off");
            None
        });
        Self::assemble(ring, features, sendbufs, handler, wiring, cfg)
    }

    /// [`UringLoop::with_ring`] that refuses registered send buffers the ring cannot take.
    pub(crate) fn try_with_ring(
        mut ring: IoUring,
        mut features: Features,
        handler: H,
        wiring: ShardWiring,
        cfg: LoopConfig,
    ) -> Result<UringLoop<H>, SetupError> {
        let sendbufs = register_send_bufs(&mut ring, &mut features, &cfg)?;
        Ok(Self::assemble(
            ring, features, sendbufs, handler, wiring, cfg,
        ))
    }

    fn assemble(
        ring: IoUring,
        mut features: Features,
        sendbufs: Option<SendBufs>,
        handler: H,
        wiring: ShardWiring,
        cfg: LoopConfig,
    ) -> UringLoop<H> {
        let mut bufring = None;
        if cfg.multishot {
            match u16::try_from(cfg.recv_buffers)
                .map_err(|_| io::Error::other("too many buffers"))
                .and_then(|n| BufRing::new(&ring, n, cfg.recv_buffer_bytes as usize, BGID))
            {
                Ok(b) => {
                    features.pbuf_ring = true;
                    bufring = Some(b);
                }
                Err(e) => tracing::debug!("provided buffer ring unavailable: {e}"),
            }
        }
        features.multishot = cfg.multishot && bufring.is_some();
        if features.sqpoll_attached {
            // The shared poller runs where shard 0 bound it.
            features.sqpoll_cpu = cfg.sqpoll_cpu.map(|c| c as u32);
        }
        // Without it, batched waiting takes the path of kernels before 6.12 (`wait`).
        features.min_timeout &= cfg.min_timeout;
        let recv_mode = if features.multishot && cfg.recv_bundles && features.recv_bundle {
            RecvMode::MultiBundle
        } else if features.multishot {
            if cfg.recv_bundles {
                // Only an embedder's own ring (`with_ring`) can get here: `new` refuses instead.
                tracing::warn!(
                    shard = wiring.index,
                    "runtime.recv_bundles asked for, but the ring given to the loop has no bundles: off"
                );
            }
            RecvMode::Multi
        } else {
            RecvMode::SingleOwn
        };
        let receivers =
            Receivers::new((u64::from(cfg.batch_wait_us) * 1000).max(RECV_WINDOW_MIN_NS));
        if cfg.fixed_files && features.fixed_files == 0 {
            // Only an embedder's own ring (`with_ring`) can get here: `new` refuses instead.
            tracing::warn!(
                shard = wiring.index,
                "runtime.fixed_files asked for, but the ring given to the loop has no file table: off"
            );
        }
        let zc_min = if features.op_send_zc {
            cfg.zero_copy_send_min
        } else {
            if cfg.zero_copy_send_min > 0 {
                tracing::warn!(
                    shard = wiring.index,
                    "runtime.zero_copy_send_min asked for, but the ring given to the loop lacks SEND_ZC: off"
                );
            }
            0
        };
        let slots_free: Vec<u32> = (0..features.fixed_files).rev().collect();
        let fd = ring.as_raw_fd();
        let link = &wiring.fleet.shards[wiring.index];
        link.ring_fd.store(fd, std::sync::atomic::Ordering::Release);
        let _ = link.io_modes.set(IoModes {
            sqpoll: if !features.sqpoll {
                Sqpoll::Off
            } else if cfg.sqpoll == Sqpoll::Off {
                // A ring made by the embedder with SQPOLL: say it is one poller per ring.
                Sqpoll::PerShard
            } else {
                cfg.sqpoll
            },
            sqpoll_cpu: features.sqpoll_cpu,
            busy_poll_us: cfg.busy_poll_us,
            fixed_files: features.fixed_files,
            zero_copy_send_min: zc_min,
            fixed_send_buffers: sendbufs.as_ref().map_or(0, |_| cfg.fixed_send_buffers),
            fixed_send_buffer_bytes: sendbufs.as_ref().map_or(0, |b| b.bytes() as u32),
            fixed_send_plain: sendbufs.as_ref().is_some_and(|b| b.plain),
            napi_busy_poll_us: features.napi_busy_poll_us,
            napi_prefer_busy_poll: features.napi_busy_poll_us > 0 && cfg.napi_prefer_busy_poll,
            recv_bundles: recv_mode == RecvMode::MultiBundle,
        });
        UringLoop {
            core: LoopCore::new(handler, wiring, cfg),
            bufring,
            ring,
            features,
            recv_mode,
            listeners: Vec::new(),
            eventfd_buf: Box::new([0; 8]),
            eventfd_armed: false,
            timeout_ts: Box::new(types::Timespec::new()),
            timeout_armed_at: None,
            msg_inflight: 0,
            sends_inflight: 0,
            receivers,
            cqes: Vec::with_capacity(256),
            dirty: Vec::new(),
            added: Vec::new(),
            bundle_bids: Vec::new(),
            aborted: false,
            io: Vec::new(),
            slots_free,
            slot_waiters: Vec::new(),
            zc_orphans: Vec::new(),
            zc_min,
            sendbufs,
        }
    }

    /// The loop's own state of `id` (created, or reset for a new generation, on first use).
    fn io_mut(&mut self, id: ConnId) -> &mut ConnIo {
        io_entry(&mut self.io, id)
    }

    /// The slot of `id` in the file table, if it has one.
    fn slot_of(&self, id: ConnId) -> Option<u32> {
        self.io
            .get(id.index as usize)
            .filter(|e| e.generation == id.generation)
            .and_then(|e| e.slot)
    }

    /// Fixed files: gives an open connection a slot of the file table (its socket is put there
    /// with IORING_REGISTER_FILES_UPDATE; the process keeps its fd for the paths that need
    /// one). Returns false when every slot is still being emptied: the connection waits.
    fn ensure_slot(&mut self, id: ConnId) -> bool {
        if self.features.fixed_files == 0 || self.slot_of(id).is_some() {
            return true;
        }
        let Some(raw) = self.core.table.get_mut(id).map(|c| c.fd.as_raw_fd()) else {
            return true;
        };
        let Some(slot) = self.slots_free.pop() else {
            if !self.slot_waiters.contains(&id) {
                self.slot_waiters.push(id);
            }
            return false;
        };
        match self.ring.submitter().register_files_update(slot, &[raw]) {
            Ok(_) => {
                self.io_mut(id).slot = Some(slot);
                ShardStats::add(&self.core.wiring.stats().fixed_files_registered, 1);
            }
            Err(e) => {
                self.slots_free.push(slot);
                tracing::warn!(
                    shard = self.core.wiring.index,
                    "cannot put a connection into the file table ({e}): closing it"
                );
                self.core.begin_close(id, true);
            }
        }
        true
    }

    /// Empties the slot of `id` (an IORING_OP_CLOSE of the slot; the process's fd is closed or
    /// handed on by the caller). The slot is reused once the close completes.
    fn release_slot(&mut self, id: ConnId) {
        let Some(slot) = self.slot_of(id) else {
            return;
        };
        self.io_mut(id).slot = None;
        let e =
            opcode::Close::new(types::Fixed(slot))
                .build()
                .user_data(ud(K_FIXED_CLOSE, slot, 0));
        self.push(e);
    }

    /// Forgets `id` (no operation in flight for it): empties its slot, then the shared part.
    fn finalize(&mut self, id: ConnId) {
        self.release_slot(id);
        self.release_bufs(id);
        self.core.finalize(id);
    }

    /// Registered send buffers: lends an open connection the two it holds while it is here
    /// (one for `output.out`, one for `output.sending`), as far as the region has them. The
    /// batch on the wire is only replaced when nothing of it is in flight or unsent; what
    /// `out` holds is copied into its buffer (a handshake's few bytes).
    fn ensure_bufs(&mut self, id: ConnId) {
        let Some(bufs) = self.sendbufs.as_mut() else {
            return;
        };
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let io = io_entry(&mut self.io, id);
        if io.out_buf.is_some() && io.sending_buf.is_some() {
            return;
        }
        let mut changed = false;
        if io.sending_buf.is_none() && !c.send_inflight && c.output.sent >= c.output.sending.len() {
            if let Some((k, v)) = bufs.take() {
                c.output.sending = v;
                c.output.sent = 0;
                io.sending_buf = Some(k);
                changed = true;
            }
        }
        if io.out_buf.is_none() && c.output.out.len() <= bufs.bytes() {
            if let Some((k, mut v)) = bufs.take() {
                v.extend_from_slice(&c.output.out);
                c.output.out = v;
                io.out_buf = Some(k);
                changed = true;
            }
        }
        if changed {
            self.core
                .wiring
                .stats()
                .fixed_bufs_lent
                .store(bufs.lent() as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Takes back the registered send buffers of `id` (nothing of its in flight): it is
    /// finalized or leaves for another shard. A buffer that grew is replaced (counted).
    fn release_bufs(&mut self, id: ConnId) {
        let Some(bufs) = self.sendbufs.as_mut() else {
            return;
        };
        let Some(io) = self
            .io
            .get_mut(id.index as usize)
            .filter(|e| e.generation == id.generation)
        else {
            return;
        };
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let stats = self.core.wiring.stats();
        let mut give = |k: u16, v: Vec<u8>| {
            if !bufs.give_back(&self.ring, k, v) {
                ShardStats::add(&stats.fixed_buf_outgrown, 1);
            }
        };
        if let Some(k) = io.sending_buf.take() {
            c.output.sent = 0;
            give(k, std::mem::take(&mut c.output.sending));
        }
        if let Some(k) = io.out_buf.take() {
            give(k, std::mem::take(&mut c.output.out));
        }
        stats
            .fixed_bufs_lent
            .store(bufs.lent() as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// `Output::take_batch` of `id`, with its registered send buffers: when `out` becomes the
    /// batch on the wire, their indexes swap with them, and a batch that outgrew its buffer
    /// (the allocator moved it: it is no longer the registered memory) loses the index, which
    /// gets new memory (counted `fixed_buf_outgrown`).
    fn take_batch(&mut self, id: ConnId) -> bool {
        let Some(c) = self.core.table.get_mut(id) else {
            return false;
        };
        let swaps = c.output.sent >= c.output.sending.len() && !c.output.out.is_empty();
        let want = c.output.take_batch();
        if !swaps {
            return want;
        }
        let Some(bufs) = self.sendbufs.as_mut() else {
            return want;
        };
        let Some(io) = self
            .io
            .get_mut(id.index as usize)
            .filter(|e| e.generation == id.generation)
        else {
            return want;
        };
        std::mem::swap(&mut io.out_buf, &mut io.sending_buf);
        if let Some(k) = io.sending_buf {
            if !bufs.intact(k, &c.output.sending) {
                io.sending_buf = None;
                io.outgrown = true;
                bufs.replace(&self.ring, k);
                ShardStats::add(&self.core.wiring.stats().fixed_buf_outgrown, 1);
            }
        }
        want
    }

    /// Finalizes `id` if no operation of its is in flight (and, with `shut_only`, its socket is
    /// shut down).
    fn finalize_if_idle(&mut self, id: ConnId, shut_only: bool) {
        if self
            .core
            .table
            .get_mut(id)
            .is_some_and(|c| !c.ops_inflight() && (!shut_only || c.phase == Phase::Shut))
        {
            self.finalize(id);
        }
    }

    /// A closed connection whose only operation in flight is the notification of a zero-copy
    /// send: its batch is kept until the notification comes, and the connection goes now
    /// (a peer that never acknowledges would otherwise keep it open for as long as TCP
    /// retransmits). Bounded: at most `max_connections` such batches wait.
    fn orphan_zc(&mut self, id: ConnId) {
        let waiting = self
            .io
            .get(id.index as usize)
            .is_some_and(|e| e.generation == id.generation && e.zc_result.is_some());
        if !waiting || self.zc_orphans.len() >= self.core.cfg.max_connections {
            return;
        }
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        if c.phase != Phase::Shut
            || c.recv_armed
            || c.hup_poll_armed
            || c.cancel_inflight
            || c.hup_cancel_inflight
        {
            return;
        }
        let batch = std::mem::take(&mut c.output.sending);
        c.output.discard();
        c.send_inflight = false;
        self.sends_inflight = self.sends_inflight.saturating_sub(1);
        let io = self.io_mut(id);
        io.zc_result = None;
        let buf = io.sending_buf.take();
        self.zc_orphans.push((conn_ud(K_SEND, id), batch, buf));
    }

    /// The features in use (for the start-up log line).
    pub fn features(&self) -> Features {
        self.features
    }

    pub fn handler(&self) -> &H {
        &self.core.handler
    }

    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.core.handler
    }

    /// Accepts connections on `listener` in this loop.
    pub fn add_listener(&mut self, listener: TcpListener) {
        // SAFETY: zeroed sockaddr_storage is valid.
        let storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        self.listeners.push(Listener {
            fd: Some(OwnedFd::from(listener)),
            armed: false,
            multishot: self.features.multishot,
            addr: Box::new((storage, 0)),
            backoff_until: 0,
        });
    }

    /// Connects to `addr` (blocking connect, then the socket joins the loop).
    pub fn connect(&mut self, addr: SocketAddr) -> io::Result<ConnId> {
        let stream = TcpStream::connect(addr)?;
        self.adopt(stream)
    }

    /// Adds an already connected socket.
    pub fn adopt(&mut self, stream: TcpStream) -> io::Result<ConnId> {
        let peer = stream.peer_addr()?;
        // SAFETY: into_raw_fd transfers ownership.
        let fd = unsafe { OwnedFd::from_raw_fd(stream.into_raw_fd()) };
        self.core.refresh_now();
        let id = self
            .core
            .add_conn(fd, peer, Origin::Connected)
            .ok_or_else(|| io::Error::other("connection table full or loop stopping"))?;
        self.core.table.mark_dirty(id);
        Ok(id)
    }

    /// Submits what is queued without waiting and, on a DEFER_TASKRUN ring, runs the
    /// deferred task work: the kernel posts such a ring's completions (a socket's data,
    /// a send done) only in an enter that carries GETEVENTS, and `submit()` adds it only
    /// when IORING_SQ_TASKRUN is up, which needs TASKRUN_FLAG (busy polling only). Without
    /// it a loop that never blocks (a timer always due: a shard sampling more items than
    /// its interval allows) never saw another completion and stopped reading its sockets.
    /// With GETEVENTS and no completion wanted the enter does not block.
    fn submit_nowait(&mut self) -> io::Result<usize> {
        if !self.features.defer_taskrun {
            return self.ring.submit();
        }
        let to_submit = self.ring.submission().len() as u32;
        // SAFETY: io_uring_enter on our own ring with no argument and no signal mask; the
        // entries it submits are the ones `push` queued, whose buffers live in the loop.
        unsafe {
            self.ring.submitter().enter::<libc::sigset_t>(
                to_submit,
                0,
                IORING_ENTER_GETEVENTS,
                None,
            )
        }
    }

    fn push(&mut self, e: squeue::Entry) {
        loop {
            // SAFETY: every entry's buffers live in the loop (connection output,
            // per-connection buffers, boxed fields) until its completion arrives.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                return;
            }
            // SQ full: hand what we have to the kernel and retry. With SQPOLL the poller
            // takes the entries: wake it if it sleeps, then wait until it made room.
            self.note_wakeup();
            if self.features.sqpoll {
                match self.ring.submit().and_then(|_| {
                    if self.ring.submission().is_full() {
                        self.ring.submitter().squeue_wait()
                    } else {
                        Ok(0)
                    }
                }) {
                    Ok(_) => {}
                    Err(err)
                        if err.raw_os_error() == Some(libc::EBUSY)
                            || err.raw_os_error() == Some(libc::EINTR) =>
                    {
                        self.reap()
                    }
                    Err(err) => tracing::error!("io_uring submit (SQPOLL) failed: {err}"),
                }
                continue;
            }
            if let Err(err) = self.ring.submit() {
                if err.raw_os_error() != Some(libc::EBUSY)
                    && err.raw_os_error() != Some(libc::EINTR)
                {
                    tracing::error!("io_uring submit failed: {err}");
                }
                // EBUSY: the CQ is backed up; reap completions into our buffer first.
                self.reap();
            }
        }
    }

    /// SQPOLL: counts a wake-up when entries are queued and the poller sleeps (the next
    /// submit enters the kernel with IORING_ENTER_SQ_WAKEUP). Call right before submitting.
    fn note_wakeup(&mut self) {
        if !self.features.sqpoll {
            return;
        }
        let mut sq = self.ring.submission();
        sq.sync();
        // need_wakeup issues the SeqCst fence the flag needs.
        if !sq.is_empty() && sq.need_wakeup() {
            drop(sq);
            ShardStats::add(&self.core.wiring.stats().sqpoll_wakeups, 1);
        }
    }

    /// Spin-before-sleep (`busy_poll_us`): with nothing to handle, peek the completion queue
    /// until a completion is there or `busy_poll_us` (never past `deadline`) has passed.
    /// Queued entries are submitted first (without SQPOLL, nothing would complete
    /// otherwise); deferred task work flagged by IORING_SQ_TASKRUN is run by a non-blocking
    /// enter. Counts the spins, those that found a completion, and the time spun.
    fn busy_poll(&mut self, deadline: u64) {
        let us = self.core.cfg.busy_poll_us;
        if us == 0 || !self.cqes.is_empty() {
            return;
        }
        let start = crate::clock::mono_ns();
        let until = start.saturating_add(u64::from(us) * 1000).min(deadline);
        if until <= start {
            return;
        }
        self.note_wakeup();
        if let Err(e) = self.ring.submit() {
            if !matches!(
                e.raw_os_error(),
                Some(libc::EBUSY) | Some(libc::EINTR) | Some(libc::EAGAIN)
            ) {
                tracing::error!("io_uring submit failed: {e}");
                return;
            }
        }
        let ready = |ring: &mut IoUring| {
            let mut cq = ring.completion();
            cq.sync();
            !cq.is_empty()
        };
        if ready(&mut self.ring) {
            // Something completed already: nothing to spin for.
            return;
        }
        let mut hit = false;
        let mut now = start;
        while now < until {
            if self.ring.submission().taskrun() {
                // Deferred completions wait for an enter with GETEVENTS (submit adds it
                // when the flag is up); it does not block.
                let _ = self.ring.submit();
            } else {
                std::hint::spin_loop();
            }
            if ready(&mut self.ring) {
                hit = true;
                break;
            }
            now = crate::clock::mono_ns();
        }
        let stats = self.core.wiring.stats();
        ShardStats::add(&stats.busy_polls, 1);
        if hit {
            ShardStats::add(&stats.busy_poll_hits, 1);
        }
        ShardStats::add(
            &stats.busy_poll_ns,
            crate::clock::mono_ns().saturating_sub(start),
        );
    }

    /// Moves completions from the CQ into `self.cqes` (processed later).
    fn reap(&mut self) {
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            self.cqes.push((cqe.user_data(), cqe.result(), cqe.flags()));
        }
    }

    fn arm_static(&mut self) {
        let now = self.core.now.mono_ns;
        if !self.eventfd_armed {
            let fd = self.core.wiring.fleet.shards[self.core.wiring.index]
                .eventfd
                .as_raw_fd();
            let e = opcode::Read::new(types::Fd(fd), self.eventfd_buf.as_mut_ptr(), 8)
                .build()
                .user_data(ud(K_EVENTFD, 0, 0));
            self.push(e);
            self.eventfd_armed = true;
        }
        for i in 0..self.listeners.len() {
            let l = &mut self.listeners[i];
            if self.core.stopping {
                if !l.armed {
                    l.fd = None;
                }
                continue;
            }
            if l.armed || l.backoff_until > now || self.core.table.is_full() {
                continue;
            }
            let Some(fd) = l.fd.as_ref().map(|f| f.as_raw_fd()) else {
                continue;
            };
            let e = if l.multishot {
                opcode::AcceptMulti::new(types::Fd(fd))
                    .flags(libc::SOCK_CLOEXEC)
                    .build()
            } else {
                l.addr.1 = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
                opcode::Accept::new(
                    types::Fd(fd),
                    &mut l.addr.0 as *mut _ as *mut libc::sockaddr,
                    &mut l.addr.1,
                )
                .flags(libc::SOCK_CLOEXEC)
                .build()
            };
            l.armed = true;
            self.push(e.user_data(ud(K_ACCEPT, i as u32, 0)));
        }
    }

    /// Stops accepting: cancels the accept operations.
    fn stop_listeners(&mut self) {
        for i in 0..self.listeners.len() {
            if self.listeners[i].armed {
                let e = opcode::AsyncCancel::new(ud(K_ACCEPT, i as u32, 0))
                    .build()
                    .user_data(ud(K_LISTENER_CANCEL, i as u32, 0));
                self.push(e);
            } else {
                self.listeners[i].fd = None;
            }
        }
    }

    fn send_wakes(&mut self) {
        let targets = std::mem::take(&mut self.core.wake);
        for &t in &targets {
            let ring_fd = self.core.wiring.fleet.shards[t]
                .ring_fd
                .load(std::sync::atomic::Ordering::Acquire);
            if self.features.op_msg_ring && ring_fd >= 0 {
                let e =
                    opcode::MsgRingData::new(types::Fd(ring_fd), 0, ud(K_MSG_HANDOFF, 0, 0), None)
                        .build()
                        .user_data(ud(K_MSG_SENT, t as u32, 0));
                self.msg_inflight += 1;
                self.push(e);
            } else {
                self.core.wiring.fleet.wake(t);
            }
        }
        self.core.wake = targets;
        self.core.wake.clear();
    }

    fn arm_recv(&mut self, id: ConnId) {
        let mode = self.recv_mode;
        let bgid = self.bufring.as_ref().map_or(0, |b| b.bgid());
        let buf_bytes = self.core.cfg.recv_buffer_bytes as usize;
        let slot = self.slot_of(id);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let raw = c.fd.as_raw_fd();
        let e = match mode {
            RecvMode::Multi => on_socket!(slot, raw, |fd| opcode::RecvMulti::new(fd, bgid).build()),
            RecvMode::MultiBundle => {
                on_socket!(slot, raw, |fd| opcode::RecvMultiBundle::new(fd, bgid)
                    .build())
            }
            RecvMode::SingleSelect => on_socket!(slot, raw, |fd| opcode::Recv::new(
                fd,
                std::ptr::null_mut(),
                buf_bytes as u32
            )
            .buf_group(bgid)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)),
            RecvMode::SingleOwn => {
                let buf = c
                    .recv_buf
                    .get_or_insert_with(|| vec![0u8; buf_bytes].into_boxed_slice());
                on_socket!(slot, raw, |fd| opcode::Recv::new(
                    fd,
                    buf.as_mut_ptr(),
                    buf.len() as u32
                )
                .build())
            }
        };
        c.recv_armed = true;
        self.push(e.user_data(conn_ud(K_RECV, id)));
    }

    fn cancel_recv(&mut self, id: ConnId) {
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        c.cancel_inflight = true;
        let e = opcode::AsyncCancel::new(conn_ud(K_RECV, id))
            .build()
            .user_data(conn_ud(K_CANCEL, id));
        self.push(e);
    }

    /// While reading is stopped, a poll tells us when the peer goes away (no
    /// receive is armed to see the end of the stream).
    fn arm_hup_poll(&mut self, id: ConnId) {
        let slot = self.slot_of(id);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let mask = (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) as u32;
        let e = on_socket!(slot, c.fd.as_raw_fd(), |fd| opcode::PollAdd::new(fd, mask)
            .build()
            .user_data(conn_ud(K_HUP_POLL, id)));
        c.hup_poll_armed = true;
        self.push(e);
    }

    /// Sends the unsent rest of the connection's batch: with IORING_OP_SEND_ZC when it is at
    /// least `zero_copy_send_min` bytes. A zero-copy send stays in flight until its
    /// notification (the batch is not touched until the kernel lets go of it), so the next
    /// batch of the connection waits for it; nothing else is held.
    fn start_send(&mut self, id: ConnId) {
        let slot = self.slot_of(id);
        let zc_min = self.zc_min;
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let unsent = c.output.unsent();
        let len = unsent.len().min(1 << 30) as u32;
        let raw = c.fd.as_raw_fd();
        let io = self
            .io
            .get(id.index as usize)
            .filter(|e| e.generation == id.generation);
        let plain_next = io.is_some_and(|e| e.plain_next);
        let outgrown = io.is_some_and(|e| e.outgrown);
        let zc = zc_min > 0 && len >= zc_min && !plain_next;
        // The batch's registered buffer (still the registered memory: checked when it became
        // the batch), where this kind of send may name one.
        let fixed_kind = self.sendbufs.as_ref().is_some_and(|b| zc || b.plain);
        let fixed = io.and_then(|e| e.sending_buf).filter(|_| fixed_kind);
        let e = if zc {
            on_socket!(slot, raw, |fd| opcode::SendZc::new(
                fd,
                unsent.as_ptr(),
                len
            )
            .buf_index(fixed)
            .flags(libc::MSG_NOSIGNAL)
            .zc_flags(SEND_ZC_REPORT_USAGE)
            .build())
        } else if let Some(k) = fixed {
            // buf_group shares the SQE's field with buf_index.
            on_socket!(slot, raw, |fd| opcode::Send::new(fd, unsent.as_ptr(), len)
                .ioprio(RECVSEND_FIXED_BUF)
                .buf_group(k)
                .flags(libc::MSG_NOSIGNAL)
                .build())
        } else {
            on_socket!(slot, raw, |fd| opcode::Send::new(fd, unsent.as_ptr(), len)
                .flags(libc::MSG_NOSIGNAL)
                .build())
        };
        c.send_inflight = true;
        self.sends_inflight += 1;
        let stats = self.core.wiring.stats();
        if zc {
            ShardStats::add(&stats.zc_sends, 1);
        }
        if fixed.is_some() {
            ShardStats::add(&stats.fixed_buf_sends, 1);
        } else if fixed_kind && !outgrown {
            // The connection holds no registered buffer for this batch: the region had none
            // left when it asked.
            ShardStats::add(&stats.fixed_buf_exhausted, 1);
        }
        let io = self.io_mut(id);
        io.zc_result = None;
        io.zc_inflight = zc;
        io.plain_next = false;
        io.outgrown = false;
        self.push(e.user_data(conn_ud(K_SEND, id)));
    }

    /// The result of the send of `id` (for a zero-copy send, once its notification is in).
    fn send_done(&mut self, id: ConnId, res: i32) {
        self.sends_inflight = self.sends_inflight.saturating_sub(1);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        c.send_inflight = false;
        let zc = std::mem::take(&mut self.io_mut(id).zc_inflight);
        if zc && res == -libc::ENOMEM {
            // Without CAP_IPC_LOCK the kernel charges a zero-copy send's pages to
            // RLIMIT_MEMLOCK until its notification; the limit refused this one. Nothing
            // was sent: the batch goes out again with an ordinary send (counted).
            ShardStats::add(&self.core.wiring.stats().zc_refused, 1);
            self.io_mut(id).plain_next = true;
            self.core.table.mark_dirty(id);
            return;
        }
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        if res >= 0 {
            ShardStats::add(&self.core.wiring.stats().bytes_out, res as u64);
            if c.phase == Phase::Shut {
                c.output.discard();
            } else {
                c.output.advance(res as usize);
            }
            if res > 0 {
                // Progress: a stalled connection's clock starts again.
                c.stall_deadline = u64::MAX;
            }
        } else {
            c.output.discard();
            if c.phase == Phase::Open {
                self.core.begin_close(id, true);
            }
        }
        self.core.table.mark_dirty(id);
    }

    /// A zero-copy send's notification: the kernel no longer reads the batch.
    fn on_zc_notif(&mut self, user_data: u64, id: ConnId, res: i32) {
        let stats = self.core.wiring.stats();
        ShardStats::add(&stats.zc_notifs, 1);
        if res as u32 & NOTIF_USAGE_ZC_COPIED != 0 {
            ShardStats::add(&stats.zc_copied, 1);
        }
        if let Some(i) = self.zc_orphans.iter().position(|(u, _, _)| *u == user_data) {
            // Its connection is gone: the batch may be freed now (a registered send buffer
            // goes home).
            let (_, batch, buf) = self.zc_orphans.swap_remove(i);
            if let (Some(k), Some(bufs)) = (buf, self.sendbufs.as_mut()) {
                if !bufs.give_back(&self.ring, k, batch) {
                    ShardStats::add(&stats.fixed_buf_outgrown, 1);
                }
                stats
                    .fixed_bufs_lent
                    .store(bufs.lent() as u64, std::sync::atomic::Ordering::Relaxed);
            }
            return;
        }
        let held = self
            .io
            .get_mut(id.index as usize)
            .filter(|e| e.generation == id.generation)
            .and_then(|e| e.zc_result.take());
        debug_assert!(held.is_some(), "a notification without its send's result");
        self.send_done(id, held.unwrap_or(0));
    }

    /// Brings one connection's kernel operations in line with its state.
    fn reconcile(&mut self, id: ConnId) {
        // Accounting, the connection's and the shard's bounds, held-back input.
        let may_read = self.core.resume(id);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        if c.phase == Phase::Open && c.moving_to.is_none() && !self.ensure_slot(id) {
            // Every slot is being emptied: reconciled again once one is free.
            return;
        }
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let expired = c.phase != Phase::Open && c.drain_deadline <= self.core.now.mono_ns;
        match c.phase {
            Phase::Open if c.moving_to.is_some() => {
                // Leaving for another shard: no receive, no poll; send what is pending;
                // once the kernel holds nothing for it, the connection goes.
                let (armed, cancelling, hup_poll, hup_cancelling) = (
                    c.recv_armed,
                    c.cancel_inflight,
                    c.hup_poll_armed,
                    c.hup_cancel_inflight,
                );
                let want_send = !c.send_inflight && self.take_batch(id);
                if armed && !cancelling {
                    self.cancel_recv(id);
                }
                if hup_poll && !hup_cancelling {
                    if let Some(c) = self.core.table.get_mut(id) {
                        c.hup_cancel_inflight = true;
                    }
                    let e = opcode::AsyncCancel::new(conn_ud(K_HUP_POLL, id))
                        .build()
                        .user_data(conn_ud(K_HUP_CANCEL, id));
                    self.push(e);
                }
                if want_send {
                    self.start_send(id);
                }
                let idle = self
                    .core
                    .table
                    .get_mut(id)
                    .is_some_and(|c| !c.ops_inflight() && !c.hup_cancel_inflight);
                if idle && self.core.move_ready(id) {
                    // The other shard gets the process's fd; this ring's slot is emptied and
                    // its send buffers go home.
                    self.release_slot(id);
                    self.release_bufs(id);
                    self.core.complete_move(id);
                }
            }
            Phase::Open => {
                let paused = !may_read;
                let (armed, cancelling, hup_poll) =
                    (c.recv_armed, c.cancel_inflight, c.hup_poll_armed);
                let inflight = c.send_inflight;
                self.ensure_bufs(id);
                let want_send = !inflight && self.take_batch(id);
                if !paused && !armed && !cancelling {
                    self.arm_recv(id);
                } else if paused && armed && !cancelling {
                    self.cancel_recv(id);
                }
                if paused && !hup_poll {
                    self.arm_hup_poll(id);
                }
                if want_send {
                    self.start_send(id);
                }
            }
            Phase::Draining => {
                if c.recv_armed && !c.cancel_inflight {
                    self.cancel_recv(id);
                }
                let Some(c) = self.core.table.get_mut(id) else {
                    return;
                };
                if expired {
                    if c.output.pending() > 0 {
                        crate::loop_core::reset_on_close(&c.fd);
                    }
                    c.output.out.clear();
                    net::shutdown(&c.fd);
                    c.phase = Phase::Shut;
                    if c.send_inflight {
                        // A peer that reads nothing keeps a send waiting for buffer
                        // space forever (shutdown does not end it): cancel it so the
                        // socket can be closed.
                        let e = opcode::AsyncCancel::new(conn_ud(K_SEND, id))
                            .build()
                            .user_data(conn_ud(K_SEND_CANCEL, id));
                        self.push(e);
                    }
                } else if !c.send_inflight {
                    if self.take_batch(id) {
                        self.start_send(id);
                    } else if let Some(c) = self.core.table.get_mut(id) {
                        net::shutdown(&c.fd);
                        c.phase = Phase::Shut;
                    }
                }
                self.orphan_zc(id);
                self.finalize_if_idle(id, true);
            }
            Phase::Shut => {
                self.orphan_zc(id);
                self.finalize_if_idle(id, false);
            }
        }
    }

    fn reconcile_dirty(&mut self) {
        // Reconciling can dirty other connections only through new
        // completions, which are handled next iteration; one pass suffices.
        let mut ids = std::mem::take(&mut self.dirty);
        self.core.table.take_dirty(&mut ids);
        for &id in &ids {
            self.reconcile(id);
        }
        self.dirty = ids;
    }

    fn handle(&mut self, user_data: u64, res: i32, flags: u32) {
        let (kind, index, generation) = ud_split(user_data);
        let id = ConnId { index, generation };
        tracing::trace!(
            shard = self.core.wiring.index,
            kind,
            index,
            generation,
            res,
            flags,
            "cqe"
        );
        match kind {
            K_RECV => self.on_recv(id, res, flags),
            K_SEND if cqueue::notif(flags) => self.on_zc_notif(user_data, id, res),
            K_SEND if cqueue::more(flags) => {
                // A zero-copy send's result; its notification follows. Until then the
                // kernel may read the batch: the result waits, the send stays in flight.
                if res > 0 {
                    ShardStats::add(&self.core.wiring.stats().zc_bytes, res as u64);
                }
                if self.core.table.get_mut(id).is_some() {
                    self.io_mut(id).zc_result = Some(res);
                    // A closed connection may now go, leaving the batch behind.
                    self.core.table.mark_dirty(id);
                }
            }
            K_SEND => self.send_done(id, res),
            K_FIXED_CLOSE => {
                if res < 0 {
                    tracing::debug!(
                        shard = self.core.wiring.index,
                        slot = index,
                        "closing a slot of the file table: {}",
                        io::Error::from_raw_os_error(-res)
                    );
                }
                self.slots_free.push(index);
                for id in std::mem::take(&mut self.slot_waiters) {
                    self.core.table.mark_dirty(id);
                }
            }
            K_HUP_POLL => {
                let Some(c) = self.core.table.get_mut(id) else {
                    return;
                };
                c.hup_poll_armed = false;
                let open = c.phase == Phase::Open;
                let moving = c.moving_to.is_some();
                // While reading, the receive sees the end of the stream after the
                // data before it; only a stopped connection is closed from here.
                if res > 0 && open && !self.core.reading_allowed(id) {
                    // The peer closed (or the socket failed) while we were not reading:
                    // what it sent will not be processed; send what is pending, then close.
                    self.core
                        .begin_close(id, res as u32 & libc::POLLERR as u32 != 0);
                }
                // An error (cancelled at teardown, or a kernel without poll) on an open
                // connection is not re-armed at once: that could spin. Its next reconcile
                // re-arms it. A closing or moving connection may now be finalized.
                if res > 0 || !open || moving {
                    self.core.table.mark_dirty(id);
                }
            }
            K_CANCEL => {
                if let Some(c) = self.core.table.get_mut(id) {
                    c.cancel_inflight = false;
                    self.core.table.mark_dirty(id);
                }
            }
            K_HUP_CANCEL => {
                if let Some(c) = self.core.table.get_mut(id) {
                    c.hup_cancel_inflight = false;
                    self.core.table.mark_dirty(id);
                }
            }
            K_ACCEPT => self.on_accept(index as usize, res, flags),
            K_EVENTFD => {
                self.eventfd_armed = false;
                self.take_handoffs();
            }
            K_MSG_HANDOFF => self.take_handoffs(),
            K_MSG_SENT => {
                self.msg_inflight = self.msg_inflight.saturating_sub(1);
                if res < 0 {
                    // The target could not take the message (old kernel, ring gone): eventfd instead.
                    self.core.wiring.fleet.wake(index as usize);
                }
            }
            K_TIMEOUT => self.timeout_armed_at = None,
            K_LISTENER_CANCEL | K_SEND_CANCEL => {}
            _ => tracing::warn!(user_data, "completion with unknown user_data"),
        }
    }

    fn take_handoffs(&mut self) {
        let mut added = std::mem::take(&mut self.added);
        added.clear();
        self.core.drain_inbox(&mut added);
        for &id in &added {
            self.core.table.mark_dirty(id);
        }
        self.added = added;
    }

    fn on_accept(&mut self, li: usize, res: i32, flags: u32) {
        let Some(l) = self.listeners.get_mut(li) else {
            return;
        };
        if !cqueue::more(flags) {
            l.armed = false;
        }
        if res < 0 {
            match -res {
                libc::EINVAL if l.multishot => {
                    tracing::info!(
                        "multishot accept not supported by this kernel: using single-shot accept"
                    );
                    l.multishot = false;
                }
                libc::ECANCELED => {}
                libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM => {
                    tracing::warn!(
                        "accept failed: {} (backing off 10 ms)",
                        io::Error::from_raw_os_error(-res)
                    );
                    l.backoff_until = self.core.now.mono_ns + 10_000_000;
                }
                _ => tracing::debug!("accept failed: {}", io::Error::from_raw_os_error(-res)),
            }
            if self.core.stopping && !l.armed {
                l.fd = None;
            }
            return;
        }
        // SAFETY: a successful accept returns a new fd that we now own.
        let fd = unsafe { OwnedFd::from_raw_fd(res as RawFd) };
        let peer = if l.multishot {
            net::peer_addr(fd.as_raw_fd())
        } else {
            net::from_sockaddr(&l.addr.0, l.addr.1)
                .unwrap_or_else(|| net::peer_addr(fd.as_raw_fd()))
        };
        if self.core.stopping {
            return; // dropping fd closes it
        }
        if let Some(id) = self.core.on_accepted(fd, peer) {
            self.core.table.mark_dirty(id);
        }
    }

    fn on_recv(&mut self, id: ConnId, res: i32, flags: u32) {
        let bid = cqueue::buffer_select(flags);
        let more = cqueue::more(flags);
        let Some(c) = self.core.table.get_mut(id) else {
            if let (Some(bid), Some(b)) = (bid, self.bufring.as_mut()) {
                b.push(bid);
            }
            return;
        };
        if !more {
            c.recv_armed = false;
        }
        if res > 0 {
            self.receivers
                .note(&mut c.recv_window, self.core.now.mono_ns);
            if self.features.napi_busy_poll_us > 0 {
                let raw = c.fd.as_raw_fd();
                let io = io_entry(&mut self.io, id);
                if !io.napi_checked {
                    // Once per connection here: does its socket receive through a NIC queue
                    // that NAPI busy polling can poll?
                    io.napi_checked = true;
                    let stats = self.core.wiring.stats();
                    if napi_id(raw) != 0 {
                        ShardStats::add(&stats.napi_sockets, 1);
                    } else {
                        ShardStats::add(&stats.napi_none, 1);
                    }
                }
            }
            let n = res as usize;
            match (bid, self.bufring.as_mut()) {
                (Some(bid), Some(b)) => {
                    // Every buffer the receive filled, in the order the kernel took them: each
                    // full but the last. One, but for a bundle (`recv_bundles`).
                    let mut bids = std::mem::take(&mut self.bundle_bids);
                    b.bundle(bid, n, &mut bids);
                    if bids.len() > 1 {
                        let stats = self.core.wiring.stats();
                        ShardStats::add(&stats.bundled_recvs, 1);
                        ShardStats::add(&stats.bundled_bufs, bids.len() as u64);
                    }
                    let mut left = n;
                    for &x in &bids {
                        let len = left.min(b.buf_bytes());
                        self.core.deliver(id, b.get(x, len));
                        left -= len;
                    }
                    for &x in &bids {
                        b.push(x);
                    }
                    self.bundle_bids = bids;
                }
                _ => {
                    if let Some(buf) = c.recv_buf.take() {
                        self.core.deliver(id, &buf[..n.min(buf.len())]);
                        if let Some(c) = self.core.table.get_mut(id) {
                            c.recv_buf = Some(buf);
                        }
                    }
                }
            }
        } else if res == 0 {
            self.core.begin_close(id, false);
        } else {
            if let (Some(bid), Some(b)) = (bid, self.bufring.as_mut()) {
                b.push(bid);
            }
            match -res {
                // Out of provided buffers: they are recycled below; re-armed on reconcile.
                libc::ENOBUFS | libc::ECANCELED | libc::EINTR | libc::EAGAIN => {}
                libc::EINVAL if self.recv_mode == RecvMode::MultiBundle => {
                    tracing::info!(
                        "receive bundles refused by this kernel: multishot recv without them"
                    );
                    self.recv_mode = RecvMode::Multi;
                    self.core.wiring.fleet.shards[self.core.wiring.index]
                        .recv_bundles_refused
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                libc::EINVAL if self.recv_mode == RecvMode::Multi => {
                    tracing::info!("multishot recv not supported by this kernel: using single-shot recv with the buffer ring");
                    self.recv_mode = RecvMode::SingleSelect;
                    self.features.multishot = false;
                }
                e => {
                    tracing::debug!(
                        shard = self.core.wiring.index,
                        "recv failed: {}",
                        io::Error::from_raw_os_error(e)
                    );
                    self.core.begin_close(id, true);
                }
            }
        }
        self.core.table.mark_dirty(id);
    }

    /// How many completions a wait at `now` asks for: 1, or with batched waiting on
    /// (`batch_wait_us`), the sends in flight plus one per connection that received recently
    /// ([`Receivers`]: in the last one to two windows of `batch_wait_us`, at least 1 ms),
    /// at most `batch_completions` of those. Not one per open connection: most connections
    /// of a server are quiet most of the time (subscriptions between publishes, idle
    /// sessions), and a wait that counts them runs to its bound every time, so a lone
    /// request beside them waited the whole bound. A busy connection receives again within a
    /// round trip and is counted; a quiet one falls out within two windows of its last
    /// request.
    fn batch_want(&self, now: u64) -> u32 {
        if self.core.cfg.batch_wait_us == 0 || !self.features.ext_arg {
            return 1;
        }
        let conns = self
            .receivers
            .count(now)
            .min(self.core.cfg.batch_completions);
        self.sends_inflight
            .saturating_add(conns)
            .clamp(1, self.features.cq_entries.max(1))
    }

    /// Submits and waits for at least one completion or `deadline` (mono ns). With batched
    /// waiting it waits for [`UringLoop::batch_want`] completions until `batch_wait_us` after
    /// it started (IORING_FEAT_MIN_TIMEOUT on 6.12+; before that, a second wait for the rest
    /// of that time once the first completion is in), then for the first one. The batch bound never runs past `deadline`:
    /// the kernel arms the min-timeout before the overall timeout, so a min-timeout longer
    /// than the time left would sleep through the deadline. Returns the monotonic time it
    /// started waiting.
    fn wait(&mut self, deadline: u64) -> u64 {
        let has_cqes = {
            let mut cq = self.ring.completion();
            cq.sync();
            !cq.is_empty()
        };
        let now = crate::clock::mono_ns();
        let rel = deadline.saturating_sub(now);
        // The batch bound, cut to the time left before the deadline (0: no batching).
        let batch_us = u64::from(self.core.cfg.batch_wait_us).min(rel / 1000) as u32;
        let want = if batch_us == 0 {
            1
        } else {
            self.batch_want(now)
        };
        let ts = timespec(rel);
        let blocks = !(has_cqes || !self.cqes.is_empty() || deadline <= now);
        self.note_wakeup();
        if blocks && want > 1 {
            let stats = self.core.wiring.stats();
            ShardStats::add(&stats.batch_waits, 1);
            ShardStats::add(&stats.batch_wanted, u64::from(want));
        }
        let result = if !blocks {
            self.submit_nowait()
        } else if want > 1 && self.features.min_timeout {
            let args = types::SubmitArgs::new().min_wait_usec(batch_us);
            let idle = timespec(IDLE_WAIT_NS);
            let r = self.ring.submitter().submit_with_args(
                want as usize,
                &args.timespec(if deadline == u64::MAX { &idle } else { &ts }),
            );
            if let Err(e) = &r {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    tracing::info!("io_uring min-wait rejected by this kernel: batched waiting uses a second bounded wait");
                    self.features.min_timeout = false;
                }
            }
            r
        } else {
            let r = if deadline == u64::MAX {
                self.ring.submit_and_wait(1)
            } else if self.features.ext_arg {
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(1, &args)
            } else {
                if self.timeout_armed_at.is_none_or_later(deadline) {
                    *self.timeout_ts = ts;
                    let e = opcode::Timeout::new(&*self.timeout_ts as *const _)
                        .build()
                        .user_data(ud(K_TIMEOUT, 0, 0));
                    self.push(e);
                    self.timeout_armed_at = Some(deadline);
                }
                self.ring.submit_and_wait(1)
            };
            if want > 1 {
                // Batched waiting before 6.12: the first completion is in; the others get
                // what is left of the bound counted from the start of the wait, as the
                // min-timeout does (ETIME when they do not come, which is fine).
                let ready = {
                    let mut cq = self.ring.completion();
                    cq.sync();
                    cq.len()
                };
                let left = batch_rest(
                    now,
                    u64::from(batch_us) * 1000,
                    deadline,
                    crate::clock::mono_ns(),
                );
                if ready > 0 && ready < want as usize && left > 0 {
                    let bts = timespec(left);
                    let args = types::SubmitArgs::new().timespec(&bts);
                    let _ = self.ring.submitter().submit_with_args(want as usize, &args);
                }
            }
            r
        };
        match result {
            Ok(n) => ShardStats::add(&self.core.wiring.stats().submissions, n as u64),
            Err(e) => match e.raw_os_error() {
                Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY) | Some(libc::EAGAIN) => {}
                _ => {
                    tracing::error!("io_uring_enter failed: {e}");
                    // Avoid spinning on a persistent error.
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            },
        }
        now
    }

    /// Runs until the fleet is told to stop (or the handler says so) and every
    /// connection has been closed.
    pub fn run(&mut self) -> io::Result<()> {
        loop {
            self.core.refresh_now();
            let fleet_stop = self.core.wiring.fleet.stopping();
            if !self.core.stopping && (fleet_stop || !self.core.handler.keep_running(self.core.now))
            {
                self.core.begin_stop();
                self.stop_listeners();
            }
            self.core.fire_timers();
            if self.core.stopping
                && !self.aborted
                && self.core.now.mono_ns >= self.core.stop_deadline
            {
                self.aborted = true;
                self.core.abort_all();
            }
            self.arm_static();
            self.reconcile_dirty();
            if self.core.stopping {
                let listeners_done = self.listeners.iter().all(|l| !l.armed);
                if (self.core.table.len() == 0 && listeners_done)
                    || self.core.now.mono_ns
                        >= self.core.stop_deadline.saturating_add(STOP_HARD_EXTRA_NS)
                {
                    break;
                }
            }
            self.send_wakes();
            if let Some(b) = self.bufring.as_mut() {
                b.publish();
            }
            let deadline = self.core.next_wakeup();
            let deadline = if self
                .listeners
                .iter()
                .any(|l| !l.armed && l.fd.is_some() && l.backoff_until > 0)
            {
                deadline.min(
                    self.listeners
                        .iter()
                        .map(|l| l.backoff_until)
                        .filter(|&b| b > 0)
                        .min()
                        .unwrap_or(u64::MAX),
                )
            } else {
                deadline
            };
            self.busy_poll(deadline);
            let waited_from = self.wait(deadline);
            self.reap();
            self.core.refresh_now();
            let stats = self.core.wiring.stats();
            ShardStats::add(
                &stats.idle_ns,
                self.core.now.mono_ns.saturating_sub(waited_from),
            );
            ShardStats::add(&stats.completions, self.cqes.len() as u64);
            let mut cqes = std::mem::take(&mut self.cqes);
            for &(u, r, f) in &cqes {
                self.handle(u, r, f);
            }
            cqes.clear();
            self.cqes = cqes;
            ShardStats::add(&self.core.wiring.stats().loops, 1);
            self.core.handler.publish();
        }
        self.teardown();
        tracing::debug!(shard = self.core.wiring.index, "shard loop finished");
        Ok(())
    }

    /// Cancels what the kernel still holds and waits (bounded) for it, so no
    /// buffer is freed under an operation.
    fn teardown(&mut self) {
        self.core.wiring.fleet.shards[self.core.wiring.index]
            .ring_fd
            .store(-1, std::sync::atomic::Ordering::Release);
        for id in self.core.table.ids() {
            if let Some(c) = self.core.table.get_mut(id) {
                net::shutdown(&c.fd);
                c.phase = Phase::Shut;
            }
        }
        let cancel = |s: &mut Self, target: u64| {
            let e = opcode::AsyncCancel::new(target)
                .build()
                .user_data(ud(K_LISTENER_CANCEL, 0, 0));
            s.push(e);
        };
        if self.eventfd_armed {
            cancel(self, ud(K_EVENTFD, 0, 0));
        }
        if self.timeout_armed_at.is_some() {
            cancel(self, ud(K_TIMEOUT, 0, 0));
        }
        for i in 0..self.listeners.len() {
            if self.listeners[i].armed {
                cancel(self, ud(K_ACCEPT, i as u32, 0));
            }
        }
        let give_up = crate::clock::mono_ns() + 200_000_000;
        loop {
            let busy = self.eventfd_armed
                || self.timeout_armed_at.is_some()
                || self.msg_inflight > 0
                || self.listeners.iter().any(|l| l.armed)
                || self.core.table.len() > 0
                || !self.zc_orphans.is_empty();
            if !busy || crate::clock::mono_ns() >= give_up {
                break;
            }
            self.wait(crate::clock::mono_ns() + 10_000_000);
            self.reap();
            let cqes = std::mem::take(&mut self.cqes);
            for &(u, r, f) in &cqes {
                self.handle(u, r, f);
            }
            for id in self.core.table.ids() {
                self.finalize_if_idle(id, false);
            }
        }
        if self.eventfd_armed || self.timeout_armed_at.is_some() || self.core.table.len() > 0 {
            // The kernel still holds buffers: leak them rather than free them under it.
            tracing::warn!(
                shard = self.core.wiring.index,
                "operations still in flight at exit: leaking their buffers"
            );
            std::mem::forget(std::mem::replace(&mut self.eventfd_buf, Box::new([0; 8])));
            std::mem::forget(std::mem::replace(
                &mut self.timeout_ts,
                Box::new(types::Timespec::new()),
            ));
            if let Some(b) = self.bufring.take() {
                std::mem::forget(b);
            }
            for id in self.core.table.ids() {
                if let Some(c) = self.core.table.get_mut(id) {
                    std::mem::forget(std::mem::take(&mut c.output.sending));
                    std::mem::forget(c.recv_buf.take());
                }
            }
        } else if let Some(b) = self.bufring.take() {
            b.unregister(&self.ring);
        }
        if !self.zc_orphans.is_empty() {
            // Zero-copy batches the kernel has not let go of: leaked, never freed under it.
            std::mem::forget(std::mem::take(&mut self.zc_orphans));
        }
        for l in &mut self.listeners {
            if l.armed {
                std::mem::forget(std::mem::replace(
                    &mut l.addr,
                    Box::new(unsafe { std::mem::zeroed() }),
                ));
            }
            l.fd = None;
        }
    }
}

/// The ring setup a shard's loop configuration asks for. With `Sqpoll::Shared`, shard 0
/// starts the poller and every other shard attaches to shard 0's ring, which must exist.
pub(crate) fn ring_options(
    cfg: &LoopConfig,
    wiring: &ShardWiring,
) -> Result<RingOptions, SetupError> {
    let setup = SqpollSetup {
        idle_ms: cfg.sqpoll_idle_ms,
        cpu: cfg.sqpoll_cpu.map(|c| c as u32),
        attach_fd: None,
    };
    let sqpoll = match cfg.sqpoll {
        Sqpoll::Off => None,
        Sqpoll::PerShard => Some(setup),
        Sqpoll::Shared => {
            if wiring.index == 0 {
                Some(setup)
            } else {
                let fd = wiring.fleet.shards[0]
                    .ring_fd
                    .load(std::sync::atomic::Ordering::Acquire);
                if fd < 0 {
                    return Err(SetupError::Sqpoll(
                        io::Error::other(
                            "shard 0's ring is not set up (shared SQPOLL attaches to it)",
                        ),
                        setup,
                    ));
                }
                // The poller's CPU is shard 0's business; an attached ring only shares it.
                Some(SqpollSetup {
                    attach_fd: Some(fd),
                    cpu: None,
                    ..setup
                })
            }
        }
    };
    Ok(RingOptions {
        sqpoll,
        taskrun_flag: cfg.busy_poll_us > 0,
        fixed_files: if cfg.fixed_files {
            cfg.max_connections as u32
        } else {
            0
        },
        send_zc: cfg.zero_copy_send_min > 0,
        recv_bundle: cfg.recv_bundles,
        fixed_send_buffers: cfg.fixed_send_buffers,
        fixed_send_buffer_bytes: cfg.fixed_send_buffer_bytes,
        napi: (cfg.napi_busy_poll_us > 0).then_some(NapiSetup {
            busy_poll_us: cfg.napi_busy_poll_us,
            prefer_busy_poll: cfg.napi_prefer_busy_poll,
        }),
    })
}

trait OptionDeadline {
    fn is_none_or_later(&self, deadline: u64) -> bool;
}

impl OptionDeadline for Option<u64> {
    fn is_none_or_later(&self, deadline: u64) -> bool {
        match self {
            None => true,
            Some(armed) => *armed > deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{batch_rest, Receivers};

    #[test]
    fn receivers_count_distinct_connections_of_the_last_one_to_two_windows() {
        let mut r = Receivers::new(1_000);
        let (mut a, mut b, mut c) = (0u64, 0u64, 0u64);
        assert_eq!(r.count(5_000), 0, "nothing received yet");
        // Window 5: a twice (multishot receives) and b: two connections, not three receives.
        r.note(&mut a, 5_100);
        r.note(&mut a, 5_200);
        r.note(&mut b, 5_300);
        assert_eq!(r.count(5_400), 2);
        // Window 6: a again (already counted) and c (new): a, b, c received in windows 5–6.
        r.note(&mut a, 6_100);
        r.note(&mut c, 6_200);
        assert_eq!(r.count(6_300), 3);
        // Seen from window 7: only what received in window 6 (a, c); b has gone quiet.
        assert_eq!(r.count(7_000), 2);
        // From window 8 on: nobody received in the last two windows.
        assert_eq!(r.count(8_000), 0);
        assert_eq!(r.count(u64::MAX), 0);
        // A receive after a silence starts again from that one connection.
        r.note(&mut b, 9_500);
        assert_eq!(r.count(9_600), 1);
        // A receive in window 10 while window 9 was the last noted: b (window 9) is in both.
        r.note(&mut a, 10_100);
        assert_eq!(r.count(10_200), 2);
        r.note(&mut b, 10_300);
        assert_eq!(
            r.count(10_400),
            2,
            "b counted once though it received in both windows"
        );
        // A clock read earlier than the last receive (another source) counts as its window.
        assert_eq!(r.count(9_000), 2);
    }

    #[test]
    fn the_second_wait_ends_at_the_bound_counted_from_the_start_of_the_wait() {
        // Started at 1000, bound 500, deadline far: the first completion at 1200 leaves 300.
        assert_eq!(batch_rest(1_000, 500, u64::MAX, 1_200), 300);
        // The first completion came after the bound: no second wait.
        assert_eq!(batch_rest(1_000, 500, u64::MAX, 1_500), 0);
        assert_eq!(batch_rest(1_000, 500, u64::MAX, 9_000), 0);
        // A deadline before the bound ends it.
        assert_eq!(batch_rest(1_000, 500, 1_300, 1_200), 100);
        assert_eq!(batch_rest(1_000, 500, 1_100, 1_200), 0);
        // No overflow at the ends of the clock.
        assert_eq!(batch_rest(u64::MAX - 10, 500, u64::MAX, u64::MAX - 5), 5);
    }
}
