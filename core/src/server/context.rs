//! What the services layer learns about the channel a request arrived on, and the
//! interface a [`crate::server::connection::ServerConnection`] needs from its shard.
//!
//! The call the connection makes for every request is
//! `crate::services::dispatch(shard, &ctx, request, now) -> Response` (through
//! [`ConnectionHost::dispatch`]).

use std::net::SocketAddr;

use crate::config::TransportLimits;
use crate::generated::messages::{Request, Response};
use crate::generated::types::MessageSecurityMode;
use crate::secure_channel::SecurityProvider;
use crate::server::handshake::{HandshakeJob, JobDone};
use crate::time::Now;
use crate::types::{NodeId, StatusCode};

pub use crate::response::Deferred;

/// The secure channel a request arrived on. Borrowed from the connection for the
/// duration of one dispatch: no allocation per request. (The fields are `&str`: use
/// them directly, `ctx.endpoint_url`, not `.as_str()`.)
#[derive(Debug, Clone, Copy)]
pub struct RequestContext<'a> {
    /// The secure channel id (unique across shards; see `ServiceState::next_channel_id`).
    pub channel_id: u32,
    /// The channel's SecurityPolicyUri.
    pub security_policy_uri: &'a str,
    /// The channel's MessageSecurityMode.
    pub security_mode: MessageSecurityMode,
    /// The client's application instance certificate from the OPN security header
    /// (DER), when the policy uses certificates.
    pub client_certificate: Option<&'a [u8]>,
    /// The TCP peer, when the runtime knows it.
    pub peer: Option<SocketAddr>,
    /// The EndpointUrl the client sent in its Hello ("" when it sent none).
    pub endpoint_url: &'a str,
}

/// What a server connection needs from the shard that owns it. `ServiceState` implements
/// it (calling `crate::services::dispatch`); tests implement it with a small dispatcher.
pub trait ConnectionHost {
    /// The transport and channel limits in force (validated at start).
    fn transport_limits(&self) -> &TransportLimits;
    /// The security policies and endpoint (policy, mode) pairs the server accepts.
    fn security(&self) -> &SecurityProvider;
    /// A new secure channel id, or BadTcpNotEnoughResources when the shard already has
    /// `max_channels_per_shard` channels open.
    fn open_channel(&mut self) -> Result<u32, StatusCode>;
    /// The channel closed (CLO, error, timeout, token expiry or socket gone). Called once
    /// per channel that `open_channel` handed out.
    fn channel_closed(&mut self, channel_id: u32);
    /// A channel with this SecurityPolicyUri was opened (`opened`) or closed, for the
    /// metrics. Called after `open_channel` succeeded and before `channel_closed`.
    fn channel_policy(&mut self, _policy_uri: &str, _opened: bool) {}
    /// The shard an ActivateSession's authentication token names, when that is *another*
    /// shard of this process that the connection can be handed to (the runtime then moves
    /// the connection there, see `ServerConnection::detach` / `attach`). `None`: the request
    /// is answered here. The default (single-shard hosts, tests) answers everything here.
    fn session_owner(&self, authentication_token: &NodeId) -> Option<usize> {
        let _ = authentication_token;
        None
    }
    /// A secure channel opened on another shard arrives with its moved connection. Err
    /// (BadTcpNotEnoughResources: `max_channels_per_shard` reached, or the id is live here)
    /// refuses it. Every adopted id is later reported once with `channel_closed`.
    fn adopt_channel(&mut self, channel_id: u32) -> Result<(), StatusCode> {
        let _ = channel_id;
        Err(StatusCode::BadTcpNotEnoughResources)
    }
    /// Runs one service request. Never called with OpenSecureChannel or
    /// CloseSecureChannel (the connection handles those).
    fn dispatch(&mut self, ctx: &RequestContext<'_>, request: Request, now: Now) -> Response;
    /// Runs one service request that may be answered later (Publish): `None` means the
    /// response will come through [`ConnectionHost::take_deferred`] for this channel, with
    /// `request_id`. The default answers every request at once.
    fn dispatch_deferrable(
        &mut self,
        ctx: &RequestContext<'_>,
        request: Request,
        request_id: u32,
        now: Now,
    ) -> Option<Response> {
        let _ = request_id;
        Some(self.dispatch(ctx, request, now))
    }
    /// Responses that became ready for `channel_id` since the last call: (request id,
    /// response), in order.
    fn take_deferred(&mut self, channel_id: u32, into: &mut Vec<(u32, Deferred)>) {
        let _ = (channel_id, into);
    }
    /// The shard's random number generator (server nonces of OpenSecureChannel). A CSPRNG
    /// in a server; no default, so no host forgets it.
    fn random(&mut self) -> &mut dyn crate::random::Random;
    /// The MaxResponseMessageSize (bytes) the client asked for in CreateSession of the
    /// session `authentication_token` names; 0 when it asked for none or there is no such
    /// session. The connection answers a larger response with BadResponseTooLarge.
    fn session_max_response_size(&self, authentication_token: &crate::types::NodeId) -> u32 {
        let _ = authentication_token;
        0
    }
    /// Memory, in bytes, the shard can still give to decoding one request before it would
    /// pass its aggregate budget (the runtime's `max_shard_buffered_bytes` less what it
    /// holds). A request whose decoded size would need more is answered
    /// BadResourceUnavailable without being decoded further. Unbounded by default (tests,
    /// hosts without a budget): the per-message `max_decoded_size` still applies.
    fn memory_headroom(&self) -> usize {
        usize::MAX
    }
    /// Gives back the buffer of a [`Deferred::Encoded`] response once its chunks are written.
    fn recycle_buffer(&mut self, buf: Vec<u8>) {
        let _ = buf;
    }
    /// Spare request/response memory for the hot services ([`crate::server::recycle`]);
    /// `None` (the default) decodes every request afresh.
    fn recycler(&mut self) -> Option<&mut crate::server::recycle::Recycler> {
        None
    }
    /// Whether handshake jobs go to the runtime (a helper pool) instead of running inline.
    /// The default runs them inline.
    fn offload_handshakes(&self) -> bool {
        false
    }
    /// The handshake job the last `dispatch_deferrable` left (it returned `None`): the
    /// connection waits for its result and finishes the request with [`ConnectionHost::resume`].
    fn take_job(&mut self) -> Option<HandshakeJob> {
        None
    }
    /// Finishes the session service whose job is done (or refused): the response.
    fn resume(&mut self, ctx: &RequestContext<'_>, done: JobDone, now: Now) -> Response {
        let _ = (ctx, done);
        crate::response::fault(0, StatusCode::BadInternalError, now)
    }
}
