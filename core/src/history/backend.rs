//! The interface between the HistoryRead service and a history store.
//!
//! The service checks what the server can check without the store (the session, the
//! operation limits, the details, the node, its AccessLevel and the user's permissions,
//! continuation points) and hands each remaining operation to
//! [`HistoryBackend::read`] as a [`HistoryReadOp`] with a [`HistoryReply`]. The backend
//! answers each reply once, from any thread, with a `HistoryReadResult`. Continuation
//! points are the server's, not the backend's: a backend that stops early puts an opaque
//! resume token of its own into the result's `continuation_point`; the server keeps that
//! token in the session (bounded by `operation_limits.max_history_continuation_points`)
//! and gives the client an id for it. When the client continues, the token comes back in
//! [`HistoryReadOp::resume`].

use std::sync::Arc;

use crate::address_space::app::{Outcome, Reply};
use crate::address_space::NumericRange;
use crate::generated::types::{
    DeleteAtTimeDetails, DeleteEventDetails, DeleteRawModifiedDetails, HistoryReadResult,
    HistoryUpdateResult, PerformUpdateType, ReadAtTimeDetails, ReadEventDetails,
    ReadProcessedDetails, ReadRawModifiedDetails, TimestampsToReturn, UpdateDataDetails,
    UpdateEventDetails,
};
use crate::types::{ExtensionObject, NodeId, StatusCode};

/// The HistoryReadDetails of a request, decoded.
#[derive(Debug, Clone)]
pub enum ReadDetails {
    /// Raw values, or with isReadModified the modified values (the service refuses modified
    /// reads the backend does not keep, and returnBounds with them).
    Raw(ReadRawModifiedDetails),
    /// Values at given times (interpolated where no raw value is at the time).
    AtTime(ReadAtTimeDetails),
    /// Aggregates over processing intervals (Part 13).
    Processed(ReadProcessedDetails),
    /// Events of a notifier.
    Events(ReadEventDetails),
}

impl ReadDetails {
    /// Decodes the request's historyReadDetails. `Err` is the service result: a null or
    /// undecodable one is BadHistoryOperationInvalid; ReadAnnotationDataDetails and the
    /// other known kinds this server does not read are BadHistoryOperationUnsupported.
    pub fn decode(
        details: &ExtensionObject,
        limits: crate::encoding::DecodeLimits,
    ) -> Result<ReadDetails, StatusCode> {
        fn take<T>(r: Option<crate::encoding::DecodeResult<T>>) -> Option<Result<T, StatusCode>> {
            r.map(|r| r.map_err(|_| StatusCode::BadHistoryOperationInvalid))
        }
        if let Some(r) = take(details.decode_as::<ReadRawModifiedDetails>(limits)) {
            return r.map(ReadDetails::Raw);
        }
        if let Some(r) = take(details.decode_as::<ReadAtTimeDetails>(limits)) {
            return r.map(ReadDetails::AtTime);
        }
        if let Some(r) = take(details.decode_as::<ReadProcessedDetails>(limits)) {
            return r.map(ReadDetails::Processed);
        }
        if let Some(r) = take(details.decode_as::<ReadEventDetails>(limits)) {
            return r.map(ReadDetails::Events);
        }
        if details.is::<crate::generated::types::ReadAnnotationDataDetails>()
            || details.is::<crate::generated::types::ReadEventDetails2>()
        {
            return Err(StatusCode::BadHistoryOperationUnsupported);
        }
        Err(StatusCode::BadHistoryOperationInvalid)
    }

    /// Does it read events (an EventNotifier) rather than values (a Variable)?
    pub fn reads_events(&self) -> bool {
        matches!(self, ReadDetails::Events(_))
    }
}

/// One entry of a HistoryUpdate's historyUpdateDetails, decoded.
#[derive(Debug, Clone)]
pub enum UpdateDetails {
    /// Insert, replace or update (insert or replace) values at their SourceTimestamps.
    Data(UpdateDataDetails),
    /// Delete the raw values of `[startTime, endTime)`, or with isDeleteModified the
    /// modified values kept for that range.
    DeleteRaw(DeleteRawModifiedDetails),
    /// Delete the raw values at the given times.
    DeleteAtTime(DeleteAtTimeDetails),
    /// Insert, replace or update (insert or replace) events of a notifier.
    Events(UpdateEventDetails),
    /// Delete events of a notifier by EventId.
    DeleteEvents(DeleteEventDetails),
}

impl UpdateDetails {
    /// Whether a backend that can do `caps` offers this update. A mode other than Insert,
    /// Replace and Update is the caller's to refuse first (true here).
    pub fn offered_by(&self, caps: &HistoryCapabilities) -> bool {
        let by_mode =
            |mode: PerformUpdateType, insert: bool, replace: bool, update: bool| match mode {
                PerformUpdateType::Insert => insert,
                PerformUpdateType::Replace => replace,
                PerformUpdateType::Update => update,
                _ => true,
            };
        match self {
            UpdateDetails::Data(d) => by_mode(
                d.perform_insert_replace,
                caps.insert_data,
                caps.replace_data,
                caps.update_data,
            ),
            UpdateDetails::DeleteRaw(d) => {
                caps.delete_raw && (!d.is_delete_modified || caps.modified_values)
            }
            UpdateDetails::DeleteAtTime(_) => caps.delete_at_time,
            UpdateDetails::Events(d) => by_mode(
                d.perform_insert_replace,
                caps.insert_event,
                caps.replace_event,
                caps.update_event,
            ),
            UpdateDetails::DeleteEvents(_) => caps.delete_event,
        }
    }

    /// Decodes one entry. `Err`: BadHistoryOperationInvalid for a null or undecodable one,
    /// BadHistoryOperationUnsupported for the kind this server does not update
    /// (UpdateStructureDataDetails).
    pub fn decode(
        details: &ExtensionObject,
        limits: crate::encoding::DecodeLimits,
    ) -> Result<UpdateDetails, StatusCode> {
        fn take<T>(r: Option<crate::encoding::DecodeResult<T>>) -> Option<Result<T, StatusCode>> {
            r.map(|r| r.map_err(|_| StatusCode::BadHistoryOperationInvalid))
        }
        if let Some(r) = take(details.decode_as::<UpdateDataDetails>(limits)) {
            return r.map(UpdateDetails::Data);
        }
        if let Some(r) = take(details.decode_as::<DeleteRawModifiedDetails>(limits)) {
            return r.map(UpdateDetails::DeleteRaw);
        }
        if let Some(r) = take(details.decode_as::<DeleteAtTimeDetails>(limits)) {
            return r.map(UpdateDetails::DeleteAtTime);
        }
        if let Some(r) = take(details.decode_as::<UpdateEventDetails>(limits)) {
            return r.map(UpdateDetails::Events);
        }
        if let Some(r) = take(details.decode_as::<DeleteEventDetails>(limits)) {
            return r.map(UpdateDetails::DeleteEvents);
        }
        if details.is::<crate::generated::types::UpdateStructureDataDetails>() {
            return Err(StatusCode::BadHistoryOperationUnsupported);
        }
        Err(StatusCode::BadHistoryOperationInvalid)
    }

    /// The node the entry updates.
    pub fn node_id(&self) -> &NodeId {
        match self {
            UpdateDetails::Data(d) => &d.node_id,
            UpdateDetails::DeleteRaw(d) => &d.node_id,
            UpdateDetails::DeleteAtTime(d) => &d.node_id,
            UpdateDetails::Events(d) => &d.node_id,
            UpdateDetails::DeleteEvents(d) => &d.node_id,
        }
    }

    /// Does it update events (of a notifier) rather than values?
    pub fn updates_events(&self) -> bool {
        matches!(
            self,
            UpdateDetails::Events(_) | UpdateDetails::DeleteEvents(_)
        )
    }
}

/// One node's operation of a HistoryUpdate, for the backend (checked by the server: the
/// node, its AccessLevel's HistoryWrite, the user's Insert/Modify/DeleteHistory, and that the
/// backend offers the kind).
#[derive(Debug, Clone)]
pub struct HistoryUpdateOp {
    pub details: UpdateDetails,
    /// The user who asks (a UserName token's name, an X.509 user's CN; `None` for an
    /// anonymous session): the ModificationInfo's userName.
    pub user: Option<String>,
    /// The EventFilter of an UpdateEventDetails, compiled and checked by the server: an
    /// existing event is replaced only when its where clause accepts it.
    pub event_filter: Option<Arc<crate::events::filter::CompiledEventFilter>>,
    /// The asking session's roles (Part 3 §4.9): a gateway maps the user and roles to an
    /// identity on the server it forwards the update to.
    pub roles: crate::roles::Roles,
}

/// The reply to one [`HistoryUpdateOp`]: answer it once, from any thread.
#[derive(Debug)]
pub struct HistoryUpdateReply {
    reply: Reply,
}

impl HistoryUpdateReply {
    pub(crate) fn new(reply: Reply) -> HistoryUpdateReply {
        HistoryUpdateReply { reply }
    }

    /// Answers with the node's status and one status per value or time.
    pub fn answer(self, result: HistoryUpdateResult) {
        self.reply.answer(Outcome::HistoryUpdate(Box::new(result)));
    }

    /// Answers with a bad status for the node.
    pub fn fail(self, status: StatusCode) {
        self.reply.answer(Outcome::Status(status));
    }
}

/// One node's operation of a HistoryRead, for the backend.
#[derive(Debug, Clone)]
pub struct HistoryReadOp {
    pub node_id: NodeId,
    /// The request's details (shared by its operations).
    pub details: Arc<ReadDetails>,
    /// Which timestamps each returned DataValue carries (never Neither: refused before).
    pub timestamps: TimestampsToReturn,
    /// The IndexRange of the operation, parsed (`None`: the whole value).
    pub index_range: Option<NumericRange>,
    /// The aggregate of this node's processed read (its entry of the details'
    /// aggregateType, which the server checked is among the backend's aggregates).
    pub aggregate: Option<NodeId>,
    /// The EventFilter of an event read, compiled and checked by the server: the backend
    /// applies its where clause and select clauses to each stored event
    /// ([`crate::events::filter::CompiledEventFilter::apply`]).
    pub event_filter: Option<Arc<crate::events::filter::CompiledEventFilter>>,
    /// The backend's resume token, when the client continues from a continuation point.
    pub resume: Option<Vec<u8>>,
    /// Most values to return in this answer: the request's numValuesPerNode (0 = no
    /// request limit) capped by the server's `max_history_values_per_node`. A backend with
    /// more to give stops there and returns a resume token.
    pub max_values: u32,
    /// The user who asks (a UserName token's name, an X.509 user's CN; empty when
    /// anonymous), shared by the request's operations: a gateway maps it to an identity on
    /// the server it forwards the read to.
    pub user: Arc<str>,
    /// The asking session's roles (Part 3 §4.9).
    pub roles: crate::roles::Roles,
}

pub use crate::address_space::build::HistoryCapabilities;

/// The reply to one [`HistoryReadOp`]: answer it once, from any thread. Dropped
/// unanswered, the operation gets BadInternalError.
#[derive(Debug)]
pub struct HistoryReply {
    reply: Reply,
}

impl HistoryReply {
    pub(crate) fn new(reply: Reply) -> HistoryReply {
        HistoryReply { reply }
    }

    /// Answers with the result: its status (Good, GoodNoData, GoodMoreData with a token,
    /// BadNoData, …), its HistoryData (as an ExtensionObject) and, when the backend
    /// stopped at `max_values` with more to give, its resume token in
    /// `continuation_point`.
    pub fn answer(self, result: HistoryReadResult) {
        self.reply.answer(Outcome::History(Box::new(result)));
    }

    /// Answers with a bad status and no data.
    pub fn fail(self, status: StatusCode) {
        self.reply.answer(Outcome::Status(status));
    }
}

/// A history store as the server sees it. Called on a shard thread: `read` must return at
/// once (hand the operation to the store's own threads) and never block.
pub trait HistoryBackend: Send + Sync + std::fmt::Debug {
    /// What it serves.
    fn capabilities(&self) -> HistoryCapabilities;
    /// Is this node's history kept (its value for data reads, its events for event
    /// reads)? Checked before an operation is handed over; `false` is
    /// BadHistoryOperationUnsupported.
    fn has_history(&self, node_id: &NodeId, events: bool) -> bool;
    /// Starts one operation; answer `reply` when done.
    fn read(&self, op: HistoryReadOp, reply: HistoryReply);
    /// Starts one HistoryUpdate operation of a kind [`HistoryBackend::capabilities`] offers;
    /// answer `reply` when it is done and durable. The default refuses.
    fn update(&self, op: HistoryUpdateOp, reply: HistoryUpdateReply) {
        let _ = op;
        reply.fail(StatusCode::BadHistoryOperationUnsupported);
    }
    /// The timeout after which the server answers an operation BadTimeout, ms.
    fn timeout_ms(&self) -> u32 {
        30_000
    }
    /// A continuation point of `node_id` that the backend gave `token` for will not be
    /// used: its client released it (releaseContinuationPoints, Part 11 §6.3), its session
    /// ended (closed, timed out) with it, or the session had no room for it
    /// (`max_history_continuation_points`: the operation was answered
    /// BadNoContinuationPoints). A backend that keeps something per token frees it here
    /// (must return at once, as `read`; called on the shard); the default keeps nothing.
    fn release_continuation_point(&self, node_id: &NodeId, token: Vec<u8>) {
        let _ = (node_id, token);
    }
}
