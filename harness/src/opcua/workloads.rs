//! The workloads a session runs: Reads (single, batched, paced), Writes, Browses, the
//! writers and subscribers of the subscription scenarios.

use super::*;

pub(super) fn bench_node(i: u32) -> NodeId {
    NodeId::numeric(1, FIRST_NODE + i % NODE_COUNT)
}

pub(crate) fn read_value_id(node: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id,
        index_range: UaString::default(),
        data_encoding: QualifiedName::default(),
    }
}

/// `read` and `read-batch`: Read of `nodes` values per request, round robin
/// over the benchmark variables, TimestampsToReturn Neither, MaxAge 0. Every
/// value must be what the contract says: a Good Int32 equal to the
/// variable's index (`ns=1;i=1001+k` holds k; nobody writes during a read run).
///
/// Closed loop by default (`inflight` requests always out, each answer sends the next); with
/// [`ReadWork::open_loop`] a request is due every `period` and `inflight` only caps what is
/// out, and latency runs from when a request was due (see `--rate`).
pub struct ReadWork {
    pub inflight: usize,
    pub nodes: usize,
    pub(super) cursor: u32,
    /// First variable index and due time (open loop; 0 in a closed loop) of each request
    /// built and not yet sent, in order (`on_sent` takes them).
    pub(super) built: std::collections::VecDeque<(u32, u64)>,
    /// First variable index and due time of every request in flight, by request id (a map:
    /// servers may answer far out of order).
    pub(super) starts: rustc_hash::FxHashMap<u32, (u32, u64)>,
    /// Open loop: when this connection's requests are due.
    pub(super) pacer: Option<Pacer>,
}

impl ReadWork {
    pub fn new(inflight: usize, nodes: usize, start: u32) -> Self {
        ReadWork {
            inflight,
            nodes: nodes.max(1),
            cursor: start,
            built: std::collections::VecDeque::with_capacity(inflight),
            starts: rustc_hash::FxHashMap::with_capacity_and_hasher(
                inflight * 2,
                Default::default(),
            ),
            pacer: None,
        }
    }

    /// An open loop of `per_second` requests a second on this connection (> 0), connection
    /// `index` of `of`: request k is due at the k-th multiple of the period on the monotonic
    /// clock (from the first after the session is ready), shifted by `index / of` of a period.
    pub fn open_loop(mut self, per_second: f64, index: usize, of: usize) -> Self {
        self.pacer = Some(Pacer::new(per_second, index, of));
        self
    }

    /// Checks a Read response to a request whose first variable index was `start`.
    pub fn check(&self, resp: &Response, start: Option<u32>) -> Result<(), String> {
        let Response::Read(r) = resp else {
            return Err(format!(
                "Read answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        if r.response_header.service_result.is_bad() {
            return Err(format!(
                "Read: {}",
                status_name(r.response_header.service_result)
            ));
        }
        if r.results.len() != self.nodes {
            return Err(format!(
                "Read: {} results for {} nodes",
                r.results.len(),
                self.nodes
            ));
        }
        for (j, dv) in r.results.iter().enumerate() {
            let expected = start.map(|s| (s.wrapping_add(j as u32) % NODE_COUNT) as i32);
            match (&dv.value, expected) {
                (Variant::Int32(v), Some(e)) if dv.status_code().is_good() && *v == e => {}
                (Variant::Int32(_), None) if dv.status_code().is_good() => {}
                (v, e) => {
                    return Err(format!(
                        "Read: value {v:?} status {} (the contract says Int32 {e:?})",
                        status_name(dv.status_code())
                    ));
                }
            }
        }
        Ok(())
    }

    fn build(&mut self, due: u64) -> Request {
        let mut nodes_to_read = Vec::with_capacity(self.nodes);
        self.built.push_back((self.cursor % NODE_COUNT, due));
        for _ in 0..self.nodes {
            nodes_to_read.push(read_value_id(bench_node(self.cursor), attr::VALUE));
            self.cursor = self.cursor.wrapping_add(1);
        }
        Request::Read(Box::new(ReadRequest {
            max_age: 0.0,
            timestamps_to_return: TimestampsToReturn::Neither,
            nodes_to_read,
            ..Default::default()
        }))
    }
}

impl Paced for ReadWork {
    fn pacer(&self) -> Option<&Pacer> {
        self.pacer.as_ref()
    }
    fn pacer_mut(&mut self) -> Option<&mut Pacer> {
        self.pacer.as_mut()
    }
    /// Open loop: may another request go out (requests built or in flight below `inflight`)?
    fn has_slot(&self) -> bool {
        self.starts.len() + self.built.len() < self.inflight
    }
    /// Open loop: the next due request, if one is due at `now` (and takes its slot).
    fn next_due(&mut self, now: u64) -> Option<Request> {
        let due = self.pacer.as_mut()?.take(now)?;
        Some(self.build(due))
    }
}

impl Workload for ReadWork {
    fn initial(&self) -> usize {
        if self.pacer.is_some() {
            0
        } else {
            self.inflight
        }
    }
    fn next(&mut self, now: u64) -> Option<Request> {
        if self.pacer.is_some() {
            // A slot was freed: a request already due (late) goes at once.
            return self.next_due(now);
        }
        Some(self.build(0))
    }
    fn on_sent(&mut self, id: u32) {
        if let Some(b) = self.built.pop_front() {
            self.starts.insert(id, b);
        }
    }
    fn deadline(&self) -> Option<u64> {
        self.paced_deadline()
    }
    fn on_timer(&mut self, now: u64, _ctx: &mut Ctx) -> Vec<Request> {
        self.paced_timer(now)
    }
    fn on_response(
        &mut self,
        id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let start = self.starts.remove(&id);
        self.check(resp, start.map(|s| s.0))?;
        let Some((_, due)) = start else {
            return Err(format!(
                "Read: response to request {id}, which is not in flight"
            ));
        };
        // Open loop: from when it was due (it may have waited for a slot); closed: from the send.
        let from = if self.pacer.is_some() { due } else { sent };
        ctx.complete(now.saturating_sub(from));
        Ok(())
    }
}

/// An open-loop schedule (`--rate`): one request due every `period_ns`, shifted by
/// `offset_ns` (so that the connections of a run arrive evenly spread rather than in step),
/// from the first multiple of the period after [`Pacer::start`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacer {
    pub period_ns: u64,
    pub offset_ns: u64,
    /// When the next request is due (0: not started).
    pub next_due: u64,
}

impl Pacer {
    /// `per_second` requests a second (> 0) on connection `index` of `of`.
    pub fn new(per_second: f64, index: usize, of: usize) -> Pacer {
        let period = ((1e9 / per_second) as u64).max(1);
        let of = of.max(1);
        Pacer {
            period_ns: period,
            offset_ns: (period as u128 * (index % of) as u128 / of as u128) as u64,
            next_due: 0,
        }
    }

    pub fn start(&mut self, now: u64) {
        if self.next_due == 0 {
            self.next_due = (now / self.period_ns + 1) * self.period_ns + self.offset_ns;
        }
    }

    /// The due time of the next request if it is due at `now` (and steps past it).
    pub fn take(&mut self, now: u64) -> Option<u64> {
        if self.next_due == 0 || self.next_due > now {
            return None;
        }
        let due = self.next_due;
        self.next_due += self.period_ns;
        Some(due)
    }
}

/// An open-loop workload paced by a [`Pacer`] and capped by its slots in flight: its timer and
/// deadline, the same for every paced workload.
pub(super) trait Paced {
    fn pacer(&self) -> Option<&Pacer>;
    fn pacer_mut(&mut self) -> Option<&mut Pacer>;
    /// A request may go out now (fewer in flight than the cap).
    fn has_slot(&self) -> bool;
    /// The next request if one is due at `now`.
    fn next_due(&mut self, now: u64) -> Option<Request>;

    /// When the timer should fire: only while a slot is free (otherwise the next answer sends
    /// what is due).
    fn paced_deadline(&self) -> Option<u64> {
        self.pacer().filter(|_| self.has_slot()).map(|p| p.next_due)
    }

    /// The timer: starts the pacer and sends whatever is due while slots are free.
    fn paced_timer(&mut self, now: u64) -> Vec<Request> {
        let Some(p) = self.pacer_mut() else {
            return Vec::new();
        };
        p.start(now);
        let mut out = Vec::new();
        while self.has_slot() {
            match self.next_due(now) {
                Some(r) => out.push(r),
                None => break,
            }
        }
        out
    }
}

/// `write`: Write of one Int32 value per request, round robin.
pub struct WriteWork {
    pub inflight: usize,
    pub(super) cursor: u32,
    pub(super) value: i32,
}

impl WriteWork {
    pub fn new(inflight: usize, start: u32) -> Self {
        WriteWork {
            inflight,
            cursor: start,
            value: 0,
        }
    }
}

pub(super) fn write_request(node: NodeId, value: i32) -> Request {
    Request::Write(Box::new(WriteRequest {
        nodes_to_write: vec![WriteValue {
            node_id: node,
            attribute_id: attr::VALUE,
            index_range: UaString::default(),
            value: DataValue::new(Variant::Int32(value)),
        }],
        ..Default::default()
    }))
}

pub(super) fn check_write(resp: &Response) -> Result<(), String> {
    let Response::Write(r) = resp else {
        return Err(format!(
            "Write answered with {} {}",
            resp.name(),
            status_name(service_result(resp))
        ));
    };
    if r.response_header.service_result.is_bad() {
        return Err(format!(
            "Write: {}",
            status_name(r.response_header.service_result)
        ));
    }
    match r.results.first() {
        Some(s) if s.is_good() => Ok(()),
        Some(s) => Err(format!("Write: {}", status_name(*s))),
        None => Err("Write: no result".into()),
    }
}

impl Workload for WriteWork {
    fn initial(&self) -> usize {
        self.inflight
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        self.cursor = self.cursor.wrapping_add(1);
        self.value = self.value.wrapping_add(1);
        Some(write_request(bench_node(self.cursor), self.value))
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        check_write(resp)?;
        ctx.complete(now.saturating_sub(sent));
        Ok(())
    }
}

/// `browse`: Browse of the Server object's hierarchical references.
pub struct BrowseWork {
    pub inflight: usize,
}

impl Workload for BrowseWork {
    fn initial(&self) -> usize {
        self.inflight
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(Request::Browse(Box::new(BrowseRequest {
            requested_max_references_per_node: 0,
            nodes_to_browse: vec![BrowseDescription {
                node_id: NodeId::ns0(SERVER_OBJECT),
                browse_direction: BrowseDirection::Forward,
                reference_type_id: NodeId::ns0(HIERARCHICAL_REFERENCES),
                include_subtypes: true,
                node_class_mask: 0,
                result_mask: 63,
            }],
            ..Default::default()
        })))
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let Response::Browse(r) = resp else {
            return Err(format!(
                "Browse answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        match r.results.first() {
            Some(b) if b.status_code.is_good() && !b.references.is_empty() => {
                ctx.complete(now.saturating_sub(sent));
                Ok(())
            }
            Some(b) => Err(format!(
                "Browse: {} with {} references",
                status_name(b.status_code),
                b.references.len()
            )),
            None => Err(format!(
                "Browse: {}",
                status_name(r.response_header.service_result)
            )),
        }
    }
}

/// The low 31 bits of monotonic microseconds: what writers write so that a
/// subscriber on any thread can compute write→notify latency.
pub(super) fn stamp_us(mono: u64) -> i32 {
    ((mono / 1000) & 0x7fff_ffff) as i32
}

pub(super) fn stamp_age_ns(stamp: i32, now: u64) -> u64 {
    let now_us = (now / 1000) & 0x7fff_ffff;
    let age = (now_us as i64 - stamp as i64).rem_euclid(1 << 31) as u64;
    age * 1000
}

/// Writers of the `sub` scenario: Writes at a fixed rate, each value the
/// send time, round robin over the benchmark variables.
pub struct WriterWork {
    pub(super) period_ns: u64,
    pub(super) next_at: u64,
    pub(super) cursor: u32,
    pub(super) writes: Arc<AtomicU64>,
}

impl Workload for WriterWork {
    fn initial(&self) -> usize {
        0
    }
    fn next(&mut self, _now: u64) -> Option<Request> {
        None
    }
    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        _now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        check_write(resp)?;
        ctx.count("write_responses", 1);
        Ok(())
    }
    fn deadline(&self) -> Option<u64> {
        Some(self.next_at)
    }
    fn on_timer(&mut self, now: u64, ctx: &mut Ctx) -> Vec<Request> {
        let mut v = Vec::new();
        if self.next_at == 0 {
            self.next_at = now;
        }
        // Catch up at most a few periods (a stalled loop does not burst).
        let mut n = 0;
        while self.next_at <= now && n < 8 {
            self.cursor = self.cursor.wrapping_add(1);
            v.push(write_request(bench_node(self.cursor), stamp_us(now)));
            self.next_at += self.period_ns;
            n += 1;
        }
        if self.next_at <= now {
            self.next_at = now + self.period_ns;
        }
        if ctx.measuring() {
            self.writes.fetch_add(v.len() as u64, Ordering::Relaxed);
            ctx.count("writes", v.len() as u64);
        }
        v
    }
}

/// What a subscriber subscribes to.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum SubKind {
    /// Data changes of the benchmark variables, values are writer stamps.
    Changes,
    /// Counters ns=1;i=1..N: values are sample counts.
    Counters,
    /// Events of the Server object.
    Events,
    /// Values an application pushes into a server of the plant contract (`push`):
    /// `s=Plant.V<i>` in the plant namespace, sampling interval 0.
    Push,
}

/// One counters subscriber's per-item observations, shared with the search.
pub(super) type SeenCell = Arc<std::sync::Mutex<Vec<CounterSeen>>>;

/// What a counters subscriber saw of one item.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CounterSeen {
    pub first: Option<(u64, i128)>,
    pub last: Option<(u64, i128)>,
}

impl CounterSeen {
    pub fn see(&mut self, value: u64, t_ns: i128) {
        if !matches!(self.first, Some((_, t)) if t_ns >= t) {
            self.first = Some((value, t_ns));
        }
        if !matches!(self.last, Some((_, t)) if t_ns < t) {
            self.last = Some((value, t_ns));
        }
    }

    /// (samples seen / samples expected, expected) between the first and the
    /// last report; `None` with fewer than two distinct reports.
    pub fn ratio(&self, sampling_ms: f64) -> Option<(f64, f64)> {
        let ((v0, t0), (v1, t1)) = (self.first?, self.last?);
        if t1 <= t0 {
            return None;
        }
        let expected = (t1 - t0) as f64 / 1e6 / sampling_ms;
        Some((v1.saturating_sub(v0) as f64 / expected, expected))
    }
}

/// Publish requests a subscriber keeps in flight for `subs` subscriptions.
pub fn publish_inflight(subs: usize) -> usize {
    (subs * 2).clamp(4, 64)
}

/// Subscriber: creates `subs` subscriptions with `items` monitored items
/// each, then keeps Publish requests in flight and counts notifications.
pub struct SubscriberWork {
    pub kind: SubKind,
    pub subs: usize,
    pub items: usize,
    /// First item index (spreads sessions over the nodes).
    pub offset: usize,
    pub publishing_ms: f64,
    pub sampling_ms: f64,
    pub queue: u32,
    pub publish_inflight: usize,
    pub(super) sub_ids: Vec<u32>,
    pub(super) acks: Vec<SubscriptionAcknowledgement>,
    /// Counters: per item the first and the last (value, time ns) seen in
    /// the measured window; the time is the value's source timestamp when
    /// the server sends one, else the arrival time.
    pub counter_seen: Arc<std::sync::Mutex<Vec<CounterSeen>>>,
    /// Push: the namespace, the items' variables and their sequences of pushed values.
    pub push: Option<crate::push::PushItems>,
}

impl SubscriberWork {
    pub fn new(
        kind: SubKind,
        subs: usize,
        items: usize,
        offset: usize,
        publishing_ms: f64,
        sampling_ms: f64,
        queue: u32,
    ) -> Self {
        SubscriberWork {
            kind,
            subs: subs.max(1),
            items,
            offset,
            publishing_ms,
            sampling_ms,
            queue,
            publish_inflight: publish_inflight(subs),
            sub_ids: Vec::new(),
            acks: Vec::new(),
            counter_seen: Arc::new(std::sync::Mutex::new(vec![
                CounterSeen::default();
                if kind == SubKind::Counters {
                    items
                } else {
                    0
                }
            ])),
            push: None,
        }
    }

    /// A `push` subscriber: one subscription of `p.params.items` items, sampling interval
    /// `p.params.sampling_ms` (0 in `push`), the queue size of the run; setup reads the server's NamespaceArray first.
    pub fn push(p: crate::push::PushItems) -> Self {
        let pp = p.params;
        let mut w = SubscriberWork::new(
            SubKind::Push,
            1,
            pp.items,
            0,
            pp.publishing_ms,
            pp.sampling_ms,
            pp.queue_size,
        );
        w.push = Some(p);
        w
    }

    /// Setup steps before the subscriptions: the NamespaceArray Read of `push`.
    fn setup_pre(&self) -> usize {
        usize::from(self.kind == SubKind::Push)
    }

    fn item_node(&self, j: usize) -> NodeId {
        match self.kind {
            SubKind::Changes => bench_node((self.offset + j) as u32),
            SubKind::Counters => NodeId::numeric(1, 1 + j as u32),
            SubKind::Events => NodeId::ns0(SERVER_OBJECT),
            SubKind::Push => self
                .push
                .as_ref()
                .map(|p| p.node(j))
                .unwrap_or(NodeId::NULL),
        }
    }

    /// CreateMonitoredItems calls per subscription: at most `ITEMS_PER_CALL` items each (a
    /// server may cap MaxMonitoredItemsPerCall; uaring's contract mode allows 100,000).
    fn calls_per_sub(&self) -> usize {
        self.items.div_ceil(ITEMS_PER_CALL).max(1)
    }

    fn create_items(&self, sub_id: u32, sub_index: usize, part: usize) -> Request {
        let range = (part * ITEMS_PER_CALL)..((part + 1) * ITEMS_PER_CALL).min(self.items);
        let mut items_to_create = Vec::with_capacity(range.len());
        for j in range {
            let (attr, filter) = match self.kind {
                SubKind::Events => {
                    let field = |name: &str| SimpleAttributeOperand {
                        type_definition_id: NodeId::ns0(BASE_EVENT_TYPE),
                        browse_path: vec![QualifiedName::new(0, name)],
                        attribute_id: attr::VALUE,
                        index_range: UaString::default(),
                    };
                    let f = EventFilter {
                        select_clauses: vec![field("EventId"), field("Time"), field("Message")],
                        ..Default::default()
                    };
                    (ATTR_EVENT_NOTIFIER, ExtensionObject::from_struct(&f))
                }
                _ => (attr::VALUE, ExtensionObject::null()),
            };
            items_to_create.push(MonitoredItemCreateRequest {
                item_to_monitor: read_value_id(self.item_node(j), attr),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: (sub_index * self.items + j) as u32,
                    sampling_interval: self.sampling_ms,
                    filter,
                    // Events: 0 asks for the server's default event queue (Part 4 §5.12.1.5);
                    // a queue of one would keep one event per publishing interval.
                    queue_size: if self.kind == SubKind::Events {
                        0
                    } else {
                        self.queue
                    },
                    discard_oldest: true,
                },
            });
        }
        Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: sub_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create,
            ..Default::default()
        }))
    }

    fn publish(&mut self) -> Request {
        let acks = std::mem::take(&mut self.acks);
        Request::Publish(Box::new(PublishRequest {
            subscription_acknowledgements: acks,
            ..Default::default()
        }))
    }
}

impl Workload for SubscriberWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        // Steps: (push: a Read of the NamespaceArray), CreateSubscription × subs, then
        // CreateMonitoredItems × subs.
        if let Some(p) = prev {
            match p {
                Response::Read(r) if self.kind == SubKind::Push => {
                    let dv = r.results.first().ok_or("NamespaceArray: no result")?;
                    if dv.status_code().is_bad() {
                        return Err(format!("NamespaceArray: {}", status_name(dv.status_code())));
                    }
                    self.push
                        .as_mut()
                        .ok_or("push state")?
                        .set_namespace(&dv.value)?;
                }
                Response::CreateSubscription(r) => {
                    self.sub_ids.push(r.subscription_id);
                    if let Some(p) = &self.push {
                        p.setup.subscription(r.revised_publishing_interval);
                    }
                }
                Response::CreateMonitoredItems(r) => {
                    if let Some((j, bad)) = r
                        .results
                        .iter()
                        .enumerate()
                        .find(|(_, x)| x.status_code.is_bad())
                    {
                        let node = if self.kind == SubKind::Push {
                            format!(" {}", self.item_node(j))
                        } else {
                            String::new()
                        };
                        return Err(format!(
                            "CreateMonitoredItems{node}: {}",
                            status_name(bad.status_code)
                        ));
                    }
                    if let Some(p) = &self.push {
                        for x in &r.results {
                            p.setup
                                .item(x.revised_queue_size, x.revised_sampling_interval);
                        }
                    }
                }
                other => {
                    return Err(format!(
                        "unexpected {} during subscription setup",
                        other.name()
                    ))
                }
            }
        }
        let pre = self.setup_pre();
        if step < pre {
            return Ok(Some(Request::Read(Box::new(ReadRequest {
                max_age: 0.0,
                timestamps_to_return: TimestampsToReturn::Neither,
                nodes_to_read: vec![read_value_id(
                    NodeId::ns0(crate::push::NAMESPACE_ARRAY),
                    attr::VALUE,
                )],
                ..Default::default()
            }))));
        }
        let step = step - pre;
        if step < self.subs {
            return Ok(Some(Request::CreateSubscription(Box::new(
                CreateSubscriptionRequest {
                    requested_publishing_interval: self.publishing_ms,
                    requested_lifetime_count: 10_000,
                    requested_max_keep_alive_count: 10,
                    max_notifications_per_publish: 0,
                    publishing_enabled: true,
                    priority: 0,
                    ..Default::default()
                },
            ))));
        }
        let k = step - self.subs;
        let per = self.calls_per_sub();
        if k < self.subs * per {
            return Ok(Some(self.create_items(
                self.sub_ids[k / per],
                k / per,
                k % per,
            )));
        }
        Ok(None)
    }

    fn initial(&self) -> usize {
        self.publish_inflight
    }

    fn next(&mut self, _now: u64) -> Option<Request> {
        Some(self.publish())
    }

    fn on_response(
        &mut self,
        _id: u32,
        resp: &Response,
        _sent: u64,
        now: u64,
        ctx: &mut Ctx,
    ) -> Result<(), String> {
        let Response::Publish(r) = resp else {
            return Err(format!(
                "Publish answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        let sr = r.response_header.service_result;
        if sr.is_bad() {
            // BadTooManyPublishRequests and BadNoSubscription are not data loss.
            return Err(format!("Publish: {}", status_name(sr)));
        }
        let msg = &r.notification_message;
        if !msg.notification_data.is_empty() {
            self.acks.push(SubscriptionAcknowledgement {
                subscription_id: r.subscription_id,
                sequence_number: msg.sequence_number,
            });
        } else {
            ctx.count("keepalives", 1);
        }
        let limits = DecodeLimits::default();
        // Push: the wall time of the receipt (when the loop reaped the message's last bytes),
        // for the latency from each SourceTimestamp.
        let received = crate::push::Receipt {
            received_unix_ns: if self.kind == SubKind::Push {
                unix_ns_at(now)
            } else {
                0
            },
            published_unix_ns: Some(msg.publish_time)
                .filter(|t| !t.is_null())
                .map(|t| t.unix_nanos()),
        };
        let mut item_error: Option<String> = None;
        for ext in &msg.notification_data {
            if let Some(dc) = ext.decode_as::<DataChangeNotification>(limits) {
                let dc = dc.map_err(|e| format!("DataChangeNotification: {e:?}"))?;
                for item in &dc.monitored_items {
                    match (self.kind, &item.value.value) {
                        (SubKind::Push, _) => {
                            let j = item.client_handle as usize;
                            let p = self.push.as_mut().ok_or("push state")?;
                            if j >= p.seq.len() {
                                return Err(format!(
                                    "push: a notification for client handle {j} of {} items",
                                    p.seq.len()
                                ));
                            }
                            // The message's other items are still accounted for (no false gaps).
                            if let Err(e) = crate::push::see_notification(p, j, item, received, ctx)
                            {
                                item_error.get_or_insert(e);
                            }
                        }
                        (SubKind::Changes, Variant::Int32(stamp)) => {
                            ctx.complete(stamp_age_ns(*stamp, now));
                            ctx.count("notifications", 1);
                        }
                        (SubKind::Counters, v) => {
                            let n = match v {
                                Variant::UInt64(x) => *x,
                                Variant::UInt32(x) => *x as u64,
                                Variant::Int64(x) => *x as u64,
                                Variant::Int32(x) => *x as u64,
                                _ => continue,
                            };
                            ctx.count("notifications", 1);
                            if ctx.measuring() {
                                let idx = item.client_handle as usize % self.items.max(1);
                                let t = match item.value.source_timestamp {
                                    Some(ts) if !ts.is_null() => ts.unix_nanos(),
                                    _ => realtime_ns(),
                                };
                                self.counter_seen.lock().unwrap()[idx].see(n, t);
                            }
                            ctx.complete(0);
                        }
                        _ => ctx.count("notifications_other", 1),
                    }
                }
            } else if let Some(ev) = ext.decode_as::<EventNotificationList>(limits) {
                let ev = ev.map_err(|e| format!("EventNotificationList: {e:?}"))?;
                for e in &ev.events {
                    let lat = match e.event_fields.get(1) {
                        Some(Variant::DateTime(t)) => {
                            (realtime_ns() - t.unix_nanos()).max(0) as u64
                        }
                        _ => 0,
                    };
                    ctx.complete(lat);
                    ctx.count("events", 1);
                }
            }
        }
        match item_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
