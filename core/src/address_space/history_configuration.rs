//! Where the HistoricalDataConfiguration of a historized Variable is (Part 11 §5.2.2): the
//! NodeIds of the two "HA Configuration" Objects, one for sloped and one for stepped
//! Variables, and the rule that chooses between them. `history::configuration` builds the
//! Objects; [`super::change::prepare_historized`] references them from a Variable
//! historized while the server runs.

use crate::types::{NodeId, Variant};

/// The NodeId (string, namespace 1) of the HA Configuration of sloped Variables.
pub const SLOPED: &str = "HA Configuration.Sloped";
/// The NodeId (string, namespace 1) of the HA Configuration of stepped Variables.
pub const STEPPED: &str = "HA Configuration.Stepped";

/// Is the history of a Variable whose value is `value` stepped (SteppedInterpolation)? Float
/// and Double are sloped; every other type is stepped.
pub fn stepped(value: &Variant) -> bool {
    !matches!(value, Variant::Double(_) | Variant::Float(_))
}

/// Is the history of Variables of DataType `data_type` stepped? Double, Float and Duration
/// (a Double) are sloped; every other type is stepped.
pub fn stepped_type(data_type: &NodeId) -> bool {
    !matches!(data_type.as_ns0(), Some(10 | 11 | 290))
}

/// Is `node`'s history stepped: by its stored value when it has one ([`stepped`]), else (a
/// computed or asynchronous Variable, an empty cell) by its DataType ([`stepped_type`]).
pub fn stepped_node(node: &crate::address_space::store::NodeView<'_>) -> bool {
    match node.value_cell().map(|c| c.load().value) {
        Some(v) if v != Variant::Empty => stepped(&v),
        _ => node
            .as_variable()
            .is_none_or(|v| stepped_type(v.data_type())),
    }
}

/// The HA Configuration of a Variable whose history is `stepped`.
pub fn configuration_of(stepped: bool) -> NodeId {
    NodeId::string(1, if stepped { STEPPED } else { SLOPED })
}

/// The HA Configuration of a Variable whose history is `stepped` and collected by the rules
/// of `collection` (an index into the server's list, [`crate::history::configuration::Collection`];
/// `None`: every value kept, the shared Objects of [`configuration_of`]).
pub fn configuration_in(collection: Option<usize>, stepped: bool) -> NodeId {
    match collection {
        None => configuration_of(stepped),
        Some(n) => NodeId::string(
            1,
            format!(
                "HA Configuration.{}.{}",
                n + 1,
                if stepped { "Stepped" } else { "Sloped" }
            ),
        ),
    }
}
