//! What the peer's tests share.

use std::path::PathBuf;

/// The `uaring-bench` binary: $UARING_BENCH, else `uaring-bench` in this test's target
/// directory (`cargo test --workspace` builds it; or `cargo build -p uaring-harness`).
pub fn bench_bin() -> PathBuf {
    if let Ok(p) = std::env::var("UARING_BENCH") {
        return PathBuf::from(p);
    }
    // target/<profile>/deps/push-… → target/<profile>/uaring-bench
    let me = std::env::current_exe().unwrap();
    let p = me
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("uaring-bench");
    assert!(
        p.exists(),
        "{} is missing: cargo build -p uaring-harness (or set UARING_BENCH)",
        p.display()
    );
    p
}
