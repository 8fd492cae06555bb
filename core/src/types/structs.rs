use super::{DateTime, NodeId, StatusCode, UaString, Variant, XmlElement};
use crate::encoding::{
    Decode, DecodeError, DecodeLimits, DecodeResult, Decoder, Encode, UaStructure,
};

/// A QualifiedName: namespace index and name.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug)]
pub struct QualifiedName {
    pub namespace_index: u16,
    pub name: UaString,
}
// `clone_from` reuses the name's memory.
impl Clone for QualifiedName {
    fn clone(&self) -> Self {
        QualifiedName {
            namespace_index: self.namespace_index,
            name: self.name.clone(),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.namespace_index = source.namespace_index;
        self.name.clone_from(&source.name);
    }
}
impl QualifiedName {
    pub fn new(namespace_index: u16, name: &str) -> Self {
        QualifiedName {
            namespace_index,
            name: name.into(),
        }
    }
    pub fn is_null(&self) -> bool {
        self.namespace_index == 0 && self.name.is_empty()
    }
}
impl Encode for QualifiedName {
    fn encode(&self, out: &mut Vec<u8>) {
        self.namespace_index.encode(out);
        self.name.encode(out);
    }
}
impl Decode for QualifiedName {
    const MIN_LEN: usize = 6;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(QualifiedName {
            namespace_index: u16::decode(d)?,
            name: UaString::decode(d)?,
        })
    }
}

/// A LocalizedText: optional locale and optional text.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug)]
pub struct LocalizedText {
    pub locale: UaString,
    pub text: UaString,
}
// `clone_from` reuses the strings' memory.
impl Clone for LocalizedText {
    fn clone(&self) -> Self {
        LocalizedText {
            locale: self.locale.clone(),
            text: self.text.clone(),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.locale.clone_from(&source.locale);
        self.text.clone_from(&source.text);
    }
}
impl LocalizedText {
    pub fn new(locale: &str, text: &str) -> Self {
        LocalizedText {
            locale: locale.into(),
            text: text.into(),
        }
    }
    /// Text with no locale.
    pub fn text(text: &str) -> Self {
        LocalizedText {
            locale: UaString::null(),
            text: text.into(),
        }
    }
}
impl Encode for LocalizedText {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut mask = 0u8;
        if !self.locale.is_null() {
            mask |= 1;
        }
        if !self.text.is_null() {
            mask |= 2;
        }
        out.push(mask);
        if mask & 1 != 0 {
            self.locale.encode(out);
        }
        if mask & 2 != 0 {
            self.text.encode(out);
        }
    }
}
impl Decode for LocalizedText {
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let mask = u8::decode(d)?;
        let locale = if mask & 1 != 0 {
            UaString::decode(d)?
        } else {
            UaString::null()
        };
        let text = if mask & 2 != 0 {
            UaString::decode(d)?
        } else {
            UaString::null()
        };
        Ok(LocalizedText { locale, text })
    }
}

/// The body of an ExtensionObject.
#[derive(PartialEq, Debug, Default)]
pub enum ExtensionObjectBody {
    #[default]
    None,
    /// The structure's binary encoding.
    Binary(Vec<u8>),
    Xml(XmlElement),
}

// `clone_from` reuses the body's memory when both are of the same kind.
impl Clone for ExtensionObjectBody {
    fn clone(&self) -> Self {
        match self {
            ExtensionObjectBody::None => ExtensionObjectBody::None,
            ExtensionObjectBody::Binary(b) => ExtensionObjectBody::Binary(b.clone()),
            ExtensionObjectBody::Xml(x) => ExtensionObjectBody::Xml(x.clone()),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        match (self, source) {
            (ExtensionObjectBody::Binary(a), ExtensionObjectBody::Binary(b)) => a.clone_from(b),
            (ExtensionObjectBody::Xml(a), ExtensionObjectBody::Xml(b)) => a.clone_from(b),
            (me, other) => *me = other.clone(),
        }
    }
}

/// An ExtensionObject (Part 6 §5.2.2.15): TypeId, an encoding byte, then a length-prefixed body.
/// The body is kept encoded; [`ExtensionObject::decode_as`] decodes it on demand.
#[derive(PartialEq, Debug, Default)]
pub struct ExtensionObject {
    /// The encoding id (for a binary body, `<Type>_Encoding_DefaultBinary`).
    pub type_id: NodeId,
    pub body: ExtensionObjectBody,
}

impl Clone for ExtensionObject {
    fn clone(&self) -> Self {
        ExtensionObject {
            type_id: self.type_id.clone(),
            body: self.body.clone(),
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.type_id.clone_from(&source.type_id);
        self.body.clone_from(&source.body);
    }
}

impl ExtensionObject {
    pub fn null() -> Self {
        ExtensionObject::default()
    }
    pub fn is_null(&self) -> bool {
        self.type_id.is_null() && self.body == ExtensionObjectBody::None
    }
    /// Wraps a structure in its DefaultBinary encoding.
    pub fn from_struct<T: UaStructure>(v: &T) -> Self {
        let mut b = Vec::new();
        v.encode(&mut b);
        ExtensionObject {
            type_id: NodeId::ns0(T::BINARY_ENCODING_ID),
            body: ExtensionObjectBody::Binary(b),
        }
    }
    /// Is this a binary-encoded `T`?
    pub fn is<T: UaStructure>(&self) -> bool {
        self.type_id.as_ns0() == Some(T::BINARY_ENCODING_ID)
            && matches!(self.body, ExtensionObjectBody::Binary(_))
    }
    /// Decodes the body as `T`. `None` when the type id is not `T`'s binary encoding.
    pub fn decode_as<T: UaStructure>(&self, limits: DecodeLimits) -> Option<DecodeResult<T>> {
        match &self.body {
            ExtensionObjectBody::Binary(b) if self.is::<T>() => Some(T::from_bytes(b, limits)),
            _ => None,
        }
    }
}

impl Encode for ExtensionObject {
    fn encode(&self, out: &mut Vec<u8>) {
        self.type_id.encode(out);
        match &self.body {
            ExtensionObjectBody::None => out.push(0),
            ExtensionObjectBody::Binary(b) => {
                out.push(1);
                // A ByteString: the length, then the bytes (no copy of the body first).
                (b.len() as i32).encode(out);
                out.extend_from_slice(b);
            }
            ExtensionObjectBody::Xml(x) => {
                out.push(2);
                x.encode(out);
            }
        }
    }
}
impl Decode for ExtensionObject {
    const MIN_LEN: usize = 3;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let mut e = ExtensionObject::default();
        e.decode_into(d)?;
        Ok(e)
    }

    /// Decodes in place (`decode` decodes into a null one): the type id's and a binary body's
    /// memory are reused, and the usual case — no additional header, a null ExtensionObject —
    /// builds nothing.
    fn decode_into(&mut self, d: &mut Decoder<'_>) -> DecodeResult<()> {
        self.type_id.decode_into(d)?;
        match u8::decode(d)? {
            0 => {
                if !matches!(self.body, ExtensionObjectBody::None) {
                    self.body = ExtensionObjectBody::None;
                }
            }
            1 => {
                let max = d.limits().max_byte_string_len;
                match d.read_length(max, 1, "ExtensionObject body")? {
                    None => self.body = ExtensionObjectBody::None,
                    Some(n) => {
                        d.charge(n)?;
                        let bytes = d.take(n, "ExtensionObject body")?;
                        match &mut self.body {
                            ExtensionObjectBody::Binary(b) => {
                                b.clear();
                                b.extend_from_slice(bytes);
                            }
                            body => *body = ExtensionObjectBody::Binary(bytes.to_vec()),
                        }
                    }
                }
            }
            2 => self.body = ExtensionObjectBody::Xml(XmlElement::decode(d)?),
            _ => return Err(DecodeError::decoding("ExtensionObject encoding byte")),
        }
        Ok(())
    }
}

/// A DataValue. `value == Variant::Empty` means no value is present. `clone_from` reuses
/// the value's memory (see [`Variant`]'s).
#[derive(PartialEq, Debug, Default)]
pub struct DataValue {
    pub value: Variant,
    /// `None` is Good (not encoded).
    pub status: Option<StatusCode>,
    pub source_timestamp: Option<DateTime>,
    pub source_picoseconds: Option<u16>,
    pub server_timestamp: Option<DateTime>,
    pub server_picoseconds: Option<u16>,
}

impl Clone for DataValue {
    fn clone(&self) -> Self {
        DataValue {
            value: self.value.clone(),
            status: self.status,
            source_timestamp: self.source_timestamp,
            source_picoseconds: self.source_picoseconds,
            server_timestamp: self.server_timestamp,
            server_picoseconds: self.server_picoseconds,
        }
    }
    fn clone_from(&mut self, source: &Self) {
        self.value.clone_from(&source.value);
        self.status = source.status;
        self.source_timestamp = source.source_timestamp;
        self.source_picoseconds = source.source_picoseconds;
        self.server_timestamp = source.server_timestamp;
        self.server_picoseconds = source.server_picoseconds;
    }
}

impl DataValue {
    pub fn new(value: Variant) -> Self {
        DataValue {
            value,
            ..Default::default()
        }
    }
    pub fn status(status: StatusCode) -> Self {
        DataValue {
            status: Some(status),
            ..Default::default()
        }
    }
    pub fn status_code(&self) -> StatusCode {
        self.status.unwrap_or_default()
    }
}

impl Encode for DataValue {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut mask = 0u8;
        if !matches!(self.value, Variant::Empty) {
            mask |= 0x01;
        }
        if matches!(self.status, Some(s) if s.0 != 0) {
            mask |= 0x02;
        }
        if self.source_timestamp.is_some() {
            mask |= 0x04;
        }
        if self.server_timestamp.is_some() {
            mask |= 0x08;
        }
        if self.source_picoseconds.is_some() {
            mask |= 0x10;
        }
        if self.server_picoseconds.is_some() {
            mask |= 0x20;
        }
        out.push(mask);
        if mask & 0x01 != 0 {
            self.value.encode(out);
        }
        if mask & 0x02 != 0 {
            self.status.unwrap_or_default().encode(out);
        }
        if let Some(t) = self.source_timestamp {
            t.encode(out);
        }
        if let Some(p) = self.source_picoseconds {
            p.encode(out);
        }
        if let Some(t) = self.server_timestamp {
            t.encode(out);
        }
        if let Some(p) = self.server_picoseconds {
            p.encode(out);
        }
    }
}
impl Decode for DataValue {
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        d.enter("DataValue")?;
        let mask = u8::decode(d)?;
        let value = if mask & 0x01 != 0 {
            Variant::decode(d)?
        } else {
            Variant::Empty
        };
        let status = if mask & 0x02 != 0 {
            Some(StatusCode::decode(d)?)
        } else {
            None
        };
        let source_timestamp = if mask & 0x04 != 0 {
            Some(DateTime::decode(d)?)
        } else {
            None
        };
        let source_picoseconds = if mask & 0x10 != 0 {
            Some(u16::decode(d)?)
        } else {
            None
        };
        let server_timestamp = if mask & 0x08 != 0 {
            Some(DateTime::decode(d)?)
        } else {
            None
        };
        let server_picoseconds = if mask & 0x20 != 0 {
            Some(u16::decode(d)?)
        } else {
            None
        };
        d.leave();
        Ok(DataValue {
            value,
            status,
            source_timestamp,
            source_picoseconds,
            server_timestamp,
            server_picoseconds,
        })
    }
}

/// A DiagnosticInfo (Part 6 §5.2.2.12).
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct DiagnosticInfo {
    pub symbolic_id: Option<i32>,
    pub namespace_uri: Option<i32>,
    pub locale: Option<i32>,
    pub localized_text: Option<i32>,
    pub additional_info: Option<UaString>,
    pub inner_status_code: Option<StatusCode>,
    pub inner_diagnostic_info: Option<Box<DiagnosticInfo>>,
}

impl DiagnosticInfo {
    pub fn is_empty(&self) -> bool {
        *self == DiagnosticInfo::default()
    }
}

impl Encode for DiagnosticInfo {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut mask = 0u8;
        for (bit, present) in [
            (0x01, self.symbolic_id.is_some()),
            (0x02, self.namespace_uri.is_some()),
            (0x04, self.localized_text.is_some()),
            (0x08, self.locale.is_some()),
            (0x10, self.additional_info.is_some()),
            (0x20, self.inner_status_code.is_some()),
            (0x40, self.inner_diagnostic_info.is_some()),
        ] {
            if present {
                mask |= bit;
            }
        }
        out.push(mask);
        for v in [
            self.symbolic_id,
            self.namespace_uri,
            self.locale,
            self.localized_text,
        ]
        .into_iter()
        .flatten()
        {
            v.encode(out);
        }
        if let Some(s) = &self.additional_info {
            s.encode(out);
        }
        if let Some(s) = self.inner_status_code {
            s.encode(out);
        }
        if let Some(i) = &self.inner_diagnostic_info {
            i.encode(out);
        }
    }
}
impl Decode for DiagnosticInfo {
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        d.enter("DiagnosticInfo")?;
        let mask = u8::decode(d)?;
        let mut r = DiagnosticInfo::default();
        if mask & 0x01 != 0 {
            r.symbolic_id = Some(i32::decode(d)?);
        }
        if mask & 0x02 != 0 {
            r.namespace_uri = Some(i32::decode(d)?);
        }
        if mask & 0x08 != 0 {
            r.locale = Some(i32::decode(d)?);
        }
        if mask & 0x04 != 0 {
            r.localized_text = Some(i32::decode(d)?);
        }
        if mask & 0x10 != 0 {
            r.additional_info = Some(UaString::decode(d)?);
        }
        if mask & 0x20 != 0 {
            r.inner_status_code = Some(StatusCode::decode(d)?);
        }
        if mask & 0x40 != 0 {
            d.charge_elements::<DiagnosticInfo>(1)?;
            r.inner_diagnostic_info = Some(Box::new(DiagnosticInfo::decode(d)?));
        }
        d.leave();
        Ok(r)
    }
}
