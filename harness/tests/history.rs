//! `uaring-bench run --scenario history-*` through the binary against the `history_bench`
//! example (shards/examples/history_bench.rs), which cargo builds at
//! `target/<profile>/examples/history_bench` (`cargo test --workspace`, or
//! `cargo build -p uaring --example history_bench` before `cargo test -p uaring-harness`).
//! Each scenario runs for a moment; the checks are on what came back (values, counts), never
//! on how fast.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

const BENCH: &str = env!("CARGO_BIN_EXE_uaring-bench");

/// target/<profile>/deps/history-… → target/<profile>/examples/history_bench.
fn example() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let p = me
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join("history_bench");
    assert!(
        p.exists(),
        "the history_bench example is missing at {}: it is built by `cargo test --workspace` or `cargo build -p uaring --example history_bench`",
        p.display()
    );
    p
}

/// One short run; its JSON result.
fn run(args: &[&str]) -> Value {
    let ex = example();
    let out = Command::new(BENCH)
        .arg("run")
        .args(args)
        .args([
            "--server-bin",
            ex.to_str().unwrap(),
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--max-repeats",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {stdout}\n{stderr}");
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or_else(|| panic!("{args:?}: no JSON result: {stdout}\n{stderr}"));
    serde_json::from_str(line).unwrap()
}

fn num(o: &Value, k: &str) -> f64 {
    o.get(k)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{k} missing: {o}"))
}

#[test]
fn raw_read_returns_every_preloaded_value_through_continuation_points() {
    let o = run(&[
        "--scenario",
        "history-read-raw",
        "--history-values",
        "5000",
        "--values-per-call",
        "1000",
        "--clients",
        "1",
    ]);
    assert_eq!(num(&o, "errors"), 0.0, "{o}");
    assert!(num(&o, "ops") >= 1.0, "{o}");
    assert_eq!(num(&o, "values_per_op"), 5000.0, "{o}");
    assert_eq!(
        num(&o, "calls_per_op"),
        5.0,
        "1000 values a call, the rest through continuation points: {o}"
    );
    assert!(num(&o, "storage_bytes_per_sample") > 0.0, "{o}");
}

#[test]
fn processed_read_returns_one_value_per_interval() {
    let o = run(&[
        "--scenario",
        "history-read-processed",
        "--history-values",
        "7200",
        "--intervals",
        "120",
        "--history-pattern",
        "random",
        "--clients",
        "1",
    ]);
    assert_eq!(num(&o, "errors"), 0.0, "{o}");
    assert!(num(&o, "ops") >= 1.0, "{o}");
    assert_eq!(num(&o, "values_per_op"), 120.0, "{o}");
    let agg = o["aggregate"].as_str().unwrap();
    assert!(agg == "Average" || agg == "TimeAverage", "{o}");
    assert!(num(&o, "storage_probe_bytes_per_sample") > 0.0, "{o}");
}

#[test]
fn ingest_counts_what_the_store_took_beside_the_reads() {
    let o = run(&[
        "--scenario",
        "history-ingest",
        "--variables",
        "10",
        "--push-rate",
        "100",
        "--clients",
        "1",
        "--inflight",
        "2",
    ]);
    assert_eq!(num(&o, "errors"), 0.0, "{o}");
    assert!(
        num(&o, "ops") >= 1.0,
        "Reads answered beside the ingest: {o}"
    );
    assert_eq!(num(&o, "offered_samples_per_s"), 1000.0, "{o}");
    assert!(num(&o, "ingest_samples_per_s") > 0.0, "{o}");
    assert!(num(&o, "pushed_samples_per_s") > 0.0, "{o}");
    // Without --push-rate nothing is pushed: the baseline.
    let o = run(&[
        "--scenario",
        "history-ingest",
        "--variables",
        "10",
        "--clients",
        "1",
        "--inflight",
        "2",
    ]);
    assert_eq!(num(&o, "errors"), 0.0, "{o}");
    assert_eq!(num(&o, "ingest_samples_per_s"), 0.0, "{o}");
}
