//! The client end of a UA-TCP connection and secure channel, sans-IO.
//!
//! `start` writes the Hello; `on_recv` takes the ACK (and sends the OpenSecureChannel),
//! the OPN response, and response chunks; `send_request` / `send_encoded` chunk requests
//! (pipelining is free: send many, then poll); `poll_response` hands out responses in
//! arrival order; `on_timer` renews the token at 75 % of its lifetime.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::{TransportLimits, MIN_BUFFER_SIZE};
use crate::encoding::{Decode, Decoder, Encode};
use crate::generated::messages::{Request, Response};
use crate::generated::node_ids;
use crate::generated::types::{
    MessageSecurityMode, OpenSecureChannelRequest, OpenSecureChannelResponse, ReadResponse,
    RequestHeader, ResponseHeader, SecurityTokenRequestType, ServiceFault,
};
use crate::secure_channel::{
    open_chunk, parse_chunk_head, write_abort_chunk, write_chunks, Assembly, ChunkCrypto,
    ChunkLimits, MessageAssembler, NonePolicy, PendingToken, Role, SecurityHeader, SecurityPolicy,
    SequenceChecker, SequenceCounter,
};
use crate::time::Now;
use crate::transport::{
    negotiate_client, AcknowledgeMessage, ErrorMessage, FrameReader, HelloMessage, MessageType,
    Negotiated, MESSAGE_HEADER_LEN, PROTOCOL_VERSION,
};
use crate::types::{ByteString, NodeId, StatusCode};

/// How a client connects.
#[derive(Clone)]
pub struct ClientConfig {
    /// The EndpointUrl sent in the Hello (`opc.tcp://host:port/path`).
    pub endpoint_url: String,
    /// Buffer sizes, message size and chunk count we announce, and decode limits.
    pub limits: TransportLimits,
    /// Token lifetime asked for, in milliseconds.
    pub requested_lifetime_ms: u32,
    /// The security policy (None by default).
    pub policy: Arc<dyn SecurityPolicy>,
    pub mode: MessageSecurityMode,
    /// The server's certificate (DER) for secured policies.
    pub server_certificate: Option<Vec<u8>>,
}

impl ClientConfig {
    /// SecurityPolicy None, default limits, a one-hour token.
    pub fn new(endpoint_url: &str) -> Self {
        let limits = TransportLimits {
            // A client buffers what the server sends: allow the full size at once.
            max_message_size_pre_session: TransportLimits::default().max_message_size,
            ..TransportLimits::default()
        };
        ClientConfig {
            endpoint_url: endpoint_url.to_owned(),
            limits,
            requested_lifetime_ms: 3_600_000,
            policy: Arc::new(NonePolicy),
            mode: MessageSecurityMode::None,
            server_certificate: None,
        }
    }
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("endpoint_url", &self.endpoint_url)
            .field("limits", &self.limits)
            .field("requested_lifetime_ms", &self.requested_lifetime_ms)
            .field("policy", &self.policy.uri())
            .field("mode", &self.mode)
            .finish()
    }
}

/// Where the client is in the connection sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientState {
    /// `start` not called yet.
    Created,
    /// Hello sent.
    AwaitAck,
    /// OpenSecureChannel (Issue) sent.
    AwaitOpen,
    /// The channel is open: requests may be sent.
    Open,
    /// Closed: by us (CLO), by an ERR from the server (its status), or by a protocol
    /// error we detected.
    Closed(StatusCode),
}

struct ClientToken {
    id: u32,
    created_ns: u64,
    lifetime_ms: u32,
    crypto: Box<dyn ChunkCrypto>,
}

struct PendingOpen {
    request_id: u32,
    /// The nonce sent and what the policy needs to finish the keys with the server's.
    token: PendingToken,
}

/// The sans-IO client connection. See the module documentation.
pub struct ClientConnection {
    cfg: ClientConfig,
    hello: HelloMessage,
    state: ClientState,
    reader: FrameReader,
    negotiated: Option<Negotiated>,
    channel_id: u32,
    asym: Option<Box<dyn ChunkCrypto>>,
    token: Option<ClientToken>,
    previous: Option<ClientToken>,
    pending_open: Option<PendingOpen>,
    send_seq: SequenceCounter,
    recv_seq: SequenceChecker,
    next_request_id: u32,
    auth_token: NodeId,
    assembler: MessageAssembler,
    scratch: Vec<u8>,
    body_buf: Vec<u8>,
    responses: VecDeque<(u32, Response)>,
    /// Read responses given back (`give_back`): the next ones are decoded into them. Boxed
    /// because `Response::Read` holds a box: the allocation itself is what is reused.
    #[allow(clippy::vec_box)]
    spare_read: Vec<Box<ReadResponse>>,
    in_flight: usize,
    /// Client nonces (OpenSecureChannel).
    random: Box<dyn crate::random::Random + Send>,
}

/// Most Read responses a client keeps for reuse (`ClientConnection::give_back`): one per
/// request a pipelining client has in flight, up to this.
pub const SPARE_READS_MAX: usize = 1024;

/// Largest Read response (in results) a client keeps for reuse; a bigger one is dropped, so
/// the memory kept stays bounded (the server's recycler keeps requests to the same size).
pub const SPARE_READ_RESULTS_MAX: usize = 256;

/// A ServiceFault standing for a request the server aborted.
fn fault(handle: u32, status: StatusCode) -> Response {
    Response::ServiceFault(Box::new(ServiceFault {
        response_header: ResponseHeader {
            request_handle: handle,
            service_result: status,
            ..Default::default()
        },
    }))
}

fn ack_or_error(t: MessageType) -> bool {
    matches!(t, MessageType::Acknowledge | MessageType::Error)
}
fn secure_or_error(t: MessageType) -> bool {
    t.is_secure() || t == MessageType::Error
}

impl ClientConnection {
    /// A client connection; `random` makes its nonces (a CSPRNG for a secured channel; a
    /// seeded one in tests).
    pub fn new(cfg: ClientConfig, random: Box<dyn crate::random::Random + Send>) -> Self {
        let legacy = cfg.policy.legacy_sequence_numbers();
        let hello = HelloMessage {
            protocol_version: PROTOCOL_VERSION,
            receive_buffer_size: cfg.limits.receive_buffer_size,
            send_buffer_size: cfg.limits.send_buffer_size,
            max_message_size: cfg.limits.max_message_size,
            max_chunk_count: cfg.limits.max_chunk_count,
            endpoint_url: cfg.endpoint_url.as_str().into(),
        };
        let mut reader = FrameReader::new();
        reader.set_filter(Some(ack_or_error));
        ClientConnection {
            cfg,
            hello,
            state: ClientState::Created,
            reader,
            negotiated: None,
            channel_id: 0,
            asym: None,
            token: None,
            previous: None,
            pending_open: None,
            send_seq: SequenceCounter::new(legacy),
            recv_seq: SequenceChecker::new(legacy),
            next_request_id: 1,
            auth_token: NodeId::default(),
            assembler: MessageAssembler::new(),
            scratch: Vec::new(),
            body_buf: Vec::new(),
            responses: VecDeque::new(),
            spare_read: Vec::new(),
            in_flight: 0,
            random,
        }
    }

    /// The connection's random number generator (for the client nonce of CreateSession).
    pub fn random(&mut self) -> &mut dyn crate::random::Random {
        &mut *self.random
    }

    pub fn state(&self) -> ClientState {
        self.state
    }
    /// The channel's security policy (its `sign_own` signs the ActivateSession's client
    /// signature).
    pub fn policy(&self) -> &Arc<dyn SecurityPolicy> {
        &self.cfg.policy
    }
    pub fn is_open(&self) -> bool {
        self.state == ClientState::Open
    }
    pub fn is_closed(&self) -> bool {
        matches!(self.state, ClientState::Closed(_))
    }
    /// The secure channel id (0 before the channel is open).
    pub fn channel_id(&self) -> u32 {
        self.channel_id
    }
    /// The current token id and its revised lifetime (ms).
    pub fn token(&self) -> Option<(u32, u32)> {
        self.token.as_ref().map(|t| (t.id, t.lifetime_ms))
    }
    pub fn negotiated(&self) -> Option<Negotiated> {
        self.negotiated
    }
    /// Requests sent and not yet answered.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }
    /// The session's authentication token, written into every request header sent with
    /// `send_request`.
    pub fn set_authentication_token(&mut self, token: NodeId) {
        self.auth_token = token;
    }
    pub fn authentication_token(&self) -> &NodeId {
        &self.auth_token
    }

    /// Writes the Hello.
    pub fn start(&mut self, _now: Now, out: &mut Vec<u8>) {
        if self.state != ClientState::Created {
            return;
        }
        self.hello.write(out);
        self.state = ClientState::AwaitAck;
    }

    fn take_request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        self.next_request_id = self.next_request_id.wrapping_add(1).max(1);
        id
    }

    fn fail(&mut self, status: StatusCode) -> StatusCode {
        self.state = ClientState::Closed(status);
        self.reader.clear();
        self.assembler.clear();
        status
    }

    /// Feeds received bytes. Responses become available through `poll_response`. An
    /// error closes the connection (the server's ERR status, or what we found wrong).
    pub fn on_recv(&mut self, now: Now, data: &[u8], out: &mut Vec<u8>) -> Result<(), StatusCode> {
        if let ClientState::Closed(s) = self.state {
            return Err(s);
        }
        let mut input = data;
        loop {
            let max = self.negotiated.map_or(
                self.cfg.limits.receive_buffer_size.max(MIN_BUFFER_SIZE),
                |n| n.receive_buffer_size,
            );
            let frame = match self.reader.next(&mut input, max) {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(s) => return Err(self.fail(s)),
            };
            let header = frame.header;
            let bytes = frame.bytes;
            let r = match header.message_type {
                MessageType::Error => {
                    let e = ErrorMessage::decode_body(
                        bytes.get(MESSAGE_HEADER_LEN..).unwrap_or_default(),
                    )
                    .map(|e| e.error)
                    .unwrap_or(StatusCode::BadCommunicationError);
                    Err(e)
                }
                MessageType::Acknowledge => Self::on_ack(
                    &mut self.state,
                    &self.hello,
                    &mut self.negotiated,
                    bytes.get(MESSAGE_HEADER_LEN..).unwrap_or_default(),
                ),
                MessageType::OpenSecureChannel
                | MessageType::Message
                | MessageType::CloseSecureChannel => {
                    // Split borrows: the frame lives in `self.reader`.
                    let mut ctx = Chunks {
                        cfg: &self.cfg,
                        state: &mut self.state,
                        negotiated: &self.negotiated,
                        channel_id: &mut self.channel_id,
                        asym: &mut self.asym,
                        token: &mut self.token,
                        previous: &mut self.previous,
                        pending_open: &mut self.pending_open,
                        recv_seq: &mut self.recv_seq,
                        assembler: &mut self.assembler,
                        scratch: &mut self.scratch,
                        responses: &mut self.responses,
                        spare_read: &mut self.spare_read,
                        in_flight: &mut self.in_flight,
                    };
                    ctx.on_chunk(now, header, bytes)
                }
                _ => Err(StatusCode::BadTcpMessageTypeInvalid),
            };
            if let Err(s) = r {
                return Err(self.fail(s));
            }
            if self.state == ClientState::AwaitOpen && self.pending_open.is_none() {
                self.reader.set_filter(Some(secure_or_error));
                if let Err(s) = self.send_open(now, SecurityTokenRequestType::Issue, out) {
                    return Err(self.fail(s));
                }
            }
        }
    }

    fn on_ack(
        state: &mut ClientState,
        hello: &HelloMessage,
        negotiated: &mut Option<Negotiated>,
        body: &[u8],
    ) -> Result<(), StatusCode> {
        if *state != ClientState::AwaitAck {
            return Err(StatusCode::BadTcpMessageTypeInvalid);
        }
        let ack = AcknowledgeMessage::decode_body(body)?;
        *negotiated = Some(negotiate_client(hello, &ack)?);
        *state = ClientState::AwaitOpen;
        Ok(())
    }

    fn chunk_limits(&self) -> Result<ChunkLimits, StatusCode> {
        let n = self.negotiated.ok_or(StatusCode::BadInvalidState)?;
        Ok(ChunkLimits::negotiated(&n))
    }

    fn send_open(
        &mut self,
        now: Now,
        request_type: SecurityTokenRequestType,
        out: &mut Vec<u8>,
    ) -> Result<(), StatusCode> {
        let policy = self.cfg.policy.clone();
        let asym = match self.asym.take() {
            Some(a) => a,
            None => policy.asymmetric(
                Role::Client,
                self.cfg.server_certificate.as_deref(),
                None,
                now,
            )?,
        };
        let n = policy.nonce_len();
        let random_nonce = if n > 0 {
            crate::random::bytes(&mut *self.random, n)
        } else {
            Vec::new()
        };
        let token = policy.begin_token(random_nonce)?;
        let client_nonce = token.nonce.clone();
        let request_id = self.take_request_id();
        let req = OpenSecureChannelRequest {
            request_header: RequestHeader {
                timestamp: now.utc,
                request_handle: request_id,
                ..Default::default()
            },
            client_protocol_version: PROTOCOL_VERSION,
            request_type,
            security_mode: self.cfg.mode,
            client_nonce: ByteString::from(client_nonce.clone()),
            requested_lifetime: self.cfg.requested_lifetime_ms,
        };
        self.body_buf.clear();
        NodeId::ns0(node_ids::OpenSecureChannelRequest_Encoding_DefaultBinary)
            .encode(&mut self.body_buf);
        req.encode(&mut self.body_buf);
        let header = SecurityHeader::Asymmetric(
            policy.asymmetric_header(self.cfg.server_certificate.as_deref()),
        );
        let limits = self.chunk_limits()?;
        let r = write_chunks(
            MessageType::OpenSecureChannel,
            self.channel_id,
            &header,
            request_id,
            &self.body_buf,
            &*asym,
            &mut self.send_seq,
            &limits,
            out,
        );
        self.asym = Some(asym);
        r?;
        self.pending_open = Some(PendingOpen { request_id, token });
        Ok(())
    }

    fn send_body(
        &mut self,
        request_id: u32,
        out: &mut Vec<u8>,
        encoded: Option<&[u8]>,
    ) -> Result<(), StatusCode> {
        let limits = self.chunk_limits()?;
        let token = self.token.as_ref().ok_or(StatusCode::BadInvalidState)?;
        let header = SecurityHeader::Symmetric { token_id: token.id };
        let body = encoded.unwrap_or(&self.body_buf);
        write_chunks(
            MessageType::Message,
            self.channel_id,
            &header,
            request_id,
            body,
            &*token.crypto,
            &mut self.send_seq,
            &limits,
            out,
        )
        .map_err(|s| {
            if s == StatusCode::BadTcpMessageTooLarge {
                StatusCode::BadRequestTooLarge
            } else {
                s
            }
        })?;
        self.in_flight += 1;
        Ok(())
    }

    /// Sends a request; fills the header's RequestHandle (= the returned id), timestamp
    /// and (when null) the authentication token. The response comes back from
    /// `poll_response` under the same id. A request over the server's limits is
    /// BadRequestTooLarge and nothing is sent.
    pub fn send_request(
        &mut self,
        mut req: Request,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Result<u32, StatusCode> {
        if self.state != ClientState::Open {
            return Err(StatusCode::BadNotConnected);
        }
        let id = self.take_request_id();
        let h = req.request_header_mut();
        h.request_handle = id;
        h.timestamp = now.utc;
        if h.authentication_token.is_null() {
            h.authentication_token = self.auth_token.clone();
        }
        self.body_buf.clear();
        req.encode_with_type_id(&mut self.body_buf);
        self.send_body(id, out, None)?;
        Ok(id)
    }

    /// Sends a pre-encoded request (binary encoding id + body, as written by
    /// `Request::encode_with_type_id`) as is: nothing in it is changed. Returns the
    /// request id under which `poll_response` reports the answer.
    pub fn send_encoded(&mut self, encoded: &[u8], out: &mut Vec<u8>) -> Result<u32, StatusCode> {
        if self.state != ClientState::Open {
            return Err(StatusCode::BadNotConnected);
        }
        let id = self.take_request_id();
        self.send_body(id, out, Some(encoded))?;
        Ok(id)
    }

    /// Aborts a request mid-way (an abort chunk), for tests of the server side.
    pub fn send_abort(
        &mut self,
        request_id: u32,
        status: StatusCode,
        out: &mut Vec<u8>,
    ) -> Result<(), StatusCode> {
        let token = self.token.as_ref().ok_or(StatusCode::BadInvalidState)?;
        let header = SecurityHeader::Symmetric { token_id: token.id };
        let e = ErrorMessage::new(status, "aborted by the client");
        write_abort_chunk(
            MessageType::Message,
            self.channel_id,
            &header,
            request_id,
            &e,
            &*token.crypto,
            &mut self.send_seq,
            out,
        )
    }

    /// Gives a response back once it has been read: a Read response of at most
    /// [`SPARE_READ_RESULTS_MAX`] results is kept (at most
    /// [`SPARE_READS_MAX`] of them), and the next Read responses are decoded into them instead
    /// of into new allocations. Anything else is dropped.
    pub fn give_back(&mut self, response: Response) {
        if let Response::Read(r) = response {
            if r.results.capacity() <= SPARE_READ_RESULTS_MAX
                && self.spare_read.len() < SPARE_READS_MAX
            {
                self.spare_read.push(r);
            }
        }
    }

    /// Read responses kept by `give_back` for reuse.
    pub fn spare_reads(&self) -> usize {
        self.spare_read.len()
    }

    /// The next response (request id, response), in arrival order. A request the server
    /// aborted comes back as a ServiceFault with the abort status.
    pub fn poll_response(&mut self) -> Option<(u32, Response)> {
        self.responses.pop_front()
    }

    /// When `on_timer` has work (the token renewal at 75 % of its lifetime).
    pub fn next_deadline(&self) -> Option<u64> {
        if self.state != ClientState::Open || self.pending_open.is_some() {
            return None;
        }
        let t = self.token.as_ref()?;
        Some(
            t.created_ns
                .saturating_add((t.lifetime_ms as u64).saturating_mul(750_000)),
        )
    }

    /// Renews the token when 75 % of its lifetime has passed.
    pub fn on_timer(&mut self, now: Now, out: &mut Vec<u8>) -> Result<(), StatusCode> {
        match self.next_deadline() {
            Some(d) if now.mono_ns >= d => self.renew(now, out),
            _ => Ok(()),
        }
    }

    /// Sends an OpenSecureChannel Renew now.
    pub fn renew(&mut self, now: Now, out: &mut Vec<u8>) -> Result<(), StatusCode> {
        if self.state != ClientState::Open {
            return Err(StatusCode::BadNotConnected);
        }
        if self.pending_open.is_some() {
            return Ok(());
        }
        self.send_open(now, SecurityTokenRequestType::Renew, out)
            .map_err(|s| self.fail(s))
    }

    /// Sends CloseSecureChannel and closes.
    pub fn close(&mut self, now: Now, out: &mut Vec<u8>) {
        if self.state == ClientState::Open {
            let id = self.take_request_id();
            let req = crate::generated::types::CloseSecureChannelRequest {
                request_header: RequestHeader {
                    timestamp: now.utc,
                    request_handle: id,
                    authentication_token: self.auth_token.clone(),
                    ..Default::default()
                },
            };
            self.body_buf.clear();
            NodeId::ns0(node_ids::CloseSecureChannelRequest_Encoding_DefaultBinary)
                .encode(&mut self.body_buf);
            req.encode(&mut self.body_buf);
            if let (Ok(limits), Some(token)) = (self.chunk_limits(), self.token.as_ref()) {
                let header = SecurityHeader::Symmetric { token_id: token.id };
                let _ = write_chunks(
                    MessageType::CloseSecureChannel,
                    self.channel_id,
                    &header,
                    id,
                    &self.body_buf,
                    &*token.crypto,
                    &mut self.send_seq,
                    &limits,
                    out,
                );
            }
        }
        self.fail(StatusCode::BadConnectionClosed);
    }
}

/// The fields chunk handling needs, borrowed apart from the frame reader.
struct Chunks<'a> {
    cfg: &'a ClientConfig,
    state: &'a mut ClientState,
    negotiated: &'a Option<Negotiated>,
    channel_id: &'a mut u32,
    asym: &'a mut Option<Box<dyn ChunkCrypto>>,
    token: &'a mut Option<ClientToken>,
    previous: &'a mut Option<ClientToken>,
    pending_open: &'a mut Option<PendingOpen>,
    recv_seq: &'a mut SequenceChecker,
    assembler: &'a mut MessageAssembler,
    scratch: &'a mut Vec<u8>,
    responses: &'a mut VecDeque<(u32, Response)>,
    #[allow(clippy::vec_box)] // as `spare_read` above
    spare_read: &'a mut Vec<Box<ReadResponse>>,
    in_flight: &'a mut usize,
}

impl Chunks<'_> {
    fn on_chunk(
        &mut self,
        now: Now,
        header: crate::transport::MessageHeader,
        bytes: &[u8],
    ) -> Result<(), StatusCode> {
        if !matches!(*self.state, ClientState::AwaitOpen | ClientState::Open) {
            return Err(StatusCode::BadTcpMessageTypeInvalid);
        }
        let head = parse_chunk_head(header, bytes)?;
        if *self.channel_id != 0 && head.secure_channel_id != *self.channel_id {
            return Err(StatusCode::BadSecureChannelIdInvalid);
        }
        let crypto: &dyn ChunkCrypto = match &head.security {
            SecurityHeader::Asymmetric(a) => {
                if a.security_policy_uri != self.cfg.policy.uri() {
                    return Err(StatusCode::BadSecurityPolicyRejected);
                }
                self.asym
                    .as_deref()
                    .ok_or(StatusCode::BadTcpMessageTypeInvalid)?
            }
            SecurityHeader::Symmetric { token_id } => match (&*self.token, &*self.previous) {
                (Some(t), _) if t.id == *token_id => &*t.crypto,
                (_, Some(p)) if p.id == *token_id => &*p.crypto,
                _ => return Err(StatusCode::BadSecureChannelTokenUnknown),
            },
        };
        let opened = open_chunk(bytes, head.sequence_offset, crypto, self.scratch)?;
        self.recv_seq.check(opened.sequence_number)?;
        if header.message_type == MessageType::CloseSecureChannel {
            return Err(StatusCode::BadSecureChannelClosed);
        }
        let limits = &self.cfg.limits;
        let assembled = self.assembler.push(
            header.message_type,
            header.chunk_type,
            opened.request_id,
            opened.body,
            limits.max_message_size as usize,
            limits.max_chunk_count,
            StatusCode::BadResponseTooLarge,
            now.mono_ns,
        )?;
        let (request_id, body) = match assembled {
            Assembly::Partial => return Ok(()),
            Assembly::Aborted { request_id, error } => {
                *self.in_flight = self.in_flight.saturating_sub(1);
                self.responses
                    .push_back((request_id, fault(request_id, error.error)));
                return Ok(());
            }
            Assembly::Complete { request_id, body } => (request_id, body),
        };
        if header.message_type == MessageType::OpenSecureChannel {
            // Rare: copy out so the chunk buffers are free again.
            let body = body.to_vec();
            return self.on_open_response(now, request_id, &body);
        }
        let mut d = Decoder::new(body, limits.decode);
        let type_id = NodeId::decode(&mut d).map_err(|e| e.status)?;
        let is_read = type_id.as_ns0() == Some(node_ids::ReadResponse_Encoding_DefaultBinary);
        let spare = if is_read { self.spare_read.pop() } else { None };
        let response = match spare {
            // Decoded into a spare: its arrays' capacity and values' memory are reused.
            Some(mut r) => match r.decode_into(&mut d) {
                Ok(()) => Response::Read(r),
                Err(e) => fault(request_id, e.status),
            },
            None => match Response::decode_body(&type_id, &mut d) {
                Ok(Some(r)) => r,
                Ok(None) => fault(request_id, StatusCode::BadUnknownResponse),
                Err(e) => fault(request_id, e.status),
            },
        };
        *self.in_flight = self.in_flight.saturating_sub(1);
        self.responses.push_back((request_id, response));
        Ok(())
    }

    fn on_open_response(
        &mut self,
        now: Now,
        request_id: u32,
        body: &[u8],
    ) -> Result<(), StatusCode> {
        let Some(pending) = self.pending_open.take() else {
            return Err(StatusCode::BadUnknownResponse);
        };
        if pending.request_id != request_id {
            return Err(StatusCode::BadUnknownResponse);
        }
        let mut d = Decoder::new(body, self.cfg.limits.decode);
        let type_id = NodeId::decode(&mut d).map_err(|e| e.status)?;
        if type_id.as_ns0() == Some(node_ids::ServiceFault_Encoding_DefaultBinary) {
            let f = ServiceFault::decode(&mut d).map_err(|e| e.status)?;
            return Err(f.response_header.service_result);
        }
        if type_id.as_ns0() != Some(node_ids::OpenSecureChannelResponse_Encoding_DefaultBinary) {
            return Err(StatusCode::BadUnknownResponse);
        }
        let resp = OpenSecureChannelResponse::decode(&mut d).map_err(|e| e.status)?;
        if resp.response_header.service_result.is_bad() {
            return Err(resp.response_header.service_result);
        }
        let tok = &resp.security_token;
        if tok.channel_id == 0 || (*self.channel_id != 0 && tok.channel_id != *self.channel_id) {
            return Err(StatusCode::BadSecureChannelIdInvalid);
        }
        let policy = &self.cfg.policy;
        let n = policy.nonce_len();
        if n > 0 && resp.server_nonce.as_bytes().len() != n {
            return Err(StatusCode::BadNonceInvalid);
        }
        let crypto = policy.finish_token(
            Role::Client,
            self.cfg.mode,
            pending.token,
            resp.server_nonce.as_bytes(),
        )?;
        let new = ClientToken {
            id: tok.token_id,
            created_ns: now.mono_ns,
            lifetime_ms: tok.revised_lifetime.max(1),
            crypto,
        };
        *self.previous = self.token.take();
        *self.token = Some(new);
        *self.channel_id = tok.channel_id;
        *self.state = ClientState::Open;
        let _ = self.negotiated;
        Ok(())
    }
}
