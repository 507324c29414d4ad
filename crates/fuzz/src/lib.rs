//! sonograph-fuzz: one function per parser of outside input, `pub fn <target>(data: &[u8])`.
//!
//! Each feeds the bytes to the real parser through sonograph's public API, the way a command
//! or the service reads them, and asserts what a correct parser keeps: no panic, errors of
//! one line that name the file, decoded samples finite and within the limits, counts that
//! agree between the passes that take them, and parsed values that survive a round trip.
//! A broken invariant is a panic, which libFuzzer reports as a crash.
//!
//! The cargo-fuzz project in `fuzz/` calls these (one `fuzz_targets/<name>.rs` each), and
//! `tests/corpus.rs` replays the committed corpus and regressions through them on stable.
//!
//! | target | what it reads |
//! |---|---|
//! | [`audio`] | WAV/FLAC/MP3/OGG through `AudioReader` and extract's `ItemReader` |
//! | [`nemo_manifest`], [`csv_manifest`] | manifests through `parse_nemo`/`parse_csv` and `Source` |
//! | [`sigmf_meta`] | `.sigmf-meta` JSON through `SigmfMeta::from_json` and `IqReader` |
//! | [`sigmf_archive`] | `.sigmf` tar archives through `list_recordings` and `IqReader` |
//! | [`raw_iq`] | raw `.cf32`/`.ci16`/`.cu8`/`.ci8`/`.cf64` through `IqReader` |
//! | [`spec`] | `FeatureSpec` JSON and TOML, and the CPU extractor of a valid one |
//! | [`alert_rules`] | the `--alerts` TOML and the alert engine under its rules |
//! | [`job_request`] | the jobs API's request body, its plan and its paths |
//! | [`webdataset_shard`] | a WebDataset `.tar` shard through `Source`, `read_sample` and `AudioReader::open_item` |

mod alerts;
mod audio;
mod harness;
mod iq;
mod jobs;
mod manifest;
mod spec;
mod webdataset;

pub use alerts::alert_rules;
pub use audio::audio;
pub use iq::{raw_iq, sigmf_archive, sigmf_meta};
pub use jobs::job_request;
pub use manifest::{csv_manifest, nemo_manifest};
pub use spec::spec;
pub use webdataset::webdataset_shard;

/// A fuzz target: bytes in, a panic when an invariant breaks.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/` name it.
pub const TARGETS: &[(&str, Target)] = &[
    ("audio", audio),
    ("nemo_manifest", nemo_manifest),
    ("csv_manifest", csv_manifest),
    ("sigmf_meta", sigmf_meta),
    ("sigmf_archive", sigmf_archive),
    ("raw_iq", raw_iq),
    ("spec", spec),
    ("alert_rules", alert_rules),
    ("job_request", job_request),
    ("webdataset_shard", webdataset_shard),
];
