//! The example configuration parses, and every key in it is documented.

use uaring::config::FileConfig;
use uaring::ua_handler::server_config;

const EXAMPLE: &str = include_str!("../../docs/uaring.example.toml");
const DOC: &str = include_str!("../../docs/Configuration.md");

#[test]
fn example_parses_into_runtime_and_server_config() {
    let mut file = FileConfig::parse(EXAMPLE).expect("example parses");
    assert_eq!(
        file.runtime,
        uaring::RuntimeConfig::default(),
        "the example shows the runtime defaults"
    );
    let (security, users) =
        uaring::security::take_config(&mut file.server).expect("[security] parses");
    assert!(users.is_empty());
    let defaults = uaring::security::SecurityConfig::default();
    assert_eq!(
        format!("{security:?}"),
        format!("{defaults:?}"),
        "the example shows the security defaults"
    );
    let content = uaring::content::take_config(&mut file.server, true, false)
        .expect("the served content's keys parse")
        .expect("served");
    assert_eq!(
        content,
        uaring::content::ContentConfig::serve_defaults(false),
        "the example shows the served content's defaults"
    );
    let handshake =
        uaring::handshake_pool::take_config(&mut file.server).expect("[handshake] parses");
    assert_eq!(
        handshake,
        uaring::handshake_pool::HandshakeConfig::default(),
        "the example shows the handshake defaults"
    );
    let push = uaring::push::take_config(&mut file.server).expect("[push] parses");
    assert_eq!(
        format!("{push:?}"),
        format!("{:?}", uaring::push::PushConfig::default()),
        "the example shows the push defaults"
    );
    let server =
        server_config(&file.server, false).expect("core's ServerConfig accepts the example");
    assert_eq!(
        server,
        uaring_core::config::ServerConfig::default(),
        "the example shows core's defaults"
    );
    let contract = server_config(&file.server, true).expect("contract");
    assert!(contract.application.contract_mode);
}

#[test]
fn embedded_default_is_valid() {
    let file = FileConfig::parse(uaring::cli::DEFAULT_CONFIG).expect("default parses");
    server_config(&file.server, false).expect("server part");
}

#[test]
fn every_example_key_is_documented() {
    let table: toml::Table = EXAMPLE.parse().expect("toml");
    for (section, value) in &table {
        assert!(
            DOC.contains(&format!("`[{section}]`")) || DOC.contains(&format!("## `[{section}]`")),
            "section [{section}] undocumented"
        );
        let Some(keys) = value.as_table() else {
            continue;
        };
        for key in keys.keys() {
            assert!(
                DOC.contains(&format!("| `{key}` |")),
                "key {section}.{key} has no row in docs/Configuration.md"
            );
        }
    }
    // stats_file is commented out in the example (no default) but documented.
    assert!(DOC.contains("| `stats_file` |"));
}

#[test]
fn handshake_section_is_checked() {
    let parse = |text: &str| {
        let mut file = FileConfig::parse(text).expect("runtime part is fine");
        uaring::handshake_pool::take_config(&mut file.server)
    };
    assert_eq!(
        parse("[handshake]\nthreads = 0\n").unwrap().threads,
        0,
        "0 = inline, accepted"
    );
    assert!(
        parse("[handshake]\nthreads = 2\nqueue_depth = 0\n").is_err(),
        "a pool needs a queue"
    );
    assert!(parse("[handshake]\nthreads = 65\n").is_err());
    assert!(parse("[handshake]\nnice = 20\n").is_err());
    assert!(parse("[handshake]\nthread = 2\n").is_err(), "unknown key");
}

#[test]
fn batched_waiting_is_checked() {
    // FileConfig::parse validates the runtime section.
    let check = |text: &str| FileConfig::parse(text).map(|_| ());
    assert!(check("[runtime]\nbatch_wait_us = 0\n").is_ok(), "0 = off");
    assert!(check("[runtime]\nbatch_wait_us = 200\nbatch_completions = 64\n").is_ok());
    assert!(check("[runtime]\nbatch_wait_us = 10001\n").is_err());
    assert!(check("[runtime]\nbatch_completions = 0\n").is_err());
}

#[test]
fn unknown_keys_are_rejected() {
    let file = FileConfig::parse("[application]\napplication_urii = \"x\"\n")
        .expect("runtime part is fine");
    assert!(server_config(&file.server, false).is_err());
    assert!(FileConfig::parse("[runtime]\nring_entires = 8\n").is_err());
}

#[test]
fn nodesets_entries_are_read_and_checked() {
    let file =
        FileConfig::parse("[[nodesets]]\nfile = \"a.xml\"\n[[nodesets]]\nfile = \"b.xml\"\n")
            .unwrap();
    let files = uaring::ua_handler::nodeset_files(&file.server).unwrap();
    assert_eq!(
        files,
        [
            std::path::PathBuf::from("a.xml"),
            std::path::PathBuf::from("b.xml")
        ]
    );
    server_config(&file.server, false).expect("core does not see [[nodesets]]");
    let bad = FileConfig::parse("[[nodesets]]\npath = \"a.xml\"\n").unwrap();
    let e = uaring::ua_handler::nodeset_files(&bad.server).unwrap_err();
    assert!(e.contains("[[nodesets]]") && e.contains("path"), "{e}");
}

#[test]
fn push_section_is_checked() {
    let parse = |text: &str| {
        let mut file = FileConfig::parse(text).expect("runtime part is fine");
        uaring::push::take_config(&mut file.server)
    };
    assert!(parse("").unwrap().enabled, "on by default (role-gated)");
    assert!(!parse("[push]\nenabled = false\n").unwrap().enabled);
    for bad in [
        "trust_list_bytes_max = 0",
        "trust_list_bytes_max = 100000000",
        "handles_max = 0",
        "read_bytes_max = 0",
        "activity_timeout_ms = 0",
        "handles_per_session_max = 9",
        "no_such_key = 1",
    ] {
        assert!(parse(&format!("[push]\n{bad}\n")).is_err(), "{bad}");
    }
}
