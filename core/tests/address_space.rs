//! The built address space: namespace 0, inverse references, the type hierarchy, namespace 1.

#[path = "support/content.rs"]
mod content;
use uaring_core::address_space::{ids, AttrsView, NodeClass, SourceView};
use uaring_core::config::ServerConfig;
use uaring_core::*;

fn now() -> Now {
    Now::new(
        5_000_000_000,
        DateTime::from_unix_nanos(1_700_000_000_000_000_000),
    )
}

fn has_ref(
    space: &uaring_core::address_space::AddressSpace,
    from: &NodeId,
    rt: u32,
    fwd: bool,
    to: &NodeId,
) -> bool {
    space.node(from).unwrap().references().any(|r| {
        r.reference_type == NodeId::ns0(rt)
            && r.is_forward == fwd
            && r.target.as_local() == Some(to)
    })
}

#[test]
fn key_ns0_nodes() {
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    for (id, name, class) in [
        (84, "Root", NodeClass::Object),
        (85, "Objects", NodeClass::Object),
        (2253, "Server", NodeClass::Object),
        (35, "Organizes", NodeClass::ReferenceType),
        (6, "Int32", NodeClass::DataType),
        (61, "FolderType", NodeClass::ObjectType),
        (63, "BaseDataVariableType", NodeClass::VariableType),
        (2256, "ServerStatus", NodeClass::Variable),
    ] {
        let n = a.node(&NodeId::ns0(id)).unwrap_or_else(|| panic!("i={id}"));
        assert_eq!(n.browse_name(), QualifiedName::new(0, name));
        assert_eq!(n.node_class(), class);
        assert_eq!(
            a.browse_name_of(&NodeId::ns0(id)),
            Some(QualifiedName::new(0, name))
        );
    }
    assert!(a.node(&NodeId::ns0(999_999)).is_none());
    assert!(a.node(&NodeId::string(0, "nope")).is_none());
    assert!(a.node(&NodeId::numeric(7, 85)).is_none());
    assert_eq!(
        a.namespace_uris(),
        &[
            "http://opcfoundation.org/UA/".to_string(),
            "urn:uaring:server".to_string()
        ]
    );
}

#[test]
fn inverse_references_are_added_once() {
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    let server = NodeId::ns0(ids::SERVER);
    assert!(has_ref(a, &objects, ids::ORGANIZES, true, &server));
    assert!(has_ref(a, &server, ids::ORGANIZES, false, &objects));
    let b0 = NodeId::numeric(1, 1001);
    assert!(has_ref(a, &objects, ids::ORGANIZES, true, &b0));
    assert!(has_ref(a, &b0, ids::ORGANIZES, false, &objects));
    assert!(has_ref(
        a,
        &b0,
        ids::HAS_TYPE_DEFINITION,
        true,
        &NodeId::ns0(ids::BASE_DATA_VARIABLE_TYPE)
    ));
    assert_eq!(
        a.type_definition_of(&b0)
            .and_then(|t| t.as_local().cloned()),
        Some(NodeId::ns0(ids::BASE_DATA_VARIABLE_TYPE))
    );
    // Subtype links exist in both directions.
    assert!(has_ref(
        a,
        &NodeId::ns0(27),
        ids::HAS_SUBTYPE,
        true,
        &NodeId::ns0(6)
    ));
    assert!(has_ref(
        a,
        &NodeId::ns0(6),
        ids::HAS_SUBTYPE,
        false,
        &NodeId::ns0(27)
    ));
    // No node lists the same reference twice.
    for n in a.nodes() {
        let mut refs: Vec<_> = n.references().collect();
        refs.sort();
        let len = refs.len();
        refs.dedup();
        assert_eq!(refs.len(), len, "{}", n.node_id());
    }
}

#[test]
fn type_hierarchy() {
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    let t = |x: u32| NodeId::ns0(x);
    assert!(a.is_subtype_of(&t(6), &t(6)));
    assert!(a.is_subtype_of(&t(6), &t(27)));
    assert!(a.is_subtype_of(&t(6), &t(26)));
    assert!(a.is_subtype_of(&t(6), &t(24)));
    assert!(!a.is_subtype_of(&t(11), &t(27)));
    assert!(!a.is_subtype_of(&t(24), &t(6)));
    assert!(a.is_subtype_of(&t(290), &t(11))); // Duration is a Double
    assert!(a.is_subtype_of(&t(ids::HAS_COMPONENT), &t(ids::HIERARCHICAL_REFERENCES)));
    assert!(a.is_subtype_of(&t(ids::ORGANIZES), &t(ids::REFERENCES)));
    assert!(!a.is_subtype_of(
        &t(ids::HAS_TYPE_DEFINITION),
        &t(ids::HIERARCHICAL_REFERENCES)
    ));
    assert!(a.is_subtype_of(&t(ids::FOLDER_TYPE), &t(ids::BASE_OBJECT_TYPE)));
    assert!(a.is_subtype_of(&t(ids::PROPERTY_TYPE), &t(ids::BASE_VARIABLE_TYPE)));
    assert!(!a.is_subtype_of(&t(999_999), &t(999_999)));
    assert!(!a.is_subtype_of(&t(6), &t(999_999)));
}

#[test]
fn namespace1_benchmark_and_demo() {
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    for i in 0..100u32 {
        let n = a.node(&NodeId::numeric(1, 1001 + i)).unwrap();
        assert_eq!(
            n.browse_name(),
            QualifiedName::new(1, &format!("BenchmarkValue{i}"))
        );
        assert_eq!(n.display_name().text.as_str(), format!("BenchmarkValue{i}"));
        let v = n.as_variable().unwrap();
        assert_eq!(*v.data_type(), NodeId::ns0(6));
        assert_eq!(v.value_rank(), -1);
        assert_eq!(v.access_level() & 3, 3);
    }
    assert!(a.node(&NodeId::numeric(1, 1101)).is_none());
    for (k, n) in [10u32, 100, 1000].into_iter().enumerate() {
        let node = a.node(&NodeId::numeric(1, 2001 + k as u32)).unwrap();
        assert_eq!(
            node.browse_name().name.as_str(),
            format!("BenchmarkArray{n}")
        );
        let dv = a.variable_value(node, now()).unwrap();
        let arr = dv.value.as_array().unwrap();
        assert_eq!(arr.values.len(), n as usize);
        assert_eq!(
            arr.values[(n - 1) as usize],
            Variant::Int32(((n - 1) % 1000) as i32)
        );
    }
    for id in [
        "Demo",
        "Demo.Static",
        "Demo.Static.Arrays",
        "Demo.ReadOnly",
        "Demo.Dynamic",
        "Demo.Static.Variant",
        "Demo.Dynamic.Counter",
    ] {
        assert!(a.node(&NodeId::string(1, id)).is_some(), "{id}");
    }
    let demo = NodeId::string(1, "Demo");
    assert!(has_ref(
        a,
        &NodeId::ns0(ids::OBJECTS_FOLDER),
        ids::ORGANIZES,
        true,
        &demo
    ));
    assert!(has_ref(
        a,
        &demo,
        ids::HAS_TYPE_DEFINITION,
        true,
        &NodeId::ns0(ids::FOLDER_TYPE)
    ));
    assert!(has_ref(
        a,
        &NodeId::string(1, "Demo.Static"),
        ids::HAS_COMPONENT,
        true,
        &NodeId::string(1, "Demo.Static.Int32")
    ));
    let counter = a.node(&NodeId::string(1, "Demo.Dynamic.Counter")).unwrap();
    assert!(
        matches!(counter.attributes(), AttrsView::Variable(v) if matches!(v.source(), SourceView::Computed(_))),
        "a computed value, as an application's would be"
    );
}

#[test]
fn contract_mode() {
    let s = content::new_with(
        ServerConfig::contract(),
        now(),
        &content::Content::contract(),
    )
    .unwrap();
    let a = &s.address_space;
    assert_eq!(a.namespace_uris()[1], "urn:o6:benchmark:server");
    assert!(a.node(&NodeId::string(1, "Demo")).is_none());
    assert!(a.node(&NodeId::numeric(1, 1100)).is_some());
    assert_eq!(a.namespace_index("urn:o6:benchmark:server"), Some(1));
}

#[test]
fn invalid_config_is_refused() {
    let mut c = ServerConfig::default();
    c.operation_limits.max_nodes_per_write = 0;
    assert!(content::new(c, now()).is_err());
}

#[test]
fn whole_namespace0_is_loaded() {
    let s = uaring_core::shared::ServerShared::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    let ns0 = a.nodes().filter(|n| n.node_id().namespace == 0).count();
    // Less the optional Server nodes left out (address_space::build::ns0::OMITTED and
    // what is under them): 5 OperationLimits, HistoryServerCapabilities with 17 nodes, 4
    // ServerCapabilities totals (26), and the features not implemented: PublishSubscribe,
    // ServerConfiguration, Resources and the default history configurations with what is
    // under them, 4 Server variables, Aliases.LastChange and namespace 0's 3 default
    // permission properties (291).
    assert_eq!(ns0, uaring_core::generated::ns0::NODE_COUNT - 26 - 291);
    for gone in [
        14443, 12637, 24226, 32637, 32754, 17634, 12885, 15004, 2289, 32852, 16134,
    ] {
        assert!(a.node(&NodeId::ns0(gone)).is_none(), "i={gone} is left out");
    }
    // Nothing left refers to a node left out.
    for n in a.nodes() {
        for r in n.references() {
            if let Some(t) = r.target.as_local().filter(|t| t.namespace == 0) {
                assert!(
                    a.node(t).is_some(),
                    "{} refers to the missing {t}",
                    n.node_id()
                );
            }
        }
    }
    // Core adds nothing to namespace 1: what is there is the application's.
    assert_eq!(a.nodes().filter(|n| n.node_id().namespace == 1).count(), 0);
    // Encodings map to their DataType.
    assert_eq!(
        a.data_type_of_encoding(&NodeId::ns0(864)),
        Some(&NodeId::ns0(862))
    );
    assert!(a.is_subtype_of(&NodeId::ns0(862), &NodeId::ns0(22)));
    // An enumeration DataType.
    assert!(a.is_subtype_of(&NodeId::ns0(852), &NodeId::ns0(29)));
    // Every declared reference's local target got its inverse (but HasTypeDefinition: a
    // field of the instance, its inverse is not kept, docs/Architecture.md "The node store").
    for n in a.nodes() {
        for r in n.references() {
            if r.reference_type == NodeId::ns0(ids::HAS_TYPE_DEFINITION) {
                assert!(r.is_forward, "{}", n.node_id());
                continue;
            }
            if let Some(t) = r.target.as_local().and_then(|t| a.node(t)) {
                assert!(
                    t.references().any(|b| b.reference_type == r.reference_type
                        && b.is_forward != r.is_forward
                        && b.target.as_local() == Some(&n.node_id())),
                    "{} -> {}",
                    n.node_id(),
                    t.node_id()
                );
            }
        }
    }
}

/// Every Variable under Server.ServerCapabilities (OperationLimits included) has a
/// value: a limit the server does not have is not in the address space, rather than
/// readable as Null.
#[test]
fn server_capabilities_have_no_null_values() {
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    let mut stack = vec![NodeId::ns0(2268)]; // Server_ServerCapabilities
    let mut nulls = Vec::new();
    let mut seen = 0;
    while let Some(id) = stack.pop() {
        let n = a.node(&id).unwrap_or_else(|| panic!("{id}"));
        if n.node_class() == NodeClass::Variable {
            seen += 1;
            let v = a.variable_value(n, now()).expect("a value");
            // Mandatory, of services not offered (Query; HistoryRead without a history
            // store): 0 would read as "no limit", so they stay without a value.
            let mandatory_unoffered = [2736u32, 2737].iter().any(|&i| id == NodeId::ns0(i));
            if matches!(v.value, Variant::Empty) && !mandatory_unoffered {
                nulls.push(format!("{} {}", id, n.browse_name().name));
            }
        }
        if id == NodeId::ns0(15606) {
            continue; // RoleSet: role management is not offered (its own issue)
        }
        for r in n.references() {
            // HasComponent (47), HasProperty (46), forward.
            if r.is_forward
                && (r.reference_type == NodeId::ns0(46) || r.reference_type == NodeId::ns0(47))
            {
                if let Some(t) = r.target.as_local() {
                    if a.node(t).is_some() {
                        stack.push(t.clone());
                    }
                }
            }
        }
    }
    assert!(seen >= 10, "{seen}");
    assert!(nulls.is_empty(), "Null-valued capabilities: {nulls:#?}");
    let cap = |i: u32| {
        a.variable_value(a.node(&NodeId::ns0(i)).unwrap(), now())
            .unwrap()
            .value
    };
    assert_eq!(
        cap(24098),
        Variant::UInt32(100),
        "MaxSubscriptionsPerSession"
    );
    assert_eq!(
        cap(31916),
        Variant::UInt32(10_000),
        "MaxMonitoredItemsQueueSize"
    );
    for gone in [
        11713u32, 12165, 12166, 12167, 12168, 11192, 24095, 24096, 24097, 24101,
    ] {
        assert!(
            a.node(&NodeId::ns0(gone)).is_none(),
            "i={gone} is not offered"
        );
    }
}

/// ServerCapabilities.AggregateFunctions organizes exactly the aggregates an AggregateFilter
/// computes, on a server without a history store too (HistoryServerCapabilities, and its
/// own AggregateFunctions folder, are then not there).
#[test]
fn server_capabilities_list_the_aggregates_monitored_items_compute() {
    use uaring_core::generated::node_ids as n;
    use uaring_core::history::aggregate::Aggregate;
    let s = content::new(ServerConfig::default(), now()).unwrap();
    let a = &s.address_space;
    let folder = NodeId::ns0(n::Server_ServerCapabilities_AggregateFunctions);
    let mut listed: Vec<NodeId> = a
        .node(&folder)
        .unwrap()
        .references()
        .filter(|r| r.is_forward && r.reference_type == NodeId::ns0(35))
        .filter_map(|r| r.target.as_local().cloned())
        .collect();
    let mut all: Vec<NodeId> = Aggregate::ALL.iter().map(|x| x.node_id()).collect();
    listed.sort_by_key(|x| x.to_string());
    all.sort_by_key(|x| x.to_string());
    assert_eq!(listed, all);
    for id in &all {
        assert!(has_ref(a, id, 35, false, &folder), "{id} organized back");
    }
    assert!(a.node(&NodeId::ns0(n::HistoryServerCapabilities)).is_none());
}
