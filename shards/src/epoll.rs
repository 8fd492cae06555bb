//! The epoll fallback loop: same ownership model, readiness instead of completions.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};

use crate::conn::Phase;
use crate::fleet::{ShardStats, ShardWiring};
use crate::handler::{ConnId, Handler, Origin};
use crate::loop_core::{LoopConfig, LoopCore, STOP_HARD_EXTRA_NS};
use crate::net;

const T_LISTENER: u64 = 1;
const T_CONN: u64 = 2;
const T_EVENTFD: u64 = 3;

fn token(kind: u64, index: u32, generation: u32) -> u64 {
    (kind << 56) | (((index as u64) & 0xFF_FFFF) << 32) | generation as u64
}

/// Reads per readiness event before moving on (fairness between connections).
const READS_PER_EVENT: usize = 4;
/// Accepts per readiness event.
const ACCEPTS_PER_EVENT: usize = 64;

/// One shard's epoll loop.
pub struct EpollLoop<H: Handler> {
    core: LoopCore<H>,
    epfd: OwnedFd,
    listeners: Vec<Option<OwnedFd>>,
    scratch: Box<[u8]>,
    events: Vec<libc::epoll_event>,
    dirty: Vec<ConnId>,
    added: Vec<ConnId>,
    aborted: bool,
}

fn epoll_ctl(epfd: RawFd, op: libc::c_int, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: valid epoll fd and event pointer.
    let rc = unsafe { libc::epoll_ctl(epfd, op, fd, &mut ev) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

impl<H: Handler> EpollLoop<H> {
    pub fn new(handler: H, wiring: ShardWiring, cfg: LoopConfig) -> io::Result<EpollLoop<H>> {
        if cfg.batch_wait_us > 0 && wiring.index == 0 {
            tracing::info!("runtime.batch_wait_us applies to the io_uring backend only: epoll handles every event at once");
        }
        // SAFETY: plain syscall, checked.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh fd we own.
        let epfd = unsafe { OwnedFd::from_raw_fd(raw) };
        let efd = wiring.fleet.shards[wiring.index].eventfd.as_raw_fd();
        epoll_ctl(
            epfd.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            efd,
            libc::EPOLLIN as u32,
            token(T_EVENTFD, 0, 0),
        )?;
        let scratch = vec![0u8; cfg.recv_buffer_bytes as usize].into_boxed_slice();
        Ok(EpollLoop {
            core: LoopCore::new(handler, wiring, cfg),
            epfd,
            listeners: Vec::new(),
            scratch,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 256],
            dirty: Vec::new(),
            added: Vec::new(),
            aborted: false,
        })
    }

    pub fn handler(&self) -> &H {
        &self.core.handler
    }

    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.core.handler
    }

    pub fn add_listener(&mut self, listener: TcpListener) -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let fd = OwnedFd::from(listener);
        let i = self.listeners.len() as u32;
        epoll_ctl(
            self.epfd.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd.as_raw_fd(),
            libc::EPOLLIN as u32,
            token(T_LISTENER, i, 0),
        )?;
        self.listeners.push(Some(fd));
        Ok(())
    }

    pub fn connect(&mut self, addr: SocketAddr) -> io::Result<ConnId> {
        let stream = TcpStream::connect(addr)?;
        self.adopt(stream)
    }

    pub fn adopt(&mut self, stream: TcpStream) -> io::Result<ConnId> {
        let peer = stream.peer_addr()?;
        stream.set_nonblocking(true)?;
        // SAFETY: into_raw_fd transfers ownership.
        let fd = unsafe { OwnedFd::from_raw_fd(stream.into_raw_fd()) };
        self.core.refresh_now();
        let id = self
            .core
            .add_conn(fd, peer, Origin::Connected)
            .ok_or_else(|| io::Error::other("connection table full or loop stopping"))?;
        self.register(id);
        Ok(id)
    }

    fn register(&mut self, id: ConnId) {
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let fd = c.fd.as_raw_fd();
        if let Err(e) = epoll_ctl(
            self.epfd.as_raw_fd(),
            libc::EPOLL_CTL_ADD,
            fd,
            (libc::EPOLLIN | libc::EPOLLRDHUP) as u32,
            token(T_CONN, id.index, id.generation),
        ) {
            tracing::warn!("epoll_ctl add failed: {e}");
            self.core.begin_close(id, true);
        } else if let Some(c) = self.core.table.get_mut(id) {
            c.epoll_interest = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
        }
        self.core.table.mark_dirty(id);
    }

    /// Registers the events the connection's state calls for, if they changed.
    fn update_interest(&mut self, id: ConnId) {
        let reading = self.core.reading_allowed(id);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        let mut ev = 0u32;
        if c.phase == Phase::Open {
            // Stopped (its own bound, the shard's budget, input held back): only
            // hear about the peer going away.
            ev |= libc::EPOLLRDHUP as u32;
            if reading {
                ev |= libc::EPOLLIN as u32;
            }
        }
        if c.epoll_out {
            ev |= libc::EPOLLOUT as u32;
        }
        if ev == c.epoll_interest {
            return;
        }
        c.epoll_interest = ev;
        let _ = epoll_ctl(
            self.epfd.as_raw_fd(),
            libc::EPOLL_CTL_MOD,
            c.fd.as_raw_fd(),
            ev,
            token(T_CONN, id.index, id.generation),
        );
    }

    fn on_listener(&mut self, i: usize) {
        for _ in 0..ACCEPTS_PER_EVENT {
            let Some(Some(l)) = self.listeners.get(i) else {
                return;
            };
            match net::accept_nonblocking(l.as_raw_fd()) {
                Ok(Some((fd, peer))) => {
                    if self.core.stopping {
                        continue;
                    }
                    if let Some(id) = self.core.on_accepted(fd, peer) {
                        self.register(id);
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    tracing::debug!("accept failed: {e}");
                    return;
                }
            }
        }
    }

    fn on_readable(&mut self, id: ConnId) {
        for _ in 0..READS_PER_EVENT {
            if !self.core.reading_allowed(id) {
                return;
            }
            let Some(c) = self.core.table.get_mut(id) else {
                return;
            };
            let fd = c.fd.as_raw_fd();
            // SAFETY: reads into our scratch buffer of the given length.
            let n = unsafe {
                libc::recv(
                    fd,
                    self.scratch.as_mut_ptr() as *mut libc::c_void,
                    self.scratch.len(),
                    0,
                )
            };
            if n > 0 {
                self.core.deliver(id, &self.scratch[..n as usize]);
                if (n as usize) < self.scratch.len() {
                    return;
                }
            } else if n == 0 {
                self.core.begin_close(id, false);
                return;
            } else {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => return,
                    _ => {
                        self.core.begin_close(id, true);
                        return;
                    }
                }
            }
        }
    }

    /// Writes as much pending output as the socket takes. Returns false when the
    /// socket is broken.
    fn flush(&mut self, id: ConnId) -> bool {
        loop {
            let Some(c) = self.core.table.get_mut(id) else {
                return false;
            };
            if !c.output.take_batch() {
                return true;
            }
            let fd = c.fd.as_raw_fd();
            let unsent = c.output.unsent();
            // Gather the batch on the wire and what was appended since into one sendmsg.
            let mut iov = [
                libc::iovec {
                    iov_base: unsent.as_ptr() as *mut libc::c_void,
                    iov_len: unsent.len(),
                },
                libc::iovec {
                    iov_base: c.output.out.as_ptr() as *mut libc::c_void,
                    iov_len: c.output.out.len(),
                },
            ];
            // SAFETY: zeroed msghdr is valid; iov points at live buffers.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = if c.output.out.is_empty() { 1 } else { 2 };
            let n = unsafe { libc::sendmsg(fd, &msg, libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.raw_os_error() {
                    Some(libc::EAGAIN) | Some(libc::EINTR) => {
                        c.epoll_out = true;
                        true
                    }
                    _ => {
                        c.output.discard();
                        false
                    }
                };
            }
            let mut n = n as usize;
            ShardStats::add(&self.core.wiring.stats().bytes_out, n as u64);
            if n > 0 {
                // Progress: a stalled connection's clock starts again.
                c.stall_deadline = u64::MAX;
            }
            let first = c.output.unsent().len().min(n);
            let done = c.output.advance(first);
            n -= first;
            if done && n > 0 {
                // Part of `out` left too: make it the batch and advance into it.
                c.output.take_batch();
                c.output.advance(n);
            }
            if c.output.pending() > 0 && (n > 0 || !done) {
                // Short write: the socket buffer is full.
                c.epoll_out = true;
                return true;
            }
            if c.output.pending() == 0 {
                c.epoll_out = false;
                return true;
            }
        }
    }

    fn reconcile(&mut self, id: ConnId) {
        let now = self.core.now.mono_ns;
        let ok = self.flush(id);
        let Some(c) = self.core.table.get_mut(id) else {
            return;
        };
        match c.phase {
            Phase::Open => {
                if !ok {
                    self.core.finalize(id);
                    return;
                }
                // Accounting, the connection's and the shard's bounds, held-back
                // input (whose answers are flushed on the next pass: it marks the
                // connection dirty).
                self.core.resume(id);
                if self.core.move_ready(id) {
                    // Its output is sent: it leaves for the shard that owns its session.
                    if let Some(c) = self.core.table.get_mut(id) {
                        let _ = epoll_ctl(
                            self.epfd.as_raw_fd(),
                            libc::EPOLL_CTL_DEL,
                            c.fd.as_raw_fd(),
                            0,
                            0,
                        );
                    }
                    self.core.complete_move(id);
                    return;
                }
                self.update_interest(id);
            }
            Phase::Draining | Phase::Shut => {
                if !ok || c.output.pending() == 0 || c.drain_deadline <= now {
                    if ok && c.output.pending() > 0 {
                        crate::loop_core::reset_on_close(&c.fd);
                    }
                    self.core.finalize(id);
                } else {
                    self.update_interest(id);
                }
            }
        }
    }

    pub fn run(&mut self) -> io::Result<()> {
        loop {
            self.core.refresh_now();
            if !self.core.stopping
                && (self.core.wiring.fleet.stopping()
                    || !self.core.handler.keep_running(self.core.now))
            {
                self.core.begin_stop();
                self.listeners.clear(); // closes them; epoll forgets closed fds
            }
            self.core.fire_timers();
            if self.core.stopping
                && !self.aborted
                && self.core.now.mono_ns >= self.core.stop_deadline
            {
                self.aborted = true;
                self.core.abort_all();
            }
            let mut ids = std::mem::take(&mut self.dirty);
            self.core.table.take_dirty(&mut ids);
            for &id in &ids {
                self.reconcile(id);
            }
            self.dirty = ids;
            if self.core.stopping
                && (self.core.table.len() == 0
                    || self.core.now.mono_ns
                        >= self.core.stop_deadline.saturating_add(STOP_HARD_EXTRA_NS))
            {
                break;
            }
            for t in std::mem::take(&mut self.core.wake) {
                self.core.wiring.fleet.wake(t);
            }
            let deadline = self.core.next_wakeup();
            let now = crate::clock::mono_ns();
            let timeout_ms: libc::c_int = if deadline == u64::MAX {
                -1
            } else if deadline <= now {
                0
            } else {
                ((deadline - now).div_ceil(1_000_000)).min(i32::MAX as u64) as libc::c_int
            };
            // SAFETY: events buffer of the stated length.
            let n = unsafe {
                libc::epoll_wait(
                    self.epfd.as_raw_fd(),
                    self.events.as_mut_ptr(),
                    self.events.len() as libc::c_int,
                    timeout_ms,
                )
            };
            self.core.refresh_now();
            ShardStats::add(
                &self.core.wiring.stats().idle_ns,
                self.core.now.mono_ns.saturating_sub(now),
            );
            ShardStats::add(&self.core.wiring.stats().loops, 1);
            self.core.handler.publish();
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            for k in 0..n as usize {
                let ev = self.events[k];
                let (data, bits) = (ev.u64, ev.events);
                let kind = data >> 56;
                let index = ((data >> 32) & 0xFF_FFFF) as u32;
                let id = ConnId {
                    index,
                    generation: data as u32,
                };
                match kind {
                    T_LISTENER => self.on_listener(index as usize),
                    T_EVENTFD => {
                        let mut buf = [0u8; 8];
                        let efd = self.core.wiring.fleet.shards[self.core.wiring.index]
                            .eventfd
                            .as_raw_fd();
                        // SAFETY: reads 8 bytes into a local buffer.
                        unsafe { libc::read(efd, buf.as_mut_ptr() as *mut libc::c_void, 8) };
                        let mut added = std::mem::take(&mut self.added);
                        added.clear();
                        self.core.drain_inbox(&mut added);
                        for &a in &added {
                            self.register(a);
                        }
                        self.added = added;
                    }
                    T_CONN => {
                        if bits
                            & (libc::EPOLLIN as u32
                                | libc::EPOLLRDHUP as u32
                                | libc::EPOLLHUP as u32
                                | libc::EPOLLERR as u32)
                            != 0
                        {
                            if bits & libc::EPOLLRDHUP as u32 != 0 && !self.core.reading_allowed(id)
                            {
                                // The peer went away while we were not reading: what it
                                // sent will not be processed; send what is pending, then close.
                                self.core.begin_close(id, false);
                            }
                            self.on_readable(id);
                            if bits & (libc::EPOLLHUP as u32 | libc::EPOLLERR as u32) != 0 {
                                self.core.begin_close(id, bits & libc::EPOLLERR as u32 != 0);
                            }
                        }
                        if bits & libc::EPOLLOUT as u32 != 0 {
                            self.core.table.mark_dirty(id);
                        }
                    }
                    _ => {}
                }
            }
        }
        for id in self.core.table.ids() {
            self.core.finalize(id);
        }
        Ok(())
    }
}
