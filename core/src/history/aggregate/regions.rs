//! The time-weighted Aggregates over the regions of an interval (Part 13 §5.4.3.2): TimeAverage,
//! TimeAverage2, Total, Total2 and the durations and percentages (DurationGood/Bad,
//! PercentGood/Bad, DurationInStateZero/NonZero).

use super::ctx::{dv, is_marker, no_data, same_type_as, status_of, Ctx, Num};
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
            let stop = p.t.saturating_add(TICKS_PER_MS).min(e);
            f(Seg {
                p,
                q: Pt { t: stop, ..p },
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
    /// DurationInStateNonZero (§5.4.3.22 / §5.4.3.23): the milliseconds of non-Bad data equal
    /// (unequal) to zero, the quality by §5.4.3.2. All over the Simple Bounding Value timeline
    /// (Annex A.20, A.21, A.29–A.32). The time after the end of the data is neither Good nor Bad
    /// (A.30: DurationBad 0 for Historian 1 at 12:01:20, whose data ends at 12:01:30) and is left out
    /// of the interval the percentages divide by (A.31/A.32, Historian 2 at 12:01:20: 7001 ms Good and
    /// 3000 ms Bad are 70.003 % and 29.997 %); the Bad_NoData "point created" entry that begins the
    /// data is Bad time (A.30 Historian 1 at 12:00:00: 10000 ms).
    pub(super) fn duration(&self, s: i64, e: i64, what: Duration) -> DataValue {
        let mut sum = 0i64;
        let mut bad = 0i64;
        let mut bad_data = 0i64;
        let mut after_end = 0i64;
        let mut uncertain = false;
        let mut invalid = false;
        self.segments(s, e, false, DataEnd::NoData, |seg| {
            // "Each region starts with a data point … If that data point is Bad the region is Bad"
            // (§5.4.3.32): a region has the status and value of its first point.
            let (d, st, v) = (seg.q.t - seg.p.t, seg.p.status, seg.p.num);
            if self.is_bad(st) {
                bad += d;
                if self.data_end.is_some_and(|last| seg.p.t > last) {
                    after_end += d;
                } else {
                    bad_data += d;
                }
                return;
            }
            if st.is_uncertain() && d > 0 {
                uncertain = true;
            }
            match what {
                Duration::Good | Duration::PercentGood => {
                    if st.is_good() {
                        sum += d;
                    }
                }
                Duration::Bad | Duration::PercentBad => {}
                Duration::StateZero | Duration::StateNonZero => match v {
                    Num::Val(x) => {
                        if (x == 0.0) == (what == Duration::StateZero) {
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
                self.share_quality(e - s, bad, uncertain),
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
    /// or when the next point is Bad). The quality is time weighted (§5.4.3.2), a region sloped
    /// between two points as Uncertain as the worse of them. Bad_NoData without a non-Bad region.
    /// TimeAverage sets no Partial bit for the time after the end of the data, which it
    /// extrapolates (Annex A.4); TimeAverage2 does (Annex A.5).
    /// Total (§5.4.3.8) is TimeAverage × the interval's seconds and Total2 (§5.4.3.9) TimeAverage2 ×
    /// the seconds of non-Bad data ("the interval of Good data is the sum of all sub-intervals
    /// where non-Bad data exists"), with the same StatusCode: `scale` says which.
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
        let mut uncertain = false;
        let mut invalid = false;
        // With Interpolated Bounding Values the Bad raw values (Uncertain ones too with
        // TreatUncertainAsBad) are already left out and the line drawn across them; what remains
        // are usable raw values and bounds whose Uncertain_DataSubNormal says that something was
        // skipped, not that they are to be skipped in turn (Annex A.4 Historian 2, v1.05.07:
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
            if d <= 0 {
                return;
            }
            if bad(seg.p.status) {
                bad_time += d;
                return;
            }
            let Num::Val(pv) = seg.p.num else {
                if seg.p.num == Num::NotNumeric {
                    invalid = true;
                }
                bad_time += d;
                return;
            };
            let q_usable = !bad(seg.q.status) && matches!(seg.q.num, Num::Val(_));
            let sloped = !self.cfg.stepped && q_usable;
            let value = match (sloped, seg.q.num) {
                (true, Num::Val(qv)) => (pv + qv) / 2.0,
                _ => pv,
            };
            if seg.p.status.is_uncertain() || (sloped && seg.q.status.is_uncertain()) {
                uncertain = true;
            }
            area += value * d as f64;
            good_time += d;
        });
        if invalid {
            return dv(Variant::Empty, StatusCode::BadAggregateInvalidInputs, s);
        }
        if good_time == 0 {
            return no_data(s);
        }
        if interpolated {
            // "Uncertain if Bad values are skipped" (§5.4.3.8, as for TimeAverage): a Bad raw value
            // inside the interval that the line was drawn across, even between Good bounds.
            let (i0, i1) = (self.at_or_after(s), self.at_or_after(e));
            if self
                .raw
                .get(i0..i1)
                .unwrap_or_default()
                .iter()
                .any(|d| !is_marker(status_of(d)) && self.is_bad(status_of(d)))
            {
                uncertain = true;
            }
        }
        let code = self.share_quality(e - s, bad_time, uncertain);
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
        let avg = area / good_time as f64;
        let secs = |ticks: i64| ticks as f64 / (1000 * TICKS_PER_MS) as f64;
        let value = match scale {
            Scale::Average => {
                let like = self.at_or_after(s).min(self.raw.len().saturating_sub(1));
                same_type_as(self.value(like), avg)
            }
            // "Data Type: Double".
            Scale::Interval => Variant::Double(avg * secs(e - s)),
            Scale::GoodTime => Variant::Double(avg * secs(good_time)),
        };
        dv(value, with_bits(code, bits::CALCULATED | partial), s)
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
    /// × the interval's seconds (Total).
    Interval,
    /// × the seconds of non-Bad data (Total2).
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
