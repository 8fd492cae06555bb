//! Subscriptions and monitored items of one shard: the model behind the Subscription and
//! MonitoredItem service sets (Part 4 §5.12–5.13). Sans-IO like the rest of core: time comes
//! in as [`Now`], responses to queued Publish requests go out through an outbox the runtime
//! drains per secure channel.
//!
//! # Per-core design
//!
//! Everything here belongs to one shard ([`SubscriptionEngine`] lives in `ServiceState`): the
//! subscriptions of the sessions on that shard, their monitored items and queues, the Publish
//! requests waiting for them and the retransmission queues. Nothing is shared, nothing is
//! locked; the only shared data touched is the address space's lock-free value cells, read
//! when an item samples.
//!
//! * **Sampling on absolute deadlines.** Items that sample the same node and attribute at the
//!   same interval share one *source*: it is sampled once per tick and the value fans out to
//!   every item's filter and queue. Sources that sample at the same interval form one
//!   *bucket*, a single timer: a bucket due at `t` samples its sources and moves to
//!   `t + interval` (not `now + interval`, so nothing drifts; a late tick skips the cycles it
//!   missed and counts them). The timers are a heap over buckets, not items.
//! * **Exception-based items** (sampling interval 0 on a variable whose value is stored)
//!   are not sampled: every store into the cell, a client's Write on any shard or an
//!   application's push from any thread, reaches them through the change path
//!   ([`crate::address_space::change`]): this shard watches the node, the writer queues the
//!   change into the shard's inbox, and the engine drains it into the items' queues before
//!   each publishing cycle (and whenever the inbox is a quarter full), in order, every change
//!   up to the item's queue size. A change older than what an item has already seen (by the
//!   cell's version) is dropped, so a value is never reported twice or out of order.
//! * **Ready list.** An item that queued something reportable puts itself on its
//!   subscription's ready list once; the publishing cycle only walks that list.
//! * **Publishing cycle** (per subscription, its own timer on absolute deadlines): with
//!   notifications and a queued Publish request it sends a NotificationMessage (at most
//!   MaxNotificationsPerPublish notifications; MoreNotifications when more are waiting and
//!   the next queued request is answered at once); with nothing to send it counts towards
//!   the keep-alive; without a Publish request it becomes *late* and the next Publish
//!   request is answered at once. The lifetime counter counts cycles without a queued
//!   Publish request; at LifetimeCount the subscription expires with a
//!   StatusChangeNotification BadTimeout (delivered if the session sends another Publish).
//! * **Retransmission.** Sent NotificationMessages are kept per subscription until
//!   acknowledged, at most `max_retransmission_queue_per_session` per session (oldest
//!   dropped first); Republish returns them, BadMessageNotAvailable once dropped.
//! * **Bounded memory.** Subscriptions per session and per shard, items per subscription and
//!   per shard, queue sizes, publish requests per session and the retransmission queue are
//!   all configured caps (`[subscriptions]`). A client that never publishes or never
//!   acknowledges cannot grow the shard past them.
//!
//! Subscription ids are `shard << 24 | counter` (never 0, unique among live ones), so a
//! cross-shard TransferSubscriptions finds the owning shard from the id alone, and a
//! subscription moved to another shard keeps its ids there
//! ([`SubscriptionEngine::export_subscription`] /
//! [`SubscriptionEngine::import_subscription`]). A monitored item id names the item's slot
//! and the slot's generation (`ids`: no id table; a deleted item's id names nothing); the
//! items of a moved subscription keep theirs, unique within their subscription.
//!
//! # Files
//!
//! This file holds the engine's state and what every part shares; each part of the engine is
//! an `impl SubscriptionEngine` block of its own file: `timers` (sampling, publishing cycles,
//! the change inbox, events, asynchronous samples), `publish` (Publish requests, messages,
//! acknowledgements, Republish), `services` (the subscription services and a session's life),
//! `items` (the monitored item services, sources and buckets, filters). `item` is one item's
//! queue and filter, `aggregate` the AggregateFilter, `pools` the reused buffers, `ids` the
//! item ids, `slots` and `watch` the dense tables.

pub mod aggregate;
mod demand;
mod ids;
pub mod item;
mod items;
mod pools;
mod publish;
mod services;
mod slots;
mod timers;
mod watch;

use crate::config::SubscriptionLimits;

use hashbrown::HashTable;
use slots::{Slots, SparseSlots};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crate::address_space::attributes::{read_attribute, Timestamps};
use crate::address_space::{access_level, AddressSpace, NodeView, NumericRange, SourceView};
use crate::generated::attribute_ids as attr;
use crate::generated::messages::Response;
use crate::generated::types::{
    AggregateFilter, DataChangeFilter, DataChangeNotification, DataChangeTrigger,
    MonitoredItemCreateRequest, MonitoredItemCreateResult, MonitoredItemModifyRequest,
    MonitoredItemModifyResult, MonitoredItemNotification, MonitoringMode, NotificationMessage,
    PublishResponse, StatusChangeNotification, TimestampsToReturn,
};
use crate::response::Deferred;
use crate::session::SessionKey;
use crate::time::Now;
use crate::types::{DataValue, ExtensionObject, NodeId, QualifiedName, StatusCode, Variant};
use crate::{Encode, UaStructure};

use item::{DataChangeSettings, Diff, Fresh, ItemQueue, LastSample, Queued};
use items::*;
use pools::*;
use publish::*;

const NONE: u32 = u32::MAX;

/// A Publish request waiting for something to send.
#[derive(Debug)]
pub struct PendingPublish {
    /// The secure channel the request came on (the response goes back there).
    pub channel_id: u32,
    /// The UA SecureConversation request id to answer.
    pub request_id: u32,
    pub request_handle: u32,
    /// Monotonic time the request is no longer worth answering with data (timeoutHint), or
    /// `u64::MAX`.
    pub expires_ns: u64,
    /// Results of the acknowledgements it carried.
    pub results: Vec<StatusCode>,
    /// The session's MaxResponseMessageSize (0 = none): the response's bound besides the
    /// channel's.
    pub max_response_size: u32,
}

/// What the engine counts (for diagnostics and benchmarks).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Source samples taken (one per shared source per tick).
    pub samples: u64,
    /// Sampling ticks skipped because the shard was late by more than an interval.
    pub missed_ticks: u64,
    /// Notifications sent in NotificationMessages.
    pub notifications: u64,
    /// NotificationMessages sent (keep-alives excluded).
    pub messages: u64,
    /// Keep-alive messages sent.
    pub keep_alives: u64,
    /// Queue overflows (values discarded).
    pub overflows: u64,
    /// Changes from the change path offered to exception-based items (one per item).
    pub changes: u64,
    /// Changes this shard lost to a full change inbox (its items were resynchronised).
    pub changes_lost: u64,
    /// Subscriptions that expired.
    pub expired: u64,
    /// Events read from the shared bus (while the shard had event items).
    pub events_seen: u64,
    /// Events the bus overwrote before this shard read them.
    pub events_missed: u64,
}

/// How an item gets its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sampling {
    /// Sampled by a source on a bucket timer.
    Timed,
    /// Exception-based: fed every change of the cell through the change path.
    Exception,
    /// A non-Value attribute: read once when created or re-enabled.
    Once,
    /// An event item (EventNotifier attribute): fed from the shared event bus.
    Event,
}

/// One monitored item. Hot fields only (what a sample, a change and a publish touch); what
/// few items have (an IndexRange, a deadband, triggering links, an event filter, an
/// aggregate) is in [`ItemCold`], behind one pointer that most items leave empty. The last
/// value a timed item was offered is its source's (`synced`) whenever it can be: only items
/// that compare against something else (a deadband, an IndexRange, an aggregate), items fed
/// by the change path, and an item between joining a source and its first sample there keep
/// one of their own (see [`SubscriptionEngine::settle_last`]). Aligned to a cache line (it
/// is 64 bytes): a sample touches one line of each item, not two.
#[repr(align(64))]
struct MonitoredItem {
    /// Its id: its slot and the slot's generation (`ids::ItemIds`), or the id it came with
    /// from another shard.
    id: u32,
    /// Slot of the owning subscription.
    sub: u32,
    client_handle: u32,
    /// Where the item is. On a source (`on_source`): the source's slot and the next item of
    /// that source (`NONE`: the last). Otherwise: its node's index and the node's generation
    /// when the item was created (a node removed and another added at its index is not this
    /// item's node). The node of an item on a source is kept once, in the source (its key):
    /// it comes back here when the item leaves the source (see `item_node`).
    place: (u32, u32),
    /// The attribute id (1..=27, checked at creation).
    attribute: u8,
    /// `place` is (source, next), not (node index, generation).
    on_source: bool,
    mode: Mode,
    /// The DataChangeFilter's trigger (its deadband is in `cold`).
    trigger: Trigger,
    timestamps: Timestamps,
    sampling: Sampling,
    in_ready: bool,
    /// Report the queue once although in Sampling mode (a triggering item fired).
    triggered: bool,
    /// The last value offered is the source's last sample (`last` is `None`).
    synced: bool,
    /// The queue (of one) holds the sample that started its source's current run of equal
    /// status and value: kept there once, not in the queue (see [`Entry::Held`]).
    held: bool,
    sampling_ms: f64,
    /// The last value offered, when it is not the source's (see `synced`), kept compact,
    /// with the change path's version.
    last: Option<Box<OwnLast>>,
    queue: ItemQueue,
    cold: Option<Box<ItemCold>>,
}

const _: () = assert!(std::mem::size_of::<MonitoredItem>() == 64);
const _: () = assert!(std::mem::size_of::<Option<MonitoredItem>>() == 64);
const _: () = assert!(std::mem::align_of::<Option<MonitoredItem>>() == 64);
const _: () = assert!(std::mem::size_of::<Source>() == 56);
const _: () = assert!(std::mem::size_of::<Option<Source>>() == 56);

/// An item's own last value ([`MonitoredItem::last`]).
#[derive(Clone, Debug)]
struct OwnLast {
    sample: LastSample,
    /// Exception-based items: the cell version of the newest change seen (kept here, not
    /// in every item: such an item always has a last value of its own, and compares
    /// against it whenever the version admits a change).
    version: u64,
}

impl OwnLast {
    fn new(sample: LastSample) -> Box<OwnLast> {
        Box::new(OwnLast { sample, version: 0 })
    }
}

/// A MonitoringMode in one byte (checked to be 0..=2 where a request brings it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mode(u8);

impl From<MonitoringMode> for Mode {
    fn from(m: MonitoringMode) -> Mode {
        Mode(m.0.clamp(0, 2) as u8)
    }
}

impl PartialEq<MonitoringMode> for Mode {
    fn eq(&self, other: &MonitoringMode) -> bool {
        i32::from(self.0) == other.0
    }
}

/// A DataChangeTrigger in one byte (checked to be 0..=2 where a filter brings it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Trigger(u8);

impl From<DataChangeTrigger> for Trigger {
    fn from(t: DataChangeTrigger) -> Trigger {
        Trigger(t.0.clamp(0, 2) as u8)
    }
}

impl From<Trigger> for DataChangeTrigger {
    fn from(t: Trigger) -> DataChangeTrigger {
        DataChangeTrigger(i32::from(t.0))
    }
}

impl PartialEq<DataChangeTrigger> for Trigger {
    fn eq(&self, other: &DataChangeTrigger) -> bool {
        i32::from(self.0) == other.0
    }
}

/// What few monitored items have.
#[derive(Default)]
struct ItemCold {
    range: Option<NumericRange>,
    /// The DataChangeFilter's absolute deadband (0 = none).
    deadband: f64,
    /// Items this one triggers: (slot, id).
    links: Vec<(u32, u32)>,
    /// Event items: the notifier node and the compiled EventFilter.
    event: Option<EventItem>,
    /// Items with an AggregateFilter: the samples of the current processing interval; the
    /// item queues one computed value per interval instead of its samples.
    aggregate: Option<Box<aggregate::AggregateState>>,
}

impl ItemCold {
    fn is_empty(&self) -> bool {
        self.range.is_none()
            && self.deadband == 0.0
            && self.links.is_empty()
            && self.event.is_none()
            && self.aggregate.is_none()
    }
}

impl MonitoredItem {
    fn new(
        id: u32,
        sub: u32,
        client_handle: u32,
        node: (u32, u32),
        attribute: u8,
        timestamps: Timestamps,
        mode: MonitoringMode,
        sampling: Sampling,
        sampling_ms: f64,
        queue: ItemQueue,
    ) -> MonitoredItem {
        MonitoredItem {
            id,
            sub,
            client_handle,
            place: node,
            attribute,
            on_source: false,
            mode: Mode::from(mode),
            trigger: Trigger::from(DataChangeTrigger::StatusValue),
            timestamps,
            sampling,
            in_ready: false,
            triggered: false,
            synced: false,
            held: false,
            sampling_ms,
            last: None,
            queue,
            cold: None,
        }
    }

    /// The source's slot while on a source, `NONE` otherwise.
    #[inline]
    fn source(&self) -> u32 {
        if self.on_source {
            self.place.0
        } else {
            NONE
        }
    }
    /// The next item of its source (`NONE`: the last, or not on a source).
    #[inline]
    fn next(&self) -> u32 {
        if self.on_source {
            self.place.1
        } else {
            NONE
        }
    }
    fn set_next(&mut self, next: u32) {
        debug_assert!(self.on_source);
        if self.on_source {
            self.place.1 = next;
        }
    }
    /// Its node (index, generation) when it is not on a source (there it is the source's).
    fn own_node(&self) -> Option<(u32, u32)> {
        (!self.on_source).then_some(self.place)
    }
    /// Joins source `src` in front of `next`: the node is the source's from now on.
    fn join(&mut self, src: u32, next: u32) {
        self.place = (src, next);
        self.on_source = true;
    }
    /// Leaves its source for `node` (the source's); returns (source, next item).
    fn leave(&mut self, node: (u32, u32)) -> (u32, u32) {
        let was = (self.source(), self.next());
        self.place = node;
        self.on_source = false;
        was
    }
    fn cold_mut(&mut self) -> &mut ItemCold {
        self.cold.get_or_insert_with(Default::default)
    }
    /// Drops the cold part when nothing is left in it.
    fn trim_cold(&mut self) {
        if self.cold.as_ref().is_some_and(|c| c.is_empty()) {
            self.cold = None;
        }
    }
    fn range(&self) -> Option<&NumericRange> {
        self.cold.as_ref().and_then(|c| c.range.as_ref())
    }
    fn filter(&self) -> DataChangeSettings {
        DataChangeSettings {
            trigger: self.trigger.into(),
            deadband: self.cold.as_ref().map_or(0.0, |c| c.deadband),
        }
    }
    fn set_filter(&mut self, f: DataChangeSettings) {
        self.trigger = f.trigger.into();
        if f.deadband != 0.0 || self.cold.is_some() {
            self.cold_mut().deadband = f.deadband;
        }
        self.trim_cold();
    }
    fn links(&self) -> &[(u32, u32)] {
        self.cold.as_ref().map_or(&[], |c| &c.links)
    }
    fn event(&self) -> Option<&EventItem> {
        self.cold.as_ref().and_then(|c| c.event.as_ref())
    }
    fn is_event(&self) -> bool {
        self.event().is_some()
    }
    fn aggregate(&self) -> Option<&aggregate::AggregateState> {
        self.cold.as_ref().and_then(|c| c.aggregate.as_deref())
    }
    fn aggregate_mut(&mut self) -> Option<&mut aggregate::AggregateState> {
        self.cold.as_mut().and_then(|c| c.aggregate.as_deref_mut())
    }
    fn set_aggregate(&mut self, a: Option<Box<aggregate::AggregateState>>) {
        if a.is_some() || self.cold.is_some() {
            self.cold_mut().aggregate = a;
        }
        self.trim_cold();
    }
    /// Compares against its source's last sample when it can (see `synced`): a timed item
    /// without IndexRange, deadband or aggregate.
    fn light(&self) -> bool {
        self.sampling == Sampling::Timed
            && self
                .cold
                .as_ref()
                .is_none_or(|c| c.range.is_none() && c.deadband == 0.0 && c.aggregate.is_none())
    }
    /// Something to report: a queued entry or the held one.
    fn has_queued(&self) -> bool {
        self.held || !self.queue.is_empty()
    }
    fn clear_queue(&mut self) {
        self.queue.clear();
        self.held = false;
    }
    /// Sets the item's own last value (reusing its allocation).
    fn keep_last(&mut self, v: &DataValue) {
        self.synced = false;
        match self.last.as_mut() {
            Some(b) => b.sample.store_ref(v),
            None => self.last = Some(OwnLast::new(LastSample::new(v.clone()))),
        }
    }
    /// The change path's version of the newest change seen (0: none).
    fn version(&self) -> u64 {
        self.last.as_ref().map_or(0, |l| l.version)
    }
    /// Records the version of a change just offered (the item keeps a last value of its
    /// own once offered one).
    fn set_version(&mut self, version: u64) {
        if let Some(l) = self.last.as_mut() {
            l.version = version;
        }
    }
}

struct EventItem {
    notifier: NodeId,
    filter: crate::events::filter::CompiledEventFilter,
    /// The roles of the session that created the item: an event whose source node has
    /// RolePermissions reaches it only with ReceiveEvents there (the subscription stays with
    /// that user: TransferSubscriptions requires the same one).
    roles: crate::roles::Roles,
}

/// May an item of a session with `roles` receive events of this source node (its
/// ReceiveEvents permission)?
fn receives(space: &AddressSpace, roles: crate::roles::Roles, source: &NodeId) -> bool {
    space.node_permits(
        source,
        roles,
        crate::generated::types::PermissionType::ReceiveEvents,
    )
}

/// A sampling source: 56 bytes (its interval is its bucket's).
struct Source {
    node_index: u32,
    node_generation: u32,
    /// The previous sample, kept compact: an identical one (value, status, source
    /// timestamp) cannot change any item's report, so it is not fanned out. It is also the
    /// last value of every `synced` item on the source.
    last: Option<LastSample>,
    /// Fan the next sample out even if it is identical to `last` (an item joined with a last
    /// value of its own, or an item's filter changed).
    force: bool,
    /// `last` differs from the sample that started the current run of equal status and
    /// value only in its timestamps; that sample is in the engine's `run_starts`.
    run_start_kept: bool,
    /// The attribute id (1..=27).
    attribute: u8,
    /// Some of its items have an AggregateFilter (their intervals end on this source's
    /// ticks, whether or not the sample changed). Set when one joins; worked out again
    /// from the items when one leaves.
    aggregates: bool,
    bucket: u32,
    /// Position in the bucket's source list.
    pos: u32,
    /// The first of its items (`NONE`: none); each item names the next
    /// ([`MonitoredItem::next`]), so a source of one item holds no list of its own.
    first: u32,
}

struct Bucket {
    interval_ns: u64,
    next_ns: u64,
    sources: Vec<u32>,
    generation: u32,
}

struct Subscription {
    id: u32,
    session: Option<SessionKey>,
    /// Who created it (user identity tag), checked by TransferSubscriptions.
    owner: String,
    interval_ms: f64,
    interval_ns: u64,
    keep_alive_count: u32,
    lifetime_count: u32,
    max_notifications: u32,
    priority: u8,
    publishing_enabled: bool,
    next_ns: u64,
    timer_generation: u32,
    keep_alive_counter: u32,
    lifetime_counter: u32,
    /// A message (data or keep-alive) was sent since creation.
    message_sent: bool,
    /// Waiting for a Publish request with something (data or a keep-alive) to send.
    late: bool,
    next_seq: u32,
    items: Vec<u32>,
    ready: Vec<u32>,
    status_change: Option<StatusCode>,
    retrans: VecDeque<NotificationMessage>,
    /// What SubscriptionDiagnostics counts (it travels with a transferred subscription).
    /// Boxed: a subscription is built once, and it keeps `MovedSubscription` (a message
    /// between shards) small.
    diag: Box<SubscriptionCounts>,
}

/// The counts of one subscription for its SubscriptionDiagnosticsDataType (Part 5 §12.15),
/// bumped where they happen (single-threaded: the owning shard's engine).
#[derive(Clone, Copy, Debug, Default)]
struct SubscriptionCounts {
    modify: u32,
    enable: u32,
    disable: u32,
    republish_requests: u32,
    republish_messages: u32,
    transfer_requests: u32,
    publish_requests: u32,
    data_changes: u32,
    events: u32,
    late: u32,
    discarded_messages: u32,
    queue_overflows: u32,
    event_queue_overflows: u32,
}

impl Subscription {
    fn take_seq(&mut self) -> u32 {
        let s = self.next_seq;
        self.next_seq = if s == u32::MAX { 1 } else { s + 1 };
        s
    }
    fn has_notifications(&self) -> bool {
        self.status_change.is_some() || (self.publishing_enabled && !self.ready.is_empty())
    }
    fn available(&self) -> Vec<u32> {
        self.retrans.iter().map(|m| m.sequence_number).collect()
    }
}

/// A subscription on its way from one shard's engine to another's (cross-shard
/// TransferSubscriptions): everything it holds, items in order, links and the ready list as
/// positions among them.
pub struct MovedSubscription {
    sub: Subscription,
    items: Vec<MonitoredItem>,
    ready: Vec<u32>,
}

impl MovedSubscription {
    pub fn id(&self) -> u32 {
        self.sub.id
    }
    pub fn item_count(&self) -> usize {
        self.items.len()
    }
}

impl std::fmt::Debug for MovedSubscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MovedSubscription {{ id: {}, items: {} }}",
            self.sub.id,
            self.items.len()
        )
    }
}

#[derive(Default)]
struct SessionSubs {
    subs: Vec<u32>,
    publish: VecDeque<PendingPublish>,
    /// (subscription slot, sequence number) of every kept message, oldest first.
    retrans_order: VecDeque<(u32, u32)>,
    /// Status changes for subscriptions that left this session (transferred away or
    /// expired): (subscription id, sequence number, status).
    status_messages: VecDeque<(u32, u32, StatusCode)>,
}

/// The revised parameters of CreateSubscription / ModifySubscription.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Revised {
    pub subscription_id: u32,
    pub publishing_interval_ms: f64,
    pub lifetime_count: u32,
    pub max_keep_alive_count: u32,
}

/// The subscriptions of one shard. See the module docs.
pub struct SubscriptionEngine {
    limits: SubscriptionLimits,
    shard_index: u32,
    subs: Vec<Option<Subscription>>,
    sub_free: Vec<u32>,
    sub_ids: HashMap<u32, u32>,
    sub_counter: u32,
    /// How many publishing timers this shard has placed: the next one's phase (see
    /// [`SubscriptionEngine::first_cycle`]).
    phase_counter: u64,
    /// The last generation handed to a publishing timer. Every timer placed (a subscription
    /// created, modified or transferred in) takes a new one, so an entry a deleted
    /// subscription left in the heap never drives the subscription that reuses its slot.
    sub_timer_generation: u32,
    items: Slots<MonitoredItem>,
    /// The items' ids, which name their slots, and the free slots.
    ids: ids::ItemIds,
    sources: Slots<Source>,
    source_free: Vec<u32>,
    /// Source slots by (node index, node generation, attribute, interval), kept in the
    /// source.
    source_map: HashTable<u32>,
    /// Asynchronous sources with a sample out at the application: its token and the time
    /// after which it is given up (the tick after that starts another).
    pending_samples: HashMap<u32, (u32, u64)>,
    /// The first sample of a source's current run of equal status and value, for the sources
    /// whose last sample differs from it in timestamps only (`Source::run_start_kept`): what
    /// their `held` items report. By source slot, in chunks allocated on first use (32 bytes a
    /// source of such a chunk; none while no source keeps a run start).
    run_starts: SparseSlots<LastSample>,
    buckets: Vec<Option<Bucket>>,
    bucket_free: Vec<u32>,
    bucket_map: HashMap<u64, u32>,
    bucket_heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    sub_heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
    sessions: HashMap<SessionKey, SessionSubs>,
    outbox: HashMap<u32, Vec<(u32, Deferred)>>,
    /// Reused buffers: message bodies and encoded responses come from here and go back when
    /// a message is acknowledged (or dropped) and when a response has been chunked.
    pools: Pools,
    ready_channels: Vec<u32>,
    stats: EngineStats,
    bucket_generation: u32,
    /// Event items of this shard (slots), fed from the bus.
    event_items: Vec<u32>,
    /// This shard's position in the shared event bus (while it has event items).
    event_cursor: Option<crate::events::EventCursor>,
    /// The change path: every shard's inbox and the nodes' watcher bits.
    changes: std::sync::Arc<crate::address_space::ChangeHub>,
    /// Exception-based items of this shard by node index (the nodes this shard watches).
    exception_by_node: watch::Watching,
    /// Exception-based items that started watching and still have to read their cell.
    resync_pending: Vec<u32>,
    /// Reused list of the nodes whose changes were lost.
    lost_scratch: Vec<u32>,
    /// Samples of asynchronous sources out at the application, and their bound.
    async_samples_out: usize,
    async_samples_max: usize,
    /// Token of the next asynchronous sample.
    sample_token: u32,
    /// Items with an AggregateFilter on a source (a shard without any skips their pass at
    /// each tick).
    aggregate_items: usize,
    /// The demand signal: this shard's data items on nodes marked for it.
    demand: demand::DemandTable,
}

/// A ServiceFault-free response header for a deferred response.
fn header(request_handle: u32, now: Now) -> crate::generated::types::ResponseHeader {
    crate::response::response_header(request_handle, now)
}

impl SubscriptionEngine {
    /// An empty engine for shard `shard_index` (< 256).
    pub fn new(
        limits: SubscriptionLimits,
        shard_index: usize,
        changes: std::sync::Arc<crate::address_space::ChangeHub>,
    ) -> SubscriptionEngine {
        let ids = ids::ItemIds::new(limits.max_monitored_items_per_shard);
        SubscriptionEngine {
            limits,
            shard_index: shard_index as u32,
            subs: Vec::new(),
            sub_free: Vec::new(),
            sub_ids: HashMap::new(),
            sub_counter: 0,
            phase_counter: 0,
            sub_timer_generation: 0,
            items: Slots::default(),
            ids,
            sources: Slots::default(),
            source_free: Vec::new(),
            source_map: HashTable::new(),
            pending_samples: HashMap::new(),
            run_starts: SparseSlots::default(),
            buckets: Vec::new(),
            bucket_free: Vec::new(),
            bucket_map: HashMap::new(),
            bucket_heap: BinaryHeap::new(),
            sub_heap: BinaryHeap::new(),
            sessions: HashMap::new(),
            outbox: HashMap::new(),
            pools: Pools::default(),
            ready_channels: Vec::new(),
            stats: EngineStats::default(),
            bucket_generation: 0,
            event_items: Vec::new(),
            event_cursor: None,
            changes,
            exception_by_node: watch::Watching::default(),
            resync_pending: Vec::new(),
            lost_scratch: Vec::new(),
            async_samples_out: 0,
            async_samples_max: 10_000,
            sample_token: 0,
            aggregate_items: 0,
            demand: demand::DemandTable::default(),
        }
    }

    /// Most samples of asynchronous sources out at once (the shard's
    /// `operation_limits.max_async_operations_per_shard`).
    pub fn set_async_samples_max(&mut self, n: usize) {
        self.async_samples_max = n;
    }

    /// A sample of an asynchronous source came back: offered to the source's items like a
    /// sample taken on its tick. A stale one (given up, or its source gone) is dropped.
    pub fn on_sample_done(
        &mut self,
        source: u32,
        token: u32,
        outcome: crate::address_space::app::Outcome,
        now: Now,
    ) {
        use crate::address_space::app::Outcome;
        let Some(Some(src)) = self.sources.get_mut(source as usize) else {
            return;
        };
        if self.pending_samples.get(&source).map(|&(t, _)| t) != Some(token) {
            return;
        }
        self.pending_samples.remove(&source);
        self.async_samples_out = self.async_samples_out.saturating_sub(1);
        let mut sample = match outcome {
            Outcome::Value(dv) => dv,
            Outcome::Status(s) => DataValue::status(if s.is_bad() {
                s
            } else {
                StatusCode::BadInternalError
            }),
            _ => DataValue::status(StatusCode::BadInternalError),
        };
        if sample.server_timestamp.is_none() {
            sample.server_timestamp = Some(now.utc);
        }
        self.stats.samples += 1;
        let fresh = Fresh::of(&sample);
        let diff = src.last.as_ref().map(|l| l.diff_fresh(&fresh, &sample));
        if !src.force && diff.is_some_and(Diff::same) {
            return;
        }
        src.force = false;
        let origin = Origin::Source(src.last.as_ref().zip(diff));
        let mut at = src.first;
        // One look-up of each item (its link to the next is read there too).
        while let Some(Some(item)) = self.items.get_mut(at as usize) {
            let next = item.next();
            if offer_to(
                item,
                &mut self.subs,
                &mut self.stats,
                at,
                &sample,
                origin,
                now,
            ) {
                fire_links(&mut self.items, &mut self.subs, at);
            }
            at = next;
        }
        advance_source(src, source, &mut self.run_starts, sample, fresh, diff);
    }

    pub fn limits(&self) -> &SubscriptionLimits {
        &self.limits
    }

    pub fn stats(&self) -> EngineStats {
        self.stats
    }

    /// Live subscriptions on this shard (orphaned ones included).
    pub fn subscription_count(&self) -> usize {
        self.sub_ids.len()
    }

    /// Live monitored items on this shard.
    pub fn monitored_item_count(&self) -> usize {
        self.ids.live()
    }

    /// Subscriptions owned by a session.
    pub fn session_subscription_count(&self, key: SessionKey) -> usize {
        self.sessions.get(&key).map_or(0, |s| s.subs.len())
    }

    /// Publish requests a session has queued.
    pub fn queued_publish_count(&self, key: SessionKey) -> usize {
        self.sessions.get(&key).map_or(0, |s| s.publish.len())
    }

    /// Monitored items of the subscriptions of one session.
    pub fn session_monitored_item_count(&self, key: SessionKey) -> usize {
        self.sessions.get(&key).map_or(0, |ss| {
            ss.subs
                .iter()
                .filter_map(|&slot| self.subs.get(slot as usize).and_then(Option::as_ref))
                .map(|s| s.items.len())
                .sum()
        })
    }

    /// The SubscriptionDiagnosticsDataType of every subscription of this shard (Part 5
    /// §12.15), with the session it is on (`None`: orphaned, waiting for a transfer or its
    /// lifetime); `session_id` is left null for the caller, who knows the sessions.
    /// TransferredToAltClientCount and TransferredToSameClientCount stay 0: the engine does
    /// not know which client a session belongs to.
    pub fn subscription_diagnostics(
        &self,
        mut f: impl FnMut(Option<SessionKey>, crate::generated::types::SubscriptionDiagnosticsDataType),
    ) {
        for sub in self.subs.iter().flatten() {
            let d = &sub.diag;
            let disabled = sub
                .items
                .iter()
                .filter_map(|&it| self.items.get(it as usize).and_then(Option::as_ref))
                .filter(|i| i.mode == MonitoringMode::Disabled)
                .count();
            let n = |v: usize| v.min(u32::MAX as usize) as u32;
            f(
                sub.session,
                crate::generated::types::SubscriptionDiagnosticsDataType {
                    session_id: NodeId::NULL,
                    subscription_id: sub.id,
                    priority: sub.priority,
                    publishing_interval: sub.interval_ms,
                    max_keep_alive_count: sub.keep_alive_count,
                    max_lifetime_count: sub.lifetime_count,
                    max_notifications_per_publish: sub.max_notifications,
                    publishing_enabled: sub.publishing_enabled,
                    modify_count: d.modify,
                    enable_count: d.enable,
                    disable_count: d.disable,
                    republish_request_count: d.republish_requests,
                    republish_message_request_count: d.republish_requests,
                    republish_message_count: d.republish_messages,
                    transfer_request_count: d.transfer_requests,
                    transferred_to_alt_client_count: 0,
                    transferred_to_same_client_count: 0,
                    publish_request_count: d.publish_requests,
                    data_change_notifications_count: d.data_changes,
                    event_notifications_count: d.events,
                    notifications_count: d.data_changes.wrapping_add(d.events),
                    late_publish_request_count: d.late,
                    current_keep_alive_count: sub.keep_alive_counter,
                    current_lifetime_count: sub.lifetime_counter,
                    unacknowledged_message_count: n(sub.retrans.len()),
                    discarded_message_count: d.discarded_messages,
                    monitored_item_count: n(sub.items.len()),
                    disabled_monitored_item_count: n(disabled),
                    monitoring_queue_overflow_count: d.queue_overflows,
                    next_sequence_number: sub.next_seq,
                    event_queue_over_flow_count: d.event_queue_overflows,
                },
            );
        }
    }

    fn sub_slot(&self, key: SessionKey, id: u32) -> Result<u32, StatusCode> {
        let slot = *self
            .sub_ids
            .get(&id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        match self.subs.get(slot as usize) {
            Some(Some(s)) if s.session == Some(key) => Ok(slot),
            _ => Err(StatusCode::BadSubscriptionIdInvalid),
        }
    }

    /// The first publishing deadline of a timer (re)started now with `interval_ns`.
    ///
    /// The cycles of a shard's subscriptions are spread over their interval instead of all
    /// following their creation times: clients create their subscriptions together (after a
    /// restart, or a benchmark's sessions), and cycles that fall together make one core build
    /// and send all their messages back to back, so the last one leaves late and the client
    /// receives them in one burst. The k-th timer placed on the shard (from 0) starts
    /// frac(k·φ)·interval early (φ the golden ratio: however many are placed together, their
    /// phases stay evenly spread, and placing one costs a counter). So the first cycle comes
    /// within one interval of now, never later than a timer started now, and the shard's
    /// first subscription keeps exactly one interval; later cycles keep the phase (absolute
    /// deadlines).
    fn first_cycle(&mut self, interval_ns: u64, now: Now) -> u64 {
        const PHI_64: u64 = 0x9E37_79B9_7F4A_7C15;
        let interval = interval_ns.max(1);
        let fraction = self.phase_counter.wrapping_mul(PHI_64);
        self.phase_counter = self.phase_counter.wrapping_add(1);
        let early = ((u128::from(fraction) * u128::from(interval)) >> 64) as u64;
        now.mono_ns.saturating_add(interval - early)
    }

    /// A new generation for a publishing timer (see `sub_timer_generation`).
    fn next_timer_generation(&mut self) -> u32 {
        self.sub_timer_generation = self.sub_timer_generation.wrapping_add(1);
        self.sub_timer_generation
    }

    fn next_sub_id(&mut self) -> u32 {
        loop {
            self.sub_counter = (self.sub_counter + 1) & 0xFF_FFFF;
            let id = self.shard_index << 24 | self.sub_counter;
            if id != 0 && !self.sub_ids.contains_key(&id) {
                return id;
            }
        }
    }
}

/// A source's key: (node index, node generation, attribute, interval in ns).
type SourceKey = (u32, u32, u8, u64);

fn source_hash(key: SourceKey) -> u64 {
    use std::hash::BuildHasher;
    rustc_hash::FxBuildHasher.hash_one(key)
}

/// A source's key; its interval is its bucket's.
fn source_key(s: &Source, buckets: &[Option<Bucket>]) -> SourceKey {
    let interval_ns = buckets
        .get(s.bucket as usize)
        .and_then(Option::as_ref)
        .map_or(0, |b| b.interval_ns);
    (s.node_index, s.node_generation, s.attribute, interval_ns)
}

impl SubscriptionEngine {
    /// The slot of subscription slot `sub`'s item with id `id`: the slot the id names, or
    /// (an item that came from another shard) the one the id table knows.
    fn find_item(&self, sub: u32, id: u32) -> Option<u32> {
        let slot = self.ids.slot_of(id);
        match self.items.get(slot as usize) {
            Some(Some(i)) if i.id == id && i.sub == sub => Some(slot),
            _ => self.ids.foreign_slot(sub, id),
        }
    }
    /// The slot of the source with this key.
    fn source_by_key(&self, key: SourceKey) -> Option<u32> {
        let (sources, buckets) = (&self.sources, &self.buckets);
        self.source_map
            .find(
                source_hash(key),
                |&s| matches!(sources.get(s as usize), Some(Some(x)) if source_key(x, buckets) == key),
            )
            .copied()
    }
    fn index_source(&mut self, s: u32, key: SourceKey) {
        let (sources, buckets) = (&self.sources, &self.buckets);
        self.source_map.insert_unique(source_hash(key), s, |&x| {
            source_hash(
                sources
                    .get(x as usize)
                    .and_then(Option::as_ref)
                    .map_or((0, 0, 0, 0), |x| source_key(x, buckets)),
            )
        });
    }
    fn unindex_source(&mut self, s: u32, key: SourceKey) {
        if let Ok(e) = self.source_map.find_entry(source_hash(key), |&x| x == s) {
            e.remove();
        }
    }
}

/// Puts `v` into a free slot of a pool (or a new one) and returns the slot.
fn slab_insert<T>(slots: &mut Vec<Option<T>>, free: &mut Vec<u32>, v: T) -> u32 {
    // A free list only holds slots of its own pool; one out of range is dropped.
    if let Some(i) = free.pop() {
        if let Some(slot) = slots.get_mut(i as usize) {
            *slot = Some(v);
            return i;
        }
    }
    slots.push(Some(v));
    (slots.len() - 1) as u32
}

/// MonitoringParameters.filter of an event item: an EventFilter (a null or undecodable one
/// is Bad_EventFilterInvalid, another filter type Bad_FilterNotAllowed).
fn decode_event_filter(
    filter: &ExtensionObject,
) -> Result<crate::generated::types::EventFilter, StatusCode> {
    match filter.decode_as::<crate::generated::types::EventFilter>(crate::DecodeLimits::default()) {
        Some(Ok(f)) => Ok(f),
        Some(Err(_)) => Err(StatusCode::BadEventFilterInvalid),
        None if filter.is_null() => Err(StatusCode::BadEventFilterInvalid),
        None => Err(StatusCode::BadFilterNotAllowed),
    }
}

/// The EventFilterResult returned to the client: only when a clause has a Bad status (Part
/// 4 §7.22.3 lets the server omit an all-Good result).
fn filter_result_object(r: &crate::generated::types::EventFilterResult) -> ExtensionObject {
    let bad = r.select_clause_results.iter().any(|s| s.is_bad())
        || r.where_clause_result
            .element_results
            .iter()
            .any(|e| e.status_code.is_bad());
    if bad {
        ExtensionObject::from_struct(r)
    } else {
        ExtensionObject::null()
    }
}

/// The node (index, generation) and attribute of item slot `it`: its own, or its source's.
fn item_node(items: &Slots<MonitoredItem>, sources: &Slots<Source>, it: u32) -> (u32, u32) {
    let Some(Some(item)) = items.get(it as usize) else {
        return (NONE, 0);
    };
    item.own_node().unwrap_or_else(|| {
        sources
            .get(item.source() as usize)
            .and_then(Option::as_ref)
            .map_or((NONE, 0), |s| (s.node_index, s.node_generation))
    })
}

/// The value of an item for the client: its IndexRange applied and its timestamps reduced
/// to TimestampsToReturn.
fn item_value(item: &MonitoredItem, mut dv: DataValue) -> DataValue {
    match item.timestamps {
        Timestamps::Both => {}
        Timestamps::Source => {
            dv.server_timestamp = None;
            dv.server_picoseconds = None;
        }
        Timestamps::Server => {
            dv.source_timestamp = None;
            dv.source_picoseconds = None;
        }
        Timestamps::Neither => {
            dv.source_timestamp = None;
            dv.source_picoseconds = None;
            dv.server_timestamp = None;
            dv.server_picoseconds = None;
        }
    }
    dv
}

/// Where an offered sample comes from: a source's fan-out, with the source's previous sample
/// (the last value of its `synced` items) and how the sample differs from it, or anywhere
/// else (a first sample, a change, a status).
#[derive(Clone, Copy)]
enum Origin<'a> {
    Source(Option<(&'a LastSample, Diff)>),
    Elsewhere,
}

/// Offers a sample to an item: filtered against the last reported value, queued, and the
/// item put on its subscription's ready list (and its triggered items with it).
#[inline]
fn offer(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    sample: &DataValue,
    origin: Origin<'_>,
    now: Now,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    if offer_to(item, subs, stats, it, sample, origin, now) {
        fire_links(items, subs, it);
    }
}

/// [`offer`] to item slot `it`, found already. True when it queued something it reports
/// and has triggering links: the caller fires them ([`fire_links`]).
#[inline(always)]
fn offer_to(
    item: &mut MonitoredItem,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    sample: &DataValue,
    origin: Origin<'_>,
    now: Now,
) -> bool {
    if item.mode == MonitoringMode::Disabled {
        return false;
    }
    // Most items: no IndexRange, deadband, aggregate or triggering link (no cold part),
    // timed and synced, offered their source's sample with its difference. The same steps
    // as below, with what the cold part would decide known (the deadband is 0), checked once.
    if let (None, true, Sampling::Timed, Origin::Source(Some((l, d)))) =
        (&item.cold, item.synced, item.sampling, origin)
    {
        let filter = DataChangeSettings {
            trigger: item.trigger.into(),
            deadband: 0.0,
        };
        if item.last.is_some() {
            item.last = None;
        }
        if !filter.changed_since(l, d, sample) {
            return false;
        }
        let entry = if item.trigger == DataChangeTrigger::StatusValue && item.queue.capacity() == 1
        {
            Entry::Held
        } else {
            Entry::Value(sample.clone())
        };
        return queue_entry(item, subs, stats, it, entry);
    }
    let ranged;
    let sample = match item.range() {
        Some(r) if sample.status.is_none_or(|s| !s.is_bad()) => {
            ranged = match r.read(&sample.value) {
                Ok(v) => DataValue {
                    value: v,
                    ..sample.clone()
                },
                Err(e) => DataValue {
                    value: Variant::Empty,
                    status: Some(e),
                    ..sample.clone()
                },
            };
            &ranged
        }
        _ => sample,
    };
    if let Some(a) = item.aggregate_mut() {
        // Kept for the interval; its value is queued when the interval ends.
        a.offer(sample, now.utc);
        item.keep_last(sample);
        return false;
    }
    let filter = item.filter();
    let was_synced = item.synced;
    // Against the compact last sample directly: a DataValue is built only for a
    // notification (and for a synced item, from the difference the source worked out once).
    let changed = if item.synced {
        match origin {
            Origin::Source(Some((l, d))) => filter.changed_since(l, d, sample),
            _ => true,
        }
    } else {
        item.last
            .as_deref()
            .is_none_or(|l| filter.changed_from(&l.sample, sample))
    };
    if matches!(origin, Origin::Source(_)) && item.light() {
        // From now on the source's last sample is this item's last value: reported, or
        // equal to it for the filter.
        item.synced = true;
        // Tested first: dropping an empty one is a call, on every sample of every synced
        // item.
        if item.last.is_some() {
            item.last = None;
        }
    } else if changed {
        item.keep_last(sample);
    }
    if !changed {
        return false;
    }
    // A synced item whose sample starts a run of equal status and value at its source (it
    // changed against the source's last sample for StatusValue) holds it there, not here.
    let entry = if was_synced
        && item.synced
        && item.trigger == DataChangeTrigger::StatusValue
        && item.queue.capacity() == 1
    {
        Entry::Held
    } else {
        Entry::Value(sample.clone())
    };
    queue_entry(item, subs, stats, it, entry)
}

/// What an item queues: a value, or (a synced item with a queue of one, trigger
/// StatusValue) the sample that starts its source's current run of equal status and value,
/// read from the source when the item is published (it is the value the item would have
/// queued: a later sample of the run changes nothing for this trigger, and a sample that ends
/// the run replaces it, as a queue of one keeps the newest).
enum Entry {
    Value(DataValue),
    Held,
}

/// The source's last sample becomes `sample` (`fresh`: its fixed-size parts; `diff`: how it
/// differs from the last one); it remembers the first sample of the run of equal status and
/// value when the new one only differs in its timestamps. Inlined into the bucket walk: out
/// of line, the sample (80 bytes) was copied into its argument and again inside, 87
/// instructions a sample with the call (callgrind, `subscription/sample`).
#[inline(always)]
fn advance_source(
    src: &mut Source,
    slot: u32,
    run_starts: &mut SparseSlots<LastSample>,
    sample: DataValue,
    fresh: Fresh,
    diff: Option<Diff>,
) {
    match (&src.last, diff) {
        // Identical (fanned out because an item joined): the sample kept stays, its
        // ServerTimestamp the run's first; nothing to remember.
        (Some(_), Some(d)) if d.same() => return,
        (Some(l), Some(d)) if !d.status_or_value() => {
            if !src.run_start_kept {
                src.run_start_kept = true;
                match run_starts.get_mut(slot) {
                    Some(v) => v.clone_from(l),
                    None => {
                        run_starts.insert(slot, l.clone());
                    }
                }
            }
        }
        // A new run: its first sample is the source's last, the one kept before goes (an
        // entry left behind held 32 bytes, and its chunk 128 KiB, for as long as the source
        // lived).
        _ => {
            if std::mem::take(&mut src.run_start_kept) {
                run_starts.remove(slot);
            }
        }
    }
    match &mut src.last {
        Some(l) => l.store_fresh(fresh, sample),
        None => src.last = Some(LastSample::new(sample)),
    }
}

/// The sample a source's `held` items report (see [`Entry::Held`]).
fn run_start<'a>(
    sources: &'a Slots<Source>,
    run_starts: &'a SparseSlots<LastSample>,
    s: u32,
) -> Option<&'a LastSample> {
    let src = sources.get(s as usize)?.as_ref()?;
    if src.run_start_kept {
        run_starts.get(s)
    } else {
        src.last.as_ref()
    }
}

/// Ends the processing intervals of an aggregate item that are over at `now` (a sampling tick
/// of its source) and queues their values.
fn close_aggregate_intervals(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    now: Now,
    scratch: &mut Vec<DataValue>,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    if item.mode == MonitoringMode::Disabled {
        return;
    }
    let Some(a) = item.aggregate_mut() else {
        return;
    };
    a.close_due(now.utc, scratch);
    for dv in scratch.drain(..) {
        queue_value(items, subs, stats, it, Entry::Value(dv));
    }
}

/// Queues a value for an item (its timestamps reduced to TimestampsToReturn) and puts the
/// item on its subscription's ready list (and its triggered items with it).
fn queue_value(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    entry: Entry,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    if queue_entry(item, subs, stats, it, entry) {
        fire_links(items, subs, it);
    }
}

/// [`queue_value`] for item slot `it`, found already. True when the item reports and has
/// triggering links (the caller fires them: [`fire_links`]). Inlined: it is the tail of
/// every sample that changed, and out of line it copied the value into its frame once more
/// (with the comparison below, 68 instructions per sample, callgrind).
#[inline(always)]
fn queue_entry(
    item: &mut MonitoredItem,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    entry: Entry,
) -> bool {
    let overflows = match entry {
        Entry::Value(value) => {
            let dropped = u64::from(std::mem::replace(&mut item.held, false));
            dropped + item.queue.push(Queued::Data(item_value(item, value)))
        }
        Entry::Held => {
            let dropped = u64::from(std::mem::replace(&mut item.held, true));
            dropped + item.queue.release_single()
        }
    };
    stats.overflows += overflows;
    let Some(Some(sub)) = subs.get_mut(item.sub as usize) else {
        return false;
    };
    sub.diag.queue_overflows = sub.diag.queue_overflows.wrapping_add(overflows as u32);
    if item.mode != MonitoringMode::Reporting {
        return false;
    }
    if !item.in_ready {
        item.in_ready = true;
        sub.ready.push(it);
    }
    !item.links().is_empty()
}

/// The items that reporting item slot `it` triggers (SetTriggering) report their queues
/// too: each one in Sampling mode with something queued goes on the ready list.
#[inline(never)]
fn fire_links(items: &mut Slots<MonitoredItem>, subs: &mut [Option<Subscription>], it: u32) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    let Some(Some(sub)) = subs.get_mut(item.sub as usize) else {
        return;
    };
    let links = item
        .cold
        .as_mut()
        .map(|c| std::mem::take(&mut c.links))
        .unwrap_or_default();
    for &(t, id) in &links {
        if let Some(Some(ti)) = items.get_mut(t as usize) {
            if ti.id == id && ti.mode == MonitoringMode::Sampling && ti.has_queued() {
                ti.triggered = true;
                if !ti.in_ready {
                    ti.in_ready = true;
                    sub.ready.push(t);
                }
            }
        }
    }
    if let Some(Some(item)) = items.get_mut(it as usize) {
        if let Some(c) = item.cold.as_mut() {
            c.links = links;
        }
    }
}

#[cfg(test)]
mod timer_tests {
    use super::*;

    /// Timers placed at one instant get first cycles spread over the interval, each within
    /// one interval of now, the first exactly one interval away; a timer that keeps its phase
    /// keeps it (the shard's later cycles are absolute deadlines).
    #[test]
    fn timers_placed_together_are_spread_over_their_interval() {
        let mut engine = SubscriptionEngine::new(
            SubscriptionLimits::default(),
            0,
            std::sync::Arc::new(crate::address_space::ChangeHub::new(0)),
        );
        let now = Now::new(5_000_000_123, crate::types::DateTime(0));
        let interval = 100_000_000;
        let mut firsts: Vec<u64> = (0..10).map(|_| engine.first_cycle(interval, now)).collect();
        assert_eq!(
            firsts[0],
            now.mono_ns + interval,
            "the first keeps one interval"
        );
        assert!(firsts
            .iter()
            .all(|&f| f > now.mono_ns && f <= now.mono_ns + interval));
        firsts.sort_unstable();
        let gaps: Vec<u64> = firsts.windows(2).map(|w| w[1] - w[0]).collect();
        let smallest = gaps.iter().copied().min().unwrap_or(0);
        assert!(
            smallest >= interval / 20,
            "ten timers at least 5 ms apart over 100 ms: {gaps:?}"
        );
        let wrap = firsts[0] + interval - firsts[9];
        assert!(wrap >= interval / 20, "and around the end: {wrap}");
    }
}
