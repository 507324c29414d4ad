//! `transcribe`'s options as every door takes them: its flags (clap, feature `cli`), a request
//! of the service by the flags' names (serde), Python's keyword arguments. Each default is
//! written once, here or in [`TranscribeJob::new`]; `plan` checks every option in its own name.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::defaults;
use crate::error::JobError;
use crate::options::{LimitOptions, VadOptions};
use crate::rf_options::shard;
use crate::transcribe::{SegmentMode, TranscribeJob, TranscriptFormat, DEFAULT_PART_ITEMS};

/// Every option of a `transcribe` job (`sonograph transcribe`, a request of kind
/// `transcribe`, `sonograph.transcribe`), by the names of its flags.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct TranscribeOptions {
    /// An audio file, a folder (walked), or a manifest (NeMo .jsonl, or .csv).
    #[cfg_attr(feature = "cli", arg(value_name = "SOURCE"))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub source: PathBuf,
    /// The model folder: a NeMo Parakeet/FastConformer export as onnx-asr reads it (CTC:
    /// model.onnx; TDT/RNN-T: encoder-model.onnx + decoder_joint-model.onnx; vocab.txt,
    /// config.json).
    #[cfg_attr(feature = "cli", arg(long, required = true))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub model: Option<PathBuf>,
    /// Output folder: parts of JSON lines (or Parquet with format parquet, or an out ending
    /// in .parquet), the ledger and report.json under __sonograph/. The same job run again
    /// resumes; shards share it.
    #[cfg_attr(feature = "cli", arg(long))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub out: PathBuf,
    /// JSON lines (id, source, start, end, start_s, end_s, text, tokens, timestamps) or
    /// Parquet.
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub format: Option<TranscriptFormat>,
    /// Items per part (an item's transcripts never span two).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_PART_ITEMS))]
    pub items_per_part: usize,
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_INDEX"))]
    pub shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_COUNT"))]
    pub shard_count: Option<usize>,
    /// How items longer than window-s are cut.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t))]
    pub segment: SegmentMode,
    /// The model's window, in seconds: an item up to this long (by its header) is transcribed
    /// whole; a longer one is cut (at speech with segment vad, in windows of this length with
    /// segment fixed).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::WINDOW_S))]
    pub window_s: f64,
    /// Speech where the probability is at least this (default 0.5).
    #[cfg_attr(feature = "cli", arg(long))]
    pub threshold: Option<f64>,
    /// Silence (within speech) below this; default max(threshold − 0.15, 0.01).
    #[cfg_attr(feature = "cli", arg(long))]
    pub neg_threshold: Option<f64>,
    /// Segments must be longer than this (default 250).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_speech_ms: Option<f64>,
    /// Segments longer than this are cut (default: never).
    #[cfg_attr(feature = "cli", arg(long))]
    pub max_speech_s: Option<f64>,
    /// Silence this long ends a segment (default 100).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_silence_ms: Option<f64>,
    /// Padding on each side of a segment (default 30).
    #[cfg_attr(feature = "cli", arg(long))]
    pub speech_pad_ms: Option<f64>,
    /// Silences longer than this are where a segment over max-speech-s may be cut
    /// (default 98).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_silence_at_max_speech_ms: Option<f64>,
    /// Cut a segment over max-speech-s at its longest silence (true, the default) or its last.
    #[cfg_attr(feature = "cli", arg(long))]
    pub use_max_poss_sil_at_max_speech: Option<bool>,
    /// Segments per model batch (the batcher splits a batch that runs out of memory).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::TRANSCRIBE_BATCH))]
    pub batch: usize,
    /// onnxruntime threads (0, the default: one per core).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::MODEL_THREADS))]
    pub threads: usize,
    /// Use one channel (0-based) instead of the mean of all channels.
    #[cfg_attr(feature = "cli", arg(long))]
    pub channel: Option<usize>,
    /// Longest file accepted, in seconds of audio.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_MAX_DURATION", default_value_t = defaults::MAX_DURATION)
    )]
    pub max_duration: f64,
    /// Most channels accepted.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_MAX_CHANNELS", default_value_t = defaults::MAX_CHANNELS)
    )]
    pub max_channels: usize,
    /// Highest sample rate accepted, in Hz.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_MAX_SAMPLE_RATE", default_value_t = defaults::MAX_SAMPLE_RATE)
    )]
    pub max_sample_rate: u32,
}

impl Default for TranscribeOptions {
    fn default() -> Self {
        TranscribeOptions {
            source: PathBuf::new(),
            model: None,
            out: PathBuf::new(),
            format: None,
            items_per_part: DEFAULT_PART_ITEMS,
            shard_index: None,
            shard_count: None,
            segment: SegmentMode::default(),
            window_s: defaults::WINDOW_S,
            threshold: None,
            neg_threshold: None,
            min_speech_ms: None,
            max_speech_s: None,
            min_silence_ms: None,
            speech_pad_ms: None,
            min_silence_at_max_speech_ms: None,
            use_max_poss_sil_at_max_speech: None,
            batch: defaults::TRANSCRIBE_BATCH,
            threads: defaults::MODEL_THREADS,
            channel: None,
            max_duration: defaults::MAX_DURATION,
            max_channels: defaults::MAX_CHANNELS,
            max_sample_rate: defaults::MAX_SAMPLE_RATE,
        }
    }
}

impl TranscribeOptions {
    /// The job these options describe, every option checked (a bad one is a
    /// [`JobError::Config`] naming it); `env` gives the batch system's shard variables. The
    /// onnxruntime library is the door's to find (`TranscribeJob::ort_lib`).
    pub fn plan(&self, env: impl Fn(&str) -> Option<String>) -> Result<TranscribeJob, JobError> {
        let required = |path: &std::path::Path, name: &str| {
            if path.as_os_str().is_empty() {
                return Err(JobError::Config(format!("{name} is required")));
            }
            Ok(())
        };
        required(&self.source, "source")?;
        required(&self.out, "out")?;
        let model = self.model.clone().unwrap_or_default();
        required(&model, "model")?;
        let (shard_index, shard_count) = shard(self.shard_index, self.shard_count, env)?;
        let vad = VadOptions {
            threshold: self.threshold,
            neg_threshold: self.neg_threshold,
            min_speech_ms: self.min_speech_ms,
            max_speech_s: self.max_speech_s,
            min_silence_ms: self.min_silence_ms,
            speech_pad_ms: self.speech_pad_ms,
            min_silence_at_max_speech_ms: self.min_silence_at_max_speech_ms,
            use_max_poss_sil_at_max_speech: self.use_max_poss_sil_at_max_speech,
        };
        if self.segment == SegmentMode::Fixed && vad.any() {
            // Fixed windows use no VAD: its options would be ignored (yet recorded in the
            // output's shape, refusing a resume without them).
            return Err(JobError::Config(
                "the VAD options (threshold, min-speech-ms, ...) need segment vad".into(),
            ));
        }
        let limits = LimitOptions {
            max_duration: self.max_duration,
            max_channels: self.max_channels,
            max_sample_rate: self.max_sample_rate,
        }
        .limits()
        .map_err(JobError::Config)?;
        // An out named .parquet asks for Parquet.
        let by_name = self.out.extension().and_then(|e| e.to_str()) == Some("parquet");
        let job = TranscribeJob {
            format: self.format.unwrap_or(if by_name {
                TranscriptFormat::Parquet
            } else {
                TranscriptFormat::Jsonl
            }),
            segment: self.segment,
            window_s: self.window_s,
            vad: vad.params(sonograph_model::VadParams::default().max_speech_duration_s),
            batch: self.batch,
            threads: self.threads,
            channel: self.channel,
            limits,
            shard_index,
            shard_count,
            part_items: self.items_per_part,
            ..TranscribeJob::new(self.source.clone(), self.out.clone(), model)
        };
        job.check()?;
        Ok(job)
    }
}

impl TranscribeJob {
    /// What the job will do, every default filled in: the same for the same options through
    /// any door.
    pub fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "transcribe",
            "source": self.source,
            "out": self.out,
            "model": self.model,
            "format": self.format,
            "items_per_part": self.part_items,
            "segment": self.segment,
            "window_s": self.window_s,
            // JSON has no infinity: a max-speech-s of "never" is null.
            "vad": serde_json::to_value(self.vad).unwrap_or_default(),
            "batch": self.batch,
            "threads": self.threads,
            "channel": self.channel,
            "max_duration": self.limits.max_seconds,
            "max_channels": self.limits.max_channels,
            "max_sample_rate": self.limits.max_sample_rate,
            "shard_index": self.shard_index,
            "shard_count": self.shard_count,
        })
    }
}
