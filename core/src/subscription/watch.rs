//! Which exception-based items of a shard watch which node: the index the change path's
//! drain looks every change up in.
//!
//! Dense and intrusive: `first[node]` is the first item slot watching that node and
//! `next[slot]` the next item slot watching the same node, so looking a change up costs one
//! load from an array indexed by node (4 bytes a node, sequential when the application pushes
//! its nodes in turn) and then the items themselves; no hashing, no per-node allocation.
//! `first` grows to the highest node index watched (4 MB per million nodes on a shard that
//! watches the last of them); `next` to the highest item slot.

const NONE: u32 = u32::MAX;

/// The exception-based items of one shard by node index.
#[derive(Debug, Default)]
pub struct Watching {
    first: Vec<u32>,
    next: Vec<u32>,
    nodes: usize,
}

impl Watching {
    /// No node is watched.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// How many nodes are watched.
    #[cfg(test)]
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Item slot `item` watches `node`; true when it is the node's first watcher here.
    pub fn add(&mut self, node: u32, item: u32) -> bool {
        let (n, i) = (node as usize, item as usize);
        if self.first.len() <= n {
            self.first.resize(n + 1, NONE);
        }
        if self.next.len() <= i {
            self.next.resize(i + 1, NONE);
        }
        let (Some(head), Some(next)) = (self.first.get_mut(n), self.next.get_mut(i)) else {
            return false; // both were just sized to hold their index
        };
        let was = *head;
        *next = was;
        *head = item;
        if was == NONE {
            self.nodes += 1;
        }
        was == NONE
    }

    /// Item slot `item` stops watching `node`; true when the node has no watcher left here.
    /// An item that was not watching it changes nothing (and answers false).
    pub fn remove(&mut self, node: u32, item: u32) -> bool {
        let Some(&head) = self.first.get(node as usize) else {
            return false;
        };
        let after_item = self.next(item).unwrap_or(NONE);
        if head == item {
            if let Some(h) = self.first.get_mut(node as usize) {
                *h = after_item;
            }
            self.set_next(item, NONE);
            if after_item == NONE {
                self.nodes -= 1;
                return true;
            }
            return false;
        }
        let mut at = head;
        while at != NONE {
            let after = self.next(at).unwrap_or(NONE);
            if after == item {
                self.set_next(at, after_item);
                self.set_next(item, NONE);
                return false;
            }
            at = after;
        }
        false
    }

    fn set_next(&mut self, item: u32, to: u32) {
        if let Some(n) = self.next.get_mut(item as usize) {
            *n = to;
        }
    }

    /// The first item slot watching `node` (then follow [`Watching::next`]).
    #[inline]
    pub fn first(&self, node: u32) -> Option<u32> {
        match self.first.get(node as usize) {
            Some(&i) if i != NONE => Some(i),
            _ => None,
        }
    }

    /// The item slot after `item` watching the same node.
    #[inline]
    pub fn next(&self, item: u32) -> Option<u32> {
        match self.next.get(item as usize) {
            Some(&i) if i != NONE => Some(i),
            _ => None,
        }
    }

    /// Every item slot watching `node`, into `out`.
    pub fn collect(&self, node: u32, out: &mut Vec<u32>) {
        let mut at = self.first(node);
        while let Some(i) = at {
            out.push(i);
            at = self.next(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(w: &Watching, node: u32) -> Vec<u32> {
        let mut v = Vec::new();
        w.collect(node, &mut v);
        v.sort();
        v
    }

    #[test]
    fn add_and_remove_in_any_order() {
        let mut w = Watching::default();
        assert!(w.is_empty() && w.first(7).is_none());
        assert!(w.add(7, 3), "first watcher of node 7");
        assert!(!w.add(7, 0));
        assert!(!w.add(7, 9));
        assert!(w.add(2, 4));
        assert_eq!(w.nodes(), 2);
        assert_eq!(items(&w, 7), vec![0, 3, 9]);
        assert!(!w.remove(7, 0), "the middle of the list");
        assert_eq!(items(&w, 7), vec![3, 9]);
        assert!(!w.remove(7, 5), "not watching: nothing changes");
        assert!(!w.remove(99, 5), "a node never watched");
        assert!(!w.remove(7, 9), "the head");
        assert!(w.remove(7, 3), "the last watcher");
        assert!(items(&w, 7).is_empty());
        assert_eq!(w.nodes(), 1);
        assert!(w.remove(2, 4));
        assert!(w.is_empty());
        // A slot reused for another node starts a fresh list.
        assert!(w.add(2, 9));
        assert_eq!(items(&w, 2), vec![9]);
        assert!(items(&w, 7).is_empty());
    }
}
