//! Building the address space: the builder, namespace 0 from the generated NodeSet and the
//! live Server object. Namespace 1 (the ApplicationUri) starts empty: what is in it, and in
//! any other namespace, comes from the caller ([`build_with`]: the `uaring` library's
//! definitions, NodeSet imports).

pub mod make;
pub mod ns0;
mod refs;
pub mod server_object;

use std::collections::HashMap;
use std::sync::Arc;

use super::store::{dedup_refs, Key, Ref, Store, NO_INDEX};
use super::{ids, AddressSpace, ClassAttributes, Node, NodeClass, NodeView, ServerInfo};
use crate::config::ServerConfig;
use crate::types::{ExpandedNodeId, NodeId};
use crate::Now;
use crate::StatusCode;

/// The namespace-0 URI.
pub const NS0_URI: &str = "http://opcfoundation.org/UA/";

/// Builds the address space: namespace 0 and the live Server object; namespace 1 empty.
pub fn build(config: &ServerConfig, now: Now) -> Result<AddressSpace, String> {
    build_with(config, now, &mut |_| Ok(()))
}

/// Adds nodes to the address space before it is frozen (companion models read by the
/// caller, e.g. uaring-nodeset). It runs after namespace 0 is built; it may add
/// namespaces ([`AddressSpaceBuilder::add_namespace`]) and nodes. On an error nothing is
/// built.
pub type Extend<'a> = dyn FnMut(&mut AddressSpaceBuilder) -> Result<(), String> + 'a;

/// [`build`], then `extend`, then the NamespaceArray of the Server object set to every
/// namespace in the end.
pub fn build_with(
    config: &ServerConfig,
    now: Now,
    extend: &mut Extend<'_>,
) -> Result<AddressSpace, String> {
    build_with_history(config, now, extend, None)
}

/// [`build_with`] for a server whose history store can do `history`: the
/// HistoryServerCapabilities and the HistoryRead limits are there and say what it does.
pub fn build_with_history(
    config: &ServerConfig,
    now: Now,
    extend: &mut Extend<'_>,
    history: Option<&HistoryCapabilities>,
) -> Result<AddressSpace, String> {
    let uris = vec![
        NS0_URI.to_string(),
        config.application.effective_application_uri().to_string(),
    ];
    let info = server_object::server_info(config, now);
    let mut b = AddressSpaceBuilder::new(uris.clone(), info.clone());
    b.run_time_nodes = config.operation_limits.max_run_time_nodes as usize;
    match history {
        Some(caps) => {
            ns0::add_namespace0_keeping(&mut b, ns0::HISTORY)?;
            server_object::install(&mut b, config, &info, &uris);
            server_object::install_history(&mut b, config, caps, info.start_time);
        }
        None => {
            ns0::add_namespace0(&mut b)?;
            server_object::install(&mut b, config, &info, &uris);
        }
    }
    extend(&mut b)?;
    if b.namespace_uris.len() != uris.len() {
        let all = b.namespace_uris.clone();
        server_object::set_namespace_array(&mut b, &all, info.start_time);
    }
    Ok(b.finish())
}

/// Whether a node's references after `finish` linked the inverses — its `declared` ones,
/// then the inverses in the order of their sources (so by their target) — may hold one
/// twice. Exact when the inverses are in that order (else `true`: the caller's sort
/// decides), and without sorting the list: a folder of a million Variables is checked in
/// one pass where a sort took a tenth of a second.
fn may_repeat(refs: &[Ref], declared: usize) -> bool {
    if refs.len() <= 8 {
        return true;
    }
    let (decl, inv) = refs.split_at(declared.min(refs.len()));
    // The inverses: in runs of one target, ascending; a repeat is within a run.
    let mut run_start = 0;
    for (k, r) in inv.iter().enumerate() {
        let Some(first) = inv.get(run_start) else {
            return true;
        };
        if r.target == first.target {
            if inv.get(run_start..k).is_some_and(|run| run.contains(r)) {
                return true;
            }
            continue;
        }
        if r.target < first.target {
            return true;
        }
        run_start = k;
    }
    // The declared ones among themselves, then each against the inverses of its target.
    let mut sorted = decl.to_vec();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w.first() == w.get(1)) {
        return true;
    }
    decl.iter().any(|d| {
        let from = inv.partition_point(|r| r.target < d.target);
        inv.get(from..).is_some_and(|rest| {
            rest.iter()
                .take_while(|r| r.target == d.target)
                .any(|r| r == d)
        })
    })
}

/// What a history backend can do (`crate::history::HistoryBackend::capabilities`); the
/// server's HistoryServerCapabilities say exactly this.
#[derive(Debug, Clone, Default)]
pub struct HistoryCapabilities {
    /// Raw, at-time and processed reads of Variables.
    pub access_history_data: bool,
    /// Event history of notifiers.
    pub access_history_events: bool,
    /// The aggregates processed reads accept (namespace-0 AggregateFunction ids).
    pub aggregates: Vec<NodeId>,
    /// HistoryUpdate of values: UpdateDataDetails Insert, Replace and Update.
    pub insert_data: bool,
    pub replace_data: bool,
    pub update_data: bool,
    /// DeleteRawModifiedDetails (isDeleteModified false) and DeleteAtTimeDetails.
    pub delete_raw: bool,
    pub delete_at_time: bool,
    /// Modified values are kept: what HistoryUpdate inserted, replaced or deleted, with
    /// its ModificationInfo, read with isReadModified and deleted with isDeleteModified.
    pub modified_values: bool,
    /// HistoryUpdate of events: UpdateEventDetails Insert, Replace and Update, and
    /// DeleteEventDetails.
    pub insert_event: bool,
    pub replace_event: bool,
    pub update_event: bool,
    pub delete_event: bool,
}

/// Collects nodes (stored compact as they come: a million nodes never exist as
/// [`Node`]s at once), then [`AddressSpaceBuilder::finish`] adds inverse references and the
/// type hierarchy.
pub struct AddressSpaceBuilder {
    store: Store,
    /// The declared references by target ([`AddressSpaceBuilder::referencing`]).
    by_target: refs::RefIndex,
    /// Node indexes kept for nodes added at run time (the change path's tables).
    run_time_nodes: usize,
    namespace_uris: Vec<String>,
    server_info: ServerInfo,
    write_hooks: Vec<(NodeId, super::app::WriteHook)>,
    async_write_hooks: Vec<(NodeId, super::app::AsyncWriteHook)>,
    read_through: Vec<(NodeId, super::app::ReadThrough)>,
    /// Write hooks of whole namespaces (the last one set for a namespace wins).
    namespace_write_hooks: Vec<(u16, NamespaceWriteHook)>,
    methods: Vec<(NodeId, super::app::AppMethod)>,
    conditions: Vec<super::app::AppCondition>,
    /// RolePermissions of single nodes (the last one set for a node wins).
    role_permissions: Vec<(NodeId, crate::roles::RolePermissions)>,
    /// The DefaultRolePermissions of namespaces (the last one set wins).
    namespace_role_permissions: Vec<(u16, crate::roles::RolePermissions)>,
    /// A Variable answers asynchronously.
    has_async: bool,
}

/// The write hook of a namespace: answers client Writes of the Value of every Variable of
/// the namespace with a stored value that has no write hook of its own.
#[derive(Clone)]
pub enum NamespaceWriteHook {
    /// Accepts or rejects on the shard, before the value is stored.
    Quick(super::app::WriteHook),
    /// Completed later by the application (the Write is answered then).
    Async(super::app::AsyncWriteHook),
}

impl AddressSpaceBuilder {
    /// An empty builder. `namespace_uris[0]` should be `http://opcfoundation.org/UA/`.
    pub fn new(namespace_uris: Vec<String>, server_info: ServerInfo) -> Self {
        AddressSpaceBuilder {
            store: Store::new(),
            by_target: refs::RefIndex::default(),
            run_time_nodes: 0,
            namespace_uris,
            server_info,
            write_hooks: Vec::new(),
            async_write_hooks: Vec::new(),
            read_through: Vec::new(),
            namespace_write_hooks: Vec::new(),
            methods: Vec::new(),
            conditions: Vec::new(),
            role_permissions: Vec::new(),
            namespace_role_permissions: Vec::new(),
            has_async: false,
        }
    }

    /// Sets the RolePermissions of a node (added before or after this call; those of
    /// unknown nodes are dropped by [`AddressSpaceBuilder::finish`]). They replace the
    /// server's default rule and the namespace's default for this node
    /// ([`crate::roles`]).
    pub fn set_role_permissions(&mut self, node_id: NodeId, rp: crate::roles::RolePermissions) {
        self.role_permissions.retain(|(n, _)| *n != node_id);
        self.role_permissions.push((node_id, rp));
    }

    /// Sets the default RolePermissions of namespace `ns`: they apply to its nodes without
    /// RolePermissions of their own.
    pub fn set_namespace_role_permissions(&mut self, ns: u16, rp: crate::roles::RolePermissions) {
        self.namespace_role_permissions.retain(|(n, _)| *n != ns);
        self.namespace_role_permissions.push((ns, rp));
    }

    /// Sets the write hook of namespace `ns`: at [`AddressSpaceBuilder::finish`] it becomes
    /// the hook of every Variable of the namespace with a stored value and no hook of its
    /// own (whether added from code or from a NodeSet). It makes no Variable writable: the
    /// AccessLevel still decides. Setting another for the same namespace replaces it.
    pub fn set_namespace_write_hook(&mut self, ns: u16, hook: NamespaceWriteHook) {
        self.namespace_write_hooks.retain(|(n, _)| *n != ns);
        self.namespace_write_hooks.push((ns, hook));
    }

    /// Registers a condition of the application whose nodes were added
    /// (`events::nodes::add_condition_nodes`).
    pub fn set_condition(&mut self, c: super::app::AppCondition) {
        self.conditions.push(c);
    }

    /// Sets the asynchronous write hook of a Variable (a Write of it is answered when the
    /// application completes it).
    pub fn set_async_write_hook(&mut self, node_id: NodeId, hook: super::app::AsyncWriteHook) {
        self.async_write_hooks.push((node_id, hook));
    }

    /// Makes a stored Variable read-through ([`super::app::ReadThrough`]; unknown nodes are
    /// dropped by [`AddressSpaceBuilder::finish`]).
    pub fn set_read_through(&mut self, node_id: NodeId, read_through: super::app::ReadThrough) {
        self.read_through.push((node_id, read_through));
    }

    /// Sets the write hook of a Variable (added before or after this call; checked by
    /// [`AddressSpaceBuilder::finish`], which drops hooks of unknown nodes).
    pub fn set_write_hook(&mut self, node_id: NodeId, hook: super::app::WriteHook) {
        self.write_hooks.push((node_id, hook));
    }

    /// Sets the handler of a Method node.
    pub fn set_method(&mut self, method_id: NodeId, method: super::app::AppMethod) {
        self.methods.push((method_id, method));
    }

    /// Makes every Method node for which `unserved` is true, and that has no handler of the
    /// application ([`AddressSpaceBuilder::set_method`]), not executable (Executable and
    /// UserExecutable false: a Call answers BadNotExecutable, and clients can tell before).
    pub fn disable_methods(&mut self, unserved: impl Fn(&NodeId) -> bool) {
        let handled: std::collections::HashSet<&NodeId> =
            self.methods.iter().map(|(id, _)| id).collect();
        let targets: Vec<u32> = self
            .indexed_nodes()
            .filter(|(_, n)| n.node_class() == NodeClass::Method)
            .filter(|(_, n)| {
                let id = n.node_id();
                !handled.contains(&id) && unserved(&id)
            })
            .map(|(i, _)| i)
            .collect();
        for i in targets {
            self.update_at(i, |n| {
                if let ClassAttributes::Method {
                    executable,
                    user_executable,
                } = &mut n.attributes
                {
                    *executable = false;
                    *user_executable = false;
                }
            });
        }
    }

    /// Reserves room for `n` more nodes (the id and string indexes sized once; the records
    /// and cells grow by pages).
    pub fn reserve(&mut self, n: usize) {
        self.store.reserve(n);
        self.by_target.reserve(n);
    }

    fn index_of(&self, id: &NodeId) -> Option<u32> {
        self.store.lookup(id)
    }

    /// The data the live Server object is computed from (start times, product).
    pub fn server_info(&self) -> &ServerInfo {
        &self.server_info
    }

    /// The namespace table so far (index 0 is namespace 0).
    pub fn namespace_uris(&self) -> &[String] {
        &self.namespace_uris
    }

    /// The index of `uri`, appending it to the namespace table when it is new.
    pub fn add_namespace(&mut self, uri: &str) -> Result<u16, String> {
        if let Some(i) = self.namespace_uris.iter().position(|u| u == uri) {
            return Ok(i as u16);
        }
        let i = u16::try_from(self.namespace_uris.len())
            .map_err(|_| "more than 65535 namespaces".to_string())?;
        self.namespace_uris.push(uri.to_string());
        Ok(i)
    }

    /// The node with this id (its declared references: inverses come with `finish`).
    pub fn node(&self, id: &NodeId) -> Option<NodeView<'_>> {
        NodeView::new(&self.store, self.index_of(id)?)
    }

    /// The nodes that declare a reference (of any type, in either direction) to the node
    /// `target`, in the order they were added; `target`'s own declarations aside. Before
    /// `finish` a reference is stored where it was declared only: this finds the other end's
    /// without reading every node (the builder keeps an index).
    pub fn referencing(&self, target: &NodeId) -> Vec<NodeView<'_>> {
        let Some(at) = self.index_of(target) else {
            return Vec::new();
        };
        let foreign = self
            .store
            .find_foreign(&ExpandedNodeId::local(target.clone()));
        self.by_target
            .sources(at, foreign)
            .into_iter()
            .filter_map(|i| NodeView::new(&self.store, i))
            // A node changed by `update` after it was entered may no longer declare it.
            .filter(|n| {
                n.refs()
                    .any(|r| r.target_node().is_some_and(|t| t.index() == at))
            })
            .collect()
    }

    /// Every node added so far, in insertion order.
    pub fn nodes(&self) -> impl Iterator<Item = NodeView<'_>> {
        self.indexed_nodes().map(|(_, n)| n)
    }

    fn indexed_nodes(&self) -> impl Iterator<Item = (u32, NodeView<'_>)> {
        (0..self.store.recs.len()).filter_map(|i| Some((i, NodeView::new(&self.store, i)?)))
    }

    /// Is a node with this id present?
    pub fn contains(&self, id: &NodeId) -> bool {
        self.index_of(id).is_some()
    }

    /// Changes the node with this id before `finish`: `f` gets it as a definition (its
    /// declared references, its value source), and what it leaves is stored in its place.
    /// `None` when there is no such node.
    pub fn update<R>(&mut self, id: &NodeId, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let i = self.index_of(id)?;
        self.update_at(i, f)
    }

    fn update_at<R>(&mut self, i: u32, f: impl FnOnce(&mut Node) -> R) -> Option<R> {
        let mut node = self.store.to_node(i)?;
        let r = f(&mut node);
        // Nothing but the builder sees the store: the node's cell and source are free at
        // once (the insert below takes them again).
        self.store.remove(i, &Arc::default(), 0)?;
        self.note_async(&node);
        // The same id at the same index: it cannot clash (an id changed by `f` that is
        // taken already is refused, and the node is lost: `f` must not do that).
        self.store.insert(i, 0, node).ok()?;
        self.by_target.enter(&self.store, i);
        Some(r)
    }

    /// Calls `f` on every node `select` picks, as [`AddressSpaceBuilder::update`] does;
    /// how many.
    pub fn update_where(
        &mut self,
        mut select: impl FnMut(NodeView<'_>) -> bool,
        mut f: impl FnMut(&mut Node),
    ) -> usize {
        let picked: Vec<u32> = self
            .indexed_nodes()
            .filter(|(_, n)| select(*n))
            .map(|(i, _)| i)
            .collect();
        for &i in &picked {
            self.update_at(i, &mut f);
        }
        picked.len()
    }

    fn note_async(&mut self, node: &Node) {
        if let ClassAttributes::Variable(v) = &node.attributes {
            self.has_async |= matches!(v.value, super::ValueSource::Async(_));
        }
    }

    /// Adds a node. Its references are the declared ones; inverses are added by `finish`.
    pub fn add(&mut self, node: Node) -> Result<(), String> {
        self.add_indexed(node).map(|_| ())
    }

    /// [`AddressSpaceBuilder::add`], returning the node's index: where the finished address
    /// space keeps it ([`AddressSpace::node_at`]), so a caller that binds handles to nodes
    /// needs no second lookup by NodeId.
    pub fn add_indexed(&mut self, mut node: Node) -> Result<u32, String> {
        let i = self.store.recs.len();
        self.note_async(&node);
        // One lookup (the store's) and no copy of the NodeId: a million-node build formats
        // nothing unless it fails.
        let id = std::mem::take(&mut node.node_id);
        self.store.insert_as(i, 0, &id, node).map_err(|e| match e {
            StatusCode::BadNodeIdExists => format!("duplicate NodeId {id}"),
            e => format!("node {id}: {e}"),
        })?;
        self.by_target.enter(&self.store, i);
        Ok(i)
    }

    /// Adds a reference declared on `source` (which must exist).
    pub fn add_reference(
        &mut self,
        source: &NodeId,
        reference_type: u32,
        target: NodeId,
        is_forward: bool,
    ) -> Result<(), String> {
        self.add_reference_of(
            source,
            &NodeId::ns0(reference_type),
            &ExpandedNodeId::local(target),
            is_forward,
        )
    }

    /// Adds a reference of any type declared on `source` (which must exist).
    pub fn add_reference_of(
        &mut self,
        source: &NodeId,
        reference_type: &NodeId,
        target: &ExpandedNodeId,
        is_forward: bool,
    ) -> Result<(), String> {
        let s = self
            .index_of(source)
            .ok_or_else(|| format!("reference from unknown node {source}"))?;
        let t = self
            .store
            .key(&ExpandedNodeId::local(reference_type.clone()))
            .map_err(|e| e.to_string())?;
        let target = self.store.key(target).map_err(|e| e.to_string())?;
        let has_td = self.store.ns0(ids::HAS_TYPE_DEFINITION);
        if let Some(r) = self.store.recs.get_mut(s) {
            match (t, target) {
                (Key::Local(ti), Key::Local(tg)) if is_forward && Some(ti) == has_td => {
                    r.type_def = tg
                }
                _ => {
                    r.push_ref(Ref::new(t, is_forward, target));
                    self.by_target.push(target, s);
                }
            }
        }
        Ok(())
    }

    /// Adds the inverse references, deduplicates, computes the type hierarchy and returns
    /// the finished address space.
    pub fn finish(self) -> AddressSpace {
        let AddressSpaceBuilder {
            mut store,
            by_target: _,
            run_time_nodes,
            namespace_uris,
            server_info,
            write_hooks,
            async_write_hooks,
            read_through,
            namespace_write_hooks,
            methods,
            conditions,
            role_permissions,
            namespace_role_permissions,
            has_async,
        } = self;
        let metrics = std::sync::Arc::new(crate::metrics::ServerMetrics::default());

        // What the build freed (nodes changed by `update`) goes to the first edit.
        let freed = std::mem::take(&mut store.freed);
        // References declared to nodes added after them, then the inverse of every
        // reference between two nodes here.
        store.resolve_foreign();
        let bound = store.recs.len();
        // How many references each node declared: the inverses go after them, in the
        // order of their sources.
        let declared: Vec<u32> = (0..bound)
            .map(|i| store.rec(i).map_or(0, |r| r.ref_count() as u32))
            .collect();
        for i in 0..bound {
            store.link_inverses_with(i, |_| {});
        }
        for (i, &declared) in (0..bound).zip(&declared) {
            let Some(r) = store.rec(i) else { continue };
            if r.ref_count() < 2 {
                continue;
            }
            let mut refs: Vec<Ref> = r.refs().collect();
            if !may_repeat(&refs, declared as usize) {
                continue;
            }
            let before = refs.len();
            dedup_refs(&mut refs);
            if refs.len() != before {
                if let Some(r) = store.recs.get_mut(i) {
                    r.set_refs(refs);
                }
            }
        }

        // Type hierarchy and encodings.
        let mut supertype = vec![NO_INDEX; bound as usize];
        let mut encoding_of = HashMap::new();
        let has_subtype = store.ns0(ids::HAS_SUBTYPE);
        let has_encoding = store.ns0(ids::HAS_ENCODING);
        for (i, sup) in (0..bound).zip(supertype.iter_mut()) {
            let Some(n) = NodeView::new(&store, i) else {
                continue;
            };
            if matches!(n.node_class(), NodeClass::Object | NodeClass::Variable) {
                continue;
            }
            for r in n.refs() {
                let t = r.type_index();
                if t.is_some() && t == has_subtype && !r.is_forward() {
                    if let Some(p) = r.target_node() {
                        *sup = p.index();
                    }
                } else if t.is_some()
                    && t == has_encoding
                    && r.is_forward()
                    && n.node_class() == NodeClass::DataType
                {
                    encoding_of.insert(r.target().node_id, n.node_id());
                }
            }
        }
        let lookup = |id: &NodeId| store.lookup(id);
        let changes = std::sync::Arc::new(super::ChangeHub::new(
            (bound as usize).saturating_add(run_time_nodes),
        ));
        let mut hooks = super::app::AppHooks::default();
        for (id, hook) in write_hooks {
            if let Some(i) = lookup(&id) {
                hooks.write_hooks.insert(i, hook);
            }
        }
        for (id, hook) in async_write_hooks {
            if let Some(i) = lookup(&id) {
                hooks.async_write_hooks.insert(i, hook);
            }
        }
        for (id, r) in read_through {
            if let Some(i) = lookup(&id) {
                hooks.read_through.insert(i, r);
            }
        }
        if !namespace_write_hooks.is_empty() {
            // Expanded into per-node hooks: the request path looks up one table either way.
            // Only Variables a client may write (CurrentWrite) get one: a Write of any other
            // is refused before its hook, and a plant of a million read-only sensors would
            // otherwise hold a million table entries (about 44 bytes each) for nothing.
            for i in 0..bound {
                let Some(n) = NodeView::new(&store, i) else {
                    continue;
                };
                if n.value_cell().is_none()
                    || n.as_variable()
                        .is_none_or(|v| v.access_level() & super::access_level::CURRENT_WRITE == 0)
                    || hooks.write_hooks.contains_key(&i)
                    || hooks.async_write_hooks.contains_key(&i)
                {
                    continue;
                }
                let Some((_, hook)) = namespace_write_hooks
                    .iter()
                    .find(|(ns, _)| *ns == n.id().namespace())
                else {
                    continue;
                };
                match hook {
                    NamespaceWriteHook::Quick(h) => {
                        hooks.write_hooks.insert(i, h.clone());
                    }
                    NamespaceWriteHook::Async(h) => {
                        hooks.async_write_hooks.insert(i, h.clone());
                    }
                }
            }
        }
        for (id, m) in methods {
            if lookup(&id).is_some() {
                hooks.methods.insert(id, m);
            }
        }
        hooks.conditions = conditions
            .into_iter()
            .filter(|c| lookup(&c.node_id).is_some())
            .collect();
        let has_async = has_async
            || !hooks.async_write_hooks.is_empty()
            || !hooks.read_through.is_empty()
            || hooks.methods.values().any(|m| m.handler.is_async());
        let permissions = super::NodePermissions::new(
            role_permissions
                .into_iter()
                .filter_map(|(id, rp)| lookup(&id).map(|i| (i, rp)))
                .collect(),
            namespace_role_permissions,
        );
        let mut space = AddressSpace {
            version: 0,
            store,
            token: Arc::default(),
            supertype: Arc::new(supertype),
            encoding_of: Arc::new(encoding_of),
            namespace_uris: Arc::new(namespace_uris),
            server_info: Arc::new(server_info),
            metrics,
            changes,
            hooks: Arc::new(hooks),
            has_async,
            views: Arc::new(HashMap::new()),
            permissions: Arc::new(permissions),
            log: Arc::new(super::edit::EditLog::default()),
            handover: Arc::new(super::store::free::Handover::new(super::edit::Reusable {
                free: Default::default(),
                freed,
            })),
        };
        space.compute_views();
        space
    }
}

#[cfg(test)]
mod tests {
    use super::may_repeat;
    use crate::address_space::store::{Key, Ref};

    #[test]
    fn may_repeat_finds_every_repeat_the_sort_would() {
        let r = |t: u32, fwd: bool, target: u32| Ref::new(Key::Local(t), fwd, Key::Local(target));
        // Declared: 3 references; then inverses from sources 10, 11, 11, 12, ... 20.
        let declared = vec![r(35, true, 11), r(47, true, 500), r(46, false, 7)];
        let mut inverses = vec![r(35, false, 10), r(35, false, 11), r(47, false, 11)];
        inverses.extend((12..=20).map(|s| r(35, false, s)));
        let list = |extra: &[Ref]| -> Vec<Ref> {
            declared
                .iter()
                .chain(&inverses)
                .chain(extra)
                .copied()
                .collect()
        };
        assert!(!may_repeat(&list(&[]), 3));
        // An inverse equal to a declared reference (a NodeSet declaring both ends).
        let mut l = list(&[]);
        if let Some(x) = l.get_mut(1) {
            *x = r(35, false, 15);
        }
        assert!(may_repeat(&l, 3), "declared and inverse");
        if let Some(x) = l.get_mut(1) {
            *x = r(35, true, 15);
        }
        assert!(
            !may_repeat(&l, 3),
            "the other direction is another reference"
        );
        // The same inverse twice from one source, and not next to each other.
        let mut l = list(&[]);
        l.insert(6, r(35, false, 11));
        assert!(may_repeat(&l, 3), "within a source's run");
        // Two declared alike.
        let mut l = list(&[]);
        l.insert(0, r(46, false, 7));
        assert!(may_repeat(&l, 4), "declared twice");
        // Inverses out of their sources' order: the caller sorts.
        assert!(may_repeat(&list(&[r(35, false, 3)]), 3));
        // Short lists go to the sort as before.
        assert!(may_repeat(&declared, 3));
    }
}
