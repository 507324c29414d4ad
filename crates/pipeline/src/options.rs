//! A dataset job's options as every door takes them: the CLI flattens them into `extract`'s
//! flags (clap, feature `cli`), the service deserialises a request of them (serde, by the flags'
//! names), Python converts `extract`'s keyword arguments to them. Each default is written once,
//! in `defaults`; [`JobOptions::plan`] checks them all, in the options' own names, and turns
//! them into the job's [`JobConfig`] and the devices it asks for.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sonograph_dsp::{FeatureSpec, Precision};
use sonograph_io::decode::{ChannelMix, Limits};
use sonograph_io::parquet::Dtype;
use sonograph_io::sigmf::DataType;
use sonograph_model::{ModelDevice, VadParams};

use crate::augment::AugmentOptions;
use crate::config::{defaults, AugmentConfig, IqOptions, JobConfig, ModelConfig, PartFormat};
use crate::error::JobError;

/// The arithmetic of the spectral core.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum PrecisionChoice {
    /// f32 for Whisper's presets (Whisper computes in f32), f64 for every other spec.
    #[default]
    Auto,
    F32,
    F64,
}

impl PrecisionChoice {
    pub fn for_spec(self, spec: &FeatureSpec) -> Precision {
        match self {
            PrecisionChoice::Auto => spec.default_precision(),
            PrecisionChoice::F32 => Precision::F32,
            PrecisionChoice::F64 => Precision::F64,
        }
    }
}

/// How the features column is stored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DtypeChoice {
    #[default]
    F32,
    F16,
}

impl From<DtypeChoice> for Dtype {
    fn from(d: DtypeChoice) -> Dtype {
        match d {
            DtypeChoice::F32 => Dtype::F32,
            DtypeChoice::F16 => Dtype::F16,
        }
    }
}

/// The sample type of raw IQ files whose extension does not say it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum IqFormat {
    Cf32,
    Ci16,
    Cu8,
    Ci8,
}

impl IqFormat {
    pub fn datatype(self) -> DataType {
        match self {
            IqFormat::Cf32 => DataType::Cf32Le,
            IqFormat::Ci16 => DataType::Ci16Le,
            IqFormat::Cu8 => DataType::Cu8,
            IqFormat::Ci8 => DataType::Ci8,
        }
    }
}

/// A spec given by value: a file (JSON or TOML, by its extension; what the command line
/// takes) or the spec itself (what `sonograph presets NAME` prints; a request or a Python
/// dict). A feature spec by default; `synth-iq` takes its dataset's spec the same way.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SpecSource<S = FeatureSpec> {
    Inline(Box<S>),
    File(PathBuf),
}

/// A spec that can be read from a file's text.
pub trait SpecText: Sized + Clone {
    fn parse_json(text: &str) -> Result<Self, String>;
    fn parse_toml(text: &str) -> Result<Self, String>;
}

impl SpecText for FeatureSpec {
    fn parse_json(text: &str) -> Result<Self, String> {
        FeatureSpec::from_json(text).map_err(|e| e.to_string())
    }
    fn parse_toml(text: &str) -> Result<Self, String> {
        FeatureSpec::from_toml(text).map_err(|e| e.to_string())
    }
}

impl SpecText for sonograph_rf::SynthSpec {
    fn parse_json(text: &str) -> Result<Self, String> {
        Self::from_json(text).map_err(|e| e.to_string())
    }
    fn parse_toml(text: &str) -> Result<Self, String> {
        Self::from_toml(text).map_err(|e| e.to_string())
    }
}

/// A string is a file; anything else is the spec itself, whose own errors are kept (serde's
/// untagged enums would only say that nothing matched).
impl<'de, S: serde::de::DeserializeOwned> Deserialize<'de> for SpecSource<S> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(path) => Ok(SpecSource::File(path.into())),
            spec => serde_json::from_value::<S>(spec)
                .map(|s| SpecSource::Inline(Box::new(s)))
                .map_err(D::Error::custom),
        }
    }
}

impl<S> std::str::FromStr for SpecSource<S> {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(SpecSource::File(PathBuf::from(s)))
    }
}

impl<S: SpecText> SpecSource<S> {
    pub(crate) fn load(&self) -> Result<S, String> {
        match self {
            SpecSource::Inline(spec) => Ok((**spec).clone()),
            SpecSource::File(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("{}: cannot read spec: {e}", path.display()))?;
                let parsed = match path.extension().and_then(|e| e.to_str()) {
                    Some("toml") => S::parse_toml(&text),
                    _ => S::parse_json(&text),
                };
                parsed.map_err(|e| format!("{}: {e}", path.display()))
            }
        }
    }

    /// A file: what a service must refuse (a request would read the server's files).
    pub fn is_file(&self) -> bool {
        matches!(self, SpecSource::File(_))
    }
}

/// The feature a command computes: a preset or a spec (Whisper's when neither), its mel
/// bands, the arithmetic. `extract` takes it within [`JobOptions`]; `features`, `bench` and
/// Python's `features` on their own.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SpecChoice {
    /// Named preset (see `sonograph presets`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PRESET", conflicts_with = "spec")
    )]
    pub preset: Option<String>,
    /// A FeatureSpec in JSON or TOML (by extension).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_SPEC", value_name = "FILE")
    )]
    pub spec: Option<SpecSource>,
    /// Override the number of mel bands.
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_N_MELS"))]
    pub n_mels: Option<usize>,
    /// Arithmetic of the spectral core, on the CPU and on GPUs with f64 in shaders (others
    /// compute in f32 and say so); outputs are f32 either way. `auto`: f32 for Whisper's
    /// presets (Whisper computes in f32; the golden suite holds), f64 for every other spec.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PRECISION", value_enum, default_value_t)
    )]
    pub precision: PrecisionChoice,
}

impl SpecChoice {
    /// The spec, checked, and the precision to compute it in.
    pub fn resolve(&self) -> Result<(FeatureSpec, Precision), String> {
        let mut spec = match (&self.preset, &self.spec) {
            (Some(_), Some(_)) => return Err("preset and spec are exclusive".into()),
            (Some(name), None) => FeatureSpec::preset(name).map_err(|e| e.to_string())?,
            (None, Some(source)) => source.load()?,
            (None, None) => FeatureSpec::preset(defaults::PRESET).expect("a preset"),
        };
        if let Some(n) = self.n_mels {
            spec.n_mels = n;
        }
        spec.validate().map_err(|e| format!("spec: {e}"))?;
        let precision = self.precision.for_spec(&spec);
        Ok((spec, precision))
    }
}

/// Resource limits against hostile files, for every command that decodes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LimitOptions {
    /// Longest file accepted, in seconds of audio; a header that declares more is refused
    /// before anything is decoded, and a stream that runs longer stops with an error.
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

impl Default for LimitOptions {
    fn default() -> Self {
        LimitOptions {
            max_duration: defaults::MAX_DURATION,
            max_channels: defaults::MAX_CHANNELS,
            max_sample_rate: defaults::MAX_SAMPLE_RATE,
        }
    }
}

impl LimitOptions {
    /// The limits, checked.
    pub fn limits(&self) -> Result<Limits, String> {
        let limits = Limits {
            max_seconds: self.max_duration,
            max_channels: self.max_channels,
            max_sample_rate: self.max_sample_rate,
        };
        limits.validate()?;
        Ok(limits)
    }
}

/// Every option of a dataset job (`sonograph extract`, `POST /api/v1/jobs`,
/// `sonograph.extract`), by the names of `extract`'s flags. A request or a keyword argument
/// that is not one of them is refused, never ignored.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct JobOptions {
    /// A directory (walked recursively), a NeMo manifest (.jsonl) or a CSV manifest
    /// (id,path[,offset,duration]); for IQ specs, a SigMF recording (.sigmf-meta/.sigmf-data),
    /// a .sigmf archive, a raw IQ file (.cf32, .ci16, .cu8, .ci8), or a folder of them.
    #[cfg_attr(feature = "cli", arg(value_name = "SOURCE"))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub source: PathBuf,
    /// Output folder: Parquet parts, and __sonograph/ (ledger, report).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_OUT"))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub out: PathBuf,
    /// Where a job whose out is in object storage (s3://, gs://, az://) keeps its ledger, and
    /// each part until it is uploaded: the same folder resumes the job after a crash.
    /// Default: a folder named after the output under the user's cache folder.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_WORK_DIR", value_name = "DIR")
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub work_dir: Option<PathBuf>,
    /// Named preset (see `sonograph presets`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PRESET", conflicts_with = "spec")
    )]
    pub preset: Option<String>,
    /// A FeatureSpec in JSON or TOML (by extension).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_SPEC", value_name = "FILE")
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub spec: Option<SpecSource>,
    /// Override the number of mel bands.
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_N_MELS"))]
    pub n_mels: Option<usize>,
    /// Arithmetic of the spectral core (see `features --help`).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PRECISION", value_enum, default_value_t)
    )]
    pub precision: PrecisionChoice,
    /// Where features are computed: auto (the best hardware GPU, else the CPU), cpu, gpu,
    /// gpu:N, a list such as gpu:0,gpu:1, or all (every adapter and the CPU; batches go to
    /// whichever device is free first).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_DEVICE", default_value = defaults::DEVICE)
    )]
    pub device: String,
    /// GPU memory budget per device: "6GiB", "512MiB" or a share such as "80%".
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_GPU_MEMORY"))]
    pub gpu_memory: Option<String>,
    /// Decode threads (default: the cores; a source in object storage is fetched ahead of
    /// them, four items a worker).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_WORKERS"))]
    pub workers: Option<usize>,
    /// Depth of the prefetch queue, in batches.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PREFETCH", default_value_t = defaults::PREFETCH)
    )]
    pub prefetch: usize,
    /// Items per batch handed to a device.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_BATCH_ITEMS", default_value_t = defaults::BATCH_ITEMS)
    )]
    pub batch_items: usize,
    /// Items longer than this are streamed and cut into pieces.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_MAX_SECONDS", default_value_t = defaults::MAX_SECONDS)
    )]
    pub max_seconds: f64,
    /// Length of each piece of a long item.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_CHUNK_SECONDS", default_value_t = defaults::CHUNK_SECONDS)
    )]
    pub chunk_seconds: f64,
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_INDEX"))]
    pub shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_COUNT"))]
    pub shard_count: Option<usize>,
    /// Storage type of the features column.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_DTYPE", value_enum, default_value_t)
    )]
    pub dtype: DtypeChoice,
    /// Close a Parquet part when its features reach this many MiB.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PART_MB", default_value_t = defaults::PART_MB)
    )]
    pub part_mb: usize,
    /// What the parts are: Parquet, or WebDataset tar shards (KEY.npy and KEY.json per row).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_PART_FORMAT", value_enum, default_value_t)
    )]
    pub part_format: PartFormat,
    /// Use one channel (0-based) instead of the mean of all channels.
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_CHANNEL"))]
    pub channel: Option<usize>,
    /// Longest file accepted, in seconds of audio; a header that declares more is refused
    /// before anything is decoded, and a stream that runs longer stops with an error.
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
    /// Sample rate of raw IQ files, in Hz. With an IQ spec it is the spec's rate too (IQ is
    /// never resampled, so a recording at another rate fails).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SAMPLE_RATE"))]
    pub sample_rate: Option<f64>,
    /// Sample type of raw IQ files whose extension does not say it.
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_FORMAT", value_enum))]
    pub format: Option<IqFormat>,
    /// Largest IQ recording read (complex samples).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_MAX_SAMPLES", default_value_t = defaults::MAX_SAMPLES)
    )]
    pub max_samples: u64,
    /// Run this ONNX model on every row's features (a NeMo encoder or CTC export: inputs
    /// `audio_signal` and `length`) and write its outputs in the columns model_frames,
    /// model_dim and model_outputs. Needs onnxruntime (see the README).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_MODEL"))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>))]
    pub model: Option<PathBuf>,
    /// Where the model runs: cpu (the default), or gpu / gpu:N (onnxruntime's CUDA provider:
    /// a build with the `cuda` feature, and onnxruntime-gpu loaded).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_MODEL_DEVICE"))]
    pub model_device: Option<String>,
    /// Rows per model batch (padded to the longest, with lengths; default 16).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_MODEL_BATCH"))]
    pub model_batch: Option<usize>,
    /// onnxruntime threads for the model (0, the default: one per core).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_MODEL_THREADS"))]
    pub model_threads: Option<usize>,
    /// Cut items at their speech segments (Silero VAD, as `sonograph vad` finds them, on the
    /// audio at the spec's rate) instead of fixed pieces: one row per segment, with its offset
    /// and duration; an item without speech is done with no row. Needs onnxruntime.
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_VAD"))]
    pub vad: bool,
    /// With vad: speech where the probability is at least this (default 0.5).
    #[cfg_attr(feature = "cli", arg(long))]
    pub threshold: Option<f64>,
    /// With vad: silence (within speech) below this; default max(threshold − 0.15, 0.01).
    #[cfg_attr(feature = "cli", arg(long))]
    pub neg_threshold: Option<f64>,
    /// With vad: segments must be longer than this (default 250).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_speech_ms: Option<f64>,
    /// With vad: segments longer than this are cut (default, and at most: max-seconds).
    #[cfg_attr(feature = "cli", arg(long))]
    pub max_speech_s: Option<f64>,
    /// With vad: silence this long ends a segment (default 100).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_silence_ms: Option<f64>,
    /// With vad: padding on each side of a segment (default 30).
    #[cfg_attr(feature = "cli", arg(long))]
    pub speech_pad_ms: Option<f64>,
    /// With vad: silences longer than this are where a segment over max-speech-s may be cut
    /// (default 98).
    #[cfg_attr(feature = "cli", arg(long))]
    pub min_silence_at_max_speech_ms: Option<f64>,
    /// With vad: cut a segment over max-speech-s at its longest silence (true, the default) or
    /// its last one.
    #[cfg_attr(feature = "cli", arg(long))]
    pub use_max_poss_sil_at_max_speech: Option<bool>,
    /// Augment every item before its features, as the Loader's `augment` does (JSON: `speed`
    /// factors, `volume_db` [low, high], `reverb` {source, prob}, `noise` {source, snr_db,
    /// prob}); each item's draws are a function of the seed and its id, whatever the workers,
    /// shards or resumes. SpecAugment's masks are the Loader's alone (drawn anew each epoch).
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_AUGMENT", value_name = "JSON", value_parser = parse_augment)
    )]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub augment: Option<AugmentOptions>,
    /// The augmentation's seed.
    #[cfg_attr(
        feature = "cli",
        arg(long, env = "SONOGRAPH_AUGMENT_SEED", default_value_t = 0)
    )]
    pub augment_seed: u64,
}

/// `--augment`'s JSON, checked.
#[cfg(feature = "cli")]
fn parse_augment(text: &str) -> Result<AugmentOptions, String> {
    serde_json::from_str(text).map_err(|e| e.to_string())
}

impl Default for JobOptions {
    fn default() -> Self {
        JobOptions {
            source: PathBuf::new(),
            out: PathBuf::new(),
            work_dir: None,
            augment: None,
            augment_seed: 0,
            preset: None,
            spec: None,
            n_mels: None,
            precision: PrecisionChoice::default(),
            device: defaults::DEVICE.into(),
            gpu_memory: None,
            workers: None,
            prefetch: defaults::PREFETCH,
            batch_items: defaults::BATCH_ITEMS,
            max_seconds: defaults::MAX_SECONDS,
            chunk_seconds: defaults::CHUNK_SECONDS,
            shard_index: None,
            shard_count: None,
            dtype: DtypeChoice::default(),
            part_mb: defaults::PART_MB,
            part_format: PartFormat::Parquet,
            channel: None,
            max_duration: defaults::MAX_DURATION,
            max_channels: defaults::MAX_CHANNELS,
            max_sample_rate: defaults::MAX_SAMPLE_RATE,
            sample_rate: None,
            format: None,
            max_samples: defaults::MAX_SAMPLES,
            model: None,
            model_device: None,
            model_batch: None,
            model_threads: None,
            vad: false,
            threshold: None,
            neg_threshold: None,
            min_speech_ms: None,
            max_speech_s: None,
            min_silence_ms: None,
            speech_pad_ms: None,
            min_silence_at_max_speech_ms: None,
            use_max_poss_sil_at_max_speech: None,
        }
    }
}

/// A job, planned: its configuration, checked, and the devices it asks for (opened by the
/// door through `sonograph_gpu`, which this crate does not know).
#[derive(Debug, Clone)]
pub struct Plan {
    pub config: JobConfig,
    /// `device`, as given: auto, cpu, gpu, gpu:N, a list, all.
    pub device: String,
    /// `gpu-memory`, as given.
    pub gpu_memory: Option<String>,
}

impl Plan {
    /// What the job will do, every default filled in and every option resolved (the spec
    /// by value, the shard from the environment, the workers from the cores): what
    /// `extract --plan`, `POST /api/v1/plan` and `sonograph.plan` show, the same for the same
    /// options through any door.
    pub fn describe(&self) -> serde_json::Value {
        let c = &self.config;
        serde_json::json!({
            "source": c.source,
            "out": c.out,
            "work_dir": c.work_dir,
            "augment": c.augment.as_ref().map(|a| serde_json::json!({
                "options": a.options,
                "seed": a.seed,
            })),
            "spec_id": c.spec.spec_id(),
            "spec": c.spec,
            "precision": format!("{:?}", c.precision).to_lowercase(),
            "device": self.device,
            "gpu_memory": self.gpu_memory,
            "workers": c.workers,
            "prefetch": c.prefetch,
            "batch_items": c.batch_items,
            "max_seconds": c.max_seconds,
            "chunk_seconds": c.chunk_seconds,
            "shard_index": c.shard_index,
            "shard_count": c.shard_count,
            "dtype": c.dtype.name(),
            "part_mb": c.part_mb,
            "part_format": c.part_format.name(),
            "channel": match c.mix {
                ChannelMix::Mean => serde_json::Value::Null,
                ChannelMix::Select(k) => k.into(),
            },
            "max_duration": c.limits.max_seconds,
            "max_channels": c.limits.max_channels,
            "max_sample_rate": c.limits.max_sample_rate,
            "iq": {
                "sample_rate": c.iq.sample_rate,
                "format": c.iq.raw.map(|d| d.name()),
                "max_samples": c.iq.max_samples,
            },
            "model": c.model.as_ref().map(|m| serde_json::json!({
                "path": m.path,
                "device": m.device,
                "batch": m.batch,
                "threads": m.threads,
            })),
            "vad": c.vad,
        })
    }
}

impl JobOptions {
    /// The job these options describe, every option checked (a bad one is a
    /// [`JobError::Config`] naming it). `env` gives the batch system's variables (the shard of
    /// a Kubernetes Indexed Job or a Slurm array); the service passes none.
    pub fn plan(&self, env: impl Fn(&str) -> Option<String>) -> Result<Plan, JobError> {
        let bad = |m: String| JobError::Config(m);
        if self.source.as_os_str().is_empty() {
            return Err(bad("source is required".into()));
        }
        if self.out.as_os_str().is_empty() {
            return Err(bad("out is required".into()));
        }
        let choice = SpecChoice {
            preset: self.preset.clone(),
            spec: self.spec.clone(),
            n_mels: self.n_mels,
            precision: self.precision,
        };
        let (mut spec, precision) = choice.resolve().map_err(bad)?;
        if let Some(fs) = self.sample_rate {
            crate::config::within("sample-rate", fs, crate::config::bounds::IQ_SAMPLE_RATE)?;
            if spec.is_complex() {
                if fs.fract() != 0.0 || fs > f64::from(u32::MAX) {
                    return Err(bad(format!(
                        "sample-rate {fs}: an IQ spec's rate is a whole number of Hz"
                    )));
                }
                spec.sample_rate = fs as u32;
                spec.validate().map_err(|e| bad(format!("spec: {e}")))?;
            }
        }
        let (shard_index, shard_count) =
            crate::resolve_shard(self.shard_index, self.shard_count, env).map_err(bad)?;
        let limits = LimitOptions {
            max_duration: self.max_duration,
            max_channels: self.max_channels,
            max_sample_rate: self.max_sample_rate,
        }
        .limits()
        .map_err(bad)?;
        let mut config = JobConfig::new(self.source.clone(), self.out.clone(), spec);
        config.precision = precision;
        config.mix = self.channel.map_or(ChannelMix::Mean, ChannelMix::Select);
        config.limits = limits;
        config.workers = self.workers.unwrap_or_else(defaults::workers);
        config.prefetch = self.prefetch;
        config.batch_items = self.batch_items;
        config.max_seconds = self.max_seconds;
        config.chunk_seconds = self.chunk_seconds;
        config.shard_index = shard_index;
        config.shard_count = shard_count;
        config.dtype = self.dtype.into();
        config.part_mb = self.part_mb;
        config.part_format = self.part_format;
        config.work_dir = self.work_dir.clone();
        config.augment = self.augment_config()?;
        config.iq = IqOptions {
            sample_rate: self.sample_rate,
            raw: self.format.map(IqFormat::datatype),
            max_samples: self.max_samples,
        };
        config.model = self.model_config()?;
        config.vad = self.vad_params()?;
        config.check()?;
        if self.device.trim().is_empty() {
            return Err(bad(
                "device is empty: auto, cpu, gpu, gpu:N, a list or all".into()
            ));
        }
        Ok(Plan {
            config,
            device: self.device.clone(),
            gpu_memory: self.gpu_memory.clone(),
        })
    }

    /// The model stage, with its defaults; the model's options without a model are refused
    /// rather than ignored.
    fn model_config(&self) -> Result<Option<ModelConfig>, JobError> {
        let Some(path) = &self.model else {
            if self.model_device.is_some()
                || self.model_batch.is_some()
                || self.model_threads.is_some()
            {
                return Err(JobError::Config(
                    "model-device, model-batch and model-threads need a model".into(),
                ));
            }
            return Ok(None);
        };
        let device = self
            .model_device
            .clone()
            .unwrap_or_else(|| defaults::MODEL_DEVICE.into());
        ModelDevice::parse(&device).map_err(|e| JobError::Config(format!("model-device: {e}")))?;
        Ok(Some(ModelConfig {
            path: path.clone(),
            device,
            batch: self.model_batch.unwrap_or(defaults::MODEL_BATCH),
            threads: self.model_threads.unwrap_or(defaults::MODEL_THREADS),
        }))
    }

    /// The augmentation, checked: SpecAugment is refused (its masks are drawn anew each epoch
    /// of a training run), and so is its seed without it.
    fn augment_config(&self) -> Result<Option<AugmentConfig>, JobError> {
        let bad = |m: String| JobError::Config(format!("augment: {m}"));
        let Some(options) = &self.augment else {
            if self.augment_seed != 0 {
                return Err(JobError::Config(
                    "augment-seed is given without augment".into(),
                ));
            }
            return Ok(None);
        };
        options.check().map_err(bad)?;
        if options.spec_augment.is_some() {
            return Err(bad(
                "spec_augment masks a training batch's features anew each epoch: the Loader \
                 applies it; extract writes features unmasked"
                    .into(),
            ));
        }
        if self.vad {
            return Err(bad(
                "not with vad (segments are cut from the audio as it is)".into(),
            ));
        }
        Ok(Some(AugmentConfig {
            options: options.clone(),
            seed: self.augment_seed,
        }))
    }

    /// The VAD's parameters: `max-speech-s` defaults to the job's max-seconds. Its options
    /// without `vad` are refused rather than ignored.
    fn vad_params(&self) -> Result<Option<VadParams>, JobError> {
        let given = VadOptions {
            threshold: self.threshold,
            neg_threshold: self.neg_threshold,
            min_speech_ms: self.min_speech_ms,
            max_speech_s: self.max_speech_s,
            min_silence_ms: self.min_silence_ms,
            speech_pad_ms: self.speech_pad_ms,
            min_silence_at_max_speech_ms: self.min_silence_at_max_speech_ms,
            use_max_poss_sil_at_max_speech: self.use_max_poss_sil_at_max_speech,
        };
        if !self.vad {
            return if given.any() {
                Err(JobError::Config(
                    "the VAD options (threshold, min-speech-ms, ...) need vad".into(),
                ))
            } else {
                Ok(None)
            };
        }
        Ok(Some(given.params(self.max_seconds)))
    }
}

/// The VAD's options as `extract` and `transcribe` take them (Silero's
/// `get_speech_timestamps` parameters, by their flags' names); each one not given takes
/// Silero's default, written once in [`VadParams::default`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct VadOptions {
    pub threshold: Option<f64>,
    pub neg_threshold: Option<f64>,
    pub min_speech_ms: Option<f64>,
    pub max_speech_s: Option<f64>,
    pub min_silence_ms: Option<f64>,
    pub speech_pad_ms: Option<f64>,
    pub min_silence_at_max_speech_ms: Option<f64>,
    pub use_max_poss_sil_at_max_speech: Option<bool>,
}

impl VadOptions {
    pub(crate) fn any(&self) -> bool {
        self.threshold.is_some()
            || self.neg_threshold.is_some()
            || self.min_speech_ms.is_some()
            || self.max_speech_s.is_some()
            || self.min_silence_ms.is_some()
            || self.speech_pad_ms.is_some()
            || self.min_silence_at_max_speech_ms.is_some()
            || self.use_max_poss_sil_at_max_speech.is_some()
    }

    /// The parameters, `max_speech_s` at `max_speech_default` unless given (checked by the
    /// job).
    pub(crate) fn params(&self, max_speech_default: f64) -> VadParams {
        let d = VadParams::default();
        VadParams {
            threshold: self.threshold.unwrap_or(d.threshold),
            neg_threshold: self.neg_threshold.or(d.neg_threshold),
            min_speech_duration_ms: self.min_speech_ms.unwrap_or(d.min_speech_duration_ms),
            max_speech_duration_s: self.max_speech_s.unwrap_or(max_speech_default),
            min_silence_duration_ms: self.min_silence_ms.unwrap_or(d.min_silence_duration_ms),
            speech_pad_ms: self.speech_pad_ms.unwrap_or(d.speech_pad_ms),
            min_silence_at_max_speech_ms: self
                .min_silence_at_max_speech_ms
                .unwrap_or(d.min_silence_at_max_speech_ms),
            use_max_poss_sil_at_max_speech: self
                .use_max_poss_sil_at_max_speech
                .unwrap_or(d.use_max_poss_sil_at_max_speech),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(json: serde_json::Value) -> Result<JobOptions, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_are_the_configs_and_a_request_names_its_options_by_their_flags() {
        let o = options(serde_json::json!({"source": "s", "out": "o"})).unwrap();
        assert_eq!(
            o,
            JobOptions {
                source: "s".into(),
                out: "o".into(),
                ..JobOptions::default()
            }
        );
        let plan = o.plan(|_| None).unwrap();
        let config = JobConfig::new(
            "s".into(),
            "o".into(),
            FeatureSpec::preset("whisper").unwrap(),
        );
        assert_eq!(
            (
                plan.config.prefetch,
                plan.config.batch_items,
                plan.config.part_mb
            ),
            (config.prefetch, config.batch_items, config.part_mb)
        );
        assert_eq!(plan.config.max_seconds, config.max_seconds);
        assert_eq!(plan.device, "auto");
        let o = options(serde_json::json!({
            "source": "s", "out": "o", "batch-items": 2, "dtype": "f16", "format": "ci8",
            "sample-rate": 1e6, "preset": "iq-power", "spec": null
        }))
        .unwrap();
        let plan = o.plan(|_| None).unwrap();
        assert_eq!(plan.config.batch_items, 2);
        assert_eq!(plan.config.iq.raw, Some(DataType::Ci8));
        assert_eq!(plan.config.spec.sample_rate, 1_000_000);
        let e =
            options(serde_json::json!({"source": "s", "out": "o", "batch_items": 2})).unwrap_err();
        assert!(e.contains("unknown field `batch_items`"), "{e}");
    }

    #[test]
    fn options_that_would_be_ignored_or_are_missing_are_refused() {
        let plan = |json: serde_json::Value| {
            options(json)
                .unwrap()
                .plan(|_| None)
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        for (json, says) in [
            (serde_json::json!({"out": "o"}), "source is required"),
            (
                serde_json::json!({"source": "s", "out": "o", "model-batch": 4}),
                "need a model",
            ),
            (
                serde_json::json!({"source": "s", "out": "o", "threshold": 0.4}),
                "need vad",
            ),
            (
                serde_json::json!({"source": "s", "out": "o", "preset": "kaldi", "spec": "s.json"}),
                "exclusive",
            ),
            (
                serde_json::json!({"source": "s", "out": "o", "workers": 0}),
                "workers 0",
            ),
            (
                serde_json::json!({"source": "s", "out": "o", "shard-index": 3, "shard-count": 2}),
                "shard index 3",
            ),
        ] {
            match plan(json.clone()) {
                Ok(()) => panic!("{json} was accepted"),
                Err(e) => assert!(e.contains(says), "{json}: {e}"),
            }
        }
    }
}
