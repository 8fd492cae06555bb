use super::strings::{decode_str, encode_bytes};
use super::{ByteString, Guid, UaString};
use crate::encoding::{Decode, DecodeError, DecodeResult, Decoder, Encode};

/// The identifier part of a NodeId.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub enum Identifier {
    Numeric(u32),
    String(String),
    Guid(Guid),
    ByteString(Vec<u8>),
}

// `clone_from` reuses a String or ByteString identifier's memory when the kinds match.
impl Clone for Identifier {
    fn clone(&self) -> Self {
        match self {
            Identifier::Numeric(n) => Identifier::Numeric(*n),
            Identifier::String(s) => Identifier::String(s.clone()),
            Identifier::Guid(g) => Identifier::Guid(*g),
            Identifier::ByteString(b) => Identifier::ByteString(b.clone()),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        match (self, source) {
            (Identifier::String(a), Identifier::String(b)) => a.clone_from(b),
            (Identifier::ByteString(a), Identifier::ByteString(b)) => a.clone_from(b),
            (this, _) => *this = source.clone(),
        }
    }
}

/// A NodeId: namespace index and identifier.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId {
    pub namespace: u16,
    pub identifier: Identifier,
}

// `clone_from` reuses the identifier's memory.
impl Clone for NodeId {
    fn clone(&self) -> Self {
        NodeId {
            namespace: self.namespace,
            identifier: self.identifier.clone(),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.namespace = source.namespace;
        self.identifier.clone_from(&source.identifier);
    }
}

impl Default for NodeId {
    fn default() -> Self {
        NodeId::NULL
    }
}

impl NodeId {
    /// `i=0`, the null NodeId.
    pub const NULL: NodeId = NodeId {
        namespace: 0,
        identifier: Identifier::Numeric(0),
    };

    #[inline]
    pub const fn numeric(namespace: u16, id: u32) -> NodeId {
        NodeId {
            namespace,
            identifier: Identifier::Numeric(id),
        }
    }
    /// `ns=0;i=id`.
    #[inline]
    pub const fn ns0(id: u32) -> NodeId {
        NodeId::numeric(0, id)
    }
    pub fn string(namespace: u16, s: impl Into<String>) -> NodeId {
        NodeId {
            namespace,
            identifier: Identifier::String(s.into()),
        }
    }
    pub fn guid(namespace: u16, g: Guid) -> NodeId {
        NodeId {
            namespace,
            identifier: Identifier::Guid(g),
        }
    }
    pub fn byte_string(namespace: u16, b: Vec<u8>) -> NodeId {
        NodeId {
            namespace,
            identifier: Identifier::ByteString(b),
        }
    }
    /// True for the null NodeId of any identifier type (Part 3: ns 0 and a null/zero identifier).
    pub fn is_null(&self) -> bool {
        if self.namespace != 0 {
            return false;
        }
        match &self.identifier {
            Identifier::Numeric(n) => *n == 0,
            Identifier::String(s) => s.is_empty(),
            Identifier::Guid(g) => *g == Guid::NULL,
            Identifier::ByteString(b) => b.is_empty(),
        }
    }
    /// The numeric id in namespace 0, if it is one.
    #[inline]
    pub fn as_ns0(&self) -> Option<u32> {
        match self.identifier {
            Identifier::Numeric(n) if self.namespace == 0 => Some(n),
            _ => None,
        }
    }

    /// Parses the standard text form: `i=85`, `ns=1;s=Demo.Static.Int32`,
    /// `ns=2;g=…`, `ns=1;b=<base64>`.
    pub fn parse(s: &str) -> Option<NodeId> {
        let (ns, rest) = match s.strip_prefix("ns=") {
            Some(r) => {
                let (n, rest) = r.split_once(';')?;
                (n.parse::<u16>().ok()?, rest)
            }
            None => (0, s),
        };
        let (kind, val) = rest.split_at(rest.find('=')? + 1);
        let id = match kind {
            "i=" => Identifier::Numeric(val.parse().ok()?),
            "s=" => Identifier::String(val.to_owned()),
            "g=" => Identifier::Guid(Guid::parse(val)?),
            "b=" => Identifier::ByteString(base64_decode(val)?),
            _ => return None,
        };
        Some(NodeId {
            namespace: ns,
            identifier: id,
        })
    }
}

impl std::fmt::Debug for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace != 0 {
            write!(f, "ns={};", self.namespace)?;
        }
        match &self.identifier {
            Identifier::Numeric(n) => write!(f, "i={n}"),
            Identifier::String(s) => write!(f, "s={s}"),
            Identifier::Guid(g) => write!(f, "g={g}"),
            Identifier::ByteString(b) => write!(f, "b={}", base64_encode(b)),
        }
    }
}
impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
impl From<u32> for NodeId {
    fn from(id: u32) -> Self {
        NodeId::ns0(id)
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(crate) fn base64_encode(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (*c.first().unwrap_or(&0) as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                // `& 63` keeps the index inside the 64-entry table.
                #[allow(clippy::indexing_slicing)]
                s.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Decodes standard base64 (whitespace ignored, padding optional).
pub fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0;
    for ch in s.bytes() {
        if ch == b'=' {
            break;
        }
        if ch.is_ascii_whitespace() {
            continue;
        }
        let v = B64.iter().position(|&c| c == ch)? as u32;
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

// Encoding bytes (Part 6 §5.2.2.9).
const TWO_BYTE: u8 = 0;
const FOUR_BYTE: u8 = 1;
const NUMERIC: u8 = 2;
const STRING: u8 = 3;
const GUID: u8 = 4;
const BYTE_STRING: u8 = 5;
const NS_URI_FLAG: u8 = 0x80;
const SERVER_INDEX_FLAG: u8 = 0x40;

fn encode_node_id(n: &NodeId, flags: u8, out: &mut Vec<u8>) {
    match &n.identifier {
        Identifier::Numeric(id) => {
            if n.namespace == 0 && *id <= 0xFF {
                out.push(TWO_BYTE | flags);
                out.push(*id as u8);
            } else if n.namespace <= 0xFF && *id <= 0xFFFF {
                out.push(FOUR_BYTE | flags);
                out.push(n.namespace as u8);
                (*id as u16).encode(out);
            } else {
                out.push(NUMERIC | flags);
                n.namespace.encode(out);
                id.encode(out);
            }
        }
        Identifier::String(s) => {
            out.push(STRING | flags);
            n.namespace.encode(out);
            encode_bytes(Some(s.as_bytes()), out);
        }
        Identifier::Guid(g) => {
            out.push(GUID | flags);
            n.namespace.encode(out);
            g.encode(out);
        }
        Identifier::ByteString(b) => {
            out.push(BYTE_STRING | flags);
            n.namespace.encode(out);
            encode_bytes(Some(b), out);
        }
    }
}

/// The namespace and value of a numeric NodeId body of encoding `kind` (TWO_BYTE,
/// FOUR_BYTE or NUMERIC), after the encoding byte.
#[inline]
fn decode_numeric(d: &mut Decoder<'_>, kind: u8) -> DecodeResult<(u16, u32)> {
    Ok(match kind {
        TWO_BYTE => (0, u8::decode(d)? as u32),
        FOUR_BYTE => {
            let ns = u8::decode(d)? as u16;
            (ns, u16::decode(d)? as u32)
        }
        _ => {
            let ns = u16::decode(d)?;
            (ns, u32::decode(d)?)
        }
    })
}

/// Decodes the NodeId body after the encoding byte.
fn decode_node_id_body(d: &mut Decoder<'_>, kind: u8) -> DecodeResult<NodeId> {
    Ok(match kind {
        TWO_BYTE | FOUR_BYTE | NUMERIC => {
            let (ns, v) = decode_numeric(d, kind)?;
            NodeId::numeric(ns, v)
        }
        STRING => {
            let ns = u16::decode(d)?;
            // A null string identifier is read as "".
            let s = decode_str(d, "NodeId.String")?.unwrap_or_default();
            NodeId {
                namespace: ns,
                identifier: Identifier::String(s),
            }
        }
        GUID => {
            let ns = u16::decode(d)?;
            NodeId::guid(ns, Guid::decode(d)?)
        }
        BYTE_STRING => {
            let ns = u16::decode(d)?;
            let b = ByteString::decode(d)?;
            NodeId::byte_string(ns, b.0.unwrap_or_default())
        }
        _ => return Err(DecodeError::decoding("NodeId encoding byte")),
    })
}

impl Encode for NodeId {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        encode_node_id(self, 0, out)
    }
}
impl NodeId {
    #[inline]
    fn set_numeric(&mut self, namespace: u16, value: u32) {
        self.namespace = namespace;
        match &mut self.identifier {
            Identifier::Numeric(n) => *n = value,
            other => *other = Identifier::Numeric(value),
        }
    }
}

impl Decode for NodeId {
    const MIN_LEN: usize = 2;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let b = u8::decode(d)?;
        if b & 0xC0 != 0 {
            return Err(DecodeError::decoding("NodeId encoding byte"));
        }
        decode_node_id_body(d, b)
    }

    /// Reuses the memory of a String or ByteString identifier when the incoming NodeId
    /// has the same kind (a session's authentication token, decoded with every request).
    fn decode_into(&mut self, d: &mut Decoder<'_>) -> DecodeResult<()> {
        let b = u8::decode(d)?;
        if b & 0xC0 != 0 {
            return Err(DecodeError::decoding("NodeId encoding byte"));
        }
        match (b, &mut self.identifier) {
            // Numeric forms are written in place: no enum value built, moved and dropped
            // (every ReadValueId's and WriteValue's NodeId in a recycled request).
            (TWO_BYTE | FOUR_BYTE | NUMERIC, _) => {
                let (ns, v) = decode_numeric(d, b)?;
                self.set_numeric(ns, v);
            }
            (BYTE_STRING, Identifier::ByteString(v)) => {
                let ns = u16::decode(d)?;
                let max = d.limits().max_byte_string_len;
                let n = d.read_length(max, 1, "ByteString")?.unwrap_or(0);
                d.charge(n)?;
                let bytes = d.take(n, "ByteString")?;
                v.clear();
                v.extend_from_slice(bytes);
                self.namespace = ns;
            }
            // A string id reuses the string's memory (a recycled request reading nodes with
            // string ids, e.g. `ns=1;s=Plant.V7`).
            (STRING, Identifier::String(v)) => {
                let ns = u16::decode(d)?;
                let max = d.limits().max_string_len;
                let n = d.read_length(max, 1, "NodeId.String")?.unwrap_or(0);
                d.charge(n)?;
                let bytes = d.take(n, "NodeId.String")?;
                let text = std::str::from_utf8(bytes)
                    .map_err(|_| DecodeError::decoding("NodeId.String"))?;
                v.clear();
                v.push_str(text);
                self.namespace = ns;
            }
            _ => *self = decode_node_id_body(d, b)?,
        }
        Ok(())
    }
}

/// An ExpandedNodeId: a NodeId plus an optional namespace URI and server index.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ExpandedNodeId {
    pub node_id: NodeId,
    pub namespace_uri: UaString,
    pub server_index: u32,
}

// `clone_from` reuses the NodeId's and the URI's memory.
impl Clone for ExpandedNodeId {
    fn clone(&self) -> Self {
        ExpandedNodeId {
            node_id: self.node_id.clone(),
            namespace_uri: self.namespace_uri.clone(),
            server_index: self.server_index,
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.node_id.clone_from(&source.node_id);
        self.namespace_uri.clone_from(&source.namespace_uri);
        self.server_index = source.server_index;
    }
}

impl ExpandedNodeId {
    pub fn local(node_id: NodeId) -> Self {
        ExpandedNodeId {
            node_id,
            namespace_uri: UaString::null(),
            server_index: 0,
        }
    }
    /// The NodeId when this refers to a node of this server by namespace index.
    pub fn as_local(&self) -> Option<&NodeId> {
        (self.server_index == 0 && self.namespace_uri.is_null()).then_some(&self.node_id)
    }
}
impl From<NodeId> for ExpandedNodeId {
    fn from(n: NodeId) -> Self {
        ExpandedNodeId::local(n)
    }
}
impl std::fmt::Debug for ExpandedNodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.server_index != 0 {
            write!(f, "svr={};", self.server_index)?;
        }
        if let Some(u) = self.namespace_uri.as_opt() {
            write!(f, "nsu={u};")?;
        }
        write!(f, "{:?}", self.node_id)
    }
}
impl Encode for ExpandedNodeId {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut flags = 0;
        if !self.namespace_uri.is_null() {
            flags |= NS_URI_FLAG;
        }
        if self.server_index != 0 {
            flags |= SERVER_INDEX_FLAG;
        }
        encode_node_id(&self.node_id, flags, out);
        if !self.namespace_uri.is_null() {
            self.namespace_uri.encode(out);
        }
        if self.server_index != 0 {
            self.server_index.encode(out);
        }
    }
}
impl Decode for ExpandedNodeId {
    const MIN_LEN: usize = 2;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let b = u8::decode(d)?;
        let node_id = decode_node_id_body(d, b & 0x3F)?;
        let namespace_uri = if b & NS_URI_FLAG != 0 {
            UaString::decode(d)?
        } else {
            UaString::null()
        };
        let server_index = if b & SERVER_INDEX_FLAG != 0 {
            u32::decode(d)?
        } else {
            0
        };
        Ok(ExpandedNodeId {
            node_id,
            namespace_uri,
            server_index,
        })
    }
}
