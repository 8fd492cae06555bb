//! Failed-login rate limiting per client address: a token bucket per address in a bounded map.
//!
//! No clock is read here: every call takes the caller's time in milliseconds.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::status;

/// Limiter settings.
#[derive(Clone, Copy, Debug)]
pub struct LoginLimiterConfig {
    /// Failed attempts an address may make in a burst.
    pub burst: u32,
    /// One failed attempt is forgiven every `refill_interval_ms`.
    pub refill_interval_ms: u64,
    /// Most addresses tracked; when full, a fully refilled (or the least recently seen) entry is
    /// evicted.
    pub addresses_max: usize,
}

impl Default for LoginLimiterConfig {
    fn default() -> Self {
        LoginLimiterConfig { burst: 5, refill_interval_ms: 12_000, addresses_max: 4096 }
    }
}

#[derive(Clone, Copy, Debug)]
struct Bucket {
    /// Tokens in thousandths, so refills are exact without floats.
    tokens_milli: u64,
    updated_ms: u64,
}

/// Token bucket per client address for failed logins.
#[derive(Debug)]
pub struct LoginLimiter {
    config: LoginLimiterConfig,
    buckets: HashMap<IpAddr, Bucket>,
}

impl LoginLimiter {
    /// A limiter with a map preallocated for `addresses_max` entries.
    pub fn new(config: LoginLimiterConfig) -> Self {
        let config = LoginLimiterConfig {
            burst: config.burst.max(1),
            refill_interval_ms: config.refill_interval_ms.max(1),
            addresses_max: config.addresses_max.max(1),
        };
        LoginLimiter { config, buckets: HashMap::with_capacity(config.addresses_max) }
    }

    fn full_milli(&self) -> u64 {
        u64::from(self.config.burst) * 1000
    }

    fn refilled(&self, b: Bucket, now_ms: u64) -> Bucket {
        let elapsed = now_ms.saturating_sub(b.updated_ms);
        let add = elapsed.saturating_mul(1000) / self.config.refill_interval_ms;
        Bucket {
            tokens_milli: b.tokens_milli.saturating_add(add).min(self.full_milli()),
            updated_ms: now_ms.max(b.updated_ms),
        }
    }

    /// Whether `addr` may attempt a login now: `Ok(())`, or `Err(BadTooManyOperations)` —
    /// callers usually answer the client BadUserAccessDenied without checking the password.
    pub fn check(&self, addr: IpAddr, now_ms: u64) -> Result<(), u32> {
        match self.buckets.get(&addr) {
            None => Ok(()),
            Some(b) => {
                if self.refilled(*b, now_ms).tokens_milli >= 1000 {
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
        let current = match self.buckets.get(&addr) {
            Some(b) => self.refilled(*b, now_ms),
            None => {
                if self.buckets.len() >= self.config.addresses_max {
                    self.evict(now_ms);
                }
                Bucket { tokens_milli: full, updated_ms: now_ms }
            }
        };
        let next = Bucket {
            tokens_milli: current.tokens_milli.saturating_sub(1000),
            updated_ms: current.updated_ms,
        };
        self.buckets.insert(addr, next);
    }

    /// Records a successful login: the address's failures are forgotten.
    pub fn record_success(&mut self, addr: IpAddr) {
        self.buckets.remove(&addr);
    }

    /// Number of tracked addresses.
    pub fn tracked(&self) -> usize {
        self.buckets.len()
    }

    fn evict(&mut self, now_ms: u64) {
        let full = self.full_milli();
        // Prefer an entry that has refilled completely (it carries no information any more),
        // else the one updated longest ago.
        let mut victim: Option<(IpAddr, bool, u64)> = None;
        for (addr, b) in &self.buckets {
            let is_full = self.refilled(*b, now_ms).tokens_milli >= full;
            let better = match victim {
                None => true,
                Some((_, v_full, v_updated)) => {
                    (is_full && !v_full) || (is_full == v_full && b.updated_ms < v_updated)
                }
            };
            if better {
                victim = Some((*addr, is_full, b.updated_ms));
            }
        }
        if let Some((addr, _, _)) = victim {
            self.buckets.remove(&addr);
        }
    }
}
