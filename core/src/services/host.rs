//! The shard as the host of its connections: [`ConnectionHost`] for [`ServiceState`]. The
//! shard's state answers for channels, limits and buffers (its own methods, in
//! `server::service_state`); every request goes to the services ([`super::dispatch`]). Here, above
//! both, so that the shard state needs nothing of the services.

use crate::config::TransportLimits;
use crate::generated::messages::{Request, Response};
use crate::random::Random;
use crate::secure_channel::SecurityProvider;
use crate::server::context::{ConnectionHost, Deferred, RequestContext};
use crate::server::handshake::{HandshakeJob, JobDone};
use crate::server::recycle::Recycler;
use crate::server::service_state::ServiceState;
use crate::time::Now;
use crate::types::{NodeId, StatusCode};

impl ConnectionHost for ServiceState {
    fn transport_limits(&self) -> &TransportLimits {
        ServiceState::transport_limits(self)
    }
    fn security(&self) -> &SecurityProvider {
        ServiceState::security(self)
    }
    fn open_channel(&mut self) -> Result<u32, StatusCode> {
        ServiceState::open_channel(self)
    }
    fn channel_policy(&mut self, policy_uri: &str, opened: bool) {
        ServiceState::channel_policy(self, policy_uri, opened)
    }
    fn session_owner(&self, authentication_token: &NodeId) -> Option<usize> {
        ServiceState::session_owner(self, authentication_token)
    }
    fn adopt_channel(&mut self, channel_id: u32) -> Result<(), StatusCode> {
        ServiceState::adopt_channel(self, channel_id)
    }
    fn channel_closed(&mut self, channel_id: u32) {
        ServiceState::channel_closed(self, channel_id)
    }
    fn dispatch(&mut self, ctx: &RequestContext<'_>, request: Request, now: Now) -> Response {
        super::dispatch(self, ctx, request, now)
    }
    fn dispatch_deferrable(
        &mut self,
        ctx: &RequestContext<'_>,
        request: Request,
        request_id: u32,
        now: Now,
    ) -> Option<Response> {
        super::dispatch_deferrable(self, ctx, request, request_id, now)
    }
    fn take_deferred(&mut self, channel_id: u32, into: &mut Vec<(u32, Deferred)>) {
        ServiceState::take_deferred(self, channel_id, into)
    }
    fn memory_headroom(&self) -> usize {
        ServiceState::memory_headroom(self)
    }
    fn session_max_response_size(&self, authentication_token: &NodeId) -> u32 {
        ServiceState::session_max_response_size(self, authentication_token)
    }
    fn recycle_buffer(&mut self, buf: Vec<u8>) {
        ServiceState::recycle_buffer(self, buf)
    }
    fn recycler(&mut self) -> Option<&mut Recycler> {
        ServiceState::recycler(self)
    }
    fn random(&mut self) -> &mut dyn Random {
        ServiceState::random(self)
    }
    fn offload_handshakes(&self) -> bool {
        ServiceState::offload_handshakes(self)
    }
    fn take_job(&mut self) -> Option<HandshakeJob> {
        ServiceState::take_job(self)
    }
    fn resume(&mut self, ctx: &RequestContext<'_>, done: JobDone, now: Now) -> Response {
        self.note_request(now);
        super::session::resume(self, ctx, done, now)
    }
}
