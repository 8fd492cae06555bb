//! Free lists that go from one version of the address space to the next without a copy.
//!
//! What removed nodes give back (node indexes, value cells, sources, class attributes) is
//! only ever read by the writer's next edit, never by a reader of a version. So a version
//! does not keep its free lists: it holds them in a [`Handover`] slot, the edit made on it
//! takes them out (one pointer swap, whatever their length) and the version it publishes
//! holds them next. An edit's cost no longer grows with the nodes ever removed.
//!
//! An edit dropped without being committed gives them back as it found them: each list
//! records what the edit did to it ([`FreeList::rollback`]), which is as long as the edit's
//! own changes. Writers are serialized; two edits begun on one version (one of them is
//! refused at commit) would see the lists once, the other none (its nodes would then get new
//! indexes and cells: nothing is reused twice).

use arc_swap::ArcSwapOption;
use std::sync::Arc;

/// A free list: entries are pushed at the end and taken from anywhere (the end moved into
/// the gap). While [`FreeList::record`] is on, every change is logged so it can be undone.
#[derive(Debug)]
pub(crate) struct FreeList<T> {
    items: Vec<T>,
    undo: Vec<Undo<T>>,
    recording: bool,
}

impl<T> Default for FreeList<T> {
    fn default() -> Self {
        FreeList {
            items: Vec::new(),
            undo: Vec::new(),
            recording: false,
        }
    }
}

#[derive(Debug)]
enum Undo<T> {
    Pushed,
    /// Taken from this position.
    Took(usize, T),
}

impl<T: Clone> FreeList<T> {
    pub(crate) fn push(&mut self, e: T) {
        self.items.push(e);
        if self.recording {
            self.undo.push(Undo::Pushed);
        }
    }

    /// Takes the first entry `ready` accepts.
    pub(crate) fn take_first(&mut self, ready: impl FnMut(&T) -> bool) -> Option<T> {
        let pos = self.items.iter().position(ready)?;
        let e = self.items.swap_remove(pos);
        if self.recording {
            self.undo.push(Undo::Took(pos, e.clone()));
        }
        Some(e)
    }

    /// Starts (or stops, forgetting what was logged) logging the changes.
    pub(crate) fn record(&mut self, on: bool) {
        self.recording = on;
        self.undo.clear();
    }

    /// Undoes the changes logged since [`FreeList::record`]: the entries and their order
    /// as they were.
    pub(crate) fn rollback(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Pushed => {
                    self.items.pop();
                }
                Undo::Took(pos, e) => {
                    self.items.push(e);
                    let last = self.items.len() - 1;
                    self.items.swap(pos, last);
                }
            }
        }
    }
}

/// Where a version keeps the free lists for the next edit (see the module documentation).
#[derive(Default)]
pub(crate) struct Handover<L> {
    slot: ArcSwapOption<L>,
}

impl<L: Default> Handover<L> {
    /// A slot holding `lists`.
    pub(crate) fn new(lists: L) -> Handover<L> {
        Handover {
            slot: ArcSwapOption::from_pointee(lists),
        }
    }

    /// Takes the lists out (empty ones when they were taken already).
    pub(crate) fn take(&self) -> L {
        match self.slot.swap(None) {
            Some(a) => Arc::try_unwrap(a).unwrap_or_default(),
            None => L::default(),
        }
    }

    /// Puts lists in (an edit that gives back what it took).
    pub(crate) fn put(&self, lists: L) {
        self.slot.store(Some(Arc::new(lists)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollback_restores_entries_and_order() {
        let mut l = FreeList::default();
        for i in 0..6 {
            l.push(i);
        }
        l.record(true);
        assert_eq!(l.take_first(|&x| x == 1), Some(1));
        l.push(10);
        assert_eq!(l.take_first(|&x| x % 2 == 0), Some(0));
        assert_eq!(l.take_first(|&x| x == 10), Some(10));
        l.push(11);
        assert_eq!(l.take_first(|&x| x > 100), None);
        l.rollback();
        assert_eq!(l.items, vec![0, 1, 2, 3, 4, 5]);
        // Once recording stops, nothing is undone.
        l.record(true);
        assert_eq!(l.take_first(|&x| x == 3), Some(3));
        l.record(false);
        l.rollback();
        assert_eq!(l.items.len(), 5);
    }

    #[test]
    fn handover_moves_the_lists() {
        let h: Handover<Vec<u32>> = Handover::new(vec![1, 2, 3]);
        assert_eq!(h.take(), vec![1, 2, 3]);
        assert_eq!(h.take(), Vec::<u32>::new());
        h.put(vec![4]);
        assert_eq!(h.take(), vec![4]);
    }
}
