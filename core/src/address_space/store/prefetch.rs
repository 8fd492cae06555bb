//! Reading ahead: the store's lookups of many nodes, overlapped.
//!
//! At a million nodes a lookup and a read are a chain of cache misses, each address known
//! only once the one before arrived: the id index's slot, the node's record, the bytes of its
//! string NodeId (compared to confirm the match) and its value cell. Taken one node after
//! another, a Read of 100 values waits for 400 misses in series. [`Store::prefetch_nodes`]
//! walks a group of NodeIds in stages instead — every slot asked for, then every record, then
//! every id and cell — so each stage waits for the group's misses together, and the real
//! lookups and reads that follow find their lines in the cache. Nothing here decides
//! anything: a guess that is wrong (a false match of the slot's four tag bits, a node
//! removed meanwhile) costs a wasted line, never a different answer.

use super::{id_hash, id_kind, Hash, Store, DENSE_ID_MAX, NO_INDEX};
use crate::address_space::NodeClass;
use crate::types::{Identifier, NodeId};

/// How many NodeIds [`Store::prefetch_nodes`] reads ahead at once (the rest of a longer
/// group is ignored: callers walk their requests in groups of this many). 16 nodes of about
/// six lines each stay well inside a first-level data cache, and 16 misses in flight are
/// about what a core can track.
pub(crate) const AHEAD: usize = 16;

/// Starts loading the cache lines holding the first and the last byte of `x` into the CPU's
/// caches, without waiting for them (a 56-byte record straddles two lines seven times in
/// eight). A hint only: nothing any read sees changes. A no-op on targets other than x86-64.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(x: &T) {
    let p = (x as *const T).cast::<u8>();
    prefetch_line(p);
    prefetch_line(p.wrapping_add(std::mem::size_of_val(x).saturating_sub(1)));
}

#[inline(always)]
fn prefetch_line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it reads no memory into the program, changes no
    // architectural state and never faults, whatever the address (Intel SDM and AMD APM,
    // PREFETCHh); `p` points into a value the caller borrows anyway. SSE, which the
    // intrinsic needs, is in x86-64's baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How far reading ahead got for one NodeId.
#[derive(Clone, Copy)]
enum Ahead {
    /// Nothing to follow (no such node, or past the group).
    Done,
    /// A dense id: its entry in `dense[ns]`.
    Dense(u16, u32),
    /// A hashed id: its hash (the slot was asked for).
    Hashed(Hash),
    /// The likely node (its record was asked for).
    Node(u32),
}

impl Store {
    /// Reads ahead what looking up `ids` and then reading their nodes will touch (see the
    /// module documentation): at most [`AHEAD`] of them; with `true` beside an id, the
    /// Variable's value cell as well. Changes nothing and returns nothing.
    pub(crate) fn prefetch_nodes<'a>(&self, ids: impl Iterator<Item = (&'a NodeId, bool)>) {
        let mut at = [(Ahead::Done, false); AHEAD];
        let mut n = 0;
        // Stage 1: the id index's slots (or the dense tables' entries).
        for (slot, (id, cell)) in at.iter_mut().zip(ids) {
            *slot = (self.ahead_index(id), cell);
            n += 1;
        }
        let at = at.get_mut(..n).unwrap_or_default();
        // Stage 2: the slots read; the records.
        for (a, _) in at.iter_mut() {
            *a = self.ahead_record(*a);
        }
        // Stage 3: the records read; the ids' bytes and the cells.
        for &(a, cell) in at.iter() {
            self.ahead_parts(a, cell);
        }
    }

    #[inline]
    fn ahead_index(&self, id: &NodeId) -> Ahead {
        if let Identifier::Numeric(n) = id.identifier {
            if n < DENSE_ID_MAX {
                if let Some(t) = self.dense.get(id.namespace as usize) {
                    return match t.get(n as usize) {
                        Some(e) => {
                            prefetch(e);
                            Ahead::Dense(id.namespace, n)
                        }
                        None => Ahead::Done,
                    };
                }
            }
        }
        let h = id_hash(id);
        self.ids.prefetch(h);
        Ahead::Hashed(h)
    }

    #[inline]
    fn ahead_record(&self, a: Ahead) -> Ahead {
        let i = match a {
            Ahead::Dense(ns, n) => self
                .dense
                .get(ns as usize)
                .and_then(|t| t.get(n as usize))
                .copied()
                .filter(|&i| i != NO_INDEX),
            Ahead::Hashed(h) => self.ids.likely(h),
            _ => None,
        };
        match i.and_then(|i| Some((i, self.recs.get(i)?))) {
            Some((i, r)) => {
                prefetch(r);
                Ahead::Node(i)
            }
            None => Ahead::Done,
        }
    }

    #[inline]
    fn ahead_parts(&self, a: Ahead, cell: bool) {
        let Ahead::Node(i) = a else { return };
        let Some(r) = self.rec(i) else { return };
        if r.id_kind != id_kind::NUMERIC {
            prefetch(self.id_raw(r));
        }
        if cell && r.class == NodeClass::Variable.0 as u8 {
            if let Some(c) = self.cells.get(r.data) {
                prefetch(c);
            }
        }
    }
}

impl Store {
    /// Reads ahead the record of the node at `index` (a sampling source's node, known by
    /// index: no id to look up). A hint only, as [`prefetch`].
    #[inline]
    pub(crate) fn prefetch_record(&self, index: u32) {
        if let Some(r) = self.recs.get(index) {
            prefetch(r);
        }
    }

    /// Reads ahead the value cell of the Variable at `index`, its record read (best called a
    /// few steps after [`Store::prefetch_record`] of the same node, so the record is there).
    /// A hint only, as [`prefetch`].
    #[inline]
    pub(crate) fn prefetch_cell(&self, index: u32) {
        if let Some(r) = self.recs.get(index) {
            if r.class == NodeClass::Variable.0 as u8 {
                if let Some(c) = self.cells.get(r.data) {
                    prefetch(c);
                }
            }
        }
    }
}
