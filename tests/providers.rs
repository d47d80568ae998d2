//! Commit-status providers against in-process HTTP servers (wiremock) that check every request
//! the way each provider documents it: method, path, headers (auth, content type, user agent)
//! and the JSON body.

use std::sync::Arc;
use std::time::{Duration, Instant};

use driftless::config::Provider;
use driftless::health::Health;
use driftless::metrics::Metrics;
use driftless::report::{self, Facts, HttpProvider, ProviderClient, Queue, Reporter, Writer};
use secrecy::SecretString;
use serde_json::json;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

const SHA: &str = "0123456789abcdef0123456789abcdef01234567";

fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

fn provider(
    kind: Provider,
    server: &MockServer,
    api_suffix: &str,
    repo: &str,
) -> Arc<dyn ProviderClient> {
    install_crypto();
    Arc::new(
        HttpProvider::new(
            kind,
            Some(&format!("{}{api_suffix}", server.uri())),
            repo,
            SecretString::from("tok-123"),
            None,
        )
        .unwrap(),
    )
}

fn facts(app: &str) -> Facts<'_> {
    Facts {
        app,
        in_force: Some(SHA),
        objects: 3,
        applying: false,
        in_force_error: None,
        out_of_sync: 0,
        not_ready: 0,
        health: Health::Healthy,
        rejected: None,
        failing: None,
        held: None,
    }
}

/// Reports `facts` once through a fresh reporter and writer, and posts.
async fn post_once(p: Arc<dyn ProviderClient>, f: &Facts<'_>, external: Option<&str>) {
    let queue = Queue::default();
    let mut reporter = Reporter::new(p, external.map(str::to_string), queue.clone());
    reporter.observe(f);
    let mut writer = Writer::new(queue, None);
    writer.retry_base = Duration::from_millis(10);
    writer.flush().await;
}

fn user_agent() -> String {
    format!("driftless/{}", env!("CARGO_PKG_VERSION"))
}

/// An empty list of statuses for the restart check, for GitHub-style listings.
async fn no_statuses_yet(server: &MockServer, list_path: &str) {
    Mock::given(method("GET"))
        .and(path(list_path))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(server)
        .await;
}

#[tokio::test]
async fn github_posts_the_documented_request() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/acme/web/statuses/{SHA}")))
        .and(header("authorization", "Bearer tok-123"))
        .and(header("accept", "application/vnd.github+json"))
        .and(header("x-github-api-version", "2022-11-28"))
        .and(header("content-type", "application/json"))
        .and(header("user-agent", user_agent().as_str()))
        .and(body_json(json!({
            "state": "success",
            "description": "synced 3 objects, healthy",
            "context": "driftless/web",
            "target_url": "https://drift.example.com/apps/web",
        })))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1})))
        .expect(1)
        .mount(&server)
        .await;
    post_once(
        provider(Provider::Github, &server, "", "acme/web"),
        &facts("web"),
        Some("https://drift.example.com"),
    )
    .await;
}

#[tokio::test]
async fn github_enterprise_goes_under_its_api_url() {
    let server = MockServer::start().await;
    no_statuses_yet(
        &server,
        &format!("/api/v3/repos/acme/web/commits/{SHA}/statuses"),
    )
    .await;
    Mock::given(method("POST"))
        .and(path(format!("/api/v3/repos/acme/web/statuses/{SHA}")))
        .and(header("authorization", "Bearer tok-123"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    post_once(
        provider(Provider::Github, &server, "/api/v3", "acme/web"),
        &facts("web"),
        None,
    )
    .await;
}

#[tokio::test]
async fn gitea_posts_the_documented_request() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/api/v1/repos/acme/web/statuses/{SHA}")).await;
    Mock::given(method("POST"))
        .and(path(format!("/api/v1/repos/acme/web/statuses/{SHA}")))
        .and(header("authorization", "token tok-123"))
        .and(header("content-type", "application/json"))
        .and(header("user-agent", user_agent().as_str()))
        .and(body_json(json!({
            "state": "error",
            "description": "source unavailable: boom",
            "context": "driftless/web",
        })))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let f = Facts {
        in_force_error: Some("source unavailable: boom".into()),
        ..facts("web")
    };
    post_once(provider(Provider::Gitea, &server, "", "acme/web"), &f, None).await;
}

#[tokio::test]
async fn gitlab_posts_the_documented_request_with_its_own_states() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/api/v4/projects/group%2Fsub%2Fproj/repository/commits/{SHA}/statuses"
        )))
        .and(query_param("name", "driftless/web"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/api/v4/projects/group%2Fsub%2Fproj/statuses/{SHA}"
        )))
        .and(header("private-token", "tok-123"))
        .and(header("content-type", "application/json"))
        .and(header("user-agent", user_agent().as_str()))
        .and(body_json(json!({
            "state": "running",
            "name": "driftless/web",
            "description": "applying 3 objects",
        })))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let f = Facts {
        applying: true,
        ..facts("web")
    };
    post_once(
        provider(Provider::Gitlab, &server, "", "group/sub/proj"),
        &f,
        None,
    )
    .await;
}

#[tokio::test]
async fn bitbucket_posts_the_documented_request_with_a_short_key_and_a_url() {
    let server = MockServer::start().await;
    let long_app = "a-very-long-application-name-that-does-not-fit";
    let context = format!("driftless/{long_app}");
    let key = report::bitbucket_key(&context);
    assert_eq!(key.len(), 40);
    Mock::given(method("GET"))
        .and(path(format!(
            "/2.0/repositories/ws/repo/commit/{SHA}/statuses/build/{key}"
        )))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/2.0/repositories/ws/repo/commit/{SHA}/statuses/build"
        )))
        .and(header("authorization", "Bearer tok-123"))
        .and(header("content-type", "application/json"))
        .and(header("user-agent", user_agent().as_str()))
        .and(body_json(json!({
            "key": key,
            "state": "FAILED",
            "name": context,
            "url": format!("https://bitbucket.org/ws/repo/commits/{SHA}"),
            "description": "applied 3 objects, degraded",
        })))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let f = Facts {
        health: Health::Degraded,
        ..facts(long_app)
    };
    post_once(
        provider(Provider::Bitbucket, &server, "", "ws/repo"),
        &f,
        None,
    )
    .await;
}

#[tokio::test]
async fn bitbucket_app_passwords_use_basic_auth() {
    install_crypto();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&server)
        .await;
    // base64("deploy:tok-123")
    Mock::given(method("POST"))
        .and(header("authorization", "Basic ZGVwbG95OnRvay0xMjM="))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let p = HttpProvider::new(
        Provider::Bitbucket,
        Some(&server.uri()),
        "ws/repo",
        SecretString::from("tok-123"),
        Some("deploy".into()),
    )
    .unwrap();
    post_once(Arc::new(p), &facts("web"), None).await;
}

#[tokio::test]
async fn many_reconciles_of_the_same_state_post_once() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/acme/web/statuses/{SHA}")))
        .respond_with(ResponseTemplate::new(201))
        .expect(2)
        .mount(&server)
        .await;
    let queue = Queue::default();
    let mut reporter = Reporter::new(
        provider(Provider::Github, &server, "", "acme/web"),
        None,
        queue.clone(),
    );
    let mut writer = Writer::new(queue.clone(), None);
    for _ in 0..50 {
        reporter.observe(&facts("web"));
        writer.flush().await;
    }
    // A real change posts again, once.
    for _ in 0..10 {
        reporter.observe(&Facts {
            out_of_sync: 1,
            ..facts("web")
        });
        writer.flush().await;
    }
}

#[tokio::test]
async fn a_restart_reads_the_latest_status_and_does_not_repost() {
    let server = MockServer::start().await;
    // The provider already shows this exact status (newest first, another context too).
    Mock::given(method("GET"))
        .and(path(format!("/repos/acme/web/commits/{SHA}/statuses")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"id": 9, "state": "success", "description": "other", "context": "ci/build"},
            {"id": 7, "state": "success", "description": "synced 3 objects, healthy", "context": "driftless/web"},
            {"id": 5, "state": "pending", "description": "applying 3 objects", "context": "driftless/web"},
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&server)
        .await;
    post_once(
        provider(Provider::Github, &server, "", "acme/web"),
        &facts("web"),
        None,
    )
    .await;
}

#[tokio::test]
async fn gitlab_restart_check_filters_by_name_and_follows_pagination() {
    let server = MockServer::start().await;
    let list = format!("/api/v4/projects/7/repository/commits/{SHA}/statuses");
    Mock::given(method("GET"))
        .and(path(list.clone()))
        .and(query_param("name", "driftless/web"))
        .and(query_param("all", "true"))
        .and(query_param("page", "2"))
        .respond_with(ResponseTemplate::new(200).insert_header("x-next-page", "").set_body_json(json!([
            {"id": 31, "status": "success", "name": "driftless/web", "description": "synced 3 objects, healthy"},
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(list))
        .and(query_param("name", "driftless/web"))
        .respond_with(ResponseTemplate::new(200).insert_header("x-next-page", "2").set_body_json(json!([
            {"id": 12, "status": "running", "name": "driftless/web", "description": "applying 3 objects"},
        ])))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(0)
        .mount(&server)
        .await;
    post_once(
        provider(Provider::Gitlab, &server, "", "7"),
        &facts("web"),
        None,
    )
    .await;
}

#[tokio::test]
async fn server_errors_are_retried_and_429_waits_for_retry_after() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = attempts.clone();
    Mock::given(method("POST"))
        .respond_with(move |_: &Request| {
            match seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
                0 => ResponseTemplate::new(500),
                1 => ResponseTemplate::new(429).insert_header("retry-after", "1"),
                _ => ResponseTemplate::new(201),
            }
        })
        .expect(3)
        .mount(&server)
        .await;
    let metrics = Arc::new(Metrics::new());
    let queue = Queue::default();
    let mut reporter = Reporter::new(
        provider(Provider::Github, &server, "", "acme/web"),
        None,
        queue.clone(),
    );
    reporter.observe(&facts("web"));
    let mut writer = Writer::new(queue, Some(metrics.clone()));
    writer.retry_base = Duration::from_millis(10);
    let start = Instant::now();
    writer.flush().await;
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "Retry-After: 1 was honoured"
    );
    let text = metrics.encode();
    assert!(
        text.contains(
            "driftless_commit_status_requests_total{provider=\"github\",result=\"retry\"} 2"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "driftless_commit_status_requests_total{provider=\"github\",result=\"success\"} 1"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn the_422_cap_stops_posting_for_that_commit_and_context() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{"resource": "Status", "code": "custom", "message": "This SHA and context has reached the maximum number of statuses."}],
        })))
        .expect(1)
        .mount(&server)
        .await;
    let metrics = Arc::new(Metrics::new());
    let queue = Queue::default();
    let mut reporter = Reporter::new(
        provider(Provider::Github, &server, "", "acme/web"),
        None,
        queue.clone(),
    );
    let mut writer = Writer::new(queue, Some(metrics.clone()));
    reporter.observe(&facts("web"));
    writer.flush().await;
    // New states for the same pair are not posted any more.
    reporter.observe(&Facts {
        out_of_sync: 2,
        ..facts("web")
    });
    writer.flush().await;
    assert!(metrics.encode().contains("result=\"capped\"} 1"));
}

#[tokio::test]
async fn unicode_descriptions_are_cut_to_140_characters() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let f = Facts {
        in_force_error: Some("ü😀".repeat(100)),
        ..facts("web")
    };
    post_once(
        provider(Provider::Github, &server, "", "acme/web"),
        &f,
        None,
    )
    .await;
    let requests = server.received_requests().await.unwrap();
    let post = requests
        .iter()
        .find(|r| r.method.as_str() == "POST")
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&post.body).unwrap();
    let d = body["description"].as_str().unwrap();
    assert_eq!(d.chars().count(), 140);
    assert!(d.ends_with('…'));
}

#[tokio::test]
async fn other_client_errors_are_not_retried_and_never_show_the_token() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(401).set_body_json(json!({"message": "Bad credentials"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let p = provider(Provider::Github, &server, "", "acme/web");
    let err = p
        .post(&report::CommitStatus {
            sha: SHA.into(),
            context: "driftless/web".into(),
            state: report::State::Success,
            description: "x".into(),
            target_url: None,
        })
        .await
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(
        text.contains("401") && text.contains("Bad credentials"),
        "{text}"
    );
    assert!(!text.contains("tok-123"), "{text}");
}

#[tokio::test]
async fn credentials_echoed_in_an_error_body_are_blanked() {
    let server = MockServer::start().await;
    // A host (or a proxy in front of it) that echoes the request's credentials.
    Mock::given(method("POST"))
        .respond_with(|req: &Request| {
            let auth = req
                .headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string();
            ResponseTemplate::new(401).set_body_string(format!("Bad credentials; you sent {auth}"))
        })
        .mount(&server)
        .await;
    let status = report::CommitStatus {
        sha: SHA.into(),
        context: "driftless/web".into(),
        state: report::State::Success,
        description: "x".into(),
        target_url: None,
    };
    install_crypto();
    for p in [
        provider(Provider::Github, &server, "", "acme/web"),
        Arc::new(
            HttpProvider::new(
                Provider::Bitbucket,
                Some(&server.uri()),
                "ws/web",
                SecretString::from("tok-123"),
                Some("robot".into()),
            )
            .unwrap(),
        ),
    ] {
        let text = p.post(&status).await.unwrap_err().to_string();
        assert!(text.contains("you sent"), "{text}");
        assert!(!text.contains("tok-123"), "{text}");
        // Basic credentials: base64 of `robot:tok-123`.
        assert!(!text.contains("cm9ib3Q6dG9rLTEyMw"), "{text}");
    }
}

#[tokio::test]
async fn a_status_is_never_dropped_while_the_host_fails() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    let attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = attempts.clone();
    Mock::given(method("POST"))
        .respond_with(move |_: &Request| {
            // Eight failures: more than the five attempts after which it used to be dropped.
            if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 8 {
                ResponseTemplate::new(503)
            } else {
                ResponseTemplate::new(201)
            }
        })
        .expect(9)
        .mount(&server)
        .await;
    let metrics = Arc::new(Metrics::new());
    let queue = Queue::default();
    let mut reporter = Reporter::new(
        provider(Provider::Github, &server, "", "acme/web"),
        None,
        queue.clone(),
    );
    reporter.observe(&facts("web"));
    let mut writer = Writer::new(queue, Some(metrics.clone()));
    writer.retry_base = Duration::from_millis(5);
    writer.max_backoff = Duration::from_millis(20);
    tokio::time::timeout(Duration::from_secs(30), writer.flush())
        .await
        .expect("posted once the host recovers");
    assert_eq!(writer.retrying(), 0);
    assert!(
        metrics.encode().contains(
            "driftless_commit_status_requests_total{provider=\"github\",result=\"success\"} 1"
        ),
        "{}",
        metrics.encode()
    );
}

#[tokio::test]
async fn a_retry_first_reads_what_the_host_shows_so_an_accepted_post_is_not_repeated() {
    let server = MockServer::start().await;
    let list = format!("/repos/acme/web/commits/{SHA}/statuses");
    // Before the first post the commit has no status; afterwards it shows the one posted,
    // although the host answered that post with a 502 (it took the status and then failed).
    Mock::given(method("GET"))
        .and(path(list.clone()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(list))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([
            {"id": 3, "state": "success", "description": "synced 3 objects, healthy", "context": "driftless/web"},
        ])))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&server)
        .await;
    post_once(
        provider(Provider::Github, &server, "", "acme/web"),
        &facts("web"),
        None,
    )
    .await;
}

#[tokio::test]
async fn a_long_retry_after_holds_only_its_own_status_and_never_a_stop() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    let other = "fedcba9876543210fedcba9876543210fedcba98";
    no_statuses_yet(
        &server,
        &format!("/repos/acme/web/commits/{other}/statuses"),
    )
    .await;
    // The first commit's status is rate limited for a day.
    Mock::given(method("POST"))
        .and(path(format!("/repos/acme/web/statuses/{SHA}")))
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "86400"))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/acme/web/statuses/{other}")))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let queue = Queue::default();
    let p = provider(Provider::Github, &server, "", "acme/web");
    let mut first = Reporter::new(p.clone(), None, queue.clone());
    let mut second = Reporter::new(p, None, queue.clone());
    let writer = Writer::new(queue, None);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(writer.run(stopped, Duration::from_secs(2)));
    first.observe(&facts("web"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    second.observe(&Facts {
        in_force: Some(other),
        ..facts("api")
    });
    let start = Instant::now();
    loop {
        let requests = server.received_requests().await.unwrap();
        if requests
            .iter()
            .any(|r| r.method.as_str() == "POST" && r.url.path().ends_with(other))
        {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the other commit's status waited behind the rate-limited one"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(20), running)
        .await
        .expect("the writer stops without waiting out the Retry-After")
        .unwrap();
}

mod common;

use common::comments::{Comments, Host};
use wiremock::matchers::path_regex;

/// One comment per pull request, whatever happens: found again by its marker (also after a
/// restart, when the agent knows no id), edited in place, never posted twice.
async fn keeps_one_comment(host: Host, kind: Provider, repo: &str, token_suffix: &str) {
    let server = MockServer::start().await;
    let comments = Comments::new(host, repo, 7, "tok-123");
    // Someone else's comment first: it is never touched.
    comments
        .comments
        .lock()
        .unwrap()
        .push((5, "LGTM".to_string()));
    Mock::given(path_regex(comments.path_pattern()))
        .respond_with(comments.clone())
        .mount(&server)
        .await;
    let p = provider(kind, &server, token_suffix, repo);
    let marker = "<!-- driftless-preview:web -->";
    let id = p
        .upsert_comment(7, marker, &format!("{marker}\nfirst"), None)
        .await
        .unwrap();
    assert_eq!(
        p.upsert_comment(7, marker, &format!("{marker}\nsecond"), Some(id))
            .await
            .unwrap(),
        id
    );
    // A restart: no id known; the marker finds it.
    assert_eq!(
        p.upsert_comment(7, marker, &format!("{marker}\nthird"), None)
            .await
            .unwrap(),
        id
    );
    // The same text again: nothing is written.
    p.upsert_comment(7, marker, &format!("{marker}\nthird"), None)
        .await
        .unwrap();
    let edit = if host == Host::Gitlab { "PUT" } else { "PATCH" };
    assert_eq!(
        comments.calls(),
        vec![
            "GET".to_string(),
            "POST".into(),
            format!("{edit} {id}"),
            "GET".into(),
            format!("{edit} {id}"),
            "GET".into(),
        ]
    );
    assert_eq!(
        comments.bodies(),
        vec!["LGTM".to_string(), format!("{marker}\nthird")]
    );
    assert!(
        comments.violations().is_empty(),
        "{:?}",
        comments.violations()
    );
    // Deleted by someone: created again, once.
    comments.comments.lock().unwrap().retain(|(i, _)| *i != id);
    let again = p
        .upsert_comment(7, marker, &format!("{marker}\nfourth"), Some(id))
        .await
        .unwrap();
    assert_ne!(again, id);
    assert_eq!(comments.bodies().len(), 2);
}

#[tokio::test]
async fn github_keeps_one_pull_request_comment() {
    keeps_one_comment(Host::Github, Provider::Github, "acme/web", "").await;
}

#[tokio::test]
async fn gitea_keeps_one_pull_request_comment() {
    keeps_one_comment(Host::Gitea, Provider::Gitea, "acme/web", "").await;
}

#[tokio::test]
async fn gitlab_keeps_one_merge_request_note() {
    keeps_one_comment(Host::Gitlab, Provider::Gitlab, "acme/web", "").await;
}

#[tokio::test]
async fn a_burst_of_updates_makes_one_comment_with_the_last_text() {
    let server = MockServer::start().await;
    let comments = Comments::new(Host::Github, "acme/web", 7, "tok-123");
    // Someone copies what a marker looks like: their comment is never taken for driftless's.
    comments.comments.lock().unwrap().push((
        5,
        "I like this <!-- driftless-preview:web --> <!-- driftless-preview:web:7 -->".to_string(),
    ));
    Mock::given(path_regex(comments.path_pattern()))
        .respond_with(comments.clone())
        .mount(&server)
        .await;
    let p = provider(Provider::Github, &server, "", "acme/web");
    let marker = p.comment_marker("web", 7);
    assert!(
        marker.starts_with("<!-- driftless-preview:web:") && marker.ends_with(" -->"),
        "{marker}"
    );
    assert_ne!(
        marker,
        p.comment_marker("web", 8),
        "one marker per pull request"
    );
    let again = provider(Provider::Github, &server, "", "acme/web");
    assert_eq!(
        marker,
        again.comment_marker("web", 7),
        "stable for one token"
    );
    let other_token = HttpProvider::new(
        Provider::Github,
        Some(&server.uri()),
        "acme/web",
        SecretString::from("another"),
        None,
    )
    .unwrap();
    assert_ne!(
        marker,
        other_token.comment_marker("web", 7),
        "nobody without the token can make it"
    );
    let commenter = report::Commenter::new(p);
    let mut tasks = Vec::new();
    for i in 0..20 {
        tasks.extend(commenter.update(7, "web", &format!("push {i}")));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        comments.bodies(),
        vec![
            "I like this <!-- driftless-preview:web --> <!-- driftless-preview:web:7 -->"
                .to_string(),
            format!("{marker}\npush 19")
        ]
    );
    let posts = comments.calls().iter().filter(|c| *c == "POST").count();
    assert_eq!(posts, 1, "{:?}", comments.calls());
    // The same text again asks nothing of the host.
    assert!(commenter.update(7, "web", "push 19").is_none());
    assert!(
        comments.violations().is_empty(),
        "{:?}",
        comments.violations()
    );
}

#[tokio::test]
async fn preview_statuses_are_posted_as_given_and_deduplicated() {
    let server = MockServer::start().await;
    no_statuses_yet(&server, &format!("/repos/acme/web/commits/{SHA}/statuses")).await;
    Mock::given(method("POST"))
        .and(path(format!("/repos/acme/web/statuses/{SHA}")))
        .and(header("authorization", "Bearer tok-123"))
        .and(body_json(json!({
            "state": "success",
            "description": "3 to create, 1 to update, 0 to delete",
            "context": "driftless/web/preview",
            "target_url": "https://drift.example.com/apps/web/previews/7",
        })))
        .respond_with(ResponseTemplate::new(201))
        .expect(1)
        .mount(&server)
        .await;
    let queue = Queue::default();
    let mut reporter = Reporter::new(
        provider(Provider::Github, &server, "", "acme/web"),
        None,
        queue.clone(),
    );
    for _ in 0..3 {
        reporter.post(report::CommitStatus {
            sha: SHA.into(),
            context: "driftless/web/preview".into(),
            state: report::State::Success,
            description: "3 to create, 1 to update, 0 to delete".into(),
            target_url: Some("https://drift.example.com/apps/web/previews/7".into()),
        });
    }
    assert_eq!(queue.len(), 1);
    let mut writer = Writer::new(queue, None);
    writer.flush().await;
}
