//! Set-up shared by the benches that serve one shard in-process (read_scale, scale,
//! callgrind): the request context and start time of a bench shard, an activated anonymous
//! session, and the plant of N Double Variables `ns=1;s=Plant.V<i>` under the folder
//! `ns=1;s=Plant`. Each bench includes it with `#[path = "support/mod.rs"] mod support;` and
//! uses what it needs.
#![allow(dead_code)]

use uaring_core::address_space::build::make::{folder, variable};
use uaring_core::address_space::{ids, AddressSpaceBuilder};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, CreateSessionRequest, MessageSecurityMode,
    RequestHeader,
};
use uaring_core::server::context::RequestContext;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::types::{DataValue, QualifiedName, Variant};
use uaring_core::{DateTime, ExtensionObject, NodeId, Now, UaString};

/// The secure channel every bench request arrives on.
pub const CHANNEL: u32 = 7;

/// The context of a request on [`CHANNEL`] with security None.
pub fn ctx() -> RequestContext<'static> {
    RequestContext {
        channel_id: CHANNEL,
        security_policy_uri: "http://opcfoundation.org/UA/SecurityPolicy#None",
        security_mode: MessageSecurityMode::None,
        client_certificate: None,
        peer: None,
        endpoint_url: "opc.tcp://bench:4840",
    }
}

/// The benches' fixed start time (monotonic 1 s, 2023-11-14 UTC).
pub fn start() -> Now {
    Now::new(
        1_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

/// Creates and activates an anonymous session on `state` (through `dispatch`, on
/// [`CHANNEL`], at `now`); its authentication token.
pub fn open_session(state: &mut ServiceState, now: Now) -> NodeId {
    let Response::CreateSession(cs) = dispatch(
        state,
        &ctx(),
        Request::CreateSession(Box::new(CreateSessionRequest {
            requested_session_timeout: 3_600_000.0,
            ..Default::default()
        })),
        now,
    ) else {
        panic!("CreateSession")
    };
    let token = cs.authentication_token.clone();
    let r = dispatch(
        state,
        &ctx(),
        Request::ActivateSession(Box::new(ActivateSessionRequest {
            request_header: RequestHeader {
                authentication_token: token.clone(),
                request_handle: 1,
                ..Default::default()
            },
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: UaString::from("anonymous"),
            }),
            ..Default::default()
        })),
        now,
    );
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    token
}

/// The plant's Variable `i`: `ns=1;s=Plant.V<i>`.
pub fn plant_id(i: u32) -> NodeId {
    NodeId::string(1, format!("Plant.V{i}"))
}

/// Adds the folder `ns=1;s=Plant` (in Objects) and `n` Double Variables `Plant.V<i>` (value
/// `i`, access level `access`) referenced from it by `reference` (HasComponent, Organizes).
pub fn add_plant(
    b: &mut AddressSpaceBuilder,
    n: u32,
    access: u8,
    reference: u32,
) -> Result<(), String> {
    add_plant_named(b, n, access, reference, plant_id)
}

/// [`add_plant`] with the Variables' NodeIds from `id` (browse names stay `V<i>`).
pub fn add_plant_named(
    b: &mut AddressSpaceBuilder,
    n: u32,
    access: u8,
    reference: u32,
    id: impl Fn(u32) -> NodeId,
) -> Result<(), String> {
    let plant = NodeId::string(1, "Plant");
    b.reserve(n as usize + 1);
    b.add(folder(
        plant.clone(),
        QualifiedName::new(1, "Plant"),
        NodeId::ns0(ids::OBJECTS_FOLDER),
    ))?;
    for i in 0..n {
        b.add(variable(
            id(i),
            QualifiedName::new(1, &format!("V{i}")),
            NodeId::ns0(11),
            -1,
            Vec::new(),
            DataValue {
                value: Variant::Double(i as f64),
                ..Default::default()
            },
            access,
            0.0,
            Some((plant.clone(), reference)),
        ))?;
    }
    Ok(())
}
