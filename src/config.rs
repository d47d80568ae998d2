//! The config file (`driftless.yaml`): types, defaults and validation (ARCHITECTURE.md section 7).
//!
//! Unknown keys and bad values are errors naming the file, line and column. Relative paths in
//! the file (the store, the cache, local repositories) are resolved against the folder that
//! holds the config file, so a config works from any working directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::object::dns1123_label_error;
use crate::yaml::unspanned;

/// Errors from loading a config file. Each names the file; parse and validation errors also
/// name the line and column.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file cannot be read.
    #[error("cannot read config {path}")]
    Read {
        /// The config file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML or does not fit the config's shape (an unknown key, a wrong
    /// type, a bad duration).
    #[error("{path}:{line}:{column}: {message}")]
    Parse {
        /// The config file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// What is wrong.
        message: String,
    },
    /// A value has the right shape but is not allowed (a duplicate app name, an invalid
    /// namespace...).
    #[error("{path}:{line}:{column}: {field}: {message}")]
    Invalid {
        /// The config file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// 1-based column.
        column: u64,
        /// The key, e.g. `apps[0].name`.
        field: String,
        /// What is wrong.
        message: String,
    },
}

/// The whole config file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    /// Which store to apply to. Default: SQLite at `.driftless/store.db`.
    #[serde(default)]
    pub store: StoreConfig,
    /// Folder for the bare repository caches. Default `.driftless`.
    #[serde(default = "default_cache_dir")]
    pub cache_dir: PathBuf,
    /// The HTTP server of `driftless run`: health, metrics, the JSON API, webhooks.
    #[serde(default)]
    pub server: ServerConfig,
    /// The apps to reconcile.
    #[serde(default)]
    pub apps: Vec<AppConfig>,
    /// Custom health rules, for every app.
    #[serde(default)]
    pub health: Vec<HealthRuleConfig>,
    /// A folder of Lua health checks laid out like Argo CD's `resource_customizations/`
    /// (`<group>/<kind>/health.lua`, `_` a wildcard), relative to the config file; tried after
    /// `health[]`.
    #[serde(default)]
    pub health_lua_dir: Option<Spanned<PathBuf>>,
    /// Where the renderers are (`kustomize`, `helm`); default: on the PATH.
    #[serde(default)]
    pub renderers: RenderTools,
}

fn default_cache_dir() -> PathBuf {
    PathBuf::from(".driftless")
}

// `server:` is read here and in the CLI, which hands the server what it needs: the server
// module drives the apps, so it cannot be imported by the config they are built from.
/// `server:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerConfig {
    /// Address to listen on, `host:port`. Default `127.0.0.1:7777`; port 0 picks a free port
    /// (logged at start).
    #[serde(default = "default_listen")]
    pub listen: Spanned<String>,
    /// Base of the links in commit statuses (`<externalUrl>/apps/<app>`), e.g.
    /// `https://driftless.example.com`. No links when left out.
    #[serde(default)]
    pub external_url: Option<Spanned<String>>,
    /// Bearer token for `POST /api/v1/apps/{name}/sync`. Without it that endpoint answers 401.
    #[serde(default)]
    pub token: Option<Spanned<SecretRef>>,
    /// Webhook secrets per Git host; a host without one has no webhook endpoint (404).
    #[serde(default)]
    pub webhooks: WebhooksConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            external_url: None,
            token: None,
            webhooks: WebhooksConfig::default(),
        }
    }
}

fn default_listen() -> Spanned<String> {
    unspanned("127.0.0.1:7777".to_string())
}

/// `server.webhooks:`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhooksConfig {
    /// `POST /webhooks/github`: HMAC-SHA256 signatures (`X-Hub-Signature-256`).
    #[serde(default)]
    pub github: Option<WebhookConfig>,
    /// `POST /webhooks/gitea`: HMAC-SHA256 signatures (`X-Gitea-Signature`).
    #[serde(default)]
    pub gitea: Option<WebhookConfig>,
    /// `POST /webhooks/gitlab`: a shared token (`X-Gitlab-Token`).
    #[serde(default)]
    pub gitlab: Option<WebhookConfig>,
}

/// One Git host's webhook.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookConfig {
    /// The secret configured on the Git host's webhook.
    pub secret: Spanned<SecretRef>,
}

/// One app: a source mapped onto a target with a sync policy.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppConfig {
    /// Unique name: an RFC 1123 label (lowercase letters, digits, `-`; at most 63 characters).
    pub name: Spanned<String>,
    /// Where the declarations come from.
    pub source: SourceConfig,
    /// Where they go.
    #[serde(default)]
    pub target: TargetConfig,
    /// How they are applied.
    #[serde(default)]
    pub sync: SyncConfig,
    /// Where to report commit statuses (none when left out).
    #[serde(default)]
    pub status: Option<StatusConfig>,
    /// Pull-request previews (none when left out).
    #[serde(default)]
    pub preview: Option<PreviewConfig>,
}

// Each section's types live beside the code that reads them; this file holds the file-level
// types (`Config`, `AppConfig`), loading and the checks that span sections.
pub use crate::health::HealthRuleConfig;
pub use crate::preview::PreviewConfig;
pub use crate::report::{Provider, StatusConfig};
pub use crate::secret::SecretRef;
pub use crate::source::{
    AuthConfig, ChartConfig, HelmConfig, KustomizeConfig, RenderTools, SourceConfig,
    SourceLimitsConfig, VerifyConfig, VerifyMode,
};
pub use crate::store::{EtcdConfig, EtcdTlsConfig, KubernetesConfig, SqliteConfig, StoreConfig};
pub use crate::sync::{RetryConfig, SyncConfig, TargetConfig};
pub use crate::window::{WindowConfig, WindowKind};
pub use crate::yaml::MAX_DURATION;

fn validate_etcd(
    e: &EtcdConfig,
    at: &serde_saphyr::Location,
    invalid: &dyn Fn(&serde_saphyr::Location, String, String) -> Error,
) -> Result<(), Error> {
    if e.endpoints.is_empty() {
        return Err(invalid(
            at,
            "store.etcd.endpoints".into(),
            "name at least one endpoint, e.g. `http://127.0.0.1:2379`".into(),
        ));
    }
    for (i, ep) in e.endpoints.iter().enumerate() {
        let field = format!("store.etcd.endpoints[{i}]");
        let https = match etcd_endpoint_error(&ep.value) {
            Ok(https) => https,
            Err(problem) => {
                return Err(invalid(
                    &ep.referenced,
                    field,
                    format!("`{}` {problem}", ep.value),
                ));
            }
        };
        if https && e.tls.is_none() {
            return Err(invalid(
                &ep.referenced,
                field,
                "an https endpoint needs `tls` (at least `ca`)".into(),
            ));
        }
        if !https && e.tls.is_some() {
            return Err(invalid(
                &ep.referenced,
                field,
                "with `tls`, every endpoint must be https://".into(),
            ));
        }
    }
    let p = &e.prefix.value;
    if !p.starts_with('/')
        || p.len() < 2
        || p.ends_with('/')
        || p.contains("//")
        || p.chars().any(char::is_control)
    {
        return Err(invalid(
            &e.prefix.referenced,
            "store.etcd.prefix".into(),
            format!(
                "`{}` must start with `/`, name something, and not end with `/` or hold control characters (e.g. `/driftless`)",
                p.escape_debug()
            ),
        ));
    }
    if e.username.is_some() != e.password.is_some() {
        return Err(invalid(
            at,
            "store.etcd.password".into(),
            "give `username` and `password` together".into(),
        ));
    }
    if let Some(t) = &e.tls
        && t.ca.is_none()
    {
        return Err(invalid(
            at,
            "store.etcd.tls.ca".into(),
            "name the CA file that signs the etcd servers' certificates (the system roots are not used)".into(),
        ));
    }
    if let Some(t) = &e.tls
        && t.cert.is_some() != t.key.is_some()
    {
        return Err(invalid(
            at,
            "store.etcd.tls".into(),
            "give the client `cert` and its `key` together".into(),
        ));
    }
    validate_replicas("store.etcd", &e.lease_ttl, e.replica.as_ref(), invalid)?;
    if e.dial_timeout.value < Duration::from_millis(100)
        || e.dial_timeout.value > Duration::from_secs(300)
    {
        return Err(invalid(
            &e.dial_timeout.referenced,
            "store.etcd.dialTimeout".into(),
            "must be from 100ms to 5m".into(),
        ));
    }
    Ok(())
}

/// The replicas' `leaseTTL` and `replica` of a store section (`at`: `store.etcd`).
fn validate_replicas(
    at: &str,
    ttl: &Spanned<Duration>,
    replica: Option<&Spanned<String>>,
    invalid: Invalid<'_>,
) -> Result<(), Error> {
    if ttl.value < Duration::from_secs(2)
        || ttl.value > Duration::from_secs(3600)
        || ttl.value.subsec_nanos() != 0
    {
        return Err(invalid(
            &ttl.referenced,
            format!("{at}.leaseTTL"),
            "must be whole seconds, from 2s to 1h (a dead replica's apps wait this long)".into(),
        ));
    }
    if let Some(r) = replica
        && let Some(problem) = replica_name_error(&r.value)
    {
        return Err(invalid(
            &r.referenced,
            format!("{at}.replica"),
            format!("`{}` {problem}", r.value.escape_debug()),
        ));
    }
    Ok(())
}

/// Why `name` cannot name a replica (it is an etcd key segment and a column of
/// `driftless status`), or `None`.
pub fn replica_name_error(name: &str) -> Option<&'static str> {
    if name.is_empty() || name.len() > 253 {
        Some("must be 1 to 253 characters")
    } else if name
        .chars()
        .any(|c| c.is_control() || c == '/' || c.is_whitespace())
    {
        Some("must not contain `/`, whitespace or control characters")
    } else {
        None
    }
}

/// Checks an etcd client URL: `http://` or `https://`, a host, an optional port up to 65535,
/// no credentials (they would show in every error; use `username` and `password`), no path.
/// Returns whether it is https.
fn etcd_endpoint_error(url: &str) -> Result<bool, &'static str> {
    let (https, rest) = if let Some(r) = url.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("http://") {
        (false, r)
    } else {
        return Err("is not an etcd client URL (`http://host:2379` or `https://host:2379`)");
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains('@') {
        return Err("carries credentials; give them as `username` and `password`");
    }
    if authority.is_empty()
        || authority.contains(['/', '?', '#'])
        || authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control())
    {
        return Err("must be `scheme://host[:port]`, without a path, spaces or a query");
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((h, after)) => (h, after.strip_prefix(':')),
            None => return Err("has an unclosed `[` (IPv6 addresses go in brackets)"),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("names no host");
    }
    if let Some(p) = port
        && (p.is_empty()
            || !p.bytes().all(|b| b.is_ascii_digit())
            || p.parse::<u16>().map_or(true, |n| n == 0))
    {
        return Err("has a port that is not a number from 1 to 65535");
    }
    Ok(https)
}

/// A loaded and validated config, with every relative path resolved.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The config file it came from.
    pub path: PathBuf,
    /// The parsed config, paths resolved.
    pub config: Config,
}

impl Loaded {
    /// The SQLite file (absolute, or relative to the working directory if the config file's
    /// path was).
    pub fn sqlite_path(&self) -> Option<&Path> {
        self.config.store.sqlite.as_ref().map(|s| s.path.as_path())
    }

    /// The app named `name`.
    pub fn app(&self, name: &str) -> Option<&AppConfig> {
        self.config.apps.iter().find(|a| a.name.value == name)
    }
}

/// True when `repo` is a URL rather than a local path.
pub fn is_url(repo: &str) -> bool {
    repo.contains("://") || (repo.contains('@') && repo.contains(':'))
}

/// Reads, parses and validates a config file.
///
/// # Errors
///
/// [`Error::Read`], [`Error::Parse`] (YAML syntax, unknown keys, wrong types, bad durations)
/// and [`Error::Invalid`] (duplicate app names, invalid names and namespaces, a path climbing
/// out of the repository, an interval under one second).
pub fn load(path: &Path) -> Result<Loaded, Error> {
    let bytes = std::fs::read(path).map_err(|source| Error::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = std::str::from_utf8(&bytes).map_err(|e| {
        let offset = e.valid_up_to();
        let (line, column) = crate::yaml::line_column(&bytes[..offset]);
        Error::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message: format!("invalid UTF-8 at byte offset {offset}; save the file as UTF-8"),
        }
    })?;
    parse(path, text.strip_prefix('\u{feff}').unwrap_or(text))
}

/// Parses and validates config text as if read from `path` (used for relative paths and
/// messages).
///
/// # Errors
///
/// As [`load`], without [`Error::Read`].
pub fn parse(path: &Path, text: &str) -> Result<Loaded, Error> {
    let options = serde_saphyr::options! { strict_booleans: true, with_snippet: false };
    let mut config: Config = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let (line, column, message) = crate::yaml::error_parts(&e);
        Error::Parse {
            path: path.to_path_buf(),
            line,
            column,
            message,
        }
    })?;
    validate(path, text, &config)?;
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    config.cache_dir = resolve(&config.cache_dir);
    if let Some(d) = &mut config.health_lua_dir {
        d.value = resolve(&d.value);
    }
    for rule in &mut config.health {
        if let Some(f) = &mut rule.lua {
            f.value = resolve(&f.value);
        }
    }
    if let Some(s) = &mut config.store.sqlite {
        s.path = resolve(&s.path);
    }
    let resolve_secret = |s: &mut Spanned<SecretRef>| {
        if let Some(f) = &mut s.value.file {
            *f = resolve(f);
        }
    };
    if let Some(k) = &mut config.store.kubernetes
        && let Some(p) = &mut k.value.kubeconfig
    {
        *p = resolve(p);
    }
    if let Some(e) = &mut config.store.etcd {
        if let Some(p) = &mut e.value.password {
            resolve_secret(p);
        }
        if let Some(t) = &mut e.value.tls {
            for f in [&mut t.ca, &mut t.cert].into_iter().flatten() {
                *f = resolve(f);
            }
            if let Some(k) = &mut t.key {
                resolve_secret(k);
            }
        }
    }
    if let Some(t) = &mut config.server.token {
        resolve_secret(t);
    }
    for hook in [
        &mut config.server.webhooks.github,
        &mut config.server.webhooks.gitea,
        &mut config.server.webhooks.gitlab,
    ]
    .into_iter()
    .flatten()
    {
        resolve_secret(&mut hook.secret);
    }
    for tool in [&mut config.renderers.kustomize, &mut config.renderers.helm]
        .into_iter()
        .flatten()
    {
        *tool = resolve(tool);
    }
    for app in &mut config.apps {
        app.source.tools = config.renderers.clone();
        if let Some(st) = &mut app.status {
            resolve_secret(&mut st.token);
        }
        if let Some(v) = &mut app.source.verify {
            for f in [&mut v.allowed_signers, &mut v.openpgp_keys]
                .into_iter()
                .flatten()
            {
                resolve_secret(f);
            }
        }
        let chart_auth = app
            .source
            .helm
            .as_mut()
            .and_then(|h| h.value.chart.as_mut())
            .and_then(|c| c.auth.as_mut());
        if let Some(a) = chart_auth {
            for s in [&mut a.token, &mut a.password].into_iter().flatten() {
                resolve_secret(s);
            }
        }
        if let Some(a) = &mut app.source.auth {
            for s in [
                &mut a.token,
                &mut a.password,
                &mut a.ssh_key,
                &mut a.known_hosts,
            ]
            .into_iter()
            .flatten()
            {
                resolve_secret(s);
            }
        }
        let repo = &mut app.source.repo.value;
        if !is_url(repo) {
            let p = resolve(Path::new(repo.as_str()));
            *repo = std::path::absolute(&p).unwrap_or(p).display().to_string();
        }
    }
    Ok(Loaded {
        path: path.to_path_buf(),
        config,
    })
}

fn validate(path: &Path, text: &str, config: &Config) -> Result<(), Error> {
    let invalid = |loc: &serde_saphyr::Location, field: String, message: String| Error::Invalid {
        path: path.to_path_buf(),
        line: loc.line().max(1),
        column: loc.column().max(1),
        field,
        message,
    };
    let chosen = [
        config.store.sqlite.is_some(),
        config.store.etcd.is_some(),
        config.store.kubernetes.is_some(),
    ];
    if chosen.iter().all(|c| !c) {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            field: "store".into(),
            message: "choose a store: `sqlite: {path: ...}`, `etcd: {endpoints: [...]}` or `kubernetes: {}`"
                .into(),
        });
    }
    if chosen.iter().filter(|c| **c).count() > 1 {
        let at = config
            .store
            .kubernetes
            .as_ref()
            .map(|k| &k.referenced)
            .or(config.store.etcd.as_ref().map(|e| &e.referenced));
        // Two chosen: etcd or kubernetes is one of them.
        if let Some(at) = at {
            return Err(invalid(
                at,
                "store".into(),
                "choose one store: `sqlite`, `etcd` or `kubernetes`, not several".into(),
            ));
        }
    }
    if let Some(e) = &config.store.etcd {
        validate_etcd(&e.value, &e.referenced, &invalid)?;
    }
    if let Some(k) = &config.store.kubernetes {
        let manager = &k.value.field_manager;
        if manager.value.is_empty() || manager.value.len() > 128 {
            return Err(invalid(
                &manager.referenced,
                "store.kubernetes.fieldManager".into(),
                "give 1 to 128 characters (the API server's limit)".into(),
            ));
        }
        let ns = &k.value.namespace;
        if let Some(why) = crate::object::dns1123_label_error(&ns.value) {
            return Err(invalid(
                &ns.referenced,
                "store.kubernetes.namespace".into(),
                format!("not a namespace name: {why}"),
            ));
        }
        validate_replicas(
            "store.kubernetes",
            &k.value.lease_ttl,
            k.value.replica.as_ref(),
            &invalid,
        )?;
    }
    let mut seen: Vec<&Spanned<String>> = Vec::new();
    for (i, app) in config.apps.iter().enumerate() {
        let name = &app.name;
        if let Some(problem) = dns1123_label_error(&name.value) {
            return Err(invalid(
                &name.referenced,
                format!("apps[{i}].name"),
                format!("`{}` {problem}", name.value),
            ));
        }
        if let Some(first) = seen.iter().find(|n| n.value == name.value) {
            return Err(invalid(
                &name.referenced,
                format!("apps[{i}].name"),
                format!(
                    "app `{}` is defined twice (first at line {})",
                    name.value,
                    first.referenced.line()
                ),
            ));
        }
        seen.push(name);
        if app.source.repo.value.trim().is_empty() {
            return Err(invalid(
                &app.source.repo.referenced,
                format!("apps[{i}].source.repo"),
                "must not be empty".into(),
            ));
        }
        let p = &app.source.path;
        if p.value.starts_with('/') || p.value.split('/').any(|s| s == "..") {
            return Err(invalid(
                &p.referenced,
                format!("apps[{i}].source.path"),
                format!(
                    "`{}` must be a relative folder inside the repository, without `..`",
                    p.value
                ),
            ));
        }
        let interval = &app.source.interval;
        if interval.value < Duration::from_secs(1) {
            return Err(invalid(
                &interval.referenced,
                format!("apps[{i}].source.interval"),
                "must be at least 1s".into(),
            ));
        }
        let timeout = &app.source.timeout;
        if timeout.value < Duration::from_secs(1) {
            return Err(invalid(
                &timeout.referenced,
                format!("apps[{i}].source.timeout"),
                "must be at least 1s".into(),
            ));
        }
        let limits = &app.source.limits;
        for (field, v) in [
            ("maxEntries", &limits.max_entries),
            ("maxBytes", &limits.max_bytes),
            ("maxDepth", &limits.max_depth),
        ] {
            if v.value == 0 {
                return Err(invalid(
                    &v.referenced,
                    format!("apps[{i}].source.limits.{field}"),
                    "must be at least 1".into(),
                ));
            }
        }
        if let Some(st) = &app.status {
            validate_status(st, i, &invalid)?;
        }
        validate_render(&app.source, i, &invalid)?;
        validate_auth(&app.source, i, &invalid)?;
        if let Some(v) = &app.source.verify
            && v.allowed_signers.is_none()
            && v.openpgp_keys.is_none()
        {
            return Err(invalid(
                &app.source.repo.referenced,
                format!("apps[{i}].source.verify"),
                "give `allowedSigners: {file: PATH}` (SSH keys, in ssh-keygen's allowed_signers format) or `openpgpKeys: {file: PATH}` (armored OpenPGP public keys), or both".into(),
            ));
        }
        if let Some(p) = &app.preview {
            validate_preview(p, app.status.is_some(), i, &invalid)?;
        }
        validate_sync(&app.sync, i, &invalid)?;
        let ns = &app.target.namespace;
        if let Some(problem) = dns1123_label_error(&ns.value) {
            return Err(invalid(
                &ns.referenced,
                format!("apps[{i}].target.namespace"),
                format!("`{}` {problem}", ns.value),
            ));
        }
    }
    // A preview namespace must never be an app's target namespace: a pull request (content
    // nobody reviewed yet) would take over that app's objects.
    for (i, app) in config.apps.iter().enumerate() {
        let Some(p) = &app.preview else { continue };
        for (j, other) in config.apps.iter().enumerate() {
            let target = &other.target.namespace.value;
            if template_can_name(&p.namespace.value, target) {
                return Err(invalid(
                    &p.namespace.referenced,
                    format!("apps[{i}].preview.namespace"),
                    format!(
                        "`{}` can name namespace `{target}`, the target namespace of app `{}` (apps[{j}]): a pull request could take over its objects; choose a template no app targets, such as `{}-pr-{{number}}`",
                        p.namespace.value, other.name.value, app.name.value
                    ),
                ));
            }
        }
    }
    // Apps on one repository share its cache and its connections: they must reach it the same
    // way, or one app's settings (an unchecked host key) would serve the other.
    for (i, app) in config.apps.iter().enumerate() {
        for (j, other) in config.apps.iter().enumerate().take(i) {
            if other.source.repo.value == app.source.repo.value
                && format!("{:?}", other.source.auth) != format!("{:?}", app.source.auth)
            {
                return Err(invalid(
                    &app.source.repo.referenced,
                    format!("apps[{i}].source.auth"),
                    format!(
                        "app `{}` uses the same repository as app `{}` (apps[{j}]) with another source.auth; give both the same",
                        app.name.value, other.name.value
                    ),
                ));
            }
        }
    }
    validate_server(&config.server, &invalid)?;
    for (i, rule) in config.health.iter().enumerate() {
        let cel = rule.healthy.is_some() || rule.progressing.is_some() || rule.degraded.is_some();
        if let Some(lua) = &rule.lua
            && cel
        {
            return Err(invalid(
                &lua.referenced,
                format!("health[{i}].lua"),
                format!(
                    "the rule for {} has both a Lua check and CEL expressions; give one rule each",
                    rule.kind
                ),
            ));
        }
        if !cel && rule.lua.is_none() {
            return Err(Error::Invalid {
                path: path.to_path_buf(),
                line: 1,
                column: 1,
                field: format!("health[{i}]"),
                message: format!(
                    "the rule for {} has no expression (healthy, progressing or degraded) and no `lua` file",
                    rule.kind
                ),
            });
        }
        for (name, expr) in [
            ("healthy", &rule.healthy),
            ("progressing", &rule.progressing),
            ("degraded", &rule.degraded),
        ] {
            if let Some(e) = expr
                && let Err(err) = cel::Program::compile(&e.value)
            {
                let first = err.to_string();
                let first = first.lines().next().unwrap_or_default();
                let message = format!("invalid CEL expression: {first}");
                return Err(
                    match cel_error_column(text, &e.referenced, &e.value, first) {
                        Some(column) => Error::Invalid {
                            path: path.to_path_buf(),
                            line: e.referenced.line().max(1),
                            column,
                            field: format!("health[{i}].{name}"),
                            message,
                        },
                        None => invalid(&e.referenced, format!("health[{i}].{name}"), message),
                    },
                );
            }
        }
    }
    Ok(())
}

/// The file column of a CEL parse error (`ERROR: <input>:1:C: ...`, C counted in characters
/// from 1 in the expression) when the expression is written on one line as it reads (a plain
/// scalar, or a quoted one without escapes): the scalar's column, past its quote, plus C less
/// one. `None` otherwise (a folded or escaped scalar): the error then names where the
/// expression starts, and its own `<input>` position.
fn cel_error_column(
    text: &str,
    at: &serde_saphyr::Location,
    expr: &str,
    error: &str,
) -> Option<u64> {
    let inner = error.split("<input>:").nth(1)?;
    let mut parts = inner.splitn(3, ':');
    let (line, col): (u64, u64) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    if line != 1 || col == 0 || expr.contains('\n') {
        return None;
    }
    let source_line = text
        .lines()
        .nth(usize::try_from(at.line().checked_sub(1)?).ok()?)?;
    let start = usize::try_from(at.column().checked_sub(1)?).ok()?;
    let rest: String = source_line.chars().skip(start).collect();
    let quote = u64::from(rest.starts_with('"') || rest.starts_with('\''));
    let written: String = rest.chars().skip(quote as usize).collect();
    written
        .starts_with(expr)
        .then_some(at.column() + quote + col - 1)
}

/// True for `ssh://` URLs and scp-like `user@host:path`.
pub fn is_ssh_url(url: &str) -> bool {
    url.starts_with("ssh://") || (!url.contains("://") && url.contains('@') && url.contains(':'))
}

fn validate_auth(source: &SourceConfig, i: usize, invalid: Invalid<'_>) -> Result<(), Error> {
    let field = |f: &str| format!("apps[{i}].source.auth.{f}");
    let repo = &source.repo;
    let auth = source.auth.clone().unwrap_or_default();
    if is_ssh_url(&repo.value) && auth.known_hosts.is_none() && !auth.insecure_skip_host_key_check {
        return Err(invalid(
            &repo.referenced,
            format!("apps[{i}].source.repo"),
            "SSH host keys are checked: give `auth.knownHosts: {file: PATH}` (the output of `ssh-keyscan HOST`), or set `auth.insecureSkipHostKeyCheck: true`".into(),
        ));
    }
    if let (Some(t), Some(_)) = (&auth.token, &auth.password) {
        return Err(invalid(
            &t.referenced,
            field("token"),
            "give a token or a password, not both".into(),
        ));
    }
    if let Some(p) = &auth.password
        && auth.username.is_none()
    {
        return Err(invalid(
            &p.referenced,
            field("password"),
            "a password needs `username`".into(),
        ));
    }
    if let Some(k) = &auth.ssh_key
        && !is_ssh_url(&repo.value)
    {
        return Err(invalid(
            &k.referenced,
            field("sshKey"),
            format!(
                "`{}` is not an SSH URL (ssh://user@host/path or user@host:path)",
                crate::source::redact_url(&repo.value)
            ),
        ));
    }
    Ok(())
}

/// True when `template` (with `{number}` standing for one or more decimal digits, a pull
/// request's number) can produce `name`.
fn template_can_name(template: &str, name: &str) -> bool {
    match template.split_once("{number}") {
        None => template == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else {
                return false;
            };
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            (1..=digits).any(|n| template_can_name(tail, &rest[n..]))
        }
    }
}

fn validate_preview(
    p: &PreviewConfig,
    has_status: bool,
    i: usize,
    invalid: Invalid<'_>,
) -> Result<(), Error> {
    if let Err(message) = crate::preview::RefGlob::new(&p.refs.value) {
        return Err(invalid(
            &p.refs.referenced,
            format!("apps[{i}].preview.refs"),
            message,
        ));
    }
    let ns = &p.namespace;
    if !ns.value.contains("{number}") {
        return Err(invalid(
            &ns.referenced,
            format!("apps[{i}].preview.namespace"),
            format!(
                "`{}` must contain `{{number}}`, so that each pull request gets its own namespace",
                ns.value
            ),
        ));
    }
    if let Some(problem) = dns1123_label_error(&ns.value.replace("{number}", "1")) {
        return Err(invalid(
            &ns.referenced,
            format!("apps[{i}].preview.namespace"),
            format!("`{}` {problem}", ns.value),
        ));
    }
    if p.max_open.value == 0 {
        return Err(invalid(
            &p.max_open.referenced,
            format!("apps[{i}].preview.maxOpen"),
            "must be at least 1".into(),
        ));
    }
    if p.comment && !has_status {
        return Err(invalid(
            &p.refs.referenced,
            format!("apps[{i}].preview.comment"),
            "comments are posted with the app's `status` provider and token: add a `status` section".into(),
        ));
    }
    Ok(())
}

fn validate_sync(sync: &SyncConfig, i: usize, invalid: Invalid<'_>) -> Result<(), Error> {
    let field = |f: &str| format!("apps[{i}].sync.{f}");
    if sync.progress_deadline.value.is_zero() {
        return Err(invalid(
            &sync.progress_deadline.referenced,
            field("progressDeadline"),
            "must be more than 0s".into(),
        ));
    }
    if let Some(s) = &sync.stale_after
        && s.value.is_zero()
    {
        return Err(invalid(
            &s.referenced,
            field("staleAfter"),
            "must be more than 0s".into(),
        ));
    }
    let retry = &sync.retry;
    if retry.backoff.value.is_zero() {
        return Err(invalid(
            &retry.backoff.referenced,
            field("retry.backoff"),
            "must be more than 0s".into(),
        ));
    }
    if retry.factor == 0 {
        return Err(invalid(
            &retry.backoff.referenced,
            field("retry.factor"),
            "must be at least 1".into(),
        ));
    }
    if retry.max_backoff.value < retry.backoff.value {
        // Name the one written: a default has no line of its own.
        let default = |d: &Spanned<Duration>| {
            if d.referenced.line() == 0 {
                " (the default)"
            } else {
                ""
            }
        };
        return Err(invalid(
            &retry.max_backoff.referenced,
            field("retry.maxBackoff"),
            format!(
                "{}{} is shorter than backoff {}{}; make maxBackoff at least backoff",
                humantime::format_duration(retry.max_backoff.value),
                default(&retry.max_backoff),
                humantime::format_duration(retry.backoff.value),
                default(&retry.backoff),
            ),
        ));
    }
    for (r, rule) in sync.ignore.iter().enumerate() {
        let (at, rule) = (&rule.referenced, &rule.value);
        if rule.paths.value.is_empty() && rule.managers.value.is_empty() {
            return Err(invalid(
                at,
                field(&format!("ignore[{r}]")),
                "name at least one field (`paths: [/spec/replicas]`) or field manager \
                 (`managers: [kube-controller-manager]`)"
                    .into(),
            ));
        }
        for (m, manager) in rule.managers.value.iter().enumerate() {
            if manager.value.trim().is_empty() || manager.value.len() > 128 {
                return Err(invalid(
                    &manager.referenced,
                    field(&format!("ignore[{r}].managers[{m}]")),
                    "a field manager's name, 1 to 128 characters, as managedFields names it".into(),
                ));
            }
        }
        for (p, pointer) in rule.paths.value.iter().enumerate() {
            if let Some(why) = crate::ignore::path_error(&pointer.value) {
                return Err(invalid(
                    &pointer.referenced,
                    field(&format!("ignore[{r}].paths[{p}]")),
                    format!("`{}`: {why}", pointer.value),
                ));
            }
        }
        if let Some(s) = rule.target.as_ref().and_then(|t| t.label_selector.as_ref())
            && let Some(why) = crate::ignore::selector_error(&s.value)
        {
            return Err(invalid(
                &s.referenced,
                field(&format!("ignore[{r}].target.labelSelector")),
                why,
            ));
        }
    }
    for (w, window) in sync.windows.iter().enumerate() {
        let wf = |f: &str| field(&format!("windows[{w}].{f}"));
        let fields = window.schedule.value.split_whitespace().count();
        if fields != 5 {
            return Err(invalid(
                &window.schedule.referenced,
                wf("schedule"),
                format!(
                    "`{}` has {fields} fields; write 5: minute hour day-of-month month day-of-week",
                    window.schedule.value
                ),
            ));
        }
        if let Err(e) = window.schedule.value.parse::<croner::Cron>() {
            return Err(invalid(
                &window.schedule.referenced,
                wf("schedule"),
                format!("`{}`: {e}", window.schedule.value),
            ));
        }
        if window.duration.value.is_zero() {
            return Err(invalid(
                &window.duration.referenced,
                wf("duration"),
                "must be more than 0s".into(),
            ));
        }
        if let Some(tz) = &window.time_zone
            && tz.value.parse::<chrono_tz::Tz>().is_err()
        {
            return Err(invalid(
                &tz.referenced,
                wf("timeZone"),
                format!(
                    "`{}` is not an IANA time zone (e.g. `Europe/Berlin`, `UTC`)",
                    tz.value
                ),
            ));
        }
    }
    Ok(())
}

type Invalid<'a> = &'a dyn Fn(&serde_saphyr::Location, String, String) -> Error;

fn validate_secret(
    secret: &Spanned<SecretRef>,
    field: &str,
    invalid: Invalid<'_>,
) -> Result<(), Error> {
    match (&secret.value.env, &secret.value.file) {
        (Some(e), None) if !e.is_empty() => Ok(()),
        (None, Some(_)) => Ok(()),
        _ => Err(invalid(
            &secret.referenced,
            field.to_string(),
            "give exactly one of `env: NAME` or `file: PATH`".into(),
        )),
    }
}

/// An `http` or `https` URL with a host, used as a base that paths are appended to: no
/// whitespace, query (`?`) or fragment (`#`), which would end up in the middle of every link.
/// `source.kustomize`, `source.helm` and `source.renderTimeout`: one renderer at most, and
/// settings that `helm template` can take.
fn validate_render(source: &SourceConfig, i: usize, invalid: Invalid<'_>) -> Result<(), Error> {
    let field = |f: &str| format!("apps[{i}].source.{f}");
    if let (Some(_), Some(h)) = (&source.kustomize, &source.helm) {
        return Err(invalid(
            &h.referenced,
            field("helm"),
            "choose one renderer: `kustomize` or `helm`, not both (a chart rendered by an overlay is kustomize's `helmCharts`, which driftless refuses: it fetches while rendering)".into(),
        ));
    }
    let t = &source.render_timeout;
    if t.value < Duration::from_secs(1) {
        return Err(invalid(
            &t.referenced,
            field("renderTimeout"),
            "must be at least 1s".into(),
        ));
    }
    let Some(h) = &source.helm else {
        return Ok(());
    };
    let h = &h.value;
    for (name, v) in [
        ("releaseName", &h.release_name),
        ("namespace", &h.namespace),
    ] {
        if let Some(v) = v {
            let limit = if name == "releaseName" { 53 } else { 63 };
            if let Some(problem) = dns1123_label_error(&v.value).or_else(|| {
                (v.value.len() > limit).then(|| format!("must be at most {limit} characters"))
            }) {
                return Err(invalid(
                    &v.referenced,
                    field(&format!("helm.{name}")),
                    format!("`{}` {problem}", v.value),
                ));
            }
        }
    }
    if let Some(v) = &h.values
        && !v.value.is_object()
    {
        return Err(invalid(
            &v.referenced,
            field("helm.values"),
            "must be a mapping of values, as in a values.yaml".into(),
        ));
    }
    for (j, f) in h.values_files.iter().enumerate() {
        if f.value.trim().is_empty() || f.value.starts_with('/') || f.value.contains("://") {
            return Err(invalid(
                &f.referenced,
                field(&format!("helm.valuesFiles[{j}]")),
                format!(
                    "`{}` must be a file in the repository, relative to source.path",
                    f.value
                ),
            ));
        }
    }
    if let Some(c) = &h.chart {
        validate_url(&c.repository, &field("helm.chart.repository"), invalid)?;
        for (name, v) in [("name", &c.name), ("version", &c.version)] {
            if v.value.trim().is_empty() {
                return Err(invalid(
                    &v.referenced,
                    field(&format!("helm.chart.{name}")),
                    "must not be empty".into(),
                ));
            }
        }
        if let Some(a) = &c.auth
            && (a.ssh_key.is_some() || a.known_hosts.is_some() || a.insecure_skip_host_key_check)
        {
            return Err(invalid(
                &c.repository.referenced,
                field("helm.chart.auth"),
                "a chart repository takes HTTP Basic credentials only: `username` with `password` or `token`".into(),
            ));
        }
    }
    if let Some(v) = &h.kube_version
        && v.value.trim().is_empty()
    {
        return Err(invalid(
            &v.referenced,
            field("helm.kubeVersion"),
            "must not be empty".into(),
        ));
    }
    Ok(())
}

fn validate_url(url: &Spanned<String>, field: &str, invalid: Invalid<'_>) -> Result<(), Error> {
    let v = url.value.as_str();
    // Shown without credentials or a query (which may hold a token).
    let shown = crate::source::redact_url(v);
    let fail = |why: &str| {
        Err(invalid(
            &url.referenced,
            field.to_string(),
            format!("`{shown}` is not an http(s) URL{why}"),
        ))
    };
    if v.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return fail(" (it contains whitespace)");
    }
    if v.contains(['?', '#']) {
        return fail(" usable as a base (remove the query or fragment)");
    }
    match reqwest::Url::parse(v) {
        Ok(u)
            if matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some_and(|h| !h.is_empty()) =>
        {
            Ok(())
        }
        _ => fail(""),
    }
}

fn validate_status(st: &StatusConfig, i: usize, invalid: Invalid<'_>) -> Result<(), Error> {
    let field = |f: &str| format!("apps[{i}].status.{f}");
    validate_secret(&st.token, &field("token"), invalid)?;
    match &st.api_url {
        Some(u) => validate_url(u, &field("apiUrl"), invalid)?,
        None if st.provider.default_api_url().is_none() => {
            return Err(invalid(
                &st.repository.referenced,
                field("apiUrl"),
                format!(
                    "{} needs `apiUrl`: the server's root URL",
                    st.provider.name()
                ),
            ));
        }
        None => {}
    }
    let repo = st.repository.value.trim();
    let parts: Vec<&str> = repo.split('/').collect();
    let ok = match st.provider {
        // GitLab: a numeric id, or a path of groups and the project.
        Provider::Gitlab => {
            !repo.is_empty()
                && (repo.chars().all(|c| c.is_ascii_digit()) || parts.len() >= 2)
                && parts.iter().all(|p| !p.is_empty())
        }
        _ => parts.len() == 2 && parts.iter().all(|p| !p.is_empty()),
    };
    if !ok {
        let want = match st.provider {
            Provider::Gitlab => "the project id or its path (`group/project`)",
            Provider::Bitbucket => "`workspace/repo`",
            _ => "`owner/name`",
        };
        return Err(invalid(
            &st.repository.referenced,
            field("repository"),
            format!("`{repo}` should be {want}"),
        ));
    }
    Ok(())
}

fn validate_server(server: &ServerConfig, invalid: Invalid<'_>) -> Result<(), Error> {
    if server.listen.value.parse::<std::net::SocketAddr>().is_err() {
        return Err(invalid(
            &server.listen.referenced,
            "server.listen".into(),
            format!(
                "`{}` is not `host:port` with an IP address (e.g. `127.0.0.1:7777`, `0.0.0.0:7777`)",
                server.listen.value
            ),
        ));
    }
    if let Some(u) = &server.external_url {
        validate_url(u, "server.externalUrl", invalid)?;
    }
    if let Some(t) = &server.token {
        validate_secret(t, "server.token", invalid)?;
    }
    for (name, hook) in [
        ("github", &server.webhooks.github),
        ("gitea", &server.webhooks.gitea),
        ("gitlab", &server.webhooks.gitlab),
    ] {
        if let Some(h) = hook {
            validate_secret(
                &h.secret,
                &format!("server.webhooks.{name}.secret"),
                invalid,
            )?;
        }
    }
    Ok(())
}

/// Reads a secret: the environment variable or the file it names. `field` names the key for
/// the error (`server.token`, `apps[0].status.token`).
///
/// # Errors
///
/// [`Error::Invalid`] when the variable is unset or empty, or the file cannot be read or is
/// empty; the message never contains the secret.
pub fn read_secret(
    path: &Path,
    secret: &Spanned<SecretRef>,
    field: &str,
) -> Result<secrecy::SecretString, Error> {
    let fail = |message: String| Error::Invalid {
        path: path.to_path_buf(),
        line: secret.referenced.line().max(1),
        column: secret.referenced.column().max(1),
        field: field.to_string(),
        message,
    };
    if secret.value.env.is_some() && secret.value.file.is_some() {
        return Err(fail("give `env: NAME` or `file: PATH`, not both".into()));
    }
    let value = match (&secret.value.env, &secret.value.file) {
        (Some(name), _) => std::env::var(name)
            .map_err(|_| fail(format!("the environment variable `{name}` is not set")))?,
        (None, Some(file)) => {
            let mut text = std::fs::read_to_string(file)
                .map_err(|e| fail(format!("cannot read {}: {e}", file.display())))?;
            if text.ends_with('\n') {
                text.pop();
                if text.ends_with('\r') {
                    text.pop();
                }
            }
            text
        }
        (None, None) => return Err(fail("give `env: NAME` or `file: PATH`".into())),
    };
    if value.is_empty() {
        return Err(fail("the secret is empty".into()));
    }
    Ok(secrecy::SecretString::from(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Loaded, Error> {
        parse(Path::new("/etc/driftless/driftless.yaml"), text)
    }

    #[test]
    fn defaults_fill_everything_but_the_apps() {
        let c = parse_str("apps:\n  - name: guestbook\n    source:\n      repo: https://github.com/kubernetes/examples.git\n      path: web/guestbook\n").unwrap();
        let app = &c.config.apps[0];
        assert_eq!(app.source.interval.value, Duration::from_secs(60));
        assert_eq!(app.source.reference, None);
        assert_eq!(app.target.namespace.value, "default");
        assert!(app.sync.prune && app.sync.self_heal && !app.sync.allow_empty);
        assert_eq!(
            c.sqlite_path(),
            Some(Path::new("/etc/driftless/.driftless/store.db"))
        );
        assert_eq!(c.config.cache_dir, Path::new("/etc/driftless/.driftless"));
        assert_eq!(
            app.source.repo.value,
            "https://github.com/kubernetes/examples.git"
        );
    }

    #[test]
    fn render_settings_have_defaults_and_bad_or_conflicting_ones_name_their_line() {
        let c = parse_str("renderers: {kustomize: bin/kustomize}\napps:\n- name: web\n  source:\n    repo: x\n    helm: {valuesFiles: [v.yaml], values: {a: 1}}\n").unwrap();
        let s = &c.config.apps[0].source;
        let h = &s.helm.as_ref().unwrap().value;
        assert!(h.include_crds && h.skip_tests && !h.no_hooks);
        assert_eq!(s.render_timeout.value, Duration::from_secs(60));
        assert_eq!(
            s.tools.kustomize.as_deref(),
            Some(Path::new("/etc/driftless/bin/kustomize")),
            "relative to the config file, copied into each app"
        );
        for (yaml, want) in [
            (
                "  source: {repo: x, kustomize: {}, helm: {}}\n",
                "apps[0].source.helm: choose one renderer",
            ),
            (
                "  source: {repo: x, kustomize: {enableHelm: true}}\n",
                "unknown field `enableHelm`: `source.kustomize` takes no settings",
            ),
            (
                "  source: {repo: x, helm: {values: [1, 2]}}\n",
                "apps[0].source.helm.values: must be a mapping",
            ),
            (
                "  source: {repo: x, helm: {valuesFiles: [/etc/passwd]}}\n",
                "apps[0].source.helm.valuesFiles[0]: `/etc/passwd` must be a file in the repository",
            ),
            (
                "  source: {repo: x, helm: {releaseName: Web_1}}\n",
                "apps[0].source.helm.releaseName: `Web_1`",
            ),
            (
                "  source: {repo: x, helm: {chart: {repository: \"oci://ghcr.io/x\", name: a, version: 1.0.0}}}\n",
                "apps[0].source.helm.chart.repository: `oci://ghcr.io/x` is not an http(s) URL",
            ),
            (
                "  source: {repo: x, renderTimeout: 0s}\n",
                "apps[0].source.renderTimeout: must be at least 1s",
            ),
            (
                "  source: {repo: x, helm: {includeCrd: true}}\n",
                "unknown field `includeCrd`, expected one of",
            ),
        ] {
            let e = parse_str(&format!("apps:\n- name: web\n{yaml}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{yaml}: {e}");
            assert!(
                e.starts_with("/etc/driftless/driftless.yaml:3:"),
                "its line: {e}"
            );
        }
    }

    #[test]
    fn a_preview_namespace_that_can_be_an_apps_target_namespace_is_refused() {
        assert!(template_can_name("{number}", "1"));
        assert!(template_can_name("pr-{number}", "pr-12"));
        assert!(!template_can_name("pr-{number}", "pr-"));
        assert!(!template_can_name("pr-{number}", "pr-1a"));
        assert!(template_can_name("a{number}b{number}", "a1b22"));
        assert!(!template_can_name("pr-{number}", "default"));
        let yaml = "apps:\n- name: a8\n  source: {repo: x}\n  preview: {refs: \"refs/pull/*/head\", namespace: \"{number}\"}\n- name: b8\n  source: {repo: x}\n  target: {namespace: \"1\"}\n";
        let e = parse_str(yaml).unwrap_err().to_string();
        assert!(
            e.contains("apps[0].preview.namespace: `{number}` can name namespace `1`, the target namespace of app `b8` (apps[1])"),
            "{e}"
        );
        // The default template against an app targeting `pr-3`.
        let yaml = "apps:\n- name: a\n  source: {repo: x}\n  preview: {refs: \"refs/pull/*/head\"}\n- name: b\n  source: {repo: x}\n  target: {namespace: pr-3}\n";
        assert!(parse_str(yaml).is_err());
    }

    #[test]
    fn preview_sections_have_defaults_and_name_their_bad_values() {
        let base = "apps:\n- name: a\n  source: {repo: x}\n";
        let c = parse_str(&format!(
            "{base}  preview: {{refs: \"refs/pull/*/head\"}}\n"
        ))
        .unwrap();
        let p = c.config.apps[0].preview.as_ref().unwrap();
        assert_eq!(p.namespace.value, "pr-{number}");
        assert_eq!(p.max_open.value, 20);
        assert!(p.max_age.is_none() && !p.comment && !p.deploy);
        let err = |yaml: &str| parse_str(&format!("{base}{yaml}")).unwrap_err().to_string();
        let e = err("  preview:\n    refs: \"pull/*/head\"\n");
        assert!(
            e.starts_with("/etc/driftless/driftless.yaml:5:11: apps[0].preview.refs:"),
            "{e}"
        );
        let e = err("  preview:\n    refs: refs/pull/1/head\n");
        assert!(e.contains("has no `*`"), "{e}");
        let e = err("  preview:\n    refs: \"refs/pull/*/head\"\n    namespace: previews\n");
        assert!(
            e.contains("apps[0].preview.namespace: `previews` must contain `{number}`"),
            "{e}"
        );
        let e = err("  preview:\n    refs: \"refs/pull/*/head\"\n    namespace: PR-{number}\n");
        assert!(e.contains(":6:16: apps[0].preview.namespace"), "{e}");
        let e = err("  preview:\n    refs: \"refs/pull/*/head\"\n    maxOpen: 0\n");
        assert!(
            e.contains("apps[0].preview.maxOpen: must be at least 1"),
            "{e}"
        );
        let e = err("  preview:\n    refs: \"refs/pull/*/head\"\n    comment: true\n");
        assert!(e.contains("apps[0].preview.comment"), "{e}");
        let e = err("  preview:\n    refs: \"refs/pull/*/head\"\n    maxAge: soon\n");
        assert!(e.contains(":6:13: invalid duration `soon`"), "{e}");
    }

    #[test]
    fn source_auth_is_validated_with_its_line() {
        let ok = parse_str("apps:\n- name: a\n  source:\n    repo: ssh://git@github.com/acme/web.git\n    auth: {sshKey: {file: id}, knownHosts: {file: kh}}\n").unwrap();
        let auth = ok.config.apps[0].source.auth.as_ref().unwrap();
        assert_eq!(
            auth.ssh_key.as_ref().unwrap().value.file.as_deref(),
            Some(Path::new("/etc/driftless/id")),
            "relative to the config file"
        );
        let err = |yaml: &str| parse_str(yaml).unwrap_err().to_string();
        let e = err("apps:\n- name: a\n  source:\n    repo: git@github.com:acme/web.git\n");
        assert!(
            e.starts_with(
                "/etc/driftless/driftless.yaml:4:11: apps[0].source.repo: SSH host keys are checked"
            ),
            "{e}"
        );
        let e = err(
            "apps:\n- name: a\n  source:\n    repo: https://h/r.git\n    auth:\n      token: {env: T}\n      password: {env: P}\n      username: u\n",
        );
        assert!(
            e.contains(":6:14: apps[0].source.auth.token: give a token or a password"),
            "{e}"
        );
        // A secret written inline is refused where it stands, with the two forms it may take.
        for inline in ["hunter2", "1234", "true"] {
            let e = err(&format!(
                "apps:\n- name: a\n  source:\n    repo: https://h/r.git\n    auth:\n      username: u\n      password: {inline}\n"
            ));
            assert!(e.contains(":7:17: "), "{e}");
            assert!(
                e.contains("give `{env: NAME}` (an environment variable) or `{file: PATH}`"),
                "{e}"
            );
            assert!(!e.contains(inline), "the secret is not echoed: {e}");
        }
        let e = err("server:\n  token: {env: T, path: x}\n");
        assert!(e.contains("unknown field `path`"), "{e}");
        let e = err(
            "apps:\n- name: a\n  source:\n    repo: https://h/r.git\n    auth:\n      password: {env: P}\n",
        );
        assert!(
            e.contains("apps[0].source.auth.password: a password needs `username`"),
            "{e}"
        );
        let e = err(
            "apps:\n- name: a\n  source:\n    repo: https://user:tok@h/r.git\n    auth: {sshKey: {file: id}}\n",
        );
        assert!(
            e.contains("apps[0].source.auth.sshKey: `https://***@h/r.git` is not an SSH URL"),
            "{e}"
        );
        let e = err(
            "apps:\n- name: a\n  source:\n    repo: https://h/r.git\n    auth: {tokn: {env: T}}\n",
        );
        assert!(e.contains("unknown field `tokn`"), "{e}");
        let e = err(
            "apps:\n- name: a\n  source: {repo: ssh://git@h/r.git, auth: {insecureSkipHostKeyCheck: true}}\n- name: b\n  source:\n    repo: ssh://git@h/r.git\n    auth: {knownHosts: {file: kh}}\n",
        );
        assert!(
            e.contains(":6:11: apps[1].source.auth: app `b` uses the same repository as app `a`"),
            "{e}"
        );
        parse_str("apps:\n- name: a\n  source:\n    repo: ssh://git@h/r.git\n    auth: {insecureSkipHostKeyCheck: true}\n").unwrap();
        let v = parse_str("apps:\n- name: a\n  source:\n    repo: x\n    verify: {mode: HEAD, allowedSigners: {file: signers}}\n").unwrap();
        let verify = v.config.apps[0].source.verify.as_ref().unwrap();
        assert_eq!(verify.mode, VerifyMode::Head);
        let pgp = parse_str(
            "apps:\n- name: a\n  source:\n    repo: x\n    verify: {openpgpKeys: {file: k}}\n",
        )
        .unwrap();
        assert!(
            pgp.config.apps[0]
                .source
                .verify
                .as_ref()
                .unwrap()
                .openpgp_keys
                .is_some()
        );
        let e = err("apps:\n- name: a\n  source:\n    repo: x\n    verify: {mode: head}\n");
        assert!(
            e.contains("apps[0].source.verify: give `allowedSigners"),
            "{e}"
        );
        let e = err(
            "apps:\n- name: a\n  source:\n    repo: x\n    verify: {mode: tags, allowedSigners: {file: s}}\n",
        );
        assert!(e.contains(":5:20: unknown variant `tags`"), "{e}");
    }

    #[test]
    fn local_repositories_resolve_against_the_config_folder() {
        let c = parse_str("apps:\n- name: a\n  source: {repo: ../manifests}\n").unwrap();
        assert_eq!(
            c.config.apps[0].source.repo.value,
            "/etc/driftless/../manifests"
        );
    }

    #[test]
    fn unknown_keys_are_errors_with_their_line() {
        let err = parse_str("apps:\n  - name: a\n    source:\n      repo: x\n      branch: main\n")
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("/etc/driftless/driftless.yaml:5:7: unknown field `branch`"),
            "{msg}"
        );
        let top = parse_str("stores: {}\n").unwrap_err().to_string();
        assert!(
            top.starts_with("/etc/driftless/driftless.yaml:1:1: unknown field `stores`"),
            "{top}"
        );
    }

    #[test]
    fn an_etcd_store_takes_defaults_and_resolves_its_files() {
        let c = parse_str(
            "store:\n  etcd:\n    endpoints: [\"https://10.0.0.1:2379\"]\n    username: driftless\n    password: {file: etcd-password}\n    tls: {ca: ca.pem, cert: client.pem, key: {file: client-key.pem}}\n",
        )
        .unwrap();
        assert!(c.sqlite_path().is_none());
        let e = &c.config.store.etcd.as_ref().unwrap().value;
        assert_eq!(e.prefix.value, "/driftless");
        assert_eq!(e.lease_ttl.value, Duration::from_secs(15));
        assert_eq!(e.dial_timeout.value, Duration::from_secs(5));
        let tls = e.tls.as_ref().unwrap();
        assert_eq!(tls.ca.as_deref(), Some(Path::new("/etc/driftless/ca.pem")));
        assert_eq!(
            e.password.as_ref().unwrap().value.file.as_deref(),
            Some(Path::new("/etc/driftless/etcd-password"))
        );
    }

    #[test]
    fn bad_etcd_settings_name_their_field_and_line() {
        let cases = [
            (
                "store:\n  sqlite: {path: a.db}\n  etcd: {endpoints: [\"http://e:2379\"]}\n",
                "store: choose one store",
            ),
            ("store:\n  etcd: {endpoints: []}\n", "store.etcd.endpoints"),
            (
                "store:\n  etcd:\n    endpoints: [\"e:2379\"]\n",
                ":3:17: store.etcd.endpoints[0]: `e:2379` is not an etcd client URL",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"https://e:2379\"]\n",
                "an https endpoint needs `tls`",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    prefix: driftless/\n",
                ":4:13: store.etcd.prefix",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    leaseTTL: 1s\n",
                ":4:15: store.etcd.leaseTTL: must be whole seconds, from 2s to 1h",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    username: u\n",
                "give `username` and `password` together",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    replica: a/b\n",
                "store.etcd.replica",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    endpoint: x\n",
                "unknown field `endpoint`",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://127.0.0.1:25790x\"]\n",
                "has a port that is not a number from 1 to 65535",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:99999\"]\n",
                "has a port that is not a number",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://user:s3cret@e:2379\"]\n",
                "carries credentials",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://a b\"]\n",
                "without a path, spaces or a query",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://[::1\"]\n",
                "unclosed `[`",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    tls: {ca: ca.pem}\n",
                "with `tls`, every endpoint must be https://",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    leaseTTL: 9000000001s\n",
                ":4:15: duration `9000000001s` is longer than 100 years",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    leaseTTL: 2h\n",
                "store.etcd.leaseTTL: must be whole seconds, from 2s to 1h",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    dialTimeout: 18446744073709551615s\n",
                ":4:18: duration `18446744073709551615s` is longer than 100 years",
            ),
            (
                "store:\n  etcd:\n    endpoints: [\"http://e:2379\"]\n    replica: \"a b\"\n",
                ":4:14: store.etcd.replica: `a b` must not contain",
            ),
        ];
        for (text, want) in cases {
            let msg = parse_str(text).unwrap_err().to_string();
            assert!(msg.contains(want), "{text}\n=> {msg}");
        }
    }

    #[test]
    fn bad_durations_and_types_name_their_line() {
        let err = parse_str("apps:\n- name: a\n  source:\n    repo: x\n    interval: soon\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/etc/driftless/driftless.yaml:5:15: invalid duration `soon`"),
            "{err}"
        );
        let err = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync: {prune: maybe}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/etc/driftless/driftless.yaml:4:17:"),
            "{err}"
        );
        // A maxBackoff shorter than the default backoff: its own line, and the default named.
        let err = parse_str(
            "apps:\n- name: a\n  source: {repo: x}\n  sync:\n    retry:\n      maxBackoff: 4s\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("/etc/driftless/driftless.yaml:6:19: apps[0].sync.retry.maxBackoff: 4s is shorter than backoff 5s (the default)"),
            "{err}"
        );
    }

    #[test]
    fn server_and_status_sections_parse_with_defaults() {
        let c = parse_str("server:\n  externalUrl: https://drift.example.com\n  token: {env: DL_TOKEN}\n  webhooks:\n    github: {secret: {file: hook.secret}}\napps:\n- name: a\n  source: {repo: x}\n  status:\n    provider: github\n    repository: acme/web\n    token: {env: GH}\n").unwrap();
        assert_eq!(c.config.server.listen.value, "127.0.0.1:7777");
        let hook = c.config.server.webhooks.github.as_ref().unwrap();
        assert_eq!(
            hook.secret.value.file.as_deref(),
            Some(Path::new("/etc/driftless/hook.secret"))
        );
        let st = c.config.apps[0].status.as_ref().unwrap();
        assert_eq!(st.provider, Provider::Github);
        assert!(st.api_url.is_none());
        let none = parse_str("apps: []\n").unwrap();
        assert!(none.config.server.token.is_none());
    }

    #[test]
    fn bad_server_and_status_values_name_their_field() {
        let both = parse_str("server:\n  token: {env: A, file: b}\n")
            .unwrap_err()
            .to_string();
        assert!(both.contains("server.token: give exactly one of"), "{both}");
        let listen = parse_str("server: {listen: localhost}\n")
            .unwrap_err()
            .to_string();
        assert!(listen.contains("1:18: server.listen:"), "{listen}");
        let url = parse_str("server: {externalUrl: drift.example.com}\n")
            .unwrap_err()
            .to_string();
        assert!(
            url.contains("server.externalUrl: `drift.example.com` is not an http(s) URL"),
            "{url}"
        );
        // Values that would break every status link.
        for (bad, why) in [
            ("\" https://d.example.com/\"", "whitespace"),
            ("\"http:// evil\"", "whitespace"),
            ("\"https://d.example.com/?a=b\"", "query"),
            ("\"https://d.example.com/#frag\"", "fragment"),
            ("\"https://\"", "not an http(s) URL"),
            ("\"ftp://d.example.com\"", "not an http(s) URL"),
        ] {
            let err = parse_str(&format!("server: {{externalUrl: {bad}}}\n"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("server.externalUrl:") && err.contains(why),
                "{bad}: {err}"
            );
        }
        for good in [
            "https://d.example.com",
            "https://d.example.com/base/",
            "http://10.0.0.1:8080",
        ] {
            parse_str(&format!("server: {{externalUrl: \"{good}\"}}\n")).unwrap();
        }
        let gitea = parse_str("apps:\n- name: a\n  source: {repo: x}\n  status: {provider: gitea, repository: o/r, token: {env: T}}\n").unwrap_err().to_string();
        assert!(
            gitea.contains("apps[0].status.apiUrl: gitea needs `apiUrl`"),
            "{gitea}"
        );
        let repo = parse_str("apps:\n- name: a\n  source: {repo: x}\n  status: {provider: github, repository: justname, token: {env: T}}\n").unwrap_err().to_string();
        assert!(
            repo.contains("apps[0].status.repository: `justname` should be `owner/name`"),
            "{repo}"
        );
        let provider = parse_str("apps:\n- name: a\n  source: {repo: x}\n  status: {provider: gitee, repository: o/r, token: {env: T}}\n").unwrap_err().to_string();
        assert!(
            provider.contains("4:22: unknown variant `gitee`"),
            "{provider}"
        );
    }

    #[test]
    fn sync_health_and_window_settings_parse_and_are_checked() {
        let c = parse_str("health:\n- group: example.com\n  kind: Widget\n  healthy: \"status.phase == 'Running'\"\napps:\n- name: a\n  source: {repo: x}\n  sync:\n    progressDeadline: 2m\n    staleAfter: 30m\n    retry: {backoff: 1s, factor: 3, maxBackoff: 1m}\n    windows:\n    - {kind: deny, schedule: \"0 22 * * *\", duration: 8h, timeZone: Europe/Berlin, manualSync: true}\n").unwrap();
        let s = &c.config.apps[0].sync;
        assert_eq!(s.progress_deadline.value, Duration::from_secs(120));
        assert_eq!(
            s.stale_after.as_ref().unwrap().value,
            Duration::from_secs(1800)
        );
        assert_eq!(s.retry.factor, 3);
        assert_eq!(s.windows[0].kind, WindowKind::Deny);
        assert_eq!(c.config.health[0].kind, "Widget");
        let d = parse_str("apps:\n- name: a\n  source: {repo: x}\n").unwrap();
        assert_eq!(
            d.config.apps[0].sync.progress_deadline.value,
            Duration::from_secs(600)
        );
        assert_eq!(
            d.config.apps[0].sync.retry.backoff.value,
            Duration::from_secs(5)
        );
        let cron = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows: [{kind: allow, schedule: \"0 0 9 * * *\", duration: 1h}]\n").unwrap_err().to_string();
        assert!(
            cron.contains("apps[0].sync.windows[0].schedule: `0 0 9 * * *` has 6 fields"),
            "{cron}"
        );
        let bad = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows: [{kind: allow, schedule: \"61 * * * *\", duration: 1h}]\n").unwrap_err().to_string();
        assert!(bad.contains("apps[0].sync.windows[0].schedule"), "{bad}");
        let tz = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows: [{kind: allow, schedule: \"0 9 * * *\", duration: 1h, timeZone: Mars/Olympus}]\n").unwrap_err().to_string();
        assert!(
            tz.contains("timeZone: `Mars/Olympus` is not an IANA time zone"),
            "{tz}"
        );
        let ignore = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    ignore:\n      - paths: [/spec/replicas]\n        target: {kind: Deployment, labelSelector: app=web}\n      - paths: [spec.replicas]\n").unwrap_err().to_string();
        assert!(
            ignore.contains(
                ":8:17: apps[0].sync.ignore[1].paths[0]: `spec.replicas`: a JSON pointer"
            ),
            "{ignore}"
        );
        let ok = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    ignore: [{paths: [/spec/replicas], target: {kind: Deployment}}]\n").unwrap();
        assert_eq!(
            ok.config.apps[0].sync.ignore[0].value.paths.value[0].value,
            "/spec/replicas"
        );
        let cel = parse_str("health:\n- kind: Widget\n  healthy: \"status.phase ==\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            cel.contains("health[0].healthy: invalid CEL expression"),
            "{cel}"
        );
        // The column is where the parser stopped, in the file: on one line, quoted or plain.
        for (text, at) in [
            (
                "health:\n- kind: Widget\n  healthy: \"status.phase == 'Up' &&\"\n",
                ":3:36:",
            ),
            (
                "health:\n- kind: Widget\n  healthy: (status.phase == 'Up'\n",
                ":3:33:",
            ),
        ] {
            let e = parse_str(text).unwrap_err().to_string();
            assert!(e.contains(at), "{text}: {e}");
        }
    }

    #[test]
    fn secrets_come_from_env_or_file_and_errors_never_show_them() {
        use secrecy::ExposeSecret;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tok"), "s3cret\n").unwrap();
        let cfg_path = dir.path().join("driftless.yaml");
        let c = parse(&cfg_path, "server:\n  token: {file: tok}\n").unwrap();
        let t = c.config.server.token.as_ref().unwrap();
        assert_eq!(
            read_secret(&cfg_path, t, "server.token")
                .unwrap()
                .expose_secret(),
            "s3cret"
        );
        let c = parse(
            &cfg_path,
            "server:\n  token: {env: DRIFTLESS_TEST_UNSET_VARIABLE}\n",
        )
        .unwrap();
        let err = read_secret(
            &cfg_path,
            c.config.server.token.as_ref().unwrap(),
            "server.token",
        )
        .unwrap_err();
        assert!(err.to_string().contains("2:10: server.token: the environment variable `DRIFTLESS_TEST_UNSET_VARIABLE` is not set"), "{err}");
    }

    #[test]
    fn absurd_durations_are_refused_at_their_line() {
        for (yaml, line) in [
            (
                "apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows:\n    - {kind: deny, schedule: \"0 22 * * *\", duration: 300000y}\n",
                6,
            ),
            (
                "apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows:\n    - {kind: deny, schedule: \"0 22 * * *\", duration: 1000000000y}\n",
                6,
            ),
            (
                "apps:\n- name: a\n  source: {repo: x, interval: 1000000000y}\n",
                3,
            ),
        ] {
            let err = parse_str(yaml).unwrap_err().to_string();
            assert!(
                err.contains(&format!("driftless.yaml:{line}:"))
                    && err.contains("is longer than 100 years"),
                "{err}"
            );
        }
        // A long but sane one loads, and the window it makes works.
        let ok = parse_str("apps:\n- name: a\n  source: {repo: x}\n  sync:\n    windows:\n    - {kind: deny, schedule: \"0 22 * * *\", duration: 99y}\n").unwrap();
        assert_eq!(
            ok.config.apps[0].sync.windows[0].duration.value.as_secs() / (365 * 86400),
            99
        );
    }

    #[test]
    fn source_limits_take_their_defaults_and_refuse_zero() {
        let c = parse_str("apps:\n- name: a\n  source: {repo: x}\n").unwrap();
        assert_eq!(
            c.config.apps[0].source.limits.limits(),
            crate::source::Limits::default()
        );
        let c = parse_str("apps:\n- name: a\n  source:\n    repo: x\n    limits: {maxEntries: 10, maxBytes: 20, maxDepth: 3}\n").unwrap();
        let l = c.config.apps[0].source.limits.limits();
        assert_eq!((l.max_entries, l.max_bytes, l.max_depth), (10, 20, 3));
        let err =
            parse_str("apps:\n- name: a\n  source:\n    repo: x\n    limits: {maxDepth: 0}\n")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains(":5:")
                && err.contains("apps[0].source.limits.maxDepth: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn invalid_values_name_the_field_and_line() {
        let err = parse_str("apps:\n- name: Guestbook\n  source: {repo: x}\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("/etc/driftless/driftless.yaml:2:9: apps[0].name: `Guestbook` must be"),
            "{err}"
        );
        let dup =
            parse_str("apps:\n- name: a\n  source: {repo: x}\n- name: a\n  source: {repo: y}\n")
                .unwrap_err()
                .to_string();
        assert_eq!(
            dup,
            "/etc/driftless/driftless.yaml:4:9: apps[1].name: app `a` is defined twice (first at line 2)"
        );
        let ns = parse_str("apps:\n- name: a\n  source: {repo: x}\n  target: {namespace: Prod}\n")
            .unwrap_err()
            .to_string();
        assert!(ns.contains("4:23: apps[0].target.namespace"), "{ns}");
        let path = parse_str("apps:\n- name: a\n  source: {repo: x, path: ../up}\n")
            .unwrap_err()
            .to_string();
        assert!(path.contains("apps[0].source.path"), "{path}");
        let fast = parse_str("apps:\n- name: a\n  source: {repo: x, interval: 10ms}\n")
            .unwrap_err()
            .to_string();
        assert!(fast.contains("at least 1s"), "{fast}");
    }
}
