//! Stand-alone `uaring topology`: `cargo run -p uaring-affinity --example topology -- [--json | --resolve EXPR] [--sysfs-root DIR]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(uaring_affinity::topology_command(&args));
}
