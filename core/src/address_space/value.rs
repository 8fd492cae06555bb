//! Lock-free value cells for Variable values.
//!
//! A cell is shared by every shard (the address space is `Arc`-shared and read-only; the
//! cells inside are the only mutable part). Two representations:
//!
//! * [`ValueCell::Scalar`]: a seqlock over atomics for fixed-type scalars of at most 64 bits
//!   (Boolean … Double, DateTime, StatusCode). A read is one sequence load, four relaxed loads
//!   and a second sequence load: no allocation, no reference counting. Every field is an
//!   atomic, so a torn read is never undefined behaviour; it is detected by the sequence
//!   number and retried. Writers serialise by a compare-exchange on the sequence number; the
//!   write section is four relaxed stores (no syscalls, no allocation), so a reader or a
//!   concurrent writer waits at most that long unless the writing thread is preempted inside
//!   it.
//! * [`ValueCell::Any`]: an `ArcSwap<Versioned>` for everything else. Reads are lock-free,
//!   a write allocates one `Arc`.
//!
//! A Write on one shard is visible to the next Read on any other shard (release/acquire).
//! Every store gives the cell a larger version (the seqlock's sequence number, or the one in
//! the `Arc`), which the change path carries to exception-based monitored items
//! ([`super::change`]). Cells are written only through [`super::AddressSpace::store_value`]
//! and [`super::AddressSpace::update_value`], which hand each change to the shards that
//! watch the node.

use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::change::ChangeValue;
use crate::types::{BuiltinType, DataValue, DateTime, StatusCode, Variant};

/// A stored value and the cell version it was stored under.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    pub version: u64,
    pub value: DataValue,
}

/// Sentinel for "no timestamp" in the scalar cell.
const NO_TS: i64 = i64::MIN;

/// A Variable's value: stored in a cell, or computed at read time.
pub enum ValueCell {
    Scalar(ScalarCell),
    Any(ArcSwap<Versioned>),
}

impl std::fmt::Debug for ValueCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ValueCell({:?})", self.load())
    }
}

impl ValueCell {
    /// A cell holding `dv`. When `fixed` names the only type the cell will ever hold and it
    /// fits 64 bits (and `dv.value` is a scalar of that type), the seqlock representation is
    /// used; otherwise the `ArcSwap` one.
    pub fn new(dv: DataValue, fixed: Option<BuiltinType>) -> ValueCell {
        if let Some(t) = fixed {
            if ScalarCell::supports(t) && dv.value.scalar_type() == Some(t) {
                if let Some(c) = ScalarCell::new(t, &dv) {
                    return ValueCell::Scalar(c);
                }
            }
        }
        ValueCell::Any(ArcSwap::from_pointee(Versioned {
            version: 0,
            value: dv,
        }))
    }

    /// The current value.
    #[inline]
    pub fn load(&self) -> DataValue {
        match self {
            ValueCell::Scalar(c) => c.load(),
            ValueCell::Any(a) => DataValue::clone(&a.load().value),
        }
    }

    /// The current value and the version it was stored under.
    #[inline]
    pub fn load_versioned(&self) -> (DataValue, u64) {
        match self {
            ValueCell::Scalar(c) => c.load_seq(),
            ValueCell::Any(a) => {
                let g = a.load();
                (g.value.clone(), g.version)
            }
        }
    }

    /// The version of the current value.
    #[inline]
    pub fn version(&self) -> u64 {
        match self {
            ValueCell::Scalar(c) => c.load_seq().1,
            ValueCell::Any(a) => a.load().version,
        }
    }

    /// Calls `f` with the current value without cloning it (for sub-range reads of large arrays).
    pub fn with<R>(&self, f: impl FnOnce(&DataValue) -> R) -> R {
        match self {
            ValueCell::Scalar(c) => f(&c.load()),
            ValueCell::Any(a) => f(&a.load().value),
        }
    }

    /// The element type of a fixed-type scalar cell.
    pub fn fixed_type(&self) -> Option<BuiltinType> {
        match self {
            ValueCell::Scalar(c) => Some(c.value_type),
            ValueCell::Any(_) => None,
        }
    }

    /// Replaces the value; returns the new version and the change to hand to watchers.
    /// `None` (and nothing changed) when this is a fixed-type scalar cell and `dv.value` is
    /// not a scalar of that type; the caller type-checks first.
    #[inline]
    pub(crate) fn store_versioned(&self, dv: DataValue) -> Option<(u64, ChangeValue)> {
        match self {
            ValueCell::Scalar(c) => {
                let v = c.store(&dv)?;
                Some((v, ChangeValue::Inline(dv)))
            }
            ValueCell::Any(a) => {
                let mut value = dv;
                loop {
                    let cur = a.load_full();
                    let new = Arc::new(Versioned {
                        version: cur.version + 2,
                        value,
                    });
                    let prev = a.compare_and_swap(&cur, Arc::clone(&new));
                    if Arc::ptr_eq(&*prev, &cur) {
                        return Some((new.version, ChangeValue::Shared(new)));
                    }
                    drop(prev);
                    // Another writer came first: take the value back and retry on top of it.
                    value = match Arc::try_unwrap(new) {
                        Ok(v) => v.value,
                        Err(shared) => shared.value.clone(),
                    };
                }
            }
        }
    }

    /// Atomically applies `f` to the current value (read-modify-write, for IndexRange
    /// writes). `f` returns the new value or an error; it may be called more than once
    /// when writers race. Returns the new version and the change.
    pub(crate) fn update_versioned(
        &self,
        mut f: impl FnMut(&DataValue) -> Result<DataValue, StatusCode>,
    ) -> Result<(u64, ChangeValue), StatusCode> {
        match self {
            ValueCell::Scalar(c) => loop {
                let (cur, seq) = c.load_seq();
                let new = f(&cur)?;
                if c.store_if(seq, &new)? {
                    return Ok((seq + 2, ChangeValue::Inline(new)));
                }
            },
            ValueCell::Any(a) => loop {
                let cur = a.load_full();
                let value = f(&cur.value)?;
                let new = Arc::new(Versioned {
                    version: cur.version + 2,
                    value,
                });
                let prev = a.compare_and_swap(&cur, Arc::clone(&new));
                if Arc::ptr_eq(&*prev, &cur) {
                    return Ok((new.version, ChangeValue::Shared(new)));
                }
            },
        }
    }
}

/// The seqlock cell for fixed-type scalars of at most 64 bits.
pub struct ScalarCell {
    value_type: BuiltinType,
    /// Even: stable; odd: a write is in progress.
    seq: AtomicU64,
    bits: AtomicU64,
    status: AtomicU32,
    source_ts: AtomicI64,
    server_ts: AtomicI64,
}

impl ScalarCell {
    fn supports(t: BuiltinType) -> bool {
        use BuiltinType::*;
        matches!(
            t,
            Boolean
                | SByte
                | Byte
                | Int16
                | UInt16
                | Int32
                | UInt32
                | Int64
                | UInt64
                | Float
                | Double
                | DateTime
                | StatusCode
        )
    }

    fn to_bits(t: BuiltinType, v: &Variant) -> Option<u64> {
        Some(match (t, v) {
            (BuiltinType::Boolean, Variant::Boolean(x)) => *x as u64,
            (BuiltinType::SByte, Variant::SByte(x)) => *x as u8 as u64,
            (BuiltinType::Byte, Variant::Byte(x)) => *x as u64,
            (BuiltinType::Int16, Variant::Int16(x)) => *x as u16 as u64,
            (BuiltinType::UInt16, Variant::UInt16(x)) => *x as u64,
            (BuiltinType::Int32, Variant::Int32(x)) => *x as u32 as u64,
            (BuiltinType::UInt32, Variant::UInt32(x)) => *x as u64,
            (BuiltinType::Int64, Variant::Int64(x)) => *x as u64,
            (BuiltinType::UInt64, Variant::UInt64(x)) => *x,
            (BuiltinType::Float, Variant::Float(x)) => x.to_bits() as u64,
            (BuiltinType::Double, Variant::Double(x)) => x.to_bits(),
            (BuiltinType::DateTime, Variant::DateTime(x)) => x.0 as u64,
            (BuiltinType::StatusCode, Variant::StatusCode(x)) => x.0 as u64,
            _ => return None,
        })
    }

    fn from_bits(t: BuiltinType, b: u64) -> Variant {
        match t {
            BuiltinType::Boolean => Variant::Boolean(b != 0),
            BuiltinType::SByte => Variant::SByte(b as u8 as i8),
            BuiltinType::Byte => Variant::Byte(b as u8),
            BuiltinType::Int16 => Variant::Int16(b as u16 as i16),
            BuiltinType::UInt16 => Variant::UInt16(b as u16),
            BuiltinType::Int32 => Variant::Int32(b as u32 as i32),
            BuiltinType::UInt32 => Variant::UInt32(b as u32),
            BuiltinType::Int64 => Variant::Int64(b as i64),
            BuiltinType::UInt64 => Variant::UInt64(b),
            BuiltinType::Float => Variant::Float(f32::from_bits(b as u32)),
            BuiltinType::Double => Variant::Double(f64::from_bits(b)),
            BuiltinType::DateTime => Variant::DateTime(DateTime(b as i64)),
            BuiltinType::StatusCode => Variant::StatusCode(StatusCode(b as u32)),
            // `supports` admits only the types above.
            _ => Variant::Empty,
        }
    }

    fn new(t: BuiltinType, dv: &DataValue) -> Option<ScalarCell> {
        let bits = Self::to_bits(t, &dv.value)?;
        Some(ScalarCell {
            value_type: t,
            seq: AtomicU64::new(0),
            bits: AtomicU64::new(bits),
            status: AtomicU32::new(dv.status.map_or(0, |s| s.0)),
            source_ts: AtomicI64::new(dv.source_timestamp.map_or(NO_TS, |t| t.0)),
            server_ts: AtomicI64::new(dv.server_timestamp.map_or(NO_TS, |t| t.0)),
        })
    }

    /// The element type this cell holds.
    pub fn value_type(&self) -> BuiltinType {
        self.value_type
    }

    #[inline]
    fn load_seq(&self) -> (DataValue, u64) {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let bits = self.bits.load(Ordering::Relaxed);
            let status = self.status.load(Ordering::Relaxed);
            let src = self.source_ts.load(Ordering::Relaxed);
            let srv = self.server_ts.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let s2 = self.seq.load(Ordering::Relaxed);
            if s1 == s2 {
                let dv = DataValue {
                    value: Self::from_bits(self.value_type, bits),
                    status: (status != 0).then_some(StatusCode(status)),
                    source_timestamp: (src != NO_TS).then_some(DateTime(src)),
                    source_picoseconds: None,
                    server_timestamp: (srv != NO_TS).then_some(DateTime(srv)),
                    server_picoseconds: None,
                };
                return (dv, s1);
            }
            std::hint::spin_loop();
        }
    }

    #[inline]
    pub fn load(&self) -> DataValue {
        self.load_seq().0
    }

    /// The current value and its version.
    #[inline]
    pub fn load_versioned(&self) -> (DataValue, u64) {
        self.load_seq()
    }

    /// Writes when the sequence is still `expected` (even). `Ok(false)` when another write
    /// came first.
    fn store_if(&self, expected: u64, dv: &DataValue) -> Result<bool, StatusCode> {
        let bits = Self::to_bits(self.value_type, &dv.value).ok_or(StatusCode::BadTypeMismatch)?;
        if self
            .seq
            .compare_exchange(expected, expected + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Ok(false);
        }
        self.write_fields(bits, dv);
        self.seq.store(expected + 2, Ordering::Release);
        Ok(true)
    }

    #[inline]
    fn write_fields(&self, bits: u64, dv: &DataValue) {
        // The Release fence orders the odd sequence number before the data stores.
        fence(Ordering::Release);
        self.bits.store(bits, Ordering::Relaxed);
        self.status
            .store(dv.status.map_or(0, |s| s.0), Ordering::Relaxed);
        self.source_ts.store(
            dv.source_timestamp.map_or(NO_TS, |t| t.0),
            Ordering::Relaxed,
        );
        self.server_ts.store(
            dv.server_timestamp.map_or(NO_TS, |t| t.0),
            Ordering::Relaxed,
        );
    }

    /// Stores `dv`; the new version (sequence number), or `None` for a value of another type.
    #[inline]
    fn store(&self, dv: &DataValue) -> Option<u64> {
        let bits = Self::to_bits(self.value_type, &dv.value)?;
        loop {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                self.write_fields(bits, dv);
                self.seq.store(s + 2, Ordering::Release);
                return Some(s + 2);
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalar_roundtrip_every_type() {
        let vals = [
            Variant::Boolean(true),
            Variant::SByte(-5),
            Variant::Byte(200),
            Variant::Int16(-300),
            Variant::UInt16(60000),
            Variant::Int32(-7),
            Variant::UInt32(4_000_000_000),
            Variant::Int64(-1 << 40),
            Variant::UInt64(u64::MAX),
            Variant::Float(1.5),
            Variant::Double(-2.25),
            Variant::DateTime(DateTime(1234)),
            Variant::StatusCode(StatusCode::BadTypeMismatch),
        ];
        for v in vals {
            let t = v.scalar_type().unwrap();
            let dv = DataValue {
                value: v.clone(),
                source_timestamp: Some(DateTime(9)),
                ..Default::default()
            };
            let c = ValueCell::new(dv.clone(), Some(t));
            assert!(matches!(c, ValueCell::Scalar(_)), "{t:?}");
            assert_eq!(c.load(), dv);
            let dv2 = DataValue {
                value: v,
                status: Some(StatusCode::Uncertain),
                ..Default::default()
            };
            let v0 = c.version();
            let (v1, _) = c.store_versioned(dv2.clone()).unwrap();
            assert!(v1 > v0);
            assert_eq!(c.load_versioned(), (dv2, v1));
            assert!(c
                .store_versioned(DataValue::new(Variant::String("x".into())))
                .is_none());
        }
    }

    #[test]
    fn any_cell_update() {
        let c = ValueCell::new(DataValue::new(Variant::String("a".into())), None);
        let (v1, _) = c
            .update_versioned(|_| Ok(DataValue::new(Variant::String("b".into()))))
            .unwrap();
        assert_eq!(c.load().value, Variant::String("b".into()));
        assert_eq!(
            c.update_versioned(|_| Err(StatusCode::BadTypeMismatch))
                .err(),
            Some(StatusCode::BadTypeMismatch)
        );
        let (v2, change) = c
            .store_versioned(DataValue::new(Variant::String("c".into())))
            .unwrap();
        assert!(v2 > v1);
        assert_eq!(change.data_value().value, Variant::String("c".into()));
        assert_eq!(c.version(), v2);
        assert_eq!(c.load().value, Variant::String("c".into()));
    }

    #[test]
    fn concurrent_writers_and_readers_never_tear() {
        // Each write stores value v with source timestamp v: a reader must always see them equal.
        let c = Arc::new(ValueCell::new(
            DataValue {
                value: Variant::Int64(0),
                source_timestamp: Some(DateTime(0)),
                ..Default::default()
            },
            Some(BuiltinType::Int64),
        ));
        let mut hs = Vec::new();
        for w in 0..2i64 {
            let c = c.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..20_000i64 {
                    let v = i * 2 + w;
                    c.store_versioned(DataValue {
                        value: Variant::Int64(v),
                        source_timestamp: Some(DateTime(v)),
                        ..Default::default()
                    });
                }
            }));
        }
        for _ in 0..20_000 {
            let dv = c.load();
            match (dv.value, dv.source_timestamp) {
                (Variant::Int64(v), Some(DateTime(t))) => assert_eq!(v, t),
                other => panic!("{other:?}"),
            }
        }
        for h in hs {
            h.join().unwrap();
        }
    }
}
