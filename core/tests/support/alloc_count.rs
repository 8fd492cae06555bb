//! Heap allocations per request over the whole server path: request chunk bytes in →
//! ServerConnection → the real ServiceState and services → response chunk bytes out, with a
//! session activated by core's own client. The global allocator counts only the allocations
//! of the thread that switched counting on, so tests running beside it do not disturb it.
//! Used by tests/allocations.rs (asserts) and benches/allocations.rs (prints the table).

use uaring_core::generated::messages::Request;
use uaring_core::generated::types::{
    BrowseDescription, BrowseDirection, BrowseRequest, ReadRequest, ReadValueId,
    TimestampsToReturn, WriteRequest, WriteValue,
};
use uaring_core::server::connection::ConnStatus;
use uaring_core::types::{DataValue, DateTime, NodeId, Variant};
use uaring_core::Now;

#[path = "counting.rs"]
mod counting;
pub use counting::count;

fn now() -> Now {
    Now::new(1_000_000_000, DateTime(133_000_000_000_000_000))
}

#[path = "net.rs"]
mod net;
pub use net::Net;

impl Net {
    /// A client and a server connection on a real shard, with an activated anonymous session.
    pub fn with_session() -> Net {
        Net::with_session_on(uaring_core::config::ServerConfig::default())
    }

    /// [`Net::with_session`] on a server with `config`.
    pub fn with_session_on(config: uaring_core::config::ServerConfig) -> Net {
        let mut n = Net::connected_with(config, now());
        n.activate_anonymous_session(600_000.0, 0);
        n
    }

    /// [`Net::with_session`] on a server with `config` and what `extend` adds to the
    /// default content (the callgrind bench's plant; tests/allocations.rs has no use for it).
    #[allow(dead_code)]
    pub fn with_session_and(
        config: uaring_core::config::ServerConfig,
        extend: impl FnMut(&mut uaring_core::address_space::AddressSpaceBuilder) -> Result<(), String>,
    ) -> Net {
        let mut n = Net::connected_with_and(config, now(), extend);
        n.activate_anonymous_session(600_000.0, 0);
        n
    }

    /// Feeds `requests` one chunk at a time and returns (allocations, bytes) per request
    /// over the last `measured` of them (the ones before warm the buffers up). Checks that
    /// every response decodes and is Good.
    pub fn allocations_per_request(
        &mut self,
        make: impl Fn() -> Request,
        total: usize,
        measured: usize,
    ) -> (f64, f64) {
        let chunks: Vec<Vec<u8>> = (0..total)
            .map(|_| {
                let mut v = Vec::new();
                self.client
                    .send_request(make(), now(), &mut v)
                    .expect("send");
                v
            })
            .collect();
        let mut out = Vec::with_capacity(64 * 1024);
        let (mut allocs, mut bytes) = (0, 0);
        for (i, chunk) in chunks.iter().enumerate() {
            out.clear();
            let (status, a, b) =
                count(|| self.server.on_recv(&mut self.state, now(), chunk, &mut out));
            assert_eq!(status, ConnStatus::Open);
            if i >= total - measured {
                allocs += a;
                bytes += b;
            }
            let mut sink = Vec::new();
            self.client
                .on_recv(now(), &out, &mut sink)
                .expect("client decodes the response");
            let (_, resp) = self
                .client
                .poll_response()
                .expect("one response per request");
            assert!(resp.response_header().service_result.is_good(), "{resp:?}");
        }
        (
            allocs as f64 / measured as f64,
            bytes as f64 / measured as f64,
        )
    }
}

/// Values with heap memory, stored once into the fixture's Demo variables so that the
/// reads of [`read_heap_values`] have something to copy: a String, a String array and a
/// structure (a BuildInfo in an ExtensionObject, in `Demo.Static.Variant`).
pub fn heap_values() -> Vec<(NodeId, Variant)> {
    let strings = (0..10)
        .map(|i| Variant::String(format!("element {i} of a String array").as_str().into()))
        .collect();
    let build = uaring_core::generated::types::BuildInfo {
        product_uri: "urn:uaring:test:product".into(),
        manufacturer_name: "uaring".into(),
        product_name: "a structure read again and again".into(),
        software_version: "1.2.3".into(),
        build_number: "42".into(),
        build_date: uaring_core::types::DateTime(1),
    };
    vec![
        (
            NodeId::string(1, "Demo.Static.String"),
            Variant::String("a String value read again and again".into()),
        ),
        (
            NodeId::string(1, "Demo.Static.Arrays.String"),
            Variant::array(uaring_core::types::BuiltinType::String, strings).expect("array"),
        ),
        (
            NodeId::string(1, "Demo.Static.Variant"),
            Variant::ExtensionObject(Box::new(uaring_core::types::ExtensionObject::from_struct(
                &build,
            ))),
        ),
    ]
}

/// A Write storing [`heap_values`].
pub fn write_heap_values() -> Request {
    Request::Write(Box::new(WriteRequest {
        nodes_to_write: heap_values()
            .into_iter()
            .map(|(node_id, value)| WriteValue {
                node_id,
                attribute_id: 13,
                value: DataValue {
                    value,
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

/// The Reads of values with heap memory: (what, node, IndexRange).
pub const HEAP_READS: &[(&str, &str, &str)] = &[
    ("a String", "Demo.Static.String", ""),
    ("a String array (10)", "Demo.Static.Arrays.String", ""),
    ("a structure", "Demo.Static.Variant", ""),
    ("an Int32 array (1,000)", "BenchmarkArray1000", ""),
    ("IndexRange 100:199 of it", "BenchmarkArray1000", "100:199"),
    (
        "IndexRange 2:4 of Strings",
        "Demo.Static.Arrays.String",
        "2:4",
    ),
];

/// A Read of one of [`HEAP_READS`] (`Some(k)`) or of all of them (`None`).
pub fn read_heap_values(k: Option<usize>) -> Request {
    let rv = |&(_, node, range): &(&str, &str, &str)| ReadValueId {
        // BenchmarkArray1000 is ns=1;i=2003 (the third benchmark array).
        node_id: if node == "BenchmarkArray1000" {
            NodeId::numeric(1, 2003)
        } else {
            NodeId::string(1, node)
        },
        attribute_id: 13,
        index_range: range.into(),
        ..Default::default()
    };
    Request::Read(Box::new(ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: match k {
            Some(k) => HEAP_READS.get(k).map(rv).into_iter().collect(),
            None => HEAP_READS.iter().map(rv).collect(),
        },
        ..Default::default()
    }))
}

/// A Read of `n` benchmark variables' values (ns=1;i=1001..).
pub fn read(n: u32) -> Request {
    Request::Read(Box::new(ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: (0..n)
            .map(|i| ReadValueId {
                node_id: NodeId::numeric(1, 1001 + i),
                attribute_id: 13,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

/// A Write of `n` benchmark variables (Int32 values).
pub fn write(n: u32) -> Request {
    Request::Write(Box::new(WriteRequest {
        nodes_to_write: (0..n)
            .map(|i| WriteValue {
                node_id: NodeId::numeric(1, 1001 + i),
                attribute_id: 13,
                value: DataValue {
                    value: Variant::Int32(i as i32),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

/// A Browse of the Objects folder's forward hierarchical references.
pub fn browse() -> Request {
    Request::Browse(Box::new(BrowseRequest {
        nodes_to_browse: vec![BrowseDescription {
            node_id: NodeId::ns0(85),
            browse_direction: BrowseDirection::Forward,
            reference_type_id: NodeId::ns0(33),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 63,
        }],
        ..Default::default()
    }))
}

/// Publish over the whole server path, a round at a time: the values of `n` exception-based
/// Int32 items change (stores into BenchmarkValue0..n), the Publish request chunk goes in
/// (decoded into the recycled request, acknowledging the last message), the publishing cycle
/// runs, the response chunk comes out. Used by tests/allocations.rs (asserts 0 in steady
/// state) and benches/allocations.rs (prints the figure).
pub struct PublishLoop {
    subscription_id: u32,
    index: Vec<u32>,
    sequence_number: u32,
    round: i32,
    now: Now,
    ready: Vec<u32>,
    out: Vec<u8>,
}

impl PublishLoop {
    /// A subscription (100 ms) with `n` items of sampling interval 0 on `net`'s session.
    pub fn new(net: &mut Net, n: u32) -> PublishLoop {
        use uaring_core::generated::messages::Response;
        use uaring_core::generated::types::{
            CreateMonitoredItemsRequest, CreateSubscriptionRequest, MonitoredItemCreateRequest,
            MonitoringMode, MonitoringParameters,
        };
        let Response::CreateSubscription(sub) = net.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 10_000,
                requested_max_keep_alive_count: 100,
                publishing_enabled: true,
                ..Default::default()
            },
        ))) else {
            panic!("CreateSubscription")
        };
        let items = (0..n)
            .map(|i| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::numeric(1, 1001 + i),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i,
                    sampling_interval: 0.0,
                    queue_size: 1,
                    ..Default::default()
                },
            })
            .collect();
        let Response::CreateMonitoredItems(m) = net.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                subscription_id: sub.subscription_id,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
                ..Default::default()
            },
        ))) else {
            panic!("CreateMonitoredItems")
        };
        assert!(m
            .results
            .iter()
            .all(|r| r.status_code.is_good() && r.revised_sampling_interval == 0.0));
        let space = &net.state.shared().address_space;
        let index = (0..n)
            .map(|i| space.node_index(&NodeId::numeric(1, 1001 + i)).unwrap())
            .collect();
        PublishLoop {
            subscription_id: sub.subscription_id,
            index,
            sequence_number: 0,
            round: 0,
            now: net.now,
            ready: Vec::with_capacity(8),
            out: Vec::with_capacity(1 << 16),
        }
    }

    /// One round: (allocations, bytes) on the server path, and the data changes the Publish
    /// response carried.
    pub fn round(&mut self, net: &mut Net) -> (u64, u64, usize) {
        use uaring_core::generated::messages::Response;
        use uaring_core::generated::types::{
            DataChangeNotification, PublishRequest, SubscriptionAcknowledgement,
        };
        let shared = net.state.shared().clone();
        for &i in &self.index {
            shared
                .address_space
                .store_value(i, DataValue::new(Variant::Int32(self.round)))
                .unwrap();
        }
        self.round += 1;
        let acks = if self.sequence_number > 0 {
            vec![SubscriptionAcknowledgement {
                subscription_id: self.subscription_id,
                sequence_number: self.sequence_number,
            }]
        } else {
            Vec::new()
        };
        let mut chunk = Vec::new();
        net.client
            .send_request(
                Request::Publish(Box::new(PublishRequest {
                    subscription_acknowledgements: acks,
                    ..Default::default()
                })),
                self.now,
                &mut chunk,
            )
            .expect("send");
        self.now = self.now.advance_ns(100_000_000);
        self.out.clear();
        let now = self.now;
        let (out, ready) = (&mut self.out, &mut self.ready);
        let ((), allocs, bytes) = count(|| {
            let st = net.server.on_recv(&mut net.state, now, &chunk, out);
            assert_eq!(st, ConnStatus::Open);
            net.state.on_timer(now);
            net.state.take_ready_channels(ready);
            ready.clear();
            let st = net.server.flush_deferred(&mut net.state, now, out);
            assert_eq!(st, ConnStatus::Open);
        });
        let mut sink = Vec::new();
        net.client.on_recv(now, out, &mut sink).expect("client");
        let (_, resp) = net.client.poll_response().expect("a Publish response");
        let Response::Publish(p) = resp else {
            panic!("{resp:?}")
        };
        let notifications = p
            .notification_message
            .notification_data
            .iter()
            .filter_map(|eo| {
                eo.decode_as::<DataChangeNotification>(Default::default())
                    .and_then(|r| r.ok())
            })
            .map(|d| d.monitored_items.len())
            .sum();
        self.sequence_number = p.notification_message.sequence_number;
        (allocs, bytes, notifications)
    }
}
