//! `sonograph synth-iq` (synthetic IQ datasets as SigMF recordings or Parquet rows) and
//! `sonograph rf-features` (RF features of SigMF or raw IQ recordings to Parquet).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use sonograph_io::sigmf::{WriteType, DEFAULT_MAX_SAMPLES};
use sonograph_pipeline::rf_features::{run_rf_features_live, RfFeaturesJob};
use sonograph_pipeline::synth_iq::{generate, run_synth_iq_live, SynthFormat, SynthIqJob};
use sonograph_rf::features::FeatureConfig;
use sonograph_rf::rows::RowSpec;
use sonograph_rf::spec::{ModKind, ModulationSpec, Range, SnrDefinition};
use sonograph_rf::{NoiseDevice, Synth, SynthSpec};

use crate::user;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum OutFormat {
    Sigmf,
    Parquet,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SampleType {
    Cf32,
    Ci16,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum SnrDefArg {
    InBand,
    EsN0,
    FullBand,
}

#[derive(Args)]
pub struct SynthArgs {
    /// Recordings in the whole dataset (shards take contiguous shares of 0..count).
    #[arg(long)]
    count: u64,
    /// A SynthSpec in JSON or TOML (by extension); the flags below override it.
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Sample rate in Hz (default 200000).
    #[arg(long)]
    sample_rate: Option<f64>,
    /// Complex samples per recording.
    #[arg(long, conflicts_with = "duration_ms")]
    samples: Option<usize>,
    /// Length of each recording in milliseconds (instead of --samples).
    #[arg(long)]
    duration_ms: Option<f64>,
    /// Comma-separated modulations, or `all`: tone, am-dsb, am-dsb-sc, ssb-usb, ssb-lsb, fm,
    /// ook, 4ask, 8ask, bpsk, qpsk, 8psk, 16psk, oqpsk, 16qam, 32qam, 64qam, 256qam, 16apsk,
    /// 32apsk, 2fsk, 4fsk, gfsk, gmsk, msk, ofdm, lfm. Each recording draws one uniformly.
    #[arg(long)]
    modulation: Option<String>,
    /// SNR range A:B in dB (or one value), drawn uniformly per recording.
    #[arg(long, allow_hyphen_values = true)]
    snr_db: Option<String>,
    /// What the SNR measures (default in-band).
    #[arg(long, value_enum)]
    snr_definition: Option<SnrDefArg>,
    /// Dataset seed: recording i is a function of (spec, seed, i) only.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Output folder.
    #[arg(long)]
    out: PathBuf,
    /// SigMF recordings (default) or Parquet rows.
    #[arg(long, value_enum, default_value_t = OutFormat::Sigmf)]
    format: OutFormat,
    /// Sample type of SigMF data (cf32_le or ci16_le).
    #[arg(long, value_enum, default_value_t = SampleType::Cf32)]
    datatype: SampleType,
    /// Recordings per Parquet part.
    #[arg(long, default_value_t = 1000)]
    rows_per_part: u64,
    /// Worker threads (default: the cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Where the exact noise stage runs: cpu, or gpu / gpu:N (bit-identical output).
    #[arg(long, default_value = "cpu")]
    device: String,
    #[command(flatten)]
    shard: ShardArgs,
    /// Print the resolved spec as JSON and exit.
    #[arg(long)]
    print_spec: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

/// The spec from the file and the flags.
fn synth_spec(args: &SynthArgs) -> Result<SynthSpec> {
    let mut spec = match &args.spec {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| user(format!("{}: cannot read spec: {e}", path.display())))?;
            let parsed = match path.extension().and_then(|e| e.to_str()) {
                Some("toml") => SynthSpec::from_toml(&text),
                _ => SynthSpec::from_json(&text),
            };
            parsed.map_err(|e| user(format!("{}: {e}", path.display())))?
        }
        None => SynthSpec::default(),
    };
    if let Some(fs) = args.sample_rate {
        spec.sample_rate = fs;
    }
    if let Some(n) = args.samples {
        spec.n_samples = n;
    }
    if let Some(ms) = args.duration_ms {
        if !(ms.is_finite() && ms > 0.0) {
            return Err(user(format!("--duration-ms {ms} must be positive")));
        }
        spec.n_samples = (ms * spec.sample_rate / 1000.0).round() as usize;
    }
    if let Some(list) = &args.modulation {
        spec.modulations = if list.trim() == "all" {
            ModKind::ALL
                .iter()
                .map(|&k| ModulationSpec::new(k))
                .collect()
        } else {
            list.split(',')
                .map(|name| ModKind::parse(name).map(ModulationSpec::new))
                .collect::<Result<_, _>>()
                .map_err(|e| user(format!("--modulation: {e}")))?
        };
    }
    if let Some(r) = &args.snr_db {
        spec.snr_db = Range::parse(r).map_err(|e| user(format!("--snr-db: {e}")))?;
    }
    if let Some(d) = args.snr_definition {
        spec.snr_definition = match d {
            SnrDefArg::InBand => SnrDefinition::InBand,
            SnrDefArg::EsN0 => SnrDefinition::EsN0,
            SnrDefArg::FullBand => SnrDefinition::FullBand,
        };
    }
    spec.validate().map_err(|e| user(e.to_string()))?;
    Ok(spec)
}

#[derive(Args)]
pub struct ShardArgs {
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[arg(long, env = "SONOGRAPH_SHARD_INDEX")]
    shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[arg(long, env = "SONOGRAPH_SHARD_COUNT")]
    shard_count: Option<usize>,
}

/// The shard from the flags or the batch system's environment, as `extract` reads it.
pub(crate) fn shard(args: &ShardArgs) -> Result<(usize, usize)> {
    sonograph_pipeline::resolve_shard(args.shard_index, args.shard_count, |k| {
        std::env::var(k).ok()
    })
    .map_err(user)
}

fn pool(workers: Option<usize>) -> Result<rayon::ThreadPool> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(workers.unwrap_or(0))
        .build()
        .context("cannot start the thread pool")
}

/// `--device`: None for the CPU, or the opened GPU.
fn rf_gpu(device: &str) -> Result<Option<sonograph_gpu::rf::RfGpu>> {
    let set = crate::gpu_cli::device_set(device)?;
    let [choice] = set.chosen() else {
        return Err(user(format!(
            "--device {device}: RF commands run on one device: cpu, auto, gpu or gpu:N"
        )));
    };
    match choice.device {
        sonograph_gpu::Selected::Cpu => Ok(None),
        sonograph_gpu::Selected::Gpu(i) => sonograph_gpu::rf::RfGpu::new(Some(i))
            .map(Some)
            .map_err(|e| user(format!("--device {device}: {e}"))),
    }
}

/// `--device auto` with a GPU: the GPU only where it generates recordings of this spec at
/// 1.2 times the CPU's rate (measured on 64 recordings, or read from the machine's calibration
/// cache); the run says what was measured and why it chose.
fn auto_noise_device(
    synth: &Synth,
    seed: u64,
    gpu: Option<sonograph_gpu::rf::RfGpu>,
    pool: &rayon::ThreadPool,
) -> Result<Option<sonograph_gpu::rf::RfGpu>> {
    use sonograph_dsp::CalibrationStore;
    use sonograph_gpu::calibrate::{choose, Measured};
    let mut store = sonograph_io::calibration::FileStore::open();
    let cores = pool.current_num_threads();
    let indices: Vec<u64> = (0..64).collect();
    let seconds = indices.len() as f64 * synth.spec().n_samples as f64 / synth.spec().sample_rate;
    let mut gpu = gpu;
    let gpu_name: String = gpu
        .as_ref()
        .map(|g| g.device().to_string())
        .unwrap_or_default();
    let mut rate = |device: &str, gpu: &mut Option<sonograph_gpu::rf::RfGpu>| -> Result<Measured> {
        let key = format!(
            "synth-iq | {device} | {cores} cores | {}",
            synth.spec().spec_id()
        );
        if let Some(r) = store.get(&key) {
            return Ok(Measured {
                id: device.into(),
                name: device.into(),
                audio_seconds_per_second: r,
                cached: true,
            });
        }
        let mut run = || {
            let noise = gpu.as_mut().map(|g| g as &mut dyn NoiseDevice);
            generate(synth, seed, &indices, noise, pool).map_err(crate::job_error)
        };
        run()?;
        let t = std::time::Instant::now();
        run()?;
        let r = seconds / t.elapsed().as_secs_f64().max(1e-9);
        store.put(key, r);
        Ok(Measured {
            id: device.into(),
            name: device.into(),
            audio_seconds_per_second: r,
            cached: false,
        })
    };
    let measured = vec![rate("cpu", &mut None)?, rate(&gpu_name, &mut gpu)?];
    let (index, why) = choose(&measured);
    eprintln!(
        "sonograph: auto chose {} for the noise stage: {why}",
        if index == 0 { "cpu" } else { &gpu_name }
    );
    Ok(if index == 0 { None } else { gpu })
}

pub fn synth_iq(args: &SynthArgs) -> Result<u8> {
    let spec = synth_spec(args)?;
    if args.print_spec {
        println!("{}", spec.to_json());
        return Ok(0);
    }
    let (shard_index, shard_count) = shard(&args.shard)?;
    let job = SynthIqJob {
        spec,
        seed: args.seed,
        count: args.count,
        out: args.out.clone(),
        format: match args.format {
            OutFormat::Sigmf => SynthFormat::Sigmf(match args.datatype {
                SampleType::Cf32 => WriteType::Cf32,
                SampleType::Ci16 => WriteType::Ci16,
            }),
            OutFormat::Parquet => SynthFormat::Parquet {
                rows_per_part: args.rows_per_part,
            },
        },
        shard_index,
        shard_count,
    };
    let pool = pool(args.workers)?;
    let mut gpu = rf_gpu(&args.device)?;
    if args.device == "auto" && gpu.is_some() {
        let synth = Synth::new(&job.spec).map_err(|e| user(e.to_string()))?;
        gpu = auto_noise_device(&synth, args.seed, gpu, &pool)?;
    }
    let noise = gpu.map(|g| Box::new(g) as Box<dyn NoiseDevice>);
    let on_gpu = noise.is_some();
    let report = args
        .watch
        .run("synth-iq", &args.out, |live| {
            run_synth_iq_live(&job, noise, &pool, live)
        })?
        .map_err(crate::job_error)?;
    eprintln!(
        "sonograph: shard {shard_index}/{shard_count}: {} recordings written, {} already there, in {:.1} s{}",
        report.written,
        report.already_there,
        report.wall_seconds,
        if on_gpu {
            format!(" (noise on {})", report.noise_device)
        } else {
            String::new()
        }
    );
    Ok(0)
}

/// The sample type of raw IQ files, as `extract --format` takes it.
pub type RawFormat = sonograph_pipeline::IqFormat;

#[derive(Args)]
pub struct FeaturesArgs {
    /// A SigMF recording (.sigmf-meta/.sigmf-data), a .sigmf archive, a raw IQ file
    /// (.cf32, .ci16, .cu8, .ci8), or a folder of them.
    source: PathBuf,
    /// Output folder: Parquet parts (one row per recording or window), the ledger and
    /// report.json under __sonograph/. The same command run again resumes; shards share it.
    #[arg(long)]
    out: PathBuf,
    /// Sample rate of raw files.
    #[arg(long)]
    sample_rate: Option<f64>,
    /// Sample type of raw files whose extension does not say it.
    #[arg(long, value_enum)]
    format: Option<RawFormat>,
    /// Features per window of this many milliseconds (default: one row per recording).
    #[arg(long)]
    window_ms: Option<f64>,
    /// dBm of full scale: adds rssi_dbm.
    #[arg(long, allow_hyphen_values = true)]
    calibration_db: Option<f64>,
    /// Add the Welch PSD (fftshift order, float32) as a column.
    #[arg(long)]
    psd: bool,
    /// Welch segment length and overlap (default 1024 and half of it).
    #[arg(long, default_value_t = 1024)]
    nperseg: usize,
    #[arg(long)]
    noverlap: Option<usize>,
    /// Remove each segment's mean before its FFT (scipy's detrend='constant').
    #[arg(long)]
    detrend: bool,
    /// Largest recording read (complex samples); a larger one fails.
    #[arg(long, default_value_t = DEFAULT_MAX_SAMPLES)]
    max_samples: u64,
    /// Rows per Parquet part (a recording's rows never span two).
    #[arg(long, default_value_t = sonograph_pipeline::rf_features::DEFAULT_PART_ROWS)]
    rows_per_part: usize,
    /// Worker threads (default: the cores).
    #[arg(long)]
    workers: Option<usize>,
    /// Where the Welch PSD runs: cpu, or gpu / gpu:N.
    #[arg(long, default_value = "cpu")]
    device: String,
    #[command(flatten)]
    shard: ShardArgs,
    /// No progress bar even on a terminal.
    #[arg(long, env = "SONOGRAPH_NO_PROGRESS")]
    no_progress: bool,
    #[command(flatten)]
    watch: crate::serve_cli::WatchArgs,
}

/// `sonograph rf-features`: exit 0, 3 when recordings failed (listed in the report), 2 on
/// bad options.
pub fn rf_features(args: &FeaturesArgs) -> Result<u8> {
    use std::io::IsTerminal;
    let (shard_index, shard_count) = shard(&args.shard)?;
    let job = RfFeaturesJob {
        rows: RowSpec {
            features: FeatureConfig {
                welch: sonograph_rf::WelchConfig {
                    nperseg: args.nperseg,
                    noverlap: args.noverlap.unwrap_or(args.nperseg / 2),
                    detrend: args.detrend,
                    ..Default::default()
                },
                calibration_db: args.calibration_db,
                ..FeatureConfig::default()
            },
            window_ms: args.window_ms,
            psd: args.psd,
        },
        sample_rate: args.sample_rate,
        raw_format: args.format,
        max_samples: args.max_samples,
        workers: args.workers.unwrap_or(0),
        shard_index,
        shard_count,
        part_rows: args.rows_per_part,
        progress: !args.no_progress && std::io::stderr().is_terminal(),
        ..RfFeaturesJob::new(args.source.clone(), args.out.clone())
    };
    let device =
        rf_gpu(&args.device)?.map(|g| Box::new(g) as Box<dyn sonograph_rf::rows::PsdDevice>);
    let outcome = args.watch.run("rf-features", &args.out, |live| {
        run_rf_features_live(&job, device, live)
    })?;
    let outcome = outcome.map_err(crate::job_error)?;
    Ok(crate::extract::print_outcome(&args.out, &outcome, "IQ"))
}
