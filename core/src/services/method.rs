//! The Method service set: Call (Part 4 §5.11.2).
//!
//! Request level: no methods → `BadNothingToDo`; more than
//! `operation_limits.max_nodes_per_method_call` → `BadTooManyOperations` (ServiceFault).
//!
//! Per CallMethodRequest, in this order:
//! 1. objectId null → `BadNodeIdInvalid`; unknown → `BadNodeIdUnknown`; not an Object or
//!    ObjectType → `BadNodeIdInvalid`.
//! 2. methodId null, unknown or not a Method → `BadMethodInvalid`; the method must be a
//!    HasComponent (or subtype) target of the object, of its type definition or of a
//!    supertype of that (for an ObjectType: of the type itself) → else `BadMethodInvalid`.
//! 3. Executable false → `BadNotExecutable`; the user lacks the Call permission on the
//!    method or on the object (their RolePermissions, [`crate::roles`]) → `BadUserAccessDenied`;
//!    without RolePermissions on the method, one that changes state (Acknowledge, Confirm,
//!    AddComment, Enable, Disable, GenerateEvent, an application method declared so) needs
//!    a writing role → else `BadUserAccessDenied`. The
//!    methods of namespace 0 this server does not serve ([`served`]) are made not executable
//!    when the address space is built, so they answer `BadNotExecutable`; `BadNotImplemented`
//!    is left for an executable method without a handler (none in this server).
//! 4. Fewer input arguments than declared → `BadArgumentsMissing`; more →
//!    `BadTooManyArguments`; a wrong type (no conversion: a Double argument needs a Double)
//!    or a value out of range → `BadInvalidArgument` with one status per argument in
//!    `inputArgumentResults` (`BadTypeMismatch`, `BadOutOfRange`, Good). Variant Null is
//!    accepted for String, ByteString, LocalizedText and NodeId arguments (as null) and for
//!    arrays (as empty), never for numbers.
//! 5. The method runs; its own statuses (e.g. `BadEventIdUnknown`) are the result. A
//!    condition method called on an Object that is no condition of this server but has a
//!    forwarding application method registered on its own NodeId (a condition of another
//!    server mirrored by the gateway) is forwarded through it.
//!
//! `inputArgumentResults` has one entry per argument once the count is right, else none.
//!
//! Methods: the application's (`address_space::app`, registered through the `uaring`
//! library), the condition methods Acknowledge (i=9111), Confirm (i=9113), AddComment
//! (i=9029), Enable (i=9027) and Disable (i=9028) on a condition (or its own method nodes),
//! TimedShelve (i=2949), OneShotShelve (i=2948) and Unshelve (i=2947) on a condition's
//! ShelvingState or on the condition itself (or the ShelvingState's own method nodes),
//! ConditionRefresh (i=3875) / ConditionRefresh2 (i=12912) on ConditionType,
//! Server.GetMonitoredItems (i=11492) and Server.ResendData (i=12873) — the last four run in
//! `services::subscription_methods`.

use crate::address_space::app::Caller;
use crate::address_space::{ids as ns0, AddressSpace, AttrsView, NodeClass, NodeView, RefView};
use crate::events::condition::{ConditionAction, MAX_COMMENT_CHARS};
use crate::events::ids;
use crate::events::nodes::{self, ArgSpec};
use crate::generated::messages::Response;
use crate::generated::types::{
    CallMethodRequest, CallMethodResult, CallRequest, CallResponse, MessageSecurityMode,
};
use crate::roles::Roles;
use crate::server::service_state::{ServiceState, UserIdentity};
use crate::services::{fault, response_header, subscription_methods};
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::{BuiltinType, ByteString, LocalizedText, NodeId, StatusCode, Variant};

/// Reference type HasOrderedComponent (a subtype of HasComponent).
const HAS_ORDERED_COMPONENT: u32 = 49;

/// The methods this server implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MethodKind {
    /// A method of conditions (Acknowledge, …, Disable) or of their ShelvingState
    /// (TimedShelve, OneShotShelve, Unshelve).
    Condition(ConditionAction),
    ConditionRefresh,
    ConditionRefresh2,
    GetMonitoredItems,
    ResendData,
}

/// Does this server serve the namespace-0 Method `method_id` itself (the condition methods,
/// ConditionRefresh, GetMonitoredItems, ResendData)? The application's methods are
/// registered apart (`address_space::app`).
pub fn served(method_id: &NodeId) -> bool {
    method_id.namespace == 0 && MethodKind::of_ns0(method_id).is_some()
}

impl MethodKind {
    /// The server's own method `method_id`: one of namespace 0, or a condition's own method
    /// node.
    fn of(space: &AddressSpace, method_id: &NodeId) -> Option<MethodKind> {
        if method_id.namespace == 0 {
            return MethodKind::of_ns0(method_id);
        }
        crate::events::condition::method_of(space, method_id).map(MethodKind::Condition)
    }

    fn of_ns0(method_id: &NodeId) -> Option<MethodKind> {
        let id = method_id.as_ns0()?;
        if let Some((_, _, action)) = crate::events::condition::METHODS
            .iter()
            .find(|(_, m, _)| *m == id)
        {
            return Some(MethodKind::Condition(*action));
        }
        Some(match id {
            ids::CONDITION_REFRESH => MethodKind::ConditionRefresh,
            ids::CONDITION_REFRESH2 => MethodKind::ConditionRefresh2,
            ids::GET_MONITORED_ITEMS => MethodKind::GetMonitoredItems,
            ids::RESEND_DATA => MethodKind::ResendData,
            _ => return None,
        })
    }

    fn inputs(self) -> &'static [ArgSpec] {
        match self {
            MethodKind::Condition(a) => match a {
                ConditionAction::Acknowledge
                | ConditionAction::Confirm
                | ConditionAction::AddComment => nodes::ACK_IN,
                ConditionAction::TimedShelve => nodes::SHELVE_IN,
                ConditionAction::Enable
                | ConditionAction::Disable
                | ConditionAction::OneShotShelve
                | ConditionAction::Unshelve => &[],
            },
            MethodKind::ConditionRefresh => nodes::SUBSCRIPTION_ID_IN,
            MethodKind::GetMonitoredItems | MethodKind::ResendData => {
                nodes::SERVER_SUBSCRIPTION_ID_IN
            }
            MethodKind::ConditionRefresh2 => nodes::REFRESH2_IN,
        }
    }

    /// Does the method change server state (a read-only user may not call it)?
    fn needs_write(self) -> bool {
        matches!(self, MethodKind::Condition(_))
    }
}

/// Answers a Call request for the session `key` (deferred methods answer
/// BadInternalError here: use [`call_deferrable`]).
pub fn call(state: &mut ServiceState, key: SessionKey, req: &CallRequest, now: Now) -> Response {
    let handle = req.request_header.request_handle;
    let roles = state.session(key).and_then(|s| s.identity.as_ref()).map_or(
        Roles::NONE,
        crate::server::service_state::UserIdentity::roles,
    );
    call_deferrable(state, key, roles, 0, 0, req, now)
        .unwrap_or_else(|| fault(handle, StatusCode::BadInternalError, now))
}

/// An application method that answers later, checked and ready to start.
struct DeferredCall {
    start: crate::address_space::app::AsyncMethodFn,
    timeout_ms: u32,
    inputs: Vec<Variant>,
    /// The declared outputs the answer must match (`None`: forwarded, not checked here).
    outputs: Option<Vec<crate::address_space::app::ArgDef>>,
    object_id: NodeId,
    method_id: NodeId,
}

/// Answers a Call request for the session `key`; `None` when a deferred application method
/// is among its calls (answered through the shard's outbox for `channel_id` when the last
/// one is settled).
pub fn call_deferrable(
    state: &mut ServiceState,
    key: SessionKey,
    roles: Roles,
    channel_id: u32,
    request_id: u32,
    req: &CallRequest,
    now: Now,
) -> Option<Response> {
    use crate::address_space::app::AsyncCall;
    use crate::server::deferred::{CallOp, PendingKind};
    let handle = req.request_header.request_handle;
    let n = req.methods_to_call.len();
    if n == 0 {
        return Some(fault(handle, StatusCode::BadNothingToDo, now));
    }
    if n > state
        .shared()
        .config
        .operation_limits
        .max_nodes_per_method_call as usize
    {
        return Some(fault(handle, StatusCode::BadTooManyOperations, now));
    }
    let user = client_user_id(state, key);
    let (security_mode, session_id) = state
        .session(key)
        .map(|s| (s.diagnostics.security_mode, s.session_id.clone()))
        .unwrap_or((MessageSecurityMode::Invalid, NodeId::NULL));
    let caller = Caller {
        user,
        roles,
        security_mode,
        session_id,
    };
    let mut later = Vec::new();
    let mut results = Vec::with_capacity(n);
    for (i, m) in req.methods_to_call.iter().enumerate() {
        let mut deferred = None;
        results.push(call_one(state, key, &caller, m, now, &mut deferred));
        if let Some(d) = deferred {
            later.push((i, d));
        }
    }
    let mut response = Box::new(CallResponse {
        response_header: response_header(handle, now),
        results,
        diagnostic_infos: Vec::new(),
    });
    if later.is_empty() {
        return Some(Response::Call(response));
    }
    let shared = std::sync::Arc::clone(state.shared());
    let (deferrals, _, shard_index) = state.deferred_parts();
    if deferrals.room() < later.len() {
        for (i, _) in &later {
            if let Some(r) = response.results.get_mut(*i) {
                *r = status_only(StatusCode::BadTooManyOperations);
            }
        }
        return Some(Response::Call(response));
    }
    let ops = later
        .iter()
        .map(|(i, d)| CallOp {
            result: *i as u32,
            inputs: d.inputs.len(),
            outputs: d.outputs.clone(),
        })
        .collect();
    let opened = deferrals.begin(
        shared.address_space.changes(),
        shard_index,
        channel_id,
        request_id,
        PendingKind::Call { response, ops },
        later.iter().map(|(_, d)| d.timeout_ms),
        now,
    );
    for (op, (_, d)) in later.into_iter().enumerate() {
        let reply = opened.reply(op as u32, None);
        (d.start)(AsyncCall::new(
            d.object_id,
            d.method_id,
            d.inputs,
            caller.clone(),
            reply,
        ));
    }
    None
}

/// Does the method change state (the condition methods, an application method declared
/// so)? Without RolePermissions on it, only a writing role may call it.
pub fn changes_state(space: &AddressSpace, method_id: &NodeId) -> bool {
    MethodKind::of(space, method_id).is_some_and(MethodKind::needs_write)
        || space.app_method(method_id).is_some_and(|m| m.needs_write)
}

/// The Call permission of a node for `roles`, when it has RolePermissions (own or its
/// namespace's); `None` when the server's default rule applies.
fn call_granted(space: &AddressSpace, roles: Roles, id: &NodeId) -> Option<bool> {
    let index = space.node_index(id)?;
    let rp = space.role_permissions(index)?;
    Some(
        rp.granted(roles)
            .contains(crate::generated::types::PermissionType::Call),
    )
}

/// May a user with `roles` call this method (its own permission)? UserExecutable is
/// Executable and this.
pub fn method_callable(space: &AddressSpace, roles: Roles, method_id: &NodeId) -> bool {
    call_granted(space, roles, method_id)
        .unwrap_or_else(|| !changes_state(space, method_id) || roles.may_write())
}

/// May a user with `roles` call this method on this object: Call on both (Part 3 §8.55)?
fn call_permitted(
    space: &AddressSpace,
    roles: Roles,
    object_id: &NodeId,
    method_id: &NodeId,
) -> bool {
    method_callable(space, roles, method_id)
        && call_granted(space, roles, object_id).unwrap_or(true)
}

/// ClientUserId for condition comments: the user name or certificate CN; empty when
/// anonymous.
fn client_user_id(state: &ServiceState, key: SessionKey) -> String {
    match state.session(key).and_then(|s| s.identity.as_ref()) {
        Some(UserIdentity::UserName { user, .. })
        | Some(UserIdentity::Certificate { user, .. }) => user.clone(),
        _ => String::new(),
    }
}

fn status_only(status: StatusCode) -> CallMethodResult {
    CallMethodResult {
        status_code: status,
        ..Default::default()
    }
}

fn is_component_ref(space: &AddressSpace, r: &RefView<'_>) -> bool {
    r.is_forward()
        && (r.type_is_ns0(ns0::HAS_COMPONENT)
            || r.type_is_ns0(HAS_ORDERED_COMPONENT)
            || space.is_subtype_of(&r.reference_type(), &NodeId::ns0(ns0::HAS_COMPONENT)))
}

fn has_component(space: &AddressSpace, node: NodeView<'_>, method_id: &NodeId) -> bool {
    node.refs()
        .any(|r| r.target_node().is_some_and(|t| t.is(method_id)) && is_component_ref(space, &r))
}

/// Part 4 §5.11.2: the method belongs to the object, its type or a supertype of its type
/// (an ObjectType: the type itself).
fn method_of(space: &AddressSpace, object: NodeView<'_>, method_id: &NodeId) -> bool {
    if has_component(space, object, method_id) {
        return true;
    }
    if object.node_class() != NodeClass::Object {
        return false;
    }
    let Some(mut t) = object.type_definition().and_then(|t| t.as_local().cloned()) else {
        return false;
    };
    for _ in 0..32 {
        match space.node(&t) {
            Some(tn) if has_component(space, tn, method_id) => return true,
            _ => {}
        }
        match space.supertype_of(&t) {
            Some(p) => t = p,
            None => return false,
        }
    }
    false
}

/// Checks one argument against its declaration.
fn check_arg(spec: &ArgSpec, v: &Variant) -> StatusCode {
    let ok = match (spec.value_rank, v) {
        (1, Variant::Empty) => true,
        (1, Variant::Array(a)) => {
            a.value_type == spec.builtin && matches!(a.dimensions.as_deref(), None | Some([_]))
        }
        (1, _) => false,
        (_, Variant::Empty) => matches!(
            spec.builtin,
            BuiltinType::String
                | BuiltinType::ByteString
                | BuiltinType::LocalizedText
                | BuiltinType::NodeId
        ),
        (_, v) => v.scalar_type() == Some(spec.builtin),
    };
    if ok {
        StatusCode::Good
    } else {
        StatusCode::BadTypeMismatch
    }
}

fn u32_of(v: &Variant) -> u32 {
    match v {
        Variant::UInt32(x) => *x,
        _ => 0,
    }
}

fn text_of(v: &Variant) -> LocalizedText {
    match v {
        Variant::LocalizedText(t) => (**t).clone(),
        _ => LocalizedText::default(),
    }
}

/// Calls an application method: the same argument checks as the server's own methods,
/// then its handler (on this shard). A handler that returns other outputs than it declared
/// is answered BadInternalError, so a client never sees an undeclared shape.
fn call_app(
    app: &crate::address_space::app::AppMethod,
    m: &CallMethodRequest,
    caller: &Caller,
    now: Now,
    deferred: &mut Option<DeferredCall>,
) -> CallMethodResult {
    let args = &m.input_arguments;
    if let crate::address_space::app::MethodHandler::Forward { start, timeout_ms } = &app.handler {
        // The server the Call goes to checks the arguments and declares the outputs.
        *deferred = Some(DeferredCall {
            start: start.clone(),
            timeout_ms: *timeout_ms,
            inputs: args.clone(),
            outputs: None,
            object_id: m.object_id.clone(),
            method_id: m.method_id.clone(),
        });
        return CallMethodResult::default();
    }
    if args.len() < app.inputs.len() {
        return status_only(StatusCode::BadArgumentsMissing);
    }
    if args.len() > app.inputs.len() {
        return status_only(StatusCode::BadTooManyArguments);
    }
    let arg_results: Vec<StatusCode> = app
        .inputs
        .iter()
        .zip(args)
        .map(|(d, v)| d.check(v))
        .collect();
    if arg_results.iter().any(|s| s.is_bad()) {
        return CallMethodResult {
            status_code: StatusCode::BadInvalidArgument,
            input_argument_results: arg_results,
            ..Default::default()
        };
    }
    let handler = match &app.handler {
        crate::address_space::app::MethodHandler::Quick(h) => h,
        crate::address_space::app::MethodHandler::Deferred { start, timeout_ms }
        | crate::address_space::app::MethodHandler::Forward { start, timeout_ms } => {
            *deferred = Some(DeferredCall {
                start: start.clone(),
                timeout_ms: *timeout_ms,
                inputs: args.clone(),
                outputs: Some(app.outputs.clone()),
                object_id: m.object_id.clone(),
                method_id: m.method_id.clone(),
            });
            // Filled in when the application answers.
            return CallMethodResult::default();
        }
    };
    let call = crate::address_space::app::MethodCall {
        object_id: &m.object_id,
        method_id: &m.method_id,
        inputs: args,
        user: &caller.user,
        roles: caller.roles,
        security_mode: caller.security_mode,
        session_id: &caller.session_id,
        now,
    };
    let (status, outputs) = match handler(&call) {
        Ok(out)
            if out.len() == app.outputs.len()
                && app.outputs.iter().zip(&out).all(|(d, v)| d.accepts(v)) =>
        {
            (StatusCode::Good, out)
        }
        Ok(_) => (StatusCode::BadInternalError, Vec::new()),
        Err(s) if s.is_bad() || s.is_uncertain() => (s, Vec::new()),
        Err(_) => (StatusCode::BadInternalError, Vec::new()),
    };
    CallMethodResult {
        status_code: status,
        input_argument_results: arg_results,
        input_argument_diagnostic_infos: Vec::new(),
        output_arguments: outputs,
    }
}

fn call_one(
    state: &mut ServiceState,
    key: SessionKey,
    caller: &Caller,
    m: &CallMethodRequest,
    now: Now,
    deferred: &mut Option<DeferredCall>,
) -> CallMethodResult {
    let (roles, user) = (caller.roles, caller.user.as_str());
    let shared = std::sync::Arc::clone(state.shared());
    let space = &shared.address_space;
    if m.object_id.is_null() {
        return status_only(StatusCode::BadNodeIdInvalid);
    }
    let Some(object) = space.node(&m.object_id) else {
        return status_only(StatusCode::BadNodeIdUnknown);
    };
    if !matches!(
        object.node_class(),
        NodeClass::Object | NodeClass::ObjectType
    ) {
        return status_only(StatusCode::BadNodeIdInvalid);
    }
    let executable = match space.node(&m.method_id).map(|n| n.attributes()) {
        Some(AttrsView::Method { executable, .. }) => executable,
        _ => return status_only(StatusCode::BadMethodInvalid),
    };
    let kind = MethodKind::of(space, &m.method_id);
    // A shelving method may be called on the alarm itself as well as on its ShelvingState
    // (Part 9 §5.8.17.2: some clients know only the ConditionId).
    let shelving_on_condition = matches!(kind, Some(MethodKind::Condition(a)) if a.is_shelving())
        && shared
            .events
            .condition(&m.object_id)
            .is_some_and(|c| c.spec.shelving.is_some());
    if !shelving_on_condition && !method_of(space, object, &m.method_id) {
        return status_only(StatusCode::BadMethodInvalid);
    }
    if !executable {
        return status_only(StatusCode::BadNotExecutable);
    }
    if !call_permitted(space, roles, &m.object_id, &m.method_id) {
        return status_only(StatusCode::BadUserAccessDenied);
    }
    let Some(kind) = kind else {
        return match space.app_method(&m.method_id) {
            Some(app) => call_app(app, m, caller, now, deferred),
            None => status_only(StatusCode::BadNotImplemented),
        };
    };
    let specs = kind.inputs();
    let args = &m.input_arguments;
    if args.len() < specs.len() {
        return status_only(StatusCode::BadArgumentsMissing);
    }
    if args.len() > specs.len() {
        return status_only(StatusCode::BadTooManyArguments);
    }
    // The count equals the declaration's, so every `arg(i)` below is present; were a
    // declaration shorter than its use, the absent argument reads as Null (no panic).
    let arg = |i: usize| args.get(i).unwrap_or(&Variant::Empty);
    let mut arg_results: Vec<StatusCode> = specs
        .iter()
        .zip(args)
        .map(|(s, v)| check_arg(s, v))
        .collect();
    // Range checks of well-typed arguments.
    if arg_results.iter().all(|s| s.is_good()) {
        let mut out_of_range = |i: usize| {
            if let Some(r) = arg_results.get_mut(i) {
                *r = StatusCode::BadOutOfRange;
            }
        };
        match kind {
            MethodKind::Condition(
                ConditionAction::Acknowledge
                | ConditionAction::Confirm
                | ConditionAction::AddComment,
            ) if text_of(arg(1)).text.as_str().chars().count() > MAX_COMMENT_CHARS => {
                out_of_range(1);
            }
            _ => {}
        }
    }
    if arg_results.iter().any(|s| s.is_bad()) {
        return CallMethodResult {
            status_code: StatusCode::BadInvalidArgument,
            input_argument_results: arg_results,
            ..Default::default()
        };
    }
    let done = |status: StatusCode, outputs: Vec<Variant>| CallMethodResult {
        status_code: status,
        input_argument_results: vec![StatusCode::Good; specs.len()],
        input_argument_diagnostic_infos: Vec::new(),
        output_arguments: if status.is_good() {
            outputs
        } else {
            Vec::new()
        },
    };
    match kind {
        MethodKind::Condition(action) => {
            let Some(condition) = shared
                .events
                .condition_called(&m.object_id, action)
                .cloned()
            else {
                // A condition another server owns, mirrored here (the gateway): the method
                // registered on the condition's own node forwards the call there.
                return match space.app_method(&m.object_id) {
                    Some(
                        app @ crate::address_space::app::AppMethod {
                            handler: crate::address_space::app::MethodHandler::Forward { .. },
                            ..
                        },
                    ) => call_app(app, m, caller, now, deferred),
                    _ => status_only(StatusCode::BadNodeIdInvalid),
                };
            };
            if action.is_shelving() {
                let time = match arg(0) {
                    Variant::Double(t) => *t,
                    _ => 0.0,
                };
                let r = shared
                    .events
                    .shelve(space, &condition, action, time, user, now);
                return done(r.err().unwrap_or(StatusCode::Good), Vec::new());
            }
            let (event_id, comment) = match action {
                ConditionAction::Enable | ConditionAction::Disable => {
                    (ByteString::null(), LocalizedText::default())
                }
                _ => match arg(0) {
                    Variant::ByteString(b) => (b.clone(), text_of(arg(1))),
                    _ => (ByteString::null(), text_of(arg(1))),
                },
            };
            let r = shared.events.condition_action(
                space, &condition, action, &event_id, &comment, user, now.utc,
            );
            done(r.err().unwrap_or(StatusCode::Good), Vec::new())
        }
        MethodKind::ConditionRefresh | MethodKind::ConditionRefresh2 => {
            let mi = (kind == MethodKind::ConditionRefresh2).then(|| u32_of(arg(1)));
            let r = subscription_methods::condition_refresh(state, key, u32_of(arg(0)), mi, now);
            done(r.err().unwrap_or(StatusCode::Good), Vec::new())
        }
        MethodKind::GetMonitoredItems => {
            match subscription_methods::get_monitored_items(state, key, u32_of(arg(0))) {
                Ok((server, client)) => {
                    let arr = |v: Vec<u32>| {
                        Variant::array(
                            BuiltinType::UInt32,
                            v.into_iter().map(Variant::UInt32).collect(),
                        )
                        .unwrap_or(Variant::Empty)
                    };
                    done(StatusCode::Good, vec![arr(server), arr(client)])
                }
                Err(s) => done(s, Vec::new()),
            }
        }
        MethodKind::ResendData => {
            let r = subscription_methods::resend_data(state, key, u32_of(arg(0)), now);
            done(r.err().unwrap_or(StatusCode::Good), Vec::new())
        }
    }
}
