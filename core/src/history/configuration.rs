//! The HistoricalDataConfiguration of historized Variables (Part 11 §5.2.2): each Variable
//! with Historizing true has a HasHistoricalConfiguration reference to an "HA Configuration"
//! Object of HistoricalDataConfigurationType, whose Stepped Property and AggregateConfiguration
//! Object say how the server interpolates the Variable's history and which aggregate settings a
//! processed read uses when the client asks for the server's defaults.
//!
//! Two such Objects serve every historized Variable, one per interpolation (their settings are
//! all the server has to say per Variable): `HA Configuration.Sloped` for Float and Double
//! values, `HA Configuration.Stepped` for any other type ([`stepped`], the rule the store's
//! reads use), both in the server's namespace (1), each referenced by every Variable it
//! describes. Their children are the type's mandatory ones — AggregateConfiguration with
//! TreatUncertainAsBad, PercentDataBad, PercentDataGood and UseSlopedExtrapolation, and
//! Stepped — and ServerTimestampSupported (true: the store keeps the ServerTimestamp of
//! every value). The optional MinTimeInterval, MaxTimeInterval and ExceptionDeviation are left
//! out: the store keeps every value it is given, at no interval and with no deviation.

use crate::address_space::build::{make, AddressSpaceBuilder};
use crate::address_space::history_configuration::{
    configuration_of, stepped_node, SLOPED, STEPPED,
};
use crate::address_space::{ids, Node, NodeClass, Reference};
use crate::generated::node_ids;
use crate::history::aggregate::AggregateConfig;
use crate::types::{DataValue, ExpandedNodeId, NodeId, QualifiedName, Variant};

/// Adds the two HA Configuration Objects (`defaults` as their AggregateConfiguration) and
/// gives every Variable with Historizing true built so far its reference to one. Called once
/// at start when the server has a history store: both Objects exist from then on, so a
/// Variable historized while the server runs gets its reference in the edit that adds it
/// ([`crate::address_space::change::prepare_historized`]). Returns how many Variables got
/// one.
pub fn add(b: &mut AddressSpaceBuilder, defaults: AggregateConfig) -> Result<usize, String> {
    let historized: Vec<(NodeId, bool)> = b
        .nodes()
        .filter_map(|n| {
            let v = n.as_variable()?;
            if !v.historizing() {
                return None;
            }
            Some((n.node_id(), stepped_node(&n)))
        })
        .collect();
    for s in [false, true] {
        if !b.contains(&configuration_of(s)) {
            add_object(b, s, defaults)?;
        }
    }
    for (id, s) in &historized {
        b.add_reference(
            id,
            node_ids::HasHistoricalConfiguration,
            configuration_of(*s),
            true,
        )?;
    }
    Ok(historized.len())
}

fn add_object(
    b: &mut AddressSpaceBuilder,
    stepped: bool,
    c: AggregateConfig,
) -> Result<(), String> {
    let id = configuration_of(stepped);
    b.add(object(
        id.clone(),
        QualifiedName::new(0, "HA Configuration"),
        node_ids::HistoricalDataConfigurationType,
    ))?;
    let aggregate = NodeId::string(1, format!("{}.AggregateConfiguration", id_text(stepped)));
    let mut node = object(
        aggregate.clone(),
        QualifiedName::new(0, "AggregateConfiguration"),
        node_ids::AggregateConfigurationType,
    );
    node.references.0.push(Reference {
        reference_type: NodeId::ns0(ids::HAS_COMPONENT),
        is_forward: false,
        target: ExpandedNodeId::local(id.clone()),
    });
    b.add(node)?;
    for (name, value) in [
        (
            "TreatUncertainAsBad",
            Variant::Boolean(c.treat_uncertain_as_bad),
        ),
        ("PercentDataBad", Variant::Byte(c.percent_data_bad)),
        ("PercentDataGood", Variant::Byte(c.percent_data_good)),
        (
            "UseSlopedExtrapolation",
            Variant::Boolean(c.use_sloped_extrapolation),
        ),
    ] {
        b.add(property(&aggregate, name, value))?;
    }
    b.add(property(&id, "Stepped", Variant::Boolean(stepped)))?;
    b.add(property(
        &id,
        "ServerTimestampSupported",
        Variant::Boolean(true),
    ))?;
    Ok(())
}

fn id_text(stepped: bool) -> &'static str {
    if stepped {
        STEPPED
    } else {
        SLOPED
    }
}

/// An Object of `type_definition` (its parent reference added by the caller or by the
/// HasHistoricalConfiguration references to it).
fn object(node_id: NodeId, browse_name: QualifiedName, type_definition: u32) -> Node {
    let mut node = make::folder(node_id, browse_name, NodeId::ns0(ids::OBJECTS_FOLDER));
    node.references = vec![Reference {
        reference_type: NodeId::ns0(ids::HAS_TYPE_DEFINITION),
        is_forward: true,
        target: ExpandedNodeId::local(NodeId::ns0(type_definition)),
    }]
    .into();
    debug_assert_eq!(node.node_class, NodeClass::Object);
    node
}

/// A read-only Property `name` of `parent`.
fn property(parent: &NodeId, name: &str, value: Variant) -> Node {
    let data_type = match value {
        Variant::Byte(_) => NodeId::ns0(3),
        _ => NodeId::ns0(1),
    };
    let id = match &parent.identifier {
        crate::types::Identifier::String(s) => NodeId::string(1, format!("{s}.{name}")),
        _ => NodeId::string(1, format!("{parent}.{name}")),
    };
    let mut node = make::variable(
        id,
        QualifiedName::new(0, name),
        data_type,
        -1,
        Vec::new(),
        DataValue::new(value),
        make::READ_ONLY,
        0.0,
        Some((parent.clone(), ids::HAS_PROPERTY)),
    );
    for r in node.references.0.iter_mut() {
        if r.reference_type == NodeId::ns0(ids::HAS_TYPE_DEFINITION) {
            r.target = ExpandedNodeId::local(NodeId::ns0(ids::PROPERTY_TYPE));
        }
    }
    node
}
