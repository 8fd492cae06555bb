//! The Aggregates that return or compare bounding values (Part 13 §3.1.8, §3.1.9): Interpolative,
//! StartBound, EndBound, DeltaBounds, Minimum2/Maximum2 and their ActualTime variants, Range2.

use super::ctx::{dv, no_data, num, same_type_as, status_of, Bound, BoundVal, Ctx, Num};
use super::regions::DataEnd;
use super::{bits, with_bits, TICKS_PER_MS};
use crate::{DataValue, StatusCode, Variant};

impl<'a> Ctx<'a> {
    /// Interpolative (Part 13 §5.4.3.4): the Interpolated Bounding Value at the interval's start;
    /// Raw bit when a raw value is at that time, Interpolated otherwise; no Partial bit; after the
    /// end of the data the extrapolated value, Uncertain_DataSubNormal.
    pub(super) fn interpolative(&self, s: i64) -> DataValue {
        let b = self.interpolated_bound(s);
        if matches!(b.val, BoundVal::None) {
            return no_data(s);
        }
        let b_bits = if b.raw { 0 } else { bits::INTERPOLATED };
        dv(self.bound_value(&b), with_bits(b.status, b_bits), s)
    }

    /// StartBound (Part 13 §5.4.3.28): the Simple Bounding Value at the interval's start,
    /// Interpolated unless a raw value is there; Bad_NoData when the bound is Bad (the Partial bit
    /// still set on a partial interval, as Annex A.25 shows).
    pub(super) fn start_bound(&self, s: i64, e: i64) -> DataValue {
        let b = self.simple_bound(s);
        let partial = self.partial(s, e);
        if matches!(b.val, BoundVal::None) {
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        }
        let b_bits = if b.raw { 0 } else { bits::INTERPOLATED };
        dv(
            self.bound_value(&b),
            with_bits(b.status, b_bits | partial),
            s,
        )
    }

    /// Range2 (Part 13 §5.4.3.19): Maximum2 − Minimum2; Bad_NoData if either is Bad,
    /// Uncertain_DataSubNormal if either is Uncertain, Good otherwise; Calculated.
    pub(super) fn range2(&self, s: i64, e: i64) -> DataValue {
        let (lo, hi) = (
            self.extreme2(s, e, false, false),
            self.extreme2(s, e, true, false),
        );
        let (ls, hs) = (status_of(&lo), status_of(&hi));
        let partial = self.partial(s, e);
        let (Num::Val(l), Num::Val(h)) = (num(&lo.value), num(&hi.value)) else {
            if ls == StatusCode::BadAggregateInvalidInputs
                || hs == StatusCode::BadAggregateInvalidInputs
            {
                return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
            }
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        };
        if ls.is_bad() || hs.is_bad() {
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        }
        let code = if ls.is_uncertain() || hs.is_uncertain() {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        dv(
            same_type_as(&lo.value, h - l),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }

    /// The Simple Bounding Value at the end of `[s, e)`, none where the data ends inside the
    /// interval ("No End Bound", §5.4.3.29).
    pub(super) fn end_bound_of(&self, e: i64) -> Bound {
        if self.data_end.is_some_and(|last| last < e) {
            Bound::NO_DATA
        } else {
            self.simple_bound(e)
        }
    }

    /// EndBound (Part 13 §5.4.3.29): the Simple Bounding Value at the interval's end with its
    /// status, stamped at the interval's start, Calculated; Bad_NoData without an end bound.
    pub(super) fn end_bound(&self, s: i64, e: i64) -> DataValue {
        let b = self.end_bound_of(e);
        let partial = self.partial(s, e);
        if matches!(b.val, BoundVal::None) {
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        }
        dv(
            self.bound_value(&b),
            with_bits(b.status, bits::CALCULATED | partial),
            s,
        )
    }

    /// DeltaBounds (Part 13 §5.4.3.30): EndBound − StartBound (Simple Bounding Values);
    /// Bad_NoData when either is missing or Bad, Uncertain_DataSubNormal when either is
    /// Uncertain; Calculated.
    pub(super) fn delta_bounds(&self, s: i64, e: i64) -> DataValue {
        let (a, b) = (self.simple_bound(s), self.end_bound_of(e));
        let partial = self.partial(s, e);
        let (Num::Val(x), Num::Val(y)) = (self.bound_num(&a), self.bound_num(&b)) else {
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        };
        if a.status.is_bad() || b.status.is_bad() {
            return dv(Variant::Empty, with_bits(StatusCode::BadNoData, partial), s);
        }
        let code = if a.status.is_uncertain() || b.status.is_uncertain() {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        dv(
            same_type_as(&self.bound_value(&a), y - x),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }

    /// Minimum2 / Maximum2 / MinimumActualTime2 / MaximumActualTime2 (Part 13 §5.4.3.15–§5.4.3.18):
    /// the least (greatest) of the Simple Bounding Value at the start, the non-Bad raw values in the
    /// interval and (SlopedInterpolation only) the Simple Bounding Value at the end, which is
    /// stamped at the EffectiveEndTime (§3.1.3, end − 1 ms as Annex A.16 prints it). With
    /// SteppedInterpolation the end bound is the last value of the interval held, no point of its
    /// own (Annex A.15/A.16 Historian 3). The quality: §5.4.3.2 counts values (bounds included) for
    /// Aggregates on raw values, but Annex A.13/A.15/A.16 match only a time-weighted quality over
    /// the Simple-Bound regions, the data held past its end (Historian 3, PercentDataBad 50,
    /// 12:01:20: a count gives Bad, the tables Good), so the Annex is followed.
    /// Bits: Interpolated when a bound is returned, Calculated when Minimum2/Maximum2 return a
    /// value not at the start of the interval, MultiValue when the extreme occurs more than once
    /// (the ActualTime variants return the oldest).
    pub(super) fn extreme2(&self, s: i64, e: i64, max: bool, actual_time: bool) -> DataValue {
        let better = |a: f64, b: f64| if max { a > b } else { a < b };
        // (value, timestamp, from a bound, index of a raw value of the same type)
        let mut best: Option<(f64, i64, bool, usize)> = None;
        let mut ties = 0usize;
        let mut invalid = false;
        let mut consider = |x: Num, st: StatusCode, t: i64, bound: bool, like: usize| {
            if self.is_bad(st) {
                return;
            }
            let v = match x {
                Num::Val(v) => v,
                Num::NotNumeric => {
                    invalid = true;
                    return;
                }
                Num::Null => return,
            };
            match best {
                Some((b, ..)) if v == b => ties += 1,
                Some((b, ..)) if !better(v, b) => {}
                _ => {
                    best = Some((v, t, bound, like));
                    ties = 0;
                }
            }
        };
        let sb = self.simple_bound(s);
        let like_of = |b: &Bound| match b.val {
            BoundVal::Raw(i) | BoundVal::Num(_, i) => i,
            BoundVal::None => 0,
        };
        consider(self.bound_num(&sb), sb.status, s, !sb.raw, like_of(&sb));
        let mut i = self.at_or_after(s);
        if self.t(i) == s {
            i += 1;
        }
        while i < self.raw.len() && self.t(i) < e {
            consider(self.num(i), self.status(i), self.t(i), false, i);
            i += 1;
        }
        if !self.cfg.stepped {
            let data_ends = self.data_end.is_some_and(|last| last < e);
            let eb = if data_ends {
                Bound::NO_DATA
            } else {
                self.simple_bound(e)
            };
            let stepped_values = matches!(eb.val, BoundVal::Raw(k) | BoundVal::Num(_, k)
                if matches!(self.value(k), Variant::Boolean(_)));
            if !stepped_values {
                // A raw value at the end is no interpolated point for Minimum2/Maximum2, which
                // stamp the interval's start (AggregateExamples.csv, Maximum2 Historian 2 12:00:32:
                // "40 Calculated", the raw value at 12:00:48), but the ActualTime variants stamp it
                // at the EffectiveEndTime, where it is (Annex A.16: "12:01:19.999 80 Interpolated").
                consider(
                    self.bound_num(&eb),
                    eb.status,
                    (e - TICKS_PER_MS).max(s),
                    actual_time || !eb.raw,
                    like_of(&eb),
                );
            }
        }
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        let Some((v, t, bound, like)) = best else {
            return no_data(s);
        };
        // The quality over the regions of the interval (see the note above).
        let code = self.time_quality(s, e, DataEnd::Extrapolate);
        let mut b = self.partial(s, e);
        if bound {
            b |= bits::INTERPOLATED;
        }
        if ties > 0 {
            b |= bits::MULTI_VALUE;
        }
        let ts = if actual_time {
            t
        } else {
            if !bound && t != s {
                b |= bits::CALCULATED;
            }
            s
        };
        dv(same_type_as(self.value(like), v), with_bits(code, b), ts)
    }
}
