//! Topology, classes, siblings, nodes and every mask form on fixture trees of
//! real machine shapes (see `uaring_affinity::fixture`).

use uaring_affinity::fixture::{self, SysfsBuilder, TempTree};
use uaring_affinity::{ClassSource, Topology, TopologyError};

fn load(builder: &SysfsBuilder, label: &str) -> (TempTree, Topology) {
    let tree = builder.build(label).expect("write fixture");
    let topology =
        Topology::from_sysfs(tree.path()).unwrap_or_else(|e| panic!("fixture {label}: {e}"));
    (tree, topology)
}

fn class_cpus(t: &Topology, name: &str) -> Vec<usize> {
    t.classes()
        .iter()
        .find(|c| c.name == name)
        .map(|c| c.cpus.clone())
        .unwrap_or_default()
}

fn err(t: &Topology, expr: &str) -> String {
    match t.resolve(expr) {
        Ok(cpus) => panic!("{expr:?} should fail, resolved to {cpus:?}"),
        Err(e) => e.to_string(),
    }
}

fn range(a: usize, b: usize) -> Vec<usize> {
    (a..=b).collect()
}

// ---------------------------------------------------------------- Intel hybrid

#[test]
fn intel_hybrid_classes_from_pmu() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel");
    assert_eq!(t.class_source(), ClassSource::HybridPmu);
    assert_eq!(t.classes().len(), 2);
    assert_eq!(t.classes()[0].name, "P");
    assert_eq!(class_cpus(&t, "P"), range(0, 15));
    assert_eq!(class_cpus(&t, "E"), range(16, 31));
    assert_eq!(t.classes()[0].cores, 8);
    assert_eq!(t.classes()[1].cores, 16);
    assert_eq!(t.class_of(15), Some("P"));
    assert_eq!(t.class_of(20), Some("E"));
    assert_eq!(t.class_of(32), None);
}

#[test]
fn intel_hybrid_siblings_and_caches() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel-smt");
    let cpu0 = t.cpu(0).unwrap();
    assert_eq!(cpu0.siblings, vec![0, 1]);
    assert_eq!(cpu0.core_id, Some(0));
    assert_eq!(t.cpu(3).unwrap().siblings, vec![2, 3]);
    assert_eq!(t.cpu(3).unwrap().core_id, Some(4));
    assert_eq!(t.cpu(17).unwrap().siblings, vec![17]);
    let l2 = t.cpu(17).unwrap().l2.unwrap();
    assert_eq!(t.caches()[l2].cpus, range(16, 19));
    assert_eq!(t.caches()[l2].size_bytes, Some(4096 * 1024));
    let l3 = t.cpu(0).unwrap().l3.unwrap();
    assert_eq!(t.caches()[l3].cpus, range(0, 31));
    assert_eq!(t.cpu(5).unwrap().max_freq_khz, Some(5_800_000));
}

#[test]
fn intel_hybrid_masks() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel-masks");
    assert_eq!(t.resolve("all").unwrap(), range(0, 31));
    assert_eq!(t.resolve("P").unwrap(), range(0, 15));
    assert_eq!(t.resolve("E").unwrap(), range(16, 31));
    assert_eq!(
        t.resolve("P:nosmt").unwrap(),
        (0..16).step_by(2).collect::<Vec<_>>()
    );
    assert_eq!(t.resolve("E:nosmt").unwrap(), range(16, 31));
    let mut all_nosmt: Vec<usize> = (0..16).step_by(2).collect();
    all_nosmt.extend(16..32);
    assert_eq!(t.resolve("all:nosmt").unwrap(), all_nosmt);
    assert_eq!(t.resolve("0xFF").unwrap(), range(0, 7));
    assert_eq!(t.resolve("0xFFFF0000").unwrap(), range(16, 31));
    assert_eq!(t.resolve("0-3,8").unwrap(), vec![0, 1, 2, 3, 8]);
    assert_eq!(t.resolve("node0").unwrap(), range(0, 31));
    assert_eq!(t.resolve("P:nosmt,E").unwrap().len(), 24);
    assert_eq!(t.resolve("P&0-3").unwrap(), range(0, 3));
    assert_eq!(t.resolve(" p , 16 ").unwrap().len(), 17);
    assert!(err(&t, "0x100000000").contains("CPU 32 is not online"));
    assert!(err(&t, "E2").contains("no class E2"));
    assert!(err(&t, "P&E").contains("selects no CPU"));
}

#[test]
fn intel_hybrid_describe() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel-describe");
    assert_eq!(
        t.describe(&[16, 0, 1]),
        "CPUs 0,1,16 (class P: 0,1; class E: 16)"
    );
    assert_eq!(
        t.describe(&range(0, 31)),
        "CPUs 0-31 (class P: 0-15; class E: 16-31)"
    );
    assert_eq!(t.describe(&[3]), "CPU 3 (class P: 3)");
    // The example in docs/Placement.md.
    assert_eq!(
        t.describe(&[0, 2, 4, 6, 16]),
        "CPUs 0,2,4,6,16 (class P: 0,2,4,6; class E: 16)"
    );
}

#[test]
fn hybrid_pmu_wins_over_capacity() {
    let mut b = fixture::intel_8p_16e();
    for cpu in &mut b.cpus {
        // Deliberately contradictory capacities.
        cpu.capacity = Some(if cpu.cpu >= 16 { 1024 } else { 300 });
    }
    let (_tree, t) = load(&b, "intel-capacity");
    assert_eq!(t.class_source(), ClassSource::HybridPmu);
    assert_eq!(class_cpus(&t, "P"), range(0, 15));
}

#[test]
fn partial_hybrid_pmu_falls_back_to_frequency() {
    let mut b = fixture::intel_8p_16e();
    b.cpu_atom_pmu = None;
    let (_tree, t) = load(&b, "intel-partial");
    assert_eq!(t.class_source(), ClassSource::CpuFreq);
    // 5.8 and 5.5 GHz are within 10 %: one class; 4.3 GHz is the next.
    assert_eq!(class_cpus(&t, "P"), range(0, 15));
    assert_eq!(class_cpus(&t, "E"), range(16, 31));
}

#[test]
fn hybrid_with_only_atom_cores_is_one_class_p() {
    let mut b = fixture::intel_8p_16e();
    b.cpu_core_pmu = Some(Vec::new());
    b.cpu_atom_pmu = Some(range(0, 31));
    let (_tree, t) = load(&b, "intel-atom");
    assert_eq!(t.classes().len(), 1);
    assert_eq!(t.classes()[0].name, "P");
}

// ---------------------------------------------------------------- AMD Zen 5 + 5c

#[test]
fn amd_classes_from_max_frequency() {
    let (_tree, t) = load(&fixture::amd_zen5_4_zen5c_8(), "amd");
    // cpu_capacity and highest_perf are all equal, so frequency decides.
    assert_eq!(t.class_source(), ClassSource::CpuFreq);
    let p: Vec<usize> = (0..4).chain(12..16).collect();
    let e: Vec<usize> = (4..12).chain(16..24).collect();
    assert_eq!(class_cpus(&t, "P"), p);
    assert_eq!(class_cpus(&t, "E"), e);
    assert_eq!(t.classes()[0].cores, 4);
    assert_eq!(t.classes()[1].cores, 8);
}

#[test]
fn amd_siblings_are_n_plus_12() {
    let (_tree, t) = load(&fixture::amd_zen5_4_zen5c_8(), "amd-smt");
    for cpu in 0..12 {
        assert_eq!(t.cpu(cpu).unwrap().siblings, vec![cpu, cpu + 12]);
        assert_eq!(t.cpu(cpu + 12).unwrap().siblings, vec![cpu, cpu + 12]);
    }
    let l3_zen5 = t.cpu(13).unwrap().l3.unwrap();
    assert_eq!(
        t.caches()[l3_zen5].cpus,
        (0..4).chain(12..16).collect::<Vec<_>>()
    );
    assert_eq!(t.caches()[l3_zen5].id, Some(0));
    let l3_zen5c = t.cpu(4).unwrap().l3.unwrap();
    assert_ne!(l3_zen5, l3_zen5c);
}

#[test]
fn amd_masks() {
    let (_tree, t) = load(&fixture::amd_zen5_4_zen5c_8(), "amd-masks");
    assert_eq!(t.resolve("P:nosmt").unwrap(), range(0, 3));
    assert_eq!(t.resolve("E:nosmt").unwrap(), range(4, 11));
    assert_eq!(t.resolve("all:nosmt").unwrap(), range(0, 11));
    assert_eq!(t.resolve("P").unwrap(), vec![0, 1, 2, 3, 12, 13, 14, 15]);
    // Only the selected threads count: 12 is the sole selected CPU of core 0.
    assert_eq!(t.resolve("12-13:nosmt").unwrap(), vec![12, 13]);
    assert_eq!(t.resolve("0,12:nosmt").unwrap(), vec![0, 12]);
    assert_eq!(t.resolve("0-1,12-13:nosmt").unwrap(), vec![0, 1, 12, 13]);
    assert_eq!(
        t.resolve("0x00F00F").unwrap(),
        vec![0, 1, 2, 3, 12, 13, 14, 15]
    );
    assert_eq!(t.describe(&[0, 4]), "CPUs 0,4 (class P: 0; class E: 4)");
}

// ---------------------------------------------------------------- ARM

#[test]
fn arm_big_little_classes_from_capacity() {
    let (_tree, t) = load(&fixture::arm_big_little(), "arm");
    assert_eq!(t.class_source(), ClassSource::CpuCapacity);
    assert_eq!(class_cpus(&t, "P"), range(4, 7));
    assert_eq!(class_cpus(&t, "E"), range(0, 3));
    assert_eq!(t.cpu(0).unwrap().die, None);
    assert_eq!(t.cpu(5).unwrap().capacity, Some(1024));
    assert_eq!(t.cpu(5).unwrap().siblings, vec![5]);
    // No cache ids: caches are still told apart by their CPU sets.
    let l2_4 = t.cpu(4).unwrap().l2.unwrap();
    let l2_5 = t.cpu(5).unwrap().l2.unwrap();
    assert_ne!(l2_4, l2_5);
    assert_eq!(t.caches()[l2_4].id, None);
    assert_eq!(t.caches()[t.cpu(0).unwrap().l3.unwrap()].cpus, range(0, 7));
}

#[test]
fn arm_big_little_masks() {
    let (_tree, t) = load(&fixture::arm_big_little(), "arm-masks");
    assert_eq!(t.resolve("P").unwrap(), range(4, 7));
    assert_eq!(t.resolve("E:nosmt").unwrap(), range(0, 3));
    assert_eq!(t.resolve("0xF0").unwrap(), range(4, 7));
    assert_eq!(t.resolve("E,7").unwrap(), vec![0, 1, 2, 3, 7]);
    assert!(err(&t, "E2").contains("classes: P, E"));
}

#[test]
fn three_tier_capacity_wins_over_frequency() {
    let (_tree, t) = load(&fixture::arm_three_tier(), "arm3");
    assert_eq!(t.class_source(), ClassSource::CpuCapacity);
    assert_eq!(class_cpus(&t, "P"), vec![7]);
    assert_eq!(class_cpus(&t, "E"), range(4, 6));
    assert_eq!(class_cpus(&t, "E2"), range(0, 3));
    assert_eq!(t.resolve("e2").unwrap(), range(0, 3));
    assert_eq!(t.resolve("P,E").unwrap(), range(4, 7));
}

// ---------------------------------------------------------------- two-socket NUMA

#[test]
fn numa_server_is_one_class_with_two_nodes() {
    let (_tree, t) = load(&fixture::two_socket_numa(), "numa");
    // highest_perf varies (39 vs 37) but within 10 %.
    assert_eq!(t.classes().len(), 1);
    assert_eq!(class_cpus(&t, "P"), range(0, 31));
    assert_eq!(t.nodes().len(), 2);
    assert!(t.nodes_from_sysfs());
    assert_eq!(t.nodes()[0].cpus, (0..8).chain(16..24).collect::<Vec<_>>());
    assert_eq!(t.nodes()[1].cpus, (8..16).chain(24..32).collect::<Vec<_>>());
    assert_eq!(t.cpu(9).unwrap().node, Some(1));
    assert_eq!(t.cpu(9).unwrap().package, Some(1));
    assert_eq!(t.cpu(8).unwrap().siblings, vec![8, 24]);
    // core_id repeats across sockets; siblings keep the cores apart.
    assert_eq!(t.cpu(8).unwrap().core_id, t.cpu(0).unwrap().core_id);
    assert_eq!(t.classes()[0].cores, 16);
}

#[test]
fn numa_server_masks() {
    let (_tree, t) = load(&fixture::two_socket_numa(), "numa-masks");
    assert_eq!(
        t.resolve("node1").unwrap(),
        (8..16).chain(24..32).collect::<Vec<_>>()
    );
    assert_eq!(t.resolve("node1:nosmt").unwrap(), range(8, 15));
    assert_eq!(t.resolve("all:nosmt").unwrap(), range(0, 15));
    assert_eq!(t.resolve("P:nosmt").unwrap(), range(0, 15));
    assert_eq!(t.resolve("node0&0-7").unwrap(), range(0, 7));
    assert_eq!(t.resolve("0xFFFFFFFF").unwrap(), range(0, 31));
    assert_eq!(t.resolve("NODE0").unwrap().len(), 16);
    assert!(err(&t, "node2").contains("no NUMA node 2"));
    assert!(err(&t, "E").contains("homogeneous"));
    assert_eq!(t.describe(&[0, 8]), "CPUs 0,8 (class P: 0,8; nodes 0,1)");
    assert_eq!(t.describe(&[0, 1]), "CPUs 0,1 (class P: 0,1; node 0)");
}

// ---------------------------------------------------------------- offline CPUs

#[test]
fn offline_cpus_are_not_listed() {
    let (_tree, t) = load(&fixture::offline_cpus(), "offline");
    assert_eq!(t.online(), vec![0, 1, 2, 4, 5]);
    assert_eq!(t.offline(), vec![3, 6, 7]);
    assert!(t.cpu(3).is_none());
    assert_eq!(class_cpus(&t, "P"), vec![0, 1, 2, 4, 5]);
    // Old kernel: thread_siblings_list only, and it names offline CPU 6.
    assert_eq!(t.cpu(2).unwrap().siblings, vec![2]);
    assert_eq!(t.cpu(0).unwrap().siblings, vec![0, 4]);
    assert_eq!(t.cpu(0).unwrap().die, None);
    assert_eq!(t.cpu(0).unwrap().cluster, None);
    // No devices/system/node: one synthetic node 0.
    assert!(!t.nodes_from_sysfs());
    assert_eq!(t.nodes().len(), 1);
    assert_eq!(t.cpu(5).unwrap().node, Some(0));
    // Shared caches list online CPUs only.
    assert_eq!(
        t.caches()[t.cpu(0).unwrap().l3.unwrap()].cpus,
        vec![0, 1, 2, 4, 5]
    );
    assert!(t.render_table().contains("offline: 3,6,7"));
}

#[test]
fn offline_cpus_masks() {
    let (_tree, t) = load(&fixture::offline_cpus(), "offline-masks");
    assert_eq!(t.resolve("all").unwrap(), vec![0, 1, 2, 4, 5]);
    assert_eq!(t.resolve("all:nosmt").unwrap(), vec![0, 1, 2]);
    assert_eq!(t.resolve("node0").unwrap(), vec![0, 1, 2, 4, 5]);
    assert_eq!(t.resolve("0x37").unwrap(), vec![0, 1, 2, 4, 5]);
    let e = err(&t, "0-3");
    assert!(
        e.contains("\"0-3\"") && e.contains("CPU 3 is not online"),
        "{e}"
    );
    let e = err(&t, "0xFF");
    assert!(e.contains("CPUs 3,6,7 are not online"), "{e}");
    assert!(err(&t, "node1").contains("no NUMA node 1"));
}

// ---------------------------------------------------------------- this VM

#[test]
fn vm_is_one_class_p() {
    let (_tree, t) = load(&fixture::vm_2vcpu(), "vm");
    assert_eq!(t.class_source(), ClassSource::Uniform);
    assert_eq!(t.classes().len(), 1);
    assert_eq!(t.classes()[0].name, "P");
    assert_eq!(t.classes()[0].cpus, vec![0, 1]);
    assert_eq!(t.cpu(1).unwrap().siblings, vec![1]);
    assert_eq!(t.cpu(1).unwrap().capacity, Some(1024));
    assert_eq!(t.describe(&[0, 1]), "CPUs 0,1 (class P: 0,1)");
    assert_eq!(
        t.caches()[t.cpu(1).unwrap().l3.unwrap()].size_bytes,
        Some(300 * 1024 * 1024)
    );
}

#[test]
fn vm_masks() {
    let (_tree, t) = load(&fixture::vm_2vcpu(), "vm-masks");
    for expr in [
        "all",
        "P",
        "P:nosmt",
        "all:nosmt",
        "0x3",
        "0-1",
        "1,0",
        "node0",
        "0,1,1",
    ] {
        assert_eq!(t.resolve(expr).unwrap(), vec![0, 1], "{expr}");
    }
    assert_eq!(t.resolve("0x2").unwrap(), vec![1]);
    assert_eq!(t.resolve("0").unwrap(), vec![0]);
    assert!(err(&t, "0x4").contains("CPU 2 is not online (online: 0,1)"));
    assert!(err(&t, "E").contains("only class is P"));
}

#[test]
fn vm_json_and_table() {
    let (_tree, t) = load(&fixture::vm_2vcpu(), "vm-json");
    let json = t.to_json();
    assert!(
        json.starts_with(r#"{"cpus":[{"cpu":0,"core":0,"package":0,"die":0,"cluster":0,"node":0,"class":"P","siblings":[0],"#),
        "{json}"
    );
    assert!(
        json.contains(r#""classes":[{"name":"P","cpus":[0,1],"cores":2}]"#),
        "{json}"
    );
    assert!(json.contains(r#""allowed":[0,1]}"#), "{json}");
    let table = t.render_table();
    let mut lines = table.lines();
    let header = lines.next().unwrap();
    for column in [
        "CPU",
        "CORE",
        "PKG",
        "NODE",
        "CLASS",
        "SMT SIBLINGS",
        "L2 GROUP",
        "L3 GROUP",
        "MAX MHZ",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row0: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(row0, vec!["0", "0", "0", "0", "P", "0", "0", "0,1", "-"]);
    assert!(table.contains("P   0,1 (2 CPUs, 2 cores)"), "{table}");
}

// ---------------------------------------------------------------- wide masks

#[test]
fn hex_masks_wider_than_128_bits() {
    let (_tree, t) = load(&fixture::wide_homogeneous(160), "wide");
    let bit130 = format!("0x4{}", "0".repeat(32));
    assert_eq!(t.resolve(&bit130).unwrap(), vec![130]);
    let all = format!("0x{}", "F".repeat(40));
    assert_eq!(t.resolve(&all).unwrap(), range(0, 159));
    let too_wide = format!("0x1{}", "0".repeat(40));
    assert!(err(&t, &too_wide).contains("CPU 160 is not online"));
    assert_eq!(t.resolve("64-66,159").unwrap(), vec![64, 65, 66, 159]);
}

// ---------------------------------------------------------------- allowed CPUs

#[test]
fn restricted_affinity_limits_all_classes_and_nodes() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel-allowed");
    let t = t.with_allowed(&[0, 1, 2, 3, 16, 17]);
    assert_eq!(t.allowed(), vec![0, 1, 2, 3, 16, 17]);
    assert_eq!(t.resolve("all").unwrap(), vec![0, 1, 2, 3, 16, 17]);
    assert_eq!(t.resolve("P").unwrap(), range(0, 3));
    assert_eq!(t.resolve("P:nosmt").unwrap(), vec![0, 2]);
    assert_eq!(t.resolve("E").unwrap(), vec![16, 17]);
    assert_eq!(t.resolve("node0").unwrap(), vec![0, 1, 2, 3, 16, 17]);
    // Classes keep their hardware membership.
    assert_eq!(class_cpus(&t, "P"), range(0, 15));
    let e = err(&t, "4-5");
    assert!(e.contains("CPUs 4,5 are online but not allowed"), "{e}");
    let e = err(&t, "0xF0");
    assert!(e.contains("not allowed"), "{e}");
    let t = t.with_allowed(&[0, 1]);
    let e = err(&t, "E");
    assert!(
        e.contains("class E (16-31) has no CPU this process may use (allowed: 0,1)"),
        "{e}"
    );
    assert!(t.render_table().contains("CPUs marked !"));
    assert!(t.to_json().contains(r#""allowed":false"#));
}

#[test]
fn nosmt_keeps_an_allowed_sibling() {
    let (_tree, t) = load(&fixture::amd_zen5_4_zen5c_8(), "amd-allowed");
    let allowed: Vec<usize> = (1..24).collect();
    let t = t.with_allowed(&allowed);
    assert_eq!(t.resolve("P:nosmt").unwrap(), vec![1, 2, 3, 12]);
}

// ---------------------------------------------------------------- bad expressions

#[test]
fn bad_expressions_name_the_bad_part() {
    let (_tree, t) = load(&fixture::intel_8p_16e(), "intel-bad");
    let cases: &[(&str, &str)] = &[
        ("", "empty expression"),
        ("  ", "empty expression"),
        ("P,foo", "at \"foo\": unknown term `foo`"),
        ("P:smt", "unknown modifier `:smt`"),
        ("node", "expected nodeN"),
        ("nodeX", "expected nodeN"),
        ("P,0xZZ", "at \"0xZZ\": `Z` is not a hex digit"),
        ("0x", "no digits"),
        ("3-1", "runs backwards"),
        ("1,,2", "empty item"),
        ("P&", "empty operand"),
        ("0x0", "selects no CPU"),
        ("99999999999", "too large"),
        ("all:", "unknown modifier"),
        ("1-2-3", "not a CPU number"),
    ];
    for (expr, expected) in cases {
        let e = err(&t, expr);
        assert!(e.contains(expected), "{expr:?}: {e}");
    }
    let error = t.resolve("P,foo").unwrap_err();
    assert_eq!(error.part, "foo");
    assert_eq!(error.expr, "P,foo");
}

// ---------------------------------------------------------------- sysfs quirks and corruption

#[test]
fn missing_trailing_newlines_are_fine() {
    let mut b = fixture::vm_2vcpu();
    b.extra_files
        .push(("devices/system/cpu/online".into(), "0-1".into()));
    b.extra_files.push((
        "devices/system/cpu/cpu0/topology/core_id".into(),
        "0".into(),
    ));
    let (_tree, t) = load(&b, "no-newline");
    assert_eq!(t.online(), vec![0, 1]);
}

fn load_err(builder: &SysfsBuilder, label: &str) -> TopologyError {
    let tree = builder.build(label).expect("write fixture");
    match Topology::from_sysfs(tree.path()) {
        Ok(_) => panic!("fixture {label} should not load"),
        Err(e) => e,
    }
}

#[test]
fn corrupt_files_are_errors_naming_the_file() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "devices/system/cpu/cpu1/topology/core_id",
            "abc\n",
            "cpu1/topology/core_id",
        ),
        ("devices/system/cpu/online", "0-x\n", "cpu/online"),
        (
            "devices/system/cpu/cpu0/cache/index2/size",
            "huge\n",
            "index2/size",
        ),
        (
            "devices/system/cpu/cpu0/cache/index3/shared_cpu_list",
            "0-\n",
            "index3/shared_cpu_list",
        ),
        (
            "devices/system/cpu/cpu0/cpu_capacity",
            "big\n",
            "cpu0/cpu_capacity",
        ),
        (
            "devices/system/node/node0/cpulist",
            "zero\n",
            "node0/cpulist",
        ),
        ("devices/cpu_core/cpus", "0-1-2\n", "cpu_core/cpus"),
    ];
    for (path, content, expected) in cases {
        let mut b = fixture::vm_2vcpu();
        b.extra_files.push((path.to_string(), content.to_string()));
        let e = load_err(&b, "corrupt");
        assert!(matches!(e, TopologyError::Parse { .. }), "{path}: {e:?}");
        let text = e.to_string();
        assert!(text.contains(expected), "{path}: {text}");
        assert!(text.contains(content.trim()), "{path}: {text}");
    }
}

#[test]
fn missing_or_empty_online_file() {
    let empty = TempTree::new("empty").unwrap();
    let e = Topology::from_sysfs(empty.path()).unwrap_err();
    assert!(matches!(e, TopologyError::Io { .. }));
    assert!(e.to_string().contains("devices/system/cpu/online"), "{e}");

    let mut b = fixture::vm_2vcpu();
    b.extra_files
        .push(("devices/system/cpu/online".into(), "\n".into()));
    let e = load_err(&b, "no-online");
    assert!(matches!(e, TopologyError::NoOnlineCpus { .. }), "{e:?}");
}

#[test]
fn unreadable_files() {
    // A required file that cannot be read (here: a directory) is an error
    // naming it; an unreadable ranking hint only means "unknown".
    let tree = fixture::vm_2vcpu().build("unreadable").unwrap();
    let core_id = tree.path().join("devices/system/cpu/cpu0/topology/core_id");
    std::fs::remove_file(&core_id).unwrap();
    std::fs::create_dir(&core_id).unwrap();
    let e = Topology::from_sysfs(tree.path()).unwrap_err();
    assert!(e.to_string().contains("cpu0/topology/core_id"), "{e}");

    let tree = fixture::arm_big_little().build("unreadable-hint").unwrap();
    let capacity = tree.path().join("devices/system/cpu/cpu0/cpu_capacity");
    std::fs::remove_file(&capacity).unwrap();
    std::fs::create_dir(&capacity).unwrap();
    let t = Topology::from_sysfs(tree.path()).unwrap();
    assert_eq!(t.cpu(0).unwrap().capacity, None);
    // Capacity no longer covers every CPU: the frequency rule decides.
    assert_eq!(t.class_source(), ClassSource::CpuFreq);
    assert_eq!(class_cpus(&t, "P"), range(4, 7));
}

#[test]
fn online_cpu_without_topology_dir() {
    let mut b = fixture::vm_2vcpu();
    b.cpus[1].online = false;
    let tree = b.build("no-topology").unwrap();
    // Claim CPU 1 is online although its directory has no topology/ or cache/.
    std::fs::write(tree.path().join("devices/system/cpu/online"), "0-1\n").unwrap();
    let t = Topology::from_sysfs(tree.path()).unwrap();
    let cpu1 = t.cpu(1).unwrap();
    assert_eq!(cpu1.core_id, None);
    assert_eq!(cpu1.siblings, vec![1]);
    assert_eq!(cpu1.l2, None);
    assert_eq!(t.resolve("all:nosmt").unwrap(), vec![0, 1]);
    assert!(t
        .to_json()
        .contains(r#"{"cpu":1,"core":null,"package":null"#));
}

// ---------------------------------------------------------------- the live machine

#[test]
fn live_system_topology() {
    let t = Topology::system().expect("read /sys");
    assert!(!t.cpus().is_empty());
    assert_eq!(t.classes()[0].name, "P");
    let allowed = uaring_affinity::allowed_cpus().unwrap();
    let all = t.resolve("all").unwrap();
    assert!(!all.is_empty());
    assert!(all.iter().all(|c| allowed.contains(c)));
    let classes: usize = t.classes().iter().map(|c| c.cpus.len()).sum();
    assert_eq!(classes, t.cpus().len());
}
