use std::path::PathBuf;

use thiserror::Error;

/// Why a file could not be decoded. Every message names the file and fits on one line.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("{path}: cannot open: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: unsupported: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("{path}: corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("{path}: truncated: the header promises {expected} frames, the file ends after {got}")]
    Truncated {
        path: PathBuf,
        expected: u64,
        got: u64,
    },
    #[error("{path}: bad header: {reason}")]
    BadHeader { path: PathBuf, reason: String },
    #[error("{path}: offset {offset_s} s is past the end of the audio ({length_s:.3} s)")]
    OffsetPastEnd {
        path: PathBuf,
        offset_s: f64,
        length_s: f64,
    },
    #[error("{path}: no audio: the file is empty or has zero samples")]
    Empty { path: PathBuf },
    #[error("{path}: resource limit: {reason}")]
    ResourceLimit { path: PathBuf, reason: String },
    #[error("{path}: cannot resample: {reason}")]
    Resample { path: PathBuf, reason: String },
    /// An IQ recording that cannot be read (its message names the file).
    #[error(transparent)]
    Iq(#[from] crate::sigmf::IqError),
}

/// An error from [`crate::stream_mono`]: the decoder's, or the one the sink returned.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StreamError<E: std::error::Error + 'static> {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("{path}: {source}")]
    Sink {
        path: PathBuf,
        #[source]
        source: E,
    },
}

/// Why an output file could not be written.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("{path}: cannot write: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: shape {shape:?} does not hold {len} values")]
    Shape {
        path: PathBuf,
        shape: Vec<usize>,
        len: usize,
    },
}
