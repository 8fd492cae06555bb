//! User tokens, configured users, the failed-login limiter and the CLI helpers.

mod common;
use std::net::IpAddr;

use common::{now_unix_s, TempDir};
use uaring_crypto::cli::{
    cert_generate, cert_show, cert_trust, hash_password_command_io, GenerateOptions,
};
use uaring_crypto::{
    asym_sign, decrypt_user_password, encrypt_user_password, generate_self_signed, hash_password,
    signature_data, status, verify_password, verify_x509_user_token, CertificateRequest,
    LoginLimiter, LoginLimiterConfig, Pki, PkiConfig, PolicyId, UserStore,
};

#[test]
fn user_password_roundtrip_and_nonce_check() {
    let (server_cert, server_key) =
        generate_self_signed(&CertificateRequest::new("urn:srv", "srv", now_unix_s())).unwrap();
    let nonce = [0x42u8; 32];
    for policy in [
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
    ] {
        let alg = policy.asym_encryption_algorithm_uri().unwrap();
        for password in [&b""[..], b"pw", &[b'x'; 300][..]] {
            let ct = encrypt_user_password(policy, &server_cert, password, &nonce).unwrap();
            let got = decrypt_user_password(policy, &server_key, alg, &ct, &nonce).unwrap();
            assert_eq!(&got[..], password);
            // A stale nonce is refused.
            assert_eq!(
                decrypt_user_password(policy, &server_key, alg, &ct, &[0x43u8; 32]).unwrap_err(),
                status::BAD_IDENTITY_TOKEN_INVALID
            );
        }
        let ct = encrypt_user_password(policy, &server_cert, b"pw", &nonce).unwrap();
        // Wrong algorithm URI, truncated or garbage ciphertext.
        assert!(decrypt_user_password(policy, &server_key, "urn:nope", &ct, &nonce).is_err());
        assert!(decrypt_user_password(policy, &server_key, alg, &ct[..100], &nonce).is_err());
        assert!(decrypt_user_password(policy, &server_key, alg, &[0u8; 256], &nonce).is_err());
    }
}

/// A client may pad the legacy secret to whole RSA blocks with zeros (open62541 does):
/// accepted; padding that is not zeros is refused.
#[test]
fn zero_padding_after_the_legacy_secret() {
    let (server_cert, server_key) =
        generate_self_signed(&CertificateRequest::new("urn:srv", "srv", now_unix_s())).unwrap();
    let policy = PolicyId::Basic256Sha256;
    let alg = policy.asym_encryption_algorithm_uri().unwrap();
    let nonce = [0x42u8; 32];
    let secret = |pad: u8| {
        let mut plain = ((2 + nonce.len()) as u32).to_le_bytes().to_vec();
        plain.extend_from_slice(b"pw");
        plain.extend_from_slice(&nonce);
        // To the plaintext block of a 2048-bit key with OAEP-SHA1: 256 − 42.
        plain.resize(214, 0);
        *plain.last_mut().unwrap() = pad;
        let mut ct = Vec::new();
        uaring_crypto::asym_encrypt(policy, &server_cert, &plain, &mut ct).unwrap();
        ct
    };
    let got = decrypt_user_password(policy, &server_key, alg, &secret(0), &nonce).unwrap();
    assert_eq!(&got[..], b"pw");
    assert_eq!(
        decrypt_user_password(policy, &server_key, alg, &secret(1), &nonce).unwrap_err(),
        status::BAD_IDENTITY_TOKEN_INVALID
    );
}

#[test]
fn x509_user_token() {
    let tmp = TempDir::new("x509user");
    let mut pki = Pki::open(tmp.path(), PkiConfig::default()).unwrap();
    let (server_cert, _) =
        generate_self_signed(&CertificateRequest::new("urn:srv", "srv", now_unix_s())).unwrap();
    let (user_cert, user_key) =
        generate_self_signed(&CertificateRequest::new("urn:user", "alice", now_unix_s())).unwrap();
    let nonce = [7u8; 32];
    let policy = PolicyId::Aes256Sha256RsaPss;
    let alg = policy.asym_signature_algorithm_uri().unwrap();
    let sig = asym_sign(
        policy,
        &user_key,
        &signature_data(server_cert.der(), &nonce),
    )
    .unwrap();
    let now = now_unix_s();
    assert_eq!(
        verify_x509_user_token(
            &pki,
            policy,
            user_cert.der(),
            alg,
            &sig,
            server_cert.der(),
            &nonce,
            now
        )
        .unwrap_err(),
        status::BAD_CERTIFICATE_UNTRUSTED
    );
    pki.trust(&user_cert).unwrap();
    let got = verify_x509_user_token(
        &pki,
        policy,
        user_cert.der(),
        alg,
        &sig,
        server_cert.der(),
        &nonce,
        now,
    )
    .unwrap();
    assert_eq!(got.der(), user_cert.der());
    assert_eq!(
        verify_x509_user_token(
            &pki,
            policy,
            user_cert.der(),
            alg,
            &sig,
            server_cert.der(),
            &[8u8; 32],
            now
        )
        .unwrap_err(),
        status::BAD_USER_SIGNATURE_INVALID
    );
    let other = PolicyId::Basic256Sha256
        .asym_signature_algorithm_uri()
        .unwrap();
    assert_eq!(
        verify_x509_user_token(
            &pki,
            policy,
            user_cert.der(),
            other,
            &sig,
            server_cert.der(),
            &nonce,
            now
        )
        .unwrap_err(),
        status::BAD_USER_SIGNATURE_INVALID
    );
}

#[test]
fn argon2id_hashes() {
    let phc = hash_password("correct horse").unwrap();
    assert!(phc.starts_with("$argon2id$v=19$"));
    assert!(verify_password(b"correct horse", &phc));
    assert!(!verify_password(b"correct horsf", &phc));
    assert!(!verify_password(b"correct horse", "not a hash"));
    // Salted: the same password hashes differently.
    assert_ne!(phc, hash_password("correct horse").unwrap());

    let store = UserStore::new(vec![("alice".into(), phc.clone())]).unwrap();
    assert_eq!(store.len(), 1);
    store.authenticate("alice", b"correct horse").unwrap();
    assert_eq!(
        store.authenticate("alice", b"wrong").unwrap_err(),
        status::BAD_USER_ACCESS_DENIED
    );
    assert_eq!(
        store.authenticate("bob", b"correct horse").unwrap_err(),
        status::BAD_USER_ACCESS_DENIED
    );

    assert!(UserStore::new(vec![("a".into(), "plain".into())]).is_err());
    assert!(UserStore::new(vec![("a".into(), phc.clone()), ("a".into(), phc.clone())]).is_err());
    assert!(UserStore::new(vec![(String::new(), phc)]).is_err());
    let argon2i = "$argon2i$v=19$m=16,t=2,p=1$c29tZXNhbHQ$ODZ0Q3DjxkY3EsQFG1pWdA";
    assert!(UserStore::new(vec![("a".into(), argon2i.into())])
        .unwrap_err()
        .contains("argon2id"));
}

#[test]
fn login_limiter_token_bucket() {
    let mut lim = LoginLimiter::new(LoginLimiterConfig {
        burst: 3,
        refill_interval_ms: 1000,
        addresses_max: 2,
    });
    let a: IpAddr = "10.0.0.1".parse().unwrap();
    let b: IpAddr = "10.0.0.2".parse().unwrap();
    let c: IpAddr = "10.0.0.3".parse().unwrap();
    let t = 1_000_000;
    for _ in 0..3 {
        lim.check(a, t).unwrap();
        lim.record_failure(a, t);
    }
    assert_eq!(
        lim.check(a, t).unwrap_err(),
        status::BAD_TOO_MANY_OPERATIONS
    );
    assert!(lim.check(a, t + 999).is_err());
    lim.check(a, t + 1000).unwrap(); // one attempt refilled
    lim.record_failure(a, t + 1000);
    assert!(lim.check(a, t + 1500).is_err());
    // Other addresses are independent.
    lim.check(b, t).unwrap();
    lim.record_failure(b, t + 1000);
    assert_eq!(lim.tracked(), 2);
    // The map is bounded: a third address evicts; b (fewer failures, but not refilled) or a.
    lim.record_failure(c, t + 1000);
    assert_eq!(lim.tracked(), 2);
    // After full refill, entries are evictable first and allowed again.
    lim.check(a, t + 10_000).unwrap();
    lim.record_success(c);
    assert!(lim.tracked() <= 1);
    // Time going backwards does not underflow or unlock.
    let mut lim = LoginLimiter::new(LoginLimiterConfig {
        burst: 1,
        refill_interval_ms: 1000,
        addresses_max: 8,
    });
    lim.record_failure(a, 5000);
    assert!(lim.check(a, 10).is_err());
}

#[test]
fn login_limiter_evicts_refilled_entries_first() {
    let mut lim = LoginLimiter::new(LoginLimiterConfig {
        burst: 2,
        refill_interval_ms: 100,
        addresses_max: 2,
    });
    let a: IpAddr = "::1".parse().unwrap();
    let b: IpAddr = "::2".parse().unwrap();
    let c: IpAddr = "::3".parse().unwrap();
    lim.record_failure(a, 0); // a refills by t = 100
    lim.record_failure(b, 900);
    lim.record_failure(b, 900);
    assert!(lim.check(b, 900).is_err());
    lim.record_failure(c, 950); // evicts a (refilled), not b
    assert!(lim.check(b, 950).is_err(), "b must still be limited");
    assert_eq!(lim.tracked(), 2);
}

#[test]
fn login_limiter_table_is_fixed_size_under_many_addresses() {
    // 64 entries (8 sets of 8): 10,000 addresses never grow it, and a limited address that is
    // still being counted is not pushed out by refilled ones of its set.
    let mut lim = LoginLimiter::new(LoginLimiterConfig {
        burst: 1,
        refill_interval_ms: 1000,
        addresses_max: 64,
    });
    for i in 0..10_000u32 {
        let a = IpAddr::from(std::net::Ipv4Addr::from(0x0A00_0000 + i));
        lim.record_failure(a, 0);
        assert!(lim.tracked() <= 64);
    }
    assert_eq!(lim.tracked(), 64);
    // One set of 8: a limited address is not pushed out while refilled entries remain.
    let mut lim = LoginLimiter::new(LoginLimiterConfig {
        burst: 1,
        refill_interval_ms: 1000,
        addresses_max: 8,
    });
    for i in 0..8u32 {
        lim.record_failure(IpAddr::from(std::net::Ipv4Addr::from(0x0A00_0000 + i)), 0);
    }
    let hot: IpAddr = "192.0.2.1".parse().unwrap();
    lim.record_failure(hot, 5_000);
    assert!(lim.check(hot, 5_000).is_err());
    // The others have refilled by t = 5,000: new addresses evict those first.
    for i in 0..7u32 {
        lim.record_failure(
            IpAddr::from(std::net::Ipv4Addr::from(0x0B00_0000 + i)),
            5_000,
        );
    }
    assert_eq!(lim.tracked(), 8);
    assert!(
        lim.check(hot, 5_000).is_err(),
        "the limited address keeps its entry"
    );
}

#[test]
fn cli_cert_generate_show_trust() {
    let tmp = TempDir::new("cli");
    let pki_dir = tmp.path().join("pki");
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let opts = GenerateOptions {
        uri: Some("urn:cli:test".into()),
        hosts: vec!["box".into()],
        ips: vec!["10.1.2.3".parse().unwrap()],
        ..GenerateOptions::default()
    };
    let code = cert_generate(&opts, &pki_dir, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("application uri: urn:cli:test"), "{text}");
    assert!(text.contains("dns names:       box"));
    assert!(text.contains("10.1.2.3"));
    // A second generate without --force refuses to overwrite.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        cert_generate(&GenerateOptions::default(), &pki_dir, &mut out, &mut err),
        1
    );
    assert!(String::from_utf8_lossy(&err).contains("--force"));
    // show (own certificate by default).
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(cert_show(None, &pki_dir, &mut out, &mut err), 0);
    assert!(String::from_utf8_lossy(&out).contains("key:             RSA 2048 bits"));
    // trust a PEM file.
    let (peer, _) =
        generate_self_signed(&CertificateRequest::new("urn:peer", "peer", now_unix_s())).unwrap();
    let pem_path = tmp.path().join("peer.pem");
    std::fs::write(&pem_path, uaring_crypto::cert::to_pem(peer.der())).unwrap();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = cert_trust(&pem_path, &pki_dir, &mut out, &mut err);
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let pki = Pki::open(&pki_dir, PkiConfig::default()).unwrap();
    pki.validate_client(peer.der(), Some("urn:peer"), now_unix_s())
        .unwrap();
    // Errors: key size out of range, missing file, not a certificate.
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let small = GenerateOptions {
        bits: 1024,
        force: true,
        ..GenerateOptions::default()
    };
    assert_eq!(cert_generate(&small, &pki_dir, &mut out, &mut err), 2);
    let long = GenerateOptions {
        days: 0,
        force: true,
        ..GenerateOptions::default()
    };
    assert_eq!(cert_generate(&long, &pki_dir, &mut out, &mut err), 2);
    assert_eq!(
        cert_trust(
            std::path::Path::new("/nonexistent"),
            &pki_dir,
            &mut out,
            &mut err
        ),
        1
    );
    std::fs::write(tmp.path().join("junk"), b"junk").unwrap();
    let junk = tmp.path().join("junk");
    assert_eq!(cert_show(Some(&junk), &pki_dir, &mut out, &mut err), 1);
}

#[test]
fn cli_hash_password() {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = hash_password_command_io(&mut &b"s3cret\n"[..], &mut out, &mut err);
    assert_eq!(code, 0);
    let phc = String::from_utf8(out).unwrap();
    assert!(verify_password(b"s3cret", phc.trim_end()));
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        hash_password_command_io(&mut &b""[..], &mut out, &mut err),
        1
    );
    assert_eq!(
        hash_password_command_io(&mut &b"\n"[..], &mut out, &mut err),
        1
    );
}
