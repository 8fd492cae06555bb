//! What core gives a gateway: the demand signal (the shard tells a sink, per marked node,
//! what its items there ask for, whenever that changes, and offers it again when the sink was
//! full), read-through Variables (a Read the cell does not meet by maxAge is answered by the
//! source, a Write through its hook leaves the cell to whoever keeps it), and forwarded
//! methods (arguments and outputs as the other server has them), and condition methods
//! (Acknowledge …) of another server's condition forwarded through the method registered on
//! the condition's node.

mod dispatch_util;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use dispatch_util::*;
use uaring_core::address_space::app::{
    AppMethod, AsyncCall, AsyncRead, AsyncSource, AsyncWrite, AsyncWriteHook, MethodHandler,
    ReadThrough,
};
use uaring_core::address_space::build::make;
use uaring_core::address_space::change::{Demand, DemandSink};
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::shared::ServerShared;
use uaring_core::{DataValue, NodeId, QualifiedName, StatusCode, Variant};

#[derive(Default)]
struct Sink {
    /// (shard, node, demand) as told.
    got: Mutex<Vec<(usize, u32, Demand)>>,
    full: AtomicBool,
}

impl DemandSink for Sink {
    fn demand(&self, shard: usize, node_index: u32, _generation: u32, demand: Demand) -> bool {
        if self.full.load(Ordering::SeqCst) {
            return false;
        }
        self.got.lock().unwrap().push((shard, node_index, demand));
        true
    }
}

#[derive(Default)]
struct Remote {
    reads: Mutex<Vec<AsyncRead>>,
    writes: Mutex<Vec<AsyncWrite>>,
    /// Who each Write came from, as its hook was told: (user, roles).
    writers: Mutex<Vec<(String, uaring_core::roles::Roles)>>,
    calls: Mutex<Vec<AsyncCall>>,
}

fn mirrored() -> NodeId {
    NodeId::string(2, "Mirrored")
}
fn forwarded() -> NodeId {
    NodeId::string(2, "Forwarded")
}

struct Rig {
    shared: Arc<ServerShared>,
    h: Harness,
    token: NodeId,
    request_id: u32,
    remote: Arc<Remote>,
    fresh: Arc<AtomicU64>,
}

impl Rig {
    fn new() -> Rig {
        let remote = Arc::new(Remote::default());
        let fresh = Arc::new(AtomicU64::new(0));
        let (r1, r2, r3, f1) = (
            remote.clone(),
            remote.clone(),
            remote.clone(),
            fresh.clone(),
        );
        let shared = content::new_and(ServerConfig::default(), start(), move |b| {
            let ns = b.add_namespace("urn:test:gateway")?;
            b.add(make::variable(
                mirrored(),
                QualifiedName::new(ns, "Mirrored"),
                NodeId::ns0(11),
                -1,
                vec![],
                DataValue::new(Variant::Double(1.0)),
                make::WRITABLE,
                0.0,
                Some((NodeId::ns0(85), 35)),
            ))?;
            let r1 = r1.clone();
            let f1 = f1.clone();
            b.set_read_through(
                mirrored(),
                ReadThrough {
                    source: AsyncSource::new(
                        Arc::new(move |r| r1.reads.lock().unwrap().push(r)),
                        8,
                        500,
                    ),
                    fresh_ns: f1,
                },
            );
            let r2 = r2.clone();
            b.set_async_write_hook(
                mirrored(),
                AsyncWriteHook {
                    start: Arc::new(move |info, w| {
                        r2.writers
                            .lock()
                            .unwrap()
                            .push((info.user.to_string(), info.roles));
                        r2.writes.lock().unwrap().push(w)
                    }),
                    timeout_ms: 500,
                },
            );
            let mut m = uaring_core::address_space::Node {
                node_id: forwarded(),
                node_class: uaring_core::address_space::NodeClass::Method,
                browse_name: QualifiedName::new(ns, "Forwarded"),
                display_name: Default::default(),
                description: Default::default(),
                write_mask: 0,
                user_write_mask: 0,
                references: vec![].into(),
                generation: 0,
                attributes: uaring_core::address_space::ClassAttributes::Method {
                    executable: true,
                    user_executable: true,
                },
            };
            m.references.push(uaring_core::address_space::Reference {
                reference_type: NodeId::ns0(47),
                is_forward: false,
                target: uaring_core::ExpandedNodeId::local(NodeId::ns0(85)),
            });
            b.add(m)?;
            let r3 = r3.clone();
            let r5 = r3.clone();
            b.set_method(
                forwarded(),
                AppMethod {
                    inputs: Vec::new(),
                    outputs: Vec::new(),
                    needs_write: false,
                    handler: MethodHandler::Forward {
                        start: Arc::new(move |c| r5.calls.lock().unwrap().push(c)),
                        timeout_ms: 500,
                    },
                },
            );
            // Two AlarmConditionType Objects no condition of this server: one with a
            // forwarder on its own NodeId (a mirrored condition), one without.
            for (name, forward) in [("Alarm", true), ("Stray", false)] {
                let id = NodeId::string(2, name);
                let mut o = make::folder(id.clone(), QualifiedName::new(ns, name), NodeId::ns0(85));
                o.references = vec![
                    uaring_core::address_space::Reference {
                        reference_type: NodeId::ns0(40),
                        is_forward: true,
                        target: uaring_core::ExpandedNodeId::local(NodeId::ns0(2915)),
                    },
                    uaring_core::address_space::Reference {
                        reference_type: NodeId::ns0(35),
                        is_forward: false,
                        target: uaring_core::ExpandedNodeId::local(NodeId::ns0(85)),
                    },
                ]
                .into();
                b.add(o)?;
                if forward {
                    let r4 = r3.clone();
                    b.set_method(
                        id,
                        AppMethod {
                            inputs: Vec::new(),
                            outputs: Vec::new(),
                            needs_write: true,
                            handler: MethodHandler::Forward {
                                start: Arc::new(move |c| r4.calls.lock().unwrap().push(c)),
                                timeout_ms: 500,
                            },
                        },
                    );
                }
            }
            Ok(())
        })
        .unwrap();
        let mut h = Harness::on_shared(shared.clone(), 0);
        let token = h.open_session();
        Rig {
            shared,
            h,
            token,
            request_id: 10,
            remote,
            fresh,
        }
    }

    fn send(&mut self, req: Request) -> Option<Response> {
        self.request_id += 1;
        let ch = self.h.channel;
        dispatch_deferrable(
            &mut self.h.state,
            &Harness::ctx(ch),
            req,
            self.request_id,
            self.h.now,
        )
    }

    fn read(&mut self, max_age: f64) -> Option<Response> {
        let hd = self.h.header(&self.token);
        self.send(Request::Read(Box::new(ReadRequest {
            request_header: hd,
            max_age,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: vec![ReadValueId {
                node_id: mirrored(),
                attribute_id: 13,
                ..Default::default()
            }],
        })))
    }

    fn later(&mut self, ms: u64) -> Vec<Response> {
        self.h.advance_ms(ms);
        let now = self.h.now;
        self.h.state.on_timer(now);
        let mut v = Vec::new();
        let ch = self.h.channel;
        self.h.state.take_deferred(ch, &mut v);
        v.into_iter()
            .map(|(_, d)| d.to_response().unwrap())
            .collect()
    }

    fn subscription(&mut self) -> u32 {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 100,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            },
        ))) {
            Response::CreateSubscription(r) => r.subscription_id,
            other => panic!("{other:?}"),
        }
    }

    fn item(&mut self, sub: u32, sampling: f64, queue: u32) -> u32 {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![MonitoredItemCreateRequest {
                    item_to_monitor: ReadValueId {
                        node_id: mirrored(),
                        attribute_id: 13,
                        ..Default::default()
                    },
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: 1,
                        sampling_interval: sampling,
                        queue_size: queue,
                        discard_oldest: true,
                        ..Default::default()
                    },
                }],
            },
        ))) {
            Response::CreateMonitoredItems(r) => r.results[0].monitored_item_id,
            other => panic!("{other:?}"),
        }
    }

    fn delete(&mut self, sub: u32, item: u32) {
        let hd = self.h.header(&self.token);
        let r = self.h.call(Request::DeleteMonitoredItems(Box::new(
            DeleteMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                monitored_item_ids: vec![item],
            },
        )));
        assert!(matches!(r, Response::DeleteMonitoredItems(_)), "{r:?}");
    }
}

fn value(r: &Response) -> DataValue {
    match r {
        Response::Read(r) => r.results[0].clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_demand_signal_tells_the_fastest_interval_and_the_deepest_queue_and_when_items_go() {
    let mut rig = Rig::new();
    let sink = Arc::new(Sink::default());
    let hub = rig.shared.address_space.changes().clone();
    assert!(hub.set_demand_sink(sink.clone()));
    assert!(!hub.set_demand_sink(sink.clone()), "one sink per hub");
    let index = rig.shared.address_space.node_index(&mirrored()).unwrap();
    let sub = rig.subscription();
    // Not marked yet: nothing is told.
    let early = rig.item(sub, 250.0, 1);
    assert!(sink.got.lock().unwrap().is_empty());
    rig.delete(sub, early);
    assert!(hub.track_demand(index, true));
    let a = rig.item(sub, 250.0, 1);
    let b = rig.item(sub, 0.0, 5);
    let c = rig.item(sub, 100.0, 2);
    let got: Vec<Demand> = sink.got.lock().unwrap().iter().map(|g| g.2).collect();
    let d = |items, sampling_ms, queue_size| Demand {
        items,
        sampling_ms,
        queue_size,
    };
    assert_eq!(
        got,
        vec![d(1, 250.0, 1), d(2, 0.0, 5), d(3, 0.0, 5)],
        "exception-based is 0 ms"
    );
    assert!(sink
        .got
        .lock()
        .unwrap()
        .iter()
        .all(|g| g.0 == 0 && g.1 == index));
    sink.got.lock().unwrap().clear();
    rig.delete(sub, b);
    assert_eq!(sink.got.lock().unwrap().last().unwrap().2, d(2, 100.0, 2));
    // A full sink: the shard keeps the node and offers its newest demand later.
    sink.full.store(true, Ordering::SeqCst);
    rig.delete(sub, c);
    rig.delete(sub, a);
    let told = sink.got.lock().unwrap().len();
    assert!(rig.h.state.next_deadline().is_some(), "a retry is due");
    sink.full.store(false, Ordering::SeqCst);
    rig.later(20);
    let got = sink.got.lock().unwrap();
    assert_eq!(got.len(), told + 1, "offered once again, its state then");
    assert_eq!(got.last().unwrap().2, d(0, 0.0, 0), "no item is left");
}

#[test]
fn a_read_through_read_goes_to_the_source_when_the_cell_does_not_meet_max_age() {
    let mut rig = Rig::new();
    // Never fresh: every Read goes.
    assert!(rig.read(60_000.0).is_none(), "deferred");
    let r = rig.remote.reads.lock().unwrap().pop().unwrap();
    assert_eq!(r.node_id, mirrored());
    r.complete(DataValue::new(Variant::Double(7.0)));
    assert_eq!(value(&rig.later(1)[0]).value, Variant::Double(7.0));
    // Fresh now: within maxAge the cell answers at once, past it the source.
    rig.fresh.store(rig.h.now.mono_ns, Ordering::SeqCst);
    rig.h.advance_ms(100);
    let at_once = rig.read(1_000.0).expect("from the cell");
    assert_eq!(value(&at_once).value, Variant::Double(1.0));
    assert!(rig.read(50.0).is_none(), "older than 50 ms: the source");
    // Kept current (a subscription feeds it): the cell, whatever the age; maxAge 0 goes.
    rig.fresh.store(u64::MAX, Ordering::SeqCst);
    rig.h.advance_ms(10_000);
    assert!(rig.read(1.0).is_some());
    assert!(rig.read(0.0).is_none(), "maxAge 0 always asks the source");
    assert_eq!(rig.remote.reads.lock().unwrap().len(), 2);
}

#[test]
fn a_write_through_the_hook_of_a_read_through_variable_leaves_the_cell_to_its_keeper() {
    let mut rig = Rig::new();
    let hd = rig.h.header(&rig.token);
    assert!(rig
        .send(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: mirrored(),
                attribute_id: 13,
                value: DataValue::new(Variant::Double(9.0)),
                ..Default::default()
            }],
        })))
        .is_none());
    // The hook is told who writes (a gateway maps the caller to an identity there): an
    // anonymous session, its roles.
    let (user, roles) = rig.remote.writers.lock().unwrap().pop().unwrap();
    assert_eq!(user, "");
    assert!(
        roles.contains(uaring_core::roles::WellKnownRole::Anonymous),
        "{roles:?}"
    );
    assert!(!roles.contains(uaring_core::roles::WellKnownRole::AuthenticatedUser));
    rig.remote
        .writes
        .lock()
        .unwrap()
        .pop()
        .unwrap()
        .complete(StatusCode::Good);
    match &rig.later(1)[0] {
        Response::Write(w) => assert_eq!(w.results, vec![StatusCode::Good]),
        other => panic!("{other:?}"),
    }
    let index = rig.shared.address_space.node_index(&mirrored()).unwrap();
    let cell = rig
        .shared
        .address_space
        .node_at(index)
        .and_then(|n| n.value_cell())
        .unwrap()
        .load();
    assert_eq!(cell.value, Variant::Double(1.0), "not stored here");
}

#[test]
fn a_forwarded_method_passes_any_arguments_and_returns_the_outputs_it_gets() {
    let mut rig = Rig::new();
    let hd = rig.h.header(&rig.token);
    let call = |hd| {
        Request::Call(Box::new(CallRequest {
            request_header: hd,
            methods_to_call: vec![CallMethodRequest {
                object_id: NodeId::ns0(85),
                method_id: forwarded(),
                input_arguments: vec![Variant::String("x".into()), Variant::Int64(3)],
            }],
        }))
    };
    assert!(rig.send(call(hd)).is_none(), "deferred");
    let c = rig.remote.calls.lock().unwrap().pop().unwrap();
    assert_eq!(c.inputs.len(), 2, "no declaration to check them against");
    c.complete(Ok(vec![
        Variant::Boolean(true),
        Variant::Byte(1),
        Variant::Byte(2),
    ]));
    match &rig.later(1)[0] {
        Response::Call(r) => {
            assert_eq!(r.results[0].status_code, StatusCode::Good);
            assert_eq!(r.results[0].output_arguments.len(), 3);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_condition_method_on_another_servers_condition_goes_to_its_forwarder() {
    let mut rig = Rig::new();
    let call = |hd, object: &str| {
        Request::Call(Box::new(CallRequest {
            request_header: hd,
            methods_to_call: vec![CallMethodRequest {
                object_id: NodeId::string(2, object),
                method_id: NodeId::ns0(9111),
                input_arguments: vec![
                    Variant::ByteString(b"event".to_vec().into()),
                    Variant::LocalizedText(Box::new(uaring_core::LocalizedText::text("seen"))),
                ],
            }],
        }))
    };
    let hd = rig.h.header(&rig.token);
    assert!(rig.send(call(hd, "Alarm")).is_none(), "deferred");
    let c = rig.remote.calls.lock().unwrap().pop().unwrap();
    assert_eq!(c.object_id, NodeId::string(2, "Alarm"));
    assert_eq!(c.method_id, NodeId::ns0(9111));
    assert_eq!(c.inputs.len(), 2);
    c.complete(Err(StatusCode::BadEventIdUnknown));
    match &rig.later(1)[0] {
        Response::Call(r) => {
            assert_eq!(r.results[0].status_code, StatusCode::BadEventIdUnknown)
        }
        other => panic!("{other:?}"),
    }
    // No condition here and no forwarder: as before.
    let hd = rig.h.header(&rig.token);
    match rig.send(call(hd, "Stray")) {
        Some(Response::Call(r)) => {
            assert_eq!(r.results[0].status_code, StatusCode::BadNodeIdInvalid)
        }
        other => panic!("{other:?}"),
    }
    assert!(rig.remote.calls.lock().unwrap().is_empty());
}
