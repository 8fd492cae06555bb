//! The `uaring` binary: see `uaring --help`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = uaring::cli::main(&args);
    std::process::exit(code);
}
