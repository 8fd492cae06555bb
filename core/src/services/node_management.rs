//! NodeManagement service set (Part 4 §5.7): AddNodes, AddReferences, DeleteNodes,
//! DeleteReferences, on the run-time edit of the address space
//! ([`crate::address_space::edit`], [`crate::address_space::Model`]).
//!
//! * **Who.** An operation needs AddNode (on the parent), DeleteNode, AddReference or
//!   RemoveReference (on the source node) by the node's RolePermissions, or by the default
//!   rule: the ConfigureAdmin role has the four ([`crate::roles::Roles::default_permissions`]);
//!   anyone else is BadUserAccessDenied. Namespace 0 is the standard's: nothing is added to
//!   it, and none of its nodes or references is deleted or changed (BadNodeIdRejected,
//!   BadUserAccessDenied).
//! * **What.** AddNodes adds Objects and Variables (with a stored value) under a parent by
//!   a non-abstract hierarchical reference; other node classes are BadNodeClassInvalid. A
//!   null requested id gets `ns=1;g=<random>`.
//! * **History.** A Variable whose VariableAttributes ask for Historizing is historized from
//!   the version that publishes it on, by the runtime's history store
//!   ([`crate::address_space::change::RunTimeHistory`]); the user needs WriteHistorizing on the
//!   parent too (else BadUserAccessDenied). Without a store: BadNodeAttributesInvalid; past
//!   the store's bound on run-time historized Variables: BadResourceUnavailable. A Variable the
//!   store's node patterns name is historized without being asked (within the bound).
//! * **How many.** At most `operation_limits.max_nodes_per_node_management` items per
//!   request (more: BadTooManyOperations), and the run-time room of
//!   `operation_limits.max_run_time_nodes` (BadResourceUnavailable past it).
//! * **When.** The request's operations are one edit, published as one version when the
//!   request is answered; every shard takes it at its next loop iteration. Each request
//!   that changed something raises one GeneralModelChangeEvent on the Server object.
//!
//! The edit runs on the shard that received the request (bounded by the limit above);
//! writers of several shards and the library are serialized by the model's commit, which
//! refuses an edit whose base was replaced (the request is answered BadResourceUnavailable
//! for its operations and can be sent again).

use crate::address_space::build::make;
use crate::address_space::{ids, AddressSpace, Node, NodeView};
use crate::generated::messages::Response;
use crate::generated::types::{
    AddNodesItem, AddNodesRequest, AddNodesResponse, AddNodesResult, AddReferencesRequest,
    AddReferencesResponse, DeleteNodesRequest, DeleteNodesResponse, DeleteReferencesRequest,
    DeleteReferencesResponse, NodeClass, ObjectAttributes, PermissionType, VariableAttributes,
};
use crate::roles::Roles;
use crate::server::service_state::ServiceState;
use crate::services::{fault, response_header};
use crate::time::Now;
use crate::types::{DataValue, ExpandedNodeId, LocalizedText, NodeId, QualifiedName, StatusCode};

fn check_count(state: &ServiceState, n: usize) -> Result<(), StatusCode> {
    let max = state
        .shared()
        .config
        .operation_limits
        .max_nodes_per_node_management as usize;
    match n {
        0 => Err(StatusCode::BadNothingToDo),
        n if n > max => Err(StatusCode::BadTooManyOperations),
        _ => Ok(()),
    }
}

/// May `roles` do `needed` on the node at `index`?
fn permits(space: &AddressSpace, index: u32, roles: Roles, needed: PermissionType) -> bool {
    space.permissions(index, roles).contains(needed)
}

/// A reference type that exists (and, for `concrete`, is not abstract).
fn reference_type_ok(space: &AddressSpace, id: &NodeId, concrete: bool) -> bool {
    matches!(space.node(id), Some(n) if n.node_class() == NodeClass::ReferenceType
        && (!concrete || n.is_abstract() == Some(false)))
}

/// The local NodeId an ExpandedNodeId names in this server.
fn local_id(space: &AddressSpace, id: &ExpandedNodeId) -> Option<NodeId> {
    if id.server_index != 0 {
        return None;
    }
    match id.namespace_uri.as_opt() {
        None => Some(id.node_id.clone()),
        Some(uri) => Some(NodeId {
            namespace: space.namespace_index(uri)?,
            identifier: id.node_id.identifier.clone(),
        }),
    }
}

/// Publishes the edit and raises the model change event. The statuses of operations that
/// were Good become `BadResourceUnavailable` when the commit is refused.
fn commit(state: &ServiceState, edit: crate::address_space::edit::Edit, now: Now) -> bool {
    if edit.is_empty() {
        return true;
    }
    let shared = state.shared();
    match shared.model.commit(edit) {
        Ok(c) => {
            crate::events::publish_model_change(&shared.events, &shared.model.load(), &c, now);
            true
        }
        Err(_) => false,
    }
}

/// What an AddNodesItem asks of the history: Historizing (and the HistoryWrite bit).
#[derive(Clone, Copy, Default)]
struct HistoryAsked {
    historizing: bool,
    history_write: bool,
}

/// Builds the node of one AddNodesItem (checked against `space`), or the item's status.
fn node_of(
    space: &AddressSpace,
    item: &AddNodesItem,
    node_id: NodeId,
    parent: &NodeId,
) -> Result<(Node, HistoryAsked), StatusCode> {
    let name = &item.browse_name;
    if name.name.as_str().is_empty() {
        return Err(StatusCode::BadBrowseNameInvalid);
    }
    let limits = crate::DecodeLimits::default();
    let type_def = local_id(space, &item.type_definition);
    let parent_ref = Some((parent.clone(), item.reference_type_id.as_ns0().unwrap_or(0)));
    match item.node_class {
        NodeClass::Object => {
            let attrs: ObjectAttributes = match item.node_attributes.decode_as(limits) {
                Some(Ok(a)) => a,
                None if item.node_attributes.is_null() => ObjectAttributes::default(),
                _ => return Err(StatusCode::BadNodeAttributesInvalid),
            };
            let t = type_def.ok_or(StatusCode::BadTypeDefinitionInvalid)?;
            match space.node(&t) {
                Some(n)
                    if n.node_class() == NodeClass::ObjectType
                        && n.is_abstract() == Some(false) => {}
                _ => return Err(StatusCode::BadTypeDefinitionInvalid),
            }
            let mut node = make::folder(node_id, name.clone(), parent.clone());
            node.set_type_definition(t);
            node.references.update(|refs| {
                for r in refs.iter_mut().filter(|r| !r.is_forward) {
                    r.reference_type = item.reference_type_id.clone();
                }
            });
            if let crate::address_space::ClassAttributes::Object { event_notifier } =
                &mut node.attributes
            {
                *event_notifier = attrs.event_notifier & 0x05;
            }
            apply_common(&mut node, name, attrs.display_name, attrs.description);
            Ok((node, HistoryAsked::default()))
        }
        NodeClass::Variable => {
            let attrs: VariableAttributes = match item.node_attributes.decode_as(limits) {
                Some(Ok(a)) => a,
                None if item.node_attributes.is_null() => VariableAttributes {
                    data_type: NodeId::ns0(ids::BASE_DATA_TYPE),
                    value_rank: -2,
                    access_level: 1,
                    ..Default::default()
                },
                _ => return Err(StatusCode::BadNodeAttributesInvalid),
            };
            let t = type_def.unwrap_or_else(|| NodeId::ns0(ids::BASE_DATA_VARIABLE_TYPE));
            match space.node(&t) {
                Some(n)
                    if n.node_class() == NodeClass::VariableType
                        && n.is_abstract() == Some(false) => {}
                _ => return Err(StatusCode::BadTypeDefinitionInvalid),
            }
            let data_type = if attrs.data_type.is_null() {
                NodeId::ns0(ids::BASE_DATA_TYPE)
            } else {
                attrs.data_type.clone()
            };
            if space.node_class_of(&data_type) != Some(NodeClass::DataType) {
                return Err(StatusCode::BadNodeAttributesInvalid);
            }
            let mut node = make::variable(
                node_id,
                name.clone(),
                data_type,
                attrs.value_rank,
                attrs.array_dimensions.clone(),
                DataValue::new(attrs.value.clone()),
                attrs.access_level & 0x03,
                attrs.minimum_sampling_interval.max(0.0),
                parent_ref,
            );
            node.set_type_definition(t);
            if !attrs.value.is_empty()
                && node.as_variable().is_none_or(|var| {
                    crate::address_space::attributes::check_value_of(space, var, &attrs.value)
                        .is_err()
                })
            {
                return Err(StatusCode::BadNodeAttributesInvalid);
            }
            let asked = HistoryAsked {
                historizing: attrs.historizing,
                history_write: attrs.access_level
                    & crate::address_space::access_level::HISTORY_WRITE
                    != 0,
            };
            apply_common(&mut node, name, attrs.display_name, attrs.description);
            Ok((node, asked))
        }
        NodeClass::Unspecified => Err(StatusCode::BadNodeClassInvalid),
        _ => Err(StatusCode::BadNodeClassInvalid),
    }
}

fn apply_common(
    node: &mut Node,
    name: &QualifiedName,
    display: LocalizedText,
    description: LocalizedText,
) {
    node.display_name = if display.text.as_str().is_empty() {
        LocalizedText::text(name.name.as_str())
    } else {
        display
    };
    node.description = description;
}

/// The nodes `parent` has forward hierarchical references to, each given to `f`.
/// (`space` is the edit's: its pending reference removals are applied.)
fn children(space: &AddressSpace, parent: u32, mut f: impl FnMut(NodeView<'_>) -> bool) -> bool {
    let Some(hierarchical) = space.node_index(&NodeId::ns0(ids::HIERARCHICAL_REFERENCES)) else {
        return false;
    };
    space.node_at(parent).is_some_and(|p| {
        p.refs().any(|r| {
            r.is_forward()
                && r.target_node().is_some_and(&mut f)
                && r.type_index()
                    .is_some_and(|t| space.is_subtype_index(t, hierarchical))
        })
    })
}

/// Does `parent` have a forward hierarchical reference to a node with `name`?
fn name_taken(space: &AddressSpace, parent: u32, name: &QualifiedName) -> bool {
    children(space, parent, |t| t.has_name(name))
}

fn name_hash(namespace: u16, name: Option<&str>) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one((namespace, name))
}

/// The BrowseNames of the children of each parent an AddNodes request adds to (Part 4: two
/// children of one parent by hierarchical references may not share one), so that a request
/// of many nodes under one parent does not walk the parent's list once per node. The first
/// node under a parent walks it (as a request of one node must); the second builds a set
/// of the hashes of the children's names, which the later nodes ask and extend. A hash
/// found in the set is confirmed by a walk (a collision is not a duplicate).
#[derive(Default)]
struct Siblings {
    /// Per parent index: `None` after the first walk, then the names' hashes.
    by_parent: rustc_hash::FxHashMap<u32, Option<rustc_hash::FxHashSet<u64>>>,
}

impl Siblings {
    /// [`name_taken`], as the edit stands (`space`).
    fn taken(&mut self, space: &AddressSpace, parent: u32, name: &QualifiedName) -> bool {
        use std::collections::hash_map::Entry;
        match self.by_parent.entry(parent) {
            Entry::Vacant(e) => {
                e.insert(None);
                name_taken(space, parent, name)
            }
            Entry::Occupied(mut e) => {
                let names = e.get_mut().get_or_insert_with(|| {
                    let mut names = rustc_hash::FxHashSet::default();
                    children(space, parent, |t| {
                        let (ns, n) = t.name();
                        names.insert(name_hash(ns, n));
                        false
                    });
                    names
                });
                names.contains(&name_hash(name.namespace_index, name.name.as_opt()))
                    && name_taken(space, parent, name)
            }
        }
    }

    /// A node named `name` was added under `parent`.
    fn added(&mut self, parent: u32, name: &QualifiedName) {
        if let Some(Some(names)) = self.by_parent.get_mut(&parent) {
            names.insert(name_hash(name.namespace_index, name.name.as_opt()));
        }
    }
}

/// AddNodes (Part 4 §5.7.2).
pub fn add_nodes(
    state: &mut ServiceState,
    roles: Roles,
    req: &AddNodesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.nodes_to_add.len()) {
        return fault(handle, s, now);
    }
    let shared = state.shared().clone();
    let mut edit = shared.model.edit();
    let hub = shared.address_space.changes().clone();
    // Indexes of the added Variables that took a place among the run-time historized ones.
    let mut historized: Vec<u32> = Vec::new();
    let hierarchical = NodeId::ns0(ids::HIERARCHICAL_REFERENCES);
    let mut results = Vec::with_capacity(req.nodes_to_add.len());
    let mut siblings = Siblings::default();
    for item in &req.nodes_to_add {
        let r = (|| {
            let space = edit.space();
            let parent = local_id(space, &item.parent_node_id)
                .filter(|p| space.node(p).is_some())
                .ok_or(StatusCode::BadParentNodeIdInvalid)?;
            let parent_index = space
                .node_index(&parent)
                .ok_or(StatusCode::BadParentNodeIdInvalid)?;
            if !reference_type_ok(space, &item.reference_type_id, true)
                || !space.is_subtype_of(&item.reference_type_id, &hierarchical)
            {
                return Err(StatusCode::BadReferenceTypeIdInvalid);
            }
            if !permits(space, parent_index, roles, PermissionType::AddNode) {
                return Err(StatusCode::BadUserAccessDenied);
            }
            let node_id = if item.requested_new_node_id.node_id.is_null() {
                NodeId::guid(1, crate::types::Guid::random(state.random()))
            } else {
                let id = local_id(space, &item.requested_new_node_id)
                    .ok_or(StatusCode::BadNodeIdRejected)?;
                if id.namespace == 0 || id.namespace as usize >= space.namespace_uris().len() {
                    return Err(StatusCode::BadNodeIdRejected);
                }
                if space.node(&id).is_some() {
                    return Err(StatusCode::BadNodeIdExists);
                }
                id
            };
            if siblings.taken(space, parent_index, &item.browse_name) {
                return Err(StatusCode::BadBrowseNameDuplicated);
            }
            let (mut node, asked) = node_of(space, item, node_id.clone(), &parent)?;
            if asked.historizing
                && !permits(space, parent_index, roles, PermissionType::WriteHistorizing)
            {
                return Err(StatusCode::BadUserAccessDenied);
            }
            let reserved = crate::address_space::change::prepare_historized(
                &hub,
                &mut node,
                asked.historizing,
                asked.history_write,
            )?;
            match edit.add_node(node) {
                Ok(index) => {
                    if reserved {
                        historized.push(index);
                    }
                    siblings.added(parent_index, &item.browse_name);
                    Ok(node_id)
                }
                Err(s) => {
                    if let (true, Some(h)) = (reserved, hub.run_time_history()) {
                        h.release();
                    }
                    Err(s)
                }
            }
        })();
        results.push(match r {
            Ok(id) => AddNodesResult {
                status_code: StatusCode::Good,
                added_node_id: id,
            },
            Err(s) => AddNodesResult {
                status_code: s,
                added_node_id: NodeId::default(),
            },
        });
    }
    let published = commit(state, edit, now);
    if let Some(h) = hub.run_time_history() {
        // Historized from the version that publishes them on (or the places given back).
        let space = shared.model.load();
        for index in historized {
            if published {
                h.historize(&space, index);
            } else {
                h.release();
            }
        }
    }
    if !published {
        for r in results.iter_mut().filter(|r| r.status_code.is_good()) {
            *r = AddNodesResult {
                status_code: StatusCode::BadResourceUnavailable,
                added_node_id: NodeId::default(),
            };
        }
    }
    state.refresh_model(now);
    Response::AddNodes(Box::new(AddNodesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// AddReferences (Part 4 §5.7.3).
pub fn add_references(
    state: &mut ServiceState,
    roles: Roles,
    req: &AddReferencesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.references_to_add.len()) {
        return fault(handle, s, now);
    }
    let shared = state.shared().clone();
    let mut edit = shared.model.edit();
    let mut results = Vec::with_capacity(req.references_to_add.len());
    for item in &req.references_to_add {
        let r = (|| {
            let space = edit.lookup();
            let source = space
                .node_index(&item.source_node_id)
                .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
            if !reference_type_ok(space, &item.reference_type_id, true) {
                return Err(StatusCode::BadReferenceTypeIdInvalid);
            }
            if !item.target_server_uri.as_str().is_empty() {
                return Err(StatusCode::BadServerUriInvalid);
            }
            let target = local_id(space, &item.target_node_id)
                .filter(|t| space.node(t).is_some())
                .ok_or(StatusCode::BadTargetNodeIdInvalid)?;
            if target == item.source_node_id {
                return Err(StatusCode::BadInvalidSelfReference);
            }
            if item.target_node_class != NodeClass::Unspecified
                && space.node_class_of(&target) != Some(item.target_node_class)
            {
                return Err(StatusCode::BadNodeClassInvalid);
            }
            if item.source_node_id.namespace == 0 && target.namespace == 0 {
                return Err(StatusCode::BadUserAccessDenied);
            }
            if !permits(space, source, roles, PermissionType::AddReference) {
                return Err(StatusCode::BadUserAccessDenied);
            }
            edit.add_reference(
                &item.source_node_id,
                &item.reference_type_id,
                item.is_forward,
                &ExpandedNodeId::local(target),
            )
        })();
        results.push(r.err().unwrap_or(StatusCode::Good));
    }
    if !commit(state, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    state.refresh_model(now);
    Response::AddReferences(Box::new(AddReferencesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// DeleteNodes (Part 4 §5.7.4).
pub fn delete_nodes(
    state: &mut ServiceState,
    roles: Roles,
    req: &DeleteNodesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.nodes_to_delete.len()) {
        return fault(handle, s, now);
    }
    let shared = state.shared().clone();
    let mut edit = shared.model.edit();
    let mut results = Vec::with_capacity(req.nodes_to_delete.len());
    for item in &req.nodes_to_delete {
        let r = (|| {
            let space = edit.lookup();
            let index = space
                .node_index(&item.node_id)
                .ok_or(StatusCode::BadNodeIdUnknown)?;
            if item.node_id.namespace == 0
                || !permits(space, index, roles, PermissionType::DeleteNode)
            {
                return Err(StatusCode::BadUserAccessDenied);
            }
            edit.delete_node(&item.node_id, item.delete_target_references)
        })();
        results.push(r.err().unwrap_or(StatusCode::Good));
    }
    if !commit(state, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    state.refresh_model(now);
    Response::DeleteNodes(Box::new(DeleteNodesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// DeleteReferences (Part 4 §5.7.5).
pub fn delete_references(
    state: &mut ServiceState,
    roles: Roles,
    req: &DeleteReferencesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.references_to_delete.len()) {
        return fault(handle, s, now);
    }
    let shared = state.shared().clone();
    let mut edit = shared.model.edit();
    let mut results = Vec::with_capacity(req.references_to_delete.len());
    for item in &req.references_to_delete {
        let r = (|| {
            let space = edit.lookup();
            let source = space
                .node_index(&item.source_node_id)
                .ok_or(StatusCode::BadSourceNodeIdInvalid)?;
            if !reference_type_ok(space, &item.reference_type_id, false) {
                return Err(StatusCode::BadReferenceTypeIdInvalid);
            }
            let target =
                local_id(space, &item.target_node_id).ok_or(StatusCode::BadTargetNodeIdInvalid)?;
            if item.source_node_id.namespace == 0 && target.namespace == 0 {
                return Err(StatusCode::BadUserAccessDenied);
            }
            if !permits(space, source, roles, PermissionType::RemoveReference) {
                return Err(StatusCode::BadUserAccessDenied);
            }
            edit.delete_reference(
                &item.source_node_id,
                &item.reference_type_id,
                item.is_forward,
                &ExpandedNodeId::local(target),
                item.delete_bidirectional,
            )
        })();
        results.push(r.err().unwrap_or(StatusCode::Good));
    }
    if !commit(state, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    state.refresh_model(now);
    Response::DeleteReferences(Box::new(DeleteReferencesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}
