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
//! handshakes: the connection then waits — input held, deferred responses held — until the
//! runtime hands the [`JobDone`] back through [`ServerConnection::on_job_done`]. See
//! [`crate::server::handshake`].

use std::net::SocketAddr;
use std::sync::Arc;

use crate::config::{TransportLimits, MIN_BUFFER_SIZE};
use crate::encoding::{Decode, Decoder, Encode};
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
    /// Response encoding buffer, reused.
    body_out: Vec<u8>,
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
                body_out: Vec::new(),
                channel_to_report: None,
                session_activated: false,
                partial_since_ns: None,
                deferred: Vec::new(),
                moving: None,
                job: None,
                waiting: None,
                held: Vec::new(),
                cheap_open: false,
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

    /// Bytes held for unfinished chunks and messages, and input held while a job is out.
    pub fn buffered_bytes(&self) -> usize {
        self.reader.buffered() + self.st.assembler.buffered() + self.st.held.len()
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
                phase,
                negotiated,
                body_out,
                ..
            } = &mut self.st;
            if let (Phase::Open(c), Some(n)) = (phase, *negotiated) {
                if let Err(f) = send_response(c, body_out, &n, request_id, &fault, handle, now, out)
                {
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

    /// A handshake job is out: the runtime should stop reading this connection (what it
    /// still delivers is held, up to `max_message_size_pre_session` bytes) until
    /// [`ServerConnection::on_job_done`].
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

    /// Keeps input that arrives while a job is out, within the pre-session message budget.
    fn hold<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        data: &[u8],
        out: &mut Vec<u8>,
    ) -> ConnStatus {
        let limit =
            (self.st.limits.max_message_size_pre_session as usize).max(MIN_BUFFER_SIZE as usize);
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
    /// `ShardState::take_ready_channels` names; `on_recv` calls it itself. While a handshake
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
            body_out,
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
                    send_response(
                        c,
                        body_out,
                        &negotiated,
                        request_id,
                        &response,
                        handle,
                        now,
                        out,
                    )
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
                    let r = send_body(c, body_out, &n, request_id, &body, request_handle, now, out);
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
        self.st.body_out = Vec::new();
        self.st.partial_since_ns = None;
        self.st.job = None;
        self.st.waiting = None;
        self.st.held = Vec::new();
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

    #[allow(clippy::too_many_arguments)]
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
            body_out,
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
        send_response(
            c,
            body_out,
            &negotiated,
            request_id,
            &response,
            handle,
            now,
            out,
        )?;
        if let Some(r) = host.recycler() {
            r.give_response(response);
        }
        Ok(Step::Continue)
    }

    fn on_open<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        frame: Frame<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let head = parse_chunk_head(frame.header, frame.bytes)?;
        let SecurityHeader::Asymmetric(asym) = &head.security else {
            return fail(
                StatusCode::BadTcpMessageTypeInvalid,
                "OPN without asymmetric header",
            );
        };
        let policy = match host.security().find(&asym.security_policy_uri) {
            Some(p) => p.clone(),
            None => {
                return fail(
                    StatusCode::BadSecurityPolicyRejected,
                    "security policy not offered",
                )
            }
        };
        match &self.phase {
            Phase::Open(c) => {
                if head.secure_channel_id != c.id {
                    return fail(
                        StatusCode::BadSecureChannelIdInvalid,
                        "renew for another channel",
                    );
                }
                if c.policy.uri() != policy.uri() || c.client_certificate != asym.sender_certificate
                {
                    return fail(
                        StatusCode::BadSecurityChecksFailed,
                        "renew with other security",
                    );
                }
            }
            Phase::AwaitOpen { .. } => {}
            _ => return fail(StatusCode::BadTcpMessageTypeInvalid, "OPN before Hello"),
        }
        // Each OPN costs an RSA private-key operation: the policy limits them per address.
        policy
            .admit_handshake(self.peer.map(|p| p.ip()), now)
            .map_err(|s| Failure {
                status: s,
                reason: "too many handshakes",
            })?;
        // The certificate check, the decryption and the signature check: a job (for a first
        // OPN in one chunk, with the response: `open_issue`).
        self.cheap_open = policy.uri() == SECURITY_POLICY_NONE_URI;
        let client_certificate = asym.sender_certificate.clone();
        let thumbprint = asym.receiver_certificate_thumbprint.clone();
        let bytes = frame.bytes.to_vec();
        let offset = head.sequence_offset;
        let first = matches!(self.phase, Phase::AwaitOpen { recv_seq: None, .. })
            && frame.header.chunk_type == crate::transport::ChunkType::Final
            && self.assembler.started_ns().is_none();
        if first {
            return self.open_issue(
                host,
                now,
                frame.header.chunk_type,
                policy,
                client_certificate,
                thumbprint,
                bytes,
                offset,
                out,
            );
        }
        let job_policy = policy.clone();
        let job_certificate = client_certificate.clone();
        let carry = Carry::Open {
            chunk_type: frame.header.chunk_type,
            policy,
            client_certificate,
        };
        let job = HandshakeJob::new(JobKind::OpenRequest, carry, move || {
            let opened = (|| {
                let crypto = job_policy.asymmetric(
                    Role::Server,
                    job_certificate.as_deref(),
                    thumbprint.as_deref(),
                    now,
                )?;
                let mut scratch = Vec::new();
                let o = open_chunk(&bytes, offset, &*crypto, &mut scratch)?;
                let (sequence_number, request_id, body) =
                    (o.sequence_number, o.request_id, o.body.to_vec());
                Ok(OpenedRequest {
                    crypto,
                    sequence_number,
                    request_id,
                    body,
                })
            })();
            Output::OpenRequest(opened)
        });
        self.submit(host, now, job, Waiting::OpenRequest, out)
    }

    /// A connection's first OpenSecureChannel in one chunk (the usual case): one job opens
    /// the request, checks and decodes it, derives the channel's keys and signs and encrypts
    /// the response, where [`State::open_received`] would take a second job for the response.
    /// The channel id and the server nonce are taken here first (the response carries them);
    /// the id is released with the connection if the job fails.
    #[allow(clippy::too_many_arguments)]
    fn open_issue<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        chunk_type: crate::transport::ChunkType,
        policy: Arc<dyn SecurityPolicy>,
        client_certificate: Option<Vec<u8>>,
        thumbprint: Option<Vec<u8>>,
        bytes: Vec<u8>,
        offset: usize,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let negotiated = self.negotiated.ok_or(Failure {
            status: StatusCode::BadTcpInternalError,
            reason: "no Hello",
        })?;
        let channel_id = host.open_channel().map_err(|status| Failure {
            status,
            reason: "no secure channel free",
        })?;
        self.channel_to_report = Some(channel_id);
        let nonce_len = policy.nonce_len();
        let random_nonce = if nonce_len > 0 {
            crate::random::bytes(host.random(), nonce_len)
        } else {
            Vec::new()
        };
        let max_size = self.max_message_size();
        let limits = self.limits;
        let job_policy = policy.clone();
        let job_certificate = client_certificate.clone();
        let carry = Carry::Open {
            chunk_type,
            policy,
            client_certificate,
        };
        let job = HandshakeJob::new(JobKind::OpenRequest, carry, move || {
            let issued = (|| {
                let policy = &*job_policy;
                let crypto = policy
                    .asymmetric(
                        Role::Server,
                        job_certificate.as_deref(),
                        thumbprint.as_deref(),
                        now,
                    )
                    .map_err(|s| (s, ""))?;
                let mut scratch = Vec::new();
                let o = open_chunk(&bytes, offset, &*crypto, &mut scratch).map_err(|s| (s, ""))?;
                if o.body.len() > max_size {
                    return Err((StatusCode::BadRequestTooLarge, "OPN too large"));
                }
                let req = decode_open_request(o.body, &limits)?;
                if req.request_type != SecurityTokenRequestType::Issue {
                    return Err((StatusCode::BadRequestTypeInvalid, "Renew without a channel"));
                }
                check_client_nonce(&req, nonce_len)?;
                let lifetime_ms = limits.revise_token_lifetime_ms(req.requested_lifetime);
                let (server_nonce, sym) = policy
                    .new_token(
                        Role::Server,
                        req.security_mode,
                        random_nonce,
                        req.client_nonce.as_bytes(),
                    )
                    .map_err(|s| (s, ""))?;
                let body = open_response_body(&req, channel_id, 1, lifetime_ms, server_nonce, now);
                let header = SecurityHeader::Asymmetric(
                    policy.asymmetric_header(job_certificate.as_deref()),
                );
                let mut send_seq = SequenceCounter::new(policy.legacy_sequence_numbers());
                let response = seal_open_response(
                    channel_id,
                    &header,
                    o.request_id,
                    &body,
                    &*crypto,
                    &mut send_seq,
                    &negotiated,
                )
                .map_err(|s| (response_status(s), "OpenSecureChannelResponse"))?;
                Ok(Issued {
                    sequence_number: o.sequence_number,
                    mode: req.security_mode,
                    lifetime_ms,
                    crypto: sym,
                    response,
                    send_seq,
                })
            })();
            Output::OpenIssued(issued)
        });
        self.submit(host, now, job, Waiting::OpenIssued, out)
    }

    /// The job of [`State::open_issue`] is done: check what needs the shard and open the channel.
    fn open_issued<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        issued: Issued,
        policy: Arc<dyn SecurityPolicy>,
        client_certificate: Option<Vec<u8>>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let Phase::AwaitOpen { .. } = &self.phase else {
            return fail(StatusCode::BadTcpInternalError, "channel already open");
        };
        let Some(id) = self.channel_to_report else {
            return fail(StatusCode::BadTcpInternalError, "no channel id");
        };
        let mut recv_seq = SequenceChecker::new(policy.legacy_sequence_numbers());
        recv_seq.check(issued.sequence_number)?;
        if !host.security().allows(policy.uri(), issued.mode) {
            return fail(
                StatusCode::BadSecurityModeRejected,
                "security mode not offered with this policy",
            );
        }
        host.channel_policy(policy.uri(), true);
        let first = Token {
            id: 1,
            created_ns: now.mono_ns,
            lifetime_ms: issued.lifetime_ms,
            crypto: issued.crypto,
            activated: true,
        };
        self.phase = Phase::Open(Channel::issued(
            id,
            policy,
            issued.mode,
            client_certificate,
            first,
            issued.send_seq,
            recv_seq,
        ));
        out.extend_from_slice(&issued.response);
        Ok(Step::Continue)
    }

    /// An OPN chunk came back decrypted and verified: assemble, answer Issue or Renew, and
    /// hand the response's signature and encryption out as a job.
    #[allow(clippy::too_many_arguments)]
    fn open_received<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        opened: OpenedRequest,
        chunk_type: crate::transport::ChunkType,
        policy: Arc<dyn SecurityPolicy>,
        client_certificate: Option<Vec<u8>>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let max_size = self.max_message_size();
        let OpenedRequest {
            crypto,
            sequence_number,
            request_id,
            body,
        } = opened;
        match &mut self.phase {
            Phase::Open(c) => c.recv_seq.check(sequence_number)?,
            Phase::AwaitOpen { recv_seq, .. } => recv_seq
                .get_or_insert_with(|| SequenceChecker::new(policy.legacy_sequence_numbers()))
                .check(sequence_number)?,
            _ => return fail(StatusCode::BadTcpMessageTypeInvalid, "OPN before Hello"),
        }
        let max_chunks = self.limits.max_chunk_count;
        let assembled = self.assembler.push(
            MessageType::OpenSecureChannel,
            chunk_type,
            request_id,
            &body,
            max_size,
            max_chunks,
            StatusCode::BadRequestTooLarge,
            now.mono_ns,
        )?;
        let (request_id, body) = match assembled {
            Assembly::Partial => return Ok(Step::Continue),
            Assembly::Aborted { .. } => return Ok(Step::Continue),
            Assembly::Complete { request_id, body } => (request_id, body),
        };
        let req = decode_open_request(body, &self.limits)
            .map_err(|(status, reason)| Failure { status, reason })?;
        let nonce_len = policy.nonce_len();
        check_client_nonce(&req, nonce_len)
            .map_err(|(status, reason)| Failure { status, reason })?;
        let lifetime_ms = self.limits.revise_token_lifetime_ms(req.requested_lifetime);
        let random_nonce = if nonce_len > 0 {
            crate::random::bytes(host.random(), nonce_len)
        } else {
            Vec::new()
        };
        let server_nonce;
        let negotiated = self.negotiated.ok_or(Failure {
            status: StatusCode::BadTcpInternalError,
            reason: "no Hello",
        })?;

        if req.request_type == SecurityTokenRequestType::Issue {
            let Phase::AwaitOpen { recv_seq, .. } = &mut self.phase else {
                return fail(
                    StatusCode::BadRequestTypeInvalid,
                    "Issue on an open channel",
                );
            };
            let recv_seq = recv_seq
                .take()
                .unwrap_or_else(|| SequenceChecker::new(policy.legacy_sequence_numbers()));
            if !host.security().allows(policy.uri(), req.security_mode) {
                return fail(
                    StatusCode::BadSecurityModeRejected,
                    "security mode not offered with this policy",
                );
            }
            let (nonce, sym) = policy.new_token(
                Role::Server,
                req.security_mode,
                random_nonce,
                req.client_nonce.as_bytes(),
            )?;
            server_nonce = nonce;
            let id = host.open_channel()?;
            host.channel_policy(policy.uri(), true);
            self.channel_to_report = Some(id);
            let first = Token {
                id: 1,
                created_ns: now.mono_ns,
                lifetime_ms,
                crypto: sym,
                activated: true,
            };
            let send_seq = SequenceCounter::new(policy.legacy_sequence_numbers());
            self.phase = Phase::Open(Channel::issued(
                id,
                policy.clone(),
                req.security_mode,
                client_certificate,
                first,
                send_seq,
                recv_seq,
            ));
        } else if req.request_type == SecurityTokenRequestType::Renew {
            let Phase::Open(c) = &mut self.phase else {
                return fail(StatusCode::BadRequestTypeInvalid, "Renew without a channel");
            };
            if req.security_mode != c.mode {
                return fail(
                    StatusCode::BadSecurityModeRejected,
                    "Renew with another security mode",
                );
            }
            let (nonce, sym) = policy.new_token(
                Role::Server,
                req.security_mode,
                random_nonce,
                req.client_nonce.as_bytes(),
            )?;
            server_nonce = nonce;
            let id = c.next_token_id;
            c.next_token_id = c.next_token_id.wrapping_add(1).max(1);
            let new = Token {
                id,
                created_ns: now.mono_ns,
                lifetime_ms,
                crypto: sym,
                activated: false,
            };
            let old = std::mem::replace(&mut c.current, new);
            if old.activated {
                c.previous = Some(old);
            }
        } else {
            return fail(StatusCode::BadRequestTypeInvalid, "unknown request type");
        }
        let Phase::Open(c) = &mut self.phase else {
            return fail(StatusCode::BadTcpInternalError, "channel missing");
        };
        let body = open_response_body(&req, c.id, c.current.id, lifetime_ms, server_nonce, now);
        let header =
            SecurityHeader::Asymmetric(c.policy.asymmetric_header(c.client_certificate.as_deref()));
        let channel_id = c.id;
        let mut seq = c.send_seq.clone();
        // The signature (private key) and the encryption of the response: a job.
        let job = HandshakeJob::new(JobKind::OpenResponse, Carry::None, move || {
            let r = seal_open_response(
                channel_id,
                &header,
                request_id,
                &body,
                &*crypto,
                &mut seq,
                &negotiated,
            );
            Output::OpenResponse(r, seq)
        });
        self.submit(host, now, job, Waiting::OpenResponse, out)
    }

    fn on_message<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        frame: Frame<'_>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
        let max_size = self.max_message_size();
        let State {
            phase,
            limits,
            assembler,
            scratch,
            ..
        } = self;
        let Phase::Open(c) = phase else {
            return fail(
                StatusCode::BadTcpSecureChannelUnknown,
                "no secure channel is open",
            );
        };
        let head = parse_symmetric_head(frame.bytes)?;
        if head.secure_channel_id != c.id {
            return fail(
                StatusCode::BadSecureChannelIdInvalid,
                "wrong secure channel id",
            );
        }
        let token_id = head.token_id;
        // Find the token, activating a renewed one on first use.
        let token = if token_id == c.current.id {
            // Part 6 §6.7.4: the old token is accepted until the new one is first used.
            c.current.activated = true;
            c.previous = None;
            &c.current
        } else {
            match &c.previous {
                Some(p) if p.id == token_id => p,
                _ => return fail(StatusCode::BadSecureChannelTokenUnknown, "unknown token id"),
            }
        };
        if now.mono_ns >= token.expires_ns() {
            return fail(StatusCode::BadSecureChannelTokenUnknown, "token expired");
        }
        let opened = open_chunk(frame.bytes, head.sequence_offset, &*token.crypto, scratch)?;
        c.recv_seq.check(opened.sequence_number)?;
        if frame.header.message_type == MessageType::CloseSecureChannel {
            return Ok(Step::CloseQuietly);
        }
        let assembled = assembler.push(
            MessageType::Message,
            frame.header.chunk_type,
            opened.request_id,
            opened.body,
            max_size,
            limits.max_chunk_count,
            StatusCode::BadRequestTooLarge,
            now.mono_ns,
        )?;
        let (request_id, body) = match assembled {
            Assembly::Partial | Assembly::Aborted { .. } => return Ok(Step::Continue),
            Assembly::Complete { request_id, body } => (request_id, body),
        };
        let headroom = host.memory_headroom();
        let request = decode_request(host.recycler(), body, limits, headroom);
        let req = match request {
            Err((handle, status)) => {
                let negotiated = self.negotiated.ok_or(Failure {
                    status: StatusCode::BadTcpInternalError,
                    reason: "no Hello",
                })?;
                let Phase::Open(c) = &mut self.phase else {
                    return fail(StatusCode::BadTcpInternalError, "channel missing");
                };
                send_response(
                    c,
                    &mut self.body_out,
                    &negotiated,
                    request_id,
                    &crate::response::fault(handle, status, now),
                    handle,
                    now,
                    out,
                )?;
                return Ok(Step::Continue);
            }
            Ok(req) => req,
        };
        if let Request::ActivateSession(a) = &req {
            if let Some(shard) = host.session_owner(&a.request_header.authentication_token) {
                self.moving = Some((request_id, req));
                return Ok(Step::Move(shard));
            }
        }
        self.answer(host, now, request_id, req, out)?;
        Ok(Step::Continue)
    }

    /// Dispatches one decoded service request and sends its response (unless the host
    /// defers it: a queued Publish).
    fn answer<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        request_id: u32,
        req: Request,
        out: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        let State {
            phase,
            negotiated,
            endpoint_url,
            peer,
            body_out,
            session_activated,
            job,
            waiting,
            ..
        } = self;
        let Phase::Open(c) = phase else {
            return fail(
                StatusCode::BadTcpSecureChannelUnknown,
                "no secure channel is open",
            );
        };
        let negotiated = negotiated.ok_or(Failure {
            status: StatusCode::BadTcpInternalError,
            reason: "no Hello",
        })?;
        let handle = req.request_header().request_handle;
        let token = &req.request_header().authentication_token;
        let session_max = if token.is_null() {
            0
        } else {
            host.session_max_response_size(token)
        };
        let (response, is_activate) = if matches!(
            req,
            Request::OpenSecureChannel(_) | Request::CloseSecureChannel(_)
        ) {
            (
                crate::response::fault(handle, StatusCode::BadServiceUnsupported, now),
                false,
            )
        } else {
            let is_activate = matches!(req, Request::ActivateSession(_));
            let ctx = c.request_context(*peer, endpoint_url);
            match host.dispatch_deferrable(&ctx, req, request_id, now) {
                Some(r) => (r, is_activate),
                None => {
                    // A session service whose handshake work is a job: wait for it.
                    if let Some(j) = host.take_job() {
                        *job = Some(j);
                        *waiting = Some(Waiting::Service {
                            request_id,
                            handle,
                            is_activate,
                        });
                    }
                    // Otherwise answered later (a queued Publish): see `flush_deferred`.
                    return Ok(());
                }
            }
        };
        let mut response = response;
        response.response_header_mut().request_handle = handle;
        if is_activate
            && matches!(response, Response::ActivateSession(_))
            && response.response_header().service_result.is_good()
        {
            *session_activated = true;
        }
        let negotiated = Negotiated {
            peer_max_message_size: response_limit(negotiated.peer_max_message_size, session_max),
            ..negotiated
        };
        let sent = send_response(
            c,
            body_out,
            &negotiated,
            request_id,
            &response,
            handle,
            now,
            out,
        );
        if let Some(r) = host.recycler() {
            r.give_response(response);
        }
        sent
    }
}

/// The largest response body: the Hello's (already bounded by our own limit) and the
/// session's MaxResponseMessageSize, whichever is smaller (0 = not set).
fn response_limit(hello: u32, session: u32) -> u32 {
    match (hello, session) {
        (0, s) => s,
        (h, 0) => h,
        (h, s) => h.min(s),
    }
}

/// The OpenSecureChannelRequest in an assembled OPN body.
fn decode_open_request(
    body: &[u8],
    limits: &TransportLimits,
) -> Result<OpenSecureChannelRequest, (StatusCode, &'static str)> {
    let mut d = Decoder::new(body, limits.decode);
    let type_id = NodeId::decode(&mut d).map_err(|e| (e.status, "OPN type id"))?;
    if type_id.as_ns0() != Some(node_ids::OpenSecureChannelRequest_Encoding_DefaultBinary) {
        return Err((
            StatusCode::BadTcpMessageTypeInvalid,
            "OPN does not carry OpenSecureChannelRequest",
        ));
    }
    OpenSecureChannelRequest::decode(&mut d).map_err(|e| (e.status, "OpenSecureChannelRequest"))
}

/// The encoded OpenSecureChannelResponse (type id and body) for `req`.
fn open_response_body(
    req: &OpenSecureChannelRequest,
    channel_id: u32,
    token_id: u32,
    lifetime_ms: u32,
    server_nonce: Vec<u8>,
    now: Now,
) -> Vec<u8> {
    let resp = OpenSecureChannelResponse {
        response_header: ResponseHeader {
            timestamp: now.utc,
            request_handle: req.request_header.request_handle,
            service_result: StatusCode::Good,
            ..Default::default()
        },
        server_protocol_version: PROTOCOL_VERSION,
        security_token: ChannelSecurityToken {
            channel_id,
            token_id,
            created_at: now.utc,
            revised_lifetime: lifetime_ms,
        },
        server_nonce: ByteString::from(server_nonce),
    };
    let mut body = Vec::new();
    NodeId::ns0(node_ids::OpenSecureChannelResponse_Encoding_DefaultBinary).encode(&mut body);
    resp.encode(&mut body);
    body
}

/// An OpenSecureChannelResponse the peer's limits cannot carry is BadResponseTooLarge.
fn response_status(s: StatusCode) -> StatusCode {
    if s == StatusCode::BadTcpMessageTooLarge {
        StatusCode::BadResponseTooLarge
    } else {
        s
    }
}

/// A client nonce of the policy's length (none for SecurityPolicy None).
fn check_client_nonce(
    req: &OpenSecureChannelRequest,
    nonce_len: usize,
) -> Result<(), (StatusCode, &'static str)> {
    if nonce_len > 0 && req.client_nonce.as_bytes().len() != nonce_len {
        return Err((StatusCode::BadNonceInvalid, "client nonce length"));
    }
    Ok(())
}

/// The OpenSecureChannelResponse `body` signed and encrypted (the RSA work of a job) into the
/// chunks the peer's limits allow, `seq` advanced past them.
fn seal_open_response(
    channel_id: u32,
    header: &SecurityHeader,
    request_id: u32,
    body: &[u8],
    crypto: &dyn ChunkCrypto,
    seq: &mut SequenceCounter,
    negotiated: &Negotiated,
) -> Result<Vec<u8>, StatusCode> {
    let mut chunks = Vec::new();
    write_chunks(
        MessageType::OpenSecureChannel,
        channel_id,
        header,
        request_id,
        body,
        crypto,
        seq,
        &ChunkLimits::negotiated(negotiated),
        &mut chunks,
    )?;
    Ok(chunks)
}

/// Decodes a request body (type id + message). An unknown type id or a body that fails
/// to decode is `Err((request handle if readable, status))`: the caller answers with a
/// ServiceFault (BadServiceUnsupported, or the decoder's status). Decoding stops at the
/// decoded-size budget: `max_decoded_size` (BadEncodingLimitsExceeded), or the shard's
/// `headroom` when that is smaller (BadResourceUnavailable: the server is short of memory,
/// the request itself may be fine).
fn decode_request(
    recycler: Option<&mut Recycler>,
    body: &[u8],
    limits: &TransportLimits,
    headroom: usize,
) -> Result<Request, (u32, StatusCode)> {
    let mut d = Decoder::with_budget(body, limits.decode, headroom);
    let Ok(type_id) = NodeId::decode(&mut d) else {
        return Err((0, StatusCode::BadDecodingError));
    };
    let after_type = d.position();
    let header_handle = || {
        let rest = body.get(after_type..).unwrap_or_default();
        RequestHeader::from_bytes(rest, limits.decode)
            .map(|h| h.request_handle)
            .unwrap_or(0)
    };
    let decoded = match recycler {
        Some(r) => r.decode_request(&type_id, &mut d),
        None => Request::decode_body(&type_id, &mut d),
    };
    match decoded {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err((header_handle(), StatusCode::BadServiceUnsupported)),
        Err(e)
            if e.what == crate::encoding::DECODED_SIZE
                && headroom < limits.decode.max_decoded_size =>
        {
            Err((header_handle(), StatusCode::BadResourceUnavailable))
        }
        Err(e) => Err((header_handle(), e.status)),
    }
}

/// Encodes a response straight into `out` behind its chunk headers and seals it there (see
/// [`send_encoded`]).
#[allow(clippy::too_many_arguments)]
fn send_response(
    c: &mut Channel,
    scratch: &mut Vec<u8>,
    negotiated: &Negotiated,
    request_id: u32,
    response: &Response,
    handle: u32,
    now: Now,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    send_encoded(
        c,
        scratch,
        negotiated,
        request_id,
        |o| response.encode_with_type_id(o),
        handle,
        now,
        out,
    )
}

/// Chunks an already encoded response body (type id + message; see [`send_encoded`]).
#[allow(clippy::too_many_arguments)]
fn send_body(
    c: &mut Channel,
    scratch: &mut Vec<u8>,
    negotiated: &Negotiated,
    request_id: u32,
    body: &[u8],
    handle: u32,
    now: Now,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    send_encoded(
        c,
        scratch,
        negotiated,
        request_id,
        |o| o.extend_from_slice(body),
        handle,
        now,
        out,
    )
}

/// Writes a response body that `encode` appends (type id + message) straight into `out`
/// behind its chunk headers and seals it there (one chunk: no copy of the body; more chunks
/// go through `scratch`). A response over the client's limits becomes a ServiceFault
/// BadResponseTooLarge (Part 4 §5.3), nothing of it having been sent.
#[allow(clippy::too_many_arguments)]
fn send_encoded(
    c: &mut Channel,
    scratch: &mut Vec<u8>,
    negotiated: &Negotiated,
    request_id: u32,
    encode: impl FnOnce(&mut Vec<u8>),
    handle: u32,
    now: Now,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    let limits = ChunkLimits::negotiated(negotiated);
    let token = match (&c.previous, c.current.activated) {
        (Some(p), false) => p,
        _ => &c.current,
    };
    let header = SecurityHeader::Symmetric { token_id: token.id };
    let crypto: &dyn ChunkCrypto = &*token.crypto;
    match write_message_with(
        MessageType::Message,
        c.id,
        &header,
        request_id,
        encode,
        crypto,
        &mut c.send_seq,
        &limits,
        out,
        scratch,
    ) {
        Ok(_) => Ok(()),
        Err(StatusCode::BadTcpMessageTooLarge) => {
            scratch.clear();
            crate::response::fault(handle, StatusCode::BadResponseTooLarge, now)
                .encode_with_type_id(scratch);
            write_chunks(
                MessageType::Message,
                c.id,
                &header,
                request_id,
                scratch,
                crypto,
                &mut c.send_seq,
                &limits,
                out,
            )
            .map(|_| ())
            .map_err(|_| Failure {
                status: StatusCode::BadResponseTooLarge,
                reason: "response too large",
            })
        }
        Err(s) => Err(Failure {
            status: s,
            reason: "encoding the response",
        }),
    }
}
