//! Test support: builds sysfs-shaped directory trees in a temporary
//! directory, so topology code can be tested against machines we do not
//! have. Public so that other crates' tests can use the same machines.
//!
//! ```
//! use uaring_affinity::{fixture, Topology};
//! let tree = fixture::vm_2vcpu().build("doc").unwrap();
//! let topology = Topology::from_sysfs(tree.path()).unwrap();
//! assert_eq!(topology.resolve("all").unwrap(), vec![0, 1]);
//! ```

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A directory under `std::env::temp_dir()` removed on drop.
#[derive(Debug)]
pub struct TempTree {
    path: PathBuf,
}

impl TempTree {
    /// Creates a new, empty, uniquely named directory.
    pub fn new(label: &str) -> io::Result<TempTree> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "uaring-affinity-{label}-{}-{unique}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path)?;
        Ok(TempTree { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// One `cache/indexN` directory.
#[derive(Clone, Debug)]
pub struct FixtureCache {
    pub level: u32,
    pub kind: String,
    /// `None`: no `id` file (some VMs, device-tree systems).
    pub id: Option<u64>,
    pub size: String,
    pub shared: Vec<usize>,
}

impl FixtureCache {
    pub fn new(
        level: u32,
        kind: &str,
        id: Option<u64>,
        size: &str,
        shared: &[usize],
    ) -> FixtureCache {
        FixtureCache {
            level,
            kind: kind.to_string(),
            id,
            size: size.to_string(),
            shared: shared.to_vec(),
        }
    }
}

/// One `cpuN` directory.
#[derive(Clone, Debug)]
pub struct FixtureCpu {
    pub cpu: usize,
    /// Offline CPUs get a `cpuN` directory with `online` = 0 and nothing else
    /// (no `topology/`), as Linux does.
    pub online: bool,
    pub core_id: i64,
    pub package: i64,
    /// `None`: no `die_id` file (kernels before 5.2).
    pub die: Option<i64>,
    /// `None`: no `cluster_id` file (kernels before 5.16).
    pub cluster: Option<i64>,
    /// SMT siblings including this CPU.
    pub siblings: Vec<usize>,
    /// Also write `core_cpus_list` (kernels since 5.4); `thread_siblings_list`
    /// is always written.
    pub core_cpus_list: bool,
    pub caches: Vec<FixtureCache>,
    pub capacity: Option<u64>,
    pub highest_perf: Option<u64>,
    pub max_freq_khz: Option<u64>,
}

impl FixtureCpu {
    /// An online CPU with modern-kernel defaults, no caches and no hints.
    pub fn new(cpu: usize, core_id: i64, package: i64, siblings: &[usize]) -> FixtureCpu {
        FixtureCpu {
            cpu,
            online: true,
            core_id,
            package,
            die: Some(0),
            cluster: Some(core_id),
            siblings: siblings.to_vec(),
            core_cpus_list: true,
            caches: Vec::new(),
            capacity: None,
            highest_perf: None,
            max_freq_khz: None,
        }
    }
}

/// A whole sysfs tree description.
#[derive(Clone, Debug, Default)]
pub struct SysfsBuilder {
    pub cpus: Vec<FixtureCpu>,
    /// `(node id, cpulist)`; empty: no `devices/system/node` directory.
    pub nodes: Vec<(usize, Vec<usize>)>,
    /// `devices/cpu_core/cpus` (Intel hybrid P-cores).
    pub cpu_core_pmu: Option<Vec<usize>>,
    /// `devices/cpu_atom/cpus` (Intel hybrid E-cores).
    pub cpu_atom_pmu: Option<Vec<usize>>,
    /// `possible`; `None`: every CPU in `cpus`.
    pub possible: Option<Vec<usize>>,
    /// Extra files, `(path relative to the root, content)`, written last (to
    /// inject quirks or corruption).
    pub extra_files: Vec<(String, String)>,
}

/// Kernel-style list: every run of two or more becomes a range.
fn kernel_list(cpus: &[usize]) -> String {
    let mut sorted = cpus.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", sorted[i], sorted[j])
        } else {
            sorted[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

fn write(root: &Path, relative: &str, content: &str) -> io::Result<()> {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent)?;
    }
    fs::write(path, content)
}

impl SysfsBuilder {
    pub fn new() -> SysfsBuilder {
        SysfsBuilder::default()
    }

    /// Writes the tree below `root` (which plays the role of `/sys`).
    pub fn write_to(&self, root: &Path) -> io::Result<()> {
        let cpu_dir = "devices/system/cpu";
        let all: Vec<usize> = self.cpus.iter().map(|c| c.cpu).collect();
        let online: Vec<usize> = self
            .cpus
            .iter()
            .filter(|c| c.online)
            .map(|c| c.cpu)
            .collect();
        let possible = self.possible.clone().unwrap_or_else(|| all.clone());
        let offline: Vec<usize> = possible
            .iter()
            .copied()
            .filter(|c| !online.contains(c))
            .collect();
        write(
            root,
            &format!("{cpu_dir}/online"),
            &format!("{}\n", kernel_list(&online)),
        )?;
        write(
            root,
            &format!("{cpu_dir}/possible"),
            &format!("{}\n", kernel_list(&possible)),
        )?;
        write(
            root,
            &format!("{cpu_dir}/present"),
            &format!("{}\n", kernel_list(&all)),
        )?;
        write(
            root,
            &format!("{cpu_dir}/offline"),
            &format!("{}\n", kernel_list(&offline)),
        )?;
        write(root, &format!("{cpu_dir}/kernel_max"), "8191\n")?;
        for cpu in &self.cpus {
            let base = format!("{cpu_dir}/cpu{}", cpu.cpu);
            write(
                root,
                &format!("{base}/online"),
                if cpu.online { "1\n" } else { "0\n" },
            )?;
            if !cpu.online {
                continue;
            }
            let topo = format!("{base}/topology");
            write(
                root,
                &format!("{topo}/core_id"),
                &format!("{}\n", cpu.core_id),
            )?;
            write(
                root,
                &format!("{topo}/physical_package_id"),
                &format!("{}\n", cpu.package),
            )?;
            if let Some(die) = cpu.die {
                write(root, &format!("{topo}/die_id"), &format!("{die}\n"))?;
            }
            if let Some(cluster) = cpu.cluster {
                write(root, &format!("{topo}/cluster_id"), &format!("{cluster}\n"))?;
            }
            let siblings = format!("{}\n", kernel_list(&cpu.siblings));
            write(root, &format!("{topo}/thread_siblings_list"), &siblings)?;
            if cpu.core_cpus_list {
                write(root, &format!("{topo}/core_cpus_list"), &siblings)?;
            }
            let package_cpus: Vec<usize> = self
                .cpus
                .iter()
                .filter(|c| c.online && c.package == cpu.package)
                .map(|c| c.cpu)
                .collect();
            write(
                root,
                &format!("{topo}/core_siblings_list"),
                &format!("{}\n", kernel_list(&package_cpus)),
            )?;
            for (index, cache) in cpu.caches.iter().enumerate() {
                let dir = format!("{base}/cache/index{index}");
                write(root, &format!("{dir}/level"), &format!("{}\n", cache.level))?;
                write(root, &format!("{dir}/type"), &format!("{}\n", cache.kind))?;
                if let Some(id) = cache.id {
                    write(root, &format!("{dir}/id"), &format!("{id}\n"))?;
                }
                write(root, &format!("{dir}/size"), &format!("{}\n", cache.size))?;
                write(
                    root,
                    &format!("{dir}/shared_cpu_list"),
                    &format!("{}\n", kernel_list(&cache.shared)),
                )?;
            }
            if let Some(capacity) = cpu.capacity {
                write(
                    root,
                    &format!("{base}/cpu_capacity"),
                    &format!("{capacity}\n"),
                )?;
            }
            if let Some(perf) = cpu.highest_perf {
                write(
                    root,
                    &format!("{base}/acpi_cppc/highest_perf"),
                    &format!("{perf}\n"),
                )?;
            }
            if let Some(khz) = cpu.max_freq_khz {
                write(
                    root,
                    &format!("{base}/cpufreq/cpuinfo_max_freq"),
                    &format!("{khz}\n"),
                )?;
            }
        }
        if !self.nodes.is_empty() {
            let ids: Vec<usize> = self.nodes.iter().map(|(id, _)| *id).collect();
            write(
                root,
                "devices/system/node/online",
                &format!("{}\n", kernel_list(&ids)),
            )?;
            write(
                root,
                "devices/system/node/possible",
                &format!("{}\n", kernel_list(&ids)),
            )?;
            for (id, cpus) in &self.nodes {
                write(
                    root,
                    &format!("devices/system/node/node{id}/cpulist"),
                    &format!("{}\n", kernel_list(cpus)),
                )?;
            }
        }
        if let Some(cpus) = &self.cpu_core_pmu {
            write(
                root,
                "devices/cpu_core/cpus",
                &format!("{}\n", kernel_list(cpus)),
            )?;
        }
        if let Some(cpus) = &self.cpu_atom_pmu {
            write(
                root,
                "devices/cpu_atom/cpus",
                &format!("{}\n", kernel_list(cpus)),
            )?;
        }
        for (relative, content) in &self.extra_files {
            write(root, relative, content)?;
        }
        Ok(())
    }

    /// Writes the tree into a fresh [`TempTree`].
    pub fn build(&self, label: &str) -> io::Result<TempTree> {
        let tree = TempTree::new(label)?;
        self.write_to(tree.path())?;
        Ok(tree)
    }
}

fn l1(cpu_id: u64, shared: &[usize], data: &str, instruction: &str) -> Vec<FixtureCache> {
    vec![
        FixtureCache::new(1, "Data", Some(cpu_id), data, shared),
        FixtureCache::new(1, "Instruction", Some(cpu_id), instruction, shared),
    ]
}

/// Intel Core i9-13900K style: 8 P-cores with Hyper-Threading (CPUs 0-15,
/// siblings 2k/2k+1) and 16 E-cores (CPUs 16-31) in clusters of four sharing
/// an L2; hybrid PMU devices; no `cpu_capacity` (older x86 kernels); two
/// favoured P-cores boost higher.
pub fn intel_8p_16e() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    let all: Vec<usize> = (0..32).collect();
    for k in 0..8usize {
        let pair = [2 * k, 2 * k + 1];
        for &cpu in &pair {
            let core_id = 4 * k as i64;
            let mut c = FixtureCpu::new(cpu, core_id, 0, &pair);
            c.caches = l1(k as u64, &pair, "48K", "32K");
            c.caches.push(FixtureCache::new(
                2,
                "Unified",
                Some(k as u64),
                "2048K",
                &pair,
            ));
            c.caches
                .push(FixtureCache::new(3, "Unified", Some(0), "36864K", &all));
            c.max_freq_khz = Some(if k == 2 || k == 3 {
                5_800_000
            } else {
                5_500_000
            });
            b.cpus.push(c);
        }
    }
    for j in 0..16usize {
        let cpu = 16 + j;
        let cluster = j / 4;
        let cluster_cpus: Vec<usize> = (16 + 4 * cluster..16 + 4 * cluster + 4).collect();
        let mut c = FixtureCpu::new(cpu, 32 + j as i64, 0, &[cpu]);
        c.cluster = Some(64 + cluster as i64);
        c.caches = l1(8 + j as u64, &[cpu], "32K", "64K");
        c.caches.push(FixtureCache::new(
            2,
            "Unified",
            Some(8 + cluster as u64),
            "4096K",
            &cluster_cpus,
        ));
        c.caches
            .push(FixtureCache::new(3, "Unified", Some(0), "36864K", &all));
        c.max_freq_khz = Some(4_300_000);
        b.cpus.push(c);
    }
    b.nodes = vec![(0, all)];
    b.cpu_core_pmu = Some((0..16).collect());
    b.cpu_atom_pmu = Some((16..32).collect());
    b
}

/// AMD Ryzen AI 9 HX 370 style: 4 Zen 5 cores (CPUs 0-3) and 8 Zen 5c cores
/// (CPUs 4-11) with SMT; the sibling of CPU N is N+12. Each kind has its own
/// L3. `cpu_capacity` is 1024 everywhere and `acpi_cppc/highest_perf` is
/// equal everywhere (preferred cores off), so the classes come from
/// `cpuinfo_max_freq`, where the Zen 5 cores differ slightly among
/// themselves (within 10 %).
pub fn amd_zen5_4_zen5c_8() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    let zen5_l3: Vec<usize> = (0..4).chain(12..16).collect();
    let zen5c_l3: Vec<usize> = (4..12).chain(16..24).collect();
    let zen5_freqs = [5_100_000u64, 5_100_000, 4_950_000, 4_900_000];
    let mut cpus = Vec::new();
    for core in 0..12usize {
        let pair = [core, core + 12];
        let zen5 = core < 4;
        for &cpu in &pair {
            let core_id = if zen5 { core as i64 } else { 4 + core as i64 };
            let mut c = FixtureCpu::new(cpu, core_id, 0, &pair);
            c.caches = l1(core as u64, &pair, "48K", "32K");
            c.caches.push(FixtureCache::new(
                2,
                "Unified",
                Some(core as u64),
                "1024K",
                &pair,
            ));
            if zen5 {
                c.caches
                    .push(FixtureCache::new(3, "Unified", Some(0), "16384K", &zen5_l3));
            } else {
                c.caches
                    .push(FixtureCache::new(3, "Unified", Some(1), "8192K", &zen5c_l3));
            }
            c.capacity = Some(1024);
            c.highest_perf = Some(166);
            c.max_freq_khz = Some(zen5_freqs.get(core).copied().unwrap_or(3_300_000));
            cpus.push(c);
        }
    }
    cpus.sort_by_key(|c| c.cpu);
    b.cpus = cpus;
    b.nodes = vec![(0, (0..24).collect())];
    b
}

/// Rockchip RK3588 style big.LITTLE board: four Cortex-A55 (CPUs 0-3,
/// capacity 414) and four Cortex-A76 (CPUs 4-7, capacity 1024), no SMT, no
/// `die_id`, no cache `id` files.
pub fn arm_big_little() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    let all: Vec<usize> = (0..8).collect();
    for cpu in 0..8usize {
        let big = cpu >= 4;
        let core_id = if big { (cpu % 2) as i64 } else { cpu as i64 };
        let mut c = FixtureCpu::new(cpu, core_id, 0, &[cpu]);
        c.die = None;
        c.cluster = Some(if big { 1 + (cpu as i64 - 4) / 2 } else { 0 });
        c.caches = vec![
            FixtureCache::new(1, "Data", None, if big { "64K" } else { "32K" }, &[cpu]),
            FixtureCache::new(
                1,
                "Instruction",
                None,
                if big { "64K" } else { "32K" },
                &[cpu],
            ),
            FixtureCache::new(
                2,
                "Unified",
                None,
                if big { "512K" } else { "128K" },
                &[cpu],
            ),
            FixtureCache::new(3, "Unified", None, "3072K", &all),
        ];
        c.capacity = Some(if big { 1024 } else { 414 });
        c.max_freq_khz = Some(if big { 2_400_000 } else { 1_800_000 });
        b.cpus.push(c);
    }
    b.nodes = vec![(0, all)];
    b
}

/// Three-tier phone SoC (Snapdragon 888 style): four small cores (CPUs 0-3,
/// capacity 238), three medium (4-6, capacity 870) and one large (7, 1024).
/// Its `cpuinfo_max_freq` values would put medium and large together; the
/// capacity rule takes precedence.
pub fn arm_three_tier() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    for cpu in 0..8usize {
        let mut c = FixtureCpu::new(cpu, cpu as i64, 0, &[cpu]);
        c.capacity = Some(match cpu {
            0..=3 => 238,
            4..=6 => 870,
            _ => 1024,
        });
        c.max_freq_khz = Some(match cpu {
            0..=3 => 1_800_000,
            4..=6 => 2_420_000,
            _ => 2_600_000,
        });
        b.cpus.push(c);
    }
    b.nodes = vec![(0, (0..8).collect())];
    b
}

/// Homogeneous two-socket Xeon style server: 2 × 8 cores × 2 threads.
/// CPUs 0-7 are socket 0, 8-15 socket 1, and 16-31 their Hyper-Threading
/// siblings (sibling of N is N+16). Node 0 = 0-7,16-23, node 1 = 8-15,24-31.
/// `core_id` repeats across sockets. `acpi_cppc/highest_perf` varies
/// slightly (favoured cores) but within 10 %.
pub fn two_socket_numa() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    for cpu in 0..32usize {
        let core = cpu % 16;
        let package = (core / 8) as i64;
        let pair = [core, core + 16];
        let package_cpus: Vec<usize> = (0..32).filter(|c| (c % 16) / 8 == core / 8).collect();
        let mut c = FixtureCpu::new(cpu, (core % 8) as i64, package, &pair);
        c.die = Some(package);
        c.caches = l1(core as u64, &pair, "48K", "32K");
        c.caches.push(FixtureCache::new(
            2,
            "Unified",
            Some(core as u64),
            "2048K",
            &pair,
        ));
        c.caches.push(FixtureCache::new(
            3,
            "Unified",
            Some(package as u64),
            "30720K",
            &package_cpus,
        ));
        c.highest_perf = Some(if core % 8 < 2 { 39 } else { 37 });
        c.max_freq_khz = Some(3_900_000);
        b.cpus.push(c);
    }
    b.nodes = vec![
        (0, (0..8).chain(16..24).collect()),
        (1, (8..16).chain(24..32).collect()),
    ];
    b
}

/// A machine with offline CPUs and an old kernel: 4 cores × 2 threads
/// (siblings N and N+4), CPUs 3, 6 and 7 offline (directories without
/// `topology/`), no `die_id`, `cluster_id` or `core_cpus_list`, sibling
/// lists still naming offline CPUs, no `devices/system/node`.
pub fn offline_cpus() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    for cpu in 0..8usize {
        let core = cpu % 4;
        let pair = [core, core + 4];
        let mut c = FixtureCpu::new(cpu, core as i64, 0, &pair);
        c.online = !matches!(cpu, 3 | 6 | 7);
        c.die = None;
        c.cluster = None;
        c.core_cpus_list = false;
        c.caches = l1(core as u64, &pair, "32K", "32K");
        c.caches.push(FixtureCache::new(
            2,
            "Unified",
            Some(core as u64),
            "256K",
            &pair,
        ));
        c.caches.push(FixtureCache::new(
            3,
            "Unified",
            Some(0),
            "8192K",
            &(0..8).collect::<Vec<_>>(),
        ));
        c.max_freq_khz = Some(3_000_000);
        b.cpus.push(c);
    }
    b
}

/// The development VM (2 vCPUs, Intel Xeon, KVM), captured from its /sys:
/// two single-thread cores in one package, node 0, `cpu_capacity` 1024 on
/// both, no cpufreq and no ACPI CPPC, private L1/L2 and a shared 300 MiB L3.
pub fn vm_2vcpu() -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    for cpu in 0..2usize {
        let mut c = FixtureCpu::new(cpu, cpu as i64, 0, &[cpu]);
        c.die = Some(0);
        c.cluster = Some(cpu as i64);
        c.caches = l1(cpu as u64, &[cpu], "48K", "32K");
        c.caches.push(FixtureCache::new(
            2,
            "Unified",
            Some(cpu as u64),
            "2048K",
            &[cpu],
        ));
        c.caches
            .push(FixtureCache::new(3, "Unified", Some(0), "307200K", &[0, 1]));
        c.capacity = Some(1024);
        b.cpus.push(c);
    }
    b.nodes = vec![(0, vec![0, 1])];
    b
}

/// A homogeneous machine with `count` single-thread cores and minimal files,
/// for masks wider than 64 or 128 bits.
pub fn wide_homogeneous(count: usize) -> SysfsBuilder {
    let mut b = SysfsBuilder::new();
    for cpu in 0..count {
        let mut c = FixtureCpu::new(cpu, cpu as i64, 0, &[cpu]);
        c.cluster = None;
        b.cpus.push(c);
    }
    b.nodes = vec![(0, (0..count).collect())];
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lists() {
        assert_eq!(kernel_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(kernel_list(&[]), "");
    }

    #[test]
    fn temp_tree_is_removed_on_drop() {
        let path = {
            let tree = TempTree::new("drop").unwrap();
            fs::write(tree.path().join("f"), "x").unwrap();
            tree.path().to_path_buf()
        };
        assert!(!path.exists());
    }
}
