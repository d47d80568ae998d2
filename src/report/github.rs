//! GitHub (and GitHub Enterprise): the REST API's commit statuses
//! (`POST /repos/{owner}/{repo}/statuses/{sha}`, states `pending`, `success`, `failure`,
//! `error`) and issue comments (a pull request is an issue), per
//! <https://docs.github.com/en/rest/commits/statuses>.

use reqwest::RequestBuilder;
use serde_json::{Value, json};

use super::host::{Host, LatestQuery, Repo};
use super::{CommitStatus, Provider, State, segment};

/// GitHub.
pub(super) struct GitHub;

impl Host for GitHub {
    fn provider(&self) -> Provider {
        Provider::Github
    }

    fn authorize(&self, req: RequestBuilder, token: &str, _: Option<&str>) -> RequestBuilder {
        req.bearer_auth(token)
            .header("Accept", "application/vnd.github+json")
            .header("X-GitHub-Api-Version", "2022-11-28")
    }

    fn native_state(&self, state: State) -> &'static str {
        github_state(state)
    }

    fn post_request(&self, at: &Repo, s: &CommitStatus) -> (String, Value) {
        let (owner, repo) = at.owner_repo();
        let url = format!(
            "{}/repos/{}/{}/statuses/{}",
            at.base,
            segment(owner),
            segment(repo),
            s.sha
        );
        (url, status_body(self.native_state(s.state), s))
    }

    fn latest(&self, at: &Repo, sha: &str, _: &str) -> LatestQuery {
        let (owner, repo) = at.owner_repo();
        LatestQuery::List {
            first: format!(
                "{}/repos/{}/{}/commits/{sha}/statuses?per_page=100",
                at.base,
                segment(owner),
                segment(repo)
            ),
            state_field: "state",
            context_field: "context",
        }
    }

    fn comment_urls(&self, at: &Repo, number: u64) -> Option<(String, String)> {
        Some(issue_comment_urls(at, "", number))
    }
}

/// GitHub's state names, which Gitea shares.
pub(super) fn github_state(state: State) -> &'static str {
    match state {
        State::Pending => "pending",
        State::Success => "success",
        State::Failure => "failure",
        State::Error => "error",
    }
}

/// The comments of pull request `number` as an issue's (GitHub, and Gitea under `/api/v1`):
/// `{prefix}/repos/{o}/{r}/issues/{n}/comments`, and one comment's base
/// `{prefix}/repos/{o}/{r}/issues/comments`.
pub(super) fn issue_comment_urls(at: &Repo, prefix: &str, number: u64) -> (String, String) {
    let (owner, repo) = at.owner_repo();
    let base = format!(
        "{}{prefix}/repos/{}/{}/issues",
        at.base,
        segment(owner),
        segment(repo)
    );
    (
        format!("{base}/{number}/comments"),
        format!("{base}/comments"),
    )
}

/// The body GitHub and Gitea take: `state`, `description`, `context`, and `target_url` when
/// there is a page to link.
pub(super) fn status_body(state: &str, s: &CommitStatus) -> Value {
    let mut body = json!({"state": state, "description": s.description, "context": s.context});
    if let Some(t) = &s.target_url {
        body["target_url"] = json!(t);
    }
    body
}
