//! The crate's error type and its one mapping to an HTTP response
//! (status + the JSON body `{"code": CODE, "message": TEXT}` of
//! [`crate::protocol::ErrorBody`]).

use std::path::PathBuf;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// Everything that can go wrong in kube-pulse outside the simulator's own API.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `--config` file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file that was asked for.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: std::io::Error,
    },
    /// A `--config` file or kubeconfig does not describe a usable setup.
    #[error("invalid configuration in {path}: {message}")]
    Config {
        /// The offending file.
        path: PathBuf,
        /// What is wrong in it, for the operator.
        message: String,
    },
    /// One member cluster's settings cannot give a working client.
    #[error("cluster {cluster:?}: {message}")]
    Cluster {
        /// The member's name as in topics.
        cluster: String,
        /// What is wrong with it.
        message: String,
    },
    /// kube-rs rejected a kubeconfig (parse, context or credentials).
    #[error("kubeconfig: {0}")]
    Kubeconfig(#[source] kube::config::KubeconfigError),
    /// A demo cluster (the in-process simulator) could not be started.
    #[error("cannot start simulated cluster {cluster:?}: {source}")]
    Simulator {
        /// The simulated cluster's name.
        cluster: String,
        /// Why it could not bind or start.
        #[source]
        source: std::io::Error,
    },
    /// The HTTP server stopped on an I/O error.
    #[error("server error: {0}")]
    Serve(#[source] std::io::Error),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// Why binding failed (in use, permission, …).
        #[source]
        source: std::io::Error,
    },
    /// Command-line or gateway settings that are missing or unusable; the text says which.
    #[error("{0}")]
    Settings(String),
    /// A request named something that does not exist (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// A request that cannot be understood or is not allowed as given (HTTP 400).
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A topic pattern that is invalid, missing or one too many (HTTP 400,
    /// `bad_pattern`: the code a WebSocket `subscribe` gets for the same fault).
    #[error("bad pattern: {0}")]
    BadPattern(String),
    /// A request that clashes with the current state, e.g. a task already running (HTTP 409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// A dependency such as the task store cannot serve now; retry later (HTTP 503).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// `Result` with the crate's [`Error`] as the default error.
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
            Error::BadPattern(_) => "bad_pattern",
            Error::Conflict(_) => "conflict",
            Error::Unavailable(_) => "unavailable",
        }
    }

    fn status(&self) -> StatusCode {
        match self {
            Error::NotFound(_) => StatusCode::NOT_FOUND,
            Error::BadRequest(_) | Error::BadPattern(_) => StatusCode::BAD_REQUEST,
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
