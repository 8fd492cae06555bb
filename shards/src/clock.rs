//! The runtime's clock: CLOCK_MONOTONIC for deadlines, CLOCK_REALTIME for wire timestamps.

use uaring_core::{DateTime, Now};

#[allow(clippy::unnecessary_cast)] // time_t/c_long are not i64 everywhere
fn read(clock: libc::clockid_t) -> (i64, i64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime cannot fail for
    // these two clock ids on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as i64, ts.tv_nsec as i64)
}

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    let (s, ns) = read(libc::CLOCK_MONOTONIC);
    (s as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ns as u64)
}

/// The wall-clock time (CLOCK_REALTIME) as an OPC UA DateTime.
pub fn utc_now() -> DateTime {
    let (s, ns) = read(libc::CLOCK_REALTIME);
    // 100 ns ticks since 1601 in i64 arithmetic (this runs for every pushed value; the i128
    // division of `from_unix_nanos` showed in its profile). Seconds before 1970 or past
    // year 30828 do not come from CLOCK_REALTIME.
    DateTime(
        s.saturating_mul(10_000_000)
            .saturating_add(ns / 100)
            .saturating_add(DateTime::UNIX_EPOCH_TICKS),
    )
}

/// The current time for core.
pub fn now() -> Now {
    let mono = mono_ns();
    let (s, ns) = read(libc::CLOCK_REALTIME);
    Now::new(
        mono,
        DateTime::from_unix_nanos(s as i128 * 1_000_000_000 + ns as i128),
    )
}
