//! Secure-conversation chunks (Part 6 §6.7.2): security and sequence headers, sequence
//! numbers, splitting a message into chunks through a [`ChunkCrypto`], opening a
//! received chunk, and assembling chunks into messages within the limits.

use super::policy::{AsymmetricSecurityHeader, ChunkCrypto, CryptoLayout, MAX_POLICY_URI_LEN};
use crate::encoding::{Decode, DecodeLimits, Decoder, Encode};
use crate::transport::{
    ChunkType, ErrorMessage, MessageHeader, MessageType, Negotiated, MESSAGE_HEADER_LEN,
};
use crate::types::StatusCode;

/// Sequence header size (SequenceNumber + RequestId), in bytes.
pub const SEQUENCE_HEADER_LEN: usize = 8;
/// Symmetric security header size (TokenId), in bytes.
pub const SYMMETRIC_HEADER_LEN: usize = 4;
/// First value after a legacy wrap-around must be below this.
const LEGACY_WRAP_LIMIT: u32 = 1024;

/// The security header of a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityHeader {
    Asymmetric(AsymmetricSecurityHeader),
    Symmetric { token_id: u32 },
}

impl SecurityHeader {
    pub fn encoded_len(&self) -> usize {
        match self {
            SecurityHeader::Symmetric { .. } => SYMMETRIC_HEADER_LEN,
            SecurityHeader::Asymmetric(a) => {
                12 + a.security_policy_uri.len()
                    + a.sender_certificate.as_ref().map_or(0, Vec::len)
                    + a.receiver_certificate_thumbprint
                        .as_ref()
                        .map_or(0, Vec::len)
            }
        }
    }
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            SecurityHeader::Symmetric { token_id } => token_id.encode(out),
            SecurityHeader::Asymmetric(a) => {
                write_bytes(Some(a.security_policy_uri.as_bytes()), out);
                write_bytes(a.sender_certificate.as_deref(), out);
                write_bytes(a.receiver_certificate_thumbprint.as_deref(), out);
            }
        }
    }
}

fn write_bytes(b: Option<&[u8]>, out: &mut Vec<u8>) {
    match b {
        None => (-1i32).encode(out),
        Some(b) => {
            (b.len() as i32).encode(out);
            out.extend_from_slice(b);
        }
    }
}

fn read_bytes<'a>(
    d: &mut Decoder<'a>,
    max: usize,
    too_long: StatusCode,
) -> Result<Option<&'a [u8]>, StatusCode> {
    let n = i32::decode(d).map_err(|_| StatusCode::BadTcpMessageTypeInvalid)?;
    if n < 0 {
        return Ok(None);
    }
    let n = n as usize;
    if n > max {
        return Err(too_long);
    }
    d.take(n, "security header")
        .map(Some)
        .map_err(|_| StatusCode::BadTcpMessageTypeInvalid)
}

/// The parts of a received secure-conversation chunk before it is opened.
#[derive(Debug, Clone)]
pub struct ChunkHead {
    pub header: MessageHeader,
    pub secure_channel_id: u32,
    pub security: SecurityHeader,
    /// Offset of the sequence header (= end of the security header), in bytes.
    pub sequence_offset: usize,
}

/// Parses the message header, secure channel id and security header of an OPN, MSG or
/// CLO chunk (`frame` is the whole chunk). Truncated or malformed headers are
/// BadTcpMessageTypeInvalid; a policy URI over 255 bytes is BadSecurityPolicyRejected.
pub fn parse_chunk_head(header: MessageHeader, frame: &[u8]) -> Result<ChunkHead, StatusCode> {
    if matches!(
        header.message_type,
        MessageType::Message | MessageType::CloseSecureChannel
    ) {
        let h = parse_symmetric_head(frame)?;
        let security = SecurityHeader::Symmetric {
            token_id: h.token_id,
        };
        return Ok(ChunkHead {
            header,
            secure_channel_id: h.secure_channel_id,
            security,
            sequence_offset: h.sequence_offset,
        });
    }
    if header.message_type != MessageType::OpenSecureChannel {
        return Err(StatusCode::BadTcpMessageTypeInvalid);
    }
    let mut d = Decoder::new(frame, DecodeLimits::default());
    let bad = |_| StatusCode::BadTcpMessageTypeInvalid;
    d.take(MESSAGE_HEADER_LEN, "header").map_err(bad)?;
    let secure_channel_id = u32::decode(&mut d).map_err(bad)?;
    let uri = read_bytes(
        &mut d,
        MAX_POLICY_URI_LEN,
        StatusCode::BadSecurityPolicyRejected,
    )?
    .ok_or(StatusCode::BadSecurityPolicyRejected)?;
    let uri = std::str::from_utf8(uri)
        .map_err(|_| StatusCode::BadSecurityPolicyRejected)?
        .to_owned();
    let cert =
        read_bytes(&mut d, frame.len(), StatusCode::BadTcpMessageTypeInvalid)?.map(<[u8]>::to_vec);
    let thumb = read_bytes(&mut d, 64, StatusCode::BadCertificateInvalid)?.map(<[u8]>::to_vec);
    let security = SecurityHeader::Asymmetric(AsymmetricSecurityHeader {
        security_policy_uri: uri,
        sender_certificate: cert,
        receiver_certificate_thumbprint: thumb,
    });
    let sequence_offset = d.position();
    if frame.len() < sequence_offset + SEQUENCE_HEADER_LEN {
        return Err(StatusCode::BadTcpMessageTypeInvalid);
    }
    Ok(ChunkHead {
        header,
        secure_channel_id,
        security,
        sequence_offset,
    })
}

/// The head of a MSG or CLO chunk: what [`parse_chunk_head`] gives for it, without a
/// [`SecurityHeader`] built and moved for every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymmetricHead {
    pub secure_channel_id: u32,
    pub token_id: u32,
    /// Offset of the sequence header, in bytes.
    pub sequence_offset: usize,
}

/// Parses the secure channel id and token id of a MSG or CLO chunk (`frame` is the whole
/// chunk). A chunk too short for them and the sequence header is BadTcpMessageTypeInvalid, as
/// in [`parse_chunk_head`].
pub fn parse_symmetric_head(frame: &[u8]) -> Result<SymmetricHead, StatusCode> {
    const SEQUENCE_OFFSET: usize = MESSAGE_HEADER_LEN + 4 + SYMMETRIC_HEADER_LEN;
    let (Some(head), true) = (
        frame.first_chunk::<SEQUENCE_OFFSET>(),
        frame.len() >= SEQUENCE_OFFSET + SEQUENCE_HEADER_LEN,
    ) else {
        return Err(StatusCode::BadTcpMessageTypeInvalid);
    };
    let [_, _, _, _, _, _, _, _, c0, c1, c2, c3, t0, t1, t2, t3] = *head;
    Ok(SymmetricHead {
        secure_channel_id: u32::from_le_bytes([c0, c1, c2, c3]),
        token_id: u32::from_le_bytes([t0, t1, t2, t3]),
        sequence_offset: SEQUENCE_OFFSET,
    })
}

/// A chunk after decryption and signature check.
#[derive(Debug, Clone, Copy)]
pub struct OpenedChunk<'a> {
    pub sequence_number: u32,
    pub request_id: u32,
    pub body: &'a [u8],
}

/// Decrypts and verifies a chunk and strips padding and signature. With plain
/// protection the body is a slice of `frame`; otherwise the chunk is copied into
/// `scratch` first. Any inconsistency is BadSecurityChecksFailed (or the policy's code).
pub fn open_chunk<'a>(
    frame: &'a [u8],
    sequence_offset: usize,
    crypto: &dyn ChunkCrypto,
    scratch: &'a mut Vec<u8>,
) -> Result<OpenedChunk<'a>, StatusCode> {
    let layout = crypto.recv_layout();
    let buf: &'a [u8] = if layout.is_plain() {
        frame
    } else {
        scratch.clear();
        scratch.extend_from_slice(frame);
        if layout.encrypted {
            let enc_len = frame.len() - sequence_offset;
            // `%` rather than `is_multiple_of` (Rust 1.87) for the workspace MSRV 1.80.
            #[allow(clippy::manual_is_multiple_of)]
            let misaligned = enc_len % layout.cipher_block_size.max(1) != 0;
            if enc_len == 0 || misaligned {
                return Err(StatusCode::BadSecurityChecksFailed);
            }
            crypto.decrypt(scratch, sequence_offset)?;
        }
        let sig_len = layout.signature_len;
        if scratch.len() < sequence_offset + SEQUENCE_HEADER_LEN + sig_len {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        let signed_end = scratch.len() - sig_len;
        let (signed, signature) = scratch
            .split_at_checked(signed_end)
            .ok_or(StatusCode::BadSecurityChecksFailed)?;
        crypto.verify(signed, signature)?;
        &scratch[..]
    };
    let mut end = buf
        .len()
        .checked_sub(layout.signature_len)
        .ok_or(StatusCode::BadSecurityChecksFailed)?;
    if layout.encrypted {
        let mut padding = 0usize;
        if layout.extra_padding_byte {
            end = end
                .checked_sub(1)
                .ok_or(StatusCode::BadSecurityChecksFailed)?;
            padding = (*buf.get(end).ok_or(StatusCode::BadSecurityChecksFailed)? as usize) << 8;
        }
        let lo = *buf
            .get(end.wrapping_sub(1))
            .ok_or(StatusCode::BadSecurityChecksFailed)?;
        padding |= lo as usize;
        let body_end = end
            .checked_sub(padding + 1)
            .ok_or(StatusCode::BadSecurityChecksFailed)?;
        if body_end < sequence_offset + SEQUENCE_HEADER_LEN {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        if buf
            .get(body_end..end)
            .ok_or(StatusCode::BadSecurityChecksFailed)?
            .iter()
            .any(|&b| b != lo)
        {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        end = body_end;
    }
    let s = sequence_offset;
    let header: [u8; 8] = buf
        .get(s..s + 8)
        .and_then(|h| h.try_into().ok())
        .ok_or(StatusCode::BadSecurityChecksFailed)?;
    let [a, b, c, d, e, f, g, h] = header;
    let sequence_number = u32::from_le_bytes([a, b, c, d]);
    let request_id = u32::from_le_bytes([e, f, g, h]);
    let body = buf
        .get(s + SEQUENCE_HEADER_LEN..end)
        .ok_or(StatusCode::BadSecurityChecksFailed)?;
    Ok(OpenedChunk {
        sequence_number,
        request_id,
        body,
    })
}

/// Sequence numbers we send (Part 6 §6.7.2.4).
#[derive(Debug, Clone)]
pub struct SequenceCounter {
    next: u32,
    legacy: bool,
}

impl SequenceCounter {
    /// Legacy numbering starts at 1; the non-legacy at 0.
    pub fn new(legacy: bool) -> Self {
        SequenceCounter {
            next: if legacy { 1 } else { 0 },
            legacy,
        }
    }
    /// Starts at `first` (tests of the wrap-around).
    pub fn starting_at(first: u32, legacy: bool) -> Self {
        SequenceCounter {
            next: first,
            legacy,
        }
    }
    pub fn peek(&self) -> u32 {
        self.next
    }
    pub fn take(&mut self) -> u32 {
        let n = self.next;
        self.next = if self.legacy {
            if n > u32::MAX - LEGACY_WRAP_LIMIT {
                1
            } else {
                n + 1
            }
        } else {
            n.wrapping_add(1)
        };
        n
    }
}

/// Checks received sequence numbers: each is the previous + 1, with the wrap rules of
/// Part 6; anything else is BadSequenceNumberInvalid.
#[derive(Debug, Clone)]
pub struct SequenceChecker {
    last: Option<u32>,
    legacy: bool,
}

impl SequenceChecker {
    pub fn new(legacy: bool) -> Self {
        SequenceChecker { last: None, legacy }
    }
    pub fn check(&mut self, n: u32) -> Result<(), StatusCode> {
        let ok = match self.last {
            // Legacy numbering may start anywhere; the newer starts at 0.
            None => self.legacy || n == 0,
            Some(last) => {
                if self.legacy {
                    if last > u32::MAX - LEGACY_WRAP_LIMIT {
                        n == last.wrapping_add(1) && last != u32::MAX || n < LEGACY_WRAP_LIMIT
                    } else {
                        n == last + 1
                    }
                } else {
                    n == last.wrapping_add(1)
                }
            }
        };
        if !ok {
            return Err(StatusCode::BadSequenceNumberInvalid);
        }
        self.last = Some(n);
        Ok(())
    }
}

/// Where a message is going and what the receiver accepts.
#[derive(Debug, Clone, Copy)]
pub struct ChunkLimits {
    /// Largest chunk, in bytes (the negotiated send buffer size).
    pub max_chunk_size: u32,
    /// Largest message body the peer accepts, in bytes (0 = no limit).
    pub max_message_size: u32,
    /// Most chunks the peer accepts (0 = no limit).
    pub max_chunk_count: u32,
}

impl ChunkLimits {
    /// What the peer accepts per message, from its Hello or Acknowledge.
    pub fn negotiated(n: &Negotiated) -> ChunkLimits {
        ChunkLimits {
            max_chunk_size: n.send_buffer_size,
            max_message_size: n.peer_max_message_size,
            max_chunk_count: n.peer_max_chunk_count,
        }
    }
}

/// Largest body that fits in one chunk, in bytes, for a security header of
/// `security_header_len` bytes.
pub fn max_body_per_chunk(
    layout: &CryptoLayout,
    max_chunk_size: usize,
    security_header_len: usize,
) -> Option<usize> {
    let header_len = MESSAGE_HEADER_LEN + 4 + security_header_len;
    let avail = max_chunk_size.checked_sub(header_len)?;
    let n = if layout.encrypted {
        let blocks = avail / layout.cipher_block_size.max(1);
        let plain = blocks * layout.plain_block_size.max(1);
        plain
            .checked_sub(SEQUENCE_HEADER_LEN + layout.signature_len + layout.padding_size_bytes())?
    } else {
        avail.checked_sub(SEQUENCE_HEADER_LEN + layout.signature_len)?
    };
    (n > 0).then_some(n)
}

/// Splits `body` into chunks and appends them to `out`. Nothing is written when the
/// body exceeds the peer's limits: the error is BadTcpMessageTooLarge and the caller
/// maps it (BadResponseTooLarge on a server, BadRequestTooLarge on a client).
pub fn write_chunks(
    message_type: MessageType,
    secure_channel_id: u32,
    security: &SecurityHeader,
    request_id: u32,
    body: &[u8],
    crypto: &dyn ChunkCrypto,
    seq: &mut SequenceCounter,
    limits: &ChunkLimits,
    out: &mut Vec<u8>,
) -> Result<usize, StatusCode> {
    let layout = crypto.send_layout();
    let sec_len = security.encoded_len();
    let per_chunk = max_body_per_chunk(&layout, limits.max_chunk_size as usize, sec_len)
        .ok_or(StatusCode::BadTcpInternalError)?;
    if limits.max_message_size != 0 && body.len() > limits.max_message_size as usize {
        return Err(StatusCode::BadTcpMessageTooLarge);
    }
    let chunks = body.len().div_ceil(per_chunk).max(1);
    if limits.max_chunk_count != 0 && chunks > limits.max_chunk_count as usize {
        return Err(StatusCode::BadTcpMessageTooLarge);
    }
    let start_len = out.len();
    let mut rest = body;
    for i in 0..chunks {
        let n = rest.len().min(per_chunk);
        let (part, tail) = rest.split_at(n);
        rest = tail;
        let chunk_type = if i + 1 == chunks {
            ChunkType::Final
        } else {
            ChunkType::Intermediate
        };
        if let Err(e) = write_one_chunk(
            message_type,
            chunk_type,
            secure_channel_id,
            security,
            request_id,
            part,
            crypto,
            &layout,
            seq,
            out,
        ) {
            out.truncate(start_len);
            return Err(e);
        }
    }
    Ok(chunks)
}

/// Writes an abort chunk ('A') carrying `error` for `request_id`.
pub fn write_abort_chunk(
    message_type: MessageType,
    secure_channel_id: u32,
    security: &SecurityHeader,
    request_id: u32,
    error: &ErrorMessage,
    crypto: &dyn ChunkCrypto,
    seq: &mut SequenceCounter,
    out: &mut Vec<u8>,
) -> Result<(), StatusCode> {
    let mut body = Vec::with_capacity(64);
    error.encode_body(&mut body);
    let layout = crypto.send_layout();
    write_one_chunk(
        message_type,
        ChunkType::Abort,
        secure_channel_id,
        security,
        request_id,
        &body,
        crypto,
        &layout,
        seq,
        out,
    )
}

fn write_one_chunk(
    message_type: MessageType,
    chunk_type: ChunkType,
    secure_channel_id: u32,
    security: &SecurityHeader,
    request_id: u32,
    part: &[u8],
    crypto: &dyn ChunkCrypto,
    layout: &CryptoLayout,
    seq: &mut SequenceCounter,
    out: &mut Vec<u8>,
) -> Result<(), StatusCode> {
    let start = out.len();
    MessageHeader {
        message_type,
        chunk_type,
        message_size: 0,
    }
    .encode(out);
    secure_channel_id.encode(out);
    security.encode(out);
    let seq_start = out.len();
    seq.take().encode(out);
    request_id.encode(out);
    out.extend_from_slice(part);
    finish_chunk(start, seq_start, part.len(), crypto, layout, out)
}

/// Writes one message whose body `encode` appends straight into `out` after the chunk
/// headers, and seals it there when it fits in one chunk: no copy of the body. A body that
/// needs more chunks is moved to `scratch` and written by [`write_chunks`]. Results, errors
/// and sequence numbers are those of `write_chunks` (a number is taken only for chunks
/// written; on error `out` is as before).
pub fn write_message_with(
    message_type: MessageType,
    secure_channel_id: u32,
    security: &SecurityHeader,
    request_id: u32,
    encode: impl FnOnce(&mut Vec<u8>),
    crypto: &dyn ChunkCrypto,
    seq: &mut SequenceCounter,
    limits: &ChunkLimits,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<usize, StatusCode> {
    let layout = crypto.send_layout();
    let per_chunk = max_body_per_chunk(
        &layout,
        limits.max_chunk_size as usize,
        security.encoded_len(),
    )
    .ok_or(StatusCode::BadTcpInternalError)?;
    let start = out.len();
    MessageHeader {
        message_type,
        chunk_type: ChunkType::Final,
        message_size: 0,
    }
    .encode(out);
    secure_channel_id.encode(out);
    security.encode(out);
    let seq_start = out.len();
    out.extend_from_slice(&[0u8; SEQUENCE_HEADER_LEN]);
    let body_start = out.len();
    encode(out);
    let body_len = out.len() - body_start;
    let too_large = limits.max_message_size != 0 && body_len > limits.max_message_size as usize;
    if body_len <= per_chunk && !too_large {
        // The sequence header was reserved above at `seq_start`.
        let header = put_u32(out, seq_start, seq.take())
            .and_then(|()| put_u32(out, seq_start + 4, request_id));
        let sealed = match header {
            Some(()) => finish_chunk(start, seq_start, body_len, crypto, &layout, out),
            None => Err(StatusCode::BadTcpInternalError),
        };
        return match sealed {
            Ok(()) => Ok(1),
            Err(e) => {
                out.truncate(start);
                Err(e)
            }
        };
    }
    scratch.clear();
    let Some(body) = out.get(body_start..) else {
        out.truncate(start);
        return Err(StatusCode::BadTcpInternalError);
    };
    scratch.extend_from_slice(body);
    out.truncate(start);
    write_chunks(
        message_type,
        secure_channel_id,
        security,
        request_id,
        scratch,
        crypto,
        seq,
        limits,
        out,
    )
}

/// Writes `v` little-endian at `out[at..at + 4]`; `None` when that is outside `out`.
fn put_u32(out: &mut [u8], at: usize, v: u32) -> Option<()> {
    *out.get_mut(at..)?.first_chunk_mut::<4>()? = v.to_le_bytes();
    Some(())
}

/// Pads, sizes, signs and encrypts the chunk that starts at `out[start]`, whose sequence
/// header starts at `seq_start` and is followed by `part_len` body bytes up to the end of `out`.
/// The offsets were recorded by the caller while writing the chunk; were one outside `out`,
/// the chunk is BadTcpInternalError.
fn finish_chunk(
    start: usize,
    seq_start: usize,
    part_len: usize,
    crypto: &dyn ChunkCrypto,
    layout: &CryptoLayout,
    out: &mut Vec<u8>,
) -> Result<(), StatusCode> {
    let pbytes = layout.padding_size_bytes();
    if layout.encrypted {
        let pb = layout.plain_block_size.max(1);
        let used = SEQUENCE_HEADER_LEN + part_len + pbytes + layout.signature_len;
        let padding = (pb - used % pb) % pb;
        let lo = (padding & 0xff) as u8;
        out.push(lo);
        out.resize(out.len() + padding, lo);
        if layout.extra_padding_byte {
            out.push((padding >> 8) as u8);
        }
    }
    let plain_len = out.len() - seq_start + layout.signature_len;
    let enc_len = if layout.encrypted {
        plain_len / layout.plain_block_size.max(1) * layout.cipher_block_size.max(1)
    } else {
        plain_len
    };
    let size = (seq_start - start + enc_len) as u32;
    put_u32(out, start + 4, size).ok_or(StatusCode::BadTcpInternalError)?;
    if layout.signature_len > 0 {
        let sig_at = out.len();
        out.resize(sig_at + layout.signature_len, 0);
        let (signed, sig) = out.split_at_mut(sig_at);
        crypto.sign(
            signed.get(start..).ok_or(StatusCode::BadTcpInternalError)?,
            sig,
        )?;
    }
    if layout.encrypted {
        crypto.encrypt(out, seq_start)?;
        if out.len() - start != size as usize {
            return Err(StatusCode::BadTcpInternalError);
        }
    }
    Ok(())
}

/// What one received chunk did to the message being assembled.
#[derive(Debug)]
pub enum Assembly<'a> {
    /// More chunks are needed.
    Partial,
    /// A whole message body.
    Complete { request_id: u32, body: &'a [u8] },
    /// The sender aborted the message (the partial chunks were dropped).
    Aborted {
        request_id: u32,
        error: ErrorMessage,
    },
}

/// Assembles chunk bodies into message bodies, one message at a time (chunks of one
/// message are sent sequentially, Part 6 §6.7.3). A single-chunk message is returned
/// without copying.
#[derive(Debug, Default)]
pub struct MessageAssembler {
    buf: Vec<u8>,
    chunks: u32,
    current: Option<(MessageType, u32)>,
    consumed: bool,
    /// `mono_ns` when the first chunk of the unfinished message arrived.
    started_ns: Option<u64>,
}

impl MessageAssembler {
    pub fn new() -> Self {
        MessageAssembler::default()
    }
    /// Bytes of an unfinished message held.
    pub fn buffered(&self) -> usize {
        if self.consumed {
            0
        } else {
            self.buf.len()
        }
    }
    /// When the unfinished message started (monotonic ns), if one is held.
    pub fn started_ns(&self) -> Option<u64> {
        self.started_ns
    }
    /// Frees the buffer of a complete message that was assembled from several chunks (once
    /// the caller is done with its body) when its capacity is over `keep` bytes: a
    /// connection that once received a large request (a CreateMonitoredItems of 10,000
    /// items is about 600 kB) does not hold a buffer of that size for its lifetime. A
    /// message of one chunk never uses the buffer.
    pub fn release_large(&mut self, keep: usize) {
        if self.consumed && self.buf.capacity() > keep {
            self.buf = Vec::new();
            self.consumed = false;
        }
    }
    pub fn clear(&mut self) {
        self.buf = Vec::new();
        self.chunks = 0;
        self.current = None;
        self.consumed = false;
        self.started_ns = None;
    }

    /// Adds one opened chunk. `max_message_size` bounds the body, `max_chunk_count` the
    /// chunks (both > 0); exceeding either is `too_large`. A chunk of another message
    /// (type or request id) while one is unfinished is BadTcpMessageTypeInvalid.
    pub fn push<'a>(
        &'a mut self,
        message_type: MessageType,
        chunk_type: ChunkType,
        request_id: u32,
        body: &'a [u8],
        max_message_size: usize,
        max_chunk_count: u32,
        too_large: StatusCode,
        now_ns: u64,
    ) -> Result<Assembly<'a>, StatusCode> {
        if self.consumed {
            self.buf.clear();
            self.consumed = false;
        }
        if let Some(cur) = self.current {
            if cur != (message_type, request_id) {
                return Err(StatusCode::BadTcpMessageTypeInvalid);
            }
        }
        match chunk_type {
            ChunkType::Abort => {
                let error = ErrorMessage::decode_body(body)?;
                self.reset_after_message();
                self.buf.clear();
                Ok(Assembly::Aborted { request_id, error })
            }
            ChunkType::Intermediate => {
                self.chunks += 1;
                if self.chunks >= max_chunk_count.max(1)
                    || self.buf.len() + body.len() > max_message_size
                {
                    return Err(too_large);
                }
                if self.current.is_none() {
                    self.current = Some((message_type, request_id));
                    self.started_ns = Some(now_ns);
                }
                self.buf.extend_from_slice(body);
                Ok(Assembly::Partial)
            }
            ChunkType::Final => {
                if self.current.is_none() {
                    if body.len() > max_message_size {
                        return Err(too_large);
                    }
                    return Ok(Assembly::Complete { request_id, body });
                }
                self.chunks += 1;
                if self.chunks > max_chunk_count.max(1)
                    || self.buf.len() + body.len() > max_message_size
                {
                    return Err(too_large);
                }
                self.buf.extend_from_slice(body);
                self.reset_after_message();
                self.consumed = true;
                Ok(Assembly::Complete {
                    request_id,
                    body: &self.buf,
                })
            }
        }
    }

    fn reset_after_message(&mut self) {
        self.chunks = 0;
        self.current = None;
        self.started_ns = None;
    }
}

#[cfg(test)]
mod tests {
    use super::super::policy::PlainCrypto;
    use super::*;

    #[test]
    fn legacy_sequence_wraps_below_1024() {
        let mut c = SequenceCounter::starting_at(u32::MAX - 1024, true);
        let mut chk = SequenceChecker::new(true);
        let mut seen = Vec::new();
        for _ in 0..4 {
            let n = c.take();
            chk.check(n).unwrap();
            seen.push(n);
        }
        assert_eq!(seen, vec![u32::MAX - 1024, u32::MAX - 1023, 1, 2]);
        let mut chk = SequenceChecker::new(true);
        chk.check(5).unwrap();
        assert_eq!(
            chk.check(7).unwrap_err(),
            StatusCode::BadSequenceNumberInvalid
        );
        assert_eq!(chk.check(6).unwrap(), ());
        assert_eq!(
            chk.check(6).unwrap_err(),
            StatusCode::BadSequenceNumberInvalid
        );
        // No wrap before the threshold.
        let mut chk = SequenceChecker::new(true);
        chk.check(1000).unwrap();
        assert!(chk.check(1).is_err());
    }

    #[test]
    fn non_legacy_starts_at_zero_and_wraps_to_zero() {
        let mut chk = SequenceChecker::new(false);
        assert!(chk.check(1).is_err());
        chk.check(0).unwrap();
        let mut c = SequenceCounter::starting_at(u32::MAX, false);
        let mut chk = SequenceChecker::new(false);
        chk.last = Some(u32::MAX - 1);
        chk.check(c.take()).unwrap();
        assert_eq!(c.peek(), 0);
        chk.check(c.take()).unwrap();
    }

    #[test]
    fn symmetric_head_agrees_with_chunk_head() {
        let mut out = Vec::new();
        let limits = ChunkLimits {
            max_chunk_size: 8192,
            max_message_size: 0,
            max_chunk_count: 0,
        };
        let sec = SecurityHeader::Symmetric {
            token_id: 0x0102_0304,
        };
        write_chunks(
            MessageType::Message,
            0xA0B0_C0D0,
            &sec,
            42,
            b"body",
            &PlainCrypto,
            &mut SequenceCounter::new(true),
            &limits,
            &mut out,
        )
        .unwrap();
        let header = MessageHeader::parse(out.first_chunk().unwrap()).unwrap();
        let head = parse_symmetric_head(&out).unwrap();
        assert_eq!(
            head,
            SymmetricHead {
                secure_channel_id: 0xA0B0_C0D0,
                token_id: 0x0102_0304,
                sequence_offset: 16
            }
        );
        let full = parse_chunk_head(header, &out).unwrap();
        assert_eq!(full.secure_channel_id, 0xA0B0_C0D0);
        assert_eq!(
            full.security,
            SecurityHeader::Symmetric {
                token_id: 0x0102_0304
            }
        );
        assert_eq!(full.sequence_offset, 16);
        // Every truncation fails as parse_chunk_head fails.
        for n in 0..24 {
            assert_eq!(
                parse_symmetric_head(&out[..n]).unwrap_err(),
                StatusCode::BadTcpMessageTypeInvalid,
                "{n} bytes"
            );
            assert_eq!(
                parse_chunk_head(header, &out[..n]).unwrap_err(),
                StatusCode::BadTcpMessageTypeInvalid,
                "{n} bytes"
            );
        }
    }

    #[test]
    fn split_and_assemble_plain() {
        let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let mut seq = SequenceCounter::new(true);
        let mut out = Vec::new();
        let limits = ChunkLimits {
            max_chunk_size: 8192,
            max_message_size: 0,
            max_chunk_count: 0,
        };
        let sec = SecurityHeader::Symmetric { token_id: 7 };
        let n = write_chunks(
            MessageType::Message,
            9,
            &sec,
            42,
            &body,
            &PlainCrypto,
            &mut seq,
            &limits,
            &mut out,
        )
        .unwrap();
        assert_eq!(n, body.len().div_ceil(8192 - 24));
        let mut input = &out[..];
        let mut reader = crate::transport::FrameReader::new();
        let mut asm = MessageAssembler::new();
        let mut checker = SequenceChecker::new(true);
        let mut got = None;
        let mut scratch = Vec::new();
        while let Some(f) = reader.next(&mut input, 8192).unwrap() {
            assert!(f.bytes.len() <= 8192);
            let head = parse_chunk_head(f.header, f.bytes).unwrap();
            assert_eq!(head.secure_channel_id, 9);
            assert_eq!(head.security, sec);
            let oc = open_chunk(f.bytes, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
            checker.check(oc.sequence_number).unwrap();
            match asm
                .push(
                    MessageType::Message,
                    f.header.chunk_type,
                    oc.request_id,
                    oc.body,
                    1 << 20,
                    100,
                    StatusCode::BadRequestTooLarge,
                    0,
                )
                .unwrap()
            {
                Assembly::Partial => {}
                Assembly::Complete { request_id, body } => got = Some((request_id, body.to_vec())),
                Assembly::Aborted { .. } => panic!(),
            }
        }
        let (rid, b) = got.unwrap();
        assert_eq!(rid, 42);
        assert_eq!(b, body);
        // Too large for the peer: nothing written.
        let mut out2 = Vec::new();
        let l2 = ChunkLimits {
            max_chunk_count: 3,
            ..limits
        };
        assert_eq!(
            write_chunks(
                MessageType::Message,
                9,
                &sec,
                42,
                &body,
                &PlainCrypto,
                &mut seq,
                &l2,
                &mut out2
            )
            .unwrap_err(),
            StatusCode::BadTcpMessageTooLarge
        );
        assert!(out2.is_empty());
    }

    #[test]
    fn assembler_enforces_limits_and_abort() {
        let mut a = MessageAssembler::new();
        let t = MessageType::Message;
        let tl = StatusCode::BadRequestTooLarge;
        assert!(matches!(
            a.push(t, ChunkType::Intermediate, 1, &[0; 10], 25, 3, tl, 0)
                .unwrap(),
            Assembly::Partial
        ));
        assert!(matches!(
            a.push(t, ChunkType::Intermediate, 1, &[0; 10], 25, 3, tl, 0)
                .unwrap(),
            Assembly::Partial
        ));
        // Third chunk of 10 exceeds 25 bytes.
        assert_eq!(
            a.push(t, ChunkType::Final, 1, &[0; 10], 25, 3, tl, 0)
                .unwrap_err(),
            tl
        );
        let mut a = MessageAssembler::new();
        a.push(t, ChunkType::Intermediate, 1, &[0; 1], 100, 2, tl, 0)
            .unwrap();
        assert_eq!(
            a.push(t, ChunkType::Intermediate, 1, &[0; 1], 100, 2, tl, 0)
                .unwrap_err(),
            tl
        );
        let mut a = MessageAssembler::new();
        a.push(t, ChunkType::Intermediate, 1, &[0; 1], 100, 5, tl, 0)
            .unwrap();
        assert_eq!(
            a.push(t, ChunkType::Final, 2, &[0; 1], 100, 5, tl, 0)
                .unwrap_err(),
            StatusCode::BadTcpMessageTypeInvalid
        );
        let mut a = MessageAssembler::new();
        a.push(t, ChunkType::Intermediate, 1, &[0; 1], 100, 5, tl, 0)
            .unwrap();
        let mut abort = Vec::new();
        ErrorMessage::new(StatusCode::BadResponseTooLarge, "too big").encode_body(&mut abort);
        match a
            .push(t, ChunkType::Abort, 1, &abort, 100, 5, tl, 0)
            .unwrap()
        {
            Assembly::Aborted { request_id, error } => {
                assert_eq!(request_id, 1);
                assert_eq!(error.error, StatusCode::BadResponseTooLarge);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(a.buffered(), 0);
        assert!(matches!(
            a.push(t, ChunkType::Final, 3, &[1, 2], 100, 5, tl, 0)
                .unwrap(),
            Assembly::Complete { request_id: 3, .. }
        ));
    }
}
