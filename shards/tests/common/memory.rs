//! Memory and budget helpers for the abuse tests against the real binary: the
//! server's RSS and its peak, waiting for it to settle, a server with `[runtime]`
//! budget lines, None channels over raw sockets, nonblocking pushes.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{connect, Server};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::GetEndpointsRequest;
use uaring_core::{DateTime, Now};

pub const MIB: u64 = 1 << 20;

pub fn now() -> Now {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    let utc = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0);
    Now::new(
        start.elapsed().as_nanos() as u64,
        DateTime::from_unix_nanos(utc),
    )
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// VmRSS of `pid`, bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// CPU time the process has used so far, clock ticks.
pub fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces): utime is the 12th, stime the 13th.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// Waits until the server has done all the work it is going to do with what it
/// was sent: over the last second it used at most 2 % of a CPU (2 clock ticks). Not
/// "no tick at all": the server's own background threads (the PKI refresher, the Demo
/// folder's thread, the history writer) use a little CPU at any time, and waiting for
/// them to stop waited out the guard. Hang guard: two minutes.
pub fn settle(pid: u32) {
    const IDLE_TICKS_PER_S: u64 = 2;
    let guard = Instant::now() + Duration::from_secs(120);
    // Samples 100 ms apart; the oldest kept is about a second old.
    let mut window = std::collections::VecDeque::with_capacity(11);
    window.push_back(cpu_ticks(pid));
    while Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(100));
        window.push_back(cpu_ticks(pid));
        if window.len() > 11 {
            window.pop_front();
        }
        if let (11, Some(first), Some(last)) = (window.len(), window.front(), window.back()) {
            if last.saturating_sub(*first) <= IDLE_TICKS_PER_S {
                return;
            }
        }
    }
}

/// Samples the server's RSS every few milliseconds until dropped; keeps the peak.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pid: u32,
}

impl RssSampler {
    pub fn start(pid: u32) -> RssSampler {
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler {
            peak,
            stop,
            thread: Some(thread),
            pid,
        }
    }

    pub fn peak(&self) -> u64 {
        self.peak
            .fetch_max(rss_bytes(self.pid), Ordering::Relaxed)
            .max(rss_bytes(self.pid))
    }
}

impl Drop for RssSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A server with one shard and the given `[runtime]` budget lines.
pub fn start_server(runtime: &str, tag: &str) -> (Server, super::TempDir) {
    start_server_with(runtime, "", tag)
}

/// A server with one shard, the given `[runtime]` lines and further TOML sections.
pub fn start_server_with(runtime: &str, sections: &str, tag: &str) -> (Server, super::TempDir) {
    start_server_on(1, runtime, sections, tag)
}

/// [`start_server_with`] on `shards` shards.
pub fn start_server_on(
    shards: usize,
    runtime: &str,
    sections: &str,
    tag: &str,
) -> (Server, super::TempDir) {
    let dir = super::TempDir::new(&format!("uaring-bp-{tag}"));
    let cfg = dir.join("uaring.toml");
    // UARING_TEST_RUNTIME replaces the budget lines (a measurement run against a
    // build that does not know them).
    let runtime = std::env::var("UARING_TEST_RUNTIME").unwrap_or_else(|_| runtime.to_string());
    std::fs::write(
        &cfg,
        format!("[runtime]\nshards = {shards}\n{runtime}\n{sections}\n"),
    )
    .expect("write config");
    let pki = dir.join("pki");
    let server = Server::start(&[
        "--config",
        cfg.to_str().expect("path"),
        "--pki",
        pki.to_str().expect("path"),
    ]);
    (server, dir)
}

/// A socket with a SecurityPolicy None channel open on it (no session), or why not
/// (a server over its budget answers ERR BadTcpNotEnoughResources).
pub fn try_open_channel(addr: SocketAddr) -> Result<(TcpStream, ClientConnection), String> {
    let url = format!("opc.tcp://{addr}");
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(
        ClientConfig::new(&url),
        Box::new(uaring_core::random::ChaCha::from_u64(2)),
    );
    let mut out = Vec::new();
    conn.start(now(), &mut out);
    s.write_all(&out).map_err(|e| format!("HEL: {e}"))?;
    out.clear();
    let mut buf = vec![0u8; 65536];
    while !conn.is_open() {
        let n = s
            .read(&mut buf)
            .map_err(|e| format!("ACK / OPN response: {e}"))?;
        if n == 0 {
            return Err(format!(
                "server closed during the handshake: {:?}",
                conn.state()
            ));
        }
        conn.on_recv(now(), &buf[..n], &mut out)
            .map_err(|e| format!("handshake: {e:?}"))?;
        s.write_all(&out).map_err(|e| format!("OPN: {e}"))?;
        out.clear();
    }
    Ok((s, conn))
}

pub fn open_channel(addr: SocketAddr) -> (TcpStream, ClientConnection) {
    try_open_channel(addr).expect("open a None channel")
}

pub fn get_endpoints(url: &str) -> Request {
    Request::GetEndpoints(Box::new(GetEndpointsRequest {
        endpoint_url: url.into(),
        ..Default::default()
    }))
}

/// A fresh client opens a channel and asks GetEndpoints; returns how many
/// endpoints it got, or why it failed.
pub fn try_get_endpoints(addr: SocketAddr) -> Result<usize, String> {
    let url = format!("opc.tcp://{addr}");
    let (mut s, mut conn) = try_open_channel(addr)?;
    let mut out = Vec::new();
    let id = conn
        .send_request(get_endpoints(&url), now(), &mut out)
        .map_err(|e| format!("encode: {e:?}"))?;
    s.write_all(&out).map_err(|e| format!("send: {e}"))?;
    out.clear();
    let mut buf = vec![0u8; 65536];
    loop {
        if let Some((rid, resp)) = conn.poll_response() {
            return match resp {
                Response::GetEndpoints(r) if rid == id => Ok(r.endpoints.len()),
                other => Err(format!("unexpected response {rid}: {other:?}")),
            };
        }
        let n = s.read(&mut buf).map_err(|e| format!("response: {e}"))?;
        if n == 0 {
            return Err("server closed".into());
        }
        conn.on_recv(now(), &buf[..n], &mut out)
            .map_err(|e| format!("response: {e:?}"))?;
    }
}

/// A fresh client is served. A server over its budget refuses new connections
/// until it has drained (it learns that abusive peers went away from their
/// sockets), so this retries, bounded by a generous hang guard.
pub fn fresh_client_is_served(addr: SocketAddr) {
    let guard = Instant::now() + Duration::from_secs(60);
    loop {
        match try_get_endpoints(addr) {
            Ok(n) => {
                assert!(n > 0, "GetEndpoints returned no endpoint");
                return;
            }
            Err(e) if Instant::now() < guard => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("a fresh client was not served: {e}"),
        }
    }
}

/// Writes each connection's bytes without blocking, round robin, until all
/// are written or nothing moved for `stall` (the server stopped reading: the
/// bytes wait in the kernel's socket buffers). Hang guard: `guard`.
pub fn push_all(
    conns: &mut [(TcpStream, Vec<u8>, usize)],
    stall: Duration,
    guard: Duration,
) -> (usize, usize) {
    for (s, _, _) in conns.iter() {
        s.set_nonblocking(true).expect("nonblocking");
    }
    let start = Instant::now();
    let mut last_progress = Instant::now();
    loop {
        let mut moved = false;
        let mut left = 0;
        for (s, data, off) in conns.iter_mut() {
            if *off >= data.len() {
                continue;
            }
            match s.write(&data[*off..]) {
                Ok(n) if n > 0 => {
                    *off += n;
                    moved = true;
                }
                Ok(_) => {}
                Err(e)
                    if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
                Err(_) => *off = data.len(), // closed by the server
            }
            if *off < data.len() {
                left += 1;
            }
        }
        if left == 0 {
            break;
        }
        if moved {
            last_progress = Instant::now();
        } else {
            if last_progress.elapsed() >= stall || start.elapsed() >= guard {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let written: usize = conns.iter().map(|c| c.2).sum();
    let total: usize = conns.iter().map(|c| c.1.len()).sum();
    (written, total)
}

/// Whether the peer closed `s` (FIN or reset), without reading from it (reading
/// would make a slow reader progress). Polls until `guard`.
pub fn peer_closed(s: &TcpStream, guard: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let until = Instant::now() + guard;
    loop {
        let mut p = libc::pollfd {
            fd: s.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, 100) };
        if n > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0 {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
    }
}

/// Reads whatever the server has sent so far (nonblocking) so that a
/// connection that is dropped afterwards closes without a long linger.
pub fn discard_pending(s: &mut TcpStream) {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}
