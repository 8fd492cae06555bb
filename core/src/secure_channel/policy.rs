//! Security policies behind a trait. Core knows the chunk layout (where the padding and
//! the signature go, how big a chunk may be); a policy knows the algorithms. Adding
//! Basic256Sha256 is a new `impl SecurityPolicy` (in uaring-crypto) registered in the
//! server's [`SecurityProvider`]: the secure channel code does not change.

use std::net::IpAddr;
use std::sync::Arc;

use crate::generated::types::MessageSecurityMode;
use crate::roles::Roles;
use crate::time::Now;
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
    pub const PLAIN: CryptoLayout = CryptoLayout {
        encrypted: false,
        plain_block_size: 1,
        cipher_block_size: 1,
        signature_len: 0,
        extra_padding_byte: false,
    };

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

/// A token a client has begun ([`SecurityPolicy::begin_token`]): the nonce it sent and the
/// policy's secret behind it (an ephemeral private key for the ECC policies), kept until the
/// server's nonce arrives.
pub struct PendingToken {
    pub nonce: Vec<u8>,
    /// The policy's own state (`None` for the RSA policies), read back by the policy that made
    /// it in [`SecurityPolicy::finish_token`].
    pub secret: Option<Box<dyn std::any::Any + Send>>,
}

/// A server's ephemeral key for a client's EccEncryptedSecret (Part 4 §7.41.2.5, Part 6
/// §6.8.2): the ECDHKey (an EphemeralKeyType) of a CreateSession or ActivateSession response
/// header, and its private half, which the session keeps until the next ActivateSession
/// decrypts a UserName password with it ([`SecurityPolicy::decrypt_encrypted_secret`]).
pub struct SessionEphemeralKey {
    /// The public key (`x ‖ y` for the ECC policies): EphemeralKeyType.publicKey.
    pub public_key: Vec<u8>,
    /// Our application key's signature over `public_key`: EphemeralKeyType.signature.
    pub signature: Vec<u8>,
    /// The private half, read back by the policy that made it.
    pub private: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for SessionEphemeralKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEphemeralKey")
            .field("public_key_len", &self.public_key.len())
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for PendingToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingToken")
            .field("nonce_len", &self.nonce.len())
            .field("secret", &self.secret.is_some())
            .finish()
    }
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
    /// thumbprint is ours (BadCertificateInvalid). Policy None ignores both. `now` is the
    /// time of the request (validity periods are checked against it).
    fn asymmetric(
        &self,
        role: Role,
        peer_certificate: Option<&[u8]>,
        receiver_thumbprint: Option<&[u8]>,
        now: Now,
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

    /// The local nonce of an OpenSecureChannel (Issue or Renew) and the new token's
    /// protection derived from it and the peer's `remote_nonce`. `random_nonce` is a fresh
    /// random nonce of [`SecurityPolicy::nonce_len`] bytes. The default (RSA policies) sends
    /// it and derives the keys from the two nonces ([`SecurityPolicy::symmetric`]); the ECC
    /// policies send an ephemeral public key instead and derive the keys from the ECDH
    /// secret (Part 6 §6.8.1), whose private half never leaves this call.
    fn new_token(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        random_nonce: Vec<u8>,
        remote_nonce: &[u8],
    ) -> Result<(Vec<u8>, Box<dyn ChunkCrypto>), StatusCode> {
        let crypto = self.symmetric(role, mode, &random_nonce, remote_nonce)?;
        Ok((random_nonce, crypto))
    }

    /// A client's half of [`SecurityPolicy::new_token`]: the nonce its OpenSecureChannel
    /// request carries (`random_nonce` of [`SecurityPolicy::nonce_len`] bytes for the RSA
    /// policies, the default; an ephemeral public key for the ECC ones) and, in the
    /// [`PendingToken`], what the keys need once the server's nonce is in
    /// ([`SecurityPolicy::finish_token`]).
    fn begin_token(&self, random_nonce: Vec<u8>) -> Result<PendingToken, StatusCode> {
        Ok(PendingToken {
            nonce: random_nonce,
            secret: None,
        })
    }

    /// The client's keys of the token begun with [`SecurityPolicy::begin_token`], from the
    /// server's nonce. The default derives them from the two nonces.
    fn finish_token(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        pending: PendingToken,
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        self.symmetric(role, mode, &pending.nonce, remote_nonce)
    }

    /// Whether UserName and X.509 user identity tokens may be offered on endpoints of this
    /// channel policy (the policy can decrypt a password sent with it and check a user token
    /// signature). A policy that cannot says so, and the endpoints do not offer them.
    fn offers_user_tokens(&self) -> bool {
        true
    }

    // ---- Used by the session layer and the server connection (defaults: policy None). ----

    /// Whether a handshake (OpenSecureChannel: one RSA private-key operation each) from
    /// `peer` may proceed at `now`. Err is sent as the ERR status (BadTcpServerTooBusy).
    fn admit_handshake(&self, peer: Option<IpAddr>, now: Now) -> Result<(), StatusCode> {
        let _ = (peer, now);
        Ok(())
    }
    /// Signs `data` with our private key (CreateSession serverSignature, Part 4 §5.7.2).
    /// Returns (algorithm URI, signature). Policy None returns a null SignatureData; the
    /// default fails closed, so a policy that forgets this method cannot sign.
    fn sign_own(&self, data: &[u8]) -> Result<(String, Vec<u8>), StatusCode> {
        let _ = data;
        Err(StatusCode::BadSecurityPolicyRejected)
    }
    /// Verifies `signature` over `data` with the public key of `signer_certificate`
    /// (ActivateSession clientSignature, X509IdentityToken userTokenSignature);
    /// `algorithm_uri` must be this policy's asymmetric signature algorithm.
    /// Policy None accepts anything (there is nothing to verify with); the default fails
    /// closed, so a policy that forgets this method never accepts a forged signature.
    fn verify_signature(
        &self,
        signer_certificate: &[u8],
        data: &[u8],
        algorithm_uri: &str,
        signature: &[u8],
    ) -> Result<(), StatusCode> {
        let _ = (signer_certificate, data, algorithm_uri, signature);
        Err(StatusCode::BadSecurityChecksFailed)
    }
    /// Decrypts a UserNameIdentityToken secret encrypted with this policy (legacy format
    /// `length ‖ secret ‖ serverNonce`, Part 4 §7.41.2.2) and checks the nonce.
    /// Policy None cannot decrypt: BadIdentityTokenInvalid.
    fn decrypt_user_secret(
        &self,
        encryption_algorithm: &str,
        ciphertext: &[u8],
        server_nonce: &[u8],
    ) -> Result<Vec<u8>, StatusCode> {
        let _ = (encryption_algorithm, ciphertext, server_nonce);
        Err(StatusCode::BadIdentityTokenInvalid)
    }
    /// Whether CreateSession's work for `certificate` — its validation and our signature —
    /// may run on the shard instead of a handshake helper: the signature costs about what
    /// handing a job to a helper and taking the result back costs (a P-256 ECDSA signature,
    /// about 20 µs), and `certificate` is one the shard validated already (no path to build,
    /// no file to write). The default (RSA: a private-key operation of about half a
    /// millisecond) says no.
    fn session_signature_inline(
        &self,
        certificate: &[u8],
        application_uri: Option<&str>,
        now: Now,
    ) -> bool {
        let _ = (certificate, application_uri, now);
        false
    }
    /// Whether UserName secrets under this policy travel as an EccEncryptedSecret
    /// (Part 4 §7.41.2.5): the ECC policies, which hand out ephemeral keys
    /// ([`SecurityPolicy::new_ephemeral_key`]) in the session responses. The RSA policies
    /// (legacy encrypted secrets) and None say no.
    fn offers_ephemeral_keys(&self) -> bool {
        false
    }
    /// A fresh ephemeral key and our signature over its public half, for the ECDHKey of a
    /// session response. Only where [`SecurityPolicy::offers_ephemeral_keys`].
    fn new_ephemeral_key(&self) -> Result<SessionEphemeralKey, StatusCode> {
        Err(StatusCode::BadSecurityPolicyRejected)
    }
    /// Decrypts a UserNameIdentityToken secret sent as an EccEncryptedSecret to the
    /// ephemeral key whose private half is `private` (made by this policy's
    /// [`SecurityPolicy::new_ephemeral_key`]), signed by `signer_certificate` (the client
    /// application certificate of the channel), bound to the session's `server_nonce`.
    /// Any fault is BadIdentityTokenInvalid.
    fn decrypt_encrypted_secret(
        &self,
        private: &(dyn std::any::Any + Send),
        secret: &[u8],
        server_nonce: &[u8],
        signer_certificate: &[u8],
    ) -> Result<Vec<u8>, StatusCode> {
        let _ = (private, secret, server_nonce, signer_certificate);
        Err(StatusCode::BadIdentityTokenInvalid)
    }
    /// Validates a client application certificate given in CreateSession against the
    /// trust list, with the ApplicationUri of its ApplicationDescription. Policy None has
    /// no trust list and accepts; the default fails closed. Validity is checked at `now`.
    fn validate_client_certificate(
        &self,
        certificate: &[u8],
        application_uri: Option<&str>,
        now: Now,
    ) -> Result<(), StatusCode> {
        let _ = (certificate, application_uri, now);
        Err(StatusCode::BadCertificateUntrusted)
    }
}

/// Checks user credentials (user names and passwords, X.509 user certificates): a plug-in
/// (uaring-crypto implements it with argon2id hashes, a per-address failed-login limiter
/// and the PKI). Object-safe; one per shard, behind the shard's [`SecurityProvider`]. Every
/// method is given the time of the request (`now`): a plug-in reads no clock of its own.
pub trait UserAuthenticator: Send + Sync {
    /// Checks a user name and a decrypted password: the user's roles (the session also gets
    /// AuthenticatedUser). Failures are BadUserAccessDenied (also when `peer` is
    /// rate-limited after too many failures).
    fn authenticate_password(
        &self,
        peer: Option<IpAddr>,
        user: &str,
        password: &[u8],
        now: Now,
    ) -> Result<Roles, StatusCode>;
    /// Validates an X.509 user certificate (its signature was verified already) and maps
    /// it to a user: (name, roles).
    fn authenticate_certificate(
        &self,
        peer: Option<IpAddr>,
        certificate: &[u8],
        now: Now,
    ) -> Result<(String, Roles), StatusCode>;
    /// Whether `peer` may attempt a login now (checked before any RSA work on its token).
    fn login_allowed(&self, peer: Option<IpAddr>, now: Now) -> bool {
        let _ = (peer, now);
        true
    }
    /// A login attempt from `peer` failed before reaching the credential check (a token that
    /// does not decrypt, a bad user token signature): it counts like a wrong password.
    fn login_failed(&self, peer: Option<IpAddr>, now: Now) {
        let _ = (peer, now);
    }
}

/// Which user identity tokens the endpoints accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserTokenSettings {
    /// Anonymous logins, with the roles they get besides Anonymous; `None`: refused.
    pub anonymous: Option<Roles>,
    /// UserName tokens (needs a [`UserAuthenticator`]).
    pub user_name: bool,
    /// X.509 user certificate tokens (needs a [`UserAuthenticator`]).
    pub x509: bool,
    /// Accept a UserName password in clear (no encryption) on a channel with
    /// SecurityPolicy None. Off by default: anyone on the path reads it.
    pub allow_password_on_none: bool,
    /// The SecurityPolicyUri advertised in UserName / X.509 token policies of endpoints
    /// whose channel policy is None (the password is then encrypted with it).
    pub none_endpoint_token_policy_uri: String,
}

impl Default for UserTokenSettings {
    /// Anonymous logins only, with the Operator role (read, write, call: the benchmark
    /// contract).
    fn default() -> Self {
        UserTokenSettings {
            anonymous: Some(Roles::OPERATOR),
            user_name: false,
            x509: false,
            allow_password_on_none: false,
            none_endpoint_token_policy_uri: String::new(),
        }
    }
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
    fn asymmetric(
        &self,
        _: Role,
        _: Option<&[u8]>,
        _: Option<&[u8]>,
        _: Now,
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        Ok(Box::new(PlainCrypto))
    }
    fn symmetric(
        &self,
        _: Role,
        mode: MessageSecurityMode,
        _: &[u8],
        _: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        if mode != MessageSecurityMode::None {
            return Err(StatusCode::BadSecurityModeRejected);
        }
        Ok(Box::new(PlainCrypto))
    }
    fn sign_own(&self, _: &[u8]) -> Result<(String, Vec<u8>), StatusCode> {
        Ok((String::new(), Vec::new()))
    }
    fn verify_signature(&self, _: &[u8], _: &[u8], _: &str, _: &[u8]) -> Result<(), StatusCode> {
        Ok(())
    }
    fn validate_client_certificate(
        &self,
        _: &[u8],
        _: Option<&str>,
        _: Now,
    ) -> Result<(), StatusCode> {
        Ok(())
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
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown security mode {name:?} (None, Sign, SignAndEncrypt)"
                ))
            })
    }
}

impl EndpointSecurity {
    pub fn none() -> Self {
        EndpointSecurity {
            policy_uri: SECURITY_POLICY_NONE_URI.to_owned(),
            mode: MessageSecurityMode::None,
        }
    }
}

/// The policies a server offers and the (policy, mode) pairs its endpoints accept.
#[derive(Clone)]
pub struct SecurityProvider {
    policies: Vec<Arc<dyn SecurityPolicy>>,
    endpoints: Vec<EndpointSecurity>,
    user_tokens: UserTokenSettings,
    users: Option<Arc<dyn UserAuthenticator>>,
}

impl std::fmt::Debug for SecurityProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityProvider")
            .field(
                "policies",
                &self
                    .policies
                    .iter()
                    .map(|p| p.uri().to_owned())
                    .collect::<Vec<_>>(),
            )
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
        SecurityProvider {
            policies: vec![Arc::new(NonePolicy)],
            endpoints: vec![EndpointSecurity::none()],
            user_tokens: UserTokenSettings::default(),
            users: None,
        }
    }
    /// An empty provider; add policies and endpoints.
    pub fn empty() -> Self {
        SecurityProvider {
            policies: Vec::new(),
            endpoints: Vec::new(),
            user_tokens: UserTokenSettings::default(),
            users: None,
        }
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
    /// Sets which user identity tokens are accepted.
    pub fn set_user_tokens(&mut self, settings: UserTokenSettings) -> &mut Self {
        self.user_tokens = settings;
        self
    }
    /// Sets the user credential checker (UserName and X.509 tokens).
    pub fn set_user_authenticator(&mut self, users: Arc<dyn UserAuthenticator>) -> &mut Self {
        self.users = Some(users);
        self
    }
    pub fn user_tokens(&self) -> &UserTokenSettings {
        &self.user_tokens
    }
    pub fn user_authenticator(&self) -> Option<&Arc<dyn UserAuthenticator>> {
        self.users.as_ref()
    }
    /// A registered policy by URI, whether or not an endpoint uses it (user token
    /// policies may name a policy no endpoint offers).
    pub fn policy(&self, uri: &str) -> Option<&Arc<dyn SecurityPolicy>> {
        self.policies.iter().find(|p| p.uri() == uri)
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
        self.endpoints
            .iter()
            .any(|e| e.policy_uri == uri && e.mode == mode)
    }
    /// Every endpoint has its policy registered.
    pub fn validate(&self) -> Result<(), String> {
        if self.endpoints.is_empty() {
            return Err("no endpoint security configured".into());
        }
        for e in &self.endpoints {
            if !self.policies.iter().any(|p| p.uri() == e.policy_uri) {
                return Err(format!(
                    "endpoint uses unregistered policy {}",
                    e.policy_uri
                ));
            }
            let none = e.policy_uri == SECURITY_POLICY_NONE_URI;
            if none != (e.mode == MessageSecurityMode::None) {
                return Err(format!(
                    "policy {} cannot be used with mode {:?}",
                    e.policy_uri, e.mode
                ));
            }
        }
        Ok(())
    }
}
