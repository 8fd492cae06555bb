//! End to end through the binary: the echo scenario (the echo floor on
//! uaring's shard runtime as a child) in both send modes, a two-variant sweep
//! and its summary, and the command line's errors. No timing is asserted:
//! only that the pieces fit and report what they must.

use std::process::Command;

const BENCH: &str = env!("CARGO_BIN_EXE_uaring-bench");

/// A test's own directory under the system's temp directory, removed when dropped.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let d =
            std::env::temp_dir().join(format!("uaring-bench-test-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
    fn join(&self, name: &str) -> std::path::PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn echo_run_prints_json() {
    // The third also holds two idle connections open (the echo floor's idle sessions); the
    // last runs the client's loop with kernel polling, fixed files and busy polling.
    let modes: &[&str] = &[
        "--client-sqpoll",
        "per-shard",
        "--client-fixed-files",
        "--client-busy-poll-us",
        "5",
    ];
    for (io, send, idle, extra) in [
        ("shards", "batched", "0", &[][..]),
        ("harness", "batched", "0", &[][..]),
        ("harness", "per-request", "2", &[][..]),
        ("shards", "batched", "0", modes),
    ] {
        let out = Command::new(BENCH)
            .args([
                "run",
                "--scenario",
                "echo",
                "--clients",
                "2",
                "--inflight",
                "4",
                "--duration",
                "0.3",
                "--warmup",
                "0.1",
            ])
            .args([
                "--server-cpus",
                "0",
                "--client-cpus",
                "0",
                "--foreign-max",
                "1000",
                "--json",
                "--client-io",
                io,
                "--send",
                send,
            ])
            .args(["--idle-sessions", idle])
            .args(extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{io}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        for k in [
            "scenario",
            "ops",
            "ops_per_s",
            "errors",
            "p50_us",
            "p99_us",
            "server_cpu_us_per_op",
            "client_cpu_us_per_op",
            "server_rss_kb",
            "discarded_runs",
        ] {
            assert!(v.get(k).is_some(), "missing {k}: {v}");
        }
        assert_eq!(v["errors"], 0);
        assert!(v["ops"].as_u64().unwrap() > 0);
        assert_eq!(v["bytes_out_per_op"].as_f64().unwrap(), 128.0);
        assert_eq!(v["bytes_in_per_op"].as_f64().unwrap(), 128.0);
        assert_eq!(v["send"], send);
        assert_eq!(v["client_io"], io);
        let want_modes = if extra.is_empty() {
            "default"
        } else {
            "sqpoll per-thread, busy_poll_us 5, fixed_files"
        };
        assert_eq!(v["client_io_modes"], want_modes, "{v}");
        assert!(v["window_skew_us"].as_u64().is_some(), "{v}");
        match idle {
            "0" => assert!(v.get("idle_sessions").is_none(), "{v}"),
            n => assert_eq!(v["idle_sessions"].to_string(), n, "{v}"),
        }
        if io == "harness" {
            assert!(v["client_sends_per_op"].as_f64().unwrap() > 0.0, "{v}");
        }
    }
}

#[test]
fn command_line_errors_have_messages() {
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--inflght", "7"], "--inflght"),
        (&["run", "--clients", "many"], "many"),
        (&["run", "--send", "sometimes"], "sometimes"),
        (
            &[
                "run",
                "--send",
                "per-request",
                "--client-io",
                "shards",
                "--scenario",
                "echo",
            ],
            "per-request",
        ),
        (
            &[
                "run",
                "--client-io",
                "harness",
                "--client-fixed-files",
                "--scenario",
                "echo",
            ],
            "need --client-io shards",
        ),
        (&["sweep", "--variants"], "--variants"),
        (&["summarize", "--md", "x.md"], "--in"),
        (&["echo-server", "--port", "70000"], "70000"),
        (&["bogus"], "bogus"),
    ];
    for (args, needle) in cases {
        let out = Command::new(BENCH).args(*args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let out = Command::new(BENCH)
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--send <SEND>"));
}

#[test]
fn sweep_checks_variant_files_before_running() {
    let dir = TempDir::new("typo");
    let variants = dir.join("typo.variants");
    std::fs::write(
        &variants,
        "a||--server-cpus 0 --client-cpus 0
b||--inflght 3
",
    )
    .unwrap();
    let out = Command::new(BENCH)
        .args([
            "sweep",
            "--variants",
            variants.to_str().unwrap(),
            "--scenario",
            "echo",
            "--rounds",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("variant b") && err.contains("--inflght"),
        "{err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran");
}

#[test]
fn sweep_and_summarize() {
    let dir = TempDir::new("sweep");
    let variants = dir.join("two.variants");
    std::fs::write(&variants, "# two placements of the echo floor\na||--server-cpus 0 --client-cpus 0\nb||--server-cpus 0 --client-cpus 0 --clients 1\n").unwrap();
    let raw = dir.join("raw.jsonl");
    let out = Command::new(BENCH)
        .args([
            "sweep",
            "--variants",
            variants.to_str().unwrap(),
            "--scenario",
            "echo",
            "--rounds",
            "2",
            "--duration",
            "0.2",
            "--warmup",
            "0.05",
        ])
        .args([
            "--inflight",
            "2",
            "--foreign-max",
            "1000",
            "--out",
            raw.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The sweep ends with the summary table.
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        summary.contains("#### echo") && summary.contains("| a |") && summary.contains("| b |"),
        "{summary}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&raw)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    let order: Vec<&str> = lines
        .iter()
        .map(|l| l["variant"].as_str().unwrap())
        .collect();
    assert_eq!(order, vec!["a", "b", "b", "a"]);
    let md = dir.join("table.md");
    let svg = dir.join("plot");
    let out = Command::new(BENCH)
        .args([
            "summarize",
            "--in",
            raw.to_str().unwrap(),
            "--md",
            md.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = std::fs::read_to_string(&md).unwrap();
    assert!(
        table.contains("| a |") && table.contains("| b |"),
        "{table}"
    );
    let plot = std::fs::read_to_string(format!("{}-echo.svg", svg.display())).unwrap();
    assert!(plot.contains("<svg") && plot.contains(">a<") && plot.contains(">b<"));
}

#[test]
fn unknown_scenario_is_an_error() {
    let out = Command::new(BENCH)
        .args([
            "run",
            "--scenario",
            "nope",
            "--server-cpus",
            "0",
            "--client-cpus",
            "0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown scenario"));
}
