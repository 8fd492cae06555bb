//! The builder's index of declared references by their target: which nodes declare a
//! reference to a node (in either direction). Before `finish` a reference is stored only where
//! it was declared (a NodeSet declares HasSubtype on the subtype or on the supertype, a child's
//! HasComponent on the child or on the parent), so "the children of a type" or "the supertype
//! of a type" would otherwise read every node added so far — which made each Object of a
//! modelled type, and each alarm, added after a million Variables cost a million-node scan per
//! question asked.
//!
//! Kept as singly linked lists in flat tables (no allocation per node): per target, the last
//! entry naming it; per entry, the declaring node and the entry before it. A target not added
//! yet is named by its interned foreign id ([`super::super::store::Key::Foreign`]). Entries are
//! only added: a node changed by `update` is entered again, and whoever reads the index checks
//! that the node still declares the reference ([`RefIndex::sources`] callers do). It lives as
//! long as the builder (about 8 bytes per declared reference and 4 per node; dropped by
//! `finish`).

use crate::address_space::store::{Key, Store, NO_INDEX};

#[derive(Default)]
pub(super) struct RefIndex {
    /// Per node index: the last entry whose reference targets that node, or `NO_INDEX`.
    local: Vec<u32>,
    /// Per foreign id: the same, for targets not added when the reference was declared.
    foreign: Vec<u32>,
    /// (declaring node, the previous entry of the same target or `NO_INDEX`).
    entries: Vec<(u32, u32)>,
}

impl RefIndex {
    /// Makes room for `n` more nodes.
    pub(super) fn reserve(&mut self, n: usize) {
        self.local.reserve(n);
        self.entries.reserve(n);
    }

    /// Enters the references the node at `source` declares now.
    pub(super) fn enter(&mut self, store: &Store, source: u32) {
        let Some(r) = store.rec(source) else { return };
        for x in r.refs() {
            self.push(x.target_key(), source);
        }
    }

    /// Enters one reference declared on `source` to `target`.
    pub(super) fn push(&mut self, target: Key, source: u32) {
        let (table, at) = match target {
            Key::Local(t) if t == source => return,
            Key::Local(t) => (&mut self.local, t),
            Key::Foreign(f) => (&mut self.foreign, f),
        };
        let at = at as usize;
        if table.len() <= at {
            table.resize(at + 1, NO_INDEX);
        }
        let Some(head) = table.get_mut(at) else {
            return;
        };
        let Ok(e) = u32::try_from(self.entries.len()) else {
            return;
        };
        self.entries.push((source, *head));
        *head = e;
    }

    /// The nodes that declared a reference to the node at `target` (known to the store by
    /// `foreign` too when a reference named it before it was added), in the order they were
    /// added, each once. A node changed since may no longer declare it: check.
    pub(super) fn sources(&self, target: u32, foreign: Option<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let heads = [
            self.local.get(target as usize).copied(),
            foreign.and_then(|f| self.foreign.get(f as usize).copied()),
        ];
        for mut e in heads.into_iter().flatten() {
            while let Some(&(source, prev)) = self.entries.get(e as usize) {
                out.push(source);
                e = prev;
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::address_space::build::make::{folder, variable, READ_ONLY};
    use crate::address_space::build::{build_with, AddressSpaceBuilder};
    use crate::address_space::ids;
    use crate::config::ServerConfig;
    use crate::types::{DataValue, DateTime, ExpandedNodeId, NodeId, QualifiedName};
    use crate::Now;

    fn ids_of(b: &AddressSpaceBuilder, target: &NodeId) -> Vec<NodeId> {
        b.referencing(target).iter().map(|n| n.node_id()).collect()
    }

    fn var(name: &str, parent: &NodeId) -> crate::address_space::Node {
        variable(
            NodeId::string(1, name),
            QualifiedName::new(1, name),
            NodeId::ns0(11),
            -1,
            Vec::new(),
            DataValue::default(),
            READ_ONLY,
            0.0,
            Some((parent.clone(), ids::HAS_COMPONENT)),
        )
    }

    /// The declarations of the other end, each node once and in the order added; a reference
    /// declared before its target existed; a node that no longer declares it after `update`.
    #[test]
    fn finds_the_other_ends_declarations() {
        let now = Now::new(0, DateTime::default());
        let mut checked = false;
        build_with(&ServerConfig::default(), now, &mut |b| {
            let parent = NodeId::string(1, "P");
            let later = NodeId::string(1, "Later");
            b.add(folder(
                parent.clone(),
                QualifiedName::new(1, "P"),
                NodeId::ns0(ids::OBJECTS_FOLDER),
            ))?;
            assert!(ids_of(b, &parent).is_empty(), "its own declarations aside");
            b.add(var("A", &parent))?;
            // Two references to P from B: B once.
            let mut bn = var("B", &parent);
            bn.references.push(crate::address_space::Reference {
                reference_type: NodeId::ns0(ids::ORGANIZES),
                is_forward: false,
                target: ExpandedNodeId::local(parent.clone()),
            });
            // And one to a node not added yet.
            bn.references.push(crate::address_space::Reference {
                reference_type: NodeId::ns0(ids::HAS_PROPERTY),
                is_forward: true,
                target: ExpandedNodeId::local(later.clone()),
            });
            b.add(bn)?;
            b.add(var("C", &parent))?;
            assert_eq!(
                ids_of(b, &parent),
                vec![
                    NodeId::string(1, "A"),
                    NodeId::string(1, "B"),
                    NodeId::string(1, "C")
                ]
            );
            assert!(ids_of(b, &later).is_empty(), "not added yet");
            b.add(var("Later", &NodeId::string(1, "C")))?;
            assert_eq!(ids_of(b, &later), vec![NodeId::string(1, "B")]);
            assert_eq!(ids_of(b, &NodeId::string(1, "C")), vec![later.clone()]);
            // A reference added to an existing node is entered too.
            b.add_reference(&NodeId::string(1, "C"), ids::ORGANIZES, later.clone(), true)?;
            assert_eq!(
                ids_of(b, &later),
                vec![NodeId::string(1, "B"), NodeId::string(1, "C")]
            );
            // A changes its parent from P to C.
            b.update(&NodeId::string(1, "A"), |n| {
                n.references.update(|refs| {
                    for r in refs.iter_mut().filter(|r| !r.is_forward) {
                        r.target = ExpandedNodeId::local(NodeId::string(1, "C"));
                    }
                })
            });
            assert_eq!(
                ids_of(b, &parent),
                vec![NodeId::string(1, "B"), NodeId::string(1, "C")]
            );
            assert_eq!(
                ids_of(b, &NodeId::string(1, "C")),
                vec![NodeId::string(1, "A"), later.clone()]
            );
            assert!(ids_of(b, &NodeId::string(1, "Unknown")).is_empty());
            checked = true;
            Ok(())
        })
        .expect("built");
        assert!(checked);
    }
}
