//! Session establishment (`connect`), the blocking one-session helpers, and the counters
//! scenario.

use super::*;

/// `connect`: full OpenSecureChannel + CreateSession + ActivateSession +
/// Close per iteration, one blocking client per client thread.
pub(super) fn run_connect(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    // With an RSA policy, aws-lc-rs's private-key operations are timed on the server's CPUs
    // while the server idles before the warm-up (and after the window, below): the bound the
    // establishments are quoted beside. The decryptions it counts come from the
    // OpenSecureChannel requests the clients of the same run send.
    // With an ECC policy the bound is the ECC private-key work instead
    // (`rsa_bound::calibrate_ecc`), timed once before the run.
    let client_policy = security::parse_client_policy(&cfg.opts.security_policy)?;
    let ecc_curve = match client_policy {
        security::ClientPolicy::Ecc(c) => Some(c),
        security::ClientPolicy::Rsa(_) => None,
    };
    let policy = match client_policy {
        security::ClientPolicy::Rsa(p) => p,
        security::ClientPolicy::Ecc(_) => uaring_crypto::PolicyId::Basic256Sha256,
    };
    let ecc_bound: Arc<std::sync::Mutex<Option<f64>>> = Arc::default();
    let ecc_b = ecc_bound.clone();
    let calibration: Arc<std::sync::Mutex<Option<crate::rsa_bound::Calibration>>> = Arc::default();
    let opn_encrypted = Arc::new(AtomicU64::new(0));
    let (cal, opn) = (calibration.clone(), opn_encrypted.clone());
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = endpoint(r);
            let sec = secure(cfg, &url)?;
            opn.store(0, Ordering::Relaxed);
            if let (Some(_), Some(curve)) = (&sec, ecc_curve) {
                let us = crate::rsa_bound::calibrate_ecc(curve, &cfg.server_cpus, 2.0)?;
                *ecc_b.lock().map_err(|_| "calibration lock".to_string())? = Some(us);
            } else if let Some(s) = &sec {
                let bits = crate::rsa_bound::key_bits_of(&s.server_certificate)?;
                let c = crate::rsa_bound::calibrate(policy, bits, &cfg.server_cpus, 2.0)?;
                *cal.lock().map_err(|_| "calibration lock".to_string())? = Some(c);
            }
            let opn = opn.clone();
            let body = Arc::new(
                move |_i: usize,
                      addr: std::net::SocketAddr,
                      shared: &crate::uring::Shared,
                      stats: &mut crate::uring::ThreadStats| {
                    shared.ready.fetch_add(1, Ordering::SeqCst);
                    loop {
                        let phase = shared.phase.load(Ordering::Relaxed);
                        if phase == crate::uring::PHASE_STOP {
                            break;
                        }
                        let t0 = mono_ns();
                        let r = connect_once(addr, &url, sec.clone());
                        let mut ctx = Ctx::new(phase, stats, shared);
                        match r {
                            Ok(sent) => {
                                if let Some(n) = sent.opn_encrypted_len {
                                    let _ = opn.compare_exchange(
                                        0,
                                        n as u64,
                                        Ordering::Relaxed,
                                        Ordering::Relaxed,
                                    );
                                }
                                ctx.complete(mono_ns() - t0)
                            }
                            Err(e) => {
                                ctx.error(|| e);
                                std::thread::sleep(Duration::from_millis(10));
                            }
                        }
                    }
                },
            );
            Ok((
                Plan::Threads {
                    count: cfg.clients,
                    body,
                },
                vec![("security_policy".into(), json!(cfg.opts.security_policy))],
            ))
        };
    // The machine's speed drifts: the calibration runs again after the window (the server
    // has stopped) and the bound is the mean of the two, which bracket the window. A run whose
    // two calibrations differ by more than RSA_DRIFT_MAX is repeated, like one with foreign load
    // (up to --max-repeats), and flagged `rsa_bound_unsteady` if the repeats run out.
    const RSA_DRIFT_MAX: f64 = 0.10;
    let mut repeated = 0u32;
    let mut o = loop {
        let mut o = run_with_guard(cfg, &[], &plan)?;
        if let Some(us) = ecc_bound
            .lock()
            .map_err(|_| "calibration lock".to_string())?
            .take()
        {
            crate::rsa_bound::add_ecc_to(&mut o, us);
        }
        let Some(before) = calibration
            .lock()
            .map_err(|_| "calibration lock".to_string())?
            .take()
        else {
            break o;
        };
        let after = crate::rsa_bound::calibrate(policy, before.key_bits, &before.cpus, 2.0)?;
        let drift = before.drift_to(&after);
        crate::rsa_bound::add_to(
            &mut o,
            &before.mean_with(&after),
            opn_encrypted.load(Ordering::Relaxed),
        );
        o.insert("rsa_bound_drift".into(), json!(drift));
        if drift.abs() <= RSA_DRIFT_MAX {
            break o;
        }
        if repeated >= cfg.max_repeats {
            o.insert("rsa_bound_unsteady".into(), json!(true));
            break o;
        }
        repeated += 1;
        eprintln!("uaring-bench: the RSA rate drifted {drift:+.3} across the run: run repeated ({repeated}/{})", cfg.max_repeats);
    };
    if repeated > 0 {
        let d = o.get("discarded_runs").and_then(Value::as_u64).unwrap_or(0);
        o.insert("discarded_runs".into(), json!(d + u64::from(repeated)));
    }
    Ok(o)
}

/// A struct that does nothing after the session is active.
pub(super) struct NoWork;

impl Workload for NoWork {
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        _resp: &Response,
        _sent: u64,
        _now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        Ok(())
    }
}

/// One blocking OpenSecureChannel + CreateSession + ActivateSession +
/// CloseSession + CloseSecureChannel through the same driver as the load.
pub fn connect_once(
    addr: std::net::SocketAddr,
    url: &str,
    sec: Option<Arc<Security>>,
) -> Result<Sent, String> {
    connect_once_as(addr, url, sec, None)
}

/// [`connect_once`] with a UserName login (`user`: name, password) or anonymously.
pub fn connect_once_as(
    addr: std::net::SocketAddr,
    url: &str,
    sec: Option<Arc<Security>>,
    user: Option<(String, String)>,
) -> Result<Sent, String> {
    let mut d = UaDriver::new(url, Box::new(NoWork), 4, sec).with_user(user);
    run_session_blocking(addr, &mut d, UaDriver::is_running)
}

/// What a blocking session sent that a run may count.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sent {
    /// [`crate::rsa_bound::opn_encrypted_len`] of its first OpenSecureChannel request.
    pub opn_encrypted_len: Option<usize>,
}

/// Drives one session over a blocking socket: connect, run `d` until `time_to_close` says
/// so, CloseSession, then close the channel. Used where a whole session is the operation
/// (session establishment, the soak's churn, the connect storm).
pub fn run_session_blocking(
    addr: std::net::SocketAddr,
    d: &mut UaDriver,
    time_to_close: impl Fn(&UaDriver) -> bool,
) -> Result<Sent, String> {
    BlockingSession::open(addr, d, time_to_close)?.close(d)
}

/// One session's connection over a blocking socket (read timeout 10 s), driving a
/// [`UaDriver`] for [`run_session_blocking`].
pub(super) struct BlockingSession {
    pub(super) stream: std::net::TcpStream,
    /// What the driver wrote and the socket has not taken yet.
    pub(super) out: Vec<u8>,
    pub(super) buf: Vec<u8>,
    pub(super) shared: crate::uring::Shared,
    pub(super) stats: crate::uring::ThreadStats,
    pub(super) sent: Sent,
}

impl BlockingSession {
    /// Connects and drives `d` until `ready(d)` says so after a response; what `d` wrote
    /// in answer is still queued (the next write sends it).
    pub fn open(
        addr: std::net::SocketAddr,
        d: &mut UaDriver,
        ready: impl Fn(&UaDriver) -> bool,
    ) -> Result<BlockingSession, String> {
        Self::open_waiting(addr, d, ready, Duration::from_secs(10))
    }

    /// [`BlockingSession::open`], waiting up to `read_timeout` for each answer (a request
    /// that takes the server long: `scale-items`' CreateMonitoredItems of 50,000 items).
    pub fn open_waiting(
        addr: std::net::SocketAddr,
        d: &mut UaDriver,
        ready: impl Fn(&UaDriver) -> bool,
        read_timeout: Duration,
    ) -> Result<BlockingSession, String> {
        let stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(read_timeout))
            .map_err(|e| e.to_string())?;
        let mut s = BlockingSession {
            stream,
            out: Vec::with_capacity(4096),
            buf: vec![0u8; 65536],
            shared: crate::uring::Shared::default(),
            stats: crate::uring::ThreadStats::default(),
            sent: Sent::default(),
        };
        let mut ctx = Ctx::new(crate::uring::PHASE_WARMUP, &mut s.stats, &s.shared);
        d.start(mono_ns(), &mut s.out, &mut ctx)?;
        loop {
            s.flush()?;
            s.read_into(d)?;
            if ready(d) {
                return Ok(s);
            }
        }
    }

    /// Writes what `d` has queued.
    pub fn flush(&mut self) -> Result<(), String> {
        use std::io::Write;
        if !self.out.is_empty() {
            if self.sent.opn_encrypted_len.is_none() {
                self.sent.opn_encrypted_len = crate::rsa_bound::opn_encrypted_len(&self.out);
            }
            self.stream
                .write_all(&self.out)
                .map_err(|e| format!("send: {e}"))?;
            self.out.clear();
        }
        Ok(())
    }

    /// One read (waiting up to the read timeout), handed to `d`.
    fn read_into(&mut self, d: &mut UaDriver) -> Result<(), String> {
        use std::io::Read;
        let n = self
            .stream
            .read(&mut self.buf)
            .map_err(|e| format!("recv: {e}"))?;
        if n == 0 {
            return Err("connection closed by the server".into());
        }
        let mut ctx = Ctx::new(crate::uring::PHASE_WARMUP, &mut self.stats, &self.shared);
        d.on_recv(mono_ns(), &self.buf[..n], &mut self.out, &mut ctx)
    }

    /// CloseSession, its answer, then CloseSecureChannel.
    pub fn close(mut self, d: &mut UaDriver) -> Result<Sent, String> {
        use std::io::Write;
        d.close_session(mono_ns(), &mut self.out)?;
        loop {
            self.flush()?;
            if d.is_closed() {
                break;
            }
            self.read_into(d)?;
        }
        d.close_channel(mono_ns(), &mut self.out);
        let _ = self.stream.write_all(&self.out);
        Ok(self.sent)
    }
}

/// `counters`: the sampling-capacity search. Items double from
/// `--start-items` until a run fails, then bisect until the bracket is within
/// 10 %; pass = every item reaches ≥ 99 % of its expected samples.
pub fn run_counters(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    security_check(cfg)?;
    let start: usize = cfg.opts.start_items;
    let max: usize = cfg.opts.max_items;
    let sampling_ms: f64 = cfg.opts.sampling_ms;
    let publishing_ms: f64 = cfg.opts.publishing_ms.unwrap_or(1000.0);
    let sessions: usize = cfg.opts.sessions.unwrap_or(1);
    let mut cfg = cfg.clone();
    if let crate::run::Target::Uaring { args, .. } = &mut cfg.target {
        if !args.contains("{items}") {
            args.push_str(" --counters {items}");
        }
    }
    let mut steps: Vec<Value> = Vec::new();
    let mut pass: Option<usize> = None;
    let mut fail: Option<usize> = None;
    let mut n = start.max(1);
    let mut last: Option<Map<String, Value>> = None;
    for _ in 0..40 {
        match counters_step(&cfg, n, sessions, sampling_ms, publishing_ms) {
            Ok((ok, o)) => {
                steps.push(json!({"items": n, "pass": ok, "min_ratio": o.get("min_sample_ratio").cloned().unwrap_or(Value::Null)}));
                if ok {
                    pass = Some(n);
                    last = Some(o);
                } else {
                    fail = Some(n);
                    if last.is_none() {
                        last = Some(o);
                    }
                }
            }
            // Once a step has passed, the server and its configuration work: a larger step
            // that cannot run (its items' creation outlasting the ready timeout, a server
            // that stops answering) is past the capacity, not a reason to lose the search.
            Err(e) if pass.is_some() => {
                eprintln!("uaring-bench: counters step of {n} items failed: {e}");
                steps.push(json!({"items": n, "pass": false, "error": e}));
                fail = Some(n);
            }
            Err(e) => return Err(e),
        }
        n = match next_counters_step(pass, fail, max) {
            Some(n) => n,
            None => break,
        };
    }
    let mut o = last.unwrap_or_default();
    o.insert("scenario".into(), json!("counters"));
    o.insert("capacity_items".into(), json!(pass.unwrap_or(0)));
    o.insert("steps".into(), Value::Array(steps));
    Ok(o)
}

/// The next step of the capacity search from the largest passing and the smallest failing
/// item counts so far: doubling up to `max` while every step passed, halving while none did,
/// bisecting the bracket until it is within 10 %; `None` when the search is done.
fn next_counters_step(pass: Option<usize>, fail: Option<usize>, max: usize) -> Option<usize> {
    match (pass, fail) {
        (Some(p), None) if p * 2 <= max => Some(p * 2),
        (Some(_), None) => None,
        (None, Some(f)) if f > 1 => Some(f / 2),
        (None, Some(_)) => None,
        (Some(p), Some(f)) => {
            if (f as f64 - p as f64) <= 0.1 * p as f64 || f <= p + 1 {
                None
            } else {
                Some((p + f) / 2)
            }
        }
        (None, None) => None,
    }
}

pub(super) fn counters_step(
    cfg: &RunConfig,
    items: usize,
    sessions: usize,
    sampling_ms: f64,
    publishing_ms: f64,
) -> Result<(bool, Map<String, Value>), String> {
    let per_session = items.div_ceil(sessions.max(1));
    let seen: Arc<std::sync::Mutex<Vec<SeenCell>>> = Default::default();
    let seen2 = seen.clone();
    let plan =
        move |cfg: &RunConfig, r: &Running| -> Result<(Plan, Vec<(String, Value)>), String> {
            let url = endpoint(r);
            let sec = secure(cfg, &url)?;
            let seen = seen2.clone();
            seen.lock().unwrap().clear();
            let factory = Arc::new(move |i: usize| -> DynDriver {
                let n = per_session.min(items.saturating_sub(i * per_session));
                let mut w =
                    SubscriberWork::new(SubKind::Counters, 1, n, 0, publishing_ms, sampling_ms, 1);
                w.offset = i * per_session;
                seen.lock().unwrap().push(w.counter_seen.clone());
                let inflight = w.publish_inflight;
                Box::new(UaDriver::new(&url, Box::new(w), inflight, sec.clone()))
            });
            Ok((
                Plan::Ring {
                    conns: sessions,
                    factory,
                },
                vec![
                    ("items".into(), json!(items)),
                    ("sampling_ms".into(), json!(sampling_ms)),
                    ("publishing_ms".into(), json!(publishing_ms)),
                ],
            ))
        };
    let vars = [
        ("items", items.to_string()),
        ("sampling", format!("{sampling_ms}")),
    ];
    let mut o = run_with_guard(cfg, &vars, &plan)?;
    let seconds = o
        .get("seconds")
        .and_then(|v| v.as_f64())
        .unwrap_or(cfg.duration_s);
    // Expected samples per item over the window between the first and the
    // last publish seen: the window minus one publishing interval.
    let _ = seconds;
    let mut min_ratio = f64::INFINITY;
    let mut reported = 0usize;
    let mut expected_sum = 0.0;
    for s in seen.lock().unwrap().iter() {
        for c in s.lock().unwrap().iter() {
            match c.ratio(sampling_ms) {
                Some((ratio, expected)) => {
                    reported += 1;
                    expected_sum += expected;
                    min_ratio = min_ratio.min(ratio);
                }
                None => min_ratio = 0.0,
            }
        }
    }
    let expected = if reported > 0 {
        expected_sum / reported as f64
    } else {
        0.0
    };
    if !min_ratio.is_finite() {
        min_ratio = 0.0;
    }
    let ok = min_ratio >= 0.99
        && reported == items
        && o.get("errors").and_then(|v| v.as_u64()) == Some(0);
    o.insert(
        "expected_samples_per_item".into(),
        json!((expected * 10.0).round() / 10.0),
    );
    o.insert(
        "min_sample_ratio".into(),
        json!((min_ratio * 1000.0).round() / 1000.0),
    );
    o.insert("items_reporting".into(), json!(reported));
    o.insert("pass".into(), json!(ok));
    Ok((ok, o))
}

#[cfg(test)]
mod tests {
    use super::next_counters_step;

    /// The search doubles from its start while steps pass, bisects the bracket after the
    /// first failure, and stops within 10 % (a step that could not run counts as failed).
    #[test]
    fn the_capacity_search_doubles_then_bisects() {
        let capacity = 150_000;
        let (mut pass, mut fail, mut n) = (None, None, 1_000);
        let mut tried = Vec::new();
        while tried.len() < 40 {
            tried.push(n);
            if n <= capacity {
                pass = Some(n);
            } else {
                fail = Some(n);
            }
            match next_counters_step(pass, fail, 10_000_000) {
                Some(next) => n = next,
                None => break,
            }
        }
        assert_eq!(
            &tried[..9],
            &[1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 64_000, 128_000, 256_000]
        );
        let (p, f) = (pass.unwrap(), fail.unwrap());
        assert!(p <= capacity && f > capacity, "{p} {f}");
        assert!((f - p) as f64 <= 0.1 * p as f64, "{p} {f}: {tried:?}");
        // Nothing passes: halve down to one item, then stop.
        assert_eq!(next_counters_step(None, Some(1_000), 10_000), Some(500));
        assert_eq!(next_counters_step(None, Some(1), 10_000), None);
        // Everything passes: stop at the maximum.
        assert_eq!(next_counters_step(Some(6_000), None, 10_000), None);
    }
}
