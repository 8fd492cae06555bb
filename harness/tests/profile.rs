//! `--profile` and `--server-priority` / `--client-priority` end to end, through the
//! `uaring-bench` binary against the real `uaring` binary (with and without a SQPOLL poller)
//! and the native open62541 peer: a profile's files and its per-thread shares, the scheduler
//! states of the server's thread classes and of the client, what a priority run records, and the
//! messages of a refused or malformed priority and of a missing perf. No timing is asserted.
//! Needs perf (scripts/test-all.sh installs Debian's linux-perf when it is missing).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

const BENCH: &str = env!("CARGO_BIN_EXE_uaring-bench");

/// A test's own directory under the system's temp directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!(
            "uaring-bench-profile-{}-{test}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A binary of this workspace beside `uaring-bench`, built first when missing.
fn sibling(name: &str, package: &str) -> PathBuf {
    let p = PathBuf::from(BENCH).with_file_name(name);
    if !p.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", package, "--bin", name])
            .status()
            .expect("cargo build");
        assert!(status.success(), "cargo build -p {package} --bin {name}");
    }
    assert!(p.exists(), "no {name} at {}", p.display());
    p
}

/// Common words of a short measured run on one CPU.
fn short(cmd: &mut Command) -> &mut Command {
    cmd.args([
        "--duration",
        "1.5",
        "--warmup",
        "0.3",
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
}

fn json_of(out: &std::process::Output) -> Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {}: {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

/// The profile's files exist and hold what they must; returns the busiest thread whose
/// name starts with `thread`.
fn check_profile(v: &Value, dir: &Path, name: &str, thread: &str) -> Value {
    let p = &v["profile"];
    assert_eq!(p["event"], "cpu-clock", "{p}");
    assert!(p["samples"].as_u64().unwrap_or(0) > 0, "{p}");
    assert!(p["window_s"].as_f64().unwrap_or(0.0) > 1.0, "{p}");
    for (key, ext) in [
        ("perf_data", "perf.data"),
        ("folded", "folded"),
        ("svg", "svg"),
    ] {
        let f = dir.join(format!("{name}.{ext}"));
        assert!(f.exists(), "{} missing", f.display());
        assert_eq!(p["files"][key].as_str(), Some(f.to_str().unwrap()), "{p}");
    }
    let folded = std::fs::read_to_string(dir.join(format!("{name}.folded"))).unwrap();
    assert!(
        folded.lines().any(|l| l.starts_with(thread)),
        "a stack rooted at {thread}: {folded:.400}"
    );
    let svg = std::fs::read_to_string(dir.join(format!("{name}.svg"))).unwrap();
    assert!(svg.contains("<svg") && svg.contains(thread), "{svg:.400}");
    let threads = p["threads"].as_array().expect("threads");
    let t = threads
        .iter()
        .find(|t| t["name"].as_str().is_some_and(|n| n.starts_with(thread)))
        .unwrap_or_else(|| panic!("no thread {thread}* in {p}"))
        .clone();
    assert!(t["share"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    assert!(t["cpu"].as_f64().unwrap_or(0.0) > 0.0, "{t}");
    let top = t["top"].as_array().expect("top");
    assert!(
        !top.is_empty() && top[0]["function"].as_str().is_some_and(|f| !f.is_empty()),
        "{t}"
    );
    let shares: f64 = threads.iter().map(|t| t["share"].as_f64().unwrap()).sum();
    assert!((shares - 1.0).abs() < 0.01, "shares add up to 1: {shares}");
    t
}

/// The scheduler states of the run: for the server's thread class `class` (one thread at
/// least, CPU and slices counted, run delay and migrations read) and the client's load threads.
fn check_sched(v: &Value, class: &str) {
    let c = &v["server_sched"][class];
    assert!(c["threads"].as_u64().unwrap_or(0) >= 1, "{class}: {v}");
    assert!(c["cpu_s"].as_f64().unwrap_or(0.0) > 0.0, "{class}: {v}");
    assert!(c["timeslices"].as_u64().unwrap_or(0) > 0, "{class}: {v}");
    assert!(c["run_delay_s"].as_f64().is_some(), "{class}: {v}");
    assert!(c["migrations"].as_u64().is_some(), "{class}: {v}");
    let load = &v["client_sched"]["load"];
    assert!(load["threads"].as_u64().unwrap_or(0) >= 1, "{v}");
    assert!(load["cpu_s"].as_f64().unwrap_or(0.0) > 0.0, "{v}");
}

#[test]
fn profile_of_uaring_names_its_shard() {
    let dir = TempDir::new("uaring");
    let bin = sibling("uaring", "uaring");
    let out = short(
        Command::new(BENCH)
            .args([
                "run",
                "--scenario",
                "read",
                "--clients",
                "2",
                "--inflight",
                "8",
            ])
            .args([
                "--server-bin",
                bin.to_str().unwrap(),
                "--server-args",
                "--shards 1",
            ])
            .args(["--profile", "--profile-name", "u", "--profile-top", "3"])
            .arg("--profile-dir")
            .arg(&dir.0),
    )
    .output()
    .unwrap();
    let v = json_of(&out);
    assert_eq!(v["errors"], 0, "{v}");
    let t = check_profile(&v, &dir.0, "u", "uaring-shard-0");
    assert_eq!(t["class"], "shard", "{t}");
    assert!(t["top"].as_array().unwrap().len() <= 3, "{t}");
    assert_eq!(v["profile"]["classes"]["shard"]["threads"], 1, "{v}");
    assert_eq!(v["profile"]["call_graph"], "fp");
    check_sched(&v, "shard");
}

/// A SQPOLL poller on the shard's CPU: the profile names the poller thread (`iou-sqp-*`, a
/// thread of the server process) apart from the shard, with its own CPU and functions (the
/// kernel's: the poller runs nothing else), and the scheduler states show the two threads
/// of one CPU waiting for each other.
#[test]
fn profile_of_uaring_with_a_poller_names_the_poller() {
    let dir = TempDir::new("uaring-sqpoll");
    let bin = sibling("uaring", "uaring");
    let out = short(
        Command::new(BENCH)
            .args([
                "run",
                "--scenario",
                "read",
                "--clients",
                "2",
                "--inflight",
                "8",
                "--send",
                "per-request",
            ])
            .args([
                "--server-bin",
                bin.to_str().unwrap(),
                "--server-args",
                "--shards 1 --sqpoll per-shard --sqpoll-cpu same",
            ])
            .args(["--profile", "--profile-name", "sq"])
            .arg("--profile-dir")
            .arg(&dir.0),
    )
    .output()
    .unwrap();
    let v = json_of(&out);
    assert_eq!(v["errors"], 0, "{v}");
    let t = check_profile(&v, &dir.0, "sq", "iou-sqp-");
    assert_eq!(t["class"], "poller", "{t}");
    assert_eq!(v["profile"]["classes"]["poller"]["threads"], 1, "{v}");
    assert!(
        v["profile"]["threads"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("uaring-shard-0"))),
        "the shard beside the poller: {v}"
    );
    check_sched(&v, "shard");
    check_sched(&v, "poller");
}

#[test]
fn profile_of_the_native_open62541_peer() {
    let dir = TempDir::new("open62541");
    let exe = sibling("open62541-contract-server", "uaring-peer-open62541");
    let out = short(
        Command::new(BENCH)
            .args([
                "run",
                "--scenario",
                "read",
                "--clients",
                "2",
                "--inflight",
                "8",
            ])
            .args([
                "--server-exe",
                exe.to_str().unwrap(),
                "--server-args",
                "--port {port}",
            ])
            .args([
                "--ready",
                "benchmark server ready",
                "--server-name",
                "open62541",
            ])
            .args(["--send", "per-request", "--profile", "--profile-name", "o6"])
            .arg("--profile-dir")
            .arg(&dir.0),
    )
    .output()
    .unwrap();
    let v = json_of(&out);
    assert_eq!(v["errors"], 0, "{v}");
    // open62541 serves on its one thread, named after the executable (15 characters).
    let t = check_profile(&v, &dir.0, "o6", "open62541-cont");
    assert_eq!(t["class"], "helper", "{t}");
    // The scheduler states of open62541's one thread, as for uaring's shards.
    check_sched(&v, "helper");
}

#[test]
fn a_profiled_variant_of_a_sweep_writes_beside_the_results() {
    let dir = TempDir::new("sweep");
    let variants = dir.0.join("v.variants");
    std::fs::write(&variants, "prof||--profile --profile-freq 499\n").unwrap();
    let out_file = dir.0.join("res.jsonl");
    let out = Command::new(BENCH)
        .args([
            "sweep",
            "--rounds",
            "1",
            "--scenario",
            "echo",
            "--clients",
            "2",
        ])
        .arg("--variants")
        .arg(&variants)
        .arg("--out")
        .arg(&out_file)
        .args(["--duration", "1.2", "--warmup", "0.2", "--server-cpus", "0"])
        .args(["--client-cpus", "0", "--foreign-max", "1000"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = std::fs::read_to_string(&out_file).unwrap();
    let v: Value = serde_json::from_str(line.trim()).expect("one run");
    assert!(v.get("error").is_none(), "{v}");
    assert_eq!(v["profile"]["frequency_hz"], 499, "{v}");
    check_profile(&v, &dir.0, "res.echo.prof.r1", "uaring-shard-");
    // The table says where the CPU went and how the threads were scheduled.
    let out = Command::new(BENCH)
        .args(["summarize", "--sched", "--in"])
        .arg(&out_file)
        .output()
        .unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        md.contains("#### Profiles: where the server's CPU went"),
        "{md}"
    );
    assert!(md.contains("| echo | prof | uaring-shard-"), "{md}");
    assert!(md.contains("`res.echo.prof.r1.svg`"), "{md}");
    assert!(md.contains("#### Scheduler states: echo"), "{md}");
    assert!(md.contains("server shard"), "{md}");
}

#[test]
fn priorities_are_set_on_every_thread_and_recorded() {
    let bin = sibling("uaring", "uaring");
    let out = short(
        Command::new(BENCH)
            .args([
                "run",
                "--scenario",
                "read",
                "--clients",
                "1",
                "--inflight",
                "4",
            ])
            .args([
                "--server-bin",
                bin.to_str().unwrap(),
                "--server-args",
                "--shards 1",
            ])
            .args(["--server-priority", "nice:5", "--client-priority", "nice:3"]),
    )
    .output()
    .unwrap();
    let v = json_of(&out);
    assert_eq!(v["errors"], 0, "{v}");
    for (key, want) in [("server_priority", "nice:5"), ("client_priority", "nice:3")] {
        let p = &v[key];
        assert_eq!(p["requested"], want, "{v}");
        let n = p["threads"].as_u64().unwrap_or(0);
        assert!(n >= 2, "{key}: {p}");
        assert_eq!(
            p["at_requested"].as_u64(),
            Some(n),
            "{key}: every thread: {p}"
        );
    }
    // Without the options nothing is recorded.
    let plain = short(Command::new(BENCH).args([
        "run",
        "--scenario",
        "echo",
        "--clients",
        "1",
        "--inflight",
        "1",
    ]))
    .output()
    .unwrap();
    let plain = json_of(&plain);
    assert!(plain.get("server_priority").is_none(), "{plain}");
    assert!(plain.get("client_priority").is_none(), "{plain}");
}

/// `uaring-bench ARGS` without CAP_SYS_NICE (dropped from the bounding set before exec, so
/// root loses it too) and with RLIMIT_NICE and RLIMIT_RTPRIO at 0: (exit code, stderr).
fn unprivileged(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(BENCH);
    cmd.args(args);
    // SAFETY: between fork and exec: plain system calls, no allocation.
    unsafe {
        cmd.pre_exec(|| {
            const CAP_SYS_NICE: libc::c_ulong = 23;
            if libc::prctl(libc::PR_CAPBSET_DROP, CAP_SYS_NICE, 0, 0, 0) != 0
                && std::io::Error::last_os_error().raw_os_error() != Some(libc::EPERM)
            {
                return Err(std::io::Error::last_os_error());
            }
            let zero = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_NICE, &zero);
            libc::setrlimit(libc::RLIMIT_RTPRIO, &zero);
            Ok(())
        });
    }
    let out = short(&mut cmd).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_refused_priority_says_which_limit() {
    let (code, err) = unprivileged(&["run", "--scenario", "echo", "--client-priority", "fifo:10"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--client-priority fifo:10: not permitted")
            && err.contains("RLIMIT_RTPRIO ≥ 10")
            && err.contains("ulimit -r 10"),
        "{err}"
    );
    let (code, err) = unprivileged(&["run", "--scenario", "echo", "--server-priority", "nice:-5"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--server-priority nice:-5: not permitted")
            && err.contains("RLIMIT_NICE ≥ 25"),
        "{err}"
    );
}

#[test]
fn malformed_priorities_and_a_missing_perf_are_errors() {
    for bad in ["fast:1", "nice:-30", "fifo:0", "rr", "nice:x"] {
        let out = Command::new(BENCH)
            .args(["run", "--server-priority", bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {err}");
        assert!(err.contains("--server-priority"), "{bad}: {err}");
    }
    let out = Command::new(BENCH)
        .args(["run", "--scenario", "echo", "--profile"])
        .env("PERF", "/nonexistent/perf")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--profile needs perf") && err.contains("linux-perf"),
        "{err}"
    );
}
