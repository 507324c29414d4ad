//! The `sonograph` command line: parse, validate, call the libraries.
//!
//! Exit codes: 0 success; 2 bad input or usage (the message names the file and the reason);
//! 3 `extract` finished but some items failed (they are in the report); 1 an internal error.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// mimalloc keeps freed memory for reuse: with glibc's malloc every item's buffers (hundreds of
/// KiB each) went back to the kernel and were faulted in again, a quarter of a job's time.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod extract;
mod gpu_cli;
mod model_cli;
mod rf_cli;
mod serve_cli;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};
use sonograph_dsp::{AudioBatch, CpuBackend, CpuExtractor, Extractor, FeatureBatch, FeatureSpec};
use sonograph_io::{ChannelMix, DecodeOptions, Limits, StreamError};

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
    /// List a folder's audio in a NeMo manifest (path, duration, sample rate, channels), once,
    /// so that the shards of a job read a slice of it instead of walking the tree.
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
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("bad usage");
            eprintln!("sonograph: {first} (see --help)");
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
    if !request.cpu_only() {
        let options = sonograph_gpu::OpenOptions {
            precision: args.spec.precision.for_spec(&spec),
            budget: gpu_cli::budget(args.gpu_memory.as_deref())?,
            cpu_threads: None,
        };
        let set = gpu_cli::device_set(&args.device)?;
        let device = gpu_cli::open(&set, &spec, &options)?.pop();
        // `auto` without a usable GPU is the CPU, which streams the file below.
        if let Some(gpu) = device.filter(|d| !d.is_cpu()) {
            return gpu_cli::features(args, &spec, gpu);
        }
    }
    let mut extractor = CpuExtractor::with_precision(&spec, args.spec.precision.for_spec(&spec))
        .map_err(|e| user(e.to_string()))?;
    let opts = decode_options(args.channel, &args.limits)?;
    // The header's length (when it has one) sizes the rows at once.
    let expected = sonograph_io::AudioReader::open(&args.input, &opts)
        .ok()
        .and_then(|r| r.expected_seconds())
        .map_or(0, |s| (s * f64::from(spec.sample_rate)) as usize);
    extractor.begin_sized(expected);
    // Frames are computed while the file is still being decoded, on another core.
    let summary =
        sonograph_io::stream_mono_pipelined(&args.input, &opts, spec.sample_rate, |chunk| {
            extractor.push(chunk)
        })
        .map_err(|e| match e {
            StreamError::Decode(d) => user(d.to_string()),
            other => user(other.to_string()),
        })?;
    let mut out = Vec::new();
    let frames = extractor
        .finish(&mut out)
        .map_err(|e| user(format!("{}: {e}", args.input.display())))?;
    if frames == 0 {
        eprintln!(
            "sonograph: warning: {}: {} samples at {} Hz are shorter than one frame; writing 0 frames (as the reference does)",
            args.input.display(),
            summary.output_samples,
            spec.sample_rate
        );
    }
    sonograph_io::write_npy(&args.out, &[frames, spec.n_bins()], &out, args.dtype.into())
        .map_err(|e| user(e.to_string()))?;
    tracing::info!(
        input = %args.input.display(),
        frames,
        bins = spec.n_bins(),
        spec_id = %spec.spec_id(),
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
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .build()
        .context("cannot start the thread pool")?;
    let threads = pool.current_num_threads();
    let opts = decode_options(None, &args.limits)?;
    let (audio_seconds, times) = if args.decode_only {
        let mut seconds = 0.0;
        for path in &args.inputs {
            let info = sonograph_io::AudioReader::open(path, &opts)
                .map_err(|e| user(e.to_string()))?
                .info()
                .clone();
            let n = decode_native(path, &opts)?;
            seconds += n as f64 / f64::from(info.sample_rate);
        }
        let times = timed(args.repeat, || {
            pool.install(|| {
                use rayon::prelude::*;
                args.inputs
                    .par_iter()
                    .map(|p| decode_native(p, &opts).map(|_| ()))
                    .collect::<Result<()>>()
            })
        })?;
        (seconds, times)
    } else {
        let clips: Vec<Vec<f32>> = args
            .inputs
            .iter()
            .map(|p| {
                sonograph_io::decode_mono(p, &opts, spec.sample_rate)
                    .map_err(|e| user(e.to_string()))
            })
            .collect::<Result<_>>()?;
        let seconds =
            clips.iter().map(|c| c.len()).sum::<usize>() as f64 / f64::from(spec.sample_rate);
        let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
        let precision = args.spec.precision.for_spec(&spec);
        // The same backend `extract` runs, on a pool of `--threads` workers.
        let mut backend = CpuBackend::with_threads(&spec, precision, args.threads)
            .map_err(|e| user(e.to_string()))?;
        let mut out = FeatureBatch::new(spec.n_bins());
        let times = timed(args.repeat, || {
            out.reset(spec.n_bins());
            backend.extract_batch(&batch, &mut out)?;
            for i in 0..out.len() {
                out.item(i).map_err(|e| user(e.to_string()))?;
            }
            Ok(())
        })?;
        (seconds, times)
    };
    let median = times[times.len() / 2];
    let report = serde_json::json!({
        "mode": if args.decode_only { "decode" } else { "extract" },
        "spec_id": spec.spec_id(),
        "threads": threads,
        "files": args.inputs.len(),
        "audio_seconds": audio_seconds,
        "median_seconds": median,
        "audio_seconds_per_second": audio_seconds / median,
        "repeats": times.len(),
    });
    println!("{report}");
    Ok(())
}

/// Decodes at the file's own rate, discarding the samples; returns the frame count.
fn decode_native(path: &Path, opts: &DecodeOptions) -> Result<u64> {
    let mut reader =
        sonograph_io::AudioReader::open(path, opts).map_err(|e| user(e.to_string()))?;
    while reader
        .next_chunk()
        .map_err(|e| user(e.to_string()))?
        .is_some()
    {}
    Ok(reader.frames_read())
}

/// Runs `f` once to warm up, then `repeat` times; returns the sorted durations in seconds.
fn timed(repeat: usize, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    if repeat == 0 {
        return Err(user("--repeat must be at least 1"));
    }
    f()?;
    let mut times = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}
