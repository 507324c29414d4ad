//! `OUT/__sonograph/report.json`.

use serde::{Deserialize, Serialize};

/// `reason` about the file `path`, naming it once (a reason that names it already stays as
/// it is).
pub fn named_error(path: &std::path::Path, reason: String) -> String {
    let name = path.display().to_string();
    if reason.contains(&name) {
        reason
    } else {
        format!("{name}: {reason}")
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Failure {
    pub id: String,
    pub source: String,
    pub reason: String,
}

/// Seconds each stage spent busy, summed over its threads.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StageTimes {
    /// Decoding and resampling (and the streamed extraction of long items in CPU-only jobs).
    pub decode_s: f64,
    /// Executors waiting for the prefetch queue (decoding was the bottleneck while this grew).
    pub queue_wait_s: f64,
    /// Feature extraction in the executors.
    pub compute_s: f64,
    /// Encoding and writing Parquet parts and the ledger.
    pub write_s: f64,
    /// Stages inserted into the data path (`run_with`), summed.
    #[serde(default)]
    pub inserted_s: f64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceReport {
    pub device: String,
    pub items: u64,
    pub batches: u64,
    pub min_batch: u64,
    pub max_batch: u64,
    pub mean_batch: f64,
    pub out_of_memory: u64,
    pub retries: u64,
    pub splits: u64,
    /// Items moved to the CPU: one that ran out of memory alone, or everything after the
    /// device was lost.
    pub moved_to_cpu: u64,
    /// Smallest batch size that ran out of memory; batches never grew back to it.
    #[serde(default)]
    pub batch_ceiling: Option<usize>,
    /// What went wrong and where the work went (an item moved to the CPU, a lost device).
    #[serde(default)]
    pub alerts: Vec<String>,
    /// Alerts past the first hundred, counted only (the log has them all).
    #[serde(default)]
    pub alerts_dropped: u64,
    /// Transient errors the device recovered from after a backoff and a health check.
    #[serde(default)]
    pub recovered: u64,
    /// The device was lost and taken out of the job.
    #[serde(default)]
    pub retired: bool,
    /// A GPU's data path over the job: its chunks, the bytes of samples it was sent and the
    /// chunks sent as 16-bit samples, its staging memory, the kernels' time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transfer: Option<sonograph_dsp::TransferStats>,
}

/// The model side of a job with a model (`extract --model`): where and at which precision it
/// ran, how busy it was, and how full its input queue stayed (the data side's lead).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelReport {
    pub model: String,
    /// "encoder" (`outputs`, `encoded_lengths`) or "ctc" (`logprobs`).
    pub kind: String,
    pub device: String,
    /// What the model takes: "f32", or "f16" (features rounded to f16 before it).
    pub input_precision: String,
    /// Rows per model batch asked for (`--model-batch`).
    pub batch: usize,
    pub rows: u64,
    /// Rows whose model output failed (their items failed, with the reason).
    pub rows_failed: u64,
    /// Groups of rows the stage ran, and model batches completed (a split group runs several).
    pub runs: u64,
    pub batches: u64,
    pub out_of_memory: u64,
    pub splits: u64,
    /// Rows run by a CPU session of the model instead (alone too large, or the device lost).
    pub moved_to_fallback: u64,
    pub device_lost: bool,
    pub alerts: Vec<String>,
    /// Seconds running the model.
    pub busy_s: f64,
    /// Seconds waiting for rows once warm: the data side was behind (starvation).
    pub starved_s: f64,
    /// Seconds waiting for the first batch to fill.
    pub warmup_s: f64,
    /// When the first batch ran, in seconds from the stage's start.
    pub first_run_s: Option<f64>,
    /// Depth of the queue of rows from the data side, sampled as rows were taken (at most
    /// every `depth_interval_s`).
    pub queue_capacity: usize,
    pub queue_depth: Vec<DepthSample>,
    pub depth_interval_s: f64,
}

impl Default for ModelReport {
    fn default() -> Self {
        ModelReport {
            model: String::new(),
            kind: String::new(),
            device: String::new(),
            input_precision: String::new(),
            batch: 0,
            rows: 0,
            rows_failed: 0,
            runs: 0,
            batches: 0,
            out_of_memory: 0,
            splits: 0,
            moved_to_fallback: 0,
            device_lost: false,
            alerts: Vec::new(),
            busy_s: 0.0,
            starved_s: 0.0,
            warmup_s: 0.0,
            first_run_s: None,
            queue_capacity: 0,
            queue_depth: Vec::new(),
            depth_interval_s: 0.1,
        }
    }
}

/// The depth of a queue at a time (seconds from the stage's start).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct DepthSample {
    pub t_s: f64,
    pub depth: usize,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub spec_id: String,
    /// How the devices were chosen where `auto` measured them: each device's rate on the
    /// job's spec, the one kept, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_choice: Option<serde_json::Value>,
    /// The precision the features' spectral core ran at on every feature device ("f32" or
    /// "f64"); the model's is in `model`.
    #[serde(default)]
    pub precision: String,
    pub shard_index: usize,
    pub shard_count: usize,
    pub items_total: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    /// Items found done in the ledger and skipped by this run.
    pub items_resumed: u64,
    /// Rows written (long items are several rows).
    pub rows: u64,
    pub parts: u64,
    /// Bytes of the parts written by this run, and their features' stored size over it
    /// (Parquet, BYTE_STREAM_SPLIT and zstd).
    #[serde(default)]
    pub part_bytes: u64,
    #[serde(default)]
    pub compression_ratio: f64,
    pub audio_seconds: f64,
    pub wall_seconds: f64,
    /// Audio seconds per wall second of this run.
    pub real_time_factor: f64,
    pub stages: StageTimes,
    /// The process's CPU time during the job over wall time × cores: 1.0 keeps every core
    /// busy (0 where /proc cannot be read).
    pub core_utilisation: f64,
    pub devices: Vec<DeviceReport>,
    /// The model side, in a job with a model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelReport>,
    pub peak_rss_mb: f64,
    /// The first 1,000 failures by item id (`items_failed` counts them all; the ledger's
    /// `failures` table holds every one).
    pub failures: Vec<Failure>,
}

/// Failures listed in report.json (by id); every one is counted there and kept in the ledger.
pub(crate) const REPORT_FAILURES: usize = 1000;

/// The failures report.json lists: the ledger's first [`REPORT_FAILURES`] by id.
pub(crate) fn first_failures(
    ledger: &sonograph_io::ledger::Ledger,
) -> Result<Vec<Failure>, sonograph_io::ledger::LedgerError> {
    Ok(ledger
        .first_failures(REPORT_FAILURES)?
        .into_iter()
        .map(|(id, source, reason)| Failure { id, source, reason })
        .collect())
}

/// Peak resident set size of this process (VmHWM), in MiB; 0 where /proc is absent.
pub fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}
