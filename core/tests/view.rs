//! View service set through `dispatch`: Browse, BrowseNext, continuation points,
//! TranslateBrowsePathsToNodeIds, RegisterNodes.

mod dispatch_util;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::{ByteString, ExpandedNodeId, NodeId, QualifiedName, StatusCode};

fn browse(
    h: &mut Harness,
    token: &NodeId,
    max: u32,
    nodes: Vec<BrowseDescription>,
) -> BrowseResponse {
    let r = h.browse_request(token, max, nodes);
    match h.call(r) {
        Response::Browse(b) => *b,
        other => panic!("Browse failed: {other:?}"),
    }
}

fn browse_next(
    h: &mut Harness,
    token: &NodeId,
    release: bool,
    cps: Vec<ByteString>,
) -> BrowseNextResponse {
    let r = h.browse_next_request(token, release, cps);
    match h.call(r) {
        Response::BrowseNext(b) => *b,
        other => panic!("BrowseNext failed: {other:?}"),
    }
}

#[test]
fn paged_browse_matches_one_shot_browse() {
    let mut h = Harness::new();
    let token = h.open_session();
    let all = browse(&mut h, &token, 0, vec![hierarchical(NodeId::ns0(85))]);
    let all = &all.results[0];
    assert_eq!(all.status_code, StatusCode::Good);
    assert!(all.continuation_point.is_null());
    assert!(
        all.references.len() >= 3,
        "Objects has Server and the namespace-1 nodes: {}",
        all.references.len()
    );
    assert!(all
        .references
        .iter()
        .any(|r| r.node_id == ExpandedNodeId::local(NodeId::ns0(2253))));

    let first = browse(&mut h, &token, 1, vec![hierarchical(NodeId::ns0(85))]);
    let mut got = first.results[0].references.clone();
    assert_eq!(got.len(), 1);
    let mut cp = first.results[0].continuation_point.clone();
    let mut pages = 1;
    while !cp.is_null() {
        let next = browse_next(&mut h, &token, false, vec![cp.clone()]);
        assert_eq!(next.results.len(), 1);
        assert_eq!(next.results[0].status_code, StatusCode::Good);
        assert_eq!(next.results[0].references.len(), 1);
        got.extend(next.results[0].references.iter().cloned());
        cp = next.results[0].continuation_point.clone();
        pages += 1;
        assert!(pages <= all.references.len(), "continuation never ends");
    }
    assert_eq!(got, all.references);
    assert_eq!(
        h.state
            .sessions()
            .next()
            .unwrap()
            .continuation_point_count(),
        0,
        "the finished point is gone"
    );

    // Pages of 7 give the same list again.
    let first = browse(&mut h, &token, 7, vec![hierarchical(NodeId::ns0(85))]);
    let mut got = first.results[0].references.clone();
    let mut cp = first.results[0].continuation_point.clone();
    while !cp.is_null() {
        let next = browse_next(&mut h, &token, false, vec![cp]);
        assert!(next.results[0].references.len() <= 7);
        got.extend(next.results[0].references.iter().cloned());
        cp = next.results[0].continuation_point.clone();
    }
    assert_eq!(got, all.references);
}

#[test]
fn browse_next_release_and_invalid_points() {
    let mut h = Harness::new();
    let token = h.open_session();
    let first = browse(&mut h, &token, 1, vec![hierarchical(NodeId::ns0(85))]);
    let cp = first.results[0].continuation_point.clone();
    assert!(!cp.is_null());

    let rel = browse_next(&mut h, &token, true, vec![cp.clone()]);
    assert_eq!(rel.results.len(), 1);
    assert_eq!(rel.results[0].status_code, StatusCode::Good);
    assert!(rel.results[0].references.is_empty());
    assert!(rel.results[0].continuation_point.is_null());

    let again = browse_next(
        &mut h,
        &token,
        false,
        vec![cp.clone(), ByteString::from(vec![1, 2, 3])],
    );
    assert_eq!(
        again.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
    assert_eq!(
        again.results[1].status_code,
        StatusCode::BadContinuationPointInvalid
    );

    let r = h.browse_next_request(&token, false, vec![]);
    assert_eq!(fault_status(&h.call(r)), Some(StatusCode::BadNothingToDo));
}

#[test]
fn continuation_points_die_with_the_session() {
    let mut h = Harness::new();
    let token = h.open_session();
    let first = browse(&mut h, &token, 1, vec![hierarchical(NodeId::ns0(85))]);
    let cp = first.results[0].continuation_point.clone();
    // Points are per session: another session cannot use this one.
    let other = h.open_session();
    let r = browse_next(&mut h, &other, false, vec![cp.clone()]);
    assert_eq!(
        r.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
    let hd = h.header(&token);
    h.call(Request::CloseSession(Box::new(CloseSessionRequest {
        request_header: hd,
        delete_subscriptions: true,
    })));
    let r = h.browse_next_request(&token, false, vec![cp]);
    assert_eq!(
        fault_status(&h.call(r)),
        Some(StatusCode::BadSessionIdInvalid)
    );
}

#[test]
fn continuation_point_limit() {
    let mut config = ServerConfig::default();
    config.operation_limits.max_browse_continuation_points = 2;
    let mut h = Harness::with_config(config);
    let token = h.open_session();
    let objects = || hierarchical(NodeId::ns0(85));

    // Three points needed in one request, two allowed: the third operation fails.
    let b = browse(&mut h, &token, 1, vec![objects(), objects(), objects()]);
    assert_eq!(b.results[0].status_code, StatusCode::Good);
    assert_eq!(b.results[1].status_code, StatusCode::Good);
    assert_eq!(
        b.results[2].status_code,
        StatusCode::BadNoContinuationPoints
    );
    assert!(b.results[2].references.is_empty() && b.results[2].continuation_point.is_null());
    let (cp0, cp1) = (
        b.results[0].continuation_point.clone(),
        b.results[1].continuation_point.clone(),
    );

    // A later request frees the oldest point of a prior request.
    let b2 = browse(&mut h, &token, 1, vec![objects()]);
    assert_eq!(b2.results[0].status_code, StatusCode::Good);
    let cp2 = b2.results[0].continuation_point.clone();
    let n = browse_next(&mut h, &token, false, vec![cp0]);
    assert_eq!(
        n.results[0].status_code,
        StatusCode::BadContinuationPointInvalid
    );
    let n = browse_next(&mut h, &token, false, vec![cp1.clone(), cp2.clone()]);
    assert_eq!(n.results[0].status_code, StatusCode::Good);
    assert_eq!(n.results[1].status_code, StatusCode::Good);
    assert_eq!(
        h.state
            .sessions()
            .next()
            .unwrap()
            .continuation_point_count(),
        2
    );

    // Releasing makes room again.
    browse_next(&mut h, &token, true, vec![cp1, cp2]);
    assert_eq!(
        h.state
            .sessions()
            .next()
            .unwrap()
            .continuation_point_count(),
        0
    );
    let b = browse(&mut h, &token, 1, vec![objects(), objects()]);
    assert!(b
        .results
        .iter()
        .all(|r| r.status_code == StatusCode::Good && !r.continuation_point.is_null()));
}

#[test]
fn browse_operation_errors() {
    let mut h = Harness::new();
    let token = h.open_session();
    let b = browse(
        &mut h,
        &token,
        0,
        vec![
            hierarchical(NodeId::numeric(7, 12345)),
            BrowseDescription {
                reference_type_id: NodeId::ns0(85),
                ..hierarchical(NodeId::ns0(85))
            },
            BrowseDescription {
                reference_type_id: NodeId::numeric(3, 999),
                ..hierarchical(NodeId::ns0(85))
            },
            BrowseDescription {
                browse_direction: BrowseDirection(7),
                ..hierarchical(NodeId::ns0(85))
            },
            BrowseDescription {
                browse_direction: BrowseDirection::Invalid,
                ..hierarchical(NodeId::ns0(85))
            },
        ],
    );
    let codes: Vec<StatusCode> = b.results.iter().map(|r| r.status_code).collect();
    assert_eq!(
        codes,
        vec![
            StatusCode::BadNodeIdUnknown,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::BadBrowseDirectionInvalid,
            StatusCode::BadBrowseDirectionInvalid,
        ]
    );

    let r = h.browse_request(&token, 0, vec![]);
    assert_eq!(fault_status(&h.call(r)), Some(StatusCode::BadNothingToDo));

    let max = ServerConfig::default()
        .operation_limits
        .max_nodes_per_browse as usize;
    let r = h.browse_request(&token, 0, vec![hierarchical(NodeId::ns0(85)); max + 1]);
    assert_eq!(
        fault_status(&h.call(r)),
        Some(StatusCode::BadTooManyOperations)
    );

    for view in [NodeId::ns0(85), NodeId::numeric(1, 424242)] {
        let hd = h.header(&token);
        let r = h.call(Request::Browse(Box::new(BrowseRequest {
            request_header: hd,
            view: ViewDescription {
                view_id: view,
                ..ViewDescription::default()
            },
            requested_max_references_per_node: 0,
            nodes_to_browse: vec![hierarchical(NodeId::ns0(85))],
        })));
        assert_eq!(fault_status(&r), Some(StatusCode::BadViewIdUnknown));
    }
}

#[test]
fn result_mask_node_class_mask_and_direction() {
    let mut h = Harness::new();
    let token = h.open_session();

    // resultMask 0: only the target NodeId.
    let b = browse(
        &mut h,
        &token,
        0,
        vec![BrowseDescription {
            result_mask: 0,
            ..hierarchical(NodeId::ns0(85))
        }],
    );
    let server = b.results[0]
        .references
        .iter()
        .find(|r| r.node_id == ExpandedNodeId::local(NodeId::ns0(2253)))
        .expect("Server under Objects");
    assert_eq!(
        *server,
        ReferenceDescription {
            node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
            ..ReferenceDescription::default()
        }
    );

    // All fields.
    let b = browse(&mut h, &token, 0, vec![hierarchical(NodeId::ns0(85))]);
    let server = b.results[0]
        .references
        .iter()
        .find(|r| r.node_id.node_id == NodeId::ns0(2253))
        .unwrap();
    assert_eq!(server.reference_type_id, NodeId::ns0(35), "Organizes");
    assert!(server.is_forward);
    assert_eq!(server.node_class, NodeClass::Object);
    assert_eq!(server.browse_name, QualifiedName::new(0, "Server"));
    assert_eq!(server.display_name.text.as_str(), "Server");
    let server_type = h
        .state
        .shared()
        .address_space
        .node(&NodeId::ns0(2253))
        .unwrap()
        .type_definition();
    assert_eq!(
        Some(server.type_definition.clone()).filter(|t| !t.node_id.is_null()),
        server_type,
        "ServerType"
    );
    // ServerStatus is a Variable with a type definition.
    let status = browse(&mut h, &token, 0, vec![hierarchical(NodeId::ns0(2253))]);
    let status = status.results[0]
        .references
        .iter()
        .find(|r| r.node_id.node_id == NodeId::ns0(2256))
        .unwrap();
    assert_eq!(status.node_class, NodeClass::Variable);
    assert!(!status.type_definition.node_id.is_null());

    // Only BrowseName (8) and TypeDefinition (32).
    let b = browse(
        &mut h,
        &token,
        0,
        vec![BrowseDescription {
            result_mask: 8 | 32,
            ..hierarchical(NodeId::ns0(85))
        }],
    );
    let server = b.results[0]
        .references
        .iter()
        .find(|r| r.node_id.node_id == NodeId::ns0(2253))
        .unwrap();
    assert_eq!(server.browse_name, QualifiedName::new(0, "Server"));
    assert_eq!(
        Some(server.type_definition.clone()).filter(|t| !t.node_id.is_null()),
        server_type
    );
    assert!(server.reference_type_id.is_null());
    assert_eq!(server.node_class, NodeClass::Unspecified);
    assert!(server.display_name.text.is_null());

    // nodeClassMask: only Variables under Server (ServerStatus, ServiceLevel, …), no Objects.
    let b = browse(
        &mut h,
        &token,
        0,
        vec![BrowseDescription {
            node_class_mask: NodeClass::Variable.0 as u32,
            ..hierarchical(NodeId::ns0(2253))
        }],
    );
    let refs = &b.results[0].references;
    assert!(
        refs.iter().any(|r| r.node_id.node_id == NodeId::ns0(2256)),
        "ServerStatus"
    );
    assert!(refs.iter().all(|r| r.node_class == NodeClass::Variable));

    // Inverse: Server is organized by Objects.
    let b = browse(
        &mut h,
        &token,
        0,
        vec![BrowseDescription {
            browse_direction: BrowseDirection::Inverse,
            ..hierarchical(NodeId::ns0(2253))
        }],
    );
    let refs = &b.results[0].references;
    assert!(refs
        .iter()
        .any(|r| r.node_id.node_id == NodeId::ns0(85) && !r.is_forward));
    assert!(refs.iter().all(|r| !r.is_forward));

    // Both = Forward ∪ Inverse; a null reference type is every reference.
    let any = |dir| BrowseDescription {
        browse_direction: dir,
        reference_type_id: NodeId::NULL,
        include_subtypes: false,
        ..hierarchical(NodeId::ns0(2256))
    };
    let b = browse(
        &mut h,
        &token,
        0,
        vec![
            any(BrowseDirection::Forward),
            any(BrowseDirection::Inverse),
            any(BrowseDirection::Both),
        ],
    );
    assert_eq!(
        b.results[0].references.len() + b.results[1].references.len(),
        b.results[2].references.len()
    );
    assert!(
        b.results[0]
            .references
            .iter()
            .any(|r| r.reference_type_id == NodeId::ns0(40)),
        "HasTypeDefinition"
    );

    // Without subtypes, HierarchicalReferences itself matches nothing on Objects.
    let b = browse(
        &mut h,
        &token,
        0,
        vec![BrowseDescription {
            include_subtypes: false,
            ..hierarchical(NodeId::ns0(85))
        }],
    );
    assert!(b.results[0].references.is_empty());
    assert_eq!(b.results[0].status_code, StatusCode::Good);
}

fn path(start: NodeId, names: &[&str]) -> BrowsePath {
    BrowsePath {
        starting_node: start,
        relative_path: RelativePath {
            elements: names
                .iter()
                .map(|n| RelativePathElement {
                    reference_type_id: NodeId::ns0(33),
                    is_inverse: false,
                    include_subtypes: true,
                    target_name: QualifiedName::new(0, n),
                })
                .collect(),
        },
    }
}

fn translate(h: &mut Harness, token: &NodeId, paths: Vec<BrowsePath>) -> Response {
    let hd = h.header(token);
    h.call(Request::TranslateBrowsePathsToNodeIds(Box::new(
        TranslateBrowsePathsToNodeIdsRequest {
            request_header: hd,
            browse_paths: paths,
        },
    )))
}

#[test]
fn translate_browse_paths() {
    let mut h = Harness::new();
    let token = h.open_session();
    let mut inverse = path(NodeId::ns0(2253), &["Objects"]);
    inverse.relative_path.elements[0].is_inverse = true;
    let mut exact_type = path(NodeId::ns0(84), &["Objects", "Server"]);
    for e in &mut exact_type.relative_path.elements {
        e.reference_type_id = NodeId::ns0(35);
        e.include_subtypes = false;
    }
    let mut wrong_type = path(NodeId::ns0(84), &["Objects"]);
    wrong_type.relative_path.elements[0].reference_type_id = NodeId::ns0(47);
    wrong_type.relative_path.elements[0].include_subtypes = false;
    let mut null_type = path(NodeId::ns0(84), &["Objects", "Server", "ServerStatus"]);
    for e in &mut null_type.relative_path.elements {
        e.reference_type_id = NodeId::NULL;
    }
    let mut empty_middle = path(NodeId::ns0(84), &["Objects", "Server"]);
    empty_middle.relative_path.elements[0].target_name = QualifiedName::default();

    let r = translate(
        &mut h,
        &token,
        vec![
            path(NodeId::ns0(84), &["Objects", "Server"]),
            path(NodeId::ns0(85), &["Server", "ServerStatus", "CurrentTime"]),
            path(NodeId::ns0(84), &["Objects", "NoSuchNode"]),
            path(NodeId::ns0(84), &["Objects", ""]),
            path(NodeId::ns0(84), &[]),
            path(NodeId::numeric(5, 1), &["Objects"]),
            inverse,
            exact_type,
            wrong_type,
            null_type,
            empty_middle,
            path(NodeId::ns0(84), &["Objects", "Server"]),
        ],
    );
    let Response::TranslateBrowsePathsToNodeIds(t) = r else {
        panic!("{r:?}")
    };
    let status: Vec<StatusCode> = t.results.iter().map(|r| r.status_code).collect();
    assert_eq!(
        status,
        vec![
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadNoMatch,
            StatusCode::BadBrowseNameInvalid,
            StatusCode::BadNothingToDo,
            StatusCode::BadNodeIdUnknown,
            StatusCode::Good,
            StatusCode::Good,
            StatusCode::BadNoMatch,
            StatusCode::Good,
            StatusCode::BadBrowseNameInvalid,
            StatusCode::Good,
        ]
    );
    let only = |i: usize| {
        assert_eq!(
            t.results[i].targets.len(),
            1,
            "path {i}: {:?}",
            t.results[i]
        );
        assert_eq!(t.results[i].targets[0].remaining_path_index, u32::MAX);
        t.results[i].targets[0].target_id.clone()
    };
    assert_eq!(only(0), ExpandedNodeId::local(NodeId::ns0(2253)));
    assert_eq!(only(1), ExpandedNodeId::local(NodeId::ns0(2258)));
    assert_eq!(only(6), ExpandedNodeId::local(NodeId::ns0(85)));
    assert_eq!(only(7), ExpandedNodeId::local(NodeId::ns0(2253)));
    assert_eq!(only(9), ExpandedNodeId::local(NodeId::ns0(2256)));
    assert!(t.results[2].targets.is_empty());

    let r = translate(&mut h, &token, vec![]);
    assert_eq!(fault_status(&r), Some(StatusCode::BadNothingToDo));
}

#[test]
fn translate_into_namespace_1() {
    let mut h = Harness::new();
    let token = h.open_session();
    let mut p = path(NodeId::ns0(85), &["BenchmarkValue0"]);
    p.relative_path.elements[0].target_name = QualifiedName::new(1, "BenchmarkValue0");
    let Response::TranslateBrowsePathsToNodeIds(t) = translate(&mut h, &token, vec![p]) else {
        panic!()
    };
    assert_eq!(t.results[0].status_code, StatusCode::Good);
    assert_eq!(
        t.results[0].targets[0].target_id,
        ExpandedNodeId::local(NodeId::numeric(1, 1001))
    );
}

#[test]
fn register_and_unregister_nodes() {
    let mut h = Harness::new();
    let token = h.open_session();
    let ids = vec![
        NodeId::numeric(1, 1001),
        NodeId::string(1, "anything"),
        NodeId::ns0(2258),
    ];
    let hd = h.header(&token);
    let r = h.call(Request::RegisterNodes(Box::new(RegisterNodesRequest {
        request_header: hd,
        nodes_to_register: ids.clone(),
    })));
    let Response::RegisterNodes(reg) = r else {
        panic!("{r:?}")
    };
    assert_eq!(reg.registered_node_ids, ids);
    let hd = h.header(&token);
    let r = h.call(Request::UnregisterNodes(Box::new(UnregisterNodesRequest {
        request_header: hd,
        nodes_to_unregister: ids,
    })));
    assert!(matches!(r, Response::UnregisterNodes(_)), "{r:?}");
    let hd = h.header(&token);
    let r = h.call(Request::RegisterNodes(Box::new(RegisterNodesRequest {
        request_header: hd,
        nodes_to_register: vec![],
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadNothingToDo));
    let hd = h.header(&token);
    let r = h.call(Request::UnregisterNodes(Box::new(UnregisterNodesRequest {
        request_header: hd,
        nodes_to_unregister: vec![],
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadNothingToDo));
}

/// A Browse within a View sees the View's nodes only: the View organizes a folder with one
/// variable; the folder's other variable is organized from Objects, outside the View.
#[test]
fn browse_within_a_view_sees_its_nodes_only() {
    use uaring_core::address_space::build::make;
    use uaring_core::address_space::{ClassAttributes, Node, NodeClass, Reference};
    use uaring_core::shared::ServerShared;
    use uaring_core::{DataValue, LocalizedText, Variant};
    let view = NodeId::string(1, "LineView");
    let folder = NodeId::string(1, "Line");
    let inside = NodeId::string(1, "Line.Speed");
    let outside = NodeId::string(1, "Line.Secret");
    let shared =
        ServerShared::new_with(ServerConfig::default(), dispatch_util::start(), &mut |b| {
            b.add(Node {
                node_id: view.clone(),
                node_class: NodeClass::View,
                browse_name: QualifiedName::new(1, "LineView"),
                display_name: LocalizedText::text("LineView"),
                description: LocalizedText::default(),
                write_mask: 0,
                user_write_mask: 0,
                references: vec![Reference {
                    reference_type: NodeId::ns0(35), // Organizes, from the Views folder
                    is_forward: false,
                    target: ExpandedNodeId::local(NodeId::ns0(87)),
                }]
                .into(),
                generation: 0,
                attributes: ClassAttributes::View {
                    contains_no_loops: true,
                    event_notifier: 0,
                },
            })?;
            b.add(make::folder(
                folder.clone(),
                QualifiedName::new(1, "Line"),
                view.clone(),
            ))?;
            for (id, parent, reference) in
                [(&inside, &folder, 47u32), (&outside, &NodeId::ns0(85), 35)]
            {
                let name = match &id.identifier {
                    uaring_core::Identifier::String(s) => s.as_str().to_string(),
                    _ => unreachable!(),
                };
                b.add(make::variable(
                    id.clone(),
                    QualifiedName::new(1, &name),
                    NodeId::ns0(11),
                    -1,
                    Vec::new(),
                    DataValue::new(Variant::Double(1.0)),
                    make::READ_ONLY,
                    0.0,
                    Some((parent.clone(), reference)),
                ))?;
            }
            Ok(())
        })
        .unwrap();
    let mut h = dispatch_util::Harness::on_shared(shared, 0);
    let token = h.open_session();
    let within = |h: &mut dispatch_util::Harness, id: &NodeId| {
        let hd = h.header(&token);
        match h.call(Request::Browse(Box::new(BrowseRequest {
            request_header: hd,
            view: ViewDescription {
                view_id: view.clone(),
                ..ViewDescription::default()
            },
            requested_max_references_per_node: 0,
            nodes_to_browse: vec![hierarchical(id.clone())],
        }))) {
            Response::Browse(b) => b.results.into_iter().next().unwrap(),
            other => panic!("{other:?}"),
        }
    };
    let targets = |r: &BrowseResult| -> Vec<NodeId> {
        r.references
            .iter()
            .map(|d| d.node_id.node_id.clone())
            .collect()
    };
    let r = within(&mut h, &view);
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(targets(&r), vec![folder.clone()]);
    let r = within(&mut h, &folder);
    assert_eq!(r.status_code, StatusCode::Good);
    assert_eq!(
        targets(&r),
        vec![inside.clone()],
        "the View's variable only"
    );
    // Outside the View: not in it; unknown stays unknown.
    assert_eq!(
        within(&mut h, &NodeId::ns0(85)).status_code,
        StatusCode::BadNodeNotInView
    );
    assert_eq!(
        within(&mut h, &outside).status_code,
        StatusCode::BadNodeNotInView
    );
    assert_eq!(
        within(&mut h, &NodeId::numeric(7, 12345)).status_code,
        StatusCode::BadNodeIdUnknown
    );
    // Every forward reference of the folder: within the View its HasTypeDefinition to
    // FolderType (not a node of the View) is left out; without the View it is there.
    let all = BrowseDescription {
        reference_type_id: NodeId::NULL,
        ..hierarchical(folder.clone())
    };
    let hd = h.header(&token);
    let Response::Browse(b) = h.call(Request::Browse(Box::new(BrowseRequest {
        request_header: hd,
        view: ViewDescription {
            view_id: view.clone(),
            ..ViewDescription::default()
        },
        requested_max_references_per_node: 0,
        nodes_to_browse: vec![all.clone()],
    }))) else {
        panic!()
    };
    assert_eq!(targets(&b.results[0]), vec![inside.clone()]);
    let b = browse(&mut h, &token, 0, vec![all]);
    let t = targets(&b.results[0]);
    assert!(t.contains(&inside) && t.contains(&NodeId::ns0(61)), "{t:?}");
    let b = browse(&mut h, &token, 0, vec![hierarchical(NodeId::ns0(85))]);
    assert!(targets(&b.results[0]).contains(&outside));
}

/// A Browse of many nodes reads their lookups ahead in groups (the node store's
/// `prefetch_nodes`): each result is exactly that of a Browse of its node alone, across the
/// groups' boundaries, unknown nodes included.
#[test]
fn many_nodes_browse_as_one_each() {
    let mut h = Harness::new();
    let token = h.open_session();
    let nodes: Vec<BrowseDescription> = (0..40u32)
        .map(|i| {
            let id = match i % 5 {
                0 => NodeId::ns0(85),
                1 => NodeId::string(1, "Demo"),
                2 => NodeId::string(1, format!("Nope.{i}")),
                3 => NodeId::ns0(2253),
                _ => NodeId::numeric(1, 1001 + i),
            };
            BrowseDescription {
                browse_direction: BrowseDirection::Both,
                ..hierarchical(id)
            }
        })
        .collect();
    let one_each: Vec<BrowseResult> = nodes
        .iter()
        .map(|n| browse(&mut h, &token, 0, vec![n.clone()]).results.remove(0))
        .collect();
    assert!(one_each
        .iter()
        .any(|r| r.status_code == StatusCode::BadNodeIdUnknown));
    assert!(one_each.iter().any(|r| !r.references.is_empty()));
    let all = browse(&mut h, &token, 0, nodes);
    assert_eq!(all.results, one_each);
}
