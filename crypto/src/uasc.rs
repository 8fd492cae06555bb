//! The RSA security policies plugged into uaring-core: [`RsaPolicy`] implements core's
//! [`SecurityPolicy`] (asymmetric OpenSecureChannel chunks, symmetric MSG chunks, session
//! signatures, user-token decryption) for Basic256Sha256, Aes128_Sha256_RsaOaep and
//! Aes256_Sha256_RsaPss; [`ConfiguredUsers`] implements core's [`UserAuthenticator`].
//!
//! Ownership (thread per core): the own certificate and key ([`OwnIdentity`]) are built once
//! and shared read-only by every shard. Each shard owns a [`ShardTrust`]: its own [`Pki`]
//! (rescanned by the runtime calling [`ShardTrust::refresh`] from a thread of its own, never on
//! the handshake path, so a certificate dropped into `trusted/certs` is accepted within
//! `rescan_interval_ms` without a shard reading a directory) and a handle on the process-wide
//! [`AddressLimits`] (the handshake and failed-login limiters, one fixed-size table each, shared
//! by all shards so that N shards do not allow N times the attempts). The mutexes are taken
//! only on OpenSecureChannel, CreateSession and ActivateSession (by the shard's thread, or by a
//! handshake helper thread working for it) — never for a Read or Write.
//!
//! Time comes in with every call (core's `Now`, the time of the request): nothing here reads a
//! clock, so a validity period or a limiter is judged at the time the caller says.
//!
//! Symmetric chunks are signed, encrypted, decrypted and verified in place in the caller's
//! buffer with key schedules computed once per token: nothing is allocated per message.

use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use uaring_core::generated::types::MessageSecurityMode;
use uaring_core::roles::Roles;
use uaring_core::secure_channel::{
    ChunkCrypto, CryptoLayout, Role, SecurityPolicy, UserAuthenticator,
};
use uaring_core::types::StatusCode;
use uaring_core::Now;

use crate::asymmetric::{asym_decrypt, asym_encrypt, asym_sign_into, asym_verify, PrivateKey};
use crate::cert::Certificate;
use crate::pki::{CertRole, Pki};
use crate::policy::{PolicyId, AES_BLOCK_SIZE};
use crate::ratelimit::{LoginLimiter, LoginLimiterConfig};
use crate::status;
use crate::symmetric::{derive_channel_keys, SymmetricKeys};
use crate::user::{decrypt_user_password, UserStore};

fn sc(code: u32) -> StatusCode {
    StatusCode(code)
}

/// `now` in seconds since the Unix epoch (certificate validity checks).
fn unix_s(now: Now) -> i64 {
    (now.utc.unix_nanos() / 1_000_000_000) as i64
}

/// `now` on the caller's monotonic clock, in milliseconds (the limiters).
fn mono_ms(now: Now) -> u64 {
    now.mono_ns / 1_000_000
}

/// The application instance certificate and its private key.
pub struct OwnIdentity {
    /// The certificate (DER), sent as SenderCertificate and ServerCertificate.
    pub cert: Certificate,
    /// The private key.
    pub key: PrivateKey,
}

impl OwnIdentity {
    /// Pairs a certificate with its key (they must match).
    pub fn new(cert: Certificate, key: PrivateKey) -> Result<Arc<OwnIdentity>, String> {
        if !key.matches(&cert) {
            return Err("the private key does not belong to the certificate".into());
        }
        Ok(Arc::new(OwnIdentity { cert, key }))
    }
}

/// Limits on OpenSecureChannel handshakes per client address (each costs one RSA
/// private-key decryption and one signature).
#[derive(Clone, Copy, Debug)]
pub struct HandshakeLimits {
    /// Handshakes an address may make in a burst.
    pub burst: u32,
    /// One more handshake is allowed every `refill_interval_ms`.
    pub refill_interval_ms: u64,
    /// Addresses tracked (the size of the fixed table shared by all shards).
    pub addresses_max: usize,
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        HandshakeLimits {
            burst: 20,
            refill_interval_ms: 100,
            addresses_max: 4096,
        }
    }
}

/// The per-client-address limiters of the whole process: handshakes (OpenSecureChannel) and
/// failed logins, each a fixed-size table ([`LoginLimiter`]) behind a mutex, shared by every
/// shard and handshake helper thread. Taken only on the handshake path, never for a Read.
pub struct AddressLimits {
    handshakes: Option<Mutex<LoginLimiter>>,
    logins: Mutex<LoginLimiter>,
}

impl std::fmt::Debug for AddressLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressLimits").finish_non_exhaustive()
    }
}

impl AddressLimits {
    /// Both tables, allocated now. `handshakes: None` disables the handshake limit.
    pub fn new(
        handshakes: Option<HandshakeLimits>,
        logins: LoginLimiterConfig,
    ) -> Arc<AddressLimits> {
        let handshakes = handshakes.map(|h| {
            Mutex::new(LoginLimiter::new(LoginLimiterConfig {
                burst: h.burst,
                refill_interval_ms: h.refill_interval_ms,
                addresses_max: h.addresses_max,
            }))
        });
        Arc::new(AddressLimits {
            handshakes,
            logins: Mutex::new(LoginLimiter::new(logins)),
        })
    }

    /// Counts one handshake from `peer` at `now`; Err (BadTcpServerTooBusy) when over the
    /// limit.
    pub fn admit_handshake(&self, peer: Option<IpAddr>, now: Now) -> Result<(), StatusCode> {
        let (Some(limiter), Some(ip)) = (&self.handshakes, peer) else {
            return Ok(());
        };
        let now = mono_ms(now);
        let mut l = lock(limiter);
        if l.check(ip, now).is_err() {
            return Err(StatusCode::BadTcpServerTooBusy);
        }
        l.record_failure(ip, now);
        Ok(())
    }

    /// Whether `peer` may attempt a login at `now`.
    pub fn login_allowed(&self, peer: Option<IpAddr>, now: Now) -> bool {
        match peer {
            Some(ip) => lock(&self.logins).check(ip, mono_ms(now)).is_ok(),
            None => true,
        }
    }

    /// A failed login from `peer` at `now`.
    pub fn login_failed(&self, peer: Option<IpAddr>, now: Now) {
        if let Some(ip) = peer {
            lock(&self.logins).record_failure(ip, mono_ms(now));
        }
    }

    /// A successful login from `peer`: its failures are forgotten.
    pub fn login_succeeded(&self, peer: Option<IpAddr>) {
        if let Some(ip) = peer {
            lock(&self.logins).record_success(ip);
        }
    }
}

/// One shard's trust state: its PKI store, and the process-wide address limits.
pub struct ShardTrust {
    /// Locked by the shard (or a handshake helper working for it) for a validation, and by
    /// [`ShardTrust::refresh`] only to put a store loaded beside it in place.
    pki: Mutex<Pki>,
    /// The refresher's own state (never touched on the handshake path).
    rescan: Mutex<Rescan>,
    limits: Arc<AddressLimits>,
    /// How many times [`ShardTrust::refresh`] put a new store in place.
    reloads: std::sync::atomic::AtomicU64,
}

/// When [`ShardTrust::refresh`] last looked, and the rescan request it last honoured.
struct Rescan {
    last_ms: Option<u64>,
    generation: u64,
}

impl std::fmt::Debug for ShardTrust {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardTrust").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave a PKI store or a limiter inconsistent in a
    // way that matters for security (they are rebuilt from disk / only count); keep going.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ShardTrust {
    /// Wraps a shard's PKI with limiters of its own (tests and single-shard use).
    /// `handshakes: None` disables the handshake limit.
    pub fn new(
        pki: Pki,
        handshakes: Option<HandshakeLimits>,
        logins: LoginLimiterConfig,
    ) -> Arc<ShardTrust> {
        Self::with_limits(pki, AddressLimits::new(handshakes, logins))
    }

    /// Wraps a shard's PKI with the process-wide limiters (every shard gets the same `limits`).
    pub fn with_limits(pki: Pki, limits: Arc<AddressLimits>) -> Arc<ShardTrust> {
        Arc::new(ShardTrust {
            pki: Mutex::new(pki),
            rescan: Mutex::new(Rescan {
                last_ms: None,
                generation: crate::pki::rescan_generation(),
            }),
            limits,
            reloads: Default::default(),
        })
    }

    /// How many times the store was replaced by a newer one (a shard compares it with the
    /// count it last saw to re-check the certificates of its open channels).
    pub fn reloads(&self) -> u64 {
        self.reloads.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Does the client certificate (chain) `chain` still pass validation against the store
    /// as it stands (trust, revocation, validity at `now_unix_s`)? Always true with
    /// `accept_all_client_certs`. Nothing is written to `rejected/`.
    pub fn still_trusted(&self, chain: &[u8], now_unix_s: i64) -> bool {
        let p = lock(&self.pki);
        p.config().accept_all_client_certs
            || p.validate(chain, CertRole::ClientApp, None, now_unix_s)
                .is_ok()
    }

    /// The address limits this shard counts in.
    pub fn limits(&self) -> &Arc<AddressLimits> {
        &self.limits
    }

    /// Runs `f` on the PKI as it stands (no rescan: that is [`ShardTrust::refresh`]'s).
    pub fn with_pki<R>(&self, f: impl FnOnce(&Pki) -> R) -> R {
        f(&lock(&self.pki))
    }

    /// Brings the store up to date, for the runtime to call from a thread of its own (every
    /// few hundred milliseconds; `now_ms` on any monotonic clock): when `rescan_interval_ms`
    /// has passed since it last looked (or [`crate::pki::request_rescan`] asked), it hashes the
    /// trust directories' listing and, when they changed, loads a new store from disk — both
    /// without holding the shard's lock — and puts it in place. Returns whether it did; an
    /// error (the directories cannot be read) leaves the store as it was.
    pub fn refresh(&self, now_ms: u64) -> std::io::Result<bool> {
        let mut r = lock(&self.rescan);
        let generation = crate::pki::rescan_generation();
        let asked = generation != r.generation;
        let (root, config, loaded) = {
            let p = lock(&self.pki);
            (p.root().to_path_buf(), p.config().clone(), p.fingerprint())
        };
        if !asked {
            if let Some(last) = r.last_ms {
                if now_ms.saturating_sub(last) < config.rescan_interval_ms {
                    return Ok(false);
                }
            }
        }
        r.generation = generation;
        r.last_ms = Some(now_ms);
        if !asked && Pki::fingerprint_of(&root) == loaded {
            return Ok(false);
        }
        let fresh = Pki::open(&root, config)?;
        let old = std::mem::replace(&mut *lock(&self.pki), fresh);
        drop(old);
        self.reloads
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(true)
    }

    /// Validates a client application certificate (chain) at `now`; a failure is copied to
    /// `rejected/certs`.
    pub fn validate_client(
        &self,
        chain: &[u8],
        app_uri: Option<&str>,
        now: Now,
    ) -> Result<Certificate, u32> {
        self.with_pki(|pki| pki.validate_client(chain, app_uri, unix_s(now)))
    }

    /// Whether [`ShardTrust::validate_client`] would answer from what the store remembers
    /// ([`Pki::remembers_client`]).
    pub fn remembers_client(&self, chain: &[u8], app_uri: Option<&str>, now: Now) -> bool {
        self.with_pki(|pki| pki.remembers_client(chain, app_uri, unix_s(now)))
    }

    /// The parsed leaf of a chain this shard validated as a client certificate, if it is still
    /// remembered ([`Pki::validated_leaf`]).
    pub fn validated_leaf(&self, chain: &[u8]) -> Option<Certificate> {
        self.with_pki(|pki| pki.validated_leaf(chain))
    }

    /// Counts one handshake from `peer` at `now`; Err when over the limit.
    pub fn admit_handshake(&self, peer: Option<IpAddr>, now: Now) -> Result<(), StatusCode> {
        self.limits.admit_handshake(peer, now)
    }
}

/// OpenSecureChannel answers for a failed client certificate (Part 6 §6.7.7: the trust check
/// comes first and reports BadSecurityChecksFailed, so an untrusted, revoked or badly signed
/// certificate learns nothing about the trust list; time and usage errors pass through).
pub fn opn_certificate_status(code: u32) -> StatusCode {
    match code {
        status::BAD_CERTIFICATE_TIME_INVALID
        | status::BAD_CERTIFICATE_ISSUER_TIME_INVALID
        | status::BAD_CERTIFICATE_USE_NOT_ALLOWED
        | status::BAD_CERTIFICATE_ISSUER_USE_NOT_ALLOWED
        | status::BAD_CERTIFICATE_POLICY_CHECK_FAILED => sc(code),
        _ => StatusCode::BadSecurityChecksFailed,
    }
}

/// The first certificate of a DER chain (BadCertificateInvalid when there is none).
pub(crate) fn leaf_certificate(chain: &[u8]) -> Result<Certificate, StatusCode> {
    let chain = Certificate::parse_chain(chain).map_err(|_| StatusCode::BadCertificateInvalid)?;
    chain
        .into_iter()
        .next()
        .ok_or(StatusCode::BadCertificateInvalid)
}

/// The thumbprint a receiver identifies `certificate` by: the SHA-1 of its leaf's DER, which
/// needs only the first TLV's length, not a parse (the certificate is validated elsewhere).
pub(crate) fn leaf_thumbprint(certificate: &[u8]) -> Vec<u8> {
    let leaf = crate::cert::leaf_der(certificate).unwrap_or(certificate);
    crate::cert::thumbprint(leaf).to_vec()
}

/// The peer's certificate of an OpenSecureChannel, for every policy: a client takes the
/// server's leaf as given; a server checks that the receiver thumbprint is that of `own`
/// (Part 6 §6.7.7) and validates the client's chain against `trust` at `now`.
pub(crate) fn opn_peer(
    role: Role,
    own: &Certificate,
    trust: Option<&ShardTrust>,
    peer_certificate: Option<&[u8]>,
    receiver_thumbprint: Option<&[u8]>,
    now: Now,
) -> Result<Certificate, StatusCode> {
    let peer_bytes = peer_certificate.ok_or(StatusCode::BadCertificateInvalid)?;
    match role {
        Role::Client => leaf_certificate(peer_bytes),
        Role::Server => {
            if receiver_thumbprint != Some(&own.thumbprint()[..]) {
                return Err(StatusCode::BadCertificateInvalid);
            }
            let trust = trust.ok_or(StatusCode::BadInternalError)?;
            trust
                .validate_client(peer_bytes, None, now)
                .map_err(opn_certificate_status)
        }
    }
}

/// The certificate behind a signature to check: the shard's validated parse when it has one,
/// else the leaf of `signer_certificate`.
pub(crate) fn signer_leaf(
    trust: Option<&ShardTrust>,
    signer_certificate: &[u8],
) -> Result<Certificate, StatusCode> {
    match trust.and_then(|t| t.validated_leaf(signer_certificate)) {
        Some(leaf) => Ok(leaf),
        None => leaf_certificate(signer_certificate),
    }
}

/// An RSA security policy: the algorithm suite, the own identity and (server side) the
/// shard's trust state.
pub struct RsaPolicy {
    id: PolicyId,
    own: Arc<OwnIdentity>,
    trust: Option<Arc<ShardTrust>>,
}

impl std::fmt::Debug for RsaPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RsaPolicy")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl RsaPolicy {
    /// A server-side policy: client certificates are validated by `trust`.
    /// Unsupported (deprecated) and None policies are refused.
    pub fn server(
        id: PolicyId,
        own: Arc<OwnIdentity>,
        trust: Arc<ShardTrust>,
    ) -> Result<Arc<RsaPolicy>, String> {
        Self::check(id)?;
        Ok(Arc::new(RsaPolicy {
            id,
            own,
            trust: Some(trust),
        }))
    }

    /// A client-side policy: the server certificate is taken as given (the caller decides
    /// whether it trusts it).
    pub fn client(id: PolicyId, own: Arc<OwnIdentity>) -> Result<Arc<RsaPolicy>, String> {
        Self::check(id)?;
        Ok(Arc::new(RsaPolicy {
            id,
            own,
            trust: None,
        }))
    }

    fn check(id: PolicyId) -> Result<(), String> {
        if id == PolicyId::None {
            return Err("SecurityPolicy None is core's NonePolicy".into());
        }
        if !id.is_supported() {
            return Err(format!(
                "security policy {} is deprecated and not supported",
                id.name()
            ));
        }
        Ok(())
    }

    /// The policy.
    pub fn id(&self) -> PolicyId {
        self.id
    }

    /// The own identity.
    pub fn own(&self) -> &Arc<OwnIdentity> {
        &self.own
    }
}

impl SecurityPolicy for RsaPolicy {
    fn uri(&self) -> &str {
        self.id.uri()
    }

    fn nonce_len(&self) -> usize {
        self.id.nonce_len()
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
        if role == Role::Server {
            let (lo, hi) = self.id.asym_key_bits_range();
            if peer.key_bits() < lo || peer.key_bits() > hi {
                return Err(StatusCode::BadCertificatePolicyCheckFailed);
            }
        }
        if self.id.asym_plain_block_size(peer.key_bytes()) == 0 {
            return Err(StatusCode::BadCertificatePolicyCheckFailed);
        }
        Ok(Box::new(AsymCrypto {
            id: self.id,
            own: self.own.clone(),
            peer,
        }))
    }

    fn symmetric(
        &self,
        role: Role,
        mode: MessageSecurityMode,
        local_nonce: &[u8],
        remote_nonce: &[u8],
    ) -> Result<Box<dyn ChunkCrypto>, StatusCode> {
        let encrypt = match mode {
            MessageSecurityMode::Sign => false,
            MessageSecurityMode::SignAndEncrypt => true,
            _ => return Err(StatusCode::BadSecurityModeRejected),
        };
        let (client_nonce, server_nonce) = match role {
            Role::Client => (local_nonce, remote_nonce),
            Role::Server => (remote_nonce, local_nonce),
        };
        let keys = derive_channel_keys(self.id, client_nonce, server_nonce).map_err(sc)?;
        let (send, recv) = match role {
            Role::Client => (keys.client, keys.server),
            Role::Server => (keys.server, keys.client),
        };
        Ok(Box::new(SymCrypto {
            encrypt,
            send,
            recv,
        }))
    }

    fn admit_handshake(&self, peer: Option<IpAddr>, now: Now) -> Result<(), StatusCode> {
        match &self.trust {
            Some(t) => t.admit_handshake(peer, now),
            None => Ok(()),
        }
    }

    fn sign_own(&self, data: &[u8]) -> Result<(String, Vec<u8>), StatusCode> {
        let uri = self
            .id
            .asym_signature_algorithm_uri()
            .ok_or(StatusCode::BadSecurityPolicyRejected)?;
        let mut sig = vec![0u8; self.own.key.key_bytes()];
        asym_sign_into(self.id, &self.own.key, data, &mut sig).map_err(sc)?;
        Ok((uri.to_owned(), sig))
    }

    fn verify_signature(
        &self,
        signer_certificate: &[u8],
        data: &[u8],
        algorithm_uri: &str,
        signature: &[u8],
    ) -> Result<(), StatusCode> {
        if self.id.asym_signature_algorithm_uri() != Some(algorithm_uri) {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        // The signer is the session's client certificate, which CreateSession validated: the
        // shard usually still has it parsed.
        let signer = signer_leaf(self.trust.as_deref(), signer_certificate)?;
        asym_verify(self.id, &signer, data, signature)
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }

    fn decrypt_user_secret(
        &self,
        encryption_algorithm: &str,
        ciphertext: &[u8],
        server_nonce: &[u8],
    ) -> Result<Vec<u8>, StatusCode> {
        decrypt_user_password(
            self.id,
            &self.own.key,
            encryption_algorithm,
            ciphertext,
            server_nonce,
        )
        .map(|p| p.to_vec())
        .map_err(sc)
    }

    fn validate_client_certificate(
        &self,
        certificate: &[u8],
        application_uri: Option<&str>,
        now: Now,
    ) -> Result<(), StatusCode> {
        match &self.trust {
            Some(t) => t
                .validate_client(certificate, application_uri, now)
                .map(|_| ())
                .map_err(sc),
            None => Ok(()),
        }
    }
}

/// OpenSecureChannel chunks: RSA encryption to the receiver's key, RSA signature with the
/// sender's key. Layouts differ per direction (key sizes of the two ends may differ).
struct AsymCrypto {
    id: PolicyId,
    own: Arc<OwnIdentity>,
    peer: Certificate,
}

impl ChunkCrypto for AsymCrypto {
    fn send_layout(&self) -> CryptoLayout {
        let kb = self.peer.key_bytes();
        CryptoLayout {
            encrypted: true,
            plain_block_size: self.id.asym_plain_block_size(kb),
            cipher_block_size: kb,
            signature_len: self.own.key.key_bytes(),
            extra_padding_byte: self.id.asym_has_extra_padding_byte(kb),
        }
    }

    fn recv_layout(&self) -> CryptoLayout {
        let kb = self.own.key.key_bytes();
        CryptoLayout {
            encrypted: true,
            plain_block_size: self.id.asym_plain_block_size(kb),
            cipher_block_size: kb,
            signature_len: self.peer.key_bytes(),
            extra_padding_byte: self.id.asym_has_extra_padding_byte(kb),
        }
    }

    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode> {
        asym_sign_into(self.id, &self.own.key, data, signature).map_err(sc)
    }

    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode> {
        asym_verify(self.id, &self.peer, data, signature)
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }

    fn encrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        if start > buf.len() {
            return Err(StatusCode::BadInternalError);
        }
        let plain = zeroize::Zeroizing::new(buf.split_off(start));
        let pb = self.id.asym_plain_block_size(self.peer.key_bytes());
        if pb == 0 || !plain.len().is_multiple_of(pb) {
            return Err(StatusCode::BadInternalError);
        }
        asym_encrypt(self.id, &self.peer, &plain, buf).map_err(sc)
    }

    fn decrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        if start > buf.len() {
            return Err(StatusCode::BadSecurityChecksFailed);
        }
        let cipher = buf.split_off(start);
        asym_decrypt(self.id, &self.own.key, &cipher, buf)
            .map(|_| ())
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }
}

/// MSG / CLO chunks of one token: HMAC-SHA256 and (SignAndEncrypt) AES-CBC with the keys
/// derived from the nonces; in place, no allocation.
struct SymCrypto {
    encrypt: bool,
    send: SymmetricKeys,
    recv: SymmetricKeys,
}

impl SymCrypto {
    fn layout(&self, keys: &SymmetricKeys) -> CryptoLayout {
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

impl ChunkCrypto for SymCrypto {
    fn send_layout(&self) -> CryptoLayout {
        self.layout(&self.send)
    }
    fn recv_layout(&self) -> CryptoLayout {
        self.layout(&self.recv)
    }
    fn sign(&self, data: &[u8], signature: &mut [u8]) -> Result<(), StatusCode> {
        self.send.sign(data, signature).map_err(sc)
    }
    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), StatusCode> {
        if self.recv.verify(data, signature) {
            Ok(())
        } else {
            Err(StatusCode::BadSecurityChecksFailed)
        }
    }
    fn encrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        let part = buf.get_mut(start..).ok_or(StatusCode::BadInternalError)?;
        self.send.encrypt_in_place(part).map_err(sc)
    }
    fn decrypt(&self, buf: &mut Vec<u8>, start: usize) -> Result<(), StatusCode> {
        let part = buf
            .get_mut(start..)
            .ok_or(StatusCode::BadSecurityChecksFailed)?;
        self.recv
            .decrypt_in_place(part)
            .map_err(|_| StatusCode::BadSecurityChecksFailed)
    }
}

/// A configured user: name, argon2id PHC hash, roles.
#[derive(Clone, Debug)]
pub struct UserEntry {
    /// User name.
    pub name: String,
    /// argon2id PHC string (`uaring hash-password`).
    pub password_hash: String,
    /// The well-known roles the user is given (the session also gets AuthenticatedUser).
    pub roles: Roles,
}

/// The users from the configuration, shared by all shards (read-only).
#[derive(Debug)]
pub struct UserDirectory {
    store: UserStore,
    roles: Vec<(String, Roles)>,
}

impl UserDirectory {
    /// Builds the directory; rejects malformed or non-argon2id hashes and duplicate names.
    pub fn new(users: &[UserEntry]) -> Result<Arc<UserDirectory>, String> {
        let store = UserStore::new(
            users
                .iter()
                .map(|u| (u.name.clone(), u.password_hash.clone()))
                .collect(),
        )?;
        Ok(Arc::new(UserDirectory {
            store,
            roles: users.iter().map(|u| (u.name.clone(), u.roles)).collect(),
        }))
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.roles.len()
    }

    /// Whether no user is configured.
    pub fn is_empty(&self) -> bool {
        self.roles.is_empty()
    }

    fn roles_of(&self, name: &str) -> Option<Roles> {
        self.roles.iter().find(|(n, _)| n == name).map(|(_, a)| *a)
    }
}

/// Core's [`UserAuthenticator`] for one shard: configured users (argon2id), the shard's
/// failed-login limiter per client address, and X.509 user certificates validated against
/// the shard's PKI (a trusted user certificate logs in as its subject common name, with the
/// roles of the configured user of that name, else `x509_roles`).
pub struct ConfiguredUsers {
    users: Arc<UserDirectory>,
    trust: Arc<ShardTrust>,
    x509_roles: Roles,
}

impl ConfiguredUsers {
    /// One per shard.
    pub fn new(
        users: Arc<UserDirectory>,
        trust: Arc<ShardTrust>,
        x509_roles: Roles,
    ) -> Arc<ConfiguredUsers> {
        Arc::new(ConfiguredUsers {
            users,
            trust,
            x509_roles,
        })
    }
}

impl UserAuthenticator for ConfiguredUsers {
    fn authenticate_password(
        &self,
        peer: Option<IpAddr>,
        user: &str,
        password: &[u8],
        now: Now,
    ) -> Result<Roles, StatusCode> {
        let limits = self.trust.limits();
        if !limits.login_allowed(peer, now) {
            // Too many failures from this address: refused without running argon2.
            return Err(StatusCode::BadUserAccessDenied);
        }
        match self.users.store.authenticate(user, password) {
            Ok(()) => {
                limits.login_succeeded(peer);
                self.users
                    .roles_of(user)
                    .ok_or(StatusCode::BadUserAccessDenied)
            }
            Err(_) => {
                limits.login_failed(peer, now);
                Err(StatusCode::BadUserAccessDenied)
            }
        }
    }

    fn login_allowed(&self, peer: Option<IpAddr>, now: Now) -> bool {
        self.trust.limits().login_allowed(peer, now)
    }

    fn login_failed(&self, peer: Option<IpAddr>, now: Now) {
        self.trust.limits().login_failed(peer, now)
    }

    fn authenticate_certificate(
        &self,
        peer: Option<IpAddr>,
        certificate: &[u8],
        now: Now,
    ) -> Result<(String, Roles), StatusCode> {
        if !self.login_allowed(peer, now) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let cert = match self
            .trust
            .with_pki(|pki| pki.validate(certificate, CertRole::User, None, unix_s(now)))
        {
            Ok(c) => c,
            Err(code) => {
                self.login_failed(peer, now);
                return Err(sc(code));
            }
        };
        let cn = cert.common_name().unwrap_or_else(|| cert.subject());
        let roles = self.users.roles_of(&cn).unwrap_or(self.x509_roles);
        Ok((cn, roles))
    }
}
