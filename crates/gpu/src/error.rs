use thiserror::Error;

/// Errors of the device registry and the memory pool. Extraction itself reports
/// [`sonograph_dsp::DeviceError`] and [`sonograph_dsp::ItemError`], so that every backend
/// fails the same way.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum GpuError {
    /// `--device` named something that is not a device here.
    #[error("no device {0:?}: {1}")]
    NoSuchDevice(String, String),
    /// `--device` could not be parsed.
    #[error("bad device selection {0:?}: expected auto, cpu, gpu or gpu:N")]
    BadSelection(String),
    /// `--gpu-memory` could not be parsed.
    #[error(
        "bad memory budget {0:?}: expected a size such as 6GiB, 512MiB or a share such as 80%"
    )]
    BadBudget(String),
    /// The pool could not place a block under its budget even after releasing its cache.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The GPU backend is not built in or cannot run here.
    #[error("gpu unavailable: {0}")]
    Unavailable(String),
    /// A GPU was asked for from a build without the `gpu` cargo feature.
    #[error("this sonograph was built without GPU support (the `gpu` cargo feature); only the CPU is available")]
    NotBuilt,
    /// A device that cannot be disabled, or that does not exist, was named to be disabled.
    #[error("cannot disable {0}: {1}")]
    CannotDisable(String, String),
}
