//! `uaring-bench run --scenario history-read-*` against `open62541-history-server` (the
//! `history_bench` contract on open62541's default history database and memory backend):
//! the raw read returns every pre-loaded value (uaring-bench checks each value and its source
//! timestamp), through continuation points when the server's page is smaller than the
//! series; the processed read is answered with a ServiceFault (`BadNotSupported`: open62541's
//! default database has no readProcessed), which is how the comparison's rows show it.
//!
//! The `uaring-bench` binary: $UARING_BENCH, else `uaring-bench` in this test's target
//! directory (`cargo build -p uaring-harness`). Each run lasts a moment; the checks are on what
//! came back, never on how fast.

use std::process::Command;

mod common;
use common::bench_bin;

const SERVER: &str = env!("CARGO_BIN_EXE_open62541-history-server");

/// One short run with the server's extra `server_args`; the exit code and the JSON result.
fn run(args: &[&str], server_args: &str) -> (Option<i32>, serde_json::Value) {
    let out = Command::new(bench_bin())
        .arg("run")
        .args(args)
        .args([
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--server-cpus",
            "0",
            "--client-cpus",
            "1",
            "--foreign-max",
            "1000",
            "--max-repeats",
            "0",
            "--json",
            "--server-exe",
            SERVER,
            "--server-args",
        ])
        .arg(format!(
            "--listen 127.0.0.1:{{port}} --preload {{history_values}} --pattern {{history_pattern}} {server_args}"
        ))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{args:?}: no JSON result:\n{stdout}\n{stderr}"));
    let v = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    (out.status.code(), v)
}

fn num(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"))
}

#[test]
fn raw_read_returns_every_preloaded_value() {
    let (code, v) = run(
        &[
            "--scenario",
            "history-read-raw",
            "--history-values",
            "5000",
            "--clients",
            "1",
        ],
        "",
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(num(&v, "errors"), 0.0, "{v}");
    assert!(num(&v, "ops") >= 1.0, "{v}");
    assert_eq!(num(&v, "values_per_op"), 5000.0, "{v}");
    assert_eq!(
        num(&v, "calls_per_op"),
        1.0,
        "one answer of at most 100,000: {v}"
    );
    assert_eq!(v["history_pattern"], "count", "{v}");
}

#[test]
fn raw_read_follows_the_memory_backends_continuation_points() {
    let (code, v) = run(
        &[
            "--scenario",
            "history-read-raw",
            "--history-values",
            "5000",
            "--clients",
            "1",
        ],
        "--max-response-values 1000",
    );
    assert_eq!(code, Some(0), "{v}");
    assert_eq!(num(&v, "errors"), 0.0, "{v}");
    assert_eq!(num(&v, "values_per_op"), 5000.0, "{v}");
    assert_eq!(
        num(&v, "calls_per_op"),
        5.0,
        "1000 values an answer, the rest through continuation points: {v}"
    );
}

#[test]
fn processed_read_is_not_supported() {
    let (code, v) = run(
        &[
            "--scenario",
            "history-read-processed",
            "--history-values",
            "3600",
            "--history-pattern",
            "slow",
            "--intervals",
            "60",
            "--clients",
            "1",
        ],
        "",
    );
    assert_eq!(code, Some(1), "errors make the exit code 1: {v}");
    assert_eq!(num(&v, "ops"), 0.0, "{v}");
    assert!(num(&v, "errors") >= 1.0, "{v}");
    // open62541 answers a Bad service result as a ServiceFault (here BadNotSupported).
    assert_eq!(
        v["first_error"], "HistoryRead answered with ServiceFault",
        "{v}"
    );
}

#[test]
fn the_ingest_scenario_is_refused() {
    let out = Command::new(SERVER)
        .args(["--listen", "127.0.0.1:4999", "--rate", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not supported"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
