//! `auto` by measurement: each device `auto` could choose runs a short batch of the job's own
//! spec, and the fastest wins; a GPU only where it beats the CPU by a margin, so that a job is
//! never slower for having a GPU (on a host whose copies bound the GPU path, the CPU extracts
//! faster). What each device measured is kept per device and spec (a [`CalibrationStore`]: the
//! doors keep it in a file), so that only the first job of a spec on a machine pays for it, and
//! the run says what was measured and why it chose.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use sonograph_dsp::{AudioBatch, Extractor, FeatureBatch, FeatureSpec, Precision};

/// Seconds of audio in the calibration batch (4 clips), enough to keep a device busy beyond
/// its per-batch costs, little enough to take well under a second on any real device.
const CLIPS: usize = 4;
const CLIP_SECONDS: f64 = 15.0;

/// What `auto` measured and chose, for the run's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub measured: Vec<Measured>,
    pub chose: String,
    pub why: String,
}

/// Audio-seconds per second of `executor` on the calibration batch of `spec` (after a run that
/// warms it up), or why it could not run it.
pub fn measure(executor: &mut dyn Extractor, spec: &FeatureSpec) -> Result<f64, String> {
    let n = (CLIP_SECONDS * f64::from(spec.sample_rate)) as usize;
    let clips: Vec<Vec<f32>> = (0..CLIPS)
        .map(|k| {
            (0..n)
                .map(|i| {
                    let t = i as f64 / f64::from(spec.sample_rate);
                    let f = 200.0 + 100.0 * k as f64 + 2000.0 * t / CLIP_SECONDS;
                    (0.3 * (std::f64::consts::TAU * f * t).sin()) as f32
                })
                .collect()
        })
        .collect();
    let batch = AudioBatch::from_items(clips.iter().map(|c| c.as_slice()));
    let mut out = FeatureBatch::new(spec.n_bins());
    let mut best = f64::INFINITY;
    for run in 0..3 {
        out.reset(spec.n_bins());
        let t = Instant::now();
        executor
            .extract_batch(&batch, &mut out)
            .map_err(|e| e.to_string())?;
        if run > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok(CLIPS as f64 * CLIP_SECONDS / best.max(1e-9))
}

/// The decision and where measurements are kept between runs, by [`key`] (the machine's file
/// is `sonograph_io::calibration::FileStore`; this crate does no I/O): device-agnostic, in
/// `sonograph_dsp`, so that the RF jobs' `auto` decides the same way.
pub use sonograph_dsp::calibration::{choose, CalibrationStore, Measured, GPU_MARGIN};

/// A store for this run only.
#[derive(Default)]
pub struct MemoryStore(BTreeMap<String, f64>);

impl CalibrationStore for MemoryStore {
    fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
    fn put(&mut self, key: String, rate: f64) {
        self.0.insert(key, rate);
    }
}

/// The key of a device for a spec: its name (adapter, driver), the precision asked for and the
/// cores, which set the CPU's rate.
pub fn key(name: &str, spec: &FeatureSpec, precision: Precision) -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "{name} | {} | {cores} cores | {}",
        precision.name(),
        spec.spec_id()
    )
}

/// `executor`'s rate on `spec`, from `store` or measured now (and stored).
pub fn rate_of(
    id: &str,
    executor: &mut dyn Extractor,
    spec: &FeatureSpec,
    precision: Precision,
    store: &mut dyn CalibrationStore,
) -> Result<Measured, String> {
    let name = executor.device();
    let key = key(&name, spec, precision);
    if let Some(rate) = store.get(&key) {
        return Ok(Measured {
            id: id.into(),
            name,
            audio_seconds_per_second: rate,
            cached: true,
        });
    }
    let rate = measure(executor, spec)?;
    store.put(key, rate);
    Ok(Measured {
        id: id.into(),
        name,
        audio_seconds_per_second: rate,
        cached: false,
    })
}
