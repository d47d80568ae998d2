//! Bitbucket Cloud: build statuses of a commit, addressed by a `key` of at most 40 characters
//! (`POST /2.0/repositories/{workspace}/{repo}/commit/{sha}/statuses/build`, states
//! `INPROGRESS`, `SUCCESSFUL`, `FAILED`, a required `url`), per
//! <https://developer.atlassian.com/cloud/bitbucket/rest/api-group-commit-statuses/>. No preview
//! comments.

use reqwest::RequestBuilder;
use serde_json::{Value, json};

use super::host::{Host, LatestQuery, Repo};
use super::{CommitStatus, Provider, State, bitbucket_key, segment};

/// Bitbucket Cloud.
pub(super) struct Bitbucket;

impl Host for Bitbucket {
    fn provider(&self) -> Provider {
        Provider::Bitbucket
    }

    fn authorize(
        &self,
        req: RequestBuilder,
        token: &str,
        username: Option<&str>,
    ) -> RequestBuilder {
        match username {
            Some(user) => req.basic_auth(user, Some(token)),
            None => req.bearer_auth(token),
        }
        .header("Accept", "application/json")
    }

    fn native_state(&self, state: State) -> &'static str {
        match state {
            State::Pending => "INPROGRESS",
            State::Success => "SUCCESSFUL",
            State::Failure | State::Error => "FAILED",
        }
    }

    fn post_request(&self, at: &Repo, s: &CommitStatus) -> (String, Value) {
        let (workspace, repo) = at.owner_repo();
        let url = format!(
            "{}/2.0/repositories/{}/{}/commit/{}/statuses/build",
            at.base,
            segment(workspace),
            segment(repo),
            s.sha
        );
        // Bitbucket requires a URL: the commit's page when there is no status page.
        let link = s.target_url.clone().unwrap_or_else(|| {
            format!("https://bitbucket.org/{workspace}/{repo}/commits/{}", s.sha)
        });
        let body = json!({
            "key": bitbucket_key(&s.context),
            "state": self.native_state(s.state),
            "name": s.context,
            "url": link,
            "description": s.description,
        });
        (url, body)
    }

    fn latest(&self, at: &Repo, sha: &str, context: &str) -> LatestQuery {
        let (workspace, repo) = at.owner_repo();
        LatestQuery::ByKey(format!(
            "{}/2.0/repositories/{}/{}/commit/{sha}/statuses/build/{}",
            at.base,
            segment(workspace),
            segment(repo),
            segment(&bitbucket_key(context))
        ))
    }
}
