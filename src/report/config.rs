//! `apps[].status:` in the config file: which Git host gets the app's commit statuses.

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::Provider;
use crate::secret::SecretRef;

/// `apps[].status:`: commit statuses on the Git host.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct StatusConfig {
    /// `github`, `gitlab`, `gitea` or `bitbucket`.
    pub provider: Provider,
    /// The base the provider's documented paths go after: GitHub `https://api.github.com`
    /// (Enterprise: `https://HOST/api/v3`); GitLab and Gitea the server root (driftless adds
    /// `/api/v4` or `/api/v1`); Bitbucket `https://api.bitbucket.org` (driftless adds `/2.0`).
    #[serde(default)]
    pub api_url: Option<Spanned<String>>,
    /// `owner/name` (Bitbucket: `workspace/repo`; GitLab: the project id or its path).
    pub repository: Spanned<String>,
    /// The API token.
    pub token: Spanned<SecretRef>,
    /// Bitbucket only: a username to send with the token as an app password (HTTP Basic);
    /// without it the token is sent as a Bearer access token.
    #[serde(default)]
    pub username: Option<String>,
}
