//! UA-TCP (Part 6 §7.1): the message header, Hello / Acknowledge / Error / ReverseHello,
//! buffer negotiation and the [`FrameReader`] that cuts a byte stream into whole chunks,
//! checking each header before a byte of the body is buffered.

// Input reaches this module from the network: no panic on any path (issue 10). Spots
// proven safe carry an `#[allow]` with the reason.

use crate::config::{TransportLimits, MAX_ENDPOINT_URL_LEN, MAX_REASON_LEN, MIN_BUFFER_SIZE};

use crate::encoding::{Decode, DecodeLimits, Decoder, Encode};
use crate::types::{StatusCode, UaString};

/// Size of the UA-TCP message header (MessageType, chunk type, MessageSize), in bytes.
pub const MESSAGE_HEADER_LEN: usize = 8;
/// The UACP protocol version this implementation speaks.
pub const PROTOCOL_VERSION: u32 = 0;

/// The three-letter message type of a UA-TCP / UASC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessageType {
    Hello,
    Acknowledge,
    Error,
    ReverseHello,
    OpenSecureChannel,
    CloseSecureChannel,
    Message,
}

impl MessageType {
    pub const fn tag(self) -> [u8; 3] {
        match self {
            MessageType::Hello => *b"HEL",
            MessageType::Acknowledge => *b"ACK",
            MessageType::Error => *b"ERR",
            MessageType::ReverseHello => *b"RHE",
            MessageType::OpenSecureChannel => *b"OPN",
            MessageType::CloseSecureChannel => *b"CLO",
            MessageType::Message => *b"MSG",
        }
    }
    pub fn from_tag(t: [u8; 3]) -> Option<MessageType> {
        Some(match &t {
            b"HEL" => MessageType::Hello,
            b"ACK" => MessageType::Acknowledge,
            b"ERR" => MessageType::Error,
            b"RHE" => MessageType::ReverseHello,
            b"OPN" => MessageType::OpenSecureChannel,
            b"CLO" => MessageType::CloseSecureChannel,
            b"MSG" => MessageType::Message,
            _ => return None,
        })
    }
    /// Secure-conversation messages (OPN, CLO, MSG) carry a secure channel id and may be
    /// split in chunks; the UACP ones (HEL, ACK, ERR, RHE) are always 'F'.
    pub const fn is_secure(self) -> bool {
        matches!(
            self,
            MessageType::OpenSecureChannel | MessageType::CloseSecureChannel | MessageType::Message
        )
    }
}

/// The fourth header byte: 'F' final, 'C' intermediate, 'A' abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChunkType {
    Final,
    Intermediate,
    Abort,
}

impl ChunkType {
    pub const fn byte(self) -> u8 {
        match self {
            ChunkType::Final => b'F',
            ChunkType::Intermediate => b'C',
            ChunkType::Abort => b'A',
        }
    }
    pub fn from_byte(b: u8) -> Option<ChunkType> {
        match b {
            b'F' => Some(ChunkType::Final),
            b'C' => Some(ChunkType::Intermediate),
            b'A' => Some(ChunkType::Abort),
            _ => None,
        }
    }
}

/// The 8-byte header in front of every UA-TCP message and every chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageHeader {
    pub message_type: MessageType,
    pub chunk_type: ChunkType,
    /// Size of the whole message/chunk including this header, in bytes.
    pub message_size: u32,
}

impl MessageHeader {
    /// Parses the first 8 bytes. Unknown types, a chunk type other than 'F' on a UACP
    /// message, and a size below the header size are BadTcpMessageTypeInvalid.
    pub fn parse(b: &[u8; MESSAGE_HEADER_LEN]) -> Result<MessageHeader, StatusCode> {
        let message_type = MessageType::from_tag([b[0], b[1], b[2]])
            .ok_or(StatusCode::BadTcpMessageTypeInvalid)?;
        let chunk_type = ChunkType::from_byte(b[3]).ok_or(StatusCode::BadTcpMessageTypeInvalid)?;
        if !message_type.is_secure() && chunk_type != ChunkType::Final {
            return Err(StatusCode::BadTcpMessageTypeInvalid);
        }
        let message_size = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if (message_size as usize) < MESSAGE_HEADER_LEN {
            return Err(StatusCode::BadTcpMessageTypeInvalid);
        }
        Ok(MessageHeader {
            message_type,
            chunk_type,
            message_size,
        })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.message_type.tag());
        out.push(self.chunk_type.byte());
        out.extend_from_slice(&self.message_size.to_le_bytes());
    }
}

/// Writes a UACP message (`F`) whose body is produced by `body`, patching the size.
fn write_uacp(out: &mut Vec<u8>, t: MessageType, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    MessageHeader {
        message_type: t,
        chunk_type: ChunkType::Final,
        message_size: 0,
    }
    .encode(out);
    body(out);
    let size = (out.len() - start) as u32;
    // The header just written is 8 bytes long: the size field is there.
    if let Some(at) = out.get_mut(start + 4..start + 8) {
        at.copy_from_slice(&size.to_le_bytes());
    }
}

/// Limits used to decode the small UACP bodies: strings up to 4096 bytes.
fn uacp_decode_limits() -> DecodeLimits {
    DecodeLimits {
        max_string_len: MAX_ENDPOINT_URL_LEN,
        max_byte_string_len: 0,
        max_array_len: 0,
        max_depth: 1,
        max_decoded_size: MAX_ENDPOINT_URL_LEN,
    }
}

/// Hello (Part 6 §7.1.2.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelloMessage {
    pub protocol_version: u32,
    pub receive_buffer_size: u32,
    pub send_buffer_size: u32,
    /// 0 = no limit.
    pub max_message_size: u32,
    /// 0 = no limit.
    pub max_chunk_count: u32,
    pub endpoint_url: UaString,
}

impl HelloMessage {
    pub fn write(&self, out: &mut Vec<u8>) {
        write_uacp(out, MessageType::Hello, |o| {
            self.protocol_version.encode(o);
            self.receive_buffer_size.encode(o);
            self.send_buffer_size.encode(o);
            self.max_message_size.encode(o);
            self.max_chunk_count.encode(o);
            self.endpoint_url.encode(o);
        })
    }
    /// Decodes the body (after the 8-byte header). A URL over 4096 bytes is
    /// BadTcpEndpointUrlInvalid, anything malformed BadTcpMessageTypeInvalid.
    pub fn decode_body(body: &[u8]) -> Result<HelloMessage, StatusCode> {
        let mut d = Decoder::new(body, uacp_decode_limits());
        let bad = |_| StatusCode::BadTcpMessageTypeInvalid;
        let protocol_version = u32::decode(&mut d).map_err(bad)?;
        let receive_buffer_size = u32::decode(&mut d).map_err(bad)?;
        let send_buffer_size = u32::decode(&mut d).map_err(bad)?;
        let max_message_size = u32::decode(&mut d).map_err(bad)?;
        let max_chunk_count = u32::decode(&mut d).map_err(bad)?;
        let endpoint_url = UaString::decode(&mut d).map_err(|e| {
            if e.status == StatusCode::BadEncodingLimitsExceeded {
                StatusCode::BadTcpEndpointUrlInvalid
            } else {
                StatusCode::BadTcpMessageTypeInvalid
            }
        })?;
        Ok(HelloMessage {
            protocol_version,
            receive_buffer_size,
            send_buffer_size,
            max_message_size,
            max_chunk_count,
            endpoint_url,
        })
    }
}

/// Acknowledge (Part 6 §7.1.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcknowledgeMessage {
    pub protocol_version: u32,
    pub receive_buffer_size: u32,
    pub send_buffer_size: u32,
    /// 0 = no limit.
    pub max_message_size: u32,
    /// 0 = no limit.
    pub max_chunk_count: u32,
}

impl AcknowledgeMessage {
    pub fn write(&self, out: &mut Vec<u8>) {
        write_uacp(out, MessageType::Acknowledge, |o| {
            self.protocol_version.encode(o);
            self.receive_buffer_size.encode(o);
            self.send_buffer_size.encode(o);
            self.max_message_size.encode(o);
            self.max_chunk_count.encode(o);
        })
    }
    pub fn decode_body(body: &[u8]) -> Result<AcknowledgeMessage, StatusCode> {
        let mut d = Decoder::new(body, uacp_decode_limits());
        let bad = |_| StatusCode::BadTcpMessageTypeInvalid;
        Ok(AcknowledgeMessage {
            protocol_version: u32::decode(&mut d).map_err(bad)?,
            receive_buffer_size: u32::decode(&mut d).map_err(bad)?,
            send_buffer_size: u32::decode(&mut d).map_err(bad)?,
            max_message_size: u32::decode(&mut d).map_err(bad)?,
            max_chunk_count: u32::decode(&mut d).map_err(bad)?,
        })
    }
}

/// Error (Part 6 §7.1.2.5); the same body is the payload of an abort chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMessage {
    pub error: StatusCode,
    pub reason: UaString,
}

impl ErrorMessage {
    pub fn new(error: StatusCode, reason: &str) -> Self {
        let mut r = reason;
        if r.len() > MAX_REASON_LEN {
            // Cut at a char boundary at or below the limit.
            let mut n = MAX_REASON_LEN;
            while n > 0 && !r.is_char_boundary(n) {
                n -= 1;
            }
            r = &r[..n];
        }
        ErrorMessage {
            error,
            reason: UaString::from(r),
        }
    }
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        self.error.encode(out);
        self.reason.encode(out);
    }
    pub fn write(&self, out: &mut Vec<u8>) {
        write_uacp(out, MessageType::Error, |o| self.encode_body(o))
    }
    /// Decodes an ERR / abort body. A reason over 4096 bytes is ignored (read as null),
    /// as Part 6 tells clients to do.
    pub fn decode_body(body: &[u8]) -> Result<ErrorMessage, StatusCode> {
        let mut d = Decoder::new(body, uacp_decode_limits());
        let error = StatusCode::decode(&mut d).map_err(|_| StatusCode::BadTcpMessageTypeInvalid)?;
        let reason = UaString::decode(&mut d).unwrap_or_default();
        Ok(ErrorMessage { error, reason })
    }
}

/// ReverseHello (Part 6 §7.1.2.6). The server never accepts one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReverseHelloMessage {
    pub server_uri: UaString,
    pub endpoint_url: UaString,
}

impl ReverseHelloMessage {
    pub fn write(&self, out: &mut Vec<u8>) {
        write_uacp(out, MessageType::ReverseHello, |o| {
            self.server_uri.encode(o);
            self.endpoint_url.encode(o);
        })
    }
    pub fn decode_body(body: &[u8]) -> Result<ReverseHelloMessage, StatusCode> {
        let mut d = Decoder::new(body, uacp_decode_limits());
        let bad = |_| StatusCode::BadTcpMessageTypeInvalid;
        Ok(ReverseHelloMessage {
            server_uri: UaString::decode(&mut d).map_err(bad)?,
            endpoint_url: UaString::decode(&mut d).map_err(bad)?,
        })
    }
}

/// The buffer sizes and message limits both sides use after HEL/ACK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// Largest chunk we accept, in bytes.
    pub receive_buffer_size: u32,
    /// Largest chunk we send, in bytes.
    pub send_buffer_size: u32,
    /// Largest message body the peer accepts, in bytes (0 = the peer set no limit).
    pub peer_max_message_size: u32,
    /// Most chunks the peer accepts in one message (0 = no limit).
    pub peer_max_chunk_count: u32,
}

/// Checks the EndpointUrl of a Hello (Part 6 §7.1.2.3: an URL the server does not
/// recognize is BadTcpEndpointUrlInvalid). A null or empty URL is accepted (clients that
/// connect by address alone send one). Otherwise: the `opc.tcp` scheme (any case), a
/// host (a name, an IPv4 address or a bracketed IPv6 literal) with an optional port in
/// 1..=65535, no user information, and printable ASCII without spaces throughout.
/// The host and port are not compared with the server's own: clients connect through
/// load balancers, NAT and by IP address, under names the server does not know. Any
/// path names this server's one endpoint (GetEndpoints answers under the client's URL).
pub fn check_endpoint_url(url: &str) -> Result<(), &'static str> {
    if url.is_empty() {
        return Ok(());
    }
    if url.len() > MAX_ENDPOINT_URL_LEN {
        return Err("EndpointUrl is longer than 4096 bytes");
    }
    if !url.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("EndpointUrl has spaces, control or non-ASCII characters");
    }
    let Some(rest) = url
        .get(..10)
        .filter(|s| s.eq_ignore_ascii_case("opc.tcp://"))
        .and(url.get(10..))
    else {
        return Err("EndpointUrl is not opc.tcp");
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if authority.contains('@') {
        return Err("EndpointUrl has user information");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err("EndpointUrl has an unclosed IPv6 literal");
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() && !addr.contains('%') {
            return Err("EndpointUrl has a malformed IPv6 literal");
        }
        match after {
            "" => (addr, None),
            p => match p.strip_prefix(':') {
                Some(p) => (addr, Some(p)),
                None => return Err("EndpointUrl has text after the IPv6 literal"),
            },
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("EndpointUrl has no host");
    }
    if !authority.starts_with('[')
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~%".contains(&b))
    {
        return Err("EndpointUrl has a malformed host");
    }
    if let Some(p) = port {
        let ok = !p.is_empty()
            && p.len() <= 5
            && p.bytes().all(|b| b.is_ascii_digit())
            && p.parse::<u32>().is_ok_and(|n| (1..=65535).contains(&n));
        if !ok {
            return Err("EndpointUrl has a port outside 1..65535");
        }
    }
    Ok(())
}

/// Server side of the negotiation: from our limits and the client's Hello, the ACK to
/// send and what both sides then use. Buffers below 8192 bytes are BadConnectionRejected.
/// The largest response is the client's MaxMessageSize, bounded by our
/// `max_response_message_size` (also when the client says 0, "no limit").
pub fn negotiate_server(
    ours: &TransportLimits,
    hello: &HelloMessage,
) -> Result<(AcknowledgeMessage, Negotiated), StatusCode> {
    if hello.receive_buffer_size < MIN_BUFFER_SIZE || hello.send_buffer_size < MIN_BUFFER_SIZE {
        return Err(StatusCode::BadConnectionRejected);
    }
    let receive = ours.receive_buffer_size.min(hello.send_buffer_size);
    let send = ours.send_buffer_size.min(hello.receive_buffer_size);
    let ack = AcknowledgeMessage {
        protocol_version: PROTOCOL_VERSION,
        receive_buffer_size: receive,
        send_buffer_size: send,
        max_message_size: ours.max_message_size,
        max_chunk_count: ours.max_chunk_count,
    };
    // The client's 0 means "no limit" to the client; we still stop at our own.
    let response_max = match hello.max_message_size {
        0 => ours.max_response_message_size,
        n => n.min(ours.max_response_message_size),
    };
    let n = Negotiated {
        receive_buffer_size: receive,
        send_buffer_size: send,
        peer_max_message_size: response_max,
        peer_max_chunk_count: hello.max_chunk_count,
    };
    Ok((ack, n))
}

/// Client side: check the server's ACK against our Hello. The server may only lower
/// the sizes; a buffer below 8192 or above what we offered is BadConnectionRejected.
pub fn negotiate_client(
    hello: &HelloMessage,
    ack: &AcknowledgeMessage,
) -> Result<Negotiated, StatusCode> {
    if ack.receive_buffer_size < MIN_BUFFER_SIZE || ack.send_buffer_size < MIN_BUFFER_SIZE {
        return Err(StatusCode::BadConnectionRejected);
    }
    if ack.send_buffer_size > hello.receive_buffer_size {
        return Err(StatusCode::BadConnectionRejected);
    }
    Ok(Negotiated {
        receive_buffer_size: hello.receive_buffer_size.min(ack.send_buffer_size),
        // The server's ReceiveBufferSize is the largest chunk it accepts; do not exceed
        // what we said we would send either.
        send_buffer_size: hello.send_buffer_size.min(ack.receive_buffer_size),
        peer_max_message_size: ack.max_message_size,
        peer_max_chunk_count: ack.max_chunk_count,
    })
}

/// One whole message/chunk cut from the stream: its parsed header and all its bytes
/// (header included).
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub header: MessageHeader,
    pub bytes: &'a [u8],
}

/// Cuts a TCP byte stream into whole chunks. Each header is checked as soon as its 8
/// bytes have arrived (type, and size against the receive buffer size), so at most one
/// chunk of at most `max_chunk_size` bytes is ever buffered. Chunks that arrive whole
/// in one receive are returned as slices of the input without copying.
#[derive(Debug, Default)]
pub struct FrameReader {
    /// A partly received chunk (header bytes first).
    pending: Vec<u8>,
    /// Declared size of the pending chunk once its header is known.
    pending_size: Option<usize>,
    /// `pending` held a whole frame that was returned by the last `next`; clear it first.
    consumed: bool,
    /// Message types accepted in the current state; others are BadTcpMessageTypeInvalid
    /// as soon as the header arrives. `None` accepts every type.
    filter: Option<fn(MessageType) -> bool>,
}

impl FrameReader {
    pub fn new() -> Self {
        FrameReader::default()
    }

    /// Bytes of a partly received chunk currently buffered.
    pub fn buffered(&self) -> usize {
        if self.consumed {
            0
        } else {
            self.pending.len()
        }
    }

    /// Accept only message types for which `f` is true (checked on each header).
    pub fn set_filter(&mut self, f: Option<fn(MessageType) -> bool>) {
        self.filter = f;
    }

    /// Drops any buffered bytes and releases the buffer's memory.
    pub fn clear(&mut self) {
        self.pending = Vec::new();
        self.pending_size = None;
        self.consumed = false;
    }

    fn check_header(
        &self,
        b: &[u8],
        max_chunk_size: usize,
    ) -> Result<(MessageHeader, usize), StatusCode> {
        let h: [u8; MESSAGE_HEADER_LEN] = b
            .get(..MESSAGE_HEADER_LEN)
            .and_then(|h| h.try_into().ok())
            .ok_or(StatusCode::BadTcpInternalError)?;
        let header = MessageHeader::parse(&h)?;
        if let Some(f) = self.filter {
            if !f(header.message_type) {
                return Err(StatusCode::BadTcpMessageTypeInvalid);
            }
        }
        let size = header.message_size as usize;
        if size > max_chunk_size {
            return Err(StatusCode::BadTcpMessageTooLarge);
        }
        Ok((header, size))
    }

    /// The next whole frame from the buffered bytes and `input` (which is advanced past
    /// what was used). `Ok(None)`: `input` is used up and any tail is buffered. An error
    /// is fatal for the connection (send ERR with it and close).
    pub fn next<'s, 'i: 's>(
        &'s mut self,
        input: &mut &'i [u8],
        max_chunk_size: u32,
    ) -> Result<Option<Frame<'s>>, StatusCode> {
        let max = max_chunk_size as usize;
        if self.consumed {
            self.pending.clear();
            self.pending_size = None;
            self.consumed = false;
        }
        if self.pending.is_empty() {
            // Fast path: a whole frame at the front of the input.
            if input.len() >= MESSAGE_HEADER_LEN {
                let (header, size) = self.check_header(input, max)?;
                if input.len() >= size {
                    let (frame, rest) = input.split_at(size);
                    *input = rest;
                    return Ok(Some(Frame {
                        header,
                        bytes: frame,
                    }));
                }
                self.pending.reserve_exact(size);
                self.pending_size = Some(size);
            }
            self.pending.extend_from_slice(input);
            *input = &[];
            return Ok(None);
        }
        // Complete the header first.
        if self.pending_size.is_none() {
            let need = MESSAGE_HEADER_LEN - self.pending.len();
            let n = need.min(input.len());
            let (head, rest) = input.split_at(n); // n <= input.len()
            self.pending.extend_from_slice(head);
            *input = rest;
            if self.pending.len() < MESSAGE_HEADER_LEN {
                return Ok(None);
            }
            let (_, size) = self.check_header(&self.pending, max)?;
            self.pending.reserve_exact(size - self.pending.len());
            self.pending_size = Some(size);
        }
        let size = self.pending_size.unwrap_or(MESSAGE_HEADER_LEN);
        let need = size.saturating_sub(self.pending.len());
        let n = need.min(input.len());
        let (head, rest) = input.split_at(n); // n <= input.len()
        self.pending.extend_from_slice(head);
        *input = rest;
        if self.pending.len() < size {
            return Ok(None);
        }
        let (header, _) = self.check_header(&self.pending, max)?;
        self.consumed = true;
        Ok(Some(Frame {
            header,
            bytes: &self.pending,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> HelloMessage {
        HelloMessage {
            protocol_version: 0,
            receive_buffer_size: 65535,
            send_buffer_size: 65535,
            max_message_size: 4 * 1024 * 1024,
            max_chunk_count: 0,
            endpoint_url: "opc.tcp://tattata:62543/AAAAA/AggregationServer".into(),
        }
    }

    #[test]
    fn frame_reader_splits_and_joins() {
        let mut stream = Vec::new();
        hello().write(&mut stream);
        ErrorMessage::new(StatusCode::BadTimeout, "x").write(&mut stream);
        let total = stream.len();
        for split in 0..=total {
            let mut r = FrameReader::new();
            let mut got = Vec::new();
            for part in [&stream[..split], &stream[split..]] {
                let mut input = part;
                while let Some(f) = r.next(&mut input, 8192).unwrap() {
                    got.push((f.header.message_type, f.bytes.to_vec()));
                }
                assert!(input.is_empty());
            }
            assert_eq!(got.len(), 2, "split {split}");
            assert_eq!(got[0].0, MessageType::Hello);
            assert_eq!(got[1].0, MessageType::Error);
            assert_eq!(got[0].1.len() + got[1].1.len(), total);
        }
    }

    #[test]
    fn oversized_header_is_rejected_at_once() {
        let mut r = FrameReader::new();
        let b = [b'M', b'S', b'G', b'F', 0xff, 0xff, 0xff, 0xff];
        let mut input = &b[..];
        assert_eq!(
            r.next(&mut input, 65536).unwrap_err(),
            StatusCode::BadTcpMessageTooLarge
        );
        let b = *b"XYZF\x10\0\0\0";
        let mut input = &b[..];
        assert_eq!(
            r.next(&mut input, 65536).unwrap_err(),
            StatusCode::BadTcpMessageTypeInvalid
        );
        let b = *b"HELC\x10\0\0\0";
        let mut input = &b[..];
        assert_eq!(
            r.next(&mut input, 65536).unwrap_err(),
            StatusCode::BadTcpMessageTypeInvalid
        );
        let b = *b"MSGF\x04\0\0\0";
        let mut input = &b[..];
        assert_eq!(
            r.next(&mut input, 65536).unwrap_err(),
            StatusCode::BadTcpMessageTypeInvalid
        );
    }

    #[test]
    fn hello_roundtrip_and_negotiation() {
        let h = hello();
        let mut b = Vec::new();
        h.write(&mut b);
        assert_eq!(HelloMessage::decode_body(&b[8..]).unwrap(), h);
        let ours = TransportLimits {
            receive_buffer_size: 8192,
            send_buffer_size: 1 << 20,
            ..Default::default()
        };
        let (ack, n) = negotiate_server(&ours, &h).unwrap();
        assert_eq!(ack.receive_buffer_size, 8192);
        assert_eq!(ack.send_buffer_size, 65535);
        assert_eq!(n.peer_max_message_size, 4 * 1024 * 1024);
        let small = HelloMessage {
            receive_buffer_size: 1024,
            ..h.clone()
        };
        assert_eq!(
            negotiate_server(&ours, &small).unwrap_err(),
            StatusCode::BadConnectionRejected
        );
        let cn = negotiate_client(&h, &ack).unwrap();
        assert_eq!(cn.send_buffer_size, 8192);
        assert_eq!(cn.receive_buffer_size, 65535);
    }

    #[test]
    fn endpoint_urls() {
        for ok in [
            "",
            "opc.tcp://localhost:4840",
            "OPC.TCP://host",
            "opc.tcp://10.1.2.3:4840/uaring",
            "opc.tcp://[::1]:4840/",
            "opc.tcp://[fe80::1%25eth0]:4840",
            "opc.tcp://lb.example.com:62541/UA/Server?x=1",
            "opc.tcp://my_host-1.local",
        ] {
            assert_eq!(check_endpoint_url(ok), Ok(()), "{ok}");
        }
        for bad in [
            "http://host:4840",
            "opc.tcp://",
            "opc.tcp://:4840",
            "opc.tcp:///path",
            "opc.tcp://host:0",
            "opc.tcp://host:65536",
            "opc.tcp://host:48a0",
            "opc.tcp://host:",
            "opc.tcp://user@host:4840",
            "opc.tcp://[::1",
            "opc.tcp://[nonsense]:4840",
            "opc.tcp://[::1]x",
            "opc.tcp://ho st:4840",
            "opc.tcp://host:4840/a b",
            "opc.tcp://hö st",
            "opc.tcp://host\\x",
        ] {
            assert!(check_endpoint_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn response_size_is_bounded_when_the_client_sets_no_limit() {
        let ours = TransportLimits {
            max_response_message_size: 1 << 20,
            ..Default::default()
        };
        let unlimited = HelloMessage {
            max_message_size: 0,
            ..hello()
        };
        assert_eq!(
            negotiate_server(&ours, &unlimited)
                .unwrap()
                .1
                .peer_max_message_size,
            1 << 20
        );
        let big = HelloMessage {
            max_message_size: 1 << 30,
            ..hello()
        };
        assert_eq!(
            negotiate_server(&ours, &big)
                .unwrap()
                .1
                .peer_max_message_size,
            1 << 20
        );
        let small = HelloMessage {
            max_message_size: 100_000,
            ..hello()
        };
        assert_eq!(
            negotiate_server(&ours, &small)
                .unwrap()
                .1
                .peer_max_message_size,
            100_000
        );
    }

    #[test]
    fn long_endpoint_url_is_invalid() {
        let h = HelloMessage {
            endpoint_url: "x".repeat(5000).as_str().into(),
            ..hello()
        };
        let mut b = Vec::new();
        h.write(&mut b);
        assert_eq!(
            HelloMessage::decode_body(&b[8..]).unwrap_err(),
            StatusCode::BadTcpEndpointUrlInvalid
        );
    }
}
