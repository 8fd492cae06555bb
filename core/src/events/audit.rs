//! The session events: [`publish_session_created`] / [`publish_session_closed`] raise
//! AuditCreateSessionEventType / AuditSessionEventType events (Part 5 §6.4.7, §6.4.8) with
//! SourceNode = the SessionId and SourceName `Session/CreateSession`, `Session/CloseSession`
//! or `Session/Timeout`. They are the only audit events this server raises, which is why
//! Server.Auditing stays false.

use std::sync::Arc;

use super::ServerEvents;
use super::{ids, Event, EventField};
use crate::types::{ByteString, LocalizedText, NodeId, UaString, Variant};
use crate::Now;

fn audit_fields(ev: &ServerEvents, session_id: &NodeId, now: Now) -> Vec<EventField> {
    vec![
        EventField::ns0("ActionTimeStamp", Variant::DateTime(now.utc)),
        EventField::ns0("Status", Variant::Boolean(true)),
        EventField::ns0("ServerId", Variant::String(ev.server_uri.clone())),
        EventField::ns0("ClientAuditEntryId", Variant::String(UaString::null())),
        EventField::ns0("ClientUserId", Variant::String(UaString::null())),
        EventField::ns0("SessionId", Variant::NodeId(Box::new(session_id.clone()))),
    ]
}

/// The event of a session's creation (AuditCreateSessionEventType).
pub fn session_created_event(
    ev: &ServerEvents,
    session_id: &NodeId,
    secure_channel_id: u32,
    client_certificate: &ByteString,
    revised_session_timeout_ms: f64,
    now: Now,
) -> Event {
    let mut fields = audit_fields(ev, session_id, now);
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
    ev: &ServerEvents,
    session_id: &NodeId,
    timed_out: bool,
    now: Now,
) -> Event {
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
        fields: audit_fields(ev, session_id, now),
        notifiers: Arc::clone(&ev.notifiers_server),
    }
}

/// Publishes [`session_created_event`] on the bus (call on the session's shard after a
/// successful CreateSession).
pub fn publish_session_created(
    ev: &ServerEvents,
    session_id: &NodeId,
    secure_channel_id: u32,
    client_certificate: &ByteString,
    revised_session_timeout_ms: f64,
    now: Now,
) {
    ev.bus.publish_with(|| {
        session_created_event(
            ev,
            session_id,
            secure_channel_id,
            client_certificate,
            revised_session_timeout_ms,
            now,
        )
    });
}

/// Publishes [`session_closed_event`] on the bus (CloseSession, or the session timed out).
pub fn publish_session_closed(ev: &ServerEvents, session_id: &NodeId, timed_out: bool, now: Now) {
    ev.bus
        .publish_with(|| session_closed_event(ev, session_id, timed_out, now));
}
