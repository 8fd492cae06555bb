//! Scenario name → load plan.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::echo::EchoClientConn;
use crate::run::{run_with_guard, DynDriver, Plan, RunConfig, Running};

pub const SCENARIOS: &[&str] = &[
    "read",
    "read-batch",
    "write",
    "browse",
    "sub",
    "counters",
    "events",
    "connect",
    "echo",
    "push",
    "history-ingest",
    "history-read-raw",
    "history-read-processed",
    "scale-nodes",
    "scale-items",
    "scale-churn",
];

/// Runs one scenario and returns its result object.
pub fn run_scenario(cfg: &RunConfig) -> Result<Map<String, Value>, String> {
    match cfg.scenario.as_str() {
        "echo" => {
            let bytes = cfg.opts.echo_bytes;
            let plan = move |cfg: &RunConfig, _r: &Running| {
                let inflight = cfg.inflight;
                let factory = Arc::new(move |_i: usize| -> DynDriver {
                    Box::new(EchoClientConn::new(inflight, bytes))
                });
                Ok((
                    Plan::Ring {
                        conns: cfg.clients,
                        factory,
                    },
                    vec![("frame_bytes".into(), json!(bytes))],
                ))
            };
            run_with_guard(cfg, &[], &plan)
        }
        "counters" => crate::opcua::run_counters(cfg),
        "push" => crate::push::run_push(cfg),
        "scale-nodes" => crate::scale::run_scale_nodes(cfg),
        "scale-items" => crate::scale::run_scale_items(cfg),
        "scale-churn" => crate::scale::run_scale_churn(cfg),
        s if crate::history::is_history(s) => crate::history::run_history(cfg),
        s if SCENARIOS.contains(&s) => crate::opcua::run_opcua(cfg),
        other => Err(format!(
            "unknown scenario {other:?}; one of {}",
            SCENARIOS.join(", ")
        )),
    }
}
