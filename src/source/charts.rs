//! Helm chart repositories, fetched in the source stage so that rendering stays offline.
//!
//! A chart repository is an HTTP folder with an `index.yaml` (Helm's "chart repository guide":
//! `entries: {<name>: [{version, urls, digest, ...}]}`) and the chart archives it names. For
//! `source.helm.chart` the cache resolves the version in the index (an exact version, or the
//! newest that a semver range matches), downloads the archive once, checks it against the
//! index's `digest` (the archive's SHA-256, as `helm repo index` writes it), and keeps it on
//! disk as `<cache>/charts/<repository-hash>/<name>-<version>-<digest>.tgz`. The first digest
//! seen for a (repository, name, version) is pinned beside it: a repository that later gives
//! another digest for the same version rewrote a release, and that is an error, never a
//! silent change of what is applied.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{hex, redact_url};

/// The largest `index.yaml` read: 64 MiB (public indexes with thousands of versions are a few
/// tens of MB).
pub const MAX_INDEX_BYTES: usize = 64 << 20;
/// The largest chart archive downloaded: 64 MiB.
pub const MAX_CHART_BYTES: usize = 64 << 20;

/// Errors of a chart repository.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The HTTP client could not be built (no TLS roots).
    #[error("cannot build the HTTP client for chart repositories")]
    ClientFailed(#[source] reqwest::Error),
    /// The request failed: unreachable, refused, timed out, or the body broke off.
    #[error("cannot fetch {url}")]
    RequestFailed {
        /// The URL, credentials removed.
        url: String,
        /// The transport's error.
        #[source]
        source: reqwest::Error,
    },
    /// The repository answered with an error status.
    #[error("{url} answered HTTP {status}")]
    Status {
        /// The URL, credentials removed.
        url: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The body was larger than the limit.
    #[error("{url} is larger than {limit} bytes")]
    TooLarge {
        /// The URL, credentials removed.
        url: String,
        /// The limit in bytes.
        limit: usize,
    },
    /// `index.yaml` is not a chart repository index.
    #[error("{url} is not a chart repository index: {message}")]
    IndexInvalid {
        /// The index URL.
        url: String,
        /// What is wrong, with its line.
        message: String,
    },
    /// The index has no chart of that name.
    #[error("chart `{name}` is not in the index of {repository}")]
    ChartNotFound {
        /// The chart's name.
        name: String,
        /// The repository URL.
        repository: String,
    },
    /// `version` is neither a version nor a range.
    #[error("`{version}` is not a chart version or a semver range: {message}")]
    InvalidVersion {
        /// The version as configured.
        version: String,
        /// What is wrong.
        message: String,
    },
    /// No version of the chart matches.
    #[error("no version of chart `{name}` matches `{version}` in {repository} (newest: {newest})")]
    NoMatchingVersion {
        /// The chart's name.
        name: String,
        /// The version or range as configured.
        version: String,
        /// The repository URL.
        repository: String,
        /// The newest version the index has.
        newest: String,
    },
    /// The index entry names no archive URL.
    #[error("chart `{name}` {version} has no download URL in the index")]
    NoUrl {
        /// The chart's name.
        name: String,
        /// Its version.
        version: String,
    },
    /// The archive downloaded does not have the digest the index gives.
    #[error(
        "chart `{name}` {version}: the archive's SHA-256 is {actual}, the index says {expected}; not used"
    )]
    DigestMismatch {
        /// The chart's name.
        name: String,
        /// Its version.
        version: String,
        /// The index's digest.
        expected: String,
        /// The archive's.
        actual: String,
    },
    /// The repository now gives another digest for a version pinned earlier: it rewrote a
    /// release.
    #[error(
        "chart `{name}` {version} changed: its digest was {pinned} and is now {now}; a chart repository must not rewrite a release (publish a new version); the chart as pinned stays in force"
    )]
    DigestChanged {
        /// The chart's name.
        name: String,
        /// Its version.
        version: String,
        /// The digest pinned at the first fetch.
        pinned: String,
        /// The digest the repository gives now.
        now: String,
    },
    /// What was downloaded is not a chart archive (a gzipped tar).
    #[error("{url} is not a chart archive (a .tgz); not used")]
    NotAnArchive {
        /// The archive's URL, credentials removed.
        url: String,
    },
    /// The cache folder could not be written.
    #[error("cannot write the chart cache at {path}")]
    CacheFailed {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Credentials for a chart repository: HTTP Basic, sent only to the repository's own host
/// (as `helm repo add` without `--pass-credentials`).
#[derive(Clone, Default)]
pub struct Credentials {
    /// The username (default `driftless`).
    pub username: Option<String>,
    /// The password or token.
    pub secret: Option<SecretString>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("secret", &self.secret.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// A chart fetched and pinned: what the render stage runs `helm template` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chart {
    /// The repository URL, credentials removed.
    pub repository: String,
    /// The chart's name.
    pub name: String,
    /// The version resolved.
    pub version: String,
    /// The archive's SHA-256, lowercase hex.
    pub digest: String,
    /// The archive in the cache.
    pub archive: PathBuf,
}

/// One entry of `index.yaml` (the fields driftless reads).
#[derive(Clone, Debug)]
struct IndexEntry {
    version: String,
    urls: Vec<String>,
    digest: Option<String>,
}

/// An entry as found: anything at all (helm skips an entry it cannot load, with a warning,
/// and keeps the rest of the index; so does driftless). Other fields are not read.
#[derive(Debug, Default)]
struct RawEntry {
    version: Option<Value>,
    urls: Option<Value>,
    digest: Option<Value>,
}

impl<'de> Deserialize<'de> for RawEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawEntry;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an index entry")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<RawEntry, A::Error> {
                let mut e = RawEntry::default();
                while let Some(k) = a.next_key::<String>()? {
                    match k.as_str() {
                        "version" => e.version = a.next_value()?,
                        "urls" => e.urls = a.next_value()?,
                        "digest" => e.digest = a.next_value()?,
                        _ => {
                            a.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(e)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<RawEntry, A::Error> {
                while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(RawEntry::default())
            }
            fn visit_unit<E>(self) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_none<E>(self) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<RawEntry, D::Error> {
                RawEntry::deserialize(d)
            }
            fn visit_str<E>(self, _: &str) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_bool<E>(self, _: bool) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_i64<E>(self, _: i64) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_u64<E>(self, _: u64) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
            fn visit_f64<E>(self, _: f64) -> Result<RawEntry, E> {
                Ok(RawEntry::default())
            }
        }
        d.deserialize_any(V)
    }
}

impl RawEntry {
    /// The entry, when it has a version; `urls` and `digest` keep what is usable of them.
    fn usable(self) -> Option<IndexEntry> {
        let version = match self.version? {
            Value::String(s) if !s.trim().is_empty() => s,
            Value::Number(n) => n.to_string(),
            _ => return None,
        };
        let urls = match self.urls {
            Some(Value::Array(a)) => a
                .into_iter()
                .filter_map(|u| u.as_str().map(str::to_string))
                .collect(),
            Some(Value::String(u)) => vec![u],
            _ => Vec::new(),
        };
        let digest = self.digest.and_then(|d| d.as_str().map(str::to_string));
        Some(IndexEntry {
            version,
            urls,
            digest,
        })
    }
}

#[derive(Debug, Deserialize)]
struct Index {
    #[serde(default)]
    entries: Option<HashMap<String, Option<Vec<RawEntry>>>>,
}

type Entries = HashMap<String, Vec<IndexEntry>>;

/// The last index read from a repository: its `ETag` for a conditional request, and the
/// SHA-256 of its bytes (a repository without ETags is not parsed again when nothing changed).
#[derive(Debug)]
struct CachedIndex {
    etag: Option<String>,
    sha: Vec<u8>,
    entries: Arc<Entries>,
}

/// The chart cache: indexes (in memory, revalidated with `ETag`), archives and pins (on disk).
#[derive(Debug)]
pub struct ChartCache {
    dir: PathBuf,
    client: OnceLock<reqwest::Client>,
    indexes: Mutex<HashMap<String, CachedIndex>>,
    /// Credentials by repository URL (as configured, trailing `/` removed).
    credentials: Mutex<HashMap<String, Credentials>>,
}

impl ChartCache {
    /// A cache in `dir` (created at the first download).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            client: OnceLock::new(),
            indexes: Mutex::default(),
            credentials: Mutex::default(),
        }
    }

    /// Authenticates every request to `repository` (and only to its host) with `credentials`.
    pub fn set_credentials(&self, repository: &str, credentials: Credentials) {
        self.credentials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(repository.trim_end_matches('/').to_string(), credentials);
    }

    fn client(&self) -> Result<&reqwest::Client, Error> {
        if let Some(c) = self.client.get() {
            return Ok(c);
        }
        let c = reqwest::Client::builder()
            .user_agent(concat!("driftless/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(Error::ClientFailed)?;
        Ok(self.client.get_or_init(|| c))
    }

    /// Resolves `version` of chart `name` in `repository`'s index, downloads its archive when
    /// the cache lacks it, and returns it pinned. `pinned` is the (version, digest) the caller
    /// applied before (kept in the store, so it survives this cache): when the version resolved
    /// is that one, its digest must be that one. Every request is bounded by `timeout`; the
    /// credentials set for the repository go with requests to its host.
    ///
    /// # Errors
    ///
    /// [`Error::RequestFailed`], [`Error::Status`], [`Error::TooLarge`] for the transfers;
    /// [`Error::IndexInvalid`], [`Error::ChartNotFound`], [`Error::InvalidVersion`],
    /// [`Error::NoMatchingVersion`], [`Error::NoUrl`] for the index; [`Error::DigestMismatch`]
    /// and [`Error::DigestChanged`] for the archive; [`Error::CacheFailed`].
    pub async fn resolve(
        &self,
        repository: &str,
        name: &str,
        version: &str,
        pinned: Option<(&str, &str)>,
        timeout: Duration,
    ) -> Result<Chart, Error> {
        let base = repository.trim_end_matches('/').to_string();
        let credentials = self
            .credentials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&base)
            .cloned();
        let credentials = credentials.as_ref();
        let shown = redact_url(&base);
        let span = tracing::info_span!("chart_fetch", repository = %shown, chart = %name);
        let entries = self.index(&base, credentials, timeout).await?;
        let list = entries.get(name).ok_or_else(|| Error::ChartNotFound {
            name: name.to_string(),
            repository: shown.clone(),
        })?;
        let entry = pick(list, version).map_err(|e| match e {
            Pick::Invalid(message) => Error::InvalidVersion {
                version: version.to_string(),
                message,
            },
            Pick::None(newest) => Error::NoMatchingVersion {
                name: name.to_string(),
                version: version.to_string(),
                repository: shown.clone(),
                newest,
            },
        })?;
        let folder = self.dir.join(repo_folder(&base));
        let pin = folder.join(format!("{}-{}.sha256", safe(name), safe(&entry.version)));
        let on_disk = std::fs::read_to_string(&pin)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        // The caller's pin (what was applied, from the store) outlives this cache: it wins.
        let given = pinned
            .filter(|(v, _)| *v == entry.version)
            .map(|(_, d)| d.to_ascii_lowercase());
        if let Some(g) = &given
            && on_disk.as_ref() != Some(g)
        {
            write_atomic(&pin, g.as_bytes())?;
        }
        let pinned = given.or(on_disk);
        let indexed = entry
            .digest
            .as_deref()
            .map(|d| d.trim().trim_start_matches("sha256:").to_ascii_lowercase())
            .filter(|d| !d.is_empty());
        if let (Some(p), Some(d)) = (&pinned, &indexed)
            && p != d
        {
            return Err(Error::DigestChanged {
                name: name.to_string(),
                version: entry.version.clone(),
                pinned: p.clone(),
                now: d.clone(),
            });
        }
        // The archive we have, if its digest is the expected one (pinned, else indexed).
        if let Some(d) = pinned.as_ref().or(indexed.as_ref()) {
            let archive = folder.join(archive_name(name, &entry.version, d));
            if let Ok(bytes) = std::fs::read(&archive)
                && hex(&Sha256::digest(&bytes)) == *d
            {
                if pinned.is_none() {
                    write_atomic(&pin, d.as_bytes())?;
                }
                return Ok(Chart {
                    repository: shown,
                    name: name.to_string(),
                    version: entry.version.clone(),
                    digest: d.clone(),
                    archive,
                });
            }
        }
        let url = entry
            .urls
            .first()
            .ok_or_else(|| Error::NoUrl {
                name: name.to_string(),
                version: entry.version.clone(),
            })
            .map(|u| absolute_url(&base, u))?;
        let bytes = self
            .get(&url, &base, credentials, timeout, MAX_CHART_BYTES, None)
            .await?
            .map(|(b, _)| b)
            .unwrap_or_default();
        // A chart archive is a gzipped tar: anything else (an HTML error page served with 200)
        // is never pinned.
        if !bytes.starts_with(&[0x1f, 0x8b]) {
            return Err(Error::NotAnArchive {
                url: redact_url(&url),
            });
        }
        let actual = hex(&Sha256::digest(&bytes));
        if let Some(expected) = &indexed
            && *expected != actual
        {
            return Err(Error::DigestMismatch {
                name: name.to_string(),
                version: entry.version.clone(),
                expected: expected.clone(),
                actual,
            });
        }
        if let Some(p) = &pinned
            && *p != actual
        {
            return Err(Error::DigestChanged {
                name: name.to_string(),
                version: entry.version.clone(),
                pinned: p.clone(),
                now: actual,
            });
        }
        let archive = folder.join(archive_name(name, &entry.version, &actual));
        write_atomic(&archive, &bytes)?;
        if pinned.is_none() {
            write_atomic(&pin, actual.as_bytes())?;
        }
        tracing::info!(parent: &span, version = %entry.version, digest = %&actual[..12], "Chart downloaded");
        Ok(Chart {
            repository: shown,
            name: name.to_string(),
            version: entry.version.clone(),
            digest: actual,
            archive,
        })
    }

    /// The index of `base`, from memory when the repository says it has not changed (304).
    async fn index(
        &self,
        base: &str,
        credentials: Option<&Credentials>,
        timeout: Duration,
    ) -> Result<Arc<Entries>, Error> {
        let url = format!("{base}/index.yaml");
        let (etag, known) = {
            let cached = self.indexes.lock().unwrap_or_else(|e| e.into_inner());
            match cached.get(base) {
                Some(c) => (c.etag.clone(), Some(c.entries.clone())),
                None => (None, None),
            }
        };
        let got = self
            .get(
                &url,
                base,
                credentials,
                timeout,
                MAX_INDEX_BYTES,
                etag.as_deref(),
            )
            .await?;
        let Some((bytes, etag)) = got else {
            // 304 Not Modified: what we have is current.
            return known.ok_or_else(|| Error::IndexInvalid {
                url: redact_url(&url),
                message: "answered 304 to a request that was not conditional".into(),
            });
        };
        let sha = Sha256::digest(&bytes).to_vec();
        if let Some(k) = known.filter(|_| {
            self.indexes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(base)
                .is_some_and(|c| c.sha == sha)
        }) {
            return Ok(k);
        }
        let shown = redact_url(&url);
        // A large index takes a while to parse: off the async workers.
        let parsed = tokio::task::spawn_blocking(move || parse_index(&bytes))
            .await
            .map_err(|e| Error::IndexInvalid {
                url: shown.clone(),
                message: e.to_string(),
            })?;
        let entries = Arc::new(parsed.map_err(|message| Error::IndexInvalid {
            url: shown.clone(),
            message,
        })?);
        self.indexes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                base.to_string(),
                CachedIndex {
                    etag,
                    sha,
                    entries: entries.clone(),
                },
            );
        Ok(entries)
    }

    /// GETs `url` (credentials only when it is on `base`'s host), at most `limit` bytes.
    /// `Ok(None)` for 304 to a request with `If-None-Match: etag`; else the body and its ETag.
    async fn get(
        &self,
        url: &str,
        base: &str,
        credentials: Option<&Credentials>,
        timeout: Duration,
        limit: usize,
        etag: Option<&str>,
    ) -> Result<Option<(Vec<u8>, Option<String>)>, Error> {
        let shown = redact_url(url);
        // Without its URL: the error's text would show credentials written into it.
        let failed = |source: reqwest::Error| Error::RequestFailed {
            url: shown.clone(),
            source: source.without_url(),
        };
        let mut req = self.client()?.get(url).timeout(timeout);
        if let Some(c) = credentials
            && same_host(url, base)
        {
            let user = c.username.clone().unwrap_or_else(|| "driftless".into());
            req = req.basic_auth(
                user,
                c.secret.as_ref().map(|s| s.expose_secret().to_string()),
            );
        }
        if let Some(e) = etag {
            req = req.header(reqwest::header::IF_NONE_MATCH, e);
        }
        let mut resp = req.send().await.map_err(failed)?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_MODIFIED && etag.is_some() {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(Error::Status {
                url: shown,
                status: status.as_u16(),
            });
        }
        let etag = resp
            .headers()
            .get(reqwest::header::ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        if resp.content_length().is_some_and(|n| n > limit as u64) {
            return Err(Error::TooLarge { url: shown, limit });
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(failed)? {
            body.extend_from_slice(&chunk);
            if body.len() > limit {
                return Err(Error::TooLarge { url: shown, limit });
            }
        }
        Ok(Some((body, etag)))
    }
}

/// The entries of an `index.yaml`; an entry without a version is skipped (with a debug line),
/// as helm skips it. `Err` with the line and column when it is not YAML of that shape.
fn parse_index(bytes: &[u8]) -> Result<Entries, String> {
    let text = String::from_utf8_lossy(bytes);
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_documents: 4,
            max_nodes: 50_000_000,
            max_events: 100_000_000,
            max_depth: 64,
            max_total_scalar_bytes: MAX_INDEX_BYTES * 2,
        },
    };
    let index: Index = serde_saphyr::from_str_with_options(&text, options).map_err(|e| {
        let (line, column, message) = crate::yaml::error_parts(&e);
        format!("line {line} column {column}: {message}")
    })?;
    let mut out = Entries::new();
    for (name, list) in index.entries.unwrap_or_default() {
        let mut usable = Vec::new();
        for raw in list.unwrap_or_default() {
            match raw.usable() {
                Some(e) => usable.push(e),
                None => tracing::debug!(chart = %name, "Index entry without a version skipped"),
            }
        }
        out.insert(name, usable);
    }
    Ok(out)
}

/// Why no version was picked.
enum Pick {
    /// The version is neither a version nor a range.
    Invalid(String),
    /// Nothing matches; the newest version there is.
    None(String),
}

/// The entry `wanted` names: the exact version when the index has it, else the newest that
/// the range matches (Helm's range syntax, [`version_req`]).
fn pick<'e>(list: &'e [IndexEntry], wanted: &str) -> Result<&'e IndexEntry, Pick> {
    let wanted = wanted.trim();
    let plain = wanted.trim_start_matches('v');
    if let Some(e) = list
        .iter()
        .find(|e| e.version == wanted || e.version.trim_start_matches('v') == plain)
    {
        return Ok(e);
    }
    let req = version_req(wanted).map_err(Pick::Invalid)?;
    let parsed = |e: &IndexEntry| semver::Version::parse(e.version.trim_start_matches('v')).ok();
    let newest = list
        .iter()
        .filter_map(|e| parsed(e).map(|v| (v, e)))
        .max_by(|a, b| a.0.cmp(&b.0));
    list.iter()
        .filter_map(|e| parsed(e).map(|v| (v, e)))
        .filter(|(v, _)| req.iter().any(|r| r.matches(v)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, e)| e)
        .ok_or_else(|| Pick::None(newest.map_or_else(|| "none".into(), |(v, _)| v.to_string())))
}

/// A Helm (Masterminds semver) version constraint as Rust semver requirements, one per `||`
/// alternative: comparators separated by spaces or commas are all required; a bare version is
/// exact (Masterminds' `1.2.3` means `=1.2.3`, where Rust's means `^1.2.3`); `x`/`X` are
/// wildcards; `1.2 - 1.4` is `>=1.2, <=1.4`.
fn version_req(text: &str) -> Result<Vec<semver::VersionReq>, String> {
    let mut out = Vec::new();
    for alternative in text.split("||") {
        let alternative = alternative.trim();
        let comparators: Vec<String> = if let Some((lo, hi)) = alternative.split_once(" - ") {
            vec![format!(">={}", lo.trim()), format!("<={}", hi.trim())]
        } else {
            // `>= 1.2` written with a space: join an operator to its version.
            let mut parts: Vec<String> = Vec::new();
            for word in alternative.split([' ', ',']).filter(|w| !w.is_empty()) {
                match parts.last_mut() {
                    Some(last) if last.chars().all(|c| "<>=!~^".contains(c)) => last.push_str(word),
                    _ => parts.push(word.to_string()),
                }
            }
            parts
        };
        if comparators.is_empty() {
            return Err("empty".into());
        }
        let joined: Vec<String> = comparators
            .iter()
            .map(|c| {
                let c = c.replace(['x', 'X'], "*");
                let c = c.trim_start_matches('v').to_string();
                let op_end = c
                    .find(|ch: char| ch.is_ascii_digit() || ch == '*')
                    .unwrap_or(0);
                let (op, v) = c.split_at(op_end);
                let v = v.trim_start_matches('v');
                if op.is_empty() && !v.contains('*') {
                    format!("={v}")
                } else {
                    format!("{op}{v}")
                }
            })
            .collect();
        out.push(semver::VersionReq::parse(&joined.join(", ")).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

/// `<host>-<hash>`: the cache folder of one repository URL.
fn repo_folder(base: &str) -> String {
    let hash = hex(&Sha256::digest(base.as_bytes()));
    let host: String = redact_url(base)
        .split("://")
        .nth(1)
        .unwrap_or("repo")
        .split(['/', ':', '@'])
        .next()
        .unwrap_or("repo")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{host}-{}", &hash[..12])
}

/// A name or version fit for a file name.
fn safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._+-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn archive_name(name: &str, version: &str, digest: &str) -> String {
    format!(
        "{}-{}-{}.tgz",
        safe(name),
        safe(version),
        &digest[..digest.len().min(16)]
    )
}

/// An index's URL for an archive, resolved against the repository's folder as a browser (and
/// helm) resolves a link: an absolute URL stays, a relative one is joined to `<base>/`.
fn absolute_url(base: &str, url: &str) -> String {
    match reqwest::Url::parse(&format!("{base}/")).and_then(|b| b.join(url)) {
        Ok(u) => u.to_string(),
        Err(_) => url.to_string(),
    }
}

/// True when `url` is on the same scheme, host and port as `base`, as the URL parser that
/// sends the request reads them (a `\`, `?`, `#` or `@` cannot make two hosts look alike).
fn same_host(url: &str, base: &str) -> bool {
    let origin = |u: &str| {
        let u = reqwest::Url::parse(u).ok()?;
        Some((
            u.scheme().to_string(),
            u.host_str()?.to_ascii_lowercase(),
            u.port_or_known_default(),
        ))
    };
    origin(url).is_some() && origin(url) == origin(base)
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let failed = |source| Error::CacheFailed {
        path: path.to_path_buf(),
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(failed)?;
    // Unique per process and write: two apps of one chart may write it at once.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{}.{}-{}.partial",
        path.file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        std::process::id(),
        WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&tmp, bytes).map_err(failed)?;
    std::fs::rename(&tmp, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(versions: &[&str]) -> Vec<IndexEntry> {
        versions
            .iter()
            .map(|v| IndexEntry {
                version: v.to_string(),
                urls: vec![format!("c-{v}.tgz")],
                digest: None,
            })
            .collect()
    }

    #[test]
    fn a_version_is_exact_and_a_range_takes_the_newest_match() {
        let list = entries(&["1.0.0", "1.2.0", "1.10.1", "2.0.0", "2.1.0-rc.1"]);
        let v = |w: &str| pick(&list, w).ok().map(|e| e.version.clone());
        assert_eq!(v("1.2.0").as_deref(), Some("1.2.0"));
        assert_eq!(v("v1.2.0").as_deref(), Some("1.2.0"));
        assert_eq!(v(">=1.0.0 <2").as_deref(), Some("1.10.1"));
        assert_eq!(v(">= 1.0, < 2.0").as_deref(), Some("1.10.1"));
        assert_eq!(v("1.x").as_deref(), Some("1.10.1"));
        assert_eq!(v("^1.2").as_deref(), Some("1.10.1"));
        assert_eq!(v("~1.2").as_deref(), Some("1.2.0"));
        assert_eq!(v("1.0 - 1.5").as_deref(), Some("1.2.0"));
        assert_eq!(v("<1 || >=2").as_deref(), Some("2.0.0"));
        assert_eq!(
            v("*").as_deref(),
            Some("2.0.0"),
            "no prerelease unless asked"
        );
        assert!(matches!(pick(&list, "3.x"), Err(Pick::None(n)) if n == "2.1.0-rc.1"));
        assert!(matches!(
            pick(&list, "not a version"),
            Err(Pick::Invalid(_))
        ));
        // A bare version the index lacks is exact, never a caret range.
        assert!(matches!(pick(&list, "1.1.0"), Err(Pick::None(_))));
    }

    #[test]
    fn an_index_entry_that_cannot_be_read_is_skipped_as_helm_skips_it() {
        let index = b"apiVersion: v1\nentries:\n  other: null\n  broken:\n  - name: broken\n  - 7\n  web:\n  - version: 1.0\n    urls: null\n    description: x\n  - version: 1.1.0\n    urls: [web-1.1.0.tgz]\n    digest: abc\n";
        let e = parse_index(index).unwrap();
        assert!(e["broken"].is_empty() && e["other"].is_empty());
        assert_eq!(e["web"].len(), 2);
        assert_eq!(e["web"][0].version, "1.0");
        assert_eq!(e["web"][1].urls, vec!["web-1.1.0.tgz".to_string()]);
        assert!(
            parse_index(b"entries: [1, 2]\n")
                .unwrap_err()
                .starts_with("line 1")
        );
    }

    #[test]
    fn credentials_go_to_the_repository_host_only() {
        let base = "https://charts.example.com/stable";
        assert!(same_host("https://charts.example.com/stable/x-1.tgz", base));
        assert!(same_host(
            "https://CHARTS.example.com:443/other/x.tgz",
            base
        ));
        assert!(!same_host("https://cdn.example.net/x.tgz", base));
        assert!(!same_host("http://charts.example.com/x.tgz", base));
        assert!(!same_host("https://charts.example.com:8443/x.tgz", base));
        // URLs whose text names the repository's host after the real one.
        let local = "http://127.0.0.1:18091";
        for tricky in [
            "http://127.0.0.1:18092#@127.0.0.1:18091/x",
            "http://127.0.0.1:18092?@127.0.0.1:18091/x",
            "http://127.0.0.1:18092\\@127.0.0.1:18091/x.tgz",
            "http://evil.example@127.0.0.1:18092/x.tgz",
        ] {
            assert!(!same_host(tricky, local), "{tricky}");
        }
        assert_eq!(absolute_url(base, "x-1.tgz"), format!("{base}/x-1.tgz"));
        assert_eq!(absolute_url(base, "./x-1.tgz"), format!("{base}/x-1.tgz"));
        assert_eq!(absolute_url(base, "https://cdn/x.tgz"), "https://cdn/x.tgz");
    }
}
