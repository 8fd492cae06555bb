#![allow(dead_code)]
//! Seed inputs made in process: core's ClientConnection runs whole conversations against
//! the same deterministic shard the `server` target uses (same seed, same start time), so
//! the session tokens in the recorded bytes are the ones the target's server hands out and
//! a replay reaches every service. `cargo test -p uaring-core --test fuzz_corpus -- --ignored`
//! writes them (docs/Fuzzing.md). The recordings of real clients (asyncua, node-opcua) come from
//! scripts/record-corpus.sh.

use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::random::ChaCha;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::{ExtensionObject, NodeId, QualifiedName, UaString, Variant};

use crate::replay::{shard, start};

/// One recorded conversation: the bytes the client sent, and the request bodies
/// (encoding id, body without the id) for the `requests` target.
pub struct Recording {
    pub name: String,
    pub c2s: Vec<u8>,
    pub requests: Vec<(u32, Vec<u8>)>,
}

struct Conversation {
    state: uaring_core::server::service_state::ServiceState,
    server: ServerConnection,
    client: ClientConnection,
    rec: Recording,
}

impl Conversation {
    fn new(name: &str, cfg: ClientConfig) -> Conversation {
        let mut shard = shard();
        let server = ServerConnection::new(&mut shard, None, start());
        let client = ClientConnection::new(cfg, Box::new(ChaCha::from_u64(2)));
        let rec = Recording {
            name: name.to_string(),
            c2s: Vec::new(),
            requests: Vec::new(),
        };
        let mut c = Conversation {
            state: shard,
            server,
            client,
            rec,
        };
        let mut out = Vec::new();
        c.client.start(start(), &mut out);
        c.pump(out);
        c
    }

    fn pump(&mut self, mut c2s: Vec<u8>) {
        for _ in 0..100 {
            if c2s.is_empty() {
                return;
            }
            self.rec.c2s.extend_from_slice(&c2s);
            let mut s2c = Vec::new();
            let st = self
                .server
                .on_recv(&mut self.state, start(), &c2s, &mut s2c);
            c2s.clear();
            if !s2c.is_empty() {
                let _ = self.client.on_recv(start(), &s2c, &mut c2s);
            }
            if st == ConnStatus::Close {
                return;
            }
        }
    }

    fn call(&mut self, req: Request) -> Option<Response> {
        let mut body = Vec::new();
        req.encode_body(&mut body);
        self.rec.requests.push((req.binary_encoding_id(), body));
        let mut out = Vec::new();
        self.client.send_request(req, start(), &mut out).ok()?;
        self.pump(out);
        self.client.poll_response().map(|(_, r)| r)
    }

    fn session(&mut self) {
        let r = self.call(Request::CreateSession(Box::new(CreateSessionRequest {
            client_description: ApplicationDescription {
                application_uri: "urn:uaring:fuzz".into(),
                application_type: ApplicationType::Client,
                ..Default::default()
            },
            endpoint_url: URL.into(),
            session_name: "fuzz".into(),
            requested_session_timeout: 60_000.0,
            ..Default::default()
        })));
        let Some(Response::CreateSession(cs)) = r else {
            panic!("CreateSession: {r:?}")
        };
        self.client
            .set_authentication_token(cs.authentication_token.clone());
        let policy_id = cs
            .server_endpoints
            .iter()
            .flat_map(|e| e.user_identity_tokens.iter())
            .find(|p| p.token_type == UserTokenType::Anonymous)
            .map(|p| p.policy_id.clone())
            .unwrap_or_default();
        let r = self.call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id,
            }),
            locale_ids: vec!["en".into()],
            ..Default::default()
        })));
        assert!(
            matches!(r, Some(Response::ActivateSession(_))),
            "ActivateSession: {r:?}"
        );
    }

    fn close(mut self) -> Recording {
        let mut out = Vec::new();
        self.client.close(start(), &mut out);
        self.pump(out);
        self.rec
    }
}

const URL: &str = "opc.tcp://localhost:4840/uaring";

fn rv(node: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id,
        ..Default::default()
    }
}

/// The conversations: channel only, discovery, and one per service set after a session.
pub fn recordings() -> Vec<Recording> {
    let mut all = Vec::new();

    let c = Conversation::new("channel", ClientConfig::new(URL));
    all.push(c.close());

    let mut c = Conversation::new("discovery", ClientConfig::new(URL));
    c.call(Request::GetEndpoints(Box::new(GetEndpointsRequest {
        endpoint_url: URL.into(),
        ..Default::default()
    })));
    c.call(Request::FindServers(Box::new(FindServersRequest {
        endpoint_url: URL.into(),
        ..Default::default()
    })));
    all.push(c.close());

    let mut c = Conversation::new("attribute", ClientConfig::new(URL));
    c.session();
    let mut nodes: Vec<ReadValueId> = (1..=22).map(|a| rv(NodeId::ns0(2253), a)).collect();
    nodes.push(rv(NodeId::ns0(2258), 13));
    nodes.push(rv(NodeId::numeric(1, 1001), 13));
    nodes.push(ReadValueId {
        index_range: "1:3".into(),
        ..rv(NodeId::ns0(2255), 13)
    });
    c.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes,
        timestamps_to_return: TimestampsToReturn::Both,
        ..Default::default()
    })));
    c.call(Request::Write(Box::new(WriteRequest {
        nodes_to_write: vec![WriteValue {
            node_id: NodeId::numeric(1, 1001),
            attribute_id: 13,
            value: uaring_core::DataValue {
                value: Variant::Int32(5),
                ..Default::default()
            },
            ..Default::default()
        }],
        ..Default::default()
    })));
    all.push(c.close());

    let mut c = Conversation::new("view", ClientConfig::new(URL));
    c.session();
    let r = c.call(Request::Browse(Box::new(BrowseRequest {
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
    if let Some(Response::Browse(b)) = r {
        let cps = b
            .results
            .iter()
            .map(|r| r.continuation_point.clone())
            .filter(|c| !c.is_null())
            .collect();
        c.call(Request::BrowseNext(Box::new(BrowseNextRequest {
            continuation_points: cps,
            ..Default::default()
        })));
    }
    c.call(Request::TranslateBrowsePathsToNodeIds(Box::new(
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
    c.call(Request::RegisterNodes(Box::new(RegisterNodesRequest {
        nodes_to_register: vec![NodeId::ns0(2258)],
        ..Default::default()
    })));
    c.call(Request::Call(Box::new(CallRequest {
        methods_to_call: vec![CallMethodRequest {
            object_id: NodeId::ns0(2253),
            method_id: NodeId::ns0(11492),
            input_arguments: vec![Variant::UInt32(1)],
        }],
        ..Default::default()
    })));
    all.push(c.close());

    let mut c = Conversation::new("subscription", ClientConfig::new(URL));
    c.session();
    let r = c.call(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            requested_publishing_interval: 100.0,
            requested_lifetime_count: 60,
            requested_max_keep_alive_count: 10,
            publishing_enabled: true,
            ..Default::default()
        },
    )));
    let sid = match r {
        Some(Response::CreateSubscription(s)) => s.subscription_id,
        _ => 1,
    };
    let event_filter = EventFilter {
        select_clauses: ["EventId", "EventType", "Message", "Severity"]
            .iter()
            .map(|n| SimpleAttributeOperand {
                type_definition_id: NodeId::ns0(2041),
                browse_path: vec![QualifiedName::new(0, n)],
                attribute_id: 13,
                index_range: UaString::null(),
            })
            .collect(),
        ..Default::default()
    };
    c.call(Request::CreateMonitoredItems(Box::new(
        CreateMonitoredItemsRequest {
            subscription_id: sid,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: vec![
                MonitoredItemCreateRequest {
                    item_to_monitor: rv(NodeId::ns0(2258), 13),
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: 1,
                        sampling_interval: 50.0,
                        queue_size: 2,
                        ..Default::default()
                    },
                },
                MonitoredItemCreateRequest {
                    item_to_monitor: rv(NodeId::ns0(2253), 12),
                    monitoring_mode: MonitoringMode::Reporting,
                    requested_parameters: MonitoringParameters {
                        client_handle: 2,
                        filter: ExtensionObject::from_struct(&event_filter),
                        queue_size: 10,
                        ..Default::default()
                    },
                },
            ],
            ..Default::default()
        },
    )));
    c.call(Request::ModifySubscription(Box::new(
        ModifySubscriptionRequest {
            subscription_id: sid,
            requested_publishing_interval: 200.0,
            requested_lifetime_count: 60,
            requested_max_keep_alive_count: 10,
            ..Default::default()
        },
    )));
    c.call(Request::SetPublishingMode(Box::new(
        SetPublishingModeRequest {
            publishing_enabled: true,
            subscription_ids: vec![sid],
            ..Default::default()
        },
    )));
    c.call(Request::SetMonitoringMode(Box::new(
        SetMonitoringModeRequest {
            subscription_id: sid,
            monitoring_mode: MonitoringMode::Sampling,
            monitored_item_ids: vec![1],
            ..Default::default()
        },
    )));
    // Publish is answered later (on a publishing cycle): send without waiting.
    for _ in 0..2 {
        let req = Request::Publish(Box::default());
        let mut body = Vec::new();
        req.encode_body(&mut body);
        c.rec.requests.push((req.binary_encoding_id(), body));
        let mut out = Vec::new();
        let _ = c.client.send_request(req, start(), &mut out);
        c.pump(out);
    }
    c.call(Request::Republish(Box::new(RepublishRequest {
        subscription_id: sid,
        retransmit_sequence_number: 1,
        ..Default::default()
    })));
    c.call(Request::DeleteMonitoredItems(Box::new(
        DeleteMonitoredItemsRequest {
            subscription_id: sid,
            monitored_item_ids: vec![1, 2],
            ..Default::default()
        },
    )));
    c.call(Request::DeleteSubscriptions(Box::new(
        DeleteSubscriptionsRequest {
            subscription_ids: vec![sid],
            ..Default::default()
        },
    )));
    c.call(Request::CloseSession(Box::new(CloseSessionRequest {
        delete_subscriptions: true,
        ..Default::default()
    })));
    all.push(c.close());

    // Small buffers: a Read split over many chunks.
    let mut cfg = ClientConfig::new(URL);
    cfg.limits.receive_buffer_size = 8192;
    cfg.limits.send_buffer_size = 8192;
    let mut c = Conversation::new("chunked", cfg);
    c.session();
    let nodes = (0..600)
        .map(|i| rv(NodeId::numeric(1, 1001 + i % 100), 13))
        .collect();
    c.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes,
        ..Default::default()
    })));
    all.push(c.close());

    all
}
