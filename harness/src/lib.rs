//! uaring-harness: the native load client, scenarios, measurement, sweeps
//! and tables behind the `uaring-bench` binary.

pub mod args;
pub mod blocking;
pub mod cli;
pub mod echo;
pub mod history;
pub mod idle;
pub mod opcua;
pub mod options;
pub mod placements;
pub mod priority;
pub mod procstat;
pub mod profile;
pub mod push;
pub mod report;
pub mod rsa_bound;
pub mod run;
pub mod scale;
pub mod scenarios;
pub mod security;
pub mod server;
pub mod shards_loop;
pub mod soak;
pub mod summarize;
pub mod sweep;
pub mod tcpinfo;
pub mod uring;
