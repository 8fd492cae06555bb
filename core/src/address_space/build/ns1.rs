//! Namespace 1, the application's namespace (URI = the ApplicationUri).
//!
//! * The benchmark contract: `BenchmarkValue<i>` Int32 variables `ns=1;i=1001+i`
//!   (i = 0..count, initial value i), organized directly under Objects; optional
//!   `BenchmarkArray<N>` Int32 arrays `ns=1;i=2001+k`, element j = j % 1000.
//! * The `Demo` folder (string ids), unless disabled:
//!   `Demo/Static` one writable scalar per built-in type (`ns=1;s=Demo.Static.<Type>`),
//!   `Demo/Static/Arrays` one writable one-dimensional array of each (`ns=1;s=Demo.Static.Arrays.<Type>`),
//!   `Demo/ReadOnly` `Demo.ReadOnly.Int32`,
//!   `Demo/Dynamic` `Demo.Dynamic.Counter` (UInt32, +1 every 100 ms, computed from time)
//!   and `Demo.Dynamic.Sine` (Double, period 10 s).
//! * Under `Demo` (EventNotifier SubscribeToEvents): `Demo.Events` (event source), the alarm
//!   `Demo.Events.Alarm`, `DemoEventType` and `Demo.Methods` — see [`crate::events::nodes`].

use super::AddressSpaceBuilder;
use crate::address_space::value::ValueCell;
use crate::address_space::{
    access_level, ids, ClassAttributes, Node, NodeClass, Reference, ValueSource, VariableAttributes,
};
use crate::config::ServerConfig;
use crate::types::{
    BuiltinType, ByteString, DataValue, DateTime, ExpandedNodeId, Guid, LocalizedText, NodeId,
    QualifiedName, StatusCode, UaString, Variant,
};

/// First NodeId of the BenchmarkValue variables.
pub const BENCHMARK_VALUE_FIRST_ID: u32 = 1001;
/// First NodeId of the BenchmarkArray variables.
pub const BENCHMARK_ARRAY_FIRST_ID: u32 = 2001;
/// Counter period, milliseconds.
pub const COUNTER_PERIOD_MS: u32 = 100;
/// Sine period, milliseconds.
pub const SINE_PERIOD_MS: u32 = 10_000;

/// AccessLevel of the writable variables: read, write, and (because Write accepts them)
/// StatusWrite and TimestampWrite.
pub const WRITABLE: u8 = access_level::CURRENT_READ
    | access_level::CURRENT_WRITE
    | access_level::STATUS_WRITE
    | access_level::TIMESTAMP_WRITE;
/// AccessLevel of the read-only variables.
pub const READ_ONLY: u8 = access_level::CURRENT_READ;

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
        // DataType BaseDataType: any value; starts as Int32 0.
        ("Variant", ids::BASE_DATA_TYPE, Variant::Int32(0)),
    ]
}

/// `Demo.Dynamic.Counter`, a computed value like any application's: UInt32 =
/// floor((now − start) / period). Its source timestamp is the instant of the last increment,
/// start + value × period. No timer is needed: the value is a pure function of time, so every
/// shard computes the same one.
fn demo_counter(start_time: DateTime, start_mono_ns: u64) -> ValueSource {
    let period_ns = COUNTER_PERIOD_MS as u64 * 1_000_000;
    ValueSource::Computed(crate::address_space::app::Computed::new(
        move |now: crate::Now| {
            let n = now.mono_ns.saturating_sub(start_mono_ns) / period_ns;
            let ts = DateTime(
                start_time
                    .0
                    .saturating_add(((n * period_ns) / 100).min(i64::MAX as u64) as i64),
            );
            DataValue {
                value: Variant::UInt32(n as u32),
                source_timestamp: Some(ts),
                ..Default::default()
            }
        },
    ))
}

/// `Demo.Dynamic.Sine`, a computed value: Double = sin(2π · (now − start) / period),
/// amplitude 1. Source timestamp = `now`.
fn demo_sine(start_mono_ns: u64) -> ValueSource {
    let period_ns = SINE_PERIOD_MS as u64 * 1_000_000;
    ValueSource::Computed(crate::address_space::app::Computed::new(
        move |now: crate::Now| {
            let phase =
                (now.mono_ns.saturating_sub(start_mono_ns) % period_ns) as f64 / period_ns as f64;
            DataValue {
                value: Variant::Double((phase * std::f64::consts::TAU).sin()),
                source_timestamp: Some(now.utc),
                ..Default::default()
            }
        },
    ))
}

/// Builds a Variable node with a stored value.
#[allow(clippy::too_many_arguments)]
pub fn variable(
    node_id: NodeId,
    browse_name: QualifiedName,
    data_type: NodeId,
    value_rank: i32,
    array_dimensions: Vec<u32>,
    value: DataValue,
    access: u8,
    minimum_sampling_interval: f64,
    parent: Option<(NodeId, u32)>,
) -> Node {
    let fixed = match data_type.as_ns0() {
        Some(n) if value_rank == -1 && n <= 25 => BuiltinType::from_id(n as u8),
        _ => None,
    };
    let cell = ValueCell::new(value, fixed);
    make_variable(
        node_id,
        browse_name,
        data_type,
        value_rank,
        array_dimensions,
        ValueSource::Cell(cell),
        access,
        minimum_sampling_interval,
        parent,
    )
}

/// Builds a Variable node with any value source (BaseDataVariableType; `parent` by the
/// given reference type, inverse).
#[allow(clippy::too_many_arguments)]
pub fn make_variable(
    node_id: NodeId,
    browse_name: QualifiedName,
    data_type: NodeId,
    value_rank: i32,
    array_dimensions: Vec<u32>,
    value: ValueSource,
    access: u8,
    minimum_sampling_interval: f64,
    parent: Option<(NodeId, u32)>,
) -> Node {
    let mut references = vec![Reference {
        reference_type: NodeId::ns0(ids::HAS_TYPE_DEFINITION),
        is_forward: true,
        target: ExpandedNodeId::local(NodeId::ns0(ids::BASE_DATA_VARIABLE_TYPE)),
    }];
    if let Some((p, rt)) = parent {
        references.push(Reference {
            reference_type: NodeId::ns0(rt),
            is_forward: false,
            target: ExpandedNodeId::local(p),
        });
    }
    let display_name = LocalizedText::text(browse_name.name.as_str());
    Node {
        node_id,
        node_class: NodeClass::Variable,
        browse_name,
        display_name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references,
        attributes: ClassAttributes::Variable(VariableAttributes {
            value,
            data_type,
            value_rank,
            array_dimensions,
            access_level: access,
            user_access_level: access,
            access_level_ex: Some(access as u32),
            minimum_sampling_interval,
            historizing: false,
        }),
    }
}

/// Builds a FolderType Object under `parent` (Organizes).
pub fn folder(node_id: NodeId, browse_name: QualifiedName, parent: NodeId) -> Node {
    let display_name = LocalizedText::text(browse_name.name.as_str());
    Node {
        node_id,
        node_class: NodeClass::Object,
        browse_name,
        display_name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![
            Reference {
                reference_type: NodeId::ns0(ids::HAS_TYPE_DEFINITION),
                is_forward: true,
                target: ExpandedNodeId::local(NodeId::ns0(ids::FOLDER_TYPE)),
            },
            Reference {
                reference_type: NodeId::ns0(ids::ORGANIZES),
                is_forward: false,
                target: ExpandedNodeId::local(parent),
            },
        ],
        attributes: ClassAttributes::Object { event_notifier: 0 },
    }
}

fn array_of(t: BuiltinType, v: &Variant, n: usize) -> Variant {
    let values = vec![v.clone(); n];
    // For BaseDataType the array is an array of Variant.
    Variant::array(t, values).unwrap_or(Variant::Empty)
}

/// Adds namespace 1 (index 1) to the builder. `start` is the source timestamp of the
/// initial values.
pub fn add_namespace1(
    b: &mut AddressSpaceBuilder,
    config: &ServerConfig,
    start: DateTime,
) -> Result<(), String> {
    let app = &config.application;
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    let initial = |v: Variant| DataValue {
        value: v,
        source_timestamp: Some(start),
        ..Default::default()
    };

    // The benchmark contract.
    // Counters mode is a separate contract: its ns=1;i=1..N would collide with these.
    let contract_values = if app.counters > 0 {
        0
    } else {
        app.benchmark_value_count
    };
    let contract_arrays: &[u32] = if app.counters > 0 {
        &[]
    } else {
        &app.benchmark_array_sizes
    };
    for i in 0..contract_values {
        b.add(variable(
            NodeId::numeric(1, BENCHMARK_VALUE_FIRST_ID + i),
            QualifiedName::new(1, &format!("BenchmarkValue{i}")),
            NodeId::ns0(BuiltinType::Int32 as u32),
            -1,
            Vec::new(),
            initial(Variant::Int32(i as i32)),
            WRITABLE,
            0.0,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }
    for (k, &n) in contract_arrays.iter().enumerate() {
        let values: Vec<Variant> = (0..n).map(|j| Variant::Int32((j % 1000) as i32)).collect();
        let value = Variant::array(BuiltinType::Int32, values).ok_or("benchmark array")?;
        b.add(variable(
            NodeId::numeric(1, BENCHMARK_ARRAY_FIRST_ID + k as u32),
            QualifiedName::new(1, &format!("BenchmarkArray{n}")),
            NodeId::ns0(BuiltinType::Int32 as u32),
            1,
            vec![n],
            initial(value),
            WRITABLE,
            0.0,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }

    if !app.demo_namespace {
        return Ok(());
    }
    let s = |x: &str| NodeId::string(1, x);
    let q = |x: &str| QualifiedName::new(1, x);
    b.add(folder(s("Demo"), q("Demo"), objects.clone()))?;
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
            initial(v.clone()),
            WRITABLE,
            0.0,
            Some((s("Demo.Static"), ids::HAS_COMPONENT)),
        ))?;
        let elem_type = if dt == ids::BASE_DATA_TYPE {
            BuiltinType::Variant
        } else {
            BuiltinType::from_id(dt as u8).ok_or("demo type")?
        };
        b.add(variable(
            s(&format!("Demo.Static.Arrays.{name}")),
            q(name),
            NodeId::ns0(dt),
            1,
            vec![0],
            initial(array_of(elem_type, &v, 10)),
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
        initial(Variant::Int32(42)),
        READ_ONLY,
        0.0,
        Some((s("Demo.ReadOnly"), ids::HAS_COMPONENT)),
    ))?;
    b.add(make_variable(
        s("Demo.Dynamic.Counter"),
        q("Counter"),
        NodeId::ns0(BuiltinType::UInt32 as u32),
        -1,
        Vec::new(),
        demo_counter(b.server_info().start_time, b.server_info().start_mono_ns),
        READ_ONLY,
        COUNTER_PERIOD_MS as f64,
        Some((s("Demo.Dynamic"), ids::HAS_COMPONENT)),
    ))?;
    b.add(make_variable(
        s("Demo.Dynamic.Sine"),
        q("Sine"),
        NodeId::ns0(BuiltinType::Double as u32),
        -1,
        Vec::new(),
        demo_sine(b.server_info().start_mono_ns),
        READ_ONLY,
        0.0,
        Some((s("Demo.Dynamic"), ids::HAS_COMPONENT)),
    ))?;
    // Events, the Demo alarm and the Demo methods (crate::events::nodes); also makes Demo
    // an event notifier.
    crate::events::nodes::add_event_nodes(b, start)?;
    Ok(())
}
