//! Zero heap allocations per Read and Write in steady state, over the whole server path
//! (request chunk in → real ShardState and services → response chunk out). The figures
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
