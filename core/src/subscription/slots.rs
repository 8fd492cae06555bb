//! [`Slots`]: a table of optional values addressed by a `u32` slot, grown in fixed chunks.
//!
//! The shard's monitored items and sampling sources live here. A `Vec` doubles when it is
//! full and copies everything into the new allocation: at a million items (a few hundred
//! bytes each) one CreateMonitoredItems call paid for copying the whole table and stalled the
//! shard's loop for a fifth of a second. Chunks never move once allocated, so growing costs
//! one chunk's allocation, whatever the table's size; a lookup is one more index into a small
//! table of chunk pointers (which stays in the cache).

/// Slots per chunk.
const CHUNK: usize = 4096;

pub(crate) struct Slots<T> {
    chunks: Vec<Box<[Option<T>]>>,
    len: usize,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Slots {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Slots<T> {
    /// Slots handed out so far (free or not).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Slot `i`: `None` past the last chunk; a slot not handed out yet (in the last chunk)
    /// reads as a free one, `Some(&None)`.
    pub(crate) fn get(&self, i: usize) -> Option<&Option<T>> {
        self.chunks.get(i / CHUNK).and_then(|c| c.get(i % CHUNK))
    }

    /// As [`Slots::get`].
    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut Option<T>> {
        self.chunks
            .get_mut(i / CHUNK)
            .and_then(|c| c.get_mut(i % CHUNK))
    }

    /// Starts loading slot `i`'s cache lines without reading it (the chunk table only): a
    /// hint, nothing changes (see `address_space::store::prefetch`).
    #[inline(always)]
    pub(crate) fn prefetch(&self, i: usize) {
        if let Some(slot) = self.get(i) {
            crate::address_space::store::prefetch::prefetch(slot);
        }
    }

    /// Puts `v` into slot `i`: a slot handed out before, or the next new one (`len`).
    /// Returns false (and keeps nothing) for a slot past that.
    pub(crate) fn put(&mut self, i: u32, v: T) -> bool {
        let i = i as usize;
        if i > self.len {
            return false;
        }
        if i == self.len {
            if i / CHUNK == self.chunks.len() {
                self.chunks
                    .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
            }
            self.len += 1;
        }
        match self.get_mut(i) {
            Some(slot) => {
                *slot = Some(v);
                true
            }
            None => false,
        }
    }

    /// Puts `v` into a free slot from `free` (or a new one) and returns the slot.
    pub(crate) fn insert(&mut self, free: &mut Vec<u32>, v: T) -> u32 {
        // A free list only holds slots of its own table; one out of range is dropped.
        while let Some(i) = free.pop() {
            if (i as usize) >= self.len {
                continue;
            }
            if let Some(slot) = self.get_mut(i as usize) {
                *slot = Some(v);
                return i;
            }
        }
        let i = self.len;
        if i / CHUNK == self.chunks.len() {
            self.chunks
                .push(std::iter::repeat_with(|| None).take(CHUNK).collect());
        }
        self.len += 1;
        if let Some(slot) = self.get_mut(i) {
            *slot = Some(v);
        }
        i as u32
    }
}

/// Values by slot number for a few of a table's slots: chunks of [`CHUNK`] slots, each
/// allocated when a slot of its range first gets a value and freed when its last value is
/// removed (no hashing, no doubling; a slot costs `size_of::<Option<T>>()` in an allocated
/// chunk and nothing otherwise).
pub(crate) struct SparseSlots<T> {
    chunks: Vec<Option<Box<[Option<T>]>>>,
    /// Values in each chunk.
    counts: Vec<u16>,
}

impl<T> Default for SparseSlots<T> {
    fn default() -> Self {
        SparseSlots {
            chunks: Vec::new(),
            counts: Vec::new(),
        }
    }
}

impl<T> SparseSlots<T> {
    pub(crate) fn get(&self, i: u32) -> Option<&T> {
        let i = i as usize;
        self.chunks
            .get(i / CHUNK)?
            .as_ref()?
            .get(i % CHUNK)?
            .as_ref()
    }

    pub(crate) fn get_mut(&mut self, i: u32) -> Option<&mut T> {
        let i = i as usize;
        self.chunks
            .get_mut(i / CHUNK)?
            .as_mut()?
            .get_mut(i % CHUNK)?
            .as_mut()
    }

    pub(crate) fn insert(&mut self, i: u32, v: T) {
        let i = i as usize;
        let c = i / CHUNK;
        if self.chunks.len() <= c {
            self.chunks.resize_with(c + 1, || None);
            self.counts.resize(c + 1, 0);
        }
        if let Some(chunk) = self.chunks.get_mut(c) {
            let chunk =
                chunk.get_or_insert_with(|| std::iter::repeat_with(|| None).take(CHUNK).collect());
            if let Some(slot) = chunk.get_mut(i % CHUNK) {
                if slot.replace(v).is_none() {
                    if let Some(n) = self.counts.get_mut(c) {
                        *n += 1;
                    }
                }
            }
        }
    }

    pub(crate) fn remove(&mut self, i: u32) -> Option<T> {
        let i = i as usize;
        let c = i / CHUNK;
        let v = self
            .chunks
            .get_mut(c)?
            .as_mut()?
            .get_mut(i % CHUNK)?
            .take()?;
        if let Some(n) = self.counts.get_mut(c) {
            *n -= 1;
            if *n == 0 {
                if let Some(chunk) = self.chunks.get_mut(c) {
                    *chunk = None;
                }
            }
        }
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_grow_by_chunks_and_reuse_freed_ones() {
        let mut s: Slots<u64> = Slots::default();
        let mut free = Vec::new();
        for i in 0..(CHUNK as u64 * 2 + 5) {
            assert_eq!(s.insert(&mut free, i), i as u32);
        }
        assert_eq!(s.len(), CHUNK * 2 + 5);
        assert_eq!(s.chunks.len(), 3);
        assert_eq!(s.get(CHUNK + 7), Some(&Some(CHUNK as u64 + 7)));
        assert_eq!(s.get(CHUNK * 2 + 5), Some(&None), "not handed out: free");
        assert_eq!(s.get(CHUNK * 3), None, "past the last chunk");
        // A freed slot is handed out again; a bogus free entry is skipped.
        *s.get_mut(10).unwrap() = None;
        free.push(10);
        free.push(u32::MAX);
        free.push((CHUNK * 2 + 6) as u32); // in the last chunk, never handed out
        assert_eq!(s.insert(&mut free, 99), 10);
        assert!(free.is_empty());
        assert_eq!(s.get(10), Some(&Some(99)));
        // Chunks do not move as the table grows.
        let first = s.get(0).unwrap() as *const Option<u64>;
        for i in 0..(CHUNK as u64 * 4) {
            s.insert(&mut free, i);
        }
        assert_eq!(first, s.get(0).unwrap() as *const Option<u64>);
    }

    #[test]
    fn sparse_slots_allocate_only_the_chunks_used() {
        let mut s: SparseSlots<u64> = SparseSlots::default();
        assert_eq!(s.get(5), None);
        assert_eq!(s.remove(5), None);
        s.insert(CHUNK as u32 * 3 + 1, 7);
        assert_eq!(s.chunks.len(), 4);
        assert_eq!(s.chunks.iter().filter(|c| c.is_some()).count(), 1);
        assert_eq!(s.get(CHUNK as u32 * 3 + 1), Some(&7));
        assert_eq!(s.get(CHUNK as u32 * 3), None);
        assert_eq!(s.get(1), None);
        *s.get_mut(CHUNK as u32 * 3 + 1).unwrap() = 8;
        s.insert(2, 9);
        assert_eq!(s.chunks.iter().filter(|c| c.is_some()).count(), 2);
        assert_eq!(s.remove(CHUNK as u32 * 3 + 1), Some(8));
        assert_eq!(s.get(CHUNK as u32 * 3 + 1), None);
        assert_eq!((s.get(2), s.get(u32::MAX)), (Some(&9), None));
        // The chunk whose last value went is freed; a value put again where one is does not
        // count twice.
        assert_eq!(s.chunks.iter().filter(|c| c.is_some()).count(), 1);
        s.insert(3, 1);
        s.insert(3, 2);
        assert_eq!(s.remove(2), Some(9));
        assert!(s.chunks[0].is_some(), "slot 3 is still there");
        assert_eq!(s.remove(3), Some(2));
        assert_eq!(s.remove(3), None);
        assert!(s.chunks.iter().all(Option::is_none));
    }

    #[test]
    fn put_fills_a_given_slot_or_the_next_new_one() {
        let mut s: Slots<u64> = Slots::default();
        assert!(s.put(0, 7));
        assert!(!s.put(2, 9), "past the next new slot");
        assert_eq!(s.len(), 1);
        assert!(s.put(1, 8));
        assert!(s.put(0, 6));
        assert_eq!((s.get(0), s.get(1)), (Some(&Some(6)), Some(&Some(8))));
        for i in 2..(CHUNK as u32 + 1) {
            assert!(s.put(i, u64::from(i)));
        }
        assert_eq!(s.chunks.len(), 2);
        assert_eq!(s.get(CHUNK), Some(&Some(CHUNK as u64)));
    }
}
