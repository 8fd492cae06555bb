//! An event as the history store keeps it: its BaseEventType fields, its type and the
//! type's supertypes (as they were when it was raised, so a later read needs no address
//! space), its ConditionId and its type-specific fields, in OPC UA Binary. Decoding is
//! bounded like any message (the caller's `DecodeLimits`), and a record that does not
//! decode is an error, never a panic.

use std::sync::Arc;

use crate::encoding::{Decode, DecodeLimits, DecodeResult, Decoder, Encode};
use crate::types::{ByteString, DateTime, LocalizedText, NodeId, QualifiedName, UaString, Variant};

use super::{Event, EventField};

/// The format's version (the first byte).
const VERSION: u8 = 1;

/// Appends the record of `ev` to `out`. The notifiers are not kept: the store files an
/// event under each notifier it was reported on.
pub fn encode(ev: &Event, out: &mut Vec<u8>) {
    out.push(VERSION);
    ev.event_id.encode(out);
    ev.event_type.encode(out);
    ev.type_chain.to_vec().encode(out);
    ev.source_node.encode(out);
    ev.source_name.encode(out);
    ev.time.encode(out);
    ev.receive_time.encode(out);
    ev.message.encode(out);
    ev.severity.encode(out);
    match &ev.condition_id {
        Some(c) => {
            true.encode(out);
            c.encode(out);
        }
        None => false.encode(out),
    }
    (ev.fields.len() as i32).encode(out);
    for f in &ev.fields {
        f.path.encode(out);
        f.value.encode(out);
    }
}

/// The event of a record (with no notifiers). `Err` for a record of another version, a
/// truncated one, or one past `limits`.
pub fn decode(bytes: &[u8], limits: DecodeLimits) -> DecodeResult<Event> {
    let mut d = Decoder::new(bytes, limits);
    let version = u8::decode(&mut d)?;
    if version != VERSION {
        return Err(crate::encoding::DecodeError::decoding(
            "event record version",
        ));
    }
    let event_id = ByteString::decode(&mut d)?;
    let event_type = NodeId::decode(&mut d)?;
    let type_chain: Vec<NodeId> = Vec::decode(&mut d)?;
    let source_node = NodeId::decode(&mut d)?;
    let source_name = UaString::decode(&mut d)?;
    let time = DateTime::decode(&mut d)?;
    let receive_time = DateTime::decode(&mut d)?;
    let message = LocalizedText::decode(&mut d)?;
    let severity = u16::decode(&mut d)?;
    let condition_id = if bool::decode(&mut d)? {
        Some(NodeId::decode(&mut d)?)
    } else {
        None
    };
    let max = d.limits().max_array_len;
    let n = d.read_length(max, 8, "event fields")?.unwrap_or(0);
    let mut fields = Vec::with_capacity(n);
    for _ in 0..n {
        let path: Vec<QualifiedName> = Vec::decode(&mut d)?;
        let value = Variant::decode(&mut d)?;
        fields.push(EventField { path, value });
    }
    Ok(Event {
        event_id,
        event_type,
        type_chain: type_chain.into(),
        source_node,
        source_name,
        time,
        receive_time,
        message,
        severity,
        condition_id,
        fields,
        notifiers: Arc::from(Vec::<NodeId>::new()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_survives_its_record_and_a_damaged_record_is_an_error() {
        let ev = Event {
            event_id: ByteString::from(&[7u8; 16][..]),
            event_type: NodeId::string(1, "DemoEventType"),
            type_chain: vec![NodeId::string(1, "DemoEventType"), NodeId::ns0(2041)].into(),
            source_node: NodeId::string(1, "Demo.Events"),
            source_name: UaString::from("Events"),
            time: DateTime(133_000_000_000_000_000),
            receive_time: DateTime(133_000_000_000_000_100),
            message: LocalizedText::text("Demo event 3"),
            severity: 300,
            condition_id: Some(NodeId::string(1, "Demo.Events.Alarm")),
            fields: vec![EventField {
                path: vec![QualifiedName::new(1, "Sequence")],
                value: Variant::UInt32(3),
            }],
            notifiers: vec![NodeId::ns0(2253)].into(),
        };
        let mut b = Vec::new();
        encode(&ev, &mut b);
        let back = decode(&b, DecodeLimits::default()).unwrap();
        assert_eq!(
            back,
            Event {
                notifiers: Arc::from(Vec::<NodeId>::new()),
                ..ev
            }
        );
        for cut in 0..b.len() {
            assert!(
                decode(&b[..cut], DecodeLimits::default()).is_err(),
                "cut at {cut}"
            );
        }
        let mut other = b.clone();
        other[0] = 9;
        assert!(decode(&other, DecodeLimits::default()).is_err());
    }
}
