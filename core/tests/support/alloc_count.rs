//! Heap allocations per request over the whole server path: request chunk bytes in →
//! ServerConnection → the real ShardState and services → response chunk bytes out, with a
//! session activated by core's own client. The global allocator counts only the allocations
//! of the thread that switched counting on, so tests running beside it do not disturb it.
//! Used by tests/allocations.rs (asserts) and benches/allocations.rs (prints the table).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use uaring_core::generated::messages::Request;
use uaring_core::generated::types::{
    BrowseDescription, BrowseDirection, BrowseRequest, ReadRequest, ReadValueId,
    TimestampsToReturn, WriteRequest, WriteValue,
};
use uaring_core::server::connection::ConnStatus;
use uaring_core::types::{DataValue, DateTime, NodeId, Variant};
use uaring_core::Now;

pub struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn note(size: usize) {
    // try_with: the thread-locals may be gone while a thread exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            let _ = BYTES.try_with(|b| b.set(b.get() + size as u64));
        }
    });
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only const-initialised
// thread-locals, which do not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note(l.size());
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(p, l, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Runs `f` and returns the (allocations, bytes) it made on this thread.
pub fn count<R>(f: impl FnOnce() -> R) -> (R, u64, u64) {
    COUNT.with(|c| c.set(0));
    BYTES.with(|b| b.set(0));
    ON.with(|on| on.set(true));
    let r = f();
    ON.with(|on| on.set(false));
    (r, COUNT.with(|c| c.get()), BYTES.with(|b| b.get()))
}

fn now() -> Now {
    Now::new(1_000_000_000, DateTime(133_000_000_000_000_000))
}

#[path = "net.rs"]
mod net;
pub use net::Net;

impl Net {
    /// A client and a server connection on a real shard, with an activated anonymous session.
    pub fn with_session() -> Net {
        let mut n = Net::connected(now());
        n.activate_anonymous_session(600_000.0, 0);
        n
    }

    /// Feeds `requests` one chunk at a time and returns (allocations, bytes) per request
    /// over the last `measured` of them (the ones before warm the buffers up). Checks that
    /// every response decodes and is Good.
    pub fn allocations_per_request(
        &mut self,
        make: impl Fn() -> Request,
        total: usize,
        measured: usize,
    ) -> (f64, f64) {
        let chunks: Vec<Vec<u8>> = (0..total)
            .map(|_| {
                let mut v = Vec::new();
                self.client
                    .send_request(make(), now(), &mut v)
                    .expect("send");
                v
            })
            .collect();
        let mut out = Vec::with_capacity(64 * 1024);
        let (mut allocs, mut bytes) = (0, 0);
        for (i, chunk) in chunks.iter().enumerate() {
            out.clear();
            let (status, a, b) =
                count(|| self.server.on_recv(&mut self.shard, now(), chunk, &mut out));
            assert_eq!(status, ConnStatus::Open);
            if i >= total - measured {
                allocs += a;
                bytes += b;
            }
            let mut sink = Vec::new();
            self.client
                .on_recv(now(), &out, &mut sink)
                .expect("client decodes the response");
            let (_, resp) = self
                .client
                .poll_response()
                .expect("one response per request");
            assert!(resp.response_header().service_result.is_good(), "{resp:?}");
        }
        (
            allocs as f64 / measured as f64,
            bytes as f64 / measured as f64,
        )
    }
}

/// A Read of `n` benchmark variables' values (ns=1;i=1001..).
pub fn read(n: u32) -> Request {
    Request::Read(Box::new(ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: (0..n)
            .map(|i| ReadValueId {
                node_id: NodeId::numeric(1, 1001 + i),
                attribute_id: 13,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

/// A Write of `n` benchmark variables (Int32 values).
pub fn write(n: u32) -> Request {
    Request::Write(Box::new(WriteRequest {
        nodes_to_write: (0..n)
            .map(|i| WriteValue {
                node_id: NodeId::numeric(1, 1001 + i),
                attribute_id: 13,
                value: DataValue {
                    value: Variant::Int32(i as i32),
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

/// A Browse of the Objects folder's forward hierarchical references.
pub fn browse() -> Request {
    Request::Browse(Box::new(BrowseRequest {
        nodes_to_browse: vec![BrowseDescription {
            node_id: NodeId::ns0(85),
            browse_direction: BrowseDirection::Forward,
            reference_type_id: NodeId::ns0(33),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 63,
        }],
        ..Default::default()
    }))
}
