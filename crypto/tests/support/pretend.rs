//! A client policy that announces ECC_nistP256 but signs its OpenSecureChannel with another
//! policy's key, or breaks its signatures: the refusal tests of crypto/tests/ecc.rs (in
//! memory) and shards/tests/ecc_client.rs (against the binary) include this file.

use std::sync::Arc;

use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::secure_channel::{ChunkCrypto, CryptoLayout, Role, SecurityPolicy};
use uaring_core::{Now, StatusCode};
use uaring_crypto::EccCurve;

/// A client-side policy that announces ECC_nistP256 but signs with another policy's key
/// (and, with `corrupt`, flips a bit of every signature it makes).
pub struct Pretend {
    pub inner: Arc<dyn SecurityPolicy>,
    pub corrupt: bool,
}

struct Corrupt(Box<dyn ChunkCrypto>, bool);

impl ChunkCrypto for Corrupt {
    fn send_layout(&self) -> CryptoLayout {
        self.0.send_layout()
    }
    fn recv_layout(&self) -> CryptoLayout {
        self.0.recv_layout()
    }
    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode> {
        self.0.sign(data, signature)?;
        if self.1 {
            signature[3] ^= 0x10;
        }
        Ok(())
    }
    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode> {
        self.0.verify(data, signature)
    }
    fn encrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        self.0.encrypt(buf, start)
    }
    fn decrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        self.0.decrypt(buf, start)
    }
}

impl SecurityPolicy for Pretend {
    fn uri(&self) -> &str {
        EccCurve::NistP256.policy_uri()
    }
    fn legacy_sequence_numbers(&self) -> bool {
        false
    }
    fn nonce_len(&self) -> usize {
        EccCurve::NistP256.nonce_len()
    }
    fn local_certificate(&self) -> Option<&[u8]> {
        self.inner.local_certificate()
    }
    fn thumbprint(&self, certificate: &[u8]) -> Option<Vec<u8>> {
        self.inner.thumbprint(certificate)
    }
    fn asymmetric(
        &self,
        role: Role,
        peer: Option<&[u8]>,
        thumbprint: Option<&[u8]>,
        now: Now,
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        // Only `sign` is used (the server refuses before it answers): the inner policy is
        // given its own certificate as the peer's, which it accepts whatever the curve.
        let _ = peer;
        let c = self
            .inner
            .asymmetric(role, self.inner.local_certificate(), thumbprint, now)?;
        // An ECC OPN is signed, not encrypted: keep the RSA signature, drop encryption.
        struct SignOnly(Box<dyn ChunkCrypto>);
        impl ChunkCrypto for SignOnly {
            fn send_layout(&self) -> CryptoLayout {
                CryptoLayout {
                    encrypted: false,
                    plain_block_size: 1,
                    cipher_block_size: 1,
                    extra_padding_byte: false,
                    ..self.0.send_layout()
                }
            }
            fn recv_layout(&self) -> CryptoLayout {
                self.0.recv_layout()
            }
            fn sign(&self, d: &[u8], s: &mut [u8]) -> Result<(), StatusCode> {
                self.0.sign(d, s)
            }
            fn verify(&self, d: &[u8], s: &[u8]) -> Result<(), StatusCode> {
                self.0.verify(d, s)
            }
            fn encrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
                Ok(())
            }
            fn decrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
                Ok(())
            }
        }
        Ok(Box::new(Corrupt(Box::new(SignOnly(c)), self.corrupt)))
    }
    fn symmetric(
        &self,
        _: Role,
        _: MessageSecurityMode,
        _: &[u8],
        _: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        Err(StatusCode::BadInternalError)
    }
}
