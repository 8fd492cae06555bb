//! Reconnect storms (`--storm*`, beside any scenario) and the `sub` scenario's runner.

use super::*;

/// A connect storm beside a measured scenario (`--storm N`): N threads on the client CPUs
/// open a SignAndEncrypt channel, create and activate a session (anonymous or `--storm-user`)
/// and close it, back to back, for as long as the run lasts.
#[derive(Clone)]
pub(super) struct Storm {
    pub(super) threads: usize,
    pub(super) user: Option<(String, String)>,
    pub(super) state: Arc<std::sync::Mutex<StormState>>,
}

#[derive(Default)]
pub(super) struct StormState {
    pub(super) stop: Arc<std::sync::atomic::AtomicBool>,
    pub(super) sessions: Arc<AtomicU64>,
    pub(super) errors: Arc<AtomicU64>,
    pub(super) last_error: Arc<std::sync::Mutex<Option<String>>>,
    pub(super) started: Option<std::time::Instant>,
    /// How long the last storm ran (kept once it stopped: stopping again returns it).
    pub(super) seconds: f64,
    pub(super) handles: Vec<std::thread::JoinHandle<()>>,
}

impl StormState {
    /// Stops and joins the threads; (sessions, errors, seconds) of this storm, the same again
    /// when it has stopped already.
    pub(super) fn halt(&mut self) -> (u64, u64, f64) {
        self.stop.store(true, Ordering::SeqCst);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
        if let Some(t) = self.started.take() {
            self.seconds = t.elapsed().as_secs_f64();
        }
        (
            self.sessions.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.seconds,
        )
    }
}

impl Storm {
    pub(super) fn new(cfg: &RunConfig) -> Result<Storm, String> {
        let user = match &cfg.opts.storm_user {
            None => None,
            Some(s) => {
                let (n, p) = s.split_once(':').ok_or("--storm-user: name:password")?;
                Some((n.to_string(), p.to_string()))
            }
        };
        Ok(Storm {
            threads: cfg.opts.storm,
            user,
            state: Arc::default(),
        })
    }

    /// Starts the threads against this run's server (a repeated run stops the old ones first).
    pub(super) fn start(
        &self,
        cfg: &RunConfig,
        r: &Running,
        url: &str,
    ) -> Result<Vec<(String, Value)>, String> {
        if self.threads == 0 {
            return Ok(Vec::new());
        }
        let mut st = self.state.lock().map_err(|_| "storm state poisoned")?;
        st.halt();
        st.stop = Arc::default();
        st.sessions = Arc::default();
        st.errors = Arc::default();
        st.seconds = 0.0;
        let sec = security::prepare(url, "sign-encrypt", &cfg.opts.security_policy)?;
        let addr = r.addr;
        for _ in 0..self.threads {
            let (stop, sessions, errors, last) = (
                st.stop.clone(),
                st.sessions.clone(),
                st.errors.clone(),
                st.last_error.clone(),
            );
            let (sec, url, user, cpus) = (
                sec.clone(),
                url.to_string(),
                self.user.clone(),
                cfg.client_cpus.clone(),
            );
            st.handles.push(std::thread::spawn(move || {
                let _ = uaring_affinity::pin_current_thread(&cpus);
                // Below the measured client threads (nice 0) on the shared client CPUs, so the
                // storm loads the server rather than the measuring client.
                // SAFETY: setpriority on the calling thread (a Linux thread id is a pid here).
                unsafe {
                    libc::setpriority(
                        libc::PRIO_PROCESS,
                        libc::syscall(libc::SYS_gettid) as libc::id_t,
                        STORM_NICE,
                    )
                };
                while !stop.load(Ordering::Relaxed) {
                    match connect_once_as(addr, &url, sec.clone(), user.clone()) {
                        Ok(_) => sessions.fetch_add(1, Ordering::Relaxed),
                        Err(e)
                            if e.contains("Connection refused")
                                || e.contains("BadServerHalted") =>
                        {
                            // The run ended and its server is gone (or going) before the storm was told.
                            break;
                        }
                        Err(e) => {
                            if !stop.load(Ordering::Relaxed) {
                                if let Ok(mut l) = last.lock() {
                                    *l = Some(e);
                                }
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            std::thread::sleep(Duration::from_millis(10));
                            0
                        }
                    };
                }
            }));
        }
        st.started = Some(std::time::Instant::now());
        Ok(vec![
            ("storm_threads".to_string(), json!(self.threads)),
            ("storm_user".to_string(), json!(self.user.is_some())),
            (
                "storm_security_policy".to_string(),
                json!(cfg.opts.security_policy),
            ),
        ])
    }

    pub(super) fn last_error(&self) -> Option<String> {
        self.state
            .lock()
            .ok()
            .and_then(|st| st.last_error.lock().ok().and_then(|l| l.clone()))
    }

    pub(super) fn stop(&self) -> (u64, u64, f64) {
        match self.state.lock() {
            Ok(mut st) => st.halt(),
            Err(_) => (0, 0, 0.0),
        }
    }
}

/// `sub`: sessions × subscriptions × items plus writer sessions; ops are
/// delivered notifications, latency is write→notify. `events`: sessions ×
/// subscriptions × event items on the Server object; ops are events.
/// Most items in one CreateMonitoredItems request of the subscribing workloads.
pub(super) const ITEMS_PER_CALL: usize = 10_000;

pub(super) fn run_sub(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    let events = cfg.scenario == "events";
    let o = &cfg.opts;
    let sessions: usize = o.sessions.unwrap_or(cfg.clients.max(1));
    let subs: usize = o.subscriptions;
    let items: usize = o.items.unwrap_or(if events { 1 } else { 100 });
    let writers: usize = if events { 0 } else { o.writers };
    let write_rate: f64 = o.write_rate;
    let publishing_ms: f64 = o.publishing_ms.unwrap_or(100.0);
    let sampling_ms: f64 = o.sampling_ms;
    let writes = Arc::new(AtomicU64::new(0));
    let w2 = writes.clone();
    let plan = move |cfg: &RunConfig,
                     r: &Running|
          -> Result<(Plan, Vec<(String, Value)>), String> {
        let url = endpoint(r);
        let sec = secure(cfg, &url)?;
        let writes = w2.clone();
        let factory = Arc::new(move |i: usize| -> DynDriver {
            if i < sessions {
                let kind = if events {
                    SubKind::Events
                } else {
                    SubKind::Changes
                };
                let w =
                    SubscriberWork::new(kind, subs, items, i * 7, publishing_ms, sampling_ms, 1);
                let inflight = w.publish_inflight;
                Box::new(UaDriver::new(&url, Box::new(w), inflight, sec.clone()))
            } else {
                let period_ns = (1e9 / write_rate.max(0.001)) as u64;
                let w = WriterWork {
                    period_ns,
                    next_at: 0,
                    cursor: (i * 13) as u32,
                    writes: writes.clone(),
                };
                Box::new(UaDriver::new(&url, Box::new(w), 64, sec.clone()))
            }
        });
        let params = vec![
            ("sessions".to_string(), json!(sessions)),
            ("subscriptions".to_string(), json!(subs)),
            ("items".to_string(), json!(items)),
            ("writers".to_string(), json!(writers)),
            ("write_rate".to_string(), json!(write_rate)),
            ("publishing_ms".to_string(), json!(publishing_ms)),
            ("sampling_ms".to_string(), json!(sampling_ms)),
        ];
        Ok((
            Plan::Ring {
                conns: sessions + writers,
                factory,
            },
            params,
        ))
    };
    let mut o = run_with_guard(cfg, &[], &plan)?;
    if !events {
        // Each write changes one variable; every monitored item on it should
        // report it once (queue 1: a faster writer than the sampling loses
        // intermediate values, which is correct behaviour, not loss).
        let total_items = (sessions * subs * items) as f64;
        let per_node = total_items / NODE_COUNT as f64;
        let w = o.get("writes").and_then(|v| v.as_f64()).unwrap_or(0.0);
        let expected = (w * per_node).round();
        let delivered = o
            .get("notifications")
            .and_then(|v| v.as_f64())
            .unwrap_or(0.0);
        o.insert("expected_notifications".into(), json!(expected));
        o.insert(
            "delivered_ratio".into(),
            json!(if expected > 0.0 {
                (delivered / expected * 1000.0).round() / 1000.0
            } else {
                0.0
            }),
        );
    }
    let _ = writes;
    Ok(o)
}
