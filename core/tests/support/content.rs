//! Test content for core's own tests, built with core's builder: namespace 1 as `uaring serve`
//! fills it (the benchmark values and arrays, or the counters; a `Demo` folder with a
//! writable variable of every built-in type, arrays, computed values, an event source with
//! its event type, an alarm and two methods). Core builds none of this itself; the real Demo
//! folder is an ordinary user of the library (shards/src/content).
#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use uaring_core::address_space::app::{
    AppCondition, AppMethod, ArgDef, Computed, MethodHandler, ReadFn, Shelving,
};
use uaring_core::address_space::build::make::{
    folder, make_variable, variable, READ_ONLY, WRITABLE,
};
use uaring_core::address_space::build::AddressSpaceBuilder;
use uaring_core::address_space::{ids, ClassAttributes, Node, NodeClass, Reference, ValueSource};
use uaring_core::config::ServerConfig;
use uaring_core::events::condition::{child_id, ConditionAction};
use uaring_core::events::{self, Event, EventField};
use uaring_core::shared::ServerShared;
use uaring_core::types::{
    BuiltinType, ByteString, DataValue, DateTime, ExpandedNodeId, Guid, LocalizedText, NodeId,
    QualifiedName, StatusCode, UaString, Variant,
};
use uaring_core::Now;

/// What to add.
#[derive(Clone, Debug)]
pub struct Content {
    pub demo: bool,
    pub benchmark_values: u32,
    pub benchmark_arrays: Vec<u32>,
    /// Counters `ns=1;i=1..N` instead of the benchmark values and arrays.
    pub counters: u32,
}

impl Default for Content {
    fn default() -> Self {
        Content {
            demo: true,
            benchmark_values: 100,
            benchmark_arrays: vec![10, 100, 1000],
            counters: 0,
        }
    }
}

impl Content {
    /// The benchmark values and arrays only (the contract).
    pub fn contract() -> Content {
        Content {
            demo: false,
            ..Content::default()
        }
    }

    /// `n` counters only.
    pub fn counters(n: u32) -> Content {
        Content {
            demo: false,
            counters: n,
            ..Content::default()
        }
    }
}

/// A server with the default content (`ServerShared::new` plus this content).
pub fn new(config: ServerConfig, now: Now) -> Result<Arc<ServerShared>, String> {
    new_with(config, now, &Content::default())
}

/// A server with `content`.
pub fn new_with(
    config: ServerConfig,
    now: Now,
    content: &Content,
) -> Result<Arc<ServerShared>, String> {
    let content = content.clone();
    ServerShared::new_with(config, now, &mut move |b| add(b, &content, now))
}

/// A server with the default content, then what `extend` adds.
pub fn new_and(
    config: ServerConfig,
    now: Now,
    mut extend: impl FnMut(&mut AddressSpaceBuilder) -> Result<(), String>,
) -> Result<Arc<ServerShared>, String> {
    let content = Content::default();
    ServerShared::new_with(config, now, &mut move |b| {
        add(b, &content, now)?;
        extend(b)
    })
}

/// Adds `content` to namespace 1.
pub fn add(b: &mut AddressSpaceBuilder, c: &Content, now: Now) -> Result<(), String> {
    if c.counters > 0 {
        add_counters(b, c.counters)?;
    } else {
        add_benchmark(b, c.benchmark_values, &c.benchmark_arrays, now.utc)?;
    }
    if c.demo {
        add_demo(b, now)?;
    }
    Ok(())
}

pub const BENCHMARK_VALUE_FIRST_ID: u32 = 1001;
pub const BENCHMARK_ARRAY_FIRST_ID: u32 = 2001;
pub const COUNTER_PERIOD_MS: u32 = 100;
/// The test alarm's shelving: MaxTimeShelved one hour.
pub const DEMO_SHELVING: Shelving = Shelving {
    max_time_shelved_ms: Some(3_600_000.0),
};
pub const SINE_PERIOD_MS: u32 = 10_000;

fn initial(v: Variant, t: DateTime) -> DataValue {
    DataValue {
        value: v,
        source_timestamp: Some(t),
        ..Default::default()
    }
}

fn add_benchmark(
    b: &mut AddressSpaceBuilder,
    values: u32,
    arrays: &[u32],
    start: DateTime,
) -> Result<(), String> {
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    for i in 0..values {
        b.add(variable(
            NodeId::numeric(1, BENCHMARK_VALUE_FIRST_ID + i),
            QualifiedName::new(1, &format!("BenchmarkValue{i}")),
            NodeId::ns0(BuiltinType::Int32 as u32),
            -1,
            Vec::new(),
            initial(Variant::Int32(i as i32), start),
            WRITABLE,
            0.0,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }
    for (k, &n) in arrays.iter().enumerate() {
        let values: Vec<Variant> = (0..n).map(|j| Variant::Int32((j % 1000) as i32)).collect();
        let value = Variant::array(BuiltinType::Int32, values).ok_or("benchmark array")?;
        b.add(variable(
            NodeId::numeric(1, BENCHMARK_ARRAY_FIRST_ID + k as u32),
            QualifiedName::new(1, &format!("BenchmarkArray{n}")),
            NodeId::ns0(BuiltinType::Int32 as u32),
            1,
            vec![n],
            initial(value, start),
            WRITABLE,
            0.0,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }
    Ok(())
}

fn count(now: Now, c: &AtomicU64) -> DataValue {
    let v = c.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    DataValue {
        value: Variant::UInt64(v),
        source_timestamp: Some(now.utc),
        server_timestamp: Some(now.utc),
        ..Default::default()
    }
}

/// `n` UInt64 counters `ns=1;i=1..n` that increment on every read or sample (minimum
/// sampling interval 1 ms), one shared closure over each node's state word.
pub fn add_counters(b: &mut AddressSpaceBuilder, n: u32) -> Result<(), String> {
    b.reserve(n as usize);
    let read: ReadFn = Arc::new(count);
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    for i in 1..=n {
        b.add(make_variable(
            NodeId::numeric(1, i),
            QualifiedName::new(1, &format!("Counter{i}")),
            NodeId::ns0(BuiltinType::UInt64 as u32),
            -1,
            Vec::new(),
            ValueSource::Computed(Computed::with_state(read.clone(), 0)),
            READ_ONLY,
            1.0,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }
    Ok(())
}

/// The built-in types of the Demo.Static variables: (name, DataType id, initial value).
pub fn demo_types() -> Vec<(&'static str, u32, Variant)> {
    vec![
        ("Boolean", 1, Variant::Boolean(false)),
        ("SByte", 2, Variant::SByte(0)),
        ("Byte", 3, Variant::Byte(0)),
        ("Int16", 4, Variant::Int16(0)),
        ("UInt16", 5, Variant::UInt16(0)),
        ("Int32", 6, Variant::Int32(0)),
        ("UInt32", 7, Variant::UInt32(0)),
        ("Int64", 8, Variant::Int64(0)),
        ("UInt64", 9, Variant::UInt64(0)),
        ("Float", 10, Variant::Float(0.0)),
        ("Double", 11, Variant::Double(0.0)),
        ("String", 12, Variant::String(UaString::from(""))),
        ("DateTime", 13, Variant::DateTime(DateTime::NULL)),
        ("Guid", 14, Variant::Guid(Guid::NULL)),
        (
            "ByteString",
            15,
            Variant::ByteString(ByteString::from(Vec::new())),
        ),
        ("NodeId", 17, Variant::NodeId(Box::new(NodeId::NULL))),
        ("QualifiedName", 20, Variant::QualifiedName(Box::default())),
        ("LocalizedText", 21, Variant::LocalizedText(Box::default())),
        ("StatusCode", 19, Variant::StatusCode(StatusCode::Good)),
        ("Variant", ids::BASE_DATA_TYPE, Variant::Int32(0)),
    ]
}

fn s(x: &str) -> NodeId {
    NodeId::string(1, x)
}
fn q(x: &str) -> QualifiedName {
    QualifiedName::new(1, x)
}

pub fn demo_folder_id() -> NodeId {
    s("Demo")
}
pub fn demo_events_id() -> NodeId {
    s("Demo.Events")
}
pub fn alarm_id() -> NodeId {
    s("Demo.Events.Alarm")
}
pub fn demo_event_type() -> NodeId {
    s("DemoEventType")
}
pub fn methods_folder_id() -> NodeId {
    s("Demo.Methods")
}
pub fn add_method_id() -> NodeId {
    s("Demo.Methods.Add")
}
pub fn sum_method_id() -> NodeId {
    s("Demo.Methods.Sum")
}
pub fn alarm_acknowledge_id() -> NodeId {
    s("Demo.Events.Alarm.Acknowledge")
}
pub fn alarm_confirm_id() -> NodeId {
    s("Demo.Events.Alarm.Confirm")
}
pub fn alarm_enable_id() -> NodeId {
    s("Demo.Events.Alarm.Enable")
}
pub fn sequence_field() -> QualifiedName {
    q("Sequence")
}
/// The alarm's Variable for a field path.
pub fn alarm_child_id(path: &[QualifiedName]) -> NodeId {
    child_id(&alarm_id(), path)
}

fn reference(rt: u32, forward: bool, target: NodeId) -> Reference {
    Reference {
        reference_type: NodeId::ns0(rt),
        is_forward: forward,
        target: ExpandedNodeId::local(target),
    }
}

fn object(
    id: NodeId,
    name: QualifiedName,
    type_def: u32,
    notifier: u8,
    refs: Vec<Reference>,
) -> Node {
    let mut references = vec![reference(
        ids::HAS_TYPE_DEFINITION,
        true,
        NodeId::ns0(type_def),
    )];
    references.extend(refs);
    Node {
        generation: 0,
        node_id: id,
        node_class: NodeClass::Object,
        display_name: LocalizedText::text(name.name.as_str()),
        browse_name: name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: references.into(),
        attributes: ClassAttributes::Object {
            event_notifier: notifier,
        },
    }
}

fn method_node(id: NodeId, name: QualifiedName, parent: NodeId) -> Node {
    Node {
        generation: 0,
        node_id: id,
        node_class: NodeClass::Method,
        display_name: LocalizedText::text(name.name.as_str()),
        browse_name: name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![reference(ids::HAS_COMPONENT, false, parent)].into(),
        attributes: ClassAttributes::Method {
            executable: true,
            user_executable: true,
        },
    }
}

fn double(v: &Variant) -> f64 {
    if let Variant::Double(x) = v {
        *x
    } else {
        0.0
    }
}

fn add_demo(b: &mut AddressSpaceBuilder, now: Now) -> Result<(), String> {
    let start = now.utc;
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    let mut demo = folder(s("Demo"), q("Demo"), objects);
    demo.attributes = ClassAttributes::Object { event_notifier: 1 };
    b.add(demo)?;
    b.add_reference(
        &s("Demo"),
        events::ids::HAS_NOTIFIER,
        NodeId::ns0(ids::SERVER),
        false,
    )?;
    b.add(folder(s("Demo.Static"), q("Static"), s("Demo")))?;
    b.add(folder(
        s("Demo.Static.Arrays"),
        q("Arrays"),
        s("Demo.Static"),
    ))?;
    b.add(folder(s("Demo.ReadOnly"), q("ReadOnly"), s("Demo")))?;
    b.add(folder(s("Demo.Dynamic"), q("Dynamic"), s("Demo")))?;
    for (name, dt, v) in demo_types() {
        b.add(variable(
            s(&format!("Demo.Static.{name}")),
            q(name),
            NodeId::ns0(dt),
            -1,
            Vec::new(),
            initial(v.clone(), start),
            WRITABLE,
            0.0,
            Some((s("Demo.Static"), ids::HAS_COMPONENT)),
        ))?;
        let elem = if dt == ids::BASE_DATA_TYPE {
            BuiltinType::Variant
        } else {
            BuiltinType::from_id(dt as u8).ok_or("demo type")?
        };
        let array = Variant::array(elem, vec![v; 10]).unwrap_or(Variant::Empty);
        b.add(variable(
            s(&format!("Demo.Static.Arrays.{name}")),
            q(name),
            NodeId::ns0(dt),
            1,
            vec![0],
            initial(array, start),
            WRITABLE,
            0.0,
            Some((s("Demo.Static.Arrays"), ids::HAS_COMPONENT)),
        ))?;
    }
    b.add(variable(
        s("Demo.ReadOnly.Int32"),
        q("Int32"),
        NodeId::ns0(BuiltinType::Int32 as u32),
        -1,
        Vec::new(),
        initial(Variant::Int32(42), start),
        READ_ONLY,
        0.0,
        Some((s("Demo.ReadOnly"), ids::HAS_COMPONENT)),
    ))?;
    let period_ns = COUNTER_PERIOD_MS as u64 * 1_000_000;
    b.add(make_variable(
        s("Demo.Dynamic.Counter"),
        q("Counter"),
        NodeId::ns0(BuiltinType::UInt32 as u32),
        -1,
        Vec::new(),
        ValueSource::Computed(Computed::new(move |t: Now| {
            let n = t.mono_ns.saturating_sub(now.mono_ns) / period_ns;
            let ticks = ((n * period_ns) / 100) as i64;
            DataValue {
                value: Variant::UInt32(n as u32),
                source_timestamp: Some(DateTime(now.utc.0.saturating_add(ticks))),
                ..Default::default()
            }
        })),
        READ_ONLY,
        COUNTER_PERIOD_MS as f64,
        Some((s("Demo.Dynamic"), ids::HAS_COMPONENT)),
    ))?;
    let sine_ns = SINE_PERIOD_MS as u64 * 1_000_000;
    b.add(make_variable(
        s("Demo.Dynamic.Sine"),
        q("Sine"),
        NodeId::ns0(BuiltinType::Double as u32),
        -1,
        Vec::new(),
        ValueSource::Computed(Computed::new(move |t: Now| {
            let phase = (t.mono_ns.saturating_sub(now.mono_ns) % sine_ns) as f64 / sine_ns as f64;
            DataValue {
                value: Variant::Double((phase * std::f64::consts::TAU).sin()),
                source_timestamp: Some(t.utc),
                ..Default::default()
            }
        })),
        READ_ONLY,
        0.0,
        Some((s("Demo.Dynamic"), ids::HAS_COMPONENT)),
    ))?;

    // DemoEventType with its Sequence property.
    b.add(Node {
        generation: 0,
        node_id: demo_event_type(),
        node_class: NodeClass::ObjectType,
        browse_name: q("DemoEventType"),
        display_name: LocalizedText::text("DemoEventType"),
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![reference(
            ids::HAS_SUBTYPE,
            false,
            NodeId::ns0(events::ids::BASE_EVENT_TYPE),
        )]
        .into(),
        attributes: ClassAttributes::ObjectType { is_abstract: false },
    })?;
    let seq = s("DemoEventType.Sequence");
    b.add(variable(
        seq.clone(),
        sequence_field(),
        NodeId::ns0(BuiltinType::UInt32 as u32),
        -1,
        Vec::new(),
        initial(Variant::UInt32(0), start),
        READ_ONLY,
        0.0,
        Some((demo_event_type(), ids::HAS_PROPERTY)),
    ))?;
    b.add_reference(
        &seq,
        events::ids::HAS_MODELLING_RULE,
        NodeId::ns0(events::ids::MODELLING_RULE_MANDATORY),
        true,
    )?;

    // The event source and the alarm.
    b.add(object(
        demo_events_id(),
        q("Events"),
        ids::BASE_OBJECT_TYPE,
        1,
        vec![
            reference(ids::ORGANIZES, false, s("Demo")),
            reference(events::ids::HAS_NOTIFIER, false, s("Demo")),
        ],
    ))?;
    let alarm_type = NodeId::ns0(events::ids::ALARM_CONDITION_TYPE);
    let alarm = AppCondition {
        node_id: alarm_id(),
        name: "Alarm".into(),
        source: demo_events_id(),
        type_def: alarm_type,
        properties: Vec::new(),
        shelving: Some(DEMO_SHELVING),
        on_action: None,
    };
    events::nodes::add_condition_nodes(b, &alarm, start)?;
    b.set_condition(alarm);

    // Two quick methods.
    b.add(folder(methods_folder_id(), q("Methods"), s("Demo")))?;
    b.add(method_node(add_method_id(), q("Add"), methods_folder_id()))?;
    b.add(method_node(sum_method_id(), q("Sum"), methods_folder_id()))?;
    b.set_method(
        add_method_id(),
        AppMethod {
            inputs: vec![
                ArgDef::scalar("a", BuiltinType::Double),
                ArgDef::scalar("b", BuiltinType::Double),
            ],
            outputs: vec![ArgDef::scalar("sum", BuiltinType::Double)],
            needs_write: false,
            handler: MethodHandler::Quick(Arc::new(|c| match c.inputs {
                [a, b] => Ok(vec![Variant::Double(double(a) + double(b))]),
                _ => Err(StatusCode::BadArgumentsMissing),
            })),
        },
    );
    b.set_method(
        sum_method_id(),
        AppMethod {
            inputs: vec![ArgDef::array("values", BuiltinType::Double)],
            outputs: vec![ArgDef::scalar("sum", BuiltinType::Double)],
            needs_write: false,
            handler: MethodHandler::Quick(Arc::new(|c| {
                let sum = c
                    .inputs
                    .first()
                    .and_then(Variant::as_array)
                    .map_or(0.0, |a| a.values.iter().map(double).sum());
                Ok(vec![Variant::Double(sum)])
            })),
        },
    );
    Ok(())
}

/// A DemoEventType event from Demo.Events (Sequence `n`).
pub fn demo_event(s: &ServerShared, n: u32, message: &str, severity: u16, time: DateTime) -> Event {
    let space = &s.address_space;
    Event {
        event_id: s.events.ids.next(),
        event_type: demo_event_type(),
        type_chain: events::type_chain(space, &demo_event_type()),
        source_node: demo_events_id(),
        source_name: UaString::from("Demo.Events"),
        time,
        receive_time: time,
        message: LocalizedText::new("en", message),
        severity,
        condition_id: None,
        fields: vec![EventField {
            path: vec![sequence_field()],
            value: Variant::UInt32(n),
        }],
        notifiers: events::notifiers_of(space, &demo_events_id()).into(),
    }
}

/// The Demo alarm's condition.
pub fn alarm(s: &ServerShared) -> Arc<events::Condition> {
    s.events
        .condition(&alarm_id())
        .cloned()
        .expect("the Demo alarm")
}

/// Sets the Demo alarm active (Severity 700) or inactive (100); the event when it changed.
pub fn set_alarm_active(s: &ServerShared, active: bool, now: DateTime) -> Option<Event> {
    let severity = if active { 700 } else { 100 };
    s.events
        .set_condition_active(&s.address_space, &alarm(s), active, severity, None, now)
}

/// A client's action on the Demo alarm.
pub fn alarm_action(
    s: &ServerShared,
    action: ConditionAction,
    event_id: &ByteString,
    comment: &LocalizedText,
    user: &str,
    now: DateTime,
) -> Result<(), StatusCode> {
    s.events.condition_action(
        &s.address_space,
        &alarm(s),
        action,
        event_id,
        comment,
        user,
        now,
    )
}
