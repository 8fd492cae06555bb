//! The cryptography of the ECC security policies ECC_nistP256, ECC_nistP384,
//! ECC_brainpoolP256r1 and ECC_brainpoolP384r1 (OPC 10000-7; OPC 10000-6 §6.8.1 for the key
//! derivation, §6.7.2 for the chunk layout). The two 256-bit curves share every length and
//! algorithm but the curve, and so do the two 384-bit ones.
//!
//! - Ephemeral keys ([`EphemeralKey`]): the OpenSecureChannel nonces are the two sides'
//!   ephemeral ECDH public keys, the uncompressed point without its `0x04` prefix (`x ‖ y`,
//!   64 bytes for the 256-bit curves, 96 for the 384-bit ones).
//! - Key derivation ([`derive_ecc_keys`]): the ECDH shared secret (the x coordinate) is the
//!   HKDF input key material; for the keys a client secures its chunks with, the salt (and the
//!   HKDF info) is `L ‖ "opcua-client" ‖ ClientNonce ‖ ServerNonce`, for the server's
//!   `L ‖ "opcua-server" ‖ ServerNonce ‖ ClientNonce`, where `L` is the length of the key
//!   material as a little-endian UInt16: signing key + encrypting key + IV in SignAndEncrypt,
//!   the signing key alone in Sign. HKDF-SHA256 for the 256-bit curves, HKDF-SHA384 for the
//!   384-bit ones.
//! - Symmetric chunk security ([`EccSymmetricKeys`]): HMAC-SHA256 + AES-128-CBC (256 bits),
//!   HMAC-SHA384 + AES-256-CBC (384 bits), in place, without allocation.
//! - Asymmetric signatures ([`EccPrivateKey`], [`ecdsa_verify`]): ECDSA with SHA-256 / SHA-384,
//!   the signature as the fixed-length `r ‖ s` (64 / 96 bytes). OpenSecureChannel chunks are
//!   signed, never encrypted, in both Sign and SignAndEncrypt.
//!
//! Crate choice: aws-lc-rs (already the RSA engine here) for ECDH (`agreement`), ECDSA
//! (`signature`) and HKDF (`hkdf`): AWS-LC's P-256 and P-384 implementations are constant
//! time, maintained (AWS's fork of BoringSSL), FIPS-validated, and no new dependency. HMAC and
//! AES-CBC are RustCrypto's, as for the RSA policies. aws-lc-rs has no Brainpool curve: those
//! run on RustCrypto's `bp256` / `bp384` 0.14 with `ecdsa` 0.17 ([`crate::brainpool`] says why
//! and at what cost: fiat-crypto field arithmetic, complete formulas and constant-time
//! scalar multiplication, but no audit, few users, and about ten times AWS-LC's time per
//! operation); they are offered because open62541's client (Mbed TLS) proves them against the
//! real binary in the test suite, and only where their certificate exists. HKDF is AWS-LC's
//! for every curve (it depends on the hash only). curve25519/curve448 are left out:
//! open62541's Mbed TLS build has no policy for them, so no client here could prove them.

use aws_lc_rs::agreement;
use aws_lc_rs::hkdf;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{self, EcdsaKeyPair, KeyPair as _};
use zeroize::Zeroizing;

use crate::cert::Certificate;
use crate::policy::AES_BLOCK_SIZE;
use crate::status;
use crate::symmetric::{ChunkKeys, MacHash};

const URI_PREFIX: &str = "http://opcfoundation.org/UA/SecurityPolicy#";

/// `AsymmetricSignatureAlgorithm` URI of ECDSA-SHA256 (ECC_nistP256).
pub const URI_ECDSA_SHA256: &str = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha256";
/// `AsymmetricSignatureAlgorithm` URI of ECDSA-SHA384 (ECC_nistP384).
pub const URI_ECDSA_SHA384: &str = "http://www.w3.org/2001/04/xmldsig-more#ecdsa-sha384";

/// A curve of an ECC security policy, which names the policy too.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EccCurve {
    /// NIST P-256 (secp256r1): `…#ECC_nistP256`.
    NistP256,
    /// NIST P-384 (secp384r1): `…#ECC_nistP384`.
    NistP384,
    /// brainpoolP256r1 (RFC 5639): `…#ECC_brainpoolP256r1`.
    BrainpoolP256r1,
    /// brainpoolP384r1 (RFC 5639): `…#ECC_brainpoolP384r1`.
    BrainpoolP384r1,
}

impl EccCurve {
    /// Every curve this crate runs.
    pub const ALL: [EccCurve; 4] = [
        EccCurve::NistP256,
        EccCurve::NistP384,
        EccCurve::BrainpoolP256r1,
        EccCurve::BrainpoolP384r1,
    ];

    /// The policy's short name, `ECC_nistP256`, `ECC_brainpoolP384r1`, ….
    pub fn policy_name(self) -> &'static str {
        match self {
            EccCurve::NistP256 => "ECC_nistP256",
            EccCurve::NistP384 => "ECC_nistP384",
            EccCurve::BrainpoolP256r1 => "ECC_brainpoolP256r1",
            EccCurve::BrainpoolP384r1 => "ECC_brainpoolP384r1",
        }
    }

    /// The SecurityPolicyUri.
    pub fn policy_uri(self) -> &'static str {
        match self {
            EccCurve::NistP256 => "http://opcfoundation.org/UA/SecurityPolicy#ECC_nistP256",
            EccCurve::NistP384 => "http://opcfoundation.org/UA/SecurityPolicy#ECC_nistP384",
            EccCurve::BrainpoolP256r1 => {
                "http://opcfoundation.org/UA/SecurityPolicy#ECC_brainpoolP256r1"
            }
            EccCurve::BrainpoolP384r1 => {
                "http://opcfoundation.org/UA/SecurityPolicy#ECC_brainpoolP384r1"
            }
        }
    }

    /// The certificate type name (`uaring cert generate --type`): `nistP256`, `nistP384`,
    /// `brainpoolP256r1`, `brainpoolP384r1`.
    pub fn type_name(self) -> &'static str {
        match self {
            EccCurve::NistP256 => "nistP256",
            EccCurve::NistP384 => "nistP384",
            EccCurve::BrainpoolP256r1 => "brainpoolP256r1",
            EccCurve::BrainpoolP384r1 => "brainpoolP384r1",
        }
    }

    /// Whether the curve is 384 bits long (SHA-384, AES-256 and HMAC-SHA384 with it).
    fn is_384(self) -> bool {
        matches!(self, EccCurve::NistP384 | EccCurve::BrainpoolP384r1)
    }

    /// The Brainpool curve, run by [`crate::brainpool`]; `None` for the NIST curves
    /// (aws-lc-rs).
    fn brainpool(self) -> Option<crate::brainpool::Bp> {
        match self {
            EccCurve::BrainpoolP256r1 => Some(crate::brainpool::Bp::P256),
            EccCurve::BrainpoolP384r1 => Some(crate::brainpool::Bp::P384),
            _ => None,
        }
    }

    /// The curve of a policy URI, of a policy name (`ECC_nistP256`) or of a certificate type
    /// name (`nistP256`).
    pub fn from_name(name: &str) -> Option<EccCurve> {
        let n = name.strip_prefix(URI_PREFIX).unwrap_or(name);
        let n = n.strip_prefix("ECC_").unwrap_or(n);
        EccCurve::ALL.into_iter().find(|c| c.type_name() == n)
    }

    /// Bytes of one coordinate (and of the ECDH shared secret).
    pub fn coordinate_len(self) -> usize {
        if self.is_384() {
            48
        } else {
            32
        }
    }

    /// OpenSecureChannel nonce length: an ephemeral public key `x ‖ y`.
    pub fn nonce_len(self) -> usize {
        2 * self.coordinate_len()
    }

    /// ECDSA signature length (`r ‖ s`).
    pub fn signature_len(self) -> usize {
        2 * self.coordinate_len()
    }

    /// Derived symmetric key lengths: (signing key, encrypting key, IV).
    pub fn symmetric_key_lens(self) -> (usize, usize, usize) {
        if self.is_384() {
            (48, 32, AES_BLOCK_SIZE)
        } else {
            (32, 16, AES_BLOCK_SIZE)
        }
    }

    /// Symmetric signature (HMAC) length.
    pub fn symmetric_signature_len(self) -> usize {
        if self.is_384() {
            48
        } else {
            32
        }
    }

    /// The `AsymmetricSignatureAlgorithm` URI.
    pub fn signature_algorithm_uri(self) -> &'static str {
        if self.is_384() {
            URI_ECDSA_SHA384
        } else {
            URI_ECDSA_SHA256
        }
    }

    /// The named-curve OID of a certificate's key.
    pub fn oid(self) -> const_oid::ObjectIdentifier {
        match self {
            EccCurve::NistP256 => const_oid::db::rfc5912::SECP_256_R_1,
            EccCurve::NistP384 => const_oid::db::rfc5912::SECP_384_R_1,
            EccCurve::BrainpoolP256r1 => {
                const_oid::ObjectIdentifier::new_unwrap("1.3.36.3.3.2.8.1.1.7")
            }
            EccCurve::BrainpoolP384r1 => {
                const_oid::ObjectIdentifier::new_unwrap("1.3.36.3.3.2.8.1.1.11")
            }
        }
    }

    /// The curve of a named-curve OID.
    pub fn from_oid(oid: &const_oid::ObjectIdentifier) -> Option<EccCurve> {
        EccCurve::ALL.into_iter().find(|c| c.oid() == *oid)
    }

    /// aws-lc-rs's ECDH of a NIST curve.
    fn ecdh(self) -> Option<&'static agreement::Algorithm> {
        match self {
            EccCurve::NistP256 => Some(&agreement::ECDH_P256),
            EccCurve::NistP384 => Some(&agreement::ECDH_P384),
            _ => None,
        }
    }

    /// aws-lc-rs's ECDSA signing of a NIST curve.
    fn signing(self) -> Option<&'static signature::EcdsaSigningAlgorithm> {
        match self {
            EccCurve::NistP256 => Some(&signature::ECDSA_P256_SHA256_FIXED_SIGNING),
            EccCurve::NistP384 => Some(&signature::ECDSA_P384_SHA384_FIXED_SIGNING),
            _ => None,
        }
    }

    /// aws-lc-rs's ECDSA verification of a NIST curve.
    fn verification(self) -> Option<&'static signature::EcdsaVerificationAlgorithm> {
        match self {
            EccCurve::NistP256 => Some(&signature::ECDSA_P256_SHA256_FIXED),
            EccCurve::NistP384 => Some(&signature::ECDSA_P384_SHA384_FIXED),
            _ => None,
        }
    }

    fn hkdf(self) -> hkdf::Algorithm {
        if self.is_384() {
            hkdf::HKDF_SHA384
        } else {
            hkdf::HKDF_SHA256
        }
    }
}

/// An ECC application instance key (ECDSA), PKCS#8.
pub struct EccPrivateKey {
    curve: EccCurve,
    pair: KeyPair,
    pkcs8: Zeroizing<Vec<u8>>,
}

/// The key of a NIST curve (aws-lc-rs) or of a Brainpool curve (RustCrypto) with its public
/// point.
enum KeyPair {
    Aws(EcdsaKeyPair),
    Brainpool(crate::brainpool::BpSigningKey, Vec<u8>),
}

impl std::fmt::Debug for EccPrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EccPrivateKey")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

impl EccPrivateKey {
    /// A fresh key on `curve`.
    pub fn generate(curve: EccCurve) -> Result<Self, u32> {
        if let Some(bp) = curve.brainpool() {
            let (_, der) = crate::brainpool::BpSigningKey::generate(bp)?;
            return Self::from_pkcs8_der(&der);
        }
        let alg = curve.signing().ok_or(status::BAD_INTERNAL_ERROR)?;
        let doc = EcdsaKeyPair::generate_pkcs8(alg, &SystemRandom::new())
            .map_err(|_| status::BAD_INTERNAL_ERROR)?;
        Self::from_pkcs8_der(doc.as_ref())
    }

    /// Parses a PKCS#8 DER key of any curve.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, u32> {
        for curve in EccCurve::ALL {
            let Some(alg) = curve.signing() else {
                continue;
            };
            if let Ok(pair) = EcdsaKeyPair::from_pkcs8(alg, der) {
                return Ok(EccPrivateKey {
                    curve,
                    pair: KeyPair::Aws(pair),
                    pkcs8: Zeroizing::new(der.to_vec()),
                });
            }
        }
        if let Some(key) = crate::brainpool::BpSigningKey::from_pkcs8_der(der) {
            let curve = match key.curve() {
                crate::brainpool::Bp::P256 => EccCurve::BrainpoolP256r1,
                crate::brainpool::Bp::P384 => EccCurve::BrainpoolP384r1,
            };
            let point = key.public_point();
            return Ok(EccPrivateKey {
                curve,
                pair: KeyPair::Brainpool(key, point),
                pkcs8: Zeroizing::new(der.to_vec()),
            });
        }
        Err(status::BAD_CERTIFICATE_INVALID)
    }

    /// Parses a PEM (`PRIVATE KEY`) or DER PKCS#8 key.
    pub fn from_pem_or_der(bytes: &[u8]) -> Result<Self, u32> {
        match pem::parse(bytes) {
            Ok(p) if p.tag() == "PRIVATE KEY" => {
                let der = Zeroizing::new(p.into_contents());
                Self::from_pkcs8_der(&der)
            }
            Ok(_) => Err(status::BAD_CERTIFICATE_INVALID),
            Err(_) => Self::from_pkcs8_der(bytes),
        }
    }

    /// The curve.
    pub fn curve(&self) -> EccCurve {
        self.curve
    }

    /// PKCS#8 DER.
    pub fn to_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// PKCS#8 PEM.
    pub fn to_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(pem::encode(&pem::Pem::new(
            "PRIVATE KEY",
            self.pkcs8.to_vec(),
        )))
    }

    /// The public key as an uncompressed point (`04 ‖ x ‖ y`).
    pub fn public_point(&self) -> &[u8] {
        match &self.pair {
            KeyPair::Aws(pair) => pair.public_key().as_ref(),
            KeyPair::Brainpool(_, point) => point,
        }
    }

    /// Whether `cert` carries this key's public key.
    pub fn matches(&self, cert: &Certificate) -> bool {
        cert.ec_curve() == Some(self.curve) && cert.ec_public_point() == Some(self.public_point())
    }

    /// ECDSA signature (`r ‖ s`) over `data` into `out` (`out.len()` = the curve's
    /// [`EccCurve::signature_len`]).
    pub fn sign_into(&self, data: &[u8], out: &mut [u8]) -> Result<(), u32> {
        let put = |sig: &[u8], out: &mut [u8]| {
            if sig.len() != out.len() {
                return Err(status::BAD_INTERNAL_ERROR);
            }
            out.copy_from_slice(sig);
            Ok(())
        };
        match &self.pair {
            KeyPair::Aws(pair) => {
                let sig = pair
                    .sign(&SystemRandom::new(), data)
                    .map_err(|_| status::BAD_INTERNAL_ERROR)?;
                put(sig.as_ref(), out)
            }
            KeyPair::Brainpool(key, _) => put(&key.sign_fixed(data), out),
        }
    }

    /// ECDSA over an already computed `digest`, DER-encoded (certificates and signing
    /// requests of a Brainpool key; `None` for a NIST key, which rcgen signs).
    pub(crate) fn sign_prehash_der(&self, digest: &[u8]) -> Option<Result<Vec<u8>, u32>> {
        match &self.pair {
            KeyPair::Aws(_) => None,
            KeyPair::Brainpool(key, _) => Some(key.sign_prehash_der(digest)),
        }
    }

    /// ECDSA signature (`r ‖ s`) over `data`.
    pub fn sign(&self, data: &[u8]) -> Result<Vec<u8>, u32> {
        let mut out = vec![0u8; self.curve.signature_len()];
        self.sign_into(data, &mut out)?;
        Ok(out)
    }
}

/// Verifies an ECDSA signature (`r ‖ s`) by the key of `signer` on `curve`. A certificate
/// whose key is not on `curve` gives `BadCertificatePolicyCheckFailed`; a wrong signature
/// `BadSecurityChecksFailed`.
pub fn ecdsa_verify(
    curve: EccCurve,
    signer: &Certificate,
    data: &[u8],
    sig: &[u8],
) -> Result<(), u32> {
    if signer.ec_curve() != Some(curve) {
        return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED);
    }
    let point = signer
        .ec_public_point()
        .ok_or(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED)?;
    if sig.len() != curve.signature_len() {
        return Err(status::BAD_SECURITY_CHECKS_FAILED);
    }
    match (curve.verification(), curve.brainpool()) {
        (Some(alg), _) => signature::UnparsedPublicKey::new(alg, point)
            .verify(data, sig)
            .map_err(|_| status::BAD_SECURITY_CHECKS_FAILED),
        (None, Some(bp)) if crate::brainpool::verify_fixed(bp, point, data, sig) => Ok(()),
        _ => Err(status::BAD_SECURITY_CHECKS_FAILED),
    }
}

/// One side's ephemeral ECDH key of an OpenSecureChannel: its public half is the nonce.
pub struct EphemeralKey {
    curve: EccCurve,
    key: EphemeralSecret,
    nonce: Vec<u8>,
}

/// The private half: aws-lc-rs's (NIST) or RustCrypto's (Brainpool).
enum EphemeralSecret {
    Aws(agreement::PrivateKey),
    Brainpool(crate::brainpool::BpScalar),
}

impl std::fmt::Debug for EphemeralKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EphemeralKey")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

impl EphemeralKey {
    /// A fresh key pair.
    pub fn generate(curve: EccCurve) -> Result<Self, u32> {
        match (curve.ecdh(), curve.brainpool()) {
            (Some(alg), _) => {
                let key =
                    agreement::PrivateKey::generate(alg).map_err(|_| status::BAD_INTERNAL_ERROR)?;
                Self::from_key(curve, EphemeralSecret::Aws(key))
            }
            (None, Some(bp)) => Self::from_key(
                curve,
                EphemeralSecret::Brainpool(crate::brainpool::BpScalar::generate(bp)),
            ),
            (None, None) => Err(status::BAD_INTERNAL_ERROR),
        }
    }

    /// A key pair from its private scalar (big-endian, the coordinate length): known-answer
    /// tests.
    pub fn from_scalar(curve: EccCurve, scalar: &[u8]) -> Result<Self, u32> {
        let key = match (curve.ecdh(), curve.brainpool()) {
            (Some(alg), _) => EphemeralSecret::Aws(
                agreement::PrivateKey::from_private_key(alg, scalar)
                    .map_err(|_| status::BAD_INVALID_ARGUMENT)?,
            ),
            (None, Some(bp)) => EphemeralSecret::Brainpool(
                crate::brainpool::BpScalar::from_bytes(bp, scalar)
                    .ok_or(status::BAD_INVALID_ARGUMENT)?,
            ),
            (None, None) => return Err(status::BAD_INTERNAL_ERROR),
        };
        Self::from_key(curve, key)
    }

    fn from_key(curve: EccCurve, key: EphemeralSecret) -> Result<Self, u32> {
        let public = match &key {
            EphemeralSecret::Aws(k) => k
                .compute_public_key()
                .map_err(|_| status::BAD_INTERNAL_ERROR)?
                .as_ref()
                .to_vec(),
            EphemeralSecret::Brainpool(k) => k.public_point(),
        };
        // Uncompressed: 04 ‖ x ‖ y; the nonce drops the 04.
        let nonce = match public.split_first() {
            Some((0x04, xy)) if xy.len() == curve.nonce_len() => xy.to_vec(),
            _ => return Err(status::BAD_INTERNAL_ERROR),
        };
        Ok(EphemeralKey { curve, key, nonce })
    }

    /// The curve.
    pub fn curve(&self) -> EccCurve {
        self.curve
    }

    /// The nonce: the public key `x ‖ y`.
    pub fn nonce(&self) -> &[u8] {
        &self.nonce
    }

    /// The ECDH shared secret (the x coordinate) with the peer's nonce. A nonce of the wrong
    /// length or not on the curve gives `BadNonceInvalid`.
    pub fn shared_secret(&self, peer_nonce: &[u8]) -> Result<Zeroizing<Vec<u8>>, u32> {
        if peer_nonce.len() != self.curve.nonce_len() {
            return Err(status::BAD_NONCE_INVALID);
        }
        let mut point = Vec::with_capacity(1 + peer_nonce.len());
        point.push(0x04);
        point.extend_from_slice(peer_nonce);
        match &self.key {
            EphemeralSecret::Aws(key) => {
                let alg = self.curve.ecdh().ok_or(status::BAD_INTERNAL_ERROR)?;
                let peer = agreement::UnparsedPublicKey::new(alg, &point);
                agreement::agree(key, peer, status::BAD_NONCE_INVALID, |secret| {
                    Ok(Zeroizing::new(secret.to_vec()))
                })
            }
            EphemeralSecret::Brainpool(key) => key.agree(&point).ok_or(status::BAD_NONCE_INVALID),
        }
    }
}

/// An HKDF output length (aws-lc-rs wants a [`hkdf::KeyType`]).
struct OutLen(usize);

impl hkdf::KeyType for OutLen {
    fn len(&self) -> usize {
        self.0
    }
}

/// HKDF (RFC 5869) with the curve's hash: `out.len()` bytes of key material.
pub fn hkdf_into(
    curve: EccCurve,
    salt: &[u8],
    ikm: &[u8],
    info: &[u8],
    out: &mut [u8],
) -> Result<(), u32> {
    let prk = hkdf::Salt::new(curve.hkdf(), salt).extract(ikm);
    let info = [info];
    prk.expand(&info, OutLen(out.len()))
        .and_then(|okm| okm.fill(out))
        .map_err(|_| status::BAD_INTERNAL_ERROR)
}

/// The salt (and HKDF info) of one side's keys: `L ‖ label ‖ own nonce ‖ other nonce`.
fn salt(len: usize, label: &[u8], first: &[u8], second: &[u8]) -> Result<Vec<u8>, u32> {
    let l = u16::try_from(len).map_err(|_| status::BAD_INTERNAL_ERROR)?;
    let mut s = Vec::with_capacity(2 + label.len() + first.len() + second.len());
    s.extend_from_slice(&l.to_le_bytes());
    s.extend_from_slice(label);
    s.extend_from_slice(first);
    s.extend_from_slice(second);
    Ok(s)
}

/// The key sets a client's and a server's chunks are secured with, derived from the ECDH
/// `shared_secret` of the two nonces (OPC 10000-6 §6.8.1). `encrypt`: SignAndEncrypt (the
/// key material covers signing key, encrypting key and IV) or Sign (the signing key alone;
/// the encrypting key and IV are zero and never used). Returns (client keys, server keys).
pub fn derive_ecc_keys(
    curve: EccCurve,
    encrypt: bool,
    shared_secret: &[u8],
    client_nonce: &[u8],
    server_nonce: &[u8],
) -> Result<(EccSymmetricKeys, EccSymmetricKeys), u32> {
    if client_nonce.len() != curve.nonce_len() || server_nonce.len() != curve.nonce_len() {
        return Err(status::BAD_NONCE_INVALID);
    }
    let one = |label: &[u8], first: &[u8], second: &[u8]| {
        let (sig_len, enc_len, iv_len) = curve.symmetric_key_lens();
        let len = if encrypt {
            sig_len + enc_len + iv_len
        } else {
            sig_len
        };
        let s = salt(len, label, first, second)?;
        let mut material = Zeroizing::new(vec![0u8; sig_len + enc_len + iv_len]);
        let derived = material.get_mut(..len).ok_or(status::BAD_INTERNAL_ERROR)?;
        hkdf_into(curve, &s, shared_secret, &s, derived)?;
        let (sig_key, rest) = material
            .split_at_checked(sig_len)
            .ok_or(status::BAD_INTERNAL_ERROR)?;
        let (enc_key, iv) = rest
            .split_at_checked(enc_len)
            .ok_or(status::BAD_INTERNAL_ERROR)?;
        EccSymmetricKeys::new(curve, encrypt, sig_key, enc_key, iv)
    };
    let client = one(b"opcua-client", client_nonce, server_nonce)?;
    let server = one(b"opcua-server", server_nonce, client_nonce)?;
    Ok((client, server))
}

/// One direction's keys of an ECC channel token, with their expanded schedules.
#[derive(Clone)]
pub struct EccSymmetricKeys {
    curve: EccCurve,
    signing_key: Zeroizing<Vec<u8>>,
    keys: ChunkKeys,
}

impl std::fmt::Debug for EccSymmetricKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EccSymmetricKeys")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

impl EccSymmetricKeys {
    /// Builds a key set (lengths must match the curve's; with `encrypt` false the encrypting
    /// key and IV are not used).
    pub fn new(
        curve: EccCurve,
        encrypt: bool,
        signing_key: &[u8],
        encrypting_key: &[u8],
        iv: &[u8],
    ) -> Result<Self, u32> {
        let (sig_len, enc_len, iv_len) = curve.symmetric_key_lens();
        if signing_key.len() != sig_len || encrypting_key.len() != enc_len || iv.len() != iv_len {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        let hash = if curve.is_384() {
            MacHash::Sha384
        } else {
            MacHash::Sha256
        };
        let keys = ChunkKeys::new(hash, signing_key, encrypt.then_some(encrypting_key), iv)?;
        Ok(EccSymmetricKeys {
            curve,
            signing_key: Zeroizing::new(signing_key.to_vec()),
            keys,
        })
    }

    /// The derived signing key.
    pub fn signing_key(&self) -> &[u8] {
        &self.signing_key
    }

    /// The derived IV.
    pub fn iv(&self) -> &[u8; AES_BLOCK_SIZE] {
        self.keys.iv()
    }

    /// Whether these keys encrypt (SignAndEncrypt).
    pub fn encrypts(&self) -> bool {
        self.keys.encrypts()
    }

    /// HMAC length.
    pub fn signature_len(&self) -> usize {
        self.curve.symmetric_signature_len()
    }

    /// HMAC over `data` into `out` (`out.len()` = [`Self::signature_len`]).
    pub fn sign(&self, data: &[u8], out: &mut [u8]) -> Result<(), u32> {
        if out.len() != self.signature_len() {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        self.keys.sign(data, out)
    }

    /// Verifies an HMAC in constant time.
    pub fn verify(&self, data: &[u8], signature: &[u8]) -> bool {
        signature.len() == self.signature_len() && self.keys.verify(data, signature)
    }

    /// AES-CBC encryption in place from the derived IV (whole blocks).
    pub fn encrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        self.keys.encrypt_in_place(buf)
    }

    /// AES-CBC decryption in place from the derived IV (whole blocks, else
    /// `BadSecurityChecksFailed`).
    pub fn decrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        self.keys.decrypt_in_place(buf)
    }
}
