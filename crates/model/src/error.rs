//! Errors of the model crate: [`ModelError`] for setting up (the runtime library, model files,
//! bad parameters) and for a VAD run; [`RunError`] for a batch of the model runner, whose
//! variants are either one item's (recorded, the rest go on) or the whole batch's (split and
//! retried, or moved elsewhere), as `sonograph_dsp::ExtractError` is for extractors.

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

/// Why an item, or a whole batch, of the model runner has no output.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum RunError {
    /// Item error: no frames.
    #[error("the item has no frames")]
    Empty,
    /// Item error: the values are not whole frames of the model's mel bins.
    #[error("the item has {values} values, not a whole number of {n_mels}-bin frames")]
    Ragged { values: usize, n_mels: usize },
    /// Item error: a NaN or infinite feature value.
    #[error("feature value {index} is {value} (NaN or infinite)")]
    NonFinite { index: usize, value: f32 },
    /// Batch error: the batch did not fit in memory; a smaller one may.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// Batch error: the model failed otherwise (a lost device, an output that is not what the
    /// model declared); its work must move elsewhere.
    #[error("model failed: {0}")]
    Failed(String),
}

impl RunError {
    /// True for errors of one item, which never say anything about the batch or the device.
    pub fn is_item_error(&self) -> bool {
        matches!(
            self,
            RunError::Empty | RunError::Ragged { .. } | RunError::NonFinite { .. }
        )
    }

    /// An error of onnxruntime's `run`, out of memory or not. onnxruntime has no error code for
    /// allocation failures: its CPU arena says "Failed to allocate memory", std::bad_alloc
    /// surfaces as "bad_alloc", and the CUDA provider names cudaErrorMemoryAllocation or
    /// "out of memory" (CUDA, cuBLAS and cuDNN alike).
    pub(crate) fn from_ort(e: &ort::Error) -> Self {
        let msg = e.to_string();
        let lower = msg.to_ascii_lowercase();
        let oom = [
            "failed to allocate memory",
            "bad_alloc",
            "out of memory",
            "cudaerrormemoryallocation",
            "alloc_failed",
        ]
        .iter()
        .any(|p| lower.contains(p));
        if oom {
            RunError::OutOfMemory(msg)
        } else {
            RunError::Failed(msg)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_errors_are_told_from_batch_errors() {
        assert!(RunError::Empty.is_item_error());
        assert!(RunError::Ragged {
            values: 3,
            n_mels: 2
        }
        .is_item_error());
        assert!(!RunError::OutOfMemory("x".into()).is_item_error());
        assert!(!RunError::Failed("x".into()).is_item_error());
    }
}
