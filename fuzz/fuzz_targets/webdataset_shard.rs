#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| sonograph_fuzz::webdataset_shard(data));
