//! Session service set through `dispatch`: lifecycle, timeouts, pool limits, identity tokens
//! and channel transfer.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::service_state::{channel_shard, token_shard, AUTH_TOKEN_LEN};
use uaring_core::{Decode, DecodeLimits, Encode, ExtensionObject, Identifier, NodeId, StatusCode};

fn browse_objects(h: &mut Harness, token: &NodeId) -> Response {
    let r = h.browse_request(token, 0, vec![hierarchical(NodeId::ns0(85))]);
    h.call(r)
}

#[test]
fn lifecycle_create_activate_use_close() {
    let mut h = Harness::new();
    let cs = h.create_session();
    assert_eq!(cs.response_header.service_result, StatusCode::Good);
    assert_ne!(cs.session_id, cs.authentication_token);
    assert_eq!(
        cs.server_nonce.as_bytes().len(),
        32,
        "server nonce is 32 bytes even with None"
    );
    assert_eq!(cs.revised_session_timeout, 60_000.0);
    assert!(cs.server_signature.signature.is_null() && cs.server_signature.algorithm.is_null());
    assert!(cs.server_certificate.is_null());
    assert_eq!(cs.server_endpoints.len(), 1);
    assert_eq!(h.state.session_count(), 1);
    let token = cs.authentication_token.clone();
    let ch = h.channel;
    let r = h.activate_on(ch, &token, Harness::anonymous());
    let Response::ActivateSession(a) = r else {
        panic!("{r:?}")
    };
    assert_eq!(a.server_nonce.as_bytes().len(), 32);
    assert_ne!(
        a.server_nonce, cs.server_nonce,
        "a new nonce on every activation"
    );

    let r = browse_objects(&mut h, &token);
    let Response::Browse(b) = r else {
        panic!("{r:?}")
    };
    assert_eq!(b.results[0].status_code, StatusCode::Good);
    assert!(!b.results[0].references.is_empty());

    // Activating again on the same channel is allowed and gives another nonce.
    let r = h.activate_on(ch, &token, Harness::anonymous());
    let Response::ActivateSession(a2) = r else {
        panic!("{r:?}")
    };
    assert_ne!(a2.server_nonce, a.server_nonce);

    let hd = h.header(&token);
    let r = h.call(Request::CloseSession(Box::new(CloseSessionRequest {
        request_header: hd,
        delete_subscriptions: true,
    })));
    assert!(matches!(r, Response::CloseSession(_)), "{r:?}");
    assert_eq!(h.state.session_count(), 0);

    assert_eq!(
        fault_status(&browse_objects(&mut h, &token)),
        Some(StatusCode::BadSessionIdInvalid)
    );
    let hd = h.header(&token);
    let r = h.call(Request::CloseSession(Box::new(CloseSessionRequest {
        request_header: hd,
        delete_subscriptions: true,
    })));
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadSessionIdInvalid),
        "closing twice"
    );
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, Harness::anonymous())),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn close_before_activation_is_allowed() {
    let mut h = Harness::new();
    let cs = h.create_session();
    let hd = h.header(&cs.authentication_token);
    let r = h.call(Request::CloseSession(Box::new(CloseSessionRequest {
        request_header: hd,
        delete_subscriptions: false,
    })));
    assert!(matches!(r, Response::CloseSession(_)), "{r:?}");
    assert_eq!(h.state.session_count(), 0);
}

#[test]
fn create_session_response_round_trips_with_a_32_byte_nonce() {
    let mut h = Harness::new();
    let cs = h.create_session();
    let bytes = cs.to_bytes();
    let back = CreateSessionResponse::from_bytes(&bytes, DecodeLimits::default()).unwrap();
    assert_eq!(back, cs);
    assert_eq!(back.server_nonce.0.as_ref().map(Vec::len), Some(32));
}

#[test]
fn revised_timeout_is_clamped_to_the_limits() {
    let mut h = Harness::new();
    let limits = uaring_core::config::SessionLimits::default();
    let ch = h.channel;
    for (requested, expected) in [
        (1.0, limits.session_timeout_min_ms),
        (1e15, limits.session_timeout_max_ms),
        (0.0, limits.session_timeout_max_ms),
        (-5.0, limits.session_timeout_max_ms),
        (f64::NAN, limits.session_timeout_max_ms),
        (30_000.0, 30_000.0),
    ] {
        let Response::CreateSession(cs) = h.create_session_on(ch, requested) else {
            panic!()
        };
        assert_eq!(
            cs.revised_session_timeout, expected,
            "requested {requested}"
        );
    }
}

/// The shard's only deadlines are the sessions'.
fn sessions_only() -> ServerConfig {
    ServerConfig::default()
}

#[test]
fn session_times_out_unless_used() {
    let mut h = Harness::with_config(sessions_only());
    let ch = h.channel;
    let Response::CreateSession(cs) = h.create_session_on(ch, 20_000.0) else {
        panic!()
    };
    assert_eq!(cs.revised_session_timeout, 20_000.0);
    let token = cs.authentication_token.clone();
    assert!(matches!(
        h.activate_on(ch, &token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    assert_eq!(
        h.state.next_deadline(),
        Some(h.now.mono_ns + 20_000_000_000)
    );

    // Used every 15 s: survives well past one timeout.
    for _ in 0..4 {
        h.advance_ms(15_000);
        if let Some(d) = h.state.next_deadline() {
            if d <= h.now.mono_ns {
                h.state.on_timer(h.now);
            }
        }
        assert!(matches!(
            browse_objects(&mut h, &token),
            Response::Browse(_)
        ));
    }
    assert_eq!(h.state.session_count(), 1);
    // The wake-up may come early (the session was used since it was armed), never late.
    h.state.on_timer(h.now);
    let d = h.state.next_deadline().unwrap();
    assert!(
        d > h.now.mono_ns && d <= h.now.mono_ns + 20_000_000_000,
        "{d}"
    );

    // Unused for longer than the timeout: the timer closes it.
    h.advance_ms(20_001);
    h.state.on_timer(h.now);
    assert_eq!(h.state.session_count(), 0);
    assert_eq!(h.state.next_deadline(), None);
    assert_eq!(
        fault_status(&browse_objects(&mut h, &token)),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn an_expired_session_is_refused_even_before_the_timer_runs() {
    let mut h = Harness::new();
    let ch = h.channel;
    let Response::CreateSession(cs) = h.create_session_on(ch, 10_000.0) else {
        panic!()
    };
    h.advance_ms(10_001);
    let r = h.activate_on(ch, &cs.authentication_token, Harness::anonymous());
    assert_eq!(fault_status(&r), Some(StatusCode::BadSessionIdInvalid));
    assert_eq!(h.state.session_count(), 0);
}

#[test]
fn full_pool_is_bad_too_many_sessions() {
    let mut config = ServerConfig::default();
    config.sessions.max_sessions_per_shard = 3;
    let mut h = Harness::with_config(config);
    let ch = h.channel;
    let tokens: Vec<NodeId> = (0..3)
        .map(|_| h.create_session().authentication_token)
        .collect();
    let r = h.create_session_on(ch, 60_000.0);
    assert_eq!(fault_status(&r), Some(StatusCode::BadTooManySessions));
    assert_eq!(h.state.session_count(), 3);

    // Closing one frees its slot; the old token does not reach the new session.
    let hd = h.header(&tokens[1]);
    assert!(matches!(
        h.call(Request::CloseSession(Box::new(CloseSessionRequest {
            request_header: hd,
            delete_subscriptions: true
        }))),
        Response::CloseSession(_)
    ));
    let fresh = h.create_session().authentication_token;
    assert_ne!(fresh, tokens[1]);
    assert_eq!(
        fault_status(&h.activate_on(ch, &tokens[1], Harness::anonymous())),
        Some(StatusCode::BadSessionIdInvalid)
    );
    assert!(matches!(
        h.activate_on(ch, &fresh, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    assert_eq!(
        fault_status(&h.create_session_on(ch, 60_000.0)),
        Some(StatusCode::BadTooManySessions)
    );

    // Expired sessions free their slots too.
    h.advance_ms(61_000);
    h.state.on_timer(h.now);
    assert_eq!(h.state.session_count(), 0);
    assert!(matches!(
        h.create_session_on(ch, 60_000.0),
        Response::CreateSession(_)
    ));
}

#[test]
fn many_create_close_cycles_keep_the_deadline_heap_bounded() {
    let mut config = sessions_only();
    config.sessions.max_sessions_per_shard = 4;
    let mut h = Harness::with_config(config);
    for _ in 0..1000 {
        let t = h.create_session().authentication_token;
        let hd = h.header(&t);
        let r = h.call(Request::CloseSession(Box::new(CloseSessionRequest {
            request_header: hd,
            delete_subscriptions: true,
        })));
        assert!(matches!(r, Response::CloseSession(_)));
    }
    assert_eq!(h.state.session_count(), 0);
    // Stale deadline entries only ever cause one harmless wake-up each.
    h.advance_ms(3_600_001);
    h.state.on_timer(h.now);
    assert_eq!(h.state.next_deadline(), None);
}

#[test]
fn identity_tokens() {
    let mut h = Harness::new();
    let ch = h.channel;
    let token = h.create_session().authentication_token;

    let user = ExtensionObject::from_struct(&UserNameIdentityToken {
        policy_id: "username".into(),
        user_name: "admin".into(),
        password: b"secret".to_vec().into(),
        ..UserNameIdentityToken::default()
    });
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, user)),
        Some(StatusCode::BadIdentityTokenRejected)
    );
    let x509 = ExtensionObject::from_struct(&X509IdentityToken {
        policy_id: "x509".into(),
        ..X509IdentityToken::default()
    });
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, x509)),
        Some(StatusCode::BadIdentityTokenRejected)
    );

    let wrong_policy = ExtensionObject::from_struct(&AnonymousIdentityToken {
        policy_id: "nope".into(),
    });
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, wrong_policy)),
        Some(StatusCode::BadIdentityTokenInvalid)
    );
    let not_a_token = ExtensionObject::from_struct(&ReadValueId::default());
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, not_a_token)),
        Some(StatusCode::BadIdentityTokenInvalid)
    );
    // An anonymous token whose body does not decode.
    let mut broken = Harness::anonymous();
    broken.body = uaring_core::ExtensionObjectBody::Binary(vec![0xFF]);
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, broken)),
        Some(StatusCode::BadIdentityTokenInvalid)
    );

    // None of those activated the session. A null token is anonymous.
    assert!(matches!(
        h.activate_on(ch, &token, ExtensionObject::null()),
        Response::ActivateSession(_)
    ));
    assert!(matches!(
        browse_objects(&mut h, &token),
        Response::Browse(_)
    ));
}

/// Part 4 §5.7.3.1: a request other than ActivateSession or CloseSession before the
/// session is activated is refused, and the server closes the session.
#[test]
fn a_request_before_activation_closes_the_session() {
    let mut h = Harness::new();
    let cs = h.create_session();
    let token = cs.authentication_token.clone();
    assert_eq!(h.state.session_count(), 1);
    assert_eq!(
        fault_status(&browse_objects(&mut h, &token)),
        Some(StatusCode::BadSessionNotActivated)
    );
    assert_eq!(h.state.session_count(), 0, "the session was closed");
    let ch = h.channel;
    assert_eq!(
        fault_status(&h.activate_on(ch, &token, Harness::anonymous())),
        Some(StatusCode::BadSessionIdInvalid)
    );
    assert_eq!(
        fault_status(&browse_objects(&mut h, &token)),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn session_moves_to_a_new_channel_on_activation() {
    let mut h = Harness::new();
    let ch1 = h.channel;
    let ch2 = h.state.next_channel_id();
    assert_ne!(ch1, ch2);

    // The first activation must come over the creating channel.
    let cs = h.create_session();
    let t0 = cs.authentication_token;
    assert_eq!(
        fault_status(&h.activate_on(ch2, &t0, Harness::anonymous())),
        Some(StatusCode::BadSessionIdInvalid)
    );

    let token = h.open_session();
    // Only the bound channel may use it.
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert_eq!(
        fault_status(&h.call_on(ch2, r)),
        Some(StatusCode::BadSessionIdInvalid)
    );

    // The channel goes away; the session survives, unbound.
    h.state.on_channel_closed(ch1);
    assert_eq!(h.state.session_count(), 2);
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert_eq!(
        fault_status(&h.call_on(ch1, r)),
        Some(StatusCode::BadSessionIdInvalid)
    );

    // Reactivated on the new channel, it works there and only there.
    assert!(matches!(
        h.activate_on(ch2, &token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert!(matches!(h.call_on(ch2, r), Response::Browse(_)));
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert_eq!(
        fault_status(&h.call_on(ch1, r)),
        Some(StatusCode::BadSessionIdInvalid)
    );

    // Transfer between two live channels works too (same application, same user).
    let ch3 = h.state.next_channel_id();
    assert!(matches!(
        h.activate_on(ch3, &token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert_eq!(
        fault_status(&h.call_on(ch2, r)),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn tokens_and_channel_ids_carry_the_shard() {
    let mut h = Harness::with_shard(ServerConfig::default(), 5);
    assert_eq!(channel_shard(h.channel), 5);
    let a = h.state.next_channel_id();
    assert_eq!(channel_shard(a), 5);
    assert_ne!(a, h.channel);
    let t1 = h.create_session().authentication_token;
    let t2 = h.create_session().authentication_token;
    assert_ne!(t1, t2);
    assert_eq!(token_shard(&t1), Some(5));
    let Identifier::ByteString(b) = &t1.identifier else {
        panic!("{t1:?}")
    };
    assert_eq!(b.len(), AUTH_TOKEN_LEN);
    assert_eq!(t1.namespace, 0);

    // Shard 0 channel ids are never 0.
    let mut h0 = Harness::new();
    assert_ne!(h0.channel, 0);
    assert_ne!(h0.state.next_channel_id(), 0);

    // A token of another shard is not found here (routing it is a later issue).
    let t_other = h0.create_session().authentication_token;
    assert_eq!(token_shard(&t_other), Some(0));
    let ch = h.channel;
    assert_eq!(
        fault_status(&h.activate_on(ch, &t_other, Harness::anonymous())),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn forged_tokens_are_refused() {
    let mut h = Harness::new();
    let ch = h.channel;
    let token = h.open_session();
    let Identifier::ByteString(b) = &token.identifier else {
        panic!()
    };
    // Same shard and slot, different secret.
    let mut forged = b.clone();
    forged[31] ^= 1;
    for t in [
        NodeId::byte_string(0, forged),
        NodeId::byte_string(1, b.clone()),
        NodeId::byte_string(0, b[..31].to_vec()),
        NodeId::ns0(1),
        NodeId::NULL,
        NodeId::string(0, "x"),
    ] {
        let r = h.browse_request(&t, 0, vec![hierarchical(NodeId::ns0(85))]);
        assert_eq!(
            fault_status(&h.call_on(ch, r)),
            Some(StatusCode::BadSessionIdInvalid),
            "{t:?}"
        );
    }
}

#[test]
fn cancel_answers_good_with_zero() {
    let mut h = Harness::new();
    let token = h.open_session();
    let hd = h.header(&token);
    let r = h.call(Request::Cancel(Box::new(CancelRequest {
        request_header: hd,
        request_handle: 7,
    })));
    let Response::Cancel(c) = r else {
        panic!("{r:?}")
    };
    assert_eq!(c.cancel_count, 0);
    assert_eq!(c.response_header.service_result, StatusCode::Good);
}

#[test]
fn secured_channels_require_a_client_nonce() {
    let mut h = Harness::new();
    let ctx = uaring_core::server::context::RequestContext {
        security_policy_uri: "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256",
        security_mode: MessageSecurityMode::SignAndEncrypt,
        ..Harness::ctx(h.channel)
    };
    let hd = h.header(&NodeId::NULL);
    let req = |nonce: Vec<u8>, hd: RequestHeader| {
        Request::CreateSession(Box::new(CreateSessionRequest {
            request_header: hd,
            client_nonce: nonce.into(),
            requested_session_timeout: 60_000.0,
            ..CreateSessionRequest::default()
        }))
    };
    let r = uaring_core::services::dispatch(&mut h.state, &ctx, req(vec![1; 16], hd), h.now);
    assert_eq!(fault_status(&r), Some(StatusCode::BadNonceInvalid));
    let hd = h.header(&NodeId::NULL);
    let r = uaring_core::services::dispatch(&mut h.state, &ctx, req(vec![1; 32], hd), h.now);
    // The nonce is fine; this shard has no Basic256Sha256 policy to sign with (the signed
    // path is tested with the RSA policies in crypto/tests/session_security.rs).
    assert_eq!(
        fault_status(&r),
        Some(StatusCode::BadSecurityPolicyRejected),
        "{r:?}"
    );
}

#[test]
fn transfer_works_when_the_client_sent_its_certificate_on_a_none_channel() {
    let mut h = Harness::new();
    let ch1 = h.channel;
    let hd = h.header(&NodeId::NULL);
    let r = h.call(Request::CreateSession(Box::new(CreateSessionRequest {
        request_header: hd,
        client_certificate: vec![0x30, 0x82, 1, 2, 3].into(),
        requested_session_timeout: 60_000.0,
        ..CreateSessionRequest::default()
    })));
    let Response::CreateSession(cs) = r else {
        panic!("{r:?}")
    };
    let token = cs.authentication_token;
    assert!(matches!(
        h.activate_on(ch1, &token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    let ch2 = h.state.next_channel_id();
    assert!(matches!(
        h.activate_on(ch2, &token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
}

#[test]
fn channel_ids_stay_unique_across_the_counter_wrap() {
    use uaring_core::server::context::ConnectionHost;
    let mut h = Harness::with_config(sessions_only());
    // A long-lived channel with a session on it.
    h.state.set_channel_counter(0);
    let live = h.state.open_channel().unwrap();
    assert_eq!(live & 0xFF_FFFF, 1);
    let Response::CreateSession(cs) = h.create_session_on(live, 60_000.0) else {
        panic!()
    };
    assert!(matches!(
        h.activate_on(live, &cs.authentication_token, Harness::anonymous()),
        Response::ActivateSession(_)
    ));
    // 16,777,215 channels later the counter wraps: 0 and the live id are skipped.
    h.state.set_channel_counter(0xFF_FFFE);
    let a = h.state.open_channel().unwrap();
    assert_eq!(a & 0xFF_FFFF, 0xFF_FFFF);
    let b = h.state.open_channel().unwrap();
    assert_ne!(b, 0, "0 is never an id");
    assert_ne!(b, live, "the live channel's id is not handed out again");
    assert_eq!(b & 0xFF_FFFF, 2);
    // Closing the new channels leaves the session on the live one bound.
    h.state.channel_closed(a);
    h.state.channel_closed(b);
    let r = h.read_request(&cs.authentication_token, NodeId::ns0(2259));
    assert!(matches!(h.call_on(live, r), Response::Read(_)));
    // Once the old channel is closed its id may come back.
    h.state.channel_closed(live);
    h.state.set_channel_counter(0);
    assert_eq!(h.state.open_channel().unwrap(), live);
}
