//! `apps[].target:` and `apps[].sync:` in the config file: the default namespace, prune,
//! self-heal, deadlines, retry backoff and sync windows.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::ignore::IgnoreRule;
use crate::window::WindowConfig;
use crate::yaml::{duration, opt_duration, unspanned};

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
    /// Kubernetes: take over an existing object the app does not own yet even when it differs
    /// from Git or carries Argo CD's or Flux's tracking label or annotation. Default false:
    /// such an object is reported as a conflict and left alone; one that already matches Git
    /// is adopted.
    #[serde(default)]
    pub adopt: bool,
    /// Kubernetes: prune a Namespace or a CustomResourceDefinition the app no longer declares
    /// even while it holds objects the app does not own (deleting it deletes them all).
    /// Default false: that prune is held, and the app says what the Namespace or CRD holds.
    #[serde(default)]
    pub prune_non_empty: bool,
    /// How long the app may stay Progressing, or not converge, before it is reported as
    /// failing (`Progressing=False`, `ProgressDeadlineExceeded`). Default `10m`.
    #[serde(default = "default_progress_deadline", deserialize_with = "duration")]
    pub progress_deadline: Spanned<Duration>,
    /// How long the app may be out of sync before the gap is an incident (`Stale=True`,
    /// `GapExceededThreshold`). None by default.
    #[serde(default, deserialize_with = "opt_duration")]
    pub stale_after: Option<Spanned<Duration>>,
    /// Backoff of failed syncs.
    #[serde(default)]
    pub retry: RetryConfig,
    /// Fields another writer owns (an HPA's `spec.replicas`): taken out of the declarations,
    /// never drift, never reverted, as Flux's `driftIgnoreRules`.
    #[serde(default)]
    pub ignore: Vec<Spanned<IgnoreRule>>,
    /// Sync windows: when automatic applies and drift reverts may run.
    #[serde(default)]
    pub windows: Vec<WindowConfig>,
}

impl SyncConfig {
    /// The ignore rules (`ignore:`) without their places in the config file.
    pub fn ignore_rules(&self) -> Vec<IgnoreRule> {
        self.ignore.iter().map(|r| r.value.clone()).collect()
    }
}

impl Default for SyncConfig {
    fn default() -> Self {
        Self {
            prune: true,
            self_heal: true,
            allow_empty: false,
            adopt: false,
            prune_non_empty: false,
            progress_deadline: default_progress_deadline(),
            stale_after: None,
            retry: RetryConfig::default(),
            ignore: Vec::new(),
            windows: Vec::new(),
        }
    }
}

fn default_progress_deadline() -> Spanned<Duration> {
    unspanned(Duration::from_secs(600))
}

/// `apps[].sync.retry:`: exponential backoff after a failed sync or fetch.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RetryConfig {
    /// First delay. Default `5s`.
    #[serde(default = "default_backoff", deserialize_with = "duration")]
    pub backoff: Spanned<Duration>,
    /// Multiplier per failure. Default 2.
    #[serde(default = "default_factor")]
    pub factor: u32,
    /// Longest delay. Default `3m`.
    #[serde(default = "default_max_backoff", deserialize_with = "duration")]
    pub max_backoff: Spanned<Duration>,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            backoff: default_backoff(),
            factor: default_factor(),
            max_backoff: default_max_backoff(),
        }
    }
}

fn default_backoff() -> Spanned<Duration> {
    unspanned(Duration::from_secs(5))
}

fn default_factor() -> u32 {
    2
}

fn default_max_backoff() -> Spanned<Duration> {
    unspanned(Duration::from_secs(180))
}

fn yes() -> bool {
    true
}
