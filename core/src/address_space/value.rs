//! Lock-free value cells for Variable values.
//!
//! A cell is shared by every shard and every version of the address space (the cells live
//! in a table of their own, [`super::store::CellTable`], which versions share; a node's
//! record names its cell). The cells are the only mutable part. One 48-byte cell, all
//! atomics, in one of these kinds:
//!
//! * **Scalar**: a seqlock over atomics for fixed-type scalars of at most 64 bits (Boolean …
//!   Double, DateTime, StatusCode). A read is one sequence load, four relaxed loads and a
//!   second sequence load: no allocation, no reference counting. Every field is an atomic,
//!   so a torn read is never undefined behaviour; it is detected by the sequence number and
//!   retried. Writers serialise by a compare-exchange on the sequence number; the write
//!   section is four relaxed stores (no syscalls, no allocation), so a reader or a
//!   concurrent writer waits at most that long unless the writing thread is preempted inside
//!   it.
//! * **Any**: an `ArcSwap<Versioned>` for everything else. Reads are lock-free, a write
//!   allocates one `Arc`.
//! * **Source**: a value computed at read time or answered later (the node's
//!   [`super::store::Source`]); the cell keeps the source's index and, for a computed value,
//!   its 64-bit state word.
//!
//! A Write on one shard is visible to the next Read on any other shard (release/acquire).
//! Every store gives the cell a larger version (the seqlock's sequence number, or the one in
//! the `Arc`), which the change path carries to exception-based monitored items
//! ([`super::change`]). Cells are written only through [`super::AddressSpace::store_value`]
//! and [`super::AddressSpace::update_value`], which hand each change to the shards that
//! watch the node.

use std::sync::atomic::{fence, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;

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

/// What a cell holds (the low four bits of its `meta`).
mod kind {
    pub const EMPTY: u32 = 0;
    pub const SCALAR: u32 = 1;
    pub const ANY: u32 = 2;
    pub const SOURCE: u32 = 3;
}

/// A Variable's value cell. See the module documentation.
#[derive(Default)]
pub struct ValueCell {
    /// Scalar: the seqlock's sequence (even: stable; odd: a write in progress). Every kind
    /// takes it while the cell is (re)initialised.
    seq: AtomicU64,
    /// Scalar: the value's bits. Source: the computed value's state word.
    bits: AtomicU64,
    source_ts: AtomicI64,
    server_ts: AtomicI64,
    /// Scalar: the status code. Source: the source's index.
    status: AtomicU32,
    /// The kind (bits 0–3) and, for a scalar, its built-in type (bits 4–9).
    meta: AtomicU32,
    /// Any: the value.
    any: ArcSwapOption<Versioned>,
}

impl std::fmt::Debug for ValueCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind() {
            kind::SCALAR | kind::ANY => write!(f, "ValueCell({:?})", self.load()),
            kind::SOURCE => write!(f, "ValueCell(source {})", self.source_index()),
            _ => f.write_str("ValueCell(empty)"),
        }
    }
}

impl ValueCell {
    /// A cell holding `dv`. When `fixed` names the only type the cell will ever hold and it
    /// fits 64 bits (and `dv.value` is a scalar of that type), the seqlock representation is
    /// used; otherwise the `ArcSwap` one.
    pub fn new(dv: DataValue, fixed: Option<BuiltinType>) -> ValueCell {
        let c = ValueCell::default();
        c.init_value(dv, fixed, 0);
        c
    }

    #[inline(always)]
    fn kind(&self) -> u32 {
        self.meta.load(Ordering::Relaxed) & 0xF
    }

    /// The built-in type id of a scalar cell.
    #[inline(always)]
    fn scalar_type(&self) -> u8 {
        ((self.meta.load(Ordering::Relaxed) >> 4) & 0x3F) as u8
    }

    /// Does the cell hold a stored value (scalar or any)?
    #[inline]
    pub fn stores(&self) -> bool {
        matches!(self.kind(), kind::SCALAR | kind::ANY)
    }

    /// Takes the sequence lock (for (re)initialising); the even sequence it had.
    fn lock(&self) -> u64 {
        loop {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                fence(Ordering::Release);
                return s;
            }
            std::hint::spin_loop();
        }
    }

    /// (Re)initialises the cell with a stored value (see [`ValueCell::new`]). The versions
    /// go on from the cell's last ones (`min_version` at least), so a change of the node
    /// that had the cell before is never newer than one of the new node.
    pub(crate) fn init_value(&self, dv: DataValue, fixed: Option<BuiltinType>, min_version: u64) {
        let s = self.lock();
        let scalar = fixed.filter(|&t| supports(t) && dv.value.scalar_type() == Some(t));
        // Only an Any cell holds a value behind its pointer (the kind changes only under
        // the lock): the others skip the pointer's load and store (each a walk of the
        // readers' debt slots, which a build of a million cells noticed).
        let was_any = self.kind() == kind::ANY;
        let any_version = if was_any {
            self.any.load().as_ref().map_or(0, |v| v.version)
        } else {
            0
        }
        .max(s)
        .max(min_version);
        match scalar.and_then(|t| Some((t, to_bits(t as u8, &dv.value)?))) {
            Some((t, bits)) => {
                self.write_fields(bits, &dv);
                if was_any {
                    self.any.store(None);
                }
                self.meta
                    .store(kind::SCALAR | ((t as u32) << 4), Ordering::Relaxed);
            }
            None => {
                self.any.store(Some(Arc::new(Versioned {
                    version: (any_version | 1) + 1,
                    value: dv,
                })));
                self.meta.store(kind::ANY, Ordering::Relaxed);
            }
        }
        let next = (s.max(min_version) | 1) + 1;
        self.seq.store(next, Ordering::Release);
    }

    /// (Re)initialises the cell for a value source: its index and state word.
    pub(crate) fn init_source(&self, source_index: u32, state: u64) {
        let s = self.lock();
        self.bits.store(state, Ordering::Relaxed);
        self.status.store(source_index, Ordering::Relaxed);
        if self.kind() == kind::ANY {
            self.any.store(None);
        }
        self.meta.store(kind::SOURCE, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
    }

    /// Empties the cell (its node was removed; it may be reused for another).
    pub(crate) fn clear(&self) {
        let s = self.lock();
        if self.kind() == kind::ANY {
            self.any.store(None);
        }
        self.meta.store(kind::EMPTY, Ordering::Relaxed);
        self.seq.store(s + 2, Ordering::Release);
    }

    /// A copy of this cell's value or source, for a definition ([`super::Node`]).
    pub(crate) fn copy_into(&self, other: &ValueCell) {
        match self.kind() {
            kind::SCALAR | kind::ANY => other.init_value(self.load(), self.fixed_type(), 0),
            kind::SOURCE => {
                other.init_source(self.source_index(), self.state().load(Ordering::Relaxed))
            }
            _ => other.clear(),
        }
    }

    /// The source's index (a Source cell).
    #[inline]
    pub(crate) fn source_index(&self) -> u32 {
        self.status.load(Ordering::Relaxed)
    }

    /// The state word of a computed value (a Source cell).
    #[inline]
    pub(crate) fn state(&self) -> &AtomicU64 {
        &self.bits
    }

    /// The current value (a Null value for a cell that stores none).
    #[inline]
    pub fn load(&self) -> DataValue {
        self.load_versioned().0
    }

    /// The current value and the version it was stored under.
    #[inline]
    pub fn load_versioned(&self) -> (DataValue, u64) {
        match self.kind() {
            kind::ANY => match &*self.any.load() {
                Some(g) => (g.value.clone(), g.version),
                None => (DataValue::default(), 0),
            },
            kind::SCALAR => self.load_seq(),
            _ => (DataValue::default(), 0),
        }
    }

    /// The version of the current value.
    #[inline]
    pub fn version(&self) -> u64 {
        self.load_versioned().1
    }

    /// Calls `f` with the current value without cloning it (for sub-range reads of large arrays).
    pub fn with<R>(&self, f: impl FnOnce(&DataValue) -> R) -> R {
        match self.kind() {
            kind::ANY => match &*self.any.load() {
                Some(g) => f(&g.value),
                None => f(&DataValue::default()),
            },
            kind::SCALAR => f(&self.load_seq().0),
            _ => f(&DataValue::default()),
        }
    }

    /// The element type of a fixed-type scalar cell.
    pub fn fixed_type(&self) -> Option<BuiltinType> {
        if self.kind() == kind::SCALAR {
            BuiltinType::from_id(self.scalar_type())
        } else {
            None
        }
    }

    /// Replaces the value; returns the new version and the change to hand to watchers.
    /// `None` (and nothing changed) when this is a fixed-type scalar cell and `dv.value` is
    /// not a scalar of that type, or the cell stores no value; the caller type-checks first.
    #[inline]
    pub(crate) fn store_versioned(&self, dv: DataValue) -> Option<(u64, ChangeValue)> {
        match self.kind() {
            kind::SCALAR => {
                let v = self.store(&dv)?;
                Some((v, ChangeValue::Inline(dv)))
            }
            kind::ANY => {
                let mut value = dv;
                loop {
                    let cur = self.any.load_full()?;
                    let new = Arc::new(Versioned {
                        version: cur.version + 2,
                        value,
                    });
                    let prev = self
                        .any
                        .compare_and_swap(&Some(cur.clone()), Some(Arc::clone(&new)));
                    if prev.as_ref().is_some_and(|p| Arc::ptr_eq(p, &cur)) {
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
            _ => None,
        }
    }

    /// Atomically applies `f` to the current value (read-modify-write, for IndexRange
    /// writes). `f` returns the new value or an error; it may be called more than once
    /// when writers race. Returns the new version and the change.
    pub(crate) fn update_versioned(
        &self,
        mut f: impl FnMut(&DataValue) -> Result<DataValue, StatusCode>,
    ) -> Result<(u64, ChangeValue), StatusCode> {
        match self.kind() {
            kind::SCALAR => loop {
                let (cur, seq) = self.load_seq();
                let new = f(&cur)?;
                if self.store_if(seq, &new)? {
                    return Ok((seq + 2, ChangeValue::Inline(new)));
                }
            },
            kind::ANY => loop {
                let cur = self.any.load_full().ok_or(StatusCode::BadNotWritable)?;
                let value = f(&cur.value)?;
                let new = Arc::new(Versioned {
                    version: cur.version + 2,
                    value,
                });
                let prev = self
                    .any
                    .compare_and_swap(&Some(cur.clone()), Some(Arc::clone(&new)));
                if prev.as_ref().is_some_and(|p| Arc::ptr_eq(p, &cur)) {
                    return Ok((new.version, ChangeValue::Shared(new)));
                }
            },
            _ => Err(StatusCode::BadNotWritable),
        }
    }

    #[inline]
    fn load_seq(&self) -> (DataValue, u64) {
        loop {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 != 0 {
                std::hint::spin_loop();
                continue;
            }
            let t = self.scalar_type();
            let bits = self.bits.load(Ordering::Relaxed);
            let status = self.status.load(Ordering::Relaxed);
            let src = self.source_ts.load(Ordering::Relaxed);
            let srv = self.server_ts.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            let s2 = self.seq.load(Ordering::Relaxed);
            if s1 == s2 {
                let dv = DataValue {
                    value: from_bits(t, bits),
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

    /// Writes when the sequence is still `expected` (even). `Ok(false)` when another write
    /// came first.
    fn store_if(&self, expected: u64, dv: &DataValue) -> Result<bool, StatusCode> {
        let bits = to_bits(self.scalar_type(), &dv.value).ok_or(StatusCode::BadTypeMismatch)?;
        if self
            .seq
            .compare_exchange(expected, expected + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Ok(false);
        }
        fence(Ordering::Release);
        self.write_fields(bits, dv);
        self.seq.store(expected + 2, Ordering::Release);
        Ok(true)
    }

    /// The data stores of a write (the caller holds the sequence lock and issued the
    /// Release fence that orders the odd sequence number before them).
    #[inline]
    fn write_fields(&self, bits: u64, dv: &DataValue) {
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
        let bits = to_bits(self.scalar_type(), &dv.value)?;
        loop {
            let s = self.seq.load(Ordering::Relaxed);
            if s & 1 == 0
                && self
                    .seq
                    .compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                fence(Ordering::Release);
                self.write_fields(bits, dv);
                self.seq.store(s + 2, Ordering::Release);
                return Some(s + 2);
            }
            std::hint::spin_loop();
        }
    }
}

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

/// The built-in type ids of the scalar cell's types.
mod id {
    pub const BOOLEAN: u8 = 1;
    pub const SBYTE: u8 = 2;
    pub const BYTE: u8 = 3;
    pub const INT16: u8 = 4;
    pub const UINT16: u8 = 5;
    pub const INT32: u8 = 6;
    pub const UINT32: u8 = 7;
    pub const INT64: u8 = 8;
    pub const UINT64: u8 = 9;
    pub const FLOAT: u8 = 10;
    pub const DOUBLE: u8 = 11;
    pub const DATE_TIME: u8 = 13;
    pub const STATUS_CODE: u8 = 19;
}

fn to_bits(t: u8, v: &Variant) -> Option<u64> {
    Some(match (t, v) {
        (id::BOOLEAN, Variant::Boolean(x)) => *x as u64,
        (id::SBYTE, Variant::SByte(x)) => *x as u8 as u64,
        (id::BYTE, Variant::Byte(x)) => *x as u64,
        (id::INT16, Variant::Int16(x)) => *x as u16 as u64,
        (id::UINT16, Variant::UInt16(x)) => *x as u64,
        (id::INT32, Variant::Int32(x)) => *x as u32 as u64,
        (id::UINT32, Variant::UInt32(x)) => *x as u64,
        (id::INT64, Variant::Int64(x)) => *x as u64,
        (id::UINT64, Variant::UInt64(x)) => *x,
        (id::FLOAT, Variant::Float(x)) => x.to_bits() as u64,
        (id::DOUBLE, Variant::Double(x)) => x.to_bits(),
        (id::DATE_TIME, Variant::DateTime(x)) => x.0 as u64,
        (id::STATUS_CODE, Variant::StatusCode(x)) => x.0 as u64,
        _ => return None,
    })
}

#[inline]
fn from_bits(t: u8, b: u64) -> Variant {
    match t {
        id::BOOLEAN => Variant::Boolean(b != 0),
        id::SBYTE => Variant::SByte(b as u8 as i8),
        id::BYTE => Variant::Byte(b as u8),
        id::INT16 => Variant::Int16(b as u16 as i16),
        id::UINT16 => Variant::UInt16(b as u16),
        id::INT32 => Variant::Int32(b as u32 as i32),
        id::UINT32 => Variant::UInt32(b as u32),
        id::INT64 => Variant::Int64(b as i64),
        id::UINT64 => Variant::UInt64(b),
        id::FLOAT => Variant::Float(f32::from_bits(b as u32)),
        id::DOUBLE => Variant::Double(f64::from_bits(b)),
        id::DATE_TIME => Variant::DateTime(DateTime(b as i64)),
        id::STATUS_CODE => Variant::StatusCode(StatusCode(b as u32)),
        // `supports` admits only the types above.
        _ => Variant::Empty,
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
            assert_eq!(c.fixed_type(), Some(t), "{t:?}");
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
