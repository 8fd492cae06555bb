//! Subscriptions and monitored items through `dispatch_deferrable`, with time driven by the
//! test: absolute-deadline sampling, shared sources, queues, the publish queue, keep-alive,
//! lifetime, retransmission bounds, MoreNotifications and transfers.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::{DecodeLimits, NodeId, StatusCode, Variant};

struct Sub {
    h: Harness,
    token: NodeId,
    request_id: u32,
}

impl Sub {
    fn new(config: ServerConfig) -> Sub {
        Sub::with_content(config, &content::Content::default())
    }

    fn with_content(config: ServerConfig, c: &content::Content) -> Sub {
        let mut h = Harness::with_content(config, c, 0);
        let token = h.open_session();
        Sub {
            h,
            token,
            request_id: 100,
        }
    }

    fn create(
        &mut self,
        interval: f64,
        keep_alive: u32,
        lifetime: u32,
        max_notifications: u32,
    ) -> CreateSubscriptionResponse {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: interval,
                requested_lifetime_count: lifetime,
                requested_max_keep_alive_count: keep_alive,
                max_notifications_per_publish: max_notifications,
                publishing_enabled: true,
                priority: 0,
            },
        ))) {
            Response::CreateSubscription(r) => *r,
            other => panic!("{other:?}"),
        }
    }

    fn items(&mut self, sub: u32, nodes: &[(NodeId, f64, u32)]) -> Vec<MonitoredItemCreateResult> {
        let hd = self.h.header(&self.token);
        let items = nodes
            .iter()
            .enumerate()
            .map(|(i, (n, sampling, queue))| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: n.clone(),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i as u32 + 1,
                    sampling_interval: *sampling,
                    queue_size: *queue,
                    discard_oldest: true,
                    ..Default::default()
                },
            })
            .collect();
        match self.h.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
            },
        ))) {
            Response::CreateMonitoredItems(r) => r.results,
            other => panic!("{other:?}"),
        }
    }

    /// Sends a Publish; `Some` when it was answered at once (a fault).
    fn publish(&mut self, acks: Vec<SubscriptionAcknowledgement>) -> Option<Response> {
        self.request_id += 1;
        let hd = self.h.header(&self.token);
        let req = Request::Publish(Box::new(PublishRequest {
            request_header: hd,
            subscription_acknowledgements: acks,
        }));
        let ch = self.h.channel;
        dispatch_deferrable(
            &mut self.h.state,
            &Harness::ctx(ch),
            req,
            self.request_id,
            self.h.now,
        )
    }

    /// Runs the shard's timers at every `step_ms` until `ms` passed.
    fn run_ms(&mut self, ms: u64, step_ms: u64) {
        let end = self.h.now.mono_ns + ms * 1_000_000;
        while self.h.now.mono_ns < end {
            self.h.advance_ms(step_ms);
            let now = self.h.now;
            self.h.state.on_timer(now);
        }
    }

    /// Publish responses ready for the channel.
    fn responses(&mut self) -> Vec<PublishResponse> {
        let mut v = Vec::new();
        let ch = self.h.channel;
        self.h.state.take_deferred(ch, &mut v);
        v.into_iter()
            .map(
                |(_, d)| match d.to_response().expect("a decodable response") {
                    Response::Publish(p) => *p,
                    other => panic!("{other:?}"),
                },
            )
            .collect()
    }

    fn write_i32(&mut self, node: NodeId, v: i32) {
        let hd = self.h.header(&self.token);
        let r = self.h.call(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: node,
                attribute_id: 13,
                value: uaring_core::DataValue::new(Variant::Int32(v)),
                ..Default::default()
            }],
        })));
        let Response::Write(w) = r else {
            panic!("{r:?}")
        };
        assert_eq!(w.results[0], StatusCode::Good);
    }
}

fn data_changes(m: &NotificationMessage) -> Vec<MonitoredItemNotification> {
    let mut out = Vec::new();
    for eo in &m.notification_data {
        if let Some(Ok(d)) = eo.decode_as::<DataChangeNotification>(DecodeLimits::default()) {
            out.extend(d.monitored_items);
        }
    }
    out
}

fn status_change(m: &NotificationMessage) -> Option<StatusCode> {
    m.notification_data
        .iter()
        .find_map(|eo| {
            eo.decode_as::<StatusChangeNotification>(DecodeLimits::default())
                .and_then(|r| r.ok())
        })
        .map(|s| s.status)
}

fn counters(n: u32) -> Sub {
    Sub::with_content(ServerConfig::default(), &content::Content::counters(n))
}

#[test]
fn sampling_keeps_absolute_deadlines_and_shares_one_source() {
    let mut s = counters(4);
    let sub = s.create(1000.0, 10, 100, 0).subscription_id;
    // Three items on counter 1 at 10 ms share one sample; one on counter 2 samples alone.
    let r = s.items(
        sub,
        &[
            (NodeId::numeric(1, 1), 10.0, 1),
            (NodeId::numeric(1, 1), 10.0, 1),
            (NodeId::numeric(1, 1), 10.0, 1),
            (NodeId::numeric(1, 2), 10.0, 1),
        ],
    );
    assert!(r
        .iter()
        .all(|x| x.status_code == StatusCode::Good && x.revised_sampling_interval == 10.0));
    // Timer callbacks at jittery 3 ms / 7 ms steps for 2 s: sampling still happens every
    // 10 ms (absolute deadlines, no drift).
    for _ in 0..200 {
        s.run_ms(3, 3);
        s.run_ms(7, 7);
    }
    let st = s.h.state.subscriptions().stats();
    // 2 sources × 200 ticks (+ nothing for the shared items: they fan out).
    assert!((398..=402).contains(&st.samples), "samples {}", st.samples);
    assert_eq!(st.missed_ticks, 0);
    assert!(s.publish(vec![]).is_none());
    let resp = s.responses();
    assert_eq!(resp.len(), 1);
    let n = data_changes(&resp[0].notification_message);
    assert_eq!(n.len(), 4, "queue of 1: the latest of each item");
    let Variant::UInt64(c1) = n[0].value.value else {
        panic!()
    };
    // The initial read of each of the three items counted once, then one per tick.
    assert!((200..=204).contains(&c1), "counter 1 = {c1}");
    assert_eq!(n[0].value.value, n[1].value.value);
    assert_eq!(n[1].value.value, n[2].value.value);
}

#[test]
fn late_timer_skips_missed_ticks_without_bursting() {
    let mut s = counters(1);
    let sub = s.create(1000.0, 10, 100, 0).subscription_id;
    s.items(sub, &[(NodeId::numeric(1, 1), 10.0, 1)]);
    s.run_ms(100, 10);
    let before = s.h.state.subscriptions().stats().samples;
    // The shard stalls for 95 ms: nine ticks (110..190 ms) were due; one catch-up sample is
    // taken, the other eight are counted as missed, and the next tick stays on the 10 ms grid.
    s.run_ms(95, 95);
    let st = s.h.state.subscriptions().stats();
    assert_eq!(st.samples - before, 1);
    assert_eq!(st.missed_ticks, 8);
    s.run_ms(5, 5);
    assert_eq!(
        s.h.state.subscriptions().stats().samples - before,
        2,
        "the tick at 200 ms"
    );
}

#[test]
fn keep_alive_lifetime_and_publish_queue() {
    let mut s = Sub::new(ServerConfig::default());
    let r = s.create(100.0, 3, 9, 0);
    assert_eq!(
        (r.revised_max_keep_alive_count, r.revised_lifetime_count),
        (3, 9)
    );
    let sub = r.subscription_id;
    // The first cycle sends a keep-alive at once; then one every third cycle.
    assert!(s.publish(vec![]).is_none());
    assert!(s.publish(vec![]).is_none());
    s.run_ms(100, 10);
    let k = s.responses();
    assert_eq!(k.len(), 1);
    assert!(k[0].notification_message.notification_data.is_empty());
    assert_eq!(k[0].notification_message.sequence_number, 1);
    s.run_ms(200, 10);
    assert!(s.responses().is_empty());
    s.run_ms(100, 10);
    assert_eq!(s.responses().len(), 1, "keep-alive after 3 cycles");
    // No Publish queued now: after 9 cycles the subscription expires with BadTimeout.
    s.run_ms(1000, 10);
    assert_eq!(s.h.state.subscriptions().subscription_count(), 0);
    assert!(s.publish(vec![]).is_none());
    let e = s.responses();
    assert_eq!(
        status_change(&e[0].notification_message),
        Some(StatusCode::BadTimeout)
    );
    assert_eq!(e[0].subscription_id, sub);
    let f = s.publish(vec![]).expect("answered at once");
    assert_eq!(fault_status(&f), Some(StatusCode::BadNoSubscription));
}

/// A subscription that reuses the slot of a deleted one keeps its own publishing rate: the
/// timer entry the deleted one left behind must not drive it as well (it did, and every
/// cycle then ran twice: a keep-alive after every cycle instead of every third, and the
/// lifetime spent twice as fast).
#[test]
fn a_reused_slot_keeps_one_publishing_timer() {
    let mut s = Sub::new(ServerConfig::default());
    let first = s.create(100.0, 3, 9, 0).subscription_id;
    s.run_ms(50, 10); // its first cycle is still ahead: its timer entry stays in the heap
    let hd = s.h.header(&s.token);
    match s.h.call(Request::DeleteSubscriptions(Box::new(
        DeleteSubscriptionsRequest {
            request_header: hd,
            subscription_ids: vec![first],
        },
    ))) {
        Response::DeleteSubscriptions(r) => assert_eq!(r.results, vec![StatusCode::Good]),
        other => panic!("{other:?}"),
    }
    let r = s.create(100.0, 3, 9, 0);
    assert_eq!(r.revised_max_keep_alive_count, 3);
    for _ in 0..4 {
        assert!(s.publish(vec![]).is_none());
    }
    // The first cycle falls within 100 ms: one keep-alive. The next one only three cycles
    // (300 ms) later, so none in the next 190 ms and one by 310 ms after the first.
    let mut keep_alives = Vec::new();
    for step in 1..=60 {
        s.run_ms(10, 10);
        for k in s.responses() {
            assert!(k.notification_message.notification_data.is_empty());
            keep_alives.push(step * 10);
        }
    }
    assert!(keep_alives.len() >= 2, "{keep_alives:?}");
    assert!(keep_alives[0] <= 100, "{keep_alives:?}");
    let gap = keep_alives[1] - keep_alives[0];
    assert!(
        (290..=310).contains(&gap),
        "a keep-alive every third cycle: {keep_alives:?}"
    );
    assert_eq!(s.h.state.subscriptions().subscription_count(), 1);
}

#[test]
fn too_many_publish_requests() {
    let mut cfg = ServerConfig::default();
    cfg.subscriptions.max_publish_requests_per_session = 3;
    let mut s = Sub::new(cfg);
    s.create(10_000.0, 100, 300, 0);
    s.run_ms(10_000, 10_000); // the first keep-alive has nobody to go to: late
    assert!(s.publish(vec![]).is_none()); // takes the late keep-alive at once
    assert_eq!(s.responses().len(), 1);
    for _ in 0..3 {
        assert!(s.publish(vec![]).is_none());
    }
    let r = s.publish(vec![]).expect("refused at once");
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadTooManyPublishRequests)
    );
    let (token, now) = (s.token.clone(), s.h.now);
    let key = s.h.state.find_session(&token, now).unwrap();
    assert_eq!(s.h.state.subscriptions().queued_publish_count(key), 3);
}

#[test]
fn more_notifications_and_retransmission_bound() {
    let mut cfg = ServerConfig::default();
    cfg.subscriptions.max_retransmission_queue_per_session = 2;
    let mut s = Sub::new(cfg);
    let sub = s.create(50.0, 10, 100, 2).subscription_id;
    let nodes: Vec<(NodeId, f64, u32)> = (0..5)
        .map(|i| (NodeId::numeric(1, 1001 + i), 0.0, 1))
        .collect();
    let r = s.items(sub, &nodes);
    assert!(
        r.iter()
            .all(|x| x.status_code == StatusCode::Good && x.revised_sampling_interval == 0.0),
        "exception-based"
    );
    // Five initial values, at most two per message: three messages, MoreNotifications on
    // the first two, all answered as soon as requests are queued.
    s.run_ms(50, 10);
    for _ in 0..3 {
        assert!(s.publish(vec![]).is_none());
    }
    let resp = s.responses();
    assert_eq!(resp.len(), 3);
    assert_eq!(
        resp.iter()
            .map(|r| data_changes(&r.notification_message).len())
            .collect::<Vec<_>>(),
        vec![2, 2, 1]
    );
    assert_eq!(
        resp.iter()
            .map(|r| r.more_notifications)
            .collect::<Vec<_>>(),
        vec![true, true, false]
    );
    let seqs: Vec<u32> = resp
        .iter()
        .map(|r| r.notification_message.sequence_number)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3]);
    // Only two kept for Republish: the oldest went.
    assert_eq!(resp[2].available_sequence_numbers, vec![2, 3]);
    let hd = s.h.header(&s.token.clone());
    let r = s.h.call(Request::Republish(Box::new(RepublishRequest {
        request_header: hd,
        subscription_id: sub,
        retransmit_sequence_number: 1,
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadMessageNotAvailable));
    let hd = s.h.header(&s.token.clone());
    let r = s.h.call(Request::Republish(Box::new(RepublishRequest {
        request_header: hd,
        subscription_id: sub,
        retransmit_sequence_number: 3,
    })));
    let Response::Republish(rp) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        rp.notification_message, resp[2].notification_message,
        "the same message"
    );
    // A write on an exception-based item is reported within one publishing interval.
    s.write_i32(NodeId::numeric(1, 1003), 99);
    assert!(s
        .publish(vec![SubscriptionAcknowledgement {
            subscription_id: sub,
            sequence_number: 2
        }])
        .is_none());
    s.run_ms(50, 10);
    let r = s.responses();
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].results, vec![StatusCode::Good]);
    let n = data_changes(&r[0].notification_message);
    assert_eq!(n.len(), 1);
    assert_eq!(n[0].client_handle, 3);
    assert_eq!(n[0].value.value, Variant::Int32(99));
}

#[test]
fn limits_on_subscriptions_and_items() {
    let mut cfg = ServerConfig::default();
    cfg.subscriptions.max_subscriptions_per_session = 2;
    cfg.subscriptions.max_monitored_items_per_subscription = 3;
    let mut s = Sub::new(cfg);
    let a = s.create(100.0, 10, 100, 0).subscription_id;
    s.create(100.0, 10, 100, 0);
    let hd = s.h.header(&s.token.clone());
    let r = s.h.call(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            request_header: hd,
            ..Default::default()
        },
    )));
    assert_eq!(fault_status(&r), Some(StatusCode::BadTooManySubscriptions));
    let nodes: Vec<(NodeId, f64, u32)> = (0..4)
        .map(|i| (NodeId::numeric(1, 1001 + i), 100.0, 1))
        .collect();
    let r = s.items(a, &nodes);
    assert_eq!(
        r.iter().map(|x| x.status_code).collect::<Vec<_>>(),
        vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadTooManyMonitoredItems
        ]
    );
    // Queue sizes are capped by the configuration.
    let mut s2 = Sub::new(ServerConfig::default());
    let b = s2.create(100.0, 10, 100, 0).subscription_id;
    let r = s2.items(b, &[(NodeId::numeric(1, 1001), 100.0, u32::MAX)]);
    assert_eq!(
        r[0].revised_queue_size,
        ServerConfig::default().subscriptions.max_queue_size
    );
}

#[test]
fn transfer_within_the_shard_notifies_the_old_session() {
    let mut s = Sub::new(ServerConfig::default());
    let sub = s.create(50.0, 10, 100, 0).subscription_id;
    s.items(sub, &[(NodeId::numeric(1, 1001), 0.0, 1)]);
    // A second session of the same (anonymous) user on another channel.
    let ch2 = s.h.state.next_channel_id();
    let cs = match s.h.create_session_on(ch2, 60_000.0) {
        Response::CreateSession(r) => *r,
        other => panic!("{other:?}"),
    };
    let t2 = cs.authentication_token.clone();
    assert!(matches!(
        s.h.activate_on(ch2, &t2, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    assert!(s.publish(vec![]).is_none()); // old session waits
    let hd = s.h.header(&t2);
    let r = s.h.call_on(
        ch2,
        Request::TransferSubscriptions(Box::new(TransferSubscriptionsRequest {
            request_header: hd,
            subscription_ids: vec![sub, 4242],
            send_initial_values: true,
        })),
    );
    let Response::TransferSubscriptions(t) = r else {
        panic!("{r:?}")
    };
    assert_eq!(t.results[0].status_code, StatusCode::Good);
    assert_eq!(
        t.results[1].status_code,
        StatusCode::BadSubscriptionIdInvalid
    );
    // The old session's queued Publish gets GoodSubscriptionTransferred; depending on
    // timing the initial value may have gone first.
    s.run_ms(50, 10);
    let old = s.responses();
    assert!(
        old.iter().any(|r| status_change(&r.notification_message)
            == Some(StatusCode::GoodSubscriptionTransferred)),
        "{old:?}"
    );
    // The new session gets the initial values.
    s.request_id += 1;
    let hd = s.h.header(&t2);
    let req = Request::Publish(Box::new(PublishRequest {
        request_header: hd,
        subscription_acknowledgements: vec![],
    }));
    assert!(dispatch_deferrable(
        &mut s.h.state,
        &Harness::ctx(ch2),
        req,
        s.request_id,
        s.h.now
    )
    .is_none());
    s.run_ms(50, 10);
    let mut v = Vec::new();
    s.h.state.take_deferred(ch2, &mut v);
    let Response::Publish(p) = &v[0].1.to_response().unwrap() else {
        panic!()
    };
    assert_eq!(p.subscription_id, sub);
    assert_eq!(data_changes(&p.notification_message).len(), 1);
}

#[test]
fn cancel_answers_queued_publish_requests() {
    let mut s = Sub::new(ServerConfig::default());
    s.create(10_000.0, 100, 300, 0);
    s.run_ms(10_000, 10_000); // first keep-alive is late
    assert!(s.publish(vec![]).is_none());
    assert_eq!(s.responses().len(), 1);
    assert!(s.publish(vec![]).is_none());
    let queued_handle = s.h.handle;
    let hd = s.h.header(&s.token.clone());
    let r = s.h.call(Request::Cancel(Box::new(CancelRequest {
        request_header: hd,
        request_handle: queued_handle,
    })));
    let Response::Cancel(c) = r else {
        panic!("{r:?}")
    };
    assert_eq!(c.cancel_count, 1);
    let mut v = Vec::new();
    let ch = s.h.channel;
    s.h.state.take_deferred(ch, &mut v);
    assert_eq!(v.len(), 1);
    let r = v[0].1.to_response().unwrap();
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadRequestCancelledByClient)
    );
    assert_eq!(r.response_header().request_handle, queued_handle);
}

#[test]
fn close_session_answers_queued_publish_requests() {
    let mut s = Sub::new(ServerConfig::default());
    s.create(10_000.0, 100, 300, 0);
    s.run_ms(10_000, 10_000);
    assert!(s.publish(vec![]).is_none());
    assert_eq!(s.responses().len(), 1, "the late keep-alive");
    assert!(s.publish(vec![]).is_none());
    let queued = s.h.handle;
    let hd = s.h.header(&s.token.clone());
    let r =
        s.h.call(Request::CloseSession(Box::new(CloseSessionRequest {
            request_header: hd,
            delete_subscriptions: true,
        })));
    assert!(matches!(r, Response::CloseSession(_)));
    let mut v = Vec::new();
    let ch = s.h.channel;
    s.h.state.take_deferred(ch, &mut v);
    assert_eq!(v.len(), 1);
    let r = v[0].1.to_response().unwrap();
    assert_eq!(fault_status(&r), Some(StatusCode::BadSessionClosed));
    assert_eq!(r.response_header().request_handle, queued);
    assert_eq!(s.h.state.subscriptions().subscription_count(), 0);
}

#[test]
fn items_on_other_attributes_report_once() {
    let mut s = Sub::new(ServerConfig::default());
    let sub = s.create(50.0, 10, 100, 0).subscription_id;
    let hd = s.h.header(&s.token.clone());
    let r = s.h.call(Request::CreateMonitoredItems(Box::new(
        CreateMonitoredItemsRequest {
            request_header: hd,
            subscription_id: sub,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: vec![MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::numeric(1, 1001),
                    attribute_id: 4,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: 9,
                    sampling_interval: 10.0,
                    queue_size: 5,
                    ..Default::default()
                },
            }],
        },
    )));
    let Response::CreateMonitoredItems(c) = r else {
        panic!("{r:?}")
    };
    assert_eq!(c.results[0].status_code, StatusCode::Good);
    for _ in 0..3 {
        assert!(s.publish(vec![]).is_none());
    }
    s.run_ms(500, 10);
    let resp = s.responses();
    let all: Vec<MonitoredItemNotification> = resp
        .iter()
        .flat_map(|r| data_changes(&r.notification_message))
        .collect();
    assert_eq!(all.len(), 1, "DisplayName is reported once");
    assert!(
        matches!(&all[0].value.value, Variant::LocalizedText(t) if t.text.as_str() == "BenchmarkValue0")
    );
    assert_eq!(
        s.h.state.subscriptions().stats().samples,
        0,
        "no timed sampling for it"
    );
}

/// DeleteMonitoredItems of several items in one call (the subscription's lists cleaned once
/// for the whole request): the deleted ones — with values queued and waiting to be
/// published — report nothing more, an unknown id in the same call is refused alone, and
/// the others go on reporting.
/// SetMonitoringMode of several ready items in one call (the ready list is cleaned once per
/// call): the disabled ones stop reporting what they had queued, the others keep reporting,
/// and enabled again they report anew.
#[test]
fn setting_the_mode_of_several_ready_items_in_one_call_leaves_the_others_reporting() {
    let mut s = counters(6);
    let sub = s.create(100.0, 10, 100, 0).subscription_id;
    let nodes: Vec<(NodeId, f64, u32)> =
        (1..=6).map(|i| (NodeId::numeric(1, i), 10.0, 1)).collect();
    let r = s.items(sub, &nodes);
    let ids: Vec<u32> = r.iter().map(|x| x.monitored_item_id).collect();
    s.run_ms(50, 10);
    let set = |s: &mut Sub, mode: MonitoringMode, items: Vec<u32>| -> Vec<StatusCode> {
        let hd = s.h.header(&s.token);
        let r = s.h.call(Request::SetMonitoringMode(Box::new(
            SetMonitoringModeRequest {
                request_header: hd,
                subscription_id: sub,
                monitoring_mode: mode,
                monitored_item_ids: items,
            },
        )));
        let Response::SetMonitoringMode(r) = r else {
            panic!("{r:?}")
        };
        r.results
    };
    assert_eq!(
        set(
            &mut s,
            MonitoringMode::Disabled,
            vec![ids[1], ids[3], 999_999, ids[4]]
        ),
        vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadMonitoredItemIdInvalid,
            StatusCode::Good
        ]
    );
    let handles = |s: &mut Sub| -> Vec<u32> {
        assert!(s.publish(vec![]).is_none());
        s.run_ms(100, 10);
        let resp = s.responses();
        assert_eq!(resp.len(), 1);
        let mut h: Vec<u32> = data_changes(&resp[0].notification_message)
            .iter()
            .map(|n| n.client_handle)
            .collect();
        h.sort_unstable();
        h
    };
    assert_eq!(
        handles(&mut s),
        vec![1, 3, 6],
        "what was queued, less the disabled"
    );
    assert_eq!(handles(&mut s), vec![1, 3, 6], "and what is sampled after");
    assert_eq!(
        set(&mut s, MonitoringMode::Reporting, ids.clone()),
        vec![StatusCode::Good; 6]
    );
    assert_eq!(handles(&mut s), vec![1, 2, 3, 4, 5, 6], "enabled again");
}

#[test]
fn deleting_several_items_in_one_call_leaves_the_others_reporting() {
    let mut s = counters(6);
    let sub = s.create(100.0, 10, 100, 0).subscription_id;
    let nodes: Vec<(NodeId, f64, u32)> =
        (1..=6).map(|i| (NodeId::numeric(1, i), 10.0, 1)).collect();
    let r = s.items(sub, &nodes);
    assert!(r.iter().all(|x| x.status_code == StatusCode::Good));
    let ids: Vec<u32> = r.iter().map(|x| x.monitored_item_id).collect();
    // Every item has a value queued (ready), none published yet.
    s.run_ms(50, 10);
    let hd = s.h.header(&s.token);
    let del = s.h.call(Request::DeleteMonitoredItems(Box::new(
        DeleteMonitoredItemsRequest {
            request_header: hd,
            subscription_id: sub,
            monitored_item_ids: vec![ids[1], ids[3], 999_999, ids[4]],
        },
    )));
    let Response::DeleteMonitoredItems(del) = del else {
        panic!("{del:?}")
    };
    assert_eq!(
        del.results,
        vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadMonitoredItemIdInvalid,
            StatusCode::Good
        ]
    );
    let handles = |s: &mut Sub| -> Vec<u32> {
        assert!(s.publish(vec![]).is_none());
        s.run_ms(100, 10);
        let resp = s.responses();
        assert_eq!(resp.len(), 1);
        let mut h: Vec<u32> = data_changes(&resp[0].notification_message)
            .iter()
            .map(|n| n.client_handle)
            .collect();
        h.sort_unstable();
        h
    };
    // Client handles are 1..=6 in creation order: 2, 4 and 5 are gone.
    assert_eq!(
        handles(&mut s),
        vec![1, 3, 6],
        "what was queued, less the deleted"
    );
    assert_eq!(handles(&mut s), vec![1, 3, 6], "and what is sampled after");
    // Deleting them again: each is unknown now.
    let hd = s.h.header(&s.token);
    let again = s.h.call(Request::DeleteMonitoredItems(Box::new(
        DeleteMonitoredItemsRequest {
            request_header: hd,
            subscription_id: sub,
            monitored_item_ids: vec![ids[1], ids[0]],
        },
    )));
    let Response::DeleteMonitoredItems(again) = again else {
        panic!("{again:?}")
    };
    assert_eq!(
        again.results,
        vec![StatusCode::BadMonitoredItemIdInvalid, StatusCode::Good]
    );
}

/// A queue of one reports the first sample of a run of equal status and value (its source
/// timestamp), even when later samples of the run differ in their timestamps only; an item
/// that joins the source in the middle of the run reports what it read; a change reaches
/// both. (Items on one source share the value kept there: this checks what they report.)
#[test]
fn a_queue_of_one_reports_the_sample_that_started_the_run() {
    let node = NodeId::numeric(1, 1003);
    let mut s = Sub::new(ServerConfig::default());
    let write = |s: &mut Sub, v: i32, ts: i64| {
        let hd = s.h.header(&s.token);
        let r = s.h.call(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: node.clone(),
                attribute_id: 13,
                value: uaring_core::DataValue {
                    value: Variant::Int32(v),
                    source_timestamp: Some(uaring_core::DateTime(ts)),
                    ..Default::default()
                },
                ..Default::default()
            }],
        })));
        let Response::Write(w) = r else {
            panic!("{r:?}")
        };
        assert_eq!(w.results[0], StatusCode::Good);
    };
    // Published notifications: (client handle, value, source timestamp).
    let publish = |s: &mut Sub| -> Vec<(u32, Variant, Option<i64>)> {
        assert!(s.publish(vec![]).is_none());
        s.run_ms(1000, 100);
        s.responses()
            .iter()
            .flat_map(|r| data_changes(&r.notification_message))
            .map(|n| {
                (
                    n.client_handle,
                    n.value.value,
                    n.value.source_timestamp.map(|t| t.0),
                )
            })
            .collect()
    };
    let sub = s.create(1000.0, 100, 1000, 0).subscription_id;
    write(&mut s, 5, 1_000);
    let r = s.items(sub, &[(node.clone(), 100.0, 1)]);
    assert_eq!(r[0].status_code, StatusCode::Good);
    assert_eq!(
        publish(&mut s),
        vec![(1, Variant::Int32(5), Some(1_000))],
        "the first value"
    );
    write(&mut s, 6, 2_000);
    s.run_ms(100, 100);
    write(&mut s, 6, 3_000); // the same value, a later source timestamp
    s.run_ms(100, 100);
    // A second item (client handle 1 again: the helper numbers from 1) joins mid-run.
    let r = s.items(sub, &[(node.clone(), 100.0, 1)]);
    assert_eq!(r[0].status_code, StatusCode::Good);
    let mut got = publish(&mut s);
    got.sort_by_key(|(_, _, ts)| *ts);
    assert_eq!(
        got,
        vec![
            (1, Variant::Int32(6), Some(2_000)),
            (1, Variant::Int32(6), Some(3_000)),
        ],
        "the first item reports the sample that changed the value, the second what it read"
    );
    write(&mut s, 6, 4_000);
    s.run_ms(100, 100);
    assert_eq!(publish(&mut s), vec![], "a timestamp alone reports nothing");
    write(&mut s, 7, 5_000);
    s.run_ms(100, 100);
    write(&mut s, 7, 6_000);
    s.run_ms(100, 100);
    assert_eq!(
        publish(&mut s),
        vec![
            (1, Variant::Int32(7), Some(5_000)),
            (1, Variant::Int32(7), Some(5_000)),
        ],
        "both report the change, with the timestamp of the sample that made it"
    );
}

/// An item that leaves a deadband compares the next sample against what it last reported,
/// not against the source's last sample: a value the deadband held back is reported then, even
/// though the source's sample has not changed since (the source fans it out once more).
#[test]
fn an_item_leaving_its_deadband_reports_the_value_it_held_back() {
    let node = NodeId::numeric(1, 1003);
    let mut s = Sub::new(ServerConfig::default());
    let sub = s.create(1000.0, 100, 1000, 0).subscription_id;
    s.write_i32(node.clone(), 0);
    let r = s.items(sub, &[(node.clone(), 100.0, 1), (node.clone(), 100.0, 1)]);
    let (a, b) = (r[0].monitored_item_id, r[1].monitored_item_id);
    let publish = |s: &mut Sub| -> Vec<(u32, Variant)> {
        assert!(s.publish(vec![]).is_none());
        s.run_ms(1000, 100);
        let mut v: Vec<(u32, Variant)> = s
            .responses()
            .iter()
            .flat_map(|r| data_changes(&r.notification_message))
            .map(|n| (n.client_handle, n.value.value))
            .collect();
        v.sort_by_key(|(h, _)| *h);
        v
    };
    let modify = |s: &mut Sub, id: u32, handle: u32, deadband: f64| {
        let hd = s.h.header(&s.token);
        let filter = DataChangeFilter {
            trigger: DataChangeTrigger::StatusValue,
            deadband_type: if deadband > 0.0 { 1 } else { 0 },
            deadband_value: deadband,
        };
        let r = s.h.call(Request::ModifyMonitoredItems(Box::new(
            ModifyMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_modify: vec![MonitoredItemModifyRequest {
                    monitored_item_id: id,
                    requested_parameters: MonitoringParameters {
                        client_handle: handle,
                        sampling_interval: 100.0,
                        queue_size: 1,
                        discard_oldest: true,
                        filter: uaring_core::ExtensionObject::from_struct(&filter),
                    },
                }],
            },
        )));
        let Response::ModifyMonitoredItems(m) = r else {
            panic!("{r:?}")
        };
        assert_eq!(m.results[0].status_code, StatusCode::Good, "{m:?}");
    };
    assert_eq!(
        publish(&mut s),
        vec![(1, Variant::Int32(0)), (2, Variant::Int32(0))]
    );
    modify(&mut s, a, 1, 10.0);
    s.write_i32(node.clone(), 5);
    s.run_ms(200, 100);
    assert_eq!(
        publish(&mut s),
        vec![(2, Variant::Int32(5))],
        "the deadband holds 5 back from the first item"
    );
    modify(&mut s, a, 1, 0.0);
    s.run_ms(200, 100);
    assert_eq!(
        publish(&mut s),
        vec![(1, Variant::Int32(5))],
        "without it, the first item reports 5, the value sampled before; the second nothing new"
    );
    s.write_i32(node.clone(), 6);
    s.run_ms(200, 100);
    assert_eq!(
        publish(&mut s),
        vec![(1, Variant::Int32(6)), (2, Variant::Int32(6))]
    );
    // Disabled and enabled again: the item reports the current value once, the other nothing.
    let hd = s.h.header(&s.token);
    for mode in [MonitoringMode::Disabled, MonitoringMode::Reporting] {
        let r = s.h.call(Request::SetMonitoringMode(Box::new(
            SetMonitoringModeRequest {
                request_header: hd.clone(),
                subscription_id: sub,
                monitoring_mode: mode,
                monitored_item_ids: vec![b],
            },
        )));
        assert!(matches!(r, Response::SetMonitoringMode(_)), "{r:?}");
    }
    assert_eq!(publish(&mut s), vec![(2, Variant::Int32(6))]);
}

/// An item id names the item's slot and the slot's generation: a deleted item's id names
/// nothing once its slot holds a new item (each new item there has another id), and an id
/// answers only in its own subscription.
#[test]
fn a_deleted_items_id_names_nothing_after_its_slot_is_reused() {
    let mut s = counters(3);
    let sub = s.create(100.0, 10, 100, 0).subscription_id;
    let other = s.create(100.0, 10, 100, 0).subscription_id;
    let node = |i: u32| (NodeId::numeric(1, i), 10.0, 1);
    let r = s.items(sub, &[node(1), node(2)]);
    assert!(r.iter().all(|x| x.status_code == StatusCode::Good));
    let keep = r[0].monitored_item_id;
    let mut live = r[1].monitored_item_id;
    let mut stale = Vec::new();
    // Delete and create again, 200 times: the freed slot is reused each time.
    for _ in 0..200 {
        let hd = s.h.header(&s.token);
        let Response::DeleteMonitoredItems(d) = s.h.call(Request::DeleteMonitoredItems(Box::new(
            DeleteMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                monitored_item_ids: vec![live],
            },
        ))) else {
            panic!("DeleteMonitoredItems")
        };
        assert_eq!(d.results, vec![StatusCode::Good]);
        stale.push(live);
        let r = s.items(sub, &[node(3)]);
        assert_eq!(r[0].status_code, StatusCode::Good);
        live = r[0].monitored_item_id;
        assert!(
            !stale.contains(&live),
            "a new item takes no deleted item's id"
        );
        assert_ne!(live, keep);
    }
    // Every stale id is unknown; the live ones answer (in their subscription only).
    let mode = |s: &mut Sub, sub: u32, ids: Vec<u32>| -> Vec<StatusCode> {
        let hd = s.h.header(&s.token);
        let Response::SetMonitoringMode(m) = s.h.call(Request::SetMonitoringMode(Box::new(
            SetMonitoringModeRequest {
                request_header: hd,
                subscription_id: sub,
                monitoring_mode: MonitoringMode::Sampling,
                monitored_item_ids: ids,
            },
        ))) else {
            panic!("SetMonitoringMode")
        };
        m.results
    };
    let n = stale.len();
    assert_eq!(
        mode(&mut s, sub, stale.clone()),
        vec![StatusCode::BadMonitoredItemIdInvalid; n]
    );
    assert_eq!(
        mode(&mut s, sub, vec![keep, live]),
        vec![StatusCode::Good; 2]
    );
    assert_eq!(
        mode(&mut s, other, vec![keep, live, 0, u32::MAX]),
        vec![StatusCode::BadMonitoredItemIdInvalid; 4],
        "another subscription's ids, 0 and a made-up one"
    );
    assert_eq!(s.h.state.subscriptions().monitored_item_count(), 2);
}

/// A bucket big enough for the sampling walk to read ahead (more than 16,384 sources), its
/// nodes scattered (items created in another order than the nodes): every counter is sampled
/// once a tick and every item reports its own counter's value.
#[test]
fn a_big_bucket_samples_every_source_once_a_tick() {
    const N: u32 = 20_000;
    let mut config = ServerConfig::default();
    config.operation_limits.max_monitored_items_per_call = N;
    let mut s = Sub::with_content(config, &content::Content::counters(N));
    let sub = s.create(1000.0, 10, 100, 0).subscription_id;
    // Item i (client handle i + 1) on counter i × 7919 mod N + 1: 7919 is prime, so each
    // counter once.
    let node = |i: u32| (u64::from(i) * 7919 % u64::from(N)) as u32 + 1;
    let nodes: Vec<(NodeId, f64, u32)> = (0..N)
        .map(|i| (NodeId::numeric(1, node(i)), 10.0, 1))
        .collect();
    let r = s.items(sub, &nodes);
    assert!(r.iter().all(|x| x.status_code == StatusCode::Good));
    s.run_ms(50, 10);
    let before = s.h.state.subscriptions().stats().samples;
    s.run_ms(50, 10);
    let st = s.h.state.subscriptions().stats();
    assert_eq!(
        st.samples - before,
        5 * u64::from(N),
        "every source once a tick"
    );
    assert_eq!(st.missed_ticks, 0);
    assert!(s.publish(vec![]).is_none());
    s.run_ms(1000, 10);
    let resp = s.responses();
    assert_eq!(resp.len(), 1);
    let n = data_changes(&resp[0].notification_message);
    assert_eq!(n.len(), N as usize, "queue of 1: the latest of each item");
    // Every counter was read once at creation and then sampled on every tick: the same
    // value for all, and every item reported.
    let first = n[0].value.value.clone();
    assert!(matches!(first, Variant::UInt64(v) if v > 100), "{first:?}");
    assert!(n.iter().all(|x| x.value.value == first));
    let mut handles: Vec<u32> = n.iter().map(|x| x.client_handle).collect();
    handles.sort_unstable();
    assert!(handles.iter().copied().eq(1..=N));
}
