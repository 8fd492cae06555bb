//! Session security through core's dispatcher with this crate's plug-ins: CreateSession
//! signature, ActivateSession client signature, UserName (encrypted, clear, wrong, unknown,
//! rate-limited), X.509 user tokens, roles (Write denied, UserAccessLevel masked), and the user
//! token policies of the endpoints.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use common::{now_unix_s, TempDir};
use uaring_core::address_space::build::make::{variable, WRITABLE};
use uaring_core::address_space::ids;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::roles::Roles;
use uaring_core::secure_channel::{
    EndpointSecurity, NonePolicy, SecurityPolicy, SecurityProvider, UserTokenSettings,
    SECURITY_POLICY_NONE_URI,
};
use uaring_core::server::context::RequestContext;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::shared::ServerShared;
use uaring_core::types::{BuiltinType, QualifiedName};
use uaring_core::{
    ByteString, DataValue, DateTime, ExtensionObject, NodeId, Now, StatusCode, UaString, Variant,
};
use uaring_crypto::{
    asym_sign, encrypt_user_password, generate_self_signed, hash_password, CertificateRequest,
    ConfiguredUsers, HandshakeLimits, LoginLimiterConfig, OwnIdentity, Pki, PkiConfig, PolicyId,
    RsaPolicy, ShardTrust, UserDirectory, UserEntry,
};

const B256: PolicyId = PolicyId::Basic256Sha256;

struct H {
    _dir: TempDir,
    state: ServiceState,
    now: Now,
    server: Arc<OwnIdentity>,
    client: Arc<OwnIdentity>,
    user: Arc<OwnIdentity>,
    handle: u32,
    channel: u32,
}

fn ident(uri: &str, name: &str) -> Arc<OwnIdentity> {
    let (c, k) = generate_self_signed(&CertificateRequest::new(uri, name, now_unix_s())).unwrap();
    OwnIdentity::new(c, k).unwrap()
}

fn harness(settings: UserTokenSettings) -> H {
    let dir = TempDir::new("session-sec");
    let server = ident("urn:t:server", "server");
    let client = ident("urn:t:client", "client");
    let user = ident("urn:t:user", "carol");
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    pki.trust(&client.cert).unwrap();
    pki.trust(&user.cert).unwrap();
    let logins = LoginLimiterConfig {
        burst: 3,
        refill_interval_ms: 3_600_000,
        addresses_max: 16,
    };
    let trust = ShardTrust::new(pki, Some(HandshakeLimits::default()), logins);
    let users = UserDirectory::new(&[
        UserEntry {
            name: "admin".into(),
            password_hash: hash_password("admin-pw").unwrap(),
            roles: Roles::OPERATOR,
        },
        UserEntry {
            name: "reader".into(),
            password_hash: hash_password("reader-pw").unwrap(),
            roles: Roles::OBSERVER,
        },
    ])
    .unwrap();
    let mut p = SecurityProvider::empty();
    p.add_policy(Arc::new(NonePolicy));
    p.add_endpoint(EndpointSecurity::none());
    p.add_policy(RsaPolicy::server(B256, server.clone(), trust.clone()).unwrap());
    p.add_endpoint(EndpointSecurity {
        policy_uri: B256.uri().into(),
        mode: MessageSecurityMode::SignAndEncrypt,
    });
    p.add_endpoint(EndpointSecurity {
        policy_uri: B256.uri().into(),
        mode: MessageSecurityMode::Sign,
    });
    p.set_user_authenticator(ConfiguredUsers::new(users, trust, Roles::OBSERVER));
    p.set_user_tokens(settings);
    p.validate().unwrap();
    let now = Now::new(
        1_000_000_000_000,
        // The wall clock's time: the test certificates are valid from now on, and the
        // policies judge validity at the time of the request.
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    );
    // One writable Int32 (ns=1;i=1001) for the Write and UserAccessLevel checks.
    let shared = ServerShared::new_with(ServerConfig::default(), now, &mut |b| {
        b.add(variable(
            NodeId::numeric(1, 1001),
            QualifiedName::new(1, "Value"),
            NodeId::ns0(BuiltinType::Int32 as u32),
            -1,
            Vec::new(),
            DataValue {
                value: Variant::Int32(0),
                ..Default::default()
            },
            WRITABLE,
            0.0,
            Some((NodeId::ns0(ids::OBJECTS_FOLDER), ids::ORGANIZES)),
        ))
    })
    .unwrap();
    let mut shard = ServiceState::new(
        shared,
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(p);
    let channel = shard.next_channel_id();
    H {
        _dir: dir,
        state: shard,
        now,
        server,
        client,
        user,
        handle: 0,
        channel,
    }
}

fn settings() -> UserTokenSettings {
    UserTokenSettings {
        anonymous: Some(Roles::OPERATOR),
        user_name: true,
        x509: true,
        allow_password_on_none: false,
        none_endpoint_token_policy_uri: B256.uri().into(),
    }
}

impl H {
    fn header(&mut self, token: &NodeId) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: token.clone(),
            request_handle: self.handle,
            timestamp: self.now.utc,
            ..Default::default()
        }
    }

    fn call(&mut self, mode: MessageSecurityMode, req: Request) -> Response {
        let client = self.client.clone();
        let secured = mode != MessageSecurityMode::None;
        let ctx = RequestContext {
            channel_id: self.channel,
            security_policy_uri: if secured {
                B256.uri()
            } else {
                SECURITY_POLICY_NONE_URI
            },
            security_mode: mode,
            client_certificate: secured.then(|| client.cert.der()),
            peer: Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                4000,
            )),
            endpoint_url: "opc.tcp://h:4840",
        };
        dispatch(&mut self.state, &ctx, req, self.now)
    }

    /// CreateSession; returns (token, server nonce, response).
    fn create(
        &mut self,
        mode: MessageSecurityMode,
    ) -> (NodeId, Vec<u8>, Box<CreateSessionResponse>) {
        let client_nonce = vec![5u8; 32];
        let hd = self.header(&NodeId::NULL);
        let secured = mode != MessageSecurityMode::None;
        let req = CreateSessionRequest {
            request_header: hd,
            client_description: ApplicationDescription {
                application_uri: "urn:t:client".into(),
                ..Default::default()
            },
            client_nonce: ByteString::from(client_nonce.clone()),
            client_certificate: if secured {
                ByteString::from(self.client.cert.der())
            } else {
                ByteString::default()
            },
            requested_session_timeout: 60_000.0,
            ..Default::default()
        };
        match self.call(mode, Request::CreateSession(Box::new(req))) {
            Response::CreateSession(r) => {
                if secured {
                    // The server signed clientCertificate ‖ clientNonce.
                    let data = [self.client.cert.der(), &client_nonce[..]].concat();
                    let verifier = RsaPolicy::client(B256, self.client.clone()).unwrap();
                    verifier
                        .verify_signature(
                            self.server.cert.der(),
                            &data,
                            r.server_signature.algorithm.as_str(),
                            r.server_signature.signature.as_bytes(),
                        )
                        .unwrap();
                    assert_eq!(r.server_certificate.as_bytes(), self.server.cert.der());
                }
                (
                    r.authentication_token.clone(),
                    r.server_nonce.as_bytes().to_vec(),
                    r,
                )
            }
            other => panic!("{other:?}"),
        }
    }

    fn client_signature(&self, nonce: &[u8]) -> SignatureData {
        let data = [self.server.cert.der(), nonce].concat();
        SignatureData {
            algorithm: B256.asym_signature_algorithm_uri().unwrap().into(),
            signature: ByteString::from(asym_sign(B256, &self.client.key, &data).unwrap()),
        }
    }

    fn activate(
        &mut self,
        mode: MessageSecurityMode,
        token: &NodeId,
        client_sig: SignatureData,
        identity: ExtensionObject,
        user_sig: SignatureData,
    ) -> Response {
        let hd = self.header(token);
        let req = ActivateSessionRequest {
            request_header: hd,
            client_signature: client_sig,
            user_identity_token: identity,
            user_token_signature: user_sig,
            ..Default::default()
        };
        self.call(mode, Request::ActivateSession(Box::new(req)))
    }

    fn user_name(&self, user: &str, password: &str, nonce: &[u8]) -> ExtensionObject {
        let ct =
            encrypt_user_password(B256, &self.server.cert, password.as_bytes(), nonce).unwrap();
        ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id: "username".into(),
            user_name: user.into(),
            password: ByteString::from(ct),
            encryption_algorithm: B256.asym_encryption_algorithm_uri().unwrap().into(),
        })
    }

    fn write(&mut self, mode: MessageSecurityMode, token: &NodeId) -> StatusCode {
        let hd = self.header(token);
        let req = WriteRequest {
            request_header: hd,
            nodes_to_write: vec![WriteValue {
                node_id: NodeId::numeric(1, 1001),
                attribute_id: 13,
                value: DataValue {
                    value: Variant::Int32(7),
                    ..Default::default()
                },
                ..Default::default()
            }],
        };
        match self.call(mode, Request::Write(Box::new(req))) {
            Response::Write(w) => w.results[0],
            other => panic!("{other:?}"),
        }
    }

    fn user_access_level(&mut self, mode: MessageSecurityMode, token: &NodeId) -> u8 {
        let hd = self.header(token);
        let req = ReadRequest {
            request_header: hd,
            nodes_to_read: vec![ReadValueId {
                node_id: NodeId::numeric(1, 1001),
                attribute_id: 18,
                ..Default::default()
            }],
            ..Default::default()
        };
        match self.call(mode, Request::Read(Box::new(req))) {
            Response::Read(r) => match r.results[0].value {
                Variant::Byte(b) => b,
                ref v => panic!("{v:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
}

fn fault(r: &Response) -> Option<StatusCode> {
    match r {
        Response::ServiceFault(f) => Some(f.response_header.service_result),
        _ => None,
    }
}

const SAE: MessageSecurityMode = MessageSecurityMode::SignAndEncrypt;
const NONE: MessageSecurityMode = MessageSecurityMode::None;

#[test]
fn signed_sessions_with_user_names_and_roles() {
    let mut h = harness(settings());
    // Admin, password encrypted with the channel policy and the CreateSession nonce.
    let (token, nonce, _) = h.create(SAE);
    let sig = h.client_signature(&nonce);
    let id = h.user_name("admin", "admin-pw", &nonce);
    let r = h.activate(SAE, &token, sig, id, SignatureData::default());
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    assert_eq!(h.write(SAE, &token), StatusCode::Good);
    assert_eq!(h.user_access_level(SAE, &token) & 0x02, 0x02);
    // Reader: Write denied, UserAccessLevel without CurrentWrite.
    let (token, nonce, _) = h.create(SAE);
    let sig = h.client_signature(&nonce);
    let id = h.user_name("reader", "reader-pw", &nonce);
    assert!(matches!(
        h.activate(SAE, &token, sig, id, SignatureData::default()),
        Response::ActivateSession(_)
    ));
    assert_eq!(h.write(SAE, &token), StatusCode::BadUserAccessDenied);
    assert_eq!(h.user_access_level(SAE, &token) & 0x03, 0x01);
}

#[test]
fn bad_client_signature_and_stale_nonce_are_refused() {
    let mut h = harness(settings());
    let (token, nonce, _) = h.create(SAE);
    let mut sig = h.client_signature(&nonce);
    sig.signature = ByteString::from(vec![0u8; 256]);
    let r = h.activate(
        SAE,
        &token,
        sig,
        ExtensionObject::null(),
        SignatureData::default(),
    );
    assert_eq!(fault(&r), Some(StatusCode::BadApplicationSignatureInvalid));
    // A password encrypted with another nonce.
    let sig = h.client_signature(&nonce);
    let id = h.user_name("admin", "admin-pw", &[1u8; 32]);
    let r = h.activate(SAE, &token, sig, id, SignatureData::default());
    assert_eq!(fault(&r), Some(StatusCode::BadIdentityTokenInvalid));
}

#[test]
fn wrong_passwords_unknown_users_and_the_per_address_limit() {
    let mut h = harness(settings());
    for (user, pw) in [("admin", "nope"), ("mallory", "admin-pw"), ("admin", "x")] {
        let (token, nonce, _) = h.create(SAE);
        let sig = h.client_signature(&nonce);
        let id = h.user_name(user, pw, &nonce);
        assert_eq!(
            fault(&h.activate(SAE, &token, sig, id, SignatureData::default())),
            Some(StatusCode::BadUserAccessDenied)
        );
    }
    // Burst of 3 failures used up: even the right password is refused from this address.
    let (token, nonce, _) = h.create(SAE);
    let sig = h.client_signature(&nonce);
    let id = h.user_name("admin", "admin-pw", &nonce);
    assert_eq!(
        fault(&h.activate(SAE, &token, sig, id, SignatureData::default())),
        Some(StatusCode::BadUserAccessDenied)
    );
}

#[test]
fn passwords_on_none_channels() {
    let mut h = harness(settings());
    // Encrypted with the token policy (Basic256Sha256) on a None channel: accepted.
    let (token, nonce, cs) = h.create(NONE);
    assert_eq!(
        cs.server_certificate.as_bytes(),
        h.server.cert.der(),
        "None endpoints carry the certificate that encrypts passwords"
    );
    let id = h.user_name("admin", "admin-pw", &nonce);
    assert!(matches!(
        h.activate(
            NONE,
            &token,
            SignatureData::default(),
            id,
            SignatureData::default()
        ),
        Response::ActivateSession(_)
    ));
    // In clear: refused unless configured.
    let clear = ExtensionObject::from_struct(&UserNameIdentityToken {
        policy_id: "username".into(),
        user_name: "admin".into(),
        password: ByteString::from(&b"admin-pw"[..]),
        encryption_algorithm: UaString::null(),
    });
    let (token, _, _) = h.create(NONE);
    let r = h.activate(
        NONE,
        &token,
        SignatureData::default(),
        clear.clone(),
        SignatureData::default(),
    );
    assert_eq!(fault(&r), Some(StatusCode::BadIdentityTokenRejected));
    let mut h = harness(UserTokenSettings {
        allow_password_on_none: true,
        ..settings()
    });
    let (token, _, _) = h.create(NONE);
    assert!(matches!(
        h.activate(
            NONE,
            &token,
            SignatureData::default(),
            clear,
            SignatureData::default()
        ),
        Response::ActivateSession(_)
    ));
}

#[test]
fn x509_user_tokens() {
    let mut h = harness(settings());
    let (token, nonce, _) = h.create(SAE);
    let sig = h.client_signature(&nonce);
    let id = ExtensionObject::from_struct(&X509IdentityToken {
        policy_id: "x509".into(),
        certificate_data: ByteString::from(h.user.cert.der()),
    });
    let data = [h.server.cert.der(), &nonce[..]].concat();
    let user_sig = SignatureData {
        algorithm: B256.asym_signature_algorithm_uri().unwrap().into(),
        signature: ByteString::from(asym_sign(B256, &h.user.key, &data).unwrap()),
    };
    let mut bad = user_sig.clone();
    bad.signature = ByteString::from(asym_sign(B256, &h.client.key, &data).unwrap());
    assert_eq!(
        fault(&h.activate(SAE, &token, sig.clone(), id.clone(), bad)),
        Some(StatusCode::BadUserSignatureInvalid)
    );
    let r = h.activate(SAE, &token, sig, id, user_sig);
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    // CN "carol" is no configured user: the x509 role (read).
    assert_eq!(h.write(SAE, &token), StatusCode::BadUserAccessDenied);
}

#[test]
fn endpoints_list_user_token_policies() {
    let mut h = harness(settings());
    let hd = h.header(&NodeId::NULL);
    let r = h.call(
        NONE,
        Request::GetEndpoints(Box::new(GetEndpointsRequest {
            request_header: hd,
            ..Default::default()
        })),
    );
    let Response::GetEndpoints(r) = r else {
        panic!()
    };
    assert_eq!(r.endpoints.len(), 3);
    for e in &r.endpoints {
        assert_eq!(e.server_certificate.as_bytes(), h.server.cert.der());
        let ids: Vec<&str> = e
            .user_identity_tokens
            .iter()
            .map(|t| t.policy_id.as_str())
            .collect();
        assert_eq!(ids, ["anonymous", "username", "x509"]);
        let un = &e.user_identity_tokens[1];
        assert_eq!(
            un.security_policy_uri.as_str(),
            B256.uri(),
            "{:?}",
            e.security_mode
        );
    }
    // CreateSession lists the same endpoints, without a copy of the certificate in each: the
    // response carries it once (Part 4 §5.7.2.2 recommends leaving it out).
    let (_, _, cs) = h.create(SAE);
    assert_eq!(cs.server_endpoints.len(), r.endpoints.len());
    for (c, e) in cs.server_endpoints.iter().zip(&r.endpoints) {
        assert!(c.server_certificate.is_null());
        assert_eq!(
            (
                &c.security_policy_uri,
                c.security_mode,
                &c.user_identity_tokens
            ),
            (
                &e.security_policy_uri,
                e.security_mode,
                &e.user_identity_tokens
            )
        );
    }
    assert_eq!(cs.server_certificate.as_bytes(), h.server.cert.der());
    // Anonymous off, no token policy on None: the None endpoint offers nothing but... nothing.
    let mut h = harness(UserTokenSettings {
        anonymous: None,
        none_endpoint_token_policy_uri: String::new(),
        ..settings()
    });
    let hd = h.header(&NodeId::NULL);
    let r = h.call(
        NONE,
        Request::GetEndpoints(Box::new(GetEndpointsRequest {
            request_header: hd,
            ..Default::default()
        })),
    );
    let Response::GetEndpoints(r) = r else {
        panic!()
    };
    let none = r
        .endpoints
        .iter()
        .find(|e| e.security_mode == NONE)
        .unwrap();
    assert!(none.user_identity_tokens.is_empty());
    assert!(none.server_certificate.is_empty());
    let (token, _, _) = h.create(NONE);
    let r = h.activate(
        NONE,
        &token,
        SignatureData::default(),
        ExtensionObject::null(),
        SignatureData::default(),
    );
    assert_eq!(fault(&r), Some(StatusCode::BadIdentityTokenInvalid));
}

#[test]
fn undecryptable_tokens_count_as_failed_logins() {
    let mut h = harness(settings());
    for _ in 0..3 {
        let (token, nonce, _) = h.create(SAE);
        let sig = h.client_signature(&nonce);
        // Encrypted with another nonce: the server cannot accept it (and spends an RSA decryption).
        let id = h.user_name("admin", "admin-pw", &[3u8; 32]);
        assert_eq!(
            fault(&h.activate(SAE, &token, sig, id, SignatureData::default())),
            Some(StatusCode::BadIdentityTokenInvalid)
        );
    }
    // The address is now limited: refused before any decryption, even with the right password.
    let (token, nonce, _) = h.create(SAE);
    let sig = h.client_signature(&nonce);
    let id = h.user_name("admin", "admin-pw", &nonce);
    assert_eq!(
        fault(&h.activate(SAE, &token, sig, id, SignatureData::default())),
        Some(StatusCode::BadUserAccessDenied)
    );
}
