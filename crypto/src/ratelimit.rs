//! Failed-login and handshake rate limiting per client address: a token bucket per address in a
//! fixed-size, set-associative table (allocated once, never grown).
//!
//! The table holds `addresses_max` entries (rounded up to a whole number of sets of
//! [`WAYS`]). An address hashes (SipHash with a per-process random key, so a client cannot
//! choose colliding addresses) to one set; a new address takes a free entry of its set, else
//! one that has refilled completely (it carries no information), else the one updated
//! longest ago. Memory is `addresses_max` × 48 bytes, and every operation touches one set.
//!
//! No clock is read here: every call takes the caller's time in milliseconds.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

use crate::status;

/// Entries per set of the table.
pub const WAYS: usize = 8;

/// Limiter settings.
#[derive(Clone, Copy, Debug)]
pub struct LoginLimiterConfig {
    /// Failed attempts an address may make in a burst.
    pub burst: u32,
    /// One failed attempt is forgiven every `refill_interval_ms`.
    pub refill_interval_ms: u64,
    /// Most addresses tracked (the table's size); when an address's set is full, a fully
    /// refilled (or the least recently seen) entry of that set is evicted.
    pub addresses_max: usize,
}

impl Default for LoginLimiterConfig {
    fn default() -> Self {
        LoginLimiterConfig {
            burst: 5,
            refill_interval_ms: 12_000,
            addresses_max: 4096,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    addr: IpAddr,
    /// Tokens in thousandths, so refills are exact without floats.
    tokens_milli: u64,
    updated_ms: u64,
}

/// Token bucket per client address (see the module documentation).
#[derive(Debug)]
pub struct LoginLimiter {
    config: LoginLimiterConfig,
    entries: Box<[Option<Bucket>]>,
    sets: usize,
    hasher: RandomState,
    tracked: usize,
}

impl LoginLimiter {
    /// A limiter with its whole table allocated (`addresses_max` rounded up to a multiple of
    /// [`WAYS`]).
    pub fn new(config: LoginLimiterConfig) -> Self {
        let config = LoginLimiterConfig {
            burst: config.burst.max(1),
            refill_interval_ms: config.refill_interval_ms.max(1),
            addresses_max: config.addresses_max.max(1),
        };
        let sets = config.addresses_max.div_ceil(WAYS);
        let ways = config.addresses_max.min(WAYS);
        LoginLimiter {
            config,
            entries: vec![None; sets * ways].into_boxed_slice(),
            sets,
            hasher: RandomState::new(),
            tracked: 0,
        }
    }

    fn full_milli(&self) -> u64 {
        u64::from(self.config.burst) * 1000
    }

    fn refilled(&self, b: Bucket, now_ms: u64) -> Bucket {
        let elapsed = now_ms.saturating_sub(b.updated_ms);
        let add = elapsed.saturating_mul(1000) / self.config.refill_interval_ms;
        Bucket {
            addr: b.addr,
            tokens_milli: b.tokens_milli.saturating_add(add).min(self.full_milli()),
            updated_ms: now_ms.max(b.updated_ms),
        }
    }

    /// The entries of `addr`'s set, with their index in the table.
    fn set(&self, addr: IpAddr) -> impl Iterator<Item = (usize, Option<Bucket>)> + '_ {
        let ways = self.entries.len() / self.sets;
        let set = (self.hasher.hash_one(addr) % self.sets as u64) as usize;
        self.entries
            .iter()
            .copied()
            .enumerate()
            .skip(set * ways)
            .take(ways)
    }

    /// `addr`'s entry: its index and bucket.
    fn find(&self, addr: IpAddr) -> Option<(usize, Bucket)> {
        self.set(addr)
            .find_map(|(i, b)| b.filter(|b| b.addr == addr).map(|b| (i, b)))
    }

    /// Whether `addr` may attempt a login now: `Ok(())`, or `Err(BadTooManyOperations)` —
    /// callers usually answer the client BadUserAccessDenied without checking the password.
    pub fn check(&self, addr: IpAddr, now_ms: u64) -> Result<(), u32> {
        match self.find(addr) {
            None => Ok(()),
            Some((_, b)) => {
                if self.refilled(b, now_ms).tokens_milli >= 1000 {
                    Ok(())
                } else {
                    Err(status::BAD_TOO_MANY_OPERATIONS)
                }
            }
        }
    }

    /// Records a failed login from `addr`.
    pub fn record_failure(&mut self, addr: IpAddr, now_ms: u64) {
        let full = self.full_milli();
        let (index, current) = match self.find(addr) {
            Some((i, b)) => (i, Some(self.refilled(b, now_ms))),
            None => (self.victim(addr, now_ms), None),
        };
        let current = current.unwrap_or(Bucket {
            addr,
            tokens_milli: full,
            updated_ms: now_ms,
        });
        let Some(entry) = self.entries.get_mut(index) else {
            return;
        };
        if entry.is_none() {
            self.tracked += 1;
        }
        *entry = Some(Bucket {
            addr,
            tokens_milli: current.tokens_milli.saturating_sub(1000),
            updated_ms: current.updated_ms,
        });
    }

    /// Records a successful login: the address's failures are forgotten.
    pub fn record_success(&mut self, addr: IpAddr) {
        if let Some((i, _)) = self.find(addr) {
            if let Some(entry) = self.entries.get_mut(i) {
                *entry = None;
                self.tracked -= 1;
            }
        }
    }

    /// Number of tracked addresses.
    pub fn tracked(&self) -> usize {
        self.tracked
    }

    /// The entry a new address takes in its set: a free one, else one that has refilled
    /// completely, else the one updated longest ago.
    fn victim(&self, addr: IpAddr, now_ms: u64) -> usize {
        let full = self.full_milli();
        let mut best: Option<(usize, bool, u64)> = None;
        for (i, entry) in self.set(addr) {
            let Some(b) = entry else { return i };
            let is_full = self.refilled(b, now_ms).tokens_milli >= full;
            let better = match best {
                None => true,
                Some((_, v_full, v_updated)) => {
                    (is_full && !v_full) || (is_full == v_full && b.updated_ms < v_updated)
                }
            };
            if better {
                best = Some((i, is_full, b.updated_ms));
            }
        }
        best.map_or(0, |(i, _, _)| i)
    }
}
