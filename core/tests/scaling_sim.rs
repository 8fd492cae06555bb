//! docs/Scaling.md checked: 64 shards simulated in one process (their inboxes, wakers and
//! version acknowledgements; no threads), counting what each operation sends across shards.
//!
//! * A store into a value cell: one cell write and one watcher-word load, then one inbox
//!   entry per *watching* shard (O(watchers), not O(shards)); a store nobody watches sends
//!   nothing.
//! * A committed address-space edit: one wake per registered shard (O(shards)); each shard
//!   then takes the version with one pointer load and acknowledges it with one store; the
//!   writer's next edit reads every shard's acknowledgement (O(shards)).
//! * An event: one ring slot written, one slot read per shard that has a cursor (O(shards)
//!   reads of one shared slot).

mod dispatch_util;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use dispatch_util::*;
use uaring_core::address_space::Change;
use uaring_core::config::ServerConfig;
use uaring_core::events::bus::EventBus;
use uaring_core::events::Event;
use uaring_core::{DataValue, NodeId, Variant};

const SHARDS: usize = 64;

fn wakes(w: &[Arc<AtomicU64>]) -> Vec<u64> {
    w.iter().map(|x| x.swap(0, Ordering::Relaxed)).collect()
}

#[test]
fn sixty_four_shards_cost_what_the_scaling_model_says() {
    let shared = dispatch_util::content::new(ServerConfig::default(), start()).unwrap();
    let space = shared.model.load();
    let hub = space.changes();
    let woken: Vec<Arc<AtomicU64>> = (0..SHARDS).map(|_| Arc::default()).collect();
    for (s, w) in woken.iter().enumerate() {
        hub.open(s, 1024);
        let w = w.clone();
        hub.set_waker(
            s,
            Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            }),
        );
    }
    let node = space.node_index(&NodeId::numeric(1, 1001)).unwrap();

    // A store: entries = watching shards, whatever the number of shards.
    let mut v = 0;
    let mut store = |expect: &[usize]| {
        let queued = hub.counters().queued.load(Ordering::Relaxed);
        v += 1;
        space
            .store_value(node, DataValue::new(Variant::Int32(v)))
            .unwrap();
        let sent = hub.counters().queued.load(Ordering::Relaxed) - queued;
        assert_eq!(
            sent as usize,
            expect.len(),
            "entries for {} watchers",
            expect.len()
        );
        for s in 0..SHARDS {
            let mut got = 0;
            hub.drain(s, usize::MAX, |c: Change| {
                assert_eq!((c.node_index, c.version % 2), (node, 0));
                got += 1;
            });
            assert_eq!(got, expect.contains(&s) as usize, "shard {s}");
        }
        sent as usize * std::mem::size_of::<Change>()
    };
    assert_eq!(store(&[]), 0, "nobody watches: nothing crosses");
    let mut watching = Vec::new();
    for k in [1usize, 2, 8, 32, 63, 64] {
        while watching.len() < k {
            hub.watch(watching.len(), node);
            watching.push(watching.len());
        }
        let bytes = store(&watching);
        assert_eq!(bytes, k * std::mem::size_of::<Change>());
    }
    // A scalar travels inline in the entry (no allocation): a store sends k entries.
    println!("inbox entry: {} bytes", std::mem::size_of::<Change>());
    assert_eq!(hub.counters().lost.load(Ordering::Relaxed), 0);
    wakes(&woken);

    // A committed edit: one wake per registered shard; each takes it and acknowledges.
    for s in 0..SHARDS {
        shared.model.register(s, space.version());
    }
    let mut edit = shared.model.edit();
    edit.add_node(uaring_core::address_space::build::make::variable(
        NodeId::string(1, "Sim.V"),
        uaring_core::QualifiedName::new(1, "Sim.V"),
        NodeId::ns0(11),
        -1,
        Vec::new(),
        DataValue::new(Variant::Double(1.0)),
        3,
        0.0,
        Some((NodeId::ns0(85), 35)),
    ))
    .unwrap();
    let version = shared.model.commit(edit).unwrap().version;
    assert_eq!(wakes(&woken), vec![1; SHARDS], "one wake per shard");
    assert_eq!(shared.model.oldest_held(), space.version());
    for s in 0..SHARDS {
        // What a shard's refresh does: one load of the current version, one acknowledgement.
        let current = shared.model.load();
        assert_eq!(current.version(), version);
        shared.model.ack(s, current.version());
        let expect = if s + 1 < SHARDS {
            space.version()
        } else {
            version
        };
        assert_eq!(shared.model.oldest_held(), expect, "after {} acks", s + 1);
    }

    // An event: one slot written; each shard's cursor reads it once.
    let bus = EventBus::new(64);
    let mut cursors: Vec<_> = (0..SHARDS).map(|_| bus.cursor()).collect();
    bus.publish(Event {
        event_id: Default::default(),
        event_type: NodeId::ns0(2041),
        type_chain: Arc::from(vec![NodeId::ns0(2041)]),
        source_node: NodeId::ns0(2253),
        source_name: Default::default(),
        time: Default::default(),
        receive_time: Default::default(),
        message: Default::default(),
        severity: 1,
        condition_id: None,
        fields: Vec::new(),
        notifiers: Arc::from(vec![NodeId::ns0(2253)]),
    });
    assert_eq!(bus.published(), 1);
    let mut read = 0;
    for c in &mut cursors {
        let missed = c.poll(&bus, |_| read += 1);
        assert_eq!(missed, 0);
    }
    assert_eq!(read, SHARDS);
    for c in &mut cursors {
        c.poll(&bus, |_| panic!("read twice"));
    }
    for c in cursors {
        bus.close(c);
    }
}
