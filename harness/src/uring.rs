//! The harness's client ring (`--client-io harness`): one thread owns a ring
//! and a set of client connections; each connection has one receive in
//! flight at all times. Servers, the echo floor included, run on
//! uaring' loop; this loop exists for the client's send modes:
//!
//! - `batched`: everything a driver writes while handling one batch of
//!   completions goes out in one send per connection (what uaring'
//!   loop does too);
//! - `per-request`: each request leaves in its own send(2) call
//!   (MSG_DONTWAIT), as open62541, UA-.NET and UaExpert clients write them.
//!   Drivers mark where each request ends ([`Ctx::mark`]); a short write's
//!   remainder goes through the ring and the next requests wait for it.
//!
//! The protocol lives in a [`Driver`]: bytes in, bytes out, like core's
//! sans-IO connections.

use std::io;
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};

use hdrhistogram::Histogram;
use io_uring::{opcode, types, IoUring};

pub const PHASE_WARMUP: u8 = 0;
pub const PHASE_MEASURE: u8 = 1;
pub const PHASE_STOP: u8 = 2;
/// After the window: the load goes on (so the server is measured under the
/// same load until the CPU samples are taken) but nothing is counted.
pub const PHASE_DRAIN: u8 = 3;

/// Monotonic nanoseconds (CLOCK_MONOTONIC).
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
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
    /// Every load connection's socket, registered once at connect, for the TCP segment
    /// counts of the window ([`crate::tcpinfo`]); read only by the measuring thread.
    pub sockets: std::sync::Mutex<Vec<RawFd>>,
}

impl Shared {
    /// Registers a load connection's socket for [`crate::tcpinfo`].
    pub fn register_socket(&self, fd: RawFd) {
        if let Ok(mut s) = self.sockets.lock() {
            s.push(fd);
        }
    }

    /// The registered sockets.
    pub fn socket_list(&self) -> Vec<RawFd> {
        self.sockets.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

/// Per-thread measurements.
pub struct ThreadStats {
    pub hist: Histogram<u64>,
    /// The server's part of each latency where the protocol tells it (push: SourceTimestamp
    /// to the NotificationMessage's PublishTime); empty for the other scenarios.
    pub server_part: Histogram<u64>,
    /// Push: SourceTimestamp to the notification's ServerTimestamp (through the gateway,
    /// when the shard took the stored value from its change inbox); empty otherwise.
    pub stamp_part: Histogram<u64>,
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
            server_part: new_histogram(),
            stamp_part: new_histogram(),
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
        let _ = self.server_part.add(&other.server_part);
        let _ = self.stamp_part.add(&other.stamp_part);
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
    /// Where each request ends in the output buffer (per-request sends);
    /// `None` when the loop batches.
    pub marks: Option<&'a mut Vec<usize>>,
}

impl<'a> Ctx<'a> {
    pub fn new(phase: u8, stats: &'a mut ThreadStats, shared: &'a Shared) -> Ctx<'a> {
        Ctx {
            phase,
            stats,
            shared,
            marks: None,
        }
    }

    /// A request ends at `end` bytes of the output buffer: with per-request
    /// sends, the bytes up to here leave in their own send.
    #[inline]
    pub fn mark(&mut self, end: usize) {
        if let Some(m) = self.marks.as_deref_mut() {
            if !matches!(m.last(), Some(&l) if l >= end) {
                m.push(end);
            }
        }
    }

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

    /// The server's part of the latency of the operation just completed (measured window
    /// only; reported as `server_part_p50_us` … when any was recorded).
    #[inline]
    pub fn server_part(&mut self, ns: u64) {
        if self.phase == PHASE_MEASURE {
            self.stats.server_part.saturating_record(ns.max(1));
        }
    }

    /// SourceTimestamp → ServerTimestamp of the notification just accounted (measured
    /// window only; reported as `stamp_part_p50_us` … when any was recorded).
    #[inline]
    pub fn stamp_part(&mut self, ns: u64) {
        if self.phase == PHASE_MEASURE {
            self.stats.stamp_part.saturating_record(ns.max(1));
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
    fn on_recv(
        &mut self,
        now_ns: u64,
        data: &[u8],
        out: &mut Vec<u8>,
        ctx: &mut Ctx,
    ) -> Result<(), String>;
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
const RECV_BYTES: usize = 256 * 1024;

struct Conn<D> {
    fd: RawFd,
    driver: D,
    rbuf: Box<[u8]>,
    out: Vec<u8>,
    /// Request ends in `out` (per-request sends).
    marks: Vec<usize>,
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
        // when the loop ends, after in-flight operations completed or leaked).
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

/// Counts one send operation of the measured window.
fn count_send(stats: &mut ThreadStats, phase: u8) {
    if phase == PHASE_MEASURE {
        *stats.extra.entry("client_sends").or_insert(0) += 1;
    }
}

/// Sends what the driver wrote. Batched: all of it in one send operation.
/// Per request: one send(2) per marked request; what the kernel does not
/// take at once (EAGAIN, short write) goes through the ring as one send and
/// later requests wait behind it, in order.
fn flush<D>(
    ring: &mut IoUring,
    idx: usize,
    c: &mut Conn<D>,
    stats: &mut ThreadStats,
    phase: u8,
    per_request: bool,
) -> Result<(), String> {
    if c.send_busy || c.out.is_empty() || c.closed {
        return Ok(());
    }
    if phase == PHASE_MEASURE {
        stats.bytes_out += c.out.len() as u64;
    }
    let mut start = 0;
    if per_request {
        if !matches!(c.marks.last(), Some(&l) if l >= c.out.len()) {
            c.marks.push(c.out.len());
        }
        'messages: for &end in &c.marks {
            while start < end {
                let chunk = &c.out[start..end];
                // SAFETY: a send(2) from a live buffer on a socket we own.
                let n = unsafe {
                    libc::send(
                        c.fd,
                        chunk.as_ptr() as *const libc::c_void,
                        chunk.len(),
                        libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                    )
                };
                if n >= 0 {
                    count_send(stats, phase);
                    start += n as usize;
                    if (n as usize) < chunk.len() {
                        break 'messages;
                    }
                    continue;
                }
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EAGAIN) => break 'messages,
                    _ => {
                        c.closed = true;
                        c.marks.clear();
                        return Err(format!("send: {e}"));
                    }
                }
            }
        }
        c.marks.clear();
        if start == c.out.len() {
            c.out.clear();
            return Ok(());
        }
    }
    std::mem::swap(&mut c.out, &mut c.sending);
    c.out.clear();
    c.sent = start;
    count_send(stats, phase);
    queue_send(ring, idx, c).map_err(|e| format!("ring: {e}"))
}

/// Runs the client loop over connected sockets until `shared.phase` is
/// `PHASE_STOP`.
pub fn run_loop<D: Driver>(
    conns: Vec<(RawFd, D)>,
    shared: &Shared,
    stats: &mut ThreadStats,
    per_request: bool,
) -> io::Result<()> {
    let n = conns.len().max(64);
    let entries = (n * 2 + 16).next_power_of_two().min(32768) as u32;
    let mut ring = IoUring::builder()
        .setup_cqsize(entries * 4)
        .build(entries)?;
    let mut cs: Vec<Conn<D>> = Vec::with_capacity(conns.len());
    for (fd, driver) in conns {
        cs.push(Conn {
            fd,
            driver,
            rbuf: vec![0u8; RECV_BYTES].into_boxed_slice(),
            out: Vec::with_capacity(64 * 1024),
            marks: Vec::with_capacity(256),
            sending: Vec::with_capacity(64 * 1024),
            sent: 0,
            send_busy: false,
            recv_busy: false,
            closed: false,
            dirty: false,
        });
    }
    let now = mono_ns();
    let mut phase = shared.phase.load(Ordering::Relaxed);
    let fail = |c: &mut Conn<D>, stats: &mut ThreadStats, phase: u8, msg: String| {
        if !c.closed && phase != PHASE_STOP {
            let mut ctx = Ctx::new(phase, stats, shared);
            ctx.error(|| msg);
            shared.failed.fetch_add(1, Ordering::SeqCst);
        }
        c.closed = true;
    };
    for (i, c) in cs.iter_mut().enumerate() {
        let mut ctx = Ctx {
            phase,
            stats,
            shared,
            marks: per_request.then_some(&mut c.marks),
        };
        if let Err(e) = c.driver.start(now, &mut c.out, &mut ctx) {
            fail(c, stats, phase, e);
            continue;
        }
        queue_recv(&mut ring, i, c)?;
        if let Err(e) = flush(&mut ring, i, c, stats, phase, per_request) {
            fail(c, stats, phase, e);
        }
    }
    let mut cqes: Vec<(u64, i32)> = Vec::with_capacity(entries as usize * 4);
    loop {
        let mut wait_ns: u64 = 20_000_000;
        let now = mono_ns();
        for c in &cs {
            if let Some(d) = c.driver.next_deadline() {
                wait_ns = wait_ns.min(d.saturating_sub(now));
            }
        }
        if wait_ns == 0 {
            ring.submit()?;
        } else {
            let ts = types::Timespec::new()
                .sec(wait_ns / 1_000_000_000)
                .nsec((wait_ns % 1_000_000_000) as u32);
            let args = types::SubmitArgs::new().timespec(&ts);
            match ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ETIME) | Some(libc::EINTR) | Some(libc::EBUSY)
                    ) => {}
                Err(e) => return Err(e),
            }
        }
        phase = shared.phase.load(Ordering::Relaxed);
        if phase == PHASE_STOP {
            break;
        }
        cqes.clear();
        cqes.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        let now = mono_ns();
        for &(ud, res) in &cqes {
            let kind = ud & 3;
            let idx = (ud >> 2) as usize;
            let Some(c) = cs.get_mut(idx) else { continue };
            match kind {
                KIND_RECV => {
                    c.recv_busy = false;
                    if res <= 0 {
                        let msg = if res == 0 {
                            "connection closed by peer".to_string()
                        } else {
                            format!("recv: {}", io::Error::from_raw_os_error(-res))
                        };
                        fail(c, stats, phase, msg);
                        continue;
                    }
                    if c.closed {
                        continue;
                    }
                    if phase == PHASE_MEASURE {
                        stats.bytes_in += res as u64;
                    }
                    let mut ctx = Ctx {
                        phase,
                        stats,
                        shared,
                        marks: per_request.then_some(&mut c.marks),
                    };
                    let r = c
                        .driver
                        .on_recv(now, &c.rbuf[..res as usize], &mut c.out, &mut ctx);
                    if let Err(e) = r {
                        fail(c, stats, phase, e);
                        continue;
                    }
                    queue_recv(&mut ring, idx, c)?;
                    c.dirty = true;
                }
                KIND_SEND => {
                    c.send_busy = false;
                    if res < 0 {
                        fail(
                            c,
                            stats,
                            phase,
                            format!("send: {}", io::Error::from_raw_os_error(-res)),
                        );
                        continue;
                    }
                    c.sent += res as usize;
                    if c.sent < c.sending.len() {
                        count_send(stats, phase);
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
                let mut ctx = Ctx {
                    phase,
                    stats,
                    shared,
                    marks: per_request.then_some(&mut c.marks),
                };
                if let Err(e) = c.driver.poll(now, &mut c.out, &mut ctx) {
                    fail(c, stats, phase, e);
                    continue;
                }
                c.dirty = true;
            }
            if c.dirty {
                c.dirty = false;
                if let Err(e) = flush(&mut ring, i, c, stats, phase, per_request) {
                    fail(c, stats, phase, e);
                }
            }
        }
    }
    // Let in-flight operations on our buffers end before they are freed:
    // cancel by shutting the sockets down, then drain completions briefly.
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
        let _ = ring
            .submitter()
            .submit_with_args(1, &types::SubmitArgs::new().timespec(&ts));
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

#[cfg(test)]
mod tests {
    use super::*;

    struct Nothing;
    impl Driver for Nothing {
        fn start(&mut self, _now: u64, _out: &mut Vec<u8>, _ctx: &mut Ctx) -> Result<(), String> {
            Ok(())
        }
        fn on_recv(
            &mut self,
            _now: u64,
            _data: &[u8],
            _out: &mut Vec<u8>,
            _ctx: &mut Ctx,
        ) -> Result<(), String> {
            Ok(())
        }
    }

    fn pair() -> (RawFd, RawFd) {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: socketpair into a valid array.
        assert_eq!(
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, fds.as_mut_ptr()) },
            0
        );
        (fds[0], fds[1])
    }

    fn conn(fd: RawFd) -> Conn<Nothing> {
        Conn {
            fd,
            driver: Nothing,
            rbuf: vec![0u8; 16].into_boxed_slice(),
            out: Vec::new(),
            marks: Vec::new(),
            sending: Vec::new(),
            sent: 0,
            send_busy: false,
            recv_busy: false,
            closed: false,
            dirty: false,
        }
    }

    fn read_all(fd: RawFd, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        while got < n {
            // SAFETY: read into the rest of a live buffer.
            let r =
                unsafe { libc::read(fd, buf[got..].as_mut_ptr() as *mut libc::c_void, n - got) };
            assert!(r > 0);
            got += r as usize;
        }
        buf
    }

    #[test]
    fn per_request_sends_one_send_per_marked_request_in_order() {
        let (a, b) = pair();
        let mut ring = IoUring::new(8).unwrap();
        let mut stats = ThreadStats::default();
        let shared = Shared::default();
        let mut c = conn(a);
        {
            let mut ctx = Ctx {
                phase: PHASE_MEASURE,
                stats: &mut stats,
                shared: &shared,
                marks: Some(&mut c.marks),
            };
            for (i, len) in [5usize, 7, 3].into_iter().enumerate() {
                c.out.resize(c.out.len() + len, i as u8 + 1);
                ctx.mark(c.out.len());
            }
            // Unmarked trailing bytes leave in one last send.
            c.out.extend_from_slice(&[9, 9]);
        }
        flush(&mut ring, 0, &mut c, &mut stats, PHASE_MEASURE, true).unwrap();
        assert_eq!(stats.extra.get("client_sends"), Some(&4));
        assert_eq!(stats.bytes_out, 17);
        assert!(c.out.is_empty() && c.marks.is_empty() && !c.send_busy);
        let got = read_all(b, 17);
        assert_eq!(got, [1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 9, 9]);
        // SAFETY: closing our own fd (a is closed by the Conn).
        unsafe { libc::close(b) };
    }

    #[test]
    fn batched_ignores_marks_and_sends_once() {
        let (a, b) = pair();
        let mut ring = IoUring::new(8).unwrap();
        let mut stats = ThreadStats::default();
        let shared = Shared::default();
        let mut c = conn(a);
        {
            // A batching loop gives the driver no marks.
            let mut ctx = Ctx::new(PHASE_MEASURE, &mut stats, &shared);
            c.out.extend_from_slice(&[1, 2, 3]);
            ctx.mark(3);
            c.out.extend_from_slice(&[4, 5]);
            ctx.mark(5);
        }
        assert!(c.marks.is_empty());
        flush(&mut ring, 0, &mut c, &mut stats, PHASE_MEASURE, false).unwrap();
        assert_eq!(stats.extra.get("client_sends"), Some(&1));
        assert!(c.send_busy);
        ring.submit_and_wait(1).unwrap();
        let cqe = ring.completion().next().unwrap();
        assert_eq!(cqe.result(), 5);
        assert_eq!(read_all(b, 5), [1, 2, 3, 4, 5]);
        // SAFETY: closing our own fd.
        unsafe { libc::close(b) };
    }
}
