//! Hostile clients against the real `uaring` binary (docs/Limits.md): each test
//! asserts what the abusive client sees and measures the server's peak resident
//! set growth against the configured budget (`eprintln!` lines `peak: …`, run with
//! `--nocapture` to collect them). The slow reader and the unfinished chunk bomb
//! under the pre-session limit are in backpressure.rs.
//!
//! Measurement run (release binary):
//! `UARING_TEST_BIN=target/release/uaring cargo test --release -p uaring --test abuse -- --nocapture --test-threads 1`

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::memory::*;
use common::*;
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::types::{
    ByteString, DataValue, ExtensionObject, NodeId, StatusCode, UaString, Variant,
};

/// Peak RSS growth while `f` runs (after a warm-up client), bytes; prints it beside the
/// budget that holds it.
fn peak_growth(name: &str, pid: u32, budget: &str, f: impl FnOnce()) -> u64 {
    let baseline = rss_bytes(pid);
    let sampler = RssSampler::start(pid);
    f();
    settle(pid);
    let peak = sampler.peak();
    drop(sampler);
    let growth = peak.saturating_sub(baseline);
    eprintln!(
        "peak: {name}: RSS baseline {} KiB, peak {} KiB, growth {} KiB; budget: {budget}",
        baseline / 1024,
        peak / 1024,
        growth / 1024,
    );
    growth
}

/// The status of an ERR message, if `msg` is one.
fn err_status(msg: &[u8]) -> Option<StatusCode> {
    if msg.len() >= 12 && &msg[..3] == b"ERR" {
        Some(StatusCode(u32::from_le_bytes([
            msg[8], msg[9], msg[10], msg[11],
        ])))
    } else {
        None
    }
}

/// Reads messages until an ERR arrives or the server closes; the ERR's status.
fn closing_status(s: &mut TcpStream, limit: Duration) -> Option<StatusCode> {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(limit));
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        match read_message(s) {
            Ok((_, msg)) => {
                if let Some(st) = err_status(&msg) {
                    return Some(st);
                }
            }
            Err(_) => return None,
        }
    }
    None
}

/// A None channel on a socket with blocking request/response calls and a session.
struct Raw {
    s: TcpStream,
    conn: ClientConnection,
    url: String,
}

impl Raw {
    fn open(addr: SocketAddr) -> Result<Raw, String> {
        let (s, conn) = try_open_channel(addr)?;
        Ok(Raw {
            s,
            conn,
            url: format!("opc.tcp://{addr}"),
        })
    }

    fn send(&mut self, req: Request) -> Result<u32, String> {
        let mut out = Vec::new();
        let id = self
            .conn
            .send_request(req, now(), &mut out)
            .map_err(|e| format!("encode: {e:?}"))?;
        self.s.write_all(&out).map_err(|e| format!("send: {e}"))?;
        Ok(id)
    }

    fn recv(&mut self) -> Result<(u32, Response), String> {
        let mut buf = vec![0u8; 65536];
        let mut out = Vec::new();
        loop {
            if let Some(r) = self.conn.poll_response() {
                return Ok(r);
            }
            let n = self.s.read(&mut buf).map_err(|e| format!("recv: {e}"))?;
            if n == 0 {
                return Err("server closed".into());
            }
            self.conn
                .on_recv(now(), &buf[..n], &mut out)
                .map_err(|e| format!("{e:?}"))?;
        }
    }

    fn call(&mut self, req: Request) -> Result<Response, String> {
        let id = self.send(req)?;
        loop {
            let (rid, r) = self.recv()?;
            if rid == id {
                return Ok(r);
            }
        }
    }

    fn create_session(&mut self) -> Result<CreateSessionResponse, String> {
        self.create_session_with(0)
    }

    fn create_session_with(
        &mut self,
        max_response_message_size: u32,
    ) -> Result<CreateSessionResponse, String> {
        let req = CreateSessionRequest {
            max_response_message_size,
            client_description: ApplicationDescription {
                application_uri: "urn:uaring:abuse".into(),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: self.url.as_str().into(),
            session_name: "abuse".into(),
            client_nonce: ByteString::from(vec![7u8; 32]),
            requested_session_timeout: 10_000.0,
            ..Default::default()
        };
        match self.call(Request::CreateSession(Box::new(req)))? {
            Response::CreateSession(r) => Ok(*r),
            other => Err(format!(
                "CreateSession: {} {:?}",
                other.name(),
                other.response_header().service_result
            )),
        }
    }

    fn activate(&mut self, cs: &CreateSessionResponse) -> Result<Response, String> {
        self.conn
            .set_authentication_token(cs.authentication_token.clone());
        let policy_id = cs
            .server_endpoints
            .iter()
            .flat_map(|e| e.user_identity_tokens.iter())
            .find(|p| p.token_type == UserTokenType::Anonymous)
            .map(|p| p.policy_id.clone())
            .unwrap_or_else(|| UaString::from("anonymous"));
        let req = ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id,
            }),
            ..Default::default()
        };
        self.call(Request::ActivateSession(Box::new(req)))
    }

    /// CreateSession + ActivateSession (anonymous); the session's token.
    fn session(&mut self) -> Result<NodeId, String> {
        let cs = self.create_session()?;
        match self.activate(&cs)? {
            Response::ActivateSession(_) => Ok(cs.authentication_token),
            other => Err(format!(
                "ActivateSession: {} {:?}",
                other.name(),
                other.response_header().service_result
            )),
        }
    }
}

fn service_result(r: &Response) -> StatusCode {
    r.response_header().service_result
}

fn read_request(node: NodeId) -> Request {
    Request::Read(Box::new(ReadRequest {
        nodes_to_read: vec![ReadValueId {
            node_id: node,
            attribute_id: 13,
            ..Default::default()
        }],
        ..Default::default()
    }))
}

/// The server exits 0 when told to stop; its directory goes with `dir`.
fn finish(server: Server, dir: common::TempDir) {
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "stderr:\n{err}");
    drop(dir);
}

/// Many connections each send 64 KiB chunks of one message and never its final chunk,
/// past the pre-session message budget: each is closed with ERR BadRequestTooLarge (or
/// refused, BadTcpNotEnoughResources, while the shard is over its budget), and the
/// server stays within its budget.
#[test]
fn chunk_bomb_of_64k_chunks_past_the_pre_session_budget() {
    let conns = env_usize("ABUSE_CONNS", 60);
    let budget = 16 * MIB;
    let (server, dir) = start_server(
        &format!("max_shard_buffered_bytes = {budget}"),
        "abuse-bomb64",
    );
    let addr = server.addr;
    fresh_client_is_served(addr);
    let mut statuses = Vec::new();
    let growth = peak_growth(
        "chunk bomb, 64 KiB chunks past the pre-session budget",
        server.child.id(),
        "max_shard_buffered_bytes 16 MiB, 1 MiB per connection",
        || {
            let mut bombs = Vec::new();
            for _ in 0..conns {
                match try_open_channel(addr) {
                    Ok((s, mut conn)) => {
                        let mut out = Vec::new();
                        // 3 MiB in 64 KiB chunks, the final chunk dropped.
                        let big = "x".repeat(3 << 20);
                        conn.send_request(get_endpoints(&big), now(), &mut out)
                            .expect("encode");
                        let mut off = 0;
                        let mut last = 0;
                        while off + 8 <= out.len() {
                            last = off;
                            off += u32::from_le_bytes([
                                out[off + 4],
                                out[off + 5],
                                out[off + 6],
                                out[off + 7],
                            ]) as usize;
                        }
                        out.truncate(last);
                        bombs.push((s, out, 0));
                    }
                    Err(e) => statuses.push(if e.contains("BadTcpNotEnoughResources") {
                        "refused"
                    } else {
                        "other"
                    }),
                }
                push_all(
                    &mut bombs,
                    Duration::from_millis(20),
                    Duration::from_secs(60),
                );
            }
            push_all(&mut bombs, Duration::from_secs(2), Duration::from_secs(60));
            for (s, _, _) in bombs.iter_mut() {
                let st = closing_status(s, Duration::from_secs(15));
                assert_eq!(
                    st,
                    Some(StatusCode::BadRequestTooLarge),
                    "a bomb past the pre-session budget gets ERR BadRequestTooLarge"
                );
                statuses.push("too large");
            }
        },
    );
    assert!(!statuses.contains(&"other"), "{statuses:?}");
    assert!(
        growth < 2 * budget + 16 * MIB,
        "growth {} KiB",
        growth / 1024
    );
    fresh_client_is_served(addr);
    finish(server, dir);
}

/// OpenSecureChannel requests (Basic256Sha256, Sign) whose signed and encrypted bytes
/// were altered, from many connections: each is closed with an ERR, none opens a
/// channel, the handshake limiter answers the excess with BadTcpServerTooBusy, and a
/// well-formed client is served afterwards.
#[test]
fn opn_flood_with_bad_signatures() {
    use uaring_crypto::{
        generate_self_signed, CertificateRequest, OwnIdentity, PolicyId, RsaPolicy,
    };
    let conns = env_usize("ABUSE_OPN_CONNS", 120);
    let dir = common::TempDir::new("uaring-abuse-opn");
    let pki = dir.join("pki");
    let server = Server::start(&[
        "--pki",
        pki.to_str().expect("path"),
        "--accept-all-client-certs",
    ]);
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");
    let server_cert = {
        let mut r = Raw::open(addr).expect("None channel");
        let Response::GetEndpoints(g) = r.call(get_endpoints(&url)).expect("GetEndpoints") else {
            panic!("GetEndpoints")
        };
        g.endpoints
            .iter()
            .find(|e| !e.server_certificate.is_empty())
            .expect("a secured endpoint")
            .server_certificate
            .as_bytes()
            .to_vec()
    };
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (cert, key) = generate_self_signed(&CertificateRequest::new(
        "urn:uaring:abuse",
        "abuse",
        unix_s,
    ))
    .expect("client cert");
    let id = OwnIdentity::new(cert, key).expect("identity");
    let secured = |tamper: bool| -> Result<StatusCode, String> {
        let mut cfg = ClientConfig::new(&url);
        cfg.policy = RsaPolicy::client(PolicyId::Basic256Sha256, id.clone())
            .map_err(|e| format!("{e:?}"))?;
        cfg.mode = MessageSecurityMode::Sign;
        cfg.server_certificate = Some(server_cert.clone());
        let mut conn =
            ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(3)));
        let mut s = connect(addr);
        let mut out = Vec::new();
        conn.start(now(), &mut out);
        s.write_all(&out).map_err(|e| e.to_string())?;
        let (_, ack) = read_message(&mut s).map_err(|e| e.to_string())?;
        out.clear();
        conn.on_recv(now(), &ack, &mut out)
            .map_err(|e| format!("{e:?}"))?;
        if tamper {
            // Inside the encrypted, signed body.
            let n = out.len();
            out[n - 100] ^= 0x5A;
        }
        s.write_all(&out).map_err(|e| e.to_string())?;
        let (t, msg) = read_message(&mut s).map_err(|e| e.to_string())?;
        match err_status(&msg) {
            Some(st) => Ok(st),
            None => Ok(if &t[..3] == b"OPN" {
                StatusCode::Good
            } else {
                StatusCode::BadUnexpectedError
            }),
        }
    };
    let mut seen = std::collections::BTreeMap::new();
    let growth = peak_growth(
        "OPN flood with bad signatures",
        server.child.id(),
        "max_shard_buffered_bytes 64 MiB (default), handshake limiter 50 + 1/20 ms",
        || {
            for _ in 0..conns {
                let st = secured(true).expect("an answer");
                *seen.entry(format!("{st:?}")).or_insert(0) += 1;
            }
        },
    );
    eprintln!("OPN flood outcomes: {seen:?}");
    assert!(
        !seen.contains_key("Good"),
        "a tampered OPN opened a channel: {seen:?}"
    );
    assert!(seen.contains_key("BadSecurityChecksFailed"), "{seen:?}");
    assert!(
        seen.keys()
            .all(|k| k == "BadSecurityChecksFailed" || k == "BadTcpServerTooBusy"),
        "{seen:?}"
    );
    assert!(growth < 16 * MIB, "growth {} KiB", growth / 1024);
    // The limiter refills (one handshake per 20 ms by default): a good client gets in.
    let guard = Instant::now() + Duration::from_secs(10);
    loop {
        match secured(false) {
            Ok(StatusCode::Good) => break,
            other if Instant::now() < guard => {
                let _ = other;
                std::thread::sleep(Duration::from_millis(100));
            }
            other => panic!("a well-formed OPN was not served: {other:?}"),
        }
    }
    finish(server, dir);
}

/// A MSG chunk sent twice (same sequence number): ERR BadSequenceNumberInvalid, closed.
#[test]
fn sequence_number_replay_closes_the_channel() {
    let (server, dir) = start_server("", "abuse-replay");
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");
    let (mut s, mut conn) = open_channel(addr);
    let mut out = Vec::new();
    conn.send_request(get_endpoints(&url), now(), &mut out)
        .expect("encode");
    s.write_all(&out).expect("send");
    let (t, _) = read_message(&mut s).expect("response");
    assert_eq!(&t[..3], b"MSG");
    s.write_all(&out).expect("replay");
    assert_eq!(
        closing_status(&mut s, Duration::from_secs(5)),
        Some(StatusCode::BadSequenceNumberInvalid)
    );
    let (_, closed) = read_until_closed(&mut s, Duration::from_secs(5));
    assert!(closed, "the server closed the connection");
    fresh_client_is_served(addr);
    finish(server, dir);
}

/// An authentication token is no use once its session is closed (CloseSession, or a
/// request before activation, Part 4 §5.7.3.1), on its channel or another.
#[test]
fn token_reuse_after_close() {
    let (server, dir) = start_server("", "abuse-token");
    let addr = server.addr;
    let node = NodeId::numeric(0, 2256); // Server_ServerStatus
    let mut a = Raw::open(addr).expect("channel");
    let token = a.session().expect("session");
    assert!(matches!(
        a.call(read_request(node.clone())),
        Ok(Response::Read(_))
    ));
    let r = a.call(Request::CloseSession(Box::new(CloseSessionRequest {
        delete_subscriptions: true,
        ..Default::default()
    })));
    assert!(matches!(r, Ok(Response::CloseSession(_))), "{r:?}");
    let r = a.call(read_request(node.clone())).expect("answer");
    assert_eq!(
        service_result(&r),
        StatusCode::BadSessionIdInvalid,
        "the closed session's token on its channel"
    );
    let mut b = Raw::open(addr).expect("channel");
    b.conn.set_authentication_token(token.clone());
    let r = b.call(read_request(node.clone())).expect("answer");
    assert_eq!(
        service_result(&r),
        StatusCode::BadSessionIdInvalid,
        "the closed session's token on another channel"
    );
    let r = b
        .call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        })))
        .expect("answer");
    assert_eq!(
        service_result(&r),
        StatusCode::BadSessionIdInvalid,
        "activating a closed session"
    );

    // A request before ActivateSession closes the session.
    let mut c = Raw::open(addr).expect("channel");
    let cs = c.create_session().expect("CreateSession");
    c.conn
        .set_authentication_token(cs.authentication_token.clone());
    let r = c.call(read_request(node.clone())).expect("answer");
    assert_eq!(service_result(&r), StatusCode::BadSessionNotActivated);
    let r = c.activate(&cs).expect("answer");
    assert_eq!(
        service_result(&r),
        StatusCode::BadSessionIdInvalid,
        "the session was closed"
    );
    finish(server, dir);
}

/// Sessions created and never activated, past the pool: BadTooManySessions; memory stays
/// small; the pool frees up when the session timeout (10 s at least) passes.
#[test]
fn session_flood() {
    let max = 50;
    let (server, dir) = start_server_with(
        "",
        &format!("[sessions]\nmax_sessions_per_shard = {max}\n"),
        "abuse-sessions",
    );
    let addr = server.addr;
    let mut good = 0;
    let mut too_many = 0;
    let growth = peak_growth(
        "session flood",
        server.child.id(),
        "max_sessions_per_shard 50",
        || {
            let mut chans: Vec<Raw> = (0..10).map(|_| Raw::open(addr).expect("channel")).collect();
            for _ in 0..20 {
                for c in chans.iter_mut() {
                    match c.create_session() {
                        Ok(_) => good += 1,
                        Err(e) if e.contains("BadTooManySessions") => too_many += 1,
                        Err(e) => panic!("CreateSession: {e}"),
                    }
                }
            }
        },
    );
    eprintln!("session flood: {good} created, {too_many} BadTooManySessions");
    assert_eq!(good, max);
    assert_eq!(too_many, 200 - max);
    assert!(growth < 16 * MIB, "growth {} KiB", growth / 1024);
    finish(server, dir);
}

/// One session sends 1,000 Publish requests at once: 64 are queued
/// (`max_publish_requests_per_session`), every further one is answered at once with
/// BadTooManyPublishRequests.
#[test]
fn publish_request_flood() {
    let (server, dir) = start_server("", "abuse-publish");
    let addr = server.addr;
    let mut r = Raw::open(addr).expect("channel");
    r.session().expect("session");
    let resp = r
        .call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                requested_publishing_interval: 60_000.0,
                requested_lifetime_count: 300,
                requested_max_keep_alive_count: 100,
                publishing_enabled: true,
                ..Default::default()
            },
        )))
        .expect("CreateSubscription");
    assert!(matches!(resp, Response::CreateSubscription(_)), "{resp:?}");
    let n = 1000;
    let mut too_many = 0;
    let growth = peak_growth(
        "publish request flood",
        server.child.id(),
        "max_publish_requests_per_session 64",
        || {
            let mut out = Vec::new();
            for _ in 0..n {
                r.conn
                    .send_request(Request::Publish(Box::default()), now(), &mut out)
                    .expect("encode");
            }
            r.s.write_all(&out).expect("send");
            r.s.set_read_timeout(Some(Duration::from_secs(10)))
                .expect("timeout");
            for _ in 0..n - 64 {
                let (_, resp) = r.recv().expect("an immediate answer");
                if service_result(&resp) == StatusCode::BadTooManyPublishRequests {
                    too_many += 1;
                }
            }
        },
    );
    eprintln!("publish flood: {too_many} of {n} answered BadTooManyPublishRequests at once");
    assert_eq!(too_many, n - 64);
    assert!(growth < 16 * MIB, "growth {} KiB", growth / 1024);
    finish(server, dir);
}

/// A Write of three 1,000,000-element Boolean arrays: 3 MB on the wire, 96 MB as
/// decoded Variants. Past `max_decoded_size` it is BadEncodingLimitsExceeded; when the
/// shard's buffer budget has less left than `max_decoded_size`, BadResourceUnavailable.
/// Neither allocates the decoded arrays.
#[test]
fn decode_amplification_at_the_limits() {
    let write = |elements: usize, values: usize| {
        Request::Write(Box::new(WriteRequest {
            nodes_to_write: (0..values)
                .map(|k| WriteValue {
                    node_id: NodeId::numeric(1, 2001 + k as u32),
                    attribute_id: 13,
                    index_range: UaString::default(),
                    value: DataValue::new(
                        Variant::array(
                            uaring_core::types::BuiltinType::Boolean,
                            vec![Variant::Boolean(true); elements],
                        )
                        .expect("array"),
                    ),
                })
                .collect(),
            ..Default::default()
        }))
    };
    // The per-message budget.
    let decoded = 8 * MIB;
    let (server, dir) = start_server_with(
        "",
        &format!(
            "[transport.decode]\nmax_string_len = 16777216\nmax_byte_string_len = 16777216\nmax_array_len = 1000000\nmax_depth = 100\nmax_decoded_size = {decoded}\n"
        ),
        "abuse-decode",
    );
    let mut r = Raw::open(server.addr).expect("channel");
    r.session().expect("session");
    // Within the budget: decoded and answered (a Boolean array into an Int32 array is a
    // type mismatch per value).
    let ok = r.call(write(1000, 3)).expect("answer");
    assert!(matches!(ok, Response::Write(_)), "{ok:?}");
    let big = write(1_000_000, 3);
    let growth = peak_growth(
        "decode amplification, 3 MB Write decoding to 96 MB",
        server.child.id(),
        "max_decoded_size 8 MiB",
        || {
            let resp = r.call(big.clone()).expect("answer");
            assert_eq!(service_result(&resp), StatusCode::BadEncodingLimitsExceeded);
        },
    );
    assert!(growth < decoded + 32 * MIB, "growth {} KiB", growth / 1024);
    assert!(
        matches!(r.call(write(1000, 3)), Ok(Response::Write(_))),
        "the session goes on"
    );
    finish(server, dir);

    // The shard's budget: 8 MiB in total, of which the 3 MB message holds part.
    let budget = 8 * MIB;
    let (server, dir) = start_server(
        &format!("max_shard_buffered_bytes = {budget}"),
        "abuse-decode-shard",
    );
    let mut r = Raw::open(server.addr).expect("channel");
    r.session().expect("session");
    let growth = peak_growth(
        "decode amplification, 3 MB Write decoding to 96 MB",
        server.child.id(),
        "max_shard_buffered_bytes 8 MiB",
        || {
            let resp = r.call(big.clone()).expect("answer");
            assert_eq!(service_result(&resp), StatusCode::BadResourceUnavailable);
        },
    );
    assert!(
        growth < 2 * budget + 16 * MIB,
        "growth {} KiB",
        growth / 1024
    );
    assert!(
        matches!(r.call(write(1000, 3)), Ok(Response::Write(_))),
        "the session goes on"
    );
    finish(server, dir);
}

/// 300 connections at once against `max_connections_per_shard = 64`: at most 64 are
/// served at a time, every other one is told ERR BadTcpNotEnoughResources; with
/// `max_connections_per_address = 16`, the 17th from one address gets ERR
/// BadTcpServerTooBusy. Fresh clients are served once the storm is gone.
#[test]
fn connection_storm_at_the_connection_limit() {
    let limit = 64;
    let (server, dir) = start_server(
        &format!("max_connections_per_shard = {limit}"),
        "abuse-storm",
    );
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");
    let mut acked = 0;
    let mut refused = 0;
    let growth = peak_growth(
        "connection storm, 300 connections",
        server.child.id(),
        "max_connections_per_shard 64",
        || {
            let mut socks = Vec::new();
            for _ in 0..300 {
                if let Ok(s) = TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
                    socks.push(s);
                }
            }
            for s in socks.iter_mut() {
                let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = s.write_all(&hello(&url));
            }
            for s in socks.iter_mut() {
                match read_message(s) {
                    Ok((t, _)) if &t == b"ACKF" => acked += 1,
                    Ok((_, msg))
                        if err_status(&msg) == Some(StatusCode::BadTcpNotEnoughResources) =>
                    {
                        refused += 1
                    }
                    other => panic!("a storm connection got {other:?}"),
                }
            }
        },
    );
    eprintln!(
        "connection storm: {acked} acknowledged, {refused} refused with BadTcpNotEnoughResources"
    );
    assert!(acked <= limit && acked > 0, "{acked}");
    assert_eq!(acked + refused, 300);
    assert!(growth < 16 * MIB, "growth {} KiB", growth / 1024);
    fresh_client_is_served(addr);
    finish(server, dir);

    let per_address = 16;
    let (server, dir) = start_server(
        &format!("max_connections_per_address = {per_address}"),
        "abuse-storm-address",
    );
    let addr = server.addr;
    let mut socks: Vec<TcpStream> = (0..per_address + 4).map(|_| connect(addr)).collect();
    let mut busy = 0;
    let mut ok = 0;
    for s in socks.iter_mut() {
        s.write_all(&hello(&format!("opc.tcp://{addr}")))
            .expect("HEL");
        match read_message(s) {
            Ok((t, _)) if &t == b"ACKF" => ok += 1,
            Ok((_, msg)) if err_status(&msg) == Some(StatusCode::BadTcpServerTooBusy) => busy += 1,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((ok, busy), (per_address, 4));
    drop(socks);
    fresh_client_is_served(addr);
    finish(server, dir);
}

/// A response larger than the session's MaxResponseMessageSize, or than the Hello's
/// MaxMessageSize, is answered with ServiceFault BadResponseTooLarge; the channel stays.
#[test]
fn response_size_limits() {
    let (server, dir) = start_server("", "abuse-response");
    let addr = server.addr;
    let url = format!("opc.tcp://{addr}");
    // Five reads of BenchmarkArray1000 (ns=1;i=2003): about 20 KB.
    let big_read = || {
        Request::Read(Box::new(ReadRequest {
            nodes_to_read: (0..5)
                .map(|_| ReadValueId {
                    node_id: NodeId::numeric(1, 2003),
                    attribute_id: 13,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }))
    };
    let mut r = Raw::open(addr).expect("channel");
    let cs = r.create_session_with(10_000).expect("CreateSession");
    assert!(matches!(r.activate(&cs), Ok(Response::ActivateSession(_))));
    let resp = r.call(big_read()).expect("answer");
    assert_eq!(
        service_result(&resp),
        StatusCode::BadResponseTooLarge,
        "over the session's MaxResponseMessageSize"
    );
    let small = r
        .call(read_request(NodeId::numeric(1, 2001)))
        .expect("answer");
    assert!(
        matches!(small, Response::Read(_)),
        "the channel and session go on: {small:?}"
    );

    // The Hello's MaxMessageSize: 8192 bytes; GetEndpoints with certificates is larger.
    let mut cfg = ClientConfig::new(&url);
    cfg.limits.max_message_size = 8192;
    let mut conn = ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(4)));
    let mut s = connect(addr);
    let mut out = Vec::new();
    conn.start(now(), &mut out);
    s.write_all(&out).expect("HEL");
    out.clear();
    let mut buf = vec![0u8; 65536];
    while !conn.is_open() {
        let n = s.read(&mut buf).expect("handshake");
        assert!(n > 0, "closed during the handshake");
        conn.on_recv(now(), &buf[..n], &mut out).expect("handshake");
        s.write_all(&out).expect("OPN");
        out.clear();
    }
    let mut raw = Raw {
        s,
        conn,
        url: url.clone(),
    };
    let resp = raw.call(get_endpoints(&url)).expect("answer");
    assert_eq!(
        service_result(&resp),
        StatusCode::BadResponseTooLarge,
        "over the Hello's MaxMessageSize"
    );
    finish(server, dir);
}
