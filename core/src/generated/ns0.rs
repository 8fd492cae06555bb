//! Namespace 0 as decoded from `ns0.bin`, which uaring-codegen writes from
//! Opc.Ua.NodeSet2.xml (XML values already converted to binary Variants).
//!
//! Blob format (OPC UA Binary, little-endian):
//!
//! ```text
//! header:  Byte[4] "UAN0", UInt32 version (1), Int32 node count
//! node:    NodeId node_id; Int32 node_class; QualifiedName browse_name;
//!          LocalizedText display_name; LocalizedText description;
//!          UInt32 write_mask; UInt32 user_write_mask;
//!          Byte flags (1 is_abstract, 2 symmetric, 4 contains_no_loops, 8 historizing,
//!                      16 executable, 32 user_executable, 64 access_level_ex present,
//!                      128 data_type_definition present);
//!          LocalizedText inverse_name; Byte event_notifier; Variant value;
//!          NodeId data_type; Int32 value_rank; UInt32[] array_dimensions;
//!          Byte access_level; Byte user_access_level; [UInt32 access_level_ex];
//!          Double minimum_sampling_interval; [ExtensionObject data_type_definition];
//!          Int32 n, then n × (NodeId reference_type, Boolean is_forward, NodeId target)
//! ```
//!
//! Defaults of the NodeSet schema are applied at generation time: ValueRank -1,
//! AccessLevel 1 (CurrentRead), UserAccessLevel = AccessLevel, MinimumSamplingInterval 0,
//! Executable/UserExecutable true for methods, DataType i=24 for variables without one.

use super::types::NodeClass;
use crate::encoding::{Decode, DecodeError, DecodeLimits, DecodeResult, Decoder};
use crate::types::{ExtensionObject, LocalizedText, NodeId, QualifiedName, Variant};

/// The encoded nodes.
pub static NS0_BIN: &[u8] = include_bytes!("ns0.bin");

/// How many nodes `NS0_BIN` holds.
pub const NODE_COUNT: usize = 4956;

/// One reference as declared in the NodeSet (inverses are not added).
#[derive(Clone, Debug, PartialEq)]
pub struct Ns0Reference {
    pub reference_type: NodeId,
    pub is_forward: bool,
    pub target: NodeId,
}

/// One node of namespace 0 with every attribute (unused ones at their defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct Ns0Node {
    pub node_id: NodeId,
    pub node_class: NodeClass,
    pub browse_name: QualifiedName,
    pub display_name: LocalizedText,
    pub description: LocalizedText,
    pub write_mask: u32,
    pub user_write_mask: u32,
    pub is_abstract: bool,
    pub symmetric: bool,
    pub inverse_name: LocalizedText,
    pub contains_no_loops: bool,
    pub event_notifier: u8,
    /// `Variant::Empty` when the node has no value.
    pub value: Variant,
    pub data_type: NodeId,
    pub value_rank: i32,
    pub array_dimensions: Vec<u32>,
    pub access_level: u8,
    pub user_access_level: u8,
    pub access_level_ex: Option<u32>,
    pub minimum_sampling_interval: f64,
    pub historizing: bool,
    pub executable: bool,
    pub user_executable: bool,
    /// A StructureDefinition or EnumDefinition (binary body) for DataTypes with a `<Definition>`.
    pub data_type_definition: Option<ExtensionObject>,
    pub references: Vec<Ns0Reference>,
}

/// Decodes every node of namespace 0.
pub fn nodes() -> DecodeResult<Vec<Ns0Node>> {
    decode_blob(NS0_BIN)
}

/// Decodes a blob in the format above.
pub fn decode_blob(blob: &[u8]) -> DecodeResult<Vec<Ns0Node>> {
    let limits = DecodeLimits {
        max_string_len: 1 << 24,
        max_byte_string_len: 1 << 24,
        max_array_len: 1 << 20,
        max_depth: 100,
        // The checked-in blob (built from the NodeSet at generation time), all of it.
        max_decoded_size: 1 << 30,
    };
    let mut d = Decoder::new(blob, limits);
    if d.take(4, "ns0 magic")? != b"UAN0" {
        return Err(DecodeError::decoding("ns0 magic"));
    }
    if u32::decode(&mut d)? != 1 {
        return Err(DecodeError::decoding("ns0 version"));
    }
    let n = d.read_length(limits.max_array_len, 16, "ns0 node count")?.unwrap_or(0);
    let mut nodes = Vec::with_capacity(n);
    for _ in 0..n {
        nodes.push(decode_node(&mut d)?);
    }
    if !d.is_empty() {
        return Err(DecodeError::decoding("ns0 trailing bytes"));
    }
    Ok(nodes)
}

fn decode_node(d: &mut Decoder<'_>) -> DecodeResult<Ns0Node> {
    let node_id = NodeId::decode(d)?;
    let node_class = NodeClass(i32::decode(d)?);
    let browse_name = QualifiedName::decode(d)?;
    let display_name = LocalizedText::decode(d)?;
    let description = LocalizedText::decode(d)?;
    let write_mask = u32::decode(d)?;
    let user_write_mask = u32::decode(d)?;
    let flags = u8::decode(d)?;
    let inverse_name = LocalizedText::decode(d)?;
    let event_notifier = u8::decode(d)?;
    let value = Variant::decode(d)?;
    let data_type = NodeId::decode(d)?;
    let value_rank = i32::decode(d)?;
    let array_dimensions = Vec::<u32>::decode(d)?;
    let access_level = u8::decode(d)?;
    let user_access_level = u8::decode(d)?;
    let access_level_ex = if flags & 64 != 0 { Some(u32::decode(d)?) } else { None };
    let minimum_sampling_interval = f64::decode(d)?;
    let data_type_definition = if flags & 128 != 0 { Some(ExtensionObject::decode(d)?) } else { None };
    let n = d.read_length(d.limits().max_array_len, 5, "ns0 references")?.unwrap_or(0);
    let mut references = Vec::with_capacity(n);
    for _ in 0..n {
        references.push(Ns0Reference {
            reference_type: NodeId::decode(d)?,
            is_forward: bool::decode(d)?,
            target: NodeId::decode(d)?,
        });
    }
    Ok(Ns0Node {
        node_id,
        node_class,
        browse_name,
        display_name,
        description,
        write_mask,
        user_write_mask,
        is_abstract: flags & 1 != 0,
        symmetric: flags & 2 != 0,
        inverse_name,
        contains_no_loops: flags & 4 != 0,
        event_notifier,
        value,
        data_type,
        value_rank,
        array_dimensions,
        access_level,
        user_access_level,
        access_level_ex,
        minimum_sampling_interval,
        historizing: flags & 8 != 0,
        executable: flags & 16 != 0,
        user_executable: flags & 32 != 0,
        data_type_definition,
        references,
    })
}
