//! `uaring-bench`: the native benchmark harness for uaring and any other
//! OPC UA server. See `uaring-bench --help` and `uaring-bench run --help`.

use uaring_harness::cli::{Cli, Command};
use uaring_harness::{echo, placements, run, scenarios, soak, summarize, sweep};

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    let cli = match Cli::try_parse_recording(&argv) {
        Ok(c) => c,
        Err(e) => {
            // --help prints to stdout and exits 0; errors print to stderr and exit 2.
            e.exit();
        }
    };
    let code = match real_main(cli, &argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uaring-bench: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn real_main(cli: Cli, argv: &[String]) -> Result<i32, String> {
    match cli.command {
        Command::Run(opts) => {
            let cfg = run::RunConfig::from_opts(&opts)?;
            let o = scenarios::run_scenario(&cfg)?;
            run::print_result(&cfg, &o);
            Ok(
                if o.get("errors").and_then(|v| v.as_u64()).unwrap_or(0) > 0 {
                    1
                } else {
                    0
                },
            )
        }
        Command::Sweep(opts) => {
            // The words after `sweep`, minus the sweep's own options, go to every run.
            let at = argv
                .iter()
                .position(|w| w == "sweep")
                .map(|i| i + 1)
                .unwrap_or(argv.len());
            sweep::sweep_main(&opts, &argv[at..])
        }
        Command::Summarize(opts) => summarize::summarize_main(&opts),
        Command::Placements(opts) => placements::placements_main(&opts),
        Command::Soak(opts) => soak::soak_main(&opts, argv),
        Command::EchoServer(opts) => {
            let cpus = run::resolve_cpus(&opts.cpus)?;
            echo::echo_server_main(&cpus, opts.port, &opts.io_backend)?;
            Ok(0)
        }
    }
}
