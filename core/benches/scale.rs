//! Plant scale on one shard (issue 29): what a node and a monitored item cost in memory, and
//! whether creating, deleting and sampling items stays proportional to the work asked for as
//! the server fills up. Prints a table; no criterion (each step runs once, on a big state).
//!
//! * **Memory per node**: the heap the address space holds (live bytes: allocated less freed,
//!   counted by this bench's global allocator) for N Double Variables with a stored value
//!   (`ns=1;s=Plant.V<i>`, organized by one folder), less the same server without them;
//!   and for N folders.
//! * **Monitored items**: one session, one subscription (publishing 1 s), items on distinct
//!   counter Variables at a sampling interval of 1 s, queue 1, created in CreateMonitoredItems
//!   calls of `BATCH` items up to `ITEMS`. For each decile: the median and the slowest call
//!   (µs per item; the slowest is where a table of the shard doubled), the live heap per item
//!   (tables included, so it steps with their doublings) when created (each holding its
//!   initial value) and after two sampling passes (each holding a newer one: the figure that
//!   stays), one sampling pass over every item (ns per item sampled), and at the end DeleteMonitoredItems of one batch with all the others
//!   still there; ModifyMonitoredItems and SetMonitoringMode of that batch too.
//!
//! * **Churn** (`SCALE_PART=churn` only): `SCALE_CYCLES` (10) times, `SCALE_NODES` uniquely
//!   named Double Variables added in one edit and removed in the next; the node store's bytes,
//!   the live heap and the node index bound after each cycle (flat when removal gives back
//!   everything; see docs/Architecture.md, "The node store").
//!
//! `cargo bench -p uaring-core --bench scale` (ITEMS = 1,000,000; `SCALE_ITEMS=N` for fewer;
//! `SCALE_PART=nodes|items|churn` for one part, `SCALE_NODES=N` nodes of each kind, 100,000
//! unless set).
//! Run on a quiet machine: each figure is one measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use uaring_core::address_space::build::make::{folder, variable, WRITABLE};
use uaring_core::address_space::ids;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::shared::ServerShared;
use uaring_core::types::{DataValue, QualifiedName, Variant};
use uaring_core::{NodeId, Now};

#[path = "../tests/support/content.rs"]
mod content;
#[path = "support/mod.rs"]
mod support;

use support::{ctx, start};

/// Live heap bytes of the whole process (allocated less freed).
static LIVE: AtomicI64 = AtomicI64::new(0);

struct Live;

// SAFETY: forwards to the system allocator; the bookkeeping is one atomic add.
unsafe impl GlobalAlloc for Live {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - l.size() as i64, Ordering::Relaxed);
        System.realloc(p, l, new_size)
    }
}

#[global_allocator]
static GLOBAL: Live = Live;

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

const BATCH: u32 = 10_000;

fn config() -> ServerConfig {
    let mut c = ServerConfig::default();
    c.operation_limits.max_monitored_items_per_call = BATCH;
    c.subscriptions.max_monitored_items_per_subscription = 10_000_000;
    c.subscriptions.max_monitored_items_per_shard = 10_000_000;
    c
}

/// The live heap of a server with the contract's content and `extend`'s nodes (the server
/// dropped before the next is built), and the seconds its build took.
fn server_bytes_timed(
    extend: impl FnMut(
        &mut uaring_core::address_space::build::AddressSpaceBuilder,
    ) -> Result<(), String>,
) -> (i64, f64) {
    let before = live();
    let t = Instant::now();
    let s = content::new_and(config(), start(), extend).expect("server");
    let secs = t.elapsed().as_secs_f64();
    let bytes = live() - before;
    drop(s);
    (bytes, secs)
}

fn server_bytes(
    extend: impl FnMut(
        &mut uaring_core::address_space::build::AddressSpaceBuilder,
    ) -> Result<(), String>,
) -> i64 {
    server_bytes_timed(extend).0
}

fn node_memory(n: u32) {
    let base = server_bytes(|_| Ok(()));
    let (vars, vars_s) = server_bytes_timed(|b| support::add_plant(b, n, WRITABLE, ids::ORGANIZES));
    let numeric = server_bytes(|b| {
        support::add_plant_named(b, n, WRITABLE, ids::ORGANIZES, |i| {
            NodeId::numeric(1, 100_000 + i)
        })
    });
    let folders = server_bytes(|b| {
        b.reserve(n as usize);
        for i in 0..n {
            b.add(folder(
                NodeId::string(1, format!("Plant.F{i}")),
                QualifiedName::new(1, &format!("F{i}")),
                NodeId::ns0(ids::OBJECTS_FOLDER),
            ))?;
        }
        Ok(())
    });
    println!("| memory per node ({n} nodes) | bytes |");
    println!("|---|---:|");
    println!(
        "| Double Variable with a stored value, `s=Plant.V<i>` | {:.0} |",
        (vars - base) as f64 / n as f64
    );
    println!(
        "| Double Variable with a stored value, `i=<100000 + i>` (a dense id) | {:.0} |",
        (numeric - base) as f64 / n as f64
    );
    println!(
        "| Folder (Object), `s=Plant.F<i>` | {:.0} |",
        (folders - base) as f64 / n as f64
    );
    println!();
    println!("Building the server with the {n} Double Variables: {vars_s:.2} s (the whole server, namespace 0 included).");
    println!();
}

struct Shard {
    state: ServiceState,
    now: Now,
    token: NodeId,
    handle: u32,
    sub: u32,
}

impl Shard {
    fn header(&mut self) -> RequestHeader {
        self.handle += 1;
        RequestHeader {
            authentication_token: self.token.clone(),
            request_handle: self.handle,
            timeout_hint: 0,
            ..Default::default()
        }
    }

    fn call(&mut self, r: Request) -> Response {
        dispatch(&mut self.state, &ctx(), r, self.now)
    }

    fn new(counters: u32) -> Shard {
        let shared: Arc<ServerShared> =
            content::new_with(config(), start(), &content::Content::counters(counters))
                .expect("server");
        let shard = ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let mut state = shard;
        let token = support::open_session(&mut state, start());
        let mut s = Shard {
            state,
            now: start(),
            token,
            handle: 1,
            sub: 0,
        };
        let hd = s.header();
        let Response::CreateSubscription(sub) = s.call(Request::CreateSubscription(Box::new(
            CreateSubscriptionRequest {
                request_header: hd,
                requested_publishing_interval: 1000.0,
                requested_lifetime_count: 1_000_000,
                requested_max_keep_alive_count: 1000,
                publishing_enabled: true,
                ..Default::default()
            },
        ))) else {
            panic!("CreateSubscription")
        };
        s.sub = sub.subscription_id;
        s
    }

    /// Creates items on counters `first..first + n` (1 s, queue 1); their server handles.
    fn create(&mut self, first: u32, n: u32) -> Vec<u32> {
        let items = (first..first + n)
            .map(|i| MonitoredItemCreateRequest {
                item_to_monitor: ReadValueId {
                    node_id: NodeId::numeric(1, i + 1),
                    attribute_id: 13,
                    ..Default::default()
                },
                monitoring_mode: MonitoringMode::Reporting,
                requested_parameters: MonitoringParameters {
                    client_handle: i,
                    sampling_interval: 1000.0,
                    queue_size: 1,
                    discard_oldest: true,
                    ..Default::default()
                },
            })
            .collect();
        let hd = self.header();
        let sub = self.sub;
        let Response::CreateMonitoredItems(m) = self.call(Request::CreateMonitoredItems(Box::new(
            CreateMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_create: items,
            },
        ))) else {
            panic!("CreateMonitoredItems")
        };
        assert!(m.results.iter().all(|x| x.status_code.is_good()));
        m.results.iter().map(|r| r.monitored_item_id).collect()
    }

    fn delete(&mut self, ids: Vec<u32>) {
        let hd = self.header();
        let sub = self.sub;
        let Response::DeleteMonitoredItems(d) = self.call(Request::DeleteMonitoredItems(Box::new(
            DeleteMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                monitored_item_ids: ids,
            },
        ))) else {
            panic!("DeleteMonitoredItems")
        };
        assert!(d.results.iter().all(|s| s.is_good()));
    }

    /// ModifyMonitoredItems of `ids` (sampling 2 s, queue 1).
    fn modify(&mut self, ids: &[u32]) {
        let hd = self.header();
        let sub = self.sub;
        let items = ids
            .iter()
            .map(|&id| MonitoredItemModifyRequest {
                monitored_item_id: id,
                requested_parameters: MonitoringParameters {
                    client_handle: id,
                    sampling_interval: 2000.0,
                    queue_size: 1,
                    discard_oldest: true,
                    ..Default::default()
                },
            })
            .collect();
        let Response::ModifyMonitoredItems(m) = self.call(Request::ModifyMonitoredItems(Box::new(
            ModifyMonitoredItemsRequest {
                request_header: hd,
                subscription_id: sub,
                timestamps_to_return: TimestampsToReturn::Both,
                items_to_modify: items,
            },
        ))) else {
            panic!("ModifyMonitoredItems")
        };
        assert!(m.results.iter().all(|x| x.status_code.is_good()));
    }

    /// SetMonitoringMode of `ids`.
    fn set_mode(&mut self, ids: &[u32], mode: MonitoringMode) {
        let hd = self.header();
        let sub = self.sub;
        let Response::SetMonitoringMode(m) = self.call(Request::SetMonitoringMode(Box::new(
            SetMonitoringModeRequest {
                request_header: hd,
                subscription_id: sub,
                monitoring_mode: mode,
                monitored_item_ids: ids.to_vec(),
            },
        ))) else {
            panic!("SetMonitoringMode")
        };
        assert!(m.results.iter().all(|x| x.is_good()));
    }

    /// One second on: every item samples once. Its time.
    fn sampling_pass(&mut self) -> std::time::Duration {
        self.now = self.now.advance_ns(1_000_000_000);
        let t = Instant::now();
        self.state.on_timer(self.now);
        t.elapsed()
    }
}

fn items_at_scale(total: u32) {
    let mut s = Shard::new(total);
    println!("| items on the server | CreateMonitoredItems of {BATCH}: µs per item, median (max) of the calls since the row above | live heap per item, bytes | the same after two sampling passes | one sampling pass: ns per item |");
    println!("|---:|---:|---:|---:|---:|");
    let step = (total / 10).max(BATCH);
    let mut created = 0u32;
    let mut handles = Vec::new();
    let mut calls: Vec<f64> = Vec::new();
    let before = live();
    while created < total {
        let n = BATCH.min(total - created);
        let t = Instant::now();
        handles.push(s.create(created, n));
        calls.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
        created += n;
        if created == n || created.is_multiple_of(step) || created == total {
            let per_item = (live() - before) as f64 / created as f64;
            calls.sort_by(f64::total_cmp);
            let median = calls[calls.len() / 2];
            let max = calls[calls.len() - 1];
            calls.clear();
            s.sampling_pass(); // the first pass after new items warms what they added
            let pass = s.sampling_pass();
            // Every item has sampled a new counter value and holds it in its queue of one.
            let sampled = (live() - before) as f64 / created as f64;
            println!(
                "| {created} | {median:.2} ({max:.2}) | {per_item:.0} | {sampled:.0} | {:.0} |",
                pass.as_secs_f64() * 1e9 / created as f64
            );
        }
    }
    // Modifying, disabling and enabling, and deleting one batch (the first created) with
    // all the others there.
    let first = handles.remove(0);
    let n = first.len();
    let per_item = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let t = Instant::now();
    s.modify(&first);
    let modify = per_item(t);
    let t = Instant::now();
    s.set_mode(&first, MonitoringMode::Disabled);
    s.set_mode(&first, MonitoringMode::Reporting);
    let mode = per_item(t) / 2.0;
    println!();
    println!(
        "ModifyMonitoredItems of {n} with {} others on the server: {modify:.2} µs per item; SetMonitoringMode: {mode:.2} µs per item",
        created as usize - n
    );
    let t = Instant::now();
    s.delete(first);
    println!(
        "DeleteMonitoredItems of {n} with {} others on the server: {:.2} µs per item",
        created as usize - n,
        t.elapsed().as_secs_f64() * 1e6 / n as f64
    );
    println!();
}

/// Churn: `cycles` times, one edit adds `n` Double Variables with names never used before
/// (`ns=1;s=Churn.<cycle>.<i>`, organized by the Objects folder) and the next edit removes
/// them. After each cycle: the node store's bytes (`AddressSpace::store_bytes`), the live heap
/// and the node index bound, against the server before the first cycle. With no shard
/// holding an older version, removed nodes' indexes and value cells are reused at once; what
/// still grows per cycle is what removal does not give back.
fn churn(n: u32, cycles: u32) {
    let shared = content::new_and(config(), start(), |_| Ok(())).expect("server");
    let model = &shared.model;
    let base_store = model.load().store_bytes() as i64;
    let base_live = live();
    let base_bound = model.load().index_bound();
    println!("| churn cycle ({n} uniquely named variables added, then removed) | node store bytes, above the start | live heap bytes, above the start | node index bound, above the start |");
    println!("|---:|---:|---:|---:|");
    for cycle in 0..cycles {
        let mut edit = model.edit();
        for i in 0..n {
            let name = format!("Churn.{cycle}.{i}");
            edit.add_node(variable(
                NodeId::string(1, &name),
                QualifiedName::new(1, &name),
                NodeId::ns0(11),
                -1,
                Vec::new(),
                DataValue {
                    value: Variant::Double(i as f64),
                    ..Default::default()
                },
                WRITABLE,
                0.0,
                Some((NodeId::ns0(ids::OBJECTS_FOLDER), ids::ORGANIZES)),
            ))
            .expect("add");
        }
        model.commit(edit).expect("commit the adds");
        let mut edit = model.edit();
        for i in 0..n {
            edit.delete_node(&NodeId::string(1, format!("Churn.{cycle}.{i}")), true)
                .expect("delete");
        }
        model.commit(edit).expect("commit the removals");
        let space = model.load();
        println!(
            "| {} | {} | {} | {} |",
            cycle + 1,
            space.store_bytes() as i64 - base_store,
            live() - base_live,
            i64::from(space.index_bound()) - i64::from(base_bound)
        );
    }
    println!();
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read.
    let total: u32 = std::env::var("SCALE_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    // SCALE_PART=nodes: the memory per node only (SCALE_NODES of each kind, 100,000 unless
    // set); SCALE_PART=items: the items only.
    let part = std::env::var("SCALE_PART").unwrap_or_default();
    let nodes: u32 = std::env::var("SCALE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    if part != "items" && part != "churn" {
        node_memory(nodes);
    }
    if part != "nodes" && part != "churn" {
        items_at_scale(total);
    }
    if part == "churn" {
        let cycles = std::env::var("SCALE_CYCLES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10);
        churn(nodes, cycles);
    }
}
