//! The Demo alarm: one AlarmConditionType instance, `ns=1;s=Demo.Events.Alarm`
//! (Part 9 §5.5, §5.7, §5.8), without branches.
//!
//! * State ([`ConditionState`]) lives in an `ArcSwap` shared by every shard. A change
//!   (activation by the Demo generator on shard 0, Acknowledge / Confirm from a Call on any
//!   shard) is a compare-and-swap (`rcu`) from the state it was checked against, so two
//!   shards acknowledging at once cannot both succeed: the second sees the new state and
//!   gets `BadConditionBranchAlreadyAcked`.
//! * Each change gets a new EventId and publishes one AlarmConditionType event to the bus;
//!   the Variables under the alarm node (Retain, AckedState, AckedState/Id, …) are then set
//!   from the newest state, so a Read shows it too (best effort: two changes racing on two
//!   shards may store their cells in either order, the next change repairs them).
//! * Acknowledge / Confirm take the EventId of the *latest* event of the condition (a
//!   stale one is `BadEventIdUnknown`, as is any EventId while no event was raised).
//! * Activity is a pure function of time: inactive for [`ALARM_HALF_PERIOD_MS`], then
//!   active for as long, and so on from the server start; the generator on shard 0 applies
//!   it. Going active sets AckedState and ConfirmedState to false; Retain is true while the
//!   alarm is active, unacknowledged or unconfirmed.

use std::sync::Arc;

use arc_swap::ArcSwap;

use super::nodes;
use super::{ids, Event, EventField, EventIdSource, ServerEvents};
use crate::address_space::AddressSpace;
use crate::types::{ByteString, DateTime, LocalizedText, NodeId, StatusCode, UaString, Variant};

/// Half the alarm's cycle: it is inactive this long, then active this long.
pub const ALARM_HALF_PERIOD_MS: u64 = 10_000;
/// Severity while active / inactive.
pub const SEVERITY_ACTIVE: u16 = 700;
pub const SEVERITY_INACTIVE: u16 = 100;
/// Longest Comment text accepted by Acknowledge / Confirm, characters (longer:
/// BadInvalidArgument for the Comment argument).
pub const MAX_COMMENT_CHARS: usize = 4096;

/// The state of the condition (one branch, the current one).
#[derive(Clone, Debug, PartialEq)]
pub struct ConditionState {
    pub enabled: bool,
    pub active: bool,
    pub acked: bool,
    pub confirmed: bool,
    pub severity: u16,
    pub last_severity: u16,
    pub message: LocalizedText,
    pub comment: LocalizedText,
    /// When the comment was last set.
    pub comment_time: DateTime,
    pub client_user_id: UaString,
    /// EventId of the latest event (what Acknowledge / Confirm must name).
    pub event_id: ByteString,
    /// Time of the latest change.
    pub time: DateTime,
    /// Number of changes so far.
    pub changes: u64,
}

impl ConditionState {
    /// Retain (Part 9 §5.5.2): the condition is interesting to a client.
    pub fn retain(&self) -> bool {
        self.enabled && (self.active || !self.acked || !self.confirmed)
    }
}

fn two_state(b: bool, t: &str, f: &str) -> Variant {
    Variant::LocalizedText(Box::new(LocalizedText::new("en", if b { t } else { f })))
}

/// The condition event for a state: what is published on every change and in a
/// ConditionRefresh.
pub fn alarm_event(s: &ConditionState, chain: &Arc<[NodeId]>) -> Event {
    let lt = |t: &LocalizedText| Variant::LocalizedText(Box::new(t.clone()));
    let f = EventField::ns0;
    Event {
        event_id: s.event_id.clone(),
        event_type: NodeId::ns0(ids::ALARM_CONDITION_TYPE),
        type_chain: Arc::clone(chain),
        source_node: nodes::demo_events_id(),
        source_name: UaString::from(nodes::DEMO_EVENTS_NAME),
        time: s.time,
        receive_time: s.time,
        message: s.message.clone(),
        severity: s.severity,
        condition_id: Some(nodes::alarm_id()),
        fields: vec![
            f("ConditionClassId", Variant::NodeId(Box::new(NodeId::ns0(ids::PROCESS_CONDITION_CLASS_TYPE)))),
            f("ConditionClassName", Variant::LocalizedText(Box::new(LocalizedText::new("en", "Process")))),
            f("ConditionName", Variant::String(UaString::from(nodes::ALARM_NAME))),
            f("BranchId", Variant::NodeId(Box::new(NodeId::NULL))),
            f("Retain", Variant::Boolean(s.retain())),
            f("EnabledState", two_state(s.enabled, "Enabled", "Disabled")),
            f("EnabledState/Id", Variant::Boolean(s.enabled)),
            f("Quality", Variant::StatusCode(StatusCode::Good)),
            f("Quality/SourceTimestamp", Variant::DateTime(s.time)),
            f("LastSeverity", Variant::UInt16(s.last_severity)),
            f("LastSeverity/SourceTimestamp", Variant::DateTime(s.time)),
            f("Comment", lt(&s.comment)),
            f("Comment/SourceTimestamp", Variant::DateTime(s.comment_time)),
            f("ClientUserId", Variant::String(s.client_user_id.clone())),
            f("AckedState", two_state(s.acked, "Acknowledged", "Unacknowledged")),
            f("AckedState/Id", Variant::Boolean(s.acked)),
            f("ConfirmedState", two_state(s.confirmed, "Confirmed", "Unconfirmed")),
            f("ConfirmedState/Id", Variant::Boolean(s.confirmed)),
            f("ActiveState", two_state(s.active, "Active", "Inactive")),
            f("ActiveState/Id", Variant::Boolean(s.active)),
            f("InputNode", Variant::NodeId(Box::new(NodeId::NULL))),
            f("SuppressedOrShelved", Variant::Boolean(false)),
        ],
        notifiers: super::demo_notifiers(),
    }
}

/// What a client asked the condition to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionAction {
    Acknowledge,
    Confirm,
    /// ConditionType.AddComment (i=9029).
    AddComment,
    /// ConditionType.Enable (i=9027); EventId and Comment are ignored.
    Enable,
    /// ConditionType.Disable (i=9028); EventId and Comment are ignored.
    Disable,
}

/// The Demo alarm's shared state.
#[derive(Debug)]
pub struct DemoAlarm {
    state: ArcSwap<ConditionState>,
}

impl DemoAlarm {
    /// Inactive, acknowledged and confirmed (not retained); no event raised yet.
    pub fn new(ids: &EventIdSource, start: DateTime) -> DemoAlarm {
        DemoAlarm {
            state: ArcSwap::from_pointee(ConditionState {
                enabled: true,
                active: false,
                acked: true,
                confirmed: true,
                severity: SEVERITY_INACTIVE,
                last_severity: SEVERITY_INACTIVE,
                message: LocalizedText::new("en", "Demo alarm inactive"),
                comment: LocalizedText::default(),
                comment_time: start,
                client_user_id: UaString::null(),
                event_id: ids.next(),
                time: start,
                changes: 0,
            }),
        }
    }

    /// The current state.
    pub fn state(&self) -> Arc<ConditionState> {
        self.state.load_full()
    }

    /// Should the alarm be active `elapsed_ns` after the server start?
    pub fn active_at(elapsed_ns: u64) -> bool {
        (elapsed_ns / (ALARM_HALF_PERIOD_MS * 1_000_000)) % 2 == 1
    }

    /// Applies `f` to the state atomically; `f` may run more than once. Returns the new
    /// state, or `f`'s error (nothing changed).
    fn change(
        &self,
        mut f: impl FnMut(&ConditionState) -> Result<Option<ConditionState>, StatusCode>,
    ) -> Result<Option<Arc<ConditionState>>, StatusCode> {
        let mut outcome: Result<Option<Arc<ConditionState>>, StatusCode> = Ok(None);
        self.state.rcu(|cur| match f(cur) {
            Ok(Some(next)) => {
                let next = Arc::new(next);
                outcome = Ok(Some(Arc::clone(&next)));
                next
            }
            Ok(None) => {
                outcome = Ok(None);
                Arc::clone(cur)
            }
            Err(e) => {
                outcome = Err(e);
                Arc::clone(cur)
            }
        });
        outcome
    }
}

impl ServerEvents {
    /// Sets the Demo alarm active or inactive. Returns the condition event when the state
    /// changed (the caller publishes it; [`DemoEventGenerator`](super::DemoEventGenerator)
    /// passes it on like its other events). Also stores the alarm's Variables.
    pub fn set_alarm_active(&self, space: &AddressSpace, active: bool, now: DateTime) -> Option<Event> {
        let alarm = self.alarm.as_ref()?;
        let next = alarm
            .change(|s| {
                if s.active == active || !s.enabled {
                    return Ok(None);
                }
                let mut n = s.clone();
                n.active = active;
                n.last_severity = s.severity;
                if active {
                    n.acked = false;
                    n.confirmed = false;
                    n.severity = SEVERITY_ACTIVE;
                    n.message = LocalizedText::new("en", "Demo alarm active");
                } else {
                    n.severity = SEVERITY_INACTIVE;
                    n.message = LocalizedText::new("en", "Demo alarm inactive");
                }
                n.comment = LocalizedText::default();
                n.comment_time = now;
                n.client_user_id = UaString::null();
                n.event_id = self.ids.next();
                n.time = now;
                n.changes += 1;
                Ok(Some(n))
            })
            .ok()??;
        let ev = alarm_event(&next, &self.chains.alarm);
        self.store_alarm_cells(space);
        Some(ev)
    }

    /// Acknowledge, Confirm, AddComment, Enable or Disable the Demo alarm (Part 9 §5.5.4 to
    /// §5.5.6, §5.7.3, §5.7.4). Acknowledge, Confirm and AddComment name the EventId of the
    /// alarm's latest event. On success the condition event is published on the bus and the
    /// alarm's Variables are updated.
    ///
    /// * no alarm: `BadNodeIdUnknown`;
    /// * Enable when enabled / Disable when disabled: `BadConditionAlreadyEnabled` /
    ///   `BadConditionAlreadyDisabled`; anything else while disabled: `BadConditionDisabled`;
    /// * `event_id` not the latest event's: `BadEventIdUnknown`;
    /// * already acknowledged / confirmed: `BadConditionBranchAlreadyAcked` /
    ///   `BadConditionBranchAlreadyConfirmed`.
    pub fn alarm_action(
        &self,
        space: &AddressSpace,
        action: ConditionAction,
        event_id: &ByteString,
        comment: &LocalizedText,
        client_user_id: &str,
        now: DateTime,
    ) -> Result<(), StatusCode> {
        let alarm = self.alarm.as_ref().ok_or(StatusCode::BadNodeIdUnknown)?;
        let next = alarm.change(|s| {
            let mut n = s.clone();
            match action {
                ConditionAction::Enable | ConditionAction::Disable => {
                    let enable = action == ConditionAction::Enable;
                    if s.enabled == enable {
                        return Err(if enable {
                            StatusCode::BadConditionAlreadyEnabled
                        } else {
                            StatusCode::BadConditionAlreadyDisabled
                        });
                    }
                    n.enabled = enable;
                    n.message = LocalizedText::new("en", if enable { "Demo alarm enabled" } else { "Demo alarm disabled" });
                }
                _ => {
                    if !s.enabled {
                        return Err(StatusCode::BadConditionDisabled);
                    }
                    if s.changes == 0 || s.event_id != *event_id {
                        return Err(StatusCode::BadEventIdUnknown);
                    }
                    match action {
                        ConditionAction::Acknowledge => {
                            if s.acked {
                                return Err(StatusCode::BadConditionBranchAlreadyAcked);
                            }
                            n.acked = true;
                            n.message = LocalizedText::new("en", "Demo alarm acknowledged");
                        }
                        ConditionAction::Confirm => {
                            if s.confirmed {
                                return Err(StatusCode::BadConditionBranchAlreadyConfirmed);
                            }
                            n.confirmed = true;
                            n.message = LocalizedText::new("en", "Demo alarm confirmed");
                        }
                        _ => n.message = LocalizedText::new("en", "Demo alarm comment"),
                    }
                    n.comment = comment.clone();
                    n.comment_time = now;
                }
            }
            n.client_user_id = UaString::from(client_user_id);
            n.last_severity = s.severity;
            n.event_id = self.ids.next();
            n.time = now;
            n.changes += 1;
            Ok(Some(n))
        })?;
        if let Some(next) = next {
            self.bus.publish(alarm_event(&next, &self.chains.alarm));
            self.store_alarm_cells(space);
        }
        Ok(())
    }

    /// Writes the newest alarm state into the Variables under the alarm node.
    pub(crate) fn store_alarm_cells(&self, space: &AddressSpace) {
        let Some(alarm) = &self.alarm else { return };
        let ev = alarm_event(&alarm.state(), &self.chains.alarm);
        for (path, value) in nodes::alarm_values(&ev) {
            if let Some(i) = space.node_index(&nodes::alarm_child_id(&path)) {
                // A node without a stored value (none is built so) is left alone.
                let _ = space.store_value(
                    i,
                    crate::types::DataValue {
                        value,
                        source_timestamp: Some(ev.time),
                        server_timestamp: Some(ev.time),
                        ..Default::default()
                    },
                );
            }
        }
    }

    /// The events of a ConditionRefresh (Part 9 §5.5.7), in order: a RefreshStartEvent,
    /// the current event of every retained condition (same EventId as its latest event, so
    /// it can be acknowledged), a RefreshEndEvent. The caller queues them into the event
    /// monitored items of the one subscription (ConditionRefresh2: the one item); the
    /// bracket events bypass the where clause (Part 9 §4.5: select them with
    /// [`CompiledEventFilter::select`](super::CompiledEventFilter::select)), the condition
    /// events go through the item's filter as usual. Nothing is published on the bus.
    pub fn condition_refresh(&self, now: DateTime) -> Vec<Event> {
        let server = NodeId::ns0(ids::SERVER);
        let bracket = |chain: &Arc<[NodeId]>, t: u32, msg: &str| Event {
            event_id: self.ids.next(),
            event_type: NodeId::ns0(t),
            type_chain: Arc::clone(chain),
            source_node: server.clone(),
            source_name: UaString::from("Server"),
            time: now,
            receive_time: now,
            message: LocalizedText::new("en", msg),
            severity: 100,
            condition_id: None,
            fields: Vec::new(),
            notifiers: Arc::clone(&self.notifiers_server),
        };
        let mut out = vec![bracket(&self.chains.refresh_start, ids::REFRESH_START_EVENT_TYPE, "ConditionRefresh start")];
        if let Some(alarm) = &self.alarm {
            let s = alarm.state();
            if s.retain() && s.changes > 0 {
                out.push(alarm_event(&s, &self.chains.alarm));
            }
        }
        out.push(bracket(&self.chains.refresh_end, ids::REFRESH_END_EVENT_TYPE, "ConditionRefresh end"));
        out
    }
}

/// Is this a RefreshStartEvent or RefreshEndEvent (they bypass the where clause)?
pub fn is_refresh_bracket(ev: &Event) -> bool {
    matches!(ev.event_type.as_ns0(), Some(ids::REFRESH_START_EVENT_TYPE | ids::REFRESH_END_EVENT_TYPE))
}
