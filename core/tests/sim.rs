//! Deterministic simulation of a whole server: many clients built from core's
//! `ClientConnection` against two `ServiceState`s, in memory, everything driven by one seed:
//! bytes delivered in random pieces and late (the links of different connections
//! interleave freely), connections dropped or closed, reconnects that reactivate a
//! session on a new channel, time jumps (publishing, keep-alive, token and session expiry).
//!
//! Invariants checked at every step or at the end:
//! - no panic anywhere;
//! - every request is answered exactly once with the right response type, or its
//!   connection ended (closed by the server with an ERR, or dropped);
//! - sessions, subscriptions and channels per shard stay within their limits, and a
//!   server connection never buffers more than its message size limit plus one chunk;
//! - Publish responses of a subscription carry consecutive sequence numbers on one
//!   connection (no duplicate, no gap unless a connection was lost in between);
//! - once every client is gone and the session timeouts pass: no channel, session or
//!   subscription is left.
//!
//! A failure prints its seed; `UARING_SIM_SEED=<seed> cargo test -p uaring-core --test sim`
//! replays exactly that one (time and randomness are the seed's). `UARING_SIM_SEEDS=<n>`
//! runs n seeds (default 32: seconds).

mod common;

#[path = "support/content.rs"]
mod content;
use std::collections::HashMap;
use std::sync::Arc;

use common::{find_err, Rng};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::ServerConfig;
use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::random::ChaCha;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{DataValue, DateTime, ExtensionObject, NodeId, Now, StatusCode, Variant};

const URL: &str = "opc.tcp://sim:4840/uaring";
const SHARDS: usize = 2;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    CreateSession,
    ActivateSession,
    Read,
    Write,
    CreateSubscription,
    CreateMonitoredItems,
    Publish,
    DeleteSubscriptions,
    CloseSession,
}

fn kind_of(r: &Response) -> Option<Kind> {
    Some(match r {
        Response::CreateSession(_) => Kind::CreateSession,
        Response::ActivateSession(_) => Kind::ActivateSession,
        Response::Read(_) => Kind::Read,
        Response::Write(_) => Kind::Write,
        Response::CreateSubscription(_) => Kind::CreateSubscription,
        Response::CreateMonitoredItems(_) => Kind::CreateMonitoredItems,
        Response::Publish(_) => Kind::Publish,
        Response::DeleteSubscriptions(_) => Kind::DeleteSubscriptions,
        Response::CloseSession(_) => Kind::CloseSession,
        _ => return None,
    })
}

#[derive(Default)]
struct Sub {
    /// The last sequence number seen (0: none yet).
    last_seq: u32,
    /// A connection was lost since `last_seq` arrived: a gap is legitimate.
    gap_allowed: bool,
    to_ack: Vec<u32>,
}

struct Link {
    shard: usize,
    server: ServerConnection,
    client: ClientConnection,
    c2s: Vec<u8>,
    s2c: Vec<u8>,
    server_closed: bool,
    /// request id → what was asked.
    outstanding: HashMap<u32, Kind>,
}

struct SimClient {
    link: Option<Link>,
    /// An ActivateSession of a session made on an earlier connection is under way.
    reactivating: bool,
    token: Option<NodeId>,
    activated: bool,
    subs: HashMap<u32, Sub>,
    answered: usize,
}

struct World {
    rng: Rng,
    seed: u64,
    now: Now,
    shards: Vec<ServiceState>,
    clients: Vec<SimClient>,
    stats: Stats,
}

#[derive(Default, Debug)]
struct Stats {
    answered: usize,
    closed_with_err: usize,
    dropped: usize,
    reactivated: usize,
    data_messages: usize,
    errs: std::collections::BTreeMap<String, usize>,
}

fn start() -> Now {
    Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

impl World {
    fn new(seed: u64) -> World {
        let mut rng = Rng::new(seed);
        let mut config = ServerConfig::default();
        config.sessions.max_sessions_per_shard = 4 + rng.below(8) as u32;
        let shared: Arc<ServerShared> = content::new(config, start()).unwrap();
        let limits = TransportLimits {
            receive_buffer_size: if rng.chance(50) { 8192 } else { 65536 },
            max_channels_per_shard: 6 + rng.below(6) as u32,
            ..TransportLimits::default()
        };
        let shards = (0..SHARDS)
            .map(|i| {
                ServiceState::new(
                    shared.clone(),
                    i,
                    Box::new(ChaCha::from_u64(seed ^ (i as u64) << 32)),
                )
                .with_transport_limits(limits)
            })
            .collect();
        let n = 2 + rng.below(10) as usize;
        let clients = (0..n)
            .map(|_| SimClient {
                link: None,
                reactivating: false,
                token: None,
                activated: false,
                subs: HashMap::new(),
                answered: 0,
            })
            .collect();
        World {
            rng,
            seed,
            now: start(),
            shards,
            clients,
            stats: Stats::default(),
        }
    }

    fn connect(&mut self, c: usize) {
        let shard = self.rng.below(SHARDS as u64) as usize;
        let server = ServerConnection::new(&mut self.shards[shard], None, self.now);
        let mut cfg = ClientConfig::new(URL);
        cfg.requested_lifetime_ms = 5_000 + self.rng.below(60_000) as u32;
        if self.rng.chance(30) {
            cfg.limits.receive_buffer_size = 8192;
            cfg.limits.send_buffer_size = 8192;
        }
        let mut client =
            ClientConnection::new(cfg, Box::new(ChaCha::from_u64(self.rng.next_u64())));
        let mut c2s = Vec::new();
        client.start(self.now, &mut c2s);
        let cl = &mut self.clients[c];
        cl.activated = false;
        for s in cl.subs.values_mut() {
            s.gap_allowed = true;
        }
        cl.link = Some(Link {
            shard,
            server,
            client,
            c2s,
            s2c: Vec::new(),
            server_closed: false,
            outstanding: HashMap::new(),
        });
    }

    /// The socket goes away: the server sees it, outstanding requests are lost.
    fn drop_link(&mut self, c: usize) {
        if let Some(mut l) = self.clients[c].link.take() {
            l.server.on_close(&mut self.shards[l.shard], self.now);
            self.stats.dropped += 1;
        }
    }

    fn send(&mut self, c: usize, kind: Kind, req: Request) {
        let now = self.now;
        let Some(l) = self.clients[c].link.as_mut() else {
            return;
        };
        if !l.client.is_open() {
            return;
        }
        match l.client.send_request(req, now, &mut l.c2s) {
            Ok(id) => assert!(
                l.outstanding.insert(id, kind).is_none(),
                "request id {id} reused"
            ),
            Err(s) => panic!("send {kind:?}: {s}"),
        }
    }

    fn server_out(&mut self, c: usize, st: ConnStatus, out: &[u8]) {
        let l = self.clients[c].link.as_mut().unwrap();
        l.s2c.extend_from_slice(out);
        if st == ConnStatus::Close && !l.server_closed {
            l.server_closed = true;
            if let Some(e) = find_err(out) {
                self.stats.closed_with_err += 1;
                *self.stats.errs.entry(format!("{e}")).or_default() += 1;
            }
        }
    }

    fn deliver_c2s(&mut self, c: usize, all: bool) {
        let n = {
            let Some(l) = self.clients[c].link.as_mut() else {
                return;
            };
            if l.server_closed {
                l.c2s.clear();
                return;
            }
            if all {
                l.c2s.len()
            } else {
                self.rng.below(l.c2s.len() as u64 + 1) as usize
            }
        };
        let now = self.now;
        let l = self.clients[c].link.as_mut().unwrap();
        let data: Vec<u8> = l.c2s.drain(..n).collect();
        let mut out = Vec::new();
        let shard = &mut self.shards[l.shard];
        let st = l.server.on_recv(shard, now, &data, &mut out);
        let bound = shard.transport_limits().max_message_size as usize
            + shard.transport_limits().receive_buffer_size as usize;
        assert!(
            l.server.buffered_bytes() <= bound,
            "server buffers {} > {bound}",
            l.server.buffered_bytes()
        );
        self.server_out(c, st, &out);
    }

    fn deliver_s2c(&mut self, c: usize, all: bool) {
        let now = self.now;
        let n = {
            let Some(l) = self.clients[c].link.as_mut() else {
                return;
            };
            if all {
                l.s2c.len()
            } else {
                self.rng.below(l.s2c.len() as u64 + 1) as usize
            }
        };
        let l = self.clients[c].link.as_mut().unwrap();
        let data: Vec<u8> = l.s2c.drain(..n).collect();
        let _ = l.client.on_recv(now, &data, &mut l.c2s);
        self.collect(c);
    }

    fn collect(&mut self, c: usize) {
        loop {
            let cl = &mut self.clients[c];
            let Some(l) = cl.link.as_mut() else { return };
            let Some((id, resp)) = l.client.poll_response() else {
                return;
            };
            let asked = l
                .outstanding
                .remove(&id)
                .unwrap_or_else(|| panic!("response to {id}: unknown or duplicated"));
            cl.answered += 1;
            self.stats.answered += 1;
            if let Response::ServiceFault(f) = &resp {
                let s = f.response_header.service_result;
                assert!(s.is_bad(), "a Good ServiceFault");
                if matches!(
                    s,
                    StatusCode::BadSessionIdInvalid
                        | StatusCode::BadSessionClosed
                        | StatusCode::BadSessionNotActivated
                ) {
                    cl.token = None;
                    cl.activated = false;
                    cl.subs.clear();
                }
                continue;
            }
            assert_eq!(
                kind_of(&resp),
                Some(asked),
                "request {id} ({asked:?}) got {}",
                resp_name(&resp)
            );
            let good = resp.response_header().service_result.is_good();
            match resp {
                Response::CreateSession(r) if good => {
                    l.client
                        .set_authentication_token(r.authentication_token.clone());
                    cl.token = Some(r.authentication_token.clone());
                    let req = ActivateSessionRequest {
                        user_identity_token: ExtensionObject::from_struct(
                            &AnonymousIdentityToken {
                                policy_id: "anonymous".into(),
                            },
                        ),
                        ..Default::default()
                    };
                    self.send(
                        c,
                        Kind::ActivateSession,
                        Request::ActivateSession(Box::new(req)),
                    );
                }
                Response::ActivateSession(_) => {
                    if good {
                        if cl.reactivating {
                            self.stats.reactivated += 1;
                        }
                        cl.activated = true;
                        cl.reactivating = false;
                    } else {
                        cl.token = None;
                        cl.subs.clear();
                    }
                }
                Response::CreateSubscription(r) if good => {
                    cl.subs.insert(r.subscription_id, Sub::default());
                }
                Response::Publish(r) if good => {
                    let Some(sub) = cl.subs.get_mut(&r.subscription_id) else {
                        continue;
                    };
                    let seq = r.notification_message.sequence_number;
                    let data = !r.notification_message.notification_data.is_empty();
                    if data {
                        self.stats.data_messages += 1;
                        if sub.gap_allowed {
                            assert!(
                                seq > sub.last_seq,
                                "seed {}: sub {} seq {seq} after {}",
                                self.seed,
                                r.subscription_id,
                                sub.last_seq
                            );
                        } else {
                            assert_eq!(
                                seq,
                                sub.last_seq + 1,
                                "subscription {} out of sequence",
                                r.subscription_id
                            );
                        }
                        sub.last_seq = seq;
                        sub.gap_allowed = false;
                        sub.to_ack.push(seq);
                    } else if !sub.gap_allowed {
                        // A keep-alive names the next sequence number without using it.
                        assert_eq!(
                            seq,
                            sub.last_seq + 1,
                            "keep-alive of {} out of sequence",
                            r.subscription_id
                        );
                    }
                }
                Response::CloseSession(_) => {
                    cl.token = None;
                    cl.activated = false;
                    cl.subs.clear();
                }
                _ => {}
            }
        }
    }

    /// One random action by client `c`.
    fn act(&mut self, c: usize) {
        let linked = self.clients[c]
            .link
            .as_ref()
            .is_some_and(|l| !l.server_closed && !l.client.is_closed());
        if !linked {
            if let Some(l) = &self.clients[c].link {
                // Closed: read what is left (the ERR), then the socket goes.
                if !l.s2c.is_empty() {
                    self.deliver_s2c(c, true);
                    return;
                }
            }
            self.drop_link(c);
            if self.rng.chance(50) {
                self.connect(c);
            }
            return;
        }
        let open = self.clients[c].link.as_ref().unwrap().client.is_open();
        let busy = self.clients[c]
            .link
            .as_ref()
            .unwrap()
            .outstanding
            .values()
            .any(|k| *k != Kind::Publish);
        let cl = &self.clients[c];
        if open && !busy && cl.token.is_none() {
            let req = CreateSessionRequest {
                client_description: ApplicationDescription {
                    application_uri: "urn:sim".into(),
                    application_type: ApplicationType::Client,
                    ..Default::default()
                },
                endpoint_url: URL.into(),
                requested_session_timeout: 10_000.0 + self.rng.below(50_000) as f64,
                ..Default::default()
            };
            self.send(
                c,
                Kind::CreateSession,
                Request::CreateSession(Box::new(req)),
            );
            return;
        }
        if open && !busy && !cl.activated {
            // A session from a lost connection: reactivate it on this channel.
            let token = cl.token.clone().unwrap();
            self.clients[c].reactivating = true;
            self.clients[c]
                .link
                .as_mut()
                .unwrap()
                .client
                .set_authentication_token(token);
            let req = ActivateSessionRequest {
                user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                    policy_id: "anonymous".into(),
                }),
                ..Default::default()
            };
            self.send(
                c,
                Kind::ActivateSession,
                Request::ActivateSession(Box::new(req)),
            );
            return;
        }
        if !open || !cl.activated {
            return;
        }
        let publishes = self.clients[c]
            .link
            .as_ref()
            .unwrap()
            .outstanding
            .values()
            .filter(|k| **k == Kind::Publish)
            .count();
        match self.rng.below(100) {
            0..=29 => {
                let max = if self.rng.chance(5) { 2000 } else { 8 };
                let n = 1 + self.rng.below(max) as u32;
                let nodes = (0..n)
                    .map(|i| ReadValueId {
                        node_id: NodeId::numeric(1, 1001 + i % 100),
                        attribute_id: 13,
                        ..Default::default()
                    })
                    .collect();
                self.send(
                    c,
                    Kind::Read,
                    Request::Read(Box::new(ReadRequest {
                        nodes_to_read: nodes,
                        ..Default::default()
                    })),
                );
            }
            30..=49 => {
                let v = self.rng.below(1000) as i32;
                let node = NodeId::numeric(1, 1001 + self.rng.below(100) as u32);
                let wv = WriteValue {
                    node_id: node,
                    attribute_id: 13,
                    value: DataValue {
                        value: Variant::Int32(v),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                self.send(
                    c,
                    Kind::Write,
                    Request::Write(Box::new(WriteRequest {
                        nodes_to_write: vec![wv],
                        ..Default::default()
                    })),
                );
            }
            50..=57 if cl.subs.len() < 3 => {
                let req = CreateSubscriptionRequest {
                    requested_publishing_interval: 50.0 + self.rng.below(500) as f64,
                    requested_lifetime_count: 30 + self.rng.below(100) as u32,
                    requested_max_keep_alive_count: 3 + self.rng.below(10) as u32,
                    publishing_enabled: true,
                    ..Default::default()
                };
                self.send(
                    c,
                    Kind::CreateSubscription,
                    Request::CreateSubscription(Box::new(req)),
                );
            }
            58..=65 if !cl.subs.is_empty() => {
                let sid = *cl
                    .subs
                    .keys()
                    .nth(self.rng.below(cl.subs.len() as u64) as usize)
                    .unwrap();
                let items = (0..1 + self.rng.below(5) as u32)
                    .map(|i| MonitoredItemCreateRequest {
                        item_to_monitor: ReadValueId {
                            node_id: NodeId::numeric(1, 1001 + i),
                            attribute_id: 13,
                            ..Default::default()
                        },
                        monitoring_mode: MonitoringMode::Reporting,
                        requested_parameters: MonitoringParameters {
                            client_handle: i,
                            sampling_interval: 10.0,
                            queue_size: 4,
                            discard_oldest: true,
                            ..Default::default()
                        },
                    })
                    .collect();
                let req = CreateMonitoredItemsRequest {
                    subscription_id: sid,
                    timestamps_to_return: TimestampsToReturn::Both,
                    items_to_create: items,
                    ..Default::default()
                };
                self.send(
                    c,
                    Kind::CreateMonitoredItems,
                    Request::CreateMonitoredItems(Box::new(req)),
                );
            }
            66..=85 if !cl.subs.is_empty() && publishes < 3 => {
                let acks = self.clients[c]
                    .subs
                    .iter_mut()
                    .flat_map(|(id, s)| {
                        s.to_ack
                            .drain(..)
                            .map(|seq| SubscriptionAcknowledgement {
                                subscription_id: *id,
                                sequence_number: seq,
                            })
                            .collect::<Vec<_>>()
                    })
                    .collect();
                self.send(
                    c,
                    Kind::Publish,
                    Request::Publish(Box::new(PublishRequest {
                        subscription_acknowledgements: acks,
                        ..Default::default()
                    })),
                );
            }
            86..=88 if !cl.subs.is_empty() => {
                let sid = *cl.subs.keys().next().unwrap();
                self.clients[c].subs.remove(&sid);
                self.send(
                    c,
                    Kind::DeleteSubscriptions,
                    Request::DeleteSubscriptions(Box::new(DeleteSubscriptionsRequest {
                        subscription_ids: vec![sid],
                        ..Default::default()
                    })),
                );
            }
            89..=90 => {
                let req = CloseSessionRequest {
                    delete_subscriptions: self.rng.chance(50),
                    ..Default::default()
                };
                self.send(c, Kind::CloseSession, Request::CloseSession(Box::new(req)));
            }
            91 => {
                // A clean close of the channel (CLO), the session stays for a reconnect.
                let now = self.now;
                let l = self.clients[c].link.as_mut().unwrap();
                l.client.close(now, &mut l.c2s);
                self.deliver_c2s(c, true);
                self.drop_link(c);
            }
            92..=93 => self.drop_link(c),
            _ => {}
        }
    }

    fn advance(&mut self, ns: u64) {
        self.now = self.now.advance_ns(ns);
        let now = self.now;
        for s in 0..SHARDS {
            // As the runtime does: a deadline already past is handled at once, again.
            for _ in 0..1000 {
                self.shards[s].on_timer(now);
                if self.shards[s]
                    .next_deadline()
                    .is_none_or(|d| d > now.mono_ns)
                {
                    break;
                }
            }
            let mut ready = Vec::new();
            self.shards[s].take_ready_channels(&mut ready);
        }
        for c in 0..self.clients.len() {
            let Some(l) = self.clients[c].link.as_mut() else {
                continue;
            };
            let _ = l.client.on_timer(now, &mut l.c2s);
            if l.server_closed {
                continue;
            }
            let shard = &mut self.shards[l.shard];
            let mut out = Vec::new();
            let mut st = l.server.flush_deferred(shard, now, &mut out);
            if st == ConnStatus::Open && l.server.next_deadline().is_some_and(|d| d <= now.mono_ns)
            {
                st = l.server.on_timer(shard, now, &mut out);
            }
            self.server_out(c, st, &out);
        }
    }

    fn check_bounds(&self) {
        for s in &self.shards {
            assert!(
                s.session_count() <= s.max_sessions(),
                "sessions {} > {}",
                s.session_count(),
                s.max_sessions()
            );
            assert!(s.open_channel_count() <= s.transport_limits().max_channels_per_shard);
            let sl = &s.shared().config.subscriptions;
            assert!(
                s.subscriptions().subscription_count() <= sl.max_subscriptions_per_shard as usize
            );
        }
    }

    fn run(&mut self) {
        for c in 0..self.clients.len() {
            self.connect(c);
        }
        let steps = 200 + self.rng.below(1500);
        for _ in 0..steps {
            let c = self.rng.below(self.clients.len() as u64) as usize;
            match self.rng.below(100) {
                0..=36 => self.act(c),
                37..=64 => {
                    let all = self.rng.chance(30);
                    self.deliver_c2s(c, all)
                }
                65..=92 => {
                    let all = self.rng.chance(30);
                    self.deliver_s2c(c, all)
                }
                _ => {
                    // Mostly steps of a few ms; sometimes seconds (publishing, keep-alive,
                    // token renewal); rarely past every timeout.
                    let ns = match self.rng.below(100) {
                        0 => 70_000_000_000,
                        1..=5 => 1_000_000_000 + self.rng.below(4_000_000_000),
                        _ => self.rng.below(100_000_000),
                    };
                    self.advance(ns);
                }
            }
            self.check_bounds();
        }
        // Quiesce: deliver everything both ways until nothing moves.
        for _ in 0..50 {
            for c in 0..self.clients.len() {
                self.deliver_c2s(c, true);
                self.deliver_s2c(c, true);
            }
        }
        // Every non-Publish request on a live connection got its answer. (Publish waits
        // for a publishing cycle; it is answered or its connection goes below.)
        for (i, cl) in self.clients.iter().enumerate() {
            if let Some(l) = &cl.link {
                if !l.server_closed && l.client.is_open() {
                    let pending: Vec<_> = l
                        .outstanding
                        .values()
                        .filter(|k| **k != Kind::Publish)
                        .collect();
                    assert!(pending.is_empty(), "client {i}: unanswered {pending:?}");
                }
            }
        }
        // Everything goes; after the longest session timeout nothing is left.
        for c in 0..self.clients.len() {
            self.drop_link(c);
        }
        // Small steps: a subscription's lifetime counts publishing cycles run, and after a
        // jump only one cycle runs (see docs/Fuzzing.md, "timer jumps").
        for _ in 0..400 {
            self.advance(500_000_000);
        }
        for (i, s) in self.shards.iter().enumerate() {
            assert_eq!(s.open_channel_count(), 0, "shard {i}: channels left");
            assert_eq!(s.session_count(), 0, "shard {i}: sessions left");
            assert_eq!(
                s.subscriptions().subscription_count(),
                0,
                "shard {i}: subscriptions left"
            );
        }
    }
}

fn resp_name(r: &Response) -> &'static str {
    r.name()
}

fn run_seed(seed: u64) -> Stats {
    let mut w = World::new(seed);
    w.run();
    w.stats
}

#[test]
fn simulation() {
    let seeds: Vec<u64> = match std::env::var("UARING_SIM_SEED") {
        Ok(s) => vec![s.trim().parse().expect("UARING_SIM_SEED: a number")],
        Err(_) => {
            let n: u64 = std::env::var("UARING_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(32);
            (0..n).collect()
        }
    };
    let mut total = Stats::default();
    for seed in seeds {
        let r = std::panic::catch_unwind(|| run_seed(seed));
        match r {
            Ok(s) => {
                total.answered += s.answered;
                total.closed_with_err += s.closed_with_err;
                total.dropped += s.dropped;
                total.reactivated += s.reactivated;
                total.data_messages += s.data_messages;
                for (k, v) in s.errs {
                    *total.errs.entry(k).or_default() += v;
                }
            }
            Err(e) => {
                eprintln!("simulation failed at seed {seed}; replay: UARING_SIM_SEED={seed} cargo test -p uaring-core --test sim");
                std::panic::resume_unwind(e);
            }
        }
    }
    eprintln!("{total:?}");
    // The runs did what they are for: requests answered, subscriptions delivering,
    // connections lost and sessions taken over by new channels.
    assert!(total.answered > 0 && total.dropped > 0);
    if std::env::var("UARING_SIM_SEED").is_err() {
        assert!(
            total.data_messages > 0,
            "no subscription delivered data: {total:?}"
        );
        assert!(
            total.reactivated > 0,
            "no session was reactivated on a new channel: {total:?}"
        );
    }
}
