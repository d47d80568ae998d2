//! GitLab: commit statuses of a project (`POST /api/v4/projects/{id}/statuses/{sha}`, states
//! `running`, `success`, `failed`; no `error`), merge-request notes, `X-Next-Page`
//! pagination, per <https://docs.gitlab.com/api/commits/#set-the-pipeline-status-of-a-commit>.

use reqwest::RequestBuilder;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use super::host::{Host, LatestQuery, Repo};
use super::{CommitStatus, Provider, State, segment};

/// GitLab.
pub(super) struct GitLab;

impl Host for GitLab {
    fn provider(&self) -> Provider {
        Provider::Gitlab
    }

    fn authorize(&self, req: RequestBuilder, token: &str, _: Option<&str>) -> RequestBuilder {
        req.header("PRIVATE-TOKEN", token)
            .header("Accept", "application/json")
    }

    fn native_state(&self, state: State) -> &'static str {
        match state {
            // GitLab has no `error`; `running` is the state of work in progress.
            State::Pending => "running",
            State::Success => "success",
            State::Failure | State::Error => "failed",
        }
    }

    fn post_request(&self, at: &Repo, s: &CommitStatus) -> (String, Value) {
        let url = format!(
            "{}/api/v4/projects/{}/statuses/{}",
            at.base,
            segment(at.repository),
            s.sha
        );
        let mut body = json!({
            "state": self.native_state(s.state),
            "name": s.context,
            "description": s.description,
        });
        if let Some(t) = &s.target_url {
            body["target_url"] = json!(t);
        }
        (url, body)
    }

    fn latest(&self, at: &Repo, sha: &str, context: &str) -> LatestQuery {
        LatestQuery::List {
            first: format!(
                "{}/api/v4/projects/{}/repository/commits/{sha}/statuses?name={}&all=true&per_page=100",
                at.base,
                segment(at.repository),
                segment(context)
            ),
            state_field: "status",
            context_field: "name",
        }
    }

    fn comment_urls(&self, at: &Repo, number: u64) -> Option<(String, String)> {
        let list = format!(
            "{}/api/v4/projects/{}/merge_requests/{number}/notes",
            at.base,
            segment(at.repository)
        );
        Some((list.clone(), list))
    }

    fn edits_with_put(&self) -> bool {
        true
    }

    /// `X-Next-Page` (empty on the last page).
    fn next_page(&self, current: &str, headers: &HeaderMap) -> Option<String> {
        let page = headers.get("x-next-page")?.to_str().ok()?.trim();
        if page.is_empty() {
            return None;
        }
        let base = match current.find("&page=") {
            Some(i) => &current[..i],
            None => current,
        };
        Some(format!("{base}&page={page}"))
    }

    /// "Cannot transition status via :run from :running": it already shows that state.
    fn already_there(&self, status: u16, message: &str) -> bool {
        status == 400 && message.contains("Cannot transition status")
    }
}
