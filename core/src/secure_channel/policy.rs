//! Security policies behind a trait. Core knows the chunk layout (where the padding and
//! the signature go, how big a chunk may be); a policy knows the algorithms. Adding
//! Basic256Sha256 is a new `impl SecurityPolicy` (in uaring-crypto) registered in the
//! server's [`SecurityProvider`]: the secure channel code does not change.

use std::sync::Arc;

use crate::generated::types::MessageSecurityMode;
use crate::types::StatusCode;

/// The URI of SecurityPolicy None.
pub const SECURITY_POLICY_NONE_URI: &str = "http://opcfoundation.org/UA/SecurityPolicy#None";

/// The longest SecurityPolicyUri in an asymmetric security header, in bytes (Part 6).
pub const MAX_POLICY_URI_LEN: usize = 255;

/// Sizes of one direction of chunk protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CryptoLayout {
    /// Whether the chunk is encrypted (from the sequence header to the signature).
    pub encrypted: bool,
    /// Plaintext block size, in bytes (the data to encrypt is a whole number of these).
    /// 1 when not encrypted.
    pub plain_block_size: usize,
    /// Ciphertext block size, in bytes (equal to the plaintext block for symmetric
    /// ciphers; larger for RSA). 1 when not encrypted.
    pub cipher_block_size: usize,
    /// Signature length, in bytes; 0 when not signed.
    pub signature_len: usize,
    /// Padding size takes two bytes (PaddingSize + ExtraPaddingSize): asymmetric
    /// encryption with a key longer than 2048 bits.
    pub extra_padding_byte: bool,
}

impl CryptoLayout {
    /// No signature, no encryption (SecurityPolicy None, or mode None).
    pub const PLAIN: CryptoLayout =
        CryptoLayout { encrypted: false, plain_block_size: 1, cipher_block_size: 1, signature_len: 0, extra_padding_byte: false };

    pub fn is_plain(&self) -> bool {
        !self.encrypted && self.signature_len == 0
    }
    /// Bytes taken by PaddingSize (and ExtraPaddingSize) when encrypted, else 0.
    pub fn padding_size_bytes(&self) -> usize {
        match (self.encrypted, self.extra_padding_byte) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        }
    }
}

/// The protection applied to chunks of one secure channel in both directions: built by
/// a policy for the OPN exchange (asymmetric) or from the nonces (symmetric).
///
/// Layout rules core applies (Part 6 §6.7.2): a chunk is
/// `header | security header | sequence header | body | padding | signature`; the
/// signature covers everything before it (with the final MessageSize in the header);
/// encryption covers the sequence header through the signature.
pub trait ChunkCrypto: Send {
    /// Sizes for chunks we send.
    fn send_layout(&self) -> CryptoLayout;
    /// Sizes for chunks we receive.
    fn recv_layout(&self) -> CryptoLayout;
    /// Signs `data`, writing `send_layout().signature_len` bytes into `signature`.
    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode>;
    /// Verifies `signature` over `data` (BadSecurityChecksFailed when wrong).
    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode>;
    /// Encrypts `buf[start..]` (a whole number of plaintext blocks) in place; the buffer
    /// may grow (asymmetric) to a whole number of ciphertext blocks.
    fn encrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode>;
    /// Decrypts `buf[start..]` in place; the buffer may shrink (asymmetric).
    fn decrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode>;
}

/// Which end of the channel we are (key derivation differs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// The asymmetric security header of an OPN chunk (Part 6 §6.7.2.3).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AsymmetricSecurityHeader {
    pub security_policy_uri: String,
    /// The sender's certificate (DER, possibly a chain); `None` for policy None.
    pub sender_certificate: Option<Vec<u8>>,
    /// SHA-1 thumbprint of the receiver's certificate; `None` for policy None.
    pub receiver_certificate_thumbprint: Option<Vec<u8>>,
}

/// A security policy: the algorithm suite together with our own certificate and key
/// and the trust decision for peers' certificates. Object-safe; the server holds
/// `Arc<dyn SecurityPolicy>`s in its [`SecurityProvider`].
pub trait SecurityPolicy: Send + Sync {
    /// The policy URI, e.g. `http://opcfoundation.org/UA/SecurityPolicy#Basic256Sha256`.
    fn uri(&self) -> &str;
    /// Sequence numbers follow the legacy rules (start anywhere, wrap after
    /// `u32::MAX - 1024` to a value below 1024) rather than start at 0 and wrap at
    /// `u32::MAX` to 0.
    fn legacy_sequence_numbers(&self) -> bool {
        true
    }
    /// Length of the secure-channel nonces this policy wants, in bytes (0 for None).
    fn nonce_len(&self) -> usize;
    /// Our application instance certificate (DER), sent as SenderCertificate.
    fn local_certificate(&self) -> Option<&[u8]>;
    /// The thumbprint of `certificate` as a receiver identifies it (SHA-1 for the RSA
    /// policies). `None` for policy None.
    fn thumbprint(&self, certificate: &[u8]) -> Option<Vec<u8>>;
    /// The header we put on OPN chunks sent to a peer with `peer_certificate`.
    fn asymmetric_header(&self, peer_certificate: Option<&[u8]>) -> AsymmetricSecurityHeader {
        AsymmetricSecurityHeader {
            security_policy_uri: self.uri().to_owned(),
            sender_certificate: self.local_certificate().map(<[u8]>::to_vec),
            receiver_certificate_thumbprint: peer_certificate.and_then(|c| self.thumbprint(c)),
        }
    }
    /// The protection of OPN chunks exchanged with the owner of `peer_certificate`.
    /// A server calls it with the header of a received OPN: the policy checks the
    /// sender certificate (trust, validity: BadCertificate… codes) and that the receiver
    /// thumbprint is ours (BadCertificateInvalid). Policy None ignores both.
    fn asymmetric(
        &self,
        role: Role,
        peer_certificate: Option<&[u8]>,
        receiver_thumbprint: Option<&[u8]>,
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode>;
    /// The protection of MSG/CLO chunks: keys derived from the nonces (Part 6 §6.7.5)
    /// for `mode` (None → plain, Sign → signed, SignAndEncrypt → both).
    fn symmetric(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        local_nonce: &[u8],
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode>;
}

/// No protection at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlainCrypto;

impl ChunkCrypto for PlainCrypto {
    fn send_layout(&self) -> CryptoLayout {
        CryptoLayout::PLAIN
    }
    fn recv_layout(&self) -> CryptoLayout {
        CryptoLayout::PLAIN
    }
    fn sign(&self, _: &[u8], _: &mut [u8]) -> Result<(), StatusCode> {
        Ok(())
    }
    fn verify(&self, _: &[u8], _: &[u8]) -> Result<(), StatusCode> {
        Ok(())
    }
    fn encrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
        Ok(())
    }
    fn decrypt(&self, _: &mut Vec<u8>, _: usize) -> Result<(), StatusCode> {
        Ok(())
    }
}

/// SecurityPolicy None: no certificates, no signatures, no encryption.
#[derive(Debug, Clone, Copy, Default)]
pub struct NonePolicy;

impl SecurityPolicy for NonePolicy {
    fn uri(&self) -> &str {
        SECURITY_POLICY_NONE_URI
    }
    fn nonce_len(&self) -> usize {
        0
    }
    fn local_certificate(&self) -> Option<&[u8]> {
        None
    }
    fn thumbprint(&self, _: &[u8]) -> Option<Vec<u8>> {
        None
    }
    fn asymmetric(&self, _: Role, _: Option<&[u8]>, _: Option<&[u8]>) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        Ok(Box::new(PlainCrypto))
    }
    fn symmetric(&self, _: Role, mode: MessageSecurityMode, _: &[u8], _: &[u8]) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        if mode != MessageSecurityMode::None {
            return Err(StatusCode::BadSecurityModeRejected);
        }
        Ok(Box::new(PlainCrypto))
    }
}

/// One endpoint's security configuration: a policy URI and a message security mode.
/// In configuration files the mode is written `"None"`, `"Sign"` or `"SignAndEncrypt"`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EndpointSecurity {
    pub policy_uri: String,
    #[serde(with = "mode_serde")]
    pub mode: MessageSecurityMode,
}

mod mode_serde {
    use super::MessageSecurityMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(m: &MessageSecurityMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(m.name().unwrap_or("Invalid"))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<MessageSecurityMode, D::Error> {
        let name = String::deserialize(d)?;
        MessageSecurityMode::ALL
            .into_iter()
            .find(|m| *m != MessageSecurityMode::Invalid && m.name() == Some(name.as_str()))
            .ok_or_else(|| serde::de::Error::custom(format!("unknown security mode {name:?} (None, Sign, SignAndEncrypt)")))
    }
}

impl EndpointSecurity {
    pub fn none() -> Self {
        EndpointSecurity { policy_uri: SECURITY_POLICY_NONE_URI.to_owned(), mode: MessageSecurityMode::None }
    }
}

/// The policies a server offers and the (policy, mode) pairs its endpoints accept.
#[derive(Clone)]
pub struct SecurityProvider {
    policies: Vec<Arc<dyn SecurityPolicy>>,
    endpoints: Vec<EndpointSecurity>,
}

impl std::fmt::Debug for SecurityProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityProvider")
            .field("policies", &self.policies.iter().map(|p| p.uri().to_owned()).collect::<Vec<_>>())
            .field("endpoints", &self.endpoints)
            .finish()
    }
}

impl Default for SecurityProvider {
    /// Policy None with mode None only.
    fn default() -> Self {
        SecurityProvider::none_only()
    }
}

impl SecurityProvider {
    /// Policy None with mode None only.
    pub fn none_only() -> Self {
        SecurityProvider { policies: vec![Arc::new(NonePolicy)], endpoints: vec![EndpointSecurity::none()] }
    }
    /// An empty provider; add policies and endpoints.
    pub fn empty() -> Self {
        SecurityProvider { policies: Vec::new(), endpoints: Vec::new() }
    }
    /// Adds (or replaces, by URI) a policy.
    pub fn add_policy(&mut self, policy: Arc<dyn SecurityPolicy>) -> &mut Self {
        self.policies.retain(|p| p.uri() != policy.uri());
        self.policies.push(policy);
        self
    }
    /// Accepts `mode` with the policy `policy_uri` (the policy must be added too).
    pub fn add_endpoint(&mut self, e: EndpointSecurity) -> &mut Self {
        if !self.endpoints.contains(&e) {
            self.endpoints.push(e);
        }
        self
    }
    pub fn endpoints(&self) -> &[EndpointSecurity] {
        &self.endpoints
    }
    pub fn policies(&self) -> &[Arc<dyn SecurityPolicy>] {
        &self.policies
    }
    /// The policy with this URI, if any endpoint uses it.
    pub fn find(&self, uri: &str) -> Option<&Arc<dyn SecurityPolicy>> {
        if !self.endpoints.iter().any(|e| e.policy_uri == uri) {
            return None;
        }
        self.policies.iter().find(|p| p.uri() == uri)
    }
    /// Whether some endpoint accepts this pair.
    pub fn allows(&self, uri: &str, mode: MessageSecurityMode) -> bool {
        self.endpoints.iter().any(|e| e.policy_uri == uri && e.mode == mode)
    }
    /// Every endpoint has its policy registered.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoints.is_empty() {
            return Err("no endpoint security configured".into());
        }
        for e in &self.endpoints {
            if !self.policies.iter().any(|p| p.uri() == e.policy_uri) {
                return Err(format!("endpoint uses unregistered policy {}", e.policy_uri));
            }
            let none = e.policy_uri == SECURITY_POLICY_NONE_URI;
            if none != (e.mode == MessageSecurityMode::None) {
                return Err(format!("policy {} cannot be used with mode {:?}", e.policy_uri, e.mode));
            }
        }
        Ok(())
    }
}
