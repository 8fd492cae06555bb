//! `dispatch`: session validation, unsupported services, response headers.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::{NodeId, StatusCode, Variant};

#[test]
fn unsupported_services_fault_with_bad_service_unsupported() {
    let mut h = Harness::new();
    let token = h.open_session();
    let hd = h.header(&token);
    let handle = hd.request_handle;
    let r = h.call(Request::Call(Box::new(CallRequest {
        request_header: hd,
        methods_to_call: vec![],
    })));
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadNothingToDo),
        "Call is routed"
    );
    assert_eq!(r.response_header().request_handle, handle);
    for req in [
        Request::HistoryRead(Box::default()),
        Request::QueryFirst(Box::default()),
        Request::QueryNext(Box::default()),
    ] {
        let mut req = req;
        *req.request_header_mut() = h.header(&token);
        let name = req.name();
        assert_eq!(
            fault_status(&h.call(req)),
            Some(StatusCode::BadServiceUnsupported),
            "{name}"
        );
    }
}

#[test]
fn session_services_need_a_valid_session() {
    let mut h = Harness::new();
    // No session at all.
    let r = h.read_request(&NodeId::NULL, NodeId::ns0(2259));
    assert_eq!(
        fault_status(&h.call(r)),
        Some(StatusCode::BadSessionIdInvalid)
    );
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::Call(Box::new(CallRequest {
        request_header: hd,
        methods_to_call: vec![],
    })));
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadSessionIdInvalid),
        "session checked before support"
    );
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::Cancel(Box::new(CancelRequest {
        request_header: hd,
        request_handle: 1,
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadSessionIdInvalid));
}

#[test]
fn read_and_write_are_routed_to_the_attribute_services() {
    let mut h = Harness::new();
    let token = h.open_session();
    let r = h.read_request(&token, NodeId::numeric(1, 1005));
    let Response::Read(rd) = h.call(r) else {
        panic!()
    };
    assert_eq!(rd.results.len(), 1);
    assert_eq!(rd.results[0].value, Variant::Int32(4));

    let hd = h.header(&token);
    let r = h.call(Request::Write(Box::new(WriteRequest {
        request_header: hd,
        nodes_to_write: vec![WriteValue {
            node_id: NodeId::numeric(1, 1005),
            attribute_id: 13,
            value: uaring_core::DataValue {
                value: Variant::Int32(77),
                ..Default::default()
            },
            ..WriteValue::default()
        }],
    })));
    let Response::Write(w) = r else {
        panic!("{r:?}")
    };
    assert_eq!(w.results, vec![StatusCode::Good]);
    let r = h.read_request(&token, NodeId::numeric(1, 1005));
    let Response::Read(rd) = h.call(r) else {
        panic!()
    };
    assert_eq!(rd.results[0].value, Variant::Int32(77));
}

#[test]
fn successful_responses_carry_handle_and_timestamp() {
    // `Harness::call` asserts both for every response; this exercises a few kinds.
    let mut h = Harness::new();
    let token = h.open_session();
    h.advance_ms(1234);
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(84))]);
    let r = h.call(r);
    assert_eq!(r.response_header().service_result, StatusCode::Good);
    assert_eq!(r.response_header().timestamp, h.now.utc);
}

#[test]
fn request_age_limit() {
    let mut config = ServerConfig::default();
    config.sessions.max_request_age_ms = Some(5_000);
    let mut h = Harness::with_config(config);
    let token = h.open_session();
    let mut r = h.read_request(&token, NodeId::ns0(2259));
    r.request_header_mut().timestamp = h.now.utc.add_ms(-6_000.0);
    assert_eq!(fault_status(&h.call(r)), Some(StatusCode::BadTimeout));
    let mut r = h.read_request(&token, NodeId::ns0(2259));
    r.request_header_mut().timestamp = h.now.utc.add_ms(-4_000.0);
    assert!(matches!(h.call(r), Response::Read(_)));
    let mut r = h.read_request(&token, NodeId::ns0(2259));
    r.request_header_mut().timestamp = uaring_core::DateTime::NULL;
    assert!(
        matches!(h.call(r), Response::Read(_)),
        "a null timestamp is not checked"
    );
}

#[test]
fn secure_channel_messages_are_not_services() {
    let mut h = Harness::new();
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::CloseSecureChannel(Box::new(
        CloseSecureChannelRequest { request_header: hd },
    )));
    assert_eq!(fault_status(&r), Some(StatusCode::BadServiceUnsupported));
}

/// Every request type, decoded from zeros (defaults: empty arrays, null ids), with and
/// without a valid session: no panic, one response with the request's handle each.
#[test]
fn every_request_type_is_answered() {
    let mut h = Harness::new();
    let token = h.open_session();
    let zeros = vec![0u8; 4096];
    let mut kinds = 0;
    for id in 0..20_000u32 {
        let mut d = uaring_core::Decoder::new(&zeros, uaring_core::DecodeLimits::default());
        let Ok(Some(req)) = Request::decode_body(&NodeId::ns0(id), &mut d) else {
            continue;
        };
        kinds += 1;
        for t in [NodeId::NULL, token.clone()] {
            let mut req = req.clone();
            *req.request_header_mut() = h.header(&t);
            let name = req.name();
            let resp = h.call(req);
            if t.is_null()
                && !matches!(
                    name,
                    "GetEndpointsRequest" | "FindServersRequest" | "CreateSessionRequest"
                )
            {
                assert!(
                    fault_status(&resp).is_some(),
                    "{name} without a session: {resp:?}"
                );
            }
        }
    }
    assert!(kinds >= 35, "{kinds} request types");
    // The session is still usable (unless a CloseSession closed it: reopen and check).
    let token = h.open_session();
    let r = h.read_request(&token, NodeId::ns0(2258));
    assert!(matches!(h.call(r), Response::Read(_)));
}
