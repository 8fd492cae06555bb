//! The command line of `uaring-bench`, on clap: every option is declared
//! with its type, so an unknown option or a malformed value is an error
//! with a message (`--inflght 7`, `--clients many`), in every command.
//!
//! The last occurrence of an option wins (`args_override_self`): a sweep
//! appends a variant's arguments to a scenario's, and the variant's win.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

use crate::scenarios::SCENARIOS;

#[derive(Parser, Debug)]
#[command(
    name = "uaring-bench",
    about = "The native benchmark harness for uaring and any other OPC UA server",
    args_override_self = true,
    disable_version_flag = true,
    after_help = "scenarios: read, read-batch (--nodes K), write, browse, sub, counters, events, connect, echo,\n\
                  push (--variables N --push-rate HZ: a server of the plant contract pushes the values),\n\
                  history-ingest, history-read-raw, history-read-processed (the history_bench example),\n\
                  scale-nodes (--variables N --service read|browse), scale-items (--sessions S --items I --create-items C),\n\
                  scale-churn (--variables N --churn-nodes M --churn-batch B --churn-rate R --churn-user NAME:PASSWORD)\n\
                  docs/Benchmarks.md describes every scenario, request shape and table."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// One measured run against one server.
    Run(RunOpts),
    /// The same runs under several variants and scenarios, interleaved over rounds;
    /// ends with the summary table.
    Sweep(SweepOpts),
    /// Raw JSON lines → Markdown tables, CSV and SVG plots.
    Summarize(SummarizeOpts),
    /// The echo floor: `uaring::EchoHandler` on uaring's shard runtime.
    EchoServer(EchoServerOpts),
    /// Server/client placement variants derived from the CPU topology (a variant file for sweep).
    Placements(PlacementsOpts),
    /// A long run of churning sessions (connect, subscribe, read, write, disconnect),
    /// sampling the server's RSS, open fds and errors every second.
    Soak(SoakOpts),
}

#[derive(clap::Args, Clone, Debug)]
pub struct SoakOpts {
    /// How long: `30m`, `90s`, `1h`, or seconds.
    #[arg(long, default_value = "30m")]
    pub duration: String,
    /// Left out of the drift (allocator pools and caches fill): `5m`, `60s`, … (at most half the run).
    #[arg(long, default_value = "5m")]
    pub warmup: String,
    /// Clients, each churning sessions one after another.
    #[arg(long, default_value_t = 8, value_parser = positive)]
    pub clients: usize,
    /// Publish / Read / Write requests per session before it closes.
    #[arg(long, default_value_t = 30, value_parser = positive)]
    pub ops: usize,
    /// Output prefix: PREFIX.csv (one sample a second), PREFIX.json, PREFIX.md, PREFIX.svg.
    #[arg(long, default_value = "soak")]
    pub out: String,
    /// The uaring binary (default: `uaring` beside this executable).
    #[arg(long)]
    pub server_bin: Option<String>,
    /// Extra arguments of `uaring serve`; may start with `-`.
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub server_args: String,
    /// An already running server (with --server-pid, whose RSS and fds are sampled).
    #[arg(long)]
    pub url: Option<String>,
    #[arg(long)]
    pub server_pid: Option<i32>,
}

#[derive(clap::Args, Clone, Debug)]
pub struct PlacementsOpts {
    /// Read this directory instead of /sys (all its online CPUs count as allowed).
    #[arg(long, value_name = "DIR")]
    pub sysfs_root: Option<String>,
    /// Write the variant file here (default: stdout).
    #[arg(long, value_name = "FILE")]
    pub out: Option<String>,
    /// Propose SQPOLL poller placements by core class instead (one shard on the fastest
    /// class; the poller on the same CPU, its SMT sibling, a slower class's core, a
    /// dedicated core, another NUMA node), as variant lines for the io-modes scenarios.
    #[arg(long)]
    pub pollers: bool,
    /// With --pollers: the arguments of `uaring serve` in every line, before the poller's.
    #[arg(
        long,
        default_value = "--io-backend uring --shards 1",
        allow_hyphen_values = true,
        requires = "pollers"
    )]
    pub server_args: String,
}

/// How the load client hands requests to the kernel.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SendMode {
    /// Everything a connection writes in one loop iteration leaves in one send
    /// (uaring' loop in the client role).
    #[default]
    Batched,
    /// Each request leaves in its own send(2) call, as open62541, UA-.NET and
    /// UaExpert clients do.
    PerRequest,
}

impl SendMode {
    pub fn name(self) -> &'static str {
        match self {
            SendMode::Batched => "batched",
            SendMode::PerRequest => "per-request",
        }
    }
}

/// Which event loop runs the load client.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientIo {
    /// uaring' event loop (batched sends only).
    Shards,
    /// The harness's own client ring (both send modes).
    Harness,
}

fn scenario_name(s: &str) -> Result<String, String> {
    if SCENARIOS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "unknown scenario {s:?}; one of {}",
            SCENARIOS.join(", ")
        ))
    }
}

fn security_mode(s: &str) -> Result<String, String> {
    crate::security::parse_mode(s).map(|_| s.to_string())
}

fn security_policy(s: &str) -> Result<String, String> {
    crate::security::parse_client_policy(s).map(|_| s.to_string())
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

fn non_negative_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err("must be a finite number ≥ 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn positive_f64(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a finite number > 0".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Options of `run` (and of every run of a sweep).
#[derive(clap::Args, Clone, Debug)]
pub struct RunOpts {
    /// read, read-batch, write, browse, sub, counters, events, connect, echo, push,
    /// history-ingest, history-read-raw, history-read-processed, scale-nodes, scale-items,
    /// scale-churn
    #[arg(long, default_value = "read", value_parser = scenario_name)]
    pub scenario: String,
    /// Client connections (each with its own session).
    #[arg(long, default_value_t = 4, value_parser = positive)]
    pub clients: usize,
    /// Requests in flight per connection.
    #[arg(long, default_value_t = 32, value_parser = positive)]
    pub inflight: usize,
    /// Measured window, seconds.
    #[arg(long, default_value_t = 5.0, value_parser = positive_f64)]
    pub duration: f64,
    /// Warm-up before the window, seconds.
    #[arg(long, default_value_t = 2.0, value_parser = non_negative_f64)]
    pub warmup: f64,
    /// Message security mode: none, sign, sign-encrypt.
    #[arg(long, default_value = "none", value_parser = security_mode)]
    pub security: String,
    /// Security policy of secured runs.
    #[arg(long, default_value = "Basic256Sha256", value_parser = security_policy)]
    pub security_policy: String,
    /// How requests leave the client: batched (one send per connection and loop
    /// iteration) or per-request (one send(2) per request, as real clients do).
    #[arg(long = "send", value_enum, default_value_t = SendMode::Batched)]
    pub send: SendMode,
    /// CPUs of the server (mask expression, docs/Placement.md).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPUs of the client threads.
    #[arg(long, default_value = "1")]
    pub client_cpus: String,
    /// Client threads (default: one per client CPU, at most one per connection).
    #[arg(long, value_parser = positive)]
    pub client_threads: Option<usize>,
    /// Client event loop: shards (default with --send batched) or harness
    /// (required by --send per-request).
    #[arg(long, value_enum)]
    pub client_io: Option<ClientIo>,
    /// The load client's own I/O modes (with --client-io shards; uaring's loop, the same keys
    /// as `[runtime]`): kernel submission polling, one poller per client thread.
    #[arg(long, value_name = "MODE", value_parser = ["off", "per-shard"], default_value = "off")]
    pub client_sqpoll: String,
    /// The CPU of each client thread's SQPOLL poller (unset: not bound).
    #[arg(long, value_name = "CPU")]
    pub client_sqpoll_cpu: Option<usize>,
    /// Spin this long, µs, before a client thread sleeps (0 = off, ..=10000).
    #[arg(long, value_name = "US", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub client_busy_poll_us: u32,
    /// Fixed files for the client's sockets.
    #[arg(long)]
    pub client_fixed_files: bool,
    /// Zero-copy sends for client batches of at least N bytes (0 = off).
    #[arg(long, value_name = "BYTES", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=(64 << 20)))]
    pub client_zero_copy_send_min: u32,
    /// The uaring binary (default: `uaring` beside this executable). push: a server of the
    /// plant contract (default: the `plant` example, `examples/plant` beside this executable),
    /// started with `--listen 127.0.0.1:PORT --variables N --rate HZ` and --server-args.
    #[arg(long)]
    pub server_bin: Option<String>,
    /// Any other server executable; its arguments in --server-args with
    /// placeholders {port} {items} {sampling} {pki} (push: also {variables} {push_rate}).
    #[arg(long)]
    pub server_exe: Option<String>,
    /// Extra arguments of the server (uaring: appended to `serve …`; push without --server-exe:
    /// appended to the plant contract's arguments); may start with `-`.
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub server_args: String,
    /// A substring of the server's output line that says it is ready.
    #[arg(long)]
    pub ready: Option<String>,
    /// Seconds to wait for readiness and for every session.
    #[arg(long, default_value_t = 30.0, value_parser = positive_f64)]
    pub ready_timeout: f64,
    /// An already running server.
    #[arg(long)]
    pub url: Option<String>,
    /// Its process ids, for its CPU time and memory (with --url). Several, comma-separated
    /// (a fleet behind a load balancer: each instance and the balancer), are summed.
    #[arg(long, value_delimiter = ',')]
    pub server_pid: Vec<i32>,
    /// Environment of the server: 'K=V …'.
    #[arg(long, allow_hyphen_values = true)]
    pub server_env: Option<String>,
    /// The server's name in the results.
    #[arg(long)]
    pub server_name: Option<String>,
    /// Do not pin an external server to --server-cpus.
    #[arg(long)]
    pub no_pin: bool,
    /// The {pki} placeholder of --server-args.
    #[arg(long, default_value = "pki")]
    pub pki: String,
    /// Foreign load (cores) above which a run is discarded and repeated.
    #[arg(long, default_value_t = 0.15, value_parser = non_negative_f64)]
    pub foreign_max: f64,
    /// Repeats of a run spoiled by foreign load.
    #[arg(long, default_value_t = 3)]
    pub max_repeats: u32,
    /// One JSON object instead of the readable block.
    #[arg(long)]
    pub json: bool,
    /// The variant's name in the results (set by sweep).
    #[arg(long)]
    pub variant: Option<String>,
    /// read-batch: values per Read request. scale-nodes: variables per Read or Browse request
    /// (default 10 for read-batch, 1 for scale-nodes).
    #[arg(long, default_value_t = 10, value_parser = positive)]
    pub nodes: usize,
    /// sub/events/counters/push/scale-items: subscriber sessions (default: --clients; counters: 1).
    #[arg(long, value_parser = positive)]
    pub sessions: Option<usize>,
    /// sub/events: subscriptions per session.
    #[arg(long, default_value_t = 1, value_parser = positive)]
    pub subscriptions: usize,
    /// sub/events/push/scale-items: monitored items per subscription (default 100; events 1;
    /// scale-items 10,000; push: the
    /// variables shared out, ceil(N / sessions)).
    #[arg(long, value_parser = positive)]
    pub items: Option<usize>,
    /// sub: writer sessions.
    #[arg(long, default_value_t = 1)]
    pub writers: usize,
    /// sub: writes per second per writer.
    #[arg(long, default_value_t = 1000.0, value_parser = positive_f64)]
    pub write_rate: f64,
    /// sub/events/counters/push/scale-items: publishing interval, ms (default 100; counters and
    /// scale-items 1000).
    #[arg(long, value_parser = positive_f64)]
    pub publishing_ms: Option<f64>,
    /// sub/counters/scale-items: sampling interval, ms (scale-items: default 500).
    #[arg(long, default_value_t = 10.0, value_parser = positive_f64)]
    pub sampling_ms: f64,
    /// counters: first item count of the capacity search.
    #[arg(long, default_value_t = 1000, value_parser = positive)]
    pub start_items: usize,
    /// counters: largest item count tried.
    #[arg(long, default_value_t = 1_000_000, value_parser = positive)]
    pub max_items: usize,
    /// read/read-batch/write/browse: background threads (on the client CPUs) that open and
    /// close SignAndEncrypt sessions back to back (--security-policy) while the measured
    /// sessions run: a connect storm (at nice 10, below the measuring threads). Its sessions
    /// are not in the latency figures; the result reports storm_sessions_per_s.
    #[arg(long, default_value_t = 0)]
    pub storm: usize,
    /// Sessions held open beside the measured clients: established (with the run's
    /// security settings) before the load starts, silent but for a Read of the server's
    /// state every third of their session timeout, closed after the window. For the echo
    /// floor, connections that send nothing.
    #[arg(long, default_value_t = 0)]
    pub idle_sessions: usize,
    /// The storm's sessions log in as this user (`name:password`, the password sent in clear
    /// inside the SignAndEncrypt channel) instead of anonymously.
    #[arg(long)]
    pub storm_user: Option<String>,
    /// read/read-batch: an open loop at this many Reads per second in all (shared evenly by
    /// the clients) instead of a closed loop: each request is due at a fixed time, --inflight
    /// caps what is outstanding per connection (a due request waits for a free slot), and a
    /// Read's latency runs from when it was due, so a slow answer also counts the requests it
    /// held up (no coordinated omission). 0: closed loop, --inflight always in flight.
    #[arg(long, default_value_t = 0.0, value_parser = non_negative_f64)]
    pub rate: f64,
    /// echo: bytes of each echo frame (the echo handler sends every byte back).
    #[arg(long, alias = "echo-req-bytes", default_value_t = crate::echo::DEFAULT_FRAME_BYTES, value_parser = crate::echo::parse_frame_bytes)]
    pub echo_bytes: usize,
    /// push, scale-nodes, scale-items: the server's variables `s=Plant.V0 … V<N-1>` (the plant
    /// contract's --variables N; scale-items: default sessions × items);
    /// session j monitors [j*M, (j+1)*M) modulo N.
    #[arg(long, value_parser = positive)]
    pub variables: Option<usize>,
    /// push, scale-items: pushes per second per variable (the plant contract's --rate HZ;
    /// scale-items: default 1); push: sets the default
    /// queue size and the offered rate N×HZ.
    #[arg(long, value_parser = positive_f64)]
    pub push_rate: Option<f64>,
    /// scale-nodes: the service of each operation, read (Value of each variable) or browse
    /// (each variable, both directions, every reference type). Default read.
    #[arg(long, value_parser = ["read", "browse"])]
    pub service: Option<String>,
    /// scale-items: items of the one CreateMonitoredItems timed after the window, on the server
    /// that still holds the sessions' items (0: none). Default 50,000.
    #[arg(long)]
    pub create_items: Option<usize>,
    /// scale-churn: Variables one more session adds to the server and deletes again while the
    /// readers read and subscribe (default 100,000).
    #[arg(long, value_parser = positive)]
    pub churn_nodes: Option<usize>,
    /// scale-churn: nodes per AddNodes or DeleteNodes request, and variables per added folder
    /// (default 1000, the servers' usual MaxNodesPerNodeManagement).
    #[arg(long, value_parser = positive)]
    pub churn_batch: Option<usize>,
    /// scale-churn: nodes added (then deleted) per second, the requests sent on a schedule
    /// (0, the default: each as soon as the last one is answered).
    #[arg(long, value_parser = non_negative_f64)]
    pub churn_rate: Option<f64>,
    /// scale-churn: the churn session logs in as this user (`name:password`, a user allowed
    /// AddNodes and DeleteNodes) where the server offers UserName tokens, else anonymously;
    /// the result says which (`churn_user`).
    #[arg(long)]
    pub churn_user: Option<String>,
    /// push: queue size of each monitored item (default ceil(HZ × publishing interval) × 2 + 1).
    #[arg(long, value_parser = positive)]
    pub queue_size: Option<usize>,
    /// history-read-raw, history-read-processed: samples of `s=History.V0` the server pre-loads
    /// at 1 Hz (history_bench --preload N); each measured operation reads all of them.
    /// Default 1,000,000 (raw), 86,400 (processed: one day).
    #[arg(long, value_parser = positive)]
    pub history_values: Option<usize>,
    /// history-read-raw, history-read-processed: the pre-loaded values (history_bench
    /// --pattern): count, slow or random. Default count (raw), slow (processed).
    #[arg(long, value_parser = ["count", "slow", "random"])]
    pub history_pattern: Option<String>,
    /// history-read-raw: numValuesPerNode of each HistoryRead (0, the default: the server's
    /// maximum); the rest through continuation points.
    #[arg(long)]
    pub values_per_call: Option<u32>,
    /// history-read-processed: processing intervals over the pre-loaded range (default 1440).
    #[arg(long, value_parser = positive)]
    pub intervals: Option<usize>,
    /// history-read-processed: the Aggregate's BrowseName (default Average when core computes
    /// it, else TimeAverage).
    #[arg(long)]
    pub aggregate: Option<String>,
    /// Profile the server during the measured window (not the warm-up): `perf record -e
    /// cpu-clock -g` attached to its process, then per-thread busy shares and top functions
    /// (the result's `profile`), the collapsed stacks and a flame graph beside perf.data
    /// (docs/Placement.md "Profiles"). Needs perf (Debian: linux-perf).
    #[arg(long)]
    pub profile: bool,
    /// Directory of the profile's files (default: `uaring-profiles` under the current
    /// directory; a sweep with --out: the directory of its output).
    #[arg(long, value_name = "DIR")]
    pub profile_dir: Option<String>,
    /// File name stem of the profile's files: NAME.perf.data, NAME.folded, NAME.svg (default:
    /// SCENARIO-SERVER[-VARIANT]-UNIXTIME; a sweep with --out: OUT-STEM.SCENARIO.VARIANT.rROUND).
    #[arg(long, value_name = "NAME")]
    pub profile_name: Option<String>,
    /// Samples per second per thread of the profile.
    #[arg(long, value_name = "HZ", default_value_t = 999, value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub profile_freq: u32,
    /// How perf records the stacks: fp (frame pointers, `-g`; small and fast, but frames
    /// without a frame pointer are cut short) or dwarf (unwound from a copy of the stack:
    /// whole stacks, larger files, slower to analyse). Self time is exact either way.
    #[arg(long, value_name = "HOW", value_parser = ["fp", "dwarf"], default_value = "fp")]
    pub profile_call_graph: String,
    /// Functions listed per thread in the profile (by self time).
    #[arg(long, value_name = "N", default_value_t = 5, value_parser = positive)]
    pub profile_top: usize,
    /// Scheduling priority of every thread of the server: nice:N (-20..19), fifo:P or rr:P
    /// (SCHED_FIFO / SCHED_RR, 1..99). Set before the server's first instruction (its threads
    /// inherit it); refused with the limit to raise when not permitted.
    #[arg(long, value_name = "PRIO", value_parser = crate::priority::parse_arg)]
    pub server_priority: Option<crate::priority::Priority>,
    /// Scheduling priority of every thread of the load client (the harness): as
    /// --server-priority.
    #[arg(long, value_name = "PRIO", value_parser = crate::priority::parse_arg)]
    pub client_priority: Option<crate::priority::Priority>,
    /// The options given on the command line (not defaulted), by clap id (`sampling_ms`):
    /// a scenario refuses the ones it does not use. Filled by [`RunOpts::try_parse_words`] and
    /// by `uaring-bench` itself; empty when the options were built otherwise.
    #[arg(skip)]
    pub given: Vec<String>,
}

/// The ids of the arguments of `cmd` whose value came from the command line in `m` (argument
/// groups left out).
pub fn given_ids(cmd: &clap::Command, m: &ArgMatches) -> Vec<String> {
    cmd.get_arguments()
        .map(|a| a.get_id().as_str())
        .filter(|id| m.value_source(id) == Some(ValueSource::CommandLine))
        .map(str::to_string)
        .collect()
}

/// `sampling_ms` → `--sampling-ms`.
pub fn option_name(id: &str) -> String {
    format!("--{}", id.replace('_', "-"))
}

impl Cli {
    /// Parses the whole command line, recording which `run` options were given.
    pub fn try_parse_recording(argv: &[String]) -> Result<Cli, clap::Error> {
        let cmd = Cli::command();
        let m = cmd.clone().try_get_matches_from(argv)?;
        let mut cli = Cli::from_arg_matches(&m)?;
        if let (Command::Run(o), Some(("run", sub)), Some(run)) =
            (&mut cli.command, m.subcommand(), cmd.find_subcommand("run"))
        {
            o.given = given_ids(run, sub);
        }
        Ok(cli)
    }
}

impl Default for RunOpts {
    fn default() -> Self {
        RunOpts::parse_from(["run"])
    }
}

impl RunOpts {
    /// Parses `run` arguments (without the command word).
    pub fn parse_from<I, T>(args: I) -> RunOpts
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        RunOpts::try_parse_words(args).expect("valid run arguments")
    }

    /// Parses `run` arguments; the first word is the command name (ignored).
    pub fn try_parse_words<I, T>(args: I) -> Result<RunOpts, String>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        #[derive(Parser)]
        #[command(
            name = "uaring-bench run",
            args_override_self = true,
            disable_version_flag = true
        )]
        struct Only {
            #[command(flatten)]
            run: RunOpts,
        }
        let cmd = Only::command();
        let m = cmd
            .clone()
            .try_get_matches_from(args)
            .map_err(|e| e.to_string())?;
        let mut run = Only::from_arg_matches(&m)
            .map(|o| o.run)
            .map_err(|e| e.to_string())?;
        run.given = given_ids(&cmd, &m);
        Ok(run)
    }
}

/// Options of `sweep`; every other option is a `run` option given to each run.
#[derive(clap::Args, Clone, Debug)]
pub struct SweepOpts {
    /// Variant file: `name|env|args` lines.
    #[arg(long)]
    pub variants: String,
    /// Scenario file: `name|args` lines (default: the --scenario given).
    #[arg(long)]
    pub scenarios: Option<String>,
    /// Rounds; the variant order alternates between rounds.
    #[arg(long, default_value_t = 5, value_parser = positive)]
    pub rounds: usize,
    /// Raw results (JSON lines); default stdout.
    #[arg(long)]
    pub out: Option<String>,
    /// The uaring-bench executable for the runs (default: this one).
    #[arg(long)]
    pub bench_exe: Option<String>,
    #[command(flatten)]
    pub run: RunOpts,
}

/// Options of `sweep` that are not passed on to its runs: (name, takes a value).
pub const SWEEP_ONLY: &[(&str, bool)] = &[
    ("variants", true),
    ("scenarios", true),
    ("rounds", true),
    ("out", true),
    ("bench-exe", true),
    ("json", false),
];

#[derive(clap::Args, Clone, Debug)]
pub struct SummarizeOpts {
    /// Raw results (JSON lines).
    #[arg(long = "in", value_name = "FILE", required_unless_present = "input")]
    pub input_opt: Option<String>,
    /// Raw results, as a positional argument.
    #[arg(value_name = "INPUT", conflicts_with = "input_opt")]
    pub input: Option<String>,
    /// Markdown output (default stdout).
    #[arg(long)]
    pub md: Option<String>,
    /// CSV output.
    #[arg(long)]
    pub csv: Option<String>,
    /// SVG plots: PREFIX-<scenario>.svg.
    #[arg(long, value_name = "PREFIX")]
    pub svg: Option<String>,
    /// Prefix of the SVG links in the Markdown.
    #[arg(long)]
    pub svg_link_prefix: Option<String>,
    /// The command shown as "Reproduce:".
    #[arg(long)]
    pub command: Option<String>,
    /// A ratio table row: `A/B` divides variant A's median by variant B's, per
    /// scenario (server CPU per op and throughput). Repeatable.
    #[arg(long = "ratio", value_name = "A/B", value_parser = ratio_pair)]
    pub ratios: Vec<(String, String)>,
    /// Add the scheduler states per thread class (`server_sched`, `client_sched`: time
    /// running, runnable but waiting, migrations), medians per cell, after the tables.
    #[arg(long)]
    pub sched: bool,
}

fn ratio_pair(s: &str) -> Result<(String, String), String> {
    match s.split_once('/') {
        Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.to_string(), b.to_string())),
        _ => Err(format!("{s:?}: expected VARIANT_A/VARIANT_B")),
    }
}

impl SummarizeOpts {
    pub fn input(&self) -> &str {
        self.input_opt
            .as_deref()
            .or(self.input.as_deref())
            .unwrap_or_default()
    }
}

#[derive(clap::Args, Clone, Debug)]
pub struct EchoServerOpts {
    /// CPUs: one shard per CPU.
    #[arg(long, default_value = "0")]
    pub cpus: String,
    /// Port on 127.0.0.1 (0: a free one, printed as `listening on …`).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// io backend of the shards: auto, uring, epoll.
    #[arg(long, default_value = "auto")]
    pub io_backend: String,
}

/// Removes the sweep-only options (and their values) from a sweep's words,
/// leaving the `run` options to give to every run.
pub fn run_words_of_sweep(words: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = &words[i];
        if let Some(key) = w.strip_prefix("--") {
            let (name, inline) = match key.split_once('=') {
                Some((n, _)) => (n, true),
                None => (key, false),
            };
            if let Some((_, takes)) = SWEEP_ONLY.iter().find(|(n, _)| *n == name) {
                i += if *takes && !inline { 2 } else { 1 };
                continue;
            }
        }
        out.push(w.clone());
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("uaring-bench").chain(words.iter().copied()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn run_defaults_and_last_value_wins() {
        let Command::Run(r) = parse(&[
            "run",
            "--clients",
            "4",
            "--json",
            "--clients=8",
            "--scenario",
            "read",
            "--json",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(r.clients, 8);
        assert_eq!(r.inflight, 32);
        assert!(r.json);
        assert_eq!(r.send, SendMode::Batched);
        assert_eq!(r.security, "none");
        assert_eq!(r.idle_sessions, 0);
    }

    #[test]
    fn unknown_option_is_an_error() {
        let e = parse(&["run", "--inflght", "7"]).err().unwrap();
        assert!(e.contains("--inflght"), "{e}");
        assert!(e.contains("--inflight"), "suggestion: {e}");
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            vec!["run", "--clients", "many"],
            vec!["run", "--clients", "0"],
            vec!["run", "--duration", "-1"],
            vec!["run", "--send", "sometimes"],
            vec!["run", "--scenario", "nope"],
            vec!["run", "--security", "maybe"],
            vec!["run", "--security-policy", "Basic128Rsa15"],
            vec!["run", "--clients"],
            vec!["run", "stray"],
            vec!["sweep", "--rounds", "x", "--variants", "v"],
            vec!["sweep"],
            vec!["summarize"],
            vec!["echo-server", "--port", "70000"],
            vec!["frobnicate"],
        ] {
            assert!(parse(&bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn server_args_may_start_with_a_dash() {
        let Command::Run(r) = parse(&[
            "run",
            "--server-args",
            "--port {port} --secure",
            "--clients",
            "2",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(r.server_args, "--port {port} --secure");
        assert_eq!(r.clients, 2);
    }

    #[test]
    fn send_modes() {
        let Command::Run(r) = parse(&["run", "--send", "per-request"]).unwrap().command else {
            panic!()
        };
        assert_eq!(r.send, SendMode::PerRequest);
        assert_eq!(r.send.name(), "per-request");
    }

    #[test]
    fn sweep_passes_run_options_on() {
        let words: Vec<String> = [
            "--variants",
            "v",
            "--rounds=3",
            "--duration",
            "1",
            "--json",
            "--out",
            "o",
            "--send",
            "per-request",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            run_words_of_sweep(&words),
            vec!["--duration", "1", "--send", "per-request"]
        );
        let Command::Sweep(s) = parse(&["sweep", "--variants", "v", "--duration", "1"])
            .unwrap()
            .command
        else {
            panic!()
        };
        assert_eq!(s.rounds, 5);
        assert_eq!(s.run.duration, 1.0);
        // --idle-sessions from the sweep's own words, a scenario's and a variant's (the last wins).
        let common = run_words_of_sweep(&[
            "--variants".to_string(),
            "v".into(),
            "--idle-sessions".into(),
            "2".into(),
        ]);
        let scenario = crate::sweep::Scenario {
            name: "s".into(),
            args: vec!["--idle-sessions".into(), "8".into()],
        };
        let plain = crate::sweep::Variant {
            name: "a".into(),
            env: vec![],
            args: vec![],
        };
        let r =
            RunOpts::try_parse_words(crate::sweep::run_words(&common, &scenario, &plain)).unwrap();
        assert_eq!(r.idle_sessions, 8);
        let more = crate::sweep::Variant {
            name: "b".into(),
            env: vec![],
            args: vec!["--idle-sessions".into(), "16".into()],
        };
        assert_eq!(
            RunOpts::try_parse_words(crate::sweep::run_words(&common, &scenario, &more))
                .unwrap()
                .idle_sessions,
            16
        );
        let none = crate::sweep::Scenario {
            name: "t".into(),
            args: vec![],
        };
        assert_eq!(
            RunOpts::try_parse_words(crate::sweep::run_words(&common, &none, &plain))
                .unwrap()
                .idle_sessions,
            2
        );
        assert!(parse(&["run", "--idle-sessions", "some"]).is_err());
    }

    #[test]
    fn given_options_are_recorded() {
        let argv: Vec<String> = [
            "uaring-bench",
            "run",
            "--scenario",
            "push",
            "--json",
            "--sampling-ms=5",
            "--clients",
            "2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let Command::Run(r) = Cli::try_parse_recording(&argv).unwrap().command else {
            panic!()
        };
        let mut g = r.given.clone();
        g.sort();
        assert_eq!(
            g,
            vec!["clients", "json", "sampling_ms", "scenario"],
            "defaults are not given"
        );
        let r = RunOpts::try_parse_words(["run", "--queue-size", "3"]).unwrap();
        assert_eq!(r.given, vec!["queue_size"]);
        assert_eq!(option_name("sampling_ms"), "--sampling-ms");
        assert!(RunOpts::default().given.is_empty());
    }

    #[test]
    fn summarize_input_either_way() {
        let Command::Summarize(s) = parse(&["summarize", "--in", "a.jsonl"]).unwrap().command
        else {
            panic!()
        };
        assert_eq!(s.input(), "a.jsonl");
        let Command::Summarize(s) = parse(&[
            "summarize",
            "b.jsonl",
            "--md",
            "x",
            "--ratio",
            "u/o",
            "--ratio",
            "u/e",
        ])
        .unwrap()
        .command
        else {
            panic!()
        };
        assert_eq!(s.input(), "b.jsonl");
        assert_eq!(
            s.ratios,
            vec![
                ("u".to_string(), "o".to_string()),
                ("u".to_string(), "e".to_string())
            ]
        );
        assert!(parse(&["summarize", "b.jsonl", "--ratio", "uo"]).is_err());
    }
}
