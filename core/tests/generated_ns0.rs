//! Namespace 0 as loaded from the generated blob.

use std::collections::HashMap;
use uaring_core::generated::node_ids as id;
use uaring_core::generated::ns0::{self, Ns0Node};
use uaring_core::generated::types::{
    Argument, EUInformation, EnumDefinition, EnumValueType, NodeClass, StructureDefinition,
    StructureType,
};
use uaring_core::{DecodeLimits, ExtensionObject, NodeId, UaStructure, Variant};

fn by_id(nodes: &[Ns0Node]) -> HashMap<u32, &Ns0Node> {
    nodes
        .iter()
        .map(|n| (n.node_id.as_ns0().expect("ns0 numeric"), n))
        .collect()
}

fn eo_list(v: &Variant) -> Vec<&ExtensionObject> {
    let a = v.as_array().expect("array value");
    a.values
        .iter()
        .map(|x| match x {
            Variant::ExtensionObject(e) => &**e,
            other => panic!("not an ExtensionObject: {other:?}"),
        })
        .collect()
}

#[test]
fn node_count_and_well_known_nodes() {
    let nodes = ns0::nodes().expect("decode ns0.bin");
    assert_eq!(nodes.len(), 4956);
    assert_eq!(nodes.len(), ns0::NODE_COUNT);
    let m = by_id(&nodes);
    assert_eq!(m.len(), nodes.len(), "node ids are unique");

    let root = m[&id::RootFolder];
    assert_eq!(root.node_id, NodeId::ns0(84));
    assert_eq!(root.browse_name.name.as_str(), "Root");
    assert_eq!(root.node_class, NodeClass::Object);

    let objects = m[&85];
    assert_eq!(objects.browse_name.name.as_str(), "Objects");
    assert_eq!(objects.browse_name.namespace_index, 0);
    assert_eq!(objects.display_name.text.as_str(), "Objects");
    assert!(objects
        .references
        .iter()
        .any(|r| r.reference_type == NodeId::ns0(id::Organizes)
            && !r.is_forward
            && r.target == NodeId::ns0(84)));

    let server = m[&id::Server];
    assert_eq!(server.browse_name.name.as_str(), "Server");
    assert_eq!(server.node_class, NodeClass::Object);
    assert_eq!(server.event_notifier, 1);

    let status = m[&id::Server_ServerStatus];
    assert_eq!(status.node_id, NodeId::ns0(2256));
    assert_eq!(status.node_class, NodeClass::Variable);
    assert_eq!(status.data_type, NodeId::ns0(862));
    assert_eq!(status.value_rank, -1);
    assert_eq!(status.access_level, 1);
    assert_eq!(status.user_access_level, 1);

    // Defaults: methods are executable; variables without a ValueRank are scalars.
    let get_monitored = m[&id::Server_GetMonitoredItems];
    assert_eq!(get_monitored.node_class, NodeClass::Method);
    assert!(get_monitored.executable && get_monitored.user_executable);
    assert!(!m[&85].executable);

    // Reference types: abstract flags, inverse names, symmetric.
    let references = m[&id::References];
    assert!(references.is_abstract && references.symmetric);
    let organizes = m[&id::Organizes];
    assert_eq!(organizes.node_class, NodeClass::ReferenceType);
    assert_eq!(organizes.inverse_name.text.as_str(), "OrganizedBy");

    // Every node class is represented.
    for c in [
        NodeClass::Object,
        NodeClass::Variable,
        NodeClass::Method,
        NodeClass::ObjectType,
        NodeClass::VariableType,
        NodeClass::ReferenceType,
        NodeClass::DataType,
    ] {
        assert!(nodes.iter().any(|n| n.node_class == c), "{c:?}");
    }
}

#[test]
fn values_decode_to_their_structures() {
    let nodes = ns0::nodes().unwrap();
    let m = by_id(&nodes);
    let lim = DecodeLimits::default();

    // ServerStatusDataType's definition lists StartTime … ShutdownReason.
    let ssdt = m[&id::ServerStatusDataType];
    let def = ssdt.data_type_definition.as_ref().expect("definition");
    let sd: StructureDefinition = def.decode_as(lim).expect("StructureDefinition").unwrap();
    let names: Vec<&str> = sd.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "StartTime",
            "CurrentTime",
            "State",
            "BuildInfo",
            "SecondsTillShutdown",
            "ShutdownReason"
        ]
    );
    assert_eq!(sd.fields[0].data_type, NodeId::ns0(id::UtcTime));
    assert_eq!(sd.fields[2].data_type, NodeId::ns0(id::ServerState));
    assert_eq!(
        sd.default_encoding_id,
        NodeId::ns0(id::ServerStatusDataType_Encoding_DefaultBinary)
    );
    assert_eq!(sd.base_data_type, NodeId::ns0(id::Structure));
    assert_eq!(sd.structure_type, StructureType::Structure);

    // An enumeration's definition.
    let ssd = m[&id::ServerState]
        .data_type_definition
        .as_ref()
        .expect("ServerState definition");
    let ed: EnumDefinition = ssd.decode_as(lim).expect("EnumDefinition").unwrap();
    assert_eq!(ed.fields[0].name.as_str(), "Running");
    assert_eq!(ed.fields.len(), 8);

    // EnumStrings (LocalizedText[]) of ServerState.
    let es = m[&id::ServerState_EnumStrings];
    let a = es.value.as_array().expect("array");
    assert_eq!(a.values.len(), 8);
    assert!(matches!(&a.values[0], Variant::LocalizedText(t) if t.text.as_str() == "Running"));

    // EnumValues (EnumValueType[]) of NodeClass / AxisScaleEnumeration etc.
    let ev = m[&id::NodeClass_EnumValues];
    let list = eo_list(&ev.value);
    assert!(!list.is_empty());
    let first: EnumValueType = list[0].decode_as(lim).expect("EnumValueType").unwrap();
    assert_eq!(first.display_name.text.as_str(), "Unspecified");
    let all: Vec<EnumValueType> = list
        .iter()
        .map(|e| e.decode_as(lim).unwrap().unwrap())
        .collect();
    assert!(all
        .iter()
        .any(|v| v.value == 1 && v.display_name.text.as_str() == "Object"));

    // InputArguments (Argument[]) of Server.GetMonitoredItems.
    let ia = m[&id::Server_GetMonitoredItems_InputArguments];
    let list = eo_list(&ia.value);
    assert_eq!(list.len(), 1);
    assert!(list[0].is::<Argument>());
    let arg: Argument = list[0].decode_as(lim).unwrap().unwrap();
    assert_eq!(arg.name.as_str(), "SubscriptionId");
    assert_eq!(arg.data_type, NodeId::ns0(id::UInt32));
    assert_eq!(arg.value_rank, -1);

    // Every ExtensionObject value and definition decodes as its type.
    let mut counts = HashMap::<&str, usize>::new();
    for n in &nodes {
        let mut eos: Vec<&ExtensionObject> = Vec::new();
        match &n.value {
            Variant::ExtensionObject(e) => eos.push(e),
            Variant::Array(a) => {
                for v in &a.values {
                    if let Variant::ExtensionObject(e) = v {
                        eos.push(e);
                    }
                }
            }
            _ => {}
        }
        eos.extend(n.data_type_definition.iter());
        for e in eos {
            let name = if let Some(r) = e.decode_as::<Argument>(lim) {
                r.map(|_| Argument::NAME)
            } else if let Some(r) = e.decode_as::<EnumValueType>(lim) {
                r.map(|_| EnumValueType::NAME)
            } else if let Some(r) = e.decode_as::<EUInformation>(lim) {
                r.map(|_| EUInformation::NAME)
            } else if let Some(r) = e.decode_as::<StructureDefinition>(lim) {
                r.map(|_| StructureDefinition::NAME)
            } else if let Some(r) = e.decode_as::<EnumDefinition>(lim) {
                r.map(|_| EnumDefinition::NAME)
            } else {
                panic!(
                    "{:?}: unexpected ExtensionObject {:?}",
                    n.node_id, e.type_id
                )
            }
            .unwrap_or_else(|err| panic!("{:?}: {err}", n.node_id));
            *counts.entry(name).or_default() += 1;
        }
    }
    assert!(counts["Argument"] > 800, "{counts:?}");
    assert!(counts["EnumValueType"] > 100, "{counts:?}");
    assert_eq!(counts["EUInformation"], 3, "{counts:?}");
    assert!(counts["StructureDefinition"] > 100, "{counts:?}");
    assert!(counts["EnumDefinition"] > 50, "{counts:?}");
}

#[test]
fn scalar_values_and_namespace_metadata() {
    let nodes = ns0::nodes().unwrap();
    let m = by_id(&nodes);
    // Server_NamespaceArray has no value in the NodeSet; the OPCUANamespaceMetadata object does.
    let uri = m[&id::OPCUANamespaceMetadata_NamespaceUri];
    assert!(
        matches!(&uri.value, Variant::String(s) if s.as_str() == "http://opcfoundation.org/UA/")
    );
    let pd = m[&id::OPCUANamespaceMetadata_NamespacePublicationDate];
    assert!(matches!(pd.value, Variant::DateTime(_)));
    // The binary type dictionary is carried as a ByteString.
    let dict = m[&id::OpcUa_BinarySchema];
    assert!(
        matches!(&dict.value, Variant::ByteString(b) if b.as_bytes().starts_with(b"<opc:TypeDictionary"))
    );
}

#[test]
fn decoding_is_fast_enough_and_rejects_truncation() {
    let t = std::time::Instant::now();
    let nodes = ns0::nodes().unwrap();
    let el = t.elapsed();
    assert_eq!(nodes.len(), 4956);
    // Generous for debug builds; release decodes in a few ms.
    assert!(el.as_millis() < 2000, "decoding ns0 took {el:?}");
    println!(
        "ns0: {} nodes, {} bytes, decoded in {el:?}",
        nodes.len(),
        ns0::NS0_BIN.len()
    );
    let b = ns0::NS0_BIN;
    assert!(ns0::decode_blob(&b[..b.len() - 1]).is_err());
    assert!(ns0::decode_blob(&b[..b.len() / 2]).is_err());
    assert!(ns0::decode_blob(b"UAN1").is_err());
}
