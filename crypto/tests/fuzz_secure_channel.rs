//! The `secure_channel` fuzz target's driver (support/secure_channel.rs) in tests: its
//! seeds reach the services under None, Sign and SignAndEncrypt; the checked-in seed corpus
//! and every input the target crashed on (fuzz/regressions/secure_channel/) replay; a
//! tampered chunk, bad padding behind a valid signature and a repeated sequence number each
//! close the channel with the right ERR. `write_seed_corpus` (ignored) writes
//! fuzz/corpus/secure_channel/: `cargo test -p uaring-crypto --test fuzz_secure_channel -- --ignored`.

#[path = "../../core/tests/support/replay.rs"]
mod replay;
#[path = "support/secure_channel.rs"]
mod secure_channel;

use std::path::{Path, PathBuf};

use secure_channel::{
    flags, record, run_secure_channel, Run, OP_CHUNK, OP_CLOSE, OP_MESSAGE, OP_RAW, OP_RENEW,
    OP_WAIT,
};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::transport::ErrorMessage;
use uaring_core::types::{DataValue, NodeId, QualifiedName, StatusCode, Variant};

use replay::start;

const MODES: [MessageSecurityMode; 3] = [
    MessageSecurityMode::None,
    MessageSecurityMode::Sign,
    MessageSecurityMode::SignAndEncrypt,
];

fn mode_name(m: MessageSecurityMode) -> &'static str {
    match m {
        MessageSecurityMode::Sign => "sign",
        MessageSecurityMode::SignAndEncrypt => "encrypt",
        _ => "none",
    }
}

/// One seed input built while it runs: each record is applied to a live run, so the
/// seed can use what the server answered (subscription ids, continuation points).
struct Seed {
    name: String,
    bytes: Vec<u8>,
    run: Run,
    handle: u32,
}

impl Seed {
    fn new(name: &str, mode: MessageSecurityMode, session: bool) -> Seed {
        let f = flags(mode, session);
        Seed {
            name: format!("{name}-{}", mode_name(mode)),
            bytes: vec![f],
            run: Run::new(f),
            handle: 10,
        }
    }

    fn op(&mut self, op: u8, data: &[u8]) -> Vec<Response> {
        self.bytes.extend_from_slice(&record(op, data));
        self.run.step(op, data);
        self.run.take_responses()
    }

    /// A request with the session's token, chunked as `size_op` (bits 3–4 of the op) says.
    fn send(&mut self, mut req: Request, size_op: u8) -> Vec<Response> {
        self.handle += 1;
        let h = req.request_header_mut();
        h.authentication_token = self.run.authentication_token().clone();
        h.request_handle = self.handle;
        h.timestamp = start().utc;
        h.timeout_hint = 10_000;
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        self.op(OP_MESSAGE | size_op << 3, &body)
    }

    /// A request that must be answered at once and well.
    fn call(&mut self, req: Request) -> Response {
        let name = req.name();
        let mut r = self.send(req, 0);
        assert_eq!(
            r.len(),
            1,
            "{}: {name} answered {} times",
            self.name,
            r.len()
        );
        let r = r.remove(0);
        assert!(good(&r), "{}: {name} failed: {r:?}", self.name);
        r
    }

    fn wait(&mut self, ms: u32) -> Vec<Response> {
        self.op(OP_WAIT, &ms.to_le_bytes())
    }

    fn close_session(&mut self) {
        self.call(Request::CloseSession(Box::new(CloseSessionRequest {
            delete_subscriptions: true,
            ..Default::default()
        })));
    }

    /// CloseSecureChannel: the server closes without an answer.
    fn close(mut self) -> (String, Vec<u8>) {
        let mut body = Vec::new();
        Request::CloseSecureChannel(Box::default()).encode_with_type_id(&mut body);
        self.op(OP_CLOSE, &body);
        assert!(
            self.run.is_closed() && self.run.error().is_none(),
            "{}: CLO",
            self.name
        );
        (self.name, self.bytes)
    }
}

fn good(r: &Response) -> bool {
    !matches!(r, Response::ServiceFault(_)) && r.response_header().service_result.is_good()
}

fn rv(node: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id,
        ..Default::default()
    }
}

fn read(nodes: Vec<ReadValueId>) -> Request {
    Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes,
        timestamps_to_return: TimestampsToReturn::Both,
        ..Default::default()
    }))
}

/// The seed inputs, each run through the driver as it is built (so each request's answer
/// is checked: every one is Good).
fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut all = Vec::new();
    for mode in MODES {
        // Attribute service set.
        let mut s = Seed::new("attribute", mode, true);
        let mut nodes: Vec<ReadValueId> = (1..=22).map(|a| rv(NodeId::ns0(2253), a)).collect();
        nodes.push(rv(NodeId::ns0(2258), 13));
        nodes.push(rv(NodeId::numeric(1, 1001), 13));
        nodes.push(ReadValueId {
            index_range: "1:3".into(),
            ..rv(NodeId::ns0(2255), 13)
        });
        s.call(read(nodes));
        s.call(Request::Write(Box::new(WriteRequest {
            nodes_to_write: vec![WriteValue {
                node_id: NodeId::numeric(1, 1001),
                attribute_id: 13,
                value: DataValue {
                    value: Variant::Int32(5),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        })));
        s.close_session();
        all.push(s.close());

        // View service set: Browse with a continuation point, BrowseNext, paths, Call.
        let mut s = Seed::new("view", mode, true);
        let r = s.call(Request::Browse(Box::new(BrowseRequest {
            requested_max_references_per_node: 2,
            nodes_to_browse: vec![BrowseDescription {
                node_id: NodeId::ns0(85),
                browse_direction: BrowseDirection::Both,
                include_subtypes: true,
                result_mask: 63,
                ..Default::default()
            }],
            ..Default::default()
        })));
        let Response::Browse(b) = r else {
            unreachable!()
        };
        let cps: Vec<_> = b
            .results
            .iter()
            .map(|r| r.continuation_point.clone())
            .filter(|c| !c.is_null())
            .collect();
        assert!(
            !cps.is_empty(),
            "Browse with 2 references per node gives a continuation point"
        );
        s.call(Request::BrowseNext(Box::new(BrowseNextRequest {
            continuation_points: cps,
            ..Default::default()
        })));
        s.call(Request::TranslateBrowsePathsToNodeIds(Box::new(
            TranslateBrowsePathsToNodeIdsRequest {
                browse_paths: vec![BrowsePath {
                    starting_node: NodeId::ns0(84),
                    relative_path: RelativePath {
                        elements: vec![RelativePathElement {
                            reference_type_id: NodeId::ns0(33),
                            include_subtypes: true,
                            target_name: QualifiedName::new(0, "Objects"),
                            ..Default::default()
                        }],
                    },
                }],
                ..Default::default()
            },
        )));
        s.call(Request::RegisterNodes(Box::new(RegisterNodesRequest {
            nodes_to_register: vec![NodeId::ns0(2258)],
            ..Default::default()
        })));
        s.call(Request::Call(Box::new(CallRequest {
            methods_to_call: vec![CallMethodRequest {
                object_id: NodeId::ns0(2253),
                method_id: NodeId::ns0(11492),
                input_arguments: vec![Variant::UInt32(1)],
            }],
            ..Default::default()
        })));
        s.close_session();
        all.push(s.close());

        // Subscriptions: data changes reach a Publish after time passes.
        let mut s = Seed::new("subscription", mode, true);
        let r = s.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 60,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            },
        )));
        let Response::CreateSubscription(cs) = r else {
            unreachable!()
        };
        let sid = cs.subscription_id;
        s.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                subscription_id: sid,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![MonitoredItemCreateRequest {
                    item_to_monitor: rv(NodeId::ns0(2258), 13),
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: 1,
                        sampling_interval: 50.0,
                        queue_size: 2,
                        ..Default::default()
                    },
                }],
                ..Default::default()
            },
        )));
        for _ in 0..2 {
            let r = s.send(Request::Publish(Box::default()), 0);
            assert!(
                r.is_empty(),
                "{}: a Publish is answered on a publishing cycle",
                s.name
            );
        }
        let r = s.wait(150);
        let Some(Response::Publish(p)) = r.first() else {
            panic!("{}: no Publish response after 150 ms: {r:?}", s.name)
        };
        assert!(good(&r[0]) && p.subscription_id == sid);
        let ack = SubscriptionAcknowledgement {
            subscription_id: sid,
            sequence_number: p.notification_message.sequence_number,
        };
        let r = s.send(
            Request::Publish(Box::new(PublishRequest {
                subscription_acknowledgements: vec![ack],
                ..Default::default()
            })),
            0,
        );
        assert!(r.iter().all(good), "{}: {r:?}", s.name);
        s.call(Request::SetPublishingMode(Box::new(
            SetPublishingModeRequest {
                publishing_enabled: false,
                subscription_ids: vec![sid],
                ..Default::default()
            },
        )));
        // The queued Publish requests are answered with it: BadNoSubscription.
        let r = s.send(
            Request::DeleteSubscriptions(Box::new(DeleteSubscriptionsRequest {
                subscription_ids: vec![sid],
                ..Default::default()
            })),
            0,
        );
        assert!(
            r.iter()
                .any(|r| matches!(r, Response::DeleteSubscriptions(_)) && good(r)),
            "{}: {r:?}",
            s.name
        );
        let no_subscription =
            |r: &Response| r.response_header().service_result == StatusCode::BadNoSubscription;
        assert!(
            r.iter().all(|r| good(r) || no_subscription(r)),
            "{}: {r:?}",
            s.name
        );
        s.close_session();
        all.push(s.close());

        // Small chunks: a Read in 64-byte chunks and one in 512-byte chunks.
        let mut s = Seed::new("chunked", mode, true);
        let r = s.send(
            read(
                (0..4)
                    .map(|i| rv(NodeId::numeric(1, 1001 + i), 13))
                    .collect(),
            ),
            3,
        );
        assert!(r.len() == 1 && good(&r[0]), "{}: {r:?}", s.name);
        let r = s.send(
            read(
                (0..100)
                    .map(|i| rv(NodeId::numeric(1, 1001 + i % 50), 13))
                    .collect(),
            ),
            2,
        );
        assert!(r.len() == 1 && good(&r[0]), "{}: {r:?}", s.name);
        all.push(s.close());

        // Token renewal: the old token until the new one is used, then the new one.
        let mut s = Seed::new("renew", mode, true);
        s.call(read(vec![rv(NodeId::ns0(2258), 13)]));
        s.op(OP_RENEW, &[]);
        s.call(read(vec![rv(NodeId::ns0(2258), 13)]));
        s.op(OP_RENEW, &[]);
        s.call(read(vec![rv(NodeId::ns0(2256), 13)]));
        all.push(s.close());

        // Chunks written by the input: a message as an intermediate and a final chunk, then
        // an aborted message.
        let mut s = Seed::new("chunks", mode, true);
        let mut req = read(vec![rv(NodeId::ns0(2258), 13)]);
        req.request_header_mut().authentication_token = s.run.authentication_token().clone();
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        let (first, second) = body.split_at(body.len() / 2);
        let id = 0x1000;
        let seq = s.run.next_sequence_number();
        s.op(OP_CHUNK, &chunk_plain(mode, b'C', seq, id, first));
        let r = s.op(OP_CHUNK, &chunk_plain(mode, b'F', seq + 1, id, second));
        assert!(r.len() == 1 && good(&r[0]), "{}: {r:?}", s.name);
        let mut abort = Vec::new();
        ErrorMessage::new(StatusCode::BadRequestCancelledByClient, "cancelled")
            .encode_body(&mut abort);
        s.op(OP_CHUNK, &chunk_plain(mode, b'C', seq + 2, id + 1, first));
        let r = s.op(OP_CHUNK, &chunk_plain(mode, b'A', seq + 3, id + 1, &abort));
        assert!(
            r.is_empty() && !s.run.is_closed(),
            "{}: an aborted message is dropped: {r:?}",
            s.name
        );
        s.call(read(vec![rv(NodeId::ns0(2258), 13)]));
        all.push(s.close());

        // Without a session made by the driver: discovery, then the input's own session.
        let mut s = Seed::new("discovery", mode, false);
        s.call(Request::GetEndpoints(Box::new(GetEndpointsRequest {
            endpoint_url: secure_channel::URL.into(),
            ..Default::default()
        })));
        s.call(Request::FindServers(Box::new(FindServersRequest {
            endpoint_url: secure_channel::URL.into(),
            ..Default::default()
        })));
        all.push(s.close());
    }
    // Raw bytes: a MSG chunk with an unknown token, and a bad signature.
    let mut s = Seed::new("raw", MessageSecurityMode::SignAndEncrypt, true);
    let mut raw = b"MSGF".to_vec();
    raw.extend_from_slice(&96u32.to_le_bytes());
    raw.extend_from_slice(&[1, 0, 0, 0, 1, 0, 0, 0]);
    raw.resize(96, 0x5a);
    s.op(OP_RAW, &raw);
    assert!(s.run.is_closed());
    all.push((s.name, s.bytes));
    all
}

/// The plaintext of a chunk after its security header: sequence header, body and, when
/// encrypting, the padding (Part 6 §6.7.2.5) for a 32-byte signature and 16-byte blocks.
fn chunk_plain(
    mode: MessageSecurityMode,
    chunk_type: u8,
    seq: u32,
    request_id: u32,
    body: &[u8],
) -> Vec<u8> {
    let mut v = vec![0, chunk_type];
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&request_id.to_le_bytes());
    v.extend_from_slice(body);
    if mode == MessageSecurityMode::SignAndEncrypt {
        let used = 8 + body.len() + 1 + 32;
        let padding = (16 - used % 16) % 16;
        v.extend(std::iter::repeat_n(padding as u8, padding + 1));
    }
    v
}

fn dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz")
        .join(kind)
        .join("secure_channel")
}

#[test]
fn seeds_reach_the_services_in_every_mode() {
    let all = seeds();
    assert_eq!(all.len(), MODES.len() * 7 + 1);
    // And each seed, replayed from its bytes, runs through the target unchanged.
    for (_, bytes) in &all {
        run_secure_channel(bytes);
    }
}

#[test]
fn checked_in_seeds_replay() {
    let mut n = 0;
    for e in std::fs::read_dir(dir("corpus")).expect("fuzz/corpus/secure_channel") {
        run_secure_channel(&std::fs::read(e.unwrap().path()).unwrap());
        n += 1;
    }
    assert!(n > 0);
}

/// The sealed bytes of a Read the run's next `message` record would send.
fn sealed_read(run: &mut Run) -> Vec<u8> {
    let mut req = read(vec![rv(NodeId::ns0(2258), 13)]);
    req.request_header_mut().authentication_token = run.authentication_token().clone();
    let mut body = Vec::new();
    req.encode_with_type_id(&mut body);
    run.seal(&body)
}

#[test]
fn a_changed_byte_fails_the_security_checks() {
    for mode in [
        MessageSecurityMode::Sign,
        MessageSecurityMode::SignAndEncrypt,
    ] {
        // Any byte after the security header: the signature (or the decryption) fails.
        let len = sealed_read(&mut Run::new(flags(mode, true))).len();
        for at in [16, 20, 30, len / 2, len - 17, len - 1] {
            let mut run = Run::new(flags(mode, true));
            let mut bytes = sealed_read(&mut run);
            bytes[at] ^= 0x40;
            run.step(OP_RAW, &bytes);
            assert!(run.is_closed(), "{mode:?}, byte {at}");
            assert_eq!(
                run.error(),
                Some(StatusCode::BadSecurityChecksFailed),
                "{mode:?}, byte {at}"
            );
        }
        // Unchanged, it is answered.
        let mut run = Run::new(flags(mode, true));
        let bytes = sealed_read(&mut run);
        run.step(OP_RAW, &bytes);
        let r = run.take_responses();
        assert!(
            r.len() == 1 && good(&r[0]) && !run.is_closed(),
            "{mode:?}: {r:?}"
        );
    }
}

#[test]
fn bad_padding_behind_a_valid_signature_fails_the_security_checks() {
    let mode = MessageSecurityMode::SignAndEncrypt;
    let mut run = Run::new(flags(mode, true));
    let seq = run.next_sequence_number();
    let mut plain = chunk_plain(mode, b'F', seq, 7, &[1, 2, 3]);
    // The padding bytes must all equal the PaddingSize byte.
    let n = plain.len();
    plain[n - 2] ^= 1;
    run.step(OP_CHUNK, &plain);
    assert_eq!(run.error(), Some(StatusCode::BadSecurityChecksFailed));
    // A PaddingSize larger than the chunk.
    let mut run = Run::new(flags(mode, true));
    let seq = run.next_sequence_number();
    let mut plain = chunk_plain(mode, b'F', seq, 7, &[1, 2, 3]);
    let n = plain.len();
    plain[n - 1] = 200;
    run.step(OP_CHUNK, &plain);
    assert_eq!(run.error(), Some(StatusCode::BadSecurityChecksFailed));
}

#[test]
fn a_repeated_sequence_number_is_refused() {
    for mode in MODES {
        let mut run = Run::new(flags(mode, true));
        let seq = run.next_sequence_number();
        let mut req = read(vec![rv(NodeId::ns0(2258), 13)]);
        req.request_header_mut().authentication_token = run.authentication_token().clone();
        let mut body = Vec::new();
        req.encode_with_type_id(&mut body);
        run.step(OP_CHUNK, &chunk_plain(mode, b'F', seq, 7, &body));
        assert_eq!(run.take_responses().len(), 1, "{mode:?}");
        run.step(OP_CHUNK, &chunk_plain(mode, b'F', seq, 8, &body));
        assert_eq!(
            run.error(),
            Some(StatusCode::BadSequenceNumberInvalid),
            "{mode:?}"
        );
    }
}

/// Found by the target (a false alarm of the driver, which kept the keys of the newest two
/// tokens only): after two renewals with no message between them, the server still sends
/// with the token the client last used — Part 6 §6.7.4, the old token stays in use until the
/// client uses a new one — and the driver had dropped its keys.
#[test]
fn the_old_token_stays_until_the_client_uses_a_new_one() {
    for mode in [
        MessageSecurityMode::Sign,
        MessageSecurityMode::SignAndEncrypt,
    ] {
        let mut s = Seed::new("tokens", mode, true);
        let r = s.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 60,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            },
        )));
        assert!(matches!(r, Response::CreateSubscription(_)));
        assert!(s.send(Request::Publish(Box::default()), 0).is_empty());
        assert_eq!(s.run.last_server_token(), 1);
        s.op(OP_RENEW, &[]);
        s.op(OP_RENEW, &[]);
        assert_eq!(s.run.send_token(), 3, "{mode:?}");
        // The Publish is answered (a keep-alive) before the client used token 2 or 3.
        let r = s.wait(1_100);
        assert!(
            matches!(r.first(), Some(Response::Publish(_))),
            "{mode:?}: {r:?}"
        );
        assert_eq!(s.run.last_server_token(), 1, "{mode:?}");
        // The client's first message with token 3 moves the server to it.
        s.call(read(vec![rv(NodeId::ns0(2258), 13)]));
        assert_eq!(s.run.last_server_token(), 3, "{mode:?}");
    }
}

#[test]
fn regressions_replay() {
    let mut n = 0;
    for e in std::fs::read_dir(dir("regressions")).expect("fuzz/regressions/secure_channel") {
        let p = e.unwrap().path();
        eprintln!("replaying {}", p.display());
        run_secure_channel(&std::fs::read(&p).unwrap());
        n += 1;
    }
    assert!(n > 0);
}

#[test]
#[ignore]
fn write_seed_corpus() {
    let d = dir("corpus");
    std::fs::create_dir_all(&d).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(d.join(format!("gen-{name}.bin")), bytes).unwrap();
    }
}
