//! Sessions over the ECC policies through core's dispatcher with this crate's plug-ins:
//! ephemeral keys asked for with ECDHPolicyUri and returned as ECDHKey in the response
//! headers (signed by the server), UserName passwords as an EccEncryptedSecret (Part 4
//! §7.41.2.5), X.509 user tokens signed with ECDSA, and what is refused with which status: a
//! wrong password, a secret with a broken signature, signed by another certificate, bound to
//! another nonce, encrypted to a key already used or never handed out, a key asked for an
//! RSA policy, a wrong ActivateSession client signature, an RSA user certificate on an ECC
//! endpoint.

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
    EndpointSecurity, SecurityPolicy, SecurityProvider, UserTokenSettings,
};
use uaring_core::server::context::RequestContext;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::shared::ServerShared;
use uaring_core::types::{BuiltinType, QualifiedName};
use uaring_core::{
    ByteString, DataValue, DateTime, DecodeLimits, ExtensionObject, NodeId, Now, StatusCode,
    UaString, Variant,
};
use uaring_crypto::ecc::EphemeralKey;
use uaring_crypto::ecc_secret::{encrypt_secret, encrypt_secret_with};
use uaring_crypto::{
    asym_sign, generate_self_signed, generate_self_signed_ecc, hash_password, CertificateRequest,
    ConfiguredUsers, EccCurve, EccIdentity, EccPolicy, LoginLimiterConfig, OwnIdentity, Pki,
    PkiConfig, PolicyId, RsaPolicy, ShardTrust, UserDirectory, UserEntry,
};

const SAE: MessageSecurityMode = MessageSecurityMode::SignAndEncrypt;
const SIGN: MessageSecurityMode = MessageSecurityMode::Sign;
const B256: PolicyId = PolicyId::Basic256Sha256;

struct H {
    _dir: TempDir,
    state: ServiceState,
    now: Now,
    curve: EccCurve,
    server: Arc<EccIdentity>,
    client: Arc<EccIdentity>,
    /// Another client application, trusted too, not the channel's.
    other: Arc<EccIdentity>,
    user: Arc<EccIdentity>,
    rsa_user: Arc<OwnIdentity>,
    handle: u32,
    channel: u32,
}

fn ecc_ident(curve: EccCurve, uri: &str, name: &str) -> Arc<EccIdentity> {
    let (c, k) =
        generate_self_signed_ecc(&CertificateRequest::new(uri, name, now_unix_s()), curve).unwrap();
    EccIdentity::new(c, k).unwrap()
}

fn harness(curve: EccCurve) -> H {
    let dir = TempDir::new("ecc-session");
    let server = ecc_ident(curve, "urn:t:server", "server");
    let client = ecc_ident(curve, "urn:t:client", "client");
    let other = ecc_ident(curve, "urn:t:other", "other");
    let user = ecc_ident(curve, "urn:t:user", "carol");
    let (c, k) = generate_self_signed(&CertificateRequest::new(
        "urn:t:rsa-user",
        "dave",
        now_unix_s(),
    ))
    .unwrap();
    let rsa_user = OwnIdentity::new(c, k).unwrap();
    let (c, k) = generate_self_signed(&CertificateRequest::new(
        "urn:t:server",
        "server",
        now_unix_s(),
    ))
    .unwrap();
    let rsa_server = OwnIdentity::new(c, k).unwrap();
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    for c in [&client.cert, &other.cert, &user.cert, &rsa_user.cert] {
        pki.trust(c).unwrap();
    }
    let logins = LoginLimiterConfig {
        burst: 100,
        refill_interval_ms: 3_600_000,
        addresses_max: 16,
    };
    let trust = ShardTrust::new(pki, None, logins);
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
    let ecc = EccPolicy::server(server.clone(), trust.clone());
    p.add_policy(ecc.clone());
    p.add_policy(RsaPolicy::server(B256, rsa_server, trust.clone()).unwrap());
    for mode in [SIGN, SAE] {
        for uri in [ecc.uri(), B256.uri()] {
            p.add_endpoint(EndpointSecurity {
                policy_uri: uri.into(),
                mode,
            });
        }
    }
    p.set_user_authenticator(ConfiguredUsers::new(users, trust, Roles::OBSERVER));
    p.set_user_tokens(UserTokenSettings {
        anonymous: Some(Roles::OPERATOR),
        user_name: true,
        x509: true,
        allow_password_on_none: false,
        none_endpoint_token_policy_uri: String::new(),
    });
    p.validate().unwrap();
    let now = Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    );
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
        curve,
        server,
        client,
        other,
        user,
        rsa_user,
        handle: 0,
        channel,
    }
}

/// A request header asking for an ephemeral key of `uri`.
fn asking(uri: &str) -> ExtensionObject {
    ExtensionObject::from_struct(&AdditionalParametersType {
        parameters: vec![KeyValuePair {
            key: QualifiedName::new(0, "ECDHPolicyUri"),
            value: Variant::String(uri.into()),
        }],
    })
}

/// The ECDHKey of a response header: the EphemeralKeyType, or the StatusCode instead.
fn ecdh_key(header: &ResponseHeader) -> Option<Result<EphemeralKeyType, StatusCode>> {
    let params = header
        .additional_header
        .decode_as::<AdditionalParametersType>(DecodeLimits::default())?
        .unwrap();
    let find = |name: &str| {
        params
            .parameters
            .iter()
            .find(|p| p.key.namespace_index == 0 && p.key.name.as_str() == name)
            .map(|p| p.value.clone())
    };
    assert!(matches!(find("ECDHPolicyUri"), Some(Variant::String(_))));
    Some(match find("ECDHKey")? {
        Variant::ExtensionObject(e) => Ok(e
            .decode_as::<EphemeralKeyType>(DecodeLimits::default())
            .unwrap()
            .unwrap()),
        Variant::StatusCode(s) => Err(s),
        other => panic!("ECDHKey {other:?}"),
    })
}

fn fault(r: &Response) -> Option<StatusCode> {
    match r {
        Response::ServiceFault(f) => Some(f.response_header.service_result),
        _ => None,
    }
}

impl H {
    fn uri(&self) -> &'static str {
        self.curve.policy_uri()
    }

    fn header(&mut self, token: &NodeId, additional: ExtensionObject) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: token.clone(),
            request_handle: self.handle,
            timestamp: self.now.utc,
            additional_header: additional,
            ..Default::default()
        }
    }

    fn call(&mut self, mode: MessageSecurityMode, req: Request) -> Response {
        let client = self.client.clone();
        let ctx = RequestContext {
            channel_id: self.channel,
            security_policy_uri: self.curve.policy_uri(),
            security_mode: mode,
            client_certificate: Some(client.cert.der()),
            peer: Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
                4000,
            )),
            endpoint_url: "opc.tcp://h:4840",
        };
        dispatch(&mut self.state, &ctx, req, self.now)
    }

    /// CreateSession asking for a key of `ask` (if any); returns (token, server nonce,
    /// ECDHKey of the response).
    fn create(
        &mut self,
        mode: MessageSecurityMode,
        ask: Option<&str>,
    ) -> (
        NodeId,
        Vec<u8>,
        Option<Result<EphemeralKeyType, StatusCode>>,
    ) {
        let client_nonce = vec![5u8; 32];
        let hd = self.header(&NodeId::NULL, ask.map(asking).unwrap_or_default());
        let req = CreateSessionRequest {
            request_header: hd,
            client_description: ApplicationDescription {
                application_uri: "urn:t:client".into(),
                ..Default::default()
            },
            client_nonce: ByteString::from(client_nonce.clone()),
            client_certificate: ByteString::from(self.client.cert.der()),
            requested_session_timeout: 60_000.0,
            ..Default::default()
        };
        match self.call(mode, Request::CreateSession(Box::new(req))) {
            Response::CreateSession(r) => {
                // The server signed clientCertificate ‖ clientNonce with ECDSA.
                let data = [self.client.cert.der(), &client_nonce[..]].concat();
                EccPolicy::client(self.client.clone())
                    .verify_signature(
                        self.server.cert.der(),
                        &data,
                        r.server_signature.algorithm.as_str(),
                        r.server_signature.signature.as_bytes(),
                    )
                    .unwrap();
                let key = ecdh_key(&r.response_header);
                if let Some(Ok(k)) = &key {
                    self.check_key(k);
                }
                (
                    r.authentication_token.clone(),
                    r.server_nonce.as_bytes().to_vec(),
                    key,
                )
            }
            other => panic!("{other:?}"),
        }
    }

    /// An ephemeral key is on the curve's size and signed by the server's application key.
    fn check_key(&self, k: &EphemeralKeyType) {
        assert_eq!(k.public_key.as_bytes().len(), self.curve.nonce_len());
        EccPolicy::client(self.client.clone())
            .verify_signature(
                self.server.cert.der(),
                k.public_key.as_bytes(),
                "",
                k.signature.as_bytes(),
            )
            .expect("the ephemeral key is signed by the server");
    }

    fn client_signature(&self, nonce: &[u8]) -> SignatureData {
        let data = [self.server.cert.der(), nonce].concat();
        SignatureData {
            algorithm: self.curve.signature_algorithm_uri().into(),
            signature: ByteString::from(self.client.key.sign(&data).unwrap()),
        }
    }

    fn user_name(&self, user: &str, secret: Vec<u8>) -> ExtensionObject {
        ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id: "username".into(),
            user_name: user.into(),
            password: ByteString::from(secret),
            encryption_algorithm: UaString::null(),
        })
    }

    /// `password` as an EccEncryptedSecret from the channel's client to `key`.
    fn secret(&self, key: &EphemeralKeyType, nonce: &[u8], password: &str) -> Vec<u8> {
        encrypt_secret(
            &self.client,
            false,
            key.public_key.as_bytes(),
            nonce,
            password.as_bytes(),
            self.now.utc,
        )
        .unwrap()
    }

    /// ActivateSession; the response, and its ECDHKey.
    #[allow(clippy::type_complexity)]
    fn activate(
        &mut self,
        mode: MessageSecurityMode,
        token: &NodeId,
        ask: Option<&str>,
        client_sig: SignatureData,
        identity: ExtensionObject,
        user_sig: SignatureData,
    ) -> (Response, Option<Result<EphemeralKeyType, StatusCode>>) {
        let hd = self.header(token, ask.map(asking).unwrap_or_default());
        let req = ActivateSessionRequest {
            request_header: hd,
            client_signature: client_sig,
            user_identity_token: identity,
            user_token_signature: user_sig,
            ..Default::default()
        };
        let r = self.call(mode, Request::ActivateSession(Box::new(req)));
        let key = ecdh_key(r.response_header());
        if let Some(Ok(k)) = &key {
            self.check_key(k);
        }
        (r, key)
    }

    fn write(&mut self, mode: MessageSecurityMode, token: &NodeId) -> StatusCode {
        let hd = self.header(token, ExtensionObject::null());
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

    /// The server nonce of a successful ActivateSession response.
    fn nonce_of(r: &Response) -> Vec<u8> {
        match r {
            Response::ActivateSession(a) => a.server_nonce.as_bytes().to_vec(),
            other => panic!("{other:?}"),
        }
    }
}

/// UserName logins with an EccEncryptedSecret in both curves and modes: the key asked for in
/// CreateSession decrypts the first activation's password; each activation response then
/// carries a fresh key (asked for or not), which the next activation uses.
#[test]
fn user_names_as_ecc_encrypted_secrets() {
    for curve in EccCurve::ALL {
        for mode in [SIGN, SAE] {
            let mut h = harness(curve);
            let uri = h.uri();
            let (token, nonce, key) = h.create(mode, Some(uri));
            let key = key.expect("an ECDHKey").expect("a key, not a status");
            let sig = h.client_signature(&nonce);
            let id = h.user_name("admin", h.secret(&key, &nonce, "admin-pw"));
            let (r, next) = h.activate(mode, &token, None, sig, id, SignatureData::default());
            assert!(
                matches!(r, Response::ActivateSession(_)),
                "{curve:?} {mode:?}: {r:?}"
            );
            assert_eq!(h.write(mode, &token), StatusCode::Good);
            // The next key came unasked: re-activate as the reader with it.
            let next = next.expect("a fresh ECDHKey").unwrap();
            assert_ne!(next.public_key, key.public_key);
            let nonce = H::nonce_of(&r);
            let sig = h.client_signature(&nonce);
            let id = h.user_name("reader", h.secret(&next, &nonce, "reader-pw"));
            let (r, _) = h.activate(mode, &token, Some(uri), sig, id, SignatureData::default());
            assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
            assert_eq!(h.write(mode, &token), StatusCode::BadUserAccessDenied);
        }
    }
}

/// Without ECDHPolicyUri no key is handed out, and none is in the responses.
#[test]
fn no_key_unless_asked() {
    let mut h = harness(EccCurve::NistP256);
    let (token, nonce, key) = h.create(SAE, None);
    assert!(key.is_none());
    let sig = h.client_signature(&nonce);
    let (r, key) = h.activate(
        SAE,
        &token,
        None,
        sig,
        ExtensionObject::null(),
        SignatureData::default(),
    );
    assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    assert!(key.is_none());
    // A secret for a key of our own making: there is no key of the session's to decrypt it.
    let mine = EphemeralKey::generate(EccCurve::NistP256).unwrap();
    let key = EphemeralKeyType {
        public_key: ByteString::from(mine.nonce()),
        signature: ByteString::null(),
    };
    let nonce = H::nonce_of(&r);
    let sig = h.client_signature(&nonce);
    let id = h.user_name("admin", h.secret(&key, &nonce, "admin-pw"));
    let (r, _) = h.activate(SAE, &token, None, sig, id, SignatureData::default());
    assert_eq!(fault(&r), Some(StatusCode::BadIdentityTokenInvalid));
}

/// A key asked for a policy that is not an ECC policy of the endpoint is refused in the
/// response header (Bad_SecurityPolicyRejected), the session itself is made.
#[test]
fn a_key_for_another_policy_is_refused_in_the_header() {
    let mut h = harness(EccCurve::NistP256);
    for uri in [
        B256.uri(),
        EccCurve::NistP384.policy_uri(),
        "urn:no-such-policy",
    ] {
        let (_, _, key) = h.create(SAE, Some(uri));
        assert_eq!(
            key.map(|k| k.err()),
            Some(Some(StatusCode::BadSecurityPolicyRejected)),
            "{uri}"
        );
    }
}

/// What is refused, each with the status it gets.
#[test]
fn bad_secrets_and_signatures_are_refused() {
    for curve in EccCurve::ALL {
        let mut h = harness(curve);
        let uri = h.uri();
        // One session per case: a failed activation takes the key with it.
        let fresh = |h: &mut H| {
            let (token, nonce, key) = h.create(SAE, Some(uri));
            (token, nonce, key.unwrap().unwrap())
        };
        let refused = |h: &mut H, token: &NodeId, nonce: &[u8], id: ExtensionObject| {
            let sig = h.client_signature(nonce);
            let (r, key) = h.activate(SAE, token, None, sig, id, SignatureData::default());
            assert!(key.is_none(), "a failed activation hands out no key");
            fault(&r)
        };

        // A wrong password: the secret decrypts, the login fails.
        let (token, nonce, key) = fresh(&mut h);
        let id = h.user_name("admin", h.secret(&key, &nonce, "wrong"));
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadUserAccessDenied)
        );

        // A broken ECDSA signature over the secret.
        let (token, nonce, key) = fresh(&mut h);
        let mut s = h.secret(&key, &nonce, "admin-pw");
        let last = s.len() - 1;
        s[last] ^= 1;
        let id = h.user_name("admin", s);
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // A bit of the ciphertext flipped: the signature no longer covers it.
        let (token, nonce, key) = fresh(&mut h);
        let mut s = h.secret(&key, &nonce, "admin-pw");
        let at = s.len() - curve.signature_len() - 1;
        s[at] ^= 1;
        let id = h.user_name("admin", s);
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // Signed by another (trusted) application than the channel's, which it names.
        let (token, nonce, key) = fresh(&mut h);
        let s = encrypt_secret(
            &h.other,
            true,
            key.public_key.as_bytes(),
            &nonce,
            b"admin-pw",
            h.now.utc,
        )
        .unwrap();
        let id = h.user_name("admin", s);
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // Bound to another nonce than the session's last.
        let (token, nonce, key) = fresh(&mut h);
        let id = h.user_name("admin", h.secret(&key, &[7u8; 32], "admin-pw"));
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // The key again after it was used: one key, one activation.
        let (token, nonce, key) = fresh(&mut h);
        let sig = h.client_signature(&nonce);
        let id = h.user_name("admin", h.secret(&key, &nonce, "admin-pw"));
        let (r, _) = h.activate(SAE, &token, None, sig, id, SignatureData::default());
        let nonce = H::nonce_of(&r);
        let id = h.user_name("admin", h.secret(&key, &nonce, "admin-pw"));
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // A secret with an encryptionAlgorithm (the legacy RSA format's field).
        let (token, nonce, key) = fresh(&mut h);
        let id = ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id: "username".into(),
            user_name: "admin".into(),
            password: ByteString::from(h.secret(&key, &nonce, "admin-pw")),
            encryption_algorithm: "http://www.w3.org/2001/04/xmlenc#rsa-oaep".into(),
        });
        assert_eq!(
            refused(&mut h, &token, &nonce, id),
            Some(StatusCode::BadIdentityTokenInvalid)
        );

        // A wrong ECDSA client signature of ActivateSession.
        let (token, nonce, _) = fresh(&mut h);
        let mut sig = h.client_signature(&nonce);
        let mut bytes = sig.signature.as_bytes().to_vec();
        bytes[0] ^= 1;
        sig.signature = ByteString::from(bytes);
        let (r, _) = h.activate(
            SAE,
            &token,
            None,
            sig,
            ExtensionObject::null(),
            SignatureData::default(),
        );
        assert_eq!(fault(&r), Some(StatusCode::BadApplicationSignatureInvalid));

        // A password in clear in a Sign-only channel: refused as ever.
        let (token, nonce, _) = h.create(SIGN, Some(uri));
        let sig = h.client_signature(&nonce);
        let id = h.user_name("admin", b"admin-pw".to_vec());
        let (r, _) = h.activate(SIGN, &token, None, sig, id, SignatureData::default());
        assert_eq!(fault(&r), Some(StatusCode::BadIdentityTokenRejected));
    }
}

/// open62541 1.5 derives the secret's keys from the ECDH secret without its leading zero
/// bytes: such a secret (one in 256) is understood too.
#[test]
fn a_secret_derived_without_leading_zeros_is_understood() {
    for curve in EccCurve::ALL {
        let mut h = harness(curve);
        let uri = h.uri();
        let (token, nonce, key) = h.create(SAE, Some(uri));
        let key = key.unwrap().unwrap();
        let (sender, shared) = (0..20_000)
            .find_map(|_| {
                let k = EphemeralKey::generate(curve).unwrap();
                let shared = k.shared_secret(key.public_key.as_bytes()).unwrap();
                (shared[0] == 0).then_some((k, shared))
            })
            .expect("a shared secret with a leading zero");
        let first = shared.iter().position(|b| *b != 0).unwrap();
        let s = encrypt_secret_with(
            &h.client,
            false,
            &sender,
            &shared[first..],
            key.public_key.as_bytes(),
            &nonce,
            b"admin-pw",
            h.now.utc,
        )
        .unwrap();
        let sig = h.client_signature(&nonce);
        let id = h.user_name("admin", s);
        let (r, _) = h.activate(SAE, &token, None, sig, id, SignatureData::default());
        assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
    }
}

/// X.509 user tokens on an ECC endpoint: signed with ECDSA by a user certificate on the
/// policy's curve (Part 4 §7.41.5: the data is serverCertificate ‖ serverNonce). An RSA user
/// certificate cannot sign for an ECC policy: Bad_UserSignatureInvalid.
#[test]
fn x509_user_tokens_on_ecc_endpoints() {
    for curve in EccCurve::ALL {
        let mut h = harness(curve);
        let (token, nonce, _) = h.create(SAE, None);
        let data = [h.server.cert.der(), &nonce[..]].concat();
        let id = |cert: &[u8]| {
            ExtensionObject::from_struct(&X509IdentityToken {
                policy_id: "x509".into(),
                certificate_data: ByteString::from(cert),
            })
        };
        // The RSA user's PKCS#1 signature.
        let rsa_sig = SignatureData {
            algorithm: B256.asym_signature_algorithm_uri().unwrap().into(),
            signature: ByteString::from(asym_sign(B256, &h.rsa_user.key, &data).unwrap()),
        };
        let sig = h.client_signature(&nonce);
        let rsa_id = id(h.rsa_user.cert.der());
        let (r, _) = h.activate(SAE, &token, None, sig.clone(), rsa_id, rsa_sig);
        assert_eq!(fault(&r), Some(StatusCode::BadUserSignatureInvalid));
        // Signed by the client instead of the user.
        let wrong = SignatureData {
            algorithm: curve.signature_algorithm_uri().into(),
            signature: ByteString::from(h.client.key.sign(&data).unwrap()),
        };
        let user_id = id(h.user.cert.der());
        let (r, _) = h.activate(SAE, &token, None, sig.clone(), user_id.clone(), wrong);
        assert_eq!(fault(&r), Some(StatusCode::BadUserSignatureInvalid));
        let good = SignatureData {
            algorithm: curve.signature_algorithm_uri().into(),
            signature: ByteString::from(h.user.key.sign(&data).unwrap()),
        };
        let (r, _) = h.activate(SAE, &token, None, sig, user_id, good);
        assert!(matches!(r, Response::ActivateSession(_)), "{r:?}");
        // CN "carol" names no configured user: the x509 role (read).
        assert_eq!(h.write(SAE, &token), StatusCode::BadUserAccessDenied);
    }
}
