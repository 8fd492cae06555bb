//! Part 12 push certificate management against the real `uaring` binary, the hostile cases:
//! wrong role, unencrypted channels, garbage certificates and keys, an oversize trust list,
//! a handle of another session, too many handles; and `[push] enabled = false` leaves the
//! nodes out. (The whole update, CSR to ApplyChanges, is tests/interop/python/test_asyncua_push.py.)

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::Server;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, CallMethodRequest, CallRequest,
    MessageSecurityMode, ReadValueId, SignatureData, UserNameIdentityToken,
};
use uaring_core::secure_channel::SecurityPolicy;
use uaring_core::types::{
    BuiltinType, ByteString, ExtensionObject, NodeId, StatusCode, UaString, Variant,
};
use uaring_crypto::{CertificateRequest, OwnIdentity, PolicyId, RsaPolicy};
use uaring_harness::blocking::{Client, ClientError};

const TIMEOUT: Duration = Duration::from_secs(30);
const SERVER_CONFIGURATION: u32 = 12637;
const GET_REJECTED_LIST: u32 = 12777;
const UPDATE_CERTIFICATE: u32 = 13737;
const APPLY_CHANGES: u32 = 12740;
const TRUST_LIST: u32 = 12642;
const OPEN: u32 = 12647;
const CLOSE: u32 = 12650;
const READ: u32 = 12652;
const WRITE: u32 = 12655;
const CLOSE_AND_UPDATE: u32 = 12666;
const ADD_CERTIFICATE: u32 = 12668;
const CANCEL_CHANGES: u32 = 25708;

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A client application identity with the URI the blocking client's CreateSession names.
fn client_identity(cn: &str) -> Arc<OwnIdentity> {
    let req = CertificateRequest::new("urn:uaring:client", cn, now_s());
    let (cert, key) = uaring_crypto::generate_self_signed(&req).unwrap();
    OwnIdentity::new(cert, key).unwrap()
}

struct Env {
    server: Server,
    dir: common::TempDir,
    client: Arc<OwnIdentity>,
}

fn start(push: &str, tag: &str) -> Env {
    start_with(push, tag, "\"None\", \"Basic256Sha256\"", |_| {})
}

/// [`start`] with `security.policies` and something done to the directory first.
fn start_with(push: &str, tag: &str, policies: &str, before: impl FnOnce(&std::path::Path)) -> Env {
    let dir = common::TempDir::new(&format!("uaring-push-{tag}"));
    before(&dir);
    let client = client_identity("push test client");
    let trusted = dir.join("pki/trusted/certs");
    std::fs::create_dir_all(&trusted).unwrap();
    std::fs::write(trusted.join("client.der"), client.cert.der()).unwrap();
    let hash = uaring_crypto::hash_password("pw").unwrap();
    let cfg = dir.join("uaring.toml");
    std::fs::write(
        &cfg,
        format!(
            "[runtime]\nshards = 2\ndistribution = \"round-robin\"\n[push]\n{push}\n\
             [security]\npolicies = [{policies}]\n\
             [[users]]\nname = \"secadmin\"\npassword = \"{hash}\"\nroles = [\"SecurityAdmin\"]\n\
             [[users]]\nname = \"operator\"\npassword = \"{hash}\"\nroles = [\"Operator\", \"ConfigureAdmin\"]\n"
        ),
    )
    .unwrap();
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
    ]);
    Env {
        server,
        dir,
        client,
    }
}

impl Env {
    fn server_cert(&self) -> Vec<u8> {
        std::fs::read(self.dir.join("pki/own/certs/uaring.der")).unwrap()
    }

    /// A session over Basic256Sha256 in `mode`, logged in as `user` (password "pw", in clear:
    /// only SignAndEncrypt takes it) or anonymous.
    fn session(&self, mode: MessageSecurityMode, user: Option<&str>) -> Client {
        self.session_to(&self.server_cert(), mode, user)
            .expect("secure session")
    }

    /// [`Env::session`] to a server whose certificate the client takes to be `server_cert`.
    fn session_to(
        &self,
        server_cert: &[u8],
        mode: MessageSecurityMode,
        user: Option<&str>,
    ) -> Result<Client, ClientError> {
        self.session_as(&self.client, server_cert, mode, user)
    }

    /// [`Env::session_to`] with the client application identity `ident`.
    fn session_as(
        &self,
        ident: &Arc<OwnIdentity>,
        server_cert: &[u8],
        mode: MessageSecurityMode,
        user: Option<&str>,
    ) -> Result<Client, ClientError> {
        let policy = RsaPolicy::client(PolicyId::Basic256Sha256, ident.clone()).unwrap();
        let mut cfg = uaring_core::client::ClientConfig::new(&self.server.url());
        cfg.policy = policy.clone();
        cfg.mode = mode;
        cfg.server_certificate = Some(server_cert.to_vec());
        let mut c = Client::connect_with(cfg, TIMEOUT)?;
        let cs = c.create_session().expect("CreateSession").clone();
        let mut data = cs.server_certificate.as_bytes().to_vec();
        data.extend_from_slice(cs.server_nonce.as_bytes());
        let (algorithm, signature) = policy.sign_own(&data).unwrap();
        let token = match user {
            Some(u) => ExtensionObject::from_struct(&UserNameIdentityToken {
                policy_id: "username".into(),
                user_name: u.into(),
                password: ByteString::from(&b"pw"[..]),
                encryption_algorithm: UaString::null(),
            }),
            None => ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
        };
        let req = ActivateSessionRequest {
            client_signature: SignatureData {
                algorithm: algorithm.as_str().into(),
                signature: ByteString::from(signature),
            },
            user_identity_token: token,
            locale_ids: vec!["en".into()],
            ..Default::default()
        };
        match c.call(Request::ActivateSession(Box::new(req))) {
            Ok(Response::ActivateSession(_)) => Ok(c),
            other => panic!("ActivateSession: {other:?}"),
        }
    }

    fn none_session(&self) -> Client {
        let mut c = Client::connect(&self.server.url(), TIMEOUT).unwrap();
        c.activate_session_anonymous().unwrap();
        c
    }
}

fn call(
    c: &mut Client,
    object: u32,
    method: u32,
    inputs: Vec<Variant>,
) -> Result<Vec<Variant>, StatusCode> {
    let req = CallRequest {
        methods_to_call: vec![CallMethodRequest {
            object_id: NodeId::ns0(object),
            method_id: NodeId::ns0(method),
            input_arguments: inputs,
        }],
        ..Default::default()
    };
    match c.call(Request::Call(Box::new(req))) {
        Ok(Response::Call(r)) => {
            let res = &r.results[0];
            if res.status_code.is_bad() {
                Err(res.status_code)
            } else {
                Ok(res.output_arguments.clone())
            }
        }
        Ok(other) => panic!("{other:?}"),
        Err(ClientError::Status(s)) => Err(s),
        Err(e) => panic!("{e:?}"),
    }
}

fn open(c: &mut Client, mode: u8) -> Result<u32, StatusCode> {
    match call(c, TRUST_LIST, OPEN, vec![Variant::Byte(mode)])?.as_slice() {
        [Variant::UInt32(h)] => Ok(*h),
        other => panic!("{other:?}"),
    }
}

fn read(c: &mut Client, h: u32, n: i32) -> Result<Vec<u8>, StatusCode> {
    match call(
        c,
        TRUST_LIST,
        READ,
        vec![Variant::UInt32(h), Variant::Int32(n)],
    )?
    .as_slice()
    {
        [Variant::ByteString(b)] => Ok(b.as_bytes().to_vec()),
        other => panic!("{other:?}"),
    }
}

fn bytes(b: &[u8]) -> Variant {
    Variant::ByteString(ByteString::from(b))
}

fn update_certificate(
    c: &mut Client,
    cert: &[u8],
    format: &str,
    key: &[u8],
) -> Result<Vec<Variant>, StatusCode> {
    call(
        c,
        SERVER_CONFIGURATION,
        UPDATE_CERTIFICATE,
        vec![
            Variant::NodeId(Box::new(NodeId::NULL)),
            Variant::NodeId(Box::new(NodeId::NULL)),
            bytes(cert),
            Variant::array(BuiltinType::ByteString, vec![]).unwrap(),
            Variant::String(format.into()),
            bytes(key),
        ],
    )
}

#[test]
fn push_methods_refuse_the_wrong_role_channel_input_and_handles() {
    let env = start(
        "trust_list_bytes_max = 4096\nhandles_per_session_max = 2\nhandles_max = 3",
        "hostile",
    );
    // Wrong role, over SignAndEncrypt: every method, reading the trust list too.
    let mut op = env.session(MessageSecurityMode::SignAndEncrypt, Some("operator"));
    assert_eq!(
        call(&mut op, SERVER_CONFIGURATION, GET_REJECTED_LIST, vec![]),
        Err(StatusCode::BadUserAccessDenied)
    );
    assert_eq!(open(&mut op, 1), Err(StatusCode::BadUserAccessDenied));
    assert_eq!(
        update_certificate(&mut op, b"x", "", b""),
        Err(StatusCode::BadUserAccessDenied)
    );
    assert_eq!(
        call(&mut op, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadUserAccessDenied)
    );

    // Unencrypted channels: None, and Sign.
    let mut none = env.none_session();
    assert_eq!(
        open(&mut none, 1),
        Err(StatusCode::BadSecurityModeInsufficient)
    );
    let mut sign = env.session(MessageSecurityMode::Sign, None);
    assert_eq!(
        open(&mut sign, 1),
        Err(StatusCode::BadSecurityModeInsufficient)
    );
    assert_eq!(
        call(&mut sign, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadSecurityModeInsufficient)
    );

    // Garbage certificates and keys.
    let mut a = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    assert_eq!(
        update_certificate(&mut a, b"garbage", "", b""),
        Err(StatusCode::BadCertificateInvalid)
    );
    assert_eq!(
        update_certificate(&mut a, &[0x30; 70_000], "", b""),
        Err(StatusCode::BadCertificateInvalid)
    );
    // A well-formed certificate of a key the server does not hold, without the key.
    let stranger = client_identity("stranger");
    assert_eq!(
        update_certificate(&mut a, stranger.cert.der(), "", b""),
        Err(StatusCode::BadSecurityChecksFailed)
    );
    assert_eq!(
        update_certificate(&mut a, stranger.cert.der(), "PFX", b"key"),
        Err(StatusCode::BadNotSupported)
    );
    assert_eq!(
        update_certificate(&mut a, stranger.cert.der(), "PEM", b"not a key"),
        Err(StatusCode::BadSecurityChecksFailed)
    );
    // Its own key, but the certificate names another ApplicationUri.
    let pem = stranger.key.to_pem();
    assert_eq!(
        update_certificate(&mut a, stranger.cert.der(), "PEM", pem.as_bytes()),
        Err(StatusCode::BadCertificateUriInvalid)
    );
    assert_eq!(
        call(
            &mut a,
            TRUST_LIST,
            ADD_CERTIFICATE,
            vec![bytes(b"garbage"), Variant::Boolean(true)]
        ),
        Err(StatusCode::BadCertificateInvalid)
    );
    // An application certificate is no issuer.
    assert_eq!(
        call(
            &mut a,
            TRUST_LIST,
            ADD_CERTIFICATE,
            vec![bytes(stranger.cert.der()), Variant::Boolean(false)]
        ),
        Err(StatusCode::BadCertificateInvalid)
    );
    assert_eq!(
        call(&mut a, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadNothingToDo)
    );
    assert_eq!(open(&mut a, 3), Err(StatusCode::BadInvalidArgument));

    // An oversize trust list: refused at the Write that passes trust_list_bytes_max.
    let h = open(&mut a, 6).unwrap();
    call(
        &mut a,
        TRUST_LIST,
        WRITE,
        vec![Variant::UInt32(h), bytes(&[0u8; 4000])],
    )
    .unwrap();
    assert_eq!(
        call(
            &mut a,
            TRUST_LIST,
            WRITE,
            vec![Variant::UInt32(h), bytes(&[0u8; 200])]
        ),
        Err(StatusCode::BadEncodingLimitsExceeded)
    );
    // While it is open for writing nobody reads, and ApplyChanges waits.
    assert_eq!(open(&mut a, 1), Err(StatusCode::BadNotReadable));
    assert_eq!(
        call(&mut a, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadInvalidState)
    );
    // What it holds is no TrustListDataType: refused, and the handle is gone.
    assert_eq!(
        call(
            &mut a,
            TRUST_LIST,
            CLOSE_AND_UPDATE,
            vec![Variant::UInt32(h)]
        ),
        Err(StatusCode::BadDecodingError)
    );
    assert_eq!(
        call(&mut a, TRUST_LIST, CLOSE, vec![Variant::UInt32(h)]),
        Err(StatusCode::BadInvalidArgument)
    );

    // Handles belong to their session.
    let mut b = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    let ha = open(&mut a, 1).unwrap();
    assert_eq!(read(&mut b, ha, 100), Err(StatusCode::BadInvalidArgument));
    assert_eq!(
        call(&mut b, TRUST_LIST, CLOSE, vec![Variant::UInt32(ha)]),
        Err(StatusCode::BadInvalidArgument)
    );
    let first = read(&mut a, ha, 10).unwrap();
    assert_eq!(first.len(), 10);
    assert_eq!(read(&mut a, ha, -1), Err(StatusCode::BadInvalidArgument));

    // Too many handles: 2 per session, 3 in all.
    let ha2 = open(&mut a, 1).unwrap();
    assert_eq!(open(&mut a, 1), Err(StatusCode::BadTooManyOperations));
    let hb = open(&mut b, 1).unwrap();
    assert_eq!(open(&mut b, 1), Err(StatusCode::BadTooManyOperations));
    for h in [ha, ha2] {
        call(&mut a, TRUST_LIST, CLOSE, vec![Variant::UInt32(h)]).unwrap();
    }
    call(&mut b, TRUST_LIST, CLOSE, vec![Variant::UInt32(hb)]).unwrap();
    assert!(open(&mut b, 1).is_ok());

    // What is not implemented is not in the address space.
    let dv = a
        .read(&[ReadValueId {
            node_id: NodeId::ns0(CANCEL_CHANGES),
            attribute_id: 1,
            ..Default::default()
        }])
        .unwrap();
    assert_eq!(dv[0].status, Some(StatusCode::BadNodeIdUnknown));
}

#[test]
fn push_management_switched_off_leaves_server_configuration_out() {
    let env = start("enabled = false", "off");
    let mut c = env.none_session();
    let dv = c
        .read(&[ReadValueId {
            node_id: NodeId::ns0(SERVER_CONFIGURATION),
            attribute_id: 1,
            ..Default::default()
        }])
        .unwrap();
    assert_eq!(dv[0].status, Some(StatusCode::BadNodeIdUnknown));
}

/// A certificate with its own key (PEM) replaces the server's: pending until ApplyChanges,
/// then the certificate of new channels (a client still expecting the old one is refused),
/// the channels of the old one are closed a second later while a None session stays, the
/// files on disk are the new pair, and a restart serves it.
#[test]
fn apply_changes_swaps_the_certificate_for_new_channels_and_retires_the_old_ones() {
    let env = start("", "swap");
    let old = env.server_cert();
    let req = CertificateRequest::new("urn:uaring:server", "uaring swapped", now_s());
    let (cert, key) = uaring_crypto::generate_self_signed(&req).unwrap();
    let mut a = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    let mut none = env.none_session();
    let out = update_certificate(&mut a, cert.der(), "PEM", key.to_pem().as_bytes()).unwrap();
    assert_eq!(out, vec![Variant::Boolean(true)], "applyChangesRequired");
    // Pending: nothing changed yet.
    assert_eq!(env.server_cert(), old);
    let mut before = env.session(MessageSecurityMode::SignAndEncrypt, None);
    call(&mut a, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]).unwrap();
    assert_eq!(
        env.server_cert(),
        cert.der(),
        "the new certificate is on disk"
    );
    // New channels: the new certificate; a client encrypting to the old one is refused.
    let mut fresh = env
        .session_to(cert.der(), MessageSecurityMode::SignAndEncrypt, None)
        .expect("a channel to the new certificate");
    assert!(env
        .session_to(&old, MessageSecurityMode::SignAndEncrypt, None)
        .is_err());
    let eps = fresh.get_endpoints().unwrap();
    assert!(eps
        .iter()
        .filter(|e| e.security_mode == MessageSecurityMode::SignAndEncrypt)
        .all(|e| e.server_certificate.as_bytes() == cert.der()));
    // The channels of the old certificate are closed a second later; the None one stays.
    std::thread::sleep(Duration::from_millis(1800));
    assert!(
        before.read_values(&[NodeId::ns0(2259)]).is_err(),
        "old channel closed"
    );
    assert!(
        none.read_values(&[NodeId::ns0(2259)]).is_ok(),
        "None channel kept"
    );
    assert!(
        fresh.read_values(&[NodeId::ns0(2259)]).is_ok(),
        "new channel kept"
    );
    drop((a, none, fresh, before));
    // A restart serves the pair written.
    let Env {
        server,
        dir,
        client,
    } = env;
    drop(server);
    let cfg = dir.join("uaring.toml");
    let server = Server::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--pki",
        dir.join("pki").to_str().unwrap(),
    ]);
    let env = Env {
        server,
        dir,
        client,
    };
    let mut again = env
        .session_to(cert.der(), MessageSecurityMode::SignAndEncrypt, None)
        .expect("the new certificate after a restart");
    assert!(again.read_values(&[NodeId::ns0(2259)]).is_ok());
}

/// The ECC certificate types present — exactly those, RSA, P-256 and brainpoolP256r1 here —
/// are listed in the DefaultApplicationGroup's CertificateTypes and pushed as the RSA one is:
/// signing requests for new P-256 and brainpoolP256r1 keys, certificates with their keys,
/// ApplyChanges; the ECC endpoints then carry the new certificates and the RSA ones keep
/// theirs.
#[test]
fn ecc_certificates_of_the_group_are_updated_too() {
    use uaring_core::generated::node_ids as ids;
    use uaring_crypto::EccCurve;
    let req = CertificateRequest::new("urn:uaring:server", "uaring ecc", now_s());
    let env = start_with(
        "",
        "ecc",
        "\"None\", \"Basic256Sha256\", \"ECC_nistP256\", \"ECC_brainpoolP256r1\"",
        |dir| {
            let pki = uaring_crypto::Pki::open(&dir.join("pki"), Default::default()).unwrap();
            for curve in [EccCurve::NistP256, EccCurve::BrainpoolP256r1] {
                let (c, k) = uaring_crypto::generate_self_signed_ecc(&req, curve).unwrap();
                pki.write_own_ecc(&c, &k).unwrap();
            }
        },
    );
    let rsa_cert = env.server_cert();
    let p256 = NodeId::ns0(ids::EccNistP256ApplicationCertificateType);
    let bp256 = NodeId::ns0(ids::EccBrainpoolP256r1ApplicationCertificateType);
    let mut a = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    let types = a
        .read(&[ReadValueId {
            node_id: NodeId::ns0(14161),
            attribute_id: 13,
            ..Default::default()
        }])
        .unwrap();
    match &types[0].value {
        Variant::Array(arr) => assert_eq!(
            arr.values,
            vec![
                Variant::NodeId(Box::new(NodeId::ns0(
                    ids::RsaSha256ApplicationCertificateType
                ))),
                Variant::NodeId(Box::new(p256.clone())),
                Variant::NodeId(Box::new(bp256.clone())),
            ]
        ),
        other => panic!("CertificateTypes: {other:?}"),
    }
    let csr = call(
        &mut a,
        SERVER_CONFIGURATION,
        12737,
        vec![
            Variant::NodeId(Box::new(NodeId::NULL)),
            Variant::NodeId(Box::new(p256.clone())),
            Variant::String("CN=uaring ecc push".into()),
            Variant::Boolean(true),
            Variant::ByteString(ByteString::null()),
        ],
    )
    .unwrap();
    assert!(matches!(&csr[..], [Variant::ByteString(b)] if b.as_bytes().first() == Some(&0x30)));
    // A type the group does not have.
    let p384 = NodeId::ns0(ids::EccNistP384ApplicationCertificateType);
    let update = |c: &mut Client, ty: &NodeId, cert: &[u8], key: &[u8]| {
        call(
            c,
            SERVER_CONFIGURATION,
            UPDATE_CERTIFICATE,
            vec![
                Variant::NodeId(Box::new(NodeId::NULL)),
                Variant::NodeId(Box::new(ty.clone())),
                bytes(cert),
                Variant::array(BuiltinType::ByteString, vec![]).unwrap(),
                Variant::String("PEM".into()),
                bytes(key),
            ],
        )
    };
    let (new_cert, new_key) =
        uaring_crypto::generate_self_signed_ecc(&req, EccCurve::NistP256).unwrap();
    let pem = new_key.to_pem();
    assert_eq!(
        update(&mut a, &p384, new_cert.der(), pem.as_bytes()),
        Err(StatusCode::BadInvalidArgument)
    );
    // An RSA certificate is not of the ECC type.
    let rsa = client_identity("rsa");
    assert_eq!(
        update(&mut a, &p256, rsa.cert.der(), rsa.key.to_pem().as_bytes()),
        Err(StatusCode::BadCertificateInvalid)
    );
    assert_eq!(
        update(&mut a, &p256, new_cert.der(), pem.as_bytes()),
        Ok(vec![Variant::Boolean(true)])
    );
    // The Brainpool certificate of the group too: from a signing request of the server's
    // (ECDSA over brainpoolP256r1, built without rcgen), and a certificate with a key of its
    // own.
    let csr = call(
        &mut a,
        SERVER_CONFIGURATION,
        12737,
        vec![
            Variant::NodeId(Box::new(NodeId::NULL)),
            Variant::NodeId(Box::new(bp256.clone())),
            Variant::String("CN=uaring brainpool push".into()),
            Variant::Boolean(true),
            Variant::ByteString(ByteString::null()),
        ],
    )
    .unwrap();
    assert!(matches!(&csr[..], [Variant::ByteString(b)] if b.as_bytes().first() == Some(&0x30)));
    let (bp_cert, bp_key) =
        uaring_crypto::generate_self_signed_ecc(&req, EccCurve::BrainpoolP256r1).unwrap();
    assert_eq!(
        update(&mut a, &bp256, bp_cert.der(), bp_key.to_pem().as_bytes()),
        Ok(vec![Variant::Boolean(true)])
    );
    call(&mut a, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]).unwrap();
    assert_eq!(
        std::fs::read(env.dir.join("pki/own/certs/uaring_nistP256.der")).unwrap(),
        new_cert.der()
    );
    let mut none = env.none_session();
    let eps = none.get_endpoints().unwrap();
    for e in eps
        .iter()
        .filter(|e| e.security_mode != MessageSecurityMode::None)
    {
        let uri = e.security_policy_uri.as_str();
        let want = if uri == EccCurve::NistP256.policy_uri() {
            new_cert.der()
        } else if uri == EccCurve::BrainpoolP256r1.policy_uri() {
            bp_cert.der()
        } else {
            &rsa_cert[..]
        };
        assert_eq!(
            e.server_certificate.as_bytes(),
            want,
            "{}",
            e.security_policy_uri.as_str()
        );
    }
}

/// A transaction belongs to its session: another session's UpdateCertificate, write-Open and
/// ApplyChanges do not touch it, and one left without a call for `activity_timeout_ms` (its
/// session gone) is discarded.
#[test]
fn a_transaction_is_one_sessions_and_an_abandoned_one_expires() {
    let env = start("activity_timeout_ms = 1500", "txn");
    let req = CertificateRequest::new("urn:uaring:server", "uaring next", now_s());
    let (cert, key) = uaring_crypto::generate_self_signed(&req).unwrap();
    let pem = key.to_pem();
    let mut a = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    let mut b = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    assert!(update_certificate(&mut a, cert.der(), "PEM", pem.as_bytes()).is_ok());
    assert_eq!(
        update_certificate(&mut b, cert.der(), "PEM", pem.as_bytes()),
        Err(StatusCode::BadTransactionPending)
    );
    assert_eq!(open(&mut b, 6), Err(StatusCode::BadTransactionPending));
    assert_eq!(
        call(&mut b, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadNothingToDo)
    );
    std::thread::sleep(Duration::from_millis(1800));
    assert!(update_certificate(&mut b, cert.der(), "PEM", pem.as_bytes()).is_ok());
    assert_eq!(
        call(&mut a, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]),
        Err(StatusCode::BadNothingToDo)
    );
    assert!(call(&mut b, SERVER_CONFIGURATION, APPLY_CHANGES, vec![]).is_ok());
    assert_eq!(env.server_cert(), cert.der());
}

/// Part 12 §7.8.2.5: when the trust list changes, the channels whose client certificate is no
/// longer trusted are closed; the others stay.
#[test]
fn removing_a_trusted_certificate_closes_its_channels() {
    let victim = client_identity("victim");
    let victim_der = victim.cert.der().to_vec();
    let env = start_with("", "remove", "\"None\", \"Basic256Sha256\"", |dir| {
        let trusted = dir.join("pki/trusted/certs");
        std::fs::create_dir_all(&trusted).unwrap();
        std::fs::write(trusted.join("victim.der"), &victim_der).unwrap();
    });
    let server_cert = env.server_cert();
    let mut v = env
        .session_as(
            &victim,
            &server_cert,
            MessageSecurityMode::SignAndEncrypt,
            None,
        )
        .expect("the victim is trusted");
    let mut a = env.session(MessageSecurityMode::SignAndEncrypt, Some("secadmin"));
    let thumb = victim.cert.thumbprint_hex();
    call(
        &mut a,
        TRUST_LIST,
        12670,
        vec![
            Variant::String(thumb.as_str().into()),
            Variant::Boolean(true),
        ],
    )
    .unwrap();
    assert_eq!(
        call(
            &mut a,
            TRUST_LIST,
            12670,
            vec![
                Variant::String(thumb.as_str().into()),
                Variant::Boolean(true)
            ],
        ),
        Err(StatusCode::BadInvalidArgument),
        "gone already"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while v.read_values(&[NodeId::ns0(2259)]).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the victim's channel stays open"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        a.read_values(&[NodeId::ns0(2259)]).is_ok(),
        "a trusted client's channel stays"
    );
    assert!(env
        .session_as(
            &victim,
            &server_cert,
            MessageSecurityMode::SignAndEncrypt,
            None
        )
        .is_err());
}
