//! NodeManagement through `dispatch` (Part 4 §5.7): AddNodes, AddReferences, DeleteNodes,
//! DeleteReferences by a ConfigureAdmin session, refused to others, the Part 4 statuses, and
//! the GeneralModelChangeEvent on the Server object.

mod dispatch_util;

use std::sync::Arc;

use dispatch_util::*;
use uaring_core::config::ServerConfig;
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::roles::{Roles, WellKnownRole};
use uaring_core::secure_channel::{SecurityProvider, UserTokenSettings};
use uaring_core::server::service_state::ServiceState;
use uaring_core::shared::ServerShared;
use uaring_core::{
    DataValue, ExpandedNodeId, ExtensionObject, NodeId, QualifiedName, StatusCode, Variant,
};

fn session(shared: Arc<ServerShared>, shard: usize, roles: Roles) -> (Harness, NodeId) {
    let mut h = Harness::on_shared(shared.clone(), shard);
    let mut security = SecurityProvider::none_only();
    security.set_user_tokens(UserTokenSettings {
        anonymous: Some(roles),
        ..UserTokenSettings::default()
    });
    h.state = ServiceState::new(
        shared,
        shard,
        Box::new(uaring_core::random::ChaCha::from_u64(shard as u64 + 1)),
    )
    .with_security(security);
    h.channel = h.state.next_channel_id();
    let token = h.open_session();
    (h, token)
}

fn admin() -> Roles {
    Roles::OPERATOR.and(WellKnownRole::ConfigureAdmin)
}

fn variable_item(parent: NodeId, id: NodeId, name: &str, v: f64) -> AddNodesItem {
    AddNodesItem {
        parent_node_id: ExpandedNodeId::local(parent),
        reference_type_id: NodeId::ns0(35),
        requested_new_node_id: ExpandedNodeId::local(id),
        browse_name: QualifiedName::new(1, name),
        node_class: NodeClass::Variable,
        node_attributes: ExtensionObject::from_struct(&VariableAttributes {
            value: Variant::Double(v),
            data_type: NodeId::ns0(11),
            value_rank: -1,
            access_level: 3,
            ..Default::default()
        }),
        type_definition: ExpandedNodeId::local(NodeId::ns0(63)),
    }
}

fn object_item(parent: NodeId, id: NodeId, name: &str, type_def: u32) -> AddNodesItem {
    AddNodesItem {
        parent_node_id: ExpandedNodeId::local(parent),
        reference_type_id: NodeId::ns0(35),
        requested_new_node_id: ExpandedNodeId::local(id),
        browse_name: QualifiedName::new(1, name),
        node_class: NodeClass::Object,
        node_attributes: ExtensionObject::null(),
        type_definition: ExpandedNodeId::local(NodeId::ns0(type_def)),
    }
}

fn add(h: &mut Harness, token: &NodeId, items: Vec<AddNodesItem>) -> Vec<AddNodesResult> {
    let header = h.header(token);
    match h.call(Request::AddNodes(Box::new(AddNodesRequest {
        request_header: header,
        nodes_to_add: items,
    }))) {
        Response::AddNodes(r) => r.results,
        other => panic!("{other:?}"),
    }
}

fn delete(h: &mut Harness, token: &NodeId, ids: Vec<NodeId>) -> Vec<StatusCode> {
    let header = h.header(token);
    match h.call(Request::DeleteNodes(Box::new(DeleteNodesRequest {
        request_header: header,
        nodes_to_delete: ids
            .into_iter()
            .map(|node_id| DeleteNodesItem {
                node_id,
                delete_target_references: true,
            })
            .collect(),
    }))) {
        Response::DeleteNodes(r) => r.results,
        other => panic!("{other:?}"),
    }
}

fn read_value(h: &mut Harness, token: &NodeId, id: NodeId) -> DataValue {
    let r = h.read_request(token, id);
    match h.call(r) {
        Response::Read(r) => r.results[0].clone(),
        other => panic!("{other:?}"),
    }
}

fn objects_children(h: &mut Harness, token: &NodeId) -> Vec<NodeId> {
    let r = h.browse_request(token, 0, vec![hierarchical(NodeId::ns0(85))]);
    match h.call(r) {
        Response::Browse(b) => b.results[0]
            .references
            .iter()
            .map(|r| r.node_id.node_id.clone())
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_admin_adds_and_deletes_nodes_others_are_refused() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let (mut adm, at) = session(shared.clone(), 0, admin());
    let (mut op, ot) = session(shared.clone(), 1, Roles::OPERATOR);
    let folder = NodeId::string(1, "Line9");
    let var = NodeId::string(1, "Line9.Speed");
    // Refused to an operator (no AddNode).
    let r = add(
        &mut op,
        &ot,
        vec![object_item(NodeId::ns0(85), folder.clone(), "Line9", 61)],
    );
    assert_eq!(r[0].status_code, StatusCode::BadUserAccessDenied);
    // A folder and a variable in it, in one request.
    let r = add(
        &mut adm,
        &at,
        vec![
            object_item(NodeId::ns0(85), folder.clone(), "Line9", 61),
            variable_item(folder.clone(), var.clone(), "Speed", 1.5),
        ],
    );
    assert_eq!(r[0].status_code, StatusCode::Good, "{r:?}");
    assert_eq!(r[0].added_node_id, folder);
    assert_eq!(r[1].status_code, StatusCode::Good, "{r:?}");
    // The admin's shard sees it at once, the other one after its next timer pass.
    assert_eq!(
        read_value(&mut adm, &at, var.clone()).value,
        Variant::Double(1.5)
    );
    op.state.on_timer(op.now);
    assert_eq!(
        read_value(&mut op, &ot, var.clone()).value,
        Variant::Double(1.5)
    );
    assert!(objects_children(&mut op, &ot).contains(&folder));
    // The Part 4 statuses.
    let r = add(
        &mut adm,
        &at,
        vec![
            variable_item(folder.clone(), var.clone(), "Speed2", 1.0),
            variable_item(folder.clone(), NodeId::string(1, "Line9.X"), "Speed", 1.0),
            variable_item(
                NodeId::string(1, "Nope"),
                NodeId::string(1, "Line9.Y"),
                "Y",
                1.0,
            ),
            object_item(NodeId::ns0(85), NodeId::string(1, "Line9.Z"), "Z", 63),
            object_item(NodeId::ns0(85), NodeId::ns0(99_999), "Ns0", 61),
            AddNodesItem {
                node_class: NodeClass::ReferenceType,
                ..object_item(NodeId::ns0(85), NodeId::string(1, "R"), "R", 61)
            },
            AddNodesItem {
                reference_type_id: NodeId::ns0(40),
                ..object_item(NodeId::ns0(85), NodeId::string(1, "T"), "T", 61)
            },
            AddNodesItem {
                node_attributes: ExtensionObject::from_struct(&VariableAttributes {
                    value: Variant::String("text".into()),
                    data_type: NodeId::ns0(11),
                    value_rank: -1,
                    ..Default::default()
                }),
                ..variable_item(folder.clone(), NodeId::string(1, "Line9.W"), "W", 0.0)
            },
        ],
    );
    let got: Vec<StatusCode> = r.iter().map(|r| r.status_code).collect();
    assert_eq!(
        got,
        vec![
            StatusCode::BadNodeIdExists,
            StatusCode::BadBrowseNameDuplicated,
            StatusCode::BadParentNodeIdInvalid,
            StatusCode::BadTypeDefinitionInvalid,
            StatusCode::BadNodeIdRejected,
            StatusCode::BadNodeClassInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::BadNodeAttributesInvalid,
        ]
    );
    // References.
    let header = adm.header(&at);
    let r = adm.call(Request::AddReferences(Box::new(AddReferencesRequest {
        request_header: header,
        references_to_add: vec![
            AddReferencesItem {
                source_node_id: folder.clone(),
                reference_type_id: NodeId::ns0(47),
                is_forward: true,
                target_server_uri: Default::default(),
                target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                target_node_class: NodeClass::Object,
            },
            AddReferencesItem {
                source_node_id: NodeId::string(1, "Nope"),
                reference_type_id: NodeId::ns0(47),
                is_forward: true,
                target_server_uri: Default::default(),
                target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                target_node_class: NodeClass::Unspecified,
            },
            AddReferencesItem {
                source_node_id: folder.clone(),
                reference_type_id: NodeId::ns0(2253),
                is_forward: true,
                target_server_uri: Default::default(),
                target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                target_node_class: NodeClass::Unspecified,
            },
            AddReferencesItem {
                source_node_id: folder.clone(),
                reference_type_id: NodeId::ns0(47),
                is_forward: true,
                target_server_uri: Default::default(),
                target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                target_node_class: NodeClass::Variable,
            },
        ],
    })));
    let Response::AddReferences(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(
        r.results,
        vec![
            StatusCode::Good,
            StatusCode::BadSourceNodeIdInvalid,
            StatusCode::BadReferenceTypeIdInvalid,
            StatusCode::BadNodeClassInvalid,
        ]
    );
    let header = adm.header(&at);
    let r = adm.call(Request::DeleteReferences(Box::new(
        DeleteReferencesRequest {
            request_header: header,
            references_to_delete: vec![
                DeleteReferencesItem {
                    source_node_id: folder.clone(),
                    reference_type_id: NodeId::ns0(47),
                    is_forward: true,
                    target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                    delete_bidirectional: true,
                },
                DeleteReferencesItem {
                    source_node_id: folder.clone(),
                    reference_type_id: NodeId::ns0(47),
                    is_forward: true,
                    target_node_id: ExpandedNodeId::local(NodeId::ns0(2253)),
                    delete_bidirectional: true,
                },
            ],
        },
    )));
    let Response::DeleteReferences(r) = r else {
        panic!("{r:?}")
    };
    assert_eq!(r.results, vec![StatusCode::Good, StatusCode::BadNotFound]);
    // Deleting: namespace 0 never, others not, the admin yes.
    assert_eq!(
        delete(
            &mut adm,
            &at,
            vec![NodeId::ns0(2253), NodeId::string(1, "Nope")]
        ),
        vec![
            StatusCode::BadUserAccessDenied,
            StatusCode::BadNodeIdUnknown
        ]
    );
    op.state.on_timer(op.now);
    assert_eq!(
        delete(&mut op, &ot, vec![var.clone()]),
        vec![StatusCode::BadUserAccessDenied]
    );
    assert_eq!(
        delete(&mut adm, &at, vec![var.clone(), folder.clone()]),
        vec![StatusCode::Good, StatusCode::Good]
    );
    assert_eq!(
        read_value(&mut adm, &at, var.clone()).status,
        Some(StatusCode::BadNodeIdUnknown)
    );
    op.state.on_timer(op.now);
    assert!(!objects_children(&mut op, &ot).contains(&folder));
    // Too many in one request.
    let max = shared.config.operation_limits.max_nodes_per_node_management as usize;
    let header = adm.header(&at);
    let r = adm.call(Request::DeleteNodes(Box::new(DeleteNodesRequest {
        request_header: header,
        nodes_to_delete: vec![DeleteNodesItem::default(); max + 1],
    })));
    assert_eq!(fault_status(&r), Some(StatusCode::BadTooManyOperations));
}

#[test]
fn each_change_raises_a_general_model_change_event() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let (mut adm, at) = session(shared.clone(), 0, admin());
    let mut cursor = shared.events.bus.cursor();
    let folder = NodeId::string(1, "Line7");
    let r = add(
        &mut adm,
        &at,
        vec![object_item(NodeId::ns0(85), folder.clone(), "Line7", 61)],
    );
    assert!(r[0].status_code.is_good());
    delete(&mut adm, &at, vec![folder.clone()]);
    let mut seen = Vec::new();
    cursor.poll(&shared.events.bus, |ev| {
        if ev.event_type == NodeId::ns0(2133) {
            let Variant::Array(a) = ev.field_ns0("Changes") else {
                panic!("Changes is an array")
            };
            let changes: Vec<ModelChangeStructureDataType> = a
                .values
                .iter()
                .map(|v| match v {
                    Variant::ExtensionObject(e) => e
                        .decode_as::<ModelChangeStructureDataType>(Default::default())
                        .unwrap()
                        .unwrap(),
                    other => panic!("{other:?}"),
                })
                .collect();
            seen.push(changes);
        }
    });
    assert_eq!(seen.len(), 2, "one event per request");
    let added = seen[0].iter().find(|c| c.affected == folder).unwrap();
    assert_eq!(added.verb, 1);
    assert_eq!(added.affected_type, NodeId::ns0(61));
    assert!(seen[0]
        .iter()
        .any(|c| c.affected == NodeId::ns0(85) && c.verb == 4));
    assert!(seen[1]
        .iter()
        .any(|c| c.affected == folder && c.verb & 2 != 0));
}

fn children_of(h: &mut Harness, token: &NodeId, parent: NodeId) -> Vec<NodeId> {
    let r = h.browse_request(token, 0, vec![hierarchical(parent)]);
    match h.call(r) {
        Response::Browse(b) => b.results[0]
            .references
            .iter()
            .map(|r| r.node_id.node_id.clone())
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Many nodes under one parent in one request: each BrowseName is checked against the
/// parent's children from before the request and the ones added earlier in it (the
/// request's set of sibling names), and deleting most of a folder's children in one
/// request leaves exactly the others.
#[test]
fn names_in_one_request_are_checked_against_each_other_and_deletes_leave_the_rest() {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let (mut adm, at) = session(shared.clone(), 0, admin());
    let folder = NodeId::string(1, "Line5");
    let id = |i: u32| NodeId::string(1, format!("Line5.V{i}"));
    let r = add(
        &mut adm,
        &at,
        vec![
            object_item(NodeId::ns0(85), folder.clone(), "Line5", 61),
            variable_item(folder.clone(), id(0), "V0", 0.0),
        ],
    );
    assert!(r.iter().all(|r| r.status_code.is_good()), "{r:?}");
    let mut items: Vec<AddNodesItem> = (1..40)
        .map(|i| variable_item(folder.clone(), id(i), &format!("V{i}"), i as f64))
        .collect();
    // A name added earlier in this request, one from before it, one only in another
    // namespace (not a duplicate), and a null requested id with a new name.
    items.push(variable_item(folder.clone(), id(100), "V7", 0.0));
    items.push(variable_item(folder.clone(), id(101), "V0", 0.0));
    items.push(AddNodesItem {
        browse_name: QualifiedName::new(0, "V3"),
        ..variable_item(folder.clone(), id(102), "", 0.0)
    });
    items.push(variable_item(folder.clone(), NodeId::NULL, "V103", 0.0));
    let r = add(&mut adm, &at, items);
    let got: Vec<StatusCode> = r.iter().map(|r| r.status_code).collect();
    let mut want = vec![StatusCode::Good; 39];
    want.extend([
        StatusCode::BadBrowseNameDuplicated,
        StatusCode::BadBrowseNameDuplicated,
        StatusCode::Good,
        StatusCode::Good,
    ]);
    assert_eq!(got, want);
    assert_eq!(children_of(&mut adm, &at, folder.clone()).len(), 42);
    // Delete V0..V29 in one request: V30..V39, the ns-0-named one and V103 stay.
    let r = delete(&mut adm, &at, (0..30).map(id).collect());
    assert_eq!(r, vec![StatusCode::Good; 30]);
    let left = children_of(&mut adm, &at, folder.clone());
    assert_eq!(left.len(), 12, "{left:?}");
    assert!((30..40).all(|i| left.contains(&id(i))));
    assert!(left.contains(&id(102)));
    // A name freed by the delete may be used again, twice in one request only once.
    let r = add(
        &mut adm,
        &at,
        vec![
            variable_item(folder.clone(), id(200), "V5", 0.0),
            variable_item(folder.clone(), id(201), "V5", 0.0),
            variable_item(folder.clone(), id(202), "V35", 0.0),
        ],
    );
    let got: Vec<StatusCode> = r.iter().map(|r| r.status_code).collect();
    assert_eq!(
        got,
        vec![
            StatusCode::Good,
            StatusCode::BadBrowseNameDuplicated,
            StatusCode::BadBrowseNameDuplicated,
        ]
    );
    // The folder and what is left, in one request (children before their folder).
    let mut rest = left;
    rest.push(id(200));
    rest.push(folder.clone());
    let n = rest.len();
    assert_eq!(delete(&mut adm, &at, rest), vec![StatusCode::Good; n]);
    assert!(!objects_children(&mut adm, &at).contains(&folder));
}

/// A model writer that keeps up to `room` jobs until the test runs them.
struct HeldWriter {
    jobs: std::sync::Mutex<Vec<uaring_core::address_space::model::WriterJob>>,
    room: usize,
}

impl uaring_core::address_space::model::Writer for HeldWriter {
    fn submit(
        &self,
        job: uaring_core::address_space::model::WriterJob,
    ) -> Result<(), uaring_core::address_space::model::WriterJob> {
        let mut jobs = self.jobs.lock().unwrap();
        if jobs.len() >= self.room {
            return Err(job);
        }
        jobs.push(job);
        Ok(())
    }
}

fn held_writer(shared: &Arc<ServerShared>, room: usize) -> Arc<HeldWriter> {
    let w = Arc::new(HeldWriter {
        jobs: Default::default(),
        room,
    });
    assert!(shared.model.set_writer(w.clone()));
    w
}

/// Dispatches with request id `id`; `None`: deferred.
fn send(h: &mut Harness, id: u32, req: Request) -> Option<Response> {
    let ch = h.channel;
    uaring_core::services::dispatch_deferrable(&mut h.state, &Harness::ctx(ch), req, id, h.now)
}

fn add_request(h: &mut Harness, token: &NodeId, items: Vec<AddNodesItem>) -> Request {
    Request::AddNodes(Box::new(AddNodesRequest {
        request_header: h.header(token),
        nodes_to_add: items,
    }))
}

fn statuses(r: &Response) -> Vec<StatusCode> {
    match r {
        Response::AddNodes(r) => r.results.iter().map(|r| r.status_code).collect(),
        other => panic!("{other:?}"),
    }
}

/// With a model writer, a NodeManagement request waits among the shard's deferred requests
/// while the writer edits: the shard answers its other requests meanwhile, and the response
/// comes when the writer is done (the shard then holds the new version). Past the writer's
/// queue every operation is BadResourceUnavailable, past the shard's room for waiting
/// operations BadTooManyOperations; nothing is edited either way.
#[test]
fn the_model_writer_edits_off_the_shard_within_its_bounds() {
    use uaring_core::server::context::ConnectionHost;
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let writer = held_writer(&shared, 1);
    let (mut adm, at) = session(shared.clone(), 0, admin());
    let folder = NodeId::string(1, "Line3");
    let req = add_request(
        &mut adm,
        &at,
        vec![object_item(NodeId::ns0(85), folder.clone(), "Line3", 61)],
    );
    assert!(send(&mut adm, 41, req).is_none(), "deferred");
    // Served meanwhile.
    let r = adm.read_request(&at, NodeId::ns0(2259));
    assert!(matches!(send(&mut adm, 42, r), Some(Response::Read(_))));
    // The writer's queue (room 1) is full.
    let req = add_request(
        &mut adm,
        &at,
        vec![
            object_item(NodeId::ns0(85), NodeId::string(1, "Line4"), "Line4", 61),
            object_item(NodeId::ns0(85), NodeId::string(1, "Line5"), "Line5", 61),
        ],
    );
    let r = send(&mut adm, 43, req).expect("refused at once");
    assert_eq!(
        statuses(&r),
        vec![StatusCode::BadResourceUnavailable; 2],
        "{r:?}"
    );
    // The writer runs the job on its own thread.
    let job = writer.jobs.lock().unwrap().pop().unwrap();
    let now = adm.now;
    std::thread::spawn(move || job.run(now)).join().unwrap();
    adm.state.on_timer(adm.now);
    let mut out = Vec::new();
    let ch = adm.channel;
    adm.state.take_deferred(ch, &mut out);
    assert_eq!(out.len(), 1);
    let (id, d) = out.pop().unwrap();
    assert_eq!(id, 41);
    assert_eq!(statuses(&d.to_response().unwrap()), vec![StatusCode::Good]);
    assert!(objects_children(&mut adm, &at).contains(&folder));
    assert!(!objects_children(&mut adm, &at).contains(&NodeId::string(1, "Line4")));

    // One waiting operation per shard.
    let mut config = ServerConfig::default();
    config.operation_limits.max_async_operations_per_shard = 1;
    let shared = content::new(config, start()).unwrap();
    let writer = held_writer(&shared, 8);
    let (mut adm, at) = session(shared.clone(), 0, admin());
    let req = add_request(
        &mut adm,
        &at,
        vec![object_item(NodeId::ns0(85), folder.clone(), "Line3", 61)],
    );
    assert!(send(&mut adm, 51, req).is_none(), "deferred");
    let req = add_request(
        &mut adm,
        &at,
        vec![object_item(
            NodeId::ns0(85),
            NodeId::string(1, "Line4"),
            "Line4",
            61,
        )],
    );
    let r = send(&mut adm, 52, req).expect("refused at once");
    assert_eq!(statuses(&r), vec![StatusCode::BadTooManyOperations]);
    assert_eq!(writer.jobs.lock().unwrap().len(), 1);
    // A job the writer drops unrun answers BadInternalError.
    writer.jobs.lock().unwrap().clear();
    adm.state.on_timer(adm.now);
    let mut out = Vec::new();
    let ch = adm.channel;
    adm.state.take_deferred(ch, &mut out);
    let (id, d) = out.pop().unwrap();
    assert_eq!(id, 51);
    assert_eq!(
        fault_status(&d.to_response().unwrap()),
        Some(StatusCode::BadInternalError)
    );
}

/// What a big AddNodes and DeleteNodes leave: the statuses, the folder's children after
/// each, and some values read back.
#[derive(Debug, PartialEq)]
struct BigEdit {
    added: Vec<StatusCode>,
    children: Vec<NodeId>,
    values: Vec<Variant>,
    deleted: Vec<StatusCode>,
    left: Vec<NodeId>,
}

fn big_edit() -> BigEdit {
    let shared = content::new(ServerConfig::default(), start()).unwrap();
    let (mut adm, at) = session(shared, 0, admin());
    let folder = NodeId::string(1, "Big");
    let id = |i: u32| NodeId::string(1, format!("Big.V{i}"));
    let r = add(
        &mut adm,
        &at,
        vec![object_item(NodeId::ns0(85), folder.clone(), "Big", 61)],
    );
    assert!(r[0].status_code.is_good(), "{r:?}");
    // A full request (max_nodes_per_node_management), one name repeated.
    let mut items: Vec<AddNodesItem> = (0..999)
        .map(|i| variable_item(folder.clone(), id(i), &format!("V{i}"), i as f64))
        .collect();
    items.push(variable_item(folder.clone(), id(5000), "V17", 0.0));
    let added = add(&mut adm, &at, items)
        .iter()
        .map(|r| r.status_code)
        .collect();
    let mut children = children_of(&mut adm, &at, folder.clone());
    children.sort_by_key(|n| format!("{n:?}"));
    let values = [0, 17, 500, 998]
        .into_iter()
        .map(|i| read_value(&mut adm, &at, id(i)).value)
        .collect();
    // Every other one, and one that is not there.
    let mut gone: Vec<NodeId> = (0..999).step_by(2).map(id).collect();
    gone.push(id(5000));
    let deleted = delete(&mut adm, &at, gone);
    let mut left = children_of(&mut adm, &at, folder);
    left.sort_by_key(|n| format!("{n:?}"));
    BigEdit {
        added,
        children,
        values,
        deleted,
        left,
    }
}

#[test]
fn a_big_edit_calls_the_pause_hook_between_its_steps_and_ends_the_same() {
    use std::cell::Cell;
    use std::rc::Rc;
    use uaring_core::address_space::edit::set_pause;
    // Without a hook (no writer here: the edits run on this thread, in the call).
    let plain = big_edit();
    assert_eq!(plain.children.len(), 999);
    assert_eq!(plain.left.len(), 499);
    let calls = Rc::new(Cell::new(0usize));
    let c = calls.clone();
    assert!(set_pause(Some(Box::new(move || c.set(c.get() + 1)))).is_none());
    let paused = big_edit();
    let n = calls.get();
    // Every node added (1,001 asked, the folder's request included) and removed (501
    // asked), at least.
    assert!(n >= 1_001 + 501, "{n} pauses");
    assert_eq!(paused, plain);
    // Taken away: no more calls.
    assert!(set_pause(None).is_some());
    let _ = big_edit();
    assert_eq!(calls.get(), n);
}
