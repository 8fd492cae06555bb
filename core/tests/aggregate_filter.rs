//! The AggregateFilter on monitored items (Part 4 §7.22.4, Part 13): CreateMonitoredItems,
//! ModifyMonitoredItems and SetMonitoringMode through `dispatch_deferrable`, time driven by
//! the test. Values written at known times, sampled on the item's ticks, give one computed
//! value per processing interval with the exact numbers and status bits Part 13 defines.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::node_ids as ids;
use uaring_core::generated::types::*;
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::{
    DataValue, DateTime, DecodeLimits, ExtensionObject, NodeId, StatusCode, Variant,
};

/// Good with the Calculated bit (InfoType DataValue, Part 13 §5.3).
const GOOD_CALCULATED: StatusCode = StatusCode(0x0000_0401);

struct Rig {
    h: Harness,
    token: NodeId,
    request_id: u32,
    sub: u32,
    /// Milliseconds since the start.
    t_ms: u64,
}

fn value_node() -> NodeId {
    NodeId::numeric(1, 1001) // BenchmarkValue0: Int32, writable, initial 0 stamped at start
}

fn agg_filter(aggregate: u32, interval_ms: f64, start: DateTime) -> AggregateFilter {
    AggregateFilter {
        start_time: start,
        aggregate_type: NodeId::ns0(aggregate),
        processing_interval: interval_ms,
        aggregate_configuration: AggregateConfiguration {
            use_server_capabilities_defaults: true,
            ..Default::default()
        },
    }
}

impl Rig {
    fn new() -> Rig {
        let mut h = Harness::with_content(ServerConfig::default(), &content::Content::default(), 0);
        let token = h.open_session();
        let hd = h.header(&token);
        let sub = match h.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: 500.0,
                requested_lifetime_count: 10_000,
                requested_max_keep_alive_count: 1_000,
                max_notifications_per_publish: 0,
                publishing_enabled: true,
                priority: 0,
            },
        ))) {
            Response::CreateSubscription(r) => r.subscription_id,
            other => panic!("{other:?}"),
        };
        Rig {
            h,
            token,
            request_id: 100,
            sub,
            t_ms: 0,
        }
    }

    fn create(
        &mut self,
        node: NodeId,
        attribute_id: u32,
        handle: u32,
        sampling_ms: f64,
        filter: ExtensionObject,
    ) -> MonitoredItemCreateResult {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: self.sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![MonitoredItemCreateRequest {
                    item_to_monitor: ReadValueId {
                        node_id: node,
                        attribute_id,
                        ..Default::default()
                    },
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: handle,
                        sampling_interval: sampling_ms,
                        filter,
                        queue_size: 10,
                        discard_oldest: true,
                    },
                }],
            },
        ))) {
            Response::CreateMonitoredItems(mut r) => r.results.remove(0),
            other => panic!("{other:?}"),
        }
    }

    fn create_agg(&mut self, handle: u32, f: &AggregateFilter) -> MonitoredItemCreateResult {
        self.create(
            value_node(),
            13,
            handle,
            100.0,
            ExtensionObject::from_struct(f),
        )
    }

    fn modify(&mut self, id: u32, handle: u32, f: &AggregateFilter) -> MonitoredItemModifyResult {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::ModifyMonitoredItems(Box::new(
            ModifyMonitoredItemsRequest {
                request_header: hd,
                subscription_id: self.sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_modify: vec![MonitoredItemModifyRequest {
                    monitored_item_id: id,
                    requested_parameters: MonitoringParameters {
                        client_handle: handle,
                        sampling_interval: 100.0,
                        filter: ExtensionObject::from_struct(f),
                        queue_size: 10,
                        discard_oldest: true,
                    },
                }],
            },
        ))) {
            Response::ModifyMonitoredItems(mut r) => r.results.remove(0),
            other => panic!("{other:?}"),
        }
    }

    fn set_mode(&mut self, id: u32, mode: MonitoringMode) {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::SetMonitoringMode(Box::new(
            SetMonitoringModeRequest {
                request_header: hd,
                subscription_id: self.sub,
                monitoring_mode: mode,
                monitored_item_ids: vec![id],
            },
        ))) {
            Response::SetMonitoringMode(r) => assert_eq!(r.results, vec![StatusCode::Good]),
            other => panic!("{other:?}"),
        }
    }

    fn publish(&mut self, n: usize) {
        for _ in 0..n {
            self.request_id += 1;
            let hd = self.h.header(&self.token);
            let req = Request::Publish(Box::new(PublishRequest {
                request_header: hd,
                subscription_acknowledgements: Vec::new(),
            }));
            let ch = self.h.channel;
            let r = dispatch_deferrable(
                &mut self.h.state,
                &Harness::ctx(ch),
                req,
                self.request_id,
                self.h.now,
            );
            assert!(r.is_none(), "Publish queued: {r:?}");
        }
    }

    /// Runs the shard's timers every 50 ms up to `t_ms` after the start.
    fn run_to(&mut self, t_ms: u64) {
        while self.t_ms < t_ms {
            self.h.advance_ms(50);
            self.t_ms += 50;
            let now = self.h.now;
            self.h.state.on_timer(now);
        }
    }

    fn write_i32(&mut self, v: i32) {
        self.write(value_node(), Variant::Int32(v));
    }

    fn write(&mut self, node_id: NodeId, v: Variant) {
        let hd = self.h.header(&self.token);
        let r = self.h.call(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id,
                attribute_id: 13,
                value: DataValue::new(v),
                ..Default::default()
            }],
        })));
        let Response::Write(w) = r else {
            panic!("{r:?}")
        };
        assert_eq!(w.results[0], StatusCode::Good);
    }

    /// Every data change notification sent so far, in order: (client handle, value).
    fn notifications(&mut self) -> Vec<(u32, DataValue)> {
        let mut v = Vec::new();
        let ch = self.h.channel;
        self.h.state.take_deferred(ch, &mut v);
        let mut out = Vec::new();
        for (_, d) in v {
            let Response::Publish(p) = d.to_response().expect("a decodable response") else {
                panic!("not a Publish response")
            };
            for eo in &p.notification_message.notification_data {
                if let Some(Ok(dc)) =
                    eo.decode_as::<DataChangeNotification>(DecodeLimits::default())
                {
                    out.extend(
                        dc.monitored_items
                            .into_iter()
                            .map(|m| (m.client_handle, m.value)),
                    );
                }
            }
        }
        out
    }

    fn at_ms(&self, ms: i64) -> DateTime {
        DateTime(start().utc.0 + ms * 10_000)
    }
}

fn of(n: &[(u32, DataValue)], handle: u32) -> Vec<DataValue> {
    n.iter()
        .filter(|(h, _)| *h == handle)
        .map(|(_, v)| v.clone())
        .collect()
}

fn number(v: &Variant) -> f64 {
    match v {
        Variant::Double(x) => *x,
        Variant::Int32(x) => f64::from(*x),
        Variant::UInt32(x) => f64::from(*x),
        other => panic!("not a number: {other:?}"),
    }
}

fn filter_result(eo: &ExtensionObject) -> AggregateFilterResult {
    eo.decode_as::<AggregateFilterResult>(DecodeLimits::default())
        .expect("an AggregateFilterResult")
        .expect("decodable")
}

/// Average, Minimum, Maximum and Count of one Int32 over 1 s intervals aligned on startTime:
/// the values written at known times give the exact numbers, the Calculated bit, the interval
/// start as SourceTimestamp; an interval without values is Bad_NoData for Average.
#[test]
fn average_minimum_maximum_count_over_intervals() {
    let mut r = Rig::new();
    let start = r.at_ms(0);
    let aggs = [
        (1, ids::AggregateFunction_Average),
        (2, ids::AggregateFunction_Minimum),
        (3, ids::AggregateFunction_Maximum),
        (4, ids::AggregateFunction_Count),
    ];
    for (handle, a) in aggs {
        let res = r.create_agg(handle, &agg_filter(a, 1000.0, start));
        assert_eq!(res.status_code, StatusCode::Good);
        assert_eq!(res.revised_sampling_interval, 100.0);
        let fr = filter_result(&res.filter_result);
        assert_eq!(fr.revised_start_time, start, "startTime now: kept");
        assert_eq!(fr.revised_processing_interval, 1000.0);
    }
    r.publish(20);
    // Interval [0, 1000): the initial 0 stamped at 0, then 10, 20, 30.
    r.run_to(150);
    r.write_i32(10);
    r.run_to(450);
    r.write_i32(20);
    r.run_to(750);
    r.write_i32(30);
    r.run_to(950);
    let early = r.notifications();
    assert!(
        early.is_empty(),
        "no value before the interval ends: {early:?}"
    );
    // Interval [1000, 2000): 5 alone. [2000, 3000): nothing new.
    r.run_to(1250);
    r.write_i32(5);
    r.run_to(3000);
    let n = r.notifications();
    let expect = |handle: u32, values: &[(f64, Option<StatusCode>)]| {
        let got = of(&n, handle);
        assert_eq!(
            got.len(),
            3,
            "handle {handle}: one value per interval: {got:?}"
        );
        for (i, (v, status)) in values.iter().enumerate() {
            assert_eq!(got[i].status, *status, "handle {handle} #{i}");
            assert_eq!(number(&got[i].value), *v, "handle {handle} #{i}");
        }
        for (i, g) in got.iter().enumerate() {
            assert_eq!(
                g.source_timestamp,
                Some(r.at_ms(1000 * i as i64)),
                "interval start"
            );
            assert_eq!(
                g.server_timestamp,
                Some(r.at_ms(1000 * (i as i64 + 1))),
                "computed at the tick that ended the interval"
            );
        }
        got
    };
    let calc = Some(GOOD_CALCULATED);
    let avg = expect(1, &[(15.0, calc), (5.0, calc)]);
    assert_eq!(avg[2].status, Some(StatusCode::BadNoData), "{:?}", avg[2]);
    // The minimum of the first interval is the raw value stamped at its start: the engine
    // (checked against Part 13 Annex A) returns it as a raw value, Good without the
    // Calculated bit, which is encoded as no status.
    let min = expect(2, &[(0.0, None), (5.0, calc)]);
    assert_eq!(min[2].status, Some(StatusCode::BadNoData));
    let max = expect(3, &[(30.0, calc), (5.0, calc)]);
    assert_eq!(max[2].status, Some(StatusCode::BadNoData));
    let count = expect(4, &[(4.0, calc), (1.0, calc), (0.0, calc)]);
    assert!(
        matches!(count[0].value, Variant::Int32(4)),
        "Count is Int32"
    );
}

/// What is refused and how, and the revised values of the AggregateFilterResult.
#[test]
fn filter_validation_and_revision() {
    let mut r = Rig::new();
    let start = r.at_ms(0);
    // Named by Part 13 but not computed (the server keeps no Annotations), and no aggregate at all.
    for a in [ids::AggregateFunction_AnnotationCount, ids::Server] {
        let res = r.create_agg(1, &agg_filter(a, 1000.0, start));
        assert_eq!(res.status_code, StatusCode::BadAggregateNotSupported);
    }
    // Not a number: a String variable, and an attribute other than Value.
    let f =
        ExtensionObject::from_struct(&agg_filter(ids::AggregateFunction_Average, 1000.0, start));
    let res = r.create(
        NodeId::string(1, "Demo.Static.String"),
        13,
        1,
        100.0,
        f.clone(),
    );
    assert_eq!(res.status_code, StatusCode::BadFilterNotAllowed);
    let res = r.create(value_node(), 4, 1, 100.0, f);
    assert_eq!(res.status_code, StatusCode::BadFilterNotAllowed);
    // A percentage over 100.
    let mut bad = agg_filter(ids::AggregateFunction_Average, 1000.0, start);
    bad.aggregate_configuration = AggregateConfiguration {
        use_server_capabilities_defaults: false,
        treat_uncertain_as_bad: false,
        percent_data_bad: 101,
        percent_data_good: 100,
        use_sloped_extrapolation: false,
    };
    let res = r.create_agg(1, &bad);
    assert_eq!(
        res.status_code,
        StatusCode::BadAggregateConfigurationRejected
    );
    // A truncated AggregateFilter body.
    let mut eo =
        ExtensionObject::from_struct(&agg_filter(ids::AggregateFunction_Average, 1.0, start));
    if let uaring_core::types::ExtensionObjectBody::Binary(b) = &mut eo.body {
        b.truncate(5);
    }
    let res = r.create(value_node(), 13, 1, 100.0, eo);
    assert_eq!(res.status_code, StatusCode::BadMonitoredItemFilterInvalid);

    // The aggregate's timestamp is the SourceTimestamp: Server or Neither only is refused.
    for ttr in [TimestampsToReturn::Server, TimestampsToReturn::Neither] {
        let hd = r.h.header(&r.token);
        let res = match r.h.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: r.sub,
                timestamps_to_return: ttr,
                items_to_create: vec![MonitoredItemCreateRequest {
                    item_to_monitor: ReadValueId {
                        node_id: value_node(),
                        attribute_id: 13,
                        ..Default::default()
                    },
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        filter: ExtensionObject::from_struct(&agg_filter(
                            ids::AggregateFunction_Average,
                            1000.0,
                            start,
                        )),
                        ..Default::default()
                    },
                }],
            },
        ))) {
            Response::CreateMonitoredItems(mut r) => r.results.remove(0),
            other => panic!("{other:?}"),
        };
        assert_eq!(res.status_code, StatusCode::BadTimestampsToReturnInvalid);
    }
    // An interval below twice the sampling interval is raised to it.
    let res = r.create_agg(1, &agg_filter(ids::AggregateFunction_Average, 50.0, start));
    assert_eq!(res.status_code, StatusCode::Good);
    let fr = filter_result(&res.filter_result);
    assert_eq!(fr.revised_processing_interval, 200.0);
    // 0 is the publishing interval (500 ms), and the server defaults are answered.
    let res = r.create_agg(2, &agg_filter(ids::AggregateFunction_Average, 0.0, start));
    let fr = filter_result(&res.filter_result);
    assert_eq!(fr.revised_processing_interval, 500.0);
    assert_eq!(
        fr.revised_aggregate_configuration,
        AggregateConfiguration {
            use_server_capabilities_defaults: true,
            treat_uncertain_as_bad: true,
            percent_data_bad: 100,
            percent_data_good: 100,
            use_sloped_extrapolation: false,
        }
    );
    // A long interval raises the sampling interval: at most 512 samples per interval.
    let res = r.create_agg(
        3,
        &agg_filter(ids::AggregateFunction_Average, 3_600_000.0, start),
    );
    assert_eq!(res.revised_sampling_interval, 3_600_000.0 / 512.0);
    // The client's own configuration is kept and answered.
    let mut own = agg_filter(ids::AggregateFunction_Count, 1000.0, start);
    own.aggregate_configuration = AggregateConfiguration {
        use_server_capabilities_defaults: false,
        treat_uncertain_as_bad: false,
        percent_data_bad: 50,
        percent_data_good: 50,
        use_sloped_extrapolation: true,
    };
    let res = r.create_agg(4, &own);
    let fr = filter_result(&res.filter_result);
    assert_eq!(
        fr.revised_aggregate_configuration,
        own.aggregate_configuration
    );
    // A startTime in the past moves to the first boundary of its grid not before now.
    r.run_to(250);
    let res = r.create_agg(
        5,
        &agg_filter(ids::AggregateFunction_Average, 1000.0, start),
    );
    assert_eq!(
        filter_result(&res.filter_result).revised_start_time,
        r.at_ms(1000)
    );
    let res = r.create_agg(
        6,
        &agg_filter(ids::AggregateFunction_Average, 1000.0, DateTime::NULL),
    );
    assert_eq!(
        filter_result(&res.filter_result).revised_start_time,
        r.at_ms(1000),
        "the grid of 1601-01-01 (the start is on a whole second)"
    );
    // One in the future is kept.
    let res = r.create_agg(
        7,
        &agg_filter(ids::AggregateFunction_Average, 1000.0, r.at_ms(5_000)),
    );
    assert_eq!(
        filter_result(&res.filter_result).revised_start_time,
        r.at_ms(5_000)
    );
}

/// ModifyMonitoredItems with another interval starts the intervals again; SetMonitoringMode
/// Disabled stops the aggregation, and Reporting again restarts it at the next boundary.
#[test]
fn modify_restarts_and_disabled_does_not_aggregate() {
    let mut r = Rig::new();
    let start = r.at_ms(0);
    let res = r.create_agg(1, &agg_filter(ids::AggregateFunction_Count, 1000.0, start));
    let id = res.monitored_item_id;
    r.publish(30);
    r.run_to(300);
    r.write_i32(1);
    r.run_to(1000);
    let n = r.notifications();
    let got = of(&n, 1);
    assert_eq!(got.len(), 1);
    assert!(matches!(got[0].value, Variant::Int32(2)), "{got:?}"); // the initial 0 and 1

    // At 1100 ms: 400 ms intervals on the same start; the next boundary is 1200.
    r.run_to(1100);
    let m = r.modify(
        id,
        9,
        &agg_filter(ids::AggregateFunction_Maximum, 400.0, start),
    );
    assert_eq!(m.status_code, StatusCode::Good);
    let fr = filter_result(&m.filter_result);
    assert_eq!(fr.revised_start_time, r.at_ms(1200));
    assert_eq!(fr.revised_processing_interval, 400.0);
    r.run_to(1300);
    r.write_i32(7);
    r.run_to(1450);
    r.write_i32(3);
    r.run_to(2000);
    let n = r.notifications();
    let got = of(&n, 9);
    assert_eq!(got.len(), 2, "[1200,1600) and [1600,2000): {got:?}");
    assert_eq!(got[0].source_timestamp, Some(r.at_ms(1200)));
    assert_eq!(number(&got[0].value), 7.0);
    assert_eq!(got[0].status, Some(GOOD_CALCULATED));
    assert_eq!(got[1].source_timestamp, Some(r.at_ms(1600)));
    assert_eq!(
        got[1].status,
        Some(StatusCode::BadNoData),
        "no value inside"
    );

    r.set_mode(id, MonitoringMode::Disabled);
    r.run_to(2500);
    r.write_i32(100);
    r.run_to(3000);
    assert!(
        of(&r.notifications(), 9).is_empty(),
        "disabled: no aggregation"
    );
    // At 3000 ms, Reporting again: the intervals start at 3200.
    r.run_to(3050);
    r.set_mode(id, MonitoringMode::Reporting);
    r.run_to(3300);
    r.write_i32(40);
    // The source samples again from 3050 (ticks at 3150, …, 3650): [3200, 3600) ends at the
    // tick of 3650 and is published at 4000.
    r.run_to(4000);
    let got = of(&r.notifications(), 9);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].source_timestamp, Some(r.at_ms(3200)));
    assert_eq!(
        number(&got[0].value),
        40.0,
        "100 (written while disabled) is before the interval"
    );
}

/// Hostile values in the filter are revised or refused, never a panic, and intervals at the
/// end of time never end.
#[test]
fn hostile_filters_are_revised() {
    let mut r = Rig::new();
    let avg = ids::AggregateFunction_Average;
    for (pi, start) in [
        (f64::NAN, DateTime(i64::MIN)),
        (f64::INFINITY, DateTime(i64::MAX)),
        (-1.0, DateTime::NULL),
        (1e300, DateTime(i64::MAX - 1)),
        (1e-300, DateTime(-5)),
    ] {
        let res = r.create_agg(1, &agg_filter(avg, pi, start));
        assert_eq!(res.status_code, StatusCode::Good, "{pi} {start:?}");
        let fr = filter_result(&res.filter_result);
        let rpi = fr.revised_processing_interval;
        assert!((200.0..=86_400_000.0).contains(&rpi), "{pi}: {rpi}");
        assert!(res.revised_sampling_interval * 512.0 >= rpi);
        assert!(fr.revised_start_time.0 >= r.h.now.utc.0 || fr.revised_start_time == start);
    }
    r.publish(5);
    r.run_to(2000);
    for (_, v) in r.notifications() {
        assert!(v.source_timestamp.is_some());
    }
}

/// In Sampling mode the intervals' values are queued (and reported once Reporting); a Modify
/// to no filter makes the item an ordinary one again, reporting its samples.
#[test]
fn sampling_mode_queues_and_no_filter_ends_the_aggregation() {
    let mut r = Rig::new();
    let start = r.at_ms(0);
    let res = r.create_agg(1, &agg_filter(ids::AggregateFunction_Maximum, 500.0, start));
    let id = res.monitored_item_id;
    r.set_mode(id, MonitoringMode::Sampling);
    r.publish(20);
    r.run_to(200);
    r.write_i32(8);
    r.run_to(1000);
    assert!(
        of(&r.notifications(), 1).is_empty(),
        "Sampling: nothing reported"
    );
    r.set_mode(id, MonitoringMode::Reporting);
    r.run_to(1500);
    let got = of(&r.notifications(), 1);
    assert_eq!(
        got.len(),
        3,
        "[0,500) and [500,1000) from the queue, [1000,1500) reported at once: {got:?}"
    );
    assert_eq!(number(&got[0].value), 8.0);
    assert_eq!(got[0].status, Some(GOOD_CALCULATED));
    assert_eq!(got[1].source_timestamp, Some(r.at_ms(500)));
    assert_eq!(
        got[1].status,
        Some(StatusCode::BadNoData),
        "no value inside [500,1000)"
    );
    assert_eq!(got[2].source_timestamp, Some(r.at_ms(1000)));

    let hd = r.h.header(&r.token);
    let m = match r.h.call(Request::ModifyMonitoredItems(Box::new(
        ModifyMonitoredItemsRequest {
            request_header: hd,
            subscription_id: r.sub,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_modify: vec![MonitoredItemModifyRequest {
                monitored_item_id: id,
                requested_parameters: MonitoringParameters {
                    client_handle: 2,
                    sampling_interval: 100.0,
                    queue_size: 10,
                    discard_oldest: true,
                    ..Default::default()
                },
            }],
        },
    ))) {
        Response::ModifyMonitoredItems(mut m) => m.results.remove(0),
        other => panic!("{other:?}"),
    };
    assert_eq!(m.status_code, StatusCode::Good);
    assert!(
        m.filter_result.is_null(),
        "no AggregateFilterResult without the filter"
    );
    r.run_to(1600);
    r.write_i32(9);
    r.run_to(2000);
    let got = of(&r.notifications(), 2);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].value, Variant::Int32(9), "the sample itself");
    assert_eq!(got[0].status, None);
}

/// TimeAverage always draws sloped lines between the points (Part 13 §5.4.3.6: "this calculation
/// always uses a sloped line between points"): 0 rising to 10 over the first half, then 10: 7.5,
/// a Double ("Data Type: Double") for an Int32 as for a Double. TimeAverage2 follows the
/// variable's Stepped Property (§5.4.3.7): stepped for an Int32 (0 for half the interval, then
/// 10: 5), sloped for a Double (7.5).
#[test]
fn time_average_slopes_and_time_average2_follows_stepped() {
    let mut r = Rig::new();
    let start = r.at_ms(0);
    let int32 = NodeId::string(1, "Demo.Static.Int32");
    let double = NodeId::string(1, "Demo.Static.Double");
    let float = NodeId::string(1, "Demo.Static.Float");
    for (handle, node, agg) in [
        (1, int32.clone(), ids::AggregateFunction_TimeAverage),
        (2, double.clone(), ids::AggregateFunction_TimeAverage),
        (3, int32.clone(), ids::AggregateFunction_TimeAverage2),
        (4, double.clone(), ids::AggregateFunction_TimeAverage2),
        (5, float.clone(), ids::AggregateFunction_TimeAverage),
        (6, float.clone(), ids::AggregateFunction_Average),
        (7, float.clone(), ids::AggregateFunction_Maximum),
    ] {
        let f = ExtensionObject::from_struct(&agg_filter(agg, 1000.0, start));
        let res = r.create(node, 13, handle, 100.0, f);
        assert_eq!(res.status_code, StatusCode::Good);
    }
    r.publish(10);
    r.run_to(500);
    r.write(int32, Variant::Int32(10));
    r.write(double, Variant::Double(10.0));
    r.write(float, Variant::Float(10.0));
    r.run_to(1000);
    let n = r.notifications();
    let int = of(&n, 1);
    let dbl = of(&n, 2);
    assert_eq!(int.len(), 1, "{n:?}");
    assert_eq!(dbl.len(), 1, "{n:?}");
    assert_eq!(int[0].value, Variant::Double(7.5), "{int:?}");
    assert_eq!(dbl[0].value, Variant::Double(7.5), "{dbl:?}");
    let int2 = of(&n, 3);
    let dbl2 = of(&n, 4);
    assert_eq!(int2.len(), 1, "{n:?}");
    assert_eq!(dbl2.len(), 1, "{n:?}");
    assert_eq!(int2[0].value, Variant::Double(5.0), "{int2:?}");
    assert_eq!(dbl2[0].value, Variant::Double(7.5), "{dbl2:?}");
    for v in [&int[0], &dbl[0]] {
        assert_eq!(v.status, Some(GOOD_CALCULATED), "{v:?}");
    }
    // A Float source: TimeAverage and Average are Double (Part 13 Table 13), Maximum the raw
    // data type.
    let flt: Vec<Variant> = (5..=7).map(|h| of(&n, h)[0].value.clone()).collect();
    assert_eq!(
        flt,
        [
            Variant::Double(7.5),
            Variant::Double(5.0),
            Variant::Float(10.0)
        ],
        "{n:?}"
    );
}
