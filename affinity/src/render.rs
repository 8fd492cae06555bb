//! Human-readable and JSON renderings of a [`Topology`].

use std::fmt::Write as _;

use crate::cpulist::{format_compact, format_plain};
use crate::topology::{Cache, Topology};

impl Topology {
    /// One line describing a CPU selection, for the server's start-up log:
    /// `CPUs 0,1 (class P: 0,1)`, or with several classes and nodes
    /// `CPUs 0-3,16 (class P: 0-3; class E: 16; nodes 0,1)`.
    pub fn describe(&self, cpus: &[usize]) -> String {
        let mut sorted = cpus.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        let mut parts: Vec<String> = Vec::new();
        for class in &self.classes {
            let members: Vec<usize> = sorted
                .iter()
                .copied()
                .filter(|c| class.cpus.binary_search(c).is_ok())
                .collect();
            if !members.is_empty() {
                parts.push(format!(
                    "class {}: {}",
                    class.name,
                    format_compact(&members)
                ));
            }
        }
        let unknown: Vec<usize> = sorted
            .iter()
            .copied()
            .filter(|c| self.cpu(*c).is_none())
            .collect();
        if !unknown.is_empty() {
            parts.push(format!("not online: {}", format_compact(&unknown)));
        }
        if self.nodes.len() > 1 {
            let mut nodes: Vec<usize> = sorted
                .iter()
                .filter_map(|c| self.cpu(*c).and_then(|i| i.node))
                .collect();
            nodes.sort_unstable();
            nodes.dedup();
            if !nodes.is_empty() {
                let label = if nodes.len() == 1 { "node" } else { "nodes" };
                parts.push(format!("{label} {}", format_plain(&nodes)));
            }
        }
        let label = if sorted.len() == 1 { "CPU" } else { "CPUs" };
        if parts.is_empty() {
            format!("{label} {}", format_compact(&sorted))
        } else {
            format!("{label} {} ({})", format_compact(&sorted), parts.join("; "))
        }
    }

    /// A table with one row per online CPU followed by a summary of classes,
    /// nodes, caches, offline and allowed CPUs.
    pub fn render_table(&self) -> String {
        let header = [
            "CPU",
            "CORE",
            "PKG",
            "NODE",
            "CLASS",
            "SMT SIBLINGS",
            "L2 GROUP",
            "L3 GROUP",
            "MAX MHZ",
        ];
        let mut rows: Vec<Vec<String>> = Vec::new();
        let opt = |v: Option<i64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        let cache_cell = |index: Option<usize>| -> String {
            match index.and_then(|i| self.caches.get(i)) {
                Some(cache) => format_compact(&cache.cpus),
                None => "-".to_string(),
            }
        };
        for cpu in &self.cpus {
            let mut cell = cpu.cpu.to_string();
            if !cpu.allowed {
                cell.push('!');
            }
            rows.push(vec![
                cell,
                opt(cpu.core_id),
                opt(cpu.package),
                cpu.node.map_or_else(|| "-".to_string(), |n| n.to_string()),
                self.classes
                    .get(cpu.class)
                    .map_or_else(|| "?".to_string(), |c| c.name.clone()),
                format_compact(&cpu.siblings),
                cache_cell(cpu.l2),
                cache_cell(cpu.l3),
                cpu.max_freq_khz
                    .map_or_else(|| "-".to_string(), |khz| (khz / 1000).to_string()),
            ]);
        }
        let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[String]| {
            let mut text = String::new();
            for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
                if i > 0 {
                    text.push_str("  ");
                }
                let _ = write!(text, "{cell:<w$}");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(
            &mut out,
            &header.iter().map(|h| h.to_string()).collect::<Vec<_>>(),
        );
        for row in &rows {
            line(&mut out, row);
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "classes (from {}, fastest first):",
            self.class_source.as_str()
        );
        for class in &self.classes {
            let _ = writeln!(
                out,
                "  {:<3} {} ({} CPUs, {} cores)",
                class.name,
                format_compact(&class.cpus),
                class.cpus.len(),
                class.cores
            );
        }
        let _ = writeln!(
            out,
            "nodes{}:",
            if self.nodes_from_sysfs {
                ""
            } else {
                " (no NUMA information; one node assumed)"
            }
        );
        for node in &self.nodes {
            let _ = writeln!(out, "  node{} {}", node.id, format_compact(&node.cpus));
        }
        let shared: Vec<&Cache> = self
            .caches
            .iter()
            .filter(|c| c.level >= 2 && c.kind != "Instruction")
            .collect();
        if !shared.is_empty() {
            let _ = writeln!(out, "caches:");
            for cache in shared {
                let size = cache
                    .size_bytes
                    .map_or_else(|| "?".to_string(), format_size);
                let _ = writeln!(
                    out,
                    "  L{} {} {} shared by {}",
                    cache.level,
                    cache.kind,
                    size,
                    format_compact(&cache.cpus)
                );
            }
        }
        let offline = self.offline();
        if !offline.is_empty() {
            let _ = writeln!(out, "offline: {}", format_compact(&offline));
        }
        let allowed = self.allowed();
        if allowed.len() == self.cpus.len() {
            let _ = writeln!(out, "allowed: all online CPUs");
        } else {
            let _ = writeln!(
                out,
                "allowed: {} (CPUs marked ! are online but outside this process's affinity/cpuset)",
                format_compact(&allowed)
            );
        }
        out
    }

    /// JSON: `{"cpus":[{"cpu":0,"core":0,"package":0,"node":0,"class":"P",
    /// "siblings":[0,1],…}],"classes":[{"name":"P","cpus":[…]}],…}`.
    /// Absent values are `null`.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{\"cpus\":[");
        for (i, cpu) in self.cpus.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let class = self.classes.get(cpu.class).map_or("?", |c| c.name.as_str());
            let cache_cpus = |index: Option<usize>| match index.and_then(|i| self.caches.get(i)) {
                Some(cache) => json_array(&cache.cpus),
                None => "null".to_string(),
            };
            let _ = write!(
                out,
                "{{\"cpu\":{},\"core\":{},\"package\":{},\"die\":{},\"cluster\":{},\"node\":{},\"class\":{},\
                 \"siblings\":{},\"l2\":{},\"l3\":{},\"capacity\":{},\"highest_perf\":{},\"max_freq_khz\":{},\
                 \"allowed\":{}}}",
                cpu.cpu,
                json_opt(cpu.core_id),
                json_opt(cpu.package),
                json_opt(cpu.die),
                json_opt(cpu.cluster),
                json_opt(cpu.node),
                json_string(class),
                json_array(&cpu.siblings),
                cache_cpus(cpu.l2),
                cache_cpus(cpu.l3),
                json_opt(cpu.capacity),
                json_opt(cpu.highest_perf),
                json_opt(cpu.max_freq_khz),
                cpu.allowed
            );
        }
        out.push_str("],\"classes\":[");
        for (i, class) in self.classes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"name\":{},\"cpus\":{},\"cores\":{}}}",
                json_string(&class.name),
                json_array(&class.cpus),
                class.cores
            );
        }
        let _ = write!(
            out,
            "],\"class_source\":{},\"nodes\":[",
            json_string(self.class_source.as_str())
        );
        for (i, node) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"node\":{},\"cpus\":{}}}",
                node.id,
                json_array(&node.cpus)
            );
        }
        out.push_str("],\"caches\":[");
        for (i, cache) in self.caches.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"level\":{},\"type\":{},\"id\":{},\"size_bytes\":{},\"cpus\":{}}}",
                cache.level,
                json_string(&cache.kind),
                json_opt(cache.id),
                json_opt(cache.size_bytes),
                json_array(&cache.cpus)
            );
        }
        let _ = write!(
            out,
            "],\"online\":{},\"offline\":{},\"allowed\":{}}}",
            json_array(&self.online()),
            json_array(&self.offline()),
            json_array(&self.allowed())
        );
        out
    }
}

fn format_size(bytes: u64) -> String {
    const MIB: u64 = 1024 * 1024;
    if bytes >= MIB && bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else if bytes >= 1024 && bytes % 1024 == 0 {
        format!("{} KiB", bytes / 1024)
    } else {
        format!("{bytes} B")
    }
}

fn json_opt<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map_or_else(|| "null".to_string(), |v| v.to_string())
}

fn json_array(values: &[usize]) -> String {
    format!("[{}]", format_plain(values))
}

/// A JSON string literal with the mandatory escapes.
pub(crate) fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("P"), "\"P\"");
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }

    #[test]
    fn sizes() {
        assert_eq!(format_size(48 * 1024), "48 KiB");
        assert_eq!(format_size(300 * 1024 * 1024), "300 MiB");
        assert_eq!(format_size(100), "100 B");
    }
}
