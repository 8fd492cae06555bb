//! Read and Write against the built address space.

use std::sync::Arc;

use uaring_core::address_space::build::ns1::demo_types;
use uaring_core::generated::messages::Response;
use uaring_core::generated::types::{
    NodeClass, ReadRequest, ReadValueId, TimestampsToReturn, WriteRequest, WriteValue,
};
use uaring_core::server::config::ServerConfig;
use uaring_core::server::shared::ServerShared;
use uaring_core::services::attribute::{self, attr};
use uaring_core::*;

fn now() -> Now {
    Now::new(1_000_000_000, DateTime::from_unix_nanos(1_700_000_000_000_000_000))
}

fn shared() -> Arc<ServerShared> {
    ServerShared::new(ServerConfig::default(), now()).unwrap()
}

fn rv(id: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId { node_id: id, attribute_id, ..Default::default() }
}

fn read_one(s: &ServerShared, id: NodeId, attribute_id: u32) -> DataValue {
    read_with(s, rv(id, attribute_id), TimestampsToReturn::Both)
}

fn read_with(s: &ServerShared, r: ReadValueId, ttr: TimestampsToReturn) -> DataValue {
    let req = ReadRequest { timestamps_to_return: ttr, nodes_to_read: vec![r], ..Default::default() };
    match attribute::read(s, &req, now()) {
        Response::Read(r) => r.results.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    }
}

fn write_one(s: &ServerShared, id: NodeId, range: &str, dv: DataValue) -> StatusCode {
    let req = WriteRequest {
        nodes_to_write: vec![WriteValue { node_id: id, attribute_id: attr::VALUE, index_range: range.into(), value: dv }],
        ..Default::default()
    };
    match attribute::write(s, &req, now()) {
        Response::Write(r) => r.results[0],
        other => panic!("{other:?}"),
    }
}

fn bench(i: u32) -> NodeId {
    NodeId::numeric(1, 1001 + i)
}

#[test]
fn benchmark_values_read_and_write() {
    let s = shared();
    for i in 0..100 {
        let dv = read_one(&s, bench(i), attr::VALUE);
        assert_eq!(dv.value, Variant::Int32(i as i32));
        assert_eq!(read_one(&s, bench(i), attr::BROWSE_NAME).value, Variant::from(QualifiedName::new(1, &format!("BenchmarkValue{i}"))));
    }
    assert_eq!(write_one(&s, bench(5), "", DataValue::new(Variant::Int32(-9))), StatusCode::Good);
    assert_eq!(read_one(&s, bench(5), attr::VALUE).value, Variant::Int32(-9));
    assert_eq!(write_one(&s, bench(5), "", DataValue::new(Variant::Double(1.0))), StatusCode::BadTypeMismatch);
    let arr = Variant::array(BuiltinType::Int32, vec![Variant::Int32(1)]).unwrap();
    assert_eq!(write_one(&s, bench(5), "", DataValue::new(arr)), StatusCode::BadTypeMismatch);
    assert_eq!(write_one(&s, bench(5), "", DataValue::new(Variant::Empty)), StatusCode::BadTypeMismatch);
    assert_eq!(read_one(&s, bench(5), attr::VALUE).value, Variant::Int32(-9));
}

#[test]
fn demo_static_accepts_its_type() {
    let s = shared();
    for (name, _, v) in demo_types() {
        let id = NodeId::string(1, format!("Demo.Static.{name}"));
        assert_eq!(read_one(&s, id.clone(), attr::VALUE).value, v, "{name}");
        assert_eq!(write_one(&s, id.clone(), "", DataValue::new(v.clone())), StatusCode::Good, "{name}");
        let aid = NodeId::string(1, format!("Demo.Static.Arrays.{name}"));
        let a = read_one(&s, aid.clone(), attr::VALUE).value;
        assert!(a.is_array(), "{name}");
        assert_eq!(write_one(&s, aid, "", DataValue::new(a)), StatusCode::Good, "{name}");
    }
    let node_class = read_one(&s, NodeId::string(1, "Demo"), attr::NODE_CLASS).value;
    assert_eq!(node_class, Variant::Int32(NodeClass::Object.0));
}
