//! The bsd resolved into what the Rust code needs: field types, layouts, ids.

use crate::bsd::{Bsd, Enumerated, Structured};
use crate::naming::snake;
use std::collections::{BTreeMap, BTreeSet};

/// A field's element type.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// A primitive: (rust type, bsd name).
    Prim(&'static str, &'static str),
    /// A built-in type from core/src/types (`UaString`, `NodeId`, …).
    Builtin(&'static str),
    Struct(String),
    Enum(String),
}

impl Ty {
    pub fn rust(&self) -> String {
        match self {
            Ty::Prim(r, _) => (*r).to_owned(),
            Ty::Builtin(b) => (*b).to_owned(),
            Ty::Struct(s) | Ty::Enum(s) => s.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RField {
    pub bsd_name: String,
    pub name: String,
    pub ty: Ty,
    pub array: bool,
    /// Optional field: the bit of the encoding mask that says it is present.
    pub optional_bit: Option<u32>,
    /// Union arm: the switch value.
    pub switch_value: Option<u32>,
}

impl RField {
    /// The Rust type of the field/arm payload without the Option.
    pub fn value_ty(&self) -> String {
        if self.array {
            format!("Vec<{}>", self.ty.rust())
        } else {
            self.ty.rust()
        }
    }
}

#[derive(Debug, Clone)]
pub enum Layout {
    /// Every field always present.
    Plain,
    /// Structure with optional fields: an encoding mask of `mask_bits` then the fields.
    Optional { mask_bits: u32 },
    /// Union: UInt32 switch, then the one arm (0 = null).
    Union,
}

#[derive(Debug, Clone)]
pub struct RStruct {
    pub name: String,
    pub doc: Option<String>,
    pub layout: Layout,
    pub fields: Vec<RField>,
    pub data_type_id: u32,
    pub binary_encoding_id: u32,
    /// Can contain itself (directly or through other structures' fields).
    pub recursive: bool,
}

pub struct REnum<'a> {
    pub e: &'a Enumerated,
    pub data_type_id: Option<u32>,
    pub repr: &'static str,
}

pub struct Model<'a> {
    pub structs: Vec<RStruct>,
    pub enums: Vec<REnum<'a>>,
    pub by_name: BTreeMap<String, usize>,
}

pub fn opc_ty(name: &str) -> Option<Ty> {
    Some(match name {
        "Boolean" => Ty::Prim("bool", "Boolean"),
        "SByte" => Ty::Prim("i8", "SByte"),
        "Byte" => Ty::Prim("u8", "Byte"),
        "Int16" => Ty::Prim("i16", "Int16"),
        "UInt16" => Ty::Prim("u16", "UInt16"),
        "Int32" => Ty::Prim("i32", "Int32"),
        "UInt32" => Ty::Prim("u32", "UInt32"),
        "Int64" => Ty::Prim("i64", "Int64"),
        "UInt64" => Ty::Prim("u64", "UInt64"),
        "Float" => Ty::Prim("f32", "Float"),
        "Double" => Ty::Prim("f64", "Double"),
        "String" | "CharArray" => Ty::Builtin("UaString"),
        "DateTime" => Ty::Builtin("DateTime"),
        "Guid" => Ty::Builtin("Guid"),
        "ByteString" => Ty::Builtin("ByteString"),
        _ => return None,
    })
}

pub fn ua_builtin(name: &str) -> Option<Ty> {
    Some(Ty::Builtin(match name {
        "XmlElement" => "XmlElement",
        "NodeId" => "NodeId",
        "ExpandedNodeId" => "ExpandedNodeId",
        "StatusCode" => "StatusCode",
        "QualifiedName" => "QualifiedName",
        "LocalizedText" => "LocalizedText",
        "ExtensionObject" => "ExtensionObject",
        "DataValue" => "DataValue",
        "Variant" => "Variant",
        "DiagnosticInfo" => "DiagnosticInfo",
        _ => return None,
    }))
}

/// NodeIds.csv: name → (id, node class).
pub type Ids = BTreeMap<String, (u32, String)>;

fn resolve_struct(bsd: &Bsd, ids: &Ids, s: &Structured) -> RStruct {
    let structs = bsd.struct_by_name();
    let enums = bsd.enum_by_name();
    let length_fields: BTreeSet<&str> = s
        .fields
        .iter()
        .filter_map(|f| f.length_field.as_deref())
        .collect();
    let mut bits: BTreeMap<&str, u32> = BTreeMap::new();
    let mut mask_bits = 0u32;
    for f in s.fields.iter().filter(|f| f.is_opc && f.type_name == "Bit") {
        bits.insert(&f.name, mask_bits);
        mask_bits += f.bit_length;
    }
    let mut fields = Vec::new();
    let mut selector: Option<&str> = None;
    let mut has_optional = false;
    let mut has_arm = false;
    for f in &s.fields {
        if (f.is_opc && f.type_name == "Bit") || length_fields.contains(f.name.as_str()) {
            continue;
        }
        // A union's selector: a UInt32 that other fields switch on.
        if s.fields
            .iter()
            .any(|g| g.switch_field.as_deref() == Some(f.name.as_str()) && g.switch_value.is_some())
            && !bits.contains_key(f.name.as_str())
        {
            assert!(
                f.is_opc && f.type_name == "UInt32",
                "{}: union selector {} is not a UInt32",
                s.name,
                f.name
            );
            selector = Some(&f.name);
            continue;
        }
        let ty = if f.is_opc {
            opc_ty(&f.type_name).unwrap_or_else(|| {
                panic!("{}.{}: unknown opc type {}", s.name, f.name, f.type_name)
            })
        } else if let Some(t) = ua_builtin(&f.type_name) {
            t
        } else if structs.contains_key(f.type_name.as_str()) {
            assert!(
                !crate::bsd::BUILTIN_DESCRIPTIONS.contains(&f.type_name.as_str()),
                "{}.{}: {} has no Rust mapping",
                s.name,
                f.name,
                f.type_name
            );
            Ty::Struct(f.type_name.clone())
        } else if enums.contains_key(f.type_name.as_str()) {
            Ty::Enum(f.type_name.clone())
        } else {
            panic!("{}.{}: unknown type {}", s.name, f.name, f.type_name)
        };
        let (optional_bit, switch_value) = match (&f.switch_field, f.switch_value) {
            (None, _) => (None, None),
            (Some(sf), None) => {
                let bit = *bits
                    .get(sf.as_str())
                    .unwrap_or_else(|| panic!("{}.{}: switch {sf} is no bit", s.name, f.name));
                has_optional = true;
                (Some(bit), None)
            }
            (Some(_), Some(v)) => {
                has_arm = true;
                (None, Some(v))
            }
        };
        fields.push(RField {
            bsd_name: f.name.clone(),
            name: snake(&f.name),
            ty,
            array: f.length_field.is_some(),
            optional_bit,
            switch_value,
        });
    }
    let layout = if has_arm {
        assert!(selector.is_some(), "{}: union without selector", s.name);
        assert!(
            fields.iter().all(|f| f.switch_value.is_some()),
            "{}: union with fields outside the switch is not supported",
            s.name
        );
        assert!(!has_optional, "{}: union with optional fields", s.name);
        Layout::Union
    } else if has_optional || mask_bits > 0 {
        assert!(
            matches!(mask_bits, 8 | 16 | 32),
            "{}: encoding mask of {mask_bits} bits",
            s.name
        );
        Layout::Optional { mask_bits }
    } else {
        Layout::Plain
    };
    let mut seen = BTreeSet::new();
    for f in &fields {
        assert!(
            seen.insert(f.name.clone()),
            "{}: two fields map to {}",
            s.name,
            f.name
        );
    }
    let id = |n: &str, class: Option<&str>| -> u32 {
        let (id, c) = ids
            .get(n)
            .unwrap_or_else(|| panic!("NodeIds.csv has no {n}"));
        if let Some(class) = class {
            assert_eq!(c, class, "{n} is a {c}, expected {class}");
        }
        *id
    };
    RStruct {
        name: s.name.clone(),
        doc: s.doc.clone(),
        layout,
        data_type_id: id(&s.name, Some("DataType")),
        binary_encoding_id: id(
            &format!("{}_Encoding_DefaultBinary", s.name),
            Some("Object"),
        ),
        fields,
        recursive: false,
    }
}

pub fn build<'a>(bsd: &'a Bsd, ids: &Ids) -> Model<'a> {
    let mut structs: Vec<RStruct> = bsd
        .generated_structs()
        .map(|s| resolve_struct(bsd, ids, s))
        .collect();
    let by_name: BTreeMap<String, usize> = structs
        .iter()
        .enumerate()
        .map(|(i, s)| (s.name.clone(), i))
        .collect();
    // Recursion: which structures can reach themselves through structure-typed fields.
    for i in 0..structs.len() {
        let mut stack: Vec<usize> = Vec::new();
        let mut seen = BTreeSet::new();
        let push = |s: &RStruct, stack: &mut Vec<usize>, seen: &mut BTreeSet<usize>| {
            for f in &s.fields {
                if let Ty::Struct(n) = &f.ty {
                    let j = by_name[n];
                    if seen.insert(j) {
                        stack.push(j);
                    }
                }
            }
        };
        push(&structs[i], &mut stack, &mut seen);
        while let Some(j) = stack.pop() {
            push(&structs[j], &mut stack, &mut seen);
        }
        if seen.contains(&i) {
            structs[i].recursive = true;
            // A direct, non-array self-containment would need a Box; the bsd has none.
            for f in &structs[i].fields {
                assert!(
                    f.ty != Ty::Struct(structs[i].name.clone()) || f.array,
                    "{} contains itself",
                    structs[i].name
                );
            }
        }
    }
    let enums = bsd
        .generated_enums()
        .map(|e| REnum {
            e,
            data_type_id: ids
                .get(&e.name)
                .filter(|(_, c)| c == "DataType")
                .map(|(i, _)| *i),
            repr: if e.is_option_set {
                match e.length_in_bits {
                    8 => "u8",
                    16 => "u16",
                    32 => "u32",
                    64 => "u64",
                    n => panic!("{}: option set of {n} bits", e.name),
                }
            } else {
                assert_eq!(
                    e.length_in_bits, 32,
                    "{}: enumeration of {} bits",
                    e.name, e.length_in_bits
                );
                "i32"
            },
        })
        .collect();
    Model {
        structs,
        enums,
        by_name,
    }
}

impl Model<'_> {
    pub fn get(&self, name: &str) -> &RStruct {
        &self.structs[self.by_name[name]]
    }
    /// Can structure `from` reach structure `to` through fields?
    pub fn reaches(&self, from: &str, to: &str) -> bool {
        let mut stack = vec![from.to_owned()];
        let mut seen = BTreeSet::new();
        while let Some(n) = stack.pop() {
            for f in &self.get(&n).fields {
                if let Ty::Struct(m) = &f.ty {
                    if m == to {
                        return true;
                    }
                    if seen.insert(m.clone()) {
                        stack.push(m.clone());
                    }
                }
            }
        }
        false
    }
}
