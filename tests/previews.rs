//! Pull-request previews end to end, with the real binary: a bare remote repository whose
//! `refs/pull/N/head` (or `refs/merge-requests/N/head`) refs are made with `git push`, commit
//! statuses and comments checked by in-process provider servers, the preview pages of the HTTP
//! server, preview environments deployed and torn down, and the app's own objects untouched
//! throughout.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::comments::{Comments, Host};
use common::{Env, configmap};
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A bare repository on disk that `env.repo` pushes to: the app's remote.
struct Remote {
    dir: tempfile::TempDir,
}

impl Remote {
    fn new(env: &Env) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("git")
            .args(["init", "-q", "--bare", "-b", "main"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success());
        env.repo
            .git(&["remote", "add", "origin", dir.path().to_str().unwrap()]);
        env.repo.git(&["push", "-q", "origin", "main"]);
        Remote { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

/// Commits `files` (path, contents; `None` removes) on top of main as pull request `number`'s
/// head under `prefix` (`refs/pull` or `refs/merge-requests`), then goes back to main. Returns
/// the head commit. `date` sets the commit's dates (`@<unix seconds> +0000`).
fn push_pr(
    env: &Env,
    prefix: &str,
    number: u32,
    base: &str,
    files: &[(&str, Option<&str>)],
    date: Option<&str>,
) -> String {
    let branch = format!("pr{number}");
    env.repo.git(&["checkout", "-q", "-B", &branch, base]);
    for (p, contents) in files {
        match contents {
            Some(c) => {
                env.repo.write(p, c);
            }
            None => {
                env.repo.remove(p);
            }
        }
    }
    env.repo.git(&["add", "-A"]);
    let mut commit = Command::new("git");
    commit
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            &format!("pr {number}"),
        ])
        .current_dir(env.repo.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1");
    if let Some(d) = date {
        commit
            .env("GIT_COMMITTER_DATE", d)
            .env("GIT_AUTHOR_DATE", d);
    }
    assert!(commit.output().unwrap().status.success());
    let head = env.repo.head();
    env.repo.git(&[
        "push",
        "-q",
        "-f",
        "origin",
        &format!("HEAD:{prefix}/{number}/head"),
    ]);
    env.repo.git(&["checkout", "-q", "main"]);
    head
}

fn close_pr(env: &Env, prefix: &str, number: u32) {
    env.repo
        .git(&["push", "-q", "origin", &format!(":{prefix}/{number}/head")]);
}

/// A project whose app follows `remote` with these extra app lines.
fn project(env: &Env, remote: &Remote, server: &str, app_lines: &str) {
    let config = format!(
        "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\n{server}apps:\n  - name: demo\n    source:\n      repo: {}\n      path: app\n      interval: 1s\n{app_lines}",
        remote.path().display()
    );
    std::fs::write(env.config(), config).unwrap();
}

fn get_ns(env: &Env, kind: &str, name: &str, ns: &str) -> Option<Value> {
    let out = env.run(&["store", "get", kind, name, "-n", ns, "-o", "json"]);
    match out.status.code() {
        Some(0) => Some(serde_json::from_slice(&out.stdout).unwrap()),
        Some(1) => None,
        other => panic!("store get exited {other:?}: {}", common::stderr(&out)),
    }
}

/// Every live object outside the preview namespaces: (key, resourceVersion).
fn app_objects(env: &Env) -> Vec<(String, String)> {
    let out = env.run(&["store", "list", "-o", "json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| {
            !o["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .starts_with("pr-")
        })
        .map(|o| {
            (
                format!(
                    "{}/{}/{}",
                    o["kind"].as_str().unwrap(),
                    o["metadata"]["namespace"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap()
                ),
                o["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

/// The POSTed statuses: (sha, body).
async fn statuses(server: &MockServer, path_part: &str) -> Vec<(String, Value)> {
    server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path().contains(path_part))
        .map(|r| {
            let sha = r.url.path().rsplit('/').next().unwrap().to_string();
            (sha, serde_json::from_slice(&r.body).unwrap())
        })
        .collect()
}

async fn wait_async<T>(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out after {secs} s waiting for {what}");
}

fn hex_hmac(secret: &str, body: &[u8]) -> String {
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body);
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn github_host() -> MockServer {
    let github = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(
            r"^/repos/acme/web/commits/[0-9a-f]{40}/statuses$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&github)
        .await;
    github
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_requests_get_a_status_a_diff_page_and_one_comment_and_the_app_is_untouched() {
    let env = Env::new();
    let remote = Remote::new(&env);
    let github = github_host().await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/acme/web/statuses/[0-9a-f]{40}$"))
        .and(wiremock::matchers::header(
            "authorization",
            "Bearer gh-token",
        ))
        .and(wiremock::matchers::header(
            "content-type",
            "application/json",
        ))
        .respond_with(ResponseTemplate::new(201))
        .mount(&github)
        .await;
    let comments = Comments::new(Host::Github, "acme/web", 7, "gh-token");
    Mock::given(path_regex(comments.path_pattern()))
        .respond_with(comments.clone())
        .mount(&github)
        .await;
    // Pull request 8's comment (its manifests do not parse: the comment says so).
    let comments8 = Comments::new(Host::Github, "acme/web", 8, "gh-token");
    Mock::given(path_regex(comments8.path_pattern()))
        .respond_with(comments8.clone())
        .mount(&github)
        .await;
    project(
        &env,
        &remote,
        "server:\n  listen: \"127.0.0.1:0\"\n  externalUrl: https://drift.example.com\n  webhooks:\n    github: {secret: {env: DRIFTLESS_TEST_GH}}\n",
        &format!(
            "    status:\n      provider: github\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GH_TOKEN}}\n    preview:\n      refs: \"refs/pull/*/head\"\n      comment: true\n",
            github.uri()
        ),
    );
    // A long interval for the app would hide nothing here: previews run every second.
    let agent = env.agent_with_env(&[
        ("DRIFTLESS_TEST_GH_TOKEN", "gh-token"),
        ("DRIFTLESS_TEST_GH", "gh-secret"),
    ]);
    let addr = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let before = app_objects(&env);
    assert_eq!(before.len(), 2, "{before:?}");

    // Pull request 7: changes a, adds c and a secret, removes b.
    let head = push_pr(
        &env,
        "refs/pull",
        7,
        "main",
        &[
            ("app/a.yaml", Some(&configmap("a", &[("k", "2")]))),
            ("app/c.yaml", Some(&configmap("c", &[("k", "1")]))),
            (
                "app/s.yaml",
                Some(
                    "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  password: hunter2\n",
                ),
            ),
            ("app/b.yaml", None),
        ],
        None,
    );
    let (_, status) = wait_async("the preview status", 30, async || {
        statuses(&github, "/statuses/")
            .await
            .into_iter()
            .find(|(sha, b)| *sha == head && b["context"] == "driftless/demo/preview")
    })
    .await;
    assert_eq!(
        status,
        json!({
            "state": "success",
            "description": "2 to create, 1 to update, 1 to delete",
            "context": "driftless/demo/preview",
            "target_url": "https://drift.example.com/apps/demo/previews/7",
        })
    );
    // The full diff, as JSON and as a page; the secret's value never shows.
    let rec: Value = client()
        .get(format!("{addr}/api/v1/apps/demo/previews/7"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rec["revision"], head);
    assert_eq!(rec["ref"], "refs/pull/7/head");
    assert_eq!(rec["state"], "success");
    assert_eq!(
        rec["summary"],
        json!({"create": 2, "update": 1, "delete": 1, "unchanged": 0, "skipped": 0})
    );
    let update = rec["changes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["action"] == "update")
        .unwrap();
    assert_eq!(update["name"], "a");
    assert_eq!(update["fields"][0]["path"], "data.k");
    assert_eq!(update["fields"][0]["live"], "1");
    assert_eq!(update["fields"][0]["desired"], "2");
    let text = rec.to_string();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(
        rec["diff"]
            .as_str()
            .unwrap()
            .contains("+ create Secret default/s")
    );
    let html = client()
        .get(format!("{addr}/apps/demo/previews/7"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(html.contains("- delete ConfigMap default/b"), "{html}");
    assert!(html.contains("+ create ConfigMap default/c"), "{html}");
    assert!(html.contains("~ update ConfigMap default/a"), "{html}");
    assert!(!html.contains("hunter2"));
    let app_page = client()
        .get(format!("{addr}/apps/demo"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        app_page.contains("href=\"/apps/demo/previews/7\""),
        "the app's page links its previews: {app_page}"
    );
    let as_json: Value = client()
        .get(format!("{addr}/apps/demo/previews/7"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(as_json["revision"], head);
    // One comment, with the marker and the counts.
    wait_async("the comment", 30, async || {
        (comments.bodies().len() == 1).then_some(())
    })
    .await;
    let body = &comments.bodies()[0];
    assert!(body.starts_with("<!-- driftless-preview:demo:"), "{body}");
    assert!(
        body.contains("2 to create, 1 to update, 1 to delete"),
        "{body}"
    );
    assert!(body.contains("https://drift.example.com/apps/demo/previews/7"));

    // Many pushes to the same pull request, each announced by a signed webhook: one comment,
    // edited in place, and a status on every head.
    let mut last = head.clone();
    for i in 3..6 {
        last = push_pr(
            &env,
            "refs/pull",
            7,
            &last,
            &[(
                "app/a.yaml",
                Some(&configmap("a", &[("k", &i.to_string())])),
            )],
            None,
        );
        let payload = json!({
            "action": "synchronize",
            "number": 7,
            "pull_request": {"number": 7, "head": {"sha": last}},
            "repository": {"clone_url": remote.path().display().to_string()},
        })
        .to_string();
        let resp = client()
            .post(format!("{addr}/webhooks/github"))
            .header("x-github-event", "pull_request")
            .header(
                "x-hub-signature-256",
                format!("sha256={}", hex_hmac("gh-secret", payload.as_bytes())),
            )
            .body(payload)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let v: Value = resp.json().await.unwrap();
        assert_eq!(v["previews"], json!(["demo"]));
        let want = last.clone();
        wait_async("the status of the new head", 30, async || {
            statuses(&github, "/statuses/")
                .await
                .into_iter()
                .find(|(sha, _)| *sha == want)
        })
        .await;
    }
    let short = &last[..12];
    wait_async("the comment to show the last head", 30, async || {
        comments.bodies()[0].contains(short).then_some(())
    })
    .await;
    assert_eq!(
        comments.bodies().len(),
        1,
        "one comment, never one per push"
    );
    assert_eq!(
        comments.calls().iter().filter(|c| *c == "POST").count(),
        1,
        "{:?}",
        comments.calls()
    );
    assert!(
        comments.violations().is_empty(),
        "{:?}",
        comments.violations()
    );

    // Pull request 8 does not parse: an error status naming the first diagnostic.
    let bad = push_pr(
        &env,
        "refs/pull",
        8,
        "main",
        &[(
            "app/bad.yaml",
            Some(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels: {a: \"1\", a: \"2\"}\n",
            ),
        )],
        None,
    );
    let (_, err) = wait_async("the error status", 30, async || {
        statuses(&github, "/statuses/")
            .await
            .into_iter()
            .find(|(sha, _)| *sha == bad)
    })
    .await;
    assert_eq!(err["state"], "error");
    assert_eq!(err["context"], "driftless/demo/preview");
    assert_eq!(
        err["description"],
        "invalid manifest app/bad.yaml:5:20: duplicate key `a`"
    );
    // A failed preview is logged as a warning.
    env.wait("the preview's warning", Duration::from_secs(10), || {
        env.log()
            .lines()
            .any(|l| l.contains("WARN") && l.contains("Preview") && l.contains("number=8"))
    });
    let rec8: Value = client()
        .get(format!("{addr}/api/v1/apps/demo/previews/8"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rec8["diagnostics"][0]["line"], 5);
    wait_async("pull request 8's comment", 30, async || {
        (comments8.bodies().len() == 1).then_some(())
    })
    .await;
    assert!(
        comments8.bodies()[0].contains("The manifests do not parse"),
        "{:?}",
        comments8.bodies()
    );

    // Closed: the preview goes away; the app's own objects never moved.
    close_pr(&env, "refs/pull", 8);
    wait_async("preview 8 removed", 30, async || {
        let r = client()
            .get(format!("{addr}/api/v1/apps/demo/previews/8"))
            .send()
            .await
            .unwrap();
        (r.status() == 404).then_some(())
    })
    .await;
    let list: Value = client()
        .get(format!("{addr}/api/v1/apps/demo/previews"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(list["previews"].as_array().unwrap().len(), 1);
    assert_eq!(list["previews"][0]["number"], "7");
    assert_eq!(app_objects(&env), before, "the app's objects are untouched");

    // Pull request 9 has the same head as 7: the commit keeps one status, 7's.
    let posts_on = async |sha: &str| {
        statuses(&github, "/statuses/")
            .await
            .into_iter()
            .filter(|(s, _)| s == sha)
            .count()
    };
    let on_last = posts_on(&last).await;
    env.repo
        .git(&["push", "-q", "origin", &format!("{last}:refs/pull/9/head")]);
    wait_async("preview 9", 30, async || {
        let r = client()
            .get(format!("{addr}/api/v1/apps/demo/previews/9"))
            .send()
            .await
            .unwrap();
        (r.status() == 200).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(posts_on(&last).await, on_last, "no status tug of war");

    // Main moves (the app applies a = 5, as the pull request has it): the preview is planned
    // again against the new live state.
    env.repo.write("app/a.yaml", configmap("a", &[("k", "5")]));
    env.repo.commit("main moves");
    env.repo.git(&["push", "-q", "origin", "main"]);
    wait_async("preview 7 planned again", 30, async || {
        let rec: Value = client()
            .get(format!("{addr}/api/v1/apps/demo/previews/7"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (rec["summary"]["update"] == 0 && rec["summary"]["create"] == 2).then_some(())
    })
    .await;
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0));
    assert!(!log.contains("gh-token"));
    assert!(!log.contains("hunter2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_environments_are_deployed_reconciled_and_deleted_with_their_ref() {
    let env = Env::new();
    let remote = Remote::new(&env);
    let gitlab = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(
            r"^/api/v4/projects/acme%2Fweb/repository/commits/[0-9a-f]{40}/statuses$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&gitlab)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(
            r"^/api/v4/projects/acme%2Fweb/statuses/[0-9a-f]{40}$",
        ))
        .and(wiremock::matchers::header("private-token", "gl-token"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&gitlab)
        .await;
    let notes = Comments::new(Host::Gitlab, "acme/web", 3, "gl-token");
    Mock::given(path_regex(notes.path_pattern()))
        .respond_with(notes.clone())
        .mount(&gitlab)
        .await;
    project(
        &env,
        &remote,
        "server: {listen: \"127.0.0.1:0\"}\n",
        &format!(
            "    status:\n      provider: gitlab\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GL_TOKEN}}\n    preview:\n      refs: \"refs/merge-requests/*/head\"\n      deploy: true\n      comment: true\n",
            gitlab.uri()
        ),
    );
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GL_TOKEN", "gl-token")]);
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let before = app_objects(&env);
    // Already in the preview's namespace, made by hand: never taken over, never deleted.
    env.put(
        &configmap("c", &[("k", "handmade")])
            .replace("  name: c\n", "  name: c\n  namespace: pr-3\n"),
    );
    let head = push_pr(
        &env,
        "refs/merge-requests",
        3,
        "main",
        &[
            ("app/a.yaml", Some(&configmap("a", &[("k", "2")]))),
            ("app/c.yaml", Some(&configmap("c", &[("k", "1")]))),
            (
                "app/ns.yaml",
                Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: web\n"),
            ),
        ],
        None,
    );
    env.wait("the preview environment", Duration::from_secs(30), || {
        get_ns(&env, "configmap", "a", "pr-3").is_some()
    });
    assert_eq!(
        get_ns(&env, "configmap", "c", "pr-3").unwrap()["data"]["k"],
        "handmade",
        "not taken over"
    );
    assert_eq!(
        get_ns(&env, "configmap", "a", "pr-3").unwrap()["data"]["k"],
        "2"
    );
    assert_eq!(
        get_ns(&env, "configmap", "b", "pr-3").unwrap()["data"]["k"],
        "1"
    );
    assert!(
        env.get("namespace", "web").is_none(),
        "cluster-scoped objects are not deployed by previews"
    );
    let (_, status) = wait_async("the preview status", 30, async || {
        statuses(&gitlab, "/statuses/")
            .await
            .into_iter()
            .find(|(sha, b)| *sha == head && b["name"] == "driftless/demo/preview")
    })
    .await;
    assert_eq!(
        status["state"], "failed",
        "one object could not be deployed"
    );
    assert_eq!(
        status["description"],
        "2 to create, 1 to update, 0 to delete; pr-3: Healthy, 1 already in the store and left alone"
    );
    // Reconciled: a change by hand in the preview namespace is reverted.
    env.put(
        &configmap("a", &[("k", "by hand")])
            .replace("  name: a\n", "  name: a\n  namespace: pr-3\n"),
    );
    env.wait("the preview reverted", Duration::from_secs(30), || {
        get_ns(&env, "configmap", "a", "pr-3").is_some_and(|a| a["data"]["k"] == "2")
    });
    wait_async("the merge-request note", 30, async || {
        (notes.bodies().len() == 1).then_some(())
    })
    .await;
    assert!(notes.bodies()[0].contains("Deployed to namespace `pr-3`"));
    assert!(notes.violations().is_empty(), "{:?}", notes.violations());
    assert_eq!(app_objects(&env), before, "the app's objects are untouched");
    // A broken head: an error on it, and the last good head's environment stays in force.
    let broken = push_pr(
        &env,
        "refs/merge-requests",
        3,
        &head,
        &[(
            "app/bad.yaml",
            Some("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  mode: 0755\n"),
        )],
        None,
    );
    let (_, err) = wait_async("the error on the broken head", 30, async || {
        statuses(&gitlab, "/statuses/")
            .await
            .into_iter()
            .find(|(sha, _)| *sha == broken)
    })
    .await;
    assert_eq!(err["state"], "failed", "GitLab's word for error");
    assert!(
        err["description"]
            .as_str()
            .unwrap()
            .starts_with("invalid manifest app/bad.yaml:6:"),
        "{err}"
    );
    env.put(
        &configmap("a", &[("k", "by hand again")])
            .replace("  name: a\n", "  name: a\n  namespace: pr-3\n"),
    );
    env.wait("still enforced", Duration::from_secs(30), || {
        get_ns(&env, "configmap", "a", "pr-3").is_some_and(|a| a["data"]["k"] == "2")
    });
    // Merged or closed: the ref goes, and so does the environment, and only it.
    close_pr(&env, "refs/merge-requests", 3);
    env.wait(
        "the preview environment deleted",
        Duration::from_secs(30),
        || {
            ["a", "b"]
                .iter()
                .all(|n| get_ns(&env, "configmap", n, "pr-3").is_none())
        },
    );
    assert_eq!(
        get_ns(&env, "configmap", "c", "pr-3").unwrap()["data"]["k"],
        "handmade",
        "never deleted: the preview did not make it"
    );
    wait_async("the closing note", 30, async || {
        notes.bodies()[0].contains("ref is gone").then_some(())
    })
    .await;
    assert_eq!(notes.bodies().len(), 1);
    assert_eq!(app_objects(&env), before, "the app's objects are untouched");
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0));
    assert!(log.contains("Preview environment deleted"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_are_limited_by_max_open_and_max_age_and_survive_an_outage() {
    let env = Env::new();
    let remote = Remote::new(&env);
    project(
        &env,
        &remote,
        "server: {listen: \"127.0.0.1:0\"}\n",
        "    preview:\n      refs: \"refs/pull/*/head\"\n      maxOpen: 2\n      maxAge: 1h\n      deploy: true\n",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let at = |ago: u64| format!("@{} +0000", now - ago);
    let cm = |n: &str| configmap(n, &[("k", "1")]);
    push_pr(
        &env,
        "refs/pull",
        1,
        "main",
        &[("app/p1.yaml", Some(&cm("p1")))],
        Some(&at(3 * 3600)),
    );
    push_pr(
        &env,
        "refs/pull",
        2,
        "main",
        &[("app/p2.yaml", Some(&cm("p2")))],
        Some(&at(1800)),
    );
    push_pr(
        &env,
        "refs/pull",
        3,
        "main",
        &[("app/p3.yaml", Some(&cm("p3")))],
        Some(&at(1200)),
    );
    push_pr(
        &env,
        "refs/pull",
        4,
        "main",
        &[("app/p4.yaml", Some(&cm("p4")))],
        Some(&at(600)),
    );
    let agent = env.agent();
    let addr = format!("http://{}", env.http_addr());
    let numbers = async || -> Vec<String> {
        let v: Value = client()
            .get(format!("{addr}/api/v1/apps/demo/previews"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["previews"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["number"].as_str().unwrap().to_string())
            .collect()
    };
    wait_async("two previews", 30, async || {
        (numbers().await == ["3", "4"]).then_some(())
    })
    .await;
    assert!(get_ns(&env, "configmap", "p4", "pr-4").is_some());
    assert!(get_ns(&env, "configmap", "p1", "pr-1").is_none(), "too old");
    assert!(
        get_ns(&env, "configmap", "p2", "pr-2").is_none(),
        "over maxOpen"
    );
    // The remote goes away: nothing is torn down on a failed listing.
    let moved = remote.path().with_extension("away");
    std::fs::rename(remote.path(), &moved).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(numbers().await, ["3", "4"]);
    assert!(get_ns(&env, "configmap", "p4", "pr-4").is_some());
    assert!(env.log().contains("Cannot list the pull requests"));
    std::fs::rename(&moved, remote.path()).unwrap();
    // A new pull request dated in the future does not evict a preview already shown.
    push_pr(
        &env,
        "refs/pull",
        5,
        "main",
        &[("app/p5.yaml", Some(&cm("p5")))],
        Some("@4102444800 +0000"),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(numbers().await, ["3", "4"]);
    // Pull request 4 closes: the highest number waiting, 5, takes its place.
    close_pr(&env, "refs/pull", 4);
    wait_async("3 and 5", 30, async || {
        (numbers().await == ["3", "5"]).then_some(())
    })
    .await;
    env.wait(
        "pr-4 deleted, pr-5 deployed",
        Duration::from_secs(30),
        || {
            get_ns(&env, "configmap", "p4", "pr-4").is_none()
                && get_ns(&env, "configmap", "p5", "pr-5").is_some()
        },
    );
    assert!(get_ns(&env, "configmap", "p2", "pr-2").is_none());
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_and_gitlab_pull_request_webhooks_trigger_a_preview_pass() {
    let env = Env::new();
    let remote = Remote::new(&env);
    std::fs::write(env.dir.path().join("gitlab.token"), "gl-secret\n").unwrap();
    project(
        &env,
        &remote,
        "server:\n  listen: \"127.0.0.1:0\"\n  webhooks:\n    gitea: {secret: {env: DRIFTLESS_TEST_GITEA}}\n    gitlab: {secret: {file: gitlab.token}}\n",
        "    preview:\n      refs: \"refs/pull/*/head\"\n",
    );
    // An hourly poll: a preview that shows up soon was triggered by its webhook.
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(env.config(), config.replace("interval: 1s", "interval: 1h")).unwrap();
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GITEA", "gitea-secret")]);
    let addr = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let has = async |n: &str| {
        client()
            .get(format!("{addr}/api/v1/apps/demo/previews/{n}"))
            .send()
            .await
            .unwrap()
            .status()
            == 200
    };
    let url = remote.path().display().to_string();
    push_pr(
        &env,
        "refs/pull",
        1,
        "main",
        &[("app/c.yaml", Some(&configmap("c", &[])))],
        None,
    );
    // Unsigned: refused, nothing happens.
    let payload =
        json!({"action": "opened", "number": 1, "repository": {"clone_url": url}}).to_string();
    let resp = client()
        .post(format!("{addr}/webhooks/gitea"))
        .header("x-gitea-event", "pull_request")
        .body(payload.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 401);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!has("1").await, "an unsigned webhook triggers nothing");
    let resp = client()
        .post(format!("{addr}/webhooks/gitea"))
        .header("x-gitea-event", "pull_request")
        .header(
            "x-gitea-signature",
            hex_hmac("gitea-secret", payload.as_bytes()),
        )
        .body(payload)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    wait_async("preview 1", 30, async || has("1").await.then_some(())).await;
    push_pr(
        &env,
        "refs/pull",
        2,
        "main",
        &[("app/d.yaml", Some(&configmap("d", &[])))],
        None,
    );
    let payload = json!({
        "object_kind": "merge_request",
        "project": {"git_http_url": url},
        "object_attributes": {"iid": 2, "action": "open"},
    })
    .to_string();
    let resp = client()
        .post(format!("{addr}/webhooks/gitlab"))
        .header("x-gitlab-event", "Merge Request Hook")
        .header("x-gitlab-token", "gl-secret")
        .body(payload)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.unwrap();
    assert_eq!(v["previews"], json!(["demo"]));
    wait_async("preview 2", 30, async || has("2").await.then_some(())).await;
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previews_wait_for_the_apps_first_applied_revision() {
    let env = Env::new();
    let remote = Remote::new(&env);
    let github = github_host().await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/acme/web/statuses/[0-9a-f]{40}$"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&github)
        .await;
    // A deny window open all the time: the app fetches but applies nothing.
    project(
        &env,
        &remote,
        "server:\n  listen: \"127.0.0.1:0\"\n",
        &format!(
            "    sync:\n      windows:\n      - {{kind: deny, schedule: \"* * * * *\", duration: 1h, timeZone: UTC}}\n    status:\n      provider: github\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GH_TOKEN}}\n    preview:\n      refs: \"refs/pull/*/head\"\n",
            github.uri()
        ),
    );
    let head = push_pr(
        &env,
        "refs/pull",
        5,
        "main",
        &[("app/c.yaml", Some(&configmap("c", &[("k", "1")])))],
        None,
    );
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GH_TOKEN", "gh-token")]);
    env.wait(
        "the app held by its window",
        Duration::from_secs(30),
        || {
            env.status()["conditions"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["reason"] == "HeldBySyncWindow"))
        },
    );
    // Several preview passes (every second) later: none planned, no status on the pull request.
    env.wait("previews waiting", Duration::from_secs(30), || {
        env.log().matches("previews wait for it").count() >= 3
    });
    let posted: Vec<(String, Value)> = statuses(&github, "/statuses/")
        .await
        .into_iter()
        .filter(|(sha, b)| *sha == head && b["context"] == "driftless/demo/preview")
        .collect();
    assert!(posted.is_empty(), "{posted:?}");
    // The wait is said once at INFO, not only in debug lines.
    let log = env.log();
    let said: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("Previews wait until the app applies its first revision"))
        .collect();
    assert_eq!(said.len(), 1, "{log}");
    assert!(said[0].contains("INFO"), "{}", said[0]);
    agent.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_of_an_overlay_change_shows_the_rendered_diff() {
    let env = Env::new();
    // The app's path is a Kustomize overlay of a base outside it.
    env.repo.remove("app/a.yaml");
    env.repo.remove("app/b.yaml");
    env.repo.write(
        "app/kustomization.yaml",
        "namePrefix: prod-\nresources: [../base]\n",
    );
    env.repo
        .write("base/kustomization.yaml", "resources: [cm.yaml]\n");
    env.repo
        .write("base/cm.yaml", configmap("shared", &[("k", "1")]));
    env.repo.commit("an overlay");
    let remote = Remote::new(&env);
    let github = github_host().await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/acme/web/statuses/[0-9a-f]{40}$"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&github)
        .await;
    project(
        &env,
        &remote,
        "server:\n  listen: \"127.0.0.1:0\"\n",
        &format!(
            "    status: {{provider: github, apiUrl: \"{}\", repository: acme/web, token: {{env: DRIFTLESS_TEST_GH_TOKEN}}}}\n    preview: {{refs: \"refs/pull/*/head\"}}\n",
            github.uri()
        ),
    );
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GH_TOKEN", "gh-token")]);
    let addr = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "prod-shared").is_some()
    });
    // The pull request changes only the base: the app's rendered objects change.
    let head = push_pr(
        &env,
        "refs/pull",
        7,
        "main",
        &[("base/cm.yaml", Some(&configmap("shared", &[("k", "2")])))],
        None,
    );
    let (_, status) = wait_async("the preview status", 60, async || {
        statuses(&github, "/statuses/")
            .await
            .into_iter()
            .find(|(sha, b)| *sha == head && b["context"] == "driftless/demo/preview")
    })
    .await;
    assert_eq!(status["state"], "success", "{status}");
    assert_eq!(
        status["description"], "0 to create, 1 to update, 0 to delete",
        "{status}"
    );
    let rec: Value = client()
        .get(format!("{addr}/api/v1/apps/demo/previews/7"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let update = &rec["changes"][0];
    assert_eq!(update["action"], "update", "{rec}");
    assert_eq!(
        update["name"], "prod-shared",
        "the overlay's namePrefix: {rec}"
    );
    assert_eq!(update["fields"][0]["path"], "data.k");
    assert_eq!(update["fields"][0]["live"], "1");
    assert_eq!(update["fields"][0]["desired"], "2");
    assert!(
        rec["diff"].as_str().unwrap().contains("prod-shared"),
        "{}",
        rec["diff"]
    );
    // The app itself is untouched until the change is merged.
    assert_eq!(
        env.get("configmap", "prod-shared").unwrap()["data"]["k"],
        "1"
    );
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}
