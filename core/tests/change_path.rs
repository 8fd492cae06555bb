//! The change path: every store into a value cell (a client's Write on any shard, an
//! application's push from any thread) reaches every exception-based monitored item
//! (sampling interval 0) on every shard, in order, up to the item's queue size; a full
//! change inbox resynchronises the items, with the Overflow bit where an item missed a store.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::context::ConnectionHost;
use uaring_core::services::dispatch_deferrable;
use uaring_core::shared::ServerShared;
use uaring_core::subscription::item::OVERFLOW_INFO_BITS;
use uaring_core::{DataValue, DecodeLimits, NodeId, StatusCode, Variant};

/// One session on one shard of a shared server.
struct Client {
    h: Harness,
    token: NodeId,
    request_id: u32,
}

impl Client {
    fn on(shared: &Arc<ServerShared>, shard: usize) -> Client {
        let mut h = Harness::on_shared(shared.clone(), shard);
        let token = h.open_session();
        Client {
            h,
            token,
            request_id: 100,
        }
    }

    fn subscribe(&mut self, interval_ms: f64) -> u32 {
        let hd = self.h.header(&self.token);
        match self.h.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: interval_ms,
                requested_lifetime_count: 1000,
                requested_max_keep_alive_count: 10,
                max_notifications_per_publish: 0,
                publishing_enabled: true,
                priority: 0,
            },
        ))) {
            Response::CreateSubscription(r) => r.subscription_id,
            other => panic!("{other:?}"),
        }
    }

    fn monitor(
        &mut self,
        sub: u32,
        node: NodeId,
        sampling_ms: f64,
        queue: u32,
    ) -> MonitoredItemCreateResult {
        let hd = self.h.header(&self.token);
        let item = MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id: node,
                attribute_id: 13,
                ..Default::default()
            },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: 7,
                sampling_interval: sampling_ms,
                queue_size: queue,
                discard_oldest: true,
                ..Default::default()
            },
        };
        match self.h.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![item],
            },
        ))) {
            Response::CreateMonitoredItems(r) => r.results[0].clone(),
            other => panic!("{other:?}"),
        }
    }

    fn write_i32(&mut self, node: NodeId, v: i32) {
        let hd = self.h.header(&self.token);
        let r = self.h.call(Request::Write(Box::new(WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: node,
                attribute_id: 13,
                value: DataValue::new(Variant::Int32(v)),
                ..Default::default()
            }],
        })));
        let Response::Write(w) = r else {
            panic!("{r:?}")
        };
        assert_eq!(w.results, vec![StatusCode::Good]);
    }

    /// Runs the shard's timers for `ms` with a Publish queued, and returns every data
    /// change notification of the responses, in order.
    fn collect(&mut self, ms: u64) -> Vec<DataValue> {
        let mut out = Vec::new();
        let end = self.h.now.mono_ns + ms * 1_000_000;
        while self.h.now.mono_ns < end {
            self.request_id += 1;
            let hd = self.h.header(&self.token);
            let req = Request::Publish(Box::new(PublishRequest {
                request_header: hd,
                subscription_acknowledgements: vec![],
            }));
            let ch = self.h.channel;
            assert!(dispatch_deferrable(
                &mut self.h.state,
                &Harness::ctx(ch),
                req,
                self.request_id,
                self.h.now
            )
            .is_none());
            self.h.advance_ms(10);
            let now = self.h.now;
            self.h.state.on_timer(now);
            let mut v = Vec::new();
            self.h.state.take_deferred(ch, &mut v);
            for (_, d) in v {
                let Ok(Response::Publish(p)) = d.to_response() else {
                    panic!("a Publish response")
                };
                for eo in &p.notification_message.notification_data {
                    if let Some(Ok(d)) =
                        eo.decode_as::<DataChangeNotification>(DecodeLimits::default())
                    {
                        out.extend(d.monitored_items.into_iter().map(|m| m.value));
                    }
                }
            }
        }
        out
    }
}

fn int_values(v: &[DataValue]) -> Vec<i32> {
    v.iter()
        .map(|d| match d.value {
            Variant::Int32(x) => x,
            ref other => panic!("{other:?}"),
        })
        .collect()
}

fn bench_node(i: u32) -> NodeId {
    NodeId::numeric(1, 1001 + i)
}

#[test]
fn twenty_quick_writes_arrive_as_twenty_notifications_whichever_shard_writes() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut subscriber = Client::on(&shared, 1);
    let mut other = Client::on(&shared, 0);
    let sub = subscriber.subscribe(100.0);
    let r = subscriber.monitor(sub, bench_node(5), 0.0, 20);
    assert_eq!(
        (
            r.status_code,
            r.revised_sampling_interval,
            r.revised_queue_size
        ),
        (StatusCode::Good, 0.0, 20)
    );
    assert_eq!(
        int_values(&subscriber.collect(100)),
        vec![5],
        "the initial value"
    );
    // 20 Writes from another shard within one publishing interval…
    for v in 1..=20 {
        other.write_i32(bench_node(5), v);
    }
    assert_eq!(
        int_values(&subscriber.collect(100)),
        (1..=20).collect::<Vec<_>>()
    );
    // …and 20 from the subscriber's own shard.
    for v in 21..=40 {
        subscriber.write_i32(bench_node(5), v);
    }
    assert_eq!(
        int_values(&subscriber.collect(100)),
        (21..=40).collect::<Vec<_>>()
    );
    // Nothing is reported twice.
    assert!(subscriber.collect(200).is_empty());
}

#[test]
fn a_thousand_pushes_from_an_application_thread_reach_items_on_two_shards_in_order() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let mut b = Client::on(&shared, 1);
    let (sa, sb) = (a.subscribe(50.0), b.subscribe(100.0));
    a.monitor(sa, bench_node(9), 0.0, 1000);
    b.monitor(sb, bench_node(9), 0.0, 1000);
    assert_eq!(int_values(&a.collect(50)), vec![9]);
    assert_eq!(int_values(&b.collect(100)), vec![9]);
    let space_owner = shared.clone();
    let index = shared.address_space.node_index(&bench_node(9)).unwrap();
    std::thread::spawn(move || {
        for v in 0..1000 {
            space_owner
                .address_space
                .store_value(index, DataValue::new(Variant::Int32(v)))
                .unwrap();
        }
    })
    .join()
    .unwrap();
    let want: Vec<i32> = (0..1000).collect();
    assert_eq!(int_values(&a.collect(100)), want);
    assert_eq!(int_values(&b.collect(100)), want);
    assert_eq!(a.h.state.subscriptions().stats().changes_lost, 0);
}

#[test]
fn a_push_of_the_wrong_type_is_refused_and_reaches_nobody() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let s = a.subscribe(50.0);
    a.monitor(s, bench_node(1), 0.0, 10);
    a.collect(50);
    let index = shared.address_space.node_index(&bench_node(1)).unwrap();
    assert_eq!(
        shared
            .address_space
            .store_value(index, DataValue::new(Variant::Double(1.5))),
        Err(StatusCode::BadTypeMismatch)
    );
    assert!(a.collect(100).is_empty());
}

#[test]
fn a_full_inbox_resynchronises_items_with_the_overflow_bit() {
    let mut cfg = ServerConfig::default();
    cfg.subscriptions.change_queue_per_shard = 8;
    let shared = content::new(cfg, start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let s = a.subscribe(100.0);
    a.monitor(s, bench_node(2), 0.0, 100);
    a.collect(100);
    let index = shared.address_space.node_index(&bench_node(2)).unwrap();
    for v in 1..=50 {
        shared
            .address_space
            .store_value(index, DataValue::new(Variant::Int32(v)))
            .unwrap();
    }
    let got = a.collect(100);
    // The eight that fit, then the current value marked with the Overflow bit.
    assert_eq!(int_values(&got), vec![1, 2, 3, 4, 5, 6, 7, 8, 50]);
    let last = got.last().unwrap();
    assert_eq!(
        last.status.map(|s| s.0 & OVERFLOW_INFO_BITS),
        Some(OVERFLOW_INFO_BITS)
    );
    assert!(got[..8].iter().all(|d| d.status.is_none()));
    assert_eq!(a.h.state.subscriptions().stats().changes_lost, 42);
}

/// The gateway benchmark's spurious Overflow bits: a mirrored server's burst of stores, one
/// per node, overran the inbox; the resynchronisation delivered every node's one new value,
/// yet marked each with the Overflow bit. An item carries it only when it missed a store.
#[test]
fn a_full_inbox_marks_overflow_only_on_items_that_missed_a_store() {
    let mut cfg = ServerConfig::default();
    cfg.subscriptions.change_queue_per_shard = 8;
    let shared = content::new(cfg, start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let s = a.subscribe(100.0);
    for i in 0..12 {
        a.monitor(s, bench_node(i), 0.0, 10);
    }
    assert_eq!(a.collect(100).len(), 12, "the initial values");
    let space = &shared.address_space;
    let index = |i: u32| space.node_index(&bench_node(i)).unwrap();
    // One store per node: eight fit in the inbox, four are lost to it…
    for i in 0..12 {
        space
            .store_value(index(i), DataValue::new(Variant::Int32(100 + i as i32)))
            .unwrap();
    }
    // …and node 11 is stored once more (both of its stores lost).
    space
        .store_value(index(11), DataValue::new(Variant::Int32(211)))
        .unwrap();
    let got = a.collect(100);
    assert_eq!(a.h.state.subscriptions().stats().changes_lost, 5);
    let mut values = int_values(&got);
    values.sort_unstable();
    let mut want: Vec<i32> = (100..111).collect();
    want.push(211);
    assert_eq!(values, want, "every node's current value, 111 never seen");
    for d in &got {
        let overflow = d.status.map(|s| s.0 & OVERFLOW_INFO_BITS) == Some(OVERFLOW_INFO_BITS);
        assert_eq!(
            overflow,
            d.value == Variant::Int32(211),
            "Overflow only after the value the item missed: {d:?}"
        );
    }
}

/// A store that never reached the item (here taken out of the inbox before the shard drains
/// it, as when a lost change is overtaken by a later one of the same node that found room)
/// marks the next value the item gets.
#[test]
fn a_change_after_a_store_the_item_missed_carries_the_overflow_bit() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let s = a.subscribe(100.0);
    a.monitor(s, bench_node(4), 0.0, 10);
    assert_eq!(int_values(&a.collect(100)), vec![4]);
    let space = &shared.address_space;
    let index = space.node_index(&bench_node(4)).unwrap();
    let v1 = space
        .store_value(index, DataValue::new(Variant::Int32(1)))
        .unwrap();
    let mut taken = 0;
    space.changes().drain(0, 1, |_| taken += 1);
    assert_eq!(taken, 1);
    let v2 = space
        .store_value(index, DataValue::new(Variant::Int32(2)))
        .unwrap();
    let v3 = space
        .store_value(index, DataValue::new(Variant::Int32(3)))
        .unwrap();
    // The step the shards rely on to tell a missed store (STORE_VERSION_STEP).
    assert_eq!((v2 - v1, v3 - v2), (2, 2));
    let got = a.collect(100);
    assert_eq!(int_values(&got), vec![2, 3]);
    assert_eq!(statuses(&got)[0].0 & OVERFLOW_INFO_BITS, OVERFLOW_INFO_BITS);
    assert_eq!(got[1].status, None, "3 directly follows 2");
}

#[test]
fn deleting_the_last_item_stops_watching_the_node() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let s = a.subscribe(50.0);
    let index = shared.address_space.node_index(&bench_node(3)).unwrap();
    let r = a.monitor(s, bench_node(3), 0.0, 10);
    assert!(shared.address_space.changes().watched(index));
    let hd = a.h.header(&a.token.clone());
    let resp = a.h.call(Request::DeleteMonitoredItems(Box::new(
        DeleteMonitoredItemsRequest {
            request_header: hd,
            subscription_id: s,
            monitored_item_ids: vec![r.monitored_item_id],
        },
    )));
    assert!(
        matches!(resp, Response::DeleteMonitoredItems(_)),
        "{resp:?}"
    );
    assert!(!shared.address_space.changes().watched(index));
    // A sampled item does not watch.
    a.monitor(s, bench_node(3), 100.0, 1);
    assert!(!shared.address_space.changes().watched(index));
}

/// A Double Variable under Objects, for a run-time edit.
fn run_time_variable(name: &str, v: f64) -> uaring_core::address_space::Node {
    uaring_core::address_space::build::make::variable(
        NodeId::string(1, name),
        uaring_core::QualifiedName::new(1, name),
        NodeId::ns0(11),
        -1,
        Vec::new(),
        DataValue::new(Variant::Double(v)),
        3,
        0.0,
        Some((NodeId::ns0(85), 35)),
    )
}

fn statuses(v: &[DataValue]) -> Vec<StatusCode> {
    v.iter()
        .map(|d| d.status.unwrap_or(StatusCode::Good))
        .collect()
}

/// A removed Variable's value cell goes to a later node once the version the removal was
/// made from is gone (and every shard is past the removal): a held older version keeps
/// reading its own node's value meanwhile, and the cells do not grow over a churn of adds
/// and removes.
#[test]
fn a_removed_variables_cell_is_reused_once_no_version_can_read_it() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let id = |i: u32| NodeId::string(1, format!("Churn.V{i}"));
    let name = |i: u32| format!("Churn.V{i}");
    let mut edit = shared.model.edit();
    edit.add_node(run_time_variable(&name(0), 0.0)).unwrap();
    shared.model.commit(edit).unwrap();
    let cells = shared.model.load().value_cells();
    // The version that still has V0, held while V0 is removed and V1 added.
    let held = shared.model.load();
    let mut edit = shared.model.edit();
    edit.delete_node(&id(0), true).unwrap();
    shared.model.commit(edit).unwrap();
    let mut edit = shared.model.edit();
    edit.add_node(run_time_variable(&name(1), 1.0)).unwrap();
    shared.model.commit(edit).unwrap();
    assert_eq!(shared.model.load().value_cells(), cells + 1);
    let v0 = held.node(&id(0)).unwrap();
    assert_eq!(
        held.variable_value(v0, start()).unwrap().value,
        Variant::Double(0.0)
    );
    drop(held);
    for i in 2..50 {
        let mut edit = shared.model.edit();
        edit.delete_node(&id(i - 1), true).unwrap();
        edit.add_node(run_time_variable(&name(i), i as f64))
            .unwrap();
        shared.model.commit(edit).unwrap();
    }
    let now = shared.model.load();
    assert!(
        now.value_cells() <= cells + 2,
        "{} cells",
        now.value_cells()
    );
    let last = now.node(&id(49)).unwrap();
    assert_eq!(
        now.variable_value(last, start()).unwrap().value,
        Variant::Double(49.0)
    );
}

/// The free lists go from version to version without a copy (each edit takes them from
/// its base): an edit dropped without a commit gives them back as it took them, so what it
/// reused is free again and what it removed (still in the published version) is not.
#[test]
fn a_dropped_edit_gives_the_free_lists_back() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let id = |i: u32| NodeId::string(1, format!("Drop.V{i}"));
    let name = |i: u32| format!("Drop.V{i}");
    let mut edit = shared.model.edit();
    let a = edit.add_node(run_time_variable(&name(0), 0.0)).unwrap();
    let b = edit.add_node(run_time_variable(&name(1), 1.0)).unwrap();
    shared.model.commit(edit).unwrap();
    let mut edit = shared.model.edit();
    edit.delete_node(&id(0), true).unwrap();
    shared.model.commit(edit).unwrap();
    let cells = shared.model.load().value_cells();

    let mut edit = shared.model.edit();
    assert_eq!(edit.add_node(run_time_variable(&name(2), 2.0)), Ok(a));
    edit.delete_node(&id(1), true).unwrap();
    drop(edit);

    let mut edit = shared.model.edit();
    assert_eq!(
        edit.add_node(run_time_variable(&name(2), 2.0)),
        Ok(a),
        "V0's index is free again"
    );
    let c = edit.add_node(run_time_variable(&name(3), 3.0)).unwrap();
    assert!(c != a && c != b, "V1's index was not freed: {c}");
    shared.model.commit(edit).unwrap();
    let now = shared.model.load();
    assert!(now.node(&id(1)).is_some());
    assert_eq!(now.value_cells(), cells + 1, "V2 took V0's cell");
    let v2 = now.node(&id(2)).unwrap();
    assert_eq!(
        now.variable_value(v2, start()).unwrap().value,
        Variant::Double(2.0)
    );
}

#[test]
fn items_on_a_deleted_node_report_bad_node_id_unknown_and_a_readded_node_is_new() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let mut b = Client::on(&shared, 1);
    let (sa, sb) = (a.subscribe(50.0), b.subscribe(50.0));
    let id = NodeId::string(1, "Run.V1");
    // Added while both shards run: each takes the new version at its next timer pass.
    let mut edit = shared.model.edit();
    let index = edit.add_node(run_time_variable("Run.V1", 1.0)).unwrap();
    let committed = shared.model.commit(edit).unwrap();
    assert_eq!(committed.version, 1);
    assert!(committed
        .changes
        .iter()
        .any(|c| c.affected == id && c.verb & 1 != 0));
    assert!(
        committed
            .changes
            .iter()
            .any(|c| c.affected == NodeId::ns0(85) && c.verb & 4 != 0),
        "Objects gained a reference"
    );
    assert!(a.h.state.model_changed());
    // Exception-based on shard 0, sampled every 10 ms on shard 1.
    a.collect(10);
    b.collect(10);
    assert!(!a.h.state.model_changed());
    assert!(a.monitor(sa, id.clone(), 0.0, 10).status_code.is_good());
    assert!(b.monitor(sb, id.clone(), 10.0, 10).status_code.is_good());
    assert_eq!(a.collect(60).len(), 1);
    assert_eq!(b.collect(60).len(), 1);
    let space = shared.model.load();
    space
        .store_value(index, DataValue::new(Variant::Double(2.0)))
        .unwrap();
    assert_eq!(a.collect(60).len(), 1);
    assert_eq!(b.collect(60).len(), 1);
    // Objects lists it (its references were swapped).
    assert!(space
        .node(&NodeId::ns0(85))
        .unwrap()
        .references()
        .any(|r| r.target.node_id == id));

    // Deleted: both items report BadNodeIdUnknown, once.
    let mut edit = shared.model.edit();
    edit.delete_node(&id, true).unwrap();
    let committed = shared.model.commit(edit).unwrap();
    assert!(committed
        .changes
        .iter()
        .any(|c| c.affected == id && c.verb & 2 != 0));
    assert_eq!(
        statuses(&a.collect(60)),
        vec![StatusCode::BadNodeIdUnknown],
        "the exception-based item"
    );
    assert_eq!(
        statuses(&b.collect(60)),
        vec![StatusCode::BadNodeIdUnknown],
        "the sampled item"
    );
    assert!(!shared.address_space.changes().watched(index));
    assert!(!shared
        .model
        .load()
        .node(&NodeId::ns0(85))
        .unwrap()
        .references()
        .any(|r| r.target.node_id == id));
    // A store through the old version's node reaches nobody.
    let _ = space.store_value(index, DataValue::new(Variant::Double(3.0)));
    drop(space);
    assert!(a.collect(60).is_empty());

    // Added again with the same id, at the same index (both shards are past the delete):
    // a new node, the old items stay on the old one.
    let mut edit = shared.model.edit();
    let again = edit.add_node(run_time_variable("Run.V1", 5.0)).unwrap();
    shared.model.commit(edit).unwrap();
    assert_eq!(again, index, "the freed index is reused");
    let space = shared.model.load();
    assert_eq!(space.node_at(again).unwrap().generation(), 1);
    space
        .store_value(again, DataValue::new(Variant::Double(6.0)))
        .unwrap();
    assert!(a.collect(60).is_empty());
    assert!(b.collect(60).is_empty());
    // A new item follows the new node.
    assert!(a.monitor(sa, id.clone(), 0.0, 10).status_code.is_good());
    assert_eq!(a.collect(60).len(), 1);
    space
        .store_value(again, DataValue::new(Variant::Double(7.0)))
        .unwrap();
    let got = a.collect(60);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value, Variant::Double(7.0));
}

#[test]
fn nodes_come_and_go_from_another_thread_while_two_shards_read_and_sample() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let mut a = Client::on(&shared, 0);
    let mut b = Client::on(&shared, 1);
    let (sa, sb) = (a.subscribe(10.0), b.subscribe(10.0));
    assert!(a.monitor(sa, bench_node(3), 0.0, 100).status_code.is_good());
    assert!(b
        .monitor(sb, bench_node(3), 10.0, 100)
        .status_code
        .is_good());
    let writer = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            for round in 0..20u32 {
                let mut edit = shared.model.edit();
                for k in 0..50 {
                    let name = format!("Churn.{round}.{k}");
                    edit.add_node(run_time_variable(&name, k as f64)).unwrap();
                }
                if round > 0 {
                    for k in 0..50 {
                        let name = format!("Churn.{}.{k}", round - 1);
                        edit.delete_node(&NodeId::string(1, &name), true).unwrap();
                    }
                }
                shared.model.commit(edit).unwrap();
            }
        })
    };
    let mut rounds = 0;
    while !writer.is_finished() || rounds < 3 {
        a.write_i32(bench_node(3), rounds);
        a.collect(10);
        b.collect(10);
        rounds += 1;
    }
    writer.join().unwrap();
    a.collect(10);
    b.collect(10);
    let space = shared.model.load();
    assert_eq!(space.version(), 20);
    // The last round's 50 are there, the others gone; the indexes were reused.
    assert!(space.node(&NodeId::string(1, "Churn.19.0")).is_some());
    assert!(space.node(&NodeId::string(1, "Churn.18.0")).is_none());
    assert!(space.index_bound() as usize <= shared.address_space.len() + 20 * 50 + 50);
    // Both shards hold the last version; the items on a node that stayed kept reporting.
    assert!(!a.h.state.model_changed() && !b.h.state.model_changed());
    a.write_i32(bench_node(3), 1000);
    assert_eq!(int_values(&a.collect(30)), vec![1000]);
}
