//! HistoryRead through the service layer, against an in-memory store answering from its
//! own thread: the checks the server makes itself, the deferred answer, continuation
//! points (bounded per session, refused for other details, released), and the service
//! unsupported without a store.

mod dispatch_util;

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use dispatch_util::*;
use uaring_core::address_space::access_level;
use uaring_core::address_space::build::make;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::history::{
    HistoryBackend, HistoryCapabilities, HistoryReadOp, HistoryReply, ReadDetails,
};
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::shared::ServerShared;
use uaring_core::{DataValue, DateTime, DecodeLimits, ExtensionObject, NodeId, QualifiedName};
use uaring_core::{StatusCode, Variant};

fn temp() -> NodeId {
    NodeId::string(2, "Temp")
}
fn live_only() -> NodeId {
    NodeId::string(2, "LiveOnly")
}
fn not_kept() -> NodeId {
    NodeId::string(2, "NotKept")
}

/// 0..100 at one value a second from `t0`.
fn t0() -> DateTime {
    DateTime::from_unix_nanos(1_700_000_000_000_000_000)
}
fn at(s: i64) -> DateTime {
    DateTime(t0().0 + s * 10_000_000)
}

/// A store of one series, answered from a thread of its own.
#[derive(Debug)]
struct MemoryStore {
    values: Vec<DataValue>,
    jobs: Mutex<mpsc::Sender<(HistoryReadOp, HistoryReply)>>,
    /// The tokens of released continuation points, as the server handed them back.
    released: Mutex<Vec<(NodeId, Vec<u8>)>>,
}

fn store() -> Arc<MemoryStore> {
    let values: Vec<DataValue> = (0..100)
        .map(|i| DataValue {
            source_timestamp: Some(at(i)),
            server_timestamp: Some(at(i)),
            ..DataValue::new(Variant::Double(i as f64))
        })
        .collect();
    let (tx, rx) = mpsc::channel::<(HistoryReadOp, HistoryReply)>();
    let s = Arc::new(MemoryStore {
        values: values.clone(),
        jobs: Mutex::new(tx),
        released: Mutex::new(Vec::new()),
    });
    std::thread::spawn(move || {
        for (op, reply) in rx {
            answer(&values, op, reply);
        }
    });
    s
}

/// Raw reads, forward or backward, `max_values` at a time; the resume token is the index
/// of the next value.
fn answer(values: &[DataValue], op: HistoryReadOp, reply: HistoryReply) {
    let ReadDetails::Raw(d) = &*op.details else {
        return reply.fail(StatusCode::BadHistoryOperationUnsupported);
    };
    let (lo, hi) = if d.end_time.is_null() || d.start_time <= d.end_time {
        (d.start_time, d.end_time)
    } else {
        (d.end_time, d.start_time)
    };
    let reverse = !d.end_time.is_null() && d.end_time < d.start_time;
    let mut selected: Vec<&DataValue> = values
        .iter()
        .filter(|v| {
            let t = v.source_timestamp.unwrap();
            t >= lo && (hi.is_null() || t <= hi)
        })
        .collect();
    if reverse {
        selected.reverse();
    }
    let from = op.resume.as_ref().map_or(0, |t| {
        u64::from_le_bytes(t[..8].try_into().unwrap()) as usize
    });
    let max = op.max_values as usize;
    let page: Vec<DataValue> = selected
        .iter()
        .skip(from)
        .take(max)
        .map(|v| (*v).clone())
        .collect();
    let more = from + page.len() < selected.len();
    reply.answer(HistoryReadResult {
        status_code: if page.is_empty() {
            StatusCode::GoodNoData
        } else {
            StatusCode::Good
        },
        continuation_point: if more {
            ((from + page.len()) as u64).to_le_bytes().to_vec().into()
        } else {
            Default::default()
        },
        history_data: ExtensionObject::from_struct(&HistoryData { data_values: page }),
    });
}

impl HistoryBackend for MemoryStore {
    fn capabilities(&self) -> HistoryCapabilities {
        HistoryCapabilities {
            access_history_data: true,
            ..Default::default()
        }
    }
    fn has_history(&self, node_id: &NodeId, events: bool) -> bool {
        !events && *node_id == temp()
    }
    fn read(&self, op: HistoryReadOp, reply: HistoryReply) {
        let _ = self.values.len();
        self.jobs.lock().unwrap().send((op, reply)).unwrap();
    }
    fn release_continuation_point(&self, node_id: &NodeId, token: Vec<u8>) {
        self.released.lock().unwrap().push((node_id.clone(), token));
    }
}

fn server(config: ServerConfig, history: bool) -> Arc<ServerShared> {
    server_on(config, history.then(store))
}

fn server_on(config: ServerConfig, store: Option<Arc<MemoryStore>>) -> Arc<ServerShared> {
    let backend: Option<Arc<dyn HistoryBackend>> = store.map(|s| s as _);
    ServerShared::new_with_history(
        config,
        start(),
        &mut |b| {
            let ns = b.add_namespace("urn:test:history")?;
            let objects = Some((NodeId::ns0(85), 35));
            for (id, level) in [
                (temp(), make::READ_ONLY | access_level::HISTORY_READ),
                (live_only(), make::READ_ONLY),
                (not_kept(), make::READ_ONLY | access_level::HISTORY_READ),
            ] {
                let name = match &id.identifier {
                    uaring_core::types::Identifier::String(s) => s.as_str().to_string(),
                    _ => unreachable!(),
                };
                b.add(make::variable(
                    id,
                    QualifiedName::new(ns, &name),
                    NodeId::ns0(11),
                    -1,
                    vec![],
                    DataValue::new(Variant::Double(0.0)),
                    level,
                    0.0,
                    objects.clone(),
                ))?;
            }
            Ok(())
        },
        backend,
    )
    .unwrap()
}

struct Client {
    h: Harness,
    token: NodeId,
    request_id: u32,
}

impl Client {
    fn new(shared: Arc<ServerShared>) -> Client {
        let mut h = Harness::on_shared(shared, 0);
        let token = h.open_session();
        Client {
            h,
            token,
            request_id: 10,
        }
    }

    fn request(&mut self, details: ExtensionObject, nodes: Vec<HistoryReadValueId>) -> Request {
        let hd = self.h.header(&self.token);
        Request::HistoryRead(Box::new(HistoryReadRequest {
            request_header: hd,
            history_read_details: details,
            timestamps_to_return: TimestampsToReturn::Source,
            release_continuation_points: false,
            nodes_to_read: nodes,
        }))
    }

    /// Sends and waits for the answer, at once or deferred.
    fn send(&mut self, req: Request) -> HistoryReadResponse {
        self.request_id += 1;
        let ch = self.h.channel;
        let now = self.h.now;
        let r = dispatch_deferrable(
            &mut self.h.state,
            &Harness::ctx(ch),
            req,
            self.request_id,
            now,
        )
        .or_else(|| {
            for _ in 0..500 {
                std::thread::sleep(std::time::Duration::from_millis(2));
                self.h.state.on_timer(now);
                let mut v = Vec::new();
                self.h.state.take_deferred(ch, &mut v);
                if let Some((id, d)) = v.pop() {
                    assert_eq!(id, self.request_id);
                    return d.to_response().ok();
                }
            }
            None
        })
        .expect("an answer");
        match r {
            Response::HistoryRead(r) => *r,
            other => panic!("{other:?}"),
        }
    }

    fn raw(
        &mut self,
        d: ReadRawModifiedDetails,
        nodes: &[(NodeId, ByteStr)],
    ) -> HistoryReadResponse {
        let nodes = nodes
            .iter()
            .map(|(n, cp)| HistoryReadValueId {
                node_id: n.clone(),
                continuation_point: cp.clone(),
                ..Default::default()
            })
            .collect();
        let req = self.request(ExtensionObject::from_struct(&d), nodes);
        self.send(req)
    }
}

type ByteStr = uaring_core::types::ByteString;

fn values(r: &HistoryReadResult) -> Vec<f64> {
    let data: HistoryData = r
        .history_data
        .decode_as(DecodeLimits::default())
        .expect("HistoryData")
        .unwrap();
    data.data_values
        .iter()
        .map(|v| match v.value {
            Variant::Double(x) => x,
            ref o => panic!("{o:?}"),
        })
        .collect()
}

fn raw(start: i64, end: i64, n: u32) -> ReadRawModifiedDetails {
    ReadRawModifiedDetails {
        is_read_modified: false,
        start_time: at(start),
        end_time: at(end),
        num_values_per_node: n,
        return_bounds: false,
    }
}

#[test]
fn a_raw_read_is_answered_from_the_store_with_continuation_points_until_done() {
    let mut c = Client::new(server(ServerConfig::default(), true));
    let d = raw(10, 39, 12);
    let r = c.raw(d.clone(), &[(temp(), ByteStr::null())]);
    assert_eq!(r.results[0].status_code, StatusCode::Good);
    assert_eq!(
        values(&r.results[0]),
        (10..22).map(|i| i as f64).collect::<Vec<_>>()
    );
    let cp = r.results[0].continuation_point.clone();
    assert!(!cp.is_null(), "more to come");
    assert_eq!(
        cp.as_bytes().len(),
        16,
        "the server's id, not the store's token"
    );
    let r = c.raw(d.clone(), &[(temp(), cp.clone())]);
    assert_eq!(
        values(&r.results[0]),
        (22..34).map(|i| i as f64).collect::<Vec<_>>()
    );
    let cp2 = r.results[0].continuation_point.clone();
    // A used continuation point is gone.
    let again = c.raw(d.clone(), &[(temp(), cp)]);
    assert_eq!(
        again.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
    let r = c.raw(d, &[(temp(), cp2)]);
    assert_eq!(
        values(&r.results[0]),
        (34..40).map(|i| i as f64).collect::<Vec<_>>()
    );
    assert!(r.results[0].continuation_point.is_null(), "done");
    // Reverse order: end before start.
    let r = c.raw(raw(39, 30, 0), &[(temp(), ByteStr::null())]);
    assert_eq!(
        values(&r.results[0]),
        (30..40).rev().map(|i| i as f64).collect::<Vec<_>>()
    );
}

#[test]
fn each_node_gets_its_own_status_and_the_request_its_service_result() {
    let mut c = Client::new(server(ServerConfig::default(), true));
    let r = c.raw(
        raw(0, 5, 0),
        &[
            (temp(), ByteStr::null()),
            (live_only(), ByteStr::null()),
            (not_kept(), ByteStr::null()),
            (NodeId::string(2, "Nowhere"), ByteStr::null()),
            (NodeId::ns0(85), ByteStr::null()),
            (temp(), ByteStr::from(&[1u8, 2, 3][..])),
        ],
    );
    let s: Vec<StatusCode> = r.results.iter().map(|r| r.status_code).collect();
    assert_eq!(
        s,
        [
            StatusCode::Good,
            StatusCode::BadNotReadable,
            StatusCode::BadHistoryOperationUnsupported,
            StatusCode::BadNodeIdUnknown,
            StatusCode::BadHistoryOperationUnsupported,
            StatusCode::BadContinuationPointInvalid,
        ]
    );
    assert_eq!(values(&r.results[0]).len(), 6);
    // Only one of the three time-domain parameters: not a valid raw read.
    let only_start = ReadRawModifiedDetails {
        end_time: DateTime::NULL,
        ..raw(0, 0, 0)
    };
    let req = c.request(
        ExtensionObject::from_struct(&only_start),
        vec![HistoryReadValueId {
            node_id: temp(),
            ..Default::default()
        }],
    );
    let ch = c.h.channel;
    let r = c.h.call_on(ch, req);
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadInvalidTimestampArgument)
    );
    // Neither timestamp, null details, modified reads, nothing to do.
    let mut req = c.request(
        ExtensionObject::from_struct(&raw(0, 5, 0)),
        vec![HistoryReadValueId {
            node_id: temp(),
            ..Default::default()
        }],
    );
    if let Request::HistoryRead(r) = &mut req {
        r.timestamps_to_return = TimestampsToReturn::Neither;
    }
    assert_eq!(
        fault_status(&c.h.call_on(ch, req)),
        Some(StatusCode::BadTimestampsToReturnInvalid)
    );
    let req = c.request(
        ExtensionObject::null(),
        vec![HistoryReadValueId {
            node_id: temp(),
            ..Default::default()
        }],
    );
    assert_eq!(
        fault_status(&c.h.call_on(ch, req)),
        Some(StatusCode::BadHistoryOperationInvalid)
    );
    let req = c.request(ExtensionObject::from_struct(&raw(0, 5, 0)), vec![]);
    assert_eq!(
        fault_status(&c.h.call_on(ch, req)),
        Some(StatusCode::BadNothingToDo)
    );
    let modified = ReadRawModifiedDetails {
        is_read_modified: true,
        ..raw(0, 5, 0)
    };
    let r = c.raw(modified, &[(temp(), ByteStr::null())]);
    assert_eq!(
        r.results[0].status_code,
        StatusCode::BadHistoryOperationUnsupported
    );
}

#[test]
fn continuation_points_are_bounded_per_session_tied_to_their_details_and_released() {
    let mut config = ServerConfig::default();
    config.operation_limits.max_history_continuation_points = 2;
    let memory = store();
    let mut c = Client::new(server_on(config, Some(memory.clone())));
    let d = raw(0, 99, 5);
    let r = c.raw(
        d.clone(),
        &[
            (temp(), ByteStr::null()),
            (temp(), ByteStr::null()),
            (temp(), ByteStr::null()),
        ],
    );
    let s: Vec<StatusCode> = r.results.iter().map(|r| r.status_code).collect();
    assert_eq!(
        s,
        [
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadNoContinuationPoints
        ],
        "two points at most; the third operation's data is dropped with its status"
    );
    assert!(r.results[2].history_data.is_null());
    // The store's point for the third will not be used: it is told (its token: resume at 5).
    let resume_at_5 = (temp(), 5u64.to_le_bytes().to_vec());
    assert_eq!(*memory.released.lock().unwrap(), vec![resume_at_5.clone()]);
    let cp0 = r.results[0].continuation_point.clone();
    let cp1 = r.results[1].continuation_point.clone();
    // Another details with the same point: refused (and the point is used up, the store
    // told).
    let r = c.raw(raw(0, 50, 5), &[(temp(), cp0)]);
    assert_eq!(
        r.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
    assert_eq!(memory.released.lock().unwrap().len(), 2);
    // Release: nothing is read, the point is gone.
    let mut req = c.request(
        ExtensionObject::from_struct(&d),
        vec![HistoryReadValueId {
            node_id: temp(),
            continuation_point: cp1.clone(),
            ..Default::default()
        }],
    );
    if let Request::HistoryRead(r) = &mut req {
        r.release_continuation_points = true;
    }
    let r = c.send(req);
    assert_eq!(r.results[0].status_code, StatusCode::Good);
    assert!(r.results[0].history_data.is_null());
    // The store is told, with the token it gave (the second operation's: resume at 5).
    assert_eq!(*memory.released.lock().unwrap(), vec![resume_at_5; 3]);
    let r = c.raw(d, &[(temp(), cp1)]);
    assert_eq!(
        r.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
}

/// A session that ends holding continuation points gives their tokens back to the store
/// (a gateway's store releases them on the server it forwarded the reads to, whose own
/// limit would otherwise fill).
#[test]
fn a_closed_sessions_continuation_points_go_back_to_the_store() {
    let memory = store();
    let mut c = Client::new(server_on(ServerConfig::default(), Some(memory.clone())));
    let r = c.raw(
        raw(0, 99, 5),
        &[(temp(), ByteStr::null()), (temp(), ByteStr::null())],
    );
    assert!(r
        .results
        .iter()
        .all(|r| r.status_code == StatusCode::Good && !r.continuation_point.as_bytes().is_empty()));
    // A read that finishes leaves no point behind.
    let r = c.raw(raw(0, 3, 0), &[(temp(), ByteStr::null())]);
    assert!(r.results[0].continuation_point.as_bytes().is_empty());
    assert!(memory.released.lock().unwrap().is_empty());
    let hd = c.h.header(&c.token);
    let r =
        c.h.call(Request::CloseSession(Box::new(CloseSessionRequest {
            request_header: hd,
            delete_subscriptions: true,
        })));
    assert!(matches!(r, Response::CloseSession(_)), "{r:?}");
    assert_eq!(
        *memory.released.lock().unwrap(),
        vec![(temp(), 5u64.to_le_bytes().to_vec()); 2]
    );
}

#[test]
fn without_a_store_history_read_is_unsupported() {
    let mut c = Client::new(server(ServerConfig::default(), false));
    let req = c.request(
        ExtensionObject::from_struct(&raw(0, 5, 0)),
        vec![HistoryReadValueId {
            node_id: temp(),
            ..Default::default()
        }],
    );
    let ch = c.h.channel;
    assert_eq!(
        fault_status(&c.h.call_on(ch, req)),
        Some(StatusCode::BadServiceUnsupported)
    );
}

#[test]
fn the_history_capabilities_say_what_the_store_does_and_are_absent_without_one() {
    let read = |history: bool, id: u32| {
        let mut c = Client::new(server(ServerConfig::default(), history));
        let token = c.token.clone();
        let req = c.h.read_request(&token, NodeId::ns0(id));
        match c.h.call(req) {
            Response::Read(r) => r.results[0].clone(),
            other => panic!("{other:?}"),
        }
    };
    use uaring_core::generated::node_ids as n;
    let access = read(
        true,
        n::HistoryServerCapabilities_AccessHistoryDataCapability,
    );
    assert_eq!(access.value, Variant::Boolean(true));
    let insert = read(true, n::HistoryServerCapabilities_InsertDataCapability);
    assert_eq!(
        insert.value,
        Variant::Boolean(false),
        "HistoryUpdate is not served"
    );
    let max = read(true, n::HistoryServerCapabilities_MaxReturnDataValues);
    assert_eq!(max.value, Variant::UInt32(100_000));
    let nodes = read(
        true,
        n::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData,
    );
    assert_eq!(nodes.value, Variant::UInt32(1_000));
    let cps = read(
        true,
        n::Server_ServerCapabilities_MaxHistoryContinuationPoints,
    );
    assert_eq!(
        cps.value,
        Variant::UInt16(
            ServerConfig::default()
                .operation_limits
                .max_history_continuation_points
        )
    );
    let without = read(
        false,
        n::HistoryServerCapabilities_AccessHistoryDataCapability,
    );
    assert_eq!(without.status, Some(StatusCode::BadNodeIdUnknown));
}
