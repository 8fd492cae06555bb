//! Events and conditions (Part 4 §7.22.3, Part 5 §6.4, Part 9), sans-IO like the rest of core.
//!
//! * [`Event`]: one event occurrence. The BaseEventType fields are members; type-specific
//!   fields (the condition's states, an application event type's own fields, the audit
//!   fields) are
//!   `(browse path, value)` pairs. A field is addressed the way a SimpleAttributeOperand
//!   names it: (type definition, browse path, attribute). The event carries its type's
//!   supertype chain, so "is this event of type T" needs no address-space walk.
//! * [`filter`]: EventFilter compile (per-clause results) and evaluation.
//! * [`bus`]: the bounded lock-free broadcast ring that carries events from the shard that
//!   raised them to every shard.
//! * [`condition`]: the application's alarms (AlarmConditionType), their shared lock-free
//!   state, Acknowledge / Confirm, and the ConditionRefresh event sequence.
//! * [`audit`]: the session-created / session-closed events.
//! * [`nodes`]: the nodes of a condition and the argument declarations of the server's own
//!   methods.
//!
//! See docs/Events.md.

pub mod audit;
pub mod bus;
pub mod condition;
pub mod filter;
pub mod nodes;
pub mod record;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::address_space::AddressSpace;
use crate::config::ServerConfig;
use crate::generated::attribute_ids;
use crate::types::{ByteString, DateTime, LocalizedText, NodeId, QualifiedName, UaString, Variant};

pub use bus::{EventBus, EventCursor};
pub use condition::{Condition, ConditionSpec};
pub use filter::{compile, CompiledEventFilter};

/// Namespace-0 ids of the event and condition types and methods used here.
pub mod ids {
    pub const BASE_EVENT_TYPE: u32 = 2041;
    pub const AUDIT_EVENT_TYPE: u32 = 2052;
    pub const AUDIT_SESSION_EVENT_TYPE: u32 = 2069;
    pub const AUDIT_CREATE_SESSION_EVENT_TYPE: u32 = 2071;
    pub const SYSTEM_EVENT_TYPE: u32 = 2130;
    pub const EVENT_QUEUE_OVERFLOW_EVENT_TYPE: u32 = 3035;
    pub const CONDITION_TYPE: u32 = 2782;
    pub const REFRESH_START_EVENT_TYPE: u32 = 2787;
    pub const REFRESH_END_EVENT_TYPE: u32 = 2788;
    pub const ACKNOWLEDGEABLE_CONDITION_TYPE: u32 = 2881;
    pub const ALARM_CONDITION_TYPE: u32 = 2915;
    pub const PROCESS_CONDITION_CLASS_TYPE: u32 = 11164;
    pub const HAS_EVENT_SOURCE: u32 = 36;
    pub const HAS_MODELLING_RULE: u32 = 37;
    pub const HAS_NOTIFIER: u32 = 48;
    pub const MODELLING_RULE_MANDATORY: u32 = 78;
    pub const TWO_STATE_VARIABLE_TYPE: u32 = 8995;
    pub const CONDITION_VARIABLE_TYPE: u32 = 9002;
    pub const HAS_CONDITION: u32 = 9006;
    pub const ARGUMENT: u32 = 296;
    pub const DURATION: u32 = 290;
    pub const UTC_TIME: u32 = 294;
    pub const SERVER: u32 = 2253;
    /// Methods.
    pub const CONDITION_REFRESH: u32 = 3875;
    pub const CONDITION_REFRESH2: u32 = 12912;
    pub const ENABLE: u32 = 9027;
    pub const DISABLE: u32 = 9028;
    pub const ADD_COMMENT: u32 = 9029;
    pub const ACKNOWLEDGE: u32 = 9111;
    pub const CONFIRM: u32 = 9113;
    pub const GET_MONITORED_ITEMS: u32 = 11492;
    pub const RESEND_DATA: u32 = 12873;
    /// ShelvedStateMachineType (Part 9 §5.8.17), its states and methods.
    pub const SHELVED_STATE_MACHINE_TYPE: u32 = 2929;
    pub const SHELVED_UNSHELVED: u32 = 2930;
    pub const SHELVED_TIMED: u32 = 2932;
    pub const SHELVED_ONE_SHOT: u32 = 2933;
    pub const UNSHELVE: u32 = 2947;
    pub const ONE_SHOT_SHELVE: u32 = 2948;
    pub const TIMED_SHELVE: u32 = 2949;
    pub const FINITE_STATE_VARIABLE_TYPE: u32 = 2760;
}

/// The BaseEventType field names (browse names in namespace 0).
pub mod base_fields {
    pub const EVENT_ID: &str = "EventId";
    pub const EVENT_TYPE: &str = "EventType";
    pub const SOURCE_NODE: &str = "SourceNode";
    pub const SOURCE_NAME: &str = "SourceName";
    pub const TIME: &str = "Time";
    pub const RECEIVE_TIME: &str = "ReceiveTime";
    pub const MESSAGE: &str = "Message";
    pub const SEVERITY: &str = "Severity";
}

/// Length of an EventId, bytes.
pub const EVENT_ID_LEN: usize = 16;

/// One type-specific event field: its browse path from the event type and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct EventField {
    pub path: Vec<QualifiedName>,
    pub value: Variant,
}

impl EventField {
    /// A field whose path is namespace-0 names separated by `/` (e.g. `AckedState/Id`).
    pub fn ns0(path: &str, value: Variant) -> EventField {
        EventField {
            path: path.split('/').map(|p| QualifiedName::new(0, p)).collect(),
            value,
        }
    }
}

/// One event occurrence. Cheap to share: the bus holds it in an `Arc`.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Unique, [`EVENT_ID_LEN`] bytes (see [`EventIdSource`]).
    pub event_id: ByteString,
    /// The event type node.
    pub event_type: NodeId,
    /// `event_type` and its supertypes up to BaseEventType, most derived first.
    pub type_chain: Arc<[NodeId]>,
    pub source_node: NodeId,
    pub source_name: UaString,
    pub time: DateTime,
    pub receive_time: DateTime,
    pub message: LocalizedText,
    /// 1..=1000.
    pub severity: u16,
    /// The condition node (ConditionId: empty browse path, NodeId attribute) for condition
    /// events.
    pub condition_id: Option<NodeId>,
    /// Type-specific fields.
    pub fields: Vec<EventField>,
    /// The notifier nodes this event is reported on: always the Server object, plus the
    /// notifiers above the source.
    pub notifiers: Arc<[NodeId]>,
}

impl Event {
    /// Is the event of type `t` or a subtype of it?
    pub fn is_of_type(&self, t: &NodeId) -> bool {
        self.type_chain.iter().any(|x| x == t)
    }

    /// Is the event reported on this notifier (an Object or View with SubscribeToEvents)?
    /// This is the check an event monitored item on `notifier` makes before its filter.
    pub fn is_reported_on(&self, notifier: &NodeId) -> bool {
        self.notifiers.iter().any(|n| n == notifier)
    }

    /// The value of a field as a SimpleAttributeOperand selects it (Part 4 §7.7.4.5):
    /// `Variant::Empty` when the event is not of `type_definition` (BaseEventType or a null
    /// id match every event), the path names no field of this event, or the attribute is
    /// neither Value nor (for the ConditionId, empty path) NodeId.
    pub fn field(
        &self,
        type_definition: &NodeId,
        path: &[QualifiedName],
        attribute_id: u32,
    ) -> Variant {
        if !type_definition.is_null()
            && type_definition.as_ns0() != Some(ids::BASE_EVENT_TYPE)
            && !self.is_of_type(type_definition)
        {
            return Variant::Empty;
        }
        if path.is_empty() {
            return match (attribute_id, &self.condition_id) {
                (attribute_ids::NodeId, Some(c)) => Variant::NodeId(Box::new(c.clone())),
                _ => Variant::Empty,
            };
        }
        if attribute_id != attribute_ids::Value {
            return Variant::Empty;
        }
        if let [one] = path {
            if one.namespace_index == 0 {
                let base = match one.name.as_str() {
                    base_fields::EVENT_ID => Some(Variant::ByteString(self.event_id.clone())),
                    base_fields::EVENT_TYPE => {
                        Some(Variant::NodeId(Box::new(self.event_type.clone())))
                    }
                    base_fields::SOURCE_NODE => {
                        Some(Variant::NodeId(Box::new(self.source_node.clone())))
                    }
                    base_fields::SOURCE_NAME => Some(Variant::String(self.source_name.clone())),
                    base_fields::TIME => Some(Variant::DateTime(self.time)),
                    base_fields::RECEIVE_TIME => Some(Variant::DateTime(self.receive_time)),
                    base_fields::MESSAGE => {
                        Some(Variant::LocalizedText(Box::new(self.message.clone())))
                    }
                    base_fields::SEVERITY => Some(Variant::UInt16(self.severity)),
                    _ => None,
                };
                if let Some(v) = base {
                    return v;
                }
            }
        }
        self.fields
            .iter()
            .find(|f| f.path == path)
            .map(|f| f.value.clone())
            .unwrap_or(Variant::Empty)
    }

    /// A type-specific field by its `/`-separated namespace-0 path (tests, conditions).
    pub fn field_ns0(&self, path: &str) -> Variant {
        let p: Vec<QualifiedName> = path.split('/').map(|s| QualifiedName::new(0, s)).collect();
        self.field(&NodeId::NULL, &p, attribute_ids::Value)
    }
}

/// EventIds unique across the server and its restarts without a syscall per event: an
/// 8-byte prefix, the server's start time (100 ns ticks: a restart has a later one),
/// followed by a global 64-bit counter (one relaxed `fetch_add`; raising events is rare
/// next to reading them). EventIds need to be unique, not secret (Part 5 §6.4.2).
#[derive(Debug)]
pub struct EventIdSource {
    prefix: [u8; 8],
    counter: AtomicU64,
}

impl EventIdSource {
    pub fn new(start: DateTime) -> EventIdSource {
        EventIdSource {
            prefix: start.0.to_be_bytes(),
            counter: AtomicU64::new(1),
        }
    }

    /// A fresh EventId.
    pub fn next(&self) -> ByteString {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut b = Vec::with_capacity(EVENT_ID_LEN);
        b.extend_from_slice(&self.prefix);
        b.extend_from_slice(&n.to_be_bytes());
        ByteString::from(b)
    }
}

/// `t` and its supertypes (most derived first), walked through the address space (at most
/// 32 levels). An unknown `t` gives `[t, BaseEventType]` so BaseEventType selections
/// still work.
pub fn type_chain(space: &AddressSpace, t: &NodeId) -> Arc<[NodeId]> {
    let mut chain = vec![t.clone()];
    let mut cur = t.clone();
    for _ in 0..32 {
        match space.supertype_of(&cur) {
            Some(p) => {
                chain.push(p.clone());
                cur = p.clone();
            }
            None => break,
        }
    }
    let base = NodeId::ns0(ids::BASE_EVENT_TYPE);
    if !chain.contains(&base) {
        chain.push(base);
    }
    chain.into()
}

/// The event types this server raises, their chains computed once at start.
#[derive(Debug)]
pub struct TypeChains {
    pub base: Arc<[NodeId]>,
    pub refresh_start: Arc<[NodeId]>,
    pub refresh_end: Arc<[NodeId]>,
    pub audit_create_session: Arc<[NodeId]>,
    pub audit_session: Arc<[NodeId]>,
    pub queue_overflow: Arc<[NodeId]>,
}

impl TypeChains {
    pub fn new(space: &AddressSpace) -> TypeChains {
        let c = |id: u32| type_chain(space, &NodeId::ns0(id));
        TypeChains {
            base: c(ids::BASE_EVENT_TYPE),
            refresh_start: c(ids::REFRESH_START_EVENT_TYPE),
            refresh_end: c(ids::REFRESH_END_EVENT_TYPE),
            audit_create_session: c(ids::AUDIT_CREATE_SESSION_EVENT_TYPE),
            audit_session: c(ids::AUDIT_SESSION_EVENT_TYPE),
            queue_overflow: c(ids::EVENT_QUEUE_OVERFLOW_EVENT_TYPE),
        }
    }
}

/// Everything about events the shards share (`ServerShared::events`): the bus, the
/// conditions, the EventId source and the type chains. Lock-free throughout.
#[derive(Debug)]
pub struct ServerEvents {
    /// The cross-shard broadcast ring.
    pub bus: EventBus,
    /// Every condition of the application.
    pub conditions: Vec<Arc<Condition>>,
    pub ids: EventIdSource,
    pub chains: TypeChains,
    /// [`server_notifiers`], shared by every event that uses them.
    pub notifiers_server: Arc<[NodeId]>,
    /// The server's ApplicationUri: the ServerId of its audit events.
    pub server_uri: UaString,
    /// When a shard should next call [`ServerEvents::shelving_tick`] (monotonic ns;
    /// `u64::MAX`: no alarm is shelved until a time).
    pub(crate) shelving_tick_ns: std::sync::atomic::AtomicU64,
}

impl ServerEvents {
    /// Built after the address space (the alarm's initial state is in its value cells).
    pub fn new(config: &ServerConfig, space: &AddressSpace, start: DateTime) -> ServerEvents {
        let ids = EventIdSource::new(start);
        let chains = TypeChains::new(space);
        let mut conditions: Vec<Arc<Condition>> = Vec::new();
        for c in space.app_conditions() {
            let source_name = space
                .display_name_of(&c.source)
                .map(|d| d.text.as_str().to_string())
                .unwrap_or_default();
            let spec = ConditionSpec {
                node_id: c.node_id.clone(),
                name: c.name.clone(),
                label: c.name.clone(),
                source: c.source.clone(),
                source_name: UaString::from(source_name.as_str()),
                notifiers: notifiers_of(space, &c.source).into(),
                event_type: c.type_def.clone(),
                type_chain: type_chain(space, &c.type_def),
                properties: condition::property_fields(&c.properties),
                shelving: c.shelving,
                on_action: c.on_action.clone(),
            };
            conditions.push(Arc::new(Condition::new(spec, &ids, start)));
        }
        let events = ServerEvents {
            bus: EventBus::new(config.events.bus_capacity as usize),
            conditions,
            ids,
            chains,
            notifiers_server: server_notifiers(),
            server_uri: UaString::from(config.application.effective_application_uri()),
            shelving_tick_ns: std::sync::atomic::AtomicU64::new(u64::MAX),
        };
        events.store_alarm_cells(space);
        events
    }
}

impl ServerEvents {
    /// An EventQueueOverflowEventType event (Part 4, queue parameters of MonitoredItems): what an event
    /// monitored item queues (unfiltered by its where clause) when it discarded events —
    /// its queue overflowed, or its shard's bus cursor reported missed events. Source: the
    /// Server object.
    pub fn queue_overflow_event(&self, now: DateTime) -> Event {
        Event {
            event_id: self.ids.next(),
            event_type: NodeId::ns0(ids::EVENT_QUEUE_OVERFLOW_EVENT_TYPE),
            type_chain: Arc::clone(&self.chains.queue_overflow),
            source_node: NodeId::ns0(ids::SERVER),
            source_name: UaString::from("Server"),
            time: now,
            receive_time: now,
            message: LocalizedText::new("en", "Event queue overflow: events were discarded"),
            severity: 500,
            condition_id: None,
            fields: Vec::new(),
            notifiers: Arc::clone(&self.notifiers_server),
        }
    }
}

pub use crate::address_space::event_notifier::SUBSCRIBE_TO_EVENTS;

/// Can a client subscribe to events of this node (an Object or View whose EventNotifier has
/// SubscribeToEvents)? An event monitored item on any other node is refused (e.g.
/// `BadFilterNotAllowed` / `BadNodeIdInvalid`, the caller's choice).
pub fn is_event_notifier(space: &AddressSpace, node: &NodeId) -> bool {
    space
        .node(node)
        .and_then(|n| n.event_notifier())
        .is_some_and(|e| e & SUBSCRIBE_TO_EVENTS != 0)
}

/// The notifiers an event from `source` is reported on: the Server object, the source when
/// it is an event notifier, and every event notifier above it (inverse hierarchical
/// references, at most 16 levels, at most 64 nodes).
pub fn notifiers_of(space: &AddressSpace, source: &NodeId) -> Vec<NodeId> {
    let server = NodeId::ns0(ids::SERVER);
    let mut out = vec![server.clone()];
    let hierarchical = NodeId::ns0(crate::address_space::ids::HIERARCHICAL_REFERENCES);
    let mut frontier = vec![source.clone()];
    for _ in 0..16 {
        let mut next = Vec::new();
        for id in frontier {
            if id != server && is_event_notifier(space, &id) && !out.contains(&id) {
                out.push(id.clone());
            }
            if let Some(n) = space.node(&id) {
                for r in n.refs() {
                    if !r.is_forward() && space.is_subtype_of(&r.reference_type(), &hierarchical) {
                        if let Some(t) = r.target_node() {
                            let t = t.node_id();
                            if !next.contains(&t) && out.len() + next.len() < 64 {
                                next.push(t);
                            }
                        }
                    }
                }
            }
        }
        if next.is_empty() {
            break;
        }
        frontier = next;
    }
    out
}

/// The notifiers of events reported on the Server object only.
pub fn server_notifiers() -> Arc<[NodeId]> {
    Arc::from(vec![NodeId::ns0(ids::SERVER)])
}

/// Raises one GeneralModelChangeEvent (Part 3 §9.32.7) on the Server object for a
/// committed change of the address space: `Changes` lists each affected node with its type
/// definition and verbs (NodeAdded 1, NodeDeleted 2, ReferenceAdded 4, ReferenceDeleted 8).
pub fn publish_model_change(
    ev: &ServerEvents,
    space: &AddressSpace,
    committed: &crate::address_space::edit::Committed,
    now: crate::Now,
) {
    if committed.changes.is_empty() {
        return;
    }
    let changes: Vec<Variant> = committed
        .changes
        .iter()
        .map(|c| Variant::ExtensionObject(Box::new(crate::types::ExtensionObject::from_struct(c))))
        .collect();
    let Some(value) = Variant::array(crate::types::BuiltinType::ExtensionObject, changes) else {
        return;
    };
    let event_type = NodeId::ns0(crate::generated::node_ids::GeneralModelChangeEventType);
    let chain = type_chain(space, &event_type);
    ev.bus.publish_with(|| Event {
        event_id: ev.ids.next(),
        event_type,
        type_chain: chain,
        source_node: NodeId::ns0(crate::address_space::ids::SERVER),
        source_name: UaString::from("Server/ModelChange"),
        time: now.utc,
        receive_time: now.utc,
        message: LocalizedText::new("en", "The address space changed"),
        severity: 1,
        condition_id: None,
        fields: vec![EventField::ns0("Changes", value)],
        notifiers: Arc::clone(&ev.notifiers_server),
    });
}
