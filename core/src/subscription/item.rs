//! One monitored item's pieces that do not depend on the engine: its queue (size, discard
//! policy, overflow bit) and its DataChangeFilter (trigger, absolute and percent deadband).

use std::collections::VecDeque;

use crate::generated::types::DataChangeTrigger;
use crate::types::{DataValue, StatusCode, Variant};

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
}
