//! The cross-shard event bus: a bounded, lock-free broadcast ring.
//!
//! Events are raised on any shard (a session closes on its shard, a Call acknowledges the
//! alarm on another, shard 0 runs the Demo generator) and every shard's event monitored
//! items must see them. Subscribers live on their session's shard, so each shard keeps
//! one [`EventCursor`] and fans what it polls out to its own items.
//!
//! * `capacity` slots, each an `ArcSwapOption<Stamped>` (the event and its sequence number),
//!   and a global `write` counter: the next sequence number to hand out.
//! * [`EventBus::publish`]: `seq = write.fetch_add(1)`, then the slot `seq % capacity` is
//!   replaced by the new event unless a later sequence number already sits there (a
//!   compare-and-swap loop: two publishers a whole lap apart never let the older one win).
//!   Publishing allocates one `Arc`; it is rare next to polling.
//! * [`EventCursor::poll`]: one acquire load of `write`; if it equals the cursor's next
//!   sequence number, nothing happened and the poll returns (no other shared access). Else
//!   it reads slots from its position: a slot holding exactly the expected sequence is
//!   delivered; a slot holding an older one means the publisher has taken the number but not
//!   stored yet, so the poll stops there and resumes next time (the order is kept); a slot
//!   holding a newer one means this cursor was lapped. A cursor more than `capacity` behind
//!   `write` jumps to the oldest event still in the ring. Events skipped either way are
//!   returned as the `missed` count (the caller reports them, e.g. as an
//!   EventQueueOverflowEventType or a log line).
//! * Memory is bounded: `capacity` events at most, each freed when its slot is overwritten
//!   and the last reader drops its guard.
//!
//! A poll delivers at most `capacity` events (it never runs past `write` read at its start).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::Event;

/// An event and the sequence number it was published under.
#[derive(Debug)]
struct Stamped {
    seq: u64,
    event: Event,
}

/// The broadcast ring. See the module documentation.
pub struct EventBus {
    slots: Box<[ArcSwapOption<Stamped>]>,
    write: AtomicU64,
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("capacity", &self.slots.len())
            .field("published", &self.write.load(Ordering::Relaxed))
            .finish()
    }
}

impl EventBus {
    /// A ring of `capacity` slots (at least 1).
    pub fn new(capacity: usize) -> EventBus {
        let slots = (0..capacity.max(1)).map(|_| ArcSwapOption::empty()).collect();
        EventBus { slots, write: AtomicU64::new(0) }
    }

    /// Slots in the ring.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Events published so far (the next sequence number).
    pub fn published(&self) -> u64 {
        self.write.load(Ordering::Acquire)
    }

    /// Publishes an event to every shard's cursor.
    pub fn publish(&self, event: Event) {
        let seq = self.write.fetch_add(1, Ordering::AcqRel);
        // `seq % len` is a slot (the ring has at least one).
        let Some(slot) = self.slots.get((seq % self.slots.len() as u64) as usize) else { return };
        let new = Arc::new(Stamped { seq, event });
        // Keep whichever of the two is newer (a publisher a whole lap later may have won).
        slot.rcu(|cur| match cur {
            Some(c) if c.seq > seq => Some(Arc::clone(c)),
            _ => Some(Arc::clone(&new)),
        });
    }

    /// A cursor that sees the events published from now on.
    pub fn cursor(&self) -> EventCursor {
        EventCursor { next: self.published() }
    }
}

/// One reader's position in the bus (one per shard).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventCursor {
    next: u64,
}

impl EventCursor {
    /// The sequence number of the next event this cursor delivers.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// Calls `f` with every event published since the last poll, in order; returns how many
    /// were missed because the ring lapped this cursor. Cheap when nothing is new: one
    /// atomic load.
    pub fn poll(&mut self, bus: &EventBus, mut f: impl FnMut(&Event)) -> u64 {
        let end = bus.write.load(Ordering::Acquire);
        if end == self.next {
            return 0;
        }
        let cap = bus.slots.len() as u64;
        let mut missed = 0;
        if end.saturating_sub(self.next) > cap {
            let oldest = end - cap;
            missed += oldest - self.next;
            self.next = oldest;
        }
        while self.next < end {
            let Some(slot) = bus.slots.get((self.next % cap) as usize) else { break };
            let guard = slot.load();
            match &*guard {
                Some(s) if s.seq == self.next => {
                    f(&s.event);
                    self.next += 1;
                }
                Some(s) if s.seq > self.next => {
                    // Lapped: everything up to the newest lap's start is gone.
                    let skip_to = s.seq.saturating_sub(cap - 1).max(self.next + 1);
                    missed += skip_to - self.next;
                    self.next = skip_to;
                }
                // Taken but not stored yet (or an older lap still there): resume next poll.
                _ => break,
            }
        }
        missed
    }
}
