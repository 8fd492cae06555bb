//! The Attribute service set (Part 4 §5.10): Read and Write.
//!
//! Decisions (all compliant with Part 4):
//! * Source timestamps are returned only for the Value attribute; the server timestamp is
//!   the `now` of the request for every attribute (unless a value carries its own).
//! * Write accepts a StatusCode and a SourceTimestamp with the value (the writable variables
//!   advertise StatusWrite and TimestampWrite in their AccessLevel); a missing SourceTimestamp
//!   becomes `now`. A ServerTimestamp in a Write is rejected with `BadWriteNotSupported`: the
//!   server timestamp is always the server's own clock.
//! * Only the Value attribute is writable; every node has WriteMask 0, so any other attribute
//!   answers `BadNotWritable`.
//! * What the session's user may do is checked per operation from its roles and the node's
//!   RolePermissions ([`crate::roles`]): Value reads need Read, other attributes Browse,
//!   RolePermissions ReadRolePermissions, Value writes Write, other writes WriteAttribute;
//!   BadUserAccessDenied otherwise. UserAccessLevel, UserExecutable, UserWriteMask and
//!   UserRolePermissions are the node's attributes narrowed to the user's permissions.

pub use crate::address_space::attributes::{
    attr, check_value, commit_write, finish_async_value, prepare_write, read_attribute,
    read_attribute_into, read_permission, user_access_mask, write_attribute, write_permitted,
    PreparedWrite, Timestamps,
};
use crate::address_space::attributes::{bad, check_encoding, value_readable, write_mask};
use crate::address_space::numeric_range::NumericRange;
use crate::address_space::store::prefetch::AHEAD;
use crate::address_space::AddressSpace;
use crate::config::OperationLimits;
use crate::generated::messages::Response;
use crate::generated::types::{
    PermissionType, ReadRequest, ReadResponse, ReadValueId, WriteRequest, WriteResponse,
};
use crate::response::{fault, response_header};
use crate::roles::Roles;
use crate::shared::ServerShared;
use crate::types::{BuiltinType, DataValue, StatusCode, Variant};
use crate::Now;

/// The Read service: a `ReadResponse`, or a `ServiceFault` for a bad request
/// (BadNothingToDo, BadTooManyOperations, BadMaxAgeInvalid, BadTimestampsToReturnInvalid).
/// MaxAge is otherwise ignored: every value is current.
/// Read with every role ([`Roles::ALL`]); sessions read through [`read_into`].
pub fn read(shared: &ServerShared, req: &ReadRequest, now: Now) -> Response {
    read_into(shared, Roles::ALL, req, now, Box::default())
}

/// [`read`] for a user with `roles`, building its response in `spare` (an empty, recycled
/// response whose arrays' capacity is reused; see `server::recycle`).
pub fn read_into(
    shared: &ServerShared,
    roles: Roles,
    req: &ReadRequest,
    now: Now,
    mut spare: Box<ReadResponse>,
) -> Response {
    let handle = req.request_header.request_handle;
    let limits = &shared.config.operation_limits;
    let ts = match check_read_request(
        limits,
        req.nodes_to_read.len(),
        req.max_age,
        req.timestamps_to_return.0,
    ) {
        Ok(t) => t,
        Err(s) => return fault(handle, s, now),
    };
    let space = &shared.address_space;
    // The recycled response keeps its results: each is overwritten in place, so a String,
    // array or structure read into a slot that held one of its kind reuses its memory.
    let results = &mut spare.results;
    results.truncate(req.nodes_to_read.len());
    // With asynchronous nodes in the space, the dispatcher's [`reads_async`] walked these
    // nodes just before (reading them ahead): they are in the cache.
    let ahead = !space.has_async();
    let mut i = 0;
    for group in req.nodes_to_read.chunks(AHEAD) {
        if ahead {
            read_ahead(space, group);
        }
        for rv in group {
            match results.get_mut(i) {
                Some(slot) => read_as_into(space, roles, rv, ts, now, slot),
                None => results.push(read_as(space, roles, rv, ts, now)),
            }
            i += 1;
        }
    }
    spare.diagnostic_infos.clear();
    spare.response_header = response_header(handle, now);
    Response::Read(spare)
}

/// Reads ahead the nodes of up to [`AHEAD`] operations of a Read: their lookups' index
/// slots, records and ids, and the value cells of the Value reads, each stage's cache misses
/// waited for together rather than one node after another (a Read of many nodes of a big
/// address space; docs/Scaling.md, "Reading a million nodes").
fn read_ahead(space: &AddressSpace, group: &[ReadValueId]) {
    space.store.prefetch_nodes(
        group
            .iter()
            .map(|rv| (&rv.node_id, rv.attribute_id == attr::VALUE)),
    );
}

/// Is `attribute_id` one whose value depends on the user?
fn user_attribute(attribute_id: u32) -> bool {
    matches!(
        attribute_id,
        attr::USER_ACCESS_LEVEL
            | attr::USER_EXECUTABLE
            | attr::USER_WRITE_MASK
            | attr::ROLE_PERMISSIONS
            | attr::USER_ROLE_PERMISSIONS
    )
}

/// Reads one attribute as a user with `roles` sees it: the permission the attribute needs
/// (BadUserAccessDenied without it), then [`read_attribute`], then the user attributes
/// narrowed to the user's permissions.
pub fn read_as(
    space: &AddressSpace,
    roles: Roles,
    rv: &ReadValueId,
    ts: Timestamps,
    now: Now,
) -> DataValue {
    let mut dv = DataValue::default();
    read_as_into(space, roles, rv, ts, now, &mut dv);
    dv
}

/// [`read_as`] into `out`, reusing its memory where the value allows
/// ([`read_attribute_into`]).
pub fn read_as_into(
    space: &AddressSpace,
    roles: Roles,
    rv: &ReadValueId,
    ts: Timestamps,
    now: Now,
    out: &mut DataValue,
) {
    let read = |out: &mut DataValue| {
        read_attribute_into(
            space,
            &rv.node_id,
            rv.attribute_id,
            rv.index_range.as_str(),
            &rv.data_encoding,
            ts,
            now,
            out,
        )
    };
    // Most nodes have no RolePermissions (own or their namespace's): then only the user
    // attributes need the user.
    if !user_attribute(rv.attribute_id) && !space.has_role_permissions_in(rv.node_id.namespace) {
        return read(out);
    }
    let Some(index) = space.node_index(&rv.node_id) else {
        return *out = bad(StatusCode::BadNodeIdUnknown);
    };
    let permissions = space.permissions(index, roles);
    if !permissions.contains(read_permission(rv.attribute_id)) {
        return *out = bad(StatusCode::BadUserAccessDenied);
    }
    match rv.attribute_id {
        attr::ROLE_PERMISSIONS | attr::USER_ROLE_PERMISSIONS => {
            let shown = if rv.attribute_id == attr::ROLE_PERMISSIONS {
                Roles::ALL
            } else {
                roles
            };
            *out = role_permissions_value(space, index, shown, rv, ts, now);
        }
        _ => {
            read(out);
            narrow_to_user(space, roles, permissions, rv, out);
        }
    }
}

/// RolePermissions (`shown` = every role) or UserRolePermissions (the user's roles) of the
/// node at `index`: BadAttributeIdInvalid when neither the node nor its namespace has any.
fn role_permissions_value(
    space: &AddressSpace,
    index: u32,
    shown: Roles,
    rv: &ReadValueId,
    ts: Timestamps,
    now: Now,
) -> DataValue {
    let Some(rp) = space.role_permissions(index) else {
        return bad(StatusCode::BadAttributeIdInvalid);
    };
    if let Err(e) = check_encoding(rv.attribute_id, &rv.data_encoding, None) {
        return bad(e);
    }
    let entries: Vec<Variant> = rp
        .to_attribute(shown)
        .iter()
        .map(|e| Variant::ExtensionObject(Box::new(crate::types::ExtensionObject::from_struct(e))))
        .collect();
    let Some(value) = Variant::array(BuiltinType::ExtensionObject, entries) else {
        return bad(StatusCode::BadInternalError);
    };
    let value = match NumericRange::parse(rv.index_range.as_str()) {
        Ok(None) => value,
        Ok(Some(r)) => match r.read(&value) {
            Ok(v) => v,
            Err(e) => return bad(e),
        },
        Err(e) => return bad(e),
    };
    DataValue {
        value,
        server_timestamp: ts.server().then_some(now.utc),
        ..Default::default()
    }
}

/// UserAccessLevel, UserExecutable and UserWriteMask as the user sees them: the node's
/// value with what `permissions` (and, for a method without RolePermissions that changes
/// state, a writing role) does not allow taken away.
fn narrow_to_user(
    space: &AddressSpace,
    roles: Roles,
    permissions: PermissionType,
    rv: &ReadValueId,
    dv: &mut DataValue,
) {
    match (rv.attribute_id, &mut dv.value) {
        (attr::USER_ACCESS_LEVEL, Variant::Byte(b)) => *b &= user_access_mask(permissions),
        (attr::USER_EXECUTABLE, Variant::Boolean(b)) => {
            *b = *b && super::method::method_callable(space, roles, &rv.node_id);
        }
        (attr::USER_WRITE_MASK, Variant::UInt32(m)) => {
            if !permissions.contains(PermissionType::WriteAttribute) {
                *m &= write_mask::ROLE_PERMISSIONS | write_mask::HISTORIZING;
            }
            if !permissions.contains(PermissionType::WriteRolePermissions) {
                *m &= !write_mask::ROLE_PERMISSIONS;
            }
            if !permissions.contains(PermissionType::WriteHistorizing) {
                *m &= !write_mask::HISTORIZING;
            }
        }
        _ => {}
    }
}

/// The Write service: a `WriteResponse`, or a `ServiceFault` (BadNothingToDo,
/// BadTooManyOperations).
pub fn write(shared: &ServerShared, req: &WriteRequest, now: Now) -> Response {
    write_into(shared, Roles::ALL, "", req, now, Box::default())
}

/// [`write`] for a user with `roles`, building its response in `spare` (an empty, recycled
/// response).
pub fn write_into(
    shared: &ServerShared,
    roles: Roles,
    user: &str,
    req: &WriteRequest,
    now: Now,
    mut spare: Box<WriteResponse>,
) -> Response {
    let handle = req.request_header.request_handle;
    let limits = &shared.config.operation_limits;
    if let Err(s) = check_write_request(limits, req.nodes_to_write.len()) {
        return fault(handle, s, now);
    }
    let space = &shared.address_space;
    spare.results.clear();
    spare.results.extend(req.nodes_to_write.iter().map(|w| {
        if let Err(s) = write_permitted(space, roles, w) {
            return s;
        }
        write_attribute(
            space,
            limits,
            &w.node_id,
            w.attribute_id,
            w.index_range.as_str(),
            &w.value,
            user,
            roles,
            now,
        )
    }));
    spare.diagnostic_infos.clear();
    spare.response_header = response_header(handle, now);
    Response::Write(spare)
}

/// Does this Read touch a Variable with an asynchronous source (its Value), or a
/// read-through Variable whose cell does not meet the Read's maxAge?
///
/// The first walk of the request's nodes when the space has asynchronous ones: it reads
/// them ahead ([`read_ahead`]) for itself and for the Read that follows.
pub fn reads_async(space: &AddressSpace, req: &ReadRequest, now: Now) -> bool {
    req.nodes_to_read.chunks(AHEAD).any(|group| {
        read_ahead(space, group);
        group.iter().any(|rv| {
            rv.attribute_id == attr::VALUE
                && space.node_index(&rv.node_id).is_some_and(|i| {
                    space.async_source(i).is_some()
                        || space
                            .read_through(i)
                            .is_some_and(|r| r.due(req.max_age, now))
                })
        })
    })
}

/// The asynchronous source a Read of the Value of the node at `ix` goes to: its own, or
/// its read-through's when the cell does not meet `max_age`.
fn deferred_source(
    space: &AddressSpace,
    ix: u32,
    max_age: f64,
    now: Now,
) -> Option<std::sync::Arc<crate::address_space::app::AsyncSource>> {
    if let Some(s) = space.async_source(ix) {
        return Some(s.clone());
    }
    space
        .read_through(ix)
        .filter(|r| r.due(max_age, now))
        .map(|r| r.source.clone())
}

/// A Read with operations answered by asynchronous sources: the other operations are read
/// now, the asynchronous ones handed to their sources, and the response sent when the last
/// one is settled (`None`: deferred, through the shard's outbox for `channel_id`).
/// Every operation is checked against the user's `roles` as the synchronous Read does.
pub fn read_deferred(
    state: &mut crate::server::service_state::ServiceState,
    roles: Roles,
    channel_id: u32,
    request_id: u32,
    req: &ReadRequest,
    now: Now,
) -> Option<Response> {
    use crate::address_space::app::{AsyncRead, Outcome};
    use crate::server::deferred::{PendingKind, ReadOp};
    let handle = req.request_header.request_handle;
    let shared = std::sync::Arc::clone(state.shared());
    let limits = &shared.config.operation_limits;
    let ts = match check_read_request(
        limits,
        req.nodes_to_read.len(),
        req.max_age,
        req.timestamps_to_return.0,
    ) {
        Ok(t) => t,
        Err(s) => return Some(fault(handle, s, now)),
    };
    let space = &shared.address_space;
    let mut results = Vec::with_capacity(req.nodes_to_read.len());
    let mut ops = Vec::new();
    let mut starts = Vec::new();
    for (i, rv) in req.nodes_to_read.iter().enumerate() {
        let source = (rv.attribute_id == attr::VALUE)
            .then(|| space.node_index(&rv.node_id))
            .flatten()
            .and_then(|ix| {
                Some((
                    ix,
                    space.node_at(ix)?,
                    deferred_source(space, ix, req.max_age, now)?,
                ))
            });
        let Some((ix, node, source)) = source else {
            results.push(read_as(space, roles, rv, ts, now));
            continue;
        };
        let permitted = || {
            if space
                .permissions(ix, roles)
                .contains(read_permission(attr::VALUE))
            {
                Ok(())
            } else {
                Err(StatusCode::BadUserAccessDenied)
            }
        };
        if let Err(status) = node
            .as_variable()
            .map_or(Err(StatusCode::BadNotReadable), value_readable)
            .and_then(|()| permitted())
        {
            results.push(bad(status));
            continue;
        }
        let range = match NumericRange::parse(rv.index_range.as_str()) {
            Ok(r) => r,
            Err(e) => {
                results.push(bad(e));
                continue;
            }
        };
        results.push(DataValue::default());
        ops.push(ReadOp {
            result: i as u32,
            range,
            encoding: rv.data_encoding.clone(),
        });
        starts.push((source, rv.node_id.clone()));
    }
    let mut response = Box::new(ReadResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    });
    if ops.is_empty() {
        return Some(Response::Read(response));
    }
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() < ops.len() {
        for o in &ops {
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = bad(StatusCode::BadTooManyOperations);
            }
        }
        return Some(Response::Read(response));
    }
    let opened = deferrals.begin(
        space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::Read {
            response,
            timestamps: ts,
            ops,
        },
        starts.iter().map(|(s, _)| s.timeout_ms()),
        now,
    );
    let mut finished = None;
    for (op, (source, node_id)) in starts.into_iter().enumerate() {
        let op = op as u32;
        if !source.try_acquire() {
            finished = deferrals
                .settle(
                    space,
                    opened.slot,
                    opened.generation,
                    op,
                    Outcome::Status(StatusCode::BadTooManyOperations),
                    now,
                )
                .or(finished);
            continue;
        }
        let reply = opened.reply(op, Some(source.clone()));
        (source.read)(AsyncRead::new(node_id, reply));
    }
    finished.map(|f| f.kind.into_response())
}

/// Does this Write touch a Variable with an asynchronous write hook?
pub fn writes_async(space: &AddressSpace, req: &WriteRequest) -> bool {
    req.nodes_to_write.iter().any(|w| {
        w.attribute_id == attr::VALUE
            && space
                .node_index(&w.node_id)
                .is_some_and(|i| space.async_write_hook(i).is_some())
    })
}

/// A Write with operations answered by asynchronous write hooks (a user with write
/// access): the others are written now, each asynchronous one checked as usual and handed
/// to its hook, stored when the hook answers Good. `None`: deferred.
pub fn write_deferred(
    state: &mut crate::server::service_state::ServiceState,
    key: crate::session::SessionKey,
    roles: Roles,
    channel_id: u32,
    request_id: u32,
    req: &WriteRequest,
    now: Now,
) -> Option<Response> {
    use crate::address_space::app::{AsyncWrite, WriteInfo};
    use crate::server::deferred::{PendingKind, WriteOp};
    let handle = req.request_header.request_handle;
    let shared = std::sync::Arc::clone(state.shared());
    let limits = &shared.config.operation_limits;
    if let Err(s) = check_write_request(limits, req.nodes_to_write.len()) {
        return Some(fault(handle, s, now));
    }
    let space = &shared.address_space;
    // The writing session's user, for the hooks (a gateway maps it to an identity there).
    let user: String = state
        .session(key)
        .and_then(|s| s.identity.as_ref())
        .map_or("", |i| i.user())
        .to_string();
    let mut results = Vec::with_capacity(req.nodes_to_write.len());
    let mut ops = Vec::new();
    let mut hooks = Vec::new();
    for (i, w) in req.nodes_to_write.iter().enumerate() {
        if let Err(s) = write_permitted(space, roles, w) {
            results.push(s);
            continue;
        }
        let hook = (w.attribute_id == attr::VALUE)
            .then(|| space.node_index(&w.node_id))
            .flatten()
            .and_then(|ix| space.async_write_hook(ix).cloned());
        let Some(hook) = hook else {
            results.push(write_attribute(
                space,
                limits,
                &w.node_id,
                w.attribute_id,
                w.index_range.as_str(),
                &w.value,
                &user,
                roles,
                now,
            ));
            continue;
        };
        match prepare_write(
            space,
            limits,
            &w.node_id,
            w.attribute_id,
            w.index_range.as_str(),
            &w.value,
            now,
        ) {
            Err(s) => results.push(s),
            Ok(mut p) => {
                // A read-through Variable's cell is kept by whoever answers the Write (the
                // value it reports afterwards is stored there, in the other server's order).
                if space.read_through(p.node_index).is_some() {
                    p.stores = false;
                }
                results.push(StatusCode::Good);
                hooks.push((hook, i));
                ops.push(WriteOp {
                    result: i as u32,
                    prepared: p,
                });
            }
        }
    }
    let mut response = Box::new(WriteResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    });
    if ops.is_empty() {
        return Some(Response::Write(response));
    }
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() < ops.len() {
        for o in &ops {
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = StatusCode::BadTooManyOperations;
            }
        }
        return Some(Response::Write(response));
    }
    let infos: Vec<DataValue> = ops.iter().map(|o| o.prepared.stored.clone()).collect();
    let opened = deferrals.begin(
        space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::Write { response, ops },
        hooks.iter().map(|(h, _)| h.timeout_ms),
        now,
    );
    for (op, ((hook, i), stored)) in hooks.into_iter().zip(infos).enumerate() {
        let Some(w) = req.nodes_to_write.get(i) else {
            continue;
        };
        let reply = opened.reply(op as u32, None);
        let info = WriteInfo {
            node_id: &w.node_id,
            value: &stored,
            index_range: w.index_range.as_str(),
            user: &user,
            roles,
            now,
        };
        (hook.start)(&info, AsyncWrite::new(reply));
    }
    None
}

/// Checks the request-level parameters of a Read: operation count, MaxAge and
/// TimestampsToReturn. `Err` is the ServiceResult.
pub fn check_read_request(
    limits: &OperationLimits,
    count: usize,
    max_age: f64,
    ttr: i32,
) -> Result<Timestamps, StatusCode> {
    if count == 0 {
        return Err(StatusCode::BadNothingToDo);
    }
    if count > limits.max_nodes_per_read as usize {
        return Err(StatusCode::BadTooManyOperations);
    }
    if max_age.is_nan() || max_age < 0.0 {
        return Err(StatusCode::BadMaxAgeInvalid);
    }
    Timestamps::from_i32(ttr).ok_or(StatusCode::BadTimestampsToReturnInvalid)
}

/// Checks the request-level parameters of a Write. `Err` is the ServiceResult.
pub fn check_write_request(limits: &OperationLimits, count: usize) -> Result<(), StatusCode> {
    if count == 0 {
        return Err(StatusCode::BadNothingToDo);
    }
    if count > limits.max_nodes_per_write as usize {
        return Err(StatusCode::BadTooManyOperations);
    }
    Ok(())
}
