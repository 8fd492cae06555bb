//! `uaring-bench run --rate R` against the real binary: an open loop sends the Reads it
//! schedules and no more (the closed loop would send as fast as the server answers), every
//! answer is checked as in the closed loop, and the rate is in the result. `--rate` is refused
//! for the scenarios it does not apply to.

mod common;

use common::Server;
use uaring_harness::cli::RunOpts;
use uaring_harness::run::RunConfig;

#[test]
fn an_open_loop_sends_what_it_schedules() {
    let server = Server::start(&["--contract"]);
    let pid = server.child.id().to_string();
    let url = server.url();
    let opts = RunOpts::try_parse_words([
        "run",
        "--url",
        &url,
        "--server-pid",
        &pid,
        "--scenario",
        "read",
        "--clients",
        "2",
        "--inflight",
        "4",
        "--rate",
        "2000",
        "--send",
        "per-request",
        "--duration",
        "1",
        "--warmup",
        "0.2",
        "--server-cpus",
        "0",
        "--client-cpus",
        "0",
        "--foreign-max",
        "1000",
        "--max-repeats",
        "0",
    ])
    .unwrap();
    let run = RunConfig::from_opts(&opts).unwrap();
    let o = uaring_harness::scenarios::run_scenario(&run).unwrap();
    assert_eq!(o["errors"], 0, "{o:?}");
    assert_eq!(o["rate"].as_f64(), Some(2000.0), "{o:?}");
    // 2,000 a second for the measured second: a closed loop of 2 × 4 against a local server
    // does tens of thousands. A little more than the window's share can be counted when the
    // client was held up just before the window and sends what was due then (bounded by how
    // long it was held up); well under half would mean requests never went out.
    let ops = o["ops"].as_u64().unwrap() as f64;
    let want = 2000.0 * o["seconds"].as_f64().unwrap();
    assert!(
        ops <= want * 1.25 + 8.0 && ops > want * 0.5,
        "{ops} Reads for {want} scheduled: {o:?}"
    );
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn rate_is_only_for_reads() {
    for scenario in ["write", "browse", "sub", "echo", "connect"] {
        let opts =
            RunOpts::try_parse_words(["run", "--scenario", scenario, "--rate", "100"]).unwrap();
        let err = RunConfig::from_opts(&opts).unwrap_err();
        assert!(
            err.contains("--rate") && err.contains(scenario),
            "{scenario}: {err}"
        );
    }
    let opts = RunOpts::try_parse_words(["run", "--scenario", "read", "--rate", "-5"]);
    assert!(opts.is_err(), "a negative rate is refused");
}
