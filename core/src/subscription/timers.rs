//! The engine's timers: sampling on absolute deadlines, the publishing cycles, the drain of
//! the change inbox, events and asynchronous samples.

use super::*;

/// How far a value cell's version advances with each store (`address_space::value`: the
/// seqlock's sequence number passes one odd value per write; a swapped value takes the
/// previous version plus the same step). Pinned for a scalar cell by core/tests/change_path.rs.
const STORE_VERSION_STEP: u64 = 2;

/// Did a store fall between the change an item last saw (`seen`, 0: none yet) and the one
/// of `version`? Then the item never had that value: its next one carries the Overflow bit.
/// A cell initialised again (a node edit) jumps its versions and counts as a gap.
#[inline]
fn skipped_store(seen: u64, version: u64) -> bool {
    seen != 0 && version > seen.saturating_add(STORE_VERSION_STEP)
}

/// Marks the value an offer just queued (the queue grew, or it was full and the offer
/// replaced an entry) with the Overflow bit; a queue of one carries none.
#[inline]
fn mark_after_gap(item: &mut MonitoredItem, len_before: usize) {
    if item.queue.len() > len_before || item.queue.len() == item.queue.capacity() {
        item.queue.mark_newest_overflow();
    }
}

/// How many sources apart the two stages of the bucket walk's reading ahead are (see
/// [`ReadAhead`]). A sample takes about as long as a miss to memory, so a few sources ahead
/// is far enough, and 2 × 4 sources' lines in flight stay well inside the first-level cache.
const AHEAD: usize = 4;

/// Buckets of fewer sources are walked without reading ahead: their sources, items and
/// nodes (about 230 bytes a source of one item, 4 MB at this many) mostly stay in the caches
/// from one tick to the next, and reading ahead adds 90 instructions a sample to the 419 of
/// the walk (callgrind, `subscription/sample` at 10,000 items).
const READ_AHEAD_MIN: usize = 16_384;

/// Reads ahead what sampling the bucket's later sources will touch, in two stages (each
/// address is known only once the line before it arrived, as in
/// `address_space::store::prefetch`): the node's record and the first item of the source
/// `2 × AHEAD` ahead, then, `AHEAD` sources later (the record arrived), the node's value
/// cell (the Variable's state word, for a computed one). Items and sources live in slot
/// tables in the order they were created, the nodes wherever the address space put them:
/// when clients subscribe in their own order the records and cells are scattered, and each
/// sample waited for its node's record, then its cell, in series. Hints only: nothing read
/// here decides anything, and a slot freed meanwhile costs a wasted line. The source slots
/// themselves are not read ahead: the bucket lists them in creation order, which the
/// hardware's own prefetcher follows.
struct ReadAhead {
    /// The node indexes of the sources between the two stages, by position in the bucket.
    nodes: [u32; 2 * AHEAD],
}

impl ReadAhead {
    #[inline(always)]
    fn step(
        &mut self,
        sources: &Slots<Source>,
        items: &Slots<MonitoredItem>,
        store: &crate::address_space::store::Store,
        list: &[u32],
        i: usize,
    ) {
        const MASK: usize = 2 * AHEAD - 1;
        if let Some(&t) = list.get(i + 2 * AHEAD) {
            if let Some(Some(src)) = sources.get(t as usize) {
                store.prefetch_record(src.node_index);
                items.prefetch(src.first as usize);
                if let Some(n) = self.nodes.get_mut((i + 2 * AHEAD) & MASK) {
                    *n = src.node_index;
                }
            }
        }
        if i + AHEAD < list.len() {
            if let Some(&n) = self.nodes.get((i + AHEAD) & MASK) {
                store.prefetch_cell(n);
            }
        }
    }
}

impl SubscriptionEngine {
    // ---- timers ----------------------------------------------------------------------

    /// The earliest monotonic time (ns) at which [`SubscriptionEngine::on_timer`] has work.
    pub fn next_deadline(&self) -> Option<u64> {
        if !self.exception_by_node.is_empty() && self.changes.due(self.shard_index as usize) {
            return Some(0);
        }
        let a = self.bucket_heap.peek().map(|Reverse((d, _, _))| *d);
        let b = self.sub_heap.peek().map(|Reverse((d, _, _))| *d);
        let c = self.demand.retry_deadline();
        [a, b, c].into_iter().flatten().min()
    }

    /// Runs every due sampling tick and publishing cycle; first delivers the events raised
    /// on any shard since the last call.
    pub fn on_timer(&mut self, shared: &crate::shared::ServerShared, now: Now) {
        self.retry_demand(now);
        self.poll_events(shared, now);
        let space = &shared.address_space;
        self.drain_changes(space, now);
        // Sampling first, so a publishing cycle due at the same instant sees the samples.
        while let Some(&Reverse((d, b, generation))) = self.bucket_heap.peek() {
            if d > now.mono_ns {
                break;
            }
            self.bucket_heap.pop();
            self.sample_bucket(space, b, generation, now);
        }
        while let Some(&Reverse((d, slot, generation))) = self.sub_heap.peek() {
            if d > now.mono_ns {
                break;
            }
            self.sub_heap.pop();
            let ok = matches!(self.subs.get(slot as usize), Some(Some(s)) if s.timer_generation == generation);
            if ok {
                self.publishing_cycle(slot, now);
            }
        }
        if self.sub_heap.len() > 2 * self.sub_ids.len() + 64 {
            let mut fresh = BinaryHeap::with_capacity(self.sub_ids.len());
            for (i, s) in self.subs.iter().enumerate() {
                if let Some(s) = s {
                    fresh.push(Reverse((s.next_ns, i as u32, s.timer_generation)));
                }
            }
            self.sub_heap = fresh;
        }
    }

    /// Reads the events published since the last poll and queues them into every event
    /// item whose notifier and filter accept them. One atomic load when nothing is new.
    pub fn poll_events(&mut self, shared: &crate::shared::ServerShared, now: Now) {
        if self.event_items.is_empty() {
            if let Some(c) = self.event_cursor.take() {
                shared.events.bus.close(c);
            }
            return;
        }
        let bus = &shared.events.bus;
        let cursor = self.event_cursor.get_or_insert_with(|| bus.cursor());
        let items = &mut self.items;
        let subs = &mut self.subs;
        let event_items = &self.event_items;
        let space = &shared.address_space;
        let permissions = space.has_role_permissions();
        let mut seen = 0u64;
        let missed = cursor.poll(bus, |ev| {
            seen += 1;
            for &it in event_items {
                let fields = match items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => {
                        match item.event() {
                            Some(e)
                                if !permissions || receives(space, e.roles, &ev.source_node) =>
                            {
                                e.filter.notification(&e.notifier, ev)
                            }
                            _ => None,
                        }
                    }
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(items, subs, it, fields);
                }
            }
        });
        self.stats.events_seen += seen;
        self.stats.events_missed += missed;
        if missed > 0 {
            // The bus lapped this shard: every event item learns that events were lost.
            let ev = shared.events.queue_overflow_event(now.utc);
            for &it in &self.event_items {
                let fields = match self.items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => {
                        item.event().map(|e| e.filter.select(&ev))
                    }
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(&mut self.items, &mut self.subs, it, fields);
                }
            }
        }
    }

    /// ConditionRefresh / ConditionRefresh2: queues the refresh bracket and the retained
    /// conditions into the subscription's event items (or the one item).
    pub fn condition_refresh(
        &mut self,
        shared: &crate::shared::ServerShared,
        key: SessionKey,
        sub_id: u32,
        item_id: Option<u32>,
        now: Now,
    ) -> Result<(), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let targets: Vec<u32> = match item_id {
            Some(id) => {
                let it = self.item_slot(slot, id)?;
                if self
                    .items
                    .get(it as usize)
                    .and_then(Option::as_ref)
                    .is_none_or(|i| !i.is_event())
                {
                    return Err(StatusCode::BadMonitoredItemIdInvalid);
                }
                vec![it]
            }
            None => self
                .subs
                .get(slot as usize)
                .and_then(Option::as_ref)
                .map(|s| {
                    s.items
                        .iter()
                        .copied()
                        .filter(|&it| {
                            self.items
                                .get(it as usize)
                                .and_then(Option::as_ref)
                                .is_some_and(|i| i.is_event())
                        })
                        .collect()
                })
                .unwrap_or_default(),
        };
        let events = shared.events.condition_refresh(now.utc);
        let space = &shared.address_space;
        let permissions = space.has_role_permissions();
        for &it in &targets {
            for ev in &events {
                let fields = match self.items.get(it as usize) {
                    Some(Some(item)) if item.mode != MonitoringMode::Disabled => item
                        .event()
                        .filter(|e| !permissions || receives(space, e.roles, &ev.source_node))
                        .and_then(|e| e.filter.refresh_notification(&e.notifier, ev)),
                    _ => None,
                };
                if let Some(fields) = fields {
                    queue_event(&mut self.items, &mut self.subs, it, fields);
                }
            }
        }
        Ok(())
    }

    pub(super) fn sample_bucket(
        &mut self,
        space: &AddressSpace,
        b: u32,
        generation: u32,
        now: Now,
    ) {
        let Some(Some(bucket)) = self.buckets.get_mut(b as usize) else {
            return;
        };
        if bucket.generation != generation {
            return;
        }
        let sources = std::mem::take(&mut bucket.sources);
        let interval = bucket.interval_ns.max(1);
        // Absolute deadlines: the next tick is one interval after the one due, not after now.
        let mut next = bucket.next_ns.saturating_add(interval);
        if next <= now.mono_ns {
            let behind = (now.mono_ns - next) / interval + 1;
            self.stats.missed_ticks += behind;
            next = next.saturating_add(behind.saturating_mul(interval));
        }
        bucket.next_ns = next;
        self.bucket_heap.push(Reverse((next, b, generation)));
        let shard = self.shard_index as usize;
        let any_async = space.has_async();
        // Read ahead in big buckets (see `ReadAhead`); the first stage's first sources.
        let mut ahead = (sources.len() >= READ_AHEAD_MIN).then_some(ReadAhead {
            nodes: [NONE; 2 * AHEAD],
        });
        if let Some(a) = ahead.as_mut() {
            for (j, &t) in sources.iter().enumerate().take(2 * AHEAD) {
                if let Some(Some(src)) = self.sources.get(t as usize) {
                    space.store.prefetch_record(src.node_index);
                    self.items.prefetch(src.first as usize);
                    if let Some(n) = a.nodes.get_mut(j) {
                        *n = src.node_index;
                    }
                }
            }
        }
        for (i, &s) in sources.iter().enumerate() {
            if let Some(a) = ahead.as_mut() {
                a.step(&self.sources, &self.items, &space.store, &sources, i);
            }
            let Some(Some(src)) = self.sources.get_mut(s as usize) else {
                continue;
            };
            if any_async && u32::from(src.attribute) == attr::Value {
                if let Some(a) = space.async_source(src.node_index).filter(|_| {
                    space
                        .node_at_generation(src.node_index, src.node_generation)
                        .is_some()
                }) {
                    // Asked now, offered when the application answers (on_sample_done). One
                    // sample at a time per source; one given up after its timeout.
                    if let Some(&(_, until)) = self.pending_samples.get(&s) {
                        if until > now.mono_ns {
                            self.stats.missed_ticks += 1;
                            continue;
                        }
                        self.pending_samples.remove(&s);
                        self.async_samples_out = self.async_samples_out.saturating_sub(1);
                    }
                    if self.async_samples_out >= self.async_samples_max || !a.try_acquire() {
                        self.stats.missed_ticks += 1;
                        continue;
                    }
                    self.sample_token = self.sample_token.wrapping_add(1);
                    let token = self.sample_token;
                    self.pending_samples
                        .insert(s, (token, now.deadline_after_ms(a.timeout_ms() as f64)));
                    self.async_samples_out += 1;
                    self.changes
                        .open_completions(shard, 2 * self.async_samples_max);
                    let reply = crate::address_space::app::Reply::new(
                        self.changes.clone(),
                        shard,
                        crate::address_space::app::Target::Sample {
                            source: s,
                            generation: token,
                        },
                        Some(a.clone()),
                    );
                    let node_id = space
                        .node_at(src.node_index)
                        .map(|n| n.node_id())
                        .unwrap_or_default();
                    (a.read)(crate::address_space::app::AsyncRead::new(node_id, reply));
                    continue;
                }
            }
            let sample = sample_value(
                space,
                (src.node_index, src.node_generation),
                u32::from(src.attribute),
                now,
            );
            self.stats.samples += 1;
            // Compared once against the compact last sample (the new one's fixed-size parts
            // worked out once, for this and for storing it); every item's filter reads the
            // difference.
            let fresh = Fresh::of(&sample);
            let diff = src.last.as_ref().map(|l| l.diff_fresh(&fresh, &sample));
            // Nothing changed since the previous sample: no item can report (each item's
            // last value is this one, or it was not reported for the same difference).
            if !src.force && diff.is_some_and(Diff::same) {
                continue;
            }
            src.force = false;
            let origin = Origin::Source(src.last.as_ref().zip(diff));
            let mut at = src.first;
            // One look-up of each item (its link to the next is read there too).
            while let Some(Some(item)) = self.items.get_mut(at as usize) {
                let next = item.next();
                if offer_to(
                    item,
                    &mut self.subs,
                    &mut self.stats,
                    at,
                    &sample,
                    origin,
                    now,
                ) {
                    fire_links(&mut self.items, &mut self.subs, at);
                }
                at = next;
            }
            advance_source(src, s, &mut self.run_starts, sample, fresh, diff);
        }
        // Aggregate items end their processing intervals on their source's ticks, changed
        // sample or not.
        if self.aggregate_items > 0 {
            let mut scratch = Vec::new();
            for &s in &sources {
                let Some(Some(src)) = self.sources.get(s as usize) else {
                    continue;
                };
                if !src.aggregates {
                    continue;
                }
                let mut at = src.first;
                while let Some(Some(item)) = self.items.get(at as usize) {
                    let next = item.next();
                    close_aggregate_intervals(
                        &mut self.items,
                        &mut self.subs,
                        &mut self.stats,
                        at,
                        now,
                        &mut scratch,
                    );
                    at = next;
                }
            }
        }
        if let Some(Some(bucket)) = self.buckets.get_mut(b as usize) {
            bucket.sources = sources;
        }
    }

    /// Moves the changes waiting in this shard's inbox into the queues of the
    /// exception-based items that watch their nodes (at most one inbox's worth per call, so
    /// a writer that never stops cannot keep the shard here). When changes were lost to a
    /// full inbox, the exception-based items of the nodes that lost them are brought to their
    /// cells' current values. A value reaches an item with the Overflow bit when the item
    /// missed a store before it ([`skipped_store`]): a change lost to the inbox whose value
    /// the resynchronisation still delivers (the only store of its node since the item's
    /// last value) was not lost for the item, and carries no Overflow bit.
    pub fn drain_changes(&mut self, space: &AddressSpace, now: Now) {
        while let Some(it) = self.resync_pending.pop() {
            self.resync_exception_item(space, it, false, now);
        }
        let shard = self.shard_index as usize;
        let SubscriptionEngine {
            changes,
            exception_by_node,
            items,
            subs,
            stats,
            ..
        } = self;
        if exception_by_node.is_empty() && changes.pending(shard) == 0 {
            return;
        }
        let max = changes.capacity(shard);
        let lost = changes.drain(shard, max, |c| {
            let mut at = exception_by_node.first(c.node_index);
            let mut sample: Option<DataValue> = None;
            while let Some(it) = at {
                at = exception_by_node.next(it);
                let Some(Some(item)) = items.get_mut(it as usize) else {
                    continue;
                };
                if c.version <= item.version()
                    || item.mode == MonitoringMode::Disabled
                    || item.own_node().map(|n| n.1) != Some(c.generation)
                {
                    continue;
                }
                // A store between the item's last change and this one never reached it
                // (lost to a full inbox and overtaken by this later one, or a writer that
                // raced this one and lost).
                let skipped = skipped_store(item.version(), c.version);
                let before = item.queue.len();
                let dv = sample.get_or_insert_with(|| {
                    let mut dv = c.value.data_value().clone();
                    if dv.server_timestamp.is_none() {
                        dv.server_timestamp = Some(now.utc);
                    }
                    dv
                });
                stats.changes += 1;
                offer(items, subs, stats, it, dv, Origin::Elsewhere, now);
                // Offered, the item has a last value of its own: the version goes there.
                if let Some(Some(item)) = items.get_mut(it as usize) {
                    item.set_version(c.version);
                    if skipped {
                        mark_after_gap(item, before);
                    }
                }
            }
        });
        if lost > 0 {
            stats.changes_lost += lost;
            // Only the items of the nodes whose changes were lost.
            let mut nodes = std::mem::take(&mut self.lost_scratch);
            self.changes.take_lost_nodes(shard, |n| nodes.push(n));
            let mut items = Vec::new();
            for &n in &nodes {
                self.exception_by_node.collect(n, &mut items);
            }
            for &it in &items {
                self.resync_exception_item(space, it, true, now);
            }
            nodes.clear();
            self.lost_scratch = nodes;
        }
    }

    /// Brings an exception-based item to its cell's current value (when newer than what it
    /// saw); with `overflow` (changes of the node were lost to a full inbox) that value is
    /// marked with the Overflow bit when the item missed a store before it.
    pub(super) fn resync_exception_item(
        &mut self,
        space: &AddressSpace,
        it: u32,
        overflow: bool,
        now: Now,
    ) {
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        let Some(cell) = item
            .own_node()
            .and_then(|(index, generation)| space.node_at_generation(index, generation))
            .and_then(|n| n.value_cell())
        else {
            return;
        };
        let (mut dv, version) = cell.load_versioned();
        if item.last.is_some() && version <= item.version() {
            return;
        }
        let skipped = overflow && skipped_store(item.version(), version);
        if dv.server_timestamp.is_none() {
            dv.server_timestamp = Some(now.utc);
        }
        let before = item.queue.len();
        offer(
            &mut self.items,
            &mut self.subs,
            &mut self.stats,
            it,
            &dv,
            Origin::Elsewhere,
            now,
        );
        if let Some(Some(item)) = self.items.get_mut(it as usize) {
            item.set_version(version);
            if skipped {
                mark_after_gap(item, before);
            }
        }
    }

    /// The node at `index` (of generation `generation`) was removed from the address space:
    /// its exception-based items report BadNodeIdUnknown (a status change) and stop
    /// watching it. Sampled items on it read BadNodeIdUnknown at their next sample (their
    /// source keeps the node's generation); event items on it receive nothing more.
    pub fn node_removed(&mut self, index: u32, generation: u32, now: Now) {
        self.demand_forget(index, generation);
        let mut on = Vec::new();
        self.exception_by_node.collect(index, &mut on);
        let gone = DataValue {
            status: Some(StatusCode::BadNodeIdUnknown),
            server_timestamp: Some(now.utc),
            ..Default::default()
        };
        for it in on {
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            if item.own_node().map(|n| n.1) != Some(generation) {
                continue;
            }
            // No longer fed by the change path (and not again when re-enabled).
            item.sampling = Sampling::Once;
            let enabled = item.mode != MonitoringMode::Disabled;
            if self.exception_by_node.remove(index, it) {
                self.changes.unwatch(self.shard_index as usize, index);
            }
            if enabled {
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &gone,
                    Origin::Elsewhere,
                    now,
                );
            }
        }
    }

    pub(super) fn publishing_cycle(&mut self, slot: u32, now: Now) {
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let interval = sub.interval_ns.max(1);
        let mut next = sub.next_ns.saturating_add(interval);
        if next <= now.mono_ns {
            next = now
                .mono_ns
                .saturating_add(interval - (now.mono_ns - next) % interval);
        }
        sub.next_ns = next;
        self.sub_heap
            .push(Reverse((next, slot, sub.timer_generation)));

        let has_request = match sub.session {
            Some(k) => self.sessions.get(&k).is_some_and(|s| !s.publish.is_empty()),
            None => false,
        };
        if has_request {
            sub.lifetime_counter = 0;
        } else {
            sub.lifetime_counter += 1;
            if sub.lifetime_counter >= sub.lifetime_count {
                self.expire(slot, now);
                return;
            }
        }
        if sub.late {
            return; // still waiting for a Publish request
        }
        let wants = if sub.has_notifications() {
            true
        } else {
            sub.keep_alive_counter += 1;
            !sub.message_sent || sub.keep_alive_counter >= sub.keep_alive_count
        };
        if !wants {
            return;
        }
        let key = sub.session;
        match key.and_then(|k| self.pop_publish(k, now)) {
            Some(pp) => self.send_from(slot, pp, now),
            None => {
                if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
                    s.late = true;
                    s.diag.late = s.diag.late.wrapping_add(1);
                }
            }
        }
    }

    /// The subscription's lifetime passed without Publish requests: it is deleted and its
    /// session gets a StatusChangeNotification BadTimeout with its next Publish.
    pub(super) fn expire(&mut self, slot: u32, now: Now) {
        self.stats.expired += 1;
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        let (id, seq, key) = (sub.id, sub.take_seq(), sub.session);
        self.delete_subscription_slot(slot);
        if let Some(k) = key {
            if let Some(ss) = self.sessions.get_mut(&k) {
                ss.status_messages
                    .push_back((id, seq, StatusCode::BadTimeout));
            }
            self.service_session(k, now);
        }
    }
}
