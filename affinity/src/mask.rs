//! CPU mask expressions: `all`, `P`, `E:nosmt`, `0xFF`, `0-3,8`, `node1`, `P&node0`.
//!
//! Grammar (whitespace around items is ignored, keywords and class names are
//! case-insensitive):
//!
//! ```text
//! expr  := inter ( ',' inter )*          union
//! inter := unit ( '&' unit )*            intersection
//! unit  := atom [ ':nosmt' ]             one CPU per physical core
//! atom  := 'all' | CLASS | 'node' N | '0x' HEX | N | N '-' M
//! ```
//!
//! Policy: `all`, classes and nodes silently leave out CPUs this process may
//! not use; numbers, ranges and hex masks must name online, allowed CPUs or
//! the expression is rejected, naming them. An expression that selects no
//! CPU is an error.

use std::fmt;

use crate::cpulist;
use crate::topology::Topology;

/// A mask expression that could not be resolved. `part` is the offending
/// piece of the expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaskError {
    pub expr: String,
    pub part: String,
    pub reason: String,
}

impl fmt::Display for MaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.part.is_empty() || self.part == self.expr {
            write!(f, "bad CPU expression {:?}: {}", self.expr, self.reason)
        } else {
            write!(
                f,
                "bad CPU expression {:?} at {:?}: {}",
                self.expr, self.part, self.reason
            )
        }
    }
}

impl std::error::Error for MaskError {}

const TERM_HELP: &str = "expected all, a class name (P, E, …), nodeN, a hex mask like 0xFF, \
                         a CPU number or a range like 0-3, optionally followed by :nosmt";

impl Topology {
    /// Resolves a mask expression to ascending, de-duplicated CPU numbers.
    /// See the module documentation and docs/Placement.md for the grammar.
    pub fn resolve(&self, expr: &str) -> Result<Vec<usize>, MaskError> {
        let error = |part: &str, reason: String| MaskError {
            expr: expr.to_string(),
            part: part.to_string(),
            reason,
        };
        if expr.trim().is_empty() {
            return Err(error("", format!("empty expression; {TERM_HELP}")));
        }
        let mut result: Vec<usize> = Vec::new();
        for inter in expr.split(',') {
            let inter_trimmed = inter.trim();
            if inter_trimmed.is_empty() {
                return Err(error(inter, "empty item between commas".to_string()));
            }
            let mut acc: Option<Vec<usize>> = None;
            for unit in inter_trimmed.split('&') {
                let unit = unit.trim();
                if unit.is_empty() {
                    return Err(error(inter_trimmed, "empty operand of '&'".to_string()));
                }
                let cpus = self
                    .resolve_unit(unit)
                    .map_err(|reason| error(unit, reason))?;
                acc = Some(match acc {
                    None => cpus,
                    Some(prev) => prev
                        .into_iter()
                        .filter(|c| cpus.binary_search(c).is_ok())
                        .collect(),
                });
            }
            let cpus = acc.unwrap_or_default();
            if cpus.is_empty() {
                return Err(error(inter_trimmed, "selects no CPU".to_string()));
            }
            result.extend(cpus);
        }
        result.sort_unstable();
        result.dedup();
        Ok(result)
    }

    fn resolve_unit(&self, unit: &str) -> Result<Vec<usize>, String> {
        let (atom, modifier) = match unit.split_once(':') {
            Some((a, m)) => (a.trim(), Some(m.trim())),
            None => (unit, None),
        };
        let cpus = self.resolve_atom(atom)?;
        match modifier {
            None => Ok(cpus),
            Some(m) if m.eq_ignore_ascii_case("nosmt") => Ok(self.one_per_core(&cpus)),
            Some(m) => Err(format!(
                "unknown modifier `:{m}` (the only modifier is :nosmt)"
            )),
        }
    }

    fn resolve_atom(&self, atom: &str) -> Result<Vec<usize>, String> {
        if atom.is_empty() {
            return Err(format!("missing term; {TERM_HELP}"));
        }
        let allowed = self.allowed();
        let keep_allowed = |cpus: &[usize]| -> Vec<usize> {
            cpus.iter()
                .copied()
                .filter(|c| allowed.binary_search(c).is_ok())
                .collect()
        };
        if atom.eq_ignore_ascii_case("all") {
            if allowed.is_empty() {
                return Err("this process may use none of the online CPUs".to_string());
            }
            return Ok(allowed);
        }
        if let Some(class) = self
            .classes
            .iter()
            .find(|c| c.name.eq_ignore_ascii_case(atom))
        {
            let cpus = keep_allowed(&class.cpus);
            if cpus.is_empty() {
                return Err(format!(
                    "class {} ({}) has no CPU this process may use (allowed: {})",
                    class.name,
                    cpulist::format_compact(&class.cpus),
                    cpulist::format_compact(&allowed)
                ));
            }
            return Ok(cpus);
        }
        let lower = atom.to_ascii_lowercase();
        if let Some(number) = lower.strip_prefix("node") {
            let id: usize = number
                .parse()
                .map_err(|_| format!("`{atom}`: expected nodeN with a number N"))?;
            let node = self.nodes.iter().find(|n| n.id == id).ok_or_else(|| {
                let ids: Vec<String> = self.nodes.iter().map(|n| format!("node{}", n.id)).collect();
                format!(
                    "no NUMA node {id} on this machine (nodes: {})",
                    ids.join(", ")
                )
            })?;
            let cpus = keep_allowed(&node.cpus);
            if cpus.is_empty() {
                return Err(format!(
                    "node{id} ({}) has no CPU this process may use (allowed: {})",
                    cpulist::format_compact(&node.cpus),
                    cpulist::format_compact(&allowed)
                ));
            }
            return Ok(cpus);
        }
        let explicit = if lower.starts_with("0x") {
            cpulist::parse_hex_mask(atom)?
        } else if atom.bytes().next().is_some_and(|b| b.is_ascii_digit()) {
            let (first, last) = cpulist::parse_range(atom)?;
            (first..=last).collect()
        } else if self.classes.len() == 1 && looks_like_class(atom) {
            return Err(format!(
                "no class {atom} on this machine: it is homogeneous, its only class is P"
            ));
        } else if looks_like_class(atom) {
            let names: Vec<&str> = self.classes.iter().map(|c| c.name.as_str()).collect();
            return Err(format!(
                "no class {atom} on this machine (classes: {})",
                names.join(", ")
            ));
        } else {
            return Err(format!("unknown term `{atom}`; {TERM_HELP}"));
        };
        self.check_explicit(&explicit, &allowed)?;
        Ok(explicit)
    }

    /// Numbers, ranges and hex masks must name online, allowed CPUs.
    fn check_explicit(&self, cpus: &[usize], allowed: &[usize]) -> Result<(), String> {
        let not_online: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|c| self.cpu(*c).is_none())
            .collect();
        if !not_online.is_empty() {
            return Err(format!(
                "{} {} not online (online: {})",
                plural_cpus(&not_online),
                if not_online.len() == 1 { "is" } else { "are" },
                cpulist::format_compact(&self.online())
            ));
        }
        let not_allowed: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|c| allowed.binary_search(c).is_err())
            .collect();
        if !not_allowed.is_empty() {
            return Err(format!(
                "{} {} online but not allowed for this process by its affinity/cpuset (allowed: {})",
                plural_cpus(&not_allowed),
                if not_allowed.len() == 1 { "is" } else { "are" },
                cpulist::format_compact(allowed)
            ));
        }
        Ok(())
    }
}

fn plural_cpus(cpus: &[usize]) -> String {
    if cpus.len() == 1 {
        format!("CPU {}", cpus[0])
    } else {
        format!("CPUs {}", cpulist::format_compact(cpus))
    }
}

/// `P`, `E`, `E2`, … in any case.
fn looks_like_class(atom: &str) -> bool {
    let upper = atom.to_ascii_uppercase();
    upper == "P"
        || upper == "E"
        || upper
            .strip_prefix('E')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}
