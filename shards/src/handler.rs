//! The interface between an event loop and the protocol code it drives.
//!
//! The loop owns sockets, buffers, timers and the clock; a [`Handler`] owns the
//! per-shard protocol state and one `Handler::Conn` per socket. All calls
//! happen on the shard's own thread: nothing here is shared between shards.

use std::net::SocketAddr;

use uaring_core::Now;

use crate::fleet::{MovedConn, ShardMessage};

/// What the handler wants done with a connection after a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnStatus {
    /// Keep the connection open.
    Open,
    /// Send what is pending in `out`, then close the socket.
    Close,
    /// Hand the live connection to shard `n` of the fleet: the loop feeds it nothing more,
    /// sends what is pending, then calls [`Handler::detach`] and queues the socket, that
    /// state and the input received since to shard `n`, whose loop calls
    /// [`Handler::attach`]. When it cannot (no such shard, the queue is full, stopping) it
    /// calls [`Handler::move_refused`] instead.
    Move(usize),
}

/// A connection's identity inside one shard's loop: a slot index and a
/// generation that changes each time the slot is reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub index: u32,
    pub generation: u32,
}

/// How a connection came to the loop.
#[derive(Debug, PartialEq)]
pub enum Origin {
    /// Accepted on one of the shard's listeners (or handed over by the acceptor shard).
    Accepted,
    /// Connected outgoing through `EventLoop::connect` / `EventLoop::adopt`.
    Connected,
    /// Dialed by the runtime to a Reverse Connect client (`[[reverse_connect]]`): the handler
    /// keeps the lease with the connection (it tells the dialer when the client took the
    /// connection up, and when it closed).
    Reverse(crate::reverse::ReverseLease),
    /// Connected outgoing by a dialer thread of the loop's own client (the gateway's, to the
    /// servers it mirrors) and queued to the loop (`Fleet::take_dial_queues`), with the tag
    /// the handler asked for it by.
    Dialed(u64),
}

/// The protocol side of one shard. Deadlines are CLOCK_MONOTONIC nanoseconds
/// (`Now::mono_ns`); `u64::MAX` means "no deadline".
///
/// Every method that takes `out` may append bytes to it: the loop sends them
/// (batched: everything appended during one loop iteration leaves in one send).
pub trait Handler {
    /// Per-connection state.
    type Conn;

    /// A new socket. Return `None` to refuse it (the loop closes it at once,
    /// after sending what was appended to `out`).
    fn open(
        &mut self,
        id: ConnId,
        peer: SocketAddr,
        origin: Origin,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<Self::Conn>;

    /// Bytes arrived. `data` is never empty.
    fn recv(
        &mut self,
        conn: &mut Self::Conn,
        now: Now,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> ConnStatus;

    /// The connection's deadline (see [`Handler::conn_deadline`]) has passed. A handler
    /// without per-connection timers implements neither (the defaults: no deadline, and a
    /// timer that leaves the connection open).
    fn conn_timer(&mut self, _conn: &mut Self::Conn, _now: Now, _out: &mut Vec<u8>) -> ConnStatus {
        ConnStatus::Open
    }

    /// Bytes of input the handler holds for this connection (unfinished chunks and
    /// messages); they count against the shard's buffer budget.
    fn buffered_bytes(&self, _conn: &Self::Conn) -> usize {
        0
    }

    /// The connection has no activated session yet: its bytes count against the smaller
    /// pre-session share of the buffer budget as well, and it is the first to stop being
    /// read when that share is used up. By default no connection is.
    fn pre_session(&self, _conn: &Self::Conn) -> bool {
        false
    }

    /// Before each `recv`: how many bytes the shard's buffer budget has left
    /// (`max_shard_buffered_bytes` less what its connections hold). A handler that
    /// allocates for what it receives (decoding a request) stays within it.
    fn set_memory_headroom(&mut self, _bytes: usize) {}

    /// The earliest time [`Handler::conn_timer`] must run for this connection.
    /// Queried after every call into the connection.
    fn conn_deadline(&self, _conn: &Self::Conn) -> u64 {
        u64::MAX
    }

    /// The socket is gone (closed by either side, or the loop is stopping). By default its
    /// state is dropped.
    fn closed(&mut self, _conn: Self::Conn, _now: Now) {}

    /// The connection leaves for another shard (after [`ConnStatus::Move`]): release what
    /// this shard holds for it and return the state to send along. `None` closes it.
    fn detach(&mut self, _conn: Self::Conn, _now: Now) -> Option<MovedConn> {
        None
    }

    /// A connection arrived from another shard with the state its [`Handler::detach`]
    /// returned there. `None` refuses it (the loop sends `out`, then closes the socket).
    fn attach(
        &mut self,
        _id: ConnId,
        _peer: SocketAddr,
        _state: MovedConn,
        _now: Now,
        _out: &mut Vec<u8>,
    ) -> (Option<Self::Conn>, ConnStatus) {
        (None, ConnStatus::Close)
    }

    /// A [`ConnStatus::Move`] cannot be carried out: the connection stays here.
    fn move_refused(
        &mut self,
        _conn: &mut Self::Conn,
        _now: Now,
        _out: &mut Vec<u8>,
    ) -> ConnStatus {
        ConnStatus::Close
    }

    /// Messages for other shards that arose in the protocol state (cross-shard
    /// TransferSubscriptions): (target shard, message). The loop queues each to its shard
    /// (keeping it until the queue has room) and wakes that shard.
    fn take_mail(&mut self, _into: &mut Vec<(usize, ShardMessage)>) {}

    /// A message from another shard's [`Handler::take_mail`].
    fn mail(&mut self, _msg: ShardMessage, _now: Now) {}

    /// Graceful shutdown of the whole loop: say goodbye on this connection
    /// (append to `out`). The loop sends `out` and then closes the socket.
    fn shutdown(&mut self, _conn: &mut Self::Conn, _now: Now, _out: &mut Vec<u8>) {}

    /// Shard-wide deadline (sessions, subscriptions, …).
    fn deadline(&self) -> u64 {
        u64::MAX
    }

    /// The shard-wide deadline has passed.
    fn timer(&mut self, _now: Now) {}

    /// Connections the handler has output for that arose outside a call into them (a
    /// Publish response produced by a shard timer). The loop then calls
    /// [`Handler::flush`] for each, once per iteration, before it sends.
    fn take_ready(&mut self, _into: &mut Vec<ConnId>) {}

    /// Appends the connection's pending asynchronous output to `out` (see
    /// [`Handler::take_ready`]).
    fn flush(&mut self, _conn: &mut Self::Conn, _now: Now, _out: &mut Vec<u8>) -> ConnStatus {
        ConnStatus::Open
    }

    /// Called once per loop iteration after completions were handled: publish what the
    /// metrics endpoint reads (relaxed stores to the shard's own counters).
    fn publish(&mut self) {}

    /// The loop is built: `waker` wakes it from other threads (results of work done
    /// elsewhere, collected in [`Handler::take_ready`]).
    fn set_waker(&mut self, _waker: crate::fleet::Waker) {}

    /// The connection waits for work done elsewhere (a handshake job): the loop stops
    /// handing it input (what arrives waits in the connection's backlog) until then.
    fn input_suspended(&self, _conn: &Self::Conn) -> bool {
        false
    }

    /// Called once per loop iteration after completions were handled; return
    /// `false` to stop the loop (a load client that finished its run).
    fn keep_running(&mut self, _now: Now) -> bool {
        true
    }
}

/// A trivial handler that sends every byte back: the loop's own tests and the
/// `echo` floor measurement use it.
#[derive(Default)]
pub struct EchoHandler {
    /// Connections opened so far.
    pub opened: u64,
}

impl Handler for EchoHandler {
    type Conn = ();
    fn open(
        &mut self,
        _id: ConnId,
        _peer: SocketAddr,
        _o: Origin,
        _now: Now,
        _out: &mut Vec<u8>,
    ) -> Option<()> {
        self.opened += 1;
        Some(())
    }
    fn recv(&mut self, _conn: &mut (), _now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        out.extend_from_slice(data);
        ConnStatus::Open
    }
}
