//! A running job's live counters: what the telemetry sampler reads while the job runs, and the
//! job's cancel switch.
//!
//! The stages write here on their own schedule (the writer per item, an executor per batch, a
//! decoder per item) with relaxed atomics: a few nanoseconds each, against milliseconds of
//! work per item, so watching a job costs it nothing measurable. Nothing here is read by the
//! job itself except the cancel switch.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonograph_dsp::MemoryStats;

/// The job's queues, in data-path order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Queue {
    /// Entries from the source to the decode workers.
    Work,
    /// Decoded units waiting for an executor (the prefetch queue).
    Prefetch,
    /// Rows and failures waiting for the writer.
    Writer,
    /// Rows waiting for the model (`extract --model`): the data side's lead on it.
    Model,
}

impl Queue {
    pub const ALL: [Queue; 4] = [Queue::Work, Queue::Prefetch, Queue::Writer, Queue::Model];

    /// The `stage` label of `sonograph_queue_depth`.
    pub fn name(self) -> &'static str {
        match self {
            Queue::Work => "decode",
            Queue::Prefetch => "prefetch",
            Queue::Writer => "write",
            Queue::Model => "model",
        }
    }
}

/// The job's stages whose busy time is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Decode,
    /// Executors waiting for the prefetch queue.
    QueueWait,
    Compute,
    Write,
    /// The model stage running its batches (`extract --model`).
    Model,
}

impl Stage {
    pub const ALL: [Stage; 5] = [
        Stage::Decode,
        Stage::QueueWait,
        Stage::Compute,
        Stage::Write,
        Stage::Model,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Decode => "decode",
            Stage::QueueWait => "queue_wait",
            Stage::Compute => "compute",
            Stage::Write => "write",
            Stage::Model => "model",
        }
    }
}

/// How many failure reasons a job keeps for its alert (the report has them all).
pub const FIRST_FAILURES: usize = 5;

#[derive(Default)]
struct Gauge {
    depth: AtomicUsize,
    capacity: AtomicUsize,
}

/// One executor's counters.
pub struct LiveDevice {
    /// The extractor's label ("gpu:0 NVIDIA H100 (Vulkan)", "cpu").
    pub name: String,
    pub is_cpu: bool,
    batch_size: AtomicUsize,
    batches: AtomicU64,
    items: AtomicU64,
    ooms: AtomicU64,
    moved: AtomicU64,
    compute_ns: AtomicU64,
    wait_ns: AtomicU64,
    lost: AtomicBool,
    lost_reason: Mutex<Option<String>>,
    memory: Mutex<Option<MemoryStats>>,
}

/// A copy of a [`LiveDevice`] at one moment.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct DeviceCounters {
    /// The executor's device label.
    #[serde(rename = "executor")]
    pub name: String,
    pub is_cpu: bool,
    /// The size of the batch last run.
    pub batch_size: usize,
    pub batches: u64,
    pub items: u64,
    pub ooms: u64,
    /// Items this device could not take that ran on the CPU instead.
    pub moved_to_cpu: u64,
    pub compute_s: f64,
    pub wait_s: f64,
    pub lost: bool,
    pub lost_reason: Option<String>,
    /// In samples as their `pool`.
    #[serde(skip)]
    pub memory: Option<MemoryStats>,
}

impl LiveDevice {
    fn new(name: String, is_cpu: bool) -> Self {
        LiveDevice {
            name,
            is_cpu,
            batch_size: AtomicUsize::new(0),
            batches: AtomicU64::new(0),
            items: AtomicU64::new(0),
            ooms: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            compute_ns: AtomicU64::new(0),
            wait_ns: AtomicU64::new(0),
            lost: AtomicBool::new(false),
            lost_reason: Mutex::new(None),
            memory: Mutex::new(None),
        }
    }

    /// After a batch: its size, the time it waited for and took, the batcher's totals so far,
    /// and the device's pool statistics (`None` for a device without a pool).
    pub(crate) fn batch_done(
        &self,
        size: usize,
        wait: Duration,
        compute: Duration,
        ooms: u64,
        moved: u64,
        memory: Option<MemoryStats>,
    ) {
        self.batch_size.store(size, Ordering::Relaxed);
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.items.fetch_add(size as u64, Ordering::Relaxed);
        self.ooms.store(ooms, Ordering::Relaxed);
        self.moved.store(moved, Ordering::Relaxed);
        self.wait_ns
            .fetch_add(wait.as_nanos() as u64, Ordering::Relaxed);
        self.compute_ns
            .fetch_add(compute.as_nanos() as u64, Ordering::Relaxed);
        if memory.is_some() {
            *lock(&self.memory) = memory;
        }
    }

    /// The device was taken out of the job; `why` is the batcher's alert.
    pub(crate) fn mark_lost(&self, why: Option<String>) {
        *lock(&self.lost_reason) = why;
        self.lost.store(true, Ordering::Relaxed);
    }

    pub fn counters(&self) -> DeviceCounters {
        let secs = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
        DeviceCounters {
            name: self.name.clone(),
            is_cpu: self.is_cpu,
            batch_size: self.batch_size.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            items: self.items.load(Ordering::Relaxed),
            ooms: self.ooms.load(Ordering::Relaxed),
            moved_to_cpu: self.moved.load(Ordering::Relaxed),
            compute_s: secs(&self.compute_ns),
            wait_s: secs(&self.wait_ns),
            lost: self.lost.load(Ordering::Relaxed),
            lost_reason: lock(&self.lost_reason).clone(),
            memory: lock(&self.memory).clone(),
        }
    }
}

/// A running job's counters and its cancel switch. Make one, hand a clone of the `Arc` to
/// [`crate::run_live`], and read it (or let a [`crate::telemetry::Telemetry`] sample it) from
/// any thread.
pub struct LiveJob {
    started: Instant,
    cancel: AtomicBool,
    finished: AtomicBool,
    items_total: AtomicU64,
    items_resumed: AtomicU64,
    items_ok: AtomicU64,
    items_failed: AtomicU64,
    rows: AtomicU64,
    audio_us: AtomicU64,
    busy_ns: [AtomicU64; 5],
    queues: [Gauge; 4],
    devices: Mutex<Vec<Arc<LiveDevice>>>,
    failures: Mutex<Vec<String>>,
}

impl Default for LiveJob {
    fn default() -> Self {
        LiveJob {
            started: Instant::now(),
            cancel: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            items_total: AtomicU64::new(0),
            items_resumed: AtomicU64::new(0),
            items_ok: AtomicU64::new(0),
            items_failed: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            audio_us: AtomicU64::new(0),
            busy_ns: Default::default(),
            queues: Default::default(),
            devices: Mutex::new(Vec::new()),
            failures: Mutex::new(Vec::new()),
        }
    }
}

/// A copy of a [`LiveJob`]'s counters at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobCounters {
    pub elapsed_s: f64,
    pub finished: bool,
    pub canceled: bool,
    /// Items of this shard, and those a previous run had settled.
    pub items_total: u64,
    pub items_resumed: u64,
    pub items_ok: u64,
    pub items_failed: u64,
    pub rows: u64,
    pub audio_seconds: f64,
    /// (stage, seconds busy), in [`Stage::ALL`] order.
    pub busy_s: Vec<(Stage, f64)>,
    /// (queue, depth, capacity), in [`Queue::ALL`] order.
    pub queues: Vec<(Queue, usize, usize)>,
    pub devices: Vec<DeviceCounters>,
    /// The first [`FIRST_FAILURES`] failures, "id: reason".
    pub first_failures: Vec<String>,
}

impl LiveJob {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Asks the job to stop at the next batch boundary. What was written stays, and the same
    /// job run again resumes from it; `run_live` then returns [`crate::JobError::Canceled`].
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    pub fn is_canceled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    pub(crate) fn set_finished(&self) {
        self.finished.store(true, Ordering::SeqCst);
    }

    pub(crate) fn set_items(&self, total: u64, resumed: u64) {
        self.items_total.store(total, Ordering::Relaxed);
        self.items_resumed.store(resumed, Ordering::Relaxed);
    }

    pub(crate) fn set_capacity(&self, queue: Queue, capacity: usize) {
        self.queues[queue as usize]
            .capacity
            .store(capacity, Ordering::Relaxed);
    }

    /// The depth a stage saw when it took from `queue`.
    pub(crate) fn observe_queue(&self, queue: Queue, depth: usize) {
        self.queues[queue as usize]
            .depth
            .store(depth, Ordering::Relaxed);
    }

    pub(crate) fn add_busy(&self, stage: Stage, seconds: f64) {
        self.busy_ns[stage as usize].fetch_add((seconds.max(0.0) * 1e9) as u64, Ordering::Relaxed);
    }

    /// A row reached the writer: `audio_seconds` of it.
    pub(crate) fn row_written(&self, audio_seconds: f64) {
        self.rows.fetch_add(1, Ordering::Relaxed);
        self.audio_us
            .fetch_add((audio_seconds * 1e6).round() as u64, Ordering::Relaxed);
    }

    pub(crate) fn item_done(&self) {
        self.items_ok.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn item_failed(&self, id: &str, reason: &str) {
        self.items_failed.fetch_add(1, Ordering::Relaxed);
        let mut first = lock(&self.failures);
        if first.len() < FIRST_FAILURES {
            first.push(format!("{id}: {reason}"));
        }
    }

    /// Registers an executor's device; the executor updates what it returns.
    pub(crate) fn device(&self, name: String, is_cpu: bool) -> Arc<LiveDevice> {
        let device = Arc::new(LiveDevice::new(name, is_cpu));
        lock(&self.devices).push(device.clone());
        device
    }

    pub fn counters(&self) -> JobCounters {
        let devices = lock(&self.devices).iter().map(|d| d.counters()).collect();
        JobCounters {
            elapsed_s: self.started.elapsed().as_secs_f64(),
            finished: self.finished.load(Ordering::SeqCst),
            canceled: self.is_canceled(),
            items_total: self.items_total.load(Ordering::Relaxed),
            items_resumed: self.items_resumed.load(Ordering::Relaxed),
            items_ok: self.items_ok.load(Ordering::Relaxed),
            items_failed: self.items_failed.load(Ordering::Relaxed),
            rows: self.rows.load(Ordering::Relaxed),
            audio_seconds: self.audio_us.load(Ordering::Relaxed) as f64 / 1e6,
            busy_s: Stage::ALL
                .iter()
                .map(|&s| {
                    (
                        s,
                        self.busy_ns[s as usize].load(Ordering::Relaxed) as f64 / 1e9,
                    )
                })
                .collect(),
            // A queue the job does not have (no model) has no capacity: left out.
            queues: Queue::ALL
                .iter()
                .filter(|&&q| self.queues[q as usize].capacity.load(Ordering::Relaxed) > 0)
                .map(|&q| {
                    let g = &self.queues[q as usize];
                    (
                        q,
                        g.depth.load(Ordering::Relaxed),
                        g.capacity.load(Ordering::Relaxed),
                    )
                })
                .collect(),
            devices,
            first_failures: lock(&self.failures).clone(),
        }
    }
}

/// A lock that a panicking holder did not poison for good: the counters stay readable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the queues a job has are shown: the model's appears once a job with a model sets
    /// its capacity, with its depth; its busy time is counted as the model stage's.
    #[test]
    fn the_model_queue_shows_only_in_a_job_with_a_model() {
        let job = LiveJob::new();
        for q in [Queue::Work, Queue::Prefetch, Queue::Writer] {
            job.set_capacity(q, 8);
        }
        let names = |job: &LiveJob| -> Vec<&'static str> {
            job.counters().queues.iter().map(|q| q.0.name()).collect()
        };
        assert_eq!(names(&job), ["decode", "prefetch", "write"]);
        job.set_capacity(Queue::Model, 16);
        job.observe_queue(Queue::Model, 5);
        job.add_busy(Stage::Model, 0.25);
        assert_eq!(names(&job), ["decode", "prefetch", "write", "model"]);
        let counters = job.counters();
        assert_eq!(counters.queues[3], (Queue::Model, 5, 16));
        assert!(counters
            .busy_s
            .iter()
            .any(|&(s, secs)| s == Stage::Model && (secs - 0.25).abs() < 1e-9));
    }
}
