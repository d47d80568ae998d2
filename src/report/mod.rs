//! Commit statuses: what to post, de-duplication, and posting beside reconcile.
//!
//! Split the way linkerd's status controller is: a synchronous [`Reporter`] (one per app, owned
//! by its reconcile loop) works out *what* each commit should show ([`derive`]), drops what it
//! already asked for, and pushes the rest onto a [`Queue`]; an async [`Writer`] does the HTTP,
//! with retries and the provider's limits. The queue keeps only the newest status per
//! (provider, commit, context), so a slow or failing Git host never delays a sync and never
//! receives stale states.
//!
//! States and descriptions follow ARCHITECTURE.md section 7: `pending` while a revision is applied
//! or objects are not ready, `success` only when synced and healthy, `failure` when degraded,
//! `error` when a revision cannot be parsed or applied or the source fails. Descriptions are
//! cut to 140 characters and contexts to 255, on character boundaries.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use tracing::Instrument;

use crate::health::Health;
use crate::metrics::Metrics;

mod bitbucket;
mod config;
mod gitea;
mod github;
mod gitlab;
mod host;

pub use config::StatusConfig;

use host::{Host, LatestQuery, Repo};

/// Commit-status providers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Provider {
    /// GitHub and GitHub Enterprise.
    Github,
    /// GitLab (gitlab.com or self-managed).
    Gitlab,
    /// Gitea and Forgejo.
    Gitea,
    /// Bitbucket Cloud.
    Bitbucket,
}

impl Provider {
    /// Lowercase name, as in the config and the metrics.
    pub fn name(self) -> &'static str {
        match self {
            Provider::Github => "github",
            Provider::Gitlab => "gitlab",
            Provider::Gitea => "gitea",
            Provider::Bitbucket => "bitbucket",
        }
    }

    /// The API base used when `apiUrl` is left out (`None` for Gitea, which has no public
    /// default).
    pub fn default_api_url(self) -> Option<&'static str> {
        match self {
            Provider::Github => Some("https://api.github.com"),
            Provider::Gitlab => Some("https://gitlab.com"),
            Provider::Gitea => None,
            Provider::Bitbucket => Some("https://api.bitbucket.org"),
        }
    }
}

/// Longest description, in characters (GitHub's limit).
pub const MAX_DESCRIPTION: usize = 140;
/// Longest context, in characters (GitHub's limit).
pub const MAX_CONTEXT: usize = 255;
/// Longest Bitbucket build-status key, in characters.
pub const MAX_BITBUCKET_KEY: usize = 40;

/// A commit status, in GitHub's vocabulary (serialized in lowercase, as GitHub writes it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Being applied, or not ready yet.
    Pending,
    /// Synced and healthy.
    Success,
    /// Applied but degraded (or, later, past its deadline or stale).
    Failure,
    /// Cannot be parsed or applied, or the source fails.
    Error,
}

/// One status to show on one commit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitStatus {
    /// The commit id.
    pub sha: String,
    /// `driftless/<app>`, at most 255 characters.
    pub context: String,
    /// The state.
    pub state: State,
    /// What is true, at most 140 characters.
    pub description: String,
    /// `<externalUrl>/apps/<app>`, when `server.externalUrl` is set.
    pub target_url: Option<String>,
}

/// Cuts `s` to at most `max` characters (not bytes), ending with `…` when cut.
pub fn truncate_chars(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// What the reconcile knows about one app, enough to derive its commit statuses.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// The app.
    pub app: &'a str,
    /// The revision in force, if any.
    pub in_force: Option<&'a str>,
    /// How many objects it declares.
    pub objects: usize,
    /// True while the revision in force is being applied for the first time.
    pub applying: bool,
    /// Why the revision in force is not fully applied (source failing, store failing, an
    /// ownership conflict), if so.
    pub in_force_error: Option<String>,
    /// Declared objects that differ from Git.
    pub out_of_sync: usize,
    /// Objects not healthy (Progressing or Missing).
    pub not_ready: usize,
    /// The app's health.
    pub health: Health,
    /// A newer revision that was tried and not applied, and why.
    pub rejected: Option<(&'a str, String)>,
    /// Why the revision in force counts as failing though applied: past its progress deadline,
    /// or out of sync past `staleAfter`.
    pub failing: Option<String>,
    /// Why syncs are held (a sync window), when they are and something differs.
    pub held: Option<String>,
}

/// The commit statuses an app's state calls for: one on the revision in force, and an `error`
/// on a newer revision that could not be applied. Pure.
pub fn derive(f: &Facts<'_>, external_url: Option<&str>) -> Vec<CommitStatus> {
    let context = truncate_chars(&format!("driftless/{}", f.app), MAX_CONTEXT);
    let target_url = external_url.map(|u| format!("{}/apps/{}", u.trim_end_matches('/'), f.app));
    let status = |sha: &str, state: State, description: String| CommitStatus {
        sha: sha.to_string(),
        context: context.clone(),
        state,
        description: truncate_chars(&description, MAX_DESCRIPTION),
        target_url: target_url.clone(),
    };
    let mut out = Vec::new();
    if let Some(sha) = f.in_force {
        let n = f.objects;
        let (state, description) = if f.applying {
            (
                State::Pending,
                format!("applying {}", crate::status::count(n, "object")),
            )
        } else if let Some(e) = &f.in_force_error {
            (State::Error, e.clone())
        } else if let Some(why) = &f.failing {
            (State::Failure, why.clone())
        } else if let Some(why) = &f.held {
            (State::Pending, why.clone())
        } else if f.health == Health::Degraded {
            (
                State::Failure,
                format!("applied {}, degraded", crate::status::count(n, "object")),
            )
        } else if f.out_of_sync > 0 {
            (
                State::Pending,
                format!(
                    "{} of {} differ from Git",
                    f.out_of_sync,
                    crate::status::count(n, "object")
                ),
            )
        } else if f.not_ready > 0 || f.health != Health::Healthy {
            (
                State::Pending,
                format!(
                    "synced {}, {} not ready",
                    crate::status::count(n, "object"),
                    f.not_ready
                ),
            )
        } else {
            (
                State::Success,
                format!("synced {}, healthy", crate::status::count(n, "object")),
            )
        };
        out.push(status(sha, state, description));
    }
    if let Some((sha, why)) = &f.rejected
        && Some(*sha) != f.in_force
    {
        out.push(status(sha, State::Error, why.clone()));
    }
    out
}

/// The key of a pending or posted status: (provider target, commit, context).
type Key = (String, String, String);

/// An update waiting to be posted.
#[derive(Clone)]
struct Update {
    provider: Arc<dyn ProviderClient>,
    status: CommitStatus,
}

#[derive(Default)]
struct QueueInner {
    order: VecDeque<Key>,
    latest: HashMap<Key, Update>,
}

/// The channel between reporters and the writer: the newest update per key, in arrival order.
#[derive(Clone, Default)]
pub struct Queue {
    inner: Arc<Mutex<QueueInner>>,
    notify: Arc<Notify>,
}

impl Queue {
    fn push(&self, u: Update) {
        let key = (
            u.provider.target(),
            u.status.sha.clone(),
            u.status.context.clone(),
        );
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if q.latest.insert(key.clone(), u).is_none() {
            q.order.push_back(key);
        }
        drop(q);
        self.notify.notify_one();
    }

    fn pop(&self) -> Option<(Key, Update)> {
        let mut q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        while let Some(key) = q.order.pop_front() {
            if let Some(u) = q.latest.remove(&key) {
                return Some((key, u));
            }
        }
        None
    }

    fn has(&self, key: &Key) -> bool {
        let q = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        q.latest.contains_key(key)
    }

    /// How many updates wait.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .latest
            .len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One app's reporter: derives its statuses and queues those it has not asked for yet.
pub struct Reporter {
    provider: Arc<dyn ProviderClient>,
    external_url: Option<String>,
    queue: Queue,
    sent: HashMap<(String, String), (State, String)>,
}

impl Reporter {
    /// A reporter posting through `provider` via `queue`.
    pub fn new(
        provider: Arc<dyn ProviderClient>,
        external_url: Option<String>,
        queue: Queue,
    ) -> Self {
        Self {
            provider,
            external_url,
            queue,
            sent: HashMap::new(),
        }
    }

    /// Queues the statuses `facts` call for, except those already asked for with the same
    /// state and description. Cheap and synchronous: it never waits on the Git host.
    pub fn observe(&mut self, facts: &Facts<'_>) {
        for s in derive(facts, self.external_url.as_deref()) {
            let key = (s.sha.clone(), s.context.clone());
            let value = (s.state, s.description.clone());
            if self.sent.get(&key) == Some(&value) {
                continue;
            }
            self.sent.insert(key, value);
            self.queue.push(Update {
                provider: self.provider.clone(),
                status: s,
            });
        }
    }
}

impl Reporter {
    /// Queues `status` as given (a preview's), unless it was already asked for with the same
    /// state and description. Its context and description are cut to the providers' limits.
    pub fn post(&mut self, mut status: CommitStatus) {
        status.context = truncate_chars(&status.context, MAX_CONTEXT);
        status.description = truncate_chars(&status.description, MAX_DESCRIPTION);
        let key = (status.sha.clone(), status.context.clone());
        let value = (status.state, status.description.clone());
        if self.sent.get(&key) == Some(&value) {
            return;
        }
        self.sent.insert(key, value);
        self.queue.push(Update {
            provider: self.provider.clone(),
            status,
        });
    }

    /// The provider it posts through (to comment with the same credentials).
    pub fn provider(&self) -> Arc<dyn ProviderClient> {
        self.provider.clone()
    }

    /// `<externalUrl>` when set.
    pub fn external_url(&self) -> Option<&str> {
        self.external_url.as_deref()
    }
}

/// How a request to a provider failed.
#[derive(Debug, thiserror::Error)]
pub enum PostError {
    /// 5xx, 429, or a rate-limit 403: worth retrying, after `after` when the provider said
    /// (`Retry-After`).
    #[error("{provider} answered {status}; retrying")]
    Retry {
        /// The provider.
        provider: &'static str,
        /// The HTTP status, or 0 for a network error.
        status: u16,
        /// The provider's `Retry-After`, if any.
        after: Option<Duration>,
    },
    /// The provider's cap on statuses per commit and context is reached (GitHub: 1000).
    #[error("{provider}: the commit has the maximum number of statuses for this context")]
    Capped {
        /// The provider.
        provider: &'static str,
    },
    /// Anything else (401, 403, 404, a bad request): not retried.
    #[error("{provider} answered {status}: {message}")]
    Failed {
        /// The provider.
        provider: &'static str,
        /// The HTTP status, or 0 for a network error.
        status: u16,
        /// The start of the response body, or the network error.
        message: String,
    },
}

/// A Git host's commit-status API.
#[async_trait]
pub trait ProviderClient: Send + Sync {
    /// `github`, `gitlab`, `gitea` or `bitbucket`.
    fn name(&self) -> &'static str;
    /// Identifies the API and repository (for de-duplication keys).
    fn target(&self) -> String;
    /// The provider's word for a state (GitLab says `running`, Bitbucket `INPROGRESS`...).
    fn native_state(&self, state: State) -> &'static str;
    /// Posts a status.
    ///
    /// # Errors
    ///
    /// See [`PostError`].
    async fn post(&self, status: &CommitStatus) -> Result<(), PostError>;
    /// The provider's latest status for (commit, context) as (native state, description), or
    /// `None` when it has none.
    ///
    /// # Errors
    ///
    /// See [`PostError`].
    async fn latest(&self, sha: &str, context: &str)
    -> Result<Option<(String, String)>, PostError>;
    /// The hidden marker of `app`'s preview comment on pull request `number`, by which the
    /// comment is found again (also after a restart). The default names the app only.
    fn comment_marker(&self, app: &str, number: u64) -> String {
        format!("<!-- driftless-preview:{app}:{number} -->")
    }

    /// Makes the pull request `number` carry exactly one comment holding `marker`, with text
    /// `body`: edits comment `known` (or the one found by its marker), or creates it when there
    /// is none. Returns the comment's id.
    ///
    /// # Errors
    ///
    /// See [`PostError`]; the default is a [`PostError::Failed`] for providers without comments.
    async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
        known: Option<u64>,
    ) -> Result<u64, PostError> {
        let _ = (number, marker, body, known);
        Err(PostError::Failed {
            provider: self.name(),
            status: 0,
            message: "pull-request comments are not supported for this provider".into(),
        })
    }
}

/// The documented commit-status APIs of GitHub (and Enterprise), Gitea (and Forgejo), GitLab
/// and Bitbucket Cloud, over HTTPS with rustls.
pub struct HttpProvider {
    /// The host's request shapes (one file per host).
    host: Box<dyn Host>,
    client: reqwest::Client,
    /// The API base without a trailing slash.
    base: String,
    repository: String,
    token: SecretString,
    username: Option<String>,
}

/// The `User-Agent` sent to Git hosts (GitHub requires one).
pub const USER_AGENT: &str = concat!("driftless/", env!("CARGO_PKG_VERSION"));

/// Percent-encodes one path segment (GitLab's `group%2Fproject` ids; commit contexts in URLs).
fn segment(s: &str) -> String {
    const SET: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, SET).to_string()
}

/// Bitbucket's `key`: the context when it fits in 40 characters, else `driftless-` and the
/// first 30 hex digits of its SHA-256 (stable, so the same context updates the same status).
pub fn bitbucket_key(context: &str) -> String {
    if context.chars().count() <= MAX_BITBUCKET_KEY {
        return context.to_string();
    }
    let digest = Sha256::digest(context.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("driftless-{}", &hex[..30])
}

/// `Retry-After`: delay-seconds or an HTTP date (RFC 9110 section 10.2.3).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or_default(),
    )
}

impl HttpProvider {
    /// A client for `kind` at `api_url` (or the provider's default) for `repository`.
    ///
    /// # Errors
    ///
    /// When the HTTP client cannot be built (no TLS roots).
    pub fn new(
        kind: Provider,
        api_url: Option<&str>,
        repository: &str,
        token: SecretString,
        username: Option<String>,
    ) -> Result<Self, reqwest::Error> {
        let base = api_url
            .or(kind.default_api_url())
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string();
        let client = reqwest::Client::builder()
            .user_agent(USER_AGENT)
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            host: host::for_provider(kind),
            client,
            base,
            repository: repository.trim().to_string(),
            token,
            username,
        })
    }

    fn repo(&self) -> Repo<'_> {
        Repo {
            base: &self.base,
            repository: &self.repository,
        }
    }

    /// `text` with the token (and the Basic credentials built from it) blanked out: a provider
    /// may echo the request's credentials in an error body, and that body is logged.
    fn redact(&self, text: &str) -> String {
        let token = self.token.expose_secret();
        if token.is_empty() {
            return text.to_string();
        }
        let mut out = text.replace(token, "[redacted]");
        if let Some(user) = &self.username {
            use base64::Engine as _;
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{token}"));
            out = out.replace(&basic, "[redacted]");
        }
        out
    }

    fn authorize(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        self.host
            .authorize(req, self.token.expose_secret(), self.username.as_deref())
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, PostError> {
        let provider = self.name();
        let resp = self.authorize(req).send().await.map_err(|e| {
            PostError::Retry {
                provider,
                status: 0,
                after: None,
            }
            .with_source_logged(&e)
        })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(resp);
        }
        let after = retry_after(resp.headers());
        let rate_limited = status.as_u16() == 403
            && (after.is_some()
                || resp
                    .headers()
                    .get("x-ratelimit-remaining")
                    .is_some_and(|v| v == "0"));
        if status.is_server_error() || status.as_u16() == 429 || rate_limited {
            return Err(PostError::Retry {
                provider,
                status: status.as_u16(),
                after,
            });
        }
        let body = resp.text().await.unwrap_or_default();
        let message: String = self.redact(&body).chars().take(300).collect();
        if status.as_u16() == 422
            && message
                .to_ascii_lowercase()
                .contains("maximum number of statuses")
        {
            return Err(PostError::Capped { provider });
        }
        Err(PostError::Failed {
            provider,
            status: status.as_u16(),
            message,
        })
    }

    /// Every status of (commit, context) the provider lists from `first`, following its
    /// pagination, as (id, native state, description).
    async fn list(
        &self,
        first: String,
        state_field: &str,
        context_field: &str,
        context: &str,
    ) -> Result<Vec<(u64, String, String)>, PostError> {
        let mut out = Vec::new();
        let mut next = Some(first);
        for _ in 0..20 {
            let Some(url) = next.take() else { break };
            let (items, following) = self.get_page(&url, "status list").await?;
            next = following;
            for it in items {
                if it.get(context_field).and_then(Value::as_str) != Some(context) {
                    continue;
                }
                let state = it
                    .get(state_field)
                    .or_else(|| it.get("state"))
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let description = it
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let id = it.get("id").and_then(Value::as_u64).unwrap_or(0);
                out.push((id, state, description));
            }
        }
        Ok(out)
    }
}

impl HttpProvider {
    /// One page of a JSON list (`what` names it in errors) and the URL of the next page, if
    /// the provider gives one.
    async fn get_page(
        &self,
        url: &str,
        what: &str,
    ) -> Result<(Vec<Value>, Option<String>), PostError> {
        let resp = self.send(self.client.get(url)).await?;
        let next = self.host.next_page(url, resp.headers());
        let items: Vec<Value> = resp.json().await.map_err(|e| PostError::Failed {
            provider: self.name(),
            status: 200,
            message: format!("unreadable {what}: {e}"),
        })?;
        Ok((items, next))
    }

    /// The id and body of the first comment of pull request `number` that holds `marker`,
    /// following the provider's pagination.
    async fn find_comment(
        &self,
        list_url: &str,
        marker: &str,
    ) -> Result<Option<(u64, String)>, PostError> {
        let first = self.host.first_comment_page(list_url);
        let mut next = Some(first);
        for _ in 0..50 {
            let Some(url) = next.take() else { break };
            let (items, following) = self.get_page(&url, "comment list").await?;
            next = following;
            for it in items {
                let body = it.get("body").and_then(Value::as_str).unwrap_or_default();
                if body.contains(marker)
                    && let Some(id) = it.get("id").and_then(Value::as_u64)
                {
                    return Ok(Some((id, body.to_string())));
                }
            }
        }
        Ok(None)
    }

    fn comment_id(&self, v: &Value) -> Result<u64, PostError> {
        v.get("id")
            .and_then(Value::as_u64)
            .ok_or(PostError::Failed {
                provider: self.name(),
                status: 200,
                message: "the comment answer has no id".into(),
            })
    }
}

impl PostError {
    /// Logs the underlying network error (its text never holds credentials: reqwest errors
    /// name the URL, which carries none) and returns `self`.
    fn with_source_logged(self, e: &reqwest::Error) -> Self {
        tracing::debug!(error = %e, "Git host unreachable");
        self
    }
}

#[async_trait]
impl ProviderClient for HttpProvider {
    fn name(&self) -> &'static str {
        self.host.provider().name()
    }

    fn target(&self) -> String {
        format!("{}|{}|{}", self.name(), self.base, self.repository)
    }

    fn native_state(&self, state: State) -> &'static str {
        self.host.native_state(state)
    }

    async fn post(&self, status: &CommitStatus) -> Result<(), PostError> {
        let (url, body) = self.host.post_request(&self.repo(), status);
        match self.send(self.client.post(&url).json(&body)).await {
            Ok(_) => Ok(()),
            Err(PostError::Failed {
                status, message, ..
            }) if self.host.already_there(status, &message) => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn latest(
        &self,
        sha: &str,
        context: &str,
    ) -> Result<Option<(String, String)>, PostError> {
        match self.host.latest(&self.repo(), sha, context) {
            LatestQuery::ByKey(url) => match self.send(self.client.get(&url)).await {
                Ok(resp) => {
                    let v: Value = resp.json().await.unwrap_or(Value::Null);
                    let field = |f: &str| {
                        v.get(f)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    Ok(Some((field("state"), field("description"))))
                }
                Err(PostError::Failed { status: 404, .. }) => Ok(None),
                Err(e) => Err(e),
            },
            LatestQuery::List {
                first,
                state_field,
                context_field,
            } => {
                let all = self
                    .list(first, state_field, context_field, context)
                    .await?;
                Ok(all
                    .into_iter()
                    .max_by_key(|(id, _, _)| *id)
                    .map(|(_, state, description)| (state, description)))
            }
        }
    }

    /// `<!-- driftless-preview:<app>:<16 hex digits> -->`: the digits are an HMAC-SHA256 of
    /// the repository, app and number keyed with the API token, so nobody without the token
    /// can write a comment that driftless would take for its own (and then edit). A new token
    /// makes a new comment.
    fn comment_marker(&self, app: &str, number: u64) -> String {
        use hmac::{KeyInit, Mac};
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(self.token.expose_secret().as_bytes())
            .expect("HMAC takes keys of any length");
        mac.update(format!("driftless-preview|{}|{app}|{number}", self.target()).as_bytes());
        let tag: String = mac.finalize().into_bytes()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("<!-- driftless-preview:{app}:{tag} -->")
    }

    async fn upsert_comment(
        &self,
        number: u64,
        marker: &str,
        body: &str,
        known: Option<u64>,
    ) -> Result<u64, PostError> {
        let Some((list_url, item_base)) = self.host.comment_urls(&self.repo(), number) else {
            return Err(PostError::Failed {
                provider: self.name(),
                status: 0,
                message: format!(
                    "pull-request comments are not supported for {}",
                    self.name()
                ),
            });
        };
        let payload = json!({ "body": body });
        let edit = |id: u64| {
            let url = format!("{item_base}/{id}");
            if self.host.edits_with_put() {
                self.client.put(url)
            } else {
                self.client.patch(url)
            }
            .json(&payload)
        };
        if let Some(id) = known {
            match self.send(edit(id)).await {
                Ok(_) => return Ok(id),
                // Deleted by someone: find another one, or create it again.
                Err(PostError::Failed { status: 404, .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match self.find_comment(&list_url, marker).await? {
            Some((id, existing)) if existing == body => Ok(id),
            Some((id, _)) => {
                self.send(edit(id)).await?;
                Ok(id)
            }
            None => {
                let resp = self
                    .send(self.client.post(&list_url).json(&payload))
                    .await?;
                let v: Value = resp.json().await.unwrap_or(Value::Null);
                self.comment_id(&v)
            }
        }
    }
}

/// The one comment per pull request of a preview, kept current: each pull request's updates
/// run one at a time (so two pushes in quick succession can never create two comments), only
/// the newest body is sent, and an unchanged body is not sent again. A failed update is tried
/// again at the next [`Commenter::update`] (the preview loop's next pass).
#[derive(Clone)]
pub struct Commenter {
    provider: Arc<dyn ProviderClient>,
    slots: Arc<Mutex<CommentSlots>>,
}

/// Per (marker, pull request number).
type CommentSlots = HashMap<(String, u64), Arc<CommentSlot>>;

#[derive(Default)]
struct CommentSlot {
    /// (comment id, body posted, body wanted).
    state: Mutex<(Option<u64>, Option<String>, Option<String>)>,
    busy: tokio::sync::Mutex<()>,
}

impl Commenter {
    /// Comments through `provider`.
    pub fn new(provider: Arc<dyn ProviderClient>) -> Self {
        Self {
            provider,
            slots: Arc::default(),
        }
    }

    /// Asks for pull request `number`'s comment of `app` to read `body` (after the provider's
    /// hidden marker, [`ProviderClient::comment_marker`]). Returns the task doing it, or `None`
    /// when that text is already there. Never waits on the Git host.
    pub fn update(
        &self,
        number: u64,
        app: &str,
        body: &str,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let marker = self.provider.comment_marker(app, number);
        let body = format!("{marker}\n{body}");
        let slot = self
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((marker.to_string(), number))
            .or_default()
            .clone();
        {
            let mut st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.1.as_deref() == Some(body.as_str()) && st.2.as_deref() == Some(body.as_str()) {
                return None;
            }
            st.2 = Some(body);
        }
        let provider = self.provider.clone();
        let span = tracing::info_span!("preview_comment", number);
        Some(tokio::spawn(
            async move {
                let _busy = slot.busy.lock().await;
                let (known, wanted) = {
                    let st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                    if st.1 == st.2 {
                        return;
                    }
                    (st.0, st.2.clone().unwrap_or_default())
                };
                match provider
                    .upsert_comment(number, &marker, &wanted, known)
                    .await
                {
                    Ok(id) => {
                        let verb = if known == Some(id) { "updated" } else { "written" };
                        tracing::info!(provider = provider.name(), comment = id, "Preview comment {verb}");
                        let mut st = slot.state.lock().unwrap_or_else(|e| e.into_inner());
                        st.0 = Some(id);
                        st.1 = Some(wanted);
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "Preview comment not updated; trying again at the next pass")
                    }
                }
            }
            .instrument(span),
        ))
    }
}

/// Posts queued statuses: reads the provider's latest status for a (commit, context) before
/// its first post (so a restart does not repost) and again before each retry (so a request that
/// timed out but reached the provider is not posted twice), posts only changes, and stops posting
/// for a pair that reached the provider's cap, saying so once.
///
/// A failed post (a network error, 5xx, 429, a rate-limit 403) is never dropped: it waits in a
/// retry set, `retry_base` doubling to `max_backoff`, or the provider's `Retry-After` capped at
/// `max_retry_after`, while statuses of other pairs keep going. A newer status for the same
/// pair replaces it. Nothing sleeps inside a request, so a stop is never held up by a backoff.
pub struct Writer {
    queue: Queue,
    metrics: Option<Arc<Metrics>>,
    /// First retry delay when the provider gives none; doubles per attempt. Default 1 s.
    pub retry_base: Duration,
    /// Longest retry delay of the doubling. Default 5 min.
    pub max_backoff: Duration,
    /// Longest wait a provider's `Retry-After` may impose. Default 10 min.
    pub max_retry_after: Duration,
    known: HashMap<Key, (String, String)>,
    capped: HashSet<Key>,
    retrying: HashMap<Key, Retry>,
}

/// A status whose post failed, waiting for its next attempt.
struct Retry {
    update: Update,
    /// Attempts made so far.
    attempts: u32,
    due: tokio::time::Instant,
}

/// Failed attempts after which a waiting status is logged as a warning (once).
const WARN_AFTER_ATTEMPTS: u32 = 5;

impl Writer {
    /// A writer draining `queue`.
    pub fn new(queue: Queue, metrics: Option<Arc<Metrics>>) -> Self {
        Self {
            queue,
            metrics,
            retry_base: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
            max_retry_after: Duration::from_secs(600),
            known: HashMap::new(),
            capped: HashSet::new(),
            retrying: HashMap::new(),
        }
    }

    fn count(&self, provider: &str, result: &str) {
        if let Some(m) = &self.metrics {
            m.commit_status_request(provider, result);
        }
    }

    /// How many statuses wait for a retry.
    pub fn retrying(&self) -> usize {
        self.retrying.len()
    }

    /// The next status to post now: the oldest queued one (which replaces a retry of the same
    /// pair), else a retry that is due. With its attempts so far.
    fn next_ready(&mut self) -> Option<(Key, Update, u32)> {
        if let Some((key, update)) = self.queue.pop() {
            self.retrying.remove(&key);
            return Some((key, update, 0));
        }
        let now = tokio::time::Instant::now();
        let key = self
            .retrying
            .iter()
            .filter(|(_, r)| r.due <= now)
            .min_by_key(|(_, r)| r.due)
            .map(|(k, _)| k.clone())?;
        let r = self.retrying.remove(&key)?;
        Some((key, r.update, r.attempts))
    }

    fn next_due(&self) -> Option<tokio::time::Instant> {
        self.retrying.values().map(|r| r.due).min()
    }

    /// Posts until nothing is queued or waiting, sleeping until retries are due. Bound it with a
    /// timeout: against a host that keeps failing it does not end.
    pub async fn flush(&mut self) {
        loop {
            if let Some((key, update, attempts)) = self.next_ready() {
                self.deliver(key, update, attempts).await;
            } else if let Some(due) = self.next_due() {
                tokio::time::sleep_until(due).await;
            } else {
                return;
            }
        }
    }

    /// Runs until `shutdown` becomes true (interrupting a request in flight), then makes one
    /// more attempt at each status still queued or waiting, within `drain_timeout`, and returns.
    pub async fn run(
        mut self,
        mut shutdown: tokio::sync::watch::Receiver<bool>,
        drain_timeout: Duration,
    ) {
        loop {
            if *shutdown.borrow() {
                break;
            }
            if let Some((key, update, attempts)) = self.next_ready() {
                let kept = (key.clone(), update.clone());
                let finished = tokio::select! {
                    biased;
                    _ = shutdown.changed() => false,
                    _ = self.deliver(key, update, attempts) => true,
                };
                if !finished {
                    let (key, update) = kept;
                    self.retrying.insert(
                        key,
                        Retry {
                            update,
                            attempts,
                            due: tokio::time::Instant::now(),
                        },
                    );
                    break;
                }
                continue;
            }
            let due = self.next_due();
            tokio::select! {
                _ = self.queue.notify.notified() => {}
                _ = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)), if due.is_some() => {}
                _ = shutdown.changed() => break,
            }
        }
        let waiting = std::mem::take(&mut self.retrying);
        let drain = async {
            while let Some((key, update)) = self.queue.pop() {
                self.deliver(key, update, 0).await;
            }
            for (key, r) in waiting {
                if !self.queue.has(&key) {
                    self.deliver(key, r.update, r.attempts).await;
                }
            }
        };
        if tokio::time::timeout(drain_timeout, drain).await.is_err() {
            tracing::warn!(
                left = self.queue.len(),
                "Commit statuses not posted before shutdown"
            );
        } else if !self.retrying.is_empty() {
            tracing::warn!(
                left = self.retrying.len(),
                "Commit statuses not posted before shutdown: the Git host keeps failing"
            );
        }
    }

    /// One attempt at posting `update`, which has failed `attempts` times before.
    async fn deliver(&mut self, key: Key, update: Update, attempts: u32) {
        let provider = update.provider.clone();
        let s = &update.status;
        if self.capped.contains(&key) {
            return;
        }
        let wanted = (
            provider.native_state(s.state).to_string(),
            s.description.clone(),
        );
        if !self.known.contains_key(&key) {
            match provider.latest(&s.sha, &s.context).await {
                Ok(Some(latest)) => {
                    self.known.insert(key.clone(), latest);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(provider = provider.name(), sha = %s.sha, error = %e, "Cannot read the latest commit status; posting")
                }
            }
        }
        if self.known.get(&key) == Some(&wanted) {
            self.count(provider.name(), "skipped");
            return;
        }
        match provider.post(s).await {
            Ok(()) => {
                self.count(provider.name(), "success");
                tracing::info!(provider = provider.name(), sha = %s.sha, context = %s.context, state = wanted.0, description = %s.description, "Commit status posted");
                self.known.insert(key, wanted);
            }
            Err(PostError::Retry { status, after, .. }) => {
                self.count(provider.name(), "retry");
                let attempts = attempts + 1;
                let doubled = self
                    .retry_base
                    .saturating_mul(1u32 << (attempts - 1).min(20))
                    .min(self.max_backoff);
                let wait = after.map_or(doubled, |a| a.min(self.max_retry_after));
                if attempts == WARN_AFTER_ATTEMPTS {
                    tracing::warn!(provider = provider.name(), sha = %s.sha, context = %s.context, status, attempts, "Commit status still not posted; retrying until the Git host takes it");
                } else {
                    tracing::debug!(provider = provider.name(), sha = %s.sha, status, attempts, wait_ms = wait.as_millis() as u64, "Commit status post failed; retrying");
                }
                // The request may have reached the provider (a timeout after sending): read
                // what it shows before posting again.
                self.known.remove(&key);
                self.retrying.insert(
                    key,
                    Retry {
                        update,
                        attempts,
                        due: tokio::time::Instant::now() + wait,
                    },
                );
            }
            Err(PostError::Capped { .. }) => {
                self.count(provider.name(), "capped");
                tracing::warn!(provider = provider.name(), sha = %s.sha, context = %s.context, "The commit has the provider's maximum number of statuses for this context; no more will be posted for it");
                self.capped.insert(key);
            }
            Err(e @ PostError::Failed { .. }) => {
                self.count(provider.name(), "error");
                tracing::warn!(error = %e, sha = %s.sha, "Commit status not posted");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts<'static> {
        Facts {
            app: "web",
            in_force: Some("abc"),
            objects: 12,
            applying: false,
            in_force_error: None,
            out_of_sync: 0,
            not_ready: 0,
            health: Health::Healthy,
            rejected: None,
            failing: None,
            held: None,
        }
    }

    #[test]
    fn success_only_when_synced_and_healthy() {
        let s = derive(&facts(), Some("https://d.example.com/"));
        assert_eq!(
            s,
            vec![CommitStatus {
                sha: "abc".into(),
                context: "driftless/web".into(),
                state: State::Success,
                description: "synced 12 objects, healthy".into(),
                target_url: Some("https://d.example.com/apps/web".into()),
            }]
        );
        let applying = derive(
            &Facts {
                applying: true,
                ..facts()
            },
            None,
        );
        assert_eq!(
            (applying[0].state, applying[0].description.as_str()),
            (State::Pending, "applying 12 objects")
        );
        let missing = derive(
            &Facts {
                not_ready: 2,
                health: Health::Missing,
                ..facts()
            },
            None,
        );
        assert_eq!(missing[0].state, State::Pending);
        let drift = derive(
            &Facts {
                out_of_sync: 1,
                ..facts()
            },
            None,
        );
        assert_eq!(
            (drift[0].state, drift[0].description.as_str()),
            (State::Pending, "1 of 12 objects differ from Git")
        );
        let degraded = derive(
            &Facts {
                health: Health::Degraded,
                ..facts()
            },
            None,
        );
        assert_eq!(degraded[0].state, State::Failure);
        let failing = derive(
            &Facts {
                in_force_error: Some("source unavailable: x".into()),
                ..facts()
            },
            None,
        );
        assert_eq!(failing[0].state, State::Error);
    }

    #[test]
    fn a_rejected_revision_gets_its_own_error() {
        let s = derive(
            &Facts {
                rejected: Some((
                    "new",
                    "invalid manifest web/bad.yaml:3:5: duplicate key `track`".into(),
                )),
                ..facts()
            },
            None,
        );
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].sha.as_str(), s[0].state), ("abc", State::Success));
        assert_eq!((s[1].sha.as_str(), s[1].state), ("new", State::Error));
        assert_eq!(
            s[1].description,
            "invalid manifest web/bad.yaml:3:5: duplicate key `track`"
        );
    }

    #[test]
    fn truncation_counts_characters_not_bytes() {
        let long = "é".repeat(200);
        let t = truncate_chars(&long, MAX_DESCRIPTION);
        assert_eq!(t.chars().count(), 140);
        assert!(t.ends_with('…'));
        assert_eq!(truncate_chars("short", 140), "short");
        let s = derive(
            &Facts {
                in_force_error: Some("ü".repeat(300)),
                ..facts()
            },
            None,
        );
        assert_eq!(s[0].description.chars().count(), 140);
        let ctx = derive(
            &Facts {
                app: Box::leak("a".repeat(300).into_boxed_str()),
                ..facts()
            },
            None,
        );
        assert_eq!(ctx[0].context.chars().count(), 255);
    }

    struct Null;

    #[async_trait]
    impl ProviderClient for Null {
        fn name(&self) -> &'static str {
            "github"
        }
        fn target(&self) -> String {
            "null".into()
        }
        fn native_state(&self, _: State) -> &'static str {
            "pending"
        }
        async fn post(&self, _: &CommitStatus) -> Result<(), PostError> {
            Ok(())
        }
        async fn latest(&self, _: &str, _: &str) -> Result<Option<(String, String)>, PostError> {
            Ok(None)
        }
    }

    fn update(sha: &str, state: State) -> Update {
        Update {
            provider: Arc::new(Null),
            status: CommitStatus {
                sha: sha.into(),
                context: "driftless/web".into(),
                state,
                description: String::new(),
                target_url: None,
            },
        }
    }

    #[test]
    fn the_queue_keeps_the_latest_status_per_commit_and_context_in_arrival_order() {
        let q = Queue::default();
        q.push(update("a", State::Pending));
        q.push(update("b", State::Error));
        q.push(update("a", State::Success));
        assert_eq!(q.len(), 2);
        let (_, first) = q.pop().unwrap();
        assert_eq!(
            (first.status.sha.as_str(), first.status.state),
            ("a", State::Success)
        );
        let (_, second) = q.pop().unwrap();
        assert_eq!(
            (second.status.sha.as_str(), second.status.state),
            ("b", State::Error)
        );
        assert!(q.pop().is_none() && q.is_empty());
    }

    #[test]
    fn bitbucket_keys_fit_in_40_characters() {
        assert_eq!(bitbucket_key("driftless/web"), "driftless/web");
        let long = bitbucket_key(&format!("driftless/{}", "x".repeat(60)));
        assert_eq!(long.len(), 40);
        assert_eq!(
            long,
            bitbucket_key(&format!("driftless/{}", "x".repeat(60))),
            "stable"
        );
    }
}
