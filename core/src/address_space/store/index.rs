//! A hash index of `u32` entries (node indexes, string ids) whose keys live elsewhere: the
//! table keeps no key, only the entry and four bits of its hash, and the caller compares the
//! key behind an entry when those bits match. Four bytes a slot, at most three quarters
//! full: about 5 to 11 bytes per entry, where a `HashMap<NodeId, u32>` holds the NodeId
//! itself (32 bytes and its string's allocation).
//!
//! Split by the hash's top byte into 256 `Arc`'d sub-tables, so a version of the address
//! space that adds or removes an entry copies one of them (1/256 of the index).
//! Open addressing with linear probing; removed entries leave a tombstone until the
//! sub-table is rebuilt.

use std::sync::Arc;

const SUBS: usize = 256;
/// Entries are below this (28 bits); the four bits above hold the hash's.
pub(crate) const MAX_ENTRY: u32 = (1 << 28) - 2;
const ENTRY_MASK: u32 = (1 << 28) - 1;
const EMPTY: u32 = u32::MAX;
const TOMB: u32 = u32::MAX - 1;

/// The hash of a key, split: which sub-table, the slot to start at, the bits kept.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hash(pub u64);

impl Hash {
    #[inline(always)]
    fn sub(self) -> usize {
        (self.0 >> 56) as usize
    }
    #[inline(always)]
    fn start(self) -> usize {
        self.0 as usize
    }
    #[inline(always)]
    fn tag(self) -> u32 {
        // Four bits from the middle, never all ones (so no slot equals EMPTY or TOMB).
        (((self.0 >> 40) as u32) % 15) << 28
    }
}

#[derive(Clone, Default)]
struct Sub {
    /// `tag | entry`, EMPTY or TOMB; the length is 0 or a power of two.
    slots: Vec<u32>,
    len: u32,
    tombs: u32,
}

impl Sub {
    fn find(&self, h: Hash, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let mask = self.slots.len().checked_sub(1)?;
        let tag = h.tag();
        let mut i = h.start() & mask;
        for _ in 0..self.slots.len() {
            let s = *self.slots.get(i)?;
            if s == EMPTY {
                return None;
            }
            if s != TOMB && s & !ENTRY_MASK == tag && eq(s & ENTRY_MASK) {
                return Some(s & ENTRY_MASK);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Inserts without checking for an equal key (the caller did).
    fn insert(&mut self, h: Hash, entry: u32, rehash: &dyn Fn(u32) -> Hash) {
        if (self.len + self.tombs + 1) as usize * 4 > self.slots.len() * 3 {
            self.grow(rehash);
        }
        let mask = self.slots.len() - 1;
        let mut i = h.start() & mask;
        loop {
            match self.slots.get_mut(i) {
                Some(s) if *s == EMPTY || *s == TOMB => {
                    if *s == TOMB {
                        self.tombs -= 1;
                    }
                    *s = h.tag() | entry;
                    self.len += 1;
                    return;
                }
                Some(_) => i = (i + 1) & mask,
                None => return,
            }
        }
    }

    /// Inserts `entry` unless an entry `eq` accepts is under `h` already (that one is the
    /// error): the duplicate check and the insert in one probe.
    fn insert_unique(
        &mut self,
        h: Hash,
        entry: u32,
        mut eq: impl FnMut(u32) -> bool,
        rehash: &dyn Fn(u32) -> Hash,
    ) -> Result<(), u32> {
        if (self.len + self.tombs + 1) as usize * 4 > self.slots.len() * 3 {
            self.grow(rehash);
        }
        let mask = self.slots.len() - 1;
        let tag = h.tag();
        let mut i = h.start() & mask;
        let mut tomb = None;
        // At most three quarters of the slots are taken (entries and tombstones): the probe
        // reaches an empty one.
        for _ in 0..self.slots.len() {
            let Some(&s) = self.slots.get(i) else { break };
            if s == EMPTY {
                break;
            }
            if s == TOMB {
                tomb.get_or_insert(i);
            } else if s & !ENTRY_MASK == tag && eq(s & ENTRY_MASK) {
                return Err(s & ENTRY_MASK);
            }
            i = (i + 1) & mask;
        }
        let at = tomb.unwrap_or(i);
        if let Some(s) = self.slots.get_mut(at) {
            if *s == TOMB {
                self.tombs -= 1;
            }
            *s = tag | entry;
            self.len += 1;
        }
        Ok(())
    }

    fn remove(&mut self, h: Hash, entry: u32) -> bool {
        let Some(mask) = self.slots.len().checked_sub(1) else {
            return false;
        };
        let mut i = h.start() & mask;
        for _ in 0..self.slots.len() {
            match self.slots.get_mut(i) {
                Some(s) if *s == EMPTY => return false,
                Some(s) if *s != TOMB && *s & ENTRY_MASK == entry => {
                    *s = TOMB;
                    self.len -= 1;
                    self.tombs += 1;
                    return true;
                }
                Some(_) => i = (i + 1) & mask,
                None => return false,
            }
        }
        false
    }

    /// Rebuilds at a size that leaves room (twice the entries, at least 8 slots).
    fn grow(&mut self, rehash: &dyn Fn(u32) -> Hash) {
        self.grow_for(self.len as usize + 1, rehash);
    }

    /// Rebuilds with room for `entries` (twice them, at least 8 slots).
    fn grow_for(&mut self, entries: usize, rehash: &dyn Fn(u32) -> Hash) {
        let want = (entries * 2).next_power_of_two().max(8);
        let old = std::mem::replace(&mut self.slots, vec![EMPTY; want]);
        self.len = 0;
        self.tombs = 0;
        for s in old {
            if s != EMPTY && s != TOMB {
                let e = s & ENTRY_MASK;
                self.insert(rehash(e), e, rehash);
            }
        }
    }
}

/// See the module documentation.
#[derive(Clone)]
pub(crate) struct HashIndex {
    subs: Vec<Arc<Sub>>,
}

impl Default for HashIndex {
    fn default() -> Self {
        let empty = Arc::new(Sub::default());
        HashIndex {
            subs: (0..SUBS).map(|_| Arc::clone(&empty)).collect(),
        }
    }
}

impl HashIndex {
    /// Moves the index out, leaving an empty one that allocates nothing (for an insert whose
    /// rehash closure borrows the store beside it: `Default` would allocate 256 pointers
    /// per insert, which made a million-node build take seconds).
    pub(crate) fn take(&mut self) -> HashIndex {
        std::mem::replace(self, HashIndex { subs: Vec::new() })
    }

    /// The entry whose key `eq` accepts, among those with hash `h`.
    #[inline]
    pub(crate) fn find(&self, h: Hash, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.subs.get(h.sub())?.find(h, eq)
    }

    /// Adds `entry` (≤ [`MAX_ENTRY`]) under hash `h`; `rehash` gives the hash of any entry
    /// (for growing). The caller checked that no equal key is in.
    pub(crate) fn insert(&mut self, h: Hash, entry: u32, rehash: &dyn Fn(u32) -> Hash) {
        if let Some(s) = self.subs.get_mut(h.sub()) {
            Arc::make_mut(s).insert(h, entry & ENTRY_MASK, rehash);
        }
    }

    /// Adds `entry` under hash `h` unless an entry `eq` accepts is there already (returned
    /// as the error, nothing changed): one probe where a find and an insert take two. A
    /// sub-table shared with another version is searched before it is copied, so a
    /// duplicate copies nothing.
    pub(crate) fn insert_unique(
        &mut self,
        h: Hash,
        entry: u32,
        mut eq: impl FnMut(u32) -> bool,
        rehash: &dyn Fn(u32) -> Hash,
    ) -> Result<(), u32> {
        let Some(s) = self.subs.get_mut(h.sub()) else {
            return Ok(());
        };
        if Arc::get_mut(s).is_none() {
            if let Some(e) = s.find(h, &mut eq) {
                return Err(e);
            }
        }
        Arc::make_mut(s).insert_unique(h, entry & ENTRY_MASK, eq, rehash)
    }

    /// Makes room for `extra` more entries spread evenly over the sub-tables, so a builder
    /// that knows how many nodes come rebuilds each sub-table once, not at every doubling.
    pub(crate) fn reserve(&mut self, extra: usize, rehash: &dyn Fn(u32) -> Hash) {
        let per_sub = extra.div_ceil(SUBS);
        for s in &mut self.subs {
            let need = s.len as usize + per_sub;
            if need * 4 > s.slots.len() * 3 {
                Arc::make_mut(s).grow_for(need, rehash);
            }
        }
    }

    /// Reads the slot a probe for `h` starts at and throws it away: issued ahead of the
    /// probe (and of another table's), the cache misses of both are waited for together.
    #[inline]
    pub(crate) fn touch(&self, h: Hash) {
        if let Some(s) = self.subs.get(h.sub()) {
            let mask = s.slots.len().wrapping_sub(1);
            std::hint::black_box(s.slots.get(h.start() & mask).copied());
        }
    }

    /// Starts loading the slot a probe for `h` starts at, without waiting for it
    /// ([`super::prefetch`]).
    #[inline]
    pub(crate) fn prefetch(&self, h: Hash) {
        if let Some(s) = self.subs.get(h.sub()) {
            let mask = s.slots.len().wrapping_sub(1);
            if let Some(slot) = s.slots.get(h.start() & mask) {
                super::prefetch::prefetch(slot);
            }
        }
    }

    /// The entry [`HashIndex::find`] most likely returns for `h`: the first one of the
    /// probe whose tag bits match, its key not compared (a guess, for reading ahead; a
    /// probe longer than a few slots is not followed).
    #[inline]
    pub(crate) fn likely(&self, h: Hash) -> Option<u32> {
        let s = self.subs.get(h.sub())?;
        let mask = s.slots.len().checked_sub(1)?;
        let tag = h.tag();
        let mut i = h.start() & mask;
        for _ in 0..s.slots.len().min(8) {
            let e = *s.slots.get(i)?;
            if e == EMPTY {
                return None;
            }
            if e != TOMB && e & !ENTRY_MASK == tag {
                return Some(e & ENTRY_MASK);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Removes `entry` from under hash `h`; whether it was there.
    pub(crate) fn remove(&mut self, h: Hash, entry: u32) -> bool {
        match self.subs.get_mut(h.sub()) {
            Some(s) if s.find(h, |e| e == entry).is_some() => Arc::make_mut(s).remove(h, entry),
            _ => false,
        }
    }

    /// Bytes held by the slots.
    pub(crate) fn bytes(&self) -> usize {
        self.subs.iter().map(|s| s.slots.len() * 4).sum()
    }
}

/// The hash of bytes with a namespace and a kind (NodeIds, strings): FxHash, then mixed so
/// the top byte and the low bits are both well spread.
#[inline]
pub(crate) fn hash_key(ns: u16, kind: u8, bytes: &[u8]) -> Hash {
    use std::hash::Hasher;
    let mut h = rustc_hash::FxHasher::default();
    h.write_u32(((ns as u32) << 8) | kind as u32);
    h.write(bytes);
    Hash(mix(h.finish()))
}

/// The hash of a number with a namespace and a kind.
#[inline]
pub(crate) fn hash_num(ns: u16, kind: u8, n: u64) -> Hash {
    Hash(mix(
        (((ns as u64) << 8 | kind as u64) << 40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    ))
}

#[inline(always)]
fn mix(mut x: u64) -> u64 {
    // The finalizer of MurmurHash3.
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_find_remove_many() {
        let keys: Vec<String> = (0..20_000).map(|i| format!("key{i}")).collect();
        let h = |e: u32| hash_key(1, 1, keys[e as usize].as_bytes());
        let mut ix = HashIndex::default();
        for e in 0..keys.len() as u32 {
            ix.insert(h(e), e, &h);
        }
        let before = ix.clone();
        for (e, k) in keys.iter().enumerate() {
            let found = ix.find(hash_key(1, 1, k.as_bytes()), |x| keys[x as usize] == *k);
            assert_eq!(found, Some(e as u32));
        }
        assert_eq!(
            ix.find(hash_key(1, 1, b"nope"), |x| keys[x as usize] == "nope"),
            None
        );
        for e in (0..keys.len() as u32).step_by(2) {
            assert!(ix.remove(h(e), e));
            assert!(!ix.remove(h(e), e));
        }
        for e in 0..keys.len() as u32 {
            let k = &keys[e as usize];
            let found = ix.find(h(e), |x| keys[x as usize] == *k);
            assert_eq!(found.is_some(), e % 2 == 1, "{k}");
            // The clone taken before is untouched.
            assert_eq!(before.find(h(e), |x| keys[x as usize] == *k), Some(e));
        }
        // One probe: a key that is in is refused (and nothing changes), a new one goes in.
        for e in (1..keys.len() as u32).step_by(2) {
            let k = &keys[e as usize];
            let found = ix.insert_unique(h(e), e + 1, |x| keys[x as usize] == *k, &h);
            assert_eq!(found, Err(e));
        }
        let mut shared = ix.clone();
        for e in (0..keys.len() as u32).step_by(2) {
            let k = &keys[e as usize];
            assert_eq!(
                shared.insert_unique(h(e), e, |x| keys[x as usize] == *k, &h),
                Ok(())
            );
            assert_eq!(shared.find(h(e), |x| keys[x as usize] == *k), Some(e));
            assert_eq!(ix.find(h(e), |x| keys[x as usize] == *k), None);
        }
        // Re-inserting into tombstones works.
        for e in (0..keys.len() as u32).step_by(2) {
            ix.insert(h(e), e, &h);
        }
        assert!(ix.bytes() < keys.len() * 12, "{}", ix.bytes());
    }

    #[test]
    fn likely_is_mostly_the_entry_found() {
        let keys: Vec<String> = (0..20_000).map(|i| format!("key{i}")).collect();
        let h = |e: u32| hash_key(1, 1, keys[e as usize].as_bytes());
        let mut ix = HashIndex::default();
        assert_eq!(ix.likely(h(0)), None);
        for e in 0..keys.len() as u32 {
            ix.insert(h(e), e, &h);
        }
        // A guess is an entry whose tag bits match; it is the right one unless an earlier
        // entry of the probe shares them (one in 15 per entry passed).
        let right = (0..keys.len() as u32)
            .filter(|&e| ix.likely(h(e)) == Some(e))
            .count();
        assert!(right * 10 > keys.len() * 9, "{right}");
        for e in (0..keys.len() as u32).step_by(7) {
            if let Some(g) = ix.likely(h(e)) {
                assert_eq!(h(g).tag(), h(e).tag());
            }
        }
    }
}
