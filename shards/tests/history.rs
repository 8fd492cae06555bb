//! History end to end on the embedded store, in-process: the cases every backend runs
//! (`history_cases`), and what only the embedded store has: its threads' priority, the
//! export/import tools on the store a server left, and a damaged store.

mod history_cases;

use history_cases::*;
use uaring::{DataValue, DateTime, NodeId, StatusCode, VariableDef, Variant};
use uaring_core::generated::types::*;
use uaring_core::ExtensionObject;

#[test]
fn pushed_and_written_values_are_read_back_raw_at_time_and_processed_and_survive_a_restart() {
    let _serial = serial();
    let dir = Dir::new("e2e");
    let (level_id, t0) =
        history_cases::pushed_and_written_values_are_read_back_raw_at_time_and_processed_and_survive_a_restart(
            &dir,
            &Backend::Embedded,
        );
    // `uaring history export|import` on the store the server left: a node's values out as
    // CSV and back in under another node, the same values.
    use uaring::history::{tools, Store, StoreConfig};
    let store = Store::open(StoreConfig::new(dir.0.join("store"))).expect("the server let go");
    let mut csv = Vec::new();
    let key = level_id.to_string();
    let n = tools::export(&store, &key, t0.0, at(t0, 999.0).0, &mut csv).unwrap();
    assert_eq!(n, 1000);
    let text = String::from_utf8(csv.clone()).unwrap();
    assert_eq!(text.lines().next(), Some(tools::HEADER));
    assert!(
        text.lines().nth(2).unwrap().ends_with(",Double,1.0"),
        "{}",
        text.lines().nth(2).unwrap()
    );
    assert_eq!(
        tools::import(&store, "ns=9;s=Copy", &mut &csv[..]).unwrap(),
        1000
    );
    let mut again = Vec::new();
    tools::export(&store, "ns=9;s=Copy", i64::MIN, i64::MAX, &mut again).unwrap();
    assert_eq!(again, csv);
}

#[test]
fn processed_reads_honour_the_aggregate_configuration() {
    let _serial = serial();
    let dir = Dir::new("aggregate-config");
    history_cases::processed_reads_honour_the_aggregate_configuration(&dir, &Backend::Embedded);
}

#[test]
fn history_update_inserts_replaces_updates_and_deletes_by_role() {
    let _serial = serial();
    let dir = Dir::new("update");
    history_cases::history_update_inserts_replaces_updates_and_deletes_by_role(
        &dir,
        &Backend::Embedded,
    );
}

/// A full ingest queue drops values, and says so in the history: the next value of the
/// series that gets through is preceded by Bad_DataLost at the first dropped time.
#[test]
fn values_a_full_queue_drops_are_marked_bad_data_lost() {
    let _serial = serial();
    for on_full in ["drop-newest", "drop-oldest"] {
        let dir = Dir::new(on_full);
        lost_values_are_marked(&dir, &Backend::Embedded, on_full);
    }
}

/// Chunks the store cannot read (its segment files cut short under it, as a failing disk
/// would) stand in a raw read as one Bad_DataUnavailable value each, at the chunk's first
/// time: the client sees where values are missing, gets the rest, and the server goes on
/// serving.
#[test]
fn a_damaged_store_answers_bad_data_unavailable() {
    let _serial = serial();
    let dir = Dir::new("damaged");
    let t0 = t0();
    let mut b = builder(&dir, &Backend::Embedded);
    let ns = b.namespace("urn:test:history");
    let level = b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let id = NodeId::string(nsi, "Level");
    // Several sealed chunks of 1,024 values each, on disk in segment files.
    let n = 5_000;
    for i in 0..n {
        level.set_with(dv(at(t0, i as f64), i as f64)).unwrap();
    }
    let mut c = session(&server.endpoint_url());
    let end = at(t0, n as f64);
    wait_for(&mut c, &id, t0, end, n);
    let mut cut = 0;
    for e in std::fs::read_dir(dir.0.join("store")).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("seg-") {
            std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .unwrap()
                .set_len(0)
                .unwrap();
            cut += 1;
        }
    }
    assert!(cut > 0, "the values are in segment files");
    let details = ExtensionObject::from_struct(&ReadRawModifiedDetails {
        is_read_modified: false,
        start_time: t0,
        end_time: end,
        num_values_per_node: 0,
        return_bounds: false,
    });
    let r = history_read(
        &mut c,
        details,
        vec![HistoryReadValueId {
            node_id: id.clone(),
            ..Default::default()
        }],
    );
    let res = &r.results[0];
    assert_eq!(res.status_code, StatusCode::Good);
    let v = data(res);
    let gaps: Vec<&DataValue> = v
        .iter()
        .filter(|d| d.status == Some(StatusCode::BadDataUnavailable))
        .collect();
    // 5,000 values (and the start value): four sealed chunks of 1,024 on disk, the rest in
    // the head in memory. Each chunk is one gap, in time order, before the head's values.
    assert_eq!(gaps.len(), 4, "one per unreadable chunk");
    assert_eq!(gaps[0].source_timestamp, Some(t0));
    assert!(gaps
        .windows(2)
        .all(|w| w[0].source_timestamp < w[1].source_timestamp));
    assert!(gaps.iter().all(|g| g.value == Variant::Empty));
    assert!(v[..4]
        .iter()
        .all(|d| d.status == Some(StatusCode::BadDataUnavailable)));
    let good = doubles(&v[4..]);
    let first = n - good.len();
    assert!((800..1024).contains(&good.len()), "{}", good.len());
    assert_eq!(good, (first..n).map(|i| i as f64).collect::<Vec<_>>());
    // The session and the server are fine: a Read of the node still answers.
    let v = c.read_values(std::slice::from_ref(&id)).expect("Read");
    assert!(v[0].status.is_none_or(|s| s.is_good()), "{v:?}");
    let _ = c.close();
    drop(level);
    server.shutdown().unwrap();
}

#[test]
fn event_history_is_inserted_replaced_updated_and_deleted() {
    let _serial = serial();
    let dir = Dir::new("events");
    history_cases::event_history_is_inserted_replaced_updated_and_deleted(&dir, &Backend::Embedded);
}

/// The historian takes every historized Variable of the address space it is attached to, by
/// index up to the index bound: also one added after a deletion, whose index lies past the
/// node count.
#[test]
fn attach_finds_a_historized_variable_added_after_a_deletion() {
    use uaring::history::serve::{Historian, HistoryConfig};
    use uaring_core::address_space::{build::make, ClassAttributes};
    let _serial = serial();
    let dir = Dir::new("attach");
    let mut b = builder(&dir, &Backend::Embedded);
    let ns = b.namespace("urn:test:history");
    b.add_variable(VariableDef::new(ns.id("Gone"), "Gone", 0.0));
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    // One edit: Gone's index is not reusable within the version that frees it, so Late goes
    // past the end.
    server
        .edit(|e| {
            e.delete_node(&NodeId::string(nsi, "Gone"), true)?;
            let mut node = make::variable(
                NodeId::string(nsi, "Late"),
                uaring_core::QualifiedName::new(nsi, "Late"),
                NodeId::ns0(11),
                -1,
                Vec::new(),
                DataValue::new(Variant::Double(1.0)),
                1,
                0.0,
                Some((NodeId::ns0(85), 35)),
            );
            if let ClassAttributes::Variable(v) = &mut node.attributes {
                v.historizing = true;
            }
            e.add_node(node)
        })
        .expect("delete and add");
    let space = server.shared().model.load();
    let late = space.node_index(&NodeId::string(nsi, "Late")).unwrap();
    assert!(
        late as usize >= space.len(),
        "the new node's index is past the count"
    );
    let historized = space
        .nodes()
        .filter(|n| n.as_variable().is_some_and(|v| v.historizing()) && n.value_cell().is_some())
        .count();
    let config = HistoryConfig {
        dir: dir.0.join("second"),
        ..HistoryConfig::default()
    };
    let h = Historian::open(&config).expect("open");
    let attached = h
        .attach(&std::sync::Arc::new(server.shared().with_space(space)))
        .expect("attach");
    assert_eq!(attached, historized, "Late is among them");
    h.shutdown().unwrap();
    server.shutdown().unwrap();
}

/// A notifier the application historizes ([`uaring::ObjectDef::historize_events`]) keeps the
/// events raised with it as source, readable with ReadEventDetails; a notifier that is not
/// historized keeps none; without a store the notifier advertises no history.
#[test]
fn a_notifier_the_application_historizes_keeps_its_events() {
    use uaring::{EventDef, NodeRef, ObjectDef};
    let _serial = serial();
    let dir = Dir::new("library-notifier");
    let mut b = builder(&dir, &Backend::Embedded);
    let ns = b.namespace("urn:test:history");
    let plant = b.add_object(ObjectDef::folder(ns.id("Plant"), "Plant").historize_events());
    let line = b.add_object(ObjectDef::folder(ns.id("Line"), "Line").event_notifier(true));
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let (plant_id, line_id) = (NodeId::string(nsi, "Plant"), NodeId::string(nsi, "Line"));
    let mut c = session(&server.endpoint_url());
    let notifiers = attributes(&mut c, &[(&plant_id, 12), (&line_id, 12)]);
    assert_eq!(notifiers, [Variant::Byte(0x0d), Variant::Byte(0x01)]);
    let from = uaring::clock::utc_now();
    for i in 0..3 {
        let event = EventDef::new(NodeRef::ns0(2041), &plant, &format!("plant {i}"), 500);
        server.raise_event(event).unwrap();
        let event = EventDef::new(NodeRef::ns0(2041), &line, &format!("line {i}"), 500);
        server.raise_event(event).unwrap();
    }
    let to = DateTime(uaring::clock::utc_now().0 + 10_000_000);
    let deadline = std::time::Instant::now() + TIMEOUT;
    let kept = loop {
        let kept = notifier_events(&mut c, plant_id.clone(), from, to).expect("Plant's history");
        if kept.len() >= 3 || std::time::Instant::now() > deadline {
            break kept;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let messages: Vec<&str> = kept.iter().map(|(_, m)| m.as_str()).collect();
    assert_eq!(messages, ["plant 0", "plant 1", "plant 2"]);
    assert_eq!(
        notifier_events(&mut c, line_id, from, to),
        Err(StatusCode::BadHistoryOperationUnsupported)
    );
    let _ = c.close();
    server.shutdown().unwrap();

    // Without a store the same definition is a notifier without history.
    let mut b = uaring::Server::builder()
        .listen("127.0.0.1:0")
        .shards(1)
        .pki(dir.0.join("pki"))
        .config_toml("[history]\nenabled = false\n");
    let ns = b.namespace("urn:test:history");
    b.add_object(ObjectDef::folder(ns.id("Plant"), "Plant").historize_events());
    b.add_variable(VariableDef::new(ns.id("Level"), "Level", 0.0).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let mut c = session(&server.endpoint_url());
    let (plant_id, level) = (NodeId::string(nsi, "Plant"), NodeId::string(nsi, "Level"));
    // EventNotifier; the Variable's AccessLevel (CurrentRead only) and Historizing.
    assert_eq!(
        attributes(&mut c, &[(&plant_id, 12), (&level, 17), (&level, 20)]),
        [
            Variant::Byte(0x01),
            Variant::Byte(0x01),
            Variant::Boolean(false)
        ]
    );
    let _ = c.close();
    server.shutdown().unwrap();
}

/// The values of attributes (node, AttributeId), each read Good.
fn attributes(c: &mut uaring_harness::blocking::Client, of: &[(&NodeId, u32)]) -> Vec<Variant> {
    let nodes: Vec<ReadValueId> = of
        .iter()
        .map(|(n, a)| ReadValueId {
            node_id: (*n).clone(),
            attribute_id: *a,
            ..Default::default()
        })
        .collect();
    c.read(&nodes)
        .expect("Read")
        .into_iter()
        .map(|d| {
            assert!(d.status.is_none_or(|s| s.is_good()), "{d:?}");
            d.value
        })
        .collect()
}

/// Computed and asynchronous Variables historized on a sampling interval: one by
/// `[[history.sampled]]`, one by [`VariableDef::historize_every`]. Each change is stored once
/// (not once a pass), a device's failed read once as its status; the sampler asks the
/// device off the shards, one read out at a time.
#[test]
fn computed_and_asynchronous_variables_are_historized_on_an_interval() {
    use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
    use std::sync::Arc;
    use uaring::BuiltinType;
    let _serial = serial();
    let dir = Dir::new("sampled-sources");
    let mut b = embedded_builder_with(
        &dir,
        "[[history.sampled]]\nnodes = [\"nsu=urn:test:history;s=Calc\"]\ninterval_ms = 20\n",
    );
    let ns = b.namespace("urn:test:history");
    let calc = Arc::new(AtomicI32::new(1));
    let c2 = calc.clone();
    b.add_variable(VariableDef::computed(
        ns.id("Calc"),
        "Calc",
        BuiltinType::Int32,
        move |_| DataValue::new(Variant::Int32(c2.load(Ordering::SeqCst))),
    ));
    // The device answers from a thread of its own; a negative value is a failed read.
    let device = Arc::new(AtomicI32::new(10));
    let (asks, asked) = std::sync::mpsc::channel::<uaring::AsyncRead>();
    let d2 = device.clone();
    let reads = Arc::new(AtomicU32::new(0));
    let r2 = reads.clone();
    std::thread::spawn(move || {
        for read in asked {
            r2.fetch_add(1, Ordering::SeqCst);
            match d2.load(Ordering::SeqCst) {
                v if v < 0 => read.fail(StatusCode::BadCommunicationError),
                v => read.complete(DataValue::new(Variant::Int32(v))),
            }
        }
    });
    let asks = std::sync::Mutex::new(asks);
    b.add_variable(
        VariableDef::asynchronous(ns.id("Device"), "Device", BuiltinType::Int32, move |r| {
            let _ = asks.lock().unwrap().send(r);
        })
        .historize_every(20),
    );
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let (calc_id, device_id) = (NodeId::string(nsi, "Calc"), NodeId::string(nsi, "Device"));
    let mut c = session(&server.endpoint_url());
    // Both advertise their history.
    assert_eq!(
        attributes(&mut c, &[(&calc_id, 20), (&device_id, 20)]),
        [Variant::Boolean(true), Variant::Boolean(true)]
    );
    let from = DateTime(uaring::clock::utc_now().0 - 10_000_000);
    let kept = |c: &mut uaring_harness::blocking::Client, id: &NodeId, n: usize| {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let to = DateTime(uaring::clock::utc_now().0 + 10_000_000);
            let (v, _) = read_all(c, id, from, to, 0);
            if v.len() >= n || std::time::Instant::now() > deadline {
                return v
                    .into_iter()
                    .map(|d| match d.status {
                        Some(s) if !s.is_good() => Err(s),
                        _ => Ok(d.value),
                    })
                    .collect::<Vec<_>>();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    assert_eq!(kept(&mut c, &calc_id, 1), [Ok(Variant::Int32(1))]);
    assert_eq!(kept(&mut c, &device_id, 1), [Ok(Variant::Int32(10))]);
    calc.store(2, Ordering::SeqCst);
    device.store(-1, Ordering::SeqCst);
    assert_eq!(kept(&mut c, &device_id, 2).len(), 2);
    device.store(20, Ordering::SeqCst);
    // Many passes later: each change once.
    let before = reads.load(Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        reads.load(Ordering::SeqCst) >= before + 5,
        "the device is asked every interval"
    );
    assert_eq!(
        kept(&mut c, &calc_id, 2),
        [Ok(Variant::Int32(1)), Ok(Variant::Int32(2))]
    );
    assert_eq!(
        kept(&mut c, &device_id, 3),
        [
            Ok(Variant::Int32(10)),
            Err(StatusCode::BadCommunicationError),
            Ok(Variant::Int32(20))
        ]
    );
    let _ = c.close();
    server.shutdown().unwrap();
}

/// `[[history.collection]]`: an ExceptionDeviation keeps only values that move far enough
/// (or change status), a MaxTimeInterval keeps an unchanged value again, and the Variables'
/// HA Configurations show both rules (Part 11 §5.2.2).
#[test]
fn collection_rules_keep_what_the_ha_configuration_says() {
    let _serial = serial();
    let dir = Dir::new("collection");
    let mut b = embedded_builder_with(
        &dir,
        "[[history.collection]]\nnodes = [\"nsu=urn:test:history;s=Dev\"]\nexception_deviation = 0.5\n\
         [[history.collection]]\nnodes = [\"nsu=urn:test:history;s=Slow\"]\nmax_time_interval_ms = 200\n",
    );
    let ns = b.namespace("urn:test:history");
    let dev = b.add_variable(VariableDef::new(ns.id("Dev"), "Dev", 10.0).historize());
    let slow = b.add_variable(VariableDef::new(ns.id("Slow"), "Slow", 1i32).historize());
    let server = b.start().expect("start");
    let nsi = server.namespace_index("urn:test:history").unwrap();
    let (dev_id, slow_id) = (NodeId::string(nsi, "Dev"), NodeId::string(nsi, "Slow"));
    let mut c = session(&server.endpoint_url());
    let from = DateTime(uaring::clock::utc_now().0 - 100_000_000);
    for v in [10.2, 10.4, 10.6, 10.7, 11.0, 11.2] {
        dev.set(v).unwrap();
    }
    dev.set_with(DataValue {
        status: Some(StatusCode::UncertainLastUsableValue),
        ..DataValue::new(Variant::Double(11.2))
    })
    .unwrap();
    let to = DateTime(uaring::clock::utc_now().0 + 100_000_000);
    // 10.0 (the start), 10.6 (0.6 from it), 11.2 (0.6 from 10.6), the status change.
    wait_for(&mut c, &dev_id, from, to, 4);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let (v, _) = read_all(&mut c, &dev_id, from, to, 0);
    let kept: Vec<(f64, Option<StatusCode>)> = v
        .iter()
        .map(|d| match d.value {
            Variant::Double(x) => (x, d.status),
            ref o => panic!("{o:?}"),
        })
        .collect();
    assert_eq!(
        kept,
        [
            (10.0, None),
            (10.6, None),
            (11.2, None),
            (11.2, Some(StatusCode::UncertainLastUsableValue))
        ]
    );
    // Slow does not change: its value is kept again about every 200 ms, at the server's time.
    slow.set(2i32).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let to = DateTime(uaring::clock::utc_now().0 + 100_000_000);
    let (v, _) = read_all(&mut c, &slow_id, from, to, 0);
    let twos: Vec<&DataValue> = v.iter().filter(|d| d.value == Variant::Int32(2)).collect();
    // (At most six: one and one a 200 ms after it; at least one kept again, whatever the
    // machine's load.)
    assert!(
        (2..=6).contains(&twos.len()),
        "the value 2 kept once and again every 200 ms or a little more for 1.1 s: {}",
        twos.len()
    );
    let gaps: Vec<i64> = twos
        .windows(2)
        .map(|w| (w[1].source_timestamp.unwrap().0 - w[0].source_timestamp.unwrap().0) / 10_000)
        .collect();
    assert!(gaps.iter().all(|g| *g >= 200), "never sooner: {gaps:?} ms");
    // What the HA Configurations say, and which one each Variable references.
    let config = |name: &str| NodeId::string(1, format!("HA Configuration.{name}"));
    assert_eq!(
        attributes(
            &mut c,
            &[
                (&config("1.Sloped.ExceptionDeviation"), 13),
                (&config("1.Sloped.ExceptionDeviationFormat"), 13),
                (&config("2.Stepped.MaxTimeInterval"), 13),
                (&config("2.Stepped.Stepped"), 13),
            ]
        ),
        [
            Variant::Double(0.5),
            Variant::Int32(0),
            Variant::Double(200.0),
            Variant::Boolean(true)
        ]
    );
    for (node, want) in [(&dev_id, "1.Sloped"), (&slow_id, "2.Stepped")] {
        let r = c
            .browse(&[BrowseDescription {
                node_id: node.clone(),
                browse_direction: BrowseDirection::Forward,
                reference_type_id: NodeId::ns0(56),
                include_subtypes: true,
                node_class_mask: 0,
                result_mask: 0x3f,
            }])
            .expect("Browse HasHistoricalConfiguration");
        let refs: Vec<NodeId> = r[0]
            .references
            .iter()
            .map(|d| d.node_id.node_id.clone())
            .collect();
        assert_eq!(refs, [config(want)], "{node}");
    }
    let _ = c.close();
    server.shutdown().unwrap();
}
