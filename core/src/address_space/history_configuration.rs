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

/// The HA Configuration of a Variable whose history is `stepped`.
pub fn configuration_of(stepped: bool) -> NodeId {
    NodeId::string(1, if stepped { STEPPED } else { SLOPED })
}
