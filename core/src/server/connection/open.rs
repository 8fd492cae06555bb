//! OpenSecureChannel on a connection: the request checked and decoded, a token issued (at
//! once, or by the handshake helpers), the response sealed; renewals.

use super::*;

impl State {
    pub(super) fn on_open<H: ConnectionHost + ?Sized>(
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
    pub(super) fn open_issue<H: ConnectionHost + ?Sized>(
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
    pub(super) fn open_issued<H: ConnectionHost + ?Sized>(
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
    pub(super) fn open_received<H: ConnectionHost + ?Sized>(
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
