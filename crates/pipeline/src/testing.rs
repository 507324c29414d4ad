//! Test doubles shared by the batcher's and the executors' tests.

use std::collections::HashMap;

use sonograph_dsp::{
    AudioBatch, CpuBackend, ExtractError, Extractor, FeatureBatch, FeatureSpec, Precision,
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
    fn extract_batch(
        &mut self,
        b: &AudioBatch,
        out: &mut FeatureBatch,
    ) -> Result<(), ExtractError> {
        self.calls += 1;
        if self.transient_on == Some(self.calls) {
            return Err(ExtractError::DeviceLost("timed out".into()));
        }
        if self.panic_on == Some(self.calls) {
            // Half a batch written, then a panic (as wgpu does on some device errors).
            self.inner.extract_batch(&b.slice(0..1), out)?;
            panic!("driver fault");
        }
        if self.lose_after.is_some_and(|n| self.done >= n) {
            return Err(ExtractError::DeviceLost("flaky".into()));
        }
        if b.len() > self.fits || b.items().any(|i| i.len() == self.huge) {
            return Err(ExtractError::OutOfMemory(format!("{} items", b.len())));
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
