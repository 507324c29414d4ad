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

/// Why one item could not be turned into features: recorded with the item, and the rest of
/// its batch (and the job) goes on.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum ItemError {
    #[error("sample {index} is {value} (NaN or infinite)")]
    NonFinite { index: usize, value: f32 },
    #[error("the item has no samples")]
    Empty,
    /// Shorter than the spec's `min_samples`: the code the spec matches refuses it too.
    #[error("the item has {samples} samples; this spec needs at least {min} (the code it matches refuses shorter input)")]
    TooShort { samples: usize, min: usize },
    /// Complex input whose values do not pair up: an I without its Q.
    #[error("{values} values do not pair up into I/Q samples")]
    HalfSample { values: usize },
    /// A piece of an item whose window does not hold what its frames read (a caller's bug).
    #[error("bad piece: {0}")]
    BadSpan(String),
    /// An item its batch marked 16-bit PCM (`AudioBatch::push_known_piece`) with a sample
    /// off the 16-bit grid (a caller's bug): failed, never sent changed.
    #[error("sample {index} is not 16-bit PCM, though its batch said the item was")]
    NotPcm16 { index: usize },
    /// Every device that could compute it failed, the CPU fallback included.
    #[error("no device could compute the item: {0}")]
    NoDevice(String),
}

/// Why a device could not run a batch (or could not be opened): the batcher splits the batch,
/// retries it or moves it to another device; none of its items is lost.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum DeviceError {
    /// The batch did not fit in the device's memory; the message says what was asked, the
    /// budget, what is in use and what will be tried next.
    #[error("out of memory: {0}")]
    OutOfMemory(String),
    /// The device stopped answering or was lost; its work must move elsewhere.
    #[error("device lost: {0}")]
    DeviceLost(String),
    /// The backend cannot run here (not built in, no adapter, an adapter that cannot open).
    #[error("backend unavailable: {0}")]
    Unavailable(String),
    /// The spec cannot be run (a caller's error; `FeatureSpec::validate` says why).
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// A valid spec this backend does not compute (the GPU and complex input): another
    /// backend does, so `auto` leaves it to the CPU and a device named outright refuses.
    #[error("this backend cannot compute the spec: {0}")]
    Unsupported(String),
    /// A kernel that does not compile, or a pipeline that cannot be made from it: a bug in
    /// sonograph, never a missing device.
    #[error("GPU kernel error (a bug in sonograph, please report it): {0}")]
    Kernel(String),
}
