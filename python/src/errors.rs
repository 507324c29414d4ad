//! The exceptions sonograph raises, one family under `sonograph.Error`:
//!
//! - `OptionsError` (also a `ValueError`): an option, a spec or an argument that cannot be
//!   used — its name and why;
//! - `InputError` (also a `ValueError`): audio that cannot be read — the file and why;
//! - `DeviceError` (also a `RuntimeError`): a device that cannot run the job;
//! - `ModelError` (also a `RuntimeError`): a model that cannot load or run;
//! - `Error` itself (a `RuntimeError` too) for everything else, a job's own failure included.
//!
//! Each is also the built-in it specialises, so that `except ValueError` keeps working.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

const CLASSES: &str = r#"
class Error(RuntimeError):
    """Every error sonograph raises."""

class OptionsError(Error, ValueError):
    """An option, spec or argument that cannot be used: its name and why."""

class InputError(Error, ValueError):
    """Audio that cannot be read: the file (or array) and why."""

class DeviceError(Error):
    """A device that cannot run the job."""

class ModelError(Error):
    """A model that cannot load or run."""
"#;

const NAMES: [&str; 5] = [
    "Error",
    "OptionsError",
    "InputError",
    "DeviceError",
    "ModelError",
];

static TYPES: PyOnceLock<Vec<Py<PyType>>> = PyOnceLock::new();

fn types(py: Python<'_>) -> &Vec<Py<PyType>> {
    TYPES.get_or_init(py, || {
        let module = PyModule::from_code(
            py,
            &std::ffi::CString::new(CLASSES).expect("no NUL"),
            c"sonograph/errors.py",
            c"sonograph",
        )
        .expect("the exception classes are valid Python");
        NAMES
            .iter()
            .map(|name| {
                let class = module.getattr(*name).expect("defined above");
                class.getattr("__module__").ok();
                class
                    .setattr("__module__", "sonograph")
                    .expect("a class takes __module__");
                class.cast_into::<PyType>().expect("a class").unbind()
            })
            .collect()
    })
}

/// Adds the classes to the module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    for (name, class) in NAMES.iter().zip(types(m.py())) {
        m.add(*name, class.bind(m.py()))?;
    }
    Ok(())
}

fn raise(index: usize, message: String) -> PyErr {
    Python::attach(|py| PyErr::from_type(types(py)[index].bind(py).clone(), message))
}

/// `sonograph.Error`.
pub(crate) fn error(e: impl std::fmt::Display) -> PyErr {
    raise(0, e.to_string())
}

/// `sonograph.OptionsError`.
pub(crate) fn options_error(e: impl std::fmt::Display) -> PyErr {
    raise(1, e.to_string())
}

/// `sonograph.InputError`.
pub(crate) fn input_error(e: impl std::fmt::Display) -> PyErr {
    raise(2, e.to_string())
}

/// `sonograph.DeviceError`, or the bug a kernel that does not compile is.
pub(crate) fn device_error(e: sonograph_gpu::OpenError) -> PyErr {
    match e {
        sonograph_gpu::OpenError::Kernel(_) => error(e),
        e => raise(3, e.to_string()),
    }
}

/// `sonograph.DeviceError` for a device that failed while running.
pub(crate) fn device_failed(e: impl std::fmt::Display) -> PyErr {
    raise(3, e.to_string())
}

/// A job's error as the exception of its kind: a bad option or source is the caller's
/// (`OptionsError`), a file that stops the job `InputError`, a model that cannot load `ModelError`, anything else the job's own
/// failure (`Error`).
pub(crate) fn job_error(e: sonograph_pipeline::JobError) -> PyErr {
    use sonograph_pipeline::JobError;
    let text = crate::python_names(&e.to_string());
    match e {
        JobError::Model(_) => raise(4, text),
        JobError::Input(_) => input_error(text),
        e if e.is_usage() => options_error(text),
        _ => error(text),
    }
}
