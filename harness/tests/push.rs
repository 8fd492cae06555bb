//! `uaring-bench run --scenario push` through the binary: the options it refuses, and a run
//! against the `plant` example (the plant contract on the uaring library), which cargo builds
//! at `target/<profile>/examples/plant` (`cargo test --workspace` builds every package's
//! examples before the tests run). The open62541 plant is measured by
//! harness/peers/open62541/tests/push.rs.

use std::path::PathBuf;
use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_uaring-bench");

/// target/<profile>/deps/push-… → target/<profile>/examples/plant; a missing binary fails.
fn plant_example() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let p = me
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join("plant");
    assert!(
        p.exists(),
        "the plant example is missing at {}: it is built by `cargo test --workspace` or `cargo build -p uaring --example plant`",
        p.display()
    );
    p
}

fn run(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BENCH).arg("run").args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn options_that_do_nothing_for_push_are_refused() {
    let base = [
        "--scenario",
        "push",
        "--variables",
        "10",
        "--push-rate",
        "5",
        "--url",
        "opc.tcp://127.0.0.1:1",
    ];
    for (extra, named) in [
        (&["--sampling-ms", "5"][..], "--sampling-ms"),
        (&["--writers", "2"][..], "--writers"),
        (&["--inflight", "8"][..], "--inflight"),
        (&["--rate", "100"][..], "--rate"),
    ] {
        let (ok, _, err) = run(&[&base[..], extra].concat());
        assert!(!ok, "{extra:?} accepted");
        assert!(
            err.contains(named) && err.contains("push"),
            "{extra:?}: {err}"
        );
    }
    let (ok, _, err) = run(&[
        "--scenario",
        "push",
        "--push-rate",
        "5",
        "--url",
        "opc.tcp://127.0.0.1:1",
    ]);
    assert!(!ok && err.contains("--variables"), "{err}");
    let (ok, _, err) = run(&[
        "--scenario",
        "push",
        "--variables",
        "5",
        "--url",
        "opc.tcp://127.0.0.1:1",
    ]);
    assert!(!ok && err.contains("--push-rate"), "{err}");
    let (ok, _, err) = run(&[
        "--scenario",
        "sub",
        "--queue-size",
        "5",
        "--url",
        "opc.tcp://127.0.0.1:1",
    ]);
    assert!(
        !ok && err.contains("--queue-size") && err.contains("only for the push scenario"),
        "{err}"
    );
}

#[test]
fn push_scenario_against_the_plant_example() {
    let plant = plant_example();
    // uaring-bench starts `examples/plant` beside itself by default: the same file.
    let (ok, stdout, stderr) = run(&[
        "--scenario",
        "push",
        "--variables",
        "200",
        "--push-rate",
        "50",
        "--sessions",
        "2",
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
    ]);
    assert!(
        ok,
        "uaring-bench against {} failed:\n{stdout}\n{stderr}",
        plant.display()
    );
    let v: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let u = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("{k} missing: {v}"));
    assert_eq!(v["server"], "plant", "{v}");
    assert_eq!(u("errors"), 0, "{v}");
    assert!(u("notifications") > 0, "{v}");
    assert!(f("delivered_share") >= 0.99, "{v}");
    assert_eq!(u("changes_missing"), 0, "a gap in some item's k: {v}");
    assert_eq!(u("out_of_order_notifications"), 0, "{v}");
    assert_eq!(u("overflow_notifications"), 0, "{v}");
    assert_eq!(u("pushed_updates"), u("changes_delivered"), "{v}");
    let seen = f("pushed_updates_per_s");
    // Counted from the k values: far from the offered 10,000 a second only if miscounted.
    assert!(
        seen > 1_000.0 && seen < 12_000.0,
        "{seen} pushed updates/s of 10,000 offered: {v}"
    );
    assert_eq!(
        u("ops"),
        u("notifications"),
        "every notification carries a SourceTimestamp: {v}"
    );
    let (p50, p99, p999, max) = (f("p50_us"), f("p99_us"), f("p999_us"), f("max_us"));
    assert!(p50 > 0.0 && p50 <= p99 && p99 <= p999 && p999 <= max, "{v}");
    assert!(max < 10_000_000.0, "hang guard: {v}");
    assert_eq!(u("server_app_threads"), 1, "one thread named push: {v}");
    for k in [
        "server_cpu_us_per_notification",
        "server_cpu_us_per_notification_excl_push",
        "server_cpu_us_per_update",
        "server_cpu_us_per_update_excl_push",
    ] {
        assert!(v[k].as_f64().is_some(), "{k}: {v}");
    }
}
