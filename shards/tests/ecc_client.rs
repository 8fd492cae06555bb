//! uaring's own client (core's sans-IO client role, the one the load client uses) opens
//! ECC_nistP256 and ECC_nistP384 SignAndEncrypt channels to the real binary: it sends an
//! ephemeral key as its nonce (`SecurityPolicy::begin_token`), derives the keys from the
//! server's when the OpenSecureChannel response comes (`finish_token`), and GetEndpoints works
//! over the encrypted channel both ways. The server's ECC certificates come from
//! `uaring cert generate --type`, the client's certificate is in its trust list.

mod common;

use std::time::Duration;

use common::*;
use uaring_core::client::ClientConfig;
use uaring_core::generated::types::MessageSecurityMode;
use uaring_crypto::{
    generate_self_signed_ecc, CertificateRequest, EccCurve, EccIdentity, EccPolicy,
};
use uaring_harness::blocking::Client;

#[test]
fn our_client_opens_ecc_channels() {
    let dir = TempDir::new("uaring-ecc-client");
    let pki = dir.join("pki");
    for ty in ["nistP256", "nistP384"] {
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
        let ty = match curve {
            EccCurve::NistP256 => "nistP256",
            EccCurve::NistP384 => "nistP384",
        };
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
