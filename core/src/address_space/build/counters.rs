//! The sampling-capacity contract (`uaring serve --counters N`): N UInt64 variables
//! `ns=1;i=1..N`, BrowseName `Counter<i>`, organized under Objects, whose value increments
//! on every sample or read (a [`crate::address_space::ValueSource::Computed`] value: one shared closure over each
//! node's state word, as an application's per-node computed values can be). Minimum sampling
//! interval 1 ms. A client checks the sampling rate from the value deltas and source
//! timestamps, so a queue of one is enough to measure it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ns1::make_variable;
use super::AddressSpaceBuilder;
use crate::address_space::app::{Computed, ReadFn};
use crate::address_space::{ids, ValueSource};
use crate::types::{BuiltinType, DataValue, NodeId, QualifiedName, Variant};
use crate::Now;

/// The counters' AccessLevel: CurrentRead only.
const READ_ONLY: u8 = 0x01;
/// Their MinimumSamplingInterval, ms.
pub const COUNTER_MIN_SAMPLING_MS: f64 = 1.0;

/// A counter: increments its node's state word on every read or sample and returns the new
/// value, source- and server-stamped `now`. One closure serves every counter.
fn counter(read: &ReadFn) -> ValueSource {
    ValueSource::Computed(Computed::with_state(read.clone(), 0))
}

fn count(now: Now, c: &AtomicU64) -> DataValue {
    let v = c.fetch_add(1, Ordering::Relaxed).wrapping_add(1);
    DataValue {
        value: Variant::UInt64(v),
        source_timestamp: Some(now.utc),
        server_timestamp: Some(now.utc),
        ..Default::default()
    }
}

/// Adds `n` counters (none when `n == 0`).
pub fn add_counters(b: &mut AddressSpaceBuilder, n: u32) -> Result<(), String> {
    if n == 0 {
        return Ok(());
    }
    b.reserve(n as usize);
    let read: ReadFn = Arc::new(count);
    let objects = NodeId::ns0(ids::OBJECTS_FOLDER);
    for i in 1..=n {
        b.add(make_variable(
            NodeId::numeric(1, i),
            QualifiedName::new(1, &format!("Counter{i}")),
            NodeId::ns0(BuiltinType::UInt64 as u32),
            -1,
            Vec::new(),
            counter(&read),
            READ_ONLY,
            COUNTER_MIN_SAMPLING_MS,
            Some((objects.clone(), ids::ORGANIZES)),
        ))?;
    }
    Ok(())
}
