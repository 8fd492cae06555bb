//! Writes core/src/generated/messages.rs: the `Request` and `Response` enums.

use crate::gen_types::HEADER;
use crate::model::{Layout, Model, Ty};
use std::fmt::Write;

/// (variant name, type name, encoding id) of every service request or response.
pub fn services(m: &Model, suffix: &str, header: &str) -> Vec<(String, String, u32)> {
    let mut v = Vec::new();
    for s in &m.structs {
        let first_is_header = matches!(s.layout, Layout::Plain)
            && s.fields
                .first()
                .is_some_and(|f| f.ty == Ty::Struct(header.to_owned()) && !f.array);
        if !first_is_header {
            continue;
        }
        let variant = if let Some(base) = s.name.strip_suffix(suffix) {
            base.to_owned()
        } else if suffix == "Response" && s.name == "ServiceFault" {
            s.name.clone()
        } else {
            continue;
        };
        assert_eq!(
            s.fields[0].name,
            crate::naming::snake(header),
            "{}: header field name",
            s.name
        );
        v.push((variant, s.name.clone(), s.binary_encoding_id));
    }
    v
}

fn gen_enum(
    o: &mut String,
    m: &Model,
    enum_name: &str,
    suffix: &str,
    header: &str,
    accessor: &str,
) {
    let list = services(m, suffix, header);
    writeln!(
        o,
        "/// Every service {} (the structures named `*{suffix}` whose first field is the `{header}`{}), boxed.\n#[derive(Clone, Debug, PartialEq)]\npub enum {enum_name} {{",
        suffix.to_lowercase(),
        if suffix == "Response" { ", and ServiceFault" } else { "" }
    )
    .unwrap();
    for (v, t, _) in &list {
        writeln!(o, "    {v}(Box<{t}>),").unwrap();
    }
    writeln!(o, "}}\n\nimpl {enum_name} {{").unwrap();
    // decode_body
    writeln!(
        o,
        "    /// Decodes the body that follows the encoding NodeId `type_id`. `Ok(None)` when\n    /// `type_id` is not the binary encoding of a known {}.\n    pub fn decode_body(type_id: &NodeId, d: &mut Decoder<'_>) -> DecodeResult<Option<{enum_name}>> {{\n        let Some(id) = type_id.as_ns0() else {{\n            return Ok(None);\n        }};\n        Ok(Some(match id {{",
        suffix.to_lowercase()
    )
    .unwrap();
    for (v, t, id) in &list {
        writeln!(
            o,
            "            {id} => {enum_name}::{v}(Box::new({t}::decode(d)?)),"
        )
        .unwrap();
    }
    writeln!(
        o,
        "            _ => return Ok(None),\n        }}))\n    }}\n"
    )
    .unwrap();
    // encode_with_type_id
    writeln!(
        o,
        "    /// Writes the binary encoding NodeId and then the body.\n    pub fn encode_with_type_id(&self, out: &mut Vec<u8>) {{\n        NodeId::ns0(self.binary_encoding_id()).encode(out);\n        self.encode_body(out);\n    }}\n"
    )
    .unwrap();
    writeln!(o, "    /// Writes the body only.\n    pub fn encode_body(&self, out: &mut Vec<u8>) {{\n        match self {{").unwrap();
    for (v, _, _) in &list {
        writeln!(o, "            {enum_name}::{v}(m) => m.encode(out),").unwrap();
    }
    writeln!(o, "        }}\n    }}\n").unwrap();
    for (mutability, sfx) in [("", ""), ("mut ", "_mut")] {
        writeln!(o, "    pub fn {accessor}{sfx}(&{mutability}self) -> &{mutability}{header} {{\n        match self {{").unwrap();
        for (v, _, _) in &list {
            writeln!(
                o,
                "            {enum_name}::{v}(m) => &{mutability}m.{accessor},"
            )
            .unwrap();
        }
        writeln!(o, "        }}\n    }}\n").unwrap();
    }
    writeln!(o, "    /// The `<Type>_Encoding_DefaultBinary` id.\n    pub fn binary_encoding_id(&self) -> u32 {{\n        match self {{").unwrap();
    for (v, t, _) in &list {
        writeln!(
            o,
            "            {enum_name}::{v}(_) => {t}::BINARY_ENCODING_ID,"
        )
        .unwrap();
    }
    writeln!(o, "        }}\n    }}\n").unwrap();
    writeln!(o, "    /// The schema name of the message type (`\"ReadRequest\"`).\n    pub fn name(&self) -> &'static str {{\n        match self {{").unwrap();
    for (v, t, _) in &list {
        writeln!(o, "            {enum_name}::{v}(_) => {t}::NAME,").unwrap();
    }
    writeln!(o, "        }}\n    }}\n}}\n").unwrap();
    for (v, t, _) in &list {
        writeln!(
            o,
            "impl From<{t}> for {enum_name} {{\n    fn from(m: {t}) -> Self {{\n        {enum_name}::{v}(Box::new(m))\n    }}\n}}\n"
        )
        .unwrap();
    }
}

pub fn generate(m: &Model) -> String {
    let mut o = String::from(HEADER);
    o.push_str(
        "//! The service messages as two enums, keyed by their binary encoding ids.\n#![allow(clippy::all)]\n\nuse super::types::*;\nuse crate::encoding::{Decode, DecodeResult, Decoder, Encode, UaStructure};\nuse crate::types::NodeId;\n\n",
    );
    gen_enum(
        &mut o,
        m,
        "Request",
        "Request",
        "RequestHeader",
        "request_header",
    );
    gen_enum(
        &mut o,
        m,
        "Response",
        "Response",
        "ResponseHeader",
        "response_header",
    );
    o
}

/// Tests for messages: each variant round-trips through encode_with_type_id/decode_body.
pub fn generate_tests(m: &Model) -> String {
    let mut o = String::new();
    for (enum_name, suffix, header) in [
        ("Request", "Request", "RequestHeader"),
        ("Response", "Response", "ResponseHeader"),
    ] {
        let list = services(m, suffix, header);
        writeln!(
            o,
            "#[test]\nfn messages_{}_roundtrip() {{\n    let all: Vec<{enum_name}> = vec![",
            suffix.to_lowercase()
        )
        .unwrap();
        for (_, t, _) in &list {
            writeln!(o, "        sample_{t}().into(),").unwrap();
        }
        writeln!(
            o,
            "    ];\n    assert_eq!(all.len(), {});\n    for msg in &all {{\n        let mut b = Vec::new();\n        msg.encode_with_type_id(&mut b);\n        let mut d = Decoder::new(&b, DecodeLimits::default());\n        let id = NodeId::decode(&mut d).unwrap();\n        assert_eq!(id, NodeId::ns0(msg.binary_encoding_id()));\n        let back = {enum_name}::decode_body(&id, &mut d).unwrap().expect(msg.name());\n        assert_eq!(d.remaining(), 0);\n        assert_eq!(&back, msg);\n        assert_eq!(back.name(), msg.name());\n        let mut m2 = back.clone();\n        m2.{}_mut().request_handle = 4242;\n        assert_ne!(&m2, msg);\n        let _ = m2.{}();\n    }}\n    let mut d = Decoder::new(&[], DecodeLimits::default());\n    assert!({enum_name}::decode_body(&NodeId::ns0(1), &mut d).unwrap().is_none());\n    assert!({enum_name}::decode_body(&NodeId::numeric(1, {}), &mut d).unwrap().is_none());\n}}\n",
            list.len(),
            if suffix == "Request" { "request_header" } else { "response_header" },
            if suffix == "Request" { "request_header" } else { "response_header" },
            list[0].2,
        )
        .unwrap();
    }
    o
}
