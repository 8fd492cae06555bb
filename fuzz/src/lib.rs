//! Shared set-up of the uaring fuzz targets (see docs/Fuzzing.md).
//!
//! Every target is deterministic: the server's time is a fixed start plus explicit jumps
//! and its random numbers come from a fixed seed, so a crash input replays exactly. The
//! whole-server driver is core/tests/support/replay.rs, shared with core's regression test
//! (core/tests/fuzz_regressions.rs), which replays fuzz/regressions/.

#[path = "../../core/tests/support/replay.rs"]
mod replay;
pub use replay::{run_server, shard, shared, start, REQUEST_IDS};

// The secure channel after the handshake (None, Basic256Sha256 with fixed keys); shared
// with crypto/tests/fuzz_secure_channel.rs.
#[path = "../../crypto/tests/support/secure_channel.rs"]
mod secure_channel;
pub use secure_channel::run_secure_channel;

use uaring_core::config::TransportLimits;


use uaring_core::encoding::{Decode, Decoder, Encode};
use uaring_core::generated::messages::Request;
use uaring_core::NodeId;


/// The server's decode limits (what a request body is decoded under).
pub fn decode_limits() -> uaring_core::DecodeLimits {
    TransportLimits::default().decode
}

/// Every request decoder: the first byte picks the request type, the rest is its body.
/// A decoded request must encode to bytes that decode to the same encoding again (the
/// encoder and decoder agree on everything the decoder accepted).
pub fn run_request(data: &[u8]) {
    let Some((&k, body)) = data.split_first() else { return };
    let id = REQUEST_IDS[k as usize % REQUEST_IDS.len()];
    let type_id = NodeId::ns0(id);
    let mut d = Decoder::new(body, decode_limits());
    let Ok(Some(req)) = Request::decode_body(&type_id, &mut d) else { return };
    let mut once = Vec::new();
    req.encode_body(&mut once);
    let mut d = Decoder::new(&once, decode_limits());
    let again = match Request::decode_body(&type_id, &mut d) {
        Ok(Some(r)) => r,
        other => panic!("a re-encoded {} does not decode: {other:?}", req.name()),
    };
    let mut twice = Vec::new();
    again.encode_body(&mut twice);
    assert_eq!(once, twice, "{} does not round-trip", req.name());
}

/// Decodes one `T`; if it decodes, checks that its encoding is stable.
fn round_trip<T: Decode + Encode + std::fmt::Debug>(body: &[u8]) {
    let mut d = Decoder::new(body, decode_limits());
    let Ok(v) = T::decode(&mut d) else { return };
    let mut once = Vec::new();
    v.encode(&mut once);
    let mut d = Decoder::new(&once, decode_limits());
    let again = T::decode(&mut d).unwrap_or_else(|e| panic!("re-encoded {v:?} does not decode: {e:?}"));
    let mut twice = Vec::new();
    again.encode(&mut twice);
    assert_eq!(once, twice, "{v:?} does not round-trip");
}

/// The built-in type decoders that recurse or carry lengths: the first byte picks
/// NodeId, ExpandedNodeId, Variant, ExtensionObject, DataValue, DiagnosticInfo,
/// QualifiedName, LocalizedText.
pub fn run_types(data: &[u8]) {
    use uaring_core::types::*;
    let Some((&k, body)) = data.split_first() else { return };
    match k % 8 {
        0 => round_trip::<NodeId>(body),
        1 => round_trip::<ExpandedNodeId>(body),
        2 => round_trip::<Variant>(body),
        3 => round_trip::<ExtensionObject>(body),
        4 => round_trip::<DataValue>(body),
        5 => round_trip::<DiagnosticInfo>(body),
        6 => round_trip::<QualifiedName>(body),
        _ => round_trip::<LocalizedText>(body),
    }
}

/// The configuration file parser: TOML text → core's ServerConfig (what the `uaring`
/// binary reads from every section but `[runtime]`), validated. Errors are fine; panics are
/// not; a configuration that validated validates again after a TOML round trip.
pub fn run_config(data: &[u8]) {
    use uaring_core::config::ServerConfig;
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(table) = text.parse::<toml::Table>() else { return };
    let Ok(config) = table.try_into::<ServerConfig>() else { return };
    if config.validate().is_err() {
        return;
    }
    let again: ServerConfig = toml::to_string(&config)
        .ok()
        .and_then(|t| toml::from_str(&t).ok())
        .unwrap_or_else(|| panic!("a valid configuration does not survive a TOML round trip: {config:?}"));
    again.validate().expect("a validated configuration validates again");
}
