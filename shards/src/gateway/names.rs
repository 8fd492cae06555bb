//! The namespaces of one mirrored server and how its NodeIds, browse names and values are
//! translated into this server's and back (docs/Gateway.md, "Namespaces").
//!
//! A mirrored server's NodeIds are kept by namespace *URI*, not by its index: each URI the
//! server ever named gets a slot here, and a remote NodeId is stored with the slot as its
//! namespace. The server's NamespaceArray (read at every new session) says which index each
//! slot has on the wire now, so a server that restarts with its namespaces in another
//! order is still mirrored right.
//!
//! Locally each slot maps to two namespaces:
//! - *names*: BrowseNames, type NodeIds, DataType encodings and NodeId values. A companion
//!   specification's URI (`http://opcfoundation.org/UA/…`, or one this server loaded a
//!   NodeSet of) is kept, so a client that knows DI or Machinery finds its types and browse
//!   names; any other URI becomes `urn:uaring:gateway:<server>:<uri>`.
//! - *instances*: the NodeIds of mirrored Objects, Variables and Methods: always
//!   `urn:uaring:gateway:<server>:<uri>` (two servers' instances never collide, also when
//!   both use one companion namespace for them).
//!
//! Namespace 0 is namespace 0 on both sides; its instances (the server's Server object)
//! are never mirrored.

use std::collections::HashMap;

use uaring_core::types::{ExpandedNodeId, NodeId, QualifiedName, Variant};

/// The OPC Foundation's namespace 0.
pub const NS0_URI: &str = "http://opcfoundation.org/UA/";

/// No index on the wire (the server no longer has the URI).
const NOWHERE: u16 = u16::MAX;

/// Which way a value is translated.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// From the wire.
    In,
    /// To the wire; a namespace the server does not have is left as it is.
    Out,
    /// To the wire; a namespace the server does not have becomes [`Names::absent_ns`].
    OutOrAbsent,
}

/// The namespaces of one mirrored server. See the module documentation.
#[derive(Debug, Default)]
pub struct Names {
    server: String,
    /// URI of each slot; slot 0 is namespace 0.
    uris: Vec<String>,
    /// The wire index of each slot now.
    wire: Vec<u16>,
    /// Slot of each wire index now.
    from_wire: Vec<u16>,
    /// Local namespace of each slot for names and for instances (0 until
    /// [`Names::register`] gave it one).
    name_ns: Vec<u16>,
    inst_ns: Vec<u16>,
    /// Local namespace → slot, for names and instances.
    name_rev: HashMap<u16, u16>,
    inst_rev: HashMap<u16, u16>,
    /// URIs kept as they are (companion specifications loaded here).
    companions: std::sync::Arc<Vec<String>>,
}

impl Names {
    /// The namespaces of server `server`; `companions` are the URIs of the companion
    /// models this server loaded (kept besides every `http://opcfoundation.org/UA/…` one).
    pub fn new(server: &str, companions: std::sync::Arc<Vec<String>>) -> Names {
        Names {
            server: server.to_string(),
            uris: vec![NS0_URI.to_string()],
            wire: vec![0],
            from_wire: vec![0],
            name_ns: vec![0],
            inst_ns: vec![0],
            name_rev: HashMap::from([(0, 0)]),
            inst_rev: HashMap::from([(0, 0)]),
            companions,
        }
    }

    /// Is `uri` a companion specification's (kept as it is for names and types)?
    pub fn is_companion(&self, uri: &str) -> bool {
        (uri.starts_with("http://opcfoundation.org/UA/") && uri != NS0_URI)
            || self.companions.iter().any(|c| c == uri)
    }

    /// The local URI of slot `slot`'s instances.
    pub fn instance_uri(&self, slot: u16) -> String {
        format!(
            "urn:uaring:gateway:{}:{}",
            self.server,
            self.uris.get(slot as usize).map_or("", |s| s.as_str())
        )
    }

    /// The local URI of slot `slot`'s names.
    pub fn name_uri(&self, slot: u16) -> String {
        match self.uris.get(slot as usize) {
            Some(u) if self.is_companion(u) => u.clone(),
            _ => self.instance_uri(slot),
        }
    }

    /// The server's NamespaceArray now (at a new session).
    pub fn set_namespace_array(&mut self, array: &[String]) {
        self.wire.iter_mut().skip(1).for_each(|w| *w = NOWHERE);
        self.from_wire = vec![NOWHERE; array.len().max(1)];
        if let Some(w) = self.from_wire.first_mut() {
            *w = 0;
        }
        for (i, uri) in array.iter().enumerate().skip(1) {
            if uri == NS0_URI {
                continue;
            }
            let slot = match self.uris.iter().position(|u| u == uri) {
                Some(s) => s,
                None => {
                    self.uris.push(uri.clone());
                    self.wire.push(NOWHERE);
                    self.name_ns.push(0);
                    self.inst_ns.push(0);
                    self.uris.len() - 1
                }
            };
            if let Some(w) = self.wire.get_mut(slot) {
                *w = i as u16;
            }
            if let Some(f) = self.from_wire.get_mut(i) {
                *f = slot as u16;
            }
        }
    }

    /// Slots (besides 0) that have no local namespaces yet.
    pub fn unregistered(&self) -> Vec<u16> {
        (1..self.uris.len() as u16)
            .filter(|&s| self.inst_ns.get(s as usize) == Some(&0))
            .collect()
    }

    /// Gives slot `slot` its local namespaces (from the edit that adds them).
    pub fn register(&mut self, slot: u16, name_ns: u16, inst_ns: u16) {
        if let (Some(n), Some(i)) = (
            self.name_ns.get_mut(slot as usize),
            self.inst_ns.get_mut(slot as usize),
        ) {
            *n = name_ns;
            *i = inst_ns;
            self.name_rev.insert(name_ns, slot);
            self.inst_rev.insert(inst_ns, slot);
        }
    }

    /// A NodeId of the wire as kept here (namespace = slot); `None` for an index the server's
    /// NamespaceArray does not have.
    pub fn remote(&self, wire: &NodeId) -> Option<NodeId> {
        let slot = *self.from_wire.get(wire.namespace as usize)?;
        (slot != NOWHERE).then(|| NodeId {
            namespace: slot,
            identifier: wire.identifier.clone(),
        })
    }

    /// An ExpandedNodeId of the wire (its URI, if given, or its index) as kept here; `None`
    /// for one of another server or an unknown namespace.
    pub fn remote_expanded(&self, x: &ExpandedNodeId) -> Option<NodeId> {
        if x.server_index != 0 {
            return None;
        }
        match x.namespace_uri.as_opt() {
            Some(uri) if !uri.is_empty() => {
                let slot = self.uris.iter().position(|u| u == uri)?;
                Some(NodeId {
                    namespace: slot as u16,
                    identifier: x.node_id.identifier.clone(),
                })
            }
            _ => self.remote(&x.node_id),
        }
    }

    /// A NodeId kept here as the wire has it now; `None` when the server no longer has its
    /// namespace.
    pub fn to_wire(&self, remote: &NodeId) -> Option<NodeId> {
        let w = *self.wire.get(remote.namespace as usize)?;
        (w != NOWHERE).then(|| NodeId {
            namespace: w,
            identifier: remote.identifier.clone(),
        })
    }

    /// The local NodeId of a mirrored instance.
    pub fn local_instance(&self, remote: &NodeId) -> NodeId {
        NodeId {
            namespace: self
                .inst_ns
                .get(remote.namespace as usize)
                .copied()
                .unwrap_or(0),
            identifier: remote.identifier.clone(),
        }
    }

    /// The local NodeId of a type (or any NodeId named in a value).
    pub fn local_name_id(&self, remote: &NodeId) -> NodeId {
        NodeId {
            namespace: self
                .name_ns
                .get(remote.namespace as usize)
                .copied()
                .unwrap_or(0),
            identifier: remote.identifier.clone(),
        }
    }

    /// A local instance NodeId back as kept here.
    pub fn remote_of_instance(&self, local: &NodeId) -> Option<NodeId> {
        let slot = *self.inst_rev.get(&local.namespace)?;
        Some(NodeId {
            namespace: slot,
            identifier: local.identifier.clone(),
        })
    }

    /// A mirrored instance here as the server's NodeId on the wire now (its
    /// [`Names::remote_of_instance`] through [`Names::to_wire`]).
    pub fn wire_of_instance(&self, local: &NodeId) -> Option<NodeId> {
        self.remote_of_instance(local)
            .and_then(|r| self.to_wire(&r))
    }

    /// A local name NodeId back as kept here.
    pub fn remote_of_name(&self, local: &NodeId) -> Option<NodeId> {
        let slot = *self.name_rev.get(&local.namespace)?;
        Some(NodeId {
            namespace: slot,
            identifier: local.identifier.clone(),
        })
    }

    /// The wire namespace index of a local namespace of this server's (its names' or its
    /// instances'; 0 is 0): a BrowseName or a NodeId going out. `None` for a namespace that
    /// is not this server's (the gateway's own, another server's) or one it no longer has.
    fn wire_ns(&self, local: u16) -> Option<u16> {
        if local == 0 {
            return Some(0);
        }
        let slot = *self
            .inst_rev
            .get(&local)
            .or_else(|| self.name_rev.get(&local))?;
        let w = *self.wire.get(slot as usize)?;
        (w != NOWHERE).then_some(w)
    }

    /// A NodeId here (a mirrored instance, a type, any NodeId of this server's
    /// namespaces) as the wire has it now; `None` as for [`Names::wire_ns`].
    pub fn wire_of(&self, local: &NodeId) -> Option<NodeId> {
        Some(NodeId {
            namespace: self.wire_ns(local.namespace)?,
            identifier: local.identifier.clone(),
        })
    }

    /// A BrowseName here as the wire has it now; `None` as for [`Names::wire_ns`].
    pub fn wire_qname(&self, q: &QualifiedName) -> Option<QualifiedName> {
        Some(QualifiedName {
            namespace_index: self.wire_ns(q.namespace_index)?,
            name: q.name.clone(),
        })
    }

    /// A namespace index the server does not have (one past its NamespaceArray): what a
    /// NodeId or name of no namespace of the server's becomes where it must still go out
    /// (an event filter's where clause), so that it names nothing there.
    pub fn absent_ns(&self) -> u16 {
        self.from_wire.len().min(NOWHERE as usize) as u16
    }

    /// The local namespace of a wire namespace index for names.
    fn name_ns_of_wire(&self, wire: u16) -> u16 {
        self.from_wire
            .get(wire as usize)
            .and_then(|&s| self.name_ns.get(s as usize))
            .copied()
            .unwrap_or(0)
    }

    /// A BrowseName of the wire, local.
    pub fn local_qname(&self, q: &QualifiedName) -> QualifiedName {
        QualifiedName {
            namespace_index: self.name_ns_of_wire(q.namespace_index),
            name: q.name.clone(),
        }
    }

    /// Translates a value from the wire (remote → local): NodeIds, ExpandedNodeIds,
    /// QualifiedNames and ExtensionObject encodings, in arrays and nested values too.
    /// Scalars of other types cost one match.
    pub fn value_in(&self, v: &mut Variant) {
        self.translate(v, Way::In, 0);
    }

    /// Translates a value to the wire (local → remote): NodeIds of this server's names and
    /// of its mirrored instances. A NodeId of a namespace the server does not have is left
    /// as it is (the server answers for it).
    pub fn value_out(&self, v: &mut Variant) {
        self.translate(v, Way::Out, 0);
    }

    /// As [`Names::value_out`], but a NodeId or name of a namespace the server does not
    /// have gets [`Names::absent_ns`] (an event filter's literal: it matches nothing there,
    /// as nothing of that server has it here).
    pub fn value_out_or_absent(&self, v: &mut Variant) {
        self.translate(v, Way::OutOrAbsent, 0);
    }

    fn map_ns(&self, ns: u16, way: Way) -> u16 {
        if ns == 0 {
            return 0;
        }
        match way {
            Way::In => self.name_ns_of_wire(ns),
            Way::Out => self.wire_ns(ns).unwrap_or(ns),
            Way::OutOrAbsent => self.wire_ns(ns).unwrap_or_else(|| self.absent_ns()),
        }
    }

    fn translate(&self, v: &mut Variant, way: Way, depth: u32) {
        if depth > 8 {
            return;
        }
        match v {
            Variant::NodeId(id) => id.namespace = self.map_ns(id.namespace, way),
            Variant::ExpandedNodeId(x)
                if x.namespace_uri.as_opt().is_none_or(|u| u.is_empty()) && x.server_index == 0 =>
            {
                x.node_id.namespace = self.map_ns(x.node_id.namespace, way);
            }
            Variant::QualifiedName(q) => q.namespace_index = self.map_ns(q.namespace_index, way),
            Variant::ExtensionObject(e) => {
                e.type_id.namespace = self.map_ns(e.type_id.namespace, way)
            }
            Variant::DataValue(dv) => self.translate(&mut dv.value, way, depth + 1),
            Variant::Array(a) => {
                use uaring_core::BuiltinType as T;
                if matches!(
                    a.value_type,
                    T::NodeId
                        | T::ExpandedNodeId
                        | T::QualifiedName
                        | T::ExtensionObject
                        | T::DataValue
                        | T::Variant
                ) {
                    for e in a.values.iter_mut() {
                        self.translate(e, way, depth + 1);
                    }
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Names {
        let mut n = Names::new(
            "plc",
            std::sync::Arc::new(vec!["urn:loaded:companion".to_string()]),
        );
        n.set_namespace_array(&[
            NS0_URI.to_string(),
            "urn:plc:app".to_string(),
            "http://opcfoundation.org/UA/DI/".to_string(),
            "urn:loaded:companion".to_string(),
        ]);
        for (slot, (name, inst)) in [(1, (10, 10)), (2, (11, 12)), (3, (13, 14))] {
            n.register(slot, name, inst);
        }
        n
    }

    #[test]
    fn companion_uris_are_kept_for_names_and_instances_get_the_server_s_own() {
        let n = names();
        assert_eq!(n.name_uri(1), "urn:uaring:gateway:plc:urn:plc:app");
        assert_eq!(n.instance_uri(1), n.name_uri(1));
        assert_eq!(n.name_uri(2), "http://opcfoundation.org/UA/DI/");
        assert_eq!(
            n.instance_uri(2),
            "urn:uaring:gateway:plc:http://opcfoundation.org/UA/DI/"
        );
        assert_eq!(n.name_uri(3), "urn:loaded:companion");
        assert!(!n.is_companion(NS0_URI));
    }

    #[test]
    fn ids_follow_the_uri_when_the_server_reorders_its_namespaces() {
        let mut n = names();
        let remote = n.remote(&NodeId::string(2, "Dev")).unwrap();
        assert_eq!(n.local_instance(&remote), NodeId::string(12, "Dev"));
        assert_eq!(n.local_name_id(&remote), NodeId::string(11, "Dev"));
        // A restart with another order and a new namespace.
        n.set_namespace_array(&[
            NS0_URI.to_string(),
            "http://opcfoundation.org/UA/DI/".to_string(),
            "urn:new".to_string(),
            "urn:plc:app".to_string(),
        ]);
        assert_eq!(n.to_wire(&remote), Some(NodeId::string(1, "Dev")));
        assert_eq!(
            n.unregistered(),
            vec![4],
            "urn:new needs namespaces; urn:loaded:companion keeps its"
        );
        assert_eq!(
            n.to_wire(&NodeId::numeric(3, 1)),
            None,
            "gone from the server"
        );
        assert_eq!(
            n.remote_of_instance(&NodeId::string(12, "Dev")),
            Some(remote)
        );
    }

    #[test]
    fn values_are_translated_both_ways() {
        let n = names();
        let mut v = Variant::NodeId(Box::new(NodeId::numeric(2, 15)));
        n.value_in(&mut v);
        assert_eq!(v, Variant::NodeId(Box::new(NodeId::numeric(11, 15))));
        n.value_out(&mut v);
        assert_eq!(v, Variant::NodeId(Box::new(NodeId::numeric(2, 15))));
        let mut a = Variant::array(
            uaring_core::BuiltinType::QualifiedName,
            vec![Variant::QualifiedName(Box::new(QualifiedName::new(1, "x")))],
        )
        .unwrap();
        n.value_in(&mut a);
        let Variant::Array(arr) = &a else { panic!() };
        assert_eq!(
            arr.values[0],
            Variant::QualifiedName(Box::new(QualifiedName::new(10, "x")))
        );
        let mut d = Variant::Double(1.0);
        n.value_in(&mut d);
        assert_eq!(d, Variant::Double(1.0));
    }

    #[test]
    fn ids_of_names_and_instances_go_out_and_others_nowhere_when_asked() {
        let n = names();
        // DI: names in 11, instances in 12, both ns=2 there.
        assert_eq!(
            n.wire_of(&NodeId::string(12, "Dev")),
            Some(NodeId::string(2, "Dev"))
        );
        assert_eq!(
            n.wire_of(&NodeId::numeric(11, 15)),
            Some(NodeId::numeric(2, 15))
        );
        assert_eq!(
            n.wire_of(&NodeId::numeric(0, 2041)),
            Some(NodeId::numeric(0, 2041))
        );
        assert_eq!(
            n.wire_of(&NodeId::numeric(99, 1)),
            None,
            "not this server's"
        );
        assert_eq!(
            n.wire_qname(&QualifiedName::new(13, "x")),
            Some(QualifiedName::new(3, "x"))
        );
        assert_eq!(n.wire_qname(&QualifiedName::new(99, "x")), None);
        assert_eq!(n.absent_ns(), 4, "one past the server's NamespaceArray");
        let mut v = Variant::NodeId(Box::new(NodeId::string(12, "Dev")));
        n.value_out(&mut v);
        assert_eq!(v, Variant::NodeId(Box::new(NodeId::string(2, "Dev"))));
        let mut other = Variant::NodeId(Box::new(NodeId::numeric(99, 1)));
        n.value_out(&mut other);
        assert_eq!(other, Variant::NodeId(Box::new(NodeId::numeric(99, 1))));
        n.value_out_or_absent(&mut other);
        assert_eq!(other, Variant::NodeId(Box::new(NodeId::numeric(4, 1))));
    }
}
