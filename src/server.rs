//! The HTTP server of `driftless run` (axum): health, readiness, metrics, the JSON API, manual
//! syncs, webhooks and a status page.
//!
//! | route | answers |
//! |---|---|
//! | `GET /healthz` | 200 while the process serves |
//! | `GET /readyz` | 200 once the store answers and every app finished its first reconcile, else 503 saying what is missing |
//! | `GET /metrics` | Prometheus (OpenMetrics) text, see [`crate::metrics`] |
//! | `GET /api/v1/apps`, `GET /api/v1/apps/{name}` | the status JSON of ARCHITECTURE.md section 7 (404 for an unknown app) |
//! | `POST /api/v1/apps/{name}/sync` | `Authorization: Bearer <server.token>`: 202 and an immediate fetch and reconcile; 401 without a valid token; 404 for an unknown app |
//! | `POST /webhooks/github`, `/webhooks/gitea`, `/webhooks/gitlab` | a verified push for an app's repository and ref: 200 and an immediate fetch of those apps; a bad or missing signature: 401; other events: 202, ignored; bodies over 1 MiB: 413; a host without a configured secret: 404 |
//! | `GET /`, `GET /apps/{name}` | HTML status pages (the `target_url` of commit statuses) |
//!
//! Signatures follow each host's documentation: GitHub sends `X-Hub-Signature-256:
//! sha256=<hex HMAC-SHA256 of the raw body>`, Gitea `X-Gitea-Signature: <hex HMAC-SHA256>`,
//! GitLab the shared secret itself in `X-Gitlab-Token`. All are compared in constant time.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use hmac::{KeyInit, Mac};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use subtle::ConstantTimeEq;

use crate::metrics::Metrics;
use crate::preview::{self, PreviewRecord};
use crate::reconcile::Handle;
use crate::status::{self, AppStatus, ConditionStatus, ConditionType};
use crate::store::Store;

/// Largest webhook body accepted, in bytes (1 MiB).
pub const MAX_WEBHOOK_BODY: usize = 1 << 20;

/// Most connections the server holds open at once; further clients wait in the kernel's
/// accept queue until one closes.
pub const MAX_CONNECTIONS: usize = 256;
/// Most connections one client address holds open at once; a further one is closed at once. A
/// single client (a slowloris attack) can then take at most this share of
/// [`MAX_CONNECTIONS`], and probes from elsewhere (a kubelet's `/healthz`) still get in.
pub const MAX_CONNECTIONS_PER_CLIENT: usize = 32;
/// A connection on which nothing is read or written for this long is closed (a client that
/// sends half a request and stops, or an idle keep-alive connection).
pub const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// A request must be sent whole (head and body) within this long of its first byte, however
/// steadily it trickles in: the idle timer alone restarts at every byte, so one header line a
/// second would hold a connection forever.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A TCP listener that holds at most `max` connections open (at most
/// [`MAX_CONNECTIONS_PER_CLIENT`] from one address), closes idle ones, and closes those whose
/// request takes longer than [`REQUEST_TIMEOUT`] to arrive, so that clients that open
/// connections and never finish a request cannot use up the process's file descriptors or
/// starve other clients. Serve it with [`axum::serve`].
#[derive(Debug)]
pub struct GuardedListener {
    inner: tokio::net::TcpListener,
    permits: Arc<tokio::sync::Semaphore>,
    idle: std::time::Duration,
    request_timeout: std::time::Duration,
    per_client: usize,
    clients: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
}

impl GuardedListener {
    /// Wraps `inner` with a limit of `max` open connections and an idle timeout of `idle`;
    /// [`MAX_CONNECTIONS_PER_CLIENT`] and [`REQUEST_TIMEOUT`] unless changed with
    /// [`GuardedListener::with_client_limits`].
    pub fn new(inner: tokio::net::TcpListener, max: usize, idle: std::time::Duration) -> Self {
        Self {
            inner,
            permits: Arc::new(tokio::sync::Semaphore::new(max)),
            idle,
            request_timeout: REQUEST_TIMEOUT,
            per_client: MAX_CONNECTIONS_PER_CLIENT,
            clients: Arc::default(),
        }
    }

    /// Sets the most connections one address may hold and the time a request may take to
    /// arrive.
    pub fn with_client_limits(
        mut self,
        per_client: usize,
        request_timeout: std::time::Duration,
    ) -> Self {
        self.per_client = per_client;
        self.request_timeout = request_timeout;
        self
    }
}

impl axum::serve::Listener for GuardedListener {
    type Io = GuardedIo;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let permit = self
                .permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            let Some(client) = ClientSlot::take(&self.clients, addr.ip(), self.per_client) else {
                tracing::debug!(client = %addr.ip(), "Connection refused: too many from this client");
                continue; // dropping `io` closes it, dropping `permit` frees the slot
            };
            let io = GuardedIo {
                io,
                _permit: permit,
                _client: client,
                idle: self.idle,
                deadline: Box::pin(tokio::time::sleep(self.idle)),
                request_timeout: self.request_timeout,
                request: None,
            };
            return (io, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// One client address's hold on a connection, given back on drop.
#[derive(Debug)]
struct ClientSlot {
    clients: Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
    ip: std::net::IpAddr,
}

impl ClientSlot {
    fn take(
        clients: &Arc<std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>>,
        ip: std::net::IpAddr,
        max: usize,
    ) -> Option<Self> {
        let mut held = clients.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: clients.clone(),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut held = self.clients.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.ip);
            }
        }
    }
}

/// A connection of [`GuardedListener`]: holds its slots until closed, and fails with
/// `TimedOut` after the idle timeout without traffic, or when a request has not been answered
/// (the server has written nothing) within the request timeout of its first byte.
#[derive(Debug)]
pub struct GuardedIo {
    io: tokio::net::TcpStream,
    _permit: tokio::sync::OwnedSemaphorePermit,
    _client: ClientSlot,
    idle: std::time::Duration,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    request_timeout: std::time::Duration,
    /// Running from the first byte of a request until the first byte of its answer.
    request: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

impl GuardedIo {
    fn poll_io<T>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        op: impl FnOnce(
            std::pin::Pin<&mut tokio::net::TcpStream>,
            &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<T>>,
    ) -> std::task::Poll<std::io::Result<T>> {
        use std::future::Future as _;
        use std::task::Poll;
        match op(std::pin::Pin::new(&mut self.io), cx) {
            Poll::Ready(r) => {
                let next = tokio::time::Instant::now() + self.idle;
                self.deadline.as_mut().reset(next);
                Poll::Ready(r)
            }
            Poll::Pending => {
                if self.deadline.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "idle connection closed",
                    )));
                }
                if let Some(r) = &mut self.request
                    && r.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "request not received in time",
                    )));
                }
                Poll::Pending
            }
        }
    }
}

impl tokio::io::AsyncRead for GuardedIo {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = this.poll_io(cx, |io, cx| io.poll_read(cx, buf));
        if matches!(r, std::task::Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && this.request.is_none()
        {
            this.request = Some(Box::pin(tokio::time::sleep(this.request_timeout)));
        }
        r
    }
}

impl tokio::io::AsyncWrite for GuardedIo {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = this.poll_io(cx, |io, cx| io.poll_write(cx, buf));
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            this.request = None; // answered: the next request gets its own time
        }
        r
    }

    /// Writes `bufs` as one write, as the TCP stream does: hyper then queues an answer's body
    /// beside its head instead of copying both into a buffer of the connection's own, which
    /// grows to the largest answer sent and is kept as long as the connection (30 keep-alive
    /// readers of a 10,000-object app page, 1.4 MB: the agent at 90 MiB instead of 47).
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = this.poll_io(cx, |io, cx| io.poll_write_vectored(cx, bufs));
        if matches!(r, std::task::Poll::Ready(Ok(n)) if n > 0) {
            this.request = None; // answered: the next request gets its own time
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.get_mut().poll_io(cx, |io, cx| io.poll_flush(cx))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// Where an app's source lives, to match webhook pushes against.
#[derive(Clone, Debug)]
pub struct AppRoute {
    /// The app.
    pub name: String,
    /// The repository URL as configured.
    pub repo: String,
    /// The configured ref (`None`: the remote's HEAD, i.e. its default branch).
    pub reference: Option<String>,
    /// True when the app has pull-request previews (pull-request webhooks trigger them).
    pub previews: bool,
}

/// Webhook secrets per Git host.
#[derive(Clone, Default)]
pub struct WebhookSecrets {
    /// GitHub's HMAC key.
    pub github: Option<SecretString>,
    /// Gitea's HMAC key.
    pub gitea: Option<SecretString>,
    /// GitLab's token.
    pub gitlab: Option<SecretString>,
}

/// The server of an agent still waiting for its store at start: `/healthz` answers `ok` (the
/// process is alive) and everything else 503 `waiting for the store`: under `/api/` and
/// `/webhooks/` as JSON (`{"error": "...", "apps": []}`, the shape of the store-down answer),
/// elsewhere as text. A push announced by a webhook refused then is not lost: every app
/// fetches when the agent starts.
pub fn waiting_router() -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .fallback(|uri: axum::http::Uri| async move {
            const WHY: &str = "waiting for the store (see the log)";
            // The API and the webhooks answer JSON, as they do once the store answers.
            if uri.path().starts_with("/api/") || uri.path().starts_with("/webhooks/") {
                json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    json!({ "error": WHY, "apps": [] }),
                )
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, format!("{WHY}\n")).into_response()
            }
        })
}

/// What the handlers share.
#[derive(Clone)]
pub struct ServerState {
    /// The store (status records, readiness).
    pub store: Arc<dyn Store>,
    /// The running agent.
    pub handle: Handle,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The bearer token of the sync endpoint.
    pub token: Option<SecretString>,
    /// Webhook secrets.
    pub webhooks: WebhookSecrets,
    /// The apps' sources.
    pub apps: Arc<Vec<AppRoute>>,
    /// Bounds the pages and API reads built at once.
    pub readers: Readers,
}

/// How many pages and API answers (`/`, `/apps/...`, `GET /api/v1/apps...`) are built at once.
/// More wait up to [`READ_WAIT`], then get 503 with `Retry-After: 1`: a crowd of readers takes
/// at most this many cores' worth of work, and never the path reverts take. `/healthz`,
/// `/readyz`, `/metrics`, the webhooks and the sync endpoint are not limited.
pub const MAX_READS_IN_FLIGHT: usize = 2;

/// How long a page or API read waits for its turn before it is refused with 503.
pub const READ_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The turns of page and API reads: [`MAX_READS_IN_FLIGHT`] at once.
#[derive(Clone, Debug)]
pub struct Readers(Arc<tokio::sync::Semaphore>);

impl Default for Readers {
    fn default() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(MAX_READS_IN_FLIGHT)))
    }
}

/// Runs a page or API read in its turn, or answers 503 when none comes within [`READ_WAIT`].
async fn in_turn(
    State(readers): State<Readers>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    match tokio::time::timeout(READ_WAIT, readers.0.clone().acquire_owned()).await {
        Ok(Ok(_turn)) => next.run(req).await,
        _ => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::RETRY_AFTER, "1")],
            "busy: too many page and API reads at once; retry\n",
        )
            .into_response(),
    }
}

/// The router with every route of the module table.
pub fn router(state: ServerState) -> Router {
    let reads = Router::new()
        .route("/api/v1/apps", get(list_apps))
        .route("/api/v1/apps/{name}", get(get_app))
        .route("/", get(index_page))
        .route("/apps/{name}", get(app_page))
        .route("/api/v1/apps/{name}/previews", get(list_previews))
        .route("/api/v1/apps/{name}/previews/{number}", get(get_preview))
        .route("/apps/{name}/previews/{number}", get(preview_page))
        .route_layer(axum::middleware::from_fn_with_state(
            state.readers.clone(),
            in_turn,
        ));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/api/v1/apps/{name}/sync", post(sync_app))
        .route("/webhooks/github", post(github))
        .route("/webhooks/gitea", post(gitea))
        .route("/webhooks/gitlab", post(gitlab))
        .merge(reads)
        .layer(DefaultBodyLimit::max(MAX_WEBHOOK_BODY))
        .with_state(state)
}

fn json_response(status: StatusCode, v: Value) -> Response {
    (status, axum::Json(v)).into_response()
}

async fn readyz(State(s): State<ServerState>) -> Response {
    if let Err(e) = s.store.revision().await {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("store unreachable: {e}\n"),
        )
            .into_response();
    }
    let waiting = s.handle.readiness().waiting();
    if waiting.is_empty() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("first reconcile not finished: {}\n", waiting.join(", ")),
        )
            .into_response()
    }
}

async fn metrics(State(s): State<ServerState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.metrics.encode(),
    )
        .into_response()
}

/// The 503 answer when the store cannot be read: the error, and the statuses this agent last
/// computed (which say why its syncs fail), under `apps`.
fn store_unreadable(s: &ServerState, e: &crate::store::Error, only: Option<&str>) -> Response {
    let apps: Vec<AppStatus> = s
        .handle
        .latest()
        .all()
        .into_iter()
        .filter(|a| only.is_none_or(|n| a.name == n))
        .collect();
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        json!({
            "error": format!("cannot read the store: {}", crate::reconcile::error_chain(e)),
            "apps": apps,
        }),
    )
}

/// Every app's status: from memory for the apps this agent runs (see
/// [`crate::reconcile::Latest::current`]), from the store for the others (another replica's).
async fn statuses(s: &ServerState) -> Result<Vec<Arc<AppStatus>>, Response> {
    let latest = s.handle.latest();
    let current: Vec<Arc<AppStatus>> = s
        .apps
        .iter()
        .filter_map(|a| latest.current(&a.name))
        .collect();
    if current.len() == s.apps.len() {
        return Ok(current);
    }
    let stored = status::read_all(s.store.as_ref())
        .await
        .map_err(|e| store_unreadable(s, &e, None))?;
    Ok(stored
        .into_iter()
        .map(|a| latest.current(&a.name).unwrap_or_else(|| Arc::new(a)))
        .collect())
}

/// One app's status: from memory when this agent runs it, else from the store.
async fn app_status(
    s: &ServerState,
    name: &str,
) -> Result<Option<Arc<AppStatus>>, crate::store::Error> {
    if let Some(a) = s.handle.latest().current(name) {
        return Ok(Some(a));
    }
    Ok(status::read(s.store.as_ref(), name).await?.map(Arc::new))
}

/// Builds a large answer off the async workers (which run the reconciles).
async fn build(f: impl FnOnce() -> Response + Send + 'static) -> Response {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

async fn list_apps(State(s): State<ServerState>) -> Response {
    match statuses(&s).await {
        Ok(apps) => {
            build(move || {
                let apps: Vec<&AppStatus> = apps.iter().map(|a| &**a).collect();
                json_response(StatusCode::OK, json!({ "apps": apps }))
            })
            .await
        }
        Err(r) => r,
    }
}

async fn get_app(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    match app_status(&s, &name).await {
        Ok(Some(app)) => build(move || json_response(StatusCode::OK, json!(*app))).await,
        Ok(None) => json_response(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no app named `{name}`")}),
        ),
        Err(e) => store_unreadable(&s, &e, Some(&name)),
    }
}

/// Compares two secrets in constant time, their lengths included (it compares their SHA-256
/// digests).
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use sha2::Digest as _;
    let (a, b) = (sha2::Sha256::digest(a), sha2::Sha256::digest(b));
    bool::from(a.as_slice().ct_eq(b.as_slice()))
}

async fn sync_app(
    State(s): State<ServerState>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    // The scheme is case-insensitive (RFC 9110 section 11.1).
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token);
    let authorized = match (&s.token, given) {
        (Some(token), Some(given)) => {
            constant_time_eq(token.expose_secret().as_bytes(), given.trim().as_bytes())
        }
        _ => false,
    };
    if !authorized {
        let why = if s.token.is_none() {
            "manual syncs are off: set server.token"
        } else {
            "a valid `Authorization: Bearer <server.token>` header is required"
        };
        let mut resp = json_response(StatusCode::UNAUTHORIZED, json!({ "error": why }));
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer realm=\"driftless\""),
        );
        return resp;
    }
    if s.handle.manual_sync(&name) {
        tracing::info!(app = %name, "Manual sync requested");
        json_response(StatusCode::ACCEPTED, json!({ "triggered": [name] }))
    } else {
        json_response(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no app named `{name}`")}),
        )
    }
}

/// A repository URL reduced to `host/path`, lowercase, without scheme, credentials, port,
/// trailing `/` or `.git`, so that `https://github.com/Acme/Web.git` and
/// `git@github.com:acme/web` compare equal. Local paths are returned trimmed.
pub fn repo_key(url: &str) -> String {
    let u = url.trim().trim_end_matches('/');
    let u = u.strip_suffix(".git").unwrap_or(u);
    let (host, path) = if let Some((_, rest)) = u.split_once("://") {
        match rest.split_once('/') {
            Some((h, p)) => (h, p),
            None => (rest, ""),
        }
    } else if !u.starts_with('/')
        && !u.starts_with('.')
        && let Some((h, p)) = u.split_once(':')
    {
        (h, p)
    } else {
        return u.to_string();
    };
    let host = host.rsplit('@').next().unwrap_or(host);
    let host = host.split(':').next().unwrap_or(host);
    format!(
        "{}/{}",
        host.to_ascii_lowercase(),
        path.trim_start_matches('/').to_ascii_lowercase()
    )
}

/// [`repo_key`] of each non-empty URL.
fn repo_keys(urls: &[&str]) -> Vec<String> {
    urls.iter()
        .filter(|u| !u.is_empty())
        .map(|u| repo_key(u))
        .collect()
}

/// The apps a push of `git_ref` to a repository known by `urls` concerns: same repository, and
/// the app follows that ref (a branch or tag by name, a full ref, or the default branch when
/// the app gives no ref). Apps pinned to a commit id are never triggered.
pub fn matching_apps(
    apps: &[AppRoute],
    urls: &[&str],
    git_ref: &str,
    default_branch: Option<&str>,
) -> Vec<String> {
    let keys = repo_keys(urls);
    apps.iter()
        .filter(|a| keys.contains(&repo_key(&a.repo)))
        .filter(|a| match a.reference.as_deref() {
            None | Some("HEAD") => {
                default_branch.is_some_and(|b| git_ref == format!("refs/heads/{b}"))
            }
            Some(r) if r.starts_with("refs/") => git_ref == r,
            Some(r) => git_ref == format!("refs/heads/{r}") || git_ref == format!("refs/tags/{r}"),
        })
        .map(|a| a.name.clone())
        .collect()
}

fn hmac_ok(secret: &SecretString, body: &[u8], hex_sig: &str) -> bool {
    let Some(sig) = decode_hex(hex_sig.trim()) else {
        return false;
    };
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.expose_secret().as_bytes())
    else {
        return false;
    };
    mac.update(body);
    // `verify_slice` compares in constant time.
    mac.verify_slice(&sig).is_ok()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    // `from_str_radix` alone would take a sign (`+a`).
    if !s.len().is_multiple_of(2) || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn header_str<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn unauthorized(provider: &str) -> Response {
    tracing::warn!(provider, "Webhook with a bad or missing signature refused");
    json_response(
        StatusCode::UNAUTHORIZED,
        json!({"error": "bad or missing signature"}),
    )
}

fn not_configured(provider: &str) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        json!({"error": format!("no {provider} webhook: set server.webhooks.{provider}.secret")}),
    )
}

/// The 400 for a webhook body that is not JSON.
fn not_json() -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        json!({"error": "the body is not JSON"}),
    )
}

/// The strings at these JSON pointers of `v`, in order, skipping the absent ones.
fn strings_at<'v>(v: &'v Value, pointers: &[&str]) -> Vec<&'v str> {
    pointers
        .iter()
        .filter_map(|p| v.pointer(p).and_then(Value::as_str))
        .collect()
}

/// Where GitHub's push and pull-request payloads give the repository's URLs.
const GITHUB_REPOSITORY_URLS: &[&str] = &[
    "/repository/clone_url",
    "/repository/html_url",
    "/repository/ssh_url",
    "/repository/git_url",
];

/// Where Gitea's push and pull-request payloads give the repository's URLs.
const GITEA_REPOSITORY_URLS: &[&str] = &[
    "/repository/clone_url",
    "/repository/html_url",
    "/repository/ssh_url",
];

/// Triggers the apps a verified push concerns.
fn push(
    s: &ServerState,
    provider: &str,
    payload: &[u8],
    urls: &[&str],
    default_branch_field: &[&str],
) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(payload) else {
        return not_json();
    };
    let git_ref = v.get("ref").and_then(Value::as_str).unwrap_or_default();
    let found = strings_at(&v, urls);
    let default_branch = default_branch_field
        .iter()
        .find_map(|p| v.pointer(p).and_then(Value::as_str));
    let apps = matching_apps(&s.apps, &found, git_ref, default_branch);
    for app in &apps {
        s.handle.trigger(app);
    }
    tracing::info!(provider, git_ref, apps = ?apps, "Push webhook");
    json_response(StatusCode::OK, json!({ "triggered": apps }))
}

/// The apps with previews whose repository is one of `urls`.
pub fn matching_preview_apps(apps: &[AppRoute], urls: &[&str]) -> Vec<String> {
    let keys = repo_keys(urls);
    apps.iter()
        .filter(|a| a.previews && keys.contains(&repo_key(&a.repo)))
        .map(|a| a.name.clone())
        .collect()
}

/// Triggers a preview pass of the apps a verified pull-request (or merge-request) event
/// concerns: any action, since opening, pushing, closing and merging all change what there is
/// to preview.
fn pull_request(s: &ServerState, provider: &str, payload: &[u8], urls: &[&str]) -> Response {
    let Ok(v) = serde_json::from_slice::<Value>(payload) else {
        return not_json();
    };
    let found = strings_at(&v, urls);
    let apps = matching_preview_apps(&s.apps, &found);
    for app in &apps {
        s.handle.trigger_previews(app);
    }
    tracing::info!(provider, apps = ?apps, "Pull-request webhook");
    json_response(StatusCode::OK, json!({ "previews": apps }))
}

fn ignored(event: &str) -> Response {
    json_response(StatusCode::ACCEPTED, json!({ "ignored": event }))
}

/// How one Git host announces pushes and pull requests to a webhook, per its documentation:
/// how the delivery is signed, which header names the event, which events are pushes and
/// which pull requests, and where the payload gives the repository's URLs and default branch.
struct WebhookHost {
    /// `github`, `gitea`, `gitlab`: the path `/webhooks/<name>` and the config's key.
    name: &'static str,
    /// The secret configured for it.
    secret: fn(&WebhookSecrets) -> Option<&SecretString>,
    /// True when the delivery carries a valid signature for `secret`.
    signed: fn(&SecretString, &HeaderMap, &[u8]) -> bool,
    /// The header naming the event.
    event_header: &'static str,
    push_events: &'static [&'static str],
    pull_request_events: &'static [&'static str],
    push_urls: &'static [&'static str],
    pull_request_urls: &'static [&'static str],
    default_branch: &'static [&'static str],
}

/// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`, `X-GitHub-Event`.
const GITHUB_HOOK: WebhookHost = WebhookHost {
    name: "github",
    secret: |w| w.github.as_ref(),
    signed: |secret, headers, body| {
        header_str(headers, "x-hub-signature-256")
            .and_then(|v| v.strip_prefix("sha256="))
            .is_some_and(|sig| hmac_ok(secret, body, sig))
    },
    event_header: "x-github-event",
    push_events: &["push"],
    pull_request_events: &["pull_request"],
    push_urls: GITHUB_REPOSITORY_URLS,
    pull_request_urls: GITHUB_REPOSITORY_URLS,
    default_branch: &["/repository/default_branch", "/repository/master_branch"],
};

/// Gitea: `X-Gitea-Signature: <hex HMAC-SHA256 of the body>`, `X-Gitea-Event` (a push to a
/// pull request is `pull_request_sync` in some versions).
const GITEA_HOOK: WebhookHost = WebhookHost {
    name: "gitea",
    secret: |w| w.gitea.as_ref(),
    signed: |secret, headers, body| {
        header_str(headers, "x-gitea-signature").is_some_and(|sig| hmac_ok(secret, body, sig))
    },
    event_header: "x-gitea-event",
    push_events: &["push"],
    pull_request_events: &["pull_request", "pull_request_sync"],
    push_urls: GITEA_REPOSITORY_URLS,
    pull_request_urls: GITEA_REPOSITORY_URLS,
    default_branch: &["/repository/default_branch"],
};

/// GitLab: the shared secret itself in `X-Gitlab-Token`, `X-Gitlab-Event`.
const GITLAB_HOOK: WebhookHost = WebhookHost {
    name: "gitlab",
    secret: |w| w.gitlab.as_ref(),
    signed: |secret, headers, _| {
        let given = header_str(headers, "x-gitlab-token").unwrap_or_default();
        constant_time_eq(secret.expose_secret().as_bytes(), given.as_bytes())
    },
    event_header: "x-gitlab-event",
    push_events: &["Push Hook", "Tag Push Hook"],
    pull_request_events: &["Merge Request Hook"],
    push_urls: &[
        "/project/git_http_url",
        "/project/git_ssh_url",
        "/project/web_url",
        "/repository/git_http_url",
        "/repository/git_ssh_url",
        "/repository/homepage",
    ],
    pull_request_urls: &[
        "/project/git_http_url",
        "/project/git_ssh_url",
        "/project/web_url",
        "/repository/url",
        "/repository/homepage",
    ],
    default_branch: &["/project/default_branch"],
};

/// The one webhook handler: checks the delivery the way `host` signs it, then triggers the
/// apps a push concerns, or the previews a pull-request event concerns.
fn webhook(
    host: &WebhookHost,
    s: &ServerState,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(secret) = (host.secret)(&s.webhooks) else {
        return not_configured(host.name);
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    if !(host.signed)(secret, headers, &body) {
        return unauthorized(host.name);
    }
    let event = header_str(headers, host.event_header).unwrap_or_default();
    if host.push_events.contains(&event) {
        push(s, host.name, &body, host.push_urls, host.default_branch)
    } else if host.pull_request_events.contains(&event) {
        pull_request(s, host.name, &body, host.pull_request_urls)
    } else {
        ignored(event)
    }
}

async fn github(
    State(s): State<ServerState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    webhook(&GITHUB_HOOK, &s, &headers, body)
}

async fn gitea(
    State(s): State<ServerState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    webhook(&GITEA_HOOK, &s, &headers, body)
}

async fn gitlab(
    State(s): State<ServerState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    webhook(&GITLAB_HOOK, &s, &headers, body)
}

/// Escapes text for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            // NUL and other control characters (terminal escapes) are never echoed.
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// How often the status pages reload themselves, in seconds.
pub const PAGE_REFRESH_SECONDS: u32 = 5;

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{PAGE_REFRESH_SECONDS}\"><title>{}</title><style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}}.bad{{color:#b00020;font-weight:bold}}.ok{{color:#1b5e20}}</style></head><body>{body}</body></html>",
        esc(title)
    ))
}

/// How long ago `rfc3339` was, for people: `3m 12s`; empty when it does not parse.
fn age(rfc3339: &str) -> String {
    let Ok(t) = humantime::parse_rfc3339(rfc3339) else {
        return String::new();
    };
    let secs = std::time::SystemTime::now()
        .duration_since(t)
        .unwrap_or_default()
        .as_secs();
    humantime::format_duration(std::time::Duration::from_secs(secs)).to_string()
}

/// The conditions that say something is wrong (`Ready`, `Healthy`, `SourceAvailable`,
/// `Progressing` or `SyncWindow` False; `Stale` or `Contested` True), as `Type: reason: message`.
fn failing_conditions(app: &AppStatus) -> Vec<String> {
    app.conditions
        .iter()
        .filter(|c| match c.type_ {
            ConditionType::Stale | ConditionType::Contested => c.status == ConditionStatus::True,
            ConditionType::Reconciling => false,
            _ => c.status == ConditionStatus::False,
        })
        .map(|c| format!("{}: {}: {}", c.type_, c.reason, c.message))
        .collect()
}

async fn index_page(State(s): State<ServerState>) -> Response {
    let apps = match statuses(&s).await {
        Ok(a) => a,
        Err(r) => return r,
    };
    let mut rows = String::new();
    for a in &apps {
        let failing = failing_conditions(a);
        let problems = if failing.is_empty() {
            "<span class=\"ok\">none</span>".to_string()
        } else {
            failing
                .iter()
                .map(|f| format!("<div class=\"bad\">{}</div>", esc(f)))
                .collect()
        };
        let gap = a.out_of_sync_since.as_deref().map_or("-".to_string(), |t| {
            format!(
                "<span class=\"bad\">{}</span> (since {})",
                esc(&age(t)),
                esc(t)
            )
        });
        let last_sync = a
            .condition(ConditionType::Ready)
            .map_or("-".to_string(), |c| esc(&c.last_transition_time));
        rows.push_str(&format!(
            "<tr><td><a href=\"apps/{}\">{}</a></td><td>{}</td><td>{}</td><td><code>{}</code></td><td>{gap}</td><td>{last_sync}</td><td>{problems}</td></tr>",
            esc(&a.name),
            esc(&a.name),
            a.sync,
            a.health,
            esc(a.revision.as_deref().map_or("-", |r| &r[..r.len().min(12)])),
        ));
    }
    page(
        "driftless",
        &format!("<h1>driftless</h1><table><tr><th>app</th><th>sync</th><th>health</th><th>revision</th><th>out of sync for</th><th>Ready last changed</th><th>failing conditions</th></tr>{rows}</table><p>Refreshes every {PAGE_REFRESH_SECONDS} s.</p>"),
    )
    .into_response()
}

async fn app_page(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    let app = match app_status(&s, &name).await {
        Ok(Some(a)) => a,
        Ok(None) => {
            return (
                StatusCode::NOT_FOUND,
                page("not found", &format!("<p>No app named {}.</p>", esc(&name))),
            )
                .into_response();
        }
        Err(e) => {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!("cannot read the store: {e}"),
            )
                .into_response();
        }
    };
    // Only apps with previews have preview records to read.
    let previews = if s.apps.iter().any(|a| a.name == name && a.previews) {
        preview::list(s.store.as_ref(), &name)
            .await
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    build(move || render_app_page(&app, &name, &previews)).await
}

/// The page of one app: its status, conditions, diagnostics, objects and previews.
fn render_app_page(app: &AppStatus, name: &str, previews: &[PreviewRecord]) -> Response {
    let mut body = format!(
        "<h1>{}</h1><p>sync <b>{}</b>, health <b>{}</b>, revision <code>{}</code> (newest tried <code>{}</code>){}</p>",
        esc(&app.name),
        app.sync,
        app.health,
        esc(app.revision.as_deref().unwrap_or("-")),
        esc(app.last_attempted_revision.as_deref().unwrap_or("-")),
        app.out_of_sync_since
            .as_deref()
            .map_or(String::new(), |t| format!(
                ", <span class=\"bad\">out of sync for {}</span> (since {})",
                esc(&age(t)),
                esc(t)
            )),
    );
    body.push_str("<h2>Conditions</h2><table><tr><th>type</th><th>status</th><th>reason</th><th>message</th><th>since</th></tr>");
    for c in &app.conditions {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(c.type_.as_str()),
            esc(c.status.as_str()),
            esc(c.reason.as_str()),
            esc(&c.message),
            esc(&c.last_transition_time)
        ));
    }
    body.push_str("</table>");
    if !app.diagnostics.is_empty() {
        body.push_str("<h2>Diagnostics</h2><ul>");
        for d in &app.diagnostics {
            body.push_str(&format!("<li><code>{}</code></li>", esc(&d.to_string())));
        }
        body.push_str("</ul>");
    }
    body.push_str(
        "<h2>Objects</h2><table><tr><th>object</th><th>sync</th><th>health</th><th>why (health)</th><th>why (sync)</th></tr>",
    );
    for r in &app.resources {
        body.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&r.key().to_string()),
            r.sync,
            r.health,
            esc(r.health_message.as_deref().unwrap_or("")),
            esc(r.message.as_deref().unwrap_or(""))
        ));
    }
    body.push_str("</table>");
    if !previews.is_empty() {
        body.push_str("<h2>Pull-request previews</h2><ul>");
        for p in previews {
            body.push_str(&format!(
                "<li><a href=\"/apps/{}/previews/{}\">{}</a> <code>{}</code>: {}</li>",
                esc(name),
                esc(&p.number),
                esc(&p.number),
                esc(&p.revision[..p.revision.len().min(12)]),
                esc(&p.description)
            ));
        }
        body.push_str("</ul>");
    }
    page(&app.name, &body).into_response()
}

async fn list_previews(State(s): State<ServerState>, Path(name): Path<String>) -> Response {
    if !s.apps.iter().any(|a| a.name == name) {
        return json_response(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no app named {name}")}),
        );
    }
    match preview::list(s.store.as_ref(), &name).await {
        Ok(list) => json_response(StatusCode::OK, json!({ "previews": list })),
        Err(e) => json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": format!("cannot read the store: {e}")}),
        ),
    }
}

/// The record of one preview, or the response to give instead.
async fn preview_record(
    s: &ServerState,
    name: &str,
    number: &str,
) -> Result<PreviewRecord, Response> {
    match preview::read(s.store.as_ref(), name, number).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(json_response(
            StatusCode::NOT_FOUND,
            json!({"error": format!("no preview {number} of app {name}")}),
        )),
        Err(e) => Err(json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": format!("cannot read the store: {e}")}),
        )),
    }
}

async fn get_preview(
    State(s): State<ServerState>,
    Path((name, number)): Path<(String, String)>,
) -> Response {
    match preview_record(&s, &name, &number).await {
        Ok(r) => json_response(StatusCode::OK, json!(r)),
        Err(resp) => resp,
    }
}

/// The preview as a page (the commit status's link), or as JSON when asked with
/// `Accept: application/json`.
async fn preview_page(
    State(s): State<ServerState>,
    Path((name, number)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let wants_json = header_str(&headers, "accept").is_some_and(|a| a.contains("application/json"));
    let rec = match preview_record(&s, &name, &number).await {
        Ok(r) => r,
        Err(resp) if wants_json => return resp,
        Err(resp) => {
            let status = resp.status();
            return (
                status,
                page(
                    "not found",
                    &format!("<p>No preview {} of app {}.</p>", esc(&number), esc(&name)),
                ),
            )
                .into_response();
        }
    };
    if wants_json {
        return json_response(StatusCode::OK, json!(rec));
    }
    let mut body = format!(
        "<h1>{} preview {}</h1><p><code>{}</code> at <code>{}</code>: <b>{}</b>, {}</p>",
        esc(&rec.app),
        esc(&rec.number),
        esc(&rec.git_ref),
        esc(&rec.revision),
        format!("{:?}", rec.state).to_lowercase(),
        esc(&rec.description),
    );
    if let Some(ns) = &rec.namespace {
        body.push_str(&format!(
            "<p>Deployed to namespace <code>{}</code>: {}</p>",
            esc(ns),
            rec.health.map_or("unknown".to_string(), |h| h.to_string())
        ));
    }
    if !rec.diagnostics.is_empty() {
        body.push_str("<h2>Diagnostics</h2><ul>");
        for d in &rec.diagnostics {
            body.push_str(&format!("<li><code>{}</code></li>", esc(&d.to_string())));
        }
        body.push_str("</ul>");
    }
    if !rec.diff.is_empty() {
        body.push_str(&format!("<h2>Diff</h2><pre>{}</pre>", esc(&rec.diff)));
    }
    if !rec.resources.is_empty() {
        body.push_str(
            "<h2>Objects</h2><table><tr><th>object</th><th>sync</th><th>health</th></tr>",
        );
        for r in &rec.resources {
            body.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&r.key().to_string()),
                r.sync,
                r.health
            ));
        }
        body.push_str("</table>");
    }
    page(&format!("{} preview {}", rec.app, rec.number), &body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn hex_signatures_take_hex_digits_only() {
        assert_eq!(decode_hex("0aff"), Some(vec![0x0a, 0xff]));
        assert_eq!(decode_hex("0AFF"), Some(vec![0x0a, 0xff]));
        assert_eq!(decode_hex("+a"), None, "from_str_radix alone takes a sign");
        assert_eq!(decode_hex("-a"), None);
        assert_eq!(decode_hex("0g"), None);
        assert_eq!(decode_hex("abc"), None);
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq(b"sync-token", b"sync-token"));
        assert!(!constant_time_eq(b"sync-token", b"sync-toke"));
        assert!(!constant_time_eq(b"sync-token", b"sync-token "));
        assert!(!constant_time_eq(b"", b"x"));
    }

    /// Serves `/` on a guarded listener and returns its address.
    async fn guarded(max: usize, idle: std::time::Duration) -> std::net::SocketAddr {
        guarded_with(max, idle, MAX_CONNECTIONS_PER_CLIENT, REQUEST_TIMEOUT).await
    }

    /// [`guarded`] with these client limits.
    async fn guarded_with(
        max: usize,
        idle: std::time::Duration,
        per_client: usize,
        request_timeout: std::time::Duration,
    ) -> std::net::SocketAddr {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = Router::new().route("/", get(|| async { "ok" }));
        let listener =
            GuardedListener::new(tcp, max, idle).with_client_limits(per_client, request_timeout);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        addr
    }

    #[tokio::test]
    async fn a_read_that_gets_no_turn_within_the_wait_is_refused_with_retry_after() {
        let readers = Readers::default();
        // Every turn taken, as by MAX_READS_IN_FLIGHT slow answers.
        let _taken = readers
            .0
            .clone()
            .acquire_many_owned(MAX_READS_IN_FLIGHT as u32)
            .await
            .unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route_layer(axum::middleware::from_fn_with_state(readers, in_turn));
        tokio::spawn(async move { axum::serve(tcp, app).await.unwrap() });
        let started = std::time::Instant::now();
        let answer = get_root(addr).await;
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: 1"),
            "{answer}"
        );
        assert!(started.elapsed() >= READ_WAIT);
    }

    async fn get_root(addr: std::net::SocketAddr) -> String {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn a_half_sent_request_is_cut_off_after_the_idle_timeout() {
        let addr = guarded(8, std::time::Duration::from_millis(200)).await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"POST /webhooks/github HTTP/1.1\r\nContent-Length: 1000\r\n\r\nx")
            .await
            .unwrap();
        let mut buf = Vec::new();
        // Without the timeout this read would wait forever (the test's own bound is 20 s).
        // (Closed means end of file or a reset: either ends the read.)
        let _closed =
            tokio::time::timeout(std::time::Duration::from_secs(20), c.read_to_end(&mut buf))
                .await
                .expect("the server closes an idle connection");
        assert!(
            get_root(addr).await.ends_with("ok"),
            "the server still serves"
        );
    }

    /// A connection from `source` (any loopback address) to `addr`.
    async fn connect_from(source: &str, addr: std::net::SocketAddr) -> tokio::net::TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
        socket.connect(addr).await.unwrap()
    }

    #[tokio::test]
    async fn a_request_trickled_in_a_line_at_a_time_is_cut_off_at_the_request_timeout() {
        let addr = guarded_with(
            8,
            std::time::Duration::from_secs(60),
            8,
            std::time::Duration::from_millis(500),
        )
        .await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let start = std::time::Instant::now();
        // One header line every 100 ms: the 60 s idle timer never fires.
        let mut closed = false;
        for i in 0..100 {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            if c.write_all(format!("X-Slow-{i}: 1\r\n").as_bytes())
                .await
                .is_err()
            {
                closed = true;
                break;
            }
            let mut b = [0u8; 1];
            if let Ok(Ok(0)) =
                tokio::time::timeout(std::time::Duration::from_millis(1), c.read(&mut b)).await
            {
                closed = true;
                break;
            }
        }
        assert!(closed, "the trickling request was never cut off");
        assert!(
            start.elapsed() < std::time::Duration::from_secs(5),
            "cut off after {:?}",
            start.elapsed()
        );
        assert!(get_root(addr).await.ends_with("ok"));
    }

    #[tokio::test]
    async fn a_guarded_connection_writes_vectored_and_each_answer_restarts_the_request_time() {
        // Vectored, as the TCP stream: hyper then queues an answer's body instead of copying it
        // into a buffer the connection keeps.
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let mut listener = GuardedListener::new(tcp, 8, std::time::Duration::from_secs(60));
        let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut io, _) = axum::serve::Listener::accept(&mut listener).await;
        assert!(tokio::io::AsyncWrite::is_write_vectored(&io));
        let parts = [
            std::io::IoSlice::new(b"head "),
            std::io::IoSlice::new(b"body"),
        ];
        let n = io.write_vectored(&parts).await.unwrap();
        let mut got = vec![0u8; n];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, &b"head body"[..n]);

        // Answers written so end each request's time: a kept-alive connection asked again after
        // longer than the request timeout is still answered.
        let addr = guarded_with(
            8,
            std::time::Duration::from_secs(60),
            8,
            std::time::Duration::from_millis(300),
        )
        .await;
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        for _ in 0..2 {
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            while !answer.ends_with(b"ok") {
                let mut b = [0u8; 256];
                let n = tokio::time::timeout(std::time::Duration::from_secs(5), c.read(&mut b))
                    .await
                    .expect("answered")
                    .unwrap();
                assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
                answer.extend_from_slice(&b[..n]);
            }
            tokio::time::sleep(std::time::Duration::from_millis(600)).await;
        }
    }

    #[tokio::test]
    async fn one_client_cannot_take_every_slot() {
        let addr = guarded_with(
            8,
            std::time::Duration::from_secs(60),
            4,
            std::time::Duration::from_secs(60),
        )
        .await;
        // One address opens twice the server's slots and says nothing.
        let mut held = Vec::new();
        for _ in 0..16 {
            held.push(connect_from("127.0.0.2", addr).await);
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        // Beyond its share, its connections are closed at once.
        let mut refused = 0;
        for c in &mut held {
            let mut b = [0u8; 1];
            if let Ok(Ok(0) | Err(_)) =
                tokio::time::timeout(std::time::Duration::from_millis(50), c.read(&mut b)).await
            {
                refused += 1;
            }
        }
        assert_eq!(refused, 12, "4 kept, 12 closed");
        // Another client is served at once.
        let answer = tokio::time::timeout(std::time::Duration::from_secs(2), get_root(addr))
            .await
            .expect("served while the other client holds its share");
        assert!(answer.ends_with("ok"));
    }

    #[tokio::test]
    async fn connections_beyond_the_limit_wait_for_a_free_slot() {
        let addr = guarded(1, std::time::Duration::from_secs(60)).await;
        // One silent connection holds the only slot.
        let holder = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let waiting = tokio::spawn(get_root(addr));
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "a second connection is not served");
        drop(holder);
        let answer = tokio::time::timeout(std::time::Duration::from_secs(20), waiting)
            .await
            .expect("served once the slot is free")
            .unwrap();
        assert!(answer.ends_with("ok"), "{answer}");
    }

    #[test]
    fn repository_urls_compare_by_host_and_path() {
        let k = repo_key("https://github.com/Acme/Web.git");
        assert_eq!(k, "github.com/acme/web");
        assert_eq!(repo_key("git@github.com:acme/web.git"), k);
        assert_eq!(repo_key("ssh://git@github.com:22/acme/web"), k);
        assert_eq!(repo_key("https://user:pw@github.com/acme/web/"), k);
        assert_ne!(repo_key("https://github.com/acme/other"), k);
        assert_eq!(repo_key("/srv/git/repo"), "/srv/git/repo");
    }

    #[test]
    fn pushes_match_the_repository_and_the_ref_each_app_follows() {
        let apps = vec![
            AppRoute {
                name: "head".into(),
                repo: "https://github.com/acme/web.git".into(),
                reference: None,
                previews: true,
            },
            AppRoute {
                name: "main".into(),
                repo: "https://github.com/acme/web".into(),
                reference: Some("main".into()),
                previews: false,
            },
            AppRoute {
                name: "stage".into(),
                repo: "https://github.com/acme/web".into(),
                reference: Some("staging".into()),
                previews: false,
            },
            AppRoute {
                name: "tag".into(),
                repo: "https://github.com/acme/web".into(),
                reference: Some("v1".into()),
                previews: false,
            },
            AppRoute {
                name: "pinned".into(),
                repo: "https://github.com/acme/web".into(),
                reference: Some("0123456789abcdef0123456789abcdef01234567".into()),
                previews: false,
            },
            AppRoute {
                name: "other".into(),
                repo: "https://github.com/acme/api".into(),
                reference: None,
                previews: true,
            },
        ];
        let urls = [
            "https://github.com/acme/web.git",
            "git@github.com:acme/web.git",
        ];
        assert_eq!(
            matching_apps(&apps, &urls, "refs/heads/main", Some("main")),
            vec!["head", "main"]
        );
        assert_eq!(
            matching_apps(&apps, &urls, "refs/heads/staging", Some("main")),
            vec!["stage"]
        );
        assert_eq!(
            matching_apps(&apps, &urls, "refs/tags/v1", Some("main")),
            vec!["tag"]
        );
        assert_eq!(
            matching_preview_apps(&apps, &urls),
            vec!["head"],
            "pull requests concern the apps of that repository with previews"
        );
        assert!(
            matching_apps(
                &apps,
                &["https://github.com/acme/elsewhere"],
                "refs/heads/main",
                Some("main")
            )
            .is_empty()
        );
    }

    #[test]
    fn hmac_signatures_are_checked_over_the_raw_body() {
        let secret = SecretString::from("It's a Secret to Everybody");
        // The example of GitHub's documentation ("Validating webhook deliveries").
        let body = b"Hello, World!";
        let sig = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(hmac_ok(&secret, body, sig));
        assert!(!hmac_ok(&secret, b"Hello, World?", sig));
        assert!(!hmac_ok(&secret, body, "zz"));
        assert!(!hmac_ok(&SecretString::from("other"), body, sig));
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
        assert_eq!(esc("a\0b\u{1b}[31mc"), "a\u{fffd}b\u{fffd}[31mc");
    }
}
