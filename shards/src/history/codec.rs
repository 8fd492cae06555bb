//! Chunk payload codec: the column encodings of one sealed chunk (see the module doc of
//! [`crate::history`] for the layout) and the CRC-32 used by every record on disk.
//!
//! Decoding takes bytes that passed a CRC but may still be wrong (a bug, a collision):
//! every read is bounds-checked and every count is checked against what the caller
//! allows before anything is allocated. No path panics on bad input.

use super::{Sample, StoreError};
use uaring_core::encoding::{Decode, DecodeLimits, Decoder, Encode};
use uaring_core::types::{BuiltinType, DateTime, StatusCode, Variant};

// ---------------------------------------------------------------------------------------
// CRC-32 (IEEE, reflected 0xEDB88320), slicing by 8.

const fn crc_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut s = 1;
    while s < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[s - 1][i];
            t[s][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        s += 1;
    }
    t
}

static CRC: [[u32; 256]; 8] = crc_tables();

/// CRC-32 (the zlib/Ethernet polynomial) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    crc32_update(0, data)
}

/// Continues a CRC-32 over more bytes (`crc32_update(crc32(a), b) == crc32(a ++ b)`).
pub fn crc32_update(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = data.chunks_exact(8);
    for b in &mut chunks {
        let lo = c ^ u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        c = CRC[7][(lo & 0xff) as usize]
            ^ CRC[6][((lo >> 8) & 0xff) as usize]
            ^ CRC[5][((lo >> 16) & 0xff) as usize]
            ^ CRC[4][(lo >> 24) as usize]
            ^ CRC[3][b[4] as usize]
            ^ CRC[2][b[5] as usize]
            ^ CRC[1][b[6] as usize]
            ^ CRC[0][b[7] as usize];
    }
    for &b in chunks.remainder() {
        c = CRC[0][((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

// ---------------------------------------------------------------------------------------
// Bit streams (most significant bit first).

pub(crate) struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    fill: u32,
}

impl BitWriter {
    pub fn new(out: Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            fill: 0,
        }
    }
    /// Writes the low `n` bits of `v` (`n` ≤ 64).
    #[inline]
    pub fn write(&mut self, v: u64, n: u32) {
        if n == 0 {
            return;
        }
        let v = if n < 64 { v & ((1u64 << n) - 1) } else { v };
        let space = 64 - self.fill;
        if n < space {
            self.acc = (self.acc << n) | v;
            self.fill += n;
        } else if n == space {
            let word = if n == 64 { v } else { (self.acc << n) | v };
            self.out.extend_from_slice(&word.to_be_bytes());
            self.acc = 0;
            self.fill = 0;
        } else {
            let hi = n - space;
            let word = (self.acc << space) | (v >> hi);
            self.out.extend_from_slice(&word.to_be_bytes());
            self.acc = v & ((1u64 << hi) - 1);
            self.fill = hi;
        }
    }
    #[inline]
    pub fn bit(&mut self, b: bool) {
        self.write(b as u64, 1);
    }
    /// Pads to a whole byte and returns the bytes.
    pub fn finish(mut self) -> Vec<u8> {
        if self.fill > 0 {
            let word = self.acc << (64 - self.fill);
            let bytes = word.to_be_bytes();
            let n = self.fill.div_ceil(8) as usize;
            self.out.extend_from_slice(&bytes[..n]);
        }
        self.out
    }
}

pub(crate) struct BitReader<'a> {
    data: &'a [u8],
    /// The next byte to load into `acc`.
    next: usize,
    /// The next `avail` bits, most significant first (the rest zero).
    acc: u64,
    avail: u32,
    /// Bits consumed.
    pos: usize,
}

fn corrupt() -> StoreError {
    StoreError::Corrupt("chunk payload")
}

impl<'a> BitReader<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            next: 0,
            acc: 0,
            avail: 0,
            pos: 0,
        }
    }
    #[inline]
    fn refill(&mut self) {
        while self.avail <= 56 {
            let Some(&b) = self.data.get(self.next) else {
                break;
            };
            self.acc |= (b as u64) << (56 - self.avail);
            self.avail += 8;
            self.next += 1;
        }
    }
    /// Reads `n` bits (`n` ≤ 64).
    #[inline]
    pub fn read(&mut self, n: u32) -> Result<u64, StoreError> {
        if n == 0 {
            return Ok(0);
        }
        if n > 32 {
            if n > 64 {
                return Err(corrupt());
            }
            let hi = self.read(n - 32)?;
            let lo = self.read(32)?;
            return Ok((hi << 32) | lo);
        }
        if self.avail < n {
            self.refill();
            if self.avail < n {
                return Err(corrupt());
            }
        }
        let v = self.acc >> (64 - n);
        self.acc <<= n;
        self.avail -= n;
        self.pos += n as usize;
        Ok(v)
    }
    #[inline]
    pub fn bit(&mut self) -> Result<bool, StoreError> {
        Ok(self.read(1)? == 1)
    }
    /// The first byte after the bits read so far.
    pub fn byte_pos(&self) -> usize {
        self.pos.div_ceil(8)
    }
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
#[inline]
fn unzigzag(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// A signed integer in a prefix code: `0` for 0, then `10`+7, `110`+12, `1110`+20,
/// `11110`+32 and `11111`+64 bits of its zigzag form. A steady 1 Hz clock's
/// delta-of-delta is 0: one bit a timestamp.
#[inline]
pub(crate) fn put_int(w: &mut BitWriter, v: i64) {
    let z = zigzag(v);
    if z == 0 {
        w.write(0, 1);
    } else if z < 1 << 7 {
        w.write(0b10, 2);
        w.write(z, 7);
    } else if z < 1 << 12 {
        w.write(0b110, 3);
        w.write(z, 12);
    } else if z < 1 << 20 {
        w.write(0b1110, 4);
        w.write(z, 20);
    } else if z < 1 << 32 {
        w.write(0b11110, 5);
        w.write(z, 32);
    } else {
        w.write(0b11111, 5);
        w.write(z, 64);
    }
}

#[inline]
pub(crate) fn get_int(r: &mut BitReader<'_>) -> Result<i64, StoreError> {
    let n = if !r.bit()? {
        return Ok(0);
    } else if !r.bit()? {
        7
    } else if !r.bit()? {
        12
    } else if !r.bit()? {
        20
    } else if !r.bit()? {
        32
    } else {
        64
    };
    Ok(unzigzag(r.read(n)?))
}

// ---------------------------------------------------------------------------------------
// Values.

const MODE_GENERIC: u64 = 0;
const MODE_BOOL: u64 = 1;
const MODE_INT: u64 = 2;
const MODE_DOUBLE_XOR: u64 = 3;
const MODE_FLOAT_XOR: u64 = 4;
const MODE_DOUBLE_DECIMAL: u64 = 5;

/// Most decimal digits tried for the scaled-integer Double encoding.
const MAX_DECIMALS: u32 = 6;
const POW10: [f64; 7] = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6];

fn int_of(v: &Variant) -> Option<(BuiltinType, i64)> {
    Some(match v {
        Variant::SByte(x) => (BuiltinType::SByte, *x as i64),
        Variant::Byte(x) => (BuiltinType::Byte, *x as i64),
        Variant::Int16(x) => (BuiltinType::Int16, *x as i64),
        Variant::UInt16(x) => (BuiltinType::UInt16, *x as i64),
        Variant::Int32(x) => (BuiltinType::Int32, *x as i64),
        Variant::UInt32(x) => (BuiltinType::UInt32, *x as i64),
        Variant::Int64(x) => (BuiltinType::Int64, *x),
        Variant::UInt64(x) => (BuiltinType::UInt64, *x as i64),
        Variant::DateTime(x) => (BuiltinType::DateTime, x.0),
        Variant::StatusCode(x) => (BuiltinType::StatusCode, x.0 as i64),
        _ => return None,
    })
}

fn variant_of_int(t: BuiltinType, x: i64) -> Result<Variant, StoreError> {
    Ok(match t {
        BuiltinType::SByte => Variant::SByte(x as i8),
        BuiltinType::Byte => Variant::Byte(x as u8),
        BuiltinType::Int16 => Variant::Int16(x as i16),
        BuiltinType::UInt16 => Variant::UInt16(x as u16),
        BuiltinType::Int32 => Variant::Int32(x as i32),
        BuiltinType::UInt32 => Variant::UInt32(x as u32),
        BuiltinType::Int64 => Variant::Int64(x),
        BuiltinType::UInt64 => Variant::UInt64(x as u64),
        BuiltinType::DateTime => Variant::DateTime(DateTime(x)),
        BuiltinType::StatusCode => Variant::StatusCode(StatusCode(x as u32)),
        _ => return Err(corrupt()),
    })
}

/// The fewest decimals `k` (≤ [`MAX_DECIMALS`]) with which every value is exactly
/// `m / 10^k` for an integer `m` below 2^53 (checked bit for bit, so decoding with the
/// same division gives back the same Double).
fn decimals_of(values: &[Sample]) -> Option<u32> {
    let mut k = 0u32;
    for s in values {
        let Variant::Double(v) = s.value else {
            return None;
        };
        loop {
            let p = POW10[k as usize];
            let m = (v * p).round();
            if m.abs() < 9.0e15 && (m / p).to_bits() == v.to_bits() {
                break;
            }
            k += 1;
            if k > MAX_DECIMALS {
                return None;
            }
        }
    }
    // A later value may have raised k: check the earlier ones at the final k.
    let p = POW10[k as usize];
    values
        .iter()
        .all(|s| match s.value {
            Variant::Double(v) => {
                let m = (v * p).round();
                m.abs() < 9.0e15 && (m / p).to_bits() == v.to_bits()
            }
            _ => false,
        })
        .then_some(k)
}

fn put_xor(w: &mut BitWriter, values: impl Iterator<Item = u64>) {
    let mut prev = 0u64;
    let mut first = true;
    // The previous window: leading zeros and trailing zeros (64 = none yet).
    let (mut plz, mut ptz) = (64u32, 64u32);
    for bits in values {
        if first {
            w.write(bits, 64);
            prev = bits;
            first = false;
            continue;
        }
        let x = bits ^ prev;
        prev = bits;
        if x == 0 {
            w.write(0, 1);
            continue;
        }
        w.write(1, 1);
        let lz = x.leading_zeros().min(31);
        let tz = x.trailing_zeros();
        if plz + ptz < 64 && lz >= plz && tz >= ptz {
            w.write(0, 1);
            w.write(x >> ptz, 64 - plz - ptz);
        } else {
            let sig = 64 - lz - tz;
            w.write(1, 1);
            w.write(lz as u64, 5);
            w.write((sig - 1) as u64, 6);
            w.write(x >> tz, sig);
            plz = lz;
            ptz = tz;
        }
    }
}

fn get_xor(
    r: &mut BitReader<'_>,
    count: usize,
    mut each: impl FnMut(u64),
) -> Result<(), StoreError> {
    if count == 0 {
        return Ok(());
    }
    let mut prev = r.read(64)?;
    each(prev);
    let (mut plz, mut ptz) = (64u32, 64u32);
    for _ in 1..count {
        if r.bit()? {
            if r.bit()? {
                let lz = r.read(5)? as u32;
                let sig = r.read(6)? as u32 + 1;
                if lz + sig > 64 {
                    return Err(corrupt());
                }
                let tz = 64 - lz - sig;
                prev ^= r.read(sig)? << tz;
                plz = lz;
                ptz = tz;
            } else {
                if plz + ptz >= 64 {
                    return Err(corrupt());
                }
                prev ^= r.read(64 - plz - ptz)? << ptz;
            }
        }
        each(prev);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Chunks.

/// Encodes `samples` (1 ..= u32::MAX of them, any order) as a chunk payload.
pub fn encode_chunk(samples: &[Sample], out: Vec<u8>) -> Vec<u8> {
    let mut w = BitWriter::new(out);
    // Source timestamps: the first in 64 bits, then delta-of-delta.
    let mut prev_ts = 0i64;
    let mut prev_delta = 0i64;
    for (i, s) in samples.iter().enumerate() {
        if i == 0 {
            w.write(s.source_ts as u64, 64);
        } else {
            let delta = s.source_ts.wrapping_sub(prev_ts);
            put_int(&mut w, delta.wrapping_sub(prev_delta));
            prev_delta = delta;
        }
        prev_ts = s.source_ts;
    }
    // Server timestamps: the offset from the source timestamp, delta-coded.
    let mut prev_off = 0i64;
    for s in samples {
        let off = s.server_ts.wrapping_sub(s.source_ts);
        put_int(&mut w, off.wrapping_sub(prev_off));
        prev_off = off;
    }
    // Status codes: runs of (length - 1, code).
    let mut i = 0;
    while i < samples.len() {
        let code = samples[i].status;
        let mut j = i + 1;
        while j < samples.len() && samples[j].status == code {
            j += 1;
        }
        put_int(&mut w, (j - i - 1) as i64);
        w.write(code as u64, 32);
        i = j;
    }
    // Values.
    let first = samples.first().map(|s| &s.value);
    let all = |f: &dyn Fn(&Variant) -> bool| samples.iter().all(|s| f(&s.value));
    let int_type = first.and_then(int_of).map(|(t, _)| t);
    if first.is_none() {
        w.write(MODE_GENERIC, 4);
        return w.finish();
    }
    if all(&|v| matches!(v, Variant::Boolean(_))) {
        w.write(MODE_BOOL, 4);
        for s in samples {
            w.bit(matches!(s.value, Variant::Boolean(true)));
        }
        w.finish()
    } else if let (Some(t), true) = (int_type, all(&|v| int_of(v).map(|(t, _)| t) == int_type)) {
        w.write(MODE_INT, 4);
        w.write(t as u64, 8);
        let mut prev = 0i64;
        for s in samples {
            let x = int_of(&s.value).map(|(_, x)| x).unwrap_or(0);
            put_int(&mut w, x.wrapping_sub(prev));
            prev = x;
        }
        w.finish()
    } else if all(&|v| matches!(v, Variant::Double(_))) {
        if let Some(k) = decimals_of(samples) {
            w.write(MODE_DOUBLE_DECIMAL, 4);
            w.write(k as u64, 4);
            let p = POW10[k as usize];
            let mut prev = 0i64;
            for s in samples {
                let m = match s.value {
                    Variant::Double(v) => (v * p).round() as i64,
                    _ => 0,
                };
                put_int(&mut w, m.wrapping_sub(prev));
                prev = m;
            }
        } else {
            w.write(MODE_DOUBLE_XOR, 4);
            put_xor(
                &mut w,
                samples.iter().map(|s| match s.value {
                    Variant::Double(v) => v.to_bits(),
                    _ => 0,
                }),
            );
        }
        w.finish()
    } else if all(&|v| matches!(v, Variant::Float(_))) {
        w.write(MODE_FLOAT_XOR, 4);
        put_xor(
            &mut w,
            samples.iter().map(|s| match s.value {
                Variant::Float(v) => (v.to_bits() as u64) << 32,
                _ => 0,
            }),
        );
        w.finish()
    } else {
        w.write(MODE_GENERIC, 4);
        let mut out = w.finish();
        for s in samples {
            s.value.encode(&mut out);
        }
        out
    }
}

/// Decodes a chunk payload of `count` samples, appending them to `out`.
pub fn decode_chunk(payload: &[u8], count: usize, out: &mut Vec<Sample>) -> Result<(), StoreError> {
    // Each sample takes at least 2 bits (timestamp and server offset) after the first: a
    // count the payload cannot hold is rejected before reserving.
    if count > 1 && (count - 1) * 2 > payload.len() * 8 {
        return Err(corrupt());
    }
    let base = out.len();
    out.reserve(count);
    let mut r = BitReader::new(payload);
    let mut prev_ts = 0i64;
    let mut prev_delta = 0i64;
    for i in 0..count {
        let ts = if i == 0 {
            r.read(64)? as i64
        } else {
            let delta = prev_delta.wrapping_add(get_int(&mut r)?);
            prev_delta = delta;
            prev_ts.wrapping_add(delta)
        };
        prev_ts = ts;
        out.push(Sample {
            source_ts: ts,
            server_ts: 0,
            status: 0,
            value: Variant::Empty,
        });
    }
    let samples = out.get_mut(base..).ok_or_else(corrupt)?;
    let mut prev_off = 0i64;
    for s in samples.iter_mut() {
        prev_off = prev_off.wrapping_add(get_int(&mut r)?);
        s.server_ts = s.source_ts.wrapping_add(prev_off);
    }
    let mut i = 0;
    while i < count {
        let run = get_int(&mut r)?;
        if run < 0 || run as u64 >= (count - i) as u64 {
            return Err(corrupt());
        }
        let code = r.read(32)? as u32;
        let end = i + run as usize + 1;
        for s in &mut samples[i..end] {
            s.status = code;
        }
        i = end;
    }
    match r.read(4)? {
        MODE_BOOL => {
            for s in samples.iter_mut() {
                s.value = Variant::Boolean(r.bit()?);
            }
        }
        MODE_INT => {
            let t = BuiltinType::from_id(r.read(8)? as u8).ok_or_else(corrupt)?;
            let mut prev = 0i64;
            for s in samples.iter_mut() {
                prev = prev.wrapping_add(get_int(&mut r)?);
                s.value = variant_of_int(t, prev)?;
            }
        }
        MODE_DOUBLE_DECIMAL => {
            let k = r.read(4)? as usize;
            let p = *POW10.get(k).ok_or_else(corrupt)?;
            let mut prev = 0i64;
            for s in samples.iter_mut() {
                prev = prev.wrapping_add(get_int(&mut r)?);
                s.value = Variant::Double(prev as f64 / p);
            }
        }
        MODE_DOUBLE_XOR => {
            let mut it = samples.iter_mut();
            get_xor(&mut r, count, |bits| {
                if let Some(s) = it.next() {
                    s.value = Variant::Double(f64::from_bits(bits));
                }
            })?;
        }
        MODE_FLOAT_XOR => {
            let mut it = samples.iter_mut();
            get_xor(&mut r, count, |bits| {
                if let Some(s) = it.next() {
                    s.value = Variant::Float(f32::from_bits((bits >> 32) as u32));
                }
            })?;
        }
        MODE_GENERIC => {
            let rest = payload.get(r.byte_pos()..).ok_or_else(corrupt)?;
            let limits = DecodeLimits {
                max_decoded_size: 256 * 1024 * 1024,
                ..DecodeLimits::default()
            };
            let mut d = Decoder::new(rest, limits);
            for s in samples.iter_mut() {
                s.value = Variant::decode(&mut d).map_err(|_| corrupt())?;
            }
        }
        _ => return Err(corrupt()),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc_known_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        assert_eq!(
            crc32_update(crc32(&data[..333]), &data[333..]),
            crc32(&data)
        );
    }

    #[test]
    fn bits_round_trip() {
        let mut w = BitWriter::new(Vec::new());
        let vals: Vec<(u64, u32)> = (0..500u64)
            .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15), (i % 64 + 1) as u32))
            .collect();
        for &(v, n) in &vals {
            w.write(v, n);
        }
        for i in -300i64..300 {
            put_int(&mut w, i * i * i * 1000);
        }
        put_int(&mut w, i64::MIN);
        put_int(&mut w, i64::MAX);
        let bytes = w.finish();
        let mut r = BitReader::new(&bytes);
        for &(v, n) in &vals {
            let m = if n == 64 { u64::MAX } else { (1 << n) - 1 };
            assert_eq!(r.read(n).unwrap(), v & m);
        }
        for i in -300i64..300 {
            assert_eq!(get_int(&mut r).unwrap(), i * i * i * 1000);
        }
        assert_eq!(get_int(&mut r).unwrap(), i64::MIN);
        assert_eq!(get_int(&mut r).unwrap(), i64::MAX);
        assert!(r.read(64).is_err());
    }

    fn round_trip(values: Vec<Variant>) -> usize {
        let samples: Vec<Sample> = values
            .into_iter()
            .enumerate()
            .map(|(i, value)| Sample {
                source_ts: 1_000_000 + i as i64 * 10_000_000 + (i as i64 % 3) * 7,
                server_ts: 1_000_000 + i as i64 * 10_000_000 + 5,
                status: if i % 10 == 9 { 0x8000_0000 } else { 0 },
                value,
            })
            .collect();
        let bytes = encode_chunk(&samples, Vec::new());
        let mut out = Vec::new();
        decode_chunk(&bytes, samples.len(), &mut out).unwrap();
        assert_eq!(out, samples);
        // Every truncation fails cleanly or decodes something, never panics.
        for cut in 0..bytes.len() {
            let mut o = Vec::new();
            let _ = decode_chunk(&bytes[..cut], samples.len(), &mut o);
        }
        bytes.len()
    }

    #[test]
    fn modes_round_trip() {
        round_trip((0..100).map(|i| Variant::Boolean(i % 3 == 0)).collect());
        round_trip((0..100).map(|i| Variant::Int32(i * 1000 - 7)).collect());
        round_trip((0..100).map(|i| Variant::UInt64(u64::MAX - i)).collect());
        round_trip((0..100).map(|i| Variant::SByte(i as i8)).collect());
        round_trip(
            (0..100)
                .map(|i| Variant::DateTime(DateTime(i * 99)))
                .collect(),
        );
        round_trip(
            (0..100)
                .map(|i| Variant::Double((i as f64 * 0.37).sin()))
                .collect(),
        );
        round_trip(
            (0..100)
                .map(|i| Variant::Double((i / 7) as f64 * 0.25))
                .collect(),
        );
        round_trip(
            (0..6)
                .map(|i| Variant::Double(if i % 2 == 0 { -0.0 } else { f64::INFINITY }))
                .collect(),
        );
        round_trip((0..100).map(|i| Variant::Float(i as f32 / 3.0)).collect());
        round_trip(
            (0..100)
                .map(|i| {
                    if i % 2 == 0 {
                        Variant::Double(1.5)
                    } else {
                        Variant::String(format!("s{i}").as_str().into())
                    }
                })
                .collect(),
        );
        round_trip(vec![Variant::Empty; 5]);
        round_trip(vec![Variant::Double(3.25)]);
        let mut out = Vec::new();
        decode_chunk(&encode_chunk(&[], Vec::new()), 0, &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn huge_count_is_rejected_before_allocating() {
        let mut out = Vec::new();
        assert!(decode_chunk(&[0u8; 16], usize::MAX / 2, &mut out).is_err());
    }
}
