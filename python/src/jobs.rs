//! The dataset jobs from Python: `extract`, `rf_features`, `synth_iq` and `transcribe`, and
//! `plan` for any of them. Each takes its command's options as keyword arguments (by their
//! flag names with underscores), converted directly to the pipeline's options type that the
//! CLI and the service use, and planned as the CLI plans them (the shard of a Kubernetes
//! Indexed Job or a Slurm array from the environment). A job runs on its own thread; Ctrl-C
//! cancels it at its next boundary, its output resumable.

use std::path::PathBuf;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use sonograph_pipeline::request::{JobRequest, PlannedJob, KINDS};
use sonograph_pipeline::{JobOptions, LiveJob};

use crate::errors;
use crate::{convert, from_json, options_error, plain};

/// The request of `kind` from the keyword arguments (converted directly to the kind's options
/// type, so that NaN and infinity arrive as such) and the paths, as given (which may not be
/// UTF-8), checked.
fn request_of(
    py: Python<'_>,
    kind: &str,
    paths: &[(&str, Option<PathBuf>)],
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<JobRequest> {
    if !KINDS.contains(&kind) {
        return Err(options_error(format!(
            "kind: {kind:?} is not a job; the kinds are {}",
            KINDS.join(", ")
        )));
    }
    for (name, path) in paths {
        let takes = match *name {
            "source" => kind != "synth-iq",
            "model" => kind == "transcribe",
            _ => true,
        };
        if path.is_some() && !takes {
            return Err(options_error(format!("a {kind} job takes no {name}")));
        }
    }
    // The keyword arguments by their options' names (`batch_items` is `batch-items`).
    let named = PyDict::new(py);
    for (key, value) in options.into_iter().flat_map(|o| o.iter()) {
        let key: String = key.extract()?;
        named.set_item(key.replace('_', "-"), plain(py, &value)?)?;
    }
    // Placeholders, replaced below by the paths as given.
    for (name, path) in paths {
        if path.is_some() {
            named.set_item(*name, ".")?;
        }
    }
    let named = named.as_any();
    let mut request = match kind {
        "extract" => JobRequest::Extract(convert(named)?),
        "rf-features" => JobRequest::RfFeatures(convert(named)?),
        "synth-iq" => JobRequest::SynthIq(convert(named)?),
        _ => JobRequest::Transcribe(convert(named)?),
    };
    for (name, path) in paths {
        let Some(path) = path.clone() else { continue };
        match (&mut request, *name) {
            (JobRequest::Extract(o), "source") => o.source = path,
            (JobRequest::Extract(o), "out") => o.out = path,
            (JobRequest::RfFeatures(o), "source") => o.source = path,
            (JobRequest::RfFeatures(o), "out") => o.out = path,
            (JobRequest::SynthIq(o), "out") => o.out = path,
            (JobRequest::Transcribe(o), "source") => o.source = path,
            (JobRequest::Transcribe(o), "out") => o.out = path,
            (JobRequest::Transcribe(o), "model") => o.model = Some(path),
            _ => unreachable!("the paths each kind takes are checked above"),
        }
    }
    Ok(request)
}

fn plan_request(request: &JobRequest) -> PyResult<PlannedJob> {
    let planned = request
        .plan(|k| std::env::var(k).ok())
        .map_err(|e| options_error(python_names(&e.to_string())))?;
    if let PlannedJob::Extract(plan) = &planned {
        sonograph_gpu::JobDevices::parse(&plan.device, plan.gpu_memory.as_deref())
            .map_err(|e| options_error(python_names(&e)))?;
    }
    Ok(planned)
}

/// The job a call would run, as a dict: every default filled in and every option resolved
/// (what the command's `--plan` prints and the service's `POST /api/v1/plan` answers for the
/// same options). `kind` is "extract" (the default), "rf-features", "synth-iq" (which takes
/// no source) or "transcribe" (whose model is an option). Nothing runs.
#[pyfunction]
#[pyo3(signature = (source=None, out=None, *, kind="extract", **options))]
pub(crate) fn plan<'py>(
    py: Python<'py>,
    source: Option<PathBuf>,
    out: Option<PathBuf>,
    kind: &str,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = request_of(py, kind, &[("source", source), ("out", out)], options)?;
    from_json(py, &plan_request(&request)?.describe().to_string())
}

/// Runs `job` on its own thread; this one checks for Ctrl-C every tenth of a second and then
/// cancels the job at its next boundary (its output resumable, as a server's). The job's
/// report comes back as a dict.
fn run_job<'py>(
    py: Python<'py>,
    name: &str,
    job: impl FnOnce(std::sync::Arc<LiveJob>) -> PyResult<String> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>> {
    let live = LiveJob::new();
    let job_live = live.clone();
    let job = std::thread::Builder::new()
        .name(format!("sonograph-{name}"))
        .spawn(move || job(job_live))
        .map_err(errors::error)?;
    while !job.is_finished() {
        py.detach(|| std::thread::sleep(std::time::Duration::from_millis(100)));
        if let Err(interrupt) = py.check_signals() {
            live.cancel();
            let _ = py.detach(|| job.join());
            return Err(interrupt);
        }
    }
    let report = match job.join() {
        Ok(result) => result?,
        Err(_) => return Err(errors::error("internal error: the job panicked")),
    };
    from_json(py, &report)
}

fn report_json(report: &impl serde::Serialize) -> PyResult<String> {
    serde_json::to_string(report).map_err(errors::error)
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
pub(crate) fn extract<'py>(
    py: Python<'py>,
    source: PathBuf,
    out: PathBuf,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = request_of(
        py,
        "extract",
        &[("source", Some(source)), ("out", Some(out))],
        options,
    )?;
    let PlannedJob::Extract(plan) = plan_request(&request)? else {
        unreachable!("an extract request plans an extract job")
    };
    let devices = sonograph_gpu::JobDevices::parse(&plan.device, plan.gpu_memory.as_deref())
        .map_err(|e| options_error(python_names(&e)))?;
    let disabled = sonograph_gpu::disabled_devices();
    run_job(py, "extract", move |live| {
        let mut plan = *plan;
        let opened = devices
            .open(
                &plan.config.spec,
                plan.config.precision,
                &disabled,
                &mut sonograph_io::calibration::FileStore::open(),
            )
            .map_err(errors::device_error)?;
        for note in opened.notes {
            eprintln!("sonograph: warning: {note}");
        }
        if let Some(c) = &opened.calibration {
            plan.config.device_choice = serde_json::to_value(c).ok();
        }
        let outcome =
            sonograph_pipeline::run_live(&plan.config, opened.executors, Default::default(), live)
                .map_err(errors::job_error)?;
        report_json(outcome.report())
    })
}

/// The one device of an RF job (None: the CPU), its probe's warnings printed.
fn rf_device(device: &str) -> PyResult<Option<sonograph_gpu::rf::RfGpu>> {
    let (gpu, notes) = sonograph_gpu::open_rf_device(device).map_err(options_error)?;
    for note in notes {
        eprintln!("sonograph: warning: {note}");
    }
    Ok(gpu)
}

/// Runs an rf-features job: the RF features of IQ recordings (`source`: a SigMF recording, a
/// .sigmf archive, a raw IQ file, or a folder of them) as rows of Parquet parts in `out`,
/// resumable and sharded as `sonograph rf-features` (the same options, by their Python
/// names: `sample_rate`, `format`, `window_ms`, `psd`, `nperseg`, `device`, ...). Returns the
/// job's report as a dict; a recording that cannot be read is a failure in it.
#[pyfunction]
#[pyo3(signature = (source, out, **options))]
pub(crate) fn rf_features<'py>(
    py: Python<'py>,
    source: PathBuf,
    out: PathBuf,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = request_of(
        py,
        "rf-features",
        &[("source", Some(source)), ("out", Some(out))],
        options,
    )?;
    let PlannedJob::RfFeatures(plan) = plan_request(&request)? else {
        unreachable!("an rf-features request plans an rf-features job")
    };
    let device =
        rf_device(&plan.device)?.map(|g| Box::new(g) as Box<dyn sonograph_rf::rows::PsdDevice>);
    run_job(py, "rf-features", move |live| {
        let outcome =
            sonograph_pipeline::rf_features::run_rf_features_live(&plan.job, device, &live)
                .map_err(errors::job_error)?;
        report_json(outcome.report())
    })
}

/// Runs a synth-iq job: `count` synthetic IQ recordings (a function of the spec, `seed` and
/// each one's index) written to `out` as SigMF pairs or Parquet rows, resumable and sharded as
/// `sonograph synth-iq` (the same options by their Python names: `spec` (a dict or a file),
/// `samples`, `duration_ms`, `modulation`, `snr_db`, `format`, `datatype`, `device`, ...).
/// Returns the run's report as a dict.
#[pyfunction]
#[pyo3(signature = (out, count, **options))]
pub(crate) fn synth_iq<'py>(
    py: Python<'py>,
    out: PathBuf,
    count: u64,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let options = match options {
        Some(o) => o.copy()?,
        None => PyDict::new(py),
    };
    options.set_item("count", count)?;
    let request = request_of(py, "synth-iq", &[("out", Some(out))], Some(&options))?;
    let PlannedJob::SynthIq(plan) = plan_request(&request)? else {
        unreachable!("a synth-iq request plans a synth-iq job")
    };
    let gpu = rf_device(&plan.device)?;
    run_job(py, "synth-iq", move |live| {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(plan.workers)
            .build()
            .map_err(errors::error)?;
        let mut noise = gpu.map(|g| Box::new(g) as Box<dyn sonograph_rf::NoiseDevice>);
        if plan.device == "auto" {
            if let Some(gpu) = noise.take() {
                let synth = sonograph_rf::Synth::new(&plan.job.spec).map_err(options_error)?;
                let (chosen, why) = sonograph_pipeline::synth_iq::choose_noise_device(
                    &synth,
                    plan.job.seed,
                    gpu,
                    &pool,
                    &mut sonograph_io::calibration::FileStore::open(),
                )
                .map_err(errors::job_error)?;
                eprintln!(
                    "sonograph: auto chose {} for the noise stage: {why}",
                    chosen.as_ref().map_or_else(|| "cpu".into(), |g| g.name())
                );
                noise = chosen;
            }
        }
        let report =
            sonograph_pipeline::synth_iq::run_synth_iq_live(&plan.job, noise, &pool, &live)
                .map_err(errors::job_error)?;
        report_json(&report)
    })
}

/// Runs a transcribe job: every item of `source` (an audio file, a folder, a manifest)
/// through the ASR export in `model` (a NeMo Parakeet/FastConformer folder as onnx-asr reads
/// it), the transcripts written to `out` as parts of JSON lines or Parquet, resumable and
/// sharded as `sonograph transcribe` (the same options by their Python names: `segment`,
/// `window_s`, `batch`, `threshold`, ...). Needs onnxruntime (`pip install onnxruntime`).
/// Returns the job's report as a dict.
#[pyfunction]
#[pyo3(signature = (source, out, model, **options))]
pub(crate) fn transcribe<'py>(
    py: Python<'py>,
    source: PathBuf,
    out: PathBuf,
    model: PathBuf,
    options: Option<&Bound<'py, PyDict>>,
) -> PyResult<Bound<'py, PyAny>> {
    let request = request_of(
        py,
        "transcribe",
        &[
            ("source", Some(source)),
            ("out", Some(out)),
            ("model", Some(model)),
        ],
        options,
    )?;
    let PlannedJob::Transcribe(job) = plan_request(&request)? else {
        unreachable!("a transcribe request plans a transcribe job")
    };
    run_job(py, "transcribe", move |live| {
        let outcome = sonograph_pipeline::transcribe::run_transcribe_live(&job, &live)
            .map_err(errors::job_error)?;
        report_json(outcome.report())
    })
}

/// `text` with the options named as Python spells them (`batch_items`, not `batch-items`):
/// each option name of every kind of job, where it stands as a word.
pub(crate) fn python_names(text: &str) -> String {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let names = NAMES.get_or_init(|| {
        let kinds = [
            serde_json::to_value(JobOptions::default()),
            serde_json::to_value(sonograph_pipeline::rf_options::RfFeaturesOptions::default()),
            serde_json::to_value(sonograph_pipeline::rf_options::SynthIqOptions::default()),
            serde_json::to_value(
                sonograph_pipeline::transcribe_options::TranscribeOptions::default(),
            ),
        ];
        let mut names: Vec<String> = kinds
            .iter()
            .flat_map(|k| {
                k.as_ref()
                    .expect("options serialise")
                    .as_object()
                    .expect("a struct")
                    .keys()
                    .cloned()
            })
            .filter(|k| k.contains('-'))
            .collect();
        names.sort();
        names.dedup();
        // Longer first: `max-speech-s` before a name it contains.
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        names
    });
    let mut out = text.to_string();
    for name in names {
        let mut from = 0;
        while let Some(at) = out[from..].find(name.as_str()) {
            let (start, end) = (from + at, from + at + name.len());
            let word =
                |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_');
            if !word(out[..start].chars().next_back()) && !word(out[end..].chars().next()) {
                out.replace_range(start..end, &name.replace('-', "_"));
            }
            from = end;
        }
    }
    out
}
