//! The interval context of the Aggregate engine: the raw values read as numbers, the bounding
//! values of Part 13 §3.1.8 (Interpolated) and §3.1.9 (Simple), the end of the data, the Partial bit
//! (§5.3), the quality of an interval from its share of Bad data (§5.4.3.2), and the dispatch of
//! each interval to its Aggregate.

use super::raw_values::Spread;
use super::regions::{Duration, Scale};
use super::{bits, Aggregate, AggregateConfig};
use crate::{DataValue, DateTime, StatusCode, Variant};

/// A number read from a raw value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Num {
    /// No value (Bad raw values have their value treated as null, §3.1.7).
    Null,
    Val(f64),
    /// A value no arithmetic applies to.
    NotNumeric,
}

pub(super) fn num(v: &Variant) -> Num {
    match v {
        Variant::Empty => Num::Null,
        Variant::Boolean(b) => Num::Val(if *b { 1.0 } else { 0.0 }),
        Variant::SByte(x) => Num::Val(f64::from(*x)),
        Variant::Byte(x) => Num::Val(f64::from(*x)),
        Variant::Int16(x) => Num::Val(f64::from(*x)),
        Variant::UInt16(x) => Num::Val(f64::from(*x)),
        Variant::Int32(x) => Num::Val(f64::from(*x)),
        Variant::UInt32(x) => Num::Val(f64::from(*x)),
        Variant::Int64(x) => Num::Val(*x as f64),
        Variant::UInt64(x) => Num::Val(*x as f64),
        Variant::Float(x) => finite(f64::from(*x)),
        Variant::Double(x) => finite(*x),
        _ => Num::NotNumeric,
    }
}

/// NaN and the infinities take part in no arithmetic: they are invalid inputs.
pub(super) fn finite(x: f64) -> Num {
    if x.is_finite() {
        Num::Val(x)
    } else {
        Num::NotNumeric
    }
}

/// `x` in the built-in type of `like` ("Data Type: Same as Source"): Float stays Float, integers
/// are rounded and saturated, Boolean is `x != 0`; anything else becomes Double.
pub(super) fn same_type_as(like: &Variant, x: f64) -> Variant {
    match like {
        Variant::Float(_) => Variant::Float(x as f32),
        Variant::Boolean(_) => Variant::Boolean(x != 0.0),
        Variant::SByte(_) => Variant::SByte(x.round() as i8),
        Variant::Byte(_) => Variant::Byte(x.round() as u8),
        Variant::Int16(_) => Variant::Int16(x.round() as i16),
        Variant::UInt16(_) => Variant::UInt16(x.round() as u16),
        Variant::Int32(_) => Variant::Int32(x.round() as i32),
        Variant::UInt32(_) => Variant::UInt32(x.round() as u32),
        Variant::Int64(_) => Variant::Int64(x.round() as i64),
        Variant::UInt64(_) => Variant::UInt64(x.round() as u64),
        _ => Variant::Double(x),
    }
}

pub(super) fn dv(value: Variant, status: StatusCode, t: i64) -> DataValue {
    DataValue {
        value,
        status: Some(status),
        source_timestamp: Some(DateTime(t)),
        ..Default::default()
    }
}

pub(super) fn no_data(t: i64) -> DataValue {
    dv(Variant::Empty, StatusCode::BadNoData, t)
}

/// A bounding value (§3.1.7): the raw value it is, or a computed number, and its StatusCode.
#[derive(Clone, Copy, Debug)]
pub(super) enum BoundVal {
    None,
    Raw(usize),
    Num(f64, usize),
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Bound {
    pub(super) val: BoundVal,
    pub(super) status: StatusCode,
    /// A raw value exists at the bound's timestamp (the Raw bit, not Interpolated).
    pub(super) raw: bool,
}

impl Bound {
    pub(super) const NO_DATA: Bound = Bound {
        val: BoundVal::None,
        status: StatusCode::BadNoData,
        raw: false,
    };
}

pub(super) struct Ctx<'a> {
    pub(super) raw: &'a [DataValue],
    pub(super) cfg: &'a AggregateConfig,
    pub(super) pi: i64,
    /// Timestamp of the first raw value that is not a Bad_NoData marker.
    pub(super) data_start: Option<i64>,
    /// Timestamp of the last raw value.
    pub(super) data_end: Option<i64>,
}

impl<'a> Ctx<'a> {
    pub(super) fn new(raw: &'a [DataValue], cfg: &'a AggregateConfig, pi: i64) -> Self {
        let data_start = raw
            .iter()
            .find(|d| !is_marker(status_of(d)))
            .and_then(|d| d.source_timestamp)
            .map(|t| t.0);
        let data_end = raw.last().and_then(|d| d.source_timestamp).map(|t| t.0);
        Ctx {
            raw,
            cfg,
            pi,
            data_start,
            data_end,
        }
    }

    pub(super) fn t(&self, i: usize) -> i64 {
        self.raw
            .get(i)
            .and_then(|d| d.source_timestamp)
            .map_or(i64::MAX, |t| t.0)
    }

    pub(super) fn status(&self, i: usize) -> StatusCode {
        self.raw.get(i).map_or(StatusCode::BadNoData, status_of)
    }

    pub(super) fn value(&self, i: usize) -> &'a Variant {
        const EMPTY: &Variant = &Variant::Empty;
        self.raw.get(i).map_or(EMPTY, |d| &d.value)
    }

    pub(super) fn num(&self, i: usize) -> Num {
        if self.is_bad(self.status(i)) {
            Num::Null
        } else {
            num(self.value(i))
        }
    }

    /// Bad, or Uncertain with TreatUncertainAsBad (§3.1.7, §4.2.1.2).
    pub(super) fn is_bad(&self, s: StatusCode) -> bool {
        s.is_bad() || (self.cfg.treat_uncertain_as_bad && s.is_uncertain())
    }

    /// Index of the first raw value at or after `t`.
    pub(super) fn at_or_after(&self, t: i64) -> usize {
        self.raw
            .partition_point(|d| d.source_timestamp.map_or(i64::MIN, |x| x.0) < t)
    }

    /// Whether the values are to be joined by steps: the variable is Stepped, or the values are not
    /// numbers (Boolean and other non-arithmetic data is always stepped, Annex A.1.4).
    pub(super) fn stepped_between(&self, a: usize, b: usize) -> bool {
        self.cfg.stepped
            || matches!(self.value(a), Variant::Boolean(_))
            || !matches!(self.num(a), Num::Val(_))
            || !matches!(self.num(b), Num::Val(_))
    }

    pub(super) fn line(&self, a: usize, b: usize, t: i64) -> f64 {
        let (ta, tb) = (self.t(a), self.t(b));
        let (Num::Val(va), Num::Val(vb)) = (self.num(a), self.num(b)) else {
            return f64::NAN;
        };
        if tb == ta {
            return va;
        }
        va + (vb - va) * ((t - ta) as f64 / (tb - ta) as f64)
    }

    /// Simple Bounding Value at `t` (Part 13 §3.1.9): from the raw values immediately before and
    /// after `t` even when they are Bad.
    pub(super) fn simple_bound(&self, t: i64) -> Bound {
        let i = self.at_or_after(t);
        if self.t(i) == t {
            let s = self.status(i);
            if self.is_bad(s) {
                // "If a Raw value at the timestamp is Bad the StatusCode is Bad_NoData."
                return Bound {
                    raw: true,
                    ..Bound::NO_DATA
                };
            }
            return Bound {
                val: BoundVal::Raw(i),
                status: s,
                raw: true,
            };
        }
        let Some(before) = i.checked_sub(1) else {
            return Bound::NO_DATA;
        };
        let bs = self.status(before);
        if self.is_bad(bs) {
            // "If the value before the timestamp is Bad the StatusCode is Bad_NoData."
            return Bound::NO_DATA;
        }
        let mut status = if bs.is_uncertain() {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        let after = i;
        if after >= self.raw.len() {
            // Beyond the last raw value: SteppedExtrapolation, Uncertain (as §3.1.8 for the end).
            return Bound {
                val: BoundVal::Raw(before),
                status: StatusCode::UncertainDataSubNormal,
                raw: false,
            };
        }
        let stepped = self.cfg.stepped
            || matches!(self.value(before), Variant::Boolean(_))
            || !matches!(self.num(before), Num::Val(_));
        if stepped {
            // SteppedInterpolation needs only the value before; its status decides.
            return Bound {
                val: BoundVal::Raw(before),
                status,
                raw: false,
            };
        }
        // SlopedInterpolation: "If the value after the timestamp is Bad or Uncertain the
        // StatusCode is Uncertain_DataSubNormal", and "if the value after the timestamp is Bad then
        // the before value is the bounding value" (so too if it is no number).
        let a_s = self.status(after);
        if self.is_bad(a_s) || a_s.is_uncertain() {
            status = StatusCode::UncertainDataSubNormal;
        }
        if !matches!(self.num(after), Num::Val(_)) {
            return Bound {
                val: BoundVal::Raw(before),
                status,
                raw: false,
            };
        }
        Bound {
            val: BoundVal::Num(self.line(before, after, t), before),
            status,
            raw: false,
        }
    }

    /// Interpolated Bounding Value at `t` (Part 13 §3.1.8): from the nearest non-Bad raw values,
    /// Uncertain_DataSubNormal when Bad values were skipped or an Uncertain one is used; after
    /// the end of the data the last non-Bad value is extrapolated (stepped, or sloped with
    /// UseSlopedExtrapolation), Uncertain_DataSubNormal.
    pub(super) fn interpolated_bound(&self, t: i64) -> Bound {
        let i = self.at_or_after(t);
        let mut skipped = false;
        if self.t(i) == t {
            let s = self.status(i);
            if !self.is_bad(s) {
                return Bound {
                    val: BoundVal::Raw(i),
                    status: s,
                    raw: true,
                };
            }
            skipped = true;
        }
        // The first non-Bad value before t.
        let mut before = None;
        let mut j = i;
        while let Some(k) = j.checked_sub(1) {
            if self.is_bad(self.status(k)) {
                skipped = true;
                j = k;
                continue;
            }
            before = Some(k);
            break;
        }
        let Some(before) = before else {
            return Bound::NO_DATA;
        };
        // The first non-Bad value after t.
        let mut after = None;
        let mut skipped_after = false;
        let mut k = if self.t(i) == t { i + 1 } else { i };
        while k < self.raw.len() {
            if self.is_bad(self.status(k)) {
                skipped_after = true;
                k += 1;
                continue;
            }
            after = Some(k);
            break;
        }
        let before_uncertain = self.status(before).is_uncertain();
        let Some(after) = after else {
            // After the end of the data: extrapolation.
            let val = if self.cfg.use_sloped_extrapolation && !self.stepped_between(before, before)
            {
                // The line through the last two non-Bad values.
                let mut prev = None;
                let mut m = before;
                while let Some(p) = m.checked_sub(1) {
                    if !self.is_bad(self.status(p)) {
                        prev = Some(p);
                        break;
                    }
                    m = p;
                }
                match prev {
                    Some(p) if !self.stepped_between(p, before) => {
                        BoundVal::Num(self.line(p, before, t), before)
                    }
                    _ => BoundVal::Raw(before),
                }
            } else {
                BoundVal::Raw(before)
            };
            return Bound {
                val,
                status: StatusCode::UncertainDataSubNormal,
                raw: false,
            };
        };
        if self.stepped_between(before, after) {
            let status = if skipped || before_uncertain {
                StatusCode::UncertainDataSubNormal
            } else {
                StatusCode::Good
            };
            return Bound {
                val: BoundVal::Raw(before),
                status,
                raw: false,
            };
        }
        let status =
            if skipped || skipped_after || before_uncertain || self.status(after).is_uncertain() {
                StatusCode::UncertainDataSubNormal
            } else {
                StatusCode::Good
            };
        Bound {
            val: BoundVal::Num(self.line(before, after, t), before),
            status,
            raw: false,
        }
    }

    pub(super) fn bound_value(&self, b: &Bound) -> Variant {
        match b.val {
            BoundVal::None => Variant::Empty,
            BoundVal::Raw(i) => self.value(i).clone(),
            BoundVal::Num(x, like) => same_type_as(self.value(like), x),
        }
    }

    pub(super) fn bound_num(&self, b: &Bound) -> Num {
        match b.val {
            BoundVal::None => Num::Null,
            BoundVal::Raw(i) => self.num(i),
            BoundVal::Num(x, _) => Num::Val(x),
        }
    }

    /// The interval lies wholly after the end of the data or before its start: Bad_NoData
    /// ("After End of Data" / "Before Start of Data" in the §5.4.3 tables).
    pub(super) fn outside_data(&self, s: i64, e: i64) -> bool {
        match (self.data_start, self.data_end) {
            (Some(first), Some(last)) => last < s || first >= e,
            _ => true,
        }
    }

    /// The Partial bit (§5.3): the interval is shorter than the ProcessingInterval, or part of it
    /// lies before the start or after the end of the data (Annex A sets it so on the first and last
    /// intervals of each historian).
    pub(super) fn partial(&self, s: i64, e: i64) -> u32 {
        let short = e - s < self.pi;
        let before_start = self.data_start.is_some_and(|first| s < first);
        let after_end = self.data_end.is_some_and(|last| e > last);
        if short || before_start || after_end {
            bits::PARTIAL
        } else {
            0
        }
    }

    pub(super) fn interval(&self, aggregate: Aggregate, s: i64, e: i64) -> DataValue {
        if aggregate == Aggregate::Interpolative {
            return self.interpolative(s);
        }
        if matches!(aggregate, Aggregate::TimeAverage | Aggregate::Total) {
            // Interpolated bounds: after the end of the data the value is extrapolated (as for
            // Interpolative), so only "Before Start of Data" is Bad_NoData.
            if self.data_start.is_none_or(|first| first >= e) {
                return no_data(s);
            }
            let scale = if aggregate == Aggregate::Total {
                Scale::GoodTime
            } else {
                Scale::Average
            };
            // "This calculation always uses a sloped line between points" (§5.4.3.6, and
            // §5.4.3.8 for Total), bounds included, whatever the Stepped Property
            // (AggregateExamples.csv, TimeAverage Historian 3: 10.652 at 12:00:00).
            let sloped = AggregateConfig {
                stepped: false,
                ..*self.cfg
            };
            let ctx = Ctx {
                cfg: &sloped,
                ..*self
            };
            return ctx.time_average(s, e, true, scale);
        }
        if self.outside_data(s, e) {
            return no_data(s);
        }
        match aggregate {
            Aggregate::Average => self.average(s, e),
            Aggregate::Count => self.count(s, e),
            Aggregate::Start => self.start_end(s, e, false),
            Aggregate::End => self.start_end(s, e, true),
            Aggregate::Minimum => self.extreme(s, e, false, false),
            Aggregate::Maximum => self.extreme(s, e, true, false),
            Aggregate::MinimumActualTime => self.extreme(s, e, false, true),
            Aggregate::MaximumActualTime => self.extreme(s, e, true, true),
            Aggregate::StartBound => self.start_bound(s, e),
            Aggregate::DurationGood => self.duration(s, e, Duration::Good),
            Aggregate::DurationBad => self.duration(s, e, Duration::Bad),
            Aggregate::PercentGood => self.duration(s, e, Duration::PercentGood),
            Aggregate::PercentBad => self.duration(s, e, Duration::PercentBad),
            Aggregate::DurationInStateZero => self.duration(s, e, Duration::StateZero),
            Aggregate::DurationInStateNonZero => self.duration(s, e, Duration::StateNonZero),
            Aggregate::VarianceSample => self.spread(s, e, Spread::VarianceSample),
            Aggregate::StandardDeviationSample => self.spread(s, e, Spread::StdDevSample),
            Aggregate::VariancePopulation => self.spread(s, e, Spread::VariancePopulation),
            Aggregate::StandardDeviationPopulation => self.spread(s, e, Spread::StdDevPopulation),
            Aggregate::TimeAverage2 => self.time_average(s, e, false, Scale::Average),
            Aggregate::Total2 => self.time_average(s, e, false, Scale::GoodTime),
            Aggregate::Range => self.range(s, e),
            Aggregate::Range2 => self.range2(s, e),
            Aggregate::Delta => self.delta(s, e),
            Aggregate::EndBound => self.end_bound(s, e),
            Aggregate::DeltaBounds => self.delta_bounds(s, e),
            Aggregate::WorstQuality => self.worst_quality(s, e, false),
            Aggregate::WorstQuality2 => self.worst_quality(s, e, true),
            Aggregate::NumberOfTransitions => self.transitions(s, e),
            Aggregate::Minimum2 => self.extreme2(s, e, false, false),
            Aggregate::Maximum2 => self.extreme2(s, e, true, false),
            Aggregate::MinimumActualTime2 => self.extreme2(s, e, false, true),
            Aggregate::MaximumActualTime2 => self.extreme2(s, e, true, true),
            _ => dv(Variant::Empty, StatusCode::BadAggregateNotSupported, s),
        }
    }

    /// The interval's quality from the share of its data that is Bad (§5.4.3.2; time or values):
    /// Good when the non-Bad share is at least PercentDataGood, else Bad when the Bad share is at
    /// least PercentDataBad, Uncertain_DataSubNormal otherwise. Good is tested first: with
    /// PercentDataGood = PercentDataBad = 50 (Historian 3) a half-Bad interval is Good, as Annex
    /// A.19 shows (Count, Historian 3, 12:00:32: one Good and one Bad value, "1 Good").
    pub(super) fn quality(&self, total: i64, bad: i64) -> StatusCode {
        let total = i128::from(total.max(1));
        let bad = i128::from(bad);
        let good = total - bad;
        if good * 100 >= i128::from(self.cfg.percent_data_good) * total {
            StatusCode::Good
        } else if bad * 100 >= i128::from(self.cfg.percent_data_bad) * total {
            StatusCode::Bad
        } else {
            StatusCode::UncertainDataSubNormal
        }
    }

    /// The quality of an interval of the Aggregates that count raw values (Average, Count,
    /// NumberOfTransitions; §5.4.3.2 "PercentValues"): Bad when the Bad share is at least
    /// PercentDataBad, Good when the rest is at least PercentDataGood and no Uncertain value was
    /// used, Uncertain_DataSubNormal otherwise. v1.05 words the Uncertain rule for regions only
    /// (the time-weighted ones use [`Ctx::time_quality`]); AggregateExamples.csv keeps a used
    /// Uncertain value Uncertain for counts (Count, Historian 1, 12:01:04: 0, Uncertain).
    pub(super) fn share_quality(&self, total: i64, bad: i64, uncertain_used: bool) -> StatusCode {
        let q = self.quality(total, bad);
        if q == StatusCode::Good && uncertain_used {
            StatusCode::UncertainDataSubNormal
        } else {
            q
        }
    }
}

pub(super) fn status_of(d: &DataValue) -> StatusCode {
    d.status.unwrap_or(StatusCode::Good)
}

/// A `Bad_NoData` raw entry marks the absence of data (Annex A: "First archive entry, Point
/// created"), not a Bad value.
pub(super) fn is_marker(s: StatusCode) -> bool {
    s.code() == StatusCode::BadNoData.code()
}
