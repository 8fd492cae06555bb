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
    // packed-refs after a gc). Only files that exist: cargo reruns the script on every build
    // for a path that does not (a fresh clone has no packed-refs, a gc'd branch no loose ref).
    let mut paths = Vec::new();
    for p in ["HEAD", "packed-refs"] {
        paths.extend(git(&["rev-parse", "--git-path", p]));
    }
    if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
        paths.extend(git(&["rev-parse", "--git-path", &r]));
    }
    for path in paths {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
