//! The store behind HistoryRead: [`Historian`] is the server's
//! [`uaring_core::history::HistoryBackend`] and the change recorder of the historized
//! Variables.
//!
//! Threads (none of them a shard): the store's writer thread ([`super::start_writer`]),
//! and `read_threads` reader threads that answer HistoryRead operations from a bounded
//! job queue. A shard hands an operation over with one `try_send` and never waits; a full
//! queue answers the operation BadResourceUnavailable at once.
//!
//! What is historized: every Variable with Historizing true and a stored value (the
//! library's [`crate::VariableDef::historize`], a NodeSet's Historizing attribute), by
//! change: every value stored in it (a client's Write, an application's push) reaches the
//! store through the change path's recorder, with the server's time of the store as its
//! ServerTimestamp. A full ingest queue drops the sample and counts it
//! (`uaring_history_dropped_total`).
//!
//! Variables added while the server runs (`RunTime`: AddNodes with Historizing, the
//! library, the `[history] nodes` patterns) are historized the same way, at most
//! `max_run_time_historized` at once; their series are made by the registrar thread
//! (`uaring-hreg`), so no shard waits for the store (docs/History.md, "Variables added while
//! serving").

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, OnceLock};

use uaring_core::address_space::change::ChangeRecorder;
use uaring_core::address_space::ClassAttributes;
use uaring_core::encoding::{Encode, UaStructure};
use uaring_core::events::bus::EventRecorder;
use uaring_core::events::Event;
use uaring_core::generated::types::{
    HistoryData, HistoryEvent, HistoryEventFieldList, HistoryReadResult, TimestampsToReturn,
};
use uaring_core::generated::types::{
    HistoryModifiedData, HistoryUpdateResult, HistoryUpdateType, ModificationInfo,
    PerformUpdateType,
};
use uaring_core::history::aggregate::{self, Aggregate, AggregateConfig};
use uaring_core::history::{
    HistoryBackend, HistoryCapabilities, HistoryReadOp, HistoryReply, HistoryUpdateOp,
    HistoryUpdateReply, ReadDetails, UpdateDetails,
};
use uaring_core::shared::ServerShared;
use uaring_core::types::{
    DataValue, DateTime, ExtensionObject, ExtensionObjectBody, NodeId, StatusCode, UaString,
    Variant,
};

use super::archive::Archive;
use super::postgres::{PgArchive, PgConfig, PgWriters, PostgresConfig};
use super::{Pushed, Resume, Sample, SeriesId, Store, StoreError};

use uaring_core::address_space::event_notifier;

/// Most raw values one processed operation reads to compute its answer (about 60 MB held
/// by the reader thread while it computes; more is BadTooManyOperations: ask for a shorter
/// range).
const MAX_RAW_FOR_PROCESSING: usize = 1_000_000;

/// The server's history: the store, its ingest, the historized nodes, the readers.
pub struct Historian {
    /// Where the series are: the embedded store or the database.
    archive: Arc<dyn Archive>,
    backend: Backend,
    ingest: super::Ingest,
    /// Historized nodes (filled once the address space is built).
    nodes: OnceLock<Nodes>,
    jobs: SyncSender<Job>,
    /// HistoryUpdate operations, for the one updater thread (`uaring-hupdate`): updates run
    /// one at a time, in the order they came, so the entries of a request (and requests
    /// after one another) apply in order, and no two edit a series at once.
    updates: SyncSender<Job>,
    /// The reader threads, joined by [`Historian::shutdown`] (a reader holds the historian,
    /// and so the store and its lock, while it answers).
    readers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The server's shared state (the address space: event types), set by attach; weak,
    /// since the server's state holds the historian.
    shared: OnceLock<std::sync::Weak<ServerShared>>,
    /// The series of each node's modified values (`modified:<node>`), made by the first
    /// HistoryUpdate of the node; `None`: looked up by a read, and there is none (yet).
    /// One entry per historized node at most.
    modified: Mutex<HashMap<NodeId, Option<SeriesId>>>,
    /// Operations answered by the readers, and refused for a full read queue.
    reads: AtomicU64,
    reads_refused: AtomicU64,
    /// `[history] nodes` and `max_run_time_historized`, for Variables added while the
    /// server runs (read by [`Historian::attach`]).
    run_time_config: Mutex<(Vec<String>, usize)>,
    /// The run-time historized Variables (made by attach).
    run_time: OnceLock<RunTime>,
    /// The registrar thread (`uaring-hreg`), joined by [`Historian::shutdown`].
    registrar: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Nice value of the history threads.
    nice: i32,
    /// Where the history threads run (`runtime.background_cpus`).
    cpus: crate::background::BackgroundCpus,
    /// `[[history.sampled]]`, for [`Historian::attach`].
    sampled_config: Mutex<Vec<SampledConfig>>,
    /// The Variables the application historizes on an interval
    /// ([`crate::VariableDef::historize_every`]): NodeId and interval (ms).
    sampled_nodes: Mutex<Vec<(NodeId, u32)>>,
    /// `[[history.collection]]` as configured (set at open), and as applied from attach on.
    collection_config: Mutex<Vec<super::collection::CollectionConfig>>,
    rules: OnceLock<super::collection::Rules>,
    /// The sampler thread's inbox, once it runs.
    sampler_tx: std::sync::OnceLock<std::sync::mpsc::Sender<SamplerMsg>>,
    /// The sampler thread (`uaring-hsample`) and the end of its stop channel, stopped by
    /// [`Historian::shutdown`].
    sampler: Mutex<
        Option<(
            std::sync::mpsc::Sender<SamplerMsg>,
            std::thread::JoinHandle<()>,
        )>,
    >,
}

/// `[[history.sampled]]`: Variables (the patterns of `[history] nodes`, matched at start and
/// against Variables added while the server runs) historized on a sampling interval: every
/// `interval_ms` the sampler thread reads each one's value (a computed one's computed, an
/// asynchronous one's asked of the application) and stores it when it differs from the last one stored (status, value or
/// SourceTimestamp), so a Variable written faster than the interval keeps one value an
/// interval, and one that does not change keeps none.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct SampledConfig {
    pub nodes: Vec<String>,
    pub interval_ms: u32,
}

/// Bounds of `[[history.sampled]] interval_ms`.
pub const SAMPLED_INTERVAL_MIN_MS: u32 = 10;
pub const SAMPLED_INTERVAL_MAX_MS: u32 = 86_400_000;

/// Variables sampled on one interval (the sampler thread's).
struct SampleGroup {
    interval_ns: u64,
    /// When the next pass is due (CLOCK_MONOTONIC ns; 0: at once).
    next_ns: u64,
    nodes: Vec<SampledNode>,
}

struct SampledNode {
    index: u32,
    /// The node's generation at start: a node deleted (its index taken again) is dropped.
    generation: u32,
    /// The last value stored (of an asynchronous Variable: the last one answered and
    /// stored).
    last: Option<DataValue>,
    /// An asynchronous Variable's read is out at the application.
    reading: bool,
    /// A Variable recorded by change, here only to be kept again when its
    /// `[[history.collection]]` MaxTimeInterval passes with nothing kept.
    refresh: bool,
}

/// Puts `node` in the group of `interval_ns` (made when there is none).
fn add_to_group(groups: &mut Vec<SampleGroup>, interval_ns: u64, node: SampledNode) {
    match groups.iter_mut().find(|g| g.interval_ns == interval_ns) {
        Some(g) => g.nodes.push(node),
        None => groups.push(SampleGroup {
            interval_ns,
            next_ns: crate::clock::mono_ns() + interval_ns,
            nodes: vec![node],
        }),
    }
}

/// How often the sampler looks whether a MaxTimeInterval of `max_ticks` (100 ns) passed:
/// a tenth of it (at least 10 ms), so a value is kept again at most 10 % late.
fn refresh_interval_ns(max_ticks: i64) -> u64 {
    (max_ticks.max(0) as u64 * 100 / 10).max(10_000_000)
}

/// What reaches the sampler thread.
enum SamplerMsg {
    /// An asynchronous Variable's answer: node `index` of group `group`.
    Answer {
        group: usize,
        index: u32,
        outcome: uaring_core::address_space::app::Outcome,
    },
    /// A Variable historized while the server runs that `[[history.sampled]]` names, with
    /// the value stored as its first sample.
    Add {
        index: u32,
        generation: u32,
        interval_ns: u64,
        last: Option<DataValue>,
        refresh: bool,
    },
    Stop,
}

/// The sampler thread: each group's Variables every interval, until told to stop. A stored
/// Variable's value is read from its cell, a computed one's computed on this thread, an
/// asynchronous one's asked of the application (at most one read out per Variable; its
/// answer comes back through `inbox`).
fn sampler_loop(
    h: &std::sync::Weak<Historian>,
    mut groups: Vec<SampleGroup>,
    inbox: &Receiver<SamplerMsg>,
    answers: &std::sync::mpsc::Sender<SamplerMsg>,
) {
    use uaring_core::address_space::app::Outcome;
    use uaring_core::address_space::store::SourceView;
    loop {
        let now = crate::clock::mono_ns();
        let next = groups.iter().map(|g| g.next_ns).min().unwrap_or(u64::MAX);
        if next > now {
            let wait = std::time::Duration::from_nanos(next - now);
            match inbox.recv_timeout(wait) {
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Ok(SamplerMsg::Answer {
                    group,
                    index,
                    outcome,
                }) => {
                    let Some(h) = h.upgrade() else { return };
                    let Some(n) = groups
                        .get_mut(group)
                        .and_then(|g| g.nodes.iter_mut().find(|n| n.index == index))
                    else {
                        continue;
                    };
                    n.reading = false;
                    let dv = match outcome {
                        Outcome::Value(dv) => dv,
                        // A failed read is kept as its status (at the server's time), once
                        // while it lasts.
                        Outcome::Status(s) => DataValue {
                            status: Some(s),
                            ..DataValue::default()
                        },
                        _ => DataValue {
                            status: Some(StatusCode::BadInternalError),
                            ..DataValue::default()
                        },
                    };
                    store_if_new(&h, n, dv);
                }
                Ok(SamplerMsg::Add {
                    index,
                    generation,
                    interval_ns,
                    last,
                    refresh,
                }) => add_to_group(
                    &mut groups,
                    interval_ns,
                    SampledNode {
                        index,
                        generation,
                        last,
                        reading: false,
                        refresh,
                    },
                ),
                _ => return,
            }
            continue;
        }
        let Some(h) = h.upgrade() else { return };
        let Some(shared) = h.shared.get().and_then(std::sync::Weak::upgrade) else {
            return;
        };
        let space = shared.model.load();
        for (g_ix, g) in groups
            .iter_mut()
            .enumerate()
            .filter(|(_, g)| g.next_ns <= now)
        {
            g.next_ns = now.max(g.next_ns) + g.interval_ns;
            g.nodes.retain_mut(|n| {
                let Some(node) = space.node_at_generation(n.index, n.generation) else {
                    return false;
                };
                let Some(v) = node.as_variable() else {
                    return false;
                };
                if n.refresh {
                    keep_if_overdue(&h, n.index, || v.cell().map(|c| c.load()));
                    return true;
                }
                let dv = match v.source() {
                    SourceView::Cell(c) => c.load(),
                    SourceView::Computed(c) => c.value(crate::clock::now()),
                    SourceView::Async(a) => {
                        if !n.reading {
                            let (tx, index) = (answers.clone(), n.index);
                            // Skipped while the application has max_in_flight reads out.
                            n.reading = a.start_read(node.node_id(), move |outcome| {
                                let _ = tx.send(SamplerMsg::Answer {
                                    group: g_ix,
                                    index,
                                    outcome,
                                });
                            });
                        }
                        return true;
                    }
                    SourceView::Dynamic(_) => return false,
                };
                store_if_new(&h, n, dv);
                true
            });
        }
    }
}

/// Stores `dv` as `n`'s sample when it differs from the last one stored (status, value or
/// SourceTimestamp), or, the same, at the server's time when its `[[history.collection]]`
/// MaxTimeInterval passed with nothing kept.
fn store_if_new(h: &Historian, n: &mut SampledNode, dv: DataValue) {
    let same = n.last.as_ref().is_some_and(|l| {
        l.status == dv.status && l.value == dv.value && l.source_timestamp == dv.source_timestamp
    });
    if !same {
        ChangeRecorder::record(h, n.index, &dv);
        n.last = Some(dv);
    } else {
        keep_if_overdue(h, n.index, || Some(dv));
    }
}

/// Keeps the value `value` gives again, at the server's time, when the Variable at `index`
/// had nothing kept for its `[[history.collection]]` MaxTimeInterval.
fn keep_if_overdue(h: &Historian, index: u32, value: impl FnOnce() -> Option<DataValue>) {
    let now = crate::clock::utc_now();
    if !h.overdue(index, now.0) {
        return;
    }
    if let Some(mut dv) = value() {
        dv.source_timestamp = Some(now);
        ChangeRecorder::record(h, index, &dv);
    }
}

/// Starts a history thread named `name`: on the background CPUs (`cpus`), at the history
/// threads' `nice` value, running `run`.
fn spawn_history_thread(
    name: String,
    cpus: crate::background::BackgroundCpus,
    nice: i32,
    run: impl FnOnce() + Send + 'static,
) -> Result<std::thread::JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || {
            cpus.enter(&name);
            crate::handshake_pool::set_nice(nice);
            run()
        })
        .map_err(StoreError::Io)
}

/// Default of `[history] max_run_time_historized`.
pub const DEFAULT_MAX_RUN_TIME_HISTORIZED: usize = 1000;

/// Values of a run-time historized Variable kept while its series is being made (by the
/// registrar thread: a new series is made durable before its first value); more are
/// dropped, counted and marked like a full ingest queue's.
const PENDING_SAMPLES: usize = 32;

/// How long a reader waits for the series of a Variable historized a moment ago.
const REGISTRATION_WAIT_MS: u64 = 2000;

/// A free run-time place; a series not made yet.
const NONE: u32 = u32::MAX;

/// The Variables historized while the server runs (AddNodes with Historizing, the
/// library, `[history] nodes` patterns): at most `slots.len()`
/// (`max_run_time_historized`), each in a place of its own. Shards look a node up by its
/// index without a lock; the series is made by the registrar thread (`uaring-hreg`), so
/// nothing on a shard waits for the store.
struct RunTime {
    patterns: Vec<Pattern>,
    /// The `[[history.sampled]]` entries: their patterns and interval (ns). A Variable they
    /// name is sampled, not recorded by change.
    sampled: Vec<(Vec<Pattern>, u64)>,
    /// Places taken (reserved or in use), ≤ `slots.len()`.
    taken: std::sync::atomic::AtomicUsize,
    /// By node index: 0, or 1 + the place of the run-time historized Variable there.
    by_index: Box<[std::sync::atomic::AtomicU32]>,
    slots: Box<[RunTimeSlot]>,
    registrations: SyncSender<Registration>,
    /// Variables the patterns named that were added without history (the bound was reached)
    /// and series that could not be made.
    refused: AtomicU64,
    failed: AtomicU64,
}

struct RunTimeSlot {
    /// The node's index (`NONE`: the place is free).
    node_index: std::sync::atomic::AtomicU32,
    /// Its series (`NONE`: being made; values wait in `pending`).
    series: std::sync::atomic::AtomicU32,
    /// Taken anew each time the place is: a registration for an earlier node is ignored.
    ticket: AtomicU64,
    /// Recorders between looking at `series` and queueing in `pending`.
    inflight: std::sync::atomic::AtomicU32,
    pending: crossbeam_queue::ArrayQueue<Sample>,
    /// The earliest SourceTimestamp dropped since the series last got a value through.
    lost: std::sync::atomic::AtomicI64,
    stepped: std::sync::atomic::AtomicBool,
    /// Its `[[history.collection]]` rule's gate (disarmed: every value kept).
    gate: super::collection::Gate,
}

/// A series to make, for the registrar thread.
struct Registration {
    slot: usize,
    ticket: u64,
    node_id: NodeId,
}

/// The backend behind the archive, with its writer threads.
enum Backend {
    Embedded(Arc<Store>, Mutex<Option<super::WriterHandle>>),
    Postgres(Arc<PgArchive>, Mutex<Option<PgWriters>>),
}

/// One operation for a reader thread.
enum Job {
    Read(HistoryReadOp, HistoryReply),
    Update(HistoryUpdateOp, HistoryUpdateReply),
    /// Ends the reader that takes it.
    Stop,
}

struct Nodes {
    by_id: HashMap<NodeId, SeriesId>,
    /// Event series by notifier (the Server object, and notifiers whose EventNotifier
    /// has HistoryRead).
    events: HashMap<NodeId, SeriesId>,
    /// Series by node index (dense: most historized nodes of a server are near each other).
    by_index: HashMap<u32, SeriesId>,
    /// Stepped interpolation (non-float values) by series.
    stepped: HashMap<SeriesId, bool>,
    /// The `[[history.collection]]` gates of the Variables a rule applies to, by series.
    gates: HashMap<SeriesId, super::collection::Gate>,
    /// By series id: the earliest SourceTimestamp a full ingest queue dropped since the
    /// series last got a sample through ([`NOTHING_LOST`]: none).
    lost: Vec<std::sync::atomic::AtomicI64>,
}

/// Values a delete keeps as modified values per page (so a large delete holds a page, not
/// the range).
const MODIFIED_PAGE: usize = 10_000;

/// A raw read reserves room for at most this many samples up front (more grow the vector).
const RAW_RESERVE_MAX: usize = 1 << 20;

/// A reader thread keeps the buffers of its raw and processed reads for the next read
/// when each is at most this large (bytes of capacity; a larger one is freed after its
/// read), and frees them once it has had no work for [`READ_BUFFERS_IDLE`]: with the
/// allocator's mmap threshold pinned (docs/Limits.md) a fresh buffer of a large read is
/// fresh pages to fault in and give back at every read, a fifth of a 100,000-value raw
/// read's server CPU and a third of a processed read's of a day at 1 Hz.
const READ_BUFFER_KEEP_BYTES: usize = 8 << 20;

/// A reader thread without work for this long frees its kept buffers.
const READ_BUFFERS_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

type Kept<T> = std::thread::LocalKey<std::cell::Cell<Vec<T>>>;

thread_local! {
    /// The reader thread's raw samples of a read (empty between reads).
    static SAMPLES: std::cell::Cell<Vec<Sample>> = const { std::cell::Cell::new(Vec::new()) };
    /// The reader thread's raw values behind a processed read (empty between reads).
    static RAW_VALUES: std::cell::Cell<Vec<DataValue>> =
        const { std::cell::Cell::new(Vec::new()) };
}

/// Runs `read` with the thread's buffer `kept` (empty), then empties it and keeps it for the
/// next read unless it grew past [`READ_BUFFER_KEEP_BYTES`].
fn with_kept<T: 'static, R>(kept: &'static Kept<T>, read: impl FnOnce(&mut Vec<T>) -> R) -> R {
    let mut buf = kept.take();
    buf.clear();
    let r = read(&mut buf);
    buf.clear();
    if buf.capacity() * std::mem::size_of::<T>() <= READ_BUFFER_KEEP_BYTES {
        kept.set(buf);
    }
    r
}

/// Frees the thread's kept read buffers (an idle reader).
fn free_read_buffers() {
    SAMPLES.take();
    RAW_VALUES.take();
}

/// Does the thread keep a read buffer?
fn holds_read_buffers() -> bool {
    fn holds<T>(kept: &'static Kept<T>) -> bool {
        let buf = kept.take();
        let held = buf.capacity() > 0;
        kept.set(buf);
        held
    }
    holds(&SAMPLES) || holds(&RAW_VALUES)
}

/// Bytes a raw value's encoding is reserved (a scalar Double with its two timestamps and a
/// status: 31); a bigger value grows the body.
const RAW_VALUE_BYTES: usize = 32;

/// A modified value as the sample kept for it: the value (with its timestamps and status)
/// and its ModificationInfo, in OPC UA Binary, at the value's SourceTimestamp.
fn modification(old: &Sample, info: &ModificationInfo) -> Sample {
    use uaring_core::encoding::Encode;
    let mut b = Vec::new();
    plain(old.clone()).encode(&mut b);
    info.encode(&mut b);
    Sample {
        source_ts: old.source_ts,
        server_ts: info.modification_time.0,
        status: 0,
        value: Variant::ByteString(b.into()),
    }
}

/// [`modification`] read back.
fn unmodification(s: &Sample) -> Option<(DataValue, ModificationInfo)> {
    use uaring_core::encoding::{Decode, Decoder};
    let Variant::ByteString(b) = &s.value else {
        return None;
    };
    let mut d = Decoder::new(
        b.as_bytes(),
        uaring_core::DecodeLimits {
            max_decoded_size: 4 << 20,
            ..uaring_core::DecodeLimits::default()
        },
    );
    let dv = DataValue::decode(&mut d).ok()?;
    let info = ModificationInfo::decode(&mut d).ok()?;
    Some((dv, info))
}

/// What one select clause of an event update names.
#[derive(Debug, Clone, PartialEq)]
enum Slot {
    EventId,
    EventType,
    SourceNode,
    SourceName,
    Time,
    ReceiveTime,
    Message,
    Severity,
    ConditionId,
    /// A type-specific field, by its browse path.
    Field(Vec<uaring_core::types::QualifiedName>),
    /// Neither the Value of a field nor the ConditionId: nothing is kept of it.
    Ignored,
}

impl Slot {
    fn of(sao: &uaring_core::generated::types::SimpleAttributeOperand) -> Slot {
        use uaring_core::events::base_fields as b;
        const VALUE: u32 = 13;
        const NODE_ID: u32 = 1;
        if sao.browse_path.is_empty() {
            return if sao.attribute_id == NODE_ID {
                Slot::ConditionId
            } else {
                Slot::Ignored
            };
        }
        if sao.attribute_id != VALUE {
            return Slot::Ignored;
        }
        if let [one] = sao.browse_path.as_slice() {
            if one.namespace_index == 0 {
                match one.name.as_str() {
                    b::EVENT_ID => return Slot::EventId,
                    b::EVENT_TYPE => return Slot::EventType,
                    b::SOURCE_NODE => return Slot::SourceNode,
                    b::SOURCE_NAME => return Slot::SourceName,
                    b::TIME => return Slot::Time,
                    b::RECEIVE_TIME => return Slot::ReceiveTime,
                    b::MESSAGE => return Slot::Message,
                    b::SEVERITY => return Slot::Severity,
                    _ => {}
                }
            }
        }
        Slot::Field(sao.browse_path.clone())
    }
}

/// An event of a HistoryUpdate, from its select clauses and fields. `Err` is that entry's
/// status.
fn build_event(
    slots: &[Slot],
    fields: &[Variant],
    space: &uaring_core::address_space::AddressSpace,
    now: DateTime,
) -> Result<Event, StatusCode> {
    if fields.len() != slots.len() {
        return Err(StatusCode::BadInvalidArgument);
    }
    let mut ev = Event {
        event_id: uaring_core::ByteString::null(),
        event_type: NodeId::NULL,
        type_chain: Arc::from(Vec::new()),
        source_node: NodeId::NULL,
        source_name: UaString::null(),
        time: DateTime(0),
        receive_time: now,
        message: uaring_core::types::LocalizedText::default(),
        severity: 500,
        condition_id: None,
        fields: Vec::new(),
        notifiers: Arc::from(Vec::new()),
    };
    let bad = StatusCode::BadInvalidArgument;
    for (slot, v) in slots.iter().zip(fields) {
        if matches!(v, Variant::Empty) {
            continue;
        }
        match (slot, v) {
            (Slot::EventId, Variant::ByteString(b)) => ev.event_id = b.clone(),
            (Slot::EventType, Variant::NodeId(n)) => ev.event_type = (**n).clone(),
            (Slot::SourceNode, Variant::NodeId(n)) => ev.source_node = (**n).clone(),
            (Slot::SourceName, Variant::String(s)) => ev.source_name = s.clone(),
            (Slot::Time, Variant::DateTime(t)) => ev.time = *t,
            (Slot::ReceiveTime, Variant::DateTime(t)) => ev.receive_time = *t,
            (Slot::Message, Variant::LocalizedText(t)) => ev.message = (**t).clone(),
            (Slot::Severity, Variant::UInt16(x)) if (1..=1000).contains(x) => ev.severity = *x,
            (Slot::ConditionId, Variant::NodeId(n)) => ev.condition_id = Some((**n).clone()),
            (Slot::Field(path), v) => ev.fields.push(uaring_core::events::EventField {
                path: path.clone(),
                value: v.clone(),
            }),
            (Slot::Ignored, _) => {}
            _ => return Err(bad),
        }
    }
    if ev.time.0 == 0 || ev.event_type.is_null() {
        return Err(StatusCode::BadArgumentsMissing);
    }
    // The type must be an event type this server knows: BaseEventType or below it.
    let base = NodeId::ns0(uaring_core::events::ids::BASE_EVENT_TYPE);
    let chain = uaring_core::events::type_chain(space, &ev.event_type);
    if space.node_index(&ev.event_type).is_none()
        || !(ev.event_type == base || space.supertype_of(&ev.event_type).is_some())
    {
        return Err(StatusCode::BadTypeDefinitionInvalid);
    }
    ev.type_chain = chain;
    Ok(ev)
}

/// A new EventId for an inserted event that came without one.
fn new_event_id() -> uaring_core::ByteString {
    let mut b = [0u8; uaring_core::events::EVENT_ID_LEN];
    if getrandom::getrandom(&mut b).is_err() {
        let t = crate::clock::utc_now().0.to_le_bytes();
        b[..8].copy_from_slice(&t);
    }
    b.to_vec().into()
}

/// An event as its sample in a notifier's series.
fn event_sample(ev: &Event) -> Sample {
    let mut b = Vec::new();
    uaring_core::events::record::encode(ev, &mut b);
    Sample {
        source_ts: ev.time.0,
        server_ts: ev.receive_time.0,
        status: 0,
        value: Variant::ByteString(b.into()),
    }
}

/// The event a notifier's sample holds.
fn event_of(s: &Sample) -> Option<Event> {
    let Variant::ByteString(b) = &s.value else {
        return None;
    };
    uaring_core::events::record::decode(b.as_bytes(), uaring_core::DecodeLimits::default()).ok()
}

/// No sample of the series was dropped.
const NOTHING_LOST: i64 = i64::MAX;

impl std::fmt::Debug for Historian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Historian")
            .field("nodes", &self.nodes.get().map_or(0, |n| n.by_id.len()))
            .finish()
    }
}

impl Historian {
    /// Opens the store and starts its writer and `read_threads` readers (a job queue of
    /// `read_queue` operations).
    pub fn start(
        config: super::StoreConfig,
        read_threads: usize,
        read_queue: usize,
    ) -> Result<Arc<Historian>, StoreError> {
        let (nice, cpus) = (config.nice, config.cpus.clone());
        let store = Store::open(config)?;
        let (ingest, writer) = super::start_writer(store.clone())?;
        let archive: Arc<dyn Archive> = store.clone();
        Self::with_readers(
            archive,
            Backend::Embedded(store, Mutex::new(Some(writer))),
            ingest,
            (nice, cpus),
            read_threads,
            read_queue,
        )
    }

    /// Starts the PostgreSQL backend: its writer threads and `read_threads` readers. Nothing
    /// waits for the database: the writers connect (and keep trying) on their own.
    pub fn start_postgres(
        config: PgConfig,
        read_threads: usize,
        read_queue: usize,
    ) -> Result<Arc<Historian>, StoreError> {
        let (nice, cpus) = (config.nice, config.cpus.clone());
        let pg = PgArchive::new(config);
        let cfg = pg.config().clone();
        let (ingest, queue, bell) = super::Ingest::new(
            cfg.queue_capacity,
            cfg.on_full,
            pg.dropped_counter(),
            pg.writer_count(),
        );
        let writers = super::postgres::start_writers(&pg, queue, bell)?;
        let archive: Arc<dyn Archive> = pg.clone();
        Self::with_readers(
            archive,
            Backend::Postgres(pg, Mutex::new(Some(writers))),
            ingest,
            (nice, cpus),
            read_threads,
            read_queue,
        )
    }

    /// Starts the backend `[history]` chooses.
    pub fn open(config: &HistoryConfig) -> Result<Arc<Historian>, StoreError> {
        let h = Self::open_backend(config)?;
        h.set_run_time(config.nodes.clone(), config.max_run_time_historized);
        if let Ok(mut c) = h.sampled_config.lock() {
            c.clone_from(&config.sampled);
        }
        if let Ok(mut c) = h.collection_config.lock() {
            c.clone_from(&config.collection);
        }
        Ok(h)
    }

    /// Sets the Variables the application historizes on a sampling interval (NodeId,
    /// interval in ms); before [`Historian::attach`], which reads it.
    pub fn sample_nodes(&self, nodes: Vec<(NodeId, u32)>) {
        if let Ok(mut c) = self.sampled_nodes.lock() {
            *c = nodes;
        }
    }

    /// Sets what Variables added while the server runs are historized by (the `[history]
    /// nodes` patterns) and how many at most; before [`Historian::attach`], which reads it.
    pub fn set_run_time(&self, patterns: Vec<String>, max: usize) {
        if let Ok(mut c) = self.run_time_config.lock() {
            *c = (patterns, max);
        }
    }

    fn open_backend(config: &HistoryConfig) -> Result<Arc<Historian>, StoreError> {
        match config.backend.as_str() {
            "postgres" => Self::start_postgres(
                config.pg_config().map_err(StoreError::Config)?,
                config.read_threads,
                config.read_queue,
            ),
            _ => Self::start(
                config.store_config().map_err(StoreError::Config)?,
                config.read_threads,
                config.read_queue,
            ),
        }
    }

    fn with_readers(
        archive: Arc<dyn Archive>,
        backend: Backend,
        ingest: super::Ingest,
        (nice, cpus): (i32, crate::background::BackgroundCpus),
        read_threads: usize,
        read_queue: usize,
    ) -> Result<Arc<Historian>, StoreError> {
        let (jobs, rx) = sync_channel::<Job>(read_queue.max(1));
        let (updates, updates_rx) = sync_channel::<Job>(read_queue.max(1));
        let h = Arc::new(Historian {
            archive,
            backend,
            ingest,
            nodes: OnceLock::new(),
            jobs,
            updates,
            shared: OnceLock::new(),
            modified: Mutex::new(HashMap::new()),
            readers: Mutex::new(Vec::new()),
            reads: AtomicU64::new(0),
            reads_refused: AtomicU64::new(0),
            run_time_config: Mutex::new((Vec::new(), DEFAULT_MAX_RUN_TIME_HISTORIZED)),
            run_time: OnceLock::new(),
            registrar: Mutex::new(None),
            sampled_config: Mutex::new(Vec::new()),
            sampled_nodes: Mutex::new(Vec::new()),
            sampler_tx: std::sync::OnceLock::new(),
            collection_config: Mutex::new(Vec::new()),
            rules: OnceLock::new(),
            sampler: Mutex::new(None),
            nice,
            cpus: cpus.clone(),
        });
        let rx = Arc::new(Mutex::new(rx));
        let mut readers = Vec::with_capacity(read_threads.max(1));
        for i in 0..read_threads.max(1) {
            let h2 = Arc::downgrade(&h);
            let rx: Arc<Mutex<Receiver<_>>> = rx.clone();
            readers.push(spawn_history_thread(
                format!("uaring-hread-{i}"),
                cpus.clone(),
                nice,
                move || reader_loop(&h2, &rx),
            )?);
        }
        let h2 = Arc::downgrade(&h);
        let updates_rx = Arc::new(Mutex::new(updates_rx));
        readers.push(spawn_history_thread(
            "uaring-hupdate".into(),
            cpus,
            nice,
            move || reader_loop(&h2, &updates_rx),
        )?);
        if let Ok(mut r) = h.readers.lock() {
            *r = readers;
        }
        Ok(h)
    }

    /// The embedded store (statistics, tools), when that is the backend.
    pub fn store(&self) -> Option<&Arc<Store>> {
        match &self.backend {
            Backend::Embedded(s, _) => Some(s),
            Backend::Postgres(..) => None,
        }
    }

    /// The PostgreSQL backend, when that is the backend.
    pub fn postgres(&self) -> Option<&Arc<PgArchive>> {
        match &self.backend {
            Backend::Postgres(p, _) => Some(p),
            Backend::Embedded(..) => None,
        }
    }

    /// The archive's counters (those of the embedded store, or the database's).
    pub fn stats(&self) -> super::StoreStats {
        self.archive.stats()
    }

    /// HistoryRead operations answered, and refused for a full read queue.
    pub fn read_counts(&self) -> (u64, u64) {
        (
            self.reads.load(Ordering::Relaxed),
            self.reads_refused.load(Ordering::Relaxed),
        )
    }

    /// Registers every historized Variable of the built address space as a series and
    /// records its stores from now on. Returns how many there are.
    pub fn attach(self: &Arc<Self>, shared: &Arc<ServerShared>) -> Result<usize, StoreError> {
        let _ = self.shared.set(Arc::downgrade(shared));
        let space = &shared.address_space;
        let mut nodes = Nodes {
            by_id: HashMap::new(),
            events: HashMap::new(),
            by_index: HashMap::new(),
            stepped: HashMap::new(),
            gates: HashMap::new(),
            lost: Vec::new(),
        };
        let rules = super::collection::Rules::new(
            &self
                .collection_config
                .lock()
                .map(|c| c.clone())
                .unwrap_or_default(),
            space.namespace_uris(),
        )
        .map_err(StoreError::Config)?;
        // By index up to the index bound, not the node count: after a deletion a node's index
        // may lie past the count.
        for (index, node) in space.indexed_nodes() {
            let node_id = node.node_id();
            if let Some(notifier) = node.event_notifier() {
                let server = node_id == NodeId::ns0(uaring_core::generated::node_ids::Server);
                if server || notifier & event_notifier::HISTORY_READ != 0 {
                    let id = self.archive.series(&format!("events:{node_id}"))?;
                    nodes.events.insert(node_id, id);
                }
                continue;
            }
            let Some(v) = node.as_variable() else {
                continue;
            };
            // Stored Variables; computed and asynchronous ones that `[[history.sampled]]`
            // historizes.
            use uaring_core::address_space::store::SourceView;
            if !v.historizing()
                || !matches!(
                    v.source(),
                    SourceView::Cell(_) | SourceView::Computed(_) | SourceView::Async(_)
                )
            {
                continue;
            }
            let id = self.archive.series(&node_id.to_string())?;
            let stepped = uaring_core::address_space::history_configuration::stepped_node(&node);
            if let Some(entry) = rules.entry_of(&node_id) {
                let gate = rules.gate(space, node, entry).map_err(StoreError::Config)?;
                nodes.gates.insert(id, gate);
            }
            nodes.by_id.insert(node_id, id);
            nodes.by_index.insert(index, id);
            nodes.stepped.insert(id, stepped);
        }
        let count = nodes.by_id.len();
        let max_id = nodes
            .by_id
            .values()
            .chain(nodes.events.values())
            .map(|s| s.0 as usize + 1)
            .max()
            .unwrap_or(0);
        nodes.lost = (0..max_id)
            .map(|_| std::sync::atomic::AtomicI64::new(NOTHING_LOST))
            .collect();
        let all: Vec<u32> = nodes.by_index.keys().copied().collect();
        let (indices, mut groups) = self.sampled_groups(space, &all)?;
        // Variables recorded by change whose rule has a MaxTimeInterval: the sampler keeps
        // their value again when nothing was kept for that long.
        for &index in &indices {
            let Some(node) = space.node_at(index) else {
                continue;
            };
            let Some(rule) = rules.entry_of(&node.node_id()).and_then(|e| rules.get(e)) else {
                continue;
            };
            if rule.max_ticks > 0 {
                add_to_group(
                    &mut groups,
                    refresh_interval_ns(rule.max_ticks),
                    SampledNode {
                        index,
                        generation: node.generation(),
                        last: None,
                        reading: false,
                        refresh: true,
                    },
                );
            }
        }
        let _ = self.rules.set(rules);
        let events = !nodes.events.is_empty();
        if self.nodes.set(nodes).is_err() {
            return Err(StoreError::Invalid("history attached twice"));
        }
        self.start_run_time(space)?;
        if events {
            let recorder: Arc<dyn EventRecorder> = self.clone();
            shared.events.bus.record(recorder);
        }
        // The recorder is set even with nothing historized yet: Variables added at run time
        // are recorded through it.
        let recorder: Arc<dyn ChangeRecorder> = self.clone();
        space.changes().record(recorder, indices.iter().copied());
        // With `[[history.sampled]]` the sampler runs even with nothing to sample yet: the
        // Variables its patterns name may be added while the server runs.
        let sampled_config = self.sampled_config.lock().is_ok_and(|c| !c.is_empty());
        let refreshes = self.rules.get().is_some_and(|r| r.has_max_interval());
        if !groups.is_empty() || sampled_config || refreshes {
            self.start_sampler(groups)?;
        }
        let h: Arc<dyn uaring_core::address_space::change::RunTimeHistory> = self.clone();
        space.changes().set_run_time_history(h);
        if !all.is_empty() {
            // The value each one starts with is its first sample of this run.
            for index in all {
                if let Some(dv) = space
                    .node_at(index)
                    .and_then(|n| n.value_cell())
                    .map(|c| c.load())
                {
                    ChangeRecorder::record(&**self, index, &dv);
                }
            }
        }
        Ok(count)
    }

    /// Stops the readers (after the operations queued before the call) and the writer after a last flush. Once it returns no thread of the
    /// historian holds the store: the last handle to the historian lets go of the store's
    /// lock.
    pub fn shutdown(&self) -> Result<(), StoreError> {
        let readers = self
            .readers
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        // The last of them is the updater.
        for _ in 1..readers.len() {
            // Blocks only while the queue is full of operations the readers are taking off.
            let _ = self.jobs.send(Job::Stop);
        }
        let _ = self.updates.send(Job::Stop);
        for r in readers {
            let _ = r.join();
        }
        if let Some((stop, t)) = self.sampler.lock().ok().and_then(|mut s| s.take()) {
            let _ = stop.send(SamplerMsg::Stop);
            let _ = t.join();
        }
        if let Some(rt) = self.run_time.get() {
            let _ = rt.registrations.send(Registration {
                slot: usize::MAX,
                ticket: 0,
                node_id: NodeId::default(),
            });
        }
        if let Some(r) = self.registrar.lock().ok().and_then(|mut r| r.take()) {
            let _ = r.join();
        }
        match &self.backend {
            Backend::Embedded(_, w) => match w.lock().ok().and_then(|mut w| w.take()) {
                Some(w) => w.shutdown(),
                None => Ok(()),
            },
            Backend::Postgres(_, w) => match w.lock().ok().and_then(|mut w| w.take()) {
                Some(w) => w.shutdown(),
                None => Ok(()),
            },
        }
    }

    /// The series of a historized Variable (on a reader thread: one historized a moment ago
    /// is waited for, up to [`REGISTRATION_WAIT_MS`]).
    fn series(&self, node: &NodeId) -> Option<SeriesId> {
        if let Some(slot) = self.run_time_slot(node) {
            let rt = self.run_time.get()?;
            let s = rt.slots.get(slot)?;
            let deadline =
                std::time::Instant::now() + std::time::Duration::from_millis(REGISTRATION_WAIT_MS);
            loop {
                let id = s.series.load(Ordering::Acquire);
                if id != NONE {
                    return Some(SeriesId(id));
                }
                if s.node_index.load(Ordering::Acquire) == NONE
                    || std::time::Instant::now() >= deadline
                {
                    return None;
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        self.nodes.get()?.by_id.get(node).copied()
    }

    /// The run-time place of the Variable `node` in the current address space, if it was
    /// historized while the server runs (one atomic look-up by its index; no lock).
    fn run_time_slot(&self, node: &NodeId) -> Option<usize> {
        let rt = self.run_time.get()?;
        let shared = self.shared.get()?.upgrade()?;
        let space = shared.model.current();
        let index = space.node_index(node)?;
        let v = rt.by_index.get(index as usize)?.load(Ordering::Acquire);
        (v != 0).then(|| v as usize - 1)
    }

    /// Is the node historized (at start or since)? For the shards (no wait).
    fn is_historized(&self, node: &NodeId) -> bool {
        self.run_time_slot(node).is_some()
            || self.nodes.get().is_some_and(|n| n.by_id.contains_key(node))
    }

    fn event_series(&self, notifier: &NodeId) -> Option<SeriesId> {
        self.nodes.get()?.events.get(notifier).copied()
    }

    fn stepped(&self, id: SeriesId) -> bool {
        if let Some(s) = self.run_time.get().and_then(|rt| {
            rt.slots
                .iter()
                .find(|s| s.series.load(Ordering::Acquire) == id.0)
        }) {
            return s.stepped.load(Ordering::Relaxed);
        }
        self.nodes
            .get()
            .and_then(|n| n.stepped.get(&id).copied())
            .unwrap_or(true)
    }

    /// Queues a sample for the writer. One that a full queue drops leaves a mark on its
    /// series (the earliest such SourceTimestamp); the next sample of the series that gets
    /// through is preceded by a `Bad_DataLost` value at that time, so a client reading the
    /// history sees where values are missing (Part 11 §6.2.2) instead of a silent gap.
    fn push(&self, id: SeriesId, sample: Sample) {
        let Some(nodes) = self.nodes.get() else {
            return;
        };
        self.push_to(id, nodes.lost.get(id.0 as usize), sample);
    }

    /// The cell that marks values of series `id` a full queue dropped: the start-time
    /// series' own, or a run-time place's (looked for only when a drop-oldest queue
    /// displaced a value of a series made at run time).
    fn lost_cell(&self, id: SeriesId) -> Option<&std::sync::atomic::AtomicI64> {
        let nodes = self.nodes.get()?;
        if let Some(l) = nodes.lost.get(id.0 as usize) {
            return Some(l);
        }
        self.run_time.get().and_then(|rt| {
            rt.slots
                .iter()
                .find(|s| s.series.load(Ordering::Acquire) == id.0)
                .map(|s| &s.lost)
        })
    }

    /// [`Historian::push`] with the series' mark cell.
    fn push_to(
        &self,
        id: SeriesId,
        lost_cell: Option<&std::sync::atomic::AtomicI64>,
        sample: Sample,
    ) {
        let mark = |series: SeriesId, ts: i64| {
            let cell = if series == id {
                lost_cell
            } else {
                self.lost_cell(series)
            };
            if let Some(l) = cell {
                l.fetch_min(ts, Ordering::AcqRel);
            }
        };
        let queue = |series: SeriesId, s: Sample, is_mark: bool| -> bool {
            let ts = s.source_ts;
            let pushed = if is_mark {
                self.ingest.push_mark(series, s)
            } else {
                self.ingest.push(series, s)
            };
            match pushed {
                Pushed::Queued => true,
                Pushed::Dropped => {
                    mark(series, ts);
                    false
                }
                Pushed::Displaced(other, other_ts) => {
                    mark(other, other_ts);
                    true
                }
            }
        };
        if let Some(lost) = lost_cell {
            if lost.load(Ordering::Acquire) != NOTHING_LOST {
                let marked = lost.swap(NOTHING_LOST, Ordering::AcqRel);
                if marked != NOTHING_LOST {
                    let marker = Sample {
                        source_ts: marked,
                        server_ts: sample.server_ts,
                        status: StatusCode::BadDataLost.0,
                        value: Variant::Empty,
                    };
                    if !queue(id, marker, true) {
                        // The mark did not fit (it is kept for the next value): this value
                        // does not go ahead of it either, or its gap would read as closed.
                        self.ingest.count_dropped();
                        return;
                    }
                }
            }
        }
        queue(id, sample, false);
    }

    /// Runs one operation on a reader thread.
    fn answer(&self, op: HistoryReadOp, reply: HistoryReply) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let series = if op.details.reads_events() {
            self.event_series(&op.node_id)
        } else {
            self.series(&op.node_id)
        };
        let Some(id) = series else {
            return reply.fail(StatusCode::BadHistoryOperationUnsupported);
        };
        let r = match &*op.details {
            ReadDetails::Raw(d) if d.is_read_modified => self.read_modified(&op),
            ReadDetails::Raw(_) => with_kept(&SAMPLES, |samples| self.read_raw(id, &op, samples)),
            ReadDetails::AtTime(d) => self.read_at_time(id, &op, &d.req_times, d.use_simple_bounds),
            ReadDetails::Processed(_) => with_kept(&RAW_VALUES, |raw| {
                with_kept(&SAMPLES, |inside| self.read_processed(id, &op, raw, inside))
            }),
            ReadDetails::Events(_) => self.read_events(id, &op),
        };
        match r {
            Ok(result) => reply.answer(result),
            Err(s) => reply.fail(s),
        }
    }

    /// ReadRawModifiedDetails (isReadModified false), Part 11 §6.5.3: `[start, end)` oldest
    /// first when start < end, `(end, start]` newest first when end < start; one time and
    /// numValuesPerNode read on from that time (forwards from a start, backwards from an
    /// end); returnBounds adds the bounding values (BadBoundNotFound where there is none).
    /// `samples`: the reader thread's buffer (empty).
    fn read_raw(
        &self,
        id: SeriesId,
        op: &HistoryReadOp,
        samples: &mut Vec<Sample>,
    ) -> Result<HistoryReadResult, StatusCode> {
        let ReadDetails::Raw(d) = &*op.details else {
            return Err(StatusCode::BadInternalError);
        };
        let (s, e) = (d.start_time, d.end_time);
        let (first, bound, reverse) = time_domain(s, e)?;
        let limit = op.max_values as usize;
        let mut state = RawState::decode(op.resume.as_deref())?;
        // The bounding values (returnBounds): the start's before the raw values, the end's
        // after them.
        let mut head: Option<DataValue> = None;
        if d.return_bounds && !state.started {
            // A value at the start time is its own bound (and the read returns it).
            let b = self.bound_value(id, first, reverse, true)?;
            if b.source_timestamp != Some(DateTime(first)) || b.status.is_some_and(|s| s.is_bad()) {
                head = Some(b);
            }
        }
        state.started = true;
        let room = limit.saturating_sub(usize::from(head.is_some())).max(1);
        samples.reserve(room.min(RAW_RESERVE_MAX));
        let next = match state.resume {
            Some(r) => self.archive.read_from(id, r, bound, reverse, room, samples),
            None => {
                let (lo, hi) = if reverse {
                    (bound, first)
                } else {
                    (first, bound)
                };
                self.archive.read(id, lo, hi, reverse, room, samples)
            }
        }
        .map_err(store_status)?;
        state.resume = next;
        let mut tail: Option<DataValue> = None;
        if next.is_none() && d.return_bounds && !s.is_null() && !e.is_null() {
            tail = Some(self.bound_value(id, e.0, reverse, false)?);
        }
        // The values whose SourceTimestamp has modified values kept (ExtraData): the raw
        // ones and the bounds that were found.
        let bound_ok = |d: &DataValue| d.status != Some(StatusCode::BadBoundNotFound);
        let modified = self.modified_among(
            &op.node_id,
            samples.iter().map(|s| s.source_ts).chain(
                head.iter()
                    .chain(tail.iter())
                    .filter(|d| bound_ok(d))
                    .filter_map(|d| d.source_timestamp.map(|t| t.0)),
            ),
        )?;
        // HistoryData's body encoded straight from the samples: a raw read of 100,000
        // values made a DataValue of each (8 MB), then encoded them; with the allocator's
        // fixed mmap threshold every such buffer was fresh pages to fault in and give back,
        // half the read's CPU (the history-peers table's raw-100k, profiled).
        let count = usize::from(head.is_some()) + samples.len() + usize::from(tail.is_some());
        let mut body = Vec::with_capacity(4 + count * RAW_VALUE_BYTES);
        (count as i32).encode(&mut body);
        let encode_bound = |b: &mut DataValue, body: &mut Vec<u8>| {
            if bound_ok(b) {
                modified.mark(b);
            }
            b.encode(body);
        };
        if let Some(b) = head.as_mut() {
            encode_bound(b, &mut body);
        }
        for sample in samples.drain(..) {
            // The raw values as the operation asks for them (the bounds stay whole).
            if op.index_range.is_some() {
                let mut dv = plain(sample);
                modified.mark(&mut dv);
                finish(dv, op).encode(&mut body);
            } else {
                let marked = modified.contains(sample.source_ts);
                encode_raw(&sample, marked, op.timestamps, &mut body);
            }
        }
        if let Some(b) = tail.as_mut() {
            encode_bound(b, &mut body);
        }
        let token = next.map(|_| state.encode());
        Ok(data_result(
            count == 0,
            token,
            ExtensionObject {
                type_id: NodeId::ns0(HistoryData::BINARY_ENCODING_ID),
                body: ExtensionObjectBody::Binary(body),
            },
        ))
    }

    /// ReadEventDetails (Part 11 §6.5.2): the notifier's events by Time, in the time domain
    /// of a raw read (`[start, end)` forwards, `(end, start]` backwards, or one time and
    /// numValuesPerNode), each passed through the request's EventFilter: its where clause
    /// chooses, its select clauses make the fields. `numValuesPerNode` (and the server's
    /// limit) counts the events looked at, so a page may hold fewer after filtering.
    fn read_events(
        &self,
        id: SeriesId,
        op: &HistoryReadOp,
    ) -> Result<HistoryReadResult, StatusCode> {
        let ReadDetails::Events(d) = &*op.details else {
            return Err(StatusCode::BadInternalError);
        };
        let Some(filter) = &op.event_filter else {
            return Err(StatusCode::BadEventFilterInvalid);
        };
        let (first, bound, reverse) = time_domain(d.start_time, d.end_time)?;
        let resume = RawState::decode(op.resume.as_deref())?.resume;
        let mut samples = Vec::new();
        let limit = (op.max_values as usize).max(1);
        let next = match resume {
            Some(r) => self
                .archive
                .read_from(id, r, bound, reverse, limit, &mut samples),
            None => {
                let (lo, hi) = if reverse {
                    (bound, first)
                } else {
                    (first, bound)
                };
                self.archive.read(id, lo, hi, reverse, limit, &mut samples)
            }
        }
        .map_err(store_status)?;
        let mut events = Vec::with_capacity(samples.len());
        for s in samples {
            let Variant::ByteString(b) = &s.value else {
                continue;
            };
            let Ok(ev) = uaring_core::events::record::decode(
                b.as_bytes(),
                uaring_core::DecodeLimits::default(),
            ) else {
                tracing::warn!("history store: an event record did not decode; skipped");
                continue;
            };
            if let Some(fields) = filter.apply(&ev) {
                events.push(HistoryEventFieldList {
                    event_fields: fields,
                });
            }
        }
        let token = next.map(|r| {
            RawState {
                started: true,
                resume: Some(r),
            }
            .encode()
        });
        Ok(HistoryReadResult {
            status_code: if events.is_empty() && token.is_none() {
                StatusCode::GoodNoData
            } else {
                StatusCode::Good
            },
            continuation_point: token.map(Into::into).unwrap_or_default(),
            history_data: ExtensionObject::from_struct(&HistoryEvent { events }),
        })
    }

    /// Runs one HistoryUpdate operation on a reader thread and answers once it is durable.
    fn update_now(&self, op: HistoryUpdateOp, reply: HistoryUpdateReply) {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let node = op.details.node_id();
        if op.details.updates_events() {
            let Some(id) = self.event_series(node) else {
                return reply.fail(StatusCode::BadHistoryOperationUnsupported);
            };
            return match self.apply_event_update(id, &op) {
                Ok(result) => reply.answer(result),
                Err(s) => reply.fail(s),
            };
        }
        let Some(id) = self.series(node) else {
            return reply.fail(StatusCode::BadHistoryOperationUnsupported);
        };
        match self.apply_update(id, node, &op.details, op.user.as_deref()) {
            Ok(result) => reply.answer(result),
            Err(s) => reply.fail(s),
        }
    }

    /// The series that keeps a node's modified values (made on first use).
    fn modified_series(&self, node: &NodeId) -> Result<SeriesId, StoreError> {
        let mut m = self.modified.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&Some(id)) = m.get(node) {
            return Ok(id);
        }
        let id = self.archive.series(&format!("modified:{node}"))?;
        m.insert(node.clone(), Some(id));
        Ok(id)
    }

    /// The series of a node's modified values if it has one; a read makes none.
    fn existing_modified_series(&self, node: &NodeId) -> Result<Option<SeriesId>, StoreError> {
        if let Some(&known) = self
            .modified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(node)
        {
            return Ok(known);
        }
        let found = self.archive.lookup(&format!("modified:{node}"))?;
        // An update that made the series meanwhile has put it in; keep that.
        Ok(*self
            .modified
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(node.clone())
            .or_insert(found))
    }

    /// Sets the ExtraData bit (Part 4 §7.39.2; Part 11 §3.1.7, §6.5.3.2; Part 13 §5.3.3.1)
    /// on each of `values` — raw values, before their timestamps are chosen — whose
    /// SourceTimestamp has modified values kept: a value that replaced another (which it
    /// hides) or one inserted by HistoryUpdate. Such a value hides data a client can read
    /// with isReadModified. `only` picks the values that are raw (a processed read's
    /// calculated and interpolated values are not). Reads the node's modified values over
    /// the values' time span, a page at a time.
    fn mark_extra_data(
        &self,
        node: &NodeId,
        values: &mut [DataValue],
        only: impl Fn(&DataValue) -> bool,
    ) -> Result<(), StatusCode> {
        let modified = self.modified_among(
            node,
            values
                .iter()
                .filter(|d| only(d))
                .filter_map(|d| d.source_timestamp.map(|t| t.0)),
        )?;
        if modified.0.is_empty() {
            return Ok(());
        }
        for d in values.iter_mut().filter(|d| only(d)) {
            modified.mark(d);
        }
        Ok(())
    }

    /// The SourceTimestamps between the least and the greatest of `times` at which the
    /// node has modified values kept (see [`Historian::mark_extra_data`]); none (and no
    /// read) when `times` is empty or the node has no series of modified values. Read a
    /// page at a time.
    fn modified_among(
        &self,
        node: &NodeId,
        times: impl Iterator<Item = i64>,
    ) -> Result<ModifiedTimes, StatusCode> {
        let (lo, hi) = times.fold((i64::MAX, i64::MIN), |(lo, hi), t| (lo.min(t), hi.max(t)));
        if lo > hi {
            return Ok(ModifiedTimes(Vec::new()));
        }
        let Some(id) = self.existing_modified_series(node).map_err(store_status)? else {
            return Ok(ModifiedTimes(Vec::new()));
        };
        let mut times = Vec::new();
        let mut page = Vec::new();
        let mut next = self
            .archive
            .read(id, lo, hi, false, MODIFIED_PAGE, &mut page)
            .map_err(store_status)?;
        loop {
            times.extend(page.iter().map(|s| s.source_ts));
            let Some(r) = next else {
                break;
            };
            page.clear();
            next = self
                .archive
                .read_from(id, r, hi, false, MODIFIED_PAGE, &mut page)
                .map_err(store_status)?;
        }
        times.sort_unstable();
        times.dedup();
        Ok(ModifiedTimes(times))
    }

    /// UpdateDataDetails (Part 11 §6.8.2): Insert puts a value where there is none at its
    /// SourceTimestamp (else Bad_EntryExists), Replace replaces the value there (else
    /// Bad_NoEntryExists), Update does whichever applies (Good_EntryInserted /
    /// Good_EntryReplaced); a value without a SourceTimestamp is Bad_InvalidTimestamp.
    /// DeleteRawModifiedDetails (§6.8.5) deletes `[start, end)` (Bad_NoData when nothing was
    /// there), or with isDeleteModified the modified values kept for it; DeleteAtTimeDetails
    /// (§6.8.6) the values at each time (Bad_NoEntryExists where there is none). Every
    /// value inserted, replaced or deleted is kept as a modified value with its
    /// ModificationInfo (the time, the update type, the user), for isReadModified reads
    /// (§6.5.3.3): an insert keeps the new value, the others the old one. The store is
    /// flushed before the answer.
    fn apply_update(
        &self,
        id: SeriesId,
        node: &NodeId,
        details: &UpdateDetails,
        user: Option<&str>,
    ) -> Result<HistoryUpdateResult, StatusCode> {
        let at = |t: i64| -> Result<Vec<Sample>, StatusCode> {
            let mut v = Vec::new();
            self.archive
                .read(id, t, t, false, 0, &mut v)
                .map_err(update_status)?;
            Ok(v)
        };
        let now = crate::clock::utc_now().0;
        let info = |update_type: HistoryUpdateType| ModificationInfo {
            modification_time: DateTime(now),
            update_type,
            user_name: user.map(UaString::from).unwrap_or_default(),
        };
        let modified = self.modified_series(node).map_err(update_status)?;
        let mut results = Vec::new();
        let mut status = StatusCode::Good;
        let mut records: Vec<Sample> = Vec::new();
        match details {
            UpdateDetails::Data(d) => {
                for dv in &d.update_values {
                    let Some(ts) = dv.source_timestamp else {
                        results.push(StatusCode::BadInvalidTimestamp);
                        continue;
                    };
                    let sample = Sample {
                        source_ts: ts.0,
                        server_ts: dv.server_timestamp.map_or(now, |t| t.0),
                        status: dv.status.map_or(0, |s| s.0),
                        value: dv.value.clone(),
                    };
                    let old = at(ts.0)?;
                    let r = match (d.perform_insert_replace, !old.is_empty()) {
                        (PerformUpdateType::Insert, true) => StatusCode::BadEntryExists,
                        (PerformUpdateType::Replace, false) => StatusCode::BadNoEntryExists,
                        (PerformUpdateType::Insert, false) | (PerformUpdateType::Update, false) => {
                            records.push(modification(&sample, &info(HistoryUpdateType::Insert)));
                            self.archive
                                .insert(id, vec![sample])
                                .map_err(update_status)?;
                            StatusCode::GoodEntryInserted
                        }
                        (mode @ PerformUpdateType::Replace, true)
                        | (mode @ PerformUpdateType::Update, true) => {
                            let kind = if mode == PerformUpdateType::Replace {
                                HistoryUpdateType::Replace
                            } else {
                                HistoryUpdateType::Update
                            };
                            records.extend(old.iter().map(|o| modification(o, &info(kind))));
                            self.archive.replace(id, sample).map_err(update_status)?;
                            StatusCode::GoodEntryReplaced
                        }
                        _ => StatusCode::BadHistoryOperationInvalid,
                    };
                    results.push(r);
                }
            }
            UpdateDetails::DeleteRaw(d) => {
                let (first, bound, reverse) = time_domain(d.start_time, d.end_time)?;
                let (lo, hi) = if reverse {
                    (bound, first)
                } else {
                    (first, bound)
                };
                let n = if d.is_delete_modified {
                    self.archive
                        .delete_range(modified, lo, hi)
                        .map_err(update_status)?
                } else {
                    // What is deleted is kept as modified values, a page at a time.
                    let mut page = Vec::new();
                    let mut next = self
                        .archive
                        .read(id, lo, hi, false, MODIFIED_PAGE, &mut page)
                        .map_err(update_status)?;
                    loop {
                        let kept: Vec<Sample> = page
                            .drain(..)
                            .map(|o| modification(&o, &info(HistoryUpdateType::Delete)))
                            .collect();
                        if !kept.is_empty() {
                            self.archive.insert(modified, kept).map_err(update_status)?;
                        }
                        let Some(r) = next else { break };
                        next = self
                            .archive
                            .read_from(id, r, hi, false, MODIFIED_PAGE, &mut page)
                            .map_err(update_status)?;
                    }
                    self.archive
                        .delete_range(id, lo, hi)
                        .map_err(update_status)?
                };
                if n == 0 {
                    status = StatusCode::BadNoData;
                }
            }
            UpdateDetails::Events(_) | UpdateDetails::DeleteEvents(_) => {
                return Err(StatusCode::BadInternalError)
            }
            UpdateDetails::DeleteAtTime(d) => {
                for t in &d.req_times {
                    let old = at(t.0)?;
                    records.extend(
                        old.iter()
                            .map(|o| modification(o, &info(HistoryUpdateType::Delete))),
                    );
                    let n = if old.is_empty() {
                        0
                    } else {
                        self.archive
                            .delete_range(id, t.0, t.0)
                            .map_err(update_status)?
                    };
                    results.push(if n == 0 {
                        StatusCode::BadNoEntryExists
                    } else {
                        StatusCode::Good
                    });
                }
            }
        }
        if !records.is_empty() {
            self.archive
                .insert(modified, records)
                .map_err(update_status)?;
        }
        self.archive.flush().map_err(update_status)?;
        Ok(HistoryUpdateResult {
            status_code: status,
            operation_results: results,
            diagnostic_infos: Vec::new(),
        })
    }

    /// Where the events with these EventIds are in the notifier's series: one pass over
    /// its event history, a page at a time (EventIds are not indexed).
    fn locate_events(
        &self,
        id: SeriesId,
        wanted: &std::collections::HashSet<Vec<u8>>,
    ) -> Result<HashMap<Vec<u8>, Event>, StatusCode> {
        let mut found = HashMap::new();
        if wanted.is_empty() {
            return Ok(found);
        }
        let mut page = Vec::new();
        let mut next = self
            .archive
            .read(id, i64::MIN, i64::MAX, false, MODIFIED_PAGE, &mut page)
            .map_err(update_status)?;
        loop {
            for s in page.drain(..) {
                if let Some(ev) = event_of(&s) {
                    if wanted.contains(ev.event_id.as_bytes()) {
                        found.insert(ev.event_id.as_bytes().to_vec(), ev);
                    }
                }
            }
            if found.len() == wanted.len() {
                break;
            }
            let Some(r) = next else { break };
            next = self
                .archive
                .read_from(id, r, i64::MAX, false, MODIFIED_PAGE, &mut page)
                .map_err(update_status)?;
        }
        Ok(found)
    }

    /// Removes the event `event_id` at `time` from the series, keeping the others of that
    /// time in their order.
    fn remove_event(&self, id: SeriesId, time: i64, event_id: &[u8]) -> Result<bool, StatusCode> {
        let mut at = Vec::new();
        self.archive
            .read(id, time, time, false, 0, &mut at)
            .map_err(update_status)?;
        let before = at.len();
        let keep: Vec<Sample> = at
            .into_iter()
            .filter(|s| event_of(s).is_none_or(|e| e.event_id.as_bytes() != event_id))
            .collect();
        if keep.len() == before {
            return Ok(false);
        }
        self.archive
            .delete_range(id, time, time)
            .map_err(update_status)?;
        if !keep.is_empty() {
            self.archive.insert(id, keep).map_err(update_status)?;
        }
        Ok(true)
    }

    /// UpdateEventDetails (Part 11 §6.9.4) and DeleteEventDetails (§6.9.7) on a notifier's
    /// event history. The filter's select clauses name the fields of each entry of
    /// eventData: EventType and Time are required (else Bad_ArgumentsMissing for the node;
    /// a Replace needs EventId too); an unknown EventType is Bad_TypeDefinitionInvalid and
    /// an entry whose field count or types do not fit Bad_InvalidArgument, for that entry.
    /// Insert: Good_EntryInserted (a new EventId when none is given), Bad_EntryExists for
    /// an EventId that is there. Replace: the event with that EventId (and which the where
    /// clause accepts) is replaced, keeping its EventId, Good_EntryReplaced, else
    /// Bad_NoEntryExists. Update: whichever applies. Delete: Good, or Bad_NoEntryExists
    /// per EventId. Durable when answered.
    fn apply_event_update(
        &self,
        id: SeriesId,
        op: &HistoryUpdateOp,
    ) -> Result<HistoryUpdateResult, StatusCode> {
        let mut results = Vec::new();
        match &op.details {
            UpdateDetails::DeleteEvents(d) => {
                let wanted = d.event_ids.iter().map(|e| e.as_bytes().to_vec()).collect();
                let found = self.locate_events(id, &wanted)?;
                for e in &d.event_ids {
                    let r = match found.get(e.as_bytes()) {
                        Some(ev) if self.remove_event(id, ev.time.0, e.as_bytes())? => {
                            StatusCode::Good
                        }
                        _ => StatusCode::BadNoEntryExists,
                    };
                    results.push(r);
                }
            }
            UpdateDetails::Events(d) => {
                let slots: Vec<Slot> = d.filter.select_clauses.iter().map(Slot::of).collect();
                let has = |x: &Slot| slots.contains(x);
                let mode = d.perform_insert_replace;
                if !has(&Slot::EventType)
                    || !has(&Slot::Time)
                    || (mode == PerformUpdateType::Replace && !has(&Slot::EventId))
                {
                    return Err(StatusCode::BadArgumentsMissing);
                }
                let shared = self
                    .shared
                    .get()
                    .and_then(std::sync::Weak::upgrade)
                    .ok_or(StatusCode::BadInternalError)?;
                let space = &shared.address_space;
                let now = crate::clock::utc_now();
                let mut built = Vec::with_capacity(d.event_data.len());
                for entry in &d.event_data {
                    built.push(build_event(&slots, &entry.event_fields, space, now));
                }
                let wanted = built
                    .iter()
                    .filter_map(|b| b.as_ref().ok())
                    .filter(|ev| !ev.event_id.as_bytes().is_empty())
                    .map(|ev| ev.event_id.as_bytes().to_vec())
                    .collect();
                let mut found = self.locate_events(id, &wanted)?;
                for b in built {
                    let mut ev = match b {
                        Ok(ev) => ev,
                        Err(s) => {
                            results.push(s);
                            continue;
                        }
                    };
                    let given = !ev.event_id.as_bytes().is_empty();
                    let existing = if given {
                        found.get(ev.event_id.as_bytes()).cloned()
                    } else {
                        None
                    };
                    // A Replace replaces only what the where clause accepts.
                    let replaceable = existing
                        .as_ref()
                        .filter(|old| op.event_filter.as_ref().is_none_or(|f| f.matches(old)));
                    let r = match (mode, existing.is_some(), replaceable) {
                        (PerformUpdateType::Insert, true, _) => StatusCode::BadEntryExists,
                        (PerformUpdateType::Insert, false, _)
                        | (PerformUpdateType::Update, false, _) => {
                            if !given {
                                ev.event_id = new_event_id();
                            }
                            self.archive
                                .insert(id, vec![event_sample(&ev)])
                                .map_err(update_status)?;
                            found.insert(ev.event_id.as_bytes().to_vec(), ev);
                            StatusCode::GoodEntryInserted
                        }
                        (_, true, Some(old)) => {
                            self.remove_event(id, old.time.0, old.event_id.as_bytes())?;
                            self.archive
                                .insert(id, vec![event_sample(&ev)])
                                .map_err(update_status)?;
                            found.insert(ev.event_id.as_bytes().to_vec(), ev);
                            StatusCode::GoodEntryReplaced
                        }
                        _ => StatusCode::BadNoEntryExists,
                    };
                    results.push(r);
                }
            }
            _ => return Err(StatusCode::BadInternalError),
        }
        self.archive.flush().map_err(update_status)?;
        Ok(HistoryUpdateResult {
            status_code: StatusCode::Good,
            operation_results: results,
            diagnostic_infos: Vec::new(),
        })
    }

    /// ReadRawModifiedDetails with isReadModified (Part 11 §6.5.3.3): the modified values
    /// of the time domain (as a raw read's, without bounds), each with its
    /// ModificationInfo, in a HistoryModifiedData: every modification of a time, in the
    /// order they were made.
    fn read_modified(&self, op: &HistoryReadOp) -> Result<HistoryReadResult, StatusCode> {
        let ReadDetails::Raw(d) = &*op.details else {
            return Err(StatusCode::BadInternalError);
        };
        let (first, bound, reverse) = time_domain(d.start_time, d.end_time)?;
        let Some(id) = self
            .existing_modified_series(&op.node_id)
            .map_err(store_status)?
        else {
            return Ok(HistoryReadResult {
                status_code: StatusCode::GoodNoData,
                continuation_point: Default::default(),
                history_data: ExtensionObject::from_struct(&HistoryModifiedData::default()),
            });
        };
        let resume = RawState::decode(op.resume.as_deref())?.resume;
        let limit = (op.max_values as usize).max(1);
        let mut samples = Vec::new();
        let next = match resume {
            Some(r) => self
                .archive
                .read_from(id, r, bound, reverse, limit, &mut samples),
            None => {
                let (lo, hi) = if reverse {
                    (bound, first)
                } else {
                    (first, bound)
                };
                self.archive.read(id, lo, hi, reverse, limit, &mut samples)
            }
        }
        .map_err(store_status)?;
        let mut data = HistoryModifiedData::default();
        for s in &samples {
            let Some((dv, info)) = unmodification(s) else {
                tracing::warn!("history store: a modified-value record did not decode; skipped");
                continue;
            };
            let mut dv = stamp(dv, op.timestamps);
            if let Some(range) = &op.index_range {
                match range.read(&dv.value) {
                    Ok(v) => dv.value = v,
                    Err(status) => {
                        dv.value = Variant::Empty;
                        dv.status = Some(status);
                    }
                }
            }
            data.data_values.push(dv);
            data.modification_infos.push(info);
        }
        let token = next.map(|r| {
            RawState {
                started: true,
                resume: Some(r),
            }
            .encode()
        });
        Ok(HistoryReadResult {
            status_code: if data.data_values.is_empty() && token.is_none() {
                StatusCode::GoodNoData
            } else {
                StatusCode::Good
            },
            continuation_point: token.map(Into::into).unwrap_or_default(),
            history_data: ExtensionObject::from_struct(&data),
        })
    }

    /// A bounding value (Part 11 §3.1.5): the value at `t` or the one before it (`at_start`
    /// of a forward read; after it for a reverse one), else a BadBoundNotFound at `t`.
    fn bound_value(
        &self,
        id: SeriesId,
        t: i64,
        reverse: bool,
        at_start: bool,
    ) -> Result<DataValue, StatusCode> {
        let mut at = Vec::new();
        let earlier = at_start != reverse;
        if at_start {
            self.archive
                .read(id, t, t, reverse, 1, &mut at)
                .map_err(store_status)?;
            if let Some(s) = at.pop() {
                return Ok(plain(s));
            }
        }
        let found = if earlier {
            // The start bound of a forward read: strictly before (the value at `t` was
            // looked for above); the end bound of a backward read: at `t` or before.
            self.archive
                .last_before(id, if at_start { t } else { t.saturating_add(1) })
        } else {
            self.archive.first_after(id, t.saturating_sub(1))
        }
        .map_err(store_status)?;
        Ok(match found {
            Some(s) => plain(s),
            None => DataValue {
                source_timestamp: Some(DateTime(t)),
                server_timestamp: Some(DateTime(t)),
                ..DataValue::status(StatusCode::BadBoundNotFound)
            },
        })
    }

    /// ReadAtTimeDetails, Part 11 §6.5.5: the raw value at each time, else one
    /// interpolated from the bounding values (sloped for Float and Double, stepped for other
    /// types), with the Interpolated bit; BadNoData before the first value. With
    /// useSimpleBounds the bounding values are the nearest ones whatever their status; without
    /// it, the nearest non-Bad ones.
    fn read_at_time(
        &self,
        id: SeriesId,
        op: &HistoryReadOp,
        times: &[DateTime],
        simple_bounds: bool,
    ) -> Result<HistoryReadResult, StatusCode> {
        let stepped = self.stepped(id);
        let from = op
            .resume
            .as_deref()
            .and_then(|t| t.try_into().ok())
            .map_or(0, |b: [u8; 8]| u64::from_le_bytes(b) as usize);
        let limit = op.max_values as usize;
        let mut values = Vec::new();
        for t in times.iter().skip(from).take(limit.max(1)) {
            values.push(self.value_at(id, t.0, stepped, simple_bounds, op)?);
        }
        let done = from + values.len();
        let token = (done < times.len()).then(|| (done as u64).to_le_bytes().to_vec());
        Ok(history_result(values, token))
    }

    fn value_at(
        &self,
        id: SeriesId,
        t: i64,
        stepped: bool,
        simple_bounds: bool,
        op: &HistoryReadOp,
    ) -> Result<DataValue, StatusCode> {
        let mut at = Vec::new();
        self.archive
            .read(id, t, t, false, 1, &mut at)
            .map_err(store_status)?;
        if let Some(s) = at.pop() {
            let mut v = [plain(s)];
            self.mark_extra_data(&op.node_id, &mut v, |_| true)?;
            let [v] = v;
            return Ok(finish(v, op));
        }
        let usable = |s: &Sample| simple_bounds || !StatusCode(s.status).is_bad();
        let before = self.nearest(id, t, true, &usable)?;
        let Some(before) = before else {
            return Ok(DataValue {
                source_timestamp: Some(DateTime(t)),
                ..DataValue::status(StatusCode::BadNoData)
            });
        };
        let after = if stepped {
            None
        } else {
            self.nearest(id, t, false, &usable)?
        };
        let value = match (
            &before.value,
            after.as_ref().map(|a| (&a.value, a.source_ts)),
        ) {
            (Variant::Double(a), Some((Variant::Double(b), tb))) => {
                Variant::Double(lerp(*a, *b, before.source_ts, tb, t))
            }
            (Variant::Float(a), Some((Variant::Float(b), tb))) => {
                Variant::Float(lerp(*a as f64, *b as f64, before.source_ts, tb, t) as f32)
            }
            (v, _) => v.clone(),
        };
        let base = if after.is_none() && !stepped {
            // After the last value: stepped extrapolation, Uncertain (Part 13 §3.1.8).
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode(before.status & 0xFFFF_0000)
        };
        let status = aggregate::with_bits(base, aggregate::bits::INTERPOLATED);
        let mut dv = finish(
            plain(Sample {
                source_ts: t,
                server_ts: t,
                status: status.0,
                value,
            }),
            op,
        );
        if dv.status == Some(StatusCode::Good) {
            dv.status = None;
        }
        Ok(dv)
    }

    /// The nearest sample before (or after) `t` that `usable` accepts, looking at most 1,000
    /// samples away.
    fn nearest(
        &self,
        id: SeriesId,
        t: i64,
        before: bool,
        usable: &dyn Fn(&Sample) -> bool,
    ) -> Result<Option<Sample>, StatusCode> {
        let mut v = Vec::new();
        let r = if before {
            self.archive
                .read(id, i64::MIN, t.saturating_sub(1), true, 1000, &mut v)
        } else {
            self.archive
                .read(id, t.saturating_add(1), i64::MAX, false, 1000, &mut v)
        };
        r.map_err(store_status)?;
        Ok(v.into_iter().find(|s| usable(s)))
    }

    /// ReadProcessedDetails (Part 11 §6.5.4, Part 13): the raw values of the range and
    /// its bounding values, through the aggregate engine; the intervals a continuation
    /// point resumes at are counted in the token.
    /// `raw`, `inside`: the reader thread's buffers (empty).
    fn read_processed(
        &self,
        id: SeriesId,
        op: &HistoryReadOp,
        raw: &mut Vec<DataValue>,
        inside: &mut Vec<Sample>,
    ) -> Result<HistoryReadResult, StatusCode> {
        let ReadDetails::Processed(d) = &*op.details else {
            return Err(StatusCode::BadInternalError);
        };
        let Some(aggregate) = op.aggregate.as_ref().and_then(Aggregate::from_node_id) else {
            return Err(StatusCode::BadAggregateNotSupported);
        };
        let config = AggregateConfig::of_request(&d.aggregate_configuration, self.stepped(id))?;
        let (lo, hi) = (
            d.start_time.0.min(d.end_time.0),
            d.start_time.0.max(d.end_time.0),
        );
        // A value the bounding values may use (Part 13 §3.1.8: not Bad, nor Uncertain with
        // TreatUncertainAsBad).
        let usable = |s: &Sample| {
            let st = StatusCode(s.status);
            !(st.is_bad() || (config.treat_uncertain_as_bad && st.is_uncertain()))
        };
        // What lies before the range, back to the second usable value: the start bound needs
        // one, and an end bound extrapolated with UseSlopedExtrapolation the line through the
        // last two (§3.1.4) when the range begins after the end of the data.
        let mut before = Vec::new();
        self.archive
            .read(id, i64::MIN, lo.saturating_sub(1), true, 1000, &mut before)
            .map_err(store_status)?;
        let keep = before
            .iter()
            .enumerate()
            .filter(|(_, s)| usable(s))
            .nth(1)
            .map_or(before.len(), |(i, _)| i + 1);
        before.truncate(keep);
        before.reverse();
        raw.extend(before.into_iter().map(plain));
        let cut = self
            .archive
            .read(id, lo, hi, false, MAX_RAW_FOR_PROCESSING, inside)
            .map_err(store_status)?;
        if cut.is_some() {
            return Err(StatusCode::BadTooManyOperations);
        }
        raw.extend(inside.drain(..).map(plain));
        let mut after = Vec::new();
        self.archive
            .read(id, hi.saturating_add(1), i64::MAX, false, 1000, &mut after)
            .map_err(store_status)?;
        let keep = after.iter().position(usable).map_or(after.len(), |i| i + 1);
        after.truncate(keep);
        raw.extend(after.into_iter().map(plain));
        let mut values = aggregate::process(
            aggregate,
            raw,
            d.start_time,
            d.end_time,
            d.processing_interval,
            &config,
        )?;
        // A raw value passed through (Start, End, Minimum at a raw time, …; neither
        // Calculated nor Interpolated) that hides modified data carries ExtraData too.
        self.mark_extra_data(&op.node_id, &mut values, |d| {
            let st = d.status.unwrap_or(StatusCode::Good).0;
            let data_value_info = st & aggregate::bits::INFO_TYPE_DATA_VALUE != 0;
            d.value != Variant::Empty
                && !(data_value_info
                    && st & (aggregate::bits::CALCULATED | aggregate::bits::INTERPOLATED) != 0)
        })?;
        let from = op
            .resume
            .as_deref()
            .and_then(|t| t.try_into().ok())
            .map_or(0, |b: [u8; 8]| u64::from_le_bytes(b) as usize);
        let limit = (op.max_values as usize).max(1);
        let total = values.len();
        let page: Vec<DataValue> = values
            .drain(..)
            .skip(from)
            .take(limit)
            .map(|dv| stamp(dv, op.timestamps))
            .collect();
        let done = from + page.len();
        let token = (done < total).then(|| (done as u64).to_le_bytes().to_vec());
        Ok(history_result(page, token))
    }
}

/// A reader thread: takes operations off the job queue until the historian is gone.
fn reader_loop(h: &std::sync::Weak<Historian>, rx: &Mutex<Receiver<Job>>) {
    loop {
        // Waits without a timeout when there is nothing to free (an idle server's readers
        // do not wake).
        let job = match rx.lock() {
            Ok(r) if holds_read_buffers() => r.recv_timeout(READ_BUFFERS_IDLE),
            Ok(r) => r
                .recv()
                .map_err(|_| std::sync::mpsc::RecvTimeoutError::Disconnected),
            Err(_) => return,
        };
        let job = match job {
            Ok(job) => job,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                free_read_buffers();
                continue;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return,
        };
        if matches!(job, Job::Stop) {
            return;
        }
        let Some(h) = h.upgrade() else { return };
        match job {
            Job::Read(op, reply) => h.answer(op, reply),
            Job::Update(op, reply) => h.update_now(op, reply),
            Job::Stop => {}
        }
        // Let go of the historian before waiting for the next job.
        drop(h);
    }
}

impl ChangeRecorder for Historian {
    fn record(&self, node_index: u32, value: &DataValue) {
        let now = crate::clock::utc_now();
        let sample = || Sample {
            source_ts: value.source_timestamp.unwrap_or(now).0,
            server_ts: now.0,
            status: value.status.map_or(0, |s| s.0),
            value: value.value.clone(),
        };
        // A Variable historized at run time (its index may have been a start-time node's).
        if let Some(slot) = self.run_time_place(node_index) {
            if let Some(slot) = slot {
                let s = sample();
                if self.admit(&slot.gate, &s) {
                    self.record_run_time(slot, s);
                }
            }
            return;
        }
        let Some(nodes) = self.nodes.get() else {
            return;
        };
        let Some(id) = nodes.by_index.get(&node_index).copied() else {
            return;
        };
        let s = sample();
        if !nodes.gates.is_empty() {
            if let Some(g) = nodes.gates.get(&id) {
                if !self.admit(g, &s) {
                    return;
                }
            }
        }
        self.push(id, s);
    }

    fn forget(&self, node_index: u32) {
        let Some(rt) = self.run_time.get() else {
            return;
        };
        let Some(p) = rt.by_index.get(node_index as usize) else {
            return;
        };
        let place = p.swap(0, Ordering::AcqRel);
        if place == 0 {
            return;
        }
        if let Some(slot) = rt.slots.get(place as usize - 1) {
            // Values still waiting for the series go with the place.
            while slot.pending.pop().is_some() {}
            slot.series.store(NONE, Ordering::Release);
            slot.node_index.store(NONE, Ordering::Release);
            rt.taken.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Historian {
    /// Makes the run-time state: the patterns (the address space's namespaces resolve
    /// them), `max_run_time_historized` places, the registrar thread.
    fn start_run_time(
        self: &Arc<Self>,
        space: &uaring_core::address_space::AddressSpace,
    ) -> Result<(), StoreError> {
        let (patterns, max) = self
            .run_time_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let uris = space.namespace_uris();
        let patterns = patterns
            .iter()
            .filter_map(|p| parse_pattern(p, uris).ok())
            .collect();
        let sampled = self
            .sampled_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default()
            .iter()
            .map(|c| {
                (
                    c.nodes
                        .iter()
                        .filter_map(|p| parse_pattern(p, uris).ok())
                        .collect(),
                    u64::from(c.interval_ms) * 1_000_000,
                )
            })
            .collect();
        let (tx, rx) = sync_channel::<Registration>(max.saturating_mul(2).max(1));
        let slots: Box<[RunTimeSlot]> = (0..max)
            .map(|_| RunTimeSlot {
                node_index: std::sync::atomic::AtomicU32::new(NONE),
                series: std::sync::atomic::AtomicU32::new(NONE),
                ticket: AtomicU64::new(0),
                inflight: std::sync::atomic::AtomicU32::new(0),
                pending: crossbeam_queue::ArrayQueue::new(PENDING_SAMPLES),
                lost: std::sync::atomic::AtomicI64::new(NOTHING_LOST),
                stepped: std::sync::atomic::AtomicBool::new(true),
                gate: super::collection::Gate::default(),
            })
            .collect();
        let capacity = space.changes().index_capacity();
        let rt = RunTime {
            patterns,
            sampled,
            taken: std::sync::atomic::AtomicUsize::new(0),
            by_index: (0..if max == 0 { 0 } else { capacity })
                .map(|_| std::sync::atomic::AtomicU32::new(0))
                .collect(),
            slots,
            registrations: tx,
            refused: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        };
        if self.run_time.set(rt).is_err() {
            return Err(StoreError::Invalid("history attached twice"));
        }
        if max > 0 {
            let h = Arc::downgrade(self);
            let t = spawn_history_thread(
                "uaring-hreg".into(),
                self.cpus.clone(),
                self.nice,
                move || registrar_loop(&h, rx),
            )?;
            if let Ok(mut r) = self.registrar.lock() {
                *r = Some(t);
            }
        }
        Ok(())
    }

    /// Splits the historized Variables at `indices` into those recorded by change and those
    /// `[[history.sampled]]` names, grouped by interval (the first entry naming a Variable
    /// takes it).
    fn sampled_groups(
        &self,
        space: &uaring_core::address_space::AddressSpace,
        indices: &[u32],
    ) -> Result<(Vec<u32>, Vec<SampleGroup>), StoreError> {
        let config = self
            .sampled_config
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        let by_id = self
            .sampled_nodes
            .lock()
            .map(|c| c.clone())
            .unwrap_or_default();
        if config.is_empty() && by_id.is_empty() {
            return Ok((indices.to_vec(), Vec::new()));
        }
        let uris = space.namespace_uris();
        let mut patterns = Vec::with_capacity(config.len());
        for c in &config {
            let parsed = c
                .nodes
                .iter()
                .map(|p| parse_pattern(p, uris))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| StoreError::Invalid("history.sampled: a pattern does not parse"))?;
            patterns.push(parsed);
        }
        let mut groups: Vec<SampleGroup> = config
            .iter()
            .map(|c| SampleGroup {
                interval_ns: u64::from(c.interval_ms) * 1_000_000,
                next_ns: 0,
                nodes: Vec::new(),
            })
            .collect();
        // The application's, one group an interval after the patterns' (and before them:
        // a Variable the application samples is sampled on its interval).
        let mut of_id: HashMap<NodeId, usize> = HashMap::new();
        for (id, ms) in by_id {
            let interval_ns = u64::from(ms) * 1_000_000;
            let g = match groups
                .iter()
                .skip(config.len())
                .position(|g| g.interval_ns == interval_ns)
            {
                Some(g) => config.len() + g,
                None => {
                    groups.push(SampleGroup {
                        interval_ns,
                        next_ns: 0,
                        nodes: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            of_id.insert(id, g);
        }
        let mut by_change = Vec::with_capacity(indices.len());
        for &index in indices {
            let Some(node) = space.node_at(index) else {
                continue;
            };
            let id = node.node_id();
            match of_id.get(&id).copied().or_else(|| {
                patterns
                    .iter()
                    .position(|ps| ps.iter().any(|p| p.matches(&id)))
            }) {
                Some(g) => groups[g].nodes.push(SampledNode {
                    index,
                    generation: node.generation(),
                    last: node.value_cell().map(|c| c.load()),
                    reading: false,
                    refresh: false,
                }),
                // Only a stored Variable changes by itself.
                None if node.value_cell().is_some() => by_change.push(index),
                None => {}
            }
        }
        groups.retain(|g| !g.nodes.is_empty());
        Ok((by_change, groups))
    }

    /// Starts the sampler thread (`uaring-hsample`) over `groups`.
    fn start_sampler(self: &Arc<Self>, groups: Vec<SampleGroup>) -> Result<(), StoreError> {
        let (stop, inbox) = std::sync::mpsc::channel::<SamplerMsg>();
        let answers = stop.clone();
        let _ = self.sampler_tx.set(stop.clone());
        let h = Arc::downgrade(self);
        let t = spawn_history_thread(
            "uaring-hsample".into(),
            self.cpus.clone(),
            self.nice,
            move || sampler_loop(&h, groups, &inbox, &answers),
        )?;
        if let Ok(mut s) = self.sampler.lock() {
            *s = Some((stop, t));
        }
        Ok(())
    }

    /// `Some` when the node at `node_index` has a run-time place: the place's slot while it
    /// is still that node's (not freed by a deletion and taken again meanwhile).
    fn run_time_place(&self, node_index: u32) -> Option<Option<&RunTimeSlot>> {
        let rt = self.run_time.get()?;
        let place = rt
            .by_index
            .get(node_index as usize)
            .map_or(0, |p| p.load(Ordering::Acquire));
        (place != 0).then(|| {
            rt.slots
                .get(place as usize - 1)
                .filter(|s| s.node_index.load(Ordering::Acquire) == node_index)
        })
    }

    /// Does `gate`'s rule keep `sample`?
    fn admit(&self, gate: &super::collection::Gate, sample: &Sample) -> bool {
        self.rules.get().is_none_or(|r| r.admit(gate, sample))
    }

    /// Is a value of the Variable at `node_index` due again at `now` (100 ns ticks): its
    /// rule's MaxTimeInterval passed with nothing kept?
    fn overdue(&self, node_index: u32, now: i64) -> bool {
        let Some(rules) = self.rules.get() else {
            return false;
        };
        if let Some(slot) = self.run_time_place(node_index) {
            return slot.is_some_and(|s| rules.overdue(&s.gate, now));
        }
        self.nodes.get().is_some_and(|n| {
            n.by_index
                .get(&node_index)
                .and_then(|id| n.gates.get(id))
                .is_some_and(|g| rules.overdue(g, now))
        })
    }

    /// A value of a run-time historized Variable: to the ingest queue once its series is
    /// made, else into the place's pending queue (full: dropped, counted and marked).
    fn record_run_time(&self, slot: &RunTimeSlot, sample: Sample) {
        slot.inflight.fetch_add(1, Ordering::SeqCst);
        let series = slot.series.load(Ordering::SeqCst);
        if series == NONE {
            let ts = sample.source_ts;
            if slot.pending.push(sample).is_err() {
                slot.lost.fetch_min(ts, Ordering::AcqRel);
                self.ingest.count_dropped();
            }
            slot.inflight.fetch_sub(1, Ordering::SeqCst);
            return;
        }
        slot.inflight.fetch_sub(1, Ordering::SeqCst);
        self.push_to(SeriesId(series), Some(&slot.lost), sample);
    }

    /// Makes the series of a run-time historized Variable (on the registrar thread) and
    /// hands it the values that waited.
    fn register(&self, r: Registration) {
        let Some(rt) = self.run_time.get() else {
            return;
        };
        let Some(slot) = rt.slots.get(r.slot) else {
            return;
        };
        if slot.ticket.load(Ordering::Acquire) != r.ticket
            || slot.node_index.load(Ordering::Acquire) == NONE
        {
            return;
        }
        match self.archive.series(&r.node_id.to_string()) {
            Ok(id) => {
                if slot.ticket.load(Ordering::Acquire) != r.ticket
                    || slot.node_index.load(Ordering::Acquire) == NONE
                {
                    return;
                }
                slot.series.store(id.0, Ordering::SeqCst);
                // A recorder that saw no series yet finishes its push into `pending` first.
                while slot.inflight.load(Ordering::SeqCst) != 0 {
                    std::hint::spin_loop();
                }
                while let Some(sample) = slot.pending.pop() {
                    self.push_to(id, Some(&slot.lost), sample);
                }
            }
            Err(e) => {
                rt.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(node = %r.node_id, "history: no series for a Variable historized at run time: {e}");
            }
        }
    }

    /// Run-time historized Variables now, the bound, those the patterns named that were
    /// added without history at the bound, and those whose series could not be made.
    pub fn run_time_counts(&self) -> (usize, usize, u64, u64) {
        self.run_time.get().map_or((0, 0, 0, 0), |rt| {
            (
                rt.taken.load(Ordering::Relaxed),
                rt.slots.len(),
                rt.refused.load(Ordering::Relaxed),
                rt.failed.load(Ordering::Relaxed),
            )
        })
    }
}

fn registrar_loop(h: &std::sync::Weak<Historian>, rx: Receiver<Registration>) {
    while let Ok(r) = rx.recv() {
        if r.slot == usize::MAX {
            return;
        }
        let Some(h) = h.upgrade() else { return };
        h.register(r);
        drop(h);
    }
}

impl uaring_core::address_space::change::RunTimeHistory for Historian {
    fn wants(&self, node_id: &NodeId) -> bool {
        self.run_time.get().is_some_and(|rt| {
            rt.patterns.iter().any(|p| p.matches(node_id))
                || rt
                    .sampled
                    .iter()
                    .any(|(ps, _)| ps.iter().any(|p| p.matches(node_id)))
        })
    }

    fn reserve(&self) -> Result<(), StatusCode> {
        let Some(rt) = self.run_time.get() else {
            return Err(StatusCode::BadResourceUnavailable);
        };
        let max = rt.slots.len();
        let taken = rt
            .taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t < max).then_some(t + 1)
            });
        if taken.is_err() {
            rt.refused.fetch_add(1, Ordering::Relaxed);
            return Err(StatusCode::BadResourceUnavailable);
        }
        Ok(())
    }

    fn release(&self) {
        if let Some(rt) = self.run_time.get() {
            rt.taken.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn collection(&self, node_id: &NodeId) -> Option<usize> {
        self.rules.get()?.entry_of(node_id)
    }

    fn historize(&self, space: &uaring_core::address_space::AddressSpace, node_index: u32) {
        let Some(rt) = self.run_time.get() else {
            return;
        };
        let node = space.node_at(node_index);
        let (Some(node), Some(by_index)) = (node, rt.by_index.get(node_index as usize)) else {
            return self.release();
        };
        let Some(cell) = node.value_cell() else {
            return self.release();
        };
        // A free place: there is one, since reserve counted this one in.
        let Some((place, slot)) = rt.slots.iter().enumerate().find(|(_, s)| {
            s.node_index
                .compare_exchange(NONE, node_index, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        }) else {
            return self.release();
        };
        let ticket = slot.ticket.fetch_add(1, Ordering::AcqRel) + 1;
        slot.series.store(NONE, Ordering::SeqCst);
        slot.lost.store(NOTHING_LOST, Ordering::Release);
        let current = cell.load();
        slot.stepped.store(
            uaring_core::address_space::history_configuration::stepped(&current.value),
            Ordering::Relaxed,
        );
        if rt
            .registrations
            .try_send(Registration {
                slot: place,
                ticket,
                node_id: node.node_id(),
            })
            .is_err()
        {
            rt.failed.fetch_add(1, Ordering::Relaxed);
            slot.node_index.store(NONE, Ordering::Release);
            return self.release();
        }
        let node_id = node.node_id();
        // Its `[[history.collection]]` rule, if one names it (a range it lacks: every value
        // kept, and said).
        let rule = self
            .rules
            .get()
            .and_then(|r| r.entry_of(&node_id).map(|e| (r, e)));
        slot.gate.disarm();
        let mut max_ticks = 0;
        if let Some((rules, entry)) = rule {
            match rules.arm(&slot.gate, space, node, entry) {
                Ok(()) => max_ticks = rules.get(entry).map_or(0, |r| r.max_ticks),
                Err(e) => tracing::warn!("{e}: its values are all kept"),
            }
        }
        by_index.store(place as u32 + 1, Ordering::Release);
        let interval_ns = rt
            .sampled
            .iter()
            .find(|(ps, _)| ps.iter().any(|p| p.matches(&node_id)))
            .map(|(_, ns)| *ns);
        match interval_ns.zip(self.sampler_tx.get()) {
            // Named by `[[history.sampled]]`: the sampler takes it, starting from the value
            // it has now (its first sample).
            Some((interval_ns, tx)) => {
                let dv = cell.load();
                ChangeRecorder::record(self, node_index, &dv);
                let _ = tx.send(SamplerMsg::Add {
                    index: node_index,
                    generation: node.generation(),
                    interval_ns,
                    last: Some(dv),
                    refresh: false,
                });
            }
            None => {
                space.changes().record_node(node_index);
                // The value it starts with is its first sample (a store between the mark
                // and this load is recorded twice at worst, never lost).
                let dv = cell.load();
                ChangeRecorder::record(self, node_index, &dv);
                if let Some(tx) = self.sampler_tx.get().filter(|_| max_ticks > 0) {
                    let _ = tx.send(SamplerMsg::Add {
                        index: node_index,
                        generation: node.generation(),
                        interval_ns: refresh_interval_ns(max_ticks),
                        last: None,
                        refresh: true,
                    });
                }
            }
        }
    }
}

impl EventRecorder for Historian {
    fn record(&self, event: &uaring_core::events::Event) {
        let Some(nodes) = self.nodes.get() else {
            return;
        };
        let mut encoded: Option<uaring_core::ByteString> = None;
        for n in event.notifiers.iter() {
            let Some(id) = nodes.events.get(n).copied() else {
                continue;
            };
            let bytes = encoded.get_or_insert_with(|| {
                let mut b = Vec::new();
                uaring_core::events::record::encode(event, &mut b);
                b.into()
            });
            self.push(
                id,
                Sample {
                    source_ts: event.time.0,
                    server_ts: event.receive_time.0,
                    status: 0,
                    value: Variant::ByteString(bytes.clone()),
                },
            );
        }
    }
}

impl HistoryBackend for Historian {
    fn capabilities(&self) -> HistoryCapabilities {
        HistoryCapabilities {
            access_history_data: true,
            access_history_events: true,
            aggregates: Aggregate::ALL.iter().map(|a| a.node_id()).collect(),
            insert_data: true,
            replace_data: true,
            update_data: true,
            delete_raw: true,
            delete_at_time: true,
            modified_values: true,
            insert_event: true,
            replace_event: true,
            update_event: true,
            delete_event: true,
        }
    }

    fn has_history(&self, node_id: &NodeId, events: bool) -> bool {
        if events {
            self.event_series(node_id).is_some()
        } else {
            self.is_historized(node_id)
        }
    }

    fn read(&self, op: HistoryReadOp, reply: HistoryReply) {
        match self.jobs.try_send(Job::Read(op, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                self.reads_refused.fetch_add(1, Ordering::Relaxed);
                if let Job::Read(_, reply) = job {
                    reply.fail(StatusCode::BadResourceUnavailable)
                }
            }
        }
    }

    fn update(&self, op: HistoryUpdateOp, reply: HistoryUpdateReply) {
        match self.updates.try_send(Job::Update(op, reply)) {
            Ok(()) => {}
            Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                self.reads_refused.fetch_add(1, Ordering::Relaxed);
                if let Job::Update(_, reply) = job {
                    reply.fail(StatusCode::BadResourceUnavailable)
                }
            }
        }
    }
}

/// Where a raw read is: whether its start bound went out, where the store resumes.
#[derive(Default)]
struct RawState {
    started: bool,
    resume: Option<Resume>,
}

impl RawState {
    fn decode(token: Option<&[u8]>) -> Result<RawState, StatusCode> {
        let Some(t) = token else {
            return Ok(RawState::default());
        };
        let b: [u8; 13] = t
            .try_into()
            .map_err(|_| StatusCode::BadContinuationPointInvalid)?;
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&b[1..9]);
        let mut skip = [0u8; 4];
        skip.copy_from_slice(&b[9..13]);
        Ok(RawState {
            started: b[0] != 0,
            resume: Some(Resume {
                ts: i64::from_le_bytes(ts),
                skip: u32::from_le_bytes(skip),
            }),
        })
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(13);
        v.push(self.started as u8);
        let r = self.resume.unwrap_or(Resume { ts: 0, skip: 0 });
        v.extend_from_slice(&r.ts.to_le_bytes());
        v.extend_from_slice(&r.skip.to_le_bytes());
        v
    }
}

/// The time domain of a raw or event read, as (first, bound, reverse): the read goes from
/// `first` towards `bound` (both included). Start before end: `[start, end)` forwards (the
/// start alone when they are equal); end before start: `(end, start]` backwards; a start
/// alone forwards, an end alone backwards (numValuesPerNode then bounds it).
fn time_domain(s: DateTime, e: DateTime) -> Result<(i64, i64, bool), StatusCode> {
    Ok(match (s.is_null(), e.is_null()) {
        (false, false) if s.0 <= e.0 => (s.0, e.0.saturating_sub(1).max(s.0), false),
        (false, false) => (s.0, e.0.saturating_add(1), true),
        (false, true) => (s.0, i64::MAX, false),
        (true, false) => (e.0, i64::MIN, true),
        (true, true) => return Err(StatusCode::BadInvalidTimestampArgument),
    })
}

fn lerp(a: f64, b: f64, ta: i64, tb: i64, t: i64) -> f64 {
    if tb == ta {
        return a;
    }
    a + (b - a) * ((t - ta) as f64 / (tb - ta) as f64)
}

/// A read the store could not do: its data is there but cannot be had now (an I/O error, a
/// damaged record, the store locked), Bad_DataUnavailable ("temporary unavailability" of an
/// archive); an argument the store refuses, Bad_HistoryOperationInvalid.
fn store_status(e: StoreError) -> StatusCode {
    tracing::warn!(error = %e, "history store read failed");
    match e {
        StoreError::Invalid(_) => StatusCode::BadHistoryOperationInvalid,
        StoreError::Io(_)
        | StoreError::Corrupt(_)
        | StoreError::Locked
        | StoreError::Database(_)
        | StoreError::Config(_) => StatusCode::BadDataUnavailable,
    }
}

/// An update the store could not do: an I/O error (a full disk, say) is
/// Bad_ResourceUnavailable, damaged data Bad_DataUnavailable, an argument the store refuses
/// Bad_HistoryOperationInvalid. Nothing of a failed update is acknowledged.
fn update_status(e: StoreError) -> StatusCode {
    tracing::warn!(error = %e, "history store update failed");
    match e {
        StoreError::Invalid(_) => StatusCode::BadHistoryOperationInvalid,
        // The database away: as a full disk, the server cannot take the update now.
        StoreError::Io(_) | StoreError::Database(_) => StatusCode::BadResourceUnavailable,
        StoreError::Corrupt(_) | StoreError::Locked | StoreError::Config(_) => {
            StatusCode::BadDataUnavailable
        }
    }
}

/// A sample as a DataValue with both timestamps.
fn plain(s: Sample) -> DataValue {
    DataValue {
        value: s.value,
        status: (s.status != 0).then_some(StatusCode(s.status)),
        source_timestamp: Some(DateTime(s.source_ts)),
        server_timestamp: Some(DateTime(s.server_ts)),
        ..DataValue::default()
    }
}

/// Encodes the DataValue of a raw value without an IndexRange straight from its sample:
/// the bytes of `finish(plain(sample))` with the ExtraData bit set when `extra`, without
/// making the DataValue (a raw read of 100,000 values spent a tenth of its CPU moving them).
fn encode_raw(sample: &Sample, extra: bool, timestamps: TimestampsToReturn, out: &mut Vec<u8>) {
    let status = if extra {
        aggregate::with_bits(StatusCode(sample.status), aggregate::bits::EXTRA_DATA).0
    } else {
        sample.status
    };
    let mut mask = 0u8;
    if !matches!(sample.value, Variant::Empty) {
        mask |= 0x01;
    }
    if status != 0 {
        mask |= 0x02;
    }
    if timestamps != TimestampsToReturn::Server {
        mask |= 0x04;
    }
    if timestamps != TimestampsToReturn::Source {
        mask |= 0x08;
    }
    out.push(mask);
    if mask & 0x01 != 0 {
        sample.value.encode(out);
    }
    if mask & 0x02 != 0 {
        StatusCode(status).encode(out);
    }
    if mask & 0x04 != 0 {
        DateTime(sample.source_ts).encode(out);
    }
    if mask & 0x08 != 0 {
        DateTime(sample.server_ts).encode(out);
    }
}

/// A raw value as the operation asks for it: its timestamps and its IndexRange.
fn finish(dv: DataValue, op: &HistoryReadOp) -> DataValue {
    let mut dv = stamp(dv, op.timestamps);
    if let Some(range) = &op.index_range {
        match range.read(&dv.value) {
            Ok(v) => dv.value = v,
            Err(status) => {
                dv.value = Variant::Empty;
                dv.status = Some(status);
            }
        }
    }
    dv
}

/// Keeps the timestamps asked for.
fn stamp(mut dv: DataValue, ts: TimestampsToReturn) -> DataValue {
    if ts == TimestampsToReturn::Source {
        dv.server_timestamp = None;
    } else if ts == TimestampsToReturn::Server {
        dv.source_timestamp = None;
    }
    dv
}

fn history_result(values: Vec<DataValue>, token: Option<Vec<u8>>) -> HistoryReadResult {
    data_result(
        values.is_empty(),
        token,
        ExtensionObject::from_struct(&HistoryData {
            data_values: values,
        }),
    )
}

/// A HistoryRead result of `history_data` (`empty`: it holds no values): GoodNoData when
/// it is empty and nothing follows, else Good.
fn data_result(
    empty: bool,
    token: Option<Vec<u8>>,
    history_data: ExtensionObject,
) -> HistoryReadResult {
    HistoryReadResult {
        status_code: if empty && token.is_none() {
            StatusCode::GoodNoData
        } else {
            StatusCode::Good
        },
        continuation_point: token.map(Into::into).unwrap_or_default(),
        history_data,
    }
}

/// The SourceTimestamps at which a node has modified values kept, ascending, each once
/// ([`Historian::modified_among`]): its values there carry the ExtraData bit.
struct ModifiedTimes(Vec<i64>);

impl ModifiedTimes {
    fn contains(&self, t: i64) -> bool {
        !self.0.is_empty() && self.0.binary_search(&t).is_ok()
    }

    /// Sets the ExtraData bit of `d` when modified values are kept at its SourceTimestamp.
    fn mark(&self, d: &mut DataValue) {
        if d.source_timestamp.is_some_and(|t| self.contains(t.0)) {
            d.status = Some(aggregate::with_bits(
                d.status.unwrap_or(StatusCode::Good),
                aggregate::bits::EXTRA_DATA,
            ));
        }
    }
}

/// `[history]` of the configuration file (docs/History.md, docs/Configuration.md).
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HistoryConfig {
    /// On or off; unset: on when the application (or the Demo folder) historizes a
    /// Variable.
    pub enabled: Option<bool>,
    /// Where history is kept: `embedded` (the store in `dir`) or `postgres` (a PostgreSQL
    /// database, `[history.postgres]`).
    pub backend: String,
    /// The PostgreSQL backend's connection and writers.
    pub postgres: PostgresConfig,
    /// The store's directory (created when missing; one server at a time).
    pub dir: std::path::PathBuf,
    /// How often the store makes what it received durable (fsync), ms: what a crash can
    /// lose. 1..=60000.
    pub flush_interval_ms: u32,
    /// Segments whose newest value is older than this are deleted, seconds (unset: kept).
    pub retention_age_s: Option<u64>,
    /// The oldest segments are deleted while the store is larger, bytes (unset: no limit).
    pub retention_bytes: Option<u64>,
    /// Values waiting for the writer thread, all shards together (≥ 1).
    pub queue_capacity: usize,
    /// A full queue drops the value being stored (`drop-newest`) or the oldest waiting one
    /// (`drop-oldest`); either way it is counted.
    pub on_full: String,
    /// Threads answering HistoryRead (1..=64).
    pub read_threads: usize,
    /// Nice value of the writer, sync and reader threads (0..=19): above the shards' 0, so
    /// history work that shares a CPU with a shard yields to it.
    pub nice: i32,
    /// Scheduling policy of the writer threads (and the store's sync thread): `batch`
    /// (SCHED_BATCH at `nice`), `normal` (SCHED_OTHER at `nice`) or `idle` (SCHED_IDLE).
    pub writer_policy: String,
    /// HistoryRead operations waiting for a reader thread (≥ 1); one more is
    /// BadResourceUnavailable.
    pub read_queue: usize,
    /// Variables to historize besides those the application or a NodeSet marks: NodeIds
    /// (`ns=2;s=Boiler.Temp`, `nsu=urn:…;i=1001`), or a string-id prefix ending in `*`
    /// (`nsu=http://example.com/boiler/;s=Boiler.*`). Each must match at least one Variable
    /// with a stored value (else the start fails, naming it); a prefix may match none at
    /// start. Variables added while the server runs that they name are historized too.
    pub nodes: Vec<String>,
    /// Most Variables historized while the server runs (added by AddNodes with
    /// Historizing, the library, or named by `nodes`), at once; 0: none. ≤ 1,000,000.
    pub max_run_time_historized: usize,
    /// Variables historized on a sampling interval instead of by change
    /// (`[[history.sampled]]`): stored, computed and asynchronous ones at start, stored ones
    /// added while the server runs.
    pub sampled: Vec<SampledConfig>,
    /// Objects and Views whose events are historized besides the Server object's (and a
    /// NodeSet's notifiers with HistoryRead): the patterns of `nodes`, each naming a node
    /// whose EventNotifier has SubscribeToEvents; they get HistoryRead and HistoryWrite in
    /// it. At start only.
    pub event_notifiers: Vec<String>,
    /// Which values of the Variables named are kept (`[[history.collection]]`): their
    /// HistoricalDataConfiguration's MinTimeInterval, MaxTimeInterval and ExceptionDeviation.
    pub collection: Vec<super::collection::CollectionConfig>,
    /// Where the history threads run: `runtime.background_cpus`, resolved at start (not a
    /// `[history]` key).
    #[serde(skip)]
    pub cpus: crate::background::BackgroundCpus,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            enabled: None,
            backend: "embedded".to_string(),
            postgres: PostgresConfig::default(),
            dir: std::path::PathBuf::from("history"),
            flush_interval_ms: 1000,
            retention_age_s: None,
            retention_bytes: None,
            queue_capacity: 1 << 18,
            on_full: "drop-newest".to_string(),
            read_threads: 2,
            read_queue: 1024,
            nice: 10,
            writer_policy: "batch".to_string(),
            nodes: Vec::new(),
            max_run_time_historized: DEFAULT_MAX_RUN_TIME_HISTORIZED,
            sampled: Vec::new(),
            event_notifiers: Vec::new(),
            collection: Vec::new(),
            cpus: crate::background::BackgroundCpus::any(),
        }
    }
}

impl HistoryConfig {
    /// The store's configuration, checked.
    pub fn store_config(&self) -> Result<super::StoreConfig, String> {
        if !(1..=60_000).contains(&self.flush_interval_ms) {
            return Err("history.flush_interval_ms must be 1..=60000".into());
        }
        if self.queue_capacity == 0 || self.read_queue == 0 {
            return Err("history.queue_capacity and history.read_queue must be at least 1".into());
        }
        if !(1..=64).contains(&self.read_threads) {
            return Err("history.read_threads must be 1..=64".into());
        }
        if !(0..=19).contains(&self.nice) {
            return Err("history.nice must be 0..=19".into());
        }
        if self.max_run_time_historized > 1_000_000 {
            return Err("history.max_run_time_historized must be 0..=1000000".into());
        }
        for c in &self.sampled {
            if !(SAMPLED_INTERVAL_MIN_MS..=SAMPLED_INTERVAL_MAX_MS).contains(&c.interval_ms) {
                return Err(format!(
                    "history.sampled interval_ms must be {SAMPLED_INTERVAL_MIN_MS}..={SAMPLED_INTERVAL_MAX_MS}"
                ));
            }
            if c.nodes.is_empty() {
                return Err("history.sampled: an entry without nodes".into());
            }
        }
        for c in &self.collection {
            c.collection()?;
        }
        let on_full = match self.on_full.as_str() {
            "drop-newest" => super::OnFull::DropNewest,
            "drop-oldest" => super::OnFull::DropOldest,
            other => {
                return Err(format!(
                    "history.on_full = {other:?} (expected drop-newest or drop-oldest)"
                ))
            }
        };
        match self.backend.as_str() {
            "embedded" | "postgres" => {}
            other => {
                return Err(format!(
                    "history.backend = {other:?} (expected embedded or postgres)"
                ))
            }
        }
        let writer_policy = super::WriterPolicy::parse(&self.writer_policy).ok_or_else(|| {
            format!(
                "history.writer_policy = {:?} (expected normal, batch or idle)",
                self.writer_policy
            )
        })?;
        let mut c = super::StoreConfig::new(&self.dir);
        c.writer_policy = writer_policy;
        c.flush_interval_ms = self.flush_interval_ms;
        c.retention_age_s = self.retention_age_s;
        c.retention_bytes = self.retention_bytes;
        c.queue_capacity = self.queue_capacity;
        c.on_full = on_full;
        c.nice = self.nice;
        c.cpus = self.cpus.clone();
        Ok(c)
    }
}

impl HistoryConfig {
    /// The PostgreSQL backend's configuration, checked (the password read from its file
    /// or variable).
    pub fn pg_config(&self) -> Result<PgConfig, String> {
        let store = self.store_config()?;
        if self.retention_bytes.is_some() {
            return Err("history.retention_bytes is for the embedded store; with backend = \"postgres\" use retention_age_s (or the database's own means)".into());
        }
        let (client, target) = self.postgres.client_config()?;
        Ok(PgConfig {
            client,
            target,
            writer_threads: self.postgres.writer_threads,
            batch_samples: self.postgres.batch_samples,
            reconnect_max_ms: self.postgres.reconnect_max_ms,
            queue_capacity: store.queue_capacity,
            on_full: store.on_full,
            retention_age_s: store.retention_age_s,
            retention_check_ms: 60_000,
            nice: store.nice,
            writer_policy: store.writer_policy,
            cpus: store.cpus,
        })
    }

    /// Where the history is, for logs: the store's directory or the database (never its
    /// password).
    pub fn location(&self) -> String {
        if self.backend == "postgres" {
            self.postgres
                .client_config()
                .map(|(_, t)| format!("database {t}"))
                .unwrap_or_else(|_| "database (misconfigured)".into())
        } else {
            format!("store in {}", self.dir.display())
        }
    }
}

/// Takes `[history]` out of the file's server table.
pub fn take_config(table: &mut toml::Table) -> Result<HistoryConfig, String> {
    let c = match table.remove("history") {
        Some(v) => v
            .try_into::<HistoryConfig>()
            .map_err(|e| format!("[history]: {e}"))?,
        None => HistoryConfig::default(),
    };
    c.store_config()?;
    if c.backend == "postgres" {
        c.pg_config()?;
    }
    Ok(c)
}

/// One `history.nodes` entry: a namespace (by index or URI) and an identifier, exact or a
/// string prefix.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Pattern {
    Exact(NodeId),
    Prefix { namespace: u16, prefix: String },
}

pub(super) fn parse_pattern(p: &str, uris: &[String]) -> Result<Pattern, String> {
    let (namespace, rest) = if let Some(r) = p.strip_prefix("nsu=") {
        let (uri, rest) = r
            .split_once(';')
            .ok_or_else(|| format!("history.nodes {p:?}: expected nsu=<uri>;<id>"))?;
        let ix = uris.iter().position(|u| u == uri).ok_or_else(|| {
            format!("history.nodes {p:?}: no namespace {uri:?} in the address space")
        })?;
        (ix as u16, rest)
    } else if let Some(r) = p.strip_prefix("ns=") {
        let (n, rest) = r
            .split_once(';')
            .ok_or_else(|| format!("history.nodes {p:?}: expected ns=<index>;<id>"))?;
        let n: u16 = n
            .parse()
            .map_err(|_| format!("history.nodes {p:?}: bad namespace index"))?;
        (n, rest)
    } else {
        (0, p)
    };
    if let Some(prefix) = rest.strip_prefix("s=").and_then(|s| s.strip_suffix('*')) {
        return Ok(Pattern::Prefix {
            namespace,
            prefix: prefix.to_string(),
        });
    }
    let id = NodeId::parse(&format!("ns={namespace};{rest}"))
        .ok_or_else(|| format!("history.nodes {p:?}: not a NodeId or a prefix ending in *"))?;
    Ok(Pattern::Exact(id))
}

impl Pattern {
    pub(super) fn matches(&self, id: &NodeId) -> bool {
        match self {
            Pattern::Exact(x) => x == id,
            Pattern::Prefix { namespace, prefix } => {
                id.namespace == *namespace
                    && matches!(&id.identifier, uaring_core::types::Identifier::String(s) if s.as_str().starts_with(prefix.as_str()))
            }
        }
    }
}

/// How the Variables a configuration key names are historized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recording {
    /// By change (`[history] nodes`): only a stored value has changes.
    ByChange,
    /// On a sampling interval (`[[history.sampled]]`): a computed or asynchronous value is
    /// read as a stored one is.
    Sampled,
}

impl Recording {
    /// The configuration key, for errors.
    fn key(self) -> &'static str {
        match self {
            Recording::ByChange => "history.nodes",
            Recording::Sampled => "history.sampled",
        }
    }
}

/// Gives the Variables that `patterns` name (by `how`: with a stored value, or also a
/// computed or asynchronous one when sampled) Historizing and the HistoryRead and
/// HistoryWrite bits. A NodeId that names no such Variable stops the start (a prefix may
/// name only Variables added while the server runs). Run while the address space is built,
/// after the NodeSets and the application's nodes. Returns how many there are.
pub fn historize_nodes(
    b: &mut uaring_core::address_space::build::AddressSpaceBuilder,
    patterns: &[String],
    how: Recording,
) -> Result<usize, String> {
    use uaring_core::address_space::access_level::{HISTORY_READ, HISTORY_WRITE};
    use uaring_core::address_space::store::SourceView;
    let sampled = how == Recording::Sampled;
    mark_named(
        b,
        patterns,
        (
            how.key(),
            if sampled {
                "Variable with a stored, computed or asynchronous value"
            } else {
                "Variable with a stored value"
            },
        ),
        |n| {
            n.value_cell().is_some()
                || sampled
                    && n.as_variable().is_some_and(|v| {
                        matches!(v.source(), SourceView::Computed(_) | SourceView::Async(_))
                    })
        },
        |node| {
            if let ClassAttributes::Variable(v) = &mut node.attributes {
                v.historizing = true;
                v.access_level |= HISTORY_READ | HISTORY_WRITE;
                v.user_access_level |= HISTORY_READ | HISTORY_WRITE;
            }
        },
    )
}

/// Gives the Objects and Views that `patterns` (`[history] event_notifiers`) name, whose
/// EventNotifier has SubscribeToEvents, HistoryRead and HistoryWrite in it: the historian then
/// keeps the events reported on them ([`Historian::attach`]). A NodeId that names no such node
/// stops the start. Returns how many there are.
pub fn historize_notifiers(
    b: &mut uaring_core::address_space::build::AddressSpaceBuilder,
    patterns: &[String],
) -> Result<usize, String> {
    use uaring_core::address_space::event_notifier::{
        HISTORY_READ, HISTORY_WRITE, SUBSCRIBE_TO_EVENTS,
    };
    mark_named(
        b,
        patterns,
        (
            "history.event_notifiers",
            "Object or View with SubscribeToEvents",
        ),
        |n| {
            n.event_notifier()
                .is_some_and(|e| e & SUBSCRIBE_TO_EVENTS != 0)
        },
        |node| {
            if let ClassAttributes::Object { event_notifier }
            | ClassAttributes::View { event_notifier, .. } = &mut node.attributes
            {
                *event_notifier |= HISTORY_READ | HISTORY_WRITE;
            }
        },
    )
}

/// Applies `mark` to every node `eligible` accepts that one of `patterns` names; a NodeId
/// pattern that names none is an error (`what`: the key and the kind of node, for it).
fn mark_named(
    b: &mut uaring_core::address_space::build::AddressSpaceBuilder,
    patterns: &[String],
    what: (&str, &str),
    eligible: impl Fn(&uaring_core::address_space::store::NodeView<'_>) -> bool,
    mut mark: impl FnMut(&mut uaring_core::address_space::Node),
) -> Result<usize, String> {
    let parsed = patterns
        .iter()
        .map(|p| parse_pattern(p, b.namespace_uris()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut hits = vec![0usize; parsed.len()];
    b.update_where(
        |n| {
            eligible(&n) && {
                let id = n.node_id();
                parsed.iter().any(|p| p.matches(&id))
            }
        },
        |node| {
            mark(node);
            for (i, p) in parsed.iter().enumerate() {
                if p.matches(&node.node_id) {
                    if let Some(h) = hits.get_mut(i) {
                        *h += 1;
                    }
                }
            }
        },
    );
    if let Some((i, _)) = hits
        .iter()
        .enumerate()
        .find(|(i, h)| **h == 0 && matches!(parsed.get(*i), Some(Pattern::Exact(_))))
    {
        return Err(format!(
            "{} {:?} matches no {}",
            what.0,
            patterns.get(i).map(String::as_str).unwrap_or(""),
            what.1
        ));
    }
    Ok(hits.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[[history.sampled]]` is parsed from the file and its bounds are checked.
    #[test]
    fn sampled_entries_are_read_and_checked() {
        let c: HistoryConfig =
            toml::from_str("[[sampled]]\nnodes = [\"ns=1;s=Boiler.*\"]\ninterval_ms = 500\n")
                .unwrap();
        assert_eq!(
            c.sampled,
            vec![SampledConfig {
                nodes: vec!["ns=1;s=Boiler.*".into()],
                interval_ms: 500
            }]
        );
        assert!(c.store_config().is_ok());
        for (nodes, ms) in [(vec!["ns=1;i=1".to_string()], 5), (Vec::new(), 500)] {
            let bad = HistoryConfig {
                sampled: vec![SampledConfig {
                    nodes,
                    interval_ms: ms,
                }],
                ..HistoryConfig::default()
            };
            assert!(bad.store_config().is_err());
        }
        assert!(
            toml::from_str::<HistoryConfig>("[[sampled]]\nnodes = []\nintervalms = 5\n").is_err()
        );
    }

    /// A reader thread keeps a read's buffer for the next read up to its bound, frees a
    /// larger one after its read, and frees what it keeps when told it is idle.
    #[test]
    fn a_reader_keeps_its_read_buffers_up_to_their_bound() {
        assert!(!holds_read_buffers());
        let cap = with_kept(&SAMPLES, |b| {
            b.reserve(1000);
            b.capacity()
        });
        assert!(holds_read_buffers());
        // The next read gets the same buffer, empty.
        with_kept(&SAMPLES, |b| {
            assert!(b.is_empty());
            assert_eq!(b.capacity(), cap);
        });
        free_read_buffers();
        assert!(!holds_read_buffers());
        with_kept(&RAW_VALUES, |b| {
            b.reserve(READ_BUFFER_KEEP_BYTES / std::mem::size_of::<DataValue>() + 1)
        });
        assert!(!holds_read_buffers());
    }

    /// A raw value encoded straight from its sample has the bytes of the DataValue the read
    /// made before (`plain`, the ExtraData bit, the timestamps asked for).
    #[test]
    fn raw_values_encode_as_their_data_values_did() {
        let samples = [
            Sample {
                source_ts: 133_000_000_000_000_000,
                server_ts: 133_000_000_000_000_123,
                status: 0,
                value: Variant::Double(21.5),
            },
            Sample {
                source_ts: 1,
                server_ts: 0,
                status: StatusCode::UncertainLastUsableValue.0,
                value: Variant::String(UaString::from("text")),
            },
            Sample {
                source_ts: 5,
                server_ts: 6,
                status: StatusCode::BadNoCommunication.0,
                value: Variant::Empty,
            },
        ];
        let all = [
            TimestampsToReturn::Source,
            TimestampsToReturn::Server,
            TimestampsToReturn::Both,
            TimestampsToReturn::Neither,
        ];
        for sample in &samples {
            for ts in all {
                for extra in [false, true] {
                    let mut dv = plain(sample.clone());
                    if extra {
                        dv.status = Some(aggregate::with_bits(
                            dv.status.unwrap_or(StatusCode::Good),
                            aggregate::bits::EXTRA_DATA,
                        ));
                    }
                    let want = stamp(dv, ts).to_bytes();
                    let mut got = Vec::new();
                    encode_raw(sample, extra, ts, &mut got);
                    assert_eq!(got, want, "{sample:?} {ts:?} extra {extra}");
                }
            }
        }
    }

    #[test]
    fn patterns_name_nodes_exactly_or_by_prefix() {
        let uris = vec![
            "http://opcfoundation.org/UA/".to_string(),
            "urn:uaring:server".to_string(),
            "urn:boiler".to_string(),
        ];
        let p = parse_pattern("nsu=urn:boiler;s=Boiler.*", &uris).unwrap();
        assert!(p.matches(&NodeId::string(2, "Boiler.Temp")));
        assert!(!p.matches(&NodeId::string(1, "Boiler.Temp")));
        assert!(!p.matches(&NodeId::string(2, "Pump.Temp")));
        assert_eq!(
            parse_pattern("ns=1;i=1001", &uris).unwrap(),
            Pattern::Exact(NodeId::numeric(1, 1001))
        );
        assert!(parse_pattern("nsu=urn:nowhere;s=A", &uris).is_err());
        assert!(parse_pattern("ns=x;s=A", &uris).is_err());
        assert!(parse_pattern("ns=1;q=?", &uris).is_err());
    }

    #[test]
    fn writer_policy_is_parsed_and_checked() {
        let c = |p: &str| {
            HistoryConfig {
                writer_policy: p.into(),
                ..HistoryConfig::default()
            }
            .store_config()
            .map(|c| c.writer_policy)
        };
        assert_eq!(c("batch"), Ok(super::super::WriterPolicy::Batch));
        assert_eq!(c("idle"), Ok(super::super::WriterPolicy::Idle));
        assert_eq!(c("normal"), Ok(super::super::WriterPolicy::Normal));
        assert!(c("fifo").unwrap_err().contains("writer_policy"));
        assert_eq!(
            HistoryConfig::default()
                .store_config()
                .map(|c| c.writer_policy),
            Ok(super::super::WriterPolicy::Batch)
        );
    }
}
