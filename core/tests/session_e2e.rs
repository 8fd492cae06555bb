//! End to end over bytes: core's `ClientConnection` against a `ServerConnection` hosted by
//! a real `ServiceState` (UA-TCP, SecureConversation, dispatch, services), including a
//! session that outlives its connection and is reactivated on a new one.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::{content, hierarchical, start};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::ServerConfig;
use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{ExtensionObject, NodeId, Now, StatusCode, Variant};

const URL: &str = "opc.tcp://e2e-host:4840/uaring";

struct Link {
    server: ServerConnection,
    client: ClientConnection,
}

struct World {
    state: ServiceState,
    now: Now,
}

impl World {
    fn new(config: ServerConfig) -> World {
        let now = start();
        let shared: Arc<ServerShared> = content::new(config, now).unwrap();
        let shard = ServiceState::new(
            shared,
            2,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        )
        .with_transport_limits(TransportLimits::default());
        World { state: shard, now }
    }

    fn connect(&mut self) -> Link {
        let server = ServerConnection::new(&mut self.state, None, self.now);
        let mut client = ClientConnection::new(
            ClientConfig::new(URL),
            Box::new(uaring_core::random::ChaCha::from_u64(2)),
        );
        let mut out = Vec::new();
        client.start(self.now, &mut out);
        let mut link = Link { server, client };
        self.pump(&mut link, out);
        assert!(link.client.is_open(), "channel open");
        link
    }

    /// Moves bytes both ways until neither side has anything to send.
    fn pump(&mut self, link: &mut Link, mut c2s: Vec<u8>) {
        for _ in 0..100 {
            if c2s.is_empty() {
                return;
            }
            let mut s2c = Vec::new();
            let st = link
                .server
                .on_recv(&mut self.state, self.now, &c2s, &mut s2c);
            assert_eq!(st, ConnStatus::Open);
            c2s.clear();
            if !s2c.is_empty() {
                link.client.on_recv(self.now, &s2c, &mut c2s).unwrap();
            }
        }
        panic!("no quiescence");
    }

    fn call(&mut self, link: &mut Link, req: Request) -> Response {
        let mut out = Vec::new();
        let id = link.client.send_request(req, self.now, &mut out).unwrap();
        self.pump(link, out);
        let (rid, resp) = link.client.poll_response().expect("a response");
        assert_eq!(rid, id);
        assert_eq!(resp.response_header().request_handle, id);
        resp
    }

    fn open_session(&mut self, link: &mut Link) -> CreateSessionResponse {
        let r = self.call(
            link,
            Request::CreateSession(Box::new(CreateSessionRequest {
                endpoint_url: URL.into(),
                session_name: "e2e".into(),
                client_nonce: vec![7u8; 32].into(),
                requested_session_timeout: 30_000.0,
                ..CreateSessionRequest::default()
            })),
        );
        let Response::CreateSession(cs) = r else {
            panic!("{r:?}")
        };
        assert_eq!(cs.server_nonce.as_bytes().len(), 32);
        assert_eq!(
            cs.max_request_message_size,
            TransportLimits::default().max_message_size
        );
        link.client
            .set_authentication_token(cs.authentication_token.clone());
        self.activate(link);
        *cs
    }

    fn activate(&mut self, link: &mut Link) -> Response {
        let r = self.call(
            link,
            Request::ActivateSession(Box::new(ActivateSessionRequest {
                user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                    policy_id: "anonymous".into(),
                }),
                ..ActivateSessionRequest::default()
            })),
        );
        if let Response::ActivateSession(a) = &r {
            assert_eq!(a.server_nonce.as_bytes().len(), 32);
        }
        r
    }
}

#[test]
fn discovery_session_browse_read_close_over_bytes() {
    let mut w = World::new(ServerConfig::default());
    let mut link = w.connect();
    assert_eq!(w.state.open_channel_count(), 1);
    assert_eq!(
        uaring_core::server::service_state::channel_shard(link.client.channel_id()),
        2
    );

    let r = w.call(&mut link, Request::GetEndpoints(Box::default()));
    let Response::GetEndpoints(g) = r else {
        panic!("{r:?}")
    };
    assert_eq!(g.endpoints.len(), 1);
    assert_eq!(g.endpoints[0].endpoint_url.as_str(), URL, "the Hello URL");

    w.open_session(&mut link);

    let r = w.call(
        &mut link,
        Request::Browse(Box::new(BrowseRequest {
            requested_max_references_per_node: 2,
            nodes_to_browse: vec![hierarchical(NodeId::ns0(85))],
            ..BrowseRequest::default()
        })),
    );
    let Response::Browse(b) = r else {
        panic!("{r:?}")
    };
    assert_eq!(b.results[0].references.len(), 2);
    let cp = b.results[0].continuation_point.clone();
    assert!(!cp.is_null());
    let r = w.call(
        &mut link,
        Request::BrowseNext(Box::new(BrowseNextRequest {
            continuation_points: vec![cp],
            ..BrowseNextRequest::default()
        })),
    );
    let Response::BrowseNext(n) = r else {
        panic!("{r:?}")
    };
    assert_eq!(n.results[0].status_code, StatusCode::Good);

    let r = w.call(
        &mut link,
        Request::Read(Box::new(ReadRequest {
            nodes_to_read: vec![ReadValueId {
                node_id: NodeId::numeric(1, 1010),
                attribute_id: 13,
                ..Default::default()
            }],
            ..ReadRequest::default()
        })),
    );
    let Response::Read(rd) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rd.results[0].value, Variant::Int32(9));

    let r = w.call(
        &mut link,
        Request::CloseSession(Box::new(CloseSessionRequest {
            delete_subscriptions: true,
            ..Default::default()
        })),
    );
    assert!(matches!(r, Response::CloseSession(_)), "{r:?}");
    assert_eq!(w.state.session_count(), 0);

    link.server.on_close(&mut w.state, w.now);
    assert_eq!(w.state.open_channel_count(), 0);
}

#[test]
fn session_survives_its_connection_and_is_reactivated() {
    let mut w = World::new(ServerConfig::default());
    let mut first = w.connect();
    let cs = w.open_session(&mut first);

    // The socket goes away: the channel closes, the session stays (unbound).
    first.server.on_close(&mut w.state, w.now);
    assert_eq!(w.state.session_count(), 1);
    assert_eq!(w.state.open_channel_count(), 0);

    w.now = w.now.advance_ns(20_000_000_000);
    let mut second = w.connect();
    second
        .client
        .set_authentication_token(cs.authentication_token.clone());
    // Not usable before reactivation on the new channel.
    let r = w.call(
        &mut second,
        Request::Browse(Box::new(BrowseRequest {
            nodes_to_browse: vec![hierarchical(NodeId::ns0(85))],
            ..BrowseRequest::default()
        })),
    );
    assert!(
        matches!(&r, Response::ServiceFault(f) if f.response_header.service_result == StatusCode::BadSessionIdInvalid),
        "{r:?}"
    );
    let r = w.activate(&mut second);
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    let r = w.call(
        &mut second,
        Request::Browse(Box::new(BrowseRequest {
            nodes_to_browse: vec![hierarchical(NodeId::ns0(85))],
            ..BrowseRequest::default()
        })),
    );
    assert!(matches!(r, Response::Browse(_)), "{r:?}");

    // Left alone past its timeout, the session is closed by the shard timer.
    second.server.on_close(&mut w.state, w.now);
    w.now = w.now.advance_ns(30_001_000_000);
    let d = w.state.next_deadline().unwrap();
    assert!(d <= w.now.mono_ns);
    w.state.on_timer(w.now);
    assert_eq!(w.state.session_count(), 0);
}

#[test]
fn channel_limit_per_shard() {
    let mut w = World::new(ServerConfig::default());
    w.state = ServiceState::new(
        w.state.shared().clone(),
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_transport_limits(TransportLimits {
        max_channels_per_shard: 1,
        ..TransportLimits::default()
    });
    let _one = w.connect();
    assert_eq!(w.state.open_channel_count(), 1);
    use uaring_core::server::context::ConnectionHost;
    assert_eq!(
        w.state.open_channel(),
        Err(StatusCode::BadTcpNotEnoughResources)
    );
}

fn read_of(n: usize) -> Request {
    Request::Read(Box::new(ReadRequest {
        nodes_to_read: vec![
            ReadValueId {
                node_id: NodeId::numeric(1, 1010),
                attribute_id: 13,
                ..Default::default()
            };
            n
        ],
        ..ReadRequest::default()
    }))
}

/// A request body over 64 KiB is decoded by a job when the host offloads its connections'
/// expensive work, so its decoding does not stall the loop's other connections: the
/// connection waits for the job (the input behind the request held, nothing answered), then
/// answers the request and what followed it, in order. Decoded on another thread here, as the
/// runtime's helpers do. A job the helpers refuse (their queue full) answers a ServiceFault
/// BadResourceUnavailable with the request's handle, and the connection goes on.
#[test]
fn a_large_request_is_decoded_off_the_loop() {
    use uaring_core::server::handshake::JobKind;
    let mut w = World::new(ServerConfig::default());
    w.state = ServiceState::new(
        w.state.shared().clone(),
        2,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_transport_limits(TransportLimits::default())
    .with_handshake_offload(true);
    let mut link = w.connect();
    w.open_session(&mut link);
    assert!(!link.server.is_waiting(), "no job for a None session");

    // A small request is decoded on the loop, as before.
    let r = w.call(&mut link, read_of(10));
    assert!(
        matches!(&r, Response::Read(rd) if rd.results.len() == 10),
        "{r:?}"
    );

    let mut c2s = Vec::new();
    let big = link
        .client
        .send_request(read_of(5000), w.now, &mut c2s)
        .unwrap();
    assert!(c2s.len() > 64 * 1024, "{} bytes", c2s.len());
    let small = link
        .client
        .send_request(read_of(1), w.now, &mut c2s)
        .unwrap();
    let mut s2c = Vec::new();
    let st = link.server.on_recv(&mut w.state, w.now, &c2s, &mut s2c);
    assert_eq!(st, ConnStatus::Open);
    assert!(s2c.is_empty(), "nothing answered before the job is done");
    assert!(link.server.is_waiting());
    assert!(
        link.server.buffered_bytes() > 64 * 1024,
        "the job's body counts against the buffer budget while it is out"
    );
    let job = link.server.take_job().expect("a decode job");
    assert_eq!(job.kind(), JobKind::Decode);
    let done = std::thread::spawn(move || job.run()).join().unwrap();
    let st = link.server.on_job_done(&mut w.state, w.now, done, &mut s2c);
    assert_eq!(st, ConnStatus::Open);
    assert!(!link.server.is_waiting());
    assert!(link.server.buffered_bytes() < 64 * 1024);
    let mut back = Vec::new();
    link.client.on_recv(w.now, &s2c, &mut back).unwrap();
    let (id, r) = link
        .client
        .poll_response()
        .expect("the large Read's answer");
    assert_eq!(id, big);
    let Response::Read(rd) = r else {
        panic!("{r:?}")
    };
    assert_eq!(rd.results.len(), 5000);
    assert!(rd.results.iter().all(|v| v.value == Variant::Int32(9)));
    let (id, r) = link.client.poll_response().expect("the held Read's answer");
    assert_eq!(id, small);
    assert!(
        matches!(&r, Response::Read(rd) if rd.results.len() == 1),
        "{r:?}"
    );

    // The helpers refuse the job: that request alone fails.
    c2s.clear();
    let refused = link
        .client
        .send_request(read_of(5000), w.now, &mut c2s)
        .unwrap();
    s2c.clear();
    let st = link.server.on_recv(&mut w.state, w.now, &c2s, &mut s2c);
    assert_eq!(st, ConnStatus::Open);
    let job = link.server.take_job().expect("a decode job");
    let st = link
        .server
        .on_job_done(&mut w.state, w.now, job.refuse(), &mut s2c);
    assert_eq!(st, ConnStatus::Open);
    back.clear();
    link.client.on_recv(w.now, &s2c, &mut back).unwrap();
    let (id, r) = link.client.poll_response().expect("the refusal");
    assert_eq!(id, refused);
    assert!(
        matches!(&r, Response::ServiceFault(f)
            if f.response_header.service_result == StatusCode::BadResourceUnavailable
                && f.response_header.request_handle == refused),
        "{r:?}"
    );
    let r = w.call(&mut link, read_of(2));
    assert!(
        matches!(&r, Response::Read(rd) if rd.results.len() == 2),
        "{r:?}"
    );
}
