//! One run's result: the JSON object (`--json`) and the readable block.

use serde_json::{json, Map, Value};

use crate::procstat::ProcDelta;
use crate::uring::ThreadStats;

/// Everything measured in one run's window.
#[derive(Clone, Debug, Default)]
pub struct Measured {
    pub seconds: f64,
    pub server: Option<ProcDelta>,
    pub server_rss_kb: u64,
    pub client: ProcDelta,
    pub foreign_cores: f64,
    pub steal_cores: f64,
    /// TCP segments of the load client's sockets over the window ([`crate::tcpinfo`]).
    pub tcp: Option<crate::tcpinfo::Segments>,
}

pub struct RunInfo {
    pub scenario: String,
    pub security: String,
    pub server: String,
    pub clients: usize,
    /// Sessions held open and silent beside the clients (`--idle-sessions`).
    pub idle_sessions: usize,
    pub inflight: usize,
    /// `batched` or `per-request`.
    pub send: String,
    /// `shards` or `harness`.
    pub client_io: String,
    /// The modes of the client's loop (`default`, or e.g. `sqpoll per-thread, fixed_files`).
    pub client_io_modes: String,
    pub server_cpus: String,
    pub client_cpus: String,
    pub client_threads: usize,
    pub variant: Option<String>,
    /// Extra scenario parameters (nodes, items …) reported as they are.
    pub params: Vec<(String, Value)>,
    /// Connections per shard, when the server told.
    pub shard_connections: Vec<(String, u64)>,
    /// Names of the server's application threads (`push`): their CPU time is reported beside
    /// the whole process's (`server_cpu_us`, `server_app_cpu_us`, `server_app_threads`).
    pub app_threads: Vec<String>,
}

/// `v` rounded to `digits` decimal places (how every figure of a result is written).
pub fn round(v: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (v * p).round() / p
}

fn us(ns: u64) -> f64 {
    round(ns as f64 / 1000.0, 2)
}

/// The scheduler states of a process's threads summed by class (`server_sched`,
/// `client_sched`): per class its threads, CPU seconds, run delay seconds (runnable but
/// waiting for a CPU), timeslices and migrations (null where the kernel has no `sched` file).
fn sched_json(d: &ProcDelta) -> Value {
    let mut o = Map::new();
    for c in crate::procstat::by_class(d) {
        o.insert(
            c.class.to_string(),
            json!({
                "threads": c.threads,
                "cpu_s": round(c.cpu_ns as f64 / 1e9, 4),
                "run_delay_s": round(c.run_delay_ns as f64 / 1e9, 4),
                "timeslices": c.timeslices,
                "migrations": c.migrations,
            }),
        );
    }
    Value::Object(o)
}

/// One line of a `*_sched` object for the readable block.
fn sched_line(v: &Value) -> String {
    let Some(o) = v.as_object() else {
        return String::new();
    };
    o.iter()
        .map(|(class, c)| {
            let f = |k: &str| c.get(k).map(fmt).unwrap_or_default();
            format!(
                "{class} ×{}: run {} s, delay {} s, {} slices, {} migr",
                f("threads"),
                f("cpu_s"),
                f("run_delay_s"),
                f("timeslices"),
                f("migrations")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Builds the result object. Per-op figures are per measured operation.
pub fn build(
    info: &RunInfo,
    stats: &ThreadStats,
    m: &Measured,
    discarded_runs: u32,
) -> Map<String, Value> {
    let ops = stats.ops;
    let per_op = |total: f64| {
        if ops > 0 {
            round(total / ops as f64, 3)
        } else {
            0.0
        }
    };
    let h = &stats.hist;
    let q = |x: f64| {
        if ops > 0 {
            us(h.value_at_quantile(x))
        } else {
            0.0
        }
    };
    let mut o = Map::new();
    o.insert("scenario".into(), json!(info.scenario));
    if let Some(v) = &info.variant {
        o.insert("variant".into(), json!(v));
    }
    o.insert("server".into(), json!(info.server));
    o.insert("security".into(), json!(info.security));
    o.insert("clients".into(), json!(info.clients));
    if info.idle_sessions > 0 {
        o.insert("idle_sessions".into(), json!(info.idle_sessions));
    }
    o.insert("inflight".into(), json!(info.inflight));
    o.insert("send".into(), json!(info.send));
    o.insert("client_io".into(), json!(info.client_io));
    o.insert("client_io_modes".into(), json!(info.client_io_modes));
    for (k, v) in &info.params {
        o.insert(k.clone(), v.clone());
    }
    o.insert("ops".into(), json!(ops));
    o.insert("seconds".into(), json!(round(m.seconds, 3)));
    o.insert(
        "ops_per_s".into(),
        json!(if m.seconds > 0.0 {
            round(ops as f64 / m.seconds, 1)
        } else {
            0.0
        }),
    );
    o.insert("errors".into(), json!(stats.errors));
    o.insert("p50_us".into(), json!(q(0.5)));
    o.insert("p90_us".into(), json!(q(0.9)));
    o.insert("p99_us".into(), json!(q(0.99)));
    o.insert("p999_us".into(), json!(q(0.999)));
    let part = &stats.server_part;
    if !part.is_empty() {
        for (k, x) in [("server_part_p50_us", 0.5), ("server_part_p99_us", 0.99)] {
            o.insert(k.into(), json!(us(part.value_at_quantile(x))));
        }
        o.insert("server_part_max_us".into(), json!(us(part.max())));
    }
    let stamp = &stats.stamp_part;
    if !stamp.is_empty() {
        for (k, x) in [("stamp_part_p50_us", 0.5), ("stamp_part_p99_us", 0.99)] {
            o.insert(k.into(), json!(us(stamp.value_at_quantile(x))));
        }
        o.insert("stamp_part_max_us".into(), json!(us(stamp.max())));
    }
    o.insert(
        "max_us".into(),
        json!(if ops > 0 { us(h.max()) } else { 0.0 }),
    );
    o.insert(
        "mean_us".into(),
        json!(if ops > 0 {
            round(h.mean() / 1000.0, 2)
        } else {
            0.0
        }),
    );
    match &m.server {
        Some(s) => {
            o.insert(
                "server_cpu_us_per_op".into(),
                json!(per_op(s.cpu_ns as f64 / 1000.0)),
            );
            o.insert(
                "server_sys_share".into(),
                json!(if s.user_ns + s.sys_ns > 0 {
                    round(s.sys_ns as f64 / (s.user_ns + s.sys_ns) as f64, 3)
                } else {
                    0.0
                }),
            );
            o.insert(
                "server_cores".into(),
                json!(round(s.cpu_ns as f64 / 1e9 / m.seconds.max(1e-9), 3)),
            );
            o.insert(
                "server_vcs_per_op".into(),
                json!(per_op(s.voluntary as f64)),
            );
            o.insert(
                "server_ivcs_per_op".into(),
                json!(per_op(s.nonvoluntary as f64)),
            );
            o.insert("server_rss_kb".into(), json!(m.server_rss_kb));
            // Every thread of the server counts, io_uring SQPOLL pollers (kernel threads of
            // the process) included; their part is reported on its own as well.
            let classes = crate::procstat::by_class(s);
            let poller = classes.iter().find(|c| c.class == "poller");
            let poller_ns = poller.map_or(0, |p| p.cpu_ns);
            o.insert(
                "server_pollers".into(),
                json!(poller.map_or(0, |p| p.threads)),
            );
            o.insert(
                "server_poller_cpu_s".into(),
                json!(round(poller_ns as f64 / 1e9, 4)),
            );
            o.insert(
                "server_poller_share".into(),
                json!(if s.cpu_ns > 0 {
                    round(poller_ns as f64 / s.cpu_ns as f64, 3)
                } else {
                    0.0
                }),
            );
            o.insert("server_sched".into(), sched_json(s));
            let mut shards = Vec::new();
            for t in &s.threads {
                if t.name.contains("shard") {
                    let conns = info
                        .shard_connections
                        .iter()
                        .find(|(n, _)| *n == t.name)
                        .map(|(_, c)| *c);
                    shards.push(json!({
                        "name": t.name,
                        "cpu_us_per_op": per_op(t.cpu_ns as f64 / 1000.0),
                        "cores": round(t.cpu_ns as f64 / 1e9 / m.seconds.max(1e-9), 3),
                        "connections": conns,
                    }));
                }
            }
            if !shards.is_empty() {
                o.insert("shards".into(), Value::Array(shards));
            }
            if !info.app_threads.is_empty() {
                let app: Vec<_> = s
                    .threads
                    .iter()
                    .filter(|t| info.app_threads.contains(&t.name))
                    .collect();
                o.insert(
                    "server_cpu_us".into(),
                    json!(round(s.cpu_ns as f64 / 1000.0, 1)),
                );
                o.insert(
                    "server_app_cpu_us".into(),
                    json!(round(
                        app.iter().map(|t| t.cpu_ns).sum::<u64>() as f64 / 1000.0,
                        1
                    )),
                );
                o.insert("server_app_threads".into(), json!(app.len()));
            }
        }
        None => {
            o.insert("server_cpu_us_per_op".into(), Value::Null);
            o.insert("server_rss_kb".into(), Value::Null);
        }
    }
    let c = &m.client;
    o.insert("client_sched".into(), sched_json(c));
    o.insert(
        "client_cpu_us_per_op".into(),
        json!(per_op(c.cpu_ns as f64 / 1000.0)),
    );
    o.insert(
        "client_cores".into(),
        json!(round(c.cpu_ns as f64 / 1e9 / m.seconds.max(1e-9), 3)),
    );
    o.insert(
        "client_vcs_per_op".into(),
        json!(per_op(c.voluntary as f64)),
    );
    o.insert(
        "client_ivcs_per_op".into(),
        json!(per_op(c.nonvoluntary as f64)),
    );
    o.insert(
        "bytes_out_per_op".into(),
        json!(per_op(stats.bytes_out as f64)),
    );
    o.insert(
        "bytes_in_per_op".into(),
        json!(per_op(stats.bytes_in as f64)),
    );
    for (k, v) in &stats.extra {
        o.insert((*k).to_string(), json!(v));
    }
    if let Some(t) = &m.tcp {
        // Seen from the client's sockets: data segments in = the server's, out = the client's.
        o.insert(
            "server_segments_per_op".into(),
            json!(per_op(t.data_segs_in as f64)),
        );
        o.insert(
            "client_segments_per_op".into(),
            json!(per_op(t.data_segs_out as f64)),
        );
        o.insert(
            "tcp_segments_per_op".into(),
            json!(per_op((t.segs_in + t.segs_out) as f64)),
        );
    }
    if let Some(n) = stats.extra.get("client_sends") {
        o.insert("client_sends_per_op".into(), json!(per_op(*n as f64)));
    }
    o.insert("server_cpus".into(), json!(info.server_cpus));
    o.insert("client_cpus".into(), json!(info.client_cpus));
    o.insert("client_threads".into(), json!(info.client_threads));
    o.insert("foreign_cores".into(), json!(round(m.foreign_cores, 3)));
    o.insert("steal_cores".into(), json!(round(m.steal_cores, 3)));
    o.insert("discarded_runs".into(), json!(discarded_runs));
    if let Some(e) = &stats.first_error {
        o.insert("first_error".into(), json!(e));
    }
    o
}

/// Adds host facts (and the commit, when known) to a result.
pub fn add_host(o: &mut Map<String, Value>) {
    let (host, kernel, model, cpus) = crate::procstat::host_facts();
    o.insert("host".into(), json!(host));
    o.insert("kernel".into(), json!(kernel));
    o.insert("cpu_model".into(), json!(model));
    o.insert("online_cpus".into(), json!(cpus));
    if let Some(c) = commit() {
        o.insert("commit".into(), json!(c));
    }
}

/// The commit of the source tree: $UARING_COMMIT, else `git rev-parse`.
pub fn commit() -> Option<String> {
    if let Ok(c) = std::env::var("UARING_COMMIT") {
        return Some(c);
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// The readable block printed without `--json`.
pub fn readable(o: &Map<String, Value>) -> String {
    let g = |k: &str| o.get(k).map(fmt).unwrap_or_else(|| "-".into());
    let mut s = String::new();
    s.push_str(&format!(
        "scenario {}  server {}  security {}  clients {} x inflight {}  send {}\n",
        g("scenario"),
        g("server"),
        g("security"),
        g("clients"),
        g("inflight"),
        g("send")
    ));
    s.push_str(&format!(
        "  placement   server cpus {}  client cpus {} ({} threads)\n",
        g("server_cpus"),
        g("client_cpus"),
        g("client_threads")
    ));
    s.push_str(&format!(
        "  throughput  {} ops in {} s = {} ops/s, {} errors\n",
        g("ops"),
        g("seconds"),
        g("ops_per_s"),
        g("errors")
    ));
    s.push_str(&format!(
        "  latency µs  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}\n",
        g("p50_us"),
        g("p90_us"),
        g("p99_us"),
        g("p999_us"),
        g("max_us")
    ));
    if o.contains_key("server_part_p50_us") {
        s.push_str(&format!(
            "  of which    server part (to the message's PublishTime) p50 {}  p99 {}  max {}\n",
            g("server_part_p50_us"),
            g("server_part_p99_us"),
            g("server_part_max_us")
        ));
    }
    if o.contains_key("stamp_part_p50_us") {
        s.push_str(&format!(
            "  of which    to the ServerTimestamp p50 {}  p99 {}  max {}\n",
            g("stamp_part_p50_us"),
            g("stamp_part_p99_us"),
            g("stamp_part_max_us")
        ));
    }
    s.push_str(&format!(
        "  server      {} µs CPU/op ({} cores, sys share {}), peak RSS {} kB, cs/op {} vol {} invol\n",
        g("server_cpu_us_per_op"),
        g("server_cores"),
        g("server_sys_share"),
        g("server_rss_kb"),
        g("server_vcs_per_op"),
        g("server_ivcs_per_op")
    ));
    s.push_str(&format!(
        "  client      {} µs CPU/op ({} cores), cs/op {} vol {} invol, {} B out / {} B in per op\n",
        g("client_cpu_us_per_op"),
        g("client_cores"),
        g("client_vcs_per_op"),
        g("client_ivcs_per_op"),
        g("bytes_out_per_op"),
        g("bytes_in_per_op")
    ));
    if let Some(Value::Array(shards)) = o.get("shards") {
        for sh in shards {
            s.push_str(&format!(
                "  {:<11} {} µs CPU/op, {} cores, {} connections\n",
                sh.get("name").map(fmt).unwrap_or_default(),
                sh.get("cpu_us_per_op").map(fmt).unwrap_or_default(),
                sh.get("cores").map(fmt).unwrap_or_default(),
                sh.get("connections").map(fmt).unwrap_or_default()
            ));
        }
    }
    if o.contains_key("server_poller_cpu_s") {
        s.push_str(&format!(
            "  pollers     {} SQPOLL poller threads, {} s CPU = {} of the server's CPU (counted in it)\n",
            g("server_pollers"),
            g("server_poller_cpu_s"),
            g("server_poller_share")
        ));
    }
    if let Some(v) = o.get("server_sched") {
        s.push_str(&format!("  sched srv   {}\n", sched_line(v)));
    }
    if let Some(v) = o.get("client_sched") {
        s.push_str(&format!("  sched cli   {}\n", sched_line(v)));
    }
    if o.contains_key("rsa_bound_us_per_op") {
        s.push_str(&format!(
            "  rsa bound   {} per op = {} µs (RSA-{}: decrypt {} µs, sign {} µs, on cpus {} at once, drift {}) = {} ops per core-s; share reached {}\n",
            g("rsa_private_ops_per_op"),
            g("rsa_bound_us_per_op"),
            g("rsa_key_bits"),
            g("rsa_decrypt_us"),
            g("rsa_sign_us"),
            g("rsa_calibration_cpus"),
            g("rsa_bound_drift"),
            g("rsa_bound_ops_per_core_s"),
            g("rsa_bound_share"),
        ));
    }
    if o.get("scenario").and_then(Value::as_str) == Some("push") {
        s.push_str(&format!(
            "  push        {} sessions x {} items (of {} variables at {} Hz), queue {}, publishing {} ms; latency above: SourceTimestamp → receipt\n",
            g("sessions"),
            g("items"),
            g("variables"),
            g("push_rate"),
            g("queue_size"),
            g("publishing_ms")
        ));
        s.push_str(&format!(
            "  changes     delivered share {} ({} delivered, {} missing), {} overflow, {} out of order/duplicate, {} notifications\n",
            g("delivered_share"),
            g("changes_delivered"),
            g("changes_missing"),
            g("overflow_notifications"),
            g("out_of_order_notifications"),
            g("notifications")
        ));
        s.push_str(&format!(
            "  rates       {} notifications/s, {} pushed updates/s seen (subscribed variables, per item; {} offered to the items), {} offered (N x HZ)\n",
            g("notifications_per_s"),
            g("pushed_updates_per_s"),
            g("offered_item_updates_per_s"),
            g("offered_updates_per_s")
        ));
        s.push_str(&format!(
            "  server cpu  per notification {} µs whole process, {} µs without the push thread(s); per pushed update {} / {} µs ({} push threads, {} µs)\n",
            g("server_cpu_us_per_notification"),
            g("server_cpu_us_per_notification_excl_push"),
            g("server_cpu_us_per_update"),
            g("server_cpu_us_per_update_excl_push"),
            g("server_app_threads"),
            g("server_push_cpu_us")
        ));
    }
    for (key, label) in [
        ("server_priority", "prio srv"),
        ("client_priority", "prio cli"),
    ] {
        if let Some(p) = o.get(key) {
            let f = |k: &str| p.get(k).map(fmt).unwrap_or_default();
            let others = p
                .get("others")
                .and_then(Value::as_array)
                .filter(|a| !a.is_empty())
                .map(|a| {
                    format!(
                        "; not: {}",
                        a.iter().map(fmt).collect::<Vec<_>>().join(", ")
                    )
                })
                .unwrap_or_default();
            s.push_str(&format!(
                "  {label}    {}: {} of {} threads at the window's start{others}\n",
                f("requested"),
                f("at_requested"),
                f("threads")
            ));
        }
    }
    if let Some(p) = o.get("profile") {
        s.push_str(&crate::profile::readable(p));
    }
    s.push_str(&format!(
        "  machine     foreign load {} cores, steal {} cores, discarded runs {}\n",
        g("foreign_cores"),
        g("steal_cores"),
        g("discarded_runs")
    ));
    let shown = [
        "scenario",
        "server",
        "security",
        "clients",
        "inflight",
        "send",
        "server_cpus",
        "client_cpus",
        "client_threads",
        "ops",
        "seconds",
        "ops_per_s",
        "errors",
        "p50_us",
        "p90_us",
        "p99_us",
        "p999_us",
        "max_us",
        "mean_us",
        "server_cpu_us_per_op",
        "server_cores",
        "server_sys_share",
        "server_rss_kb",
        "server_vcs_per_op",
        "server_ivcs_per_op",
        "client_cpu_us_per_op",
        "client_cores",
        "client_vcs_per_op",
        "client_ivcs_per_op",
        "bytes_out_per_op",
        "bytes_in_per_op",
        "shards",
        "server_pollers",
        "server_poller_cpu_s",
        "server_poller_share",
        "server_sched",
        "client_sched",
        "foreign_cores",
        "steal_cores",
        "discarded_runs",
        "host",
        "kernel",
        "cpu_model",
        "online_cpus",
        "commit",
        "rsa_private_ops_per_op",
        "rsa_bound_us_per_op",
        "rsa_key_bits",
        "rsa_decrypt_us",
        "rsa_sign_us",
        "rsa_calibration_cpus",
        "rsa_bound_ops_per_core_s",
        "rsa_bound_share",
        "rsa_bound_drift",
        "server_priority",
        "client_priority",
        "profile",
    ];
    let push_shown = [
        "sessions",
        "items",
        "variables",
        "push_rate",
        "queue_size",
        "publishing_ms",
        "delivered_share",
        "changes_delivered",
        "changes_missing",
        "overflow_notifications",
        "out_of_order_notifications",
        "notifications",
        "notifications_per_s",
        "pushed_updates_per_s",
        "offered_updates_per_s",
        "offered_item_updates_per_s",
        "server_cpu_us_per_notification",
        "server_cpu_us_per_notification_excl_push",
        "server_cpu_us_per_update",
        "server_cpu_us_per_update_excl_push",
        "server_app_threads",
        "server_push_cpu_us",
        "pushed_updates_counts",
        "latency_from",
    ];
    let is_push = o.get("scenario").and_then(Value::as_str) == Some("push");
    let shown = |k: &str| shown.contains(&k) || (is_push && push_shown.contains(&k));
    let rest: Vec<String> = o
        .iter()
        .filter(|(k, _)| !shown(k.as_str()))
        .map(|(k, v)| format!("{k} {}", fmt(v)))
        .collect();
    if !rest.is_empty() {
        s.push_str(&format!("  also        {}\n", rest.join(", ")));
    }
    s
}

pub fn fmt(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_required_keys() {
        let mut stats = ThreadStats::default();
        for v in [1000u64, 2000, 3000, 4000] {
            stats.hist.record(v).unwrap();
        }
        stats.ops = 4;
        let info = RunInfo {
            scenario: "read".into(),
            security: "none".into(),
            server: "uaring".into(),
            clients: 4,
            idle_sessions: 0,
            inflight: 32,
            send: "batched".into(),
            client_io: "shards".into(),
            client_io_modes: "default".into(),
            server_cpus: "0".into(),
            client_cpus: "1".into(),
            client_threads: 1,
            variant: None,
            params: vec![],
            shard_connections: vec![],
            app_threads: vec![],
        };
        let m = Measured {
            seconds: 2.0,
            server: Some(ProcDelta {
                cpu_ns: 8000,
                ..Default::default()
            }),
            server_rss_kb: 1234,
            client: ProcDelta {
                cpu_ns: 4000,
                ..Default::default()
            },
            ..Default::default()
        };
        let o = build(&info, &stats, &m, 1);
        for k in [
            "scenario",
            "security",
            "clients",
            "inflight",
            "send",
            "ops",
            "seconds",
            "ops_per_s",
            "errors",
            "p50_us",
            "p90_us",
            "p99_us",
            "server_cpu_us_per_op",
            "client_cpu_us_per_op",
            "server_rss_kb",
            "server_cpus",
            "client_cpus",
            "discarded_runs",
        ] {
            assert!(o.contains_key(k), "missing {k}");
        }
        assert_eq!(o["ops_per_s"], json!(2.0));
        assert_eq!(o["server_cpu_us_per_op"], json!(2.0));
        assert_eq!(o["client_cpu_us_per_op"], json!(1.0));
        assert_eq!(o["discarded_runs"], json!(1));
        assert!(readable(&o).contains("ops/s"));
        assert!(
            !o.contains_key("idle_sessions"),
            "reported only when some were held"
        );
        let o = build(
            &RunInfo {
                idle_sessions: 8,
                ..info
            },
            &stats,
            &m,
            0,
        );
        assert_eq!(o["idle_sessions"], json!(8));
        assert!(readable(&o).contains("idle_sessions 8"), "{}", readable(&o));
    }
}
