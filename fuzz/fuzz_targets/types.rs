//! NodeId, ExpandedNodeId, Variant, ExtensionObject, DataValue, DiagnosticInfo, QualifiedName and LocalizedText decoders (the first byte picks which), with a round trip.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uaring_fuzz::run_types(data));
