//! ClientConnection ↔ ServerConnection in memory with the real ShardState and services:
//! GetEndpoints, CreateSession, ActivateSession (anonymous), Read of the benchmark
//! variables, a pipeline of Reads, CloseSession, CLO; the channel is reported closed.

mod common;

use common::t0;
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, CreateMonitoredItemsRequest, CreateSessionRequest,
    CreateSubscriptionRequest, GetEndpointsRequest, MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters,
    PublishRequest, ReadRequest, ReadValueId, TimestampsToReturn, UserTokenType,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::config::ServerConfig;
use uaring_core::server::shard::ShardState;
use uaring_core::server::shared::ServerShared;
use uaring_core::types::{ByteString, ExtensionObject, NodeId, Variant};
use uaring_core::StatusCode;

struct Net {
    shard: ShardState,
    server: ServerConnection,
    client: ClientConnection,
    c2s: Vec<u8>,
    s2c: Vec<u8>,
}

impl Net {
    /// A fresh shard and a client connection with its secure channel open (SecurityPolicy None).
    fn connected() -> Net {
        let shared = ServerShared::new(ServerConfig::default(), t0()).unwrap();
        let mut shard = ShardState::new(shared, 0, Box::new(uaring_core::random::ChaCha::from_u64(1)));
        let server = ServerConnection::new(&mut shard, None, t0());
        let config = ClientConfig::new("opc.tcp://localhost:4840/uaring");
        let mut client = ClientConnection::new(config, Box::new(uaring_core::random::ChaCha::from_u64(2)));
        let mut c2s = Vec::new();
        client.start(t0(), &mut c2s);
        let mut n = Net { shard, server, client, c2s, s2c: Vec::new() };
        n.pump();
        n
    }

    /// CreateSession (asking for `max_response_message_size`, 0 = none) and an anonymous
    /// ActivateSession; the client then sends the session's token.
    fn activate_anonymous_session(&mut self, max_response_message_size: u32) {
        let Response::CreateSession(cs) = self.call(Request::CreateSession(Box::new(CreateSessionRequest {
            session_name: "t".into(),
            client_nonce: ByteString::from(vec![1u8; 32]),
            requested_session_timeout: 60_000.0,
            max_response_message_size,
            ..Default::default()
        }))) else {
            panic!("CreateSession failed")
        };
        self.client.set_authentication_token(cs.authentication_token.clone());
        let policy_id = cs
            .server_endpoints
            .iter()
            .flat_map(|e| &e.user_identity_tokens)
            .find(|p| p.token_type == UserTokenType::Anonymous)
            .map(|p| p.policy_id.clone())
            .unwrap_or_default();
        let act = self.call(Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken { policy_id }),
            ..Default::default()
        })));
        assert!(act.response_header().service_result.is_good(), "{act:?}");
    }

    fn pump(&mut self) {
        for _ in 0..100 {
            if self.c2s.is_empty() && self.s2c.is_empty() {
                return;
            }
            let data = std::mem::take(&mut self.c2s);
            assert_eq!(self.server.on_recv(&mut self.shard, t0(), &data, &mut self.s2c), ConnStatus::Open);
            let data = std::mem::take(&mut self.s2c);
            self.client.on_recv(t0(), &data, &mut self.c2s).unwrap();
        }
    }
    fn call(&mut self, r: Request) -> Response {
        let id = self.client.send_request(r, t0(), &mut self.c2s).unwrap();
        self.pump();
        let (rid, resp) = self.client.poll_response().unwrap();
        assert_eq!(rid, id);
        assert_eq!(resp.response_header().request_handle, id);
        resp
    }
}

#[test]
fn session_and_reads_against_real_services() {
    let mut n = Net::connected();
    assert!(n.client.is_open());

    let Response::GetEndpoints(eps) = n.call(Request::GetEndpoints(Box::default())) else { panic!() };
    assert!(!eps.endpoints.is_empty());
    let _ = GetEndpointsRequest::default();

    n.activate_anonymous_session(0);

    let nodes: Vec<ReadValueId> = (0..100)
        .map(|i| ReadValueId { node_id: NodeId::numeric(1, 1001 + i), attribute_id: 13, ..Default::default() })
        .collect();
    let Response::Read(r) = n.call(Request::Read(Box::new(ReadRequest { nodes_to_read: nodes.clone(), ..Default::default() }))) else {
        panic!()
    };
    assert_eq!(r.results.len(), 100);
    for (i, dv) in r.results.iter().enumerate() {
        assert_eq!(dv.value, Variant::Int32(i as i32), "BenchmarkValue{i}");
    }
    // Pipelined: 200 Reads sent before any is delivered.
    let mut ids = Vec::new();
    for _ in 0..200 {
        let req = Request::Read(Box::new(ReadRequest { nodes_to_read: nodes[..1].to_vec(), ..Default::default() }));
        ids.push(n.client.send_request(req, t0(), &mut n.c2s).unwrap());
    }
    n.pump();
    let got: Vec<u32> = std::iter::from_fn(|| n.client.poll_response()).map(|(id, _)| id).collect();
    assert_eq!(got, ids);

    let mut out = Vec::new();
    n.client.close(t0(), &mut out);
    assert_eq!(n.server.on_recv(&mut n.shard, t0(), &out, &mut n.s2c), ConnStatus::Close);
    assert_eq!(n.shard.open_channel_count(), 0);
}

/// The session's MaxResponseMessageSize bounds every response body, the deferred Publish
/// responses too: a Read and a Publish whose answers (100 values each) are larger than the
/// 1,000 bytes the client asked for get a ServiceFault BadResponseTooLarge; a small Read
/// still works.
#[test]
fn responses_past_the_sessions_max_response_size_are_refused_publish_included() {
    let mut n = Net::connected();
    n.activate_anonymous_session(1_000);
    let nodes: Vec<ReadValueId> = (0..100)
        .map(|i| ReadValueId { node_id: NodeId::numeric(1, 1001 + i), attribute_id: 13, ..Default::default() })
        .collect();
    let fault = |r: &Response| match r {
        Response::ServiceFault(f) => Some(f.response_header.service_result),
        _ => None,
    };
    let r = n.call(Request::Read(Box::new(ReadRequest { nodes_to_read: nodes.clone(), ..Default::default() })));
    assert_eq!(fault(&r), Some(StatusCode::BadResponseTooLarge), "{r:?}");
    let r = n.call(Request::Read(Box::new(ReadRequest { nodes_to_read: nodes[..2].to_vec(), ..Default::default() })));
    assert!(matches!(r, Response::Read(_)), "a small Read fits: {r:?}");

    let Response::CreateSubscription(sub) = n.call(Request::CreateSubscription(Box::new(CreateSubscriptionRequest {
        requested_publishing_interval: 50.0,
        requested_lifetime_count: 300,
        requested_max_keep_alive_count: 10,
        publishing_enabled: true,
        ..Default::default()
    }))) else {
        panic!()
    };
    // In batches of 20: a CreateMonitoredItems response for all 100 would not fit 1,000 bytes.
    for (b, batch) in nodes.chunks(20).enumerate() {
        let items = batch
            .iter()
            .enumerate()
            .map(|(i, rv)| MonitoredItemCreateRequest {
                item_to_monitor: rv.clone(),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: (b * 20 + i) as u32,
                    sampling_interval: 50.0,
                    queue_size: 1,
                    discard_oldest: true,
                    ..Default::default()
                },
            })
            .collect();
        let r = n.call(Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: sub.subscription_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: items,
            ..Default::default()
        })));
        assert!(matches!(r, Response::CreateMonitoredItems(_)), "{r:?}");
    }
    let id = n.client.send_request(Request::Publish(Box::new(PublishRequest::default())), t0(), &mut n.c2s).unwrap();
    n.pump();
    // Publishing cycles pass until the Publish is answered with the 100 initial values.
    let mut now = t0();
    let mut answer = None;
    for _ in 0..20 {
        now = now.advance_ns(60_000_000);
        n.shard.on_timer(now);
        assert_eq!(n.server.flush_deferred(&mut n.shard, now, &mut n.s2c), ConnStatus::Open);
        let data = std::mem::take(&mut n.s2c);
        n.client.on_recv(now, &data, &mut n.c2s).unwrap();
        if let Some((rid, resp)) = n.client.poll_response() {
            answer = Some((rid, resp));
            break;
        }
    }
    let (rid, resp) = answer.expect("the Publish is answered");
    assert_eq!(rid, id);
    assert_eq!(fault(&resp), Some(StatusCode::BadResponseTooLarge), "{resp:?}");
}
