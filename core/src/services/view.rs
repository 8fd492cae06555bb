//! View service set (Part 4 §5.9): Browse, BrowseNext, TranslateBrowsePathsToNodeIds,
//! RegisterNodes, UnregisterNodes.
//!
//! Browse results beyond `requestedMaxReferencesPerNode` are kept in a continuation point of
//! the session: the remaining references, already filtered and reduced to the requested
//! fields, so BrowseNext is a copy out of a queue (a snapshot taken by the Browse).

use std::collections::{HashSet, VecDeque};

use crate::address_space::store::prefetch::AHEAD;
use crate::address_space::{AddressSpace, NodeView, RefView};
use crate::generated::messages::Response;
use crate::generated::types::{
    BrowseDescription, BrowseDirection, BrowseNextRequest, BrowseNextResponse, BrowsePath,
    BrowsePathResult, BrowsePathTarget, BrowseRequest, BrowseResult, NodeClass, PermissionType,
    ReferenceDescription, RegisterNodesRequest, RegisterNodesResponse,
    TranslateBrowsePathsToNodeIdsRequest, TranslateBrowsePathsToNodeIdsResponse,
    UnregisterNodesRequest, UnregisterNodesResponse,
};
use crate::roles::Roles;
use crate::server::service_state::ServiceState;
use crate::services::{fault, response_header};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::{ByteString, ExpandedNodeId, LocalizedText, NodeId, QualifiedName, StatusCode};

/// BrowseResultMask bits (Part 4 §5.9.2.2).
mod mask {
    pub const REFERENCE_TYPE_ID: u32 = 1;
    pub const IS_FORWARD: u32 = 2;
    pub const NODE_CLASS: u32 = 4;
    pub const BROWSE_NAME: u32 = 8;
    pub const DISPLAY_NAME: u32 = 16;
    pub const TYPE_DEFINITION: u32 = 32;
}

/// Most targets one TranslateBrowsePathsToNodeIds path may collect at any element before
/// it is answered BadTooManyMatches (Part 4 asks for at least 10).
pub const MAX_BROWSE_PATH_MATCHES: usize = 10_000;

/// `remainingPathIndex` of a fully resolved target (Part 4 §5.9.4.2: the maximum Index).
pub const PATH_FULLY_RESOLVED: u32 = u32::MAX;

fn node_class_of(n: NodeView<'_>) -> NodeClass {
    NodeClass(n.node_class().0)
}

/// Is `r`'s type `wanted` (a node index; or a subtype, with `include_subtypes`)? `None` is
/// any type.
#[inline]
fn reference_type_matches(
    space: &AddressSpace,
    r: &RefView<'_>,
    wanted: Option<u32>,
    include_subtypes: bool,
) -> bool {
    let Some(w) = wanted else {
        return true;
    };
    r.type_index()
        .is_some_and(|t| t == w || (include_subtypes && space.is_subtype_index(t, w)))
}

/// A null id (`Ok(None)`: any type) or a ReferenceType node's index; `Err` for anything else.
fn reference_type_index(space: &AddressSpace, id: &NodeId) -> Result<Option<u32>, ()> {
    if id.is_null() {
        return Ok(None);
    }
    match space.node(id) {
        Some(n) if node_class_of(n) == NodeClass::ReferenceType => Ok(Some(n.index())),
        _ => Err(()),
    }
}

/// The ReferenceDescription of `r`, with only the fields in `result_mask` filled (the
/// NodeId always).
/// Fills `d` with what `result_mask` asks of reference `r` and its target, reusing the memory
/// `d` already holds (`clone_from`): a recycled response's descriptions cost no allocation
/// when their strings are long enough.
fn describe_into(
    r: &RefView<'_>,
    target: Option<NodeView<'_>>,
    result_mask: u32,
    d: &mut ReferenceDescription,
) {
    r.write_target_into(&mut d.node_id);
    if result_mask & mask::REFERENCE_TYPE_ID != 0 {
        r.write_type_into(&mut d.reference_type_id);
    } else {
        d.reference_type_id = NodeId::NULL;
    }
    d.is_forward = result_mask & mask::IS_FORWARD != 0 && r.is_forward();
    let class = target.map(node_class_of);
    d.node_class = match class {
        Some(c) if result_mask & mask::NODE_CLASS != 0 => c,
        _ => NodeClass::default(),
    };
    match target {
        Some(t) if result_mask & mask::BROWSE_NAME != 0 => t.write_name_into(&mut d.browse_name),
        _ => d.browse_name = QualifiedName::default(),
    }
    match target {
        Some(t) if result_mask & mask::DISPLAY_NAME != 0 => {
            t.display().write_into(&mut d.display_name)
        }
        _ => d.display_name = LocalizedText::default(),
    }
    let found = match (target, class) {
        (Some(t), Some(NodeClass::Object | NodeClass::Variable))
            if result_mask & mask::TYPE_DEFINITION != 0 =>
        {
            // Copied into the recycled description (no allocation when it fits).
            match t.type_definition_node() {
                Some(td) => {
                    td.id().write_into(&mut d.type_definition.node_id);
                    d.type_definition.namespace_uri = crate::types::UaString::null();
                    d.type_definition.server_index = 0;
                    true
                }
                None => false,
            }
        }
        _ => false,
    };
    if !found {
        d.type_definition = ExpandedNodeId::default();
    }
}

fn describe(
    r: &RefView<'_>,
    target: Option<NodeView<'_>>,
    result_mask: u32,
) -> ReferenceDescription {
    let mut d = ReferenceDescription::default();
    describe_into(r, target, result_mask, &mut d);
    d
}

/// Every reference of one BrowseDescription into `out` (reusing its elements' memory; `out`
/// ends with exactly the references found), or the operation's status.
fn browse_all_into(
    space: &AddressSpace,
    bd: &BrowseDescription,
    out: &mut Vec<ReferenceDescription>,
) -> Result<(), StatusCode> {
    let dir = bd.browse_direction;
    if dir != BrowseDirection::Forward
        && dir != BrowseDirection::Inverse
        && dir != BrowseDirection::Both
    {
        return Err(StatusCode::BadBrowseDirectionInvalid);
    }
    let node = space
        .node(&bd.node_id)
        .ok_or(StatusCode::BadNodeIdUnknown)?;
    let wanted = reference_type_index(space, &bd.reference_type_id)
        .map_err(|()| StatusCode::BadReferenceTypeIdInvalid)?;
    let mut n = 0;
    for r in node.refs() {
        let direction_ok = match dir {
            BrowseDirection::Forward => r.is_forward(),
            BrowseDirection::Inverse => !r.is_forward(),
            _ => true,
        };
        if !direction_ok || !reference_type_matches(space, &r, wanted, bd.include_subtypes) {
            continue;
        }
        let target = r.target_node();
        if bd.node_class_mask != 0 {
            // The class of a target outside this server is unknown: it cannot pass a mask.
            match target {
                Some(t) if (node_class_of(t).0 as u32) & bd.node_class_mask != 0 => {}
                _ => continue,
            }
        }
        match out.get_mut(n) {
            Some(d) => describe_into(&r, target, bd.result_mask, d),
            None => out.push(describe(&r, target, bd.result_mask)),
        }
        n += 1;
    }
    out.truncate(n);
    Ok(())
}

/// `requestedMaxReferencesPerNode`: 0 is "no limit from the client".
fn max_refs(requested: u32) -> usize {
    if requested == 0 {
        usize::MAX
    } else {
        requested as usize
    }
}

fn check_count(n: usize, max: u32) -> Result<(), StatusCode> {
    if n == 0 {
        Err(StatusCode::BadNothingToDo)
    } else if n > max as usize {
        Err(StatusCode::BadTooManyOperations)
    } else {
        Ok(())
    }
}

/// May a user with `roles` see this node (the Browse permission)?
fn browsable(space: &AddressSpace, roles: Roles, id: &NodeId) -> bool {
    space.node_permits(id, roles, PermissionType::Browse)
}

/// Browse (Part 4 §5.9.2) for a validated, activated session. Nodes the user may not browse
/// (RolePermissions without Browse for its roles) are hidden: a starting node is
/// BadNodeIdUnknown, references to them are left out.
pub fn browse(
    state: &mut ServiceState,
    key: SessionKey,
    roles: Roles,
    req: &BrowseRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let limits = &state.shared().config.operation_limits;
    if let Err(s) = check_count(req.nodes_to_browse.len(), limits.max_nodes_per_browse) {
        return fault(handle, s, now);
    }
    let max_cps = limits.max_browse_continuation_points as usize;
    let mut spare = state.recycler.browse_response();
    let Some((shared, session, random)) = state.shared_and_session(key) else {
        return fault(handle, StatusCode::BadSessionIdInvalid, now);
    };
    let space: &AddressSpace = &shared.address_space;
    // Within a View only its nodes are seen: a starting node outside it is BadNodeNotInView,
    // references to nodes outside it are left out (Part 4 §5.9.2).
    let view = if req.view.view_id.is_null() {
        None
    } else {
        // Only View nodes have members: any other id is no View.
        let members = space
            .node_index(&req.view.view_id)
            .and_then(|i| space.view_members(i));
        match members {
            Some(m) => Some(m),
            None => return fault(handle, StatusCode::BadViewIdUnknown, now),
        }
    };
    let per_node = max_refs(req.requested_max_references_per_node);
    let seq = session.begin_request();
    // The results are built in the recycled response, reusing its descriptions' memory.
    let results = &mut spare.results;
    results.truncate(req.nodes_to_browse.len());
    results.resize_with(req.nodes_to_browse.len(), BrowseResult::default);
    for (k, (bd, result)) in req
        .nodes_to_browse
        .iter()
        .zip(results.iter_mut())
        .enumerate()
    {
        if k % AHEAD == 0 {
            // The next group's nodes read ahead: their lookups' cache misses waited for
            // together (docs/Scaling.md, "Reading a million nodes").
            let group = req.nodes_to_browse.get(k..).unwrap_or_default();
            space
                .store
                .prefetch_nodes(group.iter().map(|bd| (&bd.node_id, false)));
        }
        result.continuation_point = ByteString::null();
        let browsed = match view {
            Some(members)
                if !space
                    .node_index(&bd.node_id)
                    .is_some_and(|i| members.contains(&i)) =>
            {
                // An unknown node stays BadNodeIdUnknown; a known one outside the View is not in it.
                if space.node(&bd.node_id).is_some() {
                    Err(StatusCode::BadNodeNotInView)
                } else {
                    browse_all_into(space, bd, &mut result.references)
                }
            }
            Some(members) => browse_all_into(space, bd, &mut result.references).map(|()| {
                result.references.retain(|r| {
                    r.node_id.server_index != 0
                        || !r.node_id.namespace_uri.is_null()
                        || space
                            .node_index(&r.node_id.node_id)
                            .is_some_and(|i| members.contains(&i))
                });
            }),
            None => browse_all_into(space, bd, &mut result.references),
        };
        let browsed = match browsed {
            Ok(()) if space.has_role_permissions() => {
                if browsable(space, roles, &bd.node_id) {
                    result.references.retain(|r| {
                        r.node_id.server_index != 0
                            || !r.node_id.namespace_uri.is_null()
                            || browsable(space, roles, &r.node_id.node_id)
                    });
                    Ok(())
                } else {
                    Err(StatusCode::BadNodeIdUnknown)
                }
            }
            other => other,
        };
        result.status_code = match browsed {
            Err(status) => status,
            Ok(()) if result.references.len() > per_node => {
                let rest: VecDeque<ReferenceDescription> =
                    result.references.drain(per_node..).collect();
                match session.add_continuation_point(seq, max_cps, per_node, rest, random) {
                    Ok(cp) => {
                        result.continuation_point = cp;
                        StatusCode::Good
                    }
                    Err(status) => status,
                }
            }
            Ok(()) => StatusCode::Good,
        };
        if result.status_code.is_bad() {
            result.references.clear();
        }
    }
    spare.diagnostic_infos.clear();
    spare.response_header = response_header(handle, now);
    Response::Browse(spare)
}

/// BrowseNext (Part 4 §5.9.3) for a validated, activated session.
pub fn browse_next(
    state: &mut ServiceState,
    key: SessionKey,
    req: &BrowseNextRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let limits = &state.shared().config.operation_limits;
    if let Err(s) = check_count(req.continuation_points.len(), limits.max_nodes_per_browse) {
        return fault(handle, s, now);
    }
    let Some(session) = state.session_mut(key) else {
        return fault(handle, StatusCode::BadSessionIdInvalid, now);
    };
    let seq = session.begin_request();
    let mut results = Vec::with_capacity(req.continuation_points.len());
    for id in &req.continuation_points {
        let Some(mut cp) = session.take_continuation_point(id.as_bytes()) else {
            results.push(BrowseResult {
                status_code: StatusCode::BadContinuationPointInvalid,
                ..BrowseResult::default()
            });
            continue;
        };
        if req.release_continuation_points {
            // Released (dropped); the result is Good with no references.
            results.push(BrowseResult::default());
            continue;
        }
        let n = cp.max_references.min(cp.remaining.len());
        let references: Vec<ReferenceDescription> = cp.remaining.drain(..n).collect();
        let continuation_point = if cp.remaining.is_empty() {
            ByteString::null()
        } else {
            let id = cp.id();
            session.restore_continuation_point(cp, seq);
            id
        };
        results.push(BrowseResult {
            status_code: StatusCode::Good,
            continuation_point,
            references,
        });
    }
    Response::BrowseNext(Box::new(BrowseNextResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// Resolves one browse path (Part 4 §5.9.4).
fn translate_one(space: &AddressSpace, roles: Roles, path: &BrowsePath) -> BrowsePathResult {
    let fail = |s: StatusCode| BrowsePathResult {
        status_code: s,
        targets: Vec::new(),
    };
    let elements = &path.relative_path.elements;
    if elements.is_empty() {
        return fail(StatusCode::BadNothingToDo);
    }
    // TranslateBrowsePathsToNodeIds requires a targetName on every element.
    if elements.iter().any(|e| e.target_name.name.is_empty()) {
        return fail(StatusCode::BadBrowseNameInvalid);
    }
    if space.node(&path.starting_node).is_none() || !browsable(space, roles, &path.starting_node) {
        return fail(if path.starting_node.is_null() {
            StatusCode::BadNodeIdInvalid
        } else {
            StatusCode::BadNodeIdUnknown
        });
    }
    let mut targets: Vec<BrowsePathTarget> = Vec::new();
    let mut current: Vec<NodeView<'_>> = space.node(&path.starting_node).into_iter().collect();
    let last = elements.len() - 1;
    for (i, e) in elements.iter().enumerate() {
        let Ok(wanted) = reference_type_index(space, &e.reference_type_id) else {
            return fail(StatusCode::BadNoMatch);
        };
        let mut next: Vec<NodeView<'_>> = Vec::new();
        let mut seen: HashSet<u32> = HashSet::new();
        for node in &current {
            for r in node.refs() {
                // isInverse selects the inverse direction.
                if r.is_forward() == e.is_inverse
                    || !reference_type_matches(space, &r, wanted, e.include_subtypes)
                {
                    continue;
                }
                match r.target_node() {
                    Some(t)
                        if t.has_name(&e.target_name)
                            && browsable(space, roles, &t.node_id())
                            && seen.insert(t.index()) =>
                    {
                        next.push(t)
                    }
                    Some(_) => {}
                    // A node in another server: its BrowseName cannot be checked here. The
                    // client continues there from element i + 1 (Part 4 §5.9.4.2).
                    None if r.is_foreign() && i < last => {
                        let target = r.target();
                        if target.server_index != 0
                            && !targets.iter().any(|t| t.target_id == target)
                        {
                            targets.push(BrowsePathTarget {
                                target_id: target,
                                remaining_path_index: (i + 1) as u32,
                            })
                        }
                    }
                    None => {}
                }
                if next.len() + targets.len() > MAX_BROWSE_PATH_MATCHES {
                    return fail(StatusCode::BadTooManyMatches);
                }
            }
        }
        current = next;
        if current.is_empty() {
            break;
        }
    }
    let remote = !targets.is_empty();
    let local = current.len();
    targets.splice(
        0..0,
        current.iter().map(|n| BrowsePathTarget {
            target_id: ExpandedNodeId::local(n.node_id()),
            remaining_path_index: PATH_FULLY_RESOLVED,
        }),
    );
    let status = if local > 0 {
        StatusCode::Good
    } else if remote {
        StatusCode::UncertainReferenceOutOfServer
    } else {
        StatusCode::BadNoMatch
    };
    BrowsePathResult {
        status_code: status,
        targets,
    }
}

/// TranslateBrowsePathsToNodeIds (Part 4 §5.9.4) for a validated, activated session.
pub fn translate_browse_paths(
    state: &ServiceState,
    roles: Roles,
    req: &TranslateBrowsePathsToNodeIdsRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let shared = state.shared();
    if let Err(s) = check_count(
        req.browse_paths.len(),
        shared
            .config
            .operation_limits
            .max_nodes_per_translate_browse_paths_to_node_ids,
    ) {
        return fault(handle, s, now);
    }
    let space: &AddressSpace = &shared.address_space;
    let results = req
        .browse_paths
        .iter()
        .map(|p| translate_one(space, roles, p))
        .collect();
    Response::TranslateBrowsePathsToNodeIds(Box::new(TranslateBrowsePathsToNodeIdsResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// RegisterNodes (Part 4 §5.9.5): the registered ids are the ids themselves, which Part 4
/// allows; lookups are already a table index for numeric ids of namespaces 0 and 1.
pub fn register_nodes(state: &ServiceState, req: &RegisterNodesRequest, now: Now) -> Response {
    let handle = req.request_header.request_handle;
    let max = state
        .shared()
        .config
        .operation_limits
        .max_nodes_per_register_nodes;
    if let Err(s) = check_count(req.nodes_to_register.len(), max) {
        return fault(handle, s, now);
    }
    Response::RegisterNodes(Box::new(RegisterNodesResponse {
        response_header: response_header(handle, now),
        registered_node_ids: req.nodes_to_register.clone(),
    }))
}

/// UnregisterNodes (Part 4 §5.9.6): nothing was allocated by RegisterNodes.
pub fn unregister_nodes(state: &ServiceState, req: &UnregisterNodesRequest, now: Now) -> Response {
    let handle = req.request_header.request_handle;
    let max = state
        .shared()
        .config
        .operation_limits
        .max_nodes_per_register_nodes;
    if let Err(s) = check_count(req.nodes_to_unregister.len(), max) {
        return fault(handle, s, now);
    }
    Response::UnregisterNodes(Box::new(UnregisterNodesResponse {
        response_header: response_header(handle, now),
    }))
}
