//! `uaring-bench sweep`: the same harness run under several configurations
//! (variants) and scenarios, interleaved over rounds so that drift of the
//! machine spreads evenly over the variants.
//!
//! Variant file: one `name|env|args` line each; `env` is space-separated
//! `KEY=VALUE` words given to the run (and so to the server it starts),
//! `args` are `uaring-bench run` arguments. Scenario file: `name|args`.
//! `#` starts a comment line; blank lines are ignored.

use std::io::Write;
use std::time::Instant;

use serde_json::{json, Value};

use crate::args::split_words;
use crate::cli::{run_words_of_sweep, RunOpts, SweepOpts};

#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    pub name: String,
    pub env: Vec<(String, String)>,
    pub args: Vec<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub args: Vec<String>,
}

fn content_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

pub fn parse_variants(text: &str) -> Result<Vec<Variant>, String> {
    let mut out: Vec<Variant> = Vec::new();
    for (n, line) in content_lines(text) {
        let parts: Vec<&str> = line.splitn(3, '|').collect();
        if parts.len() != 3 {
            return Err(format!("line {n}: expected name|env|args, got {line:?}"));
        }
        let name = parts[0].trim().to_string();
        if name.is_empty() {
            return Err(format!("line {n}: empty variant name"));
        }
        if out.iter().any(|v| v.name == name) {
            return Err(format!("line {n}: variant {name:?} defined twice"));
        }
        let mut env = Vec::new();
        for w in split_words(parts[1]).map_err(|e| format!("line {n}: {e}"))? {
            let (k, v) = w
                .split_once('=')
                .ok_or_else(|| format!("line {n}: env word {w:?} is not KEY=VALUE"))?;
            env.push((k.to_string(), v.to_string()));
        }
        let args = split_words(parts[2]).map_err(|e| format!("line {n}: {e}"))?;
        out.push(Variant { name, env, args });
    }
    if out.is_empty() {
        return Err("no variants".into());
    }
    Ok(out)
}

pub fn parse_scenarios(text: &str) -> Result<Vec<Scenario>, String> {
    let mut out: Vec<Scenario> = Vec::new();
    for (n, line) in content_lines(text) {
        let (name, args) = line
            .split_once('|')
            .ok_or_else(|| format!("line {n}: expected name|args, got {line:?}"))?;
        let name = name.trim().to_string();
        if name.is_empty() || out.iter().any(|s| s.name == name) {
            return Err(format!(
                "line {n}: empty or repeated scenario name {name:?}"
            ));
        }
        out.push(Scenario {
            name,
            args: split_words(args).map_err(|e| format!("line {n}: {e}"))?,
        });
    }
    if out.is_empty() {
        return Err("no scenarios".into());
    }
    Ok(out)
}

/// The variant order of round `round` (0-based) over `n` variants: the start
/// rotates by one every two rounds and every other round runs backwards, so
/// each variant runs first, last and next to each neighbour equally often.
pub fn round_order(n: usize, round: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let shift = (round / 2) % n;
    let mut v: Vec<usize> = (0..n).map(|i| (i + shift) % n).collect();
    if round % 2 == 1 {
        v.reverse();
    }
    v
}

fn format_duration(s: f64) -> String {
    let s = s.max(0.0) as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

pub fn progress_line(done: usize, total: usize, elapsed_s: f64, label: &str) -> String {
    let width = 24;
    let filled = (done * width).checked_div(total).unwrap_or(width);
    let eta = if done > 0 {
        elapsed_s / done as f64 * (total - done) as f64
    } else {
        f64::NAN
    };
    let eta = if eta.is_nan() {
        "?".to_string()
    } else {
        format_duration(eta)
    };
    format!(
        "[{}{}] {done}/{total} {label} elapsed {} ETA {eta}",
        "#".repeat(filled),
        ".".repeat(width - filled),
        format_duration(elapsed_s)
    )
}

/// The `run` words of one run of a sweep: the sweep's own run options, then
/// the scenario's, then the variant's (the last occurrence wins).
pub fn run_words(common: &[String], s: &Scenario, v: &Variant) -> Vec<String> {
    let mut argv = vec!["run".to_string()];
    argv.extend(common.iter().cloned());
    argv.extend(s.args.iter().cloned());
    argv.extend(v.args.iter().cloned());
    argv.extend(["--json".to_string(), "--variant".into(), v.name.clone()]);
    argv
}

/// The words that name a profiled run's files (nothing when the run is not profiled):
/// `--profile-name OUT-STEM.SCENARIO.VARIANT.rROUND` (`sweep` without --out: `sweep.…`), and
/// `--profile-dir` the directory of --out unless the run's words give one.
pub fn profile_words(
    argv: &[String],
    out: Option<&str>,
    scenario: &str,
    variant: &str,
    round: usize,
) -> Vec<String> {
    let Ok(o) = RunOpts::try_parse_words(argv) else {
        return Vec::new();
    };
    if !o.profile {
        return Vec::new();
    }
    let out = out.map(std::path::Path::new);
    let stem = out
        .and_then(|p| p.file_stem())
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "sweep".into());
    let clean = |x: &str| -> String {
        x.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut w = vec![
        "--profile-name".to_string(),
        format!(
            "{}.{}.{}.r{}",
            clean(&stem),
            clean(scenario),
            clean(variant),
            round + 1
        ),
    ];
    if o.profile_dir.is_none() {
        if let Some(dir) = out.and_then(|p| p.parent()) {
            let dir = if dir.as_os_str().is_empty() {
                ".".into()
            } else {
                dir.to_string_lossy().into_owned()
            };
            w.extend(["--profile-dir".to_string(), dir]);
        }
    }
    w
}

/// `sweep --variants FILE [--scenarios FILE] --rounds N [--out FILE] [run args…]`;
/// `words` are the words after `sweep` on the command line.
pub fn sweep_main(a: &SweepOpts, words: &[String]) -> Result<i32, String> {
    let vpath = &a.variants;
    let variants =
        parse_variants(&std::fs::read_to_string(vpath).map_err(|e| format!("{vpath}: {e}"))?)?;
    let scenarios = match &a.scenarios {
        Some(p) => parse_scenarios(&std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?)?,
        None => vec![Scenario {
            name: a.run.scenario.clone(),
            args: vec![],
        }],
    };
    let rounds = a.rounds;
    let common = run_words_of_sweep(words);
    // Every combination must parse before the first run starts: a typo in a
    // variant file fails now, not an hour into the sweep.
    for s in &scenarios {
        for v in &variants {
            RunOpts::try_parse_words(run_words(&common, s, v))
                .and_then(|o| crate::options::check(&o))
                .map_err(|e| format!("scenario {} × variant {}: {e}", s.name, v.name))?;
        }
    }
    let exe = match &a.bench_exe {
        Some(e) => e.clone(),
        None => std::env::current_exe()
            .map_err(|e| e.to_string())?
            .to_string_lossy()
            .into_owned(),
    };
    let mut out: Box<dyn Write> = match &a.out {
        Some(p) => Box::new(std::fs::File::create(p).map_err(|e| format!("{p}: {e}"))?),
        None => Box::new(std::io::stdout()),
    };
    let total = rounds * variants.len() * scenarios.len();
    let started = Instant::now();
    let mut done = 0;
    let mut failures = 0;
    let mut all = String::new();
    let commit = crate::report::commit();
    for round in 0..rounds {
        for s in &scenarios {
            for vi in round_order(variants.len(), round) {
                let v = &variants[vi];
                let label = format!("round {} {} × {}", round + 1, s.name, v.name);
                eprint!(
                    "\r\x1b[K{}",
                    progress_line(done, total, started.elapsed().as_secs_f64(), &label)
                );
                let mut argv = run_words(&common, s, v);
                argv.extend(profile_words(
                    &argv,
                    a.out.as_deref(),
                    &s.name,
                    &v.name,
                    round,
                ));
                let mut cmd = std::process::Command::new(&exe);
                cmd.args(&argv)
                    .stdin(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped());
                for (k, val) in &v.env {
                    cmd.env(k, val);
                }
                if let Some(c) = &commit {
                    cmd.env("UARING_COMMIT", c);
                }
                let result = cmd.output();
                let mut obj = match &result {
                    Ok(o) => {
                        let stdout = String::from_utf8_lossy(&o.stdout);
                        let line = stdout
                            .lines()
                            .rev()
                            .find(|l| l.trim_start().starts_with('{'));
                        match line.and_then(|l| serde_json::from_str::<Value>(l).ok()) {
                            Some(Value::Object(m)) if o.status.success() => m,
                            // A complete run whose responses had errors (exit 1): keep its
                            // measurements; the errors column and first_error say what failed.
                            Some(Value::Object(m))
                                if o.status.code() == Some(1)
                                    && m.get("errors").and_then(|e| e.as_u64()).unwrap_or(0)
                                        > 0 =>
                            {
                                failures += 1;
                                eprintln!(
                                    "\r\x1b[K{label}: {} errors, first: {}",
                                    m["errors"],
                                    m.get("first_error").and_then(|e| e.as_str()).unwrap_or("?")
                                );
                                m
                            }
                            _ => {
                                let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
                                let mut m = serde_json::Map::new();
                                m.insert(
                                    "error".into(),
                                    json!(if err.is_empty() {
                                        format!("exit {}", o.status)
                                    } else {
                                        err
                                    }),
                                );
                                m
                            }
                        }
                    }
                    Err(e) => {
                        let mut m = serde_json::Map::new();
                        m.insert("error".into(), json!(format!("cannot run {exe}: {e}")));
                        m
                    }
                };
                if obj.contains_key("error") {
                    failures += 1;
                    eprintln!("\r\x1b[K{label}: {}", obj["error"].as_str().unwrap_or(""));
                }
                obj.insert("variant".into(), json!(v.name));
                obj.insert("scenario_name".into(), json!(s.name));
                obj.insert("round".into(), json!(round + 1));
                obj.insert("command".into(), json!(argv.join(" ")));
                if !v.env.is_empty() {
                    obj.insert(
                        "env".into(),
                        json!(v
                            .env
                            .iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(" ")),
                    );
                }
                let line = Value::Object(obj).to_string();
                writeln!(out, "{line}").map_err(|e| e.to_string())?;
                all.push_str(&line);
                all.push('\n');
                out.flush().map_err(|e| e.to_string())?;
                done += 1;
            }
        }
    }
    eprintln!(
        "\r\x1b[K{}",
        progress_line(done, total, started.elapsed().as_secs_f64(), "done")
    );
    if failures > 0 {
        eprintln!("uaring-bench sweep: {failures} of {total} runs failed");
    }
    // The summary table: on stdout after a sweep into a file, on stderr when
    // stdout carries the raw results.
    let table = crate::summarize::group(&all).map(|t| crate::summarize::markdown(&t))?;
    if a.out.is_some() {
        print!("{table}");
    } else {
        eprint!("{table}");
    }
    Ok(if failures == total { 1 } else { 0 })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sweep of harness/benchmarks/make-tables.sh parses, and no option in its files
    /// does nothing where it is given (the check `sweep` makes before its first run).
    #[test]
    fn checked_in_sweeps_pass_the_option_checks() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benchmarks");
        let script = std::fs::read_to_string(dir.join("make-tables.sh")).unwrap();
        let common: Vec<String> = ["--duration", "8", "--warmup", "2"]
            .map(String::from)
            .to_vec();
        let mut checked = 0;
        for line in script.lines() {
            let Some(rest) = line.split(") sweep ").nth(1) else {
                continue;
            };
            let w: Vec<&str> = rest.split_whitespace().collect();
            let (variants, scenarios) = (w[1], w[2]);
            let v = parse_variants(&std::fs::read_to_string(dir.join(variants)).unwrap()).unwrap();
            let sc =
                parse_scenarios(&std::fs::read_to_string(dir.join(scenarios)).unwrap()).unwrap();
            for s in &sc {
                for v in &v {
                    let r = RunOpts::try_parse_words(run_words(&common, s, v))
                        .and_then(|o| crate::options::check(&o));
                    assert_eq!(
                        r,
                        Ok(()),
                        "{variants} × {scenarios}: {} × {}",
                        s.name,
                        v.name
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "{checked} combinations");
    }

    #[test]
    fn profiled_runs_get_their_own_file_names() {
        let words = |extra: &[&str]| {
            let mut w = vec!["run".to_string(), "--scenario".into(), "read".into()];
            w.extend(extra.iter().map(|s| s.to_string()));
            w
        };
        assert!(profile_words(&words(&[]), Some("r/x.jsonl"), "s", "v", 0).is_empty());
        assert_eq!(
            profile_words(
                &words(&["--profile"]),
                Some("res/io.jsonl"),
                "read-1",
                "sq poll",
                1
            ),
            vec![
                "--profile-name",
                "io.read-1.sq_poll.r2",
                "--profile-dir",
                "res"
            ]
        );
        assert_eq!(
            profile_words(
                &words(&["--profile", "--profile-dir", "p"]),
                Some("io.jsonl"),
                "s",
                "v",
                0
            ),
            vec!["--profile-name", "io.s.v.r1"]
        );
        assert_eq!(
            profile_words(&words(&["--profile"]), None, "s", "v", 0),
            vec!["--profile-name", "sweep.s.v.r1"]
        );
        let mut w = words(&["--profile"]);
        w.extend(profile_words(&w, Some("x.jsonl"), "s", "v", 0));
        let o = RunOpts::try_parse_words(&w).unwrap();
        assert_eq!(o.profile_name.as_deref(), Some("x.s.v.r1"));
        assert_eq!(o.profile_dir.as_deref(), Some("."));
    }

    #[test]
    fn variant_file() {
        let text = "# placements\n\nsrv0|UARING_IO=uring  X='a b'|--server-cpus 0 --client-cpus 1\nsrv01||--server-cpus 0-1\n";
        let v = parse_variants(text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].name, "srv0");
        assert_eq!(
            v[0].env,
            vec![
                ("UARING_IO".into(), "uring".into()),
                ("X".into(), "a b".into())
            ]
        );
        assert_eq!(v[0].args, vec!["--server-cpus", "0", "--client-cpus", "1"]);
        assert!(v[1].env.is_empty());
        assert!(parse_variants("a|b").is_err());
        assert!(parse_variants("a|NOEQUALS|x").is_err());
        assert!(parse_variants("a||x\na||y").is_err());
        assert!(parse_variants("# only comments\n").is_err());
    }

    #[test]
    fn scenario_file() {
        let s = parse_scenarios(
            "read-d1|--scenario read --inflight 1\n# c\nread-d32|--scenario read --inflight 32",
        )
        .unwrap();
        assert_eq!(s[1].name, "read-d32");
        assert_eq!(s[0].args, vec!["--scenario", "read", "--inflight", "1"]);
    }

    #[test]
    fn order_alternates_and_reverses() {
        assert_eq!(round_order(3, 0), vec![0, 1, 2]);
        assert_eq!(round_order(3, 1), vec![2, 1, 0]);
        assert_eq!(round_order(3, 2), vec![1, 2, 0]);
        assert_eq!(round_order(3, 3), vec![0, 2, 1]);
        assert_eq!(round_order(2, 0), vec![0, 1]);
        assert_eq!(round_order(2, 1), vec![1, 0]);
        // Over 2n rounds every variant is first equally often.
        for n in 1..6 {
            let mut first = vec![0; n];
            for r in 0..2 * n {
                let o = round_order(n, r);
                assert_eq!(o.len(), n);
                let mut sorted = o.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>());
                first[o[0]] += 1;
            }
            assert!(first.iter().all(|&c| c == 2), "{n}: {first:?}");
        }
    }

    #[test]
    fn progress() {
        let p = progress_line(1, 4, 10.0, "x");
        assert!(p.contains("1/4") && p.contains("ETA 30s"), "{p}");
        assert!(progress_line(0, 4, 0.0, "x").contains("ETA ?"));
    }
}
