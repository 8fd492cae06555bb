//! The loop as a library: what the load client builds on. A server loop with
//! the echo handler and a client loop that connects outgoing sockets, on both
//! backends.

use std::net::{SocketAddr, TcpListener};

use uaring::{
    ConnId, ConnStatus, EchoHandler, EventLoop, Fleet, Handler, IoBackend, LoopConfig, Origin,
};
use uaring_core::Now;

/// Sends `rounds` messages of `size` bytes per connection, one at a time, then stops.
struct PingClient {
    size: usize,
    rounds: u32,
    done_conns: usize,
    conns: usize,
    timer_fired: u32,
    /// Hang guard: the client stops at this time (mono ns) even if unfinished.
    give_up_ns: u64,
}

struct PingConn {
    left: u32,
    pending: usize,
    deadline: u64,
}

impl Handler for PingClient {
    type Conn = PingConn;
    fn open(
        &mut self,
        _id: ConnId,
        _peer: SocketAddr,
        origin: Origin,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<PingConn> {
        assert_eq!(origin, Origin::Connected);
        let _ = out;
        // The first message goes out from a timer 5 ms later: that exercises connection
        // deadlines, and no connection can finish before its timer has fired.
        Some(PingConn {
            left: self.rounds,
            pending: self.size,
            deadline: now.mono_ns + 5_000_000,
        })
    }
    fn recv(&mut self, c: &mut PingConn, _now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        c.pending = c.pending.saturating_sub(data.len());
        if c.pending == 0 {
            c.left -= 1;
            if c.left == 0 {
                self.done_conns += 1;
                return ConnStatus::Close;
            }
            out.resize(out.len() + self.size, 9);
            c.pending = self.size;
        }
        ConnStatus::Open
    }
    fn conn_timer(&mut self, c: &mut PingConn, _now: Now, out: &mut Vec<u8>) -> ConnStatus {
        self.timer_fired += 1;
        c.deadline = u64::MAX;
        out.resize(out.len() + self.size, 7);
        ConnStatus::Open
    }
    fn conn_deadline(&self, c: &PingConn) -> u64 {
        c.deadline
    }
    fn keep_running(&mut self, now: Now) -> bool {
        if self.give_up_ns == 0 {
            self.give_up_ns = now.mono_ns + 60_000_000_000;
        }
        self.done_conns < self.conns && now.mono_ns < self.give_up_ns
    }
}

fn run(backend: IoBackend) {
    run_with(
        backend,
        40_000,
        LoopConfig::default().max_pending_output_bytes,
        0,
    );
}

/// Each of 8 connections sends `size` bytes 10 times to an echo server whose
/// connections stop reading past `max_pending` unsent bytes; both loops wait for batches of
/// completions for up to `batch_us` (0 = off).
fn run_with(backend: IoBackend, size: usize, max_pending: usize, batch_us: u32) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server_wiring = Fleet::standalone().expect("fleet");
    let server_fleet = server_wiring.fleet.clone();
    let server = std::thread::spawn(move || {
        let cfg = LoopConfig {
            max_pending_output_bytes: max_pending,
            batch_wait_us: batch_us,
            ..LoopConfig::default()
        };
        let mut lp = EventLoop::new(backend, EchoHandler::default(), server_wiring, cfg)
            .expect("server loop");
        lp.add_listener(listener).expect("listener");
        lp.run().expect("server run");
        lp.handler().opened
    });
    let client = std::thread::spawn(move || {
        // The client's own bound is never in the way: outgoing connections are not paused.
        let cfg = LoopConfig {
            ring_entries: 64,
            recv_buffers: 64,
            max_pending_output_bytes: max_pending,
            batch_wait_us: batch_us,
            ..LoopConfig::default()
        };
        let handler = PingClient {
            size,
            rounds: 10,
            done_conns: 0,
            conns: 8,
            timer_fired: 0,
            give_up_ns: 0,
        };
        let mut lp = EventLoop::new(backend, handler, Fleet::standalone().expect("fleet"), cfg)
            .expect("client loop");
        assert_eq!(lp.backend(), backend);
        for _ in 0..8 {
            lp.connect(addr).expect("connect");
        }
        lp.run().expect("client run");
        (lp.handler().done_conns, lp.handler().timer_fired)
    });
    let (done, timers) = client.join().expect("client thread");
    assert_eq!(done, 8);
    assert_eq!(timers, 8, "every connection's 5 ms timer fired");
    server_fleet.stop_all();
    let opened = server.join().expect("server thread");
    assert_eq!(opened, 8);
}

#[test]
fn client_and_server_loops_on_io_uring() {
    run(IoBackend::Uring);
}

#[test]
fn client_and_server_loops_on_epoll() {
    run(IoBackend::Epoll);
}

/// Messages far larger than the server's per-connection bound: the echo server
/// stops reading, holds back what a receive still delivers, and resumes as the
/// client reads; every byte comes back.
#[test]
fn echo_past_the_output_bound_on_io_uring() {
    run_with(IoBackend::Uring, 3 << 20, 8192, 0);
}

#[test]
fn echo_past_the_output_bound_on_epoll() {
    run_with(IoBackend::Epoll, 3 << 20, 8192, 0);
}

/// Batched waiting (2 ms bound, more completions asked for than 8 one-at-a-time
/// connections can give): every message still comes back and every connection timer fires.
/// The bound is what delays them, not a lost wake-up.
#[test]
fn batched_waiting_on_io_uring() {
    run_with(
        IoBackend::Uring,
        4_000,
        LoopConfig::default().max_pending_output_bytes,
        2_000,
    );
}

/// An echo server kept busy by timers that are always due: the shard-wide one, taking a
/// while each run (as a shard sampling more items than its interval allows), or each
/// connection's, due again after it ran (as a load client's pacer while it stops sending).
#[derive(Default)]
struct BusyEcho {
    /// The connections' deadlines are always due (else the shard's is).
    conns_due: bool,
    timers: u64,
    conn_timers: u64,
}

impl Handler for BusyEcho {
    type Conn = ();
    fn open(
        &mut self,
        _id: ConnId,
        _peer: SocketAddr,
        _o: Origin,
        _now: Now,
        _out: &mut Vec<u8>,
    ) -> Option<()> {
        Some(())
    }
    fn recv(&mut self, _conn: &mut (), _now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        out.extend_from_slice(data);
        ConnStatus::Open
    }
    fn deadline(&self) -> u64 {
        if self.conns_due {
            u64::MAX
        } else {
            0
        }
    }
    fn timer(&mut self, _now: Now) {
        self.timers += 1;
        let until = uaring::clock::mono_ns() + 2_000_000;
        while uaring::clock::mono_ns() < until {
            std::hint::spin_loop();
        }
    }
    fn conn_timer(&mut self, _conn: &mut (), _now: Now, _out: &mut Vec<u8>) -> ConnStatus {
        self.conn_timers += 1;
        ConnStatus::Open
    }
    fn conn_deadline(&self, _conn: &()) -> u64 {
        if self.conns_due {
            0
        } else {
            u64::MAX
        }
    }
}

/// Echoes 20 rounds of `size` bytes through an echo server loop running `handler`, stops
/// it and gives back what `count` reads of its handler then.
fn echo_rounds<H: Handler + Send + 'static>(
    backend: IoBackend,
    handler: H,
    size: usize,
    count: fn(&H) -> u64,
) -> u64 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    let wiring = Fleet::standalone().expect("fleet");
    let fleet = wiring.fleet.clone();
    let server = std::thread::spawn(move || {
        let mut lp =
            EventLoop::new(backend, handler, wiring, LoopConfig::default()).expect("server loop");
        lp.add_listener(listener).expect("listener");
        lp.run().expect("server run");
        count(lp.handler())
    });
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    // A hang guard only: an answer takes a few timer runs at most.
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .expect("timeout");
    for round in 0..20u8 {
        let msg = vec![round; size];
        s.write_all(&msg).expect("send");
        let mut back = vec![0u8; size];
        s.read_exact(&mut back)
            .unwrap_or_else(|e| panic!("round {round}: no echo from a busy loop: {e}"));
        assert_eq!(back, msg);
    }
    fleet.stop_all();
    server.join().expect("server thread")
}

/// A loop whose timers are always due still reads its sockets: on io_uring with
/// DEFER_TASKRUN the kernel posts a socket's completions only in an enter that asks for
/// them, and the loop's enter that does not wait used to leave them queued (a shard
/// sampling past its capacity stopped answering its clients).
fn overloaded_loop_still_serves(backend: IoBackend) {
    let timers = echo_rounds(backend, BusyEcho::default(), 1000, |h| h.timers);
    assert!(timers >= 20, "the timer ran throughout ({timers} runs)");
}

#[test]
fn an_overloaded_loop_still_serves_on_io_uring() {
    overloaded_loop_still_serves(IoBackend::Uring);
}

#[test]
fn an_overloaded_loop_still_serves_on_epoll() {
    overloaded_loop_still_serves(IoBackend::Epoll);
}

/// Before each due connection fired once per turn, the loop ran such a timer again and
/// again at one frozen `now` and never came back to its sockets (a load client hung for
/// 13 minutes in a history sweep).
fn always_due_connections_still_serve(backend: IoBackend) {
    let busy = BusyEcho {
        conns_due: true,
        ..BusyEcho::default()
    };
    let timers = echo_rounds(backend, busy, 100, |h| h.conn_timers);
    assert!(
        timers >= 20,
        "the connection's timer ran throughout ({timers} runs)"
    );
}

#[test]
fn always_due_connections_still_serve_on_io_uring() {
    always_due_connections_still_serve(IoBackend::Uring);
}

#[test]
fn always_due_connections_still_serve_on_epoll() {
    always_due_connections_still_serve(IoBackend::Epoll);
}
