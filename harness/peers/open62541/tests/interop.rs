//! open62541's client (the client of the public benchmark suite) against the
//! real `uaring` binary and against our open62541 contract server: connect,
//! Read, Write, a Write of the wrong type, Browse, disconnect; SecurityPolicy
//! None and Basic256Sha256 SignAndEncrypt.
//!
//! The `uaring` binary: $UARING_BIN, else `uaring` in this test's target
//! directory (`cargo test --workspace` builds it; or
//! `cargo build -p uaring --bin uaring`). No timing is asserted: the
//! waits below are hang guards.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const CLIENT: &str = env!("CARGO_BIN_EXE_open62541-interop-client");
const SERVER: &str = env!("CARGO_BIN_EXE_open62541-contract-server");

fn uaring_bin() -> PathBuf {
    if let Ok(p) = std::env::var("UARING_BIN") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/interop-… → target/<profile>/uaring
    let me = std::env::current_exe().unwrap();
    let p = me.parent().and_then(|d| d.parent()).unwrap().join("uaring");
    assert!(
        p.exists(),
        "{} is missing: cargo build -p uaring --bin uaring (or set UARING_BIN)",
        p.display()
    );
    p
}

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: SIGTERM to our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

/// Starts a server and waits (hang guard: 120 s) for `benchmark server ready`;
/// the port comes from its `listening on …:PORT` line.
fn start(cmd: &mut Command) -> Server {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server starts");
    let (tx, rx) = mpsc::channel();
    for r in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    let mut port = None;
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("server not ready; output:\n{}", seen.join("\n")));
        if let Some(i) = line.find("listening on opc.tcp://") {
            let rest = &line[i + "listening on opc.tcp://".len()..];
            let hostport = rest
                .split_whitespace()
                .next()
                .unwrap()
                .trim_end_matches('/');
            port = hostport.rsplit_once(':').and_then(|(_, p)| p.parse().ok());
        }
        let ready = line.contains("benchmark server ready");
        seen.push(line);
        if ready {
            break;
        }
    }
    // Keep draining the output so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in rx {});
    Server {
        child,
        port: port.expect("a `listening on` line with the port"),
    }
}

fn client(port: u16, security: &str) {
    let out = Command::new(CLIENT)
        .args([
            "--url",
            &format!("opc.tcp://127.0.0.1:{port}"),
            "--security",
            security,
            "--log-level",
            "5",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "open62541 client ({security}) failed:\n{stdout}\n{stderr}"
    );
    check_contract_run(&stdout, security, "ok connect");
}

/// The checks every run of the client against the benchmark contract prints.
fn check_contract_run(stdout: &str, security: &str, connected: &str) {
    for check in [
        connected,
        "ok read",
        "ok write:",
        "ok write of the wrong type",
        "ok browse",
        "ok disconnect",
    ] {
        assert!(
            stdout.contains(check),
            "missing {check:?} ({security}):\n{stdout}"
        );
    }
}

/// open62541's client listening for a Reverse Connect on `port`; returns once it listens.
fn reverse_client(port: u16, security: &str) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(CLIENT)
        .args([
            "--reverse-port",
            &port.to_string(),
            "--security",
            security,
            "--log-level",
            "5",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    for r in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(r).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) if line.starts_with("ok listening for reverse connect") => return (child, rx),
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("open62541's client did not listen for the reverse connect");
            }
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn open62541_client_against_uaring() {
    let pki = std::env::temp_dir().join(format!("uaring-o6-interop-{}", std::process::id()));
    let s = start(
        Command::new(uaring_bin())
            .args([
                "serve",
                "--contract",
                "--listen",
                "127.0.0.1:0",
                "--cpus",
                "0",
            ])
            .arg("--pki")
            .arg(&pki),
    );
    client(s.port, "none");
    client(s.port, "sign-encrypt");
    drop(s);
    let _ = std::fs::remove_dir_all(&pki);
}

/// Reverse Connect: two open62541 clients listen; the real `uaring` binary dials both, says
/// ReverseHello, and each client opens its channel and session on the server's connection and
/// runs the contract's checks over it. SecurityPolicy None: open62541 1.5's client opens a
/// reverse connection's first channel with None for GetEndpoints and cannot reconnect with a
/// secured one (shards/tests/reverse_connect.rs opens a SignAndEncrypt channel on a dialed
/// connection with our own client).
#[test]
fn open62541_client_takes_a_reverse_connection_from_uaring() {
    let pki = std::env::temp_dir().join(format!("uaring-o6-reverse-{}", std::process::id()));
    let ports = [free_port(), free_port()];
    let clients: Vec<_> = ["none", "none"]
        .iter()
        .zip(ports)
        .map(|(sec, p)| (*sec, reverse_client(p, sec)))
        .collect();
    let s = start(
        Command::new(uaring_bin())
            .args(["serve", "--contract", "--listen", "127.0.0.1:0"])
            .arg("--reverse-connect")
            .arg(format!("opc.tcp://127.0.0.1:{}", ports[0]))
            .arg("--reverse-connect")
            .arg(format!("opc.tcp://127.0.0.1:{}", ports[1]))
            .arg("--pki")
            .arg(&pki),
    );
    for (security, (mut child, rx)) in clients {
        let status = child.wait().unwrap();
        let lines: Vec<String> = rx.try_iter().collect();
        let stdout = lines.join("\n");
        assert!(
            status.success(),
            "open62541 reverse client ({security}) failed:\n{stdout}"
        );
        check_contract_run(&stdout, security, "ok reverse connect: session activated");
    }
    drop(s);
    let _ = std::fs::remove_dir_all(&pki);
}

#[test]
fn open62541_client_against_the_open62541_contract_server() {
    let port = free_port();
    let mut s = start(Command::new(SERVER).args(["--port", &port.to_string(), "--secure"]));
    client(s.port, "none");
    client(s.port, "sign-encrypt");
    // SIGTERM: a clean exit.
    // SAFETY: SIGTERM to our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status}");
}
