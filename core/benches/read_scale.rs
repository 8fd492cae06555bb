//! Read and Browse at a million nodes against a hundred (issue 29, docs/Scaling.md "Reading
//! a million nodes"): one shard's service path (`dispatch`, an activated session) on a
//! server of N Double Variables `ns=1;s=Plant.V<i>`, the operations stepping far apart over
//! all N (the harness's `scale-nodes` stride), K nodes per request. Prints the time per
//! node for N = 100 and N = `READ_SCALE_NODES` (1,000,000) and their ratio.
//!
//! `cargo bench -p uaring-core --bench read_scale` (`READ_SCALE_ROUNDS=R` repeats each case,
//! best of R kept, 3 unless set). Wall time: run on a quiet machine, or alternate builds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use uaring_core::address_space::ids;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::server::service_state::ServiceState;
use uaring_core::services::dispatch;
use uaring_core::shared::ServerShared;
use uaring_core::NodeId;

#[path = "../tests/support/content.rs"]
mod content;
#[path = "support/mod.rs"]
mod support;

use support::{ctx, start};

/// The harness's stride (`spread_stride`): near n × 0.618, coprime with n.
fn stride(n: usize) -> usize {
    fn gcd(a: usize, b: usize) -> usize {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    if n <= 2 {
        return 1;
    }
    let mut s = ((n as f64) * 0.618_033_988_75) as usize;
    while gcd(s, n) != 1 {
        s += 1;
    }
    s
}

struct Shard {
    state: ServiceState,
    token: NodeId,
    handle: u32,
    n: usize,
    step: usize,
    at: usize,
}

impl Shard {
    fn new(n: u32) -> Shard {
        let mut config = ServerConfig::default();
        config.operation_limits.max_nodes_per_read = 1000;
        config.operation_limits.max_nodes_per_browse = 1000;
        let shared: Arc<ServerShared> = content::new_and(config, start(), |b| {
            support::add_plant(b, n, 1, ids::HAS_COMPONENT)
        })
        .expect("server");
        let mut state = ServiceState::new(
            shared,
            0,
            Box::new(uaring_core::random::ChaCha::from_u64(1)),
        );
        let token = support::open_session(&mut state, start());
        Shard {
            state,
            token,
            handle: 1,
            n: n as usize,
            step: stride(n as usize),
            at: 0,
        }
    }

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
        dispatch(&mut self.state, &ctx(), r, start())
    }

    fn next_id(&mut self) -> NodeId {
        self.at = (self.at + self.step) % self.n;
        support::plant_id(self.at as u32)
    }

    fn request(&mut self, browse: bool, k: usize) -> Request {
        let request_header = self.header();
        if browse {
            Request::Browse(Box::new(BrowseRequest {
                request_header,
                nodes_to_browse: (0..k)
                    .map(|_| BrowseDescription {
                        node_id: self.next_id(),
                        browse_direction: BrowseDirection::Both,
                        include_subtypes: true,
                        result_mask: 63,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }))
        } else {
            Request::Read(Box::new(ReadRequest {
                request_header,
                timestamps_to_return: TimestampsToReturn::Both,
                nodes_to_read: (0..k)
                    .map(|_| ReadValueId {
                        node_id: self.next_id(),
                        attribute_id: 13,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }))
        }
    }

    /// Time per node of `nodes` node operations, `k` per request: requests built 64 at a
    /// time outside the clock, answered inside it, dropped outside it.
    fn run(&mut self, browse: bool, k: usize, nodes: usize) -> f64 {
        let mut spent = Duration::ZERO;
        let mut done = 0;
        while done < nodes {
            let batch: Vec<Request> = (0..64).map(|_| self.request(browse, k)).collect();
            let mut out = Vec::with_capacity(64);
            let t = Instant::now();
            for r in batch {
                out.push(self.call(r));
            }
            spent += t.elapsed();
            for r in &out {
                let ok = match r {
                    Response::Read(r) => r
                        .results
                        .iter()
                        .all(|d| d.status.is_none_or(|s| s.is_good())),
                    Response::Browse(r) => r.results.iter().all(|b| b.status_code.is_good()),
                    _ => false,
                };
                assert!(ok, "{r:?}");
            }
            drop(out);
            done += 64 * k;
        }
        spent.as_nanos() as f64 / done as f64
    }
}

fn main() {
    let big: u32 = std::env::var("READ_SCALE_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("READ_SCALE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut small = Shard::new(100);
    let mut large = Shard::new(big);
    println!("| operation | ns/node at 100 | ns/node at {big} | ratio |");
    println!("|---|---:|---:|---:|");
    for (name, browse, k, nodes) in [
        ("Read, 1 node per request", false, 1, 200_000),
        ("Read, 100 nodes per request", false, 100, 1_000_000),
        ("Browse, 1 node per request", true, 1, 200_000),
        ("Browse, 100 nodes per request", true, 100, 500_000),
    ] {
        let best = |s: &mut Shard| {
            (0..rounds)
                .map(|_| s.run(browse, k, nodes))
                .fold(f64::INFINITY, f64::min)
        };
        let a = best(&mut small);
        let b = best(&mut large);
        println!("| {name} | {a:.1} | {b:.1} | {:.2} |", b / a);
    }
}
