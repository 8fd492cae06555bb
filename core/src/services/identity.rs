//! Session security (Part 4 §5.7.2, §5.7.3, §7.41): the CreateSession server signature, the
//! ActivateSession client signature, and user identity tokens (Anonymous, UserName,
//! X.509) checked through the shard's [`SecurityProvider`](crate::secure_channel::SecurityProvider)
//! — the cryptography and the user store are plug-ins (uaring-crypto).
//!
//! User token policies per endpoint (GetEndpoints, CreateSession):
//! * `anonymous` when anonymous logins are allowed;
//! * `username` when a user authenticator is set. On a secured endpoint its
//!   SecurityPolicyUri is the endpoint's: the password is encrypted with the channel's policy
//!   (a password in clear is still accepted inside a SignAndEncrypt channel). On a
//!   None endpoint it carries `none_endpoint_token_policy_uri` (e.g. Basic256Sha256), so the
//!   password is still RSA-encrypted to the server certificate; without that URI the policy is
//!   offered on None endpoints only if `allow_password_on_none` (password in clear);
//! * `x509` when X.509 user tokens are enabled (on None endpoints only with a token policy URI,
//!   which names the signature algorithm).
//!
//! Neither `username` nor `x509` is offered on an endpoint whose channel policy says it
//! cannot handle them ([`SecurityPolicy::offers_user_tokens`](crate::secure_channel::SecurityPolicy::offers_user_tokens)).
//!
//! ECC policies (Part 6 §6.8.2): a password is sent as an EccEncryptedSecret to an ephemeral
//! key of the server's. A client asks for one with `ECDHPolicyUri` (a KeyValuePair of an
//! AdditionalParametersType) in the request header of CreateSession or ActivateSession; the
//! response header carries `ECDHPolicyUri` and `ECDHKey` (an EphemeralKeyType: the public key
//! and our signature over it), or `ECDHKey` = Bad_SecurityPolicyRejected when the URI is not
//! an ECC policy of this endpoint's token policies. The session keeps the private half until
//! the next ActivateSession, which takes it whether it uses it or not; after the first
//! request every successful ActivateSession response carries a fresh key. The key pair and its
//! signature are made in the session service's job, off the shard.

use std::net::IpAddr;

use std::sync::Arc;

use crate::generated::types::{
    ActivateSessionRequest, AdditionalParametersType, AnonymousIdentityToken, IssuedIdentityToken,
    MessageSecurityMode, RequestHeader, SignatureData, UserNameIdentityToken, UserTokenPolicy,
    UserTokenType, X509IdentityToken,
};
use crate::roles::Roles;
use crate::secure_channel::{SecurityPolicy, SECURITY_POLICY_NONE_URI};
use crate::server::context::RequestContext;
use crate::server::handshake::EcdhKey;
use crate::server::service_state::{EphemeralPrivateKey, ServiceState, UserIdentity};
use crate::time::Now;
use crate::types::{ByteString, ExtensionObject, NodeId, StatusCode, UaString, Variant};
use crate::{Decode, DecodeLimits, Decoder};

/// Policy id of the anonymous user token policy.
pub const ANONYMOUS_POLICY_ID: &str = "anonymous";
/// Policy id of the UserName token policy.
pub const USERNAME_POLICY_ID: &str = "username";
/// Policy id of the X.509 user certificate token policy.
pub const X509_POLICY_ID: &str = "x509";

/// The user token policies of an endpoint whose channel policy is `endpoint_policy_uri`.
pub fn user_token_policies_for(
    state: &ServiceState,
    endpoint_policy_uri: &str,
) -> Vec<UserTokenPolicy> {
    let security = state.security();
    let settings = security.user_tokens();
    let mut out = Vec::with_capacity(3);
    let policy = |id: &str, t: UserTokenType, uri: Option<&str>| UserTokenPolicy {
        policy_id: id.into(),
        token_type: t,
        issued_token_type: UaString::null(),
        issuer_endpoint_url: UaString::null(),
        security_policy_uri: uri.map(UaString::from).unwrap_or_else(UaString::null),
    };
    if settings.anonymous.is_some() {
        out.push(policy(ANONYMOUS_POLICY_ID, UserTokenType::Anonymous, None));
    }
    // A channel policy that cannot decrypt a password or check a user token signature
    // offers neither token.
    let has_users = security.user_authenticator().is_some()
        && security
            .policy(endpoint_policy_uri)
            .is_none_or(|p| p.offers_user_tokens());
    let on_none = endpoint_policy_uri == SECURITY_POLICY_NONE_URI;
    let token_uri = settings.none_endpoint_token_policy_uri.as_str();
    let token_uri_usable = !token_uri.is_empty()
        && token_uri != SECURITY_POLICY_NONE_URI
        && security.policy(token_uri).is_some();
    if has_users && settings.user_name {
        if !on_none {
            out.push(policy(
                USERNAME_POLICY_ID,
                UserTokenType::UserName,
                Some(endpoint_policy_uri),
            ));
        } else if token_uri_usable {
            out.push(policy(
                USERNAME_POLICY_ID,
                UserTokenType::UserName,
                Some(token_uri),
            ));
        } else if settings.allow_password_on_none {
            out.push(policy(
                USERNAME_POLICY_ID,
                UserTokenType::UserName,
                Some(SECURITY_POLICY_NONE_URI),
            ));
        }
    }
    if has_users && settings.x509 {
        if !on_none {
            out.push(policy(
                X509_POLICY_ID,
                UserTokenType::Certificate,
                Some(endpoint_policy_uri),
            ));
        } else if token_uri_usable {
            out.push(policy(
                X509_POLICY_ID,
                UserTokenType::Certificate,
                Some(token_uri),
            ));
        }
    }
    out
}

/// The server certificate advertised with an endpoint / returned by CreateSession: the
/// certificate of the endpoint's policy; for SecurityPolicy None the certificate of the user
/// token policy (clients encrypt passwords with it), if one is configured.
pub fn endpoint_certificate(state: &ServiceState, policy_uri: &str) -> ByteString {
    let security = state.security();
    let own = security
        .find(policy_uri)
        .and_then(|p| p.local_certificate());
    let cert = own.or_else(|| {
        if policy_uri != SECURITY_POLICY_NONE_URI {
            return None;
        }
        let uri = security
            .user_tokens()
            .none_endpoint_token_policy_uri
            .as_str();
        let tokens = user_token_policies_for(state, policy_uri);
        let used = tokens
            .iter()
            .any(|t| t.security_policy_uri.as_str() == uri && !uri.is_empty());
        if used {
            security.policy(uri).and_then(|p| p.local_certificate())
        } else {
            None
        }
    });
    cert.map(ByteString::from).unwrap_or_default()
}

pub use crate::server::handshake::ECDH_POLICY_URI_KEY;

/// The ECDHPolicyUri of a request header's AdditionalParametersType, if it has one (a value
/// that is not a String is the empty URI, which no policy has).
pub fn ecdh_policy_uri(header: &RequestHeader) -> Option<String> {
    let params = header
        .additional_header
        .decode_as::<AdditionalParametersType>(DecodeLimits::default())?
        .ok()?;
    params
        .parameters
        .iter()
        .find(|p| p.key.namespace_index == 0 && p.key.name.as_str() == ECDH_POLICY_URI_KEY)
        .map(|p| match &p.value {
            Variant::String(s) => s.as_str().to_owned(),
            _ => String::new(),
        })
}

/// An ephemeral key a client asked for: its policy's URI, and the policy that makes it, or
/// why none can be made (Bad_SecurityPolicyRejected).
pub(crate) struct EcdhRequest {
    uri: String,
    policy: Result<Arc<dyn SecurityPolicy>, StatusCode>,
}

impl EcdhRequest {
    /// For the ECDHPolicyUri `uri` on this request's channel: an ECC policy of the channel,
    /// or of one of the endpoint's user token policies, on a secured channel.
    pub(crate) fn new(state: &ServiceState, ctx: &RequestContext<'_>, uri: String) -> EcdhRequest {
        let security = state.security();
        let policy = (|| {
            if ctx.security_mode == MessageSecurityMode::None {
                return None;
            }
            let p = security
                .policy(&uri)
                .filter(|p| p.offers_ephemeral_keys())?;
            let of_endpoint = uri == ctx.security_policy_uri
                || user_token_policies_for(state, ctx.security_policy_uri)
                    .iter()
                    .any(|t| t.security_policy_uri.as_str() == uri);
            of_endpoint.then(|| p.clone())
        })()
        .ok_or(StatusCode::BadSecurityPolicyRejected);
        EcdhRequest { uri, policy }
    }

    /// Whether making the key is work (an ECDH key pair and a signature) rather than the
    /// refusal.
    pub(crate) fn is_work(&self) -> bool {
        self.policy.is_ok()
    }

    /// Makes the key (job work when [`EcdhRequest::is_work`]).
    pub(crate) fn make(self) -> EcdhKey {
        EcdhKey::new(self.uri, self.policy.and_then(|p| p.new_ephemeral_key()))
    }
}

/// Whether a UserName token's secret is an EccEncryptedSecret: it starts with the
/// structure's TypeId (i=17546).
fn is_ecc_encrypted_secret(secret: &[u8]) -> bool {
    let mut d = Decoder::new(secret, DecodeLimits::default());
    NodeId::decode(&mut d)
        .is_ok_and(|id| id.as_ns0() == Some(crate::generated::node_ids::EccEncryptedSecret))
}

fn concat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// Work of a handshake job that yields `T` (runs off the shard; touches no shard state).
pub type Work<T> = Box<dyn FnOnce() -> Result<T, StatusCode> + Send>;

/// CreateSession's signature work, and whether it may run on the shard
/// ([`SecurityPolicy::session_signature_inline`]: it costs no more than a hand-off).
pub struct SignatureWork {
    pub work: Work<SignatureData>,
    pub inline: bool,
}

/// CreateSession on a secured channel: the work that validates the client certificate (with
/// the ApplicationUri of its description) and signs `clientCertificate ‖ clientNonce`.
/// `None` on a None channel (a null signature).
pub fn create_session_signature_work(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    client_certificate: &[u8],
    client_nonce: &[u8],
    application_uri: &str,
    now: Now,
) -> Result<Option<SignatureWork>, StatusCode> {
    if ctx.security_mode == MessageSecurityMode::None {
        return Ok(None);
    }
    let policy = state
        .security()
        .find(ctx.security_policy_uri)
        .ok_or(StatusCode::BadSecurityPolicyRejected)?
        .clone();
    // The certificate of CreateSession is the channel's (Part 4 §5.7.2.2); a client may leave
    // it out and rely on the channel's.
    let cert = if client_certificate.is_empty() {
        ctx.client_certificate.unwrap_or(&[])
    } else {
        client_certificate
    };
    if cert.is_empty() {
        return Err(StatusCode::BadCertificateInvalid);
    }
    let uri = (!application_uri.is_empty()).then(|| application_uri.to_owned());
    let inline = policy.session_signature_inline(cert, uri.as_deref(), now);
    let data = concat(cert, client_nonce);
    let cert = cert.to_vec();
    Ok(Some(SignatureWork {
        work: Box::new(move || {
            policy.validate_client_certificate(&cert, uri.as_deref(), now)?;
            let (algorithm, signature) = policy.sign_own(&data)?;
            Ok(SignatureData {
                algorithm: algorithm.as_str().into(),
                signature: ByteString::from(signature),
            })
        }),
        inline,
    }))
}

/// ActivateSession on a secured channel: the work that verifies the client's signature over
/// `serverCertificate ‖ serverNonce` (the nonce handed out last) with the channel's client
/// certificate (failure: BadApplicationSignatureInvalid). `None` on a None channel.
pub fn client_signature_work(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    server_nonce: &[u8],
    signature: &SignatureData,
) -> Result<Option<Work<()>>, StatusCode> {
    if ctx.security_mode == MessageSecurityMode::None {
        return Ok(None);
    }
    let policy = state
        .security()
        .find(ctx.security_policy_uri)
        .ok_or(StatusCode::BadSecurityPolicyRejected)?
        .clone();
    let client_cert = ctx
        .client_certificate
        .ok_or(StatusCode::BadApplicationSignatureInvalid)?
        .to_vec();
    let data = concat(policy.local_certificate().unwrap_or(&[]), server_nonce);
    let algorithm = signature.algorithm.as_str().to_owned();
    let signature = signature.signature.as_bytes().to_vec();
    Ok(Some(Box::new(move || {
        policy
            .verify_signature(&client_cert, &data, &algorithm, &signature)
            .map_err(|_| StatusCode::BadApplicationSignatureInvalid)
    })))
}

/// What ActivateSession has to do to learn the user: nothing more (anonymous on a None
/// channel), or a job's work.
pub enum Activation {
    Ready(UserIdentity),
    Work(Work<UserIdentity>),
}

/// The client signature check and the user token check of an ActivateSession, in that order.
/// The cheap checks (token type, policy, the failed-login limit) run here; the RSA work and
/// argon2id are left in the returned work.
pub fn activation_work(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    req: &ActivateSessionRequest,
    server_nonce: &[u8],
    ephemeral_key: Option<EphemeralPrivateKey>,
    now: Now,
) -> Result<Activation, StatusCode> {
    let client = client_signature_work(state, ctx, server_nonce, &req.client_signature)?;
    let user = identity_work(
        state,
        ctx,
        &req.user_identity_token,
        &req.user_token_signature,
        server_nonce,
        ephemeral_key,
        now,
    );
    match (client, user) {
        (None, Ok(a)) => Ok(a),
        (None, Err(s)) => Err(s),
        // The client signature alone is one RSA public-key operation (about 25 µs at 2048
        // bits), no dearer than handing it to a helper and taking the result back: it runs
        // here. Only a token that needs a private key, argon2id or the PKI makes a job.
        (Some(client), Ok(Activation::Work(user))) => Ok(Activation::Work(Box::new(move || {
            client()?;
            user()
        }))),
        (Some(client), user) => {
            client()?;
            user
        }
    }
}

/// Runs a job's work where it is (no pool).
fn run_now<T>(work: Option<Work<T>>) -> Result<Option<T>, StatusCode> {
    work.map(|w| w()).transpose()
}

/// [`create_session_signature_work`] run at once.
pub fn create_session_signature(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    client_certificate: &[u8],
    client_nonce: &[u8],
    application_uri: &str,
    now: Now,
) -> Result<SignatureData, StatusCode> {
    let work = create_session_signature_work(
        state,
        ctx,
        client_certificate,
        client_nonce,
        application_uri,
        now,
    )?;
    Ok(run_now(work.map(|w| w.work))?.unwrap_or_default())
}

/// [`client_signature_work`] run at once.
pub fn verify_client_signature(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    server_nonce: &[u8],
    signature: &SignatureData,
) -> Result<(), StatusCode> {
    run_now(client_signature_work(state, ctx, server_nonce, signature)?).map(|_| ())
}

fn find_policy(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    t: UserTokenType,
    policy_id: &str,
) -> Result<UserTokenPolicy, StatusCode> {
    let policies = user_token_policies_for(state, ctx.security_policy_uri);
    policies
        .into_iter()
        .find(|p| p.token_type == t && (policy_id.is_empty() || p.policy_id.as_str() == policy_id))
        .ok_or(StatusCode::BadIdentityTokenRejected)
}

/// The SecurityPolicyUri that secures a token under `policy`: its own, else the channel's.
fn token_security_uri<'a>(policy: &'a UserTokenPolicy, ctx: &'a RequestContext<'_>) -> &'a str {
    if policy.security_policy_uri.is_empty() {
        ctx.security_policy_uri
    } else {
        policy.security_policy_uri.as_str()
    }
}

fn peer_ip(ctx: &RequestContext<'_>) -> Option<IpAddr> {
    ctx.peer.map(|p| p.ip())
}

/// What ActivateSession makes of the userIdentityToken (and its signature), run at once.
/// `server_nonce` is the nonce the server handed out last (CreateSession or the previous
/// ActivateSession), `ephemeral_key` the private half of the ephemeral key handed out last.
pub fn identity_from_token(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    token: &ExtensionObject,
    token_signature: &SignatureData,
    server_nonce: &[u8],
    ephemeral_key: Option<EphemeralPrivateKey>,
    now: Now,
) -> Result<UserIdentity, StatusCode> {
    match identity_work(
        state,
        ctx,
        token,
        token_signature,
        server_nonce,
        ephemeral_key,
        now,
    )? {
        Activation::Ready(i) => Ok(i),
        Activation::Work(w) => w(),
    }
}

/// How a UserName token's secret is to be read.
enum Secret {
    /// In clear.
    Clear,
    /// Legacy encrypted (RSA) with the policy, under the token's encryptionAlgorithm.
    Legacy(Arc<dyn SecurityPolicy>, String),
    /// An EccEncryptedSecret to the session's ephemeral key, signed by the channel's client
    /// certificate.
    Ecc(Arc<dyn SecurityPolicy>, EphemeralPrivateKey, Vec<u8>),
}

/// The userIdentityToken's checks: the cheap ones now (type, policy, the failed-login limit,
/// whether a password in clear is acceptable), the user token decryption (RSA private key,
/// or ECDH with the session's ephemeral key `ephemeral_key`), argon2id and the X.509 user
/// certificate (signature, PKI) as work.
pub fn identity_work(
    state: &ServiceState,
    ctx: &RequestContext<'_>,
    token: &ExtensionObject,
    token_signature: &SignatureData,
    server_nonce: &[u8],
    ephemeral_key: Option<EphemeralPrivateKey>,
    now: Now,
) -> Result<Activation, StatusCode> {
    let limits = crate::DecodeLimits::default();
    let security = state.security();
    if token.is_null() {
        // A null token means anonymous (Part 4 §5.7.3.2).
        let p = find_policy(state, ctx, UserTokenType::Anonymous, "")
            .map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        return Ok(Activation::Ready(UserIdentity::Anonymous {
            policy_id: p.policy_id.as_str().to_owned(),
            roles: anonymous_roles(state),
        }));
    }
    if let Some(r) = token.decode_as::<AnonymousIdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(state, ctx, UserTokenType::Anonymous, t.policy_id.as_str())
            .map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        return Ok(Activation::Ready(UserIdentity::Anonymous {
            policy_id: p.policy_id.as_str().to_owned(),
            roles: anonymous_roles(state),
        }));
    }
    let peer = peer_ip(ctx);
    if let Some(r) = token.decode_as::<UserNameIdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(state, ctx, UserTokenType::UserName, t.policy_id.as_str())?;
        let users = security
            .user_authenticator()
            .ok_or(StatusCode::BadIdentityTokenRejected)?
            .clone();
        // A rate-limited address costs no RSA decryption.
        if !users.login_allowed(peer, now) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let uri = token_security_uri(&p, ctx);
        let token_policy = security.policy(uri);
        let ecc = token_policy.is_some_and(|p| p.offers_ephemeral_keys())
            && t.encryption_algorithm.is_empty()
            && is_ecc_encrypted_secret(t.password.as_bytes());
        let decrypt = if ecc {
            // Encrypted to the ephemeral key handed out last, signed by the channel's client.
            let (Some(policy), Some(key), Some(signer)) =
                (token_policy, ephemeral_key, ctx.client_certificate)
            else {
                return Err(StatusCode::BadIdentityTokenInvalid);
            };
            Secret::Ecc(policy.clone(), key, signer.to_vec())
        } else if t.encryption_algorithm.is_empty() {
            // In clear: only inside an encrypted channel, or where configured for None.
            let allowed = ctx.security_mode == MessageSecurityMode::SignAndEncrypt
                || (ctx.security_policy_uri == SECURITY_POLICY_NONE_URI
                    && security.user_tokens().allow_password_on_none);
            if !allowed {
                return Err(StatusCode::BadIdentityTokenRejected);
            }
            Secret::Clear
        } else {
            Secret::Legacy(
                token_policy
                    .ok_or(StatusCode::BadIdentityTokenInvalid)?
                    .clone(),
                t.encryption_algorithm.as_str().to_owned(),
            )
        };
        let policy_id = p.policy_id.as_str().to_owned();
        let user = t.user_name.as_str().to_owned();
        let secret = t.password.as_bytes().to_vec();
        let nonce = server_nonce.to_vec();
        return Ok(Activation::Work(Box::new(move || {
            let decrypted = match decrypt {
                Secret::Clear => Ok(secret),
                Secret::Legacy(policy, algorithm) => {
                    policy.decrypt_user_secret(&algorithm, &secret, &nonce)
                }
                Secret::Ecc(policy, key, signer) => {
                    policy.decrypt_encrypted_secret(&*key.0, &secret, &nonce, &signer)
                }
            };
            let password = match decrypted {
                Ok(p) => p,
                Err(s) => {
                    users.login_failed(peer, now);
                    return Err(s);
                }
            };
            let roles = users.authenticate_password(peer, &user, &password, now)?;
            Ok(UserIdentity::UserName {
                policy_id,
                user,
                roles,
            })
        })));
    }
    if let Some(r) = token.decode_as::<X509IdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(state, ctx, UserTokenType::Certificate, t.policy_id.as_str())?;
        let users = security
            .user_authenticator()
            .ok_or(StatusCode::BadIdentityTokenRejected)?
            .clone();
        if !users.login_allowed(peer, now) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let uri = token_security_uri(&p, ctx);
        let policy = security
            .policy(uri)
            .ok_or(StatusCode::BadIdentityTokenInvalid)?
            .clone();
        if policy.uri() == SECURITY_POLICY_NONE_URI {
            return Err(StatusCode::BadIdentityTokenRejected);
        }
        let policy_id = p.policy_id.as_str().to_owned();
        let data = concat(policy.local_certificate().unwrap_or(&[]), server_nonce);
        let certificate = t.certificate_data.as_bytes().to_vec();
        let algorithm = token_signature.algorithm.as_str().to_owned();
        let signature = token_signature.signature.as_bytes().to_vec();
        return Ok(Activation::Work(Box::new(move || {
            policy
                .verify_signature(&certificate, &data, &algorithm, &signature)
                .map_err(|_| {
                    users.login_failed(peer, now);
                    StatusCode::BadUserSignatureInvalid
                })?;
            let (user, roles) = users.authenticate_certificate(peer, &certificate, now)?;
            Ok(UserIdentity::Certificate {
                policy_id,
                user,
                roles,
            })
        })));
    }
    if token.is::<IssuedIdentityToken>() {
        return Err(StatusCode::BadIdentityTokenRejected);
    }
    Err(StatusCode::BadIdentityTokenInvalid)
}

/// The roles an anonymous login gets besides Anonymous (`[security] anonymous`).
fn anonymous_roles(state: &ServiceState) -> Roles {
    state
        .security()
        .user_tokens()
        .anonymous
        .unwrap_or(Roles::NONE)
}
