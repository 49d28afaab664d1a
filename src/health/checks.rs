//! The built-in checks, mapped from the seed's components: `Ping` (the
//! process answers), `Server` (the engine that feeds the hub runs and keeps
//! up), `Syncer` (every member cluster has answered and its watches run; a
//! member that is down is reported in its status, not here) and `Storage`
//! (configured external stores, as HTTP checks).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use serde::Deserialize;

use super::Check;
use crate::pipeline::Pipeline;

/// `Ping`: the process answers.
pub struct Ping;

impl Check for Ping {
    fn name(&self) -> &str {
        "Ping"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// `Server`: the engine runs and its observation queue is not saturated.
pub struct Server(pub Arc<Pipeline>);

impl Check for Server {
    fn name(&self) -> &str {
        "Server"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.check_engine() })
    }
}

/// `Syncer`: every member cluster has an answer and its watches run.
pub struct Syncer(pub Arc<Pipeline>);

impl Check for Syncer {
    fn name(&self) -> &str {
        "Syncer"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move { self.0.check_syncer().await })
    }
}

/// One external store to check over HTTP (e.g. Elasticsearch `_cluster/health`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageEndpoint {
    pub name: String,
    /// An `http://` URL.
    pub url: String,
    #[serde(default = "default_status")]
    pub expect_status: u16,
    /// A top-level JSON field of the answer that must hold one of `allowed_values`.
    pub json_field: Option<String>,
    #[serde(default)]
    pub allowed_values: Vec<String>,
}

fn default_status() -> u16 {
    200
}

impl StorageEndpoint {
    pub fn validate(&self) -> Result<(), String> {
        if !self.url.starts_with("http://") {
            return Err(format!(
                "storage check {:?}: url {:?} must be an http:// URL (https is not supported yet)",
                self.name, self.url
            ));
        }
        self.url
            .parse::<http::Uri>()
            .map_err(|e| format!("storage check {:?}: bad url: {e}", self.name))?;
        if self.json_field.is_some() && self.allowed_values.is_empty() {
            return Err(format!(
                "storage check {:?}: jsonField needs allowedValues",
                self.name
            ));
        }
        Ok(())
    }
}

/// `Storage`: every configured store answers as expected; passes when none is configured.
pub struct Storage {
    endpoints: Vec<StorageEndpoint>,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Empty<bytes::Bytes>,
    >,
}

impl Storage {
    pub fn new(endpoints: Vec<StorageEndpoint>) -> Self {
        if endpoints.is_empty() {
            tracing::info!("no external storage configured; the Storage check passes");
        }
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        Self { endpoints, client }
    }

    async fn check_one(&self, endpoint: &StorageEndpoint) -> Result<(), String> {
        let uri: http::Uri = endpoint
            .url
            .parse()
            .map_err(|e| format!("{}: bad url: {e}", endpoint.name))?;
        let response = self.client.get(uri).await.map_err(|e| {
            format!(
                "{}: {}",
                endpoint.name,
                crate::sources::classify::describe(&e)
            )
        })?;
        let status = response.status().as_u16();
        let body = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect())
            .await
            .map_err(|_| format!("{}: the answer did not finish in time", endpoint.name))?
            .map_err(|e| format!("{}: {e}", endpoint.name))?
            .to_bytes();
        if status != endpoint.expect_status {
            return Err(format!(
                "{}: HTTP {status}, expected {}",
                endpoint.name, endpoint.expect_status
            ));
        }
        if let Some(field) = &endpoint.json_field {
            let value: serde_json::Value = serde_json::from_slice(&body)
                .map_err(|e| format!("{}: the answer is not JSON: {e}", endpoint.name))?;
            let got = value.get(field).and_then(|v| v.as_str()).unwrap_or("");
            if !endpoint.allowed_values.iter().any(|a| a == got) {
                return Err(format!(
                    "{}: {field} is {got:?}, expected one of {:?}",
                    endpoint.name, endpoint.allowed_values
                ));
            }
        }
        Ok(())
    }
}

impl Check for Storage {
    fn name(&self) -> &str {
        "Storage"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let results =
                futures::future::join_all(self.endpoints.iter().map(|e| self.check_one(e))).await;
            let errors: Vec<String> = results.into_iter().filter_map(Result::err).collect();
            if errors.is_empty() {
                Ok(())
            } else {
                Err(errors.join("; "))
            }
        })
    }
}
