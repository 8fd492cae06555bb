//! Core's ClientConnection against core's ServerConnection over the RSA policies of this
//! crate, wired by in-memory byte queues: OpenSecureChannel with certificates, Sign and
//! SignAndEncrypt chunks, multi-chunk messages both ways, token renewal, tampering,
//! untrusted certificates (rejected, then trusted without a restart), 4096-bit keys (the
//! ExtraPaddingSize byte), handshake limiting.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use common::{find_err, now_unix_s, TempDir};
use uaring_core::client::{ClientConfig, ClientConnection, ClientState};
use uaring_core::config::TransportLimits;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    MessageSecurityMode, ReadRequest, ReadResponse, ReadValueId, ResponseHeader,
};
use uaring_core::secure_channel::{EndpointSecurity, SecurityPolicy, SecurityProvider};
use uaring_core::server::connection::{ConnStatus, ServerConnection};
use uaring_core::server::context::{ConnectionHost, RequestContext};
use uaring_core::types::{ByteString, DataValue, DateTime, NodeId, StatusCode, Variant};
use uaring_core::Now;
use uaring_crypto::{
    generate_self_signed, CertificateRequest, HandshakeLimits, LoginLimiterConfig, OwnIdentity,
    Pki, PkiConfig, PolicyId, RsaPolicy, ShardTrust,
};

const MODES: [MessageSecurityMode; 2] = [
    MessageSecurityMode::Sign,
    MessageSecurityMode::SignAndEncrypt,
];
const POLICIES: [PolicyId; 3] = [
    PolicyId::Basic256Sha256,
    PolicyId::Aes128Sha256RsaOaep,
    PolicyId::Aes256Sha256RsaPss,
];

fn identity(uri: &str, name: &str, bits: usize) -> Arc<OwnIdentity> {
    let mut req = CertificateRequest::new(uri, name, now_unix_s());
    req.key_bits = bits;
    let (cert, key) = generate_self_signed(&req).unwrap();
    OwnIdentity::new(cert, key).unwrap()
}

struct Host {
    limits: TransportLimits,
    security: SecurityProvider,
    next_id: u32,
    read_value_len: usize,
    seen_modes: Vec<MessageSecurityMode>,
    client_certs: usize,
    random: uaring_core::random::ChaCha,
}

impl ConnectionHost for Host {
    fn transport_limits(&self) -> &TransportLimits {
        &self.limits
    }
    fn random(&mut self) -> &mut dyn uaring_core::random::Random {
        &mut self.random
    }
    fn security(&self) -> &SecurityProvider {
        &self.security
    }
    fn open_channel(&mut self) -> Result<u32, StatusCode> {
        self.next_id += 1;
        Ok(self.next_id)
    }
    fn channel_closed(&mut self, _: u32) {}
    fn dispatch(&mut self, ctx: &RequestContext<'_>, request: Request, now: Now) -> Response {
        self.seen_modes.push(ctx.security_mode);
        if ctx.client_certificate.is_some() {
            self.client_certs += 1;
        }
        let h = request.request_header().request_handle;
        match request {
            Request::Read(r) => Response::Read(Box::new(ReadResponse {
                response_header: ResponseHeader {
                    timestamp: now.utc,
                    request_handle: h,
                    ..Default::default()
                },
                results: r
                    .nodes_to_read
                    .iter()
                    .enumerate()
                    .map(|(i, _)| DataValue {
                        value: Variant::ByteString(ByteString::from(vec![
                            (i % 251) as u8;
                            self.read_value_len
                        ])),
                        ..Default::default()
                    })
                    .collect(),
                diagnostic_infos: Vec::new(),
            })),
            _ => Response::ServiceFault(Box::default()),
        }
    }
}

/// The time of the requests: now by the wall clock, as the test certificates are made
/// valid from now (the policies judge validity at the time they are given).
fn t0() -> Now {
    Now::new(
        1_000_000_000,
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    )
}

struct Setup {
    _dir: TempDir,
    server_id: Arc<OwnIdentity>,
    client_id: Arc<OwnIdentity>,
    trust: Arc<ShardTrust>,
}

fn setup(server_bits: usize, client_bits: usize, trust_client: bool) -> Setup {
    let dir = TempDir::new("uasc");
    let server_id = identity("urn:test:server", "server", server_bits);
    let client_id = identity("urn:test:client", "client", client_bits);
    let mut pki = Pki::open(
        dir.path(),
        PkiConfig {
            rescan_interval_ms: 0,
            ..PkiConfig::default()
        },
    )
    .unwrap();
    if trust_client {
        pki.trust(&client_id.cert).unwrap();
    }
    let trust = ShardTrust::new(
        pki,
        Some(HandshakeLimits::default()),
        LoginLimiterConfig::default(),
    );
    Setup {
        _dir: dir,
        server_id,
        client_id,
        trust,
    }
}

fn provider(s: &Setup) -> SecurityProvider {
    let mut p = SecurityProvider::empty();
    for id in POLICIES {
        p.add_policy(RsaPolicy::server(id, s.server_id.clone(), s.trust.clone()).unwrap());
        for mode in MODES {
            p.add_endpoint(EndpointSecurity {
                policy_uri: id.uri().to_owned(),
                mode,
            });
        }
    }
    p.validate().unwrap();
    p
}

struct Pair {
    host: Host,
    server: ServerConnection,
    client: ClientConnection,
    c2s: Vec<u8>,
    s2c: Vec<u8>,
    now: Now,
    server_err: Option<StatusCode>,
    server_closed: bool,
}

impl Pair {
    fn new(s: &Setup, id: PolicyId, mode: MessageSecurityMode, buf: u32) -> Pair {
        let limits = TransportLimits {
            receive_buffer_size: buf,
            send_buffer_size: buf,
            ..TransportLimits::default()
        };
        let mut host = Host {
            limits,
            security: provider(s),
            next_id: 0,
            read_value_len: 0,
            seen_modes: Vec::new(),
            client_certs: 0,
            random: uaring_core::random::ChaCha::from_u64(3),
        };
        let now = t0();
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7)), 50000);
        let server = ServerConnection::new(&mut host, Some(peer), now);
        let mut cfg = ClientConfig::new("opc.tcp://localhost:4840/x");
        cfg.limits.receive_buffer_size = buf;
        cfg.limits.send_buffer_size = buf;
        cfg.requested_lifetime_ms = 60_000;
        cfg.policy = RsaPolicy::client(id, s.client_id.clone()).unwrap();
        cfg.mode = mode;
        cfg.server_certificate = Some(s.server_id.cert.der().to_vec());
        let mut client =
            ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(2)));
        let mut c2s = Vec::new();
        client.start(now, &mut c2s);
        Pair {
            host,
            server,
            client,
            c2s,
            s2c: Vec::new(),
            now,
            server_err: None,
            server_closed: false,
        }
    }

    fn pump(&mut self) {
        for _ in 0..100 {
            if self.c2s.is_empty() && self.s2c.is_empty() {
                return;
            }
            if !self.c2s.is_empty() {
                let data = std::mem::take(&mut self.c2s);
                if self.server_closed {
                    continue;
                }
                let mut out = Vec::new();
                let st = self
                    .server
                    .on_recv(&mut self.host, self.now, &data, &mut out);
                if let Some(e) = find_err(&out) {
                    self.server_err.get_or_insert(e);
                }
                self.s2c.extend_from_slice(&out);
                if st == ConnStatus::Close {
                    self.server_closed = true;
                }
            }
            if !self.s2c.is_empty() {
                let data = std::mem::take(&mut self.s2c);
                let _ = self.client.on_recv(self.now, &data, &mut self.c2s);
            }
        }
        panic!("no quiescence");
    }

    fn read(&mut self, nodes: usize, value_len: usize) -> ReadResponse {
        self.host.read_value_len = value_len;
        let req = Request::Read(Box::new(ReadRequest {
            nodes_to_read: vec![
                ReadValueId {
                    node_id: NodeId::ns0(2258),
                    attribute_id: 13,
                    ..Default::default()
                };
                nodes
            ],
            ..Default::default()
        }));
        let id = self
            .client
            .send_request(req, self.now, &mut self.c2s)
            .unwrap();
        self.pump();
        match self.client.poll_response() {
            Some((rid, Response::Read(r))) if rid == id => *r,
            other => panic!(
                "unexpected {other:?} (server err {:?}, client {:?})",
                self.server_err,
                self.client.state()
            ),
        }
    }
}

#[test]
fn every_policy_and_mode_opens_reads_and_renews() {
    let s = setup(2048, 2048, true);
    for id in POLICIES {
        for mode in MODES {
            let mut p = Pair::new(&s, id, mode, 8192);
            p.pump();
            assert_eq!(
                p.client.state(),
                ClientState::Open,
                "{id:?} {mode:?}: server err {:?}",
                p.server_err
            );
            // Small, then multi-chunk in both directions (a request of ~40 KB, a response of
            // ~300 KB in 8 KiB chunks).
            assert_eq!(p.read(1, 10).results.len(), 1);
            let r = p.read(2000, 150);
            assert_eq!(r.results.len(), 2000);
            assert_eq!(
                r.results[1999].value,
                Variant::ByteString(ByteString::from(vec![(1999 % 251) as u8; 150]))
            );
            // Renew: new keys from new nonces; the old token keeps working until the new one
            // is used.
            let (t1, _) = p.client.token().unwrap();
            p.client.renew(p.now, &mut p.c2s).unwrap();
            p.pump();
            let (t2, _) = p.client.token().unwrap();
            assert_ne!(t1, t2);
            assert_eq!(p.read(500, 64).results.len(), 500);
            assert!(
                p.server_err.is_none(),
                "{id:?} {mode:?}: {:?}",
                p.server_err
            );
            assert!(p.host.seen_modes.iter().all(|m| *m == mode));
            assert_eq!(p.host.client_certs, 3);
        }
    }
}

#[test]
fn tampered_chunks_close_the_channel() {
    let s = setup(2048, 2048, true);
    for mode in MODES {
        let mut p = Pair::new(&s, PolicyId::Basic256Sha256, mode, 8192);
        p.pump();
        assert!(p.client.is_open());
        let req = Request::Read(Box::new(ReadRequest {
            nodes_to_read: vec![ReadValueId::default()],
            ..Default::default()
        }));
        p.client.send_request(req, p.now, &mut p.c2s).unwrap();
        let n = p.c2s.len();
        p.c2s[n - 5] ^= 0x40;
        p.pump();
        assert_eq!(
            p.server_err,
            Some(StatusCode::BadSecurityChecksFailed),
            "{mode:?}"
        );
        assert!(p.server_closed);
    }
}

#[test]
fn untrusted_client_is_refused_then_accepted_once_trusted() {
    let s = setup(2048, 2048, false);
    let mut p = Pair::new(
        &s,
        PolicyId::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
        65536,
    );
    p.pump();
    assert_eq!(p.server_err, Some(StatusCode::BadSecurityChecksFailed));
    assert!(p.client.is_closed());
    // The certificate was copied to rejected/certs.
    let rejected: Vec<_> = std::fs::read_dir(s._dir.path().join("rejected/certs"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(rejected.len(), 1);
    // The operator moves it to trusted/certs: accepted without restarting anything.
    let from = rejected[0].path();
    std::fs::rename(
        &from,
        s._dir
            .path()
            .join("trusted/certs")
            .join(from.file_name().unwrap()),
    )
    .unwrap();
    // Until the trust state is refreshed (the runtime's `uaring-pki` thread does it; no
    // handshake reads a directory) it is still refused; then it is accepted.
    let mut p = Pair::new(
        &s,
        PolicyId::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
        65536,
    );
    p.pump();
    assert_eq!(p.server_err, Some(StatusCode::BadSecurityChecksFailed));
    assert!(
        s.trust.refresh(1).unwrap(),
        "the refresh loads the new trust list"
    );
    assert!(!s.trust.refresh(2).unwrap(), "and only once");
    let mut p = Pair::new(
        &s,
        PolicyId::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
        65536,
    );
    p.pump();
    assert!(p.client.is_open(), "{:?}", p.server_err);
    assert_eq!(p.read(3, 3).results.len(), 3);
}

#[test]
fn wrong_server_certificate_thumbprint_is_refused() {
    let s = setup(2048, 2048, true);
    let other = identity("urn:test:other", "other", 2048);
    let mut p = Pair::new(
        &s,
        PolicyId::Aes256Sha256RsaPss,
        MessageSecurityMode::Sign,
        65536,
    );
    // Rebuild the client pointing at another server certificate.
    let mut cfg = ClientConfig::new("opc.tcp://localhost:4840/x");
    cfg.policy = RsaPolicy::client(PolicyId::Aes256Sha256RsaPss, s.client_id.clone()).unwrap();
    cfg.mode = MessageSecurityMode::Sign;
    cfg.server_certificate = Some(other.cert.der().to_vec());
    p.client = ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(2)));
    p.c2s.clear();
    p.client.start(p.now, &mut p.c2s);
    p.pump();
    assert_eq!(p.server_err, Some(StatusCode::BadCertificateInvalid));
}

#[test]
fn keys_over_2048_bits_use_the_extra_padding_byte() {
    // Server 4096 bits (the client's OPN carries ExtraPaddingSize), client 3072 bits (so does
    // the server's answer).
    let s = setup(4096, 3072, true);
    for id in POLICIES {
        let mut p = Pair::new(&s, id, MessageSecurityMode::SignAndEncrypt, 65536);
        p.pump();
        assert!(p.client.is_open(), "{id:?}: {:?}", p.server_err);
        assert_eq!(p.read(100, 100).results.len(), 100);
        p.client.renew(p.now, &mut p.c2s).unwrap();
        p.pump();
        assert_eq!(p.read(1, 1).results.len(), 1);
    }
}

#[test]
fn handshakes_are_limited_per_address() {
    let dir = TempDir::new("uasc-hs");
    let server_id = identity("urn:test:server", "server", 2048);
    let client_id = identity("urn:test:client", "client", 2048);
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    pki.trust(&client_id.cert).unwrap();
    let limits = HandshakeLimits {
        burst: 2,
        refill_interval_ms: 3_600_000,
        addresses_max: 16,
    };
    let trust = ShardTrust::new(pki, Some(limits), LoginLimiterConfig::default());
    let s = Setup {
        _dir: dir,
        server_id,
        client_id,
        trust,
    };
    for i in 0..3 {
        let mut p = Pair::new(
            &s,
            PolicyId::Basic256Sha256,
            MessageSecurityMode::Sign,
            65536,
        );
        p.pump();
        if i < 2 {
            assert!(p.client.is_open());
        } else {
            assert_eq!(p.server_err, Some(StatusCode::BadTcpServerTooBusy));
        }
    }
}

#[test]
fn session_signatures_and_user_secrets_round_trip() {
    let s = setup(2048, 2048, true);
    for id in POLICIES {
        let server = RsaPolicy::server(id, s.server_id.clone(), s.trust.clone()).unwrap();
        let client = RsaPolicy::client(id, s.client_id.clone()).unwrap();
        // CreateSession: the server signs clientCertificate ‖ clientNonce.
        let data = [s.client_id.cert.der(), &[7u8; 32][..]].concat();
        let (alg, sig) = server.sign_own(&data).unwrap();
        client
            .verify_signature(s.server_id.cert.der(), &data, &alg, &sig)
            .unwrap();
        assert_eq!(
            client.verify_signature(s.server_id.cert.der(), &data[1..], &alg, &sig),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        // A password for the server.
        let nonce = [9u8; 32];
        let ct =
            uaring_crypto::encrypt_user_password(id, &s.server_id.cert, b"secret", &nonce).unwrap();
        let alg = id.asym_encryption_algorithm_uri().unwrap();
        assert_eq!(
            server.decrypt_user_secret(alg, &ct, &nonce).unwrap(),
            b"secret"
        );
        assert_eq!(
            server.decrypt_user_secret(alg, &ct, &[8u8; 32]),
            Err(StatusCode::BadIdentityTokenInvalid)
        );
        server
            .validate_client_certificate(s.client_id.cert.der(), Some("urn:test:client"), t0())
            .unwrap();
        assert_eq!(
            server.validate_client_certificate(s.client_id.cert.der(), Some("urn:test:nope"), t0()),
            Err(StatusCode::BadCertificateUriInvalid)
        );
        // Validity is judged at the time the caller gives, not by a clock of the plug-in's:
        // the same certificate a hundred years on, and before it was made.
        let years = |y: i64| {
            Now::new(
                1_000_000_000,
                DateTime::from_unix_nanos(
                    (now_unix_s() + y * 365 * 86_400) as i128 * 1_000_000_000,
                ),
            )
        };
        for when in [years(100), years(-1)] {
            assert_eq!(
                server.validate_client_certificate(
                    s.client_id.cert.der(),
                    Some("urn:test:client"),
                    when
                ),
                Err(StatusCode::BadCertificateTimeInvalid)
            );
        }
    }
}

/// A valid OpenSecureChannel chunk with random bytes flipped, truncated or extended: the server
/// never panics; it answers an ERR and closes (or, if the flip hit nothing that matters, opens).
#[test]
fn mutated_open_secure_channel_chunks_never_panic() {
    let s = setup(2048, 2048, true);
    let mut p = Pair::new(
        &s,
        PolicyId::Basic256Sha256,
        MessageSecurityMode::SignAndEncrypt,
        65536,
    );
    // Hello → server, ACK → client, which then writes its OPN.
    let hello = std::mem::take(&mut p.c2s);
    let mut ack = Vec::new();
    let _ = p.server.on_recv(&mut p.host, p.now, &hello, &mut ack);
    p.client.on_recv(p.now, &ack, &mut p.c2s).unwrap();
    let opn = std::mem::take(&mut p.c2s);
    assert_eq!(&opn[..3], b"OPN");
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut closed = 0;
    for i in 0..300 {
        let mut m = opn.clone();
        match i % 4 {
            0 | 1 => {
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % m.len();
                    m[at] ^= 1 << (next() % 8);
                }
            }
            2 => {
                let cut = 8 + (next() as usize) % (m.len() - 8);
                m.truncate(cut);
                let n = m.len() as u32;
                m[4..8].copy_from_slice(&n.to_le_bytes());
            }
            _ => {
                let extra = 1 + (next() as usize) % 300;
                m.extend((0..extra).map(|_| next() as u8));
                let n = m.len() as u32;
                m[4..8].copy_from_slice(&n.to_le_bytes());
            }
        }
        let mut host = Host {
            limits: TransportLimits::default(),
            security: provider(&s),
            next_id: 0,
            read_value_len: 0,
            seen_modes: Vec::new(),
            client_certs: 0,
            random: uaring_core::random::ChaCha::from_u64(4),
        };
        let mut server = ServerConnection::new(&mut host, None, t0());
        let mut out = Vec::new();
        let _ = server.on_recv(&mut host, t0(), &hello, &mut out);
        out.clear();
        if server.on_recv(&mut host, t0(), &m, &mut out) == ConnStatus::Close {
            assert!(find_err(&out).is_some(), "closed without ERR");
            closed += 1;
        }
    }
    assert!(closed > 250, "{closed}");
}
