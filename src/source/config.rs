//! `apps[].source:` in the config file: the repository, ref, path, poll interval, credentials,
//! signature verification and read limits.

use std::time::Duration;

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::secret::SecretRef;
use crate::yaml::{duration, unspanned};

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
    /// How long one fetch may take, as Flux's `GitRepository` `spec.timeout`. Default `60s`;
    /// at least 1 second. A fetch that takes longer fails (`SourceAvailable=False`) and is
    /// retried with backoff; the revision in force stays enforced.
    #[serde(default = "default_fetch_timeout", deserialize_with = "duration")]
    pub timeout: Spanned<Duration>,
    /// Credentials and SSH host keys (none: anonymous).
    #[serde(default)]
    pub auth: Option<AuthConfig>,
    /// Commit signature verification (none: commits are not checked).
    #[serde(default)]
    pub verify: Option<VerifyConfig>,
    /// Bounds on reading the app's path from a Git tree (default: 250,000 entries, 256 MiB,
    /// 64 folders deep). A renderer's output counts against `maxBytes` too.
    #[serde(default)]
    pub limits: SourceLimitsConfig,
    /// Render the path as a Kustomize overlay with `kustomize build`. Without it, a path that
    /// holds a kustomization file is rendered so anyway (as Flux does); with it, a path without
    /// one is an error.
    #[serde(default)]
    pub kustomize: Option<Spanned<KustomizeConfig>>,
    /// Render a Helm chart with `helm template`: the chart at the path, or `chart:` from a
    /// chart repository. Without it, a path that holds a `Chart.yaml` is rendered with the
    /// defaults below.
    #[serde(default)]
    pub helm: Option<Spanned<HelmConfig>>,
    /// How long one renderer run may take (`kustomize build`, `helm template`). Default `60s`,
    /// at least 1 second; a run that takes longer is killed (its whole process group) and the
    /// revision fails with `RenderFailed`.
    #[serde(default = "default_render_timeout", deserialize_with = "duration")]
    pub render_timeout: Spanned<Duration>,
    /// Where the renderers are (the config file's top-level `renderers:`), filled in when the
    /// file is loaded; not a key of `source:`.
    #[serde(skip)]
    pub tools: RenderTools,
}

/// `apps[].source.kustomize:`. No settings yet: `{}` asks for Kustomize rendering. What Flux's
/// `Kustomization` or Argo CD's `kustomize:` source sets inline (`images`, `patches`,
/// `namePrefix`, `components`) belongs in the overlay's own `kustomization.yaml`.
#[derive(Clone, Debug, Default)]
pub struct KustomizeConfig {}

impl<'de> Deserialize<'de> for KustomizeConfig {
    /// An empty mapping (`{}`, or nothing); any key is an error that says where kustomize's
    /// settings go.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let keys: Option<std::collections::BTreeMap<String, serde::de::IgnoredAny>> =
            Option::deserialize(d)?;
        if let Some(k) = keys.unwrap_or_default().keys().next() {
            return Err(serde::de::Error::custom(format!(
                "unknown field `{k}`: `source.kustomize` takes no settings (write `kustomize: {{}}`); kustomize's own settings (images, patches, namePrefix, components) go in the overlay's kustomization.yaml"
            )));
        }
        Ok(KustomizeConfig {})
    }
}

/// `apps[].source.helm:` the settings of `helm template` (Argo CD's `helm:` source, Flux's
/// `HelmRelease`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HelmConfig {
    /// The release name (`.Release.Name`). Default: the app's name.
    #[serde(default)]
    pub release_name: Option<Spanned<String>>,
    /// The release namespace (`helm template --namespace`, `.Release.Namespace`). Default: the
    /// app's `target.namespace`.
    #[serde(default)]
    pub namespace: Option<Spanned<String>>,
    /// Values files, relative to the app's path (`source.path`) in the repository, in order;
    /// each must stay inside the repository. Later files win, as with `helm -f a -f b`.
    #[serde(default)]
    pub values_files: Vec<Spanned<String>>,
    /// Values given inline (a mapping); they win over `valuesFiles`, as in Argo CD.
    #[serde(default)]
    pub values: Option<Spanned<serde_json::Value>>,
    /// Render the chart's `crds/` folder too (`--include-crds`). Default true: Argo CD and Flux
    /// both install a chart's CRDs.
    #[serde(
        default = "default_true",
        rename = "includeCRDs",
        alias = "includeCrds"
    )]
    pub include_crds: bool,
    /// `.Capabilities.KubeVersion` (`--kube-version`, e.g. `1.37.0`). Default: helm's own.
    #[serde(default)]
    pub kube_version: Option<Spanned<String>>,
    /// Extra API versions for `.Capabilities.APIVersions` (`--api-versions`, e.g.
    /// `monitoring.coreos.com/v1`).
    #[serde(default)]
    pub api_versions: Vec<Spanned<String>>,
    /// Leave out the chart's test hooks (`helm.sh/hook: test`, `--skip-tests`): they are run
    /// by `helm test`, never part of a release. Default true.
    #[serde(default = "default_true")]
    pub skip_tests: bool,
    /// Leave out every hook (`--no-hooks`). Default false: other hooks (`pre-install`,
    /// `post-upgrade`, ...) are applied as ordinary objects, since driftless has no hook phases.
    #[serde(default)]
    pub no_hooks: bool,
    /// A chart from a chart repository instead of the chart at the app's path.
    #[serde(default)]
    pub chart: Option<ChartConfig>,
}

/// `apps[].source.helm.chart:` a chart in a Helm chart repository (an HTTP server with an
/// `index.yaml`, as `helm repo add` takes). It is fetched in the source stage: the version
/// resolved in the index, the archive downloaded once and its digest pinned; rendering is
/// offline. OCI registries are not supported.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChartConfig {
    /// The repository's URL (`https://...`, or `http://` on loopback), the folder of its
    /// `index.yaml`.
    pub repository: Spanned<String>,
    /// The chart's name in the index.
    pub name: Spanned<String>,
    /// An exact version (`6.5.0`) or a semver range (`>=6.0.0 <7`, `6.x`, `^6.1`, `~6.1.2`):
    /// the newest version in the index that matches.
    pub version: Spanned<String>,
    /// Credentials for the repository (HTTP Basic: `username` with `password` or `token`),
    /// sent to the repository's host only.
    #[serde(default)]
    pub auth: Option<AuthConfig>,
}

/// Where the renderers are: the config file's top-level `renderers:` (each path relative to
/// the config file's folder), else `kustomize` and `helm` on the `PATH`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RenderTools {
    /// The `kustomize` binary.
    #[serde(default)]
    pub kustomize: Option<std::path::PathBuf>,
    /// The `helm` binary.
    #[serde(default)]
    pub helm: Option<std::path::PathBuf>,
}

impl Default for HelmConfig {
    /// The settings of a chart found at the app's path without `source.helm`.
    fn default() -> Self {
        Self {
            release_name: None,
            namespace: None,
            values_files: Vec::new(),
            values: None,
            include_crds: true,
            kube_version: None,
            api_versions: Vec::new(),
            skip_tests: true,
            no_hooks: false,
            chart: None,
        }
    }
}

fn default_true() -> bool {
    true
}

fn default_render_timeout() -> Spanned<Duration> {
    unspanned(Duration::from_secs(60))
}

/// `apps[].source.limits:` bounds on reading the app's path from a Git tree
/// ([`super::Limits`]); each at least 1. A revision past one is refused with an error
/// naming the bound, and the revision in force stays enforced.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SourceLimitsConfig {
    /// Files and folders visited under the path (a folder listed several times counts each
    /// time). Default 250,000.
    #[serde(default = "default_max_entries")]
    pub max_entries: Spanned<u64>,
    /// Bytes of manifest files read, in total. Default 268435456 (256 MiB).
    #[serde(default = "default_max_bytes")]
    pub max_bytes: Spanned<u64>,
    /// Folders below the path, symlinked ones included. Default 64.
    #[serde(default = "default_max_depth")]
    pub max_depth: Spanned<u64>,
}

impl Default for SourceLimitsConfig {
    fn default() -> Self {
        SourceLimitsConfig {
            max_entries: default_max_entries(),
            max_bytes: default_max_bytes(),
            max_depth: default_max_depth(),
        }
    }
}

impl SourceLimitsConfig {
    /// The bounds as the tree reader takes them.
    pub fn limits(&self) -> super::Limits {
        super::Limits {
            max_entries: self.max_entries.value,
            max_bytes: self.max_bytes.value,
            max_depth: self.max_depth.value,
        }
    }
}

fn default_max_entries() -> Spanned<u64> {
    unspanned(super::Limits::default().max_entries)
}

fn default_max_bytes() -> Spanned<u64> {
    unspanned(super::Limits::default().max_bytes)
}

fn default_max_depth() -> Spanned<u64> {
    unspanned(super::Limits::default().max_depth)
}

/// `apps[].source.verify:`: apply only commits signed by a trusted key, as Flux's
/// `GitRepository` `spec.verify` (`mode: HEAD`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VerifyConfig {
    /// What is verified: `head` (the commit to apply). Default `head`.
    #[serde(default)]
    pub mode: VerifyMode,
    /// The SSH keys allowed to sign, in `ssh-keygen`'s allowed_signers format.
    #[serde(default)]
    pub allowed_signers: Option<Spanned<SecretRef>>,
    /// Armored OpenPGP public keys (`gpg --armor --export`) allowed to sign.
    #[serde(default)]
    pub openpgp_keys: Option<Spanned<SecretRef>>,
}

/// `apps[].source.verify.mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub enum VerifyMode {
    /// The head commit of the ref (Flux's `HEAD`).
    #[default]
    #[serde(rename = "head", alias = "HEAD")]
    Head,
}

/// `apps[].source.auth:`: how to reach a private repository, as Flux's `GitRepository`
/// `secretRef` (`username`/`password`, `identity`/`known_hosts`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthConfig {
    /// HTTP Basic username. Default `git` (GitHub, GitLab and Gitea take any username with a
    /// token); for SSH, the user when the URL names none.
    #[serde(default)]
    pub username: Option<String>,
    /// An access token, sent over https as the HTTP Basic password.
    #[serde(default)]
    pub token: Option<Spanned<SecretRef>>,
    /// A password, with `username`.
    #[serde(default)]
    pub password: Option<Spanned<SecretRef>>,
    /// An SSH private key (OpenSSH or PEM format, without a passphrase).
    #[serde(default)]
    pub ssh_key: Option<Spanned<SecretRef>>,
    /// The SSH server's host keys, in known_hosts format (`ssh-keyscan HOST`). Required for
    /// SSH URLs unless `insecureSkipHostKeyCheck`.
    #[serde(default)]
    pub known_hosts: Option<Spanned<SecretRef>>,
    /// Accept any SSH host key (logged as a warning at every connection). Default false.
    #[serde(default)]
    pub insecure_skip_host_key_check: bool,
}

fn default_fetch_timeout() -> Spanned<Duration> {
    unspanned(super::DEFAULT_FETCH_TIMEOUT)
}

fn default_path() -> Spanned<String> {
    unspanned(String::new())
}

fn default_interval() -> Spanned<Duration> {
    unspanned(Duration::from_secs(60))
}
