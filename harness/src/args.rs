//! Command-line arguments: `--key value` and `--flag`, the last occurrence of
//! a key wins (so a sweep can append a variant's arguments to a scenario's),
//! and a shell-like splitter for `--server-args` and variant files.

use std::collections::BTreeMap;

/// Options that take no value.
pub const FLAGS: &[&str] = &["json", "help", "verbose", "no-pin", "keep-server"];

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Args {
    pub values: BTreeMap<String, String>,
    pub flags: Vec<String>,
    pub positional: Vec<String>,
}

impl Args {
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Args, String> {
        let mut a = Args::default();
        let mut i = 0;
        while i < items.len() {
            let item = items[i].as_ref();
            if let Some(key) = item.strip_prefix("--") {
                if let Some((k, v)) = key.split_once('=') {
                    a.values.insert(k.to_string(), v.to_string());
                } else if FLAGS.contains(&key) {
                    if !a.flags.iter().any(|f| f == key) {
                        a.flags.push(key.to_string());
                    }
                } else {
                    let v = items.get(i + 1).ok_or_else(|| format!("--{key} needs a value"))?;
                    a.values.insert(key.to_string(), v.as_ref().to_string());
                    i += 1;
                }
            } else {
                a.positional.push(item.to_string());
            }
            i += 1;
        }
        Ok(a)
    }

    pub fn flag(&self, name: &str) -> bool {
        self.flags.iter().any(|f| f == name)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(|s| s.as_str())
    }

    pub fn str_or(&self, key: &str, default: &str) -> String {
        self.get(key).unwrap_or(default).to_string()
    }

    pub fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> Result<T, String> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{key}: cannot parse {v:?}")),
        }
    }
}

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
    fn last_value_wins_and_flags() {
        let a = Args::parse(&["run", "--clients", "4", "--json", "--clients=8", "--scenario", "read"]).unwrap();
        assert_eq!(a.positional, vec!["run"]);
        assert_eq!(a.get("clients"), Some("8"));
        assert!(a.flag("json"));
        assert_eq!(a.num::<u32>("clients", 1).unwrap(), 8);
        assert_eq!(a.num::<u32>("inflight", 32).unwrap(), 32);
        assert!(a.num::<u32>("scenario", 1).is_err());
    }

    #[test]
    fn missing_value_is_an_error() {
        assert!(Args::parse(&["--clients"]).is_err());
    }

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
        let s = substitute("--port {port} --n {items} {other}", &[("port", "4840".into()), ("items", "10".into())]);
        assert_eq!(s, "--port 4840 --n 10 {other}");
    }
}
