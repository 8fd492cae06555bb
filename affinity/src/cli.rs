//! The `uaring topology` report. The command line itself is parsed by the `uaring` binary
//! (shards/src/cli.rs, with clap); this is the typed entry point it calls.

use std::io::Write;
use std::path::PathBuf;

use crate::cpulist::format_plain;
use crate::topology::Topology;

/// What `uaring topology` prints.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TopologyOutput {
    /// The human-readable table (CPUs, cores, classes, caches).
    #[default]
    Table,
    /// The whole topology as JSON.
    Json,
    /// The CPUs a mask expression selects, ascending, comma-separated.
    Resolve(String),
}

/// One `uaring topology` invocation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyRequest {
    /// Read this tree instead of /sys (all its online CPUs count as allowed).
    pub sysfs_root: Option<PathBuf>,
    /// What to print.
    pub output: TopologyOutput,
}

/// Runs `uaring topology` on stdout/stderr. Exit codes: 0 success, 1 the topology could not be
/// read or the expression was rejected.
pub fn topology_command(request: &TopologyRequest) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    topology_report(request, &mut stdout.lock(), &mut stderr.lock())
}

/// [`topology_command`] with explicit output streams (for tests and embedding).
pub fn topology_report(request: &TopologyRequest, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let topology = match &request.sysfs_root {
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
    let written = match &request.output {
        TopologyOutput::Resolve(expr) => match topology.resolve(expr) {
            Ok(cpus) => writeln!(out, "{}", format_plain(&cpus)),
            Err(e) => {
                let _ = writeln!(err, "uaring topology: {e}");
                return 1;
            }
        },
        TopologyOutput::Json => writeln!(out, "{}", topology.to_json()),
        TopologyOutput::Table => out.write_all(topology.render_table().as_bytes()),
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(err, "uaring topology: cannot write output: {e}");
            1
        }
    }
}
