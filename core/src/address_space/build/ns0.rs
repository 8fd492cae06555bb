//! Namespace 0 from the generated NodeSet (`crate::generated::ns0`).
//!
//! Every node keeps its NodeSet attributes except WriteMask/UserWriteMask, which are set
//! to 0: this server writes no attribute but Value, and the masks must say so.

use super::AddressSpaceBuilder;
use crate::address_space::value::ValueCell;
use crate::address_space::{
    ClassAttributes, Node, NodeClass, Reference, ValueSource, VariableAttributes,
    VariableTypeAttributes,
};
use std::collections::{HashMap, HashSet};

use crate::generated::node_ids;
use crate::generated::ns0::{self, Ns0Node};
use crate::types::NodeId;
use crate::types::{BuiltinType, DataValue, ExpandedNodeId};

/// The fixed built-in scalar type of a Variable, when its DataType is one (the value cell
/// can then use its lock-free scalar representation).
fn fixed_type(n: &Ns0Node) -> Option<BuiltinType> {
    match n.data_type.as_ns0() {
        Some(id) if n.value_rank == -1 && (1..=25).contains(&id) => BuiltinType::from_id(id as u8),
        _ => None,
    }
}

fn convert(n: Ns0Node) -> Result<Node, String> {
    let attributes = match n.node_class {
        NodeClass::Object => ClassAttributes::Object {
            event_notifier: n.event_notifier,
        },
        NodeClass::Variable => {
            let fixed = fixed_type(&n);
            ClassAttributes::Variable(VariableAttributes {
                value: ValueSource::Cell(ValueCell::new(DataValue::new(n.value), fixed)),
                data_type: n.data_type,
                value_rank: n.value_rank,
                array_dimensions: n.array_dimensions,
                access_level: n.access_level,
                user_access_level: n.user_access_level,
                access_level_ex: n.access_level_ex,
                minimum_sampling_interval: n.minimum_sampling_interval,
                historizing: n.historizing,
            })
        }
        NodeClass::Method => ClassAttributes::Method {
            executable: n.executable,
            user_executable: n.user_executable,
        },
        NodeClass::ObjectType => ClassAttributes::ObjectType {
            is_abstract: n.is_abstract,
        },
        NodeClass::VariableType => ClassAttributes::VariableType(VariableTypeAttributes {
            value: n.value,
            data_type: n.data_type,
            value_rank: n.value_rank,
            array_dimensions: n.array_dimensions,
            is_abstract: n.is_abstract,
        }),
        NodeClass::ReferenceType => ClassAttributes::ReferenceType {
            is_abstract: n.is_abstract,
            symmetric: n.symmetric,
            inverse_name: (!n.inverse_name.text.is_null()).then_some(n.inverse_name),
        },
        NodeClass::DataType => ClassAttributes::DataType {
            is_abstract: n.is_abstract,
            data_type_definition: n.data_type_definition,
        },
        NodeClass::View => ClassAttributes::View {
            contains_no_loops: n.contains_no_loops,
            event_notifier: n.event_notifier,
        },
        other => {
            return Err(format!(
                "namespace 0 node {} has NodeClass {other:?}",
                n.node_id
            ))
        }
    };
    Ok(Node {
        generation: 0,
        node_id: n.node_id,
        node_class: n.node_class,
        browse_name: n.browse_name,
        display_name: n.display_name,
        description: n.description,
        write_mask: 0,
        user_write_mask: 0,
        references: n
            .references
            .into_iter()
            .map(|r| Reference {
                reference_type: r.reference_type,
                is_forward: r.is_forward,
                target: ExpandedNodeId::local(r.target),
            })
            .collect(),
        attributes,
    })
}

/// Optional nodes of the Server object that this server leaves out, with everything
/// under them: limits of services it does not offer (history, node management), the
/// HistoryServerCapabilities and the default history configurations of a server without
/// history, server-wide totals that depend on the runtime's shard count, which the address
/// space does not know (the per-shard limits are in docs/Limits.md), and features it does
/// not implement: PubSub (PublishSubscribe), push certificate management
/// (ServerConfiguration: the `uaring` library brings back the part it serves with
/// [`add_omitted_subtree`]), Resources, LocalTime, EstimatedReturnTime, UrisVersion, the
/// sampling-interval diagnostics, the Aliases' LastChange and namespace 0's default role
/// permissions and access restrictions (none are set: the server's default rule applies).
/// Otherwise a client would find features that are not there, or read them as Null.
pub const OMITTED: &[u32] = &[
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadEvents,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateData,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateEvents,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerNodeManagement,
    node_ids::HistoryServerCapabilities,
    node_ids::Server_ServerCapabilities_MaxSessions,
    node_ids::Server_ServerCapabilities_MaxSubscriptions,
    node_ids::Server_ServerCapabilities_MaxMonitoredItems,
    node_ids::Server_ServerCapabilities_ConformanceUnits,
    node_ids::PublishSubscribe,
    node_ids::ServerConfiguration,
    node_ids::Resources,
    node_ids::DefaultHAConfiguration,
    node_ids::DefaultHEConfiguration,
    node_ids::Server_LocalTime,
    node_ids::Server_EstimatedReturnTime,
    node_ids::Server_UrisVersion,
    node_ids::Server_ServerDiagnostics_SamplingIntervalDiagnosticsArray,
    node_ids::Aliases_LastChange,
    node_ids::OPCUANamespaceMetadata_DefaultRolePermissions,
    node_ids::OPCUANamespaceMetadata_DefaultUserRolePermissions,
    node_ids::OPCUANamespaceMetadata_DefaultAccessRestrictions,
];

/// The ids in [`OMITTED`] and every node under them (HasComponent / HasProperty, declared
/// on the parent as a forward reference or on the child as an inverse one).
fn omitted(nodes: &[Ns0Node], keep: &[u32]) -> HashSet<NodeId> {
    let roots: Vec<u32> = OMITTED
        .iter()
        .copied()
        .filter(|i| !keep.contains(i))
        .collect();
    subtree(nodes, &roots)
}

/// Adds one [`OMITTED`] node `root` back, with those of its descendants listed in `keep`
/// (each Method in `keep` with its argument properties), to a builder that has namespace 0
/// without it ([`add_namespace0`]): a feature of the runtime (the `uaring` library's push
/// certificate management) brings back the part of namespace 0 it serves, and only that.
/// References to nodes that are not in the builder are dropped. Returns the ids added.
pub fn add_omitted_subtree(
    b: &mut AddressSpaceBuilder,
    root: u32,
    keep: &[u32],
) -> Result<Vec<NodeId>, String> {
    if !OMITTED.contains(&root) {
        return Err(format!("i={root} is not an omitted namespace-0 node"));
    }
    let nodes = ns0::nodes().map_err(|e| format!("namespace 0: {e}"))?;
    let under_root = subtree(&nodes, &[root]);
    let methods: Vec<u32> = keep
        .iter()
        .copied()
        .filter(|&i| {
            nodes
                .iter()
                .any(|n| n.node_id == NodeId::ns0(i) && n.node_class == NodeClass::Method)
        })
        .collect();
    let mut wanted: HashSet<NodeId> = subtree(&nodes, &methods);
    wanted.insert(NodeId::ns0(root));
    wanted.extend(keep.iter().map(|&i| NodeId::ns0(i)));
    wanted.retain(|id| under_root.contains(id) && !b.contains(id));
    let mut added = Vec::new();
    for mut n in nodes {
        if !wanted.contains(&n.node_id) {
            continue;
        }
        n.references.retain(|r| {
            wanted.contains(&r.target) || (b.contains(&r.target) && !under_root.contains(&r.target))
        });
        added.push(n.node_id.clone());
        b.add(convert(n)?)?;
    }
    Ok(added)
}

/// `ids` and every node under them (HasComponent / HasProperty, declared either way).
fn subtree(nodes: &[Ns0Node], ids: &[u32]) -> HashSet<NodeId> {
    const HAS_COMPONENT: u32 = 47;
    const HAS_PROPERTY: u32 = 46;
    let child_ref = |r: &ns0::Ns0Reference| {
        matches!(
            r.reference_type.as_ns0(),
            Some(HAS_COMPONENT) | Some(HAS_PROPERTY)
        )
    };
    let by_id: HashMap<&NodeId, &Ns0Node> = nodes.iter().map(|n| (&n.node_id, n)).collect();
    let mut declared_on_child: HashMap<&NodeId, Vec<&NodeId>> = HashMap::new();
    for n in nodes {
        for r in n
            .references
            .iter()
            .filter(|r| !r.is_forward && child_ref(r))
        {
            declared_on_child
                .entry(&r.target)
                .or_default()
                .push(&n.node_id);
        }
    }
    let mut out: HashSet<NodeId> = HashSet::new();
    let mut stack: Vec<NodeId> = ids.iter().map(|&i| NodeId::ns0(i)).collect();
    while let Some(id) = stack.pop() {
        if !out.insert(id.clone()) {
            continue;
        }
        if let Some(children) = declared_on_child.get(&id) {
            stack.extend(children.iter().map(|c| (*c).clone()));
        }
        let Some(n) = by_id.get(&id) else { continue };
        for r in &n.references {
            if r.is_forward && child_ref(r) {
                stack.push(r.target.clone());
            }
        }
    }
    out
}

/// What a server with a history store keeps of [`OMITTED`]: its HistoryRead and
/// HistoryUpdate (values) limits and the HistoryServerCapabilities.
pub const HISTORY: &[u32] = &[
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadData,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryReadEvents,
    node_ids::Server_ServerCapabilities_OperationLimits_MaxNodesPerHistoryUpdateData,
    node_ids::HistoryServerCapabilities,
];

/// Adds namespace 0, less the [`OMITTED`] nodes and the references to them.
pub fn add_namespace0(b: &mut AddressSpaceBuilder) -> Result<(), String> {
    add_namespace0_keeping(b, &[])
}

/// [`add_namespace0`], keeping the [`OMITTED`] nodes in `keep` (and what is under them).
pub fn add_namespace0_keeping(b: &mut AddressSpaceBuilder, keep: &[u32]) -> Result<(), String> {
    let nodes = ns0::nodes().map_err(|e| format!("namespace 0: {e}"))?;
    let gone = omitted(&nodes, keep);
    b.reserve(nodes.len());
    for mut n in nodes {
        if gone.contains(&n.node_id) {
            continue;
        }
        n.references.retain(|r| !gone.contains(&r.target));
        b.add(convert(n)?)?;
    }
    Ok(())
}
