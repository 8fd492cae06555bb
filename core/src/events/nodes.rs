//! The nodes of conditions ([`add_condition_nodes`]: an AlarmConditionType instance with a
//! Variable per field of its event and its own methods) and the argument declarations of the
//! methods the server serves itself (the condition methods, ConditionRefresh,
//! GetMonitoredItems, ResendData).

use super::{ids, Event};
use crate::address_space::app::ConditionAction;
use crate::address_space::build::make::{variable, READ_ONLY};
use crate::address_space::build::AddressSpaceBuilder;
use crate::address_space::ids as ns0;
use crate::address_space::{ClassAttributes, Node, NodeClass, Reference};
use crate::generated::types::Argument;
use crate::types::{
    BuiltinType, DataValue, DateTime, ExpandedNodeId, ExtensionObject, LocalizedText, NodeId,
    QualifiedName, UaString, Variant,
};

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
/// TimedShelve's argument (Part 9 §5.8.17.4): ShelvingTime, a Duration in milliseconds.
pub const SHELVE_IN: &[ArgSpec] = &[arg(
    "ShelvingTime",
    ids::DURATION,
    BuiltinType::Double,
    -1,
    "how long the alarm stays shelved (ms)",
)];
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
    type_def: NodeId,
    event_notifier: u8,
    refs: Vec<Reference>,
) -> Node {
    let mut references = vec![reference(ns0::HAS_TYPE_DEFINITION, true, type_def)];
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
        attributes: ClassAttributes::Object { event_notifier },
    }
}

/// A read-only Variable with a type definition, under `parent` by `ref_type`.
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
    n.references.update(|refs| {
        if let Some(r) = refs
            .iter_mut()
            .find(|r| r.reference_type.as_ns0() == Some(ns0::HAS_TYPE_DEFINITION))
        {
            r.target = ExpandedNodeId::local(NodeId::ns0(type_def));
        }
    });
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
        _ => return Err("condition method ids are strings".into()),
    };
    b.add(Node {
        generation: 0,
        node_id: id.clone(),
        node_class: NodeClass::Method,
        display_name: LocalizedText::text(name.name.as_str()),
        browse_name: name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![reference(ns0::HAS_COMPONENT, false, parent)].into(),
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
            NodeId::string(id.namespace, format!("{key}.{prop}")),
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

/// Adds the nodes of the condition `c`: an instance `c.node_id` of `c.type_def`
/// (AlarmConditionType or a subtype; the caller checks which) with the BrowseName `c.name` in
/// its NodeId's namespace, a component of `c.source` (and HasCondition from it), with a
/// Variable for every field of its event (EventId … Severity, Retain, EnabledState and
/// `.Id`, AckedState and `.Id`, …, then the subtype's `properties`), ids as
/// [`super::condition::child_id`] makes them, and its own method nodes
/// `<alarm>.Acknowledge`, `.Confirm`, `.AddComment`, `.Enable`, `.Disable`, which serve the
/// same as the type's (i=9111, i=9113, i=9029, i=9027, i=9028) called on the condition. With
/// `c.shelving`, also its ShelvingState object `<alarm>.ShelvingState` (CurrentState, `.Id`,
/// UnshelveTime, the methods TimedShelve, OneShotShelve, Unshelve) and MaxTimeShelved.
pub fn add_condition_nodes(
    b: &mut AddressSpaceBuilder,
    c: &crate::address_space::app::AppCondition,
    start: DateTime,
) -> Result<(), String> {
    let alarm = &c.node_id;
    let name = &QualifiedName::new(alarm.namespace, &c.name);
    let (source, type_def, properties, shelving) =
        (&c.source, &c.type_def, &c.properties, c.shelving);
    b.add(object(
        alarm.clone(),
        name.clone(),
        type_def.clone(),
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
        event_type: type_def.clone(),
        type_chain: std::sync::Arc::from(Vec::new()),
        properties: super::condition::property_fields(properties),
        shelving,
        on_action: None,
    };
    let shelving_state = [QualifiedName::new(0, super::condition::SHELVING_STATE)];
    if shelving.is_some() {
        // Its ShelvingState, a ShelvedStateMachineType (Part 9 §5.8.17), before the
        // Variables and methods below it.
        b.add(object(
            super::condition::child_id(alarm, &shelving_state),
            shelving_state[0].clone(),
            NodeId::ns0(ids::SHELVED_STATE_MACHINE_TYPE),
            0,
            vec![reference(ns0::HAS_COMPONENT, false, alarm.clone())],
        ))?;
    }
    let state = super::condition::ConditionState::initial(&template_ids, &spec.label, start);
    let template = super::condition::condition_event(&spec, &state);
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
            [parent @ .., last] => {
                let t = match (parent, last.name.as_str()) {
                    // ShelvingState.CurrentState, a FiniteStateVariableType.
                    ([p], "CurrentState")
                        if p.name.as_str() == super::condition::SHELVING_STATE =>
                    {
                        (ns0::HAS_COMPONENT, ids::FINITE_STATE_VARIABLE_TYPE)
                    }
                    _ => (ns0::HAS_PROPERTY, ns0::PROPERTY_TYPE),
                };
                (super::condition::child_id(alarm, parent), t.0, t.1)
            }
            [] => continue,
        };
        let data_type = match path.last().map(|q| q.name.as_str()) {
            Some("Time" | "ReceiveTime" | "SourceTimestamp") => ids::UTC_TIME,
            Some("UnshelveTime" | "MaxTimeShelved") => ids::DURATION,
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
    // Its own methods, the mandatory components of its type (the shelving ones of its
    // ShelvingState).
    for (method_name, _, action) in super::condition::METHODS {
        if action.is_shelving() && shelving.is_none() {
            continue;
        }
        let inputs = match action {
            ConditionAction::Enable
            | ConditionAction::Disable
            | ConditionAction::OneShotShelve
            | ConditionAction::Unshelve => &[][..],
            ConditionAction::TimedShelve => SHELVE_IN,
            _ => ACK_IN,
        };
        let path = super::condition::method_path(method_name, action);
        let parent = path.split_last().map_or(&[][..], |(_, p)| p);
        method(
            b,
            super::condition::child_id(alarm, &path),
            QualifiedName::new(0, method_name),
            super::condition::child_id(alarm, parent),
            inputs,
            &[],
            start,
        )?;
    }
    Ok(())
}
