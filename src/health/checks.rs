//! The checks that need nothing of the gateway: `Ping` (the process
//! answers) and `Storage` (configured external stores, as HTTP checks).
//! `Server` and `Syncer`, which read the running gateway, live beside the
//! composition root (src/gateway/checks.rs).

use std::time::Duration;

use futures::future::BoxFuture;
use http_body_util::BodyExt;
use serde::Deserialize;

use super::Check;

/// `Ping`: the process answers.
#[derive(Debug)]
pub struct Ping;

impl Check for Ping {
    fn name(&self) -> &str {
        "Ping"
    }
    fn check(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// One external store to check over HTTP (e.g. Elasticsearch `_cluster/health`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageEndpoint {
    /// Shown in the failure reason (`{name}: HTTP 503, expected 200`).
    pub name: String,
    /// An `http://` or `https://` URL (https verified against the system's roots).
    pub url: String,
    /// The HTTP status a healthy store answers with (default 200).
    #[serde(default = "default_status")]
    pub expect_status: u16,
    /// A top-level JSON field of the answer that must hold one of `allowed_values`.
    pub json_field: Option<String>,
    /// Values of `json_field` that count as healthy (required with it; default none).
    #[serde(default)]
    pub allowed_values: Vec<String>,
}

fn default_status() -> u16 {
    200
}

impl StorageEndpoint {
    pub(crate) fn validate(&self) -> Result<(), String> {
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(format!(
                "storage check {:?}: url {:?} must be an http:// or https:// URL",
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
pub(crate) struct Storage {
    endpoints: Vec<StorageEndpoint>,
    client: hyper_util::client::legacy::Client<HttpsConnector, http_body_util::Empty<bytes::Bytes>>,
}

type HttpsConnector =
    hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>;

impl Storage {
    pub(crate) fn new(endpoints: Vec<StorageEndpoint>) -> Self {
        if endpoints.is_empty() {
            tracing::info!("no external storage configured; the Storage check passes");
        }
        let connector = match hyper_rustls::HttpsConnectorBuilder::new().with_native_roots() {
            Ok(builder) => builder.https_or_http().enable_http1().build(),
            Err(e) => {
                // No system roots: http:// still works, https:// fails with a clear error.
                tracing::warn!(cause = %e, "no system root certificates; https storage checks will fail");
                let empty = rustls::ClientConfig::builder()
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new()
                    .with_tls_config(empty)
                    .https_or_http()
                    .enable_http1()
                    .build()
            }
        };
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build(connector);
        Self { endpoints, client }
    }

    async fn check_one(&self, endpoint: &StorageEndpoint) -> Result<(), String> {
        let uri: http::Uri = endpoint
            .url
            .parse()
            .map_err(|e| format!("{}: bad url: {e}", endpoint.name))?;
        let response = self
            .client
            .get(uri)
            .await
            .map_err(|e| format!("{}: {}", endpoint.name, crate::classify::describe(&e)))?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;

    async fn store(body: &'static str, status: u16) -> String {
        let app = axum::Router::new().route(
            "/_cluster/health",
            get(move || async move { (axum::http::StatusCode::from_u16(status).unwrap(), body) }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/_cluster/health", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        url
    }

    fn es(url: String) -> StorageEndpoint {
        StorageEndpoint {
            name: "es".into(),
            url,
            expect_status: 200,
            json_field: Some("status".into()),
            allowed_values: vec!["green".into(), "yellow".into()],
        }
    }

    #[tokio::test]
    async fn storage_checks_call_the_store() {
        let green = store(r#"{"status":"green"}"#, 200).await;
        let red = store(r#"{"status":"red"}"#, 200).await;
        let down = store("{}", 503).await;
        let garbage = store("<html>", 200).await;
        let cases = [
            (es(green.clone()), None),
            (
                es(red),
                Some("es: status is \"red\", expected one of [\"green\", \"yellow\"]"),
            ),
            (es(down), Some("es: HTTP 503, expected 200")),
            (es(garbage), Some("es: the answer is not JSON")),
            (
                es("http://127.0.0.1:9/_cluster/health".into()),
                Some("es: client error (Connect): tcp connect error"),
            ),
            // TLS against a plain-HTTP port: the handshake fails, clearly.
            (
                es(green.replace("http://", "https://")),
                Some("es: client error (Connect): received corrupt message"),
            ),
        ];
        for (endpoint, want) in cases {
            let url = endpoint.url.clone();
            let result = Storage::new(vec![endpoint]).check().await;
            match want {
                None => assert_eq!(result, Ok(()), "{url}"),
                Some(prefix) => assert!(
                    result.as_ref().unwrap_err().starts_with(prefix),
                    "{url}: {result:?}"
                ),
            }
        }
        assert_eq!(
            Storage::new(vec![]).check().await,
            Ok(()),
            "none configured passes"
        );
        assert!(es("ftp://x".into()).validate().is_err());
        assert!(es("https://es:9200".into()).validate().is_ok());
        let mut no_values = es("http://es:9200".into());
        no_values.allowed_values.clear();
        assert!(no_values.validate().is_err());
    }
}
