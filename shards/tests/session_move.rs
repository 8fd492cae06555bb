//! The real `uaring` binary with two shards and round-robin distribution, on each backend:
//! a client whose reconnect lands on the shard that does not own its session is moved —
//! socket, secure channel, the ActivateSession and what follows it — to the owning shard,
//! and its session, subscription and queued notifications survive. The statistics file
//! shows the moves.

mod common;

use std::time::{Duration, Instant};

use common::int32::*;
use common::*;
use uaring_core::NodeId;
use uaring_harness::blocking::Client;

fn start(backend: &str, stats: &std::path::Path) -> Server {
    Server::start(&[
        "--shards",
        "2",
        "--distribution",
        "round-robin",
        "--io-backend",
        backend,
        "--stats-file",
        stats.to_str().unwrap(),
    ])
}

/// (moved_out, moved_in, move_refused) summed over the shards, freshly written.
fn moves(server: &Server, stats: &std::path::Path) -> (u64, u64, u64) {
    let before = std::fs::metadata(stats).and_then(|m| m.modified()).ok();
    server.signal(libc::SIGUSR1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline
        && std::fs::metadata(stats).and_then(|m| m.modified()).ok() == before
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(50));
    let text = std::fs::read_to_string(stats).expect("stats file");
    let sum = |key: &str| -> u64 {
        text.match_indices(&format!("\"{key}\":"))
            .map(|(i, m)| {
                let rest = &text[i + m.len()..];
                rest[..rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len())]
                    .parse::<u64>()
                    .unwrap()
            })
            .sum()
    };
    (sum("moved_out"), sum("moved_in"), sum("move_refused"))
}

fn reconnects_keep_the_subscription(backend: &str) {
    let dir = common::TempDir::new(&format!("uaring-move-{backend}"));
    let stats = dir.join("stats.json");
    let server = start(backend, &stats);
    let url = server.url();
    // Round robin: the writer lands on shard 0, the subscriber's first connection on shard 1.
    let mut writer = Client::connect(&url, T).expect("writer");
    writer.activate_session_anonymous().expect("writer session");
    let mut sub = Client::connect(&url, T).expect("subscriber");
    sub.activate_session_anonymous()
        .expect("subscriber session");
    let token = sub.connection().authentication_token().clone();
    subscribe(&mut sub);
    write(&mut writer, 0);
    let mut acks = Vec::new();
    let mut seen = collect_until(&mut sub, &mut acks, 0);
    let (_, moved_before, _) = moves(&server, &stats);
    let mut v = 0;
    for _ in 0..10 {
        // Dropped without CloseSession/CloseSecureChannel; a value changes while it is away.
        drop(sub);
        v += 1;
        write(&mut writer, v);
        sub = resume(&url, &token);
        seen.extend(collect_until(&mut sub, &mut acks, v));
    }
    assert_eq!(
        seen,
        (0..=v).collect::<Vec<_>>(),
        "every value once, in order"
    );
    let (out, moved_in, refused) = moves(&server, &stats);
    assert_eq!(refused, 0);
    assert_eq!(out, moved_in);
    // Round robin alternates shards: every other reconnect lands on the other shard.
    assert!(
        moved_in - moved_before >= 4,
        "moves: {}",
        moved_in - moved_before
    );
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn reconnects_keep_the_subscription_uring() {
    reconnects_keep_the_subscription("uring");
}

#[test]
fn reconnects_keep_the_subscription_epoll() {
    reconnects_keep_the_subscription("epoll");
}

/// Many clients reconnecting at once: every move either goes through or is refused with
/// BadResourceUnavailable (and the retry goes through); nothing hangs, nothing is lost.
fn concurrent_moves(backend: &str) {
    let dir = common::TempDir::new(&format!("uaring-moves-{backend}"));
    let stats = dir.join("stats.json");
    let server = start(backend, &stats);
    let url = server.url();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&url, T).expect("connect");
                c.activate_session_anonymous().expect("session");
                let token = c.connection().authentication_token().clone();
                for _ in 0..10 {
                    drop(c);
                    c = resume(&url, &token);
                    let r = c
                        .read_values(&[NodeId::ns0(2258)])
                        .expect("read after the move");
                    assert_eq!(r.len(), 1);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("client thread");
    }
    let (out, moved_in, _) = moves(&server, &stats);
    assert_eq!(out, moved_in, "every connection sent was taken");
    assert!(moved_in >= 8, "moves: {moved_in}");
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn concurrent_moves_uring() {
    concurrent_moves("uring");
}

#[test]
fn concurrent_moves_epoll() {
    concurrent_moves("epoll");
}
