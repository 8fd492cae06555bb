//! Identifier conventions shared by the generators.

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
];

/// `NamespaceURI` → `namespace_uri`, `EURange` → `eu_range`, `Type` → `type_`.
pub fn snake(name: &str) -> String {
    let c: Vec<char> = name.chars().collect();
    let mut s = String::with_capacity(name.len() + 4);
    for i in 0..c.len() {
        let ch = c[i];
        if ch.is_ascii_uppercase() && i > 0 {
            let prev = c[i - 1];
            let next_lower = c.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase()
                || prev.is_ascii_digit()
                || (prev.is_ascii_uppercase() && next_lower)
            {
                s.push('_');
            }
        }
        if ch == '-' || ch == ' ' || ch == '.' {
            s.push('_');
        } else {
            s.push(ch.to_ascii_lowercase());
        }
    }
    escape(s)
}

/// Appends `_` to Rust keywords.
pub fn escape(s: String) -> String {
    if KEYWORDS.contains(&s.as_str()) {
        s + "_"
    } else {
        s
    }
}

/// A Rust string literal.
pub fn lit(s: &str) -> String {
    format!("{s:?}")
}

#[cfg(test)]
mod tests {
    use super::snake;
    #[test]
    fn snake_case() {
        assert_eq!(snake("NamespaceURI"), "namespace_uri");
        assert_eq!(snake("EURange"), "eu_range");
        assert_eq!(snake("Type"), "type_");
        assert_eq!(snake("RequestHeader"), "request_header");
        assert_eq!(snake("DataSetWriterIds"), "data_set_writer_ids");
        assert_eq!(snake("SessionId"), "session_id");
        assert_eq!(snake("X509Certificate"), "x509_certificate");
    }
}
