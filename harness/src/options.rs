//! Options that do nothing where they are given are refused, with a message, instead of being
//! accepted and ignored: a scenario's own options in another scenario, and the options of an
//! external server (`--server-exe`) or of a running one (`--url`) with a target they do not
//! apply to. `run` checks before it starts; `sweep` checks every scenario × variant before
//! the first run.

use crate::cli::{option_name, RunOpts};

/// Options that only some scenarios read, with the scenarios that do.
const SCENARIO_OPTIONS: &[(&str, &[&str])] = &[
    ("nodes", &["read-batch", "scale-nodes", "scale-churn"]),
    ("service", &["scale-nodes"]),
    ("create_items", &["scale-items"]),
    ("churn_nodes", &["scale-churn"]),
    ("churn_batch", &["scale-churn"]),
    ("churn_rate", &["scale-churn"]),
    ("churn_user", &["scale-churn"]),
    ("writers", &["sub"]),
    ("write_rate", &["sub"]),
    ("subscriptions", &["sub", "events"]),
    (
        "items",
        &["sub", "events", "push", "scale-items", "scale-churn"],
    ),
    (
        "sampling_ms",
        &["sub", "events", "counters", "scale-items", "scale-churn"],
    ),
    (
        "sessions",
        &["sub", "events", "counters", "push", "scale-items"],
    ),
    (
        "publishing_ms",
        &[
            "sub",
            "events",
            "counters",
            "push",
            "scale-items",
            "scale-churn",
        ],
    ),
    ("start_items", &["counters"]),
    ("max_items", &["counters"]),
    ("storm", &["read", "read-batch", "write", "browse"]),
    ("storm_user", &["read", "read-batch", "write", "browse"]),
    (
        "rate",
        &["read", "read-batch", "history-ingest", "scale-churn"],
    ),
    ("echo_bytes", &["echo"]),
    (
        "history_values",
        &["history-read-raw", "history-read-processed"],
    ),
    (
        "history_pattern",
        &["history-read-raw", "history-read-processed"],
    ),
    ("values_per_call", &["history-read-raw"]),
    ("intervals", &["history-read-processed"]),
    ("aggregate", &["history-read-processed"]),
];

/// Refuses the given options that do nothing for `o`'s scenario and target.
pub fn check(o: &RunOpts) -> Result<(), String> {
    let given = |id: &str| o.given.iter().any(|g| g == id);
    for (id, scenarios) in SCENARIO_OPTIONS {
        if given(id) && !scenarios.contains(&o.scenario.as_str()) {
            return Err(format!(
                "{}: only for the {} scenario{}, not {}",
                option_name(id),
                scenarios.join(", "),
                if scenarios.len() > 1 { "s" } else { "" },
                o.scenario
            ));
        }
    }
    for id in [
        "profile_dir",
        "profile_name",
        "profile_freq",
        "profile_call_graph",
        "profile_top",
    ] {
        if given(id) && !o.profile {
            return Err(format!("{}: an option of --profile", option_name(id)));
        }
    }
    if o.profile && o.scenario == "counters" {
        return Err(
            "--profile: the counters scenario is a search over many windows; profile one of its steps as a sub run instead"
                .into(),
        );
    }
    if o.profile && o.url.is_some() && o.server_pid.is_empty() {
        return Err(
            "--profile with --url: give the running server's --server-pid to attach perf to".into(),
        );
    }
    if given("storm_user") && o.storm == 0 {
        return Err("--storm-user: the storm's logins, so it needs --storm N".into());
    }
    let external = o.server_exe.is_some();
    let running = o.url.is_some();
    if !o.server_pid.is_empty() && !running {
        return Err(
            "--server-pid: the processes of a running server (--url); a server this tool starts is measured by its own pid"
                .into(),
        );
    }
    if !external && !o.scenario.eq("echo") {
        for id in ["pki", "ready", "no_pin"] {
            if given(id) {
                return Err(format!(
                    "{}: for an external server (--server-exe), not {}",
                    option_name(id),
                    if running {
                        "a running one (--url)"
                    } else {
                        "the uaring server this tool starts"
                    }
                ));
            }
        }
    }
    crate::push::check_options(o)?;
    crate::scale::check_options(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> RunOpts {
        let cli = crate::cli::Cli::try_parse_recording(
            &std::iter::once("uaring-bench")
                .chain(std::iter::once("run"))
                .chain(words.iter().copied())
                .map(String::from)
                .collect::<Vec<_>>(),
        )
        .expect("parses");
        match cli.command {
            crate::cli::Command::Run(o) => o,
            _ => panic!("run"),
        }
    }

    #[test]
    fn scenario_options_elsewhere_are_refused() {
        for (words, needle) in [
            (
                &["--scenario", "read", "--writers", "2"][..],
                "--writers: only for the sub scenario, not read",
            ),
            (&["--scenario", "read", "--write-rate", "5"], "--write-rate"),
            (
                &["--scenario", "browse", "--items", "5"],
                "--items: only for the sub, events, push, scale-items, scale-churn scenarios",
            ),
            (
                &["--scenario", "write", "--subscriptions", "2"],
                "--subscriptions",
            ),
            (
                &["--scenario", "read", "--nodes", "10"],
                "--nodes: only for the read-batch, scale-nodes, scale-churn scenarios",
            ),
            (&["--scenario", "sub", "--storm", "2"], "--storm"),
            (&["--scenario", "echo", "--sessions", "2"], "--sessions"),
            (
                &["--scenario", "read", "--echo-bytes", "64"],
                "--echo-bytes",
            ),
            (
                &["--scenario", "sub", "--start-items", "64"],
                "--start-items",
            ),
            (
                &["--scenario", "read", "--storm-user", "a:b"],
                "needs --storm",
            ),
            (&["--scenario", "read", "--server-pid", "1"], "--server-pid"),
            (
                &["--scenario", "read", "--pki", "x"],
                "--pki: for an external server",
            ),
            (&["--scenario", "read", "--no-pin"], "--no-pin"),
            (
                &["--scenario", "read", "--profile-dir", "x"],
                "--profile-dir: an option of --profile",
            ),
            (
                &["--scenario", "read", "--profile-freq", "99"],
                "--profile-freq",
            ),
            (
                &["--scenario", "counters", "--profile"],
                "--profile: the counters scenario",
            ),
            (
                &["--scenario", "read", "--profile", "--url", "opc.tcp://h:1"],
                "--server-pid",
            ),
            (
                &[
                    "--scenario",
                    "read",
                    "--url",
                    "opc.tcp://h:1",
                    "--ready",
                    "x",
                ],
                "not a running one",
            ),
        ] {
            let e = check(&parse(words)).expect_err(&format!("{words:?}"));
            assert!(e.contains(needle), "{words:?}: {e}");
        }
    }

    #[test]
    fn options_where_they_work_pass() {
        for words in [
            &["--scenario", "read-batch", "--nodes", "10"][..],
            &[
                "--scenario",
                "sub",
                "--writers",
                "2",
                "--write-rate",
                "5",
                "--items",
                "3",
                "--sessions",
                "2",
                "--sampling-ms",
                "5",
            ],
            &[
                "--scenario",
                "events",
                "--subscriptions",
                "2",
                "--publishing-ms",
                "50",
            ],
            &[
                "--scenario",
                "counters",
                "--start-items",
                "100",
                "--max-items",
                "1000",
                "--sampling-ms",
                "10",
            ],
            &[
                "--scenario",
                "read",
                "--storm",
                "1",
                "--storm-user",
                "a:b",
                "--rate",
                "100",
            ],
            &[
                "--scenario",
                "read",
                "--url",
                "opc.tcp://h:1",
                "--server-pid",
                "1",
            ],
            &[
                "--scenario",
                "read",
                "--server-exe",
                "x",
                "--pki",
                "p",
                "--ready",
                "r",
                "--no-pin",
            ],
            &[
                "--scenario",
                "read",
                "--profile",
                "--profile-dir",
                "d",
                "--profile-freq",
                "499",
                "--profile-call-graph",
                "dwarf",
                "--profile-top",
                "3",
                "--server-priority",
                "nice:-5",
                "--client-priority",
                "fifo:10",
            ],
            &["--scenario", "echo", "--echo-bytes", "64"],
            &["--scenario", "read"],
        ] {
            assert_eq!(check(&parse(words)), Ok(()), "{words:?}");
        }
    }
}
