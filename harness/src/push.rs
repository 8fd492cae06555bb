//! `push`: an application inside the server pushes values, the harness subscribes to them.
//!
//! The server under test keeps the *plant contract*:
//!
//! - `plant --listen HOST:PORT --variables N --rate HZ` (HZ pushes a second per variable);
//! - namespace `urn:uaring:example:plant` (its index looked up in the NamespaceArray; through
//!   uaring's gateway, `urn:uaring:gateway:<server>:urn:uaring:example:plant`, docs/Gateway.md);
//! - N Double variables `s=Plant.V<i>` (i in 0..N) in a folder `s=Plant` under Objects;
//! - one thread named `push` writes every variable HZ times a second on absolute deadlines:
//!   the k-th push (k = 1, 2, …) sets the value to the Double k and the SourceTimestamp to
//!   the wall-clock time of the push; before any push the value is 0.0;
//! - `listening on opc.tcp://HOST:PORT` on stdout once listening; SIGTERM/SIGINT end it.
//!
//! K sessions (`--sessions`, default `--clients`) create one subscription each (`--publishing-ms`,
//! default 100) with M monitored items (`--items`, default ceil(N / K)) of sampling interval 0
//! and queue size `--queue-size` (default ceil(HZ × publishing interval) × 2 + 1): session j
//! monitors the variables [j×M, (j+1)×M) modulo N. The sessions are the `sub` scenario's
//! [`SubscriberWork`](crate::opcua::SubscriberWork) on core's client role.
//!
//! Because the k values of a variable count its pushes, every change can be accounted for
//! ([`ItemSeq`]): per item the values arrive in increasing order, and a jump over a value is a
//! lost change. In the window: delivered share = changes delivered / (delivered + missing),
//! notifications carrying the overflow InfoBit, stale (out-of-order or duplicate) values, the
//! pushes seen (the sum over items of how far k advanced: subscribed variables only, once per
//! item monitoring them), the server's CPU per notification and per push with and without the
//! threads named `push`, and the latency from the SourceTimestamp to the client's receipt
//! (the time its event loop reaped the message's last bytes, so one long message decoded
//! before another does not lengthen the other's; wall clock against wall clock, on the same
//! machine), with the server's part of it: SourceTimestamp to the message's PublishTime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::{json, Map, Value};
use uaring_core::generated::types::MonitoredItemNotification;
use uaring_core::types::{NodeId, StatusCode, Variant};

use crate::cli::{option_name, RunOpts};
use crate::report::round;
use crate::run::{run_with_guard, DynDriver, Plan, RunConfig, Running};
use crate::uring::Ctx;

/// The plant contract's namespace URI.
pub const PLANT_NAMESPACE_URI: &str = "urn:uaring:example:plant";
/// The name of the server's pushing thread(s) (`/proc/PID/task/TID/comm`).
pub const PUSH_THREAD: &str = "push";
/// Server_NamespaceArray (ns=0;i=2255).
pub const NAMESPACE_ARRAY: u32 = 2255;
/// The StatusCode bits of an overflow: InfoType DataValue (0x400) and Overflow (0x80).
pub const OVERFLOW_BITS: u32 = 0x480;

/// `s=Plant.V<i>` in namespace `ns`.
pub fn plant_node(ns: u16, i: usize) -> NodeId {
    NodeId::string(ns, format!("Plant.V{i}"))
}

/// The clap ids of the `run` options that `push` uses; any other given option is refused.
const PUSH_OPTIONS: &[&str] = &[
    "scenario",
    "clients",
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
    "url",
    "server_pid",
    "server_env",
    "server_name",
    "no_pin",
    "pki",
    "foreign_max",
    "max_repeats",
    "json",
    "variant",
    "sessions",
    "items",
    "publishing_ms",
    "idle_sessions",
    "variables",
    "push_rate",
    "queue_size",
];

/// The options only `push` uses.
const PUSH_ONLY: &[&str] = &["variables", "push_rate", "queue_size"];

/// Refuses options that do nothing for the scenario: for `push` every given option outside
/// [`PUSH_OPTIONS`], for the other scenarios the push-only ones.
pub fn check_options(o: &RunOpts) -> Result<(), String> {
    if o.scenario == "push" {
        PushParams::from_opts(o)?;
        let unused: Vec<String> = o
            .given
            .iter()
            .filter(|g| !PUSH_OPTIONS.contains(&g.as_str()))
            .map(|g| option_name(g))
            .collect();
        if !unused.is_empty() {
            return Err(format!(
                "{}: not used by the push scenario (K sessions × one subscription × M items, sampling interval 0, Publish requests only)",
                unused.join(", ")
            ));
        }
    } else if let Some(g) = o
        .given
        .iter()
        .filter(|g| {
            !crate::history::takes_push_option(&o.scenario, g)
                && !crate::scale::takes_push_option(&o.scenario, g)
        })
        .find(|g| PUSH_ONLY.contains(&g.as_str()))
    {
        return Err(format!(
            "{}: only for the push scenario, not {}",
            option_name(g),
            o.scenario
        ));
    }
    Ok(())
}

/// The default queue size: room for twice the changes of one publishing interval, plus one.
pub fn default_queue_size(push_rate: f64, publishing_ms: f64) -> u32 {
    let per_interval = (push_rate * publishing_ms / 1000.0).ceil().max(1.0);
    (per_interval.min((u32::MAX / 4) as f64) as u32) * 2 + 1
}

/// What a push run subscribes to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PushParams {
    /// N: the server's variables.
    pub variables: usize,
    /// HZ: pushes a second per variable.
    pub push_rate: f64,
    /// K: sessions, one subscription each.
    pub sessions: usize,
    /// M: monitored items per subscription.
    pub items: usize,
    pub publishing_ms: f64,
    pub queue_size: u32,
    /// The items' sampling interval, ms: 0 (exception-based) in `push`; `scale-items` samples.
    pub sampling_ms: f64,
}

impl PushParams {
    pub fn from_opts(o: &RunOpts) -> Result<PushParams, String> {
        let variables = o.variables.ok_or("push: --variables N (the server's variable count, the plant contract's --variables) is required")?;
        let push_rate = o.push_rate.ok_or("push: --push-rate HZ (pushes per second per variable, the plant contract's --rate) is required")?;
        let sessions = o.sessions.unwrap_or(o.clients).max(1);
        let items = o
            .items
            .unwrap_or_else(|| variables.div_ceil(sessions))
            .max(1);
        let publishing_ms = o.publishing_ms.unwrap_or(100.0);
        let queue_size = match o.queue_size {
            Some(q) => {
                u32::try_from(q).map_err(|_| format!("--queue-size {q}: at most {}", u32::MAX))?
            }
            None => default_queue_size(push_rate, publishing_ms),
        };
        Ok(PushParams {
            variables,
            push_rate,
            sessions,
            items,
            publishing_ms,
            queue_size,
            sampling_ms: 0.0,
        })
    }

    /// The variable that item `j` of session `session` monitors.
    pub fn variable_of(&self, session: usize, j: usize) -> usize {
        (session * self.items + j) % self.variables
    }

    /// How many distinct variables the sessions monitor.
    pub fn subscribed_variables(&self) -> usize {
        (self.sessions * self.items).min(self.variables)
    }
}

/// What the servers revised while the sessions were set up (shared by the sessions of a run).
#[derive(Debug)]
pub struct PushSetup {
    pub queue_size_min: AtomicU64,
    pub queue_size_max: AtomicU64,
    /// Microseconds.
    pub sampling_us_max: AtomicU64,
    pub publishing_us_max: AtomicU64,
}

impl Default for PushSetup {
    fn default() -> Self {
        PushSetup {
            queue_size_min: AtomicU64::new(u64::MAX),
            queue_size_max: AtomicU64::new(0),
            sampling_us_max: AtomicU64::new(0),
            publishing_us_max: AtomicU64::new(0),
        }
    }
}

impl PushSetup {
    pub fn reset(&self) {
        self.queue_size_min.store(u64::MAX, Ordering::Relaxed);
        self.queue_size_max.store(0, Ordering::Relaxed);
        self.sampling_us_max.store(0, Ordering::Relaxed);
        self.publishing_us_max.store(0, Ordering::Relaxed);
    }

    pub fn item(&self, revised_queue_size: u32, revised_sampling_ms: f64) {
        self.queue_size_min
            .fetch_min(u64::from(revised_queue_size), Ordering::Relaxed);
        self.queue_size_max
            .fetch_max(u64::from(revised_queue_size), Ordering::Relaxed);
        self.sampling_us_max
            .fetch_max(ms_to_us(revised_sampling_ms), Ordering::Relaxed);
    }

    pub fn subscription(&self, revised_publishing_ms: f64) {
        self.publishing_us_max
            .fetch_max(ms_to_us(revised_publishing_ms), Ordering::Relaxed);
    }
}

fn ms_to_us(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1000.0).round() as u64
    } else {
        0
    }
}

/// The push state of one subscribing session: the namespace and every item's sequence.
#[derive(Debug)]
pub struct PushItems {
    pub params: PushParams,
    pub session: usize,
    /// The plant namespace's index (from the NamespaceArray, during setup).
    pub namespace: Option<u16>,
    pub seq: Vec<ItemSeq>,
    pub setup: Arc<PushSetup>,
    /// `scale-items`: every item's record of the measured window (whether it reported on time).
    pub on_time: Option<Arc<crate::scale::OnTime>>,
}

impl PushItems {
    pub fn new(params: PushParams, session: usize, setup: Arc<PushSetup>) -> PushItems {
        PushItems {
            params,
            session,
            namespace: None,
            seq: vec![ItemSeq::default(); params.items],
            setup,
            on_time: None,
        }
    }

    /// The node of item `j`.
    pub fn node(&self, j: usize) -> NodeId {
        plant_node(
            self.namespace.unwrap_or(0),
            self.params.variable_of(self.session, j),
        )
    }

    /// Takes the namespace index from a NamespaceArray value.
    pub fn set_namespace(&mut self, value: &Variant) -> Result<u16, String> {
        let ns = namespace_index(value, PLANT_NAMESPACE_URI)?;
        self.namespace = Some(ns);
        Ok(ns)
    }
}

/// The index of `uri` in a NamespaceArray value (an array of Strings).
pub fn namespace_index(value: &Variant, uri: &str) -> Result<u16, String> {
    let Variant::Array(a) = value else {
        return Err(format!(
            "NamespaceArray: {value:?} is not an array of Strings"
        ));
    };
    let uris: Vec<&str> = a
        .values
        .iter()
        .map(|v| {
            if let Variant::String(s) = v {
                s.as_str()
            } else {
                ""
            }
        })
        .collect();
    // A gateway in front of a plant server (docs/Gateway.md) keeps the identifiers and maps
    // the namespace to `urn:uaring:gateway:<server name>:<uri>`: the first such one counts.
    let mapped = |u: &str| {
        u.strip_prefix("urn:uaring:gateway:")
            .and_then(|rest| rest.strip_suffix(uri))
            .is_some_and(|name| name.ends_with(':') && name.len() > 1)
    };
    let at = uris
        .iter()
        .position(|u| *u == uri)
        .or_else(|| uris.iter().position(|u| mapped(u)));
    match at {
        Some(i) => u16::try_from(i).map_err(|_| format!("NamespaceArray: {uri} at index {i}")),
        None => Err(format!(
            "the server's NamespaceArray {uris:?} has no {uri}: not a server of the plant contract"
        )),
    }
}

/// How a value k relates to the item's sequence so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The item's first notification (its value when the item was created): the base.
    First,
    /// The next value after the last one (k = last + 1).
    InOrder,
    /// A jump: `missing` values between the last one and k never arrived (k = last + 1 + missing).
    Gap { missing: u64 },
    /// k ≤ last: out of order or a duplicate; the sequence stays where it was.
    Stale,
}

impl Seen {
    /// How far the item's k advanced with this value (pushes seen).
    pub fn advance(self) -> u64 {
        match self {
            Seen::InOrder => 1,
            Seen::Gap { missing } => missing + 1,
            Seen::First | Seen::Stale => 0,
        }
    }
}

/// One item's sequence of pushed values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ItemSeq {
    /// The highest k seen.
    pub last: Option<u64>,
}

impl ItemSeq {
    pub fn see(&mut self, k: u64) -> Seen {
        match self.last {
            None => {
                self.last = Some(k);
                Seen::First
            }
            Some(l) if k == l + 1 => {
                self.last = Some(k);
                Seen::InOrder
            }
            Some(l) if k > l => {
                self.last = Some(k);
                Seen::Gap { missing: k - l - 1 }
            }
            Some(_) => Seen::Stale,
        }
    }
}

/// The k of a pushed value: a Double holding a whole number ≥ 0.
pub fn k_of(v: &Variant) -> Result<u64, String> {
    match v {
        Variant::Double(d) if d.is_finite() && *d >= 0.0 && d.fract() == 0.0 && *d < 9.0e15 => {
            Ok(*d as u64)
        }
        other => Err(format!(
            "push: value {other:?} (the plant contract pushes the Double k = 1, 2, 3, …)"
        )),
    }
}

/// Whether a status carries the overflow InfoBit.
pub fn has_overflow(s: StatusCode) -> bool {
    s.0 & OVERFLOW_BITS == OVERFLOW_BITS
}

/// Update→notification latency: the receipt's wall time minus the SourceTimestamp (ns, both
/// since the Unix epoch); `None` without a timestamp, 0 when the clocks disagree backwards.
pub fn latency_ns(received_unix_ns: i128, source_unix_ns: Option<i128>) -> Option<u64> {
    let s = source_unix_ns?;
    Some((received_unix_ns - s).clamp(0, u64::MAX as i128) as u64)
}

/// When a notification of a message was received, and when the server says it published it.
#[derive(Clone, Copy, Debug)]
pub struct Receipt {
    /// The client's wall time at the receipt (ns since the Unix epoch).
    pub received_unix_ns: i128,
    /// The NotificationMessage's PublishTime (ns since the Unix epoch), if the server set one.
    pub published_unix_ns: Option<i128>,
}

/// Accounts one notification of item `j` of a message received as `receipt`.
/// Counters go to `ctx` (kept only in the measured window); the sequence advances in every
/// phase, so the first change of the window is judged against the last one before it.
/// The latency is SourceTimestamp → receipt; its server part SourceTimestamp → PublishTime,
/// and SourceTimestamp → ServerTimestamp where the server stamped one (both clocks are this
/// machine's wall clock when client and server share a host).
pub fn see_notification(
    p: &mut PushItems,
    j: usize,
    item: &MonitoredItemNotification,
    receipt: Receipt,
    ctx: &mut Ctx,
) -> Result<(), String> {
    let received_unix_ns = receipt.received_unix_ns;
    let dv = &item.value;
    let status = dv.status_code();
    ctx.count("notifications", 1);
    if has_overflow(status) {
        ctx.count("overflow_notifications", 1);
    }
    if status.is_bad() {
        return Err(format!(
            "push: {} notified with status {status:?}",
            p.node(j)
        ));
    }
    let k = k_of(&dv.value)?;
    let seen = p.seq[j].see(k);
    match seen {
        Seen::First => ctx.count("first_values", 1),
        Seen::InOrder => ctx.count("changes_delivered", 1),
        Seen::Gap { missing } => {
            ctx.count("changes_delivered", 1);
            ctx.count("changes_missing", missing);
        }
        Seen::Stale => ctx.count("out_of_order_notifications", 1),
    }
    ctx.count("pushed_updates", seen.advance());
    let source = dv
        .source_timestamp
        .filter(|t| !t.is_null())
        .map(|t| t.unix_nanos());
    let latency = latency_ns(received_unix_ns, source);
    if let Some(w) = p.on_time.as_ref().filter(|_| ctx.measuring()) {
        w.see(j, seen, latency);
    }
    match latency {
        Some(l) => {
            ctx.complete(l);
            if let Some(part) = receipt
                .published_unix_ns
                .and_then(|t| latency_ns(t, source))
            {
                ctx.server_part(part);
            }
            if let Some(part) = dv
                .server_timestamp
                .filter(|t| !t.is_null())
                .and_then(|t| latency_ns(t.unix_nanos(), source))
            {
                ctx.stamp_part(part);
            }
        }
        None => ctx.count("notifications_without_source_timestamp", 1),
    }
    Ok(())
}

/// The figures of a push run from its counters (already in `o`), added to `o`.
pub fn finish(o: &mut Map<String, Value>, p: &PushParams, setup: &PushSetup) {
    let get = |o: &Map<String, Value>, k: &str| o.get(k).and_then(Value::as_u64).unwrap_or(0);
    let seconds = o.get("seconds").and_then(Value::as_f64).unwrap_or(0.0);
    let notifications = get(o, "notifications");
    let delivered = get(o, "changes_delivered");
    let missing = get(o, "changes_missing");
    let updates = get(o, "pushed_updates");
    let cpu = o.get("server_cpu_us").and_then(Value::as_f64);
    let push_cpu = o
        .get("server_app_cpu_us")
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let rate = |x: u64| {
        if seconds > 0.0 {
            round(x as f64 / seconds, 1)
        } else {
            0.0
        }
    };
    let mut out: Vec<(&str, Value)> = Vec::new();
    for k in [
        "notifications",
        "changes_delivered",
        "changes_missing",
        "overflow_notifications",
        "out_of_order_notifications",
        "pushed_updates",
        "first_values",
    ] {
        out.push((k, json!(get(o, k))));
    }
    out.push((
        "delivered_share",
        if delivered + missing > 0 {
            json!(round(delivered as f64 / (delivered + missing) as f64, 6))
        } else {
            Value::Null
        },
    ));
    out.push(("notifications_per_s", json!(rate(notifications))));
    out.push(("pushed_updates_per_s", json!(rate(updates))));
    out.push((
        "pushed_updates_counts",
        json!("subscribed variables only, once per monitored item (k advanced over the window)"),
    ));
    out.push((
        "offered_updates_per_s",
        json!(round(p.variables as f64 * p.push_rate, 1)),
    ));
    // What the items would see if every push reached them: the comparator of pushed_updates_per_s.
    out.push((
        "offered_item_updates_per_s",
        json!(round((p.sessions * p.items) as f64 * p.push_rate, 1)),
    ));
    out.push(("subscribed_variables", json!(p.subscribed_variables())));
    out.push((
        "latency_from",
        json!("SourceTimestamp to the client loop's reaping of the message (wall clock)"),
    ));
    let q = setup.queue_size_min.load(Ordering::Relaxed);
    if q != u64::MAX {
        out.push(("revised_queue_size_min", json!(q)));
        out.push((
            "revised_queue_size_max",
            json!(setup.queue_size_max.load(Ordering::Relaxed)),
        ));
        out.push((
            "revised_sampling_ms_max",
            json!(setup.sampling_us_max.load(Ordering::Relaxed) as f64 / 1000.0),
        ));
    }
    let publishing = setup.publishing_us_max.load(Ordering::Relaxed);
    if publishing > 0 {
        out.push((
            "revised_publishing_ms_max",
            json!(publishing as f64 / 1000.0),
        ));
    }
    let per = |total: Option<f64>, count: u64| match total {
        Some(t) if count > 0 => json!(round(t / count as f64, 3)),
        _ => Value::Null,
    };
    // Without the push thread(s): what serving the subscriptions costs.
    let without = cpu.map(|c| (c - push_cpu).max(0.0));
    out.push(("server_cpu_us_per_notification", per(cpu, notifications)));
    out.push((
        "server_cpu_us_per_notification_excl_push",
        per(without, notifications),
    ));
    out.push(("server_cpu_us_per_update", per(cpu, updates)));
    out.push(("server_cpu_us_per_update_excl_push", per(without, updates)));
    out.push((
        "server_push_cpu_us",
        cpu.map(|_| json!(round(push_cpu, 1)))
            .unwrap_or(Value::Null),
    ));
    for (k, v) in out {
        o.insert(k.to_string(), v);
    }
}

/// Runs the push scenario.
pub fn run_push(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    crate::security::parse_mode(&cfg.security)?;
    let p = PushParams::from_opts(&cfg.opts)?;
    let mut cfg = cfg.clone();
    // The load's connections are the sessions.
    if cfg.opts.client_threads.is_none() {
        cfg.client_threads = cfg.client_cpus.len().min(p.sessions).max(1);
    }
    cfg.clients = p.sessions;
    let setup = Arc::new(PushSetup::default());
    let setup2 = setup.clone();
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = r.url.clone();
            let sec = crate::security::prepare(&url, &cfg.security, &cfg.opts.security_policy)?;
            setup2.reset();
            let setup = setup2.clone();
            let factory = Arc::new(move |i: usize| -> DynDriver {
                let w = crate::opcua::SubscriberWork::push(PushItems::new(p, i, setup.clone()));
                let inflight = w.publish_inflight;
                Box::new(crate::opcua::UaDriver::new(
                    &url,
                    Box::new(w),
                    inflight,
                    sec.clone(),
                ))
            });
            let params = vec![
                ("sessions".to_string(), json!(p.sessions)),
                ("subscriptions".to_string(), json!(1)),
                ("items".to_string(), json!(p.items)),
                ("variables".to_string(), json!(p.variables)),
                ("push_rate".to_string(), json!(p.push_rate)),
                ("publishing_ms".to_string(), json!(p.publishing_ms)),
                ("sampling_ms".to_string(), json!(0.0)),
                ("queue_size".to_string(), json!(p.queue_size)),
            ];
            Ok((
                Plan::Ring {
                    conns: p.sessions,
                    factory,
                },
                params,
            ))
        };
    let vars = [
        ("variables", p.variables.to_string()),
        ("push_rate", format!("{}", p.push_rate)),
    ];
    let mut o = run_with_guard(&cfg, &vars, &plan)?;
    finish(&mut o, &p, &setup);
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::{Shared, ThreadStats, PHASE_MEASURE, PHASE_WARMUP};
    use uaring_core::types::{DataValue, DateTime};

    #[test]
    fn sequences_count_gaps_and_stale_values() {
        let mut s = ItemSeq::default();
        assert_eq!(
            s.see(0),
            Seen::First,
            "the value when the item was created is the base"
        );
        assert_eq!(s.see(1), Seen::InOrder);
        assert_eq!(s.see(2), Seen::InOrder);
        assert_eq!(s.see(5), Seen::Gap { missing: 2 });
        assert_eq!(s.see(4), Seen::Stale, "behind the last: out of order");
        assert_eq!(s.see(5), Seen::Stale, "the same again: a duplicate");
        assert_eq!(
            s.last,
            Some(5),
            "stale values do not move the sequence back"
        );
        assert_eq!(s.see(6), Seen::InOrder);
        let advanced: u64 = [
            Seen::First,
            Seen::InOrder,
            Seen::Gap { missing: 2 },
            Seen::Stale,
        ]
        .iter()
        .map(|x| x.advance())
        .sum();
        assert_eq!(advanced, 4);
        // An item created after some pushes starts at their count.
        let mut t = ItemSeq::default();
        assert_eq!(t.see(41), Seen::First);
        assert_eq!(t.see(43), Seen::Gap { missing: 1 });
    }

    #[test]
    fn values_and_status_bits() {
        assert_eq!(k_of(&Variant::Double(7.0)), Ok(7));
        assert_eq!(k_of(&Variant::Double(0.0)), Ok(0));
        assert!(k_of(&Variant::Double(1.5)).is_err());
        assert!(k_of(&Variant::Double(-1.0)).is_err());
        assert!(k_of(&Variant::Double(f64::NAN)).is_err());
        assert!(
            k_of(&Variant::Int32(3)).is_err(),
            "the contract's values are Doubles"
        );
        assert!(has_overflow(StatusCode(0x0000_0480)));
        assert!(
            has_overflow(StatusCode(0x0000_04A0)),
            "other info bits beside it"
        );
        assert!(
            !has_overflow(StatusCode(0x0000_0400)),
            "InfoType without the Overflow bit"
        );
        assert!(
            !has_overflow(StatusCode(0x0000_0080)),
            "the Overflow bit without InfoType DataValue"
        );
        assert!(!has_overflow(StatusCode(0)));
    }

    #[test]
    fn latency_is_receipt_minus_source_timestamp() {
        let src = 1_700_000_000_000_000_000i128;
        assert_eq!(latency_ns(src + 1_500_000, Some(src)), Some(1_500_000));
        assert_eq!(
            latency_ns(src - 10, Some(src)),
            Some(0),
            "a timestamp ahead of the receipt is no negative latency"
        );
        assert_eq!(latency_ns(src, None), None);
        // Through DateTime's 100 ns ticks, as on the wire.
        let t = DateTime::from_unix_nanos(src + 250);
        assert_eq!(
            latency_ns(src + 1_000_000, Some(t.unix_nanos())),
            Some(1_000_000 - 200)
        );
    }

    #[test]
    fn defaults_and_item_ranges() {
        assert_eq!(default_queue_size(50.0, 100.0), 11);
        assert_eq!(
            default_queue_size(1.0, 100.0),
            3,
            "at least one change per interval"
        );
        assert_eq!(default_queue_size(1000.0, 250.0), 501);
        let o = RunOpts::try_parse_words([
            "run",
            "--scenario",
            "push",
            "--variables",
            "200",
            "--push-rate",
            "50",
            "--sessions",
            "2",
        ])
        .unwrap();
        let p = PushParams::from_opts(&o).unwrap();
        assert_eq!(
            (p.sessions, p.items, p.queue_size, p.publishing_ms),
            (2, 100, 11, 100.0)
        );
        assert_eq!(p.variable_of(0, 0), 0);
        assert_eq!(p.variable_of(1, 99), 199);
        assert_eq!(p.subscribed_variables(), 200);
        // More items than variables wrap around modulo N.
        let o = RunOpts::try_parse_words([
            "run",
            "--scenario",
            "push",
            "--variables",
            "10",
            "--push-rate",
            "5",
            "--sessions",
            "3",
            "--items",
            "4",
        ])
        .unwrap();
        let p = PushParams::from_opts(&o).unwrap();
        assert_eq!(
            (0..4).map(|j| p.variable_of(2, j)).collect::<Vec<_>>(),
            vec![8, 9, 0, 1]
        );
        assert_eq!(p.subscribed_variables(), 10);
        let o =
            RunOpts::try_parse_words(["run", "--scenario", "push", "--push-rate", "5"]).unwrap();
        assert!(PushParams::from_opts(&o)
            .unwrap_err()
            .contains("--variables"));
    }

    #[test]
    fn options_that_do_nothing_are_refused() {
        let parse = |w: &[&str]| {
            RunOpts::try_parse_words(std::iter::once("run").chain(w.iter().copied())).unwrap()
        };
        let ok = parse(&[
            "--scenario",
            "push",
            "--variables",
            "10",
            "--push-rate",
            "5",
            "--sessions",
            "2",
            "--queue-size",
            "7",
            "--json",
        ]);
        assert_eq!(check_options(&ok), Ok(()));
        for bad in [
            ["--sampling-ms", "5"],
            ["--inflight", "4"],
            ["--writers", "1"],
            ["--rate", "100"],
            ["--nodes", "3"],
            ["--subscriptions", "2"],
        ] {
            let o = parse(
                &[
                    &[
                        "--scenario",
                        "push",
                        "--variables",
                        "10",
                        "--push-rate",
                        "5",
                    ][..],
                    &bad[..],
                ]
                .concat(),
            );
            let e = check_options(&o).unwrap_err();
            assert!(e.contains(bad[0]), "{bad:?}: {e}");
        }
        let e = check_options(&parse(&["--scenario", "sub", "--queue-size", "4"])).unwrap_err();
        assert!(e.contains("--queue-size") && e.contains("sub"), "{e}");
        assert_eq!(
            check_options(&parse(&["--scenario", "sub", "--sampling-ms", "5"])),
            Ok(())
        );
    }

    #[test]
    fn namespace_lookup() {
        use uaring_core::types::{Array, BuiltinType};
        let arr = |uris: &[&str]| {
            Variant::Array(Box::new(
                Array::new(
                    BuiltinType::String,
                    uris.iter().map(|u| Variant::String((*u).into())).collect(),
                )
                .unwrap(),
            ))
        };
        assert_eq!(
            namespace_index(
                &arr(&["http://opcfoundation.org/UA/", "urn:x", PLANT_NAMESPACE_URI]),
                PLANT_NAMESPACE_URI
            ),
            Ok(2)
        );
        assert!(
            namespace_index(&arr(&["http://opcfoundation.org/UA/"]), PLANT_NAMESPACE_URI)
                .unwrap_err()
                .contains("plant contract")
        );
        assert!(namespace_index(&Variant::Int32(1), PLANT_NAMESPACE_URI).is_err());
        // Through the gateway: the mirrored server's namespace.
        assert_eq!(
            namespace_index(
                &arr(&[
                    "http://opcfoundation.org/UA/",
                    "urn:uaring:server",
                    "urn:uaring:gateway",
                    "urn:uaring:gateway:o6:urn:uaring:example:plant"
                ]),
                PLANT_NAMESPACE_URI
            ),
            Ok(3)
        );
    }

    fn notification(
        j: u32,
        k: f64,
        status: u32,
        source_unix_ns: Option<i128>,
    ) -> MonitoredItemNotification {
        MonitoredItemNotification {
            client_handle: j,
            value: DataValue {
                value: Variant::Double(k),
                status: (status != 0).then_some(StatusCode(status)),
                source_timestamp: source_unix_ns.map(DateTime::from_unix_nanos),
                ..Default::default()
            },
        }
    }

    fn at(received_unix_ns: i128) -> Receipt {
        Receipt {
            received_unix_ns,
            published_unix_ns: None,
        }
    }

    /// Warm-up values set the base; in the window every change is counted once: delivered,
    /// missing, overflow, stale; pushes seen; one latency sample per timestamped notification.
    #[test]
    fn window_accounting() {
        let params = PushParams {
            variables: 4,
            push_rate: 10.0,
            sessions: 1,
            items: 2,
            publishing_ms: 100.0,
            queue_size: 3,
            sampling_ms: 0.0,
        };
        let mut p = PushItems::new(params, 0, Arc::default());
        p.namespace = Some(2);
        let shared = Shared::default();
        let mut stats = ThreadStats::default();
        let t = 1_700_000_000_000_000_000i128;
        {
            let mut warm = Ctx::new(PHASE_WARMUP, &mut stats, &shared);
            see_notification(
                &mut p,
                0,
                &notification(0, 0.0, 0, Some(t)),
                at(t),
                &mut warm,
            )
            .unwrap();
            see_notification(
                &mut p,
                0,
                &notification(0, 1.0, 0, Some(t)),
                at(t),
                &mut warm,
            )
            .unwrap();
            see_notification(
                &mut p,
                1,
                &notification(1, 3.0, 0, Some(t)),
                at(t),
                &mut warm,
            )
            .unwrap();
        }
        assert!(
            stats.extra.is_empty() && stats.ops == 0,
            "nothing counts before the window"
        );
        {
            let mut m = Ctx::new(PHASE_MEASURE, &mut stats, &shared);
            // Item 0: 2, then 5 (3 and 4 lost, the queue overflowed), then 4 again (stale).
            let mut stamped = notification(0, 2.0, 0, Some(t + 1_000_000));
            stamped.value.server_timestamp = Some(DateTime::from_unix_nanos(t + 1_500_000));
            see_notification(
                &mut p,
                0,
                &stamped,
                Receipt {
                    received_unix_ns: t + 3_000_000,
                    published_unix_ns: Some(t + 2_000_000),
                },
                &mut m,
            )
            .unwrap();
            see_notification(
                &mut p,
                0,
                &notification(0, 5.0, 0x480, Some(t + 2_000_000)),
                at(t + 4_000_000),
                &mut m,
            )
            .unwrap();
            see_notification(
                &mut p,
                0,
                &notification(0, 4.0, 0, Some(t + 2_000_000)),
                at(t + 4_000_000),
                &mut m,
            )
            .unwrap();
            // Item 1: 4 in order, without a SourceTimestamp.
            see_notification(
                &mut p,
                1,
                &notification(1, 4.0, 0, None),
                at(t + 4_000_000),
                &mut m,
            )
            .unwrap();
            assert!(
                see_notification(&mut p, 1, &notification(1, 0.5, 0, None), at(t), &mut m).is_err(),
                "not a push count"
            );
            assert!(
                see_notification(
                    &mut p,
                    1,
                    &notification(1, 5.0, 0x8034_0000, None),
                    at(t),
                    &mut m
                )
                .is_err(),
                "a Bad status"
            );
        }
        let e = |k: &str| stats.extra.get(k).copied().unwrap_or(0);
        assert_eq!(e("notifications"), 6);
        assert_eq!(e("changes_delivered"), 3);
        assert_eq!(e("changes_missing"), 2);
        assert_eq!(e("overflow_notifications"), 1);
        assert_eq!(e("out_of_order_notifications"), 1);
        assert_eq!(
            e("pushed_updates"),
            1 + 3 + 1,
            "item 0 advanced 1 → 5, item 1 3 → 4"
        );
        assert_eq!(e("notifications_without_source_timestamp"), 1);
        assert_eq!(
            stats.ops, 3,
            "one latency sample per timestamped notification"
        );
        assert_eq!(stats.hist.max(), stats.hist.highest_equivalent(2_000_000));
        assert_eq!(stats.hist.min(), stats.hist.lowest_equivalent(2_000_000));
        assert_eq!(
            stats.server_part.len(),
            1,
            "a server part only where the message had a PublishTime"
        );
        assert_eq!(
            stats.server_part.max(),
            stats.server_part.highest_equivalent(1_000_000),
            "SourceTimestamp → PublishTime"
        );
        assert_eq!(
            (stats.stamp_part.len(), stats.stamp_part.max()),
            (1, stats.stamp_part.highest_equivalent(500_000)),
            "SourceTimestamp → ServerTimestamp, where there was one"
        );

        // The figures of the run.
        let mut o = Map::new();
        for (k, v) in &stats.extra {
            o.insert((*k).to_string(), json!(v));
        }
        o.insert("seconds".into(), json!(2.0));
        o.insert("server_cpu_us".into(), json!(1000.0));
        o.insert("server_app_cpu_us".into(), json!(400.0));
        let setup = PushSetup::default();
        setup.item(3, 0.0);
        setup.item(5, 0.0);
        finish(&mut o, &params, &setup);
        assert_eq!(o["delivered_share"], json!(0.6));
        assert_eq!(o["notifications_per_s"], json!(3.0));
        assert_eq!(o["pushed_updates_per_s"], json!(2.5));
        assert_eq!(o["offered_updates_per_s"], json!(40.0));
        assert_eq!(
            o["offered_item_updates_per_s"],
            json!(20.0),
            "1 session × 2 items × 10 Hz"
        );
        assert_eq!(
            o["server_cpu_us_per_notification"],
            json!(round(1000.0 / 6.0, 3))
        );
        assert_eq!(o["server_cpu_us_per_notification_excl_push"], json!(100.0));
        assert_eq!(o["server_cpu_us_per_update"], json!(200.0));
        assert_eq!(o["server_cpu_us_per_update_excl_push"], json!(120.0));
        assert_eq!(o["revised_queue_size_min"], json!(3));
        assert_eq!(o["revised_queue_size_max"], json!(5));
    }
}
