//! `ClientConnection::give_back`: a Read response given back is reused for the next Read
//! responses, which decode exactly as they do without it, whatever their sizes.

mod common;
#[path = "support/net.rs"]
mod net;

use common::t0;
use net::Net;
use uaring_core::client::connection::SPARE_READS_MAX;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{ReadRequest, ReadValueId, TimestampsToReturn};
use uaring_core::types::{NodeId, Variant};

fn read(first: u32, n: u32) -> Request {
    Request::Read(Box::new(ReadRequest {
        timestamps_to_return: TimestampsToReturn::Neither,
        nodes_to_read: (0..n)
            .map(|i| ReadValueId {
                node_id: NodeId::numeric(1, 1001 + first + i),
                attribute_id: 13,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }))
}

fn values(resp: &Response) -> Vec<Variant> {
    let Response::Read(r) = resp else {
        panic!("not a Read response: {resp:?}")
    };
    assert!(r.response_header.service_result.is_good());
    r.results
        .iter()
        .map(|dv| {
            assert!(dv.status_code().is_good());
            dv.value.clone()
        })
        .collect()
}

#[test]
fn read_responses_decode_into_what_was_given_back() {
    let mut net = Net::connected(t0());
    net.activate_anonymous_session(600_000.0, 0);
    // Without a spare: the reference values.
    let fresh: Vec<Vec<Variant>> = [(0, 3), (5, 1), (10, 7)]
        .iter()
        .map(|&(f, n)| values(&net.call(read(f, n))))
        .collect();
    assert_eq!(
        fresh[0],
        vec![Variant::Int32(0), Variant::Int32(1), Variant::Int32(2)]
    );
    // Give back a response with room for 8 results: the next Reads decode into it.
    let big = net.call(read(0, 8));
    let Response::Read(r) = &big else { panic!() };
    let buffer = r.results.as_ptr();
    net.client.give_back(big);
    for (k, &(f, n)) in [(0, 3), (5, 1), (10, 7)].iter().enumerate() {
        let resp = net.call(read(f, n));
        assert_eq!(values(&resp), fresh[k], "Read of {n} from {f}");
        let Response::Read(r) = &resp else { panic!() };
        assert_eq!(
            r.results.as_ptr(),
            buffer,
            "the results were not decoded into the spare"
        );
        net.client.give_back(resp);
    }
    // Another kind of response given back is dropped, and decoding goes on as before.
    let other = net.call(Request::Read(Box::new(ReadRequest {
        nodes_to_read: Vec::new(),
        ..Default::default()
    })));
    assert!(
        !matches!(other, Response::Read(_)),
        "an empty Read is a ServiceFault (BadNothingToDo)"
    );
    net.client.give_back(other);
    assert_eq!(values(&net.call(read(5, 1))), fresh[1]);
}

#[test]
fn spares_are_bounded() {
    let mut net = Net::connected(t0());
    net.activate_anonymous_session(600_000.0, 0);
    let resp = net.call(read(0, 1));
    for _ in 0..SPARE_READS_MAX + 10 {
        net.client.give_back(resp.clone());
    }
    assert_eq!(net.client.spare_reads(), SPARE_READS_MAX);
}
