//! The `[runtime]` section of the configuration file and the file as a whole.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which I/O mechanism the shards use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum IoBackend {
    /// io_uring when it can be set up, else epoll (logged once).
    #[default]
    Auto,
    /// io_uring or fail.
    Uring,
    /// epoll always.
    Epoll,
}

impl FromStr for IoBackend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(IoBackend::Auto),
            "uring" | "io_uring" | "io-uring" => Ok(IoBackend::Uring),
            "epoll" => Ok(IoBackend::Epoll),
            _ => Err(format!(
                "unknown io backend {s:?} (expected auto, uring or epoll)"
            )),
        }
    }
}

impl fmt::Display for IoBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IoBackend::Auto => "auto",
            IoBackend::Uring => "uring",
            IoBackend::Epoll => "epoll",
        })
    }
}

/// Which shard gets a new connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// One SO_REUSEPORT listener per shard; the kernel hashes the 4-tuple.
    #[default]
    Reuseport,
    /// Shard 0 accepts and hands sockets to the shards in turn.
    RoundRobin,
    /// Shard 0 accepts and hands each socket to the shard with the fewest open connections.
    LeastConnections,
}

impl FromStr for Distribution {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "reuseport" => Ok(Distribution::Reuseport),
            "round-robin" | "round_robin" | "rr" => Ok(Distribution::RoundRobin),
            "least-connections" | "least_connections" | "lc" => Ok(Distribution::LeastConnections),
            _ => Err(format!(
                "unknown distribution policy {s:?} (expected reuseport, round-robin or least-connections)"
            )),
        }
    }
}

impl fmt::Display for Distribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Distribution::Reuseport => "reuseport",
            Distribution::RoundRobin => "round-robin",
            Distribution::LeastConnections => "least-connections",
        })
    }
}

/// Kernel-side submission polling (IORING_SETUP_SQPOLL) of the shards' rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Sqpoll {
    /// The shard submits with io_uring_enter itself (the default).
    #[default]
    Off,
    /// One kernel poller thread per shard ring.
    PerShard,
    /// One kernel poller thread for all shards: every ring attaches to shard 0's
    /// (IORING_SETUP_ATTACH_WQ).
    Shared,
}

impl Sqpoll {
    pub fn is_on(self) -> bool {
        self != Sqpoll::Off
    }
}

impl FromStr for Sqpoll {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Sqpoll::Off),
            "per-shard" | "per_shard" => Ok(Sqpoll::PerShard),
            "shared" => Ok(Sqpoll::Shared),
            _ => Err(format!(
                "unknown sqpoll mode {s:?} (expected off, per-shard or shared)"
            )),
        }
    }
}

impl fmt::Display for Sqpoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Sqpoll::Off => "off",
            Sqpoll::PerShard => "per-shard",
            Sqpoll::Shared => "shared",
        })
    }
}

/// `runtime.sqpoll_cpu` when no CPU is given: the kernel lets the poller run anywhere.
pub const SQPOLL_CPU_ANY: &str = "any";
/// The range of `runtime.sqpoll_idle_ms`.
pub const SQPOLL_IDLE_MS_MAX: u32 = 10_000;
/// The range of `runtime.busy_poll_us`.
pub const BUSY_POLL_US_MAX: u32 = 10_000;
/// The largest `runtime.zero_copy_send_min` (0 = off): larger responses than a send of this
/// size are rare enough that the key would be off in all but name.
pub const ZERO_COPY_SEND_MIN_MAX: u32 = 64 << 20;
/// The most registered send buffers per shard (`runtime.fixed_send_buffers`): the kernel's
/// bound on a ring's buffer table (IORING_MAX_REG_BUFFERS).
pub const FIXED_SEND_BUFFERS_MAX: u32 = 1 << 14;
/// The range of `runtime.fixed_send_buffer_bytes` (a multiple of 4096): a connection's output
/// buffer keeps at most 64 KiB when idle, so a larger registered buffer would be given back
/// to the allocator after each large batch.
pub const FIXED_SEND_BUFFER_BYTES_MIN: u32 = 4096;
pub const FIXED_SEND_BUFFER_BYTES_MAX: u32 = 64 << 10;
/// The range of `runtime.napi_busy_poll_us`.
pub const NAPI_BUSY_POLL_US_MAX: u32 = 10_000;

/// `[runtime]`: everything about threads, sockets and rings. docs/Configuration.md
/// documents every key.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Address to listen on; `--listen` overrides. Port 0 picks a free port.
    pub listen: String,
    /// CPUs to run shards on (list, hex mask or expression); `--cpus` overrides.
    pub cpus: String,
    /// Number of shards; 0 = one per selected CPU. More shards than CPUs share CPUs round-robin.
    pub shards: usize,
    pub io_backend: IoBackend,
    pub distribution: Distribution,
    /// Submission queue entries per shard ring (power of two, 16..=32768); 0 = automatic
    /// (1024, halved until all shards fit RLIMIT_MEMLOCK).
    pub ring_entries: u32,
    /// Provided receive buffers per shard (power of two, 1..=32768).
    pub recv_buffers: u32,
    /// Size of one receive buffer, bytes.
    pub recv_buffer_bytes: u32,
    /// Use multishot accept/recv with a provided buffer ring when the kernel has them.
    pub multishot: bool,
    /// Open connections per shard; further connections get a best-effort ERR
    /// BadTcpNotEnoughResources and are closed on accept.
    pub max_connections_per_shard: usize,
    /// Accepted connections from one IP address at once, per shard; one more is answered
    /// ERR BadTcpServerTooBusy and closed (`max_connections_per_shard` applies first). Clients behind one load balancer or NAT share
    /// an address: raise it there.
    pub max_connections_per_address: usize,
    /// Unsent output per connection above which the shard stops reading from it (and
    /// stops handing it requests already received) until it drains below half.
    pub max_pending_output_bytes: usize,
    /// Server-wide, in total: unsent output plus received input not yet answered (held
    /// back by a shard or buffered in unfinished chunks and messages) across all
    /// connections, shared out evenly across the shards (at least 1 MiB and
    /// `max_pending_output_bytes` each). Past its share a shard stops reading from every
    /// connection and refuses new ones (ERR BadTcpNotEnoughResources) until its total
    /// drains below three quarters.
    pub max_buffered_bytes: usize,
    /// Server-wide, the part of `max_buffered_bytes` that connections without an activated
    /// session may hold, shared out the same way (at least 1 MiB each). Past its share a
    /// shard stops reading from those connections and refuses new ones, while connections
    /// with a session go on.
    pub max_pre_session_buffered_bytes: usize,
    /// Overrides the per-shard share of `max_buffered_bytes` (unset: the share). The
    /// pre-session share is then at most this.
    pub max_shard_buffered_bytes: Option<usize>,
    /// A connection that is not read from (its own bound or the shard's budget) and
    /// whose unsent output makes no progress for this long is aborted, ms.
    pub send_stall_timeout_ms: u64,
    /// Capacity of each acceptor → shard hand-off queue (round-robin, least-connections).
    pub handoff_queue: usize,
    /// Capacity of each shard → shard queue for live connections moved to the shard that
    /// owns their session (one queue per ordered pair of shards).
    pub move_queue: usize,
    /// listen(2) backlog.
    pub listen_backlog: u32,
    /// TCP_NODELAY on every connection.
    pub tcp_nodelay: bool,
    /// Batched waiting (io_uring backend): when a shard has nothing to handle it waits up to
    /// this long, µs, for its sends in flight and one completion per connection that received
    /// recently (up to `batch_completions` of them) before it handles what has arrived, so
    /// requests of many connections, and several of one, are answered in one pass and leave
    /// in fuller segments. 0 = off (handle every completion at once). The latency bound: a
    /// request waits at most this long.
    pub batch_wait_us: u32,
    /// At most how many recently receiving connections batched waiting waits for.
    pub batch_completions: u32,
    /// Kernel submission polling (io_uring backend): off, per-shard or shared.
    pub sqpoll: Sqpoll,
    /// Where the poller threads run: `any` (unpinned), `same` (the shard's CPU), `sibling`
    /// (its SMT sibling) or a CPU expression like `cpus` (per-shard: poller i on the i-th CPU).
    pub sqpoll_cpu: String,
    /// Where the server's background threads run: the model writer (NodeManagement edits),
    /// the history store's threads and the method worker pool. `""` = not pinned (wherever
    /// the process may run), or a CPU expression like `cpus`. `--background-cpus` overrides.
    pub background_cpus: String,
    /// How long a poller keeps polling an empty submission queue before it sleeps, ms.
    pub sqpoll_idle_ms: u32,
    /// Spin-before-sleep (io_uring backend): when a shard has nothing to handle it peeks its
    /// completion queue for up to this long, µs, before it sleeps in the kernel. 0 = off.
    pub busy_poll_us: u32,
    /// Fixed files (io_uring backend): each shard registers a sparse file table of
    /// `max_connections_per_shard` slots and its connections' receives, sends, polls and
    /// closes name the socket by its slot instead of by its file descriptor.
    pub fixed_files: bool,
    /// Zero-copy sends (io_uring backend): a batch of output of at least this many bytes goes
    /// out with IORING_OP_SEND_ZC. 0 = off.
    pub zero_copy_send_min: u32,
    /// Registered send buffers (io_uring backend): each shard registers this many buffers of
    /// `fixed_send_buffer_bytes` with its ring (locked memory, within RLIMIT_MEMLOCK); each
    /// connection takes two as its output buffers while they last, and its sends name them by
    /// index (zero-copy sends without pinning pages per send). 0 = off; even, ..=16384.
    pub fixed_send_buffers: u32,
    /// The size of one registered send buffer, bytes (a multiple of 4096, 4096..=65536): a
    /// batch larger than this goes out of an ordinary buffer.
    pub fixed_send_buffer_bytes: u32,
    /// NAPI busy polling (io_uring backend, Linux 6.9+): each ring is registered for NAPI
    /// busy polling (IORING_REGISTER_NAPI) with this timeout, µs, so a waiting shard polls the
    /// NIC receive queues of its sockets. It acts only on sockets received through a NIC
    /// queue with a NAPI id: on loopback it does nothing. 0 = off.
    pub napi_busy_poll_us: u32,
    /// NAPI busy polling: prefer busy polling over interrupts (the NIC's interrupts stay
    /// masked while the ring polls).
    pub napi_prefer_busy_poll: bool,
    /// Receive bundles (io_uring backend, Linux 6.10+): a multishot receive fills several
    /// provided buffers in one completion, so that smaller `recv_buffer_bytes` do not mean more
    /// completions for large messages.
    pub recv_bundles: bool,
    /// How long a graceful shutdown waits for pending output before closing sockets, ms.
    pub shutdown_grace_ms: u64,
    /// On SIGINT/SIGTERM, how long the server announces its shutdown before it begins:
    /// ServerStatus.State reads Shutdown, SecondsTillShutdown counts down and
    /// ShutdownReason says why, while every session is served as before, ms. 0 = stop at once.
    /// At most 600,000.
    pub shutdown_announce_ms: u64,
    /// Write per-shard statistics as JSON to this file (atomically replaced); `--stats-file` overrides.
    pub stats_file: Option<PathBuf>,
    /// How often the statistics file is rewritten, ms.
    pub stats_interval_ms: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            listen: "0.0.0.0:4840".to_string(),
            cpus: "all".to_string(),
            shards: 0,
            io_backend: IoBackend::Auto,
            distribution: Distribution::Reuseport,
            ring_entries: 0,
            recv_buffers: 256,
            recv_buffer_bytes: 16384,
            multishot: true,
            max_connections_per_shard: 4096,
            max_connections_per_address: 1024,
            max_pending_output_bytes: 1 << 20,
            max_buffered_bytes: 64 << 20,
            max_pre_session_buffered_bytes: 32 << 20,
            max_shard_buffered_bytes: None,
            send_stall_timeout_ms: 60_000,
            handoff_queue: 1024,
            move_queue: 16,
            listen_backlog: 1024,
            tcp_nodelay: true,
            batch_wait_us: 0,
            batch_completions: 32,
            sqpoll: Sqpoll::Off,
            sqpoll_cpu: SQPOLL_CPU_ANY.to_string(),
            background_cpus: String::new(),
            sqpoll_idle_ms: 10,
            busy_poll_us: 0,
            fixed_files: false,
            recv_bundles: false,
            zero_copy_send_min: 0,
            fixed_send_buffers: 0,
            fixed_send_buffer_bytes: 16 << 10,
            napi_busy_poll_us: 0,
            napi_prefer_busy_poll: false,
            shutdown_grace_ms: 500,
            shutdown_announce_ms: 0,
            stats_file: None,
            stats_interval_ms: 1000,
        }
    }
}

/// The smallest pre-session share of a shard: more than a handshake message needs (an
/// OpenSecureChannel, CreateSession or ActivateSession with a certificate chain is a few to
/// some tens of KiB), so a client is only ever held back by other pre-session clients.
pub const PRE_SESSION_SHARE_MIN: usize = 64 << 10;

/// The smallest and largest ring sizes accepted.
pub const RING_ENTRIES_MIN: u32 = 16;
pub const RING_ENTRIES_MAX: u32 = 32768;

impl RuntimeConfig {
    /// Checks ranges; "0 never means unbounded by accident".
    /// Each of `shards` shards' share: (its buffer budget, its pre-session part), bytes.
    ///
    /// A shard's budget is at least 1 MiB and `max_pending_output_bytes` (one connection's
    /// output must fit), so past 64 shards the budgets add up to more than
    /// `max_buffered_bytes`; that is memory of connections with an activated session. The
    /// pre-session share is at least [`PRE_SESSION_SHARE_MIN`] only, so what connections
    /// without a session may hold stays within `max_pre_session_buffered_bytes` on every
    /// shard count up to `MAX_SHARDS` at the default (32 MiB / 256 shards = 128 KiB a shard).
    pub fn shard_budgets(&self, shards: usize) -> (usize, usize) {
        let n = shards.max(1);
        let floor = self.max_pending_output_bytes.max(1 << 20);
        let shard = self
            .max_shard_buffered_bytes
            .unwrap_or((self.max_buffered_bytes / n).max(floor));
        let pre = (self.max_pre_session_buffered_bytes / n)
            .max(PRE_SESSION_SHARE_MIN)
            .min(shard);
        (shard, pre)
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.shutdown_announce_ms > 600_000 {
            return Err("runtime.shutdown_announce_ms must be 0..=600000".into());
        }
        let e = self.ring_entries;
        if e != 0 && (!e.is_power_of_two() || !(RING_ENTRIES_MIN..=RING_ENTRIES_MAX).contains(&e)) {
            return Err(format!(
                "runtime.ring_entries = {e}: must be 0 (automatic) or a power of two in {RING_ENTRIES_MIN}..={RING_ENTRIES_MAX}"
            ));
        }
        let b = self.recv_buffers;
        if !b.is_power_of_two() || b > 32768 {
            return Err(format!(
                "runtime.recv_buffers = {b}: must be a power of two in 1..=32768"
            ));
        }
        if !(512..=(16 << 20)).contains(&self.recv_buffer_bytes) {
            return Err(format!(
                "runtime.recv_buffer_bytes = {}: must be in 512..=16777216",
                self.recv_buffer_bytes
            ));
        }
        if self.max_connections_per_shard == 0 || self.max_connections_per_shard > (1 << 24) {
            return Err("runtime.max_connections_per_shard must be in 1..=16777216".into());
        }
        if self.max_connections_per_address == 0 {
            return Err("runtime.max_connections_per_address must be at least 1; there is no unbounded setting".into());
        }
        if self.max_pending_output_bytes < 4096 {
            return Err(format!(
                "runtime.max_pending_output_bytes = {}: must be at least 4096",
                self.max_pending_output_bytes
            ));
        }
        let floor = self.max_pending_output_bytes.max(1 << 20);
        for (key, v) in [
            ("max_buffered_bytes", Some(self.max_buffered_bytes)),
            ("max_shard_buffered_bytes", self.max_shard_buffered_bytes),
        ] {
            if let Some(v) = v.filter(|&v| v < floor) {
                return Err(format!(
                    "runtime.{key} = {v}: must be at least 1048576 and at least \
                     runtime.max_pending_output_bytes ({}); there is no unbounded setting",
                    self.max_pending_output_bytes
                ));
            }
        }
        if self.max_pre_session_buffered_bytes < 1 << 20
            || self.max_pre_session_buffered_bytes > self.max_buffered_bytes
        {
            return Err(format!(
                "runtime.max_pre_session_buffered_bytes = {}: must be at least 1048576 and at \
                 most runtime.max_buffered_bytes ({})",
                self.max_pre_session_buffered_bytes, self.max_buffered_bytes
            ));
        }
        if self.send_stall_timeout_ms < 100 {
            return Err(format!(
                "runtime.send_stall_timeout_ms = {}: must be at least 100; there is no unbounded setting",
                self.send_stall_timeout_ms
            ));
        }
        if self.batch_wait_us > 10_000 {
            return Err(format!(
                "runtime.batch_wait_us = {}: must be in 0..=10000 (0 = off)",
                self.batch_wait_us
            ));
        }
        if !(1..=4096).contains(&self.batch_completions) {
            return Err(format!(
                "runtime.batch_completions = {}: must be in 1..=4096",
                self.batch_completions
            ));
        }
        if self.sqpoll.is_on() && self.io_backend == IoBackend::Epoll {
            return Err(format!(
                "runtime.sqpoll = \"{}\" needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.sqpoll = \"off\" or use io_backend \"uring\"/\"auto\"",
                self.sqpoll
            ));
        }
        if self.busy_poll_us > 0 && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.busy_poll_us needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.busy_poll_us = 0 or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        if self.fixed_files && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.fixed_files needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.fixed_files = false or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        if self.recv_bundles && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.recv_bundles needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.recv_bundles = false or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        if self.recv_bundles && !self.multishot {
            return Err(
                "runtime.recv_bundles needs multishot receives: set runtime.multishot = true \
                 or runtime.recv_bundles = false"
                    .into(),
            );
        }
        if self.zero_copy_send_min > 0 && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.zero_copy_send_min needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.zero_copy_send_min = 0 or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        if self.zero_copy_send_min > ZERO_COPY_SEND_MIN_MAX {
            return Err(format!(
                "runtime.zero_copy_send_min = {}: must be in 0..={ZERO_COPY_SEND_MIN_MAX} (0 = off)",
                self.zero_copy_send_min
            ));
        }
        if self.fixed_send_buffers > 0 && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.fixed_send_buffers needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.fixed_send_buffers = 0 or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        // `%` rather than `is_multiple_of` (Rust 1.87) for the workspace's rust-version.
        #[allow(clippy::manual_is_multiple_of)]
        let odd = self.fixed_send_buffers % 2 != 0;
        #[allow(clippy::manual_is_multiple_of)]
        let unaligned = self.fixed_send_buffer_bytes % 4096 != 0;
        if odd || self.fixed_send_buffers > FIXED_SEND_BUFFERS_MAX {
            return Err(format!(
                "runtime.fixed_send_buffers = {}: must be even (a connection takes two: one fills \
                 while the other is on the wire) and in 0..={FIXED_SEND_BUFFERS_MAX} (0 = off)",
                self.fixed_send_buffers
            ));
        }
        if unaligned
            || !(FIXED_SEND_BUFFER_BYTES_MIN..=FIXED_SEND_BUFFER_BYTES_MAX)
                .contains(&self.fixed_send_buffer_bytes)
        {
            return Err(format!(
                "runtime.fixed_send_buffer_bytes = {}: must be a multiple of 4096 in \
                 {FIXED_SEND_BUFFER_BYTES_MIN}..={FIXED_SEND_BUFFER_BYTES_MAX}",
                self.fixed_send_buffer_bytes
            ));
        }
        if self.napi_busy_poll_us > 0 && self.io_backend == IoBackend::Epoll {
            return Err(
                "runtime.napi_busy_poll_us needs io_uring, but runtime.io_backend is \"epoll\": \
                 set runtime.napi_busy_poll_us = 0 or use io_backend \"uring\"/\"auto\""
                    .into(),
            );
        }
        if self.napi_busy_poll_us > NAPI_BUSY_POLL_US_MAX {
            return Err(format!(
                "runtime.napi_busy_poll_us = {}: must be in 0..={NAPI_BUSY_POLL_US_MAX} (0 = off)",
                self.napi_busy_poll_us
            ));
        }
        if self.napi_prefer_busy_poll && self.napi_busy_poll_us == 0 {
            return Err(
                "runtime.napi_prefer_busy_poll = true but runtime.napi_busy_poll_us is 0: there \
                 is no NAPI busy polling to prefer (set napi_busy_poll_us, or leave the key out)"
                    .into(),
            );
        }
        if self.sqpoll_cpu.trim().is_empty() {
            return Err(
                "runtime.sqpoll_cpu is empty: expected any, same, sibling or a CPU expression"
                    .into(),
            );
        }
        if !self.sqpoll.is_on() && self.sqpoll_cpu.trim() != SQPOLL_CPU_ANY {
            return Err(format!(
                "runtime.sqpoll_cpu = {:?} but runtime.sqpoll is \"off\": there is no poller to place \
                 (set runtime.sqpoll = \"per-shard\" or \"shared\", or leave sqpoll_cpu out)",
                self.sqpoll_cpu
            ));
        }
        if !(1..=SQPOLL_IDLE_MS_MAX).contains(&self.sqpoll_idle_ms) {
            return Err(format!(
                "runtime.sqpoll_idle_ms = {}: must be in 1..={SQPOLL_IDLE_MS_MAX}",
                self.sqpoll_idle_ms
            ));
        }
        if self.busy_poll_us > BUSY_POLL_US_MAX {
            return Err(format!(
                "runtime.busy_poll_us = {}: must be in 0..={BUSY_POLL_US_MAX} (0 = off)",
                self.busy_poll_us
            ));
        }
        if self.handoff_queue == 0 {
            return Err("runtime.handoff_queue must be at least 1".into());
        }
        if self.move_queue == 0 || self.move_queue > 4096 {
            return Err("runtime.move_queue must be in 1..=4096".into());
        }
        if self.listen_backlog == 0 {
            return Err("runtime.listen_backlog must be at least 1".into());
        }
        if self.stats_interval_ms == 0 {
            return Err("runtime.stats_interval_ms must be at least 1".into());
        }
        if self.shards > 256 {
            return Err("runtime.shards must be at most 256 (the secure channel id names the shard in 8 bits)".into());
        }
        Ok(())
    }
}

/// `[metrics]`: the Prometheus endpoint (docs/Deployment.md).
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address of the Prometheus text endpoint (`GET /metrics`), e.g. "127.0.0.1:9464";
    /// unset = off. Port 0 picks a free port (logged).
    pub listen: Option<String>,
}

/// `[log]`: the log filter (`RUST_LOG` syntax), re-read on SIGHUP.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// e.g. "info" or "warn,uaring=debug". Unset: `RUST_LOG`, else "info". At start
    /// `RUST_LOG` wins over it; on SIGHUP it is applied.
    pub filter: Option<String>,
}

/// A configuration file split into the runtime's `[runtime]` section and the
/// rest, which belongs to core's `ServerConfig`.
#[derive(Clone, Debug, Default)]
pub struct FileConfig {
    pub runtime: RuntimeConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
    /// `[[reverse_connect]]`: clients the server dials (Reverse Connect, [`crate::reverse`]).
    pub reverse_connect: Vec<crate::reverse::ReverseConnectConfig>,
    /// Every other top-level key, for core.
    pub server: toml::Table,
}

impl FileConfig {
    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<FileConfig, String> {
        let mut table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let runtime = match table.remove("runtime") {
            Some(v) => v
                .try_into::<RuntimeConfig>()
                .map_err(|e| format!("[runtime]: {e}"))?,
            None => RuntimeConfig::default(),
        };
        runtime.validate()?;
        let metrics = match table.remove("metrics") {
            Some(v) => v
                .try_into::<MetricsConfig>()
                .map_err(|e| format!("[metrics]: {e}"))?,
            None => MetricsConfig::default(),
        };
        if let Some(l) = &metrics.listen {
            l.parse::<std::net::SocketAddr>()
                .map_err(|e| format!("metrics.listen = {l:?}: {e} (expected IP:PORT)"))?;
        }
        let log = match table.remove("log") {
            Some(v) => v
                .try_into::<LogConfig>()
                .map_err(|e| format!("[log]: {e}"))?,
            None => LogConfig::default(),
        };
        if let Some(f) = &log.filter {
            tracing_subscriber::EnvFilter::try_new(f)
                .map_err(|e| format!("log.filter = {f:?}: {e}"))?;
        }
        let reverse_connect = match table.remove("reverse_connect") {
            Some(v) => v
                .try_into::<Vec<crate::reverse::ReverseConnectConfig>>()
                .map_err(|e| format!("[[reverse_connect]]: {e}"))?,
            None => Vec::new(),
        };
        crate::reverse::validate_all(&reverse_connect)?;
        Ok(FileConfig {
            runtime,
            metrics,
            log,
            reverse_connect,
            server: table,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reverse_connect_entries_parse_and_are_checked() {
        let c = FileConfig::parse(
            "[[reverse_connect]]\nurl = \"opc.tcp://scada:4844\"\nidle_connections = 2\n\
             [[reverse_connect]]\nurl = \"opc.tcp://10.0.0.9:4845\"\nendpoint_url = \"opc.tcp://gw:4840\"\n",
        )
        .unwrap();
        assert_eq!(c.reverse_connect.len(), 2);
        assert_eq!(c.reverse_connect[0].idle_connections, 2);
        assert_eq!(c.reverse_connect[1].idle_connections, 1, "the default");
        assert_eq!(
            c.reverse_connect[1].endpoint_url.as_deref(),
            Some("opc.tcp://gw:4840")
        );
        assert!(!c.server.contains_key("reverse_connect"), "not core's");
        let e = FileConfig::parse("[[reverse_connect]]\nurl = \"opc.tcp://scada\"\n").unwrap_err();
        assert!(e.contains("port"), "{e}");
        assert!(
            FileConfig::parse("[[reverse_connect]]\nurl = \"opc.tcp://s:1\"\nidel = 1\n").is_err()
        );
    }

    #[test]
    fn empty_file_is_defaults() {
        let c = FileConfig::parse("").unwrap();
        assert_eq!(c.runtime, RuntimeConfig::default());
        assert!(c.server.is_empty());
    }

    #[test]
    fn runtime_keys_parse_and_unknown_keys_fail() {
        let c = FileConfig::parse(
            "[runtime]\nio_backend = \"epoll\"\ndistribution = \"least-connections\"\nring_entries = 256\n\
             stats_file = \"/tmp/x.json\"\n[limits]\nmax = 3\n",
        )
        .unwrap();
        assert_eq!(c.runtime.io_backend, IoBackend::Epoll);
        assert_eq!(c.runtime.distribution, Distribution::LeastConnections);
        assert_eq!(c.runtime.ring_entries, 256);
        assert!(c.server.contains_key("limits"));
        assert!(FileConfig::parse("[runtime]\nring_entrys = 3\n").is_err());
        assert!(FileConfig::parse("[runtime]\nring_entries = 1000\n").is_err());
        assert!(FileConfig::parse("[runtime]\nmax_connections_per_shard = 0\n").is_err());
        assert!(FileConfig::parse("[runtime]\nmax_connections_per_address = 0\n").is_err());
        assert!(FileConfig::parse("[runtime]\nmax_connections_per_shard = 100\n").is_ok());
    }

    #[test]
    fn io_mode_keys_parse_and_are_checked() {
        let c = FileConfig::parse(
            "[runtime]\nsqpoll = \"per-shard\"\nsqpoll_cpu = \"same\"\nsqpoll_idle_ms = 50\nbusy_poll_us = 20\n",
        )
        .unwrap();
        assert_eq!(c.runtime.sqpoll, Sqpoll::PerShard);
        assert_eq!(c.runtime.sqpoll_cpu, "same");
        assert_eq!(c.runtime.sqpoll_idle_ms, 50);
        assert_eq!(c.runtime.busy_poll_us, 20);
        assert_eq!(
            FileConfig::parse("[runtime]\nsqpoll = \"shared\"\n")
                .unwrap()
                .runtime
                .sqpoll,
            Sqpoll::Shared
        );
        assert!(FileConfig::parse("[runtime]\nsqpoll = \"always\"\n").is_err());
        let e = FileConfig::parse("[runtime]\nsqpoll = \"per-shard\"\nio_backend = \"epoll\"\n")
            .unwrap_err();
        assert!(e.contains("needs io_uring"), "{e}");
        let e = FileConfig::parse("[runtime]\nsqpoll_cpu = \"1\"\n").unwrap_err();
        assert!(e.contains("runtime.sqpoll is \"off\""), "{e}");
        assert!(
            FileConfig::parse("[runtime]\nsqpoll = \"per-shard\"\nsqpoll_idle_ms = 0\n").is_err()
        );
        assert!(
            FileConfig::parse("[runtime]\nsqpoll = \"per-shard\"\nsqpoll_idle_ms = 10001\n")
                .is_err()
        );
        assert!(FileConfig::parse("[runtime]\nbusy_poll_us = 10001\n").is_err());
        assert!(
            FileConfig::parse("[runtime]\nbusy_poll_us = 5\nio_backend = \"epoll\"\n").is_err()
        );
        assert_eq!("per-shard".parse::<Sqpoll>(), Ok(Sqpoll::PerShard));
        assert_eq!(Sqpoll::Shared.to_string(), "shared");
        let c = FileConfig::parse("[runtime]\nfixed_files = true\nzero_copy_send_min = 4096\n")
            .unwrap();
        assert!(c.runtime.fixed_files);
        assert_eq!(c.runtime.zero_copy_send_min, 4096);
        let d = RuntimeConfig::default();
        assert!(
            !d.fixed_files && d.zero_copy_send_min == 0,
            "both off by default"
        );
        let e = FileConfig::parse("[runtime]\nfixed_files = true\nio_backend = \"epoll\"\n")
            .unwrap_err();
        assert!(e.contains("runtime.fixed_files = false"), "{e}");
        let e = FileConfig::parse("[runtime]\nzero_copy_send_min = 1\nio_backend = \"epoll\"\n")
            .unwrap_err();
        assert!(e.contains("runtime.zero_copy_send_min = 0"), "{e}");
        assert!(FileConfig::parse("[runtime]\nzero_copy_send_min = 67108865\n").is_err());
        assert!(
            FileConfig::parse("[runtime]\nrecv_bundles = true\n")
                .unwrap()
                .runtime
                .recv_bundles
        );
        assert!(!RuntimeConfig::default().recv_bundles, "off by default");
        let e = FileConfig::parse("[runtime]\nrecv_bundles = true\nio_backend = \"epoll\"\n")
            .unwrap_err();
        assert!(e.contains("runtime.recv_bundles = false"), "{e}");
        let e =
            FileConfig::parse("[runtime]\nrecv_bundles = true\nmultishot = false\n").unwrap_err();
        assert!(e.contains("multishot"), "{e}");
    }

    #[test]
    fn fixed_send_buffer_and_napi_keys() {
        let d = RuntimeConfig::default();
        assert_eq!(
            (d.fixed_send_buffers, d.fixed_send_buffer_bytes),
            (0, 16384)
        );
        assert_eq!((d.napi_busy_poll_us, d.napi_prefer_busy_poll), (0, false));
        let c = FileConfig::parse(
            "[runtime]\nfixed_send_buffers = 64\nfixed_send_buffer_bytes = 8192\nnapi_busy_poll_us = 50\nnapi_prefer_busy_poll = true\n",
        )
        .unwrap();
        assert_eq!(c.runtime.fixed_send_buffers, 64);
        assert_eq!(c.runtime.fixed_send_buffer_bytes, 8192);
        assert_eq!(c.runtime.napi_busy_poll_us, 50);
        assert!(c.runtime.napi_prefer_busy_poll);
        for (bad, says) in [
            ("fixed_send_buffers = 3", "must be even"),
            ("fixed_send_buffers = 16386", "0..=16384"),
            ("fixed_send_buffer_bytes = 5000", "multiple of 4096"),
            ("fixed_send_buffer_bytes = 0", "multiple of 4096"),
            ("fixed_send_buffer_bytes = 131072", "4096..=65536"),
            (
                "fixed_send_buffers = 2\nio_backend = \"epoll\"",
                "runtime.fixed_send_buffers = 0",
            ),
            ("napi_busy_poll_us = 10001", "napi_busy_poll_us"),
            (
                "napi_busy_poll_us = 5\nio_backend = \"epoll\"",
                "runtime.napi_busy_poll_us = 0",
            ),
            ("napi_prefer_busy_poll = true", "napi_busy_poll_us is 0"),
        ] {
            let e = FileConfig::parse(&format!("[runtime]\n{bad}\n")).unwrap_err();
            assert!(e.contains(says), "{bad}: {says:?} in {e}");
        }
    }

    #[test]
    fn buffer_budgets_have_no_zero_and_stay_consistent() {
        let c = FileConfig::parse(
            "[runtime]\nmax_shard_buffered_bytes = 33554432\nmax_pending_output_bytes = 65536\n",
        )
        .unwrap();
        assert_eq!(c.runtime.max_shard_buffered_bytes, Some(32 << 20));
        // The override is each shard's budget; the pre-session share stays within it.
        assert_eq!(c.runtime.shard_budgets(4), (32 << 20, 8 << 20));
        // The defaults: 64 MiB in all, half of it for connections without a session,
        // shared out across the shards, 1 MiB per shard at least (64 KiB of pre-session share).
        let d = RuntimeConfig::default();
        assert_eq!(d.shard_budgets(1), (64 << 20, 32 << 20));
        assert_eq!(d.shard_budgets(2), (32 << 20, 16 << 20));
        assert_eq!(d.shard_budgets(128), (1 << 20, 256 << 10));
        // What connections without a session may hold, in all, on any number of shards.
        for n in 1..=uaring_core::config::MAX_SHARDS {
            let (shard, pre) = d.shard_budgets(n);
            assert!(
                pre * n <= d.max_pre_session_buffered_bytes,
                "{n} shards: {pre} each"
            );
            assert!(pre <= shard);
        }
        let e = FileConfig::parse("[runtime]\nmax_pre_session_buffered_bytes = 134217728\n")
            .unwrap_err();
        assert!(e.contains("max_pre_session_buffered_bytes"), "{e}");
        assert_eq!(c.runtime.max_pending_output_bytes, 64 << 10);
        let zero = FileConfig::parse("[runtime]\nmax_shard_buffered_bytes = 0\n").unwrap_err();
        assert!(zero.contains("max_shard_buffered_bytes"), "{zero}");
        assert!(FileConfig::parse("[runtime]\nmax_pending_output_bytes = 0\n").is_err());
        assert!(FileConfig::parse("[runtime]\nsend_stall_timeout_ms = 0\n").is_err());
        // The shard's budget must hold at least one connection's allowance.
        assert!(FileConfig::parse(
            "[runtime]\nmax_shard_buffered_bytes = 2097152\nmax_pending_output_bytes = 4194304\n"
        )
        .is_err());
    }
}
