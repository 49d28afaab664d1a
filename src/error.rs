//! The crate's error type and its one mapping to an HTTP response
//! (status + the JSON body `{"code": CODE, "message": TEXT}` of
//! [`crate::protocol::ErrorBody`]).

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Everything that can go wrong in kube-pulse outside the simulator's own API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid configuration in {path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("cluster {cluster:?}: {message}")]
    Cluster { cluster: String, message: String },
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    #[error("cannot start simulated cluster {cluster:?}: {source}")]
    Simulator {
        cluster: String,
        #[source]
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Settings(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("bad request: {0}")]
    BadRequest(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A short machine-readable code, also used as a metric label.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read_failed",
            Error::Config { .. } => "invalid_config",
            Error::Cluster { .. } => "invalid_cluster",
            Error::Kubeconfig(_) => "kubeconfig",
            Error::Simulator { .. } => "simulator",
            Error::Serve(_) => "serve",
            Error::Listen { .. } => "listen",
            Error::Settings(_) => "invalid_settings",
            Error::NotFound(_) => "not_found",
            Error::BadRequest(_) => "bad_request",
            Error::Conflict(_) => "conflict",
            Error::Unavailable(_) => "unavailable",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::BadRequest(_) => StatusCode::BAD_REQUEST,
            Error::Conflict(_) => StatusCode::CONFLICT,
            Error::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Error::Config { .. }
            | Error::Cluster { .. }
            | Error::Kubeconfig(_)
            | Error::Settings(_) => StatusCode::BAD_REQUEST,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(cause = %self, "request failed");
        }
        crate::protocol::error_response(status, self.code(), &self.to_string())
    }
}
