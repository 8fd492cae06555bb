//! What an application plugs into the address space besides stored values: computed values
//! (read callbacks), write hooks and method handlers. Each is an `Arc`'d closure set while
//! the address space is built ([`super::AddressSpaceBuilder`]) and called on the shard
//! that serves the request, so it must return quickly and never block (a device round trip
//! belongs on a thread of the application, which then pushes the value or answers later).
//!
//! Core runs them with the caller's [`Now`]; it measures nothing and reads no clock. The
//! runtime (the `uaring` library) wraps each closure it installs with its own timing.

use std::sync::Arc;

use crate::generated::types::{Argument, MessageSecurityMode};
use crate::roles::Roles;
use crate::time::Now;
use crate::types::{
    BuiltinType, DataValue, ExtensionObject, LocalizedText, NodeId, StatusCode, UaString, Variant,
};

/// A computed value: called for every Read and every sample of the Variable, on the shard,
/// with the node's own 64-bit state word ([`Computed::state`]).
pub type ReadFn = Arc<dyn Fn(Now, &std::sync::atomic::AtomicU64) -> DataValue + Send + Sync>;

/// A computed value and the 64-bit state word kept inline in its node. One `ReadFn` may
/// serve many nodes (each with its own word): a per-node counter then needs no allocation
/// per node, and sampling it touches no memory beyond the node (the sampling-capacity
/// contract's counters are built so; a closure per node with its state behind the `Arc` cost
/// them a fifth of their capacity, one more cache line per sample).
pub struct Computed {
    pub read: ReadFn,
    pub state: std::sync::atomic::AtomicU64,
}

impl Computed {
    /// A computed value whose closure keeps its own state (the word starts at 0, unused).
    pub fn new(read: impl Fn(Now) -> DataValue + Send + Sync + 'static) -> Computed {
        Computed {
            read: Arc::new(move |now, _| read(now)),
            state: Default::default(),
        }
    }

    /// A computed value over a shared closure and this node's state word.
    pub fn with_state(read: ReadFn, initial: u64) -> Computed {
        Computed {
            read,
            state: std::sync::atomic::AtomicU64::new(initial),
        }
    }

    /// The value now.
    #[inline]
    pub fn value(&self, now: Now) -> DataValue {
        (self.read)(now, &self.state)
    }
}

/// What a write hook is told about a client's Write of a Variable's Value.
#[derive(Debug)]
pub struct WriteInfo<'a> {
    pub node_id: &'a NodeId,
    /// The value as it will be stored (SourceTimestamp filled in when the client sent none).
    pub value: &'a DataValue,
    /// The IndexRange of the Write ("" for the whole value).
    pub index_range: &'a str,
    /// The user name (or certificate subject) of the writing session; empty when anonymous
    /// (a gateway maps it to an identity on the server it forwards the Write to).
    pub user: &'a str,
    /// The writing session's roles (Part 3 §4.9).
    pub roles: Roles,
    pub now: Now,
}

/// Accepts (`Ok`: the value is stored, when the Variable stores values) or rejects a Write
/// with the operation's status.
pub type WriteHook = Arc<dyn Fn(&WriteInfo<'_>) -> Result<(), StatusCode> + Send + Sync>;

/// One declared argument of a method.
#[derive(Clone, Debug, PartialEq)]
pub struct ArgDef {
    pub name: String,
    /// A namespace-0 DataType of a built-in type.
    pub data_type: NodeId,
    /// The built-in type a value must have.
    pub builtin: BuiltinType,
    /// -1 scalar, 1 one-dimensional array.
    pub value_rank: i32,
    pub description: String,
    /// For a numeric scalar: the values accepted, inclusive (else BadOutOfRange).
    pub range: Option<(f64, f64)>,
    /// For a String scalar: the most characters accepted (else BadOutOfRange); for an
    /// array: the most elements.
    pub max_length: Option<u32>,
}

impl ArgDef {
    /// A scalar argument of a built-in type.
    pub fn scalar(name: &str, builtin: BuiltinType) -> ArgDef {
        ArgDef {
            name: name.to_string(),
            data_type: NodeId::ns0(builtin as u32),
            builtin,
            value_rank: -1,
            description: String::new(),
            range: None,
            max_length: None,
        }
    }

    /// A one-dimensional array argument of a built-in type.
    pub fn array(name: &str, builtin: BuiltinType) -> ArgDef {
        ArgDef {
            value_rank: 1,
            ..ArgDef::scalar(name, builtin)
        }
    }

    /// The same, with a description.
    pub fn describe(mut self, description: &str) -> ArgDef {
        self.description = description.to_string();
        self
    }

    /// Numeric values outside `[min, max]` are refused with BadOutOfRange (for this
    /// argument; the call is BadInvalidArgument), before the handler runs.
    pub fn range(mut self, min: f64, max: f64) -> ArgDef {
        self.range = Some((min, max));
        self
    }

    /// Strings longer than `n` characters (arrays of more than `n` elements) are refused
    /// with BadOutOfRange, before the handler runs.
    pub fn max_length(mut self, n: u32) -> ArgDef {
        self.max_length = Some(n);
        self
    }

    /// Good, BadTypeMismatch (not of the declared type and rank, see
    /// [`ArgDef::accepts`]), or BadOutOfRange (outside [`ArgDef::range`] or
    /// [`ArgDef::max_length`]): the inputArgumentResult of `v`.
    pub fn check(&self, v: &Variant) -> StatusCode {
        if !self.accepts(v) {
            return StatusCode::BadTypeMismatch;
        }
        if let Some((lo, hi)) = self.range {
            let x = match v {
                Variant::SByte(x) => Some(*x as f64),
                Variant::Byte(x) => Some(*x as f64),
                Variant::Int16(x) => Some(*x as f64),
                Variant::UInt16(x) => Some(*x as f64),
                Variant::Int32(x) => Some(*x as f64),
                Variant::UInt32(x) => Some(*x as f64),
                Variant::Int64(x) => Some(*x as f64),
                Variant::UInt64(x) => Some(*x as f64),
                Variant::Float(x) => Some(*x as f64),
                Variant::Double(x) => Some(*x),
                _ => None,
            };
            if let Some(x) = x {
                if x.is_nan() || x < lo || x > hi {
                    return StatusCode::BadOutOfRange;
                }
            }
        }
        if let Some(n) = self.max_length {
            let len = match v {
                Variant::String(s) => s.as_str().chars().count(),
                Variant::Array(a) => a.values.len(),
                _ => 0,
            };
            if len > n as usize {
                return StatusCode::BadOutOfRange;
            }
        }
        StatusCode::Good
    }

    /// Does `v` match this declaration (Part 4 §5.11.2: no conversion; Null accepted for
    /// String, ByteString, LocalizedText and NodeId scalars and for arrays)?
    pub fn accepts(&self, v: &Variant) -> bool {
        match (self.value_rank, v) {
            (1, Variant::Empty) => true,
            (1, Variant::Array(a)) => {
                a.value_type == self.builtin && matches!(a.dimensions.as_deref(), None | Some([_]))
            }
            (1, _) => false,
            (_, Variant::Empty) => matches!(
                self.builtin,
                BuiltinType::String
                    | BuiltinType::ByteString
                    | BuiltinType::LocalizedText
                    | BuiltinType::NodeId
            ),
            (_, v) => v.scalar_type() == Some(self.builtin),
        }
    }

    /// The Argument structure of the InputArguments / OutputArguments property.
    pub fn to_argument(&self) -> ExtensionObject {
        ExtensionObject::from_struct(&Argument {
            name: UaString::from(self.name.as_str()),
            data_type: self.data_type.clone(),
            value_rank: self.value_rank,
            array_dimensions: if self.value_rank == 1 {
                vec![0]
            } else {
                Vec::new()
            },
            description: LocalizedText::new("", &self.description),
        })
    }
}

/// One call of an application method, after the server checked the arguments against
/// their declaration.
#[derive(Debug)]
pub struct MethodCall<'a> {
    pub object_id: &'a NodeId,
    pub method_id: &'a NodeId,
    pub inputs: &'a [Variant],
    /// The user name (or certificate subject) of the session; empty when anonymous.
    pub user: &'a str,
    /// The calling session's roles (Part 3 §4.9): a method may demand one, e.g. SecurityAdmin.
    pub roles: Roles,
    /// The MessageSecurityMode of the secure channel the call came over (a method may demand
    /// SignAndEncrypt).
    pub security_mode: MessageSecurityMode,
    /// The calling session's SessionId: stable for the session's life, also across a move to
    /// another channel or shard (state a method keeps per session, e.g. file handles).
    pub session_id: &'a NodeId,
    pub now: Now,
}

/// Runs a method: the output arguments (in declaration order) or the call's status.
pub type MethodFn = Arc<dyn Fn(&MethodCall<'_>) -> Result<Vec<Variant>, StatusCode> + Send + Sync>;

/// How a method runs.
#[derive(Clone)]
pub enum MethodHandler {
    /// On the shard, answered at once.
    Quick(MethodFn),
    /// Handed to the application (or a worker pool) and answered later, within `timeout_ms`
    /// (else BadTimeout).
    Deferred {
        start: AsyncMethodFn,
        timeout_ms: u32,
    },
    /// Answered later like `Deferred`, by whoever declared the method (a gateway forwarding
    /// the Call to the server it mirrors): the arguments go as the client gave them and the
    /// outputs come back as that server answered, checked by neither declaration here.
    Forward {
        start: AsyncMethodFn,
        timeout_ms: u32,
    },
}

impl MethodHandler {
    /// Is it answered later (`Deferred` or `Forward`)?
    pub fn is_async(&self) -> bool {
        matches!(
            self,
            MethodHandler::Deferred { .. } | MethodHandler::Forward { .. }
        )
    }
}

/// An application method: its declaration and its handler.
#[derive(Clone)]
pub struct AppMethod {
    pub inputs: Vec<ArgDef>,
    pub outputs: Vec<ArgDef>,
    /// A read-only user may not call it (BadUserAccessDenied).
    pub needs_write: bool,
    pub handler: MethodHandler,
}

impl std::fmt::Debug for AppMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppMethod")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .finish()
    }
}

/// The application's hooks of a finished address space, by node.
#[derive(Default, Clone)]
pub struct AppHooks {
    /// Write hooks by node index.
    pub(crate) write_hooks: rustc_hash::FxHashMap<u32, WriteHook>,
    /// Methods by method NodeId.
    pub(crate) methods: std::collections::HashMap<NodeId, AppMethod>,
    /// Asynchronous write hooks by node index.
    pub(crate) async_write_hooks: rustc_hash::FxHashMap<u32, AsyncWriteHook>,
    /// The application's conditions (their nodes are in the address space).
    pub(crate) conditions: Vec<AppCondition>,
    /// Stored Variables whose cells another server's values keep (a gateway's mirror), by
    /// node index.
    pub(crate) read_through: rustc_hash::FxHashMap<u32, ReadThrough>,
}

impl std::fmt::Debug for AppHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppHooks")
            .field("write_hooks", &self.write_hooks.len())
            .field("methods", &self.methods.len())
            .finish()
    }
}

// ---- asynchronous sources, writes and methods ----------------------------------------

/// Where a completion goes: an operation of a deferred request, or a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Operation `op` of the deferred request in `slot` (of that `generation`).
    Request { slot: u32, generation: u32, op: u32 },
    /// A sample of the subscription engine's source `source` (of that `generation`).
    Sample { source: u32, generation: u32 },
}

/// What the application answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// A value (Read, sampling).
    Value(DataValue),
    /// A status (Write; or a failed Read or Call).
    Status(StatusCode),
    /// Output arguments (Call).
    Outputs(Vec<Variant>),
    /// One node's HistoryRead result (`crate::history`).
    History(Box<crate::generated::types::HistoryReadResult>),
    /// One node's HistoryUpdate result.
    HistoryUpdate(Box<crate::generated::types::HistoryUpdateResult>),
    /// A whole response (a NodeManagement request answered by the model writer).
    Response(Box<crate::generated::messages::Response>),
}

/// One completion on its way to its shard.
#[derive(Clone, Debug)]
pub struct Completion {
    pub target: Target,
    pub outcome: Outcome,
}

/// The application's side of one asynchronous operation: completed once, from any thread.
/// Dropped without an answer, it answers BadInternalError (the request is never left
/// waiting for its timeout because a handle was lost).
pub(crate) struct Reply {
    to: To,
    source: Option<Arc<AsyncSource>>,
    sent: bool,
}

/// Where a [`Reply`]'s answer goes.
enum To {
    /// The completion inbox of a shard.
    Shard {
        hub: Arc<super::ChangeHub>,
        shard: usize,
        target: Target,
    },
    /// A function of a reader outside the shards ([`AsyncSource::start_read`]); taken when
    /// called.
    Function(Option<Box<dyn FnOnce(Outcome) + Send>>),
}

impl Reply {
    pub(crate) fn new(
        hub: Arc<super::ChangeHub>,
        shard: usize,
        target: Target,
        source: Option<Arc<AsyncSource>>,
    ) -> Reply {
        Reply {
            to: To::Shard { hub, shard, target },
            source,
            sent: false,
        }
    }

    /// Sends the answer (once; later calls do nothing).
    pub(crate) fn answer(mut self, outcome: Outcome) {
        self.send(outcome);
    }

    /// Sends nothing: the operation was settled by the shard itself.
    pub(crate) fn cancel(mut self) {
        self.sent = true;
        if let Some(s) = &self.source {
            s.in_flight
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }

    fn send(&mut self, outcome: Outcome) {
        if self.sent {
            return;
        }
        self.sent = true;
        if let Some(s) = &self.source {
            s.in_flight
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
        match &mut self.to {
            To::Shard { hub, shard, target } => hub.complete(
                *shard,
                Completion {
                    target: *target,
                    outcome,
                },
            ),
            To::Function(f) => {
                if let Some(f) = f.take() {
                    f(outcome);
                }
            }
        }
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        self.send(Outcome::Status(StatusCode::BadInternalError));
    }
}

impl std::fmt::Debug for Reply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.to {
            To::Shard { shard, target, .. } => f
                .debug_struct("Reply")
                .field("shard", shard)
                .field("target", target)
                .finish(),
            To::Function(_) => f.debug_struct("Reply").field("to", &"function").finish(),
        }
    }
}

/// A Read or a sample the application answers later ([`AsyncSource`]).
#[derive(Debug)]
pub struct AsyncRead {
    pub node_id: NodeId,
    reply: Reply,
}

impl AsyncRead {
    pub(crate) fn new(node_id: NodeId, reply: Reply) -> AsyncRead {
        AsyncRead { node_id, reply }
    }

    /// Answers with the value (its SourceTimestamp as the device gave it).
    pub fn complete(mut self, value: DataValue) {
        self.reply.send(Outcome::Value(value));
    }

    /// Answers with a bad status (e.g. BadCommunicationError when the device is gone).
    pub fn fail(mut self, status: StatusCode) {
        self.reply.send(Outcome::Status(status));
    }
}

/// A client's Write the application answers later ([`AsyncWriteFn`]): `Good` stores the
/// value (when the Variable stores values) and answers Good; anything else is the result.
#[derive(Debug)]
pub struct AsyncWrite {
    reply: Reply,
}

impl AsyncWrite {
    pub(crate) fn new(reply: Reply) -> AsyncWrite {
        AsyncWrite { reply }
    }

    /// Answers the Write operation.
    pub fn complete(mut self, status: StatusCode) {
        self.reply.send(Outcome::Status(status));
    }
}

/// A method call the application answers later ([`AsyncMethodFn`]).
#[derive(Debug)]
pub struct AsyncCall {
    pub object_id: NodeId,
    pub method_id: NodeId,
    pub inputs: Vec<Variant>,
    pub user: String,
    /// As [`MethodCall::roles`].
    pub roles: Roles,
    /// As [`MethodCall::security_mode`].
    pub security_mode: MessageSecurityMode,
    /// As [`MethodCall::session_id`].
    pub session_id: NodeId,
    reply: Reply,
}

/// Who called a method: what [`AsyncCall::new`] takes besides the call itself.
#[derive(Clone, Debug)]
pub(crate) struct Caller {
    pub user: String,
    pub roles: Roles,
    pub security_mode: MessageSecurityMode,
    pub session_id: NodeId,
}

impl AsyncCall {
    pub(crate) fn new(
        object_id: NodeId,
        method_id: NodeId,
        inputs: Vec<Variant>,
        caller: Caller,
        reply: Reply,
    ) -> AsyncCall {
        AsyncCall {
            object_id,
            method_id,
            inputs,
            user: caller.user,
            roles: caller.roles,
            security_mode: caller.security_mode,
            session_id: caller.session_id,
            reply,
        }
    }

    /// Answers with the output arguments, or a status.
    pub fn complete(mut self, result: Result<Vec<Variant>, StatusCode>) {
        let outcome = match result {
            Ok(out) => Outcome::Outputs(out),
            Err(s) => Outcome::Status(s),
        };
        self.reply.send(outcome);
    }
}

/// Starts an asynchronous read; must return at once (hand the request to a thread).
pub type AsyncReadFn = Arc<dyn Fn(AsyncRead) + Send + Sync>;
/// Starts an asynchronous write; must return at once.
pub type AsyncWriteFn = Arc<dyn Fn(&WriteInfo<'_>, AsyncWrite) + Send + Sync>;
/// Starts an asynchronous method call; must return at once.
pub type AsyncMethodFn = Arc<dyn Fn(AsyncCall) + Send + Sync>;

/// A value source that answers later: every Read and every sample of its Variable is handed
/// to `read` on the shard and completed from any thread. At most `max_in_flight` operations
/// are out at once (one more is answered BadTooManyOperations, a sample is skipped); an
/// operation not answered within `timeout_ms` is answered BadTimeout (the late answer is
/// dropped).
pub struct AsyncSource {
    pub(crate) read: AsyncReadFn,
    pub(crate) max_in_flight: u32,
    pub(crate) timeout_ms: u32,
    pub(crate) in_flight: std::sync::atomic::AtomicU32,
}

impl AsyncSource {
    pub fn new(read: AsyncReadFn, max_in_flight: u32, timeout_ms: u32) -> Arc<AsyncSource> {
        Arc::new(AsyncSource {
            read,
            max_in_flight: max_in_flight.max(1),
            timeout_ms: timeout_ms.max(1),
            in_flight: Default::default(),
        })
    }

    /// Starts a read of `node_id`'s value from outside the shards (the history sampler):
    /// the application's read function gets an [`AsyncRead`] whose answer — a value, a
    /// failure, or BadInternalError when the application drops it — is handed to `answer` on
    /// the thread that completes it. It counts against `max_in_flight` like a shard's reads;
    /// false (and `answer` is not called) when `max_in_flight` are out. There is no timeout:
    /// a late answer is still handed over.
    pub fn start_read(
        self: &Arc<Self>,
        node_id: NodeId,
        answer: impl FnOnce(Outcome) + Send + 'static,
    ) -> bool {
        if !self.try_acquire() {
            return false;
        }
        let reply = Reply {
            to: To::Function(Some(Box::new(answer))),
            source: Some(self.clone()),
            sent: false,
        };
        (self.read)(AsyncRead::new(node_id, reply));
        true
    }

    /// Operations out at the application now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(std::sync::atomic::Ordering::Acquire)
    }

    pub fn timeout_ms(&self) -> u32 {
        self.timeout_ms
    }

    /// Takes a slot for one more operation; false when `max_in_flight` are out.
    pub(crate) fn try_acquire(&self) -> bool {
        use std::sync::atomic::Ordering;
        let mut cur = self.in_flight.load(Ordering::Acquire);
        loop {
            if cur >= self.max_in_flight {
                return false;
            }
            match self.in_flight.compare_exchange_weak(
                cur,
                cur + 1,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(c) => cur = c,
            }
        }
    }
}

impl std::fmt::Debug for AsyncSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSource")
            .field("max_in_flight", &self.max_in_flight)
            .field("timeout_ms", &self.timeout_ms)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// A stored Variable whose cell is kept by someone else: a gateway stores the values of the
/// server it mirrors there (the change path takes them to every item). A Read is answered
/// from the cell when the cell meets the Read's maxAge, else it goes to `source` (answered
/// later, like an asynchronous source): a maxAge of 0 always goes, a larger one goes when the
/// cell was last known current longer ago than that. Sampling and exception-based items
/// read the cell only.
#[derive(Clone)]
pub struct ReadThrough {
    /// Answers a Read the cell does not meet.
    pub source: Arc<AsyncSource>,
    /// Monotonic time (ns) at which the cell last held the other server's current value, or
    /// `u64::MAX` while that server keeps it current (a subscription feeds it); 0: never.
    pub fresh_ns: Arc<std::sync::atomic::AtomicU64>,
}

impl ReadThrough {
    /// Does a Read with `max_age_ms` go to the source at `now`?
    #[inline]
    pub fn due(&self, max_age_ms: f64, now: Now) -> bool {
        if max_age_ms.is_nan() || max_age_ms <= 0.0 {
            return true;
        }
        let fresh = self.fresh_ns.load(std::sync::atomic::Ordering::Acquire);
        if fresh == u64::MAX {
            return false;
        }
        let age_ns = now.mono_ns.saturating_sub(fresh) as f64;
        fresh == 0 || age_ns > max_age_ms * 1e6
    }
}

impl std::fmt::Debug for ReadThrough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadThrough")
            .field("source", &self.source)
            .finish()
    }
}

/// An asynchronous write hook with its timeout.
#[derive(Clone)]
pub struct AsyncWriteHook {
    pub start: AsyncWriteFn,
    pub timeout_ms: u32,
}

// ---- conditions (alarms) of the application ---------------------------------------------

/// What a client asked a condition to do (Part 9 §5.5 and §5.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConditionAction {
    Acknowledge,
    Confirm,
    /// ConditionType.AddComment (i=9029).
    AddComment,
    /// ConditionType.Enable (i=9027); EventId and Comment are ignored.
    Enable,
    /// ConditionType.Disable (i=9028); EventId and Comment are ignored.
    Disable,
    /// ShelvedStateMachineType.TimedShelve (i=2949): shelved for a time (Part 9 §5.8.17.4).
    TimedShelve,
    /// ShelvedStateMachineType.OneShotShelve (i=2948): shelved until the alarm returns to
    /// inactive (§5.8.17.6).
    OneShotShelve,
    /// ShelvedStateMachineType.Unshelve (i=2947) (§5.8.17.2).
    Unshelve,
}

impl ConditionAction {
    /// Is it one of the ShelvingState's methods?
    pub fn is_shelving(self) -> bool {
        matches!(
            self,
            ConditionAction::TimedShelve
                | ConditionAction::OneShotShelve
                | ConditionAction::Unshelve
        )
    }
}

/// An alarm's shelving (Part 9 §5.8.17): its ShelvingState and, when given, the longest time
/// it may stay shelved (its MaxTimeShelved Property, milliseconds), which bounds TimedShelve's
/// ShelvingTime and ends a OneShotShelve.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shelving {
    pub max_time_shelved_ms: Option<f64>,
}

/// What the application is told after a client's successful action on its condition.
#[derive(Debug)]
pub struct ConditionActionInfo<'a> {
    pub condition: &'a NodeId,
    pub action: ConditionAction,
    pub comment: &'a LocalizedText,
    /// The client's user name (or certificate subject); empty when anonymous.
    pub user: &'a str,
    /// The condition's state after the action: acknowledged, confirmed, active, enabled.
    pub acked: bool,
    pub confirmed: bool,
    pub active: bool,
    pub enabled: bool,
}

/// Called on the shard serving the Call after the action took effect (must return quickly).
pub type ConditionHook = Arc<dyn Fn(&ConditionActionInfo<'_>) + Send + Sync>;

/// An AlarmConditionType instance of the application: its node (built by
/// `events::nodes::add_condition_nodes`), its source and the hook.
#[derive(Clone)]
pub struct AppCondition {
    pub node_id: NodeId,
    /// ConditionName.
    pub name: String,
    /// The source node (an Object; HasCondition from it to the condition).
    pub source: NodeId,
    /// Its type: AlarmConditionType or a subtype (the EventType of its events).
    pub type_def: NodeId,
    /// The subtype's Properties (e.g. OffNormalAlarmType's NormalState), fixed at start:
    /// Property nodes of the condition and fields of every event it raises.
    pub properties: Vec<(crate::types::QualifiedName, Variant)>,
    /// Its ShelvingState, when it has one.
    pub shelving: Option<Shelving>,
    pub on_action: Option<ConditionHook>,
}

impl std::fmt::Debug for AppCondition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppCondition")
            .field("node_id", &self.node_id)
            .field("name", &self.name)
            .finish()
    }
}
