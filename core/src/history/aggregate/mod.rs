//! The Aggregate engine of OPC 10000-13 (Part 13), pure and sans-IO.
//!
//! [`process`] turns a node's raw history into one [`DataValue`] per processing interval, as
//! ReadProcessedDetails (Part 11 §6.5.4) and the AggregateFilter of Part 4 need. It reads no
//! clock, does no I/O and allocates nothing but the output (and the clone of a raw value it returns).
//!
//! The rules implemented here are those of Part 13:
//! - §3.1.8 Interpolated Bounding Values and §3.1.9 Simple Bounding Values (both read with the
//!   AggregateConfiguration's TreatUncertainAsBad, §4.2.1.2, deciding whether Uncertain is Bad);
//! - §5.3 the Aggregate bits of the StatusCode (Calculated, Interpolated, Partial, ExtraData,
//!   MultiValue: the HistorianBits of Part 4's StatusCode InfoBits, with the DataValue InfoType);
//! - §5.4.3.2 the quality of an interval from PercentDataGood / PercentDataBad;
//! - the characteristics table of each Aggregate in §5.4.3.
//!
//! Every Aggregate in [`Aggregate::ALL`] reproduces the example tables of Part 13 Annex A held in
//! `core/tests/data/part13/` (`core/tests/aggregates.rs` runs them; `RESULTS.md` there is the
//! summary). Their source is the AggregateExamples.csv that v1.05's Annex A points to, in the OPC
//! Foundation's UA-Nodeset repository (UA-1.05.02): every aggregate, Historians 1 to 5, cross-read
//! with the v1.04 reference pages where the corpus held them. The engine follows the v1.05 prose,
//! which differs from v1.04 where used here in two places: §5.4.3.2 no longer keeps an Uncertain
//! region "still treated as Uncertain" when TreatUncertainAsBad is False (the v1.04 tables of A.5,
//! A.13, A.15 and A.16 show Uncertain where the CSV shows Good), and WorstQuality/WorstQuality2
//! ignore TreatUncertainAsBad. Where a CSV row contradicts the prose (or the CSV itself) the prose
//! decides: the data file keeps the CSV's row and adds what the engine answers, a known deviation
//! with its reason that the test checks both ways (RESULTS.md lists them): the end of the data for
//! TimeAverage and Total (extrapolated, as v1.04 A.4 and §5.4.3.6/§5.4.3.8 say), Total on
//! Historian 3 (computed by the CSV with SteppedInterpolation where "this calculation always uses
//! a SlopedInterpolation"), an Uncertain value beyond the Good extreme (Maximum,
//! MaximumActualTime, Range), PercentDataBad 50 (TimeAverage2, Total2, Historian 3), the Simple
//! Bounding Value after an Uncertain value with TreatUncertainAsBad (DurationBad, PercentBad,
//! Historians 3 and 4), WorstQuality2's bounds on Historian 2.
//! Where the Annex and the prose differ and the prose does not decide, the Annex is followed and the
//! place says so:
//! - MinimumActualTime / MaximumActualTime: no Calculated bit on Uncertain results (A.10, A.11);
//! - VarianceSample: Uncertain_DataSubNormal where the interval holds non-Good values (A.36), where
//!   the §5.4.3 table says "Always Good";
//! - the `2` extremes: a time-weighted quality (A.13, A.15, A.16), where §5.4.3.2 counts values;
//! - the Simple-Bound regions: where the data ends inside an interval the last raw value lasts one
//!   millisecond (A.5, A.21, A.29: 10001 ms, 7001 ms, 3001 ms), and the time after it is no part of
//!   the interval for the percentages and PercentTime qualities;
//! - MaximumActualTime2: an extreme at the end bound is stamped one millisecond before the end of
//!   the interval (A.16, the EffectiveEndTime of §3.1.3);
//! - a raw `Bad_NoData` value (Annex A's "point created" entry) is the absence of data: no Bad value
//!   for the Aggregates that look at raw values, a Bad region for the time-weighted ones;
//! - Average: no Partial bit where the interval begins before the data or runs past its end (A.3),
//!   where Minimum, Maximum and Count set it (A.8, A.9, A.19);
//! - the §5.4.3.2 quality tests PercentDataGood before PercentDataBad (A.19, Historian 3: a half-Bad
//!   interval with both at 50 is Good);
//! - WorstQuality: MultipleValues only when the worst quality is Uncertain or Bad;
//! - Total: the time before the start of the data is no part of the integral ("No Start Bound:
//!   Calculate Partial Interval").

// The engine's parts: `ctx` (raw values as numbers, the bounding values of §3.1.8/§3.1.9, the end
// of the data, Partial, the §5.4.3.2 quality, the dispatch per interval), `raw_values` (the
// Aggregates on raw values), `regions` (the time-weighted ones), `bounded` (those returning or
// comparing bounds); `tests` holds the unit tests, the Annex A tables are run by
// core/tests/aggregates.rs.

use crate::generated::node_ids as ids;
use crate::{DataValue, DateTime, NodeId, StatusCode};

mod bounded;
mod ctx;
mod raw_values;
mod regions;
#[cfg(test)]
mod tests;

use ctx::Ctx;

/// The Aggregates of Part 13 §5.4.3 this module names (each is an AggregateFunction Object of
/// namespace 0, Part 13 §4.2.2). Only those in [`Aggregate::ALL`] are computed; [`process`]
/// answers `BadAggregateNotSupported` for the others (today every named one is in `ALL`).
/// AnnotationCount is not named: the server keeps no Annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Aggregate {
    Interpolative,
    Average,
    TimeAverage,
    TimeAverage2,
    Total,
    Total2,
    Minimum,
    Maximum,
    MinimumActualTime,
    MaximumActualTime,
    Range,
    Minimum2,
    Maximum2,
    MinimumActualTime2,
    MaximumActualTime2,
    Range2,
    Count,
    Start,
    End,
    Delta,
    StartBound,
    EndBound,
    DurationGood,
    DurationBad,
    PercentGood,
    PercentBad,
    WorstQuality,
    WorstQuality2,
    StandardDeviationSample,
    VarianceSample,
    StandardDeviationPopulation,
    VariancePopulation,
    DeltaBounds,
    NumberOfTransitions,
    DurationInStateZero,
    DurationInStateNonZero,
}

/// Every named Aggregate with its namespace-0 NodeId (NodeIds.csv, `AggregateFunction_<Name>`)
/// and its BrowseName.
const NAMES: &[(Aggregate, u32, &str)] = &[
    (
        Aggregate::Interpolative,
        ids::AggregateFunction_Interpolative,
        "Interpolative",
    ),
    (
        Aggregate::Average,
        ids::AggregateFunction_Average,
        "Average",
    ),
    (
        Aggregate::TimeAverage,
        ids::AggregateFunction_TimeAverage,
        "TimeAverage",
    ),
    (
        Aggregate::TimeAverage2,
        ids::AggregateFunction_TimeAverage2,
        "TimeAverage2",
    ),
    (Aggregate::Total, ids::AggregateFunction_Total, "Total"),
    (Aggregate::Total2, ids::AggregateFunction_Total2, "Total2"),
    (
        Aggregate::Minimum,
        ids::AggregateFunction_Minimum,
        "Minimum",
    ),
    (
        Aggregate::Maximum,
        ids::AggregateFunction_Maximum,
        "Maximum",
    ),
    (
        Aggregate::MinimumActualTime,
        ids::AggregateFunction_MinimumActualTime,
        "MinimumActualTime",
    ),
    (
        Aggregate::MaximumActualTime,
        ids::AggregateFunction_MaximumActualTime,
        "MaximumActualTime",
    ),
    (Aggregate::Range, ids::AggregateFunction_Range, "Range"),
    (
        Aggregate::Minimum2,
        ids::AggregateFunction_Minimum2,
        "Minimum2",
    ),
    (
        Aggregate::Maximum2,
        ids::AggregateFunction_Maximum2,
        "Maximum2",
    ),
    (
        Aggregate::MinimumActualTime2,
        ids::AggregateFunction_MinimumActualTime2,
        "MinimumActualTime2",
    ),
    (
        Aggregate::MaximumActualTime2,
        ids::AggregateFunction_MaximumActualTime2,
        "MaximumActualTime2",
    ),
    (Aggregate::Range2, ids::AggregateFunction_Range2, "Range2"),
    (Aggregate::Count, ids::AggregateFunction_Count, "Count"),
    (Aggregate::Start, ids::AggregateFunction_Start, "Start"),
    (Aggregate::End, ids::AggregateFunction_End, "End"),
    (Aggregate::Delta, ids::AggregateFunction_Delta, "Delta"),
    (
        Aggregate::StartBound,
        ids::AggregateFunction_StartBound,
        "StartBound",
    ),
    (
        Aggregate::EndBound,
        ids::AggregateFunction_EndBound,
        "EndBound",
    ),
    (
        Aggregate::DurationGood,
        ids::AggregateFunction_DurationGood,
        "DurationGood",
    ),
    (
        Aggregate::DurationBad,
        ids::AggregateFunction_DurationBad,
        "DurationBad",
    ),
    (
        Aggregate::PercentGood,
        ids::AggregateFunction_PercentGood,
        "PercentGood",
    ),
    (
        Aggregate::PercentBad,
        ids::AggregateFunction_PercentBad,
        "PercentBad",
    ),
    (
        Aggregate::WorstQuality,
        ids::AggregateFunction_WorstQuality,
        "WorstQuality",
    ),
    (
        Aggregate::WorstQuality2,
        ids::AggregateFunction_WorstQuality2,
        "WorstQuality2",
    ),
    (
        Aggregate::StandardDeviationSample,
        ids::AggregateFunction_StandardDeviationSample,
        "StandardDeviationSample",
    ),
    (
        Aggregate::VarianceSample,
        ids::AggregateFunction_VarianceSample,
        "VarianceSample",
    ),
    (
        Aggregate::StandardDeviationPopulation,
        ids::AggregateFunction_StandardDeviationPopulation,
        "StandardDeviationPopulation",
    ),
    (
        Aggregate::VariancePopulation,
        ids::AggregateFunction_VariancePopulation,
        "VariancePopulation",
    ),
    (
        Aggregate::DeltaBounds,
        ids::AggregateFunction_DeltaBounds,
        "DeltaBounds",
    ),
    (
        Aggregate::NumberOfTransitions,
        ids::AggregateFunction_NumberOfTransitions,
        "NumberOfTransitions",
    ),
    (
        Aggregate::DurationInStateZero,
        ids::AggregateFunction_DurationInStateZero,
        "DurationInStateZero",
    ),
    (
        Aggregate::DurationInStateNonZero,
        ids::AggregateFunction_DurationInStateNonZero,
        "DurationInStateNonZero",
    ),
];

impl Aggregate {
    /// The Aggregates this engine computes, each one checked on every Annex A example table of
    /// Part 13 that `core/tests/aggregates.rs` holds for it (`RESULTS.md` in
    /// `core/tests/data/part13/` says which historians, and which rows are known deviations where
    /// the prose decides). A server advertises these and no others (the AggregateFunctions folders of its ServerCapabilities and
    /// HistoryServerCapabilities; an AggregateFilter accepts the same).
    pub const ALL: &'static [Aggregate] = &[
        Aggregate::Interpolative,
        Aggregate::Average,
        Aggregate::TimeAverage,
        Aggregate::TimeAverage2,
        Aggregate::Total,
        Aggregate::Total2,
        Aggregate::Minimum,
        Aggregate::Maximum,
        Aggregate::MinimumActualTime,
        Aggregate::MaximumActualTime,
        Aggregate::Range,
        Aggregate::Minimum2,
        Aggregate::Maximum2,
        Aggregate::MinimumActualTime2,
        Aggregate::MaximumActualTime2,
        Aggregate::Range2,
        Aggregate::Count,
        Aggregate::DurationInStateZero,
        Aggregate::DurationInStateNonZero,
        Aggregate::NumberOfTransitions,
        Aggregate::Start,
        Aggregate::End,
        Aggregate::Delta,
        Aggregate::StartBound,
        Aggregate::EndBound,
        Aggregate::DeltaBounds,
        Aggregate::DurationGood,
        Aggregate::DurationBad,
        Aggregate::PercentGood,
        Aggregate::PercentBad,
        Aggregate::WorstQuality,
        Aggregate::WorstQuality2,
        Aggregate::StandardDeviationSample,
        Aggregate::VarianceSample,
        Aggregate::StandardDeviationPopulation,
        Aggregate::VariancePopulation,
    ];

    /// Every Aggregate this module names, computed or not.
    pub fn named() -> impl Iterator<Item = Aggregate> {
        NAMES.iter().map(|(a, _, _)| *a)
    }

    /// The Aggregate of a namespace-0 `AggregateFunction_*` NodeId, if it is one this engine
    /// computes (in [`Aggregate::ALL`]); `None` otherwise, which a server answers with
    /// `BadAggregateNotSupported`.
    pub fn from_node_id(id: &NodeId) -> Option<Aggregate> {
        let n = id.as_ns0()?;
        Aggregate::ALL
            .iter()
            .copied()
            .find(|a| a.node_id_u32() == n)
    }

    fn entry(self) -> Option<&'static (Aggregate, u32, &'static str)> {
        NAMES.iter().find(|(a, _, _)| *a == self)
    }

    fn node_id_u32(self) -> u32 {
        self.entry().map_or(0, |e| e.1)
    }

    /// The namespace-0 NodeId of the AggregateFunction Object (Part 13 §4.2.2).
    pub fn node_id(self) -> NodeId {
        NodeId::ns0(self.node_id_u32())
    }

    /// The BrowseName of the AggregateFunction Object, e.g. `"TimeAverage2"`.
    pub fn name(self) -> &'static str {
        self.entry().map_or("", |e| e.2)
    }

    /// Whether [`process`] computes this Aggregate (it is in [`Aggregate::ALL`]).
    pub fn is_supported(self) -> bool {
        Aggregate::ALL.contains(&self)
    }
}

/// The AggregateConfiguration of Part 13 §4.2.1.2 together with the variable's
/// HistoricalDataConfiguration.Stepped (Part 11 §5.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AggregateConfig {
    /// Uncertain raw values are treated as Bad (and so left out of the calculation).
    pub treat_uncertain_as_bad: bool,
    /// The percentage of Bad data in an interval at or above which the interval is Bad (§5.4.3.2).
    pub percent_data_bad: u8,
    /// The percentage of Good data in an interval at or above which the interval is Good (§5.4.3.2).
    pub percent_data_good: u8,
    /// SlopedExtrapolation instead of SteppedExtrapolation after the end of the data (§3.1.8).
    pub use_sloped_extrapolation: bool,
    /// SteppedInterpolation between raw values instead of SlopedInterpolation.
    pub stepped: bool,
}

impl Default for AggregateConfig {
    /// The defaults of the AggregateConfigurationType (Part 13 §4.2.1.2): TreatUncertainAsBad
    /// True, PercentDataBad 100, PercentDataGood 100, UseSlopedExtrapolation False; Stepped False
    /// (Part 11 §5.2.2).
    fn default() -> Self {
        AggregateConfig {
            treat_uncertain_as_bad: true,
            percent_data_bad: 100,
            percent_data_good: 100,
            use_sloped_extrapolation: false,
            stepped: false,
        }
    }
}

impl AggregateConfig {
    /// The configuration a request asks for (ReadProcessedDetails, an AggregateFilter), with
    /// `stepped` from the variable: the defaults when it asks for the server's, else its own.
    /// A percentage above 100 configures nothing: `Bad_AggregateConfigurationRejected`.
    pub fn of_request(
        c: &crate::generated::types::AggregateConfiguration,
        stepped: bool,
    ) -> Result<AggregateConfig, StatusCode> {
        if c.use_server_capabilities_defaults {
            return Ok(AggregateConfig {
                stepped,
                ..AggregateConfig::default()
            });
        }
        if c.percent_data_bad > 100 || c.percent_data_good > 100 {
            return Err(StatusCode::BadAggregateConfigurationRejected);
        }
        Ok(AggregateConfig {
            treat_uncertain_as_bad: c.treat_uncertain_as_bad,
            percent_data_bad: c.percent_data_bad,
            percent_data_good: c.percent_data_good,
            use_sloped_extrapolation: c.use_sloped_extrapolation,
            stepped,
        })
    }

    /// As an AggregateConfiguration (the revised one of an AggregateFilterResult).
    pub fn to_configuration(
        &self,
        use_server_capabilities_defaults: bool,
    ) -> crate::generated::types::AggregateConfiguration {
        crate::generated::types::AggregateConfiguration {
            use_server_capabilities_defaults,
            treat_uncertain_as_bad: self.treat_uncertain_as_bad,
            percent_data_bad: self.percent_data_bad,
            percent_data_good: self.percent_data_good,
            use_sloped_extrapolation: self.use_sloped_extrapolation,
        }
    }
}

/// The Aggregate bits of a StatusCode (Part 13 §5.3, Part 4's StatusCode "HistorianBits"): the low
/// five InfoBits, valid with the DataValue InfoType (bit 10).
pub mod bits {
    /// Bits 0–1 = 01: the value was calculated (00 is Raw).
    pub const CALCULATED: u32 = 0x01;
    /// Bits 0–1 = 10: the value was interpolated.
    pub const INTERPOLATED: u32 = 0x02;
    /// Bit 2: the value was calculated with an incomplete interval.
    pub const PARTIAL: u32 = 0x04;
    /// Bit 3: a raw value that hides other values at the same timestamp.
    pub const EXTRA_DATA: u32 = 0x08;
    /// Bit 4: multiple values match the Aggregate's criteria.
    pub const MULTI_VALUE: u32 = 0x10;
    /// InfoType = DataValue (bits 10–11 = 01), which makes the bits above meaningful.
    pub const INFO_TYPE_DATA_VALUE: u32 = 0x0400;
}

/// `code` with the Aggregate `bits` set (and the DataValue InfoType when any is).
pub fn with_bits(code: StatusCode, aggregate_bits: u32) -> StatusCode {
    let b = aggregate_bits & 0x1F;
    if b == 0 {
        code
    } else {
        StatusCode(code.0 | bits::INFO_TYPE_DATA_VALUE | b)
    }
}

/// 100-ns ticks in one millisecond.
const TICKS_PER_MS: i64 = 10_000;

/// The number of intervals [`process`] would return, so that a server can bound a request
/// (or page it with continuation points) before computing it. Errors as [`process`] does.
pub fn interval_count(
    start: DateTime,
    end: DateTime,
    processing_interval_ms: f64,
) -> Result<u64, StatusCode> {
    let (lo, hi) = (start.0.min(end.0), start.0.max(end.0));
    let pi = interval_ticks(lo, hi, processing_interval_ms)?;
    let span = hi.saturating_sub(lo);
    Ok((span / pi + i64::from(span % pi != 0)) as u64)
}

fn interval_ticks(lo: i64, hi: i64, processing_interval_ms: f64) -> Result<i64, StatusCode> {
    if hi <= lo || !processing_interval_ms.is_finite() || processing_interval_ms < 0.0 {
        return Err(StatusCode::BadInvalidArgument);
    }
    if processing_interval_ms == 0.0 {
        // Part 13 §5.4.2.2 (Table 49): ProcessingInterval 0 or at least the range is one interval
        // over the whole range.
        return Ok(hi - lo);
    }
    let t = (processing_interval_ms * TICKS_PER_MS as f64).round();
    if !(1.0..9.0e18).contains(&t) {
        return Err(StatusCode::BadInvalidArgument);
    }
    Ok((t as i64).min(hi - lo))
}

/// The most intervals one call computes; a request for more is answered `BadTooManyOperations`
/// (a server splits such a read with continuation points, Part 11, before calling).
pub const MAX_INTERVALS: u64 = 1 << 20;

/// Computes `aggregate` over `raw` for the processing intervals of `[start, end)`.
///
/// `raw`: the node's raw values sorted by SourceTimestamp (ascending), holding every value in
/// [min(start,end), max(start,end)] and, on each side, the values beyond the range up to and
/// including the first non-Bad one (or to the end of the data): what bounding values and
/// interpolation need. The last raw value is taken as the end of the data ("no more entries") when
/// it lies inside the range, and the first raw value that is not a `Bad_NoData` marker as its
/// start (Annex A's historians begin with a `Bad_NoData` "point created" entry).
///
/// Returns one DataValue per processing interval (Part 13 §5.4.2.2), in the direction start→end.
/// End < start gives the intervals in reverse order, anchored at start (time running backwards,
/// Part 11 §3.1.10); each is computed over its own time range `[earlier, later)` as a forward
/// read would and stamped with its earlier time — the boundary inclusion and bounds of a
/// backwards interval are not mirrored. `processing_interval_ms` 0 (or at least the range) is one
/// interval over the whole range; the last interval may be shorter than the ProcessingInterval
/// (then it is Partial, §5.3). More than [`MAX_INTERVALS`] intervals: `BadTooManyOperations`.
///
/// Errors: `BadInvalidArgument` for start == end or a negative / non-finite interval,
/// `BadAggregateNotSupported` for an Aggregate not in [`Aggregate::ALL`],
/// `BadAggregateInvalidInputs` for a raw value without a SourceTimestamp. An interval whose values
/// the Aggregate cannot use (not numeric) is answered with `BadAggregateInvalidInputs` in place.
pub fn process(
    aggregate: Aggregate,
    raw: &[DataValue],
    start: DateTime,
    end: DateTime,
    processing_interval_ms: f64,
    config: &AggregateConfig,
) -> Result<Vec<DataValue>, StatusCode> {
    let mut out = Vec::new();
    process_into(
        aggregate,
        raw,
        start,
        end,
        processing_interval_ms,
        config,
        &mut out,
    )?;
    Ok(out)
}

/// [`process`] appending to `out` (reused by the caller). On error `out` is left as it was.
pub fn process_into(
    aggregate: Aggregate,
    raw: &[DataValue],
    start: DateTime,
    end: DateTime,
    processing_interval_ms: f64,
    config: &AggregateConfig,
    out: &mut Vec<DataValue>,
) -> Result<(), StatusCode> {
    if !aggregate.is_supported() {
        return Err(StatusCode::BadAggregateNotSupported);
    }
    compute_into(
        aggregate,
        raw,
        start,
        end,
        processing_interval_ms,
        config,
        out,
    )
}

/// [`process_into`] without the [`Aggregate::ALL`] check (the module's own tests reach every named
/// Aggregate through it).
fn compute_into(
    aggregate: Aggregate,
    raw: &[DataValue],
    start: DateTime,
    end: DateTime,
    processing_interval_ms: f64,
    config: &AggregateConfig,
    out: &mut Vec<DataValue>,
) -> Result<(), StatusCode> {
    let (lo, hi) = (start.0.min(end.0), start.0.max(end.0));
    let pi = interval_ticks(lo, hi, processing_interval_ms)?;
    if raw.iter().any(|d| d.source_timestamp.is_none()) {
        return Err(StatusCode::BadAggregateInvalidInputs);
    }
    let count = interval_count(start, end, processing_interval_ms)?;
    if count > MAX_INTERVALS {
        return Err(StatusCode::BadTooManyOperations);
    }
    let ctx = Ctx::new(raw, config, pi);
    out.reserve(usize::try_from(count).unwrap_or(0));
    if end.0 < start.0 {
        // Time runs backwards from startTime (Part 11 §3.1.10): the intervals are anchored at
        // startTime and the short one, if any, is the last, at endTime.
        let mut e = hi;
        while e > lo {
            let s = e.saturating_sub(pi).max(lo);
            out.push(ctx.interval(aggregate, s, e));
            e = s;
        }
    } else {
        let mut s = lo;
        while s < hi {
            let e = s.saturating_add(pi).min(hi);
            out.push(ctx.interval(aggregate, s, e));
            s = e;
        }
    }
    Ok(())
}
