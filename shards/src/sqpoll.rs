//! Where the SQPOLL poller threads run (`runtime.sqpoll_cpu`): resolved once at start, before
//! anything listens, from the shards' CPUs and the CPU topology.

use uaring_affinity::Topology;

use crate::config::{Sqpoll, SQPOLL_CPU_ANY};

/// The CPU of each poller: one entry per shard with `per-shard`, one with `shared`, none with
/// `off`. `None` = not pinned (`any`: the kernel lets the poller run on any CPU).
///
/// `shard_cpus[i]` is the CPU shard `i` is pinned to. `expr` is `any`, `same` (the shard's own
/// CPU), `sibling` (another logical CPU of the shard CPU's physical core) or a CPU expression
/// like `runtime.cpus`, resolved by `topo`: with `per-shard`, poller `i` gets the `i`-th CPU
/// it selects (round-robin when it selects fewer CPUs than there are shards); with `shared`
/// it must select exactly one CPU. Whatever cannot be resolved is an error that says what to
/// change.
pub fn poller_cpus(
    mode: Sqpoll,
    expr: &str,
    shard_cpus: &[usize],
    topo: Option<&Topology>,
) -> Result<Vec<Option<usize>>, String> {
    let pollers = match mode {
        Sqpoll::Off => return Ok(Vec::new()),
        Sqpoll::PerShard => shard_cpus.len(),
        Sqpoll::Shared => 1.min(shard_cpus.len()),
    };
    let expr = expr.trim();
    let key = format!("runtime.sqpoll_cpu = {expr:?}");
    match expr {
        SQPOLL_CPU_ANY => Ok(vec![None; pollers]),
        "same" => Ok(shard_cpus[..pollers].iter().map(|&c| Some(c)).collect()),
        "sibling" => {
            let topo = topo.ok_or_else(|| {
                format!("{key}: the CPU topology cannot be read here, so no SMT sibling is known; give the poller CPU explicitly, or use same or any")
            })?;
            shard_cpus[..pollers]
                .iter()
                .enumerate()
                .map(|(i, &cpu)| {
                    let info = topo.cpu(cpu).ok_or_else(|| {
                        format!("{key}: shard {i}'s CPU {cpu} is not in the topology")
                    })?;
                    info.siblings
                        .iter()
                        .copied()
                        .find(|&s| s != cpu && topo.cpu(s).is_some_and(|c| c.allowed))
                        .map(Some)
                        .ok_or_else(|| {
                            format!(
                                "{key}: shard {i} runs on CPU {cpu}, whose core has no other logical CPU this process may use \
                                 (its core: {:?}; no SMT on this machine, or the sibling is outside the affinity mask); \
                                 use same, any or an explicit CPU, or set runtime.sqpoll = \"off\"",
                                info.siblings
                            )
                        })
                })
                .collect()
        }
        _ => {
            let cpus = match topo {
                Some(t) => t.resolve(expr).map_err(|e| format!("{key}: {e}"))?,
                None => uaring_affinity::cpulist::parse_list(expr)
                    .map_err(|e| format!("{key}: {e} (the CPU topology cannot be read here: only a plain CPU list works)"))?,
            };
            if cpus.is_empty() {
                return Err(format!(
                    "{key} selects no CPU this process may use; see `uaring topology`"
                ));
            }
            if let Some(t) = topo {
                if let Some(&bad) = cpus.iter().find(|&&c| !t.cpu(c).is_some_and(|i| i.allowed)) {
                    return Err(format!(
                        "{key}: CPU {bad} is offline or outside this process's affinity mask; see `uaring topology`"
                    ));
                }
            }
            if mode == Sqpoll::Shared && cpus.len() != 1 {
                return Err(format!(
                    "{key} selects {} CPUs, but runtime.sqpoll = \"shared\" has one poller: give one CPU",
                    cpus.len()
                ));
            }
            Ok((0..pollers).map(|i| Some(cpus[i % cpus.len()])).collect())
        }
    }
}

/// One line for the start log: the mode and where each poller runs.
pub fn describe(mode: Sqpoll, cpus: &[Option<usize>], idle_ms: u32) -> String {
    let place = |c: &Option<usize>| c.map_or("any CPU".to_string(), |c| format!("CPU {c}"));
    match mode {
        Sqpoll::Off => "off".to_string(),
        Sqpoll::Shared => format!(
            "shared: one poller for all shards on {}, idle {idle_ms} ms",
            cpus.first().map_or("any CPU".to_string(), place)
        ),
        Sqpoll::PerShard => format!(
            "per-shard: {} pollers on {}, idle {idle_ms} ms",
            cpus.len(),
            cpus.iter().map(place).collect::<Vec<_>>().join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uaring_affinity::fixture;

    fn topo(b: fixture::SysfsBuilder, label: &str) -> (fixture::TempTree, Topology) {
        let tree = b.build(label).unwrap();
        let t = Topology::from_sysfs(tree.path()).unwrap();
        (tree, t)
    }

    #[test]
    fn same_any_and_lists() {
        let (_d, t) = topo(fixture::vm_2vcpu(), "sqpoll-vm");
        let t = Some(&t);
        assert_eq!(poller_cpus(Sqpoll::Off, "same", &[0, 1], t), Ok(vec![]));
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "same", &[0, 1], t),
            Ok(vec![Some(0), Some(1)])
        );
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "any", &[0, 1], t),
            Ok(vec![None, None])
        );
        // Poller i on the i-th CPU of the list; round-robin when the list is shorter.
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "1,0", &[0, 1], t),
            Ok(vec![Some(0), Some(1)]),
            "a list is ascending, as for cpus"
        );
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "1", &[0, 0, 0], t),
            Ok(vec![Some(1), Some(1), Some(1)])
        );
        assert_eq!(
            poller_cpus(Sqpoll::Shared, "same", &[1, 0], t),
            Ok(vec![Some(1)])
        );
        assert_eq!(
            poller_cpus(Sqpoll::Shared, "0", &[1, 0], t),
            Ok(vec![Some(0)])
        );
        let e = poller_cpus(Sqpoll::Shared, "0-1", &[0, 1], t).unwrap_err();
        assert!(e.contains("one poller"), "{e}");
        let e = poller_cpus(Sqpoll::PerShard, "7", &[0], t).unwrap_err();
        assert!(e.contains("sqpoll_cpu = \"7\""), "{e}");
        let e = poller_cpus(Sqpoll::PerShard, "bogus", &[0], t).unwrap_err();
        assert!(e.contains("sqpoll_cpu"), "{e}");
    }

    #[test]
    fn sibling_needs_smt() {
        let (_d, t) = topo(fixture::intel_8p_16e(), "sqpoll-intel");
        // P-cores are SMT pairs (0,1), (2,3), …
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "sibling", &[0, 3], Some(&t)),
            Ok(vec![Some(1), Some(2)])
        );
        // E-cores (16..) have no sibling.
        let e = poller_cpus(Sqpoll::PerShard, "sibling", &[0, 16], Some(&t)).unwrap_err();
        assert!(
            e.contains("shard 1 runs on CPU 16") && e.contains("runtime.sqpoll = \"off\""),
            "{e}"
        );
        let (_d2, vm) = topo(fixture::vm_2vcpu(), "sqpoll-vm2");
        assert!(poller_cpus(Sqpoll::Shared, "sibling", &[0, 1], Some(&vm)).is_err());
        assert!(poller_cpus(Sqpoll::PerShard, "sibling", &[0], None).is_err());
        // Without a topology a plain list still works.
        assert_eq!(
            poller_cpus(Sqpoll::PerShard, "1", &[0], None),
            Ok(vec![Some(1)])
        );
    }

    #[test]
    fn described() {
        assert_eq!(
            describe(Sqpoll::PerShard, &[Some(0), None], 10),
            "per-shard: 2 pollers on CPU 0, any CPU, idle 10 ms"
        );
        assert_eq!(
            describe(Sqpoll::Shared, &[Some(1)], 5),
            "shared: one poller for all shards on CPU 1, idle 5 ms"
        );
    }
}
