//! DI and Machinery, the official files, loaded into a real address space.

use std::path::PathBuf;

use uaring_core::address_space::build::build_with;
use uaring_core::address_space::{AddressSpace, AttrsView, NodeClass};
use uaring_core::config::ServerConfig;
use uaring_core::generated::types::{Argument, StructureDefinition};
use uaring_core::types::{NodeId, QualifiedName, Variant};
use uaring_core::{DecodeLimits, Now};
use uaring_nodeset::{load_files, load_sources, LoadError, ModelInfo, Source};

const DI: &str = "http://opcfoundation.org/UA/DI/";
const MACHINERY: &str = "http://opcfoundation.org/UA/Machinery/";

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/nodesets")
}

fn now() -> Now {
    Now {
        mono_ns: 1,
        utc: uaring_core::types::DateTime(133_000_000_000_000_000),
    }
}

fn build(files: &[PathBuf]) -> Result<(AddressSpace, Vec<ModelInfo>), String> {
    let mut infos = Vec::new();
    let a = build_with(&ServerConfig::default(), now(), &mut |b| {
        infos = load_files(b, files, false).map_err(|e| e.to_string())?;
        Ok(())
    })?;
    Ok((a, infos))
}

fn build_text(texts: &[(&str, String)]) -> Result<AddressSpace, LoadError> {
    let sources: Vec<Source> = texts
        .iter()
        .map(|(p, t)| Source {
            path: p.into(),
            text: t.clone(),
        })
        .collect();
    let mut err = None;
    let r = build_with(&ServerConfig::default(), now(), &mut |b| {
        load_sources(b, &sources, false).map_err(|e| {
            err = Some(e.clone());
            e.to_string()
        })?;
        Ok(())
    });
    match (r, err) {
        (Ok(a), None) => Ok(a),
        (_, Some(e)) => Err(e),
        (Err(e), None) => panic!("build failed without a load error: {e}"),
    }
}

fn di_machinery() -> (AddressSpace, Vec<ModelInfo>) {
    // Given in the wrong order on purpose: the loader orders by RequiredModel.
    build(&[
        dir().join("Opc.Ua.Machinery.NodeSet2.xml"),
        dir().join("Opc.Ua.Di.NodeSet2.xml"),
    ])
    .unwrap()
}

#[test]
fn di_and_machinery_load_with_namespaces_remapped() {
    let (a, infos) = di_machinery();
    let ns = a.namespace_uris();
    assert_eq!(
        &ns[..2],
        &[
            "http://opcfoundation.org/UA/".to_string(),
            "urn:uaring:server".to_string()
        ]
    );
    let di = a.namespace_index(DI).unwrap();
    let ma = a.namespace_index(MACHINERY).unwrap();
    assert!(di >= 2 && ma >= 2 && di != ma);
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0].uri, DI, "DI first: Machinery requires it");
    assert_eq!(infos[1].uri, MACHINERY);
    assert!(infos[0].nodes > 400 && infos[1].nodes > 100, "{infos:?}");

    // NamespaceArray of the Server object lists them.
    let arr = a
        .node(&NodeId::ns0(2255))
        .and_then(|n| n.value_cell())
        .unwrap()
        .load()
        .value;
    let Variant::Array(arr) = arr else {
        panic!("{arr:?}")
    };
    assert_eq!(arr.values.len(), ns.len());

    // DeviceSet (DI i=5001) is organized under Objects.
    let device_set = NodeId::numeric(di, 5001);
    let n = a.node(&device_set).unwrap();
    assert_eq!(n.browse_name(), QualifiedName::new(di, "DeviceSet"));
    assert!(a
        .node(&NodeId::ns0(85))
        .unwrap()
        .references()
        .any(|r| r.is_forward && r.target.as_local() == Some(&device_set)));
    // Machines (Machinery i=1001) too; its type is a Machinery type in Machinery's namespace.
    let machines = NodeId::numeric(ma, 1001);
    assert_eq!(
        a.node(&machines).unwrap().browse_name().name.as_str(),
        "Machines"
    );
    let topology = NodeId::numeric(di, 1001); // DI TopologyElementType
    let device = NodeId::numeric(di, 1002); // DI DeviceType
    assert!(a.is_subtype_of(&device, &topology));
    let component = NodeId::numeric(di, 15063); // DI ComponentType
    assert!(
        a.is_subtype_of(&device, &component),
        "DeviceType derives from ComponentType"
    );
    // Machinery's file says ns=2 for DI: remapped to where DI landed. IMachineTagNameplateType
    // (Machinery i=1011) derives from DI's ITagNameplateType (i=15048), across the two files.
    assert!(a.is_subtype_of(&NodeId::numeric(ma, 1011), &NodeId::numeric(di, 15048)));
    assert!(
        a.is_subtype_of(&NodeId::numeric(ma, 1011), &NodeId::ns0(58)),
        "down to BaseObjectType"
    );
}

#[test]
fn variables_have_value_cells_and_structures_convert() {
    let (a, _) = di_machinery();
    let di = a.namespace_index(DI).unwrap();
    // Method arguments: ListOfExtensionObject of Argument (i=297 in the XML = Argument's XML encoding),
    // re-encoded in binary from Argument's StructureDefinition.
    let mut checked = 0;
    for n in a.nodes() {
        if n.node_id().namespace != di || n.browse_name().name.as_str() != "InputArguments" {
            continue;
        }
        let v = n.value_cell().expect("a value cell").load().value;
        let Variant::Array(arr) = v else {
            panic!("{v:?}")
        };
        for item in &arr.values {
            let Variant::ExtensionObject(eo) = item else {
                panic!("{item:?}")
            };
            let arg: Argument = eo
                .decode_as::<Argument>(DecodeLimits::default())
                .expect("Argument binary")
                .unwrap();
            assert!(!arg.name.as_str().is_empty());
            assert!(!arg.data_type.is_null());
            checked += 1;
        }
    }
    assert!(checked > 10, "{checked} arguments");
    // A DataType of DI with its StructureDefinition (FetchResultDataType i=6522 is abstract; use
    // TransferResultDataDataType i=15889).
    let dt = a.node(&NodeId::numeric(di, 15889)).unwrap();
    let AttrsView::DataType {
        data_type_definition: Some(d),
        ..
    } = dt.attributes()
    else {
        panic!()
    };
    let sd: StructureDefinition = d.decode_as(DecodeLimits::default()).unwrap().unwrap();
    assert_eq!(
        sd.fields
            .iter()
            .map(|f| f.name.as_str())
            .collect::<Vec<_>>(),
        ["SequenceNumber", "EndOfResults", "ParameterDefs"]
    );
    assert!(!sd.default_encoding_id.is_null());
    // Methods are not advertised as executable (the server does not implement them).
    let m = a
        .nodes()
        .find(|n| n.node_id().namespace == di && n.node_class() == NodeClass::Method)
        .unwrap();
    assert!(matches!(
        m.attributes(),
        AttrsView::Method {
            executable: false,
            user_executable: false
        }
    ));
}

fn di_text() -> String {
    std::fs::read_to_string(dir().join("Opc.Ua.Di.NodeSet2.xml")).unwrap()
}

#[test]
fn missing_required_model_is_an_error_naming_the_line() {
    let text = std::fs::read_to_string(dir().join("Opc.Ua.Machinery.NodeSet2.xml")).unwrap();
    let e = build_text(&[("machinery.xml", text.clone())]).unwrap_err();
    let line = text
        .lines()
        .position(|l| l.contains("RequiredModel ModelUri=\"http://opcfoundation.org/UA/DI/\""))
        .unwrap()
        + 1;
    assert_eq!(e.line as usize, line, "{e}");
    assert!(
        e.to_string()
            .starts_with(&format!("machinery.xml:{line}: ")),
        "{e}"
    );
    assert!(e.message.contains(DI), "{e}");
}

#[test]
fn newer_required_version_is_an_error() {
    let text = di_text().replace(
        "<RequiredModel ModelUri=\"http://opcfoundation.org/UA/\" XmlSchemaUri=\"http://opcfoundation.org/UA/2008/02/Types.xsd\" Version=\"1.05.01\" PublicationDate=\"2022-02-24T00:00:00Z\" />",
        "<RequiredModel ModelUri=\"http://opcfoundation.org/UA/\" Version=\"1.06.00\" PublicationDate=\"2030-01-01T00:00:00Z\" />",
    );
    assert_ne!(text, di_text());
    let e = build_text(&[("di.xml", text)]).unwrap_err();
    assert!(
        e.message.contains("1.06.00") && e.message.contains("1.05.03"),
        "{e}"
    );
}

#[test]
fn broken_files_name_file_line_and_node() {
    // A reference to a node that does not exist.
    let text = di_text().replacen(
        "<Reference ReferenceType=\"Organizes\" IsForward=\"false\">i=85</Reference>",
        "<Reference ReferenceType=\"Organizes\" IsForward=\"false\">i=999999</Reference>",
        1,
    );
    let line = text.lines().position(|l| l.contains("i=999999")).unwrap() + 1;
    let e = build_text(&[("di.xml", text)]).unwrap_err();
    assert_eq!(e.line as usize, line, "{e}");
    assert_eq!(e.node.as_deref(), Some("ns=1;i=5001"), "{e}");
    assert!(
        e.message.contains("i=999999") && e.message.contains("does not exist"),
        "{e}"
    );

    // Not well-formed XML.
    let text = di_text().replacen(
        "<DisplayName>DeviceSet</DisplayName>",
        "<DisplayName>DeviceSet</Display>",
        1,
    );
    let e = build_text(&[("di.xml", text)]).unwrap_err();
    assert!(e.message.contains("not well-formed"), "{e}");
    assert!(e.line > 30, "{e}");

    // A value that is not what its element says.
    let text = di_text().replacen(
        "<ValueRank>-1</ValueRank>",
        "<ValueRank>minus one</ValueRank>",
        1,
    );
    let e = build_text(&[("di.xml", text)]).unwrap_err();
    assert!(e.message.contains("minus one") && e.node.is_some(), "{e}");

    // The same model twice.
    let e = build_text(&[("a.xml", di_text()), ("b.xml", di_text())]).unwrap_err();
    assert!(e.message.contains("defines too"), "{e}");
}

#[test]
fn builtin_namespace0_version_matches_the_vendored_nodeset() {
    let spec = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../codegen/spec/Opc.Ua.NodeSet2.xml"),
    )
    .unwrap();
    let model = spec
        .lines()
        .find(|l| l.contains("<Model ModelUri=\"http://opcfoundation.org/UA/\""))
        .unwrap();
    assert!(
        model.contains(&format!(
            "Version=\"{}\"",
            uaring_nodeset::NS0_MODEL_VERSION
        )),
        "{model}"
    );
    assert!(
        model.contains(&format!(
            "PublicationDate=\"{}\"",
            uaring_nodeset::NS0_PUBLICATION_DATE
        )),
        "{model}"
    );
}
