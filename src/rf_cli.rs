//! `sonograph synth-iq` (synthetic IQ datasets as SigMF recordings or Parquet rows) and
//! `sonograph rf-features` (RF features of SigMF or raw IQ recordings to Parquet).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use rayon::prelude::*;
use sonograph_io::sigmf::{
    draft_sigmf, publish_sigmf, sigmf_paths, WriteType, DEFAULT_MAX_SAMPLES,
};
use sonograph_io::table::{write_table, Column};
use sonograph_pipeline::rf_features::{run_rf_features, RfFeaturesJob};
use sonograph_rf::features::FeatureConfig;
use sonograph_rf::rows::RowSpec;
use sonograph_rf::sigmf::{truth_annotation, DataType, SigmfMeta};
use sonograph_rf::spec::{ModKind, ModulationSpec, Range, SnrDefinition};
use sonograph_rf::{Complex32, NoiseJob, Synth, SynthSpec, Truth};

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
        generate(synth, seed, &indices, gpu, pool)?;
        let t = std::time::Instant::now();
        generate(synth, seed, &indices, gpu, pool)?;
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

/// Records the dataset's spec and seed in `out/dataset.json` the first time; a later run
/// (another shard, a resume) with a different spec or seed is refused, since its recordings
/// would not belong to the same dataset.
fn claim_folder(out: &Path, spec: &SynthSpec, seed: u64, count: u64) -> Result<()> {
    std::fs::create_dir_all(out)
        .map_err(|e| user(format!("{}: cannot create: {e}", out.display())))?;
    let path = out.join("dataset.json");
    let mine = serde_json::json!({
        "spec_id": spec.spec_id(),
        "seed": seed,
        "count": count,
        "spec": serde_json::from_str::<serde_json::Value>(&spec.to_json())?,
    });
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let theirs: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| user(format!("{}: not a sonograph dataset: {e}", path.display())))?;
            for key in ["spec_id", "seed", "count"] {
                if theirs[key] != mine[key] {
                    return Err(user(format!(
                        "{}: the folder holds another dataset ({key} {} here, {} asked); use a new --out",
                        path.display(),
                        theirs[key],
                        mine[key]
                    )));
                }
            }
            Ok(())
        }
        Err(_) => sonograph_io::publish::publish_bytes(
            &path,
            serde_json::to_string_pretty(&mine)?.as_bytes(),
        )
        .with_context(|| format!("{}: cannot write", path.display())),
    }
}

/// Generates recordings `indices` (in parallel on the pool), the noise stage on the GPU when
/// one is given.
fn generate(
    synth: &Synth,
    seed: u64,
    indices: &[u64],
    gpu: &mut Option<sonograph_gpu::rf::RfGpu>,
    pool: &rayon::ThreadPool,
) -> Result<Vec<(Vec<Complex32>, Truth)>> {
    match gpu {
        None => Ok(pool.install(|| {
            indices
                .par_iter()
                .map(|&i| {
                    let s = synth.sample(seed, i);
                    (s.iq, s.truth)
                })
                .collect()
        })),
        Some(g) => {
            let parts: Vec<(Vec<Complex32>, Truth, NoiseJob)> =
                pool.install(|| indices.par_iter().map(|&i| synth.clean(seed, i)).collect());
            let (mut iq, rest): (Vec<_>, Vec<_>) =
                parts.into_iter().map(|(a, b, c)| (a, (b, c))).unzip();
            let (truths, jobs): (Vec<Truth>, Vec<NoiseJob>) = rest.into_iter().unzip();
            g.add_noise(&mut iq, &jobs)
                .map_err(|e| anyhow::anyhow!("{}: {e}", g.device()))?;
            Ok(iq.into_iter().zip(truths).collect())
        }
    }
}

pub fn synth_iq(args: &SynthArgs) -> Result<u8> {
    let spec = synth_spec(args)?;
    if args.print_spec {
        println!("{}", spec.to_json());
        return Ok(0);
    }
    if args.rows_per_part == 0 {
        return Err(user("--rows-per-part must be at least 1"));
    }
    let (si, sc) = shard(&args.shard)?;
    let count = usize::try_from(args.count).map_err(|_| user("--count is too large"))?;
    let range = sonograph_io::manifest::shard_range(count, si, sc);
    let synth = Synth::new(&spec).map_err(|e| user(e.to_string()))?;
    claim_folder(&args.out, synth.spec(), args.seed, args.count)?;
    let pool = pool(args.workers)?;
    let mut gpu = rf_gpu(&args.device)?;
    if args.device == "auto" && gpu.is_some() {
        gpu = auto_noise_device(&synth, args.seed, gpu, &pool)?;
    }
    let started = std::time::Instant::now();
    let (mut written, mut skipped) = (0u64, 0u64);
    // Batches of recordings at absolute-index boundaries: Parquet parts are named by the
    // indices they hold, so a resume or another shard split finds them again.
    let step = match args.format {
        OutFormat::Parquet => args.rows_per_part,
        OutFormat::Sigmf => 64,
    };
    let mut start = range.start as u64;
    while start < range.end as u64 {
        let end = ((start / step + 1) * step).min(range.end as u64);
        match args.format {
            OutFormat::Sigmf => {
                let todo: Vec<u64> = (start..end)
                    .filter(|&i| !sigmf_paths(&recording_base(&args.out, i)).0.exists())
                    .collect();
                skipped += end - start - todo.len() as u64;
                let recs = generate(&synth, args.seed, &todo, &mut gpu, &pool)?;
                let dtype = match args.datatype {
                    SampleType::Cf32 => WriteType::Cf32,
                    SampleType::Ci16 => WriteType::Ci16,
                };
                // Written and synced side by side, then put in place together: one folder
                // sync for the group's data and one for its metadata, not one per file.
                let drafts = pool
                    .install(|| {
                        todo.par_iter()
                            .zip(&recs)
                            .map(|(&i, (iq, truth))| {
                                let mut meta = SigmfMeta::new(DataType::Cf32Le, spec.sample_rate);
                                meta.declare_extension();
                                meta.global.description = Some(format!(
                                    "sonograph synth-iq, seed {}, recording {i}",
                                    args.seed
                                ));
                                meta.annotations.push(truth_annotation(truth));
                                let (draft, clipped) =
                                    draft_sigmf(&recording_base(&args.out, i), iq, dtype, meta)?;
                                if clipped > 0 {
                                    tracing::warn!(
                                        "recording {i}: {clipped} values clipped to the ci16 range"
                                    );
                                }
                                Ok(draft)
                            })
                            .collect::<Result<Vec<_>, sonograph_io::IqError>>()
                    })
                    .map_err(|e| anyhow::anyhow!(e))?;
                publish_sigmf(drafts).map_err(|e| anyhow::anyhow!(e))?;
                written += todo.len() as u64;
            }
            OutFormat::Parquet => {
                let path = args.out.join(format!("part-{start:09}-{end:09}.parquet"));
                if path.exists() {
                    skipped += end - start;
                } else {
                    let indices: Vec<u64> = (start..end).collect();
                    let recs = generate(&synth, args.seed, &indices, &mut gpu, &pool)?;
                    write_iq_part(&path, &indices, &recs, &spec, args.seed)?;
                    written += end - start;
                }
            }
        }
        start = end;
    }
    eprintln!(
        "sonograph: shard {si}/{sc}: {written} recordings written, {skipped} already there, in {:.1} s{}",
        started.elapsed().as_secs_f64(),
        gpu.as_ref().map_or(String::new(), |g| format!(" (noise on {})", g.device()))
    );
    Ok(0)
}

/// `out/sample-000000042` (the SigMF pair's base).
pub fn recording_base(out: &Path, index: u64) -> PathBuf {
    out.join(format!("sample-{index:09}"))
}

fn write_iq_part(
    path: &Path,
    indices: &[u64],
    recs: &[(Vec<Complex32>, Truth)],
    spec: &SynthSpec,
    seed: u64,
) -> Result<()> {
    let truths: Vec<&Truth> = recs.iter().map(|r| &r.1).collect();
    let f64s = |f: &dyn Fn(&Truth) -> f64| Column::F64(truths.iter().map(|t| f(t)).collect());
    let columns = vec![
        (
            "id".to_string(),
            Column::Utf8(indices.iter().map(|i| format!("sample-{i:09}")).collect()),
        ),
        ("index".to_string(), Column::U64(indices.to_vec())),
        (
            "label".to_string(),
            Column::Utf8(truths.iter().map(|t| t.label.clone()).collect()),
        ),
        ("sample_rate".to_string(), f64s(&|t| t.sample_rate)),
        ("snr_db".to_string(), f64s(&|t| t.snr_db)),
        ("cfo_hz".to_string(), f64s(&|t| t.cfo_hz)),
        (
            "noise_sigma".to_string(),
            f64s(&|t| f64::from(t.noise_sigma)),
        ),
        (
            "truth".to_string(),
            Column::Utf8(
                truths
                    .iter()
                    .map(|t| serde_json::to_string(t).expect("truth serialises"))
                    .collect(),
            ),
        ),
        (
            "iq".to_string(),
            Column::ListF32(
                recs.iter()
                    .map(|(iq, _)| iq.iter().flat_map(|v| [v.re, v.im]).collect())
                    .collect(),
            ),
        ),
    ];
    let meta = [
        ("sonograph.synth_spec".to_string(), spec.to_json()),
        ("sonograph.spec_id".to_string(), spec.spec_id()),
        ("sonograph.seed".to_string(), seed.to_string()),
    ];
    write_table(path, &columns, &meta).map_err(|e| anyhow::anyhow!(e))?;
    Ok(())
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
    let outcome = run_rf_features(&job, device).map_err(crate::extract::job_error)?;
    Ok(crate::extract::print_outcome(&args.out, &outcome, "IQ"))
}
