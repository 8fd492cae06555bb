//! Single-value Read: encode/decode of ReadRequest and ReadResponse, the receive path
//! from chunk bytes to a decoded Request, the whole server path (request chunk in →
//! dispatch → response chunk out) and the client's send_request.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ReadRequest, ReadResponse, ReadValueId, RequestHeader, ResponseHeader, TimestampsToReturn,
};
use uaring_core::secure_channel::{
    open_chunk, parse_chunk_head, write_chunks, Assembly, ChunkLimits, MessageAssembler,
    PlainCrypto, SecurityHeader, SecurityProvider, SequenceCounter, SECURITY_POLICY_NONE_URI,
};
use uaring_core::server::connection::ServerConnection;
use uaring_core::server::context::{ConnectionHost, RequestContext};
use uaring_core::transport::{FrameReader, HelloMessage, MessageType};
use uaring_core::types::{DataValue, DateTime, NodeId, StatusCode, Variant};
use uaring_core::{Decode, DecodeLimits, Decoder, Now};

fn read_request() -> Request {
    Request::Read(Box::new(ReadRequest {
        request_header: RequestHeader {
            authentication_token: NodeId::byte_string(0, vec![9u8; 32]),
            timestamp: DateTime(133_000_000_000_000_000),
            request_handle: 17,
            timeout_hint: 10_000,
            ..Default::default()
        },
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: vec![ReadValueId {
            node_id: NodeId::numeric(1, 1001),
            attribute_id: 13,
            ..Default::default()
        }],
    }))
}

fn read_response() -> Response {
    Response::Read(Box::new(ReadResponse {
        response_header: ResponseHeader {
            timestamp: DateTime(133_000_000_000_000_000),
            request_handle: 17,
            ..Default::default()
        },
        results: vec![DataValue {
            value: Variant::Int32(5),
            source_timestamp: Some(DateTime(133_000_000_000_000_000)),
            server_timestamp: Some(DateTime(133_000_000_000_000_000)),
            ..Default::default()
        }],
        diagnostic_infos: vec![],
    }))
}

struct BenchHost {
    limits: TransportLimits,
    security: SecurityProvider,
    response: Response,
    random: uaring_core::random::ChaCha,
}

impl ConnectionHost for BenchHost {
    fn transport_limits(&self) -> &TransportLimits {
        &self.limits
    }
    fn random(&mut self) -> &mut dyn uaring_core::random::Random {
        &mut self.random
    }
    fn security(&self) -> &SecurityProvider {
        &self.security
    }
    fn open_channel(&mut self) -> Result<u32, StatusCode> {
        Ok(1)
    }
    fn channel_closed(&mut self, _: u32) {}
    fn dispatch(&mut self, _: &RequestContext<'_>, _: Request, _: Now) -> Response {
        self.response.clone()
    }
}

fn chunk(body: &[u8], seq: &mut SequenceCounter, out: &mut Vec<u8>) {
    let l = ChunkLimits {
        max_chunk_size: 65536,
        max_message_size: 0,
        max_chunk_count: 0,
    };
    write_chunks(
        MessageType::Message,
        1,
        &SecurityHeader::Symmetric { token_id: 1 },
        5,
        body,
        &PlainCrypto,
        seq,
        &l,
        out,
    )
    .unwrap();
}

fn benches(c: &mut Criterion) {
    let req = read_request();
    let resp = read_response();
    let mut req_bytes = Vec::new();
    req.encode_with_type_id(&mut req_bytes);
    let mut resp_bytes = Vec::new();
    resp.encode_with_type_id(&mut resp_bytes);
    let limits = DecodeLimits::default();

    let mut buf = Vec::with_capacity(256);
    c.bench_function("ReadRequest encode (1 node)", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&req).encode_with_type_id(&mut buf);
            black_box(buf.len())
        })
    });
    c.bench_function("ReadRequest decode (1 node)", |b| {
        b.iter(|| {
            let mut d = Decoder::new(black_box(&req_bytes), limits);
            let t = NodeId::decode(&mut d).unwrap();
            black_box(Request::decode_body(&t, &mut d).unwrap())
        })
    });
    c.bench_function("ReadResponse encode (1 value)", |b| {
        b.iter(|| {
            buf.clear();
            black_box(&resp).encode_with_type_id(&mut buf);
            black_box(buf.len())
        })
    });
    c.bench_function("ReadResponse decode (1 value)", |b| {
        b.iter(|| {
            let mut d = Decoder::new(black_box(&resp_bytes), limits);
            let t = NodeId::decode(&mut d).unwrap();
            black_box(Response::decode_body(&t, &mut d).unwrap())
        })
    });

    // Chunk bytes in → decoded Request (frame, headers, sequence, assembly, decode).
    let mut seq = SequenceCounter::new(true);
    let mut stream = Vec::new();
    chunk(&req_bytes, &mut seq, &mut stream);
    let mut reader = FrameReader::new();
    let mut asm = MessageAssembler::new();
    let mut scratch = Vec::new();
    c.bench_function("chunk bytes -> Request (1-node Read)", |b| {
        b.iter(|| {
            let mut input = black_box(&stream[..]);
            let f = reader.next(&mut input, 65536).unwrap().unwrap();
            let head = parse_chunk_head(f.header, f.bytes).unwrap();
            let oc = open_chunk(f.bytes, head.sequence_offset, &PlainCrypto, &mut scratch).unwrap();
            let Assembly::Complete { body, .. } = asm
                .push(
                    MessageType::Message,
                    f.header.chunk_type,
                    oc.request_id,
                    oc.body,
                    1 << 20,
                    16,
                    StatusCode::BadRequestTooLarge,
                    0,
                )
                .unwrap()
            else {
                unreachable!()
            };
            let mut d = Decoder::new(body, limits);
            let t = NodeId::decode(&mut d).unwrap();
            black_box(Request::decode_body(&t, &mut d).unwrap())
        })
    });

    // The whole server connection path with a dispatcher that returns a canned response.
    let now = Now::new(1, DateTime(133_000_000_000_000_000));
    let mut host = BenchHost {
        limits: TransportLimits::default(),
        security: SecurityProvider::none_only(),
        response: resp.clone(),
        random: uaring_core::random::ChaCha::from_u64(1),
    };
    let mut conn = ServerConnection::new(&mut host, None, now);
    let mut out = Vec::new();
    let mut hel = Vec::new();
    HelloMessage {
        protocol_version: 0,
        receive_buffer_size: 65536,
        send_buffer_size: 65536,
        max_message_size: 0,
        max_chunk_count: 0,
        endpoint_url: "opc.tcp://x".into(),
    }
    .write(&mut hel);
    let _ = conn.on_recv(&mut host, now, &hel, &mut out);
    let mut client = ClientConnection::new(
        ClientConfig::new("opc.tcp://x"),
        Box::new(uaring_core::random::ChaCha::from_u64(2)),
    );
    let mut c2s = Vec::new();
    client.start(now, &mut c2s);
    // Open the channel by relaying bytes between the two.
    let mut s2c = out.clone();
    out.clear();
    c2s.clear();
    client.on_recv(now, &s2c, &mut c2s).unwrap();
    s2c.clear();
    let _ = conn.on_recv(&mut host, now, &c2s, &mut s2c);
    c2s.clear();
    client.on_recv(now, &s2c, &mut c2s).unwrap();
    assert!(client.is_open() && conn.is_open());
    let _ = SECURITY_POLICY_NONE_URI;
    c.bench_function("server: Read chunk in -> response chunk out", |b| {
        b.iter_batched_ref(
            || {
                let mut v = Vec::new();
                client.send_request(read_request(), now, &mut v).unwrap();
                v
            },
            |input| {
                out.clear();
                let st = conn.on_recv(&mut host, now, input, &mut out);
                black_box((st, out.len()))
            },
            criterion::BatchSize::SmallInput,
        )
    });
    let mut cout = Vec::with_capacity(1024);
    c.bench_function("client: send_request (1-node Read)", |b| {
        b.iter_batched(
            read_request,
            |r| {
                cout.clear();
                black_box(client.send_request(r, now, &mut cout).unwrap())
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("client: send_encoded (1-node Read)", |b| {
        b.iter(|| {
            cout.clear();
            black_box(client.send_encoded(&req_bytes, &mut cout).unwrap())
        })
    });
}

criterion_group! {
    name = read_codec;
    config = Criterion::default().warm_up_time(std::time::Duration::from_millis(500)).measurement_time(std::time::Duration::from_secs(2));
    targets = benches
}
criterion_main!(read_codec);
