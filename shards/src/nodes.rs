//! Nodes defined from code: namespaces, folders, objects, variables, properties, methods and
//! references, and the [`Variable`] handle through which an application pushes values.
//!
//! Definitions are collected by the [`crate::ServerBuilder`] and added to the address space
//! when the server starts (after namespace 0, the application namespace and the configured
//! NodeSets), so a namespace's index is known only then: a [`NodeRef`] names its namespace by
//! URI. Handles returned before the start are bound to their node at the start.

use std::sync::{Arc, OnceLock};

use uaring_core::address_space::app::{
    AppMethod, ArgDef, AsyncCall, AsyncRead, AsyncSource, AsyncWrite, AsyncWriteHook, MethodCall,
    MethodHandler, ReadFn, WriteHook, WriteInfo,
};
use uaring_core::address_space::build::make::{folder, make_variable};
pub(crate) use uaring_core::address_space::build::NamespaceWriteHook;
use uaring_core::address_space::{
    access_level, ids, AddressSpaceBuilder, AttrsView, ClassAttributes, Node, NodeClass, NodeView,
    RefView, Reference, ValueCell, ValueSource,
};
use uaring_core::roles::RolePermissions;
use uaring_core::shared::ServerShared;
use uaring_core::{
    BuiltinType, DataValue, DateTime, ExpandedNodeId, Identifier, LocalizedText, NodeId, Now,
    QualifiedName, StatusCode, Variant,
};

use crate::error::Error;

/// The namespace a [`NodeRef`] lives in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Ns {
    /// Namespace 0 (`http://opcfoundation.org/UA/`).
    Zero,
    /// A namespace by URI (added to the NamespaceArray when the server starts).
    Uri(Arc<str>),
}

/// A node named before the server starts: a namespace (by URI) and an identifier.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NodeRef {
    ns: Ns,
    id: Identifier,
}

impl NodeRef {
    /// A node of namespace 0, e.g. `NodeRef::ns0(85)` (the Objects folder).
    pub fn ns0(id: u32) -> NodeRef {
        NodeRef {
            ns: Ns::Zero,
            id: Identifier::Numeric(id),
        }
    }

    /// The namespace's index once namespaces are known (added when new).
    fn namespace_in(&self, b: &mut AddressSpaceBuilder) -> Result<u16, Error> {
        match &self.ns {
            Ns::Zero => Ok(0),
            Ns::Uri(u) => b.add_namespace(u).map_err(Error::AddressSpace),
        }
    }

    /// The NodeId once namespaces are known.
    pub(crate) fn resolve(&self, b: &mut AddressSpaceBuilder) -> Result<NodeId, Error> {
        let namespace = match &self.ns {
            Ns::Zero => 0,
            Ns::Uri(u) => b.add_namespace(u).map_err(Error::AddressSpace)?,
        };
        Ok(NodeId {
            namespace,
            identifier: self.id.clone(),
        })
    }

    /// The namespace URI (`None` for namespace 0).
    pub fn namespace_uri(&self) -> Option<&str> {
        match &self.ns {
            Ns::Zero => None,
            Ns::Uri(u) => Some(u),
        }
    }

    /// The identifier.
    pub fn identifier(&self) -> &Identifier {
        &self.id
    }

    fn display(&self) -> String {
        let id = match &self.id {
            Identifier::Numeric(n) => format!("i={n}"),
            Identifier::String(s) => format!("s={s}"),
            Identifier::Guid(g) => format!("g={g:?}"),
            Identifier::ByteString(b) => format!("b={b:?}"),
        };
        match &self.ns {
            Ns::Zero => id,
            Ns::Uri(u) => format!("nsu={u};{id}"),
        }
    }
}

impl std::fmt::Display for NodeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

/// The Objects folder (`i=85`), where application nodes are usually organized.
pub fn objects_folder() -> NodeRef {
    NodeRef::ns0(ids::OBJECTS_FOLDER)
}

/// The Server object (`i=2253`): the default notifier of application events.
pub fn server_object() -> NodeRef {
    NodeRef::ns0(ids::SERVER)
}

/// A namespace of the application, by URI.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Namespace {
    uri: Arc<str>,
}

impl Namespace {
    pub(crate) fn new(uri: &str) -> Namespace {
        Namespace {
            uri: Arc::from(uri),
        }
    }

    /// The namespace URI.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// A node with a string identifier in this namespace (`ns=<i>;s=<id>`).
    pub fn id(&self, id: &str) -> NodeRef {
        NodeRef {
            ns: Ns::Uri(self.uri.clone()),
            id: Identifier::String(id.to_string()),
        }
    }

    /// A node with a numeric identifier in this namespace (`ns=<i>;i=<id>`).
    pub fn num(&self, id: u32) -> NodeRef {
        NodeRef {
            ns: Ns::Uri(self.uri.clone()),
            id: Identifier::Numeric(id),
        }
    }
}

/// How a Variable gets its value.
enum Source {
    /// Stored; pushed by the application ([`Variable::set`]) and written by clients.
    Stored(DataValue),
    /// Computed on the shard at every Read and sample, with the node's state word.
    Computed(ReadFn, u64),
    /// Asked of the application, answered later from any thread.
    Async {
        read: uaring_core::address_space::app::AsyncReadFn,
        max_in_flight: u32,
        timeout_ms: u32,
    },
}

/// Timeout of an asynchronous operation unless set, ms.
pub const DEFAULT_ASYNC_TIMEOUT_MS: u32 = 5_000;
/// Operations of one asynchronous source out at once unless set.
pub const DEFAULT_MAX_IN_FLIGHT: u32 = 64;

/// Read callbacks run, and their time on the shards (the metrics endpoint reports both).
pub(crate) static READ_CALLBACK_CALLS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);
pub(crate) static READ_CALLBACK_NS: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// A Variable (or Property) to add.
pub struct VariableDef {
    id: NodeRef,
    name: String,
    parent: Option<(NodeRef, u32)>,
    data_type: Option<NodeRef>,
    value_rank: Option<i32>,
    array_dimensions: Vec<u32>,
    source: Source,
    writable: bool,
    historizing: bool,
    /// Historized on this sampling interval (ms) instead of by change.
    history_interval_ms: Option<u32>,
    minimum_sampling_interval_ms: f64,
    description: String,
    property: bool,
    on_write: Option<WriteHook>,
    on_write_async: Option<AsyncWriteHook>,
}

impl VariableDef {
    /// A Variable holding `initial` (its DataType is the built-in type of `initial`, its
    /// ValueRank scalar or one-dimensional from it), organized under the Objects folder,
    /// readable and not writable by clients until [`VariableDef::writable`].
    pub fn new(id: NodeRef, name: &str, initial: impl Into<Variant>) -> VariableDef {
        VariableDef {
            id,
            name: name.to_string(),
            parent: Some((objects_folder(), ids::ORGANIZES)),
            data_type: None,
            value_rank: None,
            array_dimensions: Vec::new(),
            source: Source::Stored(DataValue::new(initial.into())),
            writable: false,
            historizing: false,
            history_interval_ms: None,
            minimum_sampling_interval_ms: 0.0,
            description: String::new(),
            property: false,
            on_write: None,
            on_write_async: None,
        }
    }

    /// A Variable whose value a device (or anything slow) gives: every Read and every sample
    /// is handed to `read` on the shard with an [`AsyncRead`], which the application
    /// completes later from any thread (`read` itself must return at once: send the request
    /// to your I/O thread). The Read is answered when it completes; other requests of the
    /// shard are served meanwhile. At most [`VariableDef::max_in_flight`] are out at once
    /// (one more is BadTooManyOperations, a sample is skipped); one not answered within
    /// [`VariableDef::timeout_ms`] is BadTimeout.
    pub fn asynchronous(
        id: NodeRef,
        name: &str,
        data_type: BuiltinType,
        read: impl Fn(AsyncRead) + Send + Sync + 'static,
    ) -> VariableDef {
        let mut v = VariableDef::new(id, name, Variant::Empty);
        v.data_type = Some(NodeRef::ns0(data_type as u32));
        v.source = Source::Async {
            read: Arc::new(read),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            timeout_ms: DEFAULT_ASYNC_TIMEOUT_MS,
        };
        v
    }

    /// Most operations of an asynchronous source out at once (default 64).
    pub fn max_in_flight(mut self, n: u32) -> Self {
        if let Source::Async { max_in_flight, .. } = &mut self.source {
            *max_in_flight = n.max(1);
        }
        self
    }

    /// The timeout of an asynchronous read or write, ms (default 5,000).
    pub fn timeout_ms(mut self, ms: u32) -> Self {
        if let Source::Async { timeout_ms, .. } = &mut self.source {
            *timeout_ms = ms.max(1);
        }
        if let Some(h) = &mut self.on_write_async {
            h.timeout_ms = ms.max(1);
        }
        self
    }

    /// Called on the shard for every client Write of the value with an [`AsyncWrite`] the
    /// application completes later from any thread (forward the value to the device, then
    /// answer): `Good` stores the value (for a stored Variable) and answers Good, anything
    /// else is the operation's result; no answer within the timeout is BadTimeout.
    /// Implies [`VariableDef::writable`].
    pub fn on_write_async(
        mut self,
        start: impl Fn(&WriteInfo<'_>, AsyncWrite) + Send + Sync + 'static,
    ) -> Self {
        self.on_write_async = Some(AsyncWriteHook {
            start: Arc::new(start),
            timeout_ms: DEFAULT_ASYNC_TIMEOUT_MS,
        });
        self.writable = true;
        self
    }

    /// A Variable whose value `read` computes on the shard at every Read and sample (it must
    /// return quickly and never block; its time is counted in the metrics). `data_type` is
    /// its built-in type (scalar unless [`VariableDef::value_rank`] says otherwise).
    pub fn computed(
        id: NodeRef,
        name: &str,
        data_type: BuiltinType,
        read: impl Fn(Now) -> DataValue + Send + Sync + 'static,
    ) -> VariableDef {
        let timed: ReadFn = Arc::new(move |now, _state| {
            let t = std::time::Instant::now();
            let dv = read(now);
            READ_CALLBACK_NS.fetch_add(
                t.elapsed().as_nanos() as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            READ_CALLBACK_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            dv
        });
        VariableDef::computed_with_state(id, name, data_type, timed, 0)
    }

    /// A computed Variable for the many-nodes case: one `read` closure shared by every node
    /// that uses it, each node with its own 64-bit state word (starting at `initial`) kept
    /// inline in the node and handed to `read` (e.g. a per-node counter or a channel
    /// number). Nothing is allocated per node, and a sample touches no memory beyond the
    /// node and what `read` touches. Unlike [`VariableDef::computed`], the calls are not
    /// timed (two clock reads would cost as much as a cheap `read`), so the metrics do not
    /// count them. The same rules apply: quick, never blocking.
    pub fn computed_with_state(
        id: NodeRef,
        name: &str,
        data_type: BuiltinType,
        read: ReadFn,
        initial: u64,
    ) -> VariableDef {
        let mut v = VariableDef::new(id, name, Variant::Empty);
        v.data_type = Some(NodeRef::ns0(data_type as u32));
        v.source = Source::Computed(read, initial);
        v
    }

    /// Under `parent` by HasComponent (an Object's component) instead of Organizes from Objects.
    pub fn component_of(mut self, parent: &NodeRef) -> Self {
        self.parent = Some((parent.clone(), ids::HAS_COMPONENT));
        self
    }

    /// Under `parent` (a folder) by Organizes.
    pub fn organized_by(mut self, parent: &NodeRef) -> Self {
        self.parent = Some((parent.clone(), ids::ORGANIZES));
        self
    }

    /// A Property of `parent` (HasProperty, PropertyType).
    pub fn property_of(mut self, parent: &NodeRef) -> Self {
        self.parent = Some((parent.clone(), ids::HAS_PROPERTY));
        self.property = true;
        self
    }

    /// Explicit DataType (e.g. a structure type of a companion model for ExtensionObject
    /// values, or BaseDataType for a value of any type).
    pub fn data_type(mut self, data_type: NodeRef) -> Self {
        self.data_type = Some(data_type);
        self
    }

    /// Explicit ValueRank (-1 scalar, 1 array, -2 any, …) and ArrayDimensions.
    pub fn value_rank(mut self, rank: i32, array_dimensions: Vec<u32>) -> Self {
        self.value_rank = Some(rank);
        self.array_dimensions = array_dimensions;
        self
    }

    /// Clients may write the value (AccessLevel CurrentWrite, with StatusWrite and
    /// TimestampWrite).
    pub fn writable(mut self, writable: bool) -> Self {
        self.writable = writable;
        self
    }

    /// Keeps the value's history: every value stored in the Variable (a client's Write, an
    /// application's push) goes to the server's history store, and clients read it back
    /// with HistoryRead (raw, at time, processed) and edit it with HistoryUpdate (users whose
    /// roles grant InsertHistory, ModifyHistory, DeleteHistory). Sets Historizing and the
    /// AccessLevel's HistoryRead and HistoryWrite bits. Only a Variable with a stored value
    /// can be historized by change (a computed or asynchronous one is refused at start with
    /// [`Error::AddressSpace`]: historize it with [`VariableDef::historize_every`]).
    /// docs/History.md.
    pub fn historize(mut self) -> Self {
        self.historizing = true;
        self.history_interval_ms = None;
        self
    }

    /// Keeps the value's history on a sampling interval instead of by change: every
    /// `interval_ms` (10 ms to a day, else the start fails with [`Error::AddressSpace`]) the
    /// history sampler thread — never a shard — takes the value (a stored one from its cell,
    /// a computed one by calling its function on the sampler thread, an asynchronous one by
    /// asking the application with an [`AsyncRead`], at most one out at a time and within
    /// [`VariableDef::max_in_flight`]) and stores it when it differs from the last one stored
    /// (status, value or SourceTimestamp; a failed read is stored as its status, once while
    /// it lasts). Otherwise as [`VariableDef::historize`]: Historizing, the history bits, the
    /// store opened by default. docs/History.md "What is historized".
    pub fn historize_every(mut self, interval_ms: u32) -> Self {
        self.historizing = true;
        self.history_interval_ms = Some(interval_ms);
        self
    }

    /// Called on the shard for every client Write of the value, before it is stored: `Ok`
    /// accepts, `Err(status)` rejects with that status. For a computed Variable the hook is
    /// the only thing a Write does. Implies [`VariableDef::writable`].
    pub fn on_write(
        mut self,
        hook: impl Fn(&WriteInfo<'_>) -> Result<(), StatusCode> + Send + Sync + 'static,
    ) -> Self {
        self.on_write = Some(Arc::new(hook));
        self.writable = true;
        self
    }

    /// MinimumSamplingInterval, ms (0: as fast as asked).
    pub fn minimum_sampling_interval_ms(mut self, ms: f64) -> Self {
        self.minimum_sampling_interval_ms = ms;
        self
    }

    /// The Description attribute.
    pub fn description(mut self, text: &str) -> Self {
        self.description = text.to_string();
        self
    }

    /// Adds the node: its index in the address space, and its hooks with its NodeId (no
    /// NodeId is kept for a Variable without hooks: a plant's million sensors copy none).
    /// `keeps_history`: the server has a history store (without one a historized Variable
    /// is built without Historizing and the history bits).
    fn build(
        self,
        b: &mut AddressSpaceBuilder,
        keeps_history: bool,
    ) -> Result<(u32, Option<HooksOf>), Error> {
        // The node's namespace, then the parent's (in this order: a new namespace gets its
        // index here), then the identifier taken (no copy of a string one).
        let namespace = self.id.namespace_in(b)?;
        let parent = resolve_parent(b, &self.id, &self.parent)?;
        let node_id = NodeId {
            namespace,
            identifier: self.id.id,
        };
        let browse_name = QualifiedName {
            namespace_index: node_id.namespace,
            name: self.name.into(),
        };
        // What the node's value comes from, and the DataType, ValueRank and
        // ArrayDimensions that follow from it (a stored value says its own type and rank
        // unless set explicitly; computed and asynchronous ones are BaseDataType scalars
        // unless set).
        let (value_source, data_type, value_rank, dims) = match self.source {
            Source::Stored(dv) => {
                let initial_type = match &dv.value {
                    Variant::Array(a) => Some(a.value_type),
                    v => v.scalar_type(),
                };
                let data_type = match (&self.data_type, initial_type) {
                    (Some(d), _) => d.resolve(b)?,
                    (None, Some(BuiltinType::Variant)) | (None, None) => {
                        NodeId::ns0(ids::BASE_DATA_TYPE)
                    }
                    (None, Some(t)) => NodeId::ns0(t as u32),
                };
                let value_rank = self.value_rank.unwrap_or(dv.value.value_rank());
                let dims = if self.array_dimensions.is_empty() && value_rank == 1 {
                    vec![0]
                } else {
                    self.array_dimensions
                };
                let fixed = match data_type.as_ns0() {
                    Some(n) if value_rank == -1 && n <= 25 => BuiltinType::from_id(n as u8),
                    _ => None,
                };
                let cell = ValueSource::Cell(ValueCell::new(dv, fixed));
                (cell, data_type, value_rank, dims)
            }
            Source::Computed(f, initial) => (
                ValueSource::Computed(uaring_core::address_space::app::Computed::with_state(
                    f, initial,
                )),
                explicit_data_type(&self.data_type, b)?,
                self.value_rank.unwrap_or(-1),
                self.array_dimensions,
            ),
            Source::Async {
                read,
                max_in_flight,
                timeout_ms,
            } => (
                ValueSource::Async(AsyncSource::new(read, max_in_flight, timeout_ms)),
                explicit_data_type(&self.data_type, b)?,
                self.value_rank.unwrap_or(-1),
                self.array_dimensions,
            ),
        };
        if self.historizing
            && self.history_interval_ms.is_none()
            && !matches!(value_source, ValueSource::Cell(_))
        {
            return Err(Error::AddressSpace(format!(
                "{node_id}: only a Variable with a stored value can be historized by change (historize_every samples a computed or asynchronous one)"
            )));
        }
        let bounds = crate::history::serve::SAMPLED_INTERVAL_MIN_MS
            ..=crate::history::serve::SAMPLED_INTERVAL_MAX_MS;
        if let Some(ms) = self.history_interval_ms.filter(|ms| !bounds.contains(ms)) {
            return Err(Error::AddressSpace(format!(
                "{node_id}: historize_every({ms}): the interval is {} to {} ms",
                bounds.start(),
                bounds.end()
            )));
        }
        let historizing = self.historizing && keeps_history;
        let hooked =
            (self.on_write.is_some() || self.on_write_async.is_some()).then(|| node_id.clone());
        let mut node = make_variable(
            node_id,
            browse_name,
            data_type,
            value_rank,
            dims,
            value_source,
            access(self.writable)
                | if historizing {
                    uaring_core::address_space::access_level::HISTORY_READ
                        | uaring_core::address_space::access_level::HISTORY_WRITE
                } else {
                    0
                },
            self.minimum_sampling_interval_ms,
            parent,
        );
        finish_variable(&mut node, self.property, &self.description, historizing);
        let index = b.add_indexed(node).map_err(Error::AddressSpace)?;
        Ok((
            index,
            hooked.map(|id| (id, self.on_write, self.on_write_async)),
        ))
    }
}

/// A Variable's NodeId with its write hooks.
type HooksOf = (NodeId, Option<WriteHook>, Option<AsyncWriteHook>);

/// The DataType set with [`VariableDef::data_type`], else BaseDataType.
fn explicit_data_type(
    data_type: &Option<NodeRef>,
    b: &mut AddressSpaceBuilder,
) -> Result<NodeId, Error> {
    match data_type {
        Some(d) => d.resolve(b),
        None => Ok(NodeId::ns0(ids::BASE_DATA_TYPE)),
    }
}

/// The parent's NodeId, which must be in the address space already (add parents first).
fn resolve_parent(
    b: &mut AddressSpaceBuilder,
    id: &NodeRef,
    parent: &Option<(NodeRef, u32)>,
) -> Result<Option<(NodeId, u32)>, Error> {
    let Some((p, rt)) = parent else {
        return Ok(None);
    };
    let p = p.resolve(b)?;
    if !b.contains(&p) {
        return Err(Error::AddressSpace(format!(
            "{id}: parent {p} is unknown (add it first)"
        )));
    }
    Ok(Some((p, *rt)))
}

fn access(writable: bool) -> u8 {
    let mut a = access_level::CURRENT_READ;
    if writable {
        a |= access_level::CURRENT_WRITE
            | access_level::STATUS_WRITE
            | access_level::TIMESTAMP_WRITE;
    }
    a
}

fn finish_variable(node: &mut Node, property: bool, description: &str, historizing: bool) {
    if property {
        node.set_type_definition(NodeId::ns0(ids::PROPERTY_TYPE));
    }
    if !description.is_empty() {
        node.description = LocalizedText::text(description);
    }
    if let ClassAttributes::Variable(v) = &mut node.attributes {
        v.historizing = historizing;
    }
}

/// An Object to add: a folder, or an instance of an ObjectType.
pub struct ObjectDef {
    id: NodeRef,
    name: String,
    type_definition: NodeRef,
    parent: Option<(NodeRef, u32)>,
    events: bool,
    history: bool,
    description: String,
}

impl ObjectDef {
    /// A FolderType object organized under the Objects folder.
    pub fn folder(id: NodeRef, name: &str) -> ObjectDef {
        ObjectDef {
            id,
            name: name.to_string(),
            type_definition: NodeRef::ns0(ids::FOLDER_TYPE),
            parent: Some((objects_folder(), ids::ORGANIZES)),
            events: false,
            history: false,
            description: String::new(),
        }
    }

    /// An object of type `type_definition` (BaseObjectType `i=58` or any ObjectType of the
    /// address space, e.g. of a companion model loaded with [`crate::ServerBuilder::nodeset`]),
    /// organized under the Objects folder. It gets the type's mandatory children
    /// (ModellingRule Mandatory) — of the type, its supertypes and its interfaces, the most
    /// derived declaration of a BrowseName winning — recursively, with ids
    /// `<id>.<BrowseName>` in the object's namespace; Variables start with the declaration's
    /// value and are stored (push them with [`crate::ServerHandle::variable`]); methods are
    /// the type's.
    pub fn new(id: NodeRef, name: &str, type_definition: NodeRef) -> ObjectDef {
        ObjectDef {
            type_definition,
            ..ObjectDef::folder(id, name)
        }
    }

    /// Under `parent` by Organizes.
    pub fn organized_by(mut self, parent: &NodeRef) -> Self {
        self.parent = Some((parent.clone(), ids::ORGANIZES));
        self
    }

    /// Under `parent` by HasComponent.
    pub fn component_of(mut self, parent: &NodeRef) -> Self {
        self.parent = Some((parent.clone(), ids::HAS_COMPONENT));
        self
    }

    /// The node this definition adds.
    pub fn id(&self) -> &NodeRef {
        &self.id
    }

    /// An event notifier (EventNotifier SubscribeToEvents): clients may subscribe to the
    /// events raised with it as source or notifier.
    pub fn event_notifier(mut self, on: bool) -> Self {
        self.events = on;
        if !on {
            self.history = false;
        }
        self
    }

    /// An event notifier whose events are kept in the history store: its EventNotifier has
    /// SubscribeToEvents, HistoryRead and HistoryWrite, every event raised with it (or a
    /// node below it in the notifier hierarchy) as source is stored as it is reported, and
    /// clients read them with HistoryRead's ReadEventDetails and edit them with
    /// HistoryUpdate (as the Server object's; docs/History.md "What is historized"). Like
    /// [`VariableDef::historize`] it opens the history store (`[history]`) by default;
    /// without one (`history.enabled = false`, or a store that cannot be opened) the
    /// notifier is an event notifier without history.
    pub fn historize_events(mut self) -> Self {
        self.events = true;
        self.history = true;
        self
    }

    /// The Description attribute.
    pub fn description(mut self, text: &str) -> Self {
        self.description = text.to_string();
        self
    }

    /// `keeps_history`: the server has a history store (without one the notifier has no
    /// history bits).
    fn build(self, b: &mut AddressSpaceBuilder, keeps_history: bool) -> Result<NodeId, Error> {
        let node_id = self.id.resolve(b)?;
        let browse_name = QualifiedName::new(node_id.namespace, &self.name);
        let type_def = self.type_definition.resolve(b)?;
        match b.node(&type_def) {
            Some(n) if n.node_class() == NodeClass::ObjectType => {}
            _ => {
                return Err(Error::AddressSpace(format!(
                    "{}: type definition {} is no ObjectType",
                    self.id, type_def
                )))
            }
        }
        let parent = match resolve_parent(b, &self.id, &self.parent)? {
            Some((p, _)) => p,
            None => NodeId::ns0(ids::OBJECTS_FOLDER),
        };
        let mut node = folder(node_id.clone(), browse_name, parent.clone());
        node.references.retain(|r| r.is_forward);
        node.set_type_definition(type_def.clone());
        if let Some((_, rt)) = &self.parent {
            node.references.push(Reference {
                reference_type: NodeId::ns0(*rt),
                is_forward: false,
                target: ExpandedNodeId::local(parent.clone()),
            });
        }
        if self.events {
            use uaring_core::address_space::event_notifier::{
                HISTORY_READ, HISTORY_WRITE, SUBSCRIBE_TO_EVENTS,
            };
            node.attributes = ClassAttributes::Object {
                event_notifier: SUBSCRIBE_TO_EVENTS
                    | if self.history && keeps_history {
                        HISTORY_READ | HISTORY_WRITE
                    } else {
                        0
                    },
            };
        }
        if !self.description.is_empty() {
            node.description = LocalizedText::text(&self.description);
        }
        b.add(node).map_err(Error::AddressSpace)?;
        instantiate_mandatory(b, &type_def, &node_id, 0)?;
        if self.events {
            // The notifier hierarchy: the Server object reaches this notifier (HasNotifier),
            // so Server-level event subscriptions and the notifier walk include it.
            if let Some((p, _)) = &self.parent {
                let p = p.resolve(b)?;
                let _ = b.add_reference(&p, HAS_NOTIFIER, node_id.clone(), true);
            }
        }
        Ok(node_id)
    }
}

/// HasNotifier (namespace 0).
const HAS_NOTIFIER: u32 = 48;
const HAS_MODELLING_RULE: u32 = 37;
const MODELLING_RULE_MANDATORY: u32 = 78;
const HAS_ORDERED_COMPONENT: u32 = 49;
const HAS_INTERFACE: u32 = 17603;

/// The nodes `node` points to by one of `types` (forward), whichever end declared the
/// reference (before the address space is finished, a reference is stored where the NodeSet
/// declared it; the builder's index finds the other end's declarations).
fn targets(b: &AddressSpaceBuilder, node: &NodeId, types: &[u32]) -> Vec<(u32, NodeId)> {
    let mut out = Vec::new();
    let Some(n) = b.node(node) else {
        return out;
    };
    let of = |r: &RefView<'_>| types.iter().copied().find(|&t| r.type_is_ns0(t));
    let at = n.index();
    for r in n.refs() {
        if let (Some(t), true) = (of(&r), r.is_forward()) {
            if let Some(id) = r.target().as_local() {
                out.push((t, id.clone()));
            }
        }
    }
    for n in b.referencing(node) {
        for r in n.refs() {
            if let (Some(t), false) = (of(&r), r.is_forward()) {
                if r.target_node().is_some_and(|x| x.index() == at) {
                    let id = n.node_id();
                    if !out.iter().any(|(_, x)| x == &id) {
                        out.push((t, id));
                    }
                }
            }
        }
    }
    out
}

/// The supertype of a type node.
fn supertype(b: &AddressSpaceBuilder, t: &NodeId) -> Option<NodeId> {
    let n = b.node(t)?;
    for r in n.refs() {
        if r.type_is_ns0(ids::HAS_SUBTYPE) && !r.is_forward() {
            return r.target().as_local().cloned();
        }
    }
    let at = n.index();
    b.referencing(t)
        .into_iter()
        .find(|n| {
            n.refs().any(|r| {
                r.type_is_ns0(ids::HAS_SUBTYPE)
                    && r.is_forward()
                    && r.target_node().is_some_and(|x| x.index() == at)
            })
        })
        .map(|n| n.node_id())
}

fn is_mandatory(b: &AddressSpaceBuilder, decl: &NodeId) -> bool {
    targets(b, decl, &[HAS_MODELLING_RULE])
        .iter()
        .any(|(_, m)| m.as_ns0() == Some(MODELLING_RULE_MANDATORY))
}

/// Adds to `instance` the mandatory children declared by `type_or_decl` (a type: also its
/// supertypes and interfaces; an instance declaration: its own children), recursively.
fn instantiate_mandatory(
    b: &mut AddressSpaceBuilder,
    type_or_decl: &NodeId,
    instance: &NodeId,
    depth: u32,
) -> Result<(), Error> {
    if depth > 8 {
        return Ok(());
    }
    let child_refs = [ids::HAS_COMPONENT, ids::HAS_PROPERTY, HAS_ORDERED_COMPONENT];
    // The declarations: the node's own, then (for types) each supertype's and interface's.
    let mut sources = vec![type_or_decl.clone()];
    if b.node(type_or_decl)
        .is_some_and(|n| n.node_class() == NodeClass::ObjectType)
    {
        let mut t = type_or_decl.clone();
        for _ in 0..32 {
            for (_, i) in targets(b, &t, &[HAS_INTERFACE]) {
                sources.push(i);
            }
            match supertype(b, &t) {
                Some(s) if s.as_ns0() != Some(ids::BASE_OBJECT_TYPE) => {
                    sources.push(s.clone());
                    t = s;
                }
                _ => break,
            }
        }
    }
    let mut seen: Vec<QualifiedName> = Vec::new();
    for src in sources {
        for (rt, decl) in targets(b, &src, &child_refs) {
            let Some(d) = b.node(&decl) else { continue };
            let name = d.browse_name();
            if seen.contains(&name) || !is_mandatory(b, &decl) {
                continue;
            }
            seen.push(name.clone());
            let id = NodeId {
                namespace: instance.namespace,
                identifier: suffixed(&instance.identifier, name.name.as_str()),
            };
            let type_def = d.type_definition().and_then(|t| t.as_local().cloned());
            match (d.node_class(), d.attributes()) {
                (NodeClass::Variable, AttrsView::Variable(v)) => {
                    let value = match v.cell() {
                        Some(c) => c.load(),
                        None => DataValue::default(),
                    };
                    let fixed = match v.data_type().as_ns0() {
                        Some(n) if v.value_rank() == -1 && n <= 25 => BuiltinType::from_id(n as u8),
                        _ => None,
                    };
                    let mut node = make_variable(
                        id.clone(),
                        name,
                        v.data_type().clone(),
                        v.value_rank(),
                        v.array_dimensions().to_vec(),
                        ValueSource::Cell(ValueCell::new(value, fixed)),
                        v.access_level(),
                        v.minimum_sampling_interval(),
                        Some((instance.clone(), rt)),
                    );
                    node.display_name = d.display_name();
                    node.description = d.description();
                    if let Some(t) = type_def {
                        node.set_type_definition(t);
                    }
                    b.add(node).map_err(Error::AddressSpace)?;
                    instantiate_mandatory(b, &decl, &id, depth + 1)?;
                }
                (NodeClass::Object, AttrsView::Object { event_notifier }) => {
                    let display_name = d.display_name();
                    let mut node = folder(id.clone(), name, instance.clone());
                    node.references.retain(|r| r.is_forward);
                    if let Some(t) = type_def {
                        node.set_type_definition(t);
                    }
                    node.references.push(Reference {
                        reference_type: NodeId::ns0(rt),
                        is_forward: false,
                        target: ExpandedNodeId::local(instance.clone()),
                    });
                    node.attributes = ClassAttributes::Object { event_notifier };
                    node.display_name = display_name;
                    b.add(node).map_err(Error::AddressSpace)?;
                    instantiate_mandatory(b, &decl, &id, depth + 1)?;
                }
                // Methods stay the type's (Call finds them through the type definition).
                _ => {}
            }
        }
    }
    Ok(())
}

/// A Method to add, with its typed arguments and its handler.
pub struct MethodDef {
    id: NodeRef,
    name: String,
    parent: NodeRef,
    inputs: Vec<ArgDef>,
    outputs: Vec<ArgDef>,
    needs_write: bool,
    handler: MethodHandler,
}

impl MethodDef {
    /// A method component of the object `parent`, run by `handler` on the shard that serves
    /// the Call (it must return quickly; the server has already checked the arguments
    /// against the declaration). Users with read-only access may not call it unless
    /// [`MethodDef::read_only_users_allowed`].
    pub fn new(
        id: NodeRef,
        name: &str,
        parent: &NodeRef,
        handler: impl Fn(&MethodCall<'_>) -> Result<Vec<Variant>, StatusCode> + Send + Sync + 'static,
    ) -> MethodDef {
        MethodDef {
            id,
            name: name.to_string(),
            parent: parent.clone(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            needs_write: true,
            handler: MethodHandler::Quick(Arc::new(handler)),
        }
    }

    /// A method the application answers later: `start` runs on the shard with an
    /// [`AsyncCall`] (arguments already checked) and must return at once; complete the call
    /// from any thread. No answer within `timeout_ms` is BadTimeout.
    pub fn deferred(
        id: NodeRef,
        name: &str,
        parent: &NodeRef,
        timeout_ms: u32,
        start: impl Fn(AsyncCall) + Send + Sync + 'static,
    ) -> MethodDef {
        let mut m = MethodDef::new(id, name, parent, |_| Err(StatusCode::BadInternalError));
        m.handler = MethodHandler::Deferred {
            start: Arc::new(start),
            timeout_ms: timeout_ms.max(1),
        };
        m
    }

    /// A slow method: `handler` runs on the server's bounded worker pool
    /// ([`crate::ServerBuilder::worker_threads`]), never on a shard; the Call is answered
    /// when it returns (BadTimeout after `timeout_ms`; BadTooManyOperations when the pool's
    /// queue is full).
    pub fn on_pool(
        id: NodeRef,
        name: &str,
        parent: &NodeRef,
        timeout_ms: u32,
        pool: &crate::workers::Workers,
        handler: impl Fn(&AsyncCall) -> Result<Vec<Variant>, StatusCode> + Send + Sync + 'static,
    ) -> MethodDef {
        let handler = Arc::new(handler);
        let pool = pool.clone();
        MethodDef::deferred(id, name, parent, timeout_ms, move |call: AsyncCall| {
            let h = handler.clone();
            if let Err(call) = pool.submit(call, move |c: AsyncCall| {
                let r = h(&c);
                c.complete(r);
            }) {
                call.complete(Err(StatusCode::BadTooManyOperations));
            }
        })
    }

    /// Adds an input argument.
    pub fn input(mut self, arg: ArgDef) -> Self {
        self.inputs.push(arg);
        self
    }

    /// Adds an output argument.
    pub fn output(mut self, arg: ArgDef) -> Self {
        self.outputs.push(arg);
        self
    }

    /// Users with read-only access may call it too (it changes nothing).
    pub fn read_only_users_allowed(mut self) -> Self {
        self.needs_write = false;
        self
    }

    fn build(self, b: &mut AddressSpaceBuilder) -> Result<NodeId, Error> {
        let node_id = self.id.resolve(b)?;
        let parent = self.parent.resolve(b)?;
        if !matches!(
            b.node(&parent).map(|n| n.node_class()),
            Some(NodeClass::Object | NodeClass::ObjectType)
        ) {
            return Err(Error::AddressSpace(format!(
                "{}: parent {parent} is no Object",
                self.id
            )));
        }
        let ns = node_id.namespace;
        b.add(Node {
            generation: 0,
            node_id: node_id.clone(),
            node_class: NodeClass::Method,
            browse_name: QualifiedName::new(ns, &self.name),
            display_name: LocalizedText::text(&self.name),
            description: LocalizedText::default(),
            write_mask: 0,
            user_write_mask: 0,
            references: vec![Reference {
                reference_type: NodeId::ns0(ids::HAS_COMPONENT),
                is_forward: false,
                target: ExpandedNodeId::local(parent),
            }]
            .into(),
            attributes: ClassAttributes::Method {
                executable: true,
                user_executable: true,
            },
        })
        .map_err(Error::AddressSpace)?;
        for (args, prop) in [
            (&self.inputs, "InputArguments"),
            (&self.outputs, "OutputArguments"),
        ] {
            if args.is_empty() {
                continue;
            }
            let values = args
                .iter()
                .map(|a| Variant::ExtensionObject(Box::new(a.to_argument())))
                .collect();
            let value =
                Variant::array(BuiltinType::ExtensionObject, values).unwrap_or(Variant::Empty);
            let prop_id = NodeId {
                namespace: ns,
                identifier: suffixed(&node_id.identifier, prop),
            };
            let mut node = make_variable(
                prop_id,
                QualifiedName::new(0, prop),
                NodeId::ns0(ARGUMENT_DATA_TYPE),
                1,
                vec![0],
                ValueSource::Cell(ValueCell::new(
                    DataValue {
                        value,
                        source_timestamp: Some(DateTime::NULL),
                        ..Default::default()
                    },
                    None,
                )),
                access_level::CURRENT_READ,
                0.0,
                Some((node_id.clone(), ids::HAS_PROPERTY)),
            );
            finish_variable(&mut node, true, "", false);
            b.add(node).map_err(Error::AddressSpace)?;
        }
        b.set_method(
            node_id.clone(),
            AppMethod {
                inputs: self.inputs,
                outputs: self.outputs,
                needs_write: self.needs_write,
                handler: self.handler,
            },
        );
        Ok(node_id)
    }
}

/// The Argument DataType (namespace 0).
const ARGUMENT_DATA_TYPE: u32 = 296;

/// The identifier of a method's argument property: `<id>.<prop>` for string ids, a string
/// id `<n>.<prop>` for the others.
fn suffixed(id: &Identifier, prop: &str) -> Identifier {
    match id {
        Identifier::String(s) => Identifier::String(format!("{s}.{prop}")),
        Identifier::Numeric(n) => Identifier::String(format!("{n}.{prop}")),
        other => Identifier::String(format!("{other:?}.{prop}")),
    }
}

/// An event type of the application: an ObjectType, a subtype of BaseEventType (or of
/// another event type), with its own fields as Properties (ModellingRule Mandatory) — what
/// clients browse to build their EventFilters. Raise its events with [`crate::EventDef`],
/// the fields set with [`crate::EventDef::field`].
pub struct EventTypeDef {
    id: NodeRef,
    name: String,
    supertype: NodeRef,
    fields: Vec<(String, BuiltinType)>,
    description: String,
}

impl EventTypeDef {
    /// An event type `id` named `name`, a subtype of BaseEventType (`i=2041`).
    pub fn new(id: NodeRef, name: &str) -> EventTypeDef {
        EventTypeDef {
            id,
            name: name.to_string(),
            supertype: NodeRef::ns0(BASE_EVENT_TYPE),
            fields: Vec::new(),
            description: String::new(),
        }
    }

    /// A subtype of another event type (of namespace 0, a companion model or the
    /// application) instead of BaseEventType.
    pub fn subtype_of(mut self, supertype: NodeRef) -> Self {
        self.supertype = supertype;
        self
    }

    /// A field of its own: a Property `<id>.<name>` of built-in type `data_type` (scalar),
    /// BrowseName `name` in the type's namespace.
    pub fn field(mut self, name: &str, data_type: BuiltinType) -> Self {
        self.fields.push((name.to_string(), data_type));
        self
    }

    /// The Description attribute.
    pub fn description(mut self, text: &str) -> Self {
        self.description = text.to_string();
        self
    }

    /// The node this definition adds.
    pub fn id(&self) -> &NodeRef {
        &self.id
    }

    fn build(self, b: &mut AddressSpaceBuilder) -> Result<NodeId, Error> {
        let node_id = self.id.resolve(b)?;
        let supertype = self.supertype.resolve(b)?;
        // The supertype is BaseEventType or below it.
        let mut t = Some(supertype.clone());
        for _ in 0..32 {
            match &t {
                Some(x) if x.as_ns0() == Some(BASE_EVENT_TYPE) => break,
                Some(x) => t = self::supertype(b, x),
                None => break,
            }
        }
        if t.and_then(|x| x.as_ns0()) != Some(BASE_EVENT_TYPE) {
            return Err(Error::AddressSpace(format!(
                "{}: supertype {supertype} is no event type (BaseEventType or below it)",
                self.id
            )));
        }
        let name = QualifiedName::new(node_id.namespace, &self.name);
        b.add(Node {
            generation: 0,
            node_id: node_id.clone(),
            node_class: NodeClass::ObjectType,
            display_name: LocalizedText::text(&self.name),
            browse_name: name,
            description: LocalizedText::text(&self.description),
            write_mask: 0,
            user_write_mask: 0,
            references: vec![Reference {
                reference_type: NodeId::ns0(ids::HAS_SUBTYPE),
                is_forward: false,
                target: ExpandedNodeId::local(supertype),
            }]
            .into(),
            attributes: ClassAttributes::ObjectType { is_abstract: false },
        })
        .map_err(Error::AddressSpace)?;
        for (field, data_type) in self.fields {
            let id = NodeId {
                namespace: node_id.namespace,
                identifier: suffixed(&node_id.identifier, &field),
            };
            let mut node = make_variable(
                id,
                QualifiedName::new(node_id.namespace, &field),
                NodeId::ns0(data_type as u32),
                -1,
                Vec::new(),
                ValueSource::Cell(ValueCell::new(DataValue::new(Variant::Empty), None)),
                access(false),
                0.0,
                Some((node_id.clone(), ids::HAS_PROPERTY)),
            );
            finish_variable(&mut node, true, "", false);
            node.references.push(Reference {
                reference_type: NodeId::ns0(HAS_MODELLING_RULE),
                is_forward: true,
                target: ExpandedNodeId::local(NodeId::ns0(MODELLING_RULE_MANDATORY)),
            });
            b.add(node).map_err(Error::AddressSpace)?;
        }
        Ok(node_id)
    }
}

/// BaseEventType (namespace 0).
const BASE_EVENT_TYPE: u32 = 2041;

/// An alarm (an AlarmConditionType instance, Part 9) of the application, driven from any
/// thread through its [`Alarm`] handle; clients acknowledge, confirm, comment, enable and
/// disable it with the type's methods, and the application hears of it through
/// [`AlarmDef::on_action`].
pub struct AlarmDef {
    id: NodeRef,
    name: String,
    source: NodeRef,
    type_def: Option<NodeRef>,
    properties: Vec<(String, Variant)>,
    shelving: Option<uaring_core::address_space::app::Shelving>,
    on_action: Option<uaring_core::address_space::app::ConditionHook>,
}

impl AlarmDef {
    /// An alarm `id` named `name` (its ConditionName), a component of the object `source`
    /// (which has it as condition). Its events are reported on the Server object, the source
    /// (when an event notifier) and the event notifiers above it.
    pub fn new(id: NodeRef, name: &str, source: &NodeRef) -> AlarmDef {
        AlarmDef {
            id,
            name: name.to_string(),
            source: source.clone(),
            type_def: None,
            properties: Vec::new(),
            shelving: None,
            on_action: None,
        }
    }

    /// Gives the alarm a ShelvingState (Part 9 §5.8.17): clients may TimedShelve,
    /// OneShotShelve and Unshelve it (methods of `<alarm>.ShelvingState`, or called on the
    /// alarm), which sets SuppressedOrShelved in its events; a timed shelving ends by itself.
    /// `max_time_shelved`, when given, is its MaxTimeShelved Property: the longest
    /// TimedShelve accepted and the end of a OneShotShelve.
    pub fn shelving(mut self, max_time_shelved: Option<std::time::Duration>) -> Self {
        self.shelving = Some(uaring_core::address_space::app::Shelving {
            max_time_shelved_ms: max_time_shelved.map(|d| d.as_secs_f64() * 1000.0),
        });
        self
    }

    /// Makes the alarm an instance of `type_def`, a subtype of AlarmConditionType: namespace
    /// 0's OffNormalAlarmType (`i=10637`), DiscreteAlarmType (`i=10523`), TripAlarmType
    /// (`i=10751`), SystemOffNormalAlarmType (`i=11753`), LimitAlarmType (`i=2955`),
    /// NonExclusiveLimitAlarmType (`i=9906`) and its level, deviation and rate-of-change
    /// subtypes, or one from a NodeSet. Its events have that EventType, so an `OfType` filter
    /// on the subtype selects them. Each mandatory Property the subtypes declare must be given
    /// with [`AlarmDef::property`]; a type with a mandatory child the library does not
    /// maintain (ExclusiveLimitAlarmType's LimitState state machine) fails the start with a
    /// message naming it. The alarm's behaviour is AlarmConditionType's: the application
    /// decides when it is active (for a limit alarm: when the value crosses a limit).
    pub fn of_type(mut self, type_def: NodeRef) -> Self {
        self.type_def = Some(type_def);
        self
    }

    /// A Property the alarm's type (or a supertype below AlarmConditionType) declares, with
    /// its value, fixed for the server's life: OffNormalAlarmType's `NormalState` (the NodeId
    /// of the variable holding the normal state), LimitAlarmType's `HighHighLimit`,
    /// `HighLimit`, `LowLimit`, `LowLowLimit` (Double). It becomes a Property node of the
    /// alarm and a field of each of its events (select `NormalState` on the subtype). A name
    /// the types do not declare, or a value of another data type, fails the start.
    pub fn property(mut self, name: &str, value: impl Into<Variant>) -> Self {
        self.properties.push((name.to_string(), value.into()));
        self
    }

    /// Called on the shard serving the Call after a client's Acknowledge, Confirm,
    /// AddComment, Enable, Disable, TimedShelve, OneShotShelve or Unshelve took effect (quick;
    /// never block). The end of a timed shelving is no client's action: it is not told.
    pub fn on_action(
        mut self,
        hook: impl Fn(&uaring_core::address_space::app::ConditionActionInfo<'_>) + Send + Sync + 'static,
    ) -> Self {
        self.on_action = Some(Arc::new(hook));
        self
    }

    fn build(self, b: &mut AddressSpaceBuilder) -> Result<NodeId, Error> {
        let node_id = self.id.resolve(b)?;
        let source = self.source.resolve(b)?;
        if !matches!(
            b.node(&source).map(|n| n.node_class()),
            Some(NodeClass::Object)
        ) {
            return Err(Error::AddressSpace(format!(
                "{}: source {source} is no Object",
                self.id
            )));
        }
        let type_def = match &self.type_def {
            Some(t) => t.resolve(b)?,
            None => NodeId::ns0(ALARM_CONDITION_TYPE),
        };
        let properties = alarm_properties(b, &self.id, &type_def, self.properties)?;
        let condition = uaring_core::address_space::app::AppCondition {
            node_id: node_id.clone(),
            name: self.name,
            source,
            type_def,
            properties,
            shelving: self.shelving,
            on_action: self.on_action,
        };
        uaring_core::events::nodes::add_condition_nodes(b, &condition, crate::clock::utc_now())
            .map_err(Error::AddressSpace)?;
        b.set_condition(condition);
        Ok(node_id)
    }
}

/// AlarmConditionType (namespace 0).
const ALARM_CONDITION_TYPE: u32 = 2915;
const UTC_TIME: u32 = 294;
const DURATION: u32 = 290;

/// Checks an alarm's type and Properties against the types between `type_def` and
/// AlarmConditionType, and names the Properties as the types declare them.
fn alarm_properties(
    b: &AddressSpaceBuilder,
    alarm: &NodeRef,
    type_def: &NodeId,
    given: Vec<(String, Variant)>,
) -> Result<Vec<(QualifiedName, Variant)>, Error> {
    let err = |m: String| Error::AddressSpace(format!("{alarm}: {m}"));
    // The subtypes, most derived first, up to (without) AlarmConditionType.
    let mut subtypes = Vec::new();
    let mut t = type_def.clone();
    for _ in 0..32 {
        if t.as_ns0() == Some(ALARM_CONDITION_TYPE) {
            break;
        }
        if b.node(&t)
            .is_none_or(|n| n.node_class() != NodeClass::ObjectType)
        {
            return Err(err(format!("{type_def} is no ObjectType")));
        }
        subtypes.push(t.clone());
        t = supertype(b, &t)
            .ok_or_else(|| err(format!("{type_def} is no subtype of AlarmConditionType")))?;
    }
    if t.as_ns0() != Some(ALARM_CONDITION_TYPE) {
        return Err(err(format!(
            "{type_def} is no subtype of AlarmConditionType"
        )));
    }
    struct Decl {
        name: QualifiedName,
        property: Option<NodeId>,
        mandatory: bool,
        owner: NodeId,
    }
    let mut decls: Vec<Decl> = Vec::new();
    for owner in &subtypes {
        for (rt, decl) in targets(b, owner, &[ids::HAS_COMPONENT, ids::HAS_PROPERTY]) {
            let Some(d) = b.node(&decl) else { continue };
            let d_name = d.browse_name();
            if decls.iter().any(|x| x.name == d_name) {
                continue; // overridden by a more derived type
            }
            if d_name.namespace_index == 0
                && uaring_core::events::condition::MAINTAINED_FIELDS.contains(&d_name.name.as_str())
            {
                continue; // an override of what the condition maintains (ActiveState)
            }
            let property = match (d.as_variable(), rt == ids::HAS_PROPERTY) {
                (Some(v), true) => Some(v.data_type().clone()),
                _ => None,
            };
            decls.push(Decl {
                name: d_name,
                property,
                mandatory: is_mandatory(b, &decl),
                owner: owner.clone(),
            });
        }
    }
    let mut out: Vec<(QualifiedName, Variant)> = Vec::new();
    for (name, value) in given {
        let Some(d) = decls.iter().find(|d| d.name.name.as_str() == name) else {
            return Err(err(format!(
                "{type_def} (below AlarmConditionType) declares no Property {name}"
            )));
        };
        let Some(data_type) = &d.property else {
            return Err(err(format!(
                "{name} of {} is no Property; the library does not maintain it",
                d.owner
            )));
        };
        let want = match data_type.as_ns0() {
            Some(UTC_TIME) => Some(BuiltinType::DateTime),
            Some(DURATION) => Some(BuiltinType::Double),
            Some(n) if n <= 25 => BuiltinType::from_id(n as u8),
            _ => None,
        };
        if let Some(want) = want {
            if value.scalar_type() != Some(want) {
                return Err(err(format!(
                    "Property {name} is {want:?}, the value given is {:?}",
                    value.scalar_type()
                )));
            }
        }
        if out.iter().any(|(n, _)| n == &d.name) {
            return Err(err(format!("Property {name} given twice")));
        }
        out.push((d.name.clone(), value));
    }
    for d in decls.iter().filter(|d| d.mandatory) {
        if out.iter().any(|(n, _)| n == &d.name) {
            continue;
        }
        let name = d.name.name.as_str();
        return Err(err(match d.property {
            Some(_) => format!(
                "{}'s mandatory Property {name} needs a value: AlarmDef::property(\"{name}\", …)",
                d.owner
            ),
            None => format!(
                "{}'s mandatory {name} is not maintained by the library (not supported yet); \
                 use a type without it",
                d.owner
            ),
        }));
    }
    Ok(out)
}

/// The state of an alarm, as clients see it.
#[derive(Clone, Debug, PartialEq)]
pub struct AlarmState {
    pub enabled: bool,
    pub active: bool,
    pub acked: bool,
    pub confirmed: bool,
    pub severity: u16,
    /// Retain: active, unacknowledged or unconfirmed (and enabled).
    pub retain: bool,
    pub message: String,
}

/// An alarm of the running server (cheap to clone; every method is lock-free).
#[derive(Clone, Default)]
pub struct Alarm {
    bound: Arc<OnceLock<(Arc<ServerShared>, Arc<uaring_core::events::Condition>)>>,
}

impl std::fmt::Debug for Alarm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.bound.get() {
            Some((_, c)) => write!(f, "Alarm({})", c.spec.node_id),
            None => f.write_str("Alarm(not started)"),
        }
    }
}

impl Alarm {
    pub(crate) fn bind(&self, shared: &Arc<ServerShared>, node_id: &NodeId) -> Result<(), Error> {
        let c = shared
            .events
            .condition(node_id)
            .cloned()
            .ok_or_else(|| Error::AddressSpace(format!("alarm {node_id} was not added")))?;
        let _ = self.bound.set((shared.clone(), c));
        Ok(())
    }

    /// Activates the alarm with `severity` (1..=1000) and `message`, or deactivates it. A
    /// change raises the alarm's event (to every event item whose filter selects it, on
    /// every shard) and updates its Variables; going active makes it unacknowledged and
    /// unconfirmed. No change (same state, severity and message) raises nothing; a disabled
    /// alarm does not change.
    pub fn set_active(&self, active: bool, severity: u16, message: &str) -> Result<(), Error> {
        let (shared, c) = self.bound.get().ok_or(Error::NotStarted)?;
        if !(1..=1000).contains(&severity) {
            return Err(Error::Status(StatusCode::BadOutOfRange));
        }
        let ev = shared.events.set_condition_active(
            &shared.address_space,
            c,
            active,
            severity,
            Some(message),
            crate::clock::utc_now(),
        );
        if let Some(ev) = ev {
            shared.events.bus.publish(ev);
        }
        Ok(())
    }

    /// The current state.
    pub fn state(&self) -> Result<AlarmState, Error> {
        let (_, c) = self.bound.get().ok_or(Error::NotStarted)?;
        let s = c.state();
        Ok(AlarmState {
            enabled: s.enabled,
            active: s.active,
            acked: s.acked,
            confirmed: s.confirmed,
            severity: s.severity,
            retain: s.retain(),
            message: s.message.text.as_str().to_string(),
        })
    }
}

/// A definition waiting for the start.
pub(crate) enum Def {
    Object(ObjectDef),
    EventType(EventTypeDef),
    /// A Variable and its handle's slot in the builder's [`Bindings`].
    Variable(VariableDef, u32),
    Method(MethodDef),
    Alarm(AlarmDef, Alarm),
    NamespaceWriteHook(Namespace, NamespaceWriteHook),
    RolePermissions(NodeRef, RolePermissions),
    NamespaceRolePermissions(Namespace, RolePermissions),
    Reference {
        from: NodeRef,
        reference_type: NodeRef,
        to: NodeRef,
    },
}

impl Def {
    /// Does it keep a history: a historized Variable ([`VariableDef::historize`],
    /// [`VariableDef::historize_every`]), or a notifier whose events are kept
    /// ([`ObjectDef::historize_events`])?
    pub(crate) fn historizes(&self) -> bool {
        match self {
            Def::Variable(v, _) => v.historizing,
            Def::Object(o) => o.history,
            _ => false,
        }
    }

    /// A Variable historized on a sampling interval: its id and the interval (ms).
    pub(crate) fn history_sampled(&self) -> Option<(&NodeRef, u32)> {
        match self {
            Def::Variable(v, _) if v.historizing => v.history_interval_ms.map(|ms| (&v.id, ms)),
            _ => None,
        }
    }
}

impl Def {
    /// Adds the node(s) to the address space being built (`keeps_history`: the server has a
    /// history store; without one nothing is built with history).
    pub(crate) fn build(
        self,
        b: &mut AddressSpaceBuilder,
        bound: &mut Vec<(u32, u32)>,
        alarms: &mut Vec<(Alarm, NodeId)>,
        keeps_history: bool,
    ) -> Result<(), Error> {
        match self {
            Def::Object(o) => {
                o.build(b, keeps_history)?;
            }
            Def::EventType(t) => {
                t.build(b)?;
            }
            Def::Variable(v, slot) => {
                let (index, hooks) = v.build(b, keeps_history)?;
                match hooks {
                    Some((id, Some(h), Some(a))) => {
                        b.set_write_hook(id.clone(), h);
                        b.set_async_write_hook(id, a);
                    }
                    Some((id, Some(h), None)) => b.set_write_hook(id, h),
                    Some((id, None, Some(a))) => b.set_async_write_hook(id, a),
                    Some((_, None, None)) | None => {}
                }
                bound.push((slot, index));
            }
            Def::Method(m) => {
                m.build(b)?;
            }
            Def::Alarm(a, handle) => {
                let id = a.build(b)?;
                alarms.push((handle, id));
            }
            Def::NamespaceWriteHook(ns, hook) => {
                let i = b.add_namespace(ns.uri()).map_err(Error::AddressSpace)?;
                b.set_namespace_write_hook(i, hook);
            }
            Def::RolePermissions(node, rp) => {
                let id = node.resolve(b)?;
                if !b.contains(&id) {
                    return Err(Error::AddressSpace(format!(
                        "role permissions of unknown node {node}"
                    )));
                }
                b.set_role_permissions(id, rp);
            }
            Def::NamespaceRolePermissions(ns, rp) => {
                let i = b.add_namespace(ns.uri()).map_err(Error::AddressSpace)?;
                b.set_namespace_role_permissions(i, rp);
            }
            Def::Reference {
                from,
                reference_type,
                to,
            } => {
                let (f, rt, t) = (from.resolve(b)?, reference_type.resolve(b)?, to.resolve(b)?);
                b.add_reference_of(&f, &rt, &ExpandedNodeId::local(t), true)
                    .map_err(Error::AddressSpace)?;
            }
        }
        Ok(())
    }
}

/// Where the [`Variable`] handles of one builder find their nodes once the server runs: one
/// table for all of them, a slot each. A handle is the table and its slot number, so a plant
/// of a million Variables makes no million small allocations (each would cost its size and
/// the allocator's header, and leave the build's freed strings stranded between them).
#[derive(Default)]
pub(crate) struct Bindings {
    table: OnceLock<BoundTable>,
}

struct BoundTable {
    shared: Arc<ServerShared>,
    slots: Box<[Slot]>,
}

#[derive(Clone, Copy)]
struct Slot {
    index: u32,
    /// The node's generation: once the node is removed (and maybe another added at its
    /// index), the handle answers BadNodeIdUnknown.
    generation: u32,
}

impl Bindings {
    /// Binds slots `0..slots` at the start: `nodes` gives each slot's node index, as the
    /// builder added it (every slot is given one: a Variable whose definition failed failed
    /// the start). By index, not by NodeId: a million hashed lookups again would be a
    /// tenth of a plant's start-up.
    pub(crate) fn bind(
        &self,
        shared: &Arc<ServerShared>,
        slots: usize,
        nodes: Vec<(u32, u32)>,
    ) -> Result<(), Error> {
        let space = shared.model.current();
        let mut table = vec![
            Slot {
                index: u32::MAX,
                generation: 0,
            };
            slots
        ];
        for (slot, index) in nodes {
            let generation = space
                .node_at(index)
                .ok_or_else(|| Error::AddressSpace(format!("node {index} was not added")))?
                .generation();
            if let Some(s) = table.get_mut(slot as usize) {
                *s = Slot { index, generation };
            }
        }
        let _ = self.table.set(BoundTable {
            shared: shared.clone(),
            slots: table.into_boxed_slice(),
        });
        Ok(())
    }
}

/// A bound handle: the server and the node's index and generation.
struct Bound<'a> {
    shared: &'a Arc<ServerShared>,
    index: u32,
    generation: u32,
}

impl Bound<'_> {
    /// Calls `f` with the node in the current version of the address space.
    fn with_node<R>(
        &self,
        f: impl FnOnce(&uaring_core::address_space::AddressSpace, NodeView<'_>) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let space = self.shared.model.current();
        let node = space
            .node_at_generation(self.index, self.generation)
            .ok_or(Error::Status(StatusCode::BadNodeIdUnknown))?;
        f(&space, node)
    }

    /// The node's NodeId, while the node is there.
    fn node_id(&self) -> Option<NodeId> {
        self.with_node(|_, n| Ok(n.node_id())).ok()
    }
}

/// A Variable of the running server, for pushing values from any thread. Cheap to clone;
/// every method is lock-free. Before the server started, every call is [`Error::NotStarted`];
/// once its node is removed ([`crate::ServerHandle::apply`], DeleteNodes), every call is
/// `Error::Status(BadNodeIdUnknown)`.
#[derive(Clone)]
pub struct Variable {
    bindings: Arc<Bindings>,
    slot: u32,
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.bound() {
            Ok(b) => match b.node_id() {
                Some(id) => write!(f, "Variable({id})"),
                None => f.write_str("Variable(removed)"),
            },
            Err(_) => f.write_str("Variable(not started)"),
        }
    }
}

impl Variable {
    /// The handle of slot `slot` of a builder's `bindings`.
    pub(crate) fn new(bindings: Arc<Bindings>, slot: u32) -> Variable {
        Variable { bindings, slot }
    }

    /// A handle to any Variable with a stored value of a running server (namespace 0, a
    /// NodeSet's, the application's).
    pub(crate) fn of(shared: &Arc<ServerShared>, node_id: &NodeId) -> Result<Variable, Error> {
        let space = shared.model.current();
        let index = space
            .node_index(node_id)
            .ok_or(Error::Status(StatusCode::BadNodeIdUnknown))?;
        let node = space
            .node_at(index)
            .ok_or(Error::Status(StatusCode::BadNodeIdUnknown))?;
        if node.value_cell().is_none() {
            return Err(Error::Status(StatusCode::BadNotWritable));
        }
        let bindings = Arc::new(Bindings::default());
        let _ = bindings.table.set(BoundTable {
            shared: shared.clone(),
            slots: Box::new([Slot {
                index,
                generation: node.generation(),
            }]),
        });
        Ok(Variable { bindings, slot: 0 })
    }

    fn bound(&self) -> Result<Bound<'_>, Error> {
        let table = self.bindings.table.get().ok_or(Error::NotStarted)?;
        let slot = table
            .slots
            .get(self.slot as usize)
            .ok_or(Error::NotStarted)?;
        Ok(Bound {
            shared: &table.shared,
            index: slot.index,
            generation: slot.generation,
        })
    }

    /// The NodeId: `None` before the server started and once the node is removed.
    pub fn node_id(&self) -> Option<NodeId> {
        self.bound().ok().and_then(|b| b.node_id())
    }

    /// Pushes a new value, source-timestamped now. Every exception-based monitored item on
    /// every shard receives it (up to its queue size). A value whose type or rank does not
    /// fit the Variable's DataType and ValueRank is [`Error::TypeMismatch`] and stores nothing.
    pub fn set(&self, value: impl Into<Variant>) -> Result<(), Error> {
        self.set_with(DataValue {
            value: value.into(),
            source_timestamp: Some(crate::clock::utc_now()),
            ..Default::default()
        })
    }

    /// Pushes a whole DataValue (status and source timestamp as given; a server timestamp is
    /// ignored: the server stamps when it reports).
    pub fn set_with(&self, mut dv: DataValue) -> Result<(), Error> {
        let b = self.bound()?;
        dv.server_timestamp = None;
        dv.server_picoseconds = None;
        b.with_node(|space, node| {
            check_node(space, node, &dv.value)?;
            space
                .store_value(b.index, dv)
                .map(|_| ())
                .map_err(|s| match s {
                    StatusCode::BadTypeMismatch => Error::TypeMismatch(node.node_id().to_string()),
                    s => Error::Status(s),
                })
        })
    }

    /// The current value.
    pub fn get(&self) -> Result<DataValue, Error> {
        let b = self.bound()?;
        b.with_node(|_, node| {
            node.value_cell()
                .map(|c| c.load())
                .ok_or(Error::Status(StatusCode::BadNotReadable))
        })
    }
}

fn check(b: &Bound, v: &Variant) -> Result<(), Error> {
    b.with_node(|space, node| check_node(space, node, v))
}

fn check_node(
    space: &uaring_core::address_space::AddressSpace,
    node: NodeView<'_>,
    v: &Variant,
) -> Result<(), Error> {
    match uaring_core::services::attribute::check_value(space, node, v) {
        Ok(()) => Ok(()),
        Err(StatusCode::BadTypeMismatch) => Err(Error::TypeMismatch(node.node_id().to_string())),
        Err(s) => Err(Error::Status(s)),
    }
}

/// Pushes several values: every one is type-checked first, and only when all fit are they
/// stored, in order (each store is still its own change: a reader may see some before
/// others).
pub fn set_many<'a>(
    values: impl IntoIterator<Item = (&'a Variable, Variant)>,
) -> Result<(), Error> {
    let ts = crate::clock::utc_now();
    let batch: Vec<(&Variable, Variant)> = values.into_iter().collect();
    for (var, v) in &batch {
        check(&var.bound()?, v)?;
    }
    for (var, v) in batch {
        var.set_with(DataValue {
            value: v,
            source_timestamp: Some(ts),
            ..Default::default()
        })?;
    }
    Ok(())
}
