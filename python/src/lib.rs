//! `import sonograph`: the features of arrays and files, exactly as the CLI computes them, and
//! the dataset jobs (`extract`, `rf_features`, `synth_iq`, `transcribe`: the same jobs as the
//! CLI's commands, with the same options by name; see `jobs`). Computation runs with the GIL released; errors are `ValueError`s that say
//! what was wrong, in one line.

mod errors;
mod jobs;
mod loader;

use std::path::PathBuf;

use numpy::{AllowTypeChange, IntoPyArray, PyArray2, PyArrayLike1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sonograph_dsp::{CpuExtractor, FeatureSpec, Precision};
use sonograph_io::resample::StreamResampler;
use sonograph_pipeline::SpecChoice;

pub(crate) use errors::{input_error, options_error};
pub(crate) use jobs::python_names;

/// A Python value as serde sees it: a numpy scalar as the Python number it holds, a path
/// (`os.PathLike`) as its string.
pub(crate) fn plain<'py>(
    py: Python<'py>,
    value: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    if value.hasattr("dtype")? && value.hasattr("item")? {
        return value.call_method0("item");
    }
    if value.hasattr("__fspath__")? {
        return py.import("os")?.call_method1("fspath", (value,));
    }
    Ok(value.clone())
}

/// `T` from a Python object (a dict of options by their Python names), converted directly
/// (pythonize); an error names the option as Python spells it.
pub(crate) fn convert<'py, T: serde::de::DeserializeOwned>(
    value: &Bound<'py, PyAny>,
) -> PyResult<T> {
    let mut de = pythonize::Depythonizer::from_object(value);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let option = python_names(&e.path().to_string());
        let reason = python_names(&e.inner().to_string());
        match option.as_str() {
            "." => options_error(reason),
            _ => options_error(format!("{option}: {reason}")),
        }
    })
}

pub(crate) fn from_json<'py>(py: Python<'py>, value: &str) -> PyResult<Bound<'py, PyAny>> {
    py.import("json")?.call_method1("loads", (value,))
}

/// The spec (a preset by name, or a spec as `preset()` returns it or a spec file's path;
/// Whisper's when neither) and the precision to compute it in: what `extract`'s options and
/// the CLI's `--preset`, `--spec` and `--precision` choose, chosen the same way.
pub(crate) fn spec_of<'py>(
    py: Python<'py>,
    preset: Option<&str>,
    spec: Option<&Bound<'py, PyAny>>,
    precision: &str,
) -> PyResult<(FeatureSpec, Precision)> {
    if preset.is_some() && spec.is_some() {
        return Err(options_error("give preset or spec, not both"));
    }
    let choice = PyDict::new(py);
    choice.set_item("preset", preset)?;
    choice.set_item("spec", spec.map(|s| plain(py, s)).transpose()?)?;
    choice.set_item("precision", precision)?;
    let choice: SpecChoice = convert(choice.as_any())?;
    let (spec, precision) = choice.resolve().map_err(options_error)?;
    if spec.is_complex() {
        return Err(options_error(
            "an IQ spec takes complex recordings, not audio: run extract on them",
        ));
    }
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
    let spec = FeatureSpec::preset(name).map_err(options_error)?;
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
    let samples = mono_samples(samples, "samples")?;
    let bins = spec.n_bins();
    let rows = py
        .detach(move || features_at(&spec, precision, samples, sample_rate))
        .map_err(input_error)?;
    to_array(py, rows, bins)
}

/// The features of a batch of clips, computed side by side on every core: a list of arrays
/// (all at `sample_rate`) or of `{"array", "sampling_rate"}` dicts (a Hugging Face `datasets`
/// audio column), as a list of float32 arrays, [frames, bins] each, or [bins, frames] with
/// `layout="bins_frames"` (transformers' `input_features`). Each is what `features` gives for
/// its clip; a clip that cannot be computed fails the call, naming its index.
#[pyfunction]
#[pyo3(signature = (clips, sample_rate=None, preset=None, *, spec=None, precision="auto", layout="frames_bins"))]
fn features_batch<'py>(
    py: Python<'py>,
    clips: &Bound<'py, PyAny>,
    sample_rate: Option<u32>,
    preset: Option<&str>,
    spec: Option<Bound<'py, PyAny>>,
    precision: &str,
    layout: &str,
) -> PyResult<Bound<'py, PyList>> {
    let (spec, precision) = spec_of(py, preset, spec.as_ref(), precision)?;
    let bins_first = match layout {
        "frames_bins" => false,
        "bins_frames" => true,
        other => {
            return Err(options_error(format!(
                "layout {other:?}: \"frames_bins\" or \"bins_frames\""
            )))
        }
    };
    let mut items = Vec::new();
    for (i, clip) in clips.try_iter()?.enumerate() {
        let clip = clip?;
        let at = |what: &str| format!("clip {i}: {what}");
        let (samples, rate) = match clip.cast::<PyDict>() {
            Ok(d) => {
                let get = |key: &str| {
                    d.get_item(key)?.ok_or_else(|| {
                        input_error(at(&format!("a dict without {key:?} (datasets' audio has \"array\" and \"sampling_rate\")")))
                    })
                };
                let rate: u32 = get("sampling_rate")?
                    .extract()
                    .map_err(|_| input_error(at("sampling_rate is not a whole number")))?;
                (get("array")?, rate)
            }
            Err(_) => {
                let rate = sample_rate.ok_or_else(|| {
                    options_error(at(
                        "an array without sample_rate: give sample_rate, or clips as {\"array\", \"sampling_rate\"} dicts",
                    ))
                })?;
                (clip, rate)
            }
        };
        check_rate(rate).map_err(|e| options_error(at(&e.to_string())))?;
        items.push((mono_samples(&samples, &at("array"))?, rate));
    }
    let bins = spec.n_bins();
    let pool = batch_pool()?;
    let computed: Vec<Result<Vec<f32>, String>> = py.detach(|| {
        use rayon::prelude::*;
        pool.install(|| {
            items
                .into_par_iter()
                .map(|(samples, rate)| features_at(&spec, precision, samples, rate))
                .collect()
        })
    });
    let list = PyList::empty(py);
    for (i, rows) in computed.into_iter().enumerate() {
        let rows = rows.map_err(|e| input_error(format!("clip {i}: {e}")))?;
        let array = to_array(py, rows, bins)?;
        if bins_first {
            list.append(array.transpose()?.call_method0("copy")?)?;
        } else {
            list.append(array)?;
        }
    }
    Ok(list)
}

/// The pool `features_batch` computes on, one per process. rayon's global pool does not
/// survive fork(): a child (`datasets.map(num_proc=N)`, a torch DataLoader worker, a
/// multiprocessing pool) inherits its state but none of its threads, and its first parallel
/// call waited on them forever. A process that finds a pool made before it was forked makes its
/// own.
fn batch_pool() -> PyResult<std::sync::Arc<rayon::ThreadPool>> {
    use std::sync::{Arc, Mutex};
    static POOL: Mutex<Option<(u32, Arc<rayon::ThreadPool>)>> = Mutex::new(None);
    let pid = std::process::id();
    let mut pool = POOL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((owner, made)) = pool.as_ref() {
        if *owner == pid {
            return Ok(made.clone());
        }
    }
    let made = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("sonograph-features-{i}"))
            .build()
            .map_err(errors::error)?,
    );
    if let Some((_, inherited)) = pool.replace((pid, made.clone())) {
        // Its threads stayed in the parent: dropping it here would signal workers that do not
        // exist in this process.
        std::mem::forget(inherited);
    }
    Ok(made)
}

/// One channel of audio from a Python object: a 1-D array of floats (any float dtype,
/// converted to float32); integers are refused, as their scale is not known.
fn mono_samples(samples: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<f32>> {
    if let Ok(kind) = samples.getattr("dtype").and_then(|d| d.getattr("kind")) {
        if matches!(kind.extract::<String>()?.as_str(), "i" | "u" | "b") {
            return Err(input_error(format!(
                "{what} of dtype {}: give floats in [-1, 1] (PCM / 32768 for int16)",
                samples.getattr("dtype")?
            )));
        }
    }
    Ok(samples
        .extract::<PyArrayLike1<'_, f32, AllowTypeChange>>()
        .map_err(|_| {
            let shape = samples
                .getattr("shape")
                .map_or_else(|_| "no array".to_string(), |s| s.to_string());
            input_error(format!(
                "{what}: one channel of audio, a 1-D array of numbers; got shape {shape}"
            ))
        })?
        .as_array()
        .to_vec())
}

/// `samples` at `rate` resampled to the spec's rate (as the CLI resamples decoded files), then
/// their features.
fn features_at(
    spec: &FeatureSpec,
    precision: Precision,
    samples: Vec<f32>,
    rate: u32,
) -> Result<Vec<f32>, String> {
    let target = spec.sample_rate;
    let samples = if rate == target {
        samples
    } else {
        let mut r =
            StreamResampler::new(rate, target).map_err(|e| format!("sample_rate {rate}: {e}"))?;
        let mut out = Vec::with_capacity(
            (samples.len() as f64 * f64::from(target) / f64::from(rate)) as usize + 1,
        );
        r.process(&samples, &mut out);
        r.finish(&mut out);
        out
    };
    compute(spec, precision, &samples)
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
        .map_err(input_error)?;
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
        .map_err(input_error)?;
    Ok(samples.into_pyarray(py))
}

/// A rate the decoder would take (a resampler to a huge prime rate would not fit in memory).
fn check_rate(sample_rate: u32) -> PyResult<()> {
    let most = sonograph_io::decode::Limits::default().max_sample_rate;
    if (1000..=most).contains(&sample_rate) {
        Ok(())
    } else {
        Err(options_error(format!(
            "sample_rate {sample_rate}: from 1000 to {most} Hz"
        )))
    }
}

pub(crate) use sonograph_pipeline::named_error;

#[pymodule]
#[pyo3(name = "_native")]
fn sonograph(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(presets, m)?)?;
    m.add_function(wrap_pyfunction!(preset, m)?)?;
    m.add_function(wrap_pyfunction!(features, m)?)?;
    m.add_function(wrap_pyfunction!(features_batch, m)?)?;
    m.add_function(wrap_pyfunction!(load, m)?)?;
    m.add_function(wrap_pyfunction!(decode, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::extract, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::rf_features, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::synth_iq, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::transcribe, m)?)?;
    m.add_function(wrap_pyfunction!(jobs::plan, m)?)?;
    m.add_class::<loader::Loader>()?;
    errors::register(m)?;
    Ok(())
}
