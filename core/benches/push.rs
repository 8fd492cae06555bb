//! The change path (values pushed by the application into exception-based items), one shard,
//! with a counting allocator:
//!
//! * `store/unwatched`: `AddressSpace::store_value` of a Double nobody watches (per update).
//! * `store/watched`: the same into N Doubles each watched by one exception-based item of
//!   this shard: the cell store plus the copy into the shard's inbox (per update; the inbox
//!   is drained outside the timing).
//! * `deliver`: the shard's side of N pushed updates: one publishing cycle that drains the
//!   inbox into the items' queues, builds the NotificationMessage of N notifications and
//!   encodes the PublishResponse (as the connection does). Reported per notification.
//!
//! Then it prints heap allocations per pushed update and per notification in steady state
//! (`cargo bench -p uaring-core --bench push`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_core::address_space::build::ns1;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::config::ServerConfig;
use uaring_core::server::context::{ConnectionHost, Deferred, RequestContext};
use uaring_core::server::shard::ShardState;
use uaring_core::server::shared::ServerShared;
use uaring_core::services::{dispatch, dispatch_deferrable};
use uaring_core::{
    DataValue, DateTime, ExtensionObject, NodeId, Now, QualifiedName, UaString, Variant,
};

struct Counting;
static ALLOCS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const CH: u32 = 7;
const N: u32 = 10_000;

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
    shared: Arc<ServerShared>,
    shard: ShardState,
    now: Now,
    token: NodeId,
    handle: u32,
    sub: u32,
    /// Node indices of the pushed Doubles.
    index: Vec<u32>,
    /// Node index of a Double nobody watches.
    unwatched: u32,
    scratch: Vec<(u32, Deferred)>,
    out: Vec<u8>,
    seq: u32,
    k: f64,
}

fn node(i: u32) -> NodeId {
    NodeId::string(2, format!("V{i}"))
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

    fn call(&mut self, r: Request) -> Response {
        dispatch(&mut self.shard, &ctx(), r, self.now)
    }

    fn new() -> Bench {
        let mut config = ServerConfig::default();
        config.operation_limits.max_monitored_items_per_call = 1_000_000;
        let now = Now::new(
            1_000_000_000,
            DateTime::from_unix_nanos(1_700_000_000_000_000_000),
        );
        let shared = ServerShared::new_with(config, now, &mut |b| {
            let ns = b.add_namespace("urn:bench:push")?;
            for i in 0..=N {
                let id = NodeId::string(ns, format!("V{i}"));
                b.add(ns1::variable(
                    id,
                    QualifiedName::new(ns, &format!("V{i}")),
                    NodeId::ns0(11),
                    -1,
                    Vec::new(),
                    DataValue::new(Variant::Double(0.0)),
                    ns1::READ_ONLY,
                    0.0,
                    Some((NodeId::ns0(85), 35)),
                ))?;
            }
            Ok(())
        })
        .unwrap();
        let shard = ShardState::new(
            shared.clone(),
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let index = (0..N)
            .map(|i| shared.address_space.node_index(&node(i)).unwrap())
            .collect();
        let unwatched = shared.address_space.node_index(&node(N)).unwrap();
        let mut b = Bench {
            shared,
            shard,
            now,
            token: NodeId::NULL,
            handle: 0,
            sub: 0,
            index,
            unwatched,
            scratch: Vec::new(),
            out: Vec::with_capacity(1 << 20),
            seq: 0,
            k: 0.0,
        };
        let Response::CreateSession(cs) =
            b.call(Request::CreateSession(Box::new(CreateSessionRequest {
                requested_session_timeout: 3_600_000.0,
                ..Default::default()
            })))
        else {
            panic!()
        };
        b.token = cs.authentication_token.clone();
        let hd = b.header();
        let r = b.call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            request_header: hd,
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: UaString::from("anonymous"),
            }),
            ..Default::default()
        })));
        assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
        let hd = b.header();
        let Response::CreateSubscription(s) = b.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 1_000_000,
                requested_max_keep_alive_count: 1000,
                publishing_enabled: true,
                ..Default::default()
            },
        ))) else {
            panic!()
        };
        b.sub = s.subscription_id;
        let hd = b.header();
        let items = (0..N)
            .map(|i| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: node(i),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i,
                    sampling_interval: 0.0,
                    queue_size: 4,
                    ..Default::default()
                },
            })
            .collect();
        let Response::CreateMonitoredItems(m) = b.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: b.sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
            },
        ))) else {
            panic!()
        };
        assert!(m
            .results
            .iter()
            .all(|x| x.status_code.is_good() && x.revised_sampling_interval == 0.0));
        // The initial values go out with the first cycles.
        for _ in 0..3 {
            b.publish_cycle(None);
        }
        b
    }

    /// One new value into every watched Double (the application's side).
    fn push_all(&mut self) {
        self.k += 1.0;
        let ts = self.now.utc;
        for &i in &self.index {
            let dv = DataValue {
                value: Variant::Double(self.k),
                source_timestamp: Some(ts),
                ..Default::default()
            };
            black_box(self.shared.address_space.store_value(i, dv).unwrap());
        }
    }

    /// Queues a Publish (acknowledging the last message), runs the shard's timers one
    /// publishing interval later and encodes what came out; returns the notifications sent
    /// when `expect` says how many.
    fn publish_cycle(&mut self, expect: Option<usize>) {
        let hd = self.header();
        let acks = if self.seq > 0 {
            vec![SubscriptionAcknowledgement {
                subscription_id: self.sub,
                sequence_number: self.seq,
            }]
        } else {
            Vec::new()
        };
        let req = Request::Publish(Box::new(PublishRequest {
            request_header: hd,
            subscription_acknowledgements: acks,
        }));
        assert!(dispatch_deferrable(&mut self.shard, &ctx(), req, 1, self.now).is_none());
        self.now = self.now.advance_ns(100_000_000);
        self.shard.on_timer(self.now);
        self.shard.take_deferred(CH, &mut self.scratch);
        let mut scratch = std::mem::take(&mut self.scratch);
        for (_, d) in scratch.drain(..) {
            if let Some(n) = expect.filter(|_| self.seq < 8) {
                let Ok(Response::Publish(p)) = d.to_response() else {
                    panic!("{d:?}")
                };
                let got: usize = p
                    .notification_message
                    .notification_data
                    .iter()
                    .filter_map(|eo| {
                        eo.decode_as::<DataChangeNotification>(Default::default())
                            .and_then(|r| r.ok())
                    })
                    .map(|d| d.monitored_items.len())
                    .sum();
                assert_eq!(got, n, "every pushed value is one notification");
            }
            if let Deferred::Encoded { body, .. } = d {
                self.out.clear();
                self.out.extend_from_slice(&body);
                black_box(&self.out);
                self.shard.recycle_buffer(body);
                self.seq += 1;
            }
        }
        self.scratch = scratch;
    }
}

fn allocs() -> u64 {
    ALLOCS.load(Ordering::Relaxed)
}

fn benches(c: &mut Criterion) {
    let mut b = Bench::new();
    let mut g = c.benchmark_group("push");
    g.throughput(Throughput::Elements(1));
    let space = b.shared.clone();
    let unwatched = b.unwatched;
    let mut k = 0.0;
    g.bench_function("store/unwatched", |x| {
        x.iter(|| {
            k += 1.0;
            black_box(
                space
                    .address_space
                    .store_value(unwatched, DataValue::new(Variant::Double(k)))
                    .unwrap(),
            )
        })
    });
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function(BenchmarkId::new("store/watched", N), |x| {
        x.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let s = Instant::now();
                b.push_all();
                t += s.elapsed();
                b.publish_cycle(None);
            }
            t
        })
    });
    g.bench_function(BenchmarkId::new("deliver", N), |x| {
        x.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                b.push_all();
                let s = Instant::now();
                b.publish_cycle(Some(N as usize));
                t += s.elapsed();
            }
            t
        })
    });
    g.finish();
    for _ in 0..10 {
        b.push_all();
        b.publish_cycle(Some(N as usize));
    }
    // Six rounds fit the shard's inbox (65,536): none is lost.
    let a0 = allocs();
    for _ in 0..6 {
        b.push_all();
    }
    let pushed = allocs() - a0;
    b.publish_cycle(None);
    for _ in 0..10 {
        b.push_all();
        b.publish_cycle(Some(N as usize));
    }
    let mut delivered = 0;
    for _ in 0..50 {
        b.push_all();
        let a0 = allocs();
        b.publish_cycle(Some(N as usize));
        delivered += allocs() - a0;
    }
    println!(
        "push: {:.4} heap allocations per pushed update, {:.4} per notification ({N} items, queue 4; steady state)",
        pushed as f64 / (6.0 * N as f64),
        delivered as f64 / (50.0 * N as f64)
    );
    let stats = b.shard.subscriptions().stats();
    println!(
        "push: {} changes offered, {} lost to a full inbox",
        stats.changes, stats.changes_lost
    );
}

criterion_group!(name = push; config = Criterion::default().sample_size(20); targets = benches);
criterion_main!(push);
