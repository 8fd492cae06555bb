//! `uaring-bench run --scenario push` against `open62541-plant` (the plant contract on
//! open62541): 200 variables pushed at 50 Hz by the server's `push` thread, two sessions of
//! 100 items each. Every change must arrive: no gap in any item's sequence of k values.
//!
//! The `uaring-bench` binary: $UARING_BENCH, else `uaring-bench` in this test's target
//! directory (`cargo test --workspace` builds it; or `cargo build -p uaring-harness`).
//! The run is measured on a shared machine: no CPU figure is asserted, only that each is
//! reported, and the latency bound is a hang guard.

use std::process::Command;

mod common;
use common::bench_bin;

const PLANT: &str = env!("CARGO_BIN_EXE_open62541-plant");

#[test]
fn push_scenario_against_the_open62541_plant() {
    let out = Command::new(bench_bin())
        .args([
            "run",
            "--scenario",
            "push",
            "--variables",
            "200",
            "--push-rate",
            "50",
            "--sessions",
            "2",
        ])
        .args([
            "--duration",
            "3",
            "--warmup",
            "1",
            "--server-cpus",
            "0",
            "--client-cpus",
            "1",
            "--foreign-max",
            "1000",
            "--json",
        ])
        .args([
            "--server-exe",
            PLANT,
            "--server-args",
            "--listen 127.0.0.1:{port} --variables {variables} --rate {push_rate}",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "uaring-bench failed:\n{stdout}\n{stderr}"
    );
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    assert_eq!(v["scenario"], "push");
    assert_eq!(u("errors"), 0, "{v}");
    assert_eq!(
        (u("sessions"), u("items"), u("variables"), u("queue_size")),
        (2, 100, 200, 11),
        "{v}"
    );
    // Every change delivered, in order.
    assert!(u("notifications") > 0, "{v}");
    assert!(f("delivered_share") >= 0.99, "{v}");
    assert_eq!(u("changes_missing"), 0, "a gap in some item's k: {v}");
    assert_eq!(u("out_of_order_notifications"), 0, "{v}");
    assert_eq!(u("overflow_notifications"), 0, "{v}");
    assert!(
        u("changes_delivered") > 0 && u("changes_delivered") <= u("notifications"),
        "{v}"
    );
    // The items saw the pushes: k advanced by every change delivered (no gaps), at a rate of
    // the offered 200 × 50 / s (all 200 variables are subscribed once), give or take a
    // loaded machine.
    assert_eq!(u("pushed_updates"), u("changes_delivered"), "{v}");
    assert_eq!(f("offered_updates_per_s"), 10_000.0);
    let seen = f("pushed_updates_per_s");
    assert!(
        seen > 5_000.0 && seen < 12_000.0,
        "{seen} pushed updates/s: {v}"
    );
    // The latency of every timestamped notification (SourceTimestamp → receipt).
    assert_eq!(
        u("ops"),
        u("notifications"),
        "every notification carries a SourceTimestamp: {v}"
    );
    let (p50, p99, p999, max) = (f("p50_us"), f("p99_us"), f("p999_us"), f("max_us"));
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max, "{v}");
    assert!(max < 10_000_000.0, "hang guard: {v}");
    // The server's CPU with and without its `push` thread, which the harness found by name.
    assert_eq!(u("server_app_threads"), 1, "one thread named push: {v}");
    for k in [
        "server_cpu_us_per_notification",
        "server_cpu_us_per_notification_excl_push",
        "server_cpu_us_per_update",
        "server_cpu_us_per_update_excl_push",
    ] {
        assert!(f(k) > 0.0, "{k}: {v}");
    }
    assert!(
        f("server_cpu_us_per_notification_excl_push") < f("server_cpu_us_per_notification"),
        "{v}"
    );
}

#[test]
fn the_plant_refuses_a_port_it_cannot_use() {
    let out = Command::new(PLANT)
        .args(["--listen", "127.0.0.1:0", "--variables", "1", "--rate", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("fixed port"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
