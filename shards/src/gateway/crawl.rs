//! Finding out what a mirrored server has: its roots (the children of its Objects folder,
//! or the configured subtrees), every node below them along forward hierarchical
//! references, their attributes, and the types they need that this server does not have
//! (docs/Gateway.md, "Mirroring").
//!
//! Sans-IO: [`Crawl::poll`] hands out requests (at most [`IN_FLIGHT`] at once, each with
//! the [`Job`] that its response answers), [`Crawl::on_response`] takes the answers. Every
//! remote NodeId is kept with its namespace *slot* ([`super::names::Names`]).

use std::collections::{HashMap, VecDeque};

use uaring_core::generated::messages::{Request, Response};
use uaring_core::generated::types::{
    BrowseDescription, BrowseDirection, BrowseNextRequest, BrowseRequest, NodeClass, ReadRequest,
    ReadValueId, ReferenceDescription, TimestampsToReturn,
};
use uaring_core::types::{
    ByteString, DataValue, ExtensionObject, LocalizedText, NodeId, QualifiedName, StatusCode,
    Variant,
};

use super::config::Root;
use super::names::Names;

/// Requests of one crawl out at once.
pub const IN_FLIGHT: usize = 4;
/// Most rounds of supertypes looked up for the types the mirror needs.
const TYPE_ROUNDS_MAX: u32 = 32;
/// Most types mirrored for one server.
pub const TYPES_MAX: usize = 10_000;

/// HierarchicalReferences, HasTypeDefinition, HasSubtype, Objects, Server.
const HIERARCHICAL: u32 = 33;
const HAS_SUBTYPE: u32 = 45;
const OBJECTS: u32 = 85;

/// Attribute ids read.
mod attr {
    pub const NODE_CLASS: u32 = 2;
    pub const BROWSE_NAME: u32 = 3;
    pub const DISPLAY_NAME: u32 = 4;
    pub const IS_ABSTRACT: u32 = 8;
    pub const SYMMETRIC: u32 = 9;
    pub const INVERSE_NAME: u32 = 10;
    pub const EVENT_NOTIFIER: u32 = 12;
    pub const VALUE: u32 = 13;
    pub const DATA_TYPE: u32 = 14;
    pub const VALUE_RANK: u32 = 15;
    pub const ARRAY_DIMENSIONS: u32 = 16;
    pub const ACCESS_LEVEL: u32 = 17;
    pub const USER_ACCESS_LEVEL: u32 = 18;
    pub const MINIMUM_SAMPLING_INTERVAL: u32 = 19;
    pub const HISTORIZING: u32 = 20;
    pub const EXECUTABLE: u32 = 21;
    pub const USER_EXECUTABLE: u32 = 22;
    pub const DATA_TYPE_DEFINITION: u32 = 23;
}

/// The class-specific attributes of a found node.
#[derive(Clone, Debug, Default)]
pub struct VarAttrs {
    pub data_type: NodeId,
    pub value_rank: i32,
    pub array_dimensions: Vec<u32>,
    pub access_level: u8,
    pub user_access_level: u8,
    pub minimum_sampling_interval: f64,
    /// The server collects its history now (Historizing).
    pub historizing: bool,
    pub value: DataValue,
}

/// One node of the mirrored server.
#[derive(Clone, Debug)]
pub struct Found {
    /// Its NodeId (namespace = slot).
    pub remote: NodeId,
    pub class: NodeClass,
    /// Translated to local namespaces.
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    /// Its TypeDefinition (namespace = slot), for Objects and Variables.
    pub type_def: Option<NodeId>,
    /// Forward hierarchical references to other found nodes: (reference type, slot form;
    /// target index).
    pub refs: Vec<(NodeId, usize)>,
    pub var: Option<Box<VarAttrs>>,
    pub event_notifier: u8,
    pub executable: bool,
}

/// A type of the mirrored server this server does not have.
#[derive(Clone, Debug)]
pub struct FoundType {
    pub remote: NodeId,
    pub class: NodeClass,
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    pub is_abstract: bool,
    pub symmetric: bool,
    pub inverse_name: Option<LocalizedText>,
    pub definition: Option<ExtensionObject>,
    /// Its supertype (slot form); `None` until found (or for a type without one).
    pub supertype: Option<NodeId>,
}

/// What a crawl found.
#[derive(Debug, Default)]
pub struct Found2 {
    pub nodes: Vec<Found>,
    /// Indexes of the roots (organized by the server's folder).
    pub roots: Vec<usize>,
    pub types: Vec<FoundType>,
    /// The crawl stopped at `max_nodes`.
    pub truncated: bool,
}

/// A configured browse path on its way: its segments, the step under way (`usize::MAX`
/// while its browse is out) and the node reached (slot form).
type PathWalk = (Vec<(Option<u16>, String)>, usize, NodeId);

/// What a response answers.
#[derive(Debug)]
pub enum Job {
    /// The children of the Objects folder (the default roots), or a path's next step.
    Roots {
        path: Option<(usize, usize)>,
    },
    /// More children of the Objects folder.
    RootsNext,
    /// NodeClass, BrowseName and DisplayName of configured root ids (found indexes).
    Describe {
        nodes: Vec<usize>,
    },
    /// The TypeDefinitions of configured roots.
    RootTypes {
        nodes: Vec<usize>,
    },
    /// The children of found nodes.
    Browse {
        nodes: Vec<usize>,
    },
    BrowseNext {
        nodes: Vec<usize>,
    },
    /// Attributes: (found index, attribute id) per operation.
    Attrs {
        ops: Vec<(usize, u32)>,
    },
    /// Attributes of types: (type index, attribute id).
    TypeAttrs {
        ops: Vec<(usize, u32)>,
    },
    /// The supertypes of types.
    Supertypes {
        types: Vec<usize>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Roots,
    Browse,
    Attrs,
    Types,
    Done,
}

/// One crawl of one server. See the module documentation.
pub struct Crawl {
    phase: Phase,
    max_nodes: usize,
    ops: usize,
    in_flight: usize,
    found: Found2,
    seen: HashMap<NodeId, usize>,
    /// Paths still resolving: (segments, step, current node (slot form)).
    paths: Vec<PathWalk>,
    /// Configured ids to describe, and to find the types of.
    describe: Vec<usize>,
    root_types: Vec<usize>,
    default_roots: bool,
    /// The continuation point of the Objects folder's children.
    roots_next: Option<ByteString>,
    browse: VecDeque<usize>,
    next: VecDeque<(usize, ByteString)>,
    attrs: VecDeque<(usize, u32)>,
    /// Types to look up: (attributes, supertypes).
    type_attrs: VecDeque<(usize, u32)>,
    supertypes: VecDeque<usize>,
    type_index: HashMap<NodeId, usize>,
    type_rounds: u32,
}

fn browse_desc(node: NodeId, direction: BrowseDirection, reference: u32) -> BrowseDescription {
    BrowseDescription {
        node_id: node,
        browse_direction: direction,
        reference_type_id: NodeId::ns0(reference),
        include_subtypes: true,
        // Objects, Variables and Methods: the instances (types are looked up apart).
        node_class_mask: if reference == HAS_SUBTYPE { 0 } else { 7 },
        result_mask: 63,
    }
}

fn read_op(node: NodeId, attribute_id: u32) -> ReadValueId {
    ReadValueId {
        node_id: node,
        attribute_id,
        ..Default::default()
    }
}

fn read_request(ops: Vec<ReadValueId>) -> Request {
    Request::Read(Box::new(ReadRequest {
        max_age: 0.0,
        timestamps_to_return: TimestampsToReturn::Both,
        nodes_to_read: ops,
        ..Default::default()
    }))
}

fn browse_request(nodes: Vec<BrowseDescription>) -> Request {
    Request::Browse(Box::new(BrowseRequest {
        requested_max_references_per_node: 1000,
        nodes_to_browse: nodes,
        ..Default::default()
    }))
}

fn bad(what: &str, s: StatusCode) -> String {
    format!("{what}: {s}")
}

fn service_result(resp: &Response) -> StatusCode {
    resp.response_header().service_result
}

/// Is this type known here (namespace 0 or a type this server has)?
pub type Known<'a> = &'a dyn Fn(&NodeId) -> bool;

impl Crawl {
    /// A crawl of `roots` (empty: the children of the Objects folder), at most `max_nodes`
    /// nodes, `ops` operations per request.
    pub fn new(roots: &[Root], names: &Names, max_nodes: usize, ops: usize) -> Crawl {
        let mut c = Crawl {
            phase: Phase::Roots,
            max_nodes,
            ops: ops.max(1),
            in_flight: 0,
            found: Found2::default(),
            seen: HashMap::new(),
            paths: Vec::new(),
            describe: Vec::new(),
            root_types: Vec::new(),
            default_roots: roots.is_empty(),
            roots_next: None,
            browse: VecDeque::new(),
            next: VecDeque::new(),
            attrs: VecDeque::new(),
            type_attrs: VecDeque::new(),
            supertypes: VecDeque::new(),
            type_index: HashMap::new(),
            type_rounds: 0,
        };
        for r in roots {
            match r {
                Root::Path(p) => c.paths.push((p.clone(), 0, NodeId::ns0(OBJECTS))),
                Root::Id(id) => {
                    if let Some(remote) = names.remote(id) {
                        c.add_root_id(remote);
                    }
                }
                Root::UriId(uri, id) => {
                    let mut ids = names_slot(names, uri).map(|slot| NodeId {
                        namespace: slot,
                        identifier: id.identifier.clone(),
                    });
                    if let Some(remote) = ids.take() {
                        c.add_root_id(remote);
                    }
                }
            }
        }
        c
    }

    fn add_root_id(&mut self, remote: NodeId) {
        if remote.namespace == 0 || self.seen.contains_key(&remote) {
            return;
        }
        let i = self.push(Found {
            remote,
            class: NodeClass::Unspecified,
            browse_name: QualifiedName::default(),
            display_name: LocalizedText::default(),
            type_def: None,
            refs: Vec::new(),
            var: None,
            event_notifier: 0,
            executable: false,
        });
        if let Some(i) = i {
            self.found.roots.push(i);
            self.describe.push(i);
            self.root_types.push(i);
        }
    }

    fn push(&mut self, f: Found) -> Option<usize> {
        if self.found.nodes.len() >= self.max_nodes {
            self.found.truncated = true;
            return None;
        }
        let i = self.found.nodes.len();
        self.seen.insert(f.remote.clone(), i);
        self.found.nodes.push(f);
        Some(i)
    }

    /// Is the crawl finished?
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// What it found (once done).
    pub fn into_found(self) -> Found2 {
        self.found
    }

    /// Nodes found so far.
    pub fn nodes(&self) -> usize {
        self.found.nodes.len()
    }

    /// The next requests to send (none while [`IN_FLIGHT`] are out or the phase waits for
    /// answers). `known` tells which types this server has.
    pub fn poll(&mut self, names: &Names, known: Known<'_>) -> Vec<(Request, Job)> {
        let mut out = Vec::new();
        loop {
            if self.in_flight + out.len() >= IN_FLIGHT {
                break;
            }
            match self.next_request(names, known) {
                Some(r) => out.push(r),
                None => {
                    if self.in_flight + out.len() == 0 && self.advance(names, known) {
                        continue;
                    }
                    break;
                }
            }
        }
        self.in_flight += out.len();
        out
    }

    /// Moves to the next phase when this one has nothing left; `true` when it did.
    fn advance(&mut self, names: &Names, known: Known<'_>) -> bool {
        match self.phase {
            Phase::Roots => {
                self.phase = Phase::Browse;
                self.browse.extend(self.found.roots.iter().copied());
                true
            }
            Phase::Browse => {
                self.phase = Phase::Attrs;
                for (i, f) in self.found.nodes.iter().enumerate() {
                    let list: &[u32] = match f.class {
                        NodeClass::Variable => &[
                            attr::DATA_TYPE,
                            attr::VALUE_RANK,
                            attr::ARRAY_DIMENSIONS,
                            attr::ACCESS_LEVEL,
                            attr::USER_ACCESS_LEVEL,
                            attr::MINIMUM_SAMPLING_INTERVAL,
                            attr::HISTORIZING,
                            attr::VALUE,
                        ],
                        NodeClass::Object => &[attr::EVENT_NOTIFIER],
                        NodeClass::Method => &[attr::EXECUTABLE, attr::USER_EXECUTABLE],
                        _ => &[],
                    };
                    self.attrs.extend(list.iter().map(|&a| (i, a)));
                }
                true
            }
            Phase::Attrs => {
                self.phase = Phase::Types;
                self.queue_types(names, known);
                true
            }
            Phase::Types => {
                if self.type_rounds < TYPE_ROUNDS_MAX && self.queue_types(names, known) {
                    return true;
                }
                self.phase = Phase::Done;
                false
            }
            Phase::Done => false,
        }
    }

    /// Queues the lookup of the types named by nodes and types found that are neither known
    /// here nor looked up yet; `true` when there are any.
    fn queue_types(&mut self, _names: &Names, known: Known<'_>) -> bool {
        self.type_rounds += 1;
        let mut wanted: Vec<(NodeId, NodeClass)> = Vec::new();
        for f in &self.found.nodes {
            if let Some(t) = &f.type_def {
                let class = if f.class == NodeClass::Variable {
                    NodeClass::VariableType
                } else {
                    NodeClass::ObjectType
                };
                wanted.push((t.clone(), class));
            }
            if let Some(v) = &f.var {
                wanted.push((v.data_type.clone(), NodeClass::DataType));
            }
            for (rt, _) in &f.refs {
                wanted.push((rt.clone(), NodeClass::ReferenceType));
            }
        }
        for t in &self.found.types {
            if let Some(s) = &t.supertype {
                wanted.push((s.clone(), t.class));
            }
        }
        let mut any = false;
        for (id, class) in wanted {
            if id.is_null()
                || id.namespace == 0
                || known(&id)
                || self.type_index.contains_key(&id)
                || self.found.types.len() >= TYPES_MAX
            {
                continue;
            }
            let i = self.found.types.len();
            self.type_index.insert(id.clone(), i);
            self.found.types.push(FoundType {
                remote: id,
                class,
                browse_name: QualifiedName::default(),
                display_name: LocalizedText::default(),
                is_abstract: false,
                symmetric: false,
                inverse_name: None,
                definition: None,
                supertype: None,
            });
            let mut list = vec![
                attr::NODE_CLASS,
                attr::BROWSE_NAME,
                attr::DISPLAY_NAME,
                attr::IS_ABSTRACT,
            ];
            match class {
                NodeClass::ReferenceType => {
                    list.extend([attr::SYMMETRIC, attr::INVERSE_NAME]);
                }
                NodeClass::DataType => list.push(attr::DATA_TYPE_DEFINITION),
                _ => {}
            }
            self.type_attrs.extend(list.into_iter().map(|a| (i, a)));
            self.supertypes.push_back(i);
            any = true;
        }
        any
    }

    fn next_request(&mut self, names: &Names, _known: Known<'_>) -> Option<(Request, Job)> {
        match self.phase {
            Phase::Roots => {
                if let Some(cp) = self.roots_next.take() {
                    return Some((
                        Request::BrowseNext(Box::new(BrowseNextRequest {
                            release_continuation_points: false,
                            continuation_points: vec![cp],
                            ..Default::default()
                        })),
                        Job::RootsNext,
                    ));
                }
                if self.default_roots {
                    self.default_roots = false;
                    return Some((
                        browse_request(vec![browse_desc(
                            NodeId::ns0(OBJECTS),
                            BrowseDirection::Forward,
                            HIERARCHICAL,
                        )]),
                        Job::Roots { path: None },
                    ));
                }
                if let Some(p) = self
                    .paths
                    .iter()
                    .position(|(_, step, _)| *step != usize::MAX)
                {
                    let (_, step, at) = &mut self.paths[p];
                    let wire = names.to_wire(at)?;
                    let s = *step;
                    *step = usize::MAX; // answered by the response
                    return Some((
                        browse_request(vec![browse_desc(
                            wire,
                            BrowseDirection::Forward,
                            HIERARCHICAL,
                        )]),
                        Job::Roots { path: Some((p, s)) },
                    ));
                }
                if !self.describe.is_empty() {
                    let n = (self.ops / 3).max(1).min(self.describe.len());
                    let nodes: Vec<usize> = self.describe.drain(..n).collect();
                    let mut ops = Vec::with_capacity(nodes.len() * 3);
                    for &i in &nodes {
                        let wire = names.to_wire(&self.found.nodes[i].remote)?;
                        for a in [attr::NODE_CLASS, attr::BROWSE_NAME, attr::DISPLAY_NAME] {
                            ops.push(read_op(wire.clone(), a));
                        }
                    }
                    return Some((read_request(ops), Job::Describe { nodes }));
                }
                if !self.root_types.is_empty() {
                    let n = self.ops.min(self.root_types.len());
                    let nodes: Vec<usize> = self.root_types.drain(..n).collect();
                    let descs = nodes
                        .iter()
                        .filter_map(|&i| names.to_wire(&self.found.nodes[i].remote))
                        .map(|w| BrowseDescription {
                            node_id: w,
                            browse_direction: BrowseDirection::Forward,
                            reference_type_id: NodeId::ns0(40),
                            include_subtypes: false,
                            node_class_mask: 0,
                            result_mask: 63,
                        })
                        .collect::<Vec<_>>();
                    if descs.len() != nodes.len() {
                        return None;
                    }
                    return Some((browse_request(descs), Job::RootTypes { nodes }));
                }
                None
            }
            Phase::Browse => {
                if !self.next.is_empty() {
                    let n = self.ops.min(self.next.len());
                    let (nodes, cps): (Vec<usize>, Vec<ByteString>) = self.next.drain(..n).unzip();
                    return Some((
                        Request::BrowseNext(Box::new(BrowseNextRequest {
                            release_continuation_points: false,
                            continuation_points: cps,
                            ..Default::default()
                        })),
                        Job::BrowseNext { nodes },
                    ));
                }
                if self.browse.is_empty() {
                    return None;
                }
                let mut nodes = Vec::new();
                let mut descs = Vec::new();
                while nodes.len() < self.ops {
                    let Some(i) = self.browse.pop_front() else {
                        break;
                    };
                    let Some(wire) = names.to_wire(&self.found.nodes[i].remote) else {
                        continue;
                    };
                    nodes.push(i);
                    descs.push(browse_desc(wire, BrowseDirection::Forward, HIERARCHICAL));
                }
                if nodes.is_empty() {
                    return None;
                }
                Some((browse_request(descs), Job::Browse { nodes }))
            }
            Phase::Attrs => {
                let mut ops = Vec::new();
                let mut reads = Vec::new();
                while ops.len() < self.ops {
                    let Some((i, a)) = self.attrs.pop_front() else {
                        break;
                    };
                    let Some(wire) = names.to_wire(&self.found.nodes[i].remote) else {
                        continue;
                    };
                    ops.push((i, a));
                    reads.push(read_op(wire, a));
                }
                if ops.is_empty() {
                    return None;
                }
                Some((read_request(reads), Job::Attrs { ops }))
            }
            Phase::Types => {
                if !self.type_attrs.is_empty() {
                    let mut ops = Vec::new();
                    let mut reads = Vec::new();
                    while ops.len() < self.ops {
                        let Some((i, a)) = self.type_attrs.pop_front() else {
                            break;
                        };
                        let Some(wire) = names.to_wire(&self.found.types[i].remote) else {
                            continue;
                        };
                        ops.push((i, a));
                        reads.push(read_op(wire, a));
                    }
                    if !ops.is_empty() {
                        return Some((read_request(reads), Job::TypeAttrs { ops }));
                    }
                }
                if !self.supertypes.is_empty() {
                    let mut types = Vec::new();
                    let mut descs = Vec::new();
                    while types.len() < self.ops {
                        let Some(i) = self.supertypes.pop_front() else {
                            break;
                        };
                        let Some(wire) = names.to_wire(&self.found.types[i].remote) else {
                            continue;
                        };
                        types.push(i);
                        descs.push(browse_desc(wire, BrowseDirection::Inverse, HAS_SUBTYPE));
                    }
                    if !types.is_empty() {
                        return Some((browse_request(descs), Job::Supertypes { types }));
                    }
                }
                None
            }
            Phase::Done => None,
        }
    }

    /// Takes the answer to a request [`Crawl::poll`] handed out. `Err` ends the crawl (it
    /// is begun again later).
    pub fn on_response(&mut self, job: Job, resp: Response, names: &Names) -> Result<(), String> {
        self.in_flight = self.in_flight.saturating_sub(1);
        let s = service_result(&resp);
        if s.is_bad() {
            return Err(bad("crawl", s));
        }
        match (job, resp) {
            (Job::Roots { path }, Response::Browse(r)) => {
                let Some(result) = r.results.into_iter().next() else {
                    return Err("crawl: a Browse without results".into());
                };
                if result.status_code.is_bad() {
                    return Err(bad("browse of the roots", result.status_code));
                }
                match path {
                    None => {
                        for rd in &result.references {
                            if let Some(i) = self.discover(rd, names) {
                                if !self.found.roots.contains(&i) {
                                    self.found.roots.push(i);
                                }
                            }
                        }
                        if !result.continuation_point.as_bytes().is_empty() {
                            self.roots_next = Some(result.continuation_point);
                        }
                    }
                    Some((p, step)) => {
                        let (segments, _, _) = &self.paths[p];
                        let Some((ns, name)) = segments.get(step).cloned() else {
                            return Ok(());
                        };
                        let hit = result.references.iter().find(|rd| {
                            rd.browse_name.name.as_str() == name
                                && ns.is_none_or(|n| n == rd.browse_name.namespace_index)
                        });
                        let Some(rd) = hit else {
                            return Err(format!(
                                "crawl: mirror path segment {name:?} not found on the server"
                            ));
                        };
                        let last = step + 1 == segments.len();
                        if last {
                            if let Some(i) = self.discover(rd, names) {
                                if !self.found.roots.contains(&i) {
                                    self.found.roots.push(i);
                                }
                            }
                            self.paths[p].1 = usize::MAX;
                            self.paths[p].2 = NodeId::NULL;
                            // Finished paths are dropped.
                            self.paths.retain(|(_, _, at)| !at.is_null());
                        } else {
                            let Some(next) = names.remote_expanded(&rd.node_id) else {
                                return Err(format!("crawl: {name:?} is in an unknown namespace"));
                            };
                            self.paths[p].1 = step + 1;
                            self.paths[p].2 = next;
                        }
                    }
                }
            }
            (Job::RootsNext, Response::BrowseNext(r)) => {
                let Some(result) = r.results.into_iter().next() else {
                    return Err("crawl: a BrowseNext without results".into());
                };
                for rd in &result.references {
                    if let Some(i) = self.discover(rd, names) {
                        if !self.found.roots.contains(&i) {
                            self.found.roots.push(i);
                        }
                    }
                }
                if !result.continuation_point.as_bytes().is_empty() {
                    self.roots_next = Some(result.continuation_point);
                }
            }
            (Job::Describe { nodes }, Response::Read(r)) => {
                let mut values = r.results.into_iter();
                for i in nodes {
                    let (Some(class), Some(name), Some(display)) =
                        (values.next(), values.next(), values.next())
                    else {
                        return Err("crawl: a short Read".into());
                    };
                    let f = &mut self.found.nodes[i];
                    if let Variant::Int32(c) = class.value {
                        f.class = NodeClass(c);
                    }
                    if let Variant::QualifiedName(q) = name.value {
                        f.browse_name = names.local_qname(&q);
                    }
                    if let Variant::LocalizedText(t) = display.value {
                        f.display_name = *t;
                    }
                    if !matches!(
                        f.class,
                        NodeClass::Object | NodeClass::Variable | NodeClass::Method
                    ) {
                        return Err(format!(
                            "crawl: mirror root {} is no Object, Variable or Method (or unknown: {})",
                            f.remote,
                            class.status_code()
                        ));
                    }
                }
            }
            (Job::RootTypes { nodes }, Response::Browse(r)) => {
                for (i, result) in nodes.into_iter().zip(r.results) {
                    if let Some(rd) = result.references.first() {
                        self.found.nodes[i].type_def = names.remote_expanded(&rd.node_id);
                    }
                }
            }
            (Job::Browse { nodes }, Response::Browse(r)) => {
                self.take_children(&nodes, r.results, names);
            }
            (Job::BrowseNext { nodes }, Response::BrowseNext(r)) => {
                self.take_children(&nodes, r.results, names);
            }
            (Job::Attrs { ops }, Response::Read(r)) => {
                if r.results.len() != ops.len() {
                    return Err("crawl: a Read with another number of results".into());
                }
                for ((i, a), dv) in ops.into_iter().zip(r.results) {
                    self.take_attribute(i, a, dv, names);
                }
            }
            (Job::TypeAttrs { ops }, Response::Read(r)) => {
                if r.results.len() != ops.len() {
                    return Err("crawl: a Read with another number of results".into());
                }
                for ((i, a), dv) in ops.into_iter().zip(r.results) {
                    let t = &mut self.found.types[i];
                    match (a, dv.value) {
                        (attr::NODE_CLASS, Variant::Int32(c)) => t.class = NodeClass(c),
                        (attr::BROWSE_NAME, Variant::QualifiedName(q)) => {
                            t.browse_name = names.local_qname(&q)
                        }
                        (attr::DISPLAY_NAME, Variant::LocalizedText(l)) => t.display_name = *l,
                        (attr::IS_ABSTRACT, Variant::Boolean(b)) => t.is_abstract = b,
                        (attr::SYMMETRIC, Variant::Boolean(b)) => t.symmetric = b,
                        (attr::INVERSE_NAME, Variant::LocalizedText(l)) => {
                            t.inverse_name = Some(*l)
                        }
                        (attr::DATA_TYPE_DEFINITION, Variant::ExtensionObject(e)) => {
                            t.definition = Some(*e)
                        }
                        _ => {}
                    }
                }
            }
            (Job::Supertypes { types }, Response::Browse(r)) => {
                for (i, result) in types.into_iter().zip(r.results) {
                    let sup = result
                        .references
                        .iter()
                        .find(|rd| !rd.is_forward)
                        .and_then(|rd| names.remote_expanded(&rd.node_id));
                    self.found.types[i].supertype = sup;
                }
            }
            (job, resp) => return Err(format!("crawl: {} does not answer {job:?}", resp.name())),
        }
        Ok(())
    }

    /// A node named by a reference: found already, or found now (and queued for its own
    /// browse once the roots are done). Namespace 0 instances are not mirrored.
    fn discover(&mut self, rd: &ReferenceDescription, names: &Names) -> Option<usize> {
        let remote = names.remote_expanded(&rd.node_id)?;
        if remote.namespace == 0 {
            return None;
        }
        if !matches!(
            rd.node_class,
            NodeClass::Object | NodeClass::Variable | NodeClass::Method
        ) {
            return None;
        }
        if let Some(&i) = self.seen.get(&remote) {
            return Some(i);
        }
        let type_def = names
            .remote_expanded(&rd.type_definition)
            .filter(|t| !t.is_null());
        let i = self.push(Found {
            remote,
            class: rd.node_class,
            browse_name: names.local_qname(&rd.browse_name),
            display_name: rd.display_name.clone(),
            type_def,
            refs: Vec::new(),
            var: None,
            event_notifier: 0,
            executable: false,
        })?;
        if self.phase == Phase::Browse {
            self.browse.push_back(i);
        }
        Some(i)
    }

    fn take_children(
        &mut self,
        nodes: &[usize],
        results: Vec<uaring_core::generated::types::BrowseResult>,
        names: &Names,
    ) {
        for (&parent, result) in nodes.iter().zip(results) {
            if result.status_code.is_bad() {
                continue; // gone meanwhile: mirrored without children
            }
            for rd in &result.references {
                if !rd.is_forward {
                    continue;
                }
                let Some(child) = self.discover(rd, names) else {
                    continue;
                };
                let Some(rt) = names.remote(&rd.reference_type_id) else {
                    continue;
                };
                let refs = &mut self.found.nodes[parent].refs;
                if !refs.iter().any(|(t, c)| *c == child && *t == rt) {
                    refs.push((rt, child));
                }
            }
            if !result.continuation_point.as_bytes().is_empty() {
                self.next.push_back((parent, result.continuation_point));
            }
        }
    }

    fn take_attribute(&mut self, i: usize, a: u32, dv: DataValue, names: &Names) {
        let f = &mut self.found.nodes[i];
        if f.class == NodeClass::Variable && f.var.is_none() {
            f.var = Some(Box::default());
        }
        match (a, f.var.as_deref_mut()) {
            (attr::EVENT_NOTIFIER, _) => {
                if let Variant::Byte(b) = dv.value {
                    f.event_notifier = b;
                }
            }
            (attr::EXECUTABLE, _) => {
                if let Variant::Boolean(b) = dv.value {
                    f.executable = b;
                }
            }
            (attr::USER_EXECUTABLE, _) => {
                if let Variant::Boolean(b) = dv.value {
                    f.executable &= b;
                }
            }
            (attr::DATA_TYPE, Some(v)) => {
                if let Variant::NodeId(id) = dv.value {
                    v.data_type = names.remote(&id).unwrap_or(NodeId::ns0(24));
                }
            }
            (attr::VALUE_RANK, Some(v)) => {
                if let Variant::Int32(r) = dv.value {
                    v.value_rank = r;
                }
            }
            (attr::ARRAY_DIMENSIONS, Some(v)) => {
                if let Variant::Array(arr) = dv.value {
                    v.array_dimensions = arr
                        .values
                        .iter()
                        .filter_map(|x| match x {
                            Variant::UInt32(n) => Some(*n),
                            _ => None,
                        })
                        .collect();
                }
            }
            (attr::ACCESS_LEVEL, Some(v)) => {
                if let Variant::Byte(b) = dv.value {
                    v.access_level = b;
                }
            }
            (attr::USER_ACCESS_LEVEL, Some(v)) => {
                if let Variant::Byte(b) = dv.value {
                    v.user_access_level = b;
                }
            }
            (attr::MINIMUM_SAMPLING_INTERVAL, Some(v)) => {
                if let Variant::Double(d) = dv.value {
                    v.minimum_sampling_interval = d;
                }
            }
            (attr::HISTORIZING, Some(v)) => {
                if let Variant::Boolean(b) = dv.value {
                    v.historizing = b;
                }
            }
            (attr::VALUE, Some(v)) => {
                let mut dv = dv;
                names.value_in(&mut dv.value);
                v.value = dv;
            }
            _ => {}
        }
    }
}

fn names_slot(names: &Names, uri: &str) -> Option<u16> {
    // Slots are looked up through a NodeId in the URI's namespace.
    let probe = uaring_core::types::ExpandedNodeId {
        node_id: NodeId::numeric(0, 0),
        namespace_uri: uri.into(),
        server_index: 0,
    };
    names.remote_expanded(&probe).map(|id| id.namespace)
}
