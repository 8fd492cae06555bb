//! Zero heap allocations per Read, Write, Browse and Publish in steady state, over the whole
//! server path (request chunk in → real ServiceState and services → response chunk out), and
//! on the change path (pushed values to encoded notifications). The figures
//! for every service are printed by `cargo bench -p uaring-core --bench allocations`.

#[path = "support/alloc_count.rs"]
mod alloc_count;

use alloc_count::{browse, read, write, Net};

#[test]
fn read_allocates_nothing_in_steady_state() {
    let mut net = Net::with_session();
    for n in [1, 10, 100] {
        let (allocs, bytes) = net.allocations_per_request(|| read(n), 300, 200);
        assert_eq!((allocs, bytes), (0.0, 0.0), "Read of {n} values");
    }
}

/// Reads of values with heap memory (a String, a String array, a structure, a 1,000-element
/// array, IndexRanges of arrays) copy into the recycled response's slots: no allocation.
#[test]
fn reads_of_strings_arrays_structures_and_ranges_allocate_nothing_in_steady_state() {
    use uaring_core::generated::messages::Response;
    use uaring_core::types::Variant;
    let mut net = Net::with_session();
    match net.call(alloc_count::write_heap_values()) {
        Response::Write(w) => assert!(w.results.iter().all(|s| s.is_good()), "{w:?}"),
        r => panic!("{r:?}"),
    }
    for (k, (what, _, _)) in alloc_count::HEAP_READS.iter().enumerate() {
        let (allocs, bytes) =
            net.allocations_per_request(|| alloc_count::read_heap_values(Some(k)), 300, 200);
        assert_eq!((allocs, bytes), (0.0, 0.0), "Read of {what}");
    }
    let (allocs, bytes) =
        net.allocations_per_request(|| alloc_count::read_heap_values(None), 300, 200);
    assert_eq!((allocs, bytes), (0.0, 0.0), "Read of all of them at once");
    // And the values read are the ones stored, ranges applied.
    let Response::Read(r) = net.call(alloc_count::read_heap_values(None)) else {
        panic!("no Read response");
    };
    let stored = alloc_count::heap_values();
    let values: Vec<&Variant> = r.results.iter().map(|d| &d.value).collect();
    assert_eq!(values[0], &stored[0].1);
    assert_eq!(values[1], &stored[1].1);
    assert_eq!(values[2], &stored[2].1);
    let ints = |v: &Variant| -> Vec<i32> {
        v.as_array()
            .map(|a| {
                a.values
                    .iter()
                    .map(|x| match x {
                        Variant::Int32(i) => *i,
                        _ => -1,
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(ints(values[3]), (0..1000).collect::<Vec<i32>>());
    assert_eq!(ints(values[4]), (100..200).collect::<Vec<i32>>());
    let strings = stored[1].1.as_array().expect("array");
    assert_eq!(
        values[5].as_array().map(|a| a.values.clone()),
        Some(strings.values[2..5].to_vec())
    );
    assert!(r.results.iter().all(|d| d.status.is_none()), "{r:?}");
}

#[test]
fn write_allocates_nothing_in_steady_state() {
    let mut net = Net::with_session();
    for n in [1, 10, 100] {
        let (allocs, bytes) = net.allocations_per_request(|| write(n), 300, 200);
        assert_eq!((allocs, bytes), (0.0, 0.0), "Write of {n} values");
    }
}

#[test]
fn browse_allocates_nothing_in_steady_state() {
    let mut net = Net::with_session();
    let (allocs, bytes) = net.allocations_per_request(browse, 300, 200);
    assert_eq!((allocs, bytes), (0.0, 0.0), "Browse of the Objects folder");
}

#[path = "support/push_rig.rs"]
mod push_rig;

/// The change path: values stored into watched Doubles, drained into the items' queues,
/// built into NotificationMessages and encoded into PublishResponses (the connection's
/// decoder hands the Publish requests over, as in the bench).
#[test]
fn pushed_values_and_their_notifications_allocate_nothing_in_steady_state() {
    const N: u32 = 1_000;
    let mut rig = push_rig::PushRig::new(N);
    for _ in 0..10 {
        rig.push_all();
        rig.publish_cycle(Some(N as usize));
    }
    let ((), pushed, bytes) = alloc_count::count(|| {
        for _ in 0..5 {
            rig.push_all();
        }
    });
    assert_eq!((pushed, bytes), (0, 0), "5 × {N} pushed updates");
    rig.publish_cycle(None);
    for _ in 0..10 {
        rig.push_all();
        rig.publish_cycle(Some(N as usize));
    }
    for round in 0..20 {
        rig.push_all();
        let req = rig.publish_request();
        let ((), allocs, bytes) =
            alloc_count::count(|| rig.publish_cycle_with(req, Some(N as usize)));
        assert_eq!(
            (allocs, bytes),
            (0, 0),
            "message {round} of {N} notifications"
        );
    }
}

/// Publish over the whole server path: the Publish request chunk in (decoded into the
/// recycled request), its acknowledgement, the publishing cycle, the response chunk out; the
/// values change between the cycles (stores into ten exception-based items' Int32s).
#[test]
fn publish_allocates_nothing_in_steady_state() {
    const N: u32 = 10;
    let mut net = Net::with_session();
    let mut publish = alloc_count::PublishLoop::new(&mut net, N);
    for round in 0..60 {
        let (allocs, bytes, notifications) = publish.round(&mut net);
        assert_eq!(
            notifications, N as usize,
            "round {round}: one per changed item"
        );
        if round >= 30 {
            assert_eq!((allocs, bytes), (0, 0), "Publish round {round}");
        }
    }
}
