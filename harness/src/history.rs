//! `history-ingest`, `history-read-raw`, `history-read-processed`: OPC UA Historical Access
//! on a server of the *history_bench contract* (the library example
//! `shards/examples/history_bench.rs`, beside this executable, or `--server-bin`):
//!
//! - `--listen HOST:PORT`, `--variables N`, `--rate HZ` (pushes a second per variable from
//!   threads named `push`), `--preload N --pattern count|slow|random` (N samples of
//!   `s=History.V0` at 1 Hz before it listens);
//! - namespace `urn:uaring:example:history-bench`: `s=History.V<i>` historized Doubles,
//!   `s=History.PreloadStart` (DateTime) and `s=History.PreloadCount` (UInt64);
//! - the benchmark contract's `ns=1;i=1001..1100` (the Read load of `history-ingest`);
//! - after `listening on`: a `history-preload …` line (the store's sizes after the preload)
//!   and, while pushing, `history-stats mono_ns=… pushed=… appended=… dropped=…` lines.
//!
//! `history-ingest`: the server pushes N × HZ samples a second into its store (by change:
//! every stored value goes to the store's one writer thread) while the clients run the `read`
//! scenario's closed loop (one value per Read) on the shards; without `--push-rate` nothing
//! is pushed (the baseline); `--rate R` makes the Reads an open loop of R a second in all
//! (latency from when each was due), as in `read`. The Read latency is the usual one; the ingest rate is what the
//! writer took in the window (`appended`, interpolated from the server's stats lines at the
//! window's ends), beside what was pushed and dropped.
//!
//! `history-read-raw`: one operation is the whole pre-loaded series read raw
//! (ReadRawModifiedDetails [start, start + N s), TimestampsToReturn Both,
//! numValuesPerNode `--values-per-call`) through every continuation point, timed from the
//! first request's send to the last response; each value checked (count pattern: value i at
//! start + i s) and the count must be N.
//!
//! `history-read-processed`: one operation is ReadProcessedDetails over [start, start + N s)
//! into `--intervals` intervals (default 1440: a day into minutes) with `--aggregate`
//! (Average when core computes it, else TimeAverage), continuation points included; the
//! count must be the intervals and no value Bad or outside the pattern's range.

use serde_json::{json, Map, Value};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::history::aggregate::Aggregate;
use uaring_core::services::attribute::attr;
use uaring_core::types::{ByteString, DataValue, DateTime, ExtensionObject, NodeId, Variant};
use uaring_core::DecodeLimits;

use crate::cli::RunOpts;
use crate::opcua::{read_value_id, ReadWork, UaDriver, Workload};
use crate::report::round;
use crate::run::{DynDriver, Plan, RunConfig, Running, Window};
use crate::uring::Ctx;
use std::sync::Arc;

/// The history_bench contract's namespace URI.
pub const HISTORY_NAMESPACE_URI: &str = "urn:uaring:example:history-bench";
/// One second in DateTime ticks (100 ns).
const SECOND: i64 = 10_000_000;
const NAMESPACE_ARRAY: u32 = 2255;

pub fn is_history(scenario: &str) -> bool {
    matches!(
        scenario,
        "history-ingest" | "history-read-raw" | "history-read-processed"
    )
}

/// Whether `scenario` reads the push option `id` (`history-ingest` takes `--variables` and
/// `--push-rate`).
pub fn takes_push_option(scenario: &str, id: &str) -> bool {
    scenario == "history-ingest" && (id == "variables" || id == "push_rate")
}

/// The history_bench example beside this executable.
pub fn example() -> Result<String, String> {
    crate::run::library_example(
        "history_bench",
        "history",
        "a server of the history_bench contract",
    )
}

/// What a history run asks of the server and reads.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryParams {
    pub scenario: String,
    /// history-ingest: the server's variables and pushes a second per variable (0: none).
    pub variables: usize,
    pub push_rate: f64,
    /// history-read-*: the pre-loaded samples and their pattern.
    pub values: usize,
    pub pattern: String,
    pub values_per_call: u32,
    pub intervals: usize,
    pub aggregate: Aggregate,
}

/// The Aggregate asked for by name, else Average when core computes it, else TimeAverage.
pub fn pick_aggregate(name: Option<&str>) -> Result<Aggregate, String> {
    match name {
        Some(n) => Aggregate::named()
            .find(|a| a.name().eq_ignore_ascii_case(n))
            .filter(|a| a.is_supported())
            .ok_or_else(|| {
                format!(
                    "--aggregate {n}: one of {}",
                    Aggregate::ALL
                        .iter()
                        .map(|a| a.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }),
        None if Aggregate::Average.is_supported() => Ok(Aggregate::Average),
        None => Ok(Aggregate::TimeAverage),
    }
}

impl HistoryParams {
    pub fn from_opts(o: &RunOpts) -> Result<HistoryParams, String> {
        let processed = o.scenario == "history-read-processed";
        Ok(HistoryParams {
            scenario: o.scenario.clone(),
            variables: o.variables.unwrap_or(1000),
            push_rate: o.push_rate.unwrap_or(0.0),
            values: o
                .history_values
                .unwrap_or(if processed { 86_400 } else { 1_000_000 }),
            pattern: o
                .history_pattern
                .clone()
                .unwrap_or_else(|| if processed { "slow" } else { "count" }.into()),
            values_per_call: o.values_per_call.unwrap_or(0),
            intervals: o.intervals.unwrap_or(1440),
            aggregate: pick_aggregate(o.aggregate.as_deref())?,
        })
    }

    /// The range every value of a pattern lies in (an aggregate of them too).
    pub fn value_range(&self) -> (f64, f64) {
        match self.pattern.as_str() {
            "slow" => (0.0, 100.0),
            "random" => (0.0, 1.0),
            _ => (0.0, self.values.saturating_sub(1) as f64),
        }
    }
}

/// The history_bench arguments of the run (before --server-args).
pub fn server_args(o: &RunOpts) -> Result<String, String> {
    let p = HistoryParams::from_opts(o)?;
    let base = if p.scenario == "history-ingest" {
        format!(
            "--listen 127.0.0.1:{{port}} --variables {} --rate {}",
            p.variables, p.push_rate
        )
    } else {
        format!(
            "--listen 127.0.0.1:{{port}} --preload {} --pattern {}",
            p.values, p.pattern
        )
    };
    Ok(format!("{base} {}", o.server_args).trim().to_string())
}

/// `s=History.<name>` in namespace `ns`.
pub fn history_node(ns: u16, name: &str) -> NodeId {
    NodeId::string(ns, format!("History.{name}"))
}

/// The kind of operation a [`HistoryReadWork`] repeats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReadKind {
    Raw,
    Processed,
}

/// One session repeating one history operation (every continuation point followed) in a
/// closed loop, one request in flight.
pub struct HistoryReadWork {
    pub kind: ReadKind,
    pub params: HistoryParams,
    pub namespace: Option<u16>,
    /// The pre-load's first source timestamp and count (from the server).
    pub start: DateTime,
    pub count: u64,
    cp: ByteString,
    /// The send time of the operation's first request.
    op_sent: Option<u64>,
    got: u64,
    calls: u64,
}

impl HistoryReadWork {
    pub fn new(kind: ReadKind, params: HistoryParams) -> HistoryReadWork {
        HistoryReadWork {
            kind,
            params,
            namespace: None,
            start: DateTime::NULL,
            count: 0,
            cp: ByteString::null(),
            op_sent: None,
            got: 0,
            calls: 0,
        }
    }

    fn node(&self) -> NodeId {
        history_node(self.namespace.unwrap_or(0), "V0")
    }

    fn end(&self) -> DateTime {
        DateTime(self.start.0 + self.count as i64 * SECOND)
    }

    /// The details of the operation (the same for every request of it).
    pub fn details(&self) -> ExtensionObject {
        match self.kind {
            ReadKind::Raw => ExtensionObject::from_struct(&ReadRawModifiedDetails {
                is_read_modified: false,
                start_time: self.start,
                end_time: self.end(),
                num_values_per_node: self.params.values_per_call,
                return_bounds: false,
            }),
            ReadKind::Processed => ExtensionObject::from_struct(&ReadProcessedDetails {
                start_time: self.start,
                end_time: self.end(),
                processing_interval: self.count as f64 * 1000.0 / self.params.intervals as f64,
                aggregate_type: vec![self.params.aggregate.node_id()],
                aggregate_configuration: AggregateConfiguration {
                    use_server_capabilities_defaults: true,
                    ..Default::default()
                },
            }),
        }
    }

    pub fn request(&self) -> Request {
        Request::HistoryRead(Box::new(HistoryReadRequest {
            history_read_details: self.details(),
            timestamps_to_return: TimestampsToReturn::Both,
            release_continuation_points: false,
            nodes_to_read: vec![HistoryReadValueId {
                node_id: self.node(),
                continuation_point: self.cp.clone(),
                ..Default::default()
            }],
            ..Default::default()
        }))
    }

    /// How many values one operation returns.
    pub fn expected(&self) -> u64 {
        match self.kind {
            ReadKind::Raw => self.count,
            ReadKind::Processed => self.params.intervals as u64,
        }
    }

    /// Checks the values of one response (the `got`-th value of the operation first).
    pub fn check_values(&self, values: &[DataValue]) -> Result<(), String> {
        let (lo, hi) = self.params.value_range();
        for (j, dv) in values.iter().enumerate() {
            let i = self.got + j as u64;
            if dv.status_code().is_bad() {
                return Err(format!(
                    "HistoryRead: value {i} has status {:?}",
                    dv.status_code()
                ));
            }
            let Variant::Double(x) = dv.value else {
                return Err(format!(
                    "HistoryRead: value {i} is {:?}, not a Double",
                    dv.value
                ));
            };
            if !(x >= lo && x <= hi) {
                return Err(format!(
                    "HistoryRead: value {i} = {x} outside the {} pattern's [{lo}, {hi}]",
                    self.params.pattern
                ));
            }
            if self.kind == ReadKind::Raw {
                let t = dv.source_timestamp.map(|t| t.0);
                if t != Some(self.start.0 + i as i64 * SECOND) {
                    return Err(format!(
                        "HistoryRead: value {i} at {t:?}, the pre-load put it at start + {i} s"
                    ));
                }
                if self.params.pattern == "count" && x != i as f64 {
                    return Err(format!(
                        "HistoryRead: value {i} = {x} (the count pattern stores {i})"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Accounts one HistoryRead response sent at `sent`; true when the operation is complete.
    pub fn see(
        &mut self,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<bool, String> {
        let Response::HistoryRead(r) = resp else {
            return Err(format!("HistoryRead answered with {}", resp.name()));
        };
        if r.response_header.service_result.is_bad() {
            return Err(format!(
                "HistoryRead: {:?}",
                r.response_header.service_result
            ));
        }
        let [res] = &r.results[..] else {
            return Err(format!(
                "HistoryRead: {} results for 1 node",
                r.results.len()
            ));
        };
        if res.status_code.is_bad() {
            return Err(format!("HistoryRead: {:?}", res.status_code));
        }
        let values = if res.history_data.is_null() {
            Vec::new()
        } else {
            res.history_data
                .decode_as::<HistoryData>(DecodeLimits::default())
                .ok_or("HistoryRead: the result is no HistoryData")?
                .map_err(|e| format!("HistoryData: {e:?}"))?
                .data_values
        };
        if self.op_sent.is_none() {
            self.op_sent = Some(sent);
        }
        self.check_values(&values)?;
        self.got += values.len() as u64;
        self.calls += 1;
        if !res.continuation_point.is_null() {
            self.cp = res.continuation_point.clone();
            return Ok(false);
        }
        let (got, calls, from) = (self.got, self.calls, self.op_sent.unwrap_or(sent));
        self.cp = ByteString::null();
        self.op_sent = None;
        self.got = 0;
        self.calls = 0;
        if got != self.expected() {
            return Err(format!(
                "HistoryRead: {got} values in {calls} calls, expected {}",
                self.expected()
            ));
        }
        ctx.complete(now.saturating_sub(from));
        ctx.count("values_returned", got);
        ctx.count("history_read_calls", calls);
        Ok(true)
    }
}

fn read_request(nodes: Vec<NodeId>) -> Request {
    Request::Read(Box::new(ReadRequest {
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: nodes
            .into_iter()
            .map(|n| read_value_id(n, attr::VALUE))
            .collect(),
        ..Default::default()
    }))
}

fn read_values(prev: Option<&Response>, n: usize) -> Result<Vec<Variant>, String> {
    match prev {
        Some(Response::Read(r)) if r.results.len() == n => {
            Ok(r.results.iter().map(|d| d.value.clone()).collect())
        }
        Some(other) => Err(format!("setup Read answered with {}", other.name())),
        None => Err("setup: no response".into()),
    }
}

impl Workload for HistoryReadWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match step {
            0 => Ok(Some(read_request(vec![NodeId::numeric(
                0,
                NAMESPACE_ARRAY,
            )]))),
            1 => {
                let v = read_values(prev, 1)?;
                self.namespace = Some(crate::push::namespace_index(&v[0], HISTORY_NAMESPACE_URI)?);
                let ns = self.namespace.unwrap_or(0);
                Ok(Some(read_request(vec![
                    history_node(ns, "PreloadStart"),
                    history_node(ns, "PreloadCount"),
                ])))
            }
            _ => {
                let v = read_values(prev, 2)?;
                match (&v[0], &v[1]) {
                    (Variant::DateTime(t), Variant::UInt64(n)) if *n > 0 && !t.is_null() => {
                        self.start = *t;
                        self.count = *n;
                    }
                    other => {
                        return Err(format!(
                            "PreloadStart, PreloadCount = {other:?}: the server pre-loaded nothing (history_bench --preload N)"
                        ))
                    }
                }
                if self.count != self.params.values as u64 {
                    return Err(format!(
                        "the server pre-loaded {} values, --history-values says {}",
                        self.count, self.params.values
                    ));
                }
                Ok(None)
            }
        }
    }
    fn initial(&self) -> usize {
        1
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(self.request())
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        match self.see(resp, sent, now, ctx) {
            Ok(_) => Ok(()),
            Err(e) => {
                // The next request starts a new operation.
                self.cp = ByteString::null();
                self.op_sent = None;
                self.got = 0;
                self.calls = 0;
                Err(e)
            }
        }
    }
}

/// One `history-stats` line of the server.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StatsLine {
    pub mono_ns: u64,
    pub pushed: u64,
    pub appended: u64,
    pub dropped: u64,
    pub rejected: u64,
}

/// `key=value` of a line of space-separated fields.
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
}

pub fn parse_stats(lines: &[String]) -> Vec<StatsLine> {
    let mut out: Vec<StatsLine> = lines
        .iter()
        .filter_map(|l| {
            let l = l.strip_prefix("history-stats ")?;
            let n = |k: &str| field(l, k).and_then(|v| v.parse::<u64>().ok());
            Some(StatsLine {
                mono_ns: n("mono_ns")?,
                pushed: n("pushed")?,
                appended: n("appended")?,
                dropped: n("dropped")?,
                rejected: n("rejected").unwrap_or(0),
            })
        })
        .collect();
    out.sort_by_key(|s| s.mono_ns);
    out
}

/// A counter at monotonic time `t`, interpolated linearly between the lines around it;
/// `None` unless lines lie on both sides of `t`.
pub fn counter_at(lines: &[StatsLine], t: u64, f: fn(&StatsLine) -> u64) -> Option<f64> {
    let after = lines.iter().position(|s| s.mono_ns >= t)?;
    let b = &lines[after];
    if b.mono_ns == t {
        return Some(f(b) as f64);
    }
    let a = lines.get(after.checked_sub(1)?)?;
    let w = (t - a.mono_ns) as f64 / (b.mono_ns - a.mono_ns) as f64;
    Some(f(a) as f64 + (f(b) as f64 - f(a) as f64) * w)
}

/// The ingest figures of a window from the server's stats lines, added to `o`.
pub fn ingest_figures(
    o: &mut Map<String, Value>,
    p: &HistoryParams,
    lines: &[String],
    start: u64,
    end: u64,
) {
    let stats = parse_stats(lines);
    let seconds = end.saturating_sub(start) as f64 / 1e9;
    o.insert(
        "offered_samples_per_s".into(),
        json!(round(p.variables as f64 * p.push_rate, 1)),
    );
    if p.push_rate == 0.0 {
        o.insert("ingest_samples_per_s".into(), json!(0.0));
        return;
    }
    let delta = |f: fn(&StatsLine) -> u64| -> Option<f64> {
        Some(counter_at(&stats, end, f)? - counter_at(&stats, start, f)?)
    };
    let rate = |x: Option<f64>| match x {
        Some(x) if seconds > 0.0 => json!(round(x / seconds, 1)),
        _ => Value::Null,
    };
    let appended = delta(|s| s.appended);
    let pushed = delta(|s| s.pushed);
    let dropped = delta(|s| s.dropped);
    o.insert("ingest_samples_per_s".into(), rate(appended));
    o.insert("pushed_samples_per_s".into(), rate(pushed));
    o.insert("dropped_samples_per_s".into(), rate(dropped));
    o.insert(
        "ingest_from".into(),
        json!("the store's appended counter (the writer thread), interpolated from the server's history-stats lines at the window's ends"),
    );
    if let Some(a) = appended.filter(|a| *a > 0.0) {
        let cpu = o.get("server_cpu_us").and_then(Value::as_f64);
        let push = o.get("server_app_cpu_us").and_then(Value::as_f64);
        if let Some(c) = cpu {
            o.insert("server_cpu_us_per_sample".into(), json!(round(c / a, 4)));
            if let Some(pc) = push {
                o.insert(
                    "server_cpu_us_per_sample_excl_push".into(),
                    json!(round((c - pc).max(0.0) / a, 4)),
                );
            }
        }
    }
}

/// The `history-preload` line's figures, added to `o` (`storage_*`).
pub fn preload_figures(o: &mut Map<String, Value>, lines: &[String]) {
    let line = |prefix: &str| lines.iter().find_map(|l| l.strip_prefix(prefix));
    if let Some(l) = line("history-preload ") {
        for (k, name) in [
            ("bytes_per_sample", "storage_bytes_per_sample"),
            ("segment_bytes", "storage_segment_bytes"),
            ("sealed", "storage_sealed_samples"),
            ("head", "storage_head_samples"),
            ("chunks", "storage_chunks"),
            ("wal_bytes", "storage_wal_bytes"),
            ("seconds", "preload_seconds"),
            ("dropped", "preload_dropped"),
        ] {
            if let Some(x) = field(l, k).and_then(|v| v.parse::<f64>().ok()) {
                o.insert(name.into(), json!(x));
            }
        }
        if let Some(at) = field(l, "at") {
            o.insert("preload_at".into(), json!(at));
        }
    }
    if let Some(x) = line("history-storage-probe ")
        .and_then(|l| field(l, "bytes_per_sample"))
        .and_then(|v| v.parse::<f64>().ok())
    {
        o.insert("storage_probe_bytes_per_sample".into(), json!(x));
    }
}

/// Runs a history scenario.
pub fn run_history(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    crate::security::parse_mode(&cfg.security)?;
    let p = HistoryParams::from_opts(&cfg.opts)?;
    let p2 = p.clone();
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = r.url.clone();
            let sec = crate::security::prepare(&url, &cfg.security, &cfg.opts.security_policy)?;
            let p = p2.clone();
            let inflight = cfg.inflight;
            let mut params = vec![];
            let factory: Arc<dyn Fn(usize) -> DynDriver + Send + Sync> = match p.scenario.as_str() {
                "history-ingest" => {
                    params.push(("variables".to_string(), json!(p.variables)));
                    params.push(("push_rate".to_string(), json!(p.push_rate)));
                    // The read scenario's load: closed loop, or open at --rate Reads/s in all.
                    let (rate, clients) = (cfg.opts.rate, cfg.clients.max(1));
                    if rate > 0.0 {
                        params.push(("rate".to_string(), json!(rate)));
                    }
                    Arc::new(move |i: usize| -> DynDriver {
                        let work = ReadWork::new(inflight, 1, (i as u32).wrapping_mul(37));
                        let work = if rate > 0.0 {
                            work.open_loop(rate / clients as f64, i, clients)
                        } else {
                            work
                        };
                        Box::new(UaDriver::new(&url, Box::new(work), inflight, sec.clone()))
                    })
                }
                s => {
                    let kind = if s == "history-read-raw" {
                        params.push(("values_per_call".to_string(), json!(p.values_per_call)));
                        ReadKind::Raw
                    } else {
                        params.push(("intervals".to_string(), json!(p.intervals)));
                        params.push(("aggregate".to_string(), json!(p.aggregate.name())));
                        ReadKind::Processed
                    };
                    params.push(("history_values".to_string(), json!(p.values)));
                    params.push(("history_pattern".to_string(), json!(p.pattern)));
                    Arc::new(move |_i: usize| -> DynDriver {
                        let work = HistoryReadWork::new(kind, p.clone());
                        Box::new(UaDriver::new(&url, Box::new(work), 1, sec.clone()))
                    })
                }
            };
            Ok((
                Plan::Ring {
                    conns: cfg.clients,
                    factory,
                },
                params,
            ))
        };
    let p3 = p.clone();
    let after = move |w: &Window, o: &mut Map<String, Value>| -> Result<(), String> {
        if p3.scenario == "history-ingest" {
            ingest_figures(o, &p3, &w.output, w.start_mono_ns, w.end_mono_ns);
        } else {
            preload_figures(o, &w.output);
            let ops = o.get("ops").and_then(Value::as_f64).unwrap_or(0.0);
            for (k, per) in [
                ("values_returned", "values_per_op"),
                ("history_read_calls", "calls_per_op"),
            ] {
                if let Some(x) = o.get(k).and_then(Value::as_f64).filter(|_| ops > 0.0) {
                    o.insert(per.into(), json!(round(x / ops, 1)));
                }
            }
        }
        Ok(())
    };
    // The server's stats lines come every 100 ms: one after the window's end is needed.
    let settle = if p.scenario == "history-ingest" {
        std::time::Duration::from_millis(300)
    } else {
        std::time::Duration::ZERO
    };
    // The contract's values as placeholders of --server-exe arguments (another stack's
    // server of the contract: harness/benchmarks/history-peers.variants).
    let vars = [
        ("history_values", p.values.to_string()),
        ("history_pattern", p.pattern.clone()),
        ("variables", p.variables.to_string()),
        ("push_rate", format!("{}", p.push_rate)),
    ];
    crate::run::run_with_guard_then(cfg, &vars, &plan, &|| {}, settle, &after)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_lines_interpolate_at_the_window_ends() {
        let lines: Vec<String> = [
            "listening on opc.tcp://127.0.0.1:1",
            "history-stats mono_ns=1000 pushed=10 appended=0 dropped=0 rejected=0",
            "history-stats mono_ns=2000 pushed=20 appended=100 dropped=1 rejected=0",
            "noise",
            "history-stats mono_ns=3000 pushed=30 appended=300 dropped=1 rejected=0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let s = parse_stats(&lines);
        assert_eq!(s.len(), 3);
        assert_eq!(counter_at(&s, 1500, |x| x.appended), Some(50.0));
        assert_eq!(counter_at(&s, 2000, |x| x.appended), Some(100.0));
        assert_eq!(counter_at(&s, 2750, |x| x.appended), Some(250.0));
        assert_eq!(
            counter_at(&s, 500, |x| x.appended),
            None,
            "before the first line"
        );
        assert_eq!(counter_at(&s, 3500, |x| x.appended), None, "after the last");
        let p = HistoryParams {
            scenario: "history-ingest".into(),
            variables: 10,
            push_rate: 100.0,
            values: 0,
            pattern: "count".into(),
            values_per_call: 0,
            intervals: 1,
            aggregate: Aggregate::TimeAverage,
        };
        let mut o = Map::new();
        o.insert("server_cpu_us".into(), json!(200.0));
        o.insert("server_app_cpu_us".into(), json!(50.0));
        // 1,000 ns of window = 1e-6 s: 200 samples appended.
        ingest_figures(&mut o, &p, &lines, 1000, 2000);
        assert_eq!(o["ingest_samples_per_s"], json!(100_000_000.0));
        assert_eq!(o["offered_samples_per_s"], json!(1000.0));
        assert_eq!(o["server_cpu_us_per_sample"], json!(2.0));
        assert_eq!(o["server_cpu_us_per_sample_excl_push"], json!(1.5));
    }

    #[test]
    fn preload_line() {
        let lines = vec![
            "history-preload samples=86400 pattern=Slow at=future seconds=0.5 appended=86400 dropped=0 rejected=0 series_samples=86401 sealed=86016 head=385 chunks=84 segments=1 segment_bytes=300000 wal_bytes=1 bytes_per_sample=3.488".to_string(),
        ];
        let mut o = Map::new();
        preload_figures(&mut o, &lines);
        assert_eq!(o["storage_bytes_per_sample"], json!(3.488));
        assert_eq!(o["storage_sealed_samples"], json!(86016.0));
        assert_eq!(o["preload_at"], json!("future"));
        assert!(o.get("storage_probe_bytes_per_sample").is_none());
        preload_figures(
            &mut o,
            &["history-storage-probe samples=86400 server_offset_ms=10 sealed=86016 segment_bytes=1 bytes_per_sample=1.25".to_string()],
        );
        assert_eq!(o["storage_probe_bytes_per_sample"], json!(1.25));
    }

    #[test]
    fn options_and_defaults() {
        let o = RunOpts::try_parse_words(["run", "--scenario", "history-read-processed"]).unwrap();
        let p = HistoryParams::from_opts(&o).unwrap();
        assert_eq!(
            (p.values, p.intervals, p.pattern.as_str()),
            (86_400, 1440, "slow")
        );
        assert!(p.aggregate.is_supported());
        assert_eq!(
            server_args(&o).unwrap(),
            "--listen 127.0.0.1:{port} --preload 86400 --pattern slow"
        );
        let o = RunOpts::try_parse_words([
            "run",
            "--scenario",
            "history-ingest",
            "--variables",
            "100",
            "--push-rate",
            "10",
        ])
        .unwrap();
        assert_eq!(crate::options::check(&o), Ok(()));
        assert_eq!(
            server_args(&o).unwrap(),
            "--listen 127.0.0.1:{port} --variables 100 --rate 10"
        );
        let o = RunOpts::try_parse_words([
            "run",
            "--scenario",
            "history-read-raw",
            "--intervals",
            "10",
        ])
        .unwrap();
        assert!(crate::options::check(&o)
            .unwrap_err()
            .contains("--intervals"));
        let o =
            RunOpts::try_parse_words(["run", "--scenario", "read", "--push-rate", "10"]).unwrap();
        assert!(crate::options::check(&o).is_err());
        assert!(pick_aggregate(Some("NoSuch")).is_err());
        assert_eq!(
            pick_aggregate(Some("timeaverage")),
            Ok(Aggregate::TimeAverage)
        );
    }

    #[test]
    fn raw_values_are_checked() {
        let p = HistoryParams {
            scenario: "history-read-raw".into(),
            variables: 1,
            push_rate: 0.0,
            values: 3,
            pattern: "count".into(),
            values_per_call: 0,
            intervals: 1,
            aggregate: Aggregate::TimeAverage,
        };
        let mut w = HistoryReadWork::new(ReadKind::Raw, p);
        w.start = DateTime(1_000 * SECOND);
        w.count = 3;
        let dv = |i: i64, x: f64| DataValue {
            source_timestamp: Some(DateTime(w.start.0 + i * SECOND)),
            ..DataValue::new(Variant::Double(x))
        };
        assert_eq!(w.check_values(&[dv(0, 0.0), dv(1, 1.0)]), Ok(()));
        assert!(w.check_values(&[dv(0, 1.0)]).is_err(), "a wrong value");
        assert!(w.check_values(&[dv(1, 0.0)]).is_err(), "a wrong time");
        assert!(w.check_values(&[dv(0, 5.0)]).is_err(), "outside the range");
        let d = w.details();
        assert!(d
            .decode_as::<ReadRawModifiedDetails>(DecodeLimits::default())
            .is_some());
    }
}
