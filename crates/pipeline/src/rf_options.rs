//! The IQ jobs' options as every door takes them: `rf-features` and `synth-iq`'s flags (clap,
//! feature `cli`), a request of the service by the flags' names (serde), Python's keyword
//! arguments. Each default is written once, here; `plan` checks every option in its own name
//! and gives the job the pipeline runs, and `describe` what it resolved to (`--plan`,
//! `POST /api/v1/plan`, `sonograph.plan`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sonograph_io::sigmf::WriteType;
use sonograph_rf::features::FeatureConfig;
use sonograph_rf::rows::RowSpec;
use sonograph_rf::spec::{ModKind, ModulationSpec, Range, SnrDefinition};
use sonograph_rf::SynthSpec;

use crate::config::{bounds, defaults, within};
use crate::error::JobError;
use crate::options::{IqFormat, SpecSource};
use crate::rf_features::RfFeaturesJob;
use crate::synth_iq::{SynthFormat, SynthIqJob};

/// The memory a Parquet part of synthetic recordings may hold while it is written: a part's
/// recordings are generated together.
const SYNTH_PART_BYTES: u64 = 1 << 30;

/// Every option of an `rf-features` job (`sonograph rf-features`, a request of kind
/// `rf-features`, `sonograph.rf_features`), by the names of its flags.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RfFeaturesOptions {
    /// A SigMF recording (.sigmf-meta/.sigmf-data), a .sigmf archive, a raw IQ file
    /// (.cf32, .ci16, .cu8, .ci8), or a folder of them.
    #[cfg_attr(feature = "cli", arg(value_name = "SOURCE"))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub source: PathBuf,
    /// Output folder: Parquet parts (one row per recording or window), the ledger and
    /// report.json under __sonograph/. The same job run again resumes; shards share it.
    #[cfg_attr(feature = "cli", arg(long))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub out: PathBuf,
    /// Sample rate of raw files, in Hz (SigMF recordings carry their own).
    #[cfg_attr(feature = "cli", arg(long))]
    pub sample_rate: Option<f64>,
    /// Sample type of raw files whose extension does not say it.
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub format: Option<IqFormat>,
    /// Features per window of this many milliseconds (default: one row per recording).
    #[cfg_attr(feature = "cli", arg(long))]
    pub window_ms: Option<f64>,
    /// dBm of full scale: adds rssi_dbm.
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub calibration_db: Option<f64>,
    /// Add the Welch PSD (fftshift order, float32) as a column.
    #[cfg_attr(feature = "cli", arg(long))]
    pub psd: bool,
    /// Welch segment length.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::NPERSEG))]
    pub nperseg: usize,
    /// Welch segment overlap (default: half of nperseg).
    #[cfg_attr(feature = "cli", arg(long))]
    pub noverlap: Option<usize>,
    /// Remove each segment's mean before its FFT (scipy's detrend='constant').
    #[cfg_attr(feature = "cli", arg(long))]
    pub detrend: bool,
    /// Largest recording read (complex samples); a larger one fails.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::MAX_SAMPLES))]
    pub max_samples: u64,
    /// Rows per Parquet part (a recording's rows never span two).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::RF_ROWS_PER_PART))]
    pub rows_per_part: usize,
    /// Worker threads (default: the cores).
    #[cfg_attr(feature = "cli", arg(long))]
    pub workers: Option<usize>,
    /// Where the Welch PSD runs: cpu, auto, or gpu / gpu:N.
    #[cfg_attr(feature = "cli", arg(long, default_value = defaults::RF_DEVICE))]
    pub device: String,
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_INDEX"))]
    pub shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_COUNT"))]
    pub shard_count: Option<usize>,
}

impl Default for RfFeaturesOptions {
    fn default() -> Self {
        RfFeaturesOptions {
            source: PathBuf::new(),
            out: PathBuf::new(),
            sample_rate: None,
            format: None,
            window_ms: None,
            calibration_db: None,
            psd: false,
            nperseg: defaults::NPERSEG,
            noverlap: None,
            detrend: false,
            max_samples: defaults::MAX_SAMPLES,
            rows_per_part: defaults::RF_ROWS_PER_PART,
            workers: None,
            device: defaults::RF_DEVICE.into(),
            shard_index: None,
            shard_count: None,
        }
    }
}

/// An `rf-features` job, planned: the job and the device it asks for (opened by the door).
#[derive(Debug, Clone)]
pub struct RfFeaturesPlan {
    pub job: RfFeaturesJob,
    pub device: String,
}

impl RfFeaturesOptions {
    /// The job these options describe, every option checked (a bad one is a
    /// [`JobError::Config`] naming it); `env` gives the batch system's shard variables.
    pub fn plan(&self, env: impl Fn(&str) -> Option<String>) -> Result<RfFeaturesPlan, JobError> {
        required(&self.source, "source")?;
        required(&self.out, "out")?;
        let (shard_index, shard_count) = shard(self.shard_index, self.shard_count, env)?;
        let job = RfFeaturesJob {
            rows: RowSpec {
                features: FeatureConfig {
                    welch: sonograph_rf::WelchConfig {
                        nperseg: self.nperseg,
                        noverlap: self.noverlap.unwrap_or(self.nperseg / 2),
                        detrend: self.detrend,
                        ..Default::default()
                    },
                    calibration_db: self.calibration_db,
                    ..FeatureConfig::default()
                },
                window_ms: self.window_ms,
                psd: self.psd,
            },
            sample_rate: self.sample_rate,
            raw_format: self.format,
            max_samples: self.max_samples,
            workers: workers(self.workers)?,
            shard_index,
            shard_count,
            part_rows: self.rows_per_part,
            ..RfFeaturesJob::new(self.source.clone(), self.out.clone())
        };
        job.check().map_err(|e| match e {
            // The row spec's fields by their options' names.
            JobError::Config(m) => JobError::Config(
                m.replace("welch.nperseg", "nperseg")
                    .replace("welch.noverlap", "noverlap")
                    .replace("window_ms", "window-ms")
                    .replace("calibration_db", "calibration-db"),
            ),
            e => e,
        })?;
        Ok(RfFeaturesPlan {
            job,
            device: device(&self.device)?,
        })
    }
}

impl RfFeaturesPlan {
    /// What the job will do, every default filled in: the same for the same options through
    /// any door.
    pub fn describe(&self) -> serde_json::Value {
        let j = &self.job;
        serde_json::json!({
            "kind": "rf-features",
            "source": j.source,
            "out": j.out,
            "spec_id": j.rows.spec_id(),
            "rows": j.rows,
            "sample_rate": j.sample_rate,
            "format": j.raw_format.map(|f| f.datatype().name()),
            "max_samples": j.max_samples,
            "rows_per_part": j.part_rows,
            "workers": j.workers,
            "device": self.device,
            "shard_index": j.shard_index,
            "shard_count": j.shard_count,
        })
    }
}

/// How `synth-iq` writes its recordings.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SynthOutput {
    /// One SigMF pair per recording.
    #[default]
    Sigmf,
    /// Parquet parts of rows.
    Parquet,
}

/// The sample type of SigMF data that `synth-iq` writes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum SynthDatatype {
    /// cf32_le.
    #[default]
    Cf32,
    /// ci16_le: `round(x · 32768)` clamped to the int16 range.
    Ci16,
}

/// What a synthetic recording's SNR measures.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SnrChoice {
    /// Signal power over the noise power inside the signal's 99 % occupied bandwidth.
    InBand,
    /// Energy per symbol over the noise density (digital modulations only).
    EsN0,
    /// Signal power over the noise power in the whole sampled band.
    FullBand,
}

/// Every option of a `synth-iq` job (`sonograph synth-iq`, a request of kind `synth-iq`,
/// `sonograph.synth_iq`), by the names of its flags.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SynthIqOptions {
    /// Recordings in the whole dataset (shards take contiguous shares of 0..count).
    #[cfg_attr(feature = "cli", arg(long, required = true))]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub count: Option<u64>,
    /// A SynthSpec: a JSON or TOML file (by extension), or the spec itself; the options below
    /// override it.
    #[cfg_attr(feature = "cli", arg(long, value_name = "FILE"))]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub spec: Option<SpecSource<SynthSpec>>,
    /// Sample rate in Hz (default 200000).
    #[cfg_attr(feature = "cli", arg(long))]
    pub sample_rate: Option<f64>,
    /// Complex samples per recording.
    #[cfg_attr(feature = "cli", arg(long, conflicts_with = "duration_ms"))]
    pub samples: Option<usize>,
    /// Length of each recording in milliseconds (instead of samples).
    #[cfg_attr(feature = "cli", arg(long))]
    pub duration_ms: Option<f64>,
    /// Comma-separated modulations, or `all`: tone, am-dsb, am-dsb-sc, ssb-usb, ssb-lsb, fm,
    /// ook, 4ask, 8ask, bpsk, qpsk, 8psk, 16psk, oqpsk, 16qam, 32qam, 64qam, 256qam, 16apsk,
    /// 32apsk, 2fsk, 4fsk, gfsk, gmsk, msk, ofdm, lfm. Each recording draws one uniformly.
    #[cfg_attr(feature = "cli", arg(long))]
    pub modulation: Option<String>,
    /// SNR range A:B in dB (or one value), drawn uniformly per recording.
    #[cfg_attr(feature = "cli", arg(long, allow_hyphen_values = true))]
    pub snr_db: Option<String>,
    /// What the SNR measures (default in-band).
    #[cfg_attr(feature = "cli", arg(long, value_enum))]
    pub snr_definition: Option<SnrChoice>,
    /// Dataset seed: recording i is a function of (spec, seed, i) only.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub seed: u64,
    /// Output folder.
    #[cfg_attr(feature = "cli", arg(long))]
    #[cfg_attr(feature = "openapi", schema(value_type = String, required = true, min_length = 1))]
    pub out: PathBuf,
    /// SigMF recordings (default) or Parquet rows.
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t))]
    pub format: SynthOutput,
    /// Sample type of SigMF data (cf32_le or ci16_le).
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t))]
    pub datatype: SynthDatatype,
    /// Recordings per Parquet part.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = defaults::SYNTH_ROWS_PER_PART))]
    pub rows_per_part: u64,
    /// Worker threads (default: the cores).
    #[cfg_attr(feature = "cli", arg(long))]
    pub workers: Option<usize>,
    /// Where the exact noise stage runs: cpu, gpu / gpu:N (bit-identical output), or auto
    /// (a GPU only where it measures faster than the CPU on this spec).
    #[cfg_attr(feature = "cli", arg(long, default_value = defaults::RF_DEVICE))]
    pub device: String,
    /// This machine's shard (default: from JOB_COMPLETION_INDEX or SLURM_ARRAY_TASK_ID, else 0).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_INDEX"))]
    pub shard_index: Option<usize>,
    /// Number of shards (default: SLURM_ARRAY_TASK_COUNT, else 1).
    #[cfg_attr(feature = "cli", arg(long, env = "SONOGRAPH_SHARD_COUNT"))]
    pub shard_count: Option<usize>,
}

impl Default for SynthIqOptions {
    fn default() -> Self {
        SynthIqOptions {
            count: None,
            spec: None,
            sample_rate: None,
            samples: None,
            duration_ms: None,
            modulation: None,
            snr_db: None,
            snr_definition: None,
            seed: 0,
            out: PathBuf::new(),
            format: SynthOutput::default(),
            datatype: SynthDatatype::default(),
            rows_per_part: defaults::SYNTH_ROWS_PER_PART,
            workers: None,
            device: defaults::RF_DEVICE.into(),
            shard_index: None,
            shard_count: None,
        }
    }
}

/// A `synth-iq` job, planned: the job, its threads and the device it asks for.
#[derive(Debug, Clone)]
pub struct SynthIqPlan {
    pub job: SynthIqJob,
    pub workers: usize,
    pub device: String,
}

impl SynthIqOptions {
    /// The dataset's spec: the spec given (else the defaults: one-second QPSK recordings at
    /// 200 kHz), with the options that override it, checked.
    pub fn synth_spec(&self) -> Result<SynthSpec, JobError> {
        let bad = JobError::Config;
        let mut spec = match &self.spec {
            Some(source) => source.load().map_err(bad)?,
            None => SynthSpec::default(),
        };
        if let Some(fs) = self.sample_rate {
            within("sample-rate", fs, bounds::IQ_SAMPLE_RATE)?;
            spec.sample_rate = fs;
        }
        if self.samples.is_some() && self.duration_ms.is_some() {
            return Err(bad("samples and duration-ms are exclusive".into()));
        }
        if let Some(n) = self.samples {
            within("samples", n, 1..=sonograph_rf::spec::MAX_SAMPLES)?;
            spec.n_samples = n;
        }
        if let Some(ms) = self.duration_ms {
            if !(ms.is_finite() && ms > 0.0) {
                return Err(bad(format!("duration-ms {ms} must be positive")));
            }
            let n = (ms * spec.sample_rate / 1000.0).round();
            if !(1.0..=sonograph_rf::spec::MAX_SAMPLES as f64).contains(&n) {
                return Err(bad(format!(
                    "duration-ms {ms} at {} Hz is {n} samples: 1 to {} are",
                    spec.sample_rate,
                    sonograph_rf::spec::MAX_SAMPLES
                )));
            }
            spec.n_samples = n as usize;
        }
        if let Some(list) = &self.modulation {
            spec.modulations = if list.trim() == "all" {
                ModKind::ALL
                    .iter()
                    .map(|&k| ModulationSpec::new(k))
                    .collect()
            } else {
                list.split(',')
                    .map(|name| ModKind::parse(name).map(ModulationSpec::new))
                    .collect::<Result<_, _>>()
                    .map_err(|e| bad(format!("modulation: {e}")))?
            };
        }
        if let Some(r) = &self.snr_db {
            spec.snr_db = Range::parse(r).map_err(|e| bad(format!("snr-db: {e}")))?;
        }
        if let Some(d) = self.snr_definition {
            spec.snr_definition = match d {
                SnrChoice::InBand => SnrDefinition::InBand,
                SnrChoice::EsN0 => SnrDefinition::EsN0,
                SnrChoice::FullBand => SnrDefinition::FullBand,
            };
        }
        spec.validate().map_err(|e| bad(e.to_string()))?;
        Ok(spec)
    }

    /// The job these options describe, every option checked; `env` gives the batch system's
    /// shard variables.
    pub fn plan(&self, env: impl Fn(&str) -> Option<String>) -> Result<SynthIqPlan, JobError> {
        let Some(count) = self.count else {
            return Err(JobError::Config("count is required".into()));
        };
        required(&self.out, "out")?;
        let spec = self.synth_spec()?;
        let (shard_index, shard_count) = shard(self.shard_index, self.shard_count, env)?;
        // What one format would ignore is refused rather than dropped.
        if self.format == SynthOutput::Parquet && self.datatype != SynthDatatype::default() {
            return Err(JobError::Config(
                "datatype is the SigMF data's sample type: Parquet rows hold cf32".into(),
            ));
        }
        if self.format == SynthOutput::Sigmf && self.rows_per_part != defaults::SYNTH_ROWS_PER_PART
        {
            return Err(JobError::Config(
                "rows-per-part sizes Parquet parts: give format parquet with it".into(),
            ));
        }
        let format = match self.format {
            SynthOutput::Sigmf => SynthFormat::Sigmf(match self.datatype {
                SynthDatatype::Cf32 => WriteType::Cf32,
                SynthDatatype::Ci16 => WriteType::Ci16,
            }),
            SynthOutput::Parquet => {
                let rows = self.rows_per_part;
                within("rows-per-part", rows, 1..=1_000_000)?;
                let bytes = rows.saturating_mul(spec.n_samples as u64 * 8);
                if bytes > SYNTH_PART_BYTES {
                    return Err(JobError::Config(format!(
                        "rows-per-part {rows}: a part of {rows} recordings of {} samples holds \
                         {:.1} GiB, over the {} GiB a part may",
                        spec.n_samples,
                        bytes as f64 / f64::from(1u32 << 30),
                        SYNTH_PART_BYTES >> 30
                    )));
                }
                SynthFormat::Parquet {
                    rows_per_part: rows,
                }
            }
        };
        Ok(SynthIqPlan {
            job: SynthIqJob {
                spec,
                seed: self.seed,
                count,
                out: self.out.clone(),
                format,
                shard_index,
                shard_count,
                roots: sonograph_io::Roots::anywhere(),
            },
            workers: workers(self.workers)?,
            device: device(&self.device)?,
        })
    }
}

impl SynthIqPlan {
    /// What the job will do, the spec resolved: the same for the same options through any
    /// door.
    pub fn describe(&self) -> serde_json::Value {
        let j = &self.job;
        let (format, datatype, rows_per_part) = match j.format {
            SynthFormat::Sigmf(t) => ("sigmf", Some(t.datatype().name()), None),
            SynthFormat::Parquet { rows_per_part } => ("parquet", None, Some(rows_per_part)),
        };
        serde_json::json!({
            "kind": "synth-iq",
            "out": j.out,
            "count": j.count,
            "seed": j.seed,
            "spec_id": j.spec.spec_id(),
            "spec": j.spec.resolved(),
            "format": format,
            "datatype": datatype,
            "rows_per_part": rows_per_part,
            "workers": self.workers,
            "device": self.device,
            "shard_index": j.shard_index,
            "shard_count": j.shard_count,
        })
    }
}

fn required(path: &std::path::Path, name: &str) -> Result<(), JobError> {
    if path.as_os_str().is_empty() {
        return Err(JobError::Config(format!("{name} is required")));
    }
    Ok(())
}

/// The shard from the options or the batch system's environment, checked.
pub(crate) fn shard(
    index: Option<usize>,
    count: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(usize, usize), JobError> {
    let (index, count) = crate::resolve_shard(index, count, env).map_err(JobError::Config)?;
    crate::config::check_shard(index, count)?;
    Ok((index, count))
}

/// The threads, the cores by default.
pub(crate) fn workers(workers: Option<usize>) -> Result<usize, JobError> {
    let n = workers.unwrap_or_else(defaults::workers);
    within("workers", n, bounds::WORKERS)?;
    Ok(n)
}

/// The device as given, which must name one.
pub(crate) fn device(device: &str) -> Result<String, JobError> {
    if device.trim().is_empty() {
        return Err(JobError::Config(
            "device is empty: cpu, auto, gpu or gpu:N".into(),
        ));
    }
    Ok(device.to_string())
}
