//! The subscription services and a session's life: CreateSubscription, ModifySubscription,
//! SetPublishingMode, DeleteSubscriptions, TransferSubscriptions (the engine's side), and what
//! a closing session leaves.

use super::*;

impl SubscriptionEngine {
    // ---- session life --------------------------------------------------------------------

    /// The channel closed: its queued Publish requests and unsent responses are dropped (the
    /// messages stay in the retransmission queues for Republish).
    pub fn on_channel_closed(&mut self, channel_id: u32) {
        self.outbox.remove(&channel_id);
        for ss in self.sessions.values_mut() {
            ss.publish.retain(|p| p.channel_id != channel_id);
        }
    }

    /// The session was activated on another channel: Publish requests queued on the old one
    /// can no longer be answered.
    pub fn on_session_rebound(&mut self, key: SessionKey, channel_id: u32) {
        if let Some(ss) = self.sessions.get_mut(&key) {
            ss.publish.retain(|p| p.channel_id == channel_id);
        }
    }

    /// The session closed or timed out. `delete` (CloseSession's deleteSubscriptions):
    /// its subscriptions go; otherwise they stay, orphaned, until their lifetime ends or
    /// another session takes them over with TransferSubscriptions.
    pub fn on_session_closed(&mut self, key: SessionKey, delete: bool, now: Now) {
        let Some(ss) = self.sessions.remove(&key) else {
            return;
        };
        // Outstanding Publish requests are answered Bad_SessionClosed (Part 4 §5.7.4).
        for p in ss.publish {
            let f = crate::response::fault(p.request_handle, StatusCode::BadSessionClosed, now);
            self.emit(p.channel_id, p.request_id, f);
        }
        for slot in ss.subs {
            if delete {
                self.delete_subscription_slot(slot);
            } else if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.session = None;
                s.late = false;
            }
        }
    }

    // ---- subscription services --------------------------------------------------------

    /// CreateSubscription. `owner` names the session's user (TransferSubscriptions checks it).
    pub fn create_subscription(
        &mut self,
        key: SessionKey,
        owner: &str,
        req: &crate::generated::types::CreateSubscriptionRequest,
        now: Now,
    ) -> Result<Revised, StatusCode> {
        if self.sub_ids.len() >= self.limits.max_subscriptions_per_shard as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
        if count >= self.limits.max_subscriptions_per_session as usize {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let interval_ms = self
            .limits
            .revise_publishing_interval(req.requested_publishing_interval);
        let (keep_alive, lifetime) = self.limits.revise_counts(
            interval_ms,
            req.requested_max_keep_alive_count,
            req.requested_lifetime_count,
        );
        let id = self.next_sub_id();
        let interval_ns = (interval_ms * 1e6) as u64;
        let first_ns = self.first_cycle(interval_ns, now);
        let generation = self.next_timer_generation();
        let sub = Subscription {
            id,
            session: Some(key),
            owner: owner.to_owned(),
            interval_ms,
            interval_ns,
            keep_alive_count: keep_alive,
            lifetime_count: lifetime,
            max_notifications: self
                .limits
                .revise_max_notifications(req.max_notifications_per_publish),
            priority: req.priority,
            publishing_enabled: req.publishing_enabled,
            next_ns: first_ns,
            timer_generation: generation,
            keep_alive_counter: 0,
            lifetime_counter: 0,
            message_sent: false,
            late: false,
            next_seq: 1,
            items: Vec::new(),
            ready: Vec::new(),
            status_change: None,
            retrans: VecDeque::new(),
            diag: Box::default(),
        };
        let slot = slab_insert(&mut self.subs, &mut self.sub_free, sub);
        self.sub_ids.insert(id, slot);
        self.sub_heap.push(Reverse((first_ns, slot, generation)));
        self.sessions.entry(key).or_default().subs.push(slot);
        Ok(Revised {
            subscription_id: id,
            publishing_interval_ms: interval_ms,
            lifetime_count: lifetime,
            max_keep_alive_count: keep_alive,
        })
    }

    /// ModifySubscription.
    pub fn modify_subscription(
        &mut self,
        key: SessionKey,
        req: &crate::generated::types::ModifySubscriptionRequest,
        now: Now,
    ) -> Result<Revised, StatusCode> {
        let slot = self.sub_slot(key, req.subscription_id)?;
        let interval_ms = self
            .limits
            .revise_publishing_interval(req.requested_publishing_interval);
        let (keep_alive, lifetime) = self.limits.revise_counts(
            interval_ms,
            req.requested_max_keep_alive_count,
            req.requested_lifetime_count,
        );
        let max_notifications = self
            .limits
            .revise_max_notifications(req.max_notifications_per_publish);
        let interval_ns = (interval_ms * 1e6) as u64;
        let changed = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .is_some_and(|sub| interval_ms != sub.interval_ms);
        let (first_ns, generation) = if changed {
            (
                self.first_cycle(interval_ns, now),
                self.next_timer_generation(),
            )
        } else {
            (0, 0)
        };
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.keep_alive_count = keep_alive;
        sub.lifetime_count = lifetime;
        sub.max_notifications = max_notifications;
        sub.priority = req.priority;
        sub.lifetime_counter = 0;
        sub.diag.modify = sub.diag.modify.wrapping_add(1);
        if changed {
            sub.interval_ms = interval_ms;
            sub.interval_ns = interval_ns;
            sub.timer_generation = generation;
            sub.next_ns = first_ns;
            self.sub_heap
                .push(Reverse((sub.next_ns, slot, sub.timer_generation)));
        }
        Ok(Revised {
            subscription_id: sub.id,
            publishing_interval_ms: interval_ms,
            lifetime_count: lifetime,
            max_keep_alive_count: keep_alive,
        })
    }

    /// SetPublishingMode for one subscription.
    pub fn set_publishing_mode(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        enabled: bool,
    ) -> StatusCode {
        match self.sub_slot(key, sub_id) {
            Ok(slot) => {
                if let Some(s) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) {
                    s.publishing_enabled = enabled;
                    s.lifetime_counter = 0;
                    if enabled {
                        s.diag.enable = s.diag.enable.wrapping_add(1);
                    } else {
                        s.diag.disable = s.diag.disable.wrapping_add(1);
                    }
                }
                StatusCode::Good
            }
            Err(e) => e,
        }
    }

    /// DeleteSubscriptions for one subscription.
    pub fn delete_subscription(&mut self, key: SessionKey, sub_id: u32, now: Now) -> StatusCode {
        match self.sub_slot(key, sub_id) {
            Ok(slot) => {
                self.delete_subscription_slot(slot);
                // A queued Publish request with no subscription left is answered now.
                self.answer_if_no_subscriptions(key, now);
                StatusCode::Good
            }
            Err(e) => e,
        }
    }

    pub(super) fn answer_if_no_subscriptions(&mut self, key: SessionKey, now: Now) {
        let Some(ss) = self.sessions.get_mut(&key) else {
            return;
        };
        if !ss.subs.is_empty() || !ss.status_messages.is_empty() {
            return;
        }
        let pending: Vec<PendingPublish> = ss.publish.drain(..).collect();
        for pp in pending {
            let f = crate::response::fault(pp.request_handle, StatusCode::BadNoSubscription, now);
            self.emit(pp.channel_id, pp.request_id, f);
        }
    }

    pub(super) fn delete_subscription_slot(&mut self, slot: u32) {
        let Some(mut sub) = self.subs.get_mut(slot as usize).and_then(|s| s.take()) else {
            return;
        };
        for m in sub.retrans.drain(..) {
            self.pools.put_message(m);
        }
        for it in sub.items {
            self.remove_item_slot(it);
        }
        self.sub_ids.remove(&sub.id);
        self.sub_free.push(slot);
        if let Some(k) = sub.session {
            if let Some(ss) = self.sessions.get_mut(&k) {
                ss.subs.retain(|&s| s != slot);
                ss.retrans_order.retain(|&(s, _)| s != slot);
            }
        }
    }

    /// TransferSubscriptions within this shard (Part 4 §5.13.7). `owner` is the user of
    /// the requesting session; a subscription of another user is BadUserAccessDenied. The
    /// old session (if any) gets a StatusChangeNotification GoodSubscriptionTransferred.
    pub fn transfer_subscription(
        &mut self,
        key: SessionKey,
        owner: &str,
        sub_id: u32,
        send_initial_values: bool,
        now: Now,
    ) -> Result<Vec<u32>, StatusCode> {
        let slot = *self
            .sub_ids
            .get(&sub_id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.diag.transfer_requests = sub.diag.transfer_requests.wrapping_add(1);
        if sub.owner != owner {
            return Err(StatusCode::BadUserAccessDenied);
        }
        let old = sub.session;
        if old != Some(key) {
            let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
            if count >= self.limits.max_subscriptions_per_session as usize {
                return Err(StatusCode::BadTooManySubscriptions);
            }
            let sub = self
                .subs
                .get_mut(slot as usize)
                .and_then(Option::as_mut)
                .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
            sub.session = Some(key);
            sub.late = false;
            sub.lifetime_counter = 0;
            let seq = sub.take_seq();
            if let Some(o) = old {
                if let Some(ss) = self.sessions.get_mut(&o) {
                    ss.subs.retain(|&s| s != slot);
                    ss.retrans_order.retain(|&(s, _)| s != slot);
                    ss.status_messages.push_back((
                        sub_id,
                        seq,
                        StatusCode::GoodSubscriptionTransferred,
                    ));
                }
                self.service_session(o, now);
            }
            let ss = self.sessions.entry(key).or_default();
            ss.subs.push(slot);
            if let Some(Some(sub)) = self.subs.get(slot as usize) {
                for m in &sub.retrans {
                    ss.retrans_order.push_back((slot, m.sequence_number));
                }
            }
        }
        if send_initial_values {
            self.resend_slot(slot);
        }
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        Ok(sub.available())
    }

    /// Cross-shard TransferSubscriptions, the owning side: takes subscription `sub_id` out of
    /// this engine for a session of another shard, if `owner` (the requesting session's
    /// user) created it and it has at most `max_items` monitored items (what the other shard
    /// has room for; else BadTooManyMonitoredItems and nothing changes). The old session
    /// gets a StatusChangeNotification GoodSubscriptionTransferred, as in a transfer within
    /// the shard. Everything the subscription holds leaves with it: parameters, counters,
    /// sequence numbers, its items with their filters, queues and last values, triggering
    /// links, the ready list and the retransmission queue.
    pub fn export_subscription(
        &mut self,
        owner: &str,
        sub_id: u32,
        max_items: usize,
        now: Now,
    ) -> Result<MovedSubscription, StatusCode> {
        let slot = *self
            .sub_ids
            .get(&sub_id)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        if sub.owner != owner {
            return Err(StatusCode::BadUserAccessDenied);
        }
        if sub.items.len() > max_items {
            return Err(StatusCode::BadTooManyMonitoredItems);
        }
        let item_slots = sub.items.clone();
        for &it in &item_slots {
            self.stop_sampling(it);
            if let Some(i) = self.event_items.iter().position(|&x| x == it) {
                self.event_items.swap_remove(i);
            }
        }
        let Some(mut sub) = self.subs.get_mut(slot as usize).and_then(Option::take) else {
            return Err(StatusCode::BadSubscriptionIdInvalid);
        };
        self.sub_ids.remove(&sub_id);
        self.sub_free.push(slot);
        let index_of: HashMap<u32, u32> = item_slots
            .iter()
            .enumerate()
            .map(|(i, &it)| (it, i as u32))
            .collect();
        let mut items = Vec::with_capacity(item_slots.len());
        for &it in &item_slots {
            let Some(mut item) = self.items.get_mut(it as usize).and_then(|x| x.take()) else {
                continue;
            };
            self.ids.release(it, item.id);
            // Links to items of the same subscription become positions in `items`.
            if let Some(c) = item.cold.as_mut() {
                c.links = c
                    .links
                    .iter()
                    .filter_map(|&(t, id)| index_of.get(&t).map(|&i| (i, id)))
                    .collect();
            }
            item.in_ready = false;
            items.push(item);
        }
        let ready = sub
            .ready
            .iter()
            .filter_map(|it| index_of.get(it).copied())
            .collect();
        sub.items.clear();
        sub.ready.clear();
        let old = sub.session.take();
        let seq = sub.take_seq();
        if let Some(o) = old {
            if let Some(ss) = self.sessions.get_mut(&o) {
                ss.subs.retain(|&x| x != slot);
                ss.retrans_order.retain(|&(x, _)| x != slot);
                ss.status_messages.push_back((
                    sub_id,
                    seq,
                    StatusCode::GoodSubscriptionTransferred,
                ));
            }
            self.service_session(o, now);
        }
        Ok(MovedSubscription { sub, items, ready })
    }

    /// Room here for one more subscription of session `key`: the number of monitored items
    /// it may bring (per-subscription and per-shard limits, less `reserved` items promised
    /// to transfers under way), or BadTooManySubscriptions.
    pub fn import_room(
        &self,
        key: SessionKey,
        reserved_subs: usize,
        reserved_items: usize,
    ) -> Result<usize, StatusCode> {
        let count = self.sessions.get(&key).map_or(0, |s| s.subs.len());
        if count + reserved_subs >= self.limits.max_subscriptions_per_session as usize
            || self.sub_ids.len() + reserved_subs
                >= self.limits.max_subscriptions_per_shard as usize
        {
            return Err(StatusCode::BadTooManySubscriptions);
        }
        let free = (self.limits.max_monitored_items_per_shard as usize)
            .saturating_sub(self.ids.live() + reserved_items);
        Ok(free.min(self.limits.max_monitored_items_per_subscription as usize))
    }

    /// Cross-shard TransferSubscriptions, the receiving side: adds a subscription taken from
    /// another shard ([`SubscriptionEngine::export_subscription`], within the room
    /// [`SubscriptionEngine::import_room`] offered) to session `key`, restarts its timers
    /// and sampling here, and (`send_initial_values`) queues every item's last value.
    /// Returns its available sequence numbers. Ids stay those the other shard gave: a
    /// subscription id that is live here (possible only after that shard's 24-bit counter
    /// wrapped onto a live id) is BadSubscriptionIdInvalid and the subscription is dropped;
    /// item ids stay unique within the subscription (an item of another subscription here
    /// may have the same id, see `ids`).
    pub fn import_subscription(
        &mut self,
        key: SessionKey,
        moved: MovedSubscription,
        send_initial_values: bool,
        now: Now,
    ) -> Result<Vec<u32>, StatusCode> {
        let MovedSubscription {
            mut sub,
            items,
            ready,
        } = moved;
        if self.sub_ids.contains_key(&sub.id) {
            return Err(StatusCode::BadSubscriptionIdInvalid);
        }
        if self.ids.room() < items.len() {
            // Only with more items per shard than an id can name slots for.
            return Err(StatusCode::BadTooManyMonitoredItems);
        }
        sub.session = Some(key);
        sub.late = false;
        sub.lifetime_counter = 0;
        let generation = self.next_timer_generation();
        sub.timer_generation = generation;
        sub.diag.transfer_requests = sub.diag.transfer_requests.wrapping_add(1);
        sub.next_ns = self.first_cycle(sub.interval_ns, now);
        let id = sub.id;
        let next_ns = sub.next_ns;
        let slot = slab_insert(&mut self.subs, &mut self.sub_free, sub);
        self.sub_ids.insert(id, slot);
        self.sub_heap.push(Reverse((next_ns, slot, generation)));
        let mut slots = Vec::with_capacity(items.len());
        for mut item in items {
            // Exported off their sources: each keeps its node.
            debug_assert!(!item.on_source);
            item.sub = slot;
            // Its id stays the one the other shard gave (unique within the subscription).
            match self.ids.adopt(slot, item.id) {
                Some(it) => {
                    self.insert_item(slot, it, item);
                    slots.push(it);
                }
                None => slots.push(NONE), // not reached: room was checked
            }
        }
        for &it in &slots {
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            if let Some(c) = item.cold.as_mut() {
                c.links = c
                    .links
                    .iter()
                    .filter_map(|&(i, id)| slots.get(i as usize).map(|&t| (t, id)))
                    .collect();
            }
            let (mode, event) = (item.mode, item.is_event());
            if event {
                self.event_items.push(it);
            } else if mode != MonitoringMode::Disabled {
                self.start_sampling(it, now);
            }
        }
        if let Some(Some(sub)) = self.subs.get_mut(slot as usize) {
            for &i in &ready {
                if let Some(&it) = slots.get(i as usize) {
                    if let Some(Some(item)) = self.items.get_mut(it as usize) {
                        item.in_ready = true;
                        sub.ready.push(it);
                    }
                }
            }
        }
        let ss = self.sessions.entry(key).or_default();
        ss.subs.push(slot);
        if let Some(Some(sub)) = self.subs.get(slot as usize) {
            for m in &sub.retrans {
                ss.retrans_order.push_back((slot, m.sequence_number));
            }
        }
        self.trim_retransmission(key);
        if send_initial_values {
            self.resend_slot(slot);
        }
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        Ok(sub.available())
    }

    /// A response produced outside the Publish path for a queued request (a
    /// TransferSubscriptions answered after another shard replied), sent like Publish
    /// responses through the channel's outbox.
    pub fn emit_response(&mut self, channel_id: u32, request_id: u32, response: Response) {
        self.emit(channel_id, request_id, response);
    }

    /// Server.ResendData: every item in Reporting mode queues its last value again.
    pub fn resend_data(&mut self, key: SessionKey, sub_id: u32) -> Result<(), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        self.resend_slot(slot);
        Ok(())
    }

    pub(super) fn resend_slot(&mut self, slot: u32) {
        let Some(Some(sub)) = self.subs.get_mut(slot as usize) else {
            return;
        };
        for &it in &sub.items {
            let Some(Some(item)) = self.items.get_mut(it as usize) else {
                continue;
            };
            if item.mode != MonitoringMode::Reporting {
                continue;
            }
            if let Some(last) = Self::last_of(&self.sources, item) {
                let v = item_value(item, last.get());
                item.held = false;
                item.queue.push(Queued::Data(v));
                if !item.in_ready {
                    item.in_ready = true;
                    sub.ready.push(it);
                }
            }
        }
    }

    /// Server.GetMonitoredItems: (server handles, client handles).
    pub fn monitored_items_of(
        &self,
        key: SessionKey,
        sub_id: u32,
    ) -> Result<(Vec<u32>, Vec<u32>), StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let sub = self
            .subs
            .get(slot as usize)
            .and_then(Option::as_ref)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        let mut server = Vec::with_capacity(sub.items.len());
        let mut client = Vec::with_capacity(sub.items.len());
        for &it in &sub.items {
            if let Some(Some(item)) = self.items.get(it as usize) {
                server.push(item.id);
                client.push(item.client_handle);
            }
        }
        Ok((server, client))
    }
}
