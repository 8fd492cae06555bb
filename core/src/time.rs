//! Time is passed into core by the runtime; core never reads a clock.

use crate::types::DateTime;

/// The current time as seen by the caller: a monotonic reading for deadlines and the
/// wall-clock time for timestamps on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Now {
    /// Monotonic nanoseconds (CLOCK_MONOTONIC in the runtime). Deadlines are in this unit.
    pub mono_ns: u64,
    /// UTC wall-clock time.
    pub utc: DateTime,
}

impl Now {
    pub const fn new(mono_ns: u64, utc: DateTime) -> Self {
        Now { mono_ns, utc }
    }
    /// `mono_ns + ms` milliseconds, saturating.
    pub fn deadline_after_ms(&self, ms: f64) -> u64 {
        let add = (ms.max(0.0) * 1_000_000.0).min(u64::MAX as f64) as u64;
        self.mono_ns.saturating_add(add)
    }
    /// This instant advanced by `ns` (both clocks). For tests and simulations.
    pub fn advance_ns(&self, ns: u64) -> Now {
        Now {
            mono_ns: self.mono_ns.saturating_add(ns),
            utc: DateTime(self.utc.0.saturating_add((ns / 100) as i64)),
        }
    }
}
