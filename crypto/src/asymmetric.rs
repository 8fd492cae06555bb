//! Asymmetric operations of OpenSecureChannel, CreateSession/ActivateSession and user tokens:
//! RSA-OAEP / PKCS#1 v1.5 encryption in blocks, PKCS#1 v1.5 / PSS signatures (aws-lc-rs).

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{
    KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, Pkcs1PrivateDecryptingKey,
    Pkcs1PublicEncryptingKey, PrivateDecryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1,
    OAEP_SHA256_MGF1SHA256,
};
use aws_lc_rs::signature::{self, ParsedPublicKey, RsaKeyPair};
use zeroize::Zeroizing;

use crate::cert::Certificate;
use crate::policy::{AsymEncryption, AsymSignature, PolicyId};
use crate::status;

/// An RSA private key (the application instance key or a user's key).
pub struct PrivateKey {
    pkcs8: Zeroizing<Vec<u8>>,
    signing: RsaKeyPair,
    oaep: OaepPrivateDecryptingKey,
    pkcs1: Pkcs1PrivateDecryptingKey,
}

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateKey")
            .field("bits", &self.key_bits())
            .finish_non_exhaustive()
    }
}

const PEM_PKCS8: &str = "PRIVATE KEY";
const PEM_PKCS1: &str = "RSA PRIVATE KEY";

impl PrivateKey {
    /// Generates a new RSA key of `bits` (2048, 3072 or 4096) with aws-lc-rs.
    pub fn generate(bits: usize) -> Result<Self, u32> {
        let size = match bits {
            2048 => KeySize::Rsa2048,
            3072 => KeySize::Rsa3072,
            4096 => KeySize::Rsa4096,
            _ => return Err(status::BAD_INVALID_ARGUMENT),
        };
        let pair = RsaKeyPair::generate(size).map_err(|_| status::BAD_INTERNAL_ERROR)?;
        let der = pair.as_der().map_err(|_| status::BAD_INTERNAL_ERROR)?;
        Self::from_pkcs8_der(der.as_ref())
    }

    /// Parses a PKCS#8 (`PRIVATE KEY`) DER document.
    pub fn from_pkcs8_der(der: &[u8]) -> Result<Self, u32> {
        let signing = RsaKeyPair::from_pkcs8(der).map_err(|_| status::BAD_CERTIFICATE_INVALID)?;
        let oaep = PrivateDecryptingKey::from_pkcs8(der)
            .ok()
            .and_then(|k| OaepPrivateDecryptingKey::new(k).ok())
            .ok_or(status::BAD_CERTIFICATE_INVALID)?;
        let pkcs1 = PrivateDecryptingKey::from_pkcs8(der)
            .ok()
            .and_then(|k| Pkcs1PrivateDecryptingKey::new(k).ok())
            .ok_or(status::BAD_CERTIFICATE_INVALID)?;
        Ok(PrivateKey {
            pkcs8: Zeroizing::new(der.to_vec()),
            signing,
            oaep,
            pkcs1,
        })
    }

    /// Parses a PKCS#1 `RSAPrivateKey` DER document.
    pub fn from_pkcs1_der(der: &[u8]) -> Result<Self, u32> {
        let pair = RsaKeyPair::from_der(der).map_err(|_| status::BAD_CERTIFICATE_INVALID)?;
        let pkcs8 = pair.as_der().map_err(|_| status::BAD_CERTIFICATE_INVALID)?;
        Self::from_pkcs8_der(pkcs8.as_ref())
    }

    /// Parses DER in either PKCS#8 or PKCS#1 form.
    pub fn from_der(der: &[u8]) -> Result<Self, u32> {
        Self::from_pkcs8_der(der).or_else(|_| Self::from_pkcs1_der(der))
    }

    /// Parses a PEM file (`PRIVATE KEY` or `RSA PRIVATE KEY`), or DER if the input is not PEM.
    pub fn from_pem_or_der(bytes: &[u8]) -> Result<Self, u32> {
        match pem::parse(bytes) {
            Ok(p) if p.tag() == PEM_PKCS8 => Self::from_pkcs8_der(p.contents()),
            Ok(p) if p.tag() == PEM_PKCS1 => Self::from_pkcs1_der(p.contents()),
            Ok(_) => Err(status::BAD_CERTIFICATE_INVALID),
            Err(_) => Self::from_der(bytes),
        }
    }

    /// The key as PKCS#8 DER.
    pub fn to_pkcs8_der(&self) -> &[u8] {
        &self.pkcs8
    }

    /// The key as a PKCS#8 PEM string (`-----BEGIN PRIVATE KEY-----`).
    pub fn to_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(pem::encode(&pem::Pem::new(PEM_PKCS8, self.pkcs8.to_vec())))
    }

    /// Modulus length in bytes (= signature length = ciphertext block size).
    pub fn key_bytes(&self) -> usize {
        self.signing.public_modulus_len()
    }

    /// Modulus length in bits.
    pub fn key_bits(&self) -> usize {
        self.key_bytes() * 8
    }

    /// The public key as PKCS#1 `RSAPublicKey` DER (what a certificate's subjectPublicKey holds).
    pub fn public_key_pkcs1(&self) -> &[u8] {
        use aws_lc_rs::signature::KeyPair;
        self.signing.public_key().as_ref()
    }

    /// Whether `cert` carries this key's public key.
    pub fn matches(&self, cert: &Certificate) -> bool {
        self.public_key_pkcs1() == cert.rsa_public_key()
    }
}

fn oaep_alg(enc: AsymEncryption) -> Option<&'static aws_lc_rs::rsa::OaepAlgorithm> {
    match enc {
        AsymEncryption::OaepSha1 => Some(&OAEP_SHA1_MGF1SHA1),
        AsymEncryption::OaepSha256 => Some(&OAEP_SHA256_MGF1SHA256),
        AsymEncryption::Pkcs1v15 => None,
    }
}

/// Encrypts `plaintext` to the public key of `peer` with the policy's padding, block by block
/// (blocks of [`PolicyId::asym_plain_block_size`], the last one may be short), appending the
/// ciphertext (a multiple of the key length) to `out`.
pub fn asym_encrypt(
    policy: PolicyId,
    peer: &Certificate,
    plaintext: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), u32> {
    enum Key<'a> {
        Oaep(
            &'a OaepPublicEncryptingKey,
            &'static aws_lc_rs::rsa::OaepAlgorithm,
        ),
        Pkcs1(&'a Pkcs1PublicEncryptingKey),
    }
    let enc = policy
        .asym_encryption()
        .ok_or(status::BAD_SECURITY_POLICY_REJECTED)?;
    // The certificate's key objects, parsed once (see cert::PublicKeys).
    let keys = peer.keys();
    let parse = || PublicEncryptingKey::from_der(peer.spki_der()).ok();
    let key = match oaep_alg(enc) {
        Some(alg) => Key::Oaep(
            keys.oaep
                .get_or_init(|| parse().and_then(|k| OaepPublicEncryptingKey::new(k).ok()))
                .as_ref()
                .ok_or(status::BAD_CERTIFICATE_INVALID)?,
            alg,
        ),
        None => Key::Pkcs1(
            keys.pkcs1
                .get_or_init(|| parse().and_then(|k| Pkcs1PublicEncryptingKey::new(k).ok()))
                .as_ref()
                .ok_or(status::BAD_CERTIFICATE_INVALID)?,
        ),
    };
    let key_bytes = match key {
        Key::Oaep(k, _) => k.key_size_bytes(),
        Key::Pkcs1(k) => k.key_size_bytes(),
    };
    let block = policy.asym_plain_block_size(key_bytes);
    if block == 0 || key_bytes == 0 {
        return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED);
    }
    let blocks = plaintext.len().div_ceil(block).max(1);
    let start = out.len();
    out.resize(start + blocks * key_bytes, 0);
    let mut chunks: Vec<&[u8]> = plaintext.chunks(block).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    // One key-sized output block per plaintext chunk.
    let blocks_out = out
        .get_mut(start..)
        .ok_or(status::BAD_INTERNAL_ERROR)?
        .chunks_exact_mut(key_bytes)
        .zip(&chunks);
    for (dst, chunk) in blocks_out {
        let n = match key {
            Key::Oaep(k, alg) => k.encrypt(alg, chunk, dst, None),
            Key::Pkcs1(k) => k.encrypt(chunk, dst),
        }
        .map_err(|_| status::BAD_INTERNAL_ERROR)?
        .len();
        if n != key_bytes {
            return Err(status::BAD_INTERNAL_ERROR);
        }
    }
    Ok(())
}

/// Decrypts `ciphertext` (a multiple of the key length) with the own key, appending the plaintext
/// to `out`; returns the number of plaintext bytes appended. Any failure (length, padding) is
/// `BadSecurityChecksFailed`; the padding check is aws-lc's constant-time one.
pub fn asym_decrypt(
    policy: PolicyId,
    own: &PrivateKey,
    ciphertext: &[u8],
    out: &mut Vec<u8>,
) -> Result<usize, u32> {
    let enc = policy
        .asym_encryption()
        .ok_or(status::BAD_SECURITY_POLICY_REJECTED)?;
    let key_bytes = own.key_bytes();
    if ciphertext.is_empty() || !ciphertext.len().is_multiple_of(key_bytes) {
        return Err(status::BAD_SECURITY_CHECKS_FAILED);
    }
    let start = out.len();
    let mut block = Zeroizing::new(vec![0u8; key_bytes]);
    for chunk in ciphertext.chunks(key_bytes) {
        let plain = match oaep_alg(enc) {
            Some(alg) => own.oaep.decrypt(alg, chunk, &mut block, None),
            None => own.pkcs1.decrypt(chunk, &mut block),
        }
        .map_err(|_| status::BAD_SECURITY_CHECKS_FAILED)?;
        out.extend_from_slice(plain);
    }
    Ok(out.len() - start)
}

/// Signs `data` with the policy's asymmetric signature algorithm. The signature has
/// [`PrivateKey::key_bytes`] bytes.
pub fn asym_sign(policy: PolicyId, own: &PrivateKey, data: &[u8]) -> Result<Vec<u8>, u32> {
    let mut sig = vec![0u8; own.key_bytes()];
    asym_sign_into(policy, own, data, &mut sig)?;
    Ok(sig)
}

/// Like [`asym_sign`], writing into `out` (exactly [`PrivateKey::key_bytes`] long).
pub fn asym_sign_into(
    policy: PolicyId,
    own: &PrivateKey,
    data: &[u8],
    out: &mut [u8],
) -> Result<(), u32> {
    let alg = policy
        .asym_signature()
        .ok_or(status::BAD_SECURITY_POLICY_REJECTED)?;
    let encoding: &'static dyn signature::RsaEncoding = match alg {
        AsymSignature::Pkcs1Sha256 => &signature::RSA_PKCS1_SHA256,
        AsymSignature::PssSha256 => &signature::RSA_PSS_SHA256,
        // aws-lc-rs offers no SHA-1 signing: the deprecated policies stop here.
        AsymSignature::Pkcs1Sha1 => return Err(status::BAD_SECURITY_POLICY_REJECTED),
    };
    if out.len() != own.key_bytes() {
        return Err(status::BAD_INVALID_ARGUMENT);
    }
    let rng = aws_lc_rs::rand::SystemRandom::new();
    own.signing
        .sign(encoding, &rng, data, out)
        .map_err(|_| status::BAD_INTERNAL_ERROR)
}

/// Verifies a peer's signature over `data` with the public key of `peer`.
/// A bad signature is `BadSecurityChecksFailed` (callers map it to BadApplicationSignatureInvalid
/// or BadUserSignatureInvalid where the service says so).
pub fn asym_verify(
    policy: PolicyId,
    peer: &Certificate,
    data: &[u8],
    signature: &[u8],
) -> Result<(), u32> {
    let alg = policy
        .asym_signature()
        .ok_or(status::BAD_SECURITY_POLICY_REJECTED)?;
    // The algorithm, and the slot of the certificate's key object parsed for it.
    let (params, slot): (&'static dyn signature::VerificationAlgorithm, usize) = match alg {
        AsymSignature::Pkcs1Sha256 => (&signature::RSA_PKCS1_2048_8192_SHA256, 0),
        AsymSignature::PssSha256 => (&signature::RSA_PSS_2048_8192_SHA256, 1),
        AsymSignature::Pkcs1Sha1 => (&signature::RSA_PKCS1_1024_8192_SHA1_FOR_LEGACY_USE_ONLY, 2),
    };
    // The certificate's key object for this algorithm, parsed once (see cert::PublicKeys).
    let key = peer
        .keys()
        .verify
        .get(slot)
        .ok_or(status::BAD_INTERNAL_ERROR)?
        .get_or_init(|| ParsedPublicKey::new(params, peer.rsa_public_key()).ok())
        .as_ref()
        .ok_or(status::BAD_SECURITY_CHECKS_FAILED)?;
    key.verify_sig(data, signature)
        .map_err(|_| status::BAD_SECURITY_CHECKS_FAILED)
}

/// Plaintext block size for the policy and a key of `key_bits` bits.
pub fn plain_text_block_size(policy: PolicyId, key_bits: usize) -> usize {
    policy.asym_plain_block_size(key_bits / 8)
}

/// Ciphertext block size for a key of `key_bits` bits.
pub fn cipher_text_block_size(key_bits: usize) -> usize {
    key_bits / 8
}

/// Size of the ciphertext produced by encrypting `plain_len` bytes to a key of `key_bits`.
pub fn encrypted_len(policy: PolicyId, key_bits: usize, plain_len: usize) -> usize {
    let block = plain_text_block_size(policy, key_bits).max(1);
    plain_len.div_ceil(block).max(1) * cipher_text_block_size(key_bits)
}

/// Fills `out` with cryptographically secure random bytes (nonces).
pub fn random_bytes(out: &mut [u8]) -> Result<(), u32> {
    use aws_lc_rs::rand::SecureRandom;
    aws_lc_rs::rand::SystemRandom::new()
        .fill(out)
        .map_err(|_| status::BAD_INTERNAL_ERROR)
}

/// A fresh nonce of the policy's length.
pub fn new_nonce(policy: PolicyId) -> Result<Vec<u8>, u32> {
    let mut n = vec![0u8; policy.nonce_len()];
    random_bytes(&mut n)?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::{generate_self_signed, CertificateRequest};

    /// A certificate's key objects are parsed on first use and shared by its clones: what one
    /// handshake parsed, the next one (holding a clone from the PKI) uses.
    #[test]
    #[allow(clippy::unwrap_used, clippy::indexing_slicing)]
    fn public_key_objects_are_parsed_once_and_shared_by_clones() {
        let policy = PolicyId::Basic256Sha256;
        let (cert, key) =
            generate_self_signed(&CertificateRequest::new("urn:k", "k", 1_700_000_000)).unwrap();
        let clone = cert.clone();
        assert!(
            std::ptr::eq(cert.der(), clone.der()),
            "a clone shares the parsed certificate"
        );
        assert!(cert.keys().oaep.get().is_none() && cert.keys().verify[0].get().is_none());
        let mut ct = Vec::new();
        asym_encrypt(policy, &clone, b"secret", &mut ct).unwrap();
        let sig = asym_sign(policy, &key, b"data").unwrap();
        asym_verify(policy, &clone, b"data", &sig).unwrap();
        assert!(
            cert.keys().oaep.get().is_some_and(Option::is_some),
            "parsed through the clone"
        );
        assert!(cert.keys().verify[0].get().is_some_and(Option::is_some));
        // And they work a second time, through the original.
        let mut out = Vec::new();
        asym_decrypt(policy, &key, &ct, &mut out).unwrap();
        assert_eq!(out, b"secret");
        asym_verify(policy, &cert, b"data", &sig).unwrap();
        assert_eq!(
            asym_verify(policy, &cert, b"other", &sig),
            Err(status::BAD_SECURITY_CHECKS_FAILED)
        );
    }
}
