//! Security policies and their parameters (OPC 10000-7 security policy profiles).

/// Message security mode of a secure channel (OPC 10000-4 §7.20).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SecurityMode {
    /// No signing, no encryption (only with [`PolicyId::None`]).
    None,
    /// Messages are signed.
    Sign,
    /// Messages are signed and encrypted.
    SignAndEncrypt,
}

impl SecurityMode {
    /// The MessageSecurityMode enumeration value on the wire (None = 1, Sign = 2, SignAndEncrypt = 3).
    pub fn to_u32(self) -> u32 {
        match self {
            SecurityMode::None => 1,
            SecurityMode::Sign => 2,
            SecurityMode::SignAndEncrypt => 3,
        }
    }

    /// Parses the wire value; 0 (Invalid) and unknown values give `None`.
    pub fn from_u32(value: u32) -> Option<Self> {
        match value {
            1 => Some(SecurityMode::None),
            2 => Some(SecurityMode::Sign),
            3 => Some(SecurityMode::SignAndEncrypt),
            _ => None,
        }
    }
}

/// A security policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyId {
    /// `http://opcfoundation.org/UA/SecurityPolicy#None`
    None,
    /// `…#Basic256Sha256`
    Basic256Sha256,
    /// `…#Aes128_Sha256_RsaOaep`
    Aes128Sha256RsaOaep,
    /// `…#Aes256_Sha256_RsaPss`
    Aes256Sha256RsaPss,
    /// `…#Basic128Rsa15` — deprecated; see [`PolicyId::is_supported`].
    Basic128Rsa15,
    /// `…#Basic256` — deprecated; see [`PolicyId::is_supported`].
    Basic256,
}

/// The hash behind the key derivation function and the symmetric signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashAlg {
    /// SHA-1 (P_SHA1, HMAC-SHA1): deprecated policies only.
    Sha1,
    /// SHA-256 (P_SHA256, HMAC-SHA256).
    Sha256,
}

/// Asymmetric encryption padding of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsymEncryption {
    /// RSA PKCS#1 v1.5 (Basic128Rsa15 only).
    Pkcs1v15,
    /// RSA-OAEP with SHA-1 and MGF1-SHA-1.
    OaepSha1,
    /// RSA-OAEP with SHA-256 and MGF1-SHA-256.
    OaepSha256,
}

/// Asymmetric signature algorithm of a policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsymSignature {
    /// RSASSA-PKCS1-v1_5 with SHA-1 (deprecated policies; verification only).
    Pkcs1Sha1,
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Pkcs1Sha256,
    /// RSASSA-PSS with SHA-256, MGF1-SHA-256, salt length 32.
    PssSha256,
}

/// Symmetric block size of AES in bytes; every policy but None uses AES-CBC.
pub const AES_BLOCK_SIZE: usize = 16;
/// Size of a certificate thumbprint (SHA-1 of the DER) in bytes.
pub const THUMBPRINT_LEN: usize = 20;

const URI_PREFIX: &str = "http://opcfoundation.org/UA/SecurityPolicy#";

/// `AsymmetricSignatureAlgorithm` URI of RSA-PKCS1-v1_5-SHA256.
pub const URI_RSA_SHA256: &str = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256";
/// `AsymmetricSignatureAlgorithm` URI of RSA-PSS-SHA256.
pub const URI_RSA_PSS_SHA256: &str = "http://opcfoundation.org/UA/security/rsa-pss-sha2-256";
/// `AsymmetricSignatureAlgorithm` URI of RSA-PKCS1-v1_5-SHA1.
pub const URI_RSA_SHA1: &str = "http://www.w3.org/2000/09/xmldsig#rsa-sha1";
/// `AsymmetricEncryptionAlgorithm` URI of RSA-OAEP (SHA-1).
pub const URI_RSA_OAEP: &str = "http://www.w3.org/2001/04/xmlenc#rsa-oaep";
/// `AsymmetricEncryptionAlgorithm` URI of RSA-OAEP-SHA256.
pub const URI_RSA_OAEP_SHA256: &str = "http://opcfoundation.org/UA/security/rsa-oaep-sha2-256";
/// `AsymmetricEncryptionAlgorithm` URI of RSA PKCS#1 v1.5.
pub const URI_RSA_15: &str = "http://www.w3.org/2001/04/xmlenc#rsa-1_5";

impl PolicyId {
    /// Every policy this crate knows, supported or not.
    pub const ALL: [PolicyId; 6] = [
        PolicyId::None,
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
        PolicyId::Basic128Rsa15,
        PolicyId::Basic256,
    ];

    /// The policies a server offers by default (the non-deprecated ones).
    pub const RECOMMENDED: [PolicyId; 4] = [
        PolicyId::None,
        PolicyId::Basic256Sha256,
        PolicyId::Aes128Sha256RsaOaep,
        PolicyId::Aes256Sha256RsaPss,
    ];

    /// Parses a SecurityPolicyUri. Unknown URIs give `None` (answer `BadSecurityPolicyRejected`).
    pub fn from_uri(uri: &str) -> Option<Self> {
        let name = uri.strip_prefix(URI_PREFIX)?;
        Some(match name {
            "None" => PolicyId::None,
            "Basic256Sha256" => PolicyId::Basic256Sha256,
            "Aes128_Sha256_RsaOaep" => PolicyId::Aes128Sha256RsaOaep,
            "Aes256_Sha256_RsaPss" => PolicyId::Aes256Sha256RsaPss,
            "Basic128Rsa15" => PolicyId::Basic128Rsa15,
            "Basic256" => PolicyId::Basic256,
            _ => return None,
        })
    }

    /// The SecurityPolicyUri.
    pub fn uri(self) -> &'static str {
        match self {
            PolicyId::None => "http://opcfoundation.org/UA/SecurityPolicy#None",
            PolicyId::Basic256Sha256 => "http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256",
            PolicyId::Aes128Sha256RsaOaep => {
                "http://opcfoundation.org/UA/SecurityPolicy#Aes128_Sha256_RsaOaep"
            }
            PolicyId::Aes256Sha256RsaPss => {
                "http://opcfoundation.org/UA/SecurityPolicy#Aes256_Sha256_RsaPss"
            }
            PolicyId::Basic128Rsa15 => "http://opcfoundation.org/UA/SecurityPolicy#Basic128Rsa15",
            PolicyId::Basic256 => "http://opcfoundation.org/UA/SecurityPolicy#Basic256",
        }
    }

    /// Short name for logs and configuration (`Basic256Sha256`, …).
    pub fn name(self) -> &'static str {
        &self.uri()[URI_PREFIX.len()..]
    }

    /// Deprecated by OPC UA 1.04 (Basic128Rsa15, Basic256): never enable by default.
    pub fn is_deprecated(self) -> bool {
        matches!(self, PolicyId::Basic128Rsa15 | PolicyId::Basic256)
    }

    /// Whether this crate can run the full policy (all symmetric and asymmetric operations).
    ///
    /// The deprecated policies sign with RSA-PKCS1-v1_5-SHA1, which aws-lc-rs does not offer for
    /// signing, so they are recognised (URIs, lengths, key derivation, symmetric crypto, SHA-1
    /// signature verification) but not supported end to end: a server must reject them.
    pub fn is_supported(self) -> bool {
        !self.is_deprecated()
    }

    /// Length of the client and server nonces in OpenSecureChannel (0 for None).
    pub fn nonce_len(self) -> usize {
        match self {
            PolicyId::None => 0,
            PolicyId::Basic128Rsa15 => 16,
            _ => 32,
        }
    }

    /// Hash of the key derivation (P_SHA1 / P_SHA256) and of the symmetric signature (HMAC).
    pub fn hash(self) -> HashAlg {
        match self {
            PolicyId::Basic128Rsa15 | PolicyId::Basic256 => HashAlg::Sha1,
            _ => HashAlg::Sha256,
        }
    }

    /// Length of a symmetric signature (HMAC output) in bytes; 0 for None.
    pub fn symmetric_signature_len(self) -> usize {
        match self {
            PolicyId::None => 0,
            PolicyId::Basic128Rsa15 | PolicyId::Basic256 => 20,
            _ => 32,
        }
    }

    /// Derived key lengths in bytes: (signing key, encrypting key, IV). All zero for None.
    pub fn symmetric_key_lens(self) -> (usize, usize, usize) {
        match self {
            PolicyId::None => (0, 0, 0),
            PolicyId::Basic128Rsa15 => (16, 16, 16),
            PolicyId::Basic256 => (24, 32, 16),
            PolicyId::Basic256Sha256 => (32, 32, 16),
            PolicyId::Aes128Sha256RsaOaep => (32, 16, 16),
            PolicyId::Aes256Sha256RsaPss => (32, 32, 16),
        }
    }

    /// Symmetric encryption block size in bytes (1 for None: no block alignment).
    pub fn symmetric_block_size(self) -> usize {
        match self {
            PolicyId::None => 1,
            _ => AES_BLOCK_SIZE,
        }
    }

    /// Asymmetric encryption padding, `None` for the None policy.
    pub fn asym_encryption(self) -> Option<AsymEncryption> {
        match self {
            PolicyId::None => None,
            PolicyId::Basic128Rsa15 => Some(AsymEncryption::Pkcs1v15),
            PolicyId::Basic256 | PolicyId::Basic256Sha256 | PolicyId::Aes128Sha256RsaOaep => {
                Some(AsymEncryption::OaepSha1)
            }
            PolicyId::Aes256Sha256RsaPss => Some(AsymEncryption::OaepSha256),
        }
    }

    /// Asymmetric signature algorithm, `None` for the None policy.
    pub fn asym_signature(self) -> Option<AsymSignature> {
        match self {
            PolicyId::None => None,
            PolicyId::Basic128Rsa15 | PolicyId::Basic256 => Some(AsymSignature::Pkcs1Sha1),
            PolicyId::Basic256Sha256 | PolicyId::Aes128Sha256RsaOaep => {
                Some(AsymSignature::Pkcs1Sha256)
            }
            PolicyId::Aes256Sha256RsaPss => Some(AsymSignature::PssSha256),
        }
    }

    /// `AsymmetricSignatureAlgorithm` URI (SignatureData.algorithm), `None` for the None policy.
    pub fn asym_signature_algorithm_uri(self) -> Option<&'static str> {
        self.asym_signature().map(|s| match s {
            AsymSignature::Pkcs1Sha1 => URI_RSA_SHA1,
            AsymSignature::Pkcs1Sha256 => URI_RSA_SHA256,
            AsymSignature::PssSha256 => URI_RSA_PSS_SHA256,
        })
    }

    /// `AsymmetricEncryptionAlgorithm` URI (UserNameIdentityToken.encryptionAlgorithm).
    pub fn asym_encryption_algorithm_uri(self) -> Option<&'static str> {
        self.asym_encryption().map(|e| match e {
            AsymEncryption::Pkcs1v15 => URI_RSA_15,
            AsymEncryption::OaepSha1 => URI_RSA_OAEP,
            AsymEncryption::OaepSha256 => URI_RSA_OAEP_SHA256,
        })
    }

    /// Minimum and maximum RSA key size in bits of the policy's certificates.
    pub fn asym_key_bits_range(self) -> (usize, usize) {
        match self {
            PolicyId::None => (0, usize::MAX),
            PolicyId::Basic128Rsa15 | PolicyId::Basic256 => (1024, 2048),
            _ => (2048, 4096),
        }
    }

    /// Plaintext bytes per RSA block for a key of `key_bytes` (modulus length in bytes).
    pub fn asym_plain_block_size(self, key_bytes: usize) -> usize {
        let overhead = match self.asym_encryption() {
            None => return 1,
            Some(AsymEncryption::Pkcs1v15) => 11,
            Some(AsymEncryption::OaepSha1) => 2 * 20 + 2,
            Some(AsymEncryption::OaepSha256) => 2 * 32 + 2,
        };
        key_bytes.saturating_sub(overhead)
    }

    /// Ciphertext bytes per RSA block: the modulus length (1 for None).
    pub fn asym_cipher_block_size(self, key_bytes: usize) -> usize {
        match self {
            PolicyId::None => 1,
            _ => key_bytes,
        }
    }

    /// Whether asymmetric chunks carry the ExtraPaddingSize byte: key larger than 2048 bits.
    pub fn asym_has_extra_padding_byte(self, key_bytes: usize) -> bool {
        self != PolicyId::None && key_bytes > 256
    }
}

/// Padding for a chunk that will be encrypted, per OPC 10000-6 §6.7.2.
///
/// `plain_len` counts every byte to be encrypted except the padding and the signature (sequence
/// header + body); `sig_len` is the signature length; `block` the plaintext block size;
/// `extra_byte` whether an ExtraPaddingSize byte follows the padding (asymmetric, key > 2048 bits).
///
/// Returns the number of padding bytes to write *including* the PaddingSize byte (and the
/// ExtraPaddingSize byte), so `plain_len + result + sig_len` is a multiple of `block`.
/// Write them with [`write_padding`].
pub fn padding_len(plain_len: usize, sig_len: usize, block: usize, extra_byte: bool) -> usize {
    let fixed = if extra_byte { 2 } else { 1 };
    if block <= 1 {
        return fixed;
    }
    let used = plain_len + fixed + sig_len;
    let rem = used % block;
    let pad = if rem == 0 { 0 } else { block - rem };
    pad + fixed
}

/// Writes padding bytes produced by [`padding_len`] into `dst` (whose length is that result).
///
/// Without the extra byte every byte is the PaddingSize value (`dst.len() - 1`). With it, the padding
/// bytes and the PaddingSize byte carry the low byte of the padding count and the last byte holds the
/// high byte (ExtraPaddingSize).
pub fn write_padding(dst: &mut [u8], extra_byte: bool) {
    if extra_byte {
        let Some((last, body)) = dst.split_last_mut() else {
            return;
        };
        let Some(count) = body.len().checked_sub(1) else {
            return;
        };
        body.fill((count & 0xff) as u8);
        *last = (count >> 8) as u8;
    } else {
        if dst.is_empty() {
            return;
        }
        let count = dst.len() - 1;
        dst.fill((count & 0xff) as u8);
    }
}

/// Checks and measures the padding at the end of a decrypted plaintext (signature already removed).
///
/// Returns the total padding length (including the size byte(s)) or `None` when the padding is
/// malformed. Runs in time independent of the padding bytes' values.
pub fn check_padding(plain: &[u8], extra_byte: bool) -> Option<usize> {
    use subtle::ConstantTimeEq;
    let n = plain.len();
    let (count, fixed) = if extra_byte {
        let [.., lo, hi] = plain else { return None };
        ((usize::from(*hi) << 8) | usize::from(*lo), 2)
    } else {
        let [.., size] = plain else { return None };
        (usize::from(*size), 1)
    };
    let total = count + fixed;
    if total > n {
        return None;
    }
    let low = (count & 0xff) as u8;
    let start = n - total;
    let mut ok = subtle::Choice::from(1u8);
    // The padding bytes: from `start` up to the size byte(s) (total <= n, so in range).
    for &b in plain.get(start..n - fixed)? {
        ok &= b.ct_eq(&low);
    }
    if bool::from(ok) {
        Some(total)
    } else {
        None
    }
}
