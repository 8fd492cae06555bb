//! Changing the address space while the server runs: an [`Edit`] of the current version,
//! committed by [`super::Model::commit`] as the next version.
//!
//! An edit works on a clone of the current version ([`super::AddressSpace`] is a handful of
//! `Arc`s and the page pointers of its store) and copies what it touches: the record pages
//! of the nodes it adds, removes or links (1,024 records each), the sub-table of the id
//! index an id lands in, the chunk of a reference list it changes (256 references; a big
//! folder's list is never copied whole). Everything it does is in its [`Edit::space`] at
//! once; nothing is seen by a reader before the commit. Removing many references from one
//! list (deleting the children of a big folder) is done in one pass at the end.
//!
//! **Pauses.** A big edit (an AddNodes of a thousand nodes, its commit) runs for several
//! milliseconds on the model writer thread, which may share a CPU with a shard. Core reads
//! no clock, so the caller decides when to give the CPU away: [`set_pause`] installs, for
//! the calling thread, a hook the edit calls between its steps (each node or reference
//! added or removed, each list the deletes filter, the phases of the commit). The runtime's
//! writer yields the CPU there once about 0.1 ms has passed since it last did. The hook
//! changes nothing in the edit: it is called between steps, never with a step half done.
//!
//! What the edit checks is the address space's consistency (an id used twice, a reference
//! to or from nothing, an index beyond the room kept at start); the Part 4 rules of
//! AddNodes (parent, type definition, browse name) are the caller's
//! (`services::node_management`, the library).

use std::cell::RefCell;
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};

use super::store::free::{FreeList, Handover};
use super::store::{Key, Ref, NO_INDEX};
use super::{ids, AddressSpace, ClassAttributes, Node, NodeClass, Reference};
use crate::generated::types::ModelChangeStructureDataType;
use crate::types::{ExpandedNodeId, NodeId, StatusCode};

/// ModelChangeStructureVerbMask (Part 3 §9.32.4... the GeneralModelChangeEvent's verbs).
pub mod verb {
    pub const NODE_ADDED: u8 = 1;
    pub const NODE_DELETED: u8 = 2;
    pub const REFERENCE_ADDED: u8 = 4;
    pub const REFERENCE_DELETED: u8 = 8;
}

/// A pause hook: called between the steps of an edit on the thread that installed it
/// ([`set_pause`]).
pub type PauseHook = Box<dyn FnMut()>;

thread_local! {
    static PAUSE: RefCell<Option<PauseHook>> = const { RefCell::new(None) };
}

/// Installs `hook` as the calling thread's pause hook (`None`: none), returning the one it
/// replaces. Every [`Edit`] made on this thread, and [`super::Model::commit`] of it, calls
/// the hook between its steps: after each node or reference added or removed, each
/// reference list filtered by the deletes, and between the phases of the commit (none of
/// them longer than a node's step or a list's pass). The hook decides whether to pause
/// (the runtime's model writer looks at the clock and yields the CPU); it must not edit
/// the address space.
pub fn set_pause(hook: Option<PauseHook>) -> Option<PauseHook> {
    PAUSE.with(|p| match p.try_borrow_mut() {
        Ok(mut p) => std::mem::replace(&mut *p, hook),
        // Called from inside the hook: left as it is.
        Err(_) => hook,
    })
}

/// Calls the calling thread's pause hook, if any (not from inside the hook itself).
#[inline]
pub(crate) fn pause() {
    PAUSE.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            if let Some(h) = p.as_mut() {
                h();
            }
        }
    });
}

/// What the run-time writer keeps from one version to the next.
#[derive(Clone, Debug, Default)]
pub struct EditLog {
    /// Nodes removed by recent versions: (version, index, generation), oldest first. A shard
    /// that takes a newer version tells its items of the ones after its old version; entries
    /// every shard has seen are dropped by the next edit.
    removed: Vec<(u64, u32, u32)>,
}

impl EditLog {
    /// The nodes removed after version `after` up to this log's version.
    pub fn removed_after(&self, after: u64) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.removed
            .iter()
            .filter(move |(v, _, _)| *v > after)
            .map(|&(_, i, g)| (i, g))
    }
}

/// What an edit hands to the next one through the version it publishes
/// ([`super::store::free`]): the free lists, moved, never copied.
#[derive(Default)]
pub(crate) struct Reusable {
    /// Indexes of removed nodes: (index, generation of the node removed, version that
    /// removed it). Reused once every shard holds that version or a later one.
    pub free: FreeList<(u32, u32, u64)>,
    /// Their cells, sources and class attributes.
    pub freed: super::store::Freed,
}

/// A change of the address space under way (see the module documentation).
pub struct Edit {
    base: Arc<AddressSpace>,
    space: AddressSpace,
    /// The oldest version a shard holds: indexes freed by it or before are reusable.
    oldest_held: u64,
    /// Indexes of the nodes this edit added.
    added: FxHashSet<u32>,
    changes: Vec<ModelChangeStructureDataType>,
    /// Where each affected node is in `changes`.
    noted: FxHashMap<NodeId, usize>,
    /// References to remove from nodes' lists, by node (done in one pass per list).
    pending: FxHashMap<u32, FxHashSet<Ref>>,
    /// The free indexes, taken from the base's hand-over (its cells and the rest are in
    /// the store being edited).
    free: FreeList<(u32, u32, u64)>,
    /// Finished: nothing to give back when dropped.
    finished: bool,
}

/// What a committed edit changed.
#[derive(Debug, Clone, Default)]
pub struct Committed {
    /// The version published.
    pub version: u64,
    /// One entry per affected node (its verbs or-ed), in the order of the edit: what the
    /// GeneralModelChangeEvent carries.
    pub changes: Vec<ModelChangeStructureDataType>,
}

/// What the commit does once the version is published.
pub(crate) struct After {
    changes: Vec<ModelChangeStructureDataType>,
    removed: Vec<u32>,
    version: u64,
}

impl After {
    pub(crate) fn apply(self, space: &AddressSpace) -> Committed {
        for i in self.removed {
            space.changes().forget(i);
        }
        Committed {
            version: self.version,
            changes: self.changes,
        }
    }
}

/// Node classes whose index is never reused once removed: other nodes name them by index
/// (a reference's type, an instance's type definition) and are not found from them.
fn keeps_index(class: NodeClass) -> bool {
    matches!(
        class,
        NodeClass::ObjectType
            | NodeClass::VariableType
            | NodeClass::ReferenceType
            | NodeClass::DataType
    )
}

impl Edit {
    pub(crate) fn new(base: Arc<AddressSpace>, oldest_held: u64) -> Edit {
        let mut space = (*base).clone();
        space.version = base.version.wrapping_add(1);
        space.token = Arc::default();
        space.handover = Arc::default();
        if space.log.removed.iter().any(|(v, _, _)| *v <= oldest_held) {
            let log = Arc::make_mut(&mut space.log);
            log.removed.retain(|(v, _, _)| *v > oldest_held);
        }
        // The free lists moved out of the base (given back as they were if this edit is
        // dropped uncommitted).
        let Reusable {
            mut free,
            mut freed,
        } = base.handover.take();
        free.record(true);
        freed.record(true);
        freed.oldest_held = oldest_held;
        space.store.freed = freed;
        Edit {
            base,
            space,
            oldest_held,
            added: Default::default(),
            changes: Vec::new(),
            noted: FxHashMap::default(),
            pending: FxHashMap::default(),
            free,
            finished: false,
        }
    }

    /// The address space as this edit has made it so far.
    pub fn space(&mut self) -> &AddressSpace {
        self.flush_all();
        &self.space
    }

    /// The address space as this edit has made it so far, for finding nodes and reading
    /// their attributes without applying the reference removals still waiting (a node's
    /// list may still hold references to nodes this edit removed; [`Edit::space`] applies
    /// them first). Finding nodes between the removals of a big folder's children this way
    /// keeps its list's pass at the end, one for the whole edit.
    pub fn lookup(&self) -> &AddressSpace {
        &self.space
    }

    /// Has the edit changed anything?
    /// The indexes of the nodes this edit added (and did not remove again), in no order.
    pub fn added(&self) -> impl Iterator<Item = u32> + '_ {
        self.added.iter().copied()
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The references of the node at `index` as this edit has made them.
    pub fn references(&mut self, index: u32) -> Vec<Reference> {
        self.flush(index);
        self.space
            .node_at(index)
            .map(|n| n.references().collect())
            .unwrap_or_default()
    }

    /// Applies the removals waiting for the list of node `index`.
    fn flush(&mut self, index: u32) {
        if let Some(gone) = self.pending.remove(&index) {
            if let Some(r) = self.space.store.recs.get_mut(index).filter(|r| r.is_node()) {
                r.retain_refs(|x| !gone.contains(&x));
            }
        }
    }

    fn flush_all(&mut self) {
        let owners: Vec<u32> = self.pending.keys().copied().collect();
        for i in owners {
            self.flush(i);
            pause();
        }
    }

    fn note(&mut self, affected: &NodeId, verb: u8) {
        if let Some(&i) = self.noted.get(affected) {
            if let Some(c) = self.changes.get_mut(i) {
                c.verb |= verb;
            }
            return;
        }
        let affected_type = self
            .space
            .node(affected)
            .and_then(|n| n.type_definition())
            .map(|t| t.node_id)
            .unwrap_or_default();
        self.noted.insert(affected.clone(), self.changes.len());
        self.changes.push(ModelChangeStructureDataType {
            affected: affected.clone(),
            affected_type,
            verb,
        });
    }

    fn note_index(&mut self, index: u32, verb: u8) {
        if let Some(id) = self.space.node_at(index).map(|n| n.node_id()) {
            self.note(&id, verb);
        }
    }

    /// An index for a new node and its generation: a freed one every shard is past, else
    /// the next unused one (within the room the change path was built with).
    fn allocate(&mut self) -> Result<(u32, u32), StatusCode> {
        let oldest = self.oldest_held;
        if let Some((i, g, _)) = self.free.take_first(|&(_, _, v)| v <= oldest) {
            return Ok((i, g.wrapping_add(1)));
        }
        let i = self.space.store.recs.len();
        if i as usize >= self.space.changes.index_capacity() || i >= super::store::MAX_NODES {
            return Err(StatusCode::BadResourceUnavailable);
        }
        Ok((i, 0))
    }

    /// Adds a node with its declared references (forward and inverse); the other end of
    /// each reference to a node of this server gets the opposite one. BadNodeIdExists when
    /// the id is taken, BadResourceUnavailable past the room for run-time nodes. The node's
    /// `generation` is set here.
    pub fn add_node(&mut self, node: Node) -> Result<u32, StatusCode> {
        pause();
        if node.node_id.is_null() {
            return Err(StatusCode::BadNodeIdInvalid);
        }
        if self.space.index_of(&node.node_id).is_some() {
            return Err(StatusCode::BadNodeIdExists);
        }
        let (index, generation) = self.allocate()?;
        let id = node.node_id.clone();
        let is_type = keeps_index(node.node_class);
        let is_async = matches!(&node.attributes,
            ClassAttributes::Variable(v) if matches!(v.value, super::ValueSource::Async(_)));
        if let Err(e) = self.space.store.insert(index, generation, node) {
            // Not stored: the index goes back.
            if generation > 0 || index < self.space.store.recs.len() {
                self.free.push((index, generation.wrapping_sub(1), 0));
            }
            return Err(e);
        }
        self.added.insert(index);
        self.space.has_async |= is_async;
        // The other ends.
        let touched = self.space.store.link_inverses(index);
        let has_subtype = self.space.store.ns0(ids::HAS_SUBTYPE);
        if is_type {
            let sup = self.space.node_at(index).and_then(|n| {
                n.refs()
                    .find(|r| {
                        !r.is_forward() && r.type_index().is_some() && r.type_index() == has_subtype
                    })
                    .and_then(|r| r.target_node())
                    .map(|t| t.index())
            });
            if let Some(p) = sup {
                let st = Arc::make_mut(&mut self.space.supertype);
                if st.len() <= index as usize {
                    st.resize(index as usize + 1, NO_INDEX);
                }
                if let Some(s) = st.get_mut(index as usize) {
                    *s = p;
                }
            }
        }
        let mut seen = FxHashSet::default();
        for t in touched {
            if seen.insert(t) {
                self.note_index(t, verb::REFERENCE_ADDED);
            }
        }
        self.note(&id, verb::NODE_ADDED);
        Ok(index)
    }

    fn key(&mut self, id: &ExpandedNodeId) -> Result<Key, StatusCode> {
        self.space.store.key(id)
    }

    /// Adds a reference from `source` (and its inverse on the target when the target is a
    /// node of this server). BadSourceNodeIdInvalid for an unknown source,
    /// BadDuplicateReferenceNotAllowed when it is there already.
    pub fn add_reference(
        &mut self,
        source: &NodeId,
        reference_type: &NodeId,
        is_forward: bool,
        target: &ExpandedNodeId,
    ) -> Result<(), StatusCode> {
        pause();
        let s = self
            .space
            .index_of(source)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        self.flush(s);
        let t = self.key(&ExpandedNodeId::local(reference_type.clone()))?;
        let tk = self.key(target)?;
        let r = Ref::new(t, is_forward, tk);
        let is_td = is_forward
            && matches!(t, Key::Local(i) if self.space.store.is_ns0(i, ids::HAS_TYPE_DEFINITION));
        let rec = self
            .space
            .store
            .recs
            .get_mut(s)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        match (is_td, tk) {
            (true, Key::Local(tg)) => {
                if rec.type_def != NO_INDEX {
                    return Err(StatusCode::BadDuplicateReferenceNotAllowed);
                }
                rec.type_def = tg;
            }
            _ => {
                if rec.refs().any(|x| x == r) {
                    return Err(StatusCode::BadDuplicateReferenceNotAllowed);
                }
                rec.push_ref(r);
            }
        }
        self.note(source, verb::REFERENCE_ADDED);
        if let (Key::Local(tg), false) = (tk, is_td) {
            if tg != s {
                self.flush(tg);
                let inverse = r.inverse(s);
                if let Some(tr) = self.space.store.recs.get_mut(tg).filter(|x| x.is_node()) {
                    if !tr.refs().any(|x| x == inverse) {
                        tr.push_ref(inverse);
                    }
                }
                self.note(&target.node_id, verb::REFERENCE_ADDED);
            }
        }
        Ok(())
    }

    /// Removes a reference of `source` and, when `bidirectional`, its inverse on the target.
    /// BadSourceNodeIdInvalid for an unknown source, BadNotFound when there is no such
    /// reference.
    pub fn delete_reference(
        &mut self,
        source: &NodeId,
        reference_type: &NodeId,
        is_forward: bool,
        target: &ExpandedNodeId,
        bidirectional: bool,
    ) -> Result<(), StatusCode> {
        pause();
        let s = self
            .space
            .index_of(source)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        self.flush(s);
        let t = self.key(&ExpandedNodeId::local(reference_type.clone()))?;
        let tk = self.key(target)?;
        let r = Ref::new(t, is_forward, tk);
        let is_td = is_forward
            && matches!(t, Key::Local(i) if self.space.store.is_ns0(i, ids::HAS_TYPE_DEFINITION));
        let rec = self
            .space
            .store
            .recs
            .get_mut(s)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        let gone = match (is_td, tk) {
            (true, Key::Local(tg)) if rec.type_def == tg => {
                rec.type_def = NO_INDEX;
                1
            }
            _ => rec.retain_refs(|x| x != r),
        };
        if gone == 0 {
            return Err(StatusCode::BadNotFound);
        }
        self.note(source, verb::REFERENCE_DELETED);
        if bidirectional && !is_td {
            if let Key::Local(tg) = tk {
                if tg != s {
                    self.flush(tg);
                    let inverse = r.inverse(s);
                    let gone = self
                        .space
                        .store
                        .recs
                        .get_mut(tg)
                        .filter(|x| x.is_node())
                        .map_or(0, |tr| tr.retain_refs(|x| x != inverse));
                    if gone > 0 {
                        self.note(&target.node_id, verb::REFERENCE_DELETED);
                    }
                }
            }
        }
        Ok(())
    }

    /// Removes a node. Its forward references go from their targets too; its inverse ones
    /// (other nodes' references to it) only when `delete_target_references` (else those
    /// nodes keep a reference to an id that is no longer there, as Part 4 says).
    /// BadNodeIdUnknown when there is no such node.
    pub fn delete_node(
        &mut self,
        id: &NodeId,
        delete_target_references: bool,
    ) -> Result<(), StatusCode> {
        pause();
        let index = self
            .space
            .index_of(id)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        self.flush(index);
        self.note(id, verb::NODE_DELETED);
        let (generation, class, refs) = match self.space.store.rec(index) {
            Some(r) => (r.generation, r.class, r.refs().collect::<Vec<Ref>>()),
            None => return Err(StatusCode::BadNodeIdUnknown),
        };
        let mut kept_by_id: Vec<(u32, Ref)> = Vec::new();
        for r in refs {
            let Key::Local(t) = r.target_key() else {
                continue;
            };
            if t == index || self.space.store.rec(t).is_none() {
                continue;
            }
            let at_target = r.inverse(index);
            self.pending.entry(t).or_default().insert(at_target);
            self.note_index(t, verb::REFERENCE_DELETED);
            if !r.is_forward() && !delete_target_references {
                // The other node keeps its reference, to the id.
                kept_by_id.push((t, at_target));
            }
        }
        if !kept_by_id.is_empty() {
            let k = self.key(&ExpandedNodeId::local(id.clone()))?;
            // The key is local while the node is here: make it an id that stays.
            let k = match k {
                Key::Local(_) => {
                    let mut x = ExpandedNodeId::local(id.clone());
                    // Interned by id: `key` finds the node, so the id is kept by hand.
                    x.server_index = 0;
                    let v = self.space.version;
                    self.space.store.remove(index, &self.base.token, v);
                    let k = self.space.store.key(&x)?;
                    // (The node is gone from the id tables now; the record below too.)
                    k
                }
                k => k,
            };
            for (t, r) in kept_by_id {
                if let Some(tr) = self.space.store.recs.get_mut(t).filter(|x| x.is_node()) {
                    tr.push_ref(Ref::new(r.type_key(), r.is_forward(), k));
                }
            }
        } else {
            let v = self.space.version;
            self.space.store.remove(index, &self.base.token, v);
        }
        self.pending.remove(&index);
        if self
            .space
            .supertype
            .get(index as usize)
            .is_some_and(|&s| s != NO_INDEX)
        {
            if let Some(s) = Arc::make_mut(&mut self.space.supertype).get_mut(index as usize) {
                *s = NO_INDEX;
            }
        }
        if self.space.hooks.write_hooks.contains_key(&index)
            || self.space.hooks.async_write_hooks.contains_key(&index)
            || self.space.hooks.methods.contains_key(id)
            || self.space.hooks.read_through.contains_key(&index)
        {
            let h = Arc::make_mut(&mut self.space.hooks);
            h.write_hooks.remove(&index);
            h.async_write_hooks.remove(&index);
            h.methods.remove(id);
            h.read_through.remove(&index);
        }
        if self.space.permissions.by_node.contains_key(&index) {
            Arc::make_mut(&mut self.space.permissions)
                .by_node
                .remove(&index);
        }
        let reusable = !keeps_index(NodeClass(class as i32));
        if self.added.remove(&index) {
            // Added and removed by this edit: no shard ever saw it.
            if reusable {
                self.free.push((index, generation, 0));
            }
        } else {
            let version = self.space.version;
            if reusable {
                self.free.push((index, generation, version));
            }
            Arc::make_mut(&mut self.space.log)
                .removed
                .push((version, index, generation));
        }
        Ok(())
    }

    /// Sets the write hook of the node at `index` (a node this edit added).
    pub fn set_write_hook(&mut self, index: u32, hook: super::app::WriteHook) {
        Arc::make_mut(&mut self.space.hooks)
            .write_hooks
            .insert(index, hook);
    }

    /// Sets the asynchronous write hook of the node at `index`.
    pub fn set_async_write_hook(&mut self, index: u32, hook: super::app::AsyncWriteHook) {
        Arc::make_mut(&mut self.space.hooks)
            .async_write_hooks
            .insert(index, hook);
        self.space.has_async = true;
    }

    /// Makes the stored Variable at `index` a read-through one ([`super::app::ReadThrough`]).
    pub fn set_read_through(&mut self, index: u32, read_through: super::app::ReadThrough) {
        Arc::make_mut(&mut self.space.hooks)
            .read_through
            .insert(index, read_through);
        self.space.has_async = true;
    }

    /// Adds a namespace URI to the NamespaceArray (the index it has when it is there
    /// already). The Server object's NamespaceArray Variable is the caller's to update once
    /// the edit is committed. BadResourceUnavailable past 65,535 namespaces.
    pub fn add_namespace(&mut self, uri: &str) -> Result<u16, StatusCode> {
        if let Some(i) = self.space.namespace_index(uri) {
            return Ok(i);
        }
        let i = u16::try_from(self.space.namespace_uris.len())
            .map_err(|_| StatusCode::BadResourceUnavailable)?;
        Arc::make_mut(&mut self.space.namespace_uris).push(uri.to_string());
        Ok(i)
    }

    /// Sets the handler of a Method node.
    pub fn set_method(&mut self, method_id: NodeId, method: super::app::AppMethod) {
        if method.handler.is_async() {
            self.space.has_async = true;
        }
        Arc::make_mut(&mut self.space.hooks)
            .methods
            .insert(method_id, method);
    }

    /// Ends the edit: the base it began on, the new version, and what follows the publish.
    pub(crate) fn finish(mut self) -> (Arc<AddressSpace>, AddressSpace, After) {
        self.flush_all();
        if !self.space.views.is_empty() {
            self.space.compute_views();
            pause();
        }
        let removed = self
            .space
            .log
            .removed
            .iter()
            .filter(|(v, _, _)| *v == self.space.version)
            .map(|&(_, i, _)| i)
            .collect();
        let version = self.space.version;
        let after = After {
            changes: std::mem::take(&mut self.changes),
            removed,
            version,
        };
        // The free lists go to the version published, for the next edit.
        let mut free = std::mem::take(&mut self.free);
        let mut freed = std::mem::take(&mut self.space.store.freed);
        free.record(false);
        freed.record(false);
        self.space.handover = Arc::new(Handover::new(Reusable { free, freed }));
        self.finished = true;
        // (The base's copy left in its place is a handful of pointers, dropped with self.)
        let space = std::mem::replace(&mut self.space, (*self.base).clone());
        (self.base.clone(), space, after)
    }
}

impl Drop for Edit {
    /// An edit not committed gives the free lists back to its base as it took them.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let mut free = std::mem::take(&mut self.free);
        let mut freed = std::mem::take(&mut self.space.store.freed);
        free.rollback();
        freed.rollback();
        free.record(false);
        freed.record(false);
        self.base.handover.put(Reusable { free, freed });
    }
}
