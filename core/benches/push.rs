//! The change path (values pushed by the application into exception-based items), one shard,
//! with a counting allocator:
//!
//! * `store/unwatched`: `AddressSpace::store_value` of a Double nobody watches (per update).
//! * `store/watched`: the same into N Doubles each watched by one exception-based item of
//!   this shard: the cell store plus the copy into the shard's inbox (per update; the inbox
//!   is drained outside the timing).
//! * `deliver`: the shard's side of N pushed updates: one publishing cycle that drains the
//!   inbox into the items' queues, builds the NotificationMessage of N notifications and
//!   encodes the PublishResponse (as the connection does). Reported per notification.
//!
//! Then it prints heap allocations per pushed update and per notification in steady state
//! (`cargo bench -p uaring-core --bench push`): the server's side, from the Publish request
//! handed to the shard (built before counting, as the connection's decoder hands it over)
//! to the encoded PublishResponse given back to the pool. The server has no Demo folder
//! (its event generator and alarm allocate per event, off this path).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_core::{DataValue, Variant};

#[path = "../tests/support/counting.rs"]
mod counting;
#[path = "../tests/support/push_rig.rs"]
mod push_rig;

use counting::count;
use push_rig::PushRig;

const N: u32 = 10_000;

fn benches(c: &mut Criterion) {
    let mut b = PushRig::new(N);
    let mut g = c.benchmark_group("push");
    g.throughput(Throughput::Elements(1));
    let space = b.shared.clone();
    let unwatched = b.unwatched;
    let mut k = 0.0;
    g.bench_function("store/unwatched", |x| {
        x.iter(|| {
            k += 1.0;
            black_box(
                space
                    .address_space
                    .store_value(unwatched, DataValue::new(Variant::Double(k)))
                    .unwrap(),
            )
        })
    });
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function(BenchmarkId::new("store/watched", N), |x| {
        x.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let s = Instant::now();
                b.push_all();
                t += s.elapsed();
                b.publish_cycle(None);
            }
            t
        })
    });
    g.bench_function(BenchmarkId::new("deliver", N), |x| {
        x.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                b.push_all();
                let s = Instant::now();
                b.publish_cycle(Some(N as usize));
                t += s.elapsed();
            }
            t
        })
    });
    g.finish();
    for _ in 0..10 {
        b.push_all();
        b.publish_cycle(Some(N as usize));
    }
    // Six rounds fit the shard's inbox (65,536): none is lost.
    let ((), pushed, _) = count(|| {
        for _ in 0..6 {
            b.push_all();
        }
    });
    b.publish_cycle(None);
    for _ in 0..10 {
        b.push_all();
        b.publish_cycle(Some(N as usize));
    }
    let mut delivered = 0;
    for _ in 0..50 {
        b.push_all();
        let req = b.publish_request();
        let ((), n, _) = count(|| b.publish_cycle_with(req, Some(N as usize)));
        delivered += n;
    }
    println!(
        "push: {:.4} heap allocations per pushed update ({pushed} in {}), {:.4} per notification ({delivered} in 50 messages of {N}; queue 4; steady state)",
        pushed as f64 / (6.0 * N as f64),
        6 * N,
        delivered as f64 / (50.0 * N as f64)
    );
    let stats = b.state.subscriptions().stats();
    println!(
        "push: {} changes offered, {} lost to a full inbox",
        stats.changes, stats.changes_lost
    );
}

criterion_group!(name = push; config = Criterion::default().sample_size(20); targets = benches);
criterion_main!(push);
