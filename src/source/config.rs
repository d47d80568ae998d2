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
    /// 64 folders deep).
    #[serde(default)]
    pub limits: SourceLimitsConfig,
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
