//! Reading a node of the store: [`NodeView`], a copyable handle on one record of one
//! version, with the attributes as methods. Borrowed forms ([`IdRef`], [`TextRef`], the
//! compact references) for the hot paths that copy into recycled responses; owned ones
//! (`node_id()`, `browse_name()`, `references()`) for everything else.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::{id_kind, Key, Rec, Ref, Source, Store, TypeAttributes, VariableShape, NO_INDEX};
use crate::address_space::app::{AsyncSource, ReadFn};
use crate::address_space::value::ValueCell;
use crate::address_space::{ids, Dynamic, NodeClass, Reference, VariableTypeAttributes};
use crate::types::{
    DataValue, ExpandedNodeId, ExtensionObject, Guid, Identifier, LocalizedText, NodeId,
    QualifiedName, UaString,
};
use crate::Now;

/// One node of one version of the address space.
#[derive(Clone, Copy)]
pub struct NodeView<'a> {
    pub(crate) store: &'a Store,
    pub(crate) rec: &'a Rec,
    pub(crate) index: u32,
}

impl std::fmt::Debug for NodeView<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("index", &self.index)
            .field("node_id", &self.node_id())
            .field("class", &self.node_class())
            .field("browse_name", &self.browse_name())
            .finish()
    }
}

/// A NodeId, borrowed from the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdRef<'a> {
    Numeric(u16, u32),
    String(u16, &'a str),
    Guid(u16, Guid),
    ByteString(u16, &'a [u8]),
}

impl IdRef<'_> {
    pub fn namespace(&self) -> u16 {
        match *self {
            IdRef::Numeric(ns, _)
            | IdRef::String(ns, _)
            | IdRef::Guid(ns, _)
            | IdRef::ByteString(ns, _) => ns,
        }
    }

    pub fn to_node_id(&self) -> NodeId {
        let identifier = match *self {
            IdRef::Numeric(_, n) => Identifier::Numeric(n),
            IdRef::String(_, s) => Identifier::String(s.to_string()),
            IdRef::Guid(_, g) => Identifier::Guid(g),
            IdRef::ByteString(_, b) => Identifier::ByteString(b.to_vec()),
        };
        NodeId {
            namespace: self.namespace(),
            identifier,
        }
    }

    /// Writes the id into `out`, reusing its memory (a recycled response).
    pub fn write_into(&self, out: &mut NodeId) {
        out.namespace = self.namespace();
        match (*self, &mut out.identifier) {
            (IdRef::Numeric(_, n), id) => *id = Identifier::Numeric(n),
            (IdRef::String(_, s), Identifier::String(o)) => {
                o.clear();
                o.push_str(s);
            }
            (IdRef::ByteString(_, b), Identifier::ByteString(o)) => {
                o.clear();
                o.extend_from_slice(b);
            }
            (IdRef::Guid(_, g), id) => *id = Identifier::Guid(g),
            (r, id) => *id = r.to_node_id().identifier,
        }
    }

    /// Is this `id`?
    pub fn is(&self, id: &NodeId) -> bool {
        self.namespace() == id.namespace
            && match (*self, &id.identifier) {
                (IdRef::Numeric(_, a), Identifier::Numeric(b)) => a == *b,
                (IdRef::String(_, a), Identifier::String(b)) => a == b,
                (IdRef::Guid(_, a), Identifier::Guid(b)) => a == *b,
                (IdRef::ByteString(_, a), Identifier::ByteString(b)) => a == &b[..],
                _ => false,
            }
    }
}

/// A LocalizedText, borrowed from the store (`None`: a null string).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TextRef<'a> {
    pub locale: Option<&'a str>,
    pub text: Option<&'a str>,
}

fn set_string(out: &mut UaString, s: Option<&str>) {
    match (s, &mut out.0) {
        (Some(s), Some(o)) => {
            o.clear();
            o.push_str(s);
        }
        (Some(s), o) => *o = Some(s.to_string()),
        (None, o) => *o = None,
    }
}

impl TextRef<'_> {
    pub fn to_owned(&self) -> LocalizedText {
        LocalizedText {
            locale: UaString(self.locale.map(str::to_string)),
            text: UaString(self.text.map(str::to_string)),
        }
    }

    /// Writes the text into `out`, reusing its memory.
    pub fn write_into(&self, out: &mut LocalizedText) {
        set_string(&mut out.locale, self.locale);
        set_string(&mut out.text, self.text);
    }
}

/// A Variable's value source.
#[derive(Clone, Copy)]
pub enum SourceView<'a> {
    /// Stored in its cell.
    Cell(&'a ValueCell),
    Dynamic(Dynamic),
    Computed(ComputedView<'a>),
    Async(&'a Arc<AsyncSource>),
}

/// A computed value: the closure and the node's state word.
#[derive(Clone, Copy)]
pub struct ComputedView<'a> {
    pub read: &'a ReadFn,
    pub state: &'a AtomicU64,
}

impl ComputedView<'_> {
    /// The value now.
    #[inline]
    pub fn value(&self, now: Now) -> DataValue {
        (self.read)(now, self.state)
    }
}

/// A Variable's attributes.
#[derive(Clone, Copy)]
pub struct VariableView<'a> {
    shape: &'a VariableShape,
    cell: &'a ValueCell,
    store: &'a Store,
}

impl<'a> VariableView<'a> {
    pub fn shape(&self) -> &'a VariableShape {
        self.shape
    }
    pub fn data_type(&self) -> &'a NodeId {
        &self.shape.data_type
    }
    pub fn value_rank(&self) -> i32 {
        self.shape.value_rank
    }
    pub fn array_dimensions(&self) -> &'a [u32] {
        &self.shape.array_dimensions
    }
    pub fn access_level(&self) -> u8 {
        self.shape.access_level
    }
    pub fn user_access_level(&self) -> u8 {
        self.shape.user_access_level
    }
    pub fn access_level_ex(&self) -> Option<u32> {
        self.shape.access_level_ex
    }
    pub fn minimum_sampling_interval(&self) -> f64 {
        self.shape.minimum_sampling_interval
    }
    pub fn historizing(&self) -> bool {
        self.shape.historizing
    }

    /// Where the value comes from.
    #[inline]
    pub fn source(&self) -> SourceView<'a> {
        if self.cell.stores() {
            return SourceView::Cell(self.cell);
        }
        match self.store.source(self.cell.source_index()) {
            Some(Source::Dynamic(d)) => SourceView::Dynamic(*d),
            Some(Source::Computed(read)) => SourceView::Computed(ComputedView {
                read,
                state: self.cell.state(),
            }),
            Some(Source::Async(a)) => SourceView::Async(a),
            // A cell being reused (never for a node a version has).
            Some(Source::None) | None => SourceView::Cell(self.cell),
        }
    }

    /// The stored value's cell, when the value is stored.
    #[inline]
    pub fn cell(&self) -> Option<&'a ValueCell> {
        self.cell.stores().then_some(self.cell)
    }
}

/// A node's class attributes (the view of [`crate::address_space::ClassAttributes`]).
#[derive(Clone, Copy)]
pub enum AttrsView<'a> {
    Object {
        event_notifier: u8,
    },
    Variable(VariableView<'a>),
    Method {
        executable: bool,
        user_executable: bool,
    },
    ObjectType {
        is_abstract: bool,
    },
    VariableType(&'a VariableTypeAttributes),
    ReferenceType {
        is_abstract: bool,
        symmetric: bool,
        inverse_name: Option<&'a LocalizedText>,
    },
    DataType {
        is_abstract: bool,
        data_type_definition: Option<&'a ExtensionObject>,
    },
    View {
        contains_no_loops: bool,
        event_notifier: u8,
    },
}

/// One reference of a node, compact: its type and other end as indexes (or ids kept as
/// is, for nodes not in this server).
#[derive(Clone, Copy)]
pub struct RefView<'a> {
    store: &'a Store,
    r: Ref,
}

impl<'a> RefView<'a> {
    #[inline]
    pub fn is_forward(&self) -> bool {
        self.r.is_forward()
    }

    /// The reference type's node index (`None`: the type is not a node of this server).
    #[inline]
    pub fn type_index(&self) -> Option<u32> {
        self.store.key_index(self.r.type_key())
    }

    /// The reference type's NodeId.
    pub fn reference_type(&self) -> NodeId {
        self.store.key_id(self.r.type_key()).node_id
    }

    /// Is the reference type namespace-0 node `n`?
    #[inline]
    pub fn type_is_ns0(&self, n: u32) -> bool {
        match self.r.type_key() {
            Key::Local(i) => self.store.is_ns0(i, n),
            Key::Foreign(_) => self.reference_type().as_ns0() == Some(n),
        }
    }

    /// The other end, when it is a node of this server (now).
    #[inline]
    pub fn target_node(&self) -> Option<NodeView<'a>> {
        let i = self.store.key_index(self.r.target_key())?;
        NodeView::new(self.store, i)
    }

    /// The other end's id.
    pub fn target(&self) -> ExpandedNodeId {
        match self.r.target_key() {
            Key::Foreign(f) => self.store.foreign(f).cloned().unwrap_or_default(),
            Key::Local(i) => self
                .store
                .rec(i)
                .map(|r| ExpandedNodeId::local(self.store.node_id(r)))
                .unwrap_or_default(),
        }
    }

    /// Writes the other end's id into `out`, reusing its memory.
    pub fn write_target_into(&self, out: &mut ExpandedNodeId) {
        match self.r.target_key() {
            Key::Local(i) => match NodeView::new(self.store, i) {
                Some(t) => {
                    t.id().write_into(&mut out.node_id);
                    out.namespace_uri = UaString::null();
                    out.server_index = 0;
                }
                None => *out = ExpandedNodeId::default(),
            },
            Key::Foreign(f) => match self.store.foreign(f) {
                Some(x) => out.clone_from(x),
                None => *out = ExpandedNodeId::default(),
            },
        }
    }

    /// Writes the reference type's id into `out`, reusing its memory.
    pub fn write_type_into(&self, out: &mut NodeId) {
        match self.r.type_key() {
            Key::Local(i) => match NodeView::new(self.store, i) {
                Some(t) => t.id().write_into(out),
                None => *out = NodeId::NULL,
            },
            Key::Foreign(f) => match self.store.foreign(f) {
                Some(x) => out.clone_from(&x.node_id),
                None => *out = NodeId::NULL,
            },
        }
    }

    /// The other end is outside this server (another server's node, or an id no node has).
    pub fn is_foreign(&self) -> bool {
        matches!(self.r.target_key(), Key::Foreign(_))
    }

    /// The reference as a definition has it.
    pub fn to_reference(&self) -> Reference {
        super::reference(self.store, self.r)
    }
}

impl<'a> NodeView<'a> {
    #[inline(always)]
    pub(crate) fn new(store: &'a Store, index: u32) -> Option<NodeView<'a>> {
        let rec = store.rec(index)?;
        Some(NodeView { store, rec, index })
    }

    /// The node's index (stable while the node exists).
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many nodes had this node's index before it.
    #[inline]
    pub fn generation(&self) -> u32 {
        self.rec.generation
    }

    #[inline]
    pub fn node_class(&self) -> NodeClass {
        NodeClass(self.rec.class as i32)
    }

    /// The NodeId, borrowed.
    #[inline]
    pub fn id(&self) -> IdRef<'a> {
        let r = self.rec;
        match r.id_kind {
            id_kind::NUMERIC => IdRef::Numeric(r.id_ns, r.id_pos),
            id_kind::STRING => IdRef::String(r.id_ns, self.store.id_text.get(r.id_pos, r.id_len)),
            id_kind::GUID => IdRef::Guid(
                r.id_ns,
                super::guid_from(self.store.id_bytes.get(r.id_pos, r.id_len)),
            ),
            _ => IdRef::ByteString(r.id_ns, self.store.id_bytes.get(r.id_pos, r.id_len)),
        }
    }

    /// The NodeId.
    pub fn node_id(&self) -> NodeId {
        self.store.node_id(self.rec)
    }

    /// Is this node's id `id`?
    #[inline]
    pub fn is(&self, id: &NodeId) -> bool {
        self.store.id_eq(self.rec, id)
    }

    /// The BrowseName: namespace and name (`None`: a null name).
    #[inline]
    pub fn name(&self) -> (u16, Option<&'a str>) {
        (self.rec.name_ns, self.store.strings.get(self.rec.name))
    }

    pub fn browse_name(&self) -> QualifiedName {
        let (ns, name) = self.name();
        QualifiedName {
            namespace_index: ns,
            name: UaString(name.map(str::to_string)),
        }
    }

    /// Is the BrowseName `q`?
    pub fn has_name(&self, q: &QualifiedName) -> bool {
        let (ns, name) = self.name();
        ns == q.namespace_index && name == q.name.as_opt()
    }

    /// Writes the BrowseName into `out`, reusing its memory.
    pub fn write_name_into(&self, out: &mut QualifiedName) {
        let (ns, name) = self.name();
        out.namespace_index = ns;
        set_string(&mut out.name, name);
    }

    /// The DisplayName, borrowed.
    #[inline]
    pub fn display(&self) -> TextRef<'a> {
        match self.store.texts(self.rec.texts) {
            Some(t) if t.own_display => TextRef {
                locale: self.store.strings.get(t.display_locale),
                text: self.store.strings.get(t.display_text),
            },
            _ => TextRef {
                locale: None,
                text: self.store.strings.get(self.rec.name),
            },
        }
    }

    pub fn display_name(&self) -> LocalizedText {
        self.display().to_owned()
    }

    pub fn description(&self) -> LocalizedText {
        match self.store.texts(self.rec.texts) {
            Some(t) => TextRef {
                locale: self.store.strings.get(t.description_locale),
                text: self.store.strings.get(t.description_text),
            }
            .to_owned(),
            None => LocalizedText::default(),
        }
    }

    pub fn write_mask(&self) -> u32 {
        self.store.masks(self.index, self.rec).0
    }

    pub fn user_write_mask(&self) -> u32 {
        self.store.masks(self.index, self.rec).1
    }

    /// The type definition's node index.
    #[inline]
    pub fn type_definition_index(&self) -> Option<u32> {
        (self.rec.type_def != NO_INDEX).then_some(self.rec.type_def)
    }

    /// The type definition (the target of the forward HasTypeDefinition reference).
    pub fn type_definition(&self) -> Option<ExpandedNodeId> {
        let t = self.type_definition_index()?;
        let r = self.store.rec(t)?;
        Some(ExpandedNodeId::local(self.store.node_id(r)))
    }

    /// The type definition node.
    #[inline]
    pub fn type_definition_node(&self) -> Option<NodeView<'a>> {
        NodeView::new(self.store, self.type_definition_index()?)
    }

    /// The references (the type definition's first, as a forward HasTypeDefinition),
    /// compact.
    pub fn refs(&self) -> impl Iterator<Item = RefView<'a>> + 'a {
        let store = self.store;
        let td = self.type_definition_index().and_then(|t| {
            let ht = store.ns0(ids::HAS_TYPE_DEFINITION)?;
            Some(Ref::new(Key::Local(ht), true, Key::Local(t)))
        });
        td.into_iter()
            .chain(self.rec.refs())
            .map(move |r| RefView { store, r })
    }

    /// The references as definitions have them.
    pub fn references(&self) -> impl Iterator<Item = Reference> + 'a {
        self.refs().map(|r| r.to_reference())
    }

    /// How many references (the type definition's included).
    pub fn reference_count(&self) -> usize {
        self.rec.ref_count() + self.type_definition_index().is_some() as usize
    }

    /// The class attributes.
    pub fn attributes(&self) -> AttrsView<'a> {
        let r = self.rec;
        match NodeClass(r.class as i32) {
            NodeClass::Object => AttrsView::Object {
                event_notifier: r.notifier,
            },
            NodeClass::Variable => match self.as_variable() {
                Some(v) => AttrsView::Variable(v),
                None => AttrsView::Object { event_notifier: 0 },
            },
            _ => match self.store.type_attributes(r.data) {
                Some(TypeAttributes::Method {
                    executable,
                    user_executable,
                }) => AttrsView::Method {
                    executable: *executable,
                    user_executable: *user_executable,
                },
                Some(TypeAttributes::ObjectType { is_abstract }) => AttrsView::ObjectType {
                    is_abstract: *is_abstract,
                },
                Some(TypeAttributes::VariableType(v)) => AttrsView::VariableType(v),
                Some(TypeAttributes::ReferenceType {
                    is_abstract,
                    symmetric,
                    inverse_name,
                }) => AttrsView::ReferenceType {
                    is_abstract: *is_abstract,
                    symmetric: *symmetric,
                    inverse_name: inverse_name.as_ref(),
                },
                Some(TypeAttributes::DataType {
                    is_abstract,
                    data_type_definition,
                }) => AttrsView::DataType {
                    is_abstract: *is_abstract,
                    data_type_definition: data_type_definition.as_ref(),
                },
                Some(TypeAttributes::View { contains_no_loops }) => AttrsView::View {
                    contains_no_loops: *contains_no_loops,
                    event_notifier: r.notifier,
                },
                Some(TypeAttributes::None) | None => AttrsView::Object {
                    event_notifier: r.notifier,
                },
            },
        }
    }

    /// The Variable attributes, when this is a Variable.
    #[inline]
    pub fn as_variable(&self) -> Option<VariableView<'a>> {
        if self.rec.class != NodeClass::Variable.0 as u8 {
            return None;
        }
        Some(VariableView {
            shape: self.store.shape(self.rec.shape)?,
            cell: self.store.cells.get(self.rec.data)?,
            store: self.store,
        })
    }

    /// The stored value cell of a Variable whose AccessLevel and UserAccessLevel allow
    /// reading it (the Read path: the record and the cell, not the shape).
    #[inline]
    pub fn readable_cell(&self) -> Option<&'a ValueCell> {
        if self.rec.class != NodeClass::Variable.0 as u8
            || self.rec.flags & super::flag::READABLE == 0
        {
            return None;
        }
        self.store.cells.get(self.rec.data).filter(|c| c.stores())
    }

    /// The stored value cell, when this is a Variable with a stored value.
    #[inline]
    pub fn value_cell(&self) -> Option<&'a ValueCell> {
        if self.rec.class != NodeClass::Variable.0 as u8 {
            return None;
        }
        self.store.cells.get(self.rec.data).filter(|c| c.stores())
    }

    /// IsAbstract for the type node classes.
    pub fn is_abstract(&self) -> Option<bool> {
        match self.attributes() {
            AttrsView::ObjectType { is_abstract }
            | AttrsView::ReferenceType { is_abstract, .. }
            | AttrsView::DataType { is_abstract, .. } => Some(is_abstract),
            AttrsView::VariableType(v) => Some(v.is_abstract),
            _ => None,
        }
    }

    /// EventNotifier of Objects and Views.
    pub fn event_notifier(&self) -> Option<u8> {
        match NodeClass(self.rec.class as i32) {
            NodeClass::Object | NodeClass::View => Some(self.rec.notifier),
            _ => None,
        }
    }
}
