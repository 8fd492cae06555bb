//! EventFilter: compile (validation with per-clause results) and evaluation (Part 4 §7.7,
//! §7.22.3).
//!
//! # Compile ([`compile`])
//!
//! Select clauses (SimpleAttributeOperand), each with a status in
//! `select_clause_results`:
//! * typeDefinitionId unknown: `BadNodeIdUnknown`; known but not BaseEventType or a subtype
//!   (an ObjectType): `BadTypeDefinitionInvalid`. A null id is read as BaseEventType.
//! * a browse path longer than [`MAX_BROWSE_PATH_LEN`] or with a null name:
//!   `BadBrowseNameInvalid`. A path the type does not define is accepted and selects Null.
//! * attributeId not an attribute: `BadAttributeIdInvalid` (Value selects the field;
//!   NodeId with an empty path selects the ConditionId; any other attribute selects Null).
//! * indexRange unparsable: `BadIndexRangeInvalid`.
//!
//! A clause with a Bad status selects Null. The filter as a whole is
//! `BadEventFilterInvalid` when there is no select clause, more than
//! `events.max_select_clauses`, every clause is Bad, more than
//! `events.max_event_filter_elements` where-clause elements, or any element is Bad.
//!
//! Where clause (ContentFilter) elements, each with a status and, for operand errors,
//! per-operand statuses:
//! * supported operators: Equals, IsNull, GreaterThan, LessThan, GreaterThanOrEqual,
//!   LessThanOrEqual, Like, Not, Between, InList, And, Or, OfType, BitwiseAnd, BitwiseOr;
//!   Cast, InView and RelatedTo: `BadFilterOperatorUnsupported`; any other value:
//!   `BadFilterOperatorInvalid`.
//! * wrong operand count: `BadFilterOperandCountMismatch` (InList needs ≥ 2 and at most
//!   [`MAX_OPERANDS_PER_ELEMENT`]).
//! * operands: LiteralOperand, ElementOperand (its index must point to a *later* element:
//!   no loops, so evaluation is linear), SimpleAttributeOperand (as a select clause).
//!   AttributeOperand or an undecodable operand: `BadFilterOperandInvalid` (element status
//!   `BadFilterOperandInvalid`, the operand's own status in `operand_status_codes`).
//! * OfType takes a Literal NodeId of BaseEventType or a subtype; Like takes a Literal
//!   String pattern of at most [`MAX_LIKE_PATTERN_CHARS`] characters.
//!
//! # Evaluation ([`CompiledEventFilter::apply`])
//!
//! Elements are evaluated once each, from the last to the first (ElementOperands only point
//! forward, so every operand is ready): cost O(elements + operands) per event, no
//! recursion. Logic is three-valued (TRUE, FALSE, NULL; Part 4 Table 120): an event passes
//! when element 0 is TRUE; an empty where clause passes everything.
//!
//! Comparisons convert the operand of lower precedence to the type of the other (Part 4
//! §7.7.3 precedence: Double, Float, Int64, UInt64, Int32, UInt32, StatusCode, Int16,
//! UInt16, SByte, Byte, Boolean, Guid, String, ExpandedNodeId, NodeId, LocalizedText,
//! QualifiedName); a conversion that fails (out of range, unparsable) makes the comparison
//! NULL. Numbers convert between each other with range checks, Booleans to 0/1, Strings are
//! parsed, LocalizedText compares by text and QualifiedName by name.
//! Like: `%` any run, `_` one character, `[abc]` / `[a-c]` a set, `[^…]` its complement,
//! `\` escapes the next character; its text operand is converted to String, and a text
//! longer than [`MAX_LIKE_TEXT_CHARS`] characters is NULL (bounds the match cost).

use std::borrow::Cow;
use std::cmp::Ordering;
use std::collections::HashSet;

use super::{ids, Event};
use crate::address_space::{AddressSpace, NodeClass, NumericRange};
use crate::encoding::DecodeLimits;
use crate::generated::types::{
    AttributeOperand, ContentFilterElement, ContentFilterElementResult, ContentFilterResult,
    ElementOperand, EventFilter, EventFilterResult, FilterOperator, LiteralOperand,
    SimpleAttributeOperand,
};
use crate::types::{
    BuiltinType, ExtensionObject, NodeId, QualifiedName, StatusCode, UaString, Variant,
};

/// Longest browse path of a SimpleAttributeOperand.
pub const MAX_BROWSE_PATH_LEN: usize = 16;
/// Most operands of one element (InList).
pub const MAX_OPERANDS_PER_ELEMENT: usize = 256;
/// Longest Like pattern, characters.
pub const MAX_LIKE_PATTERN_CHARS: usize = 256;
/// Longest text a Like matches, characters (longer: NULL).
pub const MAX_LIKE_TEXT_CHARS: usize = 4096;
/// Highest attribute id (AccessLevelEx).
const MAX_ATTRIBUTE_ID: u32 = 27;

/// A validated SimpleAttributeOperand.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldRef {
    pub type_definition: NodeId,
    pub path: Vec<QualifiedName>,
    pub attribute_id: u32,
    pub index_range: Option<NumericRange>,
}

impl FieldRef {
    fn get(&self, ev: &Event) -> Variant {
        let v = ev.field(&self.type_definition, &self.path, self.attribute_id);
        match (&self.index_range, &v) {
            (Some(r), Variant::Array(_)) => r.read(&v).unwrap_or(Variant::Empty),
            (Some(_), Variant::Empty) => Variant::Empty,
            // An index range on a scalar String/ByteString would select a substring; fields
            // are selected whole otherwise.
            (Some(r), Variant::String(_) | Variant::ByteString(_)) => {
                r.read(&v).unwrap_or(Variant::Empty)
            }
            (Some(_), _) => Variant::Empty,
            (None, _) => v,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Operand {
    Literal(Variant),
    Element(usize),
    Field(FieldRef),
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Equals,
    IsNull,
    Gt,
    Lt,
    Ge,
    Le,
    Like(Vec<Token>),
    Not,
    Between,
    /// InList; when every list entry is a literal NodeId (the shape of "EventType InList
    /// [subtypes…]" that clients build), the set of them for an O(1) lookup.
    InList(Option<HashSet<NodeId>>),
    And,
    Or,
    OfType(NodeId),
    BitwiseAnd,
    BitwiseOr,
}

#[derive(Clone, Debug, PartialEq)]
struct Element {
    op: Op,
    operands: Vec<Operand>,
}

/// A compiled EventFilter. Immutable; evaluate with [`CompiledEventFilter::apply`].
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledEventFilter {
    /// One per select clause; `None` (a Bad clause) selects Null.
    select: Vec<Option<FieldRef>>,
    elements: Vec<Element>,
}

/// Limits for [`compile_with`]; [`compile`] takes them from `events` in the configuration
/// defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterLimits {
    pub max_select_clauses: usize,
    pub max_elements: usize,
}

impl Default for FilterLimits {
    fn default() -> Self {
        let c = crate::config::EventConfig::default();
        FilterLimits {
            max_select_clauses: c.max_select_clauses as usize,
            max_elements: c.max_event_filter_elements as usize,
        }
    }
}

impl FilterLimits {
    /// The limits of a configuration (`events.max_select_clauses`,
    /// `events.max_event_filter_elements`).
    pub fn from_config(c: &crate::config::EventConfig) -> FilterLimits {
        FilterLimits {
            max_select_clauses: c.max_select_clauses as usize,
            max_elements: c.max_event_filter_elements as usize,
        }
    }
}

/// Compiles an EventFilter with the default limits (see [`compile_with`]).
pub fn compile(
    filter: &EventFilter,
    space: &AddressSpace,
) -> Result<(CompiledEventFilter, EventFilterResult), (StatusCode, EventFilterResult)> {
    compile_with(filter, space, FilterLimits::default())
}

/// Compiles an EventFilter: the compiled filter and its (all-Good or partly Bad select
/// clause) result, or `BadEventFilterInvalid` with the result that says why. See the module
/// documentation for every status.
pub fn compile_with(
    filter: &EventFilter,
    space: &AddressSpace,
    limits: FilterLimits,
) -> Result<(CompiledEventFilter, EventFilterResult), (StatusCode, EventFilterResult)> {
    let invalid = StatusCode::BadEventFilterInvalid;
    if filter.select_clauses.is_empty()
        || filter.select_clauses.len() > limits.max_select_clauses
        || filter.where_clause.elements.len() > limits.max_elements
    {
        return Err((invalid, EventFilterResult::default()));
    }
    let mut result = EventFilterResult::default();
    let mut select = Vec::with_capacity(filter.select_clauses.len());
    for sao in &filter.select_clauses {
        match field_ref(sao, space) {
            Ok(f) => {
                result.select_clause_results.push(StatusCode::Good);
                select.push(Some(f));
            }
            Err(s) => {
                result.select_clause_results.push(s);
                select.push(None);
            }
        }
    }
    let n = filter.where_clause.elements.len();
    let mut elements = Vec::with_capacity(n);
    let mut where_ok = true;
    for (i, e) in filter.where_clause.elements.iter().enumerate() {
        match compile_element(i, n, e, space) {
            Ok(el) => {
                elements.push(el);
                result
                    .where_clause_result
                    .element_results
                    .push(ContentFilterElementResult {
                        status_code: StatusCode::Good,
                        ..Default::default()
                    });
            }
            Err(r) => {
                where_ok = false;
                result.where_clause_result.element_results.push(r);
            }
        }
    }
    let any_select_ok = select.iter().any(Option::is_some);
    // All Good: the where result is sent empty (Part 4: the lists are empty without errors).
    if where_ok {
        result.where_clause_result = ContentFilterResult::default();
    }
    if !where_ok || !any_select_ok {
        return Err((invalid, result));
    }
    if result.select_clause_results.iter().all(|s| s.is_good()) {
        result.select_clause_results.clear();
    }
    Ok((CompiledEventFilter { select, elements }, result))
}

/// Validates a SimpleAttributeOperand.
fn field_ref(sao: &SimpleAttributeOperand, space: &AddressSpace) -> Result<FieldRef, StatusCode> {
    let base = NodeId::ns0(ids::BASE_EVENT_TYPE);
    let type_definition = if sao.type_definition_id.is_null() {
        base.clone()
    } else {
        sao.type_definition_id.clone()
    };
    let Some(node) = space.node(&type_definition) else {
        return Err(StatusCode::BadNodeIdUnknown);
    };
    if node.node_class() != NodeClass::ObjectType || !space.is_subtype_of(&type_definition, &base) {
        return Err(StatusCode::BadTypeDefinitionInvalid);
    }
    if sao.browse_path.len() > MAX_BROWSE_PATH_LEN
        || sao.browse_path.iter().any(|q| q.name.as_str().is_empty())
    {
        return Err(StatusCode::BadBrowseNameInvalid);
    }
    if sao.attribute_id == 0 || sao.attribute_id > MAX_ATTRIBUTE_ID {
        return Err(StatusCode::BadAttributeIdInvalid);
    }
    let index_range = NumericRange::parse(sao.index_range.as_str())
        .map_err(|_| StatusCode::BadIndexRangeInvalid)?;
    Ok(FieldRef {
        type_definition,
        path: sao.browse_path.clone(),
        attribute_id: sao.attribute_id,
        index_range,
    })
}

fn element_error(
    status: StatusCode,
    operand_status_codes: Vec<StatusCode>,
) -> ContentFilterElementResult {
    ContentFilterElementResult {
        status_code: status,
        operand_status_codes,
        operand_diagnostic_infos: Vec::new(),
    }
}

/// Decodes and validates one operand of element `i` (of `n`).
fn compile_operand(
    i: usize,
    n: usize,
    eo: &ExtensionObject,
    space: &AddressSpace,
) -> Result<Operand, StatusCode> {
    let limits = DecodeLimits {
        max_depth: 16,
        ..DecodeLimits::default()
    };
    if let Some(r) = eo.decode_as::<LiteralOperand>(limits) {
        return r
            .map(|l| Operand::Literal(l.value))
            .map_err(|_| StatusCode::BadFilterOperandInvalid);
    }
    if let Some(r) = eo.decode_as::<ElementOperand>(limits) {
        let e = r.map_err(|_| StatusCode::BadFilterOperandInvalid)?;
        let idx = e.index as usize;
        // Only forward references: no loops, linear evaluation.
        return if idx > i && idx < n {
            Ok(Operand::Element(idx))
        } else {
            Err(StatusCode::BadFilterOperandInvalid)
        };
    }
    if let Some(r) = eo.decode_as::<SimpleAttributeOperand>(limits) {
        let sao = r.map_err(|_| StatusCode::BadFilterOperandInvalid)?;
        return field_ref(&sao, space).map(Operand::Field);
    }
    if eo.is::<AttributeOperand>() {
        // Not allowed in an EventFilter (events are no nodes).
        return Err(StatusCode::BadFilterOperandInvalid);
    }
    Err(StatusCode::BadFilterOperandInvalid)
}

fn compile_element(
    i: usize,
    n: usize,
    e: &ContentFilterElement,
    space: &AddressSpace,
) -> Result<Element, ContentFilterElementResult> {
    let fo = e.filter_operator;
    let (min, max) = match fo {
        FilterOperator::IsNull | FilterOperator::Not | FilterOperator::OfType => (1, 1),
        FilterOperator::Equals
        | FilterOperator::GreaterThan
        | FilterOperator::LessThan
        | FilterOperator::GreaterThanOrEqual
        | FilterOperator::LessThanOrEqual
        | FilterOperator::Like
        | FilterOperator::And
        | FilterOperator::Or
        | FilterOperator::BitwiseAnd
        | FilterOperator::BitwiseOr => (2, 2),
        FilterOperator::Between => (3, 3),
        FilterOperator::InList => (2, MAX_OPERANDS_PER_ELEMENT),
        FilterOperator::Cast | FilterOperator::InView | FilterOperator::RelatedTo => {
            return Err(element_error(
                StatusCode::BadFilterOperatorUnsupported,
                Vec::new(),
            ))
        }
        _ => {
            return Err(element_error(
                StatusCode::BadFilterOperatorInvalid,
                Vec::new(),
            ))
        }
    };
    let count = e.filter_operands.len();
    if count < min || count > max {
        return Err(element_error(
            StatusCode::BadFilterOperandCountMismatch,
            Vec::new(),
        ));
    }
    let mut operands = Vec::with_capacity(count);
    let mut statuses = Vec::with_capacity(count);
    let mut bad = false;
    for eo in &e.filter_operands {
        match compile_operand(i, n, eo, space) {
            Ok(o) => {
                operands.push(o);
                statuses.push(StatusCode::Good);
            }
            Err(s) => {
                bad = true;
                statuses.push(s);
            }
        }
    }
    if bad {
        return Err(element_error(StatusCode::BadFilterOperandInvalid, statuses));
    }
    let op = match fo {
        FilterOperator::Equals => Op::Equals,
        FilterOperator::IsNull => Op::IsNull,
        FilterOperator::GreaterThan => Op::Gt,
        FilterOperator::LessThan => Op::Lt,
        FilterOperator::GreaterThanOrEqual => Op::Ge,
        FilterOperator::LessThanOrEqual => Op::Le,
        FilterOperator::Not => Op::Not,
        FilterOperator::Between => Op::Between,
        FilterOperator::InList => {
            let ids: Option<HashSet<NodeId>> = operands
                .iter()
                .skip(1)
                .map(|o| match o {
                    Operand::Literal(Variant::NodeId(n)) => Some((**n).clone()),
                    _ => None,
                })
                .collect();
            Op::InList(ids)
        }
        FilterOperator::And => Op::And,
        FilterOperator::Or => Op::Or,
        FilterOperator::BitwiseAnd => Op::BitwiseAnd,
        FilterOperator::BitwiseOr => Op::BitwiseOr,
        FilterOperator::OfType => {
            let base = NodeId::ns0(ids::BASE_EVENT_TYPE);
            match operands.first() {
                Some(Operand::Literal(Variant::NodeId(t)))
                    if space.node_class_of(t) == Some(NodeClass::ObjectType)
                        && space.is_subtype_of(t, &base) =>
                {
                    Op::OfType((**t).clone())
                }
                _ => {
                    return Err(element_error(
                        StatusCode::BadFilterOperandInvalid,
                        vec![StatusCode::BadFilterOperandInvalid],
                    ))
                }
            }
        }
        FilterOperator::Like => {
            let pattern = match operands.get(1) {
                Some(Operand::Literal(Variant::String(s))) => Some(s.as_str()),
                Some(Operand::Literal(Variant::LocalizedText(t))) => Some(t.text.as_str()),
                _ => None,
            };
            match pattern.and_then(parse_like) {
                Some(p) => Op::Like(p),
                None => {
                    return Err(element_error(
                        StatusCode::BadFilterOperandInvalid,
                        vec![StatusCode::Good, StatusCode::BadFilterOperandInvalid],
                    ))
                }
            }
        }
        _ => {
            return Err(element_error(
                StatusCode::BadFilterOperatorInvalid,
                Vec::new(),
            ))
        }
    };
    Ok(Element { op, operands })
}

impl CompiledEventFilter {
    /// Number of select clauses (fields per notification).
    pub fn select_count(&self) -> usize {
        self.select.len()
    }

    /// Does the event pass the where clause?
    pub fn matches(&self, ev: &Event) -> bool {
        if self.elements.is_empty() {
            return true;
        }
        let mut results: Vec<Variant> = vec![Variant::Empty; self.elements.len()];
        for i in (0..self.elements.len()).rev() {
            let v = self.eval(i, ev, &results);
            if let Some(r) = results.get_mut(i) {
                *r = v;
            }
        }
        matches!(results.first(), Some(Variant::Boolean(true)))
    }

    /// `None` when the event does not pass the where clause; else the selected fields in
    /// select-clause order (Null for Bad clauses and fields the event does not have).
    pub fn apply(&self, ev: &Event) -> Option<Vec<Variant>> {
        if !self.matches(ev) {
            return None;
        }
        Some(self.select(ev))
    }

    /// The notification of a monitored item on `notifier` for an event from the bus:
    /// `None` when the event is not reported on that notifier or fails the where clause.
    pub fn notification(&self, notifier: &NodeId, ev: &Event) -> Option<Vec<Variant>> {
        if !ev.is_reported_on(notifier) {
            return None;
        }
        self.apply(ev)
    }

    /// The notification for an event of a ConditionRefresh queued into this item: the
    /// RefreshStart/RefreshEnd bracket bypasses the notifier and the where clause (Part 9
    /// §4.5, §5.5.7); a condition event is checked like a bus event.
    pub fn refresh_notification(&self, notifier: &NodeId, ev: &Event) -> Option<Vec<Variant>> {
        if super::condition::is_refresh_bracket(ev) {
            return Some(self.select(ev));
        }
        self.notification(notifier, ev)
    }

    /// The selected fields without the where clause (for the ConditionRefresh bracket
    /// events, which bypass it: Part 9 §4.5).
    pub fn select(&self, ev: &Event) -> Vec<Variant> {
        self.select
            .iter()
            .map(|f| f.as_ref().map_or(Variant::Empty, |f| f.get(ev)))
            .collect()
    }

    fn operand<'a>(
        &'a self,
        o: &'a Operand,
        ev: &Event,
        results: &'a [Variant],
    ) -> Cow<'a, Variant> {
        match o {
            Operand::Literal(v) => Cow::Borrowed(v),
            Operand::Element(i) => Cow::Borrowed(results.get(*i).unwrap_or(&Variant::Empty)),
            Operand::Field(f) => Cow::Owned(f.get(ev)),
        }
    }

    fn eval(&self, i: usize, ev: &Event, results: &[Variant]) -> Variant {
        let Some(el) = self.elements.get(i) else {
            return Variant::Empty;
        };
        // Operand counts were checked when the filter was compiled; a missing one is Null.
        let arg = |k: usize| match el.operands.get(k) {
            Some(o) => self.operand(o, ev, results),
            None => Cow::Borrowed(&Variant::Empty),
        };
        let tri = |b: Option<bool>| b.map_or(Variant::Empty, Variant::Boolean);
        match &el.op {
            Op::Equals => tri(equals(&arg(0), &arg(1))),
            Op::IsNull => Variant::Boolean(arg(0).is_empty()),
            Op::Gt => tri(compare(&arg(0), &arg(1)).map(|o| o == Ordering::Greater)),
            Op::Lt => tri(compare(&arg(0), &arg(1)).map(|o| o == Ordering::Less)),
            Op::Ge => tri(compare(&arg(0), &arg(1)).map(|o| o != Ordering::Less)),
            Op::Le => tri(compare(&arg(0), &arg(1)).map(|o| o != Ordering::Greater)),
            Op::Between => {
                let v = arg(0);
                let lo = compare(&v, &arg(1)).map(|o| o != Ordering::Less);
                let hi = compare(&v, &arg(2)).map(|o| o != Ordering::Greater);
                tri(and3(lo, hi))
            }
            Op::InList(ids) => {
                let v = arg(0);
                if v.is_empty() {
                    return Variant::Empty;
                }
                if let (Some(set), Variant::NodeId(n)) = (ids, &*v) {
                    return Variant::Boolean(set.contains(&**n));
                }
                let hit = (1..el.operands.len()).any(|k| equals(&v, &arg(k)) == Some(true));
                Variant::Boolean(hit)
            }
            Op::Not => tri(as_bool(&arg(0)).map(|b| !b)),
            Op::And => tri(and3(as_bool(&arg(0)), as_bool(&arg(1)))),
            Op::Or => tri(or3(as_bool(&arg(0)), as_bool(&arg(1)))),
            Op::OfType(t) => Variant::Boolean(ev.is_of_type(t)),
            Op::Like(p) => tri(as_text(&arg(0)).and_then(|t| like(p, &t))),
            Op::BitwiseAnd => bitwise(&arg(0), &arg(1), |a, b| a & b),
            Op::BitwiseOr => bitwise(&arg(0), &arg(1), |a, b| a | b),
        }
    }
}

fn as_bool(v: &Variant) -> Option<bool> {
    match v {
        Variant::Boolean(b) => Some(*b),
        _ => None,
    }
}

/// Three-valued AND (Part 4 Table 120): FALSE wins, then NULL.
fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

/// Three-valued OR: TRUE wins, then NULL.
fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

// ---- type conversion (Part 4 §7.7.3) ----

/// Precedence rank: lower is higher precedence. `None`: not in the table.
fn precedence(t: BuiltinType) -> Option<u8> {
    use BuiltinType::*;
    Some(match t {
        Double => 1,
        Float => 2,
        Int64 => 3,
        UInt64 => 4,
        Int32 => 5,
        UInt32 => 6,
        StatusCode => 7,
        Int16 => 8,
        UInt16 => 9,
        SByte => 10,
        Byte => 11,
        Boolean => 12,
        Guid => 13,
        String => 14,
        ExpandedNodeId => 15,
        NodeId => 16,
        LocalizedText => 17,
        QualifiedName => 18,
        _ => return None,
    })
}

fn is_integer(t: BuiltinType) -> bool {
    use BuiltinType::*;
    matches!(
        t,
        SByte | Byte | Int16 | UInt16 | Int32 | UInt32 | Int64 | UInt64 | StatusCode
    )
}

fn as_i128(v: &Variant) -> Option<i128> {
    Some(match v {
        Variant::Boolean(b) => *b as i128,
        Variant::SByte(x) => *x as i128,
        Variant::Byte(x) => *x as i128,
        Variant::Int16(x) => *x as i128,
        Variant::UInt16(x) => *x as i128,
        Variant::Int32(x) => *x as i128,
        Variant::UInt32(x) => *x as i128,
        Variant::Int64(x) => *x as i128,
        Variant::UInt64(x) => *x as i128,
        Variant::StatusCode(s) => s.0 as i128,
        _ => return None,
    })
}

fn as_f64(v: &Variant) -> Option<f64> {
    match v {
        Variant::Float(x) => Some(*x as f64),
        Variant::Double(x) => Some(*x),
        other => as_i128(other).map(|i| i as f64),
    }
}

/// An integer as a Variant of integer type `t`, `None` when out of range.
fn int_as(t: BuiltinType, i: i128) -> Option<Variant> {
    use BuiltinType as B;
    Some(match t {
        B::SByte => Variant::SByte(i8::try_from(i).ok()?),
        B::Byte => Variant::Byte(u8::try_from(i).ok()?),
        B::Int16 => Variant::Int16(i16::try_from(i).ok()?),
        B::UInt16 => Variant::UInt16(u16::try_from(i).ok()?),
        B::Int32 => Variant::Int32(i32::try_from(i).ok()?),
        B::UInt32 => Variant::UInt32(u32::try_from(i).ok()?),
        B::Int64 => Variant::Int64(i64::try_from(i).ok()?),
        B::UInt64 => Variant::UInt64(u64::try_from(i).ok()?),
        B::StatusCode => Variant::StatusCode(StatusCode(u32::try_from(i).ok()?)),
        B::Boolean => match i {
            0 => Variant::Boolean(false),
            1 => Variant::Boolean(true),
            _ => return None,
        },
        _ => return None,
    })
}

/// The text of string-like values.
fn as_text(v: &Variant) -> Option<Cow<'_, str>> {
    match v {
        Variant::String(s) if !s.is_null() => Some(Cow::Borrowed(s.as_str())),
        Variant::LocalizedText(t) => Some(Cow::Borrowed(t.text.as_str())),
        Variant::QualifiedName(q) => Some(Cow::Borrowed(q.name.as_str())),
        Variant::NodeId(n) => Some(Cow::Owned(n.to_string())),
        _ => None,
    }
}

/// `v` converted to built-in type `t` (implicit conversion), `None` when it cannot be.
fn convert(v: &Variant, t: BuiltinType) -> Option<Variant> {
    let from = v.scalar_type()?;
    if from == t {
        return Some(v.clone());
    }
    use BuiltinType as B;
    match t {
        B::Double => match v {
            Variant::String(s) => s.as_str().trim().parse::<f64>().ok().map(Variant::Double),
            _ => as_f64(v).map(Variant::Double),
        },
        B::Float => match v {
            Variant::String(s) => s.as_str().trim().parse::<f32>().ok().map(Variant::Float),
            _ => as_f64(v).map(|x| Variant::Float(x as f32)),
        },
        _ if is_integer(t) || t == B::Boolean => {
            let i = match v {
                Variant::String(s) => {
                    let s = s.as_str().trim();
                    match (t, s) {
                        (B::Boolean, "true" | "TRUE" | "True") => 1,
                        (B::Boolean, "false" | "FALSE" | "False") => 0,
                        _ => s.parse::<i128>().ok()?,
                    }
                }
                Variant::Float(_) | Variant::Double(_) => {
                    let f = as_f64(v)?;
                    if !f.is_finite() {
                        return None;
                    }
                    f.round() as i128
                }
                _ => as_i128(v)?,
            };
            int_as(t, i)
        }
        B::String => as_text(v).map(|s| Variant::String(UaString::from(s.as_ref()))),
        B::Guid => match v {
            Variant::String(s) => crate::types::Guid::parse(s.as_str()).map(Variant::Guid),
            _ => None,
        },
        B::NodeId => match v {
            Variant::String(s) => NodeId::parse(s.as_str()).map(|n| Variant::NodeId(Box::new(n))),
            Variant::ExpandedNodeId(e) if e.server_index == 0 && e.namespace_uri.is_null() => {
                Some(Variant::NodeId(Box::new(e.node_id.clone())))
            }
            _ => None,
        },
        _ => None,
    }
}

/// Both operands converted to the higher-precedence type of the two.
fn unify<'a>(a: &'a Variant, b: &'a Variant) -> Option<(Cow<'a, Variant>, Cow<'a, Variant>)> {
    let (ta, tb) = (a.scalar_type()?, b.scalar_type()?);
    if ta == tb {
        return Some((Cow::Borrowed(a), Cow::Borrowed(b)));
    }
    // String-like types compare as text (LocalizedText by text, QualifiedName by name).
    let stringy = |t| {
        matches!(
            t,
            BuiltinType::String | BuiltinType::LocalizedText | BuiltinType::QualifiedName
        )
    };
    if stringy(ta) && stringy(tb) {
        let sa = Variant::String(UaString::from(as_text(a)?.as_ref()));
        let sb = Variant::String(UaString::from(as_text(b)?.as_ref()));
        return Some((Cow::Owned(sa), Cow::Owned(sb)));
    }
    let (pa, pb) = (precedence(ta)?, precedence(tb)?);
    if pa < pb {
        Some((Cow::Borrowed(a), Cow::Owned(convert(b, ta)?)))
    } else {
        Some((Cow::Owned(convert(a, tb)?), Cow::Borrowed(b)))
    }
}

/// Equals with conversion; `None` (NULL) when either is Null or they cannot be converted.
fn equals(a: &Variant, b: &Variant) -> Option<bool> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    if a.is_array() || b.is_array() {
        return Some(a == b);
    }
    let (a, b) = unify(a, b)?;
    Some(match (&*a, &*b) {
        (Variant::LocalizedText(x), Variant::LocalizedText(y)) => x.text == y.text,
        (x, y) => x == y,
    })
}

/// Ordering with conversion; `None` when not ordered (Null, arrays, unordered types).
fn compare(a: &Variant, b: &Variant) -> Option<Ordering> {
    if a.is_empty() || b.is_empty() || a.is_array() || b.is_array() {
        return None;
    }
    let (a, b) = unify(a, b)?;
    match (&*a, &*b) {
        (Variant::Float(x), Variant::Float(y)) => x.partial_cmp(y),
        (Variant::Double(x), Variant::Double(y)) => x.partial_cmp(y),
        (Variant::String(x), Variant::String(y)) => Some(x.as_str().cmp(y.as_str())),
        (Variant::DateTime(x), Variant::DateTime(y)) => Some(x.0.cmp(&y.0)),
        (Variant::ByteString(x), Variant::ByteString(y)) => Some(x.as_bytes().cmp(y.as_bytes())),
        (Variant::LocalizedText(x), Variant::LocalizedText(y)) => {
            Some(x.text.as_str().cmp(y.text.as_str()))
        }
        (Variant::QualifiedName(x), Variant::QualifiedName(y)) => {
            Some(x.name.as_str().cmp(y.name.as_str()))
        }
        (x, y) => Some(as_i128(x)?.cmp(&as_i128(y)?)),
    }
}

fn bitwise(a: &Variant, b: &Variant, f: fn(i128, i128) -> i128) -> Variant {
    let Some((a, b)) = unify(a, b) else {
        return Variant::Empty;
    };
    let Some(t) = a.scalar_type().filter(|t| is_integer(*t)) else {
        return Variant::Empty;
    };
    match (as_i128(&a), as_i128(&b)) {
        (Some(x), Some(y)) => int_as(t, f(x, y)).unwrap_or(Variant::Empty),
        _ => Variant::Empty,
    }
}

// ---- Like ----

#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// `%`: any run of characters.
    Any,
    /// `_`: one character.
    One,
    Char(char),
    /// `[...]`: ranges (inclusive), negated with `^`.
    Set {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

/// Parses a Like pattern; `None` when malformed or too long.
fn parse_like(p: &str) -> Option<Vec<Token>> {
    if p.chars().count() > MAX_LIKE_PATTERN_CHARS {
        return None;
    }
    let mut out = Vec::new();
    let mut it = p.chars().peekable();
    while let Some(c) = it.next() {
        match c {
            '%' => {
                if out.last() != Some(&Token::Any) {
                    out.push(Token::Any);
                }
            }
            '_' => out.push(Token::One),
            '\\' => out.push(Token::Char(it.next()?)),
            '[' => {
                let negated = it.peek() == Some(&'^');
                if negated {
                    it.next();
                }
                let mut ranges = Vec::new();
                loop {
                    let a = it.next()?;
                    if a == ']' && !ranges.is_empty() {
                        break;
                    }
                    let a = if a == '\\' { it.next()? } else { a };
                    if it.peek() == Some(&'-') {
                        it.next();
                        match it.next()? {
                            ']' => {
                                ranges.push((a, a));
                                ranges.push(('-', '-'));
                                break;
                            }
                            b => ranges.push((a.min(b), a.max(b))),
                        }
                    } else {
                        ranges.push((a, a));
                    }
                }
                out.push(Token::Set { negated, ranges });
            }
            c => out.push(Token::Char(c)),
        }
    }
    Some(out)
}

fn token_matches(t: &Token, c: char) -> bool {
    match t {
        Token::One => true,
        Token::Char(x) => *x == c,
        Token::Set { negated, ranges } => {
            ranges.iter().any(|(a, b)| (*a..=*b).contains(&c)) != *negated
        }
        Token::Any => true,
    }
}

/// Matches `text` against a parsed pattern (greedy with one backtrack point per `%`:
/// O(text × pattern) at worst). `None` when the text is too long.
fn like(p: &[Token], text: &str) -> Option<bool> {
    let t: Vec<char> = text.chars().take(MAX_LIKE_TEXT_CHARS + 1).collect();
    if t.len() > MAX_LIKE_TEXT_CHARS {
        return None;
    }
    let (mut ti, mut pi) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while let Some(&c) = t.get(ti) {
        match p.get(pi) {
            Some(Token::Any) => {
                star = Some((pi, ti));
                pi += 1;
            }
            Some(tok) if token_matches(tok, c) => {
                ti += 1;
                pi += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    pi = sp + 1;
                    ti = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return Some(false),
            },
        }
    }
    while p.get(pi) == Some(&Token::Any) {
        pi += 1;
    }
    Some(pi == p.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        like(&parse_like(p).unwrap(), t).unwrap()
    }

    #[test]
    fn like_patterns() {
        assert!(m("Demo%", "Demo event 5"));
        assert!(!m("Demo%", "A Demo"));
        assert!(m("%event%", "Demo event 5"));
        assert!(m("D_mo", "Demo"));
        assert!(!m("D_mo", "Dmo"));
        assert!(m("[A-C]at", "Bat"));
        assert!(!m("[A-C]at", "Rat"));
        assert!(m("[^A-C]at", "Rat"));
        assert!(m("100\\%", "100%"));
        assert!(!m("100\\%", "1000"));
        assert!(m("%", ""));
        assert!(m("a%b%c", "aXXbYYc"));
        assert!(!m("a%b%c", "aXXbYY"));
        assert!(parse_like("[abc").is_none());
        assert!(parse_like(&"x".repeat(MAX_LIKE_PATTERN_CHARS + 1)).is_none());
    }

    #[test]
    fn conversions() {
        assert_eq!(
            equals(&Variant::Int32(5), &Variant::Double(5.0)),
            Some(true)
        );
        assert_eq!(
            equals(&Variant::UInt16(500), &Variant::String("500".into())),
            Some(true)
        );
        // -1 cannot become a UInt64: NULL, not a comparison.
        assert_eq!(compare(&Variant::Int32(-1), &Variant::UInt64(5)), None);
        assert_eq!(
            compare(&Variant::Int64(-1), &Variant::UInt64(5)),
            Some(Ordering::Less)
        );
        assert_eq!(equals(&Variant::Empty, &Variant::Int32(1)), None);
        assert_eq!(
            compare(&Variant::Byte(7), &Variant::Float(7.5)),
            Some(Ordering::Less)
        );
    }
}
