//! Limits on sessions, per shard (`[server.sessions]`).

use serde::{Deserialize, Serialize};

/// Limits on sessions, per shard. Every count is a hard cap, sized into pools at start.
///
/// Browse continuation points per session are limited by
/// `operation_limits.max_browse_continuation_points` (it is also what
/// ServerCapabilities.MaxBrowseContinuationPoints reports, so it has exactly one source).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionLimits {
    /// Most sessions one shard holds at once (created and not yet closed or timed out).
    /// The session pool is sized from it; one more CreateSession is BadTooManySessions.
    /// 1..=16,777,215.
    pub max_sessions_per_shard: u32,
    /// Shortest session timeout the server grants, milliseconds: a smaller requested
    /// timeout is raised to it. > 0.
    pub session_timeout_min_ms: f64,
    /// Longest session timeout the server grants, milliseconds: a larger (or a zero,
    /// negative or NaN) requested timeout is lowered to it. >= `session_timeout_min_ms`.
    pub session_timeout_max_ms: f64,
    /// Rejects a request (ServiceFault BadTimeout) whose RequestHeader.timestamp is older
    /// than this many milliseconds by the server's clock. `None`: not checked — the default,
    /// because client clocks are often skewed and Part 4 makes the timestamp informational.
    /// A null timestamp is never rejected.
    pub max_request_age_ms: Option<u32>,
}

impl Default for SessionLimits {
    fn default() -> Self {
        SessionLimits {
            max_sessions_per_shard: 1000,
            session_timeout_min_ms: 10_000.0,
            session_timeout_max_ms: 3_600_000.0,
            max_request_age_ms: None,
        }
    }
}

impl SessionLimits {
    /// Checks every field; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_sessions_per_shard == 0 || self.max_sessions_per_shard > 0xFF_FFFF {
            return Err("sessions.max_sessions_per_shard must be 1..=16777215".into());
        }
        if !(self.session_timeout_min_ms.is_finite() && self.session_timeout_min_ms > 0.0) {
            return Err("sessions.session_timeout_min_ms must be a positive number".into());
        }
        if !(self.session_timeout_max_ms.is_finite()
            && self.session_timeout_max_ms >= self.session_timeout_min_ms)
        {
            return Err(
                "sessions.session_timeout_max_ms must be a number >= session_timeout_min_ms".into(),
            );
        }
        if self.max_request_age_ms == Some(0) {
            return Err("sessions.max_request_age_ms is 0 (use null to disable the check)".into());
        }
        Ok(())
    }

    /// The revised session timeout for a requested one (Part 4 CreateSession).
    pub fn revise_timeout_ms(&self, requested_ms: f64) -> f64 {
        let (lo, hi) = (self.session_timeout_min_ms, self.session_timeout_max_ms);
        if !requested_ms.is_finite() || requested_ms <= 0.0 {
            hi
        } else {
            requested_ms.clamp(lo, hi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revise_timeout_clamps() {
        let l = SessionLimits::default();
        assert_eq!(l.revise_timeout_ms(1.0), l.session_timeout_min_ms);
        assert_eq!(l.revise_timeout_ms(1e12), l.session_timeout_max_ms);
        assert_eq!(l.revise_timeout_ms(0.0), l.session_timeout_max_ms);
        assert_eq!(l.revise_timeout_ms(f64::NAN), l.session_timeout_max_ms);
        assert_eq!(l.revise_timeout_ms(60_000.0), 60_000.0);
        l.validate().unwrap();
    }

    #[test]
    fn zero_limits_are_rejected() {
        let l = SessionLimits {
            max_sessions_per_shard: 0,
            ..SessionLimits::default()
        };
        assert!(l.validate().is_err());
        let l = SessionLimits {
            max_request_age_ms: Some(0),
            ..SessionLimits::default()
        };
        assert!(l.validate().is_err());
        let l = SessionLimits {
            session_timeout_max_ms: 1.0,
            ..SessionLimits::default()
        };
        assert!(l.validate().is_err());
    }
}
