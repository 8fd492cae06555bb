//! OPC UA Binary encoding (Part 6 §5.2): the `Encode`/`Decode` traits, the bounded
//! [`Decoder`], and the impls for the primitive built-in types.
//!
//! Every length read from the wire is checked against the configured [`DecodeLimits`]
//! *and* against the bytes that remain before anything is allocated.

// Input reaches this module from the network: no panic on any path (issue 10). Spots
// proven safe carry an `#[allow]` with the reason.

use crate::types::StatusCode;

/// Limits applied while decoding. `0` is never "unbounded": every field is a hard cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Longest String / XmlElement, in bytes.
    pub max_string_len: usize,
    /// Longest ByteString, in bytes.
    pub max_byte_string_len: usize,
    /// Most elements in one array (any array: fields, Variant arrays, dimensions).
    pub max_array_len: usize,
    /// Deepest nesting of Variant / DataValue / DiagnosticInfo / ExtensionObject.
    /// Part 6 requires decoders to support at least 100.
    pub max_depth: u32,
    /// Most memory one decoded value (a whole message body) may take, in bytes, counted
    /// as it is held in memory, not as it arrived: every array's elements at their
    /// in-memory size, every string and byte string, every boxed value. Decoding
    /// amplifies (a Boolean Variant array element is 1 byte on the wire and a `Variant`
    /// in memory), so the message size alone does not bound it. Checked before each
    /// allocation.
    pub max_decoded_size: usize,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        DecodeLimits {
            max_string_len: 16 * 1024 * 1024,
            max_byte_string_len: 16 * 1024 * 1024,
            max_array_len: 1_000_000,
            max_depth: 100,
            max_decoded_size: 64 * 1024 * 1024,
        }
    }
}

/// Why a decode failed. `status` is what goes to the peer (BadDecodingError or
/// BadEncodingLimitsExceeded); `what` names the field for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError {
    pub status: StatusCode,
    pub what: &'static str,
}

impl DecodeError {
    pub const fn decoding(what: &'static str) -> Self {
        DecodeError {
            status: StatusCode::BadDecodingError,
            what,
        }
    }
    pub const fn limits(what: &'static str) -> Self {
        DecodeError {
            status: StatusCode::BadEncodingLimitsExceeded,
            what,
        }
    }
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} while decoding {}", self.status, self.what)
    }
}
impl std::error::Error for DecodeError {}

pub type DecodeResult<T> = Result<T, DecodeError>;

/// A cursor over received bytes with limits and a nesting-depth counter.
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    limits: DecodeLimits,
    depth: u32,
    /// In-memory bytes of what has been decoded so far (see [`DecodeLimits::max_decoded_size`]).
    decoded: usize,
    /// The most `decoded` may reach: `max_decoded_size`, or less (see [`Decoder::with_budget`]).
    decoded_max: usize,
}

/// The `what` of the [`DecodeError`] raised when the decoded-size budget runs out.
pub const DECODED_SIZE: &str = "decoded size";

impl<'a> Decoder<'a> {
    pub fn new(buf: &'a [u8], limits: DecodeLimits) -> Self {
        Decoder {
            buf,
            pos: 0,
            limits,
            depth: 0,
            decoded: 0,
            decoded_max: limits.max_decoded_size,
        }
    }
    /// A decoder whose decoded-size budget is `budget` bytes when that is below the
    /// limits' `max_decoded_size` (the memory the caller has left).
    pub fn with_budget(buf: &'a [u8], limits: DecodeLimits, budget: usize) -> Self {
        Decoder {
            decoded_max: budget.min(limits.max_decoded_size),
            ..Decoder::new(buf, limits)
        }
    }
    /// In-memory bytes decoded so far.
    #[inline]
    pub fn decoded_bytes(&self) -> usize {
        self.decoded
    }
    /// Counts `bytes` of memory about to be allocated for decoded data; fails with
    /// BadEncodingLimitsExceeded (what = [`DECODED_SIZE`]) past the budget, before the
    /// allocation happens.
    #[inline]
    pub fn charge(&mut self, bytes: usize) -> DecodeResult<()> {
        let total = self.decoded.saturating_add(bytes);
        if total > self.decoded_max {
            return Err(DecodeError::limits(DECODED_SIZE));
        }
        self.decoded = total;
        Ok(())
    }
    /// Charges `n` elements of `T` (an array about to be allocated).
    #[inline]
    pub fn charge_elements<T>(&mut self, n: usize) -> DecodeResult<()> {
        self.charge(n.saturating_mul(std::mem::size_of::<T>()))
    }
    #[inline]
    pub fn limits(&self) -> &DecodeLimits {
        &self.limits
    }
    #[inline]
    pub fn position(&self) -> usize {
        self.pos
    }
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    /// The bytes not yet consumed.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }
    /// Takes `n` bytes, or fails without consuming anything.
    #[inline]
    pub fn take(&mut self, n: usize, what: &'static str) -> DecodeResult<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::decoding(what))?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(DecodeError::decoding(what))?;
        self.pos = end;
        Ok(s)
    }
    #[inline]
    pub fn take_array<const N: usize>(&mut self, what: &'static str) -> DecodeResult<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }
    /// Enter one level of nesting (Variant, DataValue, DiagnosticInfo, ExtensionObject).
    #[inline]
    pub fn enter(&mut self, what: &'static str) -> DecodeResult<()> {
        if self.depth >= self.limits.max_depth {
            return Err(DecodeError::limits(what));
        }
        self.depth += 1;
        Ok(())
    }
    #[inline]
    pub fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// A sub-decoder over `len` bytes that shares the limits and current depth
    /// (used for ExtensionObject bodies).
    pub fn sub(&mut self, len: usize, what: &'static str) -> DecodeResult<Decoder<'a>> {
        let s = self.take(len, what)?;
        // The budget left is shared: what the sub-decoder decodes is not counted back
        // here, so it gets what remains now.
        Ok(Decoder {
            buf: s,
            pos: 0,
            limits: self.limits,
            depth: self.depth,
            decoded: self.decoded,
            decoded_max: self.decoded_max,
        })
    }

    /// Reads an Int32 array/string length. `Ok(None)` is the null value (-1, or any
    /// negative length, which Part 6 treats as null). The length is checked against
    /// `max` and against the remaining bytes (`min_elem_len` bytes per element) before
    /// the caller allocates.
    #[inline]
    pub fn read_length(
        &mut self,
        max: usize,
        min_elem_len: usize,
        what: &'static str,
    ) -> DecodeResult<Option<usize>> {
        let n = i32::decode(self)?;
        if n < 0 {
            return Ok(None);
        }
        let n = n as usize;
        if n > max {
            return Err(DecodeError::limits(what));
        }
        if n.saturating_mul(min_elem_len) > self.remaining() {
            return Err(DecodeError::decoding(what));
        }
        Ok(Some(n))
    }
}

/// Types that can be written in OPC UA Binary.
pub trait Encode {
    fn encode(&self, out: &mut Vec<u8>);

    /// Convenience: encode into a fresh buffer.
    fn to_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        self.encode(&mut v);
        v
    }
}

/// Types that can be read from OPC UA Binary.
pub trait Decode: Sized {
    /// The fewest bytes one encoded value can take; used to reject array lengths that
    /// cannot fit in the remaining input before allocating.
    const MIN_LEN: usize = 1;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self>;

    /// Decodes into an existing value, reusing its heap memory (array, string and byte
    /// string capacity) where the type knows how: the hot services decode into recycled
    /// requests with it, so a steady stream of Reads allocates nothing. The result is the
    /// same value [`Decode::decode`] gives, and the same limits and budgets apply. The
    /// default decodes a new value and replaces `self`. After an error `self` holds a
    /// partly decoded value: discard it.
    #[inline]
    fn decode_into(&mut self, d: &mut Decoder<'_>) -> DecodeResult<()> {
        *self = Self::decode(d)?;
        Ok(())
    }

    /// Convenience: decode a whole buffer with the given limits (trailing bytes are allowed).
    fn from_bytes(buf: &[u8], limits: DecodeLimits) -> DecodeResult<Self> {
        let mut d = Decoder::new(buf, limits);
        Self::decode(&mut d)
    }
}

/// Structures that travel inside an ExtensionObject or as a service message body.
/// Implemented by the generated code for every structure in Opc.Ua.Types.bsd.
pub trait UaStructure: Encode + Decode {
    /// The DataType node id (namespace 0).
    const DATA_TYPE_ID: u32;
    /// The `<Type>_Encoding_DefaultBinary` node id (namespace 0).
    const BINARY_ENCODING_ID: u32;
    /// The type's name as in the schema.
    const NAME: &'static str;
}

macro_rules! prim {
    ($t:ty, $n:expr) => {
        impl Encode for $t {
            #[inline]
            fn encode(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
        impl Decode for $t {
            const MIN_LEN: usize = $n;
            #[inline]
            fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
                Ok(<$t>::from_le_bytes(d.take_array::<$n>(stringify!($t))?))
            }
        }
    };
}
prim!(i8, 1);
prim!(u8, 1);
prim!(i16, 2);
prim!(u16, 2);
prim!(i32, 4);
prim!(u32, 4);
prim!(i64, 8);
prim!(u64, 8);
prim!(f32, 4);
prim!(f64, 8);

impl Encode for bool {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }
}
impl Decode for bool {
    #[inline]
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        // Part 6: any non-zero value is true.
        Ok(u8::decode(d)? != 0)
    }
}

/// Arrays: Int32 length then the elements. An empty Vec is written as length 0;
/// a null array (-1) decodes as an empty Vec.
impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.len() as i32).encode(out);
        for x in self {
            x.encode(out);
        }
    }
}
impl<T: Decode> Decode for Vec<T> {
    const MIN_LEN: usize = 4;
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        let max = d.limits().max_array_len;
        match d.read_length(max, T::MIN_LEN, "array")? {
            None => Ok(Vec::new()),
            Some(n) => {
                d.charge_elements::<T>(n)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(T::decode(d)?);
                }
                Ok(v)
            }
        }
    }

    /// Reuses the vector's capacity and its first elements' own memory.
    fn decode_into(&mut self, d: &mut Decoder<'_>) -> DecodeResult<()> {
        let max = d.limits().max_array_len;
        match d.read_length(max, T::MIN_LEN, "array")? {
            None => self.clear(),
            Some(n) => {
                d.charge_elements::<T>(n)?;
                self.truncate(n);
                for item in self.iter_mut() {
                    item.decode_into(d)?;
                }
                self.reserve(n - self.len());
                while self.len() < n {
                    self.push(T::decode(d)?);
                }
            }
        }
        Ok(())
    }
}

/// Encode an array that is allowed to be null (`None` → length -1).
pub fn encode_opt_array<T: Encode>(a: &Option<Vec<T>>, out: &mut Vec<u8>) {
    match a {
        None => (-1i32).encode(out),
        Some(v) => v.encode(out),
    }
}

/// Decode an array keeping the null/empty distinction.
pub fn decode_opt_array<T: Decode>(d: &mut Decoder<'_>) -> DecodeResult<Option<Vec<T>>> {
    let max = d.limits().max_array_len;
    match d.read_length(max, T::MIN_LEN, "array")? {
        None => Ok(None),
        Some(n) => {
            d.charge_elements::<T>(n)?;
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(T::decode(d)?);
            }
            Ok(Some(v))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_length_beyond_remaining_is_rejected_before_allocating() {
        // Declares 1,000,000 Int32s but carries 4 bytes.
        let mut b = Vec::new();
        1_000_000i32.encode(&mut b);
        7i32.encode(&mut b);
        let e = Vec::<i32>::from_bytes(&b, DecodeLimits::default()).unwrap_err();
        assert_eq!(e.status, StatusCode::BadDecodingError);
    }

    #[test]
    fn array_length_beyond_limit_is_limits_exceeded() {
        let mut b = Vec::new();
        11i32.encode(&mut b);
        b.extend_from_slice(&[0u8; 44]);
        let lim = DecodeLimits {
            max_array_len: 10,
            ..DecodeLimits::default()
        };
        let e = Vec::<i32>::from_bytes(&b, lim).unwrap_err();
        assert_eq!(e.status, StatusCode::BadEncodingLimitsExceeded);
    }

    #[test]
    fn decoded_size_counts_memory_not_wire_bytes() {
        // 1000 UInt64s: 4 + 8000 bytes on the wire, 8000 in memory.
        let v: Vec<u64> = (0..1000).collect();
        let b = v.to_bytes();
        let lim = DecodeLimits {
            max_decoded_size: 8000,
            ..DecodeLimits::default()
        };
        assert_eq!(Vec::<u64>::from_bytes(&b, lim).unwrap(), v);
        let lim = DecodeLimits {
            max_decoded_size: 7999,
            ..DecodeLimits::default()
        };
        let e = Vec::<u64>::from_bytes(&b, lim).unwrap_err();
        assert_eq!(
            (e.status, e.what),
            (StatusCode::BadEncodingLimitsExceeded, DECODED_SIZE)
        );
        // A tighter budget from the caller wins over the limit.
        let mut d = Decoder::with_budget(&b, DecodeLimits::default(), 100);
        assert_eq!(Vec::<u64>::decode(&mut d).unwrap_err().what, DECODED_SIZE);
        let mut d = Decoder::new(&b, DecodeLimits::default());
        Vec::<u64>::decode(&mut d).unwrap();
        assert_eq!(d.decoded_bytes(), 8000);
    }

    #[test]
    fn null_array_decodes_empty() {
        let b = (-1i32).to_bytes();
        assert!(Vec::<u32>::from_bytes(&b, DecodeLimits::default())
            .unwrap()
            .is_empty());
        let mut d = Decoder::new(&b, DecodeLimits::default());
        assert_eq!(decode_opt_array::<u32>(&mut d).unwrap(), None);
    }

    #[test]
    fn primitives_are_little_endian() {
        assert_eq!(0x0102_0304u32.to_bytes(), vec![4, 3, 2, 1]);
        assert_eq!((-2i16).to_bytes(), vec![0xFE, 0xFF]);
        assert_eq!(1.0f64.to_bytes(), vec![0, 0, 0, 0, 0, 0, 0xF0, 0x3F]);
        assert!(bool::from_bytes(&[2], DecodeLimits::default()).unwrap());
    }
}
