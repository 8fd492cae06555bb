use crate::encoding::{Decode, DecodeResult, Decoder, Encode};

/// A StatusCode. The named constants (`StatusCode::BadNodeIdUnknown`, …) are generated
/// from StatusCode.csv into `crate::generated::status_codes`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct StatusCode(pub u32);

impl StatusCode {
    #[inline]
    pub const fn is_good(self) -> bool {
        self.0 & 0xC000_0000 == 0
    }
    #[inline]
    pub const fn is_bad(self) -> bool {
        self.0 & 0x8000_0000 != 0
    }
    #[inline]
    pub const fn is_uncertain(self) -> bool {
        self.0 & 0xC000_0000 == 0x4000_0000
    }
    /// The code without the info bits (low 16 bits).
    #[inline]
    pub const fn code(self) -> u32 {
        self.0 & 0xFFFF_0000
    }
    /// The symbolic name from StatusCode.csv, if known (info bits ignored).
    pub fn name(self) -> Option<&'static str> {
        crate::generated::status_codes::name_of(self.code())
    }
}

impl std::fmt::Debug for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name() {
            Some(n) if self.0 & 0xFFFF == 0 => write!(f, "{n}"),
            Some(n) => write!(f, "{n}(0x{:08X})", self.0),
            None => write!(f, "StatusCode(0x{:08X})", self.0),
        }
    }
}
impl std::fmt::Display for StatusCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

impl Encode for StatusCode {
    #[inline]
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out)
    }
}
impl Decode for StatusCode {
    const MIN_LEN: usize = 4;
    #[inline]
    fn decode(d: &mut Decoder<'_>) -> DecodeResult<Self> {
        Ok(StatusCode(u32::decode(d)?))
    }
}
