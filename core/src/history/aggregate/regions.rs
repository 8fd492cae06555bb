//! The time-weighted Aggregates over the regions of an interval (Part 13 §5.4.3.2): TimeAverage,
//! TimeAverage2, Total, Total2 and the durations and percentages (DurationGood/Bad,
//! PercentGood/Bad, DurationInStateZero/NonZero).

use super::ctx::{dv, is_marker, no_data, status_of, Ctx, Num};
use super::{bits, with_bits, TICKS_PER_MS};
use crate::{DataValue, StatusCode, Variant};

impl<'a> Ctx<'a> {
    /// The regions of `[s, e)` (Part 13 §5.4.3.2): from the bounding value at `s` through each raw
    /// value in the interval to the bounding value at `e`, calling `f` per region with its two end
    /// points. With `interpolated` the bounds are Interpolated Bounding Values (§3.1.8), Bad raw
    /// values are skipped and the end of the data is extrapolated; otherwise they are Simple
    /// Bounding Values (§3.1.9), Bad raw values start Bad regions, and where the data ends inside
    /// the interval, with [`DataEnd::NoData`], the last raw value is held for one millisecond (the
    /// resolution of Annex A's examples: A.21 and A.29 count 10001 ms for 12:01:20–12:01:30 and the
    /// value at 12:01:30, A.5 averages 90 over 12:01:30–12:01:35) and the rest of the interval is a
    /// Bad_NoData region; with [`DataEnd::Extrapolate`] the last value is held to the end, as an
    /// Uncertain_DataSubNormal extrapolation unless the variable is Stepped.
    pub(super) fn segments(
        &self,
        s: i64,
        e: i64,
        interpolated: bool,
        end: DataEnd,
        mut f: impl FnMut(Seg),
    ) {
        let b = if interpolated {
            self.interpolated_bound(s)
        } else {
            self.simple_bound(s)
        };
        let mut p = Pt {
            t: s,
            status: b.status,
            num: self.bound_num(&b),
        };
        let mut last_raw = b.raw.then(|| self.at_or_after(s));
        let mut i = self.at_or_after(s);
        if self.t(i) == s {
            i += 1;
        }
        while i < self.raw.len() && self.t(i) < e {
            let st = self.status(i);
            last_raw = Some(i);
            if interpolated && self.is_bad(st) {
                i += 1;
                continue;
            }
            let q = Pt {
                t: self.t(i),
                status: st,
                num: self.num(i),
            };
            f(Seg { p, q });
            p = q;
            i += 1;
        }
        let ends_here = last_raw.is_some_and(|k| k + 1 == self.raw.len());
        if ends_here && !interpolated && end == DataEnd::Extrapolate {
            // SteppedInterpolation holds the last value; otherwise it is SteppedExtrapolation,
            // Uncertain_DataSubNormal (§3.1.8).
            let status = if self.cfg.stepped {
                p.status
            } else {
                StatusCode::UncertainDataSubNormal
            };
            f(Seg {
                p,
                q: Pt { t: e, status, ..p },
            });
            return;
        }
        if ends_here && !interpolated {
            // The hold ends at the missing end bound ("No End Bound: Value for Bound is Bad_NoData",
            // §5.4.3.9): a sloped region towards it is Uncertain (see `Ctx::region_uncertain`).
            let stop = p.t.saturating_add(TICKS_PER_MS).min(e);
            f(Seg {
                p,
                q: Pt {
                    t: stop,
                    status: StatusCode::BadNoData,
                    num: Num::Null,
                },
            });
            if stop < e {
                let none = Pt {
                    t: stop,
                    status: StatusCode::BadNoData,
                    num: Num::Null,
                };
                f(Seg {
                    p: none,
                    q: Pt { t: e, ..none },
                });
            }
            return;
        }
        let eb = if interpolated {
            self.interpolated_bound(e)
        } else {
            self.simple_bound(e)
        };
        let q = Pt {
            t: e,
            status: eb.status,
            num: self.bound_num(&eb),
        };
        f(Seg { p, q });
    }

    /// DurationGood / DurationBad (Part 13 §5.4.3.31 / §5.4.3.32): milliseconds of the interval
    /// with Good (Bad) data, always Good, Calculated; PercentGood / PercentBad (§5.4.3.33 /
    /// §5.4.3.34): that duration as a percentage of the interval. DurationInStateZero /
    /// DurationInStateNonZero (§5.4.3.22 / §5.4.3.23): the milliseconds of Good data equal
    /// (unequal) to zero, the quality "PercentTime" ([`Ctx::time_quality`]; AggregateExamples.csv,
    /// Historian 1 12:00:32: 0, the only value an Uncertain bound). All over the Simple Bounding
    /// Value timeline
    /// (Annex A.20, A.21, A.29–A.32). The time after the end of the data is neither Good nor Bad
    /// (A.30: DurationBad 0 for Historian 1 at 12:01:20, whose data ends at 12:01:30) and is left out
    /// of the interval the percentages divide by (A.31/A.32, Historian 2 at 12:01:20: 7001 ms Good and
    /// 3000 ms Bad are 70.003 % and 29.997 %); the Bad_NoData "point created" entry that begins the
    /// data is Bad time (A.30 Historian 1 at 12:00:00: 10000 ms).
    pub(super) fn duration(&self, s: i64, e: i64, what: Duration) -> DataValue {
        let mut sum = 0i64;
        let mut bad_data = 0i64;
        let mut after_end = 0i64;
        let mut invalid = false;
        self.segments(s, e, false, DataEnd::NoData, |seg| {
            // "Each region starts with a data point … If that data point is Bad the region is Bad"
            // (§5.4.3.32): a region has the status and value of its first point.
            let (d, st, v) = (seg.q.t - seg.p.t, seg.p.status, seg.p.num);
            if self.is_bad(st) {
                if self.after_end(seg.p.t) {
                    after_end += d;
                } else {
                    bad_data += d;
                }
                return;
            }
            match what {
                Duration::Good | Duration::PercentGood => {
                    if st.is_good() {
                        sum += d;
                    }
                }
                Duration::Bad | Duration::PercentBad => {}
                // "If one or more raw values are non-Good, they are not included in the
                // Duration" (§5.4.3.22/§5.4.3.23): Uncertain regions are left out too.
                Duration::StateZero | Duration::StateNonZero => match v {
                    Num::Val(x) => {
                        if st.is_good() && (x == 0.0) == (what == Duration::StateZero) {
                            sum += d;
                        }
                    }
                    Num::NotNumeric => invalid = true,
                    Num::Null => {}
                },
            }
        });
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        let with_data = (e - s - after_end).max(1) as f64;
        let (x, code) = match what {
            Duration::Good => (sum as f64 / TICKS_PER_MS as f64, StatusCode::Good),
            Duration::Bad => (bad_data as f64 / TICKS_PER_MS as f64, StatusCode::Good),
            Duration::PercentGood => (sum as f64 * 100.0 / with_data, StatusCode::Good),
            Duration::PercentBad => (bad_data as f64 * 100.0 / with_data, StatusCode::Good),
            Duration::StateZero | Duration::StateNonZero => (
                sum as f64 / TICKS_PER_MS as f64,
                self.time_quality(s, e, DataEnd::NoData),
            ),
        };
        dv(
            Variant::Double(x),
            with_bits(code, bits::CALCULATED | self.partial(s, e)),
            s,
        )
    }

    /// TimeAverage (Part 13 §5.4.3.6, Interpolated Bounding Values) and TimeAverage2 (§5.4.3.7,
    /// Simple Bounding Values): the time-weighted average of the non-Bad regions, each region the
    /// line between its points (SlopedInterpolation) or its first point held (SteppedInterpolation,
    /// or when the next point is Bad). Total (§5.4.3.8) and Total2 (§5.4.3.9) are the same integral
    /// in value × seconds: TimeAverage × the seconds of the interval that have data, TimeAverage2 ×
    /// "the sum of all sub-intervals where non-Bad data exists" (`scale`).
    ///
    /// TimeAverage and Total: the §5.4.3.6/§5.4.3.8 "Custom" StatusCode — Good, or
    /// Uncertain_DataSubNormal "if Bad values are skipped or if Uncertain values are used", which
    /// includes the time before the start of the data ("No Start Bound: Calculate Partial
    /// Interval": the interval is computed from the start of the data, AggregateExamples.csv
    /// Historian 2, 12:00:00: Total 31.957 = 10.652 × 3 s) and the extrapolated time after its end
    /// ("No End Bound: Extrapolate data, Uncertain status", Stepped or not, Historian 3 12:01:30);
    /// PercentDataGood/PercentDataBad do not apply. The interval that holds the end of the data is
    /// extrapolated to its end with no Partial bit, and the intervals after it are extrapolated too
    /// ("After End of Data: Value extrapolated, Uncertain status"; Annex A.4 v1.04, Historian 1),
    /// where the v1.05.02 CSV sets Partial and answers Bad_NoData (the errata decisions in
    /// A.4-TimeAverage.txt and A.6-Total.txt).
    ///
    /// TimeAverage2 and Total2: "PercentTime" (§5.4.3.2, see [`Ctx::time_quality`]), the time after
    /// the end of the data left out. An interval whose data is all Bad for the calculation is Bad
    /// with no value (the CSV's "Bad, Calculated", Historian 2 12:00:40: the only value an
    /// Uncertain bound, TreatUncertainAsBad True); with no value at all it is Bad_NoData.
    pub(super) fn time_average(
        &self,
        s: i64,
        e: i64,
        interpolated: bool,
        scale: Scale,
    ) -> DataValue {
        let mut area = 0.0f64;
        let mut good_time = 0i64;
        let mut bad_time = 0i64;
        let mut total_time = 0i64;
        let mut any_value = false;
        let mut uncertain = false;
        let mut invalid = false;
        // With Interpolated Bounding Values the Bad raw values (Uncertain ones too with
        // TreatUncertainAsBad) are already left out and the line drawn across them; what remains
        // are usable raw values and bounds whose Uncertain_DataSubNormal says that something was
        // skipped, not that they are to be skipped in turn (AggregateExamples.csv, TimeAverage Historian 2:
        // 33.889 over 12:00:40–12:00:45, the line from 30 at 12:00:39 to 40 at 12:00:48).
        let bad = |st: StatusCode| {
            if interpolated {
                st.is_bad()
            } else {
                self.is_bad(st)
            }
        };
        self.segments(s, e, interpolated, DataEnd::NoData, |seg| {
            let d = seg.q.t - seg.p.t;
            if d <= 0 || (!interpolated && self.after_end(seg.p.t)) {
                return;
            }
            total_time += d;
            let pv = match seg.p.num {
                Num::Val(v) => {
                    any_value = true;
                    Some(v)
                }
                Num::NotNumeric => {
                    invalid = true;
                    None
                }
                Num::Null => None,
            };
            let Some(pv) = pv.filter(|_| !bad(seg.p.status)) else {
                bad_time += d;
                return;
            };
            let q_usable = !bad(seg.q.status) && matches!(seg.q.num, Num::Val(_));
            let sloped = !self.cfg.stepped && q_usable;
            let value = match (sloped, seg.q.num) {
                (true, Num::Val(qv)) => (pv + qv) / 2.0,
                _ => pv,
            };
            if interpolated {
                if seg.p.status.is_uncertain() || (sloped && seg.q.status.is_uncertain()) {
                    uncertain = true;
                }
            } else if self.cfg.treat_uncertain_as_bad && self.region_uncertain(&seg) {
                bad_time += d;
            }
            area += value * d as f64;
            good_time += d;
        });
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        let partial = if interpolated {
            let short = e - s < self.pi;
            let before_start = self.data_start.is_some_and(|first| s < first);
            if short || before_start {
                bits::PARTIAL
            } else {
                0
            }
        } else {
            self.partial(s, e)
        };
        if good_time == 0 {
            if any_value {
                return dv(
                    Variant::Empty,
                    with_bits(StatusCode::Bad, bits::CALCULATED | partial),
                    s,
                );
            }
            return no_data(s);
        }
        let code = if interpolated {
            // A Bad raw value inside the interval that the line was drawn across, even between
            // Good bounds, is a Bad value skipped; so is a Bad region (before the start of the data).
            let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
            let skipped = self
                .raw
                .get(i0..i1)
                .unwrap_or_default()
                .iter()
                .any(|d| !is_marker(status_of(d)) && self.is_bad(status_of(d)));
            let extrapolated = self.data_end.is_some_and(|last| last < e);
            if uncertain || skipped || extrapolated || bad_time > 0 {
                StatusCode::UncertainDataSubNormal
            } else {
                StatusCode::Good
            }
        } else {
            self.quality(total_time, bad_time)
        };
        if code.is_bad() {
            return dv(
                Variant::Empty,
                with_bits(code, bits::CALCULATED | partial),
                s,
            );
        }
        let avg = area / good_time as f64;
        let secs = |ticks: i64| ticks as f64 / (1000 * TICKS_PER_MS) as f64;
        // "Data Type: Double" for TimeAverage(2) and Total(2) alike (§5.4.3.6–9, Table 13),
        // whatever the source's numeric type.
        let value = match scale {
            Scale::Average => avg,
            Scale::GoodTime => avg * secs(good_time),
        };
        dv(
            Variant::Double(value),
            with_bits(code, bits::CALCULATED | partial),
            s,
        )
    }

    /// Whether a region starting at `t` lies after the end of the data (the Bad_NoData region that
    /// follows the last raw value's one-millisecond hold).
    pub(super) fn after_end(&self, t: i64) -> bool {
        self.data_end.is_some_and(|last| t > last)
    }

    /// An Uncertain region (§5.4.3.2): its first point is Uncertain, or, with SlopedInterpolation,
    /// the point it slopes towards is not Good (a region that ends at a Bad value or a missing bound
    /// is held, Uncertain_DataSubNormal, as the Simple Bounding Values of §3.1.9 are). Stepped
    /// regions take the status of their first point alone (AggregateExamples.csv: TimeAverage2
    /// Historian 3, 12:01:30, Good for the hold of the last value; Historian 2, sloped, Bad).
    pub(super) fn region_uncertain(&self, seg: &Seg) -> bool {
        seg.p.status.is_uncertain() || (!self.cfg.stepped && !seg.q.status.is_good())
    }

    /// The "PercentTime" StatusCode of §5.4.3.2 (v1.05) over the regions `segments` gives: Bad
    /// regions, and with TreatUncertainAsBad the Uncertain ones, are Bad time; without it
    /// "Uncertain regions are included with the Good regions" and "if no Bad regions are in the
    /// interval then the StatusCode for the interval is Good" (v1.04 added "the StatusCode of the
    /// value is still treated as Uncertain", which v1.05 dropped and the CSV follows: TimeAverage2
    /// Historian 1 12:01:00, Good, where v1.04 A.5 has Uncertain). Time after the end of the data
    /// is no part of the interval (TimeAverage2 Historian 1, 12:01:30: Good for the last value's
    /// hold).
    pub(super) fn time_quality(&self, s: i64, e: i64, end: DataEnd) -> StatusCode {
        let (mut total, mut bad) = (0i64, 0i64);
        self.segments(s, e, false, end, |seg| {
            let d = seg.q.t - seg.p.t;
            if d <= 0 || (end == DataEnd::NoData && self.after_end(seg.p.t)) {
                return;
            }
            total += d;
            if self.is_bad(seg.p.status)
                || (self.cfg.treat_uncertain_as_bad && self.region_uncertain(&seg))
            {
                bad += d;
            }
        });
        self.quality(total, bad)
    }
}

/// What a region after the end of the data is (see `Ctx::segments`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum DataEnd {
    /// The last value held one millisecond, then Bad_NoData.
    NoData,
    /// The last value held (extrapolated) to the end of the interval.
    Extrapolate,
}

/// A point of a region: a bounding value or a raw value.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pt {
    pub(super) t: i64,
    pub(super) status: StatusCode,
    pub(super) num: Num,
}

/// A region between two points (§5.4.3.2).
#[derive(Clone, Copy, Debug)]
pub(super) struct Seg {
    pub(super) p: Pt,
    pub(super) q: Pt,
}

/// What a time-weighted average is turned into (see `Ctx::time_average`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Scale {
    Average,
    /// × the seconds of the non-Bad regions: the integral (Total, Total2).
    GoodTime,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Duration {
    Good,
    Bad,
    PercentGood,
    PercentBad,
    StateZero,
    StateNonZero,
}
