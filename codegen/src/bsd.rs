//! Reads Opc.Ua.Types.bsd into a small model.

use std::collections::BTreeMap;

/// The structures of the bsd that describe built-in types; they are hand-written in
/// core/src/types and are not generated.
pub const BUILTIN_DESCRIPTIONS: [&str; 15] = [
    "XmlElement",
    "NodeId",
    "TwoByteNodeId",
    "FourByteNodeId",
    "NumericNodeId",
    "StringNodeId",
    "GuidNodeId",
    "ByteStringNodeId",
    "ExpandedNodeId",
    "DiagnosticInfo",
    "QualifiedName",
    "LocalizedText",
    "DataValue",
    "ExtensionObject",
    "Variant",
];
/// Enumerations that only exist to describe a built-in encoding.
pub const BUILTIN_ENUMS: [&str; 1] = ["NodeIdType"];

#[derive(Debug, Clone)]
pub struct Field {
    pub name: String,
    /// Without the `opc:`/`ua:`/`tns:` prefix.
    pub type_name: String,
    /// `opc:` types are the binary schema's primitives.
    pub is_opc: bool,
    pub length_field: Option<String>,
    pub switch_field: Option<String>,
    pub switch_value: Option<u32>,
    /// Bit fields: width in bits.
    pub bit_length: u32,
}

#[derive(Debug, Clone)]
pub struct Structured {
    pub name: String,
    pub doc: Option<String>,
    pub base_type: Option<String>,
    pub fields: Vec<Field>,
}

#[derive(Debug, Clone)]
pub struct Enumerated {
    pub name: String,
    pub doc: Option<String>,
    pub length_in_bits: u32,
    pub is_option_set: bool,
    pub values: Vec<(String, i64)>,
}

#[derive(Debug, Default)]
pub struct Bsd {
    /// In file order.
    pub structs: Vec<Structured>,
    pub enums: Vec<Enumerated>,
    pub opaque: Vec<String>,
}

impl Bsd {
    pub fn struct_by_name(&self) -> BTreeMap<&str, &Structured> {
        self.structs.iter().map(|s| (s.name.as_str(), s)).collect()
    }
    pub fn enum_by_name(&self) -> BTreeMap<&str, &Enumerated> {
        self.enums.iter().map(|s| (s.name.as_str(), s)).collect()
    }
    /// The structures and enums that get generated.
    pub fn generated_structs(&self) -> impl Iterator<Item = &Structured> {
        self.structs
            .iter()
            .filter(|s| !BUILTIN_DESCRIPTIONS.contains(&s.name.as_str()))
    }
    pub fn generated_enums(&self) -> impl Iterator<Item = &Enumerated> {
        self.enums
            .iter()
            .filter(|s| !BUILTIN_ENUMS.contains(&s.name.as_str()))
    }
}

fn strip_prefix(t: &str) -> (bool, String) {
    match t.split_once(':') {
        Some((p, n)) => (p == "opc", n.to_owned()),
        None => (false, t.to_owned()),
    }
}

fn doc_of(n: roxmltree::Node) -> Option<String> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == "Documentation")
        .and_then(|c| c.text())
        .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|t| !t.is_empty())
}

pub fn parse(text: &str) -> Bsd {
    let doc = roxmltree::Document::parse(text).expect("Opc.Ua.Types.bsd is not well-formed XML");
    let mut bsd = Bsd::default();
    for n in doc.root_element().children().filter(|n| n.is_element()) {
        let name = n.attribute("Name").map(str::to_owned);
        match n.tag_name().name() {
            "StructuredType" => {
                let name = name.expect("StructuredType without Name");
                let mut fields = Vec::new();
                for f in n
                    .children()
                    .filter(|c| c.is_element() && c.tag_name().name() == "Field")
                {
                    let (is_opc, type_name) =
                        strip_prefix(f.attribute("TypeName").expect("Field without TypeName"));
                    fields.push(Field {
                        name: f.attribute("Name").expect("Field without Name").to_owned(),
                        bit_length: if is_opc && type_name == "Bit" {
                            f.attribute("Length")
                                .map_or(1, |l| l.parse().expect("bad Bit Length"))
                        } else {
                            0
                        },
                        type_name,
                        is_opc,
                        length_field: f.attribute("LengthField").map(str::to_owned),
                        switch_field: f.attribute("SwitchField").map(str::to_owned),
                        switch_value: f
                            .attribute("SwitchValue")
                            .map(|v| v.parse().expect("bad SwitchValue")),
                    });
                }
                bsd.structs.push(Structured {
                    name,
                    doc: doc_of(n),
                    base_type: n.attribute("BaseType").map(|b| strip_prefix(b).1),
                    fields,
                });
            }
            "EnumeratedType" => {
                let name = name.expect("EnumeratedType without Name");
                let values = n
                    .children()
                    .filter(|c| c.is_element() && c.tag_name().name() == "EnumeratedValue")
                    .map(|v| {
                        (
                            v.attribute("Name")
                                .expect("EnumeratedValue without Name")
                                .to_owned(),
                            v.attribute("Value")
                                .expect("EnumeratedValue without Value")
                                .parse()
                                .expect("bad Value"),
                        )
                    })
                    .collect();
                bsd.enums.push(Enumerated {
                    name,
                    doc: doc_of(n),
                    length_in_bits: n
                        .attribute("LengthInBits")
                        .map_or(32, |l| l.parse().expect("bad LengthInBits")),
                    is_option_set: n.attribute("IsOptionSet") == Some("true"),
                    values,
                });
            }
            "OpaqueType" => bsd.opaque.push(name.expect("OpaqueType without Name")),
            "Import" | "Documentation" => {}
            other => panic!("unexpected element {other} in the bsd"),
        }
    }
    bsd
}
