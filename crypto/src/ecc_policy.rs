//! The ECC security policies plugged into uaring-core: [`EccPolicy`] implements core's
//! [`SecurityPolicy`] for ECC_nistP256, ECC_nistP384, ECC_brainpoolP256r1 and
//! ECC_brainpoolP384r1 (OPC 10000-7), Sign and SignAndEncrypt, with the cryptography of
//! [`crate::ecc`].
//!
//! - OpenSecureChannel: the chunks are signed with ECDSA (the sender's application key) and
//!   never encrypted; the nonces are ephemeral ECDH public keys ([`SecurityPolicy::new_token`]
//!   makes ours and derives the token's keys with HKDF from the shared secret; the ephemeral
//!   private key lives only for that call). Sequence numbers are the non-legacy ones (start at
//!   0, wrap to 0).
//! - The client certificate must carry a key on the policy's curve: an RSA key or a key on the
//!   other curve is `BadCertificatePolicyCheckFailed` (after the trust check, which comes
//!   first as for the RSA policies).
//! - CreateSession's serverSignature and ActivateSession's clientSignature are ECDSA over the
//!   same data as with RSA (certificate ‖ nonce). open62541 1.5 sends an empty
//!   SignatureData.algorithm for these (pre-1.05.07) ECC policies; an empty algorithm or the
//!   policy's ECDSA URI is accepted.
//! - open62541 1.5 (Mbed TLS) drops the leading zero bytes of the ECDH shared secret before
//!   the HKDF (RFC 8422 §5.10 says they must stay), so in about one handshake in 256 its keys
//!   differ from the specification's. A token whose secret starts with zero bytes derives both
//!   key sets; the peer's first chunk that verifies settles which one the token uses from then
//!   on (a chunk is only ever accepted when it verifies with a key set derived from the
//!   secret).
//! - UserName passwords come as an EccEncryptedSecret (Part 4 §7.41.2.5, [`crate::ecc_secret`]):
//!   the policy hands out ephemeral keys signed with its application key
//!   ([`SecurityPolicy::new_ephemeral_key`], the ECDHKey of the session responses) and
//!   decrypts a secret sent to one ([`SecurityPolicy::decrypt_encrypted_secret`]) after
//!   checking the client's signature over it. X.509 user tokens are signed with ECDSA on the
//!   policy's curve, like the ActivateSession client signature.

use std::net::IpAddr;
use std::sync::Arc;

use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::secure_channel::{
    ChunkCrypto, CryptoLayout, PendingToken, Role, SecurityPolicy, SessionEphemeralKey,
};
use uaring_core::types::StatusCode;
use uaring_core::Now;

use crate::cert::Certificate;
use crate::ecc::EphemeralKey;
use crate::ecc::{derive_ecc_keys, ecdsa_verify, EccCurve, EccPrivateKey, EccSymmetricKeys};
use crate::ecc_secret::decrypt_secret;
use crate::policy::AES_BLOCK_SIZE;
use crate::uasc::{leaf_thumbprint, opn_peer, signer_leaf, ShardTrust};

fn sc(code: u32) -> StatusCode {
    StatusCode(code)
}

/// An ECC application instance certificate and its key.
pub struct EccIdentity {
    /// The certificate (DER), sent as SenderCertificate and ServerCertificate.
    pub cert: Certificate,
    /// The private key.
    pub key: EccPrivateKey,
}

impl std::fmt::Debug for EccIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EccIdentity")
            .field("curve", &self.key.curve())
            .finish_non_exhaustive()
    }
}

impl EccIdentity {
    /// Pairs a certificate with its key (they must match).
    pub fn new(cert: Certificate, key: EccPrivateKey) -> Result<Arc<EccIdentity>, String> {
        if !key.matches(&cert) {
            return Err("the private key does not belong to the certificate".into());
        }
        Ok(Arc::new(EccIdentity { cert, key }))
    }

    /// The curve of the key.
    pub fn curve(&self) -> EccCurve {
        self.key.curve()
    }
}

/// An ECC security policy: the curve, the own ECC identity and (server side) the shard's
/// trust state.
pub struct EccPolicy {
    curve: EccCurve,
    own: Arc<EccIdentity>,
    trust: Option<Arc<ShardTrust>>,
}

impl std::fmt::Debug for EccPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EccPolicy")
            .field("curve", &self.curve)
            .finish_non_exhaustive()
    }
}

impl EccPolicy {
    /// A server-side policy of the curve of `own`: client certificates are validated by
    /// `trust`.
    pub fn server(own: Arc<EccIdentity>, trust: Arc<ShardTrust>) -> Arc<EccPolicy> {
        Arc::new(EccPolicy {
            curve: own.curve(),
            own,
            trust: Some(trust),
        })
    }

    /// A client-side policy: the server certificate is taken as given.
    pub fn client(own: Arc<EccIdentity>) -> Arc<EccPolicy> {
        Arc::new(EccPolicy {
            curve: own.curve(),
            own,
            trust: None,
        })
    }

    /// The curve.
    pub fn curve(&self) -> EccCurve {
        self.curve
    }

    /// The token's chunk protection from our ephemeral key and the peer's nonce (its
    /// ephemeral public key): ECDH, then the HKDF of Part 6 §6.8.1.
    fn keys(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        ephemeral: &EphemeralKey,
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        let encrypt = match mode {
            MessageSecurityMode::Sign => false,
            MessageSecurityMode::SignAndEncrypt => true,
            _ => return Err(StatusCode::BadSecurityModeRejected),
        };
        if remote_nonce.len() != self.curve.nonce_len() {
            return Err(StatusCode::BadNonceInvalid);
        }
        let shared = ephemeral.shared_secret(remote_nonce).map_err(sc)?;
        let local = ephemeral.nonce();
        let (client_nonce, server_nonce) = match role {
            Role::Client => (local, remote_nonce),
            Role::Server => (remote_nonce, local),
        };
        let keys = |secret: &[u8]| {
            derive_ecc_keys(self.curve, encrypt, secret, client_nonce, server_nonce)
                .map(|(client, server)| match role {
                    Role::Client => (client, server),
                    Role::Server => (server, client),
                })
                .map_err(sc)
        };
        let (send, recv) = keys(&shared)?;
        // open62541 1.5 (Mbed TLS) drops the leading zero bytes of the shared secret before
        // the HKDF, which RFC 8422 §5.10 (the ECDH of Part 6 §6.8.1) forbids: in about one
        // handshake out of 256 its keys differ from ours. Those keys are derived too, and the
        // peer's first authenticated chunk shows which ones it uses.
        let truncated = match shared.iter().position(|b| *b != 0) {
            Some(first) if first > 0 => Some(Box::new(keys(shared.get(first..).unwrap_or(&[]))?)),
            _ => None,
        };
        Ok(Box::new(EccSymCrypto {
            encrypt,
            send,
            recv,
            truncated,
            which: std::cell::Cell::new(Which::Unknown),
        }))
    }

    /// A key on this policy's curve, else BadCertificatePolicyCheckFailed.
    fn check_curve(&self, cert: &Certificate) -> Result<(), StatusCode> {
        if cert.ec_curve() == Some(self.curve) {
            Ok(())
        } else {
            Err(StatusCode::BadCertificatePolicyCheckFailed)
        }
    }
}

impl SecurityPolicy for EccPolicy {
    fn uri(&self) -> &str {
        self.curve.policy_uri()
    }

    fn legacy_sequence_numbers(&self) -> bool {
        false
    }

    fn nonce_len(&self) -> usize {
        self.curve.nonce_len()
    }

    fn local_certificate(&self) -> Option<&[u8]> {
        Some(self.own.cert.der())
    }

    fn thumbprint(&self, certificate: &[u8]) -> Option<Vec<u8>> {
        Some(leaf_thumbprint(certificate))
    }

    fn asymmetric(
        &self,
        role: Role,
        peer_certificate: Option<&[u8]>,
        receiver_thumbprint: Option<&[u8]>,
        now: Now,
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        let peer = opn_peer(
            role,
            &self.own.cert,
            self.trust.as_deref(),
            peer_certificate,
            receiver_thumbprint,
            now,
        )?;
        self.check_curve(&peer)?;
        Ok(Box::new(EccAsymCrypto {
            curve: self.curve,
            own: self.own.clone(),
            peer,
        }))
    }

    fn symmetric(
        &self,
        _: Role,
        _: MessageSecurityMode,
        _: &[u8],
        _: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        // The keys need the ephemeral private key behind our nonce: only `new_token` has it.
        Err(StatusCode::BadInternalError)
    }

    fn new_token(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        _random_nonce: Vec<u8>,
        remote_nonce: &[u8],
    ) -> Result<(Vec<u8>, Box<dyn ChunkCrypto>), StatusCode> {
        let ephemeral = EphemeralKey::generate(self.curve).map_err(sc)?;
        let local = ephemeral.nonce().to_vec();
        let crypto = self.keys(role, mode, &ephemeral, remote_nonce)?;
        Ok((local, crypto))
    }

    fn begin_token(&self, _random_nonce: Vec<u8>) -> Result<PendingToken, StatusCode> {
        let ephemeral = EphemeralKey::generate(self.curve).map_err(sc)?;
        Ok(PendingToken {
            nonce: ephemeral.nonce().to_vec(),
            secret: Some(Box::new(ephemeral)),
        })
    }

    fn finish_token(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        pending: PendingToken,
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        let ephemeral = pending
            .secret
            .and_then(|s| s.downcast::<EphemeralKey>().ok())
            .ok_or(StatusCode::BadInternalError)?;
        self.keys(role, mode, &ephemeral, remote_nonce)
    }

    fn session_signature_inline(
        &self,
        certificate: &[u8],
        application_uri: Option<&str>,
        now: Now,
    ) -> bool {
        // A P-256 signature (≈ 20 µs) costs about a hand-off to a helper and back; P-384's
        // (≈ 80 µs) does not.
        self.curve == EccCurve::NistP256
            && self
                .trust
                .as_ref()
                .is_some_and(|t| t.remembers_client(certificate, application_uri, now))
    }

    fn offers_ephemeral_keys(&self) -> bool {
        true
    }

    fn new_ephemeral_key(&self) -> Result<SessionEphemeralKey, StatusCode> {
        let key = EphemeralKey::generate(self.curve).map_err(sc)?;
        let signature = self.own.key.sign(key.nonce()).map_err(sc)?;
        Ok(SessionEphemeralKey {
            public_key: key.nonce().to_vec(),
            signature,
            private: Box::new(key),
        })
    }

    fn decrypt_encrypted_secret(
        &self,
        private: &(dyn std::any::Any + Send),
        secret: &[u8],
        server_nonce: &[u8],
        signer_certificate: &[u8],
    ) -> Result<Vec<u8>, StatusCode> {
        let key = private
            .downcast_ref::<EphemeralKey>()
            .filter(|k| k.curve() == self.curve)
            .ok_or(StatusCode::BadIdentityTokenInvalid)?;
        let signer = signer_leaf(self.trust.as_deref(), signer_certificate)
            .map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        decrypt_secret(key, &signer, secret, server_nonce)
            .map(|p| p.to_vec())
            .map_err(sc)
    }

    fn admit_handshake(&self, peer: Option<IpAddr>, now: Now) -> Result<(), StatusCode> {
        match &self.trust {
            Some(t) => t.admit_handshake(peer, now),
            None => Ok(()),
        }
    }

    fn sign_own(&self, data: &[u8]) -> Result<(String, Vec<u8>), StatusCode> {
        let sig = self.own.key.sign(data).map_err(sc)?;
        Ok((self.curve.signature_algorithm_uri().to_owned(), sig))
    }

    fn verify_signature(
        &self,
        signer_certificate: &[u8],
        data: &[u8],
        algorithm_uri: &str,
        signature: &[u8],
    ) -> Result<(), StatusCode> {
        if !algorithm_uri.is_empty() && algorithm_uri != self.curve.signature_algorithm_uri() {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        let signer = signer_leaf(self.trust.as_deref(), signer_certificate)?;
        ecdsa_verify(self.curve, &signer, data, signature)
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }

    fn validate_client_certificate(
        &self,
        certificate: &[u8],
        application_uri: Option<&str>,
        now: Now,
    ) -> Result<(), StatusCode> {
        match &self.trust {
            Some(t) => {
                let leaf = t
                    .validate_client(certificate, application_uri, now)
                    .map_err(sc)?;
                self.check_curve(&leaf)
            }
            None => Ok(()),
        }
    }
}

/// OpenSecureChannel chunks of an ECC policy: ECDSA-signed by the sender, not encrypted.
struct EccAsymCrypto {
    curve: EccCurve,
    own: Arc<EccIdentity>,
    peer: Certificate,
}

impl EccAsymCrypto {
    fn layout(&self) -> CryptoLayout {
        CryptoLayout {
            encrypted: false,
            plain_block_size: 1,
            cipher_block_size: 1,
            signature_len: self.curve.signature_len(),
            extra_padding_byte: false,
        }
    }
}

impl ChunkCrypto for EccAsymCrypto {
    fn send_layout(&self) -> CryptoLayout {
        self.layout()
    }
    fn recv_layout(&self) -> CryptoLayout {
        self.layout()
    }
    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode> {
        self.own.key.sign_into(data, signature).map_err(sc)
    }
    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode> {
        ecdsa_verify(self.curve, &self.peer, data, signature)
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }
    fn encrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
        // The layout says not encrypted; core never asks.
        Err(StatusCode::BadInternalError)
    }
    fn decrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
        Err(StatusCode::BadSecurityChecksFailed)
    }
}

/// Which key derivation the peer of a token uses (see [`EccSymCrypto::truncated`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    /// No authenticated chunk yet: ours (RFC 8422) is sent, both are tried on receipt.
    Unknown,
    /// The shared secret at its full length (RFC 8422; every peer when it has no leading 0).
    Full,
    /// The shared secret without its leading zero bytes (open62541 1.5).
    Truncated,
}

/// MSG / CLO chunks of one ECC token: HMAC and (SignAndEncrypt) AES-CBC, in place.
struct EccSymCrypto {
    encrypt: bool,
    send: EccSymmetricKeys,
    recv: EccSymmetricKeys,
    /// When the shared secret starts with zero bytes: the (send, recv) keys derived from it
    /// without them, as open62541 1.5 derives them.
    truncated: Option<Box<(EccSymmetricKeys, EccSymmetricKeys)>>,
    /// Settled by the first chunk that verifies with one of the two.
    which: std::cell::Cell<Which>,
}

impl EccSymCrypto {
    fn send_keys(&self) -> &EccSymmetricKeys {
        match (&self.truncated, self.which.get()) {
            (Some(t), Which::Truncated) => &t.0,
            _ => &self.send,
        }
    }

    fn recv_keys(&self) -> &EccSymmetricKeys {
        match (&self.truncated, self.which.get()) {
            (Some(t), Which::Truncated) => &t.1,
            _ => &self.recv,
        }
    }

    /// Whether `chunk` (a whole decrypted chunk, its signature at the end) verifies with
    /// `keys`.
    fn chunk_verifies(keys: &EccSymmetricKeys, chunk: &[u8]) -> bool {
        let Some(split) = chunk.len().checked_sub(keys.signature_len()) else {
            return false;
        };
        match chunk.split_at_checked(split) {
            Some((data, sig)) => keys.verify(data, sig),
            None => false,
        }
    }

    fn layout(&self, keys: &EccSymmetricKeys) -> CryptoLayout {
        let block = if self.encrypt { AES_BLOCK_SIZE } else { 1 };
        CryptoLayout {
            encrypted: self.encrypt,
            plain_block_size: block,
            cipher_block_size: block,
            signature_len: keys.signature_len(),
            extra_padding_byte: false,
        }
    }
}

impl ChunkCrypto for EccSymCrypto {
    fn send_layout(&self) -> CryptoLayout {
        self.layout(self.send_keys())
    }
    fn recv_layout(&self) -> CryptoLayout {
        self.layout(self.recv_keys())
    }
    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode> {
        self.send_keys().sign(data, signature).map_err(sc)
    }
    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode> {
        if self.recv_keys().verify(data, signature) {
            if self.which.get() == Which::Unknown {
                self.which.set(Which::Full);
            }
            return Ok(());
        }
        if let (Some(t), Which::Unknown) = (&self.truncated, self.which.get()) {
            if t.1.verify(data, signature) {
                self.which.set(Which::Truncated);
                return Ok(());
            }
        }
        Err(StatusCode::BadSecurityChecksFailed)
    }
    fn encrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        let part = buf.get_mut(start..).ok_or(StatusCode::BadInternalError)?;
        self.send_keys().encrypt_in_place(part).map_err(sc)
    }
    fn decrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        let bad = |_| StatusCode::BadSecurityChecksFailed;
        let Some(t) = self
            .truncated
            .as_ref()
            .filter(|_| self.which.get() == Which::Unknown)
        else {
            let part = buf
                .get_mut(start..)
                .ok_or(StatusCode::BadSecurityChecksFailed)?;
            return self.recv_keys().decrypt_in_place(part).map_err(bad);
        };
        // Not settled yet: decrypt with ours; if the chunk does not verify, with the other
        // derivation's keys from the ciphertext again; if neither, leave ours (the signature
        // check then fails).
        let cipher = buf
            .get(start..)
            .ok_or(StatusCode::BadSecurityChecksFailed)?
            .to_vec();
        let restore = |buf: &mut Vec<u8>| {
            buf.truncate(start);
            buf.extend_from_slice(&cipher);
        };
        for (keys, which) in [(&self.recv, Which::Full), (&t.1, Which::Truncated)] {
            let part = buf
                .get_mut(start..)
                .ok_or(StatusCode::BadSecurityChecksFailed)?;
            keys.decrypt_in_place(part).map_err(bad)?;
            if Self::chunk_verifies(keys, buf) {
                self.which.set(which);
                return Ok(());
            }
            restore(buf);
        }
        let part = buf
            .get_mut(start..)
            .ok_or(StatusCode::BadSecurityChecksFailed)?;
        self.recv.decrypt_in_place(part).map_err(bad)
    }
}
