//! Authentication and authorization beside the data flow: every REST, task,
//! SSE and WebSocket request is authenticated here, and what it may see is
//! decided by [`Principal::can_see`] on each topic (`transports`, `rest`)
//! and [`Auth::can_write`] for tasks. Modes: `none` (loopback only unless
//! forced), static `tokens`, `jwt`, and `kubernetes` (TokenReview +
//! SubjectAccessReview on the host cluster). See `docs/SECURITY.md`.

pub mod cookie;
mod credential;
pub mod jwt;
pub mod kubernetes;
mod scope;
pub mod throttle;
pub mod tokens;

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use chrono::Utc;

pub use credential::{Credential, WS_PROTOCOL, WS_TOKEN_PROTOCOL, bearer, ws_protocol_token};
pub use scope::{KubeUser, Principal, Scope, Scopes};
pub use throttle::FailureLimits;

/// How callers are authenticated.
// One per gateway, built once: the size of its largest variant costs nothing.
#[allow(clippy::large_enum_variant)]
pub enum Mode {
    /// Everyone may see and do everything (loopback listeners only, unless forced).
    None,
    /// Static bearer tokens from a token file, each with its grants.
    Tokens(tokens::TokenFile),
    /// Signed JWTs whose claims carry the subject and grants.
    Jwt(jwt::JwtVerifier),
    /// TokenReview and SubjectAccessReview on the host cluster.
    Kubernetes(kubernetes::KubeAuth),
}

impl std::fmt::Debug for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::None => f.write_str("None"),
            Mode::Tokens(file) => f.debug_tuple("Tokens").field(file).finish(),
            Mode::Jwt(verifier) => f.debug_tuple("Jwt").field(verifier).finish(),
            Mode::Kubernetes(kube) => f.debug_tuple("Kubernetes").field(kube).finish(),
        }
    }
}

/// Why a request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No token was sent (401).
    #[error("a bearer token is required (Authorization: Bearer …)")]
    Missing,
    /// The token is not accepted: unknown, expired, badly signed (401).
    #[error("{0}")]
    Invalid(String),
    /// The caller is known but may not do this (403).
    #[error("{0}")]
    Forbidden(String),
    /// The authority that decides (the host cluster) did not answer (503).
    #[error("authentication is unavailable: {0}")]
    Unavailable(String),
    /// The caller's address failed authentication too often; the token was
    /// not looked at (429, `Retry-After` seconds).
    #[error("too many failed authentications from this address; retry in {retry_after} s")]
    Throttled {
        /// Seconds until the address may try again.
        retry_after: u64,
    },
}

impl AuthError {
    /// The HTTP status the refusal is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::Missing | AuthError::Invalid(_) => StatusCode::UNAUTHORIZED,
            AuthError::Forbidden(_) => StatusCode::FORBIDDEN,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AuthError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// The machine-readable `code` of the error body.
    pub fn code(&self) -> &'static str {
        match self {
            // The same codes as a WebSocket's: no credential at all is
            // `unauthenticated`, one not accepted `unauthorized`.
            AuthError::Missing => "unauthenticated",
            AuthError::Invalid(_) => "unauthorized",
            AuthError::Forbidden(_) => "forbidden",
            AuthError::Unavailable(_) => "unavailable",
            AuthError::Throttled { .. } => "too_many_auth_failures",
        }
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let mut response =
            crate::protocol::error_response(self.status(), self.code(), &self.to_string());
        if self.status() == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let AuthError::Throttled { retry_after } = self {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
        }
        response
    }
}

/// The gateway's authenticator.
#[derive(Debug)]
pub struct Auth {
    mode: Mode,
    /// Accept `?access_token=` on the WebSocket endpoint (tokens end up in logs).
    pub allow_query_token: bool,
    /// Failed authentications per client address (see [`Auth::authenticate_from`]).
    failures: throttle::FailureThrottle,
    /// Cookie sessions issued from bearer tokens, for the native `EventSource`.
    pub sessions: cookie::Sessions,
}

impl Auth {
    /// An authenticator in `mode` that takes tokens from headers only.
    pub fn new(mode: Mode) -> Arc<Self> {
        Self::with_query_token(mode, false)
    }

    /// An authenticator in `mode` that also accepts `?access_token=` on the
    /// WebSocket endpoint when `allow` is set.
    pub fn with_query_token(mode: Mode, allow: bool) -> Arc<Self> {
        Self::configured(mode, allow, FailureLimits::default())
    }

    /// An authenticator in `mode` (`?access_token=` when `allow_query_token`)
    /// that throttles addresses past `failures`.
    pub fn configured(mode: Mode, allow_query_token: bool, failures: FailureLimits) -> Arc<Self> {
        Arc::new(Self {
            mode,
            allow_query_token,
            failures: throttle::FailureThrottle::new(failures),
            sessions: cookie::Sessions::default(),
        })
    }

    /// `--auth none`.
    pub fn none() -> Arc<Self> {
        Self::new(Mode::None)
    }

    /// Whether requests need a token.
    pub fn required(&self) -> bool {
        !matches!(self.mode, Mode::None)
    }

    /// The mode's name as `--auth` spells it, for logs and health output.
    pub fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::None => "none",
            Mode::Tokens(_) => "tokens",
            Mode::Jwt(_) => "jwt",
            Mode::Kubernetes(_) => "kubernetes",
        }
    }

    /// The principal of `token` (None: no token was sent).
    pub async fn authenticate(&self, token: Option<&str>) -> Result<Principal, AuthError> {
        if let Mode::None = self.mode {
            return Ok(Principal::unrestricted());
        }
        let token = token.filter(|t| !t.is_empty()).ok_or(AuthError::Missing)?;
        if token.len() > 16 * 1024 {
            return Err(AuthError::Invalid("the token is too long".into()));
        }
        match &self.mode {
            Mode::None => unreachable!("handled above"),
            Mode::Tokens(file) => file.find(token, Utc::now()).map_err(AuthError::Invalid),
            Mode::Jwt(verifier) => verifier.verify(token).map_err(AuthError::Invalid),
            Mode::Kubernetes(kube) => kube.authenticate(token).await.map_err(|e| {
                if e.starts_with("token review failed") || e.starts_with("access review failed") {
                    AuthError::Unavailable(e)
                } else {
                    AuthError::Invalid(e)
                }
            }),
        }
    }

    /// Like [`Auth::authenticate`], for a caller at `ip` (None: unknown, not
    /// throttled): while `ip` is over its failure limit the answer is
    /// `Throttled` and the verifier is not asked, whatever the token; a
    /// rejected token counts against `ip` (a missing one, or an unavailable
    /// authority, does not). Sessions re-checking their own credential use
    /// [`Auth::authenticate`].
    pub async fn authenticate_from(
        &self,
        ip: Option<std::net::IpAddr>,
        token: Option<&str>,
    ) -> Result<Principal, AuthError> {
        self.check_throttle(ip)?;
        let result = self.authenticate(token).await;
        if let (Err(AuthError::Invalid(_)), Some(ip)) = (&result, ip) {
            self.failures.failed(ip);
        }
        result
    }

    /// `Throttled` while `ip` is over its failure limit (never without
    /// authentication, nor for an unknown address).
    pub fn check_throttle(&self, ip: Option<std::net::IpAddr>) -> Result<(), AuthError> {
        match ip {
            Some(ip) if self.required() => {
                self.failures
                    .check(ip)
                    .map_err(|wait| AuthError::Throttled {
                        retry_after: wait.as_secs() + u64::from(wait.subsec_nanos() > 0),
                    })
            }
            _ => Ok(()),
        }
    }

    /// Whether `principal` may create, cancel or report on tasks of apps in
    /// `cluster`/`namespace`.
    pub async fn can_write(
        &self,
        principal: &Principal,
        cluster: &str,
        namespace: &str,
    ) -> Result<(), AuthError> {
        let allowed = match (&self.mode, &principal.kube_user) {
            (Mode::Kubernetes(kube), Some(user)) => kube
                .allowed(user, "create", "tasks", Some(namespace), cluster)
                .await
                .map_err(AuthError::Unavailable)?,
            _ => principal.write.allows(cluster, Some(namespace)),
        };
        if allowed {
            Ok(())
        } else {
            Err(AuthError::Forbidden(format!(
                "{} may not act on apps in {cluster}/{namespace}",
                principal.subject
            )))
        }
    }
}

/// Who may read the metrics, whose labels name every cluster.
impl Auth {
    /// Whether `principal` may read `/metrics`: the `*` read grant, or in
    /// `kubernetes` mode `get` on the non-resource URL `/metrics` (what a
    /// Prometheus service account is given for the apiserver's metrics).
    pub async fn can_read_metrics(&self, principal: &Principal) -> Result<(), AuthError> {
        let allowed = match (&self.mode, &principal.kube_user) {
            _ if principal.read.is_all() => true,
            (Mode::Kubernetes(kube), Some(user)) => kube
                .allowed_path(user, "get", "/metrics")
                .await
                .map_err(AuthError::Unavailable)?,
            _ => false,
        };
        if allowed {
            Ok(())
        } else {
            Err(AuthError::Forbidden(format!(
                "{} may not read metrics: they need the `*` read grant{}",
                principal.subject,
                if matches!(self.mode, Mode::Kubernetes(_)) {
                    " or, in kubernetes mode, `get` on the non-resource URL /metrics"
                } else {
                    ""
                }
            )))
        }
    }
}

/// The admin grant: what the demo's simulator control API (`/_sim`) needs.
impl Auth {
    /// Whether `principal` holds the admin grant: the `*` write grant
    /// (`tokens`, `jwt`; everyone with `none`, which is loopback-only), or
    /// in `kubernetes` mode `update` on `simulators.kube-pulse.io`
    /// cluster-wide.
    pub async fn can_administer(&self, principal: &Principal) -> Result<(), AuthError> {
        let allowed = match (&self.mode, &principal.kube_user) {
            (Mode::None, _) => true,
            (Mode::Kubernetes(kube), Some(user)) => kube
                .allowed(user, "update", "simulators", None, "")
                .await
                .map_err(AuthError::Unavailable)?,
            _ => principal.write.is_all(),
        };
        if allowed {
            Ok(())
        } else {
            Err(AuthError::Forbidden(format!(
                "{} may not use the simulator's control API: it needs the admin grant (`*` write)",
                principal.subject
            )))
        }
    }
}

/// Middleware for admin routes (the demo's `/_sim`): [`require`], then the
/// admin grant (401 without a valid token, 403 without the grant).
pub async fn require_admin(
    State(auth): State<Arc<Auth>>,
    request: Request,
    next: Next,
) -> Response {
    let token = bearer(request.headers());
    let principal = match auth.authenticate(token.as_deref()).await {
        Ok(principal) => principal,
        Err(e) => return e.into_response(),
    };
    match auth.can_administer(&principal).await {
        Ok(()) => next.run(request).await,
        Err(e) => {
            tracing::debug!(cause = %e, path = %request.uri().path(), "admin request refused");
            e.into_response()
        }
    }
}

/// Which authentication mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeName {
    /// No authentication.
    #[default]
    None,
    /// Static tokens from `--tokens-file`.
    Tokens,
    /// JWTs verified with the configured keys.
    Jwt,
    /// TokenReview and SubjectAccessReview on the host cluster.
    Kubernetes,
}

/// How to authenticate, as configured.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// Which mode (default `none`).
    pub mode: ModeName,
    /// Run `none` on a non-loopback listener anyway.
    pub insecure_no_auth: bool,
    /// The token file of `tokens` mode.
    pub tokens_file: Option<std::path::PathBuf>,
    /// The keys and claims of `jwt` mode.
    pub jwt: jwt::JwtSettings,
    /// Host cluster for `kubernetes` (default: in-cluster or `KUBECONFIG`).
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Context of `kubeconfig` to use (default: its current context).
    pub context: Option<String>,
    /// Audiences a TokenReview asks for (default: the apiserver's).
    pub review_audiences: Vec<String>,
    /// How long TokenReview / SubjectAccessReview answers are reused.
    pub cache_ttl: std::time::Duration,
    /// Accept `?access_token=` on the WebSocket endpoint.
    pub query_token: bool,
    /// Failed authentications per client address before it is refused.
    pub failures: FailureLimits,
}

impl AuthSettings {
    /// `none` only on loopback listeners, unless explicitly forced.
    pub fn check_listener(&self, addr: std::net::SocketAddr) -> Result<(), String> {
        if self.mode == ModeName::None && !addr.ip().is_loopback() && !self.insecure_no_auth {
            return Err(format!(
                "refusing to serve {addr} without authentication: choose --auth tokens|jwt|kubernetes, \
                 listen on loopback, or pass --insecure-no-auth"
            ));
        }
        Ok(())
    }

    /// Builds the authenticator; `kubernetes` resolves grants over `hub`.
    pub async fn build(&self, hub: Arc<crate::hub::Hub>) -> Result<Arc<Auth>, String> {
        let mode = match self.mode {
            ModeName::None => Mode::None,
            ModeName::Tokens => {
                let path = self
                    .tokens_file
                    .as_ref()
                    .ok_or("--auth tokens needs --tokens-file")?;
                Mode::Tokens(tokens::TokenFile::load(path)?)
            }
            ModeName::Jwt => Mode::Jwt(jwt::JwtVerifier::new(&self.jwt)?),
            ModeName::Kubernetes => {
                let config = match &self.kubeconfig {
                    Some(path) => {
                        let file = kube::config::Kubeconfig::read_from(path)
                            .map_err(|e| format!("{}: {e}", path.display()))?;
                        let options = kube::config::KubeConfigOptions {
                            context: self.context.clone(),
                            ..Default::default()
                        };
                        kube::Config::from_custom_kubeconfig(file, &options)
                            .await
                            .map_err(|e| format!("{}: {e}", path.display()))?
                    }
                    None => kube::Config::infer()
                        .await
                        .map_err(|e| format!("no host cluster for --auth kubernetes: {e}"))?,
                };
                let client = kube::Client::try_from(config)
                    .map_err(|e| format!("cannot build a host cluster client: {e}"))?;
                let ttl = if self.cache_ttl.is_zero() {
                    std::time::Duration::from_secs(60)
                } else {
                    self.cache_ttl
                };
                Mode::Kubernetes(kubernetes::KubeAuth::new(
                    client,
                    hub,
                    self.review_audiences.clone(),
                    ttl,
                ))
            }
        };
        Ok(Auth::configured(mode, self.query_token, self.failures))
    }
}

/// The client address of a request, as the per-client limits see it (the
/// connection's peer, set by the server as `ConnectInfo`).
pub fn peer_ip(extensions: &axum::http::Extensions) -> Option<std::net::IpAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip())
}

/// Middleware for protected routes: authenticates the `Authorization`
/// header (or, on a GET or HEAD without one, the token of the request's
/// cookie session, see [`cookie`]) and hands the [`Principal`] to the
/// handler (401 otherwise, 429 while the client's address is throttled for
/// failed authentications).
pub async fn require(State(auth): State<Arc<Auth>>, mut request: Request, next: Next) -> Response {
    let safe = matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    let token = bearer(request.headers()).or_else(|| {
        // Never for a request that changes something: a cross-site request
        // carrying the cookie must not act (tasks need the bearer token).
        safe.then(|| cookie::cookie_id(request.headers()))
            .flatten()
            .and_then(|id| auth.sessions.token(&id, std::time::Instant::now()))
    });
    let ip = peer_ip(request.extensions());
    match auth.authenticate_from(ip, token.as_deref()).await {
        Ok(principal) => {
            request.extensions_mut().insert(principal);
            request.extensions_mut().insert(Credential(token));
            next.run(request).await
        }
        Err(e) => {
            tracing::debug!(cause = %e, path = %request.uri().path(), "request refused");
            e.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn none_lets_everyone_in_and_tokens_need_one() {
        let p = Auth::none().authenticate(None).await.unwrap();
        assert!(p.read.is_all());
        let file = tokens::TokenFile::parse(
            "tokens: [{subject: a, token: aaaaaaaaaaaaaaaaaaaa, read: [x], write: [x/ns]}]",
        )
        .unwrap();
        let auth = Auth::new(Mode::Tokens(file));
        assert_eq!(
            auth.authenticate(None).await.unwrap_err(),
            AuthError::Missing
        );
        assert_eq!(
            auth.authenticate(Some("")).await.unwrap_err(),
            AuthError::Missing
        );
        assert!(matches!(
            auth.authenticate(Some("nope")).await,
            Err(AuthError::Invalid(_))
        ));
        let p = auth
            .authenticate(Some("aaaaaaaaaaaaaaaaaaaa"))
            .await
            .unwrap();
        assert!(auth.can_write(&p, "x", "ns").await.is_ok());
        let err = auth.can_write(&p, "x", "other").await.unwrap_err();
        assert_eq!(err.to_string(), "a may not act on apps in x/other");
        assert_eq!(err.status(), StatusCode::FORBIDDEN);
    }

    #[tokio::test]
    async fn an_address_past_its_failures_is_refused_before_the_verifier() {
        let file = tokens::TokenFile::parse(
            "tokens: [{subject: a, token: aaaaaaaaaaaaaaaaaaaa, read: [x]}]",
        )
        .unwrap();
        let limits = FailureLimits {
            per_ip: 2,
            window: std::time::Duration::from_secs(60),
        };
        let auth = Auth::configured(Mode::Tokens(file), false, limits);
        let (guesser, other) = (Some([10, 0, 0, 1].into()), Some([10, 0, 0, 2].into()));
        const GOOD: &str = "aaaaaaaaaaaaaaaaaaaa";
        // Missing tokens are not guesses; rejected ones are.
        assert_eq!(
            auth.authenticate_from(guesser, None).await.unwrap_err(),
            AuthError::Missing
        );
        for _ in 0..2 {
            let refused = auth.authenticate_from(guesser, Some("nope")).await;
            assert!(matches!(refused, Err(AuthError::Invalid(_))));
        }
        let throttled = auth
            .authenticate_from(guesser, Some(GOOD))
            .await
            .unwrap_err();
        assert!(
            matches!(throttled, AuthError::Throttled { retry_after } if (59..=60).contains(&retry_after)),
            "{throttled:?}"
        );
        assert_eq!(throttled.status(), StatusCode::TOO_MANY_REQUESTS);
        let response = throttled.into_response();
        assert!(response.headers().contains_key(header::RETRY_AFTER));
        assert!(auth.authenticate_from(other, Some(GOOD)).await.is_ok());
        assert!(auth.authenticate_from(None, Some(GOOD)).await.is_ok());
        // Without authentication nothing is throttled.
        assert!(Auth::none().check_throttle(guesser).is_ok());
    }
}
