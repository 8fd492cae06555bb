//! `uaring-bench`: the native benchmark harness for uaring and any other
//! OPC UA server. See `uaring-bench help`.

use uaring_harness::args::Args;
use uaring_harness::{echo, run, scenarios, summarize, sweep};

const USAGE: &str = "\
uaring-bench run --scenario S [options]      one measured run
uaring-bench sweep --variants FILE [--scenarios FILE] [--rounds 5] [--out FILE] [run options]
uaring-bench summarize --in FILE [--md FILE] [--csv FILE] [--svg PREFIX] [--command CMD]
uaring-bench echo-server --cpus EXPR [--port 0]

scenarios: read, read-batch (--nodes K), write, browse, sub, counters, events, connect, echo

run options:
  --clients N (4) --inflight M (32) --duration S (5) --warmup S (2) --security MODE (none)
  --server-cpus EXPR (0) --client-cpus EXPR (1) --client-threads N (one per client CPU)
  server under test (default: the uaring binary beside this one, --server-bin PATH):
    --server-exe PATH --server-args '... {port} {items} {sampling} {pki} ...' [--ready SUBSTR]
    --url opc.tcp://HOST:PORT [--server-pid PID]
    --server-env 'K=V ...'  --server-name NAME  --no-pin
  --foreign-max CORES (0.15) --max-repeats N (3) --json --variant NAME
  sub/events: --sessions --subscriptions --items --writers --publishing-ms --sampling-ms
  counters: --start-items --max-items --sampling-ms (10) --publishing-ms (1000)
  echo: --echo-req-bytes --echo-resp-bytes
";

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let code = match real_main(&argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("uaring-bench: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn real_main(argv: &[String]) -> Result<i32, String> {
    let a = Args::parse(argv)?;
    let cmd = a.positional.first().map(|s| s.as_str()).unwrap_or("help");
    if a.flag("help") || cmd == "help" {
        print!("{USAGE}");
        return Ok(0);
    }
    match cmd {
        "run" => {
            let cfg = run::RunConfig::from_args(&a)?;
            let o = scenarios::run_scenario(&cfg)?;
            run::print_result(&cfg, &o);
            Ok(if o.get("errors").and_then(|v| v.as_u64()).unwrap_or(0) > 0 { 1 } else { 0 })
        }
        "sweep" => sweep::sweep_main(&a),
        "summarize" => summarize::summarize_main(&a),
        "echo-server" => {
            let cpus = run::resolve_cpus(&a.str_or("cpus", "0"))?;
            echo::echo_server_main(&cpus, a.num("port", 0)?)?;
            Ok(0)
        }
        other => Err(format!("unknown command {other:?}\n{USAGE}")),
    }
}
