//! CPU topology, masks and pinning for uaring.
//!
//! * [`Topology`] reads sysfs (`/sys` or a test tree): online CPUs, SMT
//!   siblings, packages, NUMA nodes, caches, and core classes `P`, `E`, `E2`,
//!   … (fastest first).
//! * [`Topology::resolve`] turns a mask expression (`all`, `P:nosmt`,
//!   `0xFF`, `0-3,8`, `node1`, …) into CPU numbers; docs/Placement.md has the
//!   grammar.
//! * [`pin_current_thread`], [`pin_pid`], [`pin_process_all_threads`] and
//!   [`allowed_cpus`] wrap the affinity system calls with masks of any size.
//! * [`topology_report`] is the `uaring topology` subcommand (its command line is parsed by the
//!   `uaring` binary).
//! * [`fixture`] builds sysfs trees of other machines for tests.

mod cli;
pub mod cpulist;
pub mod fixture;
mod mask;
mod pin;
mod render;
mod topology;

pub use cli::{topology_command, topology_report, TopologyOutput, TopologyRequest};
pub use mask::MaskError;
pub use pin::{
    allowed_cpus, allowed_cpus_of, confine_process_threads, pin_current_thread, pin_pid,
    pin_process_all_threads, CpuMask,
};
pub use topology::{
    class_name, Cache, ClassSource, CoreClass, CpuInfo, Node, Topology, TopologyError,
};
