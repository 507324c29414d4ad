//! `auto` by measurement: each device `auto` could choose runs a short batch of the job's own
//! spec, and the fastest wins; a GPU only where it beats the CPU by a margin, so that a job is
//! never slower for having a GPU (on a host whose copies bound the GPU path, the CPU extracts
//! faster). What each device measured is kept per device and spec (a [`CalibrationStore`]: the
//! doors keep it in a file), so that only the first job of a spec on a machine pays for it, and
//! the run says what was measured and why it chose.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sonograph_dsp::{AudioBatch, Extractor, FeatureBatch, FeatureSpec, Precision};

/// A GPU must extract this many times as fast as the CPU to be chosen over it.
pub const GPU_MARGIN: f64 = 1.2;

/// Seconds of audio in the calibration batch (4 clips), enough to keep a device busy beyond
/// its per-batch costs, little enough to take well under a second on any real device.
const CLIPS: usize = 4;
const CLIP_SECONDS: f64 = 15.0;

/// What one device measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// `cpu`, `gpu:N`.
    pub id: String,
    /// The device as it names itself (adapter, driver, scalar).
    pub name: String,
    pub audio_seconds_per_second: f64,
    /// From the cache rather than measured now.
    pub cached: bool,
}

/// What `auto` measured and chose, for the run's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub measured: Vec<Measured>,
    pub chose: String,
    pub why: String,
}

/// The device to keep among `measured` (the CPU first): the fastest GPU where it is at least
/// [`GPU_MARGIN`] times the CPU, else the CPU; with the reason, in words.
pub fn choose(measured: &[Measured]) -> (usize, String) {
    let rate = |i: usize| measured[i].audio_seconds_per_second;
    let Some(cpu) = measured.iter().position(|m| m.id == "cpu") else {
        return (0, "the only device".into());
    };
    let best_gpu = (0..measured.len())
        .filter(|&i| i != cpu)
        .max_by(|&a, &b| rate(a).total_cmp(&rate(b)));
    match best_gpu {
        Some(g) if rate(g) >= GPU_MARGIN * rate(cpu) => (
            g,
            format!(
                "{} ran {:.0} s of signal per s, {:.1}x the CPU's {:.0}",
                measured[g].id,
                rate(g),
                rate(g) / rate(cpu),
                rate(cpu)
            ),
        ),
        Some(g) => (
            cpu,
            format!(
                "the CPU ran {:.0} s of signal per s and {} {:.0} ({:.2}x, under the {GPU_MARGIN}x \
                 a GPU must reach)",
                rate(cpu),
                measured[g].id,
                rate(g),
                rate(g) / rate(cpu)
            ),
        ),
        None => (cpu, "no GPU to measure".into()),
    }
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

/// Where measurements are kept between runs, by [`key`] (the machine's file is
/// `sonograph_io::calibration::FileStore`; this crate does no I/O).
pub use sonograph_dsp::CalibrationStore;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, rate: f64) -> Measured {
        Measured {
            id: id.into(),
            name: id.into(),
            audio_seconds_per_second: rate,
            cached: false,
        }
    }

    #[test]
    fn a_gpu_is_chosen_only_where_it_beats_the_cpu_by_the_margin() {
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 5000.0), m("gpu:1", 3000.0)]);
        assert_eq!(i, 1, "{why}");
        assert!(why.contains("5.0x the CPU"), "{why}");
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 1100.0)]);
        assert_eq!(i, 0, "{why}");
        assert!(why.contains("under the 1.2x"), "{why}");
        let (i, why) = choose(&[m("cpu", 1000.0), m("gpu:0", 400.0)]);
        assert_eq!(i, 0, "{why}");
        assert_eq!(choose(&[m("cpu", 1.0)]).0, 0);
    }
}
