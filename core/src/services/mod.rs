//! The services, one module per service set, and [`dispatch`], which routes one decoded
//! request to them.
//!
//! Session rules applied here (Part 4 §5.7):
//! * GetEndpoints, FindServers and CreateSession need no session; ActivateSession finds its
//!   session by token on any channel (it may move the session to this channel).
//! * Every other request must carry the authenticationToken of a live session bound to the
//!   request's secure channel (else BadSessionIdInvalid); a session not yet activated only
//!   accepts CloseSession; any other request is answered BadSessionNotActivated and closes
//!   the session (Part 4 §5.7.3.1). Every accepted request moves the
//!   session's timeout deadline.
//! * A service not implemented yet is a ServiceFault with BadServiceUnsupported.
//! * Every response carries the request's requestHandle and the server's timestamp.

pub mod attribute;
pub mod build;
pub mod discovery;
pub mod history;
pub mod host;
pub mod identity;
pub mod method;
pub mod monitored_item;
pub mod node_management;
pub mod session;
pub mod subscription;
pub mod subscription_methods;
pub mod view;

use crate::generated::messages::{Request, Response};
use crate::server::context::RequestContext;
use crate::server::service_state::{RequestSession, ServiceState};
use crate::time::Now;
use crate::types::StatusCode;

pub use crate::response::{fault, response_header};

/// Answers one request. See the module docs for the session rules. A Publish cannot be
/// answered synchronously: it gets BadInternalError here; the connection uses
/// [`dispatch_deferrable`].
pub fn dispatch(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    request: Request,
    now: Now,
) -> Response {
    let handle = request.request_header().request_handle;
    match dispatch_deferrable(state, ctx, request, 0, now) {
        Some(r) => r,
        None => fault(handle, StatusCode::BadInternalError, now),
    }
}

/// Answers one request, or queues it (`None`: a Publish, answered later with `request_id`
/// through the shard's deferred responses for `ctx.channel_id`).
pub fn dispatch_deferrable(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    request: Request,
    request_id: u32,
    now: Now,
) -> Option<Response> {
    let service = crate::metrics::service_index(&request);
    state.diag.note_request(now);
    let response = answer(state, ctx, request, request_id, now);
    let result = match &response {
        Some(r) => r.response_header().service_result,
        None => StatusCode::Good,
    };
    crate::metrics::count_request(state.metrics(), service, result);
    response
}

fn answer(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    request: Request,
    request_id: u32,
    now: Now,
) -> Option<Response> {
    let header = request.request_header();
    let handle = header.request_handle;
    if let Some(age_ms) = state.shared().config.sessions.max_request_age_ms {
        if !header.timestamp.is_null() && header.timestamp.add_ms(age_ms as f64) < now.utc {
            return Some(fault(handle, StatusCode::BadTimeout, now));
        }
    }
    let mut response = match request {
        Request::GetEndpoints(r) => discovery::get_endpoints(state, ctx, &r, now),
        Request::FindServers(r) => discovery::find_servers(state, ctx, &r, now),
        Request::CreateSession(r) => session::create_session(state, ctx, r, now)?,
        Request::ActivateSession(r) => session::activate_session(state, ctx, r, now)?,
        // No discovery server; the secure channel layer answers OPN/CLO itself.
        Request::FindServersOnNetwork(_)
        | Request::RegisterServer(_)
        | Request::RegisterServer2(_)
        | Request::OpenSecureChannel(_)
        | Request::CloseSecureChannel(_) => fault(handle, StatusCode::BadServiceUnsupported, now),
        other => session_service(state, ctx, other, request_id, now)?,
    };
    let h = response.response_header_mut();
    h.request_handle = handle;
    h.timestamp = now.utc;
    Some(response)
}

/// Requests that run in an activated session (and CloseSession).
fn session_service(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    request: Request,
    request_id: u32,
    now: Now,
) -> Option<Response> {
    let header = request.request_header();
    let handle = header.request_handle;
    let session = match state.session_for_request(&header.authentication_token, ctx.channel_id, now)
    {
        Ok(s) => s,
        Err(s) => return Some(fault(handle, s, now)),
    };
    let key = session.key;
    if let Request::CloseSession(r) = &request {
        return Some(session::close_session(state, key, r, now));
    }
    if !session.activated {
        // Part 4 §5.7.3.1: any request other than CloseSession before ActivateSession
        // makes the server close the session.
        state.close_session(key, true, now);
        return Some(fault(handle, StatusCode::BadSessionNotActivated, now));
    }
    let service = crate::metrics::service_index(&request);
    let response = activated_service(state, ctx, session, request, request_id, now);
    // The session's own counts (SessionDiagnostics); a queued Publish counts as Good. Counted
    // after the service, by key (a slot index and a generation compare): counted before, a
    // Read of the session's own SessionDiagnostics would see this request.
    let result = response
        .as_ref()
        .map_or(StatusCode::Good, |r| r.response_header().service_result);
    if let Some(s) = state.session_mut(key) {
        s.diagnostics.count(service, result);
    }
    response
}

/// Requests of an activated session (found and checked by [`session_service`]).
fn activated_service(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    session: RequestSession,
    request: Request,
    request_id: u32,
    now: Now,
) -> Option<Response> {
    let handle = request.request_header().request_handle;
    let (key, roles) = (session.key, session.roles);
    let request = match request {
        Request::Publish(r) => {
            let resp = subscription::publish(state, key, ctx.channel_id, request_id, &r, now);
            state.recycler.give_publish_request(r);
            return resp;
        }
        other => other,
    };
    Some(match request {
        Request::Cancel(r) => session::cancel(state, key, &r, now),
        Request::Read(r)
            if state.shared().address_space.has_async()
                && attribute::reads_async(&state.shared().address_space, &r, now) =>
        {
            let resp = attribute::read_deferred(state, roles, ctx.channel_id, request_id, &r, now);
            state.recycler.give_read_request(r);
            return resp;
        }
        Request::Write(r)
            if state.shared().address_space.has_async()
                && attribute::writes_async(&state.shared().address_space, &r) =>
        {
            let resp =
                attribute::write_deferred(state, key, roles, ctx.channel_id, request_id, &r, now);
            state.recycler.give_write_request(r);
            return resp;
        }
        Request::Read(r) => {
            let spare = state.recycler.read_response();
            let resp = attribute::read_into(state.shared(), roles, &r, now, spare);
            state.recycler.give_read_request(r);
            resp
        }
        Request::Write(r) => {
            let spare = state.recycler.write_response();
            let user = state
                .session(key)
                .and_then(|s| s.identity.as_ref())
                .map_or("", |i| i.user());
            let resp = attribute::write_into(state.shared(), roles, user, &r, now, spare);
            state.recycler.give_write_request(r);
            resp
        }
        Request::Browse(r) => {
            let resp = view::browse(state, key, roles, &r, now);
            state.recycler.give_browse_request(r);
            resp
        }
        Request::BrowseNext(r) => view::browse_next(state, key, &r, now),
        Request::TranslateBrowsePathsToNodeIds(r) => {
            view::translate_browse_paths(state, roles, &r, now)
        }
        Request::RegisterNodes(r) => view::register_nodes(state, &r, now),
        Request::AddNodes(r) => {
            return node_management::answer(
                state,
                roles,
                ctx.channel_id,
                request_id,
                node_management::EditRequest::AddNodes(r),
                now,
            )
        }
        Request::AddReferences(r) => {
            return node_management::answer(
                state,
                roles,
                ctx.channel_id,
                request_id,
                node_management::EditRequest::AddReferences(r),
                now,
            )
        }
        Request::DeleteNodes(r) => {
            return node_management::answer(
                state,
                roles,
                ctx.channel_id,
                request_id,
                node_management::EditRequest::DeleteNodes(r),
                now,
            )
        }
        Request::DeleteReferences(r) => {
            return node_management::answer(
                state,
                roles,
                ctx.channel_id,
                request_id,
                node_management::EditRequest::DeleteReferences(r),
                now,
            )
        }
        Request::UnregisterNodes(r) => view::unregister_nodes(state, &r, now),
        Request::Call(r) => {
            return method::call_deferrable(state, key, roles, ctx.channel_id, request_id, &r, now)
        }
        Request::CreateSubscription(r) => subscription::create_subscription(state, key, &r, now),
        Request::ModifySubscription(r) => subscription::modify_subscription(state, key, &r, now),
        Request::SetPublishingMode(r) => subscription::set_publishing_mode(state, key, &r, now),
        Request::DeleteSubscriptions(r) => subscription::delete_subscriptions(state, key, &r, now),
        Request::Republish(r) => subscription::republish(state, key, &r, now),
        Request::TransferSubscriptions(r) => {
            return subscription::transfer_subscriptions(
                state,
                key,
                ctx.channel_id,
                request_id,
                &r,
                now,
            )
        }
        Request::CreateMonitoredItems(r) => {
            monitored_item::create_monitored_items(state, key, roles, &r, now)
        }
        Request::ModifyMonitoredItems(r) => {
            monitored_item::modify_monitored_items(state, key, &r, now)
        }
        Request::DeleteMonitoredItems(r) => {
            monitored_item::delete_monitored_items(state, key, &r, now)
        }
        Request::SetMonitoringMode(r) => monitored_item::set_monitoring_mode(state, key, &r, now),
        Request::SetTriggering(r) => monitored_item::set_triggering(state, key, &r, now),
        Request::HistoryRead(r) => {
            return history::history_read(state, key, roles, ctx.channel_id, request_id, &r, now);
        }
        Request::HistoryUpdate(r) => {
            return history::history_update(state, key, roles, ctx.channel_id, request_id, &r, now);
        }
        // Query, node management: not offered.
        _ => fault(handle, StatusCode::BadServiceUnsupported, now),
    })
}
