//! The health routes (`router ──▶ [health] ──▶ checks`): `/livez`,
//! `/readyz`, `/healthz` (public, naming checks only) and
//! `/{endpoint}/{check}` (the real reason, filtered by the caller's grants),
//! over the checks and formats of src/health/.

use std::sync::Arc;

use axum::Extension;
use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::auth::Principal;
use crate::health::{Check, Format, Health, Problem, Query};

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// The probe routes (`/livez`, `/readyz`, `/healthz`): public, as kubelets
/// and load balancers call them without credentials; they name checks only.
pub fn router(health: Arc<Health>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .with_state(health)
}

/// One check with its real reason (`/{endpoint}/{check}`): reasons name
/// clusters, so the gateway serves these to authenticated callers, each
/// seeing only the clusters its read grants cover.
pub fn details(health: Arc<Health>) -> Router {
    Router::new()
        .route("/livez/{name}", get(livez_one))
        .route("/readyz/{name}", get(readyz_one))
        .route("/healthz/{name}", get(readyz_one))
        .with_state(health)
}

async fn endpoint(
    health: &Health,
    name: &str,
    checks: &[Arc<dyn Check>],
    format: Format,
    karpor_verbose: bool,
    query: Option<&str>,
) -> Response {
    let query = Query::parse(query);
    let selected: Vec<Arc<dyn Check>> = checks
        .iter()
        .filter(|c| !query.excludes(format, c.name()))
        .cloned()
        .collect();
    let outcomes = health.run(&selected).await;
    let names: Vec<&str> = checks.iter().map(|c| c.name()).collect();
    let (status, body) = format.render(name, &names, &outcomes, &query, karpor_verbose);
    text(status, body)
}

async fn livez(State(h): State<Arc<Health>>, RawQuery(q): RawQuery) -> Response {
    endpoint(&h, "livez", &h.livez, h.format, false, q.as_deref()).await
}

async fn readyz(State(h): State<Arc<Health>>, RawQuery(q): RawQuery) -> Response {
    endpoint(&h, "readyz", &h.readyz, h.format, true, q.as_deref()).await
}

async fn healthz(State(h): State<Arc<Health>>, RawQuery(q): RawQuery) -> Response {
    endpoint(
        &h,
        "healthz",
        &h.readyz,
        Format::Kubernetes,
        false,
        q.as_deref(),
    )
    .await
}

/// The reason of a failed check as `viewer` may read it: the parts about
/// clusters it cannot see are left out, neither named nor counted; when
/// nothing is left, the reason is withheld as on the summary endpoints.
/// Without a viewer (no authentication layer) only cluster-less parts show.
fn reason_for(problems: &[Problem], viewer: Option<&Principal>) -> String {
    let shown: Vec<&str> = problems
        .iter()
        .filter(|p| match (&p.cluster, viewer) {
            (None, _) => true,
            (Some(cluster), Some(viewer)) => viewer.can_see_cluster(cluster),
            (Some(_), None) => false,
        })
        .map(|p| p.text.as_str())
        .collect();
    if shown.is_empty() {
        "reason withheld".into()
    } else {
        shown.join("; ")
    }
}

async fn one(
    h: &Health,
    checks: &[Arc<dyn Check>],
    name: &str,
    viewer: Option<&Principal>,
) -> Response {
    let Some(check) = checks.iter().find(|c| c.name().eq_ignore_ascii_case(name)) else {
        return text(
            StatusCode::NOT_FOUND,
            format!("no health check named {name:?}\n"),
        );
    };
    let result = match tokio::time::timeout(h.timeout, check.problems()).await {
        Ok(result) => result,
        Err(_) => Err(vec![Problem {
            cluster: None,
            text: format!("no answer within {} ms", h.timeout.as_millis()),
        }]),
    };
    match result {
        Ok(()) => text(StatusCode::OK, "ok".into()),
        Err(problems) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {}\n", reason_for(&problems, viewer)),
        ),
    }
}

/// The caller `auth::require` put on the request, if any.
type Viewer = Option<Extension<Principal>>;

async fn livez_one(
    State(h): State<Arc<Health>>,
    Path(name): Path<String>,
    viewer: Viewer,
) -> Response {
    one(&h, &h.livez, &name, viewer.as_deref()).await
}

async fn readyz_one(
    State(h): State<Arc<Health>>,
    Path(name): Path<String>,
    viewer: Viewer,
) -> Response {
    one(&h, &h.readyz, &name, viewer.as_deref()).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use futures::future::BoxFuture;

    struct Fixed(&'static str, Result<(), String>);

    impl Check for Fixed {
        fn name(&self) -> &str {
            self.0
        }
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            let result = self.1.clone();
            Box::pin(async move { result })
        }
    }

    struct Hangs;

    impl Check for Hangs {
        fn name(&self) -> &str {
            "Storage"
        }
        fn check(&self) -> BoxFuture<'_, Result<(), String>> {
            Box::pin(std::future::pending())
        }
    }

    fn health(format: Format, syncer: Result<(), String>) -> Arc<Health> {
        let check = |name: &'static str, r: Result<(), String>| -> Arc<dyn Check> {
            Arc::new(Fixed(name, r))
        };
        Arc::new(Health {
            livez: vec![check("Ping", Ok(()))],
            readyz: vec![
                check("Ping", Ok(())),
                check("Server", Ok(())),
                check("Syncer", syncer),
                check("Storage", Ok(())),
            ],
            format,
            timeout: Duration::from_millis(200),
        })
    }

    async fn get(h: Arc<Health>, path: &str) -> (u16, String, String, String) {
        let app = router(h.clone()).merge(details(h));
        let (status, headers, body) = crate::testing::get(&app, path).await;
        let header = |name: &str| headers[name].to_str().unwrap().to_string();
        (
            status.as_u16(),
            body,
            header("content-type"),
            header("x-content-type-options"),
        )
    }

    #[tokio::test]
    async fn exact_bodies_for_every_case() {
        let down = || Err::<(), String>("cluster prod has not answered yet".to_string());
        type Case = (Format, Result<(), String>, &'static str, u16, &'static str);
        let cases: Vec<Case> = vec![
            // Karpor's format (the seed's).
            (Format::Karpor, Ok(()), "/livez", 200, "OK"),
            (
                Format::Karpor,
                Ok(()),
                "/livez?verbose",
                200,
                "[+] Ping ok\nhealth check passed\n",
            ),
            (
                Format::Karpor,
                Ok(()),
                "/readyz",
                200,
                "[+] Ping ok\n[+] Server ok\n[+] Syncer ok\n[+] Storage ok\nhealth check passed\n",
            ),
            (
                Format::Karpor,
                down(),
                "/readyz",
                503,
                "[+] Ping ok\n[+] Server ok\n[-] Syncer fail\n[+] Storage ok\nhealth check failed\n",
            ),
            (
                Format::Karpor,
                down(),
                "/readyz?excludes=Syncer,Storage",
                200,
                "[+] Ping ok\n[+] Server ok\nhealth check passed\n",
            ),
            // The apiserver's format, always on /healthz.
            (Format::Karpor, Ok(()), "/healthz", 200, "ok"),
            (
                Format::Karpor,
                Ok(()),
                "/healthz?verbose",
                200,
                "[+]ping ok\n[+]server ok\n[+]syncer ok\n[+]storage ok\nhealthz check passed\n",
            ),
            (
                Format::Karpor,
                down(),
                "/healthz",
                500,
                "[+]ping ok\n[+]server ok\n[-]syncer failed: reason withheld\n[+]storage ok\nhealthz check failed\n",
            ),
            (Format::Kubernetes, Ok(()), "/livez", 200, "ok"),
            (
                Format::Kubernetes,
                Ok(()),
                "/readyz?verbose=true",
                200,
                "[+]ping ok\n[+]server ok\n[+]syncer ok\n[+]storage ok\nreadyz check passed\n",
            ),
            (
                Format::Kubernetes,
                down(),
                "/readyz",
                500,
                "[+]ping ok\n[+]server ok\n[-]syncer failed: reason withheld\n[+]storage ok\nreadyz check failed\n",
            ),
            (
                Format::Kubernetes,
                down(),
                "/readyz?exclude=syncer&exclude=etcd&verbose",
                200,
                "[+]ping ok\n[+]server ok\n[+]syncer excluded: ok\n[+]storage ok\nwarn: some health checks cannot be excluded: no matches for \"etcd\"\nreadyz check passed\n",
            ),
            // One check, with the real reason.
            (Format::Karpor, Ok(()), "/readyz/Syncer", 200, "ok"),
            (
                Format::Karpor,
                down(),
                "/readyz/syncer",
                500,
                "internal server error: cluster prod has not answered yet\n",
            ),
            (Format::Karpor, Ok(()), "/livez/ping", 200, "ok"),
            (
                Format::Karpor,
                Ok(()),
                "/readyz/etcd",
                404,
                "no health check named \"etcd\"\n",
            ),
        ];
        for (format, syncer, path, status, body) in cases {
            let (got_status, got_body, ct, nosniff) = get(health(format, syncer), path).await;
            assert_eq!(
                (got_status, got_body.as_str()),
                (status, body),
                "{format:?} {path}"
            );
            assert_eq!(ct, "text/plain; charset=utf-8");
            assert_eq!(nosniff, "nosniff");
        }
    }

    #[test]
    fn reasons_name_only_visible_clusters() {
        let problem = |cluster: Option<&str>, text: &str| Problem {
            cluster: cluster.map(str::to_string),
            text: text.into(),
        };
        let problems = [
            problem(Some("prod"), "cluster prod has not answered yet"),
            problem(Some("dev"), "cluster dev: watch stopped"),
            problem(None, "the task store is down"),
        ];
        let reader = |read: &[&str]| Principal {
            subject: "t".into(),
            read: crate::auth::Scopes::parse(read).unwrap(),
            write: Default::default(),
            expires: None,
            kube_user: None,
        };
        let cases = [
            (
                Some(reader(&["*"])),
                "cluster prod has not answered yet; cluster dev: watch stopped; the task store is down",
            ),
            (
                Some(reader(&["dev/shop"])),
                "cluster dev: watch stopped; the task store is down",
            ),
            (Some(reader(&["staging"])), "the task store is down"),
            (None, "the task store is down"),
        ];
        for (viewer, want) in cases {
            assert_eq!(reason_for(&problems, viewer.as_ref()), want, "{viewer:?}");
        }
        assert_eq!(
            reason_for(&problems[..1], Some(&reader(&["dev"]))),
            "reason withheld"
        );
    }

    // The clock is paused: the runtime jumps to the 50 ms timeout once `Hangs` is idle.
    #[tokio::test(start_paused = true)]
    async fn checks_run_with_a_timeout() {
        let h = Arc::new(Health {
            livez: vec![],
            readyz: vec![Arc::new(Fixed("Ping", Ok(()))), Arc::new(Hangs)],
            format: Format::Karpor,
            timeout: Duration::from_millis(50),
        });
        let (status, body, _, _) = get(h.clone(), "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (503, "[+] Ping ok\n[-] Storage fail\nhealth check failed\n")
        );
        let (_, body, _, _) = get(h, "/readyz/storage").await;
        assert_eq!(body, "internal server error: no answer within 50 ms\n");
    }
}
