//! Values in the NodeSet's XML encoding (Part 6 §5.3) → Variants. Structures are
//! encoded field by field from their DataTypeDefinition, so any structure whose
//! definition is in the address space (namespace 0's or a loaded one) converts.

use std::collections::HashMap;

use roxmltree::Node as XNode;
use uaring_core::address_space::{ids, AddressSpaceBuilder, AttrsView, NodeClass};
use uaring_core::generated::types::{EnumDefinition, StructureDefinition, StructureType};
use uaring_core::types::{
    base64_decode, BuiltinType, ByteString, ExpandedNodeId, ExtensionObject, ExtensionObjectBody,
    Guid, LocalizedText, NodeId, QualifiedName, StatusCode, UaString, Variant,
};
use uaring_core::{DecodeLimits, Encode};

use crate::{child, datetime, elements, FileLoader, LoadError};

/// Deepest nesting of structures in a value (and of supertype chains walked).
const MAX_DEPTH: u32 = 32;

/// Direct supertype of a type node, from its declared inverse HasSubtype reference.
pub(crate) fn supertype(b: &AddressSpaceBuilder, id: &NodeId) -> Option<NodeId> {
    b.node(id)?
        .refs()
        .find(|r| !r.is_forward() && r.type_is_ns0(ids::HAS_SUBTYPE))
        .and_then(|r| r.target().as_local().cloned())
        .or_else(|| {
            // Declared the other way round (forward HasSubtype on the supertype).
            b.referencing(id)
                .into_iter()
                .find(|n| {
                    n.refs().any(|r| {
                        r.is_forward()
                            && r.type_is_ns0(ids::HAS_SUBTYPE)
                            && r.target_node().is_some_and(|t| t.is(id))
                    })
                })
                .map(|n| n.node_id())
        })
}

pub(crate) fn is_subtype(b: &AddressSpaceBuilder, id: &NodeId, base: &NodeId) -> bool {
    let mut cur = id.clone();
    for _ in 0..MAX_DEPTH {
        if &cur == base {
            return true;
        }
        match supertype(b, &cur) {
            Some(s) => cur = s,
            None => return false,
        }
    }
    false
}

/// Encoding object → the DataType it encodes (HasEncoding declared on either side).
pub(crate) fn encoding_map(b: &AddressSpaceBuilder) -> HashMap<NodeId, NodeId> {
    let mut m = HashMap::new();
    for n in b.nodes() {
        for r in n.refs() {
            if !r.type_is_ns0(ids::HAS_ENCODING) {
                continue;
            }
            if let Some(t) = r.target().as_local() {
                if r.is_forward() && n.node_class() == NodeClass::DataType {
                    m.insert(t.clone(), n.node_id());
                } else if !r.is_forward() && n.node_class() == NodeClass::Object {
                    m.insert(n.node_id(), t.clone());
                }
            }
        }
    }
    m
}

/// How a DataType is encoded.
enum Kind {
    Builtin(BuiltinType),
    Struct(StructureDefinition),
    Enum,
}

fn limits() -> DecodeLimits {
    DecodeLimits {
        max_string_len: 1 << 20,
        max_byte_string_len: 1 << 20,
        max_array_len: 1 << 16,
        max_depth: 100,
        max_decoded_size: 64 << 20,
    }
}

pub(crate) struct Converter<'c, 'a, 'i> {
    pub(crate) f: &'c FileLoader<'a, 'i>,
    pub(crate) b: &'c AddressSpaceBuilder,
    pub(crate) encodings: &'c HashMap<NodeId, NodeId>,
}

impl Converter<'_, '_, '_> {
    fn err(&self, at: XNode, m: String) -> LoadError {
        self.f.err(at, None, m)
    }

    /// A `<Value>` element: one child, `<Int32>`, `<ListOfString>`, `<ExtensionObject>`, ….
    pub(crate) fn value(&self, v: XNode) -> Result<Variant, LoadError> {
        let Some(el) = elements(v).next() else {
            return Ok(Variant::Empty);
        };
        let tag = el.tag_name().name();
        if let Some(item) = tag.strip_prefix("ListOf") {
            let t = builtin(item)
                .ok_or_else(|| self.err(el, format!("cannot convert a <{tag}> value")))?;
            let mut items = Vec::new();
            for it in elements(el) {
                if it.tag_name().name() != item {
                    return Err(self.err(it, format!("<{tag}> holds a <{}>", it.tag_name().name())));
                }
                items.push(if t == BuiltinType::Variant {
                    self.variant_el(it, 0)?
                } else {
                    self.scalar(t, Some(it), 0)?
                });
            }
            return Variant::array(t, items)
                .ok_or_else(|| self.err(el, format!("<{tag}>: items of mixed types")));
        }
        let t =
            builtin(tag).ok_or_else(|| self.err(el, format!("cannot convert a <{tag}> value")))?;
        if t == BuiltinType::Variant {
            return Err(self.err(el, "a scalar Variant cannot hold a Variant".into()));
        }
        self.scalar(t, Some(el), 0)
    }

    /// `<Variant><Value><Int32>…</Int32></Value></Variant>`.
    fn variant_el(&self, el: XNode, depth: u32) -> Result<Variant, LoadError> {
        if depth > MAX_DEPTH {
            return Err(self.err(el, "values nested too deep".into()));
        }
        match child(el, "Value") {
            Some(v) => self.value(v),
            None => Ok(Variant::Empty),
        }
    }

    /// A scalar of built-in type `t` from its element (`None`: the type's null value).
    fn scalar(&self, t: BuiltinType, el: Option<XNode>, depth: u32) -> Result<Variant, LoadError> {
        let Some(el) = el else {
            return Ok(default_scalar(t));
        };
        let tx = el.text().unwrap_or("").trim();
        let bad = || {
            self.err(
                el,
                format!(
                    "<{}>: cannot read {tx:?} as {}",
                    el.tag_name().name(),
                    t.name()
                ),
            )
        };
        macro_rules! num {
            ($v:ident) => {
                Variant::$v(tx.parse().map_err(|_| bad())?)
            };
        }
        Ok(match t {
            BuiltinType::Boolean => Variant::Boolean(match tx {
                "true" | "1" => true,
                "false" | "0" | "" => false,
                _ => return Err(bad()),
            }),
            BuiltinType::SByte => num!(SByte),
            BuiltinType::Byte => num!(Byte),
            BuiltinType::Int16 => num!(Int16),
            BuiltinType::UInt16 => num!(UInt16),
            BuiltinType::Int32 => num!(Int32),
            BuiltinType::UInt32 => num!(UInt32),
            BuiltinType::Int64 => num!(Int64),
            BuiltinType::UInt64 => num!(UInt64),
            BuiltinType::Float => Variant::Float(parse_float(tx).ok_or_else(bad)? as f32),
            BuiltinType::Double => Variant::Double(parse_float(tx).ok_or_else(bad)?),
            BuiltinType::String => Variant::String(UaString::from(el.text().unwrap_or(""))),
            BuiltinType::DateTime => Variant::DateTime(datetime(tx).ok_or_else(bad)?),
            BuiltinType::Guid => {
                let s = child(el, "String")
                    .and_then(|s| s.text())
                    .unwrap_or(tx)
                    .trim();
                Variant::Guid(
                    Guid::parse(s).ok_or_else(|| self.err(el, format!("bad Guid {s:?}")))?,
                )
            }
            BuiltinType::ByteString => Variant::ByteString(ByteString::from(
                base64_decode(tx).ok_or_else(|| self.err(el, "bad base64".into()))?,
            )),
            BuiltinType::NodeId => Variant::NodeId(Box::new(self.id_value(el)?)),
            BuiltinType::ExpandedNodeId => {
                Variant::ExpandedNodeId(Box::new(ExpandedNodeId::local(self.id_value(el)?)))
            }
            BuiltinType::StatusCode => {
                let c = child(el, "Code")
                    .and_then(|c| c.text())
                    .unwrap_or("0")
                    .trim();
                let code: u32 = if let Some(h) = c.strip_prefix("0x") {
                    u32::from_str_radix(h, 16).ok()
                } else {
                    c.parse().ok()
                }
                .ok_or_else(|| self.err(el, format!("bad StatusCode {c:?}")))?;
                Variant::StatusCode(StatusCode(code))
            }
            BuiltinType::QualifiedName => {
                let ns: u16 = match child(el, "NamespaceIndex").and_then(|c| c.text()) {
                    Some(n) => n
                        .trim()
                        .parse()
                        .map_err(|_| self.err(el, format!("bad NamespaceIndex {n:?}")))?,
                    None => 0,
                };
                let name = child(el, "Name").and_then(|c| c.text()).unwrap_or("");
                Variant::QualifiedName(Box::new(QualifiedName::new(self.f.ns(ns, el)?, name)))
            }
            BuiltinType::LocalizedText => Variant::LocalizedText(Box::new(LocalizedText {
                locale: child(el, "Locale")
                    .and_then(|c| c.text())
                    .unwrap_or("")
                    .into(),
                text: child(el, "Text")
                    .and_then(|c| c.text())
                    .unwrap_or("")
                    .into(),
            })),
            BuiltinType::ExtensionObject => {
                Variant::ExtensionObject(Box::new(self.extension_object(el, depth)?))
            }
            BuiltinType::Variant => return self.variant_el(el, depth + 1),
            BuiltinType::XmlElement | BuiltinType::DataValue | BuiltinType::DiagnosticInfo => {
                return Err(self.err(el, format!("{} values are not supported", t.name())))
            }
        })
    }

    /// `<NodeId><Identifier>ns=1;i=5</Identifier></NodeId>`.
    fn id_value(&self, el: XNode) -> Result<NodeId, LoadError> {
        match child(el, "Identifier").and_then(|i| i.text()) {
            Some(s) if !s.trim().is_empty() => self.f.node_id(s, el),
            _ => Ok(NodeId::NULL),
        }
    }

    /// `<ExtensionObject><TypeId><Identifier>i=297</Identifier></TypeId><Body><Argument>…`.
    fn extension_object(&self, el: XNode, depth: u32) -> Result<ExtensionObject, LoadError> {
        if depth > MAX_DEPTH {
            return Err(self.err(el, "values nested too deep".into()));
        }
        let tid = child(el, "TypeId")
            .and_then(|t| child(t, "Identifier"))
            .and_then(|i| i.text())
            .ok_or_else(|| self.err(el, "ExtensionObject without TypeId".into()))?;
        let tid = self.f.node_id(tid, el)?;
        let Some(body) = child(el, "Body").and_then(|b| elements(b).next()) else {
            return Ok(ExtensionObject::null());
        };
        let dt = match self.b.node(&tid) {
            Some(n) if n.node_class() == NodeClass::DataType => tid.clone(),
            _ => self.encodings.get(&tid).cloned().ok_or_else(|| {
                self.err(
                    el,
                    format!("ExtensionObject TypeId {tid} is no known DataType or encoding"),
                )
            })?,
        };
        let Kind::Struct(def) = self.kind(&dt, el)? else {
            return Err(self.err(
                el,
                format!("ExtensionObject of {dt}, which is not a structure"),
            ));
        };
        if def.default_encoding_id.is_null() {
            return Err(self.err(el, format!("structure {dt} has no Default Binary encoding")));
        }
        let mut out = Vec::new();
        self.struct_body(&def, body, &mut out, depth + 1)?;
        Ok(ExtensionObject {
            type_id: def.default_encoding_id.clone(),
            body: ExtensionObjectBody::Binary(out),
        })
    }

    /// How `dt` is encoded: its built-in type, its structure definition, or an enumeration.
    fn kind(&self, dt: &NodeId, at: XNode) -> Result<Kind, LoadError> {
        let mut cur = dt.clone();
        for _ in 0..MAX_DEPTH {
            if let Some(t) = cur.as_ns0() {
                if (1..=25).contains(&t) {
                    return Ok(Kind::Builtin(
                        BuiltinType::from_id(t as u8).expect("1..=25"),
                    ));
                }
                if t == ids::ENUMERATION {
                    return Ok(Kind::Enum);
                }
            }
            let n = self
                .b
                .node(&cur)
                .ok_or_else(|| self.err(at, format!("DataType {cur} does not exist")))?;
            if let AttrsView::DataType {
                data_type_definition: Some(d),
                ..
            } = n.attributes()
            {
                if let Some(s) = d.decode_as::<StructureDefinition>(limits()) {
                    return s
                        .map(Kind::Struct)
                        .map_err(|e| self.err(at, format!("DataTypeDefinition of {cur}: {e}")));
                }
                if d.decode_as::<EnumDefinition>(limits()).is_some()
                    && is_subtype(self.b, &cur, &NodeId::ns0(ids::ENUMERATION))
                {
                    return Ok(Kind::Enum);
                }
            }
            cur = supertype(self.b, &cur)
                .ok_or_else(|| self.err(at, format!("cannot tell how DataType {dt} is encoded")))?;
        }
        Err(self.err(at, format!("DataType {dt}: supertype chain too long")))
    }

    fn struct_body(
        &self,
        def: &StructureDefinition,
        el: XNode,
        out: &mut Vec<u8>,
        depth: u32,
    ) -> Result<(), LoadError> {
        if depth > MAX_DEPTH {
            return Err(self.err(el, "values nested too deep".into()));
        }
        let name = el.tag_name().name();
        for c in elements(el) {
            let cn = c.tag_name().name();
            if cn != "SwitchField"
                && cn != "EncodingMask"
                && !def.fields.iter().any(|f| f.name.as_str() == cn)
            {
                return Err(self.err(c, format!("structure {name} has no field {cn}")));
            }
        }
        let field_el = |f: &str| child(el, f);
        match def.structure_type {
            StructureType::Structure => {
                for f in &def.fields {
                    self.field(f, field_el(f.name.as_str()), out, depth)?;
                }
            }
            StructureType::StructureWithOptionalFields => {
                let mut mask = 0u32;
                let mut bit = 0;
                for f in &def.fields {
                    if f.is_optional {
                        if field_el(f.name.as_str()).is_some() {
                            mask |= 1 << bit;
                        }
                        bit += 1;
                    }
                }
                mask.encode(out);
                for f in &def.fields {
                    let c = field_el(f.name.as_str());
                    if !f.is_optional || c.is_some() {
                        self.field(f, c, out, depth)?;
                    }
                }
            }
            StructureType::Union => {
                match def
                    .fields
                    .iter()
                    .enumerate()
                    .find(|(_, f)| field_el(f.name.as_str()).is_some())
                {
                    Some((i, f)) => {
                        (i as u32 + 1).encode(out);
                        self.field(f, field_el(f.name.as_str()), out, depth)?;
                    }
                    None => 0u32.encode(out),
                }
            }
            other => {
                return Err(self.err(
                    el,
                    format!(
                        "structure {name}: StructureType {} is not supported",
                        other.0
                    ),
                ))
            }
        }
        Ok(())
    }

    fn field(
        &self,
        f: &uaring_core::generated::types::StructureField,
        el: Option<XNode>,
        out: &mut Vec<u8>,
        depth: u32,
    ) -> Result<(), LoadError> {
        if f.value_rank >= 0 {
            match el {
                None => (-1i32).encode(out),
                Some(c) => {
                    let items: Vec<XNode> = elements(c).collect();
                    (items.len() as i32).encode(out);
                    for it in items {
                        self.field_scalar(&f.data_type, Some(it), out, depth)?;
                    }
                }
            }
            Ok(())
        } else {
            self.field_scalar(&f.data_type, el, out, depth)
        }
    }

    fn field_scalar(
        &self,
        dt: &NodeId,
        el: Option<XNode>,
        out: &mut Vec<u8>,
        depth: u32,
    ) -> Result<(), LoadError> {
        let at = el.unwrap_or_else(|| self.f.root());
        match self.kind(dt, at)? {
            Kind::Builtin(BuiltinType::Variant) => {
                let v = match el {
                    Some(e) => self.variant_el(e, depth + 1)?,
                    None => Variant::Empty,
                };
                v.encode(out);
            }
            Kind::Builtin(t) => self.scalar(t, el, depth + 1)?.encode_scalar(out),
            Kind::Struct(def) => match el {
                Some(e) => self.struct_body(&def, e, out, depth + 1)?,
                None => {
                    return Err(self.err(at, format!("a structure field of type {dt} is missing")));
                }
            },
            Kind::Enum => {
                let v: i32 = match el {
                    None => 0,
                    Some(e) => {
                        let t = e.text().unwrap_or("").trim();
                        t.rsplit('_')
                            .next()
                            .unwrap_or(t)
                            .parse()
                            .map_err(|_| self.err(e, format!("bad enumeration value {t:?}")))?
                    }
                };
                v.encode(out);
            }
        }
        Ok(())
    }
}

fn parse_float(s: &str) -> Option<f64> {
    match s {
        "INF" => Some(f64::INFINITY),
        "-INF" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// The built-in type of an XML element name.
fn builtin(name: &str) -> Option<BuiltinType> {
    BuiltinType::ALL.iter().copied().find(|t| t.name() == name)
}

/// The null/zero value of a built-in type (a structure field absent from the XML).
fn default_scalar(t: BuiltinType) -> Variant {
    match t {
        BuiltinType::Boolean => Variant::Boolean(false),
        BuiltinType::SByte => Variant::SByte(0),
        BuiltinType::Byte => Variant::Byte(0),
        BuiltinType::Int16 => Variant::Int16(0),
        BuiltinType::UInt16 => Variant::UInt16(0),
        BuiltinType::Int32 => Variant::Int32(0),
        BuiltinType::UInt32 => Variant::UInt32(0),
        BuiltinType::Int64 => Variant::Int64(0),
        BuiltinType::UInt64 => Variant::UInt64(0),
        BuiltinType::Float => Variant::Float(0.0),
        BuiltinType::Double => Variant::Double(0.0),
        BuiltinType::String => Variant::String(UaString::null()),
        BuiltinType::DateTime => Variant::DateTime(Default::default()),
        BuiltinType::Guid => Variant::Guid(Guid::NULL),
        BuiltinType::ByteString => Variant::ByteString(ByteString::default()),
        BuiltinType::XmlElement => Variant::XmlElement(Default::default()),
        BuiltinType::NodeId => Variant::NodeId(Box::default()),
        BuiltinType::ExpandedNodeId => Variant::ExpandedNodeId(Box::default()),
        BuiltinType::StatusCode => Variant::StatusCode(StatusCode(0)),
        BuiltinType::QualifiedName => Variant::QualifiedName(Box::default()),
        BuiltinType::LocalizedText => Variant::LocalizedText(Box::default()),
        BuiltinType::ExtensionObject => Variant::ExtensionObject(Box::default()),
        BuiltinType::DataValue => Variant::DataValue(Box::default()),
        BuiltinType::Variant | BuiltinType::DiagnosticInfo => Variant::Empty,
    }
}
