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

/// A placement of one shard, its SQPOLL poller and the load client, for the io-modes table.
#[derive(Clone, Debug, PartialEq)]
pub struct PollerPlacement {
    pub name: String,
    pub shard: usize,
    pub client: usize,
    /// The poller's CPU; `None`: no poller (the baseline of the others).
    pub poller: Option<usize>,
    pub why: String,
}

/// Derives where a shard's SQPOLL poller can run, by core class, from `t` (allowed CPUs
/// only). One shard on the first CPU of the fastest class (P); the client on a CPU of another
/// core (the fastest class and the shard's NUMA node first), the same in every line; then,
/// each only when the machine has it:
/// - `poller-none`: no poller, the baseline;
/// - `poller-same`: on the shard's own CPU (shard and poller take turns on one thread);
/// - `poller-sibling`: on the SMT sibling of the shard's CPU (the same core's other thread);
/// - `poller-<class>` for each slower class (`poller-E`, …): on a core of that class;
/// - `poller-dedicated`: on a core of the shard's class of its own (used by nobody else);
/// - `poller-remote-node` (NUMA): on a CPU of another node;
/// - `poller-client-cpu`: on the client's CPU, only where no core is left for a poller (the
///   unfavourable placement a 2-CPU machine has instead).
pub fn derive_pollers(t: &Topology) -> Vec<PollerPlacement> {
    let all = t.allowed();
    let classes: Vec<(String, Vec<usize>)> = t
        .classes()
        .iter()
        .map(|c| (c.name.clone(), allowed_of(&c.cpus, &all)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let Some((fast, fast_cpus)) = classes.first() else {
        return Vec::new();
    };
    let core_of = |c: usize| -> Vec<usize> {
        let mut v = t.cpu(c).map(|i| i.siblings.clone()).unwrap_or_default();
        v.push(c);
        v
    };
    let node_of = |c: usize| t.cpu(c).and_then(|i| i.node);
    let shard = fast_cpus[0];
    let shard_core = core_of(shard);
    // Candidates in order of preference: the shard's node first, then the others.
    let prefer_near = |cands: Vec<usize>| -> Vec<usize> {
        let (mut near, far): (Vec<usize>, Vec<usize>) = cands
            .into_iter()
            .partition(|&c| node_of(c) == node_of(shard));
        near.extend(far);
        near
    };
    let off_core = |cpus: &[usize], taken: &[usize]| -> Vec<usize> {
        cpus.iter()
            .copied()
            .filter(|&c| !taken.iter().any(|&x| core_of(x).contains(&c)))
            .collect()
    };
    let client = prefer_near(off_core(fast_cpus, &[shard]))
        .first()
        .copied()
        .or_else(|| prefer_near(off_core(&all, &[shard])).first().copied())
        .or_else(|| all.iter().copied().find(|&c| c != shard));
    let Some(client) = client else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |name: String, poller: Option<usize>, why: String| {
        if !out.iter().any(|p: &PollerPlacement| p.poller == poller) {
            out.push(PollerPlacement {
                name,
                shard,
                client,
                poller,
                why,
            });
        }
    };
    let setting = format!(
        "shard on {fast} CPU {shard}, client on CPU {client}{}",
        if shard_core.contains(&client) {
            " (the shard core's sibling: no other core is allowed)"
        } else {
            " (another core)"
        }
    );
    push(
        "poller-none".into(),
        None,
        format!("{setting}; no poller: the baseline of the poller lines"),
    );
    push(
        "poller-same".into(),
        Some(shard),
        format!("{setting}; the poller on the shard's own CPU {shard}: they take turns on one hardware thread"),
    );
    if let Some(&sib) = shard_core
        .iter()
        .find(|&&c| c != shard && c != client && all.contains(&c))
    {
        push(
            "poller-sibling".into(),
            Some(sib),
            format!("{setting}; the poller on CPU {sib}, the SMT sibling of the shard's CPU: the same {fast} core's other hardware thread"),
        );
    }
    let taken = [shard, client];
    let mut spare = false;
    for (name, cpus) in classes.iter().skip(1) {
        if let Some(&c) = prefer_near(off_core(cpus, &taken)).first() {
            spare = true;
            push(
                format!("poller-{name}"),
                Some(c),
                format!("{setting}; the poller on {name} CPU {c}: a core of the slower class"),
            );
        }
    }
    if let Some(&c) = prefer_near(off_core(fast_cpus, &taken)).first() {
        spare = true;
        push(
            "poller-dedicated".into(),
            Some(c),
            format!("{setting}; the poller on {fast} CPU {c}: a core of the shard's class that nobody else uses"),
        );
    }
    if t.nodes().len() > 1 {
        let far: Vec<usize> = off_core(&all, &taken)
            .into_iter()
            .filter(|&c| node_of(c) != node_of(shard))
            .collect();
        if let Some(&c) = far.first() {
            spare = true;
            push(
                "poller-remote-node".into(),
                Some(c),
                format!(
                    "{setting}; the poller on CPU {c} of NUMA node {}: the shard's queues cross nodes",
                    node_of(c).map_or("?".to_string(), |n| n.to_string())
                ),
            );
        }
    }
    if !spare {
        push(
            "poller-client-cpu".into(),
            Some(client),
            format!("{setting}; the poller on the client's CPU {client}: no core is left for a poller of its own (unfavourable: poller and client take turns on one CPU)"),
        );
    }
    out
}

/// The poller variant file: one line per placement, `# why` above it, each running
/// `uaring serve {server_args}` with a SQPOLL poller on the placement's CPU (none for
/// `poller-none`), for the io-modes scenarios.
pub fn poller_variant_file(
    t: &Topology,
    root: &Path,
    placements: &[PollerPlacement],
    server_args: &str,
) -> String {
    let mut s = format!(
        "# SQPOLL poller placements derived by `uaring-bench placements --pollers` from {}: {} allowed CPUs",
        root.display(),
        t.allowed().len()
    );
    for c in t.classes() {
        s.push_str(&format!(", {} {}", c.name, format_compact(&c.cpus)));
    }
    s.push_str(&format!(
        ", {} NUMA node(s). Every thread of the server is counted, the poller included.\n# name|env|args\n",
        t.nodes().len().max(1)
    ));
    for p in placements {
        let poller = match p.poller {
            Some(c) => format!(" --sqpoll per-shard --sqpoll-cpu {c}"),
            None => String::new(),
        };
        s.push_str(&format!(
            "# {}\n{}||--server-cpus {} --client-cpus {} --server-name uaring --server-args '{server_args}{poller}'\n",
            p.why, p.name, p.shard, p.client
        ));
    }
    s
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
    let (text, n) = if o.pollers {
        if o.server_args.contains('\'') {
            return Err("--server-args: no single quotes (the variant line quotes it)".into());
        }
        let p = derive_pollers(&t);
        (
            poller_variant_file(&t, Path::new(&root), &p, &o.server_args),
            p.len(),
        )
    } else {
        let p = derive(&t);
        (variant_file(&t, Path::new(&root), &p), p.len())
    };
    match &o.out {
        Some(f) => {
            std::fs::write(f, &text).map_err(|e| format!("{f}: {e}"))?;
            eprint!("{text}");
            eprintln!("wrote {f}: {n} placements");
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

    fn pollers(
        b: fixture::SysfsBuilder,
        label: &str,
    ) -> Vec<(String, usize, usize, Option<usize>)> {
        let tree = b.build(label).unwrap();
        let t = Topology::from_sysfs(tree.path()).unwrap();
        derive_pollers(&t)
            .into_iter()
            .map(|p| (p.name, p.shard, p.client, p.poller))
            .collect()
    }

    fn pl(
        name: &str,
        shard: usize,
        client: usize,
        poller: Option<usize>,
    ) -> (String, usize, usize, Option<usize>) {
        (name.into(), shard, client, poller)
    }

    #[test]
    fn pollers_on_a_two_vcpu_vm_share_a_cpu_either_way() {
        // No SMT, one class, two CPUs: the poller can only share the shard's CPU or the
        // client's; both are proposed, beside the baseline.
        assert_eq!(
            pollers(fixture::vm_2vcpu(), "pvm"),
            vec![
                pl("poller-none", 0, 1, None),
                pl("poller-same", 0, 1, Some(0)),
                pl("poller-client-cpu", 0, 1, Some(1)),
            ]
        );
    }

    #[test]
    fn pollers_on_a_hybrid_intel() {
        // P-cores are SMT pairs (0,1), (2,3) …; E-cores 16-31 have no sibling.
        assert_eq!(
            pollers(fixture::intel_8p_16e(), "pintel"),
            vec![
                pl("poller-none", 0, 2, None),
                pl("poller-same", 0, 2, Some(0)),
                pl("poller-sibling", 0, 2, Some(1)),
                pl("poller-E", 0, 2, Some(16)),
                pl("poller-dedicated", 0, 2, Some(4)),
            ]
        );
    }

    #[test]
    fn pollers_on_zen5_and_zen5c() {
        // Zen 5 cores 0-3 (siblings 12-15), Zen 5c cores 4-11 (siblings 16-23).
        assert_eq!(
            pollers(fixture::amd_zen5_4_zen5c_8(), "pzen"),
            vec![
                pl("poller-none", 0, 1, None),
                pl("poller-same", 0, 1, Some(0)),
                pl("poller-sibling", 0, 1, Some(12)),
                pl("poller-E", 0, 1, Some(4)),
                pl("poller-dedicated", 0, 1, Some(2)),
            ]
        );
    }

    #[test]
    fn pollers_on_big_little_have_no_sibling() {
        // The big cores 4-7 are the fastest class; the LITTLE ones 0-3 the slower.
        let p = pollers(fixture::arm_big_little(), "parm");
        assert_eq!(
            p,
            vec![
                pl("poller-none", 4, 5, None),
                pl("poller-same", 4, 5, Some(4)),
                pl("poller-E", 4, 5, Some(0)),
                pl("poller-dedicated", 4, 5, Some(6)),
            ]
        );
    }

    #[test]
    fn pollers_on_numa_stay_near_and_one_crosses() {
        // Node 0 = 0-7,16-23, node 1 = 8-15,24-31; the sibling of N is N+16. One class.
        assert_eq!(
            pollers(fixture::two_socket_numa(), "pnuma"),
            vec![
                pl("poller-none", 0, 1, None),
                pl("poller-same", 0, 1, Some(0)),
                pl("poller-sibling", 0, 1, Some(16)),
                pl("poller-dedicated", 0, 1, Some(2)),
                pl("poller-remote-node", 0, 1, Some(8)),
            ]
        );
    }

    #[test]
    fn poller_variant_lines() {
        let tree = fixture::intel_8p_16e().build("pfile").unwrap();
        let t = Topology::from_sysfs(tree.path()).unwrap();
        let text = poller_variant_file(
            &t,
            tree.path(),
            &derive_pollers(&t),
            "--io-backend uring --shards 1",
        );
        assert!(text.contains(
            "\npoller-none||--server-cpus 0 --client-cpus 2 --server-name uaring --server-args '--io-backend uring --shards 1'\n"
        ), "{text}");
        assert!(text.contains(
            "\npoller-E||--server-cpus 0 --client-cpus 2 --server-name uaring --server-args '--io-backend uring --shards 1 --sqpoll per-shard --sqpoll-cpu 16'\n"
        ), "{text}");
        assert!(text.contains("# shard on P CPU 0, client on CPU 2 (another core); the poller on CPU 1, the SMT sibling"), "{text}");
        // Every line parses as a sweep variant.
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 5);
        assert!(lines.iter().all(|l| l.split('|').count() == 3));
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
