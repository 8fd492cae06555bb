//! Part 12 push certificate management (OPC 10000-12 §7.10 ServerConfiguration, §7.8.2
//! TrustListType): a SecurityAdmin client replaces the server's application certificates
//! (RSA, and the ECC ones in use; from a signing request the server made, or with a key of
//! its own) and edits the trust list, on the running server.
//!
//! - The nodes are namespace 0's `ServerConfiguration` (i=12637), brought back from
//!   `ns0::OMITTED` with only what is served here ([`KEEP`]): the four methods, the
//!   properties with a true value, and `CertificateGroups/DefaultApplicationGroup` with its
//!   `TrustList` and `CertificateTypes`.
//! - Every method runs on the library's worker pool (file writes, RSA key generation and
//!   CSR signing never run on a shard); the shards read the properties from atomics.
//! - Access: the caller needs a SignAndEncrypt channel (else Bad_SecurityModeInsufficient)
//!   and the SecurityAdmin role (else Bad_UserAccessDenied), for every method including
//!   reading the trust list.
//! - Trust list changes (CloseAndUpdate, AddCertificate, RemoveCertificate) apply at once
//!   (applyChangesRequired = false: no transaction, Part 12 §7.8.2.5): the new lists are
//!   written beside the live ones and swapped in with `renameat2(RENAME_EXCHANGE)` under a
//!   journal, so a crash leaves the old or the new lists ([`recover`] finishes or drops an
//!   interrupted swap at the next start); then every shard's PKI is reloaded.
//! - UpdateCertificate keeps the new certificate pending, one per type (applyChangesRequired =
//!   true); ApplyChanges writes certificates and keys under a journal (the same guarantee), makes them
//!   the certificate of new channels, and the shards close the channels of the old one a
//!   second later (their sessions stay for the reconnect).

use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use uaring_core::address_space::app::{AppMethod, ArgDef, AsyncCall, Computed, MethodHandler};
use uaring_core::address_space::build::ns0;
use uaring_core::address_space::{AddressSpaceBuilder, ClassAttributes, ValueCell, ValueSource};
use uaring_core::encoding::{Decode, Decoder, Encode};
use uaring_core::generated::node_ids as ids;
use uaring_core::generated::types::{MessageSecurityMode, TrustListDataType};
use uaring_core::roles::WellKnownRole;
use uaring_core::types::{
    BuiltinType, ByteString, DataValue, DateTime, NodeId, StatusCode, Variant,
};
use uaring_core::DecodeLimits;
use uaring_crypto::{
    Certificate, Crl, EccCurve, EccIdentity, EccPrivateKey, OwnIdentity, PrivateKey,
};

use uaring_crypto::pki::{list_files, read_bounded, FILE_LEN_MAX};

use crate::security::{now_unix_s, SecuritySetup};

/// `[push]`: Part 12 push certificate management.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PushConfig {
    /// Serve ServerConfiguration and its TrustList (role-gated: SecurityAdmin over
    /// SignAndEncrypt). Off: the nodes are not in the address space.
    pub enabled: bool,
    /// The largest trust list a client may write, bytes (MaxTrustListSize).
    pub trust_list_bytes_max: u32,
    /// The most bytes one TrustList Read returns.
    pub read_bytes_max: u32,
    /// TrustList handles one session may hold open.
    pub handles_per_session_max: u32,
    /// TrustList handles open in all (each holds up to `trust_list_bytes_max`).
    pub handles_max: u32,
    /// A handle without a call for this long is closed (the TrustList's ActivityTimeout).
    pub activity_timeout_ms: u64,
    /// The most certificates GetRejectedList returns.
    pub rejected_list_max: u32,
    /// A push method not done within this is answered Bad_Timeout.
    pub call_timeout_ms: u32,
}

impl Default for PushConfig {
    fn default() -> Self {
        PushConfig {
            enabled: true,
            trust_list_bytes_max: 1 << 20,
            read_bytes_max: 64 * 1024,
            handles_per_session_max: 2,
            handles_max: 8,
            activity_timeout_ms: 60_000,
            rejected_list_max: 64,
            call_timeout_ms: 30_000,
        }
    }
}

/// Upper bound of `push.trust_list_bytes_max`.
pub const TRUST_LIST_BYTES_MAX: u32 = 16 << 20;
/// The most bytes of a certificate (or of one issuer certificate) UpdateCertificate takes.
pub const CERTIFICATE_BYTES_MAX: usize = 32 * 1024;
/// The most issuer certificates UpdateCertificate takes.
pub const ISSUERS_MAX: usize = 8;
/// The most bytes of a private key UpdateCertificate takes.
pub const PRIVATE_KEY_BYTES_MAX: usize = 16 * 1024;
/// The most bytes of CreateSigningRequest's nonce.
pub const NONCE_BYTES_MAX: usize = 1024;

impl PushConfig {
    /// Zero is never unlimited here.
    pub fn validate(&self) -> Result<(), String> {
        if self.trust_list_bytes_max == 0 || self.trust_list_bytes_max > TRUST_LIST_BYTES_MAX {
            return Err(format!(
                "push.trust_list_bytes_max must be 1..={TRUST_LIST_BYTES_MAX}"
            ));
        }
        if self.read_bytes_max == 0
            || self.handles_per_session_max == 0
            || self.handles_max == 0
            || self.activity_timeout_ms == 0
            || self.rejected_list_max == 0
            || self.call_timeout_ms == 0
        {
            return Err("push: read_bytes_max, handles_per_session_max, handles_max, activity_timeout_ms, rejected_list_max and call_timeout_ms must be > 0".into());
        }
        if self.handles_per_session_max > self.handles_max {
            return Err("push.handles_per_session_max must be at most handles_max".into());
        }
        Ok(())
    }
}

/// Takes `[push]` out of the configuration table.
pub fn take_config(table: &mut toml::Table) -> Result<PushConfig, String> {
    let c = match table.remove("push") {
        Some(v) => v
            .try_into::<PushConfig>()
            .map_err(|e| format!("[push]: {e}"))?,
        None => PushConfig::default(),
    };
    c.validate()?;
    Ok(c)
}

/// The namespace-0 nodes under ServerConfiguration this server serves.
pub const KEEP: &[u32] = &[
    ids::ServerConfiguration_ServerCapabilities,
    ids::ServerConfiguration_SupportedPrivateKeyFormats,
    ids::ServerConfiguration_MaxTrustListSize,
    ids::ServerConfiguration_MulticastDnsEnabled,
    ids::ServerConfiguration_UpdateCertificate,
    ids::ServerConfiguration_CreateSigningRequest,
    ids::ServerConfiguration_ApplyChanges,
    ids::ServerConfiguration_GetRejectedList,
    ids::ServerConfiguration_CertificateGroups,
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup,
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_CertificateTypes,
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList,
    TL_SIZE,
    TL_WRITABLE,
    TL_USER_WRITABLE,
    TL_OPEN_COUNT,
    TL_LAST_UPDATE_TIME,
    TL_OPEN,
    TL_CLOSE,
    TL_READ,
    TL_WRITE,
    TL_GET_POSITION,
    TL_SET_POSITION,
    TL_OPEN_WITH_MASKS,
    TL_CLOSE_AND_UPDATE,
    TL_ADD_CERTIFICATE,
    TL_REMOVE_CERTIFICATE,
];

const TL_SIZE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Size;
const TL_WRITABLE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Writable;
const TL_USER_WRITABLE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_UserWritable;
const TL_OPEN_COUNT: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_OpenCount;
const TL_LAST_UPDATE_TIME: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_LastUpdateTime;
const TL_OPEN: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Open;
const TL_CLOSE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Close;
const TL_READ: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Read;
const TL_WRITE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_Write;
const TL_GET_POSITION: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_GetPosition;
const TL_SET_POSITION: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_SetPosition;
const TL_OPEN_WITH_MASKS: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_OpenWithMasks;
const TL_CLOSE_AND_UPDATE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_CloseAndUpdate;
const TL_ADD_CERTIFICATE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_AddCertificate;
const TL_REMOVE_CERTIFICATE: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_TrustList_RemoveCertificate;

/// TrustListMasks (Part 12 §7.8.2.7).
const MASK_TRUSTED_CERTS: u32 = 1;
const MASK_TRUSTED_CRLS: u32 = 2;
const MASK_ISSUER_CERTS: u32 = 4;
const MASK_ISSUER_CRLS: u32 = 8;
const MASK_ALL: u32 = 15;

/// FileType Open modes (Part 5 §C.2.1): the TrustList takes Read and Write + EraseExisting.
const MODE_READ: u8 = 1;
const MODE_WRITE_ERASE: u8 = 2 | 4;

/// The DefaultApplicationGroup's NodeId and the RSA certificate types.
const DEFAULT_APPLICATION_GROUP: u32 =
    ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup;
const RSA_SHA256_TYPE: u32 = ids::RsaSha256ApplicationCertificateType;
const RSA_MIN_TYPE: u32 = ids::RsaMinApplicationCertificateType;

/// One open TrustList handle.
struct Handle {
    id: u32,
    session: NodeId,
    write: bool,
    data: Vec<u8>,
    pos: usize,
    used: Instant,
}

/// The certificate types of the DefaultApplicationGroup push management updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Rsa,
    Ecc(EccCurve),
}

/// A private key of either kind.
enum AnyKey {
    Rsa(PrivateKey),
    Ecc(EccPrivateKey),
}

impl AnyKey {
    fn kind(&self) -> Kind {
        match self {
            AnyKey::Rsa(_) => Kind::Rsa,
            AnyKey::Ecc(k) => Kind::Ecc(k.curve()),
        }
    }

    fn matches(&self, cert: &Certificate) -> bool {
        match self {
            AnyKey::Rsa(k) => cert.ec_curve().is_none() && k.matches(cert),
            AnyKey::Ecc(k) => cert.ec_curve() == Some(k.curve()) && k.matches(cert),
        }
    }

    fn copy(&self) -> Result<AnyKey, StatusCode> {
        let bad = |_| StatusCode::BadInternalError;
        Ok(match self {
            AnyKey::Rsa(k) => {
                AnyKey::Rsa(PrivateKey::from_pkcs8_der(k.to_pkcs8_der()).map_err(bad)?)
            }
            AnyKey::Ecc(k) => {
                AnyKey::Ecc(EccPrivateKey::from_pkcs8_der(k.to_pkcs8_der()).map_err(bad)?)
            }
        })
    }

    /// The live files' names: (certificate, key).
    fn file_names(&self) -> (String, String) {
        match self {
            AnyKey::Rsa(_) => (
                uaring_crypto::pki::OWN_CERT_FILE.to_string(),
                uaring_crypto::pki::OWN_KEY_FILE.to_string(),
            ),
            AnyKey::Ecc(k) => (
                format!("uaring_{}.der", k.curve().type_name()),
                format!("uaring_{}.pem", k.curve().type_name()),
            ),
        }
    }

    fn to_pem(&self) -> zeroize_free::Pem {
        match self {
            AnyKey::Rsa(k) => zeroize_free::Pem(k.to_pem().as_bytes().to_vec()),
            AnyKey::Ecc(k) => zeroize_free::Pem(k.to_pem().as_bytes().to_vec()),
        }
    }
}

/// A PEM private key's bytes, wiped when dropped.
mod zeroize_free {
    pub struct Pem(pub Vec<u8>);
    impl Drop for Pem {
        fn drop(&mut self) {
            for b in self.0.iter_mut() {
                // SAFETY: a valid, aligned byte of our own vector.
                unsafe { std::ptr::write_volatile(b, 0) };
            }
        }
    }
}

/// A certificate UpdateCertificate accepted, live after ApplyChanges.
struct Pending {
    session: NodeId,
    cert: Certificate,
    key: AnyKey,
    /// The last push call of its session: a transaction without one for
    /// `activity_timeout_ms` is discarded (its session is gone, Part 12 §7.10.2).
    used: Instant,
}

#[derive(Default)]
struct State {
    handles: Vec<Handle>,
    next_handle: u32,
    /// Keys CreateSigningRequest made (regeneratePrivateKey): by session, one per kind, with
    /// the session's last push call (dropped after `activity_timeout_ms` without one).
    new_keys: Vec<(NodeId, AnyKey, Instant)>,
    /// The certificates of the transaction (one session's), one per kind.
    pending: Vec<Pending>,
}

/// The push management of one server: its configuration, the trust list handles and the
/// pending certificate. Shared by the method handlers (on the worker pool) and the
/// property reads (on the shards, atomics only).
pub struct PushManager {
    config: PushConfig,
    application_uri: String,
    security: OnceLock<Arc<SecuritySetup>>,
    state: Mutex<State>,
    open_count: AtomicU32,
    size: AtomicU64,
    last_update: AtomicI64,
    cert_types: OnceLock<Vec<NodeId>>,
}

impl std::fmt::Debug for PushManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PushManager")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

fn bytes_of(v: &Variant) -> &[u8] {
    match v {
        Variant::ByteString(b) => b.as_bytes(),
        _ => &[],
    }
}

fn u32_of(v: &Variant) -> u32 {
    match v {
        Variant::UInt32(x) => *x,
        _ => 0,
    }
}

fn bool_of(v: &Variant) -> bool {
    matches!(v, Variant::Boolean(true))
}

fn node_of(v: &Variant) -> NodeId {
    match v {
        Variant::NodeId(n) => (**n).clone(),
        _ => NodeId::NULL,
    }
}

fn str_of(v: &Variant) -> &str {
    match v {
        Variant::String(s) => s.as_str(),
        _ => "",
    }
}

fn byte_strings(v: &Variant) -> Vec<&[u8]> {
    match v {
        Variant::Array(a) => a.values.iter().map(bytes_of).collect(),
        _ => Vec::new(),
    }
}

fn byte_string_array(items: Vec<Vec<u8>>) -> Variant {
    Variant::array(
        BuiltinType::ByteString,
        items
            .into_iter()
            .map(|b| Variant::ByteString(ByteString::from(b)))
            .collect(),
    )
    .unwrap_or(Variant::Empty)
}

/// SignAndEncrypt and SecurityAdmin, or the status to answer (Part 12 §7.10: "shall be
/// called from an encrypted SecureChannel and from a Client that has access to the
/// SecurityAdmin Role").
fn admit(call: &AsyncCall) -> Result<(), StatusCode> {
    if call.security_mode != MessageSecurityMode::SignAndEncrypt {
        return Err(StatusCode::BadSecurityModeInsufficient);
    }
    if !call.roles.contains(WellKnownRole::SecurityAdmin) {
        return Err(StatusCode::BadUserAccessDenied);
    }
    Ok(())
}

impl PushManager {
    /// A manager for a server of `application_uri`.
    pub fn new(config: PushConfig, application_uri: &str) -> Arc<PushManager> {
        Arc::new(PushManager {
            config,
            application_uri: application_uri.to_string(),
            security: OnceLock::new(),
            state: Mutex::default(),
            open_count: AtomicU32::new(0),
            size: AtomicU64::new(0),
            last_update: AtomicI64::new(0),
            cert_types: OnceLock::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PushConfig {
        &self.config
    }

    /// Connects the security setup once it is built (after the address space): until then
    /// every method answers Bad_ResourceUnavailable.
    pub fn attach(&self, security: Arc<SecuritySetup>) {
        let mut types = Vec::new();
        if security.current_own().is_some() {
            types.push(NodeId::ns0(RSA_SHA256_TYPE));
        }
        for e in &security.ecc {
            types.push(NodeId::ns0(ecc_certificate_type(e.curve())));
        }
        let _ = self.cert_types.set(types);
        if let Ok(list) = read_trust_list(&security.pki_root, MASK_ALL) {
            let mut out = Vec::new();
            list.encode(&mut out);
            self.size.store(out.len() as u64, Ordering::Release);
        }
        let _ = self.security.set(security);
    }

    fn setup(&self) -> Result<&Arc<SecuritySetup>, StatusCode> {
        self.security
            .get()
            .filter(|s| s.current_own().is_some())
            .ok_or(StatusCode::BadResourceUnavailable)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the handles idle longer than `activity_timeout_ms`.
    fn expire(&self, st: &mut State) {
        let limit = Duration::from_millis(self.config.activity_timeout_ms);
        st.handles.retain(|h| h.used.elapsed() < limit);
        st.pending.retain(|p| p.used.elapsed() < limit);
        st.new_keys.retain(|(_, _, used)| used.elapsed() < limit);
        self.open_count
            .store(st.handles.len() as u32, Ordering::Release);
    }

    /// A push call of `session`: its transaction and new keys stay alive.
    fn touch(&self, session: &NodeId) {
        let mut st = self.lock();
        self.expire(&mut st);
        let now = Instant::now();
        for p in st.pending.iter_mut().filter(|p| p.session == *session) {
            p.used = now;
        }
        for k in st.new_keys.iter_mut().filter(|k| k.0 == *session) {
            k.2 = now;
        }
    }

    /// Adds ServerConfiguration (the [`KEEP`] part of it) to the address space, with its
    /// properties and methods (run on `workers`).
    pub fn install(
        self: &Arc<Self>,
        b: &mut AddressSpaceBuilder,
        workers: &crate::workers::Workers,
    ) -> Result<(), String> {
        ns0::add_omitted_subtree(b, ids::ServerConfiguration, KEEP)?;
        let strings = |v: &[&str]| {
            Variant::array(
                BuiltinType::String,
                v.iter().map(|s| Variant::String((*s).into())).collect(),
            )
            .unwrap_or(Variant::Empty)
        };
        set_value(
            b,
            ids::ServerConfiguration_ServerCapabilities,
            ValueSource::Cell(ValueCell::new(DataValue::new(strings(&["DA"])), None)),
        )?;
        set_value(
            b,
            ids::ServerConfiguration_SupportedPrivateKeyFormats,
            ValueSource::Cell(ValueCell::new(DataValue::new(strings(&["PEM"])), None)),
        )?;
        set_value(
            b,
            ids::ServerConfiguration_MaxTrustListSize,
            ValueSource::Cell(ValueCell::new(
                DataValue::new(Variant::UInt32(self.config.trust_list_bytes_max)),
                None,
            )),
        )?;
        set_value(
            b,
            ids::ServerConfiguration_MulticastDnsEnabled,
            ValueSource::Cell(ValueCell::new(
                DataValue::new(Variant::Boolean(false)),
                None,
            )),
        )?;
        for (id, v) in [
            (TL_WRITABLE, Variant::Boolean(true)),
            (TL_USER_WRITABLE, Variant::Boolean(true)),
        ] {
            set_value(
                b,
                id,
                ValueSource::Cell(ValueCell::new(DataValue::new(v), None)),
            )?;
        }
        let me = self.clone();
        set_value(
            b,
            ids::ServerConfiguration_CertificateGroups_DefaultApplicationGroup_CertificateTypes,
            ValueSource::Computed(Computed::new(move |_| {
                let types = me.cert_types.get().cloned().unwrap_or_default();
                DataValue::new(
                    Variant::array(
                        BuiltinType::NodeId,
                        types
                            .into_iter()
                            .map(|t| Variant::NodeId(Box::new(t)))
                            .collect(),
                    )
                    .unwrap_or(Variant::Empty),
                )
            })),
        )?;
        let me = self.clone();
        set_value(
            b,
            TL_SIZE,
            ValueSource::Computed(Computed::new(move |_| {
                DataValue::new(Variant::UInt64(me.size.load(Ordering::Acquire)))
            })),
        )?;
        let me = self.clone();
        set_value(
            b,
            TL_OPEN_COUNT,
            ValueSource::Computed(Computed::new(move |_| {
                let n = me.open_count.load(Ordering::Acquire).min(u16::MAX as u32);
                DataValue::new(Variant::UInt16(n as u16))
            })),
        )?;
        let me = self.clone();
        set_value(
            b,
            TL_LAST_UPDATE_TIME,
            ValueSource::Computed(Computed::new(move |_| {
                DataValue::new(Variant::DateTime(DateTime(
                    me.last_update.load(Ordering::Acquire),
                )))
            })),
        )?;
        use BuiltinType as T;
        let u32a = |n: &str| ArgDef::scalar(n, T::UInt32);
        let methods: Vec<(u32, Vec<ArgDef>, Vec<ArgDef>, Op)> = vec![
            (
                ids::ServerConfiguration_UpdateCertificate,
                vec![
                    ArgDef::scalar("CertificateGroupId", T::NodeId),
                    ArgDef::scalar("CertificateTypeId", T::NodeId),
                    ArgDef::scalar("Certificate", T::ByteString),
                    ArgDef::array("IssuerCertificates", T::ByteString)
                        .max_length(ISSUERS_MAX as u32),
                    ArgDef::scalar("PrivateKeyFormat", T::String).max_length(16),
                    ArgDef::scalar("PrivateKey", T::ByteString),
                ],
                vec![ArgDef::scalar("ApplyChangesRequired", T::Boolean)],
                Op::UpdateCertificate,
            ),
            (
                ids::ServerConfiguration_CreateSigningRequest,
                vec![
                    ArgDef::scalar("CertificateGroupId", T::NodeId),
                    ArgDef::scalar("CertificateTypeId", T::NodeId),
                    ArgDef::scalar("SubjectName", T::String)
                        .max_length(uaring_crypto::cert::SUBJECT_NAME_CHARS_MAX as u32),
                    ArgDef::scalar("RegeneratePrivateKey", T::Boolean),
                    ArgDef::scalar("Nonce", T::ByteString),
                ],
                vec![ArgDef::scalar("CertificateRequest", T::ByteString)],
                Op::CreateSigningRequest,
            ),
            (
                ids::ServerConfiguration_ApplyChanges,
                vec![],
                vec![],
                Op::ApplyChanges,
            ),
            (
                ids::ServerConfiguration_GetRejectedList,
                vec![],
                vec![ArgDef::array("Certificates", T::ByteString)],
                Op::GetRejectedList,
            ),
            (
                TL_OPEN,
                vec![ArgDef::scalar("Mode", T::Byte)],
                vec![u32a("FileHandle")],
                Op::Open,
            ),
            (
                TL_OPEN_WITH_MASKS,
                vec![u32a("Masks")],
                vec![u32a("FileHandle")],
                Op::OpenWithMasks,
            ),
            (TL_CLOSE, vec![u32a("FileHandle")], vec![], Op::Close),
            (
                TL_READ,
                vec![u32a("FileHandle"), ArgDef::scalar("Length", T::Int32)],
                vec![ArgDef::scalar("Data", T::ByteString)],
                Op::Read,
            ),
            (
                TL_WRITE,
                vec![u32a("FileHandle"), ArgDef::scalar("Data", T::ByteString)],
                vec![],
                Op::Write,
            ),
            (
                TL_GET_POSITION,
                vec![u32a("FileHandle")],
                vec![ArgDef::scalar("Position", T::UInt64)],
                Op::GetPosition,
            ),
            (
                TL_SET_POSITION,
                vec![u32a("FileHandle"), ArgDef::scalar("Position", T::UInt64)],
                vec![],
                Op::SetPosition,
            ),
            (
                TL_CLOSE_AND_UPDATE,
                vec![u32a("FileHandle")],
                vec![ArgDef::scalar("ApplyChangesRequired", T::Boolean)],
                Op::CloseAndUpdate,
            ),
            (
                TL_ADD_CERTIFICATE,
                vec![
                    ArgDef::scalar("Certificate", T::ByteString),
                    ArgDef::scalar("IsTrustedCertificate", T::Boolean),
                ],
                vec![],
                Op::AddCertificate,
            ),
            (
                TL_REMOVE_CERTIFICATE,
                vec![
                    ArgDef::scalar("Thumbprint", T::String).max_length(128),
                    ArgDef::scalar("IsTrustedCertificate", T::Boolean),
                ],
                vec![],
                Op::RemoveCertificate,
            ),
        ];
        for (id, inputs, outputs, op) in methods {
            let me = self.clone();
            let pool = workers.clone();
            let start = move |call: AsyncCall| {
                let me = me.clone();
                if let Err(call) = pool.submit(call, move |c: AsyncCall| {
                    let r = me.run(op, &c);
                    c.complete(r);
                }) {
                    call.complete(Err(StatusCode::BadTooManyOperations));
                }
            };
            b.set_method(
                NodeId::ns0(id),
                AppMethod {
                    inputs,
                    outputs,
                    needs_write: !matches!(op, Op::GetRejectedList),
                    handler: MethodHandler::Deferred {
                        start: Arc::new(start),
                        timeout_ms: self.config.call_timeout_ms,
                    },
                },
            );
        }
        Ok(())
    }

    /// Runs one method (on the worker pool).
    fn run(&self, op: Op, call: &AsyncCall) -> Result<Vec<Variant>, StatusCode> {
        admit(call)?;
        let setup = self.setup()?.clone();
        self.touch(&call.session_id);
        let a = |i: usize| call.inputs.get(i).unwrap_or(&Variant::Empty);
        match op {
            Op::Open => {
                let mode = match a(0) {
                    Variant::Byte(m) => *m,
                    _ => 0,
                };
                match mode {
                    MODE_READ => self.open(call, &setup, false, MASK_ALL),
                    MODE_WRITE_ERASE => self.open(call, &setup, true, MASK_ALL),
                    _ => Err(StatusCode::BadInvalidArgument),
                }
            }
            Op::OpenWithMasks => {
                let masks = u32_of(a(0));
                if masks == 0 || masks & !MASK_ALL != 0 {
                    return Err(StatusCode::BadInvalidArgument);
                }
                self.open(call, &setup, false, masks)
            }
            Op::Close => {
                let mut st = self.lock();
                self.expire(&mut st);
                let i = own_handle(&st, call, u32_of(a(0)))?;
                st.handles.swap_remove(i);
                self.open_count
                    .store(st.handles.len() as u32, Ordering::Release);
                Ok(vec![])
            }
            Op::Read => {
                let length = match a(1) {
                    Variant::Int32(n) if *n >= 0 => *n as usize,
                    _ => return Err(StatusCode::BadInvalidArgument),
                };
                let mut st = self.lock();
                self.expire(&mut st);
                let i = own_handle(&st, call, u32_of(a(0)))?;
                let h = &mut st.handles[i];
                if h.write {
                    return Err(StatusCode::BadInvalidState);
                }
                h.used = Instant::now();
                let n = length
                    .min(self.config.read_bytes_max as usize)
                    .min(h.data.len().saturating_sub(h.pos));
                let out = h.data[h.pos..h.pos + n].to_vec();
                h.pos += n;
                Ok(vec![Variant::ByteString(ByteString::from(out))])
            }
            Op::Write => {
                let data = bytes_of(a(1));
                let max = self.config.trust_list_bytes_max as usize;
                let mut st = self.lock();
                self.expire(&mut st);
                let i = own_handle(&st, call, u32_of(a(0)))?;
                let h = &mut st.handles[i];
                if !h.write {
                    return Err(StatusCode::BadInvalidState);
                }
                h.used = Instant::now();
                let end = h
                    .pos
                    .checked_add(data.len())
                    .ok_or(StatusCode::BadInvalidArgument)?;
                if end > max {
                    return Err(StatusCode::BadEncodingLimitsExceeded);
                }
                if end > h.data.len() {
                    h.data.resize(end, 0);
                }
                h.data[h.pos..end].copy_from_slice(data);
                h.pos = end;
                Ok(vec![])
            }
            Op::GetPosition => {
                let mut st = self.lock();
                self.expire(&mut st);
                let i = own_handle(&st, call, u32_of(a(0)))?;
                st.handles[i].used = Instant::now();
                Ok(vec![Variant::UInt64(st.handles[i].pos as u64)])
            }
            Op::SetPosition => {
                let pos = match a(1) {
                    Variant::UInt64(p) => *p,
                    _ => return Err(StatusCode::BadInvalidArgument),
                };
                let mut st = self.lock();
                self.expire(&mut st);
                let i = own_handle(&st, call, u32_of(a(0)))?;
                let h = &mut st.handles[i];
                h.used = Instant::now();
                // Part 5 §C.2.7: past the end, the position is the end.
                h.pos = (pos.min(h.data.len() as u64)) as usize;
                Ok(vec![])
            }
            Op::CloseAndUpdate => {
                let data = {
                    let mut st = self.lock();
                    self.expire(&mut st);
                    let i = own_handle(&st, call, u32_of(a(0)))?;
                    if !st.handles[i].write {
                        return Err(StatusCode::BadInvalidState);
                    }
                    let h = st.handles.swap_remove(i);
                    self.open_count
                        .store(st.handles.len() as u32, Ordering::Release);
                    h.data
                };
                let list = decode_trust_list(&data, self.config.trust_list_bytes_max as usize)?;
                let current = read_trust_list(&setup.pki_root, MASK_ALL)
                    .map_err(|_| StatusCode::BadInternalError)?;
                let merged = merge(current, list)?;
                self.commit(&setup, &merged)?;
                Ok(vec![Variant::Boolean(false)])
            }
            Op::AddCertificate => {
                self.no_handles_open()?;
                let der = bytes_of(a(0));
                if der.len() > CERTIFICATE_BYTES_MAX {
                    return Err(StatusCode::BadCertificateInvalid);
                }
                let cert =
                    Certificate::from_der(der).map_err(|_| StatusCode::BadCertificateInvalid)?;
                let trusted = bool_of(a(1));
                if !trusted && cert.is_ca() != Some(true) {
                    // Part 12 §7.8.2.6: an issuer must be a CA certificate.
                    return Err(StatusCode::BadCertificateInvalid);
                }
                let mut list = read_trust_list(&setup.pki_root, MASK_ALL)
                    .map_err(|_| StatusCode::BadInternalError)?;
                let target = if trusted {
                    &mut list.trusted_certificates
                } else {
                    &mut list.issuer_certificates
                };
                if !target.iter().any(|c| c.as_bytes() == cert.der()) {
                    target.push(ByteString::from(cert.der()));
                }
                self.commit(&setup, &list)?;
                Ok(vec![])
            }
            Op::RemoveCertificate => {
                self.no_handles_open()?;
                let thumb = str_of(a(0)).trim().to_ascii_lowercase();
                let trusted = bool_of(a(1));
                let mut list = read_trust_list(&setup.pki_root, MASK_ALL)
                    .map_err(|_| StatusCode::BadInternalError)?;
                let target = if trusted {
                    &mut list.trusted_certificates
                } else {
                    &mut list.issuer_certificates
                };
                let before = target.len();
                target.retain(|c| {
                    uaring_crypto::cert::to_hex(&uaring_crypto::thumbprint(c.as_bytes()))
                        .to_ascii_lowercase()
                        != thumb
                });
                if target.len() == before {
                    return Err(StatusCode::BadInvalidArgument);
                }
                self.commit(&setup, &list)?;
                Ok(vec![])
            }
            Op::GetRejectedList => {
                let dir = setup.pki_root.join("rejected/certs");
                let mut out = Vec::new();
                for p in list_files(&dir) {
                    if out.len() >= self.config.rejected_list_max as usize {
                        break;
                    }
                    if let Ok(b) = read_bounded(&p, CERTIFICATE_BYTES_MAX as u64) {
                        if let Ok(c) = Certificate::from_pem_or_der(&b) {
                            out.push(c.der().to_vec());
                        }
                    }
                }
                Ok(vec![byte_string_array(out)])
            }
            Op::CreateSigningRequest => {
                let kind = check_group_and_type(&setup, a(0), a(1))?;
                let nonce = bytes_of(a(4));
                let regenerate = bool_of(a(3));
                if nonce.len() > NONCE_BYTES_MAX
                    || (regenerate && !nonce.is_empty() && nonce.len() < 32)
                {
                    return Err(StatusCode::BadInvalidArgument);
                }
                let (cert, key) = current(&setup, kind)?;
                let key = if regenerate {
                    let k = match kind {
                        Kind::Rsa => AnyKey::Rsa(
                            PrivateKey::generate(cert.key_bits())
                                .map_err(|_| StatusCode::BadInternalError)?,
                        ),
                        Kind::Ecc(curve) => AnyKey::Ecc(
                            EccPrivateKey::generate(curve)
                                .map_err(|_| StatusCode::BadInternalError)?,
                        ),
                    };
                    let copy = k.copy()?;
                    let mut st = self.lock();
                    st.new_keys
                        .retain(|(s, old, _)| !(*s == call.session_id && old.kind() == kind));
                    st.new_keys
                        .push((call.session_id.clone(), k, Instant::now()));
                    copy
                } else {
                    key
                };
                let req = uaring_crypto::SigningRequest {
                    subject: str_of(a(2)).to_string(),
                    common_name: cert.common_name().unwrap_or_else(|| "uaring".into()),
                    application_uri: cert
                        .application_uri()
                        .unwrap_or(&self.application_uri)
                        .to_string(),
                    dns_names: cert.dns_names().to_vec(),
                    ip_addresses: cert.ip_addresses().to_vec(),
                };
                let csr = match &key {
                    AnyKey::Rsa(k) => uaring_crypto::signing_request_der(&req, k),
                    AnyKey::Ecc(k) => uaring_crypto::signing_request_der_ecc(&req, k),
                }
                .map_err(StatusCode)?;
                Ok(vec![Variant::ByteString(ByteString::from(csr))])
            }
            Op::UpdateCertificate => {
                let kind = check_group_and_type(&setup, a(0), a(1))?;
                let der = bytes_of(a(2));
                if der.is_empty() || der.len() > CERTIFICATE_BYTES_MAX {
                    return Err(StatusCode::BadCertificateInvalid);
                }
                let cert =
                    Certificate::from_der(der).map_err(|_| StatusCode::BadCertificateInvalid)?;
                let right_type = match kind {
                    Kind::Rsa => {
                        cert.ec_curve().is_none() && (2048..=4096).contains(&cert.key_bits())
                    }
                    Kind::Ecc(curve) => cert.ec_curve() == Some(curve),
                };
                if !right_type {
                    return Err(StatusCode::BadCertificateInvalid);
                }
                let mut issuers = Vec::new();
                for b in byte_strings(a(3)) {
                    if b.len() > CERTIFICATE_BYTES_MAX {
                        return Err(StatusCode::BadCertificateInvalid);
                    }
                    issuers.push(
                        Certificate::from_der(b).map_err(|_| StatusCode::BadCertificateInvalid)?,
                    );
                }
                let format = str_of(a(4));
                let key_bytes = bytes_of(a(5));
                let key = if key_bytes.is_empty() {
                    self.matching_key(&setup, call, kind, &cert)?
                } else {
                    if !format.eq_ignore_ascii_case("PEM") {
                        return Err(StatusCode::BadNotSupported);
                    }
                    if key_bytes.len() > PRIVATE_KEY_BYTES_MAX {
                        return Err(StatusCode::BadInvalidArgument);
                    }
                    let k = match kind {
                        Kind::Rsa => PrivateKey::from_pem_or_der(key_bytes).map(AnyKey::Rsa),
                        Kind::Ecc(_) => EccPrivateKey::from_pem_or_der(key_bytes).map(AnyKey::Ecc),
                    }
                    .map_err(|_| StatusCode::BadSecurityChecksFailed)?;
                    if !k.matches(&cert) {
                        return Err(StatusCode::BadSecurityChecksFailed);
                    }
                    k
                };
                check_chain(&cert, &issuers, now_unix_s())?;
                if cert.application_uri() != Some(self.application_uri.as_str()) {
                    return Err(StatusCode::BadCertificateUriInvalid);
                }
                let mut st = self.lock();
                self.expire(&mut st);
                if st.pending.iter().any(|p| p.session != call.session_id) {
                    return Err(StatusCode::BadTransactionPending);
                }
                st.pending.retain(|p| p.key.kind() != kind);
                st.pending.push(Pending {
                    session: call.session_id.clone(),
                    cert,
                    key,
                    used: Instant::now(),
                });
                Ok(vec![Variant::Boolean(true)])
            }
            Op::ApplyChanges => {
                let pending = {
                    let mut st = self.lock();
                    self.expire(&mut st);
                    if st.handles.iter().any(|h| h.write) {
                        return Err(StatusCode::BadInvalidState);
                    }
                    if st.pending.iter().any(|p| p.session == call.session_id) {
                        std::mem::take(&mut st.pending)
                    } else {
                        Vec::new()
                    }
                };
                if pending.is_empty() {
                    return Err(StatusCode::BadNothingToDo);
                }
                let mut files = Vec::new();
                for p in &pending {
                    let (cert_name, key_name) = p.key.file_names();
                    files.push((cert_name, p.cert.der().to_vec()));
                    files.push((key_name, p.key.to_pem().0.clone()));
                }
                let written = write_own_files(&setup.pki_root, &files);
                for f in files.iter_mut() {
                    f.1.iter_mut().for_each(|b| *b = 0);
                }
                written.map_err(|e| {
                    tracing::error!("push: writing the new application certificate: {e}");
                    StatusCode::BadInternalError
                })?;
                for p in pending {
                    tracing::info!(
                        thumbprint = %p.cert.thumbprint_hex(),
                        subject = %p.cert.subject(),
                        kind = ?p.key.kind(),
                        "push: new application instance certificate in use for new secure channels"
                    );
                    match p.key {
                        AnyKey::Rsa(k) => setup.replace_own(
                            OwnIdentity::new(p.cert, k)
                                .map_err(|_| StatusCode::BadInternalError)?,
                        ),
                        AnyKey::Ecc(k) => setup
                            .replace_ecc(
                                EccIdentity::new(p.cert, k)
                                    .map_err(|_| StatusCode::BadInternalError)?,
                            )
                            .map_err(|_| StatusCode::BadInternalError)?,
                    }
                }
                self.lock()
                    .new_keys
                    .retain(|(s, _, _)| *s != call.session_id);
                Ok(vec![])
            }
        }
    }

    /// The key of `cert`: the one CreateSigningRequest made for this session, else the
    /// current one (Part 12: a certificate without a private key must match one the server
    /// holds).
    fn matching_key(
        &self,
        setup: &SecuritySetup,
        call: &AsyncCall,
        kind: Kind,
        cert: &Certificate,
    ) -> Result<AnyKey, StatusCode> {
        {
            let st = self.lock();
            if let Some((_, k, _)) = st
                .new_keys
                .iter()
                .find(|(s, k, _)| *s == call.session_id && k.kind() == kind && k.matches(cert))
            {
                return k.copy();
            }
        }
        let (_, key) = current(setup, kind)?;
        if key.matches(cert) {
            return Ok(key);
        }
        Err(StatusCode::BadSecurityChecksFailed)
    }

    fn no_handles_open(&self) -> Result<(), StatusCode> {
        let mut st = self.lock();
        self.expire(&mut st);
        if st.handles.is_empty() {
            Ok(())
        } else {
            Err(StatusCode::BadInvalidState)
        }
    }

    fn open(
        &self,
        call: &AsyncCall,
        setup: &SecuritySetup,
        write: bool,
        masks: u32,
    ) -> Result<Vec<Variant>, StatusCode> {
        let data = if write {
            Vec::new()
        } else {
            let list = read_trust_list(&setup.pki_root, masks)
                .map_err(|_| StatusCode::BadInternalError)?;
            let mut out = Vec::new();
            list.encode(&mut out);
            if masks == MASK_ALL {
                self.size.store(out.len() as u64, Ordering::Release);
            }
            out
        };
        let mut st = self.lock();
        self.expire(&mut st);
        if write {
            if !st.handles.is_empty() {
                return Err(StatusCode::BadNotWritable);
            }
            if st.pending.iter().any(|p| p.session != call.session_id) {
                return Err(StatusCode::BadTransactionPending);
            }
        } else if st.handles.iter().any(|h| h.write) {
            return Err(StatusCode::BadNotReadable);
        }
        let mine = st
            .handles
            .iter()
            .filter(|h| h.session == call.session_id)
            .count();
        if mine >= self.config.handles_per_session_max as usize
            || st.handles.len() >= self.config.handles_max as usize
        {
            return Err(StatusCode::BadTooManyOperations);
        }
        st.next_handle = st.next_handle.wrapping_add(1).max(1);
        while st.handles.iter().any(|h| h.id == st.next_handle) {
            st.next_handle = st.next_handle.wrapping_add(1).max(1);
        }
        let id = st.next_handle;
        st.handles.push(Handle {
            id,
            session: call.session_id.clone(),
            write,
            data,
            pos: 0,
            used: Instant::now(),
        });
        self.open_count
            .store(st.handles.len() as u32, Ordering::Release);
        Ok(vec![Variant::UInt32(id)])
    }

    /// Writes `list` as the trust list (atomically), reloads every shard's PKI.
    fn commit(&self, setup: &SecuritySetup, list: &TrustListDataType) -> Result<(), StatusCode> {
        let mut encoded = Vec::new();
        list.encode(&mut encoded);
        if encoded.len() > self.config.trust_list_bytes_max as usize {
            return Err(StatusCode::BadEncodingLimitsExceeded);
        }
        write_trust_list(&setup.pki_root, list).map_err(|e| {
            tracing::error!("push: writing the trust list: {e}");
            StatusCode::BadInternalError
        })?;
        self.size.store(encoded.len() as u64, Ordering::Release);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        self.last_update
            .store(DateTime::from_unix_nanos(now).0, Ordering::Release);
        uaring_crypto::pki::request_rescan();
        tracing::info!(
            trusted = list.trusted_certificates.len(),
            issuers = list.issuer_certificates.len(),
            crls = list.trusted_crls.len() + list.issuer_crls.len(),
            "push: trust list replaced"
        );
        Ok(())
    }
}

#[derive(Clone, Copy, Debug)]
enum Op {
    UpdateCertificate,
    CreateSigningRequest,
    ApplyChanges,
    GetRejectedList,
    Open,
    OpenWithMasks,
    Close,
    Read,
    Write,
    GetPosition,
    SetPosition,
    CloseAndUpdate,
    AddCertificate,
    RemoveCertificate,
}

/// The handle `id` of the caller's session (another session's, or an unknown one, is
/// Bad_InvalidArgument, as Part 5 answers an invalid handle).
fn own_handle(st: &State, call: &AsyncCall, id: u32) -> Result<usize, StatusCode> {
    st.handles
        .iter()
        .position(|h| h.id == id && h.session == call.session_id)
        .ok_or(StatusCode::BadInvalidArgument)
}

/// certificateGroupId null or DefaultApplicationGroup (else Bad_InvalidArgument);
/// certificateTypeId null or an RSA application type (the RSA certificate), or the ECC type
/// of a certificate the server has (else Bad_InvalidArgument: not a type of the group).
fn check_group_and_type(
    setup: &SecuritySetup,
    group: &Variant,
    ty: &Variant,
) -> Result<Kind, StatusCode> {
    let g = node_of(group);
    if !g.is_null() && g != NodeId::ns0(DEFAULT_APPLICATION_GROUP) {
        return Err(StatusCode::BadInvalidArgument);
    }
    let t = node_of(ty);
    if t.is_null() || t == NodeId::ns0(RSA_SHA256_TYPE) || t == NodeId::ns0(RSA_MIN_TYPE) {
        return Ok(Kind::Rsa);
    }
    let Some(curve) = EccCurve::ALL
        .into_iter()
        .find(|c| t == NodeId::ns0(ecc_certificate_type(*c)))
    else {
        return Err(StatusCode::BadInvalidArgument);
    };
    if setup.current_ecc().iter().any(|e| e.curve() == curve) {
        Ok(Kind::Ecc(curve))
    } else {
        Err(StatusCode::BadInvalidArgument)
    }
}

/// The CertificateType (Part 12 §7.8.4) of an ECC application certificate of `curve`.
fn ecc_certificate_type(curve: EccCurve) -> u32 {
    match curve {
        EccCurve::NistP256 => ids::EccNistP256ApplicationCertificateType,
        EccCurve::NistP384 => ids::EccNistP384ApplicationCertificateType,
        EccCurve::BrainpoolP256r1 => ids::EccBrainpoolP256r1ApplicationCertificateType,
        EccCurve::BrainpoolP384r1 => ids::EccBrainpoolP384r1ApplicationCertificateType,
    }
}

/// The certificate in use of `kind`, and a copy of its key.
fn current(setup: &SecuritySetup, kind: Kind) -> Result<(Certificate, AnyKey), StatusCode> {
    match kind {
        Kind::Rsa => {
            let own = setup
                .current_own()
                .ok_or(StatusCode::BadResourceUnavailable)?;
            let key = AnyKey::Rsa(
                PrivateKey::from_pkcs8_der(own.key.to_pkcs8_der())
                    .map_err(|_| StatusCode::BadInternalError)?,
            );
            Ok((own.cert.clone(), key))
        }
        Kind::Ecc(curve) => {
            let own = setup
                .current_ecc()
                .into_iter()
                .find(|e| e.curve() == curve)
                .ok_or(StatusCode::BadInvalidArgument)?;
            let key = AnyKey::Ecc(
                EccPrivateKey::from_pkcs8_der(own.key.to_pkcs8_der())
                    .map_err(|_| StatusCode::BadInternalError)?,
            );
            Ok((own.cert.clone(), key))
        }
    }
}

/// The certificate is in its validity period and chains to a self-signed root through
/// `issuers` (each a CA, in its validity period, every signature verified); else
/// Bad_SecurityChecksFailed (Part 12 §7.10.4).
fn check_chain(cert: &Certificate, issuers: &[Certificate], now: i64) -> Result<(), StatusCode> {
    let bad = StatusCode::BadSecurityChecksFailed;
    if !cert.is_time_valid(now) {
        return Err(bad);
    }
    let mut current = cert.clone();
    for _ in 0..=ISSUERS_MAX {
        if current.is_self_issued() && current.verify_signed_by(&current).is_ok() {
            return Ok(());
        }
        let next = issuers
            .iter()
            .find(|i| {
                i.subject_der() == current.issuer_der() && current.verify_signed_by(i).is_ok()
            })
            .ok_or(bad)?;
        if next.is_ca() != Some(true) || !next.is_time_valid(now) {
            return Err(bad);
        }
        current = next.clone();
    }
    Err(bad)
}

/// Decodes a TrustListDataType a client wrote (bounded by `max` bytes, strings and arrays
/// bounded by it too): Bad_DecodingError when it does not decode or has bytes left over.
fn decode_trust_list(data: &[u8], max: usize) -> Result<TrustListDataType, StatusCode> {
    let limits = DecodeLimits {
        max_string_len: max,
        max_byte_string_len: CERTIFICATE_BYTES_MAX.max(64 * 1024),
        max_array_len: 4096,
        max_depth: 4,
        max_decoded_size: max.saturating_mul(2),
    };
    let mut d = Decoder::new(data, limits);
    let list = TrustListDataType::decode(&mut d).map_err(|_| StatusCode::BadDecodingError)?;
    if d.remaining() != 0 {
        return Err(StatusCode::BadDecodingError);
    }
    Ok(list)
}

/// The current lists with the ones `new` specifies replaced; every certificate and CRL
/// must parse (Bad_CertificateInvalid).
fn merge(
    mut current: TrustListDataType,
    new: TrustListDataType,
) -> Result<TrustListDataType, StatusCode> {
    let m = new.specified_lists;
    if m & !MASK_ALL != 0 {
        return Err(StatusCode::BadInvalidArgument);
    }
    for c in new
        .trusted_certificates
        .iter()
        .chain(&new.issuer_certificates)
    {
        Certificate::from_der(c.as_bytes()).map_err(|_| StatusCode::BadCertificateInvalid)?;
    }
    for c in new.trusted_crls.iter().chain(&new.issuer_crls) {
        Crl::from_der(c.as_bytes()).map_err(|_| StatusCode::BadCertificateInvalid)?;
    }
    if m & MASK_TRUSTED_CERTS != 0 {
        current.trusted_certificates = new.trusted_certificates;
    }
    if m & MASK_TRUSTED_CRLS != 0 {
        current.trusted_crls = new.trusted_crls;
    }
    if m & MASK_ISSUER_CERTS != 0 {
        current.issuer_certificates = new.issuer_certificates;
    }
    if m & MASK_ISSUER_CRLS != 0 {
        current.issuer_crls = new.issuer_crls;
    }
    current.specified_lists = MASK_ALL;
    Ok(current)
}

fn set_value(b: &mut AddressSpaceBuilder, id: u32, value: ValueSource) -> Result<(), String> {
    let done = b.update(&NodeId::ns0(id), |n| match &mut n.attributes {
        ClassAttributes::Variable(v) => {
            v.value = value;
            true
        }
        _ => false,
    });
    match done {
        Some(true) => Ok(()),
        _ => Err(format!("push: namespace 0 has no Variable i={id}")),
    }
}

// ---- files ---------------------------------------------------------------------------

/// The trust directories' contents as a TrustListDataType (the lists of `masks`), DER;
/// files that do not parse are left out.
pub fn read_trust_list(root: &Path, masks: u32) -> std::io::Result<TrustListDataType> {
    let mut list = TrustListDataType {
        specified_lists: masks,
        ..Default::default()
    };
    let certs = |sub: &str| -> Vec<ByteString> {
        list_files(&root.join(sub))
            .iter()
            .filter_map(|p| read_bounded(p, FILE_LEN_MAX).ok())
            .filter_map(|b| Certificate::from_pem_or_der(&b).ok())
            .map(|c| ByteString::from(c.der()))
            .collect()
    };
    let crls = |sub: &str| -> Vec<ByteString> {
        list_files(&root.join(sub))
            .iter()
            .filter_map(|p| read_bounded(p, FILE_LEN_MAX).ok())
            .filter_map(|b| {
                let der = pem_or_der(&b, "X509 CRL");
                Crl::from_der(&der).ok().map(|_| ByteString::from(der))
            })
            .collect()
    };
    if masks & MASK_TRUSTED_CERTS != 0 {
        list.trusted_certificates = certs("trusted/certs");
    }
    if masks & MASK_TRUSTED_CRLS != 0 {
        list.trusted_crls = crls("trusted/crl");
    }
    if masks & MASK_ISSUER_CERTS != 0 {
        list.issuer_certificates = certs("issuers/certs");
    }
    if masks & MASK_ISSUER_CRLS != 0 {
        list.issuer_crls = crls("issuers/crl");
    }
    Ok(list)
}

/// The DER of a PEM block with `label`, or the bytes as they are.
fn pem_or_der(bytes: &[u8], label: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(bytes);
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    if let (Some(a), Some(b)) = (text.find(&begin), text.find(&end)) {
        let body: String = text[a + begin.len()..b]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        if let Some(der) = base64_decode(&body) {
            return der;
        }
    }
    bytes.to_vec()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let s = s.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut bits = 0;
    for &c in s {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

fn write_synced(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Swaps two paths atomically (`renameat2(RENAME_EXCHANGE)`, Linux 3.15).
fn exchange(a: &Path, b: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let ca = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let cb = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: two NUL-terminated paths valid for the call; AT_FDCWD for relative ones.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// A digest of a directory tree's files (names and contents), for the journal.
fn tree_digest(dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for sub in ["certs", "crl"] {
        sub.hash(&mut h);
        for p in list_files(&dir.join(sub)) {
            p.file_name().hash(&mut h);
            fs::read(&p).unwrap_or_default().hash(&mut h);
        }
    }
    format!("{:016x}", h.finish())
}

const STAGED: &str = ".push-staged";
const JOURNAL: &str = ".push-commit";
const OWN_STAGED: &str = "own/private/.push-own";

/// Writes the four trust directories from `list`: a new tree beside the live one
/// (`<pki>/.push-staged/{trusted,issuers}/{certs,crl}`, every file and directory synced),
/// a journal naming the new trees' digests, then `trusted` and `issuers` each swapped with
/// their new tree in one `renameat2(RENAME_EXCHANGE)`, then the old trees and the journal
/// removed. A crash before the journal leaves the old lists (the staged tree is dropped at
/// the next start); after it, [`recover`] finishes the swap.
pub fn write_trust_list(root: &Path, list: &TrustListDataType) -> std::io::Result<()> {
    let staged = root.join(STAGED);
    if staged.exists() {
        fs::remove_dir_all(&staged)?;
    }
    for d in [
        "trusted/certs",
        "trusted/crl",
        "issuers/certs",
        "issuers/crl",
    ] {
        fs::create_dir_all(staged.join(d))?;
    }
    let write_certs = |sub: &str, items: &[ByteString]| -> std::io::Result<()> {
        for c in items {
            let cert = Certificate::from_der(c.as_bytes())
                .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "certificate"))?;
            write_synced(
                &staged
                    .join(sub)
                    .join(uaring_crypto::pki::cert_file_name(&cert)),
                cert.der(),
                0o644,
            )?;
        }
        sync_dir(&staged.join(sub))
    };
    let write_crls = |sub: &str, items: &[ByteString]| -> std::io::Result<()> {
        for c in items {
            let name = format!(
                "crl [{}].der",
                uaring_crypto::cert::to_hex(&uaring_crypto::thumbprint(c.as_bytes()))
            );
            write_synced(&staged.join(sub).join(name), c.as_bytes(), 0o644)?;
        }
        sync_dir(&staged.join(sub))
    };
    write_certs("trusted/certs", &list.trusted_certificates)?;
    write_crls("trusted/crl", &list.trusted_crls)?;
    write_certs("issuers/certs", &list.issuer_certificates)?;
    write_crls("issuers/crl", &list.issuer_crls)?;
    for d in ["trusted", "issuers"] {
        sync_dir(&staged.join(d))?;
    }
    sync_dir(&staged)?;
    let journal = format!(
        "trusted {}\nissuers {}\n",
        tree_digest(&staged.join("trusted")),
        tree_digest(&staged.join("issuers"))
    );
    write_synced(&root.join(JOURNAL), journal.as_bytes(), 0o644)?;
    sync_dir(root)?;
    finish_trust_swap(root, &journal)
}

/// Swaps in each staged tree whose digest is the journal's and that is not live yet, then
/// drops the staged trees and the journal.
fn finish_trust_swap(root: &Path, journal: &str) -> std::io::Result<()> {
    let staged = root.join(STAGED);
    for line in journal.lines() {
        let Some((d, want)) = line.split_once(' ') else {
            continue;
        };
        if d != "trusted" && d != "issuers" {
            continue;
        }
        let live = root.join(d);
        let new = staged.join(d);
        if tree_digest(&live) == want {
            continue;
        }
        if new.exists() && tree_digest(&new) == want {
            if live.exists() {
                exchange(&new, &live)?;
            } else {
                fs::rename(&new, &live)?;
            }
        }
    }
    sync_dir(root)?;
    fs::remove_file(root.join(JOURNAL))?;
    sync_dir(root)?;
    if staged.exists() {
        fs::remove_dir_all(&staged)?;
    }
    Ok(())
}

/// Writes the own certificate and key (RSA: `own/certs/uaring.der`, `own/private/uaring.pem`).
pub fn write_own(root: &Path, cert: &Certificate, key: &PrivateKey) -> std::io::Result<()> {
    write_own_files(
        root,
        &[
            (
                uaring_crypto::pki::OWN_CERT_FILE.to_string(),
                cert.der().to_vec(),
            ),
            (
                uaring_crypto::pki::OWN_KEY_FILE.to_string(),
                key.to_pem().as_bytes().to_vec(),
            ),
        ],
    )
}

/// Writes own certificates (`*.der`, into `own/certs`, 0644) and keys (`*.pem`, into
/// `own/private`, 0600) together: all staged in `own/private/.push-own` (synced), a `commit`
/// marker there, then each renamed over its live file, then the marker removed. [`recover`]
/// finishes the renames after a crash past the marker and drops the staged files before it:
/// the certificates and keys on disk always belong together.
pub fn write_own_files(root: &Path, files: &[(String, Vec<u8>)]) -> std::io::Result<()> {
    let staged = root.join(OWN_STAGED);
    if staged.exists() {
        fs::remove_dir_all(&staged)?;
    }
    {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new().mode(0o700).create(&staged)?;
    }
    for (name, bytes) in files {
        if name.contains('/') || name == "commit" {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "bad file name",
            ));
        }
        let mode = if name.ends_with(".pem") { 0o600 } else { 0o644 };
        write_synced(&staged.join(name), bytes, mode)?;
    }
    write_synced(&staged.join("commit"), b"1\n", 0o600)?;
    sync_dir(&staged)?;
    finish_own(root)
}

fn finish_own(root: &Path) -> std::io::Result<()> {
    let staged = root.join(OWN_STAGED);
    for entry in fs::read_dir(&staged)?.flatten().take(16) {
        let name = entry.file_name();
        let n = name.to_string_lossy();
        let dir = if n.ends_with(".pem") {
            "own/private"
        } else if n.ends_with(".der") {
            "own/certs"
        } else {
            continue;
        };
        fs::rename(entry.path(), root.join(dir).join(&name))?;
    }
    sync_dir(&root.join("own/private"))?;
    sync_dir(&root.join("own/certs"))?;
    fs::remove_dir_all(&staged)?;
    sync_dir(&root.join("own/private"))
}

/// At start, before the PKI is opened: finishes a trust list or own certificate update a
/// crash interrupted after its commit point, drops one interrupted before it.
pub fn recover(root: &Path) -> std::io::Result<()> {
    if !root.exists() {
        return Ok(());
    }
    match fs::read_to_string(root.join(JOURNAL)) {
        Ok(journal) => {
            tracing::warn!("push: finishing an interrupted trust list update");
            finish_trust_swap(root, &journal)?;
        }
        Err(_) => {
            let staged = root.join(STAGED);
            if staged.exists() {
                tracing::warn!("push: dropping an unfinished trust list update");
                fs::remove_dir_all(&staged)?;
            }
        }
    }
    let own = root.join(OWN_STAGED);
    if own.join("commit").exists() {
        tracing::warn!("push: finishing an interrupted certificate update");
        finish_own(root)?;
    } else if own.exists() {
        fs::remove_dir_all(&own)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("uaring-push-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        for s in [
            "trusted/certs",
            "trusted/crl",
            "issuers/certs",
            "issuers/crl",
            "own/certs",
            "own/private",
        ] {
            fs::create_dir_all(d.join(s)).unwrap();
        }
        d
    }

    fn cert(cn: &str) -> Certificate {
        let req = uaring_crypto::CertificateRequest::new("urn:t", cn, now_unix_s());
        uaring_crypto::generate_self_signed(&req).unwrap().0
    }

    #[test]
    fn a_trust_list_round_trips_and_an_interrupted_swap_finishes_or_drops() {
        let root = tmp("swap");
        let a = cert("a");
        let b = cert("b");
        let old = TrustListDataType {
            specified_lists: MASK_ALL,
            trusted_certificates: vec![ByteString::from(a.der())],
            ..Default::default()
        };
        write_trust_list(&root, &old).unwrap();
        let got = read_trust_list(&root, MASK_ALL).unwrap();
        assert_eq!(got.trusted_certificates.len(), 1);
        assert!(!root.join(STAGED).exists() && !root.join(JOURNAL).exists());

        // Staged without the journal (crash before the commit point): dropped, old stays.
        let new = TrustListDataType {
            specified_lists: MASK_ALL,
            trusted_certificates: vec![ByteString::from(b.der())],
            issuer_certificates: vec![],
            ..Default::default()
        };
        fs::create_dir_all(root.join(STAGED).join("trusted/certs")).unwrap();
        fs::write(root.join(STAGED).join("trusted/certs/x.der"), b.der()).unwrap();
        recover(&root).unwrap();
        assert!(!root.join(STAGED).exists());
        let got = read_trust_list(&root, MASK_ALL).unwrap();
        assert_eq!(got.trusted_certificates[0].as_bytes(), a.der());

        // Journal written, trusted swapped, issuers not (crash in the middle): finished.
        let staged = root.join(STAGED);
        for d in [
            "trusted/certs",
            "trusted/crl",
            "issuers/certs",
            "issuers/crl",
        ] {
            fs::create_dir_all(staged.join(d)).unwrap();
        }
        fs::write(
            staged
                .join("trusted/certs")
                .join(uaring_crypto::pki::cert_file_name(&b)),
            b.der(),
        )
        .unwrap();
        let journal = format!(
            "trusted {}\nissuers {}\n",
            tree_digest(&staged.join("trusted")),
            tree_digest(&staged.join("issuers"))
        );
        fs::write(root.join(JOURNAL), &journal).unwrap();
        exchange(&staged.join("trusted"), &root.join("trusted")).unwrap();
        recover(&root).unwrap();
        let got = read_trust_list(&root, MASK_ALL).unwrap();
        assert_eq!(got.trusted_certificates.len(), 1);
        assert_eq!(got.trusted_certificates[0].as_bytes(), b.der());
        assert!(!root.join(JOURNAL).exists() && !staged.exists());
        let _ = new;
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn the_own_certificate_and_key_are_replaced_together() {
        let root = tmp("own");
        let req = uaring_crypto::CertificateRequest::new("urn:t", "one", now_unix_s());
        let (c1, k1) = uaring_crypto::generate_self_signed(&req).unwrap();
        write_own(&root, &c1, &k1).unwrap();
        let pki = uaring_crypto::Pki::open(&root, Default::default()).unwrap();
        assert_eq!(pki.load_own().unwrap().0.der(), c1.der());
        // A crash after the commit marker, before the renames: finished at start.
        let (c2, k2) = uaring_crypto::generate_self_signed(&req).unwrap();
        let staged = root.join(OWN_STAGED);
        fs::create_dir_all(&staged).unwrap();
        fs::write(
            staged.join(uaring_crypto::pki::OWN_KEY_FILE),
            k2.to_pem().as_bytes(),
        )
        .unwrap();
        fs::write(staged.join(uaring_crypto::pki::OWN_CERT_FILE), c2.der()).unwrap();
        fs::write(staged.join("commit"), b"1").unwrap();
        // The key moved already, the certificate not.
        fs::rename(
            staged.join(uaring_crypto::pki::OWN_KEY_FILE),
            root.join("own/private")
                .join(uaring_crypto::pki::OWN_KEY_FILE),
        )
        .unwrap();
        recover(&root).unwrap();
        assert_eq!(pki.load_own().unwrap().0.der(), c2.der());
        // Staged before the marker: dropped, the live pair stays.
        let (c3, k3) = uaring_crypto::generate_self_signed(&req).unwrap();
        fs::create_dir_all(&staged).unwrap();
        fs::write(
            staged.join(uaring_crypto::pki::OWN_KEY_FILE),
            k3.to_pem().as_bytes(),
        )
        .unwrap();
        let _ = c3;
        recover(&root).unwrap();
        assert!(!staged.exists());
        assert_eq!(pki.load_own().unwrap().0.der(), c2.der());
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_chain_must_reach_a_self_signed_root_and_the_trust_list_decoder_is_bounded() {
        let c = cert("leaf");
        assert!(check_chain(&c, &[], now_unix_s()).is_ok());
        assert_eq!(
            check_chain(&c, &[], now_unix_s() + 20 * 365 * 86400),
            Err(StatusCode::BadSecurityChecksFailed)
        );
        let list = TrustListDataType {
            specified_lists: MASK_TRUSTED_CERTS,
            trusted_certificates: vec![ByteString::from(c.der())],
            ..Default::default()
        };
        let mut out = Vec::new();
        list.encode(&mut out);
        assert!(decode_trust_list(&out, 1 << 20).is_ok());
        assert_eq!(
            decode_trust_list(&out[..out.len() - 1], 1 << 20).err(),
            Some(StatusCode::BadDecodingError)
        );
        // A declared array length far beyond the bytes is refused before allocating.
        let mut huge = Vec::new();
        MASK_ALL.encode(&mut huge);
        i32::MAX.encode(&mut huge);
        assert!(decode_trust_list(&huge, 1 << 20).is_err());
        let mut garbage = list.clone();
        garbage.trusted_certificates = vec![ByteString::from(vec![1u8, 2, 3])];
        assert_eq!(
            merge(TrustListDataType::default(), garbage).err(),
            Some(StatusCode::BadCertificateInvalid)
        );
    }
}
