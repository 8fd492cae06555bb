//! The AggregateFilter of a monitored item (Part 4 §7.22.4, Part 13 §5.2): the samples an
//! item takes in its current processing interval, and at the end of each interval one value
//! computed by the Part 13 engine ([`crate::history::aggregate`]) over them.
//!
//! Pure and sans-IO: samples and the current time come in from the subscription engine's
//! sampling ticks; finished intervals come out as DataValues for the item's queue.
//!
//! # The raw data of an item
//!
//! Each sample is a raw value at its SourceTimestamp (the ServerTimestamp, then the sampling
//! time, when it has none). A sample identical to the previous one (same value, status and
//! timestamp: a stored value that did not change) is the same raw value, not a new one; so
//! Count counts changes of a stored variable and every sample of one whose source stamps each
//! reading. A sample older than the newest kept one is out of order: it cannot be placed in an
//! interval already being computed, is dropped, and the interval it fell into is Partial.
//!
//! When an interval ends the item has been sampled at or after its end, so the value it last
//! took is known to have held until that sampling time: the engine is given that value at
//! that time as the raw value following the interval (the bound after the end), so a live
//! interval is not taken for the end of the data (Partial, Uncertain extrapolation).
//!
//! # Bounded memory
//!
//! At most [`AGGREGATE_SAMPLES_MAX`] raw values are kept per item: the interval's samples and,
//! before them, the bounding value (the last non-Bad value before the interval start and any
//! Bad ones after it). The sampling interval is revised so that an interval holds at most
//! [`AGGREGATE_SAMPLES_PER_INTERVAL`] samples, so the cap is reached only by long runs of Bad
//! values; a sample that would exceed it is dropped and the interval's value carries the
//! Partial bit (Part 13 §5.3: calculated with an incomplete interval) instead of silently
//! leaving the values out.

use crate::generated::types::{AggregateConfiguration, AggregateFilter, AggregateFilterResult};
use crate::history::aggregate::{self, bits, Aggregate, AggregateConfig};
use crate::types::{DataValue, DateTime, StatusCode};

/// Most raw values one aggregate item keeps (its current interval's samples and bounding
/// values).
pub const AGGREGATE_SAMPLES_MAX: usize = 1024;

/// Most samples the revised sampling interval lets fall into one processing interval (the
/// sampling interval is raised to processingInterval / this when it is shorter).
pub const AGGREGATE_SAMPLES_PER_INTERVAL: f64 = 512.0;

/// Longest processing interval granted, ms (one day).
pub const AGGREGATE_PROCESSING_INTERVAL_MS_MAX: f64 = 86_400_000.0;

/// 100-ns ticks per millisecond.
const TICKS_PER_MS: f64 = 10_000.0;

/// A validated AggregateFilter and the revised values answered in its AggregateFilterResult.
#[derive(Clone, Debug, PartialEq)]
pub struct AggregateSpec {
    pub aggregate: Aggregate,
    pub config: AggregateConfig,
    /// The configuration the client is told (the server defaults when it asked for them).
    pub revised_configuration: AggregateConfiguration,
    /// Requested startTime (the grid the intervals are aligned on).
    pub start_time: DateTime,
    pub processing_interval_ms: f64,
}

impl AggregateSpec {
    /// Validates the decoded filter (Part 4 §7.22.4): the Aggregate must be one the engine
    /// computes (`Bad_AggregateNotSupported`), the configuration's percentages at most 100
    /// (`Bad_AggregateConfigurationRejected`). `processing_interval_ms` is the revised one;
    /// `stepped` the variable's SteppedInterpolation (Part 11 §5.2.2), which the filter does not
    /// carry: the server chooses it as for history (sloped for Float and Double values only).
    pub fn new(
        f: &AggregateFilter,
        processing_interval_ms: f64,
        stepped: bool,
    ) -> Result<AggregateSpec, StatusCode> {
        let aggregate = Aggregate::from_node_id(&f.aggregate_type)
            .ok_or(StatusCode::BadAggregateNotSupported)?;
        let c = &f.aggregate_configuration;
        let config = AggregateConfig::of_request(c, stepped)?;
        let revised_configuration = config.to_configuration(c.use_server_capabilities_defaults);
        Ok(AggregateSpec {
            aggregate,
            config,
            revised_configuration,
            start_time: f.start_time,
            processing_interval_ms,
        })
    }

    fn interval_ticks(&self) -> i64 {
        ((self.processing_interval_ms * TICKS_PER_MS).round() as i64).max(1)
    }

    /// The first interval start on the grid of the requested startTime that is not before
    /// `now` (startTime + n × processingInterval, Part 4 §7.22.4): the item keeps no history,
    /// so intervals in the past, before it sampled anything, are not computed.
    pub fn revised_start(&self, now: DateTime) -> DateTime {
        let pi = i128::from(self.interval_ticks());
        let s = i128::from(self.start_time.0);
        let n = i128::from(now.0);
        if s >= n {
            return self.start_time;
        }
        let k = (n - s + pi - 1) / pi;
        DateTime((s + k * pi).min(i128::from(i64::MAX)) as i64)
    }

    pub fn result(&self, revised_start: DateTime) -> AggregateFilterResult {
        AggregateFilterResult {
            revised_start_time: revised_start,
            revised_processing_interval: self.processing_interval_ms,
            revised_aggregate_configuration: self.revised_configuration.clone(),
        }
    }
}

/// The running state of an aggregate item.
#[derive(Debug)]
pub struct AggregateState {
    pub spec: AggregateSpec,
    /// Start of the current interval (100-ns ticks since 1601, UTC).
    start: i64,
    pi: i64,
    /// Raw values, sorted by timestamp: the bounding values before `start`, then the
    /// interval's samples (at most [`AGGREGATE_SAMPLES_MAX`]).
    raw: Vec<DataValue>,
    /// A sample of the current interval was dropped (cap or out of order).
    incomplete: bool,
    /// Samples dropped since the item was created.
    pub dropped: u64,
}

impl AggregateState {
    /// Starts at the revised start for `now`.
    pub fn new(spec: AggregateSpec, now: DateTime) -> AggregateState {
        let start = spec.revised_start(now).0;
        let pi = spec.interval_ticks();
        AggregateState {
            spec,
            start,
            pi,
            raw: Vec::new(),
            incomplete: false,
            dropped: 0,
        }
    }

    /// The start of the current interval.
    pub fn interval_start(&self) -> DateTime {
        DateTime(self.start)
    }

    /// Raw values kept now.
    pub fn kept(&self) -> usize {
        self.raw.len()
    }

    /// Restarts the intervals at the revised start for `now`, forgetting every sample (a
    /// disabled item, or one whose filter changed, starts again from what it samples next).
    pub fn restart(&mut self, now: DateTime) {
        self.start = self.spec.revised_start(now).0;
        self.raw.clear();
        self.incomplete = false;
    }

    /// Takes a sample made at `sampled_at`.
    pub fn offer(&mut self, sample: &DataValue, sampled_at: DateTime) {
        let t = sample
            .source_timestamp
            .or(sample.server_timestamp)
            .unwrap_or(sampled_at);
        let raw = DataValue {
            value: sample.value.clone(),
            status: sample.status,
            source_timestamp: Some(t),
            source_picoseconds: None,
            server_timestamp: None,
            server_picoseconds: None,
        };
        if let Some(last) = self.raw.last() {
            let lt = last.source_timestamp.map_or(i64::MIN, |x| x.0);
            if t.0 == lt && last.value == raw.value && last.status == raw.status {
                return; // the same raw value sampled again
            }
            if t.0 < lt || (t.0 == lt && t.0 >= self.start) {
                // Out of order, or a second value at one timestamp: not placeable.
                self.drop_sample(t.0);
                return;
            }
            if t.0 == lt {
                // Two values at one timestamp before the interval: the newer is the bound.
                self.raw.pop();
            }
        }
        if self.raw.len() >= AGGREGATE_SAMPLES_MAX {
            self.prune();
        }
        if self.raw.len() >= AGGREGATE_SAMPLES_MAX {
            self.drop_sample(t.0);
            return;
        }
        self.raw.push(raw);
    }

    fn drop_sample(&mut self, t: i64) {
        self.dropped += 1;
        if t >= self.start {
            self.incomplete = true;
        }
    }

    fn is_bad(&self, s: Option<StatusCode>) -> bool {
        let s = s.unwrap_or(StatusCode::Good);
        s.is_bad() || (self.spec.config.treat_uncertain_as_bad && s.is_uncertain())
    }

    /// Forgets the raw values before the current interval that no bound needs: kept are the
    /// last non-Bad value before `start` and what follows it (or, with none, the last value
    /// before `start`).
    fn prune(&mut self) {
        let before = self
            .raw
            .partition_point(|d| d.source_timestamp.map_or(i64::MIN, |t| t.0) < self.start);
        if before == 0 {
            return;
        }
        let keep_from = (0..before)
            .rev()
            .find(|&i| self.raw.get(i).is_some_and(|d| !self.is_bad(d.status)))
            .unwrap_or(before - 1);
        self.raw.drain(..keep_from);
    }

    /// Computes every interval that ended at or before `now` (the time of a sampling tick that
    /// has just offered its sample) and appends one DataValue per interval to `out`: the
    /// engine's value and status (with the Calculated / Interpolated / Partial bits), the
    /// interval start as SourceTimestamp and `now` as ServerTimestamp.
    pub fn close_due(&mut self, now: DateTime, out: &mut Vec<DataValue>) {
        loop {
            let end = self.start.saturating_add(self.pi);
            if end > now.0 || end == self.start {
                break;
            }
            // The value last sampled held until now (see the module docs).
            let trailing = self.raw.last().and_then(|last| {
                let lt = last.source_timestamp.map_or(i64::MIN, |t| t.0);
                (lt < now.0).then(|| DataValue {
                    source_timestamp: Some(now),
                    ..last.clone()
                })
            });
            let pushed = trailing.is_some();
            if let Some(t) = trailing {
                self.raw.push(t);
            }
            let computed = aggregate::process(
                self.spec.aggregate,
                &self.raw,
                DateTime(self.start),
                DateTime(end),
                self.spec.processing_interval_ms,
                &self.spec.config,
            );
            if pushed {
                self.raw.pop();
            }
            let mut dv = match computed {
                Ok(v) => v.into_iter().next().unwrap_or_else(|| DataValue {
                    status: Some(StatusCode::BadInternalError),
                    ..Default::default()
                }),
                Err(s) => DataValue {
                    status: Some(s),
                    ..Default::default()
                },
            };
            if self.incomplete {
                let s = dv.status.unwrap_or(StatusCode::Good);
                dv.status = Some(aggregate::with_bits(s, bits::PARTIAL));
            }
            dv.source_timestamp = Some(DateTime(self.start));
            dv.server_timestamp = Some(now);
            out.push(dv);
            self.start = end;
            self.incomplete = false;
            self.prune();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generated::node_ids as ids;
    use crate::types::{NodeId, Variant};

    const MS: i64 = 10_000;

    fn spec(aggregate: u32, pi_ms: f64) -> AggregateSpec {
        let f = AggregateFilter {
            start_time: DateTime(1_000 * MS),
            aggregate_type: NodeId::ns0(aggregate),
            processing_interval: pi_ms,
            aggregate_configuration: AggregateConfiguration {
                use_server_capabilities_defaults: true,
                ..Default::default()
            },
        };
        AggregateSpec::new(&f, pi_ms, false).unwrap()
    }

    fn sample(v: f64, t_ms: i64) -> DataValue {
        DataValue {
            value: Variant::Double(v),
            source_timestamp: Some(DateTime(t_ms * MS)),
            ..Default::default()
        }
    }

    #[test]
    fn revised_start_stays_on_the_grid() {
        let s = spec(ids::AggregateFunction_Average, 100.0);
        assert_eq!(s.revised_start(DateTime(900 * MS)), DateTime(1_000 * MS));
        assert_eq!(s.revised_start(DateTime(1_000 * MS)), DateTime(1_000 * MS));
        assert_eq!(s.revised_start(DateTime(1_001 * MS)), DateTime(1_100 * MS));
        assert_eq!(s.revised_start(DateTime(1_250 * MS)), DateTime(1_300 * MS));
        // No overflow at the end of time.
        let far = s.revised_start(DateTime(i64::MAX - 5));
        assert!(far.0 >= i64::MAX - 5 - 100 * MS);
    }

    /// A stored value that did not change is sampled again with the same timestamp: one raw
    /// value. The value held until the tick that ends the interval: no Partial bit.
    #[test]
    fn repeated_samples_are_one_raw_value() {
        let mut a = AggregateState::new(
            spec(ids::AggregateFunction_Count, 100.0),
            DateTime(990 * MS),
        );
        // The value before the interval (without it the data would begin inside: Partial).
        a.offer(&sample(4.0, 990), DateTime(990 * MS));
        for t in [1_000, 1_010, 1_020, 1_030] {
            a.offer(&sample(5.0, 1_005), DateTime(t * MS));
        }
        a.offer(&sample(6.0, 1_050), DateTime(1_050 * MS));
        let mut out = Vec::new();
        a.close_due(DateTime(1_099 * MS), &mut out);
        assert!(out.is_empty(), "the interval has not ended");
        a.close_due(DateTime(1_100 * MS), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, Variant::Int32(2));
        assert_eq!(out[0].status, Some(StatusCode(0x0401)));
        assert_eq!(out[0].source_timestamp, Some(DateTime(1_000 * MS)));
        // Only the bound before the next interval is kept.
        assert_eq!(a.kept(), 1);
    }

    /// A late tick ends every interval that is over, in order; the ones without values are
    /// Bad_NoData for Average.
    #[test]
    fn a_late_tick_ends_every_interval_over() {
        let mut a = AggregateState::new(
            spec(ids::AggregateFunction_Average, 100.0),
            DateTime(1_000 * MS),
        );
        a.offer(&sample(2.0, 1_010), DateTime(1_010 * MS));
        a.offer(&sample(4.0, 1_020), DateTime(1_020 * MS));
        let mut out = Vec::new();
        a.close_due(DateTime(1_350 * MS), &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].value, Variant::Double(3.0));
        assert_eq!(out[1].status, Some(StatusCode::BadNoData));
        assert_eq!(out[2].source_timestamp, Some(DateTime(1_200 * MS)));
        assert_eq!(a.interval_start(), DateTime(1_300 * MS));
    }

    /// Past the cap, samples are dropped and the interval's value carries the Partial bit; an
    /// out-of-order sample too.
    #[test]
    fn the_cap_and_out_of_order_samples_mark_partial() {
        let mut a = AggregateState::new(
            spec(ids::AggregateFunction_Count, 1_000_000.0),
            DateTime(1_000 * MS),
        );
        for i in 0..(AGGREGATE_SAMPLES_MAX as i64 + 10) {
            a.offer(&sample(i as f64, 1_000 + i), DateTime((1_000 + i) * MS));
        }
        assert_eq!(a.kept(), AGGREGATE_SAMPLES_MAX);
        assert_eq!(a.dropped, 10);
        let mut out = Vec::new();
        a.close_due(DateTime((1_000 + 1_000_000) * MS), &mut out);
        assert_eq!(out[0].value, Variant::Int32(AGGREGATE_SAMPLES_MAX as i32));
        assert_eq!(out[0].status, Some(StatusCode(0x0400 | 0x01 | 0x04)));

        let mut a = AggregateState::new(
            spec(ids::AggregateFunction_Count, 100.0),
            DateTime(1_000 * MS),
        );
        a.offer(&sample(1.0, 1_050), DateTime(1_050 * MS));
        a.offer(&sample(2.0, 1_040), DateTime(1_060 * MS));
        let mut out = Vec::new();
        a.close_due(DateTime(1_100 * MS), &mut out);
        assert_eq!(out[0].value, Variant::Int32(1));
        assert_eq!(out[0].status, Some(StatusCode(0x0400 | 0x01 | 0x04)));
        // The next interval is complete again.
        a.offer(&sample(3.0, 1_150), DateTime(1_150 * MS));
        a.close_due(DateTime(1_200 * MS), &mut out);
        assert_eq!(out[1].status, Some(StatusCode(0x0401)));
    }

    /// Bad values before the interval start are kept only back to the last non-Bad one.
    #[test]
    fn pruning_keeps_the_bounds_only() {
        let mut a = AggregateState::new(
            spec(ids::AggregateFunction_Average, 100.0),
            DateTime(1_000 * MS),
        );
        a.offer(&sample(1.0, 1_010), DateTime(1_010 * MS));
        a.offer(&sample(2.0, 1_020), DateTime(1_020 * MS));
        let mut bad = sample(0.0, 1_030);
        bad.status = Some(StatusCode::BadNoCommunication);
        a.offer(&bad, DateTime(1_030 * MS));
        let mut out = Vec::new();
        a.close_due(DateTime(1_100 * MS), &mut out);
        assert_eq!(out[0].value, Variant::Double(1.5));
        assert_eq!(
            a.kept(),
            2,
            "the last Good value before the start and the Bad one after it"
        );
    }

    #[test]
    fn configuration_is_checked() {
        let mut f = AggregateFilter {
            aggregate_type: NodeId::ns0(ids::AggregateFunction_Average),
            ..Default::default()
        };
        f.aggregate_configuration.percent_data_good = 101;
        assert_eq!(
            AggregateSpec::new(&f, 100.0, false).unwrap_err(),
            StatusCode::BadAggregateConfigurationRejected
        );
        f.aggregate_type = NodeId::ns0(ids::AggregateFunction_AnnotationCount);
        assert_eq!(
            AggregateSpec::new(&f, 100.0, false).unwrap_err(),
            StatusCode::BadAggregateNotSupported
        );
    }
}
