//! The nodes of a mirror: what the gateway adds to the address space for a mirrored
//! server's nodes and types, its folder and its status Properties.

use uaring_core::address_space::value::ValueCell;
use uaring_core::address_space::{
    access_level, ClassAttributes, Node, Reference, ValueSource, VariableAttributes,
    VariableTypeAttributes,
};
use uaring_core::generated::types::NodeClass;
use uaring_core::types::{
    DataValue, ExpandedNodeId, LocalizedText, NodeId, QualifiedName, Variant,
};

const HAS_TYPE_DEFINITION: u32 = 40;
const HAS_SUBTYPE: u32 = 45;
const HAS_PROPERTY: u32 = 46;
const ORGANIZES: u32 = 35;
const FOLDER_TYPE: u32 = 61;
const PROPERTY_TYPE: u32 = 68;
const BASE_OBJECT_TYPE: u32 = 58;
const BASE_DATA_VARIABLE_TYPE: u32 = 63;
const BASE_DATA_TYPE: u32 = 24;
use uaring_core::address_space::event_notifier;

fn reference(reference_type: u32, is_forward: bool, target: NodeId) -> Reference {
    Reference {
        reference_type: NodeId::ns0(reference_type),
        is_forward,
        target: ExpandedNodeId::local(target),
    }
}

fn node(
    node_id: NodeId,
    node_class: NodeClass,
    browse_name: QualifiedName,
    display_name: LocalizedText,
    references: Vec<Reference>,
    attributes: ClassAttributes,
) -> Node {
    Node {
        node_id,
        node_class,
        browse_name,
        display_name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: references.into(),
        generation: 0,
        attributes,
    }
}

/// A server's folder `Objects/<name>`, an event notifier (the server's events are
/// reported on it).
pub fn server_folder(id: NodeId, name: &str, ns: u16) -> Node {
    node(
        id,
        NodeClass::Object,
        QualifiedName::new(ns, name),
        LocalizedText::text(name),
        vec![
            reference(HAS_TYPE_DEFINITION, true, NodeId::ns0(FOLDER_TYPE)),
            reference(ORGANIZES, false, NodeId::ns0(85)),
        ],
        ClassAttributes::Object { event_notifier: 1 },
    )
}

/// A read-only Property of the server's folder (its status), with a stored value.
pub fn status_property(id: NodeId, name: &str, ns: u16, parent: NodeId, value: Variant) -> Node {
    let data_type = value.scalar_type().map_or(BASE_DATA_TYPE, |t| t as u32);
    node(
        id,
        NodeClass::Variable,
        QualifiedName::new(ns, name),
        LocalizedText::text(name),
        vec![
            reference(HAS_TYPE_DEFINITION, true, NodeId::ns0(PROPERTY_TYPE)),
            reference(HAS_PROPERTY, false, parent),
        ],
        ClassAttributes::Variable(VariableAttributes {
            value: ValueSource::Cell(ValueCell::new(DataValue::new(value), None)),
            data_type: NodeId::ns0(data_type),
            value_rank: -1,
            array_dimensions: Vec::new(),
            access_level: access_level::CURRENT_READ,
            user_access_level: access_level::CURRENT_READ,
            access_level_ex: Some(access_level::CURRENT_READ as u32),
            minimum_sampling_interval: 0.0,
            historizing: false,
        }),
    )
}

/// What a mirrored instance becomes here.
pub struct Instance<'a> {
    pub local: NodeId,
    pub class: NodeClass,
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    /// Its TypeDefinition here.
    pub type_def: Option<NodeId>,
    /// Forward references to other nodes here (reference type, target).
    pub forward: Vec<(NodeId, NodeId)>,
    pub var: Option<&'a super::crawl::VarAttrs>,
    /// The Variable's DataType here.
    pub data_type: NodeId,
    pub event_notifier: u8,
    pub executable: bool,
    /// Writes of the Variable are forwarded.
    pub writable: bool,
    /// HistoryRead of the Variable, or of the Object's events, is forwarded (where the
    /// server keeps that history).
    pub history: bool,
    /// HistoryUpdate of the Variable's values, or of the Object's events, is forwarded too
    /// (where the server lets the gateway's user change that history).
    pub history_updates: bool,
}

/// The node of a mirrored Object, Variable or Method. A Variable's value is stored here
/// (a cell of any type: the server decides what it holds); its AccessLevel is what the
/// gateway's user may do there (UserAccessLevel): current read, current write when Writes
/// are forwarded, history read when HistoryRead is, history write when HistoryUpdate is too.
/// An Object's EventNotifier keeps SubscribeToEvents, HistoryRead when HistoryRead is
/// forwarded and the server keeps its events, and HistoryWrite when HistoryUpdate is too and
/// the server's EventNotifier has it.
pub fn instance(i: Instance<'_>) -> Node {
    let mut refs = Vec::with_capacity(i.forward.len() + 1);
    let default_type = if i.class == NodeClass::Variable {
        BASE_DATA_VARIABLE_TYPE
    } else {
        BASE_OBJECT_TYPE
    };
    if i.class != NodeClass::Method {
        refs.push(Reference {
            reference_type: NodeId::ns0(HAS_TYPE_DEFINITION),
            is_forward: true,
            target: ExpandedNodeId::local(i.type_def.unwrap_or(NodeId::ns0(default_type))),
        });
    }
    for (rt, target) in i.forward {
        refs.push(Reference {
            reference_type: rt,
            is_forward: true,
            target: ExpandedNodeId::local(target),
        });
    }
    let attributes = match i.class {
        NodeClass::Variable => {
            let v = i.var.cloned().unwrap_or_default();
            let mut access = v.user_access_level & v.access_level & access_level::CURRENT_READ;
            if i.writable && v.user_access_level & access_level::CURRENT_WRITE != 0 {
                access |= access_level::CURRENT_WRITE;
            }
            if i.history && v.user_access_level & v.access_level & access_level::HISTORY_READ != 0 {
                access |= access_level::HISTORY_READ;
                if i.history_updates
                    && v.user_access_level & v.access_level & access_level::HISTORY_WRITE != 0
                {
                    access |= access_level::HISTORY_WRITE;
                }
            }
            let value =
                if v.value.status.is_some_and(|s| s.is_bad()) && v.value.value == Variant::Empty {
                    DataValue::status(uaring_core::StatusCode::BadWaitingForInitialData)
                } else {
                    v.value
                };
            ClassAttributes::Variable(VariableAttributes {
                value: ValueSource::Cell(ValueCell::new(value, None)),
                data_type: i.data_type,
                value_rank: v.value_rank,
                array_dimensions: v.array_dimensions,
                access_level: access,
                user_access_level: access,
                access_level_ex: Some(access as u32),
                minimum_sampling_interval: v.minimum_sampling_interval,
                historizing: v.historizing && access & access_level::HISTORY_READ != 0,
            })
        }
        NodeClass::Method => ClassAttributes::Method {
            executable: i.executable,
            user_executable: i.executable,
        },
        _ => ClassAttributes::Object {
            event_notifier: i.event_notifier
                & (event_notifier::SUBSCRIBE_TO_EVENTS
                    | if i.history {
                        event_notifier::HISTORY_READ
                    } else {
                        0
                    }
                    | if i.history && i.history_updates {
                        event_notifier::HISTORY_WRITE
                    } else {
                        0
                    }),
        },
    };
    node(
        i.local,
        i.class,
        i.browse_name,
        i.display_name,
        refs,
        attributes,
    )
}

/// The node of a mirrored type, a subtype of `supertype` here.
pub fn type_node(t: &super::crawl::FoundType, local: NodeId, supertype: NodeId) -> Option<Node> {
    let attributes = match t.class {
        NodeClass::ObjectType => ClassAttributes::ObjectType {
            is_abstract: t.is_abstract,
        },
        NodeClass::VariableType => ClassAttributes::VariableType(VariableTypeAttributes {
            value: Variant::Empty,
            data_type: NodeId::ns0(BASE_DATA_TYPE),
            value_rank: -2,
            array_dimensions: Vec::new(),
            is_abstract: t.is_abstract,
        }),
        NodeClass::DataType => ClassAttributes::DataType {
            is_abstract: t.is_abstract,
            data_type_definition: t.definition.clone(),
        },
        NodeClass::ReferenceType => ClassAttributes::ReferenceType {
            is_abstract: t.is_abstract,
            symmetric: t.symmetric,
            inverse_name: t.inverse_name.clone(),
        },
        _ => return None,
    };
    Some(node(
        local,
        t.class,
        t.browse_name.clone(),
        t.display_name.clone(),
        vec![reference(HAS_SUBTYPE, false, supertype)],
        attributes,
    ))
}

/// The namespace-0 type a type of `class` falls back to when its own supertype chain ends
/// in a namespace-0 type this server does not know.
pub fn base_type(class: NodeClass) -> NodeId {
    NodeId::ns0(match class {
        NodeClass::ObjectType => BASE_OBJECT_TYPE,
        NodeClass::VariableType => BASE_DATA_VARIABLE_TYPE,
        NodeClass::ReferenceType => 31,
        _ => BASE_DATA_TYPE,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::crawl::VarAttrs;

    fn mirrored(class: NodeClass, var: Option<&VarAttrs>, history: bool, updates: bool) -> Node {
        instance(Instance {
            local: NodeId::string(10, "X"),
            class,
            browse_name: QualifiedName::new(10, "X"),
            display_name: LocalizedText::new("", "X"),
            type_def: None,
            forward: Vec::new(),
            var,
            data_type: NodeId::ns0(BASE_DATA_TYPE),
            event_notifier: event_notifier::SUBSCRIBE_TO_EVENTS
                | event_notifier::HISTORY_READ
                | event_notifier::HISTORY_WRITE,
            executable: false,
            writable: true,
            history,
            history_updates: updates,
        })
    }

    /// HistoryWrite shows on a mirror only where HistoryUpdate is forwarded
    /// (`history_updates`, with `history`) and the server lets the gateway's user write
    /// that history; HistoryRead where HistoryRead is forwarded.
    #[test]
    fn history_write_shows_only_where_updates_are_forwarded() {
        let all = access_level::CURRENT_READ
            | access_level::CURRENT_WRITE
            | access_level::HISTORY_READ
            | access_level::HISTORY_WRITE;
        let var = |user: u8| VarAttrs {
            access_level: all,
            user_access_level: user,
            ..VarAttrs::default()
        };
        let level = |user: u8, history: bool, updates: bool| {
            let v = var(user);
            let n = mirrored(NodeClass::Variable, Some(&v), history, updates);
            n.as_variable().map(|v| v.access_level)
        };
        let hr = access_level::HISTORY_READ;
        let hw = access_level::HISTORY_WRITE;
        assert_eq!(level(all, true, true).map(|l| l & (hr | hw)), Some(hr | hw));
        assert_eq!(level(all, true, false).map(|l| l & (hr | hw)), Some(hr));
        assert_eq!(level(all, false, true).map(|l| l & (hr | hw)), Some(0));
        // The gateway's user may not write that history there: nor may anyone here.
        assert_eq!(
            level(all & !hw, true, true).map(|l| l & (hr | hw)),
            Some(hr)
        );

        let notifier = |history: bool, updates: bool| match mirrored(
            NodeClass::Object,
            None,
            history,
            updates,
        )
        .attributes
        {
            ClassAttributes::Object { event_notifier } => Some(event_notifier),
            _ => None,
        };
        let (ehr, ehw) = (event_notifier::HISTORY_READ, event_notifier::HISTORY_WRITE);
        assert_eq!(
            notifier(true, true).map(|e| e & (ehr | ehw)),
            Some(ehr | ehw)
        );
        assert_eq!(notifier(true, false).map(|e| e & (ehr | ehw)), Some(ehr));
        assert_eq!(notifier(false, true).map(|e| e & (ehr | ehw)), Some(0));
    }
}
