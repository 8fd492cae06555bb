//! Honest accounting against the real `uaring` binary: with SQPOLL on, the poller is a kernel
//! thread of the server process (`iou-sqp-<tid>`), and `uaring-bench` counts it — its CPU is in
//! the server's total (`server_cpu_us_per_op`), reported on its own beside it
//! (`server_pollers`, `server_poller_cpu_s`, `server_poller_share`), and its scheduler states
//! are summed in `server_sched.poller`. Without SQPOLL there is no poller class at all. No
//! timing is asserted: only what is counted where.

use std::path::PathBuf;
use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_uaring-bench");

/// The `uaring` binary beside `uaring-bench` (where `uaring-bench` itself looks for it),
/// built first when this test runs before anything built it.
fn uaring_bin() -> PathBuf {
    let p = PathBuf::from(BENCH).with_file_name("uaring");
    if !p.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "uaring", "--bin", "uaring"])
            .status()
            .expect("cargo build -p uaring");
        assert!(
            status.success(),
            "cargo build -p uaring --bin uaring failed"
        );
    }
    assert!(p.exists(), "no uaring binary at {}", p.display());
    p
}

fn run(server_args: &str) -> serde_json::Value {
    let bin = uaring_bin();
    let out = Command::new(BENCH)
        .args([
            "run",
            "--scenario",
            "read",
            "--server-bin",
            bin.to_str().expect("path"),
            "--server-args",
            server_args,
            "--clients",
            "1",
            "--inflight",
            "1",
            "--send",
            "per-request",
            "--duration",
            "1",
            "--warmup",
            "0.2",
            "--server-cpus",
            "0",
            "--client-cpus",
            "0",
            "--foreign-max",
            "1000",
            "--max-repeats",
            "0",
            "--json",
        ])
        .output()
        .expect("run uaring-bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{server_args}: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

#[test]
fn a_sqpoll_poller_is_server_cpu() {
    let v = run("--sqpoll per-shard --sqpoll-cpu same --sqpoll-idle-ms 50");
    assert_eq!(v["errors"], 0, "{v}");
    let ops = v["ops"].as_f64().expect("ops");
    assert!(ops > 0.0, "{v}");
    assert_eq!(v["server_pollers"], 1, "one shard, one poller: {v}");
    let poller_s = v["server_poller_cpu_s"].as_f64().expect("poller cpu");
    assert!(poller_s > 0.0, "the poller ran during the window: {v}");
    let sched = &v["server_sched"];
    assert_eq!(sched["poller"]["threads"], 1, "{v}");
    assert_eq!(sched["poller"]["cpu_s"].as_f64(), Some(poller_s), "{v}");
    assert_eq!(sched["shard"]["threads"], 1, "{v}");
    assert!(sched["poller"]["timeslices"].as_u64().is_some(), "{v}");
    assert!(sched["poller"].get("run_delay_s").is_some(), "{v}");
    // The server's total is every thread's CPU, the poller's included.
    let total_s = v["server_cpu_us_per_op"].as_f64().expect("server cpu") * ops / 1e6;
    let classes_s: f64 = sched
        .as_object()
        .expect("classes")
        .values()
        .map(|c| c["cpu_s"].as_f64().unwrap_or(0.0))
        .sum();
    assert!(
        total_s >= poller_s + sched["shard"]["cpu_s"].as_f64().unwrap_or(0.0) - 0.01,
        "server total {total_s} s holds the poller's {poller_s} s and the shard's: {v}"
    );
    assert!(
        (total_s - classes_s).abs() <= 0.01 + 0.01 * total_s,
        "the classes add up to the total ({classes_s} s vs {total_s} s): {v}"
    );
    let share = v["server_poller_share"].as_f64().expect("share");
    assert!(share > 0.0 && share < 1.0, "{v}");
    assert!(
        v["client_sched"]["load"]["threads"].as_u64().unwrap_or(0) >= 1,
        "{v}"
    );
}

#[test]
fn without_sqpoll_there_is_no_poller() {
    let v = run("--shards 1");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["server_pollers"], 0, "{v}");
    assert_eq!(v["server_poller_cpu_s"].as_f64(), Some(0.0), "{v}");
    assert!(v["server_sched"].get("poller").is_none(), "{v}");
    assert_eq!(v["server_sched"]["shard"]["threads"], 1, "{v}");
}
