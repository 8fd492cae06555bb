//! Namespace 0: Opc.Ua.NodeSet2.xml → core/src/generated/ns0.bin (+ its loader ns0.rs).
//!
//! Blob format (every value in OPC UA Binary, little-endian):
//!
//! ```text
//! header:  Byte[4] "UAN0", UInt32 version (1), Int32 node count
//! node:    NodeId node_id
//!          Int32 node_class                      (NodeClass: Object 1, Variable 2, Method 4, …)
//!          QualifiedName browse_name
//!          LocalizedText display_name, LocalizedText description
//!          UInt32 write_mask, UInt32 user_write_mask
//!          Byte flags                             (1 is_abstract, 2 symmetric, 4 contains_no_loops,
//!                                                  8 historizing, 16 executable, 32 user_executable,
//!                                                  64 access_level_ex present,
//!                                                  128 data_type_definition present)
//!          LocalizedText inverse_name
//!          Byte event_notifier
//!          Variant value                          (Empty when the node has none)
//!          NodeId data_type
//!          Int32 value_rank
//!          UInt32[] array_dimensions
//!          Byte access_level, Byte user_access_level
//!          UInt32 access_level_ex                 (only when flag 64)
//!          Double minimum_sampling_interval
//!          ExtensionObject data_type_definition   (only when flag 128)
//!          Int32 reference count, then per reference: NodeId reference_type, Boolean is_forward,
//!          NodeId target
//! ```

use crate::bin_writer::{base64, parse_datetime, parse_guid, Id, W};
use crate::model::{Ids, Layout, Model, Ty};
use roxmltree::Node;
use std::collections::BTreeMap;

pub const MAGIC: &[u8; 4] = b"UAN0";
pub const VERSION: u32 = 1;

const KNOWN_ATTRS: &[&str] = &[
    "NodeId",
    "BrowseName",
    "ParentNodeId",
    "DataType",
    "ValueRank",
    "ArrayDimensions",
    "SymbolicName",
    "ReleaseStatus",
    "MethodDeclarationId",
    // Not an attribute of Ns0Node (Part 3 AccessRestrictions); not carried.
    "AccessRestrictions",
    "IsAbstract",
    "MinimumSamplingInterval",
    "Symmetric",
    "AccessLevel",
    "UserAccessLevel",
    "AccessLevelEx",
    "EventNotifier",
    "WriteMask",
    "UserWriteMask",
    "Historizing",
    "Executable",
    "UserExecutable",
    "ContainsNoLoops",
];
const KNOWN_CHILDREN: &[&str] = &[
    "DisplayName",
    "Description",
    "References",
    "Value",
    "Definition",
    "InverseName",
    // Documentation only, not attributes.
    "Documentation",
    "Category",
    // RolePermissions are not part of Ns0Node.
    "RolePermissions",
];

fn child<'a, 'i>(n: Node<'a, 'i>, name: &str) -> Option<Node<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}
fn elements<'a, 'i>(n: Node<'a, 'i>) -> impl Iterator<Item = Node<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}
fn text<'a>(n: Node<'a, '_>) -> &'a str {
    n.text().unwrap_or("")
}

struct Ctx<'m> {
    aliases: BTreeMap<String, String>,
    m: &'m Model<'m>,
    ids: &'m Ids,
    /// id → name for NodeIds.csv
    names: BTreeMap<u32, String>,
}

impl Ctx<'_> {
    fn node_id(&self, s: &str) -> Id {
        let s = s.trim();
        let r = self.aliases.get(s).map(String::as_str).unwrap_or(s);
        Id::parse(r).unwrap_or_else(|| panic!("cannot parse NodeId {s:?}"))
    }
    fn numeric(&self, s: &str) -> u32 {
        match self.node_id(s) {
            Id::Numeric(0, n) => n,
            other => panic!("expected a ns=0 numeric id, got {other:?}"),
        }
    }
}

fn builtin_id(name: &str) -> Option<u8> {
    Some(match name {
        "Boolean" => 1,
        "SByte" => 2,
        "Byte" => 3,
        "Int16" => 4,
        "UInt16" => 5,
        "Int32" => 6,
        "UInt32" => 7,
        "Int64" => 8,
        "UInt64" => 9,
        "Float" => 10,
        "Double" => 11,
        "String" => 12,
        "DateTime" => 13,
        "Guid" => 14,
        "ByteString" => 15,
        "XmlElement" => 16,
        "NodeId" => 17,
        "ExpandedNodeId" => 18,
        "StatusCode" => 19,
        "QualifiedName" => 20,
        "LocalizedText" => 21,
        "ExtensionObject" => 22,
        "DataValue" => 23,
        "Variant" => 24,
        "DiagnosticInfo" => 25,
        _ => return None,
    })
}

fn parse_num<T: std::str::FromStr>(s: &str, what: &str) -> T {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("cannot parse {what} from {s:?}"))
}

/// Writes the body of a built-in scalar of type `t` from its XML element (`None` → the
/// type's default/null value).
fn builtin_scalar(cx: &Ctx, w: &mut W, t: &str, el: Option<Node>) {
    let tx = el.map(text);
    match t {
        "Boolean" => w.bool(tx.is_some_and(|s| s.trim() == "true" || s.trim() == "1")),
        "SByte" => w.u8(tx.map_or(0i8, |s| parse_num(s, t)) as u8),
        "Byte" => w.u8(tx.map_or(0, |s| parse_num(s, t))),
        "Int16" => w.i16(tx.map_or(0, |s| parse_num(s, t))),
        "UInt16" => w.u16(tx.map_or(0, |s| parse_num(s, t))),
        "Int32" => w.i32(tx.map_or(0, |s| parse_num(s, t))),
        "UInt32" => w.u32(tx.map_or(0, |s| parse_num(s, t))),
        "Int64" => w.i64(tx.map_or(0, |s| parse_num(s, t))),
        "UInt64" => w.u64(tx.map_or(0, |s| parse_num(s, t))),
        "Float" => w.f32(tx.map_or(0.0, |s| parse_num(s, t))),
        "Double" => w.f64(tx.map_or(0.0, |s| parse_num(s, t))),
        "String" => w.string(tx),
        "DateTime" => w.i64(tx.map_or(0, |s| {
            parse_datetime(s).unwrap_or_else(|| panic!("bad DateTime {s:?}"))
        })),
        "Guid" => {
            let g = el
                .and_then(|e| child(e, "String"))
                .map(text)
                .unwrap_or("00000000-0000-0000-0000-000000000000");
            w.guid(&parse_guid(g).unwrap_or_else(|| panic!("bad Guid {g:?}")));
        }
        "ByteString" => w.bytes(
            tx.map(|s| base64(s).unwrap_or_else(|| panic!("bad base64")))
                .as_deref(),
        ),
        "NodeId" | "ExpandedNodeId" => {
            let id = el
                .and_then(|e| child(e, "Identifier"))
                .map_or(Id::NULL, |i| cx.node_id(text(i)));
            w.node_id(&id);
        }
        "StatusCode" => w.u32(
            el.and_then(|e| child(e, "Code"))
                .map_or(0, |c| parse_num(text(c), "StatusCode")),
        ),
        "QualifiedName" => {
            let ns = el
                .and_then(|e| child(e, "NamespaceIndex"))
                .map_or(0, |c| parse_num(text(c), "NamespaceIndex"));
            w.qualified_name(ns, el.and_then(|e| child(e, "Name")).map(text));
        }
        "LocalizedText" => w.localized_text(
            el.and_then(|e| child(e, "Locale")).map(text),
            el.and_then(|e| child(e, "Text")).map(text),
        ),
        "ExtensionObject" => match el {
            None => {
                w.node_id(&Id::NULL);
                w.u8(0);
            }
            Some(e) => extension_object(cx, w, e),
        },
        "Variant" => match el {
            None => w.u8(0),
            Some(e) => variant(cx, w, e),
        },
        other => panic!("cannot convert a {other} value from the NodeSet"),
    }
}

/// `<ExtensionObject><TypeId><Identifier>i=297</Identifier></TypeId><Body><Argument>…`
fn extension_object(cx: &Ctx, w: &mut W, e: Node) {
    let tid = child(e, "TypeId")
        .and_then(|t| child(t, "Identifier"))
        .map(text)
        .expect("ExtensionObject without TypeId");
    let id = cx.numeric(tid);
    let name = cx
        .names
        .get(&id)
        .unwrap_or_else(|| panic!("unknown ExtensionObject TypeId {tid}"));
    // The XML encoding id (or the DataType id) → the DataType name.
    let dt = name
        .strip_suffix("_Encoding_DefaultXml")
        .or(name.strip_suffix("_Encoding_DefaultBinary"))
        .unwrap_or(name);
    let body = child(e, "Body")
        .and_then(|b| elements(b).next())
        .expect("ExtensionObject without Body");
    assert_eq!(
        body.tag_name().name(),
        dt,
        "ExtensionObject TypeId {tid} has a {} body",
        body.tag_name().name()
    );
    let mut b = W::default();
    struct_body(cx, &mut b, dt, Some(body));
    let enc = cx
        .ids
        .get(&format!("{dt}_Encoding_DefaultBinary"))
        .expect("no DefaultBinary encoding")
        .0;
    w.extension_object(enc, &b.b);
}

/// A structure's binary body from its XML element, field by field from the bsd.
fn struct_body(cx: &Ctx, w: &mut W, name: &str, el: Option<Node>) {
    let s = cx.m.get(name);
    assert!(
        matches!(s.layout, Layout::Plain),
        "{name}: only plain structures are converted from XML"
    );
    if let Some(e) = el {
        for c in elements(e) {
            assert!(
                s.fields.iter().any(|f| f.bsd_name == c.tag_name().name()),
                "{name} has no field {}",
                c.tag_name().name()
            );
        }
    }
    for f in &s.fields {
        let c = el.and_then(|e| child(e, &f.bsd_name));
        if f.array {
            match c {
                None => w.i32(-1),
                Some(c) => {
                    let items: Vec<Node> = elements(c).collect();
                    w.i32(items.len() as i32);
                    for it in items {
                        field_scalar(cx, w, &f.ty, Some(it));
                    }
                }
            }
        } else {
            field_scalar(cx, w, &f.ty, c);
        }
    }
}

fn field_scalar(cx: &Ctx, w: &mut W, ty: &Ty, el: Option<Node>) {
    match ty {
        Ty::Prim(_, p) => builtin_scalar(cx, w, p, el),
        Ty::Builtin(b) => builtin_scalar(cx, w, if *b == "UaString" { "String" } else { b }, el),
        Ty::Enum(e) => {
            // XML form `Name_Value`, or a plain number.
            let v: i64 = el.map_or(0, |n| {
                let t = text(n).trim();
                parse_num(t.rsplit('_').next().unwrap_or(t), "enumeration value")
            });
            let en = cx.m.enums.iter().find(|x| &x.e.name == e).expect("enum");
            match en.repr {
                "u8" => w.u8(v as u8),
                "u16" => w.u16(v as u16),
                "u32" => w.u32(v as u32),
                "u64" => w.u64(v as u64),
                _ => w.i32(v as i32),
            }
        }
        Ty::Struct(s) => struct_body(cx, w, s, el),
    }
}

/// A Variant from a `<Value>`-style element whose one child is `<Int32>`, `<ListOfString>`, ….
fn variant(cx: &Ctx, w: &mut W, value: Node) {
    let Some(v) = elements(value).next() else {
        w.u8(0);
        return;
    };
    let tag = v.tag_name().name();
    if let Some(t) = tag.strip_prefix("ListOf") {
        let id = builtin_id(t).unwrap_or_else(|| panic!("cannot convert a {tag} value"));
        assert!(id != 24, "ListOfVariant values are not converted");
        let items: Vec<Node> = elements(v).collect();
        w.u8(id | 0x80);
        w.i32(items.len() as i32);
        for it in items {
            assert_eq!(
                it.tag_name().name(),
                t,
                "{tag} holds a {}",
                it.tag_name().name()
            );
            builtin_scalar(cx, w, t, Some(it));
        }
    } else {
        let id = builtin_id(tag).unwrap_or_else(|| panic!("cannot convert a {tag} value"));
        assert!(id != 24, "a Variant cannot hold a Variant scalar");
        w.u8(id);
        builtin_scalar(cx, w, tag, Some(v));
    }
}

fn localized(n: Option<Node>) -> (Option<String>, Option<String>) {
    match n {
        None => (None, None),
        Some(n) => (
            n.attribute("Locale").map(str::to_owned),
            Some(text(n).to_owned()),
        ),
    }
}

struct Pre {
    /// DataType id → supertype id (HasSubtype inverse).
    supertype: BTreeMap<u32, u32>,
    /// node id → browse name
    browse: BTreeMap<u32, String>,
    /// DataType id → its "Default Binary" encoding object (declared from either side).
    default_binary: BTreeMap<u32, u32>,
}

const HAS_SUBTYPE: u32 = 45;
const HAS_ENCODING: u32 = 38;

fn is_under(pre: &Pre, mut id: u32, root: u32) -> bool {
    for _ in 0..64 {
        if id == root {
            return true;
        }
        match pre.supertype.get(&id) {
            Some(s) => id = *s,
            None => return false,
        }
    }
    false
}

/// StructureDefinition / EnumDefinition from `<Definition>`.
fn definition(cx: &Ctx, pre: &Pre, node: Node, id: u32, def: Node) -> (u32, Vec<u8>) {
    let mut w = W::default();
    let is_option_set = def.attribute("IsOptionSet") == Some("true");
    let fields: Vec<Node> = elements(def)
        .filter(|f| f.tag_name().name() == "Field")
        .collect();
    for a in def.attributes() {
        assert!(
            ["Name", "IsOptionSet", "SymbolicName", "IsUnion", "IsOption"].contains(&a.name()),
            "Definition attribute {}",
            a.name()
        );
    }
    if is_under(pre, id, 22) {
        let names: Vec<&str> =
            cx.m.get("StructureField")
                .fields
                .iter()
                .map(|f| f.bsd_name.as_str())
                .collect();
        assert_eq!(
            names,
            [
                "Name",
                "Description",
                "DataType",
                "ValueRank",
                "ArrayDimensions",
                "MaxStringLength",
                "IsOptional"
            ]
        );
        let names: Vec<&str> =
            cx.m.get("StructureDefinition")
                .fields
                .iter()
                .map(|f| f.bsd_name.as_str())
                .collect();
        assert_eq!(
            names,
            [
                "DefaultEncodingId",
                "BaseDataType",
                "StructureType",
                "Fields"
            ]
        );
        // DefaultEncodingId: the "Default Binary" object linked by HasEncoding (the NodeSet
        // declares the reference on either side); else NodeIds.csv's `<Name>_Encoding_DefaultBinary`.
        let mut enc = Id::NULL;
        if let Some(e) = pre.default_binary.get(&id) {
            enc = Id::Numeric(0, *e);
        } else if let Some((e, _)) = pre
            .browse
            .get(&id)
            .and_then(|b| cx.ids.get(&format!("{b}_Encoding_DefaultBinary")))
        {
            enc = Id::Numeric(0, *e);
        }
        let _ = node;
        w.node_id(&enc);
        w.node_id(&Id::Numeric(
            0,
            *pre.supertype.get(&id).expect("structure without supertype"),
        ));
        let is_union = def.attribute("IsUnion") == Some("true");
        let optional = fields
            .iter()
            .any(|f| f.attribute("IsOptional") == Some("true"));
        let subtyped = fields
            .iter()
            .any(|f| f.attribute("AllowSubTypes") == Some("true"));
        // StructureType: Structure 0, StructureWithOptionalFields 1, Union 2,
        // StructureWithSubtypedValues 3, UnionWithSubtypedValues 4.
        let st = match (is_union, optional, subtyped) {
            (true, _, true) => 4,
            (true, _, false) => 2,
            (false, _, true) => 3,
            (false, true, false) => 1,
            (false, false, false) => 0,
        };
        w.i32(st);
        w.i32(fields.len() as i32);
        for f in &fields {
            for a in f.attributes() {
                assert!(
                    [
                        "Name",
                        "DataType",
                        "ValueRank",
                        "ArrayDimensions",
                        "MaxStringLength",
                        "IsOptional",
                        "AllowSubTypes",
                        "SymbolicName"
                    ]
                    .contains(&a.name()),
                    "structure Field attribute {}",
                    a.name()
                );
            }
            w.string(Some(f.attribute("Name").expect("Field Name")));
            let (l, t) = localized(child(*f, "Description"));
            w.localized_text(l.as_deref(), t.as_deref());
            w.node_id(
                &f.attribute("DataType")
                    .map_or(Id::Numeric(0, 24), |d| cx.node_id(d)),
            );
            w.i32(
                f.attribute("ValueRank")
                    .map_or(-1, |v| parse_num(v, "ValueRank")),
            );
            match f.attribute("ArrayDimensions") {
                None => w.i32(-1),
                Some(a) => {
                    let dims: Vec<u32> = a
                        .split(',')
                        .map(|x| parse_num(x, "ArrayDimensions"))
                        .collect();
                    w.i32(dims.len() as i32);
                    dims.iter().for_each(|d| w.u32(*d));
                }
            }
            w.u32(
                f.attribute("MaxStringLength")
                    .map_or(0, |v| parse_num(v, "MaxStringLength")),
            );
            w.bool(f.attribute("IsOptional") == Some("true"));
        }
        (cx.ids["StructureDefinition_Encoding_DefaultBinary"].0, w.b)
    } else if is_under(pre, id, 29) || is_option_set {
        let names: Vec<&str> =
            cx.m.get("EnumField")
                .fields
                .iter()
                .map(|f| f.bsd_name.as_str())
                .collect();
        assert_eq!(names, ["Value", "DisplayName", "Description", "Name"]);
        let names: Vec<&str> =
            cx.m.get("EnumDefinition")
                .fields
                .iter()
                .map(|f| f.bsd_name.as_str())
                .collect();
        assert_eq!(names, ["Fields"]);
        w.i32(fields.len() as i32);
        for f in &fields {
            for a in f.attributes() {
                assert!(
                    ["Name", "Value", "SymbolicName"].contains(&a.name()),
                    "enum Field attribute {}",
                    a.name()
                );
            }
            let name = f.attribute("Name").expect("Field Name");
            w.i64(f.attribute("Value").map_or(0, |v| parse_num(v, "Value")));
            let (l, t) = localized(child(*f, "DisplayName"));
            match t {
                Some(t) => w.localized_text(l.as_deref(), Some(&t)),
                None => w.localized_text(None, Some(name)),
            }
            let (l, t) = localized(child(*f, "Description"));
            w.localized_text(l.as_deref(), t.as_deref());
            w.string(Some(name));
        }
        (cx.ids["EnumDefinition_Encoding_DefaultBinary"].0, w.b)
    } else {
        panic!("DataType i={id} has a Definition but is neither a Structure, an Enumeration nor an option set")
    }
}

pub struct Ns0Out {
    pub blob: Vec<u8>,
    pub node_count: usize,
}

pub fn generate(xml: &str, m: &Model, ids: &Ids) -> Ns0Out {
    let doc = roxmltree::Document::parse(xml).expect("Opc.Ua.NodeSet2.xml is not well-formed XML");
    let root = doc.root_element();
    let mut aliases = BTreeMap::new();
    if let Some(a) = child(root, "Aliases") {
        for al in elements(a) {
            aliases.insert(
                al.attribute("Alias").expect("Alias").to_owned(),
                text(al).trim().to_owned(),
            );
        }
    }
    let names = ids.iter().map(|(n, (i, _))| (*i, n.clone())).collect();
    let cx = Ctx {
        aliases,
        m,
        ids,
        names,
    };
    let node_els: Vec<Node> = elements(root)
        .filter(|n| n.tag_name().name().starts_with("UA"))
        .collect();
    for n in elements(root) {
        assert!(
            ["Models", "Aliases", "NamespaceUris", "Extensions"].contains(&n.tag_name().name())
                || n.tag_name().name().starts_with("UA"),
            "unexpected {}",
            n.tag_name().name()
        );
    }
    // Pre-pass: supertypes, browse names, encodings.
    let mut encodings: Vec<(u32, u32)> = Vec::new();
    let mut pre = Pre {
        supertype: BTreeMap::new(),
        browse: BTreeMap::new(),
        default_binary: BTreeMap::new(),
    };
    for n in &node_els {
        let id = cx.numeric(n.attribute("NodeId").expect("NodeId"));
        pre.browse.insert(
            id,
            n.attribute("BrowseName").expect("BrowseName").to_owned(),
        );
        if let Some(refs) = child(*n, "References") {
            for r in elements(refs) {
                let fwd = r.attribute("IsForward") != Some("false");
                let rt = cx.numeric(r.attribute("ReferenceType").expect("ReferenceType"));
                if !fwd && rt == HAS_SUBTYPE {
                    pre.supertype.insert(id, cx.numeric(text(r)));
                }
                if rt == HAS_ENCODING {
                    let t = cx.numeric(text(r));
                    encodings.push(if fwd { (id, t) } else { (t, id) });
                }
            }
        }
    }

    for (dt, enc) in encodings {
        if pre.browse.get(&enc).map(String::as_str) == Some("Default Binary") {
            pre.default_binary.insert(dt, enc);
        }
    }

    let mut w = W::default();
    w.b.extend_from_slice(MAGIC);
    w.u32(VERSION);
    w.i32(node_els.len() as i32);
    for n in &node_els {
        let tag = n.tag_name().name();
        for a in n.attributes() {
            assert!(
                KNOWN_ATTRS.contains(&a.name()),
                "{tag}: unknown attribute {}",
                a.name()
            );
        }
        for c in elements(*n) {
            assert!(
                KNOWN_CHILDREN.contains(&c.tag_name().name()),
                "{tag}: unknown child {}",
                c.tag_name().name()
            );
        }
        let node_class = match tag {
            "UAObject" => 1,
            "UAVariable" => 2,
            "UAMethod" => 4,
            "UAObjectType" => 8,
            "UAVariableType" => 16,
            "UAReferenceType" => 32,
            "UADataType" => 64,
            "UAView" => 128,
            other => panic!("unknown node element {other}"),
        };
        let attr = |a: &str| n.attribute(a);
        let flag = |a: &str, default: bool| attr(a).map_or(default, |v| v == "true");
        let is_var = node_class == 2 || node_class == 16;
        let id_str = attr("NodeId").expect("NodeId");
        let id = cx.node_id(id_str);
        w.node_id(&id);
        w.i32(node_class);
        let bn = attr("BrowseName").expect("BrowseName");
        let (ns, name) = match bn.split_once(':') {
            Some((p, rest)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                (parse_num(p, "ns"), rest)
            }
            _ => (0u16, bn),
        };
        w.qualified_name(ns, Some(name));
        let (l, t) = localized(child(*n, "DisplayName"));
        w.localized_text(l.as_deref(), t.as_deref());
        let (l, t) = localized(child(*n, "Description"));
        w.localized_text(l.as_deref(), t.as_deref());
        w.u32(attr("WriteMask").map_or(0, |v| parse_num(v, "WriteMask")));
        w.u32(attr("UserWriteMask").map_or(0, |v| parse_num(v, "UserWriteMask")));
        let is_method = node_class == 4;
        let access_level_ex: Option<u32> =
            attr("AccessLevelEx").map(|v| parse_num(v, "AccessLevelEx"));
        let def = if node_class == 64 {
            child(*n, "Definition")
        } else {
            None
        };
        let mut flags = 0u8;
        for (bit, on) in [
            (1, flag("IsAbstract", false)),
            (2, flag("Symmetric", false)),
            (4, flag("ContainsNoLoops", false)),
            (8, flag("Historizing", false)),
            (16, is_method && flag("Executable", true)),
            (
                32,
                is_method && flag("UserExecutable", flag("Executable", true)),
            ),
            (64, access_level_ex.is_some()),
            (128, def.is_some()),
        ] {
            if on {
                flags |= bit;
            }
        }
        w.u8(flags);
        let (l, t) = localized(child(*n, "InverseName"));
        w.localized_text(l.as_deref(), t.as_deref());
        w.u8(attr("EventNotifier").map_or(0, |v| parse_num(v, "EventNotifier")));
        match child(*n, "Value") {
            Some(v) => variant(&cx, &mut w, v),
            None => w.u8(0),
        }
        let dt = match attr("DataType") {
            Some(d) => cx.node_id(d),
            None if is_var => Id::Numeric(0, 24),
            None => Id::NULL,
        };
        w.node_id(&dt);
        w.i32(attr("ValueRank").map_or(-1, |v| parse_num(v, "ValueRank")));
        match attr("ArrayDimensions").filter(|a| !a.trim().is_empty()) {
            None => w.i32(0),
            Some(a) => {
                let dims: Vec<u32> = a
                    .split(',')
                    .map(|x| parse_num(x, "ArrayDimensions"))
                    .collect();
                w.i32(dims.len() as i32);
                dims.iter().for_each(|d| w.u32(*d));
            }
        }
        let al: u8 = if is_var {
            attr("AccessLevel").map_or(1, |v| parse_num(v, "AccessLevel"))
        } else {
            0
        };
        let ual: u8 = if is_var {
            attr("UserAccessLevel").map_or(al, |v| parse_num(v, "UserAccessLevel"))
        } else {
            0
        };
        w.u8(al);
        w.u8(ual);
        if let Some(x) = access_level_ex {
            w.u32(x);
        }
        w.f64(
            attr("MinimumSamplingInterval")
                .map_or(0.0, |v| parse_num(v, "MinimumSamplingInterval")),
        );
        if let Some(d) = def {
            let Id::Numeric(0, nid) = id else {
                panic!("DataType {id_str} is not numeric ns=0")
            };
            let (enc, body) = definition(&cx, &pre, *n, nid, d);
            w.extension_object(enc, &body);
        }
        let refs: Vec<Node> = child(*n, "References")
            .map(|r| elements(r).collect())
            .unwrap_or_default();
        w.i32(refs.len() as i32);
        for r in refs {
            assert_eq!(r.tag_name().name(), "Reference");
            w.node_id(&cx.node_id(r.attribute("ReferenceType").expect("ReferenceType")));
            w.bool(r.attribute("IsForward") != Some("false"));
            w.node_id(&cx.node_id(text(r)));
        }
    }
    Ns0Out {
        blob: w.b,
        node_count: node_els.len(),
    }
}

pub fn loader_rs(node_count: usize) -> String {
    LOADER.replace("@NODE_COUNT@", &node_count.to_string())
}

const LOADER: &str = r#"//! Namespace 0 as decoded from `ns0.bin`, which uaring-codegen writes from
//! Opc.Ua.NodeSet2.xml (XML values already converted to binary Variants).
//!
//! Blob format (OPC UA Binary, little-endian):
//!
//! ```text
//! header:  Byte[4] "UAN0", UInt32 version (1), Int32 node count
//! node:    NodeId node_id; Int32 node_class; QualifiedName browse_name;
//!          LocalizedText display_name; LocalizedText description;
//!          UInt32 write_mask; UInt32 user_write_mask;
//!          Byte flags (1 is_abstract, 2 symmetric, 4 contains_no_loops, 8 historizing,
//!                      16 executable, 32 user_executable, 64 access_level_ex present,
//!                      128 data_type_definition present);
//!          LocalizedText inverse_name; Byte event_notifier; Variant value;
//!          NodeId data_type; Int32 value_rank; UInt32[] array_dimensions;
//!          Byte access_level; Byte user_access_level; [UInt32 access_level_ex];
//!          Double minimum_sampling_interval; [ExtensionObject data_type_definition];
//!          Int32 n, then n × (NodeId reference_type, Boolean is_forward, NodeId target)
//! ```
//!
//! Defaults of the NodeSet schema are applied at generation time: ValueRank -1,
//! AccessLevel 1 (CurrentRead), UserAccessLevel = AccessLevel, MinimumSamplingInterval 0,
//! Executable/UserExecutable true for methods, DataType i=24 for variables without one.

use super::types::NodeClass;
use crate::encoding::{Decode, DecodeError, DecodeLimits, DecodeResult, Decoder};
use crate::types::{ExtensionObject, LocalizedText, NodeId, QualifiedName, Variant};

/// The encoded nodes.
pub static NS0_BIN: &[u8] = include_bytes!("ns0.bin");

/// How many nodes `NS0_BIN` holds.
pub const NODE_COUNT: usize = @NODE_COUNT@;

/// One reference as declared in the NodeSet (inverses are not added).
#[derive(Clone, Debug, PartialEq)]
pub struct Ns0Reference {
    pub reference_type: NodeId,
    pub is_forward: bool,
    pub target: NodeId,
}

/// One node of namespace 0 with every attribute (unused ones at their defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct Ns0Node {
    pub node_id: NodeId,
    pub node_class: NodeClass,
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    pub description: LocalizedText,
    pub write_mask: u32,
    pub user_write_mask: u32,
    pub is_abstract: bool,
    pub symmetric: bool,
    pub inverse_name: LocalizedText,
    pub contains_no_loops: bool,
    pub event_notifier: u8,
    /// `Variant::Empty` when the node has no value.
    pub value: Variant,
    pub data_type: NodeId,
    pub value_rank: i32,
    pub array_dimensions: Vec<u32>,
    pub access_level: u8,
    pub user_access_level: u8,
    pub access_level_ex: Option<u32>,
    pub minimum_sampling_interval: f64,
    pub historizing: bool,
    pub executable: bool,
    pub user_executable: bool,
    /// A StructureDefinition or EnumDefinition (binary body) for DataTypes with a `<Definition>`.
    pub data_type_definition: Option<ExtensionObject>,
    pub references: Vec<Ns0Reference>,
}

/// Decodes every node of namespace 0.
pub fn nodes() -> DecodeResult<Vec<Ns0Node>> {
    decode_blob(NS0_BIN)
}

/// Decodes a blob in the format above.
pub fn decode_blob(blob: &[u8]) -> DecodeResult<Vec<Ns0Node>> {
    let limits = DecodeLimits {
        max_string_len: 1 << 24,
        max_byte_string_len: 1 << 24,
        max_array_len: 1 << 20,
        max_depth: 100,
        // The checked-in blob (built from the NodeSet at generation time), all of it.
        max_decoded_size: 1 << 30,
    };
    let mut d = Decoder::new(blob, limits);
    if d.take(4, "ns0 magic")? != b"UAN0" {
        return Err(DecodeError::decoding("ns0 magic"));
    }
    if u32::decode(&mut d)? != 1 {
        return Err(DecodeError::decoding("ns0 version"));
    }
    let n = d.read_length(limits.max_array_len, 16, "ns0 node count")?.unwrap_or(0);
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        nodes.push(decode_node(&mut d)?);
    }
    if !d.is_empty() {
        return Err(DecodeError::decoding("ns0 trailing bytes"));
    }
    Ok(nodes)
}

fn decode_node(d: &mut Decoder<'_>) -> DecodeResult<Ns0Node> {
    let node_id = NodeId::decode(d)?;
    let node_class = NodeClass(i32::decode(d)?);
    let browse_name = QualifiedName::decode(d)?;
    let display_name = LocalizedText::decode(d)?;
    let description = LocalizedText::decode(d)?;
    let write_mask = u32::decode(d)?;
    let user_write_mask = u32::decode(d)?;
    let flags = u8::decode(d)?;
    let inverse_name = LocalizedText::decode(d)?;
    let event_notifier = u8::decode(d)?;
    let value = Variant::decode(d)?;
    let data_type = NodeId::decode(d)?;
    let value_rank = i32::decode(d)?;
    let array_dimensions = Vec::<u32>::decode(d)?;
    let access_level = u8::decode(d)?;
    let user_access_level = u8::decode(d)?;
    let access_level_ex = if flags & 64 != 0 { Some(u32::decode(d)?) } else { None };
    let minimum_sampling_interval = f64::decode(d)?;
    let data_type_definition = if flags & 128 != 0 { Some(ExtensionObject::decode(d)?) } else { None };
    let n = d.read_length(d.limits().max_array_len, 5, "ns0 references")?.unwrap_or(0);
    let mut references = Vec::with_capacity(n);
    for _ in 0..n {
        references.push(Ns0Reference {
            reference_type: NodeId::decode(d)?,
            is_forward: bool::decode(d)?,
            target: NodeId::decode(d)?,
        });
    }
    Ok(Ns0Node {
        node_id,
        node_class,
        browse_name,
        display_name,
        description,
        write_mask,
        user_write_mask,
        is_abstract: flags & 1 != 0,
        symmetric: flags & 2 != 0,
        inverse_name,
        contains_no_loops: flags & 4 != 0,
        event_notifier,
        value,
        data_type,
        value_rank,
        array_dimensions,
        access_level,
        user_access_level,
        access_level_ex,
        minimum_sampling_interval,
        historizing: flags & 8 != 0,
        executable: flags & 16 != 0,
        user_executable: flags & 32 != 0,
        data_type_definition,
        references,
    })
}
"#;
