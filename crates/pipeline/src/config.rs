//! What a job is asked to do: every setting, checked once before anything runs.

use std::path::PathBuf;

use sonograph_dsp::{FeatureSpec, Precision};
use sonograph_io::decode::{ChannelMix, Limits};
use sonograph_io::parquet::Dtype;
use sonograph_io::sigmf::{DataType, DEFAULT_MAX_SAMPLES};

use sonograph_model::{VadParams, VadSegmenter};

use crate::error::JobError;

/// Everything a job needs to know.
#[derive(Debug, Clone)]
pub struct JobConfig {
    /// A directory, a NeMo `.jsonl` or a `.csv` manifest.
    pub source: PathBuf,
    pub out: PathBuf,
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
    /// Draw a progress bar (on a terminal); otherwise a log line every 10 s.
    pub progress: bool,
    /// How IQ recordings in the source are read.
    pub iq: IqOptions,
    /// A model run on every row's features (`extract --model`).
    pub model: Option<ModelConfig>,
    /// Cut items at their speech segments (Silero VAD) instead of fixed pieces: one row per
    /// segment (`extract --vad`).
    pub vad: Option<VadParams>,
    /// The onnxruntime library (for a model or VAD), where it is not found by itself.
    pub ort_lib: Option<PathBuf>,
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
            spec,
            precision: Precision::default(),
            mix: ChannelMix::Mean,
            limits: Limits::default(),
            workers: std::thread::available_parallelism().map_or(1, |n| n.get()),
            prefetch: 4,
            batch_items: 16,
            max_seconds: 60.0,
            chunk_seconds: 30.0,
            shard_index: 0,
            shard_count: 1,
            dtype: Dtype::F32,
            part_mb: 64,
            progress: false,
            iq: IqOptions::default(),
            model: None,
            vad: None,
            ort_lib: None,
        }
    }

    /// Checks every setting before anything runs.
    pub fn check(&self) -> Result<(), JobError> {
        let config = self;
        let bad = |m: &str| Err(JobError::Config(m.to_string()));
        if config.workers == 0 {
            return bad("--workers must be at least 1");
        }
        if config.prefetch == 0 || config.batch_items == 0 {
            return bad("--prefetch and --batch-items must be at least 1");
        }
        // Queues are sized from these and allocated whole: a request of the jobs API must not
        // abort the server with an allocation of petabytes.
        if config.prefetch.saturating_mul(config.batch_items) > 65_536 {
            return bad(
                "--prefetch × --batch-items (the prefetch queue's items) may be at most 65536",
            );
        }
        if let Some(m) = &config.model {
            if !(1..=4096).contains(&m.batch) || m.threads > 1024 {
                return bad("--model-batch must be 1 to 4096 and --model-threads at most 1024");
            }
        }
        if !(config.chunk_seconds.is_finite()
            && config.max_seconds.is_finite()
            && config.chunk_seconds > 0.0
            && config.max_seconds >= config.chunk_seconds)
        {
            return bad("--chunk-seconds must be finite, > 0 and not above --max-seconds");
        }
        if config.part_mb == 0 {
            return bad("--part-mb must be at least 1");
        }
        if config.shard_count == 0 || config.shard_index >= config.shard_count {
            return bad("--shard-index must be below --shard-count");
        }
        config
            .spec
            .validate()
            .map_err(|e| JobError::Config(e.to_string()))?;
        if let Some(vad) = &config.vad {
            let bad = |m: String| Err(JobError::Config(format!("--vad: {m}")));
            vad.validate()
                .map_err(|e| JobError::Config(format!("--vad: {e}")))?;
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
                    "segments may be up to {} s, over --max-seconds {}: give --max-speech-s at most that",
                    vad.max_speech_duration_s, config.max_seconds
                ));
            }
        }
        Ok(())
    }
}
