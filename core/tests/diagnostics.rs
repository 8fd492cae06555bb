//! ServerDiagnostics' arrays through `dispatch`, over two shards of one server:
//! SessionDiagnosticsArray, SessionSecurityDiagnosticsArray (SecurityAdmin only),
//! SubscriptionDiagnosticsArray and the summary's PublishingIntervalCount. Each shard
//! publishes a snapshot of its own sessions and subscriptions (`publish_metrics`, the
//! runtime's per-iteration call); a Read on either shard sees both.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::encoding::DecodeLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::roles::{Roles, WellKnownRole};
use uaring_core::secure_channel::{SecurityProvider, UserTokenSettings};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{DataValue, ExtensionObject, NodeId, StatusCode, UaStructure, Variant};

const VALUE: u32 = 13;
const SESSIONS: u32 = 3707;
const SECURITY: u32 = 3708;
const SUBSCRIPTIONS: u32 = 2290;
const PUBLISHING_INTERVAL_COUNT: u32 = 2284;
const SUMMARY: u32 = 2275;

fn shared() -> Arc<ServerShared> {
    content::new_with(
        ServerConfig::default(),
        start(),
        &content::Content::default(),
    )
    .expect("server")
}

/// Shard `index` of `shared` whose anonymous sessions get `roles`.
fn shard(shared: &Arc<ServerShared>, index: usize, roles: Roles) -> Harness {
    let mut h = Harness::on_shared(shared.clone(), index);
    let mut security = SecurityProvider::none_only();
    security.set_user_tokens(UserTokenSettings {
        anonymous: Some(roles),
        ..UserTokenSettings::default()
    });
    h.state = ServiceState::new(
        shared.clone(),
        index,
        Box::new(uaring_core::random::ChaCha::from_u64(index as u64 + 1)),
    )
    .with_shard_count(2)
    .with_security(security);
    h.channel = h.state.next_channel_id();
    h
}

fn read(h: &mut Harness, token: &NodeId, node: u32) -> DataValue {
    let r = h.read_request(token, NodeId::ns0(node));
    match h.call(r) {
        Response::Read(mut r) => r.results.remove(0),
        other => panic!("Read failed: {other:?}"),
    }
}

fn decode<T: UaStructure>(e: &ExtensionObject) -> T {
    e.decode_as::<T>(DecodeLimits::default())
        .expect("the structure's encoding")
        .expect("decodes")
}

fn array<T: UaStructure>(dv: &DataValue) -> Vec<T> {
    assert_eq!(dv.status_code(), StatusCode::Good, "{dv:?}");
    match &dv.value {
        Variant::Array(a) => a
            .values
            .iter()
            .map(|v| match v {
                Variant::ExtensionObject(e) => decode(e),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}

fn session_id(h: &Harness, token: &NodeId) -> NodeId {
    h.state
        .sessions()
        .find(|s| s.authentication_token == *token)
        .expect("session")
        .session_id
        .clone()
}

fn create_subscription(h: &mut Harness, token: &NodeId, interval: f64) -> u32 {
    let hd = h.header(token);
    match h.call(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            request_header: hd,
            requested_publishing_interval: interval,
            requested_lifetime_count: 300,
            requested_max_keep_alive_count: 10,
            max_notifications_per_publish: 50,
            publishing_enabled: true,
            priority: 7,
        },
    ))) {
        Response::CreateSubscription(r) => r.subscription_id,
        other => panic!("{other:?}"),
    }
}

fn create_items(h: &mut Harness, token: &NodeId, sub: u32, nodes: &[u32], mode: MonitoringMode) {
    let hd = h.header(token);
    let r = h.call(Request::CreateMonitoredItems(Box::new(
        CreateMonitoredItemsRequest {
            request_header: hd,
            subscription_id: sub,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create: nodes
                .iter()
                .enumerate()
                .map(|(i, n)| MonitoredItemCreateRequest {
                    item_to_monitor: ReadValueId {
                        node_id: NodeId::numeric(1, *n),
                        attribute_id: VALUE,
                        ..ReadValueId::default()
                    },
                    monitoring_mode: mode,
                    requested_parameters: MonitoringParameters {
                        client_handle: i as u32,
                        sampling_interval: 100.0,
                        queue_size: 1,
                        discard_oldest: true,
                        ..MonitoringParameters::default()
                    },
                })
                .collect(),
        },
    )));
    let Response::CreateMonitoredItems(r) = r else {
        panic!("{r:?}")
    };
    assert!(r.results.iter().all(|x| x.status_code == StatusCode::Good));
}

fn set_publishing_mode(h: &mut Harness, token: &NodeId, sub: u32, enabled: bool) {
    let hd = h.header(token);
    let r = h.call(Request::SetPublishingMode(Box::new(
        SetPublishingModeRequest {
            request_header: hd,
            publishing_enabled: enabled,
            subscription_ids: vec![sub],
        },
    )));
    assert!(matches!(r, Response::SetPublishingMode(_)), "{r:?}");
}

#[test]
fn session_and_subscription_arrays_cover_every_shard() {
    let shared = shared();
    let mut a = shard(&shared, 0, Roles::OBSERVER);
    let mut b = shard(&shared, 1, Roles::OBSERVER);
    let ta = a.open_session();
    let tb = b.open_session();
    let (ida, idb) = (session_id(&a, &ta), session_id(&b, &tb));

    // Shard 1's session: a subscription with two items (one disabled), modified once,
    // disabled and enabled again; a second one at another interval.
    let sub = create_subscription(&mut b, &tb, 500.0);
    create_items(&mut b, &tb, sub, &[1001], MonitoringMode::Reporting);
    create_items(&mut b, &tb, sub, &[1002], MonitoringMode::Disabled);
    set_publishing_mode(&mut b, &tb, sub, false);
    set_publishing_mode(&mut b, &tb, sub, true);
    let sub2 = create_subscription(&mut b, &tb, 1000.0);
    // Shard 0's session reads three times (the Read below is the fourth).
    for _ in 0..3 {
        read(&mut a, &ta, 2258);
    }
    a.state.publish_metrics();
    b.state.publish_metrics();

    let sessions: Vec<SessionDiagnosticsDataType> = array(&read(&mut a, &ta, SESSIONS));
    assert_eq!(sessions.len(), 2, "one session per shard");
    let sa = sessions
        .iter()
        .find(|s| s.session_id == ida)
        .expect("shard 0's");
    let sb = sessions
        .iter()
        .find(|s| s.session_id == idb)
        .expect("shard 1's");
    assert_eq!(sa.session_name.as_str(), "test session");
    assert_eq!(sa.endpoint_url.as_str(), "opc.tcp://req-host:4840/uaring");
    assert_eq!(
        sa.server_uri.as_str(),
        shared.config.application.effective_application_uri()
    );
    assert_eq!(
        sa.client_description.application_uri.as_str(),
        "urn:test:client"
    );
    assert_eq!(sa.locale_ids.len(), 1);
    assert_eq!(sa.actual_session_timeout, 60_000.0);
    assert_eq!(sa.client_connection_time, start().utc);
    assert_eq!(
        sa.read_count.total_count, 3,
        "snapshot taken before the 4th Read"
    );
    assert_eq!(sa.read_count.error_count, 0);
    assert_eq!(sa.total_request_count.total_count, 3);
    assert_eq!(sa.current_subscriptions_count, 0);
    assert_eq!(sb.current_subscriptions_count, 2);
    assert_eq!(sb.current_monitored_items_count, 2);
    assert_eq!(sb.current_publish_requests_in_queue, 0);
    assert_eq!(sb.create_subscription_count.total_count, 2);
    assert_eq!(sb.create_monitored_items_count.total_count, 2);
    assert_eq!(sb.set_publishing_mode_count.total_count, 2);
    assert_eq!(sb.total_request_count.total_count, 6);
    assert_eq!(sb.read_count.total_count, 0);

    let subs: Vec<SubscriptionDiagnosticsDataType> = array(&read(&mut a, &ta, SUBSCRIPTIONS));
    assert_eq!(subs.len(), 2);
    let d = subs.iter().find(|s| s.subscription_id == sub).expect("sub");
    assert_eq!(d.session_id, idb);
    assert_eq!(d.priority, 7);
    assert_eq!(d.publishing_interval, 500.0);
    assert_eq!(d.max_keep_alive_count, 10);
    assert_eq!(d.max_lifetime_count, 300);
    assert_eq!(d.max_notifications_per_publish, 50);
    assert!(d.publishing_enabled);
    assert_eq!((d.enable_count, d.disable_count), (1, 1));
    assert_eq!(d.monitored_item_count, 2);
    assert_eq!(d.disabled_monitored_item_count, 1);
    assert_eq!(d.next_sequence_number, 1);
    assert!(subs.iter().any(|s| s.subscription_id == sub2));

    // The summary's PublishingIntervalCount: two distinct intervals.
    assert_eq!(
        read(&mut a, &ta, PUBLISHING_INTERVAL_COUNT).value,
        Variant::UInt32(2)
    );
    let summary: ServerDiagnosticsSummaryDataType = match read(&mut a, &ta, SUMMARY).value {
        Variant::ExtensionObject(e) => decode(&e),
        other => panic!("{other:?}"),
    };
    assert_eq!(summary.publishing_interval_count, 2);
    assert_eq!(summary.current_session_count, 2);
    // An interval in use on another shard too counts once.
    let sub3 = create_subscription(&mut a, &ta, 500.0);
    a.state.publish_metrics();
    assert_eq!(
        read(&mut a, &ta, PUBLISHING_INTERVAL_COUNT).value,
        Variant::UInt32(2)
    );
    let subs: Vec<SubscriptionDiagnosticsDataType> = array(&read(&mut a, &ta, SUBSCRIPTIONS));
    assert_eq!(subs.len(), 3);
    assert_eq!(
        subs.iter()
            .find(|s| s.subscription_id == sub3)
            .map(|s| s.session_id.clone()),
        Some(ida)
    );

    // Shard 1 reads them too, and gets the same sessions.
    let from_b: Vec<SessionDiagnosticsDataType> = array(&read(&mut b, &tb, SESSIONS));
    assert_eq!(from_b.len(), 2);
}

#[test]
fn publishing_counts_follow_the_subscription() {
    let shared = shared();
    let mut a = shard(&shared, 0, Roles::OPERATOR);
    let mut b = shard(&shared, 1, Roles::OPERATOR);
    let ta = a.open_session();
    let tb = b.open_session();
    let sub = create_subscription(&mut b, &tb, 100.0);
    create_items(&mut b, &tb, sub, &[1001], MonitoringMode::Reporting);
    // Two Publish requests: the first is answered with the initial value at the next
    // publishing cycle, the second waits.
    for _ in 0..2 {
        let hd = b.header(&tb);
        let ctx = Harness::ctx(b.channel);
        let r = uaring_core::services::dispatch_deferrable(
            &mut b.state,
            &ctx,
            Request::Publish(Box::new(PublishRequest {
                request_header: hd,
                subscription_acknowledgements: Vec::new(),
            })),
            1,
            b.now,
        );
        assert!(r.is_none(), "queued");
    }
    for _ in 0..3 {
        b.advance_ms(100);
        b.state.on_timer(b.now);
    }
    b.state.publish_metrics();
    let subs: Vec<SubscriptionDiagnosticsDataType> = array(&read(&mut a, &ta, SUBSCRIPTIONS));
    let d = subs.iter().find(|s| s.subscription_id == sub).expect("sub");
    assert_eq!(d.publish_request_count, 2);
    assert_eq!(d.data_change_notifications_count, 1, "the initial value");
    assert_eq!(d.notifications_count, 1);
    assert_eq!(d.event_notifications_count, 0);
    assert_eq!(d.unacknowledged_message_count, 1);
    assert_eq!(d.next_sequence_number, 2);
    let sessions: Vec<SessionDiagnosticsDataType> = array(&read(&mut a, &ta, SESSIONS));
    let sb = sessions
        .iter()
        .find(|s| s.session_id == session_id(&b, &tb))
        .expect("shard 1's");
    assert_eq!(sb.publish_count.total_count, 2);
    assert_eq!(sb.current_publish_requests_in_queue, 1);
}

#[test]
fn snapshots_refresh_when_asked_or_due() {
    let shared = shared();
    let mut a = shard(&shared, 0, Roles::OBSERVER);
    let mut b = shard(&shared, 1, Roles::OBSERVER);
    let ta = a.open_session();
    a.state.publish_metrics();
    b.state.publish_metrics();
    assert_eq!(
        array::<SessionDiagnosticsDataType>(&read(&mut a, &ta, SESSIONS)).len(),
        1
    );
    // A session opens on shard 1 right after its last snapshot: not shown until it
    // refreshes. The Read above asked every shard for a fresh snapshot, so its next loop
    // iteration builds one although the refresh interval has not passed.
    let tb = b.open_session();
    b.state.publish_metrics();
    let sessions: Vec<SessionDiagnosticsDataType> = array(&read(&mut a, &ta, SESSIONS));
    assert_eq!(sessions.len(), 2);
    // That Read asked again; nothing changed on shard 1 since, so its next iteration
    // only clears the request.
    b.state.publish_metrics();
    // Without a Read, a change shows once the refresh interval passed.
    let hd = b.header(&tb);
    let r = b.call(Request::CloseSession(Box::new(CloseSessionRequest {
        request_header: hd,
        delete_subscriptions: true,
    })));
    assert!(matches!(r, Response::CloseSession(_)), "{r:?}");
    b.state.publish_metrics();
    assert_eq!(
        shared
            .metrics
            .diagnostics_array(uaring_core::metrics::DiagnosticsArray::Sessions)
            .len(),
        2,
        "nobody asked and the refresh interval has not passed"
    );
    b.advance_ms(300);
    b.state.on_timer(b.now);
    b.state.publish_metrics();
    assert_eq!(
        shared
            .metrics
            .diagnostics_array(uaring_core::metrics::DiagnosticsArray::Sessions)
            .len(),
        1
    );
}

#[test]
fn session_security_array_is_for_security_admins_only() {
    let shared = shared();
    let mut observer = shard(&shared, 0, Roles::OBSERVER);
    let mut admin = shard(&shared, 1, WellKnownRole::SecurityAdmin.set());
    let to = observer.open_session();
    let ta = admin.open_session();
    observer.state.publish_metrics();
    admin.state.publish_metrics();
    let dv = read(&mut observer, &to, SECURITY);
    assert_eq!(dv.status_code(), StatusCode::BadUserAccessDenied);
    assert_eq!(dv.value, Variant::Empty);
    // The other arrays are for everyone.
    assert_eq!(
        read(&mut observer, &to, SESSIONS).status_code(),
        StatusCode::Good
    );

    let sec: Vec<SessionSecurityDiagnosticsDataType> = array(&read(&mut admin, &ta, SECURITY));
    assert_eq!(sec.len(), 2);
    let s = sec
        .iter()
        .find(|s| s.session_id == session_id(&observer, &to))
        .expect("the observer's session");
    assert_eq!(s.authentication_mechanism.as_str(), "Anonymous");
    assert_eq!(s.encoding.as_str(), "UA Binary");
    assert_eq!(s.transport_protocol.as_str(), "opc.tcp");
    assert_eq!(s.security_mode, MessageSecurityMode::None);
    assert_eq!(s.security_policy_uri.as_str(), NONE_URI);
    assert!(s.client_user_id_of_session.is_null());
    assert_eq!(s.client_user_id_history.len(), 1);

    // Browse hides it from everyone but a SecurityAdmin (no Browse permission either).
    let children = |h: &mut Harness, t: &NodeId| -> Vec<NodeId> {
        let r = h.browse_request(t, 0, vec![hierarchical(NodeId::ns0(3706))]);
        match h.call(r) {
            Response::Browse(r) => r.results[0]
                .references
                .iter()
                .map(|r| r.node_id.node_id.clone())
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    let seen = children(&mut observer, &to);
    assert!(seen.contains(&NodeId::ns0(SESSIONS)), "{seen:?}");
    assert!(!seen.contains(&NodeId::ns0(SECURITY)), "{seen:?}");
    assert!(children(&mut admin, &ta).contains(&NodeId::ns0(SECURITY)));
    // Its RolePermissions are the NodeSet's: SecurityAdmin, 59391.
    let r = Request::Read(Box::new(ReadRequest {
        request_header: admin.header(&ta),
        nodes_to_read: vec![ReadValueId {
            node_id: NodeId::ns0(SECURITY),
            attribute_id: 24,
            ..ReadValueId::default()
        }],
        ..ReadRequest::default()
    }));
    let Response::Read(r) = admin.call(r) else {
        panic!()
    };
    let Variant::Array(a) = &r.results[0].value else {
        panic!("{:?}", r.results[0])
    };
    let rp: Vec<RolePermissionType> = a
        .values
        .iter()
        .map(|v| match v {
            Variant::ExtensionObject(e) => decode(e),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        rp,
        vec![RolePermissionType {
            role_id: WellKnownRole::SecurityAdmin.node_id(),
            permissions: PermissionType(59391),
        }]
    );
}
