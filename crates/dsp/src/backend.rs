//! The extractor interface every backend implements (CPU here, GPU in `sonograph-gpu`), and
//! the flat batch buffers it works on: many items in one buffer with offsets, which is what a
//! GPU wants and what keeps the CPU path free of per-item allocations.

use rayon::prelude::*;

use crate::error::{DeviceError, ItemError, SpecError};
use crate::extractor::{CpuExtractor, Precision};
use crate::span::Span;
use crate::spec::FeatureSpec;

/// Items of audio in one buffer: item `i` is `samples[offsets[i]..offsets[i + 1]]`, a whole
/// item or the window of a piece of one ([`Span`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AudioBatch {
    samples: Vec<f32>,
    offsets: Vec<usize>,
    spans: Vec<Option<Span>>,
    /// Per item: every sample is on the 16-bit grid ([`crate::pcm16`]), so a GPU may be sent
    /// its 16-bit integers.
    pcm16: Vec<bool>,
}

impl Default for AudioBatch {
    fn default() -> Self {
        AudioBatch {
            samples: Vec::new(),
            offsets: vec![0],
            spans: Vec::new(),
            pcm16: Vec::new(),
        }
    }
}

impl AudioBatch {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn from_items<'a>(items: impl IntoIterator<Item = &'a [f32]>) -> Self {
        let mut b = Self::new();
        for item in items {
            b.push(item);
        }
        b
    }

    /// Adds a whole item.
    pub fn push(&mut self, item: &[f32]) {
        self.push_piece(item, None);
    }

    /// Adds a piece of an item (`Some(span)`, with the span's window) or a whole item.
    pub fn push_piece(&mut self, window: &[f32], span: Option<Span>) {
        self.push_known_piece(window, span, false);
    }

    /// [`push_piece`](Self::push_piece) with what the caller found (`pcm16::is_pcm16`, where
    /// the samples were made, on its own thread): `pcm16` is true only where every sample of
    /// `window` is on the 16-bit grid. (A GPU checks each sample again as it converts it.)
    pub fn push_known_piece(&mut self, window: &[f32], span: Option<Span>, pcm16: bool) {
        self.samples.extend_from_slice(window);
        self.offsets.push(self.samples.len());
        self.spans.push(span);
        self.pcm16.push(pcm16);
    }

    /// Finds which items are 16-bit PCM (a scan of every sample, items side by side).
    pub fn find_pcm16(&mut self) {
        let found: Vec<bool> = (0..self.len())
            .into_par_iter()
            .map(|i| crate::pcm16::is_pcm16(self.item(i)))
            .collect();
        self.pcm16 = found;
    }

    /// True when item `i` is known to be 16-bit PCM.
    pub fn is_pcm16(&self, i: usize) -> bool {
        self.pcm16[i]
    }

    pub fn clear(&mut self) {
        self.samples.clear();
        self.offsets.truncate(1);
        self.spans.clear();
        self.pcm16.clear();
    }

    /// Item `i`'s span: `None` for a whole item.
    pub fn span(&self, i: usize) -> Option<&Span> {
        self.spans[i].as_ref()
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn item(&self, i: usize) -> &[f32] {
        &self.samples[self.offsets[i]..self.offsets[i + 1]]
    }

    pub fn items(&self) -> impl ExactSizeIterator<Item = &[f32]> + '_ {
        self.offsets.windows(2).map(|w| &self.samples[w[0]..w[1]])
    }

    /// All samples, items back to back.
    pub fn samples(&self) -> &[f32] {
        &self.samples
    }

    /// `len() + 1` offsets into [`samples`](Self::samples).
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    /// The batch as `spec` frames it, where the spec has a fixed item length: each whole item
    /// padded or cut to it ([`FeatureSpec::fixed_length`]); a piece of an item as it is (a
    /// fixed-length spec refuses pieces). `None` where the spec takes items as they are.
    pub fn fixed_for(&self, spec: &FeatureSpec) -> Option<AudioBatch> {
        if !spec.is_fixed_length() {
            return None;
        }
        let mut b = AudioBatch::new();
        for i in 0..self.len() {
            let item = self.item(i);
            match self.spans[i] {
                // A whole item, or one given with its whole span (a voice segment).
                // Cut, or padded with zeros: still on the grid where the item was.
                Some(span) if span != Span::whole(spec, item.len()) => {
                    b.push_known_piece(item, Some(span), self.pcm16[i])
                }
                _ => b.push_known_piece(&spec.fixed_length(item), None, self.pcm16[i]),
            }
        }
        Some(b)
    }

    /// Items `range` as a batch of their own (for splitting a batch that did not fit).
    pub fn slice(&self, range: std::ops::Range<usize>) -> AudioBatch {
        let mut b = AudioBatch::new();
        for i in range {
            b.push_known_piece(self.item(i), self.spans[i], self.pcm16[i]);
        }
        b
    }
}

/// Features of a batch, item by item, in the batch's order. An item either has its rows
/// (`frames × bins`, row-major, in a buffer of its own that [`take`](Self::take) hands on
/// without a copy) or the error that stopped it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FeatureBatch {
    bins: usize,
    items: Vec<Result<(usize, Vec<f32>), ItemError>>,
}

impl FeatureBatch {
    pub fn new(bins: usize) -> Self {
        FeatureBatch {
            bins,
            items: Vec::new(),
        }
    }

    /// Empties the batch.
    pub fn reset(&mut self, bins: usize) {
        self.bins = bins;
        self.items.clear();
    }

    pub fn bins(&self) -> usize {
        self.bins
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends an item's rows (copied).
    pub fn push_rows(&mut self, frames: usize, rows: &[f32]) {
        self.push_owned(frames, rows.to_vec());
    }

    /// Appends an item's rows, taking their buffer.
    pub fn push_owned(&mut self, frames: usize, rows: Vec<f32>) {
        debug_assert_eq!(rows.len(), frames * self.bins);
        self.items.push(Ok((frames, rows)));
    }

    /// Keeps only the first `items` items (to undo a batch that failed part-way).
    pub fn truncate_items(&mut self, items: usize) {
        self.items.truncate(items);
    }

    /// Appends an item that failed.
    pub fn push_error(&mut self, error: ItemError) {
        self.items.push(Err(error));
    }

    /// Moves every item of `other` (same bins) to the end of this batch.
    pub fn append(&mut self, other: &mut FeatureBatch) {
        self.items.append(&mut other.items);
    }

    /// Item `i`: its frame count and rows, or its error.
    pub fn item(&self, i: usize) -> Result<(usize, &[f32]), &ItemError> {
        match &self.items[i] {
            Ok((frames, rows)) => Ok((*frames, rows)),
            Err(e) => Err(e),
        }
    }

    /// Takes item `i`'s rows (or its error) out of the batch, leaving it empty.
    pub fn take(&mut self, i: usize) -> Result<(usize, Vec<f32>), ItemError> {
        std::mem::replace(&mut self.items[i], Ok((0, Vec::new())))
    }
}

/// A feature extractor on some device. `extract_batch` appends one result per input item to
/// `out`; it returns `Err` only when the whole batch could not run (out of memory, device
/// lost) — then `out` is unchanged and the caller may split the batch or move it elsewhere.
pub trait Extractor: Send {
    fn spec(&self) -> &FeatureSpec;
    /// Where it runs, for reports: "cpu", "gpu:0 NVIDIA H100 (Vulkan)".
    fn device(&self) -> String;
    /// The host's CPU: a job of CPU executors only streams long items through an extractor in
    /// its decode workers, which needs no queue of pieces (nor their copies).
    fn is_cpu(&self) -> bool {
        false
    }
    fn extract_batch(
        &mut self,
        batch: &AudioBatch,
        out: &mut FeatureBatch,
    ) -> Result<(), DeviceError>;
    /// How many items of `item_samples` samples the device expects to fit in one batch (its
    /// memory budget over the bytes one item needs): the batcher's first size. `None` (the
    /// CPU) sets no limit.
    fn batch_hint(&self, _item_samples: usize) -> Option<usize> {
        None
    }
    /// After an error that cost a batch but was not out of memory (a timeout, a lost or
    /// panicking device): whether the device works again, by a health check of its own, so
    /// that the batch may be retried. `false` (the default) takes the device out.
    fn recover(&mut self) -> bool {
        false
    }
    /// The device memory pool's statistics; `None` for a device without one (the CPU).
    fn memory_stats(&self) -> Option<MemoryStats> {
        None
    }
    /// What the device's data path has done; `None` for a device without one (the CPU).
    fn transfer_stats(&self) -> Option<TransferStats> {
        None
    }
    /// Whether the job stores its rows as f16 with nothing reading them before (no model, no
    /// row stage): a device may then send them as f16, each value rounded to f16 as the writer
    /// would round it (to nearest, ties to even), so that the stored values are the same.
    /// Returns whether the rows now come as f16; the CPU (the default) gives f32 rows, which
    /// the writer rounds.
    fn set_rows_stored_as_f16(&mut self, _stored: bool) -> bool {
        false
    }
}

/// What a device's data path has done since it opened: its staging memory, the chunks it
/// sent, how often the host filled a chunk while the device ran the one before, and the
/// kernels' own time where the device has timestamp queries.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct TransferStats {
    /// Staging buffers made (a ring's slots at first; more only where a chunk outgrew them).
    pub staging_allocations: u64,
    /// Bytes of staging memory held now.
    pub staging_bytes: u64,
    /// Chunks sent to the device.
    pub chunks: u64,
    /// Bytes of samples sent to the device, and the chunks that went as 16-bit samples.
    pub sample_bytes_sent: u64,
    pub pcm16_chunks: u64,
    /// Bytes of rows read back from the device, and the chunks whose rows came as f16.
    pub row_bytes_read: u64,
    pub f16_chunks: u64,
    /// Chunks the host finished filling while the device was still running the chunk before:
    /// the transfers and the kernels overlapped.
    pub chunks_filled_while_busy: u64,
    /// The kernels' time on the device, from timestamp queries (the chunks that had them).
    pub kernel_seconds: f64,
    pub timed_chunks: u64,
    /// Host time copying items into the staging memory, waiting for chunks to come back,
    /// and finishing their rows (the per-item steps after the kernels).
    pub fill_seconds: f64,
    pub wait_seconds: f64,
    pub finish_seconds: f64,
}

impl TransferStats {
    /// What happened after `before` was taken (an earlier copy of these counters): every
    /// count the difference, the staging memory held as it is now.
    pub fn since(&self, before: &TransferStats) -> TransferStats {
        TransferStats {
            staging_allocations: self.staging_allocations - before.staging_allocations,
            staging_bytes: self.staging_bytes,
            chunks: self.chunks - before.chunks,
            sample_bytes_sent: self.sample_bytes_sent - before.sample_bytes_sent,
            pcm16_chunks: self.pcm16_chunks - before.pcm16_chunks,
            row_bytes_read: self.row_bytes_read - before.row_bytes_read,
            f16_chunks: self.f16_chunks - before.f16_chunks,
            chunks_filled_while_busy: self.chunks_filled_while_busy
                - before.chunks_filled_while_busy,
            kernel_seconds: self.kernel_seconds - before.kernel_seconds,
            timed_chunks: self.timed_chunks - before.timed_chunks,
            fill_seconds: self.fill_seconds - before.fill_seconds,
            wait_seconds: self.wait_seconds - before.wait_seconds,
            finish_seconds: self.finish_seconds - before.finish_seconds,
        }
    }
}

/// Pool statistics, named after `torch.cuda.memory_stats()` (current values, bytes).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MemoryStats {
    /// Bytes in blocks handed out.
    pub allocated_bytes: u64,
    /// Bytes held from the device: handed out plus cached.
    pub reserved_bytes: u64,
    /// Bytes the callers asked for (allocated less size-class rounding).
    pub requested_bytes: u64,
    pub peak_allocated_bytes: u64,
    pub peak_reserved_bytes: u64,
    /// Allocations that succeeded only after the cache was released.
    pub num_alloc_retries: u64,
    pub num_ooms: u64,
    /// Allocations served from the cache.
    pub num_cache_hits: u64,
    pub num_device_allocs: u64,
    pub budget_bytes: u64,
    /// 1 − allocated / reserved (0 when nothing is reserved).
    pub fragmentation: f64,
    /// The largest cached (free) block.
    pub largest_free_block: u64,
}

/// The CPU backend: items in parallel on a rayon pool, one [`CpuExtractor`] per worker.
pub struct CpuBackend {
    spec: FeatureSpec,
    precision: Precision,
    pool: Option<rayon::ThreadPool>,
    /// Extractors (FFT plans, tables and scratch) built once and reused by every batch: a
    /// rayon task takes one and gives it back, so there are never more than the workers.
    idle: std::sync::Mutex<Vec<CpuExtractor>>,
}

/// An extractor lent to a rayon task by the backend's idle list, given back when dropped.
struct Lent<'a> {
    extractor: Option<CpuExtractor>,
    idle: &'a std::sync::Mutex<Vec<CpuExtractor>>,
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let (Some(mut ex), Ok(mut idle)) = (self.extractor.take(), self.idle.lock()) {
            // A long item's buffers are not kept for the rest of the run.
            ex.trim(KEPT_VALUES);
            idle.push(ex);
        }
    }
}

/// Values of buffer an idle extractor keeps (4 MiB of f32): a 30 s piece's rows fit.
const KEPT_VALUES: usize = 1 << 20;

impl CpuBackend {
    /// Runs on the global rayon pool.
    pub fn new(spec: &FeatureSpec, precision: Precision) -> Result<Self, SpecError> {
        let first = CpuExtractor::with_precision(spec, precision)?;
        Ok(CpuBackend {
            spec: spec.clone(),
            precision,
            pool: None,
            idle: std::sync::Mutex::new(vec![first]),
        })
    }

    /// Runs on a pool of its own with `threads` workers.
    pub fn with_threads(
        spec: &FeatureSpec,
        precision: Precision,
        threads: usize,
    ) -> Result<Self, SpecError> {
        let mut b = Self::new(spec, precision)?;
        b.pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .ok();
        Ok(b)
    }

    /// The workers it runs on.
    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or_else(rayon::current_num_threads, |p| p.current_num_threads())
    }

    fn run(&self, batch: &AudioBatch) -> Vec<Result<Vec<f32>, ItemError>> {
        let spec = &self.spec;
        let precision = self.precision;
        let work = || {
            (0..batch.len())
                .into_par_iter()
                .map_init(
                    || Lent {
                        extractor: Some(
                            self.idle
                                .lock()
                                .ok()
                                .and_then(|mut idle| idle.pop())
                                .unwrap_or_else(|| {
                                    CpuExtractor::with_precision(spec, precision)
                                        .expect("validated in new()")
                                }),
                        ),
                        idle: &self.idle,
                    },
                    |lent, i| {
                        let ex = lent.extractor.as_mut().expect("lent until dropped");
                        let mut rows = Vec::new();
                        match batch.span(i) {
                            None => ex.extract(batch.item(i), &mut rows)?,
                            Some(span) => ex.extract_span(batch.item(i), span, &mut rows)?,
                        };
                        Ok(rows)
                    },
                )
                .collect()
        };
        match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        }
    }
}

impl Extractor for CpuBackend {
    fn spec(&self) -> &FeatureSpec {
        &self.spec
    }

    fn device(&self) -> String {
        "cpu".into()
    }

    fn is_cpu(&self) -> bool {
        true
    }

    fn extract_batch(
        &mut self,
        batch: &AudioBatch,
        out: &mut FeatureBatch,
    ) -> Result<(), DeviceError> {
        let bins = self.spec.n_bins();
        for result in self.run(batch) {
            match result {
                Ok(rows) => out.push_owned(rows.len() / bins, rows),
                Err(e) => out.push_error(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transfer_counts_since_a_snapshot_keep_the_staging_held_now() {
        let before = TransferStats {
            staging_allocations: 3,
            staging_bytes: 100,
            chunks: 5,
            sample_bytes_sent: 1000,
            pcm16_chunks: 2,
            row_bytes_read: 400,
            f16_chunks: 1,
            kernel_seconds: 0.5,
            ..Default::default()
        };
        let now = TransferStats {
            staging_allocations: 3,
            staging_bytes: 200,
            chunks: 9,
            sample_bytes_sent: 1800,
            pcm16_chunks: 6,
            row_bytes_read: 1000,
            f16_chunks: 3,
            kernel_seconds: 1.25,
            ..Default::default()
        };
        let job = now.since(&before);
        assert_eq!(
            (job.staging_allocations, job.staging_bytes, job.chunks),
            (0, 200, 4)
        );
        assert_eq!((job.sample_bytes_sent, job.pcm16_chunks), (800, 4));
        assert_eq!((job.row_bytes_read, job.f16_chunks), (600, 2));
        assert_eq!(job.kernel_seconds, 0.75);
    }

    /// The extractors are reused across batches (never more than the workers), and reuse
    /// changes nothing: every batch equals a fresh backend's.
    #[test]
    fn reused_extractors_give_a_fresh_backends_results() {
        let spec = FeatureSpec::nemo(80);
        let items: Vec<Vec<f32>> = (0..9)
            .map(|k| {
                (0..4000 + 997 * k)
                    .map(|i| ((i * (k + 3)) as f32 * 0.003).sin() * 0.4)
                    .collect()
            })
            .collect();
        let batch = AudioBatch::from_items(items.iter().map(|v| v.as_slice()));
        let mut reused = CpuBackend::with_threads(&spec, Precision::F64, 2).unwrap();
        for round in 0..3 {
            let mut got = FeatureBatch::new(spec.n_bins());
            reused.extract_batch(&batch, &mut got).unwrap();
            let mut fresh = FeatureBatch::new(spec.n_bins());
            CpuBackend::with_threads(&spec, Precision::F64, 2)
                .unwrap()
                .extract_batch(&batch, &mut fresh)
                .unwrap();
            assert_eq!(got, fresh, "round {round}");
            let idle = reused.idle.lock().unwrap().len();
            assert!(
                (1..=2).contains(&idle),
                "round {round}: {idle} idle extractors"
            );
        }
    }

    #[test]
    fn cpu_backend_keeps_order_and_isolates_bad_items() {
        let spec = FeatureSpec::whisper(80);
        let a: Vec<f32> = (0..3000).map(|i| (i as f32 * 0.02).sin()).collect();
        let b = vec![0.25f32; 1234];
        let bad = vec![f32::NAN; 500];
        let batch = AudioBatch::from_items([&a[..], &bad, &b, &[]]);
        assert_eq!(batch.len(), 4);
        let mut backend = CpuBackend::with_threads(&spec, Precision::F64, 2).unwrap();
        let mut out = FeatureBatch::new(spec.n_bins());
        backend.extract_batch(&batch, &mut out).unwrap();
        assert_eq!(out.len(), 4);
        let mut ex = CpuExtractor::new(&spec).unwrap();
        for (i, item) in [(0, &a), (2, &b)] {
            let mut expect = Vec::new();
            let frames = ex.extract(item, &mut expect).unwrap();
            assert_eq!(out.item(i).unwrap(), (frames, &expect[..]));
        }
        assert!(matches!(out.item(1), Err(ItemError::NonFinite { .. })));
        assert_eq!(out.item(3), Err(&ItemError::Empty));
        let half = batch.slice(2..4);
        assert_eq!(half.item(0), &b[..]);
    }

    #[test]
    fn pieces_keep_their_spans_through_slices_and_the_cpu_backend() {
        let spec = FeatureSpec::nemo(80);
        let x: Vec<f32> = (0..40_000).map(|i| (i as f32 * 0.013).sin()).collect();
        let w = crate::span::span_window(&spec, 50..90, x.len());
        let span = Span {
            sample_start: w.start,
            signal_len: x.len(),
            first_frame: 50,
            frames: 40,
            last: false,
        };
        let mut batch = AudioBatch::new();
        batch.push(&x[..8000]);
        batch.push_piece(&x[w.clone()], Some(span));
        let tail = batch.slice(1..2);
        assert_eq!(tail.span(0), Some(&span));
        assert_eq!(batch.span(0), None);
        let mut backend = CpuBackend::with_threads(&spec, Precision::F64, 2).unwrap();
        let mut out = FeatureBatch::new(spec.n_bins());
        backend.extract_batch(&batch, &mut out).unwrap();
        let mut expect = Vec::new();
        let frames = CpuExtractor::new(&spec)
            .unwrap()
            .extract_span(&x[w], &span, &mut expect)
            .unwrap();
        assert_eq!(frames, 40);
        assert_eq!(out.item(1).unwrap(), (frames, &expect[..]));
    }
}
