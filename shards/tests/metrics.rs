//! The Prometheus endpoint of the real binary: a scrape of a loaded server shows the
//! counters moving, and ServerDiagnostics shows the same figures to an OPC UA client.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use common::{field_values, Server};
use uaring_core::types::{NodeId, Variant};
use uaring_harness::blocking::Client;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(port: u16, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_string(), body.to_string())
}

/// Sum of the samples of `name` whose labels include every `labels` pair.
fn sum(body: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\""))))
            .then(|| value.parse::<f64>().unwrap())
        })
        .sum()
}

/// The configuration file (in `dir`) of a server with its metrics endpoint on `port`.
fn config(dir: &common::TempDir, port: u16) -> std::path::PathBuf {
    let p = dir.join("uaring.toml");
    std::fs::write(&p, format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n")).unwrap();
    p
}

fn diagnostics(c: &mut Client) -> Vec<u32> {
    let ids: Vec<NodeId> = [2277u32, 2278, 3705, 2288]
        .iter()
        .map(|&i| NodeId::ns0(i))
        .collect();
    c.read_values(&ids)
        .unwrap()
        .into_iter()
        .map(|dv| match dv.value {
            Variant::UInt32(v) => v,
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn scrape_of_a_loaded_server_shows_counters_moving() {
    let port = free_port();
    let dir = common::TempDir::new("uaring-metrics");
    let cfg = config(&dir, port);
    let server = Server::start(&["--config", cfg.to_str().unwrap(), "--shards", "2"]);
    let (head, before) = get(port, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert!(
        before.contains("# TYPE uaring_requests_total counter"),
        "{before}"
    );
    assert_eq!(
        sum(&before, "uaring_requests_total", &[("service", "Read")]),
        0.0
    );
    assert_eq!(sum(&before, "uaring_sessions", &[]), 0.0);

    // Load: two sessions, 200 Reads and one Read of a node that does not exist.
    let mut clients: Vec<Client> = (0..2)
        .map(|_| Client::connect(&server.url(), Duration::from_secs(5)).unwrap())
        .collect();
    for c in &mut clients {
        c.create_session().unwrap();
        c.activate_session_anonymous().unwrap();
    }
    for i in 0..200 {
        clients[i % 2]
            .read_values(&[NodeId::numeric(1, 1001)])
            .unwrap();
    }
    let d = diagnostics(&mut clients[0]);
    assert_eq!(d[0], 2, "CurrentSessionCount");
    assert_eq!(d[1], 2, "CumulatedSessionCount");
    // A request answered Bad: ActivateSession with a session token the server does not know
    // is not easy to build here; a Browse with no session is (BadSessionIdInvalid).
    let mut bare = Client::connect(&server.url(), Duration::from_secs(5)).unwrap();
    let bad = bare.read_values(&[NodeId::ns0(2258)]);
    assert!(bad.is_err(), "Read without a session is refused");

    // The shards publish once per loop iteration; give the last one a moment.
    std::thread::sleep(Duration::from_millis(200));
    let (_, after) = get(port, "/metrics");
    let reads = sum(&after, "uaring_requests_total", &[("service", "Read")]);
    assert!(reads >= 201.0, "Reads counted: {reads}\n{after}");
    assert!(
        sum(
            &after,
            "uaring_request_errors_total",
            &[("service", "Read")]
        ) >= 1.0,
        "{after}"
    );
    assert_eq!(
        sum(
            &after,
            "uaring_requests_total",
            &[("service", "CreateSession")]
        ),
        2.0
    );
    assert_eq!(sum(&after, "uaring_sessions", &[]), 2.0, "{after}");
    assert_eq!(sum(&after, "uaring_sessions_created_total", &[]), 2.0);
    assert_eq!(
        sum(&after, "uaring_secure_channels", &[("policy", "None")]),
        3.0,
        "{after}"
    );
    assert_eq!(sum(&after, "uaring_connections", &[]), 3.0, "{after}");
    assert_eq!(
        sum(&after, "uaring_handshakes_in_progress", &[]),
        0.0,
        "{after}"
    );
    for counter in [
        "uaring_received_bytes_total",
        "uaring_sent_bytes_total",
        "uaring_loop_iterations_total",
    ] {
        assert!(
            sum(&after, counter, &[]) > sum(&before, counter, &[]),
            "{counter} did not move"
        );
    }
    if after.contains("io_backend=\"uring\"") {
        assert!(
            sum(&after, "uaring_uring_submissions_total", &[])
                > sum(&before, "uaring_uring_submissions_total", &[])
        );
        assert!(
            sum(&after, "uaring_uring_completions_total", &[])
                > sum(&before, "uaring_uring_completions_total", &[])
        );
    }
    assert!(sum(&after, "uaring_loop_idle_seconds_total", &[]) > 0.0);
    // Batched waiting is off by default: no wait asked for more than one completion.
    assert!(
        after.contains("# TYPE uaring_uring_batch_waits_total counter"),
        "{after}"
    );
    assert_eq!(
        sum(&after, "uaring_uring_batch_waits_total", &[]),
        0.0,
        "{after}"
    );
    assert_eq!(
        sum(&after, "uaring_uring_batch_wanted_total", &[]),
        0.0,
        "{after}"
    );
    // Every shard appears, with its label.
    assert!(
        after.contains("uaring_connections{shard=\"0\"}")
            && after.contains("uaring_connections{shard=\"1\"}")
    );

    // ServerDiagnostics shows the same: the rejected Read counts as a rejected request.
    let d = diagnostics(&mut clients[1]);
    assert!(d[3] >= 1, "RejectedRequestsCount {d:?}");
    drop(bare);
    for c in clients {
        c.close().unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    let (_, end) = get(port, "/metrics");
    assert_eq!(
        sum(&end, "uaring_sessions", &[]),
        0.0,
        "CloseSession on close: {end}"
    );
    assert_eq!(sum(&end, "uaring_secure_channels", &[]), 0.0, "{end}");

    let (head, _) = get(port, "/other");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("metrics endpoint http://127.0.0.1:{port}/metrics")),
        "{err}"
    );
}

#[test]
fn batched_waits_are_counted_in_the_metrics_and_the_statistics_file() {
    let port = free_port();
    let dir = common::TempDir::new("uaring-metrics-batched");
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        format!("[runtime]\nbatch_wait_us = 50\n\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .unwrap();
    let stats = dir.join("stats.json");
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--shards",
        "1",
        "--stats-file",
        stats.to_str().unwrap(),
    ]);
    let (_, before) = get(port, "/metrics");
    let uring = before.contains("io_backend=\"uring\"");

    // Two request/response clients at once: each wait expects at least a reply's send and
    // the next request, so the shard's waits ask for more than one completion.
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mut c = Client::connect(&server.url(), Duration::from_secs(5)).unwrap();
                c.create_session().unwrap();
                c.activate_session_anonymous().unwrap();
                for _ in 0..200 {
                    c.read_values(&[NodeId::numeric(1, 1001)]).unwrap();
                }
                c.close().unwrap();
            });
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    let (_, after) = get(port, "/metrics");
    let waits = sum(&after, "uaring_uring_batch_waits_total", &[]);
    let wanted = sum(&after, "uaring_uring_batch_wanted_total", &[]);
    server.signal(libc::SIGUSR1);
    std::thread::sleep(Duration::from_millis(200));
    let json = std::fs::read_to_string(&stats).unwrap();
    let (file_waits, file_wanted) = (
        field_values(&json, "batch_waits"),
        field_values(&json, "batch_wanted"),
    );
    assert_eq!(
        (file_waits.len(), file_wanted.len()),
        (1, 1),
        "one shard: {json}"
    );
    if uring {
        assert!(
            waits > 0.0,
            "400 Reads of two clients without a batched wait:\n{after}"
        );
        // Every counted wait asked for at least two completions.
        assert!(wanted >= 2.0 * waits, "waits {waits}, wanted {wanted}");
        // The file shows the same counters, at least as far as the scrape before it.
        assert!(
            file_waits[0] as f64 >= waits && file_wanted[0] as f64 >= wanted,
            "{json} after waits {waits}, wanted {wanted}"
        );
        assert!(file_wanted[0] >= 2 * file_waits[0], "{json}");
    } else {
        assert_eq!(
            (waits, wanted),
            (0.0, 0.0),
            "epoll has no batched waiting:\n{after}"
        );
        assert_eq!((file_waits[0], file_wanted[0]), (0, 0), "{json}");
    }
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn a_bad_metrics_address_stops_the_start() {
    let dir = common::TempDir::new("uaring-metrics-bad");
    let p = dir.join("uaring.toml");
    std::fs::write(&p, "[metrics]\nlisten = \"localhost\"\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--config",
            p.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics.listen"));
}
