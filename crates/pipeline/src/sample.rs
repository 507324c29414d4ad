//! What the telemetry sampler reads at each tick (the devices, the job, the process): the
//! types that the sampler fills, the alert rules read, and the server renders.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use sonograph_dsp::MemoryStats;

use crate::live::DeviceCounters;

/// One device as its probe reads it now: the figures the driver gives (NVML for NVIDIA
/// GPUs), `None` where it gives none.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceReading {
    /// "cpu", "gpu:0": the first word of an executor's device label.
    pub id: String,
    pub name: String,
    /// "available", "busy", "degraded", "failed", "disabled".
    pub state: String,
    pub uuid: Option<String>,
    /// NVML's index (nvidia-smi's numbering): the `gpu` label of the DCGM metrics.
    pub nvml_index: Option<u32>,
    pub utilization_percent: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_free_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub temperature_c: Option<f64>,
    pub power_w: Option<f64>,
}

/// Reads the devices; the server implements it over the gpu crate's registry and NVML.
pub trait DeviceProbe: Send {
    fn read(&mut self) -> Vec<DeviceReading>;
}

/// A probe that knows no device: telemetry then comes from the job's executors alone.
pub struct NoDevices;

impl DeviceProbe for NoDevices {
    fn read(&mut self) -> Vec<DeviceReading> {
        Vec::new()
    }
}

/// One device in a sample: the probe's reading merged with the job's executor on it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DeviceSample {
    #[serde(flatten)]
    pub reading: DeviceReading,
    /// The memory pool's budget and statistics (PyTorch's names), from the executor.
    pub budget_bytes: Option<u64>,
    pub pool: Option<MemoryStats>,
    /// The job's executor on the device (all zero without one): the batch last run and the
    /// job's totals.
    #[serde(flatten)]
    pub executor: DeviceCounters,
    /// Share of the last interval the executor spent computing, and waiting for input.
    pub busy_ratio: Option<f64>,
    pub wait_ratio: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QueueSample {
    pub stage: String,
    pub depth: usize,
    pub capacity: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct JobSample {
    pub id: String,
    pub elapsed_s: f64,
    pub finished: bool,
    pub items_total: u64,
    pub items_resumed: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    pub rows: u64,
    pub audio_seconds: f64,
    /// Over the last interval.
    pub items_per_second: f64,
    pub audio_seconds_per_second: f64,
    pub queues: Vec<QueueSample>,
    /// The largest batch last run on any device.
    pub batch_size: usize,
    /// Seconds each stage was busy, summed over its threads.
    pub stage_busy_s: BTreeMap<String, f64>,
    pub first_failures: Vec<String>,
    /// Seconds since an item or row was last settled (or since the job started).
    pub seconds_since_progress: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProcessSample {
    /// Share of one core over the last interval (200 = two cores busy).
    pub cpu_percent: f64,
    pub cpu_seconds: f64,
    pub rss_bytes: u64,
}

/// Everything read at one tick.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Sample {
    pub seq: u64,
    /// Unix time, seconds.
    pub time: f64,
    pub uptime_s: f64,
    pub process: ProcessSample,
    pub devices: Vec<DeviceSample>,
    pub job: Option<JobSample>,
}

/// Now, in Unix seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}
