//! The Subscription service set (Part 4 §5.13): thin wrappers that check the request,
//! call the shard's [`crate::subscription::SubscriptionEngine`] and build the response.

use crate::generated::messages::Response;
use crate::generated::types::{
    CreateSubscriptionRequest, CreateSubscriptionResponse, DeleteSubscriptionsRequest,
    DeleteSubscriptionsResponse, ModifySubscriptionRequest, ModifySubscriptionResponse,
    PublishRequest, RepublishRequest, RepublishResponse, SetPublishingModeRequest,
    SetPublishingModeResponse, TransferResult, TransferSubscriptionsRequest,
};
use crate::server::service_state::{ServiceState, UserIdentity};
use crate::services::{fault, response_header};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::StatusCode;

/// The user a subscription belongs to, as TransferSubscriptions compares it.
pub fn owner_of(state: &ServiceState, key: SessionKey) -> String {
    match state.session(key).and_then(|s| s.identity.as_ref()) {
        Some(UserIdentity::Anonymous { .. }) | None => "anonymous".into(),
        Some(UserIdentity::UserName { user, .. }) => format!("user:{user}"),
        Some(UserIdentity::Certificate { user, .. }) => format!("x509:{user}"),
    }
}

/// Most ids one DeleteSubscriptions / SetPublishingMode / TransferSubscriptions takes: the
/// subscriptions a session may own (more cannot all be valid).
fn check_ids(state: &ServiceState, n: usize) -> Result<(), StatusCode> {
    if n == 0 {
        return Err(StatusCode::BadNothingToDo);
    }
    if n > state.subscriptions().limits().max_subscriptions_per_shard as usize {
        return Err(StatusCode::BadTooManyOperations);
    }
    Ok(())
}

pub fn create_subscription(
    state: &mut ServiceState,
    key: SessionKey,
    req: &CreateSubscriptionRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let owner = owner_of(state, key);
    let (subs, _) = state.subscriptions_mut();
    match subs.create_subscription(key, &owner, req, now) {
        Ok(r) => Response::CreateSubscription(Box::new(CreateSubscriptionResponse {
            response_header: response_header(handle, now),
            subscription_id: r.subscription_id,
            revised_publishing_interval: r.publishing_interval_ms,
            revised_lifetime_count: r.lifetime_count,
            revised_max_keep_alive_count: r.max_keep_alive_count,
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn modify_subscription(
    state: &mut ServiceState,
    key: SessionKey,
    req: &ModifySubscriptionRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let (subs, _) = state.subscriptions_mut();
    match subs.modify_subscription(key, req, now) {
        Ok(r) => Response::ModifySubscription(Box::new(ModifySubscriptionResponse {
            response_header: response_header(handle, now),
            revised_publishing_interval: r.publishing_interval_ms,
            revised_lifetime_count: r.lifetime_count,
            revised_max_keep_alive_count: r.max_keep_alive_count,
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn set_publishing_mode(
    state: &mut ServiceState,
    key: SessionKey,
    req: &SetPublishingModeRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_ids(state, req.subscription_ids.len()) {
        return fault(handle, s, now);
    }
    let (subs, _) = state.subscriptions_mut();
    let results = req
        .subscription_ids
        .iter()
        .map(|&id| subs.set_publishing_mode(key, id, req.publishing_enabled))
        .collect();
    Response::SetPublishingMode(Box::new(SetPublishingModeResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

pub fn delete_subscriptions(
    state: &mut ServiceState,
    key: SessionKey,
    req: &DeleteSubscriptionsRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_ids(state, req.subscription_ids.len()) {
        return fault(handle, s, now);
    }
    let (subs, _) = state.subscriptions_mut();
    let results = req
        .subscription_ids
        .iter()
        .map(|&id| subs.delete_subscription(key, id, now))
        .collect();
    Response::DeleteSubscriptions(Box::new(DeleteSubscriptionsResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    }))
}

/// Publish: `None` when queued (answered later through the channel's deferred responses).
pub fn publish(
    state: &mut ServiceState,
    key: SessionKey,
    channel_id: u32,
    request_id: u32,
    req: &PublishRequest,
    now: Now,
) -> Option<Response> {
    // The session's MaxResponseMessageSize (0 = none) bounds the Publish response like any other.
    let max_response_size = state
        .session(key)
        .map_or(0, |s| s.max_response_message_size);
    let (subs, _) = state.subscriptions_mut();
    subs.publish(key, channel_id, request_id, max_response_size, req, now)
}

pub fn republish(
    state: &mut ServiceState,
    key: SessionKey,
    req: &RepublishRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let (subs, _) = state.subscriptions_mut();
    match subs.republish(key, req.subscription_id, req.retransmit_sequence_number) {
        Ok(m) => Response::Republish(Box::new(RepublishResponse {
            response_header: response_header(handle, now),
            notification_message: m,
        })),
        Err(s) => fault(handle, s, now),
    }
}

/// TransferSubscriptions (Part 4 §5.13.7). Subscriptions of this shard move at once; those
/// whose id names another shard of the process are asked from that shard
/// (`ServiceState::start_transfer`) and the response waits for its replies (`None`: it goes
/// out through the channel's deferred responses, like a Publish).
pub fn transfer_subscriptions(
    state: &mut ServiceState,
    key: SessionKey,
    channel_id: u32,
    request_id: u32,
    req: &TransferSubscriptionsRequest,
    now: Now,
) -> Option<Response> {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_ids(state, req.subscription_ids.len()) {
        return Some(fault(handle, s, now));
    }
    let owner = owner_of(state, key);
    let routes: Vec<bool> = req
        .subscription_ids
        .iter()
        .map(|&id| state.routes_to((id >> 24) as usize))
        .collect();
    let mut remote = Vec::new();
    let (subs, _) = state.subscriptions_mut();
    let results: Vec<Option<TransferResult>> = req
        .subscription_ids
        .iter()
        .zip(&routes)
        .enumerate()
        .map(|(i, (&id, &routed))| {
            if routed {
                remote.push((i, id, (id >> 24) as usize));
                return None;
            }
            Some(
                match subs.transfer_subscription(key, &owner, id, req.send_initial_values, now) {
                    Ok(available) => TransferResult {
                        status_code: StatusCode::Good,
                        available_sequence_numbers: available,
                    },
                    Err(s) => TransferResult {
                        status_code: s,
                        available_sequence_numbers: Vec::new(),
                    },
                },
            )
        })
        .collect();
    if remote.is_empty() {
        return Some(crate::server::service_state::transfer_response(
            handle,
            results.into_iter().flatten().collect(),
            now,
        ));
    }
    let pending = crate::server::service_state::PendingTransfer::new(
        key,
        channel_id,
        request_id,
        handle,
        req.send_initial_values,
        results,
    );
    state.start_transfer(pending, owner, remote, now)
}
