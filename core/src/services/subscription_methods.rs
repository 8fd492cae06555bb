//! The methods of the Call service that need the subscription state: Server.GetMonitoredItems
//! (i=11492), Server.ResendData (i=12873), ConditionType.ConditionRefresh (i=3875) and
//! ConditionRefresh2 (i=12912). `services::method::call` validates the call (object, method,
//! user, argument count and types) and then calls these with the decoded arguments.
//!
//! For `condition_refresh`, the events queued come from
//! `shard.shared().events.condition_refresh(now.utc)` (RefreshStart, retained conditions,
//! RefreshEnd; the two bracket events bypass the where clause, see
//! `crate::events::condition::is_refresh_bracket` and `CompiledEventFilter::select`).

use crate::server::service_state::ServiceState;
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::StatusCode;

/// Server.GetMonitoredItems: the (server handles, client handles) of the subscription's
/// monitored items. `BadSubscriptionIdInvalid` when the subscription is not the session's.
pub fn get_monitored_items(
    state: &mut ServiceState,
    key: SessionKey,
    subscription_id: u32,
) -> Result<(Vec<u32>, Vec<u32>), StatusCode> {
    state
        .subscriptions()
        .monitored_items_of(key, subscription_id)
}

/// Server.ResendData: queue the current value of every data monitored item of the
/// subscription for the next publish.
pub fn resend_data(
    state: &mut ServiceState,
    key: SessionKey,
    subscription_id: u32,
    now: Now,
) -> Result<(), StatusCode> {
    let _ = now;
    state
        .subscriptions_mut()
        .0
        .resend_data(key, subscription_id)
}

/// ConditionRefresh (`monitored_item_id` None) / ConditionRefresh2 (Some): queue
/// `shard.shared().events.condition_refresh(now.utc)` into the subscription's event
/// monitored items (or the one item).
pub fn condition_refresh(
    state: &mut ServiceState,
    key: SessionKey,
    subscription_id: u32,
    monitored_item_id: Option<u32>,
    now: Now,
) -> Result<(), StatusCode> {
    let (subs, shared) = state.subscriptions_mut();
    subs.condition_refresh(shared, key, subscription_id, monitored_item_id, now)
}
