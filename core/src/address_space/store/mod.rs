//! The compact node store: how the address space keeps its nodes (docs/Architecture.md,
//! "The node store").
//!
//! * **Records.** A node is a 56-byte [`Rec`] in copy-on-write pages of 1,024: its NodeId
//!   (a number, or the place of its bytes in an [`Arena`]), class, interned BrowseName,
//!   interned texts (DisplayName and Description, one id for both; 0 when the DisplayName is
//!   the BrowseName's text and there is no Description), generation, type definition (a node
//!   index: HasTypeDefinition is a field, not a reference), the index of its value cell or
//!   of its class's attributes, its Variable shape, and its references: the first inline,
//!   the others in a shared [`RefList`].
//! * **References** are 8 bytes at each end ([`Ref`]): the other end's node index, the
//!   reference type's node index and the direction. A reference to a node that is not here
//!   names an interned ExpandedNodeId instead (looked up again when browsed, so a node added
//!   later is found). A big list is kept in chunks of 256, so a change copies one chunk and
//!   the chunk pointers, not the list.
//! * **Shared parts.** What many nodes have alike is stored once and named by a number:
//!   strings (browse names, texts), texts, Variable shapes (DataType, ValueRank,
//!   ArrayDimensions, AccessLevel, MinimumSamplingInterval, Historizing) — so the children
//!   of a thousand instances of one type cost one copy of what their declarations say.
//! * **Values** live in their cells ([`ValueCell`], a table of its own shared by every
//!   version: a version that adds a node initialises a free cell; nothing is ever copied).
//! * **Lookup.** Numeric ids of namespaces 0 and 1 below 2^20 through dense tables, all
//!   others through a [`HashIndex`] of node indexes (the id is compared in the record).

pub(crate) mod free;
pub(crate) mod index;
pub(crate) mod paged;
pub(crate) mod prefetch;
pub(crate) mod strings;
mod view;

use std::collections::HashMap;
use std::sync::Arc;

use free::FreeList;
use index::{hash_key, hash_num, Hash, HashIndex};
use paged::Paged;
use strings::{Arena, Strings, NULL_STR};
pub use view::{
    AttrsView, ComputedView, IdRef, NodeView, RefView, SourceView, TextRef, VariableView,
};

use super::app::{AsyncSource, ReadFn};
use super::value::ValueCell;
use super::{
    ids, ClassAttributes, Dynamic, Node, NodeClass, Reference, ValueSource, VariableTypeAttributes,
};
use crate::types::{
    ExpandedNodeId, ExtensionObject, Guid, Identifier, LocalizedText, NodeId, StatusCode,
};

pub(crate) const NO_INDEX: u32 = u32::MAX;
/// Numeric ids below this go into the dense tables of namespaces 0 and 1.
pub(crate) const DENSE_ID_MAX: u32 = 1 << 20;
/// Node indexes stay below this (a reference keeps its type's index in 28 bits).
pub(crate) const MAX_NODES: u32 = index::MAX_ENTRY;

/// NodeId identifier kinds in a record.
pub(crate) mod id_kind {
    pub const NUMERIC: u8 = 0;
    pub const STRING: u8 = 1;
    pub const GUID: u8 = 2;
    pub const BYTES: u8 = 3;
}

/// Record flags.
mod flag {
    /// WriteMask or UserWriteMask is not 0 (in [`super::Store::masks`]).
    pub const MASKS: u8 = 1;
    /// A Variable whose AccessLevel and UserAccessLevel both have CurrentRead (the Read
    /// path's check without the shape).
    pub const READABLE: u8 = 2;
}

/// One node. See the module documentation. `class == 0`: no node at this index.
#[derive(Clone, Default, Debug)]
pub(crate) struct Rec {
    /// The numeric identifier, or the arena position of the string, Guid or bytes.
    pub id_pos: u32,
    pub id_len: u32,
    pub id_ns: u16,
    pub id_kind: u8,
    /// NodeClass (one bit per class).
    pub class: u8,
    pub name_ns: u16,
    pub flags: u8,
    /// EventNotifier of Objects and Views.
    pub notifier: u8,
    /// The BrowseName's string.
    pub name: u32,
    /// DisplayName and Description ([`NodeTexts`]); 0: the BrowseName's text, none.
    pub texts: u32,
    pub generation: u32,
    /// The type definition's node index, or `NO_INDEX`.
    pub type_def: u32,
    /// A Variable's cell; the class attributes of the type classes, Methods and Views.
    pub data: u32,
    /// A Variable's [`VariableShape`].
    pub shape: u32,
    /// The first reference (`Ref::NONE` when there is none).
    pub first: Ref,
    /// The others.
    pub more: Option<Arc<RefList>>,
}

impl Rec {
    #[inline]
    pub(crate) fn is_node(&self) -> bool {
        self.class != 0
    }

    /// Every reference (not the type definition).
    #[inline]
    pub(crate) fn refs(&self) -> impl Iterator<Item = Ref> + '_ {
        self.first
            .is_some()
            .then_some(self.first)
            .into_iter()
            .chain(self.more.iter().flat_map(|m| m.iter()))
    }

    pub(crate) fn ref_count(&self) -> usize {
        self.first.is_some() as usize + self.more.as_ref().map_or(0, |m| m.len())
    }

    pub(crate) fn push_ref(&mut self, r: Ref) {
        if !self.first.is_some() {
            self.first = r;
        } else {
            Arc::make_mut(self.more.get_or_insert_with(Default::default)).push(r);
        }
    }

    /// Keeps the references `keep` accepts; how many went.
    pub(crate) fn retain_refs(&mut self, mut keep: impl FnMut(Ref) -> bool) -> usize {
        let mut gone = 0;
        if let Some(m) = &mut self.more {
            if m.iter().any(|r| !keep(r)) {
                gone += Arc::make_mut(m).retain(&mut keep);
            }
            if m.len() == 0 {
                self.more = None;
            }
        }
        if self.first.is_some() && !keep(self.first) {
            gone += 1;
            self.first = self
                .more
                .as_mut()
                .and_then(|m| Arc::make_mut(m).pop_front())
                .unwrap_or(Ref::NONE);
            if self.more.as_ref().is_some_and(|m| m.len() == 0) {
                self.more = None;
            }
        }
        gone
    }

    /// Replaces the references (in this order).
    pub(crate) fn set_refs(&mut self, refs: Vec<Ref>) {
        let mut it = refs.into_iter();
        self.first = it.next().unwrap_or(Ref::NONE);
        let rest: RefList = it.collect();
        self.more = (rest.len() > 0).then(|| Arc::new(rest));
    }
}

/// One end of a reference. See the module documentation.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub(crate) struct Ref {
    /// The other end: a node index, or a foreign id ([`Ref::FOREIGN_TARGET`]).
    pub target: u32,
    /// The reference type (28 bits: a node index, or a foreign id with
    /// [`Ref::FOREIGN_TYPE`]) and the flags.
    pub meta: u32,
}

impl Ref {
    const TYPE_MASK: u32 = (1 << 28) - 1;
    const FORWARD: u32 = 1 << 28;
    const FOREIGN_TARGET: u32 = 1 << 29;
    const FOREIGN_TYPE: u32 = 1 << 30;
    const PRESENT: u32 = 1 << 31;
    pub(crate) const NONE: Ref = Ref { target: 0, meta: 0 };

    pub(crate) fn new(reference_type: Key, is_forward: bool, target: Key) -> Ref {
        let mut meta = Ref::PRESENT;
        match reference_type {
            Key::Local(i) => meta |= i & Ref::TYPE_MASK,
            Key::Foreign(f) => meta |= (f & Ref::TYPE_MASK) | Ref::FOREIGN_TYPE,
        }
        if is_forward {
            meta |= Ref::FORWARD;
        }
        let target = match target {
            Key::Local(i) => i,
            Key::Foreign(f) => {
                meta |= Ref::FOREIGN_TARGET;
                f
            }
        };
        Ref { target, meta }
    }

    #[inline]
    pub(crate) fn is_some(self) -> bool {
        self.meta & Ref::PRESENT != 0
    }

    #[inline]
    pub(crate) fn is_forward(self) -> bool {
        self.meta & Ref::FORWARD != 0
    }

    #[inline]
    pub(crate) fn target_key(self) -> Key {
        if self.meta & Ref::FOREIGN_TARGET != 0 {
            Key::Foreign(self.target)
        } else {
            Key::Local(self.target)
        }
    }

    #[inline]
    pub(crate) fn type_key(self) -> Key {
        let t = self.meta & Ref::TYPE_MASK;
        if self.meta & Ref::FOREIGN_TYPE != 0 {
            Key::Foreign(t)
        } else {
            Key::Local(t)
        }
    }

    /// The same reference seen from the other end (`from`: this end's node).
    pub(crate) fn inverse(self, from: u32) -> Ref {
        Ref::new(self.type_key(), !self.is_forward(), Key::Local(from))
    }
}

/// A node in this store (by index) or an id kept as is (by the foreign id).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Key {
    Local(u32),
    Foreign(u32),
}

const REF_CHUNK: usize = 256;

/// A node's references after the first: full chunks shared between versions, then the ones
/// added last. Appending copies at most the last 256; removing one copies its chunk.
#[derive(Clone, Default, Debug)]
pub(crate) struct RefList {
    chunks: Vec<Arc<[Ref]>>,
    head: Vec<Ref>,
}

impl RefList {
    pub(crate) fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.len()).sum::<usize>() + self.head.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Ref> + '_ {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .chain(self.head.iter())
            .copied()
    }

    pub(crate) fn push(&mut self, r: Ref) {
        if self.head.len() >= REF_CHUNK {
            let full = std::mem::take(&mut self.head);
            self.chunks.push(Arc::from(full));
        }
        self.head.push(r);
    }

    fn pop_front(&mut self) -> Option<Ref> {
        match self.chunks.first() {
            Some(c) => {
                let first = *c.first()?;
                let rest: Vec<Ref> = c.iter().skip(1).copied().collect();
                if rest.is_empty() {
                    self.chunks.remove(0);
                } else if let Some(c) = self.chunks.first_mut() {
                    *c = Arc::from(rest);
                }
                Some(first)
            }
            None if !self.head.is_empty() => Some(self.head.remove(0)),
            None => None,
        }
    }

    /// Keeps what `keep` accepts (chunks with nothing to remove stay shared); how many went.
    fn retain(&mut self, keep: &mut impl FnMut(Ref) -> bool) -> usize {
        let mut gone = 0;
        self.chunks.retain_mut(|c| {
            if c.iter().all(|&r| keep(r)) {
                return true;
            }
            let kept: Vec<Ref> = c.iter().copied().filter(|&r| keep(r)).collect();
            gone += c.len() - kept.len();
            *c = Arc::from(kept);
            !c.is_empty()
        });
        let before = self.head.len();
        self.head.retain(|&r| keep(r));
        gone + before - self.head.len()
    }
}

impl FromIterator<Ref> for RefList {
    fn from_iter<I: IntoIterator<Item = Ref>>(iter: I) -> RefList {
        let mut l = RefList::default();
        for r in iter {
            l.push(r);
        }
        l
    }
}

/// A node's DisplayName and Description, by their strings.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub(crate) struct NodeTexts {
    /// false: the DisplayName is the BrowseName's text with no locale.
    pub own_display: bool,
    pub display_locale: u32,
    pub display_text: u32,
    pub description_locale: u32,
    pub description_text: u32,
}

impl NodeTexts {
    fn hash(&self) -> Hash {
        let b = [
            self.own_display as u32,
            self.display_locale,
            self.display_text,
            self.description_locale,
            self.description_text,
        ];
        let mut bytes = [0u8; 20];
        for (c, v) in bytes.chunks_mut(4).zip(b) {
            c.copy_from_slice(&v.to_le_bytes());
        }
        hash_key(0, 1, &bytes)
    }
}

/// What the Variables of one kind have alike: every attribute but the value and the names.
#[derive(Clone, Debug, PartialEq)]
pub struct VariableShape {
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

impl Default for VariableShape {
    fn default() -> Self {
        VariableShape {
            data_type: NodeId::NULL,
            value_rank: -1,
            array_dimensions: Vec::new(),
            access_level: 0,
            user_access_level: 0,
            access_level_ex: None,
            minimum_sampling_interval: 0.0,
            historizing: false,
        }
    }
}

impl VariableShape {
    fn hash(&self) -> Hash {
        let mut b = Vec::with_capacity(48);
        crate::encoding::Encode::encode(&self.data_type, &mut b);
        b.extend_from_slice(&self.value_rank.to_le_bytes());
        for d in &self.array_dimensions {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.push(self.access_level);
        b.push(self.user_access_level);
        b.extend_from_slice(
            &self
                .access_level_ex
                .map_or(u64::MAX, u64::from)
                .to_le_bytes(),
        );
        b.extend_from_slice(&self.minimum_sampling_interval.to_bits().to_le_bytes());
        b.push(self.historizing as u8);
        hash_key(0, 2, &b)
    }
}

/// The attributes of the classes with few nodes (types, Methods, Views).
#[derive(Clone, Debug, Default)]
pub(crate) enum TypeAttributes {
    #[default]
    None,
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
    },
}

/// Where a Variable's value comes from when it is not stored in its cell.
#[derive(Clone, Default)]
pub(crate) enum Source {
    #[default]
    None,
    Dynamic(Dynamic),
    Computed(ReadFn),
    Async(Arc<AsyncSource>),
}

const CELL_PAGE: usize = 1024;

/// The value cells, shared by every version (cells are initialised in place, atomically;
/// a version that needs more adds pages).
#[derive(Clone, Default)]
pub(crate) struct CellTable {
    pages: Vec<Arc<[ValueCell; CELL_PAGE]>>,
    len: u32,
}

impl CellTable {
    #[inline(always)]
    pub(crate) fn get(&self, i: u32) -> Option<&ValueCell> {
        self.pages
            .get(i as usize / CELL_PAGE)?
            .get(i as usize % CELL_PAGE)
    }

    /// A never used cell at the end.
    fn grow(&mut self) -> u32 {
        let i = self.len;
        if i as usize / CELL_PAGE >= self.pages.len() {
            self.pages.push(paged::new_page());
        }
        self.len += 1;
        i
    }

    pub(crate) fn len(&self) -> u32 {
        self.len
    }

    fn bytes(&self) -> usize {
        self.pages.len() * std::mem::size_of::<[ValueCell; CELL_PAGE]>()
    }
}

/// A version's token: alive as long as that version is (an `Arc` in it).
#[derive(Default, Debug)]
pub(crate) struct VersionToken;

/// What a freed cell, source or class attributes waits for: the token of the version the
/// removal was made from (the writer's base, and whoever still reads it) and every shard
/// holding the version of the removal or a later one (as for node indexes,
/// [`super::edit`]).
type Waiter = (std::sync::Weak<VersionToken>, u64);

/// Cells, sources and class attributes freed by removed nodes, reused by later nodes once
/// no shard and no holder of the base version can see the removed node. A published version
/// keeps them in its hand-over slot, not in its store ([`free`]).
#[derive(Default, Debug)]
pub(crate) struct Freed {
    cells: FreeList<(u32, Waiter)>,
    sources: FreeList<(u32, Waiter)>,
    types: FreeList<(u32, Waiter)>,
    /// The oldest version a shard holds (set by the writer when its edit begins).
    pub oldest_held: u64,
}

impl Clone for Freed {
    /// Empty lists: a store is cloned by an edit, which takes the lists from the hand-over
    /// slot instead (a published version's store holds none).
    fn clone(&self) -> Self {
        Freed {
            oldest_held: self.oldest_held,
            ..Default::default()
        }
    }
}

impl Freed {
    /// Starts (or stops) logging the changes, for [`Freed::rollback`].
    pub(crate) fn record(&mut self, on: bool) {
        self.cells.record(on);
        self.sources.record(on);
        self.types.record(on);
    }

    /// Undoes the changes logged since recording began.
    pub(crate) fn rollback(&mut self) {
        self.cells.rollback();
        self.sources.rollback();
        self.types.rollback();
    }
}

fn take_free(list: &mut FreeList<(u32, Waiter)>, oldest_held: u64) -> Option<u32> {
    list.take_first(|(_, (w, v))| w.strong_count() == 0 && *v <= oldest_held)
        .map(|(i, _)| i)
}

/// The store. See the module documentation.
#[derive(Clone, Default)]
pub(crate) struct Store {
    pub recs: Paged<Rec, 1024>,
    pub count: usize,
    /// `dense[ns][n]`: the index of numeric id `n` of namespace `ns` (0 or 1), or NO_INDEX.
    /// At least as long as the highest id (grown by doubling).
    pub dense: [Arc<[u32]>; 2],
    pub ids: HashIndex,
    /// String NodeIds.
    pub id_text: Arena,
    /// Guid and ByteString NodeIds.
    pub id_bytes: Arena<Vec<u8>>,
    pub strings: Strings,
    texts: Paged<NodeTexts, 256>,
    texts_index: HashIndex,
    shapes: Paged<VariableShape, 256>,
    shapes_index: HashIndex,
    /// The shape interned last: Variables added one after another are mostly alike (a
    /// plant's million Doubles hash no shape).
    last_shape: u32,
    types: Paged<TypeAttributes, 256>,
    masks: Arc<HashMap<u32, (u32, u32)>>,
    foreign: Paged<ExpandedNodeId, 256>,
    foreign_index: HashIndex,
    pub cells: CellTable,
    sources: Paged<Source, 1024>,
    pub(crate) freed: Freed,
}

/// The hash of an interned foreign id.
fn foreign_hash(id: &ExpandedNodeId) -> Hash {
    let mut b = Vec::new();
    crate::encoding::Encode::encode(id, &mut b);
    hash_key(0, 3, &b)
}

/// Is `id` kept in the dense tables (a numeric id of namespace 0 or 1 below
/// [`DENSE_ID_MAX`]) rather than the hash index?
#[inline]
fn is_dense(id: &NodeId) -> bool {
    matches!(id.identifier, Identifier::Numeric(n) if n < DENSE_ID_MAX && id.namespace < 2)
}

/// The hash of a NodeId as the id index keeps it.
#[inline]
fn id_hash(id: &NodeId) -> Hash {
    match &id.identifier {
        Identifier::Numeric(n) => hash_num(id.namespace, id_kind::NUMERIC, *n as u64),
        Identifier::String(s) => hash_key(id.namespace, id_kind::STRING, s.as_bytes()),
        Identifier::Guid(g) => hash_key(id.namespace, id_kind::GUID, &guid_bytes(g)),
        Identifier::ByteString(b) => hash_key(id.namespace, id_kind::BYTES, b),
    }
}

pub(crate) fn guid_bytes(g: &Guid) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&g.data1.to_le_bytes());
    b[4..6].copy_from_slice(&g.data2.to_le_bytes());
    b[6..8].copy_from_slice(&g.data3.to_le_bytes());
    b[8..].copy_from_slice(&g.data4);
    b
}

pub(crate) fn guid_from(b: &[u8]) -> Guid {
    let mut g = Guid::default();
    if let (Some(a), Some(c), Some(d), Some(e)) =
        (b.get(..4), b.get(4..6), b.get(6..8), b.get(8..16))
    {
        g.data1 = u32::from_le_bytes(a.try_into().unwrap_or_default());
        g.data2 = u16::from_le_bytes(c.try_into().unwrap_or_default());
        g.data3 = u16::from_le_bytes(d.try_into().unwrap_or_default());
        g.data4 = e.try_into().unwrap_or_default();
    }
    g
}

fn class_bits(c: NodeClass) -> u8 {
    c.0 as u8
}

impl Store {
    pub(crate) fn new() -> Store {
        let mut s = Store {
            dense: [Arc::from(Vec::new()), Arc::from(Vec::new())],
            ..Default::default()
        };
        s.texts.push(NodeTexts::default());
        s.shapes.push(VariableShape::default());
        s.types.push(TypeAttributes::None);
        s
    }

    /// The index of `id`. The dense case is inlined into every caller (a bounds check and
    /// one load); the hashed one stays out of line.
    #[inline(always)]
    pub(crate) fn lookup(&self, id: &NodeId) -> Option<u32> {
        if let Identifier::Numeric(n) = id.identifier {
            if n < DENSE_ID_MAX {
                if let Some(t) = self.dense.get(id.namespace as usize) {
                    return match t.get(n as usize) {
                        Some(&i) if i != NO_INDEX => Some(i),
                        _ => None,
                    };
                }
            }
        }
        self.lookup_hashed(id)
    }

    #[inline(never)]
    fn lookup_hashed(&self, id: &NodeId) -> Option<u32> {
        self.ids.find(id_hash(id), |i| {
            self.recs.get(i).is_some_and(|r| self.id_eq(r, id))
        })
    }

    /// The record of the node at `i`.
    #[inline(always)]
    pub(crate) fn rec(&self, i: u32) -> Option<&Rec> {
        self.recs.get(i).filter(|r| r.is_node())
    }

    /// Is `r`'s NodeId `id`?
    #[inline]
    pub(crate) fn id_eq(&self, r: &Rec, id: &NodeId) -> bool {
        if r.id_ns != id.namespace {
            return false;
        }
        match &id.identifier {
            Identifier::Numeric(n) => r.id_kind == id_kind::NUMERIC && r.id_pos == *n,
            Identifier::String(s) => {
                r.id_kind == id_kind::STRING
                    && r.id_len as usize == s.len()
                    && self.id_text.get(r.id_pos, r.id_len) == s
            }
            Identifier::Guid(g) => {
                r.id_kind == id_kind::GUID && self.id_bytes.get(r.id_pos, r.id_len) == guid_bytes(g)
            }
            Identifier::ByteString(b) => {
                r.id_kind == id_kind::BYTES && self.id_bytes.get(r.id_pos, r.id_len) == &b[..]
            }
        }
    }

    fn rec_hash(&self, r: &Rec) -> Hash {
        match r.id_kind {
            id_kind::NUMERIC => hash_num(r.id_ns, id_kind::NUMERIC, r.id_pos as u64),
            k => hash_key(r.id_ns, k, self.id_raw(r)),
        }
    }

    /// The id index's hash of the node at `i`.
    fn index_hash(&self, i: u32) -> Hash {
        match self.recs.get(i) {
            Some(x) if x.id_kind == id_kind::NUMERIC => {
                hash_num(x.id_ns, id_kind::NUMERIC, x.id_pos as u64)
            }
            Some(x) => hash_key(x.id_ns, x.id_kind, self.id_raw(x)),
            None => Hash(0),
        }
    }

    /// Makes room for `extra` more nodes in the id index and the string index (a builder
    /// that knows its count rebuilds each of their sub-tables once).
    pub(crate) fn reserve(&mut self, extra: usize) {
        let mut ix = self.ids.take();
        ix.reserve(extra, &|i| self.index_hash(i));
        self.ids = ix;
        self.strings.reserve(extra);
    }

    /// The bytes of a record's string, Guid or ByteString identifier.
    #[inline]
    pub(crate) fn id_raw(&self, r: &Rec) -> &[u8] {
        if r.id_kind == id_kind::STRING {
            self.id_text.get(r.id_pos, r.id_len).as_bytes()
        } else {
            self.id_bytes.get(r.id_pos, r.id_len)
        }
    }

    /// The NodeId of a record.
    pub(crate) fn node_id(&self, r: &Rec) -> NodeId {
        let identifier = match r.id_kind {
            id_kind::NUMERIC => Identifier::Numeric(r.id_pos),
            id_kind::STRING => Identifier::String(self.id_text.get(r.id_pos, r.id_len).to_string()),
            id_kind::GUID => Identifier::Guid(guid_from(self.id_bytes.get(r.id_pos, r.id_len))),
            _ => Identifier::ByteString(self.id_bytes.get(r.id_pos, r.id_len).to_vec()),
        };
        NodeId {
            namespace: r.id_ns,
            identifier,
        }
    }

    pub(crate) fn foreign(&self, f: u32) -> Option<&ExpandedNodeId> {
        self.foreign.get(f)
    }

    pub(crate) fn texts(&self, t: u32) -> Option<&NodeTexts> {
        self.texts.get(t)
    }

    pub(crate) fn shape(&self, s: u32) -> Option<&VariableShape> {
        self.shapes.get(s)
    }

    pub(crate) fn type_attributes(&self, t: u32) -> Option<&TypeAttributes> {
        self.types.get(t)
    }

    pub(crate) fn source(&self, s: u32) -> Option<&Source> {
        self.sources.get(s)
    }

    pub(crate) fn masks(&self, index: u32, r: &Rec) -> (u32, u32) {
        if r.flags & flag::MASKS == 0 {
            return (0, 0);
        }
        self.masks.get(&index).copied().unwrap_or_default()
    }

    /// The interned foreign id of `id`, when it was interned.
    pub(crate) fn find_foreign(&self, id: &ExpandedNodeId) -> Option<u32> {
        if self.foreign.len() == 0 {
            return None;
        }
        self.find_foreign_hashed(id, foreign_hash(id))
    }

    fn find_foreign_hashed(&self, id: &ExpandedNodeId, h: Hash) -> Option<u32> {
        self.foreign_index
            .find(h, |f| self.foreign.get(f).is_some_and(|x| x == id))
    }

    /// The key of an id: the node's index when it is here, else an interned foreign id.
    pub(crate) fn key(&mut self, id: &ExpandedNodeId) -> Result<Key, StatusCode> {
        if let Some(i) = id.as_local().and_then(|l| self.lookup(l)) {
            return Ok(Key::Local(i));
        }
        let h = foreign_hash(id);
        if let Some(f) = self.find_foreign_hashed(id, h) {
            return Ok(Key::Foreign(f));
        }
        if self.foreign.len() >= index::MAX_ENTRY {
            return Err(StatusCode::BadResourceUnavailable);
        }
        let f = self.foreign.push(id.clone());
        let foreign = &self.foreign;
        let rehash = |f: u32| foreign.get(f).map_or(Hash(0), foreign_hash);
        let mut ix = self.foreign_index.take();
        ix.insert(h, f, &rehash);
        self.foreign_index = ix;
        Ok(Key::Foreign(f))
    }

    /// The ExpandedNodeId a key names.
    pub(crate) fn key_id(&self, k: Key) -> ExpandedNodeId {
        match k {
            Key::Local(i) => self
                .rec(i)
                .map(|r| ExpandedNodeId::local(self.node_id(r)))
                .unwrap_or_default(),
            Key::Foreign(f) => self.foreign(f).cloned().unwrap_or_default(),
        }
    }

    /// The node a key names now (a foreign id looked up again).
    #[inline]
    pub(crate) fn key_index(&self, k: Key) -> Option<u32> {
        match k {
            Key::Local(i) => self.rec(i).map(|_| i),
            Key::Foreign(f) => {
                let x = self.foreign.get(f)?;
                self.lookup(x.as_local()?)
            }
        }
    }

    fn intern_texts(&mut self, t: NodeTexts) -> u32 {
        if t == NodeTexts::default() {
            return 0;
        }
        let h = t.hash();
        if let Some(i) = self
            .texts_index
            .find(h, |i| self.texts.get(i).is_some_and(|x| *x == t))
        {
            return i;
        }
        let i = self.texts.push(t);
        let texts = &self.texts;
        let rehash = |i: u32| texts.get(i).map_or(Hash(0), NodeTexts::hash);
        let mut ix = self.texts_index.take();
        ix.insert(h, i, &rehash);
        self.texts_index = ix;
        i
    }

    fn intern_shape(&mut self, s: VariableShape) -> u32 {
        if self.shapes.get(self.last_shape) == Some(&s) {
            return self.last_shape;
        }
        let i = self.intern_shape_hashed(s);
        self.last_shape = i;
        i
    }

    fn intern_shape_hashed(&mut self, s: VariableShape) -> u32 {
        let h = s.hash();
        if let Some(i) = self
            .shapes_index
            .find(h, |i| self.shapes.get(i).is_some_and(|x| *x == s))
        {
            return i;
        }
        let i = self.shapes.push(s);
        let shapes = &self.shapes;
        let rehash = |i: u32| shapes.get(i).map_or(Hash(0), VariableShape::hash);
        let mut ix = self.shapes_index.take();
        ix.insert(h, i, &rehash);
        self.shapes_index = ix;
        i
    }

    fn str_id(&mut self, s: &crate::types::UaString) -> Result<u32, StatusCode> {
        self.strings
            .intern(s.as_opt())
            .ok_or(StatusCode::BadResourceUnavailable)
    }

    fn alloc_cell(&mut self) -> u32 {
        take_free(&mut self.freed.cells, self.freed.oldest_held)
            .unwrap_or_else(|| self.cells.grow())
    }

    fn alloc_source(&mut self, s: Source) -> u32 {
        match take_free(&mut self.freed.sources, self.freed.oldest_held) {
            Some(i) => {
                self.sources.set(i, s);
                i
            }
            None => self.sources.push(s),
        }
    }

    fn alloc_type(&mut self, t: TypeAttributes) -> u32 {
        match take_free(&mut self.freed.types, self.freed.oldest_held) {
            Some(i) => {
                self.types.set(i, t);
                i
            }
            None => self.types.push(t),
        }
    }

    /// Puts `node` at `index` (an empty slot) with generation `generation`: its id in the
    /// id tables, its names and shape interned, its value in a cell, its declared references
    /// (a target or type not here yet kept by id). No inverse is added here
    /// ([`Store::link_inverses`]). `BadNodeIdExists` when the id is taken.
    pub(crate) fn insert(
        &mut self,
        index: u32,
        generation: u32,
        mut node: Node,
    ) -> Result<(), StatusCode> {
        let node_id = std::mem::take(&mut node.node_id);
        self.insert_as(index, generation, &node_id, node)
    }

    /// [`Store::insert`] of `node` under `node_id` (`node`'s own NodeId is not read), so a
    /// caller that names the node in its error keeps the NodeId without copying it.
    pub(crate) fn insert_as(
        &mut self,
        index: u32,
        generation: u32,
        node_id: &NodeId,
        node: Node,
    ) -> Result<(), StatusCode> {
        if index >= MAX_NODES {
            return Err(StatusCode::BadResourceUnavailable);
        }
        // The first slots both probes below read (the id index's and the string index's
        // for the BrowseName) are asked for together: a big build waits for the two cache
        // misses at once, not one after the other.
        let id_hash = (!is_dense(node_id)).then(|| id_hash(node_id));
        let name_hash = node.browse_name.name.as_opt().map(Strings::hash);
        if let Some(h) = id_hash {
            self.ids.touch(h);
        }
        if let Some(h) = name_hash {
            self.strings.touch(h);
        }
        // The id claimed first, in one probe of its table: a taken one is refused before
        // anything is stored.
        let hashed = self.claim_id(index, node_id, id_hash)?;
        let Node {
            node_id: _,
            node_class,
            browse_name,
            display_name,
            description,
            write_mask,
            user_write_mask,
            references,
            generation: _,
            attributes,
        } = node;
        let mut r = Rec {
            id_ns: node_id.namespace,
            class: class_bits(node_class),
            name_ns: browse_name.namespace_index,
            generation,
            type_def: NO_INDEX,
            data: NO_INDEX,
            ..Default::default()
        };
        if let Err(e) = self.name_rec(
            &mut r,
            node_id,
            (&browse_name, name_hash),
            &display_name,
            &description,
        ) {
            self.unclaim_id(index, node_id, hashed);
            return Err(e);
        }
        if write_mask != 0 || user_write_mask != 0 {
            r.flags |= flag::MASKS;
            Arc::make_mut(&mut self.masks).insert(index, (write_mask, user_write_mask));
        }
        match attributes {
            ClassAttributes::Object { event_notifier } => r.notifier = event_notifier,
            ClassAttributes::Variable(v) => {
                let read = super::access_level::CURRENT_READ;
                if v.access_level & read != 0 && v.user_access_level & read != 0 {
                    r.flags |= flag::READABLE;
                }
                r.shape = self.intern_shape(VariableShape {
                    data_type: v.data_type,
                    value_rank: v.value_rank,
                    array_dimensions: v.array_dimensions,
                    access_level: v.access_level,
                    user_access_level: v.user_access_level,
                    access_level_ex: v.access_level_ex,
                    minimum_sampling_interval: v.minimum_sampling_interval,
                    historizing: v.historizing,
                });
                let cell = self.alloc_cell();
                r.data = cell;
                match v.value {
                    ValueSource::Cell(c) => {
                        let (dv, version) = c.load_versioned();
                        if let Some(slot) = self.cells.get(cell) {
                            slot.init_value(dv, c.fixed_type(), version);
                        }
                    }
                    ValueSource::Dynamic(d) => {
                        let s = self.alloc_source(Source::Dynamic(d));
                        if let Some(slot) = self.cells.get(cell) {
                            slot.init_source(s, 0);
                        }
                    }
                    ValueSource::Computed(c) => {
                        let state = c.state.load(std::sync::atomic::Ordering::Relaxed);
                        let s = self.alloc_source(Source::Computed(c.read));
                        if let Some(slot) = self.cells.get(cell) {
                            slot.init_source(s, state);
                        }
                    }
                    ValueSource::Async(a) => {
                        let s = self.alloc_source(Source::Async(a));
                        if let Some(slot) = self.cells.get(cell) {
                            slot.init_source(s, 0);
                        }
                    }
                }
            }
            ClassAttributes::Method {
                executable,
                user_executable,
            } => {
                r.data = self.alloc_type(TypeAttributes::Method {
                    executable,
                    user_executable,
                })
            }
            ClassAttributes::ObjectType { is_abstract } => {
                r.data = self.alloc_type(TypeAttributes::ObjectType { is_abstract })
            }
            ClassAttributes::VariableType(v) => {
                r.data = self.alloc_type(TypeAttributes::VariableType(v))
            }
            ClassAttributes::ReferenceType {
                is_abstract,
                symmetric,
                inverse_name,
            } => {
                r.data = self.alloc_type(TypeAttributes::ReferenceType {
                    is_abstract,
                    symmetric,
                    inverse_name,
                })
            }
            ClassAttributes::DataType {
                is_abstract,
                data_type_definition,
            } => {
                r.data = self.alloc_type(TypeAttributes::DataType {
                    is_abstract,
                    data_type_definition,
                })
            }
            ClassAttributes::View {
                contains_no_loops,
                event_notifier,
            } => {
                r.notifier = event_notifier;
                r.data = self.alloc_type(TypeAttributes::View { contains_no_loops });
            }
        }
        // (The id is in the id tables since the claim, before the references: a reference
        // to itself is local.)
        self.recs.set(index, r);
        self.count += 1;
        // The declared references.
        let mut refs = Vec::with_capacity(references.len());
        let mut type_def = NO_INDEX;
        for x in references.into_vec() {
            let t = self.key(&ExpandedNodeId::local(x.reference_type.clone()))?;
            let target = self.key(&x.target)?;
            match (t, target) {
                (Key::Local(ti), Key::Local(tg))
                    if x.is_forward
                        && type_def == NO_INDEX
                        && self.is_ns0(ti, ids::HAS_TYPE_DEFINITION) =>
                {
                    type_def = tg;
                }
                _ => refs.push(Ref::new(t, x.is_forward, target)),
            }
        }
        dedup_refs(&mut refs);
        if let Some(rec) = self.recs.get_mut(index) {
            rec.type_def = type_def;
            rec.set_refs(refs);
        }
        Ok(())
    }

    /// Enters `node_id` in the id tables for the node at `index` (whose record is set
    /// next): `BadNodeIdExists` when it is taken. Whether it went to the hash index.
    /// `hash`: its [`id_hash`] when computed already.
    fn claim_id(
        &mut self,
        index: u32,
        node_id: &NodeId,
        hash: Option<Hash>,
    ) -> Result<bool, StatusCode> {
        if let Identifier::Numeric(n) = node_id.identifier {
            if is_dense(node_id) {
                if let Some(t) = self.dense.get_mut(node_id.namespace as usize) {
                    if t.get(n as usize).is_some_and(|&i| i != NO_INDEX) {
                        return Err(StatusCode::BadNodeIdExists);
                    }
                    set_dense(t, n, index);
                }
                return Ok(false);
            }
        }
        let mut ix = self.ids.take();
        let taken = ix.insert_unique(
            hash.unwrap_or_else(|| id_hash(node_id)),
            index,
            |i| self.recs.get(i).is_some_and(|r| self.id_eq(r, node_id)),
            &|i| self.index_hash(i),
        );
        self.ids = ix;
        taken
            .map(|()| true)
            .map_err(|_| StatusCode::BadNodeIdExists)
    }

    /// Takes back what [`Store::claim_id`] entered (the node could not be stored).
    fn unclaim_id(&mut self, index: u32, node_id: &NodeId, hashed: bool) {
        if hashed {
            self.ids.remove(id_hash(node_id), index);
        } else if let (Identifier::Numeric(n), Some(t)) = (
            &node_id.identifier,
            self.dense.get_mut(node_id.namespace as usize),
        ) {
            set_dense(t, *n, NO_INDEX);
        }
    }

    /// Sets the NodeId, BrowseName and texts of a record being inserted (its id's bytes
    /// stored, its strings interned).
    fn name_rec(
        &mut self,
        r: &mut Rec,
        node_id: &NodeId,
        (browse_name, name_hash): (&crate::types::QualifiedName, Option<Hash>),
        display_name: &LocalizedText,
        description: &LocalizedText,
    ) -> Result<(), StatusCode> {
        match &node_id.identifier {
            Identifier::Numeric(n) => {
                r.id_kind = id_kind::NUMERIC;
                r.id_pos = *n;
            }
            Identifier::String(s) => {
                r.id_kind = id_kind::STRING;
                r.id_len = u32::try_from(s.len()).map_err(|_| StatusCode::BadNodeIdInvalid)?;
                r.id_pos = self
                    .id_text
                    .push(s)
                    .ok_or(StatusCode::BadResourceUnavailable)?;
            }
            other => {
                let (k, bytes): (u8, std::borrow::Cow<'_, [u8]>) = match other {
                    Identifier::Guid(g) => (id_kind::GUID, guid_bytes(g).to_vec().into()),
                    Identifier::ByteString(b) => (id_kind::BYTES, b.as_slice().into()),
                    _ => (id_kind::BYTES, Vec::new().into()),
                };
                r.id_kind = k;
                r.id_len = u32::try_from(bytes.len()).map_err(|_| StatusCode::BadNodeIdInvalid)?;
                r.id_pos = self
                    .id_bytes
                    .push(&bytes)
                    .ok_or(StatusCode::BadResourceUnavailable)?;
            }
        }
        r.name = self
            .strings
            .intern_hashed(browse_name.name.as_opt(), name_hash)
            .ok_or(StatusCode::BadResourceUnavailable)?;
        let own_display = !(display_name.locale.is_null() && display_name.text == browse_name.name);
        let texts = NodeTexts {
            own_display,
            display_locale: if own_display {
                self.str_id(&display_name.locale)?
            } else {
                NULL_STR
            },
            display_text: if own_display {
                self.str_id(&display_name.text)?
            } else {
                NULL_STR
            },
            description_locale: self.str_id(&description.locale)?,
            description_text: self.str_id(&description.text)?,
        };
        r.texts = self.intern_texts(texts);
        Ok(())
    }

    /// Is the node at `i` the namespace-0 node `n`?
    #[inline]
    pub(crate) fn is_ns0(&self, i: u32, n: u32) -> bool {
        self.dense
            .first()
            .and_then(|t| t.get(n as usize))
            .is_some_and(|&x| x == i)
    }

    /// The index of namespace-0 node `n`.
    #[inline]
    pub(crate) fn ns0(&self, n: u32) -> Option<u32> {
        self.dense
            .first()
            .and_then(|t| t.get(n as usize))
            .copied()
            .filter(|&i| i != NO_INDEX)
    }

    /// Adds, on every node of this store that the node at `index` references, the inverse
    /// reference (without a duplicate check: the node is new, nothing pointed at it).
    pub(crate) fn link_inverses(&mut self, index: u32) -> Vec<u32> {
        let mut touched = Vec::new();
        self.link_inverses_with(index, |t| touched.push(t));
        touched
    }

    /// [`Store::link_inverses`], telling `touched` of each node that got one (a build
    /// links every node: no list is made per node).
    pub(crate) fn link_inverses_with(&mut self, index: u32, mut touched: impl FnMut(u32)) {
        // The node's own list is not changed here (a reference to itself gets no inverse):
        // a second handle on it (no copy) is read while the others' lists change.
        let (first, more) = match self.rec(index) {
            Some(r) => (r.first, r.more.clone()),
            None => return,
        };
        let refs = first
            .is_some()
            .then_some(first)
            .into_iter()
            .chain(more.iter().flat_map(|m| m.iter()));
        for r in refs {
            if let Key::Local(t) = r.target_key() {
                if t != index {
                    if let Some(tr) = self.recs.get_mut(t).filter(|x| x.is_node()) {
                        tr.push_ref(r.inverse(index));
                        touched(t);
                    }
                }
            }
        }
    }

    /// Turns references kept by id whose node is here now into local ones, and a forward
    /// HasTypeDefinition among them into the type definition (after a build).
    pub(crate) fn resolve_foreign(&mut self) {
        let has_td = self.ns0(ids::HAS_TYPE_DEFINITION);
        for i in 0..self.recs.len() {
            let Some(r) = self.rec(i) else { continue };
            if !r.refs().any(|x| {
                matches!(x.target_key(), Key::Foreign(_)) || matches!(x.type_key(), Key::Foreign(_))
            }) {
                continue;
            }
            let mut type_def = r.type_def;
            let mut refs = Vec::with_capacity(r.ref_count());
            for x in r.refs() {
                let t = match x.type_key() {
                    Key::Foreign(f) => self
                        .foreign(f)
                        .and_then(|e| e.as_local())
                        .and_then(|l| self.lookup(l))
                        .map_or(Key::Foreign(f), Key::Local),
                    k => k,
                };
                let target = match x.target_key() {
                    Key::Foreign(f) => self
                        .foreign(f)
                        .and_then(|e| e.as_local())
                        .and_then(|l| self.lookup(l))
                        .map_or(Key::Foreign(f), Key::Local),
                    k => k,
                };
                match (t, target) {
                    (Key::Local(ti), Key::Local(tg))
                        if x.is_forward() && type_def == NO_INDEX && Some(ti) == has_td =>
                    {
                        type_def = tg
                    }
                    _ => refs.push(Ref::new(t, x.is_forward(), target)),
                }
            }
            if let Some(r) = self.recs.get_mut(i) {
                r.type_def = type_def;
                r.set_refs(refs);
            }
        }
    }

    /// Empties the slot of the node at `index` (its id out of the id tables; its cell,
    /// source and class attributes freed for reuse once `token` — the version before the
    /// removal — is gone). Its references stay in the record until the slot is reused;
    /// the caller takes care of the other ends.
    pub(crate) fn remove(
        &mut self,
        index: u32,
        token: &Arc<VersionToken>,
        version: u64,
    ) -> Option<Rec> {
        let r = self.rec(index)?.clone();
        match (r.id_kind, r.id_ns) {
            (id_kind::NUMERIC, ns) if r.id_pos < DENSE_ID_MAX && ns < 2 => {
                if let Some(t) = self.dense.get_mut(ns as usize) {
                    if (r.id_pos as usize) < t.len() {
                        set_dense(t, r.id_pos, NO_INDEX);
                    }
                }
            }
            _ => {
                let h = self.rec_hash(&r);
                self.ids.remove(h, index);
            }
        }
        let weak = (Arc::downgrade(token), version);
        if r.class == class_bits(NodeClass::Variable) {
            if let Some(c) = self.cells.get(r.data) {
                if c.stores() {
                    // A source cell's source goes with it.
                } else {
                    let s = c.source_index();
                    self.sources.set(s, Source::None);
                    self.freed.sources.push((s, weak.clone()));
                }
            }
            self.freed.cells.push((r.data, weak));
        } else if r.data != NO_INDEX && r.data != 0 {
            self.freed.types.push((r.data, weak));
        }
        if r.flags & flag::MASKS != 0 {
            Arc::make_mut(&mut self.masks).remove(&index);
        }
        self.recs.set(index, Rec::default());
        self.count = self.count.saturating_sub(1);
        Some(r)
    }

    /// A node as a definition ([`Node`]): what [`Store::insert`] would store again.
    pub(crate) fn to_node(&self, index: u32) -> Option<Node> {
        let v = NodeView::new(self, index)?;
        let attributes = match v.attributes() {
            AttrsView::Object { event_notifier } => ClassAttributes::Object { event_notifier },
            AttrsView::Variable(var) => {
                let s = var.shape();
                let value = match var.source() {
                    SourceView::Cell(c) => {
                        let copy = ValueCell::default();
                        c.copy_into(&copy);
                        ValueSource::Cell(copy)
                    }
                    SourceView::Dynamic(d) => ValueSource::Dynamic(d),
                    SourceView::Computed(c) => {
                        ValueSource::Computed(super::app::Computed::with_state(
                            c.read.clone(),
                            c.state.load(std::sync::atomic::Ordering::Relaxed),
                        ))
                    }
                    SourceView::Async(a) => ValueSource::Async(a.clone()),
                };
                ClassAttributes::Variable(super::VariableAttributes {
                    value,
                    data_type: s.data_type.clone(),
                    value_rank: s.value_rank,
                    array_dimensions: s.array_dimensions.clone(),
                    access_level: s.access_level,
                    user_access_level: s.user_access_level,
                    access_level_ex: s.access_level_ex,
                    minimum_sampling_interval: s.minimum_sampling_interval,
                    historizing: s.historizing,
                })
            }
            AttrsView::Method {
                executable,
                user_executable,
            } => ClassAttributes::Method {
                executable,
                user_executable,
            },
            AttrsView::ObjectType { is_abstract } => ClassAttributes::ObjectType { is_abstract },
            AttrsView::VariableType(t) => ClassAttributes::VariableType(t.clone()),
            AttrsView::ReferenceType {
                is_abstract,
                symmetric,
                inverse_name,
            } => ClassAttributes::ReferenceType {
                is_abstract,
                symmetric,
                inverse_name: inverse_name.cloned(),
            },
            AttrsView::DataType {
                is_abstract,
                data_type_definition,
            } => ClassAttributes::DataType {
                is_abstract,
                data_type_definition: data_type_definition.cloned(),
            },
            AttrsView::View {
                contains_no_loops,
                event_notifier,
            } => ClassAttributes::View {
                contains_no_loops,
                event_notifier,
            },
        };
        Some(Node {
            node_id: v.node_id(),
            node_class: v.node_class(),
            browse_name: v.browse_name(),
            display_name: v.display_name(),
            description: v.description(),
            write_mask: v.write_mask(),
            user_write_mask: v.user_write_mask(),
            references: v.references().collect::<Vec<_>>().into(),
            generation: v.generation(),
            attributes,
        })
    }

    /// Bytes held by the store's parts (the cells' and records' pages, the id and string
    /// bytes, the indexes); reference lists and class attributes not included.
    pub(crate) fn bytes(&self) -> usize {
        self.recs.bytes()
            + self.cells.bytes()
            + self.id_text.bytes()
            + self.id_bytes.bytes()
            + self.ids.bytes()
            + self.strings.bytes()
            + self.dense.iter().map(|d| d.len() * 4).sum::<usize>()
    }
}

/// Sets `table[n]` (growing it by doubling, with empty slots), in a copy when another
/// version shares it.
pub(crate) fn set_dense(table: &mut Arc<[u32]>, n: u32, index: u32) {
    let n = n as usize;
    if n >= table.len() {
        let mut v = table.to_vec();
        v.resize((n + 1).next_power_of_two().max(64), NO_INDEX);
        *table = Arc::from(v);
    }
    if let Some(slot) = Arc::make_mut(table).get_mut(n) {
        *slot = index;
    }
}

/// Removes repeated references, keeping the first occurrence and the order.
pub(crate) fn dedup_refs(refs: &mut Vec<Ref>) {
    if refs.len() < 2 {
        return;
    }
    if refs.len() <= 8 {
        let mut i = 1;
        while i < refs.len() {
            let dup = refs
                .get(..i)
                .is_some_and(|before| refs.get(i).is_some_and(|r| before.contains(r)));
            if dup {
                refs.remove(i);
            } else {
                i += 1;
            }
        }
        return;
    }
    let mut order: Vec<(Ref, u32)> = refs.iter().copied().zip(0..).collect();
    order.sort_unstable();
    let mut keep = vec![true; refs.len()];
    let mut dup = false;
    for w in order.windows(2) {
        if let [(a, _), (b, j)] = w {
            if a == b {
                if let Some(k) = keep.get_mut(*j as usize) {
                    *k = false;
                }
                dup = true;
            }
        }
    }
    if dup {
        let mut keep = keep.into_iter();
        refs.retain(|_| keep.next().unwrap_or(true));
    }
}

/// A reference as the definitions have it, from its compact form.
pub(crate) fn reference(s: &Store, r: Ref) -> Reference {
    Reference {
        reference_type: s.key_id(r.type_key()).node_id,
        is_forward: r.is_forward(),
        target: s.key_id(r.target_key()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(std::mem::size_of::<Rec>(), 56);
        assert_eq!(std::mem::size_of::<Ref>(), 8);
        assert_eq!(std::mem::size_of::<ValueCell>(), 48);
    }

    #[test]
    fn ref_list_keeps_order_through_chunks() {
        let r = |i| Ref::new(Key::Local(35), true, Key::Local(i));
        let mut l: RefList = (0..1000).map(r).collect();
        let copy = l.clone();
        assert_eq!(l.retain(&mut |x: Ref| !x.target.is_multiple_of(3)), 334);
        assert_eq!(l.len(), 666);
        assert!(l
            .iter()
            .map(|x| x.target)
            .eq((0..1000).filter(|i| i % 3 != 0)));
        assert_eq!(copy.len(), 1000);
        let mut rec = Rec::default();
        rec.set_refs((0..3).map(r).collect());
        assert_eq!(rec.retain_refs(|x| x.target != 0), 1);
        assert_eq!(rec.refs().map(|x| x.target).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(rec.retain_refs(|_| false), 2);
        assert_eq!(rec.ref_count(), 0);
    }
}
