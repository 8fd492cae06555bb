//! The checked-in generated code must equal what the generator writes now, and the
//! vendored schema inputs must equal the shared copy when there is one.

use std::path::Path;

#[test]
fn generated_files_are_up_to_date() {
    let root = uaring_codegen::workspace_root();
    let files = uaring_codegen::generate(&uaring_codegen::spec_dir());
    let stale = uaring_codegen::stale(&root, &files);
    assert!(
        stale.is_empty(),
        "generated files are stale: {stale:?}; run `cargo run -p uaring-codegen` to regenerate"
    );
}

#[test]
fn generation_is_deterministic() {
    let a = uaring_codegen::generate(&uaring_codegen::spec_dir());
    let b = uaring_codegen::generate(&uaring_codegen::spec_dir());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert_eq!(x.path, y.path);
        assert!(
            x.contents == y.contents,
            "{} differs between two runs",
            x.path.display()
        );
    }
}

#[test]
fn vendored_spec_matches_shared_spec() {
    let shared = uaring_codegen::workspace_root().join("../shared/spec");
    if !shared.is_dir() {
        println!(
            "note: {} does not exist; skipping the comparison",
            shared.display()
        );
        return;
    }
    // Every vendored schema file (our README is our own) must equal the shared copy.
    let ours = uaring_codegen::spec_dir();
    let mut compared = 0;
    for e in std::fs::read_dir(&ours).expect("read codegen/spec") {
        let e = e.expect("dir entry");
        let name = e.file_name();
        if name == "README.md" {
            continue;
        }
        let theirs = shared.join(&name);
        assert!(
            theirs.exists(),
            "{} is in codegen/spec but not in shared/spec",
            Path::new(&name).display()
        );
        let a = std::fs::read(e.path()).expect("read vendored file");
        let b = std::fs::read(&theirs).expect("read shared file");
        assert!(
            a == b,
            "codegen/spec/{} differs from shared/spec",
            Path::new(&name).display()
        );
        compared += 1;
    }
    assert!(compared >= 5, "only {compared} schema files compared");
    println!("compared {compared} files with {}", shared.display());
}
