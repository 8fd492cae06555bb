//! Symmetric chunk security: key sets derived from the channel nonces, HMAC signing and AES-CBC.
//!
//! Every operation works in place on caller buffers and does not allocate: the HMAC key schedule
//! and the AES round keys are computed once per key set, and each chunk clones them on the stack.
//! There is no IV chaining across chunks: every chunk starts from the derived IV (OPC 10000-6).

use aes::{Aes128, Aes256};
use cbc::cipher::block_padding::NoPadding;
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, InnerIvInit, KeyInit};
use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::{Sha256, Sha384};
use zeroize::Zeroizing;

use crate::kdf::p_hash;
use crate::policy::{PolicyId, SecurityMode, AES_BLOCK_SIZE};
use crate::status;

/// The HMAC behind a key set's chunk signatures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MacHash {
    Sha1,
    Sha256,
    Sha384,
}

#[derive(Clone)]
enum MacKey {
    Sha1(Hmac<Sha1>),
    Sha256(Hmac<Sha256>),
    Sha384(Hmac<Sha384>),
}

// The AES key schedules are kept inline: every chunk's encryption reads one with no
// indirection, and there is one per channel direction, so the larger variant's size costs
// nothing that matters.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
enum CipherKey {
    Aes128(Aes128),
    Aes256(Aes256),
}

/// What every policy's symmetric chunk security is made of (the RSA policies' key sets and the
/// ECC ones'): an HMAC key schedule, an AES-CBC key schedule (none for the ECC policies in Sign
/// mode) and the IV every chunk starts from. Works in place and does not allocate.
#[derive(Clone)]
pub(crate) struct ChunkKeys {
    mac: MacKey,
    cipher: Option<CipherKey>,
    iv: [u8; AES_BLOCK_SIZE],
}

impl ChunkKeys {
    /// The schedules of `signing_key` (HMAC with `hash`) and of `encrypting_key` (AES-128 for
    /// 16 bytes, AES-256 for 32; `None`: no encryption).
    pub(crate) fn new(
        hash: MacHash,
        signing_key: &[u8],
        encrypting_key: Option<&[u8]>,
        iv: &[u8],
    ) -> Result<Self, u32> {
        let bad = |_| status::BAD_INTERNAL_ERROR;
        let mac = match hash {
            MacHash::Sha1 => {
                MacKey::Sha1(<Hmac<Sha1> as Mac>::new_from_slice(signing_key).map_err(bad)?)
            }
            MacHash::Sha256 => {
                MacKey::Sha256(<Hmac<Sha256> as Mac>::new_from_slice(signing_key).map_err(bad)?)
            }
            MacHash::Sha384 => {
                MacKey::Sha384(<Hmac<Sha384> as Mac>::new_from_slice(signing_key).map_err(bad)?)
            }
        };
        let cipher = match encrypting_key {
            None => None,
            Some(k) if k.len() == 16 => Some(CipherKey::Aes128(
                Aes128::new_from_slice(k).map_err(|_| status::BAD_INTERNAL_ERROR)?,
            )),
            Some(k) => Some(CipherKey::Aes256(
                Aes256::new_from_slice(k).map_err(|_| status::BAD_INTERNAL_ERROR)?,
            )),
        };
        let iv: [u8; AES_BLOCK_SIZE] = iv.try_into().map_err(|_| status::BAD_INVALID_ARGUMENT)?;
        Ok(ChunkKeys { mac, cipher, iv })
    }

    pub(crate) fn iv(&self) -> &[u8; AES_BLOCK_SIZE] {
        &self.iv
    }

    pub(crate) fn encrypts(&self) -> bool {
        self.cipher.is_some()
    }

    /// HMAC over `data` into `out`, which the caller sized to the HMAC's length.
    pub(crate) fn sign(&self, data: &[u8], out: &mut [u8]) -> Result<(), u32> {
        fn put(tag: &[u8], out: &mut [u8]) -> Result<(), u32> {
            if tag.len() != out.len() {
                return Err(status::BAD_INVALID_ARGUMENT);
            }
            out.copy_from_slice(tag);
            Ok(())
        }
        match &self.mac {
            MacKey::Sha1(m) => {
                let mut m = m.clone();
                m.update(data);
                put(&m.finalize().into_bytes(), out)
            }
            MacKey::Sha256(m) => {
                let mut m = m.clone();
                m.update(data);
                put(&m.finalize().into_bytes(), out)
            }
            MacKey::Sha384(m) => {
                let mut m = m.clone();
                m.update(data);
                put(&m.finalize().into_bytes(), out)
            }
        }
    }

    /// Verifies an HMAC in constant time.
    pub(crate) fn verify(&self, data: &[u8], signature: &[u8]) -> bool {
        match &self.mac {
            MacKey::Sha1(m) => {
                let mut m = m.clone();
                m.update(data);
                m.verify_slice(signature).is_ok()
            }
            MacKey::Sha256(m) => {
                let mut m = m.clone();
                m.update(data);
                m.verify_slice(signature).is_ok()
            }
            MacKey::Sha384(m) => {
                let mut m = m.clone();
                m.update(data);
                m.verify_slice(signature).is_ok()
            }
        }
    }

    /// AES-CBC encryption in place from the IV (whole blocks, else `BadInvalidArgument`;
    /// without an encrypting key `BadInternalError`).
    pub(crate) fn encrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        if !buf.len().is_multiple_of(AES_BLOCK_SIZE) {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        let iv = (&self.iv).into();
        let len = buf.len();
        let res = match &self.cipher {
            None => return Err(status::BAD_INTERNAL_ERROR),
            Some(CipherKey::Aes128(c)) => cbc::Encryptor::<Aes128>::inner_iv_init(c.clone(), iv)
                .encrypt_padded_mut::<NoPadding>(buf, len)
                .map(|_| ()),
            Some(CipherKey::Aes256(c)) => cbc::Encryptor::<Aes256>::inner_iv_init(c.clone(), iv)
                .encrypt_padded_mut::<NoPadding>(buf, len)
                .map(|_| ()),
        };
        res.map_err(|_| status::BAD_INVALID_ARGUMENT)
    }

    /// AES-CBC decryption in place from the IV (whole blocks, else `BadSecurityChecksFailed`,
    /// as the data came from the peer; so without an encrypting key).
    pub(crate) fn decrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        if !buf.len().is_multiple_of(AES_BLOCK_SIZE) {
            return Err(status::BAD_SECURITY_CHECKS_FAILED);
        }
        let iv = (&self.iv).into();
        let res = match &self.cipher {
            None => return Err(status::BAD_SECURITY_CHECKS_FAILED),
            Some(CipherKey::Aes128(c)) => cbc::Decryptor::<Aes128>::inner_iv_init(c.clone(), iv)
                .decrypt_padded_mut::<NoPadding>(buf)
                .map(|_| ()),
            Some(CipherKey::Aes256(c)) => cbc::Decryptor::<Aes256>::inner_iv_init(c.clone(), iv)
                .decrypt_padded_mut::<NoPadding>(buf)
                .map(|_| ()),
        };
        res.map_err(|_| status::BAD_SECURITY_CHECKS_FAILED)
    }
}

/// One direction's keys (signing key, encrypting key, IV) with their expanded schedules.
#[derive(Clone)]
pub struct SymmetricKeys {
    policy: PolicyId,
    signing_key: Zeroizing<Vec<u8>>,
    encrypting_key: Zeroizing<Vec<u8>>,
    keys: ChunkKeys,
}

impl std::fmt::Debug for SymmetricKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymmetricKeys")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The two key sets of a channel.
#[derive(Clone, Debug)]
pub struct ChannelKeys {
    /// P(ServerNonce, ClientNonce): the client signs/encrypts with these, the server verifies/decrypts.
    pub client: SymmetricKeys,
    /// P(ClientNonce, ServerNonce): the server signs/encrypts with these, the client verifies/decrypts.
    pub server: SymmetricKeys,
}

impl ChannelKeys {
    /// Keys a server uses: (for chunks it sends, for chunks it receives).
    pub fn server_role(&self) -> (&SymmetricKeys, &SymmetricKeys) {
        (&self.server, &self.client)
    }

    /// Keys a client uses: (for chunks it sends, for chunks it receives).
    pub fn client_role(&self) -> (&SymmetricKeys, &SymmetricKeys) {
        (&self.client, &self.server)
    }
}

/// Derives both key sets of a channel from the nonces exchanged in OpenSecureChannel.
///
/// Client keys = P(secret = ServerNonce, seed = ClientNonce), server keys the reverse; each output
/// is split into signing key, encrypting key and IV. Nonces of the wrong length give
/// `BadNonceInvalid`; the None policy and unsupported policies give `BadSecurityPolicyRejected`.
pub fn derive_channel_keys(
    policy: PolicyId,
    client_nonce: &[u8],
    server_nonce: &[u8],
) -> Result<ChannelKeys, u32> {
    if client_nonce.len() != policy.nonce_len() || server_nonce.len() != policy.nonce_len() {
        return Err(status::BAD_NONCE_INVALID);
    }
    Ok(ChannelKeys {
        client: derive_keys(policy, server_nonce, client_nonce)?,
        server: derive_keys(policy, client_nonce, server_nonce)?,
    })
}

/// Derives one key set: P_hash(secret, seed) split into signing key, encrypting key and IV.
pub fn derive_keys(policy: PolicyId, secret: &[u8], seed: &[u8]) -> Result<SymmetricKeys, u32> {
    if policy == PolicyId::None {
        return Err(status::BAD_SECURITY_POLICY_REJECTED);
    }
    let (sig_len, enc_len, iv_len) = policy.symmetric_key_lens();
    let mut buf = Zeroizing::new([0u8; 96]);
    let total = sig_len + enc_len + iv_len;
    // The policies' key lengths fit the buffer and their IV is one AES block.
    let keys = buf.get_mut(..total).ok_or(status::BAD_INTERNAL_ERROR)?;
    p_hash(policy.hash(), secret, seed, keys);
    let (sig_key, rest) = keys
        .split_at_checked(sig_len)
        .ok_or(status::BAD_INTERNAL_ERROR)?;
    let (enc_key, iv) = rest
        .split_at_checked(enc_len)
        .ok_or(status::BAD_INTERNAL_ERROR)?;
    let iv: [u8; AES_BLOCK_SIZE] = iv.try_into().map_err(|_| status::BAD_INTERNAL_ERROR)?;
    SymmetricKeys::new(policy, sig_key, enc_key, &iv)
}

impl SymmetricKeys {
    /// Builds a key set from explicit keys (lengths must match the policy).
    pub fn new(
        policy: PolicyId,
        signing_key: &[u8],
        encrypting_key: &[u8],
        iv: &[u8],
    ) -> Result<Self, u32> {
        let (sig_len, enc_len, iv_len) = policy.symmetric_key_lens();
        if policy == PolicyId::None
            || signing_key.len() != sig_len
            || encrypting_key.len() != enc_len
            || iv.len() != iv_len
        {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        let hash = match policy.symmetric_signature_len() {
            20 => MacHash::Sha1,
            _ => MacHash::Sha256,
        };
        Ok(SymmetricKeys {
            policy,
            signing_key: Zeroizing::new(signing_key.to_vec()),
            encrypting_key: Zeroizing::new(encrypting_key.to_vec()),
            keys: ChunkKeys::new(hash, signing_key, Some(encrypting_key), iv)?,
        })
    }

    /// The policy these keys belong to.
    pub fn policy(&self) -> PolicyId {
        self.policy
    }

    /// The derived signing key.
    pub fn signing_key(&self) -> &[u8] {
        &self.signing_key
    }

    /// The derived encrypting key.
    pub fn encrypting_key(&self) -> &[u8] {
        &self.encrypting_key
    }

    /// The derived IV (used unchanged for every chunk).
    pub fn iv(&self) -> &[u8; AES_BLOCK_SIZE] {
        self.keys.iv()
    }

    /// Signature length in bytes (HMAC output).
    pub fn signature_len(&self) -> usize {
        self.policy.symmetric_signature_len()
    }

    /// HMAC over `data` written into `out` (`out.len()` must be [`Self::signature_len`]).
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

    /// AES-CBC encryption in place from the derived IV; `buf.len()` must be a multiple of 16.
    pub fn encrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        self.keys.encrypt_in_place(buf)
    }

    /// AES-CBC decryption in place from the derived IV; `buf.len()` must be a multiple of 16
    /// (otherwise `BadSecurityChecksFailed`, as the data came from the peer).
    pub fn decrypt_in_place(&self, buf: &mut [u8]) -> Result<(), u32> {
        self.keys.decrypt_in_place(buf)
    }

    /// Secures a complete chunk in place before sending.
    ///
    /// `chunk` is the whole chunk: message header, security header, sequence header, body, padding
    /// (when encrypting; see [`crate::padding_len`]) and, at its end, `signature_len()` bytes
    /// reserved for the signature. The signature is computed over everything before it; then, in
    /// SignAndEncrypt mode, `chunk[encrypt_from..]` (sequence header to signature) is encrypted.
    pub fn seal_chunk(
        &self,
        chunk: &mut [u8],
        encrypt_from: usize,
        mode: SecurityMode,
    ) -> Result<(), u32> {
        let sig_len = self.signature_len();
        if chunk.len() < sig_len || encrypt_from > chunk.len() - sig_len {
            return Err(status::BAD_INVALID_ARGUMENT);
        }
        match mode {
            SecurityMode::None => Ok(()),
            SecurityMode::Sign | SecurityMode::SignAndEncrypt => {
                let split = chunk.len() - sig_len;
                let (signed, sig) = chunk.split_at_mut(split);
                self.sign(signed, sig)?;
                if mode == SecurityMode::SignAndEncrypt {
                    self.encrypt_in_place(
                        chunk
                            .get_mut(encrypt_from..)
                            .ok_or(status::BAD_INVALID_ARGUMENT)?,
                    )?;
                }
                Ok(())
            }
        }
    }

    /// Opens a received chunk in place: decrypts `chunk[encrypt_from..]` (SignAndEncrypt) and
    /// verifies the trailing signature. Returns the length of the chunk without the signature
    /// (padding, if any, is still there: see [`crate::check_padding`]).
    ///
    /// Any failure is `BadSecurityChecksFailed`; the caller closes the channel.
    pub fn open_chunk(
        &self,
        chunk: &mut [u8],
        encrypt_from: usize,
        mode: SecurityMode,
    ) -> Result<usize, u32> {
        let sig_len = self.signature_len();
        if chunk.len() < sig_len || encrypt_from > chunk.len() - sig_len {
            return Err(status::BAD_SECURITY_CHECKS_FAILED);
        }
        match mode {
            SecurityMode::None => Ok(chunk.len()),
            SecurityMode::Sign | SecurityMode::SignAndEncrypt => {
                if mode == SecurityMode::SignAndEncrypt {
                    self.decrypt_in_place(
                        chunk
                            .get_mut(encrypt_from..)
                            .ok_or(status::BAD_SECURITY_CHECKS_FAILED)?,
                    )?;
                }
                let split = chunk.len() - sig_len;
                let (signed, sig) = chunk.split_at(split);
                if self.verify(signed, sig) {
                    Ok(split)
                } else {
                    Err(status::BAD_SECURITY_CHECKS_FAILED)
                }
            }
        }
    }
}
