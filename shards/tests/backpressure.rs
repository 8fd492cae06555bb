//! Memory stays bounded under abuse, against the real `uaring` binary:
//! a slow reader (many connections pipelining GetEndpoints and never reading
//! the answers) and an unfinished-chunk bomb from many connections. The
//! server's RSS (/proc/PID/status) must stay below a bound derived from the
//! configured budgets, and a fresh client is served afterwards.
//!
//! Sizes can be raised for a measurement run (release binary):
//! `UARING_TEST_BIN=target/release/uaring BP_CONNS=20 BP_REQUESTS=3000 BOMB_CONNS=200
//!  cargo test --release -p uaring-shards --test backpressure -- --nocapture`

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::GetEndpointsRequest;
use uaring_core::{DateTime, Now};

const MIB: u64 = 1 << 20;

fn now() -> Now {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    let utc = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i128).unwrap_or(0);
    Now::new(start.elapsed().as_nanos() as u64, DateTime::from_unix_nanos(utc))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// VmRSS of `pid`, bytes.
fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// CPU time the process has used so far, clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may contain spaces): utime is the 12th, stime the 13th.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let get = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    get(11) + get(12)
}

/// Waits until the server has done all the work it is going to do with what it
/// was sent: its CPU time stops moving for a second. Hang guard: two minutes.
fn settle(pid: u32) {
    let guard = Instant::now() + Duration::from_secs(120);
    let mut last = cpu_ticks(pid);
    let mut still_since = Instant::now();
    while Instant::now() < guard {
        std::thread::sleep(Duration::from_millis(100));
        let t = cpu_ticks(pid);
        if t != last {
            last = t;
            still_since = Instant::now();
        } else if still_since.elapsed() >= Duration::from_secs(1) {
            return;
        }
    }
}

/// Samples the server's RSS every few milliseconds until dropped; keeps the peak.
struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    pid: u32,
}

impl RssSampler {
    fn start(pid: u32) -> RssSampler {
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        RssSampler { peak, stop, thread: Some(thread), pid }
    }

    fn peak(&self) -> u64 {
        self.peak.fetch_max(rss_bytes(self.pid), Ordering::Relaxed).max(rss_bytes(self.pid))
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
fn start_server(runtime: &str, tag: &str) -> (Server, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("uaring-bp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let cfg = dir.join("uaring.toml");
    // UARING_TEST_RUNTIME replaces the budget lines (a measurement run against a
    // build that does not know them).
    let runtime = std::env::var("UARING_TEST_RUNTIME").unwrap_or_else(|_| runtime.to_string());
    std::fs::write(&cfg, format!("[runtime]\nshards = 1\n{runtime}\n")).expect("write config");
    let pki = dir.join("pki");
    let server = Server::start(&["--config", cfg.to_str().expect("path"), "--pki", pki.to_str().expect("path")]);
    (server, dir)
}

/// A socket with a SecurityPolicy None channel open on it (no session), or why not
/// (a server over its budget answers ERR BadTcpNotEnoughResources).
fn try_open_channel(addr: SocketAddr) -> Result<(TcpStream, ClientConnection), String> {
    let url = format!("opc.tcp://{addr}");
    let mut s = connect(addr);
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    let mut conn = ClientConnection::new(ClientConfig::new(&url), Box::new(uaring_core::random::ChaCha::from_u64(2)));
    let mut out = Vec::new();
    conn.start(now(), &mut out);
    s.write_all(&out).map_err(|e| format!("HEL: {e}"))?;
    out.clear();
    let mut buf = vec![0u8; 65536];
    while !conn.is_open() {
        let n = s.read(&mut buf).map_err(|e| format!("ACK / OPN response: {e}"))?;
        if n == 0 {
            return Err(format!("server closed during the handshake: {:?}", conn.state()));
        }
        conn.on_recv(now(), &buf[..n], &mut out).map_err(|e| format!("handshake: {e:?}"))?;
        s.write_all(&out).map_err(|e| format!("OPN: {e}"))?;
        out.clear();
    }
    Ok((s, conn))
}

fn open_channel(addr: SocketAddr) -> (TcpStream, ClientConnection) {
    try_open_channel(addr).expect("open a None channel")
}

fn get_endpoints(url: &str) -> Request {
    Request::GetEndpoints(Box::new(GetEndpointsRequest { endpoint_url: url.into(), ..Default::default() }))
}

/// A fresh client opens a channel and asks GetEndpoints; returns how many
/// endpoints it got, or why it failed.
fn try_get_endpoints(addr: SocketAddr) -> Result<usize, String> {
    let url = format!("opc.tcp://{addr}");
    let (mut s, mut conn) = try_open_channel(addr)?;
    let mut out = Vec::new();
    let id = conn.send_request(get_endpoints(&url), now(), &mut out).map_err(|e| format!("encode: {e:?}"))?;
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
        conn.on_recv(now(), &buf[..n], &mut out).map_err(|e| format!("response: {e:?}"))?;
    }
}

/// A fresh client is served. A server over its budget refuses new connections
/// until it has drained (it learns that abusive peers went away from their
/// sockets), so this retries, bounded by a generous hang guard.
fn fresh_client_is_served(addr: SocketAddr) {
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
fn push_all(conns: &mut [(TcpStream, Vec<u8>, usize)], stall: Duration, guard: Duration) -> (usize, usize) {
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
                Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::Interrupted => {}
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
fn peer_closed(s: &TcpStream, guard: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let until = Instant::now() + guard;
    loop {
        let mut p = libc::pollfd { fd: s.as_raw_fd(), events: libc::POLLRDHUP, revents: 0 };
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
fn discard_pending(s: &mut TcpStream) {
    let _ = s.set_nonblocking(true);
    let mut buf = [0u8; 65536];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// `conns` connections pipeline `requests` GetEndpoints each and never read;
/// the server's RSS growth stays under twice the shard budget plus 16 MiB
/// (provided receive buffers, allocator slack, `Vec` capacity rounding). With
/// `expect_refusal`, the slow readers alone hold more than the budget, so a
/// new connection meanwhile is refused with BadTcpNotEnoughResources.
fn slow_readers(tag: &str, backend: &str, conns: usize, requests: usize, per_conn: u64, budget: u64, expect_refusal: bool) {
    let (server, dir) = start_server(
        &format!("io_backend = \"{backend}\"\nmax_pending_output_bytes = {per_conn}\nmax_shard_buffered_bytes = {budget}"),
        tag,
    );
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");
    fresh_client_is_served(addr); // warm-up: every code path touched once
    let pid = server.child.id();
    let baseline = rss_bytes(pid);
    let sampler = RssSampler::start(pid);

    let mut slow: Vec<(TcpStream, Vec<u8>, usize)> = (0..conns)
        .map(|_| {
            let (s, mut conn) = open_channel(addr);
            let mut out = Vec::new();
            for _ in 0..requests {
                conn.send_request(get_endpoints(&url), now(), &mut out).expect("encode GetEndpoints");
            }
            (s, out, 0)
        })
        .collect();
    let (written, total) = push_all(&mut slow, Duration::from_secs(3), Duration::from_secs(120));
    settle(pid);
    let peak = sampler.peak();
    drop(sampler);
    let growth = peak.saturating_sub(baseline);
    // One shard: the budget, plus the provided receive buffers (4 MiB), the
    // kernel-side-free allocator slack and one slice of output per connection.
    let bound = 2 * budget + 16 * MIB;
    eprintln!(
        "slow readers: {conns} x {requests} GetEndpoints, {written}/{total} request bytes taken by the kernel; \
         server RSS baseline {} KiB, peak {} KiB, growth {} KiB (bound {} KiB)",
        baseline / 1024,
        peak / 1024,
        growth / 1024,
        bound / 1024
    );
    if growth >= bound {
        let (_, _, err) = server.terminate();
        let tail = &err[err.len().saturating_sub(4000)..];
        panic!("server grew by {} KiB under slow readers (bound {} KiB); log tail:\n{tail}", growth / 1024, bound / 1024);
    }
    assert!(rss_bytes(pid) > 0, "the server is still running");
    if expect_refusal {
        let e = try_get_endpoints(addr).expect_err("a shard over its budget takes no new connection");
        assert!(e.contains("BadTcpNotEnoughResources"), "refused with BadTcpNotEnoughResources: {e}");
    }

    for (s, _, _) in slow.iter_mut() {
        discard_pending(s);
    }
    drop(slow);
    fresh_client_is_served(addr);
    let (code, _, err) = server.terminate();
    if std::env::var("UARING_TEST_LOG").is_ok() {
        eprintln!("{err}");
    }
    assert_eq!(code, Some(0), "stderr:\n{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The case: each connection stops at its own bound; the shard's budget
/// is not reached.
#[test]
fn slow_readers_stop_at_their_own_bound() {
    let conns = env_usize("BP_CONNS", 20);
    let requests = env_usize("BP_REQUESTS", 3000);
    slow_readers("slow", "auto", conns, requests, 256 * 1024, 16 * MIB, false);
}

#[test]
fn slow_readers_stop_at_their_own_bound_epoll() {
    let conns = env_usize("BP_CONNS", 20);
    let requests = env_usize("BP_REQUESTS", 3000);
    slow_readers("slow-epoll", "epoll", conns, requests, 256 * 1024, 16 * MIB, false);
}

/// More slow readers than the shard's budget holds: the shard stops reading
/// from everyone and refuses new connections until they go away.
#[test]
fn slow_readers_past_the_shard_budget() {
    let conns = env_usize("BP_BUDGET_CONNS", 60);
    slow_readers("slow-budget", "auto", conns, 1000, 1 << 20, 8 * MIB, true);
}

#[test]
fn slow_readers_past_the_shard_budget_epoll() {
    let conns = env_usize("BP_BUDGET_CONNS", 60);
    slow_readers("slow-budget-epoll", "epoll", conns, 1000, 1 << 20, 8 * MIB, true);
}

/// Slow readers that hold the whole budget and never read are closed by the
/// server once their output made no progress for `send_stall_timeout_ms`; the
/// shard serves new clients again while they are still connected.
#[test]
fn stalled_slow_readers_are_closed() {
    for backend in ["auto", "epoll"] {
        let (server, dir) = start_server(
            &format!(
                "io_backend = \"{backend}\"\nmax_pending_output_bytes = 1048576\nmax_shard_buffered_bytes = 8388608\n\
                 send_stall_timeout_ms = 500"
            ),
            &format!("stall-{backend}"),
        );
        let addr = server.addr;
        let url = format!("opc.tcp://{addr}");
        let mut slow: Vec<(TcpStream, Vec<u8>, usize)> = (0..40)
            .map(|_| {
                let (s, mut conn) = open_channel(addr);
                let mut out = Vec::new();
                for _ in 0..1000 {
                    conn.send_request(get_endpoints(&url), now(), &mut out).expect("encode GetEndpoints");
                }
                (s, out, 0)
            })
            .collect();
        push_all(&mut slow, Duration::from_secs(3), Duration::from_secs(120));
        // The slow readers are still connected (and still not reading).
        fresh_client_is_served(addr);
        let guard = Instant::now() + Duration::from_secs(60);
        let open = slow
            .iter()
            .filter(|(s, _, _)| !peer_closed(s, guard.saturating_duration_since(Instant::now())))
            .count();
        if open > 0 {
            let (_, _, err) = server.terminate();
            let tail = &err[err.len().saturating_sub(6000)..];
            panic!("{open} slow readers were not closed by the server ({backend}); log tail:\n{tail}");
        }
        let (code, _, err) = server.terminate();
        assert_eq!(code, Some(0), "stderr:\n{err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Hello, a None channel, then a message of many 64 KiB chunks that never
/// gets its final chunk (and half of one more chunk), on each connection.
fn bomb_bytes(addr: SocketAddr) -> Result<(TcpStream, Vec<u8>), String> {
    let (s, mut conn) = try_open_channel(addr)?;
    let mut out = Vec::new();
    // Stays under the 1 MiB pre-session message budget, so core keeps it all.
    let big = "x".repeat(900 * 1024);
    conn.send_request(get_endpoints(&big), now(), &mut out).expect("encode");
    // Drop the final chunk; keep half of it as an unfinished chunk.
    let mut frames = Vec::new();
    let mut off = 0;
    while off + 8 <= out.len() {
        let size = u32::from_le_bytes([out[off + 4], out[off + 5], out[off + 6], out[off + 7]]) as usize;
        frames.push((off, size));
        off += size;
    }
    let &(last_off, last_size) = frames.last().expect("chunks");
    assert!(frames.len() > 4, "the message spans many chunks");
    assert_eq!(out[last_off + 3], b'F', "the last chunk is final");
    out.truncate(last_off + last_size / 2);
    Ok((s, out))
}

#[test]
fn chunk_bomb_stays_within_the_shard_budget() {
    chunk_bomb("bomb", "auto");
}

#[test]
fn chunk_bomb_stays_within_the_shard_budget_epoll() {
    chunk_bomb("bomb-epoll", "epoll");
}

fn chunk_bomb(tag: &str, backend: &str) {
    let conns = env_usize("BOMB_CONNS", 100);
    let budget = 16 * MIB;
    let (server, dir) = start_server(&format!("io_backend = \"{backend}\"\nmax_shard_buffered_bytes = {budget}"), tag);
    let addr = server.addr;
    fresh_client_is_served(addr);
    let pid = server.child.id();
    let baseline = rss_bytes(pid);
    let sampler = RssSampler::start(pid);

    let mut bombs: Vec<(TcpStream, Vec<u8>, usize)> = Vec::new();
    let mut refused = 0;
    for _ in 0..conns {
        // Connections that arrive while the shard is over its budget are refused
        // (ERR BadTcpNotEnoughResources): that is how it stays within it. One
        // accepted just before the budget ran out is not read until its Hello
        // (or OpenSecureChannel) times out (ERR BadTimeout).
        match bomb_bytes(addr) {
            Ok((s, data)) => bombs.push((s, data, 0)),
            Err(e) => {
                assert!(
                    e.contains("BadTcpNotEnoughResources") || e.contains("BadTimeout"),
                    "a refused connection says why: {e}"
                );
                refused += 1;
            }
        }
        // Push as we go so that the budget fills while connections keep coming.
        push_all(&mut bombs, Duration::from_millis(20), Duration::from_secs(60));
    }
    let (written, total) = push_all(&mut bombs, Duration::from_secs(3), Duration::from_secs(120));
    settle(pid);
    let peak = sampler.peak();
    drop(sampler);
    let growth = peak.saturating_sub(baseline);
    let bound = 2 * budget + 16 * MIB;
    eprintln!(
        "chunk bomb: {conns} connections ({refused} refused), {written}/{total} bytes taken by the kernel; \
         server RSS baseline {} KiB, peak {} KiB, growth {} KiB (bound {} KiB)",
        baseline / 1024,
        peak / 1024,
        growth / 1024,
        bound / 1024
    );
    if growth >= bound {
        let (_, _, err) = server.terminate();
        let tail = &err[err.len().saturating_sub(4000)..];
        panic!("server grew by {} KiB under the chunk bomb (bound {} KiB); log tail:\n{tail}", growth / 1024, bound / 1024);
    }
    drop(bombs);
    fresh_client_is_served(addr);
    let (code, _, err) = server.terminate();
    if std::env::var("UARING_TEST_LOG").is_ok() {
        eprintln!("{err}");
    }
    assert_eq!(code, Some(0), "stderr:\n{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_zero_budget_is_rejected() {
    for key in ["max_shard_buffered_bytes", "max_pending_output_bytes", "send_stall_timeout_ms"] {
        let dir = std::env::temp_dir().join(format!("uaring-bp-zero-{key}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let cfg = dir.join("uaring.toml");
        std::fs::write(&cfg, format!("[runtime]\n{key} = 0\n")).expect("write config");
        let out = std::process::Command::new(bin())
            .args(["serve", "--listen", "127.0.0.1:0", "--config", cfg.to_str().expect("path")])
            .output()
            .expect("run uaring");
        assert!(!out.status.success(), "{key} = 0 must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "the error names {key}: {err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
