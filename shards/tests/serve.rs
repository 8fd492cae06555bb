//! The real `uaring` binary on port 0: UA-TCP handshakes, hostile inputs,
//! backends, distribution policies, shutdown, and the memlock message.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use uaring_harness::blocking::Client;

fn channel_roundtrip(server: &Server) {
    let client =
        Client::connect(&server.url(), Duration::from_secs(5)).expect("open a secure channel");
    client.close().expect("close the channel");
}

#[test]
fn hello_gets_ack_and_channel_opens() {
    let server = Server::start(&[]);
    assert_hello_ack(server.addr);
    channel_roundtrip(&server);
    let (code, secs, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(secs < 10.0, "shutdown hung: {secs} s");
    assert!(
        err.contains("shards on CPUs"),
        "start-up log names the CPUs:\n{err}"
    );
}

#[test]
fn contract_mode_prints_ready() {
    let server = Server::start(&["--contract"]);
    assert!(
        server
            .stdout_lines
            .iter()
            .any(|l| l.contains("benchmark server ready")),
        "stdout: {:?}",
        server.stdout_lines
    );
    assert_eq!(
        server
            .stdout_lines
            .iter()
            .filter(|l| l.starts_with("listening on "))
            .count(),
        1
    );
    assert_hello_ack(server.addr);
}

/// Each hostile input, followed by a fresh client that must still be served.
fn hostile_suite(server: &Server) {
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");

    // Garbage bytes.
    let mut s = connect(addr);
    s.write_all(&b"\x00\xffGARBAGE garbage GARBAGE\r\n".repeat(20))
        .expect("send");
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(3));
    assert!(closed, "garbage must close the connection");
    assert_hello_ack(addr);

    // A header declaring a 4 GB message.
    let mut s = connect(addr);
    let mut h = b"HELF".to_vec();
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(&[0u8; 24]);
    s.write_all(&h).expect("send");
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(3));
    assert!(closed, "a 4 GB header must close the connection");
    assert_hello_ack(addr);

    // A truncated chunk: the header promises 1000 bytes, 20 arrive, the client goes away.
    let mut s = connect(addr);
    s.write_all(&hello(&url)).expect("HEL");
    let (t, _) = read_message(&mut s).expect("ACK");
    assert_eq!(&t, b"ACKF");
    let mut m = b"OPNF".to_vec();
    m.extend_from_slice(&1000u32.to_le_bytes());
    m.extend_from_slice(&[0u8; 12]);
    s.write_all(&m).expect("partial chunk");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let _ = read_until_closed(&mut s, Duration::from_secs(3));
    drop(s);
    assert_hello_ack(addr);

    // An oversized chunk: larger than the negotiated receive buffer (65536).
    let mut s = connect(addr);
    s.write_all(&hello(&url)).expect("HEL");
    let (t, _) = read_message(&mut s).expect("ACK");
    assert_eq!(&t, b"ACKF");
    let mut m = b"OPNF".to_vec();
    m.extend_from_slice(&(1u32 << 20).to_le_bytes());
    m.extend_from_slice(&[0u8; 4096]);
    let _ = s.write_all(&m);
    let (got, closed) = read_until_closed(&mut s, Duration::from_secs(3));
    assert!(closed, "an oversized chunk must close the connection");
    assert!(
        got.starts_with(b"ERRF"),
        "an oversized chunk is answered with ERR, got {:?}",
        &got[..got.len().min(8)]
    );
    assert_hello_ack(addr);

    // A flood of 200 connections held open.
    let flood: Vec<TcpStream> = (0..200).map(|_| connect(addr)).collect();
    assert_hello_ack(addr);
    channel_roundtrip(server);
    drop(flood);

    // A slow sender: one byte every 100 ms, while others are served.
    let slow = std::thread::spawn(move || {
        let mut s = connect(addr);
        let hel = hello(&format!("opc.tcp://{addr}"));
        for b in hel.iter().take(15) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(1200) {
        assert_hello_ack(addr);
        std::thread::sleep(Duration::from_millis(200));
    }
    slow.join().expect("slow sender");
    assert_hello_ack(addr);
    channel_roundtrip(server);
}

#[test]
fn hostile_inputs_leave_the_server_serving_uring() {
    let server = Server::start(&[]);
    hostile_suite(&server);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
}

#[test]
fn hostile_inputs_leave_the_server_serving_epoll() {
    let server = Server::start(&["--io-backend", "epoll"]);
    hostile_suite(&server);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(err.contains("io backend epoll"), "stderr:\n{err}");
}

#[test]
fn sigterm_with_open_channels_exits_zero() {
    let server = Server::start(&[]);
    let clients: Vec<Client> = (0..4)
        .map(|_| Client::connect(&server.url(), Duration::from_secs(5)).expect("channel"))
        .collect();
    let idle: Vec<TcpStream> = (0..4).map(|_| connect(server.addr)).collect();
    let (code, secs, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    // A hang guard, not a performance check: shutdown_grace_ms is 500 ms by default.
    assert!(secs < 10.0, "graceful shutdown hung: {secs:.3} s");
    drop(clients);
    drop(idle);
}

fn stats_json(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn policy_serves_eight(extra: &[&str], policy: &str) {
    let dir = common::TempDir::new(&format!("uaring-test-{policy}-{}", extra.len()));
    let stats = dir.join("stats.json");
    let stats_s = stats.to_string_lossy().to_string();
    let mut args = vec![
        "--distribution",
        policy,
        "--shards",
        "2",
        "--stats-file",
        stats_s.as_str(),
    ];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let mut conns = Vec::new();
    for _ in 0..8 {
        let mut s = connect(server.addr);
        s.write_all(&hello(&server.url())).expect("HEL");
        let (t, _) = read_message(&mut s).expect("ACK");
        assert_eq!(&t, b"ACKF");
        conns.push(s);
    }
    // SIGUSR1 rewrites the statistics file at once.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut json;
    loop {
        server.signal(libc::SIGUSR1);
        std::thread::sleep(Duration::from_millis(50));
        json = stats_json(&stats);
        let open = field_values(&json, "open");
        // Per-shard "open" values, then the total's.
        if open.last() == Some(&8) || Instant::now() > deadline {
            break;
        }
    }
    let open = field_values(&json, "open");
    assert_eq!(open.len(), 3, "two shards and a total: {json}");
    assert_eq!(open[2], 8, "{json}");
    assert!(
        json.contains(&format!("\"distribution\":\"{policy}\"")),
        "{json}"
    );
    if policy != "reuseport" {
        assert_eq!(
            &open[..2],
            &[4, 4],
            "{policy} balances 8 connections over 2 shards: {json}"
        );
        let handed = field_values(&json, "handed_off");
        assert_eq!(
            handed[0], 4,
            "the acceptor handed 4 to the other shard: {json}"
        );
    }
    drop(conns);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
}

#[test]
fn reuseport_serves_eight() {
    policy_serves_eight(&[], "reuseport");
}

#[test]
fn round_robin_serves_eight() {
    policy_serves_eight(&[], "round-robin");
}

#[test]
fn least_connections_serves_eight() {
    policy_serves_eight(&[], "least-connections");
}

#[test]
fn round_robin_on_epoll_serves_eight() {
    policy_serves_eight(&["--io-backend", "epoll"], "round-robin");
}

#[test]
fn single_shot_fallback_serves() {
    let dir = common::TempDir::new("uaring-test-single");
    let cfg = dir.join("single.toml");
    std::fs::write(&cfg, "[runtime]\nmultishot = false\nring_entries = 64\n")
        .expect("write config");
    let server = Server::start(&[
        "--config",
        cfg.to_str().expect("path"),
        "--io-backend",
        "uring",
    ]);
    assert_hello_ack(server.addr);
    channel_roundtrip(&server);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(
        err.contains("off:") && err.contains("MULTISHOT_ACCEPT_RECV"),
        "stderr:\n{err}"
    );
}

/// Sets RLIMIT_MEMLOCK of the child to `bytes` (lowering is always allowed).
fn memlock(cmd: &mut Command, bytes: u64) {
    // SAFETY: setrlimit is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim);
            Ok(())
        });
    }
}

#[test]
fn memlock_error_says_what_to_do() {
    let mut cmd = Command::new(bin());
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--io-backend",
        "uring",
        "--ring-entries",
        "32768",
        "--shards",
        "4",
    ]);
    memlock(&mut cmd, 8 << 20);
    let out = cmd.output().expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr:\n{err}");
    assert!(err.contains("RLIMIT_MEMLOCK is 8192 KiB"), "stderr:\n{err}");
    assert!(
        err.contains("runtime.ring_entries")
            && err.contains("ulimit -l")
            && err.contains("--io-backend epoll"),
        "{err}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("listening on"));
}

#[test]
fn auto_backend_falls_back_to_epoll_when_memlock_is_tiny() {
    let server = Server::start_with(&["--ring-entries", "1024"], |c| memlock(c, 16 * 1024));
    assert_hello_ack(server.addr);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(
        err.contains("using the epoll backend") && err.contains("RLIMIT_MEMLOCK"),
        "stderr:\n{err}"
    );
}

#[test]
fn automatic_ring_size_fits_a_small_limit() {
    // 2 shards in 256 KiB: the automatic size halves until it fits.
    let server = Server::start_with(&["--io-backend", "uring", "--shards", "2"], |c| {
        memlock(c, 256 * 1024)
    });
    assert_hello_ack(server.addr);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(err.contains("io backend io_uring"), "stderr:\n{err}");
}

#[test]
fn help_and_subcommands() {
    let out = Command::new(bin()).arg("--help").output().expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "serve",
        "topology",
        "hash-password",
        "cert",
        "config",
        "RUST_LOG",
    ] {
        assert!(help.contains(word), "--help lacks {word}");
    }
    let out = Command::new(bin())
        .args(["serve", "--help"])
        .output()
        .expect("run");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--listen",
        "--cpus",
        "--config",
        "--contract",
        "--counters",
        "--events-per-s",
        "--io-backend",
        "--distribution",
        "--ring-entries",
        "--stats-file",
        "--pki",
        "--accept-all-client-certs",
        "--nodeset",
        "RUST_LOG",
    ] {
        assert!(help.contains(word), "serve --help lacks {word}");
    }
    // Every command rejects what it does not know, with a message and exit code 2.
    for args in [
        &["--frobnicate"][..],
        &["serve", "--listn", "127.0.0.1:0"],
        &["serve", "--shards", "0"],
        &["serve", "--counters", "x"],
        &["topology", "--bogus"],
        &["topology", "--json", "--resolve", "all"],
        &["topology", "--sysfs-root"],
        &["cert", "generate", "--bits", "1024"],
        &["cert", "frobnicate"],
        &["hash-password", "extra"],
    ] {
        let out = Command::new(bin()).args(args).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} printed no message");
    }
    let out = Command::new(bin()).arg("--version").output().expect("run");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("uaring "));
    let out = Command::new(bin())
        .args(["topology", "--resolve", "all"])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut child = Command::new(bin())
        .arg("hash-password")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(b"correct horse\n")
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("$argon2id$"));
    let dir = common::TempDir::new("uaring-test-pki");
    let pki = dir.join("pki");
    let out = Command::new(bin())
        .args([
            "cert",
            "--pki",
            pki.to_str().expect("path"),
            "generate",
            "--uri",
            "urn:test",
            "--bits",
            "2048",
        ])
        .output()
        .expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(pki.join("own/certs/uaring.der").exists());
    drop(dir);
    let out = Command::new(bin())
        .args(["serve", "--bogus"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin())
        .args(["serve", "--cpus", "nonsense-expr"])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
}

/// `[runtime] shutdown_announce_ms`: after SIGTERM the server keeps serving its sessions for
/// that long with ServerStatus.State Shutdown, SecondsTillShutdown counting down and a
/// ShutdownReason (Part 5 §6.3.1), then stops by itself with exit code 0.
#[test]
fn sigterm_announces_the_shutdown_in_server_status_first() {
    use uaring_core::generated::types::{ServerState, ServerStatusDataType};
    use uaring_core::{NodeId, Variant};
    let dir = common::TempDir::new("uaring-test-announce");
    let config = dir.join("announce.toml");
    std::fs::write(&config, "[runtime]\nshutdown_announce_ms = 2500\n").unwrap();
    let server = Server::start(&["--config", config.to_str().unwrap()]);
    let mut c = Client::connect(&server.url(), Duration::from_secs(5)).expect("channel");
    c.create_session().expect("CreateSession");
    c.activate_session_anonymous().expect("ActivateSession");
    // State (2259), SecondsTillShutdown (2992), ShutdownReason (2993), ServerStatus (2256).
    let ids = [2259, 2992, 2993, 2256].map(NodeId::ns0);
    let read = |c: &mut Client| -> Vec<Variant> {
        c.read_values(&ids)
            .expect("Read")
            .into_iter()
            .map(|d| d.value)
            .collect()
    };
    let v = read(&mut c);
    assert_eq!(v[0], Variant::Int32(ServerState::Running.0));
    assert_eq!(v[1], Variant::UInt32(0));
    let t = Instant::now();
    server.signal(libc::SIGTERM);
    // The same session is still served, and says the server is going.
    let v = loop {
        let v = read(&mut c);
        if v[0] == Variant::Int32(ServerState::Shutdown.0) {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(2), "still {:?}", v[0]);
        std::thread::sleep(Duration::from_millis(20));
    };
    let Variant::UInt32(left) = v[1] else {
        panic!("SecondsTillShutdown {:?}", v[1])
    };
    assert!((1..=3).contains(&left), "SecondsTillShutdown {left}");
    let Variant::LocalizedText(reason) = &v[2] else {
        panic!("ShutdownReason {:?}", v[2])
    };
    assert_eq!(reason.text.as_str(), "The server is shutting down");
    let Variant::ExtensionObject(eo) = &v[3] else {
        panic!("ServerStatus {:?}", v[3])
    };
    let status: ServerStatusDataType = eo
        .decode_as(Default::default())
        .expect("a ServerStatusDataType")
        .expect("decodes");
    assert_eq!(status.state, ServerState::Shutdown);
    assert_eq!(
        status.shutdown_reason.text.as_str(),
        "The server is shutting down"
    );
    // Then it stops by itself.
    let (code, _, err) = server.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0), "stderr:\n{err}");
    // Not before the announced time (a lower bound: it cannot fail on a slow machine).
    assert!(
        t.elapsed() >= Duration::from_millis(2400),
        "exited {:?} after SIGTERM, before the 2.5 s it announced",
        t.elapsed()
    );
    assert!(err.contains("announcing the shutdown"), "{err}");
}
