//! HistoryRead of mirrored Variables, forwarded to their servers (docs/Gateway.md
//! "History").
//!
//! A server has one history backend, fixed when its address space is built; a server
//! started with a gateway gets this one: it serves the mirrored Variables (their
//! namespaces are the gateway's instance namespaces, marked in [`InstanceNamespaces`]) by
//! handing each operation to the gateway thread, and every other node from the server's
//! own store (`[history]`), when it has one. The service has checked the node, its
//! AccessLevel's HistoryRead (set on a mirrored Variable only when its server keeps its
//! history and forwarding is on) and the user's ReadHistory before an operation comes here.
//!
//! Event reads of mirrored notifiers (an Object whose server keeps its event history shows
//! HistoryRead in its EventNotifier here) go the same way: the EventFilter is translated
//! into the server's namespaces ([`filter_out`]) and the events' fields back
//! ([`EventSelect::event_in`]).
//!
//! Continuation points: the server's resume token for a forwarded read is the downstream's
//! continuation point behind the number of the gateway's session it belongs to; a token of
//! an earlier session (the server was away and the session is new) is
//! BadContinuationPointInvalid without asking the server.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use uaring_core::generated::types::{
    AttributeOperand, ContentFilter, ContentFilterElement, EventFilter, LiteralOperand,
    RelativePathElement, SimpleAttributeOperand,
};
use uaring_core::history::{
    HistoryBackend, HistoryCapabilities, HistoryReadOp, HistoryReply, HistoryUpdateOp,
    HistoryUpdateReply, ReadDetails,
};
use uaring_core::types::{ByteString, ExtensionObject, NodeId, QualifiedName, StatusCode, Variant};

use super::names::Names;
use super::{Forward, Shared};

/// The namespace indexes that hold mirrored instances: a bit per index, set by the gateway
/// thread when it registers a server's namespaces (never cleared: an index keeps its URI).
pub(crate) struct InstanceNamespaces {
    bits: Box<[AtomicU64]>,
}

impl InstanceNamespaces {
    fn new() -> InstanceNamespaces {
        InstanceNamespaces {
            bits: (0..(1usize << 16) / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    pub(crate) fn mark(&self, ns: u16) {
        if let Some(w) = self.bits.get(ns as usize / 64) {
            w.fetch_or(1 << (ns % 64), Ordering::Release);
        }
    }

    pub(crate) fn contains(&self, ns: u16) -> bool {
        self.bits
            .get(ns as usize / 64)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1 << (ns % 64)) != 0)
    }
}

/// The history backend of a server with a gateway: forwarded reads for mirrored Variables
/// and event notifiers, the server's own store for the rest.
pub struct GatewayHistory {
    local: Option<Arc<dyn HistoryBackend>>,
    /// The gateway's queues, once it runs.
    shared: OnceLock<Arc<Shared>>,
    pub(crate) namespaces: Arc<InstanceNamespaces>,
    timeout_ms: u32,
    /// A server of the configuration at start forwards HistoryUpdate (`history_updates`).
    updates: bool,
}

impl std::fmt::Debug for GatewayHistory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewayHistory")
            .field("local", &self.local)
            .finish_non_exhaustive()
    }
}

impl GatewayHistory {
    /// In front of the server's own store `local` (if any); a forwarded read or update
    /// unanswered after `request_timeout_ms` (and a second) is BadTimeout. `updates`: some
    /// server forwards HistoryUpdate (what HistoryServerCapabilities says).
    pub fn new(
        local: Option<Arc<dyn HistoryBackend>>,
        request_timeout_ms: u32,
        updates: bool,
    ) -> GatewayHistory {
        GatewayHistory {
            local,
            shared: OnceLock::new(),
            namespaces: Arc::new(InstanceNamespaces::new()),
            timeout_ms: request_timeout_ms.saturating_add(1_000),
            updates,
        }
    }

    /// The gateway runs: forwarded reads go to its queue from now on.
    pub(crate) fn attach(&self, shared: Arc<Shared>) -> bool {
        self.shared.set(shared).is_ok()
    }

    fn mirrored(&self, node: &NodeId) -> bool {
        node.namespace != 0 && self.namespaces.contains(node.namespace)
    }
}

impl HistoryBackend for GatewayHistory {
    fn capabilities(&self) -> HistoryCapabilities {
        let mut c = self
            .local
            .as_ref()
            .map(|l| l.capabilities())
            .unwrap_or_default();
        // Data reads of mirrored Variables, with every aggregate and modified values: the
        // server behind decides (its status comes back); the local store's own limits are
        // applied in `read` for its nodes.
        c.access_history_data = true;
        c.modified_values = true;
        // Updates of mirrored Variables and notifiers, where they are forwarded (their
        // HistoryWrite bits say where): the server behind decides.
        if self.updates {
            c.insert_data = true;
            c.replace_data = true;
            c.update_data = true;
            c.delete_raw = true;
            c.delete_at_time = true;
            c.insert_event = true;
            c.replace_event = true;
            c.update_event = true;
            c.delete_event = true;
        }
        for a in uaring_core::history::aggregate::Aggregate::ALL {
            let id = a.node_id();
            if !c.aggregates.contains(&id) {
                c.aggregates.push(id);
            }
        }
        c
    }

    fn has_history(&self, node_id: &NodeId, events: bool) -> bool {
        if self.mirrored(node_id) {
            // Its AccessLevel (a Variable) or EventNotifier (a notifier) says whether its
            // server keeps it (checked by the service).
            return true;
        }
        self.local
            .as_ref()
            .is_some_and(|l| l.has_history(node_id, events))
    }

    fn read(&self, op: HistoryReadOp, reply: HistoryReply) {
        if self.mirrored(&op.node_id) {
            match self.shared.get() {
                Some(s) => s.forward(Forward::History { op, reply }),
                None => reply.fail(StatusCode::BadHistoryOperationUnsupported),
            }
            return;
        }
        let Some(local) = &self.local else {
            reply.fail(StatusCode::BadHistoryOperationUnsupported);
            return;
        };
        // What this backend claims beyond the local store's own capabilities.
        let caps = local.capabilities();
        match &*op.details {
            ReadDetails::Raw(d) if d.is_read_modified && !caps.modified_values => {
                return reply.fail(StatusCode::BadHistoryOperationUnsupported)
            }
            ReadDetails::Processed(_)
                if op
                    .aggregate
                    .as_ref()
                    .is_some_and(|a| !caps.aggregates.contains(a)) =>
            {
                return reply.fail(StatusCode::BadAggregateNotSupported)
            }
            _ => {}
        }
        local.read(op, reply);
    }

    fn update(&self, op: HistoryUpdateOp, reply: HistoryUpdateReply) {
        // A mirrored node shows HistoryWrite only where its server's updates are forwarded
        // (`history_updates`; the service refuses the others with BadNotWritable); its
        // history is never the local store's to change.
        if self.mirrored(op.details.node_id()) {
            match self.shared.get() {
                Some(s) => s.forward(Forward::HistoryUpdate { op, reply }),
                None => reply.fail(StatusCode::BadHistoryOperationUnsupported),
            }
            return;
        }
        let Some(local) = &self.local else {
            reply.fail(StatusCode::BadHistoryOperationUnsupported);
            return;
        };
        // What this backend claims beyond the local store's own capabilities.
        if !op.details.offered_by(&local.capabilities()) {
            return reply.fail(StatusCode::BadHistoryOperationUnsupported);
        }
        local.update(op, reply);
    }

    fn timeout_ms(&self) -> u32 {
        self.local
            .as_ref()
            .map_or(self.timeout_ms, |l| l.timeout_ms().max(self.timeout_ms))
    }

    /// A forwarded read's point is released on its server too (else it lives there until
    /// the gateway's session ends: a server that keeps a few per session, as uaring does,
    /// would refuse the next reads with BadNoContinuationPoints).
    fn release_continuation_point(&self, node_id: &NodeId, token: Vec<u8>) {
        if self.mirrored(node_id) {
            if let Some(s) = self.shared.get() {
                s.forward(Forward::HistoryRelease {
                    node_id: node_id.clone(),
                    token,
                });
            }
        } else if let Some(local) = &self.local {
            local.release_continuation_point(node_id, token);
        }
    }
}

/// BaseEventType.
const BASE_EVENT_TYPE: u32 = 2041;
/// The attribute ids an event filter's operands name: NodeId (an empty path: the
/// ConditionId) and Value (the field the path names).
const ATTRIBUTE_NODE_ID: u32 = 1;
const ATTRIBUTE_VALUE: u32 = 13;

/// What a field of a forwarded event read's answer is, for its way back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FieldKind {
    /// EventId: the server's behind its tag here, as the EventIds of its events passed on
    /// live are (a condition method called here with it reaches the server with its own).
    EventId,
    /// SourceNode, or the ConditionId (an empty path's NodeId): a node of the server, named
    /// as mirrored here.
    Instance,
    /// Any other field: NodeIds, QualifiedNames and encodings into this server's names, as
    /// a Variable's values.
    Value,
}

/// How a forwarded event read's answer is put back together: for each select clause of the
/// request here, the index of its field in the server's answer (`None`: not asked there,
/// Null here) and what it is.
#[derive(Debug)]
pub(super) struct EventSelect {
    fields: Vec<Option<(usize, FieldKind)>>,
}

/// An event read's EventFilter for the server, and how to read its answer. Each select
/// clause whose TypeDefinitionId and browse names are of the server's namespaces (or 0)
/// goes there translated; one naming another namespace (this server's own, another
/// server's) cannot name a field of the server's events and selects Null here, as a path
/// the type does not define does. The where clause goes whole (the ElementOperands' indexes
/// stay right), its NodeIds and names translated, those of other namespaces given an index
/// the server does not have ([`Names::absent_ns`]): they match nothing there, as they match
/// none of its events here. The filter was compiled here first (its operands decode, none
/// is an AttributeOperand), so what goes out is what this server accepted.
pub(super) fn filter_out(names: &Names, filter: &EventFilter) -> (EventFilter, EventSelect) {
    let mut select_clauses = Vec::with_capacity(filter.select_clauses.len());
    let mut fields = Vec::with_capacity(filter.select_clauses.len());
    for c in &filter.select_clauses {
        match clause_out(names, c) {
            Some(out) => {
                fields.push(Some((select_clauses.len(), kind_of(c))));
                select_clauses.push(out);
            }
            None => fields.push(None),
        }
    }
    if select_clauses.is_empty() {
        // The server needs one clause; its field is not used.
        select_clauses.push(SimpleAttributeOperand {
            type_definition_id: NodeId::ns0(BASE_EVENT_TYPE),
            browse_path: vec![QualifiedName::new(0, "EventId")],
            attribute_id: ATTRIBUTE_VALUE,
            index_range: Default::default(),
        });
    }
    let where_clause = ContentFilter {
        elements: filter
            .where_clause
            .elements
            .iter()
            .map(|e| ContentFilterElement {
                filter_operator: e.filter_operator,
                filter_operands: e
                    .filter_operands
                    .iter()
                    .map(|o| operand_out(names, o))
                    .collect(),
            })
            .collect(),
    };
    (
        EventFilter {
            select_clauses,
            where_clause,
        },
        EventSelect { fields },
    )
}

/// A select clause for the server; `None` when it names a namespace the server does not
/// have.
fn clause_out(names: &Names, c: &SimpleAttributeOperand) -> Option<SimpleAttributeOperand> {
    Some(SimpleAttributeOperand {
        type_definition_id: names.wire_of(&c.type_definition_id)?,
        browse_path: c
            .browse_path
            .iter()
            .map(|q| names.wire_qname(q))
            .collect::<Option<Vec<_>>>()?,
        attribute_id: c.attribute_id,
        index_range: c.index_range.clone(),
    })
}

/// A NodeId or name of a where clause for the server: another namespace's gets one the
/// server does not have.
fn id_out(names: &Names, id: &NodeId) -> NodeId {
    names.wire_of(id).unwrap_or_else(|| NodeId {
        namespace: names.absent_ns(),
        identifier: id.identifier.clone(),
    })
}

fn qname_out(names: &Names, q: &QualifiedName) -> QualifiedName {
    names.wire_qname(q).unwrap_or_else(|| QualifiedName {
        namespace_index: names.absent_ns(),
        name: q.name.clone(),
    })
}

/// An operand of a where clause for the server. An ElementOperand (an index) goes as it is.
fn operand_out(names: &Names, o: &ExtensionObject) -> ExtensionObject {
    // As deep as the filter's compilation here decoded it.
    let limits = uaring_core::DecodeLimits {
        max_depth: 16,
        ..uaring_core::DecodeLimits::default()
    };
    if let Some(Ok(mut l)) = o.decode_as::<LiteralOperand>(limits) {
        names.value_out_or_absent(&mut l.value);
        return ExtensionObject::from_struct(&l);
    }
    if let Some(Ok(s)) = o.decode_as::<SimpleAttributeOperand>(limits) {
        return ExtensionObject::from_struct(&SimpleAttributeOperand {
            type_definition_id: id_out(names, &s.type_definition_id),
            browse_path: s.browse_path.iter().map(|q| qname_out(names, q)).collect(),
            attribute_id: s.attribute_id,
            index_range: s.index_range,
        });
    }
    if let Some(Ok(mut a)) = o.decode_as::<AttributeOperand>(limits) {
        a.node_id = id_out(names, &a.node_id);
        a.browse_path.elements = a
            .browse_path
            .elements
            .iter()
            .map(|e| RelativePathElement {
                reference_type_id: id_out(names, &e.reference_type_id),
                is_inverse: e.is_inverse,
                include_subtypes: e.include_subtypes,
                target_name: qname_out(names, &e.target_name),
            })
            .collect();
        return ExtensionObject::from_struct(&a);
    }
    o.clone()
}

/// What the field a select clause names is (its clause as asked here: namespace 0's
/// browse names are the same on both sides).
fn kind_of(c: &SimpleAttributeOperand) -> FieldKind {
    let only = |name: &str| {
        c.attribute_id == ATTRIBUTE_VALUE
            && matches!(c.browse_path.as_slice(), [q] if q.namespace_index == 0 && q.name.as_str() == name)
    };
    if only("EventId") {
        FieldKind::EventId
    } else if only("SourceNode")
        || (c.browse_path.is_empty() && c.attribute_id == ATTRIBUTE_NODE_ID)
    {
        FieldKind::Instance
    } else {
        FieldKind::Value
    }
}

impl EventSelect {
    /// One event's fields as the server gave them (for the clauses sent there), as the
    /// fields of the clauses asked here, translated: EventIds behind server `tag`'s tag,
    /// SourceNode and ConditionId as the mirrored nodes, other values into this server's
    /// namespaces.
    pub(super) fn event_in(
        &self,
        names: &Names,
        tag: u64,
        mut theirs: Vec<Variant>,
    ) -> Vec<Variant> {
        self.fields
            .iter()
            .map(|f| {
                let Some((i, kind)) = *f else {
                    return Variant::Empty;
                };
                let mut v = theirs.get_mut(i).map(std::mem::take).unwrap_or_default();
                match (kind, &mut v) {
                    (FieldKind::EventId, Variant::ByteString(b)) if !b.as_bytes().is_empty() => {
                        *b = ByteString::from(super::downstream::event_id_here(tag, b.as_bytes()));
                    }
                    (FieldKind::Instance, Variant::NodeId(id)) => {
                        match names.remote(id).filter(|r| r.namespace != 0) {
                            Some(r) => **id = names.local_instance(&r),
                            None => names.value_in(&mut v),
                        }
                    }
                    _ => names.value_in(&mut v),
                }
                v
            })
            .collect()
    }

    /// One event's fields as given here (an UpdateEventDetails entry, for the clauses asked
    /// here) as the fields of the clauses sent to the server, translated: EventIds of the
    /// server's events passed on here as its own, SourceNode and ConditionId as its nodes,
    /// other values into its namespaces. A field whose clause was not sent is dropped.
    pub(super) fn event_out(
        &self,
        names: &Names,
        tag: u64,
        mut ours: Vec<Variant>,
    ) -> Vec<Variant> {
        let sent = self
            .fields
            .iter()
            .flatten()
            .map(|(i, _)| i + 1)
            .max()
            .unwrap_or(1);
        let mut theirs = vec![Variant::Empty; sent];
        for (f, v) in self.fields.iter().zip(ours.iter_mut()) {
            let Some((i, kind)) = *f else {
                continue;
            };
            let mut v = std::mem::take(v);
            match (kind, &mut v) {
                (FieldKind::EventId, Variant::ByteString(b)) => {
                    if let Some(t) = super::downstream::event_id_there(tag, b.as_bytes()) {
                        *b = ByteString::from(t.to_vec());
                    }
                }
                (FieldKind::Instance, Variant::NodeId(id)) => match names.wire_of_instance(id) {
                    Some(w) => **id = w,
                    None => names.value_out(&mut v),
                },
                _ => names.value_out(&mut v),
            }
            if let Some(slot) = theirs.get_mut(i) {
                *slot = v;
            }
        }
        theirs
    }
}

/// A forwarded read's resume token: the gateway's session number, then the server's
/// continuation point.
pub(super) fn token(session: u64, point: &[u8]) -> Vec<u8> {
    let mut t = Vec::with_capacity(8 + point.len());
    t.extend_from_slice(&session.to_le_bytes());
    t.extend_from_slice(point);
    t
}

/// The server's continuation point of a token, when it belongs to session `session`.
pub(super) fn point_of(token: &[u8], session: u64) -> Option<&[u8]> {
    let (n, point) = token.split_at_checked(8)?;
    (n == session.to_le_bytes() && !point.is_empty()).then_some(point)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uaring_core::generated::types::{ElementOperand, FilterOperator};
    use uaring_core::types::LocalizedText;

    /// A server with its own namespace (names and instances in 10 here, 1 there) and DI
    /// (names in 11, instances in 12 here, 2 there).
    fn names() -> Names {
        let mut n = Names::new("plc", std::sync::Arc::new(Vec::new()));
        n.set_namespace_array(&[
            super::super::names::NS0_URI.to_string(),
            "urn:plc:app".to_string(),
            "http://opcfoundation.org/UA/DI/".to_string(),
        ]);
        n.register(1, 10, 10);
        n.register(2, 11, 12);
        n
    }

    fn clause(type_id: NodeId, path: &[(u16, &str)], attribute_id: u32) -> SimpleAttributeOperand {
        SimpleAttributeOperand {
            type_definition_id: type_id,
            browse_path: path
                .iter()
                .map(|(ns, n)| QualifiedName::new(*ns, n))
                .collect(),
            attribute_id,
            index_range: Default::default(),
        }
    }

    fn base(field: &str) -> SimpleAttributeOperand {
        clause(NodeId::ns0(BASE_EVENT_TYPE), &[(0, field)], ATTRIBUTE_VALUE)
    }

    fn literal(v: Variant) -> ExtensionObject {
        ExtensionObject::from_struct(&LiteralOperand { value: v })
    }

    fn node(id: NodeId) -> Variant {
        Variant::NodeId(Box::new(id))
    }

    #[test]
    fn an_event_filter_goes_out_in_the_server_s_namespaces_and_its_fields_come_back() {
        let n = names();
        let filter = EventFilter {
            select_clauses: vec![
                base("EventId"),
                base("SourceNode"),
                base("Message"),
                // A field of the server's event type (mirrored here in 10).
                clause(
                    NodeId::numeric(10, 5000),
                    &[(10, "Temperature")],
                    ATTRIBUTE_VALUE,
                ),
                // A type of another namespace here (the gateway's own): nothing there.
                clause(NodeId::numeric(99, 1), &[(0, "Message")], ATTRIBUTE_VALUE),
                // The ConditionId.
                clause(NodeId::ns0(2782), &[], ATTRIBUTE_NODE_ID),
                base("EventType"),
            ],
            where_clause: ContentFilter {
                elements: vec![
                    ContentFilterElement {
                        filter_operator: FilterOperator::And,
                        filter_operands: vec![
                            ExtensionObject::from_struct(&ElementOperand { index: 1 }),
                            ExtensionObject::from_struct(&ElementOperand { index: 2 }),
                        ],
                    },
                    // SourceNode == a mirrored DI instance.
                    ContentFilterElement {
                        filter_operator: FilterOperator::Equals,
                        filter_operands: vec![
                            ExtensionObject::from_struct(&base("SourceNode")),
                            literal(node(NodeId::string(12, "Dev"))),
                        ],
                    },
                    // EventType in [the server's type, a type of this server's own].
                    ContentFilterElement {
                        filter_operator: FilterOperator::InList,
                        filter_operands: vec![
                            ExtensionObject::from_struct(&clause(
                                NodeId::numeric(10, 5000),
                                &[(10, "Temperature")],
                                ATTRIBUTE_VALUE,
                            )),
                            literal(node(NodeId::numeric(10, 5000))),
                            literal(node(NodeId::numeric(99, 7))),
                        ],
                    },
                ],
            },
        };
        let (out, select) = filter_out(&n, &filter);
        assert_eq!(
            out.select_clauses,
            vec![
                base("EventId"),
                base("SourceNode"),
                base("Message"),
                clause(
                    NodeId::numeric(1, 5000),
                    &[(1, "Temperature")],
                    ATTRIBUTE_VALUE
                ),
                clause(NodeId::ns0(2782), &[], ATTRIBUTE_NODE_ID),
                base("EventType"),
            ],
            "the gateway's own type cannot go there"
        );
        let limits = uaring_core::DecodeLimits::default();
        let ops = |e: usize| out.where_clause.elements[e].filter_operands.clone();
        assert_eq!(
            out.where_clause.elements.len(),
            3,
            "elements keep their indexes"
        );
        assert_eq!(
            out.where_clause.elements[0],
            filter.where_clause.elements[0]
        );
        let lit = |o: &ExtensionObject| {
            o.decode_as::<LiteralOperand>(limits)
                .unwrap()
                .unwrap()
                .value
        };
        assert_eq!(lit(&ops(1)[1]), node(NodeId::string(2, "Dev")));
        let sao = ops(2)[0]
            .decode_as::<SimpleAttributeOperand>(limits)
            .unwrap()
            .unwrap();
        assert_eq!(
            sao,
            clause(
                NodeId::numeric(1, 5000),
                &[(1, "Temperature")],
                ATTRIBUTE_VALUE
            )
        );
        assert_eq!(lit(&ops(2)[1]), node(NodeId::numeric(1, 5000)));
        // Not the server's: an index it has not (one past its three namespaces).
        assert_eq!(lit(&ops(2)[2]), node(NodeId::numeric(3, 7)));

        // An event as the server gives it (its fields for the six clauses sent).
        let message = Variant::LocalizedText(Box::new(LocalizedText::new("", "too hot")));
        let theirs = vec![
            Variant::ByteString(ByteString::from(b"e1".to_vec())),
            node(NodeId::string(2, "Dev")),
            message.clone(),
            Variant::Double(21.5),
            node(NodeId::string(1, "Alarm1")),
            node(NodeId::numeric(1, 5000)),
        ];
        let here = select.event_in(&n, 7, theirs.clone());
        assert_eq!(
            here,
            vec![
                Variant::ByteString(ByteString::from(super::super::downstream::event_id_here(
                    7, b"e1"
                ))),
                // The source and the condition as mirrored here (instances).
                node(NodeId::string(12, "Dev")),
                message,
                Variant::Double(21.5),
                Variant::Empty,
                node(NodeId::string(10, "Alarm1")),
                // A type: a name here.
                node(NodeId::numeric(10, 5000)),
            ]
        );
        // A short answer: the missing fields are Null.
        assert_eq!(select.event_in(&n, 7, Vec::new()), vec![Variant::Empty; 7]);
        // An event given here (an UpdateEventDetails entry) goes out as the server's: the
        // same fields back, the one of the clause not sent dropped.
        assert_eq!(select.event_out(&n, 7, here), theirs);
        // Fewer fields than clauses: the rest Null there.
        assert_eq!(select.event_out(&n, 7, Vec::new()), vec![Variant::Empty; 6]);
    }

    #[test]
    fn a_filter_of_nothing_the_server_has_still_asks_it_one_field() {
        let n = names();
        let filter = EventFilter {
            select_clauses: vec![clause(
                NodeId::numeric(99, 1),
                &[(0, "Message")],
                ATTRIBUTE_VALUE,
            )],
            where_clause: ContentFilter::default(),
        };
        let (out, select) = filter_out(&n, &filter);
        assert_eq!(out.select_clauses, vec![base("EventId")]);
        let theirs = vec![Variant::ByteString(ByteString::from(b"e1".to_vec()))];
        assert_eq!(select.event_in(&n, 7, theirs), vec![Variant::Empty]);
    }

    #[test]
    fn tokens_name_their_session() {
        let t = token(7, b"cp");
        assert_eq!(point_of(&t, 7), Some(&b"cp"[..]));
        assert_eq!(point_of(&t, 8), None);
        assert_eq!(point_of(&t[..5], 7), None);
        assert_eq!(point_of(&token(7, b""), 7), None);
    }

    #[test]
    fn instance_namespaces_are_marked() {
        let n = InstanceNamespaces::new();
        assert!(!n.contains(5));
        n.mark(5);
        n.mark(65535);
        assert!(n.contains(5) && n.contains(65535) && !n.contains(6));
    }
}
