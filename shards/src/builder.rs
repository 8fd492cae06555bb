//! [`Server::builder`] → [`ServerBuilder`] → [`ServerBuilder::start`] → [`ServerHandle`]:
//! the whole start-up of `uaring serve` (configuration, address space, security, the
//! handshake pool, the shards, metrics) as a library, and the running server's handle.
//!
//! The `uaring` binary is this API's first user: `uaring serve` is a builder filled from the
//! command line and [`ServerHandle::run_until_signal`].

use std::io::Write as _;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use uaring_core::events::{type_chain, Event, EventField};
use uaring_core::roles::RolePermissions;
use uaring_core::shared::ServerShared;
use uaring_core::{LocalizedText, NodeId, QualifiedName, UaString, Variant};

use crate::config::{FileConfig, IoBackend};
use crate::error::Error;
use crate::nodes::{
    Alarm, AlarmDef, Bindings, Def, EventTypeDef, MethodDef, Namespace, NamespaceWriteHook,
    NodeRef, ObjectDef, Variable, VariableDef,
};
use crate::runtime::{self, RuntimeOptions};
use crate::{stats, ua_handler};
use uaring_core::address_space::app::{AsyncWrite, WriteInfo};

/// The configuration used when none is given (the same as `uaring serve` without `--config`).
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// Entry point of the library: see [`Server::builder`].
pub struct Server;

impl Server {
    /// A builder with the embedded default configuration (listening on 0.0.0.0:4840, one
    /// shard per allowed CPU, security None and Basic256Sha256, anonymous read-write).
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }
}

/// Collects configuration and node definitions; [`ServerBuilder::start`] builds the address
/// space once and starts the shards.
pub struct ServerBuilder {
    file: Result<FileConfig, Error>,
    config_path: Option<PathBuf>,
    contract: bool,
    demo: bool,
    pki: Option<PathBuf>,
    accept_all_client_certs: bool,
    nodesets: Vec<PathBuf>,
    defs: Vec<Def>,
    /// Where the Variable handles find their nodes (a slot per [`Def::Variable`]).
    bindings: Arc<Bindings>,
    variables: u32,
    events: Events,
    workers: Option<crate::workers::Workers>,
    worker_threads: usize,
    worker_queue: usize,
    /// Servers to mirror besides the file's `[[gateway.servers]]` ([`ServerBuilder::gateway`]).
    gateway_servers: Vec<crate::gateway::ServerConfig>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder::new()
    }
}

impl ServerBuilder {
    fn new() -> ServerBuilder {
        ServerBuilder {
            file: FileConfig::parse(DEFAULT_CONFIG).map_err(Error::Config),
            config_path: None,
            contract: false,
            demo: false,
            pki: None,
            accept_all_client_certs: false,
            nodesets: Vec::new(),
            defs: Vec::new(),
            bindings: Arc::new(Bindings::default()),
            variables: 0,
            events: Events::default(),
            workers: None,
            worker_threads: 2,
            worker_queue: 64,
            gateway_servers: Vec::new(),
        }
    }

    /// The configuration as TOML text (every key in docs/Configuration.md); replaces the
    /// default. An invalid text makes [`ServerBuilder::start`] fail with [`Error::Config`].
    pub fn config_toml(mut self, text: &str) -> Self {
        self.file = FileConfig::parse(text).map_err(Error::Config);
        self
    }

    /// The configuration from a file (re-read for `[log] filter` on SIGHUP by
    /// [`ServerHandle::run_until_signal`]).
    pub fn config_file(mut self, path: impl AsRef<Path>) -> Self {
        let path = path.as_ref();
        self.file = std::fs::read_to_string(path)
            .map_err(|e| Error::Config(format!("cannot read {}: {e}", path.display())))
            .and_then(|t| {
                FileConfig::parse(&t).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
            });
        self.config_path = Some(path.to_path_buf());
        self
    }

    fn edit(mut self, f: impl FnOnce(&mut FileConfig)) -> Self {
        if let Ok(file) = self.file.as_mut() {
            f(file);
        }
        self
    }

    /// The address to listen on (`runtime.listen`; port 0 picks a free one).
    pub fn listen(self, addr: &str) -> Self {
        let addr = addr.to_string();
        self.edit(|f| f.runtime.listen = addr)
    }

    /// The CPUs to run shards on (`runtime.cpus`: `all`, `0-3`, `P:nosmt`, …).
    pub fn cpus(self, expr: &str) -> Self {
        let expr = expr.to_string();
        self.edit(|f| f.runtime.cpus = expr)
    }

    /// The number of shards (`runtime.shards`; 0 = one per selected CPU).
    pub fn shards(self, n: usize) -> Self {
        self.edit(|f| f.runtime.shards = n)
    }

    /// The I/O backend (`runtime.io_backend`).
    pub fn io_backend(self, b: IoBackend) -> Self {
        self.edit(|f| f.runtime.io_backend = b)
    }

    /// How connections are dealt to shards (`runtime.distribution`).
    pub fn distribution(self, d: crate::config::Distribution) -> Self {
        self.edit(|f| f.runtime.distribution = d)
    }

    /// io_uring submission queue entries per shard (`runtime.ring_entries`).
    pub fn ring_entries(self, n: u32) -> Self {
        self.edit(|f| f.runtime.ring_entries = n)
    }

    /// Kernel submission polling (`runtime.sqpoll`: off, per-shard, shared).
    pub fn sqpoll(self, mode: crate::config::Sqpoll) -> Self {
        self.edit(|f| f.runtime.sqpoll = mode)
    }

    /// Where the background threads run (`runtime.background_cpus`: the model writer, the
    /// history store's threads and the method workers; `""` = not pinned).
    pub fn background_cpus(self, expr: &str) -> Self {
        let expr = expr.to_string();
        self.edit(|f| f.runtime.background_cpus = expr)
    }

    /// Where the SQPOLL pollers run (`runtime.sqpoll_cpu`: any, same, sibling, a CPU expression).
    pub fn sqpoll_cpu(self, expr: &str) -> Self {
        let expr = expr.to_string();
        self.edit(|f| f.runtime.sqpoll_cpu = expr)
    }

    /// How long an idle poller polls before it sleeps (`runtime.sqpoll_idle_ms`).
    pub fn sqpoll_idle_ms(self, ms: u32) -> Self {
        self.edit(|f| f.runtime.sqpoll_idle_ms = ms)
    }

    /// Spin-before-sleep of the shards (`runtime.busy_poll_us`; 0 = off).
    pub fn busy_poll_us(self, us: u32) -> Self {
        self.edit(|f| f.runtime.busy_poll_us = us)
    }

    /// Receive bundles in the shards' rings (`runtime.recv_bundles`; Linux 6.10+).
    pub fn recv_bundles(self, on: bool) -> Self {
        self.edit(|f| f.runtime.recv_bundles = on)
    }

    /// Fixed files in the shards' rings (`runtime.fixed_files`).
    pub fn fixed_files(self, on: bool) -> Self {
        self.edit(|f| f.runtime.fixed_files = on)
    }

    /// Zero-copy sends of batches of at least `bytes` (`runtime.zero_copy_send_min`; 0 = off).
    pub fn zero_copy_send_min(self, bytes: u32) -> Self {
        self.edit(|f| f.runtime.zero_copy_send_min = bytes)
    }

    /// Registered send buffers per shard (`runtime.fixed_send_buffers`; even, 0 = off).
    pub fn fixed_send_buffers(self, count: u32) -> Self {
        self.edit(|f| f.runtime.fixed_send_buffers = count)
    }

    /// The size of each registered send buffer (`runtime.fixed_send_buffer_bytes`).
    pub fn fixed_send_buffer_bytes(self, bytes: u32) -> Self {
        self.edit(|f| f.runtime.fixed_send_buffer_bytes = bytes)
    }

    /// NAPI busy polling of the shards' rings, µs (`runtime.napi_busy_poll_us`; 0 = off).
    pub fn napi_busy_poll_us(self, us: u32) -> Self {
        self.edit(|f| f.runtime.napi_busy_poll_us = us)
    }

    /// NAPI busy polling preferred over interrupts (`runtime.napi_prefer_busy_poll`).
    pub fn napi_prefer_busy_poll(self, on: bool) -> Self {
        self.edit(|f| f.runtime.napi_prefer_busy_poll = on)
    }

    /// A client to dial (Reverse Connect, `[[reverse_connect]]`): the server connects to
    /// `entry.url`, sends ReverseHello and keeps `entry.idle_connections` connections waiting
    /// for the client ([`crate::reverse`]). Repeatable; checked by [`ServerBuilder::start`].
    pub fn reverse_connect(self, entry: crate::reverse::ReverseConnectConfig) -> Self {
        self.edit(|f| f.reverse_connect.push(entry))
    }

    /// A server to mirror (the aggregating gateway, docs/Gateway.md): its nodes appear under
    /// `Objects/<entry.name>`, served from one subscription on it. Repeatable, added to the
    /// file's `[[gateway.servers]]`; checked by [`ServerBuilder::start`].
    pub fn gateway(mut self, entry: crate::gateway::ServerConfig) -> Self {
        self.gateway_servers.push(entry);
        self
    }

    /// Writes per-shard statistics as JSON to `path` (`runtime.stats_file`).
    pub fn stats_file(self, path: PathBuf) -> Self {
        self.edit(|f| f.runtime.stats_file = Some(path))
    }

    /// `[log] filter` of the configuration, if it sets one (the caller installs logging).
    pub fn log_filter(&self) -> Option<String> {
        self.file.as_ref().ok().and_then(|f| f.log.filter.clone())
    }

    /// The PKI directory (`security.pki_dir`; default `./pki`).
    pub fn pki(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pki = Some(dir.into());
        self
    }

    /// Accept every client certificate (benchmarks only; logs a warning).
    pub fn accept_all_client_certs(mut self, on: bool) -> Self {
        self.accept_all_client_certs = on;
        self
    }

    /// Loads a companion model (NodeSet2 XML) after the configuration's `[[nodesets]]`.
    pub fn nodeset(mut self, file: impl Into<PathBuf>) -> Self {
        self.nodesets.push(file.into());
        self
    }

    /// The benchmark contract (`uaring serve --contract`).
    pub fn contract(mut self, on: bool) -> Self {
        self.contract = on;
        self
    }

    /// Serves what `uaring serve` serves in the application namespace besides the
    /// application's own nodes: the Demo folder (`ns=1;s=Demo.*`, with its events and alarm
    /// driven by a thread of its own), the benchmark contract's `BenchmarkValue<i>` and
    /// `BenchmarkArray<N>` variables, or the `--counters` variables — configured by the keys
    /// `application.demo_namespace`, `benchmark_value_count`, `benchmark_array_sizes`,
    /// `counters` and `events.demo_rate_per_s` (docs/Configuration.md; [`crate::content`]).
    /// Off by default: a library server's namespace 1 holds only what the application adds,
    /// and those keys in its configuration are an error.
    pub fn demo(mut self, on: bool) -> Self {
        self.demo = on;
        self
    }

    /// Sets a key of the server's configuration (`section`, `key`) to a TOML value, as the
    /// file would (e.g. `("application", "counters", 1000.into())`).
    pub fn set(self, section: &str, key: &str, value: toml::Value) -> Self {
        let (section, key) = (section.to_string(), key.to_string());
        self.edit(move |f| {
            let t = f
                .server
                .entry(section)
                .or_insert_with(|| toml::Value::Table(Default::default()));
            if let Some(t) = t.as_table_mut() {
                t.insert(key, value);
            }
        })
    }

    /// A namespace of the application (added to the NamespaceArray at the start).
    pub fn namespace(&mut self, uri: &str) -> Namespace {
        Namespace::new(uri)
    }

    /// Adds an Object (a folder or an instance of an ObjectType).
    pub fn add_object(&mut self, def: ObjectDef) -> NodeRef {
        let id = def.id().clone();
        self.defs.push(Def::Object(def));
        id
    }

    /// Adds an event type (an ObjectType below BaseEventType with its own fields).
    pub fn add_event_type(&mut self, def: EventTypeDef) -> NodeRef {
        let id = def.id().clone();
        self.defs.push(Def::EventType(def));
        id
    }

    /// Adds a folder `id` named `name` organized under `parent`.
    pub fn add_folder(&mut self, id: NodeRef, name: &str, parent: &NodeRef) -> NodeRef {
        self.add_object(ObjectDef::folder(id, name).organized_by(parent))
    }

    /// Adds a Variable; the handle pushes its values once the server runs.
    pub fn add_variable(&mut self, def: VariableDef) -> Variable {
        let slot = self.variables;
        self.variables += 1;
        self.defs.push(Def::Variable(def, slot));
        Variable::new(self.bindings.clone(), slot)
    }

    /// Called on the shard for every client Write of the Value of a Variable in namespace
    /// `ns` that has no write hook of its own (added from code or imported from a NodeSet
    /// alike), before the value is stored: `Ok` accepts, `Err(status)` rejects with that
    /// status. It makes no Variable writable (its AccessLevel decides). One hook per
    /// namespace: a later [`ServerBuilder::on_write_in`] or
    /// [`ServerBuilder::on_write_async_in`] for it replaces this one.
    pub fn on_write_in(
        &mut self,
        ns: &Namespace,
        hook: impl Fn(&WriteInfo<'_>) -> Result<(), uaring_core::StatusCode> + Send + Sync + 'static,
    ) {
        self.defs.push(Def::NamespaceWriteHook(
            ns.clone(),
            NamespaceWriteHook::Quick(Arc::new(hook)),
        ));
    }

    /// Like [`VariableDef::on_write_async`] for every Variable of namespace `ns` with a
    /// stored value and no write hook of its own: the Write is answered when the application
    /// completes the [`AsyncWrite`] (`Good` stores the value), BadTimeout after `timeout_ms`.
    /// One hook per namespace, as [`ServerBuilder::on_write_in`].
    pub fn on_write_async_in(
        &mut self,
        ns: &Namespace,
        timeout_ms: u32,
        start: impl Fn(&WriteInfo<'_>, AsyncWrite) + Send + Sync + 'static,
    ) {
        self.defs.push(Def::NamespaceWriteHook(
            ns.clone(),
            NamespaceWriteHook::Async(uaring_core::address_space::app::AsyncWriteHook {
                start: Arc::new(start),
                timeout_ms: timeout_ms.max(1),
            }),
        ));
    }

    /// Sets the RolePermissions of a node (added from code, imported from a NodeSet or of
    /// namespace 0): what each well-known role may do on it (Part 3 §8.55). They replace
    /// the server's default rule for this node — every user browses, reads, receives events
    /// and calls; Operator, Engineer, Supervisor, ConfigureAdmin and SecurityAdmin also
    /// write — and the namespace's default: a role not listed may do nothing here (it does
    /// not even see the node in Browse). The permissions are checked on every operation;
    /// UserAccessLevel, UserExecutable and UserRolePermissions follow them. Which roles a
    /// user has is configured in `[[users]] roles` (docs/Security.md). A node unknown at
    /// [`ServerBuilder::start`] is an [`Error::AddressSpace`].
    pub fn role_permissions(&mut self, node: &NodeRef, permissions: RolePermissions) {
        self.defs
            .push(Def::RolePermissions(node.clone(), permissions));
    }

    /// The default RolePermissions of namespace `ns`: they apply to each of its nodes without
    /// [`ServerBuilder::role_permissions`] of its own. Setting them again replaces them.
    pub fn role_permissions_in(&mut self, ns: &Namespace, permissions: RolePermissions) {
        self.defs
            .push(Def::NamespaceRolePermissions(ns.clone(), permissions));
    }

    /// A handle that raises events from any thread once the server runs (for method
    /// handlers and application threads set up before the start).
    pub fn events(&self) -> Events {
        self.events.clone()
    }

    /// Threads and queue depth of the worker pool for slow methods (default 2 and 64); set
    /// before the first [`ServerBuilder::workers`].
    pub fn worker_threads(mut self, threads: usize, queue_depth: usize) -> Self {
        self.worker_threads = threads.max(1);
        self.worker_queue = queue_depth.max(1);
        self
    }

    /// The worker pool for [`MethodDef::on_pool`] (started at the first call).
    pub fn workers(&mut self) -> Result<crate::workers::Workers, Error> {
        if self.workers.is_none() {
            let saved = mask_signals();
            let w = crate::workers::Workers::start(self.worker_threads, self.worker_queue);
            restore_signals(&saved);
            self.workers = Some(w.map_err(|e| Error::Start(format!("worker pool: {e}")))?);
        }
        self.workers.clone().ok_or(Error::NotStarted)
    }

    /// Adds an alarm; the handle drives it once the server runs.
    pub fn add_alarm(&mut self, def: AlarmDef) -> Alarm {
        let handle = Alarm::default();
        self.defs.push(Def::Alarm(def, handle.clone()));
        handle
    }

    /// Adds a Method with its handler.
    pub fn add_method(&mut self, def: MethodDef) {
        self.defs.push(Def::Method(def));
    }

    /// Adds a forward reference `from → to` of type `reference_type` (its inverse is added too).
    pub fn add_reference(&mut self, from: &NodeRef, reference_type: NodeRef, to: &NodeRef) {
        self.defs.push(Def::Reference {
            from: from.clone(),
            reference_type,
            to: to.clone(),
        });
    }

    /// Builds the address space, sets up security and starts the shards. Returns once every
    /// shard accepts connections.
    pub fn start(self) -> Result<ServerHandle, Error> {
        // The runtime's threads (shards, handshake helpers, metrics) never take the signals
        // `run_until_signal` handles; the caller's own mask is left as it was.
        let saved = mask_signals();
        let r = self.start_masked();
        restore_signals(&saved);
        r
    }

    fn start_masked(mut self) -> Result<ServerHandle, Error> {
        let demo = self.add_content()?;
        // Push certificate management's methods run on the worker pool.
        let push_wanted = self.file.as_ref().is_ok_and(|f| {
            f.server
                .get("push")
                .and_then(|p| p.get("enabled"))
                .and_then(|v| v.as_bool())
                .unwrap_or(true)
        });
        let push_workers = if push_wanted {
            Some(self.workers()?)
        } else {
            None
        };
        let ServerBuilder {
            file,
            config_path,
            contract,
            pki,
            accept_all_client_certs,
            nodesets,
            defs,
            bindings,
            variables,
            events,
            gateway_servers,
            workers,
            ..
        } = self;
        let mut file = file?;
        file.runtime.validate().map_err(Error::Config)?;
        crate::reverse::validate_all(&file.reverse_connect).map_err(Error::Config)?;
        let listen = resolve_listen(&file.runtime.listen)?;
        let (cpus, cpu_desc) = resolve_cpus(&file.runtime.cpus)?;
        let background = match file.runtime.background_cpus.trim() {
            "" => crate::background::BackgroundCpus::any(),
            expr => {
                let (b, desc) = resolve_cpus(expr).map_err(|e| match e {
                    Error::Config(m) => Error::Config(format!("runtime.background_cpus: {m}")),
                    e => e,
                })?;
                tracing::info!(
                    "background threads (model writer, history, method workers) on {desc}"
                );
                crate::background::BackgroundCpus::of(&b)
            }
        };
        if let Some(w) = &workers {
            w.place(&background);
        }
        let (sec_config, users) =
            crate::security::take_config(&mut file.server).map_err(Error::Config)?;
        let handshake =
            crate::handshake_pool::take_config(&mut file.server).map_err(Error::Config)?;
        let mut history =
            crate::history::serve::take_config(&mut file.server).map_err(Error::Config)?;
        history.cpus = background.clone();
        let push_config = crate::push::take_config(&mut file.server).map_err(Error::Config)?;
        let mut gateway_cfg =
            crate::gateway::config::take_config(&mut file.server).map_err(Error::Config)?;
        gateway_cfg.servers.extend(gateway_servers);
        gateway_cfg.validate().map_err(Error::Config)?;
        if gateway_cfg.is_on() {
            // Room in the address space for what the gateway mirrors.
            crate::gateway::reserve_nodes(&mut file.server, &gateway_cfg).map_err(Error::Config)?;
        }
        // Push management replaces the RSA certificate: only with an RSA policy configured.
        let (_, rsa_policies, _) =
            crate::security::check(&sec_config, &users).map_err(Error::Security)?;
        let push = match push_workers {
            Some(w) if push_config.enabled && !rsa_policies.is_empty() => {
                let core = crate::ua_handler::server_config(&file.server, contract)
                    .map_err(Error::Config)?;
                let uri = core.application.effective_application_uri().to_string();
                Some((crate::push::PushManager::new(push_config, &uri), w))
            }
            _ => None,
        };
        let historian = if history.enabled.unwrap_or(
            !history.nodes.is_empty()
                || !history.sampled.is_empty()
                || !history.event_notifiers.is_empty()
                || defs.iter().any(|d| d.historizes()),
        ) {
            match crate::history::serve::Historian::open(&history) {
                Ok(h) => Some(h),
                // Asked for: the start fails. On by default (something is historized, no
                // `[history]` said so): the server runs without history and says why.
                Err(e) if history.enabled.is_none() => {
                    tracing::warn!(
                        "history {}: {e}; serving without history (HistoryRead unsupported). Set history.dir to a directory of its own, or history.enabled = true to make this an error",
                        history.location()
                    );
                    None
                }
                Err(e) => {
                    return Err(Error::Start(format!(
                    "history {}: {e} (history.dir, history.backend; history.enabled = false turns it off)",
                    history.location()
                )))
                }
            }
        } else {
            None
        };
        // With a gateway, HistoryRead of mirrored Variables is forwarded; the store (if
        // any) serves the rest (docs/Gateway.md "History").
        let gateway_history = gateway_cfg.is_on().then(|| {
            Arc::new(crate::gateway::history::GatewayHistory::new(
                historian
                    .clone()
                    .map(|h| h as Arc<dyn uaring_core::history::HistoryBackend>),
                gateway_cfg.request_timeout_ms,
                gateway_cfg
                    .servers
                    .iter()
                    .any(|s| s.history && s.history_updates),
            ))
        });
        let mut bound = Vec::new();
        let mut alarms = Vec::new();
        let mut defs = defs;
        let role_identities =
            crate::security::role_identities(&sec_config, &users).map_err(Error::Config)?;
        let setup = ua_handler::build_with(
            &file.server,
            contract,
            &nodesets,
            &mut |b| {
                for (role, rules) in &role_identities {
                    uaring_core::address_space::build::server_object::set_role_identities(
                        b, *role, rules,
                    );
                }
                // Room for the application's nodes at once: the node table and its id
                // index grow once, not at every doubling (a rehash reads every key).
                b.reserve(defs.len());
                let sampled: Vec<(crate::NodeRef, u32)> = defs
                    .iter()
                    .filter_map(|d| d.history_sampled().map(|(id, ms)| (id.clone(), ms)))
                    .collect();
                // Without a store, what the application historizes is built without
                // history: nothing advertises a history nobody keeps.
                for d in defs.drain(..) {
                    d.build(b, &mut bound, &mut alarms, historian.is_some())
                        .map_err(|e| e.to_string())?;
                }
                if let Some(h) = &historian {
                    let mut ids = Vec::with_capacity(sampled.len());
                    for (id, ms) in &sampled {
                        ids.push((id.resolve(b).map_err(|e| e.to_string())?, *ms));
                    }
                    h.sample_nodes(ids);
                }
                if historian.is_some() && !history.nodes.is_empty() {
                    crate::history::serve::historize_nodes(
                        b,
                        &history.nodes,
                        crate::history::serve::Recording::ByChange,
                    )?;
                }
                let sampled: Vec<String> = history
                    .sampled
                    .iter()
                    .flat_map(|s| s.nodes.clone())
                    .collect();
                if historian.is_some() && !sampled.is_empty() {
                    crate::history::serve::historize_nodes(
                        b,
                        &sampled,
                        crate::history::serve::Recording::Sampled,
                    )?;
                }
                if historian.is_some() && !history.event_notifiers.is_empty() {
                    crate::history::serve::historize_notifiers(b, &history.event_notifiers)?;
                }
                if historian.is_some() {
                    // Every Variable historized at start (the application's, a NodeSet's,
                    // `[history] nodes`) gets its HA Configuration.
                    // `[[history.collection]]` entries get HA Configurations of their own.
                    let rules = crate::history::collection::Rules::new(
                        &history.collection,
                        b.namespace_uris(),
                    )?;
                    rules.check_names(b)?;
                    let collections = history
                        .collection
                        .iter()
                        .map(|c| c.collection())
                        .collect::<Result<Vec<_>, _>>()?;
                    uaring_core::history::configuration::add(
                        b,
                        uaring_core::history::aggregate::AggregateConfig::default(),
                        &collections,
                        &|id| rules.entry_of(id),
                    )?;
                }
                if let Some((p, w)) = &push {
                    p.install(b, w)?;
                }
                Ok(())
            },
            match &gateway_history {
                Some(g) => Some(g.clone() as Arc<dyn uaring_core::history::HistoryBackend>),
                None => historian
                    .clone()
                    .map(|h| h as Arc<dyn uaring_core::history::HistoryBackend>),
            },
            historian.is_some(),
        )
        .map_err(|e| match e.strip_prefix("address space: ") {
            Some(rest) => Error::AddressSpace(rest.to_string()),
            None => Error::Config(e),
        })?;
        bindings.bind(&setup.shared, variables as usize, bound)?;
        if let Some(h) = &historian {
            let nodes = h
                .attach(&setup.shared)
                .map_err(|e| Error::Start(format!("history store: {e}")))?;
            tracing::info!(
                nodes,
                at = %history.location(),
                flush_interval_ms = history.flush_interval_ms,
                run_time_max = history.max_run_time_historized,
                "history: {nodes} historized Variables, by change"
            );
        }
        for (alarm, id) in alarms {
            alarm.bind(&setup.shared, &id)?;
        }
        let _ = events.shared.set(setup.shared.clone());
        let sec_args = crate::security::SecurityArgs {
            pki,
            accept_all_client_certs,
            contract,
        };
        let app = &setup.shared.config.application;
        let security = crate::security::build(
            sec_config,
            &users,
            &sec_args,
            app.effective_application_uri(),
            &app.application_name,
            Some(listen.ip()),
        )
        .map(Arc::new)
        .map_err(Error::Security)?;
        tracing::info!("endpoints: {}", security.describe());
        if let Some((p, _)) = &push {
            p.attach(security.clone());
            tracing::info!(
                trust_list_bytes_max = p.config().trust_list_bytes_max,
                "push certificate management: ServerConfiguration served (SecurityAdmin over SignAndEncrypt)"
            );
        }
        let mut opts = RuntimeOptions::from_config(&file.runtime, listen, cpus);
        let shards = opts.shards;
        let shard_cpus: Vec<usize> = (0..shards)
            .filter_map(|i| opts.cpus.get(i % opts.cpus.len().max(1)).copied())
            .collect();
        let topo = uaring_affinity::Topology::system().ok();
        opts.sqpoll_cpus = crate::sqpoll::poller_cpus(
            file.runtime.sqpoll,
            &file.runtime.sqpoll_cpu,
            &shard_cpus,
            topo.as_ref(),
        )
        .map_err(Error::Config)?;
        let helper_cpus = if handshake.cpus.is_empty() {
            Vec::new()
        } else {
            resolve_cpus(&handshake.cpus)
                .map_err(|e| Error::Config(format!("handshake.cpus: {e}")))?
                .0
        };
        let pool = crate::handshake_pool::HandshakePool::start(&handshake, &helper_cpus)
            .map_err(Error::Start)?;
        match &pool {
            Some(p) => tracing::info!(
                threads = p.threads(),
                queue_depth = handshake.queue_depth,
                "handshake pool"
            ),
            None => {
                tracing::info!("handshake work runs inline on the shards (handshake.threads = 0)")
            }
        }
        // The writers' turn (the model writer thread, `ServerHandle::edit`, the gateway), and
        // the model writer that edits the shards' NodeManagement requests off the shards.
        let model_writer = Arc::new(std::sync::Mutex::new(()));
        {
            let queue = setup
                .shared
                .config
                .operation_limits
                .max_node_management_requests_queued as usize;
            let w = crate::workers::ModelWriter::start(queue, model_writer.clone(), background)
                .map_err(|e| Error::Start(format!("model writer thread: {e}")))?;
            setup.shared.model.set_writer(w);
        }
        let make_setup = setup.clone();
        let opts_sqpoll_cpus = opts.sqpoll_cpus.clone();
        let refresher = security.clone();
        let running = runtime::start(opts, move |i| {
            let handler = ua_handler::make_handler(&make_setup, i, shards)?;
            let (provider, watch) = security.shard_security()?;
            let client = pool.as_ref().map(|p| p.client());
            let host = handler
                .host
                .with_security(provider)
                .with_handshake_offload(client.is_some());
            Ok(ua_handler::UaHandler::new(host)
                .with_pool(client)
                .with_identity(Some(watch)))
        })
        .map_err(|e| Error::Start(e.to_string()))?;
        {
            // The shards made their trust states while starting: keep them up to date from a
            // thread of the runtime (no shard rescans a directory).
            let fleet = running.fleet.clone();
            if let Err(e) = refresher.start_pki_refresher(move || fleet.stopping()) {
                running.fleet.stop_all();
                return Err(Error::Start(format!("PKI refresher thread: {e}")));
            }
        }
        let dialer = if file.reverse_connect.is_empty() {
            None
        } else {
            let queues = running.fleet.take_dial_queues().unwrap_or_default();
            let endpoint_url = format!(
                "opc.tcp://{}:{}",
                crate::net::host_name(),
                running.local_addr.port()
            );
            let uri = setup
                .shared
                .config
                .application
                .effective_application_uri()
                .to_owned();
            match crate::reverse::start(
                &file.reverse_connect,
                running.fleet.clone(),
                queues,
                &uri,
                &endpoint_url,
            ) {
                Ok(d) => Some(d),
                Err(e) => {
                    running.fleet.stop_all();
                    let _ = running.join();
                    return Err(Error::Start(format!("reverse connect dialer: {e}")));
                }
            }
        };
        tracing::info!(shards, distribution = %file.runtime.distribution, "shards on {cpu_desc}");
        {
            let (shard, pre) = file.runtime.shard_budgets(shards);
            let mib = |b: usize| b as f64 / (1u64 << 20) as f64;
            tracing::info!(
                "buffer budget: {:.1} MiB in all ({:.1} MiB per shard), of which {:.1} MiB for connections without an activated session ({:.1} MiB per shard)",
                mib(shard * shards),
                mib(shard),
                mib(pre * shards),
                mib(pre)
            );
        }
        match running.backend {
            IoBackend::Uring => tracing::info!(
                ring_entries = running.ring_entries,
                memlock_kib = running.memlock_bytes.div_ceil(1024),
                "io backend {}",
                running.features
            ),
            _ => tracing::info!("io backend epoll"),
        }
        if running.backend == IoBackend::Uring {
            tracing::info!(
                "io modes: sqpoll {}; busy_poll_us {}; fixed_files {}; zero_copy_send_min {}; recv_bundles {}; fixed_send_buffers {}; napi_busy_poll_us {}",
                crate::sqpoll::describe(
                    file.runtime.sqpoll,
                    &opts_sqpoll_cpus,
                    file.runtime.sqpoll_idle_ms
                ),
                if file.runtime.busy_poll_us == 0 {
                    "off".to_string()
                } else {
                    format!(
                        "{} (spin before each sleep, never past the next deadline)",
                        file.runtime.busy_poll_us
                    )
                },
                if file.runtime.fixed_files {
                    format!(
                        "on ({} slots per shard; the table is not locked memory)",
                        file.runtime.max_connections_per_shard
                    )
                } else {
                    "off".to_string()
                },
                if file.runtime.zero_copy_send_min == 0 {
                    "off".to_string()
                } else {
                    format!(
                        "{} (batches of at least this many bytes go out with SEND_ZC; on loopback the kernel copies)",
                        file.runtime.zero_copy_send_min
                    )
                },
                if file.runtime.recv_bundles {
                    format!(
                        "on (one completion for all the {}-byte buffers a receive fills)",
                        file.runtime.recv_buffer_bytes
                    )
                } else {
                    "off".to_string()
                },
                fixed_send_desc(
                    &file.runtime,
                    running.fleet.shards.first().is_some_and(|l| l.modes().fixed_send_plain)
                ),
                napi_desc(&file.runtime, running.local_addr)
            );
        }
        if file.runtime.batch_wait_us > 0 && running.backend == IoBackend::Uring {
            tracing::info!(
                batch_wait_us = file.runtime.batch_wait_us,
                batch_completions = file.runtime.batch_completions,
                "batched waiting on (one min-timeout wait with MIN_TIMEOUT, else a second bounded wait; needs EXT_ARG)"
            );
        }
        let gateway_statuses = crate::gateway::StatusList::new();
        let gateway = if gateway_cfg.is_on() {
            let servers = gateway_cfg.servers.len();
            let host = crate::gateway::Host {
                server: setup.shared.clone(),
                writer: model_writer.clone(),
                own: refresher.current_own(),
                history: gateway_history.clone(),
            };
            match crate::gateway::Gateway::start(gateway_cfg, host, gateway_statuses.clone()) {
                Ok(g) => {
                    tracing::info!(
                        servers,
                        "gateway: mirroring {servers} servers (docs/Gateway.md)"
                    );
                    Some(g)
                }
                Err(e) => {
                    running.fleet.stop_all();
                    let _ = running.join();
                    return Err(Error::Start(format!("gateway: {e}")));
                }
            }
        } else {
            None
        };
        if let Some(addr) = &file.metrics.listen {
            let sources = crate::metrics::Sources {
                shared: setup.shared.clone(),
                fleet: running.fleet.clone(),
                backend: running.backend.to_string(),
                history: historian.clone(),
                reverse: dialer
                    .as_ref()
                    .map(|d| d.targets().to_vec())
                    .unwrap_or_default(),
                gateway: Some(gateway_statuses.clone()),
            };
            match addr
                .parse()
                .map_err(|e| format!("{e}"))
                .and_then(|a| crate::metrics::start(a, sources).map_err(|e| e.to_string()))
            {
                Ok(bound) => tracing::info!("metrics endpoint http://{bound}/metrics"),
                Err(e) => {
                    running.fleet.stop_all();
                    let _ = running.join();
                    return Err(Error::Start(format!("metrics.listen = {addr:?}: {e}")));
                }
            }
        }
        let demo = demo
            .map(crate::content::demo::DemoParts::start)
            .transpose()?;
        Ok(ServerHandle {
            running: Some(running),
            dialer,
            historian,
            demo,
            setup,
            file,
            config_path,
            shards,
            model_writer,
            gateway,
            gateway_statuses,
            security: refresher,
        })
    }

    /// Takes the served content's keys out of the configuration and, with
    /// [`ServerBuilder::demo`], adds the content ([`crate::content`]). Returns the Demo's
    /// driver to start with the server.
    fn add_content(&mut self) -> Result<Option<crate::content::demo::DemoParts>, Error> {
        let Ok(file) = self.file.as_mut() else {
            // The configuration's error is reported by the caller.
            return Ok(None);
        };
        let Some(content) = crate::content::take_config(&mut file.server, self.demo, self.contract)
            .map_err(Error::Config)?
        else {
            return Ok(None);
        };
        // The application namespace's URI, as core will read it.
        let mut app: uaring_core::config::ApplicationConfig = match file.server.get("application") {
            Some(v) => v
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| Error::Config(format!("[application]: {e}")))?,
            None => Default::default(),
        };
        app.contract_mode |= self.contract;
        let uri = app.effective_application_uri().to_string();
        crate::content::install(self, &content, &uri)
    }
}

fn resolve_listen(s: &str) -> Result<SocketAddr, Error> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    s.to_socket_addrs()
        .map_err(|e| Error::Config(format!("listen {s:?}: {e}")))?
        .next()
        .ok_or_else(|| Error::Config(format!("listen {s:?}: no address")))
}

fn resolve_cpus(expr: &str) -> Result<(Vec<usize>, String), Error> {
    match uaring_affinity::Topology::system() {
        Ok(topo) => {
            let cpus = topo
                .resolve(expr)
                .map_err(|e| Error::Config(format!("cpus {expr:?}: {e}")))?;
            if cpus.is_empty() {
                return Err(Error::Config(format!("cpus {expr:?} selects no CPU")));
            }
            let desc = topo.describe(&cpus);
            Ok((cpus, desc))
        }
        Err(e) => {
            // No sysfs topology (containers): fall back to the affinity mask.
            tracing::warn!("cannot read the CPU topology ({e}); using the allowed CPUs");
            let cpus = uaring_affinity::allowed_cpus()
                .map_err(|e| Error::Start(format!("sched_getaffinity: {e}")))?;
            let desc = format!("CPUs {cpus:?}");
            Ok((cpus, desc))
        }
    }
}

/// An event to raise ([`ServerHandle::raise_event`]).
pub struct EventDef {
    event_type: NodeRef,
    source: NodeRef,
    message: String,
    severity: u16,
    fields: Vec<(Vec<(NodeRef, String)>, Variant)>,
}

impl EventDef {
    /// An event of `event_type` (BaseEventType `i=2041` or any subtype in the address space)
    /// from `source`, with its Message and Severity (1..=1000).
    pub fn new(event_type: NodeRef, source: &NodeRef, message: &str, severity: u16) -> EventDef {
        EventDef {
            event_type,
            source: source.clone(),
            message: message.to_string(),
            severity,
            fields: Vec::new(),
        }
    }

    /// A type-specific field by its browse path of namespace-0 names (`"A/B"`).
    pub fn field_ns0(mut self, path: &str, value: impl Into<Variant>) -> Self {
        let path = path
            .split('/')
            .map(|p| (NodeRef::ns0(0), p.to_string()))
            .collect();
        self.fields.push((path, value.into()));
        self
    }

    /// A type-specific field whose browse names are in `namespace` (an event type of the
    /// application or a companion model).
    pub fn field(mut self, namespace: &Namespace, path: &str, value: impl Into<Variant>) -> Self {
        let path = path
            .split('/')
            .map(|p| (namespace.num(0), p.to_string()))
            .collect();
        self.fields.push((path, value.into()));
        self
    }
}

/// A running server. Dropping it stops the server (like [`ServerHandle::shutdown`]).
pub struct ServerHandle {
    running: Option<runtime::Running>,
    /// The Reverse Connect dialer (`[[reverse_connect]]`); joined after the shards stop.
    dialer: Option<crate::reverse::Dialer>,
    /// The history store ([`crate::VariableDef::historize`], `[history]`); flushed and
    /// closed after the shards.
    historian: Option<Arc<crate::history::serve::Historian>>,
    /// The Demo's thread ([`ServerBuilder::demo`]); stopped before the shards.
    demo: Option<crate::content::DemoDriver>,
    setup: Arc<ua_handler::ServerSetup>,
    file: FileConfig,
    config_path: Option<PathBuf>,
    shards: usize,
    /// Takes the library's run-time edits one at a time ([`ServerHandle::edit`]; off the
    /// shards, which never wait for it), and the gateway's.
    model_writer: Arc<std::sync::Mutex<()>>,
    /// The aggregating gateway (`[gateway]`, docs/Gateway.md); stopped before the shards.
    gateway: Option<crate::gateway::Gateway>,
    /// The gateway's status list (the metrics read it), also for a gateway a reload starts.
    gateway_statuses: crate::gateway::StatusList,
    /// The endpoints' security (the own certificate a gateway started by a reload uses).
    security: Arc<crate::security::SecuritySetup>,
}

impl ServerHandle {
    /// The address the server listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.running
            .as_ref()
            .map_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)), |r| r.local_addr)
    }

    /// `opc.tcp://HOST:PORT` of [`ServerHandle::local_addr`].
    pub fn endpoint_url(&self) -> String {
        format!("opc.tcp://{}", self.local_addr())
    }

    /// The number of shards.
    pub fn shards(&self) -> usize {
        self.shards
    }

    /// The shared server state (configuration, address space).
    pub fn shared(&self) -> &Arc<ServerShared> {
        &self.setup.shared
    }

    /// The index of a namespace URI in the NamespaceArray.
    pub fn namespace_index(&self, uri: &str) -> Option<u16> {
        self.setup.shared.address_space.namespace_index(uri)
    }

    /// A handle to a Variable with a stored value (any namespace), for pushing values.
    pub fn variable(&self, node_id: &NodeId) -> Result<Variable, Error> {
        Variable::of(&self.setup.shared, node_id)
    }

    /// The embedded history store (its statistics: [`crate::history::Store::stats`]), when
    /// the server has one (`[history]`, [`crate::VariableDef::historize`]; `None` with
    /// `backend = "postgres"`: see [`ServerHandle::history_stats`]).
    pub fn history_store(&self) -> Option<Arc<crate::history::Store>> {
        self.historian.as_ref().and_then(|h| h.store().cloned())
    }

    /// The history backend's counters (the embedded store's or the database's), when the
    /// server keeps history.
    pub fn history_stats(&self) -> Option<crate::history::StoreStats> {
        self.historian.as_ref().map(|h| h.stats())
    }

    /// The PostgreSQL history backend's own counters (up or away, connects, reconnects,
    /// errors), when that is the backend.
    pub fn history_database(&self) -> Option<crate::history::postgres::PgStats> {
        self.historian
            .as_ref()
            .and_then(|h| h.postgres().map(|p| p.pg_stats()))
    }

    /// Raises an event from any thread: every event monitored item on every shard whose
    /// notifier the event is reported on (the Server object, the source and the event
    /// notifiers above it) and whose filter selects it receives it.
    pub fn raise_event(&self, def: EventDef) -> Result<(), Error> {
        raise(&self.setup.shared, def)
    }

    /// Changes the address space while the server runs, from any thread: `f` adds and
    /// removes nodes and references on an [`Edit`](uaring_core::address_space::edit::Edit)
    /// of the current version (its errors are Part 4 statuses), and the result is published
    /// as one new version that every shard takes at its next loop iteration; no shard waits
    /// for it. Raises one GeneralModelChangeEvent. Calls from several threads are taken one
    /// at a time; an edit that raced a client's NodeManagement request is run again on the
    /// newer version, so `f` may run more than once. docs/Embedding.md, "Nodes added and
    /// removed while serving".
    ///
    /// A Variable with a stored value that `f` adds with Historizing true is historized from
    /// the moment it is published, as [`ServerHandle::add_historized_variable`] does; the
    /// edit is refused (nothing published) with `Status(BadNodeAttributesInvalid)` when the
    /// server keeps no history and `Status(BadResourceUnavailable)` past
    /// `history.max_run_time_historized`. The `[history] nodes` patterns are not applied to
    /// nodes built here: set Historizing yourself, and the HistoryRead bit of the
    /// AccessLevel and UserAccessLevel for clients to read the history.
    pub fn edit<R>(
        &self,
        mut f: impl FnMut(
            &mut uaring_core::address_space::edit::Edit,
        ) -> Result<R, uaring_core::StatusCode>,
    ) -> Result<R, Error> {
        let hub = self.setup.shared.address_space.changes().clone();
        let mut reserved: Vec<u32> = Vec::new();
        let release = |reserved: &mut Vec<u32>| {
            if let Some(h) = hub.run_time_history() {
                for _ in reserved.drain(..) {
                    h.release();
                }
            }
        };
        let r = edit_model(&self.setup.shared, &self.model_writer, |e| {
            // Run again after a race: the places of the first run are given back.
            release(&mut reserved);
            let r = f(e)?;
            let added: Vec<u32> = e.added().collect();
            for index in added {
                let asked = e.space().node_at(index).is_some_and(|n| {
                    n.as_variable().is_some_and(|v| v.historizing()) && n.value_cell().is_some()
                });
                if !asked {
                    continue;
                }
                let Some(h) = hub.run_time_history() else {
                    return Err(uaring_core::StatusCode::BadNodeAttributesInvalid);
                };
                if let Err(s) = h.reserve() {
                    release(&mut reserved);
                    return Err(s);
                }
                reserved.push(index);
            }
            Ok(r)
        });
        match r {
            Ok(r) => {
                if let Some(h) = hub.run_time_history() {
                    let space = self.setup.shared.model.load();
                    for index in reserved.drain(..) {
                        h.historize(&space, index);
                    }
                }
                Ok(r)
            }
            Err(s) => {
                release(&mut reserved);
                Err(Error::Status(s))
            }
        }
    }

    /// Adds a Double, Int32, String, … Variable with a stored value under `parent`
    /// (Organizes) while the server runs, and returns its push handle. The DataType follows
    /// from `initial` (a scalar). Errors: `Status(BadNodeIdExists)`,
    /// `Status(BadParentNodeIdInvalid)`, `Status(BadResourceUnavailable)` past
    /// `operation_limits.max_run_time_nodes`.
    ///
    /// A Variable the `[history] nodes` patterns name is historized as
    /// [`ServerHandle::add_historized_variable`] does (without history when
    /// `history.max_run_time_historized` Variables already are).
    pub fn add_variable(
        &self,
        parent: &NodeId,
        node_id: NodeId,
        name: &str,
        initial: impl Into<Variant>,
        writable: bool,
    ) -> Result<Variable, Error> {
        self.add_variable_with(parent, node_id, name, initial.into(), writable, false)
    }

    /// [`ServerHandle::add_variable`], historized from the moment it is added: every value
    /// stored in it (the application's `set`, a client's Write; its initial value first)
    /// goes to the history store through the same ingest queue as the Variables historized
    /// at start, its Historizing attribute is true and its AccessLevel has HistoryRead and
    /// HistoryWrite, so clients read it with HistoryRead. Deleting it
    /// ([`ServerHandle::delete_nodes`]) stops its history; what was stored stays in the
    /// store and is served again if a Variable with the same NodeId is historized later
    /// (docs/History.md, "Variables added while serving").
    ///
    /// Errors, besides those of `add_variable` (nothing is added then):
    /// [`Error::NoHistory`] when the server keeps no history (no store: `[history] enabled
    /// = false`, or nothing historized at start and `enabled` unset), and
    /// [`Error::HistoryLimit`] when `history.max_run_time_historized` Variables added at
    /// run time are historized already.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), uaring::Error> {
    /// use uaring::{NodeId, Server};
    /// let server = Server::builder()
    ///     .listen("127.0.0.1:4840")
    ///     .config_toml("[history]\nenabled = true\ndir = \"/var/lib/boiler/history\"\n")
    ///     .start()?;
    /// let level = server.add_historized_variable(
    ///     &NodeId::ns0(85), // Objects
    ///     NodeId::string(1, "Boiler.Level"),
    ///     "Level",
    ///     0.0,
    ///     false,
    /// )?;
    /// level.set(42.5)?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn add_historized_variable(
        &self,
        parent: &NodeId,
        node_id: NodeId,
        name: &str,
        initial: impl Into<Variant>,
        writable: bool,
    ) -> Result<Variable, Error> {
        self.add_variable_with(parent, node_id, name, initial.into(), writable, true)
    }

    fn add_variable_with(
        &self,
        parent: &NodeId,
        node_id: NodeId,
        name: &str,
        initial: Variant,
        writable: bool,
        historize: bool,
    ) -> Result<Variable, Error> {
        let hub = self.setup.shared.address_space.changes().clone();
        if historize && hub.run_time_history().is_none() {
            return Err(Error::NoHistory);
        }
        let data_type = match initial.scalar_type() {
            Some(t) if (t as u32) <= 25 && t != uaring_core::BuiltinType::Variant => {
                NodeId::ns0(t as u32)
            }
            _ => return Err(Error::TypeMismatch(node_id.to_string())),
        };
        let ns = node_id.namespace;
        // Whether the added Variable took a place among the run-time historized ones (an
        // edit run again after a race gives its place back first).
        let mut reserved = false;
        let release = |reserved: &mut bool| {
            if std::mem::take(reserved) {
                if let Some(h) = hub.run_time_history() {
                    h.release();
                }
            }
        };
        let added = edit_model(&self.setup.shared, &self.model_writer, |e| {
            release(&mut reserved);
            if e.space().node(parent).is_none() {
                return Err(uaring_core::StatusCode::BadParentNodeIdInvalid);
            }
            let mut node = uaring_core::address_space::build::make::variable(
                node_id.clone(),
                uaring_core::QualifiedName::new(ns, name),
                data_type.clone(),
                -1,
                Vec::new(),
                uaring_core::DataValue::new(initial.clone()),
                if writable { 3 } else { 1 },
                0.0,
                Some((parent.clone(), 35)),
            );
            reserved = uaring_core::address_space::change::prepare_historized(
                &hub, &mut node, historize, historize,
            )
            .map_err(|s| match s {
                uaring_core::StatusCode::BadResourceUnavailable => {
                    uaring_core::StatusCode::BadTooManyOperations
                }
                s => s,
            })?;
            let r = e.add_node(node);
            if r.is_err() {
                release(&mut reserved);
            }
            r
        })
        .map_err(Error::Status);
        let index = match added {
            Ok(i) => i,
            Err(Error::Status(uaring_core::StatusCode::BadTooManyOperations)) if historize => {
                return Err(Error::HistoryLimit)
            }
            Err(e) => {
                release(&mut reserved);
                return Err(e);
            }
        };
        if reserved {
            if let Some(h) = hub.run_time_history() {
                h.historize(&self.setup.shared.model.load(), index);
            }
        }
        Variable::of(&self.setup.shared, &node_id)
    }

    /// The aggregating gateway's mirrored servers and their state (empty without
    /// `[gateway]`).
    pub fn gateway_status(&self) -> Vec<Arc<crate::gateway::ServerStatus>> {
        self.gateway
            .as_ref()
            .map(|g| g.status())
            .unwrap_or_default()
    }

    /// The running gateway, when `[gateway]` mirrors servers.
    pub fn gateway(&self) -> Option<&crate::gateway::Gateway> {
        self.gateway.as_ref()
    }

    /// Removes nodes while the server runs (with the references from and to them).
    /// Monitored items on them report BadNodeIdUnknown; their [`Variable`] handles answer
    /// `Status(BadNodeIdUnknown)`. A node that is not there is `Status(BadNodeIdUnknown)`
    /// and nothing is removed.
    pub fn delete_nodes(&self, ids: &[NodeId]) -> Result<(), Error> {
        self.edit(|e| {
            for id in ids {
                e.delete_node(id, true)?;
            }
            Ok(())
        })
    }
}

/// [`ServerHandle::edit`] for the runtime's own writers (the gateway): `f` on an edit of
/// the current version, committed as the next one (run again when another writer's commit
/// came first), one GeneralModelChangeEvent, and the Server object's NamespaceArray updated
/// when the edit added namespaces. `writer` takes the writers one at a time.
pub(crate) fn edit_model<R>(
    shared: &Arc<ServerShared>,
    writer: &std::sync::Mutex<()>,
    mut f: impl FnMut(&mut uaring_core::address_space::edit::Edit) -> Result<R, uaring_core::StatusCode>,
) -> Result<R, uaring_core::StatusCode> {
    let _one_at_a_time = writer.lock().unwrap_or_else(|p| p.into_inner());
    for _ in 0..1000 {
        let mut edit = shared.model.edit();
        let namespaces = edit.space().namespace_uris().len();
        let r = f(&mut edit)?;
        let added_namespaces = edit.space().namespace_uris().len() != namespaces;
        match shared.model.commit(edit) {
            Ok(c) => {
                let space = shared.model.load();
                if added_namespaces {
                    let uris = space.namespace_uris();
                    let array = Variant::array(
                        uaring_core::BuiltinType::String,
                        uris.iter()
                            .map(|u| Variant::String(u.as_str().into()))
                            .collect(),
                    );
                    if let (Some(i), Some(array)) = (
                        space.node_index(&NodeId::ns0(
                            uaring_core::generated::node_ids::Server_NamespaceArray,
                        )),
                        array,
                    ) {
                        let _ = space.store_value(i, uaring_core::DataValue::new(array));
                    }
                }
                let now = uaring_core::Now {
                    mono_ns: crate::clock::mono_ns(),
                    utc: crate::clock::utc_now(),
                };
                uaring_core::events::publish_model_change(&shared.events, &space, &c, now);
                return Ok(r);
            }
            Err(_) => std::thread::yield_now(),
        }
    }
    Err(uaring_core::StatusCode::BadResourceUnavailable)
}

/// Raises events from any thread ([`ServerBuilder::events`]). Cheap to clone.
#[derive(Clone, Default)]
pub struct Events {
    shared: Arc<std::sync::OnceLock<Arc<ServerShared>>>,
}

impl Events {
    /// See [`ServerHandle::raise_event`]. [`Error::NotStarted`] before the start.
    pub fn raise(&self, def: EventDef) -> Result<(), Error> {
        raise(self.shared.get().ok_or(Error::NotStarted)?, def)
    }
}

fn raise(shared: &Arc<ServerShared>, def: EventDef) -> Result<(), Error> {
    let space = &shared.address_space;
    let resolve = |r: &NodeRef| -> Result<NodeId, Error> {
        let ns = match r.namespace_uri() {
            None => 0,
            Some(u) => space
                .namespace_index(u)
                .ok_or_else(|| Error::AddressSpace(format!("unknown namespace {u}")))?,
        };
        Ok(NodeId {
            namespace: ns,
            identifier: r.identifier().clone(),
        })
    };
    let event_type = resolve(&def.event_type)?;
    if !space.is_subtype_of(&event_type, &NodeId::ns0(BASE_EVENT_TYPE)) {
        return Err(Error::AddressSpace(format!(
            "{event_type} is no event type"
        )));
    }
    let source = resolve(&def.source)?;
    let source_node = space
        .node(&source)
        .ok_or_else(|| Error::AddressSpace(format!("unknown source {source}")))?;
    if !(1..=1000).contains(&def.severity) {
        return Err(Error::Status(uaring_core::StatusCode::BadOutOfRange));
    }
    let mut fields = Vec::with_capacity(def.fields.len());
    for (path, value) in def.fields {
        let mut qpath = Vec::with_capacity(path.len());
        for (ns, name) in path {
            let ns = resolve(&ns)?.namespace;
            qpath.push(QualifiedName::new(ns, &name));
        }
        fields.push(EventField { path: qpath, value });
    }
    let now = crate::clock::utc_now();
    let event = Event {
        event_id: shared.events.ids.next(),
        type_chain: type_chain(space, &event_type),
        event_type,
        source_name: UaString::from(source_node.display().text.unwrap_or("")),
        source_node: source.clone(),
        time: now,
        receive_time: now,
        message: LocalizedText::new("", &def.message),
        severity: def.severity,
        condition_id: None,
        fields,
        notifiers: uaring_core::events::notifiers_of(space, &source).into(),
    };
    shared.events.bus.publish(event);
    Ok(())
}

/// A gateway started by a reload (the server had none): the same as at start, but without
/// HistoryRead forwarding (the history backend is fixed at start) and within the
/// `operation_limits.max_run_time_nodes` the server started with.
fn start_late_gateway(
    cfg: crate::gateway::GatewayConfig,
    shared: &Arc<uaring_core::shared::ServerShared>,
    writer: &Arc<std::sync::Mutex<()>>,
    security: &Arc<crate::security::SecuritySetup>,
    statuses: &crate::gateway::StatusList,
) -> Option<crate::gateway::Gateway> {
    let room = shared.config.operation_limits.max_run_time_nodes;
    if cfg.max_nodes > room {
        tracing::warn!(
            "gateway: mirrors are bounded by operation_limits.max_run_time_nodes ({room}, set at start) below gateway.max_nodes ({})",
            cfg.max_nodes
        );
    }
    let servers = cfg.servers.len();
    let host = crate::gateway::Host {
        server: shared.clone(),
        writer: writer.clone(),
        own: security.current_own(),
        history: None,
    };
    match crate::gateway::Gateway::start(cfg, host, statuses.clone()) {
        Ok(g) => {
            tracing::info!(
                servers,
                "gateway: started by the reload, mirroring {servers} servers (without HistoryRead forwarding: docs/Gateway.md)"
            );
            Some(g)
        }
        Err(e) => {
            tracing::warn!("reload: gateway: {e}; not started");
            None
        }
    }
}

impl ServerHandle {
    /// Stops every shard gracefully (connections get ERR BadServerHalted) and waits for them.
    pub fn shutdown(mut self) -> Result<(), Error> {
        self.stop_and_join()
    }

    fn stop_and_join(&mut self) -> Result<(), Error> {
        self.demo.take();
        if let Some(mut g) = self.gateway.take() {
            g.stop();
        }
        let joined = match self.running.take() {
            Some(r) => {
                r.stop();
                r.join().map_err(Error::Runtime)
            }
            None => Ok(()),
        };
        if let Some(d) = self.dialer.take() {
            d.join();
        }
        if let Some(h) = self.historian.take() {
            if let Err(e) = h.shutdown() {
                tracing::warn!("history store: last flush failed: {e}");
            }
        }
        joined
    }

    /// Waits for SIGINT or SIGTERM, then shuts down (exit code 0 for the caller). SIGUSR1
    /// writes the statistics, SIGHUP rescans the trust lists and re-reads `[log] filter` from
    /// the configuration file; with `runtime.stats_file` the statistics are written every
    /// `runtime.stats_interval_ms`. Installs handlers for these four signals (any of the
    /// application's threads may receive them; the runtime's own threads never do).
    pub fn run_until_signal(mut self) -> Result<(), Error> {
        let signals =
            SignalPipe::install().map_err(|e| Error::Start(format!("signal handlers: {e}")))?;
        crate::notify::notify("READY=1");
        let Some(running) = self.running.as_ref() else {
            return Ok(());
        };
        let backend_name = running.backend.to_string();
        let listen_name = running.local_addr.to_string();
        let stats_file = self.file.runtime.stats_file.clone();
        let write_stats = |running: &runtime::Running| {
            if let Some(path) = &stats_file {
                let json = stats::render_json(&running.fleet, &backend_name, &listen_name);
                if let Err(e) = stats::write_atomically(path, &json) {
                    tracing::warn!("cannot write {}: {e}", path.display());
                }
            }
        };
        write_stats(running);
        let interval = Duration::from_millis(self.file.runtime.stats_interval_ms);
        loop {
            match signals.wait(interval) {
                Some(libc::SIGUSR1) => {
                    write_stats(running);
                    tracing::info!(
                        "stats {}",
                        stats::render_json(&running.fleet, &backend_name, &listen_name)
                    );
                }
                Some(libc::SIGHUP) => {
                    let first =
                        crate::cli::reload(self.config_path.as_deref(), self.gateway.as_ref());
                    if let Some(cfg) = first {
                        // The first [[gateway.servers]] of a server started without.
                        self.gateway = start_late_gateway(
                            cfg,
                            &self.setup.shared,
                            &self.model_writer,
                            &self.security,
                            &self.gateway_statuses,
                        );
                    }
                }
                Some(sig) => {
                    tracing::info!(signal = sig, "shutting down");
                    crate::notify::notify("STOPPING=1");
                    break;
                }
                None => write_stats(running),
            }
        }
        let announce = Duration::from_millis(self.file.runtime.shutdown_announce_ms);
        if !announce.is_zero() {
            // Part 5: clients see State Shutdown and SecondsTillShutdown count down while
            // they are still served; a second SIGINT/SIGTERM stops at once.
            let at = crate::clock::mono_ns().saturating_add(announce.as_nanos() as u64);
            self.setup
                .shared
                .address_space
                .server_info()
                .shutdown
                .announce(at);
            tracing::info!(
                ms = announce.as_millis() as u64,
                "announcing the shutdown (ServerStatus.State Shutdown) before it begins"
            );
            let until = std::time::Instant::now() + announce;
            loop {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                match signals.wait(left) {
                    Some(libc::SIGINT) | Some(libc::SIGTERM) => break,
                    _ => {}
                }
            }
        }
        let fleet = running.fleet.clone();
        running.stop();
        write_stats(running);
        let result = self.stop_and_join();
        if let Some(path) = &stats_file {
            let _ = stats::write_atomically(
                path,
                &stats::render_json(&fleet, &backend_name, &listen_name),
            );
        }
        result
    }

    /// Prints `listening on opc.tcp://HOST:PORT` on stdout (the line `uaring serve` and the
    /// examples print once accepting; scripts wait for it).
    pub fn print_listening(&self) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {}", self.endpoint_url());
        let _ = out.flush();
    }
}

impl Drop for ServerHandle {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// BaseEventType (namespace 0).
const BASE_EVENT_TYPE: u32 = 2041;

const HANDLED_SIGNALS: [libc::c_int; 4] =
    [libc::SIGINT, libc::SIGTERM, libc::SIGUSR1, libc::SIGHUP];

/// Blocks the handled signals (and SIGPIPE's default action) on the calling thread; returns
/// the previous mask.
/// Blocks the signals `run_until_signal` handles on the calling thread until it installs its
/// handlers (which unblock them): `uaring serve` prints `listening on` before that, and a
/// SIGTERM sent as soon as the line is read must wait for the handler, not kill the process.
pub(crate) fn block_handled_signals() {
    let _ = mask_signals();
}

fn mask_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on local sets; pthread_sigmask on the calling thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in HANDLED_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

fn restore_signals(old: &libc::sigset_t) {
    // SAFETY: `old` is a mask returned by pthread_sigmask.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old, std::ptr::null_mut()) };
}

/// The write end of the self-pipe the signal handler writes the signal number into.
static SIGNAL_PIPE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE.load(std::sync::atomic::Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) is async-signal-safe; one byte from a local.
        unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
    }
}

/// Signal handlers that write into a pipe, read by the thread that waits.
struct SignalPipe {
    read: std::os::fd::OwnedFd,
}

impl SignalPipe {
    fn install() -> std::io::Result<SignalPipe> {
        use std::os::fd::FromRawFd;
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two fds into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both fds were just created and are owned here (the write end lives for
        // the rest of the process: a late signal must still find it open).
        let read = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[0]) };
        let old = SIGNAL_PIPE.swap(fds[1], std::sync::atomic::Ordering::SeqCst);
        if old >= 0 {
            // SAFETY: the previous write end, no longer published.
            unsafe { libc::close(old) };
        }
        for s in HANDLED_SIGNALS {
            // SAFETY: a zeroed sigaction with a valid handler; SA_RESTART so the
            // application's interrupted system calls are restarted.
            unsafe {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                if libc::sigaction(s, &sa, std::ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
        }
        // This thread may have the signals blocked (a caller of `start` that masked them).
        // SAFETY: unblocking on the calling thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in HANDLED_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
        Ok(SignalPipe { read })
    }

    /// Waits up to `timeout` for a signal; returns it or `None`.
    fn wait(&self, timeout: Duration) -> Option<i32> {
        use std::os::fd::AsRawFd;
        let mut p = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n <= 0 {
            return None;
        }
        let mut b = 0u8;
        // SAFETY: reads one byte into a local from our non-blocking pipe.
        let r = unsafe {
            libc::read(
                self.read.as_raw_fd(),
                &mut b as *mut u8 as *mut libc::c_void,
                1,
            )
        };
        (r == 1).then_some(b as i32)
    }
}

/// The start log's words on the registered send buffers.
fn fixed_send_desc(r: &crate::config::RuntimeConfig, plain: bool) -> String {
    if r.fixed_send_buffers == 0 {
        return "off".to_string();
    }
    format!(
        "{} of {} bytes per shard ({} KiB of locked memory per shard; two per connection: {} \
         connections per shard send from them, the others from ordinary buffers, counted); named by {}",
        r.fixed_send_buffers,
        r.fixed_send_buffer_bytes,
        crate::memlock::fixed_send_bytes(r.fixed_send_buffers, r.fixed_send_buffer_bytes)
            .div_ceil(1024),
        r.fixed_send_buffers / 2,
        if plain {
            "every send"
        } else {
            "zero-copy sends only (this kernel refuses them in plain sends)"
        }
    )
}

/// The start log's words on NAPI busy polling: what it does, and that it does nothing for
/// loopback sockets.
fn napi_desc(r: &crate::config::RuntimeConfig, local: std::net::SocketAddr) -> String {
    if r.napi_busy_poll_us == 0 {
        return "off".to_string();
    }
    let where_ = if local.ip().is_loopback() {
        "listening on loopback, where sockets have no NAPI id: it does nothing here"
    } else {
        "it acts only on sockets that came through a NIC receive queue with a NAPI id, \
         never on loopback ones (napi_sockets / napi_none count which)"
    };
    format!(
        "{} (registered on every ring{}; {where_})",
        r.napi_busy_poll_us,
        if r.napi_prefer_busy_poll {
            ", busy polling preferred over interrupts"
        } else {
            ""
        }
    )
}
