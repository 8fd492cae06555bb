//! The ECC policies (ECC_nistP256, ECC_nistP384): known-answer tests of the primitives
//! (RFC 5869 HKDF, RFC 5903 ECDH), the key derivation of OPC 10000-6 §6.8.1 checked against an
//! independent HKDF (RustCrypto HMAC), a server token against a client's keys, ECC
//! certificates (generation, PKI validation), and the refusals: a wrong ECDSA signature, an
//! RSA certificate on an ECC endpoint, a key on the other curve.

mod common;
#[path = "support/pretend.rs"]
mod pretend;

use std::sync::Arc;

use common::{hex, now_unix_s, TempDir};
use hmac::{Hmac, Mac};
use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::secure_channel::{Role, SecurityPolicy};
use uaring_core::{DateTime, Now, StatusCode};
use uaring_crypto::ecc::{derive_ecc_keys, hkdf_into, EphemeralKey};
use uaring_crypto::{
    generate_self_signed, generate_self_signed_ecc, CertificateRequest, EccCurve, EccIdentity,
    EccPolicy, LoginLimiterConfig, Pki, PkiConfig, ShardTrust,
};

fn now() -> Now {
    Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(now_unix_s() as i128 * 1_000_000_000),
    )
}

fn req(uri: &str) -> CertificateRequest {
    CertificateRequest::new(uri, "ecc test", now_unix_s())
}

fn ecc_ident(curve: EccCurve, uri: &str) -> Arc<EccIdentity> {
    let (c, k) = generate_self_signed_ecc(&req(uri), curve).unwrap();
    EccIdentity::new(c, k).unwrap()
}

/// A server policy of `curve` whose PKI trusts every certificate in `trusted`.
fn server(
    curve: EccCurve,
    dir: &TempDir,
    trusted: &[&uaring_crypto::Certificate],
) -> Arc<EccPolicy> {
    let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    for c in trusted {
        pki.trust(c).unwrap();
    }
    let trust = ShardTrust::new(pki, None, LoginLimiterConfig::default());
    EccPolicy::server(ecc_ident(curve, "urn:t:server"), trust)
}

#[test]
fn hkdf_sha256_rfc5869_case_1() {
    let ikm = [0x0b; 22];
    let salt = hex("000102030405060708090a0b0c");
    let info = hex("f0f1f2f3f4f5f6f7f8f9");
    let mut okm = [0u8; 42];
    hkdf_into(EccCurve::NistP256, &salt, &ikm, &info, &mut okm).unwrap();
    assert_eq!(
        okm.to_vec(),
        hex("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865")
    );
}

#[test]
fn ecdh_p256_rfc5903_section_8_1() {
    let i = hex("C88F01F510D9AC3F70A292DAA2316DE544E9AAB8AFE84049C62A9C57862D1433");
    let gi = hex(concat!(
        "DAD0B65394221CF9B051E1FECA5787D098DFE637FC90B9EF945D0C3772581180",
        "5271A0461CDB8252D61F1C456FA3E59AB1F45B33ACCF5F58389E0577B8990BB3"
    ));
    let r = hex("C6EF9C5D78AE012A011164ACB397CE2088685D8F06BF9BE0B283AB46476BEE53");
    let gr = hex(concat!(
        "D12DFB5289C8D4F81208B70270398C342296970A0BCCB74C736FC7554494BF63",
        "56FBF3CA366CC23E8157854C13C58D6AAC23F046ADA30F8353E74F33039872AB"
    ));
    let gir = hex("D6840F6B42F6EDAFD13116E0E12565202FEF8E9ECE7DCE03812464D04B9442DE");
    let a = EphemeralKey::from_scalar(EccCurve::NistP256, &i).unwrap();
    let b = EphemeralKey::from_scalar(EccCurve::NistP256, &r).unwrap();
    // The nonce is the public key without the 04 prefix.
    assert_eq!(a.nonce(), &gi[..]);
    assert_eq!(b.nonce(), &gr[..]);
    assert_eq!(&a.shared_secret(&gr).unwrap()[..], &gir[..]);
    assert_eq!(&b.shared_secret(&gi).unwrap()[..], &gir[..]);
    // A point off the curve, or a nonce of the wrong length, is BadNonceInvalid.
    let mut off = gr.clone();
    off[63] ^= 1;
    assert_eq!(
        a.shared_secret(&off).err(),
        Some(StatusCode::BadNonceInvalid.0)
    );
    assert_eq!(
        a.shared_secret(&gr[..63]).err(),
        Some(StatusCode::BadNonceInvalid.0)
    );
}

/// brainpoolP256r1 and brainpoolP384r1 ECDH, RFC 7027 Appendix A.1 and A.2 (the same values as
/// OpenSSL computes for these scalars): the nonces are the public keys, the secrets agree, and
/// a point off the curve is BadNonceInvalid.
#[test]
fn ecdh_brainpool_rfc7027_appendix_a() {
    let vectors = [
        (
            EccCurve::BrainpoolP256r1,
            "81DB1EE100150FF2EA338D708271BE38300CB54241D79950F77B063039804F1D",
            concat!(
                "44106E913F92BC02A1705D9953A8414DB95E1AAA49E81D9E85F929A8E3100BE5",
                "8AB4846F11CACCB73CE49CBDD120F5A900A69FD32C272223F789EF10EB089BDC"
            ),
            "55E40BC41E37E3E2AD25C3C6654511FFA8474A91A0032087593852D3E7D76BD3",
            concat!(
                "8D2D688C6CF93E1160AD04CC4429117DC2C41825E1E9FCA0ADDD34E6F1B39F7B",
                "990C57520812BE512641E47034832106BC7D3E8DD0E4C7F1136D7006547CEC6A"
            ),
            "89AFC39D41D3B327814B80940B042590F96556EC91E6AE7939BCE31F3A18BF2B",
        ),
        (
            EccCurve::BrainpoolP384r1,
            concat!(
                "1E20F5E048A5886F1F157C74E91BDE2B98C8B52D58E5003D",
                "57053FC4B0BD65D6F15EB5D1EE1610DF870795143627D042"
            ),
            concat!(
                "68B665DD91C195800650CDD363C625F4E742E8134667B767B1B476793588F885",
                "AB698C852D4A6E77A252D6380FCAF06855BC91A39C9EC01DEE36017B7D673A93",
                "1236D2F1F5C83942D049E3FA20607493E0D038FF2FD30C2AB67D15C85F7FAA59"
            ),
            concat!(
                "032640BC6003C59260F7250C3DB58CE647F98E1260ACCE4A",
                "CDA3DD869F74E01F8BA5E0324309DB6A9831497ABAC96670"
            ),
            concat!(
                "4D44326F269A597A5B58BBA565DA5556ED7FD9A8A9EB76C25F46DB69D19DC8CE",
                "6AD18E404B15738B2086DF37E71D1EB462D692136DE56CBE93BF5FA3188EF58B",
                "C8A3A0EC6C1E151A21038A42E9185329B5B275903D192F8D4E1F32FE9CC78C48"
            ),
            concat!(
                "0BD9D3A7EA0B3D519D09D8E48D0785FB744A6B355E6304BC",
                "51C229FBBCE239BBADF6403715C35D4FB2A5444F575D4F42"
            ),
        ),
    ];
    for (curve, da, qa, db, qb, z) in vectors {
        let a = EphemeralKey::from_scalar(curve, &hex(da)).unwrap();
        let b = EphemeralKey::from_scalar(curve, &hex(db)).unwrap();
        assert_eq!(a.nonce(), &hex(qa)[..], "{curve:?}");
        assert_eq!(b.nonce(), &hex(qb)[..], "{curve:?}");
        assert_eq!(&a.shared_secret(&hex(qb)).unwrap()[..], &hex(z)[..]);
        assert_eq!(&b.shared_secret(&hex(qa)).unwrap()[..], &hex(z)[..]);
        let mut off = hex(qb);
        let last = off.len() - 1;
        off[last] ^= 1;
        assert_eq!(
            a.shared_secret(&off).err(),
            Some(StatusCode::BadNonceInvalid.0)
        );
    }
}

/// HKDF written out with RustCrypto's HMAC (RFC 5869 §2.2, 2.3), to check the salt layout
/// against an implementation that shares nothing with the one under test.
fn reference_hkdf<M: Mac + hmac::digest::KeyInit + Clone>(
    salt: &[u8],
    ikm: &[u8],
    len: usize,
) -> Vec<u8> {
    let mut m = <M as hmac::digest::KeyInit>::new_from_slice(salt).unwrap();
    m.update(ikm);
    let prk = m.finalize().into_bytes();
    let mut out = Vec::new();
    let mut t: Vec<u8> = Vec::new();
    let mut counter = 1u8;
    while out.len() < len {
        let mut m = <M as hmac::digest::KeyInit>::new_from_slice(&prk).unwrap();
        m.update(&t);
        m.update(salt); // info = salt (OPC 10000-6 §6.8.1)
        m.update(&[counter]);
        t = m.finalize().into_bytes().to_vec();
        out.extend_from_slice(&t);
        counter += 1;
    }
    out.truncate(len);
    out
}

fn check_derivation(curve: EccCurve, encrypt: bool) {
    let client = EphemeralKey::generate(curve).unwrap();
    let server = EphemeralKey::generate(curve).unwrap();
    let shared = client.shared_secret(server.nonce()).unwrap();
    let (c, s) = derive_ecc_keys(curve, encrypt, &shared, client.nonce(), server.nonce()).unwrap();
    let (sig, enc, iv) = curve.symmetric_key_lens();
    let len = if encrypt { sig + enc + iv } else { sig };
    let salt = |label: &[u8], a: &[u8], b: &[u8]| {
        let mut v = (len as u16).to_le_bytes().to_vec();
        v.extend_from_slice(label);
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        v
    };
    let cs = salt(b"opcua-client", client.nonce(), server.nonce());
    let ss = salt(b"opcua-server", server.nonce(), client.nonce());
    let (rc, rs) = if curve.coordinate_len() == 48 {
        (
            reference_hkdf::<Hmac<sha2::Sha384>>(&cs, &shared, len),
            reference_hkdf::<Hmac<sha2::Sha384>>(&ss, &shared, len),
        )
    } else {
        (
            reference_hkdf::<Hmac<sha2::Sha256>>(&cs, &shared, len),
            reference_hkdf::<Hmac<sha2::Sha256>>(&ss, &shared, len),
        )
    };
    assert_eq!(c.signing_key(), &rc[..sig]);
    assert_eq!(s.signing_key(), &rs[..sig]);
    if encrypt {
        assert_eq!(c.iv(), &rc[sig + enc..]);
        assert_eq!(s.iv(), &rs[sig + enc..]);
    }
    assert_ne!(c.signing_key(), s.signing_key());
    assert_eq!(c.encrypts(), encrypt);
}

#[test]
fn key_derivation_matches_an_independent_hkdf() {
    for curve in EccCurve::ALL {
        check_derivation(curve, true);
        check_derivation(curve, false);
    }
}

#[test]
fn a_server_token_talks_with_a_client_deriving_on_its_own() {
    for curve in EccCurve::ALL {
        for mode in [
            MessageSecurityMode::Sign,
            MessageSecurityMode::SignAndEncrypt,
        ] {
            let dir = TempDir::new("ecc-token");
            let policy = server(curve, &dir, &[]);
            assert!(!policy.legacy_sequence_numbers());
            assert!(policy.offers_user_tokens());
            assert!(policy.offers_ephemeral_keys());
            let client = EphemeralKey::generate(curve).unwrap();
            let (server_nonce, crypto) = policy
                .new_token(
                    Role::Server,
                    mode,
                    vec![0; curve.nonce_len()],
                    client.nonce(),
                )
                .unwrap();
            assert_eq!(server_nonce.len(), curve.nonce_len());
            let shared = client.shared_secret(&server_nonce).unwrap();
            let encrypt = mode == MessageSecurityMode::SignAndEncrypt;
            let (ck, sk) =
                derive_ecc_keys(curve, encrypt, &shared, client.nonce(), &server_nonce).unwrap();
            // The client signs (and encrypts) with its keys; the server token opens it.
            let layout = crypto.recv_layout();
            assert_eq!(layout.signature_len, curve.symmetric_signature_len());
            assert_eq!(layout.encrypted, encrypt);
            let mut msg = vec![7u8; 64];
            let mut sig = vec![0u8; ck.signature_len()];
            ck.sign(&msg, &mut sig).unwrap();
            crypto.verify(&msg, &sig).unwrap();
            let mut bad = sig.clone();
            bad[0] ^= 1;
            assert_eq!(
                crypto.verify(&msg, &bad),
                Err(StatusCode::BadSecurityChecksFailed)
            );
            if encrypt {
                let plain = msg.clone();
                ck.encrypt_in_place(&mut msg).unwrap();
                assert_ne!(msg, plain);
                crypto.decrypt(&mut msg, 0).unwrap();
                assert_eq!(msg, plain);
            }
            // And the server's chunks verify with the server keys the client derived.
            let mut out = vec![0u8; crypto.send_layout().signature_len];
            crypto.sign(b"from the server", &mut out).unwrap();
            assert!(sk.verify(b"from the server", &out));
            // A client nonce that is not a point of the curve: BadNonceInvalid.
            let mut off = client.nonce().to_vec();
            off[1] ^= 0x55;
            assert_eq!(
                policy.new_token(Role::Server, mode, Vec::new(), &off).err(),
                Some(StatusCode::BadNonceInvalid)
            );
        }
    }
}

/// A curve a key of `curve`'s policy must not be on: of the same size where there is one
/// (NIST P-256 and brainpoolP256r1 points are both 64 bytes), else another size.
fn other_curve(curve: EccCurve) -> EccCurve {
    match curve {
        EccCurve::NistP256 => EccCurve::BrainpoolP256r1,
        EccCurve::NistP384 => EccCurve::NistP256,
        EccCurve::BrainpoolP256r1 => EccCurve::NistP256,
        EccCurve::BrainpoolP384r1 => EccCurve::NistP384,
    }
}

#[test]
fn ecc_certificates_validate_and_sign() {
    for curve in EccCurve::ALL {
        let id = ecc_ident(curve, "urn:t:client");
        assert_eq!(id.cert.ec_curve(), Some(curve));
        assert_eq!(id.cert.key_bits(), 0, "no RSA key");
        let ku = id.cert.key_usage().unwrap();
        assert!(ku.digital_signature && !ku.key_encipherment);
        let dir = TempDir::new("ecc-pki");
        let mut pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
        // Untrusted first, then trusted: the self-signed ECDSA signature verifies.
        assert!(pki
            .validate_client(id.cert.der(), None, now_unix_s())
            .is_err());
        pki.trust(&id.cert).unwrap();
        let leaf = pki
            .validate_client(id.cert.der(), Some("urn:t:client"), now_unix_s())
            .unwrap();
        assert_eq!(leaf.ec_curve(), Some(curve));
        // The own-certificate files of the type.
        pki.write_own_ecc(&id.cert, &id.key).unwrap();
        let (c, k) = pki.load_own_ecc(curve).unwrap().unwrap();
        assert!(k.matches(&c));
        assert!(pki.load_own_ecc(other_curve(curve)).unwrap().is_none());
    }
}

#[test]
fn open_secure_channel_checks_and_signatures() {
    for curve in EccCurve::ALL {
        let dir = TempDir::new("ecc-opn");
        let client = ecc_ident(curve, "urn:t:client");
        let wrong_curve = ecc_ident(other_curve(curve), "urn:t:client");
        let (rsa_cert, _) = generate_self_signed(&req("urn:t:client")).unwrap();
        let policy = server(curve, &dir, &[&client.cert, &wrong_curve.cert, &rsa_cert]);
        let own_tp = policy
            .thumbprint(policy.local_certificate().unwrap())
            .unwrap();
        // A trusted client on the curve: the OPN crypto signs with ECDSA, does not encrypt.
        let asym = policy
            .asymmetric(Role::Server, Some(client.cert.der()), Some(&own_tp), now())
            .unwrap();
        let layout = asym.send_layout();
        assert!(!layout.encrypted);
        assert_eq!(layout.signature_len, curve.signature_len());
        let data = b"an OpenSecureChannel chunk";
        let sig = client.key.sign(data).unwrap();
        asym.verify(data, &sig).unwrap();
        // A wrong ECC signature: BadSecurityChecksFailed.
        let mut bad = sig.clone();
        bad[5] ^= 0x80;
        assert_eq!(
            asym.verify(data, &bad),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        assert_eq!(
            asym.verify(b"another chunk", &sig),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        // An RSA certificate on an ECC endpoint, and a key on the other curve (both trusted):
        // BadCertificatePolicyCheckFailed.
        for refused in [rsa_cert.der(), wrong_curve.cert.der()] {
            assert_eq!(
                policy
                    .asymmetric(Role::Server, Some(refused), Some(&own_tp), now())
                    .err(),
                Some(StatusCode::BadCertificatePolicyCheckFailed)
            );
            assert_eq!(
                policy.validate_client_certificate(refused, None, now()),
                Err(StatusCode::BadCertificatePolicyCheckFailed)
            );
        }
        // Another receiver thumbprint: BadCertificateInvalid.
        assert_eq!(
            policy
                .asymmetric(
                    Role::Server,
                    Some(client.cert.der()),
                    Some(&[0u8; 20]),
                    now()
                )
                .err(),
            Some(StatusCode::BadCertificateInvalid)
        );

        // CreateSession's serverSignature verifies with the server certificate (as a client
        // does); ActivateSession's clientSignature: empty algorithm (open62541) or the ECDSA
        // URI accepted, anything else or a wrong signature refused.
        let (alg, server_sig) = policy.sign_own(b"clientCert||clientNonce").unwrap();
        assert_eq!(alg, curve.signature_algorithm_uri());
        let server_cert =
            uaring_crypto::Certificate::from_der(policy.local_certificate().unwrap()).unwrap();
        uaring_crypto::ecc::ecdsa_verify(
            curve,
            &server_cert,
            b"clientCert||clientNonce",
            &server_sig,
        )
        .unwrap();
        let signed = b"serverCert||serverNonce";
        let client_sig = client.key.sign(signed).unwrap();
        for alg in ["", curve.signature_algorithm_uri()] {
            policy
                .verify_signature(client.cert.der(), signed, alg, &client_sig)
                .unwrap();
        }
        assert_eq!(
            policy.verify_signature(
                client.cert.der(),
                signed,
                "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256",
                &client_sig
            ),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        let mut forged = client_sig.clone();
        forged[0] ^= 1;
        assert_eq!(
            policy.verify_signature(client.cert.der(), signed, "", &forged),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        assert_eq!(
            policy.verify_signature(wrong_curve.cert.der(), signed, "", &client_sig),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        // No legacy (RSA) user secret: passwords come as an EccEncryptedSecret.
        assert_eq!(
            policy.decrypt_user_secret("", b"x", b"nonce"),
            Err(StatusCode::BadIdentityTokenInvalid)
        );
    }
}

/// An ECC endpoint offers UserName (an EccEncryptedSecret) and X.509 (ECDSA) token
/// policies under its own policy, as the RSA endpoint beside it does under its own: Part 6
/// §6.8.2 wants no RSA policy in the token policies of an ECC endpoint.
#[test]
fn ecc_endpoints_offer_user_tokens_under_their_own_policy() {
    use uaring_core::config::ServerConfig;
    use uaring_core::generated::types::UserTokenType;
    use uaring_core::roles::Roles;
    use uaring_core::secure_channel::{EndpointSecurity, SecurityProvider, UserTokenSettings};
    use uaring_core::server::service_state::ServiceState;
    use uaring_core::services::identity::user_token_policies_for;
    use uaring_core::shared::ServerShared;
    use uaring_crypto::{
        hash_password, ConfiguredUsers, OwnIdentity, PolicyId, RsaPolicy, UserDirectory, UserEntry,
    };

    let dir = TempDir::new("ecc-tokens");
    let pki = Pki::open(dir.path(), PkiConfig::default()).unwrap();
    let trust = ShardTrust::new(pki, None, LoginLimiterConfig::default());
    let (c, k) = generate_self_signed(&req("urn:t:server")).unwrap();
    let rsa = OwnIdentity::new(c, k).unwrap();
    let users = UserDirectory::new(&[UserEntry {
        name: "op".into(),
        password_hash: hash_password("op-pw").unwrap(),
        roles: Roles::OPERATOR,
    }])
    .unwrap();
    let mut p = SecurityProvider::empty();
    let b256 = PolicyId::Basic256Sha256;
    p.add_policy(RsaPolicy::server(b256, rsa, trust.clone()).unwrap());
    let ecc = EccPolicy::server(ecc_ident(EccCurve::NistP256, "urn:t:server"), trust.clone());
    p.add_policy(ecc.clone());
    for uri in [b256.uri(), ecc.uri()] {
        p.add_endpoint(EndpointSecurity {
            policy_uri: uri.into(),
            mode: MessageSecurityMode::SignAndEncrypt,
        });
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
    let shared = ServerShared::new(ServerConfig::default(), now()).unwrap();
    let shard = ServiceState::new(
        shared,
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(p);
    for uri in [b256.uri(), ecc.uri()] {
        let tokens = user_token_policies_for(&shard, uri);
        let types: Vec<_> = tokens.iter().map(|t| t.token_type).collect();
        assert_eq!(
            types,
            [
                UserTokenType::Anonymous,
                UserTokenType::UserName,
                UserTokenType::Certificate
            ]
        );
        for t in &tokens[1..] {
            assert_eq!(t.security_policy_uri.as_str(), uri);
        }
    }
}

/// The refusals through core's server connection: core's client (uaring's own, in memory)
/// sends an OpenSecureChannel for ECC_nistP256 with a client certificate that does not fit
/// (an RSA key, a P-384 key) or with a broken ECDSA signature; the server answers ERR with
/// the status and closes.
mod connection_refusals {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use uaring_core::client::{ClientConfig, ClientConnection};
    use uaring_core::config::ServerConfig;
    use uaring_core::roles::Roles;
    use uaring_core::secure_channel::{EndpointSecurity, SecurityProvider, UserTokenSettings};
    use uaring_core::server::connection::{ConnStatus, ServerConnection};
    use uaring_core::server::service_state::ServiceState;
    use uaring_core::shared::ServerShared;
    use uaring_crypto::{OwnIdentity, PolicyId, RsaPolicy};

    const URL: &str = "opc.tcp://localhost:4840/x";

    use super::pretend::Pretend;

    /// The status of the server's ERR to `client_policy`'s first OpenSecureChannel, and
    /// whether the server closed.
    fn refusal(
        server_policy: Arc<EccPolicy>,
        client_policy: Arc<dyn SecurityPolicy>,
    ) -> (Option<StatusCode>, bool) {
        let mut p = SecurityProvider::empty();
        p.add_endpoint(EndpointSecurity {
            policy_uri: server_policy.uri().into(),
            mode: MessageSecurityMode::SignAndEncrypt,
        });
        let server_cert = server_policy.local_certificate().unwrap().to_vec();
        p.add_policy(server_policy);
        p.set_user_tokens(UserTokenSettings {
            anonymous: Some(Roles::OPERATOR),
            ..UserTokenSettings::default()
        });
        p.validate().unwrap();
        let shared = ServerShared::new(ServerConfig::default(), now()).unwrap();
        let mut shard = ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        )
        .with_security(p);
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 4000);
        let mut server = ServerConnection::new(&mut shard, Some(peer), now());
        let mut cfg = ClientConfig::new(URL);
        cfg.policy = client_policy;
        cfg.mode = MessageSecurityMode::SignAndEncrypt;
        cfg.server_certificate = Some(server_cert);
        let mut client =
            ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(2)));
        let mut c2s = Vec::new();
        client.start(now(), &mut c2s);
        for _ in 0..20 {
            if c2s.is_empty() {
                break;
            }
            let data = std::mem::take(&mut c2s);
            let mut out = Vec::new();
            let st = server.on_recv(&mut shard, now(), &data, &mut out);
            while let Some(job) = server.take_job() {
                let done = job.run();
                let st = server.on_job_done(&mut shard, now(), done, &mut out);
                if st == ConnStatus::Close {
                    return (common::find_err(&out), true);
                }
            }
            if let Some(e) = common::find_err(&out) {
                return (Some(e), st == ConnStatus::Close);
            }
            if st == ConnStatus::Close {
                return (None, true);
            }
            let _ = client.on_recv(now(), &out, &mut c2s);
        }
        (None, false)
    }

    /// 300 OpenSecureChannel chunks for ECC_nistP256, each one byte of a signed chunk changed
    /// (or the chunk cut short): the server answers ERR and closes, or waits for more bytes,
    /// and never panics; a changed byte is never accepted.
    #[test]
    fn mutated_ecc_open_chunks_are_refused_without_a_panic() {
        let dir = TempDir::new("ecc-mutate");
        let good = ecc_ident(EccCurve::NistP256, "urn:t:client");
        let server_policy = server(EccCurve::NistP256, &dir, &[&good.cert]);
        let client_policy: Arc<dyn SecurityPolicy> = Arc::new(Pretend {
            inner: EccPolicy::client(good.clone()),
            corrupt: false,
        });
        // The client's Hello and OPN bytes, as it sends them.
        let mut shard = shard_for(server_policy.clone());
        let peer = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 4000);
        let mut server_conn = ServerConnection::new(&mut shard, Some(peer), now());
        let mut cfg = ClientConfig::new(URL);
        cfg.policy = client_policy;
        cfg.mode = MessageSecurityMode::SignAndEncrypt;
        cfg.server_certificate = Some(server_policy.local_certificate().unwrap().to_vec());
        let mut client =
            ClientConnection::new(cfg, Box::new(uaring_core::random::ChaCha::from_u64(3)));
        let mut hello = Vec::new();
        client.start(now(), &mut hello);
        let mut out = Vec::new();
        let _ = server_conn.on_recv(&mut shard, now(), &hello, &mut out);
        let mut opn = Vec::new();
        let _ = client.on_recv(now(), &out, &mut opn);
        assert_eq!(&opn[..3], b"OPN");
        drop(server_conn);
        let mut statuses = std::collections::BTreeMap::<u32, u32>::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..300 {
            let mut bytes = opn.clone();
            if i % 10 == 9 {
                bytes.truncate((next() as usize) % bytes.len());
            } else {
                let at = (next() as usize) % bytes.len();
                bytes[at] ^= 1 + (next() % 255) as u8;
            }
            let mut conn = ServerConnection::new(&mut shard, Some(peer), now());
            let mut out = Vec::new();
            let _ = conn.on_recv(&mut shard, now(), &hello, &mut out);
            out.clear();
            let mut st = conn.on_recv(&mut shard, now(), &bytes, &mut out);
            while let Some(job) = conn.take_job() {
                st = conn.on_job_done(&mut shard, now(), job.run(), &mut out);
            }
            // Never an OpenSecureChannel response to a changed chunk.
            assert_ne!(out.get(..3), Some(&b"OPN"[..]), "mutation {i} accepted");
            if st != ConnStatus::Close {
                assert!(out.is_empty(), "mutation {i}: output without closing");
            } else {
                let e = common::find_err(&out).expect("an ERR before the close");
                *statuses.entry(e.0).or_insert(0) += 1;
            }
        }
        // Mostly the signature check; the shard is still fine: the chunk unchanged gets past
        // the certificate and the signature to the (random, off-curve) nonce.
        assert!(
            statuses
                .get(&StatusCode::BadSecurityChecksFailed.0)
                .copied()
                .unwrap_or(0)
                > 100,
            "{statuses:?}"
        );
        let mut conn = ServerConnection::new(&mut shard, Some(peer), now());
        let mut out = Vec::new();
        let _ = conn.on_recv(&mut shard, now(), &hello, &mut out);
        out.clear();
        let _ = conn.on_recv(&mut shard, now(), &opn, &mut out);
        while let Some(job) = conn.take_job() {
            let _ = conn.on_job_done(&mut shard, now(), job.run(), &mut out);
        }
        assert_eq!(common::find_err(&out), Some(StatusCode::BadNonceInvalid));
    }

    fn shard_for(server_policy: Arc<EccPolicy>) -> ServiceState {
        let mut p = SecurityProvider::empty();
        p.add_endpoint(EndpointSecurity {
            policy_uri: server_policy.uri().into(),
            mode: MessageSecurityMode::SignAndEncrypt,
        });
        p.add_policy(server_policy);
        p.set_user_tokens(UserTokenSettings {
            anonymous: Some(Roles::OPERATOR),
            ..UserTokenSettings::default()
        });
        p.validate().unwrap();
        let shared = ServerShared::new(ServerConfig::default(), now()).unwrap();
        ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        )
        .with_security(p)
    }

    #[test]
    fn wrong_certificate_types_and_a_bad_signature_are_refused() {
        let dir = TempDir::new("ecc-refusals");
        let good = ecc_ident(EccCurve::NistP256, "urn:t:client");
        let p384 = ecc_ident(EccCurve::NistP384, "urn:t:client");
        let (c, k) = generate_self_signed(&req("urn:t:client")).unwrap();
        let rsa = OwnIdentity::new(c, k).unwrap();
        let server_policy = server(
            EccCurve::NistP256,
            &dir,
            &[&good.cert, &p384.cert, &rsa.cert],
        );
        let cases: [(Arc<dyn SecurityPolicy>, StatusCode); 3] = [
            (
                Arc::new(Pretend {
                    inner: RsaPolicy::client(PolicyId::Basic256Sha256, rsa.clone()).unwrap(),
                    corrupt: false,
                }),
                StatusCode::BadCertificatePolicyCheckFailed,
            ),
            (
                Arc::new(Pretend {
                    inner: EccPolicy::client(p384.clone()),
                    corrupt: false,
                }),
                StatusCode::BadCertificatePolicyCheckFailed,
            ),
            (
                Arc::new(Pretend {
                    inner: EccPolicy::client(good.clone()),
                    corrupt: true,
                }),
                StatusCode::BadSecurityChecksFailed,
            ),
        ];
        for (client_policy, expected) in cases {
            let (err, closed) = refusal(server_policy.clone(), client_policy);
            assert_eq!(err, Some(expected));
            assert!(closed);
        }
        // The control: the same path with a fitting certificate and an intact signature gets
        // past the certificate and the signature, to the nonce: core's client sends random
        // bytes, not a point of the curve, which is BadNonceInvalid.
        let (err, closed) = refusal(
            server_policy,
            Arc::new(Pretend {
                inner: EccPolicy::client(good),
                corrupt: false,
            }),
        );
        assert_eq!(err, Some(StatusCode::BadNonceInvalid));
        assert!(closed);
    }
}

/// A chain of ECDSA certificates: a P-384 CA (ecdsa-with-SHA384) signs P-256 client
/// certificates (the CA's signature over a P-256 leaf), and its ECDSA-signed CRL revokes one.
#[test]
fn ecdsa_ca_chain_and_crl() {
    use rcgen::{
        BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
        DnType, ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyUsagePurpose, RevokedCertParams,
        SanType, SerialNumber,
    };
    use time::OffsetDateTime;
    use uaring_crypto::status;
    let at = |s: i64| OffsetDateTime::from_unix_timestamp(s).unwrap();
    let now = now_unix_s();
    let ca_key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "ECC CA");
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = at(now - 86400);
    p.not_after = at(now + 86400 * 365);
    p.key_identifier_method = KeyIdMethod::Sha256;
    p.use_authority_key_identifier_extension = true;
    let ca = p.self_signed(&ca_key).unwrap();
    let leaf = |uri: &str, serial: u8| {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut p = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "leaf");
        p.distinguished_name = dn;
        p.subject_alt_names = vec![SanType::URI(uri.try_into().unwrap())];
        p.serial_number = Some(SerialNumber::from_slice(&[0x20, serial]));
        p.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::ContentCommitment,
            KeyUsagePurpose::KeyAgreement,
        ];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ClientAuth,
            ExtendedKeyUsagePurpose::ServerAuth,
        ];
        p.is_ca = IsCa::ExplicitNoCa;
        p.not_before = at(now - 86400);
        p.not_after = at(now + 86400 * 30);
        p.use_authority_key_identifier_extension = true;
        p.key_identifier_method = KeyIdMethod::Sha256;
        p.signed_by(&key, &ca, &ca_key).unwrap().der().to_vec()
    };
    let good = leaf("urn:t:good", 1);
    let revoked = leaf("urn:t:revoked", 2);
    let crl = CertificateRevocationListParams {
        this_update: at(now - 3600),
        next_update: at(now + 86400),
        crl_number: SerialNumber::from_slice(&[1]),
        issuing_distribution_point: None,
        revoked_certs: vec![RevokedCertParams {
            serial_number: SerialNumber::from_slice(&[0x20, 2]),
            revocation_time: at(now - 60),
            reason_code: None,
            invalidity_date: None,
        }],
        key_identifier_method: KeyIdMethod::Sha256,
    }
    .signed_by(&ca, &ca_key)
    .unwrap();
    let tmp = TempDir::new("ecc-ca");
    for (dir, name, bytes) in [
        ("trusted/certs", "ca.der", ca.der().to_vec()),
        ("trusted/crl", "ca.crl", crl.der().to_vec()),
    ] {
        let d = tmp.path().join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    }
    let pki = Pki::open(
        tmp.path(),
        PkiConfig {
            require_crls: true,
            ..PkiConfig::default()
        },
    )
    .unwrap();
    let leaf_cert = pki.validate_client(&good, Some("urn:t:good"), now).unwrap();
    assert_eq!(leaf_cert.ec_curve(), Some(EccCurve::NistP256));
    assert_eq!(
        pki.validate_client(&revoked, Some("urn:t:revoked"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_REVOKED
    );
    // (require_crls: the revocation above needed the ECDSA-signed CRL to verify.) A leaf whose
    // CA signature does not verify:
    let mut forged = good.clone();
    let n = forged.len();
    forged[n - 5] ^= 1;
    assert_eq!(
        pki.validate_client(&forged, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
}

/// A Brainpool chain another implementation made (OpenSSL 3 through Python's `cryptography`;
/// valid 2026–2126): a brainpoolP384r1 CA that signs with ecdsa-with-SHA384, and a
/// brainpoolP256r1 client certificate it signed — another curve and another hash than the
/// leaf's own policy uses. The PKI validates it with the CA trusted; a changed signature bit
/// does not verify.
#[test]
fn a_brainpool_chain_made_by_openssl_validates() {
    use uaring_crypto::status;
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBrDCCATOgAwIBAgICEAEwCgYIKoZIzj0EAwMwHDEaMBgGA1UEAwwRYnJhaW5w
b29sIHRlc3QgQ0EwIBcNMjYwMTAxMDAwMDAwWhgPMjEyNjAxMDEwMDAwMDBaMBwx
GjAYBgNVBAMMEWJyYWlucG9vbCB0ZXN0IENBMHowFAYHKoZIzj0CAQYJKyQDAwII
AQELA2IABFos9BAw/upXo2WveJyEarS3chdN0l2cjsxrGFkfDeDiSivz5fvYb4Ox
H1MxVwTmVoJgcLelbVIkeHMjYn5n4LZuyBI7ZhP00irNj8GYEe6y7WLJIDRcmY21
AB23EPoq66NCMEAwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwHQYD
VR0OBBYEFAPcT12t43anbzcx3lsZLTxPCjjEMAoGCCqGSM49BAMDA2cAMGQCMCBM
rjnzY9fg5F+SiLrm7LA0JLZUoIa3he4bLeB0RL9BzCDD65FklObne7H6tRKHwAIw
Ct9RbhdfBJkTsecSvFFA4eSSQZpezebaz7zlGoIOXfP4VU2dYdervdRBh8pSeh8l
-----END CERTIFICATE-----
";
    const LEAF: &str = "-----BEGIN CERTIFICATE-----
MIIB1jCCAV2gAwIBAgICIAIwCgYIKoZIzj0EAwMwHDEaMBgGA1UEAwwRYnJhaW5w
b29sIHRlc3QgQ0EwIBcNMjYwMTAxMDAwMDAwWhgPMjEyNjAxMDEwMDAwMDBaMCAx
HjAcBgNVBAMMFWJyYWlucG9vbCB0ZXN0IGNsaWVudDBaMBQGByqGSM49AgEGCSsk
AwMCCAEBBwNCAAQ17mEQPFVZcmlKj7rRD+KBzByseIO6rZdbf4RSMA0UQF4yd3qi
FV4mzu7Udz4kWpmBhO1Xd/pIo4p53O0vBV0oo4GHMIGEMAwGA1UdEwEB/wQCMAAw
DgYDVR0PAQH/BAQDAgPIMB0GA1UdJQQWMBQGCCsGAQUFBwMCBggrBgEFBQcDATAk
BgNVHREEHTAbhhl1cm46dGVzdDpicmFpbnBvb2w6Y2xpZW50MB8GA1UdIwQYMBaA
FAPcT12t43anbzcx3lsZLTxPCjjEMAoGCCqGSM49BAMDA2cAMGQCMEKsb6YNgjvV
esI3lVyOheFNY6rjIUAHhR1bwv2tdwWp2O+uEJGoO7c1X1O73dymYAIwU77kdy06
QeR88zGLnziNf8UpDSvQ5pHpl3/B0qONBcAd6LwZeEwWoL40PSsMpFrX
-----END CERTIFICATE-----
";
    let ca = uaring_crypto::Certificate::from_pem_or_der(CA.as_bytes()).unwrap();
    let leaf = uaring_crypto::Certificate::from_pem_or_der(LEAF.as_bytes()).unwrap();
    assert_eq!(ca.ec_curve(), Some(EccCurve::BrainpoolP384r1));
    assert_eq!(leaf.ec_curve(), Some(EccCurve::BrainpoolP256r1));
    let tmp = TempDir::new("ecc-bp-ca");
    let mut pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    pki.trust(&ca).unwrap();
    let now = now_unix_s();
    let got = pki
        .validate_client(leaf.der(), Some("urn:test:brainpool:client"), now)
        .unwrap();
    assert_eq!(got.ec_curve(), Some(EccCurve::BrainpoolP256r1));
    let mut forged = leaf.der().to_vec();
    let n = forged.len();
    forged[n - 5] ^= 1;
    assert_eq!(
        pki.validate_client(&forged, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
}

/// `uaring cert generate --type nistP256|nistP384` and `cert show --type`: one certificate
/// per type beside the RSA one, never overwritten without --force.
#[test]
fn cli_generates_and_shows_one_certificate_per_type() {
    use uaring_crypto::{cert_generate, cert_show_type, GenerateOptions};
    let tmp = TempDir::new("ecc-cli");
    let pki_dir = tmp.path().join("pki");
    for ecc in std::iter::once(None).chain(EccCurve::ALL.map(Some)) {
        let opts = GenerateOptions {
            uri: Some("urn:cli:ecc".into()),
            ecc,
            ..GenerateOptions::default()
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(cert_generate(&opts, &pki_dir, &mut out, &mut err), 0);
        let text = String::from_utf8(out).unwrap();
        let key = match ecc {
            None => "key:             RSA 2048 bits".to_string(),
            Some(c) => format!("key:             EC {}", c.type_name()),
        };
        assert!(text.contains(&key), "{text}");
        // Again without --force: refused, the file stays.
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(cert_generate(&opts, &pki_dir, &mut out, &mut err), 1);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        assert_eq!(cert_show_type(ecc, &pki_dir, &mut out, &mut err), 0);
        let shown = String::from_utf8(out).unwrap();
        assert!(shown.contains(&key), "{shown}");
        assert!(shown.contains("application uri: urn:cli:ecc"), "{shown}");
    }
    let pki = Pki::open(&pki_dir, PkiConfig::default()).unwrap();
    for curve in EccCurve::ALL {
        let (cert, key) = pki.load_own_ecc(curve).unwrap().unwrap();
        assert!(key.matches(&cert));
    }
    pki.load_own().unwrap();
}

/// open62541 1.5 (Mbed TLS) derives its keys from the shared secret without its leading zero
/// bytes (RFC 8422 §5.10 says they must stay): a token whose secret starts with 0 accepts a
/// client deriving either way, settles on what the client's first chunk shows, and answers
/// with the matching keys; a conformant client works with it as before.
#[test]
fn a_client_dropping_leading_zeros_of_the_secret_is_understood() {
    // The search for a secret with a leading zero makes a few hundred tokens: the Brainpool
    // curves (RustCrypto, ten times slower than AWS-LC here) once, in one mode.
    let cases = [
        (EccCurve::NistP256, MessageSecurityMode::Sign),
        (EccCurve::NistP256, MessageSecurityMode::SignAndEncrypt),
        (EccCurve::NistP384, MessageSecurityMode::Sign),
        (EccCurve::NistP384, MessageSecurityMode::SignAndEncrypt),
        (
            EccCurve::BrainpoolP256r1,
            MessageSecurityMode::SignAndEncrypt,
        ),
    ];
    for (curve, mode) in cases {
        {
            let encrypt = mode == MessageSecurityMode::SignAndEncrypt;
            let dir = TempDir::new("ecc-zero");
            let policy = server(curve, &dir, &[]);
            let client = EphemeralKey::generate(curve).unwrap();
            for truncating in [true, false] {
                // A token whose shared secret starts with a zero byte (one in 256).
                let (server_nonce, crypto, shared) = (0..20_000)
                    .find_map(|_| {
                        let (n, c) = policy
                            .new_token(Role::Server, mode, Vec::new(), client.nonce())
                            .unwrap();
                        let shared = client.shared_secret(&n).unwrap();
                        (shared[0] == 0).then_some((n, c, shared))
                    })
                    .expect("a secret with a leading zero");
                let first = shared.iter().position(|b| *b != 0).unwrap();
                let secret = if truncating {
                    &shared[first..]
                } else {
                    &shared[..]
                };
                let (ck, sk) =
                    derive_ecc_keys(curve, encrypt, secret, client.nonce(), &server_nonce).unwrap();
                // The client's first chunk: header, body, signature (encrypted from 8 on).
                let sig_len = ck.signature_len();
                let mut chunk = vec![0x42u8; 8 + 40];
                while encrypt && !(chunk.len() - 8 + sig_len).is_multiple_of(16) {
                    chunk.push(0x22);
                }
                let at = chunk.len();
                chunk.resize(at + sig_len, 0);
                let (data, sig) = chunk.split_at_mut(at);
                ck.sign(data, sig).unwrap();
                let plain = chunk.clone();
                if encrypt {
                    ck.encrypt_in_place(&mut chunk[8..]).unwrap();
                    crypto.decrypt(&mut chunk, 8).unwrap();
                    assert_eq!(chunk, plain);
                }
                let (data, sig) = chunk.split_at(at);
                crypto.verify(data, sig).unwrap();
                // The server answers with the keys the client derived.
                let mut out = vec![0u8; crypto.send_layout().signature_len];
                crypto.sign(b"response", &mut out).unwrap();
                assert!(sk.verify(b"response", &out), "truncating {truncating}");
                if encrypt {
                    let mut v = vec![9u8; 32];
                    crypto.encrypt(&mut v, 0).unwrap();
                    sk.decrypt_in_place(&mut v).unwrap();
                    assert_eq!(v, vec![9u8; 32]);
                }
                // Settled: the other derivation's chunk is refused from now on.
                let other = if truncating {
                    &shared[..]
                } else {
                    &shared[first..]
                };
                let (ok2, _) =
                    derive_ecc_keys(curve, encrypt, other, client.nonce(), &server_nonce).unwrap();
                let mut sig2 = vec![0u8; sig_len];
                ok2.sign(&plain[..at], &mut sig2).unwrap();
                assert_eq!(
                    crypto.verify(&plain[..at], &sig2),
                    Err(StatusCode::BadSecurityChecksFailed)
                );
            }
        }
    }
}
