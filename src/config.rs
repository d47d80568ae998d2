//! The config file (`driftless.yaml`): types, defaults and validation (DESIGN.md section 7).
//!
//! Unknown keys and bad values are errors naming the file, line and column. Relative paths in
//! the file (the store, the cache, local repositories) are resolved against the folder that
//! holds the config file, so a config works from any working directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::object::dns1123_label_error;

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
    /// The apps to reconcile.
    #[serde(default)]
    pub apps: Vec<AppConfig>,
}

fn default_cache_dir() -> PathBuf {
    PathBuf::from(".driftless")
}

/// `store:`: exactly one backend.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// The embedded SQLite store.
    pub sqlite: Option<SqliteConfig>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            sqlite: Some(SqliteConfig::default()),
        }
    }
}

/// `store.sqlite:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SqliteConfig {
    /// The database file. Default `.driftless/store.db`.
    #[serde(default = "default_store_path")]
    pub path: PathBuf,
}

impl Default for SqliteConfig {
    fn default() -> Self {
        Self {
            path: default_store_path(),
        }
    }
}

fn default_store_path() -> PathBuf {
    PathBuf::from(".driftless/store.db")
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
}

/// `apps[].source:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceConfig {
    /// A URL (`https://`, `file://`) or a local path (relative to the config file's folder).
    pub repo: Spanned<String>,
    /// Branch, tag, full ref or commit id. Default: the remote's HEAD.
    #[serde(default, rename = "ref")]
    pub reference: Option<String>,
    /// Folder inside the repository. Default: the root.
    #[serde(default = "default_path")]
    pub path: Spanned<String>,
    /// How often to poll the repository. Default 1 minute; at least 1 second.
    #[serde(default = "default_interval", deserialize_with = "duration")]
    pub interval: Spanned<Duration>,
}

fn default_path() -> Spanned<String> {
    unspanned(String::new())
}

fn default_interval() -> Spanned<Duration> {
    unspanned(Duration::from_secs(60))
}

fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(
        value,
        serde_saphyr::Location::UNKNOWN,
        serde_saphyr::Location::UNKNOWN,
    )
}

/// `apps[].target:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetConfig {
    /// Namespace for namespaced objects that declare none. Default `default`.
    #[serde(default = "default_namespace")]
    pub namespace: Spanned<String>,
}

impl Default for TargetConfig {
    fn default() -> Self {
        Self {
            namespace: default_namespace(),
        }
    }
}

fn default_namespace() -> Spanned<String> {
    unspanned("default".to_string())
}

/// `apps[].sync:`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SyncConfig {
    /// Delete objects this app applied that Git no longer declares. Default true.
    #[serde(default = "yes")]
    pub prune: bool,
    /// Revert changes made in the store to fields Git owns. Default true; false is detect-only.
    #[serde(default = "yes")]
    pub self_heal: bool,
    /// Allow a sync whose desired set is empty to prune everything the app owns. Default false.
    #[serde(default)]
    pub allow_empty: bool,
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            prune: true,
            self_heal: true,
            allow_empty: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Deserializes a humantime duration string (`30s`, `10m`, `1h 30m`).
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Spanned<Duration>, D::Error> {
    let s = Spanned::<String>::deserialize(d)?;
    let value = humantime::parse_duration(s.value.trim()).map_err(|e| {
        serde::de::Error::custom(format!(
            "invalid duration `{}`: {e} (write e.g. `30s`, `10m`, `1h`)",
            s.value
        ))
    })?;
    Ok(Spanned::new(value, s.referenced, s.defined))
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
    validate(path, &config)?;
    let base = path.parent().unwrap_or(Path::new("")).to_path_buf();
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    config.cache_dir = resolve(&config.cache_dir);
    if let Some(s) = &mut config.store.sqlite {
        s.path = resolve(&s.path);
    }
    for app in &mut config.apps {
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

fn validate(path: &Path, config: &Config) -> Result<(), Error> {
    let invalid = |loc: &serde_saphyr::Location, field: String, message: String| Error::Invalid {
        path: path.to_path_buf(),
        line: loc.line().max(1),
        column: loc.column().max(1),
        field,
        message,
    };
    if config.store.sqlite.is_none() {
        return Err(Error::Invalid {
            path: path.to_path_buf(),
            line: 1,
            column: 1,
            field: "store".into(),
            message: "choose a store: `sqlite: {path: ...}`".into(),
        });
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
        let ns = &app.target.namespace;
        if let Some(problem) = dns1123_label_error(&ns.value) {
            return Err(invalid(
                &ns.referenced,
                format!("apps[{i}].target.namespace"),
                format!("`{}` {problem}", ns.value),
            ));
        }
    }
    Ok(())
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
