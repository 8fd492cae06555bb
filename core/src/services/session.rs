//! Session service set (Part 4 §5.7): CreateSession, ActivateSession, CloseSession, Cancel.

use crate::generated::messages::Response;
use crate::generated::types::{
    ActivateSessionRequest, ActivateSessionResponse, CancelRequest, CancelResponse,
    CloseSessionRequest, CloseSessionResponse, CreateSessionRequest, CreateSessionResponse,
    MessageSecurityMode, SignatureData,
};
use crate::server::context::RequestContext;
use crate::server::handshake::EcdhKey;
use crate::server::handshake::{Carry, HandshakeJob, JobDone, JobKind, Output};
use crate::server::service_state::{ServiceState, Session, UserIdentity};
use crate::services::identity::{Activation, EcdhRequest};
use crate::services::{discovery, fault, identity, response_header};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::{ByteString, ExtensionObject, StatusCode};

/// Length of every server nonce, with or without security: open62541's client rejects a null
/// or short nonce even with SecurityPolicy None.
pub const SERVER_NONCE_LEN: usize = 32;

/// Shortest and longest client nonce accepted on a secured channel (Part 4 §5.7.2.3).
const CLIENT_NONCE_MIN: usize = 32;
const CLIENT_NONCE_MAX: usize = 128;

fn is_secured(ctx: &RequestContext<'_>) -> bool {
    ctx.security_mode != MessageSecurityMode::None
}

/// CreateSession: allocates a session bound to the request's secure channel. On a secured
/// channel the certificate check and the server signature are a handshake job: `None` when it
/// went to the runtime (the response comes from [`resume`]). A signature that costs no more
/// than the hand-off (P-256, a certificate the shard validated already:
/// [`crate::secure_channel::SecurityPolicy::session_signature_inline`]) is made here.
pub fn create_session(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    req: Box<CreateSessionRequest>,
    now: Now,
) -> Option<Response> {
    let handle = req.request_header.request_handle;
    if is_secured(ctx) {
        let n = req.client_nonce.as_bytes().len();
        if !(CLIENT_NONCE_MIN..=CLIENT_NONCE_MAX).contains(&n) {
            return Some(fault(handle, StatusCode::BadNonceInvalid, now));
        }
    }
    let timeout_ms = state
        .shared()
        .config
        .sessions
        .revise_timeout_ms(req.requested_session_timeout);
    let key = match state.create_session(ctx.channel_id, ctx.security_policy_uri, timeout_ms, now) {
        Ok(k) => k,
        Err(s) => return Some(fault(handle, s, now)),
    };
    let work = identity::create_session_signature_work(
        state,
        ctx,
        req.client_certificate.as_bytes(),
        req.client_nonce.as_bytes(),
        req.client_description.application_uri.as_str(),
        now,
    );
    let ecdh =
        identity::ecdh_policy_uri(&req.request_header).map(|uri| EcdhRequest::new(state, ctx, uri));
    match work {
        Err(s) => {
            state.remove_session(key);
            Some(fault(handle, s, now))
        }
        Ok(None) => {
            // No security: an ephemeral key asked for is refused, which is no work.
            let ecdh = ecdh.map(EcdhRequest::make);
            Some(finish_create_session(
                state,
                ctx,
                key,
                &req,
                Ok(SignatureData::default()),
                ecdh,
                now,
            ))
        }
        // As cheap as a hand-off (a P-256 signature, a certificate validated already), and
        // no ephemeral key to make: on the shard.
        Ok(Some(w)) if w.inline && ecdh.as_ref().is_none_or(|e| !e.is_work()) => {
            let signature = (w.work)();
            let ecdh = match &signature {
                Ok(_) => ecdh.map(EcdhRequest::make),
                Err(_) => None,
            };
            Some(finish_create_session(
                state, ctx, key, &req, signature, ecdh, now,
            ))
        }
        Ok(Some(w)) => {
            let work = w.work;
            let job = HandshakeJob::new(
                JobKind::CreateSession,
                Carry::CreateSession { key, req },
                move || {
                    let signature = work();
                    let ecdh = match &signature {
                        Ok(_) => ecdh.map(EcdhRequest::make),
                        Err(_) => None,
                    };
                    Output::Signature(signature, ecdh)
                },
            );
            run_or_park(state, ctx, job, now)
        }
    }
}

/// Runs a session service's job inline, or leaves it for the connection when the shard
/// offloads handshakes.
fn run_or_park(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    job: HandshakeJob,
    now: Now,
) -> Option<Response> {
    if state.offloads_handshakes() {
        state.park_job(job);
        None
    } else {
        Some(resume(state, ctx, job.run(), now))
    }
}

/// Finishes CreateSession or ActivateSession once its job is done; a refused job is
/// BadTooManyOperations (and a created session is released).
pub fn resume(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    done: JobDone,
    now: Now,
) -> Response {
    let JobDone {
        kind,
        output,
        carry,
    } = done;
    let mut response = match carry {
        Carry::CreateSession { key, req } => {
            let (signature, ecdh) = match output {
                Some(Output::Signature(r, ecdh)) => (r, ecdh),
                None => (Err(kind.refusal()), None),
                Some(_) => (Err(StatusCode::BadInternalError), None),
            };
            finish_create_session(state, ctx, key, &req, signature, ecdh, now)
        }
        Carry::ActivateSession {
            key,
            req,
            server_nonce,
        } => {
            let (identity, ecdh) = match output {
                Some(Output::Identity(r, ecdh)) => (r, ecdh),
                None => (Err(kind.refusal()), None),
                Some(_) => (Err(StatusCode::BadInternalError), None),
            };
            finish_activate_session(state, ctx, key, &req, &server_nonce, identity, ecdh, now)
        }
        Carry::None | Carry::Open { .. } => fault(0, StatusCode::BadInternalError, now),
    };
    response.response_header_mut().timestamp = now.utc;
    response
}

fn finish_create_session(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    key: SessionKey,
    req: &CreateSessionRequest,
    signature: Result<SignatureData, StatusCode>,
    ecdh: Option<EcdhKey>,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let server_signature = match signature {
        Ok(s) => s,
        Err(s) => {
            state.remove_session(key);
            return fault(handle, s, now);
        }
    };
    let endpoint_url = if req.endpoint_url.is_empty() {
        ctx.endpoint_url
    } else {
        req.endpoint_url.as_str()
    };
    let server_endpoints = match state.recycler.session_endpoints(endpoint_url) {
        Some(e) => e,
        None => discovery::session_endpoint_descriptions(state, endpoint_url),
    };
    let max_request_message_size = discovery::max_message_size(state);
    let server_certificate = identity::endpoint_certificate(state, ctx.security_policy_uri);
    let Some(session) = state.session_mut(key) else {
        return fault(handle, StatusCode::BadInternalError, now);
    };
    session.name = req.session_name.clone();
    session.client_description = req.client_description.clone();
    session.client_certificate = req.client_certificate.clone();
    session.channel_certificate = ctx
        .client_certificate
        .map(ByteString::from)
        .unwrap_or_default();
    session.max_response_message_size = req.max_response_message_size;
    session.diagnostics.endpoint_url = crate::types::UaString::from(endpoint_url);
    session.diagnostics.security_mode = ctx.security_mode;
    let additional_header = give_ephemeral_key(session, ecdh);
    let (session_id, token, timeout_ms, server_nonce) = (
        session.session_id.clone(),
        session.authentication_token.clone(),
        session.timeout_ms,
        session.server_nonce.clone(),
    );
    crate::events::audit::publish_session_created(
        &state.shared().events,
        &session_id,
        ctx.channel_id,
        &req.client_certificate,
        timeout_ms,
        now,
    );
    let mut response_header = response_header(handle, now);
    response_header.additional_header = additional_header;
    Response::CreateSession(Box::new(CreateSessionResponse {
        response_header,
        session_id,
        authentication_token: token,
        revised_session_timeout: timeout_ms,
        server_nonce,
        // The application instance certificate of the channel's policy (none for None).
        server_certificate,
        server_endpoints,
        server_software_certificates: Vec::new(),
        server_signature,
        max_request_message_size,
    }))
}

/// ActivateSession: sets the user identity and (re)binds the session to this channel. The
/// user token's decryption and its check (argon2id, X.509), with the client signature, are a
/// handshake job: `None` when it went to the runtime (the response comes from [`resume`]). A
/// client signature alone (anonymous) is checked here ([`identity::activation_work`]).
pub fn activate_session(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    req: Box<ActivateSessionRequest>,
    now: Now,
) -> Option<Response> {
    let handle = req.request_header.request_handle;
    let key = match state.find_session(&req.request_header.authentication_token, now) {
        Ok(k) => k,
        Err(s) => return Some(fault(handle, s, now)),
    };
    // The ephemeral key handed out last is this activation's, used or not.
    let (server_nonce, ephemeral_key, asked_before) = match state.session_mut(key) {
        Some(s) => (
            s.server_nonce.clone(),
            s.ephemeral_key.take(),
            s.ecdh_policy_uri.clone(),
        ),
        None => return Some(fault(handle, StatusCode::BadSessionIdInvalid, now)),
    };
    let ecdh = identity::ecdh_policy_uri(&req.request_header)
        .or(asked_before)
        .map(|uri| EcdhRequest::new(state, ctx, uri));
    let activation = identity::activation_work(
        state,
        ctx,
        &req,
        server_nonce.as_bytes(),
        ephemeral_key,
        now,
    );
    let work: identity::Work<UserIdentity> = match activation {
        Err(s) => return Some(fault(handle, s, now)),
        // A new ephemeral key is work for the job even when the identity is not.
        Ok(Activation::Ready(identity)) if ecdh.as_ref().is_some_and(EcdhRequest::is_work) => {
            Box::new(move || Ok(identity))
        }
        Ok(Activation::Ready(identity)) => {
            return Some(finish_activate_session(
                state,
                ctx,
                key,
                &req,
                &server_nonce,
                Ok(identity),
                ecdh.map(EcdhRequest::make),
                now,
            ))
        }
        Ok(Activation::Work(work)) => work,
    };
    let carry = Carry::ActivateSession {
        key,
        req,
        server_nonce,
    };
    let job = HandshakeJob::new(JobKind::ActivateSession, carry, move || {
        let identity = work();
        let ecdh = match &identity {
            Ok(_) => ecdh.map(EcdhRequest::make),
            Err(_) => None,
        };
        Output::Identity(identity, ecdh)
    });
    run_or_park(state, ctx, job, now)
}

/// Keeps the private half of the ephemeral key made for a session response (and that the
/// client asks for them); the response header's AdditionalHeader for it (null without).
fn give_ephemeral_key(session: &mut Session, ecdh: Option<EcdhKey>) -> ExtensionObject {
    let Some(ecdh) = ecdh else {
        return ExtensionObject::null();
    };
    let uri = ecdh.uri.clone();
    let (header, private) = ecdh.into_header();
    if private.is_some() {
        session.ecdh_policy_uri = Some(uri);
    }
    session.ephemeral_key = private;
    header
}

fn finish_activate_session(
    state: &mut ServiceState,
    ctx: &RequestContext<'_>,
    key: SessionKey,
    req: &ActivateSessionRequest,
    signed_nonce: &ByteString,
    identity: Result<UserIdentity, StatusCode>,
    ecdh: Option<EcdhKey>,
    now: Now,
) -> Response {
    let handle = req.request_header.request_handle;
    let identity = match identity {
        Ok(i) => i,
        Err(s) => return fault(handle, s, now),
    };
    let new_nonce = ByteString::from(crate::random::bytes(state.random(), SERVER_NONCE_LEN));
    let Some(session) = state.session_mut(key) else {
        return fault(handle, StatusCode::BadSessionIdInvalid, now);
    };
    if session.server_nonce != *signed_nonce {
        // Another ActivateSession of this session finished while this one's job ran: this
        // one's signatures cover a nonce that is no longer the last one handed out.
        return fault(handle, StatusCode::BadNonceInvalid, now);
    }
    if session.channel_id != Some(ctx.channel_id) {
        if !session.is_activated() {
            // Part 4 §5.7.3.1: the first activation must come over the channel that
            // created the session.
            return fault(handle, StatusCode::BadSessionIdInvalid, now);
        }
        // A transfer to another channel: the client must be the same application (same
        // certificate as the original channel) and the same user.
        if session.security_policy_uri != ctx.security_policy_uri
            || session.channel_certificate.as_bytes() != ctx.client_certificate.unwrap_or(&[])
        {
            return fault(handle, StatusCode::BadSecurityChecksFailed, now);
        }
        if session.identity.as_ref() != Some(&identity) {
            return fault(handle, StatusCode::BadIdentityChangeNotSupported, now);
        }
        if ctx.security_mode == MessageSecurityMode::Sign {
            // Part 4 §5.7.3.1: ActivateSession over a new channel fails on a Sign-only
            // channel (the user token would travel unencrypted).
            return fault(handle, StatusCode::BadSecurityModeInsufficient, now);
        }
    }
    session.channel_id = Some(ctx.channel_id);
    session.diagnostics.activated(&identity);
    session.diagnostics.security_mode = ctx.security_mode;
    session.identity = Some(identity);
    session.locale_ids = req.locale_ids.clone();
    session.server_nonce = new_nonce;
    session.touch(now);
    let additional_header = give_ephemeral_key(session, ecdh);
    let server_nonce = session.server_nonce.clone();
    // Publish requests queued on a previous channel can no longer be answered.
    state
        .subscriptions_mut()
        .0
        .on_session_rebound(key, ctx.channel_id);
    let mut response_header = response_header(handle, now);
    response_header.additional_header = additional_header;
    Response::ActivateSession(Box::new(ActivateSessionResponse {
        response_header,
        server_nonce,
        results: Vec::new(),
        diagnostic_infos: Vec::new(),
    }))
}

/// CloseSession for a session already validated by the dispatcher (live, on this channel).
/// Its continuation points are released with it; its subscriptions are deleted when
/// `deleteSubscriptions` is set, otherwise they stay for a TransferSubscriptions until their
/// lifetime ends.
pub fn close_session(
    state: &mut ServiceState,
    key: SessionKey,
    req: &CloseSessionRequest,
    now: Now,
) -> Response {
    if let Some(id) = state.session(key).map(|s| s.session_id.clone()) {
        crate::events::audit::publish_session_closed(&state.shared().events, &id, false, now);
    }
    state.close_session(key, req.delete_subscriptions, now);
    Response::CloseSession(Box::new(CloseSessionResponse {
        response_header: response_header(req.request_header.request_handle, now),
    }))
}

/// Cancel (Part 4 §5.7.5): the only requests that can be outstanding are queued Publish
/// requests; those with the given request handle are answered with
/// Bad_RequestCancelledByClient and counted. Every other request was answered before the
/// next one was read.
pub fn cancel(
    state: &mut ServiceState,
    key: SessionKey,
    req: &CancelRequest,
    now: Now,
) -> Response {
    let cancel_count = state
        .subscriptions_mut()
        .0
        .cancel_publish(key, req.request_handle, now);
    Response::Cancel(Box::new(CancelResponse {
        response_header: response_header(req.request_header.request_handle, now),
        cancel_count,
    }))
}
