//! `cargo run -p uaring-codegen [-- --check] [--root DIR]`
//!
//! Without `--check`, writes the generated files under the workspace root. With `--check`,
//! writes nothing and exits 1 when a checked-in file differs from what would be generated.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut check = false;
    let mut root = uaring_codegen::workspace_root();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--check" => check = true,
            "--root" => root = PathBuf::from(args.next().expect("--root needs a directory")),
            other => {
                eprintln!(
                    "usage: uaring-codegen [--check] [--root DIR] (unknown argument {other})"
                );
                return ExitCode::from(2);
            }
        }
    }
    let files = uaring_codegen::generate(&uaring_codegen::spec_dir());
    let stale = uaring_codegen::stale(&root, &files);
    if check {
        if stale.is_empty() {
            println!("generated files are up to date ({} files)", files.len());
            return ExitCode::SUCCESS;
        }
        for p in &stale {
            eprintln!("stale: {}", p.display());
        }
        eprintln!("run `cargo run -p uaring-codegen` to regenerate");
        return ExitCode::FAILURE;
    }
    for f in &files {
        if stale.contains(&f.path) {
            let p = root.join(&f.path);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("create dir");
            std::fs::write(&p, &f.contents)
                .unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
            println!("wrote {}", f.path.display());
        }
    }
    println!("{} files, {} rewritten", files.len(), stale.len());
    ExitCode::SUCCESS
}
