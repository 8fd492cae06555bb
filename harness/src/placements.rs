//! `uaring-bench placements`: server/client placement variants derived from
//! the machine's topology (uaring-affinity), written as a variant file for
//! `sweep`, each with the reason it was chosen.
//!
//! The variants (each only when the machine has what it needs, duplicates
//! dropped):
//! - `all`: the server on every allowed CPU, the client sharing them;
//! - `<class>-only` (hybrid parts: P, E, E2 …): the server on one core class,
//!   the client on the remaining CPUs;
//! - `P-nosmt` (SMT machines): the server on one hardware thread per P-core,
//!   the client on CPUs that share no core with it (else the remaining CPUs);
//! - `smt-siblings` / `separate-cores` / `separate-cores-mirrored`: one server
//!   CPU and one client CPU, on the two threads of one core, on two cores of
//!   the fastest class, and the same two cores swapped;
//! - `node<N>` (NUMA): the server on the first node, the client on the others.
//!
//! On a 2-vCPU VM this yields `all` (0,1/0,1), `separate-cores` (0/1) and
//! `separate-cores-mirrored` (1/0).

use std::path::Path;

use uaring_affinity::cpulist::format_compact;
use uaring_affinity::Topology;

#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub name: String,
    pub server: Vec<usize>,
    pub client: Vec<usize>,
    pub why: String,
}

fn minus(a: &[usize], b: &[usize]) -> Vec<usize> {
    a.iter().copied().filter(|x| !b.contains(x)).collect()
}

fn allowed_of(cpus: &[usize], allowed: &[usize]) -> Vec<usize> {
    cpus.iter()
        .copied()
        .filter(|c| allowed.contains(c))
        .collect()
}

/// Derives the placement variants of `t` (allowed CPUs only).
pub fn derive(t: &Topology) -> Vec<Placement> {
    let all = t.allowed();
    let mut out: Vec<Placement> = Vec::new();
    let mut push = |name: String, server: Vec<usize>, client: Vec<usize>, why: String| {
        if server.is_empty()
            || client.is_empty()
            || out.iter().any(|p| p.server == server && p.client == client)
        {
            return;
        }
        out.push(Placement {
            name,
            server,
            client,
            why,
        });
    };
    let siblings_of = |cpus: &[usize]| -> Vec<usize> {
        let mut s: Vec<usize> = cpus
            .iter()
            .filter_map(|&c| t.cpu(c))
            .flat_map(|i| i.siblings.iter().copied())
            .collect();
        s.extend_from_slice(cpus);
        s.sort_unstable();
        s.dedup();
        s
    };
    push(
        "all".into(),
        all.clone(),
        all.clone(),
        format!(
            "server on every allowed CPU ({}); the client shares them",
            format_compact(&all)
        ),
    );
    let classes: Vec<(String, Vec<usize>)> = t
        .classes()
        .iter()
        .map(|c| (c.name.clone(), allowed_of(&c.cpus, &all)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if classes.len() > 1 {
        for (name, cpus) in &classes {
            let rest = minus(&all, cpus);
            push(
                format!("{name}-only"),
                cpus.clone(),
                rest.clone(),
                format!(
                    "server on the {name} cores ({}), client on the other CPUs ({})",
                    format_compact(cpus),
                    format_compact(&rest)
                ),
            );
        }
    }
    if let Some((fast, fast_cpus)) = classes.first() {
        let nosmt = t.one_per_core(fast_cpus);
        if nosmt.len() < fast_cpus.len() {
            let apart = minus(&all, &siblings_of(&nosmt));
            let (client, where_) = if apart.is_empty() {
                (
                    minus(&all, &nosmt),
                    "the remaining CPUs (their SMT siblings)",
                )
            } else {
                (apart, "CPUs on other cores")
            };
            push(
                format!("{fast}-nosmt"),
                nosmt.clone(),
                client.clone(),
                format!(
                    "server on one hardware thread per {fast} core ({}), client on {where_} ({})",
                    format_compact(&nosmt),
                    format_compact(&client)
                ),
            );
        }
        let s = fast_cpus[0];
        if let Some(&sib) = t
            .cpu(s)
            .and_then(|i| i.siblings.iter().find(|&&x| x != s && all.contains(&x)))
        {
            push("smt-siblings".into(), vec![s], vec![sib], format!("server CPU {s} and client CPU {sib}: the two hardware threads of one {fast} core"));
        }
        let taken = siblings_of(&[s]);
        if let Some(&other) = fast_cpus
            .iter()
            .find(|c| !taken.contains(c))
            .or_else(|| all.iter().find(|c| !taken.contains(c)))
        {
            push(
                "separate-cores".into(),
                vec![s],
                vec![other],
                format!("server CPU {s} and client CPU {other}: two separate cores"),
            );
            push(
                "separate-cores-mirrored".into(),
                vec![other],
                vec![s],
                format!("the same two cores swapped: server CPU {other}, client CPU {s}"),
            );
        }
    }
    let nodes: Vec<(usize, Vec<usize>)> = t
        .nodes()
        .iter()
        .map(|n| (n.id, allowed_of(&n.cpus, &all)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if nodes.len() > 1 {
        let (id, cpus) = &nodes[0];
        let rest = minus(&all, cpus);
        push(
            format!("node{id}"),
            cpus.clone(),
            rest.clone(),
            format!(
                "server on NUMA node {id} ({}), client on the other nodes ({})",
                format_compact(cpus),
                format_compact(&rest)
            ),
        );
    }
    out
}

/// The variant file: a header describing the machine, then `# why` and
/// `name||--server-cpus … --client-cpus …` per placement.
pub fn variant_file(t: &Topology, root: &Path, placements: &[Placement]) -> String {
    let mut s = format!(
        "# Placements derived by `uaring-bench placements` from {}: {} allowed CPUs",
        root.display(),
        t.allowed().len()
    );
    for c in t.classes() {
        s.push_str(&format!(", {} {}", c.name, format_compact(&c.cpus)));
    }
    s.push_str(&format!(
        ", {} NUMA node(s)\n# name|env|args\n",
        t.nodes().len().max(1)
    ));
    for p in placements {
        s.push_str(&format!(
            "# {}\n{}||--server-cpus {} --client-cpus {}\n",
            p.why,
            p.name,
            format_compact(&p.server),
            format_compact(&p.client)
        ));
    }
    s
}

pub fn placements_main(o: &crate::cli::PlacementsOpts) -> Result<i32, String> {
    let root = o.sysfs_root.clone().unwrap_or_else(|| "/sys".into());
    let t = match &o.sysfs_root {
        Some(r) => Topology::from_sysfs(Path::new(r)),
        None => Topology::system(),
    }
    .map_err(|e| format!("topology of {root}: {e}"))?;
    let p = derive(&t);
    let text = variant_file(&t, Path::new(&root), &p);
    match &o.out {
        Some(f) => {
            std::fs::write(f, &text).map_err(|e| format!("{f}: {e}"))?;
            eprint!("{text}");
            eprintln!("wrote {f}: {} placements", p.len());
        }
        None => print!("{text}"),
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use uaring_affinity::fixture;

    fn placements(b: fixture::SysfsBuilder, label: &str) -> Vec<(String, String, String)> {
        let tree = b.build(label).unwrap();
        let t = Topology::from_sysfs(tree.path()).unwrap();
        derive(&t)
            .into_iter()
            .map(|p| (p.name, format_compact(&p.server), format_compact(&p.client)))
            .collect()
    }

    fn s(name: &str, srv: &str, cli: &str) -> (String, String, String) {
        (name.into(), srv.into(), cli.into())
    }

    #[test]
    fn two_vcpu_vm_yields_the_two_cpu_subset() {
        assert_eq!(
            placements(fixture::vm_2vcpu(), "vm"),
            vec![
                s("all", "0,1", "0,1"),
                s("separate-cores", "0", "1"),
                s("separate-cores-mirrored", "1", "0")
            ]
        );
    }

    #[test]
    fn hybrid_intel() {
        let p = placements(fixture::intel_8p_16e(), "intel");
        for want in [
            s("all", "0-31", "0-31"),
            s("P-only", "0-15", "16-31"),
            s("E-only", "16-31", "0-15"),
            s("P-nosmt", "0,2,4,6,8,10,12,14", "16-31"),
            s("smt-siblings", "0", "1"),
            s("separate-cores", "0", "2"),
            s("separate-cores-mirrored", "2", "0"),
        ] {
            assert!(p.contains(&want), "{want:?} missing from {p:?}");
        }
        assert!(
            !p.iter().any(|x| x.0.starts_with("node")),
            "one node: {p:?}"
        );
    }

    #[test]
    fn zen5_and_zen5c() {
        let p = placements(fixture::amd_zen5_4_zen5c_8(), "zen");
        // Zen 5 cores 0-3 with SMT siblings 12-15; Zen 5c cores 4-11 with 16-23.
        for want in [
            s("P-only", "0-3,12-15", "4-11,16-23"),
            s("E-only", "4-11,16-23", "0-3,12-15"),
            s("P-nosmt", "0-3", "4-11,16-23"),
            s("smt-siblings", "0", "12"),
        ] {
            assert!(p.contains(&want), "{want:?} missing from {p:?}");
        }
    }

    #[test]
    fn big_little_has_no_smt_variants() {
        let p = placements(fixture::arm_big_little(), "arm");
        // The big cores (4-7) are the fastest class.
        for want in [
            s("P-only", "4-7", "0-3"),
            s("E-only", "0-3", "4-7"),
            s("separate-cores", "4", "5"),
        ] {
            assert!(p.contains(&want), "{want:?} missing from {p:?}");
        }
        assert!(
            !p.iter()
                .any(|x| x.0 == "smt-siblings" || x.0.ends_with("nosmt")),
            "{p:?}"
        );
    }

    #[test]
    fn numa_nodes() {
        let p = placements(fixture::two_socket_numa(), "numa");
        assert!(p.iter().any(|x| x.0 == "node0"), "{p:?}");
        let node0 = p.iter().find(|x| x.0 == "node0").unwrap();
        assert_eq!(
            (node0.1.as_str(), node0.2.as_str()),
            ("0-7,16-23", "8-15,24-31")
        );
    }
}
