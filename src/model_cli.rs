//! `sonograph vad` and `sonograph transcribe`: Silero VAD and NeMo ASR exports through
//! sonograph-model (onnxruntime, loaded at run time). `transcribe` is a job of the pipeline
//! (sonograph_pipeline::transcribe), `vad` one of sonograph_pipeline::vad; this file parses
//! their flags and calls them.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sonograph_model::VadParams;
use sonograph_pipeline::transcribe::run_transcribe_live;
use sonograph_pipeline::transcribe_options::TranscribeOptions;
use sonograph_pipeline::vad::{run_vad, VadJob};

use crate::{user, LimitArgs};

/// What both commands take about their input and the runtime.
#[derive(Args)]
pub(crate) struct InputArgs {
    /// Use one channel (0-based) instead of the mean of all channels.
    #[arg(long)]
    channel: Option<usize>,
    #[command(flatten)]
    limits: LimitArgs,
    /// The onnxruntime library (libonnxruntime.so, .dylib, onnxruntime.dll) or its folder.
    /// Default: next to the binary, else python3's onnxruntime package
    /// (pip install onnxruntime==1.31.1).
    #[arg(long, env = "SONOGRAPH_ORT_LIB")]
    ort_lib: Option<PathBuf>,
}

/// `get_speech_timestamps`' parameters, with its defaults.
#[derive(Args)]
pub(crate) struct VadFlags {
    /// Speech where the probability is at least this.
    #[arg(long, default_value_t = 0.5)]
    threshold: f64,
    /// Silence (within speech) below this; default max(threshold − 0.15, 0.01).
    #[arg(long)]
    neg_threshold: Option<f64>,
    /// Segments must be longer than this.
    #[arg(long, default_value_t = 250.0)]
    min_speech_ms: f64,
    /// Segments longer than this are cut (inf: never).
    #[arg(long, default_value_t = f64::INFINITY)]
    max_speech_s: f64,
    /// Silence this long ends a segment.
    #[arg(long, default_value_t = 100.0)]
    min_silence_ms: f64,
    /// Padding on each side of a segment.
    #[arg(long, default_value_t = 30.0)]
    speech_pad_ms: f64,
    /// Silences longer than this are where a segment over --max-speech-s may be cut.
    #[arg(long, default_value_t = 98.0)]
    min_silence_at_max_speech_ms: f64,
    /// Cut a segment over --max-speech-s at its longest silence (false: at its last one).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    use_max_poss_sil_at_max_speech: bool,
}

impl VadFlags {
    pub(crate) fn params(&self) -> Result<VadParams> {
        let p = VadParams {
            threshold: self.threshold,
            neg_threshold: self.neg_threshold,
            min_speech_duration_ms: self.min_speech_ms,
            max_speech_duration_s: self.max_speech_s,
            min_silence_duration_ms: self.min_silence_ms,
            speech_pad_ms: self.speech_pad_ms,
            min_silence_at_max_speech_ms: self.min_silence_at_max_speech_ms,
            use_max_poss_sil_at_max_speech: self.use_max_poss_sil_at_max_speech,
        };
        p.validate().map_err(|e| user(e.to_string()))?;
        Ok(p)
    }
}

#[derive(Args)]
pub(crate) struct VadArgs {
    /// Audio files, or folders walked for audio files.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Output JSON lines, one per segment: source, start and end (samples at 16 kHz),
    /// start_s, end_s.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    vad: VadFlags,
    /// Files segmented at once, one onnxruntime thread each (0: one per core).
    #[arg(long, default_value_t = 0)]
    jobs: usize,
    #[command(flatten)]
    input: InputArgs,
}

#[derive(Args)]
pub(crate) struct TranscribeArgs {
    /// The job's options: the same as the jobs API's (kind transcribe) and Python's
    /// `transcribe`'s, defined once in the pipeline.
    #[command(flatten)]
    options: TranscribeOptions,
    /// The onnxruntime library (libonnxruntime.so, .dylib, onnxruntime.dll) or its folder.
    /// Default: next to the binary, else python3's onnxruntime package
    /// (pip install onnxruntime==1.31.1).
    #[arg(long, env = "SONOGRAPH_ORT_LIB")]
    ort_lib: Option<PathBuf>,
    /// Print the planned job as JSON and exit without running it.
    #[arg(long)]
    plan: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

pub(crate) fn vad(args: &VadArgs) -> Result<()> {
    let job = VadJob {
        inputs: args.inputs.clone(),
        out: args.out.clone(),
        params: args.vad.params()?,
        jobs: args.jobs,
        channel: args.input.channel,
        limits: crate::limits(&args.input.limits)?,
        ort_lib: args.input.ort_lib.clone(),
    };
    run_vad(&job).map_err(crate::job_error)
}

/// `sonograph transcribe`: exit 0, 3 when items or segments failed (listed in the report and
/// the first on stderr), 2 on bad options or a model that cannot load.
pub(crate) fn transcribe(args: &TranscribeArgs) -> Result<u8> {
    let mut job = args
        .options
        .plan(crate::rf_cli::env)
        .map_err(crate::job_error)?;
    if args.plan {
        println!("{}", serde_json::to_string_pretty(&job.describe())?);
        return Ok(0);
    }
    job.ort_lib = args.ort_lib.clone();
    let outcome = args
        .watch
        .run("transcribe", &job.out.clone(), |live| {
            run_transcribe_live(&job, live)
        })?
        .map_err(crate::job_error)?;
    let code = crate::extract::print_outcome(&job.out, &outcome, "audio");
    // Segments the model could not take fail no item; they are listed, and said by the code.
    let segments_failed = outcome.report().failures.len() as u64 > outcome.report().items_failed;
    Ok(
        if segments_failed && matches!(outcome, sonograph_pipeline::JobOutcome::Finished(_)) {
            crate::extract::EXIT_SOME_FAILED
        } else {
            code
        },
    )
}
