//! The benchmark contract and the sampling-capacity counters, in the application namespace:
//!
//! * `BenchmarkValue<i>` Int32 variables `ns=1;i=1001+i` (i = 0..count, initial value i),
//!   writable, organized under Objects;
//! * `BenchmarkArray<N>` writable Int32 arrays `ns=1;i=2001+k`, element j = j % 1000;
//! * `--counters N`: N UInt64 variables `ns=1;i=1..N` (`Counter<i>`) under Objects whose value
//!   increments on every sample or read, minimum sampling interval 1 ms — one shared read
//!   closure over each node's state word ([`VariableDef::computed_with_state`]). A client
//!   checks the sampling rate from the value deltas and source timestamps, so a queue of one
//!   is enough to measure it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::{BuiltinType, DataValue, Namespace, Now, ServerBuilder, VariableDef, Variant};

/// First NodeId of the BenchmarkValue variables.
pub const BENCHMARK_VALUE_FIRST_ID: u32 = 1001;
/// First NodeId of the BenchmarkArray variables.
pub const BENCHMARK_ARRAY_FIRST_ID: u32 = 2001;
/// The counters' MinimumSamplingInterval, ms.
pub const COUNTER_MIN_SAMPLING_MS: f64 = 1.0;

/// Adds `count` BenchmarkValue variables.
pub fn add_benchmark_values(b: &mut ServerBuilder, ns: &Namespace, count: u32) {
    for i in 0..count {
        b.add_variable(
            VariableDef::new(
                ns.num(BENCHMARK_VALUE_FIRST_ID + i),
                &format!("BenchmarkValue{i}"),
                Variant::Int32(i as i32),
            )
            .writable(true),
        );
    }
}

/// Adds a BenchmarkArray variable of each size.
pub fn add_benchmark_arrays(
    b: &mut ServerBuilder,
    ns: &Namespace,
    sizes: &[u32],
) -> Result<(), crate::Error> {
    for (k, &n) in sizes.iter().enumerate() {
        let values: Vec<Variant> = (0..n).map(|j| Variant::Int32((j % 1000) as i32)).collect();
        let value = Variant::array(BuiltinType::Int32, values)
            .ok_or_else(|| crate::Error::Config(format!("benchmark array of {n}")))?;
        b.add_variable(
            VariableDef::new(
                ns.num(BENCHMARK_ARRAY_FIRST_ID + k as u32),
                &format!("BenchmarkArray{n}"),
                value,
            )
            .value_rank(1, vec![n])
            .writable(true),
        );
    }
    Ok(())
}

/// A counter: increments its node's state word on every read or sample and returns the new
/// value, source- and server-stamped `now`.
fn count(now: Now, c: &AtomicU64) -> DataValue {
    let v = c.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    DataValue {
        value: Variant::UInt64(v),
        source_timestamp: Some(now.utc),
        server_timestamp: Some(now.utc),
        ..Default::default()
    }
}

/// Adds `n` counters.
pub fn add_counters(b: &mut ServerBuilder, ns: &Namespace, n: u32) {
    let read: crate::ReadFn = Arc::new(count);
    for i in 1..=n {
        b.add_variable(
            VariableDef::computed_with_state(
                ns.num(i),
                &format!("Counter{i}"),
                BuiltinType::UInt64,
                read.clone(),
                0,
            )
            .minimum_sampling_interval_ms(COUNTER_MIN_SAMPLING_MS),
        );
    }
}
