//! Asymmetric operations: S2OPC's certificate and key, generated keys, every supported policy.

mod common;
use common::{hex, S2OPC_CERT_HEX, S2OPC_KEY_HEX, S2OPC_SPKI_HEX};
use uaring_crypto::cert::CertSignatureAlg;
use uaring_crypto::{
    asym_decrypt, asym_encrypt, asym_sign, asym_verify, encrypted_len, generate_self_signed,
    plain_text_block_size, status, Certificate, CertificateRequest, PolicyId, PrivateKey,
};

fn s2opc() -> (Certificate, PrivateKey) {
    let cert = Certificate::from_der(&hex(S2OPC_CERT_HEX)).unwrap();
    let key = PrivateKey::from_der(&hex(S2OPC_KEY_HEX)).unwrap();
    (cert, key)
}

#[test]
fn s2opc_certificate_fields() {
    let (cert, key) = s2opc();
    assert_eq!(cert.key_bits(), 2048);
    assert_eq!(key.key_bits(), 2048);
    assert!(key.matches(&cert));
    assert_eq!(cert.spki_der(), &hex(S2OPC_SPKI_HEX)[..]);
    assert_eq!(cert.signature_alg(), CertSignatureAlg::RsaSha256);
    assert!(cert.subject().contains("CN=INGOPCS Test suite"));
    assert_eq!(cert.common_name().as_deref(), Some("INGOPCS Test suite"));
    assert!(cert.is_self_issued());
    assert_eq!(cert.is_ca(), Some(true));
    assert_eq!(
        cert.subject_key_id(),
        Some(&hex("7d33f73c22b315aabd26ecb5a6db8a0bb511fbd0")[..])
    );
    assert_eq!(cert.authority_key_id(), cert.subject_key_id());
    assert_eq!(cert.serial(), &hex("00cf163f0b5124ff4c")[..]);
    // 2016-10-26T16:30:54Z .. 2017-02-03T16:30:54Z
    assert_eq!(cert.not_before_unix_s(), 1_477_499_454);
    assert_eq!(cert.not_after_unix_s(), 1_486_139_454);
    assert_eq!(cert.thumbprint(), &uaring_crypto::thumbprint(cert.der()));
    assert!(cert.verify_signed_by(&cert).is_ok());
    // Block sizes S2OPC states for this key: 214 plaintext bytes (OAEP-SHA1), 256 ciphertext.
    assert_eq!(plain_text_block_size(PolicyId::Basic256Sha256, 2048), 214);
    assert_eq!(encrypted_len(PolicyId::Basic256Sha256, 2048, 856), 1024);
    assert_eq!(encrypted_len(PolicyId::Basic256Sha256, 2048, 32), 256);
}

#[test]
fn s2opc_key_roundtrips_single_and_multi_block() {
    let (cert, key) = s2opc();
    for policy in [
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
    ] {
        for len in [32usize, 214, 215, 856] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let mut ct = Vec::new();
            asym_encrypt(policy, &cert, &plain, &mut ct).unwrap();
            assert_eq!(ct.len(), encrypted_len(policy, 2048, len));
            let mut back = Vec::new();
            assert_eq!(asym_decrypt(policy, &key, &ct, &mut back).unwrap(), len);
            assert_eq!(back, plain);
            // Tampered or truncated ciphertexts fail without panicking.
            let mut bad = ct.clone();
            bad[10] ^= 0x80;
            assert_eq!(
                asym_decrypt(policy, &key, &bad, &mut Vec::new()).unwrap_err(),
                status::BAD_SECURITY_CHECKS_FAILED
            );
            assert!(asym_decrypt(policy, &key, &ct[..ct.len() - 1], &mut Vec::new()).is_err());
        }
        let data = b"Test S2OPC Test";
        let sig = asym_sign(policy, &key, data).unwrap();
        assert_eq!(sig.len(), 256);
        asym_verify(policy, &cert, data, &sig).unwrap();
        assert!(asym_verify(policy, &cert, b"Test S2OPC Tesu", &sig).is_err());
    }
}

#[test]
fn oaep_sha1_and_sha256_are_not_interchangeable() {
    let (cert, key) = s2opc();
    let mut ct = Vec::new();
    asym_encrypt(PolicyId::Basic256Sha256, &cert, b"secret", &mut ct).unwrap();
    assert!(asym_decrypt(PolicyId::Aes256Sha256RsaPss, &key, &ct, &mut Vec::new()).is_err());
    let sig = asym_sign(PolicyId::Basic256Sha256, &key, b"x").unwrap();
    assert!(asym_verify(PolicyId::Aes256Sha256RsaPss, &cert, b"x", &sig).is_err());
    let pss = asym_sign(PolicyId::Aes256Sha256RsaPss, &key, b"x").unwrap();
    assert!(asym_verify(PolicyId::Basic256Sha256, &cert, b"x", &pss).is_err());
    // PKCS#1 v1.5 signatures are deterministic, PSS ones are salted.
    assert_eq!(
        sig,
        asym_sign(PolicyId::Basic256Sha256, &key, b"x").unwrap()
    );
    assert_ne!(
        pss,
        asym_sign(PolicyId::Aes256Sha256RsaPss, &key, b"x").unwrap()
    );
}

#[test]
fn none_and_deprecated_policies_refuse_asymmetric_signing() {
    let (cert, key) = s2opc();
    assert_eq!(
        asym_sign(PolicyId::None, &key, b"x").unwrap_err(),
        status::BAD_SECURITY_POLICY_REJECTED
    );
    assert_eq!(
        asym_sign(PolicyId::Basic256, &key, b"x").unwrap_err(),
        status::BAD_SECURITY_POLICY_REJECTED
    );
    assert!(asym_encrypt(PolicyId::None, &cert, b"x", &mut Vec::new()).is_err());
    // Basic128Rsa15's PKCS#1 v1.5 encryption itself works.
    let mut ct = Vec::new();
    asym_encrypt(PolicyId::Basic128Rsa15, &cert, &[9u8; 300], &mut ct).unwrap();
    assert_eq!(ct.len(), 512);
    let mut back = Vec::new();
    asym_decrypt(PolicyId::Basic128Rsa15, &key, &ct, &mut back).unwrap();
    assert_eq!(back, vec![9u8; 300]);
}

#[test]
fn garbage_certificates_and_keys_are_errors() {
    assert_eq!(
        Certificate::from_der(&[]).unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
    assert_eq!(
        Certificate::from_der(&[0x30, 0x03, 1, 2, 3]).unwrap_err(),
        status::BAD_CERTIFICATE_INVALID
    );
    let der = hex(S2OPC_CERT_HEX);
    for cut in [1, 100, 500, der.len() - 1] {
        assert!(Certificate::from_der(&der[..cut]).is_err());
        assert!(Certificate::parse_chain(&der[..cut]).is_err());
    }
    let mut flipped = der.clone();
    flipped[300] ^= 0xff;
    // Either unparseable or parseable with a broken self-signature; never a panic.
    if let Ok(c) = Certificate::from_der(&flipped) {
        assert!(c.verify_signed_by(&c).is_err());
    }
    assert!(PrivateKey::from_der(&[0u8; 64]).is_err());
    assert!(PrivateKey::from_pem_or_der(
        b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
    )
    .is_err());
}

#[test]
fn chains_are_split() {
    let der = hex(S2OPC_CERT_HEX);
    let mut two = der.clone();
    two.extend_from_slice(&der);
    let chain = Certificate::parse_chain(&two).unwrap();
    assert_eq!(chain.len(), 2);
    assert_eq!(chain[0].der(), &der[..]);
    let mut too_many = Vec::new();
    for _ in 0..9 {
        too_many.extend_from_slice(&der);
    }
    assert!(Certificate::parse_chain(&too_many).is_err());
    let mut trailing = der.clone();
    trailing.push(0);
    assert!(Certificate::parse_chain(&trailing).is_err());
}

#[test]
fn generated_certificate_has_the_opc_ua_profile() {
    let now = common::now_unix_s();
    let mut req = CertificateRequest::new("urn:test:uaring", "uaring test", now);
    req.dns_names = vec!["host.example".into()];
    req.ip_addresses = vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()];
    let (cert, key) = generate_self_signed(&req).unwrap();
    assert!(key.matches(&cert));
    assert_eq!(cert.key_bits(), 2048);
    assert_eq!(cert.signature_alg(), CertSignatureAlg::RsaSha256);
    assert_eq!(cert.application_uri(), Some("urn:test:uaring"));
    assert_eq!(cert.dns_names(), &["host.example".to_string()]);
    assert_eq!(cert.ip_addresses().len(), 2);
    assert!(cert.has_host("HOST.example") && cert.has_host("::1") && !cert.has_host("other"));
    let ku = cert.key_usage().unwrap();
    assert!(ku.digital_signature && ku.non_repudiation && ku.key_encipherment);
    assert!(ku.data_encipherment && ku.key_cert_sign && !ku.crl_sign);
    let eku = cert.extended_key_usage().unwrap();
    assert!(eku.contains(&const_oid::db::rfc5280::ID_KP_SERVER_AUTH));
    assert!(eku.contains(&const_oid::db::rfc5280::ID_KP_CLIENT_AUTH));
    assert_eq!(cert.is_ca(), Some(false));
    assert!(cert.subject_key_id().is_some());
    assert!(cert.subject().contains("CN=uaring test"));
    assert_eq!(cert.common_name().as_deref(), Some("uaring test"));
    assert!(cert.is_time_valid(now));
    assert!(!cert.is_time_valid(now + 6 * 365 * 86400));
    cert.verify_signed_by(&cert).unwrap();
    // The key works with every supported policy against its own certificate.
    for policy in PolicyId::RECOMMENDED
        .into_iter()
        .filter(|p| *p != PolicyId::None)
    {
        let sig = asym_sign(policy, &key, cert.der()).unwrap();
        asym_verify(policy, &cert, cert.der(), &sig).unwrap();
    }
    // PEM round trip of the key.
    let again = PrivateKey::from_pem_or_der(key.to_pem().as_bytes()).unwrap();
    assert!(again.matches(&cert));
    let pem = uaring_crypto::cert::to_pem(cert.der());
    assert_eq!(
        Certificate::from_pem_or_der(pem.as_bytes()).unwrap().der(),
        cert.der()
    );
}

#[test]
fn larger_keys_use_the_extra_padding_byte() {
    let now = common::now_unix_s();
    let mut req = CertificateRequest::new("urn:test:big", "big", now);
    req.key_bits = 4096;
    let (cert, key) = generate_self_signed(&req).unwrap();
    assert_eq!(cert.key_bytes(), 512);
    assert!(PolicyId::Basic256Sha256.asym_has_extra_padding_byte(cert.key_bytes()));
    let plain = vec![0x5au8; 1000];
    let mut ct = Vec::new();
    asym_encrypt(PolicyId::Aes256Sha256RsaPss, &cert, &plain, &mut ct).unwrap();
    assert_eq!(ct.len(), 3 * 512);
    let mut back = Vec::new();
    asym_decrypt(PolicyId::Aes256Sha256RsaPss, &key, &ct, &mut back).unwrap();
    assert_eq!(back, plain);
}

/// The modulus size is read from the certificate's DER (no aws-lc key parse on every handshake):
/// it agrees with aws-lc's own reading of the matching private key at 2048 and 4096 bits, and
/// the thumbprint of a chain's leaf is the SHA-1 of the leaf's DER alone.
#[test]
fn key_size_and_leaf_thumbprint_come_from_the_der() {
    use uaring_core::secure_channel::SecurityPolicy;
    let now = common::now_unix_s();
    let mut ders = Vec::new();
    for bits in [2048usize, 4096] {
        let mut req = CertificateRequest::new("urn:test:bits", "bits", now);
        req.key_bits = bits;
        let (cert, key) = generate_self_signed(&req).unwrap();
        assert_eq!(cert.key_bits(), bits);
        assert_eq!(cert.key_bits(), key.key_bits());
        assert_eq!(cert.key_bytes(), bits / 8);
        assert!(cert.subject().contains("CN=bits") && cert.issuer().contains("CN=bits"));
        ders.push(cert.der().to_vec());
    }
    let chain = [ders[0].clone(), ders[1].clone()].concat();
    assert_eq!(uaring_crypto::cert::leaf_der(&chain), Some(&ders[0][..]));
    assert_eq!(uaring_crypto::cert::leaf_der(&chain[..10]), None);
    let (server_cert, server_key) =
        generate_self_signed(&CertificateRequest::new("urn:s", "s", now)).unwrap();
    let own = uaring_crypto::OwnIdentity::new(server_cert, server_key).unwrap();
    let policy = uaring_crypto::RsaPolicy::client(PolicyId::Basic256Sha256, own).unwrap();
    let leaf = Certificate::from_der(&ders[0]).unwrap();
    assert_eq!(
        policy.thumbprint(&chain).unwrap(),
        leaf.thumbprint().to_vec()
    );
    assert_eq!(
        policy.thumbprint(&ders[0]).unwrap(),
        leaf.thumbprint().to_vec()
    );
}

/// The commonName is the attribute's value, not a piece of the formatted subject: a comma or a
/// "CN=" inside another attribute changes nothing (the PKI's file names and the X.509 user
/// login both use it).
#[test]
fn common_name_is_the_attribute_not_a_split_of_the_subject() {
    let mut req = CertificateRequest::new("urn:cn:test", "Doe, John", 1_700_000_000);
    req.organization = "O, CN=mallory".into();
    let (cert, _) = generate_self_signed(&req).unwrap();
    assert_eq!(cert.common_name().as_deref(), Some("Doe, John"));
    let name = uaring_crypto::pki::cert_file_name(&cert);
    assert!(name.starts_with("Doe__John ["), "{name}");
}
