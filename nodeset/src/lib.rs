//! Companion-specification models (NodeSet2 XML files) loaded into the address space at
//! start, before it is frozen and shared by the shards.
//!
//! core is sans-IO and parses no XML: this crate reads the files (roxmltree), and adds the
//! nodes through core's [`AddressSpaceBuilder`] from the hook of
//! `ServerShared::new_with`. What it does, in order:
//!
//! 1. Every file is read (at most [`MAX_FILE_BYTES`]) and parsed; its `<Models>` name the
//!    models it defines and the models each requires (`<RequiredModel>`).
//! 2. The files are ordered so that every required model comes first (namespace 0 is built
//!    in); a required model that no file provides, or a provided one older (by
//!    PublicationDate) than required, is an error.
//! 3. Per file: its `<NamespaceUris>` are mapped onto the server's namespace table (new
//!    URIs are appended), so `ns=1` in Machinery's file is wherever Machinery landed and
//!    `ns=2` wherever DI did; aliases are resolved; every node is added with its
//!    attributes and references (namespace indexes in NodeIds, BrowseNames and values
//!    remapped). DataTypes get their DataTypeDefinition (StructureDefinition or
//!    EnumDefinition) from `<Definition>`. Values are converted from the XML encoding:
//!    every built-in type but XmlElement, DataValue and DiagnosticInfo, arrays of them,
//!    and ExtensionObjects of any structure whose DataTypeDefinition is known (namespace
//!    0's or a loaded one). Variables get a value cell like the Demo ones.
//! 4. Every reference of every loaded node is checked: its ReferenceType and its target
//!    must exist.
//!
//! Any error names the file, the line and the node; the caller discards the builder, so
//! the server never starts with half a model. What the server does not do with the
//! nodes, it does not advertise: Methods are not executable (Call answers
//! BadNotExecutable) and WriteMask is 0. History is kept as the file gives it only when
//! the server keeps history (`history` of [`load_files`]: a store is configured): a
//! Variable with `Historizing="true"` is then historized (its AccessLevel's HistoryRead
//! bit set, HistoryWrite as the file gives it), and an Object or View whose EventNotifier
//! has HistoryRead keeps the events reported on it (HistoryWrite as given). Otherwise
//! Historizing is false and the history bits of AccessLevel and EventNotifier are
//! cleared; so are the AccessLevel history bits of a Variable that is not historized.

mod value;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use roxmltree::{Document, Node as XNode};
use uaring_core::address_space::build::NS0_URI;
use uaring_core::address_space::value::ValueCell;
use uaring_core::address_space::{
    access_level, event_notifier, ids, AddressSpaceBuilder, ClassAttributes, Node, NodeClass,
    Reference, ValueSource, VariableAttributes, VariableTypeAttributes,
};
use uaring_core::generated::types::{
    EnumDefinition, EnumField, PermissionType, StructureDefinition, StructureField, StructureType,
};
use uaring_core::roles::{RolePermissions, WellKnownRole};
use uaring_core::types::{
    BuiltinType, DataValue, DateTime, ExpandedNodeId, ExtensionObject, LocalizedText, NodeId,
    QualifiedName, Variant,
};

/// Largest NodeSet2 file read, bytes (the largest official companion specification is
/// a few MiB).
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// The version of namespace 0 built into the server (Opc.Ua.NodeSet2.xml of
/// codegen/spec), against which `<RequiredModel ModelUri="http://opcfoundation.org/UA/">`
/// is checked.
pub const NS0_MODEL_VERSION: &str = "1.05.03";
/// Its PublicationDate.
pub const NS0_PUBLICATION_DATE: &str = "2023-12-15T00:00:00Z";

/// A load error: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    /// 1-based; 0 when the error concerns the file as a whole.
    pub line: u32,
    /// The NodeId (as written in the file) of the node concerned, if any.
    pub node: Option<String>,
    pub message: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(n) = &self.node {
            write!(f, ": node {n}")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for LoadError {}

/// A model that was loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelInfo {
    pub uri: String,
    pub version: Option<String>,
    pub publication_date: Option<String>,
    /// Its index in the server's namespace table.
    pub namespace_index: u16,
    pub file: PathBuf,
    /// Nodes added from the file that defines it.
    pub nodes: usize,
}

/// One file's text and the path it is reported under.
pub struct Source {
    pub path: PathBuf,
    pub text: String,
}

/// Reads `paths` and loads them ([`load_sources`]). `history`: the server keeps history
/// (see the crate documentation).
pub fn load_files(
    b: &mut AddressSpaceBuilder,
    paths: &[PathBuf],
    history: bool,
) -> Result<Vec<ModelInfo>, LoadError> {
    let mut sources = Vec::with_capacity(paths.len());
    for p in paths {
        let whole = |message: String| LoadError {
            file: p.clone(),
            line: 0,
            node: None,
            message,
        };
        let len = std::fs::metadata(p)
            .map_err(|e| whole(format!("cannot read: {e}")))?
            .len();
        if len > MAX_FILE_BYTES {
            return Err(whole(format!("{len} bytes; the limit is {MAX_FILE_BYTES}")));
        }
        let text = std::fs::read_to_string(p).map_err(|e| whole(format!("cannot read: {e}")))?;
        sources.push(Source {
            path: p.clone(),
            text,
        });
    }
    load_sources(b, &sources, history)
}

/// A model a file declares.
struct Model<'a, 'i> {
    uri: &'a str,
    version: Option<&'a str>,
    date: Option<&'a str>,
    required: Vec<XNode<'a, 'i>>,
}

/// Loads every source into the builder (see the crate documentation; `history` as in
/// [`load_files`]).
pub fn load_sources(
    b: &mut AddressSpaceBuilder,
    sources: &[Source],
    history: bool,
) -> Result<Vec<ModelInfo>, LoadError> {
    let mut docs = Vec::with_capacity(sources.len());
    for s in sources {
        let opt = roxmltree::ParsingOptions {
            allow_dtd: false,
            ..Default::default()
        };
        let doc = Document::parse_with_options(&s.text, opt).map_err(|e| LoadError {
            file: s.path.clone(),
            line: e.pos().row,
            node: None,
            message: format!("not well-formed XML: {e}"),
        })?;
        docs.push(doc);
    }
    // The models each file defines and requires.
    let mut models: Vec<Vec<Model>> = Vec::with_capacity(docs.len());
    for (s, doc) in sources.iter().zip(&docs) {
        let root = doc.root_element();
        let at = |n: XNode, m: String| LoadError {
            file: s.path.clone(),
            line: line(doc, n),
            node: None,
            message: m,
        };
        if root.tag_name().name() != "UANodeSet" {
            return Err(at(
                root,
                format!(
                    "the root element is <{}>, not <UANodeSet>",
                    root.tag_name().name()
                ),
            ));
        }
        let mut ms = Vec::new();
        if let Some(m) = child(root, "Models") {
            for model in elements(m).filter(|e| e.tag_name().name() == "Model") {
                let uri = model
                    .attribute("ModelUri")
                    .ok_or_else(|| at(model, "<Model> without ModelUri".into()))?;
                let required = elements(model)
                    .filter(|e| e.tag_name().name() == "RequiredModel")
                    .collect();
                ms.push(Model {
                    uri,
                    version: model.attribute("Version"),
                    date: model.attribute("PublicationDate"),
                    required,
                });
            }
        } else if let Some(uri) = child(root, "NamespaceUris")
            .and_then(|n| elements(n).next())
            .and_then(|u| u.text())
        {
            // Files without <Models> define their first namespace and require namespace 0.
            ms.push(Model {
                uri: uri.trim(),
                version: None,
                date: None,
                required: Vec::new(),
            });
        }
        if ms.is_empty() {
            return Err(at(
                root,
                "no <Models> and no <NamespaceUris>: the file defines no model".into(),
            ));
        }
        models.push(ms);
    }

    // Order the files so that required models come first.
    struct Have<'a> {
        version: Option<&'a str>,
        date: Option<&'a str>,
        from: Option<usize>,
    }
    let mut have: HashMap<&str, Have> = HashMap::new();
    have.insert(
        NS0_URI,
        Have {
            version: Some(NS0_MODEL_VERSION),
            date: Some(NS0_PUBLICATION_DATE),
            from: None,
        },
    );
    let app_uri = b.namespace_uris().get(1).cloned().unwrap_or_default();
    for (i, ms) in models.iter().enumerate() {
        for m in ms {
            if m.uri == NS0_URI || m.uri == app_uri {
                return Err(LoadError {
                    file: sources[i].path.clone(),
                    line: 0,
                    node: None,
                    message: format!("defines model {}, which is built into the server", m.uri),
                });
            }
            if let Some(h) = have.get(m.uri) {
                let other = h.from.map_or_else(
                    || "namespace 0".to_string(),
                    |j| sources[j].path.display().to_string(),
                );
                return Err(LoadError {
                    file: sources[i].path.clone(),
                    line: 0,
                    node: None,
                    message: format!("defines model {}, which {other} defines too", m.uri),
                });
            }
        }
        for m in ms {
            have.insert(
                m.uri,
                Have {
                    version: m.version,
                    date: m.date,
                    from: Some(i),
                },
            );
        }
    }
    let mut order = Vec::with_capacity(docs.len());
    let mut done = vec![false; docs.len()];
    let mut ready: Vec<&str> = vec![NS0_URI];
    while order.len() < docs.len() {
        let next = (0..docs.len()).find(|&i| {
            !done[i]
                && models[i].iter().all(|m| {
                    m.required.iter().all(|r| {
                        let u = r.attribute("ModelUri").unwrap_or("");
                        ready.contains(&u) || models[i].iter().any(|own| own.uri == u)
                    })
                })
        });
        let Some(i) = next else {
            // Name the first requirement that cannot be met.
            let i = (0..docs.len()).find(|&i| !done[i]).unwrap_or(0);
            for m in &models[i] {
                for r in &m.required {
                    let u = r.attribute("ModelUri").unwrap_or("");
                    if !ready.contains(&u) {
                        let message = if have.contains_key(u) {
                            format!("model {} requires {u}, and the files require each other in a cycle", m.uri)
                        } else {
                            format!(
                                "model {} requires model {u}, which no NodeSet file given provides",
                                m.uri
                            )
                        };
                        return Err(LoadError {
                            file: sources[i].path.clone(),
                            line: line(&docs[i], *r),
                            node: None,
                            message,
                        });
                    }
                }
            }
            unreachable!("a file that cannot be ordered has an unmet requirement");
        };
        // Versions: what is loaded must not be older than what is required.
        for m in &models[i] {
            for r in &m.required {
                let u = r.attribute("ModelUri").unwrap_or("");
                let h = &have[u];
                if let (Some(want), Some(got)) = (r.attribute("PublicationDate"), h.date) {
                    if parse_datetime(got).unwrap_or(0) < parse_datetime(want).unwrap_or(0) {
                        let what = h.from.map_or_else(
                            || "the built-in namespace 0".to_string(),
                            |j| sources[j].path.display().to_string(),
                        );
                        return Err(LoadError {
                            file: sources[i].path.clone(),
                            line: line(&docs[i], *r),
                            node: None,
                            message: format!(
                                "model {} requires {u} version {} of {want}, but {what} is version {} of {got}",
                                m.uri,
                                r.attribute("Version").unwrap_or("?"),
                                h.version.unwrap_or("?"),
                            ),
                        });
                    }
                }
            }
            ready.push(m.uri);
        }
        done[i] = true;
        order.push(i);
    }

    let mut infos = Vec::new();
    let mut loaded: Vec<Loaded> = Vec::new();
    for &i in &order {
        let f = FileLoader::new(b, &sources[i].path, &docs[i], history)?;
        let (nodes, pending) = f.add_nodes(b)?;
        f.add_definitions(b, &pending)?;
        f.add_values(b, &pending)?;
        for m in &models[i] {
            infos.push(ModelInfo {
                uri: m.uri.to_string(),
                version: m.version.map(str::to_string),
                publication_date: m.date.map(str::to_string),
                namespace_index: b
                    .namespace_uris()
                    .iter()
                    .position(|u| u == m.uri)
                    .unwrap_or(0) as u16,
                file: sources[i].path.clone(),
                nodes,
            });
        }
        loaded.push(Loaded { file: i, pending });
    }
    // Every reference of every loaded node must resolve.
    for l in &loaded {
        let doc = &docs[l.file];
        for p in &l.pending {
            for (el, reference_type, target) in &p.refs {
                let err = |m: String| LoadError {
                    file: sources[l.file].path.clone(),
                    line: line(doc, *el),
                    node: Some(p.written.to_string()),
                    message: m,
                };
                match b.node(reference_type) {
                    Some(t) if t.node_class() == NodeClass::ReferenceType => {}
                    Some(_) => {
                        return Err(err(format!(
                            "reference type {reference_type} is not a ReferenceType"
                        )))
                    }
                    None => {
                        return Err(err(format!(
                            "reference type {reference_type} does not exist"
                        )))
                    }
                }
                if !b.contains(target) {
                    return Err(err(format!("reference target {target} does not exist")));
                }
            }
        }
    }
    Ok(infos)
}

/// The nodes one file added, for the later passes.
struct Loaded<'a, 'i> {
    file: usize,
    pending: Vec<Pending<'a, 'i>>,
}

/// A node added from a file.
struct Pending<'a, 'i> {
    /// Its id in the server's namespaces.
    id: NodeId,
    /// As written in the file (for messages).
    written: &'a str,
    el: XNode<'a, 'i>,
    /// The `<Reference>` element of each declared reference, in order, with its type and
    /// target.
    refs: Vec<(XNode<'a, 'i>, NodeId, NodeId)>,
}

pub(crate) fn line(doc: &Document, n: XNode) -> u32 {
    doc.text_pos_at(n.range().start).row
}

pub(crate) fn child<'a, 'i>(n: XNode<'a, 'i>, name: &str) -> Option<XNode<'a, 'i>> {
    n.children()
        .find(|c| c.is_element() && c.tag_name().name() == name)
}

pub(crate) fn elements<'a, 'i>(n: XNode<'a, 'i>) -> impl Iterator<Item = XNode<'a, 'i>> {
    n.children().filter(|c| c.is_element())
}

/// One file being loaded: its namespace mapping and aliases.
pub(crate) struct FileLoader<'a, 'i> {
    path: &'a Path,
    doc: &'a Document<'i>,
    /// File namespace index → server namespace index.
    ns_map: Vec<u16>,
    aliases: HashMap<&'a str, &'a str>,
    /// The server keeps history: Historizing and the history bits as the file gives them.
    history: bool,
}

impl<'a, 'i: 'a> FileLoader<'a, 'i> {
    fn new(
        b: &mut AddressSpaceBuilder,
        path: &'a Path,
        doc: &'a Document<'i>,
        history: bool,
    ) -> Result<Self, LoadError> {
        let root = doc.root_element();
        let mut f = FileLoader {
            path,
            doc,
            ns_map: vec![0],
            aliases: HashMap::new(),
            history,
        };
        if let Some(n) = child(root, "NamespaceUris") {
            for u in elements(n) {
                let uri = u.text().unwrap_or("").trim();
                let i = b.add_namespace(uri).map_err(|e| f.err(u, None, e))?;
                f.ns_map.push(i);
            }
        }
        if let Some(a) = child(root, "Aliases") {
            for al in elements(a) {
                let name = al
                    .attribute("Alias")
                    .ok_or_else(|| f.err(al, None, "<Alias> without Alias".into()))?;
                f.aliases.insert(name, al.text().unwrap_or("").trim());
            }
        }
        Ok(f)
    }

    pub(crate) fn root(&self) -> XNode<'a, 'i> {
        self.doc.root_element()
    }

    pub(crate) fn err(&self, n: XNode, node: Option<&str>, message: String) -> LoadError {
        LoadError {
            file: self.path.to_path_buf(),
            line: line(self.doc, n),
            node: node.map(str::to_string),
            message,
        }
    }

    /// The file's namespace index mapped to the server's.
    pub(crate) fn ns(&self, i: u16, at: XNode) -> Result<u16, LoadError> {
        self.ns_map.get(i as usize).copied().ok_or_else(|| {
            self.err(
                at,
                None,
                format!("namespace index {i} is not in <NamespaceUris>"),
            )
        })
    }

    /// A NodeId as written in the file (alias or `ns=…;i=…`), in the server's namespaces.
    pub(crate) fn node_id(&self, s: &str, at: XNode) -> Result<NodeId, LoadError> {
        let s = s.trim();
        let s = self.aliases.get(s).copied().unwrap_or(s);
        let mut id = NodeId::parse(s)
            .ok_or_else(|| self.err(at, None, format!("cannot parse NodeId {s:?}")))?;
        id.namespace = self.ns(id.namespace, at)?;
        Ok(id)
    }

    fn qualified_name(&self, s: &str, at: XNode) -> Result<QualifiedName, LoadError> {
        match s.split_once(':') {
            Some((p, rest)) if !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()) => {
                let i: u16 = p
                    .parse()
                    .map_err(|_| self.err(at, None, format!("bad BrowseName {s:?}")))?;
                Ok(QualifiedName::new(self.ns(i, at)?, rest))
            }
            _ => Ok(QualifiedName::new(0, s)),
        }
    }

    /// Pass 1: every node with its attributes and references (values come in pass 3).
    fn add_nodes(
        &self,
        b: &mut AddressSpaceBuilder,
    ) -> Result<(usize, Vec<Pending<'a, 'i>>), LoadError> {
        let root = self.doc.root_element();
        let mut pending = Vec::new();
        for n in elements(root) {
            let tag = n.tag_name().name();
            let node_class = match tag {
                "UAObject" => NodeClass::Object,
                "UAVariable" => NodeClass::Variable,
                "UAMethod" => NodeClass::Method,
                "UAObjectType" => NodeClass::ObjectType,
                "UAVariableType" => NodeClass::VariableType,
                "UAReferenceType" => NodeClass::ReferenceType,
                "UADataType" => NodeClass::DataType,
                "UAView" => NodeClass::View,
                "NamespaceUris" | "ServerUris" | "Models" | "Aliases" | "Extensions" => continue,
                other => return Err(self.err(n, None, format!("unknown element <{other}>"))),
            };
            let written = n
                .attribute("NodeId")
                .ok_or_else(|| self.err(n, None, format!("<{tag}> without NodeId")))?;
            let e = |m: String| self.err(n, Some(written), m);
            let id = self.node_id(written, n).map_err(|x| e(x.message))?;
            let browse = n
                .attribute("BrowseName")
                .ok_or_else(|| e("no BrowseName".into()))?;
            let browse_name = self.qualified_name(browse, n).map_err(|x| e(x.message))?;
            let display_name = match child(n, "DisplayName") {
                Some(d) => localized(d),
                None => LocalizedText::new("", browse_name.name.as_str()),
            };
            let description = child(n, "Description").map(localized).unwrap_or_default();
            let flag = |a: &str| n.attribute(a) == Some("true");
            let num = |a: &str| -> Result<Option<f64>, LoadError> {
                n.attribute(a)
                    .map(|v| {
                        v.trim()
                            .parse::<f64>()
                            .map_err(|_| e(format!("{a}={v:?} is not a number")))
                    })
                    .transpose()
            };
            let byte = |a: &str, default: u8| -> Result<u8, LoadError> {
                n.attribute(a).map_or(Ok(default), |v| {
                    v.trim()
                        .parse()
                        .map_err(|_| e(format!("{a}={v:?} is not a byte")))
                })
            };
            let data_type = match n.attribute("DataType") {
                Some(d) => self.node_id(d, n).map_err(|x| e(x.message))?,
                None => NodeId::ns0(ids::BASE_DATA_TYPE),
            };
            let value_rank: i32 = match n.attribute("ValueRank") {
                Some(v) => v
                    .trim()
                    .parse()
                    .map_err(|_| e(format!("ValueRank={v:?} is not a number")))?,
                None => -1,
            };
            let array_dimensions: Vec<u32> = match n
                .attribute("ArrayDimensions")
                .filter(|a| !a.trim().is_empty())
            {
                Some(a) => a
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse()
                            .map_err(|_| e(format!("ArrayDimensions={a:?}")))
                    })
                    .collect::<Result<_, _>>()?,
                None => Vec::new(),
            };
            // History as the file gives it only where the server keeps it.
            let history_bits = access_level::HISTORY_READ | access_level::HISTORY_WRITE;
            let notifier = |given: u8| {
                let bits = event_notifier::HISTORY_READ | event_notifier::HISTORY_WRITE;
                if self.history && given & event_notifier::HISTORY_READ != 0 {
                    given
                } else {
                    given & !bits
                }
            };
            let attributes = match node_class {
                NodeClass::Object => ClassAttributes::Object {
                    event_notifier: notifier(byte("EventNotifier", 0)?),
                },
                NodeClass::Variable => {
                    let historizing = self.history && flag("Historizing");
                    let keep = |level: u8| {
                        if historizing {
                            level | access_level::HISTORY_READ
                        } else {
                            level & !history_bits
                        }
                    };
                    let al = keep(byte("AccessLevel", access_level::CURRENT_READ)?);
                    let ual = keep(byte("UserAccessLevel", al)?) & al;
                    let access_level_ex = match n.attribute("AccessLevelEx") {
                        Some(v) => Some(
                            v.trim()
                                .parse::<u32>()
                                .map_err(|_| e(format!("AccessLevelEx={v:?}")))?
                                & !(u32::from(
                                    access_level::HISTORY_READ | access_level::HISTORY_WRITE,
                                )),
                        ),
                        None => None,
                    };
                    ClassAttributes::Variable(VariableAttributes {
                        value: ValueSource::Cell(ValueCell::new(
                            DataValue::new(Variant::Empty),
                            None,
                        )),
                        data_type,
                        value_rank,
                        array_dimensions,
                        access_level: al,
                        user_access_level: ual,
                        access_level_ex,
                        minimum_sampling_interval: num("MinimumSamplingInterval")?.unwrap_or(0.0),
                        historizing,
                    })
                }
                NodeClass::Method => ClassAttributes::Method {
                    executable: false,
                    user_executable: false,
                },
                NodeClass::ObjectType => ClassAttributes::ObjectType {
                    is_abstract: flag("IsAbstract"),
                },
                NodeClass::VariableType => ClassAttributes::VariableType(VariableTypeAttributes {
                    value: Variant::Empty,
                    data_type,
                    value_rank,
                    array_dimensions,
                    is_abstract: flag("IsAbstract"),
                }),
                NodeClass::ReferenceType => ClassAttributes::ReferenceType {
                    is_abstract: flag("IsAbstract"),
                    symmetric: flag("Symmetric"),
                    inverse_name: child(n, "InverseName").map(localized),
                },
                NodeClass::DataType => ClassAttributes::DataType {
                    is_abstract: flag("IsAbstract"),
                    data_type_definition: None,
                },
                _ => ClassAttributes::View {
                    contains_no_loops: flag("ContainsNoLoops"),
                    event_notifier: notifier(byte("EventNotifier", 0)?),
                },
            };
            let mut references = Vec::new();
            let mut refs = Vec::new();
            if let Some(rs) = child(n, "References") {
                for r in elements(rs) {
                    let rt = r.attribute("ReferenceType").ok_or_else(|| {
                        self.err(r, Some(written), "<Reference> without ReferenceType".into())
                    })?;
                    let reference_type = self
                        .node_id(rt, r)
                        .map_err(|x| self.err(r, Some(written), x.message))?;
                    let target = self
                        .node_id(r.text().unwrap_or(""), r)
                        .map_err(|x| self.err(r, Some(written), x.message))?;
                    refs.push((r, reference_type.clone(), target.clone()));
                    references.push(Reference {
                        reference_type,
                        is_forward: r.attribute("IsForward") != Some("false"),
                        target: ExpandedNodeId::local(target),
                    });
                }
            }
            if let Some(rp) = child(n, "RolePermissions") {
                let rp = self
                    .role_permissions(rp)
                    .map_err(|x| self.err(rp, Some(written), x))?;
                b.set_role_permissions(id.clone(), rp);
            }
            let node = Node {
                generation: 0,
                node_id: id.clone(),
                node_class,
                browse_name,
                display_name,
                description,
                write_mask: 0,
                user_write_mask: 0,
                references: references.into(),
                attributes,
            };
            b.add(node).map_err(|m| {
                e(format!(
                    "{m} (already defined by namespace 0, the server or an earlier file)"
                ))
            })?;
            pending.push(Pending {
                id,
                written,
                el: n,
                refs,
            });
        }
        Ok((pending.len(), pending))
    }

    /// A `<RolePermissions>` element: `<RolePermission Permissions="N">role id</…>` entries
    /// of well-known roles (the server has no others: another role is an error, so a model
    /// is never served with permissions it did not ask for).
    fn role_permissions(&self, el: XNode) -> Result<RolePermissions, String> {
        let mut rp = RolePermissions::new();
        for e in elements(el) {
            if e.tag_name().name() != "RolePermission" {
                return Err(format!("<{}> in <RolePermissions>", e.tag_name().name()));
            }
            let bits = e.attribute("Permissions").unwrap_or("0").trim();
            let bits: u32 = bits
                .parse()
                .map_err(|_| format!("Permissions={bits:?} is not a number"))?;
            let role = self
                .node_id(e.text().unwrap_or("").trim(), e)
                .map_err(|x| x.message)?;
            let role = WellKnownRole::from_node_id(&role)
                .ok_or_else(|| format!("role {role} is not a well-known role"))?;
            rp = rp.grant(role, PermissionType(bits));
        }
        Ok(rp)
    }

    /// Pass 2: DataTypeDefinition of every DataType with a `<Definition>`.
    fn add_definitions(
        &self,
        b: &mut AddressSpaceBuilder,
        pending: &[Pending],
    ) -> Result<(), LoadError> {
        for p in pending {
            let Some(def) = child(p.el, "Definition") else {
                continue;
            };
            if p.el.tag_name().name() != "UADataType" {
                continue;
            }
            let e = |m: String| self.err(def, Some(p.written), m);
            let eo = if value::is_subtype(b, &p.id, &NodeId::ns0(ids::STRUCTURE)) {
                let node = b.node(&p.id).expect("added");
                let mut default_encoding_id = NodeId::NULL;
                for r in node.refs() {
                    if r.is_forward() && r.type_is_ns0(ids::HAS_ENCODING) {
                        if let Some(t) = r.target_node() {
                            if t.name().1 == Some("Default Binary") {
                                default_encoding_id = t.node_id();
                            }
                        }
                    }
                }
                if default_encoding_id.is_null() {
                    // Declared the other way round, on the encoding object.
                    for q in pending {
                        let n = b.node(&q.id).expect("added");
                        if n.name().1 == Some("Default Binary")
                            && n.refs().any(|r| {
                                !r.is_forward()
                                    && r.type_is_ns0(ids::HAS_ENCODING)
                                    && r.target_node().is_some_and(|t| t.is(&p.id))
                            })
                        {
                            default_encoding_id = q.id.clone();
                        }
                    }
                }
                let base_data_type =
                    value::supertype(b, &p.id).unwrap_or(NodeId::ns0(ids::STRUCTURE));
                let mut fields = Vec::new();
                let mut optional = false;
                for f in elements(def).filter(|f| f.tag_name().name() == "Field") {
                    let name = f
                        .attribute("Name")
                        .ok_or_else(|| e("<Field> without Name".into()))?;
                    let is_optional = f.attribute("IsOptional") == Some("true");
                    optional |= is_optional;
                    let data_type = match f.attribute("DataType") {
                        Some(d) => self.node_id(d, f)?,
                        None => NodeId::ns0(ids::BASE_DATA_TYPE),
                    };
                    let value_rank: i32 = match f.attribute("ValueRank") {
                        Some(v) => v
                            .trim()
                            .parse()
                            .map_err(|_| e(format!("field {name}: ValueRank={v:?}")))?,
                        None => -1,
                    };
                    let array_dimensions = match f
                        .attribute("ArrayDimensions")
                        .filter(|a| !a.trim().is_empty())
                    {
                        Some(a) => a
                            .split(',')
                            .map(|x| {
                                x.trim()
                                    .parse()
                                    .map_err(|_| e(format!("field {name}: ArrayDimensions={a:?}")))
                            })
                            .collect::<Result<_, _>>()?,
                        None => Vec::new(),
                    };
                    let max_string_length = match f.attribute("MaxStringLength") {
                        Some(v) => v
                            .trim()
                            .parse()
                            .map_err(|_| e(format!("field {name}: MaxStringLength={v:?}")))?,
                        None => 0,
                    };
                    fields.push(StructureField {
                        name: name.into(),
                        description: child(f, "Description").map(localized).unwrap_or_default(),
                        data_type,
                        value_rank,
                        array_dimensions,
                        max_string_length,
                        is_optional,
                    });
                }
                let structure_type = if def.attribute("IsUnion") == Some("true") {
                    StructureType::Union
                } else if optional {
                    StructureType::StructureWithOptionalFields
                } else {
                    StructureType::Structure
                };
                ExtensionObject::from_struct(&StructureDefinition {
                    default_encoding_id,
                    base_data_type,
                    structure_type,
                    fields,
                })
            } else {
                let mut fields = Vec::new();
                for f in elements(def).filter(|f| f.tag_name().name() == "Field") {
                    let name = f
                        .attribute("Name")
                        .ok_or_else(|| e("<Field> without Name".into()))?;
                    let value: i64 = match f.attribute("Value") {
                        Some(v) => v
                            .trim()
                            .parse()
                            .map_err(|_| e(format!("field {name}: Value={v:?}")))?,
                        None => -1,
                    };
                    fields.push(EnumField {
                        value,
                        display_name: child(f, "DisplayName")
                            .map(localized)
                            .unwrap_or_else(|| LocalizedText::new("", name)),
                        description: child(f, "Description").map(localized).unwrap_or_default(),
                        name: name.into(),
                    });
                }
                ExtensionObject::from_struct(&EnumDefinition { fields })
            };
            b.update(&p.id, |n| {
                if let ClassAttributes::DataType {
                    data_type_definition,
                    ..
                } = &mut n.attributes
                {
                    *data_type_definition = Some(eo);
                }
            });
        }
        Ok(())
    }

    /// Pass 3: values of Variables and VariableTypes.
    fn add_values(
        &self,
        b: &mut AddressSpaceBuilder,
        pending: &[Pending],
    ) -> Result<(), LoadError> {
        let encodings = value::encoding_map(b);
        for p in pending {
            let Some(v) = child(p.el, "Value") else {
                continue;
            };
            let conv = value::Converter {
                f: self,
                b,
                encodings: &encodings,
            };
            let variant = conv.value(v).map_err(|x| LoadError {
                node: Some(p.written.to_string()),
                ..x
            })?;
            b.update(&p.id, |node| match &mut node.attributes {
                ClassAttributes::Variable(va) => {
                    let fixed = match va.data_type.as_ns0() {
                        Some(t) if va.value_rank == -1 && (1..=25).contains(&t) => {
                            BuiltinType::from_id(t as u8)
                        }
                        _ => None,
                    };
                    va.value = ValueSource::Cell(ValueCell::new(DataValue::new(variant), fixed));
                }
                ClassAttributes::VariableType(vt) => vt.value = variant,
                _ => {}
            });
        }
        Ok(())
    }
}

/// `<DisplayName Locale="en">text</DisplayName>`.
pub(crate) fn localized(n: XNode) -> LocalizedText {
    LocalizedText {
        locale: n.attribute("Locale").unwrap_or("").into(),
        text: n.text().unwrap_or("").into(),
    }
}

/// An xs:dateTime (`2022-11-03T00:00:00Z`, optional fraction and offset) as OPC UA ticks.
pub(crate) fn parse_datetime(s: &str) -> Option<i64> {
    let s = s.trim();
    let (s, offset_s) = if let Some(x) = s.strip_suffix('Z') {
        (x, 0i64)
    } else if s.len() > 6
        && (s.as_bytes()[s.len() - 6] == b'+' || s.as_bytes()[s.len() - 6] == b'-')
        && s.contains('T')
    {
        let (body, off) = s.split_at(s.len() - 6);
        let sign = if off.starts_with('-') { -1 } else { 1 };
        let (h, m) = off[1..].split_once(':')?;
        (
            body,
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60),
        )
    } else {
        (s, 0)
    };
    let (date, time) = s.split_once('T').unwrap_or((s, "00:00:00"));
    let mut d = date.split('-');
    let (y, mo, da): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if !(1..=12).contains(&mo) || !(1..=31).contains(&da) {
        return None;
    }
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (h, mi, se): (i64, i64, i64) = (
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
        t.next()?.parse().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    let unix = days * 86400 + h * 3600 + mi * 60 + se - offset_s;
    let mut f: String = frac.chars().take(7).collect();
    if !f.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    while f.len() < 7 {
        f.push('0');
    }
    let frac_ticks: i64 = f.parse().ok()?;
    let ticks = (unix + 11_644_473_600)
        .checked_mul(10_000_000)?
        .checked_add(frac_ticks)?;
    Some(ticks.max(0))
}

/// DateTime from an xs:dateTime.
pub(crate) fn datetime(s: &str) -> Option<DateTime> {
    parse_datetime(s).map(DateTime)
}
