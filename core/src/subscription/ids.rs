//! [`ItemIds`]: monitored item ids that name their item's slot, so finding an item by its id
//! is one index into the item table, with no id → slot table beside it (about 10 bytes an
//! item at a million items).
//!
//! An id is `generation << slot_bits | slot`: `slot_bits` hold any slot the shard's item limit
//! allows, the bits above are the slot's generation, which moves on each time the slot takes
//! a new item. The item keeps its id and a lookup compares it, so the id of a deleted item
//! names nothing (`Bad_MonitoredItemIdInvalid`) until its slot has been reused through every
//! other generation. Freed slots are reused oldest first (a queue), so a slot's generation
//! moves on only when every slot freed before it was taken again: with the default limit of
//! a million items per shard (20 slot bits, 4,095 generations), a stale id comes back after
//! 4,095 creations in that one slot, and only when the freed slots are fewer than that. No
//! id is 0 (generation 0 is never used).
//!
//! Items that came with a subscription from another shard (cross-shard
//! TransferSubscriptions) keep the ids that shard gave them; those ids name another shard's
//! slots, so they are looked up in a small table of their own (`foreign`, empty unless a
//! subscription moved here). Ids are qualified by their subscription in every service (Part 4
//! §5.13): such an id is unique within its subscription (a new item there never takes an id
//! one of them has), and an item of another subscription of this shard may have the same id.

use std::collections::VecDeque;

use hashbrown::HashTable;

/// Most bits an id gives to the slot: at least 8 bits of generation are left.
pub(super) const SLOT_BITS_MAX: u32 = 24;

/// An item that came from another shard with its id.
#[derive(Clone, Copy, Debug)]
struct Foreign {
    id: u32,
    /// The slot of its subscription.
    sub: u32,
    /// The slot it holds here.
    slot: u32,
    /// The local id its slot has while it holds it (its generation is the slot's).
    local: u32,
}

/// The ids of one shard's monitored items (see the module docs).
#[derive(Debug)]
pub(super) struct ItemIds {
    slot_bits: u32,
    /// Freed slots, oldest first, each as the local id it last had (its generation).
    free: VecDeque<u32>,
    /// Slots handed out so far (the next new slot).
    slots: u32,
    /// Items holding ids from another shard.
    foreign: HashTable<Foreign>,
    /// Live items.
    live: usize,
}

fn id_hash(id: u32) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(id)
}

impl ItemIds {
    /// Ids for at most `max_items` live items (the slots they need; at most
    /// 2^[`SLOT_BITS_MAX`] are handed out).
    pub(super) fn new(max_items: u32) -> ItemIds {
        let slot_bits =
            (u32::BITS - max_items.saturating_sub(1).leading_zeros()).clamp(1, SLOT_BITS_MAX);
        ItemIds {
            slot_bits,
            free: VecDeque::new(),
            slots: 0,
            foreign: HashTable::new(),
            live: 0,
        }
    }

    /// Live items.
    pub(super) fn live(&self) -> usize {
        self.live
    }

    fn mask(&self) -> u32 {
        (1 << self.slot_bits) - 1
    }

    /// How many more items there are slots for (whatever the item limit).
    pub(super) fn room(&self) -> usize {
        let new = (u64::from(self.mask()) + 1).saturating_sub(u64::from(self.slots));
        self.free.len() + new as usize
    }

    /// The slot an id names (whether an item there has that id is the caller's check).
    #[inline]
    pub(super) fn slot_of(&self, id: u32) -> u32 {
        id & self.mask()
    }

    /// `id` with its slot's generation moved on (never 0).
    fn next_generation(&self, id: u32) -> u32 {
        let generation = (id >> self.slot_bits) + 1;
        let generation = if generation >> (u32::BITS - self.slot_bits) != 0 {
            1
        } else {
            generation
        };
        generation << self.slot_bits | (id & self.mask())
    }

    /// A slot for a new item, as its new local id: the oldest freed one, or a new one
    /// (`None` past the slots an id can name).
    fn take_slot(&mut self) -> Option<u32> {
        if let Some(last) = self.free.pop_front() {
            return Some(self.next_generation(last));
        }
        if self.slots > self.mask() {
            return None;
        }
        let slot = self.slots;
        self.slots += 1;
        Some(1 << self.slot_bits | slot)
    }

    /// A new local item of subscription slot `sub`: its (slot, id), or `None` when no slot
    /// is left. The id is none of that subscription's items from another shard.
    pub(super) fn create(&mut self, sub: u32) -> Option<(u32, u32)> {
        let mut id = self.take_slot()?;
        // At most one more generation per item of the subscription that came from another
        // shard with an id of this slot (almost always none).
        let mut tries = 0u32;
        while self.foreign_slot(sub, id).is_some() {
            tries += 1;
            if tries >> (u32::BITS - self.slot_bits) != 0 {
                // Every generation of the slot is taken there: it stays free.
                self.free.push_back(id);
                return None;
            }
            id = self.next_generation(id);
        }
        self.live += 1;
        Some((id & self.mask(), id))
    }

    /// A slot for an item of subscription slot `sub` that came from another shard with `id`
    /// (unique within its subscription); `None` when no slot is left.
    pub(super) fn adopt(&mut self, sub: u32, id: u32) -> Option<u32> {
        let local = self.take_slot()?;
        let slot = local & self.mask();
        let f = Foreign {
            id,
            sub,
            slot,
            local,
        };
        self.foreign
            .insert_unique(id_hash(id), f, |f| id_hash(f.id));
        self.live += 1;
        Some(slot)
    }

    /// The slot of subscription slot `sub`'s item with `id` among the items from another
    /// shard.
    #[inline]
    pub(super) fn foreign_slot(&self, sub: u32, id: u32) -> Option<u32> {
        if self.foreign.is_empty() {
            return None;
        }
        self.foreign
            .find(id_hash(id), |f| f.id == id && f.sub == sub)
            .map(|f| f.slot)
    }

    /// The item with `id` in `slot` is gone: the slot is free (its generation kept).
    pub(super) fn release(&mut self, slot: u32, id: u32) {
        let local = match self.foreign.find_entry(id_hash(id), |f| f.slot == slot) {
            Ok(e) => e.remove().0.local,
            Err(_) => id,
        };
        debug_assert_eq!(local & self.mask(), slot);
        if local & self.mask() != slot {
            return; // not an id this table handed out for the slot: the slot stays taken
        }
        self.live = self.live.saturating_sub(1);
        self.free.push_back(local);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_name_their_slot_and_a_reused_slot_gets_a_new_generation() {
        let mut ids = ItemIds::new(1_000_000);
        assert_eq!(ids.slot_bits, 20);
        let (s0, a) = ids.create(0).unwrap();
        let (s1, b) = ids.create(0).unwrap();
        assert_eq!((s0, s1), (0, 1));
        assert_ne!(a, 0);
        assert_eq!(ids.slot_of(a), 0);
        assert_eq!(ids.slot_of(b), 1);
        assert_eq!(ids.live(), 2);
        ids.release(s0, a);
        assert_eq!(ids.live(), 1);
        // Slot 0 again, another generation: the old id is not the new one.
        let (s, c) = ids.create(0).unwrap();
        assert_eq!(s, 0);
        assert_ne!(c, a);
        assert_eq!(ids.slot_of(c), 0);
    }

    #[test]
    fn freed_slots_are_reused_oldest_first() {
        let mut ids = ItemIds::new(100);
        let made: Vec<(u32, u32)> = (0..4).map(|_| ids.create(0).unwrap()).collect();
        ids.release(made[2].0, made[2].1);
        ids.release(made[0].0, made[0].1);
        assert_eq!(ids.create(0).unwrap().0, made[2].0);
        assert_eq!(ids.create(0).unwrap().0, made[0].0);
        assert_eq!(ids.create(0).unwrap().0, 4, "then a new slot");
    }

    #[test]
    fn a_slot_goes_through_every_generation_but_0_before_an_id_comes_back() {
        let mut ids = ItemIds::new(1 << 24);
        assert_eq!(ids.slot_bits, 24);
        let (slot, first) = ids.create(0).unwrap();
        let mut seen = std::collections::HashSet::new();
        seen.insert(first);
        let mut id = first;
        for _ in 0..254 {
            ids.release(slot, id);
            let (s, next) = ids.create(0).unwrap();
            assert_eq!(s, slot);
            assert_ne!(next, 0);
            assert!(seen.insert(next), "generation repeated early: {next:#x}");
            id = next;
        }
        ids.release(slot, id);
        let (_, again) = ids.create(0).unwrap();
        assert_eq!(again, first, "255 generations, then the first again");
    }

    #[test]
    fn slots_past_what_an_id_names_are_refused() {
        let mut ids = ItemIds::new(2);
        assert_eq!(ids.slot_bits, 1);
        assert!(ids.create(0).is_some());
        assert!(ids.create(0).is_some());
        assert_eq!(ids.create(0), None);
    }

    #[test]
    fn ids_from_another_shard_are_found_by_subscription_and_never_handed_out_there() {
        let mut ids = ItemIds::new(1_000_000);
        // The first local id of slot 0 and 1 would be these:
        let local0 = 1 << 20;
        let local1 = 1 << 20 | 1;
        // An item of subscription 7 arrives with the id a new slot 1 would have.
        let slot = ids.adopt(7, local1).unwrap();
        assert_eq!(slot, 0);
        assert_eq!(ids.foreign_slot(7, local1), Some(0));
        assert_eq!(
            ids.foreign_slot(8, local1),
            None,
            "qualified by subscription"
        );
        // A new item of subscription 7 skips that id; one of subscription 8 may have it.
        let (s, id) = ids.create(7).unwrap();
        assert_eq!(s, 1);
        assert_ne!(id, local1);
        ids.release(s, id);
        let (s, id) = ids.create(8).unwrap();
        assert_eq!(
            (s, id),
            (1, ids.next_generation(ids.next_generation(local1)))
        );
        // Released, the adopted item's slot keeps the generation it had here.
        ids.release(slot, local1);
        assert_eq!(ids.foreign_slot(7, local1), None);
        let (s, id) = ids.create(7).unwrap();
        assert_eq!(s, 0);
        assert_eq!(id, ids.next_generation(local0));
        assert_eq!(ids.live(), 2);
    }
}
