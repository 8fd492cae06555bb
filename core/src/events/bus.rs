//! The cross-shard event bus: a bounded, lock-free broadcast ring.
//!
//! Events are raised on any shard or thread (a session closes on its shard, a Call
//! acknowledges an alarm on another, the application raises one) and every shard's event monitored
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
//! * Memory is bounded: `capacity` events at most, and in steady state only the events some
//!   cursor has still to read. The bus counts its open cursors ([`EventBus::cursor`] opens
//!   one, [`EventBus::close`] closes it); an event published while no cursor is open is not
//!   stored at all, and each stored event carries how many cursors were open when it was
//!   published: the cursor that reads it last empties its slot. An event whose reader was
//!   lapped or closed before reading it stays until its slot is overwritten (bounded by
//!   `capacity` as before). Measured: without this, the ring filled up to `capacity` events
//!   (about 2 KiB each with their Arc and allocator overhead, ~8 MiB at the default 4096)
//!   even on a server where no shard had an event item, and the churn soak's resident set
//!   grew for its first ten minutes (docs/Limits.md, Soak).
//!
//! Why no cursor can miss an event that was not stored, or find its slot emptied: opening a
//! cursor increments the count, then reads `write` (both SeqCst); publishing increments
//! `write`, then reads the count. If the publisher saw a count that leaves a cursor out, that
//! cursor's increment came after the publisher's read, so its `write` read came after the
//! publisher's increment and it starts past the event. So every cursor that will ask for an
//! event was counted, and the count reaches zero only after all of them read it.
//! [`EventCursor`] is neither `Clone` nor `Copy`, so one cursor never reads an event twice.
//!
//! A poll delivers at most `capacity` events (it never runs past `write` read at its start).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

use super::Event;

/// An event and the sequence number it was published under.
#[derive(Debug)]
struct Stamped {
    seq: u64,
    event: Event,
    /// Cursors open at publication that have not read it yet; the last one empties the slot.
    unread: AtomicUsize,
}

/// The broadcast ring. See the module documentation.
pub struct EventBus {
    slots: Box<[ArcSwapOption<Stamped>]>,
    write: AtomicU64,
    /// Cursors open now ([`EventBus::cursor`] minus [`EventBus::close`]).
    readers: AtomicUsize,
    /// Takes every published event (the history store's event ingest).
    recorder: std::sync::OnceLock<Arc<dyn EventRecorder>>,
}

/// Takes every event published on the bus, on the publishing thread (a shard, or the
/// application's): it must not block or wait (hand the event to a bounded queue and count
/// what does not fit).
pub trait EventRecorder: Send + Sync {
    fn record(&self, event: &Event);
}

impl std::fmt::Debug for EventBus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventBus")
            .field("capacity", &self.slots.len())
            .field("published", &self.write.load(Ordering::Relaxed))
            .field("readers", &self.readers.load(Ordering::Relaxed))
            .finish()
    }
}

impl EventBus {
    /// A ring of `capacity` slots (at least 1).
    pub fn new(capacity: usize) -> EventBus {
        let slots = (0..capacity.max(1))
            .map(|_| ArcSwapOption::empty())
            .collect();
        EventBus {
            slots,
            write: AtomicU64::new(0),
            readers: AtomicUsize::new(0),
            recorder: std::sync::OnceLock::new(),
        }
    }

    /// Hands every event published from now on to `recorder` as well (once per bus: a
    /// second one is refused with `false`). With a recorder, events are built even while
    /// no cursor is open.
    pub fn record(&self, recorder: Arc<dyn EventRecorder>) -> bool {
        self.recorder.set(recorder).is_ok()
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
    /// With no cursor open, nothing will read it and it is dropped (the sequence number is
    /// still used up).
    pub fn publish(&self, event: Event) {
        self.publish_with(|| event);
    }

    /// Like [`EventBus::publish`], building the event only when a cursor is open: events
    /// raised on every session establishment (the audit events) cost nothing while no
    /// monitored item listens for events.
    pub fn publish_with(&self, event: impl FnOnce() -> Event) {
        let seq = self.write.fetch_add(1, Ordering::SeqCst);
        let readers = self.readers.load(Ordering::SeqCst);
        let recorder = self.recorder.get();
        if readers == 0 && recorder.is_none() {
            return;
        }
        let event = event();
        if let Some(r) = recorder {
            r.record(&event);
        }
        if readers == 0 {
            return;
        }
        // `seq % len` is a slot (the ring has at least one).
        let Some(slot) = self.slots.get((seq % self.slots.len() as u64) as usize) else {
            return;
        };
        let new = Arc::new(Stamped {
            seq,
            event,
            unread: AtomicUsize::new(readers),
        });
        // Keep whichever of the two is newer (a publisher a whole lap later may have won).
        slot.rcu(|cur| match cur {
            Some(c) if c.seq > seq => Some(Arc::clone(c)),
            _ => Some(Arc::clone(&new)),
        });
    }

    /// Opens a cursor that sees the events published from now on. Hand it back to
    /// [`EventBus::close`] when done: until then the bus keeps every event for it (a cursor
    /// dropped without closing only costs memory, up to `capacity` events).
    pub fn cursor(&self) -> EventCursor {
        self.readers.fetch_add(1, Ordering::SeqCst);
        EventCursor {
            next: self.write.load(Ordering::SeqCst),
        }
    }

    /// Closes a cursor: events published from now on are not kept for it.
    pub fn close(&self, cursor: EventCursor) {
        let _ = cursor;
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }

    /// Cursors open now.
    pub fn readers(&self) -> usize {
        self.readers.load(Ordering::SeqCst)
    }

    /// Events held in the ring now (a walk over every slot; for tests and diagnostics).
    pub fn held(&self) -> usize {
        self.slots.iter().filter(|s| s.load().is_some()).count()
    }
}

/// One reader's position in the bus (one per shard). Not `Clone`: each open cursor is
/// counted once by the bus (see the module documentation).
#[derive(Debug, PartialEq, Eq)]
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
            let Some(slot) = bus.slots.get((self.next % cap) as usize) else {
                break;
            };
            let guard = slot.load();
            match &*guard {
                Some(s) if s.seq == self.next => {
                    f(&s.event);
                    self.next += 1;
                    if s.unread.fetch_sub(1, Ordering::AcqRel) == 1 {
                        // The last reader: empty the slot unless a later lap took it already.
                        let seq = s.seq;
                        slot.rcu(|cur| match cur {
                            Some(c) if c.seq == seq => None,
                            other => other.clone(),
                        });
                    }
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
