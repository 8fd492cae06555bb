//! Every service request decoder (the first byte picks which), with an encode/decode round trip.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uaring_fuzz::run_request(data));
