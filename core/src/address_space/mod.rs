//! The address space: every node, in versions shared read-only (`Arc`) by all shards. No
//! locks: a version never changes once published ([`model`]); the only mutable parts are
//! the Variable value cells ([`value::ValueCell`]), which are lock-free.
//!
//! * Nodes are kept compact ([`store`]): a 56-byte record each, names and shapes interned,
//!   values in their cells. [`Node`] is what the builder and the run-time edit take in; a
//!   node is read through a [`NodeView`].
//! * Lookup: numeric ids of namespaces 0 and 1 are found through dense tables indexed by
//!   the id (one bounds check and one load); every other NodeId through a hash index.
//! * References are kept on both ends (8 bytes each): the NodeSet declares each reference
//!   once, the builder adds the inverse on the target (deduplicated). HasTypeDefinition is
//!   a field of the node: its inverse (a type's instances) is not kept.
//! * Type hierarchy: each type node knows its supertype (the source of its inverse
//!   HasSubtype); `is_subtype_of` walks that chain (depth ≤ 16 in namespace 0).

pub mod app;
pub mod attributes;
pub mod build;
pub mod change;
pub mod edit;
pub mod history_configuration;
pub mod model;
pub mod numeric_range;
pub mod store;
pub mod value;

use std::collections::HashMap;

use crate::types::{
    DataValue, DateTime, ExpandedNodeId, ExtensionObject, LocalizedText, NodeId, QualifiedName,
    Variant,
};
use crate::Now;

pub use build::AddressSpaceBuilder;
pub use change::{Change, ChangeHub, ChangeValue};
pub use model::Model;
pub use numeric_range::NumericRange;
pub use store::{
    AttrsView, ComputedView, IdRef, NodeView, RefView, SourceView, TextRef, VariableShape,
    VariableView,
};
use store::{Store, NO_INDEX};
pub use value::{ValueCell, Versioned};

pub use crate::generated::types::NodeClass;

/// Well-known namespace-0 ids used by the address space code.
pub mod ids {
    pub const BASE_DATA_TYPE: u32 = 24;
    pub const NUMBER: u32 = 26;
    pub const ENUMERATION: u32 = 29;
    pub const STRUCTURE: u32 = 22;
    pub const REFERENCES: u32 = 31;
    pub const HIERARCHICAL_REFERENCES: u32 = 33;
    pub const ORGANIZES: u32 = 35;
    pub const HAS_ENCODING: u32 = 38;
    pub const HAS_TYPE_DEFINITION: u32 = 40;
    pub const HAS_SUBTYPE: u32 = 45;
    pub const HAS_PROPERTY: u32 = 46;
    pub const HAS_COMPONENT: u32 = 47;
    pub const BASE_OBJECT_TYPE: u32 = 58;
    pub const FOLDER_TYPE: u32 = 61;
    pub const BASE_VARIABLE_TYPE: u32 = 62;
    pub const BASE_DATA_VARIABLE_TYPE: u32 = 63;
    pub const PROPERTY_TYPE: u32 = 68;
    pub const OBJECTS_FOLDER: u32 = 85;
    pub const SERVER: u32 = 2253;
}

/// AccessLevel bits (Part 3 §8.57).
pub mod access_level {
    pub const CURRENT_READ: u8 = 0x01;
    pub const CURRENT_WRITE: u8 = 0x02;
    pub const HISTORY_READ: u8 = 0x04;
    pub const HISTORY_WRITE: u8 = 0x08;
    pub const STATUS_WRITE: u8 = 0x20;
    pub const TIMESTAMP_WRITE: u8 = 0x40;
}

/// EventNotifier bits (Part 3 §8.59).
pub mod event_notifier {
    /// Events of the node can be subscribed to.
    pub const SUBSCRIBE_TO_EVENTS: u8 = 0x01;
    /// Its event history can be read.
    pub const HISTORY_READ: u8 = 0x04;
    /// Its event history can be updated.
    pub const HISTORY_WRITE: u8 = 0x08;
}

/// One reference as stored on a node: its type, direction and the other end.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reference {
    pub reference_type: NodeId,
    pub is_forward: bool,
    pub target: ExpandedNodeId,
}

/// A node as it is defined (the builder's and the run-time edit's input; the store keeps it
/// compact, [`store`], and gives it back as a [`NodeView`]): the attributes every node
/// class has, its references, and the class-specific ones.
#[derive(Debug)]
pub struct Node {
    pub node_id: NodeId,
    pub node_class: NodeClass,
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    pub description: LocalizedText,
    pub write_mask: u32,
    pub user_write_mask: u32,
    /// Declared references, forward and inverse (the store adds the inverse of each on its
    /// target).
    pub references: Refs,
    /// Ignored on input (the store sets it: how many nodes had the index before).
    pub generation: u32,
    /// The attributes of this node's class. Its variant always matches `node_class`.
    pub attributes: ClassAttributes,
}

/// Class-specific attributes.
#[derive(Debug)]
pub enum ClassAttributes {
    Object {
        event_notifier: u8,
    },
    Variable(VariableAttributes),
    Method {
        executable: bool,
        user_executable: bool,
    },
    ObjectType {
        is_abstract: bool,
    },
    VariableType(VariableTypeAttributes),
    ReferenceType {
        is_abstract: bool,
        symmetric: bool,
        inverse_name: Option<LocalizedText>,
    },
    DataType {
        is_abstract: bool,
        data_type_definition: Option<ExtensionObject>,
    },
    View {
        contains_no_loops: bool,
        event_notifier: u8,
    },
}

/// Attributes of a Variable.
#[derive(Debug)]
pub struct VariableAttributes {
    pub value: ValueSource,
    pub data_type: NodeId,
    pub value_rank: i32,
    pub array_dimensions: Vec<u32>,
    pub access_level: u8,
    pub user_access_level: u8,
    pub access_level_ex: Option<u32>,
    /// Milliseconds; 0 = as fast as the server can, -1 = indeterminate.
    pub minimum_sampling_interval: f64,
    pub historizing: bool,
}

/// Attributes of a VariableType.
#[derive(Clone, Debug)]
pub struct VariableTypeAttributes {
    pub value: Variant,
    pub data_type: NodeId,
    pub value_rank: i32,
    pub array_dimensions: Vec<u32>,
    pub is_abstract: bool,
}

/// Where a Variable's value comes from.
pub enum ValueSource {
    /// Stored in a lock-free cell; writable when the AccessLevel allows.
    Cell(ValueCell),
    /// The server's own values computed at read time from `Now` and the server's start data
    /// (ServerStatus, diagnostics; never written).
    Dynamic(Dynamic),
    /// Computed by the application at every Read and sample, on the shard ([`app::ReadFn`]).
    /// Writable only through a write hook.
    Computed(app::Computed),
    /// Answered later by the application from any thread ([`app::AsyncSource`]): a Read is
    /// deferred until it answers, a sample is taken when it answers.
    Async(std::sync::Arc<app::AsyncSource>),
}

impl std::fmt::Debug for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueSource::Cell(c) => c.fmt(f),
            ValueSource::Dynamic(d) => d.fmt(f),
            ValueSource::Computed(_) => f.write_str("Computed"),
            ValueSource::Async(a) => a.fmt(f),
        }
    }
}

/// Values computed from the caller's `Now` at read time (core reads no clock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dynamic {
    /// Server.ServerStatus.CurrentTime: `now.utc`.
    CurrentTime,
    /// Server.ServerStatus: the ServerStatusDataType structure with CurrentTime = `now.utc`.
    ServerStatus,
    /// Server.ServerDiagnostics.ServerDiagnosticsSummary: the structure, summed over the shards.
    DiagnosticsSummary,
    /// One UInt32 of that structure, by its position (0 = ServerViewCount … 11 =
    /// RejectedRequestsCount).
    DiagnosticsCount(u8),
    /// Server.ServiceLevel from the load: 255 idle down to 200 when the shards' sessions or
    /// secure channels reach their configured maximum; 199 (degraded) at the maximum.
    ServiceLevel {
        max_sessions_per_shard: u32,
        max_channels_per_shard: u32,
    },
    /// Server.ServerStatus.State: Running, or Shutdown once a shutdown is announced.
    ServerState,
    /// Server.ServerStatus.SecondsTillShutdown: 0, or the seconds left of an announced
    /// shutdown (rounded up).
    SecondsTillShutdown,
    /// Server.ServerStatus.ShutdownReason: empty, or why the server is shutting down.
    ShutdownReason,
    /// ServerDiagnostics.SessionsDiagnosticsSummary.SessionDiagnosticsArray,
    /// .SessionSecurityDiagnosticsArray and ServerDiagnostics.SubscriptionDiagnosticsArray:
    /// every shard's last snapshot ([`crate::metrics::DiagnosticsSnapshot`]); a Read also
    /// asks the shards for a fresh one.
    DiagnosticsArray(crate::metrics::DiagnosticsArray),
}

/// A shutdown the server announced ([`ShutdownNotice::announce`]): ServerStatus reads State
/// Shutdown, SecondsTillShutdown and ShutdownReason from it on every shard. One per server,
/// shared through [`ServerInfo`].
#[derive(Debug, Default)]
pub struct ShutdownNotice {
    /// Monotonic ns at which the server stops; 0 while none is announced.
    at_mono_ns: std::sync::atomic::AtomicU64,
}

impl ShutdownNotice {
    /// The server stops at monotonic time `at_mono_ns` (any thread; the shards see it at once).
    pub fn announce(&self, at_mono_ns: u64) {
        self.at_mono_ns
            .store(at_mono_ns.max(1), std::sync::atomic::Ordering::Release);
    }

    /// When the announced shutdown happens, if one is announced.
    pub fn at(&self) -> Option<u64> {
        match self.at_mono_ns.load(std::sync::atomic::Ordering::Acquire) {
            0 => None,
            t => Some(t),
        }
    }
}

impl PartialEq for ShutdownNotice {
    fn eq(&self, other: &ShutdownNotice) -> bool {
        self.at() == other.at()
    }
}

/// Data the live Server object is computed from.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInfo {
    pub start_time: DateTime,
    pub start_mono_ns: u64,
    pub product_uri: String,
    pub manufacturer_name: String,
    pub product_name: String,
    pub software_version: String,
    pub build_number: String,
    pub build_date: DateTime,
    /// The shutdown announced, if any (shared by every clone).
    pub shutdown: std::sync::Arc<ShutdownNotice>,
}

impl Default for ServerInfo {
    fn default() -> Self {
        ServerInfo {
            start_time: DateTime::NULL,
            start_mono_ns: 0,
            product_uri: "urn:uaring".into(),
            manufacturer_name: "uaring".into(),
            product_name: "uaring".into(),
            software_version: env!("CARGO_PKG_VERSION").into(),
            build_number: env!("CARGO_PKG_VERSION").into(),
            build_date: DateTime::NULL,
            shutdown: Default::default(),
        }
    }
}

/// The address space. See the module documentation.
///
/// One version of it: a run-time change ([`edit`]) makes a new version that shares every
/// part it does not touch, and [`Model`] hands it to the shards.
#[derive(Clone)]
pub struct AddressSpace {
    /// Counts the versions published by [`Model`] (0 = the one built at start).
    version: u64,
    /// The nodes ([`store`]).
    pub(crate) store: Store,
    /// Alive as long as this version is: what a cell freed by the next version waits for.
    pub(crate) token: Arc<store::VersionToken>,
    /// `supertype[i]`: index of the supertype of type node `i`, or `NO_INDEX`.
    supertype: Arc<Vec<u32>>,
    /// Encoding object index → the DataType it encodes (inverse HasEncoding).
    encoding_of: Arc<HashMap<NodeId, NodeId>>,
    namespace_uris: Arc<Vec<String>>,
    server_info: Arc<ServerInfo>,
    /// The shards' counters (ServerDiagnostics values are computed from them at read time).
    metrics: Arc<crate::metrics::ServerMetrics>,
    /// The change path to exception-based monitored items ([`change`]).
    changes: Arc<ChangeHub>,
    /// The application's write hooks and methods ([`app`]).
    hooks: Arc<app::AppHooks>,
    /// Some node answers asynchronously ([`AddressSpace::has_async`]).
    has_async: bool,
    /// The nodes of each View (by the View's index): the View and what its forward
    /// hierarchical references reach ([`AddressSpace::view_members`]).
    views: Arc<HashMap<u32, std::collections::HashSet<u32>>>,
    /// RolePermissions of nodes and namespaces ([`AddressSpace::permissions`]).
    permissions: Arc<NodePermissions>,
    /// What the run-time writer keeps between versions: removed nodes.
    pub(crate) log: Arc<edit::EditLog>,
    /// The free lists (indexes, cells, sources, class attributes) for the next edit, which
    /// takes them out ([`store::free`]).
    pub(crate) handover: Arc<store::free::Handover<edit::Reusable>>,
}

use std::sync::Arc;

/// The RolePermissions set on nodes (by node index) and the DefaultRolePermissions of
/// namespaces (by namespace index). Empty in most servers: then nothing is looked up.
#[derive(Debug, Default)]
pub(crate) struct NodePermissions {
    by_node: HashMap<u32, crate::roles::RolePermissions>,
    by_namespace: Vec<Option<crate::roles::RolePermissions>>,
    /// The namespaces of the nodes in `by_node`, found on first use (lock-free: whoever
    /// gets there first computes the same value).
    node_namespaces: std::sync::atomic::AtomicU64,
}

impl Clone for NodePermissions {
    fn clone(&self) -> NodePermissions {
        NodePermissions {
            by_node: self.by_node.clone(),
            by_namespace: self.by_namespace.clone(),
            node_namespaces: std::sync::atomic::AtomicU64::new(NodeNamespaces::UNKNOWN),
        }
    }
}

/// A set of namespace indexes: bit `ns` for `ns < 62`, bit 62 for every higher one; bit 63
/// marks a computed value.
/// [`NodeNamespaces::UNKNOWN`] until computed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NodeNamespaces(u64);

impl NodeNamespaces {
    const UNKNOWN: u64 = 0;
    /// Set in every computed value, so it is never `UNKNOWN`.
    const COMPUTED: u64 = 1 << 63;

    fn bit(ns: u16) -> u64 {
        1u64 << (ns as u32).min(62)
    }

    pub(crate) fn contains(self, ns: u16) -> bool {
        self.0 & Self::bit(ns) != 0
    }
}

impl NodePermissions {
    pub(crate) fn new(
        by_node: HashMap<u32, crate::roles::RolePermissions>,
        namespaces: Vec<(u16, crate::roles::RolePermissions)>,
    ) -> NodePermissions {
        let mut by_namespace = Vec::new();
        for (ns, rp) in namespaces {
            let ns = ns as usize;
            if by_namespace.len() <= ns {
                by_namespace.resize(ns + 1, None);
            }
            if let Some(slot) = by_namespace.get_mut(ns) {
                *slot = Some(rp);
            }
        }
        NodePermissions {
            by_node,
            by_namespace,
            node_namespaces: std::sync::atomic::AtomicU64::new(NodeNamespaces::UNKNOWN),
        }
    }

    fn node_namespaces(&self, nodes: &Store) -> NodeNamespaces {
        use std::sync::atomic::Ordering;
        let v = self.node_namespaces.load(Ordering::Relaxed);
        if v != NodeNamespaces::UNKNOWN {
            return NodeNamespaces(v);
        }
        let mut v = NodeNamespaces::COMPUTED;
        for &i in self.by_node.keys() {
            // An index without a node cannot happen (the builder maps ids to indexes);
            // counted as every namespace, to stay on the safe side.
            v |= nodes.rec(i).map_or(!0, |n| NodeNamespaces::bit(n.id_ns));
        }
        self.node_namespaces.store(v, Ordering::Relaxed);
        NodeNamespaces(v)
    }

    fn is_empty(&self) -> bool {
        self.by_node.is_empty() && self.by_namespace.is_empty()
    }
}

impl std::fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressSpace")
            .field("nodes", &self.store.count)
            .field("version", &self.version)
            .field("namespaces", &self.namespace_uris)
            .finish()
    }
}

impl AddressSpace {
    /// The node with this id.
    #[inline]
    pub fn node(&self, id: &NodeId) -> Option<NodeView<'_>> {
        NodeView::new(&self.store, self.store.lookup(id)?)
    }

    /// The version (0 for the address space built at start; each run-time change publishes
    /// the next).
    #[inline]
    pub fn version(&self) -> u64 {
        self.version
    }

    #[inline]
    pub(crate) fn index_of(&self, id: &NodeId) -> Option<u32> {
        self.store.lookup(id)
    }

    /// The node an ExpandedNodeId names, when it is local to this server.
    pub fn node_expanded(&self, id: &ExpandedNodeId) -> Option<NodeView<'_>> {
        if id.server_index != 0 {
            return None;
        }
        match id.namespace_uri.as_opt() {
            None => self.node(&id.node_id),
            Some(uri) => {
                let ns = self.namespace_index(uri)?;
                self.node(&NodeId {
                    namespace: ns,
                    identifier: id.node_id.identifier.clone(),
                })
            }
        }
    }

    /// Is `sub` the same type as `base` or a (transitive) subtype of it? Works for
    /// ReferenceTypes, DataTypes, ObjectTypes and VariableTypes. False when either is unknown.
    pub fn is_subtype_of(&self, sub: &NodeId, base: &NodeId) -> bool {
        match (self.index_of(sub), self.index_of(base)) {
            (Some(s), Some(b)) => self.is_subtype_index(s, b),
            _ => false,
        }
    }

    /// [`AddressSpace::is_subtype_of`] by node index.
    #[inline]
    pub fn is_subtype_index(&self, mut i: u32, b: u32) -> bool {
        if i == b {
            return true;
        }
        // Bounded walk: the hierarchy is a tree, but never trust data to be acyclic.
        for _ in 0..64 {
            let Some(&p) = self.supertype.get(i as usize) else {
                return false;
            };
            if p == NO_INDEX {
                return false;
            }
            if p == b {
                return true;
            }
            i = p;
        }
        false
    }

    /// The direct supertype of a type node.
    pub fn supertype_of(&self, id: &NodeId) -> Option<NodeId> {
        let i = self.index_of(id)?;
        let p = *self.supertype.get(i as usize)?;
        (p != NO_INDEX)
            .then(|| self.node_at(p).map(|n| n.node_id()))
            .flatten()
    }

    /// The DataType a DataTypeEncoding object (e.g. `ServerStatusDataType_Encoding_DefaultBinary`) encodes.
    pub fn data_type_of_encoding(&self, encoding_id: &NodeId) -> Option<&NodeId> {
        self.encoding_of.get(encoding_id)
    }

    /// The NamespaceArray: index 0 is `http://opcfoundation.org/UA/`, 1 the ApplicationUri.
    pub fn namespace_uris(&self) -> &[String] {
        &self.namespace_uris
    }

    /// The index of a namespace URI.
    pub fn namespace_index(&self, uri: &str) -> Option<u16> {
        self.namespace_uris
            .iter()
            .position(|u| u == uri)
            .and_then(|i| u16::try_from(i).ok())
    }

    pub fn browse_name_of(&self, id: &NodeId) -> Option<QualifiedName> {
        self.node(id).map(|n| n.browse_name())
    }

    pub fn display_name_of(&self, id: &NodeId) -> Option<LocalizedText> {
        self.node(id).map(|n| n.display_name())
    }

    pub fn node_class_of(&self, id: &NodeId) -> Option<NodeClass> {
        self.node(id).map(|n| n.node_class())
    }

    /// The target of the node's forward HasTypeDefinition reference (Objects and Variables).
    pub fn type_definition_of(&self, id: &NodeId) -> Option<ExpandedNodeId> {
        self.node(id)?.type_definition()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.store.count
    }

    pub fn is_empty(&self) -> bool {
        self.store.count == 0
    }

    /// Every node, by index (the start's nodes in insertion order).
    pub fn nodes(&self) -> impl Iterator<Item = NodeView<'_>> {
        self.indexed_nodes().map(|(_, n)| n)
    }

    /// Every node with its index.
    pub fn indexed_nodes(&self) -> impl Iterator<Item = (u32, NodeView<'_>)> {
        (0..self.store.recs.len()).filter_map(|i| Some((i, NodeView::new(&self.store, i)?)))
    }

    /// One past the highest node index in use.
    pub fn index_bound(&self) -> u32 {
        self.store.recs.len()
    }

    /// Bytes the node store holds in its main tables (records, cells, ids, strings,
    /// indexes; not the reference lists): for the memory figures.
    pub fn store_bytes(&self) -> usize {
        self.store.bytes()
    }

    /// Value cells in the cell table, in use or free for a later node (a removed
    /// Variable's cell is reused, "Reclaiming" in docs/Architecture.md).
    pub fn value_cells(&self) -> u32 {
        self.store.cells.len()
    }

    /// The data the live Server object is computed from.
    pub fn server_info(&self) -> &ServerInfo {
        &self.server_info
    }

    /// The value (low, high) of `node`'s Range Property `name` (EURange, InstrumentRange),
    /// when it has one with finite bounds.
    pub fn range_property(&self, node: NodeView<'_>, name: &str) -> Option<(f64, f64)> {
        for r in node.refs() {
            if !r.is_forward() || !r.type_is_ns0(ids::HAS_PROPERTY) {
                continue;
            }
            let Some(p) = r.target_node() else {
                continue;
            };
            if p.name() != (0, Some(name)) {
                continue;
            }
            let dv = self.variable_value(p, Now::new(0, crate::types::DateTime::NULL))?;
            let Variant::ExtensionObject(eo) = &dv.value else {
                return None;
            };
            let range = eo
                .decode_as::<crate::generated::types::Range>(crate::DecodeLimits::default())?
                .ok()?;
            if range.low.is_finite() && range.high.is_finite() {
                return Some((range.low, range.high));
            }
        }
        None
    }

    /// The value of a Variable right now: the stored cell, or the dynamic value computed
    /// from `now`. `None` when the node is no Variable.
    pub fn variable_value(&self, node: NodeView<'_>, now: Now) -> Option<DataValue> {
        let v = node.as_variable()?;
        Some(match v.source() {
            SourceView::Cell(c) => c.load(),
            SourceView::Dynamic(d) => self.dynamic_value(d, now),
            SourceView::Computed(c) => c.value(now),
            SourceView::Async(_) => {
                DataValue::status(crate::types::StatusCode::BadWaitingForInitialData)
            }
        })
    }

    /// The index of a node (stable for the life of the address space), for callers that
    /// look the same node up many times (monitored items).
    #[inline]
    pub fn node_index(&self, id: &NodeId) -> Option<u32> {
        self.index_of(id)
    }

    /// Does any node or namespace carry RolePermissions? (Else every node follows
    /// [`crate::roles::Roles::default_permissions`].)
    #[inline]
    pub fn has_role_permissions(&self) -> bool {
        !self.permissions.is_empty()
    }

    /// Can RolePermissions apply to a node of namespace `ns`? False when no node of that
    /// namespace has its own and the namespace has no default: then every role has the
    /// default permissions there, and the Read and Write paths skip the lookups (the server's
    /// own RolePermissions on a namespace-0 node do not slow down every other namespace).
    #[inline]
    pub fn has_role_permissions_in(&self, ns: u16) -> bool {
        if self.permissions.is_empty() {
            return false;
        }
        if !self.permissions.by_namespace.is_empty() {
            return true;
        }
        self.permissions.node_namespaces(&self.store).contains(ns)
    }

    /// The RolePermissions that apply to the node at `index`: its own, else its namespace's
    /// default, else none (the server's default rule applies).
    pub fn role_permissions(&self, index: u32) -> Option<&crate::roles::RolePermissions> {
        if self.permissions.is_empty() {
            return None;
        }
        if let Some(rp) = self.permissions.by_node.get(&index) {
            return Some(rp);
        }
        let ns = self.store.rec(index)?.id_ns as usize;
        self.permissions.by_namespace.get(ns)?.as_ref()
    }

    /// What a user with `roles` may do on the node at `index` (Part 3 §8.55).
    #[inline]
    pub fn permissions(
        &self,
        index: u32,
        roles: crate::roles::Roles,
    ) -> crate::generated::types::PermissionType {
        match self.role_permissions(index) {
            Some(rp) => rp.granted(roles),
            None => roles.default_permissions(),
        }
    }

    /// May a user with `roles` do `needed` on the node `id`? True for an id that is not in
    /// the address space (a node of another server is not ours to hide; an unknown one
    /// answers its own status elsewhere).
    pub fn node_permits(
        &self,
        id: &NodeId,
        roles: crate::roles::Roles,
        needed: crate::generated::types::PermissionType,
    ) -> bool {
        if !self.has_role_permissions_in(id.namespace) {
            // No RolePermissions apply in the namespace: the default rule, no lookup.
            return roles.default_permissions().contains(needed) || self.index_of(id).is_none();
        }
        self.index_of(id)
            .is_none_or(|i| self.permissions(i, roles).contains(needed))
    }

    /// The node at an index from [`AddressSpace::node_index`].
    #[inline]
    pub fn node_at(&self, index: u32) -> Option<NodeView<'_>> {
        NodeView::new(&self.store, index)
    }

    /// The node at `index` if it is still the one of generation `generation` (a monitored
    /// item's node: deleted, or replaced by another at the same index, it is gone).
    #[inline]
    pub fn node_at_generation(&self, index: u32, generation: u32) -> Option<NodeView<'_>> {
        NodeView::new(&self.store, index).filter(|n| n.generation() == generation)
    }

    /// Computes a dynamic value.
    pub fn dynamic_value(&self, d: Dynamic, now: Now) -> DataValue {
        if matches!(
            d,
            Dynamic::DiagnosticsArray(_)
                | Dynamic::DiagnosticsSummary
                | Dynamic::DiagnosticsCount(7) // PublishingIntervalCount
        ) {
            // Read from the shards' snapshots: ask for fresh ones (a shard refreshes at its
            // next loop iteration, if anything changed since its last one).
            self.metrics
                .request_diagnostics(|shard| self.changes.wake(shard));
        }
        build::server_object::dynamic_value(&self.server_info, &self.metrics, d, now)
    }

    /// The shards' counters.
    pub fn metrics(&self) -> &std::sync::Arc<crate::metrics::ServerMetrics> {
        &self.metrics
    }

    /// The nodes a Browse within View `view_index` may see: the View node and every node its
    /// forward hierarchical references reach, transitively (Part 3 §5.4: a View's nodes are
    /// the ones it organizes). `None` when the index is no View.
    pub fn view_members(&self, view_index: u32) -> Option<&std::collections::HashSet<u32>> {
        self.views.get(&view_index)
    }

    /// Works out [`AddressSpace::view_members`] for every View node (once, when built).
    pub(crate) fn compute_views(&mut self) {
        let Some(hierarchical) = self.store.ns0(ids::HIERARCHICAL_REFERENCES) else {
            return;
        };
        let mut views = HashMap::new();
        for (i, n) in self.indexed_nodes() {
            if n.node_class() != NodeClass::View {
                continue;
            }
            let mut members = std::collections::HashSet::new();
            let mut stack = vec![i];
            while let Some(at) = stack.pop() {
                if !members.insert(at) {
                    continue;
                }
                let Some(node) = self.node_at(at) else {
                    continue;
                };
                for r in node.refs() {
                    if !r.is_forward()
                        || !r
                            .type_index()
                            .is_some_and(|t| self.is_subtype_index(t, hierarchical))
                    {
                        continue;
                    }
                    if let Some(t) = r.target_node() {
                        stack.push(t.index());
                    }
                }
            }
            views.insert(i, members);
        }
        self.views = Arc::new(views);
    }

    /// The application's write hook of the node at `node_index`.
    #[inline]
    pub fn write_hook(&self, node_index: u32) -> Option<&app::WriteHook> {
        if self.hooks.write_hooks.is_empty() {
            return None;
        }
        self.hooks.write_hooks.get(&node_index)
    }

    /// The read-through of the stored Variable at `node_index` ([`app::ReadThrough`]).
    #[inline]
    pub fn read_through(&self, node_index: u32) -> Option<&app::ReadThrough> {
        if self.hooks.read_through.is_empty() {
            return None;
        }
        self.hooks.read_through.get(&node_index)
    }

    /// The application's asynchronous write hook of the node at `node_index`.
    #[inline]
    pub fn async_write_hook(&self, node_index: u32) -> Option<&app::AsyncWriteHook> {
        if self.hooks.async_write_hooks.is_empty() {
            return None;
        }
        self.hooks.async_write_hooks.get(&node_index)
    }

    /// Does any node answer asynchronously (a source, a write hook or a method)? When not,
    /// Read, Write and Call never look for one.
    #[inline]
    pub fn has_async(&self) -> bool {
        self.has_async
    }

    /// The asynchronous source of the Variable at `node_index`.
    #[inline]
    pub fn async_source(&self, node_index: u32) -> Option<&std::sync::Arc<app::AsyncSource>> {
        match self.node_at(node_index)?.as_variable()?.source() {
            SourceView::Async(a) => Some(a),
            _ => None,
        }
    }

    /// The application's conditions.
    pub fn app_conditions(&self) -> &[app::AppCondition] {
        &self.hooks.conditions
    }

    /// The application method with this NodeId.
    pub fn app_method(&self, method_id: &NodeId) -> Option<&app::AppMethod> {
        if self.hooks.methods.is_empty() {
            return None;
        }
        self.hooks.methods.get(method_id)
    }

    /// The change path (watchers and the shards' inboxes).
    ///
    /// (Also the shards' wakers: the run-time writer wakes every shard when it publishes a
    /// version.)
    pub fn changes(&self) -> &std::sync::Arc<ChangeHub> {
        &self.changes
    }

    /// Stores `dv` in the value cell of the node at `node_index` and hands the change to
    /// every shard with an exception-based item on it. `BadTypeMismatch` when the cell holds
    /// a fixed scalar type and `dv` is another; `BadNodeIdUnknown` / `BadNotWritable` when
    /// the index names no Variable with a stored value. The caller checks the DataType and
    /// access rights.
    #[inline]
    pub fn store_value(
        &self,
        node_index: u32,
        dv: DataValue,
    ) -> Result<u64, crate::types::StatusCode> {
        use crate::types::StatusCode;
        let node = self
            .node_at(node_index)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let cell = node.value_cell().ok_or(StatusCode::BadNotWritable)?;
        let (version, change) = cell
            .store_versioned(dv)
            .ok_or(StatusCode::BadTypeMismatch)?;
        self.changes
            .publish(node_index, node.generation(), version, || change);
        Ok(version)
    }

    /// Read-modify-write of the cell of the node at `node_index` (IndexRange writes), with
    /// the change handed on as by [`AddressSpace::store_value`].
    pub fn update_value(
        &self,
        node_index: u32,
        f: impl FnMut(&DataValue) -> Result<DataValue, crate::types::StatusCode>,
    ) -> Result<u64, crate::types::StatusCode> {
        use crate::types::StatusCode;
        let node = self
            .node_at(node_index)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let cell = node.value_cell().ok_or(StatusCode::BadNotWritable)?;
        let (version, change) = cell.update_versioned(f)?;
        self.changes
            .publish(node_index, node.generation(), version, || change);
        Ok(version)
    }
}

impl Node {
    /// The target of the forward HasTypeDefinition reference.
    pub fn type_definition(&self) -> Option<ExpandedNodeId> {
        self.references
            .iter()
            .find(|r| r.is_forward && r.reference_type.as_ns0() == Some(ids::HAS_TYPE_DEFINITION))
            .map(|r| r.target.clone())
    }

    /// Points the node's forward HasTypeDefinition reference at `t` (added when missing).
    pub fn set_type_definition(&mut self, t: NodeId) {
        match self
            .references
            .0
            .iter_mut()
            .find(|r| r.is_forward && r.reference_type.as_ns0() == Some(ids::HAS_TYPE_DEFINITION))
        {
            Some(r) => r.target = ExpandedNodeId::local(t),
            None => self.references.0.insert(
                0,
                Reference {
                    reference_type: NodeId::ns0(ids::HAS_TYPE_DEFINITION),
                    is_forward: true,
                    target: ExpandedNodeId::local(t),
                },
            ),
        }
    }

    /// The Variable attributes, when this is a Variable.
    pub fn as_variable(&self) -> Option<&VariableAttributes> {
        match &self.attributes {
            ClassAttributes::Variable(v) => Some(v),
            _ => None,
        }
    }

    /// The stored value cell, when this is a Variable with a stored value.
    pub fn value_cell(&self) -> Option<&ValueCell> {
        match &self.attributes {
            ClassAttributes::Variable(VariableAttributes {
                value: ValueSource::Cell(c),
                ..
            }) => Some(c),
            _ => None,
        }
    }
}

/// A node definition's references: a vector (the name is older than the store).
#[derive(Debug, Default, Clone)]
pub struct Refs(pub Vec<Reference>);

impl Refs {
    pub fn new(refs: Vec<Reference>) -> Refs {
        Refs(refs)
    }

    /// The references.
    pub fn load(&self) -> &Vec<Reference> {
        &self.0
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Reference> {
        self.0.iter()
    }

    /// Changes the references.
    pub fn update(&mut self, f: impl FnOnce(&mut Vec<Reference>)) {
        f(&mut self.0)
    }

    pub fn push(&mut self, r: Reference) {
        self.0.push(r);
    }

    pub fn retain(&mut self, f: impl FnMut(&Reference) -> bool) {
        self.0.retain(f);
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn into_vec(self) -> Vec<Reference> {
        self.0
    }
}

impl From<Vec<Reference>> for Refs {
    fn from(v: Vec<Reference>) -> Refs {
        Refs(v)
    }
}

impl FromIterator<Reference> for Refs {
    fn from_iter<I: IntoIterator<Item = Reference>>(iter: I) -> Refs {
        Refs(iter.into_iter().collect())
    }
}
