//! The `uaring` command line.

use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Distribution, FileConfig, IoBackend};
use crate::runtime::{self, RuntimeOptions};
use crate::server;
use crate::stats;

/// The version `uaring --version` prints: the crate version and the git revision of the
/// build (`unknown` outside a git checkout).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (git ", env!("UARING_GIT_REVISION"), ")");

/// The configuration used without `--config`.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// Shown after `uaring --help` and `uaring serve --help`.
const AFTER_HELP: &str = "\
Once accepting, `serve` prints `listening on opc.tcp://HOST:PORT` on stdout.
SIGINT/SIGTERM shut down gracefully (exit 0); SIGUSR1 writes statistics.
Logs go to stderr; filter them with RUST_LOG (e.g. RUST_LOG=uaring_shards=debug).
Exit codes: 0 success, 1 run-time or configuration error, 2 bad command line.";

/// The `uaring` command line.
#[derive(Debug, Parser)]
#[command(
    name = "uaring",
    version = VERSION,
    about = "uaring — an OPC UA server for Linux, thread-per-core on io_uring",
    after_help = AFTER_HELP,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands of `uaring`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server.
    #[command(after_help = AFTER_HELP)]
    Serve(ServeArgs),
    /// Show the CPU topology (classes P/E/E2, SMT siblings, NUMA nodes, caches) or resolve a CPU
    /// expression.
    Topology(TopologyArgs),
    /// Hash a password (one line on stdin) into an argon2id PHC string for [[users]].
    HashPassword,
    /// Manage the PKI directory (docs/Security.md).
    Cert(CertArgs),
    /// Check a configuration file.
    Config(ConfigArgs),
}

/// `uaring config …`.
#[derive(Clone, Debug, Args)]
pub struct ConfigArgs {
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// The `uaring config` subcommands.
#[derive(Clone, Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate FILE as `uaring serve --config FILE` would (every section, the [[users]], the
    /// [[nodesets]] loaded into an address space) without listening, and print the effective
    /// configuration (every key with its value, defaults filled in) as TOML. Exit 0 when valid,
    /// 1 with the error otherwise.
    Check {
        /// The configuration file.
        file: PathBuf,
    },
}

fn parse_counters(v: &str) -> Result<u32, String> {
    let n: u32 = v.parse().map_err(|_| format!("not a number: {v:?}"))?;
    if n > 1_000_000 {
        return Err("must be in 0..=1000000".into());
    }
    Ok(n)
}

fn parse_events_per_s(v: &str) -> Result<f64, String> {
    let r: f64 = v.parse().map_err(|_| format!("not a number: {v:?}"))?;
    if !(r.is_finite() && (0.0..=1_000_000.0).contains(&r)) {
        return Err("must be in 0..=1000000".into());
    }
    Ok(r)
}

/// Options of `uaring serve`. Each one overrides the key of the configuration file named in its help.
#[derive(Clone, Debug, Default, PartialEq, Args)]
pub struct ServeArgs {
    /// Address to listen on (runtime.listen; default 0.0.0.0:4840; port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT")]
    pub listen: Option<String>,
    /// CPUs to run shards on, one shard per CPU (runtime.cpus; default: all allowed CPUs; e.g.
    /// 0-3,8  0xF  P:nosmt  node0; see `uaring topology --help`).
    #[arg(long, value_name = "EXPR")]
    pub cpus: Option<String>,
    /// Number of shards (runtime.shards; default: one per selected CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=256))]
    pub shards: Option<u16>,
    /// TOML configuration (docs/Configuration.md); without it an embedded default is used.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Benchmark contract mode: ApplicationUri urn:o6:benchmark:server, 100 Int32 variables
    /// ns=1;i=1001..1100; prints `benchmark server ready` once listening.
    #[arg(long)]
    pub contract: bool,
    /// Sampling-capacity contract: N UInt64 counters ns=1;i=1..N that increment on every sample
    /// or read (application.counters; 0..=1000000).
    #[arg(long, value_name = "N", value_parser = parse_counters)]
    pub counters: Option<u32>,
    /// Rate of the Demo events per second (events.demo_rate_per_s; 0 = off; needs the Demo
    /// folder, which --contract turns off unless the file sets application.demo_namespace).
    #[arg(long, value_name = "R", value_parser = parse_events_per_s)]
    pub events_per_s: Option<f64>,
    /// I/O backend (runtime.io_backend): auto (io_uring, else epoll), uring or epoll.
    #[arg(long, value_name = "B")]
    pub io_backend: Option<IoBackend>,
    /// Connection distribution among shards (runtime.distribution): reuseport, round-robin or
    /// least-connections.
    #[arg(long, value_name = "P")]
    pub distribution: Option<Distribution>,
    /// io_uring submission queue entries per shard, a power of two (runtime.ring_entries).
    #[arg(long, value_name = "N")]
    pub ring_entries: Option<u32>,
    /// Write per-shard connection statistics as JSON to PATH every runtime.stats_interval_ms and
    /// on SIGUSR1 (runtime.stats_file).
    #[arg(long, value_name = "PATH")]
    pub stats_file: Option<PathBuf>,
    /// PKI directory (security.pki_dir; default ./pki): own certificate (generated on first
    /// start), trusted/issuers/rejected certificates.
    #[arg(long, value_name = "DIR")]
    pub pki: Option<PathBuf>,
    /// Accept every client certificate (benchmarks only; on with --contract; logs a warning).
    #[arg(long)]
    pub accept_all_client_certs: bool,
    /// A companion model (NodeSet2 XML) to load at start, after the file's [[nodesets]];
    /// repeatable.
    #[arg(long = "nodeset", value_name = "FILE")]
    pub nodesets: Vec<PathBuf>,
}

/// Options of `uaring topology`.
#[derive(Clone, Debug, Args)]
#[command(after_help = "\
EXPR: all, P, E, E2, P:nosmt, node0, 0xFF, 0-3,8, P&node0 (docs/Placement.md).
Exit codes: 0 success, 1 the topology could not be read or the expression was rejected,
2 bad command line.")]
pub struct TopologyArgs {
    /// Read DIR instead of /sys (all its online CPUs count as allowed; without it, the process's
    /// affinity applies).
    #[arg(long, value_name = "DIR", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub sysfs_root: Option<String>,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "resolve")]
    pub json: bool,
    /// Print the CPUs EXPR selects, ascending, comma-separated.
    #[arg(long, value_name = "EXPR")]
    pub resolve: Option<String>,
}

impl TopologyArgs {
    fn request(&self) -> uaring_affinity::TopologyRequest {
        use uaring_affinity::TopologyOutput;
        let output = match (&self.resolve, self.json) {
            (Some(e), _) => TopologyOutput::Resolve(e.clone()),
            (None, true) => TopologyOutput::Json,
            (None, false) => TopologyOutput::Table,
        };
        uaring_affinity::TopologyRequest { sysfs_root: self.sysfs_root.as_ref().map(PathBuf::from), output }
    }
}

/// `uaring cert [--pki DIR] …`.
#[derive(Clone, Debug, Args)]
pub struct CertArgs {
    /// PKI directory.
    #[arg(long, value_name = "DIR", default_value = "pki")]
    pub pki: PathBuf,
    /// What to do with it.
    #[command(subcommand)]
    pub command: CertCommand,
}

fn parse_key_bits(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(b) if uaring_crypto::cli::KEY_BITS_ALLOWED.contains(&b) => Ok(b),
        _ => Err("expected 2048, 3072 or 4096".into()),
    }
}

/// The `uaring cert` subcommands.
#[derive(Clone, Debug, Subcommand)]
pub enum CertCommand {
    /// Generate the application instance certificate and key (self-signed) in own/.
    Generate {
        /// ApplicationUri (default urn:<host>:uaring).
        #[arg(long, value_name = "URI")]
        uri: Option<String>,
        /// Common name (default uaring@<host>).
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
        /// DNS name in subjectAltName; repeatable (default the host name).
        #[arg(long = "host", value_name = "DNS")]
        hosts: Vec<String>,
        /// IP address in subjectAltName; repeatable (default 127.0.0.1).
        #[arg(long = "ip", value_name = "ADDR")]
        ips: Vec<IpAddr>,
        /// Validity in days.
        #[arg(long, value_name = "N", default_value_t = 5 * 365,
              value_parser = clap::value_parser!(u32).range(1..=uaring_crypto::cli::VALIDITY_DAYS_MAX as i64))]
        days: u32,
        /// RSA key size: 2048, 3072 or 4096.
        #[arg(long, value_name = "N", default_value_t = 2048, value_parser = parse_key_bits)]
        bits: usize,
        /// Replace an existing own certificate.
        #[arg(long)]
        force: bool,
    },
    /// Describe a certificate (default: the own certificate).
    Show {
        /// A DER or PEM certificate file.
        file: Option<PathBuf>,
    },
    /// Copy a certificate into trusted/certs (accepted within a second by a running server).
    Trust {
        /// A DER or PEM certificate file.
        file: PathBuf,
    },
}

/// Parses the arguments after `serve` (for tests and embedding).
pub fn parse_serve(args: &[String]) -> Result<ServeArgs, String> {
    let argv = ["uaring", "serve"].into_iter().map(String::from).chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli { command: Command::Serve(a) }) => Ok(a),
        Ok(_) => Err("not a serve command".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Replaces the log filter of the running process (SIGHUP, `[log] filter`).
static LOG_FILTER: std::sync::OnceLock<Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>> = std::sync::OnceLock::new();

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .with_filter_reloading();
    let handle = builder.reload_handle();
    if builder.try_init().is_ok() {
        let _ = LOG_FILTER.set(Box::new(move |f: &str| {
            let filter = EnvFilter::try_new(f).map_err(|e| e.to_string())?;
            handle.reload(filter).map_err(|e| e.to_string())
        }));
    }
}

fn set_log_filter(f: &str) {
    if let Some(set) = LOG_FILTER.get() {
        match set(f) {
            Ok(()) => tracing::info!("log filter {f:?}"),
            Err(e) => tracing::warn!("log filter {f:?} not applied: {e}"),
        }
    }
}

/// SIGHUP: rescan the trust lists now and re-read `[log] filter` from the configuration file.
fn reload(config: Option<&std::path::Path>) {
    crate::notify::reloading();
    uaring_crypto::pki::request_rescan();
    let mut what = vec!["trust lists rescanned".to_string()];
    if let Some(path) = config {
        match std::fs::read_to_string(path).map_err(|e| e.to_string()).and_then(|t| FileConfig::parse(&t)) {
            Ok(f) => {
                if let Some(filter) = f.log.filter {
                    set_log_filter(&filter);
                    what.push(format!("log filter {filter:?}"));
                }
            }
            Err(e) => tracing::warn!("reload: {}: {e}; log filter unchanged", path.display()),
        }
    }
    tracing::info!("reloaded (SIGHUP): {}", what.join(", "));
    crate::notify::notify("READY=1");
}

/// `uaring …` (the arguments after the program name): returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let argv = std::iter::once("uaring".to_string()).chain(args.iter().cloned());
    let cli = match Cli::try_parse_from(argv) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version are "errors" that print to stdout and exit 0.
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
    };
    match cli.command {
        Command::Serve(a) => {
            init_logging();
            serve(a)
        }
        Command::Topology(t) => uaring_affinity::topology_command(&t.request()),
        Command::HashPassword => uaring_crypto::hash_password_command(),
        Command::Config(ConfigArgs { command: ConfigCommand::Check { file } }) => {
            let stdout = std::io::stdout();
            match crate::check::check_file(&file) {
                Ok(text) => {
                    let _ = stdout.lock().write_all(text.as_bytes());
                    0
                }
                Err(e) => {
                    eprintln!("uaring config check: {}: {e}", file.display());
                    1
                }
            }
        }
        Command::Cert(c) => {
            let stdout = std::io::stdout();
            let stderr = std::io::stderr();
            let (out, err) = (&mut stdout.lock(), &mut stderr.lock());
            match c.command {
                CertCommand::Generate { uri, name, hosts, ips, days, bits, force } => {
                    let opts = uaring_crypto::GenerateOptions { uri, name, hosts, ips, days, bits, force };
                    uaring_crypto::cert_generate(&opts, &c.pki, out, err)
                }
                CertCommand::Show { file } => uaring_crypto::cert_show(file.as_deref(), &c.pki, out, err),
                CertCommand::Trust { file } => uaring_crypto::cert_trust(&file, &c.pki, out, err),
            }
        }
    }
}

fn resolve_listen(s: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.to_socket_addrs()
        .map_err(|e| format!("--listen {s:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("--listen {s:?}: no address"))
}

fn resolve_cpus(expr: &str) -> Result<(Vec<usize>, String), String> {
    match uaring_affinity::Topology::system() {
        Ok(topo) => {
            let cpus = topo.resolve(expr).map_err(|e| format!("--cpus {expr:?}: {e}"))?;
            if cpus.is_empty() {
                return Err(format!("--cpus {expr:?} selects no CPU"));
            }
            let desc = topo.describe(&cpus);
            Ok((cpus, desc))
        }
        Err(e) => {
            // No sysfs topology (containers): fall back to the affinity mask.
            tracing::warn!("cannot read the CPU topology ({e}); using the allowed CPUs");
            let cpus = uaring_affinity::allowed_cpus().map_err(|e| format!("sched_getaffinity: {e}"))?;
            let desc = format!("{cpus:?}");
            Ok((cpus, desc))
        }
    }
}

/// Blocks the signals the main thread waits for, so shard threads (which
/// inherit the mask) never receive them.
fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set; pthread_sigmask on the calling thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Waits up to `timeout` for one of `set`; returns the signal or `None`.
fn wait_signal(set: &libc::sigset_t, timeout: Duration) -> Option<i32> {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: valid set and timespec; siginfo may be null.
    let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &ts) };
    if sig > 0 {
        Some(sig)
    } else {
        None
    }
}

/// `uaring serve`.
pub fn serve(a: ServeArgs) -> i32 {
    let text = match &a.config {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("uaring serve: cannot read {}: {e}", path.display());
                return 1;
            }
        },
        None => DEFAULT_CONFIG.to_string(),
    };
    let mut file = match FileConfig::parse(&text) {
        Ok(c) => c,
        Err(e) => {
            let name = a.config.as_ref().map_or("the embedded default configuration".to_string(), |p| p.display().to_string());
            eprintln!("uaring serve: {name}: {e}");
            return 1;
        }
    };
    if std::env::var_os("RUST_LOG").is_none() {
        if let Some(f) = &file.log.filter {
            set_log_filter(f);
        }
    }
    let rt = &mut file.runtime;
    if let Some(v) = &a.listen {
        rt.listen = v.clone();
    }
    if let Some(v) = &a.cpus {
        rt.cpus = v.clone();
    }
    if let Some(v) = a.shards {
        rt.shards = usize::from(v);
    }
    if let Some(v) = a.io_backend {
        rt.io_backend = v;
    }
    if let Some(v) = a.distribution {
        rt.distribution = v;
    }
    if let Some(v) = a.ring_entries {
        rt.ring_entries = v;
    }
    if let Some(v) = &a.stats_file {
        rt.stats_file = Some(v.clone());
    }
    if let Err(e) = rt.validate() {
        eprintln!("uaring serve: {e}");
        return 1;
    }
    let listen = match resolve_listen(&rt.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("uaring serve: {e}");
            return 1;
        }
    };
    let (cpus, cpu_desc) = match resolve_cpus(&rt.cpus) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uaring serve: {e}");
            return 1;
        }
    };
    let (sec_config, users) = match crate::security::take_config(&mut file.server) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uaring serve: configuration: {e}");
            return 1;
        }
    };
    let handshake = match crate::handshake::take_config(&mut file.server) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uaring serve: configuration: {e}");
            return 1;
        }
    };
    if let Some(n) = a.counters {
        let app = file.server.entry("application").or_insert_with(|| toml::Value::Table(Default::default()));
        if let Some(t) = app.as_table_mut() {
            t.insert("counters".into(), toml::Value::Integer(n as i64));
        }
    }
    if let Some(r) = a.events_per_s {
        let ev = file.server.entry("events").or_insert_with(|| toml::Value::Table(Default::default()));
        if let Some(t) = ev.as_table_mut() {
            t.insert("demo_rate_per_s".into(), toml::Value::Float(r));
        }
    }
    let setup = match server::build_with_nodesets(&file.server, a.contract, &a.nodesets) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("uaring serve: configuration: {e}");
            return 1;
        }
    };
    let sec_args = crate::security::SecurityArgs {
        pki: a.pki.clone(),
        accept_all_client_certs: a.accept_all_client_certs,
        contract: a.contract,
    };
    let app = &setup.shared.config.application;
    let security = match crate::security::build(
        sec_config,
        &users,
        &sec_args,
        app.effective_application_uri(),
        &app.application_name,
        Some(listen.ip()),
    ) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            eprintln!("uaring serve: security: {e}");
            return 1;
        }
    };
    tracing::info!("endpoints: {}", security.describe());
    let opts = RuntimeOptions::from_config(&file.runtime, listen, cpus);
    let shards = opts.shards;
    let sigset = block_signals();
    let make_setup = setup.clone();
    let helper_cpus = if handshake.cpus.is_empty() {
        Vec::new()
    } else {
        match resolve_cpus(&handshake.cpus) {
            Ok((c, _)) => c,
            Err(e) => {
                eprintln!("uaring serve: handshake.cpus: {e}");
                return 1;
            }
        }
    };
    let pool = match crate::handshake::HandshakePool::start(&handshake, &helper_cpus) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("uaring serve: {e}");
            return 1;
        }
    };
    match &pool {
        Some(p) => tracing::info!(threads = p.threads(), queue_depth = handshake.queue_depth, "handshake pool"),
        None => tracing::info!("handshake work runs inline on the shards (handshake.threads = 0)"),
    }
    let running = match runtime::start(opts, move |i| {
        let handler = server::make_handler(&make_setup, i, shards)?;
        let provider = security.shard_provider()?;
        let client = pool.as_ref().map(|p| p.client());
        let host = handler.host.with_security(provider).with_handshake_offload(client.is_some());
        Ok(server::UaHandler::new(host).with_pool(client))
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("uaring serve: {e}");
            return 1;
        }
    };
    tracing::info!(
        shards,
        distribution = %file.runtime.distribution,
        "shards on CPUs {cpu_desc}"
    );
    match running.backend {
        IoBackend::Uring => tracing::info!(
            ring_entries = running.ring_entries,
            memlock_kib = running.memlock_bytes.div_ceil(1024),
            "io backend {}",
            running.features
        ),
        _ => tracing::info!("io backend epoll"),
    }
    if file.runtime.batch_wait_us > 0 && running.backend == IoBackend::Uring {
        tracing::info!(
            batch_wait_us = file.runtime.batch_wait_us,
            batch_completions = file.runtime.batch_completions,
            "batched waiting on (one min-timeout wait with MIN_TIMEOUT, else a second bounded wait; needs EXT_ARG)"
        );
    }
    if let Some(addr) = &file.metrics.listen {
        let sources = crate::metrics::Sources {
            shared: setup.shared.clone(),
            fleet: running.fleet.clone(),
            backend: running.backend.to_string(),
        };
        match addr.parse().map_err(|e| format!("{e}")).and_then(|a| crate::metrics::start(a, sources).map_err(|e| e.to_string())) {
            Ok(bound) => tracing::info!("metrics endpoint http://{bound}/metrics"),
            Err(e) => {
                eprintln!("uaring serve: metrics.listen = {addr:?}: {e}");
                running.fleet.stop_all();
                return 1;
            }
        }
    }
    let local = running.local_addr;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on opc.tcp://{local}");
        if a.contract {
            let _ = writeln!(out, "benchmark server ready ({}, {shards} shards)", server::CONTRACT_APPLICATION_URI);
        }
        let _ = out.flush();
    }
    crate::notify::notify("READY=1");
    let backend_name = running.backend.to_string();
    let listen_name = local.to_string();
    let stats_file = file.runtime.stats_file.clone();
    let write_stats = |running: &runtime::Running| {
        if let Some(path) = &stats_file {
            let json = stats::render_json(&running.fleet, &backend_name, &listen_name);
            if let Err(e) = stats::write_atomically(path, &json) {
                tracing::warn!("cannot write {}: {e}", path.display());
            }
        }
    };
    write_stats(&running);
    let interval = Duration::from_millis(file.runtime.stats_interval_ms);
    loop {
        match wait_signal(&sigset, interval) {
            Some(libc::SIGUSR1) => {
                write_stats(&running);
                tracing::info!("stats {}", stats::render_json(&running.fleet, &backend_name, &listen_name));
            }
            Some(libc::SIGHUP) => reload(a.config.as_deref()),
            Some(sig) => {
                tracing::info!(signal = sig, "shutting down");
                crate::notify::notify("STOPPING=1");
                break;
            }
            None => write_stats(&running),
        }
    }
    running.stop();
    write_stats(&running);
    let fleet = running.fleet.clone();
    let result = running.join();
    if let Some(path) = &stats_file {
        let _ = stats::write_atomically(path, &stats::render_json(&fleet, &backend_name, &listen_name));
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn parses_serve_flags() {
        let a = parse_serve(&s(&["--listen", "127.0.0.1:0", "--io-backend=epoll", "--distribution", "round-robin", "--contract"])).unwrap();
        assert_eq!(a.listen.as_deref(), Some("127.0.0.1:0"));
        assert_eq!(a.io_backend, Some(IoBackend::Epoll));
        assert_eq!(a.distribution, Some(Distribution::RoundRobin));
        assert!(a.contract);
        assert!(parse_serve(&s(&["--bogus"])).is_err());
        assert!(parse_serve(&s(&["--listen"])).is_err());
        assert!(parse_serve(&s(&["--distribution", "random"])).is_err());
        assert!(parse_serve(&s(&["--shards", "0"])).is_err());
        assert!(parse_serve(&s(&["--counters", "1000001"])).is_err());
        assert!(parse_serve(&s(&["--events-per-s", "NaN"])).is_err());
        assert_eq!(parse_serve(&s(&["--shards", "2"])).unwrap().shards, Some(2));
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn embedded_default_parses() {
        FileConfig::parse(DEFAULT_CONFIG).unwrap();
    }
}
