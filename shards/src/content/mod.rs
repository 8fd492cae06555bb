//! What `uaring serve` serves in its application namespace (namespace 1, the
//! ApplicationUri), built with the library's public API only — the same calls an embedder
//! makes ([`ServerBuilder::add_variable`], [`VariableDef`], [`MethodDef`], [`AlarmDef`],
//! [`crate::EventDef`]):
//!
//! * the benchmark contract ([`contract`]): `BenchmarkValue<i>` Int32 variables
//!   `ns=1;i=1001+i` and `BenchmarkArray<N>` arrays `ns=1;i=2001+k`;
//! * the sampling-capacity counters ([`contract::add_counters`], `--counters N`);
//! * the Demo folder ([`demo`]): a writable variable of every built-in type, arrays, computed
//!   values, methods, an event source with its event type, and an alarm, driven by one
//!   application thread ([`DemoDriver`]).
//!
//! [`ServerBuilder::demo`] adds it; `uaring serve` always does, an embedder only when asked
//! (a library server's namespace 1 starts empty). The configuration keys are the ones of
//! docs/Configuration.md: `application.demo_namespace`, `application.benchmark_value_count`,
//! `application.benchmark_array_sizes`, `application.counters` and `events.demo_rate_per_s`.
//! This module takes them out of the file before core reads the rest.
//!
//! [`ServerBuilder::add_variable`]: crate::ServerBuilder::add_variable
//! [`ServerBuilder::demo`]: crate::ServerBuilder::demo
//! [`VariableDef`]: crate::VariableDef
//! [`MethodDef`]: crate::MethodDef
//! [`AlarmDef`]: crate::AlarmDef

pub mod contract;
pub mod demo;

pub use demo::DemoDriver;

/// The served content's configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ContentConfig {
    /// `application.demo_namespace`: build the Demo folder (`ns=1;s=Demo.*`). Default on,
    /// off with `--contract`.
    pub demo_namespace: bool,
    /// `application.benchmark_value_count`: `BenchmarkValue<i>` variables, 1..=10,000.
    /// Default 100.
    pub benchmark_value_count: u32,
    /// `application.benchmark_array_sizes`: element counts of the `BenchmarkArray<N>`
    /// arrays, each 1..=10,000,000, at most 1,000 arrays. Default `[10, 100, 1000]`.
    pub benchmark_array_sizes: Vec<u32>,
    /// `application.counters`: the sampling-capacity counters `ns=1;i=1..N`, 0..=1,000,000
    /// (0 = off). When on, the BenchmarkValue and BenchmarkArray variables are left out
    /// (their ids would collide).
    pub counters: u32,
    /// `events.demo_rate_per_s`: Demo events per second, 0..=1,000,000 (0 = off). Default 1.
    pub demo_rate_per_s: f64,
}

impl ContentConfig {
    /// The defaults of `uaring serve` (`contract`: `--contract`, which leaves the Demo
    /// folder out).
    pub fn serve_defaults(contract: bool) -> ContentConfig {
        ContentConfig {
            demo_namespace: !contract,
            benchmark_value_count: 100,
            benchmark_array_sizes: vec![10, 100, 1000],
            counters: 0,
            demo_rate_per_s: 1.0,
        }
    }

    /// Checks every field; the message names the key.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=10_000).contains(&self.benchmark_value_count) {
            return Err("application.benchmark_value_count must be 1..=10000".into());
        }
        if self.counters > 1_000_000 {
            return Err("application.counters must be 0..=1000000".into());
        }
        if self.benchmark_array_sizes.len() > 1000 {
            return Err("application.benchmark_array_sizes has more than 1000 entries".into());
        }
        if self
            .benchmark_array_sizes
            .iter()
            .any(|&n| n == 0 || n > 10_000_000)
        {
            return Err("application.benchmark_array_sizes entries must be 1..=10000000".into());
        }
        if !(self.demo_rate_per_s.is_finite()
            && (0.0..=1_000_000.0).contains(&self.demo_rate_per_s))
        {
            return Err("events.demo_rate_per_s must be 0..=1000000 (0 = off)".into());
        }
        Ok(())
    }
}

impl ContentConfig {
    /// Puts the keys back into a configuration table (to print the effective configuration).
    pub fn insert_into(&self, t: &mut toml::Table) {
        let mut put = |section: &str, key: &str, v: toml::Value| {
            if let Some(s) = t
                .entry(section)
                .or_insert_with(|| toml::Value::Table(Default::default()))
                .as_table_mut()
            {
                s.insert(key.to_string(), v);
            }
        };
        put("application", "demo_namespace", self.demo_namespace.into());
        put(
            "application",
            "benchmark_value_count",
            i64::from(self.benchmark_value_count).into(),
        );
        put(
            "application",
            "benchmark_array_sizes",
            toml::Value::Array(
                self.benchmark_array_sizes
                    .iter()
                    .map(|&n| i64::from(n).into())
                    .collect(),
            ),
        );
        put("application", "counters", i64::from(self.counters).into());
        put("events", "demo_rate_per_s", self.demo_rate_per_s.into());
    }
}

/// The keys of the content in the file: (section, key).
const KEYS: [(&str, &str); 5] = [
    ("application", "demo_namespace"),
    ("application", "benchmark_value_count"),
    ("application", "benchmark_array_sizes"),
    ("application", "counters"),
    ("events", "demo_rate_per_s"),
];

/// Takes the content's keys out of the file's tables (core does not know them) and reads
/// them over `uaring serve`'s defaults. `served` says whether the content is served
/// ([`crate::ServerBuilder::demo`]); when it is not, a content key in the file is an error
/// rather than a setting silently ignored.
pub fn take_config(
    server: &mut toml::Table,
    served: bool,
    contract: bool,
) -> Result<Option<ContentConfig>, String> {
    let mut c = ContentConfig::serve_defaults(contract);
    for (section, key) in KEYS {
        let Some(v) = server
            .get_mut(section)
            .and_then(|t| t.as_table_mut())
            .and_then(|t| t.remove(key))
        else {
            continue;
        };
        if !served {
            return Err(format!(
                "{section}.{key}: the Demo folder, benchmark and counter variables are served by \
                 `uaring serve` (or ServerBuilder::demo(true)); this server does not add them"
            ));
        }
        let bad = |what: &str| format!("{section}.{key} must be {what}");
        let int = |v: &toml::Value| -> Result<u32, String> {
            v.as_integer()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| bad("a non-negative integer"))
        };
        match key {
            "demo_namespace" => c.demo_namespace = v.as_bool().ok_or_else(|| bad("a bool"))?,
            "benchmark_value_count" => c.benchmark_value_count = int(&v)?,
            "counters" => c.counters = int(&v)?,
            "benchmark_array_sizes" => {
                c.benchmark_array_sizes = v
                    .as_array()
                    .ok_or_else(|| bad("an array of integers"))?
                    .iter()
                    .map(int)
                    .collect::<Result<_, _>>()?
            }
            _ => {
                c.demo_rate_per_s = v
                    .as_float()
                    .or_else(|| v.as_integer().map(|i| i as f64))
                    .ok_or_else(|| bad("a number"))?
            }
        }
    }
    if !served {
        return Ok(None);
    }
    c.validate()?;
    Ok(Some(c))
}

/// Adds the content to `b` (namespace `app_uri`, the ApplicationUri in force). Returns the
/// Demo's driver, to start once the server runs, when the Demo folder is on.
pub fn install(
    b: &mut crate::ServerBuilder,
    c: &ContentConfig,
    app_uri: &str,
) -> Result<Option<demo::DemoParts>, crate::Error> {
    let ns = b.namespace(app_uri);
    if c.counters > 0 {
        tracing::info!(
            counters = c.counters,
            "counters contract: ns=1;i=1..{} (the BenchmarkValue and BenchmarkArray variables are left out: their ids would collide)",
            c.counters
        );
        contract::add_counters(b, &ns, c.counters);
    } else {
        contract::add_benchmark_values(b, &ns, c.benchmark_value_count);
        contract::add_benchmark_arrays(b, &ns, &c.benchmark_array_sizes)?;
    }
    Ok(c.demo_namespace
        .then(|| demo::add_demo(b, &ns, c.demo_rate_per_s)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        text.parse().expect("toml")
    }

    #[test]
    fn keys_are_taken_out_and_read() {
        let mut t = table(
            "[application]\napplication_uri = \"urn:x\"\ndemo_namespace = false\ncounters = 7\n\
             benchmark_array_sizes = [3]\n[events]\ndemo_rate_per_s = 5\nbus_capacity = 64\n",
        );
        let c = take_config(&mut t, true, false)
            .expect("ok")
            .expect("served");
        assert!(!c.demo_namespace);
        assert_eq!(c.counters, 7);
        assert_eq!(c.benchmark_array_sizes, vec![3]);
        assert_eq!(c.demo_rate_per_s, 5.0);
        assert_eq!(c.benchmark_value_count, 100);
        // What core reads is left.
        assert_eq!(
            t.to_string(),
            "[application]\napplication_uri = \"urn:x\"\n\n[events]\nbus_capacity = 64\n"
        );
    }

    #[test]
    fn defaults_follow_the_contract() {
        let mut t = toml::Table::new();
        assert!(
            take_config(&mut t, true, false)
                .unwrap()
                .unwrap()
                .demo_namespace
        );
        assert!(
            !take_config(&mut t, true, true)
                .unwrap()
                .unwrap()
                .demo_namespace
        );
        assert_eq!(take_config(&mut t, false, false), Ok(None));
    }

    #[test]
    fn a_content_key_without_the_content_is_refused() {
        let mut t = table("[application]\ndemo_namespace = true\n");
        let e = take_config(&mut t, false, false).unwrap_err();
        assert!(e.contains("application.demo_namespace"), "{e}");
    }

    #[test]
    fn ranges_are_checked() {
        for (text, key) in [
            (
                "[application]\nbenchmark_value_count = 0\n",
                "benchmark_value_count",
            ),
            ("[application]\ncounters = 1000001\n", "counters"),
            (
                "[application]\nbenchmark_array_sizes = [0]\n",
                "benchmark_array_sizes",
            ),
            ("[events]\ndemo_rate_per_s = -1.0\n", "demo_rate_per_s"),
            ("[application]\ncounters = -1\n", "counters"),
            ("[application]\ndemo_namespace = 1\n", "demo_namespace"),
        ] {
            let e = take_config(&mut table(text), true, false).unwrap_err();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
