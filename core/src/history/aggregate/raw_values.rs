//! The Aggregates on the raw values of an interval, no bounds used (Part 13 §5.4.3): Average,
//! Minimum/Maximum and their ActualTime variants, Range, Count, Start/End, Delta, the sample and
//! population statistics, WorstQuality (WorstQuality2 adds the start bound) and
//! NumberOfTransitions.

use super::ctx::{dv, is_marker, no_data, num, same_type_as, status_of, Ctx, Num};
use super::{bits, with_bits, AggregateConfig};
use crate::{DataValue, StatusCode, Variant};

impl<'a> Ctx<'a> {
    /// Minimum / Maximum (Part 13 §5.4.3.10 / §5.4.3.11) and MinimumActualTime /
    /// MaximumActualTime (§5.4.3.12 / §5.4.3.13): the least (greatest) Good raw value in the
    /// interval (the oldest when it occurs more than once, then MultiValue). Uncertain_DataSubNormal
    /// when Bad values are in the interval (Uncertain ones too with TreatUncertainAsBad) or an
    /// Uncertain value is beyond the Good extreme; Bad_NoData without a Good value. Bad_NoData
    /// markers are absence of data, not Bad values.
    /// Minimum / Maximum stamp the result at the interval's start and set the Calculated bit unless
    /// the extreme is the raw value at the start (Annex A.8, A.9: "80 Good, Partial" at 12:01:20),
    /// or when the status was made Uncertain. The ActualTime variants stamp it with its own time;
    /// Annex A.10/A.11 show no Calculated bit on their Uncertain results, which the §5.4.3.12 table
    /// would set: the Annex is followed.
    pub(super) fn extreme(&self, s: i64, e: i64, max: bool, actual_time: bool) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let Some(slice) = self.raw.get(i0..i1) else {
            return no_data(s);
        };
        let better = |a: f64, b: f64| if max { a > b } else { a < b };
        let mut best: Option<(f64, usize)> = None;
        let mut ties = 0usize;
        let mut bad = false;
        let mut uncertain: Option<f64> = None;
        for (k, d) in slice.iter().enumerate() {
            let st = status_of(d);
            if is_marker(st) {
                continue;
            }
            if st.is_good() {
                let x = match num(&d.value) {
                    Num::Val(x) => x,
                    Num::NotNumeric => {
                        return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
                    }
                    Num::Null => continue,
                };
                match best {
                    Some((b, _)) if x == b => ties += 1,
                    Some((b, _)) if !better(x, b) => {}
                    _ => {
                        best = Some((x, i0 + k));
                        ties = 0;
                    }
                }
            } else if self.is_bad(st) {
                bad = true;
            } else if let Num::Val(x) = num(&d.value) {
                uncertain = Some(match uncertain {
                    Some(u) if !better(x, u) => u,
                    _ => x,
                });
            }
        }
        let Some((b, idx)) = best else {
            return no_data(s);
        };
        let beyond = uncertain.is_some_and(|u| better(u, b));
        let code = if bad || beyond {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        let mut b = self.partial(s, e);
        if ties > 0 {
            b |= bits::MULTI_VALUE;
        }
        if actual_time {
            return dv(self.value(idx).clone(), with_bits(code, b), self.t(idx));
        }
        if self.t(idx) != s || code != StatusCode::Good {
            b |= bits::CALCULATED;
        }
        dv(self.value(idx).clone(), with_bits(code, b), s)
    }

    /// The Good values of `[s, e)` and the quality counts of §5.4.3.2 for Aggregates on raw values
    /// ("PercentValues"): every raw value but the Bad_NoData markers is counted, Bad ones (and
    /// Uncertain ones with TreatUncertainAsBad) as Bad. Calls `f` with each Good value's number.
    pub(super) fn good_values(&self, s: i64, e: i64, mut f: impl FnMut(Num)) -> ValueCounts {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let mut c = ValueCounts::default();
        for d in self.raw.get(i0..i1).unwrap_or_default() {
            let st = status_of(d);
            if is_marker(st) {
                continue;
            }
            c.total += 1;
            if self.is_bad(st) {
                c.bad += 1;
            } else if st.is_good() {
                c.good += 1;
                f(num(&d.value));
            } else {
                c.uncertain = true;
            }
        }
        c
    }

    /// Average (Part 13 §5.4.3.5): the mean of the Good raw values of the interval, Calculated;
    /// the quality by the share of Bad values (§5.4.3.2, the Aggregate not being time based);
    /// Bad_NoData without a Good value. Annex A.3 sets no Partial bit on the intervals that begin
    /// before the data or run past its end (Historian 2 at 12:00:00, Historian 1 at 12:01:30),
    /// where A.8 and A.19 do: the Annex is followed, Partial only for an interval shorter than the
    /// ProcessingInterval.
    pub(super) fn average(&self, s: i64, e: i64) -> DataValue {
        let (mut sum, mut invalid) = (0.0f64, false);
        let c = self.good_values(s, e, |x| match x {
            Num::Val(v) => sum += v,
            Num::NotNumeric => invalid = true,
            Num::Null => {}
        });
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        if c.good == 0 {
            return no_data(s);
        }
        let code = self.share_quality(c.total, c.bad, c.uncertain);
        let partial = if e - s < self.pi { bits::PARTIAL } else { 0 };
        let mean = sum / c.good as f64;
        // "Data Type: Double" (§5.4.3.5, Table 13), whatever the source's numeric type.
        dv(
            Variant::Double(mean),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }

    /// Count (Part 13 §5.4.3.21): the number of Good raw values in the interval (Int32), Bad
    /// values and Uncertain ones left out (Annex A.19 Historian 1, TreatUncertainAsBad False: 0
    /// for the Uncertain value at 12:01:10). The quality by the share of Bad values (§5.4.3.2);
    /// when it is Bad the result is Bad with no value (A.19 Historian 1 at 12:00:32).
    pub(super) fn count(&self, s: i64, e: i64) -> DataValue {
        let c = self.good_values(s, e, |_| {});
        let code = self.share_quality(c.total, c.bad, c.uncertain);
        let partial = self.partial(s, e);
        if code.is_bad() {
            return dv(Variant::Empty, with_bits(code, partial), s);
        }
        let n = i32::try_from(c.good).unwrap_or(i32::MAX);
        dv(
            Variant::Int32(n),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }

    /// Start / End (Part 13 §5.4.3.25 / §5.4.3.26): the first (last) raw value in the interval
    /// with its own timestamp and StatusCode, whatever its quality, and the Partial bit; a Bad
    /// value is returned without a value, as Annex A.23/A.24 print it. Bad_NoData markers are no
    /// values; an interval without a raw value is Bad_NoData.
    pub(super) fn start_end(&self, s: i64, e: i64, last: bool) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let slice = self.raw.get(i0..i1).unwrap_or_default();
        let pick = |d: &&DataValue| !is_marker(status_of(d));
        let found = if last {
            slice.iter().rev().find(pick)
        } else {
            slice.iter().find(pick)
        };
        let Some(d) = found else {
            return no_data(s);
        };
        let st = status_of(d);
        let t = d.source_timestamp.map_or(s, |t| t.0);
        let value = if st.is_bad() {
            Variant::Empty
        } else {
            d.value.clone()
        };
        dv(value, with_bits(st, self.partial(s, e)), t)
    }

    /// StandardDeviationSample, VarianceSample, StandardDeviationPopulation, VariancePopulation
    /// (Part 13 §5.4.3.37–§5.4.3.40): over the Good raw values of the interval (n − 1 or n in the
    /// divisor; one value gives 0). Annex A.36 shows Uncertain_DataSubNormal where the interval
    /// holds any value that is not Good (Bad or Uncertain, Bad_NoData markers aside) although the
    /// §5.4.3.37 table says "Always Good": the Annex is followed. Bad_NoData without a Good value.
    pub(super) fn spread(&self, s: i64, e: i64, what: Spread) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let Some(slice) = self.raw.get(i0..i1) else {
            return no_data(s);
        };
        // Welford's running mean and sum of squared deviations.
        let (mut n, mut mean, mut m2) = (0u64, 0.0f64, 0.0f64);
        let mut not_good = false;
        for d in slice {
            let st = status_of(d);
            if is_marker(st) {
                continue;
            }
            if !st.is_good() {
                not_good = true;
                continue;
            }
            match num(&d.value) {
                Num::Val(x) => {
                    n += 1;
                    let delta = x - mean;
                    mean += delta / n as f64;
                    m2 += delta * (x - mean);
                }
                Num::NotNumeric => {
                    return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s)
                }
                Num::Null => {}
            }
        }
        if n == 0 {
            return no_data(s);
        }
        let divisor = match what {
            Spread::VarianceSample | Spread::StdDevSample => n - 1,
            Spread::VariancePopulation | Spread::StdDevPopulation => n,
        };
        let variance = if divisor == 0 {
            0.0
        } else {
            m2 / divisor as f64
        };
        let x = match what {
            Spread::StdDevSample | Spread::StdDevPopulation => variance.sqrt(),
            Spread::VarianceSample | Spread::VariancePopulation => variance,
        };
        let code = if not_good {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        dv(
            Variant::Double(x),
            with_bits(code, bits::CALCULATED | self.partial(s, e)),
            s,
        )
    }

    /// Range (Part 13 §5.4.3.14): the greatest minus the least Good raw value of the interval (0
    /// for one value), in the source's type, Calculated; Uncertain_DataSubNormal when Bad values
    /// exist (Uncertain ones too with TreatUncertainAsBad) or an Uncertain value lies outside the
    /// Good range; Bad_NoData without a Good value.
    pub(super) fn range(&self, s: i64, e: i64) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let mut lo_hi: Option<(f64, f64)> = None;
        let (mut bad, mut invalid) = (false, false);
        let mut uncertain: Vec<f64> = Vec::new();
        for d in self.raw.get(i0..i1).unwrap_or_default() {
            let st = status_of(d);
            if is_marker(st) {
                continue;
            }
            if self.is_bad(st) {
                bad = true;
                continue;
            }
            match num(&d.value) {
                Num::Val(x) if st.is_good() => {
                    lo_hi = Some(lo_hi.map_or((x, x), |(l, h)| (l.min(x), h.max(x))));
                }
                Num::Val(x) => uncertain.push(x),
                Num::NotNumeric => invalid = true,
                Num::Null => {}
            }
        }
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        let Some((l, h)) = lo_hi else {
            return no_data(s);
        };
        let outside = uncertain.iter().any(|&u| u < l || u > h);
        let code = if bad || outside {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        dv(
            same_type_as(self.value(i0), h - l),
            with_bits(code, bits::CALCULATED | self.partial(s, e)),
            s,
        )
    }

    /// Delta (Part 13 §5.4.3.27): the latest minus the earliest Good raw value of the interval, in
    /// the source's type, Calculated; Uncertain_DataSubNormal when non-Good values were passed over
    /// looking for them (before the earliest or after the latest Good value); Bad_NoData without
    /// a Good value.
    pub(super) fn delta(&self, s: i64, e: i64) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let values: Vec<&DataValue> = self
            .raw
            .get(i0..i1)
            .unwrap_or_default()
            .iter()
            .filter(|d| !is_marker(status_of(d)))
            .collect();
        let good = |d: &&&DataValue| status_of(d).is_good();
        let first = values.iter().position(|d| good(&d));
        let last = values.iter().rposition(|d| good(&d));
        let (Some(first), Some(last)) = (first, last) else {
            return no_data(s);
        };
        let (Some(a), Some(b)) = (values.get(first), values.get(last)) else {
            return no_data(s);
        };
        let (Num::Val(x), Num::Val(y)) = (num(&a.value), num(&b.value)) else {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        };
        let code = if first > 0 || last + 1 < values.len() {
            StatusCode::UncertainDataSubNormal
        } else {
            StatusCode::Good
        };
        dv(
            same_type_as(&a.value, y - x),
            with_bits(code, bits::CALCULATED | self.partial(s, e)),
            s,
        )
    }

    /// WorstQuality / WorstQuality2 (Part 13 §5.4.3.35 / §5.4.3.36): the worst StatusCode of the
    /// interval (Bad worse than Uncertain worse than Good; TreatUncertainAsBad ignored, as v1.05
    /// says), the first such when several share that severity, its code without info bits as the
    /// value; Good, Calculated. Bad_NoData markers are no values. WorstQuality2 adds the Simple
    /// Bounding Values (§3.1.9, computed with TreatUncertainAsBad False) at both ends of the
    /// interval, Bad_NoData past the end of the data: "Use Bounds: Simple", and AggregateExamples.csv
    /// counts the end bound too (Historian 1, 12:00:16: UncertainDataSubNormal from the bound at
    /// 12:00:32, all raw values of the interval being Good).
    /// MultipleValues: "if multiple values exist with the worst quality" (v1.05), set only when
    /// that quality is Uncertain or Bad: the CSV sets it on no interval whose values are all Good
    /// (e.g. WorstQuality, every historian, 12:00:16: two Good values).
    pub(super) fn worst_quality(&self, s: i64, e: i64, with_bounds: bool) -> DataValue {
        let rank = |c: StatusCode| {
            if c.is_bad() {
                2
            } else if c.is_uncertain() {
                1
            } else {
                0
            }
        };
        let mut worst: Option<(StatusCode, usize)> = None;
        let mut take = |c: StatusCode| match worst {
            Some((w, n)) if rank(c) == rank(w) => worst = Some((w, n + 1)),
            Some((w, _)) if rank(c) < rank(w) => {}
            _ => worst = Some((c, 1)),
        };
        let uncertain_not_bad = AggregateConfig {
            treat_uncertain_as_bad: false,
            ..*self.cfg
        };
        let bounds = Ctx {
            cfg: &uncertain_not_bad,
            ..*self
        };
        if with_bounds {
            take(bounds.simple_bound(s).status);
        }
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        for d in self.raw.get(i0..i1).unwrap_or_default() {
            let st = status_of(d);
            if !is_marker(st) {
                take(st);
            }
        }
        if with_bounds {
            take(bounds.end_bound_of(e).status);
        }
        let Some((w, n)) = worst else {
            return no_data(s);
        };
        let multi = if n > 1 && rank(w) > 0 {
            bits::MULTI_VALUE
        } else {
            0
        };
        dv(
            Variant::StatusCode(StatusCode(w.code())),
            with_bits(
                StatusCode::Good,
                bits::CALCULATED | multi | self.partial(s, e),
            ),
            s,
        )
    }

    /// NumberOfTransitions (Part 13 §5.4.3.24): how often the non-Bad value changes in the
    /// interval (Int32), the earliest non-Bad value of the interval compared with the last non-Bad
    /// value before it (a transition when there is none); Bad values left out, the quality by the
    /// share of Bad values (§5.4.3.2); Calculated.
    pub(super) fn transitions(&self, s: i64, e: i64) -> DataValue {
        let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
        let before = self
            .raw
            .get(..i0)
            .unwrap_or_default()
            .iter()
            .rev()
            .find(|d| !is_marker(status_of(d)) && !self.is_bad(status_of(d)));
        let mut prev: Option<&Variant> = before.map(|d| &d.value);
        let mut n = 0i64;
        let mut c = ValueCounts::default();
        for d in self.raw.get(i0..i1).unwrap_or_default() {
            let st = status_of(d);
            if is_marker(st) {
                continue;
            }
            c.total += 1;
            if self.is_bad(st) {
                c.bad += 1;
                continue;
            }
            if st.is_uncertain() {
                c.uncertain = true;
            }
            if prev != Some(&d.value) {
                n += 1;
            }
            prev = Some(&d.value);
        }
        let code = self.share_quality(c.total, c.bad, c.uncertain);
        let partial = self.partial(s, e);
        if code.is_bad() {
            return dv(Variant::Empty, with_bits(code, partial), s);
        }
        dv(
            Variant::Int32(i32::try_from(n).unwrap_or(i32::MAX)),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }
}

/// The raw values of an interval as §5.4.3.2 counts them (see `Ctx::good_values`).
#[derive(Clone, Copy, Default, Debug)]
pub(super) struct ValueCounts {
    pub(super) total: i64,
    pub(super) good: i64,
    pub(super) bad: i64,
    /// An Uncertain value that is not treated as Bad.
    pub(super) uncertain: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Spread {
    VarianceSample,
    StdDevSample,
    VariancePopulation,
    StdDevPopulation,
}
