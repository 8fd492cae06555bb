//! The configuration file parser (TOML → [runtime] and core's ServerConfig, validated).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| uaring_fuzz::run_config(data));
