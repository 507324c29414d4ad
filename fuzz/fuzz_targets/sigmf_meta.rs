#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sonograph_fuzz::sigmf_meta(data));
