//! The demand signal of one shard: for every node marked with
//! [`crate::address_space::ChangeHub::track_demand`], which of this shard's data items are
//! on it, and what they ask for together ([`Demand`]), handed to the hub's
//! [`crate::address_space::change::DemandSink`] whenever it changes.
//!
//! Only marked nodes cost anything: an item's start and stop look at one bit of the hub, and
//! for a marked node update a short list of its items here (items of this shard on that node:
//! one entry each). The sink is told the shard's whole demand on the node, so when it cannot
//! take it (a full queue) the node waits in `retry` and its newest demand is offered again
//! at the next timer pass; nothing is lost and the shard never waits.

use super::*;
use crate::address_space::change::Demand;

/// One item's part of its node's demand.
#[derive(Clone, Copy, Debug)]
struct Want {
    item: u32,
    sampling_ms: f64,
    queue_size: u32,
}

/// The marked nodes this shard has data items on.
#[derive(Debug, Default)]
pub(super) struct DemandTable {
    /// (node index, generation) → the items on it.
    nodes: HashMap<(u32, u32), Vec<Want>>,
    /// Nodes whose demand the sink did not take; offered again at the next timer pass.
    retry: Vec<(u32, u32)>,
    /// The newest time the engine was given, ns, and when to offer `retry` again.
    now_ns: u64,
    retry_at_ns: u64,
}

/// How long a node the sink did not take waits before it is offered again, ns.
const RETRY_NS: u64 = 10_000_000;

impl DemandTable {
    /// When nodes the sink did not take are to be offered again.
    pub(super) fn retry_deadline(&self) -> Option<u64> {
        (!self.retry.is_empty()).then_some(self.retry_at_ns)
    }

    fn demand(&self, node: (u32, u32)) -> Demand {
        let Some(list) = self.nodes.get(&node) else {
            return Demand::default();
        };
        Demand {
            items: list.len() as u32,
            sampling_ms: list
                .iter()
                .map(|w| w.sampling_ms)
                .fold(f64::INFINITY, f64::min)
                .max(0.0),
            queue_size: list.iter().map(|w| w.queue_size).max().unwrap_or(0),
        }
    }
}

impl SubscriptionEngine {
    /// Item slot `it` started sampling: when its node is marked, it joins the node's demand.
    pub(super) fn demand_start(&mut self, it: u32, now: Now) {
        self.demand.now_ns = self.demand.now_ns.max(now.mono_ns);
        let Some(Some(item)) = self.items.get(it as usize) else {
            return;
        };
        let node = item_node(&self.items, &self.sources, it);
        if u32::from(item.attribute) != attr::Value
            || !matches!(item.sampling, Sampling::Timed | Sampling::Exception)
            || !self.changes.demand_tracked(node.0)
        {
            return;
        }
        let want = Want {
            item: it,
            sampling_ms: item.sampling_ms,
            queue_size: item.queue.capacity() as u32,
        };
        let list = self.demand.nodes.entry(node).or_default();
        match list.iter_mut().find(|w| w.item == it) {
            Some(w) => *w = want,
            None => list.push(want),
        }
        self.offer_demand(node);
    }

    /// Item slot `it` stopped sampling (deleted, disabled, modified, moved away): it leaves
    /// its node's demand.
    pub(super) fn demand_stop(&mut self, it: u32) {
        let node = item_node(&self.items, &self.sources, it);
        let Some(list) = self.demand.nodes.get_mut(&node) else {
            return;
        };
        let before = list.len();
        list.retain(|w| w.item != it);
        if list.len() == before {
            return;
        }
        self.offer_demand(node);
        if self.demand.nodes.get(&node).is_some_and(|l| l.is_empty()) {
            self.demand.nodes.remove(&node);
        }
    }

    /// The node was removed from the address space: its demand here is gone (the sink's
    /// owner removed it and expects nothing more of it).
    pub(super) fn demand_forget(&mut self, index: u32, generation: u32) {
        self.demand.nodes.remove(&(index, generation));
        self.demand.retry.retain(|&n| n != (index, generation));
    }

    fn offer_demand(&mut self, node: (u32, u32)) {
        if self.demand.retry.contains(&node) {
            return; // offered with its newest state at the next pass
        }
        let d = self.demand.demand(node);
        let taken = match self.changes.demand_sink() {
            Some(sink) => sink.demand(self.shard_index as usize, node.0, node.1, d),
            None => true,
        };
        if !taken {
            if self.demand.retry.is_empty() {
                self.demand.retry_at_ns = self.demand.now_ns.saturating_add(RETRY_NS);
            }
            self.demand.retry.push(node);
        }
    }

    /// Offers the demand of the nodes the sink did not take again (each with its state now);
    /// those it still does not take wait for the next pass.
    pub(super) fn retry_demand(&mut self, now: Now) {
        self.demand.now_ns = self.demand.now_ns.max(now.mono_ns);
        if self.demand.retry.is_empty() || now.mono_ns < self.demand.retry_at_ns {
            return;
        }
        let Some(sink) = self.changes.demand_sink().cloned() else {
            self.demand.retry.clear();
            return;
        };
        let shard = self.shard_index as usize;
        let pending = std::mem::take(&mut self.demand.retry);
        for node in pending {
            let d = self.demand.demand(node);
            if !sink.demand(shard, node.0, node.1, d) {
                self.demand.retry.push(node);
            }
        }
        self.demand.retry_at_ns = now.mono_ns.saturating_add(RETRY_NS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_s_demand_is_the_fastest_interval_and_the_deepest_queue() {
        let mut t = DemandTable::default();
        assert_eq!(t.demand((1, 0)), Demand::default());
        t.nodes.insert(
            (1, 0),
            vec![
                Want {
                    item: 0,
                    sampling_ms: 250.0,
                    queue_size: 1,
                },
                Want {
                    item: 1,
                    sampling_ms: 100.0,
                    queue_size: 10,
                },
                Want {
                    item: 2,
                    sampling_ms: 500.0,
                    queue_size: 4,
                },
            ],
        );
        assert_eq!(
            t.demand((1, 0)),
            Demand {
                items: 3,
                sampling_ms: 100.0,
                queue_size: 10
            }
        );
    }
}
