//! `sonograph extract`: a corpus to sharded Parquet.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use sonograph_io::decode::ChannelMix;
use sonograph_pipeline::{JobConfig, JobOutcome};

use crate::{load_spec, user, DtypeArg, SpecArgs};

#[derive(Args)]
pub struct ExtractArgs {
    /// A directory (walked recursively), a NeMo manifest (.jsonl) or a CSV manifest
    /// (id,path[,offset,duration]); for IQ specs, a SigMF recording (.sigmf-meta/.sigmf-data),
    /// a .sigmf archive, a raw IQ file (.cf32, .ci16, .cu8, .ci8), or a folder of them.
    source: PathBuf,
    /// Output folder: Parquet parts, and __sonograph/ (ledger, report).
    #[arg(long, env = "SONOGRAPH_OUT")]
    out: PathBuf,
    #[command(flatten)]
    spec: SpecArgs,
    /// Where features are computed: auto (the best hardware GPU, else the CPU), cpu, gpu, gpu:N,
    /// a list such as gpu:0,gpu:1, or all (every adapter and the CPU; batches go to whichever
    /// device is free first).
    #[arg(long, env = "SONOGRAPH_DEVICE", default_value = "auto")]
    device: String,
    /// GPU memory budget per device: "6GiB", "512MiB" or a share such as "80%".
    #[arg(long, env = "SONOGRAPH_GPU_MEMORY")]
    gpu_memory: Option<String>,
    /// Decode threads (default: the cores).
    #[arg(long, env = "SONOGRAPH_WORKERS")]
    workers: Option<usize>,
    /// Depth of the prefetch queue, in batches.
    #[arg(long, env = "SONOGRAPH_PREFETCH", default_value_t = 4)]
    prefetch: usize,
    /// Items per batch handed to a device.
    #[arg(long, env = "SONOGRAPH_BATCH_ITEMS", default_value_t = 16)]
    batch_items: usize,
    /// Items longer than this are streamed and cut into pieces.
    #[arg(long, env = "SONOGRAPH_MAX_SECONDS", default_value_t = 60.0)]
    max_seconds: f64,
    /// Length of each piece of a long item.
    #[arg(long, env = "SONOGRAPH_CHUNK_SECONDS", default_value_t = 30.0)]
    chunk_seconds: f64,
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[arg(long, env = "SONOGRAPH_SHARD_INDEX")]
    shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[arg(long, env = "SONOGRAPH_SHARD_COUNT")]
    shard_count: Option<usize>,
    /// Storage type of the features column.
    #[arg(long, env = "SONOGRAPH_DTYPE", value_enum, default_value_t = DtypeArg::F32)]
    dtype: DtypeArg,
    /// Close a Parquet part when its features reach this many MiB.
    #[arg(long, env = "SONOGRAPH_PART_MB", default_value_t = 64)]
    part_mb: usize,
    /// Use one channel (0-based) instead of the mean of all channels.
    #[arg(long, env = "SONOGRAPH_CHANNEL")]
    channel: Option<usize>,
    /// No progress bar even on a terminal.
    #[arg(long, env = "SONOGRAPH_NO_PROGRESS")]
    no_progress: bool,
    #[command(flatten)]
    limits: crate::LimitArgs,
    /// Sample rate of raw IQ files, in Hz. With an IQ spec it is the spec's rate too (IQ is
    /// never resampled, so a recording at another rate fails).
    #[arg(long, env = "SONOGRAPH_SAMPLE_RATE")]
    sample_rate: Option<f64>,
    /// Sample type of raw IQ files whose extension does not say it.
    #[arg(long, value_enum)]
    format: Option<crate::rf_cli::RawFormat>,
    /// Largest IQ recording read (complex samples).
    #[arg(long, default_value_t = sonograph_io::sigmf::DEFAULT_MAX_SAMPLES)]
    max_samples: u64,
    /// Run this ONNX model on every row's features (a NeMo encoder or CTC export: inputs
    /// `audio_signal` and `length`) and write its outputs in the columns model_frames,
    /// model_dim and model_outputs. Needs onnxruntime (see the README).
    #[arg(long, env = "SONOGRAPH_MODEL")]
    model: Option<PathBuf>,
    /// Where the model runs: cpu, or gpu / gpu:N (onnxruntime's CUDA provider: a build with
    /// the `cuda` feature, and onnxruntime-gpu loaded).
    #[arg(long, env = "SONOGRAPH_MODEL_DEVICE", default_value = "cpu")]
    model_device: String,
    /// Rows per model batch (padded to the longest, with lengths).
    #[arg(long, env = "SONOGRAPH_MODEL_BATCH", default_value_t = 16)]
    model_batch: usize,
    /// onnxruntime threads for the model (0: one per core).
    #[arg(long, default_value_t = 0)]
    model_threads: usize,
    /// The onnxruntime library (libonnxruntime.so), where it is not found by itself.
    #[arg(long, env = "SONOGRAPH_ORT_LIB")]
    ort_lib: Option<PathBuf>,
    /// Cut items at their speech segments (Silero VAD, as `sonograph vad` finds them, on the
    /// audio at the spec's rate) instead of fixed pieces: one row per segment, with its offset
    /// and duration; an item without speech is done with no row. --max-speech-s defaults to
    /// --max-seconds here, and may not exceed it. Needs onnxruntime (see the README).
    #[arg(long)]
    vad: bool,
    #[command(flatten)]
    vad_flags: crate::model_cli::VadFlags,
    /// Serve /metrics, /health and the dashboard on this address while the job runs.
    #[arg(long, env = "SONOGRAPH_METRICS_ADDR")]
    metrics_addr: Option<std::net::SocketAddr>,
    #[command(flatten)]
    telemetry: crate::serve_cli::TelemetryArgs,
}

/// Exit codes of `extract`, as documented in the README.
pub const EXIT_SOME_FAILED: u8 = 3;

/// Runs the job; returns the process exit code.
pub fn extract(args: &ExtractArgs) -> Result<u8> {
    let mut spec = load_spec(&args.spec)?;
    if let Some(fs) = args.sample_rate {
        if !(fs.is_finite() && fs > 0.0) {
            return Err(user(format!("--sample-rate {fs} must be positive")));
        }
        if spec.is_complex() {
            if fs.fract() != 0.0 || fs > f64::from(u32::MAX) {
                return Err(user(format!(
                    "--sample-rate {fs}: an IQ spec's rate is a whole number of Hz"
                )));
            }
            spec.sample_rate = fs as u32;
            spec.validate().map_err(|e| user(e.to_string()))?;
        }
    }
    let (shard_index, shard_count) =
        sonograph_pipeline::resolve_shard(args.shard_index, args.shard_count, |k| {
            std::env::var(k).ok()
        })
        .map_err(user)?;
    let precision = args.spec.precision_for(&spec);
    let mut config = JobConfig::new(args.source.clone(), args.out.clone(), spec.clone());
    config.precision = precision;
    config.mix = args.channel.map_or(ChannelMix::Mean, ChannelMix::Select);
    config.limits = args.limits.limits()?;
    if let Some(w) = args.workers {
        config.workers = w;
    }
    config.prefetch = args.prefetch;
    config.batch_items = args.batch_items;
    config.max_seconds = args.max_seconds;
    config.chunk_seconds = args.chunk_seconds;
    config.shard_index = shard_index;
    config.shard_count = shard_count;
    config.dtype = args.dtype.into();
    config.part_mb = args.part_mb;
    config.progress = !args.no_progress && std::io::stderr().is_terminal();
    config.iq = sonograph_pipeline::IqOptions {
        sample_rate: args.sample_rate,
        raw: args.format.map(crate::rf_cli::RawFormat::datatype),
        max_samples: args.max_samples,
    };
    config.model = args
        .model
        .as_ref()
        .map(|path| sonograph_pipeline::ModelConfig {
            path: path.clone(),
            device: args.model_device.clone(),
            batch: args.model_batch,
            threads: args.model_threads,
        });
    config.ort_lib = args.ort_lib.clone();
    if args.vad {
        let mut params = args.vad_flags.params()?;
        if params.max_speech_duration_s.is_infinite() {
            params.max_speech_duration_s = args.max_seconds;
        }
        config.vad = Some(params);
    }
    let options = sonograph_gpu::OpenOptions {
        precision,
        budget: crate::gpu_cli::budget(args.gpu_memory.as_deref())?,
        cpu_threads: None,
    };
    let set = crate::gpu_cli::device_set(&args.device)?;
    let devices = crate::gpu_cli::open(&set, &spec, &options)?;
    let watch = crate::serve_cli::watch(args.metrics_addr, &args.telemetry, &args.out)?;
    let live = sonograph_pipeline::LiveJob::new();
    if let Some(w) = &watch {
        w.telemetry.attach_job("extract", live.clone());
    }
    let outcome = sonograph_pipeline::run_live(&config, devices, Default::default(), live);
    if let Some(w) = &watch {
        w.telemetry.detach_job();
    }
    let outcome = outcome.map_err(|e| {
        if e.is_usage() {
            user(e.to_string())
        } else {
            anyhow::Error::new(e)
        }
    })?;
    let report = outcome.report();
    match &outcome {
        JobOutcome::AlreadyDone(_) => eprintln!(
            "sonograph: shard {}/{} of {} is already complete ({} items ok, {} failed)",
            report.shard_index,
            report.shard_count,
            args.out.display(),
            report.items_ok,
            report.items_failed
        ),
        JobOutcome::Finished(r) => {
            // The first failures, enough to see what went wrong; all of them are in the
            // report (a corpus of broken files must not flood the terminal).
            const SHOWN: usize = 20;
            for f in r.failures.iter().take(SHOWN) {
                eprintln!("sonograph: failed: {}: {}", f.id, f.reason);
            }
            if r.items_failed > SHOWN as u64 {
                let layout =
                    sonograph_pipeline::OutputLayout::new(&args.out, r.shard_index, r.shard_count);
                eprintln!(
                    "sonograph: … and {} more failures (the first 1,000 in {}, all in {})",
                    r.items_failed - SHOWN as u64,
                    layout.report.display(),
                    layout.ledger.display()
                );
            }
            eprintln!(
                "sonograph: {} items ok, {} failed ({} done earlier); {:.1} s of {} in {:.1} s ({:.0}× real time); {} rows in {} parts; peak RSS {:.0} MiB",
                r.items_ok,
                r.items_failed,
                r.items_resumed,
                r.audio_seconds,
                if spec.is_complex() { "IQ" } else { "audio" },
                r.wall_seconds,
                r.real_time_factor,
                r.rows,
                r.parts,
                r.peak_rss_mb
            );
            if let Some(m) = &r.model {
                eprintln!(
                    "sonograph: model ({}, {} input) on {}: {} rows in {} batches, busy {:.1} s, waited {:.1} s for the first batch and {:.1} s for rows after",
                    m.kind, m.input_precision, m.device, m.rows, m.batches, m.busy_s, m.warmup_s, m.starved_s
                );
            }
        }
    }
    Ok(match &outcome {
        JobOutcome::AlreadyDone(_) => 0,
        JobOutcome::Finished(r) if r.items_failed > 0 => EXIT_SOME_FAILED,
        JobOutcome::Finished(_) => 0,
    })
}
