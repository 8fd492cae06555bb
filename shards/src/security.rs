//! Security wiring of the `uaring` binary: the `[security]` and `[[users]]` sections of the
//! configuration file, the PKI directory and the own certificate (generated on first start),
//! and one core `SecurityProvider` per shard (each shard owns its PKI store; the handshake and
//! failed-login limiters are one fixed-size table each shared by all shards, so the per-address
//! limits hold across shards: see uaring-crypto's `uasc` module). docs/Security.md describes
//! every key.

use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uaring_core::generated::types::{IdentityMappingRuleType, MessageSecurityMode};
use uaring_core::roles::{Roles, WellKnownRole};
use uaring_core::secure_channel::{
    EndpointSecurity, NonePolicy, SecurityProvider, UserTokenSettings, SECURITY_POLICY_NONE_URI,
};
use uaring_crypto::{
    AddressLimits, CertificateRequest, ConfiguredUsers, EccCurve, EccIdentity, EccPolicy,
    HandshakeLimits, LoginLimiterConfig, OwnIdentity, Pki, PkiConfig, PolicyId, RsaPolicy,
    ShardTrust, UserDirectory, UserEntry,
};

/// The shorthand role of `[[users]] role`, `[security] anonymous` and `x509_user_role`:
/// `read` is the Observer role, `readwrite` the Operator role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Read,
    Readwrite,
}

impl Role {
    /// The well-known role it stands for.
    pub fn roles(self) -> Roles {
        match self {
            Role::Read => Roles::OBSERVER,
            Role::Readwrite => Roles::OPERATOR,
        }
    }
}

/// The well-known roles a user can be given by name in `[[users]] roles` (Anonymous and
/// AuthenticatedUser are granted by the kind of login, not by configuration).
pub const GRANTABLE_ROLES: [WellKnownRole; 6] = [
    WellKnownRole::Observer,
    WellKnownRole::Operator,
    WellKnownRole::Engineer,
    WellKnownRole::Supervisor,
    WellKnownRole::ConfigureAdmin,
    WellKnownRole::SecurityAdmin,
];

/// A role named in `[[users]] roles`: one of [`GRANTABLE_ROLES`].
pub fn grantable_role(name: &str) -> Result<WellKnownRole, String> {
    match WellKnownRole::from_name(name) {
        Some(r) if GRANTABLE_ROLES.contains(&r) => Ok(r),
        _ => Err(format!(
            "unknown role {name:?} (one of {})",
            GRANTABLE_ROLES.map(WellKnownRole::name).join(", ")
        )),
    }
}

/// Anonymous logins: `"readwrite"`, `"read"` or `"off"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Anonymous {
    Off,
    Read,
    Readwrite,
}

impl Anonymous {
    /// The roles an anonymous login gets besides Anonymous; `None`: refused.
    pub fn roles(self) -> Option<Roles> {
        match self {
            Anonymous::Off => None,
            Anonymous::Read => Some(Role::Read.roles()),
            Anonymous::Readwrite => Some(Role::Readwrite.roles()),
        }
    }
}

/// `[[users]]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    /// argon2id PHC string (`uaring hash-password`).
    pub password: String,
    /// Shorthand: `read` (Observer) or `readwrite` (Operator).
    #[serde(default)]
    pub role: Option<Role>,
    /// Well-known roles by name (Observer, Operator, Engineer, Supervisor, ConfigureAdmin,
    /// SecurityAdmin), added to `role`'s.
    #[serde(default)]
    pub roles: Vec<String>,
}

impl UserConfig {
    /// The user's roles: `role`'s and `roles`; an unknown name or neither key is an error.
    pub fn granted(&self) -> Result<Roles, String> {
        if self.role.is_none() && self.roles.is_empty() {
            return Err(format!(
                "[[users]] {:?}: give it a role (`role = \"read\"|\"readwrite\"`) or roles (`roles = [\"Operator\", …]`)",
                self.name
            ));
        }
        let mut r = self.role.map_or(Roles::NONE, Role::roles);
        for name in &self.roles {
            r = r.and(grantable_role(name).map_err(|e| format!("[[users]] {:?}: {e}", self.name))?);
        }
        Ok(r)
    }
}

/// The identity mapping rules the server applies, per well-known role, for
/// Server.ServerCapabilities.RoleSet.<role>.Identities: anonymous logins (when on) get
/// Anonymous and the role of `[security] anonymous`; every user AuthenticatedUser and its
/// own roles (a UserName rule per user). X.509 users whose certificate names no configured
/// user get `x509_user_role`, which no rule of Part 18 can express (there is no "any
/// certificate" criterion): it is not listed.
pub fn role_identities(
    config: &SecurityConfig,
    users: &[UserConfig],
) -> Result<Vec<(WellKnownRole, Vec<IdentityMappingRuleType>)>, String> {
    use uaring_core::generated::types::IdentityCriteriaType as C;
    let rule = |criteria_type, criteria: &str| IdentityMappingRuleType {
        criteria_type,
        criteria: criteria.into(),
    };
    let anonymous = config.anonymous.roles();
    let mut granted = Vec::with_capacity(users.len());
    for u in users {
        granted.push((u.name.as_str(), u.granted()?));
    }
    Ok(WellKnownRole::ALL
        .into_iter()
        .map(|role| {
            let mut rules = Vec::new();
            match role {
                WellKnownRole::Anonymous if anonymous.is_some() => {
                    rules.push(rule(C::Anonymous, ""))
                }
                WellKnownRole::AuthenticatedUser
                    if !users.is_empty() || config.x509_user_tokens =>
                {
                    rules.push(rule(C::AuthenticatedUser, ""))
                }
                _ => {}
            }
            if anonymous.is_some_and(|a| a.contains(role)) {
                rules.push(rule(C::Anonymous, ""));
            }
            for (name, r) in &granted {
                if r.contains(role) {
                    rules.push(rule(C::UserName, name));
                }
            }
            (role, rules)
        })
        .collect())
}

/// `[security]`.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecurityConfig {
    /// Security policies offered, by name (`None`, `Basic256Sha256`, `Aes128_Sha256_RsaOaep`,
    /// `Aes256_Sha256_RsaPss`) or URI. Basic128Rsa15 and Basic256 are refused.
    pub policies: Vec<String>,
    /// Message security modes of every non-None policy: `Sign`, `SignAndEncrypt`.
    pub modes: Vec<String>,
    /// PKI directory (`--pki` overrides it).
    pub pki_dir: PathBuf,
    /// Accept any client certificate (benchmarks only; `--accept-all-client-certs`, on with
    /// `--contract`).
    pub accept_all_client_certs: bool,
    /// Require a CRL for every CA of a chain.
    pub require_crls: bool,
    /// Interval between rescans of the trust directories, per shard, milliseconds.
    pub rescan_interval_ms: u64,
    /// Most files kept in rejected/certs.
    pub rejected_files_max: usize,
    /// Client certificate chains each shard remembers after they validated (0 = none).
    pub validated_chains_max: usize,
    /// Anonymous logins: "readwrite" (default), "read" or "off".
    pub anonymous: Anonymous,
    /// UserName tokens (when `[[users]]` exist).
    pub user_name_tokens: bool,
    /// X.509 user certificate tokens (the certificate must validate against the PKI).
    pub x509_user_tokens: bool,
    /// Role of an X.509 user whose certificate CN names no configured user.
    pub x509_user_role: Role,
    /// Accept a UserName password in clear on a None channel.
    pub allow_password_on_none: bool,
    /// SecurityPolicy that encrypts UserName passwords (and signs X.509 tokens) on None
    /// endpoints. "" offers no UserName/X.509 token on None endpoints (unless
    /// allow_password_on_none).
    pub user_token_policy_on_none: String,
    /// OpenSecureChannel handshakes one client address may make in a burst (all shards together).
    pub handshake_burst: u32,
    /// One more handshake per address is allowed every this many milliseconds.
    pub handshake_refill_interval_ms: u64,
    /// Addresses tracked by the handshake and login limiters (each one fixed table shared by
    /// all shards).
    pub limiter_addresses_max: usize,
    /// Failed logins one client address may make in a burst (all shards together).
    pub login_failure_burst: u32,
    /// One failed login is forgiven every this many milliseconds.
    pub login_refill_interval_ms: u64,
    /// RSA key size of a generated application instance certificate.
    pub certificate_key_bits: usize,
    /// Extra DNS names for a generated certificate (the host name is always included).
    pub certificate_dns_names: Vec<String>,
    /// Extra IP addresses for a generated certificate (127.0.0.1 and the listen address are
    /// always included).
    pub certificate_ip_addresses: Vec<IpAddr>,
}

impl Default for SecurityConfig {
    fn default() -> Self {
        SecurityConfig {
            policies: [
                "None",
                "Basic256Sha256",
                "Aes128_Sha256_RsaOaep",
                "Aes256_Sha256_RsaPss",
                "ECC_nistP256",
                "ECC_nistP384",
                "ECC_brainpoolP256r1",
                "ECC_brainpoolP384r1",
            ]
            .map(String::from)
            .to_vec(),
            modes: ["Sign", "SignAndEncrypt"].map(String::from).to_vec(),
            pki_dir: PathBuf::from("pki"),
            accept_all_client_certs: false,
            require_crls: false,
            rescan_interval_ms: 1000,
            rejected_files_max: 256,
            validated_chains_max: 64,
            anonymous: Anonymous::Readwrite,
            user_name_tokens: true,
            x509_user_tokens: true,
            x509_user_role: Role::Read,
            allow_password_on_none: false,
            user_token_policy_on_none: "Basic256Sha256".into(),
            handshake_burst: 50,
            handshake_refill_interval_ms: 20,
            limiter_addresses_max: 4096,
            login_failure_burst: 5,
            login_refill_interval_ms: 12_000,
            certificate_key_bits: 2048,
            certificate_dns_names: Vec::new(),
            certificate_ip_addresses: Vec::new(),
        }
    }
}

/// Command-line overrides.
#[derive(Clone, Debug, Default)]
pub struct SecurityArgs {
    pub pki: Option<PathBuf>,
    pub accept_all_client_certs: bool,
    pub contract: bool,
}

/// An ECC policy named in `security.policies` (`ECC_nistP256`, `ECC_nistP384`,
/// `ECC_brainpoolP256r1`, `ECC_brainpoolP384r1` or the URI).
fn ecc_policy(name: &str) -> Option<EccCurve> {
    let n = name
        .strip_prefix("http://opcfoundation.org/UA/SecurityPolicy#")
        .unwrap_or(name);
    n.starts_with("ECC_")
        .then(|| EccCurve::from_name(n))
        .flatten()
}

/// The ECC policies named in `security.policies`, in order. They are offered only when their
/// certificate is in the PKI (`uaring cert generate --type nistP256`).
pub fn ecc_policies(config: &SecurityConfig) -> Vec<EccCurve> {
    let mut v = Vec::new();
    for c in config.policies.iter().filter_map(|p| ecc_policy(p)) {
        if !v.contains(&c) {
            v.push(c);
        }
    }
    v
}

fn policy_id(name: &str) -> Result<PolicyId, String> {
    let id = PolicyId::from_uri(name)
        .or_else(|| PolicyId::ALL.into_iter().find(|p| p.name() == name))
        .ok_or_else(|| format!("security.policies: unknown policy {name:?}"))?;
    if !id.is_supported() {
        return Err(format!(
            "security.policies: {} is deprecated and not supported (aws-lc-rs cannot sign with RSA-SHA-1)",
            id.name()
        ));
    }
    Ok(id)
}

fn mode(name: &str) -> Result<MessageSecurityMode, String> {
    match name {
        "Sign" => Ok(MessageSecurityMode::Sign),
        "SignAndEncrypt" => Ok(MessageSecurityMode::SignAndEncrypt),
        other => Err(format!(
            "security.modes: {other:?} is not Sign or SignAndEncrypt"
        )),
    }
}

/// Takes `[security]` and `[[users]]` out of the configuration table (the rest is core's).
pub fn take_config(table: &mut toml::Table) -> Result<(SecurityConfig, Vec<UserConfig>), String> {
    let sec = match table.remove("security") {
        Some(v) => v
            .try_into::<SecurityConfig>()
            .map_err(|e| format!("[security]: {e}"))?,
        None => SecurityConfig::default(),
    };
    let users = match table.remove("users") {
        Some(v) => {
            let wrapper: toml::Table = [("users".to_string(), v)].into_iter().collect();
            #[derive(Deserialize)]
            struct U {
                users: Vec<UserConfig>,
            }
            wrapper
                .try_into::<U>()
                .map_err(|e| format!("[[users]]: {e}"))?
                .users
        }
        None => Vec::new(),
    };
    Ok((sec, users))
}

/// Everything the shards share, built once at start.
pub struct SecuritySetup {
    pub config: SecurityConfig,
    pub policies: Vec<PolicyId>,
    pub modes: Vec<MessageSecurityMode>,
    pub none: bool,
    pub own: Option<Arc<OwnIdentity>>,
    /// The ECC application certificates present in the PKI, one per curve, for the ECC
    /// policies configured.
    pub ecc: Vec<Arc<EccIdentity>>,
    pub pki_root: PathBuf,
    pub pki_config: PkiConfig,
    pub users: Option<Arc<UserDirectory>>,
    /// The per-address handshake and failed-login limiters, shared by every shard.
    pub limits: Arc<AddressLimits>,
    /// Every shard's trust state [`SecuritySetup::shard_provider`] made, for the PKI
    /// refresher ([`SecuritySetup::start_pki_refresher`]).
    trusts: Arc<Mutex<Vec<Arc<ShardTrust>>>>,
    /// The RSA application instance certificate in use now: `own` at start, replaced by
    /// push management's ApplyChanges ([`SecuritySetup::replace_own`]). Read by a shard only
    /// when `own_generation` moved.
    current_own: Mutex<Option<Arc<OwnIdentity>>>,
    /// The ECC certificates in use now: `ecc` at start, replaced one per curve by
    /// [`SecuritySetup::replace_ecc`].
    current_ecc: Mutex<Vec<Arc<EccIdentity>>>,
    own_generation: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SecuritySetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecuritySetup")
            .field("policies", &self.policies)
            .field("modes", &self.modes)
            .finish_non_exhaustive()
    }
}

/// The wall clock in Unix seconds (certificate validity checks).
pub(crate) fn now_unix_s() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Loads the own certificate and key, generating them when both are missing. Concurrent
/// first starts on one PKI directory are serialized by a lock file in `own/private`.
fn load_or_create_own(
    pki: &Pki,
    req: &CertificateRequest,
) -> Result<(Arc<OwnIdentity>, bool), String> {
    let lock = pki.root().join("own/private/.generating");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if pki.own_cert_path().exists() || pki.own_key_path().exists() {
            if !lock.exists() {
                let (cert, key) = pki.load_own()?;
                return Ok((OwnIdentity::new(cert, key)?, false));
            }
        } else {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&lock)
            {
                Ok(_) => {
                    let r = pki.load_or_create_own(req);
                    let _ = fs::remove_file(&lock);
                    let (cert, key, created) = r?;
                    return Ok((OwnIdentity::new(cert, key)?, created));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(format!("{}: {e}", lock.display())),
            }
        }
        // Another process is generating: wait; a lock older than 60 s is stale.
        let stale = fs::metadata(&lock)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if stale {
            let _ = fs::remove_file(&lock);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out waiting for {} to go away",
                lock.display()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Upper bound of `security.validated_chains_max` (each entry holds one parsed certificate).
pub const VALIDATED_CHAINS_MAX: usize = 4096;

/// Checks `[security]` and `[[users]]` without touching the PKI directory: the limits, the
/// policy and mode names, the password hashes. Returns (None offered, the RSA policies, the
/// modes).
pub fn check(
    config: &SecurityConfig,
    users: &[UserConfig],
) -> Result<(bool, Vec<PolicyId>, Vec<MessageSecurityMode>), String> {
    if config.handshake_burst == 0 || config.handshake_refill_interval_ms == 0 {
        return Err("security.handshake_burst and handshake_refill_interval_ms must be > 0".into());
    }
    if config.login_failure_burst == 0
        || config.login_refill_interval_ms == 0
        || config.limiter_addresses_max == 0
    {
        return Err("security.login_failure_burst, login_refill_interval_ms and limiter_addresses_max must be > 0".into());
    }
    if config.validated_chains_max > VALIDATED_CHAINS_MAX {
        return Err(format!(
            "security.validated_chains_max must be at most {VALIDATED_CHAINS_MAX}"
        ));
    }
    let mut none = false;
    let mut policies = Vec::new();
    for p in &config.policies {
        if ecc_policy(p).is_some() {
            continue;
        }
        match policy_id(p)? {
            PolicyId::None => none = true,
            id if !policies.contains(&id) => policies.push(id),
            _ => {}
        }
    }
    let mut modes = Vec::new();
    for m in &config.modes {
        let m = mode(m)?;
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    let ecc = !ecc_policies(config).is_empty();
    if !none && ((policies.is_empty() && !ecc) || modes.is_empty()) {
        return Err("security: no endpoint left (policies/modes are empty)".into());
    }
    if !config.user_token_policy_on_none.is_empty() {
        policy_id(&config.user_token_policy_on_none)
            .map_err(|e| e.replace("policies", "user_token_policy_on_none"))?;
    }
    let entries: Vec<UserEntry> = users
        .iter()
        .map(|u| {
            Ok(UserEntry {
                name: u.name.clone(),
                password_hash: u.password.clone(),
                roles: u.granted()?,
            })
        })
        .collect::<Result<_, String>>()?;
    UserDirectory::new(&entries).map_err(|e| format!("[[users]]: {e}"))?;
    Ok((none, policies, modes))
}

/// Validates the configuration, opens the PKI directory (creating its layout), loads or
/// generates the own certificate, and checks the users. Logs the accept-all warning.
pub fn build(
    config: SecurityConfig,
    users: &[UserConfig],
    args: &SecurityArgs,
    application_uri: &str,
    application_name: &str,
    listen_ip: Option<IpAddr>,
) -> Result<SecuritySetup, String> {
    let mut config = config;
    if let Some(dir) = &args.pki {
        config.pki_dir = dir.clone();
    }
    if args.accept_all_client_certs || args.contract {
        config.accept_all_client_certs = true;
    }
    let (none, policies, modes) = check(&config, users)?;
    let pki_config = PkiConfig {
        accept_all_client_certs: config.accept_all_client_certs,
        require_crls: config.require_crls,
        rescan_interval_ms: config.rescan_interval_ms,
        rejected_files_max: config.rejected_files_max,
        validated_chains_max: config.validated_chains_max,
        ..PkiConfig::default()
    };
    let entries: Vec<UserEntry> = users
        .iter()
        .map(|u| {
            Ok(UserEntry {
                name: u.name.clone(),
                password_hash: u.password.clone(),
                roles: u.granted()?,
            })
        })
        .collect::<Result<_, String>>()?;
    let user_dir = Some(UserDirectory::new(&entries).map_err(|e| format!("[[users]]: {e}"))?);
    // The own certificate is needed by every RSA policy, and by UserName/X.509 tokens on None
    // endpoints.
    let needs_cert =
        !policies.is_empty() || (!users.is_empty() && !config.user_token_policy_on_none.is_empty());
    let pki_root = config.pki_dir.clone();
    // An update of the trust list or own certificate a crash interrupted is finished (past
    // its commit point) or dropped before anything reads the directory.
    crate::push::recover(&pki_root).map_err(|e| format!("{}: {e}", pki_root.display()))?;
    let ecc_wanted = ecc_policies(&config);
    let mut ecc = Vec::new();
    if !ecc_wanted.is_empty() && !modes.is_empty() {
        let pki = Pki::open(&pki_root, pki_config.clone())
            .map_err(|e| format!("{}: {e}", pki_root.display()))?;
        for curve in ecc_wanted {
            match pki.load_own_ecc(curve)? {
                Some((cert, key)) => {
                    if cert.application_uri() != Some(application_uri) {
                        tracing::warn!(
                            "the {} certificate's URI {:?} is not the ApplicationUri {application_uri:?}: \
                             clients may refuse it",
                            curve.type_name(),
                            cert.application_uri()
                        );
                    }
                    ecc.push(EccIdentity::new(cert, key)?);
                }
                None => tracing::info!(
                    "{}: no certificate ({}), not offered (uaring cert generate --type {})",
                    curve.policy_name(),
                    pki.own_ecc_cert_path(curve).display(),
                    curve.type_name()
                ),
            }
        }
    }
    if !none && policies.is_empty() && ecc.is_empty() {
        return Err(
            "security: no endpoint left: the ECC policies have no certificate in the PKI \
             (uaring cert generate --type nistP256|nistP384|brainpoolP256r1|brainpoolP384r1)"
                .into(),
        );
    }
    let own = if needs_cert {
        let pki = Pki::open(&pki_root, pki_config.clone())
            .map_err(|e| format!("{}: {e}", pki_root.display()))?;
        let host = uaring_crypto::cli::system_hostname();
        let mut req = CertificateRequest::new(application_uri, application_name, now_unix_s());
        req.key_bits = config.certificate_key_bits;
        req.dns_names = std::iter::once(host)
            .chain(config.certificate_dns_names.iter().cloned())
            .collect();
        let mut ips: Vec<IpAddr> = vec![IpAddr::from([127, 0, 0, 1])];
        if let Some(ip) = listen_ip.filter(|ip| !ip.is_unspecified()) {
            ips.push(ip);
        }
        ips.extend(config.certificate_ip_addresses.iter().copied());
        ips.dedup();
        req.ip_addresses = ips;
        let (own, created) = load_or_create_own(&pki, &req)?;
        if created {
            tracing::info!(
                "generated the application instance certificate {} (RSA-{}, SAN URI {application_uri})",
                pki.own_cert_path().display(),
                own.key.key_bits()
            );
        }
        if own.cert.application_uri() != Some(application_uri) {
            tracing::warn!(
                "the application instance certificate's URI {:?} is not the ApplicationUri {application_uri:?}: \
                 clients may refuse it (uaring cert generate --force …)",
                own.cert.application_uri()
            );
        }
        let (t, i, c) = pki.counts();
        tracing::info!(
            trusted = t,
            issuers = i,
            crls = c,
            "PKI {}",
            pki_root.display()
        );
        for e in pki.load_errors() {
            tracing::warn!("PKI: {e}");
        }
        Some(own)
    } else {
        None
    };
    if config.accept_all_client_certs {
        tracing::warn!("{}", uaring_crypto::ACCEPT_ALL_WARNING);
        eprintln!("uaring: {}", uaring_crypto::ACCEPT_ALL_WARNING);
    }
    if config.allow_password_on_none {
        tracing::warn!("security.allow_password_on_none: UserName passwords may travel in clear on None channels");
    }
    let limits = AddressLimits::new(
        Some(HandshakeLimits {
            burst: config.handshake_burst,
            refill_interval_ms: config.handshake_refill_interval_ms,
            addresses_max: config.limiter_addresses_max,
        }),
        LoginLimiterConfig {
            burst: config.login_failure_burst,
            refill_interval_ms: config.login_refill_interval_ms,
            addresses_max: config.limiter_addresses_max,
        },
    );
    Ok(SecuritySetup {
        config,
        policies,
        modes,
        none,
        current_own: Mutex::new(own.clone()),
        own,
        current_ecc: Mutex::new(ecc.clone()),
        ecc,
        pki_root,
        pki_config,
        users: user_dir,
        limits,
        trusts: Arc::default(),
        own_generation: Default::default(),
    })
}

/// A shard's view of the own certificate: when push management replaced it, [`IdentityWatch::poll`]
/// gives the shard's new security provider (same trust state, the new certificate).
pub struct IdentityWatch {
    setup: Arc<SecuritySetup>,
    trust: Option<Arc<ShardTrust>>,
    seen: u64,
    /// The trust store reloads last seen ([`IdentityWatch::trust_changed`]).
    trust_seen: u64,
}

impl std::fmt::Debug for IdentityWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdentityWatch")
            .field("seen", &self.seen)
            .finish()
    }
}

impl IdentityWatch {
    /// Did the shard's trust store change since the last call (one atomic load)?
    pub fn trust_changed(&mut self) -> bool {
        let n = self.trust.as_ref().map_or(0, |t| t.reloads());
        let changed = n != self.trust_seen;
        self.trust_seen = n;
        changed
    }

    /// Does a channel's client certificate still validate against the shard's store?
    pub fn still_trusted(&self, chain: &[u8], now_unix_s: i64) -> bool {
        self.trust
            .as_ref()
            .is_none_or(|t| t.still_trusted(chain, now_unix_s))
    }

    /// The new provider once the certificate changed since the last call (one atomic load
    /// otherwise).
    pub fn poll(&mut self) -> Option<SecurityProvider> {
        let g = self
            .setup
            .own_generation
            .load(std::sync::atomic::Ordering::Acquire);
        if g == self.seen {
            return None;
        }
        self.seen = g;
        match self
            .setup
            .provider_with(self.trust.clone(), self.setup.current_own())
        {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!("new application certificate not taken up by a shard: {e}");
                None
            }
        }
    }
}

impl SecuritySetup {
    /// Starts `uaring-pki`, the thread that keeps every shard's trust lists up to date: every
    /// 200 ms it asks each shard's [`ShardTrust::refresh`] (which looks at the directories
    /// every `rescan_interval_ms`, or at once after a SIGHUP) — so no shard reads a directory
    /// or parses a certificate on its handshake path. It stops when `stopping` says so. No
    /// thread without a PKI (policy None only).
    pub fn start_pki_refresher(
        &self,
        stopping: impl Fn() -> bool + Send + 'static,
    ) -> std::io::Result<()> {
        if self.own.is_none() && self.ecc.is_empty() {
            return Ok(());
        }
        let trusts = self.trusts.clone();
        let root = self.pki_root.clone();
        std::thread::Builder::new()
            .name("uaring-pki".into())
            .spawn(move || {
                let start = std::time::Instant::now();
                let mut failing = false;
                while !stopping() {
                    let now_ms = start.elapsed().as_millis() as u64;
                    let all: Vec<Arc<ShardTrust>> =
                        trusts.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    for t in &all {
                        match t.refresh(now_ms) {
                            Ok(_) => failing = false,
                            Err(e) if !failing => {
                                failing = true;
                                tracing::warn!(
                                    "PKI {}: rescan failed, the trust lists stay as they were: {e}",
                                    root.display()
                                );
                            }
                            Err(_) => {}
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            })
            .map(|_| ())
    }

    /// The endpoint list, for the log.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.none {
            v.push("None".to_string());
        }
        for p in &self.policies {
            for m in &self.modes {
                v.push(format!("{}/{}", p.name(), m.name().unwrap_or("?")));
            }
        }
        for e in &self.ecc {
            for m in &self.modes {
                v.push(format!(
                    "{}/{}",
                    e.curve().policy_name(),
                    m.name().unwrap_or("?")
                ));
            }
        }
        v.join(", ")
    }

    /// The RSA application instance certificate and key in use now.
    pub fn current_own(&self) -> Option<Arc<OwnIdentity>> {
        self.current_own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Makes `own` the RSA application instance certificate of the channels opened from now
    /// on: every shard's [`IdentityWatch`] sees it at its next loop iteration. The files are
    /// the caller's (push management writes them first).
    pub fn replace_own(&self, own: Arc<OwnIdentity>) {
        *self.current_own.lock().unwrap_or_else(|e| e.into_inner()) = Some(own);
        self.own_generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    /// The ECC application certificates in use now, one per curve.
    pub fn current_ecc(&self) -> Vec<Arc<EccIdentity>> {
        self.current_ecc
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// [`SecuritySetup::replace_own`] for the ECC certificate of `own`'s curve (which must
    /// be one in use: a curve not offered stays unoffered).
    pub fn replace_ecc(&self, own: Arc<EccIdentity>) -> Result<(), String> {
        let mut all = self.current_ecc.lock().unwrap_or_else(|e| e.into_inner());
        let slot = all
            .iter_mut()
            .find(|e| e.curve() == own.curve())
            .ok_or_else(|| format!("{} is not offered", own.curve().policy_name()))?;
        *slot = own;
        drop(all);
        self.own_generation
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Ok(())
    }

    /// The security provider of one shard: its own PKI store, the shared limiters.
    pub fn shard_provider(&self) -> Result<SecurityProvider, String> {
        let trust = self.shard_trust()?;
        self.provider_with(trust, self.current_own())
    }

    /// [`SecuritySetup::shard_provider`] and the watch that follows certificate changes.
    pub fn shard_security(self: &Arc<Self>) -> Result<(SecurityProvider, IdentityWatch), String> {
        let seen = self
            .own_generation
            .load(std::sync::atomic::Ordering::Acquire);
        let trust = self.shard_trust()?;
        let p = self.provider_with(trust.clone(), self.current_own())?;
        let trust_seen = trust.as_ref().map_or(0, |t| t.reloads());
        Ok((
            p,
            IdentityWatch {
                setup: self.clone(),
                trust,
                seen,
                trust_seen,
            },
        ))
    }

    /// A shard's trust state (registered with the PKI refresher); none without a PKI.
    fn shard_trust(&self) -> Result<Option<Arc<ShardTrust>>, String> {
        if self.own.is_none() && self.ecc.is_empty() {
            return Ok(None);
        }
        let pki = Pki::open(&self.pki_root, self.pki_config.clone())
            .map_err(|e| format!("{}: {e}", self.pki_root.display()))?;
        let t = ShardTrust::with_limits(pki, self.limits.clone());
        self.trusts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t.clone());
        Ok(Some(t))
    }

    fn provider_with(
        &self,
        trust: Option<Arc<ShardTrust>>,
        own: Option<Arc<OwnIdentity>>,
    ) -> Result<SecurityProvider, String> {
        let mut p = SecurityProvider::empty();
        let c = &self.config;
        if self.none {
            p.add_policy(Arc::new(NonePolicy));
            p.add_endpoint(EndpointSecurity::none());
        }
        if let (Some(own), Some(t)) = (&own, &trust) {
            // Every supported RSA policy is registered (a None endpoint's token policy may name
            // one no endpoint offers); endpoints only for the configured ones.
            for id in [
                PolicyId::Basic256Sha256,
                PolicyId::Aes128Sha256RsaOaep,
                PolicyId::Aes256Sha256RsaPss,
            ] {
                p.add_policy(RsaPolicy::server(id, own.clone(), t.clone())?);
            }
            for id in &self.policies {
                for m in &self.modes {
                    p.add_endpoint(EndpointSecurity {
                        policy_uri: id.uri().to_owned(),
                        mode: *m,
                    });
                }
            }
        }
        if let Some(t) = &trust {
            // One ECC policy per ECC certificate present, with its endpoints.
            for own in &self.current_ecc() {
                let policy = EccPolicy::server(own.clone(), t.clone());
                for m in &self.modes {
                    p.add_endpoint(EndpointSecurity {
                        policy_uri: policy.curve().policy_uri().to_owned(),
                        mode: *m,
                    });
                }
                p.add_policy(policy);
            }
        }
        let have_users = self.users.as_ref().is_some_and(|u| !u.is_empty());
        let user_auth = trust.is_some();
        if let (Some(users), Some(t)) = (&self.users, &trust) {
            p.set_user_authenticator(ConfiguredUsers::new(
                users.clone(),
                t.clone(),
                c.x509_user_role.roles(),
            ));
        }
        let none_uri = if c.user_token_policy_on_none.is_empty() {
            String::new()
        } else {
            policy_id(&c.user_token_policy_on_none)?.uri().to_owned()
        };
        p.set_user_tokens(UserTokenSettings {
            anonymous: c.anonymous.roles(),
            user_name: user_auth && have_users && c.user_name_tokens,
            x509: user_auth && c.x509_user_tokens,
            allow_password_on_none: c.allow_password_on_none,
            none_endpoint_token_policy_uri: none_uri,
        });
        p.validate()?;
        let _ = SECURITY_POLICY_NONE_URI;
        Ok(p)
    }
}

/// The PKI directory a `uaring cert` command uses: `--pki`, else `./pki`.
pub fn default_pki_dir() -> &'static Path {
    Path::new("pki")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(SecurityConfig, Vec<UserConfig>), String> {
        let mut t: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        take_config(&mut t)
    }

    fn args() -> SecurityArgs {
        SecurityArgs::default()
    }

    #[test]
    fn users_and_keys_parse_unknown_keys_fail() {
        let (s, u) = parse(
            "[security]\npolicies = [\"None\"]\nanonymous = \"off\"\n[[users]]\nname = \"a\"\npassword = \"x\"\nrole = \"read\"\n\
             [[users]]\nname = \"b\"\npassword = \"y\"\nrole = \"readwrite\"\n",
        )
        .unwrap();
        assert_eq!(s.anonymous, Anonymous::Off);
        assert_eq!(u.len(), 2);
        assert_eq!(u[1].role, Some(Role::Readwrite));
        assert_eq!(u[1].granted(), Ok(Roles::OPERATOR));
        assert_eq!(u[0].granted(), Ok(Roles::OBSERVER));
        assert!(parse("[security]\npolicys = []\n").is_err());
        assert!(parse("[[users]]\nname = \"a\"\npassword = \"x\"\nrole = \"admin\"\n").is_err());
    }

    #[test]
    fn users_get_well_known_roles_by_name_and_the_role_set_lists_them() {
        let (s, u) = parse(
            "[security]\nanonymous = \"read\"\n\
             [[users]]\nname = \"eng\"\npassword = \"x\"\nroles = [\"Engineer\", \"Observer\"]\n\
             [[users]]\nname = \"op\"\npassword = \"y\"\nrole = \"readwrite\"\nroles = [\"SecurityAdmin\"]\n\
             [[users]]\nname = \"none\"\npassword = \"z\"\n\
             [[users]]\nname = \"bad\"\npassword = \"z\"\nroles = [\"Anonymous\"]\n",
        )
        .unwrap();
        let eng = u[0].granted().unwrap();
        assert!(eng.contains(WellKnownRole::Engineer) && eng.contains(WellKnownRole::Observer));
        let op = u[1].granted().unwrap();
        assert!(op.contains(WellKnownRole::Operator) && op.contains(WellKnownRole::SecurityAdmin));
        assert!(u[2].granted().unwrap_err().contains("give it a role"));
        assert!(u[3]
            .granted()
            .unwrap_err()
            .contains("unknown role \"Anonymous\""));
        assert!(
            role_identities(&s, &u).is_err(),
            "a user without a role fails the start"
        );

        let ids = role_identities(&s, &u[..2]).unwrap();
        let rules = |role: WellKnownRole| -> Vec<(i32, String)> {
            ids.iter()
                .find(|(r, _)| *r == role)
                .unwrap()
                .1
                .iter()
                .map(|r| (r.criteria_type.0, r.criteria.as_str().to_string()))
                .collect()
        };
        // 1 UserName, 5 Anonymous, 6 AuthenticatedUser.
        assert_eq!(rules(WellKnownRole::Anonymous), vec![(5, String::new())]);
        assert_eq!(
            rules(WellKnownRole::AuthenticatedUser),
            vec![(6, String::new())]
        );
        assert_eq!(
            rules(WellKnownRole::Observer),
            vec![(5, String::new()), (1, "eng".to_string())]
        );
        assert_eq!(rules(WellKnownRole::Operator), vec![(1, "op".to_string())]);
        assert_eq!(rules(WellKnownRole::Engineer), vec![(1, "eng".to_string())]);
        assert_eq!(
            rules(WellKnownRole::SecurityAdmin),
            vec![(1, "op".to_string())]
        );
        assert_eq!(rules(WellKnownRole::Supervisor), vec![]);
    }

    #[test]
    fn deprecated_policies_bad_modes_zero_limits_and_bad_hashes_are_refused() {
        let build_with = |text: &str| {
            let (s, u) = parse(text).unwrap();
            build(s, &u, &args(), "urn:x", "x", None)
        };
        let e = build_with("[security]\npolicies = [\"Basic256\"]\n").unwrap_err();
        assert!(e.contains("deprecated"), "{e}");
        assert!(build_with("[security]\npolicies = [\"http://opcfoundation.org/UA/SecurityPolicy#Basic128Rsa15\"]\n").is_err());
        assert!(build_with("[security]\nmodes = [\"None\"]\n").is_err());
        assert!(build_with("[security]\nhandshake_burst = 0\n").is_err());
        assert!(build_with("[security]\npolicies = [\"None\"]\n[[users]]\nname = \"a\"\npassword = \"plain\"\nrole = \"read\"\n").is_err());
    }

    #[test]
    fn none_only_needs_no_certificate_and_offers_anonymous() {
        let (s, u) =
            parse("[security]\npolicies = [\"None\"]\nuser_token_policy_on_none = \"\"\n").unwrap();
        let setup = build(s, &u, &args(), "urn:x", "x", None).unwrap();
        assert!(setup.own.is_none());
        let p = setup.shard_provider().unwrap();
        assert_eq!(p.endpoints().len(), 1);
        assert_eq!(p.user_tokens().anonymous, Some(Roles::OPERATOR));
    }

    #[test]
    fn every_policy_and_mode_becomes_an_endpoint_with_a_generated_certificate() {
        let dir = std::env::temp_dir().join(format!("uaring-sec-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let a = SecurityArgs {
            pki: Some(dir.clone()),
            ..SecurityArgs::default()
        };
        let setup = build(
            SecurityConfig::default(),
            &[],
            &a,
            "urn:uaring:test",
            "test",
            None,
        )
        .unwrap();
        let own = setup.own.as_ref().unwrap();
        assert_eq!(own.cert.application_uri(), Some("urn:uaring:test"));
        assert_eq!(own.key.key_bits(), 2048);
        let p = setup.shard_provider().unwrap();
        assert_eq!(p.endpoints().len(), 7);
        assert!(setup
            .describe()
            .contains("Aes256_Sha256_RsaPss/SignAndEncrypt"));
        // A second start loads the same certificate.
        let again = build(
            SecurityConfig::default(),
            &[],
            &a,
            "urn:uaring:test",
            "test",
            None,
        )
        .unwrap();
        assert_eq!(again.own.as_ref().unwrap().cert.der(), own.cert.der());
        let _ = fs::remove_dir_all(&dir);
    }

    /// An ECC policy gets its endpoints only when its certificate is in the PKI.
    #[test]
    fn ecc_endpoints_only_for_the_certificates_present() {
        let dir = std::env::temp_dir().join(format!("uaring-sec-ecc-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let a = SecurityArgs {
            pki: Some(dir.clone()),
            ..SecurityArgs::default()
        };
        let start = || {
            build(
                SecurityConfig::default(),
                &[],
                &a,
                "urn:uaring:test",
                "test",
                None,
            )
            .unwrap()
        };
        let setup = start();
        assert!(setup.ecc.is_empty());
        assert!(!setup.describe().contains("ECC"));
        let pki = Pki::open(&dir, PkiConfig::default()).unwrap();
        let req = CertificateRequest::new("urn:uaring:test", "test", now_unix_s());
        let (cert, key) =
            uaring_crypto::generate_self_signed_ecc(&req, EccCurve::NistP256).unwrap();
        pki.write_own_ecc(&cert, &key).unwrap();
        let setup = start();
        let p = setup.shard_provider().unwrap();
        assert_eq!(p.endpoints().len(), 9);
        let d = setup.describe();
        assert!(
            d.contains("ECC_nistP256/Sign, ECC_nistP256/SignAndEncrypt"),
            "{d}"
        );
        assert!(!d.contains("ECC_nistP384"), "{d}");
        assert!(p.find(EccCurve::NistP256.policy_uri()).is_some());
        assert!(p.find(EccCurve::NistP384.policy_uri()).is_none());
        // ECC alone: offered with its certificate, an error at start without one.
        let ecc_only = |name: &str| SecurityConfig {
            policies: vec![name.into()],
            ..SecurityConfig::default()
        };
        let only = build(
            ecc_only("ECC_nistP256"),
            &[],
            &a,
            "urn:uaring:test",
            "test",
            None,
        )
        .unwrap();
        assert!(only.own.is_none(), "no RSA certificate needed");
        assert_eq!(only.shard_provider().unwrap().endpoints().len(), 2);
        let err = build(
            ecc_only("ECC_nistP384"),
            &[],
            &a,
            "urn:uaring:test",
            "test",
            None,
        )
        .unwrap_err();
        assert!(err.contains("no certificate"), "{err}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// The per-address limits count across shards: two shards' providers share one table, so
    /// an address gets `handshake_burst` handshakes and `login_failure_burst` failed logins in
    /// total, not per shard.
    #[test]
    fn per_address_limits_count_across_two_shards() {
        let dir = std::env::temp_dir().join(format!("uaring-sec-limits-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let hash = uaring_crypto::hash_password("right").unwrap();
        let text = format!(
            "[security]\nhandshake_burst = 4\nhandshake_refill_interval_ms = 3600000\nlogin_failure_burst = 3\n\
             login_refill_interval_ms = 3600000\n[[users]]\nname = \"op\"\npassword = \"{hash}\"\nrole = \"read\"\n"
        );
        let (s, u) = parse(&text).unwrap();
        let a = SecurityArgs {
            pki: Some(dir.clone()),
            ..SecurityArgs::default()
        };
        let setup = build(s, &u, &a, "urn:uaring:test", "test", None).unwrap();
        let shards = [
            setup.shard_provider().unwrap(),
            setup.shard_provider().unwrap(),
        ];
        let uri = PolicyId::Basic256Sha256.uri();
        let ip: Option<IpAddr> = Some("192.0.2.7".parse().unwrap());
        let other: Option<IpAddr> = Some("192.0.2.8".parse().unwrap());
        // The time of the requests (the limiters refill over an hour: nothing refills here).
        let now = uaring_core::Now::new(1_000_000_000, uaring_core::DateTime::from_unix_nanos(0));
        // Handshakes alternate between the shards: 4 in total are admitted, the 5th is refused
        // on either shard.
        for i in 0..4 {
            shards[i % 2]
                .find(uri)
                .unwrap()
                .admit_handshake(ip, now)
                .unwrap();
        }
        for p in &shards {
            assert_eq!(
                p.find(uri).unwrap().admit_handshake(ip, now),
                Err(uaring_core::StatusCode::BadTcpServerTooBusy)
            );
        }
        // Another address is unaffected.
        shards[1]
            .find(uri)
            .unwrap()
            .admit_handshake(other, now)
            .unwrap();
        // Failed logins: 3 wrong passwords spread over both shards lock the address out on
        // both, even with the right password.
        let users = [
            shards[0].user_authenticator().unwrap(),
            shards[1].user_authenticator().unwrap(),
        ];
        for i in 0..3 {
            assert!(users[i % 2].login_allowed(ip, now));
            assert_eq!(
                users[i % 2].authenticate_password(ip, "op", b"wrong", now),
                Err(uaring_core::StatusCode::BadUserAccessDenied)
            );
        }
        for u in &users {
            assert!(!u.login_allowed(ip, now));
            assert_eq!(
                u.authenticate_password(ip, "op", b"right", now),
                Err(uaring_core::StatusCode::BadUserAccessDenied)
            );
        }
        assert_eq!(
            users[0].authenticate_password(other, "op", b"right", now),
            Ok(Roles::OBSERVER)
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
