//! Starting and stopping a fleet of shards: listeners, threads, pinning,
//! backend choice and the locked-memory budget.

use std::fmt;
use std::net::{SocketAddr, TcpListener};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::config::{Distribution, IoBackend, RuntimeConfig, Sqpoll};
use crate::event_loop::{EventLoop, LoopError};
use crate::fleet::Fleet;
use crate::handler::Handler;
use crate::loop_core::LoopConfig;
use crate::memlock;
use crate::net;

/// What to start.
#[derive(Clone, Debug)]
pub struct RuntimeOptions {
    pub listen: SocketAddr,
    /// CPUs to pin to; shard `i` runs on `cpus[i % cpus.len()]`. Empty: no pinning.
    pub cpus: Vec<usize>,
    /// Number of shards (≥ 1).
    pub shards: usize,
    pub backend: IoBackend,
    pub distribution: Distribution,
    /// `runtime.ring_entries` as configured (0 = automatic).
    pub ring_entries: u32,
    pub loop_cfg: LoopConfig,
    pub listen_backlog: u32,
    pub handoff_queue: usize,
    pub move_queue: usize,
    /// The poller CPUs of `loop_cfg.sqpoll` ([`crate::sqpoll::poller_cpus`]): one per shard
    /// with per-shard, one with shared. Empty: no poller is bound to a CPU.
    pub sqpoll_cpus: Vec<Option<usize>>,
}

impl RuntimeOptions {
    pub fn from_config(r: &RuntimeConfig, listen: SocketAddr, cpus: Vec<usize>) -> RuntimeOptions {
        let shards = if r.shards == 0 {
            cpus.len().clamp(1, crate::ua_handler::MAX_SHARDS)
        } else {
            r.shards
        };
        RuntimeOptions {
            listen,
            cpus,
            shards,
            backend: r.io_backend,
            distribution: r.distribution,
            ring_entries: r.ring_entries,
            loop_cfg: {
                let mut c = LoopConfig::from(r);
                (c.max_shard_buffered_bytes, c.max_pre_session_buffered_bytes) =
                    r.shard_budgets(shards);
                c
            },
            listen_backlog: r.listen_backlog,
            handoff_queue: r.handoff_queue,
            move_queue: r.move_queue,
            sqpoll_cpus: Vec::new(),
        }
    }
}

/// Why the runtime did not start.
#[derive(Debug)]
pub enum StartError {
    /// The configured rings do not fit RLIMIT_MEMLOCK (with `--io-backend uring`).
    Memlock(memlock::MemlockError),
    /// Binding the listener(s) failed.
    Listen(SocketAddr, std::io::Error),
    /// A shard could not build its loop or its handler.
    Shard(usize, String),
    /// An I/O mode that was asked for (`runtime.sqpoll`, `runtime.busy_poll_us`) cannot run.
    IoMode(String),
    Other(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Memlock(e) => write!(f, "{e}"),
            StartError::Listen(a, e) => write!(f, "cannot listen on {a}: {e}"),
            StartError::Shard(i, e) => write!(f, "shard {i}: {e}"),
            StartError::IoMode(e) => f.write_str(e),
            StartError::Other(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for StartError {}

/// A started fleet.
pub struct Running {
    /// The address actually bound (the real port when 0 was asked for).
    pub local_addr: SocketAddr,
    pub fleet: Arc<Fleet>,
    /// The backend the shards run on.
    pub backend: IoBackend,
    /// One line describing the io_uring features (or the epoll backend).
    pub features: String,
    /// Locked memory the rings are budgeted for, bytes (0 on epoll).
    pub memlock_bytes: u64,
    pub ring_entries: u32,
    threads: Vec<JoinHandle<Result<(), String>>>,
}

impl Running {
    /// Graceful stop of every shard (returns at once; see [`Running::join`]).
    pub fn stop(&self) {
        self.fleet.stop_all();
    }

    /// Waits for every shard thread. Errors of shards are collected.
    pub fn join(self) -> Result<(), String> {
        let mut errors = Vec::new();
        for (i, t) in self.threads.into_iter().enumerate() {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(format!("shard {i}: {e}")),
                Err(_) => errors.push(format!("shard {i} panicked")),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

fn bind_listeners(
    opts: &RuntimeOptions,
) -> Result<(SocketAddr, Vec<Option<TcpListener>>), StartError> {
    let n = opts.shards;
    let reuseport = opts.distribution == Distribution::Reuseport && n > 1;
    let first = net::listen(&opts.listen, reuseport, opts.listen_backlog)
        .map_err(|e| StartError::Listen(opts.listen, e))?;
    let local = first
        .local_addr()
        .map_err(|e| StartError::Listen(opts.listen, e))?;
    let mut out = vec![Some(first)];
    for _ in 1..n {
        if reuseport {
            let l = net::listen(&local, true, opts.listen_backlog)
                .map_err(|e| StartError::Listen(local, e))?;
            out.push(Some(l));
        } else {
            out.push(None);
        }
    }
    Ok((local, out))
}

/// Decides the backend and ring size before any shard starts: one clear log
/// line when io_uring is not used.
fn choose_backend(opts: &mut RuntimeOptions) -> Result<(IoBackend, u64), StartError> {
    let modes = opts.loop_cfg.needs_uring();
    if opts.backend == IoBackend::Epoll {
        if modes {
            return Err(StartError::IoMode(
                "runtime.sqpoll, runtime.busy_poll_us, runtime.fixed_files, \
                 runtime.zero_copy_send_min, runtime.fixed_send_buffers, runtime.napi_busy_poll_us \
                 and runtime.recv_bundles need the io_uring backend, not epoll: \
                 turn them off or use --io-backend uring"
                    .into(),
            ));
        }
        return Ok((IoBackend::Epoll, 0));
    }
    if modes {
        // An io_uring mode that was asked for is never traded for epoll silently.
        opts.backend = IoBackend::Uring;
    }
    let pbuf = if opts.loop_cfg.multishot {
        opts.loop_cfg.recv_buffers
    } else {
        0
    };
    let limit = memlock::memlock_limit_bytes();
    let fixed_send = (
        opts.loop_cfg.fixed_send_buffers,
        opts.loop_cfg.fixed_send_buffer_bytes,
    );
    match memlock::size_shards(opts.shards, opts.ring_entries, pbuf, fixed_send, limit) {
        Ok(s) => opts.loop_cfg.ring_entries = s.ring_entries,
        Err(e) if opts.backend == IoBackend::Uring => return Err(StartError::Memlock(e)),
        Err(e) => {
            tracing::warn!("using the epoll backend: {e}");
            return Ok((IoBackend::Epoll, 0));
        }
    }
    let budget = memlock::ShardBudget::new(opts.loop_cfg.ring_entries, pbuf)
        .with_fixed_send(fixed_send.0, fixed_send.1);
    let needed = budget.total_bytes() * opts.shards as u64;
    // Probe once so a kernel or sandbox without io_uring is reported once, not per shard;
    // with SQPOLL, every distinct poller placement too, before anything listens: a CPU the
    // kernel does not accept stops the start here with what to change, not half-way
    // through. On a thread of its own that ends with the probes, so whatever the kernel ties
    // to the creating thread goes with it; then the start waits until the probe's pollers
    // have left the process (`await_probe_pollers`).
    let entries = opts.loop_cfg.ring_entries;
    let sqpoll_probes: Vec<crate::uring::RingOptions> = if opts.loop_cfg.sqpoll.is_on() {
        let mut cpus: Vec<Option<usize>> = if opts.sqpoll_cpus.is_empty() {
            vec![None]
        } else {
            opts.sqpoll_cpus.clone()
        };
        cpus.sort_unstable();
        cpus.dedup();
        cpus.into_iter()
            .map(|cpu| crate::uring::RingOptions {
                sqpoll: Some(crate::uring::SqpollSetup {
                    idle_ms: opts.loop_cfg.sqpoll_idle_ms,
                    cpu: cpu.map(|c| c as u32),
                    attach_fd: None,
                }),
                taskrun_flag: false,
                ..crate::uring::RingOptions::default()
            })
            .collect()
    } else {
        Vec::new()
    };
    // Fixed files and zero-copy sends: a ring with the file table every shard registers
    // (RLIMIT_NOFILE bounds it) and the SEND_ZC opcode, tried before anything listens.
    // Registered send buffers: one shard's, registered on the probe ring (the kernel pins
    // them; the budget above holds all shards'); NAPI busy polling registered on it.
    let mode_probe = (opts.loop_cfg.fixed_files
        || opts.loop_cfg.zero_copy_send_min > 0
        || opts.loop_cfg.recv_bundles
        || opts.loop_cfg.fixed_send_buffers > 0
        || opts.loop_cfg.napi_busy_poll_us > 0)
        .then(|| crate::uring::RingOptions {
            fixed_files: if opts.loop_cfg.fixed_files {
                opts.loop_cfg.max_connections as u32
            } else {
                0
            },
            send_zc: opts.loop_cfg.zero_copy_send_min > 0,
            recv_bundle: opts.loop_cfg.recv_bundles,
            fixed_send_buffers: opts.loop_cfg.fixed_send_buffers,
            fixed_send_buffer_bytes: opts.loop_cfg.fixed_send_buffer_bytes,
            napi: (opts.loop_cfg.napi_busy_poll_us > 0).then_some(crate::uring::NapiSetup {
                busy_poll_us: opts.loop_cfg.napi_busy_poll_us,
                prefer_busy_poll: opts.loop_cfg.napi_prefer_busy_poll,
            }),
            ..crate::uring::RingOptions::default()
        });
    let probe_cfg = opts.loop_cfg.clone();
    let probed = std::thread::Builder::new()
        .name(PROBE_THREAD.into())
        .spawn(
            move || -> Result<Result<i32, crate::uring::SetupError>, crate::uring::SetupError> {
                // SAFETY: gettid has no preconditions.
                let tid = unsafe { libc::gettid() };
                let (ring, _) = crate::uring::setup_ring(entries)?;
                drop(ring);
                if let Some(o) = &mode_probe {
                    match crate::uring::setup_ring_with(entries, o) {
                        Ok((mut ring, mut f)) => {
                            let bufs = crate::uring::uring_loop::register_send_bufs(
                                &mut ring, &mut f, &probe_cfg,
                            );
                            if matches!(bufs, Ok(Some(_))) {
                                // Given back now, not when the kernel gets round to tearing
                                // the ring down: the shards' own are charged next, and
                                // RLIMIT_MEMLOCK is counted per user.
                                let _ = ring.submitter().unregister_buffers();
                            }
                            drop(ring);
                            if let Err(e) = bufs {
                                return Ok(Err(e));
                            }
                        }
                        Err(e) => return Ok(Err(e)),
                    }
                }
                for o in &sqpoll_probes {
                    match crate::uring::setup_ring_with(entries, o) {
                        Ok((ring, _)) => drop(ring),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                Ok(Ok(tid))
            },
        )
        .map_err(|e| StartError::Other(format!("cannot spawn the io_uring probe thread: {e}")))?
        .join()
        .map_err(|_| StartError::Other("the io_uring probe thread panicked".into()))?;
    let probe = match probed {
        Ok(Err(e)) if !matches!(e, crate::uring::SetupError::Sqpoll(..)) => {
            return Err(StartError::IoMode(e.to_string()));
        }
        Ok(Err(e)) => {
            // Out of locked memory: say how much the rings are budgeted for against the limit.
            let memlock = match (&e, limit) {
                (crate::uring::SetupError::Sqpoll(io, _), Some(l))
                    if io.raw_os_error() == Some(libc::ENOMEM) =>
                {
                    format!(
                        " (the rings of {} shards are budgeted at {} KiB of locked memory and RLIMIT_MEMLOCK is {} KiB, \
                         but the kernel wanted more than the limit had left: raise it with `ulimit -l` / LimitMEMLOCK= \
                         to at least {} KiB, or set runtime.sqpoll = \"off\")",
                        opts.shards,
                        needed.div_ceil(1024),
                        l / 1024,
                        (2 * needed).div_ceil(1024).max(l / 1024 + 1)
                    )
                }
                _ => String::new(),
            };
            return Err(StartError::IoMode(format!(
                "runtime.sqpoll = \"{}\": {e}{memlock}",
                opts.loop_cfg.sqpoll
            )));
        }
        Ok(Ok(tid)) => {
            if opts.loop_cfg.sqpoll.is_on() {
                await_probe_pollers(tid);
            }
            Ok(())
        }
        Err(e) => Err(e),
    };
    match probe {
        Ok(()) => Ok((IoBackend::Uring, needed)),
        Err(e) if opts.backend == IoBackend::Uring => {
            if e.is_enomem() {
                let m = memlock::MemlockError {
                    needed_bytes: needed,
                    limit_bytes: limit,
                    shards: opts.shards,
                    per_shard: budget,
                };
                Err(StartError::Memlock(m))
            } else {
                Err(StartError::Other(e.to_string()))
            }
        }
        Err(e) => {
            tracing::warn!("io_uring unavailable ({e}); using the epoll backend");
            Ok((IoBackend::Epoll, 0))
        }
    }
}

/// The name of the thread that probes io_uring at start.
const PROBE_THREAD: &str = "uaring-probe";

/// Waits (at most 2 s) until the probe thread and its SQPOLL poller threads have left the
/// process: the kernel tears a closed ring down in the background, and a server that says it
/// listens should have exactly the pollers its mode names. A poller starts with its creator's
/// name (`uaring-probe`) and renames itself `iou-sqp-<tid>` once it runs, so both names count.
fn await_probe_pollers(tid: i32) {
    let name = format!("iou-sqp-{tid}");
    let give_up = std::time::Instant::now() + Duration::from_secs(2);
    loop {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        let lingering = dir.flatten().any(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .is_ok_and(|c| c.trim() == name || c.trim() == PROBE_THREAD)
        });
        if !lingering {
            return;
        }
        if std::time::Instant::now() >= give_up {
            tracing::debug!("the SQPOLL probe's poller threads are still exiting");
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Starts `opts.shards` pinned shard threads, each running `make(shard_index)`'s
/// handler, and returns once every shard is accepting.
pub fn start<H, F>(mut opts: RuntimeOptions, make: F) -> Result<Running, StartError>
where
    H: Handler + 'static,
    F: Fn(usize) -> Result<H, String> + Send + Sync + 'static,
{
    opts.shards = opts.shards.max(1);
    let (backend, memlock_bytes) = choose_backend(&mut opts)?;
    let (local_addr, listeners) = bind_listeners(&opts)?;
    let cpus_per_shard: Vec<Option<usize>> = (0..opts.shards)
        .map(|i| {
            if opts.cpus.is_empty() {
                None
            } else {
                Some(opts.cpus[i % opts.cpus.len()])
            }
        })
        .collect();
    let (fleet, wirings) = Fleet::new(
        &cpus_per_shard,
        opts.distribution,
        opts.handoff_queue,
        opts.move_queue,
    )
    .map_err(|e| StartError::Other(format!("eventfd: {e}")))?;
    let make = Arc::new(make);
    let (ready_tx, ready_rx) = mpsc::channel::<(usize, Result<String, String>)>();
    let mut threads = Vec::with_capacity(opts.shards);
    let shared_poller = opts.loop_cfg.sqpoll == Sqpoll::Shared && backend == IoBackend::Uring;
    // Shared SQPOLL: the other shards attach to shard 0's ring, so it is set up first.
    let mut first_ready = None;
    for (wiring, listener) in wirings.into_iter().zip(listeners) {
        let i = wiring.index;
        let cpu = cpus_per_shard[i];
        let make = make.clone();
        let tx = ready_tx.clone();
        let mut cfg = opts.loop_cfg.clone();
        cfg.sqpoll_cpu = match opts.loop_cfg.sqpoll {
            Sqpoll::Off => None,
            Sqpoll::PerShard => opts.sqpoll_cpus.get(i).copied().flatten(),
            Sqpoll::Shared => opts.sqpoll_cpus.first().copied().flatten(),
        };
        if shared_poller && i == 1 {
            match ready_rx.recv_timeout(Duration::from_secs(30)) {
                Ok(r @ (_, Ok(_))) => first_ready = Some(r),
                Ok(r) => {
                    first_ready = Some(r);
                    break;
                }
                Err(_) => break,
            }
        }
        let spawned = std::thread::Builder::new().name(format!("uaring-shard-{i}")).spawn(move || {
            if let Some(cpu) = cpu {
                if let Err(e) = uaring_affinity::pin_current_thread(&[cpu]) {
                    tracing::warn!(shard = i, cpu, "cannot pin shard: {e}");
                }
            }
            let handler = match make(i) {
                Ok(h) => h,
                Err(e) => {
                    let _ = tx.send((i, Err(e.clone())));
                    return Err(e);
                }
            };
            let mut lp = match EventLoop::new(backend, handler, wiring, cfg) {
                Ok(l) => l,
                Err(e) => {
                    let msg = match &e {
                        LoopError::Uring(s) if s.is_enomem() => format!("{e}: RLIMIT_MEMLOCK too low; lower runtime.ring_entries/runtime.recv_buffers, raise `ulimit -l` / LimitMEMLOCK=, or use --io-backend epoll"),
                        _ => e.to_string(),
                    };
                    let _ = tx.send((i, Err(msg.clone())));
                    return Err(msg);
                }
            };
            if let Some(l) = listener {
                if let Err(e) = lp.add_listener(l) {
                    let _ = tx.send((i, Err(e.to_string())));
                    return Err(e.to_string());
                }
            }
            let desc = match lp.features() {
                Some(f) => format!("io_uring: {}", f.describe()),
                None => "epoll".to_string(),
            };
            let _ = tx.send((i, Ok(desc)));
            drop(tx);
            lp.run().map_err(|e| e.to_string())
        });
        match spawned {
            Ok(t) => threads.push(t),
            Err(e) => {
                fleet.stop_all();
                return Err(StartError::Other(format!("cannot spawn shard thread: {e}")));
            }
        }
    }
    drop(ready_tx);
    let mut features = String::new();
    let mut failure = None;
    for _ in 0..threads.len() {
        let next = match first_ready.take() {
            Some(r) => Ok(r),
            None => ready_rx.recv_timeout(Duration::from_secs(30)),
        };
        match next {
            Ok((i, Ok(desc))) => {
                if i == 0 {
                    features = desc;
                }
            }
            Ok((i, Err(e))) => {
                failure = Some(StartError::Shard(i, e));
                break;
            }
            Err(_) => {
                failure = Some(StartError::Other("shards did not start within 30 s".into()));
                break;
            }
        }
    }
    let running = Running {
        local_addr,
        fleet,
        backend,
        features,
        memlock_bytes,
        ring_entries: opts.loop_cfg.ring_entries,
        threads,
    };
    if let Some(f) = failure {
        running.stop();
        let _ = running.join();
        return Err(f);
    }
    Ok(running)
}
