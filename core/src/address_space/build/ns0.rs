//! Namespace 0.
//!
//! BOOTSTRAP: until `crate::generated::ns0` lands this adds a hand-made subset (the
//! built-in DataTypes, the core ReferenceTypes, the base Object/Variable types and the
//! Root/Objects/Types/Views folders) so the rest of the address space can be built and tested.

use super::AddressSpaceBuilder;
use crate::address_space::{
    ClassAttributes, Node, NodeClass, Reference, ValueSource, VariableAttributes, VariableTypeAttributes,
};
use crate::address_space::value::ValueCell;
use crate::types::{DataValue, ExpandedNodeId, LocalizedText, NodeId, QualifiedName, Variant};

const HAS_SUBTYPE: u32 = 45;
const ORGANIZES: u32 = 35;
const HAS_TYPE_DEFINITION: u32 = 40;

fn node(id: u32, class: NodeClass, name: &str, attributes: ClassAttributes, refs: Vec<(u32, bool, u32)>) -> Node {
    Node {
        node_id: NodeId::ns0(id),
        node_class: class,
        browse_name: QualifiedName::new(0, name),
        display_name: LocalizedText::text(name),
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: refs
            .into_iter()
            .map(|(t, fwd, target)| Reference {
                reference_type: NodeId::ns0(t),
                is_forward: fwd,
                target: ExpandedNodeId::local(NodeId::ns0(target)),
            })
            .collect(),
        attributes,
    }
}

/// Adds namespace 0.
pub fn add_namespace0(b: &mut AddressSpaceBuilder) -> Result<(), String> {
    let dts: &[(u32, &str, u32, bool)] = &[
        (24, "BaseDataType", 0, true),
        (1, "Boolean", 24, false),
        (26, "Number", 24, true),
        (27, "Integer", 26, true),
        (28, "UInteger", 26, true),
        (2, "SByte", 27, false),
        (3, "Byte", 28, false),
        (4, "Int16", 27, false),
        (5, "UInt16", 28, false),
        (6, "Int32", 27, false),
        (7, "UInt32", 28, false),
        (8, "Int64", 27, false),
        (9, "UInt64", 28, false),
        (10, "Float", 26, false),
        (11, "Double", 26, false),
        (12, "String", 24, false),
        (13, "DateTime", 24, false),
        (14, "Guid", 24, false),
        (15, "ByteString", 24, false),
        (16, "XmlElement", 24, false),
        (17, "NodeId", 24, false),
        (18, "ExpandedNodeId", 24, false),
        (19, "StatusCode", 24, false),
        (20, "QualifiedName", 24, false),
        (21, "LocalizedText", 24, false),
        (22, "Structure", 24, true),
        (23, "DataValue", 24, false),
        (25, "DiagnosticInfo", 24, false),
        (29, "Enumeration", 24, true),
        (290, "Duration", 11, false),
        (294, "UtcTime", 13, false),
    ];
    for &(id, name, sup, abs) in dts {
        let refs = if sup == 0 { vec![] } else { vec![(HAS_SUBTYPE, false, sup)] };
        b.add(node(id, NodeClass::DataType, name, ClassAttributes::DataType { is_abstract: abs, data_type_definition: None }, refs))?;
    }
    let rts: &[(u32, &str, u32, bool, bool, &str)] = &[
        (31, "References", 0, true, true, ""),
        (32, "NonHierarchicalReferences", 31, true, true, ""),
        (33, "HierarchicalReferences", 31, true, false, "InverseHierarchicalReferences"),
        (34, "HasChild", 33, true, false, "ChildOf"),
        (35, "Organizes", 33, false, false, "OrganizedBy"),
        (38, "HasEncoding", 32, false, false, "EncodingOf"),
        (40, "HasTypeDefinition", 32, false, false, "TypeDefinitionOf"),
        (44, "Aggregates", 34, true, false, "AggregatedBy"),
        (45, "HasSubtype", 34, false, false, "SubtypeOf"),
        (46, "HasProperty", 44, false, false, "PropertyOf"),
        (47, "HasComponent", 44, false, false, "ComponentOf"),
    ];
    for &(id, name, sup, abs, sym, inv) in rts {
        let refs = if sup == 0 { vec![] } else { vec![(HAS_SUBTYPE, false, sup)] };
        let inverse_name = (!inv.is_empty()).then(|| LocalizedText::text(inv));
        b.add(node(id, NodeClass::ReferenceType, name, ClassAttributes::ReferenceType { is_abstract: abs, symmetric: sym, inverse_name }, refs))?;
    }
    b.add(node(58, NodeClass::ObjectType, "BaseObjectType", ClassAttributes::ObjectType { is_abstract: false }, vec![]))?;
    b.add(node(61, NodeClass::ObjectType, "FolderType", ClassAttributes::ObjectType { is_abstract: false }, vec![(HAS_SUBTYPE, false, 58)]))?;
    for (id, name, sup, abs) in [(62u32, "BaseVariableType", 0u32, true), (63, "BaseDataVariableType", 62, false), (68, "PropertyType", 62, false)] {
        let refs = if sup == 0 { vec![] } else { vec![(HAS_SUBTYPE, false, sup)] };
        b.add(node(
            id,
            NodeClass::VariableType,
            name,
            ClassAttributes::VariableType(VariableTypeAttributes {
                value: Variant::Empty,
                data_type: NodeId::ns0(24),
                value_rank: -2,
                array_dimensions: vec![],
                is_abstract: abs,
            }),
            refs,
        ))?;
    }
    let folder = ClassAttributes::Object { event_notifier: 0 };
    b.add(node(84, NodeClass::Object, "Root", folder, vec![(HAS_TYPE_DEFINITION, true, 61)]))?;
    for (id, name) in [(85u32, "Objects"), (86, "Types"), (87, "Views")] {
        b.add(node(
            id,
            NodeClass::Object,
            name,
            ClassAttributes::Object { event_notifier: 0 },
            vec![(HAS_TYPE_DEFINITION, true, 61), (ORGANIZES, false, 84)],
        ))?;
    }
    // Server and a few of its variables, so the Server object's values can be installed.
    b.add(node(2253, NodeClass::Object, "Server", ClassAttributes::Object { event_notifier: 1 }, vec![(ORGANIZES, false, 85)]))?;
    let vars: &[(u32, &str, u32, u32, i32)] = &[
        (2255, "NamespaceArray", 2253, 12, 1),
        (2256, "ServerStatus", 2253, 862, -1),
        (2258, "CurrentTime", 2256, 294, -1),
        (2267, "ServiceLevel", 2253, 3, -1),
        (11705, "MaxNodesPerRead", 2253, 7, -1),
    ];
    for &(id, name, parent, dt, rank) in vars {
        b.add(node(
            id,
            NodeClass::Variable,
            name,
            ClassAttributes::Variable(VariableAttributes {
                value: ValueSource::Cell(ValueCell::new(DataValue::default(), None)),
                data_type: NodeId::ns0(dt),
                value_rank: rank,
                array_dimensions: vec![],
                access_level: 1,
                user_access_level: 1,
                access_level_ex: None,
                minimum_sampling_interval: -1.0,
                historizing: false,
            }),
            vec![(47, false, parent), (HAS_TYPE_DEFINITION, true, 63)],
        ))?;
    }
    Ok(())
}
