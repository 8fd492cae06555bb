//! The 25 built-in types of Part 6 §5.1.2 and their binary encoding.

// Input reaches this module from the network: no panic on any path (issue 10). Spots
// proven safe carry an `#[allow]` with the reason.

mod node_id;
mod status_code;
mod strings;
mod structs;
mod variant;

pub use node_id::{base64_decode, ExpandedNodeId, Identifier, NodeId};
pub use status_code::StatusCode;
pub use strings::{ByteString, DateTime, Guid, UaString, XmlElement};
pub use structs::{
    DataValue, DiagnosticInfo, ExtensionObject, ExtensionObjectBody, LocalizedText, QualifiedName,
};
pub use variant::{Array, BuiltinType, Variant};
