//! Key derivation: P_SHA256 / P_SHA1 (the TLS 1.2 P_hash, RFC 5246 §5), OPC 10000-6 §6.7.5.

use hmac::{Hmac, Mac};
use sha1::Sha1;
use sha2::Sha256;

use crate::policy::HashAlg;

/// P_hash(secret, seed) written into `out` (any length). No label is prepended: OPC UA passes the
/// nonce as the whole seed. For the TLS PRF, pass `label ‖ seed` as `seed`.
pub fn p_hash(hash: HashAlg, secret: &[u8], seed: &[u8], out: &mut [u8]) {
    match hash {
        HashAlg::Sha256 => p_hash_impl::<Hmac<Sha256>>(secret, seed, out),
        HashAlg::Sha1 => p_hash_impl::<Hmac<Sha1>>(secret, seed, out),
    }
}

/// P_SHA256(secret, seed) into `out`.
pub fn p_sha256(secret: &[u8], seed: &[u8], out: &mut [u8]) {
    p_hash(HashAlg::Sha256, secret, seed, out)
}

/// P_SHA1(secret, seed) into `out`.
pub fn p_sha1(secret: &[u8], seed: &[u8], out: &mut [u8]) {
    p_hash(HashAlg::Sha1, secret, seed, out)
}

fn p_hash_impl<M: Mac + hmac::digest::KeyInit + Clone>(secret: &[u8], seed: &[u8], out: &mut [u8]) {
    // HMAC accepts keys of any length, so new_from_slice cannot fail.
    let Ok(keyed) = <M as hmac::digest::KeyInit>::new_from_slice(secret) else {
        return;
    };
    // A(1) = HMAC(secret, seed); A(i) = HMAC(secret, A(i-1)); out = HMAC(A(i) ‖ seed) …
    let mut a = {
        let mut m = keyed.clone();
        m.update(seed);
        m.finalize().into_bytes()
    };
    // One HMAC output per piece of `out` (the last piece may be short).
    for piece in out.chunks_mut(<M as hmac::digest::OutputSizeUser>::output_size()) {
        let mut m = keyed.clone();
        m.update(&a);
        m.update(seed);
        let block = m.finalize().into_bytes();
        for (o, b) in piece.iter_mut().zip(block.iter()) {
            *o = *b;
        }
        let mut m = keyed.clone();
        m.update(&a);
        a = m.finalize().into_bytes();
    }
}
