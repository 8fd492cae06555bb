//! Plant scale (issue 29): `scale-nodes` and `scale-items`, against servers of the plant
//! contract (`crate::push`: Double variables `s=Plant.V<i>`, i in 0..N, in namespace
//! `urn:uaring:example:plant`; uaring's `plant` example, `open62541-plant`).
//!
//! **`scale-nodes`** starts the server twice in one run, with [`BASELINE_VARIABLES`] and with
//! `--variables` N, nothing pushed (the contract's `--rate` at [`IDLE_PUSH_RATE`] Hz), and on
//! each runs the same closed-loop load: `--clients` sessions × `--inflight` requests of
//! `--service read|browse` over `--nodes` K variables each, the variables stepping far apart
//! over all of 0..N ([`crate::opcua::spread_stride`]). The result is the window at N (the usual
//! figures) and beside it: the server's start-up time to its ready line at N and at the
//! baseline; its resident memory (VmRSS) at ready and at the window's end, and from them the
//! bytes per variable ((RSS at N − RSS at the baseline) / (N − baseline)); the baseline's
//! server CPU per operation and the ratio to it.
//!
//! **`scale-items`** starts the server with N variables pushed at `--push-rate` HZ each, and
//! `--sessions` S sessions each create one subscription (`--publishing-ms`, default 1000) of
//! `--items` I items (default 10,000) of queue size 1 sampling every `--sampling-ms` (default
//! 500), session s on the variables [s×I, (s+1)×I) modulo N. In the window every item's changes
//! are accounted for (the `push` scenario's accounting: the k-th push of a variable is the
//! Double k) and an item is **on time** when it delivered at least ⌊window × HZ⌋ − 1 changes,
//! none missing, each within `--sampling-ms` + `--publishing-ms` + [`ON_TIME_SLACK_MS`] of its
//! SourceTimestamp. Memory per item: (VmRSS at the window's end − VmRSS at ready, before any
//! session) / (S × I), sessions and subscriptions included. After the window, with the items
//! still on the server (their sessions are left to time out), one more session creates
//! `--create-items` items (default 50,000) in one CreateMonitoredItems, timed from its send to
//! its decoded answer, then closes the session (deleting them), timed too.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::cli::{option_name, RunOpts};
use crate::opcua::{
    create_items_once, CreateSpec, NodeService, SpreadWork, SubscriberWork, UaDriver,
};
use crate::push::{PushItems, PushParams, PushSetup, Seen};
use crate::report::{self, round};
use crate::run::{info_for, measure, start_target, DynDriver, Plan, RunConfig, Window};

/// The variables of `scale-nodes`' baseline server: the "100-variable figure".
pub const BASELINE_VARIABLES: usize = 100;
/// The plant contract's `--rate` when nothing should be pushed (both plant servers need a rate
/// above 0): one push a second in all at a million variables.
pub const IDLE_PUSH_RATE: f64 = 1e-6;
/// `scale-items`: a change is on time within sampling + publishing interval + this, ms.
pub const ON_TIME_SLACK_MS: f64 = 100.0;
/// `scale-items` defaults.
pub const DEFAULT_ITEMS: usize = 10_000;
pub const DEFAULT_SAMPLING_MS: f64 = 500.0;
pub const DEFAULT_PUBLISHING_MS: f64 = 1000.0;
pub const DEFAULT_PUSH_RATE: f64 = 1.0;
pub const DEFAULT_CREATE_ITEMS: usize = 50_000;

pub fn is_scale(scenario: &str) -> bool {
    scenario == "scale-nodes" || scenario == "scale-items"
}

/// The options every scale scenario reads (clap ids).
const COMMON_OPTIONS: &[&str] = &[
    "scenario",
    "duration",
    "warmup",
    "security",
    "security_policy",
    "send",
    "server_cpus",
    "client_cpus",
    "client_threads",
    "client_io",
    "server_bin",
    "server_exe",
    "server_args",
    "ready",
    "ready_timeout",
    "server_env",
    "server_name",
    "no_pin",
    "pki",
    "foreign_max",
    "max_repeats",
    "json",
    "variant",
    "variables",
];
const NODES_OPTIONS: &[&str] = &["clients", "inflight", "nodes", "service"];
const ITEMS_OPTIONS: &[&str] = &[
    "clients",
    "sessions",
    "items",
    "sampling_ms",
    "publishing_ms",
    "push_rate",
    "create_items",
];

/// Whether `id`, an option of the push scenario, is one `scenario` reads too.
pub fn takes_push_option(scenario: &str, id: &str) -> bool {
    match scenario {
        "scale-nodes" => id == "variables",
        "scale-items" => id == "variables" || id == "push_rate",
        _ => false,
    }
}

/// Refuses, in a scale scenario, every given option it does not read (they start their own
/// servers, so `--url` is among them), and checks the parameters.
pub fn check_options(o: &RunOpts) -> Result<(), String> {
    let own = match o.scenario.as_str() {
        "scale-nodes" => NODES_OPTIONS,
        "scale-items" => ITEMS_OPTIONS,
        _ => return Ok(()),
    };
    let unused: Vec<String> = o
        .given
        .iter()
        .filter(|g| !COMMON_OPTIONS.contains(&g.as_str()) && !own.contains(&g.as_str()))
        .map(|g| option_name(g))
        .collect();
    if !unused.is_empty() {
        return Err(format!(
            "{}: not used by the {} scenario (it starts the plant servers itself; docs/Benchmarks.md)",
            unused.join(", "),
            o.scenario
        ));
    }
    if o.scenario == "scale-nodes" {
        NodesParams::from_opts(o).map(|_| ())
    } else {
        ItemsParams::from_opts(o).map(|_| ())
    }
}

/// What a `scale-nodes` run measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NodesParams {
    pub variables: usize,
    pub service: NodeService,
    /// Variables per request.
    pub per_request: usize,
}

impl NodesParams {
    pub fn from_opts(o: &RunOpts) -> Result<NodesParams, String> {
        let variables = o.variables.ok_or(
            "scale-nodes: --variables N (the plant server's variables at scale) is required",
        )?;
        if variables <= BASELINE_VARIABLES {
            return Err(format!(
                "scale-nodes: --variables {variables}: more than the baseline's {BASELINE_VARIABLES}"
            ));
        }
        Ok(NodesParams {
            variables,
            service: NodeService::parse(o.service.as_deref().unwrap_or("read"))?,
            per_request: if o.given.iter().any(|g| g == "nodes") {
                o.nodes
            } else {
                1
            },
        })
    }
}

/// What a `scale-items` run measures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ItemsParams {
    /// Variables, sessions, items per session, publishing and sampling interval, queue 1.
    pub push: PushParams,
    /// Items of the one timed CreateMonitoredItems (0: none).
    pub create_items: usize,
}

impl ItemsParams {
    pub fn from_opts(o: &RunOpts) -> Result<ItemsParams, String> {
        let sessions = o.sessions.unwrap_or(o.clients).max(1);
        let items = o.items.unwrap_or(DEFAULT_ITEMS);
        let variables = o.variables.unwrap_or(sessions * items);
        let sampling_ms = if o.given.iter().any(|g| g == "sampling_ms") {
            o.sampling_ms
        } else {
            DEFAULT_SAMPLING_MS
        };
        let push_rate = o.push_rate.unwrap_or(DEFAULT_PUSH_RATE);
        // Queue 1: a sample that saw two changes keeps one, by design. Two samples per change
        // at least, so a missing change is the server's, not the configuration's.
        if 1000.0 / push_rate < 2.0 * sampling_ms {
            return Err(format!(
                "scale-items: --push-rate {push_rate} Hz changes a variable more often than every second sample at --sampling-ms {sampling_ms} (queue 1 would drop changes by design): at most {} Hz",
                round(500.0 / sampling_ms, 3)
            ));
        }
        Ok(ItemsParams {
            push: PushParams {
                variables,
                push_rate,
                sessions,
                items,
                publishing_ms: o.publishing_ms.unwrap_or(DEFAULT_PUBLISHING_MS),
                queue_size: 1,
                sampling_ms,
            },
            create_items: o.create_items.unwrap_or(DEFAULT_CREATE_ITEMS),
        })
    }

    /// The latest a change may arrive after its SourceTimestamp and be on time, ms.
    pub fn deadline_ms(&self) -> f64 {
        self.push.sampling_ms + self.push.publishing_ms + ON_TIME_SLACK_MS
    }
}

/// What one item did in the measured window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemWindow {
    /// Changes delivered (in order or after a gap).
    pub delivered: u32,
    /// Changes skipped over.
    pub missing: u32,
    /// Changes delivered later than the deadline after their SourceTimestamp (or without one).
    pub late: u32,
    /// Out-of-order or repeated values.
    pub stale: u32,
}

/// The window records of one session's items (`scale-items`), filled by
/// [`crate::push::see_notification`] while the phase is MEASURE.
#[derive(Debug)]
pub struct OnTime {
    pub deadline_ns: u64,
    pub items: Mutex<Vec<ItemWindow>>,
}

impl OnTime {
    pub fn new(items: usize, deadline_ms: f64) -> OnTime {
        OnTime {
            deadline_ns: (deadline_ms * 1e6) as u64,
            items: Mutex::new(vec![ItemWindow::default(); items]),
        }
    }

    /// Item `j` notified a value that was `seen` against its sequence, `latency` ns after its
    /// SourceTimestamp.
    pub fn see(&self, j: usize, seen: Seen, latency_ns: Option<u64>) {
        let Ok(mut items) = self.items.lock() else {
            return;
        };
        let Some(w) = items.get_mut(j) else {
            return;
        };
        match seen {
            Seen::First => return,
            Seen::Stale => {
                w.stale += 1;
                return;
            }
            Seen::InOrder => w.delivered += 1,
            Seen::Gap { missing } => {
                w.delivered += 1;
                w.missing = w
                    .missing
                    .saturating_add(missing.min(u32::MAX as u64) as u32);
            }
        }
        if latency_ns.is_none_or(|l| l > self.deadline_ns) {
            w.late += 1;
        }
    }
}

/// Per-item verdicts over every session's records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OnTimeSummary {
    pub items: usize,
    pub on_time: usize,
    /// Fewer changes than the window's pushes imply (silent ones included).
    pub behind: usize,
    pub silent: usize,
    pub with_missing: usize,
    pub with_late: usize,
    pub with_stale: usize,
}

/// Judges each item: on time = at least `min_changes` delivered, none missing, none late.
pub fn summarize_on_time(records: &[ItemWindow], min_changes: u32) -> OnTimeSummary {
    let mut s = OnTimeSummary {
        items: records.len(),
        ..Default::default()
    };
    for w in records {
        let behind = w.delivered < min_changes;
        s.behind += usize::from(behind);
        s.silent += usize::from(w.delivered == 0);
        s.with_missing += usize::from(w.missing > 0);
        s.with_late += usize::from(w.late > 0);
        s.with_stale += usize::from(w.stale > 0);
        s.on_time += usize::from(!behind && w.missing == 0 && w.late == 0);
    }
    s
}

/// The sum of VmRSS over `pids`, kB (None when one cannot be read).
pub fn vm_rss_kb(pids: &[i32]) -> Option<u64> {
    let mut sum = 0;
    for pid in pids {
        let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        sum += crate::procstat::parse_status(&text).vm_rss_kb;
    }
    Some(sum)
}

/// Bytes per unit of `(after_kb − before_kb)` over `count` units.
fn bytes_per(after_kb: Option<u64>, before_kb: Option<u64>, count: usize) -> Value {
    match (after_kb, before_kb) {
        (Some(a), Some(b)) if count > 0 => {
            json!(round((a as f64 - b as f64) * 1024.0 / count as f64, 1))
        }
        _ => Value::Null,
    }
}

fn kb(v: Option<u64>) -> Value {
    v.map_or(Value::Null, |x| json!(x))
}

/// One server of a `scale-nodes` run, measured.
struct NodesServer {
    window: Window,
    startup_s: f64,
    rss_ready_kb: Option<u64>,
}

fn nodes_server(cfg: &RunConfig, p: &NodesParams, n: usize) -> Result<NodesServer, String> {
    let vars = [
        ("variables", n.to_string()),
        ("push_rate", format!("{IDLE_PUSH_RATE}")),
    ];
    let t = Instant::now();
    let mut running = start_target(cfg, &vars)?;
    let startup_s = t.elapsed().as_secs_f64();
    let rss_ready_kb = vm_rss_kb(&running.pids);
    let url = running.url.clone();
    let sec = crate::security::prepare(&url, &cfg.security, &cfg.opts.security_policy)?;
    let (service, per_request, inflight, clients) =
        (p.service, p.per_request, cfg.inflight, cfg.clients.max(1));
    let factory = Arc::new(move |i: usize| -> DynDriver {
        let work = SpreadWork::new(service, n, per_request, inflight, i * n / clients);
        Box::new(UaDriver::new(&url, Box::new(work), inflight, sec.clone()))
    });
    let window = measure(
        cfg,
        &mut running,
        Plan::Ring {
            conns: clients,
            factory,
        },
    );
    if let Some(pr) = running.process.as_mut() {
        pr.stop();
    }
    Ok(NodesServer {
        window: window?,
        startup_s,
        rss_ready_kb,
    })
}

/// Runs `scale-nodes`.
pub fn run_scale_nodes(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    crate::security::parse_mode(&cfg.security)?;
    let p = NodesParams::from_opts(&cfg.opts)?;
    let params = vec![
        ("variables".to_string(), json!(p.variables)),
        ("baseline_variables".to_string(), json!(BASELINE_VARIABLES)),
        ("service".to_string(), json!(p.service.name())),
        ("nodes".to_string(), json!(p.per_request)),
    ];
    let mut discarded = 0u32;
    loop {
        let base = nodes_server(cfg, &p, BASELINE_VARIABLES)?;
        let big = nodes_server(cfg, &p, p.variables)?;
        let foreign = base
            .window
            .measured
            .foreign_cores
            .max(big.window.measured.foreign_cores);
        if foreign > cfg.foreign_max_cores && discarded < cfg.max_repeats {
            discarded += 1;
            eprintln!(
                "uaring-bench: foreign load {foreign:.3} cores > {:.3}: run discarded ({discarded}/{})",
                cfg.foreign_max_cores, cfg.max_repeats
            );
            continue;
        }
        let mut o = report::build(
            &info_for(cfg, params.clone(), &big.window.output),
            &big.window.stats,
            &big.window.measured,
            discarded,
        );
        let b = report::build(
            &info_for(cfg, params.clone(), &base.window.output),
            &base.window.stats,
            &base.window.measured,
            discarded,
        );
        if foreign > cfg.foreign_max_cores {
            o.insert("foreign_load_exceeded".into(), json!(true));
        }
        let f = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64);
        let ratio = |k: &str| match (f(&o, k), f(&b, k)) {
            (Some(x), Some(y)) if y > 0.0 => json!(round(x / y, 3)),
            _ => Value::Null,
        };
        let count = p.variables - BASELINE_VARIABLES;
        let extra = vec![
            ("startup_s", json!(round(big.startup_s, 3))),
            ("baseline_startup_s", json!(round(base.startup_s, 3))),
            ("server_vm_rss_ready_kb", kb(big.rss_ready_kb)),
            ("baseline_server_vm_rss_ready_kb", kb(base.rss_ready_kb)),
            ("server_vm_rss_end_kb", kb(big.window.server_vm_rss_kb)),
            (
                "baseline_server_vm_rss_end_kb",
                kb(base.window.server_vm_rss_kb),
            ),
            (
                "bytes_per_variable",
                bytes_per(
                    big.window.server_vm_rss_kb,
                    base.window.server_vm_rss_kb,
                    count,
                ),
            ),
            (
                "bytes_per_variable_at_ready",
                bytes_per(big.rss_ready_kb, base.rss_ready_kb, count),
            ),
            (
                "baseline_server_cpu_us_per_op",
                b.get("server_cpu_us_per_op")
                    .cloned()
                    .unwrap_or(Value::Null),
            ),
            (
                "server_cpu_per_op_ratio_to_baseline",
                ratio("server_cpu_us_per_op"),
            ),
            (
                "baseline_ops_per_s",
                b.get("ops_per_s").cloned().unwrap_or(Value::Null),
            ),
            ("ops_per_s_ratio_to_baseline", ratio("ops_per_s")),
            (
                "baseline_p99_us",
                b.get("p99_us").cloned().unwrap_or(Value::Null),
            ),
            (
                "baseline_foreign_cores",
                b.get("foreign_cores").cloned().unwrap_or(Value::Null),
            ),
            (
                "baseline_errors",
                b.get("errors").cloned().unwrap_or(Value::Null),
            ),
        ];
        for (k, v) in extra {
            o.insert(k.to_string(), v);
        }
        // An error on either server fails the run.
        let errors = |m: &Map<String, Value>| m.get("errors").and_then(Value::as_u64).unwrap_or(0);
        o.insert("errors".into(), json!(errors(&o) + errors(&b)));
        if let (None, Some(e)) = (o.get("first_error"), b.get("first_error").cloned()) {
            o.insert("first_error".into(), e);
        }
        report::add_host(&mut o);
        return Ok(o);
    }
}

/// Runs `scale-items`.
pub fn run_scale_items(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    crate::security::parse_mode(&cfg.security)?;
    let ip = ItemsParams::from_opts(&cfg.opts)?;
    let p = ip.push;
    let mut cfg = cfg.clone();
    if cfg.opts.client_threads.is_none() {
        cfg.client_threads = cfg.client_cpus.len().min(p.sessions).max(1);
    }
    cfg.clients = p.sessions;
    let deadline_ms = ip.deadline_ms();
    let setup = Arc::new(PushSetup::default());
    let records: Arc<Mutex<Vec<Arc<OnTime>>>> = Arc::default();
    let params = vec![
        ("sessions".to_string(), json!(p.sessions)),
        ("subscriptions".to_string(), json!(1)),
        ("items".to_string(), json!(p.items)),
        ("variables".to_string(), json!(p.variables)),
        ("push_rate".to_string(), json!(p.push_rate)),
        ("publishing_ms".to_string(), json!(p.publishing_ms)),
        ("sampling_ms".to_string(), json!(p.sampling_ms)),
        ("queue_size".to_string(), json!(p.queue_size)),
        ("create_items".to_string(), json!(ip.create_items)),
    ];
    let vars = [
        ("variables", p.variables.to_string()),
        ("push_rate", format!("{}", p.push_rate)),
    ];
    let mut discarded = 0u32;
    loop {
        let t = Instant::now();
        let mut running = start_target(&cfg, &vars)?;
        let startup_s = t.elapsed().as_secs_f64();
        let rss_ready_kb = vm_rss_kb(&running.pids);
        let url = running.url.clone();
        let sec = crate::security::prepare(&url, &cfg.security, &cfg.opts.security_policy)?;
        setup.reset();
        records.lock().map_err(|_| "records lock")?.clear();
        let (setup2, records2, url2, sec2) =
            (setup.clone(), records.clone(), url.clone(), sec.clone());
        let factory = Arc::new(move |i: usize| -> DynDriver {
            let mut items = PushItems::new(p, i, setup2.clone());
            let on_time = Arc::new(OnTime::new(p.items, deadline_ms));
            if let Ok(mut r) = records2.lock() {
                r.push(on_time.clone());
            }
            items.on_time = Some(on_time);
            let w = SubscriberWork::push(items);
            let inflight = w.publish_inflight;
            Box::new(UaDriver::new(&url2, Box::new(w), inflight, sec2.clone()))
        });
        let window = measure(
            &cfg,
            &mut running,
            Plan::Ring {
                conns: p.sessions,
                factory,
            },
        );
        // The subscribers' connections are closed; their sessions, subscriptions and items
        // stay on the server until the sessions time out: the big create meets them all.
        let created = match (&window, ip.create_items) {
            (Ok(_), c) if c > 0 => Some(create_items_once(
                running.addr,
                &url,
                sec,
                &CreateSpec {
                    items: c,
                    variables: p.variables,
                    sampling_ms: p.sampling_ms,
                    publishing_ms: p.publishing_ms,
                    timeout: Duration::from_secs_f64(cfg.opts.ready_timeout),
                },
            )),
            _ => None,
        };
        if let Some(pr) = running.process.as_mut() {
            pr.stop();
        }
        let window = window?;
        let created = created.transpose()?;
        if window.measured.foreign_cores > cfg.foreign_max_cores && discarded < cfg.max_repeats {
            discarded += 1;
            eprintln!(
                "uaring-bench: foreign load {:.3} cores > {:.3}: run discarded ({discarded}/{})",
                window.measured.foreign_cores, cfg.foreign_max_cores, cfg.max_repeats
            );
            continue;
        }
        let mut o = report::build(
            &info_for(&cfg, params.clone(), &window.output),
            &window.stats,
            &window.measured,
            discarded,
        );
        if window.measured.foreign_cores > cfg.foreign_max_cores {
            o.insert("foreign_load_exceeded".into(), json!(true));
        }
        crate::push::finish(&mut o, &p, &setup);
        let all: Vec<ItemWindow> = records
            .lock()
            .map_err(|_| "records lock")?
            .iter()
            .flat_map(|r| r.items.lock().map(|v| v.clone()).unwrap_or_default())
            .collect();
        let seconds = window.measured.seconds;
        let min_changes = ((seconds * p.push_rate).floor() as u32)
            .saturating_sub(1)
            .max(1);
        let s = summarize_on_time(&all, min_changes);
        let total = p.sessions * p.items;
        let share = |x: usize| {
            if s.items > 0 {
                json!(round(x as f64 / s.items as f64, 6))
            } else {
                Value::Null
            }
        };
        let mut extra = vec![
            ("startup_s", json!(round(startup_s, 3))),
            ("monitored_items", json!(total)),
            ("server_vm_rss_ready_kb", kb(rss_ready_kb)),
            ("server_vm_rss_end_kb", kb(window.server_vm_rss_kb)),
            (
                "bytes_per_item",
                bytes_per(window.server_vm_rss_kb, rss_ready_kb, total),
            ),
            ("on_time_deadline_ms", json!(deadline_ms)),
            ("min_changes_per_item", json!(min_changes)),
            ("items_judged", json!(s.items)),
            ("items_on_time", json!(s.on_time)),
            ("items_on_time_share", share(s.on_time)),
            ("items_behind", json!(s.behind)),
            ("items_silent", json!(s.silent)),
            ("items_with_missing_changes", json!(s.with_missing)),
            ("items_with_late_changes", json!(s.with_late)),
            ("items_with_stale_values", json!(s.with_stale)),
        ];
        if let Some(c) = created {
            extra.push(("create_items_ms", json!(round(c.create_ms, 1))));
            extra.push(("delete_items_ms", json!(round(c.delete_ms, 1))));
        }
        for (k, v) in extra {
            o.insert(k.to_string(), v);
        }
        report::add_host(&mut o);
        return Ok(o);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(w: &[&str]) -> RunOpts {
        RunOpts::try_parse_words(std::iter::once("run").chain(w.iter().copied())).unwrap()
    }

    #[test]
    fn options_that_do_nothing_are_refused() {
        for (words, needle) in [
            (
                &[
                    "--scenario",
                    "scale-nodes",
                    "--variables",
                    "1000",
                    "--sessions",
                    "2",
                ][..],
                "--sessions: only for the sub, events, counters, push, scale-items scenarios, not scale-nodes",
            ),
            (
                &[
                    "--scenario",
                    "scale-nodes",
                    "--variables",
                    "1000",
                    "--url",
                    "opc.tcp://h:1",
                ],
                "--url",
            ),
            (
                &[
                    "--scenario",
                    "scale-nodes",
                    "--variables",
                    "1000",
                    "--push-rate",
                    "1",
                ],
                "--push-rate",
            ),
            (
                &[
                    "--scenario",
                    "scale-nodes",
                    "--variables",
                    "1000",
                    "--idle-sessions",
                    "1",
                ],
                "--idle-sessions",
            ),
            (&["--scenario", "scale-nodes"], "--variables N"),
            (
                &["--scenario", "scale-nodes", "--variables", "100"],
                "more than the baseline",
            ),
            (
                &["--scenario", "scale-items", "--inflight", "3"],
                "--inflight: not used by the scale-items",
            ),
            (
                &["--scenario", "scale-items", "--queue-size", "3"],
                "--queue-size",
            ),
            (
                &["--scenario", "scale-items", "--service", "browse"],
                "--service",
            ),
            (
                &["--scenario", "scale-items", "--push-rate", "5"],
                "at most 1 Hz",
            ),
            (
                &["--scenario", "read", "--create-items", "5"],
                "--create-items",
            ),
            (&["--scenario", "read", "--service", "read"], "--service"),
        ] {
            let e = crate::options::check(&parse(words)).expect_err(&format!("{words:?}"));
            assert!(e.contains(needle), "{words:?}: {e}");
        }
        for words in [
            &[
                "--scenario",
                "scale-nodes",
                "--variables",
                "1000",
                "--service",
                "browse",
                "--nodes",
                "10",
                "--clients",
                "2",
                "--inflight",
                "8",
            ][..],
            &[
                "--scenario",
                "scale-items",
                "--variables",
                "1000",
                "--sessions",
                "2",
                "--items",
                "100",
                "--sampling-ms",
                "100",
                "--publishing-ms",
                "200",
                "--push-rate",
                "5",
                "--create-items",
                "0",
            ],
            &["--scenario", "scale-items"],
        ] {
            assert_eq!(crate::options::check(&parse(words)), Ok(()), "{words:?}");
        }
    }

    #[test]
    fn items_defaults() {
        let p = ItemsParams::from_opts(&parse(&["--scenario", "scale-items", "--sessions", "3"]))
            .unwrap();
        assert_eq!(
            (
                p.push.sessions,
                p.push.items,
                p.push.variables,
                p.push.queue_size
            ),
            (3, DEFAULT_ITEMS, 3 * DEFAULT_ITEMS, 1)
        );
        assert_eq!(p.push.sampling_ms, DEFAULT_SAMPLING_MS);
        assert_eq!(p.push.publishing_ms, DEFAULT_PUBLISHING_MS);
        assert_eq!(p.create_items, DEFAULT_CREATE_ITEMS);
        assert_eq!(p.deadline_ms(), 500.0 + 1000.0 + ON_TIME_SLACK_MS);
    }

    #[test]
    fn items_are_judged_on_time() {
        let w = OnTime::new(4, 1000.0);
        let ms = 1_000_000u64;
        // Item 0: three changes in order, in time.
        for _ in 0..3 {
            w.see(0, Seen::InOrder, Some(900 * ms));
        }
        w.see(0, Seen::First, None);
        // Item 1: a gap.
        w.see(1, Seen::InOrder, Some(ms));
        w.see(1, Seen::Gap { missing: 2 }, Some(ms));
        w.see(1, Seen::InOrder, Some(ms));
        // Item 2: one late change, one without a timestamp.
        w.see(2, Seen::InOrder, Some(1001 * ms));
        w.see(2, Seen::InOrder, None);
        w.see(2, Seen::InOrder, Some(ms));
        w.see(2, Seen::Stale, Some(ms));
        // Item 3: silent. Out of range: ignored.
        w.see(9, Seen::InOrder, Some(ms));
        let items = w.items.lock().unwrap().clone();
        assert_eq!(
            items[0],
            ItemWindow {
                delivered: 3,
                missing: 0,
                late: 0,
                stale: 0
            }
        );
        assert_eq!(
            items[1],
            ItemWindow {
                delivered: 3,
                missing: 2,
                late: 0,
                stale: 0
            }
        );
        assert_eq!(
            items[2],
            ItemWindow {
                delivered: 3,
                missing: 0,
                late: 2,
                stale: 1
            }
        );
        let s = summarize_on_time(&items, 3);
        assert_eq!(
            s,
            OnTimeSummary {
                items: 4,
                on_time: 1,
                behind: 1,
                silent: 1,
                with_missing: 1,
                with_late: 1,
                with_stale: 1
            }
        );
        assert_eq!(
            summarize_on_time(&items, 4).on_time,
            0,
            "fewer changes than due"
        );
    }

    #[test]
    fn memory_per_unit() {
        assert_eq!(bytes_per(Some(2000), Some(1000), 1024), json!(1000.0));
        assert_eq!(bytes_per(None, Some(1000), 10), Value::Null);
        assert_eq!(bytes_per(Some(1), Some(1), 0), Value::Null);
        assert!(vm_rss_kb(&[std::process::id() as i32]).is_some_and(|k| k > 0));
    }
}
