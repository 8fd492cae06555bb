//! `uaring-bench run`: start (or attach to) a server, drive load, measure one
//! window, repeat when foreign load spoiled it, print the result.

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::args::{split_words, substitute};
use crate::cli::{ClientIo, RunOpts, SendMode};
use crate::procstat::{self, ProcSample};
use crate::report::{self, Measured, RunInfo};
use crate::server::{free_port, ServerProcess, SpawnSpec};
use crate::tcpinfo;
use crate::uring::{self, Driver, Shared, ThreadStats, PHASE_DRAIN, PHASE_MEASURE, PHASE_STOP};

pub type DynDriver = Box<dyn Driver + Send>;

impl Driver for DynDriver {
    fn start(&mut self, now: u64, out: &mut Vec<u8>, ctx: &mut uring::Ctx) -> Result<(), String> {
        (**self).start(now, out, ctx)
    }
    fn on_recv(
        &mut self,
        now: u64,
        data: &[u8],
        out: &mut Vec<u8>,
        ctx: &mut uring::Ctx,
    ) -> Result<(), String> {
        (**self).on_recv(now, data, out, ctx)
    }
    fn poll(&mut self, now: u64, out: &mut Vec<u8>, ctx: &mut uring::Ctx) -> Result<(), String> {
        (**self).poll(now, out, ctx)
    }
    fn next_deadline(&self) -> Option<u64> {
        (**self).next_deadline()
    }
}

/// The body of one blocking client thread: (client index, server address).
pub type ThreadBody = Arc<dyn Fn(usize, SocketAddr, &Shared, &mut ThreadStats) + Send + Sync>;

/// Builds the load for a started server: the plan and extra result fields.
pub type MakePlan<'a> =
    &'a dyn Fn(&RunConfig, &Running) -> Result<(Plan, Vec<(String, Value)>), String>;

/// Adds to a run's result what its window (the server's output) says.
pub type AfterWindow<'a> = &'a dyn Fn(&Window, &mut Map<String, Value>) -> Result<(), String>;

/// How the load is generated.
pub enum Plan {
    /// `conns` connections on the ring loop, spread over the client threads.
    Ring {
        conns: usize,
        factory: Arc<dyn Fn(usize) -> DynDriver + Send + Sync>,
    },
    /// As `Ring`, but the last `apart` of the `conns` connections each run on a loop
    /// thread of their own (pinned to the client CPUs like the others), so that their work
    /// (`scale-churn`'s session encoding AddNodes of 1,000 nodes) never holds up the
    /// answers of the others on their thread, as it would for clients in processes of
    /// their own.
    RingApart {
        conns: usize,
        apart: usize,
        factory: Arc<dyn Fn(usize) -> DynDriver + Send + Sync>,
    },
    /// One pinned OS thread per client running a closure until the phase is
    /// STOP (used by `connect`, whose unit of work is a whole connection).
    Threads { count: usize, body: ThreadBody },
}

/// The client loop threads of a ring plan: `conns` connections of `factory`, the first
/// `conns - apart` spread over the client threads, each of the last `apart` on a thread of
/// its own; every thread pinned to a client CPU in turn.
fn spawn_ring(
    cfg: &RunConfig,
    running: &Running,
    shared: &Arc<Shared>,
    factory: &Arc<dyn Fn(usize) -> DynDriver + Send + Sync>,
    conns: usize,
    apart: usize,
) -> Result<Vec<std::thread::JoinHandle<Result<ThreadStats, String>>>, String> {
    let threads = cfg.client_threads.max(1);
    let together = conns.saturating_sub(apart);
    let mut groups: Vec<(String, Vec<usize>)> = (0..threads.min(together.max(1)))
        .map(|t| {
            let my = (0..together).filter(|i| i % threads == t).collect();
            (format!("load-{t}"), my)
        })
        .collect();
    groups.extend(
        (together..conns)
            .enumerate()
            .map(|(k, i)| (format!("load-apart-{k}"), vec![i])),
    );
    groups
        .into_iter()
        .enumerate()
        .map(|(t, (name, my))| {
            let cpu = cfg
                .client_cpus
                .get(t % cfg.client_cpus.len().max(1))
                .copied();
            // One client loop thread `name` on `cpu` with connections `my`.
            let (shared, factory, addr) = (shared.clone(), factory.clone(), running.addr);
            let (client_io, per_request) = (cfg.client_io, cfg.send == SendMode::PerRequest);
            let modes = cfg.client_modes;
            std::thread::Builder::new()
                .name(name)
                .spawn(move || -> Result<ThreadStats, String> {
                    if let Some(cpu) = cpu {
                        uaring_affinity::pin_current_thread(&[cpu]).map_err(|e| e.to_string())?;
                    }
                    if client_io == ClientIo::Shards {
                        let drivers: Vec<DynDriver> = my.iter().map(|&i| factory(i)).collect();
                        return crate::shards_loop::run_client(addr, drivers, shared, modes);
                    }
                    let mut stats = ThreadStats::default();
                    let mut conns = Vec::new();
                    for i in my {
                        match uring::connect(addr) {
                            Ok(fd) => {
                                shared.register_socket(fd);
                                conns.push((fd, factory(i)))
                            }
                            Err(e) => {
                                shared.failed.fetch_add(1, Ordering::SeqCst);
                                return Err(format!("connect {addr}: {e}"));
                            }
                        }
                    }
                    uring::run_loop(conns, &shared, &mut stats, per_request)
                        .map_err(|e| e.to_string())?;
                    Ok(stats)
                })
                .map_err(|e| e.to_string())
        })
        .collect()
}

/// Which server is measured.
#[derive(Clone, Debug)]
pub enum Target {
    /// The `uaring` binary as a child (`--cpus`, `--listen 127.0.0.1:0`).
    Uaring { bin: String, args: String },
    /// Any executable with placeholders in its arguments.
    External {
        exe: String,
        args: String,
        ready: String,
    },
    /// An already running server.
    Url { url: String, pids: Vec<i32> },
    /// The harness's own io_uring echo server.
    Echo,
}

#[derive(Clone, Debug)]
pub struct RunConfig {
    pub scenario: String,
    pub target: Target,
    pub security: String,
    pub clients: usize,
    pub inflight: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub server_cpus_expr: String,
    pub client_cpus_expr: String,
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub client_threads: usize,
    pub foreign_max_cores: f64,
    pub max_repeats: u32,
    pub json: bool,
    pub variant: Option<String>,
    pub pin_external: bool,
    pub env: Vec<(String, String)>,
    /// uaring' event loop or the harness's client ring (`uring`).
    pub client_io: ClientIo,
    /// The I/O modes of the client's loop (with `ClientIo::Shards`).
    pub client_modes: ClientModes,
    /// Batched or one send per request.
    pub send: SendMode,
    /// `--profile`: where and how to profile the server's window.
    pub profile: Option<crate::profile::ProfileSpec>,
    pub opts: RunOpts,
}

/// The I/O modes of the load client's loop (uaring's shards loop, `--client-io shards`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientModes {
    /// A SQPOLL poller per client thread.
    pub sqpoll: bool,
    pub sqpoll_cpu: Option<usize>,
    pub busy_poll_us: u32,
    pub fixed_files: bool,
    pub zero_copy_send_min: u32,
}

impl ClientModes {
    pub fn any(&self) -> bool {
        *self != ClientModes::default()
    }

    /// Applies the modes to a loop's configuration.
    pub fn apply(&self, cfg: &mut uaring::LoopConfig) {
        if self.sqpoll {
            cfg.sqpoll = uaring::Sqpoll::PerShard;
            cfg.sqpoll_cpu = self.sqpoll_cpu;
        }
        cfg.busy_poll_us = self.busy_poll_us;
        cfg.fixed_files = self.fixed_files;
        cfg.zero_copy_send_min = self.zero_copy_send_min;
    }

    /// `default`, or the modes on, as the result's `client_io_modes` names them.
    pub fn describe(&self) -> String {
        if !self.any() {
            return "default".into();
        }
        let mut parts = Vec::new();
        if self.sqpoll {
            parts.push(match self.sqpoll_cpu {
                Some(c) => format!("sqpoll per-thread (poller on CPU {c})"),
                None => "sqpoll per-thread".into(),
            });
        }
        if self.busy_poll_us > 0 {
            parts.push(format!("busy_poll_us {}", self.busy_poll_us));
        }
        if self.fixed_files {
            parts.push("fixed_files".into());
        }
        if self.zero_copy_send_min > 0 {
            parts.push(format!("zero_copy_send_min {}", self.zero_copy_send_min));
        }
        parts.join(", ")
    }
}

pub fn sibling_exe(name: &str) -> String {
    if let Ok(me) = std::env::current_exe() {
        if let Some(dir) = me.parent() {
            let p = dir.join(name);
            if p.exists() {
                return p.to_string_lossy().into_owned();
            }
        }
    }
    name.to_string()
}

/// The `plant` example (the plant contract on the uaring library): `examples/plant` beside
/// this executable, as cargo builds it (`target/<profile>/examples/plant`).
pub fn plant_example() -> Result<String, String> {
    library_example("plant", "push", "a server of the plant contract")
}

/// The library example `name` beside this executable (`target/<profile>/examples/<name>`),
/// which `scenario` drives (`what`: the servers it could be instead).
pub fn library_example(name: &str, scenario: &str, what: &str) -> Result<String, String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let p = me
        .parent()
        .map(|d| d.join("examples").join(name))
        .ok_or("no directory of this executable")?;
    if !p.exists() {
        return Err(format!(
            "{scenario}: the {name} example is missing at {} (cargo build -p uaring --example {name}); or give {what} with --server-bin, --server-exe or --url",
            p.display()
        ));
    }
    Ok(p.to_string_lossy().into_owned())
}

pub fn resolve_cpus(expr: &str) -> Result<Vec<usize>, String> {
    let topo = uaring_affinity::Topology::system().map_err(|e| format!("topology: {e}"))?;
    topo.resolve(expr)
        .map_err(|e| format!("cpu mask {expr:?}: {e}"))
}

impl RunConfig {
    pub fn from_opts(a: &RunOpts) -> Result<RunConfig, String> {
        let scenario = a.scenario.clone();
        if a.rate > 0.0
            && !matches!(
                scenario.as_str(),
                "read" | "read-batch" | "history-ingest" | "scale-churn"
            )
        {
            return Err(format!(
                "--rate: an open loop is for the read, read-batch, history-ingest and scale-churn scenarios, not {scenario}"
            ));
        }
        crate::options::check(a)?;
        let target = if let Some(url) = &a.url {
            Target::Url {
                url: url.clone(),
                pids: a.server_pid.clone(),
            }
        } else if let Some(exe) = &a.server_exe {
            Target::External {
                exe: exe.clone(),
                args: a.server_args.clone(),
                ready: a.ready.clone().unwrap_or_else(|| "listening on".into()),
            }
        } else if scenario == "push" || crate::scale::is_scale(&scenario) {
            // A server of the plant contract: --server-bin, else the `plant` example beside us.
            let exe = match &a.server_bin {
                Some(b) => b.clone(),
                None => plant_example()?,
            };
            let args = format!(
                "--listen 127.0.0.1:{{port}} --variables {{variables}} --rate {{push_rate}} {}",
                a.server_args
            );
            Target::External {
                exe,
                args,
                ready: a.ready.clone().unwrap_or_else(|| "listening on".into()),
            }
        } else if crate::history::is_history(&scenario) {
            // The history_bench example (--server-bin: another build of it).
            let exe = match &a.server_bin {
                Some(b) => b.clone(),
                None => crate::history::example()?,
            };
            Target::External {
                exe,
                args: crate::history::server_args(a)?,
                ready: a.ready.clone().unwrap_or_else(|| "listening on".into()),
            }
        } else if scenario == "echo" {
            Target::Echo
        } else {
            Target::Uaring {
                bin: a
                    .server_bin
                    .clone()
                    .unwrap_or_else(|| sibling_exe("uaring")),
                args: a.server_args.clone(),
            }
        };
        let server_cpus_expr = a.server_cpus.clone();
        let client_cpus_expr = a.client_cpus.clone();
        let server_cpus = resolve_cpus(&server_cpus_expr)?;
        let client_cpus = resolve_cpus(&client_cpus_expr)?;
        let clients = a.clients;
        let default_threads = client_cpus.len().min(clients.max(1)).max(1);
        let mut env = Vec::new();
        if let Some(e) = &a.server_env {
            for w in split_words(e)? {
                let (k, v) = w
                    .split_once('=')
                    .ok_or_else(|| format!("--server-env: {w:?} is not KEY=VALUE"))?;
                env.push((k.to_string(), v.to_string()));
            }
        }
        // Per-request sends need the harness's client ring: uaring'
        // loop batches everything a connection writes in one iteration.
        let client_io =
            match (a.client_io, a.send) {
                (Some(ClientIo::Shards), SendMode::PerRequest) => return Err(
                    "--send per-request needs --client-io harness (uaring' loop batches its sends)"
                        .into(),
                ),
                (Some(io), _) => io,
                (None, SendMode::PerRequest) => ClientIo::Harness,
                (None, SendMode::Batched) => ClientIo::Shards,
            };
        let client_modes = ClientModes {
            sqpoll: a.client_sqpoll == "per-shard",
            sqpoll_cpu: a.client_sqpoll_cpu,
            busy_poll_us: a.client_busy_poll_us,
            fixed_files: a.client_fixed_files,
            zero_copy_send_min: a.client_zero_copy_send_min,
        };
        if client_modes.any() && client_io != ClientIo::Shards {
            return Err("--client-sqpoll, --client-busy-poll-us, --client-fixed-files and --client-zero-copy-send-min are modes of uaring's loop: they need --client-io shards".into());
        }
        if a.client_sqpoll_cpu.is_some() && !client_modes.sqpoll {
            return Err("--client-sqpoll-cpu needs --client-sqpoll per-shard".into());
        }
        if a.profile {
            crate::profile::check_perf()?;
        }
        let mut cfg = RunConfig {
            profile: None,
            client_modes,
            scenario,
            target,
            security: a.security.clone(),
            clients,
            inflight: a.inflight,
            duration_s: a.duration,
            warmup_s: a.warmup,
            server_cpus_expr,
            client_cpus_expr,
            server_cpus,
            client_cpus,
            client_threads: a.client_threads.unwrap_or(default_threads),
            foreign_max_cores: a.foreign_max,
            max_repeats: a.max_repeats,
            json: a.json,
            variant: a.variant.clone(),
            pin_external: !a.no_pin,
            env,
            client_io,
            send: a.send,
            opts: a.clone(),
        };
        if a.profile {
            let unix_s = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let name = a.profile_name.clone().unwrap_or_else(|| {
                let mut n = format!("{}-{}", cfg.scenario, cfg.server_name());
                if let Some(v) = &cfg.variant {
                    n.push('-');
                    n.push_str(v);
                }
                n.push_str(&format!("-{unix_s}"));
                n.chars()
                    .map(|c| {
                        if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                            c
                        } else {
                            '_'
                        }
                    })
                    .collect()
            });
            cfg.profile = Some(crate::profile::ProfileSpec {
                dir: a
                    .profile_dir
                    .clone()
                    .unwrap_or_else(|| crate::profile::DEFAULT_DIR.into())
                    .into(),
                name,
                freq_hz: a.profile_freq,
                call_graph: a.profile_call_graph.clone(),
                top: a.profile_top,
            });
        }
        Ok(cfg)
    }

    pub fn server_name(&self) -> String {
        if let Some(n) = &self.opts.server_name {
            return n.clone();
        }
        match &self.target {
            Target::Uaring { .. } => "uaring".into(),
            Target::External { exe, args, .. } => {
                let base = |s: &str| {
                    std::path::Path::new(s)
                        .file_name()
                        .map(|f| f.to_string_lossy().into_owned())
                        .unwrap_or_default()
                };
                let first = split_words(args)
                    .ok()
                    .and_then(|w| w.into_iter().find(|x| !x.starts_with('-')))
                    .map(|x| base(&x));
                match first {
                    Some(f) if base(exe).starts_with("python") => f,
                    _ => base(exe),
                }
            }
            Target::Url { url, .. } => url.clone(),
            Target::Echo => "echo".into(),
        }
    }
}

/// A server ready to be measured.
pub struct Running {
    pub process: Option<ServerProcess>,
    /// The server process (its stats file is refreshed through it).
    pub pid: Option<i32>,
    /// Every process whose CPU time and memory count as the server's (`pid`, or all of
    /// `--server-pid`).
    pub pids: Vec<i32>,
    pub addr: SocketAddr,
    pub url: String,
    /// uaring's `--stats-file` (per-shard connection counts, refreshed on SIGUSR1).
    pub stats_file: Option<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(f) = &self.stats_file {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// Asks uaring for fresh statistics (SIGUSR1) and reads open connections
/// per shard from its stats file.
pub fn shard_connections_from_stats(pid: i32, path: &str) -> Vec<(String, u64)> {
    let before = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(pid, libc::SIGUSR1) };
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        let now = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if now.is_some() && now != before {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    parse_stats_json(&std::fs::read_to_string(path).unwrap_or_default())
}

pub fn parse_stats_json(text: &str) -> Vec<(String, u64)> {
    let Ok(v) = serde_json::from_str::<Value>(text.trim()) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(Value::Array(shards)) = v.get("shards") {
        for (i, s) in shards.iter().enumerate() {
            let idx = s.get("shard").and_then(|x| x.as_u64()).unwrap_or(i as u64);
            if let Some(open) = s.get("open").and_then(|x| x.as_u64()) {
                out.push((format!("uaring-shard-{idx}"), open));
            }
        }
    }
    out
}

fn addr_of(host: &str, port: u16) -> Result<SocketAddr, String> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("{host}:{port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}:{port}: no address"))
}

/// Starts the target. `vars` fills extra placeholders (`{items}`, `{sampling}`).
pub fn start_target(cfg: &RunConfig, vars: &[(&str, String)]) -> Result<Running, String> {
    let timeout = Duration::from_secs_f64(cfg.opts.ready_timeout);
    let spawned = |spec: SpawnSpec| -> Result<Running, String> {
        let p = ServerProcess::spawn(&spec)?;
        let addr = addr_of(&p.host, p.port)?;
        Ok(Running {
            pid: Some(p.pid),
            pids: vec![p.pid],
            url: format!("opc.tcp://{}:{}", p.host, p.port),
            addr,
            process: Some(p),
            stats_file: None,
        })
    };
    match &cfg.target {
        Target::Uaring { bin, args } => {
            static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let stats_file = std::env::temp_dir()
                .join(format!(
                    "uaring-bench-{}-{}.stats.json",
                    std::process::id(),
                    SEQ.fetch_add(1, Ordering::Relaxed)
                ))
                .to_string_lossy()
                .into_owned();
            let mut argv = vec![
                "serve".to_string(),
                "--cpus".into(),
                cfg.server_cpus_expr.clone(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--contract".into(),
                "--stats-file".into(),
                stats_file.clone(),
            ];
            argv.extend(split_words(&substitute(args, vars))?);
            let mut r = spawned(SpawnSpec {
                exe: bin.clone(),
                args: argv,
                env: cfg.env.clone(),
                ready: cfg
                    .opts
                    .ready
                    .clone()
                    .unwrap_or_else(|| "listening on".into()),
                pin: None,
                port: None,
                timeout,
                priority: cfg.opts.server_priority,
            })?;
            r.stats_file = Some(stats_file);
            Ok(r)
        }
        Target::External { exe, args, ready } => {
            let port = free_port().map_err(|e| e.to_string())?;
            let pki = cfg.opts.pki.clone();
            let mut all: Vec<(&str, String)> = vec![("port", port.to_string()), ("pki", pki)];
            all.extend(vars.iter().cloned());
            for (k, d) in [("items", "1000"), ("sampling", "10")] {
                if !all.iter().any(|(n, _)| *n == k) {
                    all.push((k, d.to_string()));
                }
            }
            let uses_port = args.contains("{port}");
            let argv = split_words(&substitute(args, &all))?;
            let pin = cfg.pin_external.then(|| cfg.server_cpus.clone());
            spawned(SpawnSpec {
                exe: exe.clone(),
                args: argv,
                env: cfg.env.clone(),
                ready: ready.clone(),
                pin,
                port: uses_port.then_some(port),
                timeout,
                priority: cfg.opts.server_priority,
            })
        }
        Target::Echo => {
            let me = std::env::current_exe()
                .map_err(|e| e.to_string())?
                .to_string_lossy()
                .into_owned();
            spawned(SpawnSpec {
                exe: me,
                args: vec![
                    "echo-server".into(),
                    "--cpus".into(),
                    cfg.server_cpus_expr.clone(),
                    "--port".into(),
                    "0".into(),
                ],
                env: vec![],
                ready: "benchmark server ready".into(),
                pin: Some(cfg.server_cpus.clone()),
                port: None,
                timeout,
                priority: cfg.opts.server_priority,
            })
        }
        Target::Url { url, pids } => {
            let rest = url.strip_prefix("opc.tcp://").unwrap_or(url);
            let hostport = rest.split('/').next().unwrap_or(rest);
            let (host, port) = hostport
                .rsplit_once(':')
                .ok_or_else(|| format!("--url {url}: no port"))?;
            let port: u16 = port.parse().map_err(|_| format!("--url {url}: bad port"))?;
            if let Some(p) = cfg.opts.server_priority {
                for &pid in pids {
                    crate::priority::apply_to_process("--server-priority", pid, p, true)?;
                }
            }
            Ok(Running {
                process: None,
                pid: pids.first().copied(),
                pids: pids.clone(),
                addr: addr_of(host.trim_matches(|c| c == '[' || c == ']'), port)?,
                url: url.clone(),
                stats_file: None,
            })
        }
    }
}

/// Parses per-shard connection counts from server output lines such as
/// `shard-0 connections 12` or `shard=1 connections=3`; the last line wins.
pub fn parse_shard_connections(lines: &[String]) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for l in lines {
        let Some(ci) = l.find("connections") else {
            continue;
        };
        let si = match l.find("shard-").or_else(|| l.find("shard=")) {
            Some(i) => i + 6,
            None => continue,
        };
        let shard: String = l[si..].chars().take_while(|c| c.is_ascii_digit()).collect();
        let num: String = l[ci + "connections".len()..]
            .trim_start_matches([' ', '=', ':'])
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if let (false, Ok(n)) = (shard.is_empty(), num.parse::<u64>()) {
            let name = format!("shard-{shard}");
            match out.iter_mut().find(|(s, _)| *s == name) {
                Some(e) => e.1 = n,
                None => out.push((name, n)),
            }
        }
    }
    out
}

/// Outcome of one measured window.
pub struct Window {
    pub shard_conns: Vec<(String, u64)>,
    /// The server's resident memory (VmRSS, every pid summed) at the window's end, kB.
    pub server_vm_rss_kb: Option<u64>,
    /// CLOCK_MONOTONIC (ns) at the switch to MEASURE and at the switch to DRAIN.
    pub start_mono_ns: u64,
    pub end_mono_ns: u64,
    pub stats: ThreadStats,
    pub measured: Measured,
    pub output: Vec<String>,
    /// `--profile`: perf, its events disabled again at the window's end.
    pub recorder: Option<crate::profile::Recorder>,
    /// What the server's and the client's threads ran at when the window started
    /// (`--server-priority`, `--client-priority`; [`crate::priority::observe`]).
    pub priorities: Vec<(&'static str, Value)>,
}

/// Drives `plan` against `running`: waits for every connection to be ready,
/// warms up, measures, stops the load. The server keeps running.
pub fn measure(cfg: &RunConfig, running: &mut Running, plan: Plan) -> Result<Window, String> {
    let shared = Arc::new(Shared::default());
    let mut handles = Vec::new();
    let expected_ready;
    match plan {
        Plan::Ring { conns, factory } => {
            expected_ready = conns;
            handles = spawn_ring(cfg, running, &shared, &factory, conns, 0)?;
        }
        Plan::RingApart {
            conns,
            apart,
            factory,
        } => {
            expected_ready = conns;
            handles = spawn_ring(cfg, running, &shared, &factory, conns, apart)?;
        }
        Plan::Threads { count, body } => {
            expected_ready = count;
            for i in 0..count {
                let cpu = cfg
                    .client_cpus
                    .get(i % cfg.client_cpus.len().max(1))
                    .copied();
                let (shared, body, addr) = (shared.clone(), body.clone(), running.addr);
                handles.push(
                    std::thread::Builder::new()
                        .name(format!("load-{i}"))
                        .spawn(move || -> Result<ThreadStats, String> {
                            if let Some(cpu) = cpu {
                                uaring_affinity::pin_current_thread(&[cpu])
                                    .map_err(|e| e.to_string())?;
                            }
                            let mut stats = ThreadStats::default();
                            body(i, addr, &shared, &mut stats);
                            Ok(stats)
                        })
                        .map_err(|e| e.to_string())?,
                );
            }
        }
    }
    let stop_all = |handles: Vec<std::thread::JoinHandle<Result<ThreadStats, String>>>,
                    shared: &Shared|
     -> Result<ThreadStats, String> {
        shared.phase.store(PHASE_STOP, Ordering::SeqCst);
        let mut total = ThreadStats::default();
        let mut err = None;
        for h in handles {
            match h.join() {
                Ok(Ok(s)) => total.merge(&s),
                Ok(Err(e)) => err = Some(e),
                Err(_) => err = Some("a load thread panicked".into()),
            }
        }
        match err {
            Some(e) if total.ops == 0 => Err(e),
            Some(e) => {
                total.first_error.get_or_insert(e);
                Ok(total)
            }
            None => Ok(total),
        }
    };
    // Wait until every connection is ready (sessions activated).
    let ready_deadline = Instant::now() + Duration::from_secs_f64(cfg.opts.ready_timeout);
    while shared.ready.load(Ordering::SeqCst) < expected_ready {
        if shared.failed.load(Ordering::SeqCst) > 0 || Instant::now() > ready_deadline {
            let ready = shared.ready.load(Ordering::SeqCst);
            let stats = stop_all(handles, &shared);
            let detail = match stats {
                Ok(s) => s.first_error.unwrap_or_default(),
                Err(e) => e,
            };
            return Err(format!(
                "only {ready} of {expected_ready} connections became ready: {detail}"
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // perf attaches now, its events disabled: the warm-up is not profiled.
    let mut recorder = match &cfg.profile {
        Some(spec) => match crate::profile::Recorder::start(spec, &running.pids) {
            Ok(r) => Some(r),
            Err(e) => {
                let _ = stop_all(handles, &shared);
                return Err(e);
            }
        },
        None => None,
    };
    std::thread::sleep(Duration::from_secs_f64(cfg.warmup_s));
    let me = std::process::id() as i32;
    let mut priorities = Vec::new();
    if let Some(p) = cfg.opts.server_priority {
        priorities.push((
            "server_priority",
            crate::priority::observe(&running.pids, p),
        ));
    }
    if let Some(p) = cfg.opts.client_priority {
        priorities.push(("client_priority", crate::priority::observe(&[me], p)));
    }
    if let Some(r) = recorder.as_mut() {
        if let Err(e) = r.enable() {
            let _ = stop_all(handles, &shared);
            return Err(e);
        }
    }
    // The window: operations count while the phase is MEASURE, and the CPU
    // samples of server, client and machine are taken right before the
    // switch to MEASURE and right after the switch to DRAIN (the load goes
    // on, uncounted, until every sample is taken; the load threads stay alive
    // so their CPU time is still readable). `window_skew_us` reports how far
    // apart the two windows' ends are.
    let sample_server = |pids: &[i32]| procstat::sample_processes(pids);
    let s0: Option<ProcSample> = sample_server(&running.pids);
    let c0 = procstat::sample_process(me).unwrap_or_default();
    let m0 = procstat::sample_machine();
    let sockets = shared.socket_list();
    let tcp0 = tcpinfo::sample(&sockets);
    let t0 = Instant::now();
    let start_mono_ns = uring::mono_ns();
    shared.phase.store(PHASE_MEASURE, Ordering::SeqCst);
    let end = t0 + Duration::from_secs_f64(cfg.duration_s);
    while Instant::now() < end {
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(100)));
        if let Some(p) = running.process.as_mut() {
            if !p.is_running() {
                let _ = stop_all(handles, &shared);
                return Err("the server exited during the measurement".into());
            }
        }
    }
    shared.phase.store(PHASE_DRAIN, Ordering::SeqCst);
    let end_mono_ns = uring::mono_ns();
    let seconds = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let s1 = sample_server(&running.pids);
    let vm_rss_kb = crate::scale::vm_rss_kb(&running.pids);
    let c1 = procstat::sample_process(me).unwrap_or_default();
    let m1 = procstat::sample_machine();
    let tcp1 = tcpinfo::sample(&sockets);
    let skew_us = t1.elapsed().as_secs_f64() * 1e6;
    if let Some(r) = recorder.as_mut() {
        if let Err(e) = r.disable() {
            let _ = stop_all(handles, &shared);
            return Err(e);
        }
    }
    // uaring's per-shard connections: outside the window (SIGUSR1 makes the
    // server write its stats file, which costs it CPU time).
    let shard_conns = match (&running.stats_file, running.pid) {
        (Some(f), Some(pid)) => shard_connections_from_stats(pid, f),
        _ => Vec::new(),
    };
    shared.phase.store(PHASE_STOP, Ordering::SeqCst);
    let mut stats = stop_all(handles, &shared)?;
    stats.extra.insert("window_skew_us", skew_us.round() as u64);
    let server = match (&s0, &s1) {
        (Some(a), Some(b)) => Some(procstat::delta(a, b)),
        _ => None,
    };
    let client = procstat::delta(&c0, &c1);
    let accounted = client.cpu_ns + server.as_ref().map(|s| s.cpu_ns).unwrap_or(0);
    let foreign = procstat::foreign_cores(m0, m1, accounted, seconds);
    let steal =
        m1.steal_ticks.saturating_sub(m0.steal_ticks) as f64 / procstat::clk_tck() as f64 / seconds;
    let rss = s1.as_ref().map(|s| s.vm_hwm_kb).unwrap_or(0);
    let output = running
        .process
        .as_ref()
        .map(|p| p.drain_output())
        .unwrap_or_default();
    Ok(Window {
        server_vm_rss_kb: vm_rss_kb,
        stats,
        measured: Measured {
            seconds,
            server,
            server_rss_kb: rss,
            client,
            foreign_cores: foreign,
            steal_cores: steal,
            tcp: tcpinfo::delta(&tcp0, &tcp1),
        },
        output,
        shard_conns,
        start_mono_ns,
        end_mono_ns,
        recorder,
        priorities,
    })
}

pub fn info_for(cfg: &RunConfig, params: Vec<(String, Value)>, output: &[String]) -> RunInfo {
    RunInfo {
        scenario: cfg.scenario.clone(),
        security: cfg.security.clone(),
        server: cfg.server_name(),
        clients: cfg.clients,
        idle_sessions: cfg.opts.idle_sessions,
        // connect: each client runs one session establishment at a time (--inflight is not used);
        // push: the Publish requests each session keeps out.
        inflight: match cfg.scenario.as_str() {
            "connect" => 1,
            "push" | "scale-items" => crate::opcua::publish_inflight(1),
            // One HistoryRead (and its continuation points) at a time per session.
            "history-read-raw" | "history-read-processed" => 1,
            _ => cfg.inflight,
        },
        // connect's handshake is sequential: every message is its own write.
        send: if cfg.scenario == "connect" {
            SendMode::PerRequest.name().into()
        } else {
            cfg.send.name().into()
        },
        client_io: match cfg.client_io {
            ClientIo::Shards => "shards".into(),
            ClientIo::Harness => "harness".into(),
        },
        client_io_modes: cfg.client_modes.describe(),
        server_cpus: match cfg.target {
            Target::Url { .. } => "as running".into(),
            Target::External { .. } if !cfg.pin_external => "unpinned".into(),
            _ => cfg.server_cpus_expr.clone(),
        },
        client_cpus: cfg.client_cpus_expr.clone(),
        client_threads: match cfg.scenario.as_str() {
            "connect" => cfg.clients,
            _ => cfg.client_threads,
        },
        variant: cfg.variant.clone(),
        params,
        shard_connections: parse_shard_connections(output),
        // push, history-ingest: the server's pushing thread(s), reported beside the whole
        // process.
        app_threads: if matches!(
            cfg.scenario.as_str(),
            "push" | "history-ingest" | "scale-nodes" | "scale-items" | "scale-churn"
        ) {
            vec![crate::push::PUSH_THREAD.to_string()]
        } else {
            Vec::new()
        },
    }
}

/// One complete run with the foreign-load guard: start the server, measure,
/// stop; repeat while foreign load is above the threshold (up to the limit).
pub fn run_with_guard(
    cfg: &RunConfig,
    vars: &[(&str, String)],
    make_plan: MakePlan,
) -> Result<Map<String, Value>, String> {
    run_with_guard_and(cfg, vars, make_plan, &|| {})
}

/// [`run_with_guard`], calling `before_stop` after each window and before the server is
/// stopped: load beside the measured clients (the handshake storm) ends while the server
/// still runs, so the server's own shutdown is not counted against it.
pub fn run_with_guard_and(
    cfg: &RunConfig,
    vars: &[(&str, String)],
    make_plan: MakePlan,
    before_stop: &dyn Fn(),
) -> Result<Map<String, Value>, String> {
    run_with_guard_then(
        cfg,
        vars,
        make_plan,
        before_stop,
        Duration::ZERO,
        &|_, _| Ok(()),
    )
}

/// [`run_with_guard_and`], then `after` adds to the result what the window's server output
/// (and its monotonic start and end) says; the output of `settle` after the window (the
/// server still running) is added to the window's, for servers that report periodically.
pub fn run_with_guard_then(
    cfg: &RunConfig,
    vars: &[(&str, String)],
    make_plan: MakePlan,
    before_stop: &dyn Fn(),
    settle: Duration,
    after: AfterWindow,
) -> Result<Map<String, Value>, String> {
    let mut discarded = 0u32;
    if let Some(p) = cfg.opts.client_priority {
        // Every thread of the harness; the load threads, created later, inherit it.
        crate::priority::apply_to_process("--client-priority", std::process::id() as i32, p, true)?;
    }
    loop {
        let mut running = start_target(cfg, vars)?;
        let idle = crate::idle::IdleSessions::open(cfg, &running)?;
        let (plan, params) = make_plan(cfg, &running)?;
        let mut window = measure(cfg, &mut running, plan);
        let idle = idle.map(|i| i.close()).transpose();
        before_stop();
        if let (Ok(w), Some(p)) = (window.as_mut(), running.process.as_ref()) {
            if !settle.is_zero() {
                std::thread::sleep(settle);
                w.output.extend(p.drain_output());
            }
        }
        // perf stops (and writes its file) while the server still runs.
        let recorded = match window.as_mut().map(|w| w.recorder.take()) {
            Ok(Some(r)) => Some(r.finish()),
            _ => None,
        };
        if let Some(p) = running.process.as_mut() {
            p.stop();
        }
        let window = window?;
        let recorded = recorded.transpose()?;
        idle?;
        let mut info = info_for(cfg, params, &window.output);
        if !window.shard_conns.is_empty() {
            info.shard_connections = window.shard_conns.clone();
        }
        let mut o = report::build(&info, &window.stats, &window.measured, discarded);
        for (k, v) in &window.priorities {
            o.insert((*k).to_string(), v.clone());
        }
        after(&window, &mut o)?;
        if discard_for_foreign_load(cfg, window.measured.foreign_cores, &mut discarded) {
            continue;
        }
        mark_foreign_load(cfg, window.measured.foreign_cores, &mut o);
        if let Some(rec) = recorded {
            let variant = cfg
                .variant
                .as_deref()
                .map(|v| format!(" · {v}"))
                .unwrap_or_default();
            let title = format!(
                "{} · {}{variant} · {}",
                cfg.server_name(),
                cfg.scenario,
                rec.spec.name
            );
            o.insert("profile".into(), crate::profile::analyze(&rec, &title)?);
        }
        report::add_host(&mut o);
        return Ok(o);
    }
}

/// Whether a run is discarded for the foreign load beside it: past `--foreign-max` while
/// repeats are left (`--max-repeats`); counted in `discarded` and said on stderr.
pub fn discard_for_foreign_load(cfg: &RunConfig, foreign_cores: f64, discarded: &mut u32) -> bool {
    if foreign_cores <= cfg.foreign_max_cores || *discarded >= cfg.max_repeats {
        return false;
    }
    *discarded += 1;
    eprintln!(
        "uaring-bench: foreign load {foreign_cores:.3} cores > {:.3}: run discarded ({discarded}/{})",
        cfg.foreign_max_cores, cfg.max_repeats
    );
    true
}

/// Marks a kept run whose foreign load was past `--foreign-max` (no repeats were left).
pub fn mark_foreign_load(cfg: &RunConfig, foreign_cores: f64, o: &mut Map<String, Value>) {
    if foreign_cores > cfg.foreign_max_cores {
        o.insert("foreign_load_exceeded".into(), json!(true));
    }
}

pub fn print_result(cfg: &RunConfig, o: &Map<String, Value>) {
    if cfg.json {
        println!("{}", Value::Object(o.clone()));
    } else {
        print!("{}", report::readable(o));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_file() {
        let text = r#"{"backend":"uring","shards":[{"shard":0,"cpu":0,"open":3},{"shard":1,"cpu":1,"open":1}],"total":{"open":4}}"#;
        assert_eq!(
            parse_stats_json(text),
            vec![
                ("uaring-shard-0".to_string(), 3),
                ("uaring-shard-1".to_string(), 1)
            ]
        );
        assert!(parse_stats_json("").is_empty());
    }

    #[test]
    fn shard_lines() {
        let lines = vec![
            "shard-0 connections 3".to_string(),
            "noise".to_string(),
            "stats: shard=1 connections=2 cpu 0".to_string(),
            "shard-0 connections: 4".to_string(),
        ];
        assert_eq!(
            parse_shard_connections(&lines),
            vec![("shard-0".to_string(), 4), ("shard-1".to_string(), 2)]
        );
    }
}
