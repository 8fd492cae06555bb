//! Heap allocations per request over the whole server path (request chunk in → real
//! ServiceState and services → response chunk out), steady state after a warm-up:
//! `cargo bench -p uaring-core --bench allocations`. tests/allocations.rs asserts the zeros.

#[path = "../tests/support/alloc_count.rs"]
mod alloc_count;

use alloc_count::{browse, read, write, Net};

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs this too: both just print.
    let mut net = Net::with_session();
    println!("{:<32} {:>12} {:>12}", "request", "allocs/req", "bytes/req");
    let cases: Vec<(
        String,
        Box<dyn Fn() -> uaring_core::generated::messages::Request>,
    )> = vec![
        ("Read, 1 value".into(), Box::new(|| read(1))),
        ("Read, 10 values".into(), Box::new(|| read(10))),
        ("Read, 100 values".into(), Box::new(|| read(100))),
        ("Write, 1 value".into(), Box::new(|| write(1))),
        ("Write, 10 values".into(), Box::new(|| write(10))),
        ("Browse, Objects folder".into(), Box::new(browse)),
    ];
    for (name, make) in cases {
        let (allocs, bytes) = net.allocations_per_request(make, 2_000, 1_000);
        println!("{name:<32} {allocs:>12.2} {bytes:>12.1}");
    }
    // Values with heap memory (stored once first).
    net.call(alloc_count::write_heap_values());
    for (k, (what, _, _)) in alloc_count::HEAP_READS.iter().enumerate() {
        let (allocs, bytes) =
            net.allocations_per_request(|| alloc_count::read_heap_values(Some(k)), 2_000, 1_000);
        let name = format!("Read, {what}");
        println!("{name:<32} {allocs:>12.2} {bytes:>12.1}");
    }
    // Publish: ten exception-based items changed before each Publish (acknowledging the
    // last message), the publishing cycle and the response (tests/allocations.rs asserts 0).
    let mut net = Net::with_session();
    let mut publish = alloc_count::PublishLoop::new(&mut net, 10);
    let (rounds, measured) = (2_000u64, 1_000u64);
    let (mut allocs, mut bytes) = (0, 0);
    for round in 0..rounds {
        let (a, b, notifications) = publish.round(&mut net);
        assert_eq!(notifications, 10);
        if round >= rounds - measured {
            (allocs, bytes) = (allocs + a, bytes + b);
        }
    }
    let name = "Publish, 10 data changes";
    println!(
        "{name:<32} {:>12.2} {:>12.1}",
        allocs as f64 / measured as f64,
        bytes as f64 / measured as f64
    );
}
