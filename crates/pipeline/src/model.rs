//! The model runner (`sonograph_model::ModelRunner`) as a device of the adaptive batcher: rows
//! of features in, one model output per row out, out-of-memory batches split and retried
//! exactly as feature batches are. The model stage of a job (`extract --model`) runs its
//! batches through [`AdaptiveBatcher::run_on`](crate::AdaptiveBatcher::run_on) with these.

use std::ops::Range;

use sonograph_model::{ModelBatch, ModelRunner, RunError};

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
    type Error = RunError;
    fn empty_like(&self) -> Self {
        ModelBatch::new()
    }
    fn clear(&mut self) {
        ModelBatch::clear(self)
    }
    fn append(&mut self, other: &Self) {
        ModelBatch::append(self, other)
    }
    fn push_error(&mut self, error: RunError) {
        self.push(Err(error))
    }
}

impl BatchError for RunError {
    fn is_out_of_memory(&self) -> bool {
        matches!(self, RunError::OutOfMemory(_))
    }
    fn lost(message: String) -> Self {
        RunError::Failed(message)
    }
}

impl BatchDevice<FeatureRows<'_>, ModelBatch> for ModelRunner {
    fn name(&self) -> String {
        self.device()
    }
    fn workload(&self) -> String {
        self.path().display().to_string()
    }
    fn run(&mut self, input: &FeatureRows<'_>, out: &mut ModelBatch) -> Result<(), RunError> {
        let batch = self.run_batch(input.rows(), input.n_mels())?;
        out.append(&batch);
        Ok(())
    }
}

/// A fallback where there is none (one model device): what it is given fails with `why`, so
/// that an item that does not fit even alone, or the rest of a batch after the device failed,
/// gets an error of its own instead of a result.
pub struct NoFallback(pub String);

impl<I: BatchInput, O: BatchOutput> BatchDevice<I, O> for NoFallback {
    fn name(&self) -> String {
        "no fallback".into()
    }
    fn workload(&self) -> String {
        String::new()
    }
    fn run(&mut self, _: &I, _: &mut O) -> Result<(), O::Error> {
        Err(O::Error::lost(self.0.clone()))
    }
}
