//! The `uaring topology` report, driven through its typed library entry point (the binary's
//! command-line parsing is tested in shards/tests/serve.rs).

use std::path::PathBuf;

use uaring_affinity::{fixture, topology_report, TopologyOutput, TopologyRequest};

fn call(root: Option<&str>, output: TopologyOutput) -> (i32, String, String) {
    let request = TopologyRequest {
        sysfs_root: root.map(PathBuf::from),
        output,
    };
    let mut out = Vec::new();
    let mut err = Vec::new();
    let code = topology_report(&request, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

fn resolve(e: &str) -> TopologyOutput {
    TopologyOutput::Resolve(e.to_string())
}

#[test]
fn resolve_prints_one_ascending_line() {
    let tree = fixture::intel_8p_16e().build("cli-resolve").unwrap();
    let root = tree.path().to_str().unwrap();
    let (code, out, err) = call(Some(root), resolve("P:nosmt,16"));
    assert_eq!(
        (code, out.as_str(), err.as_str()),
        (0, "0,2,4,6,8,10,12,14,16\n", "")
    );
    let (code, out, _) = call(Some(root), resolve("0xF"));
    assert_eq!((code, out.as_str()), (0, "0,1,2,3\n"));
}

#[test]
fn resolve_errors_exit_1_and_name_the_part() {
    let tree = fixture::vm_2vcpu().build("cli-bad").unwrap();
    let root = tree.path().to_str().unwrap();
    let (code, out, err) = call(Some(root), resolve("all,bogus"));
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(err.contains("\"bogus\""), "{err}");
}

#[test]
fn json_output() {
    let tree = fixture::arm_big_little().build("cli-json").unwrap();
    let root = tree.path().to_str().unwrap();
    let (code, out, _) = call(Some(root), TopologyOutput::Json);
    assert_eq!(code, 0);
    assert!(out.starts_with("{\"cpus\":[{\"cpu\":0,"), "{out}");
    assert!(out.contains(r#""classes":[{"name":"P","cpus":[4,5,6,7],"cores":4},{"name":"E","cpus":[0,1,2,3],"cores":4}]"#), "{out}");
    assert!(out.contains(r#""class_source":"cpu_capacity""#), "{out}");
    assert!(out.ends_with("}\n"));
}

#[test]
fn table_output() {
    let tree = fixture::two_socket_numa().build("cli-table").unwrap();
    let root = tree.path().to_str().unwrap();
    let (code, out, _) = call(Some(root), TopologyOutput::Table);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines()
            .filter(|l| l.starts_with(|c: char| c.is_ascii_digit()))
            .count(),
        32
    );
    assert!(out.contains("node1 8-15,24-31"), "{out}");
    assert!(out.contains("3900"), "{out}");
}

#[test]
fn unreadable_root_exits_1() {
    let tree = fixture::TempTree::new("cli-empty").unwrap();
    let (code, _, err) = call(Some(tree.path().to_str().unwrap()), TopologyOutput::Table);
    assert_eq!(code, 1);
    assert!(err.contains("devices/system/cpu/online"), "{err}");
}

#[test]
fn live_machine() {
    let (code, out, err) = call(None, resolve("all"));
    assert_eq!(code, 0, "{err}");
    let allowed = uaring_affinity::allowed_cpus().unwrap();
    let expected: Vec<String> = allowed.iter().map(|c| c.to_string()).collect();
    assert_eq!(out.trim_end(), expected.join(","));
    let (code, out, _) = call(None, TopologyOutput::Table);
    assert_eq!(code, 0);
    assert!(out.contains("classes (from"));
}
