//! The monitored item services: CreateMonitoredItems, ModifyMonitoredItems,
//! SetMonitoringMode, SetTriggering, DeleteMonitoredItems, and the sources and buckets items
//! sample from.

use super::*;

impl SubscriptionEngine {
    // ---- monitored item services ------------------------------------------------------

    /// CreateMonitoredItems: the subscription check and one result per item. The caller
    /// checked the operation count. `Err` is the service result.
    pub fn create_monitored_items(
        &mut self,
        shared: &crate::shared::ServerShared,
        key: SessionKey,
        roles: crate::roles::Roles,
        sub_id: u32,
        timestamps: TimestampsToReturn,
        items: &[MonitoredItemCreateRequest],
        now: Now,
    ) -> Result<Vec<MonitoredItemCreateResult>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let ts =
            Timestamps::from_i32(timestamps.0).ok_or(StatusCode::BadTimestampsToReturnInvalid)?;
        let space = &shared.address_space;
        let event_limits = crate::events::filter::FilterLimits::from_config(&shared.config.events);
        let mut results = Vec::with_capacity(items.len());
        for r in items {
            if r.item_to_monitor.attribute_id == attr::EventNotifier && self.event_cursor.is_none()
            {
                // Events published from now on reach this shard's event items.
                self.event_cursor = Some(shared.events.bus.cursor());
            }
            results.push(
                match self.create_item(space, roles, event_limits, slot, ts, r, now) {
                    Ok(res) => res,
                    Err(status) => MonitoredItemCreateResult {
                        status_code: status,
                        ..Default::default()
                    },
                },
            );
        }
        Ok(results)
    }

    pub(super) fn create_item(
        &mut self,
        space: &AddressSpace,
        roles: crate::roles::Roles,
        event_limits: crate::events::filter::FilterLimits,
        slot: u32,
        ts: Timestamps,
        r: &MonitoredItemCreateRequest,
        now: Now,
    ) -> Result<MonitoredItemCreateResult, StatusCode> {
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        if self.ids.live() >= self.limits.max_monitored_items_per_shard as usize
            || sub.items.len() >= self.limits.max_monitored_items_per_subscription as usize
        {
            return Err(StatusCode::BadTooManyMonitoredItems);
        }
        let sub_interval = sub.interval_ms;
        let rv = &r.item_to_monitor;
        let node_index = space
            .node_index(&rv.node_id)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let node = space
            .node_at(node_index)
            .ok_or(StatusCode::BadNodeIdUnknown)?;
        let node_generation = node.generation();
        if space.has_role_permissions_in(node.id().namespace()) {
            // What a Read of the attribute would need; events need ReceiveEvents.
            let needed = match rv.attribute_id {
                attr::EventNotifier => crate::generated::types::PermissionType::ReceiveEvents,
                a => crate::address_space::attributes::read_permission(a),
            };
            if !space.permissions(node_index, roles).contains(needed) {
                return Err(StatusCode::BadUserAccessDenied);
            }
        }
        let mode = r.monitoring_mode;
        if !(0..=2).contains(&mode.0) {
            return Err(StatusCode::BadMonitoringModeInvalid);
        }
        if rv.attribute_id == attr::EventNotifier {
            return self.create_event_item(
                space,
                roles,
                slot,
                ts,
                r,
                (node_index, node_generation),
                event_limits,
            );
        }
        // The attribute must be readable now (same checks as Read).
        let initial = read_attribute(
            space,
            &rv.node_id,
            rv.attribute_id,
            rv.index_range.as_str(),
            &rv.data_encoding,
            Timestamps::Both,
            now,
        );
        if let Some(s) = initial.status {
            if s.is_bad()
                && matches!(
                    s,
                    StatusCode::BadAttributeIdInvalid
                        | StatusCode::BadIndexRangeInvalid
                        | StatusCode::BadNotReadable
                        | StatusCode::BadUserAccessDenied
                        | StatusCode::BadDataEncodingInvalid
                        | StatusCode::BadDataEncodingUnsupported
                )
            {
                return Err(s);
            }
        }
        // Attribute ids are 1..=27: Read refused any other above.
        let attribute =
            u8::try_from(rv.attribute_id).map_err(|_| StatusCode::BadAttributeIdInvalid)?;
        let range = NumericRange::parse(rv.index_range.as_str())
            .map_err(|_| StatusCode::BadIndexRangeInvalid)?;
        let params = &r.requested_parameters;
        let filter = data_change_settings(space, node, rv.attribute_id, &params.filter, &initial)?;
        let (sampling, sampling_ms, filter, spec) = self.revise_filter(
            node,
            rv.attribute_id,
            params.sampling_interval,
            sub_interval,
            filter,
            stepped_variable(space, node, &initial),
        )?;
        if spec.is_some() {
            aggregate_timestamps(ts)?;
        }
        let aggregate = spec.map(|spec| Box::new(aggregate::AggregateState::new(spec, now.utc)));
        let filter_result = aggregate.as_ref().map_or_else(ExtensionObject::null, |a| {
            ExtensionObject::from_struct(&a.spec.result(a.interval_start()))
        });
        let queue_size = self.limits.revise_queue_size(params.queue_size);
        let (it, id) = self
            .ids
            .create(slot)
            .ok_or(StatusCode::BadTooManyMonitoredItems)?;
        let mut item = MonitoredItem::new(
            id,
            slot,
            params.client_handle,
            (node_index, node_generation),
            attribute,
            ts,
            mode,
            sampling,
            sampling_ms,
            ItemQueue::new(queue_size, params.discard_oldest),
        );
        item.set_filter(filter);
        if range.is_some() {
            item.cold_mut().range = range;
        }
        item.set_aggregate(aggregate);
        self.insert_item(slot, it, item);
        if mode != MonitoringMode::Disabled {
            self.start_sampling(it, now);
            // The first sample is taken at once: its value is the initial notification. An
            // exception-based item reads its cell again now that it watches it, with the
            // version, so no change can slip between the two or come twice.
            if sampling == Sampling::Exception && self.resync_pending.last() == Some(&it) {
                self.resync_pending.pop();
                self.resync_exception_item(space, it, false, now);
            } else {
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &initial_sample(initial, now),
                    Origin::Elsewhere,
                    now,
                );
                self.settle_last(it);
            }
        }
        Ok(MonitoredItemCreateResult {
            status_code: StatusCode::Good,
            monitored_item_id: id,
            revised_sampling_interval: sampling_ms,
            revised_queue_size: queue_size,
            filter_result,
        })
    }

    /// An event monitored item: the node must be an event notifier (EventNotifier
    /// SubscribeToEvents), the filter an EventFilter; the filter result goes back to the
    /// client (per-clause statuses).
    pub(super) fn create_event_item(
        &mut self,
        space: &AddressSpace,
        roles: crate::roles::Roles,
        slot: u32,
        ts: Timestamps,
        r: &MonitoredItemCreateRequest,
        (node_index, node_generation): (u32, u32),
        event_limits: crate::events::filter::FilterLimits,
    ) -> Result<MonitoredItemCreateResult, StatusCode> {
        let rv = &r.item_to_monitor;
        if !rv.index_range.as_str().is_empty() {
            return Err(StatusCode::BadIndexRangeInvalid);
        }
        if !crate::events::is_event_notifier(space, &rv.node_id) {
            return Err(StatusCode::BadAttributeIdInvalid);
        }
        let params = &r.requested_parameters;
        let filter = decode_event_filter(&params.filter)?;
        let (compiled, filter_result) =
            match crate::events::filter::compile_with(&filter, space, event_limits) {
                Ok(x) => x,
                Err((status, result)) => {
                    return Ok(MonitoredItemCreateResult {
                        status_code: status,
                        filter_result: ExtensionObject::from_struct(&result),
                        ..Default::default()
                    })
                }
            };
        let queue_size = self.limits.revise_event_queue_size(params.queue_size);
        let (it, id) = self
            .ids
            .create(slot)
            .ok_or(StatusCode::BadTooManyMonitoredItems)?;
        let mut item = MonitoredItem::new(
            id,
            slot,
            params.client_handle,
            (node_index, node_generation),
            EVENT_NOTIFIER,
            ts,
            r.monitoring_mode,
            Sampling::Event,
            0.0,
            ItemQueue::new(queue_size, params.discard_oldest),
        );
        item.cold_mut().event = Some(EventItem {
            notifier: rv.node_id.clone(),
            filter: compiled,
            roles,
        });
        self.insert_item(slot, it, item);
        self.event_items.push(it);
        Ok(MonitoredItemCreateResult {
            status_code: StatusCode::Good,
            monitored_item_id: id,
            revised_sampling_interval: 0.0,
            revised_queue_size: queue_size,
            filter_result: filter_result_object(&filter_result),
        })
    }

    /// Stores a new item in item slot `it` (from `ids::ItemIds`) and in its
    /// subscription (slot `slot`).
    pub(super) fn insert_item(&mut self, slot: u32, it: u32, item: MonitoredItem) {
        let put = self.items.put(it, item);
        debug_assert!(put, "item slots come from the id table");
        if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
            s.items.push(it);
        }
    }

    /// Revised sampling interval (Part 4 §5.12.1.2): negative = the publishing interval; 0 =
    /// exception-based for stored (writable) values, else the fastest supported; never
    /// below the configured minimum or the node's MinimumSamplingInterval.
    pub(super) fn revise_sampling(
        &self,
        node: NodeView<'_>,
        attribute_id: u32,
        requested: f64,
        sub_interval: f64,
    ) -> (Sampling, f64) {
        let requested = if requested.is_nan() || requested < 0.0 {
            sub_interval
        } else {
            requested
        };
        if attribute_id != attr::Value {
            return (
                Sampling::Once,
                requested.min(self.limits.max_sampling_interval_ms),
            );
        }
        let (stored, node_min) = match node.as_variable() {
            Some(v) => (v.cell().is_some(), v.minimum_sampling_interval()),
            None => (false, 0.0),
        };
        if requested == 0.0 && stored {
            return (Sampling::Exception, 0.0);
        }
        let min = if node_min > 0.0 {
            node_min.max(self.limits.min_sampling_interval_ms)
        } else {
            self.limits.min_sampling_interval_ms
        };
        (
            Sampling::Timed,
            requested.clamp(min, self.limits.max_sampling_interval_ms.max(min)),
        )
    }

    /// The revised sampling of a data item and its filter. An AggregateFilter (Part 4
    /// §7.22.4) samples on a timer (a requested 0 is the fastest interval granted, not
    /// exception-based: the intervals end on the sampling ticks); its processingInterval is
    /// revised to at least twice the revised sampling interval (a non-positive or non-finite
    /// one to the publishing interval first) and at most
    /// [`aggregate::AGGREGATE_PROCESSING_INTERVAL_MS_MAX`]; the sampling interval is then
    /// raised, if needed, so that one interval holds at most
    /// [`aggregate::AGGREGATE_SAMPLES_PER_INTERVAL`] samples.
    pub(super) fn revise_filter(
        &self,
        node: NodeView<'_>,
        attribute_id: u32,
        requested_sampling: f64,
        sub_interval: f64,
        filter: ItemFilter,
        stepped: bool,
    ) -> Result<
        (
            Sampling,
            f64,
            DataChangeSettings,
            Option<aggregate::AggregateSpec>,
        ),
        StatusCode,
    > {
        let f = match filter {
            ItemFilter::DataChange(settings) => {
                let (sampling, ms) =
                    self.revise_sampling(node, attribute_id, requested_sampling, sub_interval);
                return Ok((sampling, ms, settings, None));
            }
            ItemFilter::Aggregate(f) => f,
        };
        let requested = if requested_sampling == 0.0 {
            self.limits.min_sampling_interval_ms
        } else {
            requested_sampling
        };
        let (_, mut sampling_ms) =
            self.revise_sampling(node, attribute_id, requested, sub_interval);
        let pi = f.processing_interval;
        let pi = if pi.is_finite() && pi > 0.0 {
            pi
        } else {
            sub_interval
        };
        let max = aggregate::AGGREGATE_PROCESSING_INTERVAL_MS_MAX;
        let mut pi = pi.max(2.0 * sampling_ms).min(max);
        // Whole 100-ns ticks, as the intervals are computed.
        pi = ((pi * 10_000.0).round() / 10_000.0).max(0.0001);
        let per_interval = pi / aggregate::AGGREGATE_SAMPLES_PER_INTERVAL;
        if sampling_ms < per_interval {
            sampling_ms = per_interval.min(self.limits.max_sampling_interval_ms);
            if pi / sampling_ms > aggregate::AGGREGATE_SAMPLES_PER_INTERVAL {
                pi = sampling_ms * aggregate::AGGREGATE_SAMPLES_PER_INTERVAL;
            }
        }
        let spec = aggregate::AggregateSpec::new(&f, pi, stepped)?;
        Ok((
            Sampling::Timed,
            sampling_ms,
            DataChangeSettings::default(),
            Some(spec),
        ))
    }

    /// Puts an enabled item on its sampling path.
    pub(super) fn start_sampling(&mut self, it: u32, now: Now) {
        let Some(Some(item)) = self.items.get(it as usize) else {
            return;
        };
        match (item.sampling, item.own_node()) {
            (Sampling::Timed, Some((node_index, node_generation))) => {
                let interval_ns = ((item.sampling_ms * 1e6) as u64).max(1);
                let key = (node_index, node_generation, item.attribute, interval_ns);
                let aggregate = item.aggregate().is_some();
                let src = match self.source_by_key(key) {
                    Some(s) => s,
                    None => self.new_source(key, now),
                };
                let mut next = NONE;
                if let Some(Some(s)) = self.sources.get_mut(src as usize) {
                    next = std::mem::replace(&mut s.first, it);
                    s.aggregates |= aggregate;
                    self.aggregate_items += usize::from(aggregate);
                }
                if let Some(Some(item)) = self.items.get_mut(it as usize) {
                    item.join(src, next);
                }
                self.settle_last(it);
            }
            (Sampling::Exception, Some((node, _))) => {
                if self.exception_by_node.add(node, it) {
                    let shard = self.shard_index as usize;
                    self.changes
                        .open(shard, self.limits.change_queue_per_shard as usize);
                    self.changes.watch(shard, node);
                }
                // Watching first, then reading the cell (at the next drain, or at once by
                // `create_item`): a store after that read arrives as a change, one before it
                // is in the value read (the change path's ordering).
                self.resync_pending.push(it);
            }
            // Already on its source; or not sampled.
            _ => {}
        }
        self.demand_start(it, now);
    }

    /// Takes an item off its sampling path.
    pub(super) fn stop_sampling(&mut self, it: u32) {
        self.demand_stop(it);
        // Off the source, the item keeps its last value itself, and its node.
        self.materialize_last(it);
        let node = item_node(&self.items, &self.sources, it);
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        let aggregate = item.aggregate().is_some();
        if item.on_source {
            let (src, next) = item.leave(node);
            let empty = match self.sources.get_mut(src as usize) {
                Some(Some(s)) => {
                    // Off the source's list of items.
                    if s.first == it {
                        s.first = next;
                    } else {
                        let mut at = s.first;
                        while let Some(Some(x)) = self.items.get_mut(at as usize) {
                            if x.next() == it {
                                x.set_next(next);
                                break;
                            }
                            at = x.next();
                        }
                    }
                    if aggregate {
                        self.aggregate_items = self.aggregate_items.saturating_sub(1);
                        // Any other item with an AggregateFilter left on it?
                        let mut at = s.first;
                        s.aggregates = false;
                        while let Some(Some(x)) = self.items.get(at as usize) {
                            if x.aggregate().is_some() {
                                s.aggregates = true;
                                break;
                            }
                            at = x.next();
                        }
                    }
                    s.first == NONE
                }
                _ => false,
            };
            if empty {
                self.remove_source(src);
            }
        } else if item.sampling == Sampling::Exception {
            let node = node.0;
            if self.exception_by_node.remove(node, it) {
                self.changes.unwatch(self.shard_index as usize, node);
            }
        }
    }

    pub(super) fn new_source(&mut self, key: SourceKey, now: Now) -> u32 {
        let interval_ns = key.3;
        let b = match self.bucket_map.get(&interval_ns) {
            Some(&b) => b,
            None => {
                self.bucket_generation = self.bucket_generation.wrapping_add(1);
                let generation = self.bucket_generation;
                let next_ns = now.mono_ns.saturating_add(interval_ns);
                let bucket = Bucket {
                    interval_ns,
                    next_ns,
                    sources: Vec::new(),
                    generation,
                };
                let b = slab_insert(&mut self.buckets, &mut self.bucket_free, bucket);
                self.bucket_map.insert(interval_ns, b);
                self.bucket_heap.push(Reverse((next_ns, b, generation)));
                b
            }
        };
        let pos = self
            .buckets
            .get(b as usize)
            .and_then(Option::as_ref)
            .map_or(0, |bk| bk.sources.len() as u32);
        let source = Source {
            node_index: key.0,
            node_generation: key.1,
            last: None,
            force: false,
            run_start_kept: false,
            attribute: key.2,
            aggregates: false,
            bucket: b,
            pos,
            first: NONE,
        };
        let s = self.sources.insert(&mut self.source_free, source);
        if let Some(Some(bk)) = self.buckets.get_mut(b as usize) {
            bk.sources.push(s);
        }
        self.index_source(s, key);
        s
    }

    /// After an item joined its source or was offered a first value there: a light item
    /// (see [`MonitoredItem::light`]) whose last value equals the source's last sample drops
    /// its own and is `synced`; the only item of a source not sampled yet gives the source
    /// its value. Otherwise the source fans its next sample out whatever it is, so the item
    /// compares against its own last value once and is synced from then on.
    pub(super) fn settle_last(&mut self, it: u32) {
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        if item.synced || !item.on_source || !item.light() {
            return;
        }
        let Some(Some(src)) = self.sources.get_mut(item.source() as usize) else {
            return;
        };
        match (item.last.take(), &src.last) {
            (Some(own), None) if src.first == it && item.next() == NONE => {
                // A new item's first value, queued, is now exactly the source's sample: it
                // is held there (see `Entry::Held`) rather than kept twice.
                if item.trigger == DataChangeTrigger::StatusValue
                    && !item.held
                    && matches!(item.queue.single(),
                        Some(Queued::Data(q)) if *q == item_value(item, own.sample.get()))
                {
                    item.queue.release_single();
                    item.held = true;
                }
                src.last = Some(own.sample);
                item.synced = true;
            }
            (Some(own), Some(l)) if l.diff(&own.sample.get()).same() => item.synced = true,
            (own, _) => {
                item.last = own;
                src.force = true;
            }
        }
    }

    /// A `synced` item takes a copy of its source's last sample as its own last value, and
    /// a `held` one its entry into its queue.
    pub(super) fn materialize_last(&mut self, it: u32) {
        let Some(Some(item)) = self.items.get_mut(it as usize) else {
            return;
        };
        if item.held {
            item.held = false;
            if let Some(v) = run_start(&self.sources, &self.run_starts, item.source()) {
                let v = item_value(item, v.get());
                item.queue.push(Queued::Data(v));
            }
        }
        if !item.synced {
            return;
        }
        item.synced = false;
        item.last = self
            .sources
            .get(item.source() as usize)
            .and_then(Option::as_ref)
            .and_then(|s| s.last.clone())
            .map(OwnLast::new);
    }

    /// The last value an item was offered (its own, or its source's).
    pub(super) fn last_of<'a>(
        sources: &'a Slots<Source>,
        item: &'a MonitoredItem,
    ) -> Option<&'a LastSample> {
        if item.synced {
            sources
                .get(item.source() as usize)
                .and_then(Option::as_ref)
                .and_then(|s| s.last.as_ref())
        } else {
            item.last.as_deref().map(|l| &l.sample)
        }
    }

    pub(super) fn remove_source(&mut self, s: u32) {
        let Some(src) = self.sources.get_mut(s as usize).and_then(|x| x.take()) else {
            return;
        };
        self.source_free.push(s);
        self.unindex_source(s, source_key(&src, &self.buckets));
        self.pending_samples.remove(&s);
        self.run_starts.remove(s);
        let b = src.bucket;
        let Some(entry) = self.buckets.get_mut(b as usize) else {
            return;
        };
        let Some(bk) = entry.as_mut() else { return };
        let pos = src.pos as usize;
        if bk.sources.get(pos) == Some(&s) {
            bk.sources.swap_remove(pos);
            if let Some(&moved) = bk.sources.get(pos) {
                if let Some(Some(m)) = self.sources.get_mut(moved as usize) {
                    m.pos = pos as u32;
                }
            }
        } else {
            // The bucket is mid-tick (its list is taken): it is rebuilt without `s` below.
            bk.sources.retain(|&x| x != s);
            for (i, &x) in bk.sources.iter().enumerate() {
                if let Some(Some(m)) = self.sources.get_mut(x as usize) {
                    m.pos = i as u32;
                }
            }
        }
        if bk.sources.is_empty() {
            let interval = bk.interval_ns;
            *entry = None;
            self.bucket_free.push(b);
            self.bucket_map.remove(&interval);
        }
    }

    pub(super) fn remove_item_slot(&mut self, it: u32) {
        self.stop_sampling(it);
        if let Some(i) = self.event_items.iter().position(|&x| x == it) {
            self.event_items.swap_remove(i);
        }
        if let Some(item) = self.items.get_mut(it as usize).and_then(|x| x.take()) {
            self.ids.release(it, item.id);
        }
    }

    /// The slot of subscription slot `sub_slot`'s item `id`.
    pub(super) fn item_slot(&self, sub_slot: u32, id: u32) -> Result<u32, StatusCode> {
        self.find_item(sub_slot, id)
            .ok_or(StatusCode::BadMonitoredItemIdInvalid)
    }

    /// ModifyMonitoredItems. `Err` is the service result.
    pub fn modify_monitored_items(
        &mut self,
        space: &AddressSpace,
        event_limits: crate::events::filter::FilterLimits,
        key: SessionKey,
        sub_id: u32,
        timestamps: TimestampsToReturn,
        items: &[MonitoredItemModifyRequest],
        now: Now,
    ) -> Result<Vec<MonitoredItemModifyResult>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let ts =
            Timestamps::from_i32(timestamps.0).ok_or(StatusCode::BadTimestampsToReturnInvalid)?;
        let sub_interval = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .map_or(0.0, |s| s.interval_ms);
        let mut results = Vec::with_capacity(items.len());
        for r in items {
            let res = (|| -> Result<MonitoredItemModifyResult, StatusCode> {
                let it = self.item_slot(slot, r.monitored_item_id)?;
                // The filter may change what the item compares against: its own last value.
                self.materialize_last(it);
                let item = self
                    .items
                    .get(it as usize)
                    .and_then(Option::as_ref)
                    .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
                if item.is_event() {
                    return self.modify_event_item(
                        space,
                        event_limits,
                        it,
                        ts,
                        &r.requested_parameters,
                    );
                }
                let (node_index, node_generation) = item_node(&self.items, &self.sources, it);
                let attribute_id = u32::from(item.attribute);
                let node = space
                    .node_at_generation(node_index, node_generation)
                    .ok_or(StatusCode::BadNodeIdUnknown)?;
                let current = DataValue {
                    value: item
                        .last
                        .as_ref()
                        .map(|l| l.sample.value())
                        .unwrap_or_default(),
                    ..Default::default()
                };
                let p = &r.requested_parameters;
                let filter = data_change_settings(space, node, attribute_id, &p.filter, &current)?;
                let (sampling, sampling_ms, filter, spec) = self.revise_filter(
                    node,
                    attribute_id,
                    p.sampling_interval,
                    sub_interval,
                    filter,
                    stepped_variable(space, node, &current),
                )?;
                if spec.is_some() {
                    aggregate_timestamps(ts)?;
                }
                let queue_size = self.limits.revise_queue_size(p.queue_size);
                // A source counts its aggregate items: gaining or losing the AggregateFilter
                // moves the item off and back onto its source.
                let resample = sampling_ms != item.sampling_ms
                    || sampling != item.sampling
                    || spec.is_some() != item.aggregate().is_some();
                if resample {
                    self.stop_sampling(it);
                }
                let item = self
                    .items
                    .get_mut(it as usize)
                    .and_then(Option::as_mut)
                    .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
                item.client_handle = p.client_handle;
                item.set_filter(filter);
                item.timestamps = ts;
                item.queue.resize(queue_size, p.discard_oldest);
                item.sampling = sampling;
                item.sampling_ms = sampling_ms;
                // The same AggregateFilter keeps its interval; another aggregate, interval,
                // start or configuration starts again from the revised start.
                match spec {
                    None => item.set_aggregate(None),
                    Some(spec) => {
                        if item.aggregate().is_none_or(|a| a.spec != spec) {
                            let mut a = aggregate::AggregateState::new(spec, now.utc);
                            if let Some(last) = &item.last {
                                // The current value: the bound before the first interval.
                                a.offer(&last.sample.get(), now.utc);
                            }
                            item.set_aggregate(Some(Box::new(a)));
                        }
                    }
                }
                let filter_result = item.aggregate().map_or_else(ExtensionObject::null, |a| {
                    ExtensionObject::from_struct(&a.spec.result(a.interval_start()))
                });
                let enabled = item.mode != MonitoringMode::Disabled;
                let src = item.source();
                if resample && enabled {
                    self.start_sampling(it, now);
                } else if let Some(Some(source)) = self.sources.get_mut(src as usize) {
                    // The new filter judges the next sample even if the value did not change
                    // (against the item's own last value; a light item is synced again there).
                    source.force = true;
                }
                Ok(MonitoredItemModifyResult {
                    status_code: StatusCode::Good,
                    revised_sampling_interval: sampling_ms,
                    revised_queue_size: queue_size,
                    filter_result,
                })
            })();
            results.push(res.unwrap_or_else(|s| MonitoredItemModifyResult {
                status_code: s,
                ..Default::default()
            }));
        }
        Ok(results)
    }

    pub(super) fn modify_event_item(
        &mut self,
        space: &AddressSpace,
        event_limits: crate::events::filter::FilterLimits,
        it: u32,
        ts: Timestamps,
        p: &crate::generated::types::MonitoringParameters,
    ) -> Result<MonitoredItemModifyResult, StatusCode> {
        let filter = decode_event_filter(&p.filter)?;
        let (compiled, result) =
            match crate::events::filter::compile_with(&filter, space, event_limits) {
                Ok(x) => x,
                Err((status, result)) => {
                    return Ok(MonitoredItemModifyResult {
                        status_code: status,
                        filter_result: ExtensionObject::from_struct(&result),
                        ..Default::default()
                    })
                }
            };
        let queue_size = self.limits.revise_event_queue_size(p.queue_size);
        let item = self
            .items
            .get_mut(it as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadMonitoredItemIdInvalid)?;
        item.client_handle = p.client_handle;
        item.timestamps = ts;
        item.queue.resize(queue_size, p.discard_oldest);
        if let Some(e) = item.cold.as_mut().and_then(|c| c.event.as_mut()) {
            e.filter = compiled;
        }
        Ok(MonitoredItemModifyResult {
            status_code: StatusCode::Good,
            revised_sampling_interval: 0.0,
            revised_queue_size: queue_size,
            filter_result: filter_result_object(&result),
        })
    }

    /// DeleteMonitoredItems. `Err` is the service result.
    pub fn delete_monitored_items(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        ids: &[u32],
    ) -> Result<Vec<StatusCode>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let mut results = Vec::with_capacity(ids.len());
        // The subscription's lists are cleaned once for the whole request (not once per
        // item: deleting k of n items costs O(n + k log k), not O(n·k)); the ready list only
        // when a deleted item was on it.
        let mut removed: Vec<u32> = Vec::with_capacity(ids.len());
        let mut any_ready = false;
        for &id in ids {
            match self.item_slot(slot, id) {
                Ok(it) => {
                    any_ready |= matches!(self.items.get(it as usize), Some(Some(i)) if i.in_ready);
                    self.remove_item_slot(it);
                    removed.push(it);
                    results.push(StatusCode::Good);
                }
                Err(e) => results.push(e),
            }
        }
        if !removed.is_empty() {
            removed.sort_unstable();
            let gone = |x: &u32| removed.binary_search(x).is_ok();
            if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.items.retain(|x| !gone(x));
                if any_ready {
                    s.ready.retain(|x| !gone(x));
                }
            }
        }
        Ok(results)
    }

    /// SetMonitoringMode. `Err` is the service result.
    pub fn set_monitoring_mode(
        &mut self,
        space: &AddressSpace,
        key: SessionKey,
        sub_id: u32,
        mode: MonitoringMode,
        ids: &[u32],
        now: Now,
    ) -> Result<Vec<StatusCode>, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        if !(0..=2).contains(&mode.0) {
            return Err(StatusCode::BadMonitoringModeInvalid);
        }
        let mut results = Vec::with_capacity(ids.len());
        // Items to take off the subscription's ready list: once per request, not once per
        // item (a list of a million ready items scanned per item was a stall of seconds).
        let mut unready: Vec<u32> = Vec::new();
        for &id in ids {
            let it = match self.item_slot(slot, id) {
                Ok(it) => it,
                Err(e) => {
                    results.push(e);
                    continue;
                }
            };
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            let old = item.mode;
            item.mode = Mode::from(mode);
            if old == mode {
                results.push(StatusCode::Good);
                continue;
            }
            if let Some(a) = item.aggregate_mut() {
                if mode == MonitoringMode::Disabled || old == MonitoringMode::Disabled {
                    // No aggregation while disabled; enabled again, the intervals start again
                    // at the first boundary of the grid not before now.
                    a.restart(now.utc);
                }
            }
            if mode == MonitoringMode::Disabled {
                let was_ready = item.in_ready;
                item.clear_queue();
                item.triggered = false;
                self.stop_sampling(it);
                if was_ready {
                    unready.push(it);
                }
                if let Some(Some(item)) = self.items.get_mut(it as usize) {
                    item.in_ready = false;
                    item.last = None;
                    item.synced = false;
                }
            } else if old == MonitoringMode::Disabled && item.is_event() {
                // Event items just start receiving events again.
            } else if old == MonitoringMode::Disabled {
                self.start_sampling(it, now);
                let ni = item_node(&self.items, &self.sources, it);
                let a = self
                    .items
                    .get(it as usize)
                    .and_then(Option::as_ref)
                    .map_or(0, |i| u32::from(i.attribute));
                let s = sample_value(space, ni, a, now);
                offer(
                    &mut self.items,
                    &mut self.subs,
                    &mut self.stats,
                    it,
                    &s,
                    Origin::Elsewhere,
                    now,
                );
                self.settle_last(it);
            } else if mode == MonitoringMode::Reporting {
                // Sampling → Reporting: what was queued meanwhile is reported now.
                let has = item.has_queued() && !item.in_ready;
                if has {
                    item.in_ready = true;
                    if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                        s.ready.push(it);
                    }
                }
            } else {
                // Reporting → Sampling: keep the queue; stop reporting it.
                let was_ready = std::mem::replace(&mut item.in_ready, false);
                if was_ready {
                    unready.push(it);
                }
            }
            results.push(StatusCode::Good);
        }
        if !unready.is_empty() {
            unready.sort_unstable();
            if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.ready.retain(|x| unready.binary_search(x).is_err());
            }
        }
        Ok(results)
    }

    /// SetTriggering. `Err` is the service result; otherwise (add results, remove results).
    pub fn set_triggering(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        trigger_id: u32,
        add: &[u32],
        remove: &[u32],
    ) -> Result<(Vec<StatusCode>, Vec<StatusCode>), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let trig = self.item_slot(slot, trigger_id)?;
        let mut remove_results = Vec::with_capacity(remove.len());
        for &id in remove {
            let Some(Some(t)) = self.items.get_mut(trig as usize) else {
                break;
            };
            match t.links().iter().position(|&(_, x)| x == id) {
                Some(i) => {
                    t.cold_mut().links.swap_remove(i);
                    t.trim_cold();
                    remove_results.push(StatusCode::Good);
                }
                None => remove_results.push(StatusCode::BadMonitoredItemIdInvalid),
            }
        }
        let max = self.limits.max_triggering_links_per_item as usize;
        let mut add_results = Vec::with_capacity(add.len());
        for &id in add {
            let target = match self.item_slot(slot, id) {
                Ok(t) => t,
                Err(e) => {
                    add_results.push(e);
                    continue;
                }
            };
            let Some(Some(t)) = self.items.get_mut(trig as usize) else {
                break;
            };
            if t.links().iter().any(|&(_, x)| x == id) {
                add_results.push(StatusCode::Good);
            } else if t.links().len() >= max {
                add_results.push(StatusCode::BadTooManyMonitoredItems);
            } else {
                t.cold_mut().links.push((target, id));
                add_results.push(StatusCode::Good);
            }
        }
        Ok((add_results, remove_results))
    }
}

/// The EventNotifier attribute id in the byte an item keeps.
const EVENT_NOTIFIER: u8 = attr::EventNotifier as u8;
const _: () = assert!(EVENT_NOTIFIER as u32 == attr::EventNotifier);

/// Samples a node's attribute: the hot path for stored, dynamic and counter values
/// (inlined into the bucket walk: a call returning the 80-byte sample cost 16 instructions a
/// sample for its frame alone); the generic Read path otherwise, out of line.
#[inline(always)]
pub(super) fn sample_value(
    space: &AddressSpace,
    (node_index, generation): (u32, u32),
    attribute_id: u32,
    now: Now,
) -> DataValue {
    if attribute_id == attr::Value {
        if let Some(v) = space
            .node_at_generation(node_index, generation)
            .and_then(|n| n.as_variable())
        {
            if v.access_level() & access_level::CURRENT_READ != 0 {
                let source = v.source();
                let mut dv = match source {
                    SourceView::Cell(c) => c.load(),
                    SourceView::Dynamic(d) => space.dynamic_value(d, now),
                    SourceView::Computed(c) => c.value(now),
                    SourceView::Async(_) => DataValue::status(StatusCode::BadWaitingForInitialData),
                };
                if dv.server_timestamp.is_none() || !matches!(source, SourceView::Computed(_)) {
                    dv.server_timestamp = Some(now.utc);
                }
                return dv;
            }
        }
    }
    sample_other(space, (node_index, generation), attribute_id, now)
}

/// [`sample_value`] off its hot path: a node gone, an attribute other than a readable
/// Variable's Value.
#[cold]
#[inline(never)]
fn sample_other(
    space: &AddressSpace,
    (node_index, generation): (u32, u32),
    attribute_id: u32,
    now: Now,
) -> DataValue {
    let Some(node) = space.node_at_generation(node_index, generation) else {
        return DataValue {
            status: Some(StatusCode::BadNodeIdUnknown),
            ..Default::default()
        };
    };
    read_attribute(
        space,
        &node.node_id(),
        attribute_id,
        "",
        &QualifiedName::default(),
        Timestamps::Both,
        now,
    )
}

/// The first sample of a new item: the value the creation check already read (a counter
/// must not count twice).
pub(super) fn initial_sample(initial: DataValue, now: Now) -> DataValue {
    let mut dv = initial;
    if dv.server_timestamp.is_none() {
        dv.server_timestamp = Some(now.utc);
    }
    dv
}

/// The filter of a data item: a DataChangeFilter (or none), or an AggregateFilter (decoded
/// and checked against the node; revised by [`SubscriptionEngine::revise_aggregate`]).
pub(super) enum ItemFilter {
    DataChange(DataChangeSettings),
    Aggregate(Box<AggregateFilter>),
}

/// Validates MonitoringParameters.filter for a data item (Part 4 §7.22).
pub(super) fn data_change_settings(
    space: &AddressSpace,
    node: NodeView<'_>,
    attribute_id: u32,
    filter: &ExtensionObject,
    current: &DataValue,
) -> Result<ItemFilter, StatusCode> {
    if filter.is_null() {
        return Ok(ItemFilter::DataChange(DataChangeSettings::default()));
    }
    if let Some(decoded) = filter.decode_as::<AggregateFilter>(crate::DecodeLimits::default()) {
        let f = decoded.map_err(|_| StatusCode::BadMonitoredItemFilterInvalid)?;
        // An aggregate of the Value of a Variable whose values the engine computes on:
        // numbers and Booleans (Part 13 §5.4.3).
        if attribute_id != attr::Value || !aggregatable_variable(space, node, current) {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        if crate::history::aggregate::Aggregate::from_node_id(&f.aggregate_type).is_none() {
            return Err(StatusCode::BadAggregateNotSupported);
        }
        return Ok(ItemFilter::Aggregate(Box::new(f)));
    }
    let Some(decoded) = filter.decode_as::<DataChangeFilter>(crate::DecodeLimits::default()) else {
        // EventFilter on a data item, or an unknown type.
        if filter.type_id.as_ns0() == Some(crate::generated::types::EventFilter::BINARY_ENCODING_ID)
        {
            return Err(StatusCode::BadFilterNotAllowed);
        }
        return Err(StatusCode::BadMonitoredItemFilterUnsupported);
    };
    let f = decoded.map_err(|_| StatusCode::BadMonitoredItemFilterInvalid)?;
    if attribute_id != attr::Value {
        return Err(StatusCode::BadFilterNotAllowed);
    }
    if !(0..=2).contains(&f.trigger.0) {
        return Err(StatusCode::BadMonitoredItemFilterInvalid);
    }
    let deadband = match f.deadband_type {
        0 => 0.0,
        1 | 2 => {
            if !(f.deadband_value.is_finite() && f.deadband_value >= 0.0) {
                return Err(StatusCode::BadDeadbandFilterInvalid);
            }
            if !numeric_variable(space, node, current) {
                return Err(StatusCode::BadFilterNotAllowed);
            }
            if f.deadband_type == 1 {
                f.deadband_value
            } else {
                if f.deadband_value > 100.0 {
                    return Err(StatusCode::BadDeadbandFilterInvalid);
                }
                let (lo, hi) = eu_range(space, node).ok_or(StatusCode::BadDeadbandFilterInvalid)?;
                f.deadband_value / 100.0 * (hi - lo).abs()
            }
        }
        _ => return Err(StatusCode::BadDeadbandFilterInvalid),
    };
    if f.trigger == DataChangeTrigger::Status && deadband > 0.0 {
        // A deadband needs value changes in the trigger (Part 4 §7.22.2): ignored.
        return Ok(ItemFilter::DataChange(DataChangeSettings {
            trigger: f.trigger,
            deadband: 0.0,
        }));
    }
    Ok(ItemFilter::DataChange(DataChangeSettings {
        trigger: f.trigger,
        deadband,
    }))
}

/// An aggregate's timestamp is its interval's start, the SourceTimestamp: TimestampsToReturn
/// Server or Neither is `Bad_TimestampsToReturnInvalid` for an aggregate item (Part 13
/// §5.4.3.1, "anything but the source timestamp"; Both includes it).
pub(super) fn aggregate_timestamps(ts: Timestamps) -> Result<(), StatusCode> {
    match ts {
        Timestamps::Source | Timestamps::Both => Ok(()),
        Timestamps::Server | Timestamps::Neither => Err(StatusCode::BadTimestampsToReturnInvalid),
    }
}

/// SteppedInterpolation for an aggregate item, chosen as the server's history does (sloped
/// for Float and Double, stepped otherwise), so a ReadProcessed of the same intervals agrees:
/// by the DataType, or by the value when the type is abstract.
pub(super) fn stepped_variable(
    space: &AddressSpace,
    node: NodeView<'_>,
    current: &DataValue,
) -> bool {
    let Some(v) = node.as_variable() else {
        return true;
    };
    for t in [
        crate::generated::node_ids::Double,
        crate::generated::node_ids::Float,
    ] {
        let t = NodeId::ns0(t);
        if *v.data_type() == t || space.is_subtype_of(v.data_type(), &t) {
            return false;
        }
    }
    !matches!(current.value, Variant::Double(_) | Variant::Float(_))
}

/// A Variable whose values an Aggregate computes on: a Number or a Boolean (or, when the
/// type is abstract, one holding a numeric or Boolean scalar now).
pub(super) fn aggregatable_variable(
    space: &AddressSpace,
    node: NodeView<'_>,
    current: &DataValue,
) -> bool {
    let Some(v) = node.as_variable() else {
        return false;
    };
    if v.value_rank() >= 0 || matches!(current.value, Variant::Array(_)) {
        return false; // arrays: the aggregates are defined on scalars
    }
    if numeric_variable(space, node, current) {
        return true;
    }
    let boolean = NodeId::ns0(crate::generated::node_ids::Boolean);
    if *v.data_type() == boolean || space.is_subtype_of(v.data_type(), &boolean) {
        return true;
    }
    let base = v.data_type().as_ns0() == Some(crate::generated::node_ids::BaseDataType);
    base && matches!(current.value, Variant::Boolean(_))
}

/// Is this a Variable of a Number data type (or, when the type is abstract, does it hold
/// a numeric value)?
pub(super) fn numeric_variable(
    space: &AddressSpace,
    node: NodeView<'_>,
    current: &DataValue,
) -> bool {
    let Some(v) = node.as_variable() else {
        return false;
    };
    let number = NodeId::ns0(crate::generated::node_ids::Number);
    if *v.data_type() == number || space.is_subtype_of(v.data_type(), &number) {
        return true;
    }
    let base = v.data_type().as_ns0() == Some(crate::generated::node_ids::BaseDataType);
    base && item::is_numeric(&current.value) && !current.value.is_empty()
}

/// The EURange property (Range: low, high) of a node, if it has one.
pub(super) fn eu_range(space: &AddressSpace, node: NodeView<'_>) -> Option<(f64, f64)> {
    space.range_property(node, "EURange")
}
