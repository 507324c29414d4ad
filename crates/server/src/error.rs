//! Why the server cannot start or go on, and the API's error answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use thiserror::Error;

/// Why the server cannot start or go on.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ServerError {
    /// A setting that cannot work (a public address without a token, a data root that does
    /// not exist).
    #[error("{0}")]
    Config(String),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    /// The state directory or its job database.
    #[error("state: {0}")]
    State(String),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

impl ServerError {
    /// A usage problem (exit code 2) rather than a failure while running.
    pub fn is_usage(&self) -> bool {
        matches!(self, ServerError::Config(_) | ServerError::Bind { .. })
    }
}

/// An API error: a status and a reason, answered as `{"error": reason}`.
#[derive(Debug)]
pub struct ApiError(pub StatusCode, pub String);

impl ApiError {
    pub fn new(status: StatusCode, reason: impl Into<String>) -> Self {
        ApiError(status, reason.into())
    }
}

impl From<ServerError> for ApiError {
    fn from(e: ServerError) -> Self {
        ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, axum::Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}
