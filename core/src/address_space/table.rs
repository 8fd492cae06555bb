//! The parts of an [`super::AddressSpace`] that a run-time change copies on write: the node
//! table (pages of `Arc<Node>`), the map of non-dense NodeIds (hashed into sub-maps) and a
//! node's references (swapped whole).
//!
//! A version of the address space is a handful of `Arc`s; a change clones the version and
//! copies only what it touches: the pages of the nodes it adds or removes (1,024 slots each),
//! the sub-maps of the ids it adds or removes (1/256 of the map each), a dense table when it
//! adds a numeric id of namespace 0 or 1. Readers of a version never see it change.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::{Node, Reference};
use crate::types::NodeId;

const PAGE_BITS: u32 = 10;
const PAGE: usize = 1 << PAGE_BITS;

/// The nodes by index: pages of 1,024 slots, each page shared between versions until a
/// change replaces one of its slots.
#[derive(Clone, Default)]
pub(crate) struct NodeTable {
    /// Full pages of `PAGE` slots (an array behind the `Arc`: a thin pointer, and a slot
    /// index masked to the page needs no bounds check).
    pages: Vec<Arc<[Option<Arc<Node>>; PAGE]>>,
    /// One past the highest index ever used.
    len: u32,
}

impl NodeTable {
    pub(crate) fn from_nodes(nodes: Vec<Node>) -> NodeTable {
        let len = nodes.len() as u32;
        let mut pages = Vec::with_capacity(nodes.len().div_ceil(PAGE));
        let mut nodes = nodes.into_iter();
        loop {
            let page: Arc<[Option<Arc<Node>>; PAGE]> =
                Arc::new(std::array::from_fn(|_| nodes.next().map(Arc::new)));
            if page.first().is_none_or(Option::is_none) {
                break;
            }
            pages.push(page);
        }
        NodeTable { pages, len }
    }

    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&Node> {
        let page = self.pages.get((index >> PAGE_BITS) as usize)?;
        // The mask keeps the index inside the page: the compiler drops the check.
        page.get(index as usize & (PAGE - 1))?.as_deref()
    }

    /// One past the highest index in use.
    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    /// Puts `node` at `index` (`None` empties the slot), copying its page if another
    /// version shares it.
    pub(crate) fn set(&mut self, index: u32, node: Option<Arc<Node>>) {
        let p = (index >> PAGE_BITS) as usize;
        while self.pages.len() <= p {
            self.pages.push(Arc::new(std::array::from_fn(|_| None)));
        }
        if let Some(page) = self.pages.get_mut(p) {
            if let Some(slot) = Arc::make_mut(page).get_mut(index as usize & (PAGE - 1)) {
                *slot = node;
            }
        }
        self.len = self.len.max(index + 1);
    }

    /// Every node with its index.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &Node)> {
        self.pages.iter().enumerate().flat_map(|(p, page)| {
            page.iter()
                .enumerate()
                .filter_map(move |(i, n)| n.as_deref().map(|n| (((p << PAGE_BITS) | i) as u32, n)))
        })
    }
}

const SUB_MAPS: usize = 256;

/// NodeIds that are not in a dense table, hashed into 256 sub-maps so a change copies
/// one of them, not the whole map.
#[derive(Clone)]
pub(crate) struct IdMap {
    subs: Vec<Arc<HashMap<NodeId, u32>>>,
}

impl Default for IdMap {
    fn default() -> IdMap {
        IdMap {
            subs: (0..SUB_MAPS).map(|_| Arc::new(HashMap::new())).collect(),
        }
    }
}

impl IdMap {
    #[inline]
    fn sub(id: &NodeId) -> usize {
        let mut h = rustc_hash::FxHasher::default();
        id.hash(&mut h);
        (h.finish() >> 56) as usize & (SUB_MAPS - 1)
    }

    #[inline]
    pub(crate) fn get(&self, id: &NodeId) -> Option<u32> {
        self.subs.get(Self::sub(id))?.get(id).copied()
    }

    pub(crate) fn insert(&mut self, id: NodeId, index: u32) {
        if let Some(m) = self.subs.get_mut(Self::sub(&id)) {
            Arc::make_mut(m).insert(id, index);
        }
    }

    pub(crate) fn remove(&mut self, id: &NodeId) {
        if let Some(m) = self.subs.get_mut(Self::sub(id)) {
            if m.contains_key(id) {
                Arc::make_mut(m).remove(id);
            }
        }
    }
}

/// A node's references, swapped whole when a run-time change adds or removes one (the node
/// itself, with its value cell, stays where it is). Readers take a snapshot with
/// [`Refs::load`]; a loop over `node.references.load().iter()` holds it for the loop.
pub struct Refs(ArcSwap<Vec<Reference>>);

impl Refs {
    pub fn new(refs: Vec<Reference>) -> Refs {
        Refs(ArcSwap::from_pointee(refs))
    }

    /// The references now (a cheap snapshot).
    #[inline]
    pub fn load(&self) -> arc_swap::Guard<Arc<Vec<Reference>>> {
        self.0.load()
    }

    /// The references now, owned.
    pub fn snapshot(&self) -> Arc<Vec<Reference>> {
        self.0.load_full()
    }

    /// Changes the references in place (while the node is being built: no copy) or by
    /// swapping in a changed copy (a node readers may be looking at).
    pub fn update(&mut self, f: impl FnOnce(&mut Vec<Reference>)) {
        let mut cur = self.0.swap(Arc::new(Vec::new()));
        f(Arc::make_mut(&mut cur));
        self.0.store(cur);
    }

    /// Replaces the references of a node readers may be looking at (the run-time writer;
    /// readers see the old list or the new one, never a mix).
    pub(crate) fn replace(&self, refs: Vec<Reference>) {
        self.0.store(Arc::new(refs));
    }

    pub fn push(&mut self, r: Reference) {
        self.update(|v| v.push(r));
    }

    pub fn retain(&mut self, f: impl FnMut(&Reference) -> bool) {
        self.update(|v| v.retain(f));
    }

    pub fn len(&self) -> usize {
        self.0.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.load().is_empty()
    }
}

impl From<Vec<Reference>> for Refs {
    fn from(v: Vec<Reference>) -> Refs {
        Refs::new(v)
    }
}

impl Default for Refs {
    fn default() -> Refs {
        Refs::new(Vec::new())
    }
}

impl std::fmt::Debug for Refs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.load().fmt(f)
    }
}

impl FromIterator<Reference> for Refs {
    fn from_iter<I: IntoIterator<Item = Reference>>(iter: I) -> Refs {
        Refs::new(iter.into_iter().collect())
    }
}
