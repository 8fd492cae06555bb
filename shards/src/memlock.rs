//! Locked-memory budget of the io_uring rings.
//!
//! An unprivileged process is charged against RLIMIT_MEMLOCK for pinned
//! io_uring memory: the SQ/CQ rings and SQE array (kernels before 5.12, and
//! any kernel without memcg accounting), registered buffers and the pages of
//! a provided-buffer ring. uaring models that charge per shard and keeps the
//! sum of all shards under the limit, so a configuration that starts as root
//! (which is never charged) also starts as a service user. The receive
//! buffers themselves are ordinary memory: they are handed to the kernel
//! through the buffer ring, not registered, and are not charged. The
//! registered send buffers (`runtime.fixed_send_buffers`) are: the kernel pins
//! every page they touch when they are registered.

use std::fmt;

const PAGE: u64 = 4096;

fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE) * PAGE
}

/// The charged bytes of one shard's ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardBudget {
    pub sq_entries: u32,
    pub cq_entries: u32,
    pub pbuf_entries: u32,
    /// Registered send buffers (`runtime.fixed_send_buffers`; 0: none) …
    pub fixed_send_buffers: u32,
    /// … of this many bytes each.
    pub fixed_send_buffer_bytes: u32,
}

impl ShardBudget {
    pub fn new(ring_entries: u32, pbuf_entries: u32) -> ShardBudget {
        ShardBudget {
            sq_entries: ring_entries,
            cq_entries: ring_entries.saturating_mul(2),
            pbuf_entries,
            fixed_send_buffers: 0,
            fixed_send_buffer_bytes: 0,
        }
    }

    /// The same with `count` registered send buffers of `bytes` each.
    pub fn with_fixed_send(self, count: u32, bytes: u32) -> ShardBudget {
        ShardBudget {
            fixed_send_buffers: count,
            fixed_send_buffer_bytes: bytes,
            ..self
        }
    }

    /// The registered send buffers: the kernel pins, and charges, every page a buffer
    /// touches; a buffer from the allocator is not page-aligned, so it may touch one page
    /// more than its size.
    pub fn fixed_send_bytes(&self) -> u64 {
        fixed_send_bytes(self.fixed_send_buffers, self.fixed_send_buffer_bytes)
    }

    /// SQ ring (header + index array) and CQ ring share one mapping; SQEs are a second one.
    pub fn ring_bytes(&self) -> u64 {
        let rings = 512 + self.sq_entries as u64 * 4 + self.cq_entries as u64 * 16;
        pages(rings) + pages(self.sq_entries as u64 * 64)
    }

    /// The provided-buffer ring: 16 bytes per entry, pinned by the kernel.
    pub fn pbuf_bytes(&self) -> u64 {
        if self.pbuf_entries == 0 {
            0
        } else {
            pages(self.pbuf_entries as u64 * 16)
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.ring_bytes() + self.pbuf_bytes() + self.fixed_send_bytes()
    }
}

/// The locked bytes of `count` registered send buffers of `bytes` each ([`ShardBudget::fixed_send_bytes`]).
pub fn fixed_send_bytes(count: u32, bytes: u32) -> u64 {
    if count == 0 {
        0
    } else {
        u64::from(count) * (pages(u64::from(bytes)) + PAGE)
    }
}

/// RLIMIT_MEMLOCK (soft limit) in bytes; `None` when unlimited.
#[allow(clippy::unnecessary_cast)] // rlim_t is not u64 everywhere
pub fn memlock_limit_bytes() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) };
    if rc != 0 || lim.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    Some(lim.rlim_cur as u64)
}

/// The configuration does not fit the locked-memory limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemlockError {
    pub needed_bytes: u64,
    pub limit_bytes: Option<u64>,
    pub shards: usize,
    pub per_shard: ShardBudget,
}

impl fmt::Display for MemlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kib = |b: u64| b.div_ceil(1024);
        let limit = match self.limit_bytes {
            Some(l) => format!("{} KiB", l / 1024),
            None => "unlimited".to_string(),
        };
        let b = &self.per_shard;
        let fixed = b.fixed_send_bytes();
        let parts = if fixed == 0 {
            format!(
                "ring_entries = {}, recv_buffers = {}",
                b.sq_entries, b.pbuf_entries
            )
        } else {
            format!(
                "rings {} KiB (ring_entries = {}, recv_buffers = {}) + registered send buffers {} KiB \
                 (fixed_send_buffers = {} of fixed_send_buffer_bytes = {}, each charged a page more than its size)",
                kib(b.ring_bytes() + b.pbuf_bytes()),
                b.sq_entries,
                b.pbuf_entries,
                kib(fixed),
                b.fixed_send_buffers,
                b.fixed_send_buffer_bytes
            )
        };
        write!(
            f,
            "io_uring setup needs {} KiB of locked memory ({} shards × {} KiB: {parts}) but RLIMIT_MEMLOCK is {limit}",
            kib(self.needed_bytes),
            self.shards,
            kib(b.total_bytes()),
        )?;
        if let Some(l) = self.limit_bytes {
            let short = self.needed_bytes.saturating_sub(l);
            write!(
                f,
                ": raise it by {} KiB to at least {} KiB (`ulimit -l {}` / LimitMEMLOCK={}K)",
                kib(short),
                kib(self.needed_bytes),
                kib(self.needed_bytes),
                kib(self.needed_bytes)
            )?;
            if fixed > 0 {
                // The most buffers (even) that fit beside the rings.
                let per_buffer = fixed_send_bytes(1, b.fixed_send_buffer_bytes);
                let room =
                    (l / self.shards.max(1) as u64).saturating_sub(b.ring_bytes() + b.pbuf_bytes());
                let fit = ((room / per_buffer) & !1).min(u64::from(b.fixed_send_buffers));
                write!(
                    f,
                    ", lower runtime.fixed_send_buffers to {fit} (or fixed_send_buffer_bytes, \
                     runtime.shards/--cpus)"
                )?;
            }
        }
        write!(
            f,
            ", lower `runtime.ring_entries`/`runtime.recv_buffers` (or `runtime.shards`/--cpus) in the config"
        )?;
        if fixed == 0 {
            write!(f, ", or use --io-backend epoll")?;
        } else {
            write!(f, ", or set runtime.fixed_send_buffers = 0")?;
        }
        Ok(())
    }
}

impl std::error::Error for MemlockError {}

/// Ring sizing chosen for all shards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    pub ring_entries: u32,
    pub pbuf_entries: u32,
    pub needed_bytes: u64,
}

/// Default ring size before fitting to the limit.
pub const AUTO_RING_ENTRIES: u32 = 1024;
const AUTO_RING_ENTRIES_MIN: u32 = 64;

/// Picks ring sizes for `shards` shards under `limit` (None = unlimited).
/// `ring_entries == 0` means automatic: start at 1024 and halve to fit.
/// Explicit sizes are never changed: they fit or they are an error.
pub fn size_rings(
    shards: usize,
    ring_entries: u32,
    pbuf_entries: u32,
    limit: Option<u64>,
) -> Result<Sizing, MemlockError> {
    size_shards(shards, ring_entries, pbuf_entries, (0, 0), limit)
}

/// [`size_rings`] with `fixed_send` = (count, bytes) registered send buffers per shard, which
/// are never shrunk: automatic rings get smaller to make room for them, or the whole does
/// not fit.
pub fn size_shards(
    shards: usize,
    ring_entries: u32,
    pbuf_entries: u32,
    fixed_send: (u32, u32),
    limit: Option<u64>,
) -> Result<Sizing, MemlockError> {
    let shards_u = shards.max(1) as u64;
    #[allow(clippy::unnecessary_map_or)] // Option::is_none_or needs Rust 1.82; MSRV is 1.80
    let fits = |b: &ShardBudget| limit.map_or(true, |l| b.total_bytes() * shards_u <= l);
    let mut entries = if ring_entries == 0 {
        AUTO_RING_ENTRIES
    } else {
        ring_entries
    };
    loop {
        let b = ShardBudget::new(entries, pbuf_entries).with_fixed_send(fixed_send.0, fixed_send.1);
        if fits(&b) {
            return Ok(Sizing {
                ring_entries: entries,
                pbuf_entries,
                needed_bytes: b.total_bytes() * shards_u,
            });
        }
        if ring_entries != 0 || entries <= AUTO_RING_ENTRIES_MIN {
            return Err(MemlockError {
                needed_bytes: b.total_bytes() * shards_u,
                limit_bytes: limit,
                shards,
                per_shard: b,
            });
        }
        entries /= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_budget_figures() {
        let b = ShardBudget::new(1024, 256);
        // rings: 512 + 4 KiB + 32 KiB → 40 KiB; SQEs 64 KiB; pbuf 4 KiB.
        assert_eq!(b.ring_bytes(), 40 * 1024 + 64 * 1024);
        assert_eq!(b.pbuf_bytes(), 4096);
        assert_eq!(b.total_bytes(), 108 * 1024);
    }

    #[test]
    fn auto_sizing_shrinks_and_explicit_fails() {
        let limit = Some(8 << 20);
        let s = size_rings(2, 0, 256, limit).unwrap();
        assert_eq!(s.ring_entries, 1024);
        let s = size_rings(128, 0, 256, limit).unwrap();
        assert!(s.ring_entries < 1024 && s.needed_bytes <= 8 << 20);
        let e = size_rings(4, 32768, 256, limit).unwrap_err();
        assert!(e.needed_bytes > 8 << 20);
        let text = e.to_string();
        assert!(text.contains("RLIMIT_MEMLOCK is 8192 KiB"), "{text}");
        assert!(text.contains("--io-backend epoll"));
        assert!(
            text.contains("raise it by") && text.contains("LimitMEMLOCK="),
            "{text}"
        );
        assert!(size_rings(4, 32768, 256, None).is_ok());
    }

    #[test]
    fn registered_send_buffers_count_and_shrink_auto_rings() {
        // 16 KiB buffers touch at most 5 pages each.
        assert_eq!(fixed_send_bytes(2, 16384), 2 * 20 * 1024);
        assert_eq!(fixed_send_bytes(0, 16384), 0);
        let b = ShardBudget::new(1024, 256).with_fixed_send(64, 16384);
        assert_eq!(b.total_bytes(), 108 * 1024 + 64 * 20 * 1024);
        let limit = Some(8 << 20);
        // Two shards with 3.2 MiB each fit beside automatic rings of 1024 entries.
        let s = size_shards(2, 0, 256, (160, 16384), limit).unwrap();
        assert_eq!(s.ring_entries, 1024);
        assert!(s.needed_bytes <= 8 << 20);
        // 3.9 MiB each: the rings shrink to make room.
        let s = size_shards(2, 0, 256, (200, 16384), limit).unwrap();
        assert!(s.ring_entries < 1024, "{s:?}");
        // 4.9 MiB each does not fit: the message says by how much to raise the limit and how
        // many buffers would fit.
        let e = size_shards(2, 0, 256, (250, 16384), limit).unwrap_err();
        let text = e.to_string();
        assert!(e.needed_bytes > 8 << 20);
        let short = (e.needed_bytes - (8 << 20)).div_ceil(1024);
        assert!(text.contains(&format!("raise it by {short} KiB")), "{text}");
        assert!(
            text.contains("registered send buffers") && text.contains("fixed_send_buffers = 250"),
            "{text}"
        );
        // Beside the smallest automatic rings (12 KiB), 4,084 KiB per shard: 204 buffers.
        assert!(
            text.contains("lower runtime.fixed_send_buffers to 204 "),
            "the largest even count that fits: {text}"
        );
        assert!(text.contains("runtime.fixed_send_buffers = 0"), "{text}");
    }
}
