#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sonograph_fuzz::raw_iq(data));
