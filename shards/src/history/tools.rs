//! `uaring history export|import`: one node's values as CSV, out of and into a store that no
//! server has open (the store's lock says so).
//!
//! The CSV has a header and one row per value:
//! `source_timestamp,server_timestamp,status,type,value` — timestamps in RFC 3339 UTC with
//! 100 ns digits (`2026-12-02T18:00:00.0000000Z`), the StatusCode as `0x…` hex, the built-in
//! type's name (`Double`, `Int32`, `String`, …, `Empty`), and the value: numbers and
//! Booleans as text, a String quoted as CSV quotes (`"a ""b"""`), a DateTime in RFC 3339, and
//! anything else (arrays, structures, NodeIds…) as `Binary` with the hex of its OPC UA Binary
//! encoding. Export and import round-trip exactly.

use super::archive::Archive;
use std::io::{BufRead, Write};

use uaring_core::encoding::{Decode, DecodeLimits, Encode};
use uaring_core::types::{DateTime, UaString, Variant};

use super::{Sample, SeriesId, Store, StoreError};

/// The CSV header.
pub const HEADER: &str = "source_timestamp,server_timestamp,status,type,value";

/// Writes the values of `node` (a NodeId string as the server names its series,
/// `ns=1;s=Demo.History.Level`) with `from ≤ source ≤ to` as CSV; returns how many.
pub fn export(
    store: &Store,
    node: &str,
    from: i64,
    to: i64,
    out: &mut dyn Write,
) -> Result<u64, String> {
    let id = store
        .lookup(node)
        .ok_or_else(|| format!("no history of {node} in this store"))?;
    writeln!(out, "{HEADER}").map_err(|e| e.to_string())?;
    let mut n = 0;
    let mut page = Vec::new();
    let mut resume = None;
    loop {
        page.clear();
        let next = match resume {
            None => store.read(id, from, to, false, 10_000, &mut page),
            Some(r) => store.read_from(id, r, to, false, 10_000, &mut page),
        }
        .map_err(|e| e.to_string())?;
        for s in &page {
            writeln!(out, "{}", row(s)).map_err(|e| e.to_string())?;
            n += 1;
        }
        match next {
            Some(r) => resume = Some(r),
            None => return Ok(n),
        }
    }
}

/// Reads CSV rows (as [`export`] writes them) into the series of `node` (created when
/// missing), flushed before it returns; returns how many. A bad row stops the import with
/// its line number; the rows before it are kept.
pub fn import(store: &Store, node: &str, input: &mut dyn BufRead) -> Result<u64, String> {
    let id: SeriesId = store.series(node).map_err(|e| e.to_string())?;
    let mut n = 0;
    let mut batch = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line.map_err(|e| e.to_string())?;
        if i == 0 && line.trim() == HEADER {
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        let s = parse_row(&line).map_err(|e| format!("line {}: {e}", i + 1))?;
        batch.push((id, s));
        if batch.len() == 10_000 {
            n += store.append(batch.drain(..)).map_err(|e| e.to_string())?;
        }
    }
    n += store.append(batch.drain(..)).map_err(|e| e.to_string())?;
    store.flush().map_err(|e: StoreError| e.to_string())?;
    Ok(n)
}

fn row(s: &Sample) -> String {
    let (ty, v) = value_text(&s.value);
    format!(
        "{},{},0x{:08X},{ty},{v}",
        DateTime(s.source_ts),
        DateTime(s.server_ts),
        s.status
    )
}

fn value_text(v: &Variant) -> (&'static str, String) {
    match v {
        Variant::Empty => ("Empty", String::new()),
        Variant::Boolean(x) => ("Boolean", x.to_string()),
        Variant::SByte(x) => ("SByte", x.to_string()),
        Variant::Byte(x) => ("Byte", x.to_string()),
        Variant::Int16(x) => ("Int16", x.to_string()),
        Variant::UInt16(x) => ("UInt16", x.to_string()),
        Variant::Int32(x) => ("Int32", x.to_string()),
        Variant::UInt32(x) => ("UInt32", x.to_string()),
        Variant::Int64(x) => ("Int64", x.to_string()),
        Variant::UInt64(x) => ("UInt64", x.to_string()),
        // `{:?}` prints the shortest text that reads back as the same number.
        Variant::Float(x) => ("Float", format!("{x:?}")),
        Variant::Double(x) => ("Double", format!("{x:?}")),
        Variant::String(s) if !s.is_null() => {
            ("String", format!("\"{}\"", s.as_str().replace('"', "\"\"")))
        }
        Variant::DateTime(t) => ("DateTime", t.to_string()),
        other => {
            let mut b = Vec::new();
            other.encode(&mut b);
            ("Binary", b.iter().map(|x| format!("{x:02x}")).collect())
        }
    }
}

fn parse_row(line: &str) -> Result<Sample, String> {
    let mut parts = line.splitn(5, ',');
    let mut next = |what: &str| parts.next().ok_or_else(|| format!("no {what}"));
    let source = parse_time(next("source_timestamp")?)?;
    let server = parse_time(next("server_timestamp")?)?;
    let status = next("status")?;
    let status = u32::from_str_radix(status.trim().trim_start_matches("0x"), 16)
        .map_err(|_| format!("status {status:?}"))?;
    let ty = next("type")?.trim().to_string();
    let v = next("value").unwrap_or_default();
    let bad = || format!("{ty} value {v:?}");
    let value = match ty.as_str() {
        "Empty" => Variant::Empty,
        "Boolean" => Variant::Boolean(v.parse().map_err(|_| bad())?),
        "SByte" => Variant::SByte(v.parse().map_err(|_| bad())?),
        "Byte" => Variant::Byte(v.parse().map_err(|_| bad())?),
        "Int16" => Variant::Int16(v.parse().map_err(|_| bad())?),
        "UInt16" => Variant::UInt16(v.parse().map_err(|_| bad())?),
        "Int32" => Variant::Int32(v.parse().map_err(|_| bad())?),
        "UInt32" => Variant::UInt32(v.parse().map_err(|_| bad())?),
        "Int64" => Variant::Int64(v.parse().map_err(|_| bad())?),
        "UInt64" => Variant::UInt64(v.parse().map_err(|_| bad())?),
        "Float" => Variant::Float(v.parse().map_err(|_| bad())?),
        "Double" => Variant::Double(v.parse().map_err(|_| bad())?),
        "String" => {
            let inner = v
                .strip_prefix('"')
                .and_then(|x| x.strip_suffix('"'))
                .ok_or_else(bad)?;
            Variant::String(UaString::from(inner.replace("\"\"", "\"").as_str()))
        }
        "DateTime" => Variant::DateTime(DateTime(parse_time(v)?)),
        "Binary" => {
            if v.len() % 2 != 0 || v.len() > 2 * (1 << 20) {
                return Err(bad());
            }
            let bytes = (0..v.len())
                .step_by(2)
                .map(|i| v.get(i..i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(bad)?;
            Variant::from_bytes(&bytes, DecodeLimits::default()).map_err(|_| bad())?
        }
        _ => return Err(format!("unknown type {ty:?}")),
    };
    Ok(Sample {
        source_ts: source,
        server_ts: server,
        status,
        value,
    })
}

/// RFC 3339 UTC (`YYYY-MM-DDTHH:MM:SS[.f…]Z`, up to 7 fraction digits) or 100 ns ticks
/// since 1601, as OPC UA DateTime ticks.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let s = s.trim();
    if let Ok(ticks) = s.parse::<i64>() {
        return Ok(ticks);
    }
    let bad = || format!("time {s:?} (expected YYYY-MM-DDTHH:MM:SS[.fffffff]Z)");
    let s2 = s.strip_suffix('Z').ok_or_else(bad)?;
    let (date, time) = s2.split_once('T').ok_or_else(bad)?;
    let mut d = date.split('-');
    let num = |x: Option<&str>| -> Result<i64, String> {
        x.and_then(|v| v.parse::<i64>().ok()).ok_or_else(bad)
    };
    let (y, m, day) = (num(d.next())?, num(d.next())?, num(d.next())?);
    let (hms, frac) = match time.split_once('.') {
        Some((a, f)) => (a, f),
        None => (time, ""),
    };
    let mut t = hms.split(':');
    let (h, mi, sec) = (num(t.next())?, num(t.next())?, num(t.next())?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    if frac.len() > 7 || !frac.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let frac_ticks = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().map_err(|_| bad())? * 10i64.pow(7 - frac.len() as u32)
    };
    // Days since 1970 from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec;
    let unix_ticks = secs
        .checked_mul(10_000_000)
        .and_then(|x| x.checked_add(frac_ticks))
        .ok_or_else(bad)?;
    Ok(DateTime::from_unix_nanos(unix_ticks as i128 * 100).0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip_every_kind_of_value() {
        let values = [
            Variant::Double(21.5),
            Variant::Double(0.1 + 0.2),
            Variant::Float(-1.25),
            Variant::Int32(-7),
            Variant::UInt64(u64::MAX),
            Variant::Boolean(true),
            Variant::String(UaString::from("a \"quoted\", comma")),
            Variant::DateTime(DateTime(133_000_000_001_234_567)),
            Variant::array(
                uaring_core::BuiltinType::Int32,
                vec![Variant::Int32(1), Variant::Int32(2)],
            )
            .unwrap(),
            Variant::Empty,
        ];
        for v in values {
            let s = Sample {
                source_ts: 133_000_000_001_234_567,
                server_ts: 133_000_000_002_000_000,
                status: 0x0040_0000,
                value: v,
            };
            let line = row(&s);
            assert_eq!(parse_row(&line).unwrap(), s, "{line}");
        }
    }

    #[test]
    fn times_read_back_as_written() {
        let t = DateTime(133_456_789_012_345_678);
        assert_eq!(parse_time(&t.to_string()).unwrap(), t.0);
        assert_eq!(parse_time("2026-12-02T18:00:00Z").unwrap(), {
            parse_time("2026-12-02T18:00:00.0000000Z").unwrap()
        });
        assert!(parse_time("2026-13-02T18:00:00Z").is_err());
        assert!(parse_time("yesterday").is_err());
        assert_eq!(parse_time("42").unwrap(), 42);
    }
}
