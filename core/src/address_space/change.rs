//! The change path: how a value stored on one thread reaches the exception-based monitored
//! items (sampling interval 0) of every shard, every change and in order.
//!
//! Sampling items read the value cells on their own deadlines and need nothing from here.
//! An exception-based item must see *every* change, including several within one
//! publishing interval, so each store is also handed to the shards that watch the node:
//!
//! * **Watchers.** One `AtomicU64` per node: bit `i` is set while shard `i` (< 63) has an
//!   exception-based item on the node; bit 63 stands for every shard from 63 up. A store
//!   with no watcher costs one fence and one load on top of the cell write.
//! * **Versions.** Every store gives the cell a new, larger version (the seqlock's sequence
//!   number, or the version inside the swapped `Arc`). A change carries it, so a shard can
//!   tell a change it already saw (the value it read when the item started) from a new one,
//!   and of two writers racing on one node it keeps the cell's order.
//! * **Per-shard inboxes.** Each watching shard has one bounded lock-free queue
//!   ([`crossbeam_queue::ArrayQueue`], multi-producer) of [`Change`]s, allocated when the
//!   shard first watches a node (`[subscriptions] change_queue_per_shard` entries). A push
//!   copies the value into the entry: a scalar inline, anything else as the `Arc` the cell
//!   holds. Nothing is allocated per change for scalars.
//! * **Wake.** The shard drains its inbox every loop iteration and before its timers, so a
//!   busy shard needs no wake. A sleeping one is woken (its event loop's eventfd or
//!   MSG_RING, handed in by the runtime) once its inbox is a quarter full, at most once per
//!   drain; otherwise the changes wait for the next publishing cycle, which is when they
//!   would be reported anyway.
//! * **Full inbox.** A change that finds the inbox full is counted as lost for that shard
//!   (never blocking the writer), and its node is marked in the shard's lost-node bitmap.
//!   The shard, when it next drains, resynchronises the exception-based items of those nodes
//!   with their cells' current values and marks one with the Overflow bit (queues longer
//!   than one) only where the cell's version moved past the item's by more than one store
//!   (every store adds 2), so a client learns that values were dropped and still ends on the
//!   current one, and a resynchronised item that missed nothing carries no bit.
//!
//! The ordering argument for a new watcher: the shard sets its bit, issues a SeqCst fence,
//! then reads the cell; a writer stores into the cell, issues a SeqCst fence, then reads the
//! bits. Either the shard's read sees the store or the writer's read sees the bit (or both,
//! and the version drops the duplicate).

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_queue::ArrayQueue;

use super::value::Versioned;
use crate::types::{DataValue, NodeId, StatusCode};

use crate::config::MAX_SHARDS;

/// The watcher bit that stands for every shard from 63 up.
const HIGH_SHARDS_BIT: u32 = 63;

/// A woken shard's hook (the runtime's eventfd write or MSG_RING).
pub type WakeFn = Arc<dyn Fn() + Send + Sync>;

/// One stored value on its way to a shard.
#[derive(Clone, Debug)]
pub struct Change {
    /// The node's index in the address space.
    pub node_index: u32,
    /// The node's generation ([`super::Node::generation`]): a change of a node since
    /// deleted never reaches the items of another node added at its index.
    pub generation: u32,
    /// The cell's version after this store.
    pub version: u64,
    pub value: ChangeValue,
}

/// The value of a [`Change`]: copied when it is a scalar, shared otherwise.
#[derive(Clone, Debug)]
pub enum ChangeValue {
    Inline(DataValue),
    Shared(Arc<Versioned>),
}

impl ChangeValue {
    /// The stored value.
    pub fn data_value(&self) -> &DataValue {
        match self {
            ChangeValue::Inline(dv) => dv,
            ChangeValue::Shared(v) => &v.value,
        }
    }
}

/// One shard's inbox.
struct Inbox {
    queue: ArrayQueue<Change>,
    /// Changes that found the queue full since the shard last drained.
    lost: AtomicU64,
    /// The nodes whose changes were lost (one bit per node), so the shard resynchronises the
    /// items of those nodes only.
    lost_nodes: Box<[AtomicU64]>,
    /// A wake was sent and the shard has not drained since.
    wake_pending: AtomicBool,
    /// Queue length at which a producer wakes the shard.
    wake_at: usize,
}

#[derive(Default)]
struct ShardSlot {
    inbox: OnceLock<Inbox>,
    waker: OnceLock<WakeFn>,
    /// Answers of the application to this shard's asynchronous operations.
    completions: OnceLock<ArrayQueue<super::app::Completion>>,
    /// A wake for completions was sent and the shard has not drained since.
    completion_wake_pending: AtomicBool,
}

/// Counters of the change path (per hub, over all shards).
#[derive(Debug, Default)]
pub struct ChangeCounters {
    /// Changes handed to a shard's inbox.
    pub queued: AtomicU64,
    /// Changes that found an inbox full.
    pub lost: AtomicU64,
    /// Wakes sent to sleeping shards.
    pub wakes: AtomicU64,
}

/// Takes every value stored in a recorded node (the history store's ingest: historized
/// Variables, Part 11 "by change"). Called on the storing thread — a shard, or the
/// application's — after the store: it must not block or wait (hand the value to a
/// bounded queue and count what does not fit).
pub trait ChangeRecorder: Send + Sync {
    fn record(&self, node_index: u32, value: &DataValue);
    /// The recorded node at `node_index` was removed ([`ChangeHub::forget`]): no more of
    /// its stores come. Called on the thread that published the removal.
    fn forget(&self, _node_index: u32) {}
}

/// Historizes Variables added while the server runs (the history store behind the
/// recorder): asked for by the adder (AddNodes with Historizing, the library) or named by
/// the configured node patterns. Set once per hub ([`ChangeHub::set_run_time_history`]).
/// Nothing here waits for the store: the calls run on a shard (AddNodes) or the
/// application's thread.
pub trait RunTimeHistory: Send + Sync {
    /// Does the configuration name `node_id` for history (its node patterns)?
    fn wants(&self, node_id: &NodeId) -> bool;
    /// Takes one place among the run-time historized Variables (`BadResourceUnavailable`
    /// when all are taken: the configured bound).
    fn reserve(&self) -> Result<(), StatusCode>;
    /// Gives back a place [`RunTimeHistory::reserve`] took and no node used (the node was
    /// refused, or the edit not published).
    fn release(&self);
    /// Historizes the Variable at `node_index` of `space` (a published version), in the
    /// place a reserve took: its stores go to the store from now on.
    fn historize(&self, space: &super::AddressSpace, node_index: u32);
    /// The collection rules (MinTimeInterval, MaxTimeInterval, ExceptionDeviation) that
    /// apply to `node_id`: an index into the list its HA Configuration Objects were built
    /// from ([`crate::history::configuration::add`]); `None`: every value is kept.
    fn collection(&self, _node_id: &NodeId) -> Option<usize> {
        None
    }
}

/// Makes `node` (a Variable about to be added at run time) historized when `asked` (the
/// adder wants history) or when the run-time history's node patterns name it: Historizing
/// true, HistoryRead in its AccessLevel and UserAccessLevel (and HistoryWrite when the
/// patterns name it, as at start, or when `history_write` asks). `Ok(true)`: a place was
/// reserved, and the caller calls [`RunTimeHistory::historize`] once the node is published,
/// or [`RunTimeHistory::release`] when it is not. `Err`: asked and not possible —
/// `BadNodeAttributesInvalid` without a history store (or for a Variable without a stored
/// value), `BadResourceUnavailable` at the bound. Named only by the patterns and at the
/// bound: `Ok(false)`, the node is added without history (Historizing stays false).
pub fn prepare_historized(
    hub: &ChangeHub,
    node: &mut super::Node,
    asked: bool,
    history_write: bool,
) -> Result<bool, StatusCode> {
    use super::access_level::{HISTORY_READ, HISTORY_WRITE};
    let stored = node.value_cell().is_some();
    let Some(h) = hub.run_time_history() else {
        return if asked {
            Err(StatusCode::BadNodeAttributesInvalid)
        } else {
            Ok(false)
        };
    };
    let named = stored && h.wants(&node.node_id);
    if !asked && !named {
        return Ok(false);
    }
    if !stored {
        return Err(StatusCode::BadNodeAttributesInvalid);
    }
    match h.reserve() {
        Ok(()) => {}
        Err(s) if asked => return Err(s),
        Err(_) => return Ok(false),
    }
    let bits = HISTORY_READ
        | if named || history_write {
            HISTORY_WRITE
        } else {
            0
        };
    let stepped = node
        .value_cell()
        .is_none_or(|c| super::history_configuration::stepped(&c.load().value));
    match &mut node.attributes {
        super::ClassAttributes::Variable(v) => {
            v.historizing = true;
            v.access_level |= bits;
            v.user_access_level |= bits;
            // Its HistoricalDataConfiguration: the HA Configuration Objects exist wherever a
            // run-time history does (`history::configuration::add` at start).
            node.references.0.push(super::Reference {
                reference_type: NodeId::ns0(crate::generated::node_ids::HasHistoricalConfiguration),
                is_forward: true,
                target: crate::types::ExpandedNodeId::local(
                    super::history_configuration::configuration_in(
                        h.collection(&node.node_id),
                        stepped,
                    ),
                ),
            });
            Ok(true)
        }
        _ => {
            h.release();
            Err(StatusCode::BadNodeAttributesInvalid)
        }
    }
}

/// What the monitored items of one shard on one node ask for: the demand signal a
/// [`DemandSink`] receives.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Demand {
    /// Enabled data items (Sampling or Reporting) on the node's Value on this shard; 0 when
    /// the last one went.
    pub items: u32,
    /// The fastest revised sampling interval among them, ms (0: an exception-based item).
    pub sampling_ms: f64,
    /// The deepest queue among them.
    pub queue_size: u32,
}

/// Told, shard by shard, when the data items on a node marked with
/// [`ChangeHub::track_demand`] come, change or go (a gateway keeps one item of another
/// server per node while anyone here monitors it). Each call carries the shard's whole
/// demand on the node (a state, not a delta), so a later call supersedes an earlier one.
pub trait DemandSink: Send + Sync {
    /// Shard `shard`'s demand on node `node_index` (of `generation`) is now `demand`. Called
    /// on the shard after the change, off the request's answer; it must not block or wait.
    /// `false`: not taken now (a full queue): the shard offers the node's demand again at its
    /// next timer pass (its newest state then), so nothing is lost and nothing waits.
    fn demand(&self, shard: usize, node_index: u32, generation: u32, demand: Demand) -> bool;
}

/// Every shard's inbox and every node's watcher bits. Built with the address space.
pub struct ChangeHub {
    watchers: Box<[AtomicU64]>,
    shards: Box<[ShardSlot]>,
    counters: ChangeCounters,
    /// One bit per node: its stores go to `recorder`.
    recorded: Box<[AtomicU64]>,
    recorder: OnceLock<Arc<dyn ChangeRecorder>>,
    /// Historizes Variables added at run time (the history store, when there is one).
    run_time_history: OnceLock<Arc<dyn RunTimeHistory>>,
    /// One bit per node: the shards tell `demand_sink` about the items on it.
    demanded: Box<[AtomicU64]>,
    demand_sink: OnceLock<Arc<dyn DemandSink>>,
}

impl std::fmt::Debug for ChangeHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeHub")
            .field("nodes", &self.watchers.len())
            .finish()
    }
}

impl ChangeHub {
    /// A hub for node indexes below `nodes` (the address space's nodes at start and the
    /// room for nodes added at run time, `operation_limits.max_run_time_nodes`).
    pub fn new(nodes: usize) -> ChangeHub {
        ChangeHub {
            watchers: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            shards: (0..MAX_SHARDS).map(|_| ShardSlot::default()).collect(),
            counters: ChangeCounters::default(),
            recorded: (0..nodes.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            recorder: OnceLock::new(),
            run_time_history: OnceLock::new(),
            demanded: (0..nodes.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            demand_sink: OnceLock::new(),
        }
    }

    /// Sets the sink of the demand signal (once per hub: a second one is refused with
    /// `false`).
    pub fn set_demand_sink(&self, sink: Arc<dyn DemandSink>) -> bool {
        self.demand_sink.set(sink).is_ok()
    }

    /// The sink of the demand signal, once set.
    #[inline]
    pub fn demand_sink(&self) -> Option<&Arc<dyn DemandSink>> {
        self.demand_sink.get()
    }

    /// Marks (or unmarks) node `node_index`: the data items every shard starts or stops on
    /// it from now on are told to the sink. Mark a node before it is published (an item
    /// created on it earlier is not told). `false` for an index out of range.
    pub fn track_demand(&self, node_index: u32, on: bool) -> bool {
        let Some(w) = self.demanded.get(node_index as usize / 64) else {
            return false;
        };
        let bit = 1u64 << (node_index % 64);
        if on {
            w.fetch_or(bit, Ordering::SeqCst);
        } else {
            w.fetch_and(!bit, Ordering::SeqCst);
        }
        true
    }

    /// Is node `node_index` marked for the demand signal? (One relaxed load.)
    #[inline]
    pub fn demand_tracked(&self, node_index: u32) -> bool {
        self.demanded
            .get(node_index as usize / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (node_index % 64)) != 0)
    }

    /// Hands every later store of the nodes `nodes` to `recorder` (once per hub: a second
    /// recorder is refused with `false`, and so is a node index out of range).
    pub fn record(
        &self,
        recorder: Arc<dyn ChangeRecorder>,
        nodes: impl IntoIterator<Item = u32>,
    ) -> bool {
        if self.recorder.set(recorder).is_err() {
            return false;
        }
        let mut ok = true;
        for n in nodes {
            match self.recorded.get(n as usize / 64) {
                Some(w) => {
                    w.fetch_or(1 << (n % 64), Ordering::SeqCst);
                }
                None => ok = false,
            }
        }
        fence(Ordering::SeqCst);
        ok
    }

    /// Hands the later stores of node `node_index` to the recorder set by
    /// [`ChangeHub::record`] (a Variable historized at run time). `false` without a recorder
    /// or for an index out of range. Followed by a SeqCst fence, as `record`.
    pub fn record_node(&self, node_index: u32) -> bool {
        if self.recorder.get().is_none() {
            return false;
        }
        let Some(w) = self.recorded.get(node_index as usize / 64) else {
            return false;
        };
        w.fetch_or(1 << (node_index % 64), Ordering::SeqCst);
        fence(Ordering::SeqCst);
        true
    }

    /// Sets what historizes Variables added at run time (once per hub: a second one is
    /// refused with `false`).
    pub fn set_run_time_history(&self, h: Arc<dyn RunTimeHistory>) -> bool {
        self.run_time_history.set(h).is_ok()
    }

    /// What historizes Variables added at run time, when the server keeps history.
    pub fn run_time_history(&self) -> Option<&Arc<dyn RunTimeHistory>> {
        self.run_time_history.get()
    }

    #[inline]
    fn is_recorded(&self, node_index: u32) -> bool {
        self.recorded
            .get(node_index as usize / 64)
            .is_some_and(|w| w.load(Ordering::Relaxed) & (1 << (node_index % 64)) != 0)
    }

    /// The counters.
    pub fn counters(&self) -> &ChangeCounters {
        &self.counters
    }

    fn bit(shard: usize) -> u64 {
        1u64 << (shard as u32).min(HIGH_SHARDS_BIT)
    }

    /// Sets the hook that wakes shard `shard` (the runtime calls it once per shard).
    pub fn set_waker(&self, shard: usize, wake: WakeFn) {
        if let Some(s) = self.shards.get(shard) {
            let _ = s.waker.set(wake);
        }
    }

    /// Wakes shard `shard`'s loop, if the runtime set its waker (rare cross-shard requests:
    /// a reader of the diagnostics arrays asks the shards for fresh snapshots).
    pub fn wake(&self, shard: usize) {
        // Not counted in `wakes` (those are the change path's).
        if let Some(wake) = self.shards.get(shard).and_then(|s| s.waker.get()) {
            wake();
        }
    }

    /// Opens shard `shard`'s inbox with `capacity` entries (once; later calls keep the first).
    pub fn open(&self, shard: usize, capacity: usize) {
        if let Some(s) = self.shards.get(shard) {
            let capacity = capacity.max(1);
            let words = self.watchers.len().div_ceil(64);
            s.inbox.get_or_init(|| Inbox {
                queue: ArrayQueue::new(capacity),
                lost: AtomicU64::new(0),
                lost_nodes: (0..words).map(|_| AtomicU64::new(0)).collect(),
                wake_pending: AtomicBool::new(false),
                wake_at: (capacity / 4).max(1),
            });
        }
    }

    /// Shard `shard` starts watching node `node_index`. Followed by a SeqCst fence: a
    /// value read from the cell after this call is either the newest or older than a
    /// change that will arrive in the inbox.
    pub fn watch(&self, shard: usize, node_index: u32) {
        if let Some(w) = self.watchers.get(node_index as usize) {
            w.fetch_or(Self::bit(shard), Ordering::SeqCst);
        }
        fence(Ordering::SeqCst);
    }

    /// Shard `shard` no longer watches node `node_index`. A shard ≥ 63 shares its bit with
    /// the others from 63 up and leaves it set (those shards drop changes they do not watch).
    pub fn unwatch(&self, shard: usize, node_index: u32) {
        if shard >= HIGH_SHARDS_BIT as usize {
            return;
        }
        if let Some(w) = self.watchers.get(node_index as usize) {
            w.fetch_and(!Self::bit(shard), Ordering::SeqCst);
        }
    }

    /// Node indexes this hub has room for.
    pub fn index_capacity(&self) -> usize {
        self.watchers.len()
    }

    /// The node at `node_index` was removed: its stores no longer go to the recorder, nor
    /// its items to the demand sink (a node added later at the index is recorded and
    /// tracked only if asked).
    pub fn forget(&self, node_index: u32) {
        if let Some(w) = self.recorded.get(node_index as usize / 64) {
            let bit = 1u64 << (node_index % 64);
            if w.fetch_and(!bit, Ordering::SeqCst) & bit != 0 {
                if let Some(r) = self.recorder.get() {
                    r.forget(node_index);
                }
            }
        }
        self.track_demand(node_index, false);
    }

    /// Is any shard watching the node? (For tests and diagnostics.)
    pub fn watched(&self, node_index: u32) -> bool {
        self.watchers
            .get(node_index as usize)
            .is_some_and(|w| w.load(Ordering::SeqCst) != 0)
    }

    /// Hands a change just stored in node `node_index`'s cell to every watching shard.
    /// Never blocks and never allocates: a full inbox counts the change as lost there.
    #[inline]
    pub fn publish(
        &self,
        node_index: u32,
        generation: u32,
        version: u64,
        value: impl FnOnce() -> ChangeValue,
    ) {
        fence(Ordering::SeqCst);
        let Some(w) = self.watchers.get(node_index as usize) else {
            return;
        };
        let mut mask = w.load(Ordering::SeqCst);
        let recorded = self.is_recorded(node_index);
        if mask == 0 && !recorded {
            return;
        }
        let change = Change {
            node_index,
            generation,
            version,
            value: value(),
        };
        if recorded {
            if let Some(r) = self.recorder.get() {
                r.record(node_index, change.value.data_value());
            }
            if mask == 0 {
                return;
            }
        }
        if mask & (mask - 1) == 0 && mask.trailing_zeros() < HIGH_SHARDS_BIT {
            // One watching shard (the usual case): the change moves, no copy.
            self.deliver(mask.trailing_zeros() as usize, change);
            return;
        }
        while mask != 0 {
            let bit = mask.trailing_zeros();
            mask &= mask - 1;
            if bit < HIGH_SHARDS_BIT {
                self.deliver(bit as usize, change.clone());
            } else {
                for shard in HIGH_SHARDS_BIT as usize..MAX_SHARDS {
                    if self
                        .shards
                        .get(shard)
                        .is_some_and(|s| s.inbox.get().is_some())
                    {
                        self.deliver(shard, change.clone());
                    }
                }
            }
        }
    }

    fn deliver(&self, shard: usize, change: Change) {
        let Some(slot) = self.shards.get(shard) else {
            return;
        };
        let Some(inbox) = slot.inbox.get() else {
            return;
        };
        let node = change.node_index as usize;
        match inbox.queue.push(change) {
            Ok(()) => {
                self.counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                if let Some(w) = inbox.lost_nodes.get(node / 64) {
                    w.fetch_or(1 << (node % 64), Ordering::AcqRel);
                }
                inbox.lost.fetch_add(1, Ordering::AcqRel);
                self.counters.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        if inbox.queue.len() >= inbox.wake_at && !inbox.wake_pending.swap(true, Ordering::AcqRel) {
            if let Some(wake) = slot.waker.get() {
                self.counters.wakes.fetch_add(1, Ordering::Relaxed);
                wake();
            }
        }
    }

    /// Takes at most `max` changes of shard `shard`'s inbox, oldest first, into `f`.
    /// Returns how many changes were lost to a full inbox since the last call (the caller
    /// resynchronises its items when it is not 0).
    #[inline]
    pub fn drain(&self, shard: usize, max: usize, mut f: impl FnMut(Change)) -> u64 {
        let Some(inbox) = self.shards.get(shard).and_then(|s| s.inbox.get()) else {
            return 0;
        };
        inbox.wake_pending.store(false, Ordering::Release);
        let lost = if inbox.lost.load(Ordering::Relaxed) != 0 {
            inbox.lost.swap(0, Ordering::AcqRel)
        } else {
            0
        };
        for _ in 0..max {
            match inbox.queue.pop() {
                Some(c) => f(c),
                None => break,
            }
        }
        lost
    }

    /// Opens shard `shard`'s completion inbox with `capacity` entries (once): at least the
    /// asynchronous operations it lets out at once, so an answer always fits.
    pub fn open_completions(&self, shard: usize, capacity: usize) {
        if let Some(s) = self.shards.get(shard) {
            s.completions
                .get_or_init(|| ArrayQueue::new(capacity.max(1)));
        }
    }

    /// Hands an answer of the application to shard `shard` and wakes it (once until it
    /// drains). An answer that does not fit (never, while the shard keeps within the
    /// capacity it opened) is dropped: its operation then times out.
    pub fn complete(&self, shard: usize, c: super::app::Completion) {
        let Some(slot) = self.shards.get(shard) else {
            return;
        };
        let Some(q) = slot.completions.get() else {
            return;
        };
        if q.push(c).is_err() {
            self.counters.lost.fetch_add(1, Ordering::Relaxed);
        }
        if !slot.completion_wake_pending.swap(true, Ordering::AcqRel) {
            if let Some(wake) = slot.waker.get() {
                self.counters.wakes.fetch_add(1, Ordering::Relaxed);
                wake();
            }
        }
    }

    /// Takes shard `shard`'s completions, oldest first.
    pub fn drain_completions(&self, shard: usize, mut f: impl FnMut(super::app::Completion)) {
        let Some(slot) = self.shards.get(shard) else {
            return;
        };
        let Some(q) = slot.completions.get() else {
            return;
        };
        slot.completion_wake_pending.store(false, Ordering::Release);
        for _ in 0..q.capacity() {
            match q.pop() {
                Some(c) => f(c),
                None => break,
            }
        }
    }

    /// Are completions waiting for shard `shard`?
    #[inline]
    pub fn completions_pending(&self, shard: usize) -> bool {
        self.shards
            .get(shard)
            .and_then(|s| s.completions.get())
            .is_some_and(|q| !q.is_empty())
    }

    /// Should shard `shard` drain now (its inbox a quarter full, or changes lost)?
    #[inline]
    pub fn due(&self, shard: usize) -> bool {
        match self.shards.get(shard).and_then(|s| s.inbox.get()) {
            Some(i) => i.queue.len() >= i.wake_at || i.lost.load(Ordering::Relaxed) != 0,
            None => false,
        }
    }

    /// Calls `f` with every node whose changes shard `shard` lost since the last call (and
    /// forgets them).
    pub fn take_lost_nodes(&self, shard: usize, mut f: impl FnMut(u32)) {
        let Some(inbox) = self.shards.get(shard).and_then(|s| s.inbox.get()) else {
            return;
        };
        for (i, w) in inbox.lost_nodes.iter().enumerate() {
            if w.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = w.swap(0, Ordering::AcqRel);
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                f((i * 64) as u32 + b);
            }
        }
    }

    /// Changes waiting in shard `shard`'s inbox.
    pub fn pending(&self, shard: usize) -> usize {
        self.shards
            .get(shard)
            .and_then(|s| s.inbox.get())
            .map_or(0, |i| i.queue.len())
    }

    /// The capacity of shard `shard`'s inbox (0 before it is opened).
    pub fn capacity(&self, shard: usize) -> usize {
        self.shards
            .get(shard)
            .and_then(|s| s.inbox.get())
            .map_or(0, |i| i.queue.capacity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Variant;

    /// A run-time history with `places` places that names `ns=1;s=Auto.*`.
    struct Places {
        left: std::sync::atomic::AtomicUsize,
        historized: std::sync::Mutex<Vec<u32>>,
    }
    impl RunTimeHistory for Places {
        fn wants(&self, node_id: &NodeId) -> bool {
            node_id.to_string().starts_with("ns=1;s=Auto.")
        }
        fn reserve(&self) -> Result<(), StatusCode> {
            self.left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |l| l.checked_sub(1))
                .map(|_| ())
                .map_err(|_| StatusCode::BadResourceUnavailable)
        }
        fn release(&self) {
            self.left.fetch_add(1, Ordering::AcqRel);
        }
        fn historize(&self, _space: &crate::address_space::AddressSpace, node_index: u32) {
            self.historized.lock().unwrap().push(node_index);
        }
    }

    fn var(id: &str) -> crate::address_space::Node {
        crate::address_space::build::make::variable(
            NodeId::parse(id).unwrap(),
            crate::types::QualifiedName::new(1, "V"),
            NodeId::ns0(11),
            -1,
            Vec::new(),
            DataValue::new(Variant::Double(1.0)),
            3,
            0.0,
            None,
        )
    }

    fn historizing(n: &crate::address_space::Node) -> (bool, u8) {
        let v = n.as_variable().unwrap();
        (v.historizing, v.access_level)
    }

    #[test]
    fn prepare_historized_asks_the_run_time_history_within_its_bound() {
        // No history: asked is BadNodeAttributesInvalid, not asked is left alone.
        let hub = ChangeHub::new(8);
        let mut n = var("ns=1;s=A");
        assert_eq!(
            prepare_historized(&hub, &mut n, true, false),
            Err(StatusCode::BadNodeAttributesInvalid)
        );
        assert_eq!(prepare_historized(&hub, &mut n, false, false), Ok(false));
        assert_eq!(historizing(&n), (false, 3));

        let places = Arc::new(Places {
            left: 2.into(),
            historized: Default::default(),
        });
        assert!(hub.set_run_time_history(places.clone()));
        // Asked: Historizing and HistoryRead (HistoryWrite only when asked for).
        let mut a = var("ns=1;s=A");
        assert_eq!(prepare_historized(&hub, &mut a, true, false), Ok(true));
        assert_eq!(historizing(&a), (true, 3 | 0x04));
        // Named by the patterns: both history bits, as at start.
        let mut auto = var("ns=1;s=Auto.X");
        assert_eq!(prepare_historized(&hub, &mut auto, false, false), Ok(true));
        assert_eq!(historizing(&auto), (true, 3 | 0x0c));
        // The bound: asked is refused, named is added without history.
        let mut b = var("ns=1;s=B");
        assert_eq!(
            prepare_historized(&hub, &mut b, true, false),
            Err(StatusCode::BadResourceUnavailable)
        );
        let mut auto2 = var("ns=1;s=Auto.Y");
        assert_eq!(
            prepare_historized(&hub, &mut auto2, false, false),
            Ok(false)
        );
        assert_eq!(historizing(&auto2), (false, 3));
        // Neither asked nor named: nothing taken.
        places.release();
        let mut plain = var("ns=1;s=Plain");
        assert_eq!(
            prepare_historized(&hub, &mut plain, false, false),
            Ok(false)
        );
        assert_eq!(places.left.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_recorded_node_removed_is_forgotten_by_the_recorder() {
        struct Forgets(std::sync::Mutex<Vec<u32>>);
        impl ChangeRecorder for Forgets {
            fn record(&self, _node_index: u32, _value: &DataValue) {}
            fn forget(&self, node_index: u32) {
                self.0.lock().unwrap().push(node_index);
            }
        }
        let hub = ChangeHub::new(128);
        assert!(!hub.record_node(3), "no recorder yet");
        let r = Arc::new(Forgets(Default::default()));
        assert!(hub.record(r.clone(), [1]));
        assert!(hub.record_node(70));
        assert!(!hub.record_node(1000), "out of range");
        hub.forget(70);
        hub.forget(2); // never recorded: not told
        hub.forget(70); // already forgotten
        hub.forget(1);
        assert_eq!(*r.0.lock().unwrap(), vec![70, 1]);
        assert!(!hub.is_recorded(70) && !hub.is_recorded(1));
    }

    fn inline(v: f64) -> ChangeValue {
        ChangeValue::Inline(DataValue::new(Variant::Double(v)))
    }

    #[test]
    fn only_watching_shards_receive() {
        let hub = ChangeHub::new(4);
        hub.open(0, 8);
        hub.open(1, 8);
        hub.watch(1, 2);
        hub.publish(2, 0, 2, || inline(1.0));
        hub.publish(3, 0, 2, || inline(2.0));
        let mut got = Vec::new();
        assert_eq!(hub.drain(0, 100, |c| got.push((0, c.node_index))), 0);
        assert_eq!(hub.drain(1, 100, |c| got.push((1, c.node_index))), 0);
        assert_eq!(got, vec![(1, 2)]);
        hub.unwatch(1, 2);
        assert!(!hub.watched(2));
        hub.publish(2, 0, 4, || inline(3.0));
        assert_eq!(hub.pending(1), 0);
    }

    #[test]
    fn recorded_nodes_reach_the_recorder_watched_or_not() {
        struct Log(std::sync::Mutex<Vec<(u32, DataValue)>>);
        impl ChangeRecorder for Log {
            fn record(&self, node_index: u32, value: &DataValue) {
                self.0.lock().unwrap().push((node_index, value.clone()));
            }
        }
        let hub = ChangeHub::new(130);
        let log = Arc::new(Log(Default::default()));
        assert!(hub.record(log.clone(), [1, 129]));
        assert!(!hub.record(log.clone(), [2]), "one recorder per hub");
        hub.open(0, 8);
        hub.watch(0, 129);
        hub.publish(1, 0, 2, || inline(1.0));
        hub.publish(2, 0, 2, || inline(2.0));
        hub.publish(129, 0, 2, || inline(3.0));
        let got: Vec<(u32, Variant)> = log
            .0
            .lock()
            .unwrap()
            .iter()
            .map(|(n, v)| (*n, v.value.clone()))
            .collect();
        assert_eq!(
            got,
            vec![(1, Variant::Double(1.0)), (129, Variant::Double(3.0))]
        );
        let mut shard = Vec::new();
        hub.drain(0, 10, |c| shard.push(c.node_index));
        assert_eq!(shard, vec![129], "the watching shard still gets its change");
    }

    #[test]
    fn a_full_inbox_counts_losses_and_wakes_once() {
        let hub = ChangeHub::new(1);
        hub.open(0, 4);
        let wakes = Arc::new(AtomicU64::new(0));
        let w = wakes.clone();
        hub.set_waker(
            0,
            Arc::new(move || {
                w.fetch_add(1, Ordering::Relaxed);
            }),
        );
        hub.watch(0, 0);
        for i in 0..10 {
            hub.publish(0, 0, 2 * i + 2, || inline(i as f64));
        }
        assert_eq!(
            wakes.load(Ordering::Relaxed),
            1,
            "one wake until the shard drains"
        );
        let mut versions = Vec::new();
        assert_eq!(hub.drain(0, 100, |c| versions.push(c.version)), 6);
        assert_eq!(versions, vec![2, 4, 6, 8]);
        let mut lost = Vec::new();
        hub.take_lost_nodes(0, |n| lost.push(n));
        assert_eq!(lost, vec![0], "the node whose changes were lost");
        hub.take_lost_nodes(0, |n| lost.push(n));
        assert_eq!(lost, vec![0], "and only once");
        hub.publish(0, 0, 22, || inline(0.0));
        assert_eq!(wakes.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn shards_from_63_up_share_one_bit() {
        let hub = ChangeHub::new(1);
        hub.open(63, 4);
        hub.open(70, 4);
        hub.watch(70, 0);
        hub.publish(0, 0, 2, || inline(1.0));
        assert_eq!(hub.pending(63), 1);
        assert_eq!(hub.pending(70), 1);
    }
}
