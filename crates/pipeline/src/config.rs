//! What a job is asked to do: every setting, checked once before anything runs.

use std::path::PathBuf;

use sonograph_dsp::{FeatureSpec, Precision};
use sonograph_io::decode::{ChannelMix, Limits};
use sonograph_io::manifest::SourceItem;
use sonograph_io::parquet::Dtype;
use sonograph_io::sigmf::{DataType, DEFAULT_MAX_SAMPLES};
use sonograph_io::Roots;

use sonograph_model::{VadParams, VadSegmenter};

use crate::error::JobError;
pub use crate::part_format::PartFormat;

/// Messages the writer's queue holds (the memory budget counts the rows in it).
pub(crate) const WRITER_QUEUE: usize = 8;

/// A job's augmentation: what, and the seed of its draws.
#[derive(Debug, Clone, PartialEq)]
pub struct AugmentConfig {
    pub options: crate::augment::AugmentOptions,
    pub seed: u64,
}

/// Everything a job needs to know.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// A directory, a NeMo `.jsonl` or a `.csv` manifest.
    pub source: PathBuf,
    /// A folder, or a folder in object storage (`s3://bucket/prefix`).
    pub out: PathBuf,
    /// Where an output in object storage is staged (its ledger, parts until uploaded).
    pub work_dir: Option<PathBuf>,
    pub spec: FeatureSpec,
    pub precision: Precision,
    pub mix: ChannelMix,
    /// Resource limits every file is decoded under (as `features` applies them).
    pub limits: Limits,
    /// Decode threads.
    pub workers: usize,
    /// Depth of the prefetch queue, in batches.
    pub prefetch: usize,
    /// Items per executor batch.
    pub batch_items: usize,
    /// Items longer than this are streamed and cut into pieces.
    pub max_seconds: f64,
    /// Length of a piece of a long item.
    pub chunk_seconds: f64,
    pub shard_index: usize,
    pub shard_count: usize,
    pub dtype: Dtype,
    /// A part is closed once its features reach this many MiB.
    pub part_mb: usize,
    pub part_format: PartFormat,
    /// Draw a progress bar (on a terminal); otherwise a log line every 10 s.
    pub progress: bool,
    /// How IQ recordings in the source are read.
    pub iq: IqOptions,
    /// A model run on every row's features (`extract --model`).
    pub model: Option<ModelConfig>,
    /// Cut items at their speech segments (Silero VAD) instead of fixed pieces: one row per
    /// segment (`extract --vad`).
    pub vad: Option<VadParams>,
    /// Augment every item before its features (`extract --augment`).
    pub augment: Option<AugmentConfig>,
    /// The onnxruntime library (for a model or VAD), where it is not found by itself.
    pub ort_lib: Option<PathBuf>,
    /// Where the job may open files (the source, what it lists, every item) and write its
    /// output: anywhere for the CLI and Python; beneath the data roots for the service.
    pub roots: Roots,
    /// How the door chose the devices (what `auto` measured), for the report.
    pub device_choice: Option<serde_json::Value>,
}

/// The model stage of a job.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// An ONNX encoder or CTC model (NeMo export: `audio_signal`, `length`).
    pub path: PathBuf,
    /// Where it runs: `cpu`, `gpu` or `gpu:N` (a CUDA device; builds with the `cuda` feature).
    pub device: String,
    /// Rows per model batch (padded to the longest).
    pub batch: usize,
    /// onnxruntime intra-op threads (0: one per core).
    pub threads: usize,
}

/// How IQ recordings are read (SigMF ones carry their datatype and rate; raw files do not).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IqOptions {
    /// Sample rate of raw IQ files, in Hz.
    pub sample_rate: Option<f64>,
    /// Datatype of raw IQ files whose extension does not say it.
    pub raw: Option<DataType>,
    /// Largest recording read, in complex samples.
    pub max_samples: u64,
}

impl Default for IqOptions {
    fn default() -> Self {
        IqOptions {
            sample_rate: None,
            raw: None,
            max_samples: DEFAULT_MAX_SAMPLES,
        }
    }
}

impl JobConfig {
    /// Defaults for everything but the source, the output and the spec.
    pub fn new(source: PathBuf, out: PathBuf, spec: FeatureSpec) -> Self {
        JobConfig {
            source,
            out,
            work_dir: None,
            spec,
            precision: Precision::default(),
            mix: ChannelMix::Mean,
            limits: Limits::default(),
            workers: defaults::workers(),
            prefetch: defaults::PREFETCH,
            batch_items: defaults::BATCH_ITEMS,
            max_seconds: defaults::MAX_SECONDS,
            chunk_seconds: defaults::CHUNK_SECONDS,
            shard_index: 0,
            shard_count: 1,
            dtype: Dtype::F32,
            part_mb: defaults::PART_MB,
            part_format: PartFormat::Parquet,
            progress: false,
            iq: IqOptions::default(),
            model: None,
            vad: None,
            augment: None,
            ort_lib: None,
            roots: Roots::anywhere(),
            device_choice: None,
        }
    }

    /// How much of `item` is decoded ([`decoded_seconds`]). With voice activity, every
    /// segment is an item of its own, padded or cut alone, and the whole file is read.
    pub(crate) fn decoded_seconds(&self, item: &SourceItem) -> Option<f64> {
        match self.vad {
            Some(_) => item.duration_s,
            None => {
                // Sped up by a factor, an item's fixed length is reached that much further in.
                let fastest = self
                    .augment
                    .as_ref()
                    .and_then(|a| a.options.speed.as_ref())
                    .map_or(1.0, |s| s.iter().copied().fold(1.0, f64::max));
                decoded_seconds(&self.spec, item.duration_s, fastest)
            }
        }
    }

    /// Checks every setting before anything runs: each size within its bounds (see
    /// [`bounds`]), and what the job may hold in memory at once within the machine's.
    pub fn check(&self) -> Result<(), JobError> {
        let config = self;
        let bad = |m: &str| Err(JobError::Config(m.to_string()));
        within("workers", config.workers, bounds::WORKERS)?;
        if config.augment.is_some() && config.spec.is_complex() {
            return bad("augment: audio only (this spec reads IQ recordings)");
        }
        within("prefetch", config.prefetch, bounds::PREFETCH)?;
        within("batch-items", config.batch_items, bounds::BATCH_ITEMS)?;
        // Queues are sized from these and allocated whole.
        if config.prefetch * config.batch_items > bounds::PREFETCHED_ITEMS {
            return Err(JobError::Config(format!(
                "prefetch × batch-items (the prefetch queue's items) may be at most {}",
                bounds::PREFETCHED_ITEMS
            )));
        }
        if let Some(m) = &config.model {
            within("model-batch", m.batch, bounds::MODEL_BATCH)?;
            within("model-threads", m.threads, bounds::MODEL_THREADS)?;
        }
        within("max-seconds", config.max_seconds, bounds::MAX_SECONDS)?;
        within("chunk-seconds", config.chunk_seconds, bounds::CHUNK_SECONDS)?;
        if config.chunk_seconds > config.max_seconds {
            return bad("chunk-seconds may not be above max-seconds");
        }
        let hop = config.spec.hop_length as f64 / f64::from(config.spec.sample_rate);
        if config.chunk_seconds < hop {
            return Err(JobError::Config(format!(
                "chunk-seconds {} is shorter than one hop of the spec ({hop} s)",
                config.chunk_seconds
            )));
        }
        if let Some(fixed) = config.spec.fixed_seconds().filter(|_| config.vad.is_none()) {
            // Such an item is decoded as one (a second past the length, for the resampler's
            // sake) and never cut in pieces, so it must fit under max-seconds.
            if config.max_seconds < fixed + 1.0 {
                return Err(JobError::Config(format!(
                    "max-seconds {} is under {} s: the spec pads or cuts every item to {fixed} \
                     s, and an item is decoded whole up to a second past that",
                    config.max_seconds,
                    fixed + 1.0
                )));
            }
        }
        within("part-mb", config.part_mb, bounds::PART_MB)?;
        check_shard(config.shard_index, config.shard_count)?;
        config.limits.validate().map_err(JobError::Config)?;
        if let Some(rate) = config.iq.sample_rate {
            within("sample-rate", rate, bounds::IQ_SAMPLE_RATE)?;
        }
        within("max-samples", config.iq.max_samples, bounds::IQ_MAX_SAMPLES)?;
        config
            .spec
            .validate()
            .map_err(|e| JobError::Config(e.to_string()))?;
        if let Some(vad) = &config.vad {
            let bad = |m: String| Err(JobError::Config(format!("vad: {m}")));
            vad.validate()
                .map_err(|e| JobError::Config(format!("vad: {e}")))?;
            if config.spec.is_complex() {
                return bad("voice activity is for audio, and the spec takes IQ".into());
            }
            let rate = config.spec.sample_rate;
            if VadSegmenter::model_rate(rate).is_none() {
                return bad(format!(
                    "Silero VAD takes 8000 Hz or a multiple of 16000 Hz, and the spec is at {rate} Hz"
                ));
            }
            // A segment is held whole until it ends: its length bounds the memory.
            if vad.max_speech_duration_s.is_nan() || vad.max_speech_duration_s > config.max_seconds
            {
                return bad(format!(
                    "segments may be up to {} s, over max-seconds {}: give max-speech-s at most that",
                    vad.max_speech_duration_s, config.max_seconds
                ));
            }
        }
        self.check_memory(crate::host::memory_bytes())
    }

    /// The bytes one item (or piece) holds at its longest: its samples and the features
    /// computed from them.
    pub fn item_bytes(&self, seconds: f64) -> u64 {
        let spec = &self.spec;
        let values_per_sample = if spec.is_complex() { 2.0 } else { 1.0 };
        // A fixed item length is what the devices hold of an item, however short it was.
        let samples = (seconds * f64::from(spec.sample_rate)).max(spec.fixed_samples as f64);
        let frames = (samples / spec.hop_length as f64 + 1.0).max(spec.fixed_frames as f64);
        let bytes = 4.0 * (samples * values_per_sample + frames * spec.frame_bins() as f64);
        bytes.min(u64::MAX as f64) as u64
    }

    /// What the job holds outside its memory budget at most, in bytes: an item at its longest
    /// in every decode worker, and the rows in the writer's queue. (Items handed on to the
    /// executors are held to [`memory_budget`](Self::memory_budget).)
    pub fn memory_in_flight(&self) -> u64 {
        self.item_bytes(self.max_seconds)
            .saturating_mul(self.workers as u64 + WRITER_QUEUE as u64)
    }

    /// Items of a source in object storage whose first read is under way before a worker
    /// takes them (`remote::RemoteObject::read_ahead`, at most its first MiB each): four a
    /// worker, and at least 16, so that the round trips of that many overlap the decoding.
    /// Two workers decoded 500 10-s clips from a loopback bucket in 1.87–2.22 s with it and
    /// 2.90 s without; four workers a core (the default before it) held 44–52 MB more
    /// (bench/RESULTS.md, 2026-12-02). Each read started stays held until its worker opens
    /// it — through the window, the work queue, and the worker — and the reads held are
    /// bounded (`remote::READ_AHEAD_OBJECTS`, the oldest let go): the window leaves room for
    /// the rest, or one read would be let go before its worker came and every clip fetched
    /// twice (from about 40 workers on). Past that many workers there is none.
    pub fn read_ahead_items(&self) -> usize {
        let held_behind = self.work_queue_items() + self.workers + 1;
        (4 * self.workers)
            .max(16)
            .min(sonograph_io::remote::READ_AHEAD_OBJECTS.saturating_sub(held_behind))
    }

    /// Entries waiting for a decode worker: two a worker.
    pub fn work_queue_items(&self) -> usize {
        2 * self.workers
    }

    /// The bytes the items between the decoders and the writer may hold at once: a quarter
    /// of the machine's memory (4 GiB where it is not known), and no more than the prefetch
    /// queue and a batch per executor could hold at their longest.
    pub fn memory_budget(&self, machine: Option<u64>) -> u64 {
        let queued = (self.prefetch * self.batch_items + 4 * self.batch_items) as u64;
        let most = self.item_bytes(self.max_seconds).saturating_mul(queued);
        machine.map_or(4 << 30, |m| m / 4).min(most)
    }

    fn check_memory(&self, machine: Option<u64>) -> Result<(), JobError> {
        let Some(machine) = machine else {
            return Ok(());
        };
        let need = self.memory_in_flight();
        if need > machine / 2 {
            let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
            return Err(JobError::Config(format!(
                "the job could hold {:.1} GiB in flight (an item of up to max-seconds {} s at \
                 {} Hz and its features in each of {} workers), over half of this machine's \
                 {:.1} GiB: lower workers or max-seconds",
                gib(need),
                self.max_seconds,
                self.spec.sample_rate,
                self.workers,
                gib(machine)
            )));
        }
        Ok(())
    }
}

/// The default of every option that has one.
pub mod defaults {
    pub const DEVICE: &str = "auto";
    pub const PREFETCH: usize = 4;
    pub const BATCH_ITEMS: usize = 16;
    pub const MAX_SECONDS: f64 = 60.0;
    pub const CHUNK_SECONDS: f64 = 30.0;
    pub const PART_MB: usize = 64;
    pub const MODEL_DEVICE: &str = "cpu";
    pub const MODEL_BATCH: usize = 16;
    pub const MODEL_THREADS: usize = 0;
    /// The preset of a job that names no spec.
    pub const PRESET: &str = "whisper";
    pub const MAX_DURATION: f64 = sonograph_io::Limits::DEFAULT.max_seconds;
    pub const MAX_CHANNELS: usize = sonograph_io::Limits::DEFAULT.max_channels;
    pub const MAX_SAMPLE_RATE: u32 = sonograph_io::Limits::DEFAULT.max_sample_rate;
    pub const MAX_SAMPLES: u64 = sonograph_io::sigmf::DEFAULT_MAX_SAMPLES;
    /// RF jobs (`rf-features`, `synth-iq`) run on the CPU unless a GPU is asked for.
    pub const RF_DEVICE: &str = "cpu";
    /// `rf-features`' Welch segment length.
    pub const NPERSEG: usize = 1024;
    /// `rf-features` rows per Parquet part: about 8 MB of features, 40 MB with the PSD of
    /// 1,024 bins.
    pub const RF_ROWS_PER_PART: usize = 8192;
    /// `synth-iq` recordings per Parquet part.
    pub const SYNTH_ROWS_PER_PART: u64 = 1000;
    /// `transcribe`'s model window, in seconds (Parakeet's and Whisper's).
    pub const WINDOW_S: f64 = 30.0;
    /// `transcribe`'s segments per model batch.
    pub const TRANSCRIBE_BATCH: usize = 8;

    /// Decode threads: one per core.
    pub fn workers() -> usize {
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(*super::bounds::WORKERS.end())
    }
}

/// The bounds of every size a job's options set, inclusive. Each is far beyond what a real job
/// needs and far below what would take a machine down: an option a request, a flag or a
/// Python call sets never decides an allocation that the job cannot make.
pub mod bounds {
    use std::ops::RangeInclusive;

    /// Decode threads.
    pub const WORKERS: RangeInclusive<usize> = 1..=1024;
    /// Depth of the prefetch queue, in batches.
    pub const PREFETCH: RangeInclusive<usize> = 1..=1024;
    /// Items per executor batch.
    pub const BATCH_ITEMS: RangeInclusive<usize> = 1..=4096;
    /// Items the prefetch queue holds (prefetch × batch-items).
    pub const PREFETCHED_ITEMS: usize = 65_536;
    pub const MODEL_BATCH: RangeInclusive<usize> = 1..=4096;
    /// onnxruntime threads (0: one per core).
    pub const MODEL_THREADS: RangeInclusive<usize> = 0..=1024;
    /// Seconds above which an item is cut into pieces (an item under it is held whole).
    pub const MAX_SECONDS: RangeInclusive<f64> = 1e-6..=3600.0;
    /// Seconds of one piece of a long item (IQ at MS/s is cut in milliseconds; a piece must
    /// also hold a hop of samples, which the check adds).
    pub const CHUNK_SECONDS: RangeInclusive<f64> = 1e-6..=3600.0;
    /// MiB of features per Parquet part.
    pub const PART_MB: RangeInclusive<usize> = 1..=16_384;
    pub const SHARD_COUNT: RangeInclusive<usize> = 1..=1_000_000;
    /// Hz of raw IQ recordings (up to 100 GHz: IQ is recorded at any rate).
    pub const IQ_SAMPLE_RATE: RangeInclusive<f64> = 1.0..=1e11;
    /// Complex samples of one IQ recording read whole.
    pub const IQ_MAX_SAMPLES: RangeInclusive<u64> = 1..=1 << 36;
}

/// A shard of a job: a count within bounds, an index below it.
pub(crate) fn check_shard(index: usize, count: usize) -> Result<(), JobError> {
    within("shard-count", count, bounds::SHARD_COUNT)?;
    if index >= count {
        return Err(JobError::Config(
            "shard-index must be below shard-count".into(),
        ));
    }
    Ok(())
}

/// `value` within `range`, or the job's one-line refusal naming the option (NaN is within no
/// range).
pub(crate) fn within<T: PartialOrd + std::fmt::Display>(
    name: &str,
    value: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<(), JobError> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(JobError::Config(format!(
        "{name} {value} is outside {}..={}",
        range.start(),
        range.end()
    )))
}

/// How much of an item of `duration_s` (all of it: `None`) is decoded for `spec`: all of it,
/// except under a fixed item length, which cuts the rest: then up to a second past that length,
/// so that a resampler's output is whole up to the cut (as when the whole file is resampled).
pub(crate) fn decoded_seconds(
    spec: &FeatureSpec,
    duration_s: Option<f64>,
    speed: f64,
) -> Option<f64> {
    let Some(fixed) = spec.fixed_seconds() else {
        return duration_s;
    };
    let most = fixed * speed + 1.0;
    Some(duration_s.map_or(most, |d| d.min(most)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(duration_s: Option<f64>) -> SourceItem {
        SourceItem {
            id: "a.wav".into(),
            path: "a.wav".into(),
            offset_s: 0.0,
            duration_s,
            member: None,
        }
    }

    #[test]
    fn reads_ahead_and_the_entries_behind_them_fit_what_the_store_holds() {
        let spec = FeatureSpec::preset("whisper").unwrap();
        let mut config = JobConfig::new("in".into(), "out".into(), spec);
        for workers in [1, 2, 8, 40, 63, 64, 84, 85, 100, 1024] {
            config.workers = workers;
            let window = config.read_ahead_items();
            let held = window + config.work_queue_items() + workers + 1;
            assert!(
                window == 0 || held <= sonograph_io::remote::READ_AHEAD_OBJECTS,
                "{workers} workers: a window of {window} holds {held}"
            );
        }
        config.workers = 2;
        assert_eq!(config.read_ahead_items(), 16);
        config.workers = 16;
        assert_eq!(config.read_ahead_items(), 64);
        config.workers = 64;
        assert_eq!(config.read_ahead_items(), 63);
    }

    #[test]
    fn a_fixed_length_spec_decodes_a_second_past_it_and_needs_that_under_max_seconds() {
        let spec = FeatureSpec::preset("whisper-hf").unwrap();
        let mut config = JobConfig::new("in".into(), "out".into(), spec);
        config.check().unwrap();
        assert_eq!(config.decoded_seconds(&item(None)), Some(31.0));
        assert_eq!(config.decoded_seconds(&item(Some(12.0))), Some(12.0));
        assert_eq!(config.decoded_seconds(&item(Some(40.0))), Some(31.0));
        config.max_seconds = 30.0;
        config.chunk_seconds = 30.0;
        assert!(
            matches!(config.check(), Err(JobError::Config(ref m)) if m.contains("max-seconds 30")),
            "{:?}",
            config.check()
        );
        let plain = JobConfig::new("in".into(), "out".into(), FeatureSpec::whisper(80));
        assert_eq!(plain.decoded_seconds(&item(None)), None);
        assert_eq!(plain.decoded_seconds(&item(Some(40.0))), Some(40.0));
    }
}
