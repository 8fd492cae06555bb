//! The `uaring` command line.

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Distribution, FileConfig, IoBackend};
use crate::runtime::{self, RuntimeOptions};
use crate::server;
use crate::stats;

/// The configuration used without `--config`.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

pub const USAGE: &str = "\
uaring — an OPC UA server for Linux, thread-per-core on io_uring

usage:
  uaring serve [options]          run the server
  uaring topology [options]       show the CPU topology (uaring topology --help)
  uaring hash-password            hash a password (one line on stdin) into an argon2id PHC string
  uaring cert [--pki DIR] generate|show|trust …
                                  manage the PKI directory (default ./pki; see docs/Security.md)
  uaring --help | --version

serve options:
  --listen HOST:PORT        address to listen on (default 0.0.0.0:4840; port 0 picks a free port)
  --cpus LIST|MASK|EXPR     CPUs to run shards on, one shard per CPU (default: all allowed CPUs;
                            e.g. 0-3,8  0xF  P:nosmt  node0; see `uaring topology --help`)
  --shards N                number of shards (default: one per selected CPU)
  --config FILE             TOML configuration (docs/Configuration.md); without it an embedded
                            default is used
  --contract                benchmark contract mode: ApplicationUri urn:o6:benchmark:server,
                            prints `benchmark server ready` once listening
  --counters N              sampling-capacity contract: N UInt64 counters ns=1;i=1..N that
                            increment on every sample or read (application.counters)
  --events-per-s R          rate of the Demo events (events.demo_rate_per_s; 0 = off; needs the
                            Demo folder, which --contract turns off unless the file sets
                            application.demo_namespace)
  --io-backend B            auto (default: io_uring, else epoll), uring, or epoll
  --distribution P          connection distribution: reuseport (default), round-robin,
                            least-connections
  --ring-entries N          io_uring submission queue entries per shard (power of two)
  --stats-file PATH         write per-shard connection statistics as JSON to PATH every
                            runtime.stats_interval_ms and on SIGUSR1
  --pki DIR                 PKI directory (default ./pki, or security.pki_dir): own certificate
                            (generated on first start), trusted/issuers/rejected certificates
  --accept-all-client-certs accept every client certificate (benchmarks only; on with --contract;
                            logs a warning)
  -h, --help                show this help

Once accepting, `serve` prints `listening on opc.tcp://HOST:PORT` on stdout.
SIGINT/SIGTERM shut down gracefully (exit 0); SIGUSR1 writes statistics.
Logs go to stderr; filter them with RUST_LOG (e.g. RUST_LOG=uaring_shards=debug).
";

/// Options of `uaring serve`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeArgs {
    pub listen: Option<String>,
    pub cpus: Option<String>,
    pub shards: Option<usize>,
    pub config: Option<PathBuf>,
    pub contract: bool,
    pub counters: Option<u32>,
    pub events_per_s: Option<f64>,
    pub io_backend: Option<IoBackend>,
    pub distribution: Option<Distribution>,
    pub ring_entries: Option<u32>,
    pub stats_file: Option<PathBuf>,
    pub pki: Option<PathBuf>,
    pub accept_all_client_certs: bool,
    pub help: bool,
}

/// Parses the arguments after `serve`.
pub fn parse_serve(args: &[String]) -> Result<ServeArgs, String> {
    let mut a = ServeArgs::default();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg, None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            args.get(i).cloned().ok_or_else(|| format!("{name} needs a value"))
        };
        match name {
            "-h" | "--help" => a.help = true,
            "--contract" => a.contract = true,
            "--counters" => {
                let v = value()?;
                let n: u32 = v.parse().map_err(|_| format!("--counters: not a number: {v:?}"))?;
                if n > 1_000_000 {
                    return Err("--counters must be in 0..=1000000".into());
                }
                a.counters = Some(n);
            }
            "--events-per-s" => {
                let v = value()?;
                let r: f64 = v.parse().map_err(|_| format!("--events-per-s: not a number: {v:?}"))?;
                if !(r.is_finite() && (0.0..=1_000_000.0).contains(&r)) {
                    return Err("--events-per-s must be in 0..=1000000".into());
                }
                a.events_per_s = Some(r);
            }
            "--listen" => a.listen = Some(value()?),
            "--cpus" => a.cpus = Some(value()?),
            "--shards" => {
                let v = value()?;
                let n: usize = v.parse().map_err(|_| format!("--shards: not a number: {v:?}"))?;
                if n == 0 || n > 256 {
                    return Err("--shards must be in 1..=256".into());
                }
                a.shards = Some(n);
            }
            "--config" => a.config = Some(PathBuf::from(value()?)),
            "--io-backend" => a.io_backend = Some(value()?.parse()?),
            "--distribution" => a.distribution = Some(value()?.parse()?),
            "--ring-entries" => {
                let v = value()?;
                a.ring_entries = Some(v.parse().map_err(|_| format!("--ring-entries: not a number: {v:?}"))?);
            }
            "--stats-file" => a.stats_file = Some(PathBuf::from(value()?)),
            "--pki" => a.pki = Some(PathBuf::from(value()?)),
            "--accept-all-client-certs" => a.accept_all_client_certs = true,
            _ => return Err(format!("unknown argument {arg:?}")),
        }
        i += 1;
    }
    Ok(a)
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init();
}

/// `uaring …`: returns the process exit code.
pub fn main(args: &[String]) -> i32 {
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return 2;
    };
    match cmd.as_str() {
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            0
        }
        "-V" | "--version" => {
            println!("uaring {}", env!("CARGO_PKG_VERSION"));
            0
        }
        "serve" => match parse_serve(&args[1..]) {
            Ok(a) if a.help => {
                print!("{USAGE}");
                0
            }
            Ok(a) => {
                init_logging();
                serve(a)
            }
            Err(e) => {
                eprintln!("uaring serve: {e}\n\n{USAGE}");
                2
            }
        },
        "topology" => uaring_affinity::topology_command(&args[1..]),
        "hash-password" => uaring_crypto::hash_password_command(),
        "cert" => {
            // `uaring cert [--pki DIR] <command> …`; the PKI directory defaults to ./pki.
            let mut rest = &args[1..];
            let mut pki = PathBuf::from("pki");
            if let Some(first) = rest.first() {
                if let Some(dir) = first.strip_prefix("--pki=") {
                    pki = PathBuf::from(dir);
                    rest = &rest[1..];
                } else if first == "--pki" {
                    match rest.get(1) {
                        Some(dir) => {
                            pki = PathBuf::from(dir);
                            rest = &rest[2..];
                        }
                        None => {
                            eprintln!("uaring cert: --pki needs a directory");
                            return 2;
                        }
                    }
                }
            }
            uaring_crypto::cert_command(rest, &pki)
        }
        other => {
            eprintln!("uaring: unknown command {other:?}\n\n{USAGE}");
            2
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
    let rt = &mut file.runtime;
    if let Some(v) = &a.listen {
        rt.listen = v.clone();
    }
    if let Some(v) = &a.cpus {
        rt.cpus = v.clone();
    }
    if let Some(v) = a.shards {
        rt.shards = v;
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
    let setup = match server::build(&file.server, a.contract) {
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
    let running = match runtime::start(opts, move |i| {
        let handler = server::make_handler(&make_setup, i)?;
        let provider = security.shard_provider()?;
        Ok(server::UaHandler::new(handler.host.with_security(provider)))
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
    let local = running.local_addr;
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on opc.tcp://{local}");
        if a.contract {
            let _ = writeln!(out, "benchmark server ready ({}, {shards} shards)", server::CONTRACT_APPLICATION_URI);
        }
        let _ = out.flush();
    }
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
            Some(sig) => {
                tracing::info!(signal = sig, "shutting down");
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
    }

    #[test]
    fn embedded_default_parses() {
        FileConfig::parse(DEFAULT_CONFIG).unwrap();
    }
}
