//! The `sonograph` command line: parse, validate, call the libraries.
//!
//! Exit codes: 0 success; 2 bad input or usage (the message names the file and the reason);
//! 3 `extract` finished but some items failed (they are in the report); 1 an internal error.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc keeps freed memory for reuse: with glibc's malloc every item's buffers (hundreds of
/// KiB each) went back to the kernel and were faulted in again, a quarter of a job's time.
/// Its 2.x line (the `v2` feature): 3.x, libmimalloc-sys 0.1.49's default, held about 4× the
/// live heap on a job reading from a bucket (212–231 MB of RSS for a heap that peaked at
/// 52 MB, where 2.x holds 137–146 MB) at about the same speed (bench/RESULTS.md, 2026-12-02).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod extract;
mod gpu_cli;
mod model_cli;
mod rf_cli;
mod serve_cli;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};
use sonograph_dsp::FeatureSpec;
use sonograph_io::{ChannelMix, DecodeOptions, Limits};
use sonograph_pipeline::bench;

#[derive(Parser)]
#[command(
    name = "sonograph",
    version,
    about = "Audio features (log-mel, MFCC, spectrograms, PSD) that match Whisper, Kaldi, NeMo and librosa"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compute the features of one audio file and write them as a float32 .npy [frames, bins].
    Features(FeaturesArgs),
    /// List the presets, or print one as JSON.
    Presets {
        /// Preset to print.
        name: Option<String>,
    },
    /// Time extraction (or decoding) on files already in memory; prints audio-seconds per second.
    Bench(BenchArgs),
    /// Turn a corpus (a folder or a manifest) into sharded Parquet; resumable.
    Extract(Box<extract::ExtractArgs>),
    /// List a folder's (or a bucket prefix's) audio in a NeMo manifest (path, duration, sample
    /// rate, channels), once, so that the shards of a job read a slice of it instead of
    /// walking the tree.
    Manifest(extract::ManifestArgs),
    /// List the compute devices (GPUs through wgpu, and the CPU) with their scores and health.
    Devices(gpu_cli::DevicesArgs),
    /// Speech segments of audio files (Silero VAD), as JSON lines.
    Vad(model_cli::VadArgs),
    /// Transcribe audio with a NeMo Parakeet/FastConformer ONNX export (CTC or TDT).
    Transcribe(model_cli::TranscribeArgs),
    /// Generate a synthetic IQ dataset (SigMF recordings or Parquet rows); sharded, resumable.
    SynthIq(rf_cli::SynthArgs),
    /// RF features of SigMF or raw IQ recordings, to Parquet.
    RfFeatures(rf_cli::FeaturesArgs),
    /// Run the HTTP service: jobs API, Prometheus metrics, alerts, live dashboard.
    Serve(serve_cli::ServeArgs),
}

/// The feature of `features` and `bench`: `extract`'s `--preset`, `--spec`, `--n-mels` and
/// `--precision`, from the pipeline's one definition.
pub(crate) type SpecArgs = sonograph_pipeline::SpecChoice;

/// Resource limits against hostile files, for every command that decodes.
pub(crate) type LimitArgs = sonograph_pipeline::LimitOptions;

/// Storage type of written features (computed in f32 either way).
pub(crate) type DtypeArg = sonograph_pipeline::DtypeChoice;

#[derive(Args)]
struct FeaturesArgs {
    /// Audio file (WAV, FLAC, MP3, OGG Vorbis).
    input: PathBuf,
    #[command(flatten)]
    spec: SpecArgs,
    /// Output .npy path.
    #[arg(long, env = "SONOGRAPH_OUT")]
    out: PathBuf,
    /// Storage type of the .npy (f16 halves the file; values round to the nearest f16).
    #[arg(long, env = "SONOGRAPH_DTYPE", value_enum, default_value_t)]
    dtype: DtypeArg,
    /// Use one channel (0-based) instead of the mean of all channels.
    #[arg(long, env = "SONOGRAPH_CHANNEL")]
    channel: Option<usize>,
    /// Where to compute: cpu, auto (the best hardware GPU, else the CPU), gpu, gpu:N.
    #[arg(long, env = "SONOGRAPH_DEVICE", default_value = "cpu")]
    device: String,
    /// GPU memory budget ("6GiB", "80%"; default: 90% of the free memory NVML reports, else
    /// 2 GiB); a file over it is computed on the CPU.
    #[arg(long, env = "SONOGRAPH_GPU_MEMORY")]
    gpu_memory: Option<String>,
    #[command(flatten)]
    limits: LimitArgs,
}

#[derive(Args)]
struct BenchArgs {
    /// Audio files; each is decoded once, then timed from memory.
    #[arg(required_unless_present = "device")]
    inputs: Vec<PathBuf>,
    #[command(flatten)]
    spec: SpecArgs,
    /// Worker threads (1 = single-threaded; 0 = all cores).
    #[arg(long, env = "SONOGRAPH_THREADS", default_value_t = 0)]
    threads: usize,
    /// Time decoding at the files' own rates instead of extraction.
    #[arg(long, env = "SONOGRAPH_DECODE_ONLY")]
    decode_only: bool,
    /// Timed repetitions; the median is reported.
    #[arg(long, env = "SONOGRAPH_REPEAT", default_value_t = 5)]
    repeat: usize,
    /// Time on devices (all, cpu, gpu, gpu:N, lists) through the adaptive batcher, on the files
    /// or on a generated batch (--clips of --seconds); prints one JSON line per device.
    #[arg(long, env = "SONOGRAPH_DEVICE")]
    device: Option<String>,
    /// GPU memory budget for --device ("6GiB", "80%"; default: 90% of the free memory NVML
    /// reports, else 2 GiB).
    #[arg(long, env = "SONOGRAPH_GPU_MEMORY")]
    gpu_memory: Option<String>,
    /// Clips in the generated batch of --device (without files).
    #[arg(long, env = "SONOGRAPH_CLIPS", default_value_t = 8)]
    clips: usize,
    /// Seconds per generated clip.
    #[arg(long, env = "SONOGRAPH_SECONDS", default_value_t = 10.0)]
    seconds: f64,
    /// Rounds the generated clips to 16-bit samples, as a 16-bit WAV or FLAC corpus decodes
    /// (a GPU is then sent them as 16-bit integers, half the bytes).
    #[arg(long, env = "SONOGRAPH_PCM16")]
    pcm16: bool,
    /// The rows as a job storing this type has them: with f16, a GPU whose rows are final
    /// sends them back as f16 (half the bytes), as in `extract --dtype f16`.
    #[arg(long, env = "SONOGRAPH_DTYPE", value_enum, default_value_t)]
    dtype: DtypeArg,
    #[command(flatten)]
    limits: LimitArgs,
}

/// An error caused by the input or the invocation (exit code 2), as opposed to a bug.
#[derive(Debug)]
struct UserError(String);
impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for UserError {}

pub(crate) fn user(msg: impl Into<String>) -> anyhow::Error {
    UserError(msg.into()).into()
}

/// A job's error: a usage error (exit 2) where the input or the options are at fault.
pub(crate) fn job_error(e: sonograph_pipeline::JobError) -> anyhow::Error {
    if e.is_usage() {
        user(e.to_string())
    } else {
        anyhow::Error::new(e)
    }
}

fn main() -> ExitCode {
    // Mesa's Vulkan device-select layer tries to reach a Wayland display and prints
    // "XDG_RUNTIME_DIR is invalid" on every headless run; it only reorders adapters, which
    // sonograph scores itself. Set before any thread exists, so the environment is not raced.
    if std::env::var_os("NODEVICE_SELECT").is_none() {
        std::env::set_var("NODEVICE_SELECT", "1");
    }
    quiet_decoder_panics();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SONOGRAPH_LOG")
                // symphonia logs what sonograph already reports as the file's error. Alerts
                // go to the log at every level: an INFO alert and a resolution are logged
                // at INFO.
                .unwrap_or_else(|_| {
                    "warn,sonograph_pipeline::alerts=info,symphonia_core=off,symphonia=off".into()
                }),
        )
        // Colours on a terminal only: a container's log is a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    // Fault injection for tests (`FAILPOINTS=name=action;...`); compiled out of every build
    // without the `failpoints` feature, so no environment variable can crash a release binary.
    #[cfg(feature = "failpoints")]
    let _failpoints = fail::FailScenario::setup();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print in full; a usage error is one line, like every other.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // The message up to its first blank line: a missing argument's name is on the
            // lines after "the following required arguments were not provided:".
            let text = e.to_string();
            let message: Vec<&str> = text
                .lines()
                .map(str::trim)
                .take_while(|l| !l.is_empty())
                .collect();
            let message = match message.join(" ") {
                m if m.is_empty() => "bad usage".to_string(),
                m => m,
            };
            eprintln!("sonograph: {message} (see --help)");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Features(args) => features(&args).map(|()| 0),
        Command::Presets { name } => presets(name.as_deref()).map(|()| 0),
        Command::Bench(args) => bench(&args).map(|()| 0),
        Command::Extract(args) => extract::extract(&args),
        Command::Manifest(args) => extract::manifest(&args),
        Command::Devices(args) => gpu_cli::devices(&args).map(|()| 0),
        Command::Vad(args) => model_cli::vad(&args).map(|()| 0),
        Command::Transcribe(args) => model_cli::transcribe(&args),
        Command::SynthIq(args) => rf_cli::synth_iq(&args),
        Command::RfFeatures(args) => rf_cli::rf_features(&args),
        Command::Serve(args) => serve_cli::serve(&args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let user_error = e.chain().any(|c| c.is::<UserError>());
            // One line: the chain joined, outermost first.
            let msg = e
                .chain()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(": ");
            eprintln!("sonograph: error: {}", msg.replace('\n', " "));
            ExitCode::from(if user_error { 2 } else { 1 })
        }
    }
}

/// symphonia 0.5 panics on some hostile headers; sonograph-io catches those panics and
/// reports the file as corrupt, so the default hook's backtrace would only be noise.
fn quiet_decoder_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let from_decoder = info
            .location()
            .is_some_and(|l| l.file().contains("symphonia"));
        if !from_decoder {
            default(info);
        }
    }));
}

pub(crate) fn load_spec(args: &SpecArgs) -> Result<FeatureSpec> {
    Ok(args.resolve().map_err(user)?.0)
}

/// The limits of `--max-duration`, `--max-channels` and `--max-sample-rate`, checked.
pub(crate) fn limits(args: &LimitArgs) -> Result<Limits> {
    args.limits().map_err(user)
}

fn decode_options(channel: Option<usize>, limits: &LimitArgs) -> Result<DecodeOptions> {
    Ok(DecodeOptions {
        mix: channel.map_or(ChannelMix::Mean, ChannelMix::Select),
        limits: crate::limits(limits)?,
        ..Default::default()
    })
}

fn features(args: &FeaturesArgs) -> Result<()> {
    let spec = load_spec(&args.spec)?;
    let precision = args.spec.precision.for_spec(&spec);
    let request: sonograph_gpu::DeviceRequest = args
        .device
        .parse()
        .map_err(|e| user(format!("--device: {e}")))?;
    if request.single().is_none() {
        return Err(user(format!(
            "--device {}: `features` runs on one device: cpu, auto, gpu or gpu:N",
            args.device
        )));
    }
    let mut gpu = None;
    if !request.cpu_only() {
        let options = sonograph_gpu::OpenOptions {
            precision,
            budget: gpu_cli::budget(args.gpu_memory.as_deref())?,
            cpu_threads: None,
        };
        let set = gpu_cli::device_set(&args.device)?;
        // `auto` without a usable GPU is the CPU, which streams the file.
        gpu = gpu_cli::open(&set, &spec, &options)?
            .pop()
            .filter(|d| !d.is_cpu());
    }
    let opts = decode_options(args.channel, &args.limits)?;
    let done = sonograph_pipeline::one_file::file_features(
        &args.input,
        &spec,
        precision,
        &opts,
        gpu,
        &args.out,
        args.dtype.into(),
    )
    .map_err(job_error)?;
    for warning in &done.warnings {
        eprintln!("sonograph: warning: {warning}");
    }
    tracing::info!(
        input = %args.input.display(),
        frames = done.frames,
        bins = spec.n_bins(),
        spec_id = %spec.spec_id(),
        device = %done.device,
        "wrote {}",
        args.out.display()
    );
    Ok(())
}

fn presets(name: Option<&str>) -> Result<()> {
    match name {
        Some(name) => {
            let spec = FeatureSpec::preset(name).map_err(|e| user(e.to_string()))?;
            println!("{}", spec.to_json());
        }
        None => {
            for p in FeatureSpec::presets() {
                println!(
                    "{:<14} {:>6} Hz  {:>4} bins  {}",
                    p.name,
                    p.spec.sample_rate,
                    p.spec.n_bins(),
                    p.matches
                );
            }
        }
    }
    Ok(())
}

fn bench(args: &BenchArgs) -> Result<()> {
    if let Some(device) = &args.device {
        return gpu_cli::bench(args, device);
    }
    let spec = load_spec(&args.spec)?;
    let opts = decode_options(None, &args.limits)?;
    let timing = if args.decode_only {
        bench::time_decode(&spec, &args.inputs, &opts, args.threads, args.repeat)
    } else {
        let clips = bench::decode_clips(&args.inputs, &opts, &spec).map_err(job_error)?;
        let precision = args.spec.precision.for_spec(&spec);
        bench::time_cpu(&spec, precision, args.threads, &clips, args.repeat)
    };
    println!("{}", serde_json::to_string(&timing.map_err(job_error)?)?);
    Ok(())
}
