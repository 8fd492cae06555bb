//! The workloads of `scale-churn` ([`crate::scale`]): reader sessions that Read plant
//! variables and hold a subscription on others ([`ReaderWork`]), and one more session that
//! adds nodes to the server and deletes them again while they do ([`ChurnWork`]).
//!
//! The measured window has three phases on the monotonic clock ([`ChurnClock`]): *quiet*
//! from the window's start to the churn's start, *churn* while nodes are being added and
//! deleted, *after* from the churn's end to the window's end. The churn session starts the
//! churn `quiet` ns after it first sees the window; each reader files a Read (and what its
//! subscription delivered) under the phase of the moment its answer arrived
//! ([`ChurnClock::phase_at`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use uaring_core::types::{ExpandedNodeId, LocalizedText};

use super::*;
use crate::push::{k_of, plant_node};

/// FolderType, Organizes, BaseDataVariableType, Double, ObjectsFolder (namespace 0).
const FOLDER_TYPE: u32 = 61;
const ORGANIZES: u32 = 35;
const BASE_DATA_VARIABLE_TYPE: u32 = 63;
const DOUBLE: u32 = 11;
const OBJECTS_FOLDER: u32 = 85;
/// NodeAttributesMask bits of the attributes a churned Variable is given: AccessLevel,
/// DataType, DisplayName, UserAccessLevel, ValueRank, Value.
const VARIABLE_SPECIFIED: u32 = 1 | 16 | 64 | 65_536 | 524_288 | 2_097_152;
/// NodeAttributesMask: DisplayName (a churned folder's only attribute).
const OBJECT_SPECIFIED: u32 = 64;
/// The churn session's poll for the window's start, ns.
const WAIT_POLL_NS: u64 = 5_000_000;
/// Items of the churn session's own subscription on the first churned variables, which must
/// report BadNodeIdUnknown once those are deleted (the readers' only expected error, kept
/// apart from them).
pub const WATCHED_ITEMS: usize = 10;
/// The watching subscription's publishing and sampling interval, ms.
const WATCH_INTERVAL_MS: f64 = 100.0;
/// Publish requests the churn session keeps out for it.
const WATCH_PUBLISHES: usize = 2;

/// A phase of the `scale-churn` window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Quiet = 0,
    Churn = 1,
    After = 2,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Quiet, Phase::Churn, Phase::After];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Quiet => "quiet",
            Phase::Churn => "churn",
            Phase::After => "after",
        }
    }
}

/// When the phases began (CLOCK_MONOTONIC ns, 0: not yet), written by the churn session,
/// read by the readers and by the run's sampler of the server's CPU time and memory.
#[derive(Debug, Default)]
pub struct ChurnClock {
    /// The churn session first saw the measured window.
    pub window_start_ns: AtomicU64,
    /// The first churn request went out.
    pub churn_start_ns: AtomicU64,
    /// The last AddNodes was answered (the deletions follow).
    pub adds_done_ns: AtomicU64,
    /// The last DeleteNodes was answered.
    pub churn_end_ns: AtomicU64,
}

impl ChurnClock {
    /// The phase of monotonic instant `t`.
    pub fn phase_at(&self, t: u64) -> Phase {
        let start = self.churn_start_ns.load(Ordering::Acquire);
        let end = self.churn_end_ns.load(Ordering::Acquire);
        if start == 0 || t < start {
            Phase::Quiet
        } else if end == 0 || t < end {
            Phase::Churn
        } else {
            Phase::After
        }
    }

    fn mark(cell: &AtomicU64, now: u64) {
        // 0 means "not yet": an instant of 0 is stored as 1.
        cell.store(now.max(1), Ordering::Release);
    }
}

/// What the readers saw in each phase of the window (all readers of a run share one).
#[derive(Debug)]
pub struct ReaderPhases {
    /// Read latencies (open loop: from when each Read was due; closed: from its send), ns.
    pub reads: [Histogram<u64>; 3],
    /// Reads answered with anything but every value Good and of the contract.
    pub read_errors: [u64; 3],
    /// Data changes delivered by the readers' subscriptions.
    pub notifications: [u64; 3],
    /// Publish answers that failed, and notified values with a Bad status.
    pub subscription_errors: [u64; 3],
    pub first_error: Option<String>,
}

impl Default for ReaderPhases {
    fn default() -> Self {
        ReaderPhases {
            reads: [
                crate::uring::new_histogram(),
                crate::uring::new_histogram(),
                crate::uring::new_histogram(),
            ],
            read_errors: [0; 3],
            notifications: [0; 3],
            subscription_errors: [0; 3],
            first_error: None,
        }
    }
}

impl ReaderPhases {
    fn error(&mut self, phase: Phase, read: bool, e: &str) {
        if read {
            self.read_errors[phase as usize] += 1;
        } else {
            self.subscription_errors[phase as usize] += 1;
        }
        if self.first_error.is_none() {
            self.first_error = Some(format!("{}: {e}", phase.name()));
        }
    }
}

/// A request of a reader, from its build to its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Out {
    /// A Read, due at (open loop; 0 in a closed loop).
    Read(u64),
    Publish,
}

/// What a reader does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReaderSpec {
    /// The server's plant variables.
    pub variables: usize,
    /// Variables per Read.
    pub per_request: usize,
    /// Reads in flight (closed loop), or at most (open loop).
    pub inflight: usize,
    /// Open loop: Reads a second on this connection (0: closed loop).
    pub reads_per_s: f64,
    /// Monitored items of the reader's subscription.
    pub items: usize,
    pub sampling_ms: f64,
    pub publishing_ms: f64,
}

/// A reader of `scale-churn`: Reads of plant variables spread over all of them
/// ([`SpreadWork`]'s, checked as there), closed loop or paced, and one subscription of
/// `items` items of queue 1 on the variables [index × items, (index + 1) × items) modulo N,
/// with Publish requests kept in flight. Neither touches a churned node, so every error is
/// one. Each answer is filed under its phase in the shared [`ReaderPhases`] (measured window
/// only); every Read also counts in the run's usual figures.
pub struct ReaderWork {
    spec: ReaderSpec,
    index: usize,
    spread: SpreadWork,
    pacer: Option<Pacer>,
    ns: u16,
    sub_id: u32,
    acks: Vec<SubscriptionAcknowledgement>,
    /// Publish requests to put out at the start.
    publishes_to_start: usize,
    /// The answer just handled was a Publish (the next request is one too).
    answered_publish: bool,
    built: VecDeque<Out>,
    out: rustc_hash::FxHashMap<u32, Out>,
    reads_out: usize,
    clock: Arc<ChurnClock>,
    phases: Arc<Mutex<ReaderPhases>>,
}

impl ReaderWork {
    pub fn new(
        spec: ReaderSpec,
        index: usize,
        of: usize,
        clock: Arc<ChurnClock>,
        phases: Arc<Mutex<ReaderPhases>>,
    ) -> ReaderWork {
        let n = spec.variables.max(1);
        ReaderWork {
            spread: SpreadWork::new(
                NodeService::Read,
                n,
                spec.per_request,
                spec.inflight,
                index * n / of.max(1),
            ),
            pacer: (spec.reads_per_s > 0.0).then(|| Pacer::new(spec.reads_per_s, index, of)),
            spec,
            index,
            ns: 0,
            sub_id: 0,
            acks: Vec::new(),
            publishes_to_start: publish_inflight(1),
            answered_publish: false,
            built: VecDeque::new(),
            out: Default::default(),
            reads_out: 0,
            clock,
            phases,
        }
    }

    fn read(&mut self, due: u64) -> Request {
        self.built.push_back(Out::Read(due));
        self.spread.request()
    }

    fn publish(&mut self) -> Request {
        self.built.push_back(Out::Publish);
        Request::Publish(Box::new(PublishRequest {
            subscription_acknowledgements: std::mem::take(&mut self.acks),
            ..Default::default()
        }))
    }

    fn next_read(&mut self, now: u64) -> Option<Request> {
        match self.pacer.as_mut() {
            None => Some(self.read(0)),
            Some(p) => {
                let due = p.take(now)?;
                Some(self.read(due))
            }
        }
    }

    fn create_items(&self) -> Request {
        let n = self.spec.variables.max(1);
        let items_to_create = (0..self.spec.items)
            .map(|j| MonitoredItemCreateRequest {
                item_to_monitor: read_value_id(
                    plant_node(self.ns, (self.index * self.spec.items + j) % n),
                    attr::VALUE,
                ),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: j as u32,
                    sampling_interval: self.spec.sampling_ms,
                    filter: ExtensionObject::null(),
                    queue_size: 1,
                    discard_oldest: true,
                },
            })
            .collect();
        Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: self.sub_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create,
            ..Default::default()
        }))
    }

    /// Checks a Publish answer and acknowledges it: the data changes it delivered and what
    /// was wrong (every item is looked at).
    fn see_publish(&mut self, resp: &Response) -> (u64, Vec<String>) {
        let Response::Publish(r) = resp else {
            return (
                0,
                vec![format!(
                    "Publish answered with {} {}",
                    resp.name(),
                    status_name(service_result(resp))
                )],
            );
        };
        let sr = r.response_header.service_result;
        if sr.is_bad() {
            return (0, vec![format!("Publish: {}", status_name(sr))]);
        }
        let msg = &r.notification_message;
        if !msg.notification_data.is_empty() {
            self.acks.push(SubscriptionAcknowledgement {
                subscription_id: r.subscription_id,
                sequence_number: msg.sequence_number,
            });
        }
        let (mut delivered, mut errors) = (0, Vec::new());
        for ext in &msg.notification_data {
            match ext.decode_as::<DataChangeNotification>(DecodeLimits::default()) {
                Some(Ok(dc)) => {
                    for item in &dc.monitored_items {
                        let s = item.value.status_code();
                        let e = if s.is_bad() {
                            Some(format!(
                                "item {} notified {}",
                                item.client_handle,
                                status_name(s)
                            ))
                        } else {
                            k_of(&item.value.value).err()
                        };
                        match e {
                            Some(e) => errors.push(e),
                            None => delivered += 1,
                        }
                    }
                }
                Some(Err(e)) => errors.push(format!("DataChangeNotification: {e:?}")),
                // A StatusChangeNotification: the subscription's end.
                None => errors.push(
                    "a notification that is not a data change (the subscription's status changed)"
                        .into(),
                ),
            }
        }
        (delivered, errors)
    }
}

impl Paced for ReaderWork {
    fn pacer(&self) -> Option<&Pacer> {
        self.pacer.as_ref()
    }
    fn pacer_mut(&mut self) -> Option<&mut Pacer> {
        self.pacer.as_mut()
    }
    /// Reads built or in flight below the cap.
    fn has_slot(&self) -> bool {
        self.reads_out + self.built.iter().filter(|o| **o != Out::Publish).count()
            < self.spec.inflight
    }
    fn next_due(&mut self, now: u64) -> Option<Request> {
        self.next_read(now)
    }
}

impl Workload for ReaderWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match step {
            0 => Ok(Some(namespace_array_read())),
            1 => {
                self.ns = plant_namespace(prev)?;
                self.spread.set_namespace(self.ns);
                Ok(Some(Request::CreateSubscription(Box::new(
                    CreateSubscriptionRequest {
                        requested_publishing_interval: self.spec.publishing_ms,
                        requested_lifetime_count: 10_000,
                        requested_max_keep_alive_count: 10,
                        publishing_enabled: true,
                        ..Default::default()
                    },
                ))))
            }
            2 => {
                let Some(Response::CreateSubscription(r)) = prev else {
                    return Err("CreateSubscription: no answer".into());
                };
                self.sub_id = r.subscription_id;
                Ok(Some(self.create_items()))
            }
            _ => {
                let Some(Response::CreateMonitoredItems(r)) = prev else {
                    return Err("CreateMonitoredItems: no answer".into());
                };
                if r.results.len() != self.spec.items {
                    return Err(format!(
                        "CreateMonitoredItems: {} results for {} items",
                        r.results.len(),
                        self.spec.items
                    ));
                }
                if let Some(bad) = r.results.iter().find(|x| x.status_code.is_bad()) {
                    return Err(format!(
                        "CreateMonitoredItems: {}",
                        status_name(bad.status_code)
                    ));
                }
                Ok(None)
            }
        }
    }

    fn initial(&self) -> usize {
        self.publishes_to_start
            + if self.pacer.is_some() {
                0
            } else {
                self.spec.inflight
            }
    }

    fn next(&mut self, now: u64) -> Option<Request> {
        if self.publishes_to_start > 0 {
            self.publishes_to_start -= 1;
            return Some(self.publish());
        }
        if std::mem::take(&mut self.answered_publish) {
            return Some(self.publish());
        }
        // A Read was answered (or the start): its slot takes the next one (open loop: one
        // already due, late, keeps the time it was due).
        self.next_read(now)
    }

    fn on_sent(&mut self, id: u32) {
        if let Some(o) = self.built.pop_front() {
            if o != Out::Publish {
                self.reads_out += 1;
            }
            self.out.insert(id, o);
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
        let Some(o) = self.out.remove(&id) else {
            return Err(format!(
                "{}: an answer to request {id}, which is not in flight",
                resp.name()
            ));
        };
        let phase = self.clock.phase_at(now);
        match o {
            Out::Publish => {
                self.answered_publish = true;
                let (delivered, errors) = self.see_publish(resp);
                if ctx.measuring() {
                    let mut phases = self.phases.lock().map_err(|_| "reader phases lock")?;
                    phases.notifications[phase as usize] += delivered;
                    for e in &errors {
                        phases.error(phase, false, e);
                    }
                }
                match errors.into_iter().next() {
                    Some(e) => Err(e),
                    None => Ok(()),
                }
            }
            Out::Read(due) => {
                self.reads_out = self.reads_out.saturating_sub(1);
                let checked = self.spread.check(resp);
                let latency = now.saturating_sub(if self.pacer.is_some() { due } else { sent });
                if ctx.measuring() {
                    let mut phases = self.phases.lock().map_err(|_| "reader phases lock")?;
                    match &checked {
                        Ok(()) => {
                            phases.reads[phase as usize].saturating_record(latency.max(1));
                        }
                        Err(e) => phases.error(phase, true, e),
                    }
                }
                checked?;
                ctx.complete(latency);
                Ok(())
            }
        }
    }
}

/// What the churn session does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChurnSpec {
    /// Variables added, then deleted.
    pub nodes: usize,
    /// Items per AddNodes or DeleteNodes request (and variables per folder).
    pub batch: usize,
    /// Nodes a second, adds and deletes alike (0: each request as soon as the last one is
    /// answered).
    pub rate: f64,
    /// From the window's start to the churn's, ns.
    pub quiet_ns: u64,
}

/// One request of the churn, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChurnStep {
    /// Folders `s=Churn.F<f>` organized by the Objects folder.
    AddFolders(std::ops::Range<usize>),
    /// The variables `s=Churn.V<i>` of folder `f` (indexes in `range`).
    AddVariables {
        folder: usize,
        range: std::ops::Range<usize>,
    },
    DeleteVariables(std::ops::Range<usize>),
    DeleteFolders(std::ops::Range<usize>),
}

impl ChurnStep {
    /// Nodes the request adds or deletes.
    pub fn nodes(&self) -> usize {
        match self {
            ChurnStep::AddFolders(r)
            | ChurnStep::DeleteVariables(r)
            | ChurnStep::DeleteFolders(r) => r.len(),
            ChurnStep::AddVariables { range, .. } => range.len(),
        }
    }

    pub fn adds(&self) -> bool {
        matches!(
            self,
            ChurnStep::AddFolders(_) | ChurnStep::AddVariables { .. }
        )
    }
}

/// The churn's requests: the folders (`batch` at most per request), every folder's
/// `batch` variables (one request each), the variables deleted `batch` at a time, then the
/// folders. A folder per batch keeps each parent's list of children short (AddNodes checks
/// a new node's BrowseName against its siblings').
pub fn churn_plan(nodes: usize, batch: usize) -> Vec<ChurnStep> {
    let batch = batch.max(1);
    let folders = nodes.div_ceil(batch);
    let chunks =
        |n: usize| (0..n.div_ceil(batch)).map(move |k| k * batch..((k + 1) * batch).min(n));
    let mut steps: Vec<ChurnStep> = chunks(folders).map(ChurnStep::AddFolders).collect();
    steps.extend((0..folders).map(|f| ChurnStep::AddVariables {
        folder: f,
        range: f * batch..((f + 1) * batch).min(nodes),
    }));
    steps.extend(chunks(nodes).map(ChurnStep::DeleteVariables));
    steps.extend(chunks(folders).map(ChurnStep::DeleteFolders));
    steps
}

/// What the churn session did (measured or not: the churn is the run's subject).
#[derive(Debug, Default, Clone)]
pub struct ChurnStats {
    pub folders_added: u64,
    pub variables_added: u64,
    pub variables_deleted: u64,
    pub folders_deleted: u64,
    /// Operations answered Bad, requests refused.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Requests answered, and the time each took (send → answer), ns.
    pub add_request_ns: Vec<u64>,
    pub delete_request_ns: Vec<u64>,
    /// Steps done of the plan's.
    pub steps_done: usize,
    pub steps: usize,
    /// The user the session logged in as (None: anonymous).
    pub user: Option<String>,
    /// Items watching the first churned variables, and how many of them reported
    /// BadNodeIdUnknown after the variables' deletion went out; Good values they notified.
    pub watched_items: u64,
    pub watched_items_deleted: u64,
    pub watched_values: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChurnState {
    /// Polling for the measured window (the next poll at).
    Waiting(u64),
    /// The window is on; the churn starts at.
    Quiet(u64),
    /// Step `next` is the next to send; one request in flight at most.
    Running {
        next: usize,
        in_flight: bool,
    },
    Done,
}

/// Where the churn session's watching items are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Watch {
    /// Not yet: their variables do not exist yet.
    NotYet,
    /// Their variables were added: CreateMonitoredItems is to go out.
    Wanted,
    Creating,
    Live,
    /// Refused (counted as a churn error): no more.
    Off,
}

/// A request of the churn session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChurnOut {
    Step,
    CreateItems,
    Publish,
}

/// The churn session: after the quiet part of the window, the requests of [`churn_plan`]
/// one at a time (at `rate` nodes a second, or each as soon as the last is answered). Every
/// result must be Good. Its own subscription (created in the setup) gets
/// [`WATCHED_ITEMS`] items on the first variables once they are added; each must notify
/// BadNodeIdUnknown after their deletion went out, and nothing Bad before.
pub struct ChurnWork {
    spec: ChurnSpec,
    plan: Vec<ChurnStep>,
    state: ChurnState,
    ns: u16,
    churn_start: u64,
    /// Nodes of the steps before step k, for the paced schedule.
    nodes_before: Vec<usize>,
    /// Items watching the first variables (0: none), their subscription and state.
    watch: usize,
    sub_id: u32,
    watching: Watch,
    /// The DeleteNodes of the watched variables went out.
    watch_deleting: bool,
    /// Watched items that reported their variable gone.
    watched_gone: Vec<bool>,
    publishes_wanted: usize,
    answered_publish: bool,
    acks: Vec<SubscriptionAcknowledgement>,
    built: VecDeque<ChurnOut>,
    out: rustc_hash::FxHashMap<u32, ChurnOut>,
    clock: Arc<ChurnClock>,
    stats: Arc<Mutex<ChurnStats>>,
    /// The plan's requests, built before the window (taken as they are sent): building
    /// 1,000 AddNodesItems (their names, their attributes' ExtensionObjects) took the churn
    /// thread about 1 ms in one piece, on the CPU the readers' client shares.
    prepared: Vec<Option<Request>>,
}

impl ChurnWork {
    pub fn new(
        spec: ChurnSpec,
        clock: Arc<ChurnClock>,
        stats: Arc<Mutex<ChurnStats>>,
    ) -> ChurnWork {
        let plan = churn_plan(spec.nodes, spec.batch);
        let mut nodes_before = Vec::with_capacity(plan.len() + 1);
        let mut sum = 0;
        for s in &plan {
            nodes_before.push(sum);
            sum += s.nodes();
        }
        if let Ok(mut st) = stats.lock() {
            st.steps = plan.len();
        }
        let watch = WATCHED_ITEMS.min(spec.nodes).min(spec.batch.max(1));
        ChurnWork {
            spec,
            plan,
            state: ChurnState::Waiting(0),
            ns: 0,
            churn_start: 0,
            nodes_before,
            watch,
            sub_id: 0,
            watching: Watch::NotYet,
            watch_deleting: false,
            watched_gone: vec![false; watch],
            publishes_wanted: 0,
            answered_publish: false,
            acks: Vec::new(),
            built: VecDeque::new(),
            out: Default::default(),
            clock,
            stats,
            prepared: Vec::new(),
        }
    }

    /// Builds every step's request (once the setup has read the plant's namespace index).
    fn prepare(&mut self) {
        self.prepared = (0..self.plan.len())
            .map(|k| Some(self.request(k)))
            .collect();
    }

    fn publish(&mut self) -> Request {
        self.built.push_back(ChurnOut::Publish);
        Request::Publish(Box::new(PublishRequest {
            subscription_acknowledgements: std::mem::take(&mut self.acks),
            ..Default::default()
        }))
    }

    fn create_watch(&mut self) -> Request {
        self.built.push_back(ChurnOut::CreateItems);
        self.watching = Watch::Creating;
        let items_to_create = (0..self.watch)
            .map(|j| MonitoredItemCreateRequest {
                item_to_monitor: read_value_id(self.variable(j), attr::VALUE),
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: j as u32,
                    sampling_interval: WATCH_INTERVAL_MS,
                    filter: ExtensionObject::null(),
                    queue_size: 1,
                    discard_oldest: true,
                },
            })
            .collect();
        Request::CreateMonitoredItems(Box::new(CreateMonitoredItemsRequest {
            subscription_id: self.sub_id,
            timestamps_to_return: TimestampsToReturn::Both,
            items_to_create,
            ..Default::default()
        }))
    }

    /// Counts an error of the churn session.
    fn fail(&self, e: String) -> Result<(), String> {
        if let Ok(mut st) = self.stats.lock() {
            st.errors += 1;
            st.first_error.get_or_insert(e.clone());
        }
        Err(e)
    }

    /// The answer to the watching items' creation.
    fn watch_created(&mut self, resp: &Response) -> Result<(), String> {
        let bad = match resp {
            Response::CreateMonitoredItems(r) if r.results.len() == self.watch => r
                .results
                .iter()
                .find(|x| x.status_code.is_bad())
                .map(|x| status_name(x.status_code)),
            other => Some(format!(
                "{} {}",
                other.name(),
                status_name(service_result(other))
            )),
        };
        if let Some(e) = bad {
            self.watching = Watch::Off;
            return self.fail(format!("CreateMonitoredItems on churned variables: {e}"));
        }
        self.watching = Watch::Live;
        self.publishes_wanted = WATCH_PUBLISHES;
        if let Ok(mut st) = self.stats.lock() {
            st.watched_items = self.watch as u64;
        }
        Ok(())
    }

    /// A Publish answer of the watching subscription: values before the deletion,
    /// BadNodeIdUnknown after it.
    fn see_watch(&mut self, resp: &Response) -> Result<(), String> {
        let Response::Publish(r) = resp else {
            return self.fail(format!(
                "the churn session's Publish answered with {} {}",
                resp.name(),
                status_name(service_result(resp))
            ));
        };
        let sr = r.response_header.service_result;
        if sr.is_bad() {
            return self.fail(format!("the churn session's Publish: {}", status_name(sr)));
        }
        let msg = &r.notification_message;
        if !msg.notification_data.is_empty() {
            self.acks.push(SubscriptionAcknowledgement {
                subscription_id: r.subscription_id,
                sequence_number: msg.sequence_number,
            });
        }
        let (mut values, mut gone, mut error) = (0, 0, None);
        for ext in &msg.notification_data {
            let Some(Ok(dc)) = ext.decode_as::<DataChangeNotification>(DecodeLimits::default())
            else {
                error.get_or_insert("the watching subscription: not a data change".to_string());
                continue;
            };
            for item in &dc.monitored_items {
                let j = item.client_handle as usize;
                let s = item.value.status_code();
                let unknown = s.0 & 0xFFFF_0000 == StatusCode::BadNodeIdUnknown.0;
                match self.watched_gone.get_mut(j) {
                    None => {
                        error.get_or_insert(format!("a watching item of client handle {j}"));
                    }
                    Some(g) if unknown && self.watch_deleting => {
                        if !*g {
                            *g = true;
                            gone += 1;
                        }
                    }
                    Some(_) if s.is_bad() => {
                        error.get_or_insert(format!(
                            "watching item {j} notified {} before its variable's deletion",
                            status_name(s)
                        ));
                    }
                    Some(_) => values += 1,
                }
            }
        }
        if let Ok(mut st) = self.stats.lock() {
            st.watched_items_deleted += gone;
            st.watched_values += values;
        }
        match error {
            Some(e) => self.fail(e),
            None => Ok(()),
        }
    }

    /// When step `k` is due (paced), else now.
    fn due(&self, k: usize) -> u64 {
        if self.spec.rate <= 0.0 {
            return 0;
        }
        let before = self.nodes_before.get(k).copied().unwrap_or(0) as f64;
        self.churn_start + (before / self.spec.rate * 1e9) as u64
    }

    fn folder(&self, f: usize) -> NodeId {
        NodeId::string(self.ns, format!("Churn.F{f}"))
    }

    fn variable(&self, i: usize) -> NodeId {
        NodeId::string(self.ns, format!("Churn.V{i}"))
    }

    /// The request of step `k`.
    pub fn request(&self, k: usize) -> Request {
        let ns = self.ns;
        match &self.plan[k] {
            ChurnStep::AddFolders(r) => Request::AddNodes(Box::new(AddNodesRequest {
                nodes_to_add: r
                    .clone()
                    .map(|f| AddNodesItem {
                        parent_node_id: ExpandedNodeId::local(NodeId::ns0(OBJECTS_FOLDER)),
                        reference_type_id: NodeId::ns0(ORGANIZES),
                        requested_new_node_id: ExpandedNodeId::local(self.folder(f)),
                        browse_name: QualifiedName::new(ns, &format!("Churn{f}")),
                        node_class: NodeClass::Object,
                        node_attributes: ExtensionObject::from_struct(&ObjectAttributes {
                            specified_attributes: OBJECT_SPECIFIED,
                            display_name: LocalizedText::text(&format!("Churn{f}")),
                            ..Default::default()
                        }),
                        type_definition: ExpandedNodeId::local(NodeId::ns0(FOLDER_TYPE)),
                    })
                    .collect(),
                ..Default::default()
            })),
            ChurnStep::AddVariables { folder, range } => {
                let parent = ExpandedNodeId::local(self.folder(*folder));
                Request::AddNodes(Box::new(AddNodesRequest {
                    nodes_to_add: range
                        .clone()
                        .map(|i| AddNodesItem {
                            parent_node_id: parent.clone(),
                            reference_type_id: NodeId::ns0(ORGANIZES),
                            requested_new_node_id: ExpandedNodeId::local(self.variable(i)),
                            browse_name: QualifiedName::new(ns, &format!("V{i}")),
                            node_class: NodeClass::Variable,
                            node_attributes: ExtensionObject::from_struct(&VariableAttributes {
                                specified_attributes: VARIABLE_SPECIFIED,
                                display_name: LocalizedText::text(&format!("V{i}")),
                                value: Variant::Double(i as f64),
                                data_type: NodeId::ns0(DOUBLE),
                                value_rank: -1,
                                access_level: 1,
                                user_access_level: 1,
                                ..Default::default()
                            }),
                            type_definition: ExpandedNodeId::local(NodeId::ns0(
                                BASE_DATA_VARIABLE_TYPE,
                            )),
                        })
                        .collect(),
                    ..Default::default()
                }))
            }
            ChurnStep::DeleteVariables(r) => delete_nodes(r.clone().map(|i| self.variable(i))),
            ChurnStep::DeleteFolders(r) => delete_nodes(r.clone().map(|f| self.folder(f))),
        }
    }

    /// Checks the answer to step `k` and counts it; the statuses of its operations.
    fn count(&self, k: usize, resp: &Response, took_ns: u64) -> Result<(), String> {
        let step = &self.plan[k];
        let sr = service_result(resp);
        let mut st = self.stats.lock().map_err(|_| "churn stats lock")?;
        let statuses: Vec<StatusCode> = match (resp, step.adds()) {
            (Response::AddNodes(r), true) if !sr.is_bad() => {
                r.results.iter().map(|x| x.status_code).collect()
            }
            (Response::DeleteNodes(r), false) if !sr.is_bad() => r.results.clone(),
            (other, _) => {
                // The whole request failed: every one of its nodes.
                let e = format!(
                    "churn step {k}: answered with {} {}",
                    other.name(),
                    status_name(sr)
                );
                st.errors += step.nodes() as u64;
                st.first_error.get_or_insert(e.clone());
                return Err(e);
            }
        };
        if step.adds() {
            st.add_request_ns.push(took_ns);
        } else {
            st.delete_request_ns.push(took_ns);
        }
        let good = statuses.iter().filter(|s| s.is_good()).count() as u64;
        match step {
            ChurnStep::AddFolders(_) => st.folders_added += good,
            ChurnStep::AddVariables { .. } => st.variables_added += good,
            ChurnStep::DeleteVariables(_) => st.variables_deleted += good,
            ChurnStep::DeleteFolders(_) => st.folders_deleted += good,
        }
        let e = if statuses.len() != step.nodes() {
            Some(format!(
                "{}: {} results for {} nodes",
                resp.name(),
                statuses.len(),
                step.nodes()
            ))
        } else {
            statuses
                .iter()
                .find(|s| s.is_bad())
                .map(|s| format!("{} of churn step {k}: {}", resp.name(), status_name(*s)))
        };
        match e {
            Some(e) => {
                st.errors += (step.nodes() as u64).saturating_sub(good).max(1);
                st.first_error.get_or_insert(e.clone());
                Err(e)
            }
            None => Ok(()),
        }
    }

    /// Sends step `next` if it is due at `now`.
    fn send_due(&mut self, now: u64) -> Option<Request> {
        let ChurnState::Running { next, in_flight } = self.state else {
            return None;
        };
        if in_flight || next >= self.plan.len() || self.due(next) > now {
            return None;
        }
        self.state = ChurnState::Running {
            next,
            in_flight: true,
        };
        if matches!(&self.plan[next], ChurnStep::DeleteVariables(r) if r.start < self.watch) {
            self.watch_deleting = true;
        }
        self.built.push_back(ChurnOut::Step);
        let prepared = self.prepared.get_mut(next).and_then(Option::take);
        Some(prepared.unwrap_or_else(|| self.request(next)))
    }
}

impl Workload for ChurnWork {
    fn setup(&mut self, step: usize, prev: Option<&Response>) -> Result<Option<Request>, String> {
        match step {
            0 => Ok(Some(namespace_array_read())),
            1 => {
                self.ns = plant_namespace(prev)?;
                self.prepare();
                if self.watch == 0 {
                    return Ok(None);
                }
                Ok(Some(Request::CreateSubscription(Box::new(
                    CreateSubscriptionRequest {
                        requested_publishing_interval: WATCH_INTERVAL_MS,
                        requested_lifetime_count: 10_000,
                        requested_max_keep_alive_count: 10,
                        publishing_enabled: true,
                        ..Default::default()
                    },
                ))))
            }
            _ => {
                let Some(Response::CreateSubscription(r)) = prev else {
                    return Err("the churn session's CreateSubscription: no answer".into());
                };
                self.sub_id = r.subscription_id;
                Ok(None)
            }
        }
    }

    fn initial(&self) -> usize {
        0
    }

    fn next(&mut self, now: u64) -> Option<Request> {
        if std::mem::take(&mut self.answered_publish) {
            return Some(self.publish());
        }
        self.send_due(now)
    }

    fn on_sent(&mut self, id: u32) {
        if let Some(o) = self.built.pop_front() {
            self.out.insert(id, o);
        }
    }

    fn logged_in(&mut self, user: Option<&str>) {
        if let Ok(mut st) = self.stats.lock() {
            st.user = user.map(str::to_string);
        }
    }

    fn deadline(&self) -> Option<u64> {
        if self.watching == Watch::Wanted || self.publishes_wanted > 0 {
            return Some(0);
        }
        match self.state {
            ChurnState::Waiting(at) | ChurnState::Quiet(at) => Some(at),
            ChurnState::Running {
                next,
                in_flight: false,
            } if next < self.plan.len() => Some(self.due(next)),
            _ => None,
        }
    }

    fn on_timer(&mut self, now: u64, ctx: &mut Ctx) -> Vec<Request> {
        let mut out = Vec::new();
        if self.watching == Watch::Wanted {
            out.push(self.create_watch());
        }
        while self.publishes_wanted > 0 {
            self.publishes_wanted -= 1;
            out.push(self.publish());
        }
        out.extend(self.on_churn_timer(now, ctx));
        out
    }

    fn on_response(
        &mut self,
        id: u32,
        resp: &Response,
        sent: u64,
        now: u64,
        _ctx: &mut Ctx,
    ) -> Result<(), String> {
        match self.out.remove(&id) {
            Some(ChurnOut::Step) => self.step_answered(resp, sent, now),
            Some(ChurnOut::CreateItems) => self.watch_created(resp),
            Some(ChurnOut::Publish) => {
                self.answered_publish = true;
                self.see_watch(resp)
            }
            None => Err(format!(
                "churn: an answer ({}) to request {id}, which is not in flight",
                resp.name()
            )),
        }
    }
}

impl ChurnWork {
    /// The churn's own timer: the window's start, the quiet part's end, paced steps.
    fn on_churn_timer(&mut self, now: u64, ctx: &mut Ctx) -> Vec<Request> {
        match self.state {
            ChurnState::Waiting(_) if ctx.measuring() => {
                ChurnClock::mark(&self.clock.window_start_ns, now);
                self.state = ChurnState::Quiet(now + self.spec.quiet_ns);
                Vec::new()
            }
            ChurnState::Waiting(_) => {
                self.state = ChurnState::Waiting(now + WAIT_POLL_NS);
                Vec::new()
            }
            ChurnState::Quiet(at) if now >= at => {
                self.churn_start = now;
                ChurnClock::mark(&self.clock.churn_start_ns, now);
                self.state = ChurnState::Running {
                    next: 0,
                    in_flight: false,
                };
                self.send_due(now).into_iter().collect()
            }
            ChurnState::Running { .. } => self.send_due(now).into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// The answer to the churn step in flight.
    fn step_answered(&mut self, resp: &Response, sent: u64, now: u64) -> Result<(), String> {
        let ChurnState::Running {
            next,
            in_flight: true,
        } = self.state
        else {
            return Err(format!("churn: an unexpected {}", resp.name()));
        };
        let r = self.count(next, resp, now.saturating_sub(sent));
        let k = next + 1;
        if let Ok(mut st) = self.stats.lock() {
            st.steps_done = k;
        }
        // The first variables exist: the watching items go out.
        if r.is_ok()
            && self.watch > 0
            && self.sub_id != 0
            && self.watching == Watch::NotYet
            && matches!(&self.plan[next], ChurnStep::AddVariables { range, .. } if range.start == 0)
        {
            self.watching = Watch::Wanted;
        }
        if self.plan[next].adds() && self.plan.get(k).is_none_or(|s| !s.adds()) {
            ChurnClock::mark(&self.clock.adds_done_ns, now);
        }
        if k >= self.plan.len() {
            ChurnClock::mark(&self.clock.churn_end_ns, now);
            self.state = ChurnState::Done;
        } else {
            self.state = ChurnState::Running {
                next: k,
                in_flight: false,
            };
        }
        r
    }
}

/// A DeleteNodes of `ids`, with the references to them.
fn delete_nodes(ids: impl Iterator<Item = NodeId>) -> Request {
    Request::DeleteNodes(Box::new(DeleteNodesRequest {
        nodes_to_delete: ids
            .map(|node_id| DeleteNodesItem {
                node_id,
                delete_target_references: true,
            })
            .collect(),
        ..Default::default()
    }))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_adds_every_node_and_deletes_it() {
        let plan = churn_plan(2500, 1000);
        assert_eq!(
            plan,
            vec![
                ChurnStep::AddFolders(0..3),
                ChurnStep::AddVariables {
                    folder: 0,
                    range: 0..1000
                },
                ChurnStep::AddVariables {
                    folder: 1,
                    range: 1000..2000
                },
                ChurnStep::AddVariables {
                    folder: 2,
                    range: 2000..2500
                },
                ChurnStep::DeleteVariables(0..1000),
                ChurnStep::DeleteVariables(1000..2000),
                ChurnStep::DeleteVariables(2000..2500),
                ChurnStep::DeleteFolders(0..3),
            ]
        );
        // 100,000 in batches of 1000: 100 folders in one request, no request over the batch.
        let plan = churn_plan(100_000, 1000);
        assert_eq!(plan.len(), 1 + 100 + 100 + 1);
        assert!(plan.iter().all(|s| s.nodes() <= 1000 && s.nodes() > 0));
        let added: usize = plan.iter().filter(|s| s.adds()).map(|s| s.nodes()).sum();
        let deleted: usize = plan.iter().filter(|s| !s.adds()).map(|s| s.nodes()).sum();
        assert_eq!((added, deleted), (100_100, 100_100));
        // More folders than a batch: several requests of folders.
        let plan = churn_plan(25, 2);
        assert_eq!(
            plan.iter()
                .filter(|s| matches!(s, ChurnStep::AddFolders(_)))
                .count(),
            7
        );
    }

    #[test]
    fn phases_follow_the_clock() {
        let c = ChurnClock::default();
        assert_eq!(c.phase_at(5), Phase::Quiet);
        ChurnClock::mark(&c.churn_start_ns, 100);
        assert_eq!(c.phase_at(99), Phase::Quiet);
        assert_eq!(c.phase_at(100), Phase::Churn);
        assert_eq!(c.phase_at(1_000_000), Phase::Churn);
        ChurnClock::mark(&c.churn_end_ns, 200);
        assert_eq!(c.phase_at(150), Phase::Churn);
        assert_eq!(c.phase_at(200), Phase::After);
    }

    fn ctx_run<T>(phase: u8, f: impl FnOnce(&mut Ctx) -> T) -> T {
        let mut stats = crate::uring::ThreadStats::default();
        let shared = crate::uring::Shared::default();
        let mut ctx = Ctx::new(phase, &mut stats, &shared);
        f(&mut ctx)
    }

    #[test]
    fn churn_waits_for_the_window_then_paces_its_requests() {
        const MS: u64 = 1_000_000;
        let clock = Arc::new(ChurnClock::default());
        let stats = Arc::new(Mutex::new(ChurnStats::default()));
        let spec = ChurnSpec {
            nodes: 20,
            batch: 10,
            rate: 1000.0,
            quiet_ns: 100 * MS,
        };
        let mut w = ChurnWork::new(spec, clock.clone(), stats.clone());
        w.ns = 2;
        assert_eq!(w.deadline(), Some(0));
        let warm = crate::uring::PHASE_WARMUP;
        let measure = crate::uring::PHASE_MEASURE;
        assert!(ctx_run(warm, |c| w.on_timer(MS, c)).is_empty());
        assert_eq!(w.deadline(), Some(MS + WAIT_POLL_NS));
        assert!(ctx_run(measure, |c| w.on_timer(10 * MS, c)).is_empty());
        assert_eq!(clock.window_start_ns.load(Ordering::Relaxed), 10 * MS);
        assert_eq!(w.deadline(), Some(110 * MS), "the quiet part");
        // The churn starts: the folders' request at once.
        let t0 = 110 * MS;
        let r = ctx_run(measure, |c| w.on_timer(t0, c));
        let [Request::AddNodes(a)] = &r[..] else {
            panic!("{r:?}")
        };
        assert_eq!(a.nodes_to_add.len(), 2);
        assert_eq!(a.nodes_to_add[0].node_class, NodeClass::Object);
        w.on_sent(1);
        assert_eq!(clock.phase_at(t0), Phase::Churn);
        assert_eq!(w.deadline(), None, "one request in flight");
        assert!(w.next(t0).is_none());
        let added = |n: usize| {
            Response::AddNodes(Box::new(AddNodesResponse {
                results: vec![
                    AddNodesResult {
                        status_code: StatusCode::Good,
                        added_node_id: NodeId::NULL,
                    };
                    n
                ],
                ..Default::default()
            }))
        };
        ctx_run(measure, |c| w.on_response(1, &added(2), t0, t0 + MS, c)).unwrap();
        // The 2 folders took 2 ms of the schedule at 1000 nodes/s.
        assert_eq!(w.deadline(), Some(t0 + 2 * MS));
        assert!(w.next(t0 + MS).is_none(), "not due yet");
        let Some(Request::AddNodes(v)) = w.next(t0 + 2 * MS) else {
            panic!()
        };
        w.on_sent(2);
        assert_eq!(v.nodes_to_add.len(), 10);
        assert_eq!(
            v.nodes_to_add[3].requested_new_node_id.node_id,
            NodeId::string(2, "Churn.V3")
        );
        assert_eq!(
            v.nodes_to_add[3].parent_node_id.node_id,
            NodeId::string(2, "Churn.F0")
        );
        // A Bad result is a churn error, counted, and the churn goes on.
        let mut half = added(10);
        if let Response::AddNodes(r) = &mut half {
            r.results[4].status_code = StatusCode::BadUserAccessDenied;
        }
        let e = ctx_run(measure, |c| w.on_response(2, &half, t0, t0 + 3 * MS, c)).unwrap_err();
        assert!(e.contains("BadUserAccessDenied"), "{e}");
        let Some(Request::AddNodes(_)) = w.next(t0 + 12 * MS) else {
            panic!()
        };
        w.on_sent(3);
        ctx_run(measure, |c| {
            w.on_response(3, &added(10), t0, t0 + 13 * MS, c)
        })
        .unwrap();
        assert_eq!(clock.adds_done_ns.load(Ordering::Relaxed), t0 + 13 * MS);
        // The deletions, then the folders'.
        let deleted = |n: usize| {
            Response::DeleteNodes(Box::new(DeleteNodesResponse {
                results: vec![StatusCode::Good; n],
                ..Default::default()
            }))
        };
        for (k, n) in [(4u32, 10usize), (5, 10), (6, 2)] {
            let Some(Request::DeleteNodes(d)) = w.next(t0 + 100 * MS) else {
                panic!("step {k}")
            };
            w.on_sent(k);
            assert_eq!(d.nodes_to_delete.len(), n);
            assert!(d.nodes_to_delete[0].delete_target_references);
            ctx_run(measure, |c| {
                w.on_response(k, &deleted(n), t0, t0 + 101 * MS, c)
            })
            .unwrap();
        }
        assert_eq!(clock.churn_end_ns.load(Ordering::Relaxed), t0 + 101 * MS);
        assert_eq!(w.deadline(), None);
        assert!(w.next(t0 + 200 * MS).is_none());
        let st = stats.lock().unwrap().clone();
        assert_eq!(
            (
                st.folders_added,
                st.variables_added,
                st.variables_deleted,
                st.folders_deleted,
                st.errors
            ),
            (2, 19, 20, 2, 1)
        );
        assert_eq!((st.steps_done, st.steps), (6, 6));
        assert_eq!(st.add_request_ns.len(), 3);
        assert_eq!(st.delete_request_ns, vec![101 * MS; 3]);
        // A wrong answer is an error too.
        assert!(w.count(0, &deleted(2), 0).is_err());
    }

    #[test]
    fn the_churn_session_watches_its_first_variables_go() {
        use uaring_core::types::{Array, BuiltinType};
        const MS: u64 = 1_000_000;
        let clock = Arc::new(ChurnClock::default());
        let stats = Arc::new(Mutex::new(ChurnStats::default()));
        let spec = ChurnSpec {
            nodes: 20,
            batch: 10,
            rate: 0.0,
            quiet_ns: 0,
        };
        let mut w = ChurnWork::new(spec, clock.clone(), stats.clone());
        // Setup: the NamespaceArray, then the watching subscription.
        assert!(matches!(w.setup(0, None), Ok(Some(Request::Read(_)))));
        let uris = Variant::Array(Box::new(
            Array::new(
                BuiltinType::String,
                [
                    "http://opcfoundation.org/UA/",
                    "urn:x",
                    crate::push::PLANT_NAMESPACE_URI,
                ]
                .iter()
                .map(|u| Variant::String((*u).into()))
                .collect(),
            )
            .unwrap(),
        ));
        let ns = Response::Read(Box::new(ReadResponse {
            results: vec![DataValue::new(uris)],
            ..Default::default()
        }));
        assert!(matches!(
            w.setup(1, Some(&ns)),
            Ok(Some(Request::CreateSubscription(_)))
        ));
        let sub = Response::CreateSubscription(Box::new(CreateSubscriptionResponse {
            subscription_id: 9,
            ..Default::default()
        }));
        assert!(matches!(w.setup(2, Some(&sub)), Ok(None)));
        assert_eq!((w.ns, w.sub_id), (2, 9));
        let measure = crate::uring::PHASE_MEASURE;
        let mut id = 0u32;
        let mut send = |w: &mut ChurnWork, r: Vec<Request>| -> Vec<(u32, Request)> {
            r.into_iter()
                .map(|r| {
                    id += 1;
                    w.on_sent(id);
                    (id, r)
                })
                .collect()
        };
        assert!(ctx_run(measure, |c| w.on_timer(MS, c)).is_empty());
        let r = ctx_run(measure, |c| w.on_timer(MS, c));
        let sent = send(&mut w, r);
        assert!(
            matches!(sent[..], [(1, Request::AddNodes(_))]),
            "the folders"
        );
        let good_adds = |n: usize| {
            Response::AddNodes(Box::new(AddNodesResponse {
                results: vec![
                    AddNodesResult {
                        status_code: StatusCode::Good,
                        added_node_id: NodeId::NULL,
                    };
                    n
                ],
                ..Default::default()
            }))
        };
        ctx_run(measure, |c| w.on_response(1, &good_adds(2), MS, MS, c)).unwrap();
        let r: Vec<Request> = w.next(MS).into_iter().collect();
        send(&mut w, r);
        ctx_run(measure, |c| w.on_response(2, &good_adds(10), MS, MS, c)).unwrap();
        // V0..V9 exist: the watching items go out beside the next step.
        let r: Vec<Request> = w.next(MS).into_iter().collect();
        let last_adds = send(&mut w, r)[0].0;
        assert_eq!(w.deadline(), Some(0));
        let r = ctx_run(measure, |c| w.on_timer(MS, c));
        let sent = send(&mut w, r);
        let (create_id, Request::CreateMonitoredItems(m)) = &sent[0] else {
            panic!()
        };
        assert_eq!(m.subscription_id, 9);
        assert_eq!(m.items_to_create.len(), WATCHED_ITEMS);
        assert_eq!(
            m.items_to_create[3].item_to_monitor.node_id,
            NodeId::string(2, "Churn.V3")
        );
        let created = Response::CreateMonitoredItems(Box::new(CreateMonitoredItemsResponse {
            results: vec![MonitoredItemCreateResult::default(); WATCHED_ITEMS],
            ..Default::default()
        }));
        ctx_run(measure, |c| w.on_response(*create_id, &created, MS, MS, c)).unwrap();
        let r = ctx_run(measure, |c| w.on_timer(MS, c));
        let publishes = send(&mut w, r);
        assert_eq!(publishes.len(), WATCH_PUBLISHES);
        assert!(publishes
            .iter()
            .all(|(_, r)| matches!(r, Request::Publish(_))));
        let notify = |items: Vec<(u32, Option<StatusCode>)>| {
            let dc = DataChangeNotification {
                monitored_items: items
                    .into_iter()
                    .map(|(h, s)| {
                        let mut v = DataValue::new(Variant::Double(h as f64));
                        v.status = s;
                        MonitoredItemNotification {
                            client_handle: h,
                            value: v,
                        }
                    })
                    .collect(),
                diagnostic_infos: Vec::new(),
            };
            Response::Publish(Box::new(PublishResponse {
                subscription_id: 9,
                notification_message: NotificationMessage {
                    sequence_number: 1,
                    notification_data: vec![ExtensionObject::from_struct(&dc)],
                    ..Default::default()
                },
                ..Default::default()
            }))
        };
        // Values while the variables exist; BadNodeIdUnknown before the deletion is an error.
        let (p1, p2) = (publishes[0].0, publishes[1].0);
        ctx_run(measure, |c| {
            w.on_response(p1, &notify((0..10).map(|h| (h, None)).collect()), MS, MS, c)
        })
        .unwrap();
        let e = ctx_run(measure, |c| {
            w.on_response(
                p2,
                &notify(vec![(4, Some(StatusCode::BadNodeIdUnknown))]),
                MS,
                MS,
                c,
            )
        })
        .unwrap_err();
        assert!(e.contains("before its variable's deletion"), "{e}");
        // Each Publish answer is followed by a Publish that acknowledges it.
        let Some(Request::Publish(p)) = w.next(MS) else {
            panic!()
        };
        assert_eq!(p.subscription_acknowledgements.len(), 2);
        let p3 = send(&mut w, vec![Request::Publish(p)])[0].0;
        // The last adds, then the deletion of V0..V9's batch goes out: they may report gone.
        ctx_run(measure, |c| {
            w.on_response(last_adds, &good_adds(10), MS, MS, c)
        })
        .unwrap();
        let r: Vec<Request> = w.next(MS).into_iter().collect();
        let del = send(&mut w, r);
        assert!(matches!(del[..], [(_, Request::DeleteNodes(_))]));
        ctx_run(measure, |c| {
            w.on_response(
                p3,
                &notify(vec![
                    (4, Some(StatusCode::BadNodeIdUnknown)),
                    (4, Some(StatusCode::BadNodeIdUnknown)),
                    (5, Some(StatusCode::BadNodeIdUnknown)),
                ]),
                MS,
                MS,
                c,
            )
        })
        .unwrap();
        let st = stats.lock().unwrap().clone();
        assert_eq!(st.watched_items, WATCHED_ITEMS as u64);
        assert_eq!(st.watched_items_deleted, 2, "each item once");
        assert_eq!(st.watched_values, 10);
        assert_eq!(st.errors, 1);
    }

    #[test]
    fn readers_file_reads_and_notifications_by_phase() {
        const MS: u64 = 1_000_000;
        let clock = Arc::new(ChurnClock::default());
        let phases = Arc::new(Mutex::new(ReaderPhases::default()));
        let spec = ReaderSpec {
            variables: 100,
            per_request: 1,
            inflight: 2,
            reads_per_s: 0.0,
            items: 3,
            sampling_ms: 100.0,
            publishing_ms: 500.0,
        };
        let mut w = ReaderWork::new(spec, 1, 10, clock.clone(), phases.clone());
        w.ns = 2;
        w.spread.set_namespace(2);
        let Request::CreateMonitoredItems(m) = w.create_items() else {
            panic!()
        };
        let ids: Vec<NodeId> = m
            .items_to_create
            .iter()
            .map(|i| i.item_to_monitor.node_id.clone())
            .collect();
        assert_eq!(
            ids,
            vec![plant_node(2, 3), plant_node(2, 4), plant_node(2, 5)]
        );
        // The start: the Publish requests, then the closed loop's Reads.
        assert_eq!(w.initial(), publish_inflight(1) + 2);
        let mut id = 0;
        for k in 0..w.initial() {
            let r = w.next(0).unwrap();
            assert_eq!(
                matches!(r, Request::Publish(_)),
                k < publish_inflight(1),
                "request {k}"
            );
            id += 1;
            w.on_sent(id);
        }
        let read_ok = Response::Read(Box::new(ReadResponse {
            results: vec![DataValue::new(Variant::Double(3.0))],
            ..Default::default()
        }));
        let measure = crate::uring::PHASE_MEASURE;
        // A Read answered in the quiet part, one during the churn.
        let first_read = publish_inflight(1) as u32 + 1;
        ctx_run(measure, |c| {
            w.on_response(first_read, &read_ok, 0, 2 * MS, c)
        })
        .unwrap();
        assert!(matches!(w.next(2 * MS), Some(Request::Read(_))));
        w.on_sent(100);
        ChurnClock::mark(&clock.churn_start_ns, 10 * MS);
        ctx_run(measure, |c| {
            w.on_response(first_read + 1, &read_ok, 10 * MS, 15 * MS, c)
        })
        .unwrap();
        // A Publish answer during the churn: two good values, one Bad.
        let item = |h: u32, v: DataValue| MonitoredItemNotification {
            client_handle: h,
            value: v,
        };
        let mut bad = DataValue::new(Variant::Double(1.0));
        bad.status = Some(StatusCode::BadNodeIdUnknown);
        let dc = DataChangeNotification {
            monitored_items: vec![
                item(0, DataValue::new(Variant::Double(1.0))),
                item(1, DataValue::new(Variant::Double(2.0))),
                item(2, bad),
            ],
            diagnostic_infos: Vec::new(),
        };
        let publish = Response::Publish(Box::new(PublishResponse {
            subscription_id: 7,
            notification_message: NotificationMessage {
                sequence_number: 4,
                notification_data: vec![ExtensionObject::from_struct(&dc)],
                ..Default::default()
            },
            ..Default::default()
        }));
        let e = ctx_run(measure, |c| w.on_response(1, &publish, 0, 16 * MS, c)).unwrap_err();
        assert!(e.contains("BadNodeIdUnknown"), "{e}");
        assert!(
            matches!(w.next(16 * MS), Some(Request::Publish(p)) if p.subscription_acknowledgements.len() == 1),
            "a Publish answer is followed by a Publish that acknowledges it"
        );
        // A Read answered with a wrong value after the churn.
        ChurnClock::mark(&clock.churn_end_ns, 20 * MS);
        let read_bad = Response::Read(Box::new(ReadResponse {
            results: vec![DataValue::new(Variant::Int32(3))],
            ..Default::default()
        }));
        assert!(ctx_run(measure, |c| w.on_response(100, &read_bad, 0, 21 * MS, c)).is_err());
        assert!(
            ctx_run(measure, |c| w.on_response(999, &read_ok, 0, 21 * MS, c)).is_err(),
            "not in flight"
        );
        let p = phases.lock().unwrap();
        assert_eq!(p.reads[0].len(), 1);
        assert_eq!(p.reads[1].len(), 1);
        assert_eq!(p.reads[1].max(), p.reads[1].highest_equivalent(5 * MS));
        assert_eq!(p.notifications, [0, 2, 0]);
        assert_eq!(p.subscription_errors, [0, 1, 0]);
        assert_eq!(p.read_errors, [0, 0, 1]);
        assert!(p.first_error.as_deref().unwrap().starts_with("churn: "));
    }

    #[test]
    fn paced_readers_send_what_is_due_within_the_cap() {
        const MS: u64 = 1_000_000;
        let spec = ReaderSpec {
            variables: 10,
            per_request: 1,
            inflight: 1,
            reads_per_s: 1000.0,
            items: 1,
            sampling_ms: 100.0,
            publishing_ms: 500.0,
        };
        let clock = Arc::new(ChurnClock::default());
        let mut w = ReaderWork::new(spec, 0, 1, clock, Arc::default());
        assert_eq!(
            w.initial(),
            publish_inflight(1),
            "no Read before the schedule"
        );
        for id in 1..=w.initial() as u32 {
            assert!(matches!(w.next(0), Some(Request::Publish(_))));
            w.on_sent(id);
        }
        assert_eq!(w.deadline(), Some(0));
        assert!(ctx_run(crate::uring::PHASE_WARMUP, |c| w.on_timer(MS / 2, c)).is_empty());
        assert_eq!(w.deadline(), Some(MS));
        let r = ctx_run(crate::uring::PHASE_WARMUP, |c| w.on_timer(3 * MS, c));
        assert_eq!(r.len(), 1, "the cap of one");
        w.on_sent(50);
        assert_eq!(
            w.deadline(),
            None,
            "at the cap the answer sends what is due"
        );
        let read_ok = Response::Read(Box::new(ReadResponse {
            results: vec![DataValue::new(Variant::Double(0.0))],
            ..Default::default()
        }));
        ctx_run(crate::uring::PHASE_WARMUP, |c| {
            w.on_response(50, &read_ok, 0, 3 * MS, c)
        })
        .unwrap();
        assert!(
            matches!(w.next(3 * MS), Some(Request::Read(_))),
            "the Read due at 2 ms, late"
        );
    }
}
