//! The whole server from raw bytes, deterministically: one fresh shard and connection per
//! input, a fixed start time, a seeded random number generator. Shared by the `server`
//! fuzz target (fuzz/src/lib.rs includes this file) and tests/fuzz_regressions.rs, which
//! replays every input the fuzzers ever crashed on (fuzz/regressions/).
#![allow(dead_code)]

#[path = "content.rs"]
mod content;
use std::sync::{Arc, OnceLock};

use uaring_core::config::ServerConfig;
use uaring_core::config::TransportLimits;
use uaring_core::random::ChaCha;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{DateTime, Now};

/// The fixed start time of every run.
pub fn start() -> Now {
    Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

/// The server every input runs against: the default configuration (Demo namespace,
/// events) built once (a few ms); each input gets a fresh shard over it. (Variable values
/// written by one input stay for the next, as they would in a server.)
pub fn shared() -> Arc<ServerShared> {
    static SHARED: OnceLock<Arc<ServerShared>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            content::new(ServerConfig::default(), start()).expect("default configuration")
        })
        .clone()
}

/// A fresh shard over [`shared`], default limits, random numbers from seed 1. Shard 1:
/// shard 0 runs the Demo event generator, whose catch-up after the time jumps costs
/// milliseconds per input.
pub fn shard() -> ServiceState {
    ServiceState::new(shared(), 1, Box::new(ChaCha::from_u64(1)))
        .with_transport_limits(TransportLimits::default())
}

/// The input is what a client sent on one TCP connection. It is fed in one piece at the
/// start time, then time jumps (Hello timeout, publishing, session and token expiry) run
/// the shard's and the connection's timers, then the socket closes. Checks: no panic;
/// once the connection says Close it says Close for ever; no channel outlives its
/// connection.
pub fn run_server(data: &[u8]) {
    let mut shard = shard();
    let mut now = start();
    let mut conn = ServerConnection::new(&mut shard, None, now);
    let mut out = Vec::new();
    let mut closed = conn.on_recv(&mut shard, now, data, &mut out) == ConnStatus::Close;
    let mut ready = Vec::new();
    for jump_ms in [100u64, 1_000, 10_000, 100_000, 4_000_000] {
        now = now.advance_ns(jump_ms * 1_000_000);
        shard.on_timer(now);
        ready.clear();
        shard.take_ready_channels(&mut ready);
        let st = conn.flush_deferred(&mut shard, now, &mut out);
        if closed {
            assert_eq!(st, ConnStatus::Close, "a closed connection came back");
        }
        closed |= st == ConnStatus::Close;
        if conn.next_deadline().is_some_and(|d| d <= now.mono_ns) {
            closed |= conn.on_timer(&mut shard, now, &mut out) == ConnStatus::Close;
        }
    }
    conn.on_close(&mut shard, now);
    assert_eq!(
        shard.open_channel_count(),
        0,
        "a channel outlived its connection"
    );
}

/// The binary encoding ids of every request the server decodes (the `requests` target
/// picks one with its first byte).
pub const REQUEST_IDS: [u32; 39] = [
    422, 12208, 428, 437, 12211, 446, 452, 461, 467, 473, 479, 488, 494, 500, 506, 527, 533, 554,
    560, 566, 615, 621, 631, 664, 673, 700, 712, 751, 763, 769, 775, 781, 787, 793, 799, 826, 832,
    841, 847,
];
