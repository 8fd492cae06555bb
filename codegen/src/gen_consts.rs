//! Writes status_codes.rs, node_ids.rs and attribute_ids.rs from the CSV files.

use crate::gen_types::HEADER;
use crate::naming::lit;
use std::collections::BTreeSet;
use std::fmt::Write;

/// Splits one CSV line (fields may be double-quoted, `""` is a quote).
pub fn csv_fields(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

pub fn csv_rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.trim().is_empty())
        .map(csv_fields)
        .collect()
}

fn check_ident(s: &str) {
    assert!(
        s.chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "not an identifier: {s:?}"
    );
}

pub fn status_codes(text: &str) -> String {
    let mut o = String::from(HEADER);
    o.push_str("//! The status codes of StatusCode.csv.\nuse crate::types::StatusCode;\n\n#[allow(non_upper_case_globals)]\nimpl StatusCode {\n");
    let rows = csv_rows(text);
    let mut parsed = Vec::new();
    for r in &rows {
        assert!(r.len() >= 2, "StatusCode.csv row {r:?}");
        check_ident(&r[0]);
        let v =
            u32::from_str_radix(r[1].trim_start_matches("0x"), 16).expect("StatusCode.csv value");
        if let Some(d) = r.get(2).filter(|d| !d.is_empty()) {
            writeln!(o, "    /// {}", d.replace('\n', " ")).unwrap();
        }
        writeln!(
            o,
            "    pub const {}: StatusCode = StatusCode(0x{v:08X});",
            r[0]
        )
        .unwrap();
        parsed.push((r[0].clone(), v));
    }
    o.push_str("}\n\n/// The symbolic name of a status code (the code bits, `code & 0xFFFF_0000`).\npub fn name_of(code: u32) -> Option<&'static str> {\n    Some(match code {\n");
    let mut seen = BTreeSet::new();
    for (n, v) in &parsed {
        if seen.insert(*v) {
            writeln!(o, "        0x{v:08X} => {},", lit(n)).unwrap();
        }
    }
    o.push_str("        _ => return None,\n    })\n}\n");
    o
}

pub fn node_ids(rows: &[Vec<String>]) -> String {
    let mut o = String::from(HEADER);
    o.push_str("//! The numeric node ids of namespace 0 (NodeIds.csv): `<BrowsePath>` = id.\n#![allow(non_upper_case_globals)]\n\n");
    for r in rows {
        check_ident(&r[0]);
        let id: u32 = r[1].parse().expect("NodeIds.csv id");
        writeln!(o, "/// {}\npub const {}: u32 = {id};", r[2], r[0]).unwrap();
    }
    o
}

pub fn attribute_ids(text: &str) -> String {
    let mut o = String::from(HEADER);
    o.push_str("//! The attribute ids (AttributeIds.csv).\n#![allow(non_upper_case_globals)]\n\n");
    let rows = csv_rows(text);
    let mut parsed = Vec::new();
    for r in &rows {
        check_ident(&r[0]);
        let id: u32 = r[1].parse().expect("AttributeIds.csv id");
        writeln!(o, "pub const {}: u32 = {id};", r[0]).unwrap();
        parsed.push((r[0].clone(), id));
    }
    o.push_str("\n/// The name of an attribute id.\npub fn name_of(id: u32) -> Option<&'static str> {\n    Some(match id {\n");
    for (n, id) in &parsed {
        writeln!(o, "        {id} => {},", lit(n)).unwrap();
    }
    o.push_str("        _ => return None,\n    })\n}\n");
    o
}
