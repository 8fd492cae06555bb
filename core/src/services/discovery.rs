//! Discovery service set (Part 4 §5.5): GetEndpoints and FindServers. No session needed.
//! FindServersOnNetwork and RegisterServer(2) are answered BadServiceUnsupported by the
//! dispatcher (this server is no discovery server).

use crate::generated::messages::Response;
use crate::generated::types::{
    ApplicationDescription, ApplicationType, EndpointDescription, FindServersRequest,
    FindServersResponse, GetEndpointsRequest, GetEndpointsResponse, MessageSecurityMode,
    UserTokenPolicy,
};
use crate::server::context::RequestContext;
use crate::server::service_state::ServiceState;
use crate::services::response_header;
use crate::time::Now;
use crate::types::{ByteString, LocalizedText, UaString};

/// The UA-TCP / UA-SC / UA-Binary transport profile.
pub const TRANSPORT_PROFILE_UATCP: &str =
    "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary";
/// SecurityPolicy None.
pub const SECURITY_POLICY_NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";
/// The policy id of the anonymous user token policy.
pub const ANONYMOUS_POLICY_ID: &str = "anonymous";
/// Used when neither the request nor the HEL message carried a usable `opc.tcp://` URL.
pub const FALLBACK_ENDPOINT_URL: &str = "opc.tcp://localhost:4840";

/// The user token policies of endpoints with SecurityPolicy None (see
/// [`crate::services::identity::user_token_policies_for`] for secured endpoints).
pub fn user_token_policies(state: &ServiceState) -> Vec<UserTokenPolicy> {
    crate::services::identity::user_token_policies_for(state, SECURITY_POLICY_NONE_URI)
}

/// Part 4 §7.14 securityLevel: a relative measure; None is 0, SignAndEncrypt ranks above
/// Sign, and within a mode the stronger policy ranks higher.
pub fn security_level(policy_uri: &str, mode: MessageSecurityMode) -> u8 {
    let policy_rank: u8 = match policy_uri.rsplit('#').next().unwrap_or("") {
        "None" => 0,
        "Basic128Rsa15" => 1,
        "Basic256" => 2,
        "Aes128_Sha256_RsaOaep" => 3,
        "Basic256Sha256" => 4,
        "Aes256_Sha256_RsaPss" => 5,
        _ => 1,
    };
    match mode {
        MessageSecurityMode::None => 0,
        MessageSecurityMode::Sign => 10 + policy_rank,
        _ => 20 + policy_rank,
    }
}

/// The largest request message the server accepts (CreateSession.maxRequestMessageSize).
pub fn max_message_size(state: &ServiceState) -> u32 {
    state.transport_limits().max_message_size
}

/// The endpoint URL to advertise: the URL the client used (request, else HEL), so a client
/// that reached the server under some host name or address is told that one; otherwise the
/// fallback.
pub fn advertised_url<'a>(request_url: &'a str, hel_url: &'a str) -> &'a str {
    // Bytes, not a str slice: a client's URL may have a multi-byte character at byte 10.
    let usable = |u: &str| {
        u.len() > 10
            && u.as_bytes()
                .get(..10)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"opc.tcp://"))
    };
    if usable(request_url) {
        request_url
    } else if usable(hel_url) {
        hel_url
    } else {
        FALLBACK_ENDPOINT_URL
    }
}

/// This server's ApplicationDescription.
pub fn application_description(state: &ServiceState, endpoint_url: &str) -> ApplicationDescription {
    let app = &state.shared().config.application;
    ApplicationDescription {
        application_uri: app.effective_application_uri().into(),
        product_uri: app.product_uri.as_str().into(),
        application_name: LocalizedText::new("en", &app.application_name),
        application_type: ApplicationType::Server,
        gateway_server_uri: UaString::null(),
        discovery_profile_uri: UaString::null(),
        discovery_urls: vec![endpoint_url.into()],
    }
}

/// Every endpoint, advertised under `endpoint_url`, whose transport profile is in
/// `profile_uris` (empty: all).
pub fn endpoint_descriptions(
    state: &ServiceState,
    endpoint_url: &str,
    profile_uris: &[UaString],
) -> Vec<EndpointDescription> {
    if !profile_uris.is_empty()
        && !profile_uris
            .iter()
            .any(|p| p.as_str() == TRANSPORT_PROFILE_UATCP)
    {
        return Vec::new();
    }
    endpoints(
        state,
        endpoint_url,
        application_description(state, endpoint_url),
        true,
    )
}

/// One EndpointDescription per policy and mode, each with `server`, and with the policy's
/// certificate if `certificates`.
fn endpoints(
    state: &ServiceState,
    endpoint_url: &str,
    server: ApplicationDescription,
    certificates: bool,
) -> Vec<EndpointDescription> {
    state
        .security()
        .endpoints()
        .iter()
        .map(|e| EndpointDescription {
            user_identity_tokens: crate::services::identity::user_token_policies_for(
                state,
                &e.policy_uri,
            ),
            endpoint_url: endpoint_url.into(),
            server: server.clone(),
            server_certificate: if certificates {
                crate::services::identity::endpoint_certificate(state, &e.policy_uri)
            } else {
                ByteString::null()
            },
            security_mode: e.mode,
            security_level: security_level(&e.policy_uri, e.mode),
            security_policy_uri: e.policy_uri.as_str().into(),
            transport_profile_uri: TRANSPORT_PROFILE_UATCP.into(),
        })
        .collect()
}

/// The endpoints CreateSession returns (Part 4 §5.7.2.2, serverEndpoints): those of
/// [`endpoint_descriptions`] without their serverCertificate. The specification recommends
/// returning only server.applicationUri, endpointUrl, securityMode, securityPolicyUri,
/// userIdentityTokens, transportProfileUri and securityLevel (the parameters clients verify),
/// the rest null. The server description (about 150 bytes) stays: UA-.NETStandard's client
/// copies its name, type and product URI into the endpoint it shows. The certificate goes: the
/// response carries it once, in serverCertificate. With seven endpoints and a 2048-bit
/// certificate, each endpoint is about 450 bytes instead of 1,320 and the response about 4.5 KB
/// instead of 10.5 KB, on every session establishment.
pub fn session_endpoint_descriptions(
    state: &ServiceState,
    endpoint_url: &str,
) -> Vec<EndpointDescription> {
    endpoints(
        state,
        endpoint_url,
        application_description(state, endpoint_url),
        false,
    )
}

/// GetEndpoints (Part 4 §5.5.4).
pub fn get_endpoints(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    req: &GetEndpointsRequest,
    now: Now,
) -> Response {
    let url = advertised_url(req.endpoint_url.as_str(), ctx.endpoint_url);
    Response::GetEndpoints(Box::new(GetEndpointsResponse {
        response_header: response_header(req.request_header.request_handle, now),
        endpoints: endpoint_descriptions(state, url, &req.profile_uris),
    }))
}

/// FindServers (Part 4 §5.5.2): this server only, unless `serverUris` names others only.
pub fn find_servers(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    req: &FindServersRequest,
    now: Now,
) -> Response {
    let url = advertised_url(req.endpoint_url.as_str(), ctx.endpoint_url);
    let me = application_description(state, url);
    let wanted = req.server_uris.is_empty()
        || req
            .server_uris
            .iter()
            .any(|u| u.as_str() == me.application_uri.as_str());
    // One ApplicationName, in English; localeIds cannot select another.
    let _ = &req.locale_ids;
    Response::FindServers(Box::new(FindServersResponse {
        response_header: response_header(req.request_header.request_handle, now),
        servers: if wanted { vec![me] } else { Vec::new() },
    }))
}
