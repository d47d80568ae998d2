//! `store:` in the config file: which backend, and how to reach it. Read by `driftless run`
//! and the CLI when they open the store.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::secret::SecretRef;
use crate::yaml::{duration, unspanned};

/// `store:`: exactly one backend.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StoreConfig {
    /// The embedded SQLite store.
    pub sqlite: Option<SqliteConfig>,
    /// An etcd cluster (needs a build with the cargo feature `etcd`), shared by agent
    /// replicas.
    pub etcd: Option<Spanned<EtcdConfig>>,
    /// A Kubernetes API server (needs a build with the cargo feature `kubernetes`).
    pub kubernetes: Option<Spanned<KubernetesConfig>>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            sqlite: Some(SqliteConfig::default()),
            etcd: None,
            kubernetes: None,
        }
    }
}

/// `store.etcd:`: the cluster, the key prefix, credentials and the replicas' lease.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdConfig {
    /// Client URLs, `http://host:2379` or `https://host:2379` (with `tls`). At least one.
    pub endpoints: Vec<Spanned<String>>,
    /// Key prefix: objects live at `<prefix>/<group>/<kind>/<namespace>/<name>`. Default
    /// `/driftless`; must start with `/` and not end with one.
    #[serde(default = "default_etcd_prefix")]
    pub prefix: Spanned<String>,
    /// etcd user, with `password`.
    #[serde(default)]
    pub username: Option<String>,
    /// The user's password.
    #[serde(default)]
    pub password: Option<Spanned<SecretRef>>,
    /// TLS to the cluster.
    #[serde(default)]
    pub tls: Option<EtcdTlsConfig>,
    /// How long to wait for a connection. Default `5s`.
    #[serde(default = "default_dial_timeout", deserialize_with = "duration")]
    pub dial_timeout: Spanned<Duration>,
    /// How long a replica's lease lives without a keep-alive: a replica that dies has its apps
    /// taken over within this time. Default `15s` (Kubernetes' leader-election lease); whole
    /// seconds, at least `2s`.
    #[serde(
        default = "default_lease_ttl",
        deserialize_with = "duration",
        rename = "leaseTTL"
    )]
    pub lease_ttl: Spanned<Duration>,
    /// This replica's name, unique among the replicas. Default: the environment variable
    /// `DRIFTLESS_REPLICA`, else `<hostname>-<pid>`.
    #[serde(default)]
    pub replica: Option<Spanned<String>>,
}

/// `store.etcd.tls:`: PEM files (paths relative to the config file's folder).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EtcdTlsConfig {
    /// CA certificates that sign the servers' certificates.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// A client certificate, with `key`.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key.
    #[serde(default)]
    pub key: Option<Spanned<SecretRef>>,
}

fn default_etcd_prefix() -> Spanned<String> {
    unspanned("/driftless".to_string())
}

fn default_dial_timeout() -> Spanned<Duration> {
    unspanned(Duration::from_secs(5))
}

fn default_lease_ttl() -> Spanned<Duration> {
    unspanned(Duration::from_secs(15))
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

/// `store.kubernetes:`: which cluster, and how driftless applies to it.
///
/// The cluster: `kubeconfig` when given (relative to the config file's folder), else what
/// `kubectl` would use: `$KUBECONFIG`, then `~/.kube/config`, then the in-cluster service
/// account (kube-rs's `Config::infer`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubernetesConfig {
    /// A kubeconfig file. Default: as `kubectl` finds one (see above).
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context. Default: its current context.
    #[serde(default)]
    pub context: Option<String>,
    /// Field manager of driftless's applies (at most 128 characters). Default `driftless`.
    #[serde(default = "default_field_manager")]
    pub field_manager: Spanned<String>,
    /// Namespace of driftless's own records (inventories, app status), created when missing.
    /// Default `driftless-system`.
    #[serde(default = "default_records_namespace")]
    pub namespace: Spanned<String>,
    /// Apply with force: take back for Git the fields another manager changed (`kubectl edit`),
    /// as Flux and Argo CD do. Default true; false leaves such an object out of sync with a
    /// conflict.
    #[serde(default = "yes")]
    pub force: bool,
    /// How long an app's Lease lives without a renewal: a replica that dies has its apps taken
    /// over within this time and a third of it (the replicas share the apps through
    /// `coordination.k8s.io` Leases in `namespace`). Default `15s`; whole seconds, at least
    /// `2s`.
    #[serde(
        default = "default_lease_ttl",
        deserialize_with = "duration",
        rename = "leaseTTL"
    )]
    pub lease_ttl: Spanned<Duration>,
    /// This replica's name, unique among the replicas. Default: the environment variable
    /// `DRIFTLESS_REPLICA`, else `<hostname>-<pid>`.
    #[serde(default)]
    pub replica: Option<Spanned<String>>,
}

fn default_field_manager() -> Spanned<String> {
    unspanned("driftless".to_string())
}

fn default_records_namespace() -> Spanned<String> {
    unspanned("driftless-system".to_string())
}

fn yes() -> bool {
    true
}
