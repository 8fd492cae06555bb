//! `uaring-bench run --idle-sessions N` against the real binary: the server holds the N
//! sessions beside the measured clients for the whole run, none of them times out although
//! the run outlasts the session timeout the server grants, and they are closed after it.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Server;
use uaring_harness::cli::RunOpts;
use uaring_harness::run::RunConfig;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    text.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// Sum over the shards of the samples of `name` with `label` (or all of them).
fn sum(body: &str, name: &str, label: &str) -> f64 {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            (n == name && rest.contains(label)).then(|| value.parse::<f64>().unwrap())
        })
        .sum()
}

#[test]
fn idle_sessions_stay_open_through_the_run_and_close_after_it() {
    let port = free_port();
    let dir = common::TempDir::new("uaring-idle");
    let cfg = dir.join("uaring.toml");
    // Sessions time out after 1 s without a request; the run lasts longer than that.
    std::fs::write(&cfg, format!("[metrics]\nlisten = \"127.0.0.1:{port}\"\n\n[sessions]\nsession_timeout_min_ms = 500.0\nsession_timeout_max_ms = 1000.0\n")).unwrap();
    let server = Server::start(&[
        "--contract",
        "--shards",
        "2",
        "--config",
        cfg.to_str().unwrap(),
    ]);
    let pid = server.child.id().to_string();
    let url = server.url();
    let opts = RunOpts::try_parse_words([
        "run",
        "--url",
        &url,
        "--server-pid",
        &pid,
        "--scenario",
        "read",
        "--clients",
        "2",
        "--inflight",
        "1",
        "--idle-sessions",
        "3",
        "--duration",
        "2",
        "--warmup",
        "0.5",
        "--server-cpus",
        "0",
        "--client-cpus",
        "0",
        "--foreign-max",
        "1000",
        "--max-repeats",
        "0",
    ])
    .unwrap();
    let run = RunConfig::from_opts(&opts).unwrap();

    // While the run goes on: the most sessions the server held at once, and its session
    // timeouts (the measured clients leave without CloseSession after the run, so theirs
    // time out a second later; none may before).
    let done = AtomicBool::new(false);
    let (result, (most, timeouts)) = std::thread::scope(|s| {
        let watcher = s.spawn(|| {
            let (mut most, mut timeouts) = (0.0f64, 0.0f64);
            while !done.load(Ordering::SeqCst) {
                let m = scrape(port);
                most = most.max(sum(&m, "uaring_sessions", ""));
                timeouts = timeouts.max(sum(&m, "uaring_session_timeouts_total", ""));
                std::thread::sleep(Duration::from_millis(50));
            }
            (most, timeouts)
        });
        let result = uaring_harness::scenarios::run_scenario(&run);
        done.store(true, Ordering::SeqCst);
        (result, watcher.join().unwrap())
    });
    let o = result.unwrap();
    assert_eq!(o["idle_sessions"], 3, "{o:?}");
    assert_eq!(o["errors"], 0, "{o:?}");
    assert!(o["ops"].as_u64().unwrap() > 0, "{o:?}");
    assert_eq!(
        most, 5.0,
        "two measured clients and three idle sessions at once"
    );
    // The idle sessions outlived the 1 s timeout (their keep-alive Reads).
    assert_eq!(timeouts, 0.0, "a session timed out during the run");

    // The harness closed them (each CloseSession answered Good, or the run would have failed).
    let end = scrape(port);
    assert_eq!(sum(&end, "uaring_sessions_created_total", ""), 5.0, "{end}");
    assert!(sum(&end, "uaring_sessions", "") <= 2.0, "{end}");
    assert!(
        sum(&end, "uaring_requests_total", "service=\"CloseSession\"") >= 3.0,
        "{end}"
    );
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}
