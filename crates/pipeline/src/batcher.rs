//! Adaptive batching with out-of-memory recovery that loses nothing.
//!
//! It runs any device that takes a batch of items and gives one result per item: feature
//! extractors (audio in, features out) and model runners (feature rows in, model outputs out,
//! `sonograph_model::ModelRunner` through [`crate::model`]) alike, through the small traits
//! [`BatchInput`], [`BatchOutput`], [`BatchError`] and [`BatchDevice`].
//!
//! A batch that does not fit is split in half and retried, down to one item; an item that does
//! not fit alone is computed by the fallback (the CPU) and raises an alert. After a run of
//! successes the batch grows again, but never to a size that has failed on this
//! (device, spec). Any other error (a timeout, a lost or panicking device) is retried after
//! an exponential backoff if the device passes its own health check
//! ([`Extractor::recover`]); a device that does not is taken out for good: what is left of its
//! batch and every later batch go to the fallback. Results of a failed attempt
//! are dropped (they go to a scratch batch), so every item lands in the output exactly once,
//! in order.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::time::Duration;

use serde::Serialize;
use sonograph_dsp::{AudioBatch, DeviceError, Extractor, FeatureBatch, ItemError};

/// A batch the batcher can cut into contiguous parts.
pub trait BatchInput: Clone {
    /// Number of items.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Items `range` as a batch of their own.
    fn part(&self, range: Range<usize>) -> Self;
    /// What a part of one item is, for alerts ("an item of 16000 samples").
    fn describe(&self) -> String;
}

/// Results of a batch, one per item, in order.
pub trait BatchOutput {
    /// An empty output of the same kind (a scratch buffer).
    fn empty_like(&self) -> Self;
    fn clear(&mut self);
    /// Moves every item of `other` to the end of this output.
    fn append(&mut self, other: &mut Self);
    /// Records an item that no device could compute, with why.
    fn push_no_device(&mut self, why: String);
}

/// An error that cost a whole batch: out of memory (split and retry), or anything else
/// (health check, then retry or take the device out).
pub trait BatchError: std::fmt::Display {
    fn is_out_of_memory(&self) -> bool;
    /// The error of a device that was lost (or panicked, or is not there).
    fn lost(message: String) -> Self;
}

/// A device that runs batches of `I` into `O`: appends one result per item, or returns `Err`
/// with `out` unchanged when the whole batch could not run.
pub trait BatchDevice<I: BatchInput, O: BatchOutput> {
    type Error: BatchError;
    /// Where it runs ("cpu", "gpu:0 ...").
    fn name(&self) -> String;
    /// What it runs (a spec id, a model): ceilings are remembered per (name, workload).
    fn workload(&self) -> String;
    fn run(&mut self, input: &I, out: &mut O) -> Result<(), Self::Error>;
    /// See [`Extractor::recover`].
    fn recover(&mut self) -> bool {
        false
    }
}

impl BatchInput for AudioBatch {
    fn len(&self) -> usize {
        AudioBatch::len(self)
    }
    fn part(&self, range: Range<usize>) -> Self {
        self.slice(range)
    }
    fn describe(&self) -> String {
        format!("an item of {} samples", self.samples().len())
    }
}

impl BatchOutput for FeatureBatch {
    fn empty_like(&self) -> Self {
        FeatureBatch::new(self.bins())
    }
    fn clear(&mut self) {
        let bins = self.bins();
        self.reset(bins);
    }
    fn append(&mut self, other: &mut Self) {
        FeatureBatch::append(self, other)
    }
    fn push_no_device(&mut self, why: String) {
        self.push_error(ItemError::NoDevice(why))
    }
}

impl BatchError for DeviceError {
    fn is_out_of_memory(&self) -> bool {
        matches!(self, DeviceError::OutOfMemory(_))
    }
    fn lost(message: String) -> Self {
        DeviceError::DeviceLost(message)
    }
}

impl<E: Extractor + ?Sized> BatchDevice<AudioBatch, FeatureBatch> for E {
    type Error = DeviceError;
    fn name(&self) -> String {
        self.device()
    }
    fn workload(&self) -> String {
        self.spec().spec_id()
    }
    fn run(&mut self, input: &AudioBatch, out: &mut FeatureBatch) -> Result<(), DeviceError> {
        self.extract_batch(input, out)
    }
    fn recover(&mut self) -> bool {
        Extractor::recover(self)
    }
}

/// Health checks after a transient error before the device is taken out, waiting 100, 200,
/// then 400 ms before each.
const RECOVERY_ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Sizing rules.
#[derive(Debug, Clone, Copy)]
pub struct BatcherConfig {
    /// First batch size for a (device, spec) never seen before.
    pub initial: usize,
    /// Never more than this many items per batch.
    pub max: usize,
    /// Double the size after this many successful batches in a row.
    pub grow_after: usize,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        BatcherConfig {
            initial: 16,
            max: 1024,
            grow_after: 4,
        }
    }
}

impl BatcherConfig {
    /// At most `max` items per batch, starting from what `device` says fits
    /// ([`Extractor::batch_hint`]: its memory budget over the bytes one item of
    /// `item_samples` samples needs), or from `max` where the device sets no limit.
    pub fn for_device(device: &dyn Extractor, item_samples: usize, max: usize) -> Self {
        let max = max.max(1);
        BatcherConfig {
            initial: device.batch_hint(item_samples).unwrap_or(max).clamp(1, max),
            max,
            ..Default::default()
        }
    }
}

/// Counters of one batcher, over all its runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct BatchStats {
    /// Batches the primary device completed.
    pub batches: u64,
    pub ooms: u64,
    /// Batches halved after an OOM.
    pub splits: u64,
    /// Attempts that were retries of work that had failed.
    pub retries: u64,
    /// Items that failed alone and were computed by the fallback.
    pub items_on_fallback: u64,
    /// Items the fallback computed because the device was lost.
    pub items_after_loss: u64,
    pub devices_lost: u64,
    /// Transient errors the device recovered from (its batch was retried).
    pub recovered: u64,
    /// Smallest batch size that ran out of memory (`None`: none did); with one batcher per
    /// device and spec, as each pipeline executor keeps, that device's ceiling.
    pub ceiling: Option<usize>,
    /// Human-readable alerts (an item moved to the CPU, a recovery, a lost device), the first
    /// [`MAX_ALERTS`]; every one is also logged.
    pub alerts: Vec<String>,
    /// Alerts past the first [`MAX_ALERTS`], counted only.
    pub alerts_dropped: u64,
}

/// Alerts kept in the statistics (and the report); a job with periodic trouble logs the rest.
pub const MAX_ALERTS: usize = 100;

impl BatchStats {
    fn alert(&mut self, text: String) {
        if self.alerts.len() < MAX_ALERTS {
            self.alerts.push(text);
        } else {
            self.alerts_dropped += 1;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Sizing {
    size: usize,
    /// Smallest size that ran out of memory.
    ceiling: Option<usize>,
    streak: usize,
}

/// The batcher; keep one per job so that ceilings carry over between calls.
pub struct AdaptiveBatcher {
    config: BatcherConfig,
    sizing: HashMap<(String, String), Sizing>,
    /// Devices taken out after a loss or a panic.
    lost: HashSet<String>,
    stats: BatchStats,
}

impl AdaptiveBatcher {
    pub fn new(config: BatcherConfig) -> Self {
        AdaptiveBatcher {
            config,
            sizing: HashMap::new(),
            lost: HashSet::new(),
            stats: BatchStats::default(),
        }
    }

    pub fn stats(&self) -> &BatchStats {
        &self.stats
    }

    /// The next batch size for (device, spec_id).
    pub fn size_for(&self, device: &str, spec_id: &str) -> usize {
        self.sizing
            .get(&(device.to_string(), spec_id.to_string()))
            .map_or(self.config.initial, |s| s.size)
    }

    /// True once `device` was lost (or panicked): it gets no more work from this batcher.
    pub fn is_lost(&self, device: &str) -> bool {
        self.lost.contains(device)
    }

    /// The smallest batch size that ran out of memory on (device, spec_id).
    pub fn ceiling_for(&self, device: &str, spec_id: &str) -> Option<usize> {
        self.sizing
            .get(&(device.to_string(), spec_id.to_string()))
            .and_then(|s| s.ceiling)
    }

    /// Extracts every item of `batch` on `primary`, recovering from OOM and device loss with
    /// `fallback`; appends exactly one result per item to `out`, in order.
    pub fn run(
        &mut self,
        batch: &AudioBatch,
        primary: &mut dyn Extractor,
        fallback: &mut dyn Extractor,
        out: &mut FeatureBatch,
    ) {
        self.run_on(batch, primary, fallback, out)
    }

    /// [`run`](Self::run) for any device: every item of `batch` on `primary`, recovering from
    /// OOM and device loss with `fallback`; exactly one result per item in `out`, in order.
    pub fn run_on<I, O, P, F>(&mut self, batch: &I, primary: &mut P, fallback: &mut F, out: &mut O)
    where
        I: BatchInput,
        O: BatchOutput,
        P: BatchDevice<I, O> + ?Sized,
        F: BatchDevice<I, O> + ?Sized,
    {
        let key = (primary.name(), primary.workload());
        let config = self.config;
        let mut sizing = *self.sizing.entry(key.clone()).or_insert(Sizing {
            size: config.initial.clamp(1, config.max.max(1)),
            ceiling: None,
            streak: 0,
        });
        let n = batch.len();
        let mut next = 0;
        let mut retrying = false;
        // Recoveries in a row, without a successful batch in between.
        let mut recoveries = 0u32;
        let mut scratch = out.empty_like();
        if self.lost.contains(&key.0) {
            on_fallback(fallback, batch, &mut scratch, out);
            self.stats.items_after_loss += n as u64;
            return;
        }
        while next < n {
            let size = sizing.size.min(n - next).max(1);
            // The batch as it is when it goes whole (the usual case): no copy of its items.
            let part = if next == 0 && size == n {
                std::borrow::Cow::Borrowed(batch)
            } else {
                std::borrow::Cow::Owned(batch.part(next..next + size))
            };
            scratch.clear();
            if retrying {
                self.stats.retries += 1;
            }
            // wgpu panics on some device errors: a panicking device counts as lost.
            let attempt = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                primary.run(&part, &mut scratch)
            }))
            .unwrap_or_else(|payload| {
                Err(P::Error::lost(format!(
                    "{} panicked: {}",
                    key.0,
                    crate::error::panic_text(&*payload)
                )))
            });
            match attempt {
                Ok(()) => {
                    out.append(&mut scratch);
                    next += size;
                    retrying = false;
                    recoveries = 0;
                    self.stats.batches += 1;
                    sizing.streak += 1;
                    if sizing.streak >= config.grow_after {
                        sizing.streak = 0;
                        let limit = sizing.ceiling.map_or(config.max, |c| c - 1).min(config.max);
                        sizing.size = (sizing.size * 2)
                            .min(limit)
                            .max(sizing.size.min(limit))
                            .max(1);
                    }
                }
                Err(e) if e.is_out_of_memory() => {
                    let msg = e.to_string();
                    self.stats.ooms += 1;
                    sizing.streak = 0;
                    if size > 1 {
                        // One item that does not fit alone says nothing about batches of
                        // the others: only a failed batch lowers the ceiling.
                        sizing.ceiling = Some(sizing.ceiling.map_or(size, |c| c.min(size)));
                        self.stats.ceiling = sizing.ceiling;
                        sizing.size = size / 2;
                        self.stats.splits += 1;
                        retrying = true;
                        tracing::warn!(device = %key.0, "{msg}; splitting to {}", size / 2);
                    } else {
                        let alert = format!(
                            "{} does not fit on {} even alone ({msg}); computed on {}",
                            part.describe(),
                            key.0,
                            fallback.name()
                        );
                        tracing::warn!("{alert}");
                        self.stats.alert(alert);
                        on_fallback(fallback, &*part, &mut scratch, out);
                        self.stats.items_on_fallback += 1;
                        next += 1;
                        retrying = false;
                    }
                }
                Err(e)
                    if recoveries < RECOVERY_ATTEMPTS
                        && recovers_after_backoff(primary, recoveries) =>
                {
                    recoveries += 1;
                    self.stats.recovered += 1;
                    retrying = true;
                    let alert = format!(
                        "{} failed a batch of {size} ({e}) and passed its health check; retrying",
                        key.0
                    );
                    tracing::warn!("{alert}");
                    self.stats.alert(alert);
                }
                Err(e) => {
                    // Lost, hung or unusable: nothing more goes to this device in this run.
                    let alert = format!(
                        "{} failed ({e}); {} remaining items move to {}",
                        key.0,
                        n - next,
                        fallback.name()
                    );
                    tracing::error!("{alert}");
                    self.stats.alert(alert);
                    self.stats.devices_lost += 1;
                    self.lost.insert(key.0.clone());
                    on_fallback(fallback, &batch.part(next..n), &mut scratch, out);
                    self.stats.items_after_loss += (n - next) as u64;
                    next = n;
                }
            }
        }
        self.sizing.insert(key, sizing);
    }
}

/// Waits 100 ms × 2^`attempt`, then asks the device to check its health.
fn recovers_after_backoff<I: BatchInput, O: BatchOutput>(
    primary: &mut (impl BatchDevice<I, O> + ?Sized),
    attempt: u32,
) -> bool {
    std::thread::sleep(FIRST_BACKOFF * 2u32.pow(attempt));
    primary.recover()
}

/// Runs `part` on the fallback and appends its results to `out`. The CPU reports errors per
/// item; should it fail the whole part anyway, each of its items gets that error, so that
/// every item still has exactly one result.
fn on_fallback<I: BatchInput, O: BatchOutput>(
    fallback: &mut (impl BatchDevice<I, O> + ?Sized),
    part: &I,
    scratch: &mut O,
    out: &mut O,
) {
    scratch.clear();
    match fallback.run(part, scratch) {
        Ok(()) => out.append(scratch),
        Err(e) => {
            for _ in 0..part.len() {
                out.push_no_device(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Flaky;
    use sonograph_dsp::{CpuBackend, FeatureSpec, Precision};

    fn items(n: usize) -> Vec<Vec<f32>> {
        (0..n)
            .map(|k| {
                (0..1600 + 37 * k)
                    .map(|i| ((i * (k + 3)) as f32 * 0.001).sin())
                    .collect()
            })
            .collect()
    }

    /// Runs `clips` through `batcher` on `device` with a CPU fallback and checks that the
    /// result is the CPU's, item for item.
    fn run_checked(
        batcher: &mut AdaptiveBatcher,
        spec: &FeatureSpec,
        clips: &[Vec<f32>],
        device: &mut Flaky,
    ) {
        let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
        let mut cpu = CpuBackend::new(spec, Precision::F32).unwrap();
        let mut out = FeatureBatch::new(spec.n_bins());
        batcher.run(&batch, device, &mut cpu, &mut out);
        check(spec, clips, &out);
    }

    fn check(spec: &FeatureSpec, clips: &[Vec<f32>], out: &FeatureBatch) {
        let mut cpu = CpuBackend::new(spec, Precision::F32).unwrap();
        let mut expect = FeatureBatch::new(spec.n_bins());
        cpu.extract_batch(
            &AudioBatch::from_items(clips.iter().map(|c| c.as_slice())),
            &mut expect,
        )
        .unwrap();
        assert_eq!(out, &expect);
    }

    #[test]
    fn ooms_split_down_to_one_item_and_lose_nothing() {
        let spec = FeatureSpec::whisper(80);
        let clips = items(23);
        let mut flaky = Flaky {
            fits: 3,
            // Item 17 never fits.
            huge: 1600 + 37 * 17,
            ..Flaky::new(&spec, Precision::F32)
        };
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial: 16,
            max: 64,
            grow_after: 2,
        });
        run_checked(&mut batcher, &spec, &clips, &mut flaky);
        // Every item computed exactly once on the device, except the one that went to the CPU.
        assert_eq!(flaky.computed.len(), clips.len() - 1);
        assert!(
            flaky.computed.values().all(|&c| c == 1),
            "{:?}",
            flaky.computed
        );
        let s = batcher.stats();
        assert_eq!(s.items_on_fallback, 1);
        assert!(s.splits >= 3 && s.ooms >= s.splits, "{s:?}");
        assert_eq!(s.alerts.len(), 1);
        // The size never grows back to a size that failed, and the item that failed alone did
        // not pin the batch size to one item.
        let spec_id = spec.spec_id();
        let ceiling = batcher.ceiling_for("gpu:flaky", &spec_id).unwrap();
        assert!((2..=4).contains(&ceiling), "ceiling {ceiling}");
        let size = batcher.size_for("gpu:flaky", &spec_id);
        assert!(
            (1..ceiling).contains(&size),
            "size {size} under ceiling {ceiling}"
        );
    }

    #[test]
    fn growth_stops_below_the_remembered_ceiling() {
        let spec = FeatureSpec::kaldi(23);
        let clips = items(40);
        let mut flaky = Flaky {
            fits: 6,
            ..Flaky::new(&spec, Precision::F32)
        };
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial: 2,
            max: 64,
            grow_after: 1,
        });
        run_checked(&mut batcher, &spec, &clips, &mut flaky);
        // 2 → 4 → 8 (OOM, ceiling 8) → 4 → 7 (OOM, ceiling 7) → 3 → 6, and 6 stays: it
        // never grows back to a size that failed.
        assert_eq!(batcher.ceiling_for("gpu:flaky", &spec.spec_id()), Some(7));
        assert_eq!(batcher.size_for("gpu:flaky", &spec.spec_id()), 6);
        assert_eq!(batcher.stats().ooms, 2, "{:?}", batcher.stats());
        assert_eq!(batcher.stats().splits, 2);
        assert!(flaky.computed.values().all(|&c| c == 1));
    }

    /// A fallback that fails whole batches still leaves one result per item.
    #[test]
    fn a_failing_fallback_gives_each_item_an_error_and_keeps_the_rest() {
        let spec = FeatureSpec::whisper(80);
        let clips = items(6);
        let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
        let mut flaky = Flaky {
            fits: 8,
            huge: 1600 + 37 * 4,
            ..Flaky::new(&spec, Precision::F32)
        };
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial: 2,
            max: 2,
            grow_after: 100,
        });
        let mut out = FeatureBatch::new(spec.n_bins());
        // A fallback lost from the start fails every part it is given.
        let mut broken = Flaky {
            lose_after: Some(0),
            ..Flaky::new(&spec, Precision::F32)
        };
        batcher.run(&batch, &mut flaky, &mut broken, &mut out);
        assert_eq!(out.len(), 6);
        for i in 0..6 {
            assert_eq!(out.item(i).is_err(), i == 4, "item {i}");
        }
    }

    /// A device that fails one batch (a timeout, say) and then passes its health check keeps
    /// its work: the batch is retried on it, nothing moves to the fallback. One that fails
    /// its checks is taken out after the backoffs.
    #[test]
    fn a_transient_error_is_retried_after_a_health_check() {
        let spec = FeatureSpec::whisper(80);
        let clips = items(12);
        for healthy in [true, false] {
            let mut device = Flaky {
                transient_on: Some(2),
                healthy,
                ..Flaky::new(&spec, Precision::F32)
            };
            let mut batcher = AdaptiveBatcher::new(BatcherConfig {
                initial: 4,
                max: 4,
                grow_after: 100,
            });
            run_checked(&mut batcher, &spec, &clips, &mut device);
            let s = batcher.stats();
            if healthy {
                assert_eq!((s.recovered, s.devices_lost, s.retries), (1, 0, 1), "{s:?}");
                assert_eq!(device.computed.len(), 12);
                assert!(device.computed.values().all(|&c| c == 1));
                assert!(!batcher.is_lost("gpu:flaky"));
            } else {
                assert_eq!((s.recovered, s.devices_lost, s.items_after_loss), (0, 1, 8));
                assert_eq!(device.checks, 1);
                assert!(batcher.is_lost("gpu:flaky"));
            }
        }
    }

    #[test]
    fn the_first_size_comes_from_the_device_within_the_maximum() {
        let spec = FeatureSpec::whisper(80);
        let sized = |hint, item, max| {
            BatcherConfig::for_device(
                &Flaky {
                    hint,
                    ..Flaky::new(&spec, Precision::F32)
                },
                item,
                max,
            )
            .initial
        };
        assert_eq!(sized(Some(10_000), 1000, 64), 10);
        assert_eq!(sized(Some(10_000), 1000, 4), 4, "never over the maximum");
        assert_eq!(sized(Some(10), 1000, 64), 1, "at least one item");
        assert_eq!(sized(None, 1000, 64), 64, "no hint: the maximum");
        assert_eq!(sized(None, 1000, 0), 1);
    }

    #[test]
    fn a_lost_device_moves_the_rest_to_the_fallback() {
        let spec = FeatureSpec::nemo(80);
        let clips = items(19);
        let mut flaky = Flaky {
            fits: 4,
            lose_after: Some(2),
            ..Flaky::new(&spec, Precision::F32)
        };
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial: 4,
            max: 4,
            grow_after: 100,
        });
        run_checked(&mut batcher, &spec, &clips, &mut flaky);
        assert_eq!(flaky.computed.len(), 8);
        let s = batcher.stats();
        assert_eq!((s.devices_lost, s.items_after_loss), (1, 11));
        // The device stays out: the next run goes to the fallback without touching it.
        assert!(batcher.is_lost("gpu:flaky"));
        let calls = flaky.done;
        run_checked(&mut batcher, &spec, &clips, &mut flaky);
        assert_eq!(flaky.done, calls);
        assert_eq!(batcher.stats().items_after_loss, 11 + 19);
    }

    /// A device whose extractor panics mid-batch counts as lost; nothing it half-wrote stays.
    #[test]
    fn a_panicking_device_is_lost_and_its_items_are_computed_once() {
        let spec = FeatureSpec::whisper(80);
        let clips = items(10);
        let mut device = Flaky {
            panic_on: Some(3),
            ..Flaky::new(&spec, Precision::F32)
        };
        let mut batcher = AdaptiveBatcher::new(BatcherConfig {
            initial: 2,
            max: 2,
            grow_after: 100,
        });
        run_checked(&mut batcher, &spec, &clips, &mut device);
        let s = batcher.stats();
        assert_eq!((s.devices_lost, s.items_after_loss), (1, 6));
        assert!(
            s.alerts[0].contains("panicked: driver fault"),
            "{:?}",
            s.alerts
        );
    }
}
