use thiserror::Error;

/// A spec that cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SpecError {
    #[error("invalid spec: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("unknown preset {name:?} (known: {known})")]
    UnknownPreset { name: String, known: String },
    #[error("cannot parse spec: {0}")]
    Parse(String),
}

/// Why an item could not be turned into features.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ExtractError {
    #[error("sample {index} is {value} (NaN or infinite)")]
    NonFinite { index: usize, value: f32 },
    #[error("the item has no samples")]
    Empty,
    /// A piece of an item whose window does not hold what its frames read (a caller's bug).
    #[error("bad piece: {0}")]
    BadSpan(String),
    /// The batch did not fit in the device's memory; the message says what was asked, the
    /// budget, what is in use and what will be tried next.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The device stopped answering or was lost; its work must move elsewhere.
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// The backend cannot run here (not built in, no adapter).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
}
