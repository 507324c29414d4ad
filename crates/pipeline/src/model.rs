//! The model runner (`sonograph_model::ModelRunner`) as a device of the adaptive batcher: rows
//! of features in, one model output per row out, out-of-memory batches split and retried
//! exactly as feature batches are. The model stage of a job (`extract --model`) runs its
//! batches through [`AdaptiveBatcher::run_on`](crate::AdaptiveBatcher::run_on) with these.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sonograph_dsp::FeatureSpec;
use sonograph_io::parquet::ModelColumns;
use sonograph_model::runner::{InputPrecision, OutputKind, RunnerOptions};
use sonograph_model::{DeviceError, ModelBatch, ModelDevice, ModelRunner, Runtime};

use crate::batcher::{
    AdaptiveBatcher, BatchDevice, BatchError, BatchInput, BatchOutput, BatcherConfig,
};
use crate::config::ModelConfig;
use crate::error::JobError;
use crate::live::{lock, LiveJob, Queue, Stage};
use crate::report::{DepthSample, ModelReport};
use crate::stage::{RowOut, RowStage};
use crate::writer::RowMsg;

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

/// The model stage of a job (`extract --model`): a row stage that runs an ONNX model on the
/// rows' features in batches, through the adaptive batcher (out-of-memory batches split and
/// retried; a lost device's rows move to a fresh CPU session of the model), and passes each
/// row on with the model's output in its model columns. Its input queue is the bounded queue
/// between the data side and the model side: the job sizes it to two batches, so that the
/// data side fills the next batch while this one runs.
pub struct ModelStage {
    runner: RowTolerant<ModelRunner>,
    /// Opened when first needed: a CPU session of the same model.
    fallback: RowTolerant<LazyCpuRunner>,
    batcher: AdaptiveBatcher,
    batch: usize,
    held: Vec<RowMsg>,
    /// A batch has run: from then on, rows held are run whenever the queue is empty.
    warm: bool,
    report: Arc<Mutex<ModelReport>>,
    /// The job's live counters (what /metrics and the dashboard read).
    live: Option<Arc<LiveJob>>,
    started: Instant,
}

/// A CPU session of the model, opened on first use (a lost model device's rows go there).
struct LazyCpuRunner {
    rt: &'static Runtime,
    path: PathBuf,
    options: RunnerOptions,
    runner: Option<Result<ModelRunner, String>>,
}

impl BatchDevice<FeatureRows<'_>, ModelBatch> for LazyCpuRunner {
    type Error = DeviceError;
    fn name(&self) -> String {
        "cpu (fallback session)".into()
    }
    fn workload(&self) -> String {
        self.path.display().to_string()
    }
    fn run(&mut self, input: &FeatureRows<'_>, out: &mut ModelBatch) -> Result<(), DeviceError> {
        let (rt, path, options) = (self.rt, &self.path, &self.options);
        let runner = self
            .runner
            .get_or_insert_with(|| ModelRunner::open(rt, path, options).map_err(|e| e.to_string()));
        let runner = match runner {
            Ok(runner) => runner,
            Err(why) => return Err(DeviceError::Failed(format!("no fallback session: {why}"))),
        };
        runner.run(input, out)
    }
}

/// A model device that tells a row it cannot take (too short for the model's convolutions,
/// say) from a device that fails: a batch that fails as a whole, not for memory, runs again
/// row by row, and only the rows that fail alone fail. When every row fails alone too, the
/// error is the device's (the batcher then moves its work elsewhere).
struct RowTolerant<D>(D);

impl<D> BatchDevice<FeatureRows<'_>, ModelBatch> for RowTolerant<D>
where
    D: for<'a> BatchDevice<FeatureRows<'a>, ModelBatch, Error = DeviceError>,
{
    type Error = DeviceError;
    fn name(&self) -> String {
        self.0.name()
    }
    fn workload(&self) -> String {
        self.0.workload()
    }
    fn run(&mut self, input: &FeatureRows<'_>, out: &mut ModelBatch) -> Result<(), DeviceError> {
        let whole = match self.0.run(input, out) {
            Err(e) if !e.is_out_of_memory() && input.len() > 1 => e,
            result => return result,
        };
        let mut rows = ModelBatch::new();
        let mut failed = 0;
        for k in 0..input.len() {
            match self.0.run(&input.part(k..k + 1), &mut rows) {
                Ok(()) => {}
                Err(e) if e.is_out_of_memory() => return Err(e),
                Err(e) => {
                    failed += 1;
                    rows.push_no_device(e.to_string());
                }
            }
        }
        if failed == input.len() {
            return Err(whole);
        }
        out.append(&mut rows);
        Ok(())
    }
}

/// Depth samples kept in the report: beyond this, every other one is dropped and the interval
/// between samples doubles, so a job of any length reports its whole course.
const MAX_DEPTH_SAMPLES: usize = 512;

impl ModelStage {
    /// Opens the model for rows of `spec`'s features, and checks that they fit it.
    pub fn open(
        config: &ModelConfig,
        spec: &FeatureSpec,
        ort_lib: Option<&std::path::Path>,
        report: Arc<Mutex<ModelReport>>,
        live: Option<Arc<LiveJob>>,
    ) -> Result<Self, JobError> {
        let bad = |m: String| JobError::Model(format!("model {}: {m}", config.path.display()));
        let device = ModelDevice::parse(&config.device).map_err(|e| bad(e.to_string()))?;
        if config.batch == 0 {
            return Err(bad("model-batch must be at least 1".into()));
        }
        let rt = Runtime::get(ort_lib).map_err(|e| bad(e.to_string()))?;
        // A model that declares its mel bins is opened as it is, so that a mismatch is told
        // below with the preset to use; one that leaves them open takes the spec's.
        let options = RunnerOptions {
            threads: config.threads,
            device,
            ..RunnerOptions::default()
        };
        let runner = ModelRunner::open(rt, &config.path, &options)
            .or_else(|_| {
                let n_mels = Some(spec.n_bins());
                ModelRunner::open(rt, &config.path, &RunnerOptions { n_mels, ..options })
            })
            .map_err(|e| bad(e.to_string()))?;
        let options = RunnerOptions {
            n_mels: Some(runner.n_mels()),
            ..options
        };
        // The fallback is a CPU session of the same model.
        let options = RunnerOptions {
            device: ModelDevice::Cpu,
            ..options
        };
        if spec.is_complex() || runner.n_mels() != spec.n_bins() {
            return Err(bad(format!(
                "the model takes {} mel bins, and the spec gives {} bins: use the preset the \
                 model was trained with (nemo: 80, nemo-128: 128)",
                runner.n_mels(),
                spec.n_bins()
            )));
        }
        {
            let mut r = lock(&report);
            r.model = config.path.display().to_string();
            r.kind = match runner.kind() {
                OutputKind::Encoder => "encoder",
                OutputKind::Logprobs => "ctc",
            }
            .into();
            r.device = runner.device();
            r.input_precision = match runner.input_precision() {
                InputPrecision::F32 => "f32",
                InputPrecision::F16 => "f16",
            }
            .into();
            r.batch = config.batch;
        }
        Ok(ModelStage {
            runner: RowTolerant(runner),
            fallback: RowTolerant(LazyCpuRunner {
                rt,
                path: config.path.clone(),
                options,
                runner: None,
            }),
            batcher: AdaptiveBatcher::new(BatcherConfig {
                initial: config.batch,
                max: config.batch,
                ..BatcherConfig::default()
            }),
            batch: config.batch,
            held: Vec::new(),
            warm: false,
            report,
            live,
            started: Instant::now(),
        })
    }

    /// Runs the model on the rows held and passes them on, or fails those it could not run.
    fn run_held(&mut self, out: &mut RowOut) {
        if self.held.is_empty() {
            return;
        }
        let started = Instant::now();
        // Fault injection: `model-stage::run=sleep(ms)` makes the model side the slow one, to
        // see in the report that a fed model is never starved.
        fail::fail_point!("model-stage::run");
        let n_mels = self.runner.0.n_mels();
        let features = FeatureRows::new(
            self.held
                .iter()
                .map(|r| r.row.features.as_slice())
                .collect(),
            n_mels,
        );
        let mut outputs = ModelBatch::new();
        self.batcher.run_on(
            &features,
            &mut self.runner,
            &mut self.fallback,
            &mut outputs,
        );
        let took = started.elapsed().as_secs_f64();
        if let Some(live) = &self.live {
            live.add_busy(Stage::Model, took);
        }
        let rows = self.held.len();
        let mut failed = 0;
        for (mut row, output) in self.held.drain(..).zip(outputs.into_items()) {
            match output {
                Ok(o) => {
                    row.row.model = Some(ModelColumns {
                        frames: o.frames as u32,
                        dim: o.dim as u32,
                        values: o.data,
                    });
                    out.pass(row);
                }
                Err(e) => {
                    failed += 1;
                    out.fail(row, e.to_string());
                }
            }
        }
        self.warm = true;
        let mut r = lock(&self.report);
        r.busy_s += took;
        r.rows += rows as u64;
        r.rows_failed += failed;
        r.runs += 1;
        let stats = self.batcher.stats();
        r.batches = stats.batches;
        r.out_of_memory = stats.ooms;
        r.splits = stats.splits;
        r.moved_to_fallback = stats.items_on_fallback + stats.items_after_loss;
        r.device_lost = stats.devices_lost > 0;
        r.alerts = stats.alerts.clone();
        if r.first_run_s.is_none() {
            r.first_run_s = Some(self.started.elapsed().as_secs_f64());
        }
    }
}

impl RowStage for ModelStage {
    fn name(&self) -> &str {
        "model"
    }

    fn queued(&mut self, depth: usize, capacity: usize, waited: Duration) {
        if let Some(live) = &self.live {
            live.observe_queue(Queue::Model, depth);
        }
        let mut r = lock(&self.report);
        // Before the first batch the wait is its filling; after it, starvation: the data side
        // was behind.
        if self.warm {
            r.starved_s += waited.as_secs_f64();
        } else {
            r.warmup_s += waited.as_secs_f64();
        }
        r.queue_capacity = capacity;
        let t = self.started.elapsed().as_secs_f64();
        let due = r
            .queue_depth
            .last()
            .is_none_or(|last| t - last.t_s >= r.depth_interval_s);
        if due {
            r.queue_depth.push(DepthSample { t_s: t, depth });
            if r.queue_depth.len() > MAX_DEPTH_SAMPLES {
                let kept: Vec<DepthSample> = r.queue_depth.iter().step_by(2).copied().collect();
                r.queue_depth = kept;
                r.depth_interval_s *= 2.0;
            }
        }
    }

    fn process(&mut self, row: RowMsg, out: &mut RowOut) -> Result<(), String> {
        self.held.push(row);
        if self.held.len() >= self.batch {
            self.run_held(out);
        }
        Ok(())
    }

    /// The first batch waits to be full; after it, the model never sits on rows while its
    /// queue is empty.
    fn idle(&mut self, out: &mut RowOut) {
        if self.warm {
            self.run_held(out);
        }
    }

    fn finish(&mut self, out: &mut RowOut) -> Result<(), String> {
        self.run_held(out);
        Ok(())
    }
}
