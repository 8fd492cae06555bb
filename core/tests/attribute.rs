//! Read and Write against the built address space.

#[path = "support/content.rs"]
mod content;
use std::sync::Arc;

use content::demo_types;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::Response;
use uaring_core::generated::types::{
    NodeClass, ReadRequest, ReadValueId, TimestampsToReturn, WriteRequest, WriteValue,
};
use uaring_core::services::attribute::{self, attr};
use uaring_core::shared::ServerShared;
use uaring_core::*;

fn now() -> Now {
    Now::new(
        1_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

fn shared() -> Arc<ServerShared> {
    content::new(ServerConfig::default(), now()).unwrap()
}

fn rv(id: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: id,
        attribute_id,
        ..Default::default()
    }
}

fn read_one(s: &ServerShared, id: NodeId, attribute_id: u32) -> DataValue {
    read_with(s, rv(id, attribute_id), TimestampsToReturn::Both)
}

fn read_with(s: &ServerShared, r: ReadValueId, ttr: TimestampsToReturn) -> DataValue {
    let req = ReadRequest {
        timestamps_to_return: ttr,
        nodes_to_read: vec![r],
        ..Default::default()
    };
    match attribute::read(s, &req, now()) {
        Response::Read(r) => r.results.into_iter().next().unwrap(),
        other => panic!("{other:?}"),
    }
}

fn write_one(s: &ServerShared, id: NodeId, range: &str, dv: DataValue) -> StatusCode {
    let req = WriteRequest {
        nodes_to_write: vec![WriteValue {
            node_id: id,
            attribute_id: attr::VALUE,
            index_range: range.into(),
            value: dv,
        }],
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
        assert_eq!(
            read_one(&s, bench(i), attr::BROWSE_NAME).value,
            Variant::from(QualifiedName::new(1, &format!("BenchmarkValue{i}")))
        );
    }
    assert_eq!(
        write_one(&s, bench(5), "", DataValue::new(Variant::Int32(-9))),
        StatusCode::Good
    );
    assert_eq!(
        read_one(&s, bench(5), attr::VALUE).value,
        Variant::Int32(-9)
    );
    assert_eq!(
        write_one(&s, bench(5), "", DataValue::new(Variant::Double(1.0))),
        StatusCode::BadTypeMismatch
    );
    let arr = Variant::array(BuiltinType::Int32, vec![Variant::Int32(1)]).unwrap();
    assert_eq!(
        write_one(&s, bench(5), "", DataValue::new(arr)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        write_one(&s, bench(5), "", DataValue::new(Variant::Empty)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        read_one(&s, bench(5), attr::VALUE).value,
        Variant::Int32(-9)
    );
}

#[test]
fn demo_static_accepts_its_type() {
    let s = shared();
    for (name, _, v) in demo_types() {
        let id = NodeId::string(1, format!("Demo.Static.{name}"));
        assert_eq!(read_one(&s, id.clone(), attr::VALUE).value, v, "{name}");
        assert_eq!(
            write_one(&s, id.clone(), "", DataValue::new(v.clone())),
            StatusCode::Good,
            "{name}"
        );
        let aid = NodeId::string(1, format!("Demo.Static.Arrays.{name}"));
        let a = read_one(&s, aid.clone(), attr::VALUE).value;
        assert!(a.is_array(), "{name}");
        assert_eq!(
            write_one(&s, aid, "", DataValue::new(a)),
            StatusCode::Good,
            "{name}"
        );
    }
    let node_class = read_one(&s, NodeId::string(1, "Demo"), attr::NODE_CLASS).value;
    assert_eq!(node_class, Variant::Int32(NodeClass::Object.0));
}

fn fault_of(r: Response) -> StatusCode {
    match r {
        Response::ServiceFault(f) => f.response_header.service_result,
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn request_level_errors() {
    let s = shared();
    let req = |n: usize, max_age: f64, ttr: TimestampsToReturn| ReadRequest {
        max_age,
        timestamps_to_return: ttr,
        nodes_to_read: vec![rv(bench(0), attr::VALUE); n],
        ..Default::default()
    };
    assert_eq!(
        fault_of(attribute::read(
            &s,
            &req(0, 0.0, TimestampsToReturn::Both),
            now()
        )),
        StatusCode::BadNothingToDo
    );
    assert_eq!(
        fault_of(attribute::read(
            &s,
            &req(1, -1.0, TimestampsToReturn::Both),
            now()
        )),
        StatusCode::BadMaxAgeInvalid
    );
    assert_eq!(
        fault_of(attribute::read(
            &s,
            &req(1, 0.0, TimestampsToReturn::Invalid),
            now()
        )),
        StatusCode::BadTimestampsToReturnInvalid
    );
    assert_eq!(
        fault_of(attribute::read(
            &s,
            &req(1, 0.0, TimestampsToReturn(77)),
            now()
        )),
        StatusCode::BadTimestampsToReturnInvalid
    );
    let max = s.config.operation_limits.max_nodes_per_read as usize;
    assert_eq!(
        fault_of(attribute::read(
            &s,
            &req(max + 1, 0.0, TimestampsToReturn::Both),
            now()
        )),
        StatusCode::BadTooManyOperations
    );
    match attribute::read(&s, &req(max, 0.0, TimestampsToReturn::Both), now()) {
        Response::Read(r) => {
            assert_eq!(r.results.len(), max);
            assert_eq!(r.response_header.service_result, StatusCode::Good);
        }
        other => panic!("{other:?}"),
    }
    let w = WriteRequest {
        nodes_to_write: vec![],
        ..Default::default()
    };
    assert_eq!(
        fault_of(attribute::write(&s, &w, now())),
        StatusCode::BadNothingToDo
    );
    let wv = WriteValue {
        node_id: bench(0),
        attribute_id: attr::VALUE,
        value: DataValue::new(Variant::Int32(1)),
        ..Default::default()
    };
    let w = WriteRequest {
        nodes_to_write: vec![wv; s.config.operation_limits.max_nodes_per_write as usize + 1],
        ..Default::default()
    };
    assert_eq!(
        fault_of(attribute::write(&s, &w, now())),
        StatusCode::BadTooManyOperations
    );
}

#[test]
fn every_attribute_kind() {
    let s = shared();
    let good = |id: NodeId, a: u32| {
        let dv = read_one(&s, id.clone(), a);
        assert_eq!(dv.status_code(), StatusCode::Good, "{id} attribute {a}");
        dv.value
    };
    let objects = NodeId::ns0(85);
    assert_eq!(
        good(objects.clone(), attr::NODE_ID),
        Variant::from(objects.clone())
    );
    assert_eq!(good(objects.clone(), attr::NODE_CLASS), Variant::Int32(1));
    assert_eq!(
        good(objects.clone(), attr::BROWSE_NAME),
        Variant::from(QualifiedName::new(0, "Objects"))
    );
    assert!(
        matches!(good(objects.clone(), attr::DISPLAY_NAME), Variant::LocalizedText(l) if l.text.as_str() == "Objects")
    );
    assert!(matches!(
        good(objects.clone(), attr::DESCRIPTION),
        Variant::LocalizedText(_)
    ));
    assert_eq!(good(objects.clone(), attr::WRITE_MASK), Variant::UInt32(0));
    assert_eq!(
        good(objects.clone(), attr::USER_WRITE_MASK),
        Variant::UInt32(0)
    );
    assert!(matches!(
        good(objects.clone(), attr::EVENT_NOTIFIER),
        Variant::Byte(_)
    ));
    // ReferenceType attributes.
    let org = NodeId::ns0(35);
    assert_eq!(
        good(org.clone(), attr::IS_ABSTRACT),
        Variant::Boolean(false)
    );
    assert_eq!(good(org.clone(), attr::SYMMETRIC), Variant::Boolean(false));
    assert!(
        matches!(good(org.clone(), attr::INVERSE_NAME), Variant::LocalizedText(l) if l.text.as_str() == "OrganizedBy")
    );
    // Type attributes.
    assert_eq!(
        good(NodeId::ns0(61), attr::IS_ABSTRACT),
        Variant::Boolean(false)
    );
    assert_eq!(
        good(NodeId::ns0(26), attr::IS_ABSTRACT),
        Variant::Boolean(true)
    );
    assert_eq!(
        good(NodeId::ns0(63), attr::DATA_TYPE),
        Variant::from(NodeId::ns0(24))
    );
    assert!(matches!(
        good(NodeId::ns0(63), attr::VALUE_RANK),
        Variant::Int32(_)
    ));
    // Variable attributes.
    let b = bench(3);
    assert_eq!(
        good(b.clone(), attr::DATA_TYPE),
        Variant::from(NodeId::ns0(6))
    );
    assert_eq!(good(b.clone(), attr::VALUE_RANK), Variant::Int32(-1));
    assert_eq!(good(b.clone(), attr::ARRAY_DIMENSIONS), Variant::Empty);
    assert!(matches!(good(b.clone(), attr::ACCESS_LEVEL), Variant::Byte(x) if x & 3 == 3));
    assert!(matches!(good(b.clone(), attr::USER_ACCESS_LEVEL), Variant::Byte(x) if x & 3 == 3));
    assert!(matches!(good(b.clone(), attr::ACCESS_LEVEL_EX), Variant::UInt32(x) if x & 3 == 3));
    assert_eq!(
        good(b.clone(), attr::MINIMUM_SAMPLING_INTERVAL),
        Variant::Double(0.0)
    );
    assert_eq!(good(b.clone(), attr::HISTORIZING), Variant::Boolean(false));
    let arr = NodeId::numeric(1, 2002);
    assert_eq!(good(arr.clone(), attr::VALUE_RANK), Variant::Int32(1));
    assert_eq!(
        good(arr, attr::ARRAY_DIMENSIONS),
        Variant::array(BuiltinType::UInt32, vec![Variant::UInt32(100)]).unwrap()
    );
    // Attributes a class lacks.
    for (id, a) in [
        (objects.clone(), attr::VALUE),
        (objects.clone(), attr::DATA_TYPE),
        (objects.clone(), attr::IS_ABSTRACT),
        (objects.clone(), attr::EXECUTABLE),
        (objects.clone(), attr::DATA_TYPE_DEFINITION),
        (b.clone(), attr::IS_ABSTRACT),
        (b.clone(), attr::EVENT_NOTIFIER),
        (b.clone(), attr::SYMMETRIC),
        (b.clone(), attr::CONTAINS_NO_LOOPS),
        (org, attr::ACCESS_LEVEL),
        (b.clone(), 0),
        (b.clone(), 28),
        (b.clone(), u32::MAX),
    ] {
        assert_eq!(
            read_one(&s, id.clone(), a).status_code(),
            StatusCode::BadAttributeIdInvalid,
            "{id} {a}"
        );
    }
    assert_eq!(
        read_one(&s, NodeId::numeric(1, 99_999), attr::VALUE).status_code(),
        StatusCode::BadNodeIdUnknown
    );
    assert_eq!(
        read_one(&s, NodeId::string(3, "x"), attr::NODE_ID).status_code(),
        StatusCode::BadNodeIdUnknown
    );
}

#[test]
fn index_range_reads() {
    let s = shared();
    let arr = NodeId::numeric(1, 2002); // BenchmarkArray100
    let with_range = |range: &str| {
        read_with(
            &s,
            ReadValueId {
                index_range: range.into(),
                ..rv(arr.clone(), attr::VALUE)
            },
            TimestampsToReturn::Both,
        )
    };
    let ints = |v: &[i32]| {
        Variant::array(
            BuiltinType::Int32,
            v.iter().map(|&x| Variant::Int32(x)).collect(),
        )
        .unwrap()
    };
    assert_eq!(with_range("2:4").value, ints(&[2, 3, 4]));
    assert_eq!(with_range("7").value, ints(&[7]));
    assert_eq!(with_range("98:200").value, ints(&[98, 99]));
    assert_eq!(
        with_range("100").status_code(),
        StatusCode::BadIndexRangeNoData
    );
    assert_eq!(
        with_range("4:2").status_code(),
        StatusCode::BadIndexRangeInvalid
    );
    assert_eq!(
        with_range("x").status_code(),
        StatusCode::BadIndexRangeInvalid
    );
    assert_eq!(
        with_range("1,1").status_code(),
        StatusCode::BadIndexRangeNoData
    );
    // A scalar Int32 has no sub-range.
    let r = read_with(
        &s,
        ReadValueId {
            index_range: "0".into(),
            ..rv(bench(0), attr::VALUE)
        },
        TimestampsToReturn::Both,
    );
    assert_eq!(r.status_code(), StatusCode::BadIndexRangeNoData);
    // String sub-range.
    let sid = NodeId::string(1, "Demo.Static.String");
    assert_eq!(
        write_one(
            &s,
            sid.clone(),
            "",
            DataValue::new(Variant::String("abcdef".into()))
        ),
        StatusCode::Good
    );
    let r = read_with(
        &s,
        ReadValueId {
            index_range: "1:2".into(),
            ..rv(sid, attr::VALUE)
        },
        TimestampsToReturn::Both,
    );
    assert_eq!(r.value, Variant::String("bc".into()));
}

#[test]
fn timestamps_to_return() {
    let s = shared();
    let n = now();
    let r = |ttr| read_with(&s, rv(bench(1), attr::VALUE), ttr);
    let both = r(TimestampsToReturn::Both);
    assert!(both.source_timestamp.is_some());
    assert_eq!(both.server_timestamp, Some(n.utc));
    let src = r(TimestampsToReturn::Source);
    assert!(src.source_timestamp.is_some() && src.server_timestamp.is_none());
    let srv = r(TimestampsToReturn::Server);
    assert!(srv.source_timestamp.is_none() && srv.server_timestamp == Some(n.utc));
    let neither = r(TimestampsToReturn::Neither);
    assert!(neither.source_timestamp.is_none() && neither.server_timestamp.is_none());
    assert_eq!(neither.value, Variant::Int32(1));
    // Non-Value attributes never carry a source timestamp.
    let a = read_with(
        &s,
        rv(bench(1), attr::BROWSE_NAME),
        TimestampsToReturn::Both,
    );
    assert!(a.source_timestamp.is_none() && a.server_timestamp == Some(n.utc));
}

#[test]
fn data_encoding() {
    let s = shared();
    let enc = |ns: u16, name: &str| QualifiedName::new(ns, name);
    let r = |id: NodeId, a: u32, e: QualifiedName| {
        read_with(
            &s,
            ReadValueId {
                data_encoding: e,
                ..rv(id, a)
            },
            TimestampsToReturn::Both,
        )
        .status_code()
    };
    let status = NodeId::ns0(2256);
    assert_eq!(
        r(status.clone(), attr::VALUE, enc(0, "Default Binary")),
        StatusCode::Good
    );
    assert_eq!(
        r(status.clone(), attr::VALUE, enc(0, "Default XML")),
        StatusCode::BadDataEncodingUnsupported
    );
    assert_eq!(
        r(status.clone(), attr::VALUE, enc(0, "Default JSON")),
        StatusCode::BadDataEncodingUnsupported
    );
    assert_eq!(
        r(status.clone(), attr::VALUE, enc(2, "Whatever")),
        StatusCode::BadDataEncodingUnsupported
    );
    assert_eq!(
        r(bench(0), attr::VALUE, enc(0, "Default Binary")),
        StatusCode::BadDataEncodingInvalid
    );
    assert_eq!(
        r(status, attr::BROWSE_NAME, enc(0, "Default Binary")),
        StatusCode::BadDataEncodingInvalid
    );
}

#[test]
fn write_type_rules() {
    let s = shared();
    let d = |name: &str| NodeId::string(1, name);
    let w = |id: NodeId, v: Variant| write_one(&s, id, "", DataValue::new(v));
    assert_eq!(
        w(d("Demo.Static.Int32"), Variant::Int32(5)),
        StatusCode::Good
    );
    assert_eq!(
        w(d("Demo.Static.Int32"), Variant::Double(5.0)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Int32"), Variant::UInt32(5)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Int32"), Variant::Int64(5)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Double"), Variant::Float(5.0)),
        StatusCode::BadTypeMismatch
    );
    let int_array = Variant::array(
        BuiltinType::Int32,
        vec![Variant::Int32(1), Variant::Int32(2)],
    )
    .unwrap();
    assert_eq!(
        w(d("Demo.Static.Int32"), int_array.clone()),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Arrays.Int32"), Variant::Int32(1)),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Arrays.Int32"), int_array.clone()),
        StatusCode::Good
    );
    assert_eq!(
        read_one(&s, d("Demo.Static.Arrays.Int32"), attr::VALUE).value,
        int_array
    );
    // BaseDataType takes anything scalar; an array only where the rank allows.
    for v in [
        Variant::Int32(1),
        Variant::Double(2.0),
        Variant::String("x".into()),
        Variant::Boolean(true),
    ] {
        assert_eq!(
            w(d("Demo.Static.Variant"), v.clone()),
            StatusCode::Good,
            "{v:?}"
        );
        assert_eq!(read_one(&s, d("Demo.Static.Variant"), attr::VALUE).value, v);
    }
    assert_eq!(
        w(d("Demo.Static.Variant"), int_array.clone()),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Arrays.Variant"), int_array),
        StatusCode::Good
    );
    let mixed = Variant::array(
        BuiltinType::Variant,
        vec![Variant::Int32(1), Variant::String("a".into())],
    )
    .unwrap();
    assert_eq!(
        w(d("Demo.Static.Arrays.Variant"), mixed.clone()),
        StatusCode::Good
    );
    assert_eq!(
        w(d("Demo.Static.Arrays.Int32"), mixed),
        StatusCode::BadTypeMismatch
    );
    // Null and Empty.
    assert_eq!(
        w(d("Demo.Static.Int32"), Variant::Empty),
        StatusCode::BadTypeMismatch
    );
    assert_eq!(
        w(d("Demo.Static.Variant"), Variant::Empty),
        StatusCode::BadTypeMismatch
    );
    // A null String is still a String.
    assert_eq!(
        w(d("Demo.Static.String"), Variant::String(UaString::null())),
        StatusCode::Good
    );
    // The benchmark array keeps its length bound.
    let long = Variant::array(BuiltinType::Int32, vec![Variant::Int32(0); 11]).unwrap();
    assert_eq!(
        w(NodeId::numeric(1, 2001), long),
        StatusCode::BadTypeMismatch
    );
}

#[test]
fn write_access_and_attributes() {
    let s = shared();
    let ro = NodeId::string(1, "Demo.ReadOnly.Int32");
    assert_eq!(
        write_one(&s, ro.clone(), "", DataValue::new(Variant::Int32(1))),
        StatusCode::BadNotWritable
    );
    assert_eq!(read_one(&s, ro, attr::VALUE).value, Variant::Int32(42));
    assert_eq!(
        write_one(
            &s,
            NodeId::string(1, "Demo.Dynamic.Counter"),
            "",
            DataValue::new(Variant::UInt32(1))
        ),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        write_one(
            &s,
            NodeId::numeric(1, 99_999),
            "",
            DataValue::new(Variant::Int32(1))
        ),
        StatusCode::BadNodeIdUnknown
    );
    assert_eq!(
        write_one(&s, NodeId::ns0(2256), "", DataValue::new(Variant::Int32(1))),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        write_one(&s, NodeId::ns0(85), "", DataValue::new(Variant::Int32(1))),
        StatusCode::BadAttributeIdInvalid
    );
    // Non-Value attributes.
    let req = |a: u32, v: Variant| WriteRequest {
        nodes_to_write: vec![WriteValue {
            node_id: bench(0),
            attribute_id: a,
            value: DataValue::new(v),
            ..Default::default()
        }],
        ..Default::default()
    };
    let res = |r: Response| match r {
        Response::Write(w) => w.results[0],
        other => panic!("{other:?}"),
    };
    assert_eq!(
        res(attribute::write(
            &s,
            &req(attr::DISPLAY_NAME, Variant::from(LocalizedText::text("x"))),
            now()
        )),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        res(attribute::write(
            &s,
            &req(attr::IS_ABSTRACT, Variant::Boolean(true)),
            now()
        )),
        StatusCode::BadAttributeIdInvalid
    );
    assert_eq!(
        res(attribute::write(
            &s,
            &req(99, Variant::Boolean(true)),
            now()
        )),
        StatusCode::BadAttributeIdInvalid
    );
}

#[test]
fn write_status_and_timestamps() {
    let s = shared();
    let src = DateTime(now().utc.0 - 1_000_000);
    let dv = DataValue {
        value: Variant::Int32(7),
        status: Some(StatusCode::Uncertain),
        source_timestamp: Some(src),
        ..Default::default()
    };
    assert_eq!(write_one(&s, bench(9), "", dv), StatusCode::Good);
    let r = read_one(&s, bench(9), attr::VALUE);
    assert_eq!(r.value, Variant::Int32(7));
    assert_eq!(r.status_code(), StatusCode::Uncertain);
    assert_eq!(r.source_timestamp, Some(src));
    // Without a source timestamp the write's time is used.
    assert_eq!(
        write_one(&s, bench(9), "", DataValue::new(Variant::Int32(8))),
        StatusCode::Good
    );
    let r = read_one(&s, bench(9), attr::VALUE);
    assert_eq!(
        (r.status_code(), r.source_timestamp),
        (StatusCode::Good, Some(now().utc))
    );
    let dv = DataValue {
        value: Variant::Int32(9),
        server_timestamp: Some(src),
        ..Default::default()
    };
    assert_eq!(
        write_one(&s, bench(9), "", dv),
        StatusCode::BadWriteNotSupported
    );
    assert_eq!(read_one(&s, bench(9), attr::VALUE).value, Variant::Int32(8));
}

#[test]
fn index_range_writes() {
    let s = shared();
    let arr = NodeId::numeric(1, 2001); // BenchmarkArray10: 0..9
    let ints = |v: &[i32]| {
        Variant::array(
            BuiltinType::Int32,
            v.iter().map(|&x| Variant::Int32(x)).collect(),
        )
        .unwrap()
    };
    assert_eq!(
        write_one(&s, arr.clone(), "2:3", DataValue::new(ints(&[-2, -3]))),
        StatusCode::Good
    );
    assert_eq!(
        read_one(&s, arr.clone(), attr::VALUE).value,
        ints(&[0, 1, -2, -3, 4, 5, 6, 7, 8, 9])
    );
    assert_eq!(
        write_one(&s, arr.clone(), "2:3", DataValue::new(ints(&[1]))),
        StatusCode::BadIndexRangeInvalid
    );
    assert_eq!(
        write_one(&s, arr.clone(), "9:10", DataValue::new(ints(&[1, 2]))),
        StatusCode::BadIndexRangeNoData
    );
    assert_eq!(
        write_one(&s, arr.clone(), "1:", DataValue::new(ints(&[1]))),
        StatusCode::BadIndexRangeInvalid
    );
    assert_eq!(
        write_one(&s, arr.clone(), "1", DataValue::new(Variant::Double(1.0))),
        StatusCode::BadTypeMismatch
    );
    // A range on a scalar Int32 selects nothing (Part 4 §7.27).
    assert_eq!(
        write_one(&s, bench(0), "0", DataValue::new(ints(&[1]))),
        StatusCode::BadIndexRangeNoData
    );
    let bs = NodeId::string(1, "Demo.Static.ByteString");
    assert_eq!(
        write_one(
            &s,
            bs.clone(),
            "",
            DataValue::new(Variant::ByteString(vec![1, 2, 3].into()))
        ),
        StatusCode::Good
    );
    assert_eq!(
        write_one(
            &s,
            bs.clone(),
            "1",
            DataValue::new(Variant::ByteString(vec![9].into()))
        ),
        StatusCode::Good
    );
    assert_eq!(
        read_one(&s, bs, attr::VALUE).value,
        Variant::ByteString(vec![1, 9, 3].into())
    );
}

#[test]
fn write_on_one_thread_is_read_on_another() {
    let s = shared();
    let writer = {
        let s = s.clone();
        std::thread::spawn(move || {
            for v in 1..=1000 {
                assert_eq!(
                    write_one(&s, bench(42), "", DataValue::new(Variant::Int32(v))),
                    StatusCode::Good
                );
            }
        })
    };
    writer.join().unwrap();
    let reader = {
        let s = s.clone();
        std::thread::spawn(move || read_one(&s, bench(42), attr::VALUE).value)
    };
    assert_eq!(reader.join().unwrap(), Variant::Int32(1000));
    // Concurrent readers always see some written value.
    let s2 = s.clone();
    let w = std::thread::spawn(move || {
        for v in 0..5000 {
            write_one(
                &s2,
                NodeId::string(1, "Demo.Static.String"),
                "",
                DataValue::new(Variant::String(format!("v{v}").into())),
            );
        }
    });
    for _ in 0..2000 {
        match read_one(&s, NodeId::string(1, "Demo.Static.String"), attr::VALUE).value {
            Variant::String(x) => assert!(x.as_str().is_empty() || x.as_str().starts_with('v')),
            other => panic!("{other:?}"),
        }
    }
    w.join().unwrap();
}

#[test]
fn dynamic_values() {
    let s = shared();
    let start = now();
    let later = start.advance_ns(250_000_000);
    let req = ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: vec![
            rv(NodeId::string(1, "Demo.Dynamic.Counter"), attr::VALUE),
            rv(NodeId::ns0(2258), attr::VALUE),
        ],
        ..Default::default()
    };
    let Response::Read(r) = attribute::read(&s, &req, later) else {
        panic!()
    };
    assert_eq!(r.results[0].value, Variant::UInt32(2));
    assert_eq!(
        r.results[0].source_timestamp,
        Some(start.advance_ns(200_000_000).utc)
    );
    assert_eq!(r.results[1].value, Variant::DateTime(later.utc));
    let sine = read_one(&s, NodeId::string(1, "Demo.Dynamic.Sine"), attr::VALUE).value;
    assert!(matches!(sine, Variant::Double(x) if (-1.0..=1.0).contains(&x)));
}

#[test]
fn server_object_values() {
    use uaring_core::generated::types::ServerStatusDataType;
    let s = shared();
    let v = |id: u32| read_one(&s, NodeId::ns0(id), attr::VALUE).value;
    let ns = v(2255);
    let a = ns.as_array().unwrap();
    assert_eq!(
        a.values,
        vec![
            Variant::String("http://opcfoundation.org/UA/".into()),
            Variant::String("urn:uaring:server".into())
        ]
    );
    assert_eq!(v(2267), Variant::Byte(255));
    assert_eq!(
        v(11705),
        Variant::UInt32(s.config.operation_limits.max_nodes_per_read)
    );
    let Variant::ExtensionObject(eo) = v(2256) else {
        panic!("ServerStatus")
    };
    let st: ServerStatusDataType = eo.decode_as(DecodeLimits::default()).unwrap().unwrap();
    assert_eq!(st.current_time, now().utc);
    assert_eq!(st.start_time, now().utc);
    assert_eq!(st.state.0, 0);
    assert_eq!(st.build_info.product_name.as_str(), "uaring");
    assert_eq!(
        st.build_info.software_version.as_str(),
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn namespace0_attributes() {
    let s = shared();
    // A Method.
    let m = NodeId::ns0(11492); // Server.GetMonitoredItems
    assert_eq!(
        read_one(&s, m.clone(), attr::NODE_CLASS).value,
        Variant::Int32(NodeClass::Method.0)
    );
    assert_eq!(
        read_one(&s, m.clone(), attr::EXECUTABLE).value,
        Variant::Boolean(true)
    );
    assert_eq!(
        read_one(&s, m.clone(), attr::USER_EXECUTABLE).value,
        Variant::Boolean(true)
    );
    assert_eq!(
        read_one(&s, m, attr::VALUE).status_code(),
        StatusCode::BadAttributeIdInvalid
    );
    // A structure's DataTypeDefinition.
    let d = read_one(&s, NodeId::ns0(862), attr::DATA_TYPE_DEFINITION);
    assert_eq!(d.status_code(), StatusCode::Good);
    assert!(matches!(d.value, Variant::ExtensionObject(_)));
    // Server: EventNotifier SubscribeToEvents.
    assert_eq!(
        read_one(&s, NodeId::ns0(2253), attr::EVENT_NOTIFIER).value,
        Variant::Byte(1)
    );
    // A property with an array value, and ServerCapabilities from the configuration.
    let v = |id: u32| read_one(&s, NodeId::ns0(id), attr::VALUE).value;
    let lim = &s.config.operation_limits;
    assert_eq!(v(11707), Variant::UInt32(lim.max_nodes_per_write));
    assert_eq!(v(11710), Variant::UInt32(lim.max_nodes_per_browse));
    assert_eq!(
        v(11712),
        Variant::UInt32(lim.max_nodes_per_translate_browse_paths_to_node_ids)
    );
    assert_eq!(v(11711), Variant::UInt32(lim.max_nodes_per_register_nodes));
    assert_eq!(v(11702), Variant::UInt32(lim.max_array_length));
    assert_eq!(v(11703), Variant::UInt32(lim.max_string_length));
    assert_eq!(v(12911), Variant::UInt32(lim.max_byte_string_length));
    assert_eq!(v(2735), Variant::UInt16(lim.max_browse_continuation_points));
    assert_eq!(
        v(2272),
        Variant::Double(s.config.subscriptions.min_sampling_interval_ms),
        "MinSupportedSampleRate is the sampling limit in force"
    );
    assert!(v(2269).is_array());
    assert!(v(2271).is_array());
    assert_eq!(
        v(2254).as_array().unwrap().values,
        vec![Variant::String("urn:uaring:server".into())]
    );
    assert_eq!(v(2259), Variant::Int32(0));
    assert_eq!(v(2261), Variant::String("uaring".into()));
    assert_eq!(v(2257), Variant::DateTime(now().utc));
    // Read-only in namespace 0.
    assert_eq!(
        write_one(&s, NodeId::ns0(2267), "", DataValue::new(Variant::Byte(1))),
        StatusCode::BadNotWritable
    );
}

#[test]
fn structures_are_written_by_data_type() {
    use uaring_core::generated::types::{BuildInfo, ServerStatusDataType};
    let s = shared();
    let st = ExtensionObject::from_struct(&ServerStatusDataType::default());
    let bi = ExtensionObject::from_struct(&BuildInfo::default());
    let var = NodeId::string(1, "Demo.Static.Variant");
    assert_eq!(
        write_one(
            &s,
            var.clone(),
            "",
            DataValue::new(Variant::from(st.clone()))
        ),
        StatusCode::Good
    );
    assert_eq!(
        read_one(&s, var.clone(), attr::VALUE).value,
        Variant::from(st.clone())
    );
    // Read with DataEncoding Default Binary now that the value is a structure.
    let r = read_with(
        &s,
        ReadValueId {
            data_encoding: QualifiedName::new(0, "Default Binary"),
            ..rv(var.clone(), attr::VALUE)
        },
        TimestampsToReturn::Both,
    );
    assert_eq!(r.status_code(), StatusCode::Good);
    assert_eq!(
        write_one(&s, var.clone(), "", DataValue::new(Variant::from(bi))),
        StatusCode::Good
    );
    // An unknown encoding id is no known structure.
    let unknown = ExtensionObject {
        type_id: NodeId::numeric(1, 12345),
        body: ExtensionObjectBody::Binary(vec![]),
    };
    assert_eq!(
        write_one(&s, var, "", DataValue::new(Variant::from(unknown))),
        StatusCode::BadTypeMismatch
    );
    // A structure is no Int32.
    assert_eq!(
        write_one(&s, bench(0), "", DataValue::new(Variant::from(st))),
        StatusCode::BadTypeMismatch
    );
}

#[test]
fn access_level_bits_are_enforced() {
    use uaring_core::address_space::build::make::variable;
    use uaring_core::address_space::{AddressSpaceBuilder, ServerInfo};
    use uaring_core::services::attribute::{read_attribute, write_attribute, Timestamps};
    let mut b = AddressSpaceBuilder::new(
        vec!["http://opcfoundation.org/UA/".into(), "urn:t".into()],
        ServerInfo::default(),
    );
    let mk = |id: u32, access: u8| {
        variable(
            NodeId::numeric(1, id),
            QualifiedName::new(1, "v"),
            NodeId::ns0(6),
            -1,
            vec![],
            DataValue::new(Variant::Int32(1)),
            access,
            0.0,
            None,
        )
    };
    b.add(mk(1, 0x02)).unwrap(); // write-only
    let mut user_ro = mk(2, 0x03);
    if let uaring_core::address_space::ClassAttributes::Variable(v) = &mut user_ro.attributes {
        v.user_access_level = 0x00;
    }
    b.add(user_ro).unwrap();
    assert!(b.add(mk(1, 0x01)).is_err(), "duplicate NodeId");
    let space = b.finish();
    let lim = uaring_core::config::OperationLimits::default();
    let read = |id: u32| {
        read_attribute(
            &space,
            &NodeId::numeric(1, id),
            attr::VALUE,
            "",
            &QualifiedName::default(),
            Timestamps::Both,
            now(),
        )
        .status_code()
    };
    let write = |id: u32| {
        write_attribute(
            &space,
            &lim,
            &NodeId::numeric(1, id),
            attr::VALUE,
            "",
            &DataValue::new(Variant::Int32(2)),
            "",
            uaring_core::roles::Roles::NONE,
            now(),
        )
    };
    assert_eq!(read(1), StatusCode::BadNotReadable);
    assert_eq!(write(1), StatusCode::Good);
    assert_eq!(read(2), StatusCode::BadUserAccessDenied);
    assert_eq!(write(2), StatusCode::BadUserAccessDenied);
}

/// ServerDiagnostics.EnabledFlag: the summary is always collected and nothing switches it,
/// so the flag reads true and a Write is refused instead of succeeding and changing nothing.
#[test]
fn diagnostics_enabled_flag_is_true_and_read_only() {
    let s = shared();
    let flag = NodeId::ns0(2294);
    assert_eq!(
        read_one(&s, flag.clone(), attr::VALUE).value,
        Variant::Boolean(true)
    );
    assert_eq!(
        read_one(&s, flag.clone(), attr::ACCESS_LEVEL).value,
        Variant::Byte(1),
        "CurrentRead only"
    );
    assert_eq!(
        write_one(
            &s,
            flag.clone(),
            "",
            DataValue::new(Variant::Boolean(false))
        ),
        StatusCode::BadNotWritable
    );
    assert_eq!(
        read_one(&s, flag, attr::VALUE).value,
        Variant::Boolean(true)
    );
}

/// A Read of many operations is answered in groups read ahead together (the node store's
/// `prefetch_nodes`): the answers are exactly those of one Read per operation, in order,
/// across the groups' boundaries, for known and unknown, dense, hashed and string ids, every
/// kind of attribute and the errors; a recycled response of another length is reused.
#[test]
fn many_operations_answer_as_one_read_each() {
    let s = shared();
    let mut ops = Vec::new();
    for i in 0..70u32 {
        let id = match i % 7 {
            0 => bench(i % 10),
            1 => NodeId::string(1, "Demo.Static.Double"),
            2 => NodeId::string(1, format!("Nope.{i}")),
            3 => NodeId::ns0(2255),
            4 => NodeId::numeric(1, 900_000 + i),
            5 => NodeId::string(7, "Demo.Static.Double"),
            _ => NodeId::string(1, "Demo"),
        };
        let attribute_id = match i % 5 {
            0 | 1 => attr::VALUE,
            2 => attr::BROWSE_NAME,
            3 => attr::NODE_CLASS,
            _ => 99,
        };
        let mut r = rv(id, attribute_id);
        if i % 11 == 0 {
            r.index_range = "0".into();
        }
        ops.push(r);
    }
    let one_each: Vec<DataValue> = ops
        .iter()
        .map(|r| read_with(&s, r.clone(), TimestampsToReturn::Both))
        .collect();
    assert!(one_each.iter().any(|d| d.status.is_none()));
    assert!(one_each
        .iter()
        .any(|d| d.status == Some(StatusCode::BadNodeIdUnknown)));
    let req = ReadRequest {
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: ops.clone(),
        ..Default::default()
    };
    let Response::Read(all) = attribute::read(&s, &req, now()) else {
        panic!("Read")
    };
    assert_eq!(all.results, one_each);
    // Into a recycled response holding fewer results, then more.
    for n in [70, 23, 16, 1, 70] {
        let req = ReadRequest {
            timestamps_to_return: TimestampsToReturn::Both,
            nodes_to_read: ops.get(70 - n..).unwrap().to_vec(),
            ..Default::default()
        };
        let mut spare = Box::<uaring_core::generated::types::ReadResponse>::default();
        spare.results = one_each.iter().take(30).cloned().collect();
        let Response::Read(r) = attribute::read_into(&s, roles::Roles::ALL, &req, now(), spare)
        else {
            panic!("Read")
        };
        assert_eq!(r.results, one_each.get(70 - n..).unwrap(), "{n}");
    }
}
