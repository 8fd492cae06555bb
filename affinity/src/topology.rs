//! Reading the CPU topology from sysfs and deriving core classes.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use crate::cpulist;

/// Everything this crate knows about one online CPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuInfo {
    /// Logical CPU number (the `N` in `cpuN`).
    pub cpu: usize,
    /// `topology/core_id`; unique only within a package. `None` if absent.
    pub core_id: Option<i64>,
    /// `topology/physical_package_id` (socket). Old ARM kernels report -1.
    pub package: Option<i64>,
    /// `topology/die_id`, absent on kernels before 5.2.
    pub die: Option<i64>,
    /// `topology/cluster_id`, absent on kernels before 5.16.
    pub cluster: Option<i64>,
    /// NUMA node, from `devices/system/node/nodeN/cpulist`.
    pub node: Option<usize>,
    /// Index into [`Topology::classes`].
    pub class: usize,
    /// Online logical CPUs of the same physical core, this one included,
    /// ascending (`core_cpus_list`, falling back to `thread_siblings_list`).
    pub siblings: Vec<usize>,
    /// Index into [`Topology::caches`] of the unified (or data) L2 cache.
    pub l2: Option<usize>,
    /// Index into [`Topology::caches`] of the unified (or data) L3 cache.
    pub l3: Option<usize>,
    /// `cpu_capacity` (ARM and recent x86 kernels; 1024 = biggest core).
    pub capacity: Option<u64>,
    /// `acpi_cppc/highest_perf`.
    pub highest_perf: Option<u64>,
    /// `cpufreq/cpuinfo_max_freq`, in kHz.
    pub max_freq_khz: Option<u64>,
    /// Whether this process may run on the CPU (sched_getaffinity, which
    /// already reflects the cgroup cpuset). Always true for [`Topology::from_sysfs`].
    pub allowed: bool,
}

/// A group of CPUs of the same speed. Classes are ordered fastest first and
/// named `P`, `E`, `E2`, `E3`, …
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoreClass {
    pub name: String,
    /// Online CPUs of this class, ascending (allowed or not).
    pub cpus: Vec<usize>,
    /// Number of physical cores (SMT sibling groups) in the class.
    pub cores: usize,
}

/// A NUMA node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub id: usize,
    /// Online CPUs of the node, ascending.
    pub cpus: Vec<usize>,
}

/// One cache instance, shared by `cpus`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cache {
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`, as sysfs spells it.
    pub kind: String,
    /// `cache/indexN/id`; absent on some VMs and device-tree systems.
    pub id: Option<u64>,
    pub size_bytes: Option<u64>,
    /// Online CPUs sharing this cache, ascending.
    pub cpus: Vec<usize>,
}

/// Which sysfs data the core classes were derived from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClassSource {
    /// Nothing distinguishes the CPUs: one class `P`.
    Uniform,
    /// Intel hybrid PMU devices `devices/cpu_core` and `devices/cpu_atom`.
    HybridPmu,
    /// Per-CPU `cpu_capacity`.
    CpuCapacity,
    /// Per-CPU `acpi_cppc/highest_perf`.
    AcpiCppc,
    /// Per-CPU `cpufreq/cpuinfo_max_freq`.
    CpuFreq,
}

impl ClassSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ClassSource::Uniform => "uniform",
            ClassSource::HybridPmu => "hybrid-pmu",
            ClassSource::CpuCapacity => "cpu_capacity",
            ClassSource::AcpiCppc => "acpi_cppc/highest_perf",
            ClassSource::CpuFreq => "cpufreq/cpuinfo_max_freq",
        }
    }
}

/// Failure to read or understand the sysfs tree. Always names the file.
#[derive(Debug)]
pub enum TopologyError {
    /// A required file could not be read.
    Io { path: PathBuf, error: io::Error },
    /// A file had content we do not understand.
    Parse {
        path: PathBuf,
        content: String,
        reason: String,
    },
    /// `online` lists no CPU.
    NoOnlineCpus { path: PathBuf },
    /// sched_getaffinity failed.
    Affinity(io::Error),
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::Io { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            TopologyError::Parse {
                path,
                content,
                reason,
            } => {
                let mut shown: String = content.trim().chars().take(80).collect();
                if content.trim().chars().count() > 80 {
                    shown.push('…');
                }
                write!(
                    f,
                    "cannot parse {} (content {shown:?}): {reason}",
                    path.display()
                )
            }
            TopologyError::NoOnlineCpus { path } => {
                write!(f, "{} lists no online CPU", path.display())
            }
            TopologyError::Affinity(error) => write!(f, "sched_getaffinity failed: {error}"),
        }
    }
}

impl std::error::Error for TopologyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TopologyError::Io { error, .. } | TopologyError::Affinity(error) => Some(error),
            _ => None,
        }
    }
}

/// The machine's CPU topology: online CPUs, core classes, NUMA nodes, caches,
/// and which CPUs this process may use.
#[derive(Clone, Debug)]
pub struct Topology {
    pub(crate) cpus: Vec<CpuInfo>,
    pub(crate) classes: Vec<CoreClass>,
    pub(crate) class_source: ClassSource,
    pub(crate) nodes: Vec<Node>,
    pub(crate) nodes_from_sysfs: bool,
    pub(crate) caches: Vec<Cache>,
    pub(crate) possible: Vec<usize>,
    pub(crate) root: PathBuf,
}

impl Topology {
    /// Reads the topology below `root` (normally `/sys`). All online CPUs
    /// are treated as allowed; see [`Topology::system`] and
    /// [`Topology::with_allowed`] for the process's restriction.
    pub fn from_sysfs(root: &Path) -> Result<Topology, TopologyError> {
        read_topology(root)
    }

    /// Reads `/sys` and restricts the allowed CPUs to the calling thread's
    /// affinity (sched_getaffinity, which the kernel already limits to the
    /// cgroup cpuset).
    pub fn system() -> Result<Topology, TopologyError> {
        let topology = Topology::from_sysfs(Path::new("/sys"))?;
        let allowed = crate::pin::allowed_cpus().map_err(TopologyError::Affinity)?;
        Ok(topology.with_allowed(&allowed))
    }

    /// Marks exactly the CPUs in `allowed` (intersected with the online
    /// CPUs) as usable by this process. Classes and nodes keep listing every
    /// online CPU so that their names do not depend on the cpuset.
    pub fn with_allowed(mut self, allowed: &[usize]) -> Topology {
        for cpu in &mut self.cpus {
            cpu.allowed = allowed.contains(&cpu.cpu);
        }
        self
    }

    /// Online CPUs, ascending.
    pub fn cpus(&self) -> &[CpuInfo] {
        &self.cpus
    }

    /// Information about one online CPU.
    pub fn cpu(&self, cpu: usize) -> Option<&CpuInfo> {
        self.cpus
            .binary_search_by_key(&cpu, |c| c.cpu)
            .ok()
            .map(|i| &self.cpus[i])
    }

    /// Numbers of the online CPUs, ascending.
    pub fn online(&self) -> Vec<usize> {
        self.cpus.iter().map(|c| c.cpu).collect()
    }

    /// Online CPUs this process may use, ascending.
    pub fn allowed(&self) -> Vec<usize> {
        self.cpus
            .iter()
            .filter(|c| c.allowed)
            .map(|c| c.cpu)
            .collect()
    }

    /// Possible CPUs that are not online (from `possible`, else `present`).
    pub fn offline(&self) -> Vec<usize> {
        self.possible
            .iter()
            .copied()
            .filter(|c| self.cpu(*c).is_none())
            .collect()
    }

    /// Core classes, fastest first.
    pub fn classes(&self) -> &[CoreClass] {
        &self.classes
    }

    /// Which sysfs data the classes came from.
    pub fn class_source(&self) -> ClassSource {
        self.class_source
    }

    /// The class name (`P`, `E`, …) of an online CPU.
    pub fn class_of(&self, cpu: usize) -> Option<&str> {
        self.cpu(cpu)
            .and_then(|c| self.classes.get(c.class))
            .map(|c| c.name.as_str())
    }

    /// NUMA nodes. Without `devices/system/node` the machine is one node 0.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// Whether the node list came from sysfs (false: synthesised node 0).
    pub fn nodes_from_sysfs(&self) -> bool {
        self.nodes_from_sysfs
    }

    /// Distinct caches of the online CPUs.
    pub fn caches(&self) -> &[Cache] {
        &self.caches
    }

    /// The sysfs root this topology was read from.
    pub fn sysfs_root(&self) -> &Path {
        &self.root
    }

    /// Keeps, of each physical core, only the lowest-numbered CPU among
    /// `cpus` ("nosmt"). Input need not be sorted; output is ascending.
    pub fn one_per_core(&self, cpus: &[usize]) -> Vec<usize> {
        let mut selected = cpus.to_vec();
        selected.sort_unstable();
        selected.dedup();
        selected
            .iter()
            .copied()
            .filter(|&c| match self.cpu(c) {
                Some(info) => !info
                    .siblings
                    .iter()
                    .any(|&s| s < c && selected.binary_search(&s).is_ok()),
                None => true,
            })
            .collect()
    }
}

struct Reader<'a> {
    root: &'a Path,
}

impl Reader<'_> {
    fn path(&self, relative: &str) -> PathBuf {
        self.root.join(relative)
    }

    /// Reads a file; a missing file is `None`, other errors are errors.
    fn optional(&self, path: &Path) -> Result<Option<String>, TopologyError> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(TopologyError::Io {
                path: path.to_path_buf(),
                error,
            }),
        }
    }

    fn required(&self, path: &Path) -> Result<String, TopologyError> {
        match self.optional(path)? {
            Some(text) => Ok(text),
            None => Err(TopologyError::Io {
                path: path.to_path_buf(),
                error: io::Error::new(io::ErrorKind::NotFound, "file not found"),
            }),
        }
    }

    fn list(&self, path: &Path) -> Result<Option<Vec<usize>>, TopologyError> {
        match self.optional(path)? {
            None => Ok(None),
            Some(text) => {
                cpulist::parse_list(&text)
                    .map(Some)
                    .map_err(|reason| TopologyError::Parse {
                        path: path.to_path_buf(),
                        content: text,
                        reason,
                    })
            }
        }
    }

    fn number<T: std::str::FromStr>(&self, path: &Path) -> Result<Option<T>, TopologyError> {
        match self.optional(path)? {
            None => Ok(None),
            Some(text) => match text.trim().parse::<T>() {
                Ok(v) => Ok(Some(v)),
                Err(_) => Err(TopologyError::Parse {
                    path: path.to_path_buf(),
                    content: text,
                    reason: "expected an integer".to_string(),
                }),
            },
        }
    }

    /// A ranking hint (capacity, CPPC, frequency). These files are known to
    /// fail with EIO/ENODEV on some firmware, so any read error or a zero
    /// value means "unknown" rather than a failure; garbage content is still
    /// reported.
    fn hint(&self, path: &Path) -> Result<Option<u64>, TopologyError> {
        let text = match std::fs::read(path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => return Ok(None),
        };
        match text.trim().parse::<u64>() {
            Ok(0) => Ok(None),
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(TopologyError::Parse {
                path: path.to_path_buf(),
                content: text,
                reason: "expected a non-negative integer".to_string(),
            }),
        }
    }

    /// Sorted numeric suffixes of directory entries named `prefix<N>`.
    fn numbered_entries(&self, dir: &Path, prefix: &str) -> Result<Vec<usize>, TopologyError> {
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => {
                return Err(TopologyError::Io {
                    path: dir.to_path_buf(),
                    error,
                })
            }
        };
        let mut numbers = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| TopologyError::Io {
                path: dir.to_path_buf(),
                error,
            })?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if let Some(rest) = name.strip_prefix(prefix) {
                if !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()) {
                    if let Ok(n) = rest.parse::<usize>() {
                        numbers.push(n);
                    }
                }
            }
        }
        numbers.sort_unstable();
        Ok(numbers)
    }
}

/// Parses a sysfs cache size such as `48K`, `2048K`, `1M` or `512`.
fn parse_cache_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, multiplier) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1024u64),
        b'M' | b'm' => (&text[..text.len() - 1], 1024 * 1024),
        b'G' | b'g' => (&text[..text.len() - 1], 1024 * 1024 * 1024),
        _ => (text, 1),
    };
    digits.trim().parse::<u64>().ok()?.checked_mul(multiplier)
}

struct RawCache {
    level: u32,
    kind: String,
    id: Option<u64>,
    size_bytes: Option<u64>,
    cpus: Vec<usize>,
}

fn read_topology(root: &Path) -> Result<Topology, TopologyError> {
    let reader = Reader { root };
    let online_path = reader.path("devices/system/cpu/online");
    let online_text = reader.required(&online_path)?;
    let online = cpulist::parse_list(&online_text).map_err(|reason| TopologyError::Parse {
        path: online_path.clone(),
        content: online_text.clone(),
        reason,
    })?;
    if online.is_empty() {
        return Err(TopologyError::NoOnlineCpus { path: online_path });
    }
    let possible = match reader.list(&reader.path("devices/system/cpu/possible"))? {
        Some(list) => list,
        None => reader
            .list(&reader.path("devices/system/cpu/present"))?
            .unwrap_or_else(|| online.clone()),
    };
    // `present` is read for validation only: a corrupt file is reported.
    reader.list(&reader.path("devices/system/cpu/present"))?;

    let intersect_online = |list: Vec<usize>| -> Vec<usize> {
        list.into_iter()
            .filter(|c| online.binary_search(c).is_ok())
            .collect()
    };

    // Nodes.
    let node_dir = reader.path("devices/system/node");
    let node_ids = reader.numbered_entries(&node_dir, "node")?;
    let mut nodes = Vec::new();
    for id in &node_ids {
        let path = node_dir.join(format!("node{id}/cpulist"));
        let cpus = reader.list(&path)?.unwrap_or_default();
        nodes.push(Node {
            id: *id,
            cpus: intersect_online(cpus),
        });
    }
    let nodes_from_sysfs = !nodes.is_empty();
    if !nodes_from_sysfs {
        nodes.push(Node {
            id: 0,
            cpus: online.clone(),
        });
    }

    // Per-CPU data.
    let mut cpus = Vec::with_capacity(online.len());
    let mut raw_caches: Vec<RawCache> = Vec::new();
    let mut cpu_caches: Vec<(Option<usize>, Option<usize>)> = Vec::with_capacity(online.len());
    for &cpu in &online {
        let base = reader.path(&format!("devices/system/cpu/cpu{cpu}"));
        let topo = base.join("topology");
        let core_id = reader.number::<i64>(&topo.join("core_id"))?;
        let package = reader.number::<i64>(&topo.join("physical_package_id"))?;
        let die = reader.number::<i64>(&topo.join("die_id"))?;
        let cluster = reader.number::<i64>(&topo.join("cluster_id"))?;
        let siblings = match reader.list(&topo.join("core_cpus_list"))? {
            Some(list) => Some(list),
            None => reader.list(&topo.join("thread_siblings_list"))?,
        };
        let mut siblings = intersect_online(siblings.unwrap_or_default());
        if let Err(pos) = siblings.binary_search(&cpu) {
            siblings.insert(pos, cpu);
        }
        let capacity = reader.hint(&base.join("cpu_capacity"))?;
        let highest_perf = reader.hint(&base.join("acpi_cppc/highest_perf"))?;
        let max_freq_khz = reader.hint(&base.join("cpufreq/cpuinfo_max_freq"))?;
        let node = nodes
            .iter()
            .find(|n| n.cpus.binary_search(&cpu).is_ok())
            .map(|n| n.id);

        // Caches.
        let cache_dir = base.join("cache");
        let mut l2 = None;
        let mut l3 = None;
        for index in reader.numbered_entries(&cache_dir, "index")? {
            let dir = cache_dir.join(format!("index{index}"));
            let Some(level) = reader.number::<u32>(&dir.join("level"))? else {
                continue;
            };
            let kind = reader
                .optional(&dir.join("type"))?
                .map(|t| t.trim().to_string())
                .unwrap_or_default();
            let id = reader.number::<u64>(&dir.join("id"))?;
            let size_path = dir.join("size");
            let size_bytes = match reader.optional(&size_path)? {
                None => None,
                Some(text) => match parse_cache_size(&text) {
                    Some(size) => Some(size),
                    None => {
                        return Err(TopologyError::Parse {
                            path: size_path,
                            content: text,
                            reason: "expected a size like 48K".to_string(),
                        })
                    }
                },
            };
            let mut shared = intersect_online(
                reader
                    .list(&dir.join("shared_cpu_list"))?
                    .unwrap_or_default(),
            );
            if let Err(pos) = shared.binary_search(&cpu) {
                shared.insert(pos, cpu);
            }
            let position = raw_caches
                .iter()
                .position(|c| c.level == level && c.kind == kind && c.cpus == shared);
            let position = match position {
                Some(p) => p,
                None => {
                    raw_caches.push(RawCache {
                        level,
                        kind: kind.clone(),
                        id,
                        size_bytes,
                        cpus: shared,
                    });
                    raw_caches.len() - 1
                }
            };
            if kind != "Instruction" {
                match level {
                    2 if l2.is_none() => l2 = Some(position),
                    3 if l3.is_none() => l3 = Some(position),
                    _ => {}
                }
            }
        }
        cpu_caches.push((l2, l3));
        cpus.push(CpuInfo {
            cpu,
            core_id,
            package,
            die,
            cluster,
            node,
            class: 0,
            siblings,
            l2: None,
            l3: None,
            capacity,
            highest_perf,
            max_freq_khz,
            allowed: true,
        });
    }

    // Order caches by level, kind, first CPU for stable output.
    let mut order: Vec<usize> = (0..raw_caches.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&raw_caches[a], &raw_caches[b]);
        (x.level, &x.kind, &x.cpus).cmp(&(y.level, &y.kind, &y.cpus))
    });
    let mut new_index = vec![0; raw_caches.len()];
    for (new, &old) in order.iter().enumerate() {
        new_index[old] = new;
    }
    for (info, (l2, l3)) in cpus.iter_mut().zip(cpu_caches) {
        info.l2 = l2.map(|i| new_index[i]);
        info.l3 = l3.map(|i| new_index[i]);
    }
    let mut slots: Vec<Option<RawCache>> = raw_caches.into_iter().map(Some).collect();
    let caches: Vec<Cache> = order
        .iter()
        .filter_map(|&old| slots[old].take())
        .map(|c| Cache {
            level: c.level,
            kind: c.kind,
            id: c.id,
            size_bytes: c.size_bytes,
            cpus: c.cpus,
        })
        .collect();

    // Hybrid PMU lists.
    let core_pmu = reader
        .list(&reader.path("devices/cpu_core/cpus"))?
        .map(intersect_online);
    let atom_pmu = reader
        .list(&reader.path("devices/cpu_atom/cpus"))?
        .map(intersect_online);

    let (class_source, scores) = choose_scores(&cpus, core_pmu.as_deref(), atom_pmu.as_deref());
    let class_of_score = group_scores(&scores);
    let class_count = class_of_score.values().copied().max().map_or(1, |m| m + 1);
    let mut classes: Vec<CoreClass> = (0..class_count)
        .map(|i| CoreClass {
            name: class_name(i),
            cpus: Vec::new(),
            cores: 0,
        })
        .collect();
    for (info, score) in cpus.iter_mut().zip(&scores) {
        let class = class_of_score.get(score).copied().unwrap_or(0);
        info.class = class;
        classes[class].cpus.push(info.cpu);
        if info.siblings.first() == Some(&info.cpu) {
            classes[class].cores += 1;
        }
    }

    Ok(Topology {
        cpus,
        classes,
        class_source,
        nodes,
        nodes_from_sysfs,
        caches,
        possible,
        root: root.to_path_buf(),
    })
}

/// Name of the class at `rank` (0 = fastest).
pub fn class_name(rank: usize) -> String {
    match rank {
        0 => "P".to_string(),
        1 => "E".to_string(),
        n => format!("E{n}"),
    }
}

/// Picks the first rule that distinguishes the CPUs and returns one score
/// per CPU (higher = faster).
fn choose_scores(
    cpus: &[CpuInfo],
    core_pmu: Option<&[usize]>,
    atom_pmu: Option<&[usize]>,
) -> (ClassSource, Vec<u64>) {
    // 1. Intel hybrid PMU devices, when they cover every online CPU.
    if core_pmu.is_some() || atom_pmu.is_some() {
        let core = core_pmu.unwrap_or(&[]);
        let atom = atom_pmu.unwrap_or(&[]);
        let scores: Option<Vec<u64>> = cpus
            .iter()
            .map(|c| {
                if core.binary_search(&c.cpu).is_ok() {
                    Some(200)
                } else if atom.binary_search(&c.cpu).is_ok() {
                    Some(100)
                } else {
                    None
                }
            })
            .collect();
        if let Some(scores) = scores {
            return (ClassSource::HybridPmu, scores);
        }
    }
    // 2.–4. Per-CPU hints, when present for all CPUs and not all equal.
    type Hint = fn(&CpuInfo) -> Option<u64>;
    let hints: [(ClassSource, Hint); 3] = [
        (ClassSource::CpuCapacity, |c| c.capacity),
        (ClassSource::AcpiCppc, |c| c.highest_perf),
        (ClassSource::CpuFreq, |c| c.max_freq_khz),
    ];
    for (source, get) in hints {
        let values: Option<Vec<u64>> = cpus.iter().map(get).collect();
        if let Some(values) = values {
            if values.windows(2).any(|w| w[0] != w[1]) {
                return (source, values);
            }
        }
    }
    (ClassSource::Uniform, vec![0; cpus.len()])
}

/// Groups scores into classes: distinct values sorted descending; a value at
/// least 90 % of the next larger value joins that value's class, so a class
/// ends where there is a gap of more than 10 %. Slightly different
/// preferred-core rankings of one kind of core therefore stay together. Returns the class
/// rank of every distinct score.
fn group_scores(scores: &[u64]) -> BTreeMap<u64, usize> {
    let mut distinct: Vec<u64> = scores.to_vec();
    distinct.sort_unstable_by(|a, b| b.cmp(a));
    distinct.dedup();
    let mut map = BTreeMap::new();
    let mut class = 0;
    let mut previous: Option<u64> = None;
    for value in distinct {
        if let Some(prev) = previous {
            // value < 90 % of prev  →  new class.
            if u128::from(value) * 10 < u128::from(prev) * 9 {
                class += 1;
            }
        }
        map.insert(value, class);
        previous = Some(value);
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_within_ten_percent() {
        let map = group_scores(&[1024, 1024, 446, 446, 160]);
        assert_eq!(map[&1024], 0);
        assert_eq!(map[&446], 1);
        assert_eq!(map[&160], 2);
        // Preferred-core rankings that differ slightly stay together.
        let map = group_scores(&[5_100_000, 5_050_000, 4_950_000, 3_300_000]);
        assert_eq!(map[&5_100_000], 0);
        assert_eq!(map[&4_950_000], 0);
        assert_eq!(map[&3_300_000], 1);
        // Exactly 90 % is "within 10 %"; the comparison is with the next
        // faster value, so a class ends at a gap of more than 10 %.
        let map = group_scores(&[100, 90, 80]);
        assert_eq!((map[&100], map[&90], map[&80]), (0, 0, 1));
        let map = group_scores(&[100, 91, 83]);
        assert_eq!((map[&100], map[&91], map[&83]), (0, 0, 0));
    }

    #[test]
    fn class_names() {
        assert_eq!(class_name(0), "P");
        assert_eq!(class_name(1), "E");
        assert_eq!(class_name(2), "E2");
        assert_eq!(class_name(3), "E3");
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(parse_cache_size("48K\n"), Some(48 * 1024));
        assert_eq!(parse_cache_size("1M"), Some(1024 * 1024));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("lots"), None);
        assert_eq!(parse_cache_size(""), None);
    }
}
