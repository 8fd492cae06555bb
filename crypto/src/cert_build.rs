//! Certificates and signing requests of a Brainpool key, built from x509-cert's types and
//! signed with [`crate::brainpool`]: rcgen (which makes every other certificate here) has no
//! Brainpool algorithm. The content is what [`crate::cert::generate_self_signed_ecc`] and
//! [`crate::cert::signing_request_der_ecc`] give a NIST key: the same names, subjectAltName,
//! keyUsage, extendedKeyUsage, basicConstraints (an empty SEQUENCE) and key identifiers;
//! ecdsa-with-SHA256 for brainpoolP256r1, ecdsa-with-SHA384 for brainpoolP384r1.

use std::time::{Duration, UNIX_EPOCH};

use const_oid::db::{rfc5280, rfc5912};
use const_oid::ObjectIdentifier;
use der::asn1::{Any, BitString, Ia5StringRef, OctetString, SetOfVec, Utf8StringRef};
use der::{Encode, Tag};
use sha2::Digest as _;
use spki::{AlgorithmIdentifierOwned, SubjectPublicKeyInfoOwned};
use x509_cert::attr::{Attribute, AttributeTypeAndValue};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, ExtendedKeyUsage, KeyUsage, KeyUsages, SubjectAltName,
    SubjectKeyIdentifier,
};
use x509_cert::ext::Extension;
use x509_cert::name::{Name, RdnSequence, RelativeDistinguishedName};
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};

use crate::cert::{CertSignatureAlg, CertificateRequest, DnKind, SigningRequest};
use crate::ecc::{EccCurve, EccPrivateKey};
use crate::status;

fn bad<E>(_: E) -> u32 {
    status::BAD_INTERNAL_ERROR
}

fn invalid<E>(_: E) -> u32 {
    status::BAD_INVALID_ARGUMENT
}

/// SHA-256 (brainpoolP256r1) or SHA-384 (brainpoolP384r1) of `data`, and the signature
/// algorithm that names it.
fn digest(curve: EccCurve, data: &[u8]) -> (Vec<u8>, ObjectIdentifier) {
    if curve.coordinate_len() == 48 {
        (
            sha2::Sha384::digest(data).to_vec(),
            rfc5912::ECDSA_WITH_SHA_384,
        )
    } else {
        (
            sha2::Sha256::digest(data).to_vec(),
            rfc5912::ECDSA_WITH_SHA_256,
        )
    }
}

/// A name of `(kind, value)` attributes, one per RDN, in order.
fn name(attrs: &[(DnKind, String)]) -> Result<Name, u32> {
    let mut rdns = Vec::with_capacity(attrs.len());
    for (kind, v) in attrs {
        let value = match kind {
            DnKind::C => Any::new(Tag::PrintableString, v.as_bytes()).map_err(invalid)?,
            DnKind::Dc => Any::from(Ia5StringRef::new(v).map_err(invalid)?),
            _ => Any::from(Utf8StringRef::new(v).map_err(invalid)?),
        };
        let atv = AttributeTypeAndValue {
            oid: kind.oid(),
            value,
        };
        rdns.push(RelativeDistinguishedName(
            SetOfVec::try_from(vec![atv]).map_err(bad)?,
        ));
    }
    Ok(RdnSequence(rdns))
}

fn extension(id: ObjectIdentifier, critical: bool, value: &impl Encode) -> Result<Extension, u32> {
    Ok(Extension {
        extn_id: id,
        critical,
        extn_value: OctetString::new(value.to_der().map_err(bad)?).map_err(bad)?,
    })
}

/// subjectAltName: the ApplicationUri (if any), DNS names, IP addresses.
fn alt_names(uri: &str, dns: &[String], ips: &[std::net::IpAddr]) -> Result<SubjectAltName, u32> {
    let mut names = Vec::new();
    if !uri.is_empty() {
        names.push(GeneralName::UniformResourceIdentifier(
            der::asn1::Ia5String::new(uri).map_err(invalid)?,
        ));
    }
    for d in dns {
        names.push(GeneralName::DnsName(
            der::asn1::Ia5String::new(d).map_err(invalid)?,
        ));
    }
    for ip in ips {
        let bytes = match ip {
            std::net::IpAddr::V4(v4) => v4.octets().to_vec(),
            std::net::IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names.push(GeneralName::IpAddress(
            OctetString::new(bytes).map_err(bad)?,
        ));
    }
    Ok(SubjectAltName(names))
}

/// The key's SubjectPublicKeyInfo: id-ecPublicKey with the named curve.
fn spki(key: &EccPrivateKey) -> Result<SubjectPublicKeyInfoOwned, u32> {
    Ok(SubjectPublicKeyInfoOwned {
        algorithm: AlgorithmIdentifierOwned {
            oid: rfc5912::ID_EC_PUBLIC_KEY,
            parameters: Some(Any::from(&key.curve().oid())),
        },
        subject_public_key: BitString::from_bytes(key.public_point()).map_err(bad)?,
    })
}

/// DER ECDSA signature of `data` by `key` (a Brainpool key), and its algorithm identifier.
fn sign(key: &EccPrivateKey, data: &[u8]) -> Result<(Vec<u8>, AlgorithmIdentifierOwned), u32> {
    let (digest, oid) = digest(key.curve(), data);
    let sig = key
        .sign_prehash_der(&digest)
        .ok_or(status::BAD_INTERNAL_ERROR)??;
    Ok((
        sig,
        AlgorithmIdentifierOwned {
            oid,
            parameters: None,
        },
    ))
}

fn time(unix_s: i64) -> Result<Time, u32> {
    let secs = u64::try_from(unix_s).map_err(invalid)?;
    Time::try_from(UNIX_EPOCH + Duration::from_secs(secs)).map_err(invalid)
}

/// A self-signed application instance certificate of a Brainpool `key` for `req`.
pub(crate) fn self_signed_der(
    req: &CertificateRequest,
    key: &EccPrivateKey,
) -> Result<Vec<u8>, u32> {
    let subject = name(&[
        (DnKind::Cn, req.common_name.clone()),
        (DnKind::O, req.organization.clone()),
    ])?;
    let mut serial = [0u8; 16];
    crate::asymmetric::random_bytes(&mut serial)?;
    serial[0] &= 0x7f;
    serial[0] |= 0x01;
    let not_after = req
        .not_before_unix_s
        .saturating_add(i64::from(req.validity_days) * 86_400);
    let ski = sha1::Sha1::digest(key.public_point()).to_vec();
    let usages = KeyUsages::DigitalSignature
        | KeyUsages::NonRepudiation
        | KeyUsages::KeyAgreement
        | KeyUsages::KeyCertSign;
    let extensions = vec![
        // basicConstraints with cA FALSE: the empty SEQUENCE DER asks for (as the other
        // generated certificates have it).
        Extension {
            extn_id: rfc5280::ID_CE_BASIC_CONSTRAINTS,
            critical: true,
            extn_value: OctetString::new(vec![0x30, 0x00]).map_err(bad)?,
        },
        extension(rfc5280::ID_CE_KEY_USAGE, true, &KeyUsage(usages))?,
        extension(
            rfc5280::ID_CE_EXT_KEY_USAGE,
            false,
            &ExtendedKeyUsage(vec![rfc5280::ID_KP_SERVER_AUTH, rfc5280::ID_KP_CLIENT_AUTH]),
        )?,
        extension(
            rfc5280::ID_CE_SUBJECT_ALT_NAME,
            false,
            &alt_names(&req.application_uri, &req.dns_names, &req.ip_addresses)?,
        )?,
        extension(
            rfc5280::ID_CE_SUBJECT_KEY_IDENTIFIER,
            false,
            &SubjectKeyIdentifier(OctetString::new(ski.clone()).map_err(bad)?),
        )?,
        extension(
            rfc5280::ID_CE_AUTHORITY_KEY_IDENTIFIER,
            false,
            &AuthorityKeyIdentifier {
                key_identifier: Some(OctetString::new(ski).map_err(bad)?),
                authority_cert_issuer: None,
                authority_cert_serial_number: None,
            },
        )?,
    ];
    let (_, sig_oid) = digest(key.curve(), &[]);
    let tbs = x509_cert::TbsCertificate {
        version: x509_cert::Version::V3,
        serial_number: SerialNumber::new(&serial).map_err(bad)?,
        signature: AlgorithmIdentifierOwned {
            oid: sig_oid,
            parameters: None,
        },
        issuer: subject.clone(),
        validity: Validity {
            not_before: time(req.not_before_unix_s)?,
            not_after: time(not_after)?,
        },
        subject,
        subject_public_key_info: spki(key)?,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(extensions),
    };
    let tbs_der = tbs.to_der().map_err(bad)?;
    let (signature, signature_algorithm) = sign(key, &tbs_der)?;
    x509_cert::Certificate {
        tbs_certificate: tbs,
        signature_algorithm,
        signature: BitString::from_bytes(&signature).map_err(bad)?,
    }
    .to_der()
    .map_err(bad)
}

/// A PKCS#10 signing request of a Brainpool `key` for `req` (the subject, subjectAltName,
/// keyUsage and extendedKeyUsage in an extensionRequest attribute).
pub(crate) fn signing_request_der(
    req: &SigningRequest,
    key: &EccPrivateKey,
) -> Result<Vec<u8>, u32> {
    let subject = if req.subject.trim().is_empty() {
        name(&[(DnKind::Cn, req.common_name.clone())])?
    } else {
        name(&crate::cert::subject_attributes(&req.subject)?)?
    };
    let usages = KeyUsages::DigitalSignature | KeyUsages::NonRepudiation | KeyUsages::KeyAgreement;
    let mut extensions = vec![
        extension(rfc5280::ID_CE_KEY_USAGE, true, &KeyUsage(usages))?,
        extension(
            rfc5280::ID_CE_EXT_KEY_USAGE,
            false,
            &ExtendedKeyUsage(vec![rfc5280::ID_KP_SERVER_AUTH, rfc5280::ID_KP_CLIENT_AUTH]),
        )?,
    ];
    let san = alt_names(&req.application_uri, &req.dns_names, &req.ip_addresses)?;
    if !san.0.is_empty() {
        extensions.push(extension(rfc5280::ID_CE_SUBJECT_ALT_NAME, false, &san)?);
    }
    let extension_request = Attribute {
        // PKCS #9 extensionRequest.
        oid: ObjectIdentifier::new_unwrap("1.2.840.113549.1.9.14"),
        values: SetOfVec::try_from(vec![Any::encode_from(&extensions).map_err(bad)?])
            .map_err(bad)?,
    };
    let info = x509_cert::request::CertReqInfo {
        version: x509_cert::request::Version::V1,
        subject,
        public_key: spki(key)?,
        attributes: SetOfVec::try_from(vec![extension_request]).map_err(bad)?,
    };
    let info_der = info.to_der().map_err(bad)?;
    let (signature, algorithm) = sign(key, &info_der)?;
    x509_cert::request::CertReq {
        info,
        algorithm,
        signature: BitString::from_bytes(&signature).map_err(bad)?,
    }
    .to_der()
    .map_err(bad)
}

/// Verifies an X.509 ECDSA signature (DER) by a Brainpool key `point`: the hash is the
/// signature algorithm's (SHA-256 or SHA-384), whatever the curve.
pub(crate) fn verify_brainpool(
    curve: EccCurve,
    alg: CertSignatureAlg,
    point: &[u8],
    signed: &[u8],
    signature: &[u8],
) -> Result<(), u32> {
    let digest = match alg {
        CertSignatureAlg::EcdsaSha256 => sha2::Sha256::digest(signed).to_vec(),
        CertSignatureAlg::EcdsaSha384 => sha2::Sha384::digest(signed).to_vec(),
        _ => return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED),
    };
    let bp = match curve {
        EccCurve::BrainpoolP256r1 => crate::brainpool::Bp::P256,
        EccCurve::BrainpoolP384r1 => crate::brainpool::Bp::P384,
        _ => return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED),
    };
    if crate::brainpool::verify_prehash_der(bp, point, &digest, signature) {
        Ok(())
    } else {
        Err(status::BAD_CERTIFICATE_INVALID)
    }
}
