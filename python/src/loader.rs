//! `sonograph.Loader`: batches of features straight from a corpus for a training loop. Worker
//! threads decode and extract items ahead of the consumer (at most `prefetch` batches ahead).
//! Which items go into which batch is the sampler's plan (`sonograph_pipeline::sampler`): by
//! count, by total duration from duration buckets, shared between distributed ranks, and
//! reshuffled by (seed, epoch) alone; so batches are the same whatever the workers and the
//! order they finish in, and `state_dict()` resumes after the last batch given. An item that
//! fails is not dropped in silence: it is left out of its batch and listed in `failures` with
//! its reason.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sonograph_dsp::{AudioBatch, CpuExtractor, Extractor, FeatureBatch, FeatureSpec, Precision};
use sonograph_io::decode::DecodeOptions;
use sonograph_io::manifest::SourceItem;
use sonograph_pipeline::augment::{
    apply_speed, apply_to_features, mask_grid, AugmentOptions, Augmenter,
};
use sonograph_pipeline::bounds;
use sonograph_pipeline::listing::{durations, list, Listed};
use sonograph_pipeline::sampler::{plan_epoch, SamplerOptions};

use crate::{input_error, options_error, spec_of};

/// An item's features (rows of `bins` values) or, where a GPU computes them, its samples ready
/// for it; or why it has neither.
type Features = Result<Vec<f32>, String>;

/// The GPU a Loader computes features on.
type Device = Mutex<Box<dyn Extractor>>;

/// The workers of one epoch: they compute the items at the positions handed to them (of the
/// epoch's items in batch order) and send them back.
struct Workers {
    tickets: Option<Sender<usize>>,
    done: Receiver<(usize, Features)>,
    threads: Vec<JoinHandle<()>>,
    /// Set when they should go: they leave the positions handed to them undone.
    stop: Arc<AtomicBool>,
}

impl Workers {
    fn start(
        n: usize,
        spec: &FeatureSpec,
        precision: Precision,
        listed: &Arc<Vec<Listed>>,
        items: &Arc<Vec<usize>>,
        augment: Option<(Arc<Augmenter>, u64)>,
        features_on_cpu: bool,
    ) -> PyResult<Workers> {
        let (tickets, work) = crossbeam_channel::unbounded::<usize>();
        let (finished, done) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..n)
            .map(|i| {
                let (work, finished, listed, items, spec, stop, augment) = (
                    work.clone(),
                    finished.clone(),
                    listed.clone(),
                    items.clone(),
                    spec.clone(),
                    stop.clone(),
                    augment.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("sonograph-loader-{i}"))
                    .spawn(move || {
                        let job = Job {
                            spec: &spec,
                            precision,
                            listed: &listed,
                            items: &items,
                            augment: augment.as_ref().map(|(a, e)| (&**a, *e)),
                            features_on_cpu,
                        };
                        worker(&job, &work, &finished, &stop)
                    })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::errors::error)?;
        Ok(Workers {
            tickets: Some(tickets),
            done,
            threads,
            stop,
        })
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        // The workers end after the item in hand, leaving the rest of the queue.
        self.stop.store(true, Ordering::Relaxed);
        self.tickets = None;
        for w in self.threads.drain(..) {
            let _ = w.join();
        }
    }
}

/// Batches of features of every item of a source (a folder, a NeMo JSON-lines or CSV manifest,
/// with offsets and durations), computed on `workers` threads. Iterating gives
/// `(ids, features, lengths)`: the items' ids, a float32 array [batch, frames, bins] zero-padded
/// to the longest item, and each item's frame count (int64); with `output="torch"` both are
/// torch tensors on the same memory (in pinned memory with `pin_memory`). One pass is one epoch;
/// iterating again after it ends starts the next (reshuffled where `shuffle`). Items that fail
/// are in `failures` as `(id, reason)`.
#[pyclass(module = "sonograph")]
pub struct Loader {
    listed: Arc<Vec<Listed>>,
    /// Each listed item's duration in seconds, where the sampler needs them (0 for an entry
    /// that cannot be read: it fails when loaded).
    durations: Vec<f64>,
    sampler: SamplerOptions,
    augment: Option<Arc<Augmenter>>,
    spec: FeatureSpec,
    precision: Precision,
    bins: usize,
    threads: usize,
    prefetch: usize,
    epoch: u64,
    /// This rank's batches of the epoch (indices into `listed`).
    plan: Vec<Vec<usize>>,
    /// The epoch's items in batch order, and where each batch starts among them.
    items: Arc<Vec<usize>>,
    starts: Vec<usize>,
    /// Batches given out this epoch.
    given: usize,
    /// The next position to take, and the positions handed to the workers so far (the items
    /// of the batch being collected and of the `prefetch` − 1 after it).
    next: usize,
    handed: usize,
    workers: Option<Workers>,
    /// Positions finished out of order, waiting for their turn.
    ready: HashMap<usize, Features>,
    /// The batch being collected: (id, index, features or samples).
    batch: Vec<(String, usize, Vec<f32>)>,
    /// The GPU that computes the features (the workers decode and augment the waveforms),
    /// where one was asked for; else the workers compute them.
    device: Option<Device>,
    device_name: String,
    /// Batches given, seconds waiting for the workers, seconds on the device.
    stats: (u64, f64, f64),
    failures: Vec<(String, String)>,
    failed: HashSet<String>,
    /// Frames given and frames of padding, over the batches given.
    frames: (u64, u64),
    /// Where batches are torch tensors: the torch module, and whether they are pinned.
    torch: Option<(Py<PyModule>, bool)>,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (source, preset=None, *, spec=None, precision="auto", batch_size=32,
                        max_duration=None, num_buckets=1, workers=None, prefetch=4,
                        shuffle=false, seed=0, drop_last=false, rank=None, world_size=None,
                        augment=None, device="cpu", output="numpy", pin_memory=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: PathBuf,
        preset: Option<&str>,
        spec: Option<Bound<'_, PyAny>>,
        precision: &str,
        batch_size: Option<usize>,
        max_duration: Option<f64>,
        num_buckets: usize,
        workers: Option<usize>,
        prefetch: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
        rank: Option<usize>,
        world_size: Option<usize>,
        augment: Option<Bound<'_, PyAny>>,
        device: &str,
        output: &str,
        pin_memory: bool,
    ) -> PyResult<Loader> {
        let (spec, precision) = spec_of(py, preset, spec.as_ref(), precision)?;
        let torch = torch_output(py, output, pin_memory)?;
        // The job's bounds: a loader of a billion threads or items in flight is refused.
        let bounds = [
            ("prefetch", prefetch, bounds::PREFETCH),
            ("workers", workers.unwrap_or(1), bounds::WORKERS),
        ];
        for (name, value, range) in bounds {
            if !range.contains(&value) {
                return Err(options_error(format!(
                    "{name} {value} is outside {}..={}",
                    range.start(),
                    range.end()
                )));
            }
        }
        if batch_size.unwrap_or(1).saturating_mul(prefetch) > bounds::PREFETCHED_ITEMS {
            return Err(options_error(format!(
                "batch_size × prefetch (the items ahead) may be at most {}",
                bounds::PREFETCHED_ITEMS
            )));
        }
        let (rank, world_size) = distributed(rank, world_size)?;
        let sampler = SamplerOptions {
            batch_size,
            max_duration,
            num_buckets,
            shuffle,
            seed,
            drop_last,
            rank,
            world_size,
        };
        sampler.check().map_err(options_error)?;
        let threads = workers.unwrap_or_else(sonograph_pipeline::defaults::workers);
        let augment = match augment {
            None => None,
            Some(a) => {
                let options: AugmentOptions = crate::convert(&a)
                    .map_err(|e| options_error(format!("augment: {}", e.value(py))))?;
                options
                    .check()
                    .map_err(|e| options_error(format!("augment: {e}")))?;
                Some(Arc::new(
                    py.detach(|| Augmenter::load(options, seed, threads))
                        .map_err(input_error)?,
                ))
            }
        };
        let (device, device_name) = open_device(py, device, &spec, precision)?;
        let listed = py.detach(|| list(&source)).map_err(input_error)?;
        let by_duration = max_duration.is_some() || num_buckets > 1;
        let durations = if by_duration {
            py.detach(|| durations(&listed, threads))
        } else {
            vec![0.0; listed.len()]
        };
        let mut loader = Loader {
            listed: Arc::new(listed),
            durations,
            sampler,
            augment,
            bins: spec.n_bins(),
            spec,
            precision,
            threads,
            prefetch,
            epoch: 0,
            plan: Vec::new(),
            items: Arc::new(Vec::new()),
            starts: Vec::new(),
            given: 0,
            next: 0,
            handed: 0,
            workers: None,
            ready: HashMap::new(),
            batch: Vec::new(),
            failures: Vec::new(),
            failed: HashSet::new(),
            frames: (0, 0),
            device,
            device_name,
            stats: (0, 0.0, 0.0),
            torch,
        };
        loader.start(0, 0)?;
        Ok(loader)
    }

    /// The number of items in the source (those that fail included).
    fn __len__(&self) -> usize {
        self.listed.len()
    }

    /// The loader; once an epoch is over, the next one starts.
    fn __iter__(mut slf: PyRefMut<'_, Self>) -> PyResult<PyRefMut<'_, Self>> {
        if slf.given == slf.plan.len() && slf.batch.is_empty() {
            let epoch = slf.epoch + 1;
            slf.start(epoch, 0)?;
        }
        Ok(slf)
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let done = loop {
            if self.given == self.plan.len() {
                return Err(PyStopIteration::new_err(()));
            }
            let end = self.starts[self.given + 1];
            // Kept in `self` while collecting: a batch interrupted by Ctrl-C (or a device
            // error) loses no item, the next call goes on with it.
            while self.next < end {
                let position = self.next;
                let features = match self.ready.remove(&position) {
                    Some(f) => f,
                    None => {
                        let t = Instant::now();
                        let f = self.wait_for(py, position);
                        self.stats.1 += t.elapsed().as_secs_f64();
                        f?
                    }
                };
                self.next += 1;
                self.hand_out();
                let index = self.items[position];
                let id = self.listed[index].0.clone();
                match features {
                    Ok(r) => self.batch.push((id, index, r)),
                    Err(reason) => self.fail(id, reason),
                }
            }
            let done = if self.device.is_some() && !self.batch.is_empty() {
                self.extract_on_device(py)?
            } else {
                std::mem::take(&mut self.batch)
                    .into_iter()
                    .map(|(id, _, rows)| (id, rows))
                    .collect()
            };
            self.given += 1;
            self.hand_out();
            // Every item of the batch failed: the next one; but in a distributed job every
            // rank must give as many batches (the others would wait for this one's gradient
            // for ever), so it gives this one, empty.
            if !done.is_empty() || self.sampler.world_size > 1 {
                break done;
            }
        };
        self.stats.0 += 1;
        let (ids, rows): (Vec<String>, Vec<Vec<f32>>) = done.into_iter().unzip();
        let frames: Vec<i64> = rows.iter().map(|r| (r.len() / self.bins) as i64).collect();
        let longest = frames.iter().copied().max().unwrap_or(0) as usize;
        let held: u64 = frames.iter().map(|&f| f as u64).sum();
        self.frames.0 += (longest * rows.len()) as u64;
        self.frames.1 += (longest * rows.len()) as u64 - held;
        let mut padded = vec![0f32; rows.len() * longest * self.bins];
        for (k, r) in rows.iter().enumerate() {
            let at = k * longest * self.bins;
            padded[at..at + r.len()].copy_from_slice(r);
        }
        let features = padded
            .into_pyarray(py)
            .reshape([rows.len(), longest, self.bins])?
            .into_any();
        let lengths = frames.into_pyarray(py).into_any();
        let (features, lengths) = match &self.torch {
            None => (features, lengths),
            Some((torch, pin)) => (
                to_tensor(torch.bind(py), features, *pin)?,
                to_tensor(torch.bind(py), lengths, *pin)?,
            ),
        };
        (ids, features, lengths)
            .into_pyobject(py)
            .map(|t| t.into_any())
    }

    /// `(id, reason)` of every item that failed so far (each once, whatever the epochs).
    #[getter]
    fn failures(&self) -> Vec<(String, String)> {
        self.failures.clone()
    }

    /// Which side waits: `batches` given, `waited_s` (the training loop waiting for the
    /// workers to decode and augment), `device_s` (computing features on the GPU, where one
    /// computes them), and the `device`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("batches", self.stats.0)?;
        d.set_item("waited_s", self.stats.1)?;
        d.set_item("device_s", self.stats.2)?;
        d.set_item("device", &self.device_name)?;
        Ok(d)
    }

    /// The epoch being given.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This rank's batches in an epoch (every rank has as many).
    #[getter]
    fn batches_per_epoch(&self) -> usize {
        self.plan.len()
    }

    /// The share of the frames given so far that is padding.
    #[getter]
    fn padding(&self) -> f64 {
        match self.frames {
            (0, _) => 0.0,
            (all, pad) => pad as f64 / all as f64,
        }
    }

    /// What item `id` gets in `epoch` (the current one by default): `speed`, `gain_db`, `rir`
    /// (`path`, `offset_s`, `duration_s`), `noise` (`path`, `file_offset_s`, `snr_db`),
    /// `time_warp` (`(boundary frame, the frame it moves to)`, where the item is warped),
    /// `freq_masks` and `time_masks` (`(first, width)` each): the draws the loader applies to
    /// it, for checking them or applying them elsewhere.
    #[pyo3(signature = (id, epoch=None))]
    fn augmentation<'py>(
        &self,
        py: Python<'py>,
        id: &str,
        epoch: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let Some(augmenter) = &self.augment else {
            return Err(options_error("this loader has no augment"));
        };
        let Some(index) = self.listed.iter().position(|(i, _)| i == id) else {
            return Err(options_error(format!("{id}: not an item of this loader")));
        };
        let item = self.listed[index].1.as_ref().map_err(input_error)?;
        let epoch = epoch.unwrap_or(self.epoch);
        let mut samples = decoded(item, self.spec.sample_rate).map_err(input_error)?;
        if let Some(factor) = augmenter.speed(epoch, index as u64) {
            samples = apply_speed(samples, self.spec.sample_rate, factor).map_err(input_error)?;
        }
        let seconds = samples.len() as f64 / f64::from(self.spec.sample_rate);
        let grid = mask_grid(&self.spec, self.spec.n_frames(samples.len()));
        let drawn = augmenter.draw(epoch, index as u64, seconds, Some(grid));
        let mut value = serde_json::to_value(&drawn).map_err(crate::errors::error)?;
        if let (Some(noise), Some(n)) = (&drawn.noise, value.get_mut("noise")) {
            let clip = &augmenter.noise_clips[noise.clip];
            n["path"] = clip.path.display().to_string().into();
            // Where the noise starts in its file, as `decode` takes it.
            n["file_offset_s"] = (clip.offset_s + noise.offset_s).into();
        }
        if let Some(k) = drawn.rir {
            let clip = &augmenter.rir_clips[k];
            value["rir"] = serde_json::json!({
                "index": k,
                "path": clip.path.display().to_string(),
                "offset_s": clip.offset_s,
                "duration_s": clip.seconds,
            });
        }
        crate::from_json(py, &value.to_string())
    }

    /// Starts epoch `epoch` from its first batch (its order is a function of the seed and the
    /// epoch alone), as a torch sampler's `set_epoch`. Not needed between epochs (a new pass
    /// starts the next one), and after `load_state_dict` it would give the restored epoch's
    /// batches again from the first.
    fn set_epoch(&mut self, epoch: u64) -> PyResult<()> {
        self.start(epoch, 0)
    }

    /// Where the loader is: the epoch and the batches given in it, with what must match for a
    /// resume (the sampler's settings and the source's size). `load_state_dict` of it in a
    /// new loader on the same source gives the batches that would have come next.
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("epoch", self.epoch)?;
        d.set_item("batches_done", self.given)?;
        d.set_item("sampler", self.fingerprint())?;
        Ok(d)
    }

    /// Resumes where `state` (from `state_dict`) says, after its last batch given: no item
    /// is repeated or skipped. A state of another source or sampler is refused.
    fn load_state_dict(&mut self, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let get = |key: &str| -> PyResult<Bound<'_, PyAny>> {
            state
                .get_item(key)?
                .ok_or_else(|| options_error(format!("state: no {key}")))
        };
        let epoch: u64 = get("epoch")?.extract()?;
        let done: usize = get("batches_done")?.extract()?;
        let sampler: String = get("sampler")?.extract()?;
        if sampler != self.fingerprint() {
            return Err(options_error(format!(
                "state: saved by a loader of {sampler}, not of {}",
                self.fingerprint()
            )));
        }
        // Saved after the epoch's last batch: what comes next is the next epoch.
        if done > 0 && done == plan_epoch(&self.epoch_durations(epoch), &self.sampler, epoch).len()
        {
            return self.start(epoch + 1, 0);
        }
        self.start(epoch, done)
    }
}

impl Loader {
    /// Lists a failed item, once whatever the epochs.
    fn fail(&mut self, id: String, reason: String) {
        if self.failed.insert(id.clone()) {
            self.failures.push((id, reason));
        }
    }

    /// The features of the batch's samples on the GPU, with the time warp and masks of the
    /// augmentation;
    /// an item the device could not compute is a failure. On a device error the batch stays,
    /// for the next call.
    fn extract_on_device(&mut self, py: Python<'_>) -> PyResult<Vec<(String, Vec<f32>)>> {
        let device = self.device.as_ref().expect("called with a device");
        let items: Vec<&[f32]> = self.batch.iter().map(|(_, _, s)| s.as_slice()).collect();
        let t = Instant::now();
        let extracted = py.detach(|| {
            let mut device = device.lock().unwrap_or_else(|e| e.into_inner());
            extract_split(&mut **device, &items, self.bins)
        });
        self.stats.2 += t.elapsed().as_secs_f64();
        let mut out = extracted
            .map_err(|e| crate::errors::device_failed(format!("{}: {e}", self.device_name)))?;
        let rate = f64::from(self.spec.sample_rate);
        let mut done = Vec::with_capacity(self.batch.len());
        let mut failed = Vec::new();
        for (k, (id, index, samples)) in self.batch.iter().enumerate() {
            match out.take(k) {
                Ok((frames, mut rows)) => {
                    if let Some(a) = &self.augment {
                        let seconds = samples.len() as f64 / rate;
                        let drawn = a.draw(
                            self.epoch,
                            *index as u64,
                            seconds,
                            Some(mask_grid(&self.spec, frames)),
                        );
                        let mask = a
                            .options
                            .spec_augment
                            .as_ref()
                            .map_or(0.0, |s| s.mask_value);
                        apply_to_features(&drawn, &mut rows, self.spec.frame_bins(), mask);
                    }
                    done.push((id.clone(), rows));
                }
                Err(e) => {
                    let reason = match &self.listed[*index].1 {
                        Ok(item) => crate::named_error(&item.path, e.to_string()),
                        Err(_) => e.to_string(),
                    };
                    failed.push((id.clone(), reason));
                }
            }
        }
        // Only now, all of it computed: a device error or a panic above leaves the batch.
        self.batch.clear();
        for (id, reason) in failed {
            self.fail(id, reason);
        }
        Ok(done)
    }

    /// What a saved state must match: the source (its items' ids and durations, hashed) and
    /// the sampler's settings.
    fn fingerprint(&self) -> String {
        let o = &self.sampler;
        // FNV-1a, 64 bits: the same on every version and platform (std's hasher is not).
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        let bytes = self
            .listed
            .iter()
            .zip(&self.durations)
            .flat_map(|((id, _), d)| {
                id.bytes()
                    .chain([0])
                    .chain(d.to_bits().to_le_bytes())
                    .collect::<Vec<u8>>()
            });
        for b in bytes {
            hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        format!(
            "{} items ({hash:016x}), batch_size {:?}, max_duration {:?}, num_buckets {}, \
             shuffle {}, seed {}, drop_last {}, rank {} of {}",
            self.listed.len(),
            o.batch_size,
            o.max_duration,
            o.num_buckets,
            o.shuffle,
            o.seed,
            o.drop_last,
            o.rank,
            o.world_size
        )
    }

    /// The durations `epoch` is planned with: each item's as its speed perturbation in that
    /// epoch makes it (a 0.9 factor lengthens it by 1/0.9), so that a batch of `max_duration`
    /// holds what it says.
    fn epoch_durations(&self, epoch: u64) -> Vec<f64> {
        match &self.augment {
            Some(a) if a.options.speed.is_some() => self
                .durations
                .iter()
                .enumerate()
                .map(|(i, &d)| d / a.speed(epoch, i as u64).unwrap_or(1.0))
                .collect(),
            _ => self.durations.clone(),
        }
    }

    /// Plans `epoch` and starts its workers at batch `skip` (the batches before it given).
    fn start(&mut self, epoch: u64, skip: usize) -> PyResult<()> {
        // Checked before anything changes: a refused state leaves the loader as it was.
        let plan = plan_epoch(&self.epoch_durations(epoch), &self.sampler, epoch);
        if skip > plan.len() {
            return Err(options_error(format!(
                "state: {skip} batches done, but epoch {epoch} has {}",
                plan.len()
            )));
        }
        // The old epoch's workers stop after the item in hand.
        self.workers = None;
        let mut starts = Vec::with_capacity(plan.len() + 1);
        let mut items = Vec::new();
        for b in &plan {
            starts.push(items.len());
            items.extend_from_slice(b);
        }
        starts.push(items.len());
        self.items = Arc::new(items);
        self.epoch = epoch;
        self.given = skip;
        self.next = starts[skip];
        self.handed = starts[skip];
        self.starts = starts;
        self.plan = plan;
        self.ready.clear();
        self.batch.clear();
        self.workers = Some(Workers::start(
            self.threads,
            &self.spec,
            self.precision,
            &self.listed,
            &self.items,
            self.augment.clone().map(|a| (a, epoch)),
            self.device.is_none(),
        )?);
        self.hand_out();
        Ok(())
    }

    /// Keeps the workers `prefetch` batches ahead of the consumer, the one being collected
    /// included.
    fn hand_out(&mut self) {
        let Some(tickets) = self.workers.as_ref().and_then(|w| w.tickets.as_ref()) else {
            return;
        };
        let ahead = self.starts[(self.given + self.prefetch).min(self.plan.len())];
        while self.handed < ahead {
            if tickets.send(self.handed).is_err() {
                return;
            }
            self.handed += 1;
        }
    }

    /// Waits (without the GIL) until position `position` is done, keeping the others that
    /// finish meanwhile.
    fn wait_for(&mut self, py: Python<'_>, position: usize) -> PyResult<Features> {
        let Some(workers) = &self.workers else {
            return Err(crate::errors::error("the loader's workers stopped"));
        };
        let done = workers.done.clone();
        loop {
            // Back every tenth of a second for Ctrl-C (KeyboardInterrupt) while waiting.
            let received = py.detach(|| done.recv_timeout(std::time::Duration::from_millis(100)));
            let (i, features) = match received {
                Ok(r) => r,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    py.check_signals()?;
                    continue;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    return Err(crate::errors::error("the loader's workers stopped"));
                }
            };
            if i == position {
                return Ok(features);
            }
            self.ready.insert(i, features);
        }
    }
}

/// The torch module where batches are to be torch tensors (`output="torch"`), and whether they
/// are pinned: as torch's DataLoader does, `pin_memory` without an accelerator warns and pins
/// nothing, so that one training script runs on a machine with a GPU and on one without.
fn torch_output(
    py: Python<'_>,
    output: &str,
    pin_memory: bool,
) -> PyResult<Option<(Py<PyModule>, bool)>> {
    match output {
        "numpy" if pin_memory => Err(options_error(
            "pin_memory=True: pinned memory is torch's, give output=\"torch\" too",
        )),
        "numpy" => Ok(None),
        "torch" => {
            let torch = py.import("torch").map_err(|e| {
                options_error(format!(
                    "output=\"torch\" needs PyTorch, and `import torch` failed: {}",
                    e.value(py)
                ))
            })?;
            let pin = pin_memory
                && torch
                    .getattr("cuda")?
                    .call_method0("is_available")?
                    .is_truthy()?;
            if pin_memory && !pin {
                PyErr::warn(
                    py,
                    &py.get_type::<pyo3::exceptions::PyUserWarning>(),
                    c"pin_memory=True, but torch sees no CUDA device: batches are not pinned",
                    1,
                )?;
            }
            Ok(Some((torch.unbind(), pin)))
        }
        other => Err(options_error(format!(
            "output {other:?}: \"numpy\" or \"torch\""
        ))),
    }
}

/// A numpy array as a torch tensor on the same memory (DLPack: no copy), or copied into pinned
/// memory for a `.to(device, non_blocking=True)` that overlaps.
fn to_tensor<'py>(
    torch: &Bound<'py, PyModule>,
    array: Bound<'py, PyAny>,
    pin: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let tensor = torch.call_method1("from_dlpack", (array,))?;
    if pin {
        tensor.call_method0("pin_memory")
    } else {
        Ok(tensor)
    }
}

/// The rank and world size given, else torch.distributed's launcher's (`RANK`,
/// `WORLD_SIZE`), else a single process.
fn distributed(rank: Option<usize>, world_size: Option<usize>) -> PyResult<(usize, usize)> {
    let env = |name: &str| -> PyResult<Option<usize>> {
        std::env::var(name)
            .ok()
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| options_error(format!("{name}={v:?} is not a whole number")))
            })
            .transpose()
    };
    let rank = match rank {
        Some(r) => r,
        None => env("RANK")?.unwrap_or(0),
    };
    let world_size = match world_size {
        Some(w) => w,
        None => env("WORLD_SIZE")?.unwrap_or(1),
    };
    Ok((rank, world_size))
}

/// What a worker computes: the spec, the items, and the augmentation of the epoch.
struct Job<'a> {
    spec: &'a FeatureSpec,
    precision: Precision,
    listed: &'a [Listed],
    items: &'a [usize],
    augment: Option<(&'a Augmenter, u64)>,
    /// The workers compute the features; else they hand on the samples, for a GPU.
    features_on_cpu: bool,
}

fn worker(
    job: &Job<'_>,
    work: &Receiver<usize>,
    finished: &Sender<(usize, Features)>,
    stop: &AtomicBool,
) {
    // spec_of checked the spec; were it refused here all the same, every item says why.
    let mut extractor =
        CpuExtractor::with_precision(job.spec, job.precision).map_err(|e| e.to_string());
    for position in work.iter() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let index = job.items[position];
        let features = match (&job.listed[index].1, &mut extractor) {
            (Err(reason), _) => Err(reason.clone()),
            (Ok(_), Err(why)) => Err(why.clone()),
            (Ok(item), Ok(extractor)) => {
                // A panic fails the item, never the loader: its consumer would wait forever.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    features_of(job, index, item, extractor)
                }))
                .unwrap_or_else(|_| Err(format!("internal error while reading {}", item.id)))
            }
        };
        if finished.send((position, features)).is_err() {
            return;
        }
    }
}

/// The item's samples at `rate`, as extract decodes them.
fn decoded(item: &SourceItem, rate: u32) -> Result<Vec<f32>, String> {
    let opts = DecodeOptions {
        offset_s: item.offset_s,
        duration_s: item.duration_s,
        ..Default::default()
    };
    // Its file, or its bytes in a WebDataset shard.
    sonograph_io::AudioReader::open_item(&sonograph_io::Roots::anywhere(), item, &opts)
        .and_then(|reader| sonograph_io::decode_reader(reader, rate))
        .map_err(|e| crate::named_error(&item.path, e.to_string()))
}

fn features_of(
    job: &Job<'_>,
    index: usize,
    item: &SourceItem,
    extractor: &mut CpuExtractor,
) -> Features {
    let rate = job.spec.sample_rate;
    let mut samples = decoded(item, rate)?;
    // SpecAugment's grid: frames of bands, also where rows stack frames (`mask_grid`).
    let bins = job.spec.frame_bins();
    let frames_of = |n: usize| mask_grid(job.spec, job.spec.n_frames(n)).0;
    let mut drawn = None;
    if let Some((a, epoch)) = job.augment {
        let (augmented, draws) = a.waveform(
            epoch,
            index as u64,
            samples,
            rate,
            &item.path,
            Some((bins, &frames_of)),
        )?;
        samples = augmented;
        drawn = Some((a, draws));
    }
    if !job.features_on_cpu {
        // The GPU computes the features of the batch, and the time warp and the masks after them.
        return Ok(samples);
    }
    let mut out = Vec::new();
    extractor
        .extract(&samples, &mut out)
        .map_err(|e| crate::named_error(&item.path, e.to_string()))?;
    if let Some((a, drawn)) = &drawn {
        let mask_value = a
            .options
            .spec_augment
            .as_ref()
            .map_or(0.0, |s| s.mask_value);
        apply_to_features(drawn, &mut out, bins, mask_value);
    }
    Ok(out)
}

/// The GPU of a Loader's `device` ("cpu": none; "auto": a hardware GPU where it measures
/// faster than the CPU on the spec, else none), and its name.
fn open_device(
    py: Python<'_>,
    device: &str,
    spec: &FeatureSpec,
    precision: Precision,
) -> PyResult<(Option<Device>, String)> {
    if device == "cpu" {
        return Ok((None, "cpu".into()));
    }
    let devices = sonograph_gpu::JobDevices::parse(device, None).map_err(options_error)?;
    let disabled = sonograph_gpu::disabled_devices();
    let opened = py
        .detach(|| {
            devices.open(
                spec,
                precision,
                &disabled,
                &mut sonograph_io::calibration::FileStore::open(),
            )
        })
        .map_err(crate::errors::device_error)?;
    for note in opened.notes {
        eprintln!("sonograph: warning: {note}");
    }
    let mut executors = opened.executors;
    if executors.len() != 1 {
        return Err(options_error(format!(
            "device {device}: the Loader computes on one device: cpu, auto, gpu or gpu:N"
        )));
    }
    let executor = executors.pop().expect("one executor");
    if executor.is_cpu() {
        return Ok((None, "cpu".into()));
    }
    let name = executor.device();
    Ok((Some(Mutex::new(executor)), name))
}

/// The features of `items` on `device`; a batch the device cannot take whole (out of memory,
/// over a buffer's limit) is split in halves, down to single items, as `extract`'s batcher
/// splits one. A lost device that its own health check brings back is tried once more.
fn extract_split(
    device: &mut dyn Extractor,
    items: &[&[f32]],
    bins: usize,
) -> Result<FeatureBatch, sonograph_dsp::DeviceError> {
    let mut out = FeatureBatch::new(bins);
    let batch = AudioBatch::from_items(items.iter().copied());
    let error = match device.extract_batch(&batch, &mut out) {
        Ok(()) => return Ok(out),
        Err(e) => e,
    };
    if items.len() > 1 {
        let (a, b) = items.split_at(items.len() / 2);
        let mut first = extract_split(device, a, bins)?;
        first.append(&mut extract_split(device, b, bins)?);
        return Ok(first);
    }
    if device.recover() {
        out.reset(bins);
        device.extract_batch(&batch, &mut out)?;
        return Ok(out);
    }
    Err(error)
}
