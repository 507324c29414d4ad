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
    #[error("the output would need {needed} values, over the limit of {limit}")]
    ResourceLimit { needed: usize, limit: usize },
    #[error("no samples were pushed before finish()")]
    Empty,
}
