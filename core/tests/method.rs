//! The Call service (`services::method::call`): request limits, per-call validation
//! (object, method, user, argument count and types), the test content's application
//! methods, and Acknowledge / Confirm on its alarm (by the type's methods and the alarm's own).

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::events::{ids, nodes};
use uaring_core::generated::messages::Response;
use uaring_core::generated::types::*;
use uaring_core::roles::Roles;
use uaring_core::secure_channel::{SecurityProvider, UserTokenSettings};
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::method;
use uaring_core::session::SessionKey;
use uaring_core::types::{BuiltinType, ByteString, LocalizedText, NodeId, StatusCode, Variant};

/// A harness with one activated anonymous session; anonymous users get `access`.
fn setup(access: Roles) -> (Harness, SessionKey) {
    let mut h = Harness::new();
    let mut security = SecurityProvider::none_only();
    security.set_user_tokens(UserTokenSettings {
        anonymous: Some(access),
        ..UserTokenSettings::default()
    });
    h.state = ServiceState::new(
        std::sync::Arc::clone(h.state.shared()),
        0,
        Box::new(uaring_core::random::ChaCha::from_u64(1)),
    )
    .with_security(security);
    h.channel = h.state.next_channel_id();
    let token = h.open_session();
    let (ch, now) = (h.channel, h.now);
    let key = h
        .state
        .session_for_request(&token, ch, now)
        .expect("session")
        .key;
    (h, key)
}

fn request(methods: Vec<CallMethodRequest>) -> CallRequest {
    CallRequest {
        request_header: RequestHeader {
            request_handle: 7,
            ..RequestHeader::default()
        },
        methods_to_call: methods,
    }
}

fn m(object: NodeId, method: NodeId, args: Vec<Variant>) -> CallMethodRequest {
    CallMethodRequest {
        object_id: object,
        method_id: method,
        input_arguments: args,
    }
}

fn call(
    h: &mut Harness,
    key: SessionKey,
    methods: Vec<CallMethodRequest>,
) -> Vec<CallMethodResult> {
    let now = h.now;
    match method::call(&mut h.state, key, &request(methods), now) {
        Response::Call(r) => {
            assert_eq!(r.response_header.request_handle, 7);
            r.results
        }
        other => panic!("Call failed: {other:?}"),
    }
}

fn one(h: &mut Harness, key: SessionKey, c: CallMethodRequest) -> CallMethodResult {
    let mut r = call(h, key, vec![c]);
    assert_eq!(r.len(), 1);
    r.remove(0)
}

fn add(args: Vec<Variant>) -> CallMethodRequest {
    m(content::methods_folder_id(), content::add_method_id(), args)
}

fn doubles(v: &[f64]) -> Variant {
    Variant::array(
        BuiltinType::Double,
        v.iter().map(|x| Variant::Double(*x)).collect(),
    )
    .unwrap()
}

#[test]
fn demo_add_and_sum() {
    let (mut h, key) = setup(Roles::OBSERVER);
    let r = one(
        &mut h,
        key,
        add(vec![Variant::Double(2.5), Variant::Double(4.0)]),
    );
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(r.output_arguments, vec![Variant::Double(6.5)]);
    assert_eq!(
        r.input_argument_results,
        vec![StatusCode::Good, StatusCode::Good]
    );
    let sum = |v: Variant| {
        m(
            content::methods_folder_id(),
            content::sum_method_id(),
            vec![v],
        )
    };
    let r = one(&mut h, key, sum(doubles(&[1.0, 2.0, 3.5])));
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(r.output_arguments, vec![Variant::Double(6.5)]);
    let r = one(&mut h, key, sum(Variant::Empty));
    assert_eq!(
        r.output_arguments,
        vec![Variant::Double(0.0)],
        "a null array is empty"
    );
    // A scalar where an array is declared, and an array of the wrong type.
    let r = one(&mut h, key, sum(Variant::Double(1.0)));
    assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
    assert_eq!(r.input_argument_results, vec![StatusCode::BadTypeMismatch]);
    let ints = Variant::array(BuiltinType::Int32, vec![Variant::Int32(1)]).unwrap();
    assert_eq!(
        one(&mut h, key, sum(ints)).input_argument_results,
        vec![StatusCode::BadTypeMismatch]
    );
}

#[test]
fn argument_validation() {
    let (mut h, key) = setup(Roles::OPERATOR);
    let r = one(&mut h, key, add(vec![Variant::Double(1.0)]));
    assert_eq!(r.status_code, StatusCode::BadArgumentsMissing);
    assert!(r.input_argument_results.is_empty() && r.output_arguments.is_empty());
    let r = one(
        &mut h,
        key,
        add(vec![
            Variant::Double(1.0),
            Variant::Double(2.0),
            Variant::Double(3.0),
        ]),
    );
    assert_eq!(r.status_code, StatusCode::BadTooManyArguments);
    let r = one(
        &mut h,
        key,
        add(vec![Variant::Int32(1), Variant::Double(2.0)]),
    );
    assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
    assert_eq!(
        r.input_argument_results,
        vec![StatusCode::BadTypeMismatch, StatusCode::Good]
    );
    assert!(r.output_arguments.is_empty());
    let r = one(&mut h, key, add(vec![Variant::Empty, Variant::Double(2.0)]));
    assert_eq!(
        r.input_argument_results,
        vec![StatusCode::BadTypeMismatch, StatusCode::Good],
        "no Null number"
    );
}

#[test]
fn object_and_method_validation() {
    let (mut h, key) = setup(Roles::OPERATOR);
    let two = || vec![Variant::Double(1.0), Variant::Double(2.0)];
    let cases = vec![
        (
            m(NodeId::NULL, content::add_method_id(), two()),
            StatusCode::BadNodeIdInvalid,
        ),
        (
            m(NodeId::string(1, "nope"), content::add_method_id(), two()),
            StatusCode::BadNodeIdUnknown,
        ),
        // A Variable is no object.
        (
            m(
                NodeId::string(1, "Demo.Static.Int32"),
                content::add_method_id(),
                two(),
            ),
            StatusCode::BadNodeIdInvalid,
        ),
        (
            m(
                content::methods_folder_id(),
                NodeId::string(1, "nope"),
                two(),
            ),
            StatusCode::BadMethodInvalid,
        ),
        (
            m(content::methods_folder_id(), NodeId::NULL, two()),
            StatusCode::BadMethodInvalid,
        ),
        // Not a Method node.
        (
            m(
                content::methods_folder_id(),
                NodeId::string(1, "Demo.Static.Int32"),
                two(),
            ),
            StatusCode::BadMethodInvalid,
        ),
        // The method exists but the object does not have it.
        (
            m(NodeId::ns0(ids::SERVER), content::add_method_id(), two()),
            StatusCode::BadMethodInvalid,
        ),
        (
            m(
                NodeId::ns0(ids::SERVER),
                NodeId::ns0(ids::CONDITION_REFRESH),
                vec![Variant::UInt32(1)],
            ),
            StatusCode::BadMethodInvalid,
        ),
        // A namespace-0 method of the Server this server does not serve
        // (SetSubscriptionDurable): not executable, and so it says.
        (
            m(
                NodeId::ns0(ids::SERVER),
                NodeId::ns0(12749),
                vec![Variant::UInt32(1), Variant::UInt32(1)],
            ),
            StatusCode::BadNotExecutable,
        ),
    ];
    let (reqs, want): (Vec<_>, Vec<_>) = cases.into_iter().unzip();
    let got: Vec<StatusCode> = call(&mut h, key, reqs)
        .into_iter()
        .map(|r| r.status_code)
        .collect();
    assert_eq!(got, want);
    // Subscription methods: validated here (types), run by the subscription module.
    let r = one(
        &mut h,
        key,
        m(
            NodeId::ns0(ids::SERVER),
            NodeId::ns0(ids::GET_MONITORED_ITEMS),
            vec![Variant::Int32(1)],
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
    assert_eq!(r.input_argument_results, vec![StatusCode::BadTypeMismatch]);
    let r = one(
        &mut h,
        key,
        m(
            NodeId::ns0(ids::CONDITION_TYPE),
            NodeId::ns0(ids::CONDITION_REFRESH2),
            vec![Variant::UInt32(1)],
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadArgumentsMissing);
}

#[test]
fn request_limits() {
    let (mut h, key) = setup(Roles::OPERATOR);
    let now = h.now;
    let fault = |r: Response| match r {
        Response::ServiceFault(f) => f.response_header.service_result,
        other => panic!("expected a fault: {other:?}"),
    };
    assert_eq!(
        fault(method::call(&mut h.state, key, &request(vec![]), now)),
        StatusCode::BadNothingToDo
    );
    let max = ServerConfig::default()
        .operation_limits
        .max_nodes_per_method_call as usize;
    let many = vec![add(vec![Variant::Double(1.0), Variant::Double(2.0)]); max + 1];
    assert_eq!(
        fault(method::call(&mut h.state, key, &request(many), now)),
        StatusCode::BadTooManyOperations
    );
    let exactly = vec![add(vec![Variant::Double(1.0), Variant::Double(2.0)]); max];
    assert_eq!(call(&mut h, key, exactly).len(), max);
}

fn alarm_event_id(s: &uaring_core::shared::ServerShared) -> ByteString {
    content::alarm(s).state().event_id.clone()
}

fn ack(object: NodeId, method: NodeId, event_id: ByteString, comment: &str) -> CallMethodRequest {
    m(
        object,
        method,
        vec![
            Variant::ByteString(event_id),
            Variant::LocalizedText(Box::new(LocalizedText::new("en", comment))),
        ],
    )
}

#[test]
fn acknowledge_and_confirm_through_call() {
    let (mut h, key) = setup(Roles::OPERATOR);
    let shared = std::sync::Arc::clone(h.state.shared());
    content::set_alarm_active(&shared, true, h.now.utc).expect("goes active");
    let alarm = content::alarm_id();
    let acknowledge = NodeId::ns0(ids::ACKNOWLEDGE);
    let confirm = NodeId::ns0(ids::CONFIRM);

    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            acknowledge.clone(),
            ByteString::from(vec![9u8; 16]),
            "x",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadEventIdUnknown);
    // Acknowledge on something that is not the alarm.
    let r = one(
        &mut h,
        key,
        ack(
            NodeId::ns0(ids::ACKNOWLEDGEABLE_CONDITION_TYPE),
            acknowledge.clone(),
            alarm_event_id(&shared),
            "x",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadNodeIdInvalid);
    // A wrong Comment type.
    let r = one(
        &mut h,
        key,
        m(
            alarm.clone(),
            acknowledge.clone(),
            vec![
                Variant::ByteString(alarm_event_id(&shared)),
                Variant::String("x".into()),
            ],
        ),
    );
    assert_eq!(
        r.input_argument_results,
        vec![StatusCode::Good, StatusCode::BadTypeMismatch]
    );

    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            acknowledge.clone(),
            alarm_event_id(&shared),
            "seen",
        ),
    );
    assert_eq!(r.status_code, StatusCode::Good);
    let s = content::alarm(&shared).state();
    assert!(s.acked && !s.confirmed);
    assert_eq!(s.comment, LocalizedText::new("en", "seen"));
    // The instance's own method node works as well.
    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            content::alarm_acknowledge_id(),
            alarm_event_id(&shared),
            "again",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadConditionBranchAlreadyAcked);
    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            confirm.clone(),
            alarm_event_id(&shared),
            "ok",
        ),
    );
    assert_eq!(r.status_code, StatusCode::Good);
    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            content::alarm_confirm_id(),
            alarm_event_id(&shared),
            "ok",
        ),
    );
    assert_eq!(
        r.status_code,
        StatusCode::BadConditionBranchAlreadyConfirmed
    );
    let s = content::alarm(&shared).state();
    assert!(
        s.acked && s.confirmed && s.active && s.retain(),
        "active: still retained"
    );
}

#[test]
fn read_only_user() {
    let (mut h, key) = setup(Roles::OBSERVER);
    let shared = std::sync::Arc::clone(h.state.shared());
    content::set_alarm_active(&shared, true, h.now.utc).unwrap();
    let r = one(
        &mut h,
        key,
        ack(
            content::alarm_id(),
            NodeId::ns0(ids::ACKNOWLEDGE),
            alarm_event_id(&shared),
            "x",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);
    assert!(!content::alarm(&shared).state().acked, "nothing changed");
    // The alarm's own Acknowledge is the same method: refused too.
    let r = one(
        &mut h,
        key,
        ack(
            content::alarm_id(),
            content::alarm_acknowledge_id(),
            alarm_event_id(&shared),
            "x",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);
    // Reading methods are allowed.
    assert_eq!(
        one(
            &mut h,
            key,
            add(vec![Variant::Double(1.0), Variant::Double(1.0)])
        )
        .status_code,
        StatusCode::Good
    );
}

#[test]
fn enable_disable_and_add_comment() {
    let (mut h, key) = setup(Roles::OPERATOR);
    let shared = std::sync::Arc::clone(h.state.shared());
    content::set_alarm_active(&shared, true, h.now.utc).unwrap();
    let alarm = content::alarm_id();
    let state = || content::alarm(&shared).state();

    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            NodeId::ns0(ids::ADD_COMMENT),
            alarm_event_id(&shared),
            "note",
        ),
    );
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(state().comment, LocalizedText::new("en", "note"));
    assert!(!state().acked, "a comment acknowledges nothing");

    let mut c = shared.events.bus.cursor();
    let disable = m(alarm.clone(), NodeId::ns0(ids::DISABLE), vec![]);
    assert_eq!(
        one(&mut h, key, disable.clone()).status_code,
        StatusCode::Good
    );
    assert!(!state().enabled && !state().retain());
    let mut got = Vec::new();
    c.poll(&shared.events.bus, |e| {
        got.push(e.field_ns0("EnabledState/Id"))
    });
    assert_eq!(got, vec![Variant::Boolean(false)]);
    assert_eq!(
        one(&mut h, key, disable).status_code,
        StatusCode::BadConditionAlreadyDisabled
    );
    let r = one(
        &mut h,
        key,
        ack(
            alarm.clone(),
            NodeId::ns0(ids::ACKNOWLEDGE),
            alarm_event_id(&shared),
            "x",
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadConditionDisabled);
    assert!(
        content::set_alarm_active(&shared, false, h.now.utc).is_none(),
        "a disabled alarm does not change"
    );
    // An argument to a method that takes none.
    let r = one(
        &mut h,
        key,
        m(
            alarm.clone(),
            content::alarm_enable_id(),
            vec![Variant::Boolean(true)],
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadTooManyArguments);
    let enable = m(alarm.clone(), content::alarm_enable_id(), vec![]);
    assert_eq!(
        one(&mut h, key, enable.clone()).status_code,
        StatusCode::Good
    );
    assert!(state().enabled && state().retain());
    assert_eq!(
        one(&mut h, key, enable).status_code,
        StatusCode::BadConditionAlreadyEnabled
    );

    let (mut h, key) = setup(Roles::OBSERVER);
    let r = one(&mut h, key, m(alarm, NodeId::ns0(ids::DISABLE), vec![]));
    assert_eq!(r.status_code, StatusCode::BadUserAccessDenied);
}

/// The argument tables the Call service checks against agree with the NodeSet's
/// InputArguments / OutputArguments of the namespace-0 methods (names, types, ranks).
#[test]
fn argument_tables_match_the_nodeset() {
    use uaring_core::events::nodes::ArgSpec;
    let h = Harness::new();
    let space = &h.state.shared().address_space;
    let args_of = |method: u32, prop: &str| -> Vec<(String, NodeId, i32)> {
        let node = space.node(&NodeId::ns0(method)).unwrap();
        let Some(p) = node
            .references()
            .filter(|r| r.is_forward)
            .filter_map(|r| r.target.as_local().cloned())
            .find(|t| {
                space
                    .browse_name_of(t)
                    .is_some_and(|b| b.name.as_str() == prop)
            })
        else {
            return Vec::new();
        };
        let v = space
            .variable_value(space.node(&p).unwrap(), h.now)
            .unwrap()
            .value;
        let a = v.as_array().expect("an Argument array");
        a.values
            .iter()
            .map(|x| match x {
                Variant::ExtensionObject(e) => {
                    let arg: Argument = e.decode_as(Default::default()).unwrap().unwrap();
                    (arg.name.as_str().to_string(), arg.data_type, arg.value_rank)
                }
                other => panic!("{other:?}"),
            })
            .collect()
    };
    let spec = |s: &[ArgSpec]| {
        s.iter()
            .map(|a| (a.name.to_string(), NodeId::ns0(a.data_type), a.value_rank))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        args_of(ids::ACKNOWLEDGE, "InputArguments"),
        spec(nodes::ACK_IN)
    );
    assert_eq!(args_of(ids::CONFIRM, "InputArguments"), spec(nodes::ACK_IN));
    assert_eq!(
        args_of(ids::ADD_COMMENT, "InputArguments"),
        spec(nodes::ACK_IN)
    );
    assert!(args_of(ids::ENABLE, "InputArguments").is_empty());
    assert_eq!(
        args_of(ids::CONDITION_REFRESH, "InputArguments"),
        spec(nodes::SUBSCRIPTION_ID_IN)
    );
    assert_eq!(
        args_of(ids::CONDITION_REFRESH2, "InputArguments"),
        spec(nodes::REFRESH2_IN)
    );
    assert_eq!(
        args_of(ids::GET_MONITORED_ITEMS, "InputArguments"),
        spec(nodes::SERVER_SUBSCRIPTION_ID_IN)
    );
    assert_eq!(
        args_of(ids::GET_MONITORED_ITEMS, "OutputArguments"),
        spec(nodes::GET_MONITORED_ITEMS_OUT)
    );
    assert_eq!(
        args_of(ids::RESEND_DATA, "InputArguments"),
        spec(nodes::SERVER_SUBSCRIPTION_ID_IN)
    );
    assert_eq!(
        args_of(ids::TIMED_SHELVE, "InputArguments"),
        spec(nodes::SHELVE_IN)
    );
    assert!(args_of(ids::ONE_SHOT_SHELVE, "InputArguments").is_empty());
    assert!(args_of(ids::UNSHELVE, "InputArguments").is_empty());
    // The namespace-0 shelving methods are served (so Executable).
    for id in [ids::TIMED_SHELVE, ids::ONE_SHOT_SHELVE, ids::UNSHELVE] {
        assert!(method::served(&NodeId::ns0(id)));
    }
}

#[test]
fn user_executable_by_role() {
    fn user_executable(
        space: &uaring_core::address_space::AddressSpace,
        id: &NodeId,
        roles: Roles,
    ) -> bool {
        uaring_core::services::method::method_callable(space, roles, id)
    }
    let shared = content::new(
        Default::default(),
        uaring_core::Now::new(1, uaring_core::DateTime::NULL),
    )
    .unwrap();
    let space = &shared.address_space;
    assert!(user_executable(
        space,
        &NodeId::ns0(ids::ACKNOWLEDGE),
        Roles::OPERATOR
    ));
    assert!(!user_executable(
        space,
        &NodeId::ns0(ids::ACKNOWLEDGE),
        Roles::OBSERVER
    ));
    assert!(!user_executable(
        space,
        &content::alarm_acknowledge_id(),
        Roles::OBSERVER
    ));
    assert!(user_executable(
        space,
        &content::add_method_id(),
        Roles::OBSERVER
    ));
    assert!(user_executable(
        space,
        &NodeId::ns0(ids::CONDITION_REFRESH),
        Roles::OBSERVER
    ));
    // Namespace 0's methods this server does not serve are not executable at all
    // (SetSubscriptionDurable i=12749, RequestServerStateChange i=12886); the served ones are.
    let executable = |id: u32| match space.node(&NodeId::ns0(id)).map(|n| n.attributes()) {
        Some(uaring_core::address_space::AttrsView::Method {
            executable,
            user_executable,
        }) => (executable, user_executable),
        _ => panic!("i={id}: no Method"),
    };
    assert_eq!(executable(12749), (false, false));
    assert_eq!(executable(12886), (false, false));
    assert_eq!(executable(ids::GET_MONITORED_ITEMS), (true, true));
    assert_eq!(executable(ids::RESEND_DATA), (true, true));
    assert_eq!(executable(ids::ACKNOWLEDGE), (true, true));
}

/// An alarm's ShelvingState (Part 9 §5.8.17): TimedShelve, OneShotShelve and Unshelve through
/// Call, on the ShelvingState (its own method nodes) and on the alarm (the type's methods),
/// their error statuses, the events and Variables they change, and a timed shelving running
/// out on the shard's timer.
#[test]
fn shelving_through_call() {
    use uaring_core::types::QualifiedName;
    let (mut h, key) = setup(Roles::OPERATOR);
    let shared = std::sync::Arc::clone(h.state.shared());
    let alarm = content::alarm_id();
    let q = |n: &str| QualifiedName::new(0, n);
    let shelving = content::alarm_child_id(&[q("ShelvingState")]);
    let own = |name: &str| content::alarm_child_id(&[q("ShelvingState"), q(name)]);
    let state = || content::alarm(&shared).state();
    let read = |h: &Harness, id: &NodeId| {
        let space = &shared.address_space;
        space
            .variable_value(space.node(id).expect("node"), h.now)
            .unwrap()
            .value
    };
    let current = content::alarm_child_id(&[q("ShelvingState"), q("CurrentState")]);
    let current_id = content::alarm_child_id(&[q("ShelvingState"), q("CurrentState"), q("Id")]);
    let unshelve_time = content::alarm_child_id(&[q("ShelvingState"), q("UnshelveTime")]);
    let timed = |object: &NodeId, ms: f64| {
        m(
            object.clone(),
            own("TimedShelve"),
            vec![Variant::Double(ms)],
        )
    };
    let mut bus = shared.events.bus.cursor();
    let mut events = |shared: &uaring_core::shared::ServerShared| {
        let mut got = Vec::new();
        bus.poll(&shared.events.bus, |e| {
            got.push((
                e.field_ns0("SuppressedOrShelved"),
                e.field_ns0("ShelvingState/CurrentState/Id"),
            ))
        });
        got
    };
    let shelved_event = |id: u32| {
        (
            Variant::Boolean(true),
            Variant::NodeId(Box::new(NodeId::ns0(id))),
        )
    };
    let unshelved_event = (
        Variant::Boolean(false),
        Variant::NodeId(Box::new(NodeId::ns0(ids::SHELVED_UNSHELVED))),
    );

    // Arguments: ShelvingTime above 0, at most MaxTimeShelved (one hour), a Double.
    for ms in [0.0, -5.0, f64::NAN, 3_600_001.0] {
        assert_eq!(
            one(&mut h, key, timed(&shelving, ms)).status_code,
            StatusCode::BadShelvingTimeOutOfRange,
            "{ms}"
        );
    }
    let r = one(&mut h, key, m(shelving.clone(), own("TimedShelve"), vec![]));
    assert_eq!(r.status_code, StatusCode::BadArgumentsMissing);
    let r = one(
        &mut h,
        key,
        m(
            shelving.clone(),
            own("TimedShelve"),
            vec![Variant::Int32(5)],
        ),
    );
    assert_eq!(r.status_code, StatusCode::BadInvalidArgument);
    assert_eq!(
        one(&mut h, key, m(alarm.clone(), own("Unshelve"), vec![])).status_code,
        StatusCode::BadConditionNotShelved,
        "the ShelvingState's own method called on the alarm"
    );
    assert!(events(&shared).is_empty());
    assert_eq!(
        read(&h, &current_id),
        Variant::NodeId(Box::new(NodeId::ns0(ids::SHELVED_UNSHELVED)))
    );

    // TimedShelve on the ShelvingState for 5 s: shelved, its Variables say so.
    assert_eq!(
        one(&mut h, key, timed(&shelving, 5000.0)).status_code,
        StatusCode::Good
    );
    assert!(state().shelved.is_shelved());
    assert_eq!(events(&shared), vec![shelved_event(ids::SHELVED_TIMED)]);
    assert_eq!(
        read(&h, &current),
        Variant::LocalizedText(Box::new(LocalizedText::new("en", "TimedShelved")))
    );
    assert_eq!(read(&h, &unshelve_time), Variant::Double(5000.0));
    assert_eq!(
        read(&h, &content::alarm_child_id(&[q("SuppressedOrShelved")])),
        Variant::Boolean(true)
    );
    // Half-way, the shard's timer brings UnshelveTime down; at the end it unshelves.
    h.advance_ms(2000);
    let now = h.now;
    h.state.on_timer(now);
    assert_eq!(read(&h, &unshelve_time), Variant::Double(3000.0));
    assert!(state().shelved.is_shelved());
    h.advance_ms(3000);
    let now = h.now;
    h.state.on_timer(now);
    assert!(!state().shelved.is_shelved(), "the shelving time ran out");
    assert_eq!(events(&shared), vec![unshelved_event.clone()]);
    assert_eq!(read(&h, &unshelve_time), Variant::Double(0.0));
    assert_eq!(
        shared.events.next_shelving_tick(),
        None,
        "nothing left to time"
    );

    // The type's methods on the alarm itself (Part 9: a client may know only the ConditionId).
    let timed_ns0 = m(
        alarm.clone(),
        NodeId::ns0(ids::TIMED_SHELVE),
        vec![Variant::Double(60_000.0)],
    );
    assert_eq!(
        one(&mut h, key, timed_ns0.clone()).status_code,
        StatusCode::Good
    );
    h.advance_ms(10_000);
    // A TimedShelve of a TimedShelved alarm starts its time again.
    assert_eq!(one(&mut h, key, timed_ns0).status_code, StatusCode::Good);
    assert_eq!(read(&h, &unshelve_time), Variant::Double(60_000.0));
    let unshelve = m(alarm.clone(), NodeId::ns0(ids::UNSHELVE), vec![]);
    assert_eq!(
        one(&mut h, key, unshelve.clone()).status_code,
        StatusCode::Good
    );
    assert_eq!(
        one(&mut h, key, unshelve.clone()).status_code,
        StatusCode::BadConditionNotShelved
    );
    assert_eq!(
        events(&shared),
        vec![
            shelved_event(ids::SHELVED_TIMED),
            shelved_event(ids::SHELVED_TIMED),
            unshelved_event.clone()
        ]
    );

    // OneShotShelve: through one active period of the alarm.
    let one_shot = m(shelving.clone(), NodeId::ns0(ids::ONE_SHOT_SHELVE), vec![]);
    assert_eq!(
        one(&mut h, key, one_shot.clone()).status_code,
        StatusCode::Good
    );
    assert_eq!(
        one(&mut h, key, one_shot.clone()).status_code,
        StatusCode::BadConditionAlreadyShelved
    );
    assert_eq!(events(&shared), vec![shelved_event(ids::SHELVED_ONE_SHOT)]);
    let active = content::set_alarm_active(&shared, true, h.now.utc).unwrap();
    assert_eq!(
        active.field_ns0("SuppressedOrShelved"),
        Variant::Boolean(true)
    );
    assert!(state().shelved.is_shelved(), "still shelved while active");
    let inactive = content::set_alarm_active(&shared, false, h.now.utc).unwrap();
    assert_eq!(
        inactive.field_ns0("SuppressedOrShelved"),
        Variant::Boolean(false)
    );
    assert!(
        !state().shelved.is_shelved(),
        "back to inactive: the one shot is spent"
    );
    events(&shared);

    // With MaxTimeShelved, a OneShotShelve ends after it too.
    assert_eq!(one(&mut h, key, one_shot).status_code, StatusCode::Good);
    h.advance_ms(3_600_000);
    let now = h.now;
    h.state.on_timer(now);
    assert!(!state().shelved.is_shelved(), "MaxTimeShelved ran out");

    // A disabled alarm cannot be shelved (a fresh server: the hour outlived the session);
    // an observer may not shelve.
    let (mut h, key) = setup(Roles::OPERATOR);
    let r = one(
        &mut h,
        key,
        m(alarm.clone(), NodeId::ns0(ids::DISABLE), vec![]),
    );
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(
        one(&mut h, key, timed(&shelving, 1000.0)).status_code,
        StatusCode::BadConditionDisabled
    );
    let (mut h, key) = setup(Roles::OBSERVER);
    assert_eq!(
        one(&mut h, key, m(alarm, NodeId::ns0(ids::UNSHELVE), vec![])).status_code,
        StatusCode::BadUserAccessDenied
    );
}
