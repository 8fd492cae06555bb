//! Handshake work as jobs (core's `server::handshake`), driven by hand against core's real shard
//! state with this crate's RSA policies and argon2id users: while one connection's
//! OpenSecureChannel, CreateSession or ActivateSession job is out (held by the test, as a busy
//! helper thread would hold it), another connection of the same shard is served; a refused job
//! answers ERR BadTcpNotEnoughResources (OPN) or BadTooManyOperations (session services). On
//! the ECC policies, which work is a job and which runs on the shard.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use common::{find_err, now_unix_s, TempDir};
use uaring_core::client::{ClientConfig, ClientConnection};
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::roles::Roles;
use uaring_core::secure_channel::{
    EndpointSecurity, NonePolicy, SecurityPolicy, SecurityProvider, UserTokenSettings,
};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::handshake::{HandshakeJob, JobKind};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{ByteString, DateTime, ExtensionObject, NodeId, Now, StatusCode, UaString};
use uaring_crypto::{
    generate_self_signed, hash_password, CertificateRequest, ConfiguredUsers, HandshakeLimits,
    LoginLimiterConfig, OwnIdentity, Pki, PkiConfig, PolicyId, RsaPolicy, ShardTrust,
    UserDirectory, UserEntry,
};

const B256: PolicyId = PolicyId::Basic256Sha256;
const URL: &str = "opc.tcp://localhost:4840/x";

fn ident(uri: &str, name: &str) -> Arc<OwnIdentity> {
    let (c, k) = generate_self_signed(&CertificateRequest::new(uri, name, now_unix_s())).unwrap();
    OwnIdentity::new(c, k).unwrap()
}

struct World {
    _dir: TempDir,
    state: ServiceState,
    now: Now,
    /// The secured channels' policy on the client's side, its certificate and the server's.
    client_policy: Arc<dyn SecurityPolicy>,
    client_cert: Vec<u8>,
    server_cert: Vec<u8>,
}

fn world() -> World {
    let dir = TempDir::new("jobs");
    let server = ident("urn:t:server", "server");
    let client = ident("urn:t:client", "client");
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    pki.trust(&client.cert).unwrap();
    let trust = ShardTrust::new(
        pki,
        Some(HandshakeLimits::default()),
        LoginLimiterConfig::default(),
    );
    let users = UserDirectory::new(&[UserEntry {
        name: "op".into(),
        password_hash: hash_password("op-pw").unwrap(),
        roles: Roles::OPERATOR,
    }])
    .unwrap();
    let mut p = SecurityProvider::empty();
    p.add_policy(Arc::new(NonePolicy));
    p.add_endpoint(EndpointSecurity::none());
    p.add_policy(RsaPolicy::server(B256, server.clone(), trust.clone()).unwrap());
    p.add_endpoint(EndpointSecurity {
        policy_uri: B256.uri().into(),
        mode: MessageSecurityMode::SignAndEncrypt,
    });
    p.set_user_authenticator(ConfiguredUsers::new(users, trust, Roles::OBSERVER));
    p.set_user_tokens(UserTokenSettings {
        anonymous: Some(Roles::OPERATOR),
        user_name: true,
        x509: false,
        allow_password_on_none: false,
        none_endpoint_token_policy_uri: String::new(),
    });
    p.validate().unwrap();
    let now = Now::new(
        1_000_000_000_000,
        // The wall clock's time: the test certificates are valid from now on, and the
        // policies judge validity at the time of the request.
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    );
    let shared = ServerShared::new(ServerConfig::default(), now).unwrap();
    let shard = ServiceState::new(
        shared,
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(p)
    .with_handshake_offload(true);
    World {
        _dir: dir,
        state: shard,
        now,
        client_policy: RsaPolicy::client(B256, client.clone()).unwrap(),
        client_cert: client.cert.der().to_vec(),
        server_cert: server.cert.der().to_vec(),
    }
}

/// One client connection to the shard, bytes carried by hand.
struct Link {
    server: ServerConnection,
    client: ClientConnection,
    c2s: Vec<u8>,
    closed: bool,
    /// The ERR the server sent, if any.
    err: Option<StatusCode>,
}

impl World {
    fn link(&mut self, secured: bool, port: u16) -> Link {
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), port);
        let server = ServerConnection::new(&mut self.state, Some(peer), self.now);
        let mut cfg = ClientConfig::new(URL);
        if secured {
            cfg.policy = self.client_policy.clone();
            cfg.mode = MessageSecurityMode::SignAndEncrypt;
            cfg.server_certificate = Some(self.server_cert.clone());
        }
        let mut client = ClientConnection::new(
            cfg,
            Box::new(uaring_core::random::ChaCha::from_u64(u64::from(port))),
        );
        let mut c2s = Vec::new();
        client.start(self.now, &mut c2s);
        Link {
            server,
            client,
            c2s,
            closed: false,
            err: None,
        }
    }

    /// Carries bytes both ways until nothing moves or a job is out.
    fn pump(&mut self, l: &mut Link) {
        for _ in 0..100 {
            if l.c2s.is_empty() || l.closed {
                return;
            }
            let data = std::mem::take(&mut l.c2s);
            let mut out = Vec::new();
            let st = l.server.on_recv(&mut self.state, self.now, &data, &mut out);
            self.deliver(l, st, out);
        }
        panic!("no quiescence");
    }

    fn deliver(&mut self, l: &mut Link, st: ConnStatus, out: Vec<u8>) {
        if let Some(e) = find_err(&out) {
            l.err.get_or_insert(e);
        }
        if st == ConnStatus::Close {
            l.closed = true;
        }
        if !out.is_empty() {
            let _ = l.client.on_recv(self.now, &out, &mut l.c2s);
        }
    }

    /// Hands a finished (or refused) job back, then carries the bytes on.
    fn finish(&mut self, l: &mut Link, done: uaring_core::server::handshake::JobDone) {
        let mut out = Vec::new();
        let st = l
            .server
            .on_job_done(&mut self.state, self.now, done, &mut out);
        self.deliver(l, st, out);
        self.pump(l);
    }

    /// Runs every job the link hands out until none is left.
    fn run_jobs(&mut self, l: &mut Link) {
        while let Some(job) = l.server.take_job() {
            let done = job.run();
            self.finish(l, done);
        }
    }

    fn send(&mut self, l: &mut Link, req: Request) -> u32 {
        let id = l.client.send_request(req, self.now, &mut l.c2s).unwrap();
        self.pump(l);
        id
    }

    fn response(&mut self, l: &mut Link, id: u32) -> Response {
        match l.client.poll_response() {
            Some((rid, r)) if rid == id => r,
            other => panic!("no response {id}: {other:?} (server err {:?})", l.err),
        }
    }

    fn read(&mut self, l: &mut Link) -> Response {
        let req = ReadRequest {
            nodes_to_read: vec![ReadValueId {
                node_id: NodeId::ns0(2258),
                attribute_id: 13,
                ..Default::default()
            }],
            ..Default::default()
        };
        let id = self.send(l, Request::Read(Box::new(req)));
        self.response(l, id)
    }

    fn create_session(&mut self, l: &mut Link, secured: bool) -> u32 {
        let req = CreateSessionRequest {
            client_description: ApplicationDescription {
                application_uri: "urn:t:client".into(),
                ..Default::default()
            },
            client_nonce: ByteString::from(vec![7u8; 32]),
            client_certificate: if secured {
                ByteString::from(&self.client_cert[..])
            } else {
                ByteString::default()
            },
            requested_session_timeout: 60_000.0,
            ..Default::default()
        };
        self.send(l, Request::CreateSession(Box::new(req)))
    }

    fn created(&mut self, l: &mut Link, id: u32) -> Box<CreateSessionResponse> {
        match self.response(l, id) {
            Response::CreateSession(r) => {
                l.client
                    .set_authentication_token(r.authentication_token.clone());
                r
            }
            other => panic!("{other:?}"),
        }
    }

    fn activate(
        &mut self,
        l: &mut Link,
        created: &CreateSessionResponse,
        user: Option<(&str, &str)>,
    ) -> u32 {
        let client_signature = if created.server_signature.signature.is_empty() {
            SignatureData::default()
        } else {
            let data = [&self.server_cert[..], created.server_nonce.as_bytes()].concat();
            let (algorithm, sig) = self.client_policy.sign_own(&data).unwrap();
            SignatureData {
                algorithm: algorithm.as_str().into(),
                signature: ByteString::from(sig),
            }
        };
        let token = match user {
            None => ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            Some((name, pw)) => ExtensionObject::from_struct(&UserNameIdentityToken {
                policy_id: "username".into(),
                user_name: name.into(),
                password: ByteString::from(pw.as_bytes()),
                encryption_algorithm: UaString::null(),
            }),
        };
        let req = ActivateSessionRequest {
            client_signature,
            user_identity_token: token,
            ..Default::default()
        };
        self.send(l, Request::ActivateSession(Box::new(req)))
    }

    /// A None channel with an activated anonymous session: no job at all.
    fn plain_session(&mut self) -> Link {
        let mut a = self.link(false, 4001);
        self.pump(&mut a);
        assert!(
            a.client.is_open() && a.server.take_job().is_none(),
            "a None channel needs no job"
        );
        let id = self.create_session(&mut a, false);
        let c = self.created(&mut a, id);
        let id = self.activate(&mut a, &c, None);
        assert!(matches!(
            self.response(&mut a, id),
            Response::ActivateSession(_)
        ));
        a
    }
}

fn good_read(r: &Response) -> bool {
    matches!(r, Response::Read(x) if x.response_header.service_result.is_good() && x.results.len() == 1)
}

fn take(l: &mut Link, kind: JobKind) -> HandshakeJob {
    let job = l
        .server
        .take_job()
        .unwrap_or_else(|| panic!("no {kind:?} job (err {:?})", l.err));
    assert_eq!(job.kind(), kind);
    assert!(l.server.is_waiting());
    assert!(l.server.take_job().is_none(), "one job at a time");
    job
}

/// Every expensive step of a SignAndEncrypt connection with a UserName login is a job; while
/// each is out, another session on the same shard reads; requests that arrive on the waiting
/// connection meanwhile are held and answered after the job.
#[test]
fn the_shard_serves_reads_while_handshake_jobs_are_out() {
    let mut w = world();
    let mut a = w.plain_session();
    assert!(good_read(&w.read(&mut a)));

    let mut b = w.link(true, 4002);
    w.pump(&mut b);
    // The first OpenSecureChannel, one job: the certificate check, the RSA decryption and
    // the response's RSA signature and encryption.
    let job = take(&mut b, JobKind::OpenRequest);
    assert!(
        good_read(&w.read(&mut a)),
        "a Read is answered while the OPN job is out"
    );
    w.finish(&mut b, job.run());
    assert!(b.client.is_open(), "err {:?}", b.err);
    assert!(
        b.server.take_job().is_none(),
        "the response came with the first job"
    );

    // A renewal is assembled by the shard: its request, then its response, are two jobs.
    b.client.renew(w.now, &mut b.c2s).unwrap();
    w.pump(&mut b);
    let job = take(&mut b, JobKind::OpenRequest);
    assert!(good_read(&w.read(&mut a)));
    let done = job.run();
    let mut out = Vec::new();
    assert_eq!(
        b.server.on_job_done(&mut w.state, w.now, done, &mut out),
        ConnStatus::Open
    );
    assert!(
        out.is_empty(),
        "nothing is sent before the response is signed"
    );
    let job = take(&mut b, JobKind::OpenResponse);
    assert!(good_read(&w.read(&mut a)));
    w.finish(&mut b, job.run());
    assert!(b.client.is_open() && b.err.is_none(), "err {:?}", b.err);

    // CreateSession: certificate validation and the server signature.
    let id = w.create_session(&mut b, true);
    let job = take(&mut b, JobKind::CreateSession);
    assert!(good_read(&w.read(&mut a)));
    w.finish(&mut b, job.run());
    let created = w.created(&mut b, id);
    assert!(!created.server_signature.signature.is_empty());

    // ActivateSession: client signature, argon2id. A Read sent right behind it on the same
    // connection waits for the job, then is answered in order.
    let act = w.activate(&mut b, &created, Some(("op", "op-pw")));
    let job = take(&mut b, JobKind::ActivateSession);
    let held_read = {
        let req = ReadRequest {
            nodes_to_read: vec![ReadValueId {
                node_id: NodeId::ns0(2258),
                attribute_id: 13,
                ..Default::default()
            }],
            ..Default::default()
        };
        let id = b
            .client
            .send_request(Request::Read(Box::new(req)), w.now, &mut b.c2s)
            .unwrap();
        w.pump(&mut b);
        id
    };
    assert!(
        b.client.poll_response().is_none(),
        "nothing answered while the job is out"
    );
    assert!(b.server.buffered_bytes() > 0, "the Read is held");
    for _ in 0..3 {
        assert!(good_read(&w.read(&mut a)));
    }
    w.finish(&mut b, job.run());
    assert!(
        matches!(w.response(&mut b, act), Response::ActivateSession(r) if r.response_header.service_result.is_good())
    );
    assert!(good_read(&w.response(&mut b, held_read)));
    assert!(!b.server.is_waiting());
    assert!(good_read(&w.read(&mut b)));
}

/// A refused OpenSecureChannel job closes with ERR BadTcpNotEnoughResources; refused session
/// jobs answer BadTooManyOperations, and a refused CreateSession leaves no session behind.
#[test]
fn refused_jobs_answer_with_the_resource_statuses() {
    let mut w = world();
    let channels = w.state.open_channel_count();
    let mut b = w.link(true, 4003);
    w.pump(&mut b);
    let job = take(&mut b, JobKind::OpenRequest);
    // The first OPN's job carries the channel id its response names: taken now …
    assert_eq!(w.state.open_channel_count(), channels + 1);
    let mut out = Vec::new();
    assert_eq!(
        b.server
            .on_job_done(&mut w.state, w.now, job.refuse(), &mut out),
        ConnStatus::Close
    );
    assert_eq!(find_err(&out), Some(StatusCode::BadTcpNotEnoughResources));
    // … and given back with the refused connection.
    assert_eq!(w.state.open_channel_count(), channels);

    let mut c = w.link(true, 4004);
    w.pump(&mut c);
    w.run_jobs(&mut c);
    assert!(c.client.is_open());
    let sessions = w.state.sessions().count();
    let id = w.create_session(&mut c, true);
    assert_eq!(w.state.sessions().count(), sessions + 1);
    let job = take(&mut c, JobKind::CreateSession);
    w.finish(&mut c, job.refuse());
    match w.response(&mut c, id) {
        Response::ServiceFault(f) => assert_eq!(
            f.response_header.service_result,
            StatusCode::BadTooManyOperations
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        w.state.sessions().count(),
        sessions,
        "the refused session is released"
    );
    assert!(!c.closed, "a refused session service keeps the channel");

    let id = w.create_session(&mut c, true);
    w.run_jobs(&mut c);
    let created = w.created(&mut c, id);
    let id = w.activate(&mut c, &created, Some(("op", "op-pw")));
    let job = take(&mut c, JobKind::ActivateSession);
    w.finish(&mut c, job.refuse());
    match w.response(&mut c, id) {
        Response::ServiceFault(f) => assert_eq!(
            f.response_header.service_result,
            StatusCode::BadTooManyOperations
        ),
        other => panic!("{other:?}"),
    }
    // The client may try again; then it works.
    let id = w.activate(&mut c, &created, Some(("op", "op-pw")));
    w.run_jobs(&mut c);
    assert!(matches!(
        w.response(&mut c, id),
        Response::ActivateSession(_)
    ));
}

/// An anonymous ActivateSession on a SignAndEncrypt channel needs only the client signature
/// check, one RSA public-key operation: it is answered at once, without a job, and a wrong
/// signature is still BadApplicationSignatureInvalid. A UserName login on the same channel is
/// still a job (the token check is argon2id).
#[test]
fn an_anonymous_activation_checks_the_client_signature_without_a_job() {
    let mut w = world();
    let mut c = w.link(true, 4005);
    w.pump(&mut c);
    w.run_jobs(&mut c);
    assert!(c.client.is_open());
    let id = w.create_session(&mut c, true);
    w.run_jobs(&mut c);
    let created = w.created(&mut c, id);

    // A signature over the wrong nonce: refused at once.
    let mut bad = created.clone();
    bad.server_nonce = ByteString::from(vec![1u8; 32]);
    let id = w.activate(&mut c, &bad, None);
    assert!(
        c.server.take_job().is_none(),
        "no job for an anonymous activation"
    );
    match w.response(&mut c, id) {
        Response::ServiceFault(f) => assert_eq!(
            f.response_header.service_result,
            StatusCode::BadApplicationSignatureInvalid
        ),
        other => panic!("{other:?}"),
    }

    let id = w.activate(&mut c, &created, None);
    assert!(
        c.server.take_job().is_none(),
        "no job for an anonymous activation"
    );
    assert!(!c.server.is_waiting());
    let activated = match w.response(&mut c, id) {
        Response::ActivateSession(r) if r.response_header.service_result.is_good() => r,
        other => panic!("{other:?}"),
    };
    assert!(good_read(&w.read(&mut c)));

    // The activation handed out a new nonce; a UserName login signs it and is a job.
    let mut next = created.clone();
    next.server_nonce = activated.server_nonce.clone();
    let id = w.activate(&mut c, &next, Some(("op", "op-pw")));
    let job = take(&mut c, JobKind::ActivateSession);
    w.finish(&mut c, job.run());
    assert!(
        matches!(w.response(&mut c, id), Response::ActivateSession(r) if r.response_header.service_result.is_good())
    );
}

/// A shard offering ECC_nistP256 and ECC_nistP384 (SignAndEncrypt), trusting a client of
/// `curve`, whose secured links use that curve.
fn ecc_world(curve: uaring_crypto::EccCurve) -> World {
    use uaring_crypto::{generate_self_signed_ecc, EccCurve, EccIdentity, EccPolicy};
    let dir = TempDir::new("jobs-ecc");
    let ecc = |curve, uri: &str| {
        let req = CertificateRequest::new(uri, "ecc", now_unix_s());
        let (c, k) = generate_self_signed_ecc(&req, curve).unwrap();
        EccIdentity::new(c, k).unwrap()
    };
    let client = ecc(curve, "urn:t:client");
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    pki.trust(&client.cert).unwrap();
    let trust = ShardTrust::new(pki, None, LoginLimiterConfig::default());
    let mut p = SecurityProvider::empty();
    let mut server_cert = Vec::new();
    for c in EccCurve::ALL {
        let own = ecc(c, "urn:t:server");
        if c == curve {
            server_cert = own.cert.der().to_vec();
        }
        let policy = EccPolicy::server(own, trust.clone());
        p.add_endpoint(EndpointSecurity {
            policy_uri: policy.uri().into(),
            mode: MessageSecurityMode::SignAndEncrypt,
        });
        p.add_policy(policy);
    }
    p.validate().unwrap();
    let now = Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    );
    let shared = ServerShared::new(ServerConfig::default(), now).unwrap();
    let shard = ServiceState::new(
        shared,
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(p)
    .with_handshake_offload(true);
    World {
        _dir: dir,
        state: shard,
        now,
        client_policy: EccPolicy::client(client.clone()),
        client_cert: client.cert.der().to_vec(),
        server_cert,
    }
}

/// ECC: the OpenSecureChannel (an ECDSA verification, an ephemeral key, ECDH, a signature)
/// is a job; CreateSession on P-256 with the certificate the channel validated is not (one
/// P-256 signature costs about what the hand-off costs), unless the client asks for an
/// ephemeral key; on P-384 (a dearer signature) it is.
#[test]
fn ecc_create_session_is_a_job_only_when_it_costs_more_than_the_hand_off() {
    use uaring_crypto::EccCurve;
    for (curve, job) in [(EccCurve::NistP256, false), (EccCurve::NistP384, true)] {
        let mut w = ecc_world(curve);
        let mut c = w.link(true, 4006);
        w.pump(&mut c);
        let opn = take(&mut c, JobKind::OpenRequest);
        w.finish(&mut c, opn.run());
        assert!(c.client.is_open(), "{curve:?}: {:?}", c.err);
        let id = w.create_session(&mut c, true);
        if job {
            let j = take(&mut c, JobKind::CreateSession);
            w.finish(&mut c, j.run());
        } else {
            assert!(c.server.take_job().is_none(), "{curve:?}: no job");
        }
        let created = w.created(&mut c, id);
        let id = w.activate(&mut c, &created, None);
        assert!(
            matches!(w.response(&mut c, id), Response::ActivateSession(r) if r.response_header.service_result.is_good()),
            "{curve:?}"
        );
    }
    // Asking for an ephemeral key makes CreateSession a job on P-256 too.
    let mut w = ecc_world(EccCurve::NistP256);
    let mut c = w.link(true, 4007);
    w.pump(&mut c);
    w.run_jobs(&mut c);
    let req = CreateSessionRequest {
        request_header: RequestHeader {
            additional_header: ExtensionObject::from_struct(&AdditionalParametersType {
                parameters: vec![KeyValuePair {
                    key: uaring_core::types::QualifiedName::new(0, "ECDHPolicyUri"),
                    value: uaring_core::Variant::String(EccCurve::NistP256.policy_uri().into()),
                }],
            }),
            ..Default::default()
        },
        client_description: ApplicationDescription {
            application_uri: "urn:t:client".into(),
            ..Default::default()
        },
        client_nonce: ByteString::from(vec![7u8; 32]),
        client_certificate: ByteString::from(&w.client_cert[..]),
        requested_session_timeout: 60_000.0,
        ..Default::default()
    };
    let id = w.send(&mut c, Request::CreateSession(Box::new(req)));
    let j = take(&mut c, JobKind::CreateSession);
    w.finish(&mut c, j.run());
    let created = w.created(&mut c, id);
    assert!(!created.response_header.additional_header.is_null());
}
