//! Unit tests of the Aggregate engine (the Annex A tables are in `core/tests/aggregates.rs`).

use super::ctx::dv;
use super::*;
use crate::{DataValue, Variant};

const SEC: i64 = 10_000_000;

fn raw(points: &[(i64, f64)]) -> Vec<DataValue> {
    points
        .iter()
        .map(|&(t, v)| dv(Variant::Double(v), StatusCode::Good, t * SEC))
        .collect()
}

#[test]
fn node_ids_and_names_round_trip() {
    for a in Aggregate::ALL {
        assert_eq!(Aggregate::from_node_id(&a.node_id()), Some(*a));
        assert!(!a.name().is_empty());
    }
    assert_eq!(Aggregate::TimeAverage2.name(), "TimeAverage2");
    assert_eq!(Aggregate::TimeAverage2.node_id(), NodeId::ns0(11285));
    assert_eq!(Aggregate::named().count(), NAMES.len());
    for a in Aggregate::named() {
        assert_ne!(a.node_id(), NodeId::ns0(0), "{a:?}");
    }
    // Every Aggregate named here is computed and advertised; AnnotationCount is not named (the
    // server keeps no Annotations), nor is a NodeId outside namespace 0.
    assert!(Aggregate::named().all(|a| a.is_supported()));
    assert_eq!(
        Aggregate::from_node_id(&NodeId::ns0(
            crate::generated::node_ids::AggregateFunction_AnnotationCount
        )),
        None
    );
    assert_eq!(Aggregate::from_node_id(&NodeId::numeric(1, 2341)), None);
}

#[test]
fn rejects_bad_arguments_and_unsupported() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 1.0)]);
    let t = DateTime(10 * SEC);
    assert_eq!(
        process(Aggregate::Interpolative, &r, t, t, 1000.0, &cfg),
        Err(StatusCode::BadInvalidArgument)
    );
    assert_eq!(
        process(Aggregate::Interpolative, &r, DateTime(0), t, -1.0, &cfg),
        Err(StatusCode::BadInvalidArgument)
    );
    assert_eq!(
        process(Aggregate::Interpolative, &r, DateTime(0), t, f64::NAN, &cfg),
        Err(StatusCode::BadInvalidArgument)
    );
    let mut no_ts = r.clone();
    if let Some(d) = no_ts.first_mut() {
        d.source_timestamp = None;
    }
    assert_eq!(
        process(
            Aggregate::Interpolative,
            &no_ts,
            DateTime(0),
            t,
            1000.0,
            &cfg
        ),
        Err(StatusCode::BadAggregateInvalidInputs)
    );
}

#[test]
fn intervals_partial_last_zero_interval_and_reverse() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 0.0), (10, 10.0), (20, 20.0)]);
    // 0..10 s in 4 s intervals: 0, 4, 8 (the last 2 s long).
    let out = process(
        Aggregate::Interpolative,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        4000.0,
        &cfg,
    )
    .unwrap_or_default();
    let ts: Vec<i64> = out
        .iter()
        .filter_map(|d| d.source_timestamp)
        .map(|t| t.0 / SEC)
        .collect();
    assert_eq!(ts, vec![0, 4, 8]);
    assert_eq!(
        out.get(1).map(|d| d.value.clone()),
        Some(Variant::Double(4.0))
    );
    assert_eq!(
        out.get(1).and_then(|d| d.status),
        Some(with_bits(StatusCode::Good, bits::INTERPOLATED))
    );
    // Raw value at the interval start: no Interpolated bit.
    assert_eq!(out.first().and_then(|d| d.status), Some(StatusCode::Good));
    assert_eq!(
        interval_count(DateTime(0), DateTime(10 * SEC), 4000.0),
        Ok(3)
    );
    // ProcessingInterval 0: one interval.
    let one = process(
        Aggregate::Interpolative,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        0.0,
        &cfg,
    )
    .unwrap_or_default();
    assert_eq!(one.len(), 1);
    // end < start: the same intervals, latest first.
    let rev = process(
        Aggregate::Interpolative,
        &r,
        DateTime(10 * SEC),
        DateTime(0),
        4000.0,
        &cfg,
    )
    .unwrap_or_default();
    let rts: Vec<i64> = rev
        .iter()
        .filter_map(|d| d.source_timestamp)
        .map(|t| t.0 / SEC)
        .collect();
    assert_eq!(rts, vec![6, 2, 0]);
}

#[test]
fn partial_bit_on_a_short_last_interval() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 5.0), (3, 1.0), (9, 7.0), (30, 2.0)]);
    let out = process(
        Aggregate::MinimumActualTime,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        4000.0,
        &cfg,
    )
    .unwrap_or_default();
    let st: Vec<Option<StatusCode>> = out.iter().map(|d| d.status).collect();
    assert_eq!(
        st,
        vec![
            Some(StatusCode::Good),
            Some(StatusCode::BadNoData),
            Some(with_bits(StatusCode::Good, bits::PARTIAL)),
        ]
    );
    assert_eq!(
        out.first().and_then(|d| d.source_timestamp),
        Some(DateTime(3 * SEC))
    );
}

#[test]
fn non_numeric_interval_is_invalid_inputs() {
    let cfg = AggregateConfig::default();
    let r = vec![
        dv(Variant::from("a"), StatusCode::Good, 0),
        dv(Variant::from("b"), StatusCode::Good, 20 * SEC),
    ];
    let out = process(
        Aggregate::DurationInStateZero,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        0.0,
        &cfg,
    )
    .unwrap_or_default();
    assert_eq!(
        out.first().and_then(|d| d.status),
        Some(StatusCode::BadAggregateInvalidInputs)
    );
}

#[test]
fn interval_limits() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 1.0), (100, 2.0)]);
    // 10^7 one-tick intervals: refused before any work.
    assert_eq!(
        process(
            Aggregate::Interpolative,
            &r,
            DateTime(0),
            DateTime(10 * SEC / 10),
            0.0001,
            &cfg
        ),
        Err(StatusCode::BadTooManyOperations)
    );
    // An interval longer than the range is one complete interval (§5.4.2.2), not Partial.
    let one = process(
        Aggregate::MinimumActualTime,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        60_000.0,
        &cfg,
    )
    .unwrap_or_default();
    assert_eq!(one.len(), 1);
    assert_eq!(one.first().and_then(|d| d.status), Some(StatusCode::Good));
    // Backwards: the short interval is the last one, and Partial.
    let rev = process(
        Aggregate::MinimumActualTime,
        &r,
        DateTime(10 * SEC),
        DateTime(0),
        4000.0,
        &cfg,
    )
    .unwrap_or_default();
    assert_eq!(
        rev.last().and_then(|d| d.status),
        Some(with_bits(StatusCode::Good, bits::PARTIAL))
    );
}

#[test]
fn nan_is_an_invalid_input() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 1.0), (2, f64::NAN), (20, 2.0)]);
    let out = process(
        Aggregate::MinimumActualTime,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        0.0,
        &cfg,
    )
    .unwrap_or_default();
    assert_eq!(
        out.first().and_then(|d| d.status),
        Some(StatusCode::BadAggregateInvalidInputs)
    );
}

#[test]
fn sloped_extrapolation_after_the_end_of_the_data() {
    let cfg = AggregateConfig {
        use_sloped_extrapolation: true,
        ..AggregateConfig::default()
    };
    let r = raw(&[(0, 0.0), (10, 10.0)]);
    let out = process(
        Aggregate::Interpolative,
        &r,
        DateTime(20 * SEC),
        DateTime(25 * SEC),
        0.0,
        &cfg,
    )
    .unwrap_or_default();
    let d = out.first();
    assert_eq!(d.map(|d| d.value.clone()), Some(Variant::Double(20.0)));
    assert_eq!(
        d.and_then(|d| d.status),
        Some(with_bits(
            StatusCode::UncertainDataSubNormal,
            bits::INTERPOLATED
        ))
    );
    let stepped = process(
        Aggregate::Interpolative,
        &r,
        DateTime(20 * SEC),
        DateTime(25 * SEC),
        0.0,
        &AggregateConfig::default(),
    )
    .unwrap_or_default();
    assert_eq!(
        stepped.first().map(|d| d.value.clone()),
        Some(Variant::Double(10.0))
    );
}

fn pts(points: &[(i64, Option<f64>, StatusCode)]) -> Vec<DataValue> {
    points
        .iter()
        .map(|&(t, v, st)| dv(v.map_or(Variant::Empty, Variant::Double), st, t * SEC))
        .collect()
}

/// One interval per `pi_s` seconds over `[s_s, e_s)`.
fn run(
    a: Aggregate,
    r: &[DataValue],
    s_s: i64,
    e_s: i64,
    pi_s: f64,
    cfg: &AggregateConfig,
) -> Vec<(Variant, StatusCode, i64)> {
    let mut out = Vec::new();
    let got = compute_into(
        a,
        r,
        DateTime(s_s * SEC),
        DateTime(e_s * SEC),
        pi_s * 1000.0,
        cfg,
        &mut out,
    );
    assert_eq!(got, Ok(()), "{a:?}");
    out.into_iter()
        .map(|d| {
            (
                d.value,
                d.status.unwrap_or_default(),
                d.source_timestamp.map_or(-1, |t| t.0 / SEC),
            )
        })
        .collect()
}

fn calc(code: StatusCode) -> StatusCode {
    with_bits(code, bits::CALCULATED)
}

/// The integration test's hostile histories reach only the advertised Aggregates through
/// `process`; these reach every named one: one value per interval, stamped inside the range,
/// or an argument error, never a panic.
#[test]
fn every_named_aggregate_survives_odd_histories() {
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let statuses = [
        StatusCode::Good,
        StatusCode::Uncertain,
        StatusCode::Bad,
        StatusCode::BadNoData,
        StatusCode::UncertainDataSubNormal,
    ];
    for round in 0..150 {
        let n = (next() % 30) as usize;
        let mut t = 0i64;
        let mut r = Vec::with_capacity(n);
        for _ in 0..n {
            t += (next() % 3) as i64 * SEC / 2; // equal timestamps occur
            let value = match next() % 6 {
                0 => Variant::Boolean(next() % 2 == 0),
                1 => Variant::Empty,
                2 => Variant::Double(f64::NAN),
                3 => Variant::Int32((next() % 9) as i32 - 4),
                _ => Variant::Double((next() % 100) as f64 / 3.0),
            };
            let st = statuses.get((next() % 5) as usize).copied();
            r.push(dv(value, st.unwrap_or(StatusCode::Good), t));
        }
        let cfg = AggregateConfig {
            treat_uncertain_as_bad: next() % 2 == 0,
            percent_data_bad: (next() % 101) as u8,
            percent_data_good: (next() % 101) as u8,
            use_sloped_extrapolation: next() % 2 == 0,
            stepped: next() % 2 == 0,
        };
        let (a, b) = ((next() % 20) as i64 * SEC, (next() % 20) as i64 * SEC);
        let (start, end) = if round % 2 == 0 { (a, b) } else { (b, a) };
        let pi = [0.0, 700.0, 3000.0][(next() % 3) as usize];
        for agg in Aggregate::named() {
            let mut out = Vec::new();
            match compute_into(agg, &r, DateTime(start), DateTime(end), pi, &cfg, &mut out) {
                Ok(()) => {
                    let want = interval_count(DateTime(start), DateTime(end), pi);
                    assert_eq!(Ok(out.len() as u64), want, "{agg:?} round {round}");
                    let (lo, hi) = (start.min(end), start.max(end));
                    for v in &out {
                        assert!(
                            v.source_timestamp.is_some_and(|t| (lo..hi).contains(&t.0)),
                            "{agg:?} round {round}: {v:?}"
                        );
                    }
                }
                Err(e) => assert_eq!(e, StatusCode::BadInvalidArgument, "{agg:?}"),
            }
        }
    }
}

#[test]
fn range_delta_population_transitions_worst_quality_by_hand() {
    use StatusCode as S;
    // 2, 8, 5 Good at 0, 2, 4 s; Bad at 6 s; 4 Good at 8 s; more data at 20 s, so [0, 10)
    // is a complete interval.
    let r = pts(&[
        (0, Some(2.0), S::Good),
        (2, Some(8.0), S::Good),
        (4, Some(5.0), S::Good),
        (6, None, S::Bad),
        (8, Some(4.0), S::Good),
        (20, Some(1.0), S::Good),
    ]);
    let cfg = AggregateConfig::default();
    let one = |a| run(a, &r, 0, 10, 10.0, &cfg);
    let uncertain = calc(S::UncertainDataSubNormal);
    // §5.4.3.14: 8 − 2 over the Good values; a Bad value exists: Uncertain.
    assert_eq!(
        one(Aggregate::Range),
        [(Variant::Double(6.0), uncertain, 0)]
    );
    // §5.4.3.27: latest Good (4) − earliest Good (2); nothing skipped before or after them.
    assert_eq!(
        one(Aggregate::Delta),
        [(Variant::Double(2.0), calc(S::Good), 0)]
    );
    // §5.4.3.40 / .39: mean 4.75, squared deviations 7.5625 + 10.5625 + 0.0625 + 0.5625 =
    // 18.75, / n = 4.6875; its root 2.1651; Uncertain as VarianceSample is (A.36).
    assert_eq!(
        one(Aggregate::VariancePopulation),
        [(Variant::Double(4.6875), uncertain, 0)]
    );
    let sd = one(Aggregate::StandardDeviationPopulation);
    assert!(
        matches!(sd.first(), Some((Variant::Double(x), st, 0))
            if (x - 4.6875f64.sqrt()).abs() < 1e-12 && *st == uncertain),
        "{sd:?}"
    );
    // §5.4.3.24: no non-Bad value before the interval, so 2 is a transition; 8, 5, 4 are
    // three more (the Bad value is left out): 4. One value in five Bad: Uncertain.
    assert_eq!(
        one(Aggregate::NumberOfTransitions),
        [(Variant::Int32(4), uncertain, 0)]
    );
    // §5.4.3.35: the worst status is the one Bad value's; the start bound (2, Good) changes
    // nothing for WorstQuality2.
    for a in [Aggregate::WorstQuality, Aggregate::WorstQuality2] {
        assert_eq!(
            one(a),
            [(Variant::StatusCode(S::Bad), calc(S::Good), 0)],
            "{a:?}"
        );
    }

    // Delta with non-Good values passed over at both ends: 7 − 3, Uncertain. WorstQuality:
    // two Bad values share the worst severity: the first, with MultiValue.
    let r = pts(&[
        (0, Some(1.0), S::Uncertain),
        (2, Some(3.0), S::Good),
        (4, None, S::BadOutOfRange),
        (5, Some(7.0), S::Good),
        (8, None, S::Bad),
        (20, Some(0.0), S::Good),
    ]);
    let one = |a| run(a, &r, 0, 10, 10.0, &cfg);
    assert_eq!(
        one(Aggregate::Delta),
        [(Variant::Double(4.0), uncertain, 0)]
    );
    assert_eq!(
        one(Aggregate::WorstQuality),
        [(
            Variant::StatusCode(S::BadOutOfRange),
            with_bits(S::Good, bits::CALCULATED | bits::MULTI_VALUE),
            0
        )]
    );

    // NumberOfTransitions compares the first value with the last one before the interval:
    // 1 (at 5 s) → 1, 2, 2, 1 over [10, 20): two transitions, on Booleans as on numbers.
    let b = |t: i64, v: bool| dv(Variant::Boolean(v), S::Good, t * SEC);
    let r = [
        b(0, true),
        b(5, true),
        b(12, true),
        b(14, false),
        b(16, false),
        b(18, true),
        b(30, false),
    ];
    assert_eq!(
        run(Aggregate::NumberOfTransitions, &r, 10, 20, 10.0, &cfg),
        [(Variant::Int32(2), calc(S::Good), 10)]
    );

    // WorstQuality2 counts the Simple Bounding Value at the start: at 10 s the value before is
    // Bad, so the bound is Bad_NoData, worse than the one Good raw value WorstQuality sees.
    let r = pts(&[
        (0, Some(1.0), S::Good),
        (5, None, S::Bad),
        (15, Some(2.0), S::Good),
        (25, Some(3.0), S::Good),
    ]);
    assert_eq!(
        run(Aggregate::WorstQuality, &r, 10, 20, 10.0, &cfg),
        [(Variant::StatusCode(S::Good), calc(S::Good), 10)]
    );
    assert_eq!(
        run(Aggregate::WorstQuality2, &r, 10, 20, 10.0, &cfg),
        [(Variant::StatusCode(S::BadNoData), calc(S::Good), 10)]
    );
}

#[test]
fn totals_by_hand() {
    use StatusCode as S;
    // 2 Good at 0 s, Bad at 5 s, 2 Good at 10 s (and 20 s).
    let r = pts(&[
        (0, Some(2.0), S::Good),
        (5, None, S::Bad),
        (10, Some(2.0), S::Good),
        (20, Some(2.0), S::Good),
    ]);
    let cfg = AggregateConfig::default();
    // Total (§5.4.3.8, Interpolated Bounding Values): the Bad value is skipped, the line from
    // 2 to 2 averages 2 over the 10 s: 20; Uncertain because a Bad value was skipped.
    assert_eq!(
        run(Aggregate::Total, &r, 0, 10, 10.0, &cfg),
        [(Variant::Double(20.0), calc(S::UncertainDataSubNormal), 0)]
    );
    // Total2 (§5.4.3.9, Simple Bounding Values): 2 held over the 5 s of non-Bad data (the
    // next point is Bad, so no slope), TimeAverage2 2, × 5 s of Good data: 10. That region
    // slopes towards a Bad value, so it is Uncertain (§3.1.9); without TreatUncertainAsBad it
    // counts as Good and half the interval is Bad: Uncertain with PercentDataGood/Bad 100.
    let lenient = AggregateConfig {
        treat_uncertain_as_bad: false,
        ..cfg
    };
    assert_eq!(
        run(Aggregate::Total2, &r, 0, 10, 10.0, &lenient),
        [(Variant::Double(10.0), calc(S::UncertainDataSubNormal), 0)]
    );
    // With TreatUncertainAsBad (the default) the Uncertain region is Bad too (v1.05 §5.4.3.2):
    // the whole interval is, and a Bad interval has no value.
    assert_eq!(
        run(Aggregate::Total2, &r, 0, 10, 10.0, &cfg),
        [(Variant::Empty, calc(S::Bad), 0)]
    );
    // A ramp 0 → 10 over 10 s, all Good: TimeAverage 5, Total = Total2 = 50 (unit·s).
    let r = raw(&[(0, 0.0), (10, 10.0), (20, 10.0)]);
    for a in [Aggregate::Total, Aggregate::Total2] {
        assert_eq!(
            run(a, &r, 0, 10, 10.0, &cfg),
            [(Variant::Double(50.0), calc(S::Good), 0)],
            "{a:?}"
        );
    }
}

#[test]
fn bounds_and_range2_by_hand() {
    use StatusCode as S;
    // 10, 20, 30, 40 Good at 0, 10, 20, 30 s: a line of slope 1 per second.
    let r = raw(&[(0, 10.0), (10, 20.0), (20, 30.0), (30, 40.0)]);
    let cfg = AggregateConfig::default();
    // EndBound (§5.4.3.29): the raw value at each interval's end, stamped at its start.
    assert_eq!(
        run(Aggregate::EndBound, &r, 0, 20, 10.0, &cfg),
        [
            (Variant::Double(20.0), calc(S::Good), 0),
            (Variant::Double(30.0), calc(S::Good), 10)
        ]
    );
    // Over [5, 15): the Simple Bounding Values are 15 and 25 (sloped); DeltaBounds
    // (§5.4.3.30) 10; Maximum2 the end bound 25 (Interpolated, stamped at the start); Minimum2
    // the start bound 15; Range2 (§5.4.3.19) 25 − 15 = 10.
    assert_eq!(
        run(Aggregate::EndBound, &r, 5, 15, 10.0, &cfg),
        [(Variant::Double(25.0), calc(S::Good), 5)]
    );
    assert_eq!(
        run(Aggregate::DeltaBounds, &r, 5, 15, 10.0, &cfg),
        [(Variant::Double(10.0), calc(S::Good), 5)]
    );
    assert_eq!(
        run(Aggregate::Maximum2, &r, 5, 15, 10.0, &cfg),
        [(
            Variant::Double(25.0),
            with_bits(S::Good, bits::INTERPOLATED),
            5
        )]
    );
    assert_eq!(
        run(Aggregate::Range2, &r, 5, 15, 10.0, &cfg),
        [(Variant::Double(10.0), calc(S::Good), 5)]
    );
    // The data ends at 30 s, inside [25, 35): no end bound, Bad_NoData (Partial).
    let partial_no_data = with_bits(S::BadNoData, bits::PARTIAL);
    for a in [Aggregate::EndBound, Aggregate::DeltaBounds] {
        assert_eq!(
            run(a, &r, 25, 35, 10.0, &cfg),
            [(Variant::Empty, partial_no_data, 25)],
            "{a:?}"
        );
    }
    // An Uncertain end bound (TreatUncertainAsBad False) makes DeltaBounds Uncertain.
    let r = pts(&[
        (0, Some(10.0), S::Good),
        (10, Some(20.0), S::Uncertain),
        (20, Some(30.0), S::Good),
    ]);
    let lenient = AggregateConfig {
        treat_uncertain_as_bad: false,
        ..cfg
    };
    assert_eq!(
        run(Aggregate::DeltaBounds, &r, 0, 10, 10.0, &lenient),
        [(Variant::Double(10.0), calc(S::UncertainDataSubNormal), 0)]
    );
}

#[test]
fn time_average_stepped_and_sloped() {
    // 0 until 5 s, 10 from 5 s; the data goes on past 10 s.
    let r = raw(&[(0, 0.0), (5, 10.0), (20, 10.0)]);
    let sloped = AggregateConfig::default();
    let stepped = AggregateConfig {
        stepped: true,
        ..sloped
    };
    let avg = |cfg: &AggregateConfig| {
        process(
            Aggregate::TimeAverage2,
            &r,
            DateTime(0),
            DateTime(10 * SEC),
            0.0,
            cfg,
        )
        .unwrap_or_default()
        .first()
        .map(|d| d.value.clone())
    };
    // Sloped: the ramp 0→10 over 0..5 s (mean 5), then 10 for 5 s: 7.5. Stepped: 5.
    assert_eq!(avg(&sloped), Some(Variant::Double(7.5)));
    assert_eq!(avg(&stepped), Some(Variant::Double(5.0)));
}

#[test]
fn multi_value_bit_for_repeated_extreme() {
    let cfg = AggregateConfig::default();
    let r = raw(&[(0, 3.0), (2, 1.0), (4, 1.0), (20, 5.0)]);
    let out = process(
        Aggregate::MinimumActualTime,
        &r,
        DateTime(0),
        DateTime(10 * SEC),
        0.0,
        &cfg,
    )
    .unwrap_or_default();
    let d = out.first();
    assert_eq!(d.and_then(|d| d.source_timestamp), Some(DateTime(2 * SEC)));
    assert_eq!(
        d.and_then(|d| d.status),
        Some(with_bits(StatusCode::Good, bits::MULTI_VALUE))
    );
}

/// Every Aggregate's result DataType is Part 13's Table 13 (and each aggregate's "Data Type"
/// row), whatever the numeric type of the source: the averages, totals, durations, percentages
/// and statistics are Double, the counts Int32, WorstQuality a StatusCode, and the rest the
/// raw data type. Checked for Float, Int32, UInt16 and Double sources on every interval that
/// has a value.
#[test]
fn every_aggregate_answers_the_data_type_of_table_13() {
    use Aggregate as A;
    #[derive(Debug, PartialEq)]
    enum Ty {
        Double,
        Int32,
        Status,
        Source,
    }
    let ty = |a: Aggregate| match a {
        A::Average
        | A::TimeAverage
        | A::TimeAverage2
        | A::Total
        | A::Total2
        | A::DurationInStateZero
        | A::DurationInStateNonZero
        | A::DurationGood
        | A::DurationBad
        | A::PercentGood
        | A::PercentBad
        | A::StandardDeviationSample
        | A::VarianceSample
        | A::StandardDeviationPopulation
        | A::VariancePopulation => Ty::Double,
        A::Count | A::NumberOfTransitions => Ty::Int32,
        A::WorstQuality | A::WorstQuality2 => Ty::Status,
        _ => Ty::Source,
    };
    let cfg = AggregateConfig::default();
    let sources: [fn(f64) -> Variant; 4] = [
        |x| Variant::Float(x as f32),
        |x| Variant::Int32(x as i32),
        |x| Variant::UInt16(x as u16),
        Variant::Double,
    ];
    for make in sources {
        let like = make(0.0);
        let r: Vec<DataValue> = [
            (0, 1.0),
            (4, 3.0),
            (10, 7.0),
            (15, 2.0),
            (23, 9.0),
            (30, 4.0),
        ]
        .iter()
        .map(|&(t, v)| dv(make(v), StatusCode::Good, t * SEC))
        .collect();
        for a in Aggregate::ALL {
            let out = process(*a, &r, DateTime(0), DateTime(30 * SEC), 10_000.0, &cfg)
                .unwrap_or_else(|e| panic!("{a:?}: {e:?}"));
            let valued: Vec<&DataValue> =
                out.iter().filter(|d| d.value != Variant::Empty).collect();
            assert!(!valued.is_empty(), "{a:?} on {like:?}: {out:?}");
            for d in valued {
                let got = match &d.value {
                    Variant::Int32(_) if ty(*a) == Ty::Int32 => Ty::Int32,
                    Variant::StatusCode(_) => Ty::Status,
                    v if std::mem::discriminant(v) == std::mem::discriminant(&like) => {
                        if ty(*a) == Ty::Double && matches!(v, Variant::Double(_)) {
                            Ty::Double
                        } else {
                            Ty::Source
                        }
                    }
                    Variant::Double(_) => Ty::Double,
                    other => panic!("{a:?} on {like:?}: {other:?}"),
                };
                assert_eq!(got, ty(*a), "{a:?} on {like:?}: {d:?}");
            }
        }
    }
}
