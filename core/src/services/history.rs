//! The HistoryRead service (Part 4 §5.10.3, Part 11 §6).
//!
//! What the server checks itself, in this order: a history store is attached (else the
//! service is BadServiceUnsupported); the request has operations, within the operation
//! limits; TimestampsToReturn is Source, Server or Both (Neither and unknown values are
//! BadTimestampsToReturnInvalid); the details decode and are complete (raw reads need two
//! of startTime, endTime and numValuesPerNode; processed reads one aggregate per node).
//! Then per node: it exists (BadNodeIdUnknown); a data read needs a Variable whose
//! AccessLevel has HistoryRead (else BadNotReadable), an event read an EventNotifier with
//! HistoryRead; the store keeps its history (else BadHistoryOperationUnsupported); the
//! user's roles grant ReadHistory (BadUserAccessDenied); the IndexRange parses; a
//! continuation point is one of the session's, for the same details and node
//! (BadContinuationPointInvalid). What passes goes to the store
//! ([`crate::history::HistoryBackend::read`]) and is answered when the store answers,
//! through the deferred-response path.
//!
//! Continuation points: the store's resume token is kept in the session
//! ([`crate::server::service_state::Session::add_history_point`], at most
//! `operation_limits.max_history_continuation_points`); a request with
//! releaseContinuationPoints releases the ones it names (the store is told:
//! [`crate::history::HistoryBackend::release_continuation_point`]) and reads nothing.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::address_space::{access_level, NumericRange};
use crate::generated::messages::Response;
use crate::generated::types::{
    HistoryReadRequest, HistoryReadResponse, HistoryReadResult, PermissionType, TimestampsToReturn,
};
use crate::history::{HistoryReadOp, HistoryReply, ReadDetails};
use crate::server::deferred::{HistoryOp, PendingKind};
use crate::server::service_state::ServiceState;
use crate::services::{fault, response_header};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::StatusCode;

use crate::address_space::event_notifier;

fn result(status: StatusCode) -> HistoryReadResult {
    HistoryReadResult {
        status_code: status,
        ..HistoryReadResult::default()
    }
}

/// Checks the details as a whole: `Err` is the service result.
fn check_details(details: &ReadDetails, nodes: usize) -> Result<(), StatusCode> {
    match details {
        ReadDetails::Raw(d) => {
            let given = [
                !d.start_time.is_null(),
                !d.end_time.is_null(),
                d.num_values_per_node > 0,
            ];
            if given.iter().filter(|g| **g).count() < 2 {
                return Err(StatusCode::BadInvalidTimestampArgument);
            }
            Ok(())
        }
        ReadDetails::AtTime(d) => {
            if d.req_times.is_empty() {
                Err(StatusCode::BadInvalidArgument)
            } else {
                Ok(())
            }
        }
        ReadDetails::Processed(d) => {
            if d.aggregate_type.len() != nodes {
                return Err(StatusCode::BadAggregateListMismatch);
            }
            if d.start_time.is_null() || d.end_time.is_null() {
                return Err(StatusCode::BadInvalidTimestampArgument);
            }
            if !d.processing_interval.is_finite() || d.processing_interval < 0.0 {
                return Err(StatusCode::BadInvalidArgument);
            }
            Ok(())
        }
        ReadDetails::Events(d) => {
            let given = [
                !d.start_time.is_null(),
                !d.end_time.is_null(),
                d.num_values_per_node > 0,
            ];
            if given.iter().filter(|g| **g).count() < 2 {
                return Err(StatusCode::BadInvalidTimestampArgument);
            }
            Ok(())
        }
    }
}

/// The fingerprint a continuation point carries: the request's encoded details (encoded
/// once per request), the node and the timestamps asked for.
fn fingerprint(details: &[u8], node: &crate::types::NodeId, timestamps: i32) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    details.hash(&mut h);
    node.hash(&mut h);
    timestamps.hash(&mut h);
    h.finish()
}

/// HistoryRead. `None`: deferred (answered through the shard's outbox for `channel_id`).
pub fn history_read(
    state: &mut ServiceState,
    key: SessionKey,
    roles: crate::roles::Roles,
    channel_id: u32,
    request_id: u32,
    req: &HistoryReadRequest,
    now: Now,
) -> Option<Response> {
    let handle = req.request_header.request_handle;
    let shared = Arc::clone(state.shared());
    let Some(backend) = shared.history.clone() else {
        return Some(fault(handle, StatusCode::BadServiceUnsupported, now));
    };
    let limits = &shared.config.operation_limits;
    if req.nodes_to_read.is_empty() {
        return Some(fault(handle, StatusCode::BadNothingToDo, now));
    }
    let timestamps = req.timestamps_to_return;
    if timestamps.0 > TimestampsToReturn::Both.0 {
        return Some(fault(handle, StatusCode::BadTimestampsToReturnInvalid, now));
    }
    let respond = |results: Vec<HistoryReadResult>| {
        Some(Response::HistoryRead(Box::new(HistoryReadResponse {
            response_header: response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        })))
    };
    if req.release_continuation_points {
        // Part 11 §6.3: release the named points, read nothing.
        if req.nodes_to_read.len() > limits.max_nodes_per_history_read_data as usize {
            return Some(fault(handle, StatusCode::BadTooManyOperations, now));
        }
        let session = state.session_mut(key)?;
        let results = req
            .nodes_to_read
            .iter()
            .map(
                |n| match session.take_history_point(n.continuation_point.as_bytes()) {
                    Some(cp) => {
                        // The store may hold something for it (a forwarded read's point
                        // on another server).
                        backend.release_continuation_point(&n.node_id, cp.token);
                        result(StatusCode::Good)
                    }
                    None => result(StatusCode::BadContinuationPointInvalid),
                },
            )
            .collect();
        return respond(results);
    }
    if timestamps == TimestampsToReturn::Neither {
        return Some(fault(handle, StatusCode::BadTimestampsToReturnInvalid, now));
    }
    let details =
        match ReadDetails::decode(&req.history_read_details, crate::DecodeLimits::default()) {
            Ok(d) => d,
            Err(s) => return Some(fault(handle, s, now)),
        };
    let events = details.reads_events();
    let max_nodes = if events {
        limits.max_nodes_per_history_read_events
    } else {
        limits.max_nodes_per_history_read_data
    };
    if req.nodes_to_read.len() > max_nodes as usize {
        return Some(fault(handle, StatusCode::BadTooManyOperations, now));
    }
    if let Err(s) = check_details(&details, req.nodes_to_read.len()) {
        return Some(fault(handle, s, now));
    }
    let capabilities = backend.capabilities();
    let user: Arc<str> = Arc::from(
        state
            .session(key)
            .and_then(|s| s.identity.as_ref())
            .map_or("", |i| i.user()),
    );
    if let ReadDetails::Raw(d) = &details {
        if d.is_read_modified && (!capabilities.modified_values || d.return_bounds) {
            // Part 11 §6.5.3.3: returnBounds with a modified read is Bad_InvalidArgument; a
            // store that keeps no modifications cannot answer one.
            let s = if capabilities.modified_values {
                StatusCode::BadInvalidArgument
            } else {
                StatusCode::BadHistoryOperationUnsupported
            };
            return respond(req.nodes_to_read.iter().map(|_| result(s)).collect());
        }
    }
    let request_max = match &details {
        ReadDetails::Raw(d) => d.num_values_per_node,
        ReadDetails::Events(d) => d.num_values_per_node,
        _ => 0,
    };
    // What one answer may hold: the request's numValuesPerNode, the server's per-node
    // limit, and a share of one response message (a value takes at least ~24 bytes
    // encoded: a response of every node's values never needs more than the message size
    // the transport allows, so the deferred response stays bounded by it).
    let per_message =
        (shared.config.transport.max_message_size as usize / 24) / req.nodes_to_read.len().max(1);
    let max_values = match request_max {
        0 => limits.max_history_values_per_node,
        n => n.min(limits.max_history_values_per_node),
    }
    .min(per_message.max(1).min(u32::MAX as usize) as u32);
    // An event read's filter, compiled once for every node of the request.
    let event_filter = match &details {
        ReadDetails::Events(d) => Some(
            crate::events::filter::compile_with(
                &d.filter,
                &shared.address_space,
                crate::events::filter::FilterLimits::from_config(&shared.config.events),
            )
            .map(|(f, _)| Arc::new(f))
            .map_err(|(s, _)| s),
        ),
        _ => None,
    };
    let details = Arc::new(details);
    let details_bytes = crate::encoding::Encode::to_bytes(&req.history_read_details);
    let space = &shared.address_space;
    let mut results = Vec::with_capacity(req.nodes_to_read.len());
    let mut ops = Vec::new();
    let mut starts = Vec::new();
    for (i, n) in req.nodes_to_read.iter().enumerate() {
        let checked = (|| {
            let ix = space
                .node_index(&n.node_id)
                .ok_or(StatusCode::BadNodeIdUnknown)?;
            let node = space.node_at(ix).ok_or(StatusCode::BadNodeIdUnknown)?;
            if events {
                let notifier = node
                    .event_notifier()
                    .ok_or(StatusCode::BadHistoryOperationUnsupported)?;
                if notifier & event_notifier::HISTORY_READ == 0 {
                    return Err(StatusCode::BadHistoryOperationUnsupported);
                }
            } else {
                let v = node
                    .as_variable()
                    .ok_or(StatusCode::BadHistoryOperationUnsupported)?;
                if v.access_level() & access_level::HISTORY_READ == 0 {
                    return Err(StatusCode::BadNotReadable);
                }
            }
            if !backend.has_history(&n.node_id, events) {
                return Err(StatusCode::BadHistoryOperationUnsupported);
            }
            if !space
                .permissions(ix, roles)
                .contains(PermissionType::ReadHistory)
            {
                return Err(StatusCode::BadUserAccessDenied);
            }
            let aggregate = match &*details {
                ReadDetails::Processed(d) => {
                    let a = d
                        .aggregate_type
                        .get(i)
                        .ok_or(StatusCode::BadInternalError)?;
                    if !capabilities.aggregates.contains(a) {
                        return Err(StatusCode::BadAggregateNotSupported);
                    }
                    Some(a.clone())
                }
                _ => None,
            };
            let filter = match &event_filter {
                Some(Ok(f)) => Some(Arc::clone(f)),
                Some(Err(s)) => return Err(*s),
                None => None,
            };
            let index_range = NumericRange::parse(n.index_range.as_str())?;
            let fp = fingerprint(&details_bytes, &n.node_id, timestamps.0);
            let resume = if n.continuation_point.as_bytes().is_empty() {
                None
            } else {
                let session = state
                    .session_mut(key)
                    .ok_or(StatusCode::BadSessionIdInvalid)?;
                let cp = session
                    .take_history_point(n.continuation_point.as_bytes())
                    .ok_or(StatusCode::BadContinuationPointInvalid)?;
                if cp.fingerprint != fp {
                    // Used up by a continuation with other details: the backend's point
                    // will not be used either.
                    backend.release_continuation_point(&cp.node_id, cp.token);
                    return Err(StatusCode::BadContinuationPointInvalid);
                }
                Some(cp.token)
            };
            Ok((index_range, fp, resume, aggregate, filter))
        })();
        match checked {
            Ok((index_range, fp, resume, aggregate, filter)) => {
                results.push(result(StatusCode::Good));
                ops.push(HistoryOp {
                    result: i as u32,
                    node_id: n.node_id.clone(),
                    fingerprint: fp,
                });
                starts.push(HistoryReadOp {
                    node_id: n.node_id.clone(),
                    details: Arc::clone(&details),
                    timestamps,
                    index_range,
                    aggregate,
                    event_filter: filter,
                    resume,
                    max_values,
                    user: Arc::clone(&user),
                    roles,
                });
            }
            Err(s) => results.push(result(s)),
        }
    }
    let mut response = Box::new(HistoryReadResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    });
    if ops.is_empty() {
        return Some(Response::HistoryRead(response));
    }
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() < ops.len() {
        for o in &ops {
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = result(StatusCode::BadTooManyOperations);
            }
        }
        return Some(Response::HistoryRead(response));
    }
    let timeout_ms = backend.timeout_ms();
    let count = ops.len();
    let opened = deferrals.begin(
        space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::HistoryRead {
            response,
            session: key,
            ops,
        },
        std::iter::repeat_n(timeout_ms, count),
        now,
    );
    for (op, start) in starts.into_iter().enumerate() {
        backend.read(start, HistoryReply::new(opened.reply(op as u32, None)));
    }
    None
}

/// HistoryUpdate (Part 4 §5.10.5, Part 11 §6.8). `None`: deferred. What the server checks
/// before the store: a store is attached (else BadServiceUnsupported), the request has
/// entries within `max_nodes_per_history_update_data` (BadNothingToDo, BadTooManyOperations);
/// per entry: it decodes (BadHistoryOperationInvalid; structure updates are
/// BadHistoryOperationUnsupported), the node exists (BadNodeIdUnknown) and is a Variable
/// whose AccessLevel has HistoryWrite — for event updates an EventNotifier with
/// HistoryWrite — (BadNotWritable), the store keeps its history and offers the kind of
/// update (BadHistoryOperationUnsupported), the user's roles grant InsertHistory (Insert),
/// ModifyHistory (Replace), both (Update) or DeleteHistory (the deletes)
/// (BadUserAccessDenied), REMOVE, which is for annotations, is not asked of values
/// (BadHistoryOperationInvalid) nor of events (BadInvalidArgument), and an event update's
/// EventFilter compiles (BadEventFilterInvalid; an Insert's has no where clause,
/// BadInvalidArgument).
pub fn history_update(
    state: &mut ServiceState,
    key: SessionKey,
    roles: crate::roles::Roles,
    channel_id: u32,
    request_id: u32,
    req: &crate::generated::types::HistoryUpdateRequest,
    now: Now,
) -> Option<Response> {
    use crate::generated::types::{HistoryUpdateResponse, HistoryUpdateResult, PerformUpdateType};
    use crate::history::{HistoryUpdateOp, HistoryUpdateReply, UpdateDetails};
    let handle = req.request_header.request_handle;
    let shared = Arc::clone(state.shared());
    let Some(backend) = shared.history.clone() else {
        return Some(fault(handle, StatusCode::BadServiceUnsupported, now));
    };
    let limits = &shared.config.operation_limits;
    if req.history_update_details.is_empty() {
        return Some(fault(handle, StatusCode::BadNothingToDo, now));
    }
    if req.history_update_details.len() > limits.max_nodes_per_history_update_data as usize {
        return Some(fault(handle, StatusCode::BadTooManyOperations, now));
    }
    let caps = backend.capabilities();
    let space = &shared.address_space;
    let user = state
        .session(key)
        .and_then(|s| s.identity.as_ref())
        .and_then(|i| match i {
            crate::server::service_state::UserIdentity::Anonymous { .. } => None,
            crate::server::service_state::UserIdentity::UserName { user, .. }
            | crate::server::service_state::UserIdentity::Certificate { user, .. } => {
                Some(user.clone())
            }
        });
    let bad = |s: StatusCode| HistoryUpdateResult {
        status_code: s,
        ..HistoryUpdateResult::default()
    };
    let mut results = Vec::with_capacity(req.history_update_details.len());
    let mut ops = Vec::new();
    let mut starts = Vec::new();
    for (i, raw) in req.history_update_details.iter().enumerate() {
        let checked = (|| {
            let details = UpdateDetails::decode(raw, crate::DecodeLimits::default())?;
            let node_id = details.node_id();
            let ix = space
                .node_index(node_id)
                .ok_or(StatusCode::BadNodeIdUnknown)?;
            let node = space.node_at(ix).ok_or(StatusCode::BadNodeIdUnknown)?;
            let events = details.updates_events();
            if events {
                let notifier = node
                    .event_notifier()
                    .ok_or(StatusCode::BadHistoryOperationUnsupported)?;
                if notifier & event_notifier::HISTORY_WRITE == 0 {
                    return Err(StatusCode::BadNotWritable);
                }
            } else {
                let v = node
                    .as_variable()
                    .ok_or(StatusCode::BadHistoryOperationUnsupported)?;
                if v.access_level() & access_level::HISTORY_WRITE == 0 {
                    return Err(StatusCode::BadNotWritable);
                }
            }
            if !backend.has_history(node_id, events) {
                return Err(StatusCode::BadHistoryOperationUnsupported);
            }
            let insert = PermissionType::InsertHistory.0;
            let modify = PermissionType::ModifyHistory.0;
            let by_mode = |mode: PerformUpdateType| match mode {
                PerformUpdateType::Insert => Some(insert),
                PerformUpdateType::Replace => Some(modify),
                PerformUpdateType::Update => Some(insert | modify),
                _ => None,
            };
            let needed = match &details {
                UpdateDetails::Data(d) => by_mode(d.perform_insert_replace)
                    .ok_or(StatusCode::BadHistoryOperationInvalid)?,
                // Part 11 §6.9.4: Delete (Remove) is not an event update: Bad_InvalidArgument.
                UpdateDetails::Events(d) => {
                    by_mode(d.perform_insert_replace).ok_or(StatusCode::BadInvalidArgument)?
                }
                UpdateDetails::DeleteRaw(_)
                | UpdateDetails::DeleteAtTime(_)
                | UpdateDetails::DeleteEvents(_) => PermissionType::DeleteHistory.0,
            };
            if !details.offered_by(&caps) {
                return Err(StatusCode::BadHistoryOperationUnsupported);
            }
            if !space
                .permissions(ix, roles)
                .contains(PermissionType(needed))
            {
                return Err(StatusCode::BadUserAccessDenied);
            }
            // An event update's filter names the fields of its event data: compiled here,
            // its where clause chooses the events a Replace may replace; an Insert has none
            // (Part 11 §6.9.4.2).
            let filter = match &details {
                UpdateDetails::Events(d) => {
                    if d.perform_insert_replace == PerformUpdateType::Insert
                        && !d.filter.where_clause.elements.is_empty()
                    {
                        return Err(StatusCode::BadInvalidArgument);
                    }
                    let (f, _) = crate::events::filter::compile_with(
                        &d.filter,
                        space,
                        crate::events::filter::FilterLimits::from_config(&shared.config.events),
                    )
                    .map_err(|(s, _)| s)?;
                    Some(Arc::new(f))
                }
                _ => None,
            };
            Ok((details, filter))
        })();
        match checked {
            Ok((details, event_filter)) => {
                results.push(bad(StatusCode::Good));
                ops.push(i as u32);
                starts.push(HistoryUpdateOp {
                    details,
                    user: user.clone(),
                    event_filter,
                    roles,
                });
            }
            Err(s) => results.push(bad(s)),
        }
    }
    let mut response = Box::new(HistoryUpdateResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    });
    if ops.is_empty() {
        return Some(Response::HistoryUpdate(response));
    }
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() < ops.len() {
        for &o in &ops {
            if let Some(r) = response.results.get_mut(o as usize) {
                *r = bad(StatusCode::BadTooManyOperations);
            }
        }
        return Some(Response::HistoryUpdate(response));
    }
    let count = ops.len();
    let opened = deferrals.begin(
        space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::HistoryUpdate { response, ops },
        std::iter::repeat_n(backend.timeout_ms(), count),
        now,
    );
    for (op, start) in starts.into_iter().enumerate() {
        backend.update(
            start,
            HistoryUpdateReply::new(opened.reply(op as u32, None)),
        );
    }
    None
}
