//! The web UI beside the API (`hub ──▶ transports ──▶ [browser: web-demo/]`):
//! the demo page and the JS client, embedded in the binary at build time so
//! that no Node.js or file system is needed at run time. Also mounts the
//! whole gateway under a base path, for serving it behind another app's
//! origin (`/pulse/…`).

use axum::Router;
use axum::extract::{Path, Request};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use tower::ServiceExt;

use crate::error::Error;

const INDEX: &str = include_str!("../../web-demo/index.html");

const JS: &str = "text/javascript; charset=utf-8";

/// One of the client's ES modules, at `client/esm/{name}`.
macro_rules! client_module {
    ($name:literal) => {
        (
            concat!("client/esm/", $name),
            JS,
            include_str!(concat!("../../web-demo/client/esm/", $name)),
        )
    };
}

/// `/ui/{path}` → (content type, body). The client is served as its ES
/// modules, the sources themselves: `client/kube-pulse.js` re-exports
/// `client/esm/kube-pulse.js`, which imports the others (the React and
/// Karpor entries import packages by name, which a browser cannot
/// resolve without a bundler, so they are not served).
const ASSETS: &[(&str, &str, &str)] = &[
    ("app.js", JS, include_str!("../../web-demo/app.js")),
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../web-demo/style.css"),
    ),
    (
        "client/kube-pulse.js",
        JS,
        include_str!("../../web-demo/client/kube-pulse.js"),
    ),
    client_module!("client.js"),
    client_module!("core.js"),
    client_module!("documents.js"),
    client_module!("event-source.js"),
    client_module!("kube-pulse.js"),
    client_module!("query.js"),
    client_module!("rest.js"),
    client_module!("sse.js"),
    client_module!("stores.js"),
    client_module!("tab.js"),
    (
        "client/kube-pulse.d.ts",
        "text/plain; charset=utf-8",
        include_str!("../../web-demo/client/kube-pulse.d.ts"),
    ),
];

/// `/` (the page) and `/ui/*` (its assets and the client).
pub fn router() -> Router {
    Router::new()
        .route("/", get(index))
        .route("/ui/{*path}", get(asset))
}

fn static_file(content_type: &str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Revalidate: a new binary serves new files under the same names.
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

async fn index() -> Response {
    static_file("text/html; charset=utf-8", INDEX)
}

async fn asset(Path(path): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == path) {
        Some((_, content_type, body)) => static_file(content_type, body),
        None => Error::NotFound(format!("no UI file {path:?}")).into_response(),
    }
}

/// Checks a `--base-path`: `/` or `/segment[/segment…]` without a trailing slash.
pub fn validate_base_path(path: &str) -> Result<(), String> {
    if path == "/" {
        return Ok(());
    }
    let ok = path.starts_with('/')
        && !path.ends_with('/')
        && path[1..].split('/').all(|s| {
            // `.` and `..` would make the browser's URLs and the router's differ.
            !s.is_empty()
                && s != "."
                && s != ".."
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._~".contains(c))
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "base path {path:?} must be `/` or like `/pulse` (letters, digits, -._~ segments other than . and .., no trailing slash)"
        ))
    }
}

/// Serves `app` under `base` (`/` leaves it as it is): `{base}/x` reaches
/// the app as `/x`, `{base}` redirects to `{base}/` so the page's relative
/// links resolve, and anything else is 404.
pub fn mount(app: Router, base: &str) -> Router {
    if base == "/" {
        return app;
    }
    let base = base.to_string();
    Router::new().fallback(move |mut request: Request| {
        let (app, base) = (app.clone(), base.clone());
        async move {
            let path = request.uri().path();
            let query = request
                .uri()
                .query()
                .map(|q| format!("?{q}"))
                .unwrap_or_default();
            if path == base {
                return Redirect::permanent(&format!("{base}/{query}")).into_response();
            }
            let Some(rest) = path
                .strip_prefix(base.as_str())
                .filter(|r| r.starts_with('/'))
            else {
                return Error::NotFound(format!("{path} is not under the base path {base}"))
                    .into_response();
            };
            match format!("{rest}{query}").parse() {
                Ok(uri) => *request.uri_mut() = uri,
                Err(_) => return Error::BadRequest("malformed path".into()).into_response(),
            }
            match app.oneshot(request).await {
                Ok(response) => response,
                Err(never) => match never {},
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    async fn get(app: &Router, path: &str) -> (StatusCode, String, String) {
        let (status, headers, body) = crate::testing::get(app, path).await;
        let location = headers
            .get(header::LOCATION)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, location, body)
    }

    #[tokio::test]
    async fn serves_the_page_and_its_files() {
        let app = router();
        let (status, _, body) = get(&app, "/").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("ui/app.js"), "relative links");
        let (status, _, body) = get(&app, "/ui/client/esm/kube-pulse.js").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains("export function connect"));
        let (status, _, body) = get(&app, "/ui/nope.js").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("not_found"));
    }

    /// Every module the page's client imports (relative `from './x.js'`),
    /// from `client/kube-pulse.js` on, is served: a module added to esm/
    /// and not to ASSETS fails here, not in a browser.
    #[tokio::test]
    async fn every_module_the_client_imports_is_served() {
        let app = router();
        let mut todo = vec!["client/kube-pulse.js".to_string()];
        let mut seen = std::collections::BTreeSet::new();
        while let Some(path) = todo.pop() {
            if !seen.insert(path.clone()) {
                continue;
            }
            let (status, _, body) = get(&app, &format!("/ui/{path}")).await;
            assert_eq!(status, StatusCode::OK, "{path} is imported but not served");
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            for (_, rest) in body
                .match_indices(" from './")
                .map(|(i, _)| body.split_at(i))
            {
                let target = &rest[" from './".len()..];
                let name = &target[..target.find('\'').unwrap()];
                todo.push(format!("{dir}/{name}"));
            }
        }
        assert!(seen.len() >= 8, "the module graph: {seen:?}");
    }

    #[tokio::test]
    async fn mounts_under_a_base_path() {
        let app = mount(router(), "/pulse");
        let cases = [
            ("/pulse", StatusCode::PERMANENT_REDIRECT, "/pulse/"),
            ("/pulse/", StatusCode::OK, ""),
            ("/pulse/ui/app.js", StatusCode::OK, ""),
            ("/ui/app.js", StatusCode::NOT_FOUND, ""),
            ("/", StatusCode::NOT_FOUND, ""),
        ];
        for (path, status, location) in cases {
            let (got, loc, _) = get(&app, path).await;
            assert_eq!((got, loc.as_str()), (status, location), "{path}");
        }
    }

    #[test]
    fn base_paths_are_checked() {
        for ok in ["/", "/pulse", "/a/b-c", "/v1.2", "/..a", "/a.."] {
            assert!(validate_base_path(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "pulse", "/pulse/", "//", "/a//b", "/a b", "/{x}", "/*", "/a/../b", "/..", "/.",
        ] {
            assert!(validate_base_path(bad).is_err(), "{bad}");
        }
    }
}
