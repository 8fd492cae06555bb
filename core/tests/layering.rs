//! core's modules depend one way (docs/Architecture.md, "Dependencies run one way"): this
//! reads every source file of `core/src` and fails on a `crate::<module>` reference from a
//! module to one later in the order. Comments and `#[cfg(test)]` modules are left out: a
//! test may use anything.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Bottom first. The modules of one entry use each other freely (the built-in types, their
/// encoding and the generated structures are one layer).
const LAYERS: &[&[&str]] = &[
    &["types", "encoding", "generated", "time", "random"],
    &["config", "roles"],
    &["metrics"],
    &["transport", "secure_channel"],
    &["response"],
    &["address_space"],
    &["events"],
    &["history"],
    &["shared"],
    &["session"],
    &["subscription"],
    &["server"],
    &["services"],
    &["client"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text without `//` comments and without a `#[cfg(test)]` module (and what follows it:
/// test modules end their files).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]")
            && lines.get(i + 1).is_some_and(|next| {
                let next = next.trim_start();
                next.starts_with("mod ") || next.starts_with("pub mod ")
            })
        {
            break;
        }
        let line = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// The modules `code` names as `crate::<module>`.
fn references(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.starts_with(|c: char| c.is_ascii_lowercase()) {
            found.insert(name);
        }
    }
    found
}

#[test]
fn no_module_reaches_up() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(files.len() > 50, "the sources were found: {}", files.len());
    let mut upward = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap();
        let Some(first) = rel.iter().next().and_then(|c| c.to_str()) else {
            continue;
        };
        if first == "lib.rs" {
            continue;
        }
        let module = first.trim_end_matches(".rs");
        let own = layer_of(module)
            .unwrap_or_else(|| panic!("module `{module}` is in no layer of this test"));
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        for used in references(&code) {
            if used == module {
                continue;
            }
            match layer_of(&used) {
                Some(l) if l > own => upward.push(format!("{} uses crate::{used}", rel.display())),
                Some(_) => {}
                None => panic!(
                    "{} names `crate::{used}`, a module in no layer of this test",
                    rel.display()
                ),
            }
        }
    }
    assert!(
        upward.is_empty(),
        "references that point up the layers:\n{}",
        upward.join("\n")
    );
}

/// The check finds what it looks for: an upward reference in a made-up file is reported, a
/// comment or a test module is not.
#[test]
fn the_check_sees_references_and_skips_comments_and_tests() {
    let code = code_of(
        "use crate::server::service_state::ServiceState; // crate::client\n\
         #[cfg(test)]\nfn g() {}\n\
         fn f() { crate::services::dispatch(); }\n\
         #[cfg(test)]\nmod tests { use crate::history; }\n",
    );
    let found: Vec<String> = references(&code).into_iter().collect();
    assert_eq!(found, ["server", "services"]);
}
