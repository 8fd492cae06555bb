//! Memory stays bounded under abuse, against the real `uaring` binary:
//! a slow reader (many connections pipelining GetEndpoints and never reading
//! the answers) and an unfinished-chunk bomb from many connections. The
//! server's RSS (/proc/PID/status) must stay below a bound derived from the
//! configured budgets, and a fresh client is served afterwards.
//!
//! Sizes can be raised for a measurement run (release binary):
//! `UARING_TEST_BIN=target/release/uaring BP_CONNS=20 BP_REQUESTS=3000 BOMB_CONNS=200
//!  cargo test --release -p uaring --test backpressure -- --nocapture`

mod common;

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::memory::*;
use common::*;

/// `conns` connections pipeline `requests` GetEndpoints each and never read;
/// the server's RSS growth stays under twice the shard budget plus 16 MiB
/// (provided receive buffers, allocator slack, `Vec` capacity rounding). With
/// `expect_refusal`, the slow readers alone hold more than the budget, so a
/// new connection meanwhile is refused with BadTcpNotEnoughResources.
fn slow_readers(
    tag: &str,
    backend: &str,
    conns: usize,
    requests: usize,
    per_conn: u64,
    budget: u64,
    expect_refusal: bool,
) {
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
                conn.send_request(get_endpoints(&url), now(), &mut out)
                    .expect("encode GetEndpoints");
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
        panic!(
            "server grew by {} KiB under slow readers (bound {} KiB); log tail:\n{tail}",
            growth / 1024,
            bound / 1024
        );
    }
    assert!(rss_bytes(pid) > 0, "the server is still running");
    if expect_refusal {
        let e =
            try_get_endpoints(addr).expect_err("a shard over its budget takes no new connection");
        assert!(
            e.contains("BadTcpNotEnoughResources"),
            "refused with BadTcpNotEnoughResources: {e}"
        );
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
    slow_readers(
        "slow-epoll",
        "epoll",
        conns,
        requests,
        256 * 1024,
        16 * MIB,
        false,
    );
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
    slow_readers(
        "slow-budget-epoll",
        "epoll",
        conns,
        1000,
        1 << 20,
        8 * MIB,
        true,
    );
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
                    conn.send_request(get_endpoints(&url), now(), &mut out)
                        .expect("encode GetEndpoints");
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
            panic!(
                "{open} slow readers were not closed by the server ({backend}); log tail:\n{tail}"
            );
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
    conn.send_request(get_endpoints(&big), now(), &mut out)
        .expect("encode");
    // Drop the final chunk; keep half of it as an unfinished chunk.
    let mut frames = Vec::new();
    let mut off = 0;
    while off + 8 <= out.len() {
        let size =
            u32::from_le_bytes([out[off + 4], out[off + 5], out[off + 6], out[off + 7]]) as usize;
        frames.push((off, size));
        off += size;
    }
    let &(last_off, last_size) = frames.last().expect("chunks");
    assert!(frames.len() > 4, "the message spans many chunks");
    assert_eq!(out[last_off + 3], b'F', "the last chunk is final");
    out.truncate(last_off + last_size / 2);
    Ok((s, out))
}

/// `conns` connections each send [`bomb_bytes`], pushed as they come so that the budget
/// fills while connections keep coming. Returns the connections held, how many were
/// refused, and the bytes the kernel took of all there were. Connections that arrive while
/// the shard is over its budget are refused (ERR BadTcpNotEnoughResources): that is how it
/// stays within it. One accepted just before the budget ran out is not read until its Hello
/// (or OpenSecureChannel) times out (ERR BadTimeout).
#[allow(clippy::type_complexity)]
fn bomb(addr: SocketAddr, conns: usize) -> (Vec<(TcpStream, Vec<u8>, usize)>, usize, usize, usize) {
    let mut bombs: Vec<(TcpStream, Vec<u8>, usize)> = Vec::new();
    let mut refused = 0;
    for _ in 0..conns {
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
        push_all(
            &mut bombs,
            Duration::from_millis(20),
            Duration::from_secs(60),
        );
    }
    let (written, total) = push_all(&mut bombs, Duration::from_secs(3), Duration::from_secs(120));
    (bombs, refused, written, total)
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
    let (server, dir) = start_server(
        &format!("io_backend = \"{backend}\"\nmax_shard_buffered_bytes = {budget}"),
        tag,
    );
    let addr = server.addr;
    fresh_client_is_served(addr);
    let pid = server.child.id();
    let baseline = rss_bytes(pid);
    let sampler = RssSampler::start(pid);

    let (bombs, refused, written, total) = bomb(addr, conns);
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
        panic!(
            "server grew by {} KiB under the chunk bomb (bound {} KiB); log tail:\n{tail}",
            growth / 1024,
            bound / 1024
        );
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

/// The default configuration's server-wide budget: 200 connections without a session,
/// each with an unfinished 900 KiB message, grow the server by less than 64 MiB on one shard
/// and on two (the pre-session share, 32 MiB in all, is shared out across the shards), and
/// a client whose session was activated before is still served meanwhile.
#[test]
fn unauthenticated_clients_stay_within_the_pre_session_share_on_one_and_two_shards() {
    for shards in [1, 2] {
        pre_session_bomb(shards);
    }
}

fn pre_session_bomb(shards: usize) {
    let conns = env_usize("BOMB_CONNS", 200);
    let (server, dir) = start_server_on(shards, "", "", &format!("pre-session-{shards}"));
    let addr = server.addr;
    fresh_client_is_served(addr);
    // Sessions on every shard (reuseport hashes connections: open a few).
    let url = format!("opc.tcp://{addr}");
    let mut sessions: Vec<uaring_harness::blocking::Client> = (0..4 * shards)
        .map(|_| {
            let mut c = uaring_harness::blocking::Client::connect(&url, Duration::from_secs(10))
                .expect("connect");
            c.activate_session_anonymous().expect("session");
            c
        })
        .collect();
    let pid = server.child.id();
    let baseline = rss_bytes(pid);
    let sampler = RssSampler::start(pid);
    let (bombs, refused, written, total) = bomb(addr, conns);
    // The sessions are read while the connections without one are not.
    let node = uaring_core::types::NodeId::ns0(2258); // Server.ServerStatus.CurrentTime
    for c in &mut sessions {
        let v = c.read_values(std::slice::from_ref(&node)).expect("read");
        assert!(v.first().is_some_and(|d| d.status.is_none()), "{v:?}");
    }
    settle(pid);
    let peak = sampler.peak();
    drop(sampler);
    let growth = peak.saturating_sub(baseline);
    let bound = 64 * MIB;
    eprintln!(
        "pre-session bomb, {shards} shard(s): {conns} connections ({refused} refused), {written}/{total} bytes \
         taken by the kernel; server RSS baseline {} KiB, peak {} KiB, growth {} KiB (bound {} KiB)",
        baseline / 1024,
        peak / 1024,
        growth / 1024,
        bound / 1024
    );
    assert!(
        refused > 0,
        "200 × 900 KiB is past the 32 MiB pre-session share: some are refused"
    );
    if growth >= bound {
        let (_, _, err) = server.terminate();
        let tail = &err[err.len().saturating_sub(4000)..];
        panic!(
            "{shards} shard(s): the server grew by {} KiB (bound {} KiB); log tail:\n{tail}",
            growth / 1024,
            bound / 1024
        );
    }
    drop(bombs);
    drop(sessions);
    fresh_client_is_served(addr);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    assert!(
        err.contains("buffer budget: 64.0 MiB in all")
            && err.contains("of which 32.0 MiB for connections without an activated session"),
        "the start log states the totals:\n{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_zero_budget_is_rejected() {
    for key in [
        "max_shard_buffered_bytes",
        "max_pending_output_bytes",
        "send_stall_timeout_ms",
    ] {
        let dir = common::TempDir::new(&format!("uaring-bp-zero-{key}"));
        let cfg = dir.join("uaring.toml");
        std::fs::write(&cfg, format!("[runtime]\n{key} = 0\n")).expect("write config");
        let out = std::process::Command::new(bin())
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--config",
                cfg.to_str().expect("path"),
            ])
            .output()
            .expect("run uaring");
        assert!(!out.status.success(), "{key} = 0 must be refused");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(key), "the error names {key}: {err}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
