//! The OPC UA server on the shards: one host per shard (core's `ServiceState`,
//! which implements `ConnectionHost`), one `ServerConnection` per socket.
//!
//! [`UaHandler`] adapts any [`ServiceHost`] to the loop's [`Handler`]; the
//! server runs it over core's `ServiceState` (sessions, services, timers).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use uaring_core::config::ServerConfig;
use uaring_core::config::TransportLimits;
use uaring_core::server::connection::{ConnStatus as CoreStatus, ServerConnection};
use uaring_core::server::context::ConnectionHost;
use uaring_core::server::handshake::JobDone;
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::transport::{ErrorMessage, ReverseHelloMessage};
use uaring_core::{Now, StatusCode};

use crate::fleet::{MovedConn, ShardMessage};
use crate::handler::{ConnId, ConnStatus, Handler, Origin};
use crate::handshake_pool::PoolClient;
use crate::reverse::ReverseLease;

/// The benchmark contract's ApplicationUri.
pub use uaring_core::config::CONTRACT_APPLICATION_URI;

/// Most shards the secure channel id layout can name (`shard << 24 | counter`).
pub use uaring_core::config::MAX_SHARDS;

/// A shard's protocol state as the loop sees it: a `ConnectionHost` with
/// shard-wide timers.
pub trait ServiceHost: ConnectionHost {
    /// The earliest time (mono ns) [`ServiceHost::timer`] has work.
    fn next_deadline(&self) -> Option<u64>;
    fn on_timer(&mut self, now: Now);
    /// Secure channels with deferred responses (Publish) ready to send.
    fn take_ready_channels(&mut self, _into: &mut Vec<u32>) {}
    /// What the shard's buffer budget has left, bytes (bounds decoding a request).
    fn set_memory_headroom(&mut self, _bytes: usize) {}
    /// Publishes gauges to the shard's metrics block.
    fn publish_metrics(&mut self) {}
    /// Messages for other shards (see `Handler::take_mail`).
    fn take_messages(&mut self, _into: &mut Vec<(usize, ShardMessage)>) {}
    /// A message from another shard.
    fn on_message(&mut self, _msg: ShardMessage, _now: Now) {}
    /// How other threads wake this shard's loop (the change path).
    fn set_waker(&mut self, _wake: uaring_core::address_space::change::WakeFn) {}
    /// Replaces the security provider (a new application certificate).
    fn replace_security(&mut self, _provider: uaring_core::secure_channel::SecurityProvider) {}
    /// The certificate the provider gives policy `uri` now.
    fn policy_certificate(&self, _uri: &str) -> Option<Vec<u8>> {
        None
    }
}

/// How long a shard waits after it took up a new application certificate before it closes
/// the secure channels opened with the old one (Part 12 §7.10.9: the ApplyChanges reply goes
/// out first, then the affected channels must renegotiate; their sessions stay, for the
/// clients' reconnect).
pub const RETIRE_CHANNELS_AFTER_MS: u64 = 1000;

/// Drives core's `ServerConnection`s of one shard.
pub struct UaHandler<S: ServiceHost> {
    pub host: S,
    /// Which connection carries each open secure channel (for deferred responses).
    channels: HashMap<u32, ConnId>,
    ready_channels: Vec<u32>,
    /// The handshake pool (`None`: handshake jobs run inline).
    pool: Option<PoolClient>,
    /// Handshake results taken from the pool, for `flush`.
    done: Vec<(ConnId, JobDone)>,
    /// Follows the application certificate (push management).
    identity: Option<crate::security::IdentityWatch>,
    /// When (mono ns) the channels of the old certificate are closed.
    retire_at_ns: Option<u64>,
    /// Connections to check against the new certificate (and close when theirs is old).
    retiring: Vec<ConnId>,
    retire_checks: Vec<ConnId>,
    /// Channels whose client certificate is to be validated again (the trust store changed),
    /// [`TRUST_CHECKS_PER_PASS`] a loop iteration.
    trust_queue: Vec<ConnId>,
    trust_checks: Vec<ConnId>,
}

/// Channels a shard re-validates per loop iteration after its trust store changed (each a
/// certificate validation, tens of microseconds): the rest of the shard's work goes on
/// between the slices.
pub const TRUST_CHECKS_PER_PASS: usize = 16;

impl<S: ServiceHost> UaHandler<S> {
    pub fn new(host: S) -> UaHandler<S> {
        UaHandler {
            host,
            channels: HashMap::new(),
            ready_channels: Vec::new(),
            pool: None,
            done: Vec::new(),
            identity: None,
            retire_at_ns: None,
            retiring: Vec::new(),
            retire_checks: Vec::new(),
            trust_queue: Vec::new(),
            trust_checks: Vec::new(),
        }
    }

    /// Follows certificate changes (push management): a shard takes up the new certificate
    /// for new channels at once and closes the channels of the old one
    /// [`RETIRE_CHANNELS_AFTER_MS`] later.
    pub fn with_identity(mut self, watch: Option<crate::security::IdentityWatch>) -> UaHandler<S> {
        self.identity = watch;
        self
    }

    /// Runs handshake jobs on `pool` (the host must offload them: `ServiceState::with_handshake_offload`).
    pub fn with_pool(mut self, pool: Option<PoolClient>) -> UaHandler<S> {
        self.pool = pool;
        self
    }

    /// Hands the connection's handshake job (if any) to the pool; without a pool, or when
    /// the pool refuses it, the result goes straight back (run inline, or refused; a
    /// refused decoding is run inline).
    fn start_jobs(
        &mut self,
        conn: &mut UaConn,
        now: Now,
        out: &mut Vec<u8>,
        mut status: CoreStatus,
    ) -> CoreStatus {
        while let Some(job) = conn.conn.take_job() {
            let done = match self.pool.as_mut() {
                None => job.run(),
                Some(pool) => match pool.submit(conn.id, job) {
                    Ok(()) => break,
                    // A large request's decoding is work that must be done anyway, its
                    // bytes already received and counted: with the helpers busy the loop
                    // does it (a burst of large CreateMonitoredItems is not refused).
                    Err(job) if job.kind() == uaring_core::server::handshake::JobKind::Decode => {
                        job.run()
                    }
                    Err(job) => {
                        tracing::debug!(
                            kind = job.kind().name(),
                            "handshake pool full: job refused"
                        );
                        job.refuse()
                    }
                },
            };
            status = conn.conn.on_job_done(&mut self.host, now, done, out);
        }
        status
    }

    /// Learns the connection's channel id once it has one (after OPN).
    fn track(&mut self, conn: &mut UaConn) {
        if conn.channel.is_none() {
            if let Some(ch) = conn.conn.channel_id() {
                conn.channel = Some(ch);
                self.channels.insert(ch, conn.id);
            }
        }
    }
}

/// One server connection on the loop: core's connection, its loop id and its channel.
pub struct UaConn {
    pub conn: ServerConnection,
    id: ConnId,
    channel: Option<u32>,
    /// A connection dialed to a Reverse Connect client: its tie to the dialer.
    reverse: Option<ReverseLease>,
}

impl UaConn {
    /// Tells the dialer once the client has taken a dialed connection up (its Hello came).
    fn note_taken(&mut self) {
        if let Some(l) = self.reverse.as_mut() {
            if l.is_idle() && !self.conn.awaits_hello() {
                l.taken();
            }
        }
    }
}

fn status(s: CoreStatus) -> ConnStatus {
    match s {
        CoreStatus::Open => ConnStatus::Open,
        CoreStatus::Close => ConnStatus::Close,
        CoreStatus::Move(shard) => ConnStatus::Move(shard),
    }
}

impl<S: ServiceHost> Handler for UaHandler<S> {
    type Conn = UaConn;

    fn open(
        &mut self,
        id: ConnId,
        peer: SocketAddr,
        origin: Origin,
        now: Now,
        out: &mut Vec<u8>,
    ) -> Option<UaConn> {
        match origin {
            Origin::Reverse(lease) => {
                let t = lease.target();
                let hello = ReverseHelloMessage {
                    server_uri: t.server_uri.as_str().into(),
                    endpoint_url: t.endpoint_url.as_str().into(),
                };
                let wait = t.hello_wait_ms;
                Some(UaConn {
                    conn: ServerConnection::reverse(
                        &mut self.host,
                        Some(peer),
                        now,
                        &hello,
                        wait,
                        out,
                    ),
                    id,
                    channel: None,
                    reverse: Some(lease),
                })
            }
            Origin::Accepted | Origin::Connected | Origin::Dialed(_) => Some(UaConn {
                conn: ServerConnection::new(&mut self.host, Some(peer), now),
                id,
                channel: None,
                reverse: None,
            }),
        }
    }

    fn recv(&mut self, conn: &mut UaConn, now: Now, data: &[u8], out: &mut Vec<u8>) -> ConnStatus {
        let s = conn.conn.on_recv(&mut self.host, now, data, out);
        conn.note_taken();
        let s = self.start_jobs(conn, now, out, s);
        self.track(conn);
        status(s)
    }

    fn set_waker(&mut self, waker: crate::fleet::Waker) {
        let w = waker.clone();
        self.host.set_waker(Arc::new(move || w.wake()));
        if let Some(p) = self.pool.as_mut() {
            p.set_waker(waker);
        }
    }

    fn input_suspended(&self, conn: &UaConn) -> bool {
        conn.conn.is_waiting()
    }

    fn conn_timer(&mut self, conn: &mut UaConn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        let s = conn.conn.on_timer(&mut self.host, now, out);
        // A dialed connection still waiting for its Hello can only time out waiting for it.
        if matches!(s, CoreStatus::Close) {
            if let Some(lease) = conn.reverse.as_mut() {
                lease.waited_out();
            }
        }
        status(s)
    }

    fn buffered_bytes(&self, conn: &UaConn) -> usize {
        conn.conn.buffered_bytes()
    }

    fn pre_session(&self, conn: &UaConn) -> bool {
        !conn.conn.session_activated()
    }

    fn set_memory_headroom(&mut self, bytes: usize) {
        self.host.set_memory_headroom(bytes);
    }

    fn conn_deadline(&self, conn: &UaConn) -> u64 {
        conn.conn.next_deadline().unwrap_or(u64::MAX)
    }

    fn closed(&mut self, mut conn: UaConn, now: Now) {
        if let Some(ch) = conn.channel {
            if self.channels.get(&ch) == Some(&conn.id) {
                self.channels.remove(&ch);
            }
        }
        conn.conn.on_close(&mut self.host, now);
    }

    fn detach(&mut self, mut conn: UaConn, _now: Now) -> Option<MovedConn> {
        if let Some(ch) = conn.channel {
            if self.channels.get(&ch) == Some(&conn.id) {
                self.channels.remove(&ch);
            }
        }
        conn.conn.detach(&mut self.host);
        Some(MovedConn {
            conn: conn.conn,
            reverse: conn.reverse,
        })
    }

    fn attach(
        &mut self,
        id: ConnId,
        _peer: SocketAddr,
        state: MovedConn,
        now: Now,
        out: &mut Vec<u8>,
    ) -> (Option<UaConn>, ConnStatus) {
        let MovedConn { conn, reverse } = state;
        let mut conn = UaConn {
            conn,
            id,
            channel: None,
            reverse,
        };
        let s = conn.conn.attach(&mut self.host, now, out);
        // The ActivateSession answered here may have left a handshake job (its signature check).
        let s = self.start_jobs(&mut conn, now, out, s);
        self.track(&mut conn);
        (Some(conn), status(s))
    }

    fn move_refused(&mut self, conn: &mut UaConn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        let s = conn.conn.move_refused(&mut self.host, now, out);
        let s = self.start_jobs(conn, now, out, s);
        self.track(conn);
        status(s)
    }

    fn shutdown(&mut self, conn: &mut UaConn, now: Now, out: &mut Vec<u8>) {
        // UA-TCP lets the server end a connection with an Error message; the
        // client learns why instead of seeing a bare reset. The channel and
        // its sessions are released in `closed` when the socket goes.
        if !conn.conn.is_closed() {
            ErrorMessage::new(StatusCode::BadServerHalted, "server shutting down").write(out);
        }
        let _ = now;
    }

    fn deadline(&self) -> u64 {
        self.host
            .next_deadline()
            .unwrap_or(u64::MAX)
            .min(self.retire_at_ns.unwrap_or(u64::MAX))
    }

    fn timer(&mut self, now: Now) {
        if self.retire_at_ns.is_some_and(|t| t <= now.mono_ns) {
            self.retire_at_ns = None;
            self.retiring.extend(self.channels.values().copied());
        }
        self.host.on_timer(now);
    }

    fn take_ready(&mut self, into: &mut Vec<ConnId>) {
        if let Some(p) = self.identity.as_mut().and_then(|w| w.poll()) {
            self.host.replace_security(p);
            let now = crate::clock::now().mono_ns;
            self.retire_at_ns = Some(now.saturating_add(RETIRE_CHANNELS_AFTER_MS * 1_000_000));
        }
        if !self.retiring.is_empty() {
            into.extend(self.retiring.iter().copied());
            self.retire_checks.append(&mut self.retiring);
        }
        // Part 12 §7.8.2.5: after a trust list change the channels of certificates no longer
        // trusted (or revoked) are closed.
        if self.identity.as_mut().is_some_and(|w| w.trust_changed()) {
            self.trust_queue = self.channels.values().copied().collect();
        }
        if !self.trust_queue.is_empty() {
            let n = self.trust_queue.len().min(TRUST_CHECKS_PER_PASS);
            for id in self.trust_queue.drain(..n) {
                into.push(id);
                self.trust_checks.push(id);
            }
        }
        // Results left from the last pass belong to connections that closed meanwhile.
        self.done.clear();
        if let Some(pool) = self.pool.as_mut() {
            let done = &mut self.done;
            pool.drain(|id, d| {
                done.push((id, d));
                into.push(id);
            });
        }
        self.host.take_ready_channels(&mut self.ready_channels);
        for ch in self.ready_channels.drain(..) {
            if let Some(&id) = self.channels.get(&ch) {
                into.push(id);
            }
        }
    }

    fn flush(&mut self, conn: &mut UaConn, now: Now, out: &mut Vec<u8>) -> ConnStatus {
        if let Some(i) = self.retire_checks.iter().position(|id| *id == conn.id) {
            self.retire_checks.swap_remove(i);
            if let Some(p) = conn.conn.channel_policy() {
                let old = p.local_certificate();
                if old.is_some() && old.map(<[u8]>::to_vec) != self.host.policy_certificate(p.uri())
                {
                    tracing::info!(
                        channel = conn.channel.unwrap_or(0),
                        "closing a secure channel of the old application certificate"
                    );
                    return ConnStatus::Close;
                }
            }
        }
        if let Some(i) = self.trust_checks.iter().position(|id| *id == conn.id) {
            self.trust_checks.swap_remove(i);
            if let (Some(w), Some(cert)) = (
                self.identity.as_ref(),
                conn.conn.channel_client_certificate(),
            ) {
                let now_s = (now.utc.unix_nanos() / 1_000_000_000) as i64;
                if !w.still_trusted(cert, now_s) {
                    tracing::info!(
                        channel = conn.channel.unwrap_or(0),
                        "closing a secure channel whose client certificate is no longer trusted"
                    );
                    return ConnStatus::Close;
                }
            }
        }
        if let Some(i) = self.done.iter().position(|(id, _)| *id == conn.id) {
            let (_, done) = self.done.swap_remove(i);
            let s = conn.conn.on_job_done(&mut self.host, now, done, out);
            let s = self.start_jobs(conn, now, out, s);
            self.track(conn);
            // Held input processed after the job may have closed the connection or started a
            // move to another shard (an ActivateSession for a session there).
            if s != CoreStatus::Open {
                return status(s);
            }
        }
        status(conn.conn.flush_deferred(&mut self.host, now, out))
    }

    fn publish(&mut self) {
        self.host.publish_metrics();
    }

    fn take_mail(&mut self, into: &mut Vec<(usize, ShardMessage)>) {
        self.host.take_messages(into);
    }

    fn mail(&mut self, msg: ShardMessage, now: Now) {
        self.host.on_message(msg, now);
    }
}

impl ServiceHost for ServiceState {
    fn next_deadline(&self) -> Option<u64> {
        ServiceState::next_deadline(self)
    }
    fn on_timer(&mut self, now: Now) {
        ServiceState::on_timer(self, now)
    }
    fn take_ready_channels(&mut self, into: &mut Vec<u32>) {
        ServiceState::take_ready_channels(self, into)
    }
    fn set_memory_headroom(&mut self, bytes: usize) {
        ServiceState::set_memory_headroom(self, bytes)
    }
    fn publish_metrics(&mut self) {
        ServiceState::publish_metrics(self)
    }
    fn set_waker(&mut self, wake: uaring_core::address_space::change::WakeFn) {
        ServiceState::set_waker(self, wake)
    }
    fn replace_security(&mut self, provider: uaring_core::secure_channel::SecurityProvider) {
        ServiceState::set_security(self, provider)
    }
    fn policy_certificate(&self, uri: &str) -> Option<Vec<u8>> {
        ServiceState::security(self)
            .policy(uri)
            .and_then(|p| p.local_certificate().map(<[u8]>::to_vec))
    }

    fn take_messages(&mut self, into: &mut Vec<(usize, ShardMessage)>) {
        ServiceState::take_messages(self, into)
    }
    fn on_message(&mut self, msg: ShardMessage, now: Now) {
        ServiceState::on_message(self, msg, now)
    }
}

/// What every shard shares, built once at start.
pub struct ServerSetup {
    pub shared: Arc<ServerShared>,
    pub limits: TransportLimits,
    pub contract: bool,
}

/// Reads core's `ServerConfig` from the non-runtime part of the configuration
/// file. `--contract` turns on contract mode (ApplicationUri
/// `urn:o6:benchmark:server`) and, unless the file sets them, the contract's
/// operation limits.
pub fn server_config(server: &toml::Table, contract: bool) -> Result<ServerConfig, String> {
    let mut table = server.clone();
    // `[[nodesets]]` is read by [`nodeset_files`], not by core.
    table.remove("nodesets");
    let mut config: ServerConfig = table
        .try_into()
        .map_err(|e: toml::de::Error| e.to_string())?;
    if contract {
        let base = ServerConfig::contract();
        config.application.contract_mode = true;
        if !server.contains_key("operation_limits") {
            config.operation_limits = base.operation_limits;
        }
    }
    config.validate()?;
    Ok(config)
}

/// One `[[nodesets]]` entry: a NodeSet2 XML file loaded into the address space at start.
#[derive(Clone, Debug, serde::Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NodeSetEntry {
    /// Path of the file (relative paths: to the working directory).
    pub file: PathBuf,
}

/// The files of the `[[nodesets]]` entries.
pub fn nodeset_files(server: &toml::Table) -> Result<Vec<PathBuf>, String> {
    match server.get("nodesets") {
        None => Ok(Vec::new()),
        Some(v) => {
            let entries: Vec<NodeSetEntry> = v
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| format!("[[nodesets]]: {e}"))?;
            Ok(entries.into_iter().map(|e| e.file).collect())
        }
    }
}

/// Builds the shared server (configuration, address space) with the `[[nodesets]]` of
/// the file and `extra_nodesets` (`--nodeset`) loaded.
pub fn build(server: &toml::Table, contract: bool) -> Result<Arc<ServerSetup>, String> {
    build_with_nodesets(server, contract, &[])
}

/// [`build`] with more NodeSet files (from the command line) after the configured ones.
pub fn build_with_nodesets(
    server: &toml::Table,
    contract: bool,
    extra_nodesets: &[PathBuf],
) -> Result<Arc<ServerSetup>, String> {
    build_with(
        server,
        contract,
        extra_nodesets,
        &mut |_| Ok(()),
        None,
        false,
    )
}

/// [`build_with_nodesets`], then `extend` adds the application's nodes (errors come back
/// prefixed `address space: `). `keeps_history`: a history store is open, so a NodeSet's
/// Historizing Variables and history notifiers are kept as the file gives them (`history`
/// may answer HistoryRead without one: a gateway's forwarding).
pub fn build_with(
    server: &toml::Table,
    contract: bool,
    extra_nodesets: &[PathBuf],
    extend: &mut uaring_core::address_space::build::Extend<'_>,
    history: Option<Arc<dyn uaring_core::history::HistoryBackend>>,
    keeps_history: bool,
) -> Result<Arc<ServerSetup>, String> {
    let config = server_config(server, contract)?;
    let mut files = nodeset_files(server)?;
    files.extend_from_slice(extra_nodesets);
    let uri = config.application.effective_application_uri().to_string();
    let mut models = Vec::new();
    let shared = ServerShared::new_with_history(
        config,
        crate::clock::now(),
        &mut |b| {
            if !files.is_empty() {
                models = uaring_nodeset::load_files(b, &files, keeps_history)
                    .map_err(|e| format!("NodeSet: {e}"))?;
            }
            extend(b).map_err(|e| format!("address space: {e}"))
        },
        history,
    )?;
    for m in &models {
        tracing::info!(
            model = %m.uri,
            version = m.version.as_deref().unwrap_or("-"),
            namespace = m.namespace_index,
            nodes = m.nodes,
            file = %m.file.display(),
            "companion model loaded"
        );
    }
    tracing::info!(application_uri = %uri, "server configuration loaded");
    let limits = shared.config.transport;
    Ok(Arc::new(ServerSetup {
        shared,
        limits,
        contract,
    }))
}

/// The handler of each shard.
pub type ServerHandler = UaHandler<ServiceState>;

/// The handler of shard `shard` of `shards` (an ActivateSession of a session another of
/// them owns moves its connection there).
pub fn make_handler(
    setup: &Arc<ServerSetup>,
    shard: usize,
    shards: usize,
) -> Result<ServerHandler, String> {
    if shard >= MAX_SHARDS {
        return Err(format!("at most {MAX_SHARDS} shards are supported"));
    }
    // Each shard's nonces and session tokens come from its own ChaCha20, seeded by the OS.
    let random = crate::random::os_seeded().map_err(|e| e.to_string())?;
    Ok(UaHandler::new(
        ServiceState::new(setup.shared.clone(), shard, Box::new(random))
            .with_transport_limits(setup.limits)
            .with_shard_count(shards),
    ))
}
