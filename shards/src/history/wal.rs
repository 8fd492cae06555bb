//! The write-ahead log: file header, frames, and the raw sample records inside them.

use super::codec::crc32;
use super::{Sample, StoreError};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use uaring_core::encoding::{Decode, DecodeError, DecodeLimits, Decoder, Encode};
use uaring_core::types::Variant;

pub(crate) const WAL_MAGIC: u32 = u32::from_le_bytes(*b"UAHW");
pub(crate) const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"UAHF");
pub(crate) const VERSION: u32 = 1;
pub(crate) const HEADER_LEN: u64 = 16;
pub(crate) const FRAME_HEADER_LEN: usize = 12;
/// The writer starts a frame at this many buffered bytes.
pub(crate) const FRAME_TARGET: usize = 4 << 20;
/// No frame on disk may be longer (one sample is at most 1 MiB, see below).
pub(crate) const MAX_FRAME: usize = 8 << 20;
/// The largest encoded sample record taken.
pub(crate) const MAX_RECORD: usize = 1 << 20;

pub(crate) fn header(gen: u64) -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[0..4].copy_from_slice(&WAL_MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&gen.to_le_bytes());
    h
}

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn get_varint(d: &mut Decoder<'_>) -> Result<u64, DecodeError> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = u8::decode(d)?;
        v |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(DecodeError::decoding("WAL varint"))
}

#[inline]
fn zz(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}
#[inline]
fn unzz(z: u64) -> i64 {
    ((z >> 1) as i64) ^ -((z & 1) as i64)
}

/// Appends one sample record: varints of the series id, of the source timestamp's
/// difference from the previous record's in the frame (`prev_ts`, 0 at a frame's start),
/// of the server timestamp's difference from the source timestamp, and of the status,
/// then the Variant in core's binary encoding. A Double sample takes about 14 bytes.
#[inline]
pub(crate) fn encode_record(out: &mut Vec<u8>, prev_ts: &mut i64, id: u32, s: &Sample) {
    put_varint(out, id as u64);
    put_varint(out, zz(s.source_ts.wrapping_sub(*prev_ts)));
    *prev_ts = s.source_ts;
    put_varint(out, zz(s.server_ts.wrapping_sub(s.source_ts)));
    put_varint(out, s.status as u64);
    s.value.encode(out);
}

/// Appends a frame around `payload` to `out`.
pub(crate) fn frame(payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// What reading a WAL file found.
pub(crate) struct WalScan {
    /// Whether something after `valid_len` was ignored.
    pub torn: bool,
}

/// Reads the WAL at `path`, calling `each` for every sample of every valid frame, in
/// order, and stops at the first damaged or incomplete frame.
/// A frame's payload is a run of [`encode_record`] records.
pub(crate) fn scan(
    path: &Path,
    expect_gen: u64,
    mut each: impl FnMut(u32, Sample),
) -> Result<WalScan, StoreError> {
    let file = File::open(path)?;
    let file_len = file.metadata()?.len();
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut h = [0u8; HEADER_LEN as usize];
    if r.read_exact(&mut h).is_err() {
        return Err(StoreError::Corrupt("WAL header"));
    }
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    if le32(&h[0..4]) != WAL_MAGIC || le32(&h[4..8]) != VERSION {
        return Err(StoreError::Corrupt("WAL header"));
    }
    let mut g = [0u8; 8];
    g.copy_from_slice(&h[8..16]);
    if u64::from_le_bytes(g) != expect_gen {
        return Err(StoreError::Corrupt("WAL header"));
    }
    let mut pos = HEADER_LEN;
    let mut payload = Vec::new();
    let limits = DecodeLimits::default();
    loop {
        let mut fh = [0u8; FRAME_HEADER_LEN];
        if r.read_exact(&mut fh).is_err() {
            break;
        }
        let len = le32(&fh[4..8]) as usize;
        if le32(&fh[0..4]) != FRAME_MAGIC
            || len > MAX_FRAME
            || pos + (FRAME_HEADER_LEN + len) as u64 > file_len
        {
            break;
        }
        payload.resize(len, 0);
        if r.read_exact(&mut payload).is_err() || crc32(&payload) != le32(&fh[8..12]) {
            break;
        }
        // A frame that passed its CRC but does not decode is damage too: its samples
        // up to the bad one are kept.
        let mut d = Decoder::new(&payload, limits);
        let mut ok = true;
        let mut prev_ts = 0i64;
        while !d.is_empty() {
            let rec = (|| {
                let id = get_varint(&mut d)?;
                let source_ts = prev_ts.wrapping_add(unzz(get_varint(&mut d)?));
                let server_ts = source_ts.wrapping_add(unzz(get_varint(&mut d)?));
                let status = get_varint(&mut d)?;
                let value = Variant::decode(&mut d)?;
                if id > u32::MAX as u64 || status > u32::MAX as u64 {
                    return Err(DecodeError::decoding("WAL record"));
                }
                prev_ts = source_ts;
                Ok((
                    id as u32,
                    Sample {
                        source_ts,
                        server_ts,
                        status: status as u32,
                        value,
                    },
                ))
            })();
            match rec {
                Ok((id, s)) => each(id, s),
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            break;
        }
        pos += (FRAME_HEADER_LEN + len) as u64;
    }
    Ok(WalScan {
        torn: pos < file_len,
    })
}
