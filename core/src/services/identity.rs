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

use std::net::IpAddr;

use crate::generated::types::{
    AnonymousIdentityToken, IssuedIdentityToken, MessageSecurityMode, SignatureData, UserNameIdentityToken,
    UserTokenPolicy, UserTokenType, X509IdentityToken,
};
use crate::secure_channel::{UserAccess, SECURITY_POLICY_NONE_URI};
use crate::server::context::RequestContext;
use crate::server::shard::{ShardState, UserIdentity};
use crate::types::{ByteString, ExtensionObject, StatusCode, UaString};

/// Policy id of the anonymous user token policy.
pub const ANONYMOUS_POLICY_ID: &str = "anonymous";
/// Policy id of the UserName token policy.
pub const USERNAME_POLICY_ID: &str = "username";
/// Policy id of the X.509 user certificate token policy.
pub const X509_POLICY_ID: &str = "x509";

/// The user token policies of an endpoint whose channel policy is `endpoint_policy_uri`.
pub fn user_token_policies_for(shard: &ShardState, endpoint_policy_uri: &str) -> Vec<UserTokenPolicy> {
    let security = shard.security();
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
    let has_users = security.user_authenticator().is_some();
    let on_none = endpoint_policy_uri == SECURITY_POLICY_NONE_URI;
    let token_uri = settings.none_endpoint_token_policy_uri.as_str();
    let token_uri_usable = !token_uri.is_empty() && token_uri != SECURITY_POLICY_NONE_URI && security.policy(token_uri).is_some();
    if has_users && settings.user_name {
        if !on_none {
            out.push(policy(USERNAME_POLICY_ID, UserTokenType::UserName, Some(endpoint_policy_uri)));
        } else if token_uri_usable {
            out.push(policy(USERNAME_POLICY_ID, UserTokenType::UserName, Some(token_uri)));
        } else if settings.allow_password_on_none {
            out.push(policy(USERNAME_POLICY_ID, UserTokenType::UserName, Some(SECURITY_POLICY_NONE_URI)));
        }
    }
    if has_users && settings.x509 {
        if !on_none {
            out.push(policy(X509_POLICY_ID, UserTokenType::Certificate, Some(endpoint_policy_uri)));
        } else if token_uri_usable {
            out.push(policy(X509_POLICY_ID, UserTokenType::Certificate, Some(token_uri)));
        }
    }
    out
}

/// The server certificate advertised with an endpoint / returned by CreateSession: the
/// certificate of the endpoint's policy; for SecurityPolicy None the certificate of the user
/// token policy (clients encrypt passwords with it), if one is configured.
pub fn endpoint_certificate(shard: &ShardState, policy_uri: &str) -> ByteString {
    let security = shard.security();
    let own = security.find(policy_uri).and_then(|p| p.local_certificate());
    let cert = own.or_else(|| {
        if policy_uri != SECURITY_POLICY_NONE_URI {
            return None;
        }
        let uri = security.user_tokens().none_endpoint_token_policy_uri.as_str();
        let tokens = user_token_policies_for(shard, policy_uri);
        let used = tokens.iter().any(|t| t.security_policy_uri.as_str() == uri && !uri.is_empty());
        if used {
            security.policy(uri).and_then(|p| p.local_certificate())
        } else {
            None
        }
    });
    cert.map(ByteString::from).unwrap_or_default()
}

fn concat(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(a.len() + b.len());
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// CreateSession on a secured channel: validates the client certificate (with the
/// ApplicationUri of its description) and signs `clientCertificate ‖ clientNonce`.
/// On a None channel: a null signature.
pub fn create_session_signature(
    shard: &ShardState,
    ctx: &RequestContext<'_>,
    client_certificate: &[u8],
    client_nonce: &[u8],
    application_uri: &str,
) -> Result<SignatureData, StatusCode> {
    if ctx.security_mode == MessageSecurityMode::None {
        return Ok(SignatureData::default());
    }
    let policy = shard.security().find(ctx.security_policy_uri).ok_or(StatusCode::BadSecurityPolicyRejected)?;
    // The certificate of CreateSession is the channel's (Part 4 §5.7.2.2); a client may leave
    // it out and rely on the channel's.
    let cert = if client_certificate.is_empty() { ctx.client_certificate.unwrap_or(&[]) } else { client_certificate };
    if cert.is_empty() {
        return Err(StatusCode::BadCertificateInvalid);
    }
    let uri = (!application_uri.is_empty()).then_some(application_uri);
    policy.validate_client_certificate(cert, uri)?;
    let (algorithm, signature) = policy.sign_own(&concat(cert, client_nonce))?;
    Ok(SignatureData { algorithm: algorithm.as_str().into(), signature: ByteString::from(signature) })
}

/// ActivateSession on a secured channel: verifies the client's signature over
/// `serverCertificate ‖ serverNonce` (the nonce handed out last) with the channel's client
/// certificate. Failure: BadApplicationSignatureInvalid.
pub fn verify_client_signature(
    shard: &ShardState,
    ctx: &RequestContext<'_>,
    server_nonce: &[u8],
    signature: &SignatureData,
) -> Result<(), StatusCode> {
    if ctx.security_mode == MessageSecurityMode::None {
        return Ok(());
    }
    let policy = shard.security().find(ctx.security_policy_uri).ok_or(StatusCode::BadSecurityPolicyRejected)?;
    let client_cert = ctx.client_certificate.ok_or(StatusCode::BadApplicationSignatureInvalid)?;
    let server_cert = policy.local_certificate().unwrap_or(&[]);
    policy
        .verify_signature(client_cert, &concat(server_cert, server_nonce), signature.algorithm.as_str(), signature.signature.as_bytes())
        .map_err(|_| StatusCode::BadApplicationSignatureInvalid)
}

fn find_policy(shard: &ShardState, ctx: &RequestContext<'_>, t: UserTokenType, policy_id: &str) -> Result<UserTokenPolicy, StatusCode> {
    let policies = user_token_policies_for(shard, ctx.security_policy_uri);
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

/// What ActivateSession makes of the userIdentityToken (and its signature). `server_nonce`
/// is the nonce the server handed out last (CreateSession or the previous ActivateSession).
pub fn identity_from_token(
    shard: &ShardState,
    ctx: &RequestContext<'_>,
    token: &ExtensionObject,
    token_signature: &SignatureData,
    server_nonce: &[u8],
) -> Result<UserIdentity, StatusCode> {
    let limits = crate::DecodeLimits::default();
    let security = shard.security();
    if token.is_null() {
        // A null token means anonymous (Part 4 §5.7.3.2).
        let p = find_policy(shard, ctx, UserTokenType::Anonymous, "").map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        return Ok(UserIdentity::Anonymous { policy_id: p.policy_id.as_str().to_owned() });
    }
    if let Some(r) = token.decode_as::<AnonymousIdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(shard, ctx, UserTokenType::Anonymous, t.policy_id.as_str())
            .map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        return Ok(UserIdentity::Anonymous { policy_id: p.policy_id.as_str().to_owned() });
    }
    if let Some(r) = token.decode_as::<UserNameIdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(shard, ctx, UserTokenType::UserName, t.policy_id.as_str())?;
        let users = security.user_authenticator().ok_or(StatusCode::BadIdentityTokenRejected)?;
        // A rate-limited address costs no RSA decryption.
        if !users.login_allowed(peer_ip(ctx)) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let uri = token_security_uri(&p, ctx);
        let password: Vec<u8> = if t.encryption_algorithm.is_empty() {
            // In clear: only inside an encrypted channel, or where configured for None.
            let allowed = ctx.security_mode == MessageSecurityMode::SignAndEncrypt
                || (ctx.security_policy_uri == SECURITY_POLICY_NONE_URI && security.user_tokens().allow_password_on_none);
            if !allowed {
                return Err(StatusCode::BadIdentityTokenRejected);
            }
            t.password.as_bytes().to_vec()
        } else {
            let policy = security.policy(uri).ok_or(StatusCode::BadIdentityTokenInvalid)?;
            match policy.decrypt_user_secret(t.encryption_algorithm.as_str(), t.password.as_bytes(), server_nonce) {
                Ok(p) => p,
                Err(s) => {
                    users.login_failed(peer_ip(ctx));
                    return Err(s);
                }
            }
        };
        let user = t.user_name.as_str();
        let access = users.authenticate_password(peer_ip(ctx), user, &password)?;
        return Ok(UserIdentity::UserName { policy_id: p.policy_id.as_str().to_owned(), user: user.to_owned(), access });
    }
    if let Some(r) = token.decode_as::<X509IdentityToken>(limits) {
        let t = r.map_err(|_| StatusCode::BadIdentityTokenInvalid)?;
        let p = find_policy(shard, ctx, UserTokenType::Certificate, t.policy_id.as_str())?;
        let users = security.user_authenticator().ok_or(StatusCode::BadIdentityTokenRejected)?;
        if !users.login_allowed(peer_ip(ctx)) {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let uri = token_security_uri(&p, ctx);
        let policy = security.policy(uri).ok_or(StatusCode::BadIdentityTokenInvalid)?;
        if policy.uri() == SECURITY_POLICY_NONE_URI {
            return Err(StatusCode::BadIdentityTokenRejected);
        }
        let server_cert = policy.local_certificate().unwrap_or(&[]);
        policy
            .verify_signature(
                t.certificate_data.as_bytes(),
                &concat(server_cert, server_nonce),
                token_signature.algorithm.as_str(),
                token_signature.signature.as_bytes(),
            )
            .map_err(|_| {
                users.login_failed(peer_ip(ctx));
                StatusCode::BadUserSignatureInvalid
            })?;
        let (user, access) = users.authenticate_certificate(peer_ip(ctx), t.certificate_data.as_bytes())?;
        return Ok(UserIdentity::Certificate { policy_id: p.policy_id.as_str().to_owned(), user, access });
    }
    if token.is::<IssuedIdentityToken>() {
        return Err(StatusCode::BadIdentityTokenRejected);
    }
    Err(StatusCode::BadIdentityTokenInvalid)
}

/// The access of an activated session's user.
pub fn access_of(shard: &ShardState, identity: &UserIdentity) -> UserAccess {
    match identity {
        UserIdentity::Anonymous { .. } => shard.security().user_tokens().anonymous.unwrap_or(UserAccess::Read),
        UserIdentity::UserName { access, .. } | UserIdentity::Certificate { access, .. } => *access,
    }
}
