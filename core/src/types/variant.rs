use super::{
    ByteString, DataValue, DateTime, DiagnosticInfo, ExpandedNodeId, ExtensionObject, Guid,
    LocalizedText, NodeId, QualifiedName, StatusCode, UaString, XmlElement,
};
use crate::encoding::{Decode, DecodeError, DecodeResult, Decoder, Encode};

/// The built-in type ids (Part 6 §5.1.2), as used in a Variant's encoding mask and as
/// the numeric DataType NodeIds `i=1` … `i=25`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
#[repr(u8)]
pub enum BuiltinType {
    Boolean = 1,
    SByte = 2,
    Byte = 3,
    Int16 = 4,
    UInt16 = 5,
    Int32 = 6,
    UInt32 = 7,
    Int64 = 8,
    UInt64 = 9,
    Float = 10,
    Double = 11,
    String = 12,
    DateTime = 13,
    Guid = 14,
    ByteString = 15,
    XmlElement = 16,
    NodeId = 17,
    ExpandedNodeId = 18,
    StatusCode = 19,
    QualifiedName = 20,
    LocalizedText = 21,
    ExtensionObject = 22,
    DataValue = 23,
    Variant = 24,
    DiagnosticInfo = 25,
}

impl BuiltinType {
    pub const ALL: [BuiltinType; 25] = [
        BuiltinType::Boolean,
        BuiltinType::SByte,
        BuiltinType::Byte,
        BuiltinType::Int16,
        BuiltinType::UInt16,
        BuiltinType::Int32,
        BuiltinType::UInt32,
        BuiltinType::Int64,
        BuiltinType::UInt64,
        BuiltinType::Float,
        BuiltinType::Double,
        BuiltinType::String,
        BuiltinType::DateTime,
        BuiltinType::Guid,
        BuiltinType::ByteString,
        BuiltinType::XmlElement,
        BuiltinType::NodeId,
        BuiltinType::ExpandedNodeId,
        BuiltinType::StatusCode,
        BuiltinType::QualifiedName,
        BuiltinType::LocalizedText,
        BuiltinType::ExtensionObject,
        BuiltinType::DataValue,
        BuiltinType::Variant,
        BuiltinType::DiagnosticInfo,
    ];
    pub fn from_id(id: u8) -> Option<BuiltinType> {
        if id == 0 {
            None
        } else {
            Self::ALL.get(id as usize - 1).copied()
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            BuiltinType::Boolean => "Boolean",
            BuiltinType::SByte => "SByte",
            BuiltinType::Byte => "Byte",
            BuiltinType::Int16 => "Int16",
            BuiltinType::UInt16 => "UInt16",
            BuiltinType::Int32 => "Int32",
            BuiltinType::UInt32 => "UInt32",
            BuiltinType::Int64 => "Int64",
            BuiltinType::UInt64 => "UInt64",
            BuiltinType::Float => "Float",
            BuiltinType::Double => "Double",
            BuiltinType::String => "String",
            BuiltinType::DateTime => "DateTime",
            BuiltinType::Guid => "Guid",
            BuiltinType::ByteString => "ByteString",
            BuiltinType::XmlElement => "XmlElement",
            BuiltinType::NodeId => "NodeId",
            BuiltinType::ExpandedNodeId => "ExpandedNodeId",
            BuiltinType::StatusCode => "StatusCode",
            BuiltinType::QualifiedName => "QualifiedName",
            BuiltinType::LocalizedText => "LocalizedText",
            BuiltinType::ExtensionObject => "ExtensionObject",
            BuiltinType::DataValue => "DataValue",
            BuiltinType::Variant => "Variant",
            BuiltinType::DiagnosticInfo => "DiagnosticInfo",
        }
    }
    /// Smallest encoding of one array element of this type.
    fn min_len(self) -> usize {
        match self {
            BuiltinType::Boolean | BuiltinType::SByte | BuiltinType::Byte => 1,
            BuiltinType::Int16 | BuiltinType::UInt16 => 2,
            BuiltinType::Int32
            | BuiltinType::UInt32
            | BuiltinType::Float
            | BuiltinType::StatusCode => 4,
            BuiltinType::Int64
            | BuiltinType::UInt64
            | BuiltinType::Double
            | BuiltinType::DateTime => 8,
            BuiltinType::String | BuiltinType::ByteString | BuiltinType::XmlElement => 4,
            BuiltinType::Guid => 16,
            BuiltinType::NodeId | BuiltinType::ExpandedNodeId => 2,
            BuiltinType::QualifiedName => 6,
            BuiltinType::ExtensionObject => 3,
            BuiltinType::LocalizedText
            | BuiltinType::DataValue
            | BuiltinType::Variant
            | BuiltinType::DiagnosticInfo => 1,
        }
    }
}

/// An array held by a Variant: the element type, the elements (each a scalar Variant of
/// `value_type`, or for `BuiltinType::Variant` any Variant), and optional dimensions
/// for a multi-dimensional array (row-major, their product equals `values.len()`).
#[derive(PartialEq, Debug)]
pub struct Array {
    pub value_type: BuiltinType,
    pub values: Vec<Variant>,
    pub dimensions: Option<Vec<i32>>,
}

// `clone_from` reuses the elements' memory (and theirs, element by element).
impl Clone for Array {
    fn clone(&self) -> Self {
        Array {
            value_type: self.value_type,
            values: self.values.clone(),
            dimensions: self.dimensions.clone(),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.value_type = source.value_type;
        self.values.clone_from(&source.values);
        self.dimensions.clone_from(&source.dimensions);
    }
}

impl Array {
    /// Makes `self` a copy of `source[lo..hi]` with the type of `source`, reusing the memory
    /// of `self`'s elements (a one-dimensional IndexRange read into a recycled response).
    pub fn clone_range_from(&mut self, source: &Array, lo: usize, hi: usize) {
        self.value_type = source.value_type;
        self.dimensions = None;
        let part = source.values.get(lo..hi).unwrap_or(&[]);
        self.values.truncate(part.len());
        let (init, tail) = part.split_at(self.values.len());
        for (to, from) in self.values.iter_mut().zip(init) {
            to.clone_from(from);
        }
        self.values.extend_from_slice(tail);
    }
}

impl Array {
    /// A one-dimensional array. Elements must be scalars of `value_type` (or anything
    /// when `value_type` is Variant); returns None otherwise.
    pub fn new(value_type: BuiltinType, values: Vec<Variant>) -> Option<Array> {
        let ok = value_type == BuiltinType::Variant
            || values.iter().all(|v| v.scalar_type() == Some(value_type));
        ok.then_some(Array {
            value_type,
            values,
            dimensions: None,
        })
    }
    /// A multi-dimensional array; `None` if the dimensions don't multiply to the length.
    pub fn with_dimensions(
        value_type: BuiltinType,
        values: Vec<Variant>,
        dims: Vec<i32>,
    ) -> Option<Array> {
        let mut a = Array::new(value_type, values)?;
        let prod = dims.iter().try_fold(1usize, |acc, &d| {
            if d < 0 {
                None
            } else {
                acc.checked_mul(d as usize)
            }
        })?;
        if prod != a.values.len() {
            return None;
        }
        a.dimensions = Some(dims);
        Some(a)
    }
}

/// A Variant: Empty, one scalar of a built-in type, or an array. `clone_from` reuses the
/// memory of `self` when both hold the same kind (a String into a String, an array into an
/// array, element by element): a Read answered into a recycled response allocates nothing.
#[derive(PartialEq, Debug, Default)]
pub enum Variant {
    #[default]
    Empty,
    Boolean(bool),
    SByte(i8),
    Byte(u8),
    Int16(i16),
    UInt16(u16),
    Int32(i32),
    UInt32(u32),
    Int64(i64),
    UInt64(u64),
    Float(f32),
    Double(f64),
    String(UaString),
    DateTime(DateTime),
    Guid(Guid),
    ByteString(ByteString),
    XmlElement(XmlElement),
    NodeId(Box<NodeId>),
    ExpandedNodeId(Box<ExpandedNodeId>),
    StatusCode(StatusCode),
    QualifiedName(Box<QualifiedName>),
    LocalizedText(Box<LocalizedText>),
    ExtensionObject(Box<ExtensionObject>),
    DataValue(Box<DataValue>),
    DiagnosticInfo(Box<DiagnosticInfo>),
    Array(Box<Array>),
}

impl Clone for Variant {
    fn clone(&self) -> Self {
        match self {
            Variant::Empty => Variant::Empty,
            Variant::Boolean(v) => Variant::Boolean(*v),
            Variant::SByte(v) => Variant::SByte(*v),
            Variant::Byte(v) => Variant::Byte(*v),
            Variant::Int16(v) => Variant::Int16(*v),
            Variant::UInt16(v) => Variant::UInt16(*v),
            Variant::Int32(v) => Variant::Int32(*v),
            Variant::UInt32(v) => Variant::UInt32(*v),
            Variant::Int64(v) => Variant::Int64(*v),
            Variant::UInt64(v) => Variant::UInt64(*v),
            Variant::Float(v) => Variant::Float(*v),
            Variant::Double(v) => Variant::Double(*v),
            Variant::String(v) => Variant::String(v.clone()),
            Variant::DateTime(v) => Variant::DateTime(*v),
            Variant::Guid(v) => Variant::Guid(*v),
            Variant::ByteString(v) => Variant::ByteString(v.clone()),
            Variant::XmlElement(v) => Variant::XmlElement(v.clone()),
            Variant::NodeId(v) => Variant::NodeId(v.clone()),
            Variant::ExpandedNodeId(v) => Variant::ExpandedNodeId(v.clone()),
            Variant::StatusCode(v) => Variant::StatusCode(*v),
            Variant::QualifiedName(v) => Variant::QualifiedName(v.clone()),
            Variant::LocalizedText(v) => Variant::LocalizedText(v.clone()),
            Variant::ExtensionObject(v) => Variant::ExtensionObject(v.clone()),
            Variant::DataValue(v) => Variant::DataValue(v.clone()),
            Variant::DiagnosticInfo(v) => Variant::DiagnosticInfo(v.clone()),
            Variant::Array(v) => Variant::Array(v.clone()),
        }
    }

    fn clone_from(&mut self, source: &Self) {
        match (self, source) {
            (Variant::String(a), Variant::String(b)) => a.clone_from(b),
            (Variant::ByteString(a), Variant::ByteString(b)) => a.clone_from(b),
            (Variant::XmlElement(a), Variant::XmlElement(b)) => a.clone_from(b),
            (Variant::NodeId(a), Variant::NodeId(b)) => (**a).clone_from(b),
            (Variant::QualifiedName(a), Variant::QualifiedName(b)) => (**a).clone_from(b),
            (Variant::LocalizedText(a), Variant::LocalizedText(b)) => (**a).clone_from(b),
            (Variant::ExtensionObject(a), Variant::ExtensionObject(b)) => (**a).clone_from(b),
            (Variant::DataValue(a), Variant::DataValue(b)) => (**a).clone_from(b),
            (Variant::Array(a), Variant::Array(b)) => (**a).clone_from(b),
            (me, other) => *me = other.clone(),
        }
    }
}

impl Variant {
    /// The built-in type of a scalar; `None` for Empty and arrays.
    pub fn scalar_type(&self) -> Option<BuiltinType> {
        Some(match self {
            Variant::Empty | Variant::Array(_) => return None,
            Variant::Boolean(_) => BuiltinType::Boolean,
            Variant::SByte(_) => BuiltinType::SByte,
            Variant::Byte(_) => BuiltinType::Byte,
            Variant::Int16(_) => BuiltinType::Int16,
            Variant::UInt16(_) => BuiltinType::UInt16,
            Variant::Int32(_) => BuiltinType::Int32,
            Variant::UInt32(_) => BuiltinType::UInt32,
            Variant::Int64(_) => BuiltinType::Int64,
            Variant::UInt64(_) => BuiltinType::UInt64,
            Variant::Float(_) => BuiltinType::Float,
            Variant::Double(_) => BuiltinType::Double,
            Variant::String(_) => BuiltinType::String,
            Variant::DateTime(_) => BuiltinType::DateTime,
            Variant::Guid(_) => BuiltinType::Guid,
            Variant::ByteString(_) => BuiltinType::ByteString,
            Variant::XmlElement(_) => BuiltinType::XmlElement,
            Variant::NodeId(_) => BuiltinType::NodeId,
            Variant::ExpandedNodeId(_) => BuiltinType::ExpandedNodeId,
            Variant::StatusCode(_) => BuiltinType::StatusCode,
            Variant::QualifiedName(_) => BuiltinType::QualifiedName,
            Variant::LocalizedText(_) => BuiltinType::LocalizedText,
            Variant::ExtensionObject(_) => BuiltinType::ExtensionObject,
            Variant::DataValue(_) => BuiltinType::DataValue,
            Variant::DiagnosticInfo(_) => BuiltinType::DiagnosticInfo,
        })
    }
    /// The built-in type of the value: the scalar type, or an array's element type.
    pub fn builtin_type(&self) -> Option<BuiltinType> {
        match self {
            Variant::Array(a) => Some(a.value_type),
            v => v.scalar_type(),
        }
    }
    pub fn is_empty(&self) -> bool {
        matches!(self, Variant::Empty)
    }
    pub fn is_array(&self) -> bool {
        matches!(self, Variant::Array(_))
    }
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Variant::Array(a) => Some(a),
            _ => None,
        }
    }
    /// A one-dimensional array of scalars of `t`; `None` if an element has another type.
    pub fn array(t: BuiltinType, values: Vec<Variant>) -> Option<Variant> {
        Array::new(t, values).map(|a| Variant::Array(Box::new(a)))
    }
    /// The ValueRank this value has: -1 scalar, 1 one-dimensional, n dims.
    pub fn value_rank(&self) -> i32 {
        match self {
            Variant::Array(a) => a.dimensions.as_ref().map_or(1, |d| d.len() as i32),
            _ => -1,
        }
    }

    /// Encodes the scalar body (no mask byte).
    pub fn encode_scalar(&self, out: &mut Vec<u8>) {
        match self {
            Variant::Empty | Variant::Array(_) => {}
            Variant::Boolean(v) => v.encode(out),
            Variant::SByte(v) => v.encode(out),
            Variant::Byte(v) => v.encode(out),
            Variant::Int16(v) => v.encode(out),
            Variant::UInt16(v) => v.encode(out),
            Variant::Int32(v) => v.encode(out),
            Variant::UInt32(v) => v.encode(out),
            Variant::Int64(v) => v.encode(out),
            Variant::UInt64(v) => v.encode(out),
            Variant::Float(v) => v.encode(out),
            Variant::Double(v) => v.encode(out),
            Variant::String(v) => v.encode(out),
            Variant::DateTime(v) => v.encode(out),
            Variant::Guid(v) => v.encode(out),
            Variant::ByteString(v) => v.encode(out),
            Variant::XmlElement(v) => v.encode(out),
            Variant::NodeId(v) => v.encode(out),
            Variant::ExpandedNodeId(v) => v.encode(out),
            Variant::StatusCode(v) => v.encode(out),
            Variant::QualifiedName(v) => v.encode(out),
            Variant::LocalizedText(v) => v.encode(out),
            Variant::ExtensionObject(v) => v.encode(out),
            Variant::DataValue(v) => v.encode(out),
            Variant::DiagnosticInfo(v) => v.encode(out),
        }
    }

    fn decode_scalar(t: BuiltinType, d: &mut Decoder<'_>) -> DecodeResult<Variant> {
        Ok(match t {
            BuiltinType::Boolean => Variant::Boolean(bool::decode(d)?),
            BuiltinType::SByte => Variant::SByte(i8::decode(d)?),
            BuiltinType::Byte => Variant::Byte(u8::decode(d)?),
            BuiltinType::Int16 => Variant::Int16(i16::decode(d)?),
            BuiltinType::UInt16 => Variant::UInt16(u16::decode(d)?),
            BuiltinType::Int32 => Variant::Int32(i32::decode(d)?),
            BuiltinType::UInt32 => Variant::UInt32(u32::decode(d)?),
            BuiltinType::Int64 => Variant::Int64(i64::decode(d)?),
            BuiltinType::UInt64 => Variant::UInt64(u64::decode(d)?),
            BuiltinType::Float => Variant::Float(f32::decode(d)?),
            BuiltinType::Double => Variant::Double(f64::decode(d)?),
            BuiltinType::String => Variant::String(UaString::decode(d)?),
            BuiltinType::DateTime => Variant::DateTime(DateTime::decode(d)?),
            BuiltinType::Guid => Variant::Guid(Guid::decode(d)?),
            BuiltinType::ByteString => Variant::ByteString(ByteString::decode(d)?),
            BuiltinType::XmlElement => Variant::XmlElement(XmlElement::decode(d)?),
            BuiltinType::NodeId => {
                d.charge_elements::<NodeId>(1)?;
                Variant::NodeId(Box::new(NodeId::decode(d)?))
            }
            BuiltinType::ExpandedNodeId => {
                d.charge_elements::<ExpandedNodeId>(1)?;
                Variant::ExpandedNodeId(Box::new(ExpandedNodeId::decode(d)?))
            }
            BuiltinType::StatusCode => Variant::StatusCode(StatusCode::decode(d)?),
            BuiltinType::QualifiedName => {
                d.charge_elements::<QualifiedName>(1)?;
                Variant::QualifiedName(Box::new(QualifiedName::decode(d)?))
            }
            BuiltinType::LocalizedText => {
                d.charge_elements::<LocalizedText>(1)?;
                Variant::LocalizedText(Box::new(LocalizedText::decode(d)?))
            }
            BuiltinType::ExtensionObject => {
                d.enter("ExtensionObject")?;
                d.charge_elements::<ExtensionObject>(1)?;
                let e = ExtensionObject::decode(d)?;
                d.leave();
                Variant::ExtensionObject(Box::new(e))
            }
            BuiltinType::DataValue => {
                d.charge_elements::<DataValue>(1)?;
                Variant::DataValue(Box::new(DataValue::decode(d)?))
            }
            BuiltinType::DiagnosticInfo => {
                d.charge_elements::<DiagnosticInfo>(1)?;
                Variant::DiagnosticInfo(Box::new(DiagnosticInfo::decode(d)?))
            }
            // A scalar Variant cannot hold a Variant (Part 6 §5.2.2.16).
            BuiltinType::Variant => return Err(DecodeError::decoding("Variant in Variant")),
        })
    }
}

impl Encode for Variant {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Variant::Empty => out.push(0),
            Variant::Array(a) => {
                let mut mask = a.value_type as u8 | 0x80;
                if a.dimensions.is_some() {
                    mask |= 0x40;
                }
                out.push(mask);
                (a.values.len() as i32).encode(out);
                for v in &a.values {
                    if a.value_type == BuiltinType::Variant {
                        v.encode(out);
                    } else {
                        v.encode_scalar(out);
                    }
                }
                if let Some(dims) = &a.dimensions {
                    dims.encode(out);
                }
            }
            v => {
                // scalar_type is Some for every remaining variant.
                out.push(v.scalar_type().map_or(0, |t| t as u8));
                v.encode_scalar(out);
            }
        }
    }
}

impl Decode for Variant {
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let mask = u8::decode(d)?;
        let type_id = mask & 0x3F;
        if type_id == 0 {
            // Empty; an array flag on an empty type is malformed.
            if mask != 0 {
                return Err(DecodeError::decoding("Variant mask"));
            }
            return Ok(Variant::Empty);
        }
        let t = BuiltinType::from_id(type_id).ok_or(DecodeError::decoding("Variant type"))?;
        if mask & 0x80 == 0 {
            if mask & 0x40 != 0 {
                return Err(DecodeError::decoding("Variant dimensions without array"));
            }
            return Variant::decode_scalar(t, d);
        }
        d.enter("Variant array")?;
        let max = d.limits().max_array_len;
        let n = d
            .read_length(max, t.min_len(), "Variant array")?
            .unwrap_or(0);
        d.charge_elements::<Array>(1)?;
        d.charge_elements::<Variant>(n)?;
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            values.push(if t == BuiltinType::Variant {
                Variant::decode(d)?
            } else {
                Variant::decode_scalar(t, d)?
            });
        }
        let dimensions = if mask & 0x40 != 0 {
            let dims = Vec::<i32>::decode(d)?;
            let prod = dims
                .iter()
                .try_fold(1usize, |acc, &x| {
                    if x < 0 {
                        None
                    } else {
                        acc.checked_mul(x as usize)
                    }
                })
                .ok_or(DecodeError::decoding("ArrayDimensions"))?;
            if prod != values.len() || dims.is_empty() {
                return Err(DecodeError::decoding("ArrayDimensions"));
            }
            Some(dims)
        } else {
            None
        };
        d.leave();
        Ok(Variant::Array(Box::new(Array {
            value_type: t,
            values,
            dimensions,
        })))
    }
}

macro_rules! from_scalar {
    ($t:ty, $v:ident) => {
        impl From<$t> for Variant {
            fn from(x: $t) -> Self {
                Variant::$v(x)
            }
        }
    };
}
from_scalar!(bool, Boolean);
from_scalar!(i8, SByte);
from_scalar!(u8, Byte);
from_scalar!(i16, Int16);
from_scalar!(u16, UInt16);
from_scalar!(i32, Int32);
from_scalar!(u32, UInt32);
from_scalar!(i64, Int64);
from_scalar!(u64, UInt64);
from_scalar!(f32, Float);
from_scalar!(f64, Double);
from_scalar!(UaString, String);
from_scalar!(DateTime, DateTime);
from_scalar!(Guid, Guid);
from_scalar!(ByteString, ByteString);
from_scalar!(StatusCode, StatusCode);
impl From<&str> for Variant {
    fn from(s: &str) -> Self {
        Variant::String(s.into())
    }
}
impl From<NodeId> for Variant {
    fn from(x: NodeId) -> Self {
        Variant::NodeId(Box::new(x))
    }
}
impl From<QualifiedName> for Variant {
    fn from(x: QualifiedName) -> Self {
        Variant::QualifiedName(Box::new(x))
    }
}
impl From<LocalizedText> for Variant {
    fn from(x: LocalizedText) -> Self {
        Variant::LocalizedText(Box::new(x))
    }
}
impl From<ExtensionObject> for Variant {
    fn from(x: ExtensionObject) -> Self {
        Variant::ExtensionObject(Box::new(x))
    }
}
