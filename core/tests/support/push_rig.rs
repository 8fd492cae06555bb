//! A shard with N Doubles pushed into exception-based items (the change path), driven
//! without sockets: the application's stores, the Publish requests a connection's decoder
//! hands over and the publishing cycles that answer them. Used by benches/push.rs (times and
//! allocation figures) and tests/allocations.rs (asserts no allocation in steady state).

use std::hint::black_box;
use std::sync::Arc;

use uaring_core::address_space::build::make;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::{ConnectionHost, Deferred, RequestContext};
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::{dispatch, dispatch_deferrable};
use uaring_core::shared::ServerShared;
use uaring_core::{
    DataValue, DateTime, ExtensionObject, NodeId, Now, QualifiedName, UaString, Variant,
};

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

pub struct PushRig {
    pub shared: Arc<ServerShared>,
    pub state: ServiceState,
    pub now: Now,
    token: NodeId,
    handle: u32,
    sub: u32,
    /// Node indices of the pushed Doubles.
    pub index: Vec<u32>,
    /// Node index of a Double nobody watches.
    #[allow(dead_code)] // the bench's, not the test's
    pub unwatched: u32,
    scratch: Vec<(u32, Deferred)>,
    ready: Vec<u32>,
    out: Vec<u8>,
    seq: u32,
    k: f64,
}

/// Exception-based items (sampling interval 0, Reporting) on the Values of `nodes`, client
/// handle = position, queue size `queue_size`.
pub fn exception_items(
    nodes: impl Iterator<Item = NodeId>,
    queue_size: u32,
) -> Vec<MonitoredItemCreateRequest> {
    nodes
        .zip(0..)
        .map(|(node_id, i)| MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id,
                attribute_id: 13,
                ..Default::default()
            },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: i,
                sampling_interval: 0.0,
                queue_size,
                ..Default::default()
            },
        })
        .collect()
}

fn node(i: u32) -> NodeId {
    NodeId::string(2, format!("V{i}"))
}

impl PushRig {
    fn header(&mut self) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: self.token.clone(),
            request_handle: self.handle,
            ..Default::default()
        }
    }

    fn call(&mut self, r: Request) -> Response {
        dispatch(&mut self.state, &ctx(), r, self.now)
    }

    /// A shard with `n` pushed Doubles each watched by one exception-based item of one
    /// subscription (publishing 100 ms), plus one Double nobody watches; the initial values
    /// already sent.
    pub fn new(n: u32) -> PushRig {
        let mut config = ServerConfig::default();
        config.operation_limits.max_monitored_items_per_call = 1_000_000;
        let now = Now::new(
            1_000_000_000,
            DateTime::from_unix_nanos(1_700_000_000_000_000_000),
        );
        let shared = ServerShared::new_with(config, now, &mut |b| {
            let ns = b.add_namespace("urn:bench:push")?;
            for i in 0..=n {
                let id = NodeId::string(ns, format!("V{i}"));
                b.add(make::variable(
                    id,
                    QualifiedName::new(ns, &format!("V{i}")),
                    NodeId::ns0(11),
                    -1,
                    Vec::new(),
                    DataValue::new(Variant::Double(0.0)),
                    make::READ_ONLY,
                    0.0,
                    Some((NodeId::ns0(85), 35)),
                ))?;
            }
            Ok(())
        })
        .unwrap();
        let shard = ServiceState::new(
            shared.clone(),
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let index = (0..n)
            .map(|i| shared.address_space.node_index(&node(i)).unwrap())
            .collect();
        let unwatched = shared.address_space.node_index(&node(n)).unwrap();
        let mut b = PushRig {
            shared,
            state: shard,
            now,
            token: NodeId::NULL,
            handle: 0,
            sub: 0,
            index,
            unwatched,
            scratch: Vec::new(),
            ready: Vec::new(),
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
        let items = exception_items((0..n).map(node), 4);
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
    pub fn push_all(&mut self) {
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

    /// The next Publish request (acknowledging the last message): what a client's decoder
    /// hands the server, built outside the allocations counted as the server's.
    pub fn publish_request(&mut self) -> Request {
        let hd = self.header();
        let acks = if self.seq > 0 {
            vec![SubscriptionAcknowledgement {
                subscription_id: self.sub,
                sequence_number: self.seq,
            }]
        } else {
            Vec::new()
        };
        Request::Publish(Box::new(PublishRequest {
            request_header: hd,
            subscription_acknowledgements: acks,
        }))
    }

    /// Queues a Publish, runs the shard's timers one publishing interval later and encodes
    /// what came out; checks the notifications sent when `expect` says how many.
    pub fn publish_cycle(&mut self, expect: Option<usize>) {
        let req = self.publish_request();
        self.publish_cycle_with(req, expect);
    }

    pub fn publish_cycle_with(&mut self, req: Request, expect: Option<usize>) {
        assert!(dispatch_deferrable(&mut self.state, &ctx(), req, 1, self.now).is_none());
        self.now = self.now.advance_ns(100_000_000);
        self.state.on_timer(self.now);
        // As the event loop does: which channels have responses, then theirs.
        self.state.take_ready_channels(&mut self.ready);
        self.ready.clear();
        self.state.take_deferred(CH, &mut self.scratch);
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
                self.state.recycle_buffer(body);
                self.seq += 1;
            }
        }
        self.scratch = scratch;
    }
}
