//! The harness's per-thread io_uring loop, used by the load client and by the
//! `echo-server`. One thread owns a ring and a set of connections; each
//! connection has one receive in flight at all times and at most one send,
//! and everything a protocol driver writes while handling one batch of
//! completions goes out in one send per connection.
//!
//! The protocol lives in a [`Driver`]: bytes in, bytes out, like core's
//! sans-IO connections. The loop is deliberately small so that it can be
//! swapped for uaring-shards' ring building blocks (provided buffers,
//! batched sends) once that crate exposes them; drivers would not change.

use std::io;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use hdrhistogram::Histogram;
use io_uring::{opcode, types, IoUring};

pub const PHASE_WARMUP: u8 = 0;
pub const PHASE_MEASURE: u8 = 1;
pub const PHASE_STOP: u8 = 2;

/// Monotonic nanoseconds (CLOCK_MONOTONIC).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// State shared by the orchestrating thread and the load threads.
#[derive(Default)]
pub struct Shared {
    pub phase: AtomicU8,
    /// Connections whose driver said it is ready (session activated …).
    pub ready: AtomicUsize,
    /// Connections that failed for good.
    pub failed: AtomicUsize,
    /// Operations completed in any phase (progress and stall detection).
    pub ops_total: AtomicU64,
}

/// Per-thread measurements.
pub struct ThreadStats {
    pub hist: Histogram<u64>,
    pub ops: u64,
    pub errors: u64,
    pub warm_ops: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    /// Scenario-specific counters (notifications delivered, expected, …).
    pub extra: std::collections::BTreeMap<&'static str, u64>,
    pub first_error: Option<String>,
}

pub fn new_histogram() -> Histogram<u64> {
    // 1 ns .. 100 s at 3 significant figures.
    Histogram::new_with_bounds(1, 100_000_000_000, 3).expect("histogram bounds")
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats {
            hist: new_histogram(),
            ops: 0,
            errors: 0,
            warm_ops: 0,
            bytes_out: 0,
            bytes_in: 0,
            extra: Default::default(),
            first_error: None,
        }
    }
}

impl ThreadStats {
    pub fn merge(&mut self, other: &ThreadStats) {
        let _ = self.hist.add(&other.hist);
        self.ops += other.ops;
        self.errors += other.errors;
        self.warm_ops += other.warm_ops;
        self.bytes_out += other.bytes_out;
        self.bytes_in += other.bytes_in;
        for (k, v) in &other.extra {
            *self.extra.entry(k).or_insert(0) += v;
        }
        if self.first_error.is_none() {
            self.first_error = other.first_error.clone();
        }
    }
}

/// What a driver sees of the loop while it handles bytes.
pub struct Ctx<'a> {
    pub phase: u8,
    pub stats: &'a mut ThreadStats,
    pub shared: &'a Shared,
}

impl Ctx<'_> {
    /// One operation completed after `latency_ns`.
    #[inline]
    pub fn complete(&mut self, latency_ns: u64) {
        self.shared.ops_total.fetch_add(1, Ordering::Relaxed);
        if self.phase == PHASE_MEASURE {
            self.stats.ops += 1;
            self.stats.hist.saturating_record(latency_ns.max(1));
        } else {
            self.stats.warm_ops += 1;
        }
    }

    /// One operation failed (counted in the measured window only).
    pub fn error(&mut self, what: impl FnOnce() -> String) {
        if self.phase == PHASE_MEASURE {
            self.stats.errors += 1;
        }
        if self.stats.first_error.is_none() {
            self.stats.first_error = Some(what());
        }
    }

    pub fn count(&mut self, key: &'static str, n: u64) {
        if self.phase == PHASE_MEASURE {
            *self.stats.extra.entry(key).or_insert(0) += n;
        }
    }

    pub fn ready(&mut self) {
        self.shared.ready.fetch_add(1, Ordering::SeqCst);
    }

    pub fn measuring(&self) -> bool {
        self.phase == PHASE_MEASURE
    }

    pub fn stopping(&self) -> bool {
        self.phase == PHASE_STOP
    }
}

/// A protocol over one connection, sans IO.
pub trait Driver {
    /// After the socket is connected (or accepted): write the first bytes.
    fn start(&mut self, now_ns: u64, out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String>;
    /// Bytes arrived; write whatever follows into `out`.
    fn on_recv(&mut self, now_ns: u64, data: &[u8], out: &mut Vec<u8>, ctx: &mut Ctx) -> Result<(), String>;
    /// Called once per loop iteration (after completions) for timers.
    fn poll(&mut self, _now_ns: u64, _out: &mut Vec<u8>, _ctx: &mut Ctx) -> Result<(), String> {
        Ok(())
    }
    /// The earliest time `poll` wants to run, if any.
    fn next_deadline(&self) -> Option<u64> {
        None
    }
}

const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;
const KIND_ACCEPT: u64 = 3;
const RECV_BYTES: usize = 256 * 1024;

struct Conn<D> {
    fd: RawFd,
    driver: D,
    rbuf: Box<[u8]>,
    out: Vec<u8>,
    sending: Vec<u8>,
    sent: usize,
    send_busy: bool,
    recv_busy: bool,
    closed: bool,
    dirty: bool,
}

impl<D> Drop for Conn<D> {
    fn drop(&mut self) {
        // SAFETY: the fd is owned by this connection.
        unsafe { libc::close(self.fd) };
    }
}

fn push(ring: &mut IoUring, sqe: &io_uring::squeue::Entry) -> io::Result<()> {
    loop {
        // SAFETY: every buffer referenced by an SQE is owned by a `Conn` whose
        // heap allocations outlive the operation (connections are only dropped
        // when the loop ends, after which the ring is dropped too).
        let r = unsafe { ring.submission().push(sqe) };
        if r.is_ok() {
            return Ok(());
        }
        ring.submit()?;
    }
}

fn queue_recv<D>(ring: &mut IoUring, idx: usize, c: &mut Conn<D>) -> io::Result<()> {
    let sqe = opcode::Recv::new(types::Fd(c.fd), c.rbuf.as_mut_ptr(), c.rbuf.len() as u32)
        .build()
        .user_data(((idx as u64) << 2) | KIND_RECV);
    c.recv_busy = true;
    push(ring, &sqe)
}

fn queue_send<D>(ring: &mut IoUring, idx: usize, c: &mut Conn<D>) -> io::Result<()> {
    let rest = &c.sending[c.sent..];
    let sqe = opcode::Send::new(types::Fd(c.fd), rest.as_ptr(), rest.len() as u32)
        .flags(libc::MSG_NOSIGNAL)
        .build()
        .user_data(((idx as u64) << 2) | KIND_SEND);
    c.send_busy = true;
    push(ring, &sqe)
}

fn flush<D>(ring: &mut IoUring, idx: usize, c: &mut Conn<D>, stats: &mut ThreadStats, phase: u8) -> io::Result<()> {
    if !c.send_busy && !c.out.is_empty() && !c.closed {
        std::mem::swap(&mut c.out, &mut c.sending);
        c.out.clear();
        c.sent = 0;
        if phase == PHASE_MEASURE {
            stats.bytes_out += c.sending.len() as u64;
        }
        queue_send(ring, idx, c)?;
    }
    Ok(())
}

/// Where connections come from.
pub enum Source<D> {
    /// Already connected sockets with their drivers (the load client).
    Connected(Vec<(RawFd, D)>),
    /// A listening socket and a driver factory (the echo server): runs
    /// until the process is told to stop.
    Listen(RawFd, Box<dyn FnMut() -> D>),
}

/// Runs the loop until `shared.phase` is `PHASE_STOP` (client) or forever
/// (server). Returns the number of connections that closed with an error.
pub fn run_loop<D: Driver>(source: Source<D>, shared: &Shared, stats: &mut ThreadStats) -> io::Result<()> {
    let (mut conns, listener) = match source {
        Source::Connected(v) => (v, None),
        Source::Listen(fd, f) => (Vec::new(), Some((fd, f))),
    };
    let n = conns.len().max(64);
    let entries = (n * 2 + 16).next_power_of_two().min(32768) as u32;
    let mut ring = IoUring::builder().setup_cqsize(entries * 4).build(entries)?;
    let mut cs: Vec<Conn<D>> = Vec::with_capacity(conns.len());
    for (fd, driver) in conns.drain(..) {
        cs.push(Conn {
            fd,
            driver,
            rbuf: vec![0u8; RECV_BYTES].into_boxed_slice(),
            out: Vec::with_capacity(64 * 1024),
            sending: Vec::with_capacity(64 * 1024),
            sent: 0,
            send_busy: false,
            recv_busy: false,
            closed: false,
            dirty: false,
        });
    }
    let mut listener = listener;
    let mut accept_sqe = None;
    if let Some((lfd, _)) = &listener {
        let sqe = opcode::Accept::new(types::Fd(*lfd), std::ptr::null_mut(), std::ptr::null_mut())
            .build()
            .user_data(KIND_ACCEPT);
        push(&mut ring, &sqe)?;
        accept_sqe = Some(sqe);
    }
    let now = mono_ns();
    let mut phase = shared.phase.load(Ordering::Relaxed);
    for (i, c) in cs.iter_mut().enumerate() {
        let mut ctx = Ctx { phase, stats, shared };
        if let Err(e) = c.driver.start(now, &mut c.out, &mut ctx) {
            stats.first_error.get_or_insert(e);
            c.closed = true;
            shared.failed.fetch_add(1, Ordering::SeqCst);
            continue;
        }
        queue_recv(&mut ring, i, c)?;
        flush(&mut ring, i, c, stats, phase)?;
    }
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(entries as usize * 4);
    loop {
        let timeout_ns = if listener.is_some() { 1_000_000_000 } else { 20_000_000 };
        let mut wait_ns = timeout_ns;
        let now = mono_ns();
        for c in &cs {
            if let Some(d) = c.driver.next_deadline() {
                wait_ns = wait_ns.min(d.saturating_sub(now));
            }
        }
        if wait_ns == 0 {
            ring.submit()?;
        } else {
            let ts = types::Timespec::new().sec(wait_ns / 1_000_000_000).nsec((wait_ns % 1_000_000_000) as u32);
            let args = types::SubmitArgs::new().timespec(&ts);
            match ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)) => {}
                Err(e) => return Err(e),
            }
        }
        phase = shared.phase.load(Ordering::Relaxed);
        if phase == PHASE_STOP && listener.is_none() {
            break;
        }
        cqes.clear();
        cqes.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        let now = mono_ns();
        for &(ud, res) in &cqes {
            let kind = ud & 3;
            let idx = (ud >> 2) as usize;
            if kind == KIND_ACCEPT {
                if res >= 0 {
                    let (_, make) = listener.as_mut().unwrap();
                    let fd = res;
                    set_nodelay(fd);
                    let mut c = Conn {
                        fd,
                        driver: make(),
                        rbuf: vec![0u8; RECV_BYTES].into_boxed_slice(),
                        out: Vec::with_capacity(64 * 1024),
                        sending: Vec::with_capacity(64 * 1024),
                        sent: 0,
                        send_busy: false,
                        recv_busy: false,
                        closed: false,
                        dirty: false,
                    };
                    let i = cs.len();
                    let mut ctx = Ctx { phase, stats, shared };
                    if c.driver.start(now, &mut c.out, &mut ctx).is_ok() {
                        queue_recv(&mut ring, i, &mut c)?;
                        flush(&mut ring, i, &mut c, stats, phase)?;
                    }
                    cs.push(c);
                }
                push(&mut ring, accept_sqe.as_ref().unwrap())?;
                continue;
            }
            let Some(c) = cs.get_mut(idx) else { continue };
            match kind {
                KIND_RECV => {
                    c.recv_busy = false;
                    if res <= 0 {
                        if !c.closed {
                            c.closed = true;
                            if listener.is_none() && phase != PHASE_STOP {
                                let msg = if res == 0 { "connection closed by peer".to_string() } else { format!("recv: {}", io::Error::from_raw_os_error(-res)) };
                                let mut ctx = Ctx { phase, stats, shared };
                                ctx.error(|| msg);
                                shared.failed.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        continue;
                    }
                    if phase == PHASE_MEASURE {
                        stats.bytes_in += res as u64;
                    }
                    let mut ctx = Ctx { phase, stats, shared };
                    let data = &c.rbuf[..res as usize];
                    // SAFETY-free aliasing dodge: copy the slice bounds, the
                    // driver gets the receive buffer and the out buffer.
                    let r = c.driver.on_recv(now, data, &mut c.out, &mut ctx);
                    if let Err(e) = r {
                        ctx.error(|| e);
                        c.closed = true;
                        if listener.is_none() {
                            shared.failed.fetch_add(1, Ordering::SeqCst);
                        }
                        continue;
                    }
                    queue_recv(&mut ring, idx, c)?;
                    c.dirty = true;
                }
                KIND_SEND => {
                    c.send_busy = false;
                    if res < 0 {
                        if !c.closed && listener.is_none() && phase != PHASE_STOP {
                            let mut ctx = Ctx { phase, stats, shared };
                            ctx.error(|| format!("send: {}", io::Error::from_raw_os_error(-res)));
                            shared.failed.fetch_add(1, Ordering::SeqCst);
                        }
                        c.closed = true;
                        continue;
                    }
                    c.sent += res as usize;
                    if c.sent < c.sending.len() {
                        queue_send(&mut ring, idx, c)?;
                    } else {
                        c.sending.clear();
                        c.sent = 0;
                        c.dirty = true;
                    }
                }
                _ => {}
            }
        }
        for (i, c) in cs.iter_mut().enumerate() {
            if c.closed {
                continue;
            }
            if c.driver.next_deadline().is_some_and(|d| d <= now) {
                let mut ctx = Ctx { phase, stats, shared };
                if let Err(e) = c.driver.poll(now, &mut c.out, &mut ctx) {
                    ctx.error(|| e);
                    c.closed = true;
                    continue;
                }
                c.dirty = true;
            }
            if c.dirty {
                c.dirty = false;
                flush(&mut ring, i, c, stats, phase)?;
            }
        }
        if listener.is_some() {
            // Reclaim closed connections that have nothing in flight at the
            // end of the vector (indices stay stable for the others).
            while cs.last().is_some_and(|c| c.closed && !c.send_busy && !c.recv_busy) {
                cs.pop();
            }
        }
    }
    // Let in-flight operations on our buffers end before they are freed:
    // cancel by closing the sockets, then drain completions briefly.
    for c in cs.iter() {
        // SAFETY: shutdown on an fd we own.
        unsafe { libc::shutdown(c.fd, libc::SHUT_RDWR) };
    }
    let deadline = mono_ns() + 500_000_000;
    loop {
        let busy = cs.iter().filter(|c| c.recv_busy || c.send_busy).count();
        if busy == 0 || mono_ns() > deadline {
            break;
        }
        let ts = types::Timespec::new().nsec(10_000_000);
        let _ = ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
        let done: Vec<u64> = ring.completion().map(|c| c.user_data()).collect();
        for ud in done {
            if let Some(c) = cs.get_mut((ud >> 2) as usize) {
                match ud & 3 {
                    KIND_RECV => c.recv_busy = false,
                    KIND_SEND => c.send_busy = false,
                    _ => {}
                }
            }
        }
    }
    if cs.iter().any(|c| c.recv_busy || c.send_busy) {
        // Operations still reference buffers: leak them rather than free
        // memory the kernel may still write.
        std::mem::forget(cs);
        std::mem::forget(ring);
    }
    Ok(())
}

pub fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt with a valid int option.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

/// A connected loopback TCP socket with TCP_NODELAY, as a raw fd.
pub fn connect(addr: std::net::SocketAddr) -> io::Result<RawFd> {
    let s = std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(10))?;
    s.set_nodelay(true)?;
    Ok(s.into_raw_fd())
}
