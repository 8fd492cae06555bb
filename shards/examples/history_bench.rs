//! A server to measure Historical Access on: N historized Double variables in the embedded
//! store, optionally pushed at a rate, optionally pre-loaded with a long series.
//!
//! `history_bench [--listen HOST:PORT] [--dir DIR] [--variables N] [--rate HZ]
//! [--push-threads T] [--preload N] [--pattern count|slow|random] [--preload-at future|past]
//! [--shards N] [--pki DIR] [--flush-interval-ms MS] [--queue-capacity N] [--read-threads N]
//! [--stats-ms MS] [--history-nice N] [--history-policy P] [--push-nice N]
//! [--background-cpus EXPR] [--push-cpus LIST]`
//!
//! * `[history] enabled = true` in `DIR` (default: a fresh directory under the temporary
//!   directory, removed at exit; a given `DIR` is kept).
//! * The benchmark contract's `ns=1;i=1001..1100` Int32 variables (`uaring serve --contract`),
//!   the target of the harness's Read load beside the history work.
//! * Namespace `urn:uaring:example:history-bench`, folder `s=History` under Objects;
//!   `s=History.V<i>` (i in 0..N, default 1): Double, historized, initial value 0.
//! * `--rate HZ` (default 0: none): T threads named `push` (default 1) push every variable HZ
//!   times a second on absolute 10 ms ticks (`Variable::set`, source-timestamped now): the
//!   k-th push of a variable stores the Double k.
//! * `--preload N`: before listening, N samples of `s=History.V0` at 1 Hz source timestamps
//!   through `Variable::set_with` (paced so the ingest queue never overflows), all taken by
//!   the store's writer before `listening on` is printed. `--preload-at future` (default):
//!   the series starts on the first whole minute at least a minute after the start, after
//!   the variable's start value, so the series is in time order as a live one is;
//!   `past`: it ends on the whole minute at least an hour before the start (a back-fill
//!   before the series' first value: the store then sorts the series on every read).
//!   Values by `--pattern`: `count` (default) the Double i of sample i; `slow` a level of
//!   0.01 resolution that moves by at most 0.01 a second (a random walk, steps −0.01, 0,
//!   +0.01, kept in 0..=100, from 50); `random` uniform Doubles in [0, 1) of full precision.
//! * `s=History.PreloadStart` (DateTime: the first pre-loaded source timestamp, null without
//!   a preload) and `s=History.PreloadCount` (UInt64).
//! * After `listening on opc.tcp://HOST:PORT`: one line `history-preload samples=… sealed=…
//!   segment_bytes=… bytes_per_sample=… …` (bytes of the segment files over the samples in
//!   sealed chunks, file and record headers included; the WAL and the head chunks not
//!   counted) when pre-loaded, and `history-storage-probe … bytes_per_sample=…`: the same
//!   values and source timestamps written straight into a store of their own with server
//!   timestamps 10 ms after the source timestamps (the served pre-load's are the wall clock
//!   of the back-fill); then every `--stats-ms` (default 100) while pushing, a line
//!   `history-stats mono_ns=… pushed=… appended=… dropped=… rejected=…` (CLOCK_MONOTONIC).
//! * `--history-nice N` (default 10, the server's): `history.nice`, the priority of the
//!   store's writer, sync and reader threads; `--history-policy P` (default batch, the
//!   server's): `history.writer_policy`, normal, batch or idle; `--push-nice N` (default 0):
//!   the push threads' (the application's ingest) — both beside the shards' 0.
//! * `--background-cpus EXPR` (default: not pinned): `runtime.background_cpus`, where the
//!   store's threads run; `--push-cpus LIST` (default: not pinned): where the push threads
//!   and the `history-stats` thread run (a CPU list like `1` or `2-3`).
//! * SIGINT/SIGTERM stop it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use uaring::{objects_folder, DataValue, DateTime, ObjectDef, Server, VariableDef, Variant};

const NAMESPACE: &str = "urn:uaring:example:history-bench";
/// 100 ns ticks.
const SECOND: i64 = 10_000_000;
const MINUTE: i64 = 60 * SECOND;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Pattern {
    Count,
    Slow,
    Random,
}

struct Args {
    listen: String,
    dir: Option<String>,
    variables: usize,
    rate_hz: f64,
    push_threads: usize,
    preload: u64,
    pattern: Pattern,
    preload_past: bool,
    shards: Option<usize>,
    pki: Option<String>,
    flush_interval_ms: u32,
    queue_capacity: usize,
    read_threads: usize,
    stats_ms: u64,
    history_nice: i32,
    history_policy: String,
    push_nice: i32,
    background_cpus: Option<String>,
    push_cpus: Vec<usize>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        listen: "127.0.0.1:4840".into(),
        dir: None,
        variables: 1,
        rate_hz: 0.0,
        push_threads: 1,
        preload: 0,
        pattern: Pattern::Count,
        preload_past: false,
        shards: None,
        pki: None,
        flush_interval_ms: 1000,
        queue_capacity: 1 << 18,
        read_threads: 2,
        stats_ms: 100,
        history_nice: 10,
        history_policy: "batch".into(),
        push_nice: 0,
        background_cpus: None,
        push_cpus: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or_else(|| format!("{k} needs a value"));
        fn num<T: std::str::FromStr>(k: &str, s: String) -> Result<T, String>
        where
            T::Err: std::fmt::Display,
        {
            s.parse().map_err(|e| format!("{k}: {e}"))
        }
        match k.as_str() {
            "--listen" => a.listen = v()?,
            "--dir" => a.dir = Some(v()?),
            "--variables" => a.variables = num(&k, v()?)?,
            "--rate" => a.rate_hz = num(&k, v()?)?,
            "--push-threads" => a.push_threads = num(&k, v()?)?,
            "--preload" => a.preload = num(&k, v()?)?,
            "--pattern" => {
                a.pattern = match v()?.as_str() {
                    "count" => Pattern::Count,
                    "slow" => Pattern::Slow,
                    "random" => Pattern::Random,
                    o => return Err(format!("--pattern {o}: count, slow or random")),
                }
            }
            "--preload-at" => {
                a.preload_past = match v()?.as_str() {
                    "future" => false,
                    "past" => true,
                    o => return Err(format!("--preload-at {o}: future or past")),
                }
            }
            "--shards" => a.shards = Some(num(&k, v()?)?),
            "--pki" => a.pki = Some(v()?),
            "--flush-interval-ms" => a.flush_interval_ms = num(&k, v()?)?,
            "--queue-capacity" => a.queue_capacity = num(&k, v()?)?,
            "--read-threads" => a.read_threads = num(&k, v()?)?,
            "--stats-ms" => a.stats_ms = num(&k, v()?)?,
            "--history-nice" => a.history_nice = num(&k, v()?)?,
            "--history-policy" => a.history_policy = v()?,
            "--push-nice" => a.push_nice = num(&k, v()?)?,
            "--background-cpus" => a.background_cpus = Some(v()?),
            "--push-cpus" => {
                a.push_cpus = uaring_affinity::cpulist::parse_list(&v()?)
                    .map_err(|e| format!("--push-cpus: {e}"))?
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    if a.variables == 0 || a.variables > 1_000_000 {
        return Err("--variables must be in 1..=1000000".into());
    }
    if !(a.rate_hz.is_finite() && (0.0..=1_000_000.0).contains(&a.rate_hz)) {
        return Err("--rate must be in 0..=1000000".into());
    }
    if a.push_threads == 0 || a.push_threads > a.variables {
        return Err("--push-threads must be in 1..=variables".into());
    }
    if a.preload > 100_000_000 {
        return Err("--preload: at most 100000000".into());
    }
    Ok(a)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("history_bench: {e}");
            std::process::exit(2);
        }
    };
    let (dir, temporary) = match &a.dir {
        Some(d) => (std::path::PathBuf::from(d), false),
        None => (
            std::env::temp_dir().join(format!("uaring-history-bench-{}", std::process::id())),
            true,
        ),
    };
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let r = run(&a, &dir);
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(e) = r {
        eprintln!("history_bench: {e}");
        std::process::exit(1);
    }
}

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The values of a pre-load, in order.
struct Values {
    pattern: Pattern,
    rng: Rng,
    /// The slow level, in hundredths.
    level: i64,
    i: u64,
}

impl Values {
    fn new(pattern: Pattern) -> Values {
        Values {
            pattern,
            rng: Rng(0x9E37_79B9_7F4A_7C15),
            level: 5000,
            i: 0,
        }
    }
    fn next(&mut self) -> f64 {
        let i = self.i;
        self.i += 1;
        match self.pattern {
            Pattern::Count => i as f64,
            Pattern::Slow => {
                self.level = (self.level + (self.rng.next() % 3) as i64 - 1).clamp(0, 10_000);
                self.level as f64 / 100.0
            }
            Pattern::Random => self.rng.unit(),
        }
    }
}

/// The storage figure of the store's format alone: the same values and source timestamps
/// written straight into a store of their own (`dir/probe`, through `uaring::history`'s
/// `Store` and `Ingest`), each with a server timestamp `offset` after its source
/// timestamp, as a live 1 Hz series stamped by a server at a steady delay would have (the
/// served pre-load's server timestamps are the back-fill's wall clock instead: all within
/// a fraction of a second, 1 s closer to their source timestamp at every sample).
fn storage_probe(
    dir: &std::path::Path,
    pattern: Pattern,
    t0: i64,
    n: u64,
    offset: i64,
) -> Result<String, String> {
    use uaring::history::{start_writer, Sample, Store, StoreConfig};
    let e = |e: uaring::history::StoreError| e.to_string();
    let store = Store::open(StoreConfig::new(dir.join("probe"))).map_err(e)?;
    let id = store.series("probe").map_err(e)?;
    let (ingest, writer) = start_writer(store.clone()).map_err(e)?;
    let mut values = Values::new(pattern);
    for i in 0..n {
        let source_ts = t0 + i as i64 * SECOND;
        let sample = Sample {
            source_ts,
            server_ts: source_ts + offset,
            status: 0,
            value: Variant::Double(values.next()),
        };
        // The queue is bounded: wait for the writer rather than drop.
        while ingest.queued() >= ingest.capacity() / 2 {
            std::thread::sleep(Duration::from_micros(100));
        }
        if !ingest.try_push(id, sample) {
            return Err("storage probe: a sample was dropped".into());
        }
    }
    writer.shutdown().map_err(e)?;
    let st = store.stats();
    let sealed = st.samples - st.head_samples;
    Ok(format!(
        "history-storage-probe samples={n} server_offset_ms={} sealed={sealed} segment_bytes={} bytes_per_sample={:.3}",
        offset / 10_000,
        st.segment_bytes,
        if sealed > 0 {
            st.segment_bytes as f64 / sealed as f64
        } else {
            0.0
        }
    ))
}

/// xorshift64*: the pattern's randomness (no dependency; not for anything but test data).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1), 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn run(a: &Args, dir: &std::path::Path) -> Result<(), uaring::Error> {
    let toml = format!(
        "[history]\nenabled = true\ndir = {:?}\nflush_interval_ms = {}\nqueue_capacity = {}\nread_threads = {}\nnice = {}\nwriter_policy = {:?}\n",
        dir.join("store").display().to_string(),
        a.flush_interval_ms,
        a.queue_capacity,
        a.read_threads,
        a.history_nice,
        a.history_policy
    );
    let mut b = Server::builder()
        .config_toml(&toml)
        .contract(true)
        .demo(true)
        .listen(&a.listen);
    if let Some(p) = &a.pki {
        b = b.pki(p);
    } else {
        b = b.pki(dir.join("pki"));
    }
    if let Some(n) = a.shards {
        b = b.shards(n);
    }
    if let Some(c) = &a.background_cpus {
        b = b.background_cpus(c);
    }
    let ns = b.namespace(NAMESPACE);
    let folder = b
        .add_object(ObjectDef::folder(ns.id("History"), "History").organized_by(&objects_folder()));
    let vars: Vec<uaring::Variable> = (0..a.variables)
        .map(|i| {
            b.add_variable(
                VariableDef::new(ns.id(&format!("History.V{i}")), &format!("V{i}"), 0.0)
                    .organized_by(&folder)
                    .historize(),
            )
        })
        .collect();
    let preload_start = b.add_variable(
        VariableDef::new(
            ns.id("History.PreloadStart"),
            "PreloadStart",
            DateTime::NULL,
        )
        .component_of(&folder),
    );
    let preload_count = b.add_variable(
        VariableDef::new(ns.id("History.PreloadCount"), "PreloadCount", 0u64).component_of(&folder),
    );
    let server = b.start()?;
    let store = server.history_store();
    let stats = || store.as_ref().map(|s| s.stats()).unwrap_or_default();
    let (mut preload_line, mut probe_line) = (None, None);
    if a.preload > 0 {
        let now = uaring::clock::utc_now().0;
        let t0 = if a.preload_past {
            (now - 60 * MINUTE) / MINUTE * MINUTE - a.preload as i64 * SECOND
        } else {
            (now + 2 * MINUTE) / MINUTE * MINUTE
        };
        let before = stats();
        let taken = |s: &uaring::history::StoreStats| {
            (s.appended + s.dropped + s.rejected)
                - (before.appended + before.dropped + before.rejected)
        };
        let room = (a.queue_capacity as u64 / 2).max(1);
        let mut values = Values::new(a.pattern);
        let started = Instant::now();
        for i in 0..a.preload {
            if i % 1024 == 0 {
                while i - taken(&stats()) > room {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            let value = values.next();
            vars[0].set_with(DataValue {
                source_timestamp: Some(DateTime(t0 + i as i64 * SECOND)),
                ..DataValue::new(Variant::Double(value))
            })?;
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        let after = loop {
            let s = stats();
            if taken(&s) >= a.preload || Instant::now() > deadline {
                break s;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let sealed = after.samples - after.head_samples;
        preload_line = Some(format!(
            "history-preload samples={} pattern={:?} at={} seconds={:.3} appended={} dropped={} rejected={} series_samples={} sealed={} head={} chunks={} segments={} segment_bytes={} wal_bytes={} bytes_per_sample={:.3}",
            a.preload,
            a.pattern,
            if a.preload_past { "past" } else { "future" },
            started.elapsed().as_secs_f64(),
            after.appended - before.appended,
            after.dropped - before.dropped,
            after.rejected - before.rejected,
            after.samples,
            sealed,
            after.head_samples,
            after.chunks,
            after.segments,
            after.segment_bytes,
            after.wal_bytes,
            if sealed > 0 {
                after.segment_bytes as f64 / sealed as f64
            } else {
                0.0
            }
        ));
        probe_line = Some(
            storage_probe(dir, a.pattern, t0, a.preload, 10 * 10_000)
                .unwrap_or_else(|e| format!("history-storage-probe failed: {e}")),
        );
        preload_start.set(DateTime(t0))?;
        preload_count.set(a.preload)?;
    }
    server.print_listening();
    for l in [preload_line, probe_line].into_iter().flatten() {
        println!("{l}");
    }
    if a.rate_hz > 0.0 {
        let pushed = Arc::new(AtomicU64::new(0));
        let threads = a.push_threads;
        for t in 0..threads {
            let mine: Vec<uaring::Variable> = vars
                .iter()
                .enumerate()
                .filter(|(i, _)| i % threads == t)
                .map(|(_, v)| v.clone())
                .collect();
            let rate = a.rate_hz * mine.len() as f64;
            let pushed = pushed.clone();
            let nice = a.push_nice;
            let cpus = a.push_cpus.clone();
            std::thread::Builder::new()
                .name("push".into())
                .spawn(move || {
                    if !cpus.is_empty() {
                        if let Err(e) = uaring_affinity::pin_current_thread(&cpus) {
                            eprintln!("history_bench: cannot pin a push thread to {cpus:?}: {e}");
                        }
                    }
                    if nice != 0 {
                        // SAFETY: setpriority on the calling thread (its tid); a failure
                        // leaves nice 0.
                        unsafe {
                            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                            libc::setpriority(libc::PRIO_PROCESS, tid, nice);
                        }
                    }
                    push(&mine, rate, &pushed)
                })
                .map_err(|e| uaring::Error::Start(format!("push thread: {e}")))?;
        }
        let every = Duration::from_millis(a.stats_ms.max(1));
        let store = server.history_store();
        let cpus = a.push_cpus.clone();
        std::thread::Builder::new()
            .name("push-stats".into())
            .spawn(move || {
                use std::io::Write;
                // Part of the ingest load: beside the push threads, off the shards' CPUs
                // (unpinned, the scheduler put it on the shard's CPU now and then).
                if !cpus.is_empty() {
                    let _ = uaring_affinity::pin_current_thread(&cpus);
                }
                let mut tick = Instant::now();
                loop {
                    tick += every;
                    std::thread::sleep(tick.saturating_duration_since(Instant::now()));
                    // The counters alone: `stats()` would take all N series' locks, which
                    // the writer takes for every sample.
                    let s = store.as_ref().map(|s| s.counters()).unwrap_or_default();
                    let mut o = std::io::stdout().lock();
                    let _ = writeln!(
                        o,
                        "history-stats mono_ns={} pushed={} appended={} dropped={} rejected={}",
                        mono_ns(),
                        pushed.load(Ordering::Relaxed),
                        s.appended,
                        s.dropped,
                        s.rejected
                    );
                    let _ = o.flush();
                }
            })
            .map_err(|e| uaring::Error::Start(format!("stats thread: {e}")))?;
    }
    server.run_until_signal()
}

/// Pushes `rate` values a second over `vars` in turn on absolute 10 ms ticks (the pushes
/// due by each tick, floor(t × rate) in all; a late thread catches up at once): the k-th
/// push of a variable stores the Double k.
fn push(vars: &[uaring::Variable], rate: f64, pushed: &AtomicU64) {
    const TICK: Duration = Duration::from_millis(10);
    let start = Instant::now();
    let n = vars.len() as u64;
    let (mut done, mut counted) = (0u64, 0u64);
    let mut tick = start;
    loop {
        let due = (start.elapsed().as_secs_f64() * rate) as u64;
        while done < due {
            let (i, k) = (done % n, done / n + 1);
            if vars[i as usize].set(k as f64).is_err() {
                return;
            }
            done += 1;
        }
        pushed.fetch_add(done - counted, Ordering::Relaxed);
        counted = done;
        tick += TICK;
        std::thread::sleep(tick.saturating_duration_since(Instant::now()));
    }
}
