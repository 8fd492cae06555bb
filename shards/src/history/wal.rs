//! The write-ahead log: file header, frames, and the raw sample records inside them.

use super::codec::crc32;
use super::{Sample, StoreError};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use uaring_core::encoding::{Decode, DecodeLimits, Decoder, Encode};
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

/// Appends one sample record.
#[inline]
pub(crate) fn encode_record(out: &mut Vec<u8>, id: u32, s: &Sample) {
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&s.source_ts.to_le_bytes());
    out.extend_from_slice(&s.server_ts.to_le_bytes());
    out.extend_from_slice(&s.status.to_le_bytes());
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
        while !d.is_empty() {
            let rec = (|| {
                let id = u32::decode(&mut d)?;
                let source_ts = i64::decode(&mut d)?;
                let server_ts = i64::decode(&mut d)?;
                let status = u32::decode(&mut d)?;
                let value = Variant::decode(&mut d)?;
                Ok::<_, uaring_core::encoding::DecodeError>((
                    id,
                    Sample {
                        source_ts,
                        server_ts,
                        status,
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
