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
use crate::shared::ServerShared;
use crate::time::Now;
use crate::types::{
    DataValue, ExpandedNodeId, Guid, LocalizedText, NodeId, QualifiedName, StatusCode,
};
use std::sync::Arc;

fn check_count(shared: &ServerShared, n: usize) -> Result<(), StatusCode> {
    let max = shared.config.operation_limits.max_nodes_per_node_management as usize;
    match n {
        0 => Err(StatusCode::BadNothingToDo),
        n if n > max => Err(StatusCode::BadTooManyOperations),
        _ => Ok(()),
    }
}

/// How long a shard waits for the model writer's answer before it answers BadTimeout
/// itself (a writer that stopped answers at once: its jobs answer BadInternalError when
/// dropped; this only bounds a writer that hangs), ms.
const WRITER_TIMEOUT_MS: u32 = 600_000;

/// One request of the service set, as the shard hands it over.
#[derive(Debug)]
pub enum EditRequest {
    AddNodes(Box<AddNodesRequest>),
    AddReferences(Box<AddReferencesRequest>),
    DeleteNodes(Box<DeleteNodesRequest>),
    DeleteReferences(Box<DeleteReferencesRequest>),
}

impl EditRequest {
    fn handle(&self) -> u32 {
        match self {
            EditRequest::AddNodes(r) => r.request_header.request_handle,
            EditRequest::AddReferences(r) => r.request_header.request_handle,
            EditRequest::DeleteNodes(r) => r.request_header.request_handle,
            EditRequest::DeleteReferences(r) => r.request_header.request_handle,
        }
    }

    fn operations(&self) -> usize {
        match self {
            EditRequest::AddNodes(r) => r.nodes_to_add.len(),
            EditRequest::AddReferences(r) => r.references_to_add.len(),
            EditRequest::DeleteNodes(r) => r.nodes_to_delete.len(),
            EditRequest::DeleteReferences(r) => r.references_to_delete.len(),
        }
    }

    /// Edits, commits and answers the request.
    fn run(&self, shared: &ServerShared, roles: Roles, guids: Vec<Guid>, now: Now) -> Response {
        match self {
            EditRequest::AddNodes(r) => add_nodes(shared, roles, r, guids, now),
            EditRequest::AddReferences(r) => add_references(shared, roles, r, now),
            EditRequest::DeleteNodes(r) => delete_nodes(shared, roles, r, now),
            EditRequest::DeleteReferences(r) => delete_references(shared, roles, r, now),
        }
    }

    /// The response that answers every operation `status` (nothing edited).
    fn refused(&self, status: StatusCode, now: Now) -> Response {
        let header = response_header(self.handle(), now);
        let n = self.operations();
        match self {
            EditRequest::AddNodes(_) => Response::AddNodes(Box::new(AddNodesResponse {
                response_header: header,
                results: vec![
                    AddNodesResult {
                        status_code: status,
                        added_node_id: NodeId::default(),
                    };
                    n
                ],
                diagnostic_infos: Vec::new(),
            })),
            EditRequest::AddReferences(_) => {
                Response::AddReferences(Box::new(AddReferencesResponse {
                    response_header: header,
                    results: vec![status; n],
                    diagnostic_infos: Vec::new(),
                }))
            }
            EditRequest::DeleteNodes(_) => Response::DeleteNodes(Box::new(DeleteNodesResponse {
                response_header: header,
                results: vec![status; n],
                diagnostic_infos: Vec::new(),
            })),
            EditRequest::DeleteReferences(_) => {
                Response::DeleteReferences(Box::new(DeleteReferencesResponse {
                    response_header: header,
                    results: vec![status; n],
                    diagnostic_infos: Vec::new(),
                }))
            }
        }
    }
}

/// Answers a NodeManagement request: at once when the request is refused whole (no
/// operations, too many) or when the runtime has no model writer (the edit is made here);
/// else `None`: the request waits among the shard's deferred requests while the model
/// writer edits, and is answered (through the shard's outbox for `channel_id`) when the
/// writer is done — the shard serves other requests meanwhile. Past the shard's room for
/// waiting operations (`operation_limits.max_async_operations_per_shard`, one per request
/// here) every operation is BadTooManyOperations; past the writer's queue
/// (`operation_limits.max_node_management_requests_queued`) BadResourceUnavailable;
/// nothing is edited either way.
pub fn answer(
    state: &mut ServiceState,
    roles: Roles,
    channel_id: u32,
    request_id: u32,
    req: EditRequest,
    now: Now,
) -> Option<Response> {
    use crate::address_space::app::Outcome;
    use crate::address_space::model::WriterJob;
    use crate::server::deferred::PendingKind;
    let handle = req.handle();
    let shared = Arc::clone(state.shared());
    if let Err(s) = check_count(&shared, req.operations()) {
        return Some(fault(handle, s, now));
    }
    // New nodes' random ids come from the shard's generator.
    let guids: Vec<Guid> = match &req {
        EditRequest::AddNodes(r) => r
            .nodes_to_add
            .iter()
            .filter(|i| i.requested_new_node_id.node_id.is_null())
            .map(|_| Guid::random(state.random()))
            .collect(),
        _ => Vec::new(),
    };
    let Some(writer) = shared.model.writer().cloned() else {
        let response = req.run(&shared, roles, guids, now);
        state.refresh_model(now);
        return Some(response);
    };
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() == 0 {
        return Some(req.refused(StatusCode::BadTooManyOperations, now));
    }
    let opened = deferrals.begin(
        shared.address_space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::NodeManagement {
            response: Box::new(fault(handle, StatusCode::BadInternalError, now)),
        },
        [WRITER_TIMEOUT_MS],
        now,
    );
    let reply = opened.reply(0, None);
    let refused = req.refused(StatusCode::BadResourceUnavailable, now);
    let work = {
        let shared = Arc::clone(&shared);
        Box::new(move |now: Now| req.run(&shared, roles, guids, now))
    };
    match writer.submit(WriterJob::new(work, reply)) {
        Ok(()) => None,
        Err(job) => {
            // The writer's queue is full: settled here, nothing edited.
            job.cancel();
            let space = Arc::clone(&shared.address_space);
            let (deferrals, _, _) = state.deferred_parts();
            match deferrals.settle(
                &space,
                opened.slot,
                opened.generation,
                0,
                Outcome::Response(Box::new(refused)),
                now,
            ) {
                Some(f) => Some(f.kind.into_response()),
                None => Some(fault(handle, StatusCode::BadInternalError, now)),
            }
        }
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
fn commit(shared: &ServerShared, edit: crate::address_space::edit::Edit, now: Now) -> bool {
    if edit.is_empty() {
        return true;
    }
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

/// AddNodes (Part 4 §5.7.2). `guids`: the ids of the items without a requested one, in
/// order.
fn add_nodes(
    shared: &ServerShared,
    roles: Roles,
    req: &AddNodesRequest,
    guids: Vec<crate::types::Guid>,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let mut guids = guids.into_iter();
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
                NodeId::guid(1, guids.next().ok_or(StatusCode::BadInternalError)?)
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
    let published = commit(shared, edit, now);
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
    Response::AddNodes(Box::new(AddNodesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// AddReferences (Part 4 §5.7.3).
fn add_references(
    shared: &ServerShared,
    roles: Roles,
    req: &AddReferencesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
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
    if !commit(shared, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    Response::AddReferences(Box::new(AddReferencesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// DeleteNodes (Part 4 §5.7.4).
fn delete_nodes(
    shared: &ServerShared,
    roles: Roles,
    req: &DeleteNodesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
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
    if !commit(shared, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    Response::DeleteNodes(Box::new(DeleteNodesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// DeleteReferences (Part 4 §5.7.5).
fn delete_references(
    shared: &ServerShared,
    roles: Roles,
    req: &DeleteReferencesRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
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
    if !commit(shared, edit, now) {
        for s in results.iter_mut().filter(|s| s.is_good()) {
            *s = StatusCode::BadResourceUnavailable;
        }
    }
    Response::DeleteReferences(Box::new(DeleteReferencesResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}
