//! The live Server object (`i=2253`): values installed on the namespace-0 nodes at build
//! time (NamespaceArray, BuildInfo, ServerCapabilities, OperationLimits from the configured
//! limits) and the dynamic ones (ServerStatus, CurrentTime) computed at read time from `Now`.

use super::AddressSpaceBuilder;
use crate::address_space::value::ValueCell;
use crate::address_space::{ClassAttributes, Dynamic, ServerInfo, ValueSource};
use crate::config::ServerConfig;
use crate::generated::types::{
    BuildInfo, IdentityMappingRuleType, ServerState, ServerStatusDataType,
};
use crate::roles::WellKnownRole;
use crate::types::{
    BuiltinType, DataValue, DateTime, ExtensionObject, LocalizedText, NodeId, UaString, Variant,
};
use crate::Now;

/// Namespace-0 ids of the Server object's variables.
pub mod sid {
    pub const SERVER_ARRAY: u32 = 2254;
    pub const NAMESPACE_ARRAY: u32 = 2255;
    pub const SERVER_STATUS: u32 = 2256;
    pub const START_TIME: u32 = 2257;
    pub const CURRENT_TIME: u32 = 2258;
    pub const STATE: u32 = 2259;
    pub const BUILD_INFO: u32 = 2260;
    pub const PRODUCT_NAME: u32 = 2261;
    pub const PRODUCT_URI: u32 = 2262;
    pub const MANUFACTURER_NAME: u32 = 2263;
    pub const SOFTWARE_VERSION: u32 = 2264;
    pub const BUILD_NUMBER: u32 = 2265;
    pub const BUILD_DATE: u32 = 2266;
    pub const SERVICE_LEVEL: u32 = 2267;
    pub const SERVER_PROFILE_ARRAY: u32 = 2269;
    pub const LOCALE_ID_ARRAY: u32 = 2271;
    pub const MIN_SUPPORTED_SAMPLE_RATE: u32 = 2272;
    pub const MAX_BROWSE_CONTINUATION_POINTS: u32 = 2735;
    pub const SECONDS_TILL_SHUTDOWN: u32 = 2992;
    pub const SHUTDOWN_REASON: u32 = 2993;
    pub const AUDITING: u32 = 2994;
    pub const MAX_ARRAY_LENGTH: u32 = 11702;
    pub const MAX_STRING_LENGTH: u32 = 11703;
    pub const MAX_BYTE_STRING_LENGTH: u32 = 12911;
    pub const MAX_NODES_PER_READ: u32 = 11705;
    pub const MAX_NODES_PER_WRITE: u32 = 11707;
    pub const MAX_NODES_PER_METHOD_CALL: u32 = 11709;
    pub const MAX_NODES_PER_BROWSE: u32 = 11710;
    pub const MAX_NODES_PER_REGISTER_NODES: u32 = 11711;
    pub const MAX_NODES_PER_TRANSLATE: u32 = 11712;
    pub const MAX_MONITORED_ITEMS_PER_CALL: u32 = 11714;
    pub const SOFTWARE_CERTIFICATES: u32 = 3704;
    pub const MAX_SUBSCRIPTIONS_PER_SESSION: u32 = 24098;
    pub const MAX_SELECT_CLAUSE_PARAMETERS: u32 = 24099;
    pub const MAX_WHERE_CLAUSE_PARAMETERS: u32 = 24100;
    pub const MAX_MONITORED_ITEMS_PER_SUBSCRIPTION: u32 = 24104;
    pub const MAX_MONITORED_ITEMS_QUEUE_SIZE: u32 = 31916;
}

/// The server profile this server aims at (reported in ServerProfileArray).
pub const SERVER_PROFILES: &[&str] =
    &["http://opcfoundation.org/UA-Profile/Server/MicroEmbeddedDevice2017"];

/// ServerInfo from the configuration.
pub fn server_info(config: &ServerConfig, now: Now) -> ServerInfo {
    let a = &config.application;
    ServerInfo {
        start_time: now.utc,
        start_mono_ns: now.mono_ns,
        product_uri: a.product_uri.clone(),
        manufacturer_name: a.manufacturer.clone(),
        product_name: "uaring".into(),
        software_version: env!("CARGO_PKG_VERSION").into(),
        build_number: a.build_number.clone(),
        build_date: DateTime(a.build_date_ticks),
        shutdown: Default::default(),
    }
}

/// The BuildInfo structure.
pub fn build_info(info: &ServerInfo) -> BuildInfo {
    BuildInfo {
        product_uri: info.product_uri.as_str().into(),
        manufacturer_name: info.manufacturer_name.as_str().into(),
        product_name: info.product_name.as_str().into(),
        software_version: info.software_version.as_str().into(),
        build_number: info.build_number.as_str().into(),
        build_date: info.build_date,
    }
}

/// What ServerStatus.ShutdownReason says once a shutdown is announced.
pub const SHUTDOWN_REASON_TEXT: &str = "The server is shutting down";

/// State, SecondsTillShutdown and ShutdownReason at `now` (Part 5 §6.3.1: Shutdown with the
/// seconds left, rounded up, once a shutdown is announced).
fn shutdown_status(info: &ServerInfo, now: Now) -> (ServerState, u32, LocalizedText) {
    match info.shutdown.at() {
        None => (ServerState::Running, 0, LocalizedText::default()),
        Some(at) => {
            let left_ns = at.saturating_sub(now.mono_ns);
            let seconds = left_ns.div_ceil(1_000_000_000).min(u32::MAX as u64) as u32;
            (
                ServerState::Shutdown,
                seconds,
                LocalizedText::new("en", SHUTDOWN_REASON_TEXT),
            )
        }
    }
}

/// The ServerStatusDataType structure at `now`.
pub fn server_status(info: &ServerInfo, now: Now) -> ServerStatusDataType {
    let (state, seconds_till_shutdown, shutdown_reason) = shutdown_status(info, now);
    ServerStatusDataType {
        start_time: info.start_time,
        current_time: now.utc,
        state,
        build_info: build_info(info),
        seconds_till_shutdown,
        shutdown_reason,
    }
}

/// Computes a dynamic value at `now` (the diagnostics and ServiceLevel from `metrics`).
pub fn dynamic_value(
    info: &ServerInfo,
    metrics: &crate::metrics::ServerMetrics,
    d: Dynamic,
    now: Now,
) -> DataValue {
    match d {
        Dynamic::CurrentTime => DataValue {
            value: Variant::DateTime(now.utc),
            source_timestamp: Some(now.utc),
            ..Default::default()
        },
        Dynamic::ServerStatus => DataValue {
            value: Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(
                &server_status(info, now),
            ))),
            source_timestamp: Some(now.utc),
            ..Default::default()
        },
        Dynamic::ServerState | Dynamic::SecondsTillShutdown | Dynamic::ShutdownReason => {
            let (state, seconds, reason) = shutdown_status(info, now);
            DataValue {
                value: match d {
                    Dynamic::ServerState => Variant::Int32(state.0),
                    Dynamic::SecondsTillShutdown => Variant::UInt32(seconds),
                    _ => Variant::LocalizedText(Box::new(reason)),
                },
                source_timestamp: Some(now.utc),
                ..Default::default()
            }
        }
        Dynamic::DiagnosticsSummary
        | Dynamic::DiagnosticsCount(_)
        | Dynamic::ServiceLevel { .. } => diagnostics_value(metrics, d, now),
        Dynamic::DiagnosticsArray(which) => DataValue {
            value: Variant::array(
                BuiltinType::ExtensionObject,
                metrics
                    .diagnostics_array(which)
                    .into_iter()
                    .map(|e| Variant::ExtensionObject(Box::new(e)))
                    .collect(),
            )
            .unwrap_or(Variant::Empty),
            source_timestamp: Some(now.utc),
            ..Default::default()
        },
    }
}

/// ServerDiagnosticsSummary and its children (ids in the structure's field order).
pub const DIAGNOSTICS_SUMMARY: u32 = 2275;
pub const DIAGNOSTICS_COUNTS: [u32; 12] = [
    2276, 2277, 2278, 2279, 3705, 2281, 2282, 2284, 2285, 2286, 2287, 2288,
];
/// Server.ServerDiagnostics.EnabledFlag.
pub const DIAGNOSTICS_ENABLED: u32 = 2294;
/// ServerDiagnostics.SubscriptionDiagnosticsArray.
pub const SUBSCRIPTION_DIAGNOSTICS_ARRAY: u32 = 2290;
/// ServerDiagnostics.SessionsDiagnosticsSummary.SessionDiagnosticsArray.
pub const SESSION_DIAGNOSTICS_ARRAY: u32 = 3707;
/// ServerDiagnostics.SessionsDiagnosticsSummary.SessionSecurityDiagnosticsArray.
pub const SESSION_SECURITY_DIAGNOSTICS_ARRAY: u32 = 3708;
/// The RolePermissions the standard NodeSet gives SessionSecurityDiagnosticsArray: every
/// permission but the history ones, to SecurityAdmin only (59391).
pub const SESSION_SECURITY_DIAGNOSTICS_PERMISSIONS: u32 = 59391;

/// ServerDiagnosticsSummary (or one of its counts) at `now`, summed over the shards.
pub fn diagnostics_value(
    metrics: &crate::metrics::ServerMetrics,
    d: Dynamic,
    now: Now,
) -> DataValue {
    if let Dynamic::ServiceLevel {
        max_sessions_per_shard,
        max_channels_per_shard,
    } = d
    {
        return DataValue {
            value: Variant::Byte(service_level(
                metrics,
                max_sessions_per_shard,
                max_channels_per_shard,
            )),
            source_timestamp: Some(now.utc),
            ..Default::default()
        };
    }
    let s = metrics.summary();
    let value = match d {
        Dynamic::DiagnosticsCount(i) => {
            let all = [
                s.server_view_count,
                s.current_session_count,
                s.cumulated_session_count,
                s.security_rejected_session_count,
                s.rejected_session_count,
                s.session_timeout_count,
                s.session_abort_count,
                s.publishing_interval_count,
                s.current_subscription_count,
                s.cumulated_subscription_count,
                s.security_rejected_requests_count,
                s.rejected_requests_count,
            ];
            Variant::UInt32(all.get(i as usize).copied().unwrap_or(0))
        }
        _ => Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(&s))),
    };
    DataValue {
        value,
        source_timestamp: Some(now.utc),
        ..Default::default()
    }
}

/// ServiceLevel (Part 4 §6.6.2.4.2: 200..=255 healthy, 2..=199 degraded) from the load: the
/// larger of sessions / session capacity and secure channels / channel capacity over the
/// shards. 255 idle, 200 just below capacity, 199 at capacity (no new session fits).
pub fn service_level(
    metrics: &crate::metrics::ServerMetrics,
    max_sessions_per_shard: u32,
    max_channels_per_shard: u32,
) -> u8 {
    use crate::metrics::ShardMetrics;
    let shards = metrics.active().count() as f64;
    if shards == 0.0 {
        return 255;
    }
    let sessions = metrics.sum(|m| &m.sessions) as f64;
    let mut channels = 0u64;
    for (_, m) in metrics.active() {
        for i in 0..m.channels_opened.len() {
            channels += ShardMetrics::get(&m.channels_opened[i])
                .saturating_sub(ShardMetrics::get(&m.channels_closed[i]));
        }
    }
    let load = (sessions / (shards * max_sessions_per_shard.max(1) as f64))
        .max(channels as f64 / (shards * max_channels_per_shard.max(1) as f64));
    if load >= 1.0 {
        199
    } else {
        (255.0 - (55.0 * load).round()).clamp(200.0, 255.0) as u8
    }
}

/// Sets the value source of a namespace-0 Variable, when the node is present.
fn set(b: &mut AddressSpaceBuilder, id: u32, src: ValueSource) {
    b.update(&NodeId::ns0(id), |n| {
        if let ClassAttributes::Variable(v) = &mut n.attributes {
            v.value = src;
        }
    });
}

fn set_static(b: &mut AddressSpaceBuilder, id: u32, value: Variant, start: DateTime) {
    let fixed = value.scalar_type();
    let dv = DataValue {
        value,
        source_timestamp: Some(start),
        ..Default::default()
    };
    set(b, id, ValueSource::Cell(ValueCell::new(dv, fixed)));
}

fn strings(v: &[&str]) -> Variant {
    Variant::array(
        BuiltinType::String,
        v.iter()
            .map(|s| Variant::String(UaString::from(*s)))
            .collect(),
    )
    .unwrap_or(Variant::Empty)
}

/// The Property `name` of a well-known role's Object, when the node set has it.
fn role_property(b: &AddressSpaceBuilder, role: &NodeId, name: &str) -> Option<NodeId> {
    let node = b.node(role)?;
    let found = node
        .refs()
        .filter(|r| r.is_forward() && r.type_is_ns0(crate::address_space::ids::HAS_PROPERTY))
        .filter_map(|r| r.target_node())
        .find(|n| n.name() == (0, Some(name)))
        .map(|n| n.node_id());
    found
}

fn set_role_property(
    b: &mut AddressSpaceBuilder,
    role: &NodeId,
    name: &str,
    value: Variant,
    start: DateTime,
) {
    if let Some(id) = role_property(b, role, name) {
        if let Some(n) = id.as_ns0() {
            set_static(b, n, value, start);
        }
    }
}

/// Sets the Identities of a well-known role (Server.ServerCapabilities.RoleSet.<role>): the
/// rules by which the server grants the role to a session. The runtime calls it with the
/// mapping it applies (its users and anonymous logins); [`install`] sets the mapping of the
/// default token settings.
pub fn set_role_identities(
    b: &mut AddressSpaceBuilder,
    role: WellKnownRole,
    rules: &[IdentityMappingRuleType],
) {
    let start = b.server_info().start_time;
    let rules: Vec<Variant> = rules
        .iter()
        .map(|r| Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(r))))
        .collect();
    let value = Variant::array(BuiltinType::ExtensionObject, rules).unwrap_or(Variant::Empty);
    set_role_property(b, &role.node_id(), "Identities", value, start);
}

/// The RoleSet's values: each role's Identities as the default token settings grant it
/// (Anonymous and AuthenticatedUser by their criteria; Operator to anonymous logins); no
/// role is restricted to applications or endpoints (empty lists that exclude: every one);
/// no role has a custom configuration. AddIdentity and the other RoleSet methods are not
/// served (not executable).
fn install_role_set(b: &mut AddressSpaceBuilder, start: DateTime) {
    use crate::generated::types::IdentityCriteriaType as C;
    let rule = |criteria_type| IdentityMappingRuleType {
        criteria_type,
        criteria: UaString::from(""),
    };
    for role in WellKnownRole::ALL {
        let rules: Vec<IdentityMappingRuleType> = match role {
            WellKnownRole::Anonymous => vec![rule(C::Anonymous)],
            WellKnownRole::AuthenticatedUser => vec![rule(C::AuthenticatedUser)],
            WellKnownRole::Operator => vec![rule(C::Anonymous)],
            _ => Vec::new(),
        };
        set_role_identities(b, role, &rules);
    }
    // Every role of the RoleSet, the ones the server never grants too (the Security Key
    // Server roles): no identity maps to those.
    // The builder has each reference as declared (inverses come at finish): a role is
    // declared a component of the RoleSet on either end.
    let role_set = NodeId::ns0(crate::generated::node_ids::Server_ServerCapabilities_RoleSet);
    let component = |r: &crate::address_space::store::RefView<'_>| {
        r.type_is_ns0(crate::address_space::ids::HAS_COMPONENT)
    };
    let mut roles: Vec<NodeId> = b
        .node(&role_set)
        .map(|n| {
            n.refs()
                .filter(|r| r.is_forward() && component(r))
                .filter_map(|r| r.target().as_local().cloned())
                .collect()
        })
        .unwrap_or_default();
    roles.extend(
        b.referencing(&role_set)
            .into_iter()
            .filter(|n| {
                n.refs().any(|r| {
                    !r.is_forward() && component(&r) && r.target().as_local() == Some(&role_set)
                })
            })
            .map(|n| n.node_id()),
    );
    roles.sort();
    roles.dedup();
    let empty = |t| Variant::array(t, Vec::new()).unwrap_or(Variant::Empty);
    for role in &roles {
        if WellKnownRole::from_node_id(role).is_none() {
            set_role_property(
                b,
                role,
                "Identities",
                empty(BuiltinType::ExtensionObject),
                start,
            );
        }
        set_role_property(b, role, "Applications", empty(BuiltinType::String), start);
        set_role_property(
            b,
            role,
            "ApplicationsExclude",
            Variant::Boolean(true),
            start,
        );
        set_role_property(
            b,
            role,
            "Endpoints",
            empty(BuiltinType::ExtensionObject),
            start,
        );
        set_role_property(b, role, "EndpointsExclude", Variant::Boolean(true), start);
        set_role_property(
            b,
            role,
            "CustomConfiguration",
            Variant::Boolean(false),
            start,
        );
    }
}

/// Server.ServerRedundancy: RedundancySupport, and for cold/warm/hot the
/// NonTransparentRedundancyType with its ServerUriArray (`ns=1;s=ServerRedundancy.ServerUriArray`).
fn install_redundancy(b: &mut AddressSpaceBuilder, config: &ServerConfig, start: DateTime) {
    use crate::address_space::{ids, Node, NodeClass, Reference, VariableAttributes};
    const SERVER_REDUNDANCY: u32 = 2296;
    const REDUNDANCY_SUPPORT: u32 = 3709;
    const NON_TRANSPARENT_REDUNDANCY_TYPE: u32 = 2039;
    let r = &config.redundancy;
    set_static(
        b,
        REDUNDANCY_SUPPORT,
        Variant::Int32(r.support_value()),
        start,
    );
    if r.support_value() == 0 {
        return;
    }
    if b.update(&NodeId::ns0(SERVER_REDUNDANCY), |obj| {
        obj.set_type_definition(NodeId::ns0(NON_TRANSPARENT_REDUNDANCY_TYPE))
    })
    .is_none()
    {
        return;
    }
    let id = NodeId::string(1, "ServerRedundancy.ServerUriArray");
    let uris: Vec<&str> = r.server_uris.iter().map(String::as_str).collect();
    let node = Node {
        generation: 0,
        node_id: id.clone(),
        node_class: NodeClass::Variable,
        browse_name: crate::types::QualifiedName::new(0, "ServerUriArray"),
        display_name: LocalizedText::new("", "ServerUriArray"),
        description: LocalizedText::default(),
        write_mask: 0,
        user_write_mask: 0,
        references: vec![Reference {
            reference_type: NodeId::ns0(ids::HAS_TYPE_DEFINITION),
            is_forward: true,
            target: crate::types::ExpandedNodeId::local(NodeId::ns0(ids::PROPERTY_TYPE)),
        }]
        .into(),
        attributes: ClassAttributes::Variable(VariableAttributes {
            value: ValueSource::Cell(ValueCell::new(
                DataValue {
                    value: strings(&uris),
                    source_timestamp: Some(start),
                    ..Default::default()
                },
                None,
            )),
            data_type: NodeId::ns0(12),
            value_rank: 1,
            array_dimensions: vec![0],
            access_level: crate::address_space::access_level::CURRENT_READ,
            user_access_level: crate::address_space::access_level::CURRENT_READ,
            access_level_ex: None,
            minimum_sampling_interval: -1.0,
            historizing: false,
        }),
    };
    if b.add(node).is_ok() {
        let _ = b.add_reference(&NodeId::ns0(SERVER_REDUNDANCY), ids::HAS_PROPERTY, id, true);
    }
}

/// Sets Server.NamespaceArray.
pub fn set_namespace_array(
    b: &mut AddressSpaceBuilder,
    namespace_uris: &[String],
    start: DateTime,
) {
    let uris: Vec<&str> = namespace_uris.iter().map(String::as_str).collect();
    set_static(b, sid::NAMESPACE_ARRAY, strings(&uris), start);
}

/// Installs the Server object's values on the namespace-0 nodes.
pub fn install(
    b: &mut AddressSpaceBuilder,
    config: &ServerConfig,
    info: &ServerInfo,
    namespace_uris: &[String],
) {
    let start = info.start_time;
    let lim = &config.operation_limits;
    set_namespace_array(b, namespace_uris, start);
    set_static(
        b,
        sid::SERVER_ARRAY,
        strings(&[config.application.effective_application_uri()]),
        start,
    );
    set(
        b,
        sid::SERVER_STATUS,
        ValueSource::Dynamic(Dynamic::ServerStatus),
    );
    set(
        b,
        sid::CURRENT_TIME,
        ValueSource::Dynamic(Dynamic::CurrentTime),
    );
    set_static(b, sid::START_TIME, Variant::DateTime(start), start);
    set(b, sid::STATE, ValueSource::Dynamic(Dynamic::ServerState));
    set_static(
        b,
        sid::BUILD_INFO,
        Variant::ExtensionObject(Box::new(ExtensionObject::from_struct(&build_info(info)))),
        start,
    );
    set_static(
        b,
        sid::PRODUCT_NAME,
        Variant::String(info.product_name.as_str().into()),
        start,
    );
    set_static(
        b,
        sid::PRODUCT_URI,
        Variant::String(info.product_uri.as_str().into()),
        start,
    );
    set_static(
        b,
        sid::MANUFACTURER_NAME,
        Variant::String(info.manufacturer_name.as_str().into()),
        start,
    );
    set_static(
        b,
        sid::SOFTWARE_VERSION,
        Variant::String(info.software_version.as_str().into()),
        start,
    );
    set_static(
        b,
        sid::BUILD_NUMBER,
        Variant::String(info.build_number.as_str().into()),
        start,
    );
    set_static(
        b,
        sid::BUILD_DATE,
        Variant::DateTime(info.build_date),
        start,
    );
    set(
        b,
        sid::SECONDS_TILL_SHUTDOWN,
        ValueSource::Dynamic(Dynamic::SecondsTillShutdown),
    );
    set(
        b,
        sid::SHUTDOWN_REASON,
        ValueSource::Dynamic(Dynamic::ShutdownReason),
    );
    set(
        b,
        sid::SERVICE_LEVEL,
        ValueSource::Dynamic(Dynamic::ServiceLevel {
            max_sessions_per_shard: config.sessions.max_sessions_per_shard,
            max_channels_per_shard: config.transport.max_channels_per_shard,
        }),
    );
    install_redundancy(b, config, start);
    install_role_set(b, start);
    set(
        b,
        DIAGNOSTICS_SUMMARY,
        ValueSource::Dynamic(Dynamic::DiagnosticsSummary),
    );
    for (i, id) in DIAGNOSTICS_COUNTS.iter().enumerate() {
        set(
            b,
            *id,
            ValueSource::Dynamic(Dynamic::DiagnosticsCount(i as u8)),
        );
    }
    {
        use crate::metrics::DiagnosticsArray as A;
        for (id, which) in [
            (SESSION_DIAGNOSTICS_ARRAY, A::Sessions),
            (SESSION_SECURITY_DIAGNOSTICS_ARRAY, A::SessionSecurity),
            (SUBSCRIPTION_DIAGNOSTICS_ARRAY, A::Subscriptions),
        ] {
            set(
                b,
                id,
                ValueSource::Dynamic(Dynamic::DiagnosticsArray(which)),
            );
        }
        // Part 5 §6.3.3 and the NodeSet: only a SecurityAdmin sees who logged in how.
        b.set_role_permissions(
            NodeId::ns0(SESSION_SECURITY_DIAGNOSTICS_ARRAY),
            crate::roles::RolePermissions::new().grant(
                WellKnownRole::SecurityAdmin,
                crate::generated::types::PermissionType(SESSION_SECURITY_DIAGNOSTICS_PERMISSIONS),
            ),
        );
    }
    // The summary and the arrays are always collected; there is no switch behind the flag, so clients may
    // read it and not write it (a Write answers BadNotWritable instead of succeeding and
    // changing nothing).
    set_static(b, DIAGNOSTICS_ENABLED, Variant::Boolean(true), start);
    b.update(&NodeId::ns0(DIAGNOSTICS_ENABLED), |n| {
        if let ClassAttributes::Variable(v) = &mut n.attributes {
            v.access_level = crate::address_space::access_level::CURRENT_READ;
            v.user_access_level = crate::address_space::access_level::CURRENT_READ;
        }
    });
    set_static(b, sid::AUDITING, Variant::Boolean(false), start);
    set_static(
        b,
        sid::SERVER_PROFILE_ARRAY,
        strings(SERVER_PROFILES),
        start,
    );
    set_static(b, sid::LOCALE_ID_ARRAY, strings(&["en"]), start);
    set_static(
        b,
        sid::MIN_SUPPORTED_SAMPLE_RATE,
        // The limit sampling is revised with: one source for what is reported and what is done.
        Variant::Double(config.subscriptions.min_sampling_interval_ms),
        start,
    );
    set_static(
        b,
        sid::MAX_BROWSE_CONTINUATION_POINTS,
        Variant::UInt16(lim.max_browse_continuation_points),
        start,
    );
    set_static(
        b,
        sid::MAX_ARRAY_LENGTH,
        Variant::UInt32(lim.max_array_length),
        start,
    );
    set_static(
        b,
        sid::MAX_STRING_LENGTH,
        Variant::UInt32(lim.max_string_length),
        start,
    );
    set_static(
        b,
        sid::MAX_BYTE_STRING_LENGTH,
        Variant::UInt32(lim.max_byte_string_length),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_READ,
        Variant::UInt32(lim.max_nodes_per_read),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_WRITE,
        Variant::UInt32(lim.max_nodes_per_write),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_METHOD_CALL,
        Variant::UInt32(lim.max_nodes_per_method_call),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_BROWSE,
        Variant::UInt32(lim.max_nodes_per_browse),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_REGISTER_NODES,
        Variant::UInt32(lim.max_nodes_per_register_nodes),
        start,
    );
    set_static(
        b,
        sid::MAX_NODES_PER_TRANSLATE,
        Variant::UInt32(lim.max_nodes_per_translate_browse_paths_to_node_ids),
        start,
    );
    set_static(
        b,
        sid::MAX_MONITORED_ITEMS_PER_CALL,
        Variant::UInt32(lim.max_monitored_items_per_call),
        start,
    );
    set_static(
        b,
        crate::generated::node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerNodeManagement,
        Variant::UInt32(lim.max_nodes_per_node_management),
        start,
    );
    // No software certificates: an empty array, not Null.
    if let Some(empty) = Variant::array(crate::types::BuiltinType::ExtensionObject, Vec::new()) {
        set_static(b, sid::SOFTWARE_CERTIFICATES, empty, start);
    }
    let subs = &config.subscriptions;
    for (id, v) in [
        (
            sid::MAX_SUBSCRIPTIONS_PER_SESSION,
            subs.max_subscriptions_per_session,
        ),
        (
            sid::MAX_MONITORED_ITEMS_PER_SUBSCRIPTION,
            subs.max_monitored_items_per_subscription,
        ),
        (sid::MAX_MONITORED_ITEMS_QUEUE_SIZE, subs.max_queue_size),
        (
            sid::MAX_SELECT_CLAUSE_PARAMETERS,
            config.events.max_select_clauses,
        ),
        (
            sid::MAX_WHERE_CLAUSE_PARAMETERS,
            config.events.max_event_filter_elements,
        ),
    ] {
        set_static(b, id, Variant::UInt32(v), start);
    }
}

use crate::address_space::event_notifier;

/// The HistoryServerCapabilities and HistoryRead limits of a server with a history store
/// that can do `caps` (the nodes are kept by `ns0::HISTORY`): what it does is true, what it
/// does not is false, and the HistoryServerCapabilities' AggregateFunctions folder organizes
/// exactly the aggregates it computes (the ServerCapabilities' is [`install_aggregate_functions`]'s).
pub fn install_history(
    b: &mut AddressSpaceBuilder,
    config: &ServerConfig,
    caps: &super::HistoryCapabilities,
    start: DateTime,
) {
    use crate::generated::node_ids as n;
    let lim = &config.operation_limits;
    let flags = [
        (
            n::HistoryServerCapabilities_AccessHistoryDataCapability,
            caps.access_history_data,
        ),
        (
            n::HistoryServerCapabilities_AccessHistoryEventsCapability,
            caps.access_history_events,
        ),
        (
            n::HistoryServerCapabilities_InsertDataCapability,
            caps.insert_data,
        ),
        (
            n::HistoryServerCapabilities_ReplaceDataCapability,
            caps.replace_data,
        ),
        (
            n::HistoryServerCapabilities_UpdateDataCapability,
            caps.update_data,
        ),
        (
            n::HistoryServerCapabilities_DeleteRawCapability,
            caps.delete_raw,
        ),
        (
            n::HistoryServerCapabilities_DeleteAtTimeCapability,
            caps.delete_at_time,
        ),
        (
            n::HistoryServerCapabilities_InsertEventCapability,
            caps.insert_event,
        ),
        (
            n::HistoryServerCapabilities_ReplaceEventCapability,
            caps.replace_event,
        ),
        (
            n::HistoryServerCapabilities_UpdateEventCapability,
            caps.update_event,
        ),
        (
            n::HistoryServerCapabilities_DeleteEventCapability,
            caps.delete_event,
        ),
        (
            n::HistoryServerCapabilities_InsertAnnotationCapability,
            false,
        ),
        (n::HistoryServerCapabilities_ServerTimestampSupported, true),
    ];
    for (id, on) in flags {
        set_static(b, id, Variant::Boolean(on), start);
    }
    set_static(
        b,
        n::HistoryServerCapabilities_MaxReturnDataValues,
        Variant::UInt32(lim.max_history_values_per_node),
        start,
    );
    set_static(
        b,
        n::HistoryServerCapabilities_MaxReturnEventValues,
        Variant::UInt32(if caps.access_history_events {
            lim.max_history_values_per_node
        } else {
            0
        }),
        start,
    );
    set_static(
        b,
        n::Server_ServerCapabilities_MaxHistoryContinuationPoints,
        // The bound HistoryRead applies per session (one more is BadNoContinuationPoints).
        Variant::UInt16(lim.max_history_continuation_points),
        start,
    );
    set_static(
        b,
        n::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData,
        Variant::UInt32(lim.max_nodes_per_history_read_data),
        start,
    );
    set_static(
        b,
        n::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadEvents,
        Variant::UInt32(lim.max_nodes_per_history_read_events),
        start,
    );
    set_static(
        b,
        n::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateData,
        Variant::UInt32(lim.max_nodes_per_history_update_data),
        start,
    );
    if caps.access_history_events {
        // The Server object's events are kept: its EventNotifier says HistoryRead too.
        // Its event history can be edited when the store edits events: HistoryWrite too.
        let write =
            caps.insert_event || caps.replace_event || caps.update_event || caps.delete_event;
        b.update(&NodeId::ns0(n::Server), |n| {
            if let ClassAttributes::Object { event_notifier } = &mut n.attributes {
                *event_notifier |= event_notifier::HISTORY_READ;
                if write {
                    *event_notifier |= event_notifier::HISTORY_WRITE;
                }
            }
        });
    }
    organize_aggregates(
        b,
        n::HistoryServerCapabilities_AggregateFunctions,
        &caps.aggregates,
    );
}

/// ServerCapabilities.AggregateFunctions organizes `aggregates`: the ones an AggregateFilter
/// on a monitored item computes (with or without a history store; the caller, which knows
/// the aggregate engine, names them).
pub fn install_aggregate_functions(b: &mut AddressSpaceBuilder, aggregates: &[NodeId]) {
    organize_aggregates(
        b,
        crate::generated::node_ids::Server_ServerCapabilities_AggregateFunctions,
        aggregates,
    );
}

fn organize_aggregates(b: &mut AddressSpaceBuilder, folder: u32, aggregates: &[NodeId]) {
    const ORGANIZES: u32 = 35;
    for a in aggregates {
        // The aggregate objects are namespace 0's; a reference to one that is not there is
        // not made.
        if b.contains(a) {
            let _ = b.add_reference(&NodeId::ns0(folder), ORGANIZES, a.clone(), true);
        }
    }
}
