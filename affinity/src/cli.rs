//! The `uaring topology` subcommand.

use std::io::Write;
use std::path::PathBuf;

use crate::cpulist::format_plain;
use crate::topology::Topology;

pub(crate) const USAGE: &str = "\
usage: uaring topology [--sysfs-root DIR] [--json | --resolve EXPR]

Shows the CPU topology: CPUs, cores, packages, NUMA nodes, core classes
(P, E, E2, … fastest first), SMT siblings, L2/L3 groups and max frequency.

options:
  --sysfs-root DIR   read DIR instead of /sys (all its online CPUs count as
                     allowed; without it, the process's affinity applies)
  --json             print JSON instead of a table
  --resolve EXPR     print the CPUs EXPR selects, ascending, comma-separated
                     (EXPR: all, P, E, P:nosmt, node0, 0xFF, 0-3,8, P&node0)
  -h, --help         show this help
";

/// Exit codes: 0 success, 1 the topology could not be read or the expression
/// was rejected, 2 bad command line.
pub fn topology_command(args: &[String]) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    run(args, &mut stdout.lock(), &mut stderr.lock())
}

/// [`topology_command`] with explicit output streams (for tests and
/// embedding).
pub fn run(args: &[String], out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let mut root: Option<PathBuf> = None;
    let mut json = false;
    let mut resolve: Option<String> = None;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg, None),
        };
        let value = |i: &mut usize| -> Option<String> {
            if let Some(v) = inline.clone() {
                return Some(v);
            }
            *i += 1;
            args.get(*i).cloned()
        };
        match name {
            "-h" | "--help" => {
                let _ = out.write_all(USAGE.as_bytes());
                return 0;
            }
            "--json" if inline.is_none() => json = true,
            "--sysfs-root" => match value(&mut i) {
                Some(v) if !v.is_empty() => root = Some(PathBuf::from(v)),
                _ => return usage_error(err, "--sysfs-root needs a directory"),
            },
            "--resolve" => match value(&mut i) {
                Some(v) => resolve = Some(v),
                None => return usage_error(err, "--resolve needs an expression"),
            },
            _ => return usage_error(err, &format!("unknown argument {arg:?}")),
        }
        i += 1;
    }
    if json && resolve.is_some() {
        return usage_error(err, "--json and --resolve cannot be combined");
    }
    let topology = match &root {
        Some(root) => Topology::from_sysfs(root),
        None => Topology::system(),
    };
    let topology = match topology {
        Ok(t) => t,
        Err(e) => {
            let _ = writeln!(err, "uaring topology: {e}");
            return 1;
        }
    };
    let written = if let Some(expr) = resolve {
        match topology.resolve(&expr) {
            Ok(cpus) => writeln!(out, "{}", format_plain(&cpus)),
            Err(e) => {
                let _ = writeln!(err, "uaring topology: {e}");
                return 1;
            }
        }
    } else if json {
        writeln!(out, "{}", topology.to_json())
    } else {
        out.write_all(topology.render_table().as_bytes())
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "uaring topology: cannot write output: {e}");
            1
        }
    }
}

fn usage_error(err: &mut dyn Write, message: &str) -> i32 {
    let _ = writeln!(err, "uaring topology: {message}\n\n{USAGE}");
    2
}
