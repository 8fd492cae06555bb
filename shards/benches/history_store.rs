//! The history store's figures (docs/History.md): what one writer thread ingests, and
//! how long a read of 1,000,000 raw values of one series takes.
//!
//! * `ingest_1000x1000`: 1,000 series × 1,000 Doubles (slowly changing, 1 Hz) pushed
//!   through [`Ingest::try_push`] by one producer thread to one writer thread, flush
//!   interval 1 s; timed from the first push until the writer has taken the last sample
//!   (a fresh store each iteration; its final flush is not timed).
//! * `ingest_sustained_5m`: the same with 5,000 samples a series (5 M, several flush
//!   intervals and a WAL checkpoint).
//! * `append_direct_1m`: the same 1,000,000 samples through [`Store::append`] (the
//!   writer's own path without the queue), then a flush (timed).
//! * `read_1m_raw`: one series of 1,000,000 samples (sealed chunks), read whole into a
//!   reused Vec.
//!
//! `cargo bench -p uaring --bench history_store`

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use uaring::history::{start_writer, Ingest, Sample, SeriesId, Store, StoreConfig};
use uaring_core::types::Variant;

const SECOND: i64 = 10_000_000;
const T0: i64 = 134_116_000_000_000_000;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uaring-hist-bench-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn value(series: usize, i: i64) -> f64 {
    let x = 20.0 + series as f64 * 0.1 + 10.0 * (i as f64 * std::f64::consts::TAU / 21_600.0).sin();
    (x * 100.0).round() / 100.0
}

fn sample(series: usize, i: i64) -> Sample {
    let t = T0 + i * SECOND;
    Sample {
        source_ts: t,
        server_ts: t,
        status: 0,
        value: Variant::Double(value(series, i)),
    }
}

fn open(name: &str) -> (PathBuf, std::sync::Arc<Store>, Vec<SeriesId>) {
    let dir = tmp(name);
    let store = Store::open(StoreConfig::new(&dir)).expect("open");
    let keys: Vec<String> = (0..1000).map(|k| format!("ns=2;s=Bench.{k}")).collect();
    let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
    let ids = store.series_many(&keys).expect("series");
    (dir, store, ids)
}

fn push_all(ingest: &Ingest, ids: &[SeriesId], per_series: i64) {
    for i in 0..per_series {
        for (k, &id) in ids.iter().enumerate() {
            // A benchmark producer waits for room (a shard would count a drop): the
            // writer is what is measured.
            while ingest.queued() >= ingest.capacity() {
                std::hint::spin_loop();
            }
            if !ingest.try_push(id, sample(k, i)) {
                panic!("a single producer found the queue full after seeing room");
            }
        }
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("history");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Elements(1_000_000));

    for (name, per_series) in [("ingest_1000x1000", 1000i64), ("ingest_sustained_5m", 5000)] {
        let n = per_series as u64 * 1000;
        g.throughput(Throughput::Elements(n));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let (dir, store, ids) = open("ingest");
                    let (ingest, writer) = start_writer(store.clone()).expect("writer");
                    let t = Instant::now();
                    push_all(&ingest, &ids, per_series);
                    while store.stats().appended < n {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    total += t.elapsed();
                    writer.shutdown().expect("shutdown");
                    let st = store.stats();
                    assert_eq!(st.dropped, 0);
                    assert_eq!(st.durable, n);
                    drop(ingest);
                    drop(store);
                    let _ = std::fs::remove_dir_all(&dir);
                }
                total
            })
        });
    }
    g.throughput(Throughput::Elements(1_000_000));

    g.bench_function("append_direct_1m", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (dir, store, ids) = open("direct");
                let t = Instant::now();
                for i in 0..1000i64 {
                    store
                        .append(ids.iter().enumerate().map(|(k, &id)| (id, sample(k, i))))
                        .expect("append");
                }
                store.flush().expect("flush");
                total += t.elapsed();
                drop(store);
                let _ = std::fs::remove_dir_all(&dir);
            }
            total
        })
    });

    let dir = tmp("read");
    {
        let store = Store::open(StoreConfig::new(&dir)).expect("open");
        let id = store.series("ns=2;s=Read").expect("series");
        for block in 0..1000i64 {
            store
                .append((0..1000).map(|i| (id, sample(0, block * 1000 + i))))
                .expect("append");
        }
        store.flush().expect("flush");
    }
    let store = Store::open(StoreConfig::new(&dir)).expect("reopen");
    let id = store.lookup("ns=2;s=Read").expect("series");
    let mut out = Vec::with_capacity(1_000_000);
    g.bench_function("read_1m_raw", |b| {
        b.iter(|| {
            out.clear();
            store
                .read(id, i64::MIN, i64::MAX, false, 0, &mut out)
                .expect("read");
            assert_eq!(out.len(), 1_000_000);
        })
    });
    g.finish();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

criterion_group!(benches, bench);
criterion_main!(benches);
