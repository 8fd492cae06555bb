//! A ClientConnection and a ServerConnection wired by byte queues and driven by a
//! seeded PRNG (quinn-proto style): bytes split at random boundaries and coalesced,
//! whole connections dropped, time jumped (token renewal and expiry, Hello timeout).
//! Properties: no panic; every request gets exactly one response, or the connection
//! ends with an ERR (or was dropped); renewal keeps a channel alive; expired channels
//! close.

mod common;

use std::collections::HashMap;

use common::{find_err, t0, Rng, TestHost};
use uaring_core::client::{ClientConfig, ClientConnection, ClientState};
use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{ReadRequest, ReadValueId};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::types::{NodeId, StatusCode};
use uaring_core::Now;

struct Pair {
    host: TestHost,
    server: ServerConnection,
    client: ClientConnection,
    c2s: Vec<u8>,
    s2c: Vec<u8>,
    now: Now,
    server_closed: bool,
    server_err: Option<StatusCode>,
    /// request id → nodes asked.
    outstanding: HashMap<u32, usize>,
    answered: usize,
}

fn read(nodes: usize) -> Request {
    Request::Read(Box::new(ReadRequest {
        nodes_to_read: vec![
            ReadValueId {
                node_id: NodeId::ns0(2258),
                attribute_id: 13,
                ..Default::default()
            };
            nodes
        ],
        ..Default::default()
    }))
}

impl Pair {
    fn new(server_limits: TransportLimits, client_buf: u32) -> Pair {
        let mut host = TestHost::with_limits(server_limits);
        let now = t0();
        let server = ServerConnection::new(&mut host, None, now);
        let mut cfg = ClientConfig::new("opc.tcp://localhost:4840/x");
        cfg.limits.receive_buffer_size = client_buf;
        cfg.limits.send_buffer_size = client_buf;
        cfg.requested_lifetime_ms = 10_000;
        let mut client =
            ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(2)));
        let mut c2s = Vec::new();
        client.start(now, &mut c2s);
        Pair {
            host,
            server,
            client,
            c2s,
            s2c: Vec::new(),
            now,
            server_closed: false,
            server_err: None,
            outstanding: HashMap::new(),
            answered: 0,
        }
    }

    fn server_out(&mut self, status: ConnStatus, out: Vec<u8>) {
        if let Some(e) = find_err(&out) {
            self.server_err.get_or_insert(e);
        }
        self.s2c.extend_from_slice(&out);
        if status == ConnStatus::Close {
            self.server_closed = true;
        }
    }

    fn deliver_c2s(&mut self, n: usize) {
        if self.server_closed {
            self.c2s.clear();
            return;
        }
        let n = n.min(self.c2s.len());
        let data: Vec<u8> = self.c2s.drain(..n).collect();
        let mut out = Vec::new();
        let st = self
            .server
            .on_recv(&mut self.host, self.now, &data, &mut out);
        self.server_out(st, out);
    }

    fn deliver_s2c(&mut self, n: usize) {
        let n = n.min(self.s2c.len());
        let data: Vec<u8> = self.s2c.drain(..n).collect();
        let _ = self.client.on_recv(self.now, &data, &mut self.c2s);
        self.collect();
    }

    fn collect(&mut self) {
        while let Some((id, resp)) = self.client.poll_response() {
            let nodes = self
                .outstanding
                .remove(&id)
                .unwrap_or_else(|| panic!("response {id} unknown or duplicated"));
            match resp {
                Response::Read(r) => assert_eq!(r.results.len(), nodes),
                Response::ServiceFault(f) => {
                    // The only fault the test dispatcher's Read can turn into.
                    assert_eq!(
                        f.response_header.service_result,
                        StatusCode::BadResponseTooLarge
                    )
                }
                other => panic!("unexpected {other:?}"),
            }
            self.answered += 1;
        }
    }

    fn advance(&mut self, ns: u64) {
        self.now = self.now.advance_ns(ns);
        let _ = self.client.on_timer(self.now, &mut self.c2s);
        if !self.server_closed {
            if let Some(d) = self.server.next_deadline() {
                if self.now.mono_ns >= d {
                    let mut out = Vec::new();
                    let st = self.server.on_timer(&mut self.host, self.now, &mut out);
                    self.server_out(st, out);
                }
            }
        }
    }

    fn drain(&mut self) {
        for _ in 0..10_000 {
            if self.c2s.is_empty() && self.s2c.is_empty() {
                break;
            }
            let a = self.c2s.len();
            self.deliver_c2s(a);
            let b = self.s2c.len();
            self.deliver_s2c(b);
        }
    }
}

#[derive(Default, Debug)]
struct Stats {
    answered: usize,
    closed_with_err: usize,
    dropped: usize,
    renewed: usize,
    open_at_end: usize,
}

fn run(seed: u64, stats: &mut Stats) {
    let mut rng = Rng::new(seed);
    let buf = if rng.chance(50) { 8192 } else { 65536 };
    let limits = TransportLimits {
        receive_buffer_size: if rng.chance(50) { 8192 } else { 65536 },
        ..Default::default()
    };
    let mut p = Pair::new(limits, buf);
    let mut dropped = false;
    let steps = 20 + rng.below(200);
    for _ in 0..steps {
        match rng.below(100) {
            0..=29 => {
                if p.client.is_open() {
                    for _ in 0..1 + rng.below(4) {
                        let nodes = if rng.chance(10) {
                            1 + rng.below(3000) as usize
                        } else {
                            1 + rng.below(5) as usize
                        };
                        match p.client.send_request(read(nodes), p.now, &mut p.c2s) {
                            Ok(id) => assert!(p.outstanding.insert(id, nodes).is_none()),
                            Err(s) => assert_eq!(s, StatusCode::BadRequestTooLarge),
                        }
                    }
                }
            }
            30..=54 => {
                let n = if rng.chance(20) {
                    p.c2s.len()
                } else {
                    rng.below(p.c2s.len() as u64 + 1) as usize
                };
                p.deliver_c2s(n);
            }
            55..=79 => {
                let n = if rng.chance(20) {
                    p.s2c.len()
                } else {
                    rng.below(p.s2c.len() as u64 + 1) as usize
                };
                p.deliver_s2c(n);
            }
            80..=95 => {
                // Mostly small steps; sometimes past renewal; rarely past expiry.
                let ns = match rng.below(20) {
                    0 => 20_000_000_000,
                    1..=4 => 3_000_000_000 + rng.below(5_000_000_000),
                    _ => rng.below(500_000_000),
                };
                p.advance(ns);
            }
            96..=97 => {
                if rng.chance(30) {
                    dropped = true;
                    break;
                }
            }
            _ => p.drain(),
        }
        if p.client.is_closed() && p.server_closed {
            break;
        }
    }
    stats.answered += p.answered;
    if p.client.token().is_some_and(|(id, _)| id > 1) {
        stats.renewed += 1;
    }
    if dropped {
        stats.dropped += 1;
        p.server.on_close(&mut p.host, p.now);
        assert!(p.host.open_channels.is_empty());
        return;
    }
    p.drain();
    if p.server_closed || p.client.is_closed() {
        // Closed: the server said why (or the client found a fault and the server will
        // see the socket go).
        if p.server_closed {
            stats.closed_with_err += 1;
            assert!(
                p.server_err.is_some(),
                "seed {seed}: server closed without ERR"
            );
            if let ClientState::Closed(s) = p.client.state() {
                assert_eq!(Some(s), p.server_err, "seed {seed}");
            }
        }
        p.server.on_close(&mut p.host, p.now);
        assert!(p.host.open_channels.is_empty());
        return;
    }
    assert!(
        p.outstanding.is_empty(),
        "seed {seed}: {} requests unanswered on an open connection",
        p.outstanding.len()
    );
    if p.client.is_open() {
        stats.open_at_end += 1;
        assert!(p.server.is_open());
        assert_eq!(p.host.open_channels.len(), 1);
    }
}

#[test]
fn random_interleavings() {
    let mut stats = Stats::default();
    for seed in 1..=400 {
        run(seed, &mut stats);
    }
    eprintln!("{stats:?}");
    // The schedule must reach every outcome, or the test proves little.
    assert!(stats.answered > 1000, "{stats:?}");
    assert!(stats.closed_with_err > 10, "{stats:?}");
    assert!(stats.dropped > 5, "{stats:?}");
    assert!(stats.renewed > 10, "{stats:?}");
    assert!(stats.open_at_end > 50, "{stats:?}");
}

fn open_pair() -> Pair {
    let mut p = Pair::new(TransportLimits::default(), 65536);
    p.drain();
    assert!(p.client.is_open());
    p
}

#[test]
fn renew_keeps_the_channel_alive() {
    let mut p = open_pair();
    let (first_token, lifetime) = p.client.token().unwrap();
    assert_eq!(lifetime, 10_000);
    for i in 0..30 {
        // 2 s steps for 60 s: six lifetimes.
        p.advance(2_000_000_000);
        p.drain();
        let id = p.client.send_request(read(1), p.now, &mut p.c2s).unwrap();
        p.outstanding.insert(id, 1);
        p.drain();
        assert!(p.outstanding.is_empty(), "step {i}");
        assert!(p.server.is_open() && p.client.is_open(), "step {i}");
    }
    assert!(p.client.token().unwrap().0 > first_token + 3);
    assert_eq!(p.server_err, None);
}

#[test]
fn renewed_token_switch_with_requests_in_flight() {
    let mut p = open_pair();
    // Requests sent with the old token, then a renew, then more requests before the
    // server's answer arrives: all answered.
    for _ in 0..5 {
        let id = p.client.send_request(read(2), p.now, &mut p.c2s).unwrap();
        p.outstanding.insert(id, 2);
    }
    p.client.renew(p.now, &mut p.c2s).unwrap();
    let n = p.c2s.len();
    p.deliver_c2s(n);
    for _ in 0..5 {
        let id = p.client.send_request(read(2), p.now, &mut p.c2s).unwrap();
        p.outstanding.insert(id, 2);
    }
    p.drain();
    assert!(p.outstanding.is_empty());
    assert_eq!(p.client.token().unwrap().0, 2);
}

#[test]
fn expired_channel_closes() {
    let mut p = open_pair();
    // The client never renews (its timer is not run): lifetime + 25 % later the server
    // closes with BadSecureChannelTokenUnknown.
    let d = p.server.next_deadline().unwrap();
    assert_eq!(d, p.now.mono_ns + 12_500 * 1_000_000);
    let mut out = Vec::new();
    assert_eq!(
        p.server
            .on_timer(&mut p.host, Now::new(d - 1, p.now.utc), &mut out),
        ConnStatus::Open
    );
    assert_eq!(
        p.server
            .on_timer(&mut p.host, Now::new(d, p.now.utc), &mut out),
        ConnStatus::Close
    );
    assert_eq!(
        find_err(&out),
        Some(StatusCode::BadSecureChannelTokenUnknown)
    );
    assert!(p.host.open_channels.is_empty());
    let _ = p.client.on_recv(p.now, &out, &mut p.c2s);
    assert_eq!(
        p.client.state(),
        ClientState::Closed(StatusCode::BadSecureChannelTokenUnknown)
    );
}

#[test]
fn multi_chunk_both_ways_and_pipelining() {
    let mut p = Pair::new(
        TransportLimits {
            receive_buffer_size: 8192,
            send_buffer_size: 8192,
            ..Default::default()
        },
        8192,
    );
    p.drain();
    p.host.read_value_len = 100;
    let mut ids = Vec::new();
    for k in 0..50 {
        let nodes = 1 + k * 40;
        let id = p
            .client
            .send_request(read(nodes), p.now, &mut p.c2s)
            .unwrap();
        p.outstanding.insert(id, nodes);
        ids.push(id);
    }
    // Deliver one byte at a time for a while, then the rest coalesced.
    for _ in 0..3000 {
        p.deliver_c2s(1);
        p.deliver_s2c(1);
    }
    p.drain();
    assert!(p.outstanding.is_empty());
    assert_eq!(p.answered, 50);
    assert_eq!(p.host.dispatched, 50);
}
