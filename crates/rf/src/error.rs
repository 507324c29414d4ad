use thiserror::Error;

/// Why an RF spec, signal or computation was refused.
#[derive(Debug, Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum RfError {
    /// A parameter of a synthesis or feature spec is out of its domain.
    #[error("invalid spec: {field}: {reason}")]
    Invalid { field: String, reason: String },
    /// A spec file that does not parse.
    #[error("cannot parse spec: {0}")]
    Parse(String),
    /// A recording too short for what was asked (e.g. shorter than one Welch segment).
    #[error("too short: {0}")]
    TooShort(String),
    /// A recording with NaN or infinite samples.
    #[error("sample {index} is not finite")]
    NonFinite { index: usize },
    /// SigMF metadata that is not valid.
    #[error("bad SigMF metadata: {0}")]
    Sigmf(String),
}

pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> RfError {
    RfError::Invalid {
        field: field.to_string(),
        reason: reason.into(),
    }
}
