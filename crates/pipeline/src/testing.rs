//! Test doubles and scratch files shared by the pipeline's tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use sonograph_dsp::{
    AudioBatch, CpuBackend, DeviceError, Extractor, FeatureBatch, FeatureSpec, Precision,
};

/// A CPU backend with faults: it runs out of memory on batches over `fits` items (or on
/// any batch holding the item of length `huge`), is lost after `lose_after` good batches,
/// fails call `transient_on` once, writes half of call `panic_on` and panics, passes its
/// health check when `healthy`, and proposes `hint` bytes / item samples as a batch size.
/// It counts calls, good batches, health checks and how many times each item (by length,
/// all distinct) was computed.
pub(crate) struct Flaky {
    pub inner: CpuBackend,
    pub fits: usize,
    pub huge: usize,
    pub lose_after: Option<usize>,
    pub transient_on: Option<usize>,
    pub panic_on: Option<usize>,
    pub healthy: bool,
    pub hint: Option<usize>,
    pub calls: usize,
    pub done: usize,
    pub checks: usize,
    pub computed: HashMap<usize, usize>,
}

impl Flaky {
    /// No faults; computes in `precision`.
    pub fn new(spec: &FeatureSpec, precision: Precision) -> Self {
        Flaky {
            inner: CpuBackend::new(spec, precision).unwrap(),
            fits: usize::MAX,
            huge: 0,
            lose_after: None,
            transient_on: None,
            panic_on: None,
            healthy: false,
            hint: None,
            calls: 0,
            done: 0,
            checks: 0,
            computed: HashMap::new(),
        }
    }
}

impl Extractor for Flaky {
    fn spec(&self) -> &FeatureSpec {
        self.inner.spec()
    }
    fn device(&self) -> String {
        "gpu:flaky".into()
    }
    fn extract_batch(&mut self, b: &AudioBatch, out: &mut FeatureBatch) -> Result<(), DeviceError> {
        self.calls += 1;
        if self.transient_on == Some(self.calls) {
            return Err(DeviceError::DeviceLost("timed out".into()));
        }
        if self.panic_on == Some(self.calls) {
            // Half a batch written, then a panic (as wgpu does on some device errors).
            self.inner.extract_batch(&b.slice(0..1), out)?;
            panic!("driver fault");
        }
        if self.lose_after.is_some_and(|n| self.done >= n) {
            return Err(DeviceError::DeviceLost("flaky".into()));
        }
        if b.len() > self.fits || b.items().any(|i| i.len() == self.huge) {
            return Err(DeviceError::OutOfMemory(format!("{} items", b.len())));
        }
        self.done += 1;
        for i in b.items() {
            *self.computed.entry(i.len()).or_default() += 1;
        }
        self.inner.extract_batch(b, out)
    }
    fn recover(&mut self) -> bool {
        self.checks += 1;
        self.healthy
    }
    fn batch_hint(&self, item_samples: usize) -> Option<usize> {
        self.hint.map(|bytes| bytes / item_samples)
    }
}

/// A 16-bit mono WAV of a gliding tone.
pub(crate) fn write_wav(path: &Path, rate: u32, seconds: f64) {
    let n = (seconds * f64::from(rate)) as u32;
    let mut bytes = Vec::with_capacity(44 + 2 * n as usize);
    bytes.extend_from_slice(b"RIFF");
    bytes.extend_from_slice(&(36 + 2 * n).to_le_bytes());
    bytes.extend_from_slice(b"WAVEfmt ");
    bytes.extend_from_slice(&16u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes()); // PCM
    bytes.extend_from_slice(&1u16.to_le_bytes()); // mono
    bytes.extend_from_slice(&rate.to_le_bytes());
    bytes.extend_from_slice(&(2 * rate).to_le_bytes());
    bytes.extend_from_slice(&2u16.to_le_bytes());
    bytes.extend_from_slice(&16u16.to_le_bytes());
    bytes.extend_from_slice(b"data");
    bytes.extend_from_slice(&(2 * n).to_le_bytes());
    for i in 0..n {
        let t = f64::from(i) / f64::from(rate);
        let v = 0.3 * (std::f64::consts::TAU * (150.0 + 20.0 * t) * t).sin();
        bytes.extend_from_slice(&((v * 32767.0) as i16).to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

/// A fresh folder `sono-job-NAME-PID` in the temp dir with `corpus/` holding 16 kHz WAVs
/// of the given (file name, seconds).
pub(crate) fn scratch_corpus(name: &str, wavs: &[(&str, f64)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sono-job-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("corpus")).unwrap();
    for (file, seconds) in wavs {
        write_wav(&dir.join("corpus").join(file), 16_000, *seconds);
    }
    dir
}

/// A CPU backend posing as a GPU with a memory pool: each batch takes `delay`, and its pool
/// reports `high` (a share of its budget, with `fragmentation`) for the first `high_batches`
/// batches, then half the budget and no fragmentation.
pub(crate) struct Pooled {
    pub inner: CpuBackend,
    pub delay: std::time::Duration,
    pub high: f64,
    pub fragmentation: f64,
    pub high_batches: usize,
    pub batches: usize,
}

/// The budget [`Pooled`] reports.
pub(crate) const POOL_BUDGET: u64 = 1 << 30;

impl Pooled {
    pub fn new(spec: &FeatureSpec, delay: std::time::Duration) -> Self {
        Pooled {
            inner: CpuBackend::new(spec, Precision::F64).unwrap(),
            delay,
            high: 0.5,
            fragmentation: 0.0,
            high_batches: 0,
            batches: 0,
        }
    }
}

impl Extractor for Pooled {
    fn spec(&self) -> &FeatureSpec {
        self.inner.spec()
    }
    fn device(&self) -> String {
        "gpu:pooled (test)".into()
    }
    fn extract_batch(&mut self, b: &AudioBatch, out: &mut FeatureBatch) -> Result<(), DeviceError> {
        std::thread::sleep(self.delay);
        self.batches += 1;
        self.inner.extract_batch(b, out)
    }
    fn memory_stats(&self) -> Option<sonograph_dsp::MemoryStats> {
        let high = self.batches <= self.high_batches;
        let share = if high { self.high } else { 0.5 };
        let reserved = (POOL_BUDGET as f64 * share) as u64;
        let fragmentation = if high { self.fragmentation } else { 0.0 };
        Some(sonograph_dsp::MemoryStats {
            reserved_bytes: reserved,
            allocated_bytes: (reserved as f64 * (1.0 - fragmentation)) as u64,
            budget_bytes: POOL_BUDGET,
            fragmentation,
            ..Default::default()
        })
    }
}
