//! Conditions: AlarmConditionType instances without branches (Part 9 §5.5, §5.7, §5.8) —
//! the application's alarms (driven from any thread through the library, acknowledged and
//! confirmed by clients, with a hook telling the application).
//!
//! * State ([`ConditionState`]) lives in an `ArcSwap` shared by every shard. A change
//!   (activation by the application on any thread, Acknowledge / Confirm from a Call on any
//!   shard) is a compare-and-swap (`rcu`) from the state it was checked against, so two
//!   shards acknowledging at once cannot both succeed: the second sees the new state and
//!   gets `BadConditionBranchAlreadyAcked`.
//! * Each change gets a new EventId and publishes one AlarmConditionType event to the bus;
//!   the Variables under the alarm node (Retain, AckedState, AckedState/Id, …) are then set
//!   from the newest state, so a Read shows it too (best effort: two changes racing on two
//!   shards may store their cells in either order, the next change repairs them).
//! * Acknowledge / Confirm take the EventId of the *latest* event of the condition (a
//!   stale one is `BadEventIdUnknown`, as is any EventId while no event was raised).
//! * Going active sets AckedState and ConfirmedState to false; Retain is true while the
//!   alarm is active, unacknowledged or unconfirmed.
//! * Besides the type's methods (Acknowledge i=9111, …, called with the condition as the
//!   object), every condition has its own method nodes `<condition>.Acknowledge`, … (the
//!   mandatory components of its type, Part 9), which serve the same ([`method_of`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::nodes;
use super::{ids, Event, EventField, EventIdSource, ServerEvents};
pub use crate::address_space::app::{ConditionAction, Shelving};
use crate::address_space::app::{ConditionActionInfo, ConditionHook};
use crate::address_space::AddressSpace;
use crate::time::Now;
use crate::types::{
    ByteString, DateTime, LocalizedText, NodeId, QualifiedName, StatusCode, UaString, Variant,
};

/// The Severity of a condition before its first activation.
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
    /// Its ShelvingState (always `Unshelved` for a condition without one).
    pub shelved: Shelved,
}

/// Where an alarm's ShelvingState stands (Part 9 §5.8.17).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shelved {
    Unshelved,
    /// TimedShelved until a time: monotonic ns (when it unshelves) and UTC (for UnshelveTime).
    Timed {
        until_ns: u64,
        until: DateTime,
    },
    /// OneShotShelved: until the alarm returns to inactive after having been active
    /// (`seen_active`: shelved while active, or active since), or until MaxTimeShelved runs
    /// out (`until`, as for `Timed`).
    OneShot {
        seen_active: bool,
        until: Option<(u64, DateTime)>,
    },
}

impl Shelved {
    pub fn is_shelved(&self) -> bool {
        !matches!(self, Shelved::Unshelved)
    }

    /// The state's BrowseName (CurrentState's text) and NodeId in ShelvedStateMachineType.
    fn state(&self) -> (&'static str, u32) {
        match self {
            Shelved::Unshelved => ("Unshelved", ids::SHELVED_UNSHELVED),
            Shelved::Timed { .. } => ("TimedShelved", ids::SHELVED_TIMED),
            Shelved::OneShot { .. } => ("OneShotShelved", ids::SHELVED_ONE_SHOT),
        }
    }

    /// When it unshelves by itself (monotonic ns), if it does at a time.
    pub fn deadline_ns(&self) -> Option<u64> {
        match self {
            Shelved::Timed { until_ns, .. } => Some(*until_ns),
            Shelved::OneShot {
                until: Some((ns, _)),
                ..
            } => Some(*ns),
            _ => None,
        }
    }

    /// UnshelveTime at `at` (§5.8.17.1): the milliseconds left until it unshelves by itself;
    /// 0 when unshelved; the largest Duration for a OneShotShelve without MaxTimeShelved.
    pub fn unshelve_time_ms(&self, at: DateTime) -> f64 {
        let left = |until: DateTime| (until.0.saturating_sub(at.0) as f64 / 10_000.0).max(0.0);
        match self {
            Shelved::Unshelved => 0.0,
            Shelved::Timed { until, .. } => left(*until),
            Shelved::OneShot {
                until: Some((_, until)),
                ..
            } => left(*until),
            Shelved::OneShot { until: None, .. } => f64::MAX,
        }
    }
}

/// `ms` milliseconds after `now`: monotonic ns and UTC, both saturating.
fn after_ms(now: Now, ms: f64) -> (u64, DateTime) {
    let ticks = (ms * 10_000.0) as i64; // `as` saturates
    (
        now.deadline_after_ms(ms),
        DateTime(now.utc.0.saturating_add(ticks)),
    )
}

impl ConditionState {
    /// Retain (Part 9 §5.5.2): the condition is interesting to a client.
    pub fn retain(&self) -> bool {
        self.enabled && (self.active || !self.acked || !self.confirmed)
    }

    /// Inactive, acknowledged and confirmed (not retained); no event raised yet.
    pub fn initial(ids: &EventIdSource, label: &str, start: DateTime) -> ConditionState {
        ConditionState {
            enabled: true,
            active: false,
            acked: true,
            confirmed: true,
            severity: SEVERITY_INACTIVE,
            last_severity: SEVERITY_INACTIVE,
            message: LocalizedText::new("en", &format!("{label} inactive")),
            comment: LocalizedText::default(),
            comment_time: start,
            client_user_id: UaString::null(),
            event_id: ids.next(),
            time: start,
            changes: 0,
            shelved: Shelved::Unshelved,
        }
    }
}

fn two_state(b: bool, t: &str, f: &str) -> Variant {
    Variant::LocalizedText(Box::new(LocalizedText::new("en", if b { t } else { f })))
}

/// What a condition is: its node, names, source and notifiers (fixed at start).
#[derive(Clone)]
pub struct ConditionSpec {
    pub node_id: NodeId,
    /// ConditionName.
    pub name: String,
    /// The first words of its Messages ("Boiler alarm" → "Boiler alarm acknowledged").
    pub label: String,
    pub source: NodeId,
    pub source_name: UaString,
    pub notifiers: Arc<[NodeId]>,
    /// AlarmConditionType or a subtype, and its supertype chain (most derived first).
    pub event_type: NodeId,
    pub type_chain: Arc<[NodeId]>,
    /// The subtype's fixed Properties, appended to every event's fields.
    pub properties: Arc<[EventField]>,
    /// Its ShelvingState and MaxTimeShelved, when it has them.
    pub shelving: Option<Shelving>,
    pub on_action: Option<ConditionHook>,
}

impl std::fmt::Debug for ConditionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConditionSpec")
            .field("node_id", &self.node_id)
            .field("name", &self.name)
            .finish()
    }
}

/// The BrowseNames of the fields every condition maintains itself (BaseEventType's and
/// [`condition_event`]'s): a subtype's declaration of one of them (NonExclusiveLimitAlarmType
/// overriding ActiveState) is served by the condition, not given by the application.
pub const MAINTAINED_FIELDS: &[&str] = &[
    "EventId",
    "EventType",
    "SourceNode",
    "SourceName",
    "Time",
    "ReceiveTime",
    "Message",
    "Severity",
    "ConditionClassId",
    "ConditionClassName",
    "ConditionName",
    "BranchId",
    "Retain",
    "EnabledState",
    "Quality",
    "LastSeverity",
    "Comment",
    "ClientUserId",
    "AckedState",
    "ConfirmedState",
    "ActiveState",
    "InputNode",
    "SuppressedOrShelved",
    "ShelvingState",
    "MaxTimeShelved",
];

/// A subtype's fixed Properties as event fields (each its BrowseName as a one-element path).
pub fn property_fields(properties: &[(QualifiedName, Variant)]) -> Arc<[EventField]> {
    properties
        .iter()
        .map(|(name, value)| EventField {
            path: vec![name.clone()],
            value: value.clone(),
        })
        .collect()
}

/// The condition event for a state: what is published on every change and in a
/// ConditionRefresh.
pub fn condition_event(spec: &ConditionSpec, s: &ConditionState) -> Event {
    let lt = |t: &LocalizedText| Variant::LocalizedText(Box::new(t.clone()));
    let f = EventField::ns0;
    let mut ev = Event {
        event_id: s.event_id.clone(),
        event_type: spec.event_type.clone(),
        type_chain: Arc::clone(&spec.type_chain),
        source_node: spec.source.clone(),
        source_name: spec.source_name.clone(),
        time: s.time,
        receive_time: s.time,
        message: s.message.clone(),
        severity: s.severity,
        condition_id: Some(spec.node_id.clone()),
        fields: vec![
            f(
                "ConditionClassId",
                Variant::NodeId(Box::new(NodeId::ns0(ids::PROCESS_CONDITION_CLASS_TYPE))),
            ),
            f(
                "ConditionClassName",
                Variant::LocalizedText(Box::new(LocalizedText::new("en", "Process"))),
            ),
            f(
                "ConditionName",
                Variant::String(UaString::from(spec.name.as_str())),
            ),
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
            f(
                "AckedState",
                two_state(s.acked, "Acknowledged", "Unacknowledged"),
            ),
            f("AckedState/Id", Variant::Boolean(s.acked)),
            f(
                "ConfirmedState",
                two_state(s.confirmed, "Confirmed", "Unconfirmed"),
            ),
            f("ConfirmedState/Id", Variant::Boolean(s.confirmed)),
            f("ActiveState", two_state(s.active, "Active", "Inactive")),
            f("ActiveState/Id", Variant::Boolean(s.active)),
            f("InputNode", Variant::NodeId(Box::new(NodeId::NULL))),
            f(
                "SuppressedOrShelved",
                Variant::Boolean(s.shelved.is_shelved()),
            ),
        ],
        notifiers: Arc::clone(&spec.notifiers),
    };
    if let Some(shelving) = &spec.shelving {
        let (name, id) = s.shelved.state();
        ev.fields.extend([
            f(
                "ShelvingState/CurrentState",
                Variant::LocalizedText(Box::new(LocalizedText::new("en", name))),
            ),
            f(
                "ShelvingState/CurrentState/Id",
                Variant::NodeId(Box::new(NodeId::ns0(id))),
            ),
            f(
                "ShelvingState/UnshelveTime",
                Variant::Double(s.shelved.unshelve_time_ms(s.time)),
            ),
        ]);
        if let Some(max) = shelving.max_time_shelved_ms {
            ev.fields.push(f("MaxTimeShelved", Variant::Double(max)));
        }
    }
    ev.fields.extend(spec.properties.iter().cloned());
    ev
}

/// A condition: its spec and its state, shared by every shard.
#[derive(Debug)]
pub struct Condition {
    pub spec: ConditionSpec,
    state: ArcSwap<ConditionState>,
}

impl Condition {
    pub fn new(spec: ConditionSpec, ids: &EventIdSource, start: DateTime) -> Condition {
        let state = ConditionState::initial(ids, &spec.label, start);
        Condition {
            spec,
            state: ArcSwap::from_pointee(state),
        }
    }

    /// The current state.
    pub fn state(&self) -> Arc<ConditionState> {
        self.state.load_full()
    }

    /// The NodeId of the condition's Variable for a field path (`AckedState/Id` →
    /// `<condition id>.AckedState.Id`, in the condition's namespace).
    pub fn child_id(&self, path: &[QualifiedName]) -> NodeId {
        child_id(&self.spec.node_id, path)
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

/// The condition methods: BrowseName (namespace 0), the type's method, the action. The
/// shelving ones are components of the condition's ShelvingState (`<condition>.ShelvingState.
/// TimedShelve`), the others of the condition.
pub const METHODS: [(&str, u32, ConditionAction); 8] = [
    (
        "Acknowledge",
        ids::ACKNOWLEDGE,
        ConditionAction::Acknowledge,
    ),
    ("Confirm", ids::CONFIRM, ConditionAction::Confirm),
    ("AddComment", ids::ADD_COMMENT, ConditionAction::AddComment),
    ("Enable", ids::ENABLE, ConditionAction::Enable),
    ("Disable", ids::DISABLE, ConditionAction::Disable),
    (
        "TimedShelve",
        ids::TIMED_SHELVE,
        ConditionAction::TimedShelve,
    ),
    (
        "OneShotShelve",
        ids::ONE_SHOT_SHELVE,
        ConditionAction::OneShotShelve,
    ),
    ("Unshelve", ids::UNSHELVE, ConditionAction::Unshelve),
];

/// The BrowseName of a condition's ShelvingState.
pub const SHELVING_STATE: &str = "ShelvingState";

/// The path of a condition method's node below the condition.
pub fn method_path(name: &str, action: ConditionAction) -> Vec<QualifiedName> {
    let mut path = Vec::with_capacity(2);
    if action.is_shelving() {
        path.push(QualifiedName::new(0, SHELVING_STATE));
    }
    path.push(QualifiedName::new(0, name));
    path
}

/// The action of a condition's own method node (`<condition>.Acknowledge`, …, added by
/// [`nodes::add_condition_nodes`]); `None` for any other node.
pub fn method_of(space: &AddressSpace, method_id: &NodeId) -> Option<ConditionAction> {
    let crate::types::Identifier::String(s) = &method_id.identifier else {
        return None;
    };
    let (prefix, name) = s.as_str().rsplit_once('.')?;
    let (_, _, action) = METHODS.iter().find(|(n, _, _)| *n == name)?;
    let prefix = if action.is_shelving() {
        prefix.strip_suffix(SHELVING_STATE)?.strip_suffix('.')?
    } else {
        prefix
    };
    space
        .app_conditions()
        .iter()
        .any(|c| {
            c.node_id.namespace == method_id.namespace
                && (!action.is_shelving() || c.shelving.is_some())
                && matches!(
                    &child_id(&c.node_id, &[]).identifier,
                    crate::types::Identifier::String(p) if p == prefix
                )
        })
        .then_some(*action)
}

/// The NodeId of a condition's Variable for a field path: the condition's identifier (its
/// string, or its number as a string) and the path's names joined by dots.
pub fn child_id(condition: &NodeId, path: &[QualifiedName]) -> NodeId {
    let mut s = match &condition.identifier {
        crate::types::Identifier::String(x) => x.clone(),
        crate::types::Identifier::Numeric(n) => n.to_string(),
        other => format!("{other:?}"),
    };
    for q in path {
        s.push('.');
        s.push_str(q.name.as_str());
    }
    NodeId::string(condition.namespace, s)
}

impl ServerEvents {
    /// The condition with this NodeId.
    pub fn condition(&self, node_id: &NodeId) -> Option<&Arc<Condition>> {
        self.conditions.iter().find(|c| &c.spec.node_id == node_id)
    }

    /// Sets a condition active (with `severity` 1..=1000 and `message`; default "<label>
    /// active") or inactive. Going active clears AckedState and ConfirmedState. Returns the
    /// condition event when the state changed (the caller publishes it); stores the
    /// condition's Variables. A disabled condition does not change.
    pub fn set_condition_active(
        &self,
        space: &AddressSpace,
        c: &Condition,
        active: bool,
        severity: u16,
        message: Option<&str>,
        now: DateTime,
    ) -> Option<Event> {
        let label = &c.spec.label;
        let next = c
            .change(|s| {
                let same_message = message.is_none_or(|m| s.message.text.as_str() == m);
                if !s.enabled
                    || (s.active == active && s.severity == severity.clamp(1, 1000) && same_message)
                {
                    return Ok(None);
                }
                let mut n = s.clone();
                n.active = active;
                n.last_severity = s.severity;
                n.severity = severity.clamp(1, 1000);
                if active && !s.active {
                    n.acked = false;
                    n.confirmed = false;
                }
                // A OneShotShelve lasts through one active state (§5.8.17.1).
                if let Shelved::OneShot { seen_active, until } = s.shelved {
                    n.shelved = if active {
                        Shelved::OneShot {
                            seen_active: true,
                            until,
                        }
                    } else if seen_active && s.active {
                        Shelved::Unshelved
                    } else {
                        s.shelved
                    };
                }
                let default = format!("{label} {}", if active { "active" } else { "inactive" });
                n.message = LocalizedText::new("en", message.unwrap_or(&default));
                n.comment = LocalizedText::default();
                n.comment_time = now;
                n.client_user_id = UaString::null();
                n.event_id = self.ids.next();
                n.time = now;
                n.changes += 1;
                Ok(Some(n))
            })
            .ok()??;
        let ev = condition_event(&c.spec, &next);
        self.store_condition_cells(space, c);
        Some(ev)
    }

    /// Acknowledge, Confirm, AddComment, Enable or Disable a condition (Part 9 §5.5.4 to
    /// §5.5.6, §5.7.3, §5.7.4). Acknowledge, Confirm and AddComment name the EventId of the
    /// condition's latest event. On success the condition event is published on the bus, the
    /// condition's Variables are updated and the application's hook is told.
    ///
    /// * Enable when enabled / Disable when disabled: `BadConditionAlreadyEnabled` /
    ///   `BadConditionAlreadyDisabled`; anything else while disabled: `BadConditionDisabled`;
    /// * `event_id` not the latest event's: `BadEventIdUnknown`;
    /// * already acknowledged / confirmed: `BadConditionBranchAlreadyAcked` /
    ///   `BadConditionBranchAlreadyConfirmed`.
    pub fn condition_action(
        &self,
        space: &AddressSpace,
        c: &Condition,
        action: ConditionAction,
        event_id: &ByteString,
        comment: &LocalizedText,
        client_user_id: &str,
        now: DateTime,
    ) -> Result<(), StatusCode> {
        let label = &c.spec.label;
        let next = c.change(|s| {
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
                    n.message = LocalizedText::new(
                        "en",
                        &format!("{label} {}", if enable { "enabled" } else { "disabled" }),
                    );
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
                            n.message = LocalizedText::new("en", &format!("{label} acknowledged"));
                        }
                        ConditionAction::Confirm => {
                            if s.confirmed {
                                return Err(StatusCode::BadConditionBranchAlreadyConfirmed);
                            }
                            n.confirmed = true;
                            n.message = LocalizedText::new("en", &format!("{label} confirmed"));
                        }
                        _ => n.message = LocalizedText::new("en", &format!("{label} comment")),
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
            self.announce(space, c, &next, action, comment, client_user_id);
        }
        Ok(())
    }

    /// After a client's action changed `c` to `next`: publishes the condition event, stores
    /// the condition's Variables and tells the application's hook.
    fn announce(
        &self,
        space: &AddressSpace,
        c: &Condition,
        next: &ConditionState,
        action: ConditionAction,
        comment: &LocalizedText,
        user: &str,
    ) {
        self.bus.publish(condition_event(&c.spec, next));
        self.store_condition_cells(space, c);
        if let Some(hook) = &c.spec.on_action {
            hook(&ConditionActionInfo {
                condition: &c.spec.node_id,
                action,
                comment,
                user,
                acked: next.acked,
                confirmed: next.confirmed,
                active: next.active,
                enabled: next.enabled,
            });
        }
    }

    /// TimedShelve (for `shelving_time_ms`), OneShotShelve or Unshelve a condition that has a
    /// ShelvingState (Part 9 §5.8.17.2 to §5.8.17.6). On success the condition event is
    /// published (SuppressedOrShelved and ShelvingState changed), the Variables are updated
    /// and the application's hook is told.
    ///
    /// * no ShelvingState: `BadMethodInvalid`; disabled: `BadConditionDisabled`;
    /// * TimedShelve for a time not above 0, not finite, or above MaxTimeShelved:
    ///   `BadShelvingTimeOutOfRange`; TimedShelve when TimedShelved starts the time again;
    /// * OneShotShelve when OneShotShelved: `BadConditionAlreadyShelved`;
    /// * Unshelve when Unshelved: `BadConditionNotShelved`.
    pub fn shelve(
        &self,
        space: &AddressSpace,
        c: &Condition,
        action: ConditionAction,
        shelving_time_ms: f64,
        client_user_id: &str,
        now: Now,
    ) -> Result<(), StatusCode> {
        let Some(shelving) = c.spec.shelving else {
            return Err(StatusCode::BadMethodInvalid);
        };
        let max = shelving.max_time_shelved_ms;
        let label = &c.spec.label;
        let next = c.change(|s| {
            if !s.enabled {
                return Err(StatusCode::BadConditionDisabled);
            }
            let (shelved, message) = match action {
                ConditionAction::TimedShelve => {
                    let t = shelving_time_ms;
                    if !(t.is_finite() && t > 0.0) || max.is_some_and(|m| t > m) {
                        return Err(StatusCode::BadShelvingTimeOutOfRange);
                    }
                    let (until_ns, until) = after_ms(now, t);
                    (
                        Shelved::Timed { until_ns, until },
                        format!("{label} shelved for {} s", t / 1000.0),
                    )
                }
                ConditionAction::OneShotShelve => {
                    if matches!(s.shelved, Shelved::OneShot { .. }) {
                        return Err(StatusCode::BadConditionAlreadyShelved);
                    }
                    (
                        Shelved::OneShot {
                            seen_active: s.active,
                            until: max.map(|m| after_ms(now, m)),
                        },
                        format!("{label} shelved once"),
                    )
                }
                ConditionAction::Unshelve => {
                    if !s.shelved.is_shelved() {
                        return Err(StatusCode::BadConditionNotShelved);
                    }
                    (Shelved::Unshelved, format!("{label} unshelved"))
                }
                _ => return Err(StatusCode::BadMethodInvalid),
            };
            let mut n = s.clone();
            n.shelved = shelved;
            n.message = LocalizedText::new("en", &message);
            n.client_user_id = UaString::from(client_user_id);
            n.last_severity = s.severity;
            n.event_id = self.ids.next();
            n.time = now.utc;
            n.changes += 1;
            Ok(Some(n))
        })?;
        // A shelving with a time (or its end) moves the next tick.
        self.shelving_tick_ns.store(0, Ordering::Release);
        if let Some(next) = next {
            self.announce(
                space,
                c,
                &next,
                action,
                &LocalizedText::default(),
                client_user_id,
            );
        }
        Ok(())
    }

    /// When a shard should call [`ServerEvents::shelving_tick`] (monotonic ns), if an alarm
    /// is shelved until a time.
    pub fn next_shelving_tick(&self) -> Option<u64> {
        let t = self.shelving_tick_ns.load(Ordering::Acquire);
        (t != u64::MAX).then_some(t)
    }

    /// Unshelves the alarms whose shelving time ran out (each raises its event) and brings
    /// the UnshelveTime Variables of the others up to date; then sets the next tick: the
    /// earliest end, at most a second away while an alarm is shelved until a time. Any shard
    /// may call it when [`ServerEvents::next_shelving_tick`] is due; one that finds the tick
    /// already taken by another does nothing.
    pub fn shelving_tick(&self, space: &AddressSpace, now: Now) {
        let due = self.shelving_tick_ns.load(Ordering::Acquire);
        if due > now.mono_ns
            || self
                .shelving_tick_ns
                .compare_exchange(due, u64::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let mut next = u64::MAX;
        for c in self.conditions.iter().filter(|c| c.spec.shelving.is_some()) {
            let Some(end) = c.state().shelved.deadline_ns() else {
                continue;
            };
            if end > now.mono_ns {
                next = next.min(end).min(now.mono_ns.saturating_add(1_000_000_000));
                self.store_unshelve_time(space, c, now.utc);
                continue;
            }
            let label = &c.spec.label;
            let changed = c.change(|s| {
                if s.shelved.deadline_ns().is_none_or(|d| d > now.mono_ns) {
                    return Ok(None);
                }
                let mut n = s.clone();
                n.shelved = Shelved::Unshelved;
                n.message = LocalizedText::new("en", &format!("{label} unshelved: time ran out"));
                n.client_user_id = UaString::null();
                n.last_severity = s.severity;
                n.event_id = self.ids.next();
                n.time = now.utc;
                n.changes += 1;
                Ok(Some(n))
            });
            if let Ok(Some(n)) = changed {
                self.bus.publish(condition_event(&c.spec, &n));
                self.store_condition_cells(space, c);
            }
        }
        // A shelving during this tick stored 0, which this must not overwrite.
        let _ = self.shelving_tick_ns.compare_exchange(
            u64::MAX,
            next,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Stores a shelved condition's UnshelveTime as of `at`.
    fn store_unshelve_time(&self, space: &AddressSpace, c: &Condition, at: DateTime) {
        let path = [
            QualifiedName::new(0, SHELVING_STATE),
            QualifiedName::new(0, "UnshelveTime"),
        ];
        if let Some(i) = space.node_index(&c.child_id(&path)) {
            let _ = space.store_value(
                i,
                crate::types::DataValue {
                    value: Variant::Double(c.state().shelved.unshelve_time_ms(at)),
                    source_timestamp: Some(at),
                    server_timestamp: Some(at),
                    ..Default::default()
                },
            );
        }
    }

    /// The condition a Call of `action` on `object_id` addresses: the condition, or for a
    /// shelving method its ShelvingState object too (§5.8.17.4: both are allowed).
    pub fn condition_called(
        &self,
        object_id: &NodeId,
        action: ConditionAction,
    ) -> Option<&Arc<Condition>> {
        if let Some(c) = self.condition(object_id) {
            return Some(c);
        }
        if !action.is_shelving() {
            return None;
        }
        self.conditions.iter().find(|c| {
            c.spec.shelving.is_some()
                && child_id(&c.spec.node_id, &[QualifiedName::new(0, SHELVING_STATE)]) == *object_id
        })
    }

    /// Writes the newest state of every condition into its Variables.
    pub(crate) fn store_alarm_cells(&self, space: &AddressSpace) {
        for c in &self.conditions {
            self.store_condition_cells(space, c);
        }
    }

    /// Writes the newest state of a condition into the Variables under its node.
    pub(crate) fn store_condition_cells(&self, space: &AddressSpace, c: &Condition) {
        let ev = condition_event(&c.spec, &c.state());
        for (path, value) in nodes::alarm_values(&ev) {
            if let Some(i) = space.node_index(&c.child_id(&path)) {
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
        let mut out = vec![bracket(
            &self.chains.refresh_start,
            ids::REFRESH_START_EVENT_TYPE,
            "ConditionRefresh start",
        )];
        for c in &self.conditions {
            let s = c.state();
            if s.retain() && s.changes > 0 {
                out.push(condition_event(&c.spec, &s));
            }
        }
        out.push(bracket(
            &self.chains.refresh_end,
            ids::REFRESH_END_EVENT_TYPE,
            "ConditionRefresh end",
        ));
        out
    }
}

/// Is this a RefreshStartEvent or RefreshEndEvent (they bypass the where clause)?
pub fn is_refresh_bracket(ev: &Event) -> bool {
    matches!(
        ev.event_type.as_ns0(),
        Some(ids::REFRESH_START_EVENT_TYPE | ids::REFRESH_END_EVENT_TYPE)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_of_a_condition_event_is_listed_as_maintained() {
        let ids = EventIdSource::new(DateTime(0));
        let spec = ConditionSpec {
            node_id: NodeId::string(1, "A"),
            name: "A".into(),
            label: "A".into(),
            source: NodeId::string(1, "S"),
            source_name: UaString::from("S"),
            notifiers: Arc::from(Vec::new()),
            event_type: NodeId::ns0(ids::ALARM_CONDITION_TYPE),
            type_chain: Arc::from(Vec::new()),
            properties: Arc::from(Vec::new()),
            shelving: Some(Shelving {
                max_time_shelved_ms: Some(1000.0),
            }),
            on_action: None,
        };
        let ev = condition_event(&spec, &ConditionState::initial(&ids, "A", DateTime(0)));
        for f in &ev.fields {
            let first = f.path.first().map(|q| q.name.as_str()).unwrap_or_default();
            assert!(MAINTAINED_FIELDS.contains(&first), "{first}");
        }
    }
}
