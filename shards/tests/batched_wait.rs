//! Batched waiting (`batch_wait_us`, io_uring) must not move the loop's deadlines: a timer due
//! sooner than the batch bound fires when due, and a loop with no deadline at all sleeps until
//! something happens instead of waking at every bound.
//!
//! Both need at least two open connections, so that a wait asks for more than one completion
//! (`batch_want` > 1) and batched waiting is really used.

use std::net::{SocketAddr, TcpListener};

use uaring_core::Now;
use uaring_shards::{ConnId, ConnStatus, EventLoop, Fleet, Handler, IoBackend, LoopConfig, Origin};

/// Ticks every `period_ns` on an absolute schedule and records how late each tick ran.
/// Counts loop iterations (`publish` runs once per iteration).
struct Ticker {
    period_ns: u64,
    next: u64,
    lateness_ns: Vec<u64>,
    ticks: usize,
    iterations: u64,
    /// Stops the loop at this time (mono ns): the hang guard, or the end of an idle run.
    stop_ns: u64,
    run_ns: u64,
}

impl Ticker {
    fn new(period_ns: u64, ticks: usize, run_ns: u64) -> Ticker {
        Ticker { period_ns, next: 0, lateness_ns: Vec::new(), ticks, iterations: 0, stop_ns: 0, run_ns }
    }
}

impl Handler for Ticker {
    type Conn = ();
    fn open(&mut self, _id: ConnId, _peer: SocketAddr, _origin: Origin, _now: Now, _out: &mut Vec<u8>) -> Option<()> {
        Some(())
    }
    fn recv(&mut self, _c: &mut (), _now: Now, _data: &[u8], _out: &mut Vec<u8>) -> ConnStatus {
        ConnStatus::Open
    }
    fn conn_timer(&mut self, _c: &mut (), _now: Now, _out: &mut Vec<u8>) -> ConnStatus {
        ConnStatus::Open
    }
    fn conn_deadline(&self, _c: &()) -> u64 {
        u64::MAX
    }
    fn closed(&mut self, _c: (), _now: Now) {}
    fn deadline(&self) -> u64 {
        if self.period_ns == 0 {
            // No timer: only the fleet's stop (an eventfd wake) ends the loop.
            return u64::MAX;
        }
        // After the last tick, one more wake-up lets keep_running end the loop.
        self.next
    }
    fn timer(&mut self, now: Now) {
        if self.period_ns == 0 || self.next == 0 || now.mono_ns < self.next || self.lateness_ns.len() >= self.ticks {
            return;
        }
        self.lateness_ns.push(now.mono_ns - self.next);
        self.next += self.period_ns;
        if self.next <= now.mono_ns {
            self.next = now.mono_ns + self.period_ns;
        }
    }
    fn publish(&mut self) {
        self.iterations += 1;
    }
    fn keep_running(&mut self, now: Now) -> bool {
        if self.stop_ns == 0 {
            self.stop_ns = now.mono_ns + self.run_ns;
            if self.period_ns > 0 {
                self.next = now.mono_ns + self.period_ns;
            }
        }
        now.mono_ns < self.stop_ns && (self.period_ns == 0 || self.lateness_ns.len() < self.ticks)
    }
}

/// Runs `handler` on an io_uring loop with batched waiting of `batch_us` and two idle
/// connections. `stop_after`: stop the loop from outside after this long (for a loop with no
/// deadline of its own).
/// Returns the lateness of each tick and the number of loop iterations.
fn run(handler: Ticker, batch_us: u32, stop_after: Option<std::time::Duration>) -> (Vec<u64>, u64) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let wiring = Fleet::standalone().expect("fleet");
    let fleet = wiring.fleet.clone();
    let cfg = LoopConfig { ring_entries: 64, recv_buffers: 64, batch_wait_us: batch_us, ..LoopConfig::default() };
    let mut lp = EventLoop::new(IoBackend::Uring, handler, wiring, cfg).expect("io_uring loop");
    assert_eq!(lp.backend(), IoBackend::Uring);
    // Two idle connections (the kernel completes them in the listener's backlog): each wait
    // asks for two completions.
    lp.connect(addr).expect("connect");
    lp.connect(addr).expect("connect");
    let stopper = stop_after.map(|d| {
        std::thread::spawn(move || {
            std::thread::sleep(d);
            fleet.stop_all();
        })
    });
    lp.run().expect("run");
    if let Some(s) = stopper {
        s.join().expect("stopper");
    }
    drop(listener);
    let h = lp.handler();
    (h.lateness_ns.clone(), h.iterations)
}

/// A 1 ms timer under `batch_wait_us = 10000`: the shard must not sleep through it for the
/// whole batch bound. (With the min-timeout wait the kernel arms the min-timeout first and
/// the overall timeout only after it, so a wait that passes a deadline sooner than
/// `batch_wait_us` as its timeout oversleeps it by up to `batch_wait_us`.)
#[test]
fn a_timer_due_before_the_batch_bound_fires_on_time() {
    let (mut late, _) = run(Ticker::new(1_000_000, 40, 30_000_000_000), 10_000, None);
    assert_eq!(late.len(), 40, "every tick ran");
    late.sort_unstable();
    // Sleeping through to the 10 ms bound makes nearly every tick 9+ ms late; on time, the
    // median is scheduling noise.
    let median = late[late.len() / 2];
    assert!(median < 5_000_000, "median tick lateness {} µs (all: {:?} µs)", median / 1000, late.iter().map(|l| l / 1000).collect::<Vec<_>>());
}

/// No deadline at all and nothing arriving: the loop sleeps until the stop wakes it, not once
/// per `batch_wait_us` (a min-timeout wait without an overall timeout ends at the min-timeout).
#[test]
fn an_idle_loop_without_deadlines_sleeps() {
    let (_, iterations) = run(Ticker::new(0, 0, 30_000_000_000), 50, Some(std::time::Duration::from_millis(300)));
    // 300 ms at one wake per 50 µs would be ~6,000 iterations; sleeping, a handful (connects,
    // the stop).
    assert!(iterations < 100, "{iterations} loop iterations in 300 ms of idling");
}
