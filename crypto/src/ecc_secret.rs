//! The EccEncryptedSecret (OPC 10000-4 §7.41.2.5, OPC 10000-6 §6.8.2–6.8.3): how a UserName
//! password travels to a server over an ECC policy, where there is no RSA key to encrypt it
//! to.
//!
//! The server hands out an ephemeral ECDH key (the receiver key, signed with its application
//! key: the ECDHKey of a CreateSession or ActivateSession response header). The client makes
//! its own (the sender key), derives an AES key and IV from the ECDH secret of the two with
//! HKDF, encrypts `serverNonce ‖ password ‖ padding`, and signs the whole structure with its
//! application key:
//!
//! ```text
//! TypeId          NodeId      i=17546 (EccEncryptedSecret)
//! EncodingMask    Byte        0x01
//! Length          UInt32      the bytes after this field, signature included
//! SecurityPolicyUri String
//! Certificate     ByteString  the signer's certificate (chain), or null: the client's
//!                             application certificate of the channel
//! SigningTime     DateTime
//! KeyDataLength   UInt16      the two ByteStrings below, length fields included
//! SenderPublicKey   ByteString  x ‖ y
//! ReceiverPublicKey ByteString  x ‖ y (the server's ephemeral key)
//! --- AES-CBC encrypted from here ---
//! Nonce           ByteString  the last server nonce of the session
//! Secret          ByteString  the password
//! Padding         Byte[n]     each byte n & 0xFF; n makes the payload whole blocks (and
//!                             Secret + padding at least one block)
//! PaddingSize     UInt16      n
//! --- end of encryption ---
//! Signature       Byte[]      ECDSA (r ‖ s) over everything before it
//! ```
//!
//! The key material is `HKDF(salt = info = L ‖ "opcua-secret" ‖ SenderPublicKey ‖
//! ReceiverPublicKey, IKM = the ECDH shared secret)`, `L` (UInt16, little endian) bytes long:
//! the encrypting key (16 bytes for the 256-bit curves, 32 for the 384-bit ones), then the
//! 16-byte IV; HKDF-SHA256 or HKDF-SHA384 likewise. The same layout and derivation are what
//! open62541 1.5
//! and the OPC Foundation's .NET stack produce.
//!
//! open62541 1.5 (Mbed TLS) drops the leading zero bytes of the ECDH secret before the HKDF
//! (see [`crate::ecc_policy`]); a secret whose shared secret starts with zero is tried with
//! both derivations, and only the one whose plaintext carries the session's nonce and a
//! well-formed padding is taken (the signature was checked before either).

use subtle::ConstantTimeEq;
use uaring_core::{ByteString, DateTime, Decode, DecodeLimits, Decoder, Encode, NodeId, UaString};
use zeroize::Zeroizing;

use crate::cert::{leaf_der, Certificate};
use crate::ecc::{ecdsa_verify, hkdf_into, EccCurve, EphemeralKey};
use crate::ecc_policy::EccIdentity;
use crate::policy::AES_BLOCK_SIZE;
use crate::status;
use crate::user::PASSWORD_LEN_MAX;

/// The DataType id of the EccEncryptedSecret, the TypeId of the structure.
pub const ECC_ENCRYPTED_SECRET_TYPE_ID: u32 = 17546;
/// The EncodingMask of the structure (binary).
const ENCODING_BINARY: u8 = 0x01;
/// The HKDF label of a secret's keys.
const LABEL: &[u8] = b"opcua-secret";
/// The longest EccEncryptedSecret accepted: a chain of a few certificates besides the
/// keys and the password.
pub const ECC_SECRET_LEN_MAX: usize = 64 * 1024;

/// Whether `bytes` start like an EccEncryptedSecret: the TypeId i=17546 in any numeric
/// NodeId encoding. A UserName password that is not encrypted does not (it would have to
/// start with these bytes by chance, and then fail to verify).
pub fn is_ecc_encrypted_secret(bytes: &[u8]) -> bool {
    let mut d = Decoder::new(bytes, DecodeLimits::default());
    NodeId::decode(&mut d).is_ok_and(|id| id.as_ns0() == Some(ECC_ENCRYPTED_SECRET_TYPE_ID))
}

/// The encrypting key and IV of a secret between the two ephemeral keys.
fn secret_keys(
    curve: EccCurve,
    shared_secret: &[u8],
    sender_public_key: &[u8],
    receiver_public_key: &[u8],
) -> Result<(Zeroizing<Vec<u8>>, [u8; AES_BLOCK_SIZE]), u32> {
    let (_, key_len, iv_len) = curve.symmetric_key_lens();
    let len = key_len + iv_len;
    let l = u16::try_from(len).map_err(|_| status::BAD_INTERNAL_ERROR)?;
    let mut salt = Vec::with_capacity(2 + LABEL.len() + 2 * curve.nonce_len());
    salt.extend_from_slice(&l.to_le_bytes());
    salt.extend_from_slice(LABEL);
    salt.extend_from_slice(sender_public_key);
    salt.extend_from_slice(receiver_public_key);
    let mut material = Zeroizing::new(vec![0u8; len]);
    hkdf_into(curve, &salt, shared_secret, &salt, &mut material)?;
    let (key, iv) = material
        .split_at_checked(key_len)
        .ok_or(status::BAD_INTERNAL_ERROR)?;
    let iv: [u8; AES_BLOCK_SIZE] = iv.try_into().map_err(|_| status::BAD_INTERNAL_ERROR)?;
    Ok((Zeroizing::new(key.to_vec()), iv))
}

fn cbc_encrypt(key: &[u8], iv: &[u8; AES_BLOCK_SIZE], buf: &mut [u8]) -> Result<(), u32> {
    use cbc::cipher::block_padding::NoPadding;
    use cbc::cipher::{BlockEncryptMut, KeyIvInit};
    let len = buf.len();
    let res = match key.len() {
        16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|_| status::BAD_INTERNAL_ERROR)?
            .encrypt_padded_mut::<NoPadding>(buf, len)
            .map(|_| ()),
        32 => cbc::Encryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|_| status::BAD_INTERNAL_ERROR)?
            .encrypt_padded_mut::<NoPadding>(buf, len)
            .map(|_| ()),
        _ => return Err(status::BAD_INTERNAL_ERROR),
    };
    res.map_err(|_| status::BAD_INTERNAL_ERROR)
}

fn cbc_decrypt(key: &[u8], iv: &[u8; AES_BLOCK_SIZE], buf: &mut [u8]) -> Result<(), u32> {
    use cbc::cipher::block_padding::NoPadding;
    use cbc::cipher::{BlockDecryptMut, KeyIvInit};
    let res = match key.len() {
        16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(key, iv)
            .map_err(|_| status::BAD_INTERNAL_ERROR)?
            .decrypt_padded_mut::<NoPadding>(buf)
            .map(|_| ()),
        32 => cbc::Decryptor::<aes::Aes256>::new_from_slices(key, iv)
            .map_err(|_| status::BAD_INTERNAL_ERROR)?
            .decrypt_padded_mut::<NoPadding>(buf)
            .map(|_| ()),
        _ => return Err(status::BAD_INTERNAL_ERROR),
    };
    res.map_err(|_| status::BAD_IDENTITY_TOKEN_INVALID)
}

/// Client side: `secret` (a password) as an EccEncryptedSecret for the server whose
/// ephemeral key is `receiver_public_key` (`x ‖ y`, from the ECDHKey of the last
/// CreateSession or ActivateSession response), bound to the session's last `server_nonce`,
/// signed with `signer`'s application key. `with_certificate`: put the signer's certificate
/// in the Certificate field (it may stay null when the signer is the channel's client
/// certificate). The bytes are the UserNameIdentityToken's `password`, with an empty
/// `encryptionAlgorithm`.
pub fn encrypt_secret(
    signer: &EccIdentity,
    with_certificate: bool,
    receiver_public_key: &[u8],
    server_nonce: &[u8],
    secret: &[u8],
    signing_time: DateTime,
) -> Result<Vec<u8>, u32> {
    let sender = EphemeralKey::generate(signer.curve())?;
    let shared = sender.shared_secret(receiver_public_key)?;
    encrypt_secret_with(
        signer,
        with_certificate,
        &sender,
        &shared,
        receiver_public_key,
        server_nonce,
        secret,
        signing_time,
    )
}

/// [`encrypt_secret`] with a given sender key and HKDF input: the ECDH secret of `sender`
/// and the receiver key, or what another stack derives from instead (open62541 1.5 drops
/// the secret's leading zero bytes). For tests.
#[doc(hidden)]
pub fn encrypt_secret_with(
    signer: &EccIdentity,
    with_certificate: bool,
    sender: &EphemeralKey,
    ikm: &[u8],
    receiver_public_key: &[u8],
    server_nonce: &[u8],
    secret: &[u8],
    signing_time: DateTime,
) -> Result<Vec<u8>, u32> {
    let curve = signer.curve();
    if receiver_public_key.len() != curve.nonce_len() || sender.curve() != curve {
        return Err(status::BAD_NONCE_INVALID);
    }
    if secret.len() > PASSWORD_LEN_MAX {
        return Err(status::BAD_INVALID_ARGUMENT);
    }
    let (key, iv) = secret_keys(curve, ikm, sender.nonce(), receiver_public_key)?;

    let mut out = Vec::with_capacity(
        512 + secret.len()
            + server_nonce.len()
            + signer.cert.der().len() * usize::from(with_certificate),
    );
    NodeId::ns0(ECC_ENCRYPTED_SECRET_TYPE_ID).encode(&mut out);
    out.push(ENCODING_BINARY);
    let length_at = out.len();
    out.extend_from_slice(&[0; 4]);
    UaString::from(curve.policy_uri()).encode(&mut out);
    if with_certificate {
        ByteString::from(signer.cert.der()).encode(&mut out);
    } else {
        ByteString::null().encode(&mut out);
    }
    signing_time.encode(&mut out);
    let key_data_len = 8 + sender.nonce().len() + receiver_public_key.len();
    let key_data_len = u16::try_from(key_data_len).map_err(|_| status::BAD_INTERNAL_ERROR)?;
    key_data_len.encode(&mut out);
    ByteString::from(sender.nonce()).encode(&mut out);
    ByteString::from(receiver_public_key).encode(&mut out);

    let payload_at = out.len();
    ByteString::from(server_nonce).encode(&mut out);
    ByteString::from(secret).encode(&mut out);
    let base = out.len() - payload_at;
    let mut padding = (AES_BLOCK_SIZE - (base + 2) % AES_BLOCK_SIZE) % AES_BLOCK_SIZE;
    if secret.len() + padding < AES_BLOCK_SIZE {
        padding += AES_BLOCK_SIZE;
    }
    out.resize(out.len() + padding, (padding & 0xFF) as u8);
    (padding as u16).encode(&mut out);
    let payload = out
        .get_mut(payload_at..)
        .ok_or(status::BAD_INTERNAL_ERROR)?;
    cbc_encrypt(&key, &iv, payload)?;

    let signature_len = curve.signature_len();
    let length = out.len() + signature_len - length_at - 4;
    let length = u32::try_from(length).map_err(|_| status::BAD_INTERNAL_ERROR)?;
    out.get_mut(length_at..length_at + 4)
        .ok_or(status::BAD_INTERNAL_ERROR)?
        .copy_from_slice(&length.to_le_bytes());
    let signed_len = out.len();
    out.resize(signed_len + signature_len, 0);
    let (signed, signature) = out.split_at_mut(signed_len);
    signer.key.sign_into(signed, signature)?;
    Ok(out)
}

/// The parts of a received EccEncryptedSecret, its signature checked.
struct Parsed<'a> {
    sender_public_key: &'a [u8],
    /// The encrypted payload (whole blocks).
    payload: &'a [u8],
}

/// Parses `data` and verifies its signature by `signer` (the client's application
/// certificate of the channel). Every fault is `BadIdentityTokenInvalid`.
fn parse_and_verify<'a>(
    curve: EccCurve,
    receiver: &EphemeralKey,
    signer: &Certificate,
    data: &'a [u8],
) -> Result<Parsed<'a>, u32> {
    const BAD: u32 = status::BAD_IDENTITY_TOKEN_INVALID;
    if data.len() > ECC_SECRET_LEN_MAX {
        return Err(BAD);
    }
    let limits = DecodeLimits {
        max_string_len: 256,
        max_byte_string_len: ECC_SECRET_LEN_MAX,
        ..DecodeLimits::default()
    };
    let mut d = Decoder::new(data, limits);
    let type_id = NodeId::decode(&mut d).map_err(|_| BAD)?;
    if type_id.as_ns0() != Some(ECC_ENCRYPTED_SECRET_TYPE_ID) {
        return Err(BAD);
    }
    if u8::decode(&mut d).map_err(|_| BAD)? != ENCODING_BINARY {
        return Err(BAD);
    }
    let length = u32::decode(&mut d).map_err(|_| BAD)? as usize;
    // The Length counts every byte after it, the signature included: nothing may follow.
    if length != d.remaining() {
        return Err(BAD);
    }
    let signature_len = curve.signature_len();
    let signed_len = data.len().checked_sub(signature_len).ok_or(BAD)?;
    let policy_uri = UaString::decode(&mut d).map_err(|_| BAD)?;
    if policy_uri.as_str() != curve.policy_uri() {
        return Err(BAD);
    }
    let certificate = ByteString::decode(&mut d).map_err(|_| BAD)?;
    if !certificate.is_empty() {
        // Over a secure channel the signer is the channel's client: a chain naming
        // another certificate is not taken.
        let leaf = leaf_der(certificate.as_bytes()).ok_or(BAD)?;
        if leaf != signer.der() {
            return Err(BAD);
        }
    }
    let _signing_time = DateTime::decode(&mut d).map_err(|_| BAD)?;
    let key_data_len = usize::from(u16::decode(&mut d).map_err(|_| BAD)?);
    let key_data_at = d.position();
    let sender = ByteString::decode(&mut d).map_err(|_| BAD)?;
    let receiver_key = ByteString::decode(&mut d).map_err(|_| BAD)?;
    if d.position() - key_data_at != key_data_len {
        return Err(BAD);
    }
    if sender.as_bytes().len() != curve.nonce_len() || receiver_key.as_bytes() != receiver.nonce() {
        return Err(BAD);
    }
    let payload_at = d.position();
    let payload = data.get(payload_at..signed_len).ok_or(BAD)?;
    if payload.is_empty() || !payload.len().is_multiple_of(AES_BLOCK_SIZE) {
        return Err(BAD);
    }
    let (signed, signature) = data.split_at_checked(signed_len).ok_or(BAD)?;
    ecdsa_verify(curve, signer, signed, signature).map_err(|_| BAD)?;
    let sender_public_key = data
        .get(key_data_at + 4..key_data_at + 4 + curve.nonce_len())
        .ok_or(BAD)?;
    Ok(Parsed {
        sender_public_key,
        payload,
    })
}

/// The password of a decrypted payload `nonce ‖ secret ‖ padding ‖ paddingSize`, if it is
/// well formed and carries `server_nonce`.
fn open_payload(plain: &[u8], server_nonce: &[u8]) -> Option<Zeroizing<Vec<u8>>> {
    let mut d = Decoder::new(plain, DecodeLimits::default());
    let nonce_len = d.read_length(plain.len(), 1, "nonce").ok()??;
    let nonce = d.take(nonce_len, "nonce").ok()?;
    let secret_len = d.read_length(PASSWORD_LEN_MAX, 1, "secret").ok()??;
    let secret = d.take(secret_len, "secret").ok()?;
    let rest = d.rest();
    let (padding, size) = rest.split_last_chunk::<2>()?;
    let count = usize::from(u16::from_le_bytes(*size));
    if padding.len() != count {
        return None;
    }
    let fill = (count & 0xFF) as u8;
    let mut ok = nonce.ct_eq(server_nonce);
    for b in padding {
        ok &= b.ct_eq(&fill);
    }
    bool::from(ok).then(|| Zeroizing::new(secret.to_vec()))
}

/// Server side: the password in the EccEncryptedSecret `data`, which `signer` (the
/// client's application certificate of the channel, already validated) signed, encrypted
/// to our ephemeral key `receiver` (the one handed out last to the session), bound to the
/// session's last `server_nonce`. Anything wrong — the structure, the policy, another
/// receiver key, the signature, the padding, another nonce — is `BadIdentityTokenInvalid`.
pub fn decrypt_secret(
    receiver: &EphemeralKey,
    signer: &Certificate,
    data: &[u8],
    server_nonce: &[u8],
) -> Result<Zeroizing<Vec<u8>>, u32> {
    const BAD: u32 = status::BAD_IDENTITY_TOKEN_INVALID;
    let curve = receiver.curve();
    if server_nonce.is_empty() {
        return Err(BAD);
    }
    let parsed = parse_and_verify(curve, receiver, signer, data)?;
    let shared = receiver
        .shared_secret(parsed.sender_public_key)
        .map_err(|_| BAD)?;
    let zeros = shared.iter().take_while(|b| **b == 0).count();
    let candidates: &[&[u8]] = if zeros > 0 {
        // open62541 1.5 derives from the secret without its leading zero bytes.
        &[&shared, shared.get(zeros..).unwrap_or_default()]
    } else {
        &[&shared]
    };
    let mut plain = Zeroizing::new(vec![0u8; parsed.payload.len()]);
    for secret in candidates {
        let (key, iv) = secret_keys(curve, secret, parsed.sender_public_key, receiver.nonce())?;
        plain.copy_from_slice(parsed.payload);
        cbc_decrypt(&key, &iv, &mut plain)?;
        if let Some(password) = open_payload(&plain, server_nonce) {
            return Ok(password);
        }
    }
    Err(BAD)
}
