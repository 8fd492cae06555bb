//! Node makers for builders of namespaces beyond 0 (the `uaring` library's definitions, the
//! NodeSet import's tests, core's own tests): a Variable with a stored value or any value
//! source, a folder, and the access levels they use.

use crate::address_space::value::ValueCell;
use crate::address_space::{
    access_level, ids, ClassAttributes, Node, NodeClass, Reference, ValueSource, VariableAttributes,
};
use crate::types::{BuiltinType, DataValue, ExpandedNodeId, LocalizedText, NodeId, QualifiedName};

/// AccessLevel of the writable variables: read, write, and (because Write accepts them)
/// StatusWrite and TimestampWrite.
pub const WRITABLE: u8 = access_level::CURRENT_READ
    | access_level::CURRENT_WRITE
    | access_level::STATUS_WRITE
    | access_level::TIMESTAMP_WRITE;
/// AccessLevel of the read-only variables.
pub const READ_ONLY: u8 = access_level::CURRENT_READ;

/// Builds a Variable node with a stored value.
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
        generation: 0,
        node_id,
        node_class: NodeClass::Variable,
        browse_name,
        display_name,
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: references.into(),
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
        generation: 0,
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
        ]
        .into(),
        attributes: ClassAttributes::Object { event_notifier: 0 },
    }
}
