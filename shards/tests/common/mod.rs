//! Starting the real `uaring` binary and speaking raw UA-TCP to it.
#![allow(dead_code)]

pub mod int32;
pub mod memory;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A fresh directory under the system's temp directory, removed with what it holds when
/// dropped (also when the test fails), so the suite leaves nothing behind.
pub struct TempDir(std::path::PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> TempDir {
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl AsRef<std::path::Path> for TempDir {
    fn as_ref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub stdout_lines: Vec<String>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

/// The binary under test: cargo's build of `uaring`, or `UARING_TEST_BIN` (a
/// measurement run against another build).
pub fn bin() -> String {
    std::env::var("UARING_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_uaring").to_string())
}

impl Server {
    /// Starts `uaring serve --listen 127.0.0.1:0 ARGS` and waits for `listening on`.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with(args, |_| {})
    }

    pub fn start_with(args: &[&str], tweak: impl FnOnce(&mut Command)) -> Server {
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(args);
        let log = std::env::var("UARING_TEST_LOG").unwrap_or_else(|_| "info".to_string());
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("RUST_LOG", log);
        tweak(&mut cmd);
        let mut child = cmd.spawn().expect("spawn uaring");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let err_thread = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut s);
            s
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut lines = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    let found = line
                        .strip_prefix("listening on opc.tcp://")
                        .map(|a| a.parse::<SocketAddr>().expect("address"));
                    lines.push(line);
                    if let Some(addr) = found {
                        // Collect anything printed right after (the contract line).
                        while let Ok(l) = rx.recv_timeout(Duration::from_millis(50)) {
                            lines.push(l);
                        }
                        return Server {
                            child,
                            addr,
                            stdout_lines: lines,
                            stderr: Some(err_thread),
                        };
                    }
                }
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let err = err_thread.join().unwrap_or_default();
                    panic!(
                        "server did not print `listening on` (stdout {lines:?}); stderr:\n{err}"
                    );
                }
            }
        }
    }

    pub fn url(&self) -> String {
        format!("opc.tcp://{}", self.addr)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }

    /// SIGTERM and wait; returns (exit code, seconds taken, stderr).
    pub fn terminate(self) -> (Option<i32>, f64, String) {
        self.signal(libc::SIGTERM);
        self.wait_exit(Duration::from_secs(10))
    }

    /// Waits up to `limit` for the process to exit (then kills it); returns (exit code,
    /// seconds taken, stderr).
    pub fn wait_exit(mut self, limit: Duration) -> (Option<i32>, f64, String) {
        let t = Instant::now();
        let deadline = Instant::now() + limit;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = self.child.kill();
                    break self.child.wait().ok();
                }
            }
        };
        let secs = t.elapsed().as_secs_f64();
        let err = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (status.and_then(|s| s.code()), secs, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A UA-TCP Hello.
pub fn hello(url: &str) -> Vec<u8> {
    let mut b = Vec::new();
    b.extend_from_slice(b"HELF");
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // protocol version
    b.extend_from_slice(&65536u32.to_le_bytes()); // receive buffer
    b.extend_from_slice(&65536u32.to_le_bytes()); // send buffer
    b.extend_from_slice(&0u32.to_le_bytes()); // max message size
    b.extend_from_slice(&0u32.to_le_bytes()); // max chunk count
    b.extend_from_slice(&(url.len() as i32).to_le_bytes());
    b.extend_from_slice(url.as_bytes());
    let n = b.len() as u32;
    b[4..8].copy_from_slice(&n.to_le_bytes());
    b
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// Reads one UA-TCP message: (type incl. chunk byte, whole message).
pub fn read_message(s: &mut TcpStream) -> std::io::Result<([u8; 4], Vec<u8>)> {
    let mut head = [0u8; 8];
    s.read_exact(&mut head)?;
    let size = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
    if !(8..=1 << 24).contains(&size) {
        return Err(std::io::Error::other(format!("bad size {size}")));
    }
    let mut msg = head.to_vec();
    msg.resize(size, 0);
    s.read_exact(&mut msg[8..])?;
    Ok(([head[0], head[1], head[2], head[3]], msg))
}

/// HEL → ACK on a fresh connection.
pub fn assert_hello_ack(addr: SocketAddr) {
    let mut s = connect(addr);
    s.write_all(&hello(&format!("opc.tcp://{addr}")))
        .expect("send HEL");
    let (t, msg) = read_message(&mut s).expect("ACK");
    assert_eq!(
        &t,
        b"ACKF",
        "expected ACK, got {:?} {:?}",
        String::from_utf8_lossy(&t),
        msg
    );
}

/// Reads until EOF/reset (bounded); returns the bytes and whether the server closed.
pub fn read_until_closed(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, bool) {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// Numbers after `"key":` in the statistics file, in order of appearance.
pub fn field_values(json: &str, key: &str) -> Vec<u64> {
    let pat = format!("\"{key}\":");
    json.match_indices(&pat)
        .filter_map(|(i, _)| {
            let rest = &json[i + pat.len()..];
            let end = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .collect()
}
