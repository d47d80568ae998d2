//! What one Git host's commit-status and comment API looks like, one file per host: URLs,
//! headers, bodies, state names, pagination. Pure: no I/O; [`super::HttpProvider`] sends what
//! a [`Host`] describes, with one retry and error policy for all.

use reqwest::RequestBuilder;
use reqwest::header::HeaderMap;
use serde_json::Value;

use super::{CommitStatus, Provider, State};

/// Where statuses go: the API base (no trailing slash) and the repository as configured
/// (`owner/repo`, a GitLab project path, a Bitbucket `workspace/repo`).
pub(super) struct Repo<'a> {
    pub base: &'a str,
    pub repository: &'a str,
}

impl Repo<'_> {
    /// `owner/repo` split at its first `/`.
    pub fn owner_repo(&self) -> (&str, &str) {
        self.repository
            .split_once('/')
            .unwrap_or((self.repository, ""))
    }
}

/// How a host gives the latest status of (commit, context).
pub(super) enum LatestQuery {
    /// One status addressed by its key; 404 when there is none (Bitbucket).
    ByKey(String),
    /// A paginated list of statuses, filtered by context; the newest (highest id) wins.
    List {
        /// The first page.
        first: String,
        /// The field holding the state (`state`, Gitea's `status`).
        state_field: &'static str,
        /// The field holding the context (`context`, GitLab's `name`).
        context_field: &'static str,
    },
}

/// One Git host's API, as its documentation gives it.
pub(super) trait Host: Send + Sync {
    /// Which provider.
    fn provider(&self) -> Provider;
    /// Adds the credentials and the headers the host asks for.
    fn authorize(&self, req: RequestBuilder, token: &str, username: Option<&str>)
    -> RequestBuilder;
    /// The host's word for a state.
    fn native_state(&self, state: State) -> &'static str;
    /// The URL and JSON body that create or update a status.
    fn post_request(&self, at: &Repo, s: &CommitStatus) -> (String, Value);
    /// Where the latest status of (commit, context) is read.
    fn latest(&self, at: &Repo, sha: &str, context: &str) -> LatestQuery;
    /// The comments URL of pull request `number` and the base of one comment's URL (its id
    /// goes after a `/`); `None` for a host without preview comments.
    fn comment_urls(&self, at: &Repo, number: u64) -> Option<(String, String)> {
        let _ = (at, number);
        None
    }
    /// True when editing a comment is a `PUT` (GitLab), not a `PATCH`.
    fn edits_with_put(&self) -> bool {
        false
    }
    /// The first page of a comment listing.
    fn first_comment_page(&self, list_url: &str) -> String {
        format!("{list_url}?per_page=100")
    }
    /// The next page of a listing: a `Link: <...>; rel="next"` header by default.
    fn next_page(&self, current: &str, headers: &HeaderMap) -> Option<String> {
        let _ = current;
        link_next(headers)
    }
    /// True when a refused post means the host already shows that state (GitLab refuses to
    /// move a status to the state it is in).
    fn already_there(&self, status: u16, message: &str) -> bool {
        let _ = (status, message);
        false
    }
}

/// The `rel="next"` URL of a `Link` header (RFC 8288), as GitHub and Gitea paginate.
pub(super) fn link_next(headers: &HeaderMap) -> Option<String> {
    let link = headers.get(reqwest::header::LINK)?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_string()
        })
    })
}

/// The host for `provider`.
pub(super) fn for_provider(provider: Provider) -> Box<dyn Host> {
    match provider {
        Provider::Github => Box::new(super::github::GitHub),
        Provider::Gitea => Box::new(super::gitea::Gitea),
        Provider::Gitlab => Box::new(super::gitlab::GitLab),
        Provider::Bitbucket => Box::new(super::bitbucket::Bitbucket),
    }
}
