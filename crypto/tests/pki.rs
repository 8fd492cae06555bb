//! PKI store and certificate validation.

mod common;
use common::{hex, now_unix_s, TempDir, S2OPC_CERT_HEX};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateRevocationListParams, DistinguishedName,
    DnType, ExtendedKeyUsagePurpose, IsCa, KeyIdMethod, KeyUsagePurpose, RevokedCertParams,
    SanType, SerialNumber,
};
use time::OffsetDateTime;
use uaring_crypto::{
    generate_self_signed, status, CertRole, Certificate, CertificateRequest, Pki, PkiConfig,
    PrivateKey,
};

fn rcgen_key(key: &PrivateKey) -> rcgen::KeyPair {
    let der = rustls_pki_types::PrivatePkcs8KeyDer::from(key.to_pkcs8_der());
    rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256).unwrap()
}

fn at(unix_s: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(unix_s).unwrap()
}

struct Ca {
    cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

fn make_ca(name: &str, issuer: Option<&Ca>, not_after: i64) -> Ca {
    let key = rcgen_key(&PrivateKey::generate(2048).unwrap());
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    p.not_before = at(now_unix_s() - 86400);
    p.not_after = at(not_after);
    p.key_identifier_method = KeyIdMethod::Sha256;
    p.use_authority_key_identifier_extension = true;
    let cert = match issuer {
        None => p.self_signed(&key).unwrap(),
        Some(i) => p.signed_by(&key, &i.cert, &i.key).unwrap(),
    };
    Ca { cert, key }
}

fn make_leaf(ca: &Ca, uri: &str, serial: &[u8], eku: Vec<ExtendedKeyUsagePurpose>) -> Vec<u8> {
    let key = rcgen_key(&PrivateKey::generate(2048).unwrap());
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "leaf");
    p.distinguished_name = dn;
    p.subject_alt_names = vec![SanType::URI(uri.try_into().unwrap())];
    p.serial_number = Some(SerialNumber::from_slice(serial));
    p.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::ContentCommitment,
        KeyUsagePurpose::KeyEncipherment,
        KeyUsagePurpose::DataEncipherment,
    ];
    p.extended_key_usages = eku;
    p.is_ca = IsCa::ExplicitNoCa;
    p.not_before = at(now_unix_s() - 86400);
    p.not_after = at(now_unix_s() + 365 * 86400);
    p.use_authority_key_identifier_extension = true;
    p.key_identifier_method = KeyIdMethod::Sha256;
    p.signed_by(&key, &ca.cert, &ca.key).unwrap().der().to_vec()
}

fn make_crl(ca: &Ca, revoked: &[&[u8]]) -> Vec<u8> {
    let params = CertificateRevocationListParams {
        this_update: at(now_unix_s() - 3600),
        next_update: at(now_unix_s() + 86400),
        crl_number: SerialNumber::from_slice(&[1]),
        issuing_distribution_point: None,
        revoked_certs: revoked
            .iter()
            .map(|s| RevokedCertParams {
                serial_number: SerialNumber::from_slice(s),
                revocation_time: at(now_unix_s() - 60),
                reason_code: None,
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: KeyIdMethod::Sha256,
    };
    params.signed_by(&ca.cert, &ca.key).unwrap().der().to_vec()
}

fn client_eku() -> Vec<ExtendedKeyUsagePurpose> {
    vec![
        ExtendedKeyUsagePurpose::ClientAuth,
        ExtendedKeyUsagePurpose::ServerAuth,
    ]
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), bytes).unwrap();
}

fn self_signed(uri: &str) -> (Certificate, PrivateKey) {
    generate_self_signed(&CertificateRequest::new(uri, "client", now_unix_s())).unwrap()
}

#[test]
fn layout_is_created() {
    let tmp = TempDir::new("layout");
    let root = tmp.path().join("pki");
    let pki = Pki::open(&root, PkiConfig::default()).unwrap();
    for d in [
        "own/certs",
        "own/private",
        "trusted/certs",
        "trusted/crl",
        "issuers/certs",
        "issuers/crl",
        "rejected/certs",
    ] {
        assert!(root.join(d).is_dir(), "{d}");
    }
    assert_eq!(pki.counts(), (0, 0, 0));
}

#[test]
fn untrusted_self_signed_is_rejected_then_trusted_after_a_rescan() {
    let tmp = TempDir::new("trust");
    let mut pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    let (cert, _) = self_signed("urn:client:a");
    let now = now_unix_s();
    assert!(!pki.refresh_if_stale(1_000));
    assert_eq!(
        pki.validate_client(cert.der(), Some("urn:client:a"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    // The rejected certificate was copied for the operator.
    let rejected: Vec<_> = std::fs::read_dir(tmp.path().join("rejected/certs"))
        .unwrap()
        .collect();
    assert_eq!(rejected.len(), 1);
    let copied = std::fs::read(rejected[0].as_ref().unwrap().path()).unwrap();
    assert_eq!(copied, cert.der());

    // The operator drops it into trusted/certs; within the rescan interval nothing changes...
    write(&tmp.path().join("trusted/certs"), "client.der", cert.der());
    assert!(!pki.refresh_if_stale(1_500));
    assert!(pki
        .validate_client(cert.der(), Some("urn:client:a"), now)
        .is_err());
    // ...and at the next rescan (at most 1 s later) it is accepted without a restart.
    assert!(pki.refresh_if_stale(2_000));
    assert_eq!(pki.counts().0, 1);
    let leaf = pki
        .validate_client(cert.der(), Some("urn:client:a"), now)
        .unwrap();
    assert_eq!(leaf.thumbprint(), cert.thumbprint());
    // Nothing changed: a rescan does not reload.
    assert!(!pki.refresh_if_stale(3_000));
    // ApplicationUri must match the SAN URI.
    assert_eq!(
        pki.validate_client(cert.der(), Some("urn:client:b"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_URI_INVALID
    );
    // Removing it revokes trust at the next rescan.
    std::fs::remove_file(tmp.path().join("trusted/certs/client.der")).unwrap();
    assert!(pki.refresh_if_stale(4_000));
    assert_eq!(
        pki.validate_client(cert.der(), None, now).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
}

#[test]
fn trusted_but_expired_s2opc_certificate() {
    let tmp = TempDir::new("expired");
    let der = hex(S2OPC_CERT_HEX);
    write(&tmp.path().join("trusted/certs"), "s2opc.der", &der);
    let pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    assert_eq!(
        pki.validate(&der, CertRole::ClientApp, None, now_unix_s())
            .unwrap_err(),
        status::BAD_CERTIFICATE_TIME_INVALID
    );
    // 2016-12-01: inside its validity period.
    pki.validate(&der, CertRole::ClientApp, None, 1_480_550_400)
        .unwrap();
    // It has no SAN URI, so any expected ApplicationUri fails.
    assert_eq!(
        pki.validate(&der, CertRole::ClientApp, Some("urn:x"), 1_480_550_400)
            .unwrap_err(),
        status::BAD_CERTIFICATE_URI_INVALID
    );
}

#[test]
fn sha1_signed_certificates_fail_the_policy_check() {
    // Rewrite both signature AlgorithmIdentifiers of a SHA-256 certificate to sha1WithRSAEncryption.
    let mut der = hex(S2OPC_CERT_HEX);
    let sha256 = hex("2a864886f70d01010b");
    let mut count = 0;
    let mut i = 0;
    while i + sha256.len() <= der.len() {
        if der[i..i + sha256.len()] == sha256[..] {
            der[i + sha256.len() - 1] = 0x05;
            count += 1;
        }
        i += 1;
    }
    assert_eq!(count, 2);
    let tmp = TempDir::new("sha1");
    write(&tmp.path().join("trusted/certs"), "sha1.der", &der);
    let pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    assert_eq!(
        pki.validate(&der, CertRole::ClientApp, None, 1_480_550_400)
            .unwrap_err(),
        status::BAD_CERTIFICATE_POLICY_CHECK_FAILED
    );
}

#[test]
fn ca_signed_chain_with_crls() {
    let tmp = TempDir::new("ca");
    let ca = make_ca("Test CA", None, now_unix_s() + 10 * 365 * 86400);
    let good = make_leaf(&ca, "urn:client:good", &[0x10, 0x01], client_eku());
    let revoked = make_leaf(&ca, "urn:client:revoked", &[0x10, 0x02], client_eku());
    let server_only = make_leaf(
        &ca,
        "urn:client:srv",
        &[0x10, 0x03],
        vec![ExtendedKeyUsagePurpose::ServerAuth],
    );
    write(&tmp.path().join("trusted/certs"), "ca.der", ca.cert.der());
    let now = now_unix_s();

    let config = PkiConfig {
        require_crls: true,
        ..PkiConfig::default()
    };
    let mut pki = Pki::open(tmp.path(), config).unwrap();
    assert_eq!(
        pki.validate_client(&good, Some("urn:client:good"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_REVOCATION_UNKNOWN
    );
    write(
        &tmp.path().join("trusted/crl"),
        "ca.crl",
        &make_crl(&ca, &[&[0x10, 0x02]]),
    );
    assert!(pki.refresh_if_stale(10_000));
    assert_eq!(pki.counts(), (1, 0, 1));
    pki.validate_client(&good, Some("urn:client:good"), now)
        .unwrap();
    assert_eq!(
        pki.validate_client(&revoked, Some("urn:client:revoked"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_REVOKED
    );
    assert_eq!(
        pki.validate_client(&server_only, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_USE_NOT_ALLOWED
    );
    pki.validate(&server_only, CertRole::ServerApp, None, now)
        .unwrap();

    // A CRL signed by someone else does not count.
    let other = make_ca("Test CA", None, now + 86400);
    std::fs::remove_file(tmp.path().join("trusted/crl/ca.crl")).unwrap();
    write(
        &tmp.path().join("trusted/crl"),
        "forged.crl",
        &make_crl(&other, &[]),
    );
    assert!(pki.refresh_if_stale(20_000));
    assert_eq!(
        pki.validate_client(&revoked, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_REVOCATION_UNKNOWN
    );
}

#[test]
fn issuers_are_not_trusted_by_themselves() {
    let tmp = TempDir::new("issuers");
    let ca = make_ca("Issuer CA", None, now_unix_s() + 86400 * 365);
    let leaf = make_leaf(&ca, "urn:client:x", &[0x20], client_eku());
    write(&tmp.path().join("issuers/certs"), "ca.der", ca.cert.der());
    let mut pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    assert_eq!(
        pki.validate_client(&leaf, None, now_unix_s()).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    // Trusting the leaf itself is enough when its issuer is known.
    let cert = Certificate::from_der(&leaf).unwrap();
    pki.trust(&cert).unwrap();
    pki.validate_client(&leaf, None, now_unix_s()).unwrap();
}

#[test]
fn intermediate_in_the_chain_bytes() {
    let tmp = TempDir::new("chain");
    let now = now_unix_s();
    let root = make_ca("Root", None, now + 86400 * 365);
    let inter = make_ca("Intermediate", Some(&root), now + 86400 * 365);
    let leaf = make_leaf(&inter, "urn:client:c", &[0x30], client_eku());
    write(
        &tmp.path().join("trusted/certs"),
        "root.der",
        root.cert.der(),
    );
    let pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    assert_eq!(
        pki.validate_client(&leaf, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_CHAIN_INCOMPLETE
    );
    let mut chain = leaf.clone();
    chain.extend_from_slice(inter.cert.der());
    let got = pki
        .validate_client(&chain, Some("urn:client:c"), now)
        .unwrap();
    assert_eq!(got.der(), &leaf[..]);
    // An expired intermediate.
    let old = make_ca("Old", Some(&root), now - 3600);
    let leaf2 = make_leaf(&old, "urn:client:d", &[0x31], client_eku());
    let mut chain2 = leaf2.clone();
    chain2.extend_from_slice(old.cert.der());
    assert_eq!(
        pki.validate_client(&chain2, None, now).unwrap_err(),
        status::BAD_CERTIFICATE_ISSUER_TIME_INVALID
    );
}

#[test]
fn accept_all_mode() {
    let tmp = TempDir::new("acceptall");
    let config = PkiConfig {
        accept_all_client_certs: true,
        ..PkiConfig::default()
    };
    let pki = Pki::open(tmp.path(), config).unwrap();
    let (cert, _) = self_signed("urn:whatever");
    pki.validate_client(cert.der(), Some("urn:other"), now_unix_s())
        .unwrap();
    assert_eq!(
        pki.validate_client(b"garbage", None, 0).unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
    assert!(uaring_crypto::ACCEPT_ALL_WARNING.contains("WARNING"));
    // Nothing is copied to rejected/ in this mode.
    assert_eq!(
        std::fs::read_dir(tmp.path().join("rejected/certs"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
fn own_certificate_is_created_once() {
    let tmp = TempDir::new("own");
    let pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    let mut req = CertificateRequest::new("urn:o6:benchmark:server", "uaring", now_unix_s());
    req.dns_names = vec!["localhost".into()];
    let (cert, key, created) = pki.load_or_create_own(&req).unwrap();
    assert!(created);
    assert!(key.matches(&cert));
    assert_eq!(cert.application_uri(), Some("urn:o6:benchmark:server"));
    let (again, key2, created2) = pki.load_or_create_own(&req).unwrap();
    assert!(!created2);
    assert_eq!(again.der(), cert.der());
    assert!(key2.matches(&cert));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(pki.own_key_path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    // A key that does not belong to the certificate is an error, not a silent regeneration.
    let (_, other_key) = self_signed("urn:other");
    std::fs::write(pki.own_key_path(), other_key.to_pem().as_bytes()).unwrap();
    assert!(pki.load_own().unwrap_err().contains("does not belong"));
}

#[test]
fn rejected_copies_are_bounded() {
    let tmp = TempDir::new("bounded");
    let config = PkiConfig {
        rejected_files_max: 2,
        ..PkiConfig::default()
    };
    let pki = Pki::open(tmp.path(), config).unwrap();
    for i in 0..3 {
        let (cert, _) = self_signed(&format!("urn:c:{i}"));
        assert!(pki.validate_client(cert.der(), None, now_unix_s()).is_err());
    }
    assert_eq!(
        std::fs::read_dir(tmp.path().join("rejected/certs"))
            .unwrap()
            .count(),
        2
    );
}

/// Validated client chains are remembered (validated_chains_max) but never stand in for a check
/// that depends on the moment or the caller: the validity period and the ApplicationUri are
/// checked at every use, a reload forgets them all, and at most `validated_chains_max` stay.
#[test]
fn validated_chains_are_remembered_within_their_window_and_the_bound() {
    let tmp = TempDir::new("remembered");
    let config = PkiConfig {
        validated_chains_max: 2,
        ..PkiConfig::default()
    };
    let certs: Vec<Certificate> = (0..3)
        .map(|i| self_signed(&format!("urn:client:{i}")).0)
        .collect();
    for (i, c) in certs.iter().enumerate() {
        write(
            &tmp.path().join("trusted/certs"),
            &format!("c{i}.der"),
            c.der(),
        );
    }
    let mut pki = Pki::open(tmp.path(), config).unwrap();
    let now = now_unix_s();
    let (a, b, c) = (&certs[0], &certs[1], &certs[2]);
    assert!(
        pki.validated_leaf(a.der()).is_none(),
        "nothing before a validation"
    );
    pki.validate_client(a.der(), None, now).unwrap();
    assert_eq!(
        pki.validated_leaf(a.der()).unwrap().thumbprint(),
        a.thumbprint()
    );
    // Remembered, and still checked: the URI of CreateSession, a time past notAfter.
    pki.validate_client(a.der(), Some("urn:client:0"), now)
        .unwrap();
    assert_eq!(
        pki.validate_client(a.der(), Some("urn:client:9"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_URI_INVALID
    );
    let late = a.not_after_unix_s() + 1;
    assert_eq!(
        pki.validate_client(a.der(), None, late).unwrap_err(),
        status::BAD_CERTIFICATE_TIME_INVALID
    );
    assert_eq!(
        pki.validate_client(a.der(), None, a.not_before_unix_s() - 1)
            .unwrap_err(),
        status::BAD_CERTIFICATE_TIME_INVALID
    );
    // A failure is not remembered in place of the success, and the success still holds.
    pki.validate_client(a.der(), None, now).unwrap();
    // Two at most: b, then a used again, then c — b (least recently used) is forgotten.
    pki.validate_client(b.der(), None, now).unwrap();
    pki.validate_client(a.der(), None, now).unwrap();
    pki.validate_client(c.der(), None, now).unwrap();
    assert!(pki.validated_leaf(a.der()).is_some() && pki.validated_leaf(c.der()).is_some());
    assert!(pki.validated_leaf(b.der()).is_none());
    // A change in the trust directories forgets them all: removing a's file untrusts it at once.
    std::fs::remove_file(tmp.path().join("trusted/certs/c0.der")).unwrap();
    assert!(pki.refresh_if_stale(10_000));
    assert!(pki.validated_leaf(c.der()).is_none());
    assert_eq!(
        pki.validate_client(a.der(), None, now).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    assert!(
        pki.validated_leaf(a.der()).is_none(),
        "failures are not remembered"
    );

    // validated_chains_max = 0 remembers nothing, and every validation is a full one.
    let tmp0 = TempDir::new("remembered0");
    write(&tmp0.path().join("trusted/certs"), "c.der", c.der());
    let mut pki0 = Pki::open(
        tmp0.path(),
        PkiConfig {
            validated_chains_max: 0,
            ..PkiConfig::default()
        },
    )
    .unwrap();
    for _ in 0..2 {
        assert_eq!(
            pki0.validate_client(c.der(), None, now)
                .unwrap()
                .thumbprint(),
            c.thumbprint()
        );
        assert_eq!(
            pki0.validate_client(c.der(), Some("urn:client:2"), now)
                .unwrap()
                .thumbprint(),
            c.thumbprint()
        );
        assert!(pki0.validated_leaf(c.der()).is_none());
    }
    assert_eq!(
        pki0.validate_client(c.der(), Some("urn:client:9"), now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_URI_INVALID
    );
    assert_eq!(
        pki0.validate_client(c.der(), None, c.not_after_unix_s() + 1)
            .unwrap_err(),
        status::BAD_CERTIFICATE_TIME_INVALID
    );
    assert_eq!(
        pki0.validate_client(a.der(), None, now).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    assert_eq!(
        pki0.validate_client(b"not a certificate", None, now)
            .unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
    // The one trusted chain still validates after the failures, and its file's removal untrusts it.
    pki0.validate_client(c.der(), None, now).unwrap();
    std::fs::remove_file(tmp0.path().join("trusted/certs/c.der")).unwrap();
    assert!(pki0.refresh_if_stale(10_000));
    assert_eq!(
        pki0.validate_client(c.der(), None, now).unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
}

/// With accept_all_client_certs (the benchmark contract) the parsed leaf is remembered too.
#[test]
fn accept_all_remembers_the_parsed_leaf() {
    let tmp = TempDir::new("remembered-all");
    let pki = Pki::open(
        tmp.path(),
        PkiConfig {
            accept_all_client_certs: true,
            ..PkiConfig::default()
        },
    )
    .unwrap();
    let (cert, _) = self_signed("urn:client:any");
    pki.validate_client(cert.der(), Some("urn:other"), now_unix_s())
        .unwrap();
    assert_eq!(
        pki.validated_leaf(cert.der()).unwrap().thumbprint(),
        cert.thumbprint()
    );
    assert_eq!(
        pki.validate_client(b"not a certificate", None, now_unix_s())
            .unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
}
