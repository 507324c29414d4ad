//! `sonograph.Loader`: batches of features straight from a corpus for a training loop. Worker
//! threads decode and extract items ahead of the consumer (at most `prefetch` batches ahead),
//! and batches come out in the source's order (or a seeded shuffle of it) whatever order the
//! workers finish in. An item that fails is not dropped in silence: it is left out of its
//! batch and listed in `failures` with its reason.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::exceptions::PyStopIteration;
use pyo3::prelude::*;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use sonograph_dsp::{CpuExtractor, FeatureSpec, Precision};
use sonograph_io::decode::DecodeOptions;
use sonograph_io::manifest::{Entry, SourceItem};

use sonograph_pipeline::bounds;

use crate::{input_error, options_error, spec_of};

/// An item's features (rows of `bins` values), or why it has none.
type Features = Result<Vec<f32>, String>;

/// A source's entry by id: an audio item, or why it cannot be one.
type Listed = (String, Result<SourceItem, String>);

/// Batches of features of every item of a source (a folder, a NeMo JSON-lines or CSV manifest,
/// with offsets and durations), computed on `workers` threads. Iterating gives
/// `(ids, features, lengths)`: the items' ids, a float32 array [batch, frames, bins] zero-padded
/// to the longest item, and each item's frame count (int64). Items that fail are in
/// `failures` as `(id, reason)`.
#[pyclass(module = "sonograph")]
pub struct Loader {
    /// (id, what to decode), in the order the batches give them.
    order: Arc<Vec<Listed>>,
    bins: usize,
    batch_size: usize,
    drop_last: bool,
    /// The next item to give out.
    next: usize,
    /// Items handed to the workers so far (they run up to `window` ahead of `next`).
    handed: usize,
    window: usize,
    tickets: Option<Sender<usize>>,
    done: Receiver<(usize, Features)>,
    /// Items finished out of order, waiting for their turn.
    ready: HashMap<usize, Features>,
    /// The batch being collected: (id, features).
    batch: Vec<(String, Vec<f32>)>,
    workers: Vec<JoinHandle<()>>,
    /// Set when the loader goes: the workers leave the items handed to them undone.
    stop: Arc<AtomicBool>,
    failures: Vec<(String, String)>,
}

#[pymethods]
impl Loader {
    #[new]
    #[pyo3(signature = (source, preset=None, *, spec=None, precision="auto", batch_size=32,
                        workers=None, prefetch=4, shuffle=false, seed=0, drop_last=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: PathBuf,
        preset: Option<&str>,
        spec: Option<Bound<'_, PyAny>>,
        precision: &str,
        batch_size: usize,
        workers: Option<usize>,
        prefetch: usize,
        shuffle: bool,
        seed: u64,
        drop_last: bool,
    ) -> PyResult<Loader> {
        let (spec, precision) = spec_of(py, preset, spec.as_ref(), precision)?;
        // The job's bounds: a loader of a billion threads or items in flight is refused.
        let bounds = [
            ("batch_size", batch_size, bounds::BATCH_ITEMS),
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
        if batch_size * prefetch > bounds::PREFETCHED_ITEMS {
            return Err(options_error(format!(
                "batch_size × prefetch (the items ahead) may be at most {}",
                bounds::PREFETCHED_ITEMS
            )));
        }
        let workers = workers.unwrap_or_else(sonograph_pipeline::defaults::workers);
        let mut order = py.detach(|| list(&source)).map_err(input_error)?;
        if shuffle {
            order.shuffle(&mut rand_chacha::ChaCha8Rng::seed_from_u64(seed));
        }
        let order = Arc::new(order);
        let (tickets, work) = crossbeam_channel::unbounded::<usize>();
        let (finished, done) = crossbeam_channel::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..workers)
            .map(|i| {
                let (work, finished, order, spec, stop) = (
                    work.clone(),
                    finished.clone(),
                    order.clone(),
                    spec.clone(),
                    stop.clone(),
                );
                std::thread::Builder::new()
                    .name(format!("sonograph-loader-{i}"))
                    .spawn(move || worker(&spec, precision, &order, &work, &finished, &stop))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(crate::errors::error)?;
        let mut loader = Loader {
            bins: spec.n_bins(),
            batch_size,
            drop_last,
            next: 0,
            handed: 0,
            window: batch_size.saturating_mul(prefetch),
            tickets: Some(tickets),
            done,
            ready: HashMap::new(),
            batch: Vec::new(),
            workers,
            stop,
            failures: Vec::new(),
            order,
        };
        loader.hand_out();
        Ok(loader)
    }

    /// The number of items in the source (those that fail included).
    fn __len__(&self) -> usize {
        self.order.len()
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        // Kept in `self` while collecting: a batch interrupted by Ctrl-C loses no item, the
        // next call goes on with it.
        while self.batch.len() < self.batch_size && self.next < self.order.len() {
            let index = self.next;
            let features = match self.ready.remove(&index) {
                Some(f) => f,
                None => self.wait_for(py, index)?,
            };
            self.next += 1;
            self.hand_out();
            let id = self.order[index].0.clone();
            match features {
                Ok(r) => self.batch.push((id, r)),
                Err(reason) => self.failures.push((id, reason)),
            }
        }
        if self.batch.is_empty() || (self.drop_last && self.batch.len() < self.batch_size) {
            return Err(PyStopIteration::new_err(()));
        }
        let (ids, rows): (Vec<String>, Vec<Vec<f32>>) =
            std::mem::take(&mut self.batch).into_iter().unzip();
        let frames: Vec<i64> = rows.iter().map(|r| (r.len() / self.bins) as i64).collect();
        let longest = frames.iter().copied().max().unwrap_or(0) as usize;
        let mut padded = vec![0f32; rows.len() * longest * self.bins];
        for (k, r) in rows.iter().enumerate() {
            let at = k * longest * self.bins;
            padded[at..at + r.len()].copy_from_slice(r);
        }
        let features = padded
            .into_pyarray(py)
            .reshape([rows.len(), longest, self.bins])?;
        (ids, features, frames.into_pyarray(py))
            .into_pyobject(py)
            .map(|t| t.into_any())
    }

    /// `(id, reason)` of every item that failed so far.
    #[getter]
    fn failures(&self) -> Vec<(String, String)> {
        self.failures.clone()
    }
}

impl Loader {
    /// Keeps the workers `window` items ahead of the consumer.
    fn hand_out(&mut self) {
        let Some(tickets) = &self.tickets else { return };
        while self.handed < self.order.len() && self.handed < self.next + self.window {
            if tickets.send(self.handed).is_err() {
                return;
            }
            self.handed += 1;
        }
    }

    /// Waits (without the GIL) until item `index` is done, keeping the others that finish
    /// meanwhile.
    fn wait_for(&mut self, py: Python<'_>, index: usize) -> PyResult<Features> {
        loop {
            let done = &self.done;
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
            if i == index {
                return Ok(features);
            }
            self.ready.insert(i, features);
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        // The workers end after the item in hand, leaving the rest of the queue.
        self.stop.store(true, Ordering::Relaxed);
        self.tickets = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The source's entries: audio items, or why an entry cannot be one.
fn list(source: &std::path::Path) -> Result<Vec<Listed>, String> {
    let source = sonograph_io::manifest::Source::open(source).map_err(|e| e.to_string())?;
    let entries = source.entries().map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| e.to_string())?;
        out.push(match entry {
            Entry::Item(item) => (item.id.clone(), Ok(item)),
            Entry::Iq { id, .. } => (id, Err("an IQ recording: run extract on it".into())),
            Entry::Invalid { id, reason } => (id, Err(reason)),
        });
    }
    Ok(out)
}

fn worker(
    spec: &FeatureSpec,
    precision: Precision,
    order: &[Listed],
    work: &Receiver<usize>,
    finished: &Sender<(usize, Features)>,
    stop: &AtomicBool,
) {
    // spec_of checked the spec; were it refused here all the same, every item says why.
    let mut extractor = CpuExtractor::with_precision(spec, precision).map_err(|e| e.to_string());
    for index in work.iter() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let features = match (&order[index].1, &mut extractor) {
            (Err(reason), _) => Err(reason.clone()),
            (Ok(_), Err(why)) => Err(why.clone()),
            (Ok(item), Ok(extractor)) => {
                // A panic fails the item, never the loader: its consumer would wait forever.
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    features_of(item, spec.sample_rate, extractor)
                }))
                .unwrap_or_else(|_| Err(format!("internal error while reading {}", item.id)))
            }
        };
        if finished.send((index, features)).is_err() {
            return;
        }
    }
}

fn features_of(item: &SourceItem, rate: u32, extractor: &mut CpuExtractor) -> Features {
    let opts = DecodeOptions {
        offset_s: item.offset_s,
        duration_s: item.duration_s,
        ..Default::default()
    };
    let named = |e: String| crate::named_error(&item.path, e);
    let samples =
        sonograph_io::decode_mono(&item.path, &opts, rate).map_err(|e| named(e.to_string()))?;
    let mut out = Vec::new();
    extractor
        .extract(&samples, &mut out)
        .map_err(|e| named(e.to_string()))?;
    Ok(out)
}
