//! The PKI directory: own certificate and key, trusted and issuer certificates and CRLs, rejected
//! certificates; and certificate validation (OPC 10000-4 §6.1.3 steps).
//!
//! Layout (as other OPC UA stacks lay it out):
//!
//! ```text
//! pki/own/certs/uaring.der        own application instance certificate
//! pki/own/private/uaring.pem      own private key (PKCS#8 PEM, mode 0600)
//! pki/own/certs/uaring_nistP256.der    own ECC_nistP256 certificate (`uaring cert generate
//! pki/own/private/uaring_nistP256.pem  --type nistP256`), and its key; likewise nistP384,
//!                                      brainpoolP256r1 and brainpoolP384r1
//! pki/trusted/certs/              trusted application certificates and CAs
//! pki/trusted/crl/                CRLs of trusted CAs
//! pki/issuers/certs/              CAs used to build chains, not trusted by themselves
//! pki/issuers/crl/                CRLs of those CAs
//! pki/rejected/certs/             client certificates that failed validation (copied here)
//! ```
//!
//! The store is loaded into memory; validation never touches the disk (except copying a rejected
//! certificate). [`Pki::refresh_if_stale`] rescans the directories at most once per
//! `rescan_interval_ms` and reloads when a listing, a size or an mtime changed, so a certificate
//! dropped into `trusted/certs` is accepted without a restart.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};

use der::{Decode, Encode, Reader, SliceReader};

use crate::asymmetric::PrivateKey;
use crate::cert::{
    generate_self_signed, verify_ecdsa_signature, verify_rsa_signature, CertSignatureAlg,
    Certificate, CertificateRequest,
};
use crate::ecc::{EccCurve, EccPrivateKey};
use crate::status;

/// Certificate files larger than this are ignored by the scanner.
pub const FILE_LEN_MAX: u64 = 1024 * 1024;
/// Files per directory the scanner loads at most.
pub const FILES_PER_DIR_MAX: usize = 4096;
/// File name of the own certificate in `own/certs`.
pub const OWN_CERT_FILE: &str = "uaring.der";
/// File name of the own private key in `own/private`.
pub const OWN_KEY_FILE: &str = "uaring.pem";

/// The warning a server logs when it runs with [`PkiConfig::accept_all_client_certs`].
pub const ACCEPT_ALL_WARNING: &str = "WARNING: accept_all_client_certs is ON: every client \
certificate is accepted without trust, validity, revocation or ApplicationUri checks. Any client \
can open a secure channel. Use this only for benchmarks on a trusted network, never in production.";

/// What a certificate is validated for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertRole {
    /// A client application instance certificate (OpenSecureChannel / CreateSession on a server).
    ClientApp,
    /// A server application instance certificate (validated by a client, e.g. the harness).
    ServerApp,
    /// An X.509 user identity token certificate.
    User,
}

/// PKI behaviour.
#[derive(Clone, Debug)]
pub struct PkiConfig {
    /// Accept every parseable client certificate with a usable RSA key (benchmark contract).
    /// Log [`ACCEPT_ALL_WARNING`] when set.
    pub accept_all_client_certs: bool,
    /// Require a CRL for every CA in a chain (else BadCertificate[Issuer]RevocationUnknown).
    pub require_crls: bool,
    /// Minimum interval between two directory rescans.
    pub rescan_interval_ms: u64,
    /// Most files kept in `rejected/certs`; further rejected certificates are not copied.
    pub rejected_files_max: usize,
    /// Smallest RSA key accepted (2048 for the non-deprecated policies).
    pub key_bits_min: usize,
    /// Largest RSA key accepted.
    pub key_bits_max: usize,
    /// Client certificate chains remembered after they validated ([`Pki::validate_client`]), so
    /// that a client's next handshake (and the CreateSession that repeats its OpenSecureChannel's
    /// check) skips the parse and the signature checks. 0 = none remembered.
    pub validated_chains_max: usize,
}

impl Default for PkiConfig {
    fn default() -> Self {
        PkiConfig {
            accept_all_client_certs: false,
            require_crls: false,
            rescan_interval_ms: 1000,
            rejected_files_max: 256,
            key_bits_min: 2048,
            key_bits_max: 4096,
            validated_chains_max: 64,
        }
    }
}

/// A parsed certificate revocation list.
#[derive(Clone, Debug)]
pub struct Crl {
    issuer_der: Vec<u8>,
    tbs: Vec<u8>,
    signature: Vec<u8>,
    signature_alg: CertSignatureAlg,
    revoked_serials: Vec<Vec<u8>>,
}

impl Crl {
    /// Parses a DER or PEM (`X509 CRL`) CRL.
    pub fn from_pem_or_der(bytes: &[u8]) -> Result<Self, u32> {
        match pem::parse(bytes) {
            Ok(p) if p.tag() == "X509 CRL" => Self::from_der(p.contents()),
            Ok(_) => Err(status::BAD_CERTIFICATE_INVALID),
            Err(_) => Self::from_der(bytes),
        }
    }

    /// Parses a DER CRL.
    pub fn from_der(der: &[u8]) -> Result<Self, u32> {
        let bad = |_| status::BAD_CERTIFICATE_INVALID;
        let list = x509_cert::crl::CertificateList::from_der(der).map_err(bad)?;
        let tbs = {
            let mut r = SliceReader::new(der).map_err(bad)?;
            der::Header::decode(&mut r).map_err(bad)?;
            r.tlv_bytes().map_err(bad)?.to_vec()
        };
        let oid = list.signature_algorithm.oid;
        use const_oid::db::rfc5912 as o;
        let signature_alg = if oid == o::SHA_256_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha256
        } else if oid == o::SHA_384_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha384
        } else if oid == o::SHA_512_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha512
        } else if oid == o::ID_RSASSA_PSS {
            CertSignatureAlg::RsaPss
        } else if oid == o::SHA_1_WITH_RSA_ENCRYPTION {
            CertSignatureAlg::RsaSha1
        } else if oid == o::ECDSA_WITH_SHA_256 {
            CertSignatureAlg::EcdsaSha256
        } else if oid == o::ECDSA_WITH_SHA_384 {
            CertSignatureAlg::EcdsaSha384
        } else {
            CertSignatureAlg::Other
        };
        let revoked_serials = list
            .tbs_cert_list
            .revoked_certificates
            .iter()
            .flatten()
            .map(|r| r.serial_number.as_bytes().to_vec())
            .collect();
        Ok(Crl {
            issuer_der: list.tbs_cert_list.issuer.to_der().map_err(bad)?,
            tbs,
            signature: list.signature.raw_bytes().to_vec(),
            signature_alg,
            revoked_serials,
        })
    }

    /// Whether `ca` issued (and signed) this CRL.
    pub fn is_issued_by(&self, ca: &Certificate) -> bool {
        let signed = match self.signature_alg {
            CertSignatureAlg::EcdsaSha256 | CertSignatureAlg::EcdsaSha384 => {
                verify_ecdsa_signature(self.signature_alg, ca, &self.tbs, &self.signature)
            }
            _ => verify_rsa_signature(
                self.signature_alg,
                ca.rsa_public_key(),
                &self.tbs,
                &self.signature,
            ),
        };
        self.issuer_der == ca.subject_der() && signed.is_ok()
    }

    /// Whether the serial number is listed.
    pub fn is_revoked(&self, serial: &[u8]) -> bool {
        self.revoked_serials.iter().any(|s| s.as_slice() == serial)
    }
}

#[derive(Default)]
struct Store {
    trusted: Vec<Certificate>,
    issuers: Vec<Certificate>,
    crls: Vec<Crl>,
    load_errors: Vec<String>,
}

/// The PKI store of one shard (cheap to have one per shard: it is only read on the request path
/// and rescanned on the caller's clock).
pub struct Pki {
    root: PathBuf,
    config: PkiConfig,
    store: Store,
    fingerprint: u64,
    last_scan_ms: Option<u64>,
    /// The [`request_rescan`] generation this store last reloaded for.
    rescan_seen: u64,
    /// Client chains that validated against this store (emptied by every reload).
    validated: std::sync::Mutex<ValidatedChains>,
}

/// Client certificate chains that passed [`Pki::validate_client`] since the store was last
/// loaded, by the SHA-256 of the chain's bytes. An entry stands for the checks that depend only
/// on the chain and the store (structure, signatures, policy, trust, usage, revocation); the
/// time window and the ApplicationUri are checked again at every use, and a chain outside its
/// window or with another URI is validated in full (which gives the right error). At most
/// `validated_chains_max` entries; the least recently used one makes room.
#[derive(Default)]
struct ValidatedChains {
    entries: Vec<ValidatedChain>,
    tick: u64,
}

struct ValidatedChain {
    digest: [u8; 32],
    leaf: Certificate,
    /// The latest notBefore and the earliest notAfter of the path (Unix seconds).
    window: (i64, i64),
    used: u64,
}

impl ValidatedChains {
    fn get(&mut self, digest: &[u8; 32]) -> Option<&mut ValidatedChain> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.iter_mut().find(|e| &e.digest == digest)?;
        e.used = tick;
        Some(e)
    }

    fn insert(&mut self, max: usize, digest: [u8; 32], leaf: &Certificate, window: (i64, i64)) {
        if max == 0 || self.get(&digest).is_some() {
            return;
        }
        if self.entries.len() >= max {
            if let Some(i) = self
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.used)
                .map(|(i, _)| i)
            {
                self.entries.swap_remove(i);
            }
        }
        self.entries.push(ValidatedChain {
            digest,
            leaf: leaf.clone(),
            window,
            used: self.tick,
        });
    }
}

fn chain_digest(chain_der: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(chain_der).into()
}

/// Generation of process-wide rescan requests ([`request_rescan`]).
static RESCAN_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Asks every [`Pki`] of the process to reload its trust lists at its next
/// [`Pki::refresh_if_stale`], whatever `rescan_interval_ms` says (SIGHUP).
pub fn request_rescan() {
    RESCAN_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Release);
}

/// How many [`request_rescan`]s the process has seen (a refresher compares it with the one it
/// last acted on).
pub fn rescan_generation() -> u64 {
    RESCAN_GENERATION.load(std::sync::atomic::Ordering::Acquire)
}

const DIRS: [&str; 7] = [
    "own/certs",
    "own/private",
    "trusted/certs",
    "trusted/crl",
    "issuers/certs",
    "issuers/crl",
    "rejected/certs",
];

impl Pki {
    /// Opens (and creates, if missing) the PKI directory layout under `root`, and loads it.
    pub fn open(root: &Path, config: PkiConfig) -> io::Result<Pki> {
        for d in DIRS {
            fs::create_dir_all(root.join(d))?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(root.join("own/private"), fs::Permissions::from_mode(0o700))?;
        }
        let mut pki = Pki {
            root: root.to_path_buf(),
            config,
            store: Store::default(),
            fingerprint: 0,
            last_scan_ms: None,
            rescan_seen: RESCAN_GENERATION.load(std::sync::atomic::Ordering::Acquire),
            validated: Default::default(),
        };
        pki.reload();
        Ok(pki)
    }

    /// The PKI root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The configuration.
    pub fn config(&self) -> &PkiConfig {
        &self.config
    }

    /// Path of a subdirectory (`"trusted/certs"`, …).
    pub fn dir(&self, sub: &str) -> PathBuf {
        self.root.join(sub)
    }

    /// Path of the own certificate.
    pub fn own_cert_path(&self) -> PathBuf {
        self.root.join("own/certs").join(OWN_CERT_FILE)
    }

    /// Path of the own private key.
    pub fn own_key_path(&self) -> PathBuf {
        self.root.join("own/private").join(OWN_KEY_FILE)
    }

    /// Number of trusted certificates, issuer certificates and CRLs loaded.
    pub fn counts(&self) -> (usize, usize, usize) {
        (
            self.store.trusted.len(),
            self.store.issuers.len(),
            self.store.crls.len(),
        )
    }

    /// Files the last load could not parse (for the log), as "path: reason".
    pub fn load_errors(&self) -> &[String] {
        &self.store.load_errors
    }

    /// Rescans the directories if the last scan is at least `rescan_interval_ms` old and reloads
    /// the store when anything changed. Returns whether it reloaded. `now_ms` is any monotonic
    /// millisecond clock of the caller; the call is a comparison when not yet due, and a few
    /// `readdir`/`stat` calls when due.
    pub fn refresh_if_stale(&mut self, now_ms: u64) -> bool {
        let generation = RESCAN_GENERATION.load(std::sync::atomic::Ordering::Acquire);
        if generation != self.rescan_seen {
            self.rescan_seen = generation;
            self.last_scan_ms = Some(now_ms);
            self.reload();
            return true;
        }
        if let Some(last) = self.last_scan_ms {
            if now_ms.saturating_sub(last) < self.config.rescan_interval_ms {
                return false;
            }
        }
        self.last_scan_ms = Some(now_ms);
        let fp = self.scan_fingerprint();
        if fp == self.fingerprint {
            return false;
        }
        self.reload();
        true
    }

    /// Reloads every trusted/issuer certificate and CRL now.
    pub fn reload(&mut self) {
        // Fingerprint first: a change made while loading triggers another reload later.
        let fp = self.scan_fingerprint();
        let mut store = Store::default();
        for (sub, kind) in [
            ("trusted/certs", 0),
            ("issuers/certs", 1),
            ("trusted/crl", 2),
            ("issuers/crl", 2),
        ] {
            for path in list_files(&self.root.join(sub)) {
                let bytes = match read_small(&path) {
                    Ok(b) => b,
                    Err(e) => {
                        store.load_errors.push(format!("{}: {e}", path.display()));
                        continue;
                    }
                };
                let result = match kind {
                    0 | 1 => Certificate::from_pem_or_der(&bytes).map(|c| {
                        if kind == 0 {
                            store.trusted.push(c)
                        } else {
                            store.issuers.push(c)
                        }
                    }),
                    _ => Crl::from_pem_or_der(&bytes).map(|c| store.crls.push(c)),
                };
                if let Err(code) = result {
                    store
                        .load_errors
                        .push(format!("{}: {}", path.display(), status::name(code)));
                }
            }
        }
        self.store = store;
        self.fingerprint = fp;
        self.validated
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .clear();
    }

    fn scan_fingerprint(&self) -> u64 {
        Pki::fingerprint_of(&self.root)
    }

    /// What this store was loaded from, as [`Pki::fingerprint_of`] gives it.
    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    /// The listing, sizes and mtimes of the trust directories under `root`, hashed (a few
    /// `readdir`/`stat` calls): when it differs from a store's [`Pki::fingerprint`], the store
    /// is out of date.
    pub fn fingerprint_of(root: &Path) -> u64 {
        let mut h = DefaultHasher::new();
        for sub in [
            "trusted/certs",
            "trusted/crl",
            "issuers/certs",
            "issuers/crl",
        ] {
            let dir = root.join(sub);
            sub.hash(&mut h);
            if let Ok(rd) = fs::read_dir(&dir) {
                let mut entries: Vec<(String, u64, i128)> = rd
                    .flatten()
                    .take(FILES_PER_DIR_MAX)
                    .filter_map(|e| {
                        let md = e.metadata().ok()?;
                        let mtime = md
                            .modified()
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map(|d| d.as_nanos() as i128)
                            .unwrap_or(-1);
                        Some((
                            e.file_name().to_string_lossy().into_owned(),
                            md.len(),
                            mtime,
                        ))
                    })
                    .collect();
                entries.sort();
                entries.hash(&mut h);
            }
        }
        // Never 0, so a fresh Pki (fingerprint 0) always loads.
        h.finish() | 1
    }

    /// Copies a certificate file into `trusted/certs` (the `uaring cert trust FILE` command).
    /// The next [`Pki::refresh_if_stale`] picks it up; this instance reloads at once.
    pub fn trust_file(&mut self, file: &Path) -> Result<Certificate, String> {
        let bytes = read_small(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let cert = Certificate::from_pem_or_der(&bytes).map_err(|c| {
            format!(
                "{}: not a certificate ({})",
                file.display(),
                status::name(c)
            )
        })?;
        self.trust(&cert).map_err(|e| e.to_string())?;
        Ok(cert)
    }

    /// Writes `cert` into `trusted/certs` as DER and reloads.
    pub fn trust(&mut self, cert: &Certificate) -> io::Result<PathBuf> {
        let path = self.root.join("trusted/certs").join(cert_file_name(cert));
        write_atomic(&path, cert.der(), 0o644)?;
        // Remove a rejected copy, if any.
        let _ = fs::remove_file(self.root.join("rejected/certs").join(cert_file_name(cert)));
        self.reload();
        Ok(path)
    }

    /// Copies a rejected certificate into `rejected/certs` (bounded by `rejected_files_max`).
    pub fn record_rejected(&self, cert_der: &[u8]) {
        let dir = self.root.join("rejected/certs");
        let count = fs::read_dir(&dir)
            .map(|rd| rd.count())
            .unwrap_or(usize::MAX);
        if count >= self.config.rejected_files_max {
            return;
        }
        let name = match Certificate::from_der(cert_der) {
            Ok(c) => cert_file_name(&c),
            Err(_) => return,
        };
        let path = dir.join(name);
        if !path.exists() {
            let _ = write_atomic(&path, cert_der, 0o644);
        }
    }

    /// Validates a client application certificate chain as a server does on OpenSecureChannel and
    /// CreateSession, and copies the leaf into `rejected/certs` when it fails.
    ///
    /// `expected_app_uri` is the ApplicationUri of the client's ApplicationDescription (None on
    /// OpenSecureChannel, where it is not known yet). Honours `accept_all_client_certs`. A chain
    /// that validated before against the same store is not parsed or verified again (see
    /// `validated_chains_max`); its validity periods and ApplicationUri are.
    pub fn validate_client(
        &self,
        chain_der: &[u8],
        expected_app_uri: Option<&str>,
        now_unix_s: i64,
    ) -> Result<Certificate, u32> {
        // With validated_chains_max = 0 nothing is remembered: no digest to look up or keep.
        let max = self.config.validated_chains_max;
        let digest = (max > 0).then(|| chain_digest(chain_der));
        if let Some(leaf) = digest
            .as_ref()
            .and_then(|d| self.remembered(d, expected_app_uri, now_unix_s))
        {
            return Ok(leaf);
        }
        let result = if self.config.accept_all_client_certs {
            Certificate::parse_chain(chain_der).and_then(|chain| {
                let leaf = chain
                    .into_iter()
                    .next()
                    .ok_or(status::BAD_CERTIFICATE_INVALID)?;
                self.check_key_size(&leaf)?;
                Ok((leaf, (i64::MIN, i64::MAX)))
            })
        } else {
            self.validate_path(chain_der, CertRole::ClientApp, expected_app_uri, now_unix_s)
        };
        match result {
            Ok((leaf, window)) => {
                if let Some(digest) = digest {
                    self.validated_chains().insert(max, digest, &leaf, window);
                }
                Ok(leaf)
            }
            Err(e) => {
                if !self.config.accept_all_client_certs {
                    if let Ok(chain) = Certificate::parse_chain(chain_der) {
                        if let Some(leaf) = chain.first() {
                            self.record_rejected(leaf.der());
                        }
                    }
                }
                Err(e)
            }
        }
    }

    /// The leaf of a chain that [`Pki::validate_client`] accepted against this store, without
    /// parsing it again; None if it is not remembered (any more).
    pub fn validated_leaf(&self, chain_der: &[u8]) -> Option<Certificate> {
        if self.config.validated_chains_max == 0 {
            return None;
        }
        let digest = chain_digest(chain_der);
        self.validated_chains().get(&digest).map(|e| e.leaf.clone())
    }

    /// Whether [`Pki::validate_client`] of `chain_der` would answer from what this store
    /// remembers (no path to build, no signature to check, nothing to write to `rejected/`).
    pub fn remembers_client(
        &self,
        chain_der: &[u8],
        expected_app_uri: Option<&str>,
        now_unix_s: i64,
    ) -> bool {
        self.config.validated_chains_max > 0
            && self
                .remembered(&chain_digest(chain_der), expected_app_uri, now_unix_s)
                .is_some()
    }

    fn validated_chains(&self) -> std::sync::MutexGuard<'_, ValidatedChains> {
        self.validated.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn remembered(
        &self,
        digest: &[u8; 32],
        expected_app_uri: Option<&str>,
        now_unix_s: i64,
    ) -> Option<Certificate> {
        let mut chains = self.validated_chains();
        let e = chains.get(digest)?;
        let in_window = e.window.0 <= now_unix_s && now_unix_s <= e.window.1;
        let uri_ok = self.config.accept_all_client_certs
            || expected_app_uri.is_none_or(|u| e.leaf.application_uri() == Some(u));
        (in_window && uri_ok).then(|| e.leaf.clone())
    }

    fn check_key_size(&self, cert: &Certificate) -> Result<(), u32> {
        // An EC key on a curve this crate runs (NIST, Brainpool) has the size its curve gives;
        // which curve a channel needs is the policy's check.
        if cert.ec_curve().is_some() {
            return Ok(());
        }
        let bits = cert.key_bits();
        if bits < self.config.key_bits_min || bits > self.config.key_bits_max {
            return Err(status::BAD_CERTIFICATE_POLICY_CHECK_FAILED);
        }
        Ok(())
    }

    fn is_trusted(&self, cert: &Certificate) -> bool {
        self.store
            .trusted
            .iter()
            .any(|t| t.thumbprint() == cert.thumbprint())
    }

    /// Validates a certificate chain (leaf first) without side effects. Returns the parsed leaf.
    ///
    /// Steps in OPC 10000-4 Table 100 order: structure (BadCertificateInvalid), chain
    /// (BadCertificateChainIncomplete), signatures (BadCertificateInvalid), security policy
    /// (SHA-1 or key size: BadCertificatePolicyCheckFailed), trust list (BadCertificateUntrusted),
    /// validity (BadCertificate[Issuer]TimeInvalid), ApplicationUri (BadCertificateUriInvalid),
    /// usage (BadCertificate[Issuer]UseNotAllowed), revocation (BadCertificate[Issuer]Revoked,
    /// BadCertificate[Issuer]RevocationUnknown).
    pub fn validate(
        &self,
        chain_der: &[u8],
        role: CertRole,
        expected_app_uri: Option<&str>,
        now_unix_s: i64,
    ) -> Result<Certificate, u32> {
        self.validate_path(chain_der, role, expected_app_uri, now_unix_s)
            .map(|(leaf, _)| leaf)
    }

    /// [`Pki::validate`], also returning the time window in which the whole path is valid
    /// (the latest notBefore, the earliest notAfter).
    fn validate_path(
        &self,
        chain_der: &[u8],
        role: CertRole,
        expected_app_uri: Option<&str>,
        now_unix_s: i64,
    ) -> Result<(Certificate, (i64, i64)), u32> {
        let chain = Certificate::parse_chain(chain_der)?;
        let Some(leaf) = chain.first() else {
            return Err(status::BAD_CERTIFICATE_INVALID);
        };

        // Build the path leaf → trust anchor (or untrusted root), verifying each signature.
        let mut path: Vec<&Certificate> = vec![leaf];
        let mut trusted = false;
        loop {
            let Some(&current) = path.last() else {
                return Err(status::BAD_CERTIFICATE_CHAIN_INCOMPLETE);
            };
            if self.is_trusted(current) {
                trusted = true;
                if current.is_self_issued() {
                    current.verify_signed_by(current)?;
                }
                break;
            }
            if current.is_self_issued() {
                current.verify_signed_by(current)?;
                break;
            }
            if path.len() >= crate::cert::CHAIN_LEN_MAX {
                return Err(status::BAD_CERTIFICATE_CHAIN_INCOMPLETE);
            }
            let candidates = chain
                .iter()
                .skip(1)
                .chain(self.store.trusted.iter())
                .chain(self.store.issuers.iter())
                .filter(|c| c.subject_der() == current.issuer_der())
                .filter(|c| match (current.authority_key_id(), c.subject_key_id()) {
                    (Some(aki), Some(ski)) => aki == ski,
                    _ => true,
                });
            let mut found = None;
            let mut last_err = status::BAD_CERTIFICATE_CHAIN_INCOMPLETE;
            for c in candidates {
                if path.iter().any(|p| p.thumbprint() == c.thumbprint()) {
                    continue;
                }
                match current.verify_signed_by(c) {
                    Ok(()) => {
                        found = Some(c);
                        break;
                    }
                    Err(e) => last_err = e,
                }
            }
            match found {
                Some(c) => path.push(c),
                None => return Err(last_err),
            }
        }

        // Security policy: key sizes of every certificate in the path.
        for c in &path {
            self.check_key_size(c)?;
        }
        if !trusted {
            return Err(status::BAD_CERTIFICATE_UNTRUSTED);
        }
        // Validity period.
        if !leaf.is_time_valid(now_unix_s) {
            return Err(status::BAD_CERTIFICATE_TIME_INVALID);
        }
        if path.iter().skip(1).any(|c| !c.is_time_valid(now_unix_s)) {
            return Err(status::BAD_CERTIFICATE_ISSUER_TIME_INVALID);
        }
        // ApplicationUri.
        if let Some(expected) = expected_app_uri {
            if leaf.application_uri() != Some(expected) {
                return Err(status::BAD_CERTIFICATE_URI_INVALID);
            }
        }
        // Usage.
        check_leaf_usage(leaf, role)?;
        for ca in path.iter().skip(1) {
            if ca.is_ca() != Some(true) {
                return Err(status::BAD_CERTIFICATE_ISSUER_USE_NOT_ALLOWED);
            }
            if let Some(ku) = ca.key_usage() {
                if !ku.key_cert_sign {
                    return Err(status::BAD_CERTIFICATE_ISSUER_USE_NOT_ALLOWED);
                }
            }
        }
        // Revocation: every certificate issued by a CA of the path.
        for (i, pair) in path.windows(2).enumerate() {
            let &[subject, ca] = pair else { continue };
            let crls: Vec<&Crl> = self
                .store
                .crls
                .iter()
                .filter(|l| l.is_issued_by(ca))
                .collect();
            let leaf_level = i == 0;
            if crls.is_empty() {
                if self.config.require_crls {
                    return Err(if leaf_level {
                        status::BAD_CERTIFICATE_REVOCATION_UNKNOWN
                    } else {
                        status::BAD_CERTIFICATE_ISSUER_REVOCATION_UNKNOWN
                    });
                }
                continue;
            }
            if crls.iter().any(|l| l.is_revoked(subject.serial())) {
                return Err(if leaf_level {
                    status::BAD_CERTIFICATE_REVOKED
                } else {
                    status::BAD_CERTIFICATE_ISSUER_REVOKED
                });
            }
        }
        let window = path.iter().fold((i64::MIN, i64::MAX), |(nb, na), c| {
            (nb.max(c.not_before_unix_s()), na.min(c.not_after_unix_s()))
        });
        let leaf = chain
            .into_iter()
            .next()
            .ok_or(status::BAD_CERTIFICATE_INVALID)?;
        Ok((leaf, window))
    }

    /// Loads the own certificate and key, generating and writing them when missing.
    /// Returns (certificate, key, created).
    pub fn load_or_create_own(
        &self,
        req: &CertificateRequest,
    ) -> Result<(Certificate, PrivateKey, bool), String> {
        let cert_path = self.own_cert_path();
        let key_path = self.own_key_path();
        if cert_path.exists() || key_path.exists() {
            let (cert, key) = self.load_own()?;
            return Ok((cert, key, false));
        }
        let (cert, key) = generate_self_signed(req)
            .map_err(|c| format!("certificate generation failed: {}", status::name(c)))?;
        self.write_own(&cert, &key)?;
        Ok((cert, key, true))
    }

    /// Loads the own certificate and key and checks that they belong together.
    pub fn load_own(&self) -> Result<(Certificate, PrivateKey), String> {
        let cert_path = self.own_cert_path();
        let key_path = self.own_key_path();
        let cert_bytes =
            read_small(&cert_path).map_err(|e| format!("{}: {e}", cert_path.display()))?;
        let cert = Certificate::from_pem_or_der(&cert_bytes)
            .map_err(|c| format!("{}: {}", cert_path.display(), status::name(c)))?;
        let key_bytes = zeroize::Zeroizing::new(
            read_small(&key_path).map_err(|e| format!("{}: {e}", key_path.display()))?,
        );
        let key = PrivateKey::from_pem_or_der(&key_bytes)
            .map_err(|_| format!("{}: not an RSA private key", key_path.display()))?;
        if !key.matches(&cert) {
            return Err(format!(
                "{} does not belong to {}",
                key_path.display(),
                cert_path.display()
            ));
        }
        Ok((cert, key))
    }

    /// Path of the own certificate of an ECC certificate type.
    pub fn own_ecc_cert_path(&self, curve: EccCurve) -> PathBuf {
        self.root
            .join("own/certs")
            .join(format!("uaring_{}.der", curve.type_name()))
    }

    /// Path of the own private key of an ECC certificate type.
    pub fn own_ecc_key_path(&self, curve: EccCurve) -> PathBuf {
        self.root
            .join("own/private")
            .join(format!("uaring_{}.pem", curve.type_name()))
    }

    /// Loads the own certificate and key of an ECC certificate type: `None` when neither file
    /// is there (the type is not offered), an error when only one is or they do not match.
    pub fn load_own_ecc(
        &self,
        curve: EccCurve,
    ) -> Result<Option<(Certificate, EccPrivateKey)>, String> {
        let cert_path = self.own_ecc_cert_path(curve);
        let key_path = self.own_ecc_key_path(curve);
        if !cert_path.exists() && !key_path.exists() {
            return Ok(None);
        }
        let cert_bytes =
            read_small(&cert_path).map_err(|e| format!("{}: {e}", cert_path.display()))?;
        let cert = Certificate::from_pem_or_der(&cert_bytes)
            .map_err(|c| format!("{}: {}", cert_path.display(), status::name(c)))?;
        let key_bytes = zeroize::Zeroizing::new(
            read_small(&key_path).map_err(|e| format!("{}: {e}", key_path.display()))?,
        );
        let key = EccPrivateKey::from_pem_or_der(&key_bytes)
            .map_err(|_| format!("{}: not an EC private key", key_path.display()))?;
        if key.curve() != curve || !key.matches(&cert) {
            return Err(format!(
                "{} does not belong to {} ({})",
                key_path.display(),
                cert_path.display(),
                curve.type_name()
            ));
        }
        Ok(Some((cert, key)))
    }

    /// Writes the own certificate and key of an ECC certificate type, replacing old ones.
    pub fn write_own_ecc(&self, cert: &Certificate, key: &EccPrivateKey) -> Result<(), String> {
        let curve = key.curve();
        let key_path = self.own_ecc_key_path(curve);
        write_atomic(&key_path, key.to_pem().as_bytes(), 0o600)
            .map_err(|e| format!("{}: {e}", key_path.display()))?;
        let cert_path = self.own_ecc_cert_path(curve);
        write_atomic(&cert_path, cert.der(), 0o644)
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        Ok(())
    }

    /// Writes the own certificate (DER, 0644) and key (PKCS#8 PEM, 0600), replacing old ones.
    pub fn write_own(&self, cert: &Certificate, key: &PrivateKey) -> Result<(), String> {
        let key_path = self.own_key_path();
        write_atomic(&key_path, key.to_pem().as_bytes(), 0o600)
            .map_err(|e| format!("{}: {e}", key_path.display()))?;
        let cert_path = self.own_cert_path();
        write_atomic(&cert_path, cert.der(), 0o644)
            .map_err(|e| format!("{}: {e}", cert_path.display()))?;
        Ok(())
    }
}

fn check_leaf_usage(leaf: &Certificate, role: CertRole) -> Result<(), u32> {
    use const_oid::db::rfc5280::{ID_KP_CLIENT_AUTH, ID_KP_SERVER_AUTH};
    if let Some(ku) = leaf.key_usage() {
        let ok = match role {
            CertRole::User => ku.digital_signature,
            // An EC key signs and agrees on keys, it does not encrypt.
            CertRole::ClientApp | CertRole::ServerApp if leaf.ec_curve().is_some() => {
                ku.digital_signature
            }
            CertRole::ClientApp | CertRole::ServerApp => {
                ku.digital_signature && (ku.key_encipherment || ku.data_encipherment)
            }
        };
        if !ok {
            return Err(status::BAD_CERTIFICATE_USE_NOT_ALLOWED);
        }
    }
    let eku_ok = match role {
        CertRole::ClientApp => leaf.allows_extended_usage(ID_KP_CLIENT_AUTH),
        CertRole::ServerApp => leaf.allows_extended_usage(ID_KP_SERVER_AUTH),
        CertRole::User => true,
    };
    if !eku_ok {
        return Err(status::BAD_CERTIFICATE_USE_NOT_ALLOWED);
    }
    Ok(())
}

/// `<CN>[<thumbprint>].der`, the file naming other stacks use, with unsafe characters replaced.
pub fn cert_file_name(cert: &Certificate) -> String {
    let cn = cert.common_name().unwrap_or_else(|| "cert".into());
    let safe: String = cn
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe} [{}].der", cert.thumbprint_hex())
}

/// The files of a PKI directory as the scanner reads them: at most [`FILES_PER_DIR_MAX`],
/// dot files (temporary files of an atomic write) left out, sorted by name.
pub fn list_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd
            .flatten()
            .take(FILES_PER_DIR_MAX)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                !p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    out.sort();
    out
}

fn read_small(path: &Path) -> io::Result<Vec<u8>> {
    read_bounded(path, FILE_LEN_MAX)
}

/// A file's bytes, or InvalidData when it is longer than `max` (checked before reading).
pub fn read_bounded(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let md = fs::metadata(path)?;
    if md.len() > max {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "file too large"));
    }
    fs::read(path)
}

fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    let dir = path
        .parent()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no parent"))?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    ));
    {
        let mut opts = fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(mode);
        }
        let mut f = opts.open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    #[cfg(not(unix))]
    let _ = mode;
    fs::rename(&tmp, path)
}
