//! Requests that wait for the application: a Read of a Variable with an asynchronous source,
//! a Write through an asynchronous write hook, a Call of a deferred method, and sampling of
//! an asynchronous source — answered from another thread, timed out, bounded.

mod dispatch_util;

use std::sync::{Arc, Mutex};

use dispatch_util::*;
use uaring_core::address_space::app::{
    AppMethod, ArgDef, AsyncCall, AsyncRead, AsyncSource, AsyncWrite, AsyncWriteHook, MethodHandler,
};
use uaring_core::address_space::build::make;
use uaring_core::address_space::ValueSource;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::shared::ServerShared;
use uaring_core::{
    BuiltinType, DataValue, DecodeLimits, NodeId, QualifiedName, StatusCode, Variant,
};

#[derive(Default)]
struct App {
    reads: Mutex<Vec<AsyncRead>>,
    writes: Mutex<Vec<(f64, AsyncWrite)>>,
    calls: Mutex<Vec<AsyncCall>>,
}

fn device() -> NodeId {
    NodeId::string(2, "Device")
}
fn slow_device() -> NodeId {
    NodeId::string(2, "SlowDevice")
}
fn setpoint() -> NodeId {
    NodeId::string(2, "Setpoint")
}
fn calibrate() -> NodeId {
    NodeId::string(2, "Calibrate")
}

fn server(app: &Arc<App>) -> Arc<ServerShared> {
    let a = app.clone();
    let b = app.clone();
    let c = app.clone();
    content::new_and(ServerConfig::default(), start(), move |bld| {
        let ns = bld.add_namespace("urn:test:async")?;
        assert_eq!(ns, 2);
        let objects = Some((NodeId::ns0(85), 35));
        let a1 = a.clone();
        let source = AsyncSource::new(
            Arc::new(move |r: AsyncRead| a1.reads.lock().unwrap().push(r)),
            2,
            500,
        );
        bld.add(make::make_variable(
            device(),
            QualifiedName::new(ns, "Device"),
            NodeId::ns0(11),
            -1,
            vec![],
            ValueSource::Async(source),
            make::READ_ONLY,
            0.0,
            objects.clone(),
        ))?;
        let a2 = a.clone();
        let slow = AsyncSource::new(
            Arc::new(move |r: AsyncRead| a2.reads.lock().unwrap().push(r)),
            8,
            100,
        );
        bld.add(make::make_variable(
            slow_device(),
            QualifiedName::new(ns, "SlowDevice"),
            NodeId::ns0(11),
            -1,
            vec![],
            ValueSource::Async(slow),
            make::READ_ONLY,
            0.0,
            objects.clone(),
        ))?;
        bld.add(make::variable(
            setpoint(),
            QualifiedName::new(ns, "Setpoint"),
            NodeId::ns0(11),
            -1,
            vec![],
            DataValue::new(Variant::Double(1.0)),
            make::WRITABLE,
            0.0,
            objects.clone(),
        ))?;
        let b1 = b.clone();
        bld.set_async_write_hook(
            setpoint(),
            AsyncWriteHook {
                start: Arc::new(move |w, done| {
                    let Variant::Double(x) = w.value.value else {
                        panic!()
                    };
                    b1.writes.lock().unwrap().push((x, done));
                }),
                timeout_ms: 500,
            },
        );
        let folder = make::folder(
            NodeId::string(ns, "Tools"),
            QualifiedName::new(ns, "Tools"),
            NodeId::ns0(85),
        );
        bld.add(folder)?;
        let mut m = uaring_core::address_space::Node {
            node_id: calibrate(),
            node_class: uaring_core::address_space::NodeClass::Method,
            browse_name: QualifiedName::new(ns, "Calibrate"),
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
            target: uaring_core::ExpandedNodeId::local(NodeId::string(ns, "Tools")),
        });
        bld.add(m)?;
        let c1 = c.clone();
        bld.set_method(
            calibrate(),
            AppMethod {
                inputs: vec![ArgDef::scalar("x", BuiltinType::Double)],
                outputs: vec![ArgDef::scalar("y", BuiltinType::Double)],
                needs_write: false,
                handler: MethodHandler::Deferred {
                    start: Arc::new(move |call| c1.calls.lock().unwrap().push(call)),
                    timeout_ms: 500,
                },
            },
        );
        Ok(())
    })
    .unwrap()
}

struct Client {
    h: Harness,
    token: NodeId,
    request_id: u32,
}

impl Client {
    fn new(shared: &Arc<ServerShared>) -> Client {
        let mut h = Harness::on_shared(shared.clone(), 0);
        let token = h.open_session();
        Client {
            h,
            token,
            request_id: 10,
        }
    }

    /// Dispatches with a request id; `Some` = answered at once.
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

    fn read(&mut self, nodes: &[NodeId]) -> Option<Response> {
        let hd = self.h.header(&self.token);
        self.send(Request::Read(Box::new(ReadRequest {
            request_header: hd,
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: nodes
                .iter()
                .map(|n| ReadValueId {
                    node_id: n.clone(),
                    attribute_id: 13,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })))
    }

    /// Runs the shard's timers after `ms` and returns the deferred responses (request id, response).
    fn later(&mut self, ms: u64) -> Vec<(u32, Response)> {
        self.h.advance_ms(ms);
        let now = self.h.now;
        self.h.state.on_timer(now);
        let mut v = Vec::new();
        let ch = self.h.channel;
        self.h.state.take_deferred(ch, &mut v);
        v.into_iter()
            .map(|(id, d)| (id, d.to_response().unwrap()))
            .collect()
    }
}

fn read_results(r: &Response) -> Vec<DataValue> {
    match r {
        Response::Read(r) => r.results.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_read_of_an_async_source_is_answered_when_the_application_answers_from_another_thread() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    assert!(
        c.read(&[device(), NodeId::numeric(1, 1007)]).is_none(),
        "deferred"
    );
    let id = c.request_id;
    // Meanwhile the shard answers other requests at once.
    let other = c
        .read(&[NodeId::numeric(1, 1003)])
        .expect("a Read of a stored value is answered at once");
    assert_eq!(
        read_results(&other)[0].value,
        Variant::Int32(2),
        "BenchmarkValue2"
    );
    assert!(c.later(1).is_empty(), "nothing until the device answers");
    let r = app.reads.lock().unwrap().pop().unwrap();
    assert_eq!(r.node_id, device());
    std::thread::spawn(move || r.complete(DataValue::new(Variant::Double(42.5))))
        .join()
        .unwrap();
    assert!(
        c.h.state.next_deadline() == Some(0),
        "a completion makes the shard run its timers at once"
    );
    let out = c.later(1);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].0, id, "answers the deferred request id");
    let res = read_results(&out[0].1);
    assert_eq!(res[0].value, Variant::Double(42.5));
    assert!(res[0].server_timestamp.is_some());
    assert_eq!(
        res[1].value,
        Variant::Int32(6),
        "the stored value read at once goes with it"
    );
    assert_eq!(c.h.state.deferred_requests(), 0);
}

#[test]
fn an_unanswered_read_times_out_and_a_late_answer_is_dropped() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    assert!(c.read(&[slow_device()]).is_none());
    assert!(c.later(50).is_empty());
    let out = c.later(60);
    assert_eq!(
        read_results(&out[0].1)[0].status,
        Some(StatusCode::BadTimeout)
    );
    // The application answers after all: nothing more goes out.
    app.reads
        .lock()
        .unwrap()
        .pop()
        .unwrap()
        .complete(DataValue::new(Variant::Double(1.0)));
    assert!(c.later(1).is_empty());
}

#[test]
fn a_dropped_handle_answers_bad_internal_error_and_in_flight_is_bounded() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    // max_in_flight 2: the third Read of Device at once is refused for that operation.
    assert!(c.read(&[device()]).is_none());
    assert!(c.read(&[device()]).is_none());
    let third = c.read(&[device()]).expect("refused at once");
    assert_eq!(
        read_results(&third)[0].status,
        Some(StatusCode::BadTooManyOperations)
    );
    let mut reads = std::mem::take(&mut *app.reads.lock().unwrap());
    drop(reads.pop());
    reads.pop().unwrap().fail(StatusCode::BadCommunicationError);
    let out = c.later(1);
    let mut statuses: Vec<_> = out.iter().map(|(_, r)| read_results(r)[0].status).collect();
    statuses.sort_by_key(|s| s.map(|s| s.0));
    assert_eq!(
        statuses,
        vec![
            Some(StatusCode::BadInternalError),
            Some(StatusCode::BadCommunicationError)
        ]
    );
    // Both slots are free again.
    assert!(c.read(&[device()]).is_none());
}

#[test]
fn an_async_write_hook_stores_on_good_and_answers_its_status() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    let write = |c: &mut Client, v: f64| {
        let hd = c.h.header(&c.token);
        c.send(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: setpoint(),
                attribute_id: 13,
                value: DataValue::new(Variant::Double(v)),
                ..Default::default()
            }],
        })))
    };
    assert!(write(&mut c, 5.0).is_none());
    let (x, done) = app.writes.lock().unwrap().pop().unwrap();
    assert_eq!(x, 5.0);
    let before = read_results(&c.read(&[setpoint()]).unwrap())[0]
        .value
        .clone();
    assert_eq!(
        before,
        Variant::Double(1.0),
        "not stored before the hook answers"
    );
    done.complete(StatusCode::Good);
    let out = c.later(1);
    let Response::Write(w) = &out[0].1 else {
        panic!()
    };
    assert_eq!(w.results, vec![StatusCode::Good]);
    assert_eq!(
        read_results(&c.read(&[setpoint()]).unwrap())[0].value,
        Variant::Double(5.0)
    );
    assert!(write(&mut c, -1.0).is_none());
    app.writes
        .lock()
        .unwrap()
        .pop()
        .unwrap()
        .1
        .complete(StatusCode::BadOutOfRange);
    let out = c.later(1);
    let Response::Write(w) = &out[0].1 else {
        panic!()
    };
    assert_eq!(w.results, vec![StatusCode::BadOutOfRange]);
    assert_eq!(
        read_results(&c.read(&[setpoint()]).unwrap())[0].value,
        Variant::Double(5.0)
    );
}

#[test]
fn a_deferred_method_is_answered_later_with_checked_outputs() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    let call = |c: &mut Client, args: Vec<Variant>| {
        let hd = c.h.header(&c.token);
        c.send(Request::Call(Box::new(CallRequest {
            request_header: hd,
            methods_to_call: vec![CallMethodRequest {
                object_id: NodeId::string(2, "Tools"),
                method_id: calibrate(),
                input_arguments: args,
            }],
        })))
    };
    // The server checks the arguments before anything is deferred.
    let Some(Response::Call(r)) = call(&mut c, vec![Variant::Int32(1)]) else {
        panic!()
    };
    assert_eq!(r.results[0].status_code, StatusCode::BadInvalidArgument);
    assert!(call(&mut c, vec![Variant::Double(2.0)]).is_none());
    let pending = app.calls.lock().unwrap().pop().unwrap();
    assert_eq!(pending.inputs, vec![Variant::Double(2.0)]);
    std::thread::spawn(move || pending.complete(Ok(vec![Variant::Double(4.0)])))
        .join()
        .unwrap();
    let out = c.later(1);
    let Response::Call(r) = &out[0].1 else {
        panic!()
    };
    assert_eq!(r.results[0].status_code, StatusCode::Good);
    assert_eq!(r.results[0].output_arguments, vec![Variant::Double(4.0)]);
    // Outputs other than declared are BadInternalError.
    assert!(call(&mut c, vec![Variant::Double(2.0)]).is_none());
    app.calls
        .lock()
        .unwrap()
        .pop()
        .unwrap()
        .complete(Ok(vec![Variant::Int32(4)]));
    let out = c.later(1);
    let Response::Call(r) = &out[0].1 else {
        panic!()
    };
    assert_eq!(r.results[0].status_code, StatusCode::BadInternalError);
    assert!(r.results[0].output_arguments.is_empty());
}

#[test]
fn sampling_an_async_source_offers_each_answer_to_its_items() {
    let app = Arc::new(App::default());
    let shared = server(&app);
    let mut c = Client::new(&shared);
    let hd = c.h.header(&c.token);
    let Some(Response::CreateSubscription(s)) = c.send(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            request_header: hd,
            requested_publishing_interval: 100.0,
            requested_lifetime_count: 100,
            requested_max_keep_alive_count: 10,
            publishing_enabled: true,
            ..Default::default()
        },
    ))) else {
        panic!()
    };
    let hd = c.h.header(&c.token);
    let Some(Response::CreateMonitoredItems(m)) = c.send(Request::CreateMonitoredItems(Box::new(
        CreateMonitoredItemsRequest {
            request_header: hd,
            subscription_id: s.subscription_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: vec![MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: device(),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: 1,
                    sampling_interval: 0.0,
                    queue_size: 10,
                    ..Default::default()
                },
            }],
        },
    ))) else {
        panic!()
    };
    assert!(m.results[0].status_code.is_good());
    assert!(
        m.results[0].revised_sampling_interval > 0.0,
        "not exception-based: the source is asked on a timer"
    );
    let mut values = Vec::new();
    for k in 0..5 {
        c.later(20);
        // One sample at a time: answer whatever was asked.
        for r in std::mem::take(&mut *app.reads.lock().unwrap()) {
            r.complete(DataValue::new(Variant::Double(k as f64)));
        }
    }
    let hd = c.h.header(&c.token);
    assert!(c
        .send(Request::Publish(Box::new(PublishRequest {
            request_header: hd,
            subscription_acknowledgements: vec![]
        })))
        .is_none());
    for (_, r) in c.later(120) {
        let Response::Publish(p) = r else { continue };
        for eo in &p.notification_message.notification_data {
            if let Some(Ok(d)) = eo.decode_as::<DataChangeNotification>(DecodeLimits::default()) {
                values.extend(d.monitored_items.into_iter().map(|m| m.value.value));
            }
        }
    }
    let doubles: Vec<f64> = values
        .iter()
        .filter_map(|v| {
            if let Variant::Double(x) = v {
                Some(*x)
            } else {
                None
            }
        })
        .collect();
    assert!(
        doubles.len() >= 3,
        "the answers are sampled values: {values:?}"
    );
    assert!(
        doubles.windows(2).all(|w| w[0] < w[1]),
        "in order: {doubles:?}"
    );
}
