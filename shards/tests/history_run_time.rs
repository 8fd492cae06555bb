//! Variables added while the server runs are historized (docs/History.md, "Variables added
//! while serving"): through the library (`ServerHandle::add_historized_variable`, the
//! `[history] nodes` patterns on `add_variable`) and through AddNodes with Historizing from a
//! client of the ConfigureAdmin role; deleting one stops its history; the bound
//! (`history.max_run_time_historized`) and a server without a store answer typed errors
//! and Part 4 statuses.

mod history_cases;

use std::sync::Arc;

use history_cases::*;
use uaring::{DataValue, Error, NodeId, Server, StatusCode, Variant};
use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::*;
use uaring_core::secure_channel::SecurityPolicy;
use uaring_core::types::{ByteString, UaString};
use uaring_core::ExtensionObject;
use uaring_crypto::{CertificateRequest, OwnIdentity, PolicyId, RsaPolicy};
use uaring_harness::blocking::Client;

const OBJECTS: u32 = 85;
const HISTORIZING: u32 = 20;
const ACCESS_LEVEL: u32 = 17;

fn read_attr(c: &mut Client, node: &NodeId, attribute_id: u32) -> Variant {
    let v = c
        .read(&[ReadValueId {
            node_id: node.clone(),
            attribute_id,
            ..Default::default()
        }])
        .expect("Read");
    v[0].value.clone()
}

fn raw(c: &mut Client, node: &NodeId, start: uaring::DateTime, end: uaring::DateTime) -> Vec<f64> {
    doubles(&read_all(c, node, start, end, 0).0)
}

/// Waits until `node`'s raw history in `[start, end)` is `want` (values reach the store
/// through the ingest queue and the writer thread).
fn wait_raw(
    c: &mut Client,
    node: &NodeId,
    start: uaring::DateTime,
    end: uaring::DateTime,
    want: &[f64],
) {
    let deadline = std::time::Instant::now() + TIMEOUT;
    loop {
        let got = raw(c, node, start, end);
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "history {got:?}, want {want:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

fn history_status(
    c: &mut Client,
    node: &NodeId,
    start: uaring::DateTime,
    end: uaring::DateTime,
) -> StatusCode {
    let r = history_read(
        c,
        ExtensionObject::from_struct(&ReadRawModifiedDetails {
            is_read_modified: false,
            start_time: start,
            end_time: end,
            num_values_per_node: 0,
            return_bounds: false,
        }),
        vec![HistoryReadValueId {
            node_id: node.clone(),
            ..Default::default()
        }],
    );
    r.results[0].status_code
}

#[test]
fn a_variable_added_by_the_library_is_historized_until_it_is_deleted() {
    let _serial = serial();
    let dir = Dir::new("rt-library");
    let b = embedded_builder_with(
        &dir,
        "nodes = [\"ns=1;s=Auto.*\"]\nmax_run_time_historized = 2\n",
    );
    let server = b.start().expect("start");
    let objects = NodeId::ns0(OBJECTS);
    let t0 = t0();
    let end = at(t0, 100.0);
    let mut c = session(&server.endpoint_url());

    // Asked for: historized from the moment it is added, its initial value first.
    let level_id = NodeId::string(1, "Level");
    let level = server
        .add_historized_variable(&objects, level_id.clone(), "Level", 0.5, true)
        .expect("add historized");
    assert_eq!(
        read_attr(&mut c, &level_id, HISTORIZING),
        Variant::Boolean(true)
    );
    match read_attr(&mut c, &level_id, ACCESS_LEVEL) {
        Variant::Byte(b) => assert_eq!(b & 0x0c, 0x0c, "HistoryRead and HistoryWrite: {b:#x}"),
        o => panic!("{o:?}"),
    }
    for i in 0..5 {
        level.set_with(dv(at(t0, i as f64), i as f64)).unwrap();
    }
    wait_raw(&mut c, &level_id, t0, end, &[0.0, 1.0, 2.0, 3.0, 4.0]);

    // Named by the `[history] nodes` pattern: historized without being asked; not named:
    // not historized.
    let auto_id = NodeId::string(1, "Auto.Speed");
    let auto = server
        .add_variable(&objects, auto_id.clone(), "AutoSpeed", 1.0, true)
        .expect("add");
    assert_eq!(
        read_attr(&mut c, &auto_id, HISTORIZING),
        Variant::Boolean(true)
    );
    auto.set_with(dv(at(t0, 10.0), 10.0)).unwrap();
    wait_raw(&mut c, &auto_id, t0, end, &[10.0]);
    let plain_id = NodeId::string(1, "Plain");
    server
        .add_variable(&objects, plain_id.clone(), "Plain", 1.0, true)
        .expect("add");
    assert_eq!(
        read_attr(&mut c, &plain_id, HISTORIZING),
        Variant::Boolean(false)
    );
    assert_eq!(
        history_status(&mut c, &plain_id, t0, end),
        StatusCode::BadNotReadable,
        "no HistoryRead in its AccessLevel"
    );

    // The bound (2): asked for, a typed error and nothing added; named by a pattern, added
    // without history.
    assert_eq!(
        server
            .add_historized_variable(&objects, NodeId::string(1, "Third"), "Third", 1.0, true)
            .err(),
        Some(Error::HistoryLimit)
    );
    assert!(server
        .shared()
        .model
        .load()
        .node(&NodeId::string(1, "Third"))
        .is_none());
    let over_id = NodeId::string(1, "Auto.Over");
    server
        .add_variable(&objects, over_id.clone(), "AutoOver", 1.0, true)
        .expect("add");
    assert_eq!(
        read_attr(&mut c, &over_id, HISTORIZING),
        Variant::Boolean(false)
    );

    // Deleted: no more values are taken, and its place is free again.
    server.delete_nodes(std::slice::from_ref(&auto_id)).unwrap();
    assert!(auto.set(99.0).is_err(), "the handle of a deleted node");
    assert_eq!(
        history_status(&mut c, &auto_id, t0, end),
        StatusCode::BadNodeIdUnknown,
        "a deleted node's history is not read through it (Part 11 §4.7)"
    );
    let again = server
        .add_historized_variable(&objects, NodeId::string(1, "Again"), "Again", 2.0, true)
        .expect("a place was freed by the deletion");
    again.set_with(dv(at(t0, 20.0), 20.0)).unwrap();
    wait_raw(&mut c, &NodeId::string(1, "Again"), t0, end, &[20.0]);
    // Level still historized, and nothing of Auto.Speed's after its deletion.
    level.set_with(dv(at(t0, 5.0), 5.0)).unwrap();
    wait_raw(&mut c, &level_id, t0, end, &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);

    // Re-added with the same NodeId and historized: its earlier history is served again.
    server.delete_nodes(&[NodeId::string(1, "Again")]).unwrap();
    let auto2 = server
        .add_variable(&objects, auto_id.clone(), "AutoSpeed", 1.0, true)
        .expect("add again");
    auto2.set_with(dv(at(t0, 11.0), 11.0)).unwrap();
    wait_raw(&mut c, &auto_id, t0, end, &[10.0, 11.0]);

    // Built with `edit`, Historizing set by the application: historized too, within the
    // bound (Level and Auto.Speed hold both places now).
    let built_id = NodeId::string(1, "Built");
    let build = |e: &mut uaring_core::address_space::edit::Edit| {
        let mut node = uaring_core::address_space::build::make::variable(
            built_id.clone(),
            uaring_core::QualifiedName::new(1, "Built"),
            NodeId::ns0(11),
            -1,
            Vec::new(),
            DataValue::new(Variant::Double(-1.0)),
            3,
            0.0,
            Some((NodeId::ns0(OBJECTS), 35)),
        );
        if let uaring_core::address_space::ClassAttributes::Variable(v) = &mut node.attributes {
            v.historizing = true;
            v.access_level |= 0x04;
            v.user_access_level |= 0x04;
        }
        e.add_node(node)
    };
    assert_eq!(
        server.edit(build).err(),
        Some(Error::Status(StatusCode::BadResourceUnavailable))
    );
    assert!(server.shared().model.load().node(&built_id).is_none());
    server
        .delete_nodes(std::slice::from_ref(&level_id))
        .unwrap();
    server.edit(build).expect("a place is free");
    let built = server.variable(&built_id).expect("handle");
    built.set_with(dv(at(t0, 30.0), 30.0)).unwrap();
    wait_raw(&mut c, &built_id, t0, end, &[30.0]);
    server.shutdown().unwrap();
}

/// A Variable added while the server runs that `[[history.sampled]]` names is sampled on its
/// interval, not recorded by change: a burst of stores between two passes keeps one value
/// (the last); deleting it stops the sampling.
#[test]
fn a_variable_added_at_run_time_is_sampled_when_history_sampled_names_it() {
    let _serial = serial();
    let dir = Dir::new("rt-sampled");
    let b = embedded_builder_with(
        &dir,
        "[[history.sampled]]\nnodes = [\"ns=1;s=Slow.*\"]\ninterval_ms = 400\n",
    );
    let server = b.start().expect("start");
    let objects = NodeId::ns0(OBJECTS);
    let t0 = t0();
    let end = at(t0, 1000.0);
    let mut c = session(&server.endpoint_url());
    let id = NodeId::string(1, "Slow.Flow");
    let flow = server
        .add_variable(&objects, id.clone(), "Flow", 0.5, true)
        .expect("add");
    assert_eq!(read_attr(&mut c, &id, HISTORIZING), Variant::Boolean(true));
    // Bursts of twenty stores, each well inside one 400 ms interval, keep one value each
    // (their last), at its own SourceTimestamp (a day ago: the first value, stamped now, is
    // outside the range read).
    let mut want = Vec::new();
    for burst in 0..2 {
        for i in 0..20 {
            let v = (burst * 100 + i) as f64;
            flow.set_with(dv(at(t0, v), v)).unwrap();
        }
        want.push((burst * 100 + 19) as f64);
        wait_raw(&mut c, &id, t0, end, &want);
    }
    // Nothing more while it stays.
    std::thread::sleep(std::time::Duration::from_millis(900));
    assert_eq!(raw(&mut c, &id, t0, end), want);
    server.delete_nodes(std::slice::from_ref(&id)).unwrap();
    assert_eq!(
        history_status(&mut c, &id, t0, end),
        StatusCode::BadNodeIdUnknown
    );
    server.shutdown().unwrap();
}

/// A Variable added while the server runs that a `[[history.collection]]` entry names gets
/// that entry's HA Configuration and its rule: only values that move by more than the
/// ExceptionDeviation are kept.
#[test]
fn a_variable_added_at_run_time_follows_its_collection_rule() {
    let _serial = serial();
    let dir = Dir::new("rt-collection");
    let b = embedded_builder_with(
        &dir,
        "nodes = [\"ns=1;s=Auto.*\"]\n\
         [[history.collection]]\nnodes = [\"ns=1;s=Auto.*\"]\nexception_deviation = 1\n",
    );
    let server = b.start().expect("start");
    let mut c = session(&server.endpoint_url());
    let id = NodeId::string(1, "Auto.Flow");
    let from = uaring::DateTime(uaring::clock::utc_now().0 - 100_000_000);
    let flow = server
        .add_variable(&NodeId::ns0(OBJECTS), id.clone(), "Flow", 0.0, true)
        .expect("add");
    for v in [0.5, 1.5, 2.0, 2.5, 3.0] {
        flow.set(v).unwrap();
    }
    let to = uaring::DateTime(uaring::clock::utc_now().0 + 100_000_000);
    wait_raw(&mut c, &id, from, to, &[0.0, 1.5, 3.0]);
    let r = c
        .browse(&[BrowseDescription {
            node_id: id.clone(),
            browse_direction: BrowseDirection::Forward,
            reference_type_id: NodeId::ns0(56),
            include_subtypes: true,
            node_class_mask: 0,
            result_mask: 0x3f,
        }])
        .expect("Browse");
    assert_eq!(
        r[0].references
            .iter()
            .map(|d| d.node_id.node_id.clone())
            .collect::<Vec<_>>(),
        [NodeId::string(1, "HA Configuration.1.Sloped")]
    );
    server.shutdown().unwrap();
}

/// The case every backend runs (`history_postgres.rs` runs it on PostgreSQL).
#[test]
fn a_run_time_variable_is_historized_until_it_is_deleted() {
    let _serial = serial();
    let dir = Dir::new("rt-case");
    history_cases::a_run_time_variable_is_historized_until_it_is_deleted(&dir, &Backend::Embedded);
}

#[test]
fn without_a_store_history_is_refused_with_a_typed_error() {
    let _serial = serial();
    let dir = Dir::new("rt-none");
    let server = Server::builder()
        .listen("127.0.0.1:0")
        .pki(dir.0.join("pki"))
        .config_toml("[history]\nenabled = false\n")
        .start()
        .expect("start");
    assert_eq!(
        server
            .add_historized_variable(
                &NodeId::ns0(OBJECTS),
                NodeId::string(1, "X"),
                "X",
                1.0,
                true
            )
            .err(),
        Some(Error::NoHistory)
    );
    assert!(server
        .shared()
        .model
        .load()
        .node(&NodeId::string(1, "X"))
        .is_none());
    server
        .add_variable(
            &NodeId::ns0(OBJECTS),
            NodeId::string(1, "X"),
            "X",
            1.0,
            true,
        )
        .expect("without history it is an ordinary Variable");
    server.shutdown().unwrap();
}

// --- AddNodes from a client -------------------------------------------------------------

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A session over Basic256Sha256 SignAndEncrypt logged in as `user` (password "pw").
fn user_session(url: &str, server_cert: &[u8], user: &str) -> Client {
    let req = CertificateRequest::new("urn:uaring:client", "history test client", now_s());
    let (cert, key) = uaring_crypto::generate_self_signed(&req).unwrap();
    let ident: Arc<OwnIdentity> = OwnIdentity::new(cert, key).unwrap();
    let policy = RsaPolicy::client(PolicyId::Basic256Sha256, ident).unwrap();
    let mut cfg = uaring_core::client::ClientConfig::new(url);
    cfg.policy = policy.clone();
    cfg.mode = MessageSecurityMode::SignAndEncrypt;
    cfg.server_certificate = Some(server_cert.to_vec());
    let mut c = Client::connect_with(cfg, TIMEOUT).expect("connect");
    let cs = c.create_session().expect("CreateSession").clone();
    let mut data = cs.server_certificate.as_bytes().to_vec();
    data.extend_from_slice(cs.server_nonce.as_bytes());
    let (algorithm, signature) = policy.sign_own(&data).unwrap();
    let req = ActivateSessionRequest {
        client_signature: SignatureData {
            algorithm: algorithm.as_str().into(),
            signature: ByteString::from(signature),
        },
        user_identity_token: ExtensionObject::from_struct(&UserNameIdentityToken {
            policy_id: "username".into(),
            user_name: user.into(),
            password: ByteString::from(&b"pw"[..]),
            encryption_algorithm: UaString::null(),
        }),
        locale_ids: vec!["en".into()],
        ..Default::default()
    };
    match c.call(Request::ActivateSession(Box::new(req))) {
        Ok(Response::ActivateSession(_)) => c,
        other => panic!("ActivateSession: {other:?}"),
    }
}

fn add_variable_item(id: &NodeId, name: &str, historizing: bool) -> AddNodesItem {
    AddNodesItem {
        parent_node_id: uaring_core::types::ExpandedNodeId::local(NodeId::ns0(OBJECTS)),
        reference_type_id: NodeId::ns0(35),
        requested_new_node_id: uaring_core::types::ExpandedNodeId::local(id.clone()),
        browse_name: uaring_core::QualifiedName::new(id.namespace, name),
        node_class: NodeClass::Variable,
        node_attributes: ExtensionObject::from_struct(&VariableAttributes {
            data_type: NodeId::ns0(11),
            value_rank: -1,
            value: Variant::Double(0.0),
            access_level: 0x07,
            user_access_level: 0x07,
            historizing,
            ..Default::default()
        }),
        type_definition: uaring_core::types::ExpandedNodeId::local(NodeId::ns0(63)),
    }
}

fn add_nodes(c: &mut Client, items: Vec<AddNodesItem>) -> Vec<StatusCode> {
    match c
        .call(Request::AddNodes(Box::new(AddNodesRequest {
            nodes_to_add: items,
            ..Default::default()
        })))
        .expect("AddNodes")
    {
        Response::AddNodes(r) => r.results.iter().map(|r| r.status_code).collect(),
        other => panic!("{other:?}"),
    }
}

fn write(c: &mut Client, node: &NodeId, v: DataValue) -> StatusCode {
    match c
        .call(Request::Write(Box::new(WriteRequest {
            nodes_to_write: vec![WriteValue {
                node_id: node.clone(),
                attribute_id: 13,
                value: v,
                ..Default::default()
            }],
            ..Default::default()
        })))
        .expect("Write")
    {
        Response::Write(r) => r.results[0],
        other => panic!("{other:?}"),
    }
}

fn secure_server(dir: &Dir, history: &str) -> uaring::ServerHandle {
    let hash = uaring_crypto::hash_password("pw").unwrap();
    Server::builder()
        .listen("127.0.0.1:0")
        .shards(2)
        .pki(dir.0.join("pki"))
        .accept_all_client_certs(true)
        .config_toml(&format!(
            "{history}\n[security]\npolicies = [\"None\", \"Basic256Sha256\"]\nanonymous = \"readwrite\"\n\
             [[users]]\nname = \"admin\"\npassword = \"{hash}\"\nroles = [\"ConfigureAdmin\", \"Operator\"]\n\
             [[users]]\nname = \"op\"\npassword = \"{hash}\"\nroles = [\"Operator\"]\n"
        ))
        .start()
        .expect("start")
}

#[test]
fn add_nodes_with_historizing_historizes_the_new_variable_by_role() {
    let _serial = serial();
    let dir = Dir::new("rt-addnodes");
    let server = secure_server(
        &dir,
        &format!(
            "[history]\nenabled = true\ndir = {:?}\nflush_interval_ms = 50\nmax_run_time_historized = 1\n",
            dir.0.join("store").display().to_string()
        ),
    );
    let cert = std::fs::read(dir.0.join("pki/own/certs/uaring.der")).expect("server cert");
    let url = server.endpoint_url();
    let mut admin = user_session(&url, &cert, "admin");
    // The client writes values without timestamps (AddNodes gives no TimestampWrite): the
    // server stamps them now.
    let t0 = at(uaring::clock::utc_now(), -60.0);
    let end = at(t0, 3600.0);
    let id = NodeId::string(1, "Client.Level");
    assert_eq!(
        add_nodes(
            &mut admin,
            vec![add_variable_item(&id, "ClientLevel", true)]
        ),
        vec![StatusCode::Good]
    );
    assert_eq!(
        read_attr(&mut admin, &id, HISTORIZING),
        Variant::Boolean(true)
    );
    match read_attr(&mut admin, &id, ACCESS_LEVEL) {
        Variant::Byte(b) => assert_eq!(b & 0x04, 0x04, "HistoryRead: {b:#x}"),
        o => panic!("{o:?}"),
    }
    for i in 1..=4 {
        assert_eq!(
            write(
                &mut admin,
                &id,
                DataValue::new(Variant::Double(i as f64 * 1.5))
            ),
            StatusCode::Good
        );
    }
    // Its initial value first, then exactly the writes.
    wait_raw(&mut admin, &id, t0, end, &[0.0, 1.5, 3.0, 4.5, 6.0]);

    // The bound (1): another historized Variable is refused, and nothing is added.
    let second = NodeId::string(1, "Client.Second");
    assert_eq!(
        add_nodes(&mut admin, vec![add_variable_item(&second, "Second", true)]),
        vec![StatusCode::BadResourceUnavailable]
    );
    assert!(server.shared().model.load().node(&second).is_none());

    // A user without AddNode (an Operator) is refused, historized or not.
    let mut op = user_session(&url, &cert, "op");
    assert_eq!(
        add_nodes(&mut op, vec![add_variable_item(&second, "Second", true)]),
        vec![StatusCode::BadUserAccessDenied]
    );
    // Deleted (by the admin): its place is free again for the next one.
    match admin
        .call(Request::DeleteNodes(Box::new(DeleteNodesRequest {
            nodes_to_delete: vec![DeleteNodesItem {
                node_id: id.clone(),
                delete_target_references: true,
            }],
            ..Default::default()
        })))
        .expect("DeleteNodes")
    {
        Response::DeleteNodes(r) => assert_eq!(r.results, vec![StatusCode::Good]),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        add_nodes(&mut admin, vec![add_variable_item(&second, "Second", true)]),
        vec![StatusCode::Good]
    );
    assert_eq!(
        write(&mut admin, &second, DataValue::new(Variant::Double(7.0))),
        StatusCode::Good
    );
    wait_raw(&mut admin, &second, t0, end, &[0.0, 7.0]);
    server.shutdown().unwrap();
}

#[test]
fn add_nodes_with_historizing_without_a_store_is_bad_node_attributes_invalid() {
    let _serial = serial();
    let dir = Dir::new("rt-addnodes-none");
    let server = secure_server(&dir, "[history]\nenabled = false\n");
    let cert = std::fs::read(dir.0.join("pki/own/certs/uaring.der")).expect("server cert");
    let mut admin = user_session(&server.endpoint_url(), &cert, "admin");
    let id = NodeId::string(1, "NoStore");
    assert_eq!(
        add_nodes(&mut admin, vec![add_variable_item(&id, "NoStore", true)]),
        vec![StatusCode::BadNodeAttributesInvalid]
    );
    assert!(server.shared().model.load().node(&id).is_none());
    assert_eq!(
        add_nodes(&mut admin, vec![add_variable_item(&id, "NoStore", false)]),
        vec![StatusCode::Good]
    );
    server.shutdown().unwrap();
}
