//! Requests that wait for the application: a Read of a Variable with an asynchronous source,
//! a Write through an asynchronous write hook, a Call of a deferred method (and requests
//! that wait for the runtime: HistoryRead and HistoryUpdate, NodeManagement requests edited
//! by the model writer). Like Publish,
//! they are not answered in the call that received them: the shard keeps the response it is
//! building here, hands each operation to the application with a reply handle
//! ([`crate::address_space::app`]), and answers when the last operation is settled —
//! answered by the application (from any thread, through the shard's completion inbox) or
//! timed out. The response then goes out through the subscription engine's outbox, the
//! deferred-response path Publish uses. Other requests of the shard, and of the same
//! connection, are served meanwhile (OPC UA correlates responses by request id).
//!
//! Bounded: at most `operation_limits.max_async_operations_per_shard` operations wait at
//! once (one more is answered BadTooManyOperations at once), each has its source's timeout,
//! and the table's slots are reused.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use std::sync::Arc;

use crate::address_space::app::{ArgDef, AsyncSource, Outcome, Reply, Target};
use crate::address_space::attributes::{
    commit_write, finish_async_value, PreparedWrite, Timestamps,
};
use crate::address_space::ChangeHub;
use crate::address_space::{AddressSpace, NumericRange};
use crate::generated::messages::Response;
use crate::generated::types::{
    CallMethodResult, CallResponse, HistoryReadResponse, HistoryReadResult, HistoryUpdateResponse,
    HistoryUpdateResult, ReadResponse, WriteResponse,
};
use crate::time::Now;
use crate::types::{QualifiedName, StatusCode};

/// One operation of a deferred Read.
#[derive(Debug)]
pub struct ReadOp {
    /// Index into the response's results.
    pub result: u32,
    pub range: Option<NumericRange>,
    pub encoding: QualifiedName,
}

/// One operation of a deferred Write.
#[derive(Debug)]
pub struct WriteOp {
    pub result: u32,
    pub prepared: PreparedWrite,
}

/// One operation of a deferred Call.
#[derive(Debug)]
pub struct CallOp {
    pub result: u32,
    pub inputs: usize,
    /// The declared outputs an answer must match; `None` for a forwarded method (the server
    /// that answers it declares them).
    pub outputs: Option<Vec<ArgDef>>,
}

/// One operation of a deferred HistoryRead.
#[derive(Debug)]
pub struct HistoryOp {
    pub result: u32,
    /// The node read (its continuation point is released to the backend by it).
    pub node_id: crate::types::NodeId,
    /// The fingerprint of the request's details and node, kept with a continuation point
    /// so that a continuation with other details is refused.
    pub fingerprint: u64,
}

/// What a deferred request is building.
#[derive(Debug)]
pub enum PendingKind {
    Read {
        response: Box<ReadResponse>,
        timestamps: Timestamps,
        ops: Vec<ReadOp>,
    },
    Write {
        response: Box<WriteResponse>,
        ops: Vec<WriteOp>,
    },
    Call {
        response: Box<CallResponse>,
        ops: Vec<CallOp>,
    },
    /// A HistoryRead: each result's `continuation_point` holds the backend's resume token
    /// until the shard turns it into a continuation point of `session`
    /// (`crate::services::history::finish`).
    HistoryRead {
        response: Box<HistoryReadResponse>,
        session: crate::session::SessionKey,
        ops: Vec<HistoryOp>,
    },
    /// A HistoryUpdate: `ops` are the indices of the results the backend answers.
    HistoryUpdate {
        response: Box<HistoryUpdateResponse>,
        ops: Vec<u32>,
    },
    /// A NodeManagement request the model writer edits (one operation: the whole request,
    /// answered with its response). `response` is a fault until then (`request_handle`).
    NodeManagement { response: Box<Response> },
}

impl PendingKind {
    fn op_count(&self) -> usize {
        match self {
            PendingKind::Read { ops, .. } => ops.len(),
            PendingKind::Write { ops, .. } => ops.len(),
            PendingKind::Call { ops, .. } => ops.len(),
            PendingKind::HistoryRead { ops, .. } => ops.len(),
            PendingKind::HistoryUpdate { ops, .. } => ops.len(),
            PendingKind::NodeManagement { .. } => 1,
        }
    }

    /// The response (a HistoryRead's continuation points made first, see
    /// `crate::services::history::finish`).
    pub fn into_response(self) -> Response {
        match self {
            PendingKind::Read { response, .. } => Response::Read(response),
            PendingKind::Write { response, .. } => Response::Write(response),
            PendingKind::Call { response, .. } => Response::Call(response),
            PendingKind::HistoryRead { response, .. } => Response::HistoryRead(response),
            PendingKind::HistoryUpdate { response, .. } => Response::HistoryUpdate(response),
            PendingKind::NodeManagement { response } => *response,
        }
    }
}

#[derive(Debug)]
struct Pending {
    generation: u32,
    channel_id: u32,
    request_id: u32,
    kind: PendingKind,
    /// Per operation: its deadline (mono ns) while unsettled, `None` once settled.
    deadlines: Vec<Option<u64>>,
    remaining: usize,
}

/// A finished deferred request: answer `response` to `request_id` on `channel_id`.
#[derive(Debug)]
pub struct Finished {
    pub channel_id: u32,
    pub request_id: u32,
    /// What the request built; [`PendingKind::into_response`] makes its response.
    pub kind: PendingKind,
}

/// A request [`Deferrals::begin`] just kept: makes the [`Reply`] of each of its operations.
pub struct Opened {
    hub: Arc<ChangeHub>,
    shard: usize,
    /// The request's slot and generation in the table.
    pub slot: u32,
    pub generation: u32,
}

impl Opened {
    /// The reply handle of operation `op` (`source`: the asynchronous source whose
    /// concurrency the operation holds, released when it is answered).
    pub(crate) fn reply(&self, op: u32, source: Option<Arc<AsyncSource>>) -> Reply {
        Reply::new(
            self.hub.clone(),
            self.shard,
            Target::Request {
                slot: self.slot,
                generation: self.generation,
                op,
            },
            source,
        )
    }
}

/// The shard's deferred requests. See the module documentation.
#[derive(Debug, Default)]
pub struct Deferrals {
    slots: Vec<Option<Pending>>,
    free: Vec<u32>,
    generation: u32,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    /// Operations waiting now.
    waiting: usize,
    max_waiting: usize,
}

impl Deferrals {
    pub fn new(max_waiting: usize) -> Deferrals {
        Deferrals {
            max_waiting,
            ..Deferrals::default()
        }
    }

    /// Operations that may still be handed out.
    pub fn room(&self) -> usize {
        self.max_waiting.saturating_sub(self.waiting)
    }

    /// Operations waiting now.
    pub fn waiting(&self) -> usize {
        self.waiting
    }

    /// Requests waiting now.
    pub fn requests(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Starts a request whose operations the application answers (Read of asynchronous
    /// sources, asynchronous write hooks, deferred methods): opens this shard's completion
    /// inbox (room for twice the operations that may wait), keeps the request with each
    /// operation's deadline from its timeout, and returns what makes each operation's
    /// [`Reply`]. The caller has checked [`Deferrals::room`].
    pub fn begin(
        &mut self,
        hub: &Arc<ChangeHub>,
        shard: usize,
        channel_id: u32,
        request_id: u32,
        kind: PendingKind,
        timeouts_ms: impl IntoIterator<Item = u32>,
        now: Now,
    ) -> Opened {
        hub.open_completions(shard, 2 * self.max_waiting);
        let deadlines = timeouts_ms
            .into_iter()
            .map(|ms| now.deadline_after_ms(ms as f64))
            .collect();
        let (slot, generation) = self.open(channel_id, request_id, kind, deadlines);
        Opened {
            hub: hub.clone(),
            shard,
            slot,
            generation,
        }
    }

    /// Keeps a request whose operations (`kind`'s ops, all unsettled) are about to be handed
    /// out with the given deadlines. Returns its (slot, generation).
    pub fn open(
        &mut self,
        channel_id: u32,
        request_id: u32,
        kind: PendingKind,
        deadlines: Vec<u64>,
    ) -> (u32, u32) {
        debug_assert_eq!(kind.op_count(), deadlines.len());
        self.generation = self.generation.wrapping_add(1);
        let generation = self.generation;
        let remaining = deadlines.len();
        self.waiting += remaining;
        let p = Pending {
            generation,
            channel_id,
            request_id,
            kind,
            deadlines: deadlines.iter().map(|&d| Some(d)).collect(),
            remaining,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                if let Some(x) = self.slots.get_mut(s as usize) {
                    *x = Some(p);
                }
                s
            }
            None => {
                self.slots.push(Some(p));
                (self.slots.len() - 1) as u32
            }
        };
        if let Some(&d) = deadlines.iter().min() {
            self.heap.push(Reverse((d, slot, generation)));
        }
        (slot, generation)
    }

    /// The earliest deadline of an unsettled operation (may be early, never late).
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((d, _, _))| *d)
    }

    /// Settles operation `op` of the request in `slot`; a stale answer (its request
    /// finished, or the operation timed out) is ignored. Returns the request when this was
    /// its last operation.
    pub fn settle(
        &mut self,
        space: &AddressSpace,
        slot: u32,
        generation: u32,
        op: u32,
        outcome: Outcome,
        now: Now,
    ) -> Option<Finished> {
        let p = self.slots.get_mut(slot as usize)?.as_mut()?;
        if p.generation != generation {
            return None;
        }
        let d = p.deadlines.get_mut(op as usize)?;
        d.take()?;
        apply(space, &mut p.kind, op as usize, outcome, now);
        p.remaining -= 1;
        self.waiting -= 1;
        if p.remaining == 0 {
            return self.finish(slot);
        }
        None
    }

    /// Answers BadTimeout for every operation whose deadline passed; returns the requests
    /// that are now complete.
    pub fn expire(&mut self, space: &AddressSpace, now: Now, out: &mut Vec<Finished>) {
        while let Some(&Reverse((d, slot, generation))) = self.heap.peek() {
            if d > now.mono_ns {
                break;
            }
            self.heap.pop();
            let Some(Some(p)) = self.slots.get_mut(slot as usize) else {
                continue;
            };
            if p.generation != generation {
                continue;
            }
            let mut next: Option<u64> = None;
            for op in 0..p.deadlines.len() {
                match p.deadlines.get(op).copied().flatten() {
                    Some(dl) if dl <= now.mono_ns => {
                        if let Some(x) = p.deadlines.get_mut(op) {
                            *x = None;
                        }
                        apply(
                            space,
                            &mut p.kind,
                            op,
                            Outcome::Status(StatusCode::BadTimeout),
                            now,
                        );
                        p.remaining -= 1;
                        self.waiting -= 1;
                    }
                    Some(dl) => next = Some(next.map_or(dl, |n: u64| n.min(dl))),
                    None => {}
                }
            }
            if p.remaining == 0 {
                if let Some(f) = self.finish(slot) {
                    out.push(f);
                }
            } else if let Some(n) = next {
                self.heap.push(Reverse((n, slot, generation)));
            }
        }
        if self.heap.len() > 2 * self.requests() + 64 {
            let mut fresh = BinaryHeap::new();
            for (i, p) in self.slots.iter().enumerate() {
                if let Some(p) = p {
                    if let Some(d) = p.deadlines.iter().flatten().min() {
                        fresh.push(Reverse((*d, i as u32, p.generation)));
                    }
                }
            }
            self.heap = fresh;
        }
    }

    fn finish(&mut self, slot: u32) -> Option<Finished> {
        let p = self.slots.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        Some(Finished {
            channel_id: p.channel_id,
            request_id: p.request_id,
            kind: p.kind,
        })
    }
}

/// Puts one operation's outcome into the response being built.
fn apply(space: &AddressSpace, kind: &mut PendingKind, op: usize, outcome: Outcome, now: Now) {
    match kind {
        PendingKind::NodeManagement { response } => {
            *response = match outcome {
                Outcome::Response(r) => r,
                Outcome::Status(s) => Box::new(crate::response::fault(
                    response.response_header().request_handle,
                    bad_or_internal(s),
                    now,
                )),
                _ => Box::new(crate::response::fault(
                    response.response_header().request_handle,
                    StatusCode::BadInternalError,
                    now,
                )),
            };
        }
        PendingKind::HistoryRead { response, ops, .. } => apply_history(response, ops, op, outcome),
        PendingKind::HistoryUpdate { response, ops } => {
            let Some(&i) = ops.get(op) else { return };
            let result = match outcome {
                Outcome::HistoryUpdate(r) => *r,
                Outcome::Status(s) => HistoryUpdateResult {
                    status_code: bad_or_internal(s),
                    ..HistoryUpdateResult::default()
                },
                _ => HistoryUpdateResult {
                    status_code: StatusCode::BadInternalError,
                    ..HistoryUpdateResult::default()
                },
            };
            if let Some(r) = response.results.get_mut(i as usize) {
                *r = result;
            }
        }
        PendingKind::Read {
            response,
            timestamps,
            ops,
        } => {
            let Some(o) = ops.get(op) else { return };
            let dv = match outcome {
                Outcome::Value(v) => {
                    finish_async_value(v, &o.encoding, o.range.as_ref(), *timestamps, now)
                }
                Outcome::Status(s) => finish_async_value(
                    crate::types::DataValue::status(bad_or_internal(s)),
                    &o.encoding,
                    None,
                    *timestamps,
                    now,
                ),
                _ => crate::types::DataValue::status(StatusCode::BadInternalError),
            };
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = dv;
            }
        }
        PendingKind::Write { response, ops } => {
            let Some(o) = ops.get(op) else { return };
            let status = match outcome {
                Outcome::Status(s) if s.is_good() => commit_write(space, &o.prepared),
                Outcome::Status(s) => bad_or_internal(s),
                _ => StatusCode::BadInternalError,
            };
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = status;
            }
        }
        PendingKind::Call { response, ops } => {
            let Some(o) = ops.get(op) else { return };
            let result = match outcome {
                Outcome::Outputs(out)
                    if o.outputs.as_ref().is_none_or(|decl| {
                        out.len() == decl.len() && decl.iter().zip(&out).all(|(d, v)| d.accepts(v))
                    }) =>
                {
                    CallMethodResult {
                        status_code: StatusCode::Good,
                        input_argument_results: vec![StatusCode::Good; o.inputs],
                        input_argument_diagnostic_infos: Vec::new(),
                        output_arguments: out,
                    }
                }
                Outcome::Status(s) if s.is_bad() || s.is_uncertain() => CallMethodResult {
                    status_code: s,
                    input_argument_results: vec![StatusCode::Good; o.inputs],
                    ..Default::default()
                },
                _ => CallMethodResult {
                    status_code: StatusCode::BadInternalError,
                    ..Default::default()
                },
            };
            if let Some(r) = response.results.get_mut(o.result as usize) {
                *r = result;
            }
        }
    }
}

/// Puts one HistoryRead operation's outcome into the response.
fn apply_history(
    response: &mut HistoryReadResponse,
    ops: &[HistoryOp],
    op: usize,
    outcome: Outcome,
) {
    let Some(o) = ops.get(op) else { return };
    let result = match outcome {
        Outcome::History(r) => *r,
        Outcome::Status(s) => HistoryReadResult {
            status_code: bad_or_internal(s),
            ..HistoryReadResult::default()
        },
        _ => HistoryReadResult {
            status_code: StatusCode::BadInternalError,
            ..HistoryReadResult::default()
        },
    };
    if let Some(r) = response.results.get_mut(o.result as usize) {
        *r = result;
    }
}

fn bad_or_internal(s: StatusCode) -> StatusCode {
    if s.is_bad() {
        s
    } else {
        StatusCode::BadInternalError
    }
}
