//! Subscriptions and monitored items of one shard: the model behind the Subscription and
//! MonitoredItem service sets (Part 4 §5.12–5.13). Sans-IO like the rest of core: time comes
//! in as [`Now`], responses to queued Publish requests go out through an outbox the runtime
//! drains per secure channel.
//!
//! # Per-core design
//!
//! Everything here belongs to one shard ([`SubscriptionEngine`] lives in `ShardState`): the
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
//! Subscription and monitored item ids are `shard << 24 | counter` (never 0, unique among
//! live ones), so a cross-shard TransferSubscriptions finds the owning shard from the id
//! alone, and a subscription moved to another shard keeps its ids there
//! ([`SubscriptionEngine::export_subscription`] / [`SubscriptionEngine::import_subscription`]).

pub mod aggregate;
pub mod item;
mod slots;
mod watch;

use crate::config::SubscriptionLimits;

use slots::Slots;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use crate::address_space::attributes::{read_attribute, Timestamps};
use crate::address_space::{
    access_level, AddressSpace, ClassAttributes, Node, NumericRange, ValueSource,
};
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
use crate::types::{
    DataValue, DateTime, ExtensionObject, NodeId, QualifiedName, StatusCode, Variant,
};
use crate::{Encode, UaStructure};

use item::{DataChangeSettings, ItemQueue, Queued};

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

struct MonitoredItem {
    id: u32,
    /// Slot of the owning subscription.
    sub: u32,
    client_handle: u32,
    node_index: u32,
    attribute_id: u32,
    range: Option<NumericRange>,
    timestamps: Timestamps,
    mode: MonitoringMode,
    sampling: Sampling,
    sampling_ms: f64,
    /// Source slot while sampling on a timer (`NONE` otherwise).
    source: u32,
    filter: DataChangeSettings,
    last: Option<DataValue>,
    /// Exception-based items: the cell version of the newest change seen.
    version: u64,
    queue: ItemQueue,
    in_ready: bool,
    /// Report the queue once although in Sampling mode (a triggering item fired).
    triggered: bool,
    /// Items this one triggers: (slot, id).
    links: Vec<(u32, u32)>,
    /// Event items: the notifier node and the compiled EventFilter.
    event: Option<Box<EventItem>>,
    /// Items with an AggregateFilter: the samples of the current processing interval; the
    /// item queues one computed value per interval instead of its samples.
    aggregate: Option<Box<aggregate::AggregateState>>,
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

struct Source {
    node_index: u32,
    attribute_id: u32,
    interval_ns: u64,
    /// The previous sample: an identical one (value, status, source timestamp) cannot
    /// change any item's report, so it is not fanned out.
    last: Option<DataValue>,
    bucket: u32,
    /// Position in the bucket's source list.
    pos: u32,
    items: Vec<u32>,
    /// How many of `items` have an AggregateFilter (their intervals end on this source's
    /// ticks, whether or not the sample changed).
    aggregate_items: u32,
    /// An asynchronous source's sample out at the application: its token and the time
    /// after which it is given up (the tick after that starts another).
    pending_sample: Option<(u32, u64)>,
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
    items: Slots<MonitoredItem>,
    item_free: Vec<u32>,
    item_ids: HashMap<u32, u32>,
    item_counter: u32,
    sources: Slots<Source>,
    source_free: Vec<u32>,
    source_map: HashMap<(u32, u32, u64), u32>,
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
        SubscriptionEngine {
            limits,
            shard_index: shard_index as u32,
            subs: Vec::new(),
            sub_free: Vec::new(),
            sub_ids: HashMap::new(),
            sub_counter: 0,
            phase_counter: 0,
            items: Slots::default(),
            item_free: Vec::new(),
            item_ids: HashMap::new(),
            item_counter: 0,
            sources: Slots::default(),
            source_free: Vec::new(),
            source_map: HashMap::new(),
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
        if src.pending_sample.map(|(t, _)| t) != Some(token) {
            return;
        }
        src.pending_sample = None;
        self.async_samples_out = self.async_samples_out.saturating_sub(1);
        let mut sample = match outcome {
            Outcome::Value(dv) => dv,
            Outcome::Status(s) => DataValue::status(if s.is_bad() {
                s
            } else {
                StatusCode::BadInternalError
            }),
            Outcome::Outputs(_) | Outcome::History(_) | Outcome::HistoryUpdate(_) => {
                DataValue::status(StatusCode::BadInternalError)
            }
        };
        if sample.server_timestamp.is_none() {
            sample.server_timestamp = Some(now.utc);
        }
        self.stats.samples += 1;
        if src.last.as_ref().is_some_and(|l| same_sample(l, &sample)) {
            return;
        }
        for &it in &src.items {
            offer(
                &mut self.items,
                &mut self.subs,
                &mut self.stats,
                it,
                &sample,
                now,
            );
        }
        src.last = Some(sample);
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
        self.item_ids.len()
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

    fn next_sub_id(&mut self) -> u32 {
        loop {
            self.sub_counter = (self.sub_counter + 1) & 0xFF_FFFF;
            let id = self.shard_index << 24 | self.sub_counter;
            if id != 0 && !self.sub_ids.contains_key(&id) {
                return id;
            }
        }
    }

    /// Monitored item ids are `shard << 24 | counter` like subscription ids, so the items of a
    /// subscription moved here from another shard keep their ids without colliding.
    fn next_item_id(&mut self) -> u32 {
        loop {
            self.item_counter = (self.item_counter + 1) & 0xFF_FFFF;
            let id = self.shard_index << 24 | self.item_counter;
            if id != 0 && !self.item_ids.contains_key(&id) {
                return id;
            }
        }
    }

    // ---- timers ----------------------------------------------------------------------

    /// The earliest monotonic time (ns) at which [`SubscriptionEngine::on_timer`] has work.
    pub fn next_deadline(&self) -> Option<u64> {
        if !self.exception_by_node.is_empty() && self.changes.due(self.shard_index as usize) {
            return Some(0);
        }
        let a = self.bucket_heap.peek().map(|Reverse((d, _, _))| *d);
        let b = self.sub_heap.peek().map(|Reverse((d, _, _))| *d);
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Runs every due sampling tick and publishing cycle; first delivers the events raised
    /// on any shard since the last call.
    pub fn on_timer(&mut self, shared: &crate::shared::ServerShared, now: Now) {
        self.poll_events(shared, now);
        let space = &shared.address_space;
        self.drain_changes(space, now);
        // Sampling first, so a publishing cycle due at the same instant sees the samples.
        while let Some(&Reverse((d, b, generation))) = self.bucket_heap.peek() {
            if d > now.mono_ns {
                break;
            }
            self.bucket_heap.pop();
            self.sample_bucket(space, b, generation, now);
        }
        while let Some(&Reverse((d, slot, generation))) = self.sub_heap.peek() {
            if d > now.mono_ns {
                break;
            }
            self.sub_heap.pop();
            let ok = matches!(self.subs.get(slot as usize), Some(Some(s)) if s.timer_generation == generation);
            if ok {
                self.publishing_cycle(slot, now);
            }
        }
        if self.sub_heap.len() > 2 * self.sub_ids.len() + 64 {
            let mut fresh = BinaryHeap::with_capacity(self.sub_ids.len());
            for (i, s) in self.subs.iter().enumerate() {
                if let Some(s) = s {
                    fresh.push(Reverse((s.next_ns, i as u32, s.timer_generation)));
                }
            }
            self.sub_heap = fresh;
        }
    }

    /// Reads the events published since the last poll and queues them into every event
    /// item whose notifier and filter accept them. One atomic load when nothing is new.
    pub fn poll_events(&mut self, shared: &crate::shared::ServerShared, now: Now) {
        if self.event_items.is_empty() {
            if let Some(c) = self.event_cursor.take() {
                shared.events.bus.close(c);
            }
            return;
        }
        let bus = &shared.events.bus;
        let cursor = self.event_cursor.get_or_insert_with(|| bus.cursor());
        let items = &mut self.items;
        let subs = &mut self.subs;
        let event_items = &self.event_items;
        let space = &shared.address_space;
        let permissions = space.has_role_permissions();
        let mut seen = 0u64;
        let missed = cursor.poll(bus, |ev| {
            seen += 1;
            for &it in event_items {
                let fields = match items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => {
                        match &item.event {
                            Some(e)
                                if !permissions || receives(space, e.roles, &ev.source_node) =>
                            {
                                e.filter.notification(&e.notifier, ev)
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(items, subs, it, fields);
                }
            }
        });
        self.stats.events_seen += seen;
        self.stats.events_missed += missed;
        if missed > 0 {
            // The bus lapped this shard: every event item learns that events were lost.
            let ev = shared.events.queue_overflow_event(now.utc);
            for &it in &self.event_items {
                let fields = match self.items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => {
                        item.event.as_ref().map(|e| e.filter.select(&ev))
                    }
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(&mut self.items, &mut self.subs, it, fields);
                }
            }
        }
    }

    /// ConditionRefresh / ConditionRefresh2: queues the refresh bracket and the retained
    /// conditions into the subscription's event items (or the one item).
    pub fn condition_refresh(
        &mut self,
        shared: &crate::shared::ServerShared,
        key: SessionKey,
        sub_id: u32,
        item_id: Option<u32>,
        now: Now,
    ) -> Result<(), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let targets: Vec<u32> = match item_id {
            Some(id) => {
                let it = self.item_slot(slot, id)?;
                if self
                    .items
                    .get(it as usize)
                    .and_then(Option::as_ref)
                    .is_none_or(|i| i.event.is_none())
                {
                    return Err(StatusCode::BadMonitoredItemIdInvalid);
                }
                vec![it]
            }
            None => self
                .subs
                .get(slot as usize)
                .and_then(Option::as_ref)
                .map(|s| {
                    s.items
                        .iter()
                        .copied()
                        .filter(|&it| {
                            self.items
                                .get(it as usize)
                                .and_then(Option::as_ref)
                                .is_some_and(|i| i.event.is_some())
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        let events = shared.events.condition_refresh(now.utc);
        let space = &shared.address_space;
        let permissions = space.has_role_permissions();
        for &it in &targets {
            for ev in &events {
                let fields = match self.items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => item
                        .event
                        .as_ref()
                        .filter(|e| !permissions || receives(space, e.roles, &ev.source_node))
                        .and_then(|e| e.filter.refresh_notification(&e.notifier, ev)),
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(&mut self.items, &mut self.subs, it, fields);
                }
            }
        }
        Ok(())
    }

    fn sample_bucket(&mut self, space: &AddressSpace, b: u32, generation: u32, now: Now) {
        let Some(Some(bucket)) = self.buckets.get_mut(b as usize) else {
            return;
        };
        if bucket.generation != generation {
            return;
        }
        let sources = std::mem::take(&mut bucket.sources);
        let interval = bucket.interval_ns.max(1);
        // Absolute deadlines: the next tick is one interval after the one due, not after now.
        let mut next = bucket.next_ns.saturating_add(interval);
        if next <= now.mono_ns {
            let behind = (now.mono_ns - next) / interval + 1;
            self.stats.missed_ticks += behind;
            next = next.saturating_add(behind.saturating_mul(interval));
        }
        bucket.next_ns = next;
        self.bucket_heap.push(Reverse((next, b, generation)));
        let shard = self.shard_index as usize;
        let any_async = space.has_async();
        for &s in &sources {
            let Some(Some(src)) = self.sources.get_mut(s as usize) else {
                continue;
            };
            if any_async && src.attribute_id == attr::Value {
                if let Some(a) = space.async_source(src.node_index) {
                    // Asked now, offered when the application answers (on_sample_done). One
                    // sample at a time per source; one given up after its timeout.
                    if let Some((_, until)) = src.pending_sample {
                        if until > now.mono_ns {
                            self.stats.missed_ticks += 1;
                            continue;
                        }
                        src.pending_sample = None;
                        self.async_samples_out = self.async_samples_out.saturating_sub(1);
                    }
                    if self.async_samples_out >= self.async_samples_max || !a.try_acquire() {
                        self.stats.missed_ticks += 1;
                        continue;
                    }
                    self.sample_token = self.sample_token.wrapping_add(1);
                    let token = self.sample_token;
                    src.pending_sample =
                        Some((token, now.deadline_after_ms(a.timeout_ms() as f64)));
                    self.async_samples_out += 1;
                    self.changes
                        .open_completions(shard, 2 * self.async_samples_max);
                    let reply = crate::address_space::app::Reply::new(
                        self.changes.clone(),
                        shard,
                        crate::address_space::app::Target::Sample {
                            source: s,
                            generation: token,
                        },
                        Some(a.clone()),
                    );
                    let node_id = space
                        .node_at(src.node_index)
                        .map(|n| n.node_id.clone())
                        .unwrap_or_default();
                    (a.read)(crate::address_space::app::AsyncRead::new(node_id, reply));
                    continue;
                }
            }
            let sample = sample_value(space, src.node_index, src.attribute_id, now);
            self.stats.samples += 1;
            // Nothing changed since the previous sample: no item can report (each item's
            // last value is this one, or it was not reported for the same difference).
            if src.last.as_ref().is_some_and(|l| same_sample(l, &sample)) {
                continue;
            }
            for &it in &src.items {
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &sample,
                    now,
                );
            }
            src.last = Some(sample);
        }
        // Aggregate items end their processing intervals on their source's ticks, changed
        // sample or not.
        if self.aggregate_items > 0 {
            let mut scratch = Vec::new();
            for &s in &sources {
                let Some(Some(src)) = self.sources.get(s as usize) else {
                    continue;
                };
                if src.aggregate_items == 0 {
                    continue;
                }
                for &it in &src.items {
                    close_aggregate_intervals(
                        &mut self.items,
                        &mut self.subs,
                        &mut self.stats,
                        it,
                        now,
                        &mut scratch,
                    );
                }
            }
        }
        if let Some(Some(bucket)) = self.buckets.get_mut(b as usize) {
            bucket.sources = sources;
        }
    }

    /// Moves the changes waiting in this shard's inbox into the queues of the
    /// exception-based items that watch their nodes (at most one inbox's worth per call, so
    /// a writer that never stops cannot keep the shard here). When changes were lost to a
    /// full inbox, the exception-based items of the nodes that lost them are brought to their
    /// cells' current values, marked
    /// with the Overflow bit.
    pub fn drain_changes(&mut self, space: &AddressSpace, now: Now) {
        while let Some(it) = self.resync_pending.pop() {
            self.resync_exception_item(space, it, false, now);
        }
        let shard = self.shard_index as usize;
        let SubscriptionEngine {
            changes,
            exception_by_node,
            items,
            subs,
            stats,
            ..
        } = self;
        if exception_by_node.is_empty() && changes.pending(shard) == 0 {
            return;
        }
        let max = changes.capacity(shard);
        let lost = changes.drain(shard, max, |c| {
            let mut at = exception_by_node.first(c.node_index);
            let mut sample: Option<DataValue> = None;
            while let Some(it) = at {
                at = exception_by_node.next(it);
                let Some(Some(item)) = items.get_mut(it as usize) else {
                    continue;
                };
                if c.version <= item.version || item.mode == MonitoringMode::Disabled {
                    continue;
                }
                item.version = c.version;
                let dv = sample.get_or_insert_with(|| {
                    let mut dv = c.value.data_value().clone();
                    if dv.server_timestamp.is_none() {
                        dv.server_timestamp = Some(now.utc);
                    }
                    dv
                });
                stats.changes += 1;
                offer(items, subs, stats, it, dv, now);
            }
        });
        if lost > 0 {
            stats.changes_lost += lost;
            // Only the items of the nodes whose changes were lost.
            let mut nodes = std::mem::take(&mut self.lost_scratch);
            self.changes.take_lost_nodes(shard, |n| nodes.push(n));
            let mut items = Vec::new();
            for &n in &nodes {
                self.exception_by_node.collect(n, &mut items);
            }
            for &it in &items {
                self.resync_exception_item(space, it, true, now);
            }
            nodes.clear();
            self.lost_scratch = nodes;
        }
    }

    /// Brings an exception-based item to its cell's current value (when newer than what it
    /// saw); `overflow` marks that value with the Overflow bit (changes were dropped).
    fn resync_exception_item(&mut self, space: &AddressSpace, it: u32, overflow: bool, now: Now) {
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        let Some(cell) = space.node_at(item.node_index).and_then(Node::value_cell) else {
            return;
        };
        let (mut dv, version) = cell.load_versioned();
        if version <= item.version && item.last.is_some() {
            return;
        }
        item.version = version;
        if dv.server_timestamp.is_none() {
            dv.server_timestamp = Some(now.utc);
        }
        let before = item.queue.len();
        offer(
            &mut self.items,
            &mut self.subs,
            &mut self.stats,
            it,
            &dv,
            now,
        );
        if overflow {
            if let Some(Some(item)) = self.items.get_mut(it as usize) {
                if item.queue.len() > before || item.queue.len() == item.queue.capacity() {
                    item.queue.mark_newest_overflow();
                }
            }
        }
    }

    fn publishing_cycle(&mut self, slot: u32, now: Now) {
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let interval = sub.interval_ns.max(1);
        let mut next = sub.next_ns.saturating_add(interval);
        if next <= now.mono_ns {
            next = now
                .mono_ns
                .saturating_add(interval - (now.mono_ns - next) % interval);
        }
        sub.next_ns = next;
        self.sub_heap
            .push(Reverse((next, slot, sub.timer_generation)));

        let has_request = match sub.session {
            Some(k) => self.sessions.get(&k).is_some_and(|s| !s.publish.is_empty()),
            None => false,
        };
        if has_request {
            sub.lifetime_counter = 0;
        } else {
            sub.lifetime_counter += 1;
            if sub.lifetime_counter >= sub.lifetime_count {
                self.expire(slot, now);
                return;
            }
        }
        if sub.late {
            return; // still waiting for a Publish request
        }
        let wants = if sub.has_notifications() {
            true
        } else {
            sub.keep_alive_counter += 1;
            !sub.message_sent || sub.keep_alive_counter >= sub.keep_alive_count
        };
        if !wants {
            return;
        }
        let key = sub.session;
        match key.and_then(|k| self.pop_publish(k, now)) {
            Some(pp) => self.send_from(slot, pp, now),
            None => {
                if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
                    s.late = true;
                    s.diag.late = s.diag.late.wrapping_add(1);
                }
            }
        }
    }

    /// The subscription's lifetime passed without Publish requests: it is deleted and its
    /// session gets a StatusChangeNotification BadTimeout with its next Publish.
    fn expire(&mut self, slot: u32, now: Now) {
        self.stats.expired += 1;
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let (id, seq, key) = (sub.id, sub.take_seq(), sub.session);
        self.delete_subscription_slot(slot);
        if let Some(k) = key {
            if let Some(ss) = self.sessions.get_mut(&k) {
                ss.status_messages
                    .push_back((id, seq, StatusCode::BadTimeout));
            }
            self.service_session(k, now);
        }
    }

    // ---- publish path ------------------------------------------------------------------

    /// Takes the oldest Publish request of a session that is still worth answering; older
    /// ones past their timeoutHint are answered BadTimeout.
    fn pop_publish(&mut self, key: SessionKey, now: Now) -> Option<PendingPublish> {
        loop {
            let pp = self.sessions.get_mut(&key)?.publish.pop_front()?;
            if pp.expires_ns <= now.mono_ns {
                let fault = crate::response::fault(pp.request_handle, StatusCode::BadTimeout, now);
                self.emit(pp.channel_id, pp.request_id, fault);
                continue;
            }
            return Some(pp);
        }
    }

    fn emit(&mut self, channel_id: u32, request_id: u32, response: Response) {
        self.emit_deferred(channel_id, request_id, Deferred::Response(response));
    }

    fn emit_deferred(&mut self, channel_id: u32, request_id: u32, d: Deferred) {
        let q = self.outbox.entry(channel_id).or_default();
        if q.is_empty() {
            self.ready_channels.push(channel_id);
        }
        q.push((request_id, d));
    }

    /// Takes back a buffer of an encoded response (after the connection chunked it).
    pub fn recycle_buffer(&mut self, buf: Vec<u8>) {
        self.pools.put_buffer(buf);
    }

    /// Answers `pp` with the next message of subscription `slot` (notifications or a
    /// keep-alive).
    fn send_from(&mut self, slot: u32, pp: PendingPublish, now: Now) {
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        sub.late = false;
        sub.message_sent = true;
        sub.keep_alive_counter = 0;
        sub.lifetime_counter = 0;
        let key = sub.session;
        let (message, more, count) = if sub.has_notifications() {
            build_message(sub, &mut self.items, &mut self.pools, now)
        } else {
            let msg = NotificationMessage {
                sequence_number: sub.next_seq,
                publish_time: now.utc,
                notification_data: Vec::new(),
            };
            (msg, false, 0)
        };
        let data = !message.notification_data.is_empty();
        if more {
            sub.late = true; // the next queued request gets the rest at once
        }
        let seq = message.sequence_number;
        let keep_alive = if data {
            self.stats.messages += 1;
            self.stats.notifications += count as u64;
            sub.retrans.push_back(message);
            if let Some(k) = key {
                if let Some(ss) = self.sessions.get_mut(&k) {
                    ss.retrans_order.push_back((slot, seq));
                }
                self.trim_retransmission(k);
            }
            None
        } else {
            self.stats.keep_alives += 1;
            Some(message)
        };
        // The response is encoded now, straight from the kept message (not copied), into a
        // pooled buffer.
        let Some(sub) = self.subs.get(slot as usize).and_then(Option::as_ref) else {
            return;
        };
        let Some(message) = keep_alive.as_ref().or_else(|| sub.retrans.back()) else {
            return;
        };
        let mut body = self.pools.buffer();
        NodeId::ns0(crate::generated::node_ids::PublishResponse_Encoding_DefaultBinary)
            .encode(&mut body);
        header(pp.request_handle, now).encode(&mut body);
        sub.id.encode(&mut body);
        (sub.retrans.len() as i32).encode(&mut body);
        for m in &sub.retrans {
            m.sequence_number.encode(&mut body);
        }
        more.encode(&mut body);
        message.encode(&mut body);
        pp.results.encode(&mut body);
        0i32.encode(&mut body); // diagnosticInfos: none
        self.pools.put_results(pp.results);
        self.emit_deferred(
            pp.channel_id,
            pp.request_id,
            Deferred::Encoded {
                request_handle: pp.request_handle,
                body,
                max_size: pp.max_response_size,
            },
        );
        if more {
            if let Some(k) = key {
                self.service_session(k, now);
            }
        }
    }

    /// Drops the oldest kept messages of a session past its retransmission bound.
    fn trim_retransmission(&mut self, key: SessionKey) {
        let max = self.limits.max_retransmission_queue_per_session as usize;
        let Some(ss) = self.sessions.get_mut(&key) else {
            return;
        };
        while ss.retrans_order.len() > max {
            let Some((slot, seq)) = ss.retrans_order.pop_front() else {
                break;
            };
            if let Some(Some(sub)) = self.subs.get_mut(slot as usize) {
                if let Some(i) = sub.retrans.iter().position(|m| m.sequence_number == seq) {
                    if let Some(m) = sub.retrans.remove(i) {
                        sub.diag.discarded_messages = sub.diag.discarded_messages.wrapping_add(1);
                        self.pools.put_message(m);
                    }
                }
            }
        }
    }

    /// Answers queued Publish requests of a session while something is waiting: status
    /// messages of subscriptions that left, then late subscriptions (highest priority first).
    fn service_session(&mut self, key: SessionKey, now: Now) {
        loop {
            let Some(ss) = self.sessions.get(&key) else {
                return;
            };
            if ss.publish.is_empty() {
                return;
            }
            if !ss.status_messages.is_empty() {
                let Some(pp) = self.pop_publish(key, now) else {
                    return;
                };
                let Some(ss) = self.sessions.get_mut(&key) else {
                    return;
                };
                let Some((id, seq, status)) = ss.status_messages.pop_front() else {
                    return;
                };
                let msg = NotificationMessage {
                    sequence_number: seq,
                    publish_time: now.utc,
                    notification_data: vec![ExtensionObject::from_struct(
                        &StatusChangeNotification {
                            status,
                            diagnostic_info: Default::default(),
                        },
                    )],
                };
                let resp = PublishResponse {
                    response_header: header(pp.request_handle, now),
                    subscription_id: id,
                    available_sequence_numbers: Vec::new(),
                    more_notifications: false,
                    notification_message: msg,
                    results: pp.results,
                    diagnostic_infos: Vec::new(),
                };
                self.emit(
                    pp.channel_id,
                    pp.request_id,
                    Response::Publish(Box::new(resp)),
                );
                continue;
            }
            let mut best: Option<(u8, u32)> = None;
            for &slot in &ss.subs {
                if let Some(Some(s)) = self.subs.get(slot as usize) {
                    if s.late && best.is_none_or(|(p, _)| s.priority > p) {
                        best = Some((s.priority, slot));
                    }
                }
            }
            let Some((_, slot)) = best else { return };
            let Some(pp) = self.pop_publish(key, now) else {
                return;
            };
            self.send_from(slot, pp, now);
        }
    }

    /// Publish (Part 4 §5.13.5). Acknowledgements are processed at once; the request is then
    /// queued and answered when a subscription has something to send (possibly at once, into
    /// the outbox). `Some(response)` is an immediate answer (a fault), `None` means queued.
    pub fn publish(
        &mut self,
        key: SessionKey,
        channel_id: u32,
        request_id: u32,
        max_response_size: u32,
        req: &crate::generated::types::PublishRequest,
        now: Now,
    ) -> Option<Response> {
        let handle = req.request_header.request_handle;
        let mut results = self.pools.results();
        for ack in &req.subscription_acknowledgements {
            results.push(self.acknowledge(key, ack.subscription_id, ack.sequence_number));
        }
        let ss = self.sessions.entry(key).or_default();
        if ss.subs.is_empty() && ss.status_messages.is_empty() {
            return Some(crate::response::fault(
                handle,
                StatusCode::BadNoSubscription,
                now,
            ));
        }
        if ss.publish.len() >= self.limits.max_publish_requests_per_session as usize {
            return Some(crate::response::fault(
                handle,
                StatusCode::BadTooManyPublishRequests,
                now,
            ));
        }
        let hint = req.request_header.timeout_hint;
        let expires_ns = if hint == 0 {
            u64::MAX
        } else {
            now.deadline_after_ms(hint as f64)
        };
        ss.publish.push_back(PendingPublish {
            channel_id,
            request_id,
            request_handle: handle,
            expires_ns,
            results,
            max_response_size,
        });
        for &slot in &ss.subs {
            if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.lifetime_counter = 0;
                s.diag.publish_requests = s.diag.publish_requests.wrapping_add(1);
            }
        }
        self.service_session(key, now);
        None
    }

    /// Cancel: answers the session's queued Publish requests with this request handle with
    /// Bad_RequestCancelledByClient; returns how many.
    pub fn cancel_publish(&mut self, key: SessionKey, request_handle: u32, now: Now) -> u32 {
        let Some(ss) = self.sessions.get_mut(&key) else {
            return 0;
        };
        let mut cancelled = Vec::new();
        ss.publish.retain(|p| {
            if p.request_handle == request_handle {
                cancelled.push((p.channel_id, p.request_id));
                false
            } else {
                true
            }
        });
        for &(channel, request_id) in &cancelled {
            let f = crate::response::fault(
                request_handle,
                StatusCode::BadRequestCancelledByClient,
                now,
            );
            self.emit(channel, request_id, f);
        }
        cancelled.len() as u32
    }

    fn acknowledge(&mut self, key: SessionKey, sub_id: u32, seq: u32) -> StatusCode {
        let Ok(slot) = self.sub_slot(key, sub_id) else {
            return StatusCode::BadSubscriptionIdInvalid;
        };
        let Some(Some(sub)) = self.subs.get_mut(slot as usize) else {
            return StatusCode::BadSubscriptionIdInvalid;
        };
        match sub.retrans.iter().position(|m| m.sequence_number == seq) {
            Some(i) => {
                if let Some(m) = sub.retrans.remove(i) {
                    self.pools.put_message(m);
                }
                if let Some(ss) = self.sessions.get_mut(&key) {
                    if let Some(j) = ss
                        .retrans_order
                        .iter()
                        .position(|&(s, q)| s == slot && q == seq)
                    {
                        ss.retrans_order.remove(j);
                    }
                }
                StatusCode::Good
            }
            None => StatusCode::BadSequenceNumberUnknown,
        }
    }

    /// Republish (Part 4 §5.13.6).
    pub fn republish(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        seq: u32,
    ) -> Result<NotificationMessage, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.lifetime_counter = 0;
        sub.diag.republish_requests = sub.diag.republish_requests.wrapping_add(1);
        let m = sub
            .retrans
            .iter()
            .find(|m| m.sequence_number == seq)
            .cloned()
            .ok_or(StatusCode::BadMessageNotAvailable)?;
        sub.diag.republish_messages = sub.diag.republish_messages.wrapping_add(1);
        Ok(m)
    }

    /// Responses to queued Publish requests that became ready, for one channel.
    pub fn take_responses(&mut self, channel_id: u32, into: &mut Vec<(u32, Deferred)>) {
        // The channel's list stays in the map (emptied, capacity kept) until the channel
        // closes: no allocation per response.
        if let Some(q) = self.outbox.get_mut(&channel_id) {
            into.append(q);
        }
    }

    /// Channels with responses waiting (each listed once until taken).
    pub fn take_ready_channels(&mut self, into: &mut Vec<u32>) {
        into.append(&mut self.ready_channels);
    }

    // ---- session life --------------------------------------------------------------------

    /// The channel closed: its queued Publish requests and unsent responses are dropped (the
    /// messages stay in the retransmission queues for Republish).
    pub fn on_channel_closed(&mut self, channel_id: u32) {
        self.outbox.remove(&channel_id);
        for ss in self.sessions.values_mut() {
            ss.publish.retain(|p| p.channel_id != channel_id);
        }
    }

    /// The session was activated on another channel: Publish requests queued on the old one
    /// can no longer be answered.
    pub fn on_session_rebound(&mut self, key: SessionKey, channel_id: u32) {
        if let Some(ss) = self.sessions.get_mut(&key) {
            ss.publish.retain(|p| p.channel_id == channel_id);
        }
    }

    /// The session closed or timed out. `delete` (CloseSession's deleteSubscriptions):
    /// its subscriptions go; otherwise they stay, orphaned, until their lifetime ends or
    /// another session takes them over with TransferSubscriptions.
    pub fn on_session_closed(&mut self, key: SessionKey, delete: bool, now: Now) {
        let Some(ss) = self.sessions.remove(&key) else {
            return;
        };
        // Outstanding Publish requests are answered Bad_SessionClosed (Part 4 §5.7.4).
        for p in ss.publish {
            let f = crate::response::fault(p.request_handle, StatusCode::BadSessionClosed, now);
            self.emit(p.channel_id, p.request_id, f);
        }
        for slot in ss.subs {
            if delete {
                self.delete_subscription_slot(slot);
            } else if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.session = None;
                s.late = false;
            }
        }
    }

    // ---- subscription services --------------------------------------------------------

    /// CreateSubscription. `owner` names the session's user (TransferSubscriptions checks it).
    pub fn create_subscription(
        &mut self,
        key: SessionKey,
        owner: &str,
        req: &crate::generated::types::CreateSubscriptionRequest,
        now: Now,
    ) -> Result<Revised, StatusCode> {
        if self.sub_ids.len() >= self.limits.max_subscriptions_per_shard as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
        if count >= self.limits.max_subscriptions_per_session as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let interval_ms = self
            .limits
            .revise_publishing_interval(req.requested_publishing_interval);
        let (keep_alive, lifetime) = self.limits.revise_counts(
            interval_ms,
            req.requested_max_keep_alive_count,
            req.requested_lifetime_count,
        );
        let id = self.next_sub_id();
        let interval_ns = (interval_ms * 1e6) as u64;
        let first_ns = self.first_cycle(interval_ns, now);
        let sub = Subscription {
            id,
            session: Some(key),
            owner: owner.to_owned(),
            interval_ms,
            interval_ns,
            keep_alive_count: keep_alive,
            lifetime_count: lifetime,
            max_notifications: self
                .limits
                .revise_max_notifications(req.max_notifications_per_publish),
            priority: req.priority,
            publishing_enabled: req.publishing_enabled,
            next_ns: first_ns,
            timer_generation: 0,
            keep_alive_counter: 0,
            lifetime_counter: 0,
            message_sent: false,
            late: false,
            next_seq: 1,
            items: Vec::new(),
            ready: Vec::new(),
            status_change: None,
            retrans: VecDeque::new(),
            diag: Box::default(),
        };
        let slot = slab_insert(&mut self.subs, &mut self.sub_free, sub);
        self.sub_ids.insert(id, slot);
        self.sub_heap.push(Reverse((first_ns, slot, 0)));
        self.sessions.entry(key).or_default().subs.push(slot);
        Ok(Revised {
            subscription_id: id,
            publishing_interval_ms: interval_ms,
            lifetime_count: lifetime,
            max_keep_alive_count: keep_alive,
        })
    }

    /// ModifySubscription.
    pub fn modify_subscription(
        &mut self,
        key: SessionKey,
        req: &crate::generated::types::ModifySubscriptionRequest,
        now: Now,
    ) -> Result<Revised, StatusCode> {
        let slot = self.sub_slot(key, req.subscription_id)?;
        let interval_ms = self
            .limits
            .revise_publishing_interval(req.requested_publishing_interval);
        let (keep_alive, lifetime) = self.limits.revise_counts(
            interval_ms,
            req.requested_max_keep_alive_count,
            req.requested_lifetime_count,
        );
        let max_notifications = self
            .limits
            .revise_max_notifications(req.max_notifications_per_publish);
        let interval_ns = (interval_ms * 1e6) as u64;
        let changed = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .is_some_and(|sub| interval_ms != sub.interval_ms);
        let first_ns = if changed {
            self.first_cycle(interval_ns, now)
        } else {
            0
        };
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.keep_alive_count = keep_alive;
        sub.lifetime_count = lifetime;
        sub.max_notifications = max_notifications;
        sub.priority = req.priority;
        sub.lifetime_counter = 0;
        sub.diag.modify = sub.diag.modify.wrapping_add(1);
        if changed {
            sub.interval_ms = interval_ms;
            sub.interval_ns = interval_ns;
            sub.timer_generation = sub.timer_generation.wrapping_add(1);
            sub.next_ns = first_ns;
            self.sub_heap
                .push(Reverse((sub.next_ns, slot, sub.timer_generation)));
        }
        Ok(Revised {
            subscription_id: sub.id,
            publishing_interval_ms: interval_ms,
            lifetime_count: lifetime,
            max_keep_alive_count: keep_alive,
        })
    }

    /// SetPublishingMode for one subscription.
    pub fn set_publishing_mode(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        enabled: bool,
    ) -> StatusCode {
        match self.sub_slot(key, sub_id) {
            Ok(slot) => {
                if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
                    s.publishing_enabled = enabled;
                    s.lifetime_counter = 0;
                    if enabled {
                        s.diag.enable = s.diag.enable.wrapping_add(1);
                    } else {
                        s.diag.disable = s.diag.disable.wrapping_add(1);
                    }
                }
                StatusCode::Good
            }
            Err(e) => e,
        }
    }

    /// DeleteSubscriptions for one subscription.
    pub fn delete_subscription(&mut self, key: SessionKey, sub_id: u32, now: Now) -> StatusCode {
        match self.sub_slot(key, sub_id) {
            Ok(slot) => {
                self.delete_subscription_slot(slot);
                // A queued Publish request with no subscription left is answered now.
                self.answer_if_no_subscriptions(key, now);
                StatusCode::Good
            }
            Err(e) => e,
        }
    }

    fn answer_if_no_subscriptions(&mut self, key: SessionKey, now: Now) {
        let Some(ss) = self.sessions.get_mut(&key) else {
            return;
        };
        if !ss.subs.is_empty() || !ss.status_messages.is_empty() {
            return;
        }
        let pending: Vec<PendingPublish> = ss.publish.drain(..).collect();
        for pp in pending {
            let f = crate::response::fault(pp.request_handle, StatusCode::BadNoSubscription, now);
            self.emit(pp.channel_id, pp.request_id, f);
        }
    }

    fn delete_subscription_slot(&mut self, slot: u32) {
        let Some(mut sub) = self.subs.get_mut(slot as usize).and_then(|s| s.take()) else {
            return;
        };
        for m in sub.retrans.drain(..) {
            self.pools.put_message(m);
        }
        for it in sub.items {
            self.remove_item_slot(it);
        }
        self.sub_ids.remove(&sub.id);
        self.sub_free.push(slot);
        if let Some(k) = sub.session {
            if let Some(ss) = self.sessions.get_mut(&k) {
                ss.subs.retain(|&s| s != slot);
                ss.retrans_order.retain(|&(s, _)| s != slot);
            }
        }
    }

    /// TransferSubscriptions within this shard (Part 4 §5.13.7). `owner` is the user of
    /// the requesting session; a subscription of another user is BadUserAccessDenied. The
    /// old session (if any) gets a StatusChangeNotification GoodSubscriptionTransferred.
    pub fn transfer_subscription(
        &mut self,
        key: SessionKey,
        owner: &str,
        sub_id: u32,
        send_initial_values: bool,
        now: Now,
    ) -> Result<Vec<u32>, StatusCode> {
        let slot = *self
            .sub_ids
            .get(&sub_id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.diag.transfer_requests = sub.diag.transfer_requests.wrapping_add(1);
        if sub.owner != owner {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let old = sub.session;
        if old != Some(key) {
            let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
            if count >= self.limits.max_subscriptions_per_session as usize {
                return Err(StatusCode::BadTooManySubscriptions);
            }
            let sub = self
                .subs
                .get_mut(slot as usize)
                .and_then(Option::as_mut)
                .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
            sub.session = Some(key);
            sub.late = false;
            sub.lifetime_counter = 0;
            let seq = sub.take_seq();
            if let Some(o) = old {
                if let Some(ss) = self.sessions.get_mut(&o) {
                    ss.subs.retain(|&s| s != slot);
                    ss.retrans_order.retain(|&(s, _)| s != slot);
                    ss.status_messages.push_back((
                        sub_id,
                        seq,
                        StatusCode::GoodSubscriptionTransferred,
                    ));
                }
                self.service_session(o, now);
            }
            let ss = self.sessions.entry(key).or_default();
            ss.subs.push(slot);
            if let Some(Some(sub)) = self.subs.get(slot as usize) {
                for m in &sub.retrans {
                    ss.retrans_order.push_back((slot, m.sequence_number));
                }
            }
        }
        if send_initial_values {
            self.resend_slot(slot);
        }
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        Ok(sub.available())
    }

    /// Cross-shard TransferSubscriptions, the owning side: takes subscription `sub_id` out of
    /// this engine for a session of another shard, if `owner` (the requesting session's
    /// user) created it and it has at most `max_items` monitored items (what the other shard
    /// has room for; else BadTooManyMonitoredItems and nothing changes). The old session
    /// gets a StatusChangeNotification GoodSubscriptionTransferred, as in a transfer within
    /// the shard. Everything the subscription holds leaves with it: parameters, counters,
    /// sequence numbers, its items with their filters, queues and last values, triggering
    /// links, the ready list and the retransmission queue.
    pub fn export_subscription(
        &mut self,
        owner: &str,
        sub_id: u32,
        max_items: usize,
        now: Now,
    ) -> Result<MovedSubscription, StatusCode> {
        let slot = *self
            .sub_ids
            .get(&sub_id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        if sub.owner != owner {
            return Err(StatusCode::BadUserAccessDenied);
        }
        if sub.items.len() > max_items {
            return Err(StatusCode::BadTooManyMonitoredItems);
        }
        let item_slots = sub.items.clone();
        for &it in &item_slots {
            self.stop_sampling(it);
            if let Some(i) = self.event_items.iter().position(|&x| x == it) {
                self.event_items.swap_remove(i);
            }
        }
        let Some(mut sub) = self.subs.get_mut(slot as usize).and_then(Option::take) else {
            return Err(StatusCode::BadSubscriptionIdInvalid);
        };
        self.sub_ids.remove(&sub_id);
        self.sub_free.push(slot);
        let index_of: HashMap<u32, u32> = item_slots
            .iter()
            .enumerate()
            .map(|(i, &it)| (it, i as u32))
            .collect();
        let mut items = Vec::with_capacity(item_slots.len());
        for &it in &item_slots {
            let Some(mut item) = self.items.get_mut(it as usize).and_then(|x| x.take()) else {
                continue;
            };
            self.item_ids.remove(&item.id);
            self.item_free.push(it);
            // Links to items of the same subscription become positions in `items`.
            item.links = item
                .links
                .iter()
                .filter_map(|&(t, id)| index_of.get(&t).map(|&i| (i, id)))
                .collect();
            item.in_ready = false;
            items.push(item);
        }
        let ready = sub
            .ready
            .iter()
            .filter_map(|it| index_of.get(it).copied())
            .collect();
        sub.items.clear();
        sub.ready.clear();
        let old = sub.session.take();
        let seq = sub.take_seq();
        if let Some(o) = old {
            if let Some(ss) = self.sessions.get_mut(&o) {
                ss.subs.retain(|&x| x != slot);
                ss.retrans_order.retain(|&(x, _)| x != slot);
                ss.status_messages.push_back((
                    sub_id,
                    seq,
                    StatusCode::GoodSubscriptionTransferred,
                ));
            }
            self.service_session(o, now);
        }
        Ok(MovedSubscription { sub, items, ready })
    }

    /// Room here for one more subscription of session `key`: the number of monitored items
    /// it may bring (per-subscription and per-shard limits, less `reserved` items promised
    /// to transfers under way), or BadTooManySubscriptions.
    pub fn import_room(
        &self,
        key: SessionKey,
        reserved_subs: usize,
        reserved_items: usize,
    ) -> Result<usize, StatusCode> {
        let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
        if count + reserved_subs >= self.limits.max_subscriptions_per_session as usize
            || self.sub_ids.len() + reserved_subs
                >= self.limits.max_subscriptions_per_shard as usize
        {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let free = (self.limits.max_monitored_items_per_shard as usize)
            .saturating_sub(self.item_ids.len() + reserved_items);
        Ok(free.min(self.limits.max_monitored_items_per_subscription as usize))
    }

    /// Cross-shard TransferSubscriptions, the receiving side: adds a subscription taken from
    /// another shard ([`SubscriptionEngine::export_subscription`], within the room
    /// [`SubscriptionEngine::import_room`] offered) to session `key`, restarts its timers
    /// and sampling here, and (`send_initial_values`) queues every item's last value.
    /// Returns its available sequence numbers. Ids stay those the other shard gave; an id
    /// that is live here (possible only after that shard's 24-bit counter wrapped onto a
    /// live id) is BadSubscriptionIdInvalid and the subscription is dropped.
    pub fn import_subscription(
        &mut self,
        key: SessionKey,
        moved: MovedSubscription,
        send_initial_values: bool,
        now: Now,
    ) -> Result<Vec<u32>, StatusCode> {
        let MovedSubscription {
            mut sub,
            items,
            ready,
        } = moved;
        if self.sub_ids.contains_key(&sub.id)
            || items.iter().any(|i| self.item_ids.contains_key(&i.id))
        {
            return Err(StatusCode::BadSubscriptionIdInvalid);
        }
        sub.session = Some(key);
        sub.late = false;
        sub.lifetime_counter = 0;
        sub.timer_generation = 0;
        sub.diag.transfer_requests = sub.diag.transfer_requests.wrapping_add(1);
        sub.next_ns = self.first_cycle(sub.interval_ns, now);
        let id = sub.id;
        let next_ns = sub.next_ns;
        let slot = slab_insert(&mut self.subs, &mut self.sub_free, sub);
        self.sub_ids.insert(id, slot);
        self.sub_heap.push(Reverse((next_ns, slot, 0)));
        let mut slots = Vec::with_capacity(items.len());
        for mut item in items {
            item.sub = slot;
            item.source = NONE;
            let item_id = item.id;
            slots.push(self.insert_item(slot, item_id, item));
        }
        for &it in &slots {
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            item.links = item
                .links
                .iter()
                .filter_map(|&(i, id)| slots.get(i as usize).map(|&t| (t, id)))
                .collect();
            let (mode, event) = (item.mode, item.event.is_some());
            if event {
                self.event_items.push(it);
            } else if mode != MonitoringMode::Disabled {
                self.start_sampling(it, now);
            }
        }
        if let Some(Some(sub)) = self.subs.get_mut(slot as usize) {
            for &i in &ready {
                if let Some(&it) = slots.get(i as usize) {
                    if let Some(Some(item)) = self.items.get_mut(it as usize) {
                        item.in_ready = true;
                        sub.ready.push(it);
                    }
                }
            }
        }
        let ss = self.sessions.entry(key).or_default();
        ss.subs.push(slot);
        if let Some(Some(sub)) = self.subs.get(slot as usize) {
            for m in &sub.retrans {
                ss.retrans_order.push_back((slot, m.sequence_number));
            }
        }
        self.trim_retransmission(key);
        if send_initial_values {
            self.resend_slot(slot);
        }
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        Ok(sub.available())
    }

    /// A response produced outside the Publish path for a queued request (a
    /// TransferSubscriptions answered after another shard replied), sent like Publish
    /// responses through the channel's outbox.
    pub fn emit_response(&mut self, channel_id: u32, request_id: u32, response: Response) {
        self.emit(channel_id, request_id, response);
    }

    /// Server.ResendData: every item in Reporting mode queues its last value again.
    pub fn resend_data(&mut self, key: SessionKey, sub_id: u32) -> Result<(), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        self.resend_slot(slot);
        Ok(())
    }

    fn resend_slot(&mut self, slot: u32) {
        let Some(Some(sub)) = self.subs.get_mut(slot as usize) else {
            return;
        };
        for &it in &sub.items {
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            if item.mode != MonitoringMode::Reporting {
                continue;
            }
            if let Some(last) = &item.last {
                let v = item_value(item, last.clone());
                item.queue.push(Queued::Data(v));
                if !item.in_ready {
                    item.in_ready = true;
                    sub.ready.push(it);
                }
            }
        }
    }

    /// Server.GetMonitoredItems: (server handles, client handles).
    pub fn monitored_items_of(
        &self,
        key: SessionKey,
        sub_id: u32,
    ) -> Result<(Vec<u32>, Vec<u32>), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let mut server = Vec::with_capacity(sub.items.len());
        let mut client = Vec::with_capacity(sub.items.len());
        for &it in &sub.items {
            if let Some(Some(item)) = self.items.get(it as usize) {
                server.push(item.id);
                client.push(item.client_handle);
            }
        }
        Ok((server, client))
    }

    // ---- monitored item services ------------------------------------------------------

    /// CreateMonitoredItems: the subscription check and one result per item. The caller
    /// checked the operation count. `Err` is the service result.
    #[allow(clippy::too_many_arguments)]
    pub fn create_monitored_items(
        &mut self,
        shared: &crate::shared::ServerShared,
        key: SessionKey,
        roles: crate::roles::Roles,
        sub_id: u32,
        timestamps: TimestampsToReturn,
        items: &[MonitoredItemCreateRequest],
        now: Now,
    ) -> Result<Vec<MonitoredItemCreateResult>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let ts =
            Timestamps::from_i32(timestamps.0).ok_or(StatusCode::BadTimestampsToReturnInvalid)?;
        let space = &shared.address_space;
        let event_limits = crate::events::filter::FilterLimits::from_config(&shared.config.events);
        let mut results = Vec::with_capacity(items.len());
        for r in items {
            if r.item_to_monitor.attribute_id == attr::EventNotifier && self.event_cursor.is_none()
            {
                // Events published from now on reach this shard's event items.
                self.event_cursor = Some(shared.events.bus.cursor());
            }
            results.push(
                match self.create_item(space, roles, event_limits, slot, ts, r, now) {
                    Ok(res) => res,
                    Err(status) => MonitoredItemCreateResult {
                        status_code: status,
                        ..Default::default()
                    },
                },
            );
        }
        Ok(results)
    }

    #[allow(clippy::too_many_arguments)]
    fn create_item(
        &mut self,
        space: &AddressSpace,
        roles: crate::roles::Roles,
        event_limits: crate::events::filter::FilterLimits,
        slot: u32,
        ts: Timestamps,
        r: &MonitoredItemCreateRequest,
        now: Now,
    ) -> Result<MonitoredItemCreateResult, StatusCode> {
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        if self.item_ids.len() >= self.limits.max_monitored_items_per_shard as usize
            || sub.items.len() >= self.limits.max_monitored_items_per_subscription as usize
        {
            return Err(StatusCode::BadTooManyMonitoredItems);
        }
        let sub_interval = sub.interval_ms;
        let rv = &r.item_to_monitor;
        let node_index = space
            .node_index(&rv.node_id)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let node = space
            .node_at(node_index)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        if space.has_role_permissions_in(node.node_id.namespace) {
            // What a Read of the attribute would need; events need ReceiveEvents.
            let needed = match rv.attribute_id {
                attr::EventNotifier => crate::generated::types::PermissionType::ReceiveEvents,
                a => crate::address_space::attributes::read_permission(a),
            };
            if !space.permissions(node_index, roles).contains(needed) {
                return Err(StatusCode::BadUserAccessDenied);
            }
        }
        let mode = r.monitoring_mode;
        if !(0..=2).contains(&mode.0) {
            return Err(StatusCode::BadMonitoringModeInvalid);
        }
        if rv.attribute_id == attr::EventNotifier {
            return self.create_event_item(space, roles, slot, ts, r, node_index, event_limits);
        }
        // The attribute must be readable now (same checks as Read).
        let initial = read_attribute(
            space,
            &rv.node_id,
            rv.attribute_id,
            rv.index_range.as_str(),
            &rv.data_encoding,
            Timestamps::Both,
            now,
        );
        if let Some(s) = initial.status {
            if s.is_bad()
                && matches!(
                    s,
                    StatusCode::BadAttributeIdInvalid
                        | StatusCode::BadIndexRangeInvalid
                        | StatusCode::BadNotReadable
                        | StatusCode::BadUserAccessDenied
                        | StatusCode::BadDataEncodingInvalid
                        | StatusCode::BadDataEncodingUnsupported
                )
            {
                return Err(s);
            }
        }
        let range = NumericRange::parse(rv.index_range.as_str())
            .map_err(|_| StatusCode::BadIndexRangeInvalid)?;
        let params = &r.requested_parameters;
        let filter = data_change_settings(space, node, rv.attribute_id, &params.filter, &initial)?;
        let (sampling, sampling_ms, filter, spec) = self.revise_filter(
            node,
            rv.attribute_id,
            params.sampling_interval,
            sub_interval,
            filter,
            stepped_variable(space, node, &initial),
        )?;
        if spec.is_some() {
            aggregate_timestamps(ts)?;
        }
        let aggregate = spec.map(|spec| Box::new(aggregate::AggregateState::new(spec, now.utc)));
        let filter_result = aggregate.as_ref().map_or_else(ExtensionObject::null, |a| {
            ExtensionObject::from_struct(&a.spec.result(a.interval_start()))
        });
        let queue_size = self.limits.revise_queue_size(params.queue_size);
        let id = self.next_item_id();
        let item = MonitoredItem {
            id,
            sub: slot,
            client_handle: params.client_handle,
            node_index,
            attribute_id: rv.attribute_id,
            range,
            timestamps: ts,
            mode,
            sampling,
            sampling_ms,
            source: NONE,
            filter,
            last: None,
            version: 0,
            queue: ItemQueue::new(queue_size, params.discard_oldest),
            in_ready: false,
            triggered: false,
            links: Vec::new(),
            event: None,
            aggregate,
        };
        let it = self.insert_item(slot, id, item);
        if mode != MonitoringMode::Disabled {
            self.start_sampling(it, now);
            // The first sample is taken at once: its value is the initial notification. An
            // exception-based item reads its cell again now that it watches it, with the
            // version, so no change can slip between the two or come twice.
            if sampling == Sampling::Exception && self.resync_pending.last() == Some(&it) {
                self.resync_pending.pop();
                self.resync_exception_item(space, it, false, now);
            } else {
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &initial_sample(initial, now),
                    now,
                );
            }
        }
        Ok(MonitoredItemCreateResult {
            status_code: StatusCode::Good,
            monitored_item_id: id,
            revised_sampling_interval: sampling_ms,
            revised_queue_size: queue_size,
            filter_result,
        })
    }

    /// An event monitored item: the node must be an event notifier (EventNotifier
    /// SubscribeToEvents), the filter an EventFilter; the filter result goes back to the
    /// client (per-clause statuses).
    #[allow(clippy::too_many_arguments)]
    fn create_event_item(
        &mut self,
        space: &AddressSpace,
        roles: crate::roles::Roles,
        slot: u32,
        ts: Timestamps,
        r: &MonitoredItemCreateRequest,
        node_index: u32,
        event_limits: crate::events::filter::FilterLimits,
    ) -> Result<MonitoredItemCreateResult, StatusCode> {
        let rv = &r.item_to_monitor;
        if !rv.index_range.as_str().is_empty() {
            return Err(StatusCode::BadIndexRangeInvalid);
        }
        if !crate::events::is_event_notifier(space, &rv.node_id) {
            return Err(StatusCode::BadAttributeIdInvalid);
        }
        let params = &r.requested_parameters;
        let filter = decode_event_filter(&params.filter)?;
        let (compiled, filter_result) =
            match crate::events::filter::compile_with(&filter, space, event_limits) {
                Ok(x) => x,
                Err((status, result)) => {
                    return Ok(MonitoredItemCreateResult {
                        status_code: status,
                        filter_result: ExtensionObject::from_struct(&result),
                        ..Default::default()
                    })
                }
            };
        let queue_size = self.limits.revise_event_queue_size(params.queue_size);
        let id = self.next_item_id();
        let item = MonitoredItem {
            id,
            sub: slot,
            client_handle: params.client_handle,
            node_index,
            attribute_id: rv.attribute_id,
            range: None,
            timestamps: ts,
            mode: r.monitoring_mode,
            sampling: Sampling::Event,
            sampling_ms: 0.0,
            source: NONE,
            filter: DataChangeSettings::default(),
            last: None,
            version: 0,
            queue: ItemQueue::new(queue_size, params.discard_oldest),
            in_ready: false,
            triggered: false,
            links: Vec::new(),
            event: Some(Box::new(EventItem {
                notifier: rv.node_id.clone(),
                filter: compiled,
                roles,
            })),
            aggregate: None,
        };
        let it = self.insert_item(slot, id, item);
        self.event_items.push(it);
        Ok(MonitoredItemCreateResult {
            status_code: StatusCode::Good,
            monitored_item_id: id,
            revised_sampling_interval: 0.0,
            revised_queue_size: queue_size,
            filter_result: filter_result_object(&filter_result),
        })
    }

    /// Stores a new item in the pool and in its subscription; returns its slot.
    fn insert_item(&mut self, slot: u32, id: u32, item: MonitoredItem) -> u32 {
        let it = self.items.insert(&mut self.item_free, item);
        self.item_ids.insert(id, it);
        if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
            s.items.push(it);
        }
        it
    }

    /// Revised sampling interval (Part 4 §5.12.1.2): negative = the publishing interval; 0 =
    /// exception-based for stored (writable) values, else the fastest supported; never
    /// below the configured minimum or the node's MinimumSamplingInterval.
    fn revise_sampling(
        &self,
        node: &Node,
        attribute_id: u32,
        requested: f64,
        sub_interval: f64,
    ) -> (Sampling, f64) {
        let requested = if requested.is_nan() || requested < 0.0 {
            sub_interval
        } else {
            requested
        };
        if attribute_id != attr::Value {
            return (
                Sampling::Once,
                requested.min(self.limits.max_sampling_interval_ms),
            );
        }
        let (stored, node_min) = match &node.attributes {
            ClassAttributes::Variable(v) => (
                matches!(v.value, ValueSource::Cell(_)),
                v.minimum_sampling_interval,
            ),
            _ => (false, 0.0),
        };
        if requested == 0.0 && stored {
            return (Sampling::Exception, 0.0);
        }
        let min = if node_min > 0.0 {
            node_min.max(self.limits.min_sampling_interval_ms)
        } else {
            self.limits.min_sampling_interval_ms
        };
        (
            Sampling::Timed,
            requested.clamp(min, self.limits.max_sampling_interval_ms.max(min)),
        )
    }

    /// The revised sampling of a data item and its filter. An AggregateFilter (Part 4
    /// §7.22.4) samples on a timer (a requested 0 is the fastest interval granted, not
    /// exception-based: the intervals end on the sampling ticks); its processingInterval is
    /// revised to at least twice the revised sampling interval (a non-positive or non-finite
    /// one to the publishing interval first) and at most
    /// [`aggregate::AGGREGATE_PROCESSING_INTERVAL_MS_MAX`]; the sampling interval is then
    /// raised, if needed, so that one interval holds at most
    /// [`aggregate::AGGREGATE_SAMPLES_PER_INTERVAL`] samples.
    fn revise_filter(
        &self,
        node: &Node,
        attribute_id: u32,
        requested_sampling: f64,
        sub_interval: f64,
        filter: ItemFilter,
        stepped: bool,
    ) -> Result<
        (
            Sampling,
            f64,
            DataChangeSettings,
            Option<aggregate::AggregateSpec>,
        ),
        StatusCode,
    > {
        let f = match filter {
            ItemFilter::DataChange(settings) => {
                let (sampling, ms) =
                    self.revise_sampling(node, attribute_id, requested_sampling, sub_interval);
                return Ok((sampling, ms, settings, None));
            }
            ItemFilter::Aggregate(f) => f,
        };
        let requested = if requested_sampling == 0.0 {
            self.limits.min_sampling_interval_ms
        } else {
            requested_sampling
        };
        let (_, mut sampling_ms) =
            self.revise_sampling(node, attribute_id, requested, sub_interval);
        let pi = f.processing_interval;
        let pi = if pi.is_finite() && pi > 0.0 {
            pi
        } else {
            sub_interval
        };
        let max = aggregate::AGGREGATE_PROCESSING_INTERVAL_MS_MAX;
        let mut pi = pi.max(2.0 * sampling_ms).min(max);
        // Whole 100-ns ticks, as the intervals are computed.
        pi = ((pi * 10_000.0).round() / 10_000.0).max(0.0001);
        let per_interval = pi / aggregate::AGGREGATE_SAMPLES_PER_INTERVAL;
        if sampling_ms < per_interval {
            sampling_ms = per_interval.min(self.limits.max_sampling_interval_ms);
            if pi / sampling_ms > aggregate::AGGREGATE_SAMPLES_PER_INTERVAL {
                pi = sampling_ms * aggregate::AGGREGATE_SAMPLES_PER_INTERVAL;
            }
        }
        let spec = aggregate::AggregateSpec::new(&f, pi, stepped)?;
        Ok((
            Sampling::Timed,
            sampling_ms,
            DataChangeSettings::default(),
            Some(spec),
        ))
    }

    /// Puts an enabled item on its sampling path.
    fn start_sampling(&mut self, it: u32, now: Now) {
        let Some(Some(item)) = self.items.get(it as usize) else {
            return;
        };
        match item.sampling {
            Sampling::Timed => {
                let interval_ns = ((item.sampling_ms * 1e6) as u64).max(1);
                let key = (item.node_index, item.attribute_id, interval_ns);
                let aggregate = item.aggregate.is_some();
                let src = match self.source_map.get(&key) {
                    Some(&s) => s,
                    None => self.new_source(key, now),
                };
                if let Some(Some(s)) = self.sources.get_mut(src as usize) {
                    s.items.push(it);
                    s.aggregate_items += u32::from(aggregate);
                    self.aggregate_items += usize::from(aggregate);
                }
                if let Some(Some(item)) = self.items.get_mut(it as usize) {
                    item.source = src;
                }
            }
            Sampling::Exception => {
                let node = item.node_index;
                if self.exception_by_node.add(node, it) {
                    let shard = self.shard_index as usize;
                    self.changes
                        .open(shard, self.limits.change_queue_per_shard as usize);
                    self.changes.watch(shard, node);
                }
                // Watching first, then reading the cell (at the next drain, or at once by
                // `create_item`): a store after that read arrives as a change, one before it
                // is in the value read (the change path's ordering).
                self.resync_pending.push(it);
            }
            Sampling::Once | Sampling::Event => {}
        }
    }

    /// Takes an item off its sampling path.
    fn stop_sampling(&mut self, it: u32) {
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        let src = std::mem::replace(&mut item.source, NONE);
        let aggregate = item.aggregate.is_some();
        match item.sampling {
            Sampling::Timed if src != NONE => {
                let empty = match self.sources.get_mut(src as usize) {
                    Some(Some(s)) => {
                        if let Some(i) = s.items.iter().position(|&x| x == it) {
                            s.items.swap_remove(i);
                            if aggregate {
                                s.aggregate_items = s.aggregate_items.saturating_sub(1);
                                self.aggregate_items = self.aggregate_items.saturating_sub(1);
                            }
                        }
                        s.items.is_empty()
                    }
                    _ => false,
                };
                if empty {
                    self.remove_source(src);
                }
            }
            Sampling::Exception => {
                let node = item.node_index;
                if self.exception_by_node.remove(node, it) {
                    self.changes.unwatch(self.shard_index as usize, node);
                }
            }
            _ => {}
        }
    }

    fn new_source(&mut self, key: (u32, u32, u64), now: Now) -> u32 {
        let interval_ns = key.2;
        let b = match self.bucket_map.get(&interval_ns) {
            Some(&b) => b,
            None => {
                self.bucket_generation = self.bucket_generation.wrapping_add(1);
                let generation = self.bucket_generation;
                let next_ns = now.mono_ns.saturating_add(interval_ns);
                let bucket = Bucket {
                    interval_ns,
                    next_ns,
                    sources: Vec::new(),
                    generation,
                };
                let b = slab_insert(&mut self.buckets, &mut self.bucket_free, bucket);
                self.bucket_map.insert(interval_ns, b);
                self.bucket_heap.push(Reverse((next_ns, b, generation)));
                b
            }
        };
        let pos = self
            .buckets
            .get(b as usize)
            .and_then(Option::as_ref)
            .map_or(0, |bk| bk.sources.len() as u32);
        let source = Source {
            node_index: key.0,
            attribute_id: key.1,
            interval_ns,
            last: None,
            bucket: b,
            pos,
            items: Vec::new(),
            aggregate_items: 0,
            pending_sample: None,
        };
        let s = self.sources.insert(&mut self.source_free, source);
        if let Some(Some(bk)) = self.buckets.get_mut(b as usize) {
            bk.sources.push(s);
        }
        self.source_map.insert(key, s);
        s
    }

    fn remove_source(&mut self, s: u32) {
        let Some(src) = self.sources.get_mut(s as usize).and_then(|x| x.take()) else {
            return;
        };
        self.source_free.push(s);
        self.source_map
            .remove(&(src.node_index, src.attribute_id, src.interval_ns));
        let b = src.bucket;
        let Some(entry) = self.buckets.get_mut(b as usize) else {
            return;
        };
        let Some(bk) = entry.as_mut() else { return };
        let pos = src.pos as usize;
        if bk.sources.get(pos) == Some(&s) {
            bk.sources.swap_remove(pos);
            if let Some(&moved) = bk.sources.get(pos) {
                if let Some(Some(m)) = self.sources.get_mut(moved as usize) {
                    m.pos = pos as u32;
                }
            }
        } else {
            // The bucket is mid-tick (its list is taken): it is rebuilt without `s` below.
            bk.sources.retain(|&x| x != s);
            for (i, &x) in bk.sources.iter().enumerate() {
                if let Some(Some(m)) = self.sources.get_mut(x as usize) {
                    m.pos = i as u32;
                }
            }
        }
        if bk.sources.is_empty() {
            let interval = bk.interval_ns;
            *entry = None;
            self.bucket_free.push(b);
            self.bucket_map.remove(&interval);
        }
    }

    fn remove_item_slot(&mut self, it: u32) {
        self.stop_sampling(it);
        if let Some(i) = self.event_items.iter().position(|&x| x == it) {
            self.event_items.swap_remove(i);
        }
        if let Some(item) = self.items.get_mut(it as usize).and_then(|x| x.take()) {
            self.item_ids.remove(&item.id);
            self.item_free.push(it);
        }
    }

    fn item_slot(&self, sub_slot: u32, id: u32) -> Result<u32, StatusCode> {
        let it = *self
            .item_ids
            .get(&id)
            .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
        match self.items.get(it as usize) {
            Some(Some(item)) if item.sub == sub_slot => Ok(it),
            _ => Err(StatusCode::BadMonitoredItemIdInvalid),
        }
    }

    /// ModifyMonitoredItems. `Err` is the service result.
    #[allow(clippy::too_many_arguments)]
    pub fn modify_monitored_items(
        &mut self,
        space: &AddressSpace,
        event_limits: crate::events::filter::FilterLimits,
        key: SessionKey,
        sub_id: u32,
        timestamps: TimestampsToReturn,
        items: &[MonitoredItemModifyRequest],
        now: Now,
    ) -> Result<Vec<MonitoredItemModifyResult>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let ts =
            Timestamps::from_i32(timestamps.0).ok_or(StatusCode::BadTimestampsToReturnInvalid)?;
        let sub_interval = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .map_or(0.0, |s| s.interval_ms);
        let mut results = Vec::with_capacity(items.len());
        for r in items {
            let res = (|| -> Result<MonitoredItemModifyResult, StatusCode> {
                let it = self.item_slot(slot, r.monitored_item_id)?;
                let item = self
                    .items
                    .get(it as usize)
                    .and_then(Option::as_ref)
                    .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
                if item.event.is_some() {
                    return self.modify_event_item(
                        space,
                        event_limits,
                        it,
                        ts,
                        &r.requested_parameters,
                    );
                }
                let node = space
                    .node_at(item.node_index)
                    .ok_or(StatusCode::BadNodeIdUnknown)?;
                let current = DataValue {
                    value: item
                        .last
                        .as_ref()
                        .map(|l| l.value.clone())
                        .unwrap_or_default(),
                    ..Default::default()
                };
                let p = &r.requested_parameters;
                let filter =
                    data_change_settings(space, node, item.attribute_id, &p.filter, &current)?;
                let (sampling, sampling_ms, filter, spec) = self.revise_filter(
                    node,
                    item.attribute_id,
                    p.sampling_interval,
                    sub_interval,
                    filter,
                    stepped_variable(space, node, &current),
                )?;
                if spec.is_some() {
                    aggregate_timestamps(ts)?;
                }
                let queue_size = self.limits.revise_queue_size(p.queue_size);
                // A source counts its aggregate items: gaining or losing the AggregateFilter
                // moves the item off and back onto its source.
                let resample = sampling_ms != item.sampling_ms
                    || sampling != item.sampling
                    || spec.is_some() != item.aggregate.is_some();
                if resample {
                    self.stop_sampling(it);
                }
                let item = self
                    .items
                    .get_mut(it as usize)
                    .and_then(Option::as_mut)
                    .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
                item.client_handle = p.client_handle;
                item.filter = filter;
                item.timestamps = ts;
                item.queue.resize(queue_size, p.discard_oldest);
                item.sampling = sampling;
                item.sampling_ms = sampling_ms;
                // The same AggregateFilter keeps its interval; another aggregate, interval,
                // start or configuration starts again from the revised start.
                match spec {
                    None => item.aggregate = None,
                    Some(spec) => {
                        if item.aggregate.as_ref().is_none_or(|a| a.spec != spec) {
                            let mut a = aggregate::AggregateState::new(spec, now.utc);
                            if let Some(last) = &item.last {
                                // The current value: the bound before the first interval.
                                a.offer(last, now.utc);
                            }
                            item.aggregate = Some(Box::new(a));
                        }
                    }
                }
                let filter_result = item
                    .aggregate
                    .as_ref()
                    .map_or_else(ExtensionObject::null, |a| {
                        ExtensionObject::from_struct(&a.spec.result(a.interval_start()))
                    });
                let enabled = item.mode != MonitoringMode::Disabled;
                let src = item.source;
                if resample && enabled {
                    self.start_sampling(it, now);
                } else if let Some(Some(source)) = self.sources.get_mut(src as usize) {
                    // The new filter judges the next sample even if the value did not change.
                    source.last = None;
                }
                Ok(MonitoredItemModifyResult {
                    status_code: StatusCode::Good,
                    revised_sampling_interval: sampling_ms,
                    revised_queue_size: queue_size,
                    filter_result,
                })
            })();
            results.push(res.unwrap_or_else(|s| MonitoredItemModifyResult {
                status_code: s,
                ..Default::default()
            }));
        }
        Ok(results)
    }

    fn modify_event_item(
        &mut self,
        space: &AddressSpace,
        event_limits: crate::events::filter::FilterLimits,
        it: u32,
        ts: Timestamps,
        p: &crate::generated::types::MonitoringParameters,
    ) -> Result<MonitoredItemModifyResult, StatusCode> {
        let filter = decode_event_filter(&p.filter)?;
        let (compiled, result) =
            match crate::events::filter::compile_with(&filter, space, event_limits) {
                Ok(x) => x,
                Err((status, result)) => {
                    return Ok(MonitoredItemModifyResult {
                        status_code: status,
                        filter_result: ExtensionObject::from_struct(&result),
                        ..Default::default()
                    })
                }
            };
        let queue_size = self.limits.revise_event_queue_size(p.queue_size);
        let item = self
            .items
            .get_mut(it as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
        item.client_handle = p.client_handle;
        item.timestamps = ts;
        item.queue.resize(queue_size, p.discard_oldest);
        if let Some(e) = item.event.as_mut() {
            e.filter = compiled;
        }
        Ok(MonitoredItemModifyResult {
            status_code: StatusCode::Good,
            revised_sampling_interval: 0.0,
            revised_queue_size: queue_size,
            filter_result: filter_result_object(&result),
        })
    }

    /// DeleteMonitoredItems. `Err` is the service result.
    pub fn delete_monitored_items(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        ids: &[u32],
    ) -> Result<Vec<StatusCode>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let mut results = Vec::with_capacity(ids.len());
        // The subscription's lists are cleaned once for the whole request (not once per
        // item: deleting k of n items costs O(n + k log k), not O(n·k)); the ready list only
        // when a deleted item was on it.
        let mut removed: Vec<u32> = Vec::with_capacity(ids.len());
        let mut any_ready = false;
        for &id in ids {
            match self.item_slot(slot, id) {
                Ok(it) => {
                    any_ready |= matches!(self.items.get(it as usize), Some(Some(i)) if i.in_ready);
                    self.remove_item_slot(it);
                    removed.push(it);
                    results.push(StatusCode::Good);
                }
                Err(e) => results.push(e),
            }
        }
        if !removed.is_empty() {
            removed.sort_unstable();
            let gone = |x: &u32| removed.binary_search(x).is_ok();
            if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.items.retain(|x| !gone(x));
                if any_ready {
                    s.ready.retain(|x| !gone(x));
                }
            }
        }
        Ok(results)
    }

    /// SetMonitoringMode. `Err` is the service result.
    pub fn set_monitoring_mode(
        &mut self,
        space: &AddressSpace,
        key: SessionKey,
        sub_id: u32,
        mode: MonitoringMode,
        ids: &[u32],
        now: Now,
    ) -> Result<Vec<StatusCode>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        if !(0..=2).contains(&mode.0) {
            return Err(StatusCode::BadMonitoringModeInvalid);
        }
        let mut results = Vec::with_capacity(ids.len());
        for &id in ids {
            let it = match self.item_slot(slot, id) {
                Ok(it) => it,
                Err(e) => {
                    results.push(e);
                    continue;
                }
            };
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            let old = item.mode;
            item.mode = mode;
            if old == mode {
                results.push(StatusCode::Good);
                continue;
            }
            if let Some(a) = item.aggregate.as_mut() {
                if mode == MonitoringMode::Disabled || old == MonitoringMode::Disabled {
                    // No aggregation while disabled; enabled again, the intervals start again
                    // at the first boundary of the grid not before now.
                    a.restart(now.utc);
                }
            }
            if mode == MonitoringMode::Disabled {
                let was_ready = item.in_ready;
                item.queue.clear();
                item.last = None;
                item.triggered = false;
                self.stop_sampling(it);
                if was_ready {
                    if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                        s.ready.retain(|&x| x != it);
                    }
                }
                if let Some(Some(item)) = self.items.get_mut(it as usize) {
                    item.in_ready = false;
                }
            } else if old == MonitoringMode::Disabled && item.event.is_some() {
                // Event items just start receiving events again.
            } else if old == MonitoringMode::Disabled {
                self.start_sampling(it, now);
                let (ni, a) = (item_node(&self.items, it), item_attr(&self.items, it));
                let s = sample_value(space, ni, a, now);
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &s,
                    now,
                );
            } else if mode == MonitoringMode::Reporting {
                // Sampling → Reporting: what was queued meanwhile is reported now.
                let has = !item.queue.is_empty() && !item.in_ready;
                if has {
                    item.in_ready = true;
                    if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                        s.ready.push(it);
                    }
                }
            } else {
                // Reporting → Sampling: keep the queue; stop reporting it.
                let was_ready = std::mem::replace(&mut item.in_ready, false);
                if was_ready {
                    if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                        s.ready.retain(|&x| x != it);
                    }
                }
            }
            results.push(StatusCode::Good);
        }
        Ok(results)
    }

    /// SetTriggering. `Err` is the service result; otherwise (add results, remove results).
    pub fn set_triggering(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        trigger_id: u32,
        add: &[u32],
        remove: &[u32],
    ) -> Result<(Vec<StatusCode>, Vec<StatusCode>), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let trig = self.item_slot(slot, trigger_id)?;
        let mut remove_results = Vec::with_capacity(remove.len());
        for &id in remove {
            let Some(Some(t)) = self.items.get_mut(trig as usize) else {
                break;
            };
            match t.links.iter().position(|&(_, x)| x == id) {
                Some(i) => {
                    t.links.swap_remove(i);
                    remove_results.push(StatusCode::Good);
                }
                None => remove_results.push(StatusCode::BadMonitoredItemIdInvalid),
            }
        }
        let max = self.limits.max_triggering_links_per_item as usize;
        let mut add_results = Vec::with_capacity(add.len());
        for &id in add {
            let target = match self.item_slot(slot, id) {
                Ok(t) => t,
                Err(e) => {
                    add_results.push(e);
                    continue;
                }
            };
            let Some(Some(t)) = self.items.get_mut(trig as usize) else {
                break;
            };
            if t.links.iter().any(|&(_, x)| x == id) {
                add_results.push(StatusCode::Good);
            } else if t.links.len() >= max {
                add_results.push(StatusCode::BadTooManyMonitoredItems);
            } else {
                t.links.push((target, id));
                add_results.push(StatusCode::Good);
            }
        }
        Ok((add_results, remove_results))
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

fn item_node(items: &Slots<MonitoredItem>, it: u32) -> u32 {
    items
        .get(it as usize)
        .and_then(|i| i.as_ref())
        .map_or(NONE, |i| i.node_index)
}
fn item_attr(items: &Slots<MonitoredItem>, it: u32) -> u32 {
    items
        .get(it as usize)
        .and_then(|i| i.as_ref())
        .map_or(0, |i| i.attribute_id)
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

/// Offers a sample to an item: filtered against the last reported value, queued, and the
/// item put on its subscription's ready list (and its triggered items with it).
fn offer(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    sample: &DataValue,
    now: Now,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    if item.mode == MonitoringMode::Disabled {
        return;
    }
    let ranged;
    let sample = match &item.range {
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
    if let Some(a) = item.aggregate.as_mut() {
        // Kept for the interval; its value is queued when the interval ends.
        a.offer(sample, now.utc);
        item.last = Some(sample.clone());
        return;
    }
    let changed = match &item.last {
        None => true,
        Some(l) => item.filter.changed(l, sample),
    };
    if !changed {
        return;
    }
    item.last = Some(sample.clone());
    queue_value(items, subs, stats, it, sample.clone());
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
    let Some(a) = item.aggregate.as_mut() else {
        return;
    };
    a.close_due(now.utc, scratch);
    for dv in scratch.drain(..) {
        queue_value(items, subs, stats, it, dv);
    }
}

/// Queues a value for an item (its timestamps reduced to TimestampsToReturn) and puts the
/// item on its subscription's ready list (and its triggered items with it).
fn queue_value(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    stats: &mut EngineStats,
    it: u32,
    value: DataValue,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    let before = item.queue.overflows;
    item.queue.push(Queued::Data(item_value(item, value)));
    let overflows = item.queue.overflows - before;
    stats.overflows += overflows;
    let sub_slot = item.sub;
    let Some(Some(sub)) = subs.get_mut(sub_slot as usize) else {
        return;
    };
    sub.diag.queue_overflows = sub.diag.queue_overflows.wrapping_add(overflows as u32);
    if item.mode != MonitoringMode::Reporting {
        return;
    }
    if !item.in_ready {
        item.in_ready = true;
        sub.ready.push(it);
    }
    if item.links.is_empty() {
        return;
    }
    let links = std::mem::take(&mut item.links);
    for &(t, id) in &links {
        if let Some(Some(ti)) = items.get_mut(t as usize) {
            if ti.id == id && ti.mode == MonitoringMode::Sampling && !ti.queue.is_empty() {
                ti.triggered = true;
                if !ti.in_ready {
                    ti.in_ready = true;
                    sub.ready.push(t);
                }
            }
        }
    }
    if let Some(Some(item)) = items.get_mut(it as usize) {
        item.links = links;
    }
}

/// Buffers reused across messages, so a steady stream of NotificationMessages allocates
/// nothing: message bodies return when their message is acknowledged or dropped, response
/// buffers when the connection has chunked them. Bounded: at most `POOL_MAX` of each kind
/// are kept, a buffer that grew past `POOL_BUFFER_MAX_BYTES` is dropped, and the byte
/// buffers kept hold at most `POOL_BUFFER_BYTES_MAX` of capacity together (a burst of large
/// messages does not leave `POOL_MAX` × 4 MiB behind).
#[derive(Default)]
struct Pools {
    buffers: Vec<Vec<u8>>,
    /// Capacity of `buffers` together, in bytes.
    buffer_bytes: usize,
    eo_vecs: Vec<Vec<ExtensionObject>>,
    /// Acknowledgement results of Publish requests (one list per request in the queue).
    results: Vec<Vec<StatusCode>>,
    notes: Vec<MonitoredItemNotification>,
    events: Vec<crate::generated::types::EventFieldList>,
}

const POOL_MAX: usize = 256;
const POOL_BUFFER_MAX_BYTES: usize = 4 << 20;
const POOL_BUFFER_BYTES_MAX: usize = 16 << 20;

impl Pools {
    fn buffer(&mut self) -> Vec<u8> {
        match self.buffers.pop() {
            Some(b) => {
                self.buffer_bytes = self.buffer_bytes.saturating_sub(b.capacity());
                b
            }
            None => Vec::new(),
        }
    }
    fn put_buffer(&mut self, mut b: Vec<u8>) {
        let cap = b.capacity();
        if self.buffers.len() < POOL_MAX
            && cap <= POOL_BUFFER_MAX_BYTES
            && self.buffer_bytes.saturating_add(cap) <= POOL_BUFFER_BYTES_MAX
        {
            b.clear();
            self.buffer_bytes += cap;
            self.buffers.push(b);
        }
    }
    fn results(&mut self) -> Vec<StatusCode> {
        self.results.pop().unwrap_or_default()
    }
    fn put_results(&mut self, mut r: Vec<StatusCode>) {
        // Bounded like the other lists; a request acknowledges at most a few messages.
        if self.results.len() < POOL_MAX && r.capacity() <= 1024 {
            r.clear();
            self.results.push(r);
        }
    }
    fn eo_vec(&mut self) -> Vec<ExtensionObject> {
        self.eo_vecs.pop().unwrap_or_default()
    }
    fn put_message(&mut self, m: NotificationMessage) {
        let mut v = m.notification_data;
        for eo in v.drain(..) {
            if let crate::types::ExtensionObjectBody::Binary(b) = eo.body {
                self.put_buffer(b);
            }
        }
        if self.eo_vecs.len() < POOL_MAX {
            self.eo_vecs.push(v);
        }
    }
}

/// Queues an event notification into an item and puts it on its subscription's ready list.
fn queue_event(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    it: u32,
    fields: Vec<Variant>,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    let before = item.queue.overflows;
    item.queue.push(Queued::Event(fields));
    let overflows = item.queue.overflows - before;
    if overflows > 0 {
        if let Some(Some(sub)) = subs.get_mut(item.sub as usize) {
            sub.diag.event_queue_overflows = sub
                .diag
                .event_queue_overflows
                .wrapping_add(overflows as u32);
        }
    }
    if item.mode != MonitoringMode::Reporting || item.in_ready {
        return;
    }
    if let Some(Some(sub)) = subs.get_mut(item.sub as usize) {
        item.in_ready = true;
        sub.ready.push(it);
    }
}

/// Builds the next NotificationMessage of a subscription from its ready list (at most
/// MaxNotificationsPerPublish notifications). Returns (message, more waiting, count).
fn build_message(
    sub: &mut Subscription,
    items: &mut Slots<MonitoredItem>,
    pools: &mut Pools,
    now: Now,
) -> (NotificationMessage, bool, usize) {
    let cap = sub.max_notifications.max(1) as usize;
    let mut data = std::mem::take(&mut pools.notes);
    let mut events = std::mem::take(&mut pools.events);
    let mut count = 0usize;
    // The ready list is consumed from the front; what stays is compacted in place (no
    // allocation per message).
    let ready = &mut sub.ready;
    data.reserve(ready.len().min(cap));
    let mut kept = 0usize;
    let mut i = 0;
    if sub.publishing_enabled {
        while count < cap {
            let Some(&it) = ready.get(i) else { break };
            i += 1;
            let Some(Some(item)) = items.get_mut(it as usize) else {
                continue;
            };
            let reportable = item.mode == MonitoringMode::Reporting || item.triggered;
            while reportable && count < cap {
                match item.queue.pop() {
                    Some(Queued::Data(v)) => {
                        sub.diag.data_changes = sub.diag.data_changes.wrapping_add(1);
                        data.push(MonitoredItemNotification {
                            client_handle: item.client_handle,
                            value: v,
                        })
                    }
                    Some(Queued::Event(fields)) => {
                        sub.diag.events = sub.diag.events.wrapping_add(1);
                        events.push(crate::generated::types::EventFieldList {
                            client_handle: item.client_handle,
                            event_fields: fields,
                        })
                    }
                    None => break,
                }
                count += 1;
            }
            if reportable && !item.queue.is_empty() {
                // kept < i <= ready.len(): the slot exists (already visited).
                if let Some(slot) = ready.get_mut(kept) {
                    *slot = it;
                }
                kept += 1;
            } else {
                item.in_ready = false;
                item.triggered = false;
            }
        }
    }
    // Unvisited entries follow the kept ones.
    ready.copy_within(i.., kept);
    let len = kept + (ready.len() - i);
    ready.truncate(len);
    let mut notification_data = pools.eo_vec();
    if !data.is_empty() {
        // Encoded once (DataChangeNotification: the array, then an empty diagnostics
        // array) into a pooled buffer; the notifications' scratch list is kept.
        let mut body = pools.buffer();
        (data.len() as i32).encode(&mut body);
        for n in &data {
            n.encode(&mut body);
        }
        0i32.encode(&mut body);
        data.clear();
        notification_data.push(ExtensionObject {
            type_id: NodeId::ns0(DataChangeNotification::BINARY_ENCODING_ID),
            body: crate::types::ExtensionObjectBody::Binary(body),
        });
    }
    if !events.is_empty() {
        let mut body = pools.buffer();
        (events.len() as i32).encode(&mut body);
        for e in &events {
            e.encode(&mut body);
        }
        events.clear();
        notification_data.push(ExtensionObject {
            type_id: NodeId::ns0(
                crate::generated::types::EventNotificationList::BINARY_ENCODING_ID,
            ),
            body: crate::types::ExtensionObjectBody::Binary(body),
        });
    }
    pools.notes = data;
    pools.events = events;
    if let Some(status) = sub.status_change.take() {
        notification_data.push(ExtensionObject::from_struct(&StatusChangeNotification {
            status,
            diagnostic_info: Default::default(),
        }));
    }
    let more = sub.publishing_enabled && !sub.ready.is_empty();
    let seq = if notification_data.is_empty() {
        sub.next_seq
    } else {
        sub.take_seq()
    };
    (
        NotificationMessage {
            sequence_number: seq,
            publish_time: now.utc,
            notification_data,
        },
        more,
        count,
    )
}

/// Equal for every DataChangeFilter: value, status and source timestamp (the server
/// timestamp is the sampling time and always differs).
fn same_sample(a: &DataValue, b: &DataValue) -> bool {
    a.status == b.status
        && a.source_timestamp == b.source_timestamp
        && a.source_picoseconds == b.source_picoseconds
        && a.value == b.value
}

/// Samples a node's attribute: the hot path for stored, dynamic and counter values; the
/// generic Read path otherwise.
fn sample_value(space: &AddressSpace, node_index: u32, attribute_id: u32, now: Now) -> DataValue {
    let Some(node) = space.node_at(node_index) else {
        return DataValue {
            status: Some(StatusCode::BadNodeIdUnknown),
            ..Default::default()
        };
    };
    if attribute_id == attr::Value {
        if let ClassAttributes::Variable(v) = &node.attributes {
            if v.access_level & access_level::CURRENT_READ != 0 {
                let mut dv = match &v.value {
                    ValueSource::Cell(c) => c.load(),
                    ValueSource::Dynamic(d) => space.dynamic_value(*d, now),
                    ValueSource::Computed(c) => c.value(now),
                    ValueSource::Async(_) => {
                        DataValue::status(StatusCode::BadWaitingForInitialData)
                    }
                };
                if dv.server_timestamp.is_none() || !matches!(v.value, ValueSource::Computed(_)) {
                    dv.server_timestamp = Some(now.utc);
                }
                return dv;
            }
        }
    }
    read_attribute(
        space,
        &node.node_id,
        attribute_id,
        "",
        &QualifiedName::default(),
        Timestamps::Both,
        now,
    )
}

/// The first sample of a new item: the value the creation check already read (a counter
/// must not count twice).
fn initial_sample(initial: DataValue, now: Now) -> DataValue {
    let mut dv = initial;
    if dv.server_timestamp.is_none() {
        dv.server_timestamp = Some(now.utc);
    }
    dv
}

/// The filter of a data item: a DataChangeFilter (or none), or an AggregateFilter (decoded
/// and checked against the node; revised by [`SubscriptionEngine::revise_aggregate`]).
enum ItemFilter {
    DataChange(DataChangeSettings),
    Aggregate(Box<AggregateFilter>),
}

/// Validates MonitoringParameters.filter for a data item (Part 4 §7.22).
fn data_change_settings(
    space: &AddressSpace,
    node: &Node,
    attribute_id: u32,
    filter: &ExtensionObject,
    current: &DataValue,
) -> Result<ItemFilter, StatusCode> {
    if filter.is_null() {
        return Ok(ItemFilter::DataChange(DataChangeSettings::default()));
    }
    if let Some(decoded) = filter.decode_as::<AggregateFilter>(crate::DecodeLimits::default()) {
        let f = decoded.map_err(|_| StatusCode::BadMonitoredItemFilterInvalid)?;
        // An aggregate of the Value of a Variable whose values the engine computes on:
        // numbers and Booleans (Part 13 §5.4.3).
        if attribute_id != attr::Value || !aggregatable_variable(space, node, current) {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        if crate::history::aggregate::Aggregate::from_node_id(&f.aggregate_type).is_none() {
            return Err(StatusCode::BadAggregateNotSupported);
        }
        return Ok(ItemFilter::Aggregate(Box::new(f)));
    }
    let Some(decoded) = filter.decode_as::<DataChangeFilter>(crate::DecodeLimits::default()) else {
        // EventFilter on a data item, or an unknown type.
        if filter.type_id.as_ns0() == Some(crate::generated::types::EventFilter::BINARY_ENCODING_ID)
        {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        return Err(StatusCode::BadMonitoredItemFilterUnsupported);
    };
    let f = decoded.map_err(|_| StatusCode::BadMonitoredItemFilterInvalid)?;
    if attribute_id != attr::Value {
        return Err(StatusCode::BadFilterNotAllowed);
    }
    if !(0..=2).contains(&f.trigger.0) {
        return Err(StatusCode::BadMonitoredItemFilterInvalid);
    }
    let deadband = match f.deadband_type {
        0 => 0.0,
        1 | 2 => {
            if !(f.deadband_value.is_finite() && f.deadband_value >= 0.0) {
                return Err(StatusCode::BadDeadbandFilterInvalid);
            }
            if !numeric_variable(space, node, current) {
                return Err(StatusCode::BadFilterNotAllowed);
            }
            if f.deadband_type == 1 {
                f.deadband_value
            } else {
                if f.deadband_value > 100.0 {
                    return Err(StatusCode::BadDeadbandFilterInvalid);
                }
                let (lo, hi) = eu_range(space, node).ok_or(StatusCode::BadDeadbandFilterInvalid)?;
                f.deadband_value / 100.0 * (hi - lo).abs()
            }
        }
        _ => return Err(StatusCode::BadDeadbandFilterInvalid),
    };
    if f.trigger == DataChangeTrigger::Status && deadband > 0.0 {
        // A deadband needs value changes in the trigger (Part 4 §7.22.2): ignored.
        return Ok(ItemFilter::DataChange(DataChangeSettings {
            trigger: f.trigger,
            deadband: 0.0,
        }));
    }
    Ok(ItemFilter::DataChange(DataChangeSettings {
        trigger: f.trigger,
        deadband,
    }))
}

/// An aggregate's timestamp is its interval's start, the SourceTimestamp: TimestampsToReturn
/// Server or Neither is `Bad_TimestampsToReturnInvalid` for an aggregate item (Part 13
/// §5.4.3.1, "anything but the source timestamp"; Both includes it).
fn aggregate_timestamps(ts: Timestamps) -> Result<(), StatusCode> {
    match ts {
        Timestamps::Source | Timestamps::Both => Ok(()),
        Timestamps::Server | Timestamps::Neither => Err(StatusCode::BadTimestampsToReturnInvalid),
    }
}

/// SteppedInterpolation for an aggregate item, chosen as the server's history does (sloped
/// for Float and Double, stepped otherwise), so a ReadProcessed of the same intervals agrees:
/// by the DataType, or by the value when the type is abstract.
fn stepped_variable(space: &AddressSpace, node: &Node, current: &DataValue) -> bool {
    let ClassAttributes::Variable(v) = &node.attributes else {
        return true;
    };
    for t in [
        crate::generated::node_ids::Double,
        crate::generated::node_ids::Float,
    ] {
        let t = NodeId::ns0(t);
        if v.data_type == t || space.is_subtype_of(&v.data_type, &t) {
            return false;
        }
    }
    !matches!(current.value, Variant::Double(_) | Variant::Float(_))
}

/// A Variable whose values an Aggregate computes on: a Number or a Boolean (or, when the
/// type is abstract, one holding a numeric or Boolean scalar now).
fn aggregatable_variable(space: &AddressSpace, node: &Node, current: &DataValue) -> bool {
    let ClassAttributes::Variable(v) = &node.attributes else {
        return false;
    };
    if v.value_rank >= 0 || matches!(current.value, Variant::Array(_)) {
        return false; // arrays: the aggregates are defined on scalars
    }
    if numeric_variable(space, node, current) {
        return true;
    }
    let boolean = NodeId::ns0(crate::generated::node_ids::Boolean);
    if v.data_type == boolean || space.is_subtype_of(&v.data_type, &boolean) {
        return true;
    }
    let base = v.data_type.as_ns0() == Some(crate::generated::node_ids::BaseDataType);
    base && matches!(current.value, Variant::Boolean(_))
}

/// Is this a Variable of a Number data type (or, when the type is abstract, does it hold
/// a numeric value)?
fn numeric_variable(space: &AddressSpace, node: &Node, current: &DataValue) -> bool {
    let ClassAttributes::Variable(v) = &node.attributes else {
        return false;
    };
    let number = NodeId::ns0(crate::generated::node_ids::Number);
    if v.data_type == number || space.is_subtype_of(&v.data_type, &number) {
        return true;
    }
    let base = v.data_type.as_ns0() == Some(crate::generated::node_ids::BaseDataType);
    base && item::is_numeric(&current.value) && !current.value.is_empty()
}

/// The EURange property (Range: low, high) of a node, if it has one.
fn eu_range(space: &AddressSpace, node: &Node) -> Option<(f64, f64)> {
    for r in &node.references {
        if !r.is_forward
            || r.reference_type.as_ns0() != Some(crate::address_space::ids::HAS_PROPERTY)
        {
            continue;
        }
        let Some(p) = space.node_expanded(&r.target) else {
            continue;
        };
        if p.browse_name.namespace_index != 0 || p.browse_name.name.as_str() != "EURange" {
            continue;
        }
        let dv = space.variable_value(p, Now::new(0, DateTime::NULL))?;
        let Variant::ExtensionObject(eo) = &dv.value else {
            return None;
        };
        let range = eo
            .decode_as::<crate::generated::types::Range>(crate::DecodeLimits::default())?
            .ok()?;
        if range.low.is_finite() && range.high.is_finite() {
            return Some((range.low, range.high));
        }
    }
    None
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    /// The byte buffers kept are bounded in count, in size each and in capacity together, and
    /// the running total follows what is taken out again.
    #[test]
    fn pooled_buffers_are_bounded_in_total_bytes() {
        let mut p = Pools::default();
        for _ in 0..10 {
            p.put_buffer(Vec::with_capacity(4 << 20));
        }
        assert_eq!(p.buffers.len(), POOL_BUFFER_BYTES_MAX / (4 << 20));
        assert!(p.buffer_bytes <= POOL_BUFFER_BYTES_MAX);
        p.put_buffer(Vec::with_capacity(POOL_BUFFER_MAX_BYTES + 1));
        assert_eq!(
            p.buffers.len(),
            4,
            "a buffer past the size bound is dropped"
        );
        let b = p.buffer();
        assert!(b.is_empty() && b.capacity() >= 4 << 20);
        assert_eq!(
            p.buffer_bytes,
            p.buffers.iter().map(Vec::capacity).sum::<usize>()
        );
        p.put_buffer(b);
        while !p.buffers.is_empty() {
            drop(p.buffer());
        }
        assert_eq!(p.buffer_bytes, 0);
        for _ in 0..(POOL_MAX + 10) {
            p.put_buffer(Vec::with_capacity(64));
        }
        assert_eq!(p.buffers.len(), POOL_MAX, "at most POOL_MAX buffers");
        assert_eq!(
            p.buffer_bytes,
            p.buffers.iter().map(Vec::capacity).sum::<usize>()
        );
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
