//! Errors of the model crate: [`ModelError`] for setting up (the runtime library, model files,
//! bad parameters) and for a VAD run; for the model runner, [`ItemError`] (one item's: recorded,
//! the rest go on) apart from [`DeviceError`] (the whole batch's: split and retried, or moved
//! elsewhere), as `sonograph_dsp` splits them for extractors.

use std::path::PathBuf;

use thiserror::Error;

/// The line that tells a user where the runtime comes from.
pub const INSTALL_HINT: &str = "pip install onnxruntime==1.31.1";

#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ModelError {
    /// No onnxruntime library was found where sonograph looks for one.
    #[error("onnxruntime not found ({looked}): {INSTALL_HINT}, or give the library with --ort-lib PATH or SONOGRAPH_ORT_LIB")]
    RuntimeNotFound { looked: String },
    /// A library was found (or given) but does not load as onnxruntime >= 1.24.
    #[error("{}: cannot load onnxruntime: {reason}", path.display())]
    RuntimeLoad { path: PathBuf, reason: String },
    /// A model file or folder that is missing, unreadable, or not what it should be.
    #[error("{}: {reason}", path.display())]
    Model { path: PathBuf, reason: String },
    /// A parameter out of range or an input the model cannot take (a sample rate, NaN samples).
    #[error("{0}")]
    Invalid(String),
    /// onnxruntime failed while running.
    #[error("onnxruntime: {0}")]
    Runtime(String),
}

/// Why one item of the model runner has no output: recorded with the item, and the rest of
/// its batch goes on (as `sonograph_dsp::ItemError` for features).
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ItemError {
    #[error("the item has no frames")]
    Empty,
    /// The values are not whole frames of the model's mel bins.
    #[error("the item has {values} values, not a whole number of {n_mels}-bin frames")]
    Ragged { values: usize, n_mels: usize },
    #[error("feature value {index} is {value} (NaN or infinite)")]
    NonFinite { index: usize, value: f32 },
    /// Every device that could run it failed.
    #[error("no device could run the model on the item: {0}")]
    NoDevice(String),
}

/// Why the model could not run a batch: the batcher splits it (out of memory), or moves it to
/// another device; none of its items is lost (as `sonograph_dsp::DeviceError`).
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The batch did not fit in memory; a smaller one may.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The model failed otherwise (a lost device, an output that is not what the model
    /// declared); its work must move elsewhere.
    #[error("model failed: {0}")]
    Failed(String),
}

impl DeviceError {
    /// An error of onnxruntime's `run`, out of memory or not. onnxruntime has no error code for
    /// allocation failures: its CPU arena says "Failed to allocate memory", std::bad_alloc
    /// surfaces as "bad_alloc", and the CUDA provider names cudaErrorMemoryAllocation or
    /// "out of memory" (CUDA, cuBLAS and cuDNN alike).
    pub(crate) fn from_ort(e: &ort::Error) -> Self {
        let msg = e.to_string();
        if is_oom_message(&msg) {
            DeviceError::OutOfMemory(msg)
        } else {
            DeviceError::Failed(msg)
        }
    }
}

fn is_oom_message(msg: &str) -> bool {
    let lower = msg.to_ascii_lowercase();
    [
        "failed to allocate memory",
        "bad_alloc",
        "out of memory",
        "cudaerrormemoryallocation",
        "alloc_failed",
    ]
    .iter()
    .any(|p| lower.contains(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages onnxruntime gives for allocation failures (its CPU arena, and the CUDA
    /// provider's) are out of memory; others are failures.
    #[test]
    fn onnxruntime_messages_are_classified() {
        let classify = is_oom_message;
        assert!(classify(
            "Failed to allocate memory for requested buffer of size 1048576"
        ));
        assert!(classify("CUDA failure 2: out of memory ; GPU=0"));
        assert!(classify("CUBLAS failure 3: CUBLAS_STATUS_ALLOC_FAILED"));
        assert!(!classify("Got invalid dimensions for input: audio_signal"));
    }
}
