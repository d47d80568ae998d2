//! The HTTP server of the running agent (the real binary): health, readiness, metrics, the
//! JSON API, manual syncs and signed webhooks; and commit statuses posted end to end to a
//! provider played by an in-process server that checks every request.

mod common;

use std::time::Duration;

use common::{Env, configmap};
use hmac::{KeyInit, Mac};
use serde_json::{Value, json};
use wiremock::matchers::{header, method, path_regex};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
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

/// A project with webhooks and a sync token; the app polls hourly, so anything applied soon
/// was triggered.
fn hooked_env() -> Env {
    let env = Env::new();
    std::fs::write(env.dir.path().join("gitlab.token"), "gl-secret\n").unwrap();
    env.server_config(
        "server:\n  listen: \"127.0.0.1:0\"\n  token: {env: DRIFTLESS_TEST_TOKEN}\n  webhooks:\n    github: {secret: {env: DRIFTLESS_TEST_GH}}\n    gitea: {secret: {env: DRIFTLESS_TEST_GITEA}}\n    gitlab: {secret: {file: gitlab.token}}\n",
    );
    env
}

fn start(env: &Env) -> (common::Agent, String) {
    let agent = env.agent_with_env(&[
        ("DRIFTLESS_TEST_TOKEN", "sync-token"),
        ("DRIFTLESS_TEST_GH", "gh-secret"),
        ("DRIFTLESS_TEST_GITEA", "gitea-secret"),
    ]);
    let addr = env.http_addr();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    (agent, format!("http://{addr}"))
}

/// Commits a change to `a` and returns the new head.
fn new_commit(env: &Env, value: &str) -> String {
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", value)]));
    env.repo.commit(value)
}

fn applied(env: &Env, value: &str) -> bool {
    env.get("configmap", "a")
        .is_some_and(|a| a["data"]["k"] == value)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_api_and_status_pages() {
    let env = hooked_env();
    let (_agent, base) = start(&env);
    let c = client();
    let get = |p: &str| c.get(format!("{base}{p}")).send();
    assert_eq!(get("/healthz").await.unwrap().status(), 200);
    env.wait("ready", Duration::from_secs(30), || true);
    let ready = get("/readyz").await.unwrap();
    assert_eq!(ready.status(), 200);
    let apps: Value = get("/api/v1/apps").await.unwrap().json().await.unwrap();
    assert_eq!(apps["apps"][0]["name"], "demo");
    assert_eq!(apps["apps"][0]["sync"], "Synced");
    let one = get("/api/v1/apps/demo").await.unwrap();
    assert_eq!(one.status(), 200);
    let one: Value = one.json().await.unwrap();
    for key in [
        "revision",
        "lastAttemptedRevision",
        "sync",
        "health",
        "outOfSyncSince",
        "conditions",
        "resources",
        "diagnostics",
    ] {
        assert!(one.get(key).is_some(), "{key}: {one}");
    }
    assert_eq!(get("/api/v1/apps/nope").await.unwrap().status(), 404);
    let page = get("/apps/demo").await.unwrap().text().await.unwrap();
    assert!(
        page.contains("<h1>demo</h1>") && page.contains("ConfigMap default/a"),
        "{page}"
    );
    let index = get("/").await.unwrap().text().await.unwrap();
    assert!(index.contains("href=\"apps/demo\""), "{index}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_sync_needs_the_bearer_token() {
    let env = hooked_env();
    let (_agent, base) = start(&env);
    let c = client();
    let url = format!("{base}/api/v1/apps/demo/sync");
    let head = new_commit(&env, "manual");
    assert_eq!(c.post(&url).send().await.unwrap().status(), 401);
    assert_eq!(
        c.post(&url)
            .bearer_auth("wrong")
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        c.post(format!("{base}/api/v1/apps/nope/sync"))
            .bearer_auth("sync-token")
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert!(
        !applied(&env, "manual"),
        "nothing triggered without the token"
    );
    let refused = c.post(&url).send().await.unwrap();
    assert_eq!(
        refused.headers()["www-authenticate"],
        "Bearer realm=\"driftless\"",
        "a 401 says which scheme it wants (RFC 9110 section 11.6.1)"
    );
    // The scheme is case-insensitive (RFC 9110 section 11.1).
    let ok = c
        .post(&url)
        .header("authorization", "bearer sync-token")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 202);
    env.wait("the manual sync", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    assert!(applied(&env, "manual"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_webhooks_are_verified_and_trigger_a_fetch() {
    let env = hooked_env();
    let (_agent, base) = start(&env);
    let c = client();
    let url = format!("{base}/webhooks/github");
    let head = new_commit(&env, "pushed");
    let body = serde_json::to_vec(&json!({
        "ref": "refs/heads/main",
        "repository": {"clone_url": env.repo.url(), "default_branch": "main"},
    }))
    .unwrap();
    let send = |sig: Option<String>, event: &str, body: Vec<u8>| {
        let mut r = c
            .post(&url)
            .header("X-GitHub-Event", event)
            .header("Content-Type", "application/json")
            .body(body);
        if let Some(s) = sig {
            r = r.header("X-Hub-Signature-256", s);
        }
        r.send()
    };
    // Missing, wrong and malformed signatures: 401, nothing triggered.
    assert_eq!(
        send(None, "push", body.clone()).await.unwrap().status(),
        401
    );
    assert_eq!(
        send(
            Some(format!("sha256={}", hex_hmac("wrong", &body))),
            "push",
            body.clone()
        )
        .await
        .unwrap()
        .status(),
        401
    );
    assert_eq!(
        send(Some("sha256=zz".into()), "push", body.clone())
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        send(Some(hex_hmac("gh-secret", &body)), "push", body.clone())
            .await
            .unwrap()
            .status(),
        401,
        "the sha256= prefix is part of the format"
    );
    // Another event, signed: 202, ignored.
    let ping = br#"{"zen": "hi"}"#.to_vec();
    let r = send(
        Some(format!("sha256={}", hex_hmac("gh-secret", &ping))),
        "ping",
        ping,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 202);
    // A push for another branch: accepted, triggers nothing.
    let other = serde_json::to_vec(&json!({"ref": "refs/heads/dev", "repository": {"clone_url": env.repo.url(), "default_branch": "main"}})).unwrap();
    let r = send(
        Some(format!("sha256={}", hex_hmac("gh-secret", &other))),
        "push",
        other,
    )
    .await
    .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(v, json!({"triggered": []}));
    assert!(!applied(&env, "pushed"));
    // The real thing.
    let r = send(
        Some(format!("sha256={}", hex_hmac("gh-secret", &body))),
        "push",
        body,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.unwrap(),
        json!({"triggered": ["demo"]})
    );
    env.wait("the webhook's fetch", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    // Bodies over 1 MiB: 413.
    let huge = vec![b' '; (1 << 20) + 1];
    let r = send(
        Some(format!("sha256={}", hex_hmac("gh-secret", &huge))),
        "push",
        huge,
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 413);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gitea_and_gitlab_webhooks_are_verified_and_trigger_a_fetch() {
    let env = hooked_env();
    let (_agent, base) = start(&env);
    let c = client();
    // Gitea: hex HMAC without prefix.
    let head = new_commit(&env, "gitea");
    let body = serde_json::to_vec(&json!({"ref": "refs/heads/main", "repository": {"clone_url": env.repo.url(), "default_branch": "main"}})).unwrap();
    let gitea = |sig: &str, event: &str, body: Vec<u8>| {
        c.post(format!("{base}/webhooks/gitea"))
            .header("X-Gitea-Event", event)
            .header("X-Gitea-Signature", sig)
            .body(body)
            .send()
    };
    assert_eq!(
        gitea(&hex_hmac("nope", &body), "push", body.clone())
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        gitea(&hex_hmac("gitea-secret", &body), "issues", body.clone())
            .await
            .unwrap()
            .status(),
        202
    );
    assert_eq!(
        gitea(&hex_hmac("gitea-secret", &body), "push", body.clone())
            .await
            .unwrap()
            .status(),
        200
    );
    env.wait("the gitea webhook's fetch", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    // GitLab: the token itself, read from a file.
    let head = new_commit(&env, "gitlab");
    let body = serde_json::to_vec(&json!({"ref": "refs/heads/main", "project": {"git_http_url": env.repo.url(), "default_branch": "main"}})).unwrap();
    let gitlab = |token: Option<&str>, event: &str| {
        let mut r = c
            .post(format!("{base}/webhooks/gitlab"))
            .header("X-Gitlab-Event", event)
            .body(body.clone());
        if let Some(t) = token {
            r = r.header("X-Gitlab-Token", t);
        }
        r.send()
    };
    assert_eq!(gitlab(None, "Push Hook").await.unwrap().status(), 401);
    assert_eq!(
        gitlab(Some("gl-secret-but-longer"), "Push Hook")
            .await
            .unwrap()
            .status(),
        401
    );
    assert_eq!(
        gitlab(Some("gl-secret"), "Issue Hook")
            .await
            .unwrap()
            .status(),
        202
    );
    // A merge request concerns previews only (this app has none): no fetch.
    let mr = gitlab(Some("gl-secret"), "Merge Request Hook")
        .await
        .unwrap();
    assert_eq!(mr.status(), 200);
    assert_eq!(mr.json::<Value>().await.unwrap(), json!({"previews": []}));
    assert!(!applied(&env, "gitlab"));
    assert_eq!(
        gitlab(Some("gl-secret"), "Push Hook")
            .await
            .unwrap()
            .status(),
        200
    );
    env.wait(
        "the gitlab webhook's fetch",
        Duration::from_secs(30),
        || env.status()["revision"] == head,
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_without_a_secret_are_not_served() {
    let env = Env::new();
    let agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    let r = client()
        .post(format!("{base}/webhooks/github"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let big = client()
        .post(format!("{base}/webhooks/gitlab"))
        .body(vec![b'x'; 2 << 20])
        .send()
        .await
        .unwrap();
    assert_eq!(
        big.status(),
        404,
        "not configured comes before the size check"
    );
    let r = client()
        .post(format!("{base}/api/v1/apps/demo/sync"))
        .bearer_auth("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "no server.token: manual syncs are off");
    drop(agent);
}

fn metric(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_present_and_the_gap_age_grows_while_out_of_sync() {
    let env = Env::with_sync("      selfHeal: false\n");
    let _agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let c = client();
    let scrape = || async {
        c.get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let text = scrape().await;
    for name in [
        "driftless_app_info{",
        "driftless_app_resources{app=\"demo\",sync=\"Synced\"} 2",
        "driftless_reconcile_duration_seconds_count{app=\"demo\"}",
        "driftless_source_fetch_duration_seconds_count{app=\"demo\"}",
        "driftless_source_fetch_errors_total{app=\"demo\"} 0",
        // Every counter exists at 0 before its first event, so alerts on rate() have a series.
        "driftless_drift_reverted_total{app=\"demo\",manager=\"unknown\"} 0",
    ] {
        assert!(text.contains(name), "{name} missing:\n{text}");
    }
    assert_eq!(
        metric(&text, "driftless_app_out_of_sync_seconds{app=\"demo\"}"),
        Some(0.0)
    );
    // Drift, not reverted (detect-only): the gap opens and its age grows.
    env.put(&configmap("a", &[("k", "by hand")]));
    env.wait("OutOfSync", Duration::from_secs(30), || {
        env.status()["sync"] == "OutOfSync"
    });
    let first = metric(
        &scrape().await,
        "driftless_app_out_of_sync_seconds{app=\"demo\"}",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let text = scrape().await;
    let later = metric(&text, "driftless_app_out_of_sync_seconds{app=\"demo\"}").unwrap();
    assert!(later >= first + 1.0, "{first} then {later}");
    assert!(
        text.contains("driftless_app_resources{app=\"demo\",sync=\"OutOfSync\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("sync=\"OutOfSync\",health=\"Healthy\"} 1"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_reverted_is_counted() {
    let env = Env::new();
    let _agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    env.put(&configmap("a", &[("k", "drift")]));
    env.wait("revert", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    let c = client();
    let mut count = None;
    for _ in 0..50 {
        let text = c
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        count = metric(
            &text,
            "driftless_drift_reverted_total{app=\"demo\",manager=\"unknown\"}",
        );
        if count == Some(1.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(count, Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_posts_commit_statuses_pending_then_success_and_errors_on_bad_commits() {
    let github = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(
            r"^/repos/acme/web/commits/[0-9a-f]{40}/statuses$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&github)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(r"^/repos/acme/web/statuses/[0-9a-f]{40}$"))
        .and(header("authorization", "Bearer gh-token"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&github)
        .await;
    let env = Env::with_options("1s", "");
    env.server_config(
        "server:\n  listen: \"127.0.0.1:0\"\n  externalUrl: https://drift.example.com\n",
    );
    env.app_config(&format!(
        "    status:\n      provider: github\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GH_TOKEN}}\n",
        github.uri()
    ));
    let first = env.repo.head();
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GH_TOKEN", "gh-token")]);
    let posts = || async {
        github
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.method.as_str() == "POST")
            .map(|r| {
                let sha = r.url.path().rsplit('/').next().unwrap().to_string();
                let body: Value = serde_json::from_slice(&r.body).unwrap();
                (sha, body)
            })
            .collect::<Vec<_>>()
    };
    let mut seen = Vec::new();
    for _ in 0..300 {
        seen = posts().await;
        if seen.iter().any(|(_, b)| b["state"] == "success") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let states: Vec<(&str, &str)> = seen
        .iter()
        .map(|(s, b)| (s.as_str(), b["state"].as_str().unwrap()))
        .collect();
    // `pending` is posted while the revision is applied, unless the success that follows it
    // reaches the reporter first: the queue keeps only the latest status per (commit, context),
    // so on a loaded machine the pending one may be replaced before it is sent. Either way the
    // commit gets exactly one success, last, and nothing else.
    let expected_full = vec![(first.as_str(), "pending"), (first.as_str(), "success")];
    assert!(
        states == expected_full || states == expected_full[1..],
        "{seen:?}"
    );
    assert_eq!(
        seen.last().unwrap().1,
        json!({
            "state": "success",
            "description": "synced 2 objects, healthy",
            "context": "driftless/demo",
            "target_url": "https://drift.example.com/apps/demo",
        })
    );
    // A bad commit: an error status on it naming the first diagnostic; nothing new on the
    // revision in force, which stays applied and healthy.
    env.repo.write(
        "app/bad.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\n  labels: {a: \"1\", a: \"2\"}\n",
    );
    let bad = env.repo.commit("bad");
    let mut error = None;
    for _ in 0..300 {
        error = posts().await.into_iter().find(|(s, _)| *s == bad);
        if error.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, body) = error.expect("an error status on the bad commit");
    assert_eq!(body["state"], "error");
    assert_eq!(
        body["description"],
        "invalid manifest app/bad.yaml:5:20: duplicate key `a`"
    );
    // Several more polls of the same bad commit post nothing more.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(posts().await.len(), states.len() + 1, "{:?}", posts().await);
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0));
    assert!(!log.contains("gh-token"), "the token is never logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_command_posts_its_statuses_before_it_exits() {
    let gitea = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path_regex(
            r"^/api/v1/repos/acme/web/statuses/[0-9a-f]{40}$",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&gitea)
        .await;
    Mock::given(method("POST"))
        .and(path_regex(
            r"^/api/v1/repos/acme/web/statuses/[0-9a-f]{40}$",
        ))
        .and(header("authorization", "token gitea-token"))
        .respond_with(ResponseTemplate::new(201))
        .mount(&gitea)
        .await;
    let env = Env::new();
    std::fs::write(env.dir.path().join("gitea.token"), "gitea-token\n").unwrap();
    env.app_config(&format!(
        "    status:\n      provider: gitea\n      apiUrl: {}\n      repository: acme/web\n      token: {{file: gitea.token}}\n",
        gitea.uri()
    ));
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let posted: Vec<Value> = gitea
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    let states: Vec<&str> = posted
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    // The writer runs after the pass, and only the newest status per commit is posted.
    assert_eq!(states, vec!["success"], "{posted:?}");
    // A missing token is an error naming its config key, before anything is done.
    let env2 = Env::new();
    env2.app_config("    status: {provider: github, repository: acme/web, token: {env: DRIFTLESS_TEST_NOT_SET}}\n");
    let out = env2.run(&["sync"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        common::stderr(&out).contains(
            "apps[0].status.token: the environment variable `DRIFTLESS_TEST_NOT_SET` is not set"
        ),
        "{}",
        common::stderr(&out)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_git_host_never_delays_syncs() {
    // Every request to the "Git host" takes a minute.
    let slow = MockServer::start().await;
    Mock::given(wiremock::matchers::any())
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!([]))
                .set_delay(Duration::from_secs(60)),
        )
        .mount(&slow)
        .await;
    let env = Env::new();
    env.app_config(&format!(
        "    status:\n      provider: github\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GH_TOKEN}}\n",
        slow.uri()
    ));
    let _agent = env.agent_with_env(&[("DRIFTLESS_TEST_GH_TOKEN", "t")]);
    env.wait(
        "first sync despite the host",
        Duration::from_secs(20),
        || env.status()["sync"] == "Synced",
    );
    env.put(&configmap("a", &[("k", "drift")]));
    env.wait("revert despite the host", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    assert!(
        !slow.received_requests().await.unwrap().is_empty(),
        "the writer did try"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sync_requests_and_webhooks_makes_a_few_fetches() {
    let env = hooked_env();
    let (_agent, base) = start(&env);
    let c = client();
    let fetches = || async {
        let text = c
            .get(format!("{base}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        metric(
            &text,
            "driftless_source_fetch_duration_seconds_count{app=\"demo\"}",
        )
        .unwrap()
    };
    let before = fetches().await;
    let head = new_commit(&env, "flood");
    let body = json!({"ref": "refs/heads/main", "repository": {"clone_url": env.repo.url(), "default_branch": "main"}}).to_string();
    let signature = format!("sha256={}", hex_hmac("gh-secret", body.as_bytes()));
    let mut requests = Vec::new();
    let flood = std::time::Instant::now();
    // At most 16 in flight: one client address may hold 32 connections (a slowloris guard).
    let in_flight = std::sync::Arc::new(tokio::sync::Semaphore::new(16));
    for i in 0..300 {
        let req = if i % 2 == 0 {
            c.post(format!("{base}/api/v1/apps/demo/sync"))
                .bearer_auth("sync-token")
        } else {
            c.post(format!("{base}/webhooks/github"))
                .header("x-github-event", "push")
                .header("x-hub-signature-256", &signature)
                .body(body.clone())
        };
        let permit = in_flight.clone().acquire_owned().await.unwrap();
        requests.push(tokio::spawn(async move {
            let r = req.send().await;
            drop(permit);
            r
        }));
    }
    for r in requests {
        let status = r.await.unwrap().unwrap().status();
        assert!(status == 202 || status == 200, "{status}");
    }
    let lasted = flood.elapsed().as_secs_f64();
    env.wait("the new commit", Duration::from_secs(30), || {
        env.status()["revision"] == head
    });
    // Let whatever is still requested run, then count.
    let mut last = fetches().await;
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = fetches().await;
        if now == last {
            break;
        }
        last = now;
    }
    // Requested fetches are at least a second apart; the flood's own length bounds them.
    let made = last - before;
    assert!(
        made >= 1.0 && made <= lasted.ceil() + 2.0,
        "300 requests over {lasted:.1} s made {made} fetches, not one each"
    );
}

/// A TCP server that accepts connections and never says anything: a Git host that hangs.
struct SilentServer {
    port: u16,
}

impl SilentServer {
    fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for c in listener.incoming().flatten() {
                held.push(c);
            }
        });
        SilentServer { port }
    }
}

/// A project with a good app, `demo`, and an app whose Git host hangs, `slow`.
fn env_with_silent_source(timeout: &str) -> (Env, SilentServer) {
    let env = Env::new();
    let silent = SilentServer::start();
    let config = std::fs::read_to_string(env.config()).unwrap();
    std::fs::write(
        env.config(),
        format!(
            "{config}  - name: slow\n    source:\n      repo: http://127.0.0.1:{}/repo.git\n      interval: 1h\n      timeout: {timeout}\n",
            silent.port
        ),
    )
    .unwrap();
    (env, silent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_git_host_times_out_and_its_app_is_visible_meanwhile() {
    let (env, _silent) = env_with_silent_source("4s");
    let _agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    let c = client();
    // Visible before its first reconcile ends: in the API, the page and the metrics.
    let early: Value = c
        .get(format!("{base}/api/v1/apps/slow"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ready = early["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["reason"], "Initializing", "{early}");
    let metrics = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("driftless_app_info{app=\"slow\""),
        "{metrics}"
    );
    // The other app is not held up.
    env.wait("demo synced", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let app = |name: &str| {
        let out = env.run(&["status", "-o", "json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
            .unwrap()
    };
    env.wait("the fetch timeout", Duration::from_secs(30), || {
        app("slow")["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "SourceAvailable" && c["status"] == "False")
    });
    let slow = app("slow");
    let source = slow["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "SourceAvailable")
        .unwrap();
    assert!(
        source["message"]
            .as_str()
            .unwrap()
            .contains("timed out after 4 s"),
        "{source}"
    );
    assert_eq!(source["reason"], "Timeout", "{source}");
    assert_eq!(slow["sync"], "Unknown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_does_not_wait_for_a_hanging_fetch() {
    let (env, _silent) = env_with_silent_source("10m");
    let agent = env.agent();
    env.wait("demo synced", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some()
    });
    let started = std::time::Instant::now();
    let (code, log) = agent.stop();
    let took = started.elapsed();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("fetch abandoned"), "{log}");
    assert!(log.contains("Stopped cleanly"), "{log}");
    // Not a speed check: without abandoning the fetch, the stop takes the 20 s grace (and
    // before that, forever).
    assert!(took < Duration::from_secs(15), "{took:?}\n{log}");
}

/// Slowloris: 300 connections from one address, each sending one header line a second, while
/// `/healthz` and `/readyz` are probed from another address: every probe answers within 2 s,
/// and the attacker's connections are closed within the request timeout (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_probes_answer_during_a_slowloris_attack() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let env = Env::new();
    let (_agent, base) = start(&env);
    let addr: std::net::SocketAddr = base.trim_start_matches("http://").parse().unwrap();
    let started = std::time::Instant::now();
    let mut attackers = Vec::new();
    for i in 0..300 {
        attackers.push(tokio::spawn(async move {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
            let Ok(mut c) = socket.connect(addr).await else {
                return None;
            };
            if c.write_all(b"GET /healthz HTTP/1.1\r\n").await.is_err() {
                return Some(std::time::Duration::ZERO);
            }
            let opened = std::time::Instant::now();
            for line in 0..30 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let mut b = [0u8; 1];
                let closed = c
                    .write_all(format!("X-{i}-{line}: 1\r\n").as_bytes())
                    .await
                    .is_err()
                    || matches!(
                        tokio::time::timeout(Duration::from_millis(5), c.read(&mut b)).await,
                        Ok(Ok(0) | Err(_))
                    );
                if closed {
                    return Some(opened.elapsed());
                }
            }
            Some(opened.elapsed())
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let http = client();
    let mut slowest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(14) {
        for path in ["/healthz", "/readyz"] {
            let t = std::time::Instant::now();
            let r = tokio::time::timeout(
                Duration::from_secs(5),
                http.get(format!("{base}{path}")).send(),
            )
            .await
            .unwrap_or_else(|_| panic!("{path} did not answer within 5 s under attack"))
            .unwrap();
            assert!(r.status().is_success(), "{path}: {}", r.status());
            slowest = slowest.max(t.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        slowest < Duration::from_secs(2),
        "slowest probe {slowest:?}"
    );
    let mut held_longest = Duration::ZERO;
    for a in attackers {
        if let Some(d) = a.await.unwrap() {
            held_longest = held_longest.max(d);
        }
    }
    assert!(
        held_longest < Duration::from_secs(13),
        "an attacker's connection was held {held_longest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_come_from_the_agents_memory_and_a_crowd_of_readers_takes_turns() {
    let env = Env::new();
    let agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.status()["sync"] == "Synced"
    });
    // The app's status record in the store is damaged behind the agent's back: the pages and
    // the API do not read it, they show what the agent computed.
    let db = rusqlite::Connection::open(env.dir.path().join("store.db")).unwrap();
    db.execute(
        "UPDATE objects SET body = '{not json' WHERE kind = 'AppStatus' AND name = 'demo'",
        [],
    )
    .unwrap();
    drop(db);
    let c = client();
    let page = c.get(format!("{base}/apps/demo")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().await.unwrap();
    assert!(page.contains("ConfigMap default/a"), "{page}");
    let apps: Value = c
        .get(format!("{base}/api/v1/apps"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(apps["apps"][0]["name"], "demo", "{apps}");
    // Sixteen readers at once (eight times the reads built at once, and well under the 32
    // connections one client may hold, closing ones included), for three seconds: each gets
    // the page or a 503 that says when to retry, none fails otherwise, and a change made
    // meanwhile is reverted.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..16 {
        let c = c.clone();
        let url = format!("{base}/apps/demo");
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            let (mut ok, mut busy) = (0u32, 0u32);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let r = c.get(&url).send().await.unwrap();
                match r.status().as_u16() {
                    200 => ok += 1,
                    503 => {
                        assert_eq!(r.headers()["retry-after"], "1");
                        busy += 1;
                    }
                    other => panic!("{other}"),
                }
            }
            (ok, busy)
        }));
    }
    let put = {
        let env_cmd = env.cmd();
        let f = env.dir.path().join("drift.yaml");
        std::fs::write(&f, configmap("a", &[("k", "drift")])).unwrap();
        (env_cmd, f)
    };
    let (mut cmd, f) = put;
    let out = tokio::task::spawn_blocking(move || {
        cmd.args(["store", "put", "-f", f.to_str().unwrap()])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(out.status.success());
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut served = 0;
    for r in readers {
        let (ok, _busy) = r.await.unwrap();
        served += ok;
    }
    assert!(served > 0);
    env.wait("the drift reverted", Duration::from_secs(10), || {
        env.get("configmap", "a")
            .is_some_and(|a| a["data"]["k"] == "1")
    });
    let (_, log) = agent.stop();
    assert!(log.contains("Drift reverted"), "{log}");
}

/// Runs headless Chromium (`CHROMIUM_BIN`, else `chromium` on the PATH) on `url` with `args`,
/// returning its standard output.
fn chromium(url: &str, args: &[&str]) -> String {
    let bin = common::tool("CHROMIUM_BIN", "chromium");
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1400,700",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_pages_show_the_gap_every_failing_condition_and_why_in_a_browser() {
    let env = Env::with_sync("      selfHeal: false\n      staleAfter: 1s\n");
    env.repo.write(
        "app/web.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx}]\n",
    );
    env.repo.commit("a deployment");
    let agent = env.agent();
    let base = format!("http://{}", env.http_addr());
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("deployment", "web").is_some()
    });
    env.put(&configmap("a", &[("k", "by hand")]));
    env.wait("stale", Duration::from_secs(30), || {
        env.status()["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Stale" && c["status"] == "True")
        })
    });
    // The index, as the browser renders it: the gap's age, every failing condition, refresh.
    let dom = tokio::task::spawn_blocking({
        let url = format!("{base}/");
        move || chromium(&url, &["--dump-dom"])
    })
    .await
    .unwrap();
    for want in [
        "http-equiv=\"refresh\"",
        "out of sync for",
        "Stale: GapExceededThreshold",
        "Ready: ",
        "Healthy: Progressing",
    ] {
        assert!(dom.contains(want), "{want} missing from the index:\n{dom}");
    }
    // The app page: the gap's age and each object's health message.
    let dom = tokio::task::spawn_blocking({
        let url = format!("{base}/apps/demo");
        move || chromium(&url, &["--dump-dom"])
    })
    .await
    .unwrap();
    assert!(dom.contains("out of sync for"), "{dom}");
    assert!(
        dom.contains("Waiting for rollout to finish"),
        "the Deployment's health message is shown:\n{dom}"
    );
    // A screenshot of the index, kept under target/ for people to look at.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-index.png");
    let _ = std::fs::remove_file(&shot);
    tokio::task::spawn_blocking({
        let url = format!("{base}/");
        let arg = format!("--screenshot={}", shot.display());
        move || chromium(&url, &[&arg])
    })
    .await
    .unwrap();
    let png = std::fs::read(&shot).expect("the screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{} bytes",
        png.len()
    );
    agent.stop();
}
