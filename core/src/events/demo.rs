//! The Demo event generator and the session events.
//!
//! # Demo events
//!
//! At `events.demo_rate_per_s` (0 = off) a `DemoEventType` event (source `Demo.Events`,
//! Message `Demo event <n>`, Severity cycling 100, 200, … 1000, field `1:Sequence` = n) is
//! due at `start + n × period`, n = 1, 2, …: a pure function of time, like
//! `Demo.Dynamic.Counter`. The Demo alarm's activity is one too
//! ([`DemoAlarm::active_at`](super::DemoAlarm::active_at)).
//!
//! **Only shard 0 runs the generator** and publishes what it produces to the bus; every
//! shard (shard 0 included) delivers bus events to its own subscribers. Running it on
//! every shard would raise each event once per shard, and a subscriber would see it once
//! per shard, with different EventIds. So the runtime creates one [`DemoEventGenerator`]
//! on shard 0, adds [`DemoEventGenerator::next_deadline`] to that shard's timers and calls
//! [`DemoEventGenerator::due`] when it passes.
//!
//! A generator that falls behind (a stalled shard) emits at most [`MAX_CATCH_UP`] of the
//! events it owes in one call and skips the older ones.
//!
//! # Session events
//!
//! [`publish_session_created`] / [`publish_session_closed`] raise AuditCreateSessionEventType
//! / AuditSessionEventType events (Part 5 §6.4.7, §6.4.8) with SourceNode = the SessionId and
//! SourceName `Session/CreateSession`, `Session/CloseSession` or `Session/Timeout`. They are
//! the only audit events this server raises, which is why Server.Auditing stays false.

use std::sync::Arc;

use super::nodes;
use super::{ids, Event, EventField, ServerEvents};
use crate::server::shared::ServerShared;
use crate::types::{ByteString, DateTime, LocalizedText, NodeId, UaString, Variant};
use crate::Now;

/// Most events one [`DemoEventGenerator::due`] call emits.
pub const MAX_CATCH_UP: u64 = 10_000;

/// A `DemoEventType` event from the Demo.Events source.
pub fn demo_event(
    events: &ServerEvents,
    sequence: u32,
    message: &str,
    severity: u16,
    time: DateTime,
) -> Event {
    Event {
        event_id: events.ids.next(),
        event_type: nodes::demo_event_type(),
        type_chain: Arc::clone(&events.chains.demo),
        source_node: nodes::demo_events_id(),
        source_name: UaString::from(nodes::DEMO_EVENTS_NAME),
        time,
        receive_time: time,
        message: LocalizedText::new("en", message),
        severity: severity.clamp(1, 1000),
        condition_id: None,
        fields: vec![EventField {
            path: vec![nodes::sequence_field()],
            value: Variant::UInt32(sequence),
        }],
        notifiers: Arc::clone(&events.notifiers_demo),
    }
}

/// Raises the Demo events and drives the Demo alarm. Run on shard 0 only (see the module
/// documentation).
#[derive(Debug)]
pub struct DemoEventGenerator {
    shared: Arc<ServerShared>,
    /// Demo event period; `None`: off.
    period_ns: Option<u64>,
    /// Index of the next Demo event.
    next_n: u64,
    /// Alarm half period; `None`: no alarm.
    alarm_half_ns: Option<u64>,
    /// Index of the next half-period boundary at which the alarm schedule is applied.
    alarm_next_k: u64,
}

impl DemoEventGenerator {
    /// A generator that raises the events due after `now` (none of the past).
    pub fn new(shared: Arc<ServerShared>, now: Now) -> DemoEventGenerator {
        let ev = &shared.events;
        let period_ns = (ev.demo_namespace && ev.demo_rate_per_s > 0.0)
            .then(|| ((1e9 / ev.demo_rate_per_s).round() as u64).max(1_000));
        let alarm_half_ns = ev
            .alarm
            .is_some()
            .then_some(super::condition::ALARM_HALF_PERIOD_MS * 1_000_000);
        let elapsed = now.mono_ns.saturating_sub(shared.start_mono_ns);
        let next_n = period_ns.map_or(0, |p| elapsed / p + 1);
        // The current half period: the first `due` brings the alarm in line at once.
        let alarm_next_k = alarm_half_ns.map_or(0, |h| elapsed / h);
        DemoEventGenerator {
            shared,
            period_ns,
            next_n,
            alarm_half_ns,
            alarm_next_k,
        }
    }

    /// Monotonic time (ns) of the next Demo event or alarm change; `None` when neither runs.
    pub fn next_deadline(&self) -> Option<u64> {
        let start = self.shared.start_mono_ns;
        let demo = self
            .period_ns
            .map(|p| start.saturating_add(self.next_n.saturating_mul(p)));
        let alarm = self
            .alarm_half_ns
            .map(|h| start.saturating_add(self.alarm_next_k.saturating_mul(h)));
        match (demo, alarm) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Emits every event due at `now` through `f` (in time order per kind): the Demo events
    /// and, when the alarm's schedule says so, the alarm's activation change. The caller
    /// publishes them: `gen.due(now, |e| shared.events.bus.publish(e))`. Returns how many.
    pub fn due(&mut self, now: Now, mut f: impl FnMut(Event)) -> usize {
        let shared = Arc::clone(&self.shared);
        let events = &shared.events;
        let elapsed = now.mono_ns.saturating_sub(shared.start_mono_ns);
        let mut count = 0;
        if let Some(h) = self.alarm_half_ns {
            self.alarm_next_k = elapsed / h + 1;
            let active = super::DemoAlarm::active_at(elapsed);
            if let Some(ev) = events.set_alarm_active(&shared.address_space, active, now.utc) {
                f(ev);
                count += 1;
            }
        }
        if let Some(p) = self.period_ns {
            let last = elapsed / p;
            if last >= self.next_n {
                if last - self.next_n >= MAX_CATCH_UP {
                    self.next_n = last + 1 - MAX_CATCH_UP;
                }
                for n in self.next_n..=last {
                    let ticks = (n.saturating_mul(p) / 100).min(i64::MAX as u64) as i64;
                    let time = DateTime(shared.start_time.0.saturating_add(ticks));
                    let severity = ((n % 10) as u16 + 1) * 100;
                    f(demo_event(
                        events,
                        n as u32,
                        &format!("Demo event {n}"),
                        severity,
                        time,
                    ));
                    count += 1;
                }
                self.next_n = last + 1;
            }
        }
        count
    }
}

fn audit_fields(shared: &ServerShared, session_id: &NodeId, now: Now) -> Vec<EventField> {
    vec![
        EventField::ns0("ActionTimeStamp", Variant::DateTime(now.utc)),
        EventField::ns0("Status", Variant::Boolean(true)),
        EventField::ns0(
            "ServerId",
            Variant::String(UaString::from(
                shared.config.application.effective_application_uri(),
            )),
        ),
        EventField::ns0("ClientAuditEntryId", Variant::String(UaString::null())),
        EventField::ns0("ClientUserId", Variant::String(UaString::null())),
        EventField::ns0("SessionId", Variant::NodeId(Box::new(session_id.clone()))),
    ]
}

/// The event of a session's creation (AuditCreateSessionEventType).
pub fn session_created_event(
    shared: &ServerShared,
    session_id: &NodeId,
    secure_channel_id: u32,
    client_certificate: &ByteString,
    revised_session_timeout_ms: f64,
    now: Now,
) -> Event {
    let ev = &shared.events;
    let mut fields = audit_fields(shared, session_id, now);
    fields.push(EventField::ns0(
        "SecureChannelId",
        Variant::String(UaString::from(secure_channel_id.to_string())),
    ));
    fields.push(EventField::ns0(
        "ClientCertificate",
        Variant::ByteString(client_certificate.clone()),
    ));
    fields.push(EventField::ns0(
        "RevisedSessionTimeout",
        Variant::Double(revised_session_timeout_ms),
    ));
    Event {
        event_id: ev.ids.next(),
        event_type: NodeId::ns0(ids::AUDIT_CREATE_SESSION_EVENT_TYPE),
        type_chain: Arc::clone(&ev.chains.audit_create_session),
        source_node: session_id.clone(),
        source_name: UaString::from("Session/CreateSession"),
        time: now.utc,
        receive_time: now.utc,
        message: LocalizedText::new("en", "Session created"),
        severity: 100,
        condition_id: None,
        fields,
        notifiers: Arc::clone(&ev.notifiers_server),
    }
}

/// The event of a session's end (AuditSessionEventType): closed by CloseSession, or
/// `timed_out`.
pub fn session_closed_event(
    shared: &ServerShared,
    session_id: &NodeId,
    timed_out: bool,
    now: Now,
) -> Event {
    let ev = &shared.events;
    let (name, msg) = if timed_out {
        ("Session/Timeout", "Session timed out")
    } else {
        ("Session/CloseSession", "Session closed")
    };
    Event {
        event_id: ev.ids.next(),
        event_type: NodeId::ns0(ids::AUDIT_SESSION_EVENT_TYPE),
        type_chain: Arc::clone(&ev.chains.audit_session),
        source_node: session_id.clone(),
        source_name: UaString::from(name),
        time: now.utc,
        receive_time: now.utc,
        message: LocalizedText::new("en", msg),
        severity: 100,
        condition_id: None,
        fields: audit_fields(shared, session_id, now),
        notifiers: Arc::clone(&ev.notifiers_server),
    }
}

/// Publishes [`session_created_event`] on the bus (call on the session's shard after a
/// successful CreateSession).
pub fn publish_session_created(
    shared: &ServerShared,
    session_id: &NodeId,
    secure_channel_id: u32,
    client_certificate: &ByteString,
    revised_session_timeout_ms: f64,
    now: Now,
) {
    shared.events.bus.publish_with(|| {
        session_created_event(
            shared,
            session_id,
            secure_channel_id,
            client_certificate,
            revised_session_timeout_ms,
            now,
        )
    });
}

/// Publishes [`session_closed_event`] on the bus (CloseSession, or the session timed out).
pub fn publish_session_closed(
    shared: &ServerShared,
    session_id: &NodeId,
    timed_out: bool,
    now: Now,
) {
    shared
        .events
        .bus
        .publish_with(|| session_closed_event(shared, session_id, timed_out, now));
}
