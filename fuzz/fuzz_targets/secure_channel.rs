//! The secure channel after the handshake, under SecurityPolicy None and Basic256Sha256
//! (Sign, SignAndEncrypt) with fixed keys: the input is mostly request bodies the driver
//! chunks, signs and encrypts, plus raw and hand-made chunks, renewals and time
//! (crypto/tests/support/secure_channel.rs describes the format).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uaring_fuzz::run_secure_channel(data));
