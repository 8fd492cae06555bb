//! `uaring --version`, `uaring config check FILE` and `uaring serve --nodeset FILE`, run as a
//! user would.

mod common;

use std::process::Command;

use common::{bin, TempDir};

fn tmp(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn nodesets() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/nodesets")
}

#[test]
fn version_names_the_git_revision() {
    let out = Command::new(bin()).arg("--version").output().unwrap();
    assert!(out.status.success());
    let v = String::from_utf8(out.stdout).unwrap();
    let expected_rev = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    assert!(
        v.starts_with(&format!("uaring {} (git ", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let rev = v
        .trim()
        .rsplit_once("(git ")
        .unwrap()
        .1
        .trim_end_matches(')');
    match expected_rev {
        // Built from this checkout: the revision is HEAD's, unless HEAD moved after the build.
        Some(head) => assert!(
            rev == head || (rev.len() == 12 && rev.bytes().all(|c| c.is_ascii_hexdigit())),
            "{v}"
        ),
        None => assert_eq!(rev, "unknown", "{v}"),
    }
}

#[test]
fn config_check_prints_effective_values_and_loads_nodesets() {
    let dir = TempDir::new("uaring-cli-config");
    let di = nodesets().join("Opc.Ua.Di.NodeSet2.xml");
    let f = tmp(
        &dir,
        "good.toml",
        &format!("[runtime]\nlisten = \"127.0.0.1:4999\"\n[operation_limits]\nmax_nodes_per_read = 77\n[[nodesets]]\nfile = {:?}\n", di.display().to_string()),
    );
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&f)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // What the file set, and the defaults it did not.
    assert!(text.contains("listen = \"127.0.0.1:4999\""), "{text}");
    assert!(text.contains("max_nodes_per_read = 77"), "{text}");
    assert!(text.contains("max_nodes_per_write = 10000"), "{text}");
    assert!(
        text.contains("policies = [\"None\", \"Basic256Sha256\""),
        "{text}"
    );
    assert!(
        text.contains("#   2: http://opcfoundation.org/UA/DI/"),
        "{text}"
    );
    // The printed configuration is itself a valid configuration.
    let again = tmp(&dir, "again.toml", &text);
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), text);
}

/// The production profile README.md points to is valid and says what it promises: no None
/// endpoint, SignAndEncrypt only, no anonymous logins, one listen address.
#[test]
fn the_shipped_production_profile_passes_config_check() {
    let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/uaring.production.toml");
    let out = Command::new(bin())
        .args(["config", "check"])
        .arg(&f)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("listen = \"127.0.0.1:4840\""), "{text}");
    assert!(
        text.contains(
            "policies = [\"Basic256Sha256\", \"Aes128_Sha256_RsaOaep\", \"Aes256_Sha256_RsaPss\"]"
        ),
        "{text}"
    );
    assert!(text.contains("modes = [\"SignAndEncrypt\"]"), "{text}");
    assert!(text.contains("anonymous = \"off\""), "{text}");
}

#[test]
fn config_check_rejects_with_the_reason() {
    let dir = TempDir::new("uaring-cli-config");
    for (text, needle) in [
        ("[runtime]\nring_entries = 1000\n", "ring_entries"),
        (
            "[operation_limits]\nmax_nodes_per_read = 0\n",
            "max_nodes_per_read",
        ),
        (
            "[security]\npolicies = [\"Basic128Rsa15\"]\n",
            "Basic128Rsa15",
        ),
        (
            "[[users]]\nname = \"op\"\npassword = \"plain\"\nrole = \"read\"\n",
            "[[users]]",
        ),
        ("[aplication]\n", "aplication"),
        (
            "[[nodesets]]\nfile = \"/nonexistent/x.xml\"\n",
            "/nonexistent/x.xml",
        ),
    ] {
        let f = tmp(&dir, "bad.toml", text);
        let out = Command::new(bin())
            .args(["config", "check"])
            .arg(&f)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}: {err}");
        assert!(err.contains(needle), "{text}: {err}");
        assert!(out.stdout.is_empty(), "{text}");
    }
    let out = Command::new(bin())
        .args(["config", "check", "/nonexistent.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let out = Command::new(bin())
        .args(["config", "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "FILE is required");
}

#[test]
fn serve_nodeset_flag_loads_a_model() {
    let dir = TempDir::new("uaring-cli-config");
    // Machinery alone cannot load (it requires DI): --nodeset adds DI after the file's entry.
    let ma = nodesets().join("Opc.Ua.Machinery.NodeSet2.xml");
    let f = tmp(
        &dir,
        "ma.toml",
        &format!("[[nodesets]]\nfile = {:?}\n", ma.display().to_string()),
    );
    let out = Command::new(bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&f)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("requires model http://opcfoundation.org/UA/DI/"));
    let di = nodesets().join("Opc.Ua.Di.NodeSet2.xml");
    let server = common::Server::start(&[
        "--config",
        f.to_str().unwrap(),
        "--nodeset",
        di.to_str().unwrap(),
    ]);
    let (code, _, err) = server.terminate();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("companion model loaded")
            && err.contains("http://opcfoundation.org/UA/Machinery/"),
        "{err}"
    );
}
