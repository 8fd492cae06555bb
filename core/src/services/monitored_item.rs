//! The MonitoredItem service set (Part 4 §5.12): request checks (operation counts) and the
//! calls into the shard's [`crate::subscription::SubscriptionEngine`].

use crate::generated::messages::Response;
use crate::generated::types::{
    CreateMonitoredItemsRequest, CreateMonitoredItemsResponse, DeleteMonitoredItemsRequest,
    DeleteMonitoredItemsResponse, ModifyMonitoredItemsRequest, ModifyMonitoredItemsResponse,
    SetMonitoringModeRequest, SetMonitoringModeResponse, SetTriggeringRequest,
    SetTriggeringResponse,
};
use crate::roles::Roles;
use crate::server::service_state::ServiceState;
use crate::services::{fault, response_header};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::StatusCode;

/// BadNothingToDo for no operations, BadTooManyOperations past MaxMonitoredItemsPerCall.
fn check_count(state: &ServiceState, n: usize) -> Result<(), StatusCode> {
    if n == 0 {
        return Err(StatusCode::BadNothingToDo);
    }
    if n > state
        .shared()
        .config
        .operation_limits
        .max_monitored_items_per_call as usize
    {
        return Err(StatusCode::BadTooManyOperations);
    }
    Ok(())
}

pub fn create_monitored_items(
    state: &mut ServiceState,
    key: SessionKey,
    roles: Roles,
    req: &CreateMonitoredItemsRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.items_to_create.len()) {
        return fault(handle, s, now);
    }
    let (subs, shared) = state.subscriptions_mut();
    match subs.create_monitored_items(
        shared,
        key,
        roles,
        req.subscription_id,
        req.timestamps_to_return,
        &req.items_to_create,
        now,
    ) {
        Ok(results) => Response::CreateMonitoredItems(Box::new(CreateMonitoredItemsResponse {
            response_header: response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn modify_monitored_items(
    state: &mut ServiceState,
    key: SessionKey,
    req: &ModifyMonitoredItemsRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.items_to_modify.len()) {
        return fault(handle, s, now);
    }
    let (subs, shared) = state.subscriptions_mut();
    let limits = crate::events::filter::FilterLimits::from_config(&shared.config.events);
    match subs.modify_monitored_items(
        &shared.address_space,
        limits,
        key,
        req.subscription_id,
        req.timestamps_to_return,
        &req.items_to_modify,
        now,
    ) {
        Ok(results) => Response::ModifyMonitoredItems(Box::new(ModifyMonitoredItemsResponse {
            response_header: response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn delete_monitored_items(
    state: &mut ServiceState,
    key: SessionKey,
    req: &DeleteMonitoredItemsRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.monitored_item_ids.len()) {
        return fault(handle, s, now);
    }
    let (subs, _) = state.subscriptions_mut();
    match subs.delete_monitored_items(key, req.subscription_id, &req.monitored_item_ids) {
        Ok(results) => Response::DeleteMonitoredItems(Box::new(DeleteMonitoredItemsResponse {
            response_header: response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn set_monitoring_mode(
    state: &mut ServiceState,
    key: SessionKey,
    req: &SetMonitoringModeRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    if let Err(s) = check_count(state, req.monitored_item_ids.len()) {
        return fault(handle, s, now);
    }
    let (subs, shared) = state.subscriptions_mut();
    match subs.set_monitoring_mode(
        &shared.address_space,
        key,
        req.subscription_id,
        req.monitoring_mode,
        &req.monitored_item_ids,
        now,
    ) {
        Ok(results) => Response::SetMonitoringMode(Box::new(SetMonitoringModeResponse {
            response_header: response_header(handle, now),
            results,
            diagnostic_infos: Vec::new(),
        })),
        Err(s) => fault(handle, s, now),
    }
}

pub fn set_triggering(
    state: &mut ServiceState,
    key: SessionKey,
    req: &SetTriggeringRequest,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let n = req.links_to_add.len() + req.links_to_remove.len();
    if let Err(s) = check_count(state, n) {
        return fault(handle, s, now);
    }
    let (subs, _) = state.subscriptions_mut();
    match subs.set_triggering(
        key,
        req.subscription_id,
        req.triggering_item_id,
        &req.links_to_add,
        &req.links_to_remove,
    ) {
        Ok((add_results, remove_results)) => {
            Response::SetTriggering(Box::new(SetTriggeringResponse {
                response_header: response_header(handle, now),
                add_results,
                add_diagnostic_infos: Vec::new(),
                remove_results,
                remove_diagnostic_infos: Vec::new(),
            }))
        }
        Err(s) => fault(handle, s, now),
    }
}
