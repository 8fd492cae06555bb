//! Byte-level facts from a public capture (node-opcua
//! packages/node-opcua-transport/test-fixtures/fixture_full_tcp_packets.ts: HEL, ACK,
//! OPN request/response and a GetEndpoints request, SecurityPolicy None). We decode them
//! and check the fields, re-encode ours where deterministic, and replay the client side
//! against our server connection.

mod common;

use common::{find_err, t0, TestHost};
use uaring_core::config::TransportLimits;
use uaring_core::encoding::{Decode, Decoder, Encode};
use uaring_core::generated::messages::Request;
use uaring_core::generated::node_ids;
use uaring_core::generated::types::{
    MessageSecurityMode, OpenSecureChannelRequest, OpenSecureChannelResponse,
    SecurityTokenRequestType,
};
use uaring_core::secure_channel::{
    open_chunk, parse_chunk_head, PlainCrypto, SecurityHeader, SECURITY_POLICY_NONE_URI,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::transport::{
    AcknowledgeMessage, FrameReader, HelloMessage, MessageHeader, MessageType,
};
use uaring_core::types::NodeId;
use uaring_core::DecodeLimits;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

const HEL: &str = "48 45 4c 46 4f 00 00 00 00 00 00 00 ff ff 00 00 ff ff 00 00 00 00 40 00 00 00 00 00 2f 00 00 00
    6f 70 63 2e 74 63 70 3a 2f 2f 74 61 74 74 61 74 61 3a 36 32 35 34 33 2f 41 41 41 41 41 2f 41 67
    67 72 65 67 61 74 69 6f 6e 53 65 72 76 65 72";
const ACK: &str =
    "41 43 4b 46 1c 00 00 00 00 00 00 00 ff ff 00 00 ff ff 00 00 00 00 40 00 00 00 00 00";
const OPN_REQ: &str = "4f 50 4e 46 84 00 00 00 00 00 00 00 2f 00 00 00 68 74 74 70 3a 2f 2f 6f 70 63 66 6f 75 6e 64 61
    74 69 6f 6e 2e 6f 72 67 2f 55 41 2f 53 65 63 75 72 69 74 79 50 6f 6c 69 63 79 23 4e 6f 6e 65 ff
    ff ff ff ff ff ff ff 01 00 00 00 02 00 00 00 01 00 be 01 00 00 43 b2 42 d9 d0 1d cf 01 00 00 00
    00 00 00 00 00 ff ff ff ff 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 00 00 00
    80 ee 36 00";
const OPN_RESP: &str = "4f 50 4e 46 87 00 00 00 0a 00 00 00 2f 00 00 00 68 74 74 70 3a 2f 2f 6f 70 63 66 6f 75 6e 64 61
    74 69 6f 6e 2e 6f 72 67 2f 55 41 2f 53 65 63 75 72 69 74 79 50 6f 6c 69 63 79 23 4e 6f 6e 65 ff
    ff ff ff ff ff ff ff 01 00 00 00 01 00 00 00 01 00 c1 01 4b 87 44 d9 d0 1d cf 01 01 00 00 00 00
    00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 0a 00 00 00 01 00 00 00 ed c3 43 d9 d0 1d cf 01 80
    ee 36 00 00 00 00 00";
const GET_ENDPOINTS: &str = "4d 53 47 46 74 00 00 00 0a 00 00 00 01 00 00 00 02 00 00 00 01 00 00 00 01 00 ac 01 00 00 b7 19
    40 d9 d0 1d cf 01 01 00 00 00 00 00 00 00 ff ff ff ff 00 00 00 00 00 00 00 2f 00 00 00 6f 70 63
    2e 74 63 70 3a 2f 2f 74 61 74 74 61 74 61 3a 36 32 35 34 33 2f 41 41 41 41 41 2f 41 67 67 72 65
    67 61 74 69 6f 6e 53 65 72 76 65 72 00 00 00 00 00 00 00 00";

fn header(b: &[u8]) -> MessageHeader {
    MessageHeader::parse(b[..8].try_into().unwrap()).unwrap()
}

#[test]
fn hello_fields_and_reencoding() {
    let b = hex(HEL);
    let h = header(&b);
    assert_eq!(h.message_type, MessageType::Hello);
    assert_eq!(h.message_size as usize, b.len());
    let hel = HelloMessage::decode_body(&b[8..]).unwrap();
    assert_eq!(hel.protocol_version, 0);
    assert_eq!(hel.receive_buffer_size, 65535);
    assert_eq!(hel.send_buffer_size, 65535);
    assert_eq!(hel.max_message_size, 4 * 1024 * 1024);
    assert_eq!(hel.max_chunk_count, 0);
    assert_eq!(
        hel.endpoint_url.as_str(),
        "opc.tcp://tattata:62543/AAAAA/AggregationServer"
    );
    let mut ours = Vec::new();
    hel.write(&mut ours);
    assert_eq!(ours, b);
}

#[test]
fn acknowledge_fields_and_reencoding() {
    let b = hex(ACK);
    assert_eq!(header(&b).message_type, MessageType::Acknowledge);
    let ack = AcknowledgeMessage::decode_body(&b[8..]).unwrap();
    assert_eq!(
        ack,
        AcknowledgeMessage {
            protocol_version: 0,
            receive_buffer_size: 65535,
            send_buffer_size: 65535,
            max_message_size: 4 * 1024 * 1024,
            max_chunk_count: 0
        }
    );
    let mut ours = Vec::new();
    ack.write(&mut ours);
    assert_eq!(ours, b);
}

#[test]
fn open_secure_channel_request_fields() {
    let b = hex(OPN_REQ);
    let h = header(&b);
    assert_eq!(h.message_size as usize, b.len());
    let head = parse_chunk_head(h, &b).unwrap();
    assert_eq!(head.secure_channel_id, 0);
    let SecurityHeader::Asymmetric(a) = &head.security else {
        panic!()
    };
    assert_eq!(a.security_policy_uri, SECURITY_POLICY_NONE_URI);
    assert_eq!(a.sender_certificate, None);
    assert_eq!(a.receiver_certificate_thumbprint, None);
    let mut scratch = Vec::new();
    let c = open_chunk(&b, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
    assert_eq!((c.sequence_number, c.request_id), (1, 2));
    let mut d = Decoder::new(c.body, DecodeLimits::default());
    let t = NodeId::decode(&mut d).unwrap();
    assert_eq!(
        t.as_ns0(),
        Some(node_ids::OpenSecureChannelRequest_Encoding_DefaultBinary)
    );
    let req = OpenSecureChannelRequest::decode(&mut d).unwrap();
    assert!(d.is_empty());
    assert_eq!(req.request_type, SecurityTokenRequestType::Issue);
    assert_eq!(req.security_mode, MessageSecurityMode::None);
    assert_eq!(req.requested_lifetime, 3_600_000);
    assert_eq!(req.client_nonce.as_bytes(), b"");
    // Our encoder writes the same bytes for the same request.
    let mut body = Vec::new();
    t.encode(&mut body);
    req.encode(&mut body);
    assert_eq!(body, c.body);
}

#[test]
fn open_secure_channel_response_fields() {
    let b = hex(OPN_RESP);
    let head = parse_chunk_head(header(&b), &b).unwrap();
    assert_eq!(head.secure_channel_id, 10);
    let mut scratch = Vec::new();
    let c = open_chunk(&b, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
    assert_eq!((c.sequence_number, c.request_id), (1, 1));
    let mut d = Decoder::new(c.body, DecodeLimits::default());
    assert_eq!(
        NodeId::decode(&mut d).unwrap().as_ns0(),
        Some(node_ids::OpenSecureChannelResponse_Encoding_DefaultBinary)
    );
    let resp = OpenSecureChannelResponse::decode(&mut d).unwrap();
    assert!(d.is_empty());
    assert_eq!(resp.security_token.channel_id, 10);
    assert_eq!(resp.security_token.token_id, 1);
    assert_eq!(resp.security_token.revised_lifetime, 3_600_000);
    assert!(resp.response_header.service_result.is_good());
    assert_eq!(resp.server_nonce.as_bytes(), b"");
}

#[test]
fn get_endpoints_request_fields() {
    let b = hex(GET_ENDPOINTS);
    let head = parse_chunk_head(header(&b), &b).unwrap();
    assert_eq!(head.secure_channel_id, 10);
    assert_eq!(head.security, SecurityHeader::Symmetric { token_id: 1 });
    let mut scratch = Vec::new();
    let c = open_chunk(&b, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
    assert_eq!((c.sequence_number, c.request_id), (2, 1));
    let mut d = Decoder::new(c.body, DecodeLimits::default());
    let t = NodeId::decode(&mut d).unwrap();
    let Some(Request::GetEndpoints(r)) = Request::decode_body(&t, &mut d).unwrap() else {
        panic!()
    };
    assert_eq!(
        r.endpoint_url.as_str(),
        "opc.tcp://tattata:62543/AAAAA/AggregationServer"
    );
    assert_eq!(r.request_header.request_handle, 1);
}

/// The captured client bytes, fed to our server in one piece and byte by byte, get an
/// ACK equal to the captured one (same limits), an OPN response for channel 10 and a
/// GetEndpoints response.
#[test]
fn captured_client_replays_against_our_server() {
    for bytewise in [false, true] {
        let limits = TransportLimits {
            receive_buffer_size: 65535,
            send_buffer_size: 65535,
            max_message_size: 4 * 1024 * 1024,
            ..Default::default()
        };
        let mut host = TestHost::with_limits(limits);
        host.next_channel_id = 10;
        let mut conn = ServerConnection::new(&mut host, None, t0());
        let mut input = hex(HEL);
        input.extend(hex(OPN_REQ));
        input.extend(hex(GET_ENDPOINTS));
        let mut out = Vec::new();
        if bytewise {
            for b in &input {
                assert_eq!(
                    conn.on_recv(&mut host, t0(), std::slice::from_ref(b), &mut out),
                    ConnStatus::Open
                );
            }
        } else {
            assert_eq!(
                conn.on_recv(&mut host, t0(), &input, &mut out),
                ConnStatus::Open
            );
        }
        assert_eq!(find_err(&out), None);
        let mut r = FrameReader::new();
        let mut rest = &out[..];
        let ack = r.next(&mut rest, 65535).unwrap().unwrap().bytes.to_vec();
        // Same fields as the captured ACK except MaxChunkCount (we never announce 0).
        assert_eq!(ack[..24], hex(ACK)[..24]);
        let opn = r.next(&mut rest, 65535).unwrap().unwrap().bytes.to_vec();
        let head = parse_chunk_head(header(&opn), &opn).unwrap();
        assert_eq!(head.secure_channel_id, 10);
        let mut scratch = Vec::new();
        let c = open_chunk(&opn, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
        assert_eq!(c.request_id, 2);
        let msg = r.next(&mut rest, 65535).unwrap().unwrap().bytes.to_vec();
        assert_eq!(&msg[..3], b"MSG");
        assert!(r.next(&mut rest, 65535).unwrap().is_none());
        assert_eq!(host.dispatched, 1);
    }
}
