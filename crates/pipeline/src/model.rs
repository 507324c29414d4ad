//! The model runner (`sonograph_model::ModelRunner`) as a device of the adaptive batcher: rows
//! of features in, one model output per row out, out-of-memory batches split and retried
//! exactly as feature batches are. The model stage of a job (`extract --model`) runs its
//! batches through [`AdaptiveBatcher::run_on`](crate::AdaptiveBatcher::run_on) with these.

use std::ops::Range;

use sonograph_model::{DeviceError, ModelBatch, ModelRunner};

use crate::batcher::{BatchDevice, BatchError, BatchInput, BatchOutput};

/// Feature rows for a model: each item `frames × n_mels` values, row-major (as a
/// `FeatureBatch` item holds them).
#[derive(Debug, Clone)]
pub struct FeatureRows<'a> {
    rows: Vec<&'a [f32]>,
    n_mels: usize,
}

impl<'a> FeatureRows<'a> {
    pub fn new(rows: Vec<&'a [f32]>, n_mels: usize) -> Self {
        FeatureRows { rows, n_mels }
    }
    pub fn rows(&self) -> &[&'a [f32]] {
        &self.rows
    }
    pub fn n_mels(&self) -> usize {
        self.n_mels
    }
}

impl BatchInput for FeatureRows<'_> {
    fn len(&self) -> usize {
        self.rows.len()
    }
    fn part(&self, range: Range<usize>) -> Self {
        FeatureRows {
            rows: self.rows[range].to_vec(),
            n_mels: self.n_mels,
        }
    }
    fn describe(&self) -> String {
        let frames: usize = self.rows.iter().map(|r| r.len() / self.n_mels.max(1)).sum();
        format!("an item of {frames} frames")
    }
}

impl BatchOutput for ModelBatch {
    fn empty_like(&self) -> Self {
        ModelBatch::new()
    }
    fn clear(&mut self) {
        ModelBatch::clear(self)
    }
    fn append(&mut self, other: &mut Self) {
        ModelBatch::append(self, other)
    }
    fn push_no_device(&mut self, why: String) {
        ModelBatch::push_no_device(self, why)
    }
}

impl BatchError for DeviceError {
    fn is_out_of_memory(&self) -> bool {
        matches!(self, DeviceError::OutOfMemory(_))
    }
    fn lost(message: String) -> Self {
        DeviceError::Failed(message)
    }
}

impl BatchDevice<FeatureRows<'_>, ModelBatch> for ModelRunner {
    type Error = DeviceError;
    fn name(&self) -> String {
        self.device()
    }
    fn workload(&self) -> String {
        self.path().display().to_string()
    }
    fn run(&mut self, input: &FeatureRows<'_>, out: &mut ModelBatch) -> Result<(), DeviceError> {
        let mut batch = self.run_batch(input.rows(), input.n_mels())?;
        out.append(&mut batch);
        Ok(())
    }
}

/// A fallback where there is none (one model device): what it is given fails with `why`, so
/// that an item that does not fit even alone, or the rest of a batch after the device failed,
/// gets an item error (no device) instead of a result.
pub struct NoFallback(pub String);

/// The error of [`NoFallback`].
#[derive(Debug)]
pub struct NoDevice(String);

impl std::fmt::Display for NoDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl BatchError for NoDevice {
    fn is_out_of_memory(&self) -> bool {
        false
    }
    fn lost(message: String) -> Self {
        NoDevice(message)
    }
}

impl<I: BatchInput, O: BatchOutput> BatchDevice<I, O> for NoFallback {
    type Error = NoDevice;
    fn name(&self) -> String {
        "no fallback".into()
    }
    fn workload(&self) -> String {
        String::new()
    }
    fn run(&mut self, _: &I, _: &mut O) -> Result<(), NoDevice> {
        Err(NoDevice(self.0.clone()))
    }
}
