//! `uaring-bench soak`: a long run of churning sessions against one server,
//! watching whether it grows. Each client loops: connect, OpenSecureChannel,
//! CreateSession, ActivateSession, CreateSubscription, CreateMonitoredItems,
//! then Publish / Read / Write requests, CloseSession (subscriptions deleted),
//! CloseSecureChannel, disconnect. Every second the server's resident set,
//! open file descriptors and the error count are sampled into a CSV; at the
//! end a JSON summary, a Markdown table and an SVG plot are written.
//!
//! RSS drift is the mean RSS of the last minute against the mean RSS of the
//! first minute after the warm-up (allocator pools and caches fill during the
//! warm-up, which is why it is left out).

use std::io::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::services::attribute::attr;
use uaring_core::types::{DataValue, ExtensionObject, NodeId, UaString, Variant};

use crate::cli::SoakOpts;
use crate::opcua::{UaDriver, Workload, FIRST_NODE, NODE_COUNT};
use crate::server::{ServerProcess, SpawnSpec};
use crate::uring::Ctx;

/// Parses `30m`, `90s`, `1h`, `1h30m` or plain seconds.
pub fn parse_duration(s: &str) -> Result<f64, String> {
    if let Ok(v) = s.parse::<f64>() {
        return if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err("must be > 0".into())
        };
    }
    let mut total = 0.0;
    let mut num = String::new();
    for ch in s.chars() {
        if ch.is_ascii_digit() || ch == '.' {
            num.push(ch);
            continue;
        }
        let v: f64 = num
            .parse()
            .map_err(|_| format!("malformed duration {s:?}"))?;
        num.clear();
        total += v * match ch {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => return Err(format!("unknown unit {ch:?} in {s:?} (s, m, h)")),
        };
    }
    if !num.is_empty() {
        return Err(format!("{s:?}: a number needs a unit (s, m, h)"));
    }
    if total > 0.0 {
        Ok(total)
    } else {
        Err("must be > 0".into())
    }
}

/// Counters shared by the churning clients.
#[derive(Default)]
struct Counters {
    sessions: AtomicU64,
    requests: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<String>,
}

impl Counters {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut l) = self.last_error.lock() {
            *l = e;
        }
    }
}

/// One session's work: a subscription with a few items, then `ops`
/// requests (Publish, Read, Write in turn), one at a time.
struct SoakWork {
    ops: usize,
    sent: usize,
    answered: usize,
    client: u32,
    subscription_id: u32,
    counters: Arc<Counters>,
    done: Arc<AtomicBool>,
}

impl Workload for SoakWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match (step, prev) {
            (0, _) => Ok(Some(Request::CreateSubscription(Box::new(
                CreateSubscriptionRequest {
                    requested_publishing_interval: 50.0,
                    requested_lifetime_count: 300,
                    requested_max_keep_alive_count: 10,
                    publishing_enabled: true,
                    ..Default::default()
                },
            )))),
            (1, Some(Response::CreateSubscription(r))) => {
                self.subscription_id = r.subscription_id;
                let items = (0..5u32)
                    .map(|j| MonitoredItemCreateRequest {
                        item_to_monitor: ReadValueId {
                            node_id: NodeId::numeric(
                                1,
                                FIRST_NODE + (self.client * 5 + j) % NODE_COUNT,
                            ),
                            attribute_id: attr::VALUE,
                            ..Default::default()
                        },
                        monitoring_mode: MonitoringMode::Reporting,
                        requested_parameters: MonitoringParameters {
                            client_handle: j,
                            sampling_interval: 10.0,
                            filter: ExtensionObject::null(),
                            queue_size: 10,
                            discard_oldest: true,
                        },
                    })
                    .collect();
                Ok(Some(Request::CreateMonitoredItems(Box::new(
                    CreateMonitoredItemsRequest {
                        subscription_id: r.subscription_id,
                        timestamps_to_return: TimestampsToReturn::Both,
                        items_to_create: items,
                        ..Default::default()
                    },
                ))))
            }
            (2, Some(Response::CreateMonitoredItems(r))) => {
                match r.results.iter().find(|x| x.status_code.is_bad()) {
                    Some(bad) => Err(format!("CreateMonitoredItems: {:?}", bad.status_code)),
                    None => Ok(None),
                }
            }
            (_, Some(other)) => Err(format!("unexpected {} during setup", other.name())),
            (_, None) => Err("setup without a response".into()),
        }
    }

    fn initial(&self) -> usize {
        1
    }

    fn next(&mut self, _now: u64) -> Option<Request> {
        if self.sent >= self.ops {
            return None;
        }
        let k = self.sent;
        self.sent += 1;
        let node = NodeId::numeric(1, FIRST_NODE + (self.client + k as u32) % NODE_COUNT);
        Some(match k % 3 {
            0 => Request::Publish(Box::default()),
            1 => Request::Read(Box::new(ReadRequest {
                timestamps_to_return: TimestampsToReturn::Both,
                nodes_to_read: vec![ReadValueId {
                    node_id: node,
                    attribute_id: attr::VALUE,
                    ..Default::default()
                }],
                ..Default::default()
            })),
            _ => Request::Write(Box::new(WriteRequest {
                nodes_to_write: vec![WriteValue {
                    node_id: node,
                    attribute_id: attr::VALUE,
                    index_range: UaString::default(),
                    value: DataValue::new(Variant::Int32(k as i32)),
                }],
                ..Default::default()
            })),
        })
    }

    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        _now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        self.answered += 1;
        self.counters.requests.fetch_add(1, Ordering::Relaxed);
        let sr = resp.response_header().service_result;
        let bad = match resp {
            _ if sr.is_bad() => Some(format!("{}: {sr:?}", resp.name())),
            Response::Read(r) => r
                .results
                .iter()
                .find(|v| v.status.is_some_and(|s| s.is_bad()))
                .map(|v| format!("Read: {:?}", v.status)),
            Response::Write(r) => r
                .results
                .iter()
                .find(|s| s.is_bad())
                .map(|s| format!("Write: {s:?}")),
            Response::Publish(_) => None,
            other => Some(format!("unexpected {}", other.name())),
        };
        if let Some(e) = bad {
            self.counters.error(e);
        }
        if self.answered >= self.ops {
            self.done.store(true, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// One session from connect to disconnect.
fn one_session(
    addr: std::net::SocketAddr,
    url: &str,
    client: u32,
    ops: usize,
    counters: &Arc<Counters>,
) -> Result<(), String> {
    let done = Arc::new(AtomicBool::new(false));
    let work = SoakWork {
        ops,
        sent: 0,
        answered: 0,
        client,
        subscription_id: 0,
        counters: counters.clone(),
        done: done.clone(),
    };
    let mut d = UaDriver::new(url, Box::new(work), 4, None);
    crate::opcua::run_session_blocking(addr, &mut d, |_| done.load(Ordering::Relaxed))?;
    counters.sessions.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// One sample of the server process.
#[derive(Clone, Copy, Debug)]
struct Sample {
    t_s: f64,
    rss_kib: u64,
    fds: u64,
    sessions: u64,
    requests: u64,
    errors: u64,
}

fn rss_kib(pid: i32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map(|t| crate::procstat::parse_status(&t).vm_rss_kb)
        .unwrap_or(0)
}

fn open_fds(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The summary of a run: RSS drift after the warm-up, fd range, errors.
fn summarize(
    samples: &[Sample],
    warmup_s: f64,
    clients: usize,
    duration_s: f64,
    cmd: &str,
) -> Value {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.t_s >= warmup_s).collect();
    let window = 60.0_f64.min((duration_s - warmup_s).max(1.0) / 2.0);
    let first: Vec<f64> = after
        .iter()
        .filter(|s| s.t_s < warmup_s + window)
        .map(|s| s.rss_kib as f64)
        .collect();
    let end = samples.last().map_or(0.0, |s| s.t_s);
    let last: Vec<f64> = after
        .iter()
        .filter(|s| s.t_s > end - window)
        .map(|s| s.rss_kib as f64)
        .collect();
    let (first_mean, last_mean) = (mean(&first), mean(&last));
    let drift = if first_mean > 0.0 {
        (last_mean - first_mean) / first_mean * 100.0
    } else {
        0.0
    };
    let max_rss = after.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let fd_min = after.iter().map(|s| s.fds).min().unwrap_or(0);
    let fd_max = after.iter().map(|s| s.fds).max().unwrap_or(0);
    let fd_first = after.first().map_or(0, |s| s.fds);
    let fd_last = after.last().map_or(0, |s| s.fds);
    let last = samples.last().copied();
    json!({
        "duration_s": end,
        "warmup_s": warmup_s,
        "clients": clients,
        "sessions": last.map_or(0, |s| s.sessions),
        "requests": last.map_or(0, |s| s.requests),
        "errors": last.map_or(0, |s| s.errors),
        "rss_first_minute_kib": first_mean.round(),
        "rss_last_minute_kib": last_mean.round(),
        "rss_max_after_warmup_kib": max_rss,
        "rss_drift_percent": (drift * 100.0).round() / 100.0,
        "fds_min": fd_min,
        "fds_max": fd_max,
        "fds_first": fd_first,
        "fds_last": fd_last,
        "samples": samples.len(),
        "command": cmd,
    })
}

fn markdown(v: &Value, svg_name: &str) -> String {
    let g = |k: &str| v.get(k).cloned().unwrap_or(Value::Null);
    let mib = |k: &str| {
        g(k).as_f64()
            .map_or("-".to_string(), |x| format!("{:.1}", x / 1024.0))
    };
    let mut s = String::new();
    s.push_str("| duration | warm-up | clients | sessions | requests | errors | RSS first min (MiB) | RSS last min (MiB) | drift | RSS max (MiB) | fds first / last (min..max) |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|---|\n");
    s.push_str(&format!(
        "| {:.0} s | {:.0} s | {} | {} | {} | {} | {} | {} | {:+.2} % | {} | {} / {} ({}..{}) |\n",
        g("duration_s").as_f64().unwrap_or(0.0),
        g("warmup_s").as_f64().unwrap_or(0.0),
        g("clients"),
        g("sessions"),
        g("requests"),
        g("errors"),
        mib("rss_first_minute_kib"),
        mib("rss_last_minute_kib"),
        g("rss_drift_percent").as_f64().unwrap_or(0.0),
        mib("rss_max_after_warmup_kib"),
        g("fds_first"),
        g("fds_last"),
        g("fds_min"),
        g("fds_max"),
    ));
    s.push_str(&format!(
        "\n![server RSS and open fds over the soak]({svg_name})\n"
    ));
    if let Some(c) = g("command").as_str() {
        s.push_str(&format!("\nReproduce: `{c}`\n"));
    }
    s
}

/// Two stacked line plots over time: RSS (MiB) and open fds, the warm-up shaded.
fn svg(samples: &[Sample], warmup_s: f64) -> String {
    let (w, h, pad) = (800.0, 200.0, 50.0);
    let t_max = samples.last().map_or(1.0, |s| s.t_s).max(1.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        w + 2.0 * pad,
        2.0 * h + 3.0 * pad
    );
    type Series<'a> = (&'a str, Box<dyn Fn(&Sample) -> f64>);
    let series: [Series; 2] = [
        (
            "server RSS, MiB",
            Box::new(|s: &Sample| s.rss_kib as f64 / 1024.0),
        ),
        ("open fds", Box::new(|s: &Sample| s.fds as f64)),
    ];
    for (k, (label, f)) in series.iter().enumerate() {
        let y0 = pad + k as f64 * (h + pad);
        let max = samples.iter().map(f).fold(0.0_f64, f64::max).max(1.0) * 1.1;
        let x = |t: f64| pad + t / t_max * w;
        let y = |v: f64| y0 + h - v / max * h;
        out.push_str(&format!(
            "<rect x=\"{pad}\" y=\"{y0}\" width=\"{:.1}\" height=\"{h}\" fill=\"#eee\"/>\n",
            (warmup_s.min(t_max) / t_max * w)
        ));
        out.push_str(&format!("<rect x=\"{pad}\" y=\"{y0}\" width=\"{w}\" height=\"{h}\" fill=\"none\" stroke=\"#888\"/>\n"));
        out.push_str(&format!(
            "<text x=\"{pad}\" y=\"{}\">{label} (0 to {max:.0}); warm-up shaded</text>\n",
            y0 - 6.0
        ));
        let pts: Vec<String> = samples
            .iter()
            .map(|s| format!("{:.1},{:.1}", x(s.t_s), y(f(s))))
            .collect();
        out.push_str(&format!(
            "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1\" points=\"{}\"/>\n",
            pts.join(" ")
        ));
        out.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0} min</text>\n",
            pad + w,
            y0 + h + 14.0,
            t_max / 60.0
        ));
    }
    out.push_str("</svg>\n");
    out
}

/// Removes a directory when dropped.
struct RemoveDir(Option<std::path::PathBuf>);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

pub fn soak_main(o: &SoakOpts, argv: &[String]) -> Result<i32, String> {
    let duration_s = parse_duration(&o.duration)?;
    let warmup_s = parse_duration(&o.warmup)?.min(duration_s / 2.0);
    // The PKI directory of the server soak starts, removed when soak ends however it ends
    // (declared before the server, so it is dropped after the server has stopped).
    let mut pki_dir = RemoveDir(None);
    let mut server = None;
    let (addr, pid) = match (&o.url, o.server_pid) {
        (Some(url), Some(pid)) => {
            let hostport = url
                .strip_prefix("opc.tcp://")
                .unwrap_or(url)
                .split('/')
                .next()
                .unwrap_or_default();
            let addr = std::net::ToSocketAddrs::to_socket_addrs(hostport)
                .map_err(|e| format!("{url}: {e}"))?
                .next()
                .ok_or(format!("{url}: no address"))?;
            (addr, pid)
        }
        (Some(_), None) => {
            return Err("--url needs --server-pid (its RSS and fds are sampled)".into())
        }
        _ => {
            let bin = o
                .server_bin
                .clone()
                .unwrap_or_else(|| crate::run::sibling_exe("uaring"));
            let pki = std::env::temp_dir().join(format!("uaring-soak-pki-{}", std::process::id()));
            pki_dir.0 = Some(pki.clone());
            let mut args = vec![
                "serve".to_string(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--pki".into(),
                pki.display().to_string(),
            ];
            args.extend(o.server_args.split_whitespace().map(String::from));
            let p = ServerProcess::spawn(&SpawnSpec {
                exe: bin,
                args,
                env: vec![("RUST_LOG".into(), "warn".into())],
                ready: "listening on".into(),
                pin: None,
                port: None,
                timeout: Duration::from_secs(30),
                priority: None,
            })?;
            let addr: std::net::SocketAddr = format!("{}:{}", p.host, p.port)
                .parse()
                .map_err(|e| format!("server address: {e}"))?;
            let pid = p.pid;
            server = Some(p);
            (addr, pid)
        }
    };
    let url = format!("opc.tcp://{addr}");
    let counters = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for c in 0..o.clients {
        let (counters, stop, url) = (counters.clone(), stop.clone(), url.clone());
        let ops = o.ops;
        workers.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = one_session(addr, &url, c as u32, ops, &counters) {
                    counters.error(e);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }));
    }
    let csv_path = format!("{}.csv", o.out);
    let mut csv = std::fs::File::create(&csv_path).map_err(|e| format!("{csv_path}: {e}"))?;
    writeln!(csv, "t_s,rss_kib,fds,sessions,requests,errors").map_err(|e| e.to_string())?;
    let start = Instant::now();
    let mut samples = Vec::new();
    let mut next = start;
    let mut last_report = 0u64;
    while start.elapsed().as_secs_f64() < duration_s {
        next += Duration::from_secs(1);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
        let s = Sample {
            t_s: start.elapsed().as_secs_f64(),
            rss_kib: rss_kib(pid),
            fds: open_fds(pid),
            sessions: counters.sessions.load(Ordering::Relaxed),
            requests: counters.requests.load(Ordering::Relaxed),
            errors: counters.errors.load(Ordering::Relaxed),
        };
        if s.rss_kib == 0 {
            stop.store(true, Ordering::Relaxed);
            return Err(format!(
                "the server (pid {pid}) is gone after {:.0} s",
                s.t_s
            ));
        }
        writeln!(
            csv,
            "{:.1},{},{},{},{},{}",
            s.t_s, s.rss_kib, s.fds, s.sessions, s.requests, s.errors
        )
        .map_err(|e| e.to_string())?;
        samples.push(s);
        let minute = s.t_s as u64 / 60;
        if minute != last_report {
            last_report = minute;
            eprintln!(
                "soak {:.0} s: RSS {} KiB, fds {}, sessions {}, requests {}, errors {}",
                s.t_s, s.rss_kib, s.fds, s.sessions, s.requests, s.errors
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    let cmd = format!(
        "uaring-bench {}",
        argv.iter().skip(1).cloned().collect::<Vec<_>>().join(" ")
    );
    let mut summary = summarize(&samples, warmup_s, o.clients, duration_s, &cmd);
    if let Ok(l) = counters.last_error.lock() {
        if !l.is_empty() {
            summary["last_error"] = json!(l.clone());
        }
    }
    if let Some(mut p) = server.take() {
        let status = p.stop();
        summary["server_exit"] = json!(status.and_then(|s| s.code()));
    }
    let svg_path = format!("{}.svg", o.out);
    let svg_name = std::path::Path::new(&svg_path)
        .file_name()
        .map_or(svg_path.clone(), |n| n.to_string_lossy().into_owned());
    std::fs::write(&svg_path, svg(&samples, warmup_s)).map_err(|e| format!("{svg_path}: {e}"))?;
    let md_path = format!("{}.md", o.out);
    std::fs::write(&md_path, markdown(&summary, &svg_name))
        .map_err(|e| format!("{md_path}: {e}"))?;
    let json_path = format!("{}.json", o.out);
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&summary).unwrap_or_default(),
    )
    .map_err(|e| format!("{json_path}: {e}"))?;
    println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    let errors = summary["errors"].as_u64().unwrap_or(0);
    Ok(if errors > 0 { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30m"), Ok(1800.0));
        assert_eq!(parse_duration("90s"), Ok(90.0));
        assert_eq!(parse_duration("1h30m"), Ok(5400.0));
        assert_eq!(parse_duration("12"), Ok(12.0));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("1h30").is_err());
    }

    #[test]
    fn drift_is_last_minute_against_first_minute_after_warmup() {
        let samples: Vec<Sample> = (0..600)
            .map(|t| Sample {
                t_s: t as f64,
                // Grows during the 120 s warm-up, then flat at 1000 KiB, last minute 1010.
                rss_kib: if t < 120 {
                    500 + t
                } else if t >= 540 {
                    1010
                } else {
                    1000
                },
                fds: 10 + (t % 3),
                sessions: t,
                requests: 10 * t,
                errors: 0,
            })
            .collect();
        let v = summarize(&samples, 120.0, 4, 600.0, "x");
        assert_eq!(v["rss_first_minute_kib"], json!(1000.0));
        assert_eq!(v["rss_last_minute_kib"], json!(1010.0));
        assert_eq!(v["rss_drift_percent"], json!(1.0));
        assert_eq!(
            (v["fds_min"].as_u64(), v["fds_max"].as_u64()),
            (Some(10), Some(12))
        );
        let md = markdown(&v, "soak.svg");
        assert!(md.contains("+1.00 %"), "{md}");
        let plot = svg(&samples, 120.0);
        assert!(plot.starts_with("<svg") && plot.matches("<polyline").count() == 2);
    }
}
