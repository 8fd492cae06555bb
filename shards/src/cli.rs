//! The `uaring` command line.

use std::io::Write;
use std::net::IpAddr;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

use crate::config::{Distribution, FileConfig, IoBackend, Sqpoll};
use crate::ua_handler;

/// The version `uaring --version` prints: the crate version and the git revision of the
/// build (`unknown` outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (git ",
    env!("UARING_GIT_REVISION"),
    ")"
);

/// The configuration used without `--config`.
pub use crate::builder::DEFAULT_CONFIG;

/// Shown after `uaring --help` and `uaring serve --help`.
const AFTER_HELP: &str = "\
Once accepting, `serve` prints `listening on opc.tcp://HOST:PORT` on stdout.
SIGINT/SIGTERM shut down gracefully (exit 0); SIGUSR1 writes statistics.
Logs go to stderr; filter them with RUST_LOG (e.g. RUST_LOG=uaring=debug).
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
    /// Move a node's history out of and into the embedded store as CSV (docs/History.md);
    /// the server must not have the store open.
    History(HistoryArgs),
}

/// `uaring history …`.
#[derive(Clone, Debug, Args)]
pub struct HistoryArgs {
    #[command(subcommand)]
    pub command: HistoryCommand,
}

/// The `uaring history` subcommands.
#[derive(Clone, Debug, Subcommand)]
pub enum HistoryCommand {
    /// Write the values of NODE with FROM ≤ SourceTimestamp ≤ TO as CSV
    /// (source_timestamp,server_timestamp,status,type,value) to stdout or --out.
    Export {
        /// The store's directory (history.dir).
        #[arg(long, value_name = "DIR", default_value = "history")]
        dir: PathBuf,
        /// The node, as the server names it: `ns=1;s=Demo.History.Level`.
        #[arg(long, value_name = "NODEID")]
        node: String,
        /// RFC 3339 UTC (`2026-12-01T00:00:00Z`) or DateTime ticks; default the beginning.
        #[arg(long, value_name = "TIME")]
        from: Option<String>,
        /// RFC 3339 UTC or DateTime ticks; default the end.
        #[arg(long, value_name = "TIME")]
        to: Option<String>,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
    },
    /// Append the CSV rows of FILE (as export writes them) to NODE's history.
    Import {
        #[arg(long, value_name = "DIR", default_value = "history")]
        dir: PathBuf,
        #[arg(long, value_name = "NODEID")]
        node: String,
        /// The CSV file ("-" for stdin).
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
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
    /// or read (application.counters; 0..=1000000). A mode of its own: while it is on, the
    /// BenchmarkValue and BenchmarkArray variables are not built (their ids would collide).
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
    /// Kernel submission polling of the shards' rings (runtime.sqpoll): off, per-shard (a
    /// poller thread per shard) or shared (one poller for all shards). Needs io_uring.
    #[arg(long, value_name = "MODE")]
    pub sqpoll: Option<Sqpoll>,
    /// Where the SQPOLL pollers run (runtime.sqpoll_cpu): any, same (the shard's CPU), sibling
    /// (its SMT sibling) or a CPU expression like --cpus (per-shard: poller i on the i-th CPU).
    #[arg(long, value_name = "EXPR")]
    pub sqpoll_cpu: Option<String>,
    /// Where the background threads run: the model writer, the history store's threads and
    /// the method workers (runtime.background_cpus; default: not pinned; a CPU expression like
    /// --cpus, e.g. 1 or E).
    #[arg(long, value_name = "EXPR")]
    pub background_cpus: Option<String>,
    /// How long an idle SQPOLL poller polls before it sleeps, ms (runtime.sqpoll_idle_ms; 1..=10000).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub sqpoll_idle_ms: Option<u32>,
    /// Spin before sleeping: a shard with nothing to handle peeks its completion queue this
    /// long, µs, before it sleeps in the kernel (runtime.busy_poll_us; 0 = off, ..=10000).
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub busy_poll_us: Option<u32>,
    /// Fixed files: each shard registers a sparse file table of max_connections_per_shard
    /// slots and names its connections' sockets by slot in receives, sends, polls and closes
    /// (runtime.fixed_files = true). Needs io_uring.
    #[arg(long)]
    pub fixed_files: bool,
    /// Receive bundles: a multishot receive fills several provided buffers in one completion
    /// (runtime.recv_bundles = true). Needs io_uring on Linux 6.10+.
    #[arg(long)]
    pub recv_bundles: bool,
    /// Zero-copy sends: a batch of output of at least N bytes goes out with IORING_OP_SEND_ZC
    /// (runtime.zero_copy_send_min; 0 = off, ..=67108864). Needs io_uring.
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(0..=(64 << 20)))]
    pub zero_copy_send_min: Option<u32>,
    /// Registered send buffers: each shard registers N buffers (even, ..=16384) with its ring
    /// and lends each connection two as its output buffers, which its sends name by index
    /// (runtime.fixed_send_buffers; 0 = off). Locked memory. Needs io_uring.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=16_384))]
    pub fixed_send_buffers: Option<u32>,
    /// The size of each registered send buffer, bytes (runtime.fixed_send_buffer_bytes; a
    /// multiple of 4096 in 4096..=65536).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u32).range(4096..=65_536))]
    pub fixed_send_buffer_bytes: Option<u32>,
    /// NAPI busy polling: register every ring for it with this timeout, µs
    /// (runtime.napi_busy_poll_us; 0 = off, ..=10000). It acts only on sockets of a NIC
    /// receive queue with a NAPI id, not on loopback. Needs io_uring on Linux 6.9+.
    #[arg(long, value_name = "US", value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub napi_busy_poll_us: Option<u32>,
    /// NAPI busy polling preferred over interrupts (runtime.napi_prefer_busy_poll = true).
    #[arg(long)]
    pub napi_prefer_busy_poll: bool,
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
    /// Reverse Connect: dial the client listening at URL (opc.tcp://HOST:PORT), send it
    /// ReverseHello and keep one connection waiting for it, with the defaults of
    /// `[[reverse_connect]]` (docs/Configuration.md); repeatable, added to the file's entries.
    #[arg(long = "reverse-connect", value_name = "URL")]
    pub reverse_connect: Vec<String>,
    /// Gateway: mirror the OPC UA server at URL (opc.tcp://HOST:PORT) whole under
    /// Objects/HOST_PORT, security None, anonymous, the defaults of `[[gateway.servers]]`
    /// (docs/Gateway.md); repeatable, added to the file's entries.
    #[arg(long = "gateway", value_name = "URL")]
    pub gateway: Vec<String>,
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
        uaring_affinity::TopologyRequest {
            sysfs_root: self.sysfs_root.as_ref().map(PathBuf::from),
            output,
        }
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

/// `uaring cert generate --type`: `None` is RSA.
pub type CertType = Option<uaring_crypto::EccCurve>;

fn parse_cert_type(v: &str) -> Result<CertType, String> {
    if v == "rsa" {
        return Ok(None);
    }
    uaring_crypto::EccCurve::from_name(v)
        .map(Some)
        .ok_or_else(|| {
            "expected rsa, nistP256, nistP384, brainpoolP256r1 or brainpoolP384r1".into()
        })
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
        /// Certificate type: rsa (own/certs/uaring.der), nistP256, nistP384,
        /// brainpoolP256r1 or brainpoolP384r1 (the certificate of the ECC_<type> endpoints,
        /// own/certs/uaring_<type>.der).
        #[arg(long = "type", value_name = "TYPE", default_value = "rsa", value_parser = parse_cert_type)]
        cert_type: CertType,
        /// Replace an existing own certificate.
        #[arg(long)]
        force: bool,
    },
    /// Describe a certificate (default: the own certificate of `--type`).
    Show {
        /// A DER or PEM certificate file.
        file: Option<PathBuf>,
        /// Without FILE: which own certificate, rsa (default), nistP256, nistP384,
        /// brainpoolP256r1 or brainpoolP384r1.
        #[arg(long = "type", value_name = "TYPE", default_value = "rsa", value_parser = parse_cert_type, conflicts_with = "file")]
        cert_type: CertType,
    },
    /// Copy a certificate into trusted/certs (accepted within a second by a running server).
    Trust {
        /// A DER or PEM certificate file.
        file: PathBuf,
    },
}

/// Parses the arguments after `serve` (for tests and embedding).
pub fn parse_serve(args: &[String]) -> Result<ServeArgs, String> {
    let argv = ["uaring", "serve"]
        .into_iter()
        .map(String::from)
        .chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(Cli {
            command: Command::Serve(a),
        }) => Ok(a),
        Ok(_) => Err("not a serve command".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Replaces the log filter of the running process (SIGHUP, `[log] filter`).
static LOG_FILTER: std::sync::OnceLock<LogFilterSetter> = std::sync::OnceLock::new();

/// Sets the log filter from its text (an error names what does not parse).
type LogFilterSetter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

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

/// SIGHUP: rescan the trust lists now and re-read `[log] filter` and `[[gateway.servers]]`
/// from the configuration file. Returns the gateway's configuration to start when the
/// server has no gateway and the file now has servers.
pub(crate) fn reload(
    config: Option<&std::path::Path>,
    gateway: Option<&crate::gateway::Gateway>,
) -> Option<crate::gateway::GatewayConfig> {
    let mut start = None;
    crate::notify::reloading();
    uaring_crypto::pki::request_rescan();
    let mut what = vec!["trust lists rescanned".to_string()];
    if let Some(path) = config {
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| FileConfig::parse(&t))
        {
            Ok(mut f) => {
                if let Some(filter) = f.log.filter.take() {
                    set_log_filter(&filter);
                    what.push(format!("log filter {filter:?}"));
                }
                if let Some(g) = gateway {
                    match crate::gateway::config::take_config(&mut f.server)
                        .and_then(|c| g.reconfigure(c.servers.clone()).map(|()| c))
                    {
                        Ok(c) => what.push(format!("gateway: {} servers", c.servers.len())),
                        Err(e) => tracing::warn!("reload: [gateway]: {e}; servers unchanged"),
                    }
                } else {
                    match crate::gateway::config::take_config(&mut f.server)
                        .and_then(|c| c.validate().map(|()| c))
                    {
                        Ok(c) if c.is_on() => {
                            what.push(format!("gateway: {} servers", c.servers.len()));
                            start = Some(c);
                        }
                        Ok(_) => {}
                        Err(e) => tracing::warn!("reload: [gateway]: {e}; no gateway started"),
                    }
                }
            }
            Err(e) => tracing::warn!("reload: {}: {e}; log filter unchanged", path.display()),
        }
    }
    tracing::info!("reloaded (SIGHUP): {}", what.join(", "));
    crate::notify::notify("READY=1");
    start
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
        Command::Config(ConfigArgs {
            command: ConfigCommand::Check { file },
        }) => {
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
        Command::History(h) => match history_command(h.command) {
            Ok(msg) => {
                eprintln!("{msg}");
                0
            }
            Err(e) => {
                eprintln!("uaring history: {e}");
                1
            }
        },
        Command::Cert(c) => {
            let stdout = std::io::stdout();
            let stderr = std::io::stderr();
            let (out, err) = (&mut stdout.lock(), &mut stderr.lock());
            match c.command {
                CertCommand::Generate {
                    uri,
                    name,
                    hosts,
                    ips,
                    days,
                    bits,
                    cert_type,
                    force,
                } => {
                    let opts = uaring_crypto::GenerateOptions {
                        uri,
                        name,
                        hosts,
                        ips,
                        days,
                        bits,
                        ecc: cert_type,
                        force,
                    };
                    uaring_crypto::cert_generate(&opts, &c.pki, out, err)
                }
                CertCommand::Show {
                    file: Some(file), ..
                } => uaring_crypto::cert_show(Some(&file), &c.pki, out, err),
                CertCommand::Show {
                    file: None,
                    cert_type,
                } => uaring_crypto::cert_show_type(cert_type, &c.pki, out, err),
                CertCommand::Trust { file } => uaring_crypto::cert_trust(&file, &c.pki, out, err),
            }
        }
    }
}

/// `uaring serve`: a [`crate::ServerBuilder`] filled from the command line, then
/// [`crate::ServerHandle::run_until_signal`].
pub fn serve(a: ServeArgs) -> i32 {
    let mut b = crate::Server::builder();
    if let Some(path) = &a.config {
        b = b.config_file(path);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        if let Some(f) = b.log_filter() {
            set_log_filter(&f);
        }
    }
    if let Some(v) = &a.listen {
        b = b.listen(v);
    }
    if let Some(v) = &a.cpus {
        b = b.cpus(v);
    }
    if let Some(v) = a.shards {
        b = b.shards(usize::from(v));
    }
    if let Some(v) = a.io_backend {
        b = b.io_backend(v);
    }
    if let Some(v) = a.distribution {
        b = b.distribution(v);
    }
    if let Some(v) = a.ring_entries {
        b = b.ring_entries(v);
    }
    if let Some(v) = a.sqpoll {
        b = b.sqpoll(v);
    }
    if let Some(v) = &a.sqpoll_cpu {
        b = b.sqpoll_cpu(v);
    }
    if let Some(v) = &a.background_cpus {
        b = b.background_cpus(v);
    }
    if let Some(v) = a.sqpoll_idle_ms {
        b = b.sqpoll_idle_ms(v);
    }
    if let Some(v) = a.busy_poll_us {
        b = b.busy_poll_us(v);
    }
    if a.fixed_files {
        b = b.fixed_files(true);
    }
    if a.recv_bundles {
        b = b.recv_bundles(true);
    }
    if let Some(v) = a.zero_copy_send_min {
        b = b.zero_copy_send_min(v);
    }
    if let Some(v) = a.fixed_send_buffers {
        b = b.fixed_send_buffers(v);
    }
    if let Some(v) = a.fixed_send_buffer_bytes {
        b = b.fixed_send_buffer_bytes(v);
    }
    if let Some(v) = a.napi_busy_poll_us {
        b = b.napi_busy_poll_us(v);
    }
    if a.napi_prefer_busy_poll {
        b = b.napi_prefer_busy_poll(true);
    }
    if let Some(v) = &a.stats_file {
        b = b.stats_file(v.clone());
    }
    if let Some(n) = a.counters {
        b = b.set("application", "counters", toml::Value::Integer(n as i64));
    }
    if let Some(r) = a.events_per_s {
        b = b.set("events", "demo_rate_per_s", toml::Value::Float(r));
    }
    if let Some(p) = &a.pki {
        b = b.pki(p.clone());
    }
    for n in &a.nodesets {
        b = b.nodeset(n.clone());
    }
    for url in &a.reverse_connect {
        b = b.reverse_connect(crate::reverse::ReverseConnectConfig {
            url: url.clone(),
            ..Default::default()
        });
    }
    for url in &a.gateway {
        b = b.gateway(crate::gateway::ServerConfig::quick(url));
    }
    let b = b
        .accept_all_client_certs(a.accept_all_client_certs)
        .contract(a.contract)
        .demo(true);
    // A signal between `listening on` and the handlers of run_until_signal waits for them.
    crate::builder::block_handled_signals();
    let handle = match b.start() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("uaring serve: {e}");
            return 1;
        }
    };
    handle.print_listening();
    if a.contract {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "benchmark server ready ({}, {} shards)",
            ua_handler::CONTRACT_APPLICATION_URI,
            handle.shards()
        );
        let _ = out.flush();
    }
    match handle.run_until_signal() {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!("{e}");
            1
        }
    }
}

fn history_command(c: HistoryCommand) -> Result<String, String> {
    use crate::history::{tools, Store, StoreConfig};
    let open = |dir: &PathBuf| {
        if !dir.is_dir() {
            return Err(format!("{}: no history store there", dir.display()));
        }
        Store::open(StoreConfig::new(dir)).map_err(|e| format!("{}: {e}", dir.display()))
    };
    match c {
        HistoryCommand::Export {
            dir,
            node,
            from,
            to,
            out,
        } => {
            let store = open(&dir)?;
            let from = from
                .as_deref()
                .map(tools::parse_time)
                .transpose()?
                .unwrap_or(i64::MIN);
            let to = to
                .as_deref()
                .map(tools::parse_time)
                .transpose()?
                .unwrap_or(i64::MAX);
            let n = match out {
                Some(path) => {
                    let f = std::fs::File::create(&path)
                        .map_err(|e| format!("{}: {e}", path.display()))?;
                    let mut w = std::io::BufWriter::new(f);
                    let n = tools::export(&store, &node, from, to, &mut w)?;
                    w.flush().map_err(|e| e.to_string())?;
                    n
                }
                None => {
                    let stdout = std::io::stdout();
                    let mut w = std::io::BufWriter::new(stdout.lock());
                    let n = tools::export(&store, &node, from, to, &mut w)?;
                    w.flush().map_err(|e| e.to_string())?;
                    n
                }
            };
            Ok(format!("exported {n} values of {node}"))
        }
        HistoryCommand::Import { dir, node, file } => {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let store = open(&dir)?;
            let n = if file.as_os_str() == "-" {
                let stdin = std::io::stdin();
                tools::import(&store, &node, &mut stdin.lock())?
            } else {
                let f =
                    std::fs::File::open(&file).map_err(|e| format!("{}: {e}", file.display()))?;
                tools::import(&store, &node, &mut std::io::BufReader::new(f))?
            };
            Ok(format!("imported {n} values into {node}"))
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
        let a = parse_serve(&s(&[
            "--listen",
            "127.0.0.1:0",
            "--io-backend=epoll",
            "--distribution",
            "round-robin",
            "--contract",
        ]))
        .unwrap();
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
        let a = parse_serve(&s(&[
            "--sqpoll",
            "shared",
            "--sqpoll-cpu",
            "sibling",
            "--sqpoll-idle-ms",
            "5",
            "--busy-poll-us",
            "30",
        ]))
        .unwrap();
        assert_eq!(a.sqpoll, Some(Sqpoll::Shared));
        assert_eq!(a.sqpoll_cpu.as_deref(), Some("sibling"));
        assert_eq!((a.sqpoll_idle_ms, a.busy_poll_us), (Some(5), Some(30)));
        let a = parse_serve(&s(&["--background-cpus", "1"])).unwrap();
        assert_eq!(a.background_cpus.as_deref(), Some("1"));
        assert!(parse_serve(&s(&["--sqpoll", "sometimes"])).is_err());
        assert!(parse_serve(&s(&["--sqpoll-idle-ms", "0"])).is_err());
        assert!(parse_serve(&s(&["--busy-poll-us", "10001"])).is_err());
        let a = parse_serve(&s(&["--fixed-files", "--zero-copy-send-min", "4096"])).unwrap();
        assert!(a.fixed_files);
        assert_eq!(a.zero_copy_send_min, Some(4096));
        let a = parse_serve(&s(&[])).unwrap();
        assert!(!a.fixed_files && a.zero_copy_send_min.is_none());
        assert!(parse_serve(&s(&["--zero-copy-send-min", "67108865"])).is_err());
        let a = parse_serve(&s(&[
            "--fixed-send-buffers",
            "64",
            "--fixed-send-buffer-bytes",
            "8192",
            "--napi-busy-poll-us",
            "50",
            "--napi-prefer-busy-poll",
        ]))
        .unwrap();
        assert_eq!(a.fixed_send_buffers, Some(64));
        assert_eq!(a.fixed_send_buffer_bytes, Some(8192));
        assert_eq!(a.napi_busy_poll_us, Some(50));
        assert!(a.napi_prefer_busy_poll);
        assert!(parse_serve(&s(&["--fixed-send-buffers", "16386"])).is_err());
        assert!(parse_serve(&s(&["--fixed-send-buffer-bytes", "1024"])).is_err());
        assert!(parse_serve(&s(&["--napi-busy-poll-us", "10001"])).is_err());
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
