//! Roles and RolePermissions through `dispatch`: what each role may do on a node with
//! RolePermissions (Read, Write, Browse, TranslateBrowsePaths, Call, CreateMonitoredItems),
//! the user attributes that follow, the namespace default, and the RoleSet's Identities.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::roles::{RolePermissions, Roles, WellKnownRole};
use uaring_core::secure_channel::{SecurityProvider, UserTokenSettings};
use uaring_core::server::context::ConnectionHost;
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{DataValue, NodeId, QualifiedName, StatusCode, Variant};

const VALUE: u32 = 13;
const BROWSE_NAME: u32 = 3;
const USER_ACCESS_LEVEL: u32 = 18;
const USER_EXECUTABLE: u32 = 22;
const ROLE_PERMISSIONS: u32 = 24;
const USER_ROLE_PERMISSIONS: u32 = 25;

fn demo(s: &str) -> NodeId {
    NodeId::string(1, s)
}

fn p(bits: &[PermissionType]) -> PermissionType {
    bits.iter().fold(PermissionType::None, |a, b| a | *b)
}

/// Demo.Static.Double: Observer may browse and read it, Engineer also write it and read its
/// RolePermissions. Demo.Static.Int32: Engineer only. Demo.Methods.Add: Observer sees it,
/// Engineer may call it.
fn shared() -> Arc<ServerShared> {
    use PermissionType as P;
    content::new_and(ServerConfig::default(), start(), |b| {
        b.set_role_permissions(
            demo("Demo.Static.Double"),
            RolePermissions::new()
                .grant(WellKnownRole::Observer, p(&[P::Browse, P::Read]))
                .grant(
                    WellKnownRole::Engineer,
                    p(&[P::Browse, P::Read, P::Write, P::ReadRolePermissions]),
                ),
        );
        b.set_role_permissions(
            demo("Demo.Static.Int32"),
            RolePermissions::new().grant(WellKnownRole::Engineer, p(&[P::Browse, P::Read])),
        );
        b.set_role_permissions(
            demo("Demo.Methods.Add"),
            RolePermissions::new()
                .grant(WellKnownRole::Observer, P::Browse)
                .grant(WellKnownRole::Engineer, p(&[P::Browse, P::Call])),
        );
        Ok(())
    })
    .expect("server")
}

/// A shard of `shared` whose anonymous sessions get `roles`, with one session open.
fn session(shared: Arc<ServerShared>, roles: Roles) -> (Harness, NodeId) {
    let mut h = Harness::on_shared(shared.clone(), 0);
    let mut security = SecurityProvider::none_only();
    security.set_user_tokens(UserTokenSettings {
        anonymous: Some(roles),
        ..UserTokenSettings::default()
    });
    h.state = ServiceState::new(
        shared,
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(security);
    h.channel = h.state.next_channel_id();
    let token = h.open_session();
    (h, token)
}

fn read(h: &mut Harness, token: &NodeId, items: &[(NodeId, u32)]) -> Vec<DataValue> {
    let header = h.header(token);
    let r = Request::Read(Box::new(ReadRequest {
        request_header: header,
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: items
            .iter()
            .map(|(n, a)| ReadValueId {
                node_id: n.clone(),
                attribute_id: *a,
                ..ReadValueId::default()
            })
            .collect(),
    }));
    match h.call(r) {
        Response::Read(r) => r.results,
        other => panic!("Read failed: {other:?}"),
    }
}

fn write(h: &mut Harness, token: &NodeId, node: NodeId, v: Variant) -> StatusCode {
    let header = h.header(token);
    let r = Request::Write(Box::new(WriteRequest {
        request_header: header,
        nodes_to_write: vec![WriteValue {
            node_id: node,
            attribute_id: VALUE,
            value: DataValue::new(v),
            ..WriteValue::default()
        }],
    }));
    match h.call(r) {
        Response::Write(r) => r.results[0],
        other => panic!("Write failed: {other:?}"),
    }
}

fn call_add(h: &mut Harness, token: &NodeId) -> StatusCode {
    let header = h.header(token);
    let r = Request::Call(Box::new(CallRequest {
        request_header: header,
        methods_to_call: vec![CallMethodRequest {
            object_id: demo("Demo.Methods"),
            method_id: demo("Demo.Methods.Add"),
            input_arguments: vec![Variant::Double(1.0), Variant::Double(2.0)],
        }],
    }));
    match h.call(r) {
        Response::Call(r) => r.results[0].status_code,
        other => panic!("Call failed: {other:?}"),
    }
}

fn browse_targets(
    h: &mut Harness,
    token: &NodeId,
    node: NodeId,
) -> Result<Vec<NodeId>, StatusCode> {
    let r = h.browse_request(token, 0, vec![hierarchical(node)]);
    match h.call(r) {
        Response::Browse(b) => {
            let r = &b.results[0];
            if r.status_code.is_bad() {
                Err(r.status_code)
            } else {
                Ok(r.references
                    .iter()
                    .map(|d| d.node_id.node_id.clone())
                    .collect())
            }
        }
        other => panic!("Browse failed: {other:?}"),
    }
}

fn translate(h: &mut Harness, token: &NodeId, names: &[&str]) -> StatusCode {
    let header = h.header(token);
    let r =
        Request::TranslateBrowsePathsToNodeIds(Box::new(TranslateBrowsePathsToNodeIdsRequest {
            request_header: header,
            browse_paths: vec![BrowsePath {
                starting_node: demo("Demo"),
                relative_path: RelativePath {
                    elements: names
                        .iter()
                        .map(|n| RelativePathElement {
                            reference_type_id: NodeId::ns0(33),
                            is_inverse: false,
                            include_subtypes: true,
                            target_name: QualifiedName::new(1, n),
                        })
                        .collect(),
                },
            }],
        }));
    match h.call(r) {
        Response::TranslateBrowsePathsToNodeIds(r) => r.results[0].status_code,
        other => panic!("Translate failed: {other:?}"),
    }
}

/// A subscription publishing every `interval_ms`; returns its id.
fn create_subscription(h: &mut Harness, token: &NodeId, interval_ms: f64) -> u32 {
    let header = h.header(token);
    match h.call(Request::CreateSubscription(Box::new(
        CreateSubscriptionRequest {
            request_header: header,
            requested_publishing_interval: interval_ms,
            requested_lifetime_count: 300,
            requested_max_keep_alive_count: 100,
            publishing_enabled: true,
            ..CreateSubscriptionRequest::default()
        },
    ))) {
        Response::CreateSubscription(r) => r.subscription_id,
        other => panic!("CreateSubscription failed: {other:?}"),
    }
}

fn monitor(h: &mut Harness, token: &NodeId, node: NodeId) -> StatusCode {
    let sub = create_subscription(h, token, 100.0);
    let header = h.header(token);
    let r = Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
        request_header: header,
        subscription_id: sub,
        timestamps_to_return: TimestampsToReturn::Both,
        items_to_create: vec![MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id: node,
                attribute_id: VALUE,
                ..ReadValueId::default()
            },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: 1,
                sampling_interval: 100.0,
                queue_size: 1,
                discard_oldest: true,
                ..MonitoringParameters::default()
            },
        }],
    }));
    match h.call(r) {
        Response::CreateMonitoredItems(r) => r.results[0].status_code,
        other => panic!("CreateMonitoredItems failed: {other:?}"),
    }
}

/// The role ids of a RolePermissions value.
fn roles_of(v: &Variant) -> Vec<(NodeId, u32)> {
    let Variant::Array(a) = v else {
        panic!("not an array: {v:?}")
    };
    a.values
        .iter()
        .map(|e| match e {
            Variant::ExtensionObject(x) => {
                let r: RolePermissionType = x
                    .decode_as(Default::default())
                    .expect("RolePermissionType")
                    .expect("decodes");
                (r.role_id, r.permissions.0)
            }
            other => panic!("not an ExtensionObject: {other:?}"),
        })
        .collect()
}

#[test]
fn observer_reads_what_it_may_and_nothing_else() {
    let (mut h, token) = session(shared(), Roles::OBSERVER);
    let r = read(
        &mut h,
        &token,
        &[
            (demo("Demo.Static.Double"), VALUE),
            (demo("Demo.Static.Double"), USER_ACCESS_LEVEL),
            (demo("Demo.Static.Int32"), VALUE),
            (demo("Demo.Static.Int32"), BROWSE_NAME),
            (demo("Demo.Static.Double"), ROLE_PERMISSIONS),
            (demo("Demo.Static.Double"), USER_ROLE_PERMISSIONS),
            (demo("Demo.Methods.Add"), USER_EXECUTABLE),
            // No RolePermissions: the default rule (an Observer reads it).
            (demo("Demo.Static.Boolean"), VALUE),
            (demo("Demo.Static.Boolean"), ROLE_PERMISSIONS),
        ],
    );
    assert_eq!(r[0].status, None, "Double's value: {:?}", r[0]);
    assert_eq!(
        r[1].value,
        Variant::Byte(0x01),
        "UserAccessLevel: CurrentRead only"
    );
    assert_eq!(r[2].status, Some(StatusCode::BadUserAccessDenied));
    assert_eq!(r[3].status, Some(StatusCode::BadUserAccessDenied));
    assert_eq!(
        r[4].status,
        Some(StatusCode::BadUserAccessDenied),
        "no ReadRolePermissions"
    );
    assert_eq!(
        roles_of(&r[5].value),
        vec![(WellKnownRole::Observer.node_id(), 0x21)],
        "UserRolePermissions: the Observer's entry only"
    );
    assert_eq!(r[6].value, Variant::Boolean(false));
    assert_eq!(r[7].status, None);
    assert_eq!(r[8].status, Some(StatusCode::BadAttributeIdInvalid));

    assert_eq!(
        write(
            &mut h,
            &token,
            demo("Demo.Static.Double"),
            Variant::Double(1.0)
        ),
        StatusCode::BadUserAccessDenied
    );
    assert_eq!(call_add(&mut h, &token), StatusCode::BadUserAccessDenied);

    let seen = browse_targets(&mut h, &token, demo("Demo.Static")).expect("browse");
    assert!(seen.contains(&demo("Demo.Static.Double")));
    assert!(
        !seen.contains(&demo("Demo.Static.Int32")),
        "hidden from Browse"
    );
    assert!(seen.contains(&demo("Demo.Static.Boolean")));
    assert_eq!(
        browse_targets(&mut h, &token, demo("Demo.Static.Int32")),
        Err(StatusCode::BadNodeIdUnknown)
    );
    assert_eq!(
        translate(&mut h, &token, &["Static", "Int32"]),
        StatusCode::BadNoMatch
    );
    assert_eq!(
        translate(&mut h, &token, &["Static", "Double"]),
        StatusCode::Good
    );

    assert_eq!(
        monitor(&mut h, &token, demo("Demo.Static.Int32")),
        StatusCode::BadUserAccessDenied
    );
    assert_eq!(
        monitor(&mut h, &token, demo("Demo.Static.Double")),
        StatusCode::Good
    );
}

#[test]
fn engineer_writes_calls_and_reads_the_role_permissions() {
    let (mut h, token) = session(shared(), WellKnownRole::Engineer.set());
    assert_eq!(
        write(
            &mut h,
            &token,
            demo("Demo.Static.Double"),
            Variant::Double(2.5)
        ),
        StatusCode::Good
    );
    // No RolePermissions: Engineer is a writing role.
    assert_eq!(
        write(
            &mut h,
            &token,
            demo("Demo.Static.Boolean"),
            Variant::Boolean(true)
        ),
        StatusCode::Good
    );
    assert_eq!(call_add(&mut h, &token), StatusCode::Good);
    let r = read(
        &mut h,
        &token,
        &[
            (demo("Demo.Static.Double"), VALUE),
            (demo("Demo.Static.Double"), ROLE_PERMISSIONS),
            (demo("Demo.Static.Double"), USER_ROLE_PERMISSIONS),
            (demo("Demo.Static.Double"), USER_ACCESS_LEVEL),
            (demo("Demo.Methods.Add"), USER_EXECUTABLE),
            (demo("Demo.Static.Int32"), VALUE),
        ],
    );
    assert_eq!(r[0].value, Variant::Double(2.5));
    let all = roles_of(&r[1].value);
    assert_eq!(all.len(), 2, "RolePermissions: every entry: {all:?}");
    assert_eq!(
        roles_of(&r[2].value),
        vec![(WellKnownRole::Engineer.node_id(), 0x63)]
    );
    assert_eq!(
        r[3].value,
        Variant::Byte(0x01 | 0x02 | 0x20 | 0x40),
        "UserAccessLevel keeps the write bits"
    );
    assert_eq!(r[4].value, Variant::Boolean(true));
    assert_eq!(r[5].status, None);
}

/// A writing role not listed in a node's RolePermissions may do nothing there.
#[test]
fn a_listed_node_ignores_the_default_rule() {
    let (mut h, token) = session(shared(), Roles::OPERATOR);
    assert_eq!(
        write(
            &mut h,
            &token,
            demo("Demo.Static.Double"),
            Variant::Double(1.0)
        ),
        StatusCode::BadUserAccessDenied
    );
    let r = read(&mut h, &token, &[(demo("Demo.Static.Double"), VALUE)]);
    assert_eq!(r[0].status, Some(StatusCode::BadUserAccessDenied));
    // The default rule still holds elsewhere.
    assert_eq!(
        write(
            &mut h,
            &token,
            demo("Demo.Static.Boolean"),
            Variant::Boolean(true)
        ),
        StatusCode::Good
    );
}

#[test]
fn a_namespace_default_applies_to_nodes_without_their_own() {
    use PermissionType as P;
    let shared = content::new_and(ServerConfig::default(), start(), |b| {
        b.set_namespace_role_permissions(
            1,
            RolePermissions::new().grant(WellKnownRole::Observer, p(&[P::Browse])),
        );
        b.set_role_permissions(
            demo("Demo.Static.Double"),
            RolePermissions::new().grant(WellKnownRole::Observer, p(&[P::Browse, P::Read])),
        );
        Ok(())
    })
    .expect("server");
    let (mut h, token) = session(shared, Roles::OBSERVER);
    let r = read(
        &mut h,
        &token,
        &[
            (demo("Demo.Static.Boolean"), VALUE),
            (demo("Demo.Static.Boolean"), BROWSE_NAME),
            (demo("Demo.Static.Double"), VALUE),
            (demo("Demo.Static.Boolean"), USER_ROLE_PERMISSIONS),
            // Namespace 0 keeps the default rule.
            (NodeId::ns0(2256), VALUE),
        ],
    );
    assert_eq!(r[0].status, Some(StatusCode::BadUserAccessDenied));
    assert_eq!(r[1].status, None);
    assert_eq!(r[2].status, None);
    assert_eq!(
        roles_of(&r[3].value),
        vec![(WellKnownRole::Observer.node_id(), 0x01)]
    );
    assert_eq!(r[4].status, None, "ServerStatus: {:?}", r[4]);
}

#[test]
fn the_role_set_lists_the_mapping_of_the_default_token_settings() {
    let (mut h, token) = session(
        content::new(ServerConfig::default(), start()).expect("server"),
        Roles::OPERATOR,
    );
    use uaring_core::generated::node_ids as n;
    let r = read(
        &mut h,
        &token,
        &[
            (NodeId::ns0(n::WellKnownRole_Operator_Identities), VALUE),
            (NodeId::ns0(n::WellKnownRole_Observer_Identities), VALUE),
            (NodeId::ns0(n::WellKnownRole_Anonymous_Identities), VALUE),
            (NodeId::ns0(n::WellKnownRole_Observer_Applications), VALUE),
            (
                NodeId::ns0(n::WellKnownRole_Observer_ApplicationsExclude),
                VALUE,
            ),
            (
                NodeId::ns0(n::WellKnownRole_Observer_EndpointsExclude),
                VALUE,
            ),
            // A role the server never grants: no identity maps to it.
            (
                NodeId::ns0(n::WellKnownRole_SecurityKeyServerAdmin_Identities),
                VALUE,
            ),
            (
                NodeId::ns0(n::WellKnownRole_SecurityKeyServerAdmin_CustomConfiguration),
                VALUE,
            ),
        ],
    );
    let rules = |v: &Variant| -> Vec<(i32, String)> {
        let Variant::Array(a) = v else {
            panic!("not an array: {v:?}")
        };
        a.values
            .iter()
            .map(|e| match e {
                Variant::ExtensionObject(x) => {
                    let r: IdentityMappingRuleType = x
                        .decode_as(Default::default())
                        .expect("rule")
                        .expect("decodes");
                    (r.criteria_type.0, r.criteria.as_str().to_string())
                }
                other => panic!("{other:?}"),
            })
            .collect()
    };
    assert_eq!(
        rules(&r[0].value),
        vec![(5, String::new())],
        "Operator: anonymous logins"
    );
    assert_eq!(rules(&r[1].value), vec![]);
    assert_eq!(rules(&r[2].value), vec![(5, String::new())]);
    assert!(matches!(&r[3].value, Variant::Array(a) if a.values.is_empty()));
    assert_eq!(r[4].value, Variant::Boolean(true));
    assert_eq!(r[5].value, Variant::Boolean(true));
    assert_eq!(rules(&r[6].value), vec![]);
    assert_eq!(r[7].value, Variant::Boolean(false));
}

/// Message texts of the events in the Publish responses the shard has ready.
fn event_messages(h: &mut Harness) -> Vec<String> {
    let mut ready = Vec::new();
    let ch = h.channel;
    h.state.take_deferred(ch, &mut ready);
    let mut out = Vec::new();
    for (_, d) in ready {
        let Response::Publish(p) = d.to_response().expect("a decodable response") else {
            continue;
        };
        for n in &p.notification_message.notification_data {
            let Some(Ok(list)) = n.decode_as::<EventNotificationList>(Default::default()) else {
                continue;
            };
            for e in list.events {
                if let Some(Variant::LocalizedText(t)) = e.event_fields.first() {
                    out.push(t.text.as_str().to_string());
                }
            }
        }
    }
    out
}

/// An event item on the Server object selecting Message, and one Publish waiting.
fn subscribe_events(h: &mut Harness, token: &NodeId) {
    let sub = create_subscription(h, token, 50.0);
    let filter = EventFilter {
        select_clauses: vec![SimpleAttributeOperand {
            type_definition_id: NodeId::ns0(2041),
            browse_path: vec![QualifiedName::new(0, "Message")],
            attribute_id: VALUE,
            index_range: Default::default(),
        }],
        where_clause: ContentFilter::default(),
    };
    let header = h.header(token);
    let r = Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
        request_header: header,
        subscription_id: sub,
        timestamps_to_return: TimestampsToReturn::Both,
        items_to_create: vec![MonitoredItemCreateRequest {
            item_to_monitor: ReadValueId {
                node_id: NodeId::ns0(2253),
                attribute_id: 12,
                ..ReadValueId::default()
            },
            monitoring_mode: MonitoringMode::Reporting,
            requested_parameters: MonitoringParameters {
                client_handle: 7,
                sampling_interval: 0.0,
                queue_size: 100,
                discard_oldest: true,
                filter: uaring_core::ExtensionObject::from_struct(&filter),
            },
        }],
    }));
    match h.call(r) {
        Response::CreateMonitoredItems(r) => assert_eq!(r.results[0].status_code, StatusCode::Good),
        other => panic!("CreateMonitoredItems failed: {other:?}"),
    }
    let header = h.header(token);
    let ch = h.channel;
    let publish = Request::Publish(Box::new(PublishRequest {
        request_header: header,
        subscription_acknowledgements: Vec::new(),
    }));
    assert!(
        uaring_core::services::dispatch_deferrable(
            &mut h.state,
            &Harness::ctx(ch),
            publish,
            9,
            h.now
        )
        .is_none(),
        "the Publish waits"
    );
}

#[test]
fn events_reach_the_roles_that_may_receive_them_from_their_source() {
    use PermissionType as P;
    let shared = content::new_and(ServerConfig::default(), start(), |b| {
        b.set_role_permissions(
            content::demo_events_id(),
            RolePermissions::new()
                .grant(WellKnownRole::Observer, P::Browse)
                .grant(WellKnownRole::Engineer, p(&[P::Browse, P::ReceiveEvents])),
        );
        Ok(())
    })
    .expect("server");
    let (mut observer, o_token) = session(shared.clone(), Roles::OBSERVER);
    let (mut engineer, e_token) = session(shared.clone(), WellKnownRole::Engineer.set());
    subscribe_events(&mut observer, &o_token);
    subscribe_events(&mut engineer, &e_token);
    let demo = content::demo_event(&shared, 1, "from Demo.Events", 500, start().utc);
    let mut server = demo.clone();
    server.message = uaring_core::LocalizedText::new("en", "from the Server");
    server.source_node = NodeId::ns0(2253);
    shared.events.bus.publish(demo);
    shared.events.bus.publish(server);
    let mut got = Vec::new();
    for h in [&mut observer, &mut engineer] {
        for _ in 0..4 {
            h.advance_ms(50);
            let now = h.now;
            h.state.on_timer(now);
        }
        let mut m = event_messages(h);
        m.retain(|t| t.starts_with("from "));
        got.push(m);
    }
    assert_eq!(
        got[0],
        vec!["from the Server"],
        "Observer: not Demo.Events'"
    );
    assert_eq!(got[1], vec!["from Demo.Events", "from the Server"]);
}
