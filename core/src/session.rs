//! [`SessionKey`]: how the layers that keep state per session (the subscription engine, the
//! shard's session pool, the services) name a session of their shard. Below all of them, so
//! that the engine needs nothing of the shard to key its sessions.

/// A handle to a session of this shard: pool slot plus the slot's generation, so a handle
/// kept across a close never reaches the slot's next session. Only the shard's session pool
/// makes them ([`crate::server::service_state::ServiceState::create_session`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}
