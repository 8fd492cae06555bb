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
//! every value). Those two have no MinTimeInterval, MaxTimeInterval or ExceptionDeviation: the
//! store keeps every value it is given.
//!
//! Variables collected by rules of their own (a [`Collection`]: `[[history.collection]]` in
//! the server's configuration) reference a pair of Objects per rule instead,
//! `HA Configuration.<n>.Sloped` and `.Stepped` (n from 1), which add the rule's optional
//! Properties: MinTimeInterval and MaxTimeInterval (Duration, ms) when set, ExceptionDeviation
//! and ExceptionDeviationFormat when a deviation is set. The historian applies the rule; these
//! Objects say what it is.

use crate::address_space::build::{make, AddressSpaceBuilder};
use crate::address_space::history_configuration::{
    configuration_in, configuration_of, stepped_node,
};
use crate::address_space::{ids, Node, NodeClass, Reference};
use crate::generated::node_ids;
use crate::history::aggregate::AggregateConfig;
use crate::types::{DataValue, ExpandedNodeId, NodeId, QualifiedName, Variant};

/// How values of a Variable are collected into its history (Part 11 §5.2.2): the optional
/// Properties of its HistoricalDataConfiguration. 0 (or a deviation of 0) is "not set".
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Collection {
    /// The least time between two values kept, ms: a value less than this after the last
    /// one kept (by SourceTimestamp) is not kept, unless its status differs.
    pub min_time_interval_ms: f64,
    /// The most time between two values kept, ms: the current value is kept again (at the
    /// server's time) when nothing was kept for this long, changed or not.
    pub max_time_interval_ms: f64,
    /// How much a numeric value must differ from the last one kept to be kept (a different
    /// status is always kept), in the unit [`Collection::exception_deviation_format`] says.
    pub exception_deviation: f64,
    pub exception_deviation_format: ExceptionDeviationFormat,
}

/// The ExceptionDeviationFormat enumeration (DataType i=890).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ExceptionDeviationFormat {
    #[default]
    AbsoluteValue = 0,
    /// Percent of the last value kept.
    PercentOfValue = 1,
    /// Percent of the Variable's InstrumentRange.
    PercentOfRange = 2,
    /// Percent of the Variable's EURange.
    PercentOfEURange = 3,
}

/// Adds the two HA Configuration Objects (`defaults` as their AggregateConfiguration) and
/// two per entry of `collections`, and gives every Variable with Historizing true built so
/// far its reference to one: that of the entry `collection_of` gives it, else a shared one.
/// Called once at start when the server has a history store: the Objects exist from then on,
/// so a Variable historized while the server runs gets its reference in the edit that adds it
/// ([`crate::address_space::change::prepare_historized`]). Returns how many Variables got
/// one.
pub fn add(
    b: &mut AddressSpaceBuilder,
    defaults: AggregateConfig,
    collections: &[Collection],
    collection_of: &dyn Fn(&NodeId) -> Option<usize>,
) -> Result<usize, String> {
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
            add_object(b, None, s, defaults)?;
        }
        for (i, c) in collections.iter().enumerate() {
            if !b.contains(&configuration_in(Some(i), s)) {
                add_object(b, Some((i, c)), s, defaults)?;
            }
        }
    }
    for (id, s) in &historized {
        let collection = collection_of(id).filter(|i| *i < collections.len());
        b.add_reference(
            id,
            node_ids::HasHistoricalConfiguration,
            configuration_in(collection, *s),
            true,
        )?;
    }
    Ok(historized.len())
}

fn add_object(
    b: &mut AddressSpaceBuilder,
    collection: Option<(usize, &Collection)>,
    stepped: bool,
    c: AggregateConfig,
) -> Result<(), String> {
    let id = configuration_in(collection.map(|(i, _)| i), stepped);
    b.add(object(
        id.clone(),
        QualifiedName::new(0, "HA Configuration"),
        node_ids::HistoricalDataConfigurationType,
    ))?;
    let aggregate = NodeId::string(1, format!("{}.AggregateConfiguration", id_text(&id)));
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
    if let Some((_, rule)) = collection {
        const DURATION: u32 = 290;
        for (name, ms) in [
            ("MinTimeInterval", rule.min_time_interval_ms),
            ("MaxTimeInterval", rule.max_time_interval_ms),
        ] {
            if ms > 0.0 {
                b.add(typed_property(&id, name, Variant::Double(ms), DURATION))?;
            }
        }
        if rule.exception_deviation > 0.0 {
            b.add(property(
                &id,
                "ExceptionDeviation",
                Variant::Double(rule.exception_deviation),
            ))?;
            b.add(typed_property(
                &id,
                "ExceptionDeviationFormat",
                Variant::Int32(rule.exception_deviation_format as i32),
                node_ids::ExceptionDeviationFormat,
            ))?;
        }
    }
    Ok(())
}

/// The text of a string NodeId (every HA Configuration's is one).
fn id_text(id: &NodeId) -> String {
    match &id.identifier {
        crate::types::Identifier::String(s) => s.as_str().to_string(),
        _ => id.to_string(),
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

/// A read-only Property `name` of `parent`, of the DataType of its value.
fn property(parent: &NodeId, name: &str, value: Variant) -> Node {
    let data_type = match value {
        Variant::Byte(_) => 3,
        Variant::Double(_) => 11,
        _ => 1,
    };
    typed_property(parent, name, value, data_type)
}

/// A read-only Property `name` of `parent` of DataType `data_type` (namespace 0).
fn typed_property(parent: &NodeId, name: &str, value: Variant, data_type: u32) -> Node {
    let id = NodeId::string(1, format!("{}.{name}", id_text(parent)));
    let mut node = make::variable(
        id,
        QualifiedName::new(0, name),
        NodeId::ns0(data_type),
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
