//! Service requests on an open channel: a MSG decoded into a request, dispatched to the
//! host, and its response encoded, chunked and sent within the negotiated limits.

use super::*;

impl State {
    pub(super) fn on_message<H: ConnectionHost + ?Sized>(
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
            job,
            waiting,
            decoding,
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
        if body.len() > DECODE_OFF_LOOP_BYTES && host.offload_handshakes() && !is_activate(body) {
            // A large request is decoded by the runtime's helpers (a job), not on the loop:
            // the connection waits, its input held, as for a handshake.
            let handle = request_handle(body, limits.decode);
            let body = body.to_vec();
            assembler.release_large(ASSEMBLY_KEEP_BYTES);
            *decoding = body.len();
            let decode = limits.decode;
            *job = Some(HandshakeJob::new(JobKind::Decode, Carry::None, move || {
                Output::Request(decode_request(None, &body, decode, headroom))
            }));
            *waiting = Some(Waiting::Decode { request_id, handle });
            return Ok(Step::Continue);
        }
        let request = decode_request(host.recycler(), body, limits.decode, headroom);
        assembler.release_large(ASSEMBLY_KEEP_BYTES);
        self.decoded(host, now, request_id, request, out)
    }

    /// Goes on with a request once decoded (here or by a job): a ServiceFault for one that
    /// does not decode, a move for an ActivateSession of another shard's session, else its
    /// answer.
    pub(super) fn decoded<H: ConnectionHost + ?Sized>(
        &mut self,
        host: &mut H,
        now: Now,
        request_id: u32,
        request: Result<Request, (u32, StatusCode)>,
        out: &mut Vec<u8>,
    ) -> Result<Step, Failure> {
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
    pub(super) fn answer<H: ConnectionHost + ?Sized>(
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
        let sent = send_response(c, &negotiated, request_id, &response, handle, now, out);
        if let Some(r) = host.recycler() {
            r.give_response(response);
        }
        sent
    }
}

/// The largest response body: the Hello's (already bounded by our own limit) and the
/// session's MaxResponseMessageSize, whichever is smaller (0 = not set).
pub(super) fn response_limit(hello: u32, session: u32) -> u32 {
    match (hello, session) {
        (0, s) => s,
        (h, 0) => h,
        (h, s) => h.min(s),
    }
}

/// An OpenSecureChannelResponse the peer's limits cannot carry is BadResponseTooLarge.
pub(super) fn response_status(s: StatusCode) -> StatusCode {
    if s == StatusCode::BadTcpMessageTooLarge {
        StatusCode::BadResponseTooLarge
    } else {
        s
    }
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
    limits: DecodeLimits,
    headroom: usize,
) -> Result<Request, (u32, StatusCode)> {
    let mut d = Decoder::with_budget(body, limits, headroom);
    let Ok(type_id) = NodeId::decode(&mut d) else {
        return Err((0, StatusCode::BadDecodingError));
    };
    let header_handle = || request_handle(body, limits);
    let decoded = match recycler {
        Some(r) => r.decode_request(&type_id, &mut d),
        None => Request::decode_body(&type_id, &mut d),
    };
    match decoded {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err((header_handle(), StatusCode::BadServiceUnsupported)),
        Err(e) if e.what == crate::encoding::DECODED_SIZE && headroom < limits.max_decoded_size => {
            Err((header_handle(), StatusCode::BadResourceUnavailable))
        }
        Err(e) => Err((header_handle(), e.status)),
    }
}

/// The request handle of a request body (type id + message), 0 when unreadable.
fn request_handle(body: &[u8], limits: DecodeLimits) -> u32 {
    let mut d = Decoder::new(body, limits);
    if NodeId::decode(&mut d).is_err() {
        return 0;
    }
    let rest = body.get(d.position()..).unwrap_or_default();
    RequestHeader::from_bytes(rest, limits)
        .map(|h| h.request_handle)
        .unwrap_or(0)
}

/// Is this request body (type id + message) an ActivateSession? One is always decoded on the
/// loop: it may move the connection to another shard.
fn is_activate(body: &[u8]) -> bool {
    let mut d = Decoder::new(body, DecodeLimits::default());
    NodeId::decode(&mut d).is_ok_and(|id| {
        id.as_ns0() == Some(node_ids::ActivateSessionRequest_Encoding_DefaultBinary)
    })
}

/// Encodes a response straight into `out` behind its chunk headers and seals it there (see
/// [`send_encoded`]).
pub(super) fn send_response(
    c: &mut Channel,
    negotiated: &Negotiated,
    request_id: u32,
    response: &Response,
    handle: u32,
    now: Now,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    send_encoded(
        c,
        negotiated,
        request_id,
        |o| response.encode_with_type_id(o),
        handle,
        now,
        out,
    )
}

/// Chunks an already encoded response body (type id + message; see [`send_encoded`]).
pub(super) fn send_body(
    c: &mut Channel,
    negotiated: &Negotiated,
    request_id: u32,
    body: &[u8],
    handle: u32,
    now: Now,
    out: &mut Vec<u8>,
) -> Result<(), Failure> {
    send_encoded(
        c,
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
/// go through the thread's [`SCRATCH`]). A response over the client's limits becomes a
/// ServiceFault BadResponseTooLarge (Part 4 §5.3), nothing of it having been sent.
fn send_encoded(
    c: &mut Channel,
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
    let mut scratch_buf = SCRATCH.take();
    let scratch = &mut scratch_buf;
    let r = match write_message_with(
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
    };
    if scratch_buf.capacity() <= SCRATCH_KEEP_BYTES {
        SCRATCH.set(scratch_buf);
    }
    r
}

thread_local! {
    /// Where a response of more than one chunk is encoded before it is chunked: one buffer per
    /// thread (a shard serves its connections one at a time), not one per connection, so a
    /// connection that once sent a large response (a CreateMonitoredItems of 10,000 results, a
    /// Publish of thousands of notifications) does not keep a buffer of that size for its
    /// lifetime. Measured on the plant at 100,000 items (10 sessions): see docs/Subscriptions.md,
    /// "Memory".
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A connection's message assembly buffer larger than this is freed once its message is
/// decoded ([`MessageAssembler::release_large`]).
const ASSEMBLY_KEEP_BYTES: usize = 64 * 1024;

/// A request body larger than this is decoded by a job off the loop when the host offloads
/// handshakes: a NodeManagement request of 1,000 Variables (about 90 kB) takes the loop
/// 0.3–0.4 ms to decode in one piece, a CreateMonitoredItems of 50,000 items several ms.
pub(crate) const DECODE_OFF_LOOP_BYTES: usize = 64 * 1024;

/// A thread's [`SCRATCH`] larger than this after a response is freed rather than kept.
const SCRATCH_KEEP_BYTES: usize = 4 << 20;
