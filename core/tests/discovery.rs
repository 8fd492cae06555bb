//! Discovery service set through `dispatch`: no session needed.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::{NodeId, StatusCode, UaString};

const UATCP: &str = "http://opcfoundation.org/UA-Profile/Transport/uatcp-uasc-uabinary";

fn get_endpoints(h: &mut Harness, url: &str, profiles: Vec<UaString>) -> GetEndpointsResponse {
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::GetEndpoints(Box::new(GetEndpointsRequest {
        request_header: hd,
        endpoint_url: if url.is_empty() {
            UaString::null()
        } else {
            url.into()
        },
        locale_ids: vec![],
        profile_uris: profiles,
    })));
    match r {
        Response::GetEndpoints(g) => *g,
        other => panic!("{other:?}"),
    }
}

#[test]
fn get_endpoints_without_a_session() {
    let mut h = Harness::new();
    let g = get_endpoints(&mut h, "opc.tcp://10.1.2.3:4840/uaring", vec![]);
    assert_eq!(g.response_header.service_result, StatusCode::Good);
    assert_eq!(g.endpoints.len(), 1);
    let e = &g.endpoints[0];
    assert_eq!(
        e.endpoint_url.as_str(),
        "opc.tcp://10.1.2.3:4840/uaring",
        "the URL the client used"
    );
    assert_eq!(e.security_mode, MessageSecurityMode::None);
    assert_eq!(e.security_policy_uri.as_str(), NONE_URI);
    assert_eq!(e.security_level, 0);
    assert_eq!(e.transport_profile_uri.as_str(), UATCP);
    assert_eq!(e.user_identity_tokens.len(), 1);
    assert_eq!(e.user_identity_tokens[0].policy_id.as_str(), "anonymous");
    assert_eq!(
        e.user_identity_tokens[0].token_type,
        UserTokenType::Anonymous
    );
    assert_eq!(e.server.application_uri.as_str(), "urn:uaring:server");
    assert_eq!(e.server.application_type, ApplicationType::Server);
    assert_eq!(
        e.server.discovery_urls,
        vec![UaString::from("opc.tcp://10.1.2.3:4840/uaring")]
    );
    assert!(e.server_certificate.is_null());
}

#[test]
fn get_endpoints_url_falls_back_to_hello() {
    let mut h = Harness::new();
    let g = get_endpoints(&mut h, "", vec![]);
    assert_eq!(g.endpoints[0].endpoint_url.as_str(), HEL_URL);
    let g = get_endpoints(&mut h, "http://not-uatcp/", vec![]);
    assert_eq!(g.endpoints[0].endpoint_url.as_str(), HEL_URL);
}

#[test]
fn get_endpoints_profile_filter() {
    let mut h = Harness::new();
    assert_eq!(
        get_endpoints(&mut h, "", vec![UATCP.into()])
            .endpoints
            .len(),
        1
    );
    assert!(get_endpoints(
        &mut h,
        "",
        vec!["http://opcfoundation.org/UA-Profile/Transport/https-uabinary".into()]
    )
    .endpoints
    .is_empty());
}

/// CreateSession lists the endpoints of GetEndpoints, with the parameters Part 4 §5.7.2.2
/// recommends (and clients verify) and the server's description, but without a copy of the
/// server certificate in each (the response carries it once), which keeps the response small.
#[test]
fn create_session_lists_the_same_endpoints_with_the_recommended_parameters() {
    let mut h = Harness::new();
    let cs = h.create_session();
    let g = get_endpoints(&mut h, "opc.tcp://req-host:4840/uaring", vec![]);
    assert_eq!(cs.server_endpoints.len(), g.endpoints.len());
    for (c, e) in cs.server_endpoints.iter().zip(&g.endpoints) {
        assert_eq!(c.server.application_uri, e.server.application_uri);
        assert!(!c.server.application_uri.is_empty());
        assert_eq!(
            (
                &c.endpoint_url,
                c.security_mode,
                &c.security_policy_uri,
                &c.user_identity_tokens,
                &c.transport_profile_uri,
                c.security_level
            ),
            (
                &e.endpoint_url,
                e.security_mode,
                &e.security_policy_uri,
                &e.user_identity_tokens,
                &e.transport_profile_uri,
                e.security_level
            )
        );
        assert_eq!(c.server, e.server);
        assert!(c.server_certificate.is_null());
    }
}

#[test]
fn find_servers() {
    let mut h = Harness::with_config(ServerConfig::contract());
    let find = |h: &mut Harness, uris: Vec<UaString>| {
        let hd = h.header(&NodeId::NULL);
        match h.call(Request::FindServers(Box::new(FindServersRequest {
            request_header: hd,
            endpoint_url: UaString::null(),
            locale_ids: vec!["de".into()],
            server_uris: uris,
        }))) {
            Response::FindServers(f) => *f,
            other => panic!("{other:?}"),
        }
    };
    let f = find(&mut h, vec![]);
    assert_eq!(f.servers.len(), 1);
    assert_eq!(
        f.servers[0].application_uri.as_str(),
        "urn:o6:benchmark:server"
    );
    assert_eq!(f.servers[0].discovery_urls, vec![UaString::from(HEL_URL)]);
    assert_eq!(
        find(&mut h, vec!["urn:o6:benchmark:server".into()])
            .servers
            .len(),
        1
    );
    assert!(find(&mut h, vec!["urn:someone:else".into()])
        .servers
        .is_empty());
}

#[test]
fn discovery_server_services_are_unsupported() {
    let mut h = Harness::new();
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::RegisterServer(Box::new(RegisterServerRequest {
        request_header: hd,
        ..Default::default()
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadServiceUnsupported));
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::FindServersOnNetwork(Box::new(
        FindServersOnNetworkRequest {
            request_header: hd,
            ..Default::default()
        },
    )));
    assert_eq!(fault_status(&r), Some(StatusCode::BadServiceUnsupported));
}
