//! The namespace-1 nodes for events, the Demo alarm and the Demo methods (built by
//! [`add_event_nodes`] from the ns1 builder, under the `Demo` folder):
//!
//! | NodeId (ns=1) | what |
//! |---|---|
//! | `s=Demo` | the Demo folder: EventNotifier = SubscribeToEvents; `Server` HasNotifier it |
//! | `s=Demo.Events` | BaseObjectType, EventNotifier = SubscribeToEvents, source of the Demo events and the alarm; `Demo` HasNotifier it |
//! | `s=Demo.Events.Alarm` | AlarmConditionType instance (`Demo.Events` HasComponent and HasCondition it) |
//! | `s=Demo.Events.Alarm.<Field>` | its Variables: EventId … Severity, Retain, EnabledState (+`.Id`), AckedState (+`.Id`), … |
//! | `s=Demo.Events.Alarm.Acknowledge`, `.Confirm`, `.AddComment`, `.Enable`, `.Disable` | its methods (calling the types' i=9111, i=9113, i=9029, i=9027, i=9028 on the alarm works too) |
//! | `s=DemoEventType` | ObjectType, subtype of BaseEventType, with the property `1:Sequence` (UInt32) |
//! | `s=Demo.Methods` | folder with `Add(a, b: Double) → Double`, `Sum(values: Double[]) → Double`, `GenerateEvent(Message: String, Severity: UInt16)` |

use super::{ids, Event};
use crate::address_space::app::{AppMethod, ArgDef, MethodHandler};
use crate::address_space::build::ns1::{folder, variable, READ_ONLY};
use crate::address_space::build::AddressSpaceBuilder;
use crate::address_space::ids as ns0;
use crate::address_space::{ClassAttributes, Node, NodeClass, Reference};
use crate::generated::types::Argument;
use crate::types::{
    BuiltinType, DataValue, DateTime, ExpandedNodeId, ExtensionObject, LocalizedText, NodeId,
    QualifiedName, UaString, Variant,
};

/// SourceName of the Demo events and of the alarm.
pub const DEMO_EVENTS_NAME: &str = "Demo.Events";
/// ConditionName of the alarm.
pub const ALARM_NAME: &str = "Alarm";
const ALARM: &str = "Demo.Events.Alarm";

pub fn demo_folder_id() -> NodeId {
    NodeId::string(1, "Demo")
}
pub fn demo_events_id() -> NodeId {
    NodeId::string(1, "Demo.Events")
}
pub fn alarm_id() -> NodeId {
    NodeId::string(1, ALARM)
}
pub fn demo_event_type() -> NodeId {
    NodeId::string(1, "DemoEventType")
}
pub fn methods_folder_id() -> NodeId {
    NodeId::string(1, "Demo.Methods")
}
pub fn add_method_id() -> NodeId {
    NodeId::string(1, "Demo.Methods.Add")
}
pub fn sum_method_id() -> NodeId {
    NodeId::string(1, "Demo.Methods.Sum")
}
pub fn generate_event_method_id() -> NodeId {
    NodeId::string(1, "Demo.Methods.GenerateEvent")
}
pub fn alarm_acknowledge_id() -> NodeId {
    NodeId::string(1, "Demo.Events.Alarm.Acknowledge")
}
pub fn alarm_confirm_id() -> NodeId {
    NodeId::string(1, "Demo.Events.Alarm.Confirm")
}
pub fn alarm_add_comment_id() -> NodeId {
    NodeId::string(1, "Demo.Events.Alarm.AddComment")
}
pub fn alarm_enable_id() -> NodeId {
    NodeId::string(1, "Demo.Events.Alarm.Enable")
}
pub fn alarm_disable_id() -> NodeId {
    NodeId::string(1, "Demo.Events.Alarm.Disable")
}

/// The browse name of the Demo event's own field.
pub fn sequence_field() -> QualifiedName {
    QualifiedName::new(1, "Sequence")
}

/// The NodeId of the alarm Variable for a field path (`AckedState/Id` →
/// `ns=1;s=Demo.Events.Alarm.AckedState.Id`).
pub fn alarm_child_id(path: &[QualifiedName]) -> NodeId {
    super::condition::child_id(&alarm_id(), path)
}

/// Every field of an alarm event with its path: the BaseEventType ones, then the condition
/// ones.
pub fn alarm_values(ev: &Event) -> Vec<(Vec<QualifiedName>, Variant)> {
    let base = [
        super::base_fields::EVENT_ID,
        super::base_fields::EVENT_TYPE,
        super::base_fields::SOURCE_NODE,
        super::base_fields::SOURCE_NAME,
        super::base_fields::TIME,
        super::base_fields::RECEIVE_TIME,
        super::base_fields::MESSAGE,
        super::base_fields::SEVERITY,
    ];
    let mut out: Vec<(Vec<QualifiedName>, Variant)> = base
        .iter()
        .map(|n| {
            let p = vec![QualifiedName::new(0, n)];
            let v = ev.field(&NodeId::NULL, &p, crate::generated::attribute_ids::Value);
            (p, v)
        })
        .collect();
    out.extend(ev.fields.iter().map(|f| (f.path.clone(), f.value.clone())));
    out
}

/// One method argument: its name, type and rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArgSpec {
    pub name: &'static str,
    /// The DataType (namespace 0).
    pub data_type: u32,
    /// The built-in type a value must have.
    pub builtin: BuiltinType,
    /// -1 scalar, 1 one-dimensional array.
    pub value_rank: i32,
    pub description: &'static str,
}

const fn arg(
    name: &'static str,
    data_type: u32,
    builtin: BuiltinType,
    value_rank: i32,
    description: &'static str,
) -> ArgSpec {
    ArgSpec {
        name,
        data_type,
        builtin,
        value_rank,
        description,
    }
}

/// IntegerId (UInt32).
const INTEGER_ID: u32 = 288;

pub const ADD_IN: &[ArgSpec] = &[
    arg("a", 11, BuiltinType::Double, -1, "first addend"),
    arg("b", 11, BuiltinType::Double, -1, "second addend"),
];
pub const ADD_OUT: &[ArgSpec] = &[arg("sum", 11, BuiltinType::Double, -1, "a + b")];
pub const SUM_IN: &[ArgSpec] = &[arg(
    "values",
    11,
    BuiltinType::Double,
    1,
    "the numbers to add",
)];
pub const SUM_OUT: &[ArgSpec] = &[arg("sum", 11, BuiltinType::Double, -1, "their sum")];
pub const GENERATE_EVENT_IN: &[ArgSpec] = &[
    arg(
        "Message",
        12,
        BuiltinType::String,
        -1,
        "Message of the event",
    ),
    arg(
        "Severity",
        5,
        BuiltinType::UInt16,
        -1,
        "Severity of the event, 1..=1000",
    ),
];
pub const ACK_IN: &[ArgSpec] = &[
    arg(
        "EventId",
        15,
        BuiltinType::ByteString,
        -1,
        "EventId of the condition's latest event",
    ),
    arg("Comment", 21, BuiltinType::LocalizedText, -1, "comment"),
];
/// ConditionRefresh's argument (IntegerId).
pub const SUBSCRIPTION_ID_IN: &[ArgSpec] = &[arg(
    "SubscriptionId",
    INTEGER_ID,
    BuiltinType::UInt32,
    -1,
    "",
)];
/// GetMonitoredItems' and ResendData's argument (UInt32 in the NodeSet).
pub const SERVER_SUBSCRIPTION_ID_IN: &[ArgSpec] =
    &[arg("SubscriptionId", 7, BuiltinType::UInt32, -1, "")];
pub const REFRESH2_IN: &[ArgSpec] = &[
    arg("SubscriptionId", INTEGER_ID, BuiltinType::UInt32, -1, ""),
    arg("MonitoredItemId", INTEGER_ID, BuiltinType::UInt32, -1, ""),
];
pub const GET_MONITORED_ITEMS_OUT: &[ArgSpec] = &[
    arg("ServerHandles", 7, BuiltinType::UInt32, 1, ""),
    arg("ClientHandles", 7, BuiltinType::UInt32, 1, ""),
];

/// The owned declaration of static argument specs.
fn arg_defs(args: &[ArgSpec]) -> Vec<ArgDef> {
    args.iter()
        .map(|a| ArgDef {
            name: a.name.to_string(),
            data_type: NodeId::ns0(a.data_type),
            builtin: a.builtin,
            value_rank: a.value_rank,
            description: a.description.to_string(),
        })
        .collect()
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
    event_notifier: u8,
    refs: Vec<Reference>,
) -> Node {
    let mut references = vec![reference(
        ns0::HAS_TYPE_DEFINITION,
        true,
        NodeId::ns0(type_def),
    )];
    references.extend(refs);
    Node {
        node_id: id,
        node_class: NodeClass::Object,
        display_name: LocalizedText::text(name.name.as_str()),
        browse_name: name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references,
        attributes: ClassAttributes::Object { event_notifier },
    }
}

/// A read-only Variable with a type definition, under `parent` by `ref_type`.
#[allow(clippy::too_many_arguments)]
fn child_variable(
    id: NodeId,
    name: QualifiedName,
    value: Variant,
    data_type: NodeId,
    value_rank: i32,
    type_def: u32,
    parent: NodeId,
    ref_type: u32,
    start: DateTime,
) -> Node {
    let dims = if value_rank == 1 { vec![0] } else { Vec::new() };
    let dv = DataValue {
        value,
        source_timestamp: Some(start),
        ..Default::default()
    };
    let mut n = variable(
        id,
        name,
        data_type,
        value_rank,
        dims,
        dv,
        READ_ONLY,
        0.0,
        Some((parent, ref_type)),
    );
    if let Some(r) = n
        .references
        .iter_mut()
        .find(|r| r.reference_type.as_ns0() == Some(ns0::HAS_TYPE_DEFINITION))
    {
        r.target = ExpandedNodeId::local(NodeId::ns0(type_def));
    }
    n
}

fn arguments_value(args: &[ArgSpec]) -> Variant {
    let values = args
        .iter()
        .map(|a| {
            Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(&Argument {
                name: UaString::from(a.name),
                data_type: NodeId::ns0(a.data_type),
                value_rank: a.value_rank,
                array_dimensions: if a.value_rank == 1 {
                    vec![0]
                } else {
                    Vec::new()
                },
                description: LocalizedText::new("en", a.description),
            })))
        })
        .collect();
    Variant::array(BuiltinType::ExtensionObject, values).unwrap_or(Variant::Empty)
}

/// Adds a Method node under `parent` (HasComponent) with its argument properties.
fn method(
    b: &mut AddressSpaceBuilder,
    id: NodeId,
    name: QualifiedName,
    parent: NodeId,
    inputs: &[ArgSpec],
    outputs: &[ArgSpec],
    start: DateTime,
) -> Result<(), String> {
    let key = match &id.identifier {
        crate::types::Identifier::String(s) => s.clone(),
        _ => return Err("method ids here are strings".into()),
    };
    b.add(Node {
        node_id: id.clone(),
        node_class: NodeClass::Method,
        display_name: LocalizedText::text(name.name.as_str()),
        browse_name: name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![reference(ns0::HAS_COMPONENT, false, parent)],
        attributes: ClassAttributes::Method {
            executable: true,
            user_executable: true,
        },
    })?;
    for (args, prop) in [(inputs, "InputArguments"), (outputs, "OutputArguments")] {
        if args.is_empty() {
            continue;
        }
        b.add(child_variable(
            NodeId::string(1, format!("{key}.{prop}")),
            QualifiedName::new(0, prop),
            arguments_value(args),
            NodeId::ns0(ids::ARGUMENT),
            1,
            ns0::PROPERTY_TYPE,
            id.clone(),
            ns0::HAS_PROPERTY,
            start,
        ))?;
    }
    Ok(())
}

/// Adds the event, alarm and method nodes (the `Demo` folder must exist).
pub fn add_event_nodes(b: &mut AddressSpaceBuilder, start: DateTime) -> Result<(), String> {
    let demo = demo_folder_id();
    // Demo is an event notifier below the Server object.
    match b.node_mut(&demo) {
        Some(Node {
            attributes: ClassAttributes::Object { event_notifier },
            ..
        }) => *event_notifier = 1,
        _ => return Err("the Demo folder is missing".into()),
    }
    b.add_reference(&demo, ids::HAS_NOTIFIER, NodeId::ns0(ids::SERVER), false)?;

    // DemoEventType with its Sequence property.
    let det = demo_event_type();
    b.add(Node {
        node_id: det.clone(),
        node_class: NodeClass::ObjectType,
        browse_name: QualifiedName::new(1, "DemoEventType"),
        display_name: LocalizedText::text("DemoEventType"),
        description: LocalizedText::text(
            "The events of the Demo event generator and of Demo.Methods.GenerateEvent",
        ),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![reference(
            ns0::HAS_SUBTYPE,
            false,
            NodeId::ns0(ids::BASE_EVENT_TYPE),
        )],
        attributes: ClassAttributes::ObjectType { is_abstract: false },
    })?;
    let seq = NodeId::string(1, "DemoEventType.Sequence");
    b.add(child_variable(
        seq.clone(),
        sequence_field(),
        Variant::UInt32(0),
        NodeId::ns0(BuiltinType::UInt32 as u32),
        -1,
        ns0::PROPERTY_TYPE,
        det,
        ns0::HAS_PROPERTY,
        start,
    ))?;
    b.add_reference(
        &seq,
        ids::HAS_MODELLING_RULE,
        NodeId::ns0(ids::MODELLING_RULE_MANDATORY),
        true,
    )?;

    // The event source.
    let events = demo_events_id();
    b.add(object(
        events.clone(),
        QualifiedName::new(1, "Events"),
        ns0::BASE_OBJECT_TYPE,
        1,
        vec![
            reference(ns0::ORGANIZES, false, demo.clone()),
            reference(ids::HAS_NOTIFIER, false, demo.clone()),
        ],
    ))?;

    // The alarm and its Variables.
    let alarm = alarm_id();
    add_condition_nodes(
        b,
        &alarm,
        &QualifiedName::new(1, ALARM_NAME),
        &events,
        start,
    )?;
    method(
        b,
        alarm_acknowledge_id(),
        QualifiedName::new(0, "Acknowledge"),
        alarm.clone(),
        ACK_IN,
        &[],
        start,
    )?;
    method(
        b,
        alarm_confirm_id(),
        QualifiedName::new(0, "Confirm"),
        alarm.clone(),
        ACK_IN,
        &[],
        start,
    )?;
    method(
        b,
        alarm_add_comment_id(),
        QualifiedName::new(0, "AddComment"),
        alarm.clone(),
        ACK_IN,
        &[],
        start,
    )?;
    method(
        b,
        alarm_enable_id(),
        QualifiedName::new(0, "Enable"),
        alarm.clone(),
        &[],
        &[],
        start,
    )?;
    method(
        b,
        alarm_disable_id(),
        QualifiedName::new(0, "Disable"),
        alarm,
        &[],
        &[],
        start,
    )?;

    // The Demo methods.
    let methods = methods_folder_id();
    b.add(folder(
        methods.clone(),
        QualifiedName::new(1, "Methods"),
        demo,
    ))?;
    method(
        b,
        add_method_id(),
        QualifiedName::new(1, "Add"),
        methods.clone(),
        ADD_IN,
        ADD_OUT,
        start,
    )?;
    method(
        b,
        sum_method_id(),
        QualifiedName::new(1, "Sum"),
        methods.clone(),
        SUM_IN,
        SUM_OUT,
        start,
    )?;
    // Add and Sum are ordinary application methods (quick, on the shard), as a library
    // user's would be.
    let double = |v: &Variant| if let Variant::Double(x) = v { *x } else { 0.0 };
    b.set_method(
        add_method_id(),
        AppMethod {
            inputs: arg_defs(ADD_IN),
            outputs: arg_defs(ADD_OUT),
            needs_write: false,
            handler: MethodHandler::Quick(std::sync::Arc::new(move |c| match c.inputs {
                [a, b] => Ok(vec![Variant::Double(double(a) + double(b))]),
                _ => Err(crate::types::StatusCode::BadArgumentsMissing),
            })),
        },
    );
    b.set_method(
        sum_method_id(),
        AppMethod {
            inputs: arg_defs(SUM_IN),
            outputs: arg_defs(SUM_OUT),
            needs_write: false,
            handler: MethodHandler::Quick(std::sync::Arc::new(move |c| {
                let sum = c
                    .inputs
                    .first()
                    .and_then(Variant::as_array)
                    .map_or(0.0, |a| a.values.iter().map(double).sum());
                Ok(vec![Variant::Double(sum)])
            })),
        },
    );
    method(
        b,
        generate_event_method_id(),
        QualifiedName::new(1, "GenerateEvent"),
        methods,
        GENERATE_EVENT_IN,
        &[],
        start,
    )?;
    Ok(())
}

/// Adds an AlarmConditionType instance `alarm` named `name`, a component of `source` (and
/// HasCondition from it), with a Variable for every field of its event (EventId … Severity,
/// Retain, EnabledState and `.Id`, AckedState and `.Id`, …), ids as
/// [`super::condition::child_id`] makes them. Its methods are the type's (Acknowledge
/// i=9111, Confirm i=9113, AddComment i=9029, Enable i=9027, Disable i=9028), called with the
/// condition as the object.
pub fn add_condition_nodes(
    b: &mut AddressSpaceBuilder,
    alarm: &NodeId,
    name: &QualifiedName,
    source: &NodeId,
    start: DateTime,
) -> Result<(), String> {
    b.add(object(
        alarm.clone(),
        name.clone(),
        ids::ALARM_CONDITION_TYPE,
        0,
        vec![
            reference(ns0::HAS_COMPONENT, false, source.clone()),
            reference(ids::HAS_CONDITION, false, source.clone()),
        ],
    ))?;
    let template_ids = super::EventIdSource::new(start);
    let spec = super::condition::ConditionSpec {
        node_id: alarm.clone(),
        name: name.name.as_str().to_string(),
        label: name.name.as_str().to_string(),
        source: source.clone(),
        source_name: UaString::from(source.to_string().as_str()),
        notifiers: std::sync::Arc::from(Vec::new()),
        on_action: None,
    };
    let state = super::condition::ConditionState::initial(&template_ids, &spec.label, start);
    let template =
        super::condition::condition_event(&spec, &state, &std::sync::Arc::from(Vec::new()));
    for (path, value) in alarm_values(&template) {
        let (parent, ref_type, type_def) = match path.as_slice() {
            [one] => {
                let t = match one.name.as_str() {
                    "EnabledState" | "AckedState" | "ConfirmedState" | "ActiveState" => {
                        (ns0::HAS_COMPONENT, ids::TWO_STATE_VARIABLE_TYPE)
                    }
                    "Quality" | "LastSeverity" | "Comment" => {
                        (ns0::HAS_COMPONENT, ids::CONDITION_VARIABLE_TYPE)
                    }
                    _ => (ns0::HAS_PROPERTY, ns0::PROPERTY_TYPE),
                };
                (alarm.clone(), t.0, t.1)
            }
            [first, ..] => (
                super::condition::child_id(alarm, std::slice::from_ref(first)),
                ns0::HAS_PROPERTY,
                ns0::PROPERTY_TYPE,
            ),
            [] => continue,
        };
        let data_type = match path.last().map(|q| q.name.as_str()) {
            Some("Time" | "ReceiveTime" | "SourceTimestamp") => ids::UTC_TIME,
            _ => value
                .scalar_type()
                .map_or(ns0::BASE_DATA_TYPE, |t| t as u32),
        };
        let name = path.last().cloned().unwrap_or_default();
        b.add(child_variable(
            super::condition::child_id(alarm, &path),
            name,
            value,
            NodeId::ns0(data_type),
            -1,
            type_def,
            parent,
            ref_type,
            start,
        ))?;
    }
    Ok(())
}
