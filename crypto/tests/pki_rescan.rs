//! `pki::request_rescan` (SIGHUP): every store reloads at its next refresh, whatever the
//! rescan interval. A test binary of its own: the request is process-wide.

mod common;
use common::{now_unix_s, TempDir};
use uaring_crypto::{generate_self_signed, pki, status, CertificateRequest, Pki, PkiConfig};

#[test]
fn a_rescan_request_reloads_before_the_interval() {
    let tmp = TempDir::new("rescan");
    let config = PkiConfig {
        rescan_interval_ms: 3_600_000,
        ..PkiConfig::default()
    };
    let mut pki = Pki::open(tmp.path(), config).unwrap();
    let (cert, _) = generate_self_signed(&CertificateRequest::new(
        "urn:client:r",
        "client",
        now_unix_s(),
    ))
    .unwrap();
    let now = now_unix_s();
    assert!(!pki.refresh_if_stale(1_000));
    std::fs::write(tmp.path().join("trusted/certs/client.der"), cert.der()).unwrap();
    // An hour's interval: a refresh a second later does not look.
    assert!(!pki.refresh_if_stale(2_000));
    assert_eq!(
        pki.validate_client(cert.der(), None, now).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    pki::request_rescan();
    assert!(pki.refresh_if_stale(3_000));
    assert!(pki.validate_client(cert.der(), None, now).is_ok());
    // Once per request.
    assert!(!pki.refresh_if_stale(4_000));
}
