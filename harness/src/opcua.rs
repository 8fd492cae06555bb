//! OPC UA scenarios over core's client role.

use serde_json::{Map, Value};

use crate::run::RunConfig;

pub fn run_opcua(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    Err(format!("scenario {} needs uaring-core's client role, which is not on main yet", cfg.scenario))
}

pub fn run_counters(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    run_opcua(cfg)
}
