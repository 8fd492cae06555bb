//! ClientConnection ↔ ServerConnection in memory with the real ServiceState and services:
//! GetEndpoints, CreateSession, ActivateSession (anonymous), Read of the benchmark
//! variables, a pipeline of Reads, CloseSession, CLO; the channel is reported closed.

mod common;
#[path = "support/net.rs"]
mod net;

use common::t0;
use net::Net;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    CreateMonitoredItemsRequest, CreateSubscriptionRequest, GetEndpointsRequest,
    MonitoredItemCreateRequest, MonitoringMode, MonitoringParameters, ReadRequest, ReadValueId,
    TimestampsToReturn,
};
use uaring_core::server::connection::ConnStatus;
use uaring_core::types::{NodeId, Variant};
use uaring_core::StatusCode;

#[test]
fn session_and_reads_against_real_services() {
    let mut n = Net::connected(t0());
    assert!(n.client.is_open());

    let Response::GetEndpoints(eps) = n.call(Request::GetEndpoints(Box::default())) else {
        panic!()
    };
    assert!(!eps.endpoints.is_empty());
    let _ = GetEndpointsRequest::default();

    n.activate_anonymous_session(60_000.0, 0);

    let nodes: Vec<ReadValueId> = (0..100)
        .map(|i| ReadValueId {
            node_id: NodeId::numeric(1, 1001 + i),
            attribute_id: 13,
            ..Default::default()
        })
        .collect();
    let Response::Read(r) = n.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes.clone(),
        ..Default::default()
    }))) else {
        panic!()
    };
    assert_eq!(r.results.len(), 100);
    for (i, dv) in r.results.iter().enumerate() {
        assert_eq!(dv.value, Variant::Int32(i as i32), "BenchmarkValue{i}");
    }
    // Pipelined: 200 Reads sent before any is delivered.
    let mut ids = Vec::new();
    for _ in 0..200 {
        let req = Request::Read(Box::new(ReadRequest {
            nodes_to_read: nodes[..1].to_vec(),
            ..Default::default()
        }));
        ids.push(n.client.send_request(req, t0(), &mut n.c2s).unwrap());
    }
    n.pump();
    let got: Vec<u32> = std::iter::from_fn(|| n.client.poll_response())
        .map(|(id, _)| id)
        .collect();
    assert_eq!(got, ids);

    let mut out = Vec::new();
    n.client.close(t0(), &mut out);
    assert_eq!(
        n.server.on_recv(&mut n.state, t0(), &out, &mut n.s2c),
        ConnStatus::Close
    );
    assert_eq!(n.state.open_channel_count(), 0);
}

/// The session's MaxResponseMessageSize bounds every response body, the deferred Publish
/// responses too: a Read and a Publish whose answers (100 values each) are larger than the
/// 1,000 bytes the client asked for get a ServiceFault BadResponseTooLarge; a small Read
/// still works.
#[test]
fn responses_past_the_sessions_max_response_size_are_refused_publish_included() {
    let mut n = Net::connected(t0());
    n.activate_anonymous_session(60_000.0, 1_000);
    let nodes: Vec<ReadValueId> = (0..100)
        .map(|i| ReadValueId {
            node_id: NodeId::numeric(1, 1001 + i),
            attribute_id: 13,
            ..Default::default()
        })
        .collect();
    let fault = |r: &Response| match r {
        Response::ServiceFault(f) => Some(f.response_header.service_result),
        _ => None,
    };
    let r = n.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes.clone(),
        ..Default::default()
    })));
    assert_eq!(fault(&r), Some(StatusCode::BadResponseTooLarge), "{r:?}");
    let r = n.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: nodes[..2].to_vec(),
        ..Default::default()
    })));
    assert!(matches!(r, Response::Read(_)), "a small Read fits: {r:?}");

    let Response::CreateSubscription(sub) = n.call(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            requested_publishing_interval: 50.0,
            requested_lifetime_count: 300,
            requested_max_keep_alive_count: 10,
            publishing_enabled: true,
            ..Default::default()
        },
    ))) else {
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
        let r = n.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                subscription_id: sub.subscription_id,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
                ..Default::default()
            },
        )));
        assert!(matches!(r, Response::CreateMonitoredItems(_)), "{r:?}");
    }
    let id = n
        .client
        .send_request(Request::Publish(Box::default()), t0(), &mut n.c2s)
        .unwrap();
    n.pump();
    // Publishing cycles pass until the Publish is answered with the 100 initial values.
    let mut now = t0();
    let mut answer = None;
    for _ in 0..20 {
        now = now.advance_ns(60_000_000);
        n.state.on_timer(now);
        assert_eq!(
            n.server.flush_deferred(&mut n.state, now, &mut n.s2c),
            ConnStatus::Open
        );
        let data = std::mem::take(&mut n.s2c);
        n.client.on_recv(now, &data, &mut n.c2s).unwrap();
        if let Some((rid, resp)) = n.client.poll_response() {
            answer = Some((rid, resp));
            break;
        }
    }
    let (rid, resp) = answer.expect("the Publish is answered");
    assert_eq!(rid, id);
    assert_eq!(
        fault(&resp),
        Some(StatusCode::BadResponseTooLarge),
        "{resp:?}"
    );
}

/// CreateSession's serverEndpoints are kept by the shard after a response went out and sent
/// again for the next CreateSession under the same endpoint URL: every response still lists
/// GetEndpoints' endpoints (without certificates) under the URL that CreateSession asked for.
#[test]
fn create_session_endpoints_are_the_same_when_reused_and_follow_the_url() {
    use uaring_core::generated::types::CreateSessionRequest;
    let mut n = Net::connected(t0());
    let create = |n: &mut Net, url: &str| {
        let req = CreateSessionRequest {
            endpoint_url: url.into(),
            requested_session_timeout: 60_000.0,
            ..Default::default()
        };
        let Response::CreateSession(cs) = n.call(Request::CreateSession(Box::new(req))) else {
            panic!("CreateSession")
        };
        cs.server_endpoints
    };
    let (a, b) = (
        "opc.tcp://host-a:4840/uaring",
        "opc.tcp://host-b:4840/uaring",
    );
    let get = |n: &mut Net, url: &str| {
        let req = GetEndpointsRequest {
            endpoint_url: url.into(),
            ..Default::default()
        };
        let Response::GetEndpoints(g) = n.call(Request::GetEndpoints(Box::new(req))) else {
            panic!("GetEndpoints")
        };
        g.endpoints
    };
    for url in [a, a, b, a] {
        let listed = create(&mut n, url);
        let expected = get(&mut n, url);
        assert_eq!(listed.len(), expected.len());
        assert!(!listed.is_empty());
        for (c, e) in listed.iter().zip(&expected) {
            assert_eq!(c.endpoint_url.as_str(), url);
            assert!(c.server_certificate.is_null());
            assert_eq!(
                (
                    &c.server,
                    c.security_mode,
                    &c.security_policy_uri,
                    &c.user_identity_tokens
                ),
                (
                    &e.server,
                    e.security_mode,
                    &e.security_policy_uri,
                    &e.user_identity_tokens
                )
            );
        }
    }
}
