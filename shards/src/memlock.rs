//! Locked-memory budget of the io_uring rings.
//!
//! An unprivileged process is charged against RLIMIT_MEMLOCK for pinned
//! io_uring memory: the SQ/CQ rings and SQE array (kernels before 5.12, and
//! any kernel without memcg accounting), registered buffers and the pages of
//! a provided-buffer ring. uaring models that charge per shard and keeps the
//! sum of all shards under the limit, so a configuration that starts as root
//! (which is never charged) also starts as a service user. The receive
//! buffers themselves are ordinary memory: they are handed to the kernel
//! through the buffer ring, not registered, and are not charged.

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
}

impl ShardBudget {
    pub fn new(ring_entries: u32, pbuf_entries: u32) -> ShardBudget {
        ShardBudget {
            sq_entries: ring_entries,
            cq_entries: ring_entries.saturating_mul(2),
            pbuf_entries,
        }
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
        self.ring_bytes() + self.pbuf_bytes()
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
        let limit = match self.limit_bytes {
            Some(l) => format!("{} KiB", l / 1024),
            None => "unlimited".to_string(),
        };
        write!(
            f,
            "io_uring setup needs {} KiB of locked memory ({} shards × {} KiB: ring_entries = {}, recv_buffers = {}) \
             but RLIMIT_MEMLOCK is {limit}: lower `runtime.ring_entries`/`runtime.recv_buffers` (or `runtime.shards`/--cpus) \
             in the config, raise the limit with `ulimit -l` / LimitMEMLOCK=, or use --io-backend epoll",
            self.needed_bytes.div_ceil(1024),
            self.shards,
            self.per_shard.total_bytes().div_ceil(1024),
            self.per_shard.sq_entries,
            self.per_shard.pbuf_entries,
        )
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
    let shards_u = shards.max(1) as u64;
    #[allow(clippy::unnecessary_map_or)] // Option::is_none_or needs Rust 1.82; MSRV is 1.80
    let fits = |b: &ShardBudget| limit.map_or(true, |l| b.total_bytes() * shards_u <= l);
    let mut entries = if ring_entries == 0 {
        AUTO_RING_ENTRIES
    } else {
        ring_entries
    };
    loop {
        let b = ShardBudget::new(entries, pbuf_entries);
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
        assert!(size_rings(4, 32768, 256, None).is_ok());
    }
}
