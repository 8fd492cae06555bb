//! io_uring building blocks: ring setup with feature probing, the provided
//! buffer ring, and the event loop ([`UringLoop`](crate::uring::UringLoop)).
//!
//! These are public so the load client (uaring-harness) can run on the same
//! loop as the server.

mod bufring;
pub(crate) mod sendbuf;
pub(crate) mod uring_loop;

pub use bufring::BufRing;
pub use uring_loop::UringLoop;

use std::fmt;
use std::io;
use std::os::fd::RawFd;

use io_uring::{opcode, IoUring, Probe};

/// Setup flags that were accepted, and opcodes/features the kernel offers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    pub single_issuer: bool,
    pub defer_taskrun: bool,
    pub coop_taskrun: bool,
    pub submit_all: bool,
    /// IORING_FEAT_EXT_ARG: wait with a timeout in io_uring_enter.
    pub ext_arg: bool,
    /// IORING_FEAT_MIN_TIMEOUT (6.12): wait for several completions for a bounded time,
    /// then for the first one. Turned off by the loop when `LoopConfig::min_timeout` is
    /// false or the kernel rejects a min-wait.
    pub min_timeout: bool,
    /// IORING_FEAT_NODROP: completions are never lost on CQ overflow.
    pub nodrop: bool,
    /// IORING_FEAT_FAST_POLL.
    pub fast_poll: bool,
    /// Always false: the ring's fd is not registered (IORING_REGISTER_RING_FDS). io-uring
    /// 0.7.16 keeps the registered index in a `Submitter`, which `IoUring::submitter` makes
    /// afresh each call, so no enter would use it; and the registration keeps the ring (and a
    /// SQPOLL ring's poller thread) alive until its thread exits.
    pub registered_ring_fd: bool,
    /// Opcodes from the probe.
    pub op_accept: bool,
    pub op_recv: bool,
    pub op_send: bool,
    pub op_timeout: bool,
    pub op_async_cancel: bool,
    pub op_read: bool,
    pub op_msg_ring: bool,
    pub op_shutdown: bool,
    /// Provided-buffer ring registration works (5.19+). Set by the loop after registering.
    pub pbuf_ring: bool,
    /// Multishot accept/recv are used (turned off at run time when the kernel answers EINVAL).
    pub multishot: bool,
    pub sq_entries: u32,
    pub cq_entries: u32,
    /// IORING_SETUP_SQPOLL: a kernel thread polls the submission queue.
    pub sqpoll: bool,
    /// The ring shares the poller of another ring (IORING_SETUP_ATTACH_WQ).
    pub sqpoll_attached: bool,
    /// The CPU the poller is bound to (IORING_SETUP_SQ_AFF); `None`: any CPU.
    pub sqpoll_cpu: Option<u32>,
    /// IORING_SETUP_TASKRUN_FLAG: the kernel flags pending task work in the SQ ring, so a
    /// peek of the completion queue (busy polling) knows when to enter the kernel.
    pub taskrun_flag: bool,
    /// IORING_OP_SEND_ZC (6.0) is offered.
    pub op_send_zc: bool,
    /// Slots of the sparse file table registered in the ring (`runtime.fixed_files`); 0: none.
    pub fixed_files: u32,
    /// IORING_FEAT_RECVSEND_BUNDLE (6.10): one receive fills several provided buffers.
    pub recv_bundle: bool,
    /// Slots of the sparse buffer table registered in the ring (`runtime.fixed_send_buffers`);
    /// 0: none. The loop fills them with its registered send buffers.
    pub fixed_send_buffers: u32,
    /// Plain sends (IORING_OP_SEND) may name a registered buffer too (IORING_RECVSEND_FIXED_BUF;
    /// zero-copy sends always may). Set by the loop after it tried one.
    pub fixed_send_plain: bool,
    /// NAPI busy polling is registered on the ring with this timeout, µs (0: not registered).
    pub napi_busy_poll_us: u32,
}

impl Features {
    /// One line for the log.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        parts.push(format!("sq={} cq={}", self.sq_entries, self.cq_entries));
        let flags = [
            (self.sqpoll, "SQPOLL"),
            (self.single_issuer, "SINGLE_ISSUER"),
            (self.defer_taskrun, "DEFER_TASKRUN"),
            (self.coop_taskrun, "COOP_TASKRUN"),
            (self.taskrun_flag, "TASKRUN_FLAG"),
            (self.submit_all, "SUBMIT_ALL"),
            (self.ext_arg, "EXT_ARG"),
            (self.min_timeout, "MIN_TIMEOUT"),
            (self.nodrop, "NODROP"),
            (self.fast_poll, "FAST_POLL"),
            (self.pbuf_ring, "PBUF_RING"),
            (self.multishot, "MULTISHOT_ACCEPT_RECV"),
            (self.op_msg_ring, "MSG_RING"),
            (self.fixed_files > 0, "FIXED_FILES"),
            (self.op_send_zc, "SEND_ZC"),
            (self.recv_bundle, "RECVSEND_BUNDLE"),
            (self.fixed_send_buffers > 0, "FIXED_SEND_BUFFERS"),
            (self.napi_busy_poll_us > 0, "NAPI"),
        ];
        let on: Vec<&str> = flags.iter().filter(|(b, _)| *b).map(|(_, n)| *n).collect();
        let off: Vec<&str> = flags.iter().filter(|(b, _)| !*b).map(|(_, n)| *n).collect();
        parts.push(format!("on: {}", on.join(",")));
        if self.sqpoll {
            let cpu = self
                .sqpoll_cpu
                .map_or("any CPU".to_string(), |c| format!("CPU {c}"));
            let whose = if self.sqpoll_attached {
                "shares shard 0's poller"
            } else {
                "own poller"
            };
            parts.push(format!("sqpoll: {whose} on {cpu}"));
        }
        if self.fixed_files > 0 {
            parts.push(format!("fixed files: {} slots", self.fixed_files));
        }
        if self.fixed_send_buffers > 0 {
            parts.push(format!(
                "fixed send buffers: {} ({})",
                self.fixed_send_buffers,
                if self.fixed_send_plain {
                    "zero-copy and plain sends"
                } else {
                    "zero-copy sends only: the kernel refuses them in IORING_OP_SEND"
                }
            ));
        }
        if self.napi_busy_poll_us > 0 {
            parts.push(format!("napi: busy poll {} µs", self.napi_busy_poll_us));
        }
        if !off.is_empty() {
            parts.push(format!("off: {}", off.join(",")));
        }
        parts.join("; ")
    }

    /// The opcodes the loop cannot do without.
    pub fn missing_required(&self) -> Option<&'static str> {
        if !self.op_accept {
            Some("IORING_OP_ACCEPT")
        } else if !self.op_recv {
            Some("IORING_OP_RECV")
        } else if !self.op_send {
            Some("IORING_OP_SEND")
        } else if !self.op_async_cancel {
            Some("IORING_OP_ASYNC_CANCEL")
        } else if !self.op_read {
            Some("IORING_OP_READ")
        } else {
            None
        }
    }
}

/// Why a ring could not be set up.
#[derive(Debug)]
pub enum SetupError {
    /// io_uring_setup failed (ENOSYS, EPERM from seccomp or kernel.io_uring_disabled, ENOMEM, …).
    Setup(io::Error),
    /// The kernel lacks an opcode the loop needs.
    Missing(&'static str),
    /// The kernel refused the SQPOLL ring that was asked for (`runtime.sqpoll`); the ring is
    /// never set up without it instead.
    Sqpoll(io::Error, SqpollSetup),
    /// The kernel refused the sparse file table of this many slots (`runtime.fixed_files`).
    FixedFiles(io::Error, u32),
    /// Zero-copy sends were asked for (`runtime.zero_copy_send_min`) and the kernel lacks
    /// IORING_OP_SEND_ZC.
    SendZc,
    /// Receive bundles were asked for and the kernel has no IORING_FEAT_RECVSEND_BUNDLE.
    RecvBundle,
    /// The kernel refused the registered send buffers (`runtime.fixed_send_buffers`): this
    /// many of this many bytes each.
    FixedSendBuffers(io::Error, u32, u32),
    /// Registered send buffers were asked for without zero-copy sends, and the kernel names
    /// registered buffers in zero-copy sends only.
    FixedSendNeedsZc,
    /// The kernel refused NAPI busy polling (`runtime.napi_busy_poll_us`) on the ring.
    Napi(io::Error),
}

/// The soft RLIMIT_NOFILE (`None`: unknown or unlimited).
fn nofile_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0
        || rl.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(rl.rlim_cur)
}

/// The kernel's bound on a ring's file table (IORING_MAX_FIXED_FILES).
pub const MAX_FIXED_FILES: u32 = 1 << 20;

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::Setup(e) => {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOSYS) => " (the kernel has no io_uring)",
                    Some(libc::EPERM) => " (blocked by seccomp or kernel.io_uring_disabled)",
                    Some(libc::ENOMEM) => " (locked memory: RLIMIT_MEMLOCK too low for the rings)",
                    _ => "",
                };
                write!(f, "io_uring_setup failed: {e}{hint}")
            }
            SetupError::Missing(op) => write!(f, "the kernel's io_uring lacks {op}"),
            SetupError::Sqpoll(e, s) => {
                let cpu = s.cpu.map_or("any CPU".to_string(), |c| format!("CPU {c}"));
                let what = if s.attach_fd.is_some() {
                    format!("attaching to shard 0's poller (runtime.sqpoll = \"shared\", poller on {cpu})")
                } else {
                    format!("a poller thread on {cpu}, idle {} ms", s.idle_ms)
                };
                let hint = match e.raw_os_error() {
                    Some(libc::EINVAL) if s.cpu.is_some() => format!(
                        "the kernel does not accept {cpu} for the poller (offline, outside this process's \
                         cpuset, or SQPOLL unsupported): choose another runtime.sqpoll_cpu / --sqpoll-cpu \
                         (`uaring topology` lists the CPUs), or set runtime.sqpoll = \"off\""
                    ),
                    Some(libc::EINVAL) => "this kernel does not support SQPOLL with the setup flags the loop can use: \
                         set runtime.sqpoll = \"off\"".to_string(),
                    Some(libc::EPERM) => "SQPOLL is not permitted here (kernels before 5.11 need CAP_SYS_ADMIN; \
                         seccomp or kernel.io_uring_disabled may forbid it): grant the capability or set \
                         runtime.sqpoll = \"off\"".to_string(),
                    Some(libc::ENOMEM) => "out of locked memory (RLIMIT_MEMLOCK) or memory for the poller: raise \
                         `ulimit -l` / LimitMEMLOCK= (see the budget in the start log), or set runtime.sqpoll = \"off\"".to_string(),
                    _ => "set runtime.sqpoll = \"off\" to run without a kernel poller".to_string(),
                };
                write!(f, "io_uring SQPOLL refused ({what}): {e}: {hint}")
            }
            SetupError::FixedFiles(e, n) => {
                let hint = match (e.raw_os_error(), nofile_limit()) {
                    (Some(libc::EMFILE), _) if *n > MAX_FIXED_FILES => format!(
                        "the kernel allows at most {MAX_FIXED_FILES} slots per ring: lower \
                         runtime.max_connections_per_shard by {} to {MAX_FIXED_FILES}, or set \
                         runtime.fixed_files = false",
                        n - MAX_FIXED_FILES
                    ),
                    (Some(libc::EMFILE), Some(lim)) => format!(
                        "the table may not be larger than the open-files limit (RLIMIT_NOFILE {lim}): \
                         raise it by {} to at least {n} (`ulimit -n {n}` / LimitNOFILE={n}), lower \
                         runtime.max_connections_per_shard to {lim}, or set runtime.fixed_files = false",
                        u64::from(*n).saturating_sub(lim)
                    ),
                    (Some(libc::EINVAL), _) => "this kernel has no sparse file tables (Linux 5.19+): \
                         set runtime.fixed_files = false"
                        .to_string(),
                    (Some(libc::ENOMEM), _) => "no kernel memory for the table (it is charged to \
                         the memory cgroup, not to RLIMIT_MEMLOCK): lower \
                         runtime.max_connections_per_shard or set runtime.fixed_files = false"
                        .to_string(),
                    _ => "set runtime.fixed_files = false".to_string(),
                };
                write!(
                    f,
                    "io_uring fixed files refused (a sparse table of {n} slots, \
                     runtime.max_connections_per_shard): {e}: {hint}"
                )
            }
            SetupError::RecvBundle => write!(
                f,
                "receive bundles refused: the kernel's io_uring lacks IORING_FEAT_RECVSEND_BUNDLE (Linux 6.10+): \
                 set runtime.recv_bundles = false"
            ),
            SetupError::FixedSendBuffers(e, n, bytes) => {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOMEM) => format!(
                        "out of locked memory: the kernel pins and charges every page of them to \
                         RLIMIT_MEMLOCK (without CAP_IPC_LOCK): raise `ulimit -l` / LimitMEMLOCK= by \
                         at least {} KiB per shard, or lower runtime.fixed_send_buffers",
                        crate::memlock::fixed_send_bytes(*n, *bytes).div_ceil(1024)
                    ),
                    Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => {
                        "this kernel cannot update a sparse buffer table (Linux 5.19+): \
                         set runtime.fixed_send_buffers = 0"
                            .to_string()
                    }
                    _ => "set runtime.fixed_send_buffers = 0".to_string(),
                };
                write!(
                    f,
                    "io_uring registered send buffers refused ({n} of {bytes} bytes, \
                     runtime.fixed_send_buffers / fixed_send_buffer_bytes): {e}: {hint}"
                )
            }
            SetupError::FixedSendNeedsZc => write!(
                f,
                "registered send buffers refused: this kernel sends from registered buffers in \
                 zero-copy sends only (IORING_OP_SEND_ZC; IORING_OP_SEND refuses \
                 IORING_RECVSEND_FIXED_BUF), and runtime.zero_copy_send_min is 0: set it (1 sends \
                 every batch zero-copy from them) or set runtime.fixed_send_buffers = 0"
            ),
            SetupError::Napi(e) => {
                let hint = match e.raw_os_error() {
                    Some(libc::EINVAL) => {
                        "this kernel's io_uring has no IORING_REGISTER_NAPI (Linux 6.9+)"
                    }
                    Some(libc::EOPNOTSUPP) => {
                        "this kernel was built without busy polling (CONFIG_NET_RX_BUSY_POLL)"
                    }
                    _ => "the kernel refused it",
                };
                write!(
                    f,
                    "NAPI busy polling refused (runtime.napi_busy_poll_us): {e}: {hint}: \
                     set runtime.napi_busy_poll_us = 0"
                )
            }
            SetupError::SendZc => write!(
                f,
                "zero-copy sends refused: the kernel's io_uring lacks IORING_OP_SEND_ZC (Linux 6.0+): \
                 set runtime.zero_copy_send_min = 0"
            ),
        }
    }
}

impl std::error::Error for SetupError {}

impl SetupError {
    pub fn is_enomem(&self) -> bool {
        matches!(self, SetupError::Setup(e) if e.raw_os_error() == Some(libc::ENOMEM))
    }
}

/// A SQPOLL ring to set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SqpollSetup {
    /// sq_thread_idle: how long the poller polls an empty queue before it sleeps, ms.
    pub idle_ms: u32,
    /// The poller's CPU (IORING_SETUP_SQ_AFF); `None`: not bound.
    pub cpu: Option<u32>,
    /// Share the poller of this ring (IORING_SETUP_ATTACH_WQ) instead of starting one.
    pub attach_fd: Option<RawFd>,
}

/// How a ring is set up beyond its size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingOptions {
    /// Kernel submission polling; when set, every try carries it (no silent fallback).
    pub sqpoll: Option<SqpollSetup>,
    /// IORING_SETUP_TASKRUN_FLAG with DEFER_TASKRUN (busy polling peeks the CQ and must
    /// know when deferred completions wait for an enter).
    pub taskrun_flag: bool,
    /// Register a sparse file table of this many slots (0: none); refused, never skipped.
    pub fixed_files: u32,
    /// The ring must offer IORING_OP_SEND_ZC (zero-copy sends were asked for).
    pub send_zc: bool,
    /// The ring must offer receive bundles (`runtime.recv_bundles` was asked for).
    pub recv_bundle: bool,
    /// Register a sparse buffer table of this many slots (0: none), for the loop's
    /// registered send buffers; refused, never skipped.
    pub fixed_send_buffers: u32,
    /// Their size (for the messages; the loop allocates them).
    pub fixed_send_buffer_bytes: u32,
    /// Register the ring for NAPI busy polling; refused, never skipped.
    pub napi: Option<NapiSetup>,
}

/// NAPI busy polling of a ring (IORING_REGISTER_NAPI, dynamic tracking: the kernel polls the
/// NAPI ids of the sockets the ring's operations touch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NapiSetup {
    pub busy_poll_us: u32,
    pub prefer_busy_poll: bool,
}

/// Creates a ring of `entries` SQ entries (CQ twice that) on the calling
/// thread, trying the best setup flags first and retrying without the ones
/// the kernel rejects (EINVAL): SINGLE_ISSUER + DEFER_TASKRUN, then
/// COOP_TASKRUN + TASKRUN_FLAG, then none. Probes the opcodes.
///
/// With SINGLE_ISSUER the ring must only be used from this thread.
pub fn setup_ring(entries: u32) -> Result<(IoUring, Features), SetupError> {
    setup_ring_with(entries, &RingOptions::default())
}

/// [`setup_ring`] with options. With SQPOLL the tries are SQPOLL + SINGLE_ISSUER + SUBMIT_ALL,
/// SQPOLL + SUBMIT_ALL, then SQPOLL alone: the kernel refuses DEFER_TASKRUN and COOP_TASKRUN
/// with SQPOLL (EINVAL, Linux 6.18), and the poller runs the task work itself. A kernel that
/// refuses all of them is [`SetupError::Sqpoll`]: the ring is never set up without the poller
/// that was asked for.
pub fn setup_ring_with(
    entries: u32,
    opts: &RingOptions,
) -> Result<(IoUring, Features), SetupError> {
    #[derive(Clone, Copy)]
    struct Try {
        single_issuer: bool,
        defer: bool,
        coop: bool,
        submit_all: bool,
    }
    let sqpoll_tries = [
        Try {
            single_issuer: true,
            defer: false,
            coop: false,
            submit_all: true,
        },
        Try {
            single_issuer: false,
            defer: false,
            coop: false,
            submit_all: true,
        },
        Try {
            single_issuer: false,
            defer: false,
            coop: false,
            submit_all: false,
        },
    ];
    let tries = [
        Try {
            single_issuer: true,
            defer: true,
            coop: false,
            submit_all: true,
        },
        Try {
            single_issuer: true,
            defer: false,
            coop: true,
            submit_all: true,
        },
        Try {
            single_issuer: false,
            defer: false,
            coop: true,
            submit_all: false,
        },
        Try {
            single_issuer: false,
            defer: false,
            coop: false,
            submit_all: false,
        },
    ];
    let mut last_err = None;
    let list: &[Try] = if opts.sqpoll.is_some() {
        &sqpoll_tries
    } else {
        &tries
    };
    for &t in list {
        let mut b = IoUring::builder();
        b.setup_cqsize(entries.saturating_mul(2)).setup_clamp();
        if let Some(sq) = &opts.sqpoll {
            b.setup_sqpoll(sq.idle_ms);
            if let Some(cpu) = sq.cpu {
                b.setup_sqpoll_cpu(cpu);
            }
            if let Some(fd) = sq.attach_fd {
                b.setup_attach_wq(fd);
            }
        }
        if t.single_issuer {
            b.setup_single_issuer();
        }
        if t.defer {
            b.setup_defer_taskrun();
            if opts.taskrun_flag {
                b.setup_taskrun_flag();
            }
        }
        if t.coop {
            b.setup_coop_taskrun().setup_taskrun_flag();
        }
        if t.submit_all {
            b.setup_submit_all();
        }
        match b.build(entries) {
            Ok(ring) => {
                let mut f = Features {
                    single_issuer: t.single_issuer,
                    defer_taskrun: t.defer,
                    coop_taskrun: t.coop,
                    submit_all: t.submit_all,
                    taskrun_flag: t.coop || (t.defer && opts.taskrun_flag),
                    sqpoll: opts.sqpoll.is_some(),
                    sqpoll_attached: opts.sqpoll.is_some_and(|s| s.attach_fd.is_some()),
                    sqpoll_cpu: opts.sqpoll.and_then(|s| s.cpu),
                    ..Features::default()
                };
                let p = ring.params();
                f.ext_arg = p.is_feature_ext_arg();
                f.min_timeout = p.is_feature_min_timeout();
                f.nodrop = p.is_feature_nodrop();
                f.fast_poll = p.is_feature_fast_poll();
                f.recv_bundle = p.is_feature_recvsend_bundle();
                f.sq_entries = p.sq_entries();
                f.cq_entries = p.cq_entries();
                let mut probe = Probe::new();
                if ring.submitter().register_probe(&mut probe).is_ok() {
                    f.op_accept = probe.is_supported(opcode::Accept::CODE);
                    f.op_recv = probe.is_supported(opcode::Recv::CODE);
                    f.op_send = probe.is_supported(opcode::Send::CODE);
                    f.op_timeout = probe.is_supported(opcode::Timeout::CODE);
                    f.op_async_cancel = probe.is_supported(opcode::AsyncCancel::CODE);
                    f.op_read = probe.is_supported(opcode::Read::CODE);
                    f.op_msg_ring = probe.is_supported(opcode::MsgRingData::CODE);
                    f.op_shutdown = probe.is_supported(opcode::Shutdown::CODE);
                    f.op_send_zc = probe.is_supported(opcode::SendZc::CODE);
                } else {
                    // IORING_REGISTER_PROBE is 5.6; everything we need is 5.6+ too,
                    // so a kernel without the probe cannot run the loop.
                    return Err(SetupError::Missing("IORING_REGISTER_PROBE"));
                }
                if let Some(op) = f.missing_required() {
                    return Err(SetupError::Missing(op));
                }
                if opts.send_zc && !f.op_send_zc {
                    return Err(SetupError::SendZc);
                }
                if opts.recv_bundle && !f.recv_bundle {
                    return Err(SetupError::RecvBundle);
                }
                if opts.fixed_files > 0 {
                    // Not locked memory: the kernel charges the table (8 bytes or so a slot)
                    // to the memory cgroup. It must not be larger than RLIMIT_NOFILE.
                    ring.submitter()
                        .register_files_sparse(opts.fixed_files)
                        .map_err(|e| SetupError::FixedFiles(e, opts.fixed_files))?;
                    f.fixed_files = opts.fixed_files;
                }
                if opts.fixed_send_buffers > 0 {
                    // Empty slots are not charged; the loop fills them (locked memory).
                    ring.submitter()
                        .register_buffers_sparse(opts.fixed_send_buffers)
                        .map_err(|e| {
                            SetupError::FixedSendBuffers(
                                e,
                                opts.fixed_send_buffers,
                                opts.fixed_send_buffer_bytes,
                            )
                        })?;
                    f.fixed_send_buffers = opts.fixed_send_buffers;
                }
                if let Some(n) = opts.napi {
                    let mut napi = io_uring::types::Napi::new()
                        .set_busy_poll_timeout(n.busy_poll_us)
                        .set_prefer_busy_poll(n.prefer_busy_poll);
                    ring.submitter()
                        .register_napi(&mut napi)
                        .map_err(SetupError::Napi)?;
                    f.napi_busy_poll_us = n.busy_poll_us;
                }
                return Ok((ring, f));
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last_err = Some(e),
            Err(e) => {
                return Err(match opts.sqpoll {
                    // ENOMEM without SQPOLL is the memlock case the runtime explains.
                    Some(sq) if e.raw_os_error() != Some(libc::ENOSYS) => SetupError::Sqpoll(e, sq),
                    _ => SetupError::Setup(e),
                });
            }
        }
    }
    let e = last_err.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL));
    Err(match opts.sqpoll {
        Some(sq) => SetupError::Sqpoll(e, sq),
        None => SetupError::Setup(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setup_and_probe() {
        match setup_ring(64) {
            Ok((_ring, f)) => {
                assert!(f.sq_entries >= 64);
                assert!(f.describe().contains("sq="));
            }
            // io_uring may be unavailable in a sandbox: then the failure is explained.
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn sqpoll_rings_keep_sqpoll_or_fail_with_advice() {
        let opts = |cpu: Option<u32>, attach_fd: Option<RawFd>| RingOptions {
            sqpoll: Some(SqpollSetup {
                idle_ms: 10,
                cpu,
                attach_fd,
            }),
            taskrun_flag: false,
            ..RingOptions::default()
        };
        let Ok((first, f)) = setup_ring_with(64, &opts(None, None)) else {
            eprintln!("no SQPOLL here (io_uring unavailable in this sandbox?)");
            return;
        };
        assert!(f.sqpoll && !f.sqpoll_attached && !f.defer_taskrun && !f.coop_taskrun);
        assert!(f.describe().contains("SQPOLL"), "{}", f.describe());
        use std::os::fd::AsRawFd;
        let (_second, f2) = setup_ring_with(64, &opts(None, Some(first.as_raw_fd()))).unwrap();
        assert!(f2.sqpoll && f2.sqpoll_attached);
        assert!(f2.describe().contains("shares shard 0's poller"));
        // A CPU that does not exist: the kernel says EINVAL, the message says what to change.
        let Err(e) = setup_ring_with(64, &opts(Some(100_000), None)) else {
            panic!("a poller on CPU 100000 was accepted");
        };
        let text = e.to_string();
        assert!(matches!(e, SetupError::Sqpoll(..)), "{text}");
        assert!(
            text.contains("CPU 100000") && text.contains("runtime.sqpoll = \"off\""),
            "{text}"
        );
        // Attaching to something that is not a ring is refused too, never set up alone.
        let Err(e) = setup_ring_with(64, &opts(None, Some(0))) else {
            panic!("attaching to fd 0 was accepted");
        };
        assert!(matches!(e, SetupError::Sqpoll(..)), "{e}");
    }

    #[test]
    fn fixed_file_tables_are_registered_or_refused_with_advice() {
        let opts = |n: u32| RingOptions {
            fixed_files: n,
            ..RingOptions::default()
        };
        let Ok((ring, f)) = setup_ring_with(64, &opts(16)) else {
            eprintln!("no fixed files here (io_uring unavailable in this sandbox?)");
            return;
        };
        assert_eq!(f.fixed_files, 16);
        assert!(
            f.describe().contains("fixed files: 16 slots"),
            "{}",
            f.describe()
        );
        // The table is there: a socket goes into slot 3 and out again.
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        use std::os::fd::AsRawFd;
        assert_eq!(
            ring.submitter()
                .register_files_update(3, &[sock.as_raw_fd()])
                .unwrap(),
            1
        );
        assert_eq!(ring.submitter().register_files_update(3, &[-1]).unwrap(), 1);
        // More slots than the kernel allows a ring: refused, with what to change.
        let Err(e) = setup_ring_with(64, &opts(MAX_FIXED_FILES + 1)) else {
            panic!("a table of more than IORING_MAX_FIXED_FILES slots was accepted");
        };
        let text = e.to_string();
        assert!(matches!(e, SetupError::FixedFiles(..)), "{text}");
        assert!(
            text.contains("runtime.fixed_files = false")
                && text.contains("max_connections_per_shard"),
            "{text}"
        );
    }
}
