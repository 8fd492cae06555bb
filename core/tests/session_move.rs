//! A session survives a reconnect that lands on another shard: the new connection's
//! ActivateSession makes `ServerConnection::on_recv` return `ConnStatus::Move(owner)`; the
//! runtime detaches the connection from the shard it arrived on and attaches it to the
//! owner, which answers the ActivateSession and serves the session's subscription on the
//! moved channel. Two `ServiceState`s of one `ServerShared`, over bytes, no runtime.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::{content, start};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{ExtensionObject, NodeId, Now, StatusCode};

const URL: &str = "opc.tcp://move-host:4840/uaring";

struct Link {
    server: ServerConnection,
    client: ClientConnection,
    /// The shard the server side lives on now.
    shard: usize,
}

struct World {
    shards: Vec<ServiceState>,
    now: Now,
}

impl World {
    fn new() -> World {
        let now = start();
        let shared: Arc<ServerShared> = content::new(ServerConfig::default(), now).unwrap();
        let shards = (0..2)
            .map(|i| {
                ServiceState::new(
                    shared.clone(),
                    i,
                    Box::new(uaring_core::random::ChaCha::from_u64(i as u64 + 1)),
                )
                .with_shard_count(2)
            })
            .collect();
        World { shards, now }
    }

    /// A different client seed per connection.
    fn seed(&mut self) -> u64 {
        self.now.mono_ns
            ^ 0x5eed
            ^ (self.shards[0].open_channel_count() as u64) << 32
            ^ (self.shards[1].open_channel_count() as u64) << 40
    }

    fn advance_ms(&mut self, ms: u64) {
        self.now = Now::new(
            self.now.mono_ns + ms * 1_000_000,
            self.now.utc.add_ms(ms as f64),
        );
    }

    fn connect(&mut self, shard: usize) -> Link {
        let server = ServerConnection::new(&mut self.shards[shard], None, self.now);
        let mut client = ClientConnection::new(
            ClientConfig::new(URL),
            Box::new(uaring_core::random::ChaCha::from_u64(self.seed())),
        );
        let mut out = Vec::new();
        client.start(self.now, &mut out);
        let mut link = Link {
            server,
            client,
            shard,
        };
        assert_eq!(self.pump(&mut link, out), ConnStatus::Open);
        assert!(link.client.is_open());
        link
    }

    /// Moves bytes both ways until quiet or until the server asks for a move.
    fn pump(&mut self, link: &mut Link, mut c2s: Vec<u8>) -> ConnStatus {
        for _ in 0..100 {
            if c2s.is_empty() {
                return ConnStatus::Open;
            }
            let mut s2c = Vec::new();
            let st = link
                .server
                .on_recv(&mut self.shards[link.shard], self.now, &c2s, &mut s2c);
            c2s.clear();
            if !s2c.is_empty() {
                link.client.on_recv(self.now, &s2c, &mut c2s).unwrap();
            }
            if st != ConnStatus::Open {
                return st;
            }
        }
        panic!("no quiescence");
    }

    /// What the runtime does on `ConnStatus::Move(to)`.
    fn move_link(&mut self, link: &mut Link, to: usize) {
        link.server.detach(&mut self.shards[link.shard]);
        link.shard = to;
        let mut s2c = Vec::new();
        let st = link.server.attach(&mut self.shards[to], self.now, &mut s2c);
        assert_eq!(st, ConnStatus::Open);
        let mut c2s = Vec::new();
        link.client.on_recv(self.now, &s2c, &mut c2s).unwrap();
        assert_eq!(self.pump(link, c2s), ConnStatus::Open);
    }

    fn call(&mut self, link: &mut Link, req: Request) -> Response {
        let mut out = Vec::new();
        let id = link.client.send_request(req, self.now, &mut out).unwrap();
        if let ConnStatus::Move(to) = self.pump(link, out) {
            self.move_link(link, to);
        }
        let (rid, resp) = link.client.poll_response().expect("a response");
        assert_eq!(rid, id);
        resp
    }

    fn activate(&mut self, link: &mut Link) -> Response {
        self.call(
            link,
            Request::ActivateSession(Box::new(ActivateSessionRequest {
                user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                    policy_id: "anonymous".into(),
                }),
                ..ActivateSessionRequest::default()
            })),
        )
    }

    /// The client's connection on shard 1 (`first`, with the session of `token`) drops; it
    /// reconnects, lands on shard 0, and sends an anonymous ActivateSession for the token and
    /// then `more`. Returns the new link, the request ids and what the server said of the bytes.
    fn reconnect_on_shard_0(
        &mut self,
        first: &mut Link,
        token: NodeId,
        more: Vec<Request>,
    ) -> (Link, Vec<u32>, ConnStatus) {
        first.server.on_close(&mut self.shards[1], self.now);
        assert_eq!(self.shards[1].open_channel_count(), 0);
        let mut second = self.connect(0);
        assert_eq!(self.shards[0].open_channel_count(), 1);
        second.client.set_authentication_token(token);
        let activate = Request::ActivateSession(Box::new(ActivateSessionRequest {
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        }));
        let mut out = Vec::new();
        let ids = std::iter::once(activate)
            .chain(more)
            .map(|r| second.client.send_request(r, self.now, &mut out).unwrap())
            .collect();
        let st = self.pump(&mut second, out);
        (second, ids, st)
    }

    fn open_session(&mut self, link: &mut Link) -> NodeId {
        let r = self.call(
            link,
            Request::CreateSession(Box::new(CreateSessionRequest {
                endpoint_url: URL.into(),
                session_name: "move".into(),
                client_nonce: vec![7u8; 32].into(),
                requested_session_timeout: 60_000.0,
                ..CreateSessionRequest::default()
            })),
        );
        let Response::CreateSession(cs) = r else {
            panic!("{r:?}")
        };
        link.client
            .set_authentication_token(cs.authentication_token.clone());
        assert!(matches!(self.activate(link), Response::ActivateSession(_)));
        cs.authentication_token
    }

    /// A subscription with one item on the server's CurrentTime (changes every sample).
    fn subscribe(&mut self, link: &mut Link) -> u32 {
        self.subscribe_item(link).0
    }

    /// As [`World::subscribe`]: (subscription id, item id).
    fn subscribe_item(&mut self, link: &mut Link) -> (u32, u32) {
        let r = self.call(
            link,
            Request::CreateSubscription(Box::new(CreateSubscriptionRequest {
                requested_publishing_interval: 100.0,
                requested_lifetime_count: 1000,
                requested_max_keep_alive_count: 10,
                publishing_enabled: true,
                ..Default::default()
            })),
        );
        let Response::CreateSubscription(cs) = r else {
            panic!("{r:?}")
        };
        let item = MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id: NodeId::ns0(
                    uaring_core::generated::node_ids::Server_ServerStatus_CurrentTime,
                ),
                attribute_id: 13,
                ..Default::default()
            },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: 42,
                sampling_interval: 100.0,
                queue_size: 10,
                discard_oldest: true,
                ..Default::default()
            },
        };
        let r = self.call(
            link,
            Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
                subscription_id: cs.subscription_id,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: vec![item],
                ..Default::default()
            })),
        );
        let Response::CreateMonitoredItems(m) = r else {
            panic!("{r:?}")
        };
        assert!(m.results[0].status_code.is_good());
        (cs.subscription_id, m.results[0].monitored_item_id)
    }

    /// Sends a Publish and runs the owning shard's timers until it is answered.
    fn publish(&mut self, link: &mut Link) -> PublishResponse {
        let mut out = Vec::new();
        link.client
            .send_request(Request::Publish(Box::default()), self.now, &mut out)
            .unwrap();
        assert_eq!(self.pump(link, out), ConnStatus::Open);
        for _ in 0..50 {
            if let Some((_, r)) = link.client.poll_response() {
                let Response::Publish(p) = r else {
                    panic!("{r:?}")
                };
                return *p;
            }
            self.advance_ms(100);
            self.shards[link.shard].on_timer(self.now);
            let mut s2c = Vec::new();
            let st = link
                .server
                .flush_deferred(&mut self.shards[link.shard], self.now, &mut s2c);
            assert_eq!(st, ConnStatus::Open);
            let mut c2s = Vec::new();
            link.client.on_recv(self.now, &s2c, &mut c2s).unwrap();
        }
        panic!("Publish not answered");
    }
}

#[test]
fn reconnect_on_another_shard_keeps_the_session_and_its_subscription() {
    let mut w = World::new();
    let mut first = w.connect(1);
    let token = w.open_session(&mut first);
    let sub = w.subscribe(&mut first);
    let p = w.publish(&mut first);
    assert_eq!(p.subscription_id, sub);
    let seq_before = p.notification_message.sequence_number;

    // The TCP connection drops; the client reconnects and the new connection lands on shard 0.
    let (mut second, _, st) = w.reconnect_on_shard_0(&mut first, token, Vec::new());
    assert_eq!(
        st,
        ConnStatus::Move(1),
        "the ActivateSession names a session of shard 1"
    );
    assert!(second.server.is_moving());
    assert!(
        second.client.poll_response().is_none(),
        "not answered on shard 0"
    );
    w.move_link(&mut second, 1);
    let (_, r) = second.client.poll_response().expect("answered by shard 1");
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    assert_eq!(
        w.shards[0].open_channel_count(),
        0,
        "the channel left shard 0"
    );
    assert_eq!(
        w.shards[1].open_channel_count(),
        1,
        "and was adopted by shard 1"
    );

    // The same subscription goes on delivering on the moved channel, in sequence.
    let p = w.publish(&mut second);
    assert_eq!(p.subscription_id, sub);
    assert_eq!(p.notification_message.sequence_number, seq_before + 1);
    assert!(!p.notification_message.notification_data.is_empty());
    // Requests after the move are served by shard 1.
    let r = w.call(
        &mut second,
        Request::Read(Box::new(ReadRequest {
            nodes_to_read: vec![ReadValueId {
                node_id: NodeId::ns0(2258),
                attribute_id: 13,
                ..Default::default()
            }],
            ..Default::default()
        })),
    );
    assert!(matches!(r, Response::Read(_)), "{r:?}");
}

#[test]
fn requests_pipelined_behind_the_activate_move_with_it() {
    let mut w = World::new();
    let mut first = w.connect(1);
    let token = w.open_session(&mut first);
    let read = ReadRequest {
        nodes_to_read: vec![ReadValueId {
            node_id: NodeId::ns0(2258),
            attribute_id: 13,
            ..Default::default()
        }],
        ..Default::default()
    };
    let (mut second, ids, st) =
        w.reconnect_on_shard_0(&mut first, token, vec![Request::Read(Box::new(read))]);
    let (a, b) = (ids[0], ids[1]);
    assert_eq!(st, ConnStatus::Move(1));
    w.move_link(&mut second, 1);
    let (ra, r) = second.client.poll_response().unwrap();
    assert_eq!(ra, a);
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    let (rb, r) = second.client.poll_response().unwrap();
    assert_eq!(rb, b);
    assert!(
        matches!(r, Response::Read(_)),
        "the Read behind the ActivateSession is answered by the owner: {r:?}"
    );
}

#[test]
fn a_refused_move_answers_bad_resource_unavailable_and_the_channel_stays() {
    let mut w = World::new();
    let mut first = w.connect(1);
    let token = w.open_session(&mut first);
    let (mut second, _, st) = w.reconnect_on_shard_0(&mut first, token, Vec::new());
    assert_eq!(st, ConnStatus::Move(1));
    // The runtime's queue to shard 1 is full.
    let mut s2c = Vec::new();
    assert_eq!(
        second
            .server
            .move_refused(&mut w.shards[0], w.now, &mut s2c),
        ConnStatus::Open
    );
    let mut c2s = Vec::new();
    second.client.on_recv(w.now, &s2c, &mut c2s).unwrap();
    let (_, r) = second.client.poll_response().unwrap();
    assert_eq!(
        dispatch_util::fault_status(&r),
        Some(StatusCode::BadResourceUnavailable)
    );
    assert_eq!(w.shards[0].open_channel_count(), 1);
    // The client retries; this time the move goes through.
    assert!(matches!(
        w.activate(&mut second),
        Response::ActivateSession(_)
    ));
    assert_eq!(second.shard, 1);
}

#[test]
fn a_token_naming_no_shard_of_the_process_is_answered_locally() {
    let mut w = World::new();
    let mut link = w.connect(0);
    let mut forged = vec![0u8; 32];
    forged[0] = 7; // shard 7 of a two-shard process
    link.client
        .set_authentication_token(NodeId::byte_string(0, forged));
    let r = w.activate(&mut link);
    assert_eq!(link.shard, 0, "no move");
    assert_eq!(
        dispatch_util::fault_status(&r),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

impl World {
    /// What the runtime does with the shards' messages: carries them until none is left.
    fn exchange(&mut self) -> usize {
        let mut carried = 0;
        loop {
            let mut msgs = Vec::new();
            for s in &mut self.shards {
                s.take_messages(&mut msgs);
            }
            if msgs.is_empty() {
                return carried;
            }
            carried += msgs.len();
            for (to, m) in msgs {
                self.shards[to].on_message(m, self.now);
            }
        }
    }

    /// Deferred responses of `link`'s channel reach its client.
    fn flush(&mut self, link: &mut Link) {
        let mut s2c = Vec::new();
        assert_eq!(
            link.server
                .flush_deferred(&mut self.shards[link.shard], self.now, &mut s2c),
            ConnStatus::Open
        );
        let mut c2s = Vec::new();
        link.client.on_recv(self.now, &s2c, &mut c2s).unwrap();
    }
}

#[test]
fn transfer_subscriptions_from_a_session_of_another_shard() {
    let mut w = World::new();
    let mut old = w.connect(1);
    w.open_session(&mut old);
    let sub = w.subscribe(&mut old);
    assert_eq!(
        (sub >> 24) as usize,
        1,
        "the subscription id names its shard"
    );
    let p = w.publish(&mut old);
    let sent_seq = p.notification_message.sequence_number;

    let mut new = w.connect(0);
    w.open_session(&mut new);
    let mut out = Vec::new();
    new.client
        .send_request(
            Request::TransferSubscriptions(Box::new(TransferSubscriptionsRequest {
                subscription_ids: vec![sub, 0x0100_7777, 0x0500_0001],
                send_initial_values: true,
                ..Default::default()
            })),
            w.now,
            &mut out,
        )
        .unwrap();
    assert_eq!(w.pump(&mut new, out), ConnStatus::Open);
    assert!(new.client.poll_response().is_none(), "waits for shard 1");
    assert_eq!(w.exchange(), 4, "two requests to shard 1, two replies");
    w.flush(&mut new);
    let (_, r) = new
        .client
        .poll_response()
        .expect("answered after the replies");
    let Response::TransferSubscriptions(t) = r else {
        panic!("{r:?}")
    };
    assert_eq!(t.results[0].status_code, StatusCode::Good);
    assert_eq!(
        t.results[0].available_sequence_numbers,
        vec![sent_seq],
        "the unacknowledged message moved along"
    );
    assert_eq!(
        t.results[1].status_code,
        StatusCode::BadSubscriptionIdInvalid
    );
    assert_eq!(
        t.results[2].status_code,
        StatusCode::BadSubscriptionIdInvalid,
        "shard 5 is not part of this process"
    );
    assert_eq!(w.shards[1].subscriptions().subscription_count(), 0);
    assert_eq!(w.shards[0].subscriptions().subscription_count(), 1);

    // The old session learns that its subscription left.
    let p = w.publish(&mut old);
    assert_eq!(p.subscription_id, sub);
    let status = p.notification_message.notification_data[0]
        .decode_as::<StatusChangeNotification>(uaring_core::DecodeLimits::default())
        .expect("a StatusChangeNotification")
        .unwrap();
    assert_eq!(status.status, StatusCode::GoodSubscriptionTransferred);

    // The new session gets the initial values and goes on receiving, now from shard 0; the
    // moved message can be republished there.
    let p = w.publish(&mut new);
    assert_eq!(p.subscription_id, sub);
    let dc = p.notification_message.notification_data[0]
        .decode_as::<DataChangeNotification>(uaring_core::DecodeLimits::default())
        .expect("data")
        .unwrap();
    assert_eq!(dc.monitored_items[0].client_handle, 42);
    let r = w.call(
        &mut new,
        Request::Republish(Box::new(RepublishRequest {
            subscription_id: sub,
            retransmit_sequence_number: sent_seq,
            ..Default::default()
        })),
    );
    assert!(matches!(r, Response::Republish(_)), "{r:?}");
    let p2 = w.publish(&mut new);
    assert!(p2.notification_message.sequence_number > p.notification_message.sequence_number);
}

impl World {
    /// SetMonitoringMode (Sampling) of `ids` in subscription `sub`: the results.
    fn sampling(&mut self, link: &mut Link, sub: u32, ids: &[u32]) -> Vec<StatusCode> {
        let r = self.call(
            link,
            Request::SetMonitoringMode(Box::new(SetMonitoringModeRequest {
                subscription_id: sub,
                monitoring_mode: MonitoringMode::Sampling,
                monitored_item_ids: ids.to_vec(),
                ..Default::default()
            })),
        );
        let Response::SetMonitoringMode(m) = r else {
            panic!("{r:?}")
        };
        m.results
    }

    /// DeleteMonitoredItems of `ids` in subscription `sub`: the results.
    fn delete_items(&mut self, link: &mut Link, sub: u32, ids: &[u32]) -> Vec<StatusCode> {
        let r = self.call(
            link,
            Request::DeleteMonitoredItems(Box::new(DeleteMonitoredItemsRequest {
                subscription_id: sub,
                monitored_item_ids: ids.to_vec(),
                ..Default::default()
            })),
        );
        let Response::DeleteMonitoredItems(d) = r else {
            panic!("{r:?}")
        };
        d.results
    }
}

/// A monitored item id names a slot of its shard, so an item that moves with its
/// subscription to another shard may have the id of an item there. Ids are qualified by
/// their subscription (Part 4 §5.13): each answers for its own item, a new item of the moved
/// subscription never takes a moved item's id, and deleting one leaves the other.
#[test]
fn moved_item_ids_stay_unique_within_their_subscription() {
    let mut w = World::new();
    let mut here = w.connect(0);
    w.open_session(&mut here);
    let (sub_here, item_here) = w.subscribe_item(&mut here);
    let mut there = w.connect(1);
    w.open_session(&mut there);
    let (sub_there, item_there) = w.subscribe_item(&mut there);
    assert_eq!(
        item_here, item_there,
        "each shard's first item: slot 0, first generation"
    );

    // The session on shard 0 takes the subscription of shard 1.
    let mut out = Vec::new();
    here.client
        .send_request(
            Request::TransferSubscriptions(Box::new(TransferSubscriptionsRequest {
                subscription_ids: vec![sub_there],
                send_initial_values: false,
                ..Default::default()
            })),
            w.now,
            &mut out,
        )
        .unwrap();
    assert_eq!(w.pump(&mut here, out), ConnStatus::Open);
    w.exchange();
    w.flush(&mut here);
    let (_, r) = here.client.poll_response().expect("answered");
    let Response::TransferSubscriptions(t) = r else {
        panic!("{r:?}")
    };
    assert_eq!(t.results[0].status_code, StatusCode::Good);
    assert_eq!(w.shards[0].subscriptions().monitored_item_count(), 2);

    // The same id in two subscriptions of shard 0: each answers for its own item.
    let good = vec![StatusCode::Good];
    assert_eq!(w.sampling(&mut here, sub_here, &[item_here]), good);
    assert_eq!(w.sampling(&mut here, sub_there, &[item_there]), good);

    // A new item of the moved subscription: another id than the moved item's.
    let r = w.call(
        &mut here,
        Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: sub_there,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: vec![MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::ns0(
                        uaring_core::generated::node_ids::Server_ServerStatus_CurrentTime,
                    ),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: 43,
                    sampling_interval: 100.0,
                    queue_size: 1,
                    ..Default::default()
                },
            }],
            ..Default::default()
        })),
    );
    let Response::CreateMonitoredItems(m) = r else {
        panic!("{r:?}")
    };
    assert!(m.results[0].status_code.is_good());
    let new_item = m.results[0].monitored_item_id;
    assert_ne!(new_item, item_there);

    // Deleting the moved item leaves the item of the same id in the other subscription.
    assert_eq!(w.delete_items(&mut here, sub_there, &[item_there]), good);
    assert_eq!(
        w.delete_items(&mut here, sub_there, &[item_there]),
        vec![StatusCode::BadMonitoredItemIdInvalid]
    );
    assert_eq!(w.sampling(&mut here, sub_here, &[item_here]), good);
    assert_eq!(w.sampling(&mut here, sub_there, &[new_item]), good);
    assert_eq!(w.shards[0].subscriptions().monitored_item_count(), 2);
}
