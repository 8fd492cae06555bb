use crate::encoding::{Decode, DecodeError, DecodeResult, Decoder, Encode};

/// A String: UTF-8 with a null value distinct from "".
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct UaString(pub Option<String>);

// `clone_from` reuses the string's memory (responses built in recycled messages).
impl Clone for UaString {
    fn clone(&self) -> Self {
        UaString(self.0.clone())
    }
    fn clone_from(&mut self, source: &Self) {
        self.0.clone_from(&source.0);
    }
}

impl UaString {
    pub const fn null() -> Self {
        UaString(None)
    }
    pub fn is_null(&self) -> bool {
        self.0.is_none()
    }
    /// The text, with null read as "".
    pub fn as_str(&self) -> &str {
        self.0.as_deref().unwrap_or("")
    }
    pub fn as_opt(&self) -> Option<&str> {
        self.0.as_deref()
    }
    /// Null or empty.
    pub fn is_empty(&self) -> bool {
        self.as_str().is_empty()
    }
}
impl From<&str> for UaString {
    fn from(s: &str) -> Self {
        UaString(Some(s.to_owned()))
    }
}
impl From<String> for UaString {
    fn from(s: String) -> Self {
        UaString(Some(s))
    }
}
impl From<Option<String>> for UaString {
    fn from(s: Option<String>) -> Self {
        UaString(s)
    }
}
impl std::fmt::Debug for UaString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => write!(f, "null"),
            Some(s) => write!(f, "{s:?}"),
        }
    }
}
impl std::fmt::Display for UaString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

pub(crate) fn encode_bytes(b: Option<&[u8]>, out: &mut Vec<u8>) {
    match b {
        None => (-1i32).encode(out),
        Some(b) => {
            (b.len() as i32).encode(out);
            out.extend_from_slice(b);
        }
    }
}

pub(crate) fn decode_str(d: &mut Decoder<'_>, what: &'static str) -> DecodeResult<Option<String>> {
    let max = d.limits().max_string_len;
    match d.read_length(max, 1, what)? {
        None => Ok(None),
        Some(n) => {
            d.charge(n)?;
            let b = d.take(n, what)?;
            match std::str::from_utf8(b) {
                Ok(s) => Ok(Some(s.to_owned())),
                Err(_) => Err(DecodeError::decoding(what)),
            }
        }
    }
}

impl Encode for UaString {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self.0.as_deref().map(str::as_bytes), out)
    }
}
impl Decode for UaString {
    const MIN_LEN: usize = 4;
    #[inline]
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(UaString(decode_str(d, "String")?))
    }

    /// Reuses the string's memory (a recycled request's IndexRange, say).
    fn decode_into(&mut self, d: &mut Decoder<'_>) -> DecodeResult<()> {
        let max = d.limits().max_string_len;
        match d.read_length(max, 1, "String")? {
            None => self.0 = None,
            Some(n) => {
                d.charge(n)?;
                let b = d.take(n, "String")?;
                let text = std::str::from_utf8(b).map_err(|_| DecodeError::decoding("String"))?;
                match &mut self.0 {
                    Some(s) => {
                        s.clear();
                        s.push_str(text);
                    }
                    None => self.0 = Some(text.to_owned()),
                }
            }
        }
        Ok(())
    }
}

/// A ByteString, with a null value distinct from empty.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct ByteString(pub Option<Vec<u8>>);

// `clone_from` reuses the bytes' memory (responses built in recycled messages).
impl Clone for ByteString {
    fn clone(&self) -> Self {
        ByteString(self.0.clone())
    }
    fn clone_from(&mut self, source: &Self) {
        self.0.clone_from(&source.0);
    }
}

impl ByteString {
    pub const fn null() -> Self {
        ByteString(None)
    }
    pub fn is_null(&self) -> bool {
        self.0.is_none()
    }
    /// The bytes, with null read as empty.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_deref().unwrap_or(&[])
    }
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }
}
impl From<Vec<u8>> for ByteString {
    fn from(v: Vec<u8>) -> Self {
        ByteString(Some(v))
    }
}
impl From<&[u8]> for ByteString {
    fn from(v: &[u8]) -> Self {
        ByteString(Some(v.to_vec()))
    }
}
impl std::fmt::Debug for ByteString {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            None => write!(f, "null"),
            Some(b) => {
                write!(f, "0x")?;
                for x in b.iter().take(64) {
                    write!(f, "{x:02x}")?;
                }
                if b.len() > 64 {
                    write!(f, "…({} bytes)", b.len())?;
                }
                Ok(())
            }
        }
    }
}
impl Encode for ByteString {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        encode_bytes(self.0.as_deref(), out)
    }
}
impl Decode for ByteString {
    const MIN_LEN: usize = 4;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let max = d.limits().max_byte_string_len;
        match d.read_length(max, 1, "ByteString")? {
            None => Ok(ByteString(None)),
            Some(n) => {
                d.charge(n)?;
                Ok(ByteString(Some(d.take(n, "ByteString")?.to_vec())))
            }
        }
    }
}

/// An XmlElement: encoded as a String holding UTF-8 XML.
#[derive(PartialEq, Eq, Hash, PartialOrd, Ord, Default, Debug)]
pub struct XmlElement(pub UaString);

impl Clone for XmlElement {
    fn clone(&self) -> Self {
        XmlElement(self.0.clone())
    }
    fn clone_from(&mut self, source: &Self) {
        self.0.clone_from(&source.0);
    }
}

impl Encode for XmlElement {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
}
impl Decode for XmlElement {
    const MIN_LEN: usize = 4;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(XmlElement(UaString(decode_str(d, "XmlElement")?)))
    }
}

/// A DateTime: 100-nanosecond intervals since 1601-01-01 UTC. 0 is the null value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct DateTime(pub i64);

impl DateTime {
    /// Ticks between 1601-01-01 and 1970-01-01.
    pub const UNIX_EPOCH_TICKS: i64 = 116_444_736_000_000_000;
    pub const NULL: DateTime = DateTime(0);
    pub const MAX: DateTime = DateTime(i64::MAX);

    pub fn from_unix_nanos(ns: i128) -> Self {
        let t = ns / 100 + Self::UNIX_EPOCH_TICKS as i128;
        DateTime(t.clamp(0, i64::MAX as i128) as i64)
    }
    pub fn unix_nanos(self) -> i128 {
        (self.0 as i128 - Self::UNIX_EPOCH_TICKS as i128) * 100
    }
    pub fn is_null(self) -> bool {
        self.0 == 0
    }
    /// `self + ms` milliseconds, saturating.
    pub fn add_ms(self, ms: f64) -> Self {
        let t = self.0 as f64 + ms * 10_000.0;
        DateTime(t.clamp(0.0, i64::MAX as f64) as i64)
    }
}
impl std::fmt::Debug for DateTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Civil date from days since 1970 (Howard Hinnant's algorithm).
        let ns = self.unix_nanos();
        let secs = ns.div_euclid(1_000_000_000);
        let frac = ns.rem_euclid(1_000_000_000) / 100;
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = doy - (153 * mp + 2) / 5 + 1;
        let m = if mp < 10 { mp + 3 } else { mp - 9 };
        let y = if m <= 2 { y + 1 } else { y };
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:07}Z",
            sod / 3600,
            sod / 60 % 60,
            sod % 60
        )
    }
}
impl std::fmt::Display for DateTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
impl Encode for DateTime {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
}
impl Decode for DateTime {
    const MIN_LEN: usize = 8;
    #[inline]
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(DateTime(i64::decode(d)?))
    }
}

/// A Guid, stored in its wire order (Data1 u32 LE, Data2 u16 LE, Data3 u16 LE, Data4 8 bytes).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Guid {
    pub data1: u32,
    pub data2: u16,
    pub data3: u16,
    pub data4: [u8; 8],
}

impl Guid {
    pub const NULL: Guid = Guid {
        data1: 0,
        data2: 0,
        data3: 0,
        data4: [0; 8],
    };
    /// A random (version 4) Guid.
    pub fn random(r: &mut dyn crate::random::Random) -> Guid {
        let mut b = [0u8; 16];
        r.fill(&mut b);
        b[6] = (b[6] & 0x0F) | 0x40;
        b[8] = (b[8] & 0x3F) | 0x80;
        Guid::from_be_bytes(b)
    }
    /// From the 16 bytes of the canonical text form, in order.
    pub fn from_be_bytes(b: [u8; 16]) -> Guid {
        Guid {
            data1: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            data2: u16::from_be_bytes([b[4], b[5]]),
            data3: u16::from_be_bytes([b[6], b[7]]),
            data4: [b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]],
        }
    }
    /// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (braces optional).
    pub fn parse(s: &str) -> Option<Guid> {
        let s = s.trim().trim_start_matches('{').trim_end_matches('}');
        let hex: String = s.chars().filter(|c| *c != '-').collect();
        if hex.len() != 32 || s.len() != 36 {
            return None;
        }
        let mut b = [0u8; 16];
        for (i, byte) in b.iter_mut().enumerate() {
            *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Guid::from_be_bytes(b))
    }
}
impl std::fmt::Debug for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.data4;
        write!(
            f,
            "{:08x}-{:04x}-{:04x}-{:02x}{:02x}-{:02x}{:02x}{:02x}{:02x}{:02x}{:02x}",
            self.data1, self.data2, self.data3, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    }
}
impl std::fmt::Display for Guid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}
impl Encode for Guid {
    fn encode(&self, out: &mut Vec<u8>) {
        self.data1.encode(out);
        self.data2.encode(out);
        self.data3.encode(out);
        out.extend_from_slice(&self.data4);
    }
}
impl Decode for Guid {
    const MIN_LEN: usize = 16;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(Guid {
            data1: u32::decode(d)?,
            data2: u16::decode(d)?,
            data3: u16::decode(d)?,
            data4: d.take_array::<8>("Guid")?,
        })
    }
}
