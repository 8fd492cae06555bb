//! Events: EventFilter compile results and where-clause evaluation, the cross-shard bus
//! (order, lapping, missed counts, concurrent publishers), an application alarm (the test
//! content's: activation, Acknowledge / Confirm, Retain, ConditionRefresh, its Variables) and
//! the session events.

#[path = "support/content.rs"]
mod content;
use std::sync::Arc;

use uaring_core::config::ServerConfig;
use uaring_core::events::condition::{is_refresh_bracket, ConditionAction};
use uaring_core::events::filter::{compile_with, FilterLimits};
use uaring_core::events::{self, ids, Event, EventBus};
use uaring_core::generated::types::*;
use uaring_core::shared::ServerShared;
use uaring_core::types::{
    BuiltinType, ByteString, DateTime, ExtensionObject, LocalizedText, NodeId, QualifiedName,
    StatusCode, UaString, Variant,
};
use uaring_core::Now;

fn start() -> Now {
    Now::new(
        1_000_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

fn shared_with(f: impl FnOnce(&mut ServerConfig)) -> Arc<ServerShared> {
    let mut c = ServerConfig::default();
    f(&mut c);
    content::new(c, start()).expect("config")
}

fn shared() -> Arc<ServerShared> {
    shared_with(|_| {})
}

fn sao(type_id: NodeId, path: &[(u16, &str)], attr: u32) -> SimpleAttributeOperand {
    SimpleAttributeOperand {
        type_definition_id: type_id,
        browse_path: path
            .iter()
            .map(|(ns, n)| QualifiedName::new(*ns, n))
            .collect(),
        attribute_id: attr,
        index_range: UaString::null(),
    }
}

fn base(name: &str) -> SimpleAttributeOperand {
    sao(NodeId::ns0(ids::BASE_EVENT_TYPE), &[(0, name)], 13)
}

fn lit(v: Variant) -> ExtensionObject {
    ExtensionObject::from_struct(&LiteralOperand { value: v })
}

fn elem(i: u32) -> ExtensionObject {
    ExtensionObject::from_struct(&ElementOperand { index: i })
}

fn field(s: SimpleAttributeOperand) -> ExtensionObject {
    ExtensionObject::from_struct(&s)
}

fn el(op: FilterOperator, operands: Vec<ExtensionObject>) -> ContentFilterElement {
    ContentFilterElement {
        filter_operator: op,
        filter_operands: operands,
    }
}

fn filter(select: Vec<SimpleAttributeOperand>, elements: Vec<ContentFilterElement>) -> EventFilter {
    EventFilter {
        select_clauses: select,
        where_clause: ContentFilter { elements },
    }
}

/// A Demo event: Severity 500, Message "Demo event 4", Sequence 4.
fn demo_event(s: &ServerShared) -> Event {
    content::demo_event(s, 4, "Demo event 4", 500, start().utc)
}

/// Does the event pass a where clause made of `elements`?
fn passes(s: &ServerShared, ev: &Event, elements: Vec<ContentFilterElement>) -> bool {
    let f = filter(vec![base("EventId")], elements);
    let (c, _) = events::compile(&f, &s.address_space).expect("filter compiles");
    c.apply(ev).is_some()
}

fn cmp(op: FilterOperator, a: ExtensionObject, b: ExtensionObject) -> Vec<ContentFilterElement> {
    vec![el(op, vec![a, b])]
}

// ---- compile ----

#[test]
fn select_clause_results() {
    let s = shared();
    let space = &s.address_space;
    let f = filter(
        vec![
            base("Message"),
            sao(NodeId::numeric(0, 999_999), &[(0, "Message")], 13),
            sao(NodeId::ns0(61), &[(0, "Message")], 13), // FolderType: no event type
            sao(NodeId::ns0(ids::BASE_EVENT_TYPE), &[(0, "")], 13),
            sao(NodeId::ns0(ids::BASE_EVENT_TYPE), &[(0, "Message")], 99),
            SimpleAttributeOperand {
                index_range: "x:y".into(),
                ..base("Message")
            },
            base("NoSuchField"),
        ],
        vec![],
    );
    let (c, r) = events::compile(&f, space).expect("some clauses are good");
    assert_eq!(
        r.select_clause_results,
        vec![
            StatusCode::Good,
            StatusCode::BadNodeIdUnknown,
            StatusCode::BadTypeDefinitionInvalid,
            StatusCode::BadBrowseNameInvalid,
            StatusCode::BadAttributeIdInvalid,
            StatusCode::BadIndexRangeInvalid,
            StatusCode::Good,
        ]
    );
    let fields = c.apply(&demo_event(&s)).expect("no where clause");
    assert_eq!(fields.len(), 7);
    assert_eq!(
        fields[0],
        Variant::LocalizedText(Box::new(LocalizedText::new("en", "Demo event 4")))
    );
    assert!(
        fields[1..].iter().all(Variant::is_empty),
        "bad clauses and unknown paths select Null: {fields:?}"
    );
}

#[test]
fn whole_filter_invalid() {
    let s = shared();
    let space = &s.address_space;
    // No select clause.
    let (st, _) = events::compile(&filter(vec![], vec![]), space).unwrap_err();
    assert_eq!(st, StatusCode::BadEventFilterInvalid);
    // Every select clause bad.
    let (st, r) = events::compile(&filter(vec![base("")], vec![]), space).unwrap_err();
    assert_eq!(st, StatusCode::BadEventFilterInvalid);
    assert_eq!(
        r.select_clause_results,
        vec![StatusCode::BadBrowseNameInvalid]
    );
    // Too many select clauses / elements for the limits.
    let limits = FilterLimits {
        max_select_clauses: 2,
        max_elements: 1,
    };
    let three = filter(
        vec![base("Message"), base("Severity"), base("Time")],
        vec![],
    );
    assert_eq!(
        compile_with(&three, space, limits).unwrap_err().0,
        StatusCode::BadEventFilterInvalid
    );
    let two_el = filter(
        vec![base("Message")],
        vec![
            el(FilterOperator::Not, vec![elem(1)]),
            el(FilterOperator::IsNull, vec![field(base("Message"))]),
        ],
    );
    assert_eq!(
        compile_with(&two_el, space, limits).unwrap_err().0,
        StatusCode::BadEventFilterInvalid
    );
    assert!(compile_with(&two_el, space, FilterLimits::default()).is_ok());
}

#[test]
fn where_clause_element_results() {
    let s = shared();
    let space = &s.address_space;
    let attr_op = ExtensionObject::from_struct(&AttributeOperand {
        node_id: NodeId::ns0(2253),
        attribute_id: 13,
        ..Default::default()
    });
    let elements = vec![
        el(FilterOperator::And, vec![elem(1), elem(2)]), // 0 ok
        el(
            FilterOperator::Cast,
            vec![
                lit(Variant::Int32(1)),
                lit(Variant::NodeId(Box::new(NodeId::ns0(11)))),
            ],
        ), // 1
        el(FilterOperator(99), vec![lit(Variant::Int32(1))]), // 2 unknown operator
        el(FilterOperator::Equals, vec![lit(Variant::Int32(1))]), // 3 one operand
        el(FilterOperator::Not, vec![elem(0)]),          // 4 backwards: a loop
        el(FilterOperator::IsNull, vec![attr_op]),       // 5 AttributeOperand
        el(
            FilterOperator::OfType,
            vec![lit(Variant::NodeId(Box::new(NodeId::ns0(61))))],
        ), // 6 FolderType
        el(
            FilterOperator::Like,
            vec![
                field(base("Message")),
                lit(Variant::String("[unclosed".into())),
            ],
        ), // 7
        el(
            FilterOperator::InView,
            vec![lit(Variant::NodeId(Box::new(NodeId::ns0(85))))],
        ), // 8
        el(
            FilterOperator::Equals,
            vec![
                field(sao(NodeId::numeric(0, 999_999), &[(0, "Severity")], 13)),
                lit(Variant::Int32(1)),
            ],
        ), // 9
        el(
            FilterOperator::Between,
            vec![lit(Variant::Int32(1)), lit(Variant::Int32(2))],
        ), // 10 needs 3
    ];
    let (st, r) = events::compile(&filter(vec![base("Message")], elements), space).unwrap_err();
    assert_eq!(st, StatusCode::BadEventFilterInvalid);
    let er = &r.where_clause_result.element_results;
    let statuses: Vec<StatusCode> = er.iter().map(|e| e.status_code).collect();
    assert_eq!(
        statuses,
        vec![
            StatusCode::Good,
            StatusCode::BadFilterOperatorUnsupported,
            StatusCode::BadFilterOperatorInvalid,
            StatusCode::BadFilterOperandCountMismatch,
            StatusCode::BadFilterOperandInvalid,
            StatusCode::BadFilterOperandInvalid,
            StatusCode::BadFilterOperandInvalid,
            StatusCode::BadFilterOperandInvalid,
            StatusCode::BadFilterOperatorUnsupported,
            StatusCode::BadFilterOperandInvalid,
            StatusCode::BadFilterOperandCountMismatch,
        ]
    );
    assert_eq!(
        er[4].operand_status_codes,
        vec![StatusCode::BadFilterOperandInvalid]
    );
    assert_eq!(
        er[7].operand_status_codes,
        vec![StatusCode::Good, StatusCode::BadFilterOperandInvalid]
    );
    assert_eq!(
        er[9].operand_status_codes,
        vec![StatusCode::BadNodeIdUnknown, StatusCode::Good]
    );
    // Select results stay per clause.
    assert_eq!(r.select_clause_results, vec![StatusCode::Good]);
}

#[test]
fn good_filter_has_empty_results() {
    let s = shared();
    let f = filter(
        vec![base("Message")],
        vec![el(
            FilterOperator::OfType,
            vec![lit(Variant::NodeId(Box::new(content::demo_event_type())))],
        )],
    );
    let (_, r) = events::compile(&f, &s.address_space).unwrap();
    assert!(r.select_clause_results.is_empty());
    assert!(r.where_clause_result.element_results.is_empty());
}

// ---- evaluation, one operator at a time ----

#[test]
fn comparisons_convert_numeric_types() {
    let s = shared();
    let ev = demo_event(&s); // Severity 500 (UInt16)
    let sev = || field(base("Severity"));
    assert!(passes(
        &s,
        &ev,
        cmp(FilterOperator::Equals, sev(), lit(Variant::Int32(500)))
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(FilterOperator::Equals, sev(), lit(Variant::Double(500.0)))
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(
            FilterOperator::Equals,
            sev(),
            lit(Variant::String("500".into()))
        )
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(FilterOperator::Equals, sev(), lit(Variant::Int32(501)))
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(FilterOperator::GreaterThan, sev(), lit(Variant::Byte(200)))
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(FilterOperator::GreaterThan, sev(), lit(Variant::Int64(500)))
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(FilterOperator::LessThan, sev(), lit(Variant::Float(500.5)))
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(FilterOperator::LessThan, sev(), lit(Variant::UInt32(500)))
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(
            FilterOperator::GreaterThanOrEqual,
            sev(),
            lit(Variant::UInt64(500))
        )
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(
            FilterOperator::GreaterThanOrEqual,
            sev(),
            lit(Variant::UInt64(501))
        )
    ));
    assert!(passes(
        &s,
        &ev,
        cmp(
            FilterOperator::LessThanOrEqual,
            sev(),
            lit(Variant::Int16(500))
        )
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(
            FilterOperator::LessThanOrEqual,
            sev(),
            lit(Variant::Int16(499))
        )
    ));
    // A value that cannot convert is NULL: neither > nor <=.
    let neg = || lit(Variant::SByte(-1));
    let big = || lit(Variant::UInt64(u64::MAX));
    assert!(!passes(
        &s,
        &ev,
        cmp(FilterOperator::LessThan, neg(), big())
    ));
    assert!(!passes(
        &s,
        &ev,
        cmp(FilterOperator::GreaterThanOrEqual, neg(), big())
    ));
    // A comparison with a missing field is NULL.
    assert!(!passes(
        &s,
        &ev,
        cmp(
            FilterOperator::Equals,
            field(base("Nope")),
            lit(Variant::Int32(0))
        )
    ));
    // Message (LocalizedText) against a String.
    assert!(passes(
        &s,
        &ev,
        cmp(
            FilterOperator::Equals,
            field(base("Message")),
            lit(Variant::String("Demo event 4".into()))
        )
    ));
}

#[test]
fn between_inlist_isnull_bitwise() {
    let s = shared();
    let ev = demo_event(&s);
    let sev = || field(base("Severity"));
    let between = |lo, hi| {
        vec![el(
            FilterOperator::Between,
            vec![sev(), lit(Variant::Int32(lo)), lit(Variant::Int32(hi))],
        )]
    };
    assert!(passes(&s, &ev, between(100, 500)));
    assert!(!passes(&s, &ev, between(501, 900)));
    let inlist = |v: Vec<i32>| {
        let mut ops = vec![sev()];
        ops.extend(v.into_iter().map(|x| lit(Variant::Int32(x))));
        vec![el(FilterOperator::InList, ops)]
    };
    assert!(passes(&s, &ev, inlist(vec![100, 500, 900])));
    assert!(!passes(&s, &ev, inlist(vec![100, 900])));
    assert!(passes(
        &s,
        &ev,
        vec![el(FilterOperator::IsNull, vec![field(base("NoSuchField"))])]
    ));
    assert!(!passes(
        &s,
        &ev,
        vec![el(FilterOperator::IsNull, vec![sev()])]
    ));
    // (Severity & 0x1F4) == 500, (Severity | 1) == 501.
    let bit = |op, mask, want| {
        vec![
            el(
                FilterOperator::Equals,
                vec![elem(1), lit(Variant::Int32(want))],
            ),
            el(op, vec![sev(), lit(Variant::UInt16(mask))]),
        ]
    };
    assert!(passes(&s, &ev, bit(FilterOperator::BitwiseAnd, 0x1F4, 500)));
    assert!(passes(&s, &ev, bit(FilterOperator::BitwiseOr, 1, 501)));
    assert!(!passes(&s, &ev, bit(FilterOperator::BitwiseAnd, 0x0F, 500)));
}

#[test]
fn like_on_message() {
    let s = shared();
    let ev = demo_event(&s);
    let like = |p: &str| {
        cmp(
            FilterOperator::Like,
            field(base("Message")),
            lit(Variant::String(p.into())),
        )
    };
    assert!(passes(&s, &ev, like("Demo%")));
    assert!(passes(&s, &ev, like("%event _")));
    assert!(passes(&s, &ev, like("Demo event [0-4]")));
    assert!(!passes(&s, &ev, like("Demo event [^0-4]")));
    assert!(!passes(&s, &ev, like("Alarm%")));
}

#[test]
fn logic_is_three_valued() {
    let s = shared();
    let ev = demo_event(&s);
    let t = || lit(Variant::Boolean(true));
    let f = || lit(Variant::Boolean(false));
    let null = || field(base("NoSuchField"));
    assert!(passes(&s, &ev, cmp(FilterOperator::And, t(), t())));
    assert!(!passes(&s, &ev, cmp(FilterOperator::And, t(), f())));
    assert!(!passes(&s, &ev, cmp(FilterOperator::And, t(), null())));
    assert!(passes(&s, &ev, cmp(FilterOperator::Or, f(), t())));
    assert!(passes(&s, &ev, cmp(FilterOperator::Or, null(), t())));
    assert!(!passes(&s, &ev, cmp(FilterOperator::Or, null(), f())));
    assert!(passes(&s, &ev, vec![el(FilterOperator::Not, vec![f()])]));
    assert!(
        !passes(&s, &ev, vec![el(FilterOperator::Not, vec![null()])]),
        "NOT NULL is NULL"
    );
    // Not(And(Severity > 100, OfType DemoEventType)) through element operands.
    let tree = vec![
        el(FilterOperator::Not, vec![elem(1)]),
        el(FilterOperator::And, vec![elem(2), elem(3)]),
        el(
            FilterOperator::GreaterThan,
            vec![field(base("Severity")), lit(Variant::Int32(100))],
        ),
        el(
            FilterOperator::OfType,
            vec![lit(Variant::NodeId(Box::new(content::demo_event_type())))],
        ),
    ];
    assert!(!passes(&s, &ev, tree));
}

#[test]
fn of_type_follows_the_hierarchy() {
    let s = shared();
    let ev = demo_event(&s);
    let of = |id: NodeId| {
        vec![el(
            FilterOperator::OfType,
            vec![lit(Variant::NodeId(Box::new(id)))],
        )]
    };
    assert!(passes(&s, &ev, of(content::demo_event_type())));
    assert!(passes(&s, &ev, of(NodeId::ns0(ids::BASE_EVENT_TYPE))));
    assert!(!passes(&s, &ev, of(NodeId::ns0(ids::ALARM_CONDITION_TYPE))));
    let alarm = content::set_alarm_active(&s, true, start().utc).expect("alarm goes active");
    assert!(passes(&s, &alarm, of(NodeId::ns0(ids::CONDITION_TYPE))));
    assert!(passes(
        &s,
        &alarm,
        of(NodeId::ns0(ids::ACKNOWLEDGEABLE_CONDITION_TYPE))
    ));
    assert!(!passes(&s, &alarm, of(content::demo_event_type())));
}

#[test]
fn fields_by_type_and_path() {
    let s = shared();
    let ev = demo_event(&s);
    let seq = vec![QualifiedName::new(1, "Sequence")];
    assert_eq!(
        ev.field(&content::demo_event_type(), &seq, 13),
        Variant::UInt32(4)
    );
    assert_eq!(
        ev.field(&NodeId::ns0(ids::BASE_EVENT_TYPE), &seq, 13),
        Variant::UInt32(4)
    );
    assert_eq!(
        ev.field(&NodeId::ns0(ids::ALARM_CONDITION_TYPE), &seq, 13),
        Variant::Empty,
        "not of that type"
    );
    assert_eq!(
        ev.field(
            &content::demo_event_type(),
            &[QualifiedName::new(0, "Severity")],
            13
        ),
        Variant::UInt16(500)
    );
    assert_eq!(
        ev.field(&content::demo_event_type(), &[], 1),
        Variant::Empty,
        "no ConditionId"
    );
    assert!(ev.is_reported_on(&NodeId::ns0(2253)));
    assert!(ev.is_reported_on(&content::demo_folder_id()));
    assert!(!ev.is_reported_on(&NodeId::ns0(85)));

    let alarm = content::set_alarm_active(&s, true, start().utc).unwrap();
    let cond = NodeId::ns0(ids::CONDITION_TYPE);
    assert_eq!(
        alarm.field(&cond, &[], 1),
        Variant::NodeId(Box::new(content::alarm_id()))
    );
    let acked = [
        QualifiedName::new(0, "AckedState"),
        QualifiedName::new(0, "Id"),
    ];
    assert_eq!(
        alarm.field(
            &NodeId::ns0(ids::ACKNOWLEDGEABLE_CONDITION_TYPE),
            &acked,
            13
        ),
        Variant::Boolean(false)
    );
    assert_eq!(
        alarm.field(&NodeId::ns0(ids::ACKNOWLEDGEABLE_CONDITION_TYPE), &acked, 4),
        Variant::Empty
    );

    // The select list of a client asking for the alarm's states through a filter.
    let f = filter(
        vec![
            sao(cond.clone(), &[], 1),
            sao(
                NodeId::ns0(ids::ALARM_CONDITION_TYPE),
                &[(0, "ActiveState"), (0, "Id")],
                13,
            ),
            sao(cond, &[(0, "Retain")], 13),
            base("EventId"),
        ],
        vec![],
    );
    let (c, _) = events::compile(&f, &s.address_space).unwrap();
    let got = c.apply(&alarm).unwrap();
    assert_eq!(got[0], Variant::NodeId(Box::new(content::alarm_id())));
    assert_eq!(got[1], Variant::Boolean(true));
    assert_eq!(got[2], Variant::Boolean(true));
    assert_eq!(got[3], Variant::ByteString(alarm.event_id.clone()));
}

// ---- bus ----

fn numbered(s: &ServerShared, n: u32) -> Event {
    content::demo_event(s, n, "x", 100, start().utc)
}

fn seq_of(e: &Event) -> u32 {
    match e.field(&NodeId::NULL, &[QualifiedName::new(1, "Sequence")], 13) {
        Variant::UInt32(n) => n,
        other => panic!("no Sequence: {other:?}"),
    }
}

#[test]
fn bus_delivers_in_order_and_is_quiet_when_idle() {
    let s = shared();
    let bus = EventBus::new(16);
    let mut c = bus.cursor();
    let mut calls = 0;
    assert_eq!(c.poll(&bus, |_| calls += 1), 0);
    assert_eq!(calls, 0);
    for i in 0..10 {
        bus.publish(numbered(&s, i));
    }
    let mut got = Vec::new();
    assert_eq!(c.poll(&bus, |e| got.push(seq_of(e))), 0);
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(c.poll(&bus, |_| calls += 1), 0);
    assert_eq!(calls, 0, "nothing new, nothing delivered");
    // A cursor made now sees only what comes later.
    let mut late = bus.cursor();
    bus.publish(numbered(&s, 10));
    let mut got = Vec::new();
    late.poll(&bus, |e| got.push(seq_of(e)));
    assert_eq!(got, vec![10]);
}

#[test]
fn bus_keeps_events_only_while_a_cursor_has_to_read_them() {
    let s = shared();
    let bus = EventBus::new(16);
    // No cursor open: nothing is kept.
    for i in 0..10 {
        bus.publish(numbered(&s, i));
    }
    assert_eq!((bus.readers(), bus.held(), bus.published()), (0, 0, 10));
    let mut a = bus.cursor();
    let mut b = bus.cursor();
    assert_eq!(bus.readers(), 2);
    for i in 10..15 {
        bus.publish(numbered(&s, i));
    }
    assert_eq!(bus.held(), 5);
    let mut got = Vec::new();
    assert_eq!(a.poll(&bus, |e| got.push(seq_of(e))), 0);
    assert_eq!(got, (10..15).collect::<Vec<_>>());
    assert_eq!(bus.held(), 5, "b has not read them yet");
    let mut got = Vec::new();
    assert_eq!(b.poll(&bus, |e| got.push(seq_of(e))), 0);
    assert_eq!(got, (10..15).collect::<Vec<_>>());
    assert_eq!(bus.held(), 0, "the last reader empties the slots");
    // Emptied slots are not mistaken for events still being stored: later events arrive.
    for i in 15..40 {
        bus.publish(numbered(&s, i));
        let mut got = Vec::new();
        a.poll(&bus, |e| got.push(seq_of(e)));
        b.poll(&bus, |e| got.push(seq_of(e)));
        assert_eq!(got, vec![i, i]);
    }
    assert_eq!(bus.held(), 0);
    // A closed cursor is not waited for; one that falls behind keeps what it has not read.
    bus.close(b);
    bus.publish(numbered(&s, 40));
    assert_eq!(bus.held(), 1);
    let mut got = Vec::new();
    a.poll(&bus, |e| got.push(seq_of(e)));
    assert_eq!((got, bus.held()), (vec![40], 0));
    bus.close(a);
    bus.publish(numbered(&s, 41));
    assert_eq!((bus.readers(), bus.held()), (0, 0));
}

#[test]
fn bus_builds_an_event_only_when_a_cursor_will_read_it() {
    let s = shared();
    let bus = EventBus::new(16);
    let mut built = 0;
    bus.publish_with(|| {
        built += 1;
        numbered(&s, 0)
    });
    assert_eq!(
        (built, bus.published(), bus.held()),
        (0, 1, 0),
        "no cursor: not built, not kept"
    );
    let mut c = bus.cursor();
    bus.publish_with(|| {
        built += 1;
        numbered(&s, 1)
    });
    assert_eq!(built, 1);
    let mut got = Vec::new();
    c.poll(&bus, |e| got.push(seq_of(e)));
    assert_eq!(got, vec![1]);
    bus.close(c);
}

#[test]
fn bus_lapping_counts_missed() {
    let s = shared();
    let bus = EventBus::new(16);
    let mut c = bus.cursor();
    for i in 0..40 {
        bus.publish(numbered(&s, i));
    }
    let mut got = Vec::new();
    let missed = c.poll(&bus, |e| got.push(seq_of(e)));
    assert_eq!(missed, 24);
    assert_eq!(
        got,
        (24..40).collect::<Vec<_>>(),
        "the newest capacity events, in order"
    );
    assert_eq!(c.position(), 40);
    // Exactly a full ring behind: nothing missed.
    for i in 40..56 {
        bus.publish(numbered(&s, i));
    }
    let mut n = 0;
    assert_eq!(c.poll(&bus, |_| n += 1), 0);
    assert_eq!(n, 16);
}

#[test]
fn bus_concurrent_publishers() {
    let s = shared();
    let bus = Arc::new(EventBus::new(8192));
    let mut c = bus.cursor();
    let threads: Vec<_> = (0..4u32)
        .map(|t| {
            let bus = Arc::clone(&bus);
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for i in 0..1000 {
                    bus.publish(numbered(&s, t * 1000 + i));
                }
            })
        })
        .collect();
    let mut seen = Vec::new();
    let mut missed = 0;
    // Poll while they publish, then once more after they are done.
    while !threads.iter().all(|t| t.is_finished()) {
        missed += c.poll(&bus, |e| seen.push(seq_of(e)));
    }
    for t in threads {
        t.join().unwrap();
    }
    missed += c.poll(&bus, |e| seen.push(seq_of(e)));
    assert_eq!(missed, 0);
    assert_eq!(seen.len(), 4000);
    // Each publisher's events arrive in its own order, every one exactly once.
    for t in 0..4u32 {
        let mine: Vec<u32> = seen.iter().copied().filter(|n| n / 1000 == t).collect();
        assert_eq!(mine, (t * 1000..t * 1000 + 1000).collect::<Vec<_>>());
    }
}

// ---- the alarm ----

fn read_value(s: &ServerShared, id: &NodeId) -> Variant {
    let n = s
        .address_space
        .node(id)
        .unwrap_or_else(|| panic!("node {id}"));
    s.address_space.variable_value(n, start()).unwrap().value
}

#[test]
fn alarm_acknowledge_and_confirm() {
    let s = shared();
    let ev = &s.events;
    let t = start().utc;
    let mut cursor = ev.bus.cursor();
    let nobody = LocalizedText::default();
    // Nothing raised yet: no EventId is known.
    let initial = content::alarm(&s).state();
    assert!(!initial.retain());
    assert_eq!(
        content::alarm_action(
            &s,
            ConditionAction::Acknowledge,
            &initial.event_id,
            &nobody,
            "",
            t
        ),
        Err(StatusCode::BadEventIdUnknown)
    );
    let active = content::set_alarm_active(&s, true, t).unwrap();
    assert!(
        content::set_alarm_active(&s, true, t).is_none(),
        "no change, no event"
    );
    assert_eq!(active.field_ns0("Retain"), Variant::Boolean(true));
    assert_eq!(active.field_ns0("AckedState/Id"), Variant::Boolean(false));
    assert_eq!(
        read_value(
            &s,
            &content::alarm_child_id(&[
                QualifiedName::new(0, "ActiveState"),
                QualifiedName::new(0, "Id")
            ])
        ),
        Variant::Boolean(true)
    );

    let wrong = ByteString::from(vec![0u8; 16]);
    let comment = LocalizedText::new("en", "seen it");
    assert_eq!(
        content::alarm_action(&s, ConditionAction::Acknowledge, &wrong, &comment, "op", t),
        Err(StatusCode::BadEventIdUnknown)
    );
    content::alarm_action(
        &s,
        ConditionAction::Acknowledge,
        &active.event_id,
        &comment,
        "op",
        t,
    )
    .unwrap();
    let mut published = Vec::new();
    cursor.poll(&ev.bus, |e| published.push(e.clone()));
    assert_eq!(published.len(), 1, "the acknowledge raised one event");
    let acked = &published[0];
    assert_eq!(acked.field_ns0("AckedState/Id"), Variant::Boolean(true));
    assert_eq!(
        acked.field_ns0("Comment"),
        Variant::LocalizedText(Box::new(comment.clone()))
    );
    assert_eq!(
        acked.field_ns0("ClientUserId"),
        Variant::String("op".into())
    );
    assert_ne!(acked.event_id, active.event_id);
    // The old EventId is stale now; the new one says "already acked".
    assert_eq!(
        content::alarm_action(
            &s,
            ConditionAction::Acknowledge,
            &active.event_id,
            &comment,
            "op",
            t
        ),
        Err(StatusCode::BadEventIdUnknown)
    );
    assert_eq!(
        content::alarm_action(
            &s,
            ConditionAction::Acknowledge,
            &acked.event_id,
            &comment,
            "op",
            t
        ),
        Err(StatusCode::BadConditionBranchAlreadyAcked)
    );
    assert_eq!(
        read_value(
            &s,
            &content::alarm_child_id(&[
                QualifiedName::new(0, "AckedState"),
                QualifiedName::new(0, "Id")
            ])
        ),
        Variant::Boolean(true)
    );
    assert_eq!(
        read_value(
            &s,
            &content::alarm_child_id(&[QualifiedName::new(0, "EventId")])
        ),
        Variant::ByteString(acked.event_id.clone())
    );

    content::alarm_action(
        &s,
        ConditionAction::Confirm,
        &acked.event_id,
        &nobody,
        "op",
        t,
    )
    .unwrap();
    let confirmed = content::alarm(&s).state();
    assert!(confirmed.confirmed && confirmed.acked && confirmed.active);
    assert!(confirmed.retain(), "still active");
    assert_eq!(
        content::alarm_action(
            &s,
            ConditionAction::Confirm,
            &confirmed.event_id,
            &nobody,
            "op",
            t
        ),
        Err(StatusCode::BadConditionBranchAlreadyConfirmed)
    );
    let inactive = content::set_alarm_active(&s, false, t).unwrap();
    assert_eq!(inactive.field_ns0("Retain"), Variant::Boolean(false));
    assert_eq!(
        read_value(
            &s,
            &content::alarm_child_id(&[QualifiedName::new(0, "Retain")])
        ),
        Variant::Boolean(false)
    );
}

#[test]
fn condition_refresh_brackets_retained_conditions() {
    let s = shared();
    let ev = &s.events;
    let t = start().utc;
    let types = |v: &[Event]| v.iter().map(|e| e.event_type.clone()).collect::<Vec<_>>();
    let quiet = ev.condition_refresh(t);
    assert_eq!(
        types(&quiet),
        vec![
            NodeId::ns0(ids::REFRESH_START_EVENT_TYPE),
            NodeId::ns0(ids::REFRESH_END_EVENT_TYPE)
        ]
    );
    assert!(is_refresh_bracket(&quiet[0]) && is_refresh_bracket(&quiet[1]));
    let active = content::set_alarm_active(&s, true, t).unwrap();
    let r = ev.condition_refresh(t);
    assert_eq!(r.len(), 3);
    assert_eq!(
        r[1].event_id, active.event_id,
        "the refresh copy can be acknowledged"
    );
    assert!(!is_refresh_bracket(&r[1]));
    // The bracket bypasses the where clause; the condition goes through it.
    let f = filter(
        vec![base("EventType")],
        vec![el(
            FilterOperator::OfType,
            vec![lit(Variant::NodeId(Box::new(content::demo_event_type())))],
        )],
    );
    let (c, _) = events::compile(&f, &s.address_space).unwrap();
    assert!(c.apply(&r[1]).is_none());
    assert_eq!(
        c.select(&r[0]),
        vec![Variant::NodeId(Box::new(NodeId::ns0(
            ids::REFRESH_START_EVENT_TYPE
        )))]
    );
    let mut n = 0;
    ev.bus.cursor().poll(&ev.bus, |_| n += 1);
    assert_eq!(n, 0, "a refresh publishes nothing on the bus");
}

// ---- session events ----

#[test]
fn session_events() {
    let s = shared();
    let sid = NodeId::string(1, "session-1");
    let cert = ByteString::from(vec![1u8, 2, 3]);
    let created =
        events::audit::session_created_event(&s.events, &sid, 7, &cert, 60_000.0, start());
    assert_eq!(
        created.event_type,
        NodeId::ns0(ids::AUDIT_CREATE_SESSION_EVENT_TYPE)
    );
    assert!(created.is_of_type(&NodeId::ns0(ids::AUDIT_EVENT_TYPE)));
    assert_eq!(created.source_node, sid);
    assert_eq!(
        created.field_ns0("SessionId"),
        Variant::NodeId(Box::new(sid.clone()))
    );
    assert_eq!(
        created.field_ns0("SecureChannelId"),
        Variant::String("7".into())
    );
    assert_eq!(
        created.field_ns0("RevisedSessionTimeout"),
        Variant::Double(60_000.0)
    );
    assert!(created.is_reported_on(&NodeId::ns0(2253)));
    assert!(!created.is_reported_on(&content::demo_folder_id()));
    let mut c = s.events.bus.cursor();
    events::audit::publish_session_closed(&s.events, &sid, true, start());
    let mut got = Vec::new();
    c.poll(&s.events.bus, |e| got.push(e.clone()));
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].source_name, UaString::from("Session/Timeout"));
    assert_eq!(got[0].event_id.as_bytes().len(), events::EVENT_ID_LEN);
    assert_ne!(got[0].event_id, created.event_id);
}

#[test]
fn event_and_condition_nodes() {
    let s = shared();
    let space = &s.address_space;
    let demo = space.node(&content::demo_folder_id()).unwrap();
    assert_eq!(demo.event_notifier(), Some(1));
    assert_eq!(
        space
            .node(&content::demo_events_id())
            .unwrap()
            .event_notifier(),
        Some(1)
    );
    let server = space.node(&NodeId::ns0(2253)).unwrap();
    assert!(server.references().any(|r| r.is_forward
        && r.reference_type.as_ns0() == Some(ids::HAS_NOTIFIER)
        && r.target.as_local() == Some(&content::demo_folder_id())));
    let alarm = space.node(&content::alarm_id()).unwrap();
    assert_eq!(
        alarm.type_definition().and_then(|t| t.as_local().cloned()),
        Some(NodeId::ns0(ids::ALARM_CONDITION_TYPE))
    );
    assert!(alarm
        .references()
        .any(|r| r.target.as_local() == Some(&content::alarm_acknowledge_id())));
    assert!(space.is_subtype_of(
        &content::demo_event_type(),
        &NodeId::ns0(ids::BASE_EVENT_TYPE)
    ));
    for p in [
        "EnabledState",
        "EnabledState.Id",
        "AckedState",
        "ConfirmedState.Id",
        "ActiveState",
        "Retain",
        "Severity",
        "Message",
        "Comment",
        "Comment.SourceTimestamp",
        "Quality.SourceTimestamp",
        "Enable",
        "Disable",
        "AddComment",
    ] {
        let id = NodeId::string(1, format!("Demo.Events.Alarm.{p}"));
        assert!(space.node(&id).is_some(), "{id}");
    }
    // Without the content there is no condition.
    let c = content::new_with(
        ServerConfig::contract(),
        start(),
        &content::Content::contract(),
    )
    .unwrap();
    assert!(c.events.conditions.is_empty());
    assert!(c.address_space.node(&content::alarm_id()).is_none());
}

#[test]
fn notifier_matching_for_monitored_items() {
    let s = shared();
    let space = &s.address_space;
    assert!(events::is_event_notifier(space, &NodeId::ns0(2253)));
    assert!(events::is_event_notifier(space, &content::demo_folder_id()));
    assert!(events::is_event_notifier(space, &content::demo_events_id()));
    assert!(
        !events::is_event_notifier(space, &NodeId::ns0(85)),
        "Objects is no notifier"
    );
    assert!(!events::is_event_notifier(space, &content::alarm_id()));
    assert!(!events::is_event_notifier(
        space,
        &NodeId::string(1, "nope")
    ));

    let f = filter(
        vec![base("Severity")],
        vec![cmp(
            FilterOperator::GreaterThan,
            field(base("Severity")),
            lit(Variant::Int32(300)),
        )
        .remove(0)],
    );
    let (c, _) = events::compile(&f, space).unwrap();
    let ev = demo_event(&s); // severity 500
    assert_eq!(
        c.notification(&NodeId::ns0(2253), &ev),
        Some(vec![Variant::UInt16(500)])
    );
    assert_eq!(
        c.notification(&content::demo_folder_id(), &ev),
        Some(vec![Variant::UInt16(500)])
    );
    assert_eq!(
        c.notification(&NodeId::ns0(85), &ev),
        None,
        "not reported there"
    );
    let low = content::demo_event(&s, 1, "low", 100, start().utc);
    assert_eq!(
        c.notification(&NodeId::ns0(2253), &low),
        None,
        "fails the where clause"
    );
    // A refresh bracket passes any item, whatever its notifier and where clause.
    let refresh = s.events.condition_refresh(start().utc);
    assert_eq!(
        c.refresh_notification(&content::demo_events_id(), &refresh[0]),
        Some(vec![Variant::UInt16(100)])
    );
    assert_eq!(
        c.notification(&content::demo_events_id(), &refresh[0]),
        None
    );
}

// ---- hostile filters ----

#[path = "common/mod.rs"]
mod common;

fn random_variant(r: &mut common::Rng) -> Variant {
    match r.below(10) {
        0 => Variant::Empty,
        1 => Variant::Int32(r.next_u64() as i32),
        2 => Variant::Double(f64::from_bits(r.next_u64())),
        3 => Variant::String(
            ["Demo%", "_[", "[^a-", "\\", "%%_%", "500", "true"][r.below(7) as usize].into(),
        ),
        4 => Variant::Boolean(r.chance(50)),
        5 => Variant::NodeId(Box::new(NodeId::ns0(r.below(3000) as u32))),
        6 => Variant::UInt16(r.next_u64() as u16),
        7 => Variant::array(
            BuiltinType::Int32,
            vec![Variant::Int32(1), Variant::Int32(2)],
        )
        .unwrap(),
        8 => Variant::LocalizedText(Box::new(LocalizedText::new("en", "Demo event 4"))),
        _ => Variant::UInt64(r.next_u64()),
    }
}

fn random_sao(r: &mut common::Rng) -> SimpleAttributeOperand {
    let types = [
        NodeId::ns0(ids::BASE_EVENT_TYPE),
        NodeId::ns0(ids::ALARM_CONDITION_TYPE),
        content::demo_event_type(),
        NodeId::NULL,
        NodeId::ns0(61),
        NodeId::numeric(3, 7),
    ];
    let names = [
        "Severity",
        "Message",
        "Sequence",
        "AckedState",
        "Id",
        "",
        "EventId",
        "Time",
    ];
    let path: Vec<QualifiedName> = (0..r.below(4))
        .map(|_| {
            QualifiedName::new(
                r.below(2) as u16,
                names[r.below(names.len() as u64) as usize],
            )
        })
        .collect();
    SimpleAttributeOperand {
        type_definition_id: types[r.below(types.len() as u64) as usize].clone(),
        browse_path: path,
        attribute_id: [1, 13, 13, 4, 0, 99][r.below(6) as usize],
        index_range: if r.chance(10) {
            "0:1".into()
        } else {
            UaString::null()
        },
    }
}

fn random_operand(r: &mut common::Rng, n: u32) -> ExtensionObject {
    match r.below(6) {
        0 | 1 => lit(random_variant(r)),
        2 => elem(r.below(n as u64 + 2) as u32),
        3 => field(random_sao(r)),
        4 => ExtensionObject::from_struct(&AttributeOperand::default()),
        _ => {
            // Garbage bodies under operand type ids.
            let len = r.below(12) as usize;
            let body: Vec<u8> = (0..len).map(|_| r.next_u64() as u8).collect();
            let id = [597u32, 594, 603, 600, 1][r.below(5) as usize];
            ExtensionObject {
                type_id: NodeId::ns0(id),
                body: uaring_core::types::ExtensionObjectBody::Binary(body),
            }
        }
    }
}

#[test]
fn random_filters_never_panic() {
    let s = shared();
    content::set_alarm_active(&s, true, start().utc);
    let mut evs = vec![
        demo_event(&s),
        events::audit::session_created_event(
            &s.events,
            &NodeId::string(1, "x"),
            1,
            &ByteString::null(),
            1.0,
            start(),
        ),
    ];
    evs.extend(s.events.condition_refresh(start().utc));
    let mut r = common::Rng::new(11);
    let mut compiled = 0;
    for _ in 0..3000 {
        let n = r.below(8) as u32;
        let elements = (0..n)
            .map(|_| {
                let ops = (0..r.below(4)).map(|_| random_operand(&mut r, n)).collect();
                el(FilterOperator(r.below(20) as i32 - 1), ops)
            })
            .collect();
        let select = (0..r.below(4)).map(|_| random_sao(&mut r)).collect();
        let f = filter(select, elements);
        match events::compile(&f, &s.address_space) {
            Ok((c, res)) => {
                compiled += 1;
                assert!(
                    res.select_clause_results.is_empty()
                        || res.select_clause_results.len() == f.select_clauses.len()
                );
                for ev in &evs {
                    if let Some(v) = c.apply(ev) {
                        assert_eq!(v.len(), f.select_clauses.len());
                    }
                }
            }
            Err((st, res)) => {
                assert_eq!(st, StatusCode::BadEventFilterInvalid);
                let er = &res.where_clause_result.element_results;
                assert!(er.is_empty() || er.len() == f.where_clause.elements.len());
            }
        }
    }
    assert!(
        compiled > 100,
        "the generator also makes valid filters: {compiled}"
    );
}

/// The where clause asyncua builds by default: `EventType InList [every subtype of the
/// requested types]` (98 ids for BaseEventType).
#[test]
fn event_type_in_list_of_subtypes() {
    let s = shared();
    let space = &s.address_space;
    let subtypes_of = |t: NodeId| -> Vec<ExtensionObject> {
        space
            .nodes()
            .filter(|n| space.is_subtype_of(&n.node_id(), &t))
            .map(|n| lit(Variant::NodeId(Box::new(n.node_id().clone()))))
            .collect()
    };
    let in_list = |list: Vec<ExtensionObject>| {
        let mut ops = vec![field(base("EventType"))];
        ops.extend(list);
        vec![el(FilterOperator::InList, ops)]
    };
    let demo = demo_event(&s);
    let alarm = content::set_alarm_active(&s, true, start().utc).unwrap();
    let all = subtypes_of(NodeId::ns0(ids::BASE_EVENT_TYPE));
    assert!(
        all.len() > 50 && all.len() < uaring_core::events::filter::MAX_OPERANDS_PER_ELEMENT,
        "{}",
        all.len()
    );
    assert!(passes(&s, &demo, in_list(all.clone())));
    assert!(passes(&s, &alarm, in_list(all)));
    let conditions = subtypes_of(NodeId::ns0(ids::CONDITION_TYPE));
    assert!(!passes(&s, &demo, in_list(conditions.clone())));
    assert!(passes(&s, &alarm, in_list(conditions)));
    // A mixed list takes the general path and still converts: a String naming the NodeId.
    let mixed = vec![
        lit(Variant::Int32(5)),
        lit(Variant::String(
            content::demo_event_type().to_string().as_str().into(),
        )),
    ];
    assert!(passes(&s, &demo, in_list(mixed)));
}

#[test]
fn queue_overflow_event() {
    let s = shared();
    let ev = s.events.queue_overflow_event(start().utc);
    assert_eq!(
        ev.event_type,
        NodeId::ns0(ids::EVENT_QUEUE_OVERFLOW_EVENT_TYPE)
    );
    assert!(ev.is_of_type(&NodeId::ns0(ids::BASE_EVENT_TYPE)));
    assert!(ev.is_reported_on(&NodeId::ns0(ids::SERVER)));
    let f = filter(vec![base("EventType"), base("SourceName")], vec![]);
    let (c, _) = events::compile(&f, &s.address_space).unwrap();
    assert_eq!(
        c.apply(&ev).unwrap(),
        vec![
            Variant::NodeId(Box::new(NodeId::ns0(ids::EVENT_QUEUE_OVERFLOW_EVENT_TYPE))),
            Variant::String("Server".into())
        ]
    );
}
