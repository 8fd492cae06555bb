//! Instructions per request over the whole server path, for callgrind (`core/benches/callgrind.sh`
//! runs it and prints the figures). The set-up of server_path.rs (request chunk bytes in →
//! ServerConnection → the real ServiceState and services → response chunk bytes out, an
//! activated session), without criterion: one run of `count` requests fed in batches of
//! `batch` chunks, one `on_recv` per batch, then exit. Callgrind counts only inside `on_recv`
//! (`--toggle-collect`), and the script subtracts a short run from a long one, so the set-up
//! (building the address space, the session) and the first batch's warm-up cancel.
//!
//! `callgrind <workload> <count> [--batch B] [--plant P]`, workloads:
//! * `read`: a Read of one Int32 value (`ns=1;i=1001`, the benchmark contract's first);
//! * `read10`: a Read of ten of them;
//! * `write`: a Write of one;
//! * `browse`: a Browse of the Objects folder (forward hierarchical references);
//! * `read-plant`, `browse-plant`: a Read of the Value of, or a Browse of, one of the `P`
//!   Double Variables `ns=1;s=Plant.V<i>` (organized by the folder `ns=1;s=Plant`), each
//!   request another one, spread over all `P` (with `--plant P`; the node store's cost at
//!   `P` = 100 against `P` = 1,000,000).
//!
//! The response of the first batch is decoded and checked (every request answered Good).

#[path = "../tests/support/alloc_count.rs"]
#[allow(dead_code)]
mod alloc_count;

#[path = "support/mod.rs"]
mod support;

use alloc_count::{browse, read, write, Net};
use support::plant_id;
use uaring_core::address_space::build::make::WRITABLE;
use uaring_core::address_space::ids;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    BrowseDescription, BrowseDirection, BrowseRequest, ReadRequest, ReadValueId, TimestampsToReturn,
};
use uaring_core::server::connection::ConnStatus;
use uaring_core::types::NodeId;

fn read_plant(i: u32) -> Request {
    Request::Read(Box::new(ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: vec![ReadValueId {
            node_id: plant_id(i),
            attribute_id: 13,
            ..Default::default()
        }],
        ..Default::default()
    }))
}

fn browse_plant(i: u32) -> Request {
    Request::Browse(Box::new(BrowseRequest {
        nodes_to_browse: vec![BrowseDescription {
            node_id: plant_id(i),
            browse_direction: BrowseDirection::Both,
            reference_type_id: NodeId::ns0(ids::REFERENCES),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 63,
        }],
        ..Default::default()
    }))
}

fn arg(args: &[String], name: &str) -> Option<u32> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let usage = "callgrind <read|read10|write|browse|read-plant|browse-plant> <count> [--batch B] [--plant P]";
    let workload = args.first().expect(usage).clone();
    let count: u32 = args.get(1).and_then(|c| c.parse().ok()).expect(usage);
    let batch = arg(&args, "--batch").unwrap_or(100).max(1);
    let plant = arg(&args, "--plant").unwrap_or(0);
    if workload.ends_with("-plant") {
        assert!(plant > 0, "{workload} needs --plant P");
    }

    let mut net = if plant > 0 {
        Net::with_session_and(uaring_core::config::ServerConfig::default(), |b| {
            support::add_plant(b, plant, WRITABLE, ids::ORGANIZES)
        })
    } else {
        Net::with_session()
    };

    // The requests, encoded once each (like the load client). The plant workloads cycle over
    // up to 4,096 different nodes spread evenly over the plant.
    let distinct = if workload.ends_with("-plant") {
        plant.min(4096)
    } else {
        1
    };
    let token = net.client.authentication_token().clone();
    let bodies: Vec<Vec<u8>> = (0..distinct)
        .map(|k| {
            let i = (k as u64 * plant as u64 / distinct as u64) as u32;
            let mut req = match workload.as_str() {
                "read" => read(1),
                "read10" => read(10),
                "write" => write(1),
                "browse" => browse(),
                "read-plant" => read_plant(i),
                "browse-plant" => browse_plant(i),
                _ => panic!("{usage}"),
            };
            req.request_header_mut().authentication_token = token.clone();
            let mut body = Vec::new();
            req.encode_with_type_id(&mut body);
            body
        })
        .collect();

    let mut input = Vec::new();
    let mut out = Vec::with_capacity(1 << 20);
    let mut next = 0usize;
    let mut sent = 0u32;
    let mut first = true;
    while sent < count {
        let n = batch.min(count - sent);
        input.clear();
        for _ in 0..n {
            let body = &bodies[next % bodies.len()];
            next += 1;
            net.client.send_encoded(body, &mut input).expect("send");
        }
        out.clear();
        let st = net
            .server
            .on_recv(&mut net.state, net.now, &input, &mut out);
        assert_eq!(st, ConnStatus::Open);
        if first {
            first = false;
            net.client
                .on_recv(net.now, &out, &mut Vec::new())
                .expect("client decodes the responses");
            let mut got = 0;
            while let Some((_, resp)) = net.client.poll_response() {
                assert!(resp.response_header().service_result.is_good(), "{resp:?}");
                match &resp {
                    Response::Read(r) => {
                        assert!(
                            r.results
                                .iter()
                                .all(|d| d.status.is_none_or(|s| s.is_good())),
                            "{r:?}"
                        )
                    }
                    Response::Write(w) => assert!(w.results.iter().all(|s| s.is_good())),
                    Response::Browse(b) => assert!(b
                        .results
                        .iter()
                        .all(|r| r.status_code.is_good() && !r.references.is_empty())),
                    _ => panic!("{resp:?}"),
                }
                got += 1;
            }
            assert_eq!(got, n);
        }
        sent += n;
    }
    println!("{workload}: {count} requests in batches of {batch}, plant {plant}");
}
