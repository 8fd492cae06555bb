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
