//! The `uaring` library in-process: builder errors, typed pushes, instances of companion-model
//! ObjectTypes with their mandatory children, and a shutdown that returns.

use uaring::{
    AlarmDef, BuiltinType, Error, NodeId, NodeRef, ObjectDef, Server, StatusCode, VariableDef,
    Variant,
};

const MACHINERY: &str = "http://opcfoundation.org/UA/Machinery/";

fn nodeset(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/nodesets")
        .join(name)
}

fn builder(dir: &tempfile_dir::Dir) -> uaring::ServerBuilder {
    Server::builder()
        .listen("127.0.0.1:0")
        .shards(1)
        .pki(dir.path().join("pki"))
}

mod tempfile_dir {
    /// A directory removed when dropped.
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new(tag: &str) -> Dir {
            let p =
                std::env::temp_dir().join(format!("uaring-library-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn pushes_are_type_checked_and_handles_need_a_started_server() {
    let dir = tempfile_dir::Dir::new("push");
    let mut b = builder(&dir);
    let ns = b.namespace("urn:test:library");
    let t = b.add_variable(VariableDef::new(ns.id("T"), "T", 20.0));
    let a = b.add_variable(VariableDef::new(
        ns.id("A"),
        "A",
        Variant::array(BuiltinType::Int32, vec![Variant::Int32(1)]).unwrap(),
    ));
    assert_eq!(t.set(1.0), Err(Error::NotStarted));
    let server = b.start().unwrap();
    t.set(21.5).unwrap();
    assert_eq!(t.get().unwrap().value, Variant::Double(21.5));
    assert!(
        matches!(t.set(7i32), Err(Error::TypeMismatch(_))),
        "an Int32 into a Double"
    );
    assert!(matches!(t.set("x"), Err(Error::TypeMismatch(_))));
    assert_eq!(
        t.get().unwrap().value,
        Variant::Double(21.5),
        "a refused push stores nothing"
    );
    // Arrays: rank checked.
    assert!(
        matches!(a.set(3i32), Err(Error::TypeMismatch(_))),
        "a scalar into an array"
    );
    a.set(
        Variant::array(
            BuiltinType::Int32,
            vec![Variant::Int32(4), Variant::Int32(5)],
        )
        .unwrap(),
    )
    .unwrap();
    // set_many checks everything first.
    let r = uaring::set_many([(&t, Variant::Double(1.0)), (&a, Variant::Double(2.0))]);
    assert!(matches!(r, Err(Error::TypeMismatch(_))));
    assert_eq!(
        t.get().unwrap().value,
        Variant::Double(21.5),
        "nothing of the batch was stored"
    );
    let ns_index = server.namespace_index("urn:test:library").unwrap();
    assert!(ns_index >= 2);
    let same = server.variable(&NodeId::string(ns_index, "T")).unwrap();
    same.set(3.0).unwrap();
    assert_eq!(t.get().unwrap().value, Variant::Double(3.0));
    assert!(matches!(
        server.variable(&NodeId::string(ns_index, "Nope")),
        Err(Error::Status(StatusCode::BadNodeIdUnknown))
    ));
    server.shutdown().unwrap();
}

#[test]
fn a_duplicate_node_or_a_missing_parent_fails_the_start_with_the_node_named() {
    let dir = tempfile_dir::Dir::new("dup");
    let mut b = builder(&dir);
    let ns = b.namespace("urn:test:library");
    b.add_variable(VariableDef::new(ns.id("X"), "X", 1.0));
    b.add_variable(VariableDef::new(ns.id("X"), "X", 2.0));
    match b.start() {
        Err(Error::AddressSpace(e)) => assert!(e.contains("duplicate") && e.contains("s=X"), "{e}"),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a duplicate NodeId started"),
    }
    let mut b = builder(&dir);
    let ns = b.namespace("urn:test:library");
    b.add_variable(VariableDef::new(ns.id("Y"), "Y", 1.0).component_of(&ns.id("NoSuchParent")));
    assert!(matches!(b.start(), Err(Error::AddressSpace(_))));
    // An event type must be below BaseEventType: BaseObjectType is an ObjectType but no
    // event type.
    let mut b = builder(&dir);
    let ns = b.namespace("urn:test:library");
    b.add_event_type(uaring::EventTypeDef::new(ns.id("T"), "T").subtype_of(NodeRef::ns0(58)));
    match b.start() {
        Err(Error::AddressSpace(e)) => {
            assert!(e.contains("no event type") && e.contains("s=T"), "{e}")
        }
        other => panic!("{:?}", other.err()),
    }
    // A configuration error names the key.
    match builder(&dir)
        .config_toml("[runtime]\nshards = \"two\"\n")
        .start()
    {
        Err(Error::Config(e)) => assert!(e.contains("shards"), "{e}"),
        other => panic!("{:?}", other.err()),
    }
}

#[test]
fn an_instance_of_a_companion_model_type_gets_its_mandatory_children() {
    let dir = tempfile_dir::Dir::new("machinery");
    let mut b = builder(&dir)
        .nodeset(nodeset("Opc.Ua.Di.NodeSet2.xml"))
        .nodeset(nodeset("Opc.Ua.Machinery.NodeSet2.xml"));
    let ns = b.namespace("urn:test:plant");
    let machinery = b.namespace(MACHINERY);
    let machine = b.add_object(ObjectDef::folder(ns.id("Machine1"), "Machine1"));
    b.add_object(
        ObjectDef::new(
            ns.id("Machine1.Identification"),
            "Identification",
            machinery.num(1012),
        )
        .component_of(&machine),
    );
    let server = b.start().unwrap();
    let space = &server.shared().address_space;
    let i = server.namespace_index("urn:test:plant").unwrap();
    let ident = NodeId::string(i, "Machine1.Identification");
    let di = space
        .namespace_index("http://opcfoundation.org/UA/DI/")
        .unwrap();
    let children: Vec<String> = space
        .node(&ident)
        .unwrap()
        .references()
        .filter(|r| r.is_forward && r.reference_type == NodeId::ns0(46))
        .filter_map(|r| {
            r.target
                .as_local()
                .and_then(|t| space.browse_name_of(t))
                .map(|q| format!("{}:{}", q.namespace_index, q.name.as_str()))
        })
        .collect();
    for want in ["Manufacturer", "SerialNumber", "ProductInstanceUri"] {
        assert!(
            children.contains(&format!("{di}:{want}")),
            "{want} (DI namespace {di}) among {children:?}"
        );
    }
    // The most derived declaration wins: one Manufacturer only.
    assert_eq!(
        children
            .iter()
            .filter(|c| c.ends_with(":Manufacturer"))
            .count(),
        1,
        "{children:?}"
    );
    // The children are stored values the application pushes.
    let serial = server
        .variable(&NodeId::string(i, "Machine1.Identification.SerialNumber"))
        .unwrap();
    serial.set("SN-0001").unwrap();
    assert_eq!(
        serial.get().unwrap().value,
        Variant::String("SN-0001".into())
    );
    assert!(NodeRef::ns0(85).namespace_uri().is_none());
    server.shutdown().unwrap();
}

#[test]
fn alarm_subtypes_need_their_mandatory_properties_and_report_their_event_type() {
    let dir = tempfile_dir::Dir::new("alarm-types");
    // (type, properties, what the start error must name; None = it starts)
    type Case<'a> = (u32, Vec<(&'a str, Variant)>, Option<&'a str>);
    let cases: [Case; 7] = [
        // OffNormalAlarmType without its mandatory NormalState.
        (10637, vec![], Some("NormalState")),
        // ... with it.
        (
            10637,
            vec![(
                "NormalState",
                Variant::NodeId(Box::new(NodeId::string(2, "Normal"))),
            )],
            None,
        ),
        // A Property the types do not declare.
        (
            10523,
            vec![("HighLimit", Variant::Double(1.0))],
            Some("HighLimit"),
        ),
        // The wrong data type for LimitAlarmType's HighLimit.
        (
            10060,
            vec![("HighLimit", Variant::Int32(1))],
            Some("HighLimit"),
        ),
        // ExclusiveLimitAlarmType's LimitState is a state machine the library does not run.
        (9341, vec![], Some("LimitState")),
        // Not an alarm type.
        (2041, vec![], Some("AlarmConditionType")),
        // NonExclusiveLevelAlarmType overrides ActiveState, which the condition maintains.
        (10060, vec![("HighLimit", Variant::Double(90.0))], None),
    ];
    for (type_id, properties, fails) in cases {
        let mut b = builder(&dir);
        let ns = b.namespace("urn:test:library");
        let source = b.add_object(ObjectDef::folder(ns.id("Line"), "Line").event_notifier(true));
        b.add_variable(VariableDef::new(ns.id("Normal"), "Normal", false));
        let mut def =
            AlarmDef::new(ns.id("Line.Alarm"), "Alarm", &source).of_type(NodeRef::ns0(type_id));
        for (name, value) in properties.clone() {
            def = def.property(name, value);
        }
        let alarm = b.add_alarm(def);
        match (b.start(), fails) {
            (Err(Error::AddressSpace(e)), Some(want)) => {
                assert!(
                    e.contains(want) && e.contains("s=Line.Alarm"),
                    "{type_id}: {e}"
                )
            }
            (Ok(server), None) => {
                let i = server.namespace_index("urn:test:library").unwrap();
                let space = &server.shared().address_space;
                let id = NodeId::string(i, "Line.Alarm");
                let node = space.node(&id).unwrap();
                assert_eq!(
                    node.type_definition().and_then(|t| t.as_local().cloned()),
                    Some(NodeId::ns0(type_id))
                );
                for (name, value) in &properties {
                    let p = server
                        .variable(&NodeId::string(i, format!("Line.Alarm.{name}")))
                        .unwrap();
                    assert_eq!(&p.get().unwrap().value, value, "{name}");
                }
                alarm.set_active(true, 800, "on").unwrap();
                let c = &server.shared().events.conditions[0];
                assert_eq!(c.spec.event_type, NodeId::ns0(type_id));
                // The chain runs through AlarmConditionType to BaseEventType.
                assert!(c.spec.type_chain.contains(&NodeId::ns0(2915)));
                assert!(c.spec.type_chain.contains(&NodeId::ns0(2041)));
                server.shutdown().unwrap();
            }
            (r, want) => panic!("{type_id}: {:?} (wanted the error {want:?})", r.err()),
        }
    }
}

#[test]
fn nodes_added_and_removed_from_threads_while_the_server_runs() {
    let dir = tempfile_dir::Dir::new("runtime-edit");
    let mut b = builder(&dir);
    let ns = b.namespace("urn:test:library");
    let t = b.add_variable(VariableDef::new(ns.id("T"), "T", 20.0));
    let server = std::sync::Arc::new(b.start().unwrap());
    let i = server.namespace_index("urn:test:library").unwrap();
    let objects = NodeId::ns0(85);
    // Four threads add and remove their own nodes at once.
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let server = server.clone();
            let objects = objects.clone();
            std::thread::spawn(move || {
                for round in 0..25 {
                    let id = NodeId::string(i, format!("Run.{k}.{round}"));
                    let v = server
                        .add_variable(&objects, id.clone(), &format!("Run{k}_{round}"), 1.0, true)
                        .unwrap();
                    v.set(2.0).unwrap();
                    assert_eq!(v.get().unwrap().value, Variant::Double(2.0));
                    server.delete_nodes(&[id]).unwrap();
                    assert_eq!(v.set(3.0), Err(Error::Status(StatusCode::BadNodeIdUnknown)));
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    // Typed errors.
    let id = NodeId::string(i, "Run.X");
    server
        .add_variable(&objects, id.clone(), "X", 1i32, false)
        .unwrap();
    assert_eq!(
        server
            .add_variable(&objects, id.clone(), "X2", 1i32, false)
            .err(),
        Some(Error::Status(StatusCode::BadNodeIdExists))
    );
    assert_eq!(
        server
            .add_variable(
                &NodeId::string(i, "Nope"),
                NodeId::string(i, "Y"),
                "Y",
                1i32,
                false
            )
            .err(),
        Some(Error::Status(StatusCode::BadParentNodeIdInvalid))
    );
    assert_eq!(
        server.delete_nodes(&[NodeId::string(i, "Nope")]),
        Err(Error::Status(StatusCode::BadNodeIdUnknown))
    );
    let space = server.shared().model.load();
    assert!(space.node(&id).is_some());
    assert_eq!(space.version(), 4 * 25 * 2 + 1);
    // Start-time nodes are untouched.
    t.set(5.0).unwrap();
    drop(space);
    // Freed indexes are reused once the shard has taken the version that freed them: add
    // and remove, waiting for the shard each time, and the index bound stays.
    let model = &server.shared().model;
    let caught_up = || {
        let guard = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while model.oldest_held() != model.version() {
            assert!(
                std::time::Instant::now() < guard,
                "the shard never took the version"
            );
            std::thread::yield_now();
        }
    };
    caught_up();
    let bound = model.load().index_bound();
    for round in 0..10 {
        let id = NodeId::string(i, format!("Reuse.{round}"));
        server
            .add_variable(&objects, id.clone(), "Reuse", 1.0, false)
            .unwrap();
        caught_up();
        server.delete_nodes(&[id]).unwrap();
        caught_up();
        assert!(model.load().index_bound() <= bound + 1, "round {round}");
    }
    std::sync::Arc::into_inner(server)
        .unwrap()
        .shutdown()
        .unwrap();
}

/// The CPUs each of this process's threads whose name starts with `name_prefix` may run on, read from
/// /proc/self/task (other tests' servers run in this process too, so a name may repeat).
fn threads_named(name_prefix: &str) -> Vec<Vec<usize>> {
    let mut found = Vec::new();
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
        if !comm.trim().starts_with(name_prefix) {
            continue;
        }
        let tid: i32 = t.file_name().to_string_lossy().parse().unwrap();
        if let Ok(cpus) = uaring_affinity::allowed_cpus_of(tid) {
            found.push(cpus);
        }
    }
    found
}

#[test]
fn background_threads_run_on_the_background_cpus() {
    // The last CPU this process may use: on a machine with more than one, not what an
    // unpinned thread is allowed (all of them).
    let allowed = uaring_affinity::allowed_cpus().unwrap();
    let last = *allowed.last().unwrap();
    let dir = tempfile_dir::Dir::new("background");
    let mut b = builder(&dir).background_cpus(&last.to_string());
    // The worker pool starts before the server knows where background threads go.
    let _workers = b.workers().unwrap();
    let server = b.start().expect("start");
    // (/proc shows a thread's name cut to 15 bytes: uaring-model-writer is uaring-model-wr.)
    for name in ["uaring-model-wr", "uaring-worker-"] {
        let cpus = threads_named(name);
        assert!(
            cpus.iter().any(|c| c == &[last]),
            "no thread {name}* on CPU {last}: {cpus:?}"
        );
    }
    server.shutdown().unwrap();

    // An expression that selects nothing this process may use is refused at start.
    let dir = tempfile_dir::Dir::new("background-bad");
    let err = builder(&dir)
        .background_cpus("4095")
        .start()
        .err()
        .expect("a start with background_cpus 4095");
    assert!(err.to_string().contains("runtime.background_cpus"), "{err}");
}
