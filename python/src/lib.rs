//! `import sonograph`: the features of arrays and files, exactly as the CLI computes them, and
//! `extract` jobs (the same job as `sonograph extract` and the server's jobs API, with the same
//! options by name). Computation runs with the GIL released; errors are `ValueError`s that say
//! what was wrong, in one line.

mod loader;

use std::path::{Path, PathBuf};

use numpy::{AllowTypeChange, IntoPyArray, PyArray2, PyArrayLike1, PyArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sonograph_dsp::{CpuExtractor, FeatureSpec, Precision};
use sonograph_io::resample::StreamResampler;
use sonograph_server::JobRequest;

pub(crate) fn value_error(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// A Python object as JSON, through Python's own `json` (numbers, strings, lists, dicts;
/// paths as strings; numpy scalars as numbers), or a `ValueError` naming `what`.
fn to_json(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let value = if value.hasattr("dtype")? {
        // A numpy scalar, as the Python number it holds.
        value
            .call_method0("item")
            .map_err(|e| value_error(format!("{what}: {}", e.value(py))))?
    } else {
        value.clone()
    };
    let kwargs = PyDict::new(py);
    kwargs.set_item("default", py.import("os")?.getattr("fspath")?)?;
    kwargs.set_item("allow_nan", false)?;
    let text: String = py
        .import("json")?
        .call_method("dumps", (value,), Some(&kwargs))
        .map_err(|e| value_error(format!("{what}: {}", e.value(py))))?
        .extract()?;
    serde_json::from_str(&text).map_err(|e| value_error(format!("{what}: {e}")))
}

fn from_json<'py>(py: Python<'py>, value: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (value,))
}

/// The spec (a preset by name, or a spec as `preset()` returns it; Whisper's when neither) and
/// the precision to compute it in (`auto`: the spec's own).
pub(crate) fn spec_of(
    py: Python<'_>,
    preset: Option<&str>,
    spec: Option<&Bound<'_, PyAny>>,
    precision: &str,
) -> PyResult<(FeatureSpec, Precision)> {
    let spec = match (preset, spec) {
        (Some(_), Some(_)) => return Err(value_error("give preset or spec, not both")),
        (Some(name), None) => FeatureSpec::preset(name).map_err(value_error)?,
        (None, Some(s)) => {
            let json = to_json(py, "spec", s)?.to_string();
            FeatureSpec::from_json(&json).map_err(|e| value_error(format!("spec: {e}")))?
        }
        (None, None) => FeatureSpec::preset("whisper").map_err(value_error)?,
    };
    spec.validate()
        .map_err(|e| value_error(format!("spec: {e}")))?;
    if spec.is_complex() {
        return Err(value_error(
            "an IQ spec takes complex recordings, not audio: run extract on them",
        ));
    }
    let precision = match precision {
        "auto" => spec.default_precision(),
        "f32" => Precision::F32,
        "f64" => Precision::F64,
        other => {
            return Err(value_error(format!(
                "precision {other:?}: auto, f32 or f64"
            )))
        }
    };
    Ok((spec, precision))
}

/// The features of `samples` (at the spec's rate) as rows of `spec.n_bins()` values.
fn compute(spec: &FeatureSpec, precision: Precision, samples: &[f32]) -> Result<Vec<f32>, String> {
    let mut extractor = CpuExtractor::with_precision(spec, precision).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    extractor
        .extract(samples, &mut out)
        .map_err(|e| e.to_string())?;
    Ok(out)
}

fn to_array<'py>(
    py: Python<'py>,
    rows: Vec<f32>,
    bins: usize,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let frames = rows.len() / bins;
    rows.into_pyarray(py).reshape([frames, bins])
}

/// The names of the presets, in the order `sonograph presets` lists them.
#[pyfunction]
fn presets() -> Vec<&'static str> {
    FeatureSpec::presets().iter().map(|p| p.name).collect()
}

/// A preset's spec as a dict (every parameter explicit); `features(..., spec=...)` takes it
/// back, changed or not.
#[pyfunction]
fn preset<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let spec = FeatureSpec::preset(name).map_err(value_error)?;
    from_json(py, &spec.to_json())
}

/// The features of mono audio `samples` (any real dtype, converted to float32) at
/// `sample_rate` Hz, as a float32 array [frames, bins]: what `sonograph features` writes for
/// the same samples. Audio at another rate than the spec's is resampled as the CLI resamples
/// decoded files.
#[pyfunction]
#[pyo3(signature = (samples, sample_rate, preset=None, *, spec=None, precision="auto"))]
fn features<'py>(
    py: Python<'py>,
    samples: &Bound<'py, PyAny>,
    sample_rate: u32,
    preset: Option<&str>,
    spec: Option<Bound<'py, PyAny>>,
    precision: &str,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let (spec, precision) = spec_of(py, preset, spec.as_ref(), precision)?;
    check_rate(sample_rate)?;
    if let Ok(kind) = samples.getattr("dtype").and_then(|d| d.getattr("kind")) {
        if matches!(kind.extract::<String>()?.as_str(), "i" | "u" | "b") {
            return Err(value_error(format!(
                "samples of dtype {}: give floats in [-1, 1] (PCM / 32768 for int16)",
                samples.getattr("dtype")?
            )));
        }
    }
    let samples = samples
        .extract::<PyArrayLike1<'py, f32, AllowTypeChange>>()
        .map_err(|_| {
            let shape = samples
                .getattr("shape")
                .map_or_else(|_| "no array".to_string(), |s| s.to_string());
            value_error(format!(
                "samples: one channel of audio, a 1-D array of numbers; got shape {shape}"
            ))
        })?
        .as_array()
        .to_vec();
    let (target, bins) = (spec.sample_rate, spec.n_bins());
    let rows = py
        .detach(move || {
            let samples = if sample_rate == target {
                samples
            } else {
                let mut r = StreamResampler::new(sample_rate, target)
                    .map_err(|e| format!("sample_rate {sample_rate}: {e}"))?;
                let mut out = Vec::with_capacity(
                    (samples.len() as f64 * f64::from(target) / f64::from(sample_rate)) as usize
                        + 1,
                );
                r.process(&samples, &mut out);
                r.finish(&mut out);
                out
            };
            compute(&spec, precision, &samples)
        })
        .map_err(value_error)?;
    to_array(py, rows, bins)
}

/// The features of an audio file (decoded, channels mixed to mono, resampled to the spec's
/// rate), as a float32 array [frames, bins]: what `sonograph features FILE` writes.
#[pyfunction]
#[pyo3(signature = (path, preset=None, *, spec=None, precision="auto"))]
fn load<'py>(
    py: Python<'py>,
    path: PathBuf,
    preset: Option<&str>,
    spec: Option<Bound<'py, PyAny>>,
    precision: &str,
) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let (spec, precision) = spec_of(py, preset, spec.as_ref(), precision)?;
    let bins = spec.n_bins();
    let rows = py
        .detach(move || {
            let named = |e: String| named_error(&path, e);
            let samples = sonograph_io::decode_mono(&path, &Default::default(), spec.sample_rate)
                .map_err(|e| named(e.to_string()))?;
            compute(&spec, precision, &samples).map_err(named)
        })
        .map_err(value_error)?;
    to_array(py, rows, bins)
}

/// An audio file's samples as sonograph decodes them for its features: channels mixed to mono,
/// resampled to `sample_rate`, from `offset` seconds for `duration` seconds (to the end when
/// `None`), as float32.
#[pyfunction]
#[pyo3(signature = (path, sample_rate=16000, *, offset=0.0, duration=None))]
fn decode(
    py: Python<'_>,
    path: PathBuf,
    sample_rate: u32,
    offset: f64,
    duration: Option<f64>,
) -> PyResult<Bound<'_, numpy::PyArray1<f32>>> {
    check_rate(sample_rate)?;
    let opts = sonograph_io::decode::DecodeOptions {
        offset_s: offset,
        duration_s: duration,
        ..Default::default()
    };
    let samples = py
        .detach(|| {
            sonograph_io::decode_mono(&path, &opts, sample_rate)
                .map_err(|e| named_error(&path, e.to_string()))
        })
        .map_err(value_error)?;
    Ok(samples.into_pyarray(py))
}

/// A rate the decoder would take (a resampler to a huge prime rate would not fit in memory).
fn check_rate(sample_rate: u32) -> PyResult<()> {
    let most = sonograph_io::decode::Limits::default().max_sample_rate;
    if (1000..=most).contains(&sample_rate) {
        Ok(())
    } else {
        Err(value_error(format!(
            "sample_rate {sample_rate}: from 1000 to {most} Hz"
        )))
    }
}

/// `reason`, starting with the file's name unless it does already.
pub(crate) fn named_error(path: &Path, reason: String) -> String {
    let name = path.display().to_string();
    if reason.contains(&name) {
        reason
    } else {
        format!("{name}: {reason}")
    }
}

/// Runs an extract job: `source` (a folder, a manifest, a SigMF recording) to sharded Parquet
/// parts in `out`, resumable, on `device` ("auto" by default, as the CLI). The options are
/// `extract`'s by their flag names with underscores (`preset`, `spec`, `precision`, `workers`,
/// `batch_items`, `max_seconds`, `shard_index`, `shard_count`, `dtype`, `part_mb`, `model`,
/// `model_device`, `vad`, ...; the server's jobs API takes the same). Returns the job's report
/// (report.json) as a dict; a job that ran with failed items returns normally, its failures
/// in the report; a job found complete returns the report of the run that completed it.
#[pyfunction]
#[pyo3(signature = (source, out, **options))]
fn extract<'py>(
    py: Python<'py>,
    source: PathBuf,
    out: PathBuf,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let mut request = serde_json::Map::new();
    for (key, value) in options.into_iter().flat_map(|o| o.iter()) {
        let key: String = key.extract()?;
        let json = to_json(py, &key, &value)?;
        request.insert(key.replace('_', "-"), json);
    }
    // Placeholders, replaced below by the paths as given (which may not be UTF-8).
    request.insert("source".into(), ".".into());
    request.insert("out".into(), ".".into());
    let mut request: JobRequest =
        serde_path_to_error::deserialize(serde_json::Value::Object(request)).map_err(|e| {
            let option = e.path().to_string().replace('-', "_");
            let reason = python_names(&e.inner().to_string());
            match option.as_str() {
                "." => value_error(reason),
                _ => value_error(format!("{option}: {reason}")),
            }
        })?;
    request.source = source;
    request.out = out;
    let plan = request.plan("auto").map_err(value_error)?;
    let disabled = sonograph_gpu::disabled_devices();
    // The job runs on its own thread; this one checks for Ctrl-C every tenth of a second and
    // then cancels the job at its next batch boundary (its output resumable, as a server's).
    let live = sonograph_pipeline::LiveJob::new();
    let job_live = live.clone();
    let job = std::thread::Builder::new()
        .name("sonograph-extract".into())
        .spawn(move || -> Result<String, (bool, String)> {
            let (devices, _, notes) = plan.open(&disabled).map_err(|e| (true, e))?;
            for note in notes {
                eprintln!("sonograph: warning: {note}");
            }
            let outcome =
                sonograph_pipeline::run_live(&plan.config, devices, Default::default(), job_live)
                    .map_err(|e| (e.is_usage(), e.to_string()))?;
            serde_json::to_string(outcome.report()).map_err(|e| (false, e.to_string()))
        })
        .map_err(value_error)?;
    while !job.is_finished() {
        py.detach(|| std::thread::sleep(std::time::Duration::from_millis(100)));
        if let Err(interrupt) = py.check_signals() {
            live.cancel();
            let _ = py.detach(|| job.join());
            return Err(interrupt);
        }
    }
    let report = match job.join() {
        Ok(Ok(report)) => report,
        Ok(Err((true, usage))) => return Err(value_error(usage)),
        Ok(Err((false, failure))) => return Err(PyRuntimeError::new_err(failure)),
        Err(_) => return Err(PyRuntimeError::new_err("internal error: the job panicked")),
    };
    from_json(py, &report)
}

/// serde's "unknown field" message with the option names between backticks as Python spells
/// them (`batch_items`, not `batch-items`); any other message as it is (its backticks may
/// quote a value).
fn python_names(text: &str) -> String {
    if !text.starts_with("unknown field") {
        return text.to_string();
    }
    text.split('`')
        .enumerate()
        .map(|(i, part)| match i % 2 {
            1 => part.replace('-', "_"),
            _ => part.to_string(),
        })
        .collect::<Vec<_>>()
        .join("`")
}

#[pymodule]
fn sonograph(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(preset, m)?)?;
    m.add_function(wrap_pyfunction!(features, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(extract, m)?)?;
    m.add_class::<loader::Loader>()?;
    Ok(())
}
