//! One server-side UA-TCP connection and its secure channel, sans-IO.
//!
//! Bytes in ([`ServerConnection::on_recv`]), bytes out (appended to the caller's send
//! buffer), deadlines out ([`ServerConnection::next_deadline`]). The connection parses
//! chunks, checks them against the negotiated limits, assembles messages, decodes
//! requests, hands them to the shard ([`ConnectionHost::dispatch`]) and chunks the
//! responses. Any protocol violation ends in an ERR with the matching status and
//! [`ConnStatus::Close`]; nothing here panics on network data.
//!
//! States: `AwaitHello` → (HEL) → `AwaitOpen` → (OPN Issue) → `Open` → (CLO / error /
//! timeout / token expiry) → `Closed`. Each state carries only its own data.
//!
//! Handshake work (the RSA operations of OPN, CreateSession and ActivateSession, certificate
//! validation, argon2id) leaves the connection as a [`HandshakeJob`] when the host offloads
//! handshakes, and so does the decoding of a request body over 64 KiB (a NodeManagement
//! request of a thousand nodes, a CreateMonitoredItems of thousands of items: work that
//! would stall the loop's other connections in one piece): the connection then waits —
//! input held, deferred responses held — until the runtime hands the [`JobDone`] back
//! through [`ServerConnection::on_job_done`]. See [`crate::server::handshake`].
//!
//! This file holds the connection's states and life (accept, Hello, moves between shards,
//! timers, close); `open` handles OpenSecureChannel (issue and renew), `message` the service
//! requests on an open channel and their responses.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::{TransportLimits, MIN_BUFFER_SIZE};
use crate::encoding::{Decode, DecodeLimits, Decoder, Encode};
use crate::generated::messages::{Request, Response};
use crate::generated::node_ids;
use crate::generated::types::{
    ChannelSecurityToken, MessageSecurityMode, OpenSecureChannelRequest, OpenSecureChannelResponse,
    RequestHeader, ResponseHeader, SecurityTokenRequestType,
};
use crate::secure_channel::{
    open_chunk, parse_chunk_head, parse_symmetric_head, write_chunks, write_message_with, Assembly,
    ChunkCrypto, ChunkLimits, MessageAssembler, Role, SecurityHeader, SecurityPolicy,
    SequenceChecker, SequenceCounter, SECURITY_POLICY_NONE_URI,
};
use crate::server::context::{ConnectionHost, Deferred, RequestContext};
use crate::server::handshake::{
    Carry, HandshakeJob, Issued, JobDone, JobKind, OpenedRequest, Output,
};
use crate::server::recycle::Recycler;
use crate::time::Now;
use crate::transport::{
    negotiate_server, ErrorMessage, Frame, FrameReader, HelloMessage, MessageType, Negotiated,
    ReverseHelloMessage, MESSAGE_HEADER_LEN, PROTOCOL_VERSION,
};
use crate::types::{ByteString, NodeId, StatusCode};

mod message;
mod open;
use message::*;

/// What the runtime does with the socket after a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum ConnStatus {
    /// Keep reading.
    Open,
    /// Flush `out` (it may end with an ERR) and close the socket.
    Close,
    /// An ActivateSession names a session owned by shard `n` of this process: stop feeding
    /// this connection, flush `out`, and hand the connection to shard `n`
    /// ([`ServerConnection::detach`] here, [`ServerConnection::attach`] there), or answer
    /// [`ServerConnection::move_refused`] when it cannot go.
    Move(usize),
}

/// A security token of the channel.
struct Token {
    id: u32,
    created_ns: u64,
    lifetime_ms: u32,
    crypto: Box<dyn ChunkCrypto>,
    /// The client has used it (a renewed token becomes the send token then).
    activated: bool,
}

impl Token {
    /// Lifetime plus 25 % grace (Part 4 §5.6.2: clients renew at 75 %; network delay and
    /// clock differences mean messages may arrive late).
    fn expires_ns(&self) -> u64 {
        let ms = self.lifetime_ms as u64;
        self.created_ns
            .saturating_add((ms + ms / 4).saturating_mul(1_000_000))
    }
}

/// An open secure channel.
struct Channel {
    id: u32,
    policy: Arc<dyn SecurityPolicy>,
    mode: MessageSecurityMode,
    client_certificate: Option<Vec<u8>>,
    /// The newest token (after a renew, possibly not yet used by the client).
    current: Token,
    /// The token before the last renew; accepted until it expires.
    previous: Option<Token>,
    next_token_id: u32,
    send_seq: SequenceCounter,
    recv_seq: SequenceChecker,
}

impl Channel {
    /// A channel just issued, with its first token (id 1).
    fn issued(
        id: u32,
        policy: Arc<dyn SecurityPolicy>,
        mode: MessageSecurityMode,
        client_certificate: Option<Vec<u8>>,
        first: Token,
        send_seq: SequenceCounter,
        recv_seq: SequenceChecker,
    ) -> Box<Channel> {
        Box::new(Channel {
            id,
            policy,
            mode,
            client_certificate,
            current: first,
            previous: None,
            next_token_id: 2,
            send_seq,
            recv_seq,
        })
    }

    /// What a service learns of the channel a request came on.
    fn request_context<'a>(
        &'a self,
        peer: Option<SocketAddr>,
        endpoint_url: &'a str,
    ) -> RequestContext<'a> {
        RequestContext {
            channel_id: self.id,
            security_policy_uri: self.policy.uri(),
            security_mode: self.mode,
            client_certificate: self.client_certificate.as_deref(),
            peer,
            endpoint_url,
        }
    }
}

enum Phase {
    AwaitHello {
        deadline_ns: u64,
    },
    AwaitOpen {
        deadline_ns: u64,
        recv_seq: Option<SequenceChecker>,
    },
    Open(Box<Channel>),
    Closed,
}

/// A fatal protocol error: sent as ERR, then the connection closes.
struct Failure {
    status: StatusCode,
    reason: &'static str,
}

fn fail<T>(status: StatusCode, reason: &'static str) -> Result<T, Failure> {
    Err(Failure { status, reason })
}

impl From<StatusCode> for Failure {
    fn from(status: StatusCode) -> Self {
        Failure { status, reason: "" }
    }
}

enum Step {
    Continue,
    /// The request just decoded waits in `State::moving` for shard `n`.
    Move(usize),
    /// CloseSecureChannel: close without ERR.
    CloseQuietly,
}

/// Everything but the frame reader (so a frame borrowed from the reader can be handled
/// while the rest is mutated).
struct State {
    phase: Phase,
    limits: TransportLimits,
    negotiated: Option<Negotiated>,
    endpoint_url: String,
    peer: Option<SocketAddr>,
    assembler: MessageAssembler,
    /// Decryption scratch (unused with SecurityPolicy None).
    scratch: Vec<u8>,
    /// A channel id obtained from the host and not yet reported closed.
    channel_to_report: Option<u32>,
    /// A session was activated on this connection: the full message size applies.
    session_activated: bool,
    /// Since when a partly received chunk has been buffered.
    partial_since_ns: Option<u64>,
    /// Deferred responses taken from the host, reused.
    deferred: Vec<(u32, Deferred)>,
    /// An ActivateSession (request id, request) for a session of another shard: answered
    /// there after the connection moved, or refused here.
    moving: Option<(u32, Request)>,
    /// A handshake job the runtime has not taken yet ([`ServerConnection::take_job`]).
    job: Option<HandshakeJob>,
    /// A handshake job is out: input is held until its result comes back.
    waiting: Option<Waiting>,
    /// Input received while a handshake job is out (at most `max_message_size_pre_session`
    /// bytes) or after the frame that started a move (at most one delivered slice).
    held: Vec<u8>,
    /// The OPN being handled uses SecurityPolicy None: its jobs run inline.
    cheap_open: bool,
    /// Bytes of the request body a decoding job took ([`Waiting::Decode`]), 0 when none is out.
    decoding: usize,
}

/// What the connection waits for.
#[derive(Debug, Clone, Copy)]
enum Waiting {
    /// An OPN chunk decrypted and verified.
    OpenRequest,
    /// A first OPN (Issue, one chunk) answered whole: see [`Issued`].
    OpenIssued,
    /// The OPN response signed and encrypted.
    OpenResponse,
    /// A session service (CreateSession, ActivateSession) to finish with `ConnectionHost::resume`.
    Service {
        request_id: u32,
        handle: u32,
        is_activate: bool,
    },
    /// A large request decoded off the loop (`message::DECODE_OFF_LOOP_BYTES`), then
    /// answered as one decoded here.
    Decode { request_id: u32, handle: u32 },
}

/// One accepted TCP connection. See the module documentation.
pub struct ServerConnection {
    reader: FrameReader,
    st: State,
}

fn only_hello(t: MessageType) -> bool {
    t == MessageType::Hello
}
fn secure_or_error(t: MessageType) -> bool {
    t.is_secure() || t == MessageType::Error
}

impl ServerConnection {
    /// A connection just accepted from `peer`. The Hello must arrive within
    /// `hello_timeout_ms`.
    pub fn new<H: ConnectionHost + ?Sized>(
        host: &mut H,
        peer: Option<SocketAddr>,
        now: Now,
    ) -> ServerConnection {
        let limits = *host.transport_limits();
        let mut reader = FrameReader::new();
        reader.set_filter(Some(only_hello));
        ServerConnection {
            reader,
            st: State {
                phase: Phase::AwaitHello {
                    deadline_ns: now.deadline_after_ms(limits.hello_timeout_ms as f64),
                },
                limits,
                negotiated: None,
                endpoint_url: String::new(),
                peer,
                assembler: MessageAssembler::new(),
                scratch: Vec::new(),
                channel_to_report: None,
                session_activated: false,
                partial_since_ns: None,
                deferred: Vec::new(),
                moving: None,
                job: None,
                waiting: None,
                held: Vec::new(),
                cheap_open: false,
                decoding: 0,
            },
        }
    }

    /// A connection this server dialed to a client (Reverse Connect, Part 6 §7.1.3): sends
    /// `hello` (ReverseHello: our ServerUri and the EndpointUrl the client is to use) and then
    /// waits up to `wait_ms` for the client's Hello; from there on it is an ordinary
    /// connection. A client that keeps the connection idle past `wait_ms` gets ERR
    /// BadTimeout, as one that sends no Hello after an accept does.
    pub fn reverse<H: ConnectionHost + ?Sized>(
        host: &mut H,
        peer: Option<SocketAddr>,
        now: Now,
        hello: &ReverseHelloMessage,
        wait_ms: u64,
        out: &mut Vec<u8>,
    ) -> ServerConnection {
        let mut c = ServerConnection::new(host, peer, now);
        hello.write(out);
        c.st.phase = Phase::AwaitHello {
            deadline_ns: now.deadline_after_ms(wait_ms as f64),
        };
        c
    }

    /// No Hello has arrived yet (a reverse connection the client has not taken up).
    pub fn awaits_hello(&self) -> bool {
        matches!(self.st.phase, Phase::AwaitHello { .. })
    }

    /// The secure channel id once a channel is open.
    pub fn channel_id(&self) -> Option<u32> {
        match &self.st.phase {
            Phase::Open(c) => Some(c.id),
            _ => None,
        }
    }

    /// The security policy the open channel was opened with (it keeps it for its whole
    /// life, renewals included, whatever the host's provider says later).
    pub fn channel_policy(&self) -> Option<&Arc<dyn SecurityPolicy>> {
        match &self.st.phase {
            Phase::Open(c) => Some(&c.policy),
            _ => None,
        }
    }

    /// The client certificate (chain) the open channel was opened with (none on a None
    /// channel).
    pub fn channel_client_certificate(&self) -> Option<&[u8]> {
        match &self.st.phase {
            Phase::Open(c) => c.client_certificate.as_deref(),
            _ => None,
        }
    }

    /// The channel is open (OPN done, not closed).
    pub fn is_open(&self) -> bool {
        matches!(self.st.phase, Phase::Open(_))
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.st.phase, Phase::Closed)
    }

    /// Has a session been activated on this connection (the full message size applies)?
    pub fn session_activated(&self) -> bool {
        self.st.session_activated
    }

    /// Bytes held for unfinished chunks and messages, input held while a job is out, and
    /// the request body a decoding job took (counted until its result is back).
    pub fn buffered_bytes(&self) -> usize {
        self.reader.buffered()
            + self.st.assembler.buffered()
            + self.st.held.len()
            + self.st.decoding
    }

    /// Is a move to another shard pending ([`ConnStatus::Move`] was returned)?
    pub fn is_moving(&self) -> bool {
        self.st.moving.is_some()
    }

    /// The connection leaves this shard (after [`ConnStatus::Move`]): its channel is
    /// released here like a closed one (sessions of this shard bound to it become unbound),
    /// everything else — secure channel keys and sequence numbers, partial input, the
    /// pending ActivateSession — stays in `self`, which the runtime sends to the owning shard.
    pub fn detach<H: ConnectionHost + ?Sized>(&mut self, host: &mut H) {
        if let Some(id) = self.st.channel_to_report.take() {
            if let Phase::Open(c) = &self.st.phase {
                host.channel_policy(c.policy.uri(), false);
            }
            host.channel_closed(id);
        }
    }

    /// The connection arrived from another shard (see [`ServerConnection::detach`]): adopts
    /// its channel here, answers the pending ActivateSession, then processes the input held
    /// since. A channel this shard cannot take is closed with an ERR.
    pub fn attach<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let Phase::Open(c) = &mut self.st.phase else {
            return ConnStatus::Close;
        };
        // Later OPN renewals and handshake checks use this shard's instance of the policy.
        let Some(policy) = host.security().find(c.policy.uri()).cloned() else {
            let f = Failure {
                status: StatusCode::BadSecurityPolicyRejected,
                reason: "security policy not offered",
            };
            return self.close_with(host, f, out);
        };
        c.policy = policy;
        let id = c.id;
        if let Err(status) = host.adopt_channel(id) {
            return self.close_with(
                host,
                Failure {
                    status,
                    reason: "cannot take the moved channel",
                },
                out,
            );
        }
        self.st.channel_to_report = Some(id);
        if let Phase::Open(c) = &self.st.phase {
            host.channel_policy(c.policy.uri(), true);
        }
        if let Some((request_id, request)) = self.st.moving.take() {
            if let Err(f) = self.st.answer(host, now, request_id, request, out) {
                return self.close_with(host, f, out);
            }
        }
        self.resume_held(host, now, out)
    }

    /// The move could not be made (the queue to the owning shard is full): the pending
    /// ActivateSession is answered with a ServiceFault BadResourceUnavailable (the client may
    /// retry), and the held input is processed here.
    pub fn move_refused<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        if let Some((request_id, request)) = self.st.moving.take() {
            let handle = request.request_header().request_handle;
            let fault = crate::response::fault(handle, StatusCode::BadResourceUnavailable, now);
            let State {
                phase, negotiated, ..
            } = &mut self.st;
            if let (Phase::Open(c), Some(n)) = (phase, *negotiated) {
                if let Err(f) = send_response(c, &n, request_id, &fault, handle, now, out) {
                    return self.close_with(host, f, out);
                }
            }
        }
        self.resume_held(host, now, out)
    }

    fn resume_held<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let held = std::mem::take(&mut self.st.held);
        if held.is_empty() {
            return self.flush_deferred(host, now, out);
        }
        self.on_recv(host, now, &held, out)
    }

    /// The handshake job to run (once; the connection waits for its [`JobDone`]).
    pub fn take_job(&mut self) -> Option<HandshakeJob> {
        self.st.job.take()
    }

    /// A job is out (a handshake's, or a large request's decoding): the runtime should stop
    /// reading this connection (what it still delivers is held, up to the message size
    /// limit) until [`ServerConnection::on_job_done`].
    pub fn is_waiting(&self) -> bool {
        self.st.waiting.is_some()
    }

    /// The result of the job [`ServerConnection::take_job`] handed out: the handshake goes on
    /// (possibly with another job), then held input is processed.
    pub fn on_job_done<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        done: JobDone,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        if matches!(self.st.phase, Phase::Closed) || self.st.waiting.is_none() {
            return if matches!(self.st.phase, Phase::Closed) {
                ConnStatus::Close
            } else {
                ConnStatus::Open
            };
        }
        match self.st.complete(host, now, done, out) {
            Ok(Step::Continue) => {}
            Ok(Step::CloseQuietly) => return self.close_quietly(host),
            // A job's result never starts a move (only a decoded ActivateSession does).
            Ok(Step::Move(_)) => {
                let f = Failure {
                    status: StatusCode::BadTcpInternalError,
                    reason: "a handshake result asked for a move",
                };
                return self.close_with(host, f, out);
            }
            Err(f) => return self.close_with(host, f, out),
        }
        if self.st.waiting.is_some() {
            return ConnStatus::Open;
        }
        if matches!(self.st.phase, Phase::Open(_) | Phase::AwaitOpen { .. }) {
            self.reader.set_filter(Some(secure_or_error));
        }
        let held = std::mem::take(&mut self.st.held);
        self.on_recv(host, now, &held, out)
    }

    /// Feeds received bytes; appends whole chunks to send to `out`.
    pub fn on_recv<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        if matches!(self.st.phase, Phase::Closed) {
            return ConnStatus::Close;
        }
        if self.st.moving.is_some() {
            // A move is pending: the runtime feeds nothing more, but keep the bytes if it does.
            self.st.held.extend_from_slice(data);
            return ConnStatus::Open;
        }
        if self.st.waiting.is_some() {
            return self.hold(host, data, out);
        }
        let mut input = data;
        loop {
            let max_chunk = match &self.st.negotiated {
                Some(n) => n.receive_buffer_size,
                None => MIN_BUFFER_SIZE,
            };
            let frame = match self.reader.next(&mut input, max_chunk) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(status) => {
                    let f = Failure {
                        status,
                        reason: "bad message header",
                    };
                    return self.close_with(host, f, out);
                }
            };
            match self.st.handle_frame(host, now, frame, out) {
                Ok(Step::Continue) => {}
                Ok(Step::Move(shard)) => {
                    self.st.held.extend_from_slice(input);
                    return match self.flush_deferred(host, now, out) {
                        ConnStatus::Open => ConnStatus::Move(shard),
                        other => other,
                    };
                }
                Ok(Step::CloseQuietly) => return self.close_quietly(host),
                Err(f) => return self.close_with(host, f, out),
            }
            if matches!(self.st.phase, Phase::Open(_) | Phase::AwaitOpen { .. }) {
                self.reader.set_filter(Some(secure_or_error));
            }
            if self.st.waiting.is_some() {
                // A handshake job is out: the rest waits for its result.
                if self.hold(host, input, out) == ConnStatus::Close {
                    return ConnStatus::Close;
                }
                return ConnStatus::Open;
            }
        }
        self.st.partial_since_ns = if self.reader.buffered() > 0 {
            Some(self.st.partial_since_ns.unwrap_or(now.mono_ns))
        } else {
            None
        };
        // Publish requests answered while this input was handled go out with it.
        self.flush_deferred(host, now, out)
    }

    /// Keeps input that arrives while a job is out, within the message budget (the
    /// pre-session one until a session was activated on the connection).
    fn hold<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let limit = self.st.max_message_size().max(MIN_BUFFER_SIZE as usize);
        if self.st.held.len() + data.len() > limit {
            let f = Failure {
                status: StatusCode::BadTcpNotEnoughResources,
                reason: "too much input during a handshake",
            };
            return self.close_with(host, f, out);
        }
        self.st.held.extend_from_slice(data);
        ConnStatus::Open
    }

    /// Sends the responses the host has ready for this connection's channel (queued Publish
    /// requests answered by a publishing cycle). The runtime calls it for the channels
    /// `ServiceState::take_ready_channels` names; `on_recv` calls it itself. While a handshake
    /// job is out they wait (the job may renew the channel's token).
    pub fn flush_deferred<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        if self.st.waiting.is_some() {
            return ConnStatus::Open;
        }
        let State {
            phase,
            negotiated,
            deferred,
            ..
        } = &mut self.st;
        let Phase::Open(c) = phase else {
            return if matches!(phase, Phase::Closed) {
                ConnStatus::Close
            } else {
                ConnStatus::Open
            };
        };
        let Some(negotiated) = *negotiated else {
            return ConnStatus::Open;
        };
        host.take_deferred(c.id, deferred);
        if deferred.is_empty() {
            return ConnStatus::Open;
        }
        let mut failure = None;
        for (request_id, d) in deferred.drain(..) {
            let r = match d {
                _ if failure.is_some() => continue,
                Deferred::Response(response) => {
                    let handle = response.response_header().request_handle;
                    send_response(c, &negotiated, request_id, &response, handle, now, out)
                }
                Deferred::Encoded {
                    request_handle,
                    body,
                    max_size,
                } => {
                    // The session's MaxResponseMessageSize applies here as in `answer`.
                    let n = Negotiated {
                        peer_max_message_size: response_limit(
                            negotiated.peer_max_message_size,
                            max_size,
                        ),
                        ..negotiated
                    };
                    let r = send_body(c, &n, request_id, &body, request_handle, now, out);
                    host.recycle_buffer(body);
                    r
                }
            };
            if let Err(f) = r {
                failure = Some(f);
            }
        }
        match failure {
            Some(f) => self.close_with(host, f, out),
            None => ConnStatus::Open,
        }
    }

    /// The earliest monotonic time (ns) at which [`ServerConnection::on_timer`] has work.
    pub fn next_deadline(&self) -> Option<u64> {
        let st = &self.st;
        let mut d: Option<u64> = None;
        let mut add = |x: u64| d = Some(d.map_or(x, |y: u64| y.min(x)));
        match &st.phase {
            Phase::AwaitHello { deadline_ns } | Phase::AwaitOpen { deadline_ns, .. } => {
                add(*deadline_ns)
            }
            Phase::Open(c) => add(c.current.expires_ns()),
            Phase::Closed => return None,
        }
        if let Some(start) = st.unfinished_since() {
            add(start.saturating_add(
                st.limits
                    .message_assembly_timeout_ms
                    .saturating_mul(1_000_000),
            ));
        }
        d
    }

    /// Handles expired deadlines: Hello/Open timeout, an unfinished message held too
    /// long, and channel token expiry all close the connection with an ERR.
    pub fn on_timer<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let t = now.mono_ns;
        let failure = match &self.st.phase {
            Phase::Closed => return ConnStatus::Close,
            Phase::AwaitHello { deadline_ns } if t >= *deadline_ns => Some(Failure {
                status: StatusCode::BadTimeout,
                reason: "no Hello in time",
            }),
            Phase::AwaitOpen { deadline_ns, .. } if t >= *deadline_ns => Some(Failure {
                status: StatusCode::BadTimeout,
                reason: "no OpenSecureChannel in time",
            }),
            Phase::Open(c) if t >= c.current.expires_ns() => Some(Failure {
                status: StatusCode::BadSecureChannelTokenUnknown,
                reason: "the security token expired",
            }),
            _ => None,
        };
        let failure = failure.or_else(|| {
            let start = self.st.unfinished_since()?;
            let limit = start.saturating_add(
                self.st
                    .limits
                    .message_assembly_timeout_ms
                    .saturating_mul(1_000_000),
            );
            (t >= limit).then_some(Failure {
                status: StatusCode::BadTimeout,
                reason: "message not finished in time",
            })
        });
        match failure {
            Some(f) => self.close_with(host, f, out),
            None => ConnStatus::Open,
        }
    }

    /// The socket went away: release the channel.
    pub fn on_close<H: ConnectionHost + ?Sized>(&mut self, host: &mut H, _now: Now) {
        self.release(host);
    }

    fn release<H: ConnectionHost + ?Sized>(&mut self, host: &mut H) {
        if let Some(id) = self.st.channel_to_report.take() {
            if let Phase::Open(c) = &self.st.phase {
                host.channel_policy(c.policy.uri(), false);
            }
            host.channel_closed(id);
        }
        self.st.phase = Phase::Closed;
        self.reader.clear();
        self.st.assembler.clear();
        self.st.scratch = Vec::new();
        self.st.partial_since_ns = None;
        self.st.job = None;
        self.st.waiting = None;
        self.st.held = Vec::new();
        self.st.decoding = 0;
    }

    fn close_with<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        f: Failure,
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let reason = if f.reason.is_empty() {
            f.status.name().unwrap_or("error")
        } else {
            f.reason
        };
        ErrorMessage::new(f.status, reason).write(out);
        self.release(host);
        ConnStatus::Close
    }

    fn close_quietly<H: ConnectionHost + ?Sized>(&mut self, host: &mut H) -> ConnStatus {
        self.release(host);
        ConnStatus::Close
    }
}

impl State {
    fn unfinished_since(&self) -> Option<u64> {
        match (self.partial_since_ns, self.assembler.started_ns()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Largest message body accepted now: the pre-session budget until a session is
    /// activated on this connection.
    fn max_message_size(&self) -> usize {
        if self.session_activated {
            self.limits.max_message_size as usize
        } else {
            self.limits.max_message_size_pre_session as usize
        }
    }

    fn handle_frame<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        frame: Frame<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        match frame.header.message_type {
            MessageType::Hello => self.on_hello(now, frame, out),
            MessageType::OpenSecureChannel => self.on_open(host, now, frame, out),
            MessageType::Message | MessageType::CloseSecureChannel => {
                self.on_message(host, now, frame, out)
            }
            MessageType::Error => Ok(Step::CloseQuietly),
            MessageType::Acknowledge | MessageType::ReverseHello => fail(
                StatusCode::BadTcpMessageTypeInvalid,
                "unexpected message type",
            ),
        }
    }

    fn on_hello(&mut self, now: Now, frame: Frame<'_>, out: &mut Vec<u8>) -> Result<Step, Failure> {
        if !matches!(self.phase, Phase::AwaitHello { .. }) {
            return fail(StatusCode::BadTcpMessageTypeInvalid, "second Hello");
        }
        let hello =
            HelloMessage::decode_body(frame.bytes.get(MESSAGE_HEADER_LEN..).unwrap_or_default())?;
        let url = hello.endpoint_url.as_str();
        if let Err(reason) = crate::transport::check_endpoint_url(url) {
            return fail(StatusCode::BadTcpEndpointUrlInvalid, reason);
        }
        let (ack, negotiated) = negotiate_server(&self.limits, &hello)?;
        ack.write(out);
        self.endpoint_url = url.to_owned();
        self.negotiated = Some(negotiated);
        self.phase = Phase::AwaitOpen {
            deadline_ns: now.deadline_after_ms(self.limits.hello_timeout_ms as f64),
            recv_seq: None,
        };
        Ok(Step::Continue)
    }

    /// Starts a job: out to the runtime when the host offloads handshakes, else at once.
    fn submit<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        job: HandshakeJob,
        waiting: Waiting,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        self.waiting = Some(waiting);
        // An OPN with SecurityPolicy None has no expensive work: never worth a round trip.
        if host.offload_handshakes() && !self.cheap_open {
            self.job = Some(job);
            Ok(Step::Continue)
        } else {
            self.complete(host, now, job.run(), out)
        }
    }

    /// Goes on with the handshake a job's result belongs to.
    fn complete<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        done: JobDone,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let Some(waiting) = self.waiting.take() else {
            return fail(StatusCode::BadTcpInternalError, "no handshake job was out");
        };
        if let Waiting::Service {
            request_id,
            handle,
            is_activate,
        } = waiting
        {
            // The host answers a refused job itself (and releases what it reserved).
            return self.finish_service(host, now, done, request_id, handle, is_activate, out);
        }
        if let Waiting::Decode { request_id, handle } = waiting {
            self.decoding = 0;
            let request = match done.output {
                Some(Output::Request(r)) => r,
                // The helpers' queue is full: the request was not decoded, nothing was done.
                None => Err((handle, JobKind::Decode.refusal())),
                Some(_) => return fail(StatusCode::BadTcpInternalError, "not a decoded request"),
            };
            return self.decoded(host, now, request_id, request, out);
        }
        let JobDone {
            kind,
            output,
            carry,
        } = done;
        let Some(output) = output else {
            return fail(kind.refusal(), "handshake queue full");
        };
        match (waiting, output, carry) {
            (
                Waiting::OpenRequest,
                Output::OpenRequest(r),
                Carry::Open {
                    chunk_type,
                    policy,
                    client_certificate,
                },
            ) => self.open_received(host, now, r?, chunk_type, policy, client_certificate, out),
            (
                Waiting::OpenIssued,
                Output::OpenIssued(r),
                Carry::Open {
                    policy,
                    client_certificate,
                    ..
                },
            ) => {
                let issued = r.map_err(|(status, reason)| Failure { status, reason })?;
                self.open_issued(host, now, issued, policy, client_certificate, out)
            }
            (Waiting::OpenResponse, Output::OpenResponse(r, seq), _) => {
                let Phase::Open(c) = &mut self.phase else {
                    return fail(StatusCode::BadTcpInternalError, "channel missing");
                };
                let bytes = r.map_err(|s| Failure {
                    status: response_status(s),
                    reason: "OpenSecureChannelResponse",
                })?;
                c.send_seq = seq;
                out.extend_from_slice(&bytes);
                Ok(Step::Continue)
            }
            _ => fail(
                StatusCode::BadTcpInternalError,
                "unexpected handshake job result",
            ),
        }
    }

    fn finish_service<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        done: JobDone,
        request_id: u32,
        handle: u32,
        is_activate: bool,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let State {
            phase,
            negotiated,
            endpoint_url,
            peer,
            session_activated,
            ..
        } = self;
        let Phase::Open(c) = phase else {
            return fail(StatusCode::BadTcpInternalError, "channel missing");
        };
        let negotiated = negotiated.ok_or(Failure {
            status: StatusCode::BadTcpInternalError,
            reason: "no Hello",
        })?;
        let ctx = c.request_context(*peer, endpoint_url);
        let mut response = host.resume(&ctx, done, now);
        response.response_header_mut().request_handle = handle;
        if is_activate
            && matches!(response, Response::ActivateSession(_))
            && response.response_header().service_result.is_good()
        {
            *session_activated = true;
        }
        send_response(c, &negotiated, request_id, &response, handle, now, out)?;
        if let Some(r) = host.recycler() {
            r.give_response(response);
        }
        Ok(Step::Continue)
    }
}
