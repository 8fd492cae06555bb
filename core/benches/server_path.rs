//! Server CPU per request over the whole server path, without sockets: request chunk bytes in
//! → ServerConnection → the real ServiceState and services → response chunk bytes out, with an
//! activated session (the set-up of tests/allocations.rs). A batch is what the batched load
//! client puts in one recv: `n` Read chunks of one value each, back to back, fed to one
//! `on_recv`. Criterion reports the time per request (throughput in elements).
//! `cargo bench -p uaring-core --bench server_path`. What it leaves out — the kernel's TCP work,
//! the event loop — is in uaring-bench's tables (docs/Benchmarks.md).

#[path = "../tests/support/alloc_count.rs"]
#[allow(dead_code)]
mod alloc_count;

use std::time::{Duration, Instant};

use alloc_count::{browse, read, write, Net};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uaring_core::generated::messages::Request;
use uaring_core::server::connection::ConnStatus;

fn batch(c: &mut Criterion, name: &str, make: fn() -> Request, sizes: &[usize]) {
    let mut g = c.benchmark_group(format!("server path/{name}"));
    for &n in sizes {
        let mut net = Net::with_session();
        // Encoded once, sent as is (like the load client): the token is the session's.
        let mut req = make();
        req.request_header_mut().authentication_token = net.client.authentication_token().clone();
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        let mut input = Vec::with_capacity(n * (body.len() + 64));
        let mut out = Vec::with_capacity(64 * 1024);
        // The responses are real ones: a first batch decodes, one Good response per request
        // (the measured batches are not decoded: the client would only slow the bench down).
        for _ in 0..n {
            net.client.send_encoded(&body, &mut input).expect("send");
        }
        assert_eq!(
            net.server
                .on_recv(&mut net.state, net.now, &input, &mut out),
            ConnStatus::Open
        );
        net.client
            .on_recv(net.now, &out, &mut Vec::new())
            .expect("client decodes the responses");
        let mut got = 0;
        while let Some((_, resp)) = net.client.poll_response() {
            assert!(resp.response_header().service_result.is_good(), "{resp:?}");
            got += 1;
        }
        assert_eq!(got, n);
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(BenchmarkId::from_parameter(n), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    input.clear();
                    for _ in 0..n {
                        net.client.send_encoded(&body, &mut input).expect("send");
                    }
                    out.clear();
                    let t = Instant::now();
                    let st = net
                        .server
                        .on_recv(&mut net.state, net.now, &input, &mut out);
                    spent += t.elapsed();
                    assert_eq!(st, ConnStatus::Open);
                }
                spent
            })
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    batch(c, "Read, 1 value", || read(1), &[1, 32, 100]);
    batch(c, "Read, 10 values", || read(10), &[1]);
    batch(c, "Write, 1 value", || write(1), &[1, 32]);
    batch(c, "Browse, Objects folder", browse, &[1]);
}

criterion_group!(name = server_path; config = Criterion::default().sample_size(30); targets = benches);
criterion_main!(server_path);
