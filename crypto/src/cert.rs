//! X.509 application instance certificates: parsing (x509-cert) and generation (rcgen + aws-lc-rs).

use std::net::IpAddr;

use const_oid::db::rfc5280 as oids;
use const_oid::db::rfc5912;
use const_oid::ObjectIdentifier;
use der::{Decode, Encode, Reader, SliceReader};
use sha1::{Digest, Sha1};
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName,
    SubjectKeyIdentifier,
};

use crate::asymmetric::PrivateKey;
use crate::policy::THUMBPRINT_LEN;
use crate::status;

/// Most certificates accepted in one chain ByteString (leaf + issuers).
pub const CHAIN_LEN_MAX: usize = 8;
/// Largest DER certificate accepted.
pub const CERT_DER_LEN_MAX: usize = 32 * 1024;

/// Key usage bits (RFC 5280 §4.2.1.3) present in a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyUsageBits {
    /// digitalSignature
    pub digital_signature: bool,
    /// nonRepudiation (contentCommitment)
    pub non_repudiation: bool,
    /// keyEncipherment
    pub key_encipherment: bool,
    /// dataEncipherment
    pub data_encipherment: bool,
    /// keyCertSign
    pub key_cert_sign: bool,
    /// cRLSign
    pub crl_sign: bool,
}

/// How the certificate itself is signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertSignatureAlg {
    /// sha1WithRSAEncryption: rejected for the non-deprecated policies.
    RsaSha1,
    /// sha256WithRSAEncryption
    RsaSha256,
    /// sha384WithRSAEncryption
    RsaSha384,
    /// sha512WithRSAEncryption
    RsaSha512,
    /// RSASSA-PSS
    RsaPss,
    /// ecdsa-with-SHA256
    EcdsaSha256,
    /// ecdsa-with-SHA384
    EcdsaSha384,
    /// Anything else (MD5, ECDSA with SHA-1 or SHA-512, …): not accepted.
    Other,
}

/// A parsed certificate: the DER plus the fields security checks need. Immutable once parsed,
/// and shared: a clone (the PKI's remembered chains hand one to every handshake) is a
/// reference count, not a copy of a dozen buffers.
#[derive(Clone, Debug)]
pub struct Certificate(std::sync::Arc<Parsed>);

#[derive(Debug)]
struct Parsed {
    der: Vec<u8>,
    thumbprint: [u8; THUMBPRINT_LEN],
    tbs_range: (usize, usize),
    signature: Vec<u8>,
    signature_alg: CertSignatureAlg,
    subject_der: Vec<u8>,
    issuer_der: Vec<u8>,
    serial: Vec<u8>,
    not_before_unix_s: i64,
    not_after_unix_s: i64,
    spki_der: Vec<u8>,
    rsa_public_key: Vec<u8>,
    key_bits: usize,
    ec_curve: Option<crate::ecc::EccCurve>,
    application_uri: Option<String>,
    dns_names: Vec<String>,
    ip_addresses: Vec<IpAddr>,
    key_usage: Option<KeyUsageBits>,
    extended_key_usage: Option<Vec<ObjectIdentifier>>,
    is_ca: Option<bool>,
    subject_key_id: Option<Vec<u8>>,
    authority_key_id: Option<Vec<u8>>,
    /// aws-lc's objects for the public key, made on first use and shared by the clones.
    keys: PublicKeys,
}

/// The public key of a certificate as aws-lc objects, each parsed on its first use. The
/// certificate's clones share them, so a client certificate the PKI remembers
/// (`validated_chains_max`) keeps them — and the Montgomery constants aws-lc computes on a
/// key's first operation — from one handshake to the next: OpenSecureChannel's verification
/// and encryption and ActivateSession's verification use the same ones.
#[derive(Default)]
pub(crate) struct PublicKeys {
    pub(crate) oaep: std::sync::OnceLock<Option<aws_lc_rs::rsa::OaepPublicEncryptingKey>>,
    pub(crate) pkcs1: std::sync::OnceLock<Option<aws_lc_rs::rsa::Pkcs1PublicEncryptingKey>>,
    /// One per signature algorithm (a key parsed for verification is bound to one).
    pub(crate) verify: [std::sync::OnceLock<Option<aws_lc_rs::signature::ParsedPublicKey>>; 3],
}

impl std::fmt::Debug for PublicKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PublicKeys").finish_non_exhaustive()
    }
}

/// An RFC 4514 string of a DER Name (empty if it does not parse; it parsed when the certificate did).
fn name_string(der: &[u8]) -> String {
    x509_cert::name::Name::from_der(der)
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// Modulus size in bits of a PKCS#1 `RSAPublicKey` (SEQUENCE { modulus INTEGER, publicExponent
/// INTEGER }), read from the DER alone. Whether the key is usable is aws-lc's check when it is first
/// used (encryption, signature verification); this is only the size the policy checks compare.
fn rsa_modulus_bits(rsa_public_key: &[u8]) -> Option<usize> {
    let mut r = SliceReader::new(rsa_public_key).ok()?;
    let modulus = r
        .sequence(|seq| {
            let n = der::asn1::UintRef::decode(seq)?;
            let _e = der::asn1::UintRef::decode(seq)?;
            Ok(n)
        })
        .ok()?;
    r.finish(()).ok()?;
    let bytes = modulus.as_bytes();
    let first = *bytes.first()?;
    Some(bytes.len() * 8 - first.leading_zeros() as usize)
}

/// The first certificate of a chain ByteString (concatenated DER certificates), by its DER
/// length alone; None if the bytes do not start with one whole TLV.
pub fn leaf_der(chain: &[u8]) -> Option<&[u8]> {
    let mut r = SliceReader::new(chain).ok()?;
    let len = r.tlv_bytes().ok()?.len();
    chain.get(..len)
}

/// SHA-1 of a DER certificate: the thumbprint of OPC UA security headers.
pub fn thumbprint(der: &[u8]) -> [u8; THUMBPRINT_LEN] {
    let mut out = [0u8; THUMBPRINT_LEN];
    out.copy_from_slice(&Sha1::digest(der));
    out
}

/// Lower-case hex.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        for digit in [b >> 4, b & 15] {
            s.push(char::from_digit(u32::from(digit), 16).unwrap_or('0'));
        }
    }
    s
}

fn time_unix_s(t: &x509_cert::time::Time) -> i64 {
    t.to_unix_duration().as_secs() as i64
}

impl Certificate {
    /// Parses exactly one DER certificate. Malformed input is `BadCertificateInvalid`.
    pub fn from_der(der: &[u8]) -> Result<Self, u32> {
        if der.len() > CERT_DER_LEN_MAX {
            return Err(status::BAD_CERTIFICATE_INVALID);
        }
        let parsed =
            x509_cert::Certificate::from_der(der).map_err(|_| status::BAD_CERTIFICATE_INVALID)?;
        Self::from_parsed(der, &parsed)
    }

    /// Parses a certificate file: PEM (`CERTIFICATE`) or DER.
    pub fn from_pem_or_der(bytes: &[u8]) -> Result<Self, u32> {
        match pem::parse(bytes) {
            Ok(p) if p.tag() == "CERTIFICATE" => Self::from_der(p.contents()),
            Ok(_) => Err(status::BAD_CERTIFICATE_INVALID),
            Err(_) => Self::from_der(bytes),
        }
    }

    /// Splits and parses a chain: concatenated DER certificates as carried in the
    /// SenderCertificate / ClientCertificate ByteStrings; the first one is the leaf.
    pub fn parse_chain(bytes: &[u8]) -> Result<Vec<Certificate>, u32> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            if out.len() >= CHAIN_LEN_MAX {
                return Err(status::BAD_CERTIFICATE_INVALID);
            }
            let len = {
                let mut r = SliceReader::new(rest).map_err(|_| status::BAD_CERTIFICATE_INVALID)?;
                r.tlv_bytes()
                    .map_err(|_| status::BAD_CERTIFICATE_INVALID)?
                    .len()
            };
            let (one, tail) = rest
                .split_at_checked(len)
                .ok_or(status::BAD_CERTIFICATE_INVALID)?;
            out.push(Self::from_der(one)?);
            rest = tail;
        }
        if out.is_empty() {
            return Err(status::BAD_CERTIFICATE_INVALID);
        }
        Ok(out)
    }

    fn from_parsed(der: &[u8], c: &x509_cert::Certificate) -> Result<Self, u32> {
        let bad = |_| status::BAD_CERTIFICATE_INVALID;
        // Locate the raw TBSCertificate bytes (what the issuer signed).
        let tbs_range = {
            let mut r = SliceReader::new(der).map_err(bad)?;
            let outer = der::Header::decode(&mut r).map_err(bad)?;
            let _ = outer;
            let start = u32::from(r.position()) as usize;
            let tbs = r.tlv_bytes().map_err(bad)?;
            (start, start + tbs.len())
        };
        let tbs = &c.tbs_certificate;
        let sig_oid = c.signature_algorithm.oid;
        let signature_alg = if sig_oid == rfc5912::SHA_1_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha1
        } else if sig_oid == rfc5912::SHA_256_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha256
        } else if sig_oid == rfc5912::SHA_384_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha384
        } else if sig_oid == rfc5912::SHA_512_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha512
        } else if sig_oid == rfc5912::ID_RSASSA_PSS {
            CertSignatureAlg::RsaPss
        } else if sig_oid == rfc5912::ECDSA_WITH_SHA_256 {
            CertSignatureAlg::EcdsaSha256
        } else if sig_oid == rfc5912::ECDSA_WITH_SHA_384 {
            CertSignatureAlg::EcdsaSha384
        } else {
            CertSignatureAlg::Other
        };
        let spki_der = tbs.subject_public_key_info.to_der().map_err(bad)?;
        let rsa_public_key = tbs
            .subject_public_key_info
            .subject_public_key
            .raw_bytes()
            .to_vec();
        let key_bits = if tbs.subject_public_key_info.algorithm.oid == rfc5912::RSA_ENCRYPTION {
            rsa_modulus_bits(&rsa_public_key).unwrap_or(0)
        } else {
            0
        };
        // An EC key: id-ecPublicKey with a named curve we run, the point uncompressed.
        let spki_alg = &tbs.subject_public_key_info.algorithm;
        let ec_curve = if spki_alg.oid == rfc5912::ID_EC_PUBLIC_KEY {
            spki_alg
                .parameters
                .as_ref()
                .and_then(|p| p.decode_as::<ObjectIdentifier>().ok())
                .and_then(|oid| crate::ecc::EccCurve::from_oid(&oid))
                .filter(|c| {
                    rsa_public_key.len() == 1 + c.nonce_len() && rsa_public_key.first() == Some(&4)
                })
        } else {
            None
        };
        let mut cert = Parsed {
            der: der.to_vec(),
            thumbprint: thumbprint(der),
            tbs_range,
            signature: c.signature.raw_bytes().to_vec(),
            signature_alg,
            subject_der: tbs.subject.to_der().map_err(bad)?,
            issuer_der: tbs.issuer.to_der().map_err(bad)?,
            serial: tbs.serial_number.as_bytes().to_vec(),
            not_before_unix_s: time_unix_s(&tbs.validity.not_before),
            not_after_unix_s: time_unix_s(&tbs.validity.not_after),
            spki_der,
            rsa_public_key,
            key_bits,
            ec_curve,
            application_uri: None,
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            key_usage: None,
            extended_key_usage: None,
            is_ca: None,
            subject_key_id: None,
            authority_key_id: None,
            keys: Default::default(),
        };
        for ext in tbs.extensions.iter().flatten() {
            let value = ext.extn_value.as_bytes();
            let id = ext.extn_id;
            if id == oids::ID_CE_SUBJECT_ALT_NAME {
                let san = SubjectAltName::from_der(value).map_err(bad)?;
                for name in san.0 {
                    match name {
                        GeneralName::UniformResourceIdentifier(uri)
                            if cert.application_uri.is_none() =>
                        {
                            cert.application_uri = Some(uri.to_string());
                        }
                        GeneralName::DnsName(dns) => cert.dns_names.push(dns.to_string()),
                        GeneralName::IpAddress(ip) => {
                            let b = ip.as_bytes();
                            if let Ok(v4) = <[u8; 4]>::try_from(b) {
                                cert.ip_addresses.push(IpAddr::from(v4));
                            } else if let Ok(v6) = <[u8; 16]>::try_from(b) {
                                cert.ip_addresses.push(IpAddr::from(v6));
                            }
                        }
                        _ => {}
                    }
                }
            } else if id == oids::ID_CE_KEY_USAGE {
                let ku = KeyUsage::from_der(value).map_err(bad)?;
                cert.key_usage = Some(KeyUsageBits {
                    digital_signature: ku.digital_signature(),
                    non_repudiation: ku.non_repudiation(),
                    key_encipherment: ku.key_encipherment(),
                    data_encipherment: ku.data_encipherment(),
                    key_cert_sign: ku.key_cert_sign(),
                    crl_sign: ku.crl_sign(),
                });
            } else if id == oids::ID_CE_EXT_KEY_USAGE {
                let eku = ExtendedKeyUsage::from_der(value).map_err(bad)?;
                cert.extended_key_usage = Some(eku.0);
            } else if id == oids::ID_CE_BASIC_CONSTRAINTS {
                let bc = BasicConstraints::from_der(value).map_err(bad)?;
                cert.is_ca = Some(bc.ca);
            } else if id == oids::ID_CE_SUBJECT_KEY_IDENTIFIER {
                let ski = SubjectKeyIdentifier::from_der(value).map_err(bad)?;
                cert.subject_key_id = Some(ski.0.as_bytes().to_vec());
            } else if id == oids::ID_CE_AUTHORITY_KEY_IDENTIFIER {
                let aki = AuthorityKeyIdentifier::from_der(value).map_err(bad)?;
                cert.authority_key_id = aki.key_identifier.map(|k| k.as_bytes().to_vec());
            }
        }
        Ok(Certificate(std::sync::Arc::new(cert)))
    }

    /// The DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.0.der
    }
    /// SHA-1 thumbprint of the DER.
    pub fn thumbprint(&self) -> &[u8; THUMBPRINT_LEN] {
        &self.0.thumbprint
    }
    /// Thumbprint as lower-case hex (file names in the PKI directories).
    pub fn thumbprint_hex(&self) -> String {
        to_hex(&self.0.thumbprint)
    }
    /// The signed TBSCertificate bytes.
    pub fn tbs_der(&self) -> &[u8] {
        // The range was found inside `der` when parsing; were it not, nothing would verify.
        self.0
            .der
            .get(self.0.tbs_range.0..self.0.tbs_range.1)
            .unwrap_or_default()
    }
    /// The issuer's signature over [`Self::tbs_der`].
    pub fn signature(&self) -> &[u8] {
        &self.0.signature
    }
    /// Algorithm of the issuer's signature.
    pub fn signature_alg(&self) -> CertSignatureAlg {
        self.0.signature_alg
    }
    /// Subject distinguished name, DER.
    pub fn subject_der(&self) -> &[u8] {
        &self.0.subject_der
    }
    /// Issuer distinguished name, DER.
    pub fn issuer_der(&self) -> &[u8] {
        &self.0.issuer_der
    }
    /// Subject as an RFC 4514 string, formatted on demand (for files, logs and the CLI: the
    /// checks compare [`Self::subject_der`]).
    pub fn subject(&self) -> String {
        name_string(&self.0.subject_der)
    }
    /// Issuer as an RFC 4514 string, formatted on demand.
    pub fn issuer(&self) -> String {
        name_string(&self.0.issuer_der)
    }
    /// The subject's commonName (the most specific one when there are several), decoded from
    /// its DirectoryString; None if the subject has none (or none of a string type).
    pub fn common_name(&self) -> Option<String> {
        use x509_cert::ext::pkix::name::DirectoryString;
        let name = x509_cert::name::Name::from_der(&self.0.subject_der).ok()?;
        name.0
            .iter()
            .rev()
            .flat_map(|rdn| rdn.0.iter())
            .filter(|atv| atv.oid == const_oid::db::rfc4519::CN)
            .find_map(
                |atv| match DirectoryString::from_der(&atv.value.to_der().ok()?).ok()? {
                    DirectoryString::Utf8String(s) => Some(s),
                    DirectoryString::PrintableString(s) => Some(s.to_string()),
                    DirectoryString::TeletexString(s) => Some(s.to_string()),
                },
            )
    }
    /// Serial number bytes (big-endian, as encoded).
    pub fn serial(&self) -> &[u8] {
        &self.0.serial
    }
    /// notBefore, seconds since the Unix epoch.
    pub fn not_before_unix_s(&self) -> i64 {
        self.0.not_before_unix_s
    }
    /// notAfter, seconds since the Unix epoch.
    pub fn not_after_unix_s(&self) -> i64 {
        self.0.not_after_unix_s
    }
    /// Whether `now_unix_s` lies within the validity period.
    pub fn is_time_valid(&self, now_unix_s: i64) -> bool {
        self.0.not_before_unix_s <= now_unix_s && now_unix_s <= self.0.not_after_unix_s
    }
    /// SubjectPublicKeyInfo DER.
    pub fn spki_der(&self) -> &[u8] {
        &self.0.spki_der
    }
    /// The aws-lc key objects of the public key (see [`PublicKeys`]).
    pub(crate) fn keys(&self) -> &PublicKeys {
        &self.0.keys
    }
    /// PKCS#1 RSAPublicKey DER (the subjectPublicKey bits).
    pub fn rsa_public_key(&self) -> &[u8] {
        &self.0.rsa_public_key
    }
    /// The curve of an EC key (NIST P-256/P-384, brainpoolP256r1/P384r1); `None` for any
    /// other key.
    pub fn ec_curve(&self) -> Option<crate::ecc::EccCurve> {
        self.0.ec_curve
    }
    /// The EC public key as an uncompressed point (`04 ‖ x ‖ y`), for a key of
    /// [`Certificate::ec_curve`].
    pub fn ec_public_point(&self) -> Option<&[u8]> {
        self.0.ec_curve.map(|_| &self.0.rsa_public_key[..])
    }
    /// RSA modulus size in bits; 0 for a non-RSA key.
    pub fn key_bits(&self) -> usize {
        self.0.key_bits
    }
    /// RSA modulus size in bytes (signature and ciphertext block size).
    pub fn key_bytes(&self) -> usize {
        self.0.key_bits / 8
    }
    /// First URI of subjectAltName: the ApplicationUri.
    pub fn application_uri(&self) -> Option<&str> {
        self.0.application_uri.as_deref()
    }
    /// DNS names of subjectAltName.
    pub fn dns_names(&self) -> &[String] {
        &self.0.dns_names
    }
    /// IP addresses of subjectAltName.
    pub fn ip_addresses(&self) -> &[IpAddr] {
        &self.0.ip_addresses
    }
    /// Key usage extension, if present.
    pub fn key_usage(&self) -> Option<KeyUsageBits> {
        self.0.key_usage
    }
    /// Extended key usage OIDs, if the extension is present.
    pub fn extended_key_usage(&self) -> Option<&[ObjectIdentifier]> {
        self.0.extended_key_usage.as_deref()
    }
    /// Whether extendedKeyUsage is absent or contains `oid`.
    pub fn allows_extended_usage(&self, oid: ObjectIdentifier) -> bool {
        match &self.0.extended_key_usage {
            None => true,
            Some(list) => list.contains(&oid),
        }
    }
    /// basicConstraints cA, if the extension is present.
    pub fn is_ca(&self) -> Option<bool> {
        self.0.is_ca
    }
    /// Subject key identifier.
    pub fn subject_key_id(&self) -> Option<&[u8]> {
        self.0.subject_key_id.as_deref()
    }
    /// Authority key identifier (keyIdentifier field).
    pub fn authority_key_id(&self) -> Option<&[u8]> {
        self.0.authority_key_id.as_deref()
    }
    /// Subject equals issuer.
    pub fn is_self_issued(&self) -> bool {
        self.0.subject_der == self.0.issuer_der
    }
    /// Whether the certificate names `hostname` in its subjectAltName (DNS, case-insensitive, or IP).
    pub fn has_host(&self, hostname: &str) -> bool {
        if let Ok(ip) = hostname.parse::<IpAddr>() {
            return self.0.ip_addresses.contains(&ip);
        }
        self.0
            .dns_names
            .iter()
            .any(|d| d.eq_ignore_ascii_case(hostname))
    }

    /// Verifies that `issuer`'s key signed this certificate. Only SHA-2 RSA signatures and
    /// ECDSA with SHA-256/SHA-384 by a key on one of the four curves are accepted; SHA-1 gives
    /// `BadCertificatePolicyCheckFailed`, a bad signature `BadCertificateInvalid`.
    pub fn verify_signed_by(&self, issuer: &Certificate) -> Result<(), u32> {
        if matches!(
            self.0.signature_alg,
            CertSignatureAlg::EcdsaSha256 | CertSignatureAlg::EcdsaSha384
        ) {
            return verify_ecdsa_signature(
                self.0.signature_alg,
                issuer,
                self.tbs_der(),
                &self.0.signature,
            );
        }
        verify_rsa_signature(
            self.0.signature_alg,
            issuer.rsa_public_key(),
            self.tbs_der(),
            &self.0.signature,
        )
    }
}

/// Verifies an X.509-style signature (certificate or CRL) with an RSA public key.
pub(crate) fn verify_rsa_signature(
    alg: CertSignatureAlg,
    rsa_public_key: &[u8],
    signed: &[u8],
    signature: &[u8],
) -> Result<(), u32> {
    use aws_lc_rs::signature as sig;
    let candidates: &[&'static dyn sig::VerificationAlgorithm] = match alg {
        CertSignatureAlg::RsaSha1
        | CertSignatureAlg::Other
        | CertSignatureAlg::EcdsaSha256
        | CertSignatureAlg::EcdsaSha384 => return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED),
        CertSignatureAlg::RsaSha256 => &[&sig::RSA_PKCS1_2048_8192_SHA256],
        CertSignatureAlg::RsaSha384 => &[&sig::RSA_PKCS1_2048_8192_SHA384],
        CertSignatureAlg::RsaSha512 => &[&sig::RSA_PKCS1_2048_8192_SHA512],
        // The PSS parameters name the hash; all three are acceptable, so try each.
        CertSignatureAlg::RsaPss => &[
            &sig::RSA_PSS_2048_8192_SHA256,
            &sig::RSA_PSS_2048_8192_SHA384,
            &sig::RSA_PSS_2048_8192_SHA512,
        ],
    };
    for alg in candidates {
        if sig::UnparsedPublicKey::new(*alg, rsa_public_key)
            .verify(signed, signature)
            .is_ok()
        {
            return Ok(());
        }
    }
    Err(status::BAD_CERTIFICATE_INVALID)
}

/// Verifies an X.509 ECDSA signature (certificate or CRL; DER `r`, `s`) with the EC key of
/// `issuer`.
pub(crate) fn verify_ecdsa_signature(
    alg: CertSignatureAlg,
    issuer: &Certificate,
    signed: &[u8],
    signature: &[u8],
) -> Result<(), u32> {
    use crate::ecc::EccCurve;
    use aws_lc_rs::signature as sig;
    let (Some(curve), Some(point)) = (issuer.ec_curve(), issuer.ec_public_point()) else {
        return Err(status::BAD_CERTIFICATE_INVALID);
    };
    let alg: &'static dyn sig::VerificationAlgorithm = match (curve, alg) {
        (EccCurve::NistP256, CertSignatureAlg::EcdsaSha256) => &sig::ECDSA_P256_SHA256_ASN1,
        (EccCurve::NistP256, CertSignatureAlg::EcdsaSha384) => &sig::ECDSA_P256_SHA384_ASN1,
        (EccCurve::NistP384, CertSignatureAlg::EcdsaSha256) => &sig::ECDSA_P384_SHA256_ASN1,
        (EccCurve::NistP384, CertSignatureAlg::EcdsaSha384) => &sig::ECDSA_P384_SHA384_ASN1,
        (EccCurve::BrainpoolP256r1 | EccCurve::BrainpoolP384r1, alg) => {
            return crate::cert_build::verify_brainpool(curve, alg, point, signed, signature)
        }
        _ => return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED),
    };
    sig::UnparsedPublicKey::new(alg, point)
        .verify(signed, signature)
        .map_err(|_| status::BAD_CERTIFICATE_INVALID)
}

/// What goes into a generated application instance certificate.
#[derive(Clone, Debug)]
pub struct CertificateRequest {
    /// ApplicationUri: the subjectAltName URI.
    pub application_uri: String,
    /// Subject CN (the application name).
    pub common_name: String,
    /// Subject O.
    pub organization: String,
    /// DNS names for subjectAltName (the host name).
    pub dns_names: Vec<String>,
    /// IP addresses for subjectAltName.
    pub ip_addresses: Vec<IpAddr>,
    /// notBefore, Unix seconds (usually now minus a little clock skew).
    pub not_before_unix_s: i64,
    /// Validity in days.
    pub validity_days: u32,
    /// RSA key size in bits (2048 default).
    pub key_bits: usize,
}

impl CertificateRequest {
    /// A request with the defaults: RSA-2048, 5 years, organization "uaring".
    pub fn new(application_uri: &str, common_name: &str, now_unix_s: i64) -> Self {
        CertificateRequest {
            application_uri: application_uri.to_string(),
            common_name: common_name.to_string(),
            organization: "uaring".to_string(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            not_before_unix_s: now_unix_s - 3600,
            validity_days: 5 * 365,
            key_bits: 2048,
        }
    }
}

/// Generates a self-signed application instance certificate and its key (OPC 10000-6 §6.2.2):
/// RSA with sha256WithRSAEncryption; subjectAltName URI + DNS + IP; keyUsage digitalSignature,
/// nonRepudiation, keyEncipherment, dataEncipherment, keyCertSign; extendedKeyUsage serverAuth +
/// clientAuth; basicConstraints cA=false; subject and authority key identifiers.
pub fn generate_self_signed(req: &CertificateRequest) -> Result<(Certificate, PrivateKey), u32> {
    let key = PrivateKey::generate(req.key_bits)?;
    let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(key.to_pkcs8_der());
    let kp = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256)
        .map_err(|_| status::BAD_INTERNAL_ERROR)?;
    let der = self_signed_der(req, &kp, key.public_key_pkcs1(), false)?;
    let cert = Certificate::from_der(&der)?;
    Ok((cert, key))
}

/// Generates a self-signed ECC application instance certificate (OPC 10000-6 §6.2.2 with the
/// ECC certificate types of OPC 10000-12: EccNistP256ApplicationCertificateType,
/// EccNistP384ApplicationCertificateType, the Brainpool ones) and its key: ecdsa-with-SHA256
/// (256-bit curves) or ecdsa-with-SHA384 (384-bit); keyUsage digitalSignature, nonRepudiation, keyAgreement,
/// keyCertSign (no keyEncipherment: an EC key does not encrypt); the rest as for RSA.
pub fn generate_self_signed_ecc(
    req: &CertificateRequest,
    curve: crate::ecc::EccCurve,
) -> Result<(Certificate, crate::ecc::EccPrivateKey), u32> {
    let key = crate::ecc::EccPrivateKey::generate(curve)?;
    let der = match rcgen_ecdsa(curve) {
        Some(alg) => {
            let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(key.to_pkcs8_der());
            let kp = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, alg)
                .map_err(|_| status::BAD_INTERNAL_ERROR)?;
            self_signed_der(req, &kp, key.public_point(), true)?
        }
        // rcgen has no Brainpool algorithm: built from x509-cert's types.
        None => crate::cert_build::self_signed_der(req, &key)?,
    };
    let cert = Certificate::from_der(&der)?;
    if !key.matches(&cert) {
        return Err(status::BAD_INTERNAL_ERROR);
    }
    Ok((cert, key))
}

/// The DER of a self-signed certificate for `req` signed by `kp`; `public_key` is the
/// subjectPublicKey (the key identifiers are its SHA-1).
fn self_signed_der(
    req: &CertificateRequest,
    kp: &rcgen::KeyPair,
    public_key: &[u8],
    ecc: bool,
) -> Result<Vec<u8>, u32> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyIdMethod,
        KeyUsagePurpose, SanType,
    };
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, req.common_name.as_str());
    dn.push(DnType::OrganizationName, req.organization.as_str());
    params.distinguished_name = dn;
    let uri = rcgen::Ia5String::try_from(req.application_uri.as_str())
        .map_err(|_| status::BAD_INVALID_ARGUMENT)?;
    params.subject_alt_names.push(SanType::URI(uri));
    for d in &req.dns_names {
        let d = rcgen::Ia5String::try_from(d.as_str()).map_err(|_| status::BAD_INVALID_ARGUMENT)?;
        params.subject_alt_names.push(SanType::DnsName(d));
    }
    for ip in &req.ip_addresses {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.not_before = time::OffsetDateTime::from_unix_timestamp(req.not_before_unix_s)
        .map_err(|_| status::BAD_INVALID_ARGUMENT)?;
    params.not_after = params.not_before + time::Duration::days(i64::from(req.validity_days));
    let mut serial = [0u8; 16];
    crate::asymmetric::random_bytes(&mut serial)?;
    serial[0] &= 0x7f;
    serial[0] |= 0x01;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    params.key_usages = if ecc {
        vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::ContentCommitment,
            KeyUsagePurpose::KeyAgreement,
            KeyUsagePurpose::KeyCertSign,
        ]
    } else {
        vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::ContentCommitment,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::DataEncipherment,
            KeyUsagePurpose::KeyCertSign,
        ]
    };
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    // basicConstraints with cA = FALSE, encoded as DER requires: an empty SEQUENCE (a
    // DEFAULT value is never encoded). rcgen's ExplicitNoCa writes `cA FALSE`, which
    // strict parsers (Python cryptography, used by asyncua) reject.
    params.is_ca = IsCa::NoCa;
    let mut bc = rcgen::CustomExtension::from_oid_content(&[2, 5, 29, 19], vec![0x30, 0x00]);
    bc.set_criticality(true);
    params.custom_extensions.push(bc);
    // With NoCa rcgen writes no subjectKeyIdentifier: write it (RFC 5280 method 1, SHA-1
    // of the subjectPublicKey) and use the same value as authorityKeyIdentifier, which is
    // how node-opcua recognises a self-signed certificate.
    let ski: Vec<u8> = {
        use sha1::Digest;
        sha1::Sha1::digest(public_key).to_vec()
    };
    let mut ski_ext = vec![0x04, ski.len() as u8];
    ski_ext.extend_from_slice(&ski);
    params
        .custom_extensions
        .push(rcgen::CustomExtension::from_oid_content(
            &[2, 5, 29, 14],
            ski_ext,
        ));
    params.key_identifier_method = KeyIdMethod::PreSpecified(ski);
    params.use_authority_key_identifier_extension = true;
    let cert = params
        .self_signed(kp)
        .map_err(|_| status::BAD_INTERNAL_ERROR)?;
    Ok(cert.der().to_vec())
}

/// PEM (`CERTIFICATE`) encoding of a DER certificate.
pub fn to_pem(der: &[u8]) -> String {
    pem::encode(&pem::Pem::new("CERTIFICATE", der.to_vec()))
}

/// The most characters of a subject name a signing request accepts.
pub const SUBJECT_NAME_CHARS_MAX: usize = 1024;

/// What a certificate signing request (PKCS#10, OPC 10000-12 CreateSigningRequest) asks for.
#[derive(Clone, Debug, Default)]
pub struct SigningRequest {
    /// The subject, as `CN=…, O=…` (or `/CN=…/O=…`); empty: CN = `common_name`.
    pub subject: String,
    /// The CN used when `subject` is empty.
    pub common_name: String,
    /// subjectAltName URI: the ApplicationUri ("" for none).
    pub application_uri: String,
    /// subjectAltName DNS names.
    pub dns_names: Vec<String>,
    /// subjectAltName IP addresses.
    pub ip_addresses: Vec<IpAddr>,
}

/// An attribute type of a subject name a signing request may give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DnKind {
    Cn,
    O,
    Ou,
    C,
    St,
    L,
    Dc,
}

impl DnKind {
    /// The attribute type's OID.
    pub(crate) fn oid(self) -> ObjectIdentifier {
        match self {
            DnKind::Cn => ObjectIdentifier::new_unwrap("2.5.4.3"),
            DnKind::O => ObjectIdentifier::new_unwrap("2.5.4.10"),
            DnKind::Ou => ObjectIdentifier::new_unwrap("2.5.4.11"),
            DnKind::C => ObjectIdentifier::new_unwrap("2.5.4.6"),
            DnKind::St => ObjectIdentifier::new_unwrap("2.5.4.8"),
            DnKind::L => ObjectIdentifier::new_unwrap("2.5.4.7"),
            DnKind::Dc => ObjectIdentifier::new_unwrap("0.9.2342.19200300.100.1.25"),
        }
    }

    fn rcgen(self) -> rcgen::DnType {
        use rcgen::DnType;
        match self {
            DnKind::Cn => DnType::CommonName,
            DnKind::O => DnType::OrganizationName,
            DnKind::Ou => DnType::OrganizationalUnitName,
            DnKind::C => DnType::CountryName,
            DnKind::St => DnType::StateOrProvinceName,
            DnKind::L => DnType::LocalityName,
            DnKind::Dc => DnType::CustomDnType(vec![0, 9, 2342, 19200300, 100, 1, 25]),
        }
    }
}

/// Parses `CN=a, O=b` or `/CN=a/O=b` (CN, O, OU, C, ST, L, DC), in order.
pub(crate) fn subject_attributes(subject: &str) -> Result<Vec<(DnKind, String)>, u32> {
    if subject.chars().count() > SUBJECT_NAME_CHARS_MAX {
        return Err(status::BAD_INVALID_ARGUMENT);
    }
    let sep = if subject.trim_start().starts_with('/') {
        '/'
    } else {
        ','
    };
    let mut out = Vec::new();
    for part in subject.split(sep).map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part.split_once('=').ok_or(status::BAD_INVALID_ARGUMENT)?;
        let v = v.trim().trim_matches('"');
        if v.is_empty() {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        let kind = match k.trim().to_ascii_uppercase().as_str() {
            "CN" => DnKind::Cn,
            "O" => DnKind::O,
            "OU" => DnKind::Ou,
            "C" => DnKind::C,
            "ST" | "S" => DnKind::St,
            "L" => DnKind::L,
            "DC" => DnKind::Dc,
            _ => return Err(status::BAD_INVALID_ARGUMENT),
        };
        out.push((kind, v.to_owned()));
    }
    if out.is_empty() {
        return Err(status::BAD_INVALID_ARGUMENT);
    }
    Ok(out)
}

/// [`subject_attributes`] as an rcgen name.
fn parse_subject(subject: &str) -> Result<rcgen::DistinguishedName, u32> {
    let mut dn = rcgen::DistinguishedName::new();
    for (kind, v) in subject_attributes(subject)? {
        dn.push(kind.rcgen(), v);
    }
    Ok(dn)
}

/// A PKCS#10 certificate signing request (DER) for an RSA key: the subject, the
/// subjectAltName (URI, DNS, IP), keyUsage and extendedKeyUsage as a generated application
/// instance certificate has them, signed with `key` (sha256WithRSAEncryption). A subject that
/// does not parse is BadInvalidArgument.
pub fn signing_request_der(req: &SigningRequest, key: &PrivateKey) -> Result<Vec<u8>, u32> {
    let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(key.to_pkcs8_der());
    let kp = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_RSA_SHA256)
        .map_err(|_| status::BAD_INTERNAL_ERROR)?;
    signing_request_with(req, &kp, false)
}

/// [`signing_request_der`] for an ECC key (ecdsa-with-SHA256 for the 256-bit curves, -SHA384
/// for the 384-bit ones;
/// keyUsage digitalSignature, nonRepudiation and keyAgreement, as the ECC certificate types
/// have it).
pub fn signing_request_der_ecc(
    req: &SigningRequest,
    key: &crate::ecc::EccPrivateKey,
) -> Result<Vec<u8>, u32> {
    let Some(alg) = rcgen_ecdsa(key.curve()) else {
        return crate::cert_build::signing_request_der(req, key);
    };
    let pkcs8 = rustls_pki_types::PrivatePkcs8KeyDer::from(key.to_pkcs8_der());
    let kp = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, alg)
        .map_err(|_| status::BAD_INTERNAL_ERROR)?;
    signing_request_with(req, &kp, true)
}

/// rcgen's ECDSA algorithm of a NIST curve; `None` for the Brainpool curves.
fn rcgen_ecdsa(curve: crate::ecc::EccCurve) -> Option<&'static rcgen::SignatureAlgorithm> {
    match curve {
        crate::ecc::EccCurve::NistP256 => Some(&rcgen::PKCS_ECDSA_P256_SHA256),
        crate::ecc::EccCurve::NistP384 => Some(&rcgen::PKCS_ECDSA_P384_SHA384),
        _ => None,
    }
}

fn signing_request_with(
    req: &SigningRequest,
    kp: &rcgen::KeyPair,
    ecc: bool,
) -> Result<Vec<u8>, u32> {
    use rcgen::{
        CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, KeyUsagePurpose,
        SanType,
    };
    let mut params = CertificateParams::default();
    params.distinguished_name = if req.subject.trim().is_empty() {
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, req.common_name.as_str());
        dn
    } else {
        parse_subject(&req.subject)?
    };
    if !req.application_uri.is_empty() {
        let uri = rcgen::Ia5String::try_from(req.application_uri.as_str())
            .map_err(|_| status::BAD_INVALID_ARGUMENT)?;
        params.subject_alt_names.push(SanType::URI(uri));
    }
    for d in &req.dns_names {
        let d = rcgen::Ia5String::try_from(d.as_str()).map_err(|_| status::BAD_INVALID_ARGUMENT)?;
        params.subject_alt_names.push(SanType::DnsName(d));
    }
    for ip in &req.ip_addresses {
        params.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    params.key_usages = if ecc {
        vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::ContentCommitment,
            KeyUsagePurpose::KeyAgreement,
        ]
    } else {
        vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::ContentCommitment,
            KeyUsagePurpose::KeyEncipherment,
            KeyUsagePurpose::DataEncipherment,
        ]
    };
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let csr = params
        .serialize_request(kp)
        .map_err(|_| status::BAD_INTERNAL_ERROR)?;
    Ok(csr.der().to_vec())
}

#[cfg(test)]
mod signing_request_tests {
    use super::*;

    #[test]
    fn a_signing_request_parses_and_carries_the_key_and_the_subject() {
        let key = PrivateKey::generate(2048).unwrap();
        let req = SigningRequest {
            subject: "CN=uaring push, O=plant".into(),
            common_name: "unused".into(),
            application_uri: "urn:x:y".into(),
            dns_names: vec!["host".into()],
            ip_addresses: vec![IpAddr::from([127, 0, 0, 1])],
        };
        let der = signing_request_der(&req, &key).unwrap();
        let csr = x509_cert::request::CertReq::from_der(&der).unwrap();
        let subject = csr.info.subject.to_string();
        assert!(subject.contains("CN=uaring push"), "{subject}");
        assert!(subject.contains("O=plant"), "{subject}");
        let spki = csr.info.public_key.subject_public_key.raw_bytes();
        assert_eq!(spki, key.public_key_pkcs1());
        for curve in crate::ecc::EccCurve::ALL {
            let ec = crate::ecc::EccPrivateKey::generate(curve).unwrap();
            let der = signing_request_der_ecc(&req, &ec).unwrap();
            let csr = x509_cert::request::CertReq::from_der(&der).unwrap();
            assert_eq!(
                csr.info.public_key.subject_public_key.raw_bytes(),
                ec.public_point()
            );
            let subject = csr.info.subject.to_string();
            assert!(subject.contains("CN=uaring push"), "{curve:?}: {subject}");
            assert_eq!(
                csr.info.attributes.len(),
                1,
                "{curve:?}: the extensionRequest"
            );
        }
        for bad in ["CN", "XX=1", "CN=", ""] {
            let r = SigningRequest {
                subject: bad.into(),
                ..req.clone()
            };
            if bad.is_empty() {
                assert!(signing_request_der(&r, &key).is_ok());
            } else {
                assert_eq!(
                    signing_request_der(&r, &key),
                    Err(status::BAD_INVALID_ARGUMENT),
                    "{bad}"
                );
            }
        }
    }
}
