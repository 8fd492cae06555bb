//! uaring's own client (core's sans-IO client role, the one the load client uses) opens
//! SignAndEncrypt channels of the four ECC policies (NIST P-256/P-384, brainpoolP256r1/P384r1)
//! to the real binary: it sends an
//! ephemeral key as its nonce (`SecurityPolicy::begin_token`), derives the keys from the
//! server's when the OpenSecureChannel response comes (`finish_token`), and GetEndpoints works
//! over the encrypted channel both ways. The server's ECC certificates come from
//! `uaring cert generate --type`, the client's certificate is in its trust list.
//!
//! And what the binary refuses, with its status: an RSA certificate or a P-384 key on an
//! ECC_nistP256 channel, a broken ECDSA signature of the OpenSecureChannel, a wrong ECDSA
//! signature of ActivateSession.

mod common;
#[path = "../../crypto/tests/support/pretend.rs"]
mod pretend;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use pretend::Pretend;
use uaring_core::client::ClientConfig;
use uaring_core::generated::messages::Request;
use uaring_core::generated::types::{
    ActivateSessionRequest, AnonymousIdentityToken, MessageSecurityMode, SignatureData,
};
use uaring_core::secure_channel::SecurityPolicy;
use uaring_core::{ByteString, ExtensionObject, StatusCode};
use uaring_crypto::{
    generate_self_signed, generate_self_signed_ecc, CertificateRequest, EccCurve, EccIdentity,
    EccPolicy, OwnIdentity, PolicyId, RsaPolicy,
};
use uaring_harness::blocking::{Client, ClientError};

#[test]
fn our_client_opens_ecc_channels() {
    let dir = TempDir::new("uaring-ecc-client");
    let pki = dir.join("pki");
    for ty in EccCurve::ALL.map(EccCurve::type_name) {
        let out = std::process::Command::new(bin())
            .args([
                "cert",
                "--pki",
                pki.to_str().unwrap(),
                "generate",
                "--type",
                ty,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let mut clients = Vec::new();
    for curve in EccCurve::ALL {
        let (cert, key) = generate_self_signed_ecc(
            &CertificateRequest::new("urn:uaring:ecc-client-test", "ecc client", unix_s - 3600),
            curve,
        )
        .expect("client certificate");
        let trusted = pki.join("trusted/certs");
        std::fs::create_dir_all(&trusted).unwrap();
        std::fs::write(
            trusted.join(format!("client-{}.der", curve.policy_name())),
            cert.der(),
        )
        .unwrap();
        clients.push((curve, EccIdentity::new(cert, key).expect("identity")));
    }
    let server = Server::start(&["--pki", pki.to_str().unwrap()]);
    for (curve, id) in clients {
        let ty = curve.type_name();
        let server_cert =
            std::fs::read(pki.join(format!("own/certs/uaring_{ty}.der"))).expect("server cert");
        let mut cfg = ClientConfig::new(&server.url());
        cfg.policy = EccPolicy::client(id);
        cfg.mode = MessageSecurityMode::SignAndEncrypt;
        cfg.server_certificate = Some(server_cert);
        let mut c = Client::connect_with(cfg, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{}: {e}", curve.policy_name()));
        let eps = c
            .get_endpoints()
            .expect("GetEndpoints over the ECC channel");
        assert!(
            eps.iter()
                .any(|e| e.security_policy_uri.as_str() == curve.policy_uri()),
            "{} offered",
            curve.policy_name()
        );
    }
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}

/// The binary's refusals on ECC_nistP256, each with its status: an OpenSecureChannel signed
/// by an RSA certificate's key or by a P-384 key (BadCertificatePolicyCheckFailed), one
/// whose ECDSA signature is broken (BadSecurityChecksFailed), an ActivateSession whose ECDSA
/// client signature covers the wrong nonce (BadApplicationSignatureInvalid). Every client
/// certificate is trusted: the refusals are for what the policy checks. A good client still
/// gets in afterwards.
#[test]
fn the_binary_refuses_wrong_keys_and_signatures_on_ecc() {
    let dir = TempDir::new("uaring-ecc-refusals");
    let pki = dir.join("pki");
    let out = std::process::Command::new(bin())
        .args(["cert", "--pki", pki.to_str().unwrap()])
        .args(["generate", "--type", "nistP256"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // The ApplicationUri the blocking client's CreateSession names.
    let req = CertificateRequest::new("urn:uaring:client", "ecc client", unix_s - 3600);
    let ecc = |curve| {
        let (cert, key) = generate_self_signed_ecc(&req, curve).unwrap();
        EccIdentity::new(cert, key).unwrap()
    };
    let (p256, p384) = (ecc(EccCurve::NistP256), ecc(EccCurve::NistP384));
    let (cert, key) = generate_self_signed(&req).unwrap();
    let rsa = OwnIdentity::new(cert, key).unwrap();
    let trusted = pki.join("trusted/certs");
    std::fs::create_dir_all(&trusted).unwrap();
    for (name, der) in [
        ("p256", p256.cert.der()),
        ("p384", p384.cert.der()),
        ("rsa", rsa.cert.der()),
    ] {
        std::fs::write(trusted.join(format!("{name}.der")), der).unwrap();
    }
    let server = Server::start(&["--pki", pki.to_str().unwrap()]);
    let server_cert = std::fs::read(pki.join("own/certs/uaring_nistP256.der")).unwrap();
    let connect = |policy: Arc<dyn SecurityPolicy>| {
        let mut cfg = ClientConfig::new(&server.url());
        cfg.policy = policy;
        cfg.mode = MessageSecurityMode::SignAndEncrypt;
        cfg.server_certificate = Some(server_cert.clone());
        Client::connect_with(cfg, Duration::from_secs(10))
    };
    let refused = |policy: Arc<dyn SecurityPolicy>| match connect(policy) {
        Err(ClientError::Status(s)) => s,
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("the channel opened"),
    };
    let rsa_policy = RsaPolicy::client(PolicyId::Basic256Sha256, rsa).unwrap();
    let pretend = |inner: Arc<dyn SecurityPolicy>, corrupt| -> Arc<dyn SecurityPolicy> {
        Arc::new(Pretend { inner, corrupt })
    };
    assert_eq!(
        refused(pretend(rsa_policy, false)),
        StatusCode::BadCertificatePolicyCheckFailed,
        "an RSA certificate on ECC_nistP256"
    );
    assert_eq!(
        refused(pretend(EccPolicy::client(p384), false)),
        StatusCode::BadCertificatePolicyCheckFailed,
        "a P-384 key on ECC_nistP256"
    );
    assert_eq!(
        refused(pretend(EccPolicy::client(p256.clone()), true)),
        StatusCode::BadSecurityChecksFailed,
        "a broken ECDSA signature of the OpenSecureChannel"
    );

    let mut c = connect(EccPolicy::client(p256.clone())).expect("a good ECC channel");
    let (server_cert, nonce) = {
        let r = c.create_session().expect("CreateSession");
        (
            r.server_certificate.as_bytes().to_vec(),
            r.server_nonce.as_bytes().to_vec(),
        )
    };
    let activate = |c: &mut Client, signed_nonce: &[u8]| {
        let data = [&server_cert[..], signed_nonce].concat();
        let req = ActivateSessionRequest {
            client_signature: SignatureData {
                algorithm: EccCurve::NistP256.signature_algorithm_uri().into(),
                signature: ByteString::from(p256.key.sign(&data).unwrap()),
            },
            user_identity_token: ExtensionObject::from_struct(&AnonymousIdentityToken {
                policy_id: "anonymous".into(),
            }),
            ..Default::default()
        };
        c.call(Request::ActivateSession(Box::new(req)))
    };
    match activate(&mut c, &[0u8; 32]) {
        Err(ClientError::Status(s)) => assert_eq!(s, StatusCode::BadApplicationSignatureInvalid),
        other => panic!("{other:?}"),
    }
    activate(&mut c, &nonce).expect("ActivateSession signed over the server nonce");
    let (code, _, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
}
