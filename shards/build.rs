//! Records the git revision of the build for `uaring --version` (UARING_GIT_REVISION):
//! `git rev-parse --short=12 HEAD`, or `unknown` outside a git checkout (a source tarball)
//! or without git. Uncommitted changes are not marked: cargo does not rerun this script
//! when files of other crates change, so a mark could not be kept right.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
}

fn main() {
    let rev = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(r) if !r.is_empty() => r,
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=UARING_GIT_REVISION={rev}");
    // Rerun when HEAD moves: a checkout (HEAD) or a commit on the branch (its ref, or
    // packed-refs after a gc).
    for p in ["HEAD", "packed-refs"] {
        if let Some(path) = git(&["rev-parse", "--git-path", p]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(path) = git(&["rev-parse", "--git-path", &r]) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
