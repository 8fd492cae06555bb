//! One monitored item's pieces that do not depend on the engine: its queue (size, discard
//! policy, overflow bit) and its DataChangeFilter (trigger, absolute and percent deadband).

use std::collections::VecDeque;

use crate::generated::types::DataChangeTrigger;
use crate::types::{DataValue, DateTime, StatusCode, Variant};

/// InfoType "DataValue" (bit 10) plus the Overflow bit (bit 7) of a StatusCode (Part 4 §7.39).
pub const OVERFLOW_INFO_BITS: u32 = 0x0400 | 0x0080;

/// A queued notification of one item.
#[derive(Clone, Debug, PartialEq)]
pub enum Queued {
    /// A data change (timestamps already reduced to the item's TimestampsToReturn).
    Data(DataValue),
    /// An event: the selected fields, in select-clause order.
    Event(Vec<Variant>),
}

/// A bounded FIFO with the discard policy of Part 4 §5.12.1.5, behind one pointer that an
/// empty queue of one leaves null: a timed item whose entry is its source's sample holds
/// nothing here (the engine's `held`), and a queue of one that holds an entry keeps it in the
/// same allocation as its state.
#[derive(Debug, Default)]
pub struct ItemQueue {
    stored: Option<Box<Stored>>,
}

#[derive(Debug)]
enum Stored {
    /// A queue of one.
    One(Option<Queued>),
    /// A longer queue: its entries, size and discard policy.
    Many {
        q: VecDeque<Queued>,
        size: usize,
        discard_oldest: bool,
    },
}

impl ItemQueue {
    /// A queue of `size` (≥ 1) entries.
    pub fn new(size: u32, discard_oldest: bool) -> ItemQueue {
        let size = size.max(1) as usize;
        let stored = (size > 1).then(|| {
            Box::new(Stored::Many {
                q: VecDeque::with_capacity(size.min(16)),
                size,
                discard_oldest,
            })
        });
        ItemQueue { stored }
    }

    pub fn len(&self) -> usize {
        match self.stored.as_deref() {
            None => 0,
            Some(Stored::One(v)) => v.is_some() as usize,
            Some(Stored::Many { q, .. }) => q.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes size and policy; a smaller size discards per the (new) policy, without
    /// setting the overflow bit (Part 4 §5.12.3).
    pub fn resize(&mut self, size: u32, discard_oldest: bool) {
        let size = size.max(1) as usize;
        let mut q: VecDeque<Queued> = match self.stored.take().map(|b| *b) {
            None => VecDeque::new(),
            Some(Stored::One(v)) => v.into_iter().collect(),
            Some(Stored::Many { q, .. }) => q,
        };
        while q.len() > size {
            if discard_oldest {
                q.pop_front();
            } else {
                q.pop_back();
            }
        }
        self.stored = if size == 1 {
            q.pop_front().map(|v| Box::new(Stored::One(Some(v))))
        } else {
            Some(Box::new(Stored::Many {
                q,
                size,
                discard_oldest,
            }))
        };
    }

    /// Adds a notification; returns the values dropped (0 or 1). When full: a queue of one
    /// keeps the newest value (no overflow bit); a longer queue drops the oldest
    /// (discardOldest, the Overflow bit goes on the new oldest entry) or the newest queued
    /// one (the Overflow bit goes on the value that replaced it).
    #[inline]
    pub fn push(&mut self, v: Queued) -> u64 {
        let Some(stored) = self.stored.as_deref_mut() else {
            self.stored = Some(Box::new(Stored::One(Some(v))));
            return 0;
        };
        let (q, size, discard_oldest) = match stored {
            Stored::One(x) => return u64::from(x.replace(v).is_some()),
            Stored::Many {
                q,
                size,
                discard_oldest,
            } => (q, *size, *discard_oldest),
        };
        if q.len() < size {
            q.push_back(v);
            return 0;
        }
        if discard_oldest {
            q.pop_front();
            q.push_back(v);
            if let Some(Queued::Data(dv)) = q.front_mut() {
                set_overflow(dv);
            }
        } else {
            q.pop_back();
            q.push_back(v);
            if let Some(Queued::Data(dv)) = q.back_mut() {
                set_overflow(dv);
            }
        }
        1
    }

    /// Takes the oldest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<Queued> {
        match self.stored.as_deref_mut() {
            None => None,
            Some(Stored::One(v)) => v.take(),
            Some(Stored::Many { q, .. }) => q.pop_front(),
        }
    }

    pub fn clear(&mut self) {
        match self.stored.as_deref_mut() {
            None => {}
            Some(Stored::One(v)) => *v = None,
            Some(Stored::Many { q, .. }) => q.clear(),
        }
    }

    /// Empties a queue of one and gives its allocation back; returns the values dropped (0
    /// or 1). A longer queue is left alone (returns 0).
    pub fn release_single(&mut self) -> u64 {
        if let Some(Stored::One(v)) = self.stored.as_deref() {
            let dropped = u64::from(v.is_some());
            self.stored = None;
            return dropped;
        }
        0
    }

    /// The entry of a queue of one.
    pub fn single(&self) -> Option<&Queued> {
        match self.stored.as_deref() {
            Some(Stored::One(v)) => v.as_ref(),
            _ => None,
        }
    }

    /// Entries this queue holds at most.
    pub fn capacity(&self) -> usize {
        match self.stored.as_deref() {
            Some(Stored::Many { size, .. }) => *size,
            _ => 1,
        }
    }

    /// Sets the Overflow bit on the newest entry (values were dropped before they reached
    /// the queue); a queue of one carries no Overflow bit (Part 4 §5.12.1.5).
    pub fn mark_newest_overflow(&mut self) {
        if let Some(Stored::Many { q, .. }) = self.stored.as_deref_mut() {
            if let Some(Queued::Data(dv)) = q.back_mut() {
                set_overflow(dv);
            }
        }
    }
}

fn set_overflow(dv: &mut DataValue) {
    let s = dv.status.unwrap_or(StatusCode::Good);
    dv.status = Some(StatusCode(s.0 | OVERFLOW_INFO_BITS));
}

/// A validated DataChangeFilter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DataChangeSettings {
    pub trigger: DataChangeTrigger,
    /// Absolute deadband in the value's units (a percent deadband is converted with the
    /// node's EURange when the item is created); 0 = none.
    pub deadband: f64,
}

impl Default for DataChangeSettings {
    fn default() -> Self {
        DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 0.0,
        }
    }
}

impl DataChangeSettings {
    /// As [`DataChangeSettings::changed`], against a last sample kept compact, given how
    /// `new` differs from it (`diff`, from [`LastSample::diff`]): no DataValue is built.
    #[inline]
    pub fn changed_since(&self, last: &LastSample, diff: Diff, new: &DataValue) -> bool {
        if diff.0 & Diff::STATUS != 0 {
            return true;
        }
        if self.trigger == DataChangeTrigger::Status {
            return false;
        }
        // A value beyond the deadband differs (see `exceeds_deadband`): an equal one is
        // never reported, and only an unequal one needs the numbers.
        let value_changed = diff.0 & Diff::VALUE != 0
            && (self.deadband <= 0.0 || last.exceeds_deadband(&new.value, self.deadband));
        if value_changed {
            return true;
        }
        self.trigger == DataChangeTrigger::StatusValueTimestamp && diff.0 & Diff::SOURCE_TIME != 0
    }

    /// As [`DataChangeSettings::changed`], against a last sample kept compact.
    #[inline]
    pub fn changed_from(&self, last: &LastSample, new: &DataValue) -> bool {
        self.changed_since(last, last.diff(new), new)
    }

    /// Does `new` differ from `last` enough to be reported (Part 4 §7.22.2)?
    #[inline]
    pub fn changed(&self, last: &DataValue, new: &DataValue) -> bool {
        if last.status.unwrap_or(StatusCode::Good) != new.status.unwrap_or(StatusCode::Good) {
            return true;
        }
        if self.trigger == DataChangeTrigger::Status {
            return false;
        }
        let value_changed = if self.deadband > 0.0 {
            exceeds_deadband(&last.value, &new.value, self.deadband)
        } else {
            last.value != new.value
        };
        if value_changed {
            return true;
        }
        self.trigger == DataChangeTrigger::StatusValueTimestamp
            && last.source_timestamp != new.source_timestamp
    }
}

/// How a new sample differs from a [`LastSample`], worked out once per sample and read by
/// every filter of the items that compare against it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Diff(u8);

impl Diff {
    /// The status differs (a missing status is Good).
    const STATUS: u8 = 1;
    /// The value differs (as `Variant`'s `==`: a NaN differs from itself, -0.0 equals 0.0).
    const VALUE: u8 = 2;
    /// The SourceTimestamp differs (present or not, or its time).
    const SOURCE_TIME: u8 = 4;
    /// Something no filter reports differs: a status present against one missing (both
    /// Good), or the source picoseconds.
    const OTHER: u8 = 8;

    /// Equal for every DataChangeFilter: status, value and source timestamp (with its
    /// picoseconds) are the same; the server timestamp is not compared (it is the sampling
    /// time and always differs).
    #[inline]
    pub fn same(self) -> bool {
        self.0 == 0
    }

    /// The status or the value differs: a new run of equal status and value starts (what
    /// the default filter, StatusValue without deadband, reports).
    #[inline]
    pub fn status_or_value(self) -> bool {
        self.0 & (Diff::STATUS | Diff::VALUE) != 0
    }
}

/// A fixed-size scalar kept inline in a [`LastSample`] (its bits in a `u64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Empty,
    Boolean,
    SByte,
    Byte,
    Int16,
    UInt16,
    Int32,
    UInt32,
    Int64,
    UInt64,
    Float,
    Double,
    DateTime,
    StatusCode,
}

/// The kind and bits of a fixed-size scalar; `None` for anything else.
#[inline]
fn scalar_bits(v: &Variant) -> Option<(Kind, u64)> {
    Some(match *v {
        Variant::Empty => (Kind::Empty, 0),
        Variant::Boolean(x) => (Kind::Boolean, u64::from(x)),
        Variant::SByte(x) => (Kind::SByte, u64::from(x as u8)),
        Variant::Byte(x) => (Kind::Byte, u64::from(x)),
        Variant::Int16(x) => (Kind::Int16, u64::from(x as u16)),
        Variant::UInt16(x) => (Kind::UInt16, u64::from(x)),
        Variant::Int32(x) => (Kind::Int32, u64::from(x as u32)),
        Variant::UInt32(x) => (Kind::UInt32, u64::from(x)),
        Variant::Int64(x) => (Kind::Int64, x as u64),
        Variant::UInt64(x) => (Kind::UInt64, x),
        Variant::Float(x) => (Kind::Float, u64::from(x.to_bits())),
        Variant::Double(x) => (Kind::Double, x.to_bits()),
        Variant::DateTime(x) => (Kind::DateTime, x.0 as u64),
        Variant::StatusCode(x) => (Kind::StatusCode, u64::from(x.0)),
        _ => return None,
    })
}

/// The scalar back from its kind and bits.
fn scalar_variant(kind: Kind, bits: u64) -> Variant {
    match kind {
        Kind::Empty => Variant::Empty,
        Kind::Boolean => Variant::Boolean(bits != 0),
        Kind::SByte => Variant::SByte(bits as u8 as i8),
        Kind::Byte => Variant::Byte(bits as u8),
        Kind::Int16 => Variant::Int16(bits as u16 as i16),
        Kind::UInt16 => Variant::UInt16(bits as u16),
        Kind::Int32 => Variant::Int32(bits as u32 as i32),
        Kind::UInt32 => Variant::UInt32(bits as u32),
        Kind::Int64 => Variant::Int64(bits as i64),
        Kind::UInt64 => Variant::UInt64(bits),
        Kind::Float => Variant::Float(f32::from_bits(bits as u32)),
        Kind::Double => Variant::Double(f64::from_bits(bits)),
        Kind::DateTime => Variant::DateTime(DateTime(bits as i64)),
        Kind::StatusCode => Variant::StatusCode(StatusCode(bits as u32)),
    }
}

/// Two scalars of one kind equal as their `Variant`s are: floats as numbers (a NaN differs
/// from itself, -0.0 equals 0.0), everything else by its bits.
#[inline]
fn same_scalar(kind: Kind, a: u64, b: u64) -> bool {
    match kind {
        Kind::Float => f32::from_bits(a as u32) == f32::from_bits(b as u32),
        Kind::Double => f64::from_bits(a) == f64::from_bits(b),
        _ => a == b,
    }
}

/// A numeric scalar's value as f64, as [`numeric`].
fn scalar_numeric(kind: Kind, bits: u64) -> Option<f64> {
    Some(match kind {
        Kind::SByte => f64::from(bits as u8 as i8),
        Kind::Byte => f64::from(bits as u8),
        Kind::Int16 => f64::from(bits as u16 as i16),
        Kind::UInt16 => f64::from(bits as u16),
        Kind::Int32 => f64::from(bits as u32 as i32),
        Kind::UInt32 => f64::from(bits as u32),
        Kind::Int64 => bits as i64 as f64,
        Kind::UInt64 => bits as f64,
        Kind::Float => f64::from(f32::from_bits(bits as u32)),
        Kind::Double => f64::from_bits(bits),
        _ => return None,
    })
}

/// Which optional parts of a [`LastSample`] are present.
const HAS_STATUS: u8 = 1;
const HAS_SOURCE_TIME: u8 = 2;
const HAS_SERVER_TIME: u8 = 4;

/// The last sample of a source (or an item's own last value) in 32 bytes instead of a
/// `DataValue`'s 80: a fixed-size scalar inline with the status and the two timestamps;
/// any other value in a box of its own; a sample with picoseconds (rare) whole. Lossless:
/// [`LastSample::get`] gives back the `DataValue` stored. The sampling path compares a new
/// sample against it directly ([`LastSample::diff`]) and builds a `DataValue` only for a
/// notification.
#[derive(Clone, Debug)]
pub struct LastSample(Repr);

#[derive(Clone, Debug)]
enum Repr {
    /// A fixed-size scalar.
    Scalar {
        kind: Kind,
        flags: u8,
        status: u32,
        bits: u64,
        source: i64,
        server: i64,
    },
    /// Any other value (a string, an array, a structure …), without picoseconds.
    Boxed {
        flags: u8,
        status: u32,
        value: Box<Variant>,
        source: i64,
        server: i64,
    },
    /// A sample with source or server picoseconds.
    Full(Box<DataValue>),
}

const _: () = assert!(std::mem::size_of::<LastSample>() == 32);
const _: () = assert!(std::mem::size_of::<Option<LastSample>>() == 32);

/// Does `dv` carry picoseconds (then it is kept whole)?
#[inline]
fn has_picoseconds(dv: &DataValue) -> bool {
    dv.source_picoseconds.is_some() || dv.server_picoseconds.is_some()
}

/// The flags, status and timestamps of a sample without picoseconds.
#[inline]
fn meta(dv: &DataValue) -> (u8, u32, i64, i64) {
    let mut flags = 0;
    let status = dv.status.map_or(0, |s| {
        flags |= HAS_STATUS;
        s.0
    });
    let source = dv.source_timestamp.map_or(0, |t| {
        flags |= HAS_SOURCE_TIME;
        t.0
    });
    let server = dv.server_timestamp.map_or(0, |t| {
        flags |= HAS_SERVER_TIME;
        t.0
    });
    (flags, status, source, server)
}

/// The bits of [`Diff`] for status, source timestamp and source picoseconds.
#[inline]
fn meta_diff(
    status: Option<StatusCode>,
    source: Option<DateTime>,
    source_picoseconds: Option<u16>,
    new: &DataValue,
) -> u8 {
    let mut d = 0;
    if status.unwrap_or(StatusCode::Good) != new.status.unwrap_or(StatusCode::Good) {
        d |= Diff::STATUS;
    } else if status != new.status {
        d |= Diff::OTHER;
    }
    if source != new.source_timestamp {
        d |= Diff::SOURCE_TIME;
    }
    if source_picoseconds != new.source_picoseconds {
        d |= Diff::OTHER;
    }
    d
}

fn flagged<T>(flags: u8, bit: u8, v: T) -> Option<T> {
    (flags & bit != 0).then_some(v)
}

/// A new sample's fixed-size parts, worked out once per sample: compared against the last
/// sample ([`LastSample::diff_fresh`]) and stored as the next one
/// ([`LastSample::store_fresh`]) without reading the `DataValue` again. Empty for a sample
/// that is not a fixed-size scalar without picoseconds.
#[derive(Clone, Copy, Debug)]
pub struct Fresh(Option<Parts>);

#[derive(Clone, Copy, Debug)]
struct Parts {
    kind: Kind,
    flags: u8,
    /// 0 (Good) when missing.
    status: u32,
    bits: u64,
    /// 0 when missing.
    source: i64,
    server: i64,
}

impl Parts {
    /// The sample kept inline.
    #[inline]
    fn kept(self) -> Repr {
        Repr::Scalar {
            kind: self.kind,
            flags: self.flags,
            status: self.status,
            bits: self.bits,
            source: self.source,
            server: self.server,
        }
    }
}

impl Fresh {
    /// The fixed-size parts of `dv`.
    #[inline]
    pub fn of(dv: &DataValue) -> Fresh {
        if has_picoseconds(dv) {
            return Fresh(None);
        }
        Fresh(scalar_bits(&dv.value).map(|(kind, bits)| {
            let (flags, status, source, server) = meta(dv);
            Parts {
                kind,
                flags,
                status,
                bits,
                source,
                server,
            }
        }))
    }
}

impl LastSample {
    /// `dv`, kept compact.
    pub fn new(dv: DataValue) -> LastSample {
        match Fresh::of(&dv).0 {
            Some(p) => LastSample(p.kept()),
            None => LastSample(Self::boxed(dv)),
        }
    }

    /// A sample that is no fixed-size scalar without picoseconds: boxed, or whole.
    fn boxed(dv: DataValue) -> Repr {
        if has_picoseconds(&dv) {
            return Repr::Full(Box::new(dv));
        }
        let (flags, status, source, server) = meta(&dv);
        Repr::Boxed {
            flags,
            status,
            value: Box::new(dv.value),
            source,
            server,
        }
    }

    /// Replaces the sample kept with `dv`, reusing its box when both need one.
    #[inline]
    pub fn store(&mut self, dv: DataValue) {
        self.store_fresh(Fresh::of(&dv), dv);
    }

    /// The box of the sample kept when it is boxed (and `dv`, without picoseconds, needs
    /// one too), with `dv`'s status and timestamps set: the caller puts the value in.
    fn reuse_box(&mut self, dv: &DataValue) -> Option<&mut Variant> {
        if has_picoseconds(dv) {
            return None;
        }
        let Repr::Boxed {
            flags: f,
            status: s,
            value,
            source: t,
            server: u,
        } = &mut self.0
        else {
            return None;
        };
        (*f, *s, *t, *u) = meta(dv);
        Some(&mut **value)
    }

    /// Replaces the sample kept with a copy of `dv` (a fixed-size scalar is not cloned; a
    /// boxed value is cloned into the box kept).
    pub fn store_ref(&mut self, dv: &DataValue) {
        if let Some(p) = Fresh::of(dv).0 {
            self.0 = p.kept();
        } else if let Some(value) = self.reuse_box(dv) {
            value.clone_from(&dv.value);
        } else {
            match &mut self.0 {
                Repr::Full(b) if has_picoseconds(dv) => (**b).clone_from(dv),
                _ => *self = LastSample::new(dv.clone()),
            }
        }
    }

    /// The `DataValue` kept.
    pub fn get(&self) -> DataValue {
        match &self.0 {
            Repr::Scalar {
                kind,
                flags,
                status,
                bits,
                source,
                server,
            } => DataValue {
                value: scalar_variant(*kind, *bits),
                status: flagged(*flags, HAS_STATUS, StatusCode(*status)),
                source_timestamp: flagged(*flags, HAS_SOURCE_TIME, DateTime(*source)),
                source_picoseconds: None,
                server_timestamp: flagged(*flags, HAS_SERVER_TIME, DateTime(*server)),
                server_picoseconds: None,
            },
            Repr::Boxed {
                flags,
                status,
                value,
                source,
                server,
            } => DataValue {
                value: (**value).clone(),
                status: flagged(*flags, HAS_STATUS, StatusCode(*status)),
                source_timestamp: flagged(*flags, HAS_SOURCE_TIME, DateTime(*source)),
                source_picoseconds: None,
                server_timestamp: flagged(*flags, HAS_SERVER_TIME, DateTime(*server)),
                server_picoseconds: None,
            },
            Repr::Full(dv) => (**dv).clone(),
        }
    }

    /// The value kept.
    pub fn value(&self) -> Variant {
        match &self.0 {
            Repr::Scalar { kind, bits, .. } => scalar_variant(*kind, *bits),
            Repr::Boxed { value, .. } => (**value).clone(),
            Repr::Full(dv) => dv.value.clone(),
        }
    }

    /// As [`LastSample::diff`], given `new`'s fixed-size parts (`fresh`, from
    /// [`Fresh::of`]): a scalar against a scalar compares integers only.
    #[inline]
    pub fn diff_fresh(&self, fresh: &Fresh, new: &DataValue) -> Diff {
        let (
            Repr::Scalar {
                kind,
                flags,
                status,
                bits,
                source,
                ..
            },
            Some(b),
        ) = (&self.0, &fresh.0)
        else {
            return self.diff(new);
        };
        // A missing status is Good (0): the statuses kept compare as the filters do, and a
        // status present against one missing is another difference.
        let changed_flags = flags ^ b.flags;
        let mut d = if *status != b.status {
            Diff::STATUS
        } else if changed_flags & HAS_STATUS != 0 {
            Diff::OTHER
        } else {
            0
        };
        if changed_flags & HAS_SOURCE_TIME != 0 || *source != b.source {
            d |= Diff::SOURCE_TIME;
        }
        if *kind != b.kind || !same_scalar(b.kind, *bits, b.bits) {
            d |= Diff::VALUE;
        }
        Diff(d)
    }

    /// Replaces the sample kept with `dv`, whose fixed-size parts are `fresh` (from
    /// [`Fresh::of`]). The scalar case is inlined (out of line, the call took `dv`'s 80
    /// bytes as an argument: 36 instructions a sample); the others are not.
    #[inline(always)]
    pub fn store_fresh(&mut self, fresh: Fresh, dv: DataValue) {
        if let Some(p) = fresh.0 {
            self.0 = p.kept();
            // `dv` holds a fixed-size scalar (that is what gave `fresh` its parts): it owns
            // nothing to free, and its drop was an out-of-line call on every sample.
            debug_assert!(scalar_bits(&dv.value).is_some());
            std::mem::forget(dv);
        } else {
            self.store_other(dv);
        }
    }

    /// [`LastSample::store_fresh`] of a sample that is no fixed-size scalar without
    /// picoseconds.
    #[inline(never)]
    fn store_other(&mut self, dv: DataValue) {
        if let Some(value) = self.reuse_box(&dv) {
            *value = dv.value;
        } else {
            match &mut self.0 {
                Repr::Full(b) if has_picoseconds(&dv) => **b = dv,
                _ => self.0 = Self::boxed(dv),
            }
        }
    }

    /// How `new` differs from the sample kept.
    #[inline]
    pub fn diff(&self, new: &DataValue) -> Diff {
        match &self.0 {
            Repr::Scalar {
                kind,
                flags,
                status,
                bits,
                source,
                ..
            } => {
                let same_value = match scalar_bits(&new.value) {
                    Some((k, b)) => k == *kind && same_scalar(k, *bits, b),
                    None => false,
                };
                let d = meta_diff(
                    flagged(*flags, HAS_STATUS, StatusCode(*status)),
                    flagged(*flags, HAS_SOURCE_TIME, DateTime(*source)),
                    None,
                    new,
                );
                Diff(d | if same_value { 0 } else { Diff::VALUE })
            }
            Repr::Boxed {
                flags,
                status,
                value,
                source,
                ..
            } => {
                let d = meta_diff(
                    flagged(*flags, HAS_STATUS, StatusCode(*status)),
                    flagged(*flags, HAS_SOURCE_TIME, DateTime(*source)),
                    None,
                    new,
                );
                Diff(d | if **value == new.value { 0 } else { Diff::VALUE })
            }
            Repr::Full(dv) => {
                let d = meta_diff(dv.status, dv.source_timestamp, dv.source_picoseconds, new);
                Diff(
                    d | if dv.value == new.value {
                        0
                    } else {
                        Diff::VALUE
                    },
                )
            }
        }
    }

    /// Does `new` differ from the value kept by more than `deadband` (see
    /// `exceeds_deadband`)?
    fn exceeds_deadband(&self, new: &Variant, deadband: f64) -> bool {
        match &self.0 {
            Repr::Scalar { kind, bits, .. } => match (scalar_numeric(*kind, *bits), numeric(new)) {
                (Some(x), Some(y)) => (x - y).abs() > deadband,
                _ => !matches!(scalar_bits(new),
                        Some((k, b)) if k == *kind && same_scalar(k, *bits, b)),
            },
            Repr::Boxed { value, .. } => exceeds_deadband(value, new, deadband),
            Repr::Full(dv) => exceeds_deadband(&dv.value, new, deadband),
        }
    }
}

/// The value of a numeric scalar as f64.
pub fn numeric(v: &Variant) -> Option<f64> {
    Some(match v {
        Variant::SByte(x) => *x as f64,
        Variant::Byte(x) => *x as f64,
        Variant::Int16(x) => *x as f64,
        Variant::UInt16(x) => *x as f64,
        Variant::Int32(x) => *x as f64,
        Variant::UInt32(x) => *x as f64,
        Variant::Int64(x) => *x as f64,
        Variant::UInt64(x) => *x as f64,
        Variant::Float(x) => *x as f64,
        Variant::Double(x) => *x,
        _ => return None,
    })
}

/// Is the value numeric (a numeric scalar, or an array of them)? Deadbands apply only there.
pub fn is_numeric(v: &Variant) -> bool {
    match v {
        Variant::Array(a) => a.values.iter().all(|e| numeric(e).is_some()),
        other => numeric(other).is_some(),
    }
}

/// Part 4 §7.22.2: a change is reported when |last − new| > deadband; for arrays, when
/// any element exceeds it (or the shape changed). Non-numeric values compare exactly.
fn exceeds_deadband(last: &Variant, new: &Variant, deadband: f64) -> bool {
    match (last, new) {
        (Variant::Array(a), Variant::Array(b)) => {
            a.values.len() != b.values.len()
                || a.dimensions != b.dimensions
                || a.values
                    .iter()
                    .zip(&b.values)
                    .any(|(x, y)| exceeds_deadband(x, y, deadband))
        }
        _ => match (numeric(last), numeric(new)) {
            (Some(x), Some(y)) => (x - y).abs() > deadband,
            _ => last != new,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dv(v: i32) -> Queued {
        Queued::Data(DataValue::new(Variant::Int32(v)))
    }
    fn status(q: &Queued) -> u32 {
        match q {
            Queued::Data(d) => d.status.unwrap_or(StatusCode::Good).0,
            Queued::Event(_) => 0,
        }
    }

    #[test]
    fn queue_of_one_keeps_newest_without_overflow() {
        let mut q = ItemQueue::new(1, true);
        q.push(dv(1));
        q.push(dv(2));
        assert_eq!(q.len(), 1);
        let v = q.pop().unwrap();
        assert_eq!(v, dv(2));
        assert_eq!(status(&v), 0);
    }

    #[test]
    fn discard_oldest_marks_the_new_oldest() {
        let mut q = ItemQueue::new(3, true);
        for i in 1..=5 {
            q.push(dv(i));
        }
        let got: Vec<Queued> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(got.len(), 3);
        assert!(matches!(&got[0], Queued::Data(d) if d.value == Variant::Int32(3)));
        assert_eq!(status(&got[0]), OVERFLOW_INFO_BITS);
        assert_eq!(status(&got[1]), 0);
        assert_eq!(status(&got[2]), 0);
    }

    #[test]
    fn discard_newest_replaces_the_last_and_marks_it() {
        let mut q = ItemQueue::new(3, false);
        for i in 1..=5 {
            q.push(dv(i));
        }
        let got: Vec<Queued> = std::iter::from_fn(|| q.pop()).collect();
        let vals: Vec<Variant> = got
            .iter()
            .map(|g| match g {
                Queued::Data(d) => d.value.clone(),
                _ => Variant::Empty,
            })
            .collect();
        assert_eq!(
            vals,
            vec![Variant::Int32(1), Variant::Int32(2), Variant::Int32(5)]
        );
        assert_eq!(status(&got[2]), OVERFLOW_INFO_BITS);
        assert_eq!(status(&got[0]), 0);
    }

    #[test]
    fn resize_between_one_and_many_keeps_entries() {
        let mut q = ItemQueue::new(1, true);
        q.push(dv(1));
        q.resize(3, true);
        q.push(dv(2));
        assert_eq!(q.len(), 2);
        q.resize(1, true);
        assert_eq!(q.len(), 1);
        assert_eq!(q.pop(), Some(dv(2)), "discardOldest keeps the newest");
        assert!(q.is_empty());
    }

    #[test]
    fn triggers_and_deadband() {
        let a = DataValue::new(Variant::Double(10.0));
        let b = DataValue::new(Variant::Double(10.4));
        let abs = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 0.5,
        };
        assert!(!abs.changed(&a, &b));
        assert!(abs.changed(&a, &DataValue::new(Variant::Double(10.6))));
        let none = DataChangeSettings::default();
        assert!(none.changed(&a, &b));
        let status_only = DataChangeSettings {
            trigger: DataChangeTrigger::Status,
            deadband: 0.0,
        };
        assert!(!status_only.changed(&a, &b));
        let bad = DataValue {
            status: Some(StatusCode::BadNoCommunication),
            ..a.clone()
        };
        assert!(status_only.changed(&a, &bad));
        let mut c = a.clone();
        c.source_timestamp = Some(crate::types::DateTime(5));
        assert!(!none.changed(&a, &c));
        let svt = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValueTimestamp,
            deadband: 0.0,
        };
        assert!(svt.changed(&a, &c));
        let arr = |v: &[f64]| {
            Variant::array(
                crate::types::BuiltinType::Double,
                v.iter().map(|x| Variant::Double(*x)).collect(),
            )
            .unwrap()
        };
        assert!(!exceeds_deadband(&arr(&[1.0, 2.0]), &arr(&[1.2, 2.2]), 0.5));
        assert!(exceeds_deadband(&arr(&[1.0, 2.0]), &arr(&[1.2, 2.9]), 0.5));
        assert!(exceeds_deadband(&arr(&[1.0]), &arr(&[1.0, 2.0]), 0.5));
    }

    // ---- the compact last sample ---------------------------------------------------------

    use crate::types::{BuiltinType, UaString};

    /// What the sampling path compared before the compact form: equal for every filter.
    fn same_sample(a: &DataValue, b: &DataValue) -> bool {
        a.status == b.status
            && a.source_timestamp == b.source_timestamp
            && a.source_picoseconds == b.source_picoseconds
            && a.value == b.value
    }

    /// Identical, NaNs and signed zeros included (`==` says a NaN is not itself).
    fn identical(a: &DataValue, b: &DataValue) -> bool {
        format!("{a:?}") == format!("{b:?}")
    }

    fn doubles(v: &[f64]) -> Variant {
        Variant::array(
            BuiltinType::Double,
            v.iter().map(|x| Variant::Double(*x)).collect(),
        )
        .unwrap()
    }

    fn values() -> Vec<Variant> {
        vec![
            Variant::Empty,
            Variant::Boolean(false),
            Variant::Boolean(true),
            Variant::SByte(-1),
            Variant::Byte(255),
            Variant::Int16(-2),
            Variant::UInt16(65535),
            Variant::Int32(5),
            Variant::Int32(6),
            Variant::Int32(-5),
            Variant::UInt32(5),
            Variant::Int64(i64::MIN),
            Variant::UInt64(u64::MAX),
            Variant::UInt64(5),
            Variant::Float(1.5),
            Variant::Float(f32::NAN),
            Variant::Float(-0.0),
            Variant::Float(0.0),
            Variant::Double(10.0),
            Variant::Double(10.4),
            Variant::Double(11.0),
            Variant::Double(f64::NAN),
            Variant::Double(-0.0),
            Variant::Double(0.0),
            Variant::Double(f64::INFINITY),
            Variant::DateTime(DateTime(5)),
            Variant::StatusCode(StatusCode::BadNoCommunication),
            Variant::String(UaString::from("a")),
            Variant::String(UaString::from("b")),
            doubles(&[1.0, 2.0]),
            doubles(&[1.2, 2.2]),
            doubles(&[1.0, 2.0, 3.0]),
            doubles(&[f64::NAN]),
        ]
    }

    /// (status, source time, source picoseconds, server time, server picoseconds).
    type Meta = (
        Option<StatusCode>,
        Option<i64>,
        Option<u16>,
        Option<i64>,
        Option<u16>,
    );

    fn metas() -> Vec<Meta> {
        let bad = Some(StatusCode::BadNoCommunication);
        let good = Some(StatusCode::Good);
        vec![
            (None, None, None, None, None),
            (good, None, None, None, None),
            (bad, None, None, None, None),
            (None, Some(1), None, Some(9), None),
            (None, Some(2), None, Some(9), None),
            (None, Some(1), None, Some(10), None),
            (None, Some(1), Some(3), Some(9), None),
            (None, Some(1), None, Some(9), Some(4)),
            (bad, Some(1), None, Some(9), None),
        ]
    }

    fn with(value: &Variant, m: Meta) -> DataValue {
        DataValue {
            value: value.clone(),
            status: m.0,
            source_timestamp: m.1.map(DateTime),
            source_picoseconds: m.2,
            server_timestamp: m.3.map(DateTime),
            server_picoseconds: m.4,
        }
    }

    fn samples() -> Vec<DataValue> {
        let mut out = Vec::new();
        for v in values() {
            for m in metas() {
                out.push(with(&v, m));
            }
        }
        out
    }

    fn filters() -> Vec<DataChangeSettings> {
        let mut out = Vec::new();
        for trigger in [
            DataChangeTrigger::Status,
            DataChangeTrigger::StatusValue,
            DataChangeTrigger::StatusValueTimestamp,
        ] {
            for deadband in [0.0, 0.3, 0.5, 2.0] {
                out.push(DataChangeSettings { trigger, deadband });
            }
        }
        out
    }

    fn compact(dv: &DataValue) -> LastSample {
        LastSample::new(dv.clone())
    }

    #[test]
    fn compact_sample_is_32_bytes_and_lossless() {
        assert_eq!(std::mem::size_of::<LastSample>(), 32);
        assert_eq!(std::mem::size_of::<Option<LastSample>>(), 32);
        for a in samples() {
            assert!(identical(&compact(&a).get(), &a), "{a:?}");
            assert!(identical(
                &DataValue {
                    value: compact(&a).value(),
                    ..a.clone()
                },
                &a
            ));
        }
    }

    /// Every filter (each trigger, with and without deadband) decides against the compact
    /// form exactly as against the DataValue, and the fan-out check (`same`) is the old
    /// comparison (and the sampling path's scalar fast path, `diff_fresh`, the same as
    /// `diff`), for every pair of a matrix of values (scalars of each kind, NaN, signed
    /// zeros, strings, arrays) and statuses and timestamps (with picoseconds or not).
    #[test]
    fn compact_comparison_agrees_with_the_data_value_one() {
        let all = samples();
        let filters = filters();
        for a in &all {
            let last = compact(a);
            for b in &all {
                let d = last.diff(b);
                assert_eq!(
                    last.diff_fresh(&Fresh::of(b), b),
                    d,
                    "fast path: {a:?} -> {b:?}"
                );
                assert_eq!(d.same(), same_sample(a, b), "{a:?} -> {b:?}");
                assert_eq!(
                    d.status_or_value(),
                    DataChangeSettings::default().changed(a, b),
                    "{a:?} -> {b:?}"
                );
                for f in &filters {
                    assert_eq!(
                        f.changed_from(&last, b),
                        f.changed(a, b),
                        "{f:?}: {a:?} -> {b:?}"
                    );
                }
            }
        }
    }

    /// Storing over a kept sample (scalar, boxed and whole in every order, by value, by
    /// reference and from its fixed-size parts, reusing the box) keeps exactly the new one.
    #[test]
    fn store_replaces_whatever_was_kept() {
        let all = samples();
        for a in all.iter().step_by(7) {
            for b in &all {
                let mut x = compact(a);
                x.store(b.clone());
                assert!(identical(&x.get(), b), "{a:?} then {b:?}");
                let mut y = compact(a);
                y.store_ref(b);
                assert!(identical(&y.get(), b), "{a:?} then {b:?} (by reference)");
                let mut z = compact(a);
                z.store_fresh(Fresh::of(b), b.clone());
                assert!(identical(&z.get(), b), "{a:?} then {b:?} (fresh)");
            }
        }
    }

    fn dbl(v: f64) -> DataValue {
        DataValue::new(Variant::Double(v))
    }

    const STATUS: DataChangeSettings = DataChangeSettings {
        trigger: DataChangeTrigger::Status,
        deadband: 0.0,
    };
    const STATUS_VALUE: DataChangeSettings = DataChangeSettings {
        trigger: DataChangeTrigger::StatusValue,
        deadband: 0.0,
    };
    const STATUS_VALUE_TIMESTAMP: DataChangeSettings = DataChangeSettings {
        trigger: DataChangeTrigger::StatusValueTimestamp,
        deadband: 0.0,
    };

    #[test]
    fn compact_triggers() {
        let last = compact(&dbl(10.0));
        let other = dbl(10.4);
        assert!(!STATUS.changed_from(&last, &other));
        assert!(STATUS_VALUE.changed_from(&last, &other));
        assert!(STATUS_VALUE_TIMESTAMP.changed_from(&last, &other));
        assert!(!STATUS_VALUE.changed_from(&last, &dbl(10.0)));
        assert!(!STATUS_VALUE_TIMESTAMP.changed_from(&last, &dbl(10.0)));
        assert!(last.diff(&dbl(10.0)).same());
    }

    #[test]
    fn compact_status_only_change() {
        let last = compact(&dbl(1.0));
        let bad = DataValue {
            status: Some(StatusCode::BadNoCommunication),
            ..dbl(1.0)
        };
        for f in [STATUS, STATUS_VALUE, STATUS_VALUE_TIMESTAMP] {
            assert!(f.changed_from(&last, &bad), "{f:?}");
        }
        let d = last.diff(&bad);
        assert!(!d.same() && d.status_or_value());
        // Good given or left out is the same status for every filter, but not the same
        // sample (it is fanned out; nobody reports it).
        let good = DataValue {
            status: Some(StatusCode::Good),
            ..dbl(1.0)
        };
        for f in [STATUS, STATUS_VALUE, STATUS_VALUE_TIMESTAMP] {
            assert!(!f.changed_from(&last, &good), "{f:?}");
        }
        assert!(!last.diff(&good).same());
        // Back to Good from Bad.
        assert!(STATUS.changed_from(&compact(&bad), &dbl(1.0)));
    }

    #[test]
    fn compact_timestamp_only_change() {
        let at = |source: i64, server: i64| DataValue {
            source_timestamp: Some(DateTime(source)),
            server_timestamp: Some(DateTime(server)),
            ..dbl(1.0)
        };
        let last = compact(&at(100, 100));
        // A new source timestamp: StatusValueTimestamp only.
        let later = at(200, 200);
        assert!(STATUS_VALUE_TIMESTAMP.changed_from(&last, &later));
        assert!(!STATUS_VALUE.changed_from(&last, &later));
        assert!(!STATUS.changed_from(&last, &later));
        assert!(!last.diff(&later).same() && !last.diff(&later).status_or_value());
        // A new server timestamp alone (the sampling time): the same sample.
        let resampled = at(100, 300);
        assert!(last.diff(&resampled).same());
        assert!(!STATUS_VALUE_TIMESTAMP.changed_from(&last, &resampled));
        // New source picoseconds alone: not the same sample, but no trigger reports them.
        let pico = DataValue {
            source_picoseconds: Some(5),
            ..at(100, 100)
        };
        assert!(!last.diff(&pico).same());
        assert!(!STATUS_VALUE_TIMESTAMP.changed_from(&last, &pico));
        // A source timestamp that appears.
        assert!(STATUS_VALUE_TIMESTAMP.changed_from(&compact(&dbl(1.0)), &at(100, 100)));
    }

    #[test]
    fn compact_deadband_absolute_and_percent() {
        let abs = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 0.5,
        };
        let last = compact(&dbl(10.0));
        assert!(!abs.changed_from(&last, &dbl(10.4)));
        assert!(
            !abs.changed_from(&last, &dbl(10.5)),
            "exactly the deadband is not beyond it"
        );
        assert!(abs.changed_from(&last, &dbl(10.6)));
        assert!(abs.changed_from(&last, &dbl(9.4)));
        // Integers and a change of type compare as numbers.
        let int = compact(&DataValue::new(Variant::Int32(10)));
        assert!(!abs.changed_from(&int, &DataValue::new(Variant::Int32(10))));
        assert!(abs.changed_from(&int, &DataValue::new(Variant::Int32(11))));
        assert!(!abs.changed_from(&int, &dbl(10.2)));
        // A percent deadband is made absolute when the item is created: 10 % of an EURange
        // of 0..200 is 20.
        let (lo, hi) = (0.0f64, 200.0f64);
        let pct = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 10.0 / 100.0 * (hi - lo).abs(),
        };
        let last = compact(&dbl(100.0));
        assert!(!pct.changed_from(&last, &dbl(119.0)));
        assert!(pct.changed_from(&last, &dbl(121.0)));
        assert!(pct.changed_from(&last, &dbl(79.0)));
        // A status change is reported whatever the deadband.
        let bad = DataValue {
            status: Some(StatusCode::BadSensorFailure),
            ..dbl(100.0)
        };
        assert!(pct.changed_from(&last, &bad));
        // StatusValueTimestamp with a deadband: a new source timestamp still reports.
        let svt = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValueTimestamp,
            deadband: 20.0,
        };
        let stamped = DataValue {
            source_timestamp: Some(DateTime(7)),
            ..dbl(101.0)
        };
        assert!(svt.changed_from(&last, &stamped));
    }

    #[test]
    fn compact_spilled_values() {
        // A string: boxed, compared as a Variant.
        let s = |x: &str| DataValue::new(Variant::String(UaString::from(x)));
        let last = compact(&s("on"));
        assert!(last.diff(&s("on")).same());
        assert!(STATUS_VALUE.changed_from(&last, &s("off")));
        assert!(
            STATUS_VALUE.changed_from(&last, &dbl(1.0)),
            "a string, then a number"
        );
        // An array with a deadband: any element beyond it, or another length.
        let a = |v: &[f64]| DataValue::new(doubles(v));
        let db = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 0.5,
        };
        let last = compact(&a(&[1.0, 2.0]));
        assert!(!db.changed_from(&last, &a(&[1.2, 2.2])));
        assert!(db.changed_from(&last, &a(&[1.2, 2.9])));
        assert!(db.changed_from(&last, &a(&[1.0, 2.0, 3.0])));
        assert!(db.changed_from(&last, &dbl(1.0)), "an array, then a scalar");
        // A sample with picoseconds: kept whole, compared the same way.
        let pico = DataValue {
            source_timestamp: Some(DateTime(1)),
            source_picoseconds: Some(7),
            server_picoseconds: Some(9),
            ..dbl(3.0)
        };
        let last = compact(&pico);
        assert!(identical(&last.get(), &pico));
        assert!(last.diff(&pico).same());
        assert!(STATUS_VALUE.changed_from(&last, &dbl(4.0)));
        assert!(!db.changed_from(&last, &dbl(3.4)));
        // Box reuse: a boxed value stored over a boxed one, then a scalar over it.
        let mut kept = compact(&s("x"));
        kept.store(s("y"));
        assert!(identical(&kept.get(), &s("y")));
        kept.store(dbl(2.0));
        assert!(identical(&kept.get(), &dbl(2.0)));
    }

    #[test]
    fn compact_nan() {
        // As `Variant`'s `==`: a NaN is not equal to itself, so every NaN sample is a new
        // value for StatusValue (and fanned out); -0.0 and 0.0 are equal.
        let last = compact(&dbl(f64::NAN));
        assert!(STATUS_VALUE.changed_from(&last, &dbl(f64::NAN)));
        assert!(!last.diff(&dbl(f64::NAN)).same());
        assert!(!STATUS.changed_from(&last, &dbl(f64::NAN)));
        assert!(STATUS_VALUE.changed_from(&last, &dbl(1.0)));
        assert!(STATUS_VALUE.changed_from(&compact(&dbl(1.0)), &dbl(f64::NAN)));
        assert!(!STATUS_VALUE.changed_from(&compact(&dbl(-0.0)), &dbl(0.0)));
        let f = compact(&DataValue::new(Variant::Float(f32::NAN)));
        assert!(STATUS_VALUE.changed_from(&f, &DataValue::new(Variant::Float(f32::NAN))));
        // With a deadband, |NaN - x| is never beyond it: not reported.
        let db = DataChangeSettings {
            trigger: DataChangeTrigger::StatusValue,
            deadband: 0.5,
        };
        assert!(!db.changed_from(&last, &dbl(5.0)));
        assert!(!db.changed_from(&compact(&dbl(5.0)), &dbl(f64::NAN)));
        // The NaN is kept as it came (its bits).
        let odd = f64::from_bits(0x7ff8_0000_0000_0001);
        match compact(&dbl(odd)).get().value {
            Variant::Double(x) => assert_eq!(x.to_bits(), odd.to_bits()),
            other => panic!("{other:?}"),
        }
    }
}
