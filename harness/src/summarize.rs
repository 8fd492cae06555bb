//! `uaring-bench summarize`: raw JSON lines → Markdown tables (median with
//! min–max per variant), CSV and SVG bar charts.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::cli::SummarizeOpts;

/// Metrics in the tables: (key, column title, decimals).
pub const METRICS: &[(&str, &str, usize)] = &[
    ("ops_per_s", "ops/s", 0),
    ("p50_us", "p50 µs", 1),
    ("p99_us", "p99 µs", 1),
    ("server_cpu_us_per_op", "server CPU µs/op", 2),
    ("client_cpu_us_per_op", "client CPU µs/op", 2),
    ("server_rss_kb", "server RSS kB", 0),
    ("foreign_cores", "foreign load, cores", 2),
];

/// Metrics shown only in tables whose runs report them (subscriptions, capacity).
pub const EXTRA_METRICS: &[(&str, &str, usize)] = &[
    // Plant scale (scale-nodes, scale-items).
    (
        "bytes_per_variable",
        "server bytes/variable (RSS at N − at 100, after the window)",
        0,
    ),
    (
        "bytes_per_variable_at_ready",
        "server bytes/variable at ready",
        0,
    ),
    ("startup_s", "start-up to ready, s", 3),
    (
        "baseline_server_cpu_us_per_op",
        "server CPU µs/op at 100 variables",
        2,
    ),
    (
        "server_cpu_per_op_ratio_to_baseline",
        "server CPU/op ÷ at 100 variables",
        3,
    ),
    ("bytes_per_item", "server bytes/item (RSS delta)", 0),
    (
        "items_on_time_share",
        "items on time (every change within sampling + publishing + 100 ms)",
        4,
    ),
    ("create_items_ms", "one CreateMonitoredItems, ms", 1),
    ("delete_items_ms", "its items deleted (CloseSession), ms", 1),
    // scale-churn.
    ("quiet_p99_us", "Read p99 µs, quiet", 1),
    ("churn_p99_us", "Read p99 µs, nodes coming and going", 1),
    ("churn_p99_ratio", "Read p99 under churn ÷ quiet", 2),
    ("nodes_added_per_s", "nodes added/s", 0),
    ("nodes_deleted_per_s", "nodes deleted/s", 0),
    ("reader_errors", "readers' errors", 0),
    ("churn_errors", "churn errors", 0),
    (
        "server_vm_rss_kept_after_churn_kb",
        "server RSS kept after the churn, kB",
        0,
    ),
    // The gateway (harness/benchmarks/gateway.sh adds them to its gateway runs).
    (
        "downstream_items",
        "monitored items at the downstream server",
        0,
    ),
    (
        "changes_lost",
        "stores lost to the shard's change inbox (whole run)",
        0,
    ),
    ("capacity_items", "capacity, items", 0),
    ("min_sample_ratio", "min sample ratio", 3),
    ("delivered_ratio", "delivered share", 3),
    ("delivered_share", "delivered share, every change", 4),
    ("pushed_updates_per_s", "pushed updates/s", 0),
    (
        "server_cpu_us_per_notification_excl_push",
        "server CPU µs/notification without the push thread",
        3,
    ),
    ("changes_missing", "changes missing", 0),
    (
        "server_part_p99_us",
        "p99 µs of it in the server (SourceTimestamp → PublishTime)",
        1,
    ),
    (
        "ingest_samples_per_s",
        "history samples/s into the store",
        0,
    ),
    (
        "dropped_samples_per_s",
        "history samples/s dropped (queue full)",
        0,
    ),
    (
        "server_cpu_us_per_sample_excl_push",
        "server CPU µs/sample without the push threads",
        3,
    ),
    ("values_per_op", "history values/op", 0),
    ("calls_per_op", "HistoryRead calls/op", 1),
    (
        "storage_bytes_per_sample",
        "store bytes/sample (served pre-load)",
        3,
    ),
    (
        "storage_probe_bytes_per_sample",
        "store bytes/sample (steady server timestamps)",
        3,
    ),
    ("server_segments_per_op", "server TCP data segs/op", 2),
    ("client_segments_per_op", "client TCP data segs/op", 2),
    ("rsa_key_bits", "server RSA key bits", 0),
    ("rsa_bound_us_per_op", "RSA bound µs/op", 0),
    ("rsa_bound_share", "share of the RSA bound", 3),
    (
        "server_poller_share",
        "SQPOLL pollers' share of the server CPU",
        3,
    ),
];

/// Extra metrics every run reports, shown only in tables where one run has a non-zero value
/// (every uaring run says how much of its CPU SQPOLL pollers took, 0 without them).
const SHOWN_WHEN_NONZERO: &[&str] = &["server_poller_share"];

/// Results of one (scenario, variant) cell.
#[derive(Clone, Debug, Default)]
pub struct Cell {
    pub runs: Vec<Map<String, Value>>,
    pub failed: usize,
}

impl Cell {
    pub fn values(&self, key: &str) -> Vec<f64> {
        self.runs
            .iter()
            .filter_map(|r| r.get(key).and_then(|v| v.as_f64()))
            .collect()
    }

    pub fn stat(&self, key: &str) -> Option<Stat> {
        Stat::of(&self.values(key))
    }

    pub fn sum(&self, key: &str) -> u64 {
        self.runs
            .iter()
            .filter_map(|r| r.get(key).and_then(|v| v.as_u64()))
            .sum()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stat {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Stat {
    pub fn of(values: &[f64]) -> Option<Stat> {
        if values.is_empty() {
            return None;
        }
        let mut v = values.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Some(Stat {
            median,
            min: v[0],
            max: v[n - 1],
            n,
        })
    }
}

/// Grouped results: scenario → variant → cell, both in first-seen order.
#[derive(Debug, Default)]
pub struct Table {
    pub scenarios: Vec<String>,
    pub variants: Vec<String>,
    pub cells: BTreeMap<(String, String), Cell>,
    pub hosts: Vec<Map<String, Value>>,
}

pub fn group(text: &str) -> Result<Table, String> {
    let mut t = Table::default();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).map_err(|e| format!("line {}: {e}", i + 1))?;
        let Value::Object(o) = v else {
            return Err(format!("line {}: not an object", i + 1));
        };
        let scenario = o
            .get("scenario_name")
            .or_else(|| o.get("scenario"))
            .and_then(|v| v.as_str())
            .unwrap_or("run")
            .to_string();
        let variant = o
            .get("variant")
            .and_then(|v| v.as_str())
            .unwrap_or("default")
            .to_string();
        if !t.scenarios.contains(&scenario) {
            t.scenarios.push(scenario.clone());
        }
        if !t.variants.contains(&variant) {
            t.variants.push(variant.clone());
        }
        let cell = t.cells.entry((scenario, variant)).or_default();
        if o.contains_key("error") {
            cell.failed += 1;
        } else {
            if t.hosts.is_empty() && o.contains_key("kernel") {
                t.hosts.push(o.clone());
            }
            cell.runs.push(o);
        }
    }
    Ok(t)
}

fn num(v: f64, decimals: usize) -> String {
    if decimals == 0 {
        let r = v.round() as i64;
        // Thousands separators for readability.
        let s = r.abs().to_string();
        let head = s.len() % 3;
        let mut groups: Vec<&str> = Vec::new();
        if head > 0 {
            groups.push(&s[..head]);
        }
        groups.extend(
            s.as_bytes()[head..]
                .chunks(3)
                .map(|c| std::str::from_utf8(c).unwrap_or("")),
        );
        let out = groups.join(",");
        if r < 0 {
            format!("-{out}")
        } else {
            out
        }
    } else {
        format!("{v:.decimals$}")
    }
}

fn stat_cell(s: Option<Stat>, decimals: usize) -> String {
    match s {
        None => "–".into(),
        Some(s) if s.n == 1 || s.min == s.max => num(s.median, decimals),
        Some(s) => format!(
            "{} ({}–{})",
            num(s.median, decimals),
            num(s.min, decimals),
            num(s.max, decimals)
        ),
    }
}

/// Open connections per shard (uaring) in each run, distinct splits in order:
/// `6/4, 5/5`.
fn shard_split(cell: &Cell) -> String {
    let mut seen: Vec<String> = Vec::new();
    for r in &cell.runs {
        if let Some(Value::Array(shards)) = r.get("shards") {
            let parts: Vec<String> = shards
                .iter()
                .map(|s| {
                    s.get("connections")
                        .map(crate::report::fmt)
                        .unwrap_or_else(|| "?".into())
                })
                .collect();
            let split = parts.join("/");
            if !seen.contains(&split) {
                seen.push(split);
            }
        }
    }
    if seen.is_empty() {
        "–".into()
    } else {
        seen.join(", ")
    }
}

/// A short description of a variant's setup from its first run.
fn setup_of(cell: &Cell) -> String {
    let Some(r) = cell.runs.first() else {
        return String::new();
    };
    let g = |k: &str| r.get(k).map(crate::report::fmt).unwrap_or_default();
    // Runs from before `--send` existed: ring scenarios were batched; connect's
    // sequential handshake always wrote one message per send.
    let send = match r.get("send") {
        Some(v) => crate::report::fmt(v),
        None if g("scenario") == "connect" => "per-request (before --send)".into(),
        None => "batched (before --send)".into(),
    };
    let mut x = format!(
        "{} · {} · {} · srv {} · cli {}",
        g("server"),
        g("security"),
        send,
        g("server_cpus"),
        g("client_cpus")
    );
    if r.get("idle_sessions")
        .and_then(|v| v.as_u64())
        .is_some_and(|n| n > 0)
    {
        x.push_str(&format!(" · {} idle sessions", g("idle_sessions")));
    }
    // Scheduling priorities, where a run set one (`--server-priority`, `--client-priority`).
    for (key, who) in [("server_priority", "srv"), ("client_priority", "cli")] {
        match r
            .get(key)
            .and_then(|v| v.get("requested"))
            .and_then(Value::as_str)
        {
            // nice:0 given explicitly is the default: not worth a word.
            Some(p) if p != "nice:0" => x.push_str(&format!(" · {who} prio {p}")),
            _ => {}
        }
    }
    // The client's loop and its I/O modes, where a run says (runs before `client_io_modes`
    // used the default modes).
    if let Some(io) = r.get("client_io") {
        let modes = r
            .get("client_io_modes")
            .map(crate::report::fmt)
            .unwrap_or_else(|| "default".into());
        x.push_str(&format!(
            " · client loop {} ({modes})",
            crate::report::fmt(io)
        ));
    }
    x
}

pub fn markdown(t: &Table) -> String {
    let mut s = String::new();
    for sc in &t.scenarios {
        let variants: Vec<&String> = t
            .variants
            .iter()
            .filter(|v| t.cells.contains_key(&(sc.clone(), (*v).clone())))
            .collect();
        if variants.is_empty() {
            continue;
        }
        let first = &t.cells[&(sc.clone(), variants[0].clone())];
        let shape = first
            .runs
            .first()
            .map(|r| {
                let g = |k: &str| r.get(k).map(crate::report::fmt).unwrap_or_default();
                let mut x = if g("scenario") == "connect" {
                    // Results before the JSON said so carry the unused --inflight.
                    format!("scenario `connect`, {} clients, each establishing one session at a time", g("clients"))
                } else {
                    format!("scenario `{}`, {} clients × {} in flight", g("scenario"), g("clients"), g("inflight"))
                };
                if let Some(n) = r.get("nodes") {
                    x.push_str(&format!(", {} nodes per request", crate::report::fmt(n)));
                }
                if g("scenario") == "scale-churn" {
                    x.push_str(&format!(
                        ", Reads of plant variables spread over all {} and a subscription of {} items each, while one more session adds {} nodes ({} per request, at {}) and deletes them again; {} s quiet, then the churn",
                        g("variables"),
                        g("items"),
                        g("churn_nodes"),
                        g("churn_batch"),
                        match r.get("churn_rate").and_then(|v| v.as_f64()) {
                            Some(x) if x > 0.0 => format!("{} nodes/s", num(x, 0)),
                            _ => "the server's pace".to_string(),
                        },
                        g("quiet_s"),
                    ));
                }
                if g("scenario") == "scale-nodes" {
                    x.push_str(&format!(
                        ", {} of plant variables spread over all {} (beside a server of {} in the same run, the same load)",
                        g("service"),
                        g("variables"),
                        g("baseline_variables")
                    ));
                }
                if let Some(n) = r.get("rate").and_then(|v| v.as_f64()) {
                    x.push_str(&format!(
                        ", open loop at {} Reads/s in all (latency from when each was due; in flight is the cap)",
                        num(n, 0)
                    ));
                }
                if r.get("sessions").is_some() {
                    x.push_str(&format!(
                        ", {} sessions × {} subscriptions × {} items",
                        g("sessions"),
                        g("subscriptions"),
                        g("items"),
                    ));
                    if r.get("push_rate").is_some() {
                        // Push: the server changes its values itself; no writer sessions.
                        x.push_str(&format!(
                            ", {} variables pushed at {} Hz each by the server's application, queue {}",
                            g("variables"),
                            g("push_rate"),
                            g("queue_size")
                        ));
                    } else if r.get("writers").is_some() {
                        x.push_str(&format!(
                            ", {} writer(s) at {} writes/s",
                            g("writers"),
                            g("write_rate")
                        ));
                    }
                    x.push_str(&format!(
                        ", publishing {} ms, sampling {} ms",
                        g("publishing_ms"),
                        g("sampling_ms")
                    ));
                    if r.get("create_items").and_then(|v| v.as_u64()).is_some_and(|c| c > 0) {
                        x.push_str(&format!(
                            ", then one CreateMonitoredItems of {} items on the server still holding them",
                            g("create_items")
                        ));
                    }
                }
                if let Some(s) = r.get("scenario").and_then(|v| v.as_str()) {
                    if s == "history-ingest"
                        && r.get("push_rate").and_then(|v| v.as_f64()) == Some(0.0)
                    {
                        x.push_str(&format!(
                            ", Reads beside {} historized variables, nothing pushed (the baseline)",
                            g("variables")
                        ));
                    } else if s == "history-ingest" {
                        x.push_str(&format!(
                            ", Reads beside {} historized variables pushed at {} Hz each by the server's application",
                            g("variables"),
                            g("push_rate")
                        ));
                    } else if s.starts_with("history-read") {
                        x.push_str(&format!(
                            ", one operation reads {} values pre-loaded at 1 Hz (pattern {})",
                            g("history_values"),
                            g("history_pattern")
                        ));
                        if r.get("intervals").is_some() {
                            x.push_str(&format!(
                                " into {} intervals with {}",
                                g("intervals"),
                                g("aggregate")
                            ));
                        }
                    }
                }
                x.push_str(&format!(", {} s measured", g("seconds")));
                x
            })
            .unwrap_or_default();
        s.push_str(&format!(
            "#### {sc}\n\n{shape}; median (min–max) over runs.\n\n"
        ));
        let reported = |k: &str| {
            variants.iter().any(|v| {
                t.cells[&(sc.clone(), (*v).clone())].runs.iter().any(|r| {
                    r.get(k).is_some_and(|x| {
                        !x.is_null()
                            && (!SHOWN_WHEN_NONZERO.contains(&k)
                                || x.as_f64().is_some_and(|f| f != 0.0))
                    })
                })
            })
        };
        let metrics: Vec<(&str, &str, usize)> = EXTRA_METRICS
            .iter()
            .copied()
            .filter(|(k, _, _)| reported(k))
            .chain(METRICS.iter().copied())
            .collect();
        s.push_str("| variant | setup | conns/shard | runs |");
        for (_, title, _) in &metrics {
            s.push_str(&format!(" {title} |"));
        }
        s.push_str(" ops/s ratio | errors | discarded |\n|---|---|---|---:|");
        for _ in &metrics {
            s.push_str("---:|");
        }
        s.push_str("---:|---:|---:|\n");
        let base = first.stat("ops_per_s").map(|s| s.median).unwrap_or(0.0);
        for v in variants {
            let cell = &t.cells[&(sc.clone(), v.clone())];
            let runs = if cell.failed > 0 {
                format!("{} (+{} failed)", cell.runs.len(), cell.failed)
            } else {
                cell.runs.len().to_string()
            };
            s.push_str(&format!(
                "| {v} | {} | {} | {runs} |",
                setup_of(cell),
                shard_split(cell)
            ));
            for (k, _, d) in &metrics {
                s.push_str(&format!(" {} |", stat_cell(cell.stat(k), *d)));
            }
            let ratio = match cell.stat("ops_per_s") {
                Some(st) if base > 0.0 => format!("{:.2}", st.median / base),
                _ => "–".into(),
            };
            s.push_str(&format!(
                " {ratio} | {} | {} |\n",
                cell.sum("errors"),
                cell.sum("discarded_runs")
            ));
        }
        s.push('\n');
    }
    s
}

/// The run of `cell` with the median throughput (the lower middle of an even count).
fn median_run(cell: &Cell) -> Option<&Map<String, Value>> {
    let mut runs: Vec<&Map<String, Value>> = cell.runs.iter().collect();
    runs.sort_by(|a, b| {
        let f = |r: &Map<String, Value>| r.get("ops_per_s").and_then(Value::as_f64).unwrap_or(0.0);
        f(a).partial_cmp(&f(b)).unwrap_or(std::cmp::Ordering::Equal)
    });
    runs.get(runs.len().saturating_sub(1) / 2).copied()
}

/// Profiles of the profiled cells (`run --profile`): for each, the run with the median
/// throughput, its server threads most busy first with their CPU and top functions by self
/// time, and the flame graph's file. Empty when no run was profiled.
pub fn profiles(t: &Table) -> String {
    let mut s = String::new();
    for ((sc, v), cell) in ordered(t) {
        let Some(run) = median_run(cell) else {
            continue;
        };
        let Some(p) = run.get("profile") else {
            continue;
        };
        if s.is_empty() {
            s.push_str(
                "#### Profiles: where the server's CPU went\n\n\
                 perf `cpu-clock` samples of the server process during the measured window \
                 (`run --profile`), the run with the median throughput of each profiled cell; a \
                 thread's CPU is its samples × the period ÷ the window, in cores; its functions \
                 are by self time, as shares of its samples. The flame graph and perf.data are \
                 written beside the raw results (not kept in the repository: the command above \
                 makes them again).\n\n\
                 | scenario | variant | thread (class) | CPU, cores | top functions by self time | flame graph |\n\
                 |---|---|---|---:|---|---|\n",
            );
        }
        let svg = p
            .pointer("/files/svg")
            .and_then(Value::as_str)
            .and_then(|f| std::path::Path::new(f).file_name())
            .map(|f| format!("`{}`", f.to_string_lossy()))
            .unwrap_or_default();
        for th in p
            .get("threads")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let cpu = th.get("cpu").and_then(Value::as_f64).unwrap_or(0.0);
            if cpu < 0.01 {
                continue;
            }
            let top: Vec<String> = th
                .get("top")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|x| {
                    format!(
                        "`{}` {:.0} %",
                        x.get("function").and_then(Value::as_str).unwrap_or("?"),
                        x.get("share").and_then(Value::as_f64).unwrap_or(0.0) * 100.0
                    )
                })
                .collect();
            s.push_str(&format!(
                "| {sc} | {v} | {} ({}) | {:.2} | {} | {svg} |\n",
                th.get("name").and_then(Value::as_str).unwrap_or("?"),
                th.get("class").and_then(Value::as_str).unwrap_or("?"),
                cpu,
                top.join(", ")
            ));
        }
    }
    if !s.is_empty() {
        s.push('\n');
    }
    s
}

/// Scheduler states per thread class (`server_sched`, `client_sched`), medians per cell: a
/// class's CPU seconds, the seconds it was runnable but waited for a CPU (run delay), and its
/// migrations, so a placement table shows contention, not only CPU.
pub fn sched(t: &Table) -> String {
    let mut s = String::new();
    for sc in &t.scenarios {
        let cells: Vec<(&String, &Cell)> = t
            .variants
            .iter()
            .filter_map(|v| t.cells.get(&(sc.clone(), v.clone())).map(|c| (v, c)))
            .collect();
        let classes = |key: &str| -> Vec<String> {
            let mut out: Vec<String> = Vec::new();
            for (_, c) in &cells {
                for r in &c.runs {
                    for k in r
                        .get(key)
                        .and_then(Value::as_object)
                        .into_iter()
                        .flat_map(|o| o.keys())
                    {
                        if !out.contains(k) {
                            out.push(k.clone());
                        }
                    }
                }
            }
            out
        };
        let (server, client) = (classes("server_sched"), classes("client_sched"));
        if server.is_empty() && client.is_empty() {
            continue;
        }
        s.push_str(&format!(
            "#### Scheduler states: {sc}\n\nPer thread class, medians over runs: CPU seconds running · seconds runnable but waiting for a CPU (run delay) · migrations, in the measured window.\n\n| variant |"
        ));
        for c in &server {
            s.push_str(&format!(" server {c} |"));
        }
        for c in &client {
            s.push_str(&format!(" client {c} |"));
        }
        s.push_str("\n|---|");
        for _ in server.iter().chain(&client) {
            s.push_str("---|");
        }
        s.push('\n');
        for (v, cell) in &cells {
            s.push_str(&format!("| {v} |"));
            for (key, list) in [("server_sched", &server), ("client_sched", &client)] {
                for class in list {
                    let vals = |f: &str| -> Vec<f64> {
                        cell.runs
                            .iter()
                            .filter_map(|r| r.get(key)?.get(class)?.get(f)?.as_f64())
                            .collect()
                    };
                    let med = |f: &str, d: usize| {
                        Stat::of(&vals(f)).map_or("–".to_string(), |st| num(st.median, d))
                    };
                    if vals("cpu_s").is_empty() {
                        s.push_str(" – |");
                    } else {
                        s.push_str(&format!(
                            " {} · {} · {} |",
                            med("cpu_s", 2),
                            med("run_delay_s", 2),
                            med("migrations", 0)
                        ));
                    }
                }
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

/// Ratio tables: for each `A/B` pair, A's median divided by B's in every
/// scenario where both ran: server CPU per op (below 1: A spends less) and
/// throughput (above 1: A serves more).
pub fn ratios(t: &Table, pairs: &[(String, String)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut s = String::new();
    for (key, title) in [
        ("server_cpu_us_per_op", "server CPU per op"),
        ("ops_per_s", "throughput (ops/s)"),
    ] {
        s.push_str(&format!(
            "#### Ratios: {title}, median ÷ median\n\n| A ÷ B |"
        ));
        for sc in &t.scenarios {
            s.push_str(&format!(" {sc} |"));
        }
        s.push_str("\n|---|");
        for _ in &t.scenarios {
            s.push_str("---:|");
        }
        s.push('\n');
        for (a, b) in pairs {
            s.push_str(&format!("| {a} ÷ {b} |"));
            for sc in &t.scenarios {
                let m = |v: &String| {
                    t.cells
                        .get(&(sc.clone(), v.clone()))
                        .and_then(|c| c.stat(key))
                        .map(|st| st.median)
                };
                let cell = match (m(a), m(b)) {
                    (Some(x), Some(y)) if y > 0.0 => format!("{:.2}", x / y),
                    _ => "–".into(),
                };
                s.push_str(&format!(" {cell} |"));
            }
            s.push('\n');
        }
        s.push('\n');
    }
    s
}

pub fn csv(t: &Table) -> String {
    let mut s = String::from("scenario,variant,metric,runs,median,min,max\n");
    for ((sc, v), cell) in ordered(t) {
        for (k, _, _) in METRICS {
            if let Some(st) = cell.stat(k) {
                s.push_str(&format!(
                    "{sc},{v},{k},{},{},{},{}\n",
                    st.n, st.median, st.min, st.max
                ));
            }
        }
    }
    s
}

fn ordered(t: &Table) -> Vec<((String, String), &Cell)> {
    let mut out = Vec::new();
    for sc in &t.scenarios {
        for v in &t.variants {
            if let Some(c) = t.cells.get(&(sc.clone(), v.clone())) {
                out.push(((sc.clone(), v.clone()), c));
            }
        }
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One SVG per scenario: two panels of horizontal bars (median) with min–max
/// whiskers: throughput and server CPU per operation, one bar per variant.
pub fn svg(t: &Table, scenario: &str) -> Option<String> {
    let cells: Vec<(&String, &Cell)> = t
        .variants
        .iter()
        .filter_map(|v| {
            t.cells
                .get(&(scenario.to_string(), v.clone()))
                .map(|c| (v, c))
        })
        .collect();
    if cells.is_empty() {
        return None;
    }
    let panels = [
        ("ops_per_s", "throughput, ops/s", 0usize),
        ("server_cpu_us_per_op", "server CPU per op, µs", 2usize),
    ];
    let label_w = 170.0;
    let bar_area = 360.0;
    let panel_w = label_w + bar_area + 90.0;
    let row_h = 22.0;
    let top = 46.0;
    let h = top + row_h * cells.len() as f64 + 30.0;
    let w = panel_w * 2.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"8\" y=\"18\" font-size=\"14\" font-weight=\"bold\">{}</text>\n",
        esc(scenario)
    );
    let colors = [
        "#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7",
        "#9c755f", "#bab0ac",
    ];
    for (pi, (key, title, dec)) in panels.iter().enumerate() {
        let x0 = pi as f64 * panel_w;
        s.push_str(&format!(
            "<text x=\"{}\" y=\"36\" font-weight=\"bold\">{}</text>\n",
            x0 + 8.0,
            esc(title)
        ));
        let max = cells
            .iter()
            .filter_map(|(_, c)| c.stat(key))
            .map(|st| st.max)
            .fold(0.0f64, f64::max);
        let scale = if max > 0.0 { bar_area / max } else { 0.0 };
        for (i, (v, c)) in cells.iter().enumerate() {
            let y = top + i as f64 * row_h;
            s.push_str(&format!(
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n",
                x0 + label_w - 6.0,
                y + 14.0,
                esc(v)
            ));
            if let Some(st) = c.stat(key) {
                let bw = st.median * scale;
                s.push_str(&format!(
                    "<rect x=\"{}\" y=\"{}\" width=\"{bw:.1}\" height=\"{}\" fill=\"{}\"/>\n",
                    x0 + label_w,
                    y + 3.0,
                    row_h - 6.0,
                    colors[i % colors.len()]
                ));
                let (a, b) = (x0 + label_w + st.min * scale, x0 + label_w + st.max * scale);
                let ym = y + row_h / 2.0;
                s.push_str(&format!("<path d=\"M{a:.1} {ym:.1}H{b:.1}M{a:.1} {:.1}V{:.1}M{b:.1} {:.1}V{:.1}\" stroke=\"black\" stroke-width=\"1\"/>\n", ym - 4.0, ym + 4.0, ym - 4.0, ym + 4.0));
                s.push_str(&format!(
                    "<text x=\"{:.1}\" y=\"{}\">{}</text>\n",
                    b.max(x0 + label_w + bw) + 4.0,
                    y + 14.0,
                    esc(&num(st.median, *dec))
                ));
            } else {
                s.push_str(&format!(
                    "<text x=\"{}\" y=\"{}\">–</text>\n",
                    x0 + label_w + 4.0,
                    y + 14.0
                ));
            }
        }
        s.push_str(&format!(
            "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#444\"/>\n",
            x0 + label_w,
            top,
            top + row_h * cells.len() as f64
        ));
    }
    s.push_str(&format!("<text x=\"8\" y=\"{}\" fill=\"#555\">bars: median; whiskers: min–max over runs</text>\n</svg>\n", h - 8.0));
    Some(s)
}

pub fn header(t: &Table, command: Option<&str>) -> String {
    let mut s = String::new();
    if let Some(h) = t.hosts.first() {
        let g = |k: &str| {
            h.get(k)
                .map(crate::report::fmt)
                .unwrap_or_else(|| "?".into())
        };
        s.push_str(&format!(
            "Host `{}`, kernel `{}`, CPU {} ({} online CPUs), commit `{}`.\n\n",
            g("host"),
            g("kernel"),
            g("cpu_model"),
            g("online_cpus"),
            g("commit")
        ));
    }
    if let Some(c) = command {
        s.push_str(&format!("Reproduce: `{c}`\n\n"));
    }
    s
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `summarize --in FILE [--md FILE] [--csv FILE] [--svg PREFIX] [--command CMD]`
pub fn summarize_main(a: &SummarizeOpts) -> Result<i32, String> {
    let input = a.input();
    let text = std::fs::read_to_string(input).map_err(|e| format!("{input}: {e}"))?;
    let t = group(&text)?;
    let mut md = header(&t, a.command.as_deref());
    md.push_str(&markdown(&t));
    md.push_str(&ratios(&t, &a.ratios));
    md.push_str(&profiles(&t));
    if a.sched {
        md.push_str(&sched(&t));
    }
    if let Some(prefix) = &a.svg {
        let mut links = String::new();
        for sc in &t.scenarios {
            if let Some(svg) = svg(&t, sc) {
                let path = format!("{prefix}-{}.svg", slug(sc));
                std::fs::write(&path, svg).map_err(|e| format!("{path}: {e}"))?;
                let name = std::path::Path::new(&path)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                links.push_str(&format!(
                    "![{sc}]({})\n\n",
                    a.svg_link_prefix
                        .as_ref()
                        .map(|p| format!("{p}{name}"))
                        .unwrap_or(path.clone())
                ));
            }
        }
        md.push_str(&links);
    }
    if let Some(p) = &a.csv {
        std::fs::write(p, csv(&t)).map_err(|e| format!("{p}: {e}"))?;
    }
    match &a.md {
        Some(p) => std::fs::write(p, &md).map_err(|e| format!("{p}: {e}"))?,
        None => print!("{md}"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw() -> String {
        let mut s = String::new();
        for (v, ops, cpu) in [
            ("a", 100.0, 2.0),
            ("b", 300.0, 1.0),
            ("a", 120.0, 2.5),
            ("b", 200.0, 1.5),
            ("a", 110.0, 2.2),
        ] {
            s.push_str(&format!(
                "{{\"scenario\":\"read\",\"scenario_name\":\"read-d32\",\"variant\":\"{v}\",\"send\":\"per-request\",\"ops_per_s\":{ops},\"server_cpu_us_per_op\":{cpu},\"errors\":0,\"discarded_runs\":0,\"clients\":4,\"inflight\":32,\"kernel\":\"k\"}}\n"
            ));
        }
        s.push_str("{\"scenario_name\":\"read-d32\",\"variant\":\"b\",\"error\":\"boom\"}\n");
        s
    }

    #[test]
    fn median_min_max() {
        assert_eq!(
            Stat::of(&[3.0, 1.0, 2.0]).unwrap(),
            Stat {
                median: 2.0,
                min: 1.0,
                max: 3.0,
                n: 3
            }
        );
        assert_eq!(Stat::of(&[4.0, 1.0]).unwrap().median, 2.5);
        assert!(Stat::of(&[]).is_none());
    }

    #[test]
    fn table_and_csv_and_svg() {
        let t = group(&raw()).unwrap();
        assert_eq!(t.variants, vec!["a", "b"]);
        let cell_b = &t.cells[&("read-d32".to_string(), "b".to_string())];
        assert_eq!(cell_b.failed, 1);
        let md = markdown(&t);
        assert!(md.contains("| a |"), "{md}");
        assert!(
            md.contains(" · per-request · "),
            "the send mode is in the setup column: {md}"
        );
        assert!(!md.contains("idle sessions"), "none held: {md}");
        assert!(md.contains("110 (100–120)"), "{md}");
        assert!(md.contains("250 (200–300)"), "{md}");
        assert!(md.contains("2.27"), "ratio b/a: {md}");
        assert!(md.contains("2 (+1 failed)"), "{md}");
        let r = ratios(&t, &[("b".into(), "a".into()), ("a".into(), "zz".into())]);
        assert!(r.contains("| b ÷ a | 0.57 |"), "CPU 1.25 / 2.2: {r}");
        assert!(r.contains("| b ÷ a | 2.27 |"), "ops 250 / 110: {r}");
        assert!(r.contains("| a ÷ zz | – |"), "{r}");
        let c = csv(&t);
        assert!(c.contains("read-d32,a,ops_per_s,3,110,100,120"), "{c}");
        let svg = svg(&t, "read-d32").unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 1 + 4);
    }

    #[test]
    fn idle_sessions_in_the_setup_column() {
        let raw = "{\"scenario\":\"read\",\"variant\":\"a\",\"server\":\"uaring\",\"send\":\"per-request\",\"ops_per_s\":10,\"clients\":1,\"inflight\":1,\"idle_sessions\":8}\n";
        let md = markdown(&group(raw).unwrap());
        assert!(
            md.contains(" · per-request · srv  · cli  · 8 idle sessions |"),
            "{md}"
        );
    }

    #[test]
    fn priorities_in_the_setup_column_only_when_set() {
        let row = |v: &str, extra: &str| {
            format!("{{\"scenario\":\"read\",\"variant\":\"{v}\",\"server\":\"uaring\",\"send\":\"batched\",\"ops_per_s\":10,\"clients\":1,\"inflight\":1{extra}}}\n")
        };
        let md = markdown(
            &group(
                &(row("plain", "")
                    + &row(
                        "rt",
                        ",\"server_priority\":{\"requested\":\"fifo:10\",\"threads\":2,\"at_requested\":2},\"client_priority\":{\"requested\":\"nice:5\"}",
                    )),
            )
            .unwrap(),
        );
        assert!(md.contains(" · srv prio fifo:10 · cli prio nice:5"), "{md}");
        assert_eq!(
            md.matches("prio").count(),
            2,
            "only the row that set them: {md}"
        );
        let default =
            markdown(&group(&row("d", ",\"server_priority\":{\"requested\":\"nice:0\"}")).unwrap());
        assert!(
            !default.contains("prio"),
            "the default is not shown: {default}"
        );
    }

    #[test]
    fn profiles_of_the_median_run_and_scheduler_states() {
        let row = |v: &str, ops: f64, shard_cpu: f64, poller: bool| {
            let profile = if v == "sq-prof" {
                format!(",\"profile\":{{\"files\":{{\"svg\":\"/r/io.read.{v}.r{ops}.svg\"}},\"threads\":[{{\"name\":\"iou-sqp-7\",\"class\":\"poller\",\"cpu\":0.61,\"top\":[{{\"function\":\"io_sq_thread\",\"share\":0.34}},{{\"function\":\"tcp_sendmsg\",\"share\":0.2}}]}},{{\"name\":\"uaring-shard-0\",\"class\":\"shard\",\"cpu\":{shard_cpu},\"top\":[]}},{{\"name\":\"idle\",\"class\":\"helper\",\"cpu\":0.001,\"top\":[]}}]}}")
            } else {
                String::new()
            };
            let poller = if poller {
                ",\"poller\":{\"threads\":1,\"cpu_s\":3.1,\"run_delay_s\":1.25,\"timeslices\":9,\"migrations\":0}"
            } else {
                ""
            };
            format!("{{\"scenario\":\"read\",\"variant\":\"{v}\",\"ops_per_s\":{ops},\"clients\":1,\"inflight\":1,\"server_sched\":{{\"shard\":{{\"threads\":1,\"cpu_s\":{shard_cpu},\"run_delay_s\":0.95,\"timeslices\":5,\"migrations\":2}}{poller}}},\"client_sched\":{{\"load\":{{\"threads\":1,\"cpu_s\":4.0,\"run_delay_s\":0.1,\"timeslices\":3,\"migrations\":0}}}}{profile}}}\n")
        };
        let text = row("default", 10.0, 2.5, false)
            + &row("sq-prof", 30.0, 0.3, true)
            + &row("sq-prof", 10.0, 0.19, true)
            + &row("sq-prof", 20.0, 0.2, true);
        let t = group(&text).unwrap();
        let p = profiles(&t);
        // The median-throughput run (20 ops/s) of the profiled cell; threads under 0.01 cores left out.
        assert!(p.contains("| read | sq-prof | iou-sqp-7 (poller) | 0.61 | `io_sq_thread` 34 %, `tcp_sendmsg` 20 % | `io.read.sq-prof.r20.svg` |"), "{p}");
        assert!(
            p.contains("| read | sq-prof | uaring-shard-0 (shard) | 0.20 |"),
            "{p}"
        );
        assert!(!p.contains("idle") && !p.contains("| default |"), "{p}");
        assert_eq!(
            profiles(&group(&row("default", 1.0, 1.0, false)).unwrap()),
            ""
        );
        let s = sched(&t);
        assert!(
            s.contains("| variant | server shard | server poller | client load |"),
            "{s}"
        );
        assert!(
            s.contains("| default | 2.50 · 0.95 · 2 | – | 4.00 · 0.10 · 0 |"),
            "{s}"
        );
        assert!(
            s.contains("| sq-prof | 0.20 · 0.95 · 2 | 3.10 · 1.25 · 0 | 4.00 · 0.10 · 0 |"),
            "{s}"
        );
    }

    #[test]
    fn the_pollers_share_is_a_column_only_where_a_run_had_pollers() {
        let row = |v: &str, share: f64| {
            format!("{{\"scenario\":\"read\",\"variant\":\"{v}\",\"server\":\"uaring\",\"send\":\"per-request\",\"ops_per_s\":10,\"clients\":1,\"inflight\":1,\"server_poller_share\":{share}}}\n")
        };
        let title = "SQPOLL pollers' share of the server CPU";
        let without = markdown(&group(&row("default", 0.0)).unwrap());
        assert!(!without.contains(title), "{without}");
        let with = markdown(&group(&(row("default", 0.0) + &row("sqpoll", 0.25))).unwrap());
        assert!(with.contains(title), "{with}");
        assert!(with.contains("0.250"), "{with}");
    }

    #[test]
    fn numbers() {
        assert_eq!(num(1234567.4, 0), "1,234,567");
        assert_eq!(num(999.0, 0), "999");
        assert_eq!(num(2.346, 2), "2.35");
    }
}
