//! Why a job stops. Item problems are never job errors: they are in the report.

use std::path::PathBuf;

use sonograph_io::ledger::LedgerError;
use sonograph_io::manifest::SourceError;
use sonograph_io::WriteError;
use thiserror::Error;

/// Why a job could not run. Item problems are never job errors: they are in the report.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum JobError {
    #[error("{0}")]
    Config(String),
    /// A model (or the runtime it needs) that cannot load, or cannot take the job's features.
    #[error("{0}")]
    Model(String),
    /// An input that cannot be used by a job that stops at one (`vad`, `bench`, `features`):
    /// the file and why.
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Write(#[from] WriteError),
    /// A file or object that could not be read or written, and why. The reason is part of
    /// the message, not a source (a field named `source` would be one, and a chain printed
    /// whole would say it twice).
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    /// A recording that could not be written (its path and why).
    #[error(transparent)]
    Recording(#[from] sonograph_io::IqError),
    /// A device that failed while the job ran on it.
    #[error("{0}")]
    Device(String),
    #[error("internal error: {0}")]
    Internal(String),
    /// Stopped at a batch boundary by [`crate::LiveJob::cancel`]; what was written stays, and
    /// the same job run again finishes the rest.
    #[error("canceled with {undone} items left undone; the same job run again resumes them")]
    Canceled { undone: u64 },
}

impl JobError {
    /// A usage or configuration problem (exit code 2), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            JobError::Config(_)
                | JobError::Model(_)
                | JobError::Input(_)
                | JobError::Source(_)
                | JobError::Ledger(
                    LedgerError::SpecMismatch { .. } | LedgerError::ShardMismatch { .. }
                )
        )
    }
}

/// The message of a caught panic.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}
