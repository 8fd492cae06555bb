//! The history store: round trips, reads, deletes, retention, damaged files, a kill -9
//! during ingest, and the bytes a sample costs on disk.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use uaring::history::archive::Archive;
use uaring::history::{
    start_writer, OnFull, Resume, Sample, SeriesId, Store, StoreConfig, StoreError,
};
use uaring_core::types::{
    Array, BuiltinType, ByteString, DateTime, ExpandedNodeId, ExtensionObject, ExtensionObjectBody,
    Guid, LocalizedText, NodeId, QualifiedName, StatusCode, UaString, Variant, XmlElement,
};

const SECOND: i64 = 10_000_000;
/// 2026-01-01 in OPC UA ticks, roughly.
const T0: i64 = 134_116_000_000_000_000;

/// The tests that load the CPU (and the one that measures a child process) run one at a
/// time.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());
fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY.lock().unwrap_or_else(|e| e.into_inner())
}

fn tmp(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let d = std::env::temp_dir().join(format!(
        "uaring-hist-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cfg(dir: &Path) -> StoreConfig {
    StoreConfig::new(dir)
}

fn s(ts: i64, v: Variant) -> Sample {
    Sample {
        source_ts: ts,
        server_ts: ts + 3,
        status: 0,
        value: v,
    }
}

fn read_all(store: &Store, id: SeriesId) -> Vec<Sample> {
    let mut out = Vec::new();
    let r = store
        .read(id, i64::MIN, i64::MAX, false, 0, &mut out)
        .unwrap();
    assert_eq!(r, None);
    out
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(prefix))
        })
        .collect();
    v.sort();
    v
}

fn every_kind(i: i64) -> Vec<Variant> {
    let g = Guid {
        data1: i as u32,
        data2: 2,
        data3: 3,
        data4: [1, 2, 3, 4, 5, 6, 7, i as u8],
    };
    vec![
        Variant::Empty,
        Variant::Boolean(i % 3 == 0),
        Variant::SByte((i as i8).wrapping_neg()),
        Variant::Byte(i as u8),
        Variant::Int16(-(i as i16) * 3),
        Variant::UInt16(i as u16 * 7),
        Variant::Int32(-(i as i32) * 1000),
        Variant::UInt32(i as u32 * 100_000),
        Variant::Int64(i64::MIN + i),
        Variant::UInt64(u64::MAX - i as u64),
        Variant::Float(i as f32 * 0.1),
        Variant::Double((i as f64).sqrt()),
        Variant::String(UaString::from(format!("value {i}"))),
        Variant::DateTime(DateTime(T0 + i)),
        Variant::Guid(g),
        Variant::ByteString(ByteString::from(vec![i as u8; (i % 5) as usize])),
        Variant::XmlElement(XmlElement(UaString::from("<a/>"))),
        Variant::NodeId(Box::new(NodeId::string(2, format!("n{i}")))),
        Variant::ExpandedNodeId(Box::new(ExpandedNodeId {
            node_id: NodeId::string(1, "x"),
            namespace_uri: UaString::from("urn:x"),
            server_index: 1,
        })),
        Variant::StatusCode(StatusCode(0x8000_0000 + i as u32)),
        Variant::QualifiedName(Box::new(QualifiedName {
            namespace_index: 1,
            name: UaString::from("q"),
        })),
        Variant::LocalizedText(Box::new(LocalizedText {
            locale: UaString::from("en"),
            text: UaString::from(format!("t{i}")),
        })),
        Variant::ExtensionObject(Box::new(ExtensionObject {
            type_id: NodeId::string(3, "T"),
            body: ExtensionObjectBody::Binary(vec![1, 2, i as u8]),
        })),
        Variant::Array(Box::new(Array {
            value_type: BuiltinType::Double,
            values: vec![Variant::Double(1.0), Variant::Double(i as f64)],
            dimensions: None,
        })),
        // Mixed kinds in one series.
        if i % 2 == 0 {
            Variant::Double(i as f64)
        } else {
            Variant::Int32(i as i32)
        },
    ]
}

#[test]
fn every_variant_kind_round_trips_through_chunks_wal_and_reopen() {
    let dir = tmp("kinds");
    let mut c = cfg(&dir);
    c.chunk_samples = 100;
    let store = Store::open(c.clone()).unwrap();
    let kinds = every_kind(0).len();
    let keys: Vec<String> = (0..kinds).map(|k| format!("ns=2;s=Kind{k}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
    let ids = store.series_many(&key_refs).unwrap();
    assert_eq!(ids, (0..kinds as u32).map(SeriesId).collect::<Vec<_>>());
    assert_eq!(store.series(&keys[3]).unwrap(), ids[3]);
    assert_eq!(
        store
            .series_many(&[&keys[1], "ns=2;s=New", "ns=2;s=New"])
            .unwrap(),
        vec![ids[1], SeriesId(kinds as u32), SeriesId(kinds as u32)]
    );
    let n = 250; // two sealed chunks and a head each
    let mut expected = vec![Vec::new(); kinds];
    for i in 0..n {
        for (k, v) in every_kind(i).into_iter().enumerate() {
            let mut smp = s(T0 + i * SECOND, v);
            smp.status = if i % 17 == 0 { 0x8000_0000 } else { 0 };
            smp.server_ts = smp.source_ts + (i % 4) * 10;
            expected[k].push(smp.clone());
            store.append([(ids[k], smp)]).unwrap();
        }
    }
    for k in 0..kinds {
        assert_eq!(read_all(&store, ids[k]), expected[k], "kind {k}");
    }
    store.flush().unwrap();
    drop(store);
    let store = Store::open(c).unwrap();
    for k in 0..kinds {
        assert_eq!(store.lookup(&format!("ns=2;s=Kind{k}")), Some(ids[k]));
        assert_eq!(
            read_all(&store, ids[k]),
            expected[k],
            "kind {k} after reopen"
        );
    }
    assert_eq!(store.lookup("ns=2;s=New"), Some(SeriesId(kinds as u32)));
    assert_eq!(store.key(ids[2]).as_deref(), Some(keys[2].as_str()));
    let st = store.stats();
    assert_eq!(st.samples, (kinds as i64 * n) as u64);
    assert!(st.chunks >= 2 * kinds as u64, "{st:?}");
    // The counters alone: the same counters, and none of the sizes that walk the series.
    let c = store.counters();
    assert_eq!(
        (c.series, c.samples, c.head_samples, c.chunks),
        (0, 0, 0, 0)
    );
    assert_eq!(
        uaring::history::StoreStats {
            series: st.series,
            samples: st.samples,
            head_samples: st.head_samples,
            chunks: st.chunks,
            ..c
        },
        st
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Reads everything with `limit` a page, through the resume positions.
fn paged(
    store: &Store,
    id: SeriesId,
    from: i64,
    to: i64,
    reverse: bool,
    limit: usize,
) -> Vec<Sample> {
    let mut all = Vec::new();
    let mut page = Vec::new();
    let mut r = store.read(id, from, to, reverse, limit, &mut page).unwrap();
    loop {
        assert!(page.len() <= limit);
        all.append(&mut page);
        let Some(res) = r else { break };
        assert_eq!(page.len(), 0);
        let bound = if reverse { from } else { to };
        r = store
            .read_from(id, res, bound, reverse, limit, &mut page)
            .unwrap();
        assert!(!page.is_empty(), "a resume position always yields a sample");
    }
    all
}

#[test]
fn reads_forward_reverse_with_limits_resume_and_equal_timestamps() {
    let dir = tmp("reads");
    let mut c = cfg(&dir);
    c.chunk_samples = 16;
    let store = Store::open(c).unwrap();
    let id = store.series("ns=2;s=R").unwrap();
    // 0..1000 s, and runs of 1..=40 samples sharing a timestamp every 50 s (some across
    // chunk boundaries).
    let mut expected = Vec::new();
    let mut seq = 0;
    for t in 0..1000i64 {
        let copies = if t % 50 == 7 { 1 + t / 25 } else { 1 };
        for _ in 0..copies {
            let smp = s(T0 + t * SECOND, Variant::Int64(seq));
            seq += 1;
            expected.push(smp.clone());
            store.append([(id, smp)]).unwrap();
        }
    }
    assert_eq!(read_all(&store, id), expected);
    let rev: Vec<Sample> = expected.iter().rev().cloned().collect();
    for limit in [1, 3, 7, 40, 1000] {
        assert_eq!(
            paged(&store, id, i64::MIN, i64::MAX, false, limit),
            expected
        );
        assert_eq!(paged(&store, id, i64::MIN, i64::MAX, true, limit), rev);
    }
    // Inclusive bounds.
    let (from, to) = (T0 + 57 * SECOND, T0 + 207 * SECOND);
    let want: Vec<Sample> = expected
        .iter()
        .filter(|x| x.source_ts >= from && x.source_ts <= to)
        .cloned()
        .collect();
    assert_eq!(want.first().unwrap().source_ts, from);
    assert_eq!(want.last().unwrap().source_ts, to);
    assert_eq!(paged(&store, id, from, to, false, 5), want);
    let want_rev: Vec<Sample> = want.iter().rev().cloned().collect();
    assert_eq!(paged(&store, id, from, to, true, 5), want_rev);
    // The resume position within a run of equal timestamps.
    let mut page = Vec::new();
    let r = store.read(id, from, to, false, 2, &mut page).unwrap();
    assert_eq!(r, Some(Resume { ts: from, skip: 2 }));
    // Bounding values.
    let before = store.last_before(id, from).unwrap().unwrap();
    assert_eq!(before.source_ts, from - SECOND);
    let at57: Vec<&Sample> = expected.iter().filter(|x| x.source_ts == from).collect();
    let after = store.first_after(id, from - SECOND).unwrap().unwrap();
    assert_eq!(&after, at57[0]);
    let last_of_run = store.last_before(id, from + SECOND).unwrap().unwrap();
    assert_eq!(&last_of_run, *at57.last().unwrap());
    assert_eq!(store.last_before(id, T0).unwrap(), None);
    assert_eq!(store.first_after(id, T0 + 999 * SECOND).unwrap(), None);
    // An empty range and an unknown series.
    page.clear();
    assert_eq!(store.read(id, to, from, false, 0, &mut page).unwrap(), None);
    assert!(page.is_empty());
    assert!(store.read(SeriesId(99), 0, 1, false, 0, &mut page).is_err());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn out_of_order_samples_are_merged_stably() {
    let dir = tmp("ooo");
    let mut c = cfg(&dir);
    c.chunk_samples = 8;
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("ooo").unwrap();
    let mut expected = Vec::new();
    for i in 0..200i64 {
        // Descending blocks, with repeats: the order within equal timestamps is arrival.
        let t = T0 + ((i * 37) % 50) * SECOND;
        let smp = s(t, Variant::Int32(i as i32));
        expected.push(smp.clone());
        store.append([(id, smp)]).unwrap();
    }
    expected.sort_by_key(|x| x.source_ts); // stable
    assert_eq!(read_all(&store, id), expected);
    assert_eq!(paged(&store, id, i64::MIN, i64::MAX, false, 9), expected);
    let rev: Vec<Sample> = expected.iter().rev().cloned().collect();
    assert_eq!(paged(&store, id, i64::MIN, i64::MAX, true, 9), rev);
    store.flush().unwrap();
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id), expected);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_late_sample_in_an_ordered_series_merges_only_where_it_lands() {
    let dir = tmp("late");
    let mut c = cfg(&dir);
    c.chunk_samples = 8;
    let store = Store::open(c).unwrap();
    let id = store.series("late").unwrap();
    let mut expected = Vec::new();
    let push = |t: i64, v: i32, expected: &mut Vec<Sample>| {
        let smp = s(T0 + t * SECOND, Variant::Int32(v));
        expected.push(smp.clone());
        store.append([(id, smp)]).unwrap();
    };
    let mut v = 0;
    for t in 0..2000 {
        push(t, v, &mut expected);
        v += 1;
    }
    push(500, v, &mut expected); // late, inside an old chunk's span
    push(1999, v + 1, &mut expected); // late, equal to the newest
    v += 2;
    for t in 2000..2100 {
        push(t, v, &mut expected);
        v += 1;
    }
    push(2050, v, &mut expected); // late, into the head's span
    expected.sort_by_key(|x| x.source_ts); // stable: equal timestamps by arrival
    assert_eq!(read_all(&store, id), expected);
    let rev: Vec<Sample> = expected.iter().rev().cloned().collect();
    assert_eq!(paged(&store, id, i64::MIN, i64::MAX, false, 13), expected);
    assert_eq!(paged(&store, id, i64::MIN, i64::MAX, true, 13), rev);
    for (a, b) in [(0, 100), (495, 505), (1990, 2010), (2040, 2060), (500, 500)] {
        let (from, to) = (T0 + a * SECOND, T0 + b * SECOND);
        let want: Vec<Sample> = expected
            .iter()
            .filter(|x| x.source_ts >= from && x.source_ts <= to)
            .cloned()
            .collect();
        assert_eq!(paged(&store, id, from, to, false, 4), want, "{a}..{b}");
        let want_rev: Vec<Sample> = want.iter().rev().cloned().collect();
        assert_eq!(
            paged(&store, id, from, to, true, 4),
            want_rev,
            "{a}..{b} reverse"
        );
    }
    let last = store.last_before(id, T0 + 2000 * SECOND).unwrap().unwrap();
    assert_eq!(last.value, Variant::Int32(2001)); // the later of the two at 1999
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn delete_range_removes_whole_and_partial_chunks_durably() {
    let dir = tmp("delete");
    let mut c = cfg(&dir);
    c.chunk_samples = 10;
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("d").unwrap();
    let other = store.series("other").unwrap();
    let mut all = Vec::new();
    for i in 0..105i64 {
        let smp = s(T0 + i * SECOND, Variant::Double(i as f64));
        all.push(smp.clone());
        store.append([(id, smp.clone()), (other, smp)]).unwrap();
    }
    // 15..=64: half of one chunk, four whole ones, half of another.
    let (from, to) = (T0 + 15 * SECOND, T0 + 64 * SECOND);
    assert_eq!(store.delete_range(id, from, to).unwrap(), 50);
    // Deleting again finds nothing; the head (100..105) goes too.
    assert_eq!(store.delete_range(id, from, to).unwrap(), 0);
    assert_eq!(
        store
            .delete_range(id, T0 + 102 * SECOND, T0 + 200 * SECOND)
            .unwrap(),
        3
    );
    let keep = |x: &&Sample| {
        !(x.source_ts >= from && x.source_ts <= to) && x.source_ts < T0 + 102 * SECOND
    };
    let mut expected: Vec<Sample> = all.iter().filter(keep).cloned().collect();
    assert_eq!(read_all(&store, id), expected);
    assert_eq!(read_all(&store, other), all);
    // New samples inside a deleted range stay.
    let late = s(T0 + 20 * SECOND, Variant::Double(-1.0));
    store.append([(id, late.clone())]).unwrap();
    expected.insert(15, late);
    assert_eq!(read_all(&store, id), expected);
    // Replace.
    let mut rep = all[3].clone();
    rep.value = Variant::Double(333.0);
    assert_eq!(store.replace(id, rep.clone()).unwrap(), 1);
    expected[3] = rep;
    assert_eq!(read_all(&store, id), expected);
    store.flush().unwrap();
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id), expected);
    assert_eq!(read_all(&store, other), all);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn replace_many_is_durable_and_replaces_only_its_timestamps() {
    let dir = tmp("replace");
    let mut c = cfg(&dir);
    c.chunk_samples = 64;
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("r").unwrap();
    let mut expected: Vec<Sample> = Vec::new();
    for i in 0..2000i64 {
        let smp = s(T0 + i * SECOND, Variant::Int64(i));
        expected.push(smp.clone());
        store.append([(id, smp)]).unwrap();
    }
    // Two samples at t = 10: both replaced by the one given.
    let extra = s(T0 + 10 * SECOND, Variant::Int64(-10));
    store.append([(id, extra)]).unwrap();
    // Every 7th timestamp, out of order; 1000 and 1001 get two values each; 5000 is new.
    let mut new: Vec<Sample> = (0..2000i64)
        .rev()
        .filter(|i| i % 7 == 3)
        .map(|i| s(T0 + i * SECOND, Variant::Int64(100_000 + i)))
        .collect();
    new.push(s(T0 + 10 * SECOND, Variant::Int64(-1)));
    for t in [1000i64, 1001] {
        new.push(s(T0 + t * SECOND, Variant::Int64(-t)));
        new.push(s(T0 + t * SECOND, Variant::Int64(-t - 1)));
    }
    new.push(s(T0 + 5000 * SECOND, Variant::Int64(5000)));
    let replaced_ts: std::collections::BTreeSet<i64> = new.iter().map(|x| x.source_ts).collect();
    let old_at: usize = expected
        .iter()
        .filter(|x| replaced_ts.contains(&x.source_ts))
        .count()
        + 1; // the extra sample at 10
    assert_eq!(store.replace_many(id, new.clone()).unwrap(), old_at as u64);
    expected.retain(|x| !replaced_ts.contains(&x.source_ts));
    let mut sorted_new = new.clone();
    sorted_new.sort_by_key(|x| x.source_ts);
    expected.extend(sorted_new);
    expected.sort_by_key(|x| x.source_ts);
    assert_eq!(read_all(&store, id), expected);
    assert_eq!(paged(&store, id, i64::MIN, i64::MAX, false, 97), expected);
    // More samples after it are not touched by it.
    let later = s(T0 + 1000 * SECOND, Variant::Int64(7));
    store.append([(id, later.clone())]).unwrap();
    let pos = expected
        .iter()
        .rposition(|x| x.source_ts == later.source_ts)
        .unwrap();
    expected.insert(pos + 1, later);
    assert_eq!(read_all(&store, id), expected);
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id), expected, "after reopen");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn now_ticks() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    (d.as_nanos() / 100) as i64 + DateTime::UNIX_EPOCH_TICKS
}

#[test]
fn retention_by_age_drops_old_segments_only() {
    let dir = tmp("age");
    let mut c = cfg(&dir);
    c.chunk_samples = 64;
    c.segment_bytes = 4096;
    c.retention_age_s = Some(86_400);
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("a").unwrap();
    let old = now_ticks() - 10 * 86_400 * SECOND;
    let recent = now_ticks() - 3600 * SECOND;
    let mut rng = 1u64;
    let n = 3008i64; // 47 whole chunks: old and recent samples share no chunk
    let mut push = |t0: i64| {
        for i in 0..n {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            store
                .append([(
                    id,
                    s(t0 + i * SECOND, Variant::Double(f64::from_bits(rng >> 2))),
                )])
                .unwrap();
        }
    };
    push(old);
    push(recent);
    store.flush().unwrap();
    let before = store.stats();
    assert!(before.segments > 4, "{before:?}");
    let removed = store.apply_retention().unwrap();
    assert!(removed > 0);
    let after = store.stats();
    assert_eq!(after.segments_removed, removed);
    let left = read_all(&store, id);
    // Every recent sample stayed; the old ones went, but for those in the segment
    // shared with recent chunks (whole segments are removed).
    let (old_left, recent_left): (Vec<&Sample>, Vec<&Sample>) =
        left.iter().partition(|x| x.source_ts < recent);
    assert_eq!(recent_left.len() as i64, n);
    assert!(
        (old_left.len() as i64) < n / 4,
        "{} old samples left",
        old_left.len()
    );
    assert!(after.segment_bytes < before.segment_bytes);
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id).len(), left.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn retention_by_size_keeps_the_newest() {
    let dir = tmp("size");
    let mut c = cfg(&dir);
    c.chunk_samples = 64;
    c.segment_bytes = 8192;
    c.retention_bytes = Some(64 * 1024);
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("s").unwrap();
    let mut rng = 7u64;
    let n = 40_000i64;
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        store
            .append([(
                id,
                s(T0 + i * SECOND, Variant::Double(f64::from_bits(rng >> 2))),
            )])
            .unwrap();
        if i % 5000 == 0 {
            store.apply_retention().unwrap();
        }
    }
    store.flush().unwrap();
    store.apply_retention().unwrap();
    let st = store.stats();
    assert!(st.segments_removed > 0);
    assert!(st.segment_bytes <= 64 * 1024, "{st:?}");
    let left = read_all(&store, id);
    assert!(!left.is_empty() && (left.len() as i64) < n);
    // What is left is the newest, contiguous, up to the last sample.
    assert_eq!(left.last().unwrap().source_ts, T0 + (n - 1) * SECOND);
    for w in left.windows(2) {
        assert_eq!(w[1].source_ts - w[0].source_ts, SECOND);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A store whose samples are all in sealed chunks of an old WAL generation (so the WAL
/// cannot repair damage to them): write, flush, close, open (which checkpoints), close.
fn sealed_store(name: &str, n: i64) -> (PathBuf, StoreConfig, Vec<Sample>) {
    let dir = tmp(name);
    let mut c = cfg(&dir);
    c.chunk_samples = 100;
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("x").unwrap();
    let mut all = Vec::new();
    for i in 0..n {
        let smp = s(T0 + i * SECOND, Variant::Double(i as f64 * 0.5));
        all.push(smp.clone());
        store.append([(id, smp)]).unwrap();
    }
    store.flush().unwrap();
    drop(store);
    drop(Store::open(c.clone()).unwrap());
    (dir, c, all)
}

fn assert_prefix(got: &[Sample], all: &[Sample], max_lost: usize) {
    assert!(got.len() <= all.len());
    assert_eq!(got, &all[..got.len()], "what is left is a prefix");
    assert!(
        all.len() - got.len() <= max_lost,
        "lost {} > {max_lost}",
        all.len() - got.len()
    );
}

#[test]
fn truncated_segment_loses_only_the_torn_chunk() {
    let (dir, c, all) = sealed_store("torn-seg", 1000);
    let seg = files(&dir, "seg-").pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    f.set_len(len - 10).unwrap();
    drop(f);
    let store = Store::open(c.clone()).unwrap();
    let id = store.lookup("x").unwrap();
    let got = read_all(&store, id);
    assert_prefix(&got, &all, 100);
    assert!(got.len() < all.len());
    assert!(store.stats().recovered_truncations >= 1);
    // It goes on working.
    store
        .append([(id, s(T0 + 5000 * SECOND, Variant::Double(1.0)))])
        .unwrap();
    store.flush().unwrap();
    drop(store);
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id).len(), got.len() + 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn flipped_byte_in_a_chunk_truncates_there() {
    let (dir, c, all) = sealed_store("flip", 1000);
    let seg = files(&dir, "seg-").pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let at = bytes.len() * 2 / 3;
    bytes[at] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let store = Store::open(c).unwrap();
    let id = store.lookup("x").unwrap();
    let got = read_all(&store, id);
    // The damaged chunk and the ones after it are gone, nothing before.
    assert_prefix(&got, &all, 1000 / 3 + 100);
    assert!(
        got.len() >= 1000 * 2 / 3 - 100 - 1,
        "lost too much: {}",
        got.len()
    );
    assert!(got.len() < all.len());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn any_flipped_byte_in_the_newest_segment_leaves_a_prefix() {
    let (dir, c, all) = sealed_store("flips", 1000);
    let saved: Vec<(PathBuf, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect();
    let seg = files(&dir, "seg-").pop().unwrap();
    let len = std::fs::metadata(&seg).unwrap().len() as usize;
    for k in 0..40 {
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        for (p, b) in &saved {
            std::fs::write(p, b).unwrap();
        }
        let mut bytes = std::fs::read(&seg).unwrap();
        let at = k * len / 40 + 3;
        bytes[at] ^= 1 << (k % 8);
        std::fs::write(&seg, &bytes).unwrap();
        let store = Store::open(c.clone()).unwrap();
        let id = store.lookup("x").unwrap();
        let got = read_all(&store, id);
        assert_prefix(&got, &all, all.len());
        assert!(got.len() < all.len(), "flip at {at} went unnoticed");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_damaged_chunk_in_an_older_segment_is_marked_and_counted() {
    let dir = tmp("old-seg");
    let mut c = cfg(&dir);
    c.chunk_samples = 100;
    c.segment_bytes = 4096;
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("x").unwrap();
    let mut all = Vec::new();
    let mut rng = 3u64;
    for i in 0..3000i64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let smp = s(T0 + i * SECOND, Variant::Double(f64::from_bits(rng >> 2)));
        all.push(smp.clone());
        store.append([(id, smp)]).unwrap();
    }
    store.flush().unwrap();
    drop(store);
    drop(Store::open(c.clone()).unwrap()); // the WAL no longer covers the chunks
    let segs = files(&dir, "seg-");
    assert!(segs.len() > 2);
    // The first chunk's payload, in the oldest segment (16-byte segment header, 52-byte
    // record header).
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    bytes[16 + 52 + 20] ^= 0xFF;
    std::fs::write(&segs[0], &bytes).unwrap();
    let store = Store::open(c).unwrap();
    let got = read_all(&store, id);
    // The damaged chunk's 100 values stand as one Bad_DataUnavailable value at its first
    // time; the rest is all there.
    let mut expected = vec![Sample {
        source_ts: T0,
        server_ts: T0,
        status: uaring_core::StatusCode::BadDataUnavailable.0,
        value: Variant::Empty,
    }];
    expected.extend_from_slice(&all[100..]);
    assert_eq!(got, expected);
    assert!(store.stats().io_errors >= 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn torn_wal_record_loses_only_the_last_frame() {
    let dir = tmp("torn-wal");
    let mut c = cfg(&dir);
    c.chunk_samples = 65_536; // everything stays in the head: only the WAL has it
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("w").unwrap();
    let mut all = Vec::new();
    for i in 0..300i64 {
        let smp = s(T0 + i * SECOND, Variant::Int32(i as i32));
        all.push(smp.clone());
        store.append([(id, smp)]).unwrap();
        if i == 199 {
            assert_eq!(store.flush().unwrap(), 200);
        }
    }
    assert_eq!(store.flush().unwrap(), 300);
    drop(store);
    let wal = files(&dir, "wal-").pop().unwrap();
    let len = std::fs::metadata(&wal).unwrap().len();
    let f = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let store = Store::open(c.clone()).unwrap();
    assert_eq!(read_all(&store, id), all[..200].to_vec());
    let st = store.stats();
    assert_eq!(st.replayed, 200);
    assert!(st.recovered_truncations >= 1);
    drop(store);
    // Garbage where the WAL and a segment were: open still succeeds.
    for p in files(&dir, "wal-").into_iter().chain(files(&dir, "seg-")) {
        std::fs::write(&p, vec![0xA5u8; 5000]).unwrap();
    }
    let store = Store::open(c).unwrap();
    assert!(read_all(&store, id).len() <= 200);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tmp("lock");
    let store = Store::open(cfg(&dir)).unwrap();
    assert!(matches!(Store::open(cfg(&dir)), Err(StoreError::Locked)));
    drop(store);
    assert!(Store::open(cfg(&dir)).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writer_thread_ingests_counts_drops_and_flushes_on_shutdown() {
    let _heavy = heavy();
    for on_full in [OnFull::DropNewest, OnFull::DropOldest] {
        let dir = tmp("writer");
        let mut c = cfg(&dir);
        c.queue_capacity = 64;
        c.on_full = on_full;
        c.flush_interval_ms = 50;
        let store = Store::open(c.clone()).unwrap();
        let ids: Vec<SeriesId> = (0..10)
            .map(|k| store.series(&format!("w{k}")).unwrap())
            .collect();
        let (ingest, writer) = start_writer(store.clone()).unwrap();
        let pushed = 200_000u64;
        let mut refused = 0u64;
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let ingest = ingest.clone();
                let ids = ids.clone();
                std::thread::spawn(move || {
                    let mut refused = 0u64;
                    for i in 0..pushed / 2 {
                        let id = ids[(i % 10) as usize];
                        let t = T0 + (p * pushed as i64 + i as i64) * SECOND;
                        if !ingest.try_push(id, s(t, Variant::Double(i as f64))) {
                            refused += 1;
                        }
                    }
                    refused
                })
            })
            .collect();
        for p in producers {
            refused += p.join().unwrap();
        }
        writer.shutdown().unwrap();
        drop(ingest); // it holds the store too
        let st = store.stats();
        assert_eq!(st.appended + st.dropped, pushed, "{on_full:?} {st:?}");
        assert_eq!(st.durable, st.appended);
        match on_full {
            OnFull::DropNewest => assert_eq!(refused, st.dropped),
            OnFull::DropOldest => assert_eq!(refused, 0),
        }
        let stored: usize = ids.iter().map(|&id| read_all(&store, id).len()).sum();
        assert_eq!(stored as u64, st.appended);
        drop(store);
        let store = Store::open(c).unwrap();
        let stored: usize = ids.iter().map(|&id| read_all(&store, id).len()).sum();
        assert_eq!(
            stored as u64, st.appended,
            "all durable after a clean shutdown"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn the_writer_applies_retention_by_itself() {
    let _heavy = heavy();
    let dir = tmp("writer-retention");
    let mut c = cfg(&dir);
    c.chunk_samples = 64;
    c.segment_bytes = 4096;
    c.retention_bytes = Some(32 * 1024);
    c.retention_check_ms = 10;
    c.flush_interval_ms = 20;
    let store = Store::open(c).unwrap();
    let id = store.series("r").unwrap();
    let (ingest, writer) = start_writer(store.clone()).unwrap();
    let mut rng = 11u64;
    let n = 20_000i64;
    for i in 0..n {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let smp = s(T0 + i * SECOND, Variant::Double(f64::from_bits(rng >> 2)));
        while !ingest.try_push(id, smp.clone()) {
            std::thread::yield_now();
        }
    }
    let waited = Instant::now();
    while store.stats().segments_removed == 0 && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    writer.shutdown().unwrap();
    let st = store.stats();
    assert!(st.segments_removed > 0, "{st:?}");
    let left = read_all(&store, id);
    assert!((left.len() as i64) < n);
    assert_eq!(left.last().unwrap().source_ts, T0 + (n - 1) * SECOND);
    drop(ingest);
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn bytes_per_sample(name: &str, mut value: impl FnMut(i64) -> f64) -> f64 {
    let dir = tmp(name);
    let c = cfg(&dir);
    let store = Store::open(c.clone()).unwrap();
    let id = store.series("ns=2;s=Day").unwrap();
    let n = 86_400i64;
    let mut batch = Vec::with_capacity(1000);
    for i in 0..n {
        let t = T0 + i * SECOND;
        batch.push((
            id,
            Sample {
                source_ts: t,
                server_ts: t,
                status: 0,
                value: Variant::Double(value(i)),
            },
        ));
        if batch.len() == 1000 {
            store.append(batch.drain(..)).unwrap();
        }
    }
    store.append(batch.drain(..)).unwrap();
    store.flush().unwrap();
    drop(store);
    // Reopened (the head sealed at the checkpoint), everything in the directory counted.
    let store = Store::open(c).unwrap();
    assert_eq!(read_all(&store, id).len() as i64, n);
    drop(store);
    let b = dir_bytes(&dir) as f64 / n as f64;
    std::fs::remove_dir_all(&dir).unwrap();
    b
}

#[test]
fn a_day_of_a_slow_1hz_double_takes_at_most_4_bytes_a_sample() {
    let _heavy = heavy();
    // 20 ± 10 with a period of 6 hours, rounded to 0.01.
    let slow = bytes_per_sample("slow", |i| {
        let x = 20.0 + 10.0 * (i as f64 * std::f64::consts::TAU / 21_600.0).sin();
        (x * 100.0).round() / 100.0
    });
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let random = bytes_per_sample("random", move |_| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64 * 1000.0
    });
    println!("bytes/sample: slow 1 Hz Double {slow:.3}, random Double {random:.3}");
    assert!(slow <= 4.0, "slow Double: {slow} bytes/sample");
}

// --- kill -9 ----------------------------------------------------------------------------

const CHILD_ENV: &str = "UARING_HISTORY_KILL_CHILD";
const KILL_RATE: u64 = 50_000; // samples/s
const KILL_FLUSH_MS: u32 = 100;

fn kill_cfg(dir: &Path) -> StoreConfig {
    let mut c = cfg(dir);
    c.flush_interval_ms = KILL_FLUSH_MS;
    c.segment_bytes = 64 * 1024; // rotations during the run
    c.wal_max_bytes = 256 * 1024; // checkpoints during the run
    c.chunk_samples = 8192; // heads outlive flushes: recovery replays the WAL too
    c
}

/// The child of `kill_9_during_ingest_loses_nothing_acknowledged`: goes on with the
/// series where the store has it (sample i at T0 + i with value i), ingests at a steady
/// rate and prints `durable pushed` (both counting from sample 0) every 500 samples,
/// until killed.
#[test]
#[ignore = "run by kill_9_during_ingest_loses_nothing_acknowledged in a child process"]
fn kill_9_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let store = Store::open(kill_cfg(Path::new(&dir))).unwrap();
    let id = store.series("kill").unwrap();
    let base = read_all(&store, id).len() as u64;
    let (ingest, _writer) = start_writer(store.clone()).unwrap();
    let start = Instant::now();
    let mut next = start;
    let step = Duration::from_micros(500 * 1_000_000 / KILL_RATE);
    let mut pushed = base;
    while start.elapsed() < Duration::from_secs(60) {
        let smp = s(T0 + pushed as i64, Variant::Double(pushed as f64));
        if !ingest.try_push(id, smp) {
            std::thread::yield_now();
            continue; // the test's producer may wait; a shard would not
        }
        pushed += 1;
        if pushed.is_multiple_of(500) {
            // A steady rate, without bursts to catch up after a stall.
            next += step;
            let now = Instant::now();
            if next > now {
                std::thread::sleep(next - now);
            } else {
                next = now;
            }
            println!("{} {}", base + store.stats().durable, pushed);
        }
    }
}

/// One child run: the `(durable, pushed)` lines it printed before it was killed
/// `delay_ms` after its `flushes`-th flush.
fn run_child_and_kill(dir: &Path, flushes: usize, delay_ms: u64) -> Vec<(u64, u64)> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "kill_9_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, u64)>::new()));
    let out = BufReader::new(child.stdout.take().unwrap());
    let sink = lines.clone();
    let reader = std::thread::spawn(move || {
        for line in out.lines() {
            let Ok(line) = line else { break };
            let mut it = line.split_whitespace().map(|x| x.parse::<u64>());
            if let (Some(Ok(w)), Some(Ok(p))) = (it.next(), it.next()) {
                sink.lock().unwrap().push((w, p));
            }
        }
    });
    let started = Instant::now();
    while flush_reports(&lines.lock().unwrap()).len() < flushes
        && started.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(delay_ms));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap();
    let lines = lines.lock().unwrap().clone();
    lines
}

/// The first line after each flush: (watermark, pushed just after it).
fn flush_reports(lines: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    for (i, &(w, p)) in lines.iter().enumerate() {
        if i > 0 && lines[i - 1].0 != w {
            v.push((w, p));
        }
    }
    v
}

#[test]
fn kill_9_during_ingest_loses_nothing_acknowledged() {
    let _heavy = heavy();
    let dir = tmp("kill9");
    let per_interval = KILL_RATE * KILL_FLUSH_MS as u64 / 1000;
    // Five runs on the same store, killed at different points of a flush interval (the
    // first long enough for WAL checkpoints and segment rotations); each recovers what
    // the one before left.
    for (run, (flushes, delay_ms)) in [(12, 37), (5, 0), (5, 81), (5, 55), (5, 13)]
        .into_iter()
        .enumerate()
    {
        let lines = run_child_and_kill(&dir, flushes, delay_ms);
        let reports = flush_reports(&lines);
        assert!(
            reports.len() >= flushes,
            "run {run}: {} flushes seen",
            reports.len()
        );
        let (w_last, p_last) = *lines.last().unwrap();

        let store = Store::open(kill_cfg(&dir)).unwrap();
        let id = store.lookup("kill").unwrap();
        let got = read_all(&store, id);
        // Exactly the samples 0..R in order: no gap, no duplicate, no damage.
        for (i, x) in got.iter().enumerate() {
            assert_eq!(x.source_ts, T0 + i as i64, "run {run}: sample {i}");
            assert_eq!(x.value, Variant::Double(i as f64));
        }
        let r = got.len() as u64;
        // Every sample acknowledged as durable before the kill is there.
        assert!(
            r >= w_last,
            "run {run}: recovered {r} < durable watermark {w_last}"
        );
        // A flush acknowledges what was pushed before the report of the flush before the
        // previous one (an interval, and one of slack for the writer's scheduling): what
        // can be lost is what arrived within the last flush intervals.
        for w in reports.windows(3) {
            assert!(
                w[2].0 >= w[0].1,
                "run {run}: flushes did not cover earlier pushes: {w:?}"
            );
        }
        let lost = p_last.saturating_sub(r);
        let st = store.stats();
        println!(
            "kill -9 run {run}: {} flushes seen, durable watermark {w_last}, pushed >= \
             {p_last}, recovered {r}: lost {lost} ({:.2} flush intervals of samples), \
             beyond the watermark {}, replayed from the WAL {}, truncations at open {}, \
             segments {}",
            reports.len(),
            lost as f64 / per_interval as f64,
            r - w_last,
            st.replayed,
            st.recovered_truncations,
            files(&dir, "seg-").len()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
