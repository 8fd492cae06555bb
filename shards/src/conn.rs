//! The per-shard connection table shared by both backends: a slab of
//! connections with generations, the timer heap, the dirty list that batches
//! output, and the send double buffer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

use crate::handler::ConnId;

/// Life of a connection inside the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Reading and writing.
    Open,
    /// Closing: no more reading; pending output is being sent until the drain deadline.
    Draining,
    /// shutdown(2) done; waiting for the kernel to finish outstanding operations.
    Shut,
}

/// Output of one connection: the handler appends to `out`; `sending` is the
/// batch on the wire (stable while a send is in flight); `sent` bytes of it
/// are done. At most one send per connection is in flight.
pub(crate) struct Output {
    pub out: Vec<u8>,
    pub sending: Vec<u8>,
    pub sent: usize,
}

/// Capacity kept in an idle send buffer; larger ones are shrunk back.
const IDLE_BUFFER_KEEP_BYTES: usize = 64 * 1024;

impl Output {
    fn new() -> Output {
        Output {
            out: Vec::new(),
            sending: Vec::new(),
            sent: 0,
        }
    }

    /// Bytes not yet sent.
    pub fn pending(&self) -> usize {
        self.out.len() + (self.sending.len() - self.sent)
    }

    /// If nothing is on the wire, moves `out` into `sending` and returns true
    /// when there is something to send.
    pub fn take_batch(&mut self) -> bool {
        if self.sent < self.sending.len() {
            return true;
        }
        self.sending.clear();
        self.sent = 0;
        if self.out.is_empty() {
            return false;
        }
        std::mem::swap(&mut self.out, &mut self.sending);
        true
    }

    /// Memory this output holds: the bytes waiting, or the capacity of its two
    /// buffers beyond what an idle connection keeps, whichever is larger.
    pub fn held_bytes(&self) -> usize {
        let capacity = (self.out.capacity() + self.sending.capacity())
            .saturating_sub(2 * IDLE_BUFFER_KEEP_BYTES);
        self.pending().max(capacity)
    }

    /// The unsent rest of the batch on the wire.
    pub fn unsent(&self) -> &[u8] {
        &self.sending[self.sent..]
    }

    /// `n` bytes of the batch left. Returns true when the batch is complete.
    /// Only called with no send in flight (the kernel holds no pointer into
    /// `sending`), so a mostly sent large batch is compacted: a slow reader
    /// does not keep a large buffer for a small unsent tail.
    pub fn advance(&mut self, n: usize) -> bool {
        self.sent = (self.sent + n).min(self.sending.len());
        if self.sent == self.sending.len() {
            self.sending.clear();
            self.sent = 0;
            if self.sending.capacity() > IDLE_BUFFER_KEEP_BYTES {
                self.sending.shrink_to(IDLE_BUFFER_KEEP_BYTES);
            }
            if self.out.is_empty() && self.out.capacity() > IDLE_BUFFER_KEEP_BYTES {
                self.out.shrink_to(IDLE_BUFFER_KEEP_BYTES);
            }
            true
        } else {
            let unsent = self.sending.len() - self.sent;
            if self.sending.capacity() > IDLE_BUFFER_KEEP_BYTES
                && unsent <= self.sending.capacity() / 4
            {
                self.sending.drain(..self.sent);
                self.sent = 0;
                self.sending.shrink_to(IDLE_BUFFER_KEEP_BYTES);
            }
            false
        }
    }

    pub fn discard(&mut self) {
        self.out.clear();
        self.sending.clear();
        self.sent = 0;
    }
}

pub(crate) struct Conn<C> {
    pub fd: OwnedFd,
    pub peer: SocketAddr,
    /// The handler's state; `None` once `Handler::closed` ran.
    pub user: Option<C>,
    pub output: Output,
    pub phase: Phase,
    /// The handler's deadline.
    pub user_deadline: u64,
    /// Draining: close by this time even if output is still pending.
    pub drain_deadline: u64,
    /// The deadline currently in the timer heap.
    pub timer_at: u64,
    /// On the dirty list.
    pub dirty: bool,
    /// Reading stopped because too much output is pending.
    pub paused: bool,
    /// Accepted from a peer: subject to the per-connection bound and the shard's
    /// budget. Outgoing connections (a load client on the loop) are not: pausing a
    /// client's reads because its own requests are unsent could deadlock it with
    /// a server doing the same.
    pub bounded: bool,
    /// Received bytes not yet handed to the handler: what arrived after the
    /// connection (or the shard) passed its bound. Fed first when reading resumes.
    pub backlog: Vec<u8>,
    /// Reading is stopped and output is waiting: if no byte of it is sent by this
    /// time (mono ns), the peer is not reading and the connection is aborted.
    /// `u64::MAX` when not stalled.
    pub stall_deadline: u64,
    /// Bytes this connection held at its last accounting (unsent output, backlog,
    /// input the handler buffers); part of the shard's total.
    pub held: usize,
    /// No session activated on it yet (as the handler said at the last accounting): its
    /// `held` bytes also count against the shard's pre-session share.
    pub pre_session: bool,
    /// The handler asked to move this connection to that shard ([`crate::ConnStatus::Move`]),
    /// and a slot of the move queue is reserved: nothing more is read or fed; once its
    /// output is sent and no operation is in flight, it leaves.
    pub moving_to: Option<usize>,
    // io_uring specifics.
    pub recv_armed: bool,
    /// A poll for the peer closing is armed (while reading is stopped).
    pub hup_poll_armed: bool,
    pub send_inflight: bool,
    pub cancel_inflight: bool,
    /// The cancel of the peer-closed poll is in flight (a moving connection).
    pub hup_cancel_inflight: bool,
    /// Per-connection receive buffer (single-shot fallback only).
    pub recv_buf: Option<Box<[u8]>>,
    /// The window of this connection's last receive, for batched waiting (0: none yet).
    pub recv_window: u64,
    // epoll specifics.
    pub epoll_out: bool,
    /// The events currently registered with epoll.
    pub epoll_interest: u32,
}

impl<C> Conn<C> {
    pub fn new(fd: OwnedFd, peer: SocketAddr) -> Conn<C> {
        Conn {
            fd,
            peer,
            user: None,
            output: Output::new(),
            phase: Phase::Open,
            user_deadline: u64::MAX,
            drain_deadline: u64::MAX,
            timer_at: u64::MAX,
            dirty: false,
            paused: false,
            bounded: true,
            backlog: Vec::new(),
            stall_deadline: u64::MAX,
            held: 0,
            pre_session: false,
            moving_to: None,
            recv_armed: false,
            hup_poll_armed: false,
            send_inflight: false,
            cancel_inflight: false,
            hup_cancel_inflight: false,
            recv_buf: None,
            recv_window: 0,
            epoll_out: false,
            epoll_interest: 0,
        }
    }

    /// Operations the kernel still holds for this connection (io_uring).
    pub fn ops_inflight(&self) -> bool {
        self.recv_armed
            || self.hup_poll_armed
            || self.send_inflight
            || self.cancel_inflight
            || self.hup_cancel_inflight
    }

    pub fn effective_deadline(&self) -> u64 {
        match self.phase {
            Phase::Open => self.user_deadline.min(self.stall_deadline),
            Phase::Draining | Phase::Shut => self.drain_deadline.min(self.user_deadline),
        }
    }
}

struct Slot<C> {
    generation: u32,
    conn: Option<Conn<C>>,
}

/// All connections of one shard.
pub(crate) struct Table<C> {
    slots: Vec<Slot<C>>,
    free: Vec<u32>,
    live: usize,
    max: usize,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    dirty: Vec<u32>,
}

impl<C> Table<C> {
    pub fn new(max: usize) -> Table<C> {
        Table {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            max,
            heap: BinaryHeap::new(),
            dirty: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.live
    }

    pub fn is_full(&self) -> bool {
        self.live >= self.max
    }

    /// Stores a connection; `None` when the table is full (the caller closes the socket).
    pub fn insert(&mut self, conn: Conn<C>) -> Option<ConnId> {
        if self.is_full() {
            return None;
        }
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let slot = &mut self.slots[index as usize];
        debug_assert!(slot.conn.is_none());
        slot.conn = Some(conn);
        self.live += 1;
        Some(ConnId {
            index,
            generation: slot.generation,
        })
    }

    pub fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn<C>> {
        match self.slots.get_mut(id.index as usize) {
            Some(s) if s.generation == id.generation => s.conn.as_mut(),
            _ => None,
        }
    }

    /// Takes the connection out and retires its id.
    pub fn remove(&mut self, id: ConnId) -> Option<Conn<C>> {
        let slot = self.slots.get_mut(id.index as usize)?;
        if slot.generation != id.generation {
            return None;
        }
        let conn = slot.conn.take()?;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.live -= 1;
        Some(conn)
    }

    /// Ids of all live connections (shutdown only: walks the table once).
    pub fn ids(&self) -> Vec<ConnId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.conn.is_some())
            .map(|(i, s)| ConnId {
                index: i as u32,
                generation: s.generation,
            })
            .collect()
    }

    /// Puts the connection on the dirty list (its output or state needs attention
    /// at the end of this loop iteration).
    pub fn mark_dirty(&mut self, id: ConnId) {
        if let Some(c) = self.get_mut(id) {
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(id.index);
            }
        }
    }

    /// Puts every live connection on the dirty list (the shard's budget state changed).
    pub fn mark_all_dirty(&mut self) {
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(c) = s.conn.as_mut() {
                if !c.dirty {
                    c.dirty = true;
                    self.dirty.push(i as u32);
                }
            }
        }
    }

    /// Connections wait on the dirty list: the loop must not block before reconciling them.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Takes the dirty list (the caller clears each connection's `dirty` flag).
    pub fn take_dirty(&mut self, into: &mut Vec<ConnId>) {
        into.clear();
        for &index in &self.dirty {
            if let Some(s) = self.slots.get_mut(index as usize) {
                if let Some(c) = s.conn.as_mut() {
                    if c.dirty {
                        c.dirty = false;
                        into.push(ConnId {
                            index,
                            generation: s.generation,
                        });
                    }
                }
            }
        }
        self.dirty.clear();
    }

    /// Re-registers the connection's timer after its deadlines changed.
    pub fn update_timer(&mut self, id: ConnId) {
        let Some(c) = self.get_mut(id) else { return };
        let d = c.effective_deadline();
        if d == c.timer_at {
            return;
        }
        c.timer_at = d;
        if d != u64::MAX {
            self.heap.push(Reverse((d, id.index, id.generation)));
            self.compact_heap();
        }
    }

    /// Stale heap entries (deadline moved, connection gone) are skipped lazily;
    /// rebuild when they outnumber the live ones so the heap stays bounded.
    fn compact_heap(&mut self) {
        if self.heap.len() <= 2 * self.live + 64 {
            return;
        }
        let mut fresh = BinaryHeap::with_capacity(self.live);
        for (i, s) in self.slots.iter().enumerate() {
            if let Some(c) = &s.conn {
                if c.timer_at != u64::MAX {
                    fresh.push(Reverse((c.timer_at, i as u32, s.generation)));
                }
            }
        }
        self.heap = fresh;
    }

    /// The earliest live deadline.
    pub fn next_deadline(&mut self) -> u64 {
        while let Some(&Reverse((d, index, generation))) = self.heap.peek() {
            let id = ConnId { index, generation };
            match self.get_mut(id) {
                Some(c) if c.timer_at == d => return d,
                _ => {
                    self.heap.pop();
                }
            }
        }
        u64::MAX
    }

    /// A connection whose deadline is ≤ `now`, removed from the heap.
    pub fn pop_expired(&mut self, now_ns: u64) -> Option<ConnId> {
        loop {
            let &Reverse((d, index, generation)) = self.heap.peek()?;
            if d > now_ns {
                return None;
            }
            self.heap.pop();
            let id = ConnId { index, generation };
            if let Some(c) = self.get_mut(id) {
                if c.timer_at == d {
                    c.timer_at = u64::MAX;
                    return Some(id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn fd() -> OwnedFd {
        // SAFETY: eventfd returns a fresh fd or -1 (checked).
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(raw >= 0);
        unsafe { OwnedFd::from_raw_fd(raw) }
    }

    #[test]
    fn slots_reuse_with_new_generation_and_bounded() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut t: Table<()> = Table::new(2);
        let a = t.insert(Conn::new(fd(), peer)).unwrap();
        let b = t.insert(Conn::new(fd(), peer)).unwrap();
        assert!(t.insert(Conn::new(fd(), peer)).is_none());
        assert!(t.remove(a).is_some());
        assert!(t.remove(a).is_none());
        let c = t.insert(Conn::new(fd(), peer)).unwrap();
        assert_eq!(c.index, a.index);
        assert_ne!(c.generation, a.generation);
        assert!(t.get_mut(a).is_none());
        assert!(t.get_mut(b).is_some());
    }

    #[test]
    fn timers_fire_in_order_and_stale_entries_are_skipped() {
        let peer: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut t: Table<()> = Table::new(100);
        let a = t.insert(Conn::new(fd(), peer)).unwrap();
        let b = t.insert(Conn::new(fd(), peer)).unwrap();
        t.get_mut(a).unwrap().user_deadline = 50;
        t.update_timer(a);
        t.get_mut(b).unwrap().user_deadline = 20;
        t.update_timer(b);
        t.get_mut(a).unwrap().user_deadline = 10; // moved earlier: old entry goes stale
        t.update_timer(a);
        assert_eq!(t.next_deadline(), 10);
        assert_eq!(t.pop_expired(30), Some(a));
        assert_eq!(t.pop_expired(30), Some(b));
        assert_eq!(t.pop_expired(100), None); // the stale 50 entry is skipped
        for i in 0..1000 {
            t.get_mut(a).unwrap().user_deadline = 1000 + i;
            t.update_timer(a);
        }
        assert!(t.heap.len() <= 2 * t.len() + 65);
    }

    #[test]
    fn output_double_buffer() {
        let mut o = Output::new();
        assert!(!o.take_batch());
        o.out.extend_from_slice(b"hello");
        assert!(o.take_batch());
        o.out.extend_from_slice(b" world");
        assert_eq!(o.unsent(), b"hello");
        assert!(!o.advance(2));
        assert_eq!(o.unsent(), b"llo");
        assert!(o.take_batch()); // still the partial batch
        assert_eq!(o.unsent(), b"llo");
        assert!(o.advance(3));
        assert_eq!(o.pending(), 6);
        assert_eq!(o.held_bytes(), 6);
        assert!(o.take_batch());
        assert_eq!(o.unsent(), b" world");
    }

    #[test]
    fn a_mostly_sent_large_batch_is_compacted() {
        let mut o = Output::new();
        o.out.extend((0..1_000_000u32).map(|i| i as u8));
        assert!(o.take_batch());
        assert!(o.held_bytes() >= 1_000_000);
        assert!(!o.advance(990_000));
        assert_eq!(o.pending(), 10_000);
        assert_eq!(o.unsent()[0], (990_000u32 % 256) as u8);
        assert!(
            o.sending.capacity() <= IDLE_BUFFER_KEEP_BYTES,
            "the tail moved into a small buffer"
        );
        assert_eq!(o.held_bytes(), 10_000);
        assert!(o.advance(10_000));
        assert_eq!(o.pending(), 0);
    }
}
