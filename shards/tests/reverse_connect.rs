//! Reverse Connect (Part 6 §7.1.3) with the real `uaring` binary: the server dials the client
//! of `[[reverse_connect]]`, says ReverseHello, keeps the configured number of idle
//! connections waiting, never holds more than `max_connections` to the client, backs off from a
//! client that turns its connections away, and closes an idle connection the client leaves
//! unused past `hello_wait_ms`. A connection the client takes up is an ordinary one: a session
//! on it reads, and resumes on a connection of its own after the dialed one is gone.
//!
//! The waits are hang guards; the one bounded quiet period (no connection beyond the
//! maximum) is a check of a count, not of speed.

mod common;

use std::io::Write;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::int32::resume;
use common::*;
use uaring_harness::blocking::{read_reverse_hello, Client};

const T: Duration = Duration::from_secs(10);

fn config(dir: &TempDir, client_port: u16, extra: &str) -> std::path::PathBuf {
    config_on("auto", dir, client_port, extra)
}

fn config_on(backend: &str, dir: &TempDir, client_port: u16, extra: &str) -> std::path::PathBuf {
    let path = dir.join("uaring.toml");
    let mut f = std::fs::File::create(&path).unwrap();
    writeln!(
        f,
        "[runtime]\nshards = 2\ndistribution = \"round-robin\"\nio_backend = \"{backend}\"\n\n\
         [[reverse_connect]]\nurl = \"opc.tcp://127.0.0.1:{client_port}\"\n{extra}"
    )
    .unwrap();
    path
}

fn start(dir: &TempDir, cfg: &std::path::Path) -> Server {
    Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
    ])
}

/// The next connection the server dials, within the hang guard.
fn next_dialed(listener: &TcpListener) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let deadline = Instant::now() + T;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                return s;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "the server dialed no connection");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

/// Connections dialed during `d` (accepted and kept open).
fn dialed_during(listener: &TcpListener, d: Duration) -> Vec<std::net::TcpStream> {
    listener.set_nonblocking(true).unwrap();
    let until = Instant::now() + d;
    let mut got = Vec::new();
    while Instant::now() < until {
        match listener.accept() {
            Ok((s, _)) => got.push(s),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(10))
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
    got
}

#[test]
fn the_server_dials_keeps_idle_connections_and_serves_sessions_on_them() {
    dials_keeps_idle_connections_and_serves_sessions("uring");
}

#[test]
fn on_epoll_too() {
    dials_keeps_idle_connections_and_serves_sessions("epoll");
}

fn dials_keeps_idle_connections_and_serves_sessions(backend: &str) {
    let dir = TempDir::new(&format!("uaring-reverse-{backend}"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = config_on(
        backend,
        &dir,
        port,
        "idle_connections = 2\nmax_connections = 3\nretry_min_ms = 50\nretry_max_ms = 200\n",
    );
    let server = start(&dir, &cfg);
    // Two idle connections, each opened with a ReverseHello naming the server.
    let a = next_dialed(&listener);
    let b = next_dialed(&listener);
    for s in [&a, &b] {
        let rhe = read_reverse_hello(s, T).expect("a ReverseHello first");
        assert_eq!(rhe.server_uri.as_str(), "urn:uaring:server");
        let url = rhe.endpoint_url.as_str();
        assert!(
            url.starts_with("opc.tcp://") && url.ends_with(&format!(":{}", server.addr.port())),
            "EndpointUrl {url:?} names the server's listening port"
        );
    }
    // Take one up: an ordinary channel and session on the server's socket.
    listener.set_nonblocking(false).unwrap();
    drop(a);
    // The dropped one was never taken up; the replacement comes after the back-off.
    let (mut c, rhe) = Client::accept_reverse(&listener, T).expect("take a dialed connection up");
    assert_eq!(rhe.server_uri.as_str(), "urn:uaring:server");
    c.activate_session_anonymous()
        .expect("a session on a reverse connection");
    let token = c.connection().authentication_token().clone();
    let v = c
        .read_values(&[uaring_core::NodeId::numeric(0, 2259)])
        .expect("Read ServerStatus.State");
    assert_eq!(v.len(), 1);
    assert!(v[0].status.is_none_or(|s| s.is_good()), "{:?}", v[0]);
    assert_eq!(
        v[0].value,
        uaring_core::Variant::Int32(0),
        "ServerStatus.State Running"
    );
    // Taken up: the server dials a replacement, so that two wait again (b and the new one);
    // that makes three, its maximum for this client.
    let replacement = next_dialed(&listener);
    read_reverse_hello(&replacement, T).expect("the replacement says ReverseHello");
    let extra = dialed_during(&listener, Duration::from_millis(700));
    assert!(
        extra.is_empty(),
        "{} connections beyond max_connections = 3",
        extra.len()
    );
    // The session lives on without its dialed connection: resumed on a connection of the
    // client's own, to the listening port (whichever shard that lands on).
    drop(c);
    let mut again = resume(&server.url(), &token);
    let v = again
        .read_values(&[uaring_core::NodeId::numeric(0, 2259)])
        .expect("Read on the resumed session");
    assert!(v[0].status.is_none_or(|s| s.is_good()), "{:?}", v[0]);
    assert_eq!(
        v[0].value,
        uaring_core::Variant::Int32(0),
        "ServerStatus.State Running"
    );
    // The session's connection is gone, but two still wait (b and the replacement): nothing
    // to dial. When one of those goes away unused, the dialer makes two wait again.
    drop(b);
    let refill = next_dialed(&listener);
    read_reverse_hello(&refill, T).expect("a new idle connection after one went away");
    drop((replacement, refill));
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("reverse connect: dialing"),
        "the start log names the client: {stderr}"
    );
}

#[test]
fn a_client_that_turns_connections_away_is_backed_off_and_an_unused_one_times_out() {
    let dir = TempDir::new("uaring-reverse-backoff");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = config(
        &dir,
        port,
        "retry_min_ms = 1500\nretry_max_ms = 4000\nhello_wait_ms = 300\n",
    );
    let server = start(&dir, &cfg);
    // An idle connection the client leaves unused gets ERR BadTimeout after hello_wait_ms.
    let mut idle = next_dialed(&listener);
    read_reverse_hello(&idle, T).expect("ReverseHello");
    idle.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (bytes, closed) = read_until_closed(&mut idle, T);
    assert!(
        closed,
        "the server closes an idle connection past hello_wait_ms"
    );
    assert_eq!(&bytes[..3], b"ERR");
    let status = u32::from_le_bytes(bytes[8..12].try_into().unwrap());
    assert_eq!(status, uaring_core::StatusCode::BadTimeout.0);
    // That was the client leaving it unused, not turning it away: the replacement is dialed
    // without the back-off (1.5 s here).
    let waited = Instant::now();
    let replacement = next_dialed(&listener);
    assert!(
        waited.elapsed() < Duration::from_millis(1000),
        "an idle connection that timed out is replaced at once, not after the back-off: {:?}",
        waited.elapsed()
    );
    drop(replacement);
    // A client that closes every dialed connection at once (the one just dropped included):
    // without a back-off the server would dial it hundreds of times in 3 s; with 1.5 s
    // doubling it dials one or two.
    let turned_away = {
        let until = Instant::now() + Duration::from_secs(3);
        let mut n = 0;
        listener.set_nonblocking(true).unwrap();
        while Instant::now() < until {
            match listener.accept() {
                Ok((s, _)) => {
                    n += 1;
                    drop(s);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        n
    };
    assert!(
        (1..=3).contains(&turned_away),
        "{turned_away} connections in 3 s to a client that turns each away"
    );
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("reverse connect: the client closed a connection without taking it up"),
        "{stderr}"
    );
}

/// A dialed connection takes any policy: Basic256Sha256 SignAndEncrypt, with the client's
/// certificate in the server's trust list and the server's known to the client beforehand
/// (it cannot ask GetEndpoints on a connection of its own first).
#[test]
fn a_reverse_connection_opens_a_signed_and_encrypted_channel() {
    use uaring_core::client::ClientConfig;
    use uaring_core::generated::types::MessageSecurityMode;
    use uaring_crypto::{
        generate_self_signed, CertificateRequest, OwnIdentity, PolicyId, RsaPolicy,
    };
    let dir = TempDir::new("uaring-reverse-secure");
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (cert, key) = generate_self_signed(&CertificateRequest::new(
        "urn:uaring:reverse-test",
        "reverse test",
        unix_s - 3600,
    ))
    .expect("client certificate");
    let trusted = dir.join("pki/trusted/certs");
    std::fs::create_dir_all(&trusted).unwrap();
    std::fs::write(trusted.join("client.der"), cert.der()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let cfg = config(&dir, port, "");
    let server = start(&dir, &cfg);
    let server_cert = std::fs::read(dir.join("pki/own/certs/uaring.der")).expect("server cert");
    let id = OwnIdentity::new(cert, key).expect("identity");
    let (mut c, _) = Client::accept_reverse_with(&listener, T, |url| {
        let mut cfg = ClientConfig::new(url);
        cfg.policy = RsaPolicy::client(PolicyId::Basic256Sha256, id).expect("policy");
        cfg.mode = MessageSecurityMode::SignAndEncrypt;
        cfg.server_certificate = Some(server_cert);
        cfg
    })
    .expect("a SignAndEncrypt channel on the server's connection");
    let eps = c
        .get_endpoints()
        .expect("GetEndpoints over the secured channel");
    assert!(eps
        .iter()
        .any(|e| e.security_mode == MessageSecurityMode::SignAndEncrypt));
    drop(c);
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// A session made on a connection of the client's own, resumed on dialed connections: the two
/// idle ones wait on different shards (the dialer gives each to the shard with the fewest), so
/// one of them is on the shard that does not own the session and moves there, lease and all,
/// and the session reads on both.
#[test]
fn a_dialed_connection_moves_to_the_shard_that_owns_its_session() {
    let dir = TempDir::new("uaring-reverse-move");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let stats = dir.join("stats.json");
    let metrics_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cfg = config(
        &dir,
        port,
        &format!(
            "idle_connections = 2\nmax_connections = 4\n[metrics]\nlisten = \"127.0.0.1:{metrics_port}\"\n"
        ),
    );
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
        "--stats-file",
        stats.to_str().unwrap(),
    ]);
    let mut own = Client::connect(&server.url(), T).expect("connect");
    own.activate_session_anonymous().expect("session");
    let token = own.connection().authentication_token().clone();
    drop(own);
    listener.set_nonblocking(false).unwrap();
    let mut taken = Vec::new();
    for _ in 0..2 {
        let (mut c, _) = Client::accept_reverse(&listener, T).expect("a dialed connection");
        c.connection().set_authentication_token(token.clone());
        common::int32::activate(&mut c).expect("ActivateSession on a dialed connection");
        let v = c
            .read_values(&[uaring_core::NodeId::numeric(0, 2259)])
            .expect("Read");
        assert_eq!(v[0].value, uaring_core::Variant::Int32(0));
        taken.push(c);
    }
    server.signal(libc::SIGUSR1);
    let deadline = Instant::now() + T;
    let moved_in = loop {
        let n: u64 = std::fs::read_to_string(&stats)
            .map(|t| field_values(&t, "moved_in").iter().sum())
            .unwrap_or(0);
        if n > 0 || Instant::now() >= deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        moved_in >= 1,
        "one dialed connection moved to the session's shard"
    );
    // The dialer's counters, per client, in the metrics: both taken up, and (once the
    // replacements are dialed) two more waiting.
    let client = format!("{{client=\"opc.tcp://127.0.0.1:{port}\"}}");
    let deadline = Instant::now() + T;
    let body = loop {
        let mut scrape = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
        scrape.set_read_timeout(Some(T)).unwrap();
        write!(scrape, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut scrape, &mut body).unwrap();
        if body.contains(&format!("uaring_reverse_open{client} 4")) || Instant::now() >= deadline {
            break body;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        body.contains(&format!("uaring_reverse_open{client} 4")),
        "{body}"
    );
    assert!(
        body.contains(&format!("uaring_reverse_idle{client} 2")),
        "{body}"
    );
    assert!(
        body.contains(&format!("uaring_reverse_taken_total{client} 2")),
        "{body}"
    );
    assert!(
        body.contains(&format!("uaring_reverse_dialed_total{client} 4")),
        "{body}"
    );
    drop(taken);
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}
