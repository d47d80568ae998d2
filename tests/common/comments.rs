//! A Git host's pull-request comments, played in process: GitHub and Gitea issue comments,
//! GitLab merge-request notes. It keeps the comments it is given, and checks every request the
//! way the provider documents it (method, path, auth header, user agent, JSON content type and
//! a body of exactly `{"body": "..."}`); a request that breaks a rule is answered 400 and
//! recorded in `violations`.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use wiremock::{Request, Respond, ResponseTemplate};

/// Which API it plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    /// `GET|POST /repos/{o}/{r}/issues/{n}/comments`, `PATCH /repos/{o}/{r}/issues/comments/{id}`.
    Github,
    /// The same under `/api/v1`.
    Gitea,
    /// `GET|POST /api/v4/projects/{id}/merge_requests/{iid}/notes`, `PUT .../notes/{id}`.
    Gitlab,
}

/// The comments of one pull request and what was asked of them.
#[derive(Clone)]
pub struct Comments {
    host: Host,
    /// The comments list URL path, e.g. `/repos/acme/web/issues/7/comments`.
    list_path: String,
    /// Where one comment lives, before `/{id}`.
    item_prefix: String,
    /// (header, value) that authenticates.
    auth: (String, String),
    pub comments: Arc<Mutex<Vec<(u64, String)>>>,
    /// `GET`, `POST`, `PATCH 1`... in order.
    pub calls: Arc<Mutex<Vec<String>>>,
    pub violations: Arc<Mutex<Vec<String>>>,
}

impl Comments {
    pub fn new(host: Host, repo: &str, number: u64, token: &str) -> Self {
        let (list_path, item_prefix, auth) = match host {
            Host::Github => (
                format!("/repos/{repo}/issues/{number}/comments"),
                format!("/repos/{repo}/issues/comments"),
                ("authorization".to_string(), format!("Bearer {token}")),
            ),
            Host::Gitea => (
                format!("/api/v1/repos/{repo}/issues/{number}/comments"),
                format!("/api/v1/repos/{repo}/issues/comments"),
                ("authorization".to_string(), format!("token {token}")),
            ),
            Host::Gitlab => {
                let p = format!(
                    "/api/v4/projects/{}/merge_requests/{number}/notes",
                    repo.replace('/', "%2F")
                );
                (
                    p.clone(),
                    p,
                    ("private-token".to_string(), token.to_string()),
                )
            }
        };
        Self {
            host,
            list_path,
            item_prefix,
            auth,
            comments: Arc::default(),
            calls: Arc::default(),
            violations: Arc::default(),
        }
    }

    /// A regex matching every path this API serves (for `path_regex`).
    pub fn path_pattern(&self) -> String {
        format!(
            "^({}|{}/[0-9]+)$",
            regex_escape(&self.list_path),
            regex_escape(&self.item_prefix)
        )
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    pub fn bodies(&self) -> Vec<String> {
        self.comments
            .lock()
            .unwrap()
            .iter()
            .map(|(_, b)| b.clone())
            .collect()
    }

    pub fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    fn bad(&self, why: String) -> ResponseTemplate {
        self.violations.lock().unwrap().push(why.clone());
        ResponseTemplate::new(400).set_body_json(json!({"message": why}))
    }
}

fn regex_escape(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '/' || c == '-' || c == '_' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

impl Respond for Comments {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let header = |name: &str| {
            req.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        if header(&self.auth.0) != self.auth.1 {
            return self.bad(format!(
                "{} {}: bad {}",
                req.method,
                req.url.path(),
                self.auth.0
            ));
        }
        if !header("user-agent").starts_with("driftless/") {
            return self.bad("no driftless user agent".into());
        }
        let path = req.url.path().to_string();
        let method = req.method.as_str().to_string();
        let body = || -> Result<String, String> {
            if !header("content-type").starts_with("application/json") {
                return Err(format!("{method} {path}: not JSON"));
            }
            let v: Value =
                serde_json::from_slice(&req.body).map_err(|e| format!("{method}: {e}"))?;
            match v.as_object() {
                Some(m) if m.len() == 1 && m.get("body").is_some_and(Value::is_string) => {
                    Ok(m["body"].as_str().unwrap().to_string())
                }
                _ => Err(format!(
                    "{method} {path}: the body must be {{\"body\": \"...\"}}: {v}"
                )),
            }
        };
        let edit_method = if self.host == Host::Gitlab {
            "PUT"
        } else {
            "PATCH"
        };
        if path == self.list_path && method == "GET" {
            self.calls.lock().unwrap().push("GET".into());
            let list: Vec<Value> = self
                .comments
                .lock()
                .unwrap()
                .iter()
                .map(|(id, b)| json!({"id": id, "body": b, "user": {"login": "someone"}}))
                .collect();
            return ResponseTemplate::new(200).set_body_json(list);
        }
        if path == self.list_path && method == "POST" {
            let b = match body() {
                Ok(b) => b,
                Err(e) => return self.bad(e),
            };
            let mut comments = self.comments.lock().unwrap();
            let id = 1001
                + self
                    .calls
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|c| *c == "POST")
                    .count() as u64;
            comments.push((id, b.clone()));
            self.calls.lock().unwrap().push("POST".into());
            return ResponseTemplate::new(201).set_body_json(json!({"id": id, "body": b}));
        }
        if let Some(id) = path
            .strip_prefix(&format!("{}/", self.item_prefix))
            .and_then(|i| i.parse::<u64>().ok())
            && method == edit_method
        {
            let b = match body() {
                Ok(b) => b,
                Err(e) => return self.bad(e),
            };
            let mut comments = self.comments.lock().unwrap();
            return match comments.iter_mut().find(|(i, _)| *i == id) {
                Some(c) => {
                    c.1 = b.clone();
                    self.calls.lock().unwrap().push(format!("{method} {id}"));
                    ResponseTemplate::new(200).set_body_json(json!({"id": id, "body": b}))
                }
                None => ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"})),
            };
        }
        self.bad(format!("unexpected {method} {path}"))
    }
}
