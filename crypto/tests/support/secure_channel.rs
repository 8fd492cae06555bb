//! The secure channel after the handshake, deterministically: the driver of the
//! `secure_channel` fuzz target (fuzz/src/lib.rs includes this file) and of
//! tests/fuzz_secure_channel.rs, which replays its seeds and every input it crashed on.
//!
//! Each input gets a fresh shard (core/tests/support/replay.rs: default configuration, seed
//! 1, fixed start time) with SecurityPolicy None and Basic256Sha256 (Sign, SignAndEncrypt)
//! and a fresh `ServerConnection`. The driver plays the client: Hello, OpenSecureChannel
//! with a fixed client nonce, and (unless the input says not to) CreateSession and
//! ActivateSession; then it turns the input into MSG/CLO chunks for the server's receive
//! path: header checks, token, AES-256-CBC decryption, HMAC-SHA256 verification, padding,
//! sequence numbers, chunk reassembly, request decoding and every service.
//!
//! Basic256Sha256 here is crypto's real `RsaPolicy` for everything symmetric (its key
//! derivation, P_SHA256 from the two nonces, and its chunk signing and encryption, on both
//! ends), with the RSA half replaced by a stand-in ([`StandIn`]): the OPN chunks travel
//! unencrypted and unsigned and the session signatures are a keyed hash. RSA would cost
//! milliseconds per input and is not what this target looks at (crypto's own tests cover
//! it: tests/asym.rs, tests/uasc_inmemory.rs). The server nonce comes from the shard's
//! seeded generator, so the symmetric keys are the same in every run.
//!
//! Input: one byte of flags, then records.
//! - flags: bits 0–1 the security mode (0 None with SecurityPolicy None, 1 Sign, 2 and 3
//!   SignAndEncrypt, both with Basic256Sha256); bit 2 set: no session is made before the
//!   records (the input may make its own).
//! - a record: `op: u8, len: u16 LE, data: [u8; len]` (cut short at the end of the input).
//!   `op & 7`:
//!   - 0, 6, 7 — `message`: `data` is a request (encoding id + body, as
//!     `Request::encode_with_type_id` writes it). The driver chunks it (chunk size by
//!     `(op >> 3) & 3`: the negotiated size, 4096, 512, 64 bytes), numbers, pads, signs and
//!     encrypts the chunks as a client does.
//!   - 1 — `close`: one CLO chunk with `data` as its body, sealed.
//!   - 2 — `chunk`: `data[0]` bit 0: CLO instead of MSG; `data[1]`: the chunk type byte;
//!     `data[2..]`: everything after the security header (sequence header, body,
//!     padding), signed and encrypted by the driver as it is (under SignAndEncrypt cut to
//!     whole AES blocks). Wrong sequence numbers, padding, chunk types and reassembly
//!     reach the server's checks behind a valid signature. The next `message` continues
//!     from the sequence number given.
//!   - 3 — `raw`: `data` is sent as it is (bad signatures, headers, token ids).
//!   - 4 — `renew`: OpenSecureChannel Renew; the driver uses the new token as soon as the
//!     response arrives.
//!   - 5 — `wait`: `data[..4]` (u32 LE, milliseconds) of time pass; the timers run.
//!
//! Checks, besides "no panic": every chunk the server sends opens with the client's keys
//! (signature, padding, sequence numbers), reassembles, and decodes as a response with
//! nothing left over; the server sends with the last token the client used or a newer one
//! (Part 6 §6.7.4), never an older one; nothing follows an ERR; a closed connection stays closed; no
//! channel outlives its connection.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use uaring_core::encoding::{Decode, Decoder, Encode};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::node_ids;
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, ApplicationDescription, ApplicationType,
    CreateSessionRequest, MessageSecurityMode, OpenSecureChannelRequest, OpenSecureChannelResponse,
    RequestHeader, SecurityTokenRequestType, SignatureData,
};
use uaring_core::secure_channel::{
    open_chunk, parse_chunk_head, write_chunks, Assembly, AsymmetricSecurityHeader, ChunkCrypto,
    ChunkLimits, EndpointSecurity, MessageAssembler, NonePolicy, PlainCrypto, Role, SecurityHeader,
    SecurityPolicy, SecurityProvider, SequenceChecker, SequenceCounter,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::transport::{
    negotiate_client, AcknowledgeMessage, ErrorMessage, FrameReader, HelloMessage, MessageType,
    Negotiated, MESSAGE_HEADER_LEN,
};
use uaring_core::types::{ByteString, ExtensionObject, NodeId, StatusCode};
use uaring_core::{DecodeLimits, Now};
use uaring_crypto::{
    generate_self_signed, p_sha256, thumbprint, CertificateRequest, OwnIdentity, PolicyId,
    RsaPolicy,
};

use crate::replay::{shard, start};

/// The endpoint URL of the Hello and CreateSession.
pub const URL: &str = "opc.tcp://localhost:4840/uaring";
/// The client nonce of OpenSecureChannel (the n-th renewal XORs n into its first byte).
pub const CLIENT_NONCE: [u8; 32] = *b"uaring fuzz: fixed client nonce.";
/// The client's application certificate as the stand-in knows it (opaque bytes).
pub const CLIENT_CERTIFICATE: &[u8] = b"uaring fuzz: stand-in client certificate";
/// The server's application certificate as the stand-in knows it (opaque bytes).
pub const SERVER_CERTIFICATE: &[u8] = b"uaring fuzz: stand-in server certificate";
/// The nonce of CreateSession.
pub const SESSION_NONCE: [u8; 32] = *b"uaring fuzz: fixed session nonce";

/// Record operations (see the module documentation).
pub const OP_MESSAGE: u8 = 0;
pub const OP_CLOSE: u8 = 1;
pub const OP_CHUNK: u8 = 2;
pub const OP_RAW: u8 = 3;
pub const OP_RENEW: u8 = 4;
pub const OP_WAIT: u8 = 5;

/// Flags: the security mode (bits 0–1) and whether to skip the session (bit 2).
pub fn flags(mode: MessageSecurityMode, session: bool) -> u8 {
    let m = match mode {
        MessageSecurityMode::Sign => 1,
        MessageSecurityMode::SignAndEncrypt => 2,
        _ => 0,
    };
    if session {
        m
    } else {
        m | 4
    }
}

/// One record of an input.
pub fn record(op: u8, data: &[u8]) -> Vec<u8> {
    let len = data.len().min(u16::MAX as usize);
    let mut v = vec![op];
    v.extend_from_slice(&(len as u16).to_le_bytes());
    v.extend_from_slice(&data[..len]);
    v
}

/// The keyed hash the stand-in signs with instead of RSA.
fn stand_in_signature(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    p_sha256(b"uaring fuzz: stand-in signing key", data, &mut out);
    out
}

/// Basic256Sha256: crypto's `RsaPolicy` for the symmetric part (key derivation, chunk
/// signing and encryption), a stand-in for the RSA part (see the module documentation).
pub struct StandIn {
    rsa: Arc<RsaPolicy>,
}

impl StandIn {
    /// One per process: the `RsaPolicy` needs an RSA key pair, made once.
    pub fn get() -> Arc<StandIn> {
        static POLICY: OnceLock<Arc<StandIn>> = OnceLock::new();
        POLICY
            .get_or_init(|| {
                let req = CertificateRequest::new("urn:uaring:fuzz", "uaring fuzz", 1_700_000_000);
                let (cert, key) = generate_self_signed(&req).expect("a key pair");
                let own = OwnIdentity::new(cert, key).expect("an identity");
                let rsa = RsaPolicy::client(PolicyId::Basic256Sha256, own).expect("Basic256Sha256");
                Arc::new(StandIn { rsa })
            })
            .clone()
    }

    fn signature_algorithm(&self) -> &'static str {
        PolicyId::Basic256Sha256
            .asym_signature_algorithm_uri()
            .unwrap_or_default()
    }
}

impl SecurityPolicy for StandIn {
    fn uri(&self) -> &str {
        self.rsa.uri()
    }
    fn legacy_sequence_numbers(&self) -> bool {
        self.rsa.legacy_sequence_numbers()
    }
    fn nonce_len(&self) -> usize {
        self.rsa.nonce_len()
    }
    fn local_certificate(&self) -> Option<&[u8]> {
        Some(SERVER_CERTIFICATE)
    }
    fn thumbprint(&self, certificate: &[u8]) -> Option<Vec<u8>> {
        Some(thumbprint(certificate).to_vec())
    }
    /// OPN chunks in the clear; as the real policy, the sender certificate must be there
    /// and the receiver thumbprint must be ours.
    fn asymmetric(
        &self,
        role: Role,
        peer_certificate: Option<&[u8]>,
        receiver_thumbprint: Option<&[u8]>,
        _: Now,
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        if peer_certificate.is_none() {
            return Err(StatusCode::BadCertificateInvalid);
        }
        if role == Role::Server && receiver_thumbprint != Some(&thumbprint(SERVER_CERTIFICATE)[..])
        {
            return Err(StatusCode::BadCertificateInvalid);
        }
        Ok(Box::new(PlainCrypto))
    }
    fn symmetric(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        local_nonce: &[u8],
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        self.rsa.symmetric(role, mode, local_nonce, remote_nonce)
    }
    fn sign_own(&self, data: &[u8]) -> Result<(String, Vec<u8>), StatusCode> {
        Ok((
            self.signature_algorithm().to_owned(),
            stand_in_signature(data),
        ))
    }
    fn verify_signature(
        &self,
        _: &[u8],
        data: &[u8],
        algorithm_uri: &str,
        signature: &[u8],
    ) -> Result<(), StatusCode> {
        if algorithm_uri == self.signature_algorithm() && signature == stand_in_signature(data) {
            Ok(())
        } else {
            Err(StatusCode::BadSecurityChecksFailed)
        }
    }
    fn validate_client_certificate(
        &self,
        _: &[u8],
        _: Option<&str>,
        _: Now,
    ) -> Result<(), StatusCode> {
        Ok(())
    }
}

/// The shard every input runs against: replay's shard, offering None and
/// Basic256Sha256 (Sign, SignAndEncrypt).
pub fn secure_shard() -> ServiceState {
    let mut p = SecurityProvider::none_only();
    let policy: Arc<dyn SecurityPolicy> = StandIn::get();
    let uri = policy.uri().to_owned();
    p.add_policy(policy);
    for mode in [
        MessageSecurityMode::Sign,
        MessageSecurityMode::SignAndEncrypt,
    ] {
        p.add_endpoint(EndpointSecurity {
            policy_uri: uri.clone(),
            mode,
        });
    }
    shard().with_security(p)
}

/// Limits of what the client decodes: generous (a server may send more than it accepts).
fn client_decode_limits() -> DecodeLimits {
    DecodeLimits {
        max_decoded_size: 1 << 30,
        ..DecodeLimits::default()
    }
}

/// The client end: sends with the current token, and checks everything the server sends.
struct Client {
    policy: Arc<dyn SecurityPolicy>,
    mode: MessageSecurityMode,
    hello: HelloMessage,
    negotiated: Option<Negotiated>,
    channel_id: u32,
    /// Keys by token id (client role), oldest first: from the last token the server sent
    /// with to the newest.
    tokens: Vec<(u32, Option<Box<dyn ChunkCrypto>>)>,
    /// The token of the last MSG chunk the server sent.
    last_server_token: u32,
    send_token: u32,
    send_seq: SequenceCounter,
    next_request_id: u32,
    /// The client nonce of an OPN sent and not yet answered.
    pending_nonce: Option<Vec<u8>>,
    renewals: u8,
    // Receive side.
    reader: FrameReader,
    recv_seq: SequenceChecker,
    assembler: MessageAssembler,
    scratch: Vec<u8>,
    ended: Option<StatusCode>,
    responses: Vec<Response>,
}

impl Client {
    fn new(mode: MessageSecurityMode) -> Client {
        let policy: Arc<dyn SecurityPolicy> = if mode == MessageSecurityMode::None {
            Arc::new(NonePolicy)
        } else {
            StandIn::get()
        };
        let legacy = policy.legacy_sequence_numbers();
        Client {
            policy,
            mode,
            hello: HelloMessage {
                protocol_version: 0,
                receive_buffer_size: 65536,
                send_buffer_size: 65536,
                max_message_size: 0,
                max_chunk_count: 0,
                endpoint_url: URL.into(),
            },
            negotiated: None,
            channel_id: 0,
            tokens: Vec::new(),
            last_server_token: 0,
            send_token: 0,
            send_seq: SequenceCounter::new(legacy),
            next_request_id: 1,
            pending_nonce: None,
            renewals: 0,
            reader: FrameReader::new(),
            recv_seq: SequenceChecker::new(legacy),
            assembler: MessageAssembler::new(),
            scratch: Vec::new(),
            ended: None,
            responses: Vec::new(),
        }
    }

    fn request_id(&mut self) -> u32 {
        let id = self.next_request_id;
        self.next_request_id = id.wrapping_add(1).max(1);
        id
    }

    fn send_crypto(&self) -> &dyn ChunkCrypto {
        match self.tokens.iter().find(|(id, _)| *id == self.send_token) {
            Some((_, Some(c))) => &**c,
            _ => &PlainCrypto,
        }
    }

    fn limits(&self, max_chunk_size: u32) -> ChunkLimits {
        ChunkLimits {
            max_chunk_size,
            max_message_size: 0,
            max_chunk_count: 0,
        }
    }

    fn send_buffer_size(&self) -> u32 {
        self.negotiated.map_or(8192, |n| n.send_buffer_size)
    }

    fn hello(&self, out: &mut Vec<u8>) {
        self.hello.write(out);
    }

    fn open(&mut self, request_type: SecurityTokenRequestType, out: &mut Vec<u8>) {
        let nonce = if self.policy.nonce_len() == 0 {
            Vec::new()
        } else {
            let mut n = CLIENT_NONCE.to_vec();
            n[0] ^= self.renewals;
            n
        };
        let header = if self.policy.nonce_len() == 0 {
            AsymmetricSecurityHeader {
                security_policy_uri: self.policy.uri().to_owned(),
                ..Default::default()
            }
        } else {
            AsymmetricSecurityHeader {
                security_policy_uri: self.policy.uri().to_owned(),
                sender_certificate: Some(CLIENT_CERTIFICATE.to_vec()),
                receiver_certificate_thumbprint: Some(thumbprint(SERVER_CERTIFICATE).to_vec()),
            }
        };
        let req = OpenSecureChannelRequest {
            request_header: RequestHeader {
                timestamp: start().utc,
                request_handle: 1,
                ..Default::default()
            },
            client_protocol_version: 0,
            request_type,
            security_mode: self.mode,
            client_nonce: ByteString::from(nonce.clone()),
            requested_lifetime: 600_000,
        };
        let mut body = Vec::new();
        NodeId::ns0(node_ids::OpenSecureChannelRequest_Encoding_DefaultBinary).encode(&mut body);
        req.encode(&mut body);
        let request_id = self.request_id();
        let limits = self.limits(self.send_buffer_size());
        let sent = write_chunks(
            MessageType::OpenSecureChannel,
            self.channel_id,
            &SecurityHeader::Asymmetric(header),
            request_id,
            &body,
            &PlainCrypto,
            &mut self.send_seq,
            &limits,
            out,
        );
        if sent.is_ok() {
            self.pending_nonce = Some(nonce);
        }
    }

    /// A whole message, chunked at most `max_chunk_size` bytes per chunk.
    fn message(
        &mut self,
        message_type: MessageType,
        body: &[u8],
        max_chunk_size: u32,
        out: &mut Vec<u8>,
    ) {
        let request_id = self.request_id();
        let limits = self.limits(max_chunk_size.min(self.send_buffer_size()));
        let header = SecurityHeader::Symmetric {
            token_id: self.send_token,
        };
        let crypto: &dyn ChunkCrypto =
            match self.tokens.iter().find(|(id, _)| *id == self.send_token) {
                Some((_, Some(c))) => &**c,
                _ => &PlainCrypto,
            };
        // Errors (a body over the chunk limits) send nothing.
        let _ = write_chunks(
            message_type,
            self.channel_id,
            &header,
            request_id,
            body,
            crypto,
            &mut self.send_seq,
            &limits,
            out,
        );
    }

    /// A chunk whose plaintext after the security header is given; signed and encrypted.
    fn chunk(
        &mut self,
        message_type: MessageType,
        chunk_type: u8,
        plain: &[u8],
        out: &mut Vec<u8>,
    ) {
        let crypto = self.send_crypto();
        let layout = crypto.send_layout();
        let mut n = plain.len();
        if layout.encrypted {
            n = n.saturating_sub((n + layout.signature_len) % layout.plain_block_size.max(1));
        }
        let start = out.len();
        out.extend_from_slice(&message_type.tag());
        out.push(chunk_type);
        out.extend_from_slice(&0u32.to_le_bytes());
        self.channel_id.encode(out);
        self.send_token.encode(out);
        let seq_start = out.len();
        out.extend_from_slice(&plain[..n]);
        let size = (out.len() - start + layout.signature_len) as u32;
        out[start + 4..start + 8].copy_from_slice(&size.to_le_bytes());
        if layout.signature_len > 0 {
            let at = out.len();
            out.resize(at + layout.signature_len, 0);
            let (signed, sig) = out.split_at_mut(at);
            crypto.sign(&signed[start..], sig).expect("signing");
        }
        if layout.encrypted {
            crypto.encrypt(out, seq_start).expect("encrypting");
        }
        if let Some(s) = plain.get(..4) {
            let next = u32::from_le_bytes([s[0], s[1], s[2], s[3]]).wrapping_add(1);
            self.send_seq =
                SequenceCounter::starting_at(next, self.policy.legacy_sequence_numbers());
        }
    }

    /// Takes what the server sent and checks it (see the module documentation).
    fn receive(&mut self, mut input: &[u8]) {
        loop {
            let max = self.hello.receive_buffer_size;
            let frame = match self.reader.next(&mut input, max) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(s) => panic!("the server sent a bad chunk header: {s:?}"),
            };
            if let Some(s) = self.ended {
                panic!(
                    "the server sent a {:?} after an ERR {s:?}",
                    frame.header.message_type
                );
            }
            let header = frame.header;
            let bytes = frame.bytes;
            match header.message_type {
                MessageType::Acknowledge => {
                    assert!(self.negotiated.is_none(), "a second ACK");
                    let ack = AcknowledgeMessage::decode_body(&bytes[MESSAGE_HEADER_LEN..])
                        .expect("the ACK decodes");
                    self.negotiated =
                        Some(negotiate_client(&self.hello, &ack).expect("the ACK negotiates"));
                }
                MessageType::Error => {
                    let e = ErrorMessage::decode_body(&bytes[MESSAGE_HEADER_LEN..])
                        .expect("the ERR decodes");
                    self.ended = Some(e.error);
                }
                MessageType::OpenSecureChannel | MessageType::Message => {
                    let head =
                        parse_chunk_head(header, bytes).expect("the server's chunk head parses");
                    let crypto: &dyn ChunkCrypto = match &head.security {
                        SecurityHeader::Asymmetric(a) => {
                            assert_eq!(
                                a.security_policy_uri,
                                self.policy.uri(),
                                "OPN answered under another policy"
                            );
                            &PlainCrypto
                        }
                        SecurityHeader::Symmetric { token_id } => {
                            let Some(at) = self.tokens.iter().position(|(id, _)| id == token_id)
                            else {
                                panic!(
                                    "the server sent with token {token_id}, not one of {:?}",
                                    self.token_ids()
                                )
                            };
                            // The server sends with the last token the client used until the
                            // client uses a newer one (however many renewals came between),
                            // and never goes back: older keys are dropped.
                            self.tokens.drain(..at);
                            self.last_server_token = *token_id;
                            match &self.tokens[0].1 {
                                Some(c) => &**c,
                                // A token made by a raw OPN of the input: its keys are
                                // unknown, so the chunk cannot be checked (nor its number).
                                None => {
                                    self.recv_seq =
                                        SequenceChecker::new(self.policy.legacy_sequence_numbers());
                                    continue;
                                }
                            }
                        }
                    };
                    // The first OPN response names the channel (checked in on_open_response).
                    if self.channel_id != 0 {
                        assert_eq!(
                            head.secure_channel_id, self.channel_id,
                            "the channel id of a response"
                        );
                    }
                    let opened = open_chunk(bytes, head.sequence_offset, crypto, &mut self.scratch)
                        .unwrap_or_else(|s| panic!("a chunk the server sent does not open: {s:?}"));
                    self.recv_seq
                        .check(opened.sequence_number)
                        .expect("the server's sequence numbers");
                    let assembled = self
                        .assembler
                        .push(
                            header.message_type,
                            header.chunk_type,
                            opened.request_id,
                            opened.body,
                            1 << 30,
                            1 << 20,
                            StatusCode::BadResponseTooLarge,
                            0,
                        )
                        .unwrap_or_else(|s| panic!("the server's chunks do not assemble: {s:?}"));
                    let body = match assembled {
                        Assembly::Partial => continue,
                        Assembly::Aborted { error, .. } => {
                            panic!("the server aborted a response: {error:?}")
                        }
                        Assembly::Complete { body, .. } => body.to_vec(),
                    };
                    if header.message_type == MessageType::OpenSecureChannel {
                        self.on_open_response(&body);
                    } else {
                        self.on_response(&body);
                    }
                }
                t => panic!("the server sent a {t:?}"),
            }
        }
        assert_eq!(self.reader.buffered(), 0, "the server sent part of a chunk");
    }

    fn token_ids(&self) -> Vec<u32> {
        self.tokens.iter().map(|(id, _)| *id).collect()
    }

    fn on_open_response(&mut self, body: &[u8]) {
        let mut d = Decoder::new(body, client_decode_limits());
        let type_id = NodeId::decode(&mut d).expect("OPN response type id");
        assert_eq!(
            type_id.as_ns0(),
            Some(node_ids::OpenSecureChannelResponse_Encoding_DefaultBinary)
        );
        let r =
            OpenSecureChannelResponse::decode(&mut d).expect("OpenSecureChannelResponse decodes");
        assert!(d.is_empty(), "bytes after the OpenSecureChannelResponse");
        let token = r.security_token;
        if self.channel_id == 0 {
            self.channel_id = token.channel_id;
        }
        assert_eq!(token.channel_id, self.channel_id, "the channel id changed");
        let crypto = match self.pending_nonce.take() {
            Some(nonce) => {
                let c = self
                    .policy
                    .symmetric(Role::Client, self.mode, &nonce, r.server_nonce.as_bytes())
                    .unwrap_or_else(|s| panic!("keys from the server nonce: {s:?}"));
                self.renewals = self.renewals.wrapping_add(1);
                self.send_token = token.token_id;
                Some(c)
            }
            // The input's own OPN (sent raw): the client nonce is not known here.
            None => self
                .policy
                .symmetric(Role::Client, self.mode, &[], r.server_nonce.as_bytes())
                .ok(),
        };
        self.tokens.retain(|(id, _)| *id != token.token_id);
        self.tokens.push((token.token_id, crypto));
    }

    fn on_response(&mut self, body: &[u8]) {
        let mut d = Decoder::new(body, client_decode_limits());
        let type_id = NodeId::decode(&mut d).expect("response type id");
        let r = match Response::decode_body(&type_id, &mut d) {
            Ok(Some(r)) => r,
            other => panic!("a response of type {type_id:?} does not decode: {other:?}"),
        };
        assert!(d.is_empty(), "{} bytes after a {}", d.remaining(), r.name());
        self.responses.push(r);
    }
}

/// One input's run: the server, its connection and the client.
pub struct Run {
    state: ServiceState,
    conn: ServerConnection,
    client: Client,
    now: Now,
    closed: bool,
    authentication_token: NodeId,
}

impl Run {
    /// A fresh server and connection, Hello, OpenSecureChannel and (if `flags` ask for it)
    /// CreateSession and ActivateSession. The setup does not depend on the input beyond
    /// `flags`, so it must succeed.
    pub fn new(flags: u8) -> Run {
        let mode = match flags & 3 {
            0 => MessageSecurityMode::None,
            1 => MessageSecurityMode::Sign,
            _ => MessageSecurityMode::SignAndEncrypt,
        };
        let mut shard = secure_shard();
        let now = start();
        let conn = ServerConnection::new(&mut shard, None, now);
        let client = Client::new(mode);
        let mut run = Run {
            state: shard,
            conn,
            client,
            now,
            closed: false,
            authentication_token: NodeId::NULL,
        };
        let mut out = Vec::new();
        run.client.hello(&mut out);
        run.send(&out);
        out.clear();
        run.client.open(SecurityTokenRequestType::Issue, &mut out);
        run.send(&out);
        assert!(
            !run.closed && run.client.send_token != 0,
            "OpenSecureChannel failed: {:?}",
            run.client.ended
        );
        if flags & 4 == 0 {
            run.session();
        }
        run
    }

    /// The security mode of the channel.
    pub fn mode(&self) -> MessageSecurityMode {
        self.client.mode
    }

    /// The session's authentication token (null without a session).
    pub fn authentication_token(&self) -> &NodeId {
        &self.authentication_token
    }

    /// Whether the connection is closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// The ERR the server ended with, if any.
    pub fn error(&self) -> Option<StatusCode> {
        self.client.ended
    }

    /// The sequence number the next chunk the driver seals gets.
    pub fn next_sequence_number(&self) -> u32 {
        self.client.send_seq.peek()
    }

    /// The chunks a `message` record with `body` would send, sealed, without sending them
    /// (the sequence number and request id are used up).
    pub fn seal(&mut self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        self.client
            .message(MessageType::Message, body, u32::MAX, &mut out);
        out
    }

    /// The token the server last sent a MSG chunk with.
    pub fn last_server_token(&self) -> u32 {
        self.client.last_server_token
    }

    /// The token the driver sends with.
    pub fn send_token(&self) -> u32 {
        self.client.send_token
    }

    /// The responses received since the last call.
    pub fn take_responses(&mut self) -> Vec<Response> {
        std::mem::take(&mut self.client.responses)
    }

    /// A request sent as a `message` record (for the setup and the seeds); its responses.
    pub fn call(&mut self, req: &Request) -> Vec<Response> {
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        self.step(OP_MESSAGE, &body);
        self.take_responses()
    }

    fn session(&mut self) {
        let secure = self.client.mode != MessageSecurityMode::None;
        let r = self.call(&Request::CreateSession(Box::new(CreateSessionRequest {
            request_header: RequestHeader {
                timestamp: start().utc,
                request_handle: 1,
                ..Default::default()
            },
            client_description: ApplicationDescription {
                application_uri: "urn:uaring:fuzz".into(),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: URL.into(),
            session_name: "fuzz".into(),
            client_nonce: if secure {
                ByteString::from(SESSION_NONCE.to_vec())
            } else {
                ByteString::null()
            },
            client_certificate: if secure {
                ByteString::from(CLIENT_CERTIFICATE)
            } else {
                ByteString::null()
            },
            requested_session_timeout: 600_000.0,
            ..Default::default()
        })));
        let Some(Response::CreateSession(cs)) = r.into_iter().next() else {
            panic!("CreateSession failed")
        };
        let signature = if secure {
            let mut data = SERVER_CERTIFICATE.to_vec();
            data.extend_from_slice(cs.server_nonce.as_bytes());
            let (algorithm, signature) =
                StandIn::get().sign_own(&data).expect("stand-in signature");
            SignatureData {
                algorithm: algorithm.as_str().into(),
                signature: ByteString::from(signature),
            }
        } else {
            SignatureData::default()
        };
        let r = self.call(&Request::ActivateSession(Box::new(
            ActivateSessionRequest {
                request_header: RequestHeader {
                    authentication_token: cs.authentication_token.clone(),
                    timestamp: start().utc,
                    request_handle: 2,
                    ..Default::default()
                },
                client_signature: signature,
                user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                    policy_id: "anonymous".into(),
                }),
                locale_ids: vec!["en".into()],
                ..Default::default()
            },
        )));
        match r.first() {
            Some(Response::ActivateSession(a)) if a.response_header.service_result.is_good() => {}
            other => panic!("ActivateSession failed: {other:?}"),
        }
        self.authentication_token = cs.authentication_token.clone();
    }

    fn send(&mut self, c2s: &[u8]) {
        if self.closed || c2s.is_empty() {
            return;
        }
        let mut s2c = Vec::new();
        let st = self.conn.on_recv(&mut self.state, self.now, c2s, &mut s2c);
        self.client.receive(&s2c);
        self.closed = st == ConnStatus::Close;
    }

    /// Time passes; the shard's and the connection's timers run.
    pub fn wait(&mut self, ms: u64) {
        self.now = self.now.advance_ns(ms.saturating_mul(1_000_000));
        self.state.on_timer(self.now);
        let mut ready = Vec::new();
        self.state.take_ready_channels(&mut ready);
        let mut s2c = Vec::new();
        let st = self
            .conn
            .flush_deferred(&mut self.state, self.now, &mut s2c);
        if self.closed {
            assert_eq!(st, ConnStatus::Close, "a closed connection came back");
        }
        self.closed |= st == ConnStatus::Close;
        if self
            .conn
            .next_deadline()
            .is_some_and(|d| d <= self.now.mono_ns)
        {
            self.closed |=
                self.conn.on_timer(&mut self.state, self.now, &mut s2c) == ConnStatus::Close;
        }
        self.client.receive(&s2c);
    }

    /// One record (see the module documentation).
    pub fn step(&mut self, op: u8, data: &[u8]) {
        if self.closed {
            return;
        }
        let mut out = Vec::new();
        match op & 7 {
            OP_CLOSE => {
                self.client
                    .message(MessageType::CloseSecureChannel, data, u32::MAX, &mut out)
            }
            OP_CHUNK => {
                let (kind, chunk_type, plain) = match data {
                    [k, t, rest @ ..] => (*k, *t, rest),
                    _ => return,
                };
                let t = if kind & 1 == 1 {
                    MessageType::CloseSecureChannel
                } else {
                    MessageType::Message
                };
                self.client.chunk(t, chunk_type, plain, &mut out);
            }
            OP_RAW => out.extend_from_slice(data),
            OP_RENEW => {
                self.client.open(SecurityTokenRequestType::Renew, &mut out);
                self.send(&out);
                // Unanswered (the server took the bytes as the rest of a raw chunk): a later
                // OPN response is not this one's.
                self.client.pending_nonce = None;
                return;
            }
            OP_WAIT => {
                let mut ms = [0u8; 4];
                let n = data.len().min(4);
                ms[..n].copy_from_slice(&data[..n]);
                self.wait(u32::from_le_bytes(ms) as u64);
                return;
            }
            _ => {
                let size = [u32::MAX, 4096, 512, 64][((op >> 3) & 3) as usize];
                self.client
                    .message(MessageType::Message, data, size, &mut out);
            }
        }
        self.send(&out);
    }

    /// The end of the input: time jumps past every timeout, then the socket closes.
    pub fn finish(mut self) {
        for ms in [100u64, 1_000, 10_000, 100_000, 4_000_000] {
            self.wait(ms);
        }
        self.conn.on_close(&mut self.state, self.now);
        assert_eq!(
            self.state.open_channel_count(),
            0,
            "a channel outlived its connection"
        );
    }
}

/// An input's records: (operation, body).
pub type Records<'a> = Vec<(u8, &'a [u8])>;

/// Splits an input into its flags and records.
pub fn parse(data: &[u8]) -> Option<(u8, Records<'_>)> {
    let (&flags, mut rest) = data.split_first()?;
    let mut records = Vec::new();
    while let [op, rest2 @ ..] = rest {
        let (len, body) = match rest2 {
            [a, b, body @ ..] => (u16::from_le_bytes([*a, *b]) as usize, body),
            _ => (0, &[][..]),
        };
        let n = len.min(body.len());
        records.push((*op, &body[..n]));
        rest = &body[n..];
        if rest2.len() < 2 {
            break;
        }
    }
    Some((flags, records))
}

/// The fuzz target: one input (see the module documentation).
pub fn run_secure_channel(data: &[u8]) {
    let Some((flags, records)) = parse(data) else {
        return;
    };
    let mut run = Run::new(flags);
    for (op, body) in records {
        run.step(op, body);
        if run.is_closed() {
            break;
        }
    }
    run.finish();
}
