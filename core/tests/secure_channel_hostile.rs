//! Hostile input against ServerConnection: each case ends in an ERR with the right
//! status and ConnStatus::Close (or the documented non-fatal outcome), never a panic.

mod common;

use common::{find_err, t0, TestHost};
use uaring_core::config::TransportLimits;
use uaring_core::encoding::Encode;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::node_ids;
use uaring_core::generated::types::{
    MessageSecurityMode, OpenSecureChannelRequest, ReadRequest, ReadValueId, RequestHeader,
    SecurityTokenRequestType,
};
use uaring_core::secure_channel::{
    write_abort_chunk, write_chunks, AsymmetricSecurityHeader, ChunkLimits, PlainCrypto,
    SecurityHeader, SequenceCounter, SECURITY_POLICY_NONE_URI,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::transport::{
    ErrorMessage, FrameReader, HelloMessage, MessageType, ReverseHelloMessage,
};
use uaring_core::types::{ByteString, NodeId, StatusCode};
use uaring_core::{Decode, DecodeLimits, Decoder, Now};

fn hello_with(recv: u32, send: u32, max_msg: u32, url: &str) -> Vec<u8> {
    let mut b = Vec::new();
    HelloMessage {
        protocol_version: 0,
        receive_buffer_size: recv,
        send_buffer_size: send,
        max_message_size: max_msg,
        max_chunk_count: 0,
        endpoint_url: url.into(),
    }
    .write(&mut b);
    b
}
fn hello() -> Vec<u8> {
    hello_with(65536, 65536, 0, "opc.tcp://localhost:4840")
}

/// A raw client: builds chunks with chosen ids, sequence numbers and tokens.
struct Raw {
    seq: SequenceCounter,
    channel_id: u32,
    token_id: u32,
    chunk_size: u32,
}

impl Raw {
    fn new() -> Self {
        Raw {
            seq: SequenceCounter::new(true),
            channel_id: 0,
            token_id: 0,
            chunk_size: 65536,
        }
    }
    fn opn(&mut self, request_type: SecurityTokenRequestType, policy: &str, out: &mut Vec<u8>) {
        let req = OpenSecureChannelRequest {
            request_header: RequestHeader {
                request_handle: 77,
                ..Default::default()
            },
            request_type,
            security_mode: MessageSecurityMode::None,
            client_nonce: ByteString::from(vec![]),
            requested_lifetime: 60_000,
            ..Default::default()
        };
        let mut body = Vec::new();
        NodeId::ns0(node_ids::OpenSecureChannelRequest_Encoding_DefaultBinary).encode(&mut body);
        req.encode(&mut body);
        let h = SecurityHeader::Asymmetric(AsymmetricSecurityHeader {
            security_policy_uri: policy.into(),
            ..Default::default()
        });
        let l = ChunkLimits {
            max_chunk_size: self.chunk_size,
            max_message_size: 0,
            max_chunk_count: 0,
        };
        write_chunks(
            MessageType::OpenSecureChannel,
            self.channel_id,
            &h,
            1,
            &body,
            &PlainCrypto,
            &mut self.seq,
            &l,
            out,
        )
        .unwrap();
    }
    fn msg_body(&mut self, t: MessageType, request_id: u32, body: &[u8], out: &mut Vec<u8>) {
        let h = SecurityHeader::Symmetric {
            token_id: self.token_id,
        };
        let l = ChunkLimits {
            max_chunk_size: self.chunk_size,
            max_message_size: 0,
            max_chunk_count: 0,
        };
        write_chunks(
            t,
            self.channel_id,
            &h,
            request_id,
            body,
            &PlainCrypto,
            &mut self.seq,
            &l,
            out,
        )
        .unwrap();
    }
    fn read(&mut self, request_id: u32, nodes: usize, out: &mut Vec<u8>) {
        let req = Request::Read(Box::new(ReadRequest {
            request_header: RequestHeader {
                request_handle: request_id,
                ..Default::default()
            },
            nodes_to_read: vec![
                ReadValueId {
                    node_id: NodeId::ns0(2258),
                    attribute_id: 13,
                    ..Default::default()
                };
                nodes
            ],
            ..Default::default()
        }));
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        self.msg_body(MessageType::Message, request_id, &body, out);
    }
}

/// Opens a channel (HEL + OPN) and returns the raw client set up for it.
fn open(host: &mut TestHost, conn: &mut ServerConnection) -> Raw {
    let mut raw = Raw::new();
    let mut input = hello();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut input,
    );
    let mut out = Vec::new();
    assert_eq!(conn.on_recv(host, t0(), &input, &mut out), ConnStatus::Open);
    assert_eq!(find_err(&out), None);
    raw.channel_id = conn.channel_id().unwrap();
    raw.token_id = 1;
    raw
}

/// Feeds `input` to a fresh connection; expects Close with an ERR of `status`.
fn expect_err_fresh(input: &[u8], status: StatusCode) {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), input, &mut out),
        ConnStatus::Close,
        "{status}"
    );
    assert_eq!(find_err(&out), Some(status));
    assert!(host.open_channels.is_empty());
}

fn expect_err_open(f: impl FnOnce(&mut Raw, &mut Vec<u8>), status: StatusCode) {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    let mut input = Vec::new();
    f(&mut raw, &mut input);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Close,
        "{status}"
    );
    assert_eq!(find_err(&out), Some(status));
    assert!(host.open_channels.is_empty(), "channel not released");
    assert_eq!(host.closed_channels.len(), 1);
    // Anything after Close is refused without output.
    let mut more = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &hello(), &mut more),
        ConnStatus::Close
    );
    assert!(more.is_empty());
}

#[test]
fn garbage_bytes() {
    expect_err_fresh(
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        StatusCode::BadTcpMessageTypeInvalid,
    );
    expect_err_fresh(&[0u8; 64], StatusCode::BadTcpMessageTypeInvalid);
}

#[test]
fn header_declaring_4_gb() {
    expect_err_fresh(b"HELF\xff\xff\xff\xff", StatusCode::BadTcpMessageTooLarge);
}

#[test]
fn first_message_not_hello() {
    let mut raw = Raw::new();
    let mut b = Vec::new();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut b,
    );
    expect_err_fresh(&b, StatusCode::BadTcpMessageTypeInvalid);
    let mut b = Vec::new();
    ReverseHelloMessage {
        server_uri: "urn:x".into(),
        endpoint_url: "opc.tcp://x".into(),
    }
    .write(&mut b);
    expect_err_fresh(&b, StatusCode::BadTcpMessageTypeInvalid);
}

#[test]
fn truncated_hello_body() {
    // Header says 20 bytes; body has 12 (not the five fields and a URL).
    let mut b = hello();
    b.truncate(20);
    b[4..8].copy_from_slice(&20u32.to_le_bytes());
    expect_err_fresh(&b, StatusCode::BadTcpMessageTypeInvalid);
}

#[test]
fn hello_buffers_and_url() {
    expect_err_fresh(
        &hello_with(1024, 65536, 0, "opc.tcp://x"),
        StatusCode::BadConnectionRejected,
    );
    expect_err_fresh(
        &hello_with(65536, 8191, 0, "opc.tcp://x"),
        StatusCode::BadConnectionRejected,
    );
    expect_err_fresh(
        &hello_with(65536, 65536, 0, "http://x"),
        StatusCode::BadTcpEndpointUrlInvalid,
    );
    let long = format!("opc.tcp://{}", "a".repeat(5000));
    // A 5 KB URL makes the Hello larger than the pre-Hello chunk limit (8192 bytes is
    // enough for any valid Hello), so it is refused on its header.
    expect_err_fresh(
        &hello_with(65536, 65536, 0, &long),
        StatusCode::BadTcpEndpointUrlInvalid,
    );
}

#[test]
fn truncated_chunk_times_out() {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    let mut b = Vec::new();
    raw.read(5, 1, &mut b);
    b.truncate(b.len() - 3);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &b, &mut out),
        ConnStatus::Open
    );
    assert!(out.is_empty());
    assert!(conn.buffered_bytes() > 0);
    let d = conn.next_deadline().unwrap();
    let later = Now::new(d, t0().utc);
    assert_eq!(conn.on_timer(&mut host, later, &mut out), ConnStatus::Close);
    assert_eq!(find_err(&out), Some(StatusCode::BadTimeout));
    assert!(host.open_channels.is_empty());
}

#[test]
fn oversized_chunk() {
    // Negotiated receive buffer is 8192: a 9000-byte chunk is refused on its header.
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut input = hello_with(65536, 8192, 0, "opc.tcp://x");
    let mut raw = Raw::new();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut input,
    );
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Open
    );
    let mut big = b"MSGF".to_vec();
    big.extend_from_slice(&9000u32.to_le_bytes());
    out.clear();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &big, &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTcpMessageTooLarge));
}

#[test]
fn too_many_chunks() {
    let mut host = TestHost::with_limits(TransportLimits {
        max_chunk_count: 4,
        ..Default::default()
    });
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    raw.chunk_size = 8192;
    let mut input = Vec::new();
    // About 40 KB of request: 5+ chunks of 8 KB.
    raw.read(9, 2000, &mut input);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadRequestTooLarge));
    assert_eq!(host.dispatched, 0);
}

#[test]
fn pre_session_budget() {
    // 1 MiB before a session: a 2 MiB request is refused after at most ~1 MiB buffered.
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    let mut input = Vec::new();
    raw.read(9, 150_000, &mut input); // ~2.7 MB
    assert!(input.len() > 2_000_000);
    let mut out = Vec::new();
    let mut status = ConnStatus::Open;
    for piece in input.chunks(4096) {
        status = conn.on_recv(&mut host, t0(), piece, &mut out);
        assert!(conn.buffered_bytes() <= 1024 * 1024 + 65536);
        if status == ConnStatus::Close {
            break;
        }
    }
    assert_eq!(status, ConnStatus::Close);
    assert_eq!(find_err(&out), Some(StatusCode::BadRequestTooLarge));
}

#[test]
fn wrong_secure_channel_id() {
    expect_err_open(
        |raw, b| {
            raw.channel_id += 1;
            raw.read(1, 1, b)
        },
        StatusCode::BadSecureChannelIdInvalid,
    );
}

#[test]
fn bad_sequence_number() {
    expect_err_open(
        |raw, b| {
            raw.seq.take(); // skip one
            raw.read(1, 1, b)
        },
        StatusCode::BadSequenceNumberInvalid,
    );
    expect_err_open(
        |raw, b| {
            raw.seq = SequenceCounter::starting_at(1, true); // replay
            raw.read(1, 1, b)
        },
        StatusCode::BadSequenceNumberInvalid,
    );
}

#[test]
fn unknown_token() {
    expect_err_open(
        |raw, b| {
            raw.token_id = 99;
            raw.read(1, 1, b)
        },
        StatusCode::BadSecureChannelTokenUnknown,
    );
}

#[test]
fn second_hello() {
    expect_err_open(
        |_, b| b.extend(hello()),
        StatusCode::BadTcpMessageTypeInvalid,
    );
}

#[test]
fn second_issue_and_unknown_policy() {
    expect_err_open(
        |raw, b| raw.opn(SecurityTokenRequestType::Issue, SECURITY_POLICY_NONE_URI, b),
        StatusCode::BadRequestTypeInvalid,
    );
    let mut raw = Raw::new();
    let mut b = hello();
    raw.opn(
        SecurityTokenRequestType::Issue,
        "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256",
        &mut b,
    );
    expect_err_fresh(&b, StatusCode::BadSecurityPolicyRejected);
    let mut raw = Raw::new();
    let mut b = hello();
    raw.opn(
        SecurityTokenRequestType::Renew,
        SECURITY_POLICY_NONE_URI,
        &mut b,
    );
    expect_err_fresh(&b, StatusCode::BadRequestTypeInvalid);
}

#[test]
fn msg_before_opn() {
    let mut raw = Raw::new();
    let mut b = hello();
    raw.read(1, 1, &mut b);
    expect_err_fresh(&b, StatusCode::BadTcpSecureChannelUnknown);
}

#[test]
fn channel_limit() {
    let mut host = TestHost::with_limits(TransportLimits {
        max_channels_per_shard: 1,
        ..Default::default()
    });
    let mut c1 = ServerConnection::new(&mut host, None, t0());
    let _ = open(&mut host, &mut c1);
    let mut c2 = ServerConnection::new(&mut host, None, t0());
    let mut raw = Raw::new();
    let mut b = hello();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut b,
    );
    let mut out = Vec::new();
    assert_eq!(c2.on_recv(&mut host, t0(), &b, &mut out), ConnStatus::Close);
    assert_eq!(find_err(&out), Some(StatusCode::BadTcpNotEnoughResources));
    c1.on_close(&mut host, t0());
    assert!(host.open_channels.is_empty());
}

#[test]
fn hello_timeout_and_open_timeout() {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let d = conn.next_deadline().unwrap();
    assert_eq!(d, t0().mono_ns + 10_000 * 1_000_000);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_timer(&mut host, Now::new(d - 1, t0().utc), &mut out),
        ConnStatus::Open
    );
    assert_eq!(
        conn.on_timer(&mut host, Now::new(d, t0().utc), &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTimeout));
    // Hello but no OPN.
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &hello(), &mut out),
        ConnStatus::Open
    );
    let d = conn.next_deadline().unwrap();
    out.clear();
    assert_eq!(
        conn.on_timer(&mut host, Now::new(d, t0().utc), &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTimeout));
}

#[test]
fn reverse_connection_sends_reverse_hello_then_runs_as_any_other() {
    let mut host = TestHost::new();
    let rhe = ReverseHelloMessage {
        server_uri: "urn:uaring:server".into(),
        endpoint_url: "opc.tcp://plant-gw:4840".into(),
    };
    let mut out = Vec::new();
    let mut conn = ServerConnection::reverse(&mut host, None, t0(), &rhe, 60_000, &mut out);
    // The first bytes on the wire are the ReverseHello, whole and alone.
    assert_eq!(&out[..4], b"RHEF");
    assert_eq!(
        u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize,
        out.len()
    );
    assert_eq!(ReverseHelloMessage::decode_body(&out[8..]).unwrap(), rhe);
    assert!(conn.awaits_hello());
    // It waits for the client's Hello as long as it was told to, not hello_timeout_ms.
    assert_eq!(
        conn.next_deadline(),
        Some(t0().mono_ns + 60_000 * 1_000_000)
    );
    // The client's Hello and OpenSecureChannel: an ordinary channel from here on.
    let mut raw = Raw::new();
    let mut input = hello();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut input,
    );
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Open
    );
    assert_eq!(find_err(&out), None);
    assert!(!conn.awaits_hello());
    assert!(conn.channel_id().is_some());
    // A client that never takes the connection up gets ERR BadTimeout at the wait's end.
    let mut out = Vec::new();
    let mut idle = ServerConnection::reverse(&mut host, None, t0(), &rhe, 5_000, &mut out);
    let d = idle.next_deadline().unwrap();
    assert_eq!(d, t0().mono_ns + 5_000 * 1_000_000);
    out.clear();
    assert_eq!(
        idle.on_timer(&mut host, Now::new(d, t0().utc), &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTimeout));
    // A ReverseHello sent to the server is refused: servers never take one.
    let mut out = Vec::new();
    let mut conn = ServerConnection::reverse(&mut host, None, t0(), &rhe, 5_000, &mut out);
    let mut bogus = Vec::new();
    rhe.write(&mut bogus);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &bogus, &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTcpMessageTypeInvalid));
}

fn responses(out: &[u8]) -> Vec<(u32, Response)> {
    let mut r = FrameReader::new();
    let mut rest = out;
    let mut v = Vec::new();
    while let Some(f) = r.next(&mut rest, 1 << 24).unwrap() {
        if f.header.message_type != MessageType::Message {
            continue;
        }
        let head = uaring_core::secure_channel::parse_chunk_head(f.header, f.bytes).unwrap();
        let mut scratch = Vec::new();
        let c = uaring_core::secure_channel::open_chunk(
            f.bytes,
            head.sequence_offset,
            &PlainCrypto,
            &mut scratch,
        )
        .unwrap();
        let mut d = Decoder::new(c.body, DecodeLimits::default());
        let t = NodeId::decode(&mut d).unwrap();
        v.push((
            c.request_id,
            Response::decode_body(&t, &mut d).unwrap().unwrap(),
        ));
    }
    v
}

#[test]
fn unknown_service_gets_service_fault() {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    // A body with the encoding id of a structure that is no request (ReadValueId, 628)
    // followed by a RequestHeader.
    let mut body = Vec::new();
    NodeId::ns0(628).encode(&mut body);
    RequestHeader {
        request_handle: 4242,
        ..Default::default()
    }
    .encode(&mut body);
    let mut input = Vec::new();
    raw.msg_body(MessageType::Message, 3, &body, &mut input);
    // And a truncated Read (decoding error).
    let mut body = Vec::new();
    NodeId::ns0(node_ids::ReadRequest_Encoding_DefaultBinary).encode(&mut body);
    RequestHeader {
        request_handle: 4343,
        ..Default::default()
    }
    .encode(&mut body);
    body.extend_from_slice(&[1, 2, 3]);
    raw.msg_body(MessageType::Message, 4, &body, &mut input);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Open
    );
    let rs = responses(&out);
    assert_eq!(rs.len(), 2);
    assert_eq!(rs[0].0, 3);
    let Response::ServiceFault(f) = &rs[0].1 else {
        panic!("{:?}", rs[0].1)
    };
    assert_eq!(
        f.response_header.service_result,
        StatusCode::BadServiceUnsupported
    );
    assert_eq!(f.response_header.request_handle, 4242);
    let Response::ServiceFault(f) = &rs[1].1 else {
        panic!()
    };
    assert_eq!(
        f.response_header.service_result,
        StatusCode::BadDecodingError
    );
    assert_eq!(f.response_header.request_handle, 4343);
    assert_eq!(host.dispatched, 0);
}

#[test]
fn abort_chunk_drops_partial_message() {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    raw.chunk_size = 8192;
    let mut big = Vec::new();
    raw.seq = SequenceCounter::starting_at(raw.seq.peek(), true);
    raw.read(7, 2000, &mut big);
    // Keep the first chunk only (an intermediate one), then abort.
    let first_len = u32::from_le_bytes(big[4..8].try_into().unwrap()) as usize;
    assert_eq!(big[3], b'C');
    let mut input = big[..first_len].to_vec();
    // Rewind the counter to just after the first chunk.
    let first_seq = u32::from_le_bytes(big[16..20].try_into().unwrap());
    raw.seq = SequenceCounter::starting_at(first_seq + 1, true);
    let h = SecurityHeader::Symmetric { token_id: 1 };
    write_abort_chunk(
        MessageType::Message,
        raw.channel_id,
        &h,
        7,
        &ErrorMessage::new(StatusCode::BadRequestTooLarge, "x"),
        &PlainCrypto,
        &mut raw.seq,
        &mut input,
    )
    .unwrap();
    raw.read(8, 1, &mut input);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Open
    );
    let rs = responses(&out);
    assert_eq!(rs.len(), 1);
    assert_eq!(rs[0].0, 8);
    assert_eq!(conn.buffered_bytes(), 0);
}

#[test]
fn close_secure_channel_closes_quietly() {
    let mut host = TestHost::new();
    let mut conn = ServerConnection::new(&mut host, None, t0());
    let mut raw = open(&mut host, &mut conn);
    let mut body = Vec::new();
    NodeId::ns0(node_ids::CloseSecureChannelRequest_Encoding_DefaultBinary).encode(&mut body);
    RequestHeader::default().encode(&mut body);
    let mut input = Vec::new();
    raw.msg_body(MessageType::CloseSecureChannel, 2, &body, &mut input);
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Close
    );
    assert!(out.is_empty());
    assert_eq!(host.closed_channels, vec![1]);
    conn.on_close(&mut host, t0()); // no second report (TestHost asserts)
}

#[test]
fn response_too_large_becomes_service_fault() {
    let mut host = TestHost::new();
    host.read_value_len = 10_000;
    let mut conn = ServerConnection::new(&mut host, None, t0());
    // The client accepts at most 16 KiB messages.
    let mut input = hello_with(65536, 65536, 16384, "opc.tcp://x");
    let mut raw = Raw::new();
    raw.opn(
        SecurityTokenRequestType::Issue,
        SECURITY_POLICY_NONE_URI,
        &mut input,
    );
    raw.channel_id = 1;
    raw.token_id = 1;
    raw.read(5, 1, &mut input); // ~10 KB response: fine
    raw.read(6, 3, &mut input); // ~30 KB: too large
    let mut out = Vec::new();
    assert_eq!(
        conn.on_recv(&mut host, t0(), &input, &mut out),
        ConnStatus::Open
    );
    let rs = responses(&out);
    assert_eq!(rs.len(), 2);
    assert!(matches!(rs[0].1, Response::Read(_)));
    let Response::ServiceFault(f) = &rs[1].1 else {
        panic!()
    };
    assert_eq!(
        f.response_header.service_result,
        StatusCode::BadResponseTooLarge
    );
    assert_eq!(f.response_header.request_handle, 6);
}

#[test]
fn random_garbage_never_panics() {
    let mut rng = common::Rng::new(7);
    for _ in 0..2000 {
        let mut host = TestHost::new();
        let mut conn = ServerConnection::new(&mut host, None, t0());
        let mut raw = Raw::new();
        let mut input = hello();
        raw.opn(
            SecurityTokenRequestType::Issue,
            SECURITY_POLICY_NONE_URI,
            &mut input,
        );
        raw.channel_id = 1;
        raw.token_id = 1;
        raw.read(2, 3, &mut input);
        // Flip a few bytes anywhere.
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(input.len() as u64) as usize;
            input[i] = rng.next_u64() as u8;
        }
        let mut out = Vec::new();
        let mut status = ConnStatus::Open;
        for piece in input.chunks(1 + rng.below(200) as usize) {
            status = conn.on_recv(&mut host, t0(), piece, &mut out);
            if status == ConnStatus::Close {
                break;
            }
        }
        if status == ConnStatus::Close && find_err(&out).is_none() {
            // Only a CLO closes quietly; a flipped byte can turn MSG into CLO.
            assert!(input.windows(3).any(|w| w == b"CLO") || input.windows(3).any(|w| w == b"ERR"));
        }
        if status == ConnStatus::Close {
            assert!(host.open_channels.is_empty());
        } else {
            conn.on_close(&mut host, t0());
            assert!(host.open_channels.is_empty());
        }
    }
}
