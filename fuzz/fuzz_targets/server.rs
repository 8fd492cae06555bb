//! The whole server from raw bytes: UA-TCP framing, secure channel (None), chunk
//! reassembly, request decoding, dispatch to every service, timers.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uaring_fuzz::run_server(data));
