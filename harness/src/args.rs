//! Words of variant files and `--server-args`: a shell-like splitter and
//! `{placeholder}` substitution. The command line itself is parsed by clap
//! (`crate::cli`).

/// Splits a command line like a POSIX shell does for words: whitespace
/// separates, single quotes are literal, double quotes allow `\"` and `\\`.
pub fn split_words(text: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed ' in {text:?}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(x @ ('"' | '\\' | '$')) => cur.push(x),
                            Some(x) => {
                                cur.push('\\');
                                cur.push(x)
                            }
                            None => return Err(format!("unclosed \" in {text:?}")),
                        },
                        Some(x) => cur.push(x),
                        None => return Err(format!("unclosed \" in {text:?}")),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(x) = chars.next() {
                    cur.push(x);
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Replaces `{name}` placeholders; unknown placeholders are left as they are.
pub fn substitute(text: &str, vars: &[(&str, String)]) -> String {
    let mut out = text.to_string();
    for (k, v) in vars {
        out = out.replace(&format!("{{{k}}}"), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words() {
        assert_eq!(
            split_words(r#"a  'b c' "d \"e\"" f\ g"#).unwrap(),
            vec!["a", "b c", "d \"e\"", "f g"]
        );
        assert_eq!(split_words("  ").unwrap(), Vec::<String>::new());
        assert_eq!(split_words("''").unwrap(), vec![""]);
        assert!(split_words("'x").is_err());
    }

    #[test]
    fn placeholders() {
        let s = substitute(
            "--port {port} --n {items} {other}",
            &[("port", "4840".into()), ("items", "10".into())],
        );
        assert_eq!(s, "--port 4840 --n 10 {other}");
    }
}
