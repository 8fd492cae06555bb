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
//!
//! **`scale-churn`** starts the server with N variables (default [`DEFAULT_CHURN_VARIABLES`])
//! pushed at `--push-rate` HZ each (default 1) and runs `--clients` reader sessions
//! ([`crate::opcua::ReaderWork`]), each reading plant variables spread over all N (`--nodes`
//! per Read; closed loop of `--inflight`, or with `--rate` an open loop of that many Reads a
//! second in all, `--inflight` the cap) and holding one subscription of `--items` items
//! (default 100, queue 1, `--sampling-ms` default 100, `--publishing-ms` default 500) on its
//! own variables, plus one more session that churns ([`crate::opcua::ChurnWork`]): a folder
//! `s=Churn.F<f>` under Objects per `--churn-batch` B (default 1000) variables, then
//! `--churn-nodes` M (default 100,000) Double variables `s=Churn.V<i>`, B per AddNodes, then
//! every one deleted again, B per DeleteNodes, then the folders; one request at a time, each
//! when the last is answered or, with `--churn-rate` R, on a schedule of R nodes a second.
//! It logs in as `--churn-user` where the server offers UserName tokens (uaring needs a user
//! with the ConfigureAdmin role), else anonymously; its own subscription watches the first
//! [`crate::opcua::WATCHED_ITEMS`] variables, whose items must report BadNodeIdUnknown once
//! those are deleted (counted apart: expected). The churn session runs on a client loop
//! thread of its own (pinned to the client CPUs like the readers'), so that encoding its
//! AddNodes of B nodes and decoding their answers never holds up the readers' answers on
//! their thread: the readers' latency is what separate client processes would see, the
//! server's part and the CPU they share. One server process, one window of
//! 2 × `--duration` D: the first D is quiet, then the churn starts; a reader files each
//! answer under the phase it arrived in (quiet, churn, after the churn's end). The result:
//! Read p50/p99 per phase and the churn's p99 over the quiet one; nodes added and deleted a
//! second; the readers' errors per phase (they never touch a churned node, so any is one)
//! and the churn's; the server's resident memory at the churn's start, after the adds and at
//! its end (what deleting gave back) and its CPU in each phase. A churn still unfinished at
//! the window's end is an error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::cli::{option_name, RunOpts};
use crate::opcua::{
    create_items_once, ChurnClock, ChurnSpec, ChurnStats, ChurnWork, CreateSpec, NodeService,
    Phase, ReaderPhases, ReaderSpec, ReaderWork, SpreadWork, SubscriberWork, UaDriver,
};
use crate::push::{PushItems, PushParams, PushSetup, Seen};
use crate::report::{self, round};
use crate::run::{
    discard_for_foreign_load, info_for, mark_foreign_load, measure, start_target, DynDriver, Plan,
    RunConfig, Window,
};

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
/// `scale-churn` defaults.
pub const DEFAULT_CHURN_VARIABLES: usize = 100_000;
pub const DEFAULT_CHURN_NODES: usize = 100_000;
pub const DEFAULT_CHURN_BATCH: usize = 1000;
pub const DEFAULT_CHURN_ITEMS: usize = 100;
pub const DEFAULT_CHURN_SAMPLING_MS: f64 = 100.0;
pub const DEFAULT_CHURN_PUBLISHING_MS: f64 = 500.0;
/// `scale-churn`: the most items of a reader's subscription (one CreateMonitoredItems).
pub const MAX_CHURN_ITEMS: usize = 10_000;

pub fn is_scale(scenario: &str) -> bool {
    matches!(scenario, "scale-nodes" | "scale-items" | "scale-churn")
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
const CHURN_OPTIONS: &[&str] = &[
    "clients",
    "inflight",
    "nodes",
    "rate",
    "items",
    "sampling_ms",
    "publishing_ms",
    "push_rate",
    "churn_nodes",
    "churn_batch",
    "churn_rate",
    "churn_user",
];

/// Whether `id`, an option of the push scenario, is one `scenario` reads too.
pub fn takes_push_option(scenario: &str, id: &str) -> bool {
    match scenario {
        "scale-nodes" => id == "variables",
        "scale-items" | "scale-churn" => id == "variables" || id == "push_rate",
        _ => false,
    }
}

/// Refuses, in a scale scenario, every given option it does not read (they start their own
/// servers, so `--url` is among them), and checks the parameters.
pub fn check_options(o: &RunOpts) -> Result<(), String> {
    let own = match o.scenario.as_str() {
        "scale-nodes" => NODES_OPTIONS,
        "scale-items" => ITEMS_OPTIONS,
        "scale-churn" => CHURN_OPTIONS,
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
    match o.scenario.as_str() {
        "scale-nodes" => NodesParams::from_opts(o).map(|_| ()),
        "scale-items" => ItemsParams::from_opts(o).map(|_| ()),
        _ => ChurnParams::from_opts(o).map(|_| ()),
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
        if discard_for_foreign_load(cfg, foreign, &mut discarded) {
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
        mark_foreign_load(cfg, foreign, &mut o);
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
        if discard_for_foreign_load(&cfg, window.measured.foreign_cores, &mut discarded) {
            continue;
        }
        let mut o = report::build(
            &info_for(&cfg, params.clone(), &window.output),
            &window.stats,
            &window.measured,
            discarded,
        );
        mark_foreign_load(&cfg, window.measured.foreign_cores, &mut o);
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

/// What a `scale-churn` run does.
#[derive(Clone, Debug, PartialEq)]
pub struct ChurnParams {
    pub variables: usize,
    pub push_rate: f64,
    pub readers: usize,
    /// Every reader's Reads and subscription (its `reads_per_s` is its share of `--rate`).
    pub reader: ReaderSpec,
    /// Reads a second in all (0: closed loop).
    pub rate: f64,
    pub churn: ChurnSpec,
    /// The churn session's login (name, password).
    pub user: Option<(String, String)>,
    /// The quiet part of the window, and the most the churn may take, s.
    pub quiet_s: f64,
}

impl ChurnParams {
    pub fn from_opts(o: &RunOpts) -> Result<ChurnParams, String> {
        let given = |id: &str| o.given.iter().any(|g| g == id);
        let variables = o.variables.unwrap_or(DEFAULT_CHURN_VARIABLES);
        let readers = o.clients.max(1);
        let items = o.items.unwrap_or(DEFAULT_CHURN_ITEMS);
        if items > MAX_CHURN_ITEMS {
            return Err(format!(
                "scale-churn: --items {items}: at most {MAX_CHURN_ITEMS} per reader (one CreateMonitoredItems)"
            ));
        }
        let user = match &o.churn_user {
            Some(u) => {
                let (n, p) = u
                    .split_once(':')
                    .filter(|(n, _)| !n.is_empty())
                    .ok_or("--churn-user: name:password")?;
                Some((n.to_string(), p.to_string()))
            }
            None => None,
        };
        Ok(ChurnParams {
            variables,
            push_rate: o.push_rate.unwrap_or(DEFAULT_PUSH_RATE),
            readers,
            reader: ReaderSpec {
                variables,
                per_request: if given("nodes") { o.nodes } else { 1 },
                inflight: o.inflight,
                reads_per_s: o.rate / readers as f64,
                items,
                sampling_ms: if given("sampling_ms") {
                    o.sampling_ms
                } else {
                    DEFAULT_CHURN_SAMPLING_MS
                },
                publishing_ms: o.publishing_ms.unwrap_or(DEFAULT_CHURN_PUBLISHING_MS),
            },
            rate: o.rate,
            churn: ChurnSpec {
                nodes: o.churn_nodes.unwrap_or(DEFAULT_CHURN_NODES),
                batch: o.churn_batch.unwrap_or(DEFAULT_CHURN_BATCH),
                rate: o.churn_rate.unwrap_or(0.0),
                quiet_ns: (o.duration * 1e9) as u64,
            },
            user,
            quiet_s: o.duration,
        })
    }
}

/// The server's CPU time and memory when a phase of the churn began.
#[derive(Clone, Debug, Default)]
pub struct PhaseMark {
    /// CLOCK_MONOTONIC ns of the sample.
    pub at_ns: u64,
    pub cpu_ns: Option<u64>,
    pub rss_kb: Option<u64>,
}

/// Samples the server when the churn session marks the window's start, the churn's start,
/// the adds' end and the churn's end (within [`MARK_POLL`] of each).
struct PhaseSampler {
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<[Option<PhaseMark>; 4]>,
}

/// How often the sampler looks at the churn's clock.
const MARK_POLL: Duration = Duration::from_millis(2);

impl PhaseSampler {
    /// `cpus`: the client's CPUs (`--client-cpus`), where the sampler runs as the load
    /// threads do: unpinned, its wake-ups every [`MARK_POLL`] landed on the server's CPU.
    fn start(
        pids: Vec<i32>,
        clock: Arc<ChurnClock>,
        cpus: Vec<usize>,
    ) -> Result<PhaseSampler, String> {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let handle = std::thread::Builder::new()
            .name("churn-sampler".into())
            .spawn(move || {
                if !cpus.is_empty() {
                    if let Err(e) = uaring_affinity::pin_current_thread(&cpus) {
                        eprintln!("churn-sampler: cannot pin to the client CPUs {cpus:?}: {e}");
                    }
                }
                let mut marks: [Option<PhaseMark>; 4] = Default::default();
                while !stop2.load(Ordering::Acquire) {
                    let cells = [
                        &clock.window_start_ns,
                        &clock.churn_start_ns,
                        &clock.adds_done_ns,
                        &clock.churn_end_ns,
                    ];
                    for (m, cell) in marks.iter_mut().zip(cells) {
                        if m.is_none() && cell.load(Ordering::Acquire) != 0 {
                            *m = Some(PhaseMark {
                                at_ns: crate::uring::mono_ns(),
                                cpu_ns: crate::procstat::sample_processes(&pids).map(|s| s.cpu_ns),
                                rss_kb: vm_rss_kb(&pids),
                            });
                        }
                    }
                    std::thread::sleep(MARK_POLL);
                }
                marks
            })
            .map_err(|e| e.to_string())?;
        Ok(PhaseSampler { stop, handle })
    }

    fn finish(self) -> [Option<PhaseMark>; 4] {
        self.stop.store(true, Ordering::Release);
        self.handle.join().unwrap_or_default()
    }
}

/// p50, p99, p99.9 and max of a phase's Reads, µs (null without any).
fn phase_quantiles(h: &hdrhistogram::Histogram<u64>) -> [Value; 4] {
    if h.is_empty() {
        return [Value::Null, Value::Null, Value::Null, Value::Null];
    }
    let us = |ns: u64| json!(round(ns as f64 / 1e3, 1));
    [
        us(h.value_at_quantile(0.5)),
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
        us(h.max()),
    ]
}

/// `a / b` to 3 decimals (null when either is missing or b is 0).
fn ratio_of(a: &Value, b: &Value) -> Value {
    match (a.as_f64(), b.as_f64()) {
        (Some(a), Some(b)) if b > 0.0 => json!(round(a / b, 3)),
        _ => Value::Null,
    }
}

/// The median and the max of request times (ns) in ms.
fn median_max_ms(v: &[u64]) -> (Value, Value) {
    if v.is_empty() {
        return (Value::Null, Value::Null);
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let ms = |ns: u64| json!(round(ns as f64 / 1e6, 2));
    (ms(s[s.len() / 2]), ms(s[s.len() - 1]))
}

/// The churn's figures: per-phase Reads, errors, rates, memory and CPU.
fn churn_figures(
    p: &ChurnParams,
    phases: &ReaderPhases,
    churn: &ChurnStats,
    clock: &ChurnClock,
    marks: &[Option<PhaseMark>; 4],
) -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let mut put = |k: &str, v: Value| out.push((k.to_string(), v));
    let mut q = Vec::new();
    for ph in Phase::ALL {
        let i = ph as usize;
        let name = ph.name();
        let [p50, p99, p999, max] = phase_quantiles(&phases.reads[i]);
        q.push((p50.clone(), p99.clone()));
        put(&format!("{name}_reads"), json!(phases.reads[i].len()));
        put(&format!("{name}_p50_us"), p50);
        put(&format!("{name}_p99_us"), p99);
        put(&format!("{name}_p999_us"), p999);
        put(&format!("{name}_max_us"), max);
        put(
            &format!("{name}_reader_errors"),
            json!(phases.read_errors[i] + phases.subscription_errors[i]),
        );
        put(
            &format!("{name}_notifications"),
            json!(phases.notifications[i]),
        );
    }
    put("churn_p50_ratio", ratio_of(&q[1].0, &q[0].0));
    put("churn_p99_ratio", ratio_of(&q[1].1, &q[0].1));
    let reader_errors: u64 = (0..3)
        .map(|i| phases.read_errors[i] + phases.subscription_errors[i])
        .sum();
    put("reader_errors", json!(reader_errors));
    if let Some(e) = &phases.first_error {
        put("reader_first_error", json!(e));
    }
    put(
        "churn_user",
        json!(churn.user.clone().unwrap_or_else(|| "anonymous".into())),
    );
    put("churn_folders_added", json!(churn.folders_added));
    put("churn_variables_added", json!(churn.variables_added));
    put("churn_variables_deleted", json!(churn.variables_deleted));
    put("churn_folders_deleted", json!(churn.folders_deleted));
    put("churn_errors", json!(churn.errors));
    if let Some(e) = &churn.first_error {
        put("churn_first_error", json!(e));
    }
    // The churn session's own items on the first churned variables: each should report
    // BadNodeIdUnknown once they are deleted (expected, not an error).
    put("churn_watched_items", json!(churn.watched_items));
    put(
        "churn_watched_items_reported_deleted",
        json!(churn.watched_items_deleted),
    );
    put("churn_watched_values", json!(churn.watched_values));
    let finished = churn.steps > 0 && churn.steps_done == churn.steps;
    put("churn_finished", json!(finished));
    let at = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Acquire);
    let (start, adds, end) = (
        at(&clock.churn_start_ns),
        at(&clock.adds_done_ns),
        at(&clock.churn_end_ns),
    );
    let secs = |a: u64, b: u64| (a > 0 && b > a).then(|| (b - a) as f64 / 1e9);
    let s_val = |x: Option<f64>| x.map_or(Value::Null, |s| json!(round(s, 3)));
    let per_s = |n: u64, x: Option<f64>| x.map_or(Value::Null, |s| json!((n as f64 / s).round()));
    put("churn_s", s_val(secs(start, end)));
    put("churn_adds_s", s_val(secs(start, adds)));
    put("churn_deletes_s", s_val(secs(adds, end)));
    put(
        "nodes_added_per_s",
        per_s(
            churn.folders_added + churn.variables_added,
            secs(start, adds),
        ),
    );
    put(
        "nodes_deleted_per_s",
        per_s(
            churn.folders_deleted + churn.variables_deleted,
            secs(adds, end),
        ),
    );
    let (m, x) = median_max_ms(&churn.add_request_ns);
    put("add_request_p50_ms", m);
    put("add_request_max_ms", x);
    let (m, x) = median_max_ms(&churn.delete_request_ns);
    put("delete_request_p50_ms", m);
    put("delete_request_max_ms", x);
    let rss = |k: usize| marks[k].as_ref().and_then(|m| m.rss_kb);
    put("server_vm_rss_window_start_kb", kb(rss(0)));
    put("server_vm_rss_before_churn_kb", kb(rss(1)));
    put("server_vm_rss_after_adds_kb", kb(rss(2)));
    put("server_vm_rss_after_churn_kb", kb(rss(3)));
    put(
        "bytes_per_churned_node",
        bytes_per(
            rss(2),
            rss(1),
            (churn.folders_added + churn.variables_added) as usize,
        ),
    );
    put(
        "server_vm_rss_kept_after_churn_kb",
        match (rss(3), rss(1)) {
            (Some(a), Some(b)) => json!(a as i64 - b as i64),
            _ => Value::Null,
        },
    );
    // Server cores busy between two marks.
    let cores = |a: usize, b: usize| match (&marks[a], &marks[b]) {
        (Some(x), Some(y)) if y.at_ns > x.at_ns => match (x.cpu_ns, y.cpu_ns) {
            (Some(c0), Some(c1)) => {
                json!(round(
                    c1.saturating_sub(c0) as f64 / (y.at_ns - x.at_ns) as f64,
                    3
                ))
            }
            _ => Value::Null,
        },
        _ => Value::Null,
    };
    put("server_cores_quiet", cores(0, 1));
    put("server_cores_churn", cores(1, 3));
    put("server_cores_adding", cores(1, 2));
    put("server_cores_deleting", cores(2, 3));
    // The server's CPU per Read of the quiet part (nothing else runs then but the
    // subscriptions and the push thread).
    put(
        "server_cpu_us_per_read_quiet",
        match (&marks[0], &marks[1]) {
            (Some(x), Some(y)) if !phases.reads[0].is_empty() => match (x.cpu_ns, y.cpu_ns) {
                (Some(c0), Some(c1)) => json!(round(
                    c1.saturating_sub(c0) as f64 / 1e3 / phases.reads[0].len() as f64,
                    3
                )),
                _ => Value::Null,
            },
            _ => Value::Null,
        },
    );
    put("quiet_s", json!(p.quiet_s));
    out
}

/// Runs `scale-churn`.
pub fn run_scale_churn(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    crate::security::parse_mode(&cfg.security)?;
    let p = ChurnParams::from_opts(&cfg.opts)?;
    let mut cfg = cfg.clone();
    cfg.clients = p.readers;
    // The window: the quiet part, then up to as long again for the churn.
    cfg.duration_s = 2.0 * p.quiet_s;
    let mut params = vec![
        ("variables".to_string(), json!(p.variables)),
        ("push_rate".to_string(), json!(p.push_rate)),
        ("nodes".to_string(), json!(p.reader.per_request)),
        ("items".to_string(), json!(p.reader.items)),
        ("sampling_ms".to_string(), json!(p.reader.sampling_ms)),
        ("publishing_ms".to_string(), json!(p.reader.publishing_ms)),
        ("churn_nodes".to_string(), json!(p.churn.nodes)),
        ("churn_batch".to_string(), json!(p.churn.batch)),
        ("churn_rate".to_string(), json!(p.churn.rate)),
    ];
    if p.rate > 0.0 {
        params.push(("rate".to_string(), json!(p.rate)));
    }
    let vars = [
        ("variables", p.variables.to_string()),
        ("push_rate", format!("{}", p.push_rate)),
    ];
    let mut discarded = 0u32;
    loop {
        let mut running = start_target(&cfg, &vars)?;
        let url = running.url.clone();
        let sec = crate::security::prepare(&url, &cfg.security, &cfg.opts.security_policy)?;
        let clock = Arc::new(ChurnClock::default());
        let phases = Arc::new(Mutex::new(ReaderPhases::default()));
        let churn = Arc::new(Mutex::new(ChurnStats::default()));
        let sampler =
            PhaseSampler::start(running.pids.clone(), clock.clone(), cfg.client_cpus.clone())?;
        let (p2, clock2, phases2, churn2) =
            (p.clone(), clock.clone(), phases.clone(), churn.clone());
        let factory = Arc::new(move |i: usize| -> DynDriver {
            if i < p2.readers {
                let w = ReaderWork::new(p2.reader, i, p2.readers, clock2.clone(), phases2.clone());
                let inflight = p2.reader.inflight + crate::opcua::publish_inflight(1);
                Box::new(UaDriver::new(&url, Box::new(w), inflight, sec.clone()))
            } else {
                let w = ChurnWork::new(p2.churn, clock2.clone(), churn2.clone());
                Box::new(
                    UaDriver::new(&url, Box::new(w), 2, sec.clone())
                        .with_user_if_offered(p2.user.clone()),
                )
            }
        });
        let window = measure(
            &cfg,
            &mut running,
            Plan::RingApart {
                conns: p.readers + 1,
                apart: 1,
                factory,
            },
        );
        let marks = sampler.finish();
        if let Some(pr) = running.process.as_mut() {
            pr.stop();
        }
        let window = window?;
        if discard_for_foreign_load(&cfg, window.measured.foreign_cores, &mut discarded) {
            continue;
        }
        let mut o = report::build(
            &info_for(&cfg, params.clone(), &window.output),
            &window.stats,
            &window.measured,
            discarded,
        );
        mark_foreign_load(&cfg, window.measured.foreign_cores, &mut o);
        let phases = phases.lock().map_err(|_| "reader phases lock")?;
        let churn = churn.lock().map_err(|_| "churn stats lock")?.clone();
        for (k, v) in churn_figures(&p, &phases, &churn, &clock, &marks) {
            o.insert(k, v);
        }
        o.insert("server_vm_rss_end_kb".into(), kb(window.server_vm_rss_kb));
        // A churn cut by the window's end did not show what the run is for.
        if churn.steps_done < churn.steps {
            let errors = o.get("errors").and_then(Value::as_u64).unwrap_or(0);
            o.insert("errors".into(), json!(errors + 1));
            o.entry("first_error").or_insert(json!(format!(
                "the churn did {} of its {} requests in the window's {} s after the quiet part: a longer --duration or a higher --churn-rate",
                churn.steps_done, churn.steps, p.quiet_s
            )));
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
    fn churn_options_and_defaults() {
        let p = ChurnParams::from_opts(&parse(&["--scenario", "scale-churn"])).unwrap();
        assert_eq!(p.variables, DEFAULT_CHURN_VARIABLES);
        assert_eq!(
            (p.churn.nodes, p.churn.batch, p.churn.rate),
            (DEFAULT_CHURN_NODES, DEFAULT_CHURN_BATCH, 0.0)
        );
        assert_eq!(p.reader.items, DEFAULT_CHURN_ITEMS);
        assert_eq!(p.reader.sampling_ms, DEFAULT_CHURN_SAMPLING_MS);
        assert_eq!(p.reader.publishing_ms, DEFAULT_CHURN_PUBLISHING_MS);
        assert_eq!((p.reader.per_request, p.reader.reads_per_s), (1, 0.0));
        assert_eq!(p.user, None);
        assert_eq!(p.churn.quiet_ns, 5_000_000_000, "--duration's default 5 s");
        let p = ChurnParams::from_opts(&parse(&[
            "--scenario",
            "scale-churn",
            "--clients",
            "10",
            "--rate",
            "5000",
            "--duration",
            "20",
            "--churn-user",
            "bench:a:b",
            "--churn-rate",
            "2000",
            "--churn-batch",
            "500",
        ]))
        .unwrap();
        assert_eq!(p.readers, 10);
        assert_eq!(p.reader.reads_per_s, 500.0, "the clients share --rate");
        assert_eq!(p.user, Some(("bench".into(), "a:b".into())));
        assert_eq!((p.churn.batch, p.churn.rate), (500, 2000.0));
        assert_eq!(p.quiet_s, 20.0);
        for (words, needle) in [
            (
                &["--scenario", "scale-churn", "--churn-user", "nobody"][..],
                "name:password",
            ),
            (
                &["--scenario", "scale-churn", "--items", "10001"],
                "at most 10000",
            ),
            (
                &["--scenario", "scale-churn", "--create-items", "1"],
                "--create-items",
            ),
            (
                &["--scenario", "scale-churn", "--service", "read"],
                "--service",
            ),
            (
                &["--scenario", "scale-items", "--churn-nodes", "5"],
                "--churn-nodes: only for the scale-churn scenario",
            ),
            (
                &["--scenario", "read", "--churn-user", "a:b"],
                "--churn-user",
            ),
        ] {
            let e = crate::options::check(&parse(words)).expect_err(&format!("{words:?}"));
            assert!(e.contains(needle), "{words:?}: {e}");
        }
        assert_eq!(
            crate::options::check(&parse(&[
                "--scenario",
                "scale-churn",
                "--variables",
                "1000",
                "--push-rate",
                "2",
                "--nodes",
                "4",
                "--items",
                "10",
                "--sampling-ms",
                "50",
                "--publishing-ms",
                "100",
                "--churn-nodes",
                "3000",
            ])),
            Ok(())
        );
    }

    #[test]
    fn churn_figures_per_phase() {
        let p = ChurnParams::from_opts(&parse(&["--scenario", "scale-churn"])).unwrap();
        let mut phases = ReaderPhases::default();
        for us in [100u64, 100, 100, 200] {
            phases.reads[0].record(us * 1000).unwrap();
        }
        for us in [150u64, 300, 300, 300] {
            phases.reads[1].record(us * 1000).unwrap();
        }
        phases.notifications = [10, 20, 0];
        phases.subscription_errors[1] = 1;
        phases.first_error = Some("churn: item 3 notified BadNodeIdUnknown".into());
        let churn = ChurnStats {
            folders_added: 2,
            variables_added: 2000,
            variables_deleted: 2000,
            folders_deleted: 2,
            steps_done: 6,
            steps: 6,
            add_request_ns: vec![3_000_000, 1_000_000, 2_000_000],
            user: Some("bench".into()),
            ..Default::default()
        };
        let s = 1_000_000_000u64;
        let clock = ChurnClock::default();
        clock.churn_start_ns.store(10 * s, Ordering::Relaxed);
        clock.adds_done_ns.store(12 * s, Ordering::Relaxed);
        clock.churn_end_ns.store(14 * s, Ordering::Relaxed);
        let mark = |at: u64, cpu: u64, rss: u64| {
            Some(PhaseMark {
                at_ns: at * s,
                cpu_ns: Some(cpu * s / 10),
                rss_kb: Some(rss),
            })
        };
        // Quiet: 5 s at 0.2 cores; the churn: 4 s at 0.75 cores.
        let marks = [
            mark(5, 0, 1000),
            mark(10, 10, 1000),
            mark(12, 25, 3000),
            mark(14, 40, 1100),
        ];
        let f: Map<String, Value> = churn_figures(&p, &phases, &churn, &clock, &marks)
            .into_iter()
            .collect();
        let g = |k: &str| f.get(k).cloned().unwrap_or_else(|| panic!("{k}"));
        assert_eq!(g("quiet_reads"), json!(4));
        assert_eq!(g("quiet_p50_us"), json!(100.0));
        assert_eq!(g("churn_p99_us"), json!(300.0));
        // 300 over 200 µs (the histogram's buckets round 200 up a little).
        assert!((g("churn_p99_ratio").as_f64().unwrap() - 1.5).abs() < 0.01);
        assert_eq!(g("churn_p50_ratio"), json!(3.0));
        assert_eq!(g("after_reads"), json!(0));
        assert_eq!(g("after_p99_us"), Value::Null);
        assert_eq!(g("churn_reader_errors"), json!(1));
        assert_eq!(g("reader_errors"), json!(1));
        assert_eq!(g("churn_notifications"), json!(20));
        assert_eq!(g("churn_user"), json!("bench"));
        assert_eq!(g("churn_finished"), json!(true));
        assert_eq!(g("nodes_added_per_s"), json!(1001.0));
        assert_eq!(g("nodes_deleted_per_s"), json!(1001.0));
        assert_eq!(g("add_request_p50_ms"), json!(2.0));
        assert_eq!(g("add_request_max_ms"), json!(3.0));
        assert_eq!(g("delete_request_p50_ms"), Value::Null);
        assert_eq!(
            g("bytes_per_churned_node"),
            json!(round(2000.0 * 1024.0 / 2002.0, 1))
        );
        assert_eq!(g("server_vm_rss_kept_after_churn_kb"), json!(100));
        assert_eq!(g("server_cores_quiet"), json!(0.2));
        assert_eq!(g("server_cores_churn"), json!(0.75));
        assert_eq!(g("server_cpu_us_per_read_quiet"), json!(250_000.0));
        // Without the churn's end: no rates, no cores of the churn.
        let clock = ChurnClock::default();
        clock.churn_start_ns.store(10 * s, Ordering::Relaxed);
        let f: Map<String, Value> = churn_figures(
            &p,
            &phases,
            &ChurnStats::default(),
            &clock,
            &Default::default(),
        )
        .into_iter()
        .collect();
        assert_eq!(f["churn_finished"], json!(false));
        assert_eq!(f["nodes_added_per_s"], Value::Null);
        assert_eq!(f["server_cores_churn"], Value::Null);
        assert_eq!(f["churn_user"], json!("anonymous"));
    }

    #[test]
    fn memory_per_unit() {
        assert_eq!(bytes_per(Some(2000), Some(1000), 1024), json!(1000.0));
        assert_eq!(bytes_per(None, Some(1000), 10), Value::Null);
        assert_eq!(bytes_per(Some(1), Some(1), 0), Value::Null);
        assert!(vm_rss_kb(&[std::process::id() as i32]).is_some_and(|k| k > 0));
    }
}
