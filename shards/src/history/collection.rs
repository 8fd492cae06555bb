//! `[[history.collection]]`: which values of a historized Variable are kept (Part 11 §5.2.2,
//! the optional MinTimeInterval, MaxTimeInterval and ExceptionDeviation of its
//! HistoricalDataConfiguration). Each entry is a [`Rule`] for the Variables its patterns
//! name; each such Variable has a [`Gate`] that remembers the last value kept and decides,
//! on whichever thread stores a value, whether the next one is kept. The HA Configuration
//! Objects that show the rule to clients are `uaring_core::history::configuration`'s.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};

use uaring_core::address_space::store::NodeView;
use uaring_core::address_space::AddressSpace;
use uaring_core::history::configuration::{Collection, ExceptionDeviationFormat};
use uaring_core::types::{NodeId, Variant};

use super::serve::{parse_pattern, Pattern};
use super::Sample;

/// One `[[history.collection]]` entry as written.
#[derive(Clone, Debug, PartialEq, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionConfig {
    /// The Variables it applies to: the patterns of `[history] nodes` (the first entry
    /// naming a Variable applies).
    pub nodes: Vec<String>,
    /// A value less than this after the last one kept (by SourceTimestamp) is not kept,
    /// unless its status differs; 0: none.
    #[serde(default)]
    pub min_time_interval_ms: u32,
    /// When nothing was kept for this long, the current value is kept again at the
    /// server's time; 0: none.
    #[serde(default)]
    pub max_time_interval_ms: u32,
    /// A numeric value whose difference from the last one kept is not more than this is not
    /// kept (unless its status differs); 0: none.
    #[serde(default)]
    pub exception_deviation: f64,
    /// `absolute` (default), `percent_of_value` (of the last value kept), `percent_of_range`
    /// (of the Variable's InstrumentRange) or `percent_of_eu_range` (of its EURange).
    #[serde(default = "absolute")]
    pub exception_deviation_format: String,
}

fn absolute() -> String {
    "absolute".to_string()
}

/// Bound of the two intervals, ms (a day).
pub const INTERVAL_MAX_MS: u32 = 86_400_000;

impl CollectionConfig {
    /// The entry checked: what its HA Configuration Objects say.
    pub fn collection(&self) -> Result<Collection, String> {
        let format = match self.exception_deviation_format.as_str() {
            "absolute" => ExceptionDeviationFormat::AbsoluteValue,
            "percent_of_value" => ExceptionDeviationFormat::PercentOfValue,
            "percent_of_range" => ExceptionDeviationFormat::PercentOfRange,
            "percent_of_eu_range" => ExceptionDeviationFormat::PercentOfEURange,
            other => {
                return Err(format!(
                "history.collection exception_deviation_format = {other:?} (expected absolute, percent_of_value, percent_of_range or percent_of_eu_range)"
            ))
            }
        };
        if self.nodes.is_empty() {
            return Err("history.collection: an entry without nodes".into());
        }
        if !self.exception_deviation.is_finite() || self.exception_deviation < 0.0 {
            return Err("history.collection exception_deviation must be a number ≥ 0".into());
        }
        if self.min_time_interval_ms > INTERVAL_MAX_MS
            || self.max_time_interval_ms > INTERVAL_MAX_MS
        {
            return Err(format!(
                "history.collection min_time_interval_ms and max_time_interval_ms must be 0..={INTERVAL_MAX_MS}"
            ));
        }
        if self.max_time_interval_ms > 0 && self.max_time_interval_ms < 10 {
            return Err("history.collection max_time_interval_ms must be 0 or at least 10".into());
        }
        if self.max_time_interval_ms > 0 && self.max_time_interval_ms <= self.min_time_interval_ms {
            return Err(
                "history.collection max_time_interval_ms must be more than min_time_interval_ms"
                    .into(),
            );
        }
        if self.min_time_interval_ms == 0
            && self.max_time_interval_ms == 0
            && self.exception_deviation == 0.0
        {
            return Err(
                "history.collection: an entry sets none of min_time_interval_ms, max_time_interval_ms, exception_deviation"
                    .into(),
            );
        }
        Ok(Collection {
            min_time_interval_ms: f64::from(self.min_time_interval_ms),
            max_time_interval_ms: f64::from(self.max_time_interval_ms),
            exception_deviation: self.exception_deviation,
            exception_deviation_format: format,
        })
    }
}

/// 100 ns ticks in a millisecond (the unit of timestamps).
const TICKS_PER_MS: i64 = 10_000;

/// The entries, their patterns resolved against the address space's namespaces.
pub struct Rules {
    rules: Vec<Rule>,
}

/// One entry, ready to apply.
pub struct Rule {
    patterns: Vec<Pattern>,
    min_ticks: i64,
    /// 0: none.
    pub max_ticks: i64,
    deviation: f64,
    format: ExceptionDeviationFormat,
}

impl Rules {
    /// The entries of `config` (checked by [`CollectionConfig::collection`] at start) with
    /// their patterns parsed against `uris`.
    pub fn new(config: &[CollectionConfig], uris: &[String]) -> Result<Rules, String> {
        let mut rules = Vec::with_capacity(config.len());
        for c in config {
            let collection = c.collection()?;
            let patterns = c
                .nodes
                .iter()
                .map(|p| parse_pattern(p, uris))
                .collect::<Result<Vec<_>, _>>()?;
            rules.push(Rule {
                patterns,
                min_ticks: i64::from(c.min_time_interval_ms) * TICKS_PER_MS,
                max_ticks: i64::from(c.max_time_interval_ms) * TICKS_PER_MS,
                deviation: collection.exception_deviation,
                format: collection.exception_deviation_format,
            });
        }
        Ok(Rules { rules })
    }

    /// Every NodeId (not a prefix) the entries name is a historized Variable of `b` (a name
    /// that matches nothing is a mistake the start reports).
    pub fn check_names(
        &self,
        b: &uaring_core::address_space::build::AddressSpaceBuilder,
    ) -> Result<(), String> {
        for r in &self.rules {
            for p in &r.patterns {
                if let Pattern::Exact(id) = p {
                    let historized = b
                        .node(id)
                        .and_then(|n| n.as_variable().map(|v| v.historizing()))
                        .unwrap_or(false);
                    if !historized {
                        return Err(format!(
                            "history.collection names {id}, which is no historized Variable"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Has an entry a MaxTimeInterval (the sampler thread keeps values again)?
    pub fn has_max_interval(&self) -> bool {
        self.rules.iter().any(|r| r.max_ticks > 0)
    }

    /// The entry that applies to `id` (the first naming it).
    pub fn entry_of(&self, id: &NodeId) -> Option<usize> {
        self.rules
            .iter()
            .position(|r| r.patterns.iter().any(|p| p.matches(id)))
    }

    pub fn get(&self, entry: usize) -> Option<&Rule> {
        self.rules.get(entry)
    }

    /// A gate for `node` under entry `entry`: a deviation in percent of a range is made
    /// absolute here, from the node's InstrumentRange or EURange (an error when it has
    /// none: the start, or the addition of the Variable, says so).
    pub fn gate(
        &self,
        space: &AddressSpace,
        node: NodeView<'_>,
        entry: usize,
    ) -> Result<Gate, String> {
        let gate = Gate::default();
        self.arm(&gate, space, node, entry)?;
        Ok(gate)
    }

    /// Points `gate` at entry `entry` for `node`, forgetting what it kept before.
    pub fn arm(
        &self,
        gate: &Gate,
        space: &AddressSpace,
        node: NodeView<'_>,
        entry: usize,
    ) -> Result<(), String> {
        let Some(rule) = self.rules.get(entry) else {
            return Err("history.collection: no such entry".into());
        };
        let range = match rule.format {
            ExceptionDeviationFormat::PercentOfRange => Some("InstrumentRange"),
            ExceptionDeviationFormat::PercentOfEURange => Some("EURange"),
            _ => None,
        };
        let absolute = match range.filter(|_| rule.deviation > 0.0) {
            Some(name) => {
                let (low, high) = space.range_property(node, name).ok_or_else(|| {
                    format!(
                        "history.collection: {} has no {name} for its exception_deviation_format",
                        node.node_id()
                    )
                })?;
                rule.deviation / 100.0 * (high - low).abs()
            }
            None => rule.deviation,
        };
        gate.absolute.store(absolute.to_bits(), Ordering::Relaxed);
        gate.last_ts.store(NONE_KEPT, Ordering::Relaxed);
        gate.entry.store(entry as u32 + 1, Ordering::Release);
        Ok(())
    }

    /// The rule `gate` follows (none: disarmed).
    fn rule_of(&self, gate: &Gate) -> Option<&Rule> {
        let entry = gate.entry.load(Ordering::Acquire);
        entry
            .checked_sub(1)
            .and_then(|e| self.rules.get(e as usize))
    }

    /// Is `sample` kept? Remembers it when it is. Values are stored from any thread: two
    /// stores at the same moment may both be kept (never both dropped by mistake).
    pub fn admit(&self, gate: &Gate, sample: &Sample) -> bool {
        let Some(rule) = self.rule_of(gate) else {
            return true;
        };
        let last_ts = gate.last_ts.load(Ordering::Acquire);
        let value = numeric(&sample.value);
        if last_ts != NONE_KEPT {
            let dt = sample.source_ts - last_ts;
            // Out of order (a back-fill): kept, and the gate follows the newest.
            if dt < 0 {
                return true;
            }
            let same_status = sample.status == gate.last_status.load(Ordering::Relaxed);
            if same_status {
                if rule.min_ticks > 0 && dt < rule.min_ticks {
                    return false;
                }
                let overdue = rule.max_ticks > 0 && dt >= rule.max_ticks;
                let last = f64::from_bits(gate.last_value.load(Ordering::Relaxed));
                if !overdue && rule.deviation > 0.0 {
                    if let Some(v) = value.filter(|_| !last.is_nan()) {
                        let limit = match rule.format {
                            ExceptionDeviationFormat::PercentOfValue => {
                                rule.deviation / 100.0 * last.abs()
                            }
                            _ => f64::from_bits(gate.absolute.load(Ordering::Relaxed)),
                        };
                        if (v - last).abs() <= limit {
                            return false;
                        }
                    }
                }
            }
        }
        gate.last_value
            .store(value.unwrap_or(f64::NAN).to_bits(), Ordering::Relaxed);
        gate.last_status.store(sample.status, Ordering::Relaxed);
        gate.last_ts.store(sample.source_ts, Ordering::Release);
        true
    }

    /// Is a value of `gate`'s Variable due again at `now` (100 ns ticks): nothing kept for
    /// its entry's MaxTimeInterval?
    pub fn overdue(&self, gate: &Gate, now: i64) -> bool {
        let Some(rule) = self.rule_of(gate) else {
            return false;
        };
        let last = gate.last_ts.load(Ordering::Acquire);
        rule.max_ticks > 0 && last != NONE_KEPT && now - last >= rule.max_ticks
    }
}

/// Nothing kept yet.
const NONE_KEPT: i64 = i64::MIN;

/// What one Variable's rule last kept.
pub struct Gate {
    /// 1 + the entry; 0: none (a run-time place between Variables).
    entry: AtomicU32,
    /// The deviation in the value's unit (f64 bits): the entry's, or its percent of the
    /// node's range.
    absolute: AtomicU64,
    /// The last value kept (f64 bits; NaN: not a number).
    last_value: AtomicU64,
    last_status: AtomicU32,
    /// Its SourceTimestamp (100 ns ticks); [`NONE_KEPT`]: none.
    last_ts: AtomicI64,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            entry: AtomicU32::new(0),
            absolute: AtomicU64::new(0),
            last_value: AtomicU64::new(f64::NAN.to_bits()),
            last_status: AtomicU32::new(0),
            last_ts: AtomicI64::new(NONE_KEPT),
        }
    }
}

impl Gate {
    /// No rule: every value kept (a run-time place given back).
    pub fn disarm(&self) {
        self.entry.store(0, Ordering::Release);
    }
}

/// A number's value, for the deviation (a monitored item's deadband reads it the same way).
fn numeric(v: &Variant) -> Option<f64> {
    uaring_core::subscription::item::numeric(v).filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(toml_text: &str) -> Rules {
        #[derive(serde::Deserialize)]
        struct F {
            collection: Vec<CollectionConfig>,
        }
        let f: F = toml::from_str(toml_text).unwrap();
        Rules::new(
            &f.collection,
            &["http://opcfoundation.org/UA/".into(), "urn:x".into()],
        )
        .unwrap()
    }

    fn sample(ms: i64, v: f64, status: u32) -> Sample {
        Sample {
            source_ts: ms * TICKS_PER_MS,
            server_ts: ms * TICKS_PER_MS,
            status,
            value: Variant::Double(v),
        }
    }

    fn armed(r: &Rules) -> Gate {
        let g = Gate::default();
        g.entry.store(1, Ordering::Release);
        g.absolute
            .store(r.rules[0].deviation.to_bits(), Ordering::Relaxed);
        g
    }

    #[test]
    fn a_deviation_keeps_only_values_that_differ_enough_or_change_status() {
        let r = rules("[[collection]]\nnodes = [\"ns=1;s=A\"]\nexception_deviation = 0.5\n");
        let g = armed(&r);
        let kept: Vec<bool> = [
            sample(0, 10.0, 0),
            sample(1, 10.4, 0),
            sample(2, 9.6, 0),
            sample(3, 10.6, 0),
            sample(4, 10.6, 0x8000_0000),
            sample(5, 10.6, 0x8000_0000),
            sample(6, 10.0, 0x8000_0000),
        ]
        .iter()
        .map(|s| r.admit(&g, s))
        .collect();
        assert_eq!(kept, [true, false, false, true, true, false, true]);
        // Percent of the last value kept (10.0 → 1 %: 0.1).
        let r = rules(
            "[[collection]]\nnodes = [\"ns=1;s=A\"]\nexception_deviation = 1\nexception_deviation_format = \"percent_of_value\"\n",
        );
        let g = armed(&r);
        let kept: Vec<bool> = [sample(0, 10.0, 0), sample(1, 10.05, 0), sample(2, 10.2, 0)]
            .iter()
            .map(|s| r.admit(&g, s))
            .collect();
        assert_eq!(kept, [true, false, true]);
    }

    #[test]
    fn the_intervals_drop_values_too_soon_and_say_when_one_is_overdue() {
        let r = rules(
            "[[collection]]\nnodes = [\"ns=1;s=A\"]\nmin_time_interval_ms = 100\nmax_time_interval_ms = 1000\nexception_deviation = 5\n",
        );
        let g = armed(&r);
        assert!(r.admit(&g, &sample(0, 1.0, 0)));
        assert!(!r.admit(&g, &sample(50, 100.0, 0)), "too soon");
        assert!(
            r.admit(&g, &sample(60, 100.0, 0x4000_0000)),
            "a status change"
        );
        assert!(
            !r.admit(&g, &sample(500, 101.0, 0x4000_0000)),
            "within the deviation"
        );
        assert!(!r.overdue(&g, 900 * TICKS_PER_MS));
        assert!(r.overdue(&g, 1060 * TICKS_PER_MS));
        assert!(
            r.admit(&g, &sample(1060, 101.0, 0x4000_0000)),
            "overdue: kept"
        );
        assert!(r.admit(&g, &sample(10, 7.0, 0)), "out of order: kept");
        g.disarm();
        assert!(r.admit(&g, &sample(1061, 101.0, 0x4000_0000)));
    }

    #[test]
    fn entries_are_checked() {
        for (text, err) in [
            ("nodes = []\nexception_deviation = 1\n", "without nodes"),
            ("nodes = [\"i=1\"]\n", "sets none"),
            ("nodes = [\"i=1\"]\nexception_deviation = -1\n", "≥ 0"),
            ("nodes = [\"i=1\"]\nmax_time_interval_ms = 5\n", "at least 10"),
            (
                "nodes = [\"i=1\"]\nmin_time_interval_ms = 500\nmax_time_interval_ms = 400\n",
                "more than",
            ),
            (
                "nodes = [\"i=1\"]\nexception_deviation = 1\nexception_deviation_format = \"percent\"\n",
                "expected absolute",
            ),
        ] {
            let c: CollectionConfig = toml::from_str(text).unwrap();
            let e = c.collection().unwrap_err();
            assert!(e.contains(err), "{text}: {e}");
        }
    }
}
