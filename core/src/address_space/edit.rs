//! Changing the address space while the server runs: an [`Edit`] of the current version,
//! committed by [`super::Model::commit`] as the next version.
//!
//! An edit works on a clone of the current version ([`super::AddressSpace`] is a handful of
//! `Arc`s) and copies what it touches. Nodes it adds are in its [`Edit::space`] at once (a
//! later operation of the same edit finds them); the references it adds to or removes from
//! nodes that already exist are collected and swapped in after the new version is published
//! (the new nodes' before: nothing reaches them until then).
//!
//! What the edit checks is the address space's consistency (an id used twice, a reference
//! to or from nothing, an index beyond the room kept at start); the Part 4 rules of
//! AddNodes (parent, type definition, browse name) are the caller's
//! (`services::node_management`, the library).

use std::collections::HashMap;
use std::sync::Arc;

use super::{ids, AddressSpace, ClassAttributes, Node, Reference, DENSE_ID_MAX, NO_INDEX};
use crate::generated::types::{ModelChangeStructureDataType, NodeClass};
use crate::types::{ExpandedNodeId, Identifier, NodeId, StatusCode};

/// ModelChangeStructureVerbMask (Part 3 §9.32.4... the GeneralModelChangeEvent's verbs).
pub mod verb {
    pub const NODE_ADDED: u8 = 1;
    pub const NODE_DELETED: u8 = 2;
    pub const REFERENCE_ADDED: u8 = 4;
    pub const REFERENCE_DELETED: u8 = 8;
}

/// What the run-time writer keeps from one version to the next.
#[derive(Clone, Debug, Default)]
pub struct EditLog {
    /// Indexes of removed nodes: (index, generation of the node removed, version that
    /// removed it). Reused once every shard holds that version or a later one.
    free: Vec<(u32, u32, u64)>,
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

/// A change of the address space under way (see the module documentation).
pub struct Edit {
    base: Arc<AddressSpace>,
    space: AddressSpace,
    /// The oldest version a shard holds: indexes freed by it or before are reusable.
    oldest_held: u64,
    /// New reference lists, by node index.
    refs: HashMap<u32, Vec<Reference>>,
    /// Indexes of the nodes this edit added.
    added: std::collections::HashSet<u32>,
    changes: Vec<ModelChangeStructureDataType>,
    /// Where each affected node's entry is in `changes` (an edit of many nodes notes each
    /// once per reference: a scan of `changes` would make it quadratic).
    change_at: HashMap<NodeId, usize>,
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
    refs: Vec<(u32, Vec<Reference>)>,
    changes: Vec<ModelChangeStructureDataType>,
    removed: Vec<u32>,
    version: u64,
}

impl After {
    pub(crate) fn apply(self, space: &AddressSpace) -> Committed {
        for (i, refs) in self.refs {
            if let Some(n) = space.node_at(i) {
                n.references.replace(refs);
            }
        }
        for i in self.removed {
            space.changes().forget(i);
        }
        Committed {
            version: self.version,
            changes: self.changes,
        }
    }
}

/// Sets `table[n]` (growing it with empty slots), in a copy when another version shares it.
fn set_dense(table: &mut Arc<[u32]>, n: u32, index: u32) {
    let n = n as usize;
    if n >= table.len() {
        let mut v = table.to_vec();
        v.resize(n + 1, NO_INDEX);
        *table = Arc::from(v);
    }
    if let Some(slot) = Arc::make_mut(table).get_mut(n) {
        *slot = index;
    }
}

fn same_ref(a: &Reference, b: &Reference) -> bool {
    a.is_forward == b.is_forward && a.reference_type == b.reference_type && a.target == b.target
}

impl Edit {
    pub(crate) fn new(base: Arc<AddressSpace>, oldest_held: u64) -> Edit {
        let mut space = (*base).clone();
        space.version = base.version.wrapping_add(1);
        let log = Arc::make_mut(&mut space.log);
        log.removed.retain(|(v, _, _)| *v > oldest_held);
        Edit {
            base,
            space,
            oldest_held,
            refs: HashMap::new(),
            added: Default::default(),
            changes: Vec::new(),
            change_at: HashMap::new(),
        }
    }

    /// The address space as this edit has made it so far (its reference lists of existing
    /// nodes aside: [`Edit::references`]).
    pub fn space(&self) -> &AddressSpace {
        &self.space
    }

    /// Has the edit changed anything?
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// The references of the node at `index` as this edit has made them.
    pub fn references(&self, index: u32) -> Vec<Reference> {
        match self.refs.get(&index) {
            Some(r) => r.clone(),
            None => self
                .space
                .node_at(index)
                .map(|n| n.references.load().to_vec())
                .unwrap_or_default(),
        }
    }

    fn refs_mut(&mut self, index: u32) -> &mut Vec<Reference> {
        let space = &self.space;
        self.refs.entry(index).or_insert_with(|| {
            space
                .node_at(index)
                .map(|n| n.references.load().to_vec())
                .unwrap_or_default()
        })
    }

    fn note(&mut self, affected: &NodeId, verb: u8) {
        if let Some(c) = self
            .change_at
            .get(affected)
            .and_then(|&i| self.changes.get_mut(i))
        {
            c.verb |= verb;
            return;
        }
        let affected_type = self
            .space
            .index_of(affected)
            .and_then(|i| {
                self.refs
                    .get(&i)
                    .and_then(|r| {
                        r.iter()
                            .find(|r| {
                                r.is_forward
                                    && r.reference_type.as_ns0() == Some(ids::HAS_TYPE_DEFINITION)
                            })
                            .map(|r| r.target.node_id.clone())
                    })
                    .or_else(|| {
                        self.space
                            .node_at(i)
                            .and_then(|n| n.type_definition())
                            .map(|t| t.node_id)
                    })
            })
            .unwrap_or_default();
        self.change_at.insert(affected.clone(), self.changes.len());
        self.changes.push(ModelChangeStructureDataType {
            affected: affected.clone(),
            affected_type,
            verb,
        });
    }

    /// An index for a new node and its generation: a freed one every shard is past, else
    /// the next unused one (within the room the change path was built with).
    fn allocate(&mut self) -> Result<(u32, u32), StatusCode> {
        let oldest = self.oldest_held;
        let log = Arc::make_mut(&mut self.space.log);
        if let Some(pos) = log.free.iter().position(|&(_, _, v)| v <= oldest) {
            let (i, g, _) = log.free.swap_remove(pos);
            return Ok((i, g.wrapping_add(1)));
        }
        let i = self.space.nodes.len();
        if i as usize >= self.space.changes.index_capacity() || i == NO_INDEX {
            return Err(StatusCode::BadResourceUnavailable);
        }
        Ok((i, 0))
    }

    /// Adds a node with its declared references (forward and inverse); the other end of
    /// each reference to a node of this server gets the opposite one. BadNodeIdExists when
    /// the id is taken, BadResourceUnavailable past the room for run-time nodes. The node's
    /// `generation` is set here.
    pub fn add_node(&mut self, mut node: Node) -> Result<u32, StatusCode> {
        if node.node_id.is_null() {
            return Err(StatusCode::BadNodeIdInvalid);
        }
        if self.space.index_of(&node.node_id).is_some() {
            return Err(StatusCode::BadNodeIdExists);
        }
        let (index, generation) = self.allocate()?;
        node.generation = generation;
        let id = node.node_id.clone();
        let declared = node.references.snapshot();
        let is_type = matches!(
            node.node_class,
            NodeClass::ObjectType
                | NodeClass::VariableType
                | NodeClass::DataType
                | NodeClass::ReferenceType
        );
        let is_async = matches!(&node.attributes,
            ClassAttributes::Variable(v) if matches!(v.value, super::ValueSource::Async(_)));
        // The id tables.
        match id.identifier {
            Identifier::Numeric(n) if n < DENSE_ID_MAX && (id.namespace as usize) < 2 => {
                if let Some(t) = self.space.dense.get_mut(id.namespace as usize) {
                    set_dense(t, n, index);
                }
            }
            _ => self.space.map.insert(id.clone(), index),
        }
        self.space.nodes.set(index, Some(Arc::new(node)));
        self.space.count += 1;
        self.added.insert(index);
        self.space.has_async |= is_async;
        // The other ends.
        for r in declared.iter() {
            let Some(t) = r.target.as_local().and_then(|t| self.space.index_of(t)) else {
                continue;
            };
            if t == index {
                continue;
            }
            let inverse = Reference {
                reference_type: r.reference_type.clone(),
                is_forward: !r.is_forward,
                target: ExpandedNodeId::local(id.clone()),
            };
            let list = self.refs_mut(t);
            if !list.iter().any(|x| same_ref(x, &inverse)) {
                list.push(inverse);
            }
            if is_type && !r.is_forward && r.reference_type.as_ns0() == Some(ids::HAS_SUBTYPE) {
                let st = Arc::make_mut(&mut self.space.supertype);
                if st.len() <= index as usize {
                    st.resize(index as usize + 1, NO_INDEX);
                }
                if let Some(s) = st.get_mut(index as usize) {
                    *s = t;
                }
            }
            let target_id = r.target.node_id.clone();
            self.note(&target_id, verb::REFERENCE_ADDED);
        }
        self.note(&id, verb::NODE_ADDED);
        Ok(index)
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
        let s = self
            .space
            .index_of(source)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        let r = Reference {
            reference_type: reference_type.clone(),
            is_forward,
            target: target.clone(),
        };
        if self.refs_mut(s).iter().any(|x| same_ref(x, &r)) {
            return Err(StatusCode::BadDuplicateReferenceNotAllowed);
        }
        self.refs_mut(s).push(r);
        self.note(source, verb::REFERENCE_ADDED);
        if let Some(t) = target.as_local().and_then(|t| self.space.index_of(t)) {
            if t != s {
                let inverse = Reference {
                    reference_type: reference_type.clone(),
                    is_forward: !is_forward,
                    target: ExpandedNodeId::local(source.clone()),
                };
                let list = self.refs_mut(t);
                if !list.iter().any(|x| same_ref(x, &inverse)) {
                    list.push(inverse);
                }
                let target_id = target.node_id.clone();
                self.note(&target_id, verb::REFERENCE_ADDED);
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
        let s = self
            .space
            .index_of(source)
            .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
        let r = Reference {
            reference_type: reference_type.clone(),
            is_forward,
            target: target.clone(),
        };
        let list = self.refs_mut(s);
        let before = list.len();
        list.retain(|x| !same_ref(x, &r));
        if list.len() == before {
            return Err(StatusCode::BadNotFound);
        }
        self.note(source, verb::REFERENCE_DELETED);
        if bidirectional {
            if let Some(t) = target.as_local().and_then(|t| self.space.index_of(t)) {
                let inverse = Reference {
                    reference_type: reference_type.clone(),
                    is_forward: !is_forward,
                    target: ExpandedNodeId::local(source.clone()),
                };
                let list = self.refs_mut(t);
                let before = list.len();
                list.retain(|x| !same_ref(x, &inverse));
                if list.len() != before {
                    let target_id = target.node_id.clone();
                    self.note(&target_id, verb::REFERENCE_DELETED);
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
        let index = self
            .space
            .index_of(id)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let generation = self
            .space
            .node_at(index)
            .map(|n| n.generation)
            .unwrap_or_default();
        self.note(id, verb::NODE_DELETED);
        let refs = self.references(index);
        for r in &refs {
            if !r.is_forward && !delete_target_references {
                continue;
            }
            let Some(t) = r.target.as_local().and_then(|t| self.space.index_of(t)) else {
                continue;
            };
            if t == index {
                continue;
            }
            let list = self.refs_mut(t);
            let before = list.len();
            list.retain(|x| {
                !(x.is_forward != r.is_forward
                    && x.reference_type == r.reference_type
                    && x.target.as_local() == Some(id))
            });
            if list.len() != before {
                let target_id = r.target.node_id.clone();
                self.note(&target_id, verb::REFERENCE_DELETED);
            }
        }
        self.refs.remove(&index);
        match id.identifier {
            Identifier::Numeric(n) if n < DENSE_ID_MAX && (id.namespace as usize) < 2 => {
                if let Some(t) = self.space.dense.get_mut(id.namespace as usize) {
                    if (n as usize) < t.len() {
                        set_dense(t, n, NO_INDEX);
                    }
                }
            }
            _ => self.space.map.remove(id),
        }
        self.space.nodes.set(index, None);
        self.space.count = self.space.count.saturating_sub(1);
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
        if self.added.remove(&index) {
            // Added and removed by this edit: no shard ever saw it.
            let log = Arc::make_mut(&mut self.space.log);
            log.free.push((index, generation, 0));
        } else {
            let version = self.space.version;
            let log = Arc::make_mut(&mut self.space.log);
            log.free.push((index, generation, version));
            log.removed.push((version, index, generation));
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
        // New nodes take their references now (no reader reaches them yet); the others
        // after the publish.
        let mut later = Vec::new();
        let refs = std::mem::take(&mut self.refs);
        for (i, list) in refs {
            if self.added.contains(&i) {
                if let Some(n) = self.space.node_at(i) {
                    n.references.replace(list);
                }
            } else {
                later.push((i, list));
            }
        }
        later.sort_by_key(|(i, _)| *i);
        if !self.space.views.is_empty() {
            self.space.compute_views();
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
            refs: later,
            changes: self.changes,
            removed,
            version,
        };
        (self.base, self.space, after)
    }
}
