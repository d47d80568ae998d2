//! Gitea (and Forgejo): GitHub's shapes under `/api/v1`, `token` authorization, statuses listed
//! with `limit` and their state in `status`, per <https://docs.gitea.com/api/>.

use reqwest::RequestBuilder;
use serde_json::Value;

use super::github::{github_state, issue_comment_urls, status_body};
use super::host::{Host, LatestQuery, Repo};
use super::{CommitStatus, Provider, State, segment};

/// Gitea.
pub(super) struct Gitea;

impl Host for Gitea {
    fn provider(&self) -> Provider {
        Provider::Gitea
    }

    fn authorize(&self, req: RequestBuilder, token: &str, _: Option<&str>) -> RequestBuilder {
        req.header("Authorization", format!("token {token}"))
            .header("Accept", "application/json")
    }

    fn native_state(&self, state: State) -> &'static str {
        github_state(state)
    }

    fn post_request(&self, at: &Repo, s: &CommitStatus) -> (String, Value) {
        let (owner, repo) = at.owner_repo();
        let url = format!(
            "{}/api/v1/repos/{}/{}/statuses/{}",
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
                "{}/api/v1/repos/{}/{}/statuses/{sha}?limit=50",
                at.base,
                segment(owner),
                segment(repo)
            ),
            state_field: "status",
            context_field: "context",
        }
    }

    fn comment_urls(&self, at: &Repo, number: u64) -> Option<(String, String)> {
        Some(issue_comment_urls(at, "/api/v1", number))
    }

    fn first_comment_page(&self, list_url: &str) -> String {
        format!("{list_url}?limit=50")
    }
}
