//! The publish path: Publish requests queued and answered, NotificationMessages built,
//! acknowledged and kept for Republish.

use super::*;

impl SubscriptionEngine {
    // ---- publish path ------------------------------------------------------------------

    /// Takes the oldest Publish request of a session that is still worth answering; older
    /// ones past their timeoutHint are answered BadTimeout.
    pub(super) fn pop_publish(&mut self, key: SessionKey, now: Now) -> Option<PendingPublish> {
        loop {
            let pp = self.sessions.get_mut(&key)?.publish.pop_front()?;
            if pp.expires_ns <= now.mono_ns {
                let fault = crate::response::fault(pp.request_handle, StatusCode::BadTimeout, now);
                self.emit(pp.channel_id, pp.request_id, fault);
                continue;
            }
            return Some(pp);
        }
    }

    pub(super) fn emit(&mut self, channel_id: u32, request_id: u32, response: Response) {
        self.emit_deferred(channel_id, request_id, Deferred::Response(response));
    }

    pub(super) fn emit_deferred(&mut self, channel_id: u32, request_id: u32, d: Deferred) {
        let q = self.outbox.entry(channel_id).or_default();
        if q.is_empty() {
            self.ready_channels.push(channel_id);
        }
        q.push((request_id, d));
    }

    /// Takes back a buffer of an encoded response (after the connection chunked it).
    pub fn recycle_buffer(&mut self, buf: Vec<u8>) {
        self.pools.put_buffer(buf);
    }

    /// Answers `pp` with the next message of subscription `slot` (notifications or a
    /// keep-alive).
    pub(super) fn send_from(&mut self, slot: u32, pp: PendingPublish, now: Now) {
        let Some(sub) = self.subs.get_mut(slot as usize).and_then(Option::as_mut) else {
            return;
        };
        sub.late = false;
        sub.message_sent = true;
        sub.keep_alive_counter = 0;
        sub.lifetime_counter = 0;
        let key = sub.session;
        let (message, more, count) = if sub.has_notifications() {
            build_message(
                sub,
                &mut self.items,
                (&self.sources, &self.run_starts),
                &mut self.pools,
                now,
            )
        } else {
            let msg = NotificationMessage {
                sequence_number: sub.next_seq,
                publish_time: now.utc,
                notification_data: Vec::new(),
            };
            (msg, false, 0)
        };
        let data = !message.notification_data.is_empty();
        if more {
            sub.late = true; // the next queued request gets the rest at once
        }
        let seq = message.sequence_number;
        let keep_alive = if data {
            self.stats.messages += 1;
            self.stats.notifications += count as u64;
            sub.retrans.push_back(message);
            if let Some(k) = key {
                if let Some(ss) = self.sessions.get_mut(&k) {
                    ss.retrans_order.push_back((slot, seq));
                }
                self.trim_retransmission(k);
            }
            None
        } else {
            self.stats.keep_alives += 1;
            Some(message)
        };
        // The response is encoded now, straight from the kept message (not copied), into a
        // pooled buffer.
        let Some(sub) = self.subs.get(slot as usize).and_then(Option::as_ref) else {
            return;
        };
        let Some(message) = keep_alive.as_ref().or_else(|| sub.retrans.back()) else {
            return;
        };
        let mut body = self.pools.buffer();
        NodeId::ns0(crate::generated::node_ids::PublishResponse_Encoding_DefaultBinary)
            .encode(&mut body);
        header(pp.request_handle, now).encode(&mut body);
        sub.id.encode(&mut body);
        (sub.retrans.len() as i32).encode(&mut body);
        for m in &sub.retrans {
            m.sequence_number.encode(&mut body);
        }
        more.encode(&mut body);
        message.encode(&mut body);
        pp.results.encode(&mut body);
        0i32.encode(&mut body); // diagnosticInfos: none
        self.pools.put_results(pp.results);
        self.emit_deferred(
            pp.channel_id,
            pp.request_id,
            Deferred::Encoded {
                request_handle: pp.request_handle,
                body,
                max_size: pp.max_response_size,
            },
        );
        if more {
            if let Some(k) = key {
                self.service_session(k, now);
            }
        }
    }

    /// Drops the oldest kept messages of a session past its retransmission bound.
    pub(super) fn trim_retransmission(&mut self, key: SessionKey) {
        let max = self.limits.max_retransmission_queue_per_session as usize;
        let Some(ss) = self.sessions.get_mut(&key) else {
            return;
        };
        while ss.retrans_order.len() > max {
            let Some((slot, seq)) = ss.retrans_order.pop_front() else {
                break;
            };
            if let Some(Some(sub)) = self.subs.get_mut(slot as usize) {
                if let Some(i) = sub.retrans.iter().position(|m| m.sequence_number == seq) {
                    if let Some(m) = sub.retrans.remove(i) {
                        sub.diag.discarded_messages = sub.diag.discarded_messages.wrapping_add(1);
                        self.pools.put_message(m);
                    }
                }
            }
        }
    }

    /// Answers queued Publish requests of a session while something is waiting: status
    /// messages of subscriptions that left, then late subscriptions (highest priority first).
    pub(super) fn service_session(&mut self, key: SessionKey, now: Now) {
        loop {
            let Some(ss) = self.sessions.get(&key) else {
                return;
            };
            if ss.publish.is_empty() {
                return;
            }
            if !ss.status_messages.is_empty() {
                let Some(pp) = self.pop_publish(key, now) else {
                    return;
                };
                let Some(ss) = self.sessions.get_mut(&key) else {
                    return;
                };
                let Some((id, seq, status)) = ss.status_messages.pop_front() else {
                    return;
                };
                let msg = NotificationMessage {
                    sequence_number: seq,
                    publish_time: now.utc,
                    notification_data: vec![ExtensionObject::from_struct(
                        &StatusChangeNotification {
                            status,
                            diagnostic_info: Default::default(),
                        },
                    )],
                };
                let resp = PublishResponse {
                    response_header: header(pp.request_handle, now),
                    subscription_id: id,
                    available_sequence_numbers: Vec::new(),
                    more_notifications: false,
                    notification_message: msg,
                    results: pp.results,
                    diagnostic_infos: Vec::new(),
                };
                self.emit(
                    pp.channel_id,
                    pp.request_id,
                    Response::Publish(Box::new(resp)),
                );
                continue;
            }
            let mut best: Option<(u8, u32)> = None;
            for &slot in &ss.subs {
                if let Some(Some(s)) = self.subs.get(slot as usize) {
                    if s.late && best.is_none_or(|(p, _)| s.priority > p) {
                        best = Some((s.priority, slot));
                    }
                }
            }
            let Some((_, slot)) = best else { return };
            let Some(pp) = self.pop_publish(key, now) else {
                return;
            };
            self.send_from(slot, pp, now);
        }
    }

    /// Publish (Part 4 §5.13.5). Acknowledgements are processed at once; the request is then
    /// queued and answered when a subscription has something to send (possibly at once, into
    /// the outbox). `Some(response)` is an immediate answer (a fault), `None` means queued.
    pub fn publish(
        &mut self,
        key: SessionKey,
        channel_id: u32,
        request_id: u32,
        max_response_size: u32,
        req: &crate::generated::types::PublishRequest,
        now: Now,
    ) -> Option<Response> {
        let handle = req.request_header.request_handle;
        let mut results = self.pools.results();
        for ack in &req.subscription_acknowledgements {
            results.push(self.acknowledge(key, ack.subscription_id, ack.sequence_number));
        }
        let ss = self.sessions.entry(key).or_default();
        if ss.subs.is_empty() && ss.status_messages.is_empty() {
            return Some(crate::response::fault(
                handle,
                StatusCode::BadNoSubscription,
                now,
            ));
        }
        if ss.publish.len() >= self.limits.max_publish_requests_per_session as usize {
            return Some(crate::response::fault(
                handle,
                StatusCode::BadTooManyPublishRequests,
                now,
            ));
        }
        let hint = req.request_header.timeout_hint;
        let expires_ns = if hint == 0 {
            u64::MAX
        } else {
            now.deadline_after_ms(hint as f64)
        };
        ss.publish.push_back(PendingPublish {
            channel_id,
            request_id,
            request_handle: handle,
            expires_ns,
            results,
            max_response_size,
        });
        for &slot in &ss.subs {
            if let Some(Some(s)) = self.subs.get_mut(slot as usize) {
                s.lifetime_counter = 0;
                s.diag.publish_requests = s.diag.publish_requests.wrapping_add(1);
            }
        }
        self.service_session(key, now);
        None
    }

    /// Cancel: answers the session's queued Publish requests with this request handle with
    /// Bad_RequestCancelledByClient; returns how many.
    pub fn cancel_publish(&mut self, key: SessionKey, request_handle: u32, now: Now) -> u32 {
        let Some(ss) = self.sessions.get_mut(&key) else {
            return 0;
        };
        let mut cancelled = Vec::new();
        ss.publish.retain(|p| {
            if p.request_handle == request_handle {
                cancelled.push((p.channel_id, p.request_id));
                false
            } else {
                true
            }
        });
        for &(channel, request_id) in &cancelled {
            let f = crate::response::fault(
                request_handle,
                StatusCode::BadRequestCancelledByClient,
                now,
            );
            self.emit(channel, request_id, f);
        }
        cancelled.len() as u32
    }

    pub(super) fn acknowledge(&mut self, key: SessionKey, sub_id: u32, seq: u32) -> StatusCode {
        let Ok(slot) = self.sub_slot(key, sub_id) else {
            return StatusCode::BadSubscriptionIdInvalid;
        };
        let Some(Some(sub)) = self.subs.get_mut(slot as usize) else {
            return StatusCode::BadSubscriptionIdInvalid;
        };
        match sub.retrans.iter().position(|m| m.sequence_number == seq) {
            Some(i) => {
                if let Some(m) = sub.retrans.remove(i) {
                    self.pools.put_message(m);
                }
                if let Some(ss) = self.sessions.get_mut(&key) {
                    if let Some(j) = ss
                        .retrans_order
                        .iter()
                        .position(|&(s, q)| s == slot && q == seq)
                    {
                        ss.retrans_order.remove(j);
                    }
                }
                StatusCode::Good
            }
            None => StatusCode::BadSequenceNumberUnknown,
        }
    }

    /// Republish (Part 4 §5.13.6).
    pub fn republish(
        &mut self,
        key: SessionKey,
        sub_id: u32,
        seq: u32,
    ) -> Result<NotificationMessage, StatusCode> {
        let slot = self.sub_slot(key, sub_id)?;
        let sub = self
            .subs
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
            .ok_or(StatusCode::BadSubscriptionIdInvalid)?;
        sub.lifetime_counter = 0;
        sub.diag.republish_requests = sub.diag.republish_requests.wrapping_add(1);
        let m = sub
            .retrans
            .iter()
            .find(|m| m.sequence_number == seq)
            .cloned()
            .ok_or(StatusCode::BadMessageNotAvailable)?;
        sub.diag.republish_messages = sub.diag.republish_messages.wrapping_add(1);
        Ok(m)
    }

    /// Responses to queued Publish requests that became ready, for one channel.
    pub fn take_responses(&mut self, channel_id: u32, into: &mut Vec<(u32, Deferred)>) {
        // The channel's list stays in the map (emptied, capacity kept) until the channel
        // closes: no allocation per response.
        if let Some(q) = self.outbox.get_mut(&channel_id) {
            into.append(q);
        }
    }

    /// Channels with responses waiting (each listed once until taken).
    pub fn take_ready_channels(&mut self, into: &mut Vec<u32>) {
        into.append(&mut self.ready_channels);
    }
}

/// Queues an event notification into an item and puts it on its subscription's ready list.
pub(super) fn queue_event(
    items: &mut Slots<MonitoredItem>,
    subs: &mut [Option<Subscription>],
    it: u32,
    fields: Vec<Variant>,
) {
    let Some(Some(item)) = items.get_mut(it as usize) else {
        return;
    };
    let overflows = item.queue.push(Queued::Event(fields));
    if overflows > 0 {
        if let Some(Some(sub)) = subs.get_mut(item.sub as usize) {
            sub.diag.event_queue_overflows = sub
                .diag
                .event_queue_overflows
                .wrapping_add(overflows as u32);
        }
    }
    if item.mode != MonitoringMode::Reporting || item.in_ready {
        return;
    }
    if let Some(Some(sub)) = subs.get_mut(item.sub as usize) {
        item.in_ready = true;
        sub.ready.push(it);
    }
}

/// Builds the next NotificationMessage of a subscription from its ready list (at most
/// MaxNotificationsPerPublish notifications). Returns (message, more waiting, count).
pub(super) fn build_message(
    sub: &mut Subscription,
    items: &mut Slots<MonitoredItem>,
    (sources, run_starts): (&Slots<Source>, &SparseSlots<LastSample>),
    pools: &mut Pools,
    now: Now,
) -> (NotificationMessage, bool, usize) {
    let cap = sub.max_notifications.max(1) as usize;
    let mut data = std::mem::take(&mut pools.notes);
    let mut events = std::mem::take(&mut pools.events);
    let mut count = 0usize;
    // The ready list is consumed from the front; what stays is compacted in place (no
    // allocation per message).
    let ready = &mut sub.ready;
    data.reserve(ready.len().min(cap));
    let mut kept = 0usize;
    let mut i = 0;
    if sub.publishing_enabled {
        while count < cap {
            let Some(&it) = ready.get(i) else { break };
            i += 1;
            let Some(Some(item)) = items.get_mut(it as usize) else {
                continue;
            };
            let reportable = item.mode == MonitoringMode::Reporting || item.triggered;
            while reportable && count < cap {
                let entry = if std::mem::replace(&mut item.held, false) {
                    run_start(sources, run_starts, item.source())
                        .map(|v| Queued::Data(item_value(item, v.get())))
                } else {
                    item.queue.pop()
                };
                match entry {
                    Some(Queued::Data(v)) => {
                        sub.diag.data_changes = sub.diag.data_changes.wrapping_add(1);
                        data.push(MonitoredItemNotification {
                            client_handle: item.client_handle,
                            value: v,
                        })
                    }
                    Some(Queued::Event(fields)) => {
                        sub.diag.events = sub.diag.events.wrapping_add(1);
                        events.push(crate::generated::types::EventFieldList {
                            client_handle: item.client_handle,
                            event_fields: fields,
                        })
                    }
                    None => break,
                }
                count += 1;
            }
            if reportable && item.has_queued() {
                // kept < i <= ready.len(): the slot exists (already visited).
                if let Some(slot) = ready.get_mut(kept) {
                    *slot = it;
                }
                kept += 1;
            } else {
                item.in_ready = false;
                item.triggered = false;
            }
        }
    }
    // Unvisited entries follow the kept ones.
    ready.copy_within(i.., kept);
    let len = kept + (ready.len() - i);
    ready.truncate(len);
    let mut notification_data = pools.eo_vec();
    if !data.is_empty() {
        // Encoded once (DataChangeNotification: the array, then an empty diagnostics
        // array) into a pooled buffer; the notifications' scratch list is kept.
        let mut body = pools.buffer();
        (data.len() as i32).encode(&mut body);
        for n in &data {
            n.encode(&mut body);
        }
        0i32.encode(&mut body);
        data.clear();
        notification_data.push(ExtensionObject {
            type_id: NodeId::ns0(DataChangeNotification::BINARY_ENCODING_ID),
            body: crate::types::ExtensionObjectBody::Binary(body),
        });
    }
    if !events.is_empty() {
        let mut body = pools.buffer();
        (events.len() as i32).encode(&mut body);
        for e in &events {
            e.encode(&mut body);
        }
        events.clear();
        notification_data.push(ExtensionObject {
            type_id: NodeId::ns0(
                crate::generated::types::EventNotificationList::BINARY_ENCODING_ID,
            ),
            body: crate::types::ExtensionObjectBody::Binary(body),
        });
    }
    pools.notes = data;
    pools.events = events;
    if let Some(status) = sub.status_change.take() {
        notification_data.push(ExtensionObject::from_struct(&StatusChangeNotification {
            status,
            diagnostic_info: Default::default(),
        }));
    }
    let more = sub.publishing_enabled && !sub.ready.is_empty();
    let seq = if notification_data.is_empty() {
        sub.next_seq
    } else {
        sub.take_seq()
    };
    (
        NotificationMessage {
            sequence_number: seq,
            publish_time: now.utc,
            notification_data,
        },
        more,
        count,
    )
}
