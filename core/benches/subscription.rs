//! The subscription hot paths of one shard, with a counting allocator:
//!
//! * `sample`: one sampling tick of N items on N counters (distinct nodes, 10 ms, queue 1):
//!   sample, filter, queue, ready list. Reported per item sampled.
//! * `publish`: a tick plus one publishing cycle that answers a queued Publish with N
//!   notifications, and the encoding of that PublishResponse (as the connection does).
//!   Reported per notification.
//! * `fan_out`: K items on the same node share one sample (K = 1, 5, 15 sessions' worth).
//! * `sample_scattered`: one tick of 200,000 items whose nodes are scattered over the address
//!   space (item i on counter `i × 7919 mod N + 1`): items and sources sit in their tables in
//!   creation order, the nodes' records and cells anywhere, as when clients subscribe in
//!   their own order; too big for the caches, so the bucket walk's reading ahead shows here.
//!
//! `SAMPLE_TICKS=K` runs only the `sample` set-up and K ticks, no criterion: under
//! `valgrind --tool=callgrind`, two values of K give instructions per tick that two builds
//! can be compared by on a busy machine (`SAMPLE_ITEMS=N` for another number of items,
//! `SAMPLE_SCATTERED=1` for the scattered nodes).
//!
//! After the timings the bench prints heap allocations per sample and per notification in
//! steady state (`cargo bench -p uaring-core --bench subscription`): the server's side, from
//! the Publish request handed to the shard (built before counting) to the encoded response
//! given back to the pool. The server has no Demo folder (its event generator and alarm
//! allocate per event, off this path).

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::{ConnectionHost, Deferred, RequestContext};
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::{dispatch, dispatch_deferrable};
use uaring_core::shared::ServerShared;
use uaring_core::{DateTime, ExtensionObject, NodeId, Now, UaString};

#[path = "../tests/support/content.rs"]
mod content;
#[path = "../tests/support/counting.rs"]
mod counting;

use counting::count;

const CH: u32 = 7;

fn ctx() -> RequestContext<'static> {
    RequestContext {
        channel_id: CH,
        security_policy_uri: "http://opcfoundation.org/UA/SecurityPolicy#None",
        security_mode: MessageSecurityMode::None,
        client_certificate: None,
        peer: None,
        endpoint_url: "opc.tcp://bench:4840",
    }
}

struct Bench {
    state: ServiceState,
    now: Now,
    token: NodeId,
    handle: u32,
    sub: u32,
    scratch: Vec<(u32, Deferred)>,
    ready: Vec<u32>,
    verify: bool,
    out: Vec<u8>,
}

impl Bench {
    fn header(&mut self) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: self.token.clone(),
            request_handle: self.handle,
            ..Default::default()
        }
    }

    /// A shard with `counters` counters, one session, one subscription (`publishing_ms`)
    /// and `items` items on `nodes(i)` at 10 ms, queue 1.
    fn new(counters: u32, publishing_ms: f64, items: u32, nodes: impl Fn(u32) -> u32) -> Bench {
        let mut config = ServerConfig::default();
        config.operation_limits.max_monitored_items_per_call = 1_000_000;
        let now = Now::new(
            1_000_000_000,
            DateTime::from_unix_nanos(1_700_000_000_000_000_000),
        );
        let shared: Arc<ServerShared> =
            content::new_with(config, now, &content::Content::counters(counters)).unwrap();
        let mut shard = ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let cs = dispatch(
            &mut shard,
            &ctx(),
            Request::CreateSession(Box::new(CreateSessionRequest {
                requested_session_timeout: 3_600_000.0,
                ..Default::default()
            })),
            now,
        );
        let Response::CreateSession(cs) = cs else {
            panic!("{cs:?}")
        };
        let token = cs.authentication_token.clone();
        let mut b = Bench {
            state: shard,
            now,
            token,
            handle: 0,
            sub: 0,
            scratch: Vec::new(),
            ready: Vec::new(),
            verify: true,
            out: Vec::with_capacity(1 << 20),
        };
        let hd = b.header();
        let r = dispatch(
            &mut b.state,
            &ctx(),
            Request::ActivateSession(Box::new(ActivateSessionRequest {
                request_header: hd,
                user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                    policy_id: UaString::from("anonymous"),
                }),
                ..Default::default()
            })),
            now,
        );
        assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
        let hd = b.header();
        let r = dispatch(
            &mut b.state,
            &ctx(),
            Request::CreateSubscription(Box::new(CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: publishing_ms,
                requested_lifetime_count: 1_000_000,
                requested_max_keep_alive_count: 1000,
                publishing_enabled: true,
                ..Default::default()
            })),
            now,
        );
        let Response::CreateSubscription(s) = r else {
            panic!("{r:?}")
        };
        b.sub = s.subscription_id;
        let hd = b.header();
        let items = (0..items)
            .map(|i| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::numeric(1, nodes(i)),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i,
                    sampling_interval: 10.0,
                    queue_size: 1,
                    ..Default::default()
                },
            })
            .collect();
        let r = dispatch(
            &mut b.state,
            &ctx(),
            Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: b.sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
            })),
            now,
        );
        let Response::CreateMonitoredItems(m) = r else {
            panic!("{r:?}")
        };
        assert!(m.results.iter().all(|x| x.status_code.is_good()));
        b
    }

    fn tick(&mut self) {
        self.now = self.now.advance_ns(10_000_000);
        self.state.on_timer(self.now);
    }

    /// Queues a Publish (acknowledging `ack`), runs one 10 ms tick, encodes what came out.
    /// Returns the notifications sent.
    fn publish_cycle(&mut self, ack: u32) -> (usize, u32) {
        let req = self.publish_request(ack);
        self.publish_cycle_with(req, ack)
    }

    /// The Publish request acknowledging `ack` (0: none): what the connection's decoder
    /// hands the shard, built outside the allocations counted as the server's.
    fn publish_request(&mut self, ack: u32) -> Request {
        let hd = self.header();
        let acks = if ack > 0 {
            vec![SubscriptionAcknowledgement {
                subscription_id: self.sub,
                sequence_number: ack,
            }]
        } else {
            Vec::new()
        };
        Request::Publish(Box::new(PublishRequest {
            request_header: hd,
            subscription_acknowledgements: acks,
        }))
    }

    fn publish_cycle_with(&mut self, req: Request, ack: u32) -> (usize, u32) {
        assert!(dispatch_deferrable(&mut self.state, &ctx(), req, 1, self.now).is_none());
        self.tick();
        // As the event loop does: which channels have responses, then theirs.
        self.state.take_ready_channels(&mut self.ready);
        self.ready.clear();
        self.state.take_deferred(CH, &mut self.scratch);
        let mut n = 0;
        // What the connection does with a deferred response: chunk the encoded body (here:
        // copy it out) and give the buffer back. Every cycle sends one message of new
        // counter values, so its sequence number is the previous one + 1 (checked by
        // decoding while warming up).
        let mut scratch = std::mem::take(&mut self.scratch);
        for (_, d) in scratch.drain(..) {
            if self.verify {
                let Ok(Response::Publish(p)) = d.to_response() else {
                    panic!("{d:?}")
                };
                assert_eq!(p.notification_message.sequence_number, ack + 1);
            }
            match d {
                Deferred::Encoded { body, .. } => {
                    self.out.clear();
                    self.out.extend_from_slice(&body);
                    black_box(&self.out);
                    self.state.recycle_buffer(body);
                    n += 1;
                }
                Deferred::Response(r) => panic!("unexpected {r:?}"),
            }
        }
        self.scratch = scratch;
        assert_eq!(n, 1);
        (n, ack + 1)
    }
}

/// The counter (1..=n) of item `i` when the items' nodes are scattered: a step of 7919 (a
/// prime, so every counter once for n not a multiple of it) through the address space.
fn scatter(i: u32, n: u32) -> u32 {
    (u64::from(i) * 7919 % u64::from(n)) as u32 + 1
}

fn benches(c: &mut Criterion) {
    const N: u32 = 10_000;
    if let Some(ticks) = std::env::var("SAMPLE_TICKS")
        .ok()
        .and_then(|t| t.parse::<u32>().ok())
    {
        // Just the `sample` set-up and that many ticks, for an instruction count under
        // callgrind (deterministic where wall-clock times are not): run it with two counts
        // and divide the difference.
        let n = std::env::var("SAMPLE_ITEMS")
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
            .unwrap_or(N);
        let scattered = std::env::var_os("SAMPLE_SCATTERED").is_some();
        let mut b = Bench::new(n, 3_600_000.0, n, |i| {
            if scattered {
                scatter(i, n)
            } else {
                i + 1
            }
        });
        for _ in 0..10 + ticks {
            b.tick();
        }
        std::process::exit(0);
    }
    let mut g = c.benchmark_group("subscription");
    g.throughput(Throughput::Elements(N as u64));
    {
        let mut b = Bench::new(N, 3_600_000.0, N, |i| i + 1);
        for _ in 0..10 {
            b.tick();
        }
        g.bench_function(BenchmarkId::new("sample", N), |x| x.iter(|| b.tick()));
        let ((), allocs, _) = count(|| {
            for _ in 0..100 {
                b.tick();
            }
        });
        let per = allocs as f64 / (100.0 * N as f64);
        println!(
            "sample: {per:.4} heap allocations per item sampled (steady state, {N} items, queue 1)"
        );
    }
    {
        let mut b = Bench::new(N, 10.0, N, |i| i + 1);
        let mut seq = 0;
        for _ in 0..10 {
            seq = b.publish_cycle(seq).1;
        }
        b.verify = false;
        g.bench_function(BenchmarkId::new("publish", N), |x| {
            x.iter(|| {
                seq = b.publish_cycle(seq).1;
            })
        });
        let mut total = 0;
        for _ in 0..100 {
            let req = b.publish_request(seq);
            let ((_, s), n, _) = count(|| b.publish_cycle_with(req, seq));
            seq = s;
            total += n;
        }
        let per = total as f64 / (100.0 * N as f64);
        println!("publish: {per:.4} heap allocations per notification ({} per message of {N}, encoded; steady state)", total as f64 / 100.0);
    }
    {
        const M: u32 = 200_000;
        g.throughput(Throughput::Elements(M as u64));
        let mut b = Bench::new(M, 3_600_000.0, M, |i| scatter(i, M));
        for _ in 0..3 {
            b.tick();
        }
        g.bench_function(BenchmarkId::new("sample_scattered", M), |x| {
            x.iter(|| b.tick())
        });
    }
    g.finish();
    let mut g = c.benchmark_group("fan_out");
    for k in [1u32, 5, 15] {
        // K items per node on 1000 nodes: one sample per node, K queue entries.
        let items = 1000 * k;
        g.throughput(Throughput::Elements(items as u64));
        let mut b = Bench::new(1000, 3_600_000.0, items, |i| i % 1000 + 1);
        for _ in 0..10 {
            b.tick();
        }
        g.bench_function(BenchmarkId::new("items_per_node", k), |x| {
            x.iter(|| b.tick())
        });
    }
    g.finish();
}

criterion_group!(name = subs; config = Criterion::default().sample_size(20); targets = benches);
criterion_main!(subs);
