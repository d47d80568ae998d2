//! Git sources against real repositories made with `git`.

mod common;

use common::{GitRepo, configmap};
use driftless::object::Revision;
use driftless::source::{Error, GitCache, Limits};

/// The folder `app` at `id`, read in full and listed (manifest paths), with default limits.
async fn read_and_list(
    cache: &GitCache,
    url: &str,
    id: &Revision,
) -> (driftless::source::Files, driftless::source::Files) {
    let read = cache.read(url, id, "app", Limits::default()).await.unwrap();
    (read, list_within(cache, url, id, Limits::default()).await)
}

/// The manifests of `app` at `id`, listed within `limits` (sizes from the objects' headers,
/// counted in walk order).
async fn list_within(
    cache: &GitCache,
    url: &str,
    id: &Revision,
    limits: Limits,
) -> driftless::source::Files {
    cache
        .read_listed(
            url,
            id,
            "app",
            limits,
            driftless::manifest::is_manifest_path,
        )
        .await
        .unwrap()
}

/// The findings of a read, as shown.
fn shown(f: &driftless::source::Files) -> Vec<String> {
    f.diagnostics.iter().map(|d| d.to_string()).collect()
}

/// Deletes the loose object `blob` (a hex id) of `repo`: the cache reads the repository on this
/// machine in place, so the blob is then gone for it too.
fn remove_loose(repo: &GitRepo, blob: &str) {
    let loose = repo
        .path()
        .join(".git/objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    std::fs::remove_file(&loose).unwrap();
}

fn cache() -> (tempfile::TempDir, GitCache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = GitCache::new(dir.path());
    (dir, cache)
}

#[tokio::test]
async fn fetches_the_remote_head_a_branch_a_tag_and_a_commit() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[("k", "1")]));
    let first = repo.commit("first");
    repo.git(&["tag", "-a", "v1", "-m", "v1"]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("app/b.yaml", configmap("b", &[]));
    let feature = repo.commit("feature");
    repo.git(&["checkout", "-q", "main"]);
    let (_d, cache) = cache();

    let head = cache.fetch(&repo.url(), None).await.unwrap();
    assert_eq!(head.revision.0, first);
    assert_eq!(head.resolved_ref, "refs/heads/main");
    let branch = cache.fetch(&repo.url(), Some("feature")).await.unwrap();
    assert_eq!(branch.revision.0, feature);
    let tag = cache.fetch(&repo.url(), Some("v1")).await.unwrap();
    assert_eq!(
        (tag.revision.0.as_str(), tag.resolved_ref.as_str()),
        (first.as_str(), "refs/tags/v1")
    );
    let by_id = cache
        .fetch(&repo.url(), Some(&feature[..12]))
        .await
        .unwrap();
    assert_eq!(by_id.revision.0, feature);
    let full_ref = cache
        .fetch(&repo.url(), Some("refs/heads/feature"))
        .await
        .unwrap();
    assert_eq!(full_ref.revision.0, feature);
}

#[tokio::test]
async fn file_urls_work_like_paths() {
    let repo = GitRepo::new();
    repo.write("a.yaml", configmap("a", &[]));
    let id = repo.commit("c");
    let (_d, cache) = cache();
    let url = format!("file://{}", repo.path().display());
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, id);
}

#[tokio::test]
async fn unknown_refs_and_unreachable_repositories_are_errors() {
    let repo = GitRepo::new();
    repo.write("a.yaml", configmap("a", &[]));
    repo.commit("c");
    let (_d, cache) = cache();
    let err = cache.fetch(&repo.url(), Some("nope")).await.unwrap_err();
    assert!(matches!(err, Error::RefNotFound { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("ref `nope` not found in {}", repo.url())
    );
    let err = cache.fetch("/does/not/exist", None).await.unwrap_err();
    assert_eq!(err.to_string(), "repository /does/not/exist does not exist");
    let not_a_repo = tempfile::tempdir().unwrap();
    let err = cache
        .fetch(&not_a_repo.path().display().to_string(), None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FetchFailed { .. }), "{err}");
}

/// A repository with one commit of 30 ConfigMaps under `app/`.
fn thirty_files() -> GitRepo {
    let repo = GitRepo::new();
    for i in 0..30 {
        repo.write(
            &format!("app/{i}.yaml"),
            configmap(&format!("c{i}"), &[("i", &i.to_string())]),
        );
    }
    repo.commit("many");
    repo
}

#[tokio::test]
async fn fetches_are_incremental() {
    let repo = thirty_files();
    // Over the Git protocol: a repository on this machine is not copied at all (below).
    let daemon = common::GitDaemon::start(repo.path().parent().unwrap());
    let url = daemon.url(repo.path().file_name().unwrap().to_str().unwrap());
    let (_d, cache) = cache();
    let first = cache.fetch(&url, None).await.unwrap();
    assert!(first.received_objects >= 32, "{first:?}");
    let again = cache.fetch(&url, None).await.unwrap();
    assert_eq!(again.received_objects, 0, "nothing new: nothing received");
    repo.write("app/0.yaml", configmap("c0", &[("i", "changed")]));
    let id = repo.commit("one change");
    let next = cache.fetch(&url, None).await.unwrap();
    assert_eq!(next.revision.0, id);
    // The new commit, two trees (root and app/) and one blob.
    assert_eq!(next.received_objects, 4, "{next:?}");
}

#[tokio::test]
async fn a_repository_on_this_machine_is_read_in_place_not_copied() {
    let repo = thirty_files();
    let (_d, cache) = cache();
    let first = cache.fetch(&repo.url(), None).await.unwrap();
    assert_eq!(first.received_objects, 0, "{first:?}");
    // Its objects are an alternate of the cache (as `git clone --shared`): no pack was built.
    let cached = cache.repo_path(&repo.url());
    let alternates = std::fs::read_to_string(cached.join("objects/info/alternates")).unwrap();
    let source_objects = std::fs::canonicalize(repo.path().join(".git/objects")).unwrap();
    assert_eq!(alternates.trim(), source_objects.display().to_string());
    let packs = std::fs::read_dir(cached.join("objects/pack"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(packs, 0, "nothing packed into the cache");
    // The files read the same, and a new commit is seen by the next fetch.
    let files = cache
        .read(&repo.url(), &first.revision, "app", Limits::default())
        .await
        .unwrap();
    assert_eq!(files.files.len(), 30);
    repo.write("app/0.yaml", configmap("c0", &[("i", "changed")]));
    let id = repo.commit("one change");
    let next = cache.fetch(&repo.url(), None).await.unwrap();
    assert_eq!(next.revision.0, id);
    let files = cache
        .read(&repo.url(), &next.revision, "app", Limits::default())
        .await
        .unwrap();
    let (_, text) = files.files.iter().find(|(p, _)| p == "app/0.yaml").unwrap();
    assert!(String::from_utf8_lossy(text).contains("changed"));
}

#[tokio::test]
async fn reads_manifests_from_the_tree_in_path_order_without_a_checkout() {
    let repo = GitRepo::new();
    repo.write("app/z.yaml", "z")
        .write("app/sub/a.yml", "a")
        .write("app/b.json", "{}")
        .write("app/README.md", "not a manifest")
        .write("other/x.yaml", "outside the path");
    let id = repo.commit("c");
    let (d, cache) = cache();
    let f = cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(&repo.url(), &f.revision, "app", Limits::default())
        .await
        .unwrap();
    let paths: Vec<&str> = files.files.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, vec!["app/b.json", "app/sub/a.yml", "app/z.yaml"]);
    assert!(files.diagnostics.is_empty());
    // The cache is bare: no work tree anywhere under it.
    let repo_path = cache.repo_path(&repo.url());
    assert!(repo_path.join("HEAD").exists() && !repo_path.join(".git").exists());
    assert!(!d.path().join("app").exists());
    // The root and a missing path.
    let all = cache
        .read(&repo.url(), &Revision(id.clone()), "", Limits::default())
        .await
        .unwrap();
    assert_eq!(all.files.len(), 4);
    let err = cache
        .read(
            &repo.url(),
            &Revision(id.clone()),
            "missing",
            Limits::default(),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PathNotFound { .. }), "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");
    // A path naming a file says so, and what to do.
    let err = cache
        .read(&repo.url(), &Revision(id), "app/z.yaml", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PathNotFound { .. }), "{err}");
    assert!(err.to_string().contains("is a file, not a folder"), "{err}");
}

#[tokio::test]
async fn content_ids_change_only_when_what_the_path_reads_changes() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", "a").write("other/b.yaml", "b");
    let c1 = repo.commit("1");
    repo.write("other/b.yaml", "b2");
    let c2 = repo.commit("2");
    repo.write("app/a.yaml", "a2");
    let c3 = repo.commit("3");
    // A link in the path to a file outside it: the tree at the path is the same entry whatever
    // the file holds; the content id is not.
    repo.write("shared/s.yaml", "s")
        .symlink("app/s.yaml", "../shared/s.yaml");
    let c4 = repo.commit("4");
    repo.write("shared/s.yaml", "s2");
    let c5 = repo.commit("5");
    repo.write("other/b.yaml", "b3");
    let c6 = repo.commit("6");
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let t = |c: String| {
        let cache = cache.clone();
        let url = repo.url();
        async move {
            cache
                .read(&url, &Revision(c), "app", Limits::default())
                .await
                .unwrap()
                .content_id
        }
    };
    let (t1, t2, t3) = (t(c1).await, t(c2).await, t(c3).await);
    assert_eq!(t1, t2);
    assert_ne!(t2, t3);
    let (t4, t5, t6) = (t(c4).await, t(c5).await, t(c6).await);
    assert_ne!(t3, t4);
    assert_ne!(t4, t5, "the linked file changed");
    assert_eq!(t5, t6, "a file neither in the path nor linked from it");
}

#[tokio::test]
async fn symlinks_inside_the_repository_are_followed_and_others_are_errors() {
    let repo = GitRepo::new();
    repo.write("shared/base.yaml", "base")
        .write("shared/dir/in-dir.yaml", "in dir")
        .write("app/real.yaml", "real")
        .symlink("app/linked.yaml", "../shared/base.yaml")
        .symlink("app/dirlink", "../shared/dir")
        .symlink("app/escape.yaml", "../../etc/passwd")
        .symlink("app/absolute.yaml", "/etc/passwd")
        .symlink("app/dangling.yaml", "nowhere.yaml")
        .symlink("app/loop", "..");
    let id = repo.commit("links");
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(&repo.url(), &Revision(id), "app", Limits::default())
        .await
        .unwrap();
    let got: Vec<(&str, &[u8])> = files
        .files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("app/dirlink/in-dir.yaml", &b"in dir"[..]),
            ("app/linked.yaml", &b"base"[..]),
            ("app/loop/shared/base.yaml", &b"base"[..]),
            ("app/loop/shared/dir/in-dir.yaml", &b"in dir"[..]),
            ("app/real.yaml", &b"real"[..]),
        ]
    );
    let diags: Vec<String> = files.diagnostics.iter().map(|d| d.to_string()).collect();
    assert!(
        diags.iter().any(|d| d.starts_with(
            "app/escape.yaml:1:1: error: symlink `app/escape.yaml` points outside the repository"
        )),
        "{diags:?}"
    );
    assert!(
        diags
            .iter()
            .any(|d| d.starts_with("app/absolute.yaml:1:1: error:")),
        "{diags:?}"
    );
    assert!(
        diags
            .iter()
            .any(|d| d.contains("app/dangling.yaml") && d.contains("does not exist")),
        "{diags:?}"
    );
    // `app/loop` leads to the root, which holds `app` again: followed until the cycle.
    assert!(
        diags
            .iter()
            .any(|d| d.starts_with("app/loop/app:1:1: error:") && d.contains("cycle")),
        "{diags:?}"
    );
    // Nothing outside the repository was read.
    assert!(!files.files.iter().any(|(_, b)| b.starts_with(b"root:")));
}

#[tokio::test]
async fn names_that_are_not_utf8_are_errors_not_silent_skips() {
    use std::os::unix::ffi::OsStrExt;
    let repo = GitRepo::new();
    repo.write("app/ok.yaml", "ok");
    let bad_dir = repo.path().join(std::ffi::OsStr::from_bytes(b"app/s\xfcb"));
    std::fs::create_dir_all(&bad_dir).unwrap();
    std::fs::write(bad_dir.join("x.yaml"), "x").unwrap();
    std::fs::write(
        repo.path()
            .join(std::ffi::OsStr::from_bytes(b"app/thr\xe9e.yaml")),
        "y",
    )
    .unwrap();
    std::fs::write(
        repo.path()
            .join(std::ffi::OsStr::from_bytes(b"app/notes\xe9.txt")),
        "z",
    )
    .unwrap();
    let id = repo.commit("odd names");
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(&repo.url(), &Revision(id), "app", Limits::default())
        .await
        .unwrap();
    let diags: Vec<String> = files.diagnostics.iter().map(|d| d.to_string()).collect();
    assert_eq!(diags.len(), 2, "{diags:?}");
    assert!(
        diags
            .iter()
            .all(|d| d.contains("is not valid UTF-8") && d.contains(": error: ")),
        "{diags:?}"
    );
}

#[tokio::test]
async fn pull_request_refs_are_fetched_together_and_forgotten_when_gone() {
    use std::sync::Arc;
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let main = repo.commit("main");
    repo.write("app/b.yaml", configmap("b", &[]));
    let pr = repo.commit("pr");
    repo.git(&["update-ref", "refs/pull/1/head", &pr]);
    repo.git(&["update-ref", "refs/pull/2/head", &main]);
    repo.git(&["update-ref", "refs/pull/2/merge", &pr]);
    // An annotated tag is followed to its commit; a blob is no pull request's head.
    repo.git(&["tag", "-a", "t", "-m", "t", &pr]);
    let tag = repo.git(&["rev-parse", "refs/tags/t"]);
    repo.git(&["update-ref", "refs/pull/3/head", &tag]);
    let blob = repo.git(&["rev-parse", &format!("{pr}:app/b.yaml")]);
    repo.git(&["update-ref", "refs/pull/4/head", &blob]);
    // Names Git refuses, written behind its back: left out, the others still fetched.
    let packed = repo.path().join(".git/packed-refs");
    let mut text = std::fs::read_to_string(&packed)
        .unwrap_or_else(|_| "# pack-refs with: peeled fully-peeled sorted \n".into());
    for bad in ["refs/pull/1..2/head", "refs/pull/x.lock/head"] {
        text.push_str(&format!("{pr} {bad}\n"));
    }
    text.push_str(&format!("{pr} refs/pull/{}/head\n", "9".repeat(300)));
    std::fs::write(&packed, text).unwrap();
    // Served by `git daemon` (libgit2's local transport refuses to list such a repository at
    // all; a Git server lists them).
    let daemon = common::GitDaemon::start(repo.path().parent().unwrap());
    let url = daemon.url(repo.path().file_name().unwrap().to_str().unwrap());
    let (_d, cache) = cache();
    let matches: Arc<dyn Fn(&str) -> bool + Send + Sync> =
        Arc::new(|n: &str| n.starts_with("refs/pull/") && n.ends_with("/head"));
    let timeout = std::time::Duration::from_secs(30);
    let heads = cache
        .fetch_matching(&url, matches.clone(), timeout)
        .await
        .unwrap();
    let got: Vec<(&str, &str)> = heads
        .iter()
        .map(|h| (h.name.as_str(), h.revision.0.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("refs/pull/1/head", pr.as_str()),
            ("refs/pull/2/head", main.as_str()),
            ("refs/pull/3/head", pr.as_str()),
        ]
    );
    assert!(heads.iter().all(|h| h.commit_time > 1_600_000_000));
    // Readable from the cache like any fetched revision.
    let files = cache
        .read(&url, &Revision(pr.clone()), "app", Limits::default())
        .await
        .unwrap();
    assert_eq!(files.files.len(), 2);
    // Closed: gone from the next listing and from the cache's refs.
    repo.git(&["update-ref", "-d", "refs/pull/1/head"]);
    let heads = cache
        .fetch_matching(&url, matches.clone(), timeout)
        .await
        .unwrap();
    assert_eq!(heads.len(), 2);
    let cached = std::process::Command::new("git")
        .args([
            "for-each-ref",
            "--format=%(refname)",
            "refs/driftless/preview/",
        ])
        .current_dir(cache.repo_path(&url))
        .output()
        .unwrap();
    let cached = String::from_utf8_lossy(&cached.stdout).to_string();
    assert!(!cached.contains("pull/1/head"), "{cached}");
    assert!(cached.contains("pull/2/head"), "{cached}");
    // The server gone: an error, and the cache keeps what it had.
    drop(daemon);
    assert!(cache.fetch_matching(&url, matches, timeout).await.is_err());
    let cached_after = std::process::Command::new("git")
        .args([
            "for-each-ref",
            "--format=%(refname)",
            "refs/driftless/preview/",
        ])
        .current_dir(cache.repo_path(&url))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cached_after.stdout), cached);
}

fn basic_auth(token: &str) -> driftless::source::Auth {
    driftless::source::Auth {
        secret: Some(secrecy::SecretString::from(token.to_string())),
        ..Default::default()
    }
}

#[tokio::test]
async fn https_tokens_are_sent_as_the_basic_password_and_refusals_are_authentication_failures() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let head = repo.commit("c");
    // `git` is the default username; the token is the password.
    let server = common::HttpsGitServer::start_with(false, Some(("git", "s3cret-token")));
    let url = server.publish(&repo, "private");
    let (_d, cache) = cache();
    // No credentials: the server's 401 is an authentication failure.
    let e = cache.fetch(&url, None).await.unwrap_err();
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
    cache.set_auth(&url, basic_auth("wrong-token"));
    let e = cache.fetch(&url, None).await.unwrap_err();
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains("wrong-token"), "{shown}");
    cache.set_auth(&url, basic_auth("s3cret-token"));
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, head);
    // A username and password.
    let server = common::HttpsGitServer::start_with(false, Some(("alice", "pa55")));
    let url = server.publish(&repo, "private");
    cache.set_auth(
        &url,
        driftless::source::Auth {
            username: Some("alice".into()),
            ..basic_auth("pa55")
        },
    );
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, head);
}

#[tokio::test]
async fn credentials_in_the_url_are_sent_when_asked_and_never_shown() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let head = repo.commit("c");
    let server = common::HttpsGitServer::start_with(false, Some(("alice", "pa55/w@rd")));
    let url = server.publish(&repo, "private");
    let with = |user: &str, password: &str| {
        url.replacen("http://", &format!("http://{user}:{password}@"), 1)
    };
    let (_d, cache) = cache();
    // Percent-encoded in the URL, sent decoded (HTTP Basic), as git does.
    let good = with("alice", "pa55%2Fw%40rd");
    assert_eq!(cache.fetch(&good, None).await.unwrap().revision.0, head);
    let bad = with("alice", "wr0ng-SECRET");
    let e = cache.fetch(&bad, None).await.unwrap_err();
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
    let shown = format!("{e} {e:?} {}", driftless::reconcile::error_chain(&e));
    assert!(!shown.contains("wr0ng-SECRET"), "{shown}");
    // Credentials go only to a server that asks: the anonymous requests come first.
    let requests = server.requests();
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("401 GET /private.git/info/refs")),
        "{requests:?}"
    );
}

#[tokio::test]
async fn a_redirect_is_followed_and_the_fetch_goes_on_where_it_ended() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let head = repo.commit("c");
    let target = common::HttpsGitServer::start_with(false, None);
    target.publish(&repo, "web");
    let redirector =
        common::HttpsGitServer::redirecting_to(&format!("http://localhost:{}", target.port));
    let url = format!("http://127.0.0.1:{}/web.git", redirector.port);
    let (_d, cache) = cache();
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, head);
    // Only the first request was redirected: the pack was asked for where it ended.
    let asked = redirector.requests();
    assert!(
        asked.iter().all(|r| r.contains("GET /web.git/info/refs")),
        "{asked:?}"
    );
    let served = target.requests();
    assert!(
        served
            .iter()
            .any(|r| r.contains("POST /web.git/git-upload-pack")),
        "{served:?}"
    );
}

#[tokio::test]
async fn a_server_that_does_not_speak_smart_http_is_a_clear_error() {
    // Plain files over HTTP: the dumb protocol, which the transport does not speak.
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(root.path().join("web.git/info")).unwrap();
    std::fs::write(root.path().join("web.git/info/refs"), "").unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let mut child = std::process::Command::new("python3")
        .args([
            "-m",
            "http.server",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .current_dir(root.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/web.git");
    let (_d, cache) = cache();
    let mut e = None;
    for _ in 0..100 {
        match cache.fetch(&url, None).await {
            Err(Error::Unreachable { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await
            }
            other => {
                e = Some(other.unwrap_err());
                break;
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let e = e.expect("the server answered");
    let shown = format!("{e} {}", driftless::reconcile::error_chain(&e));
    assert!(shown.contains("not a smart HTTP Git server"), "{shown}");
}

/// `tests/support/bad_git_http_server.py` in `mode`: (the process, its port, its log file).
fn bad_server(mode: &str) -> (std::process::Child, u16, tempfile::NamedTempFile) {
    use std::io::BufRead;
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut child = std::process::Command::new("python3")
        .arg(common::data_dir().join("../support/bad_git_http_server.py"))
        .arg(mode)
        .arg("--log")
        .arg(log.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line.trim().parse().unwrap(), log)
}

#[tokio::test]
async fn a_list_of_refs_that_never_ends_stops_at_the_fetch_timeout() {
    // One ref every 50 ms, forever: libgit2's progress callbacks are not called while it
    // reads the refs, so only the transport's own check of the cancel flag stops the read.
    let (mut child, port, log) = bad_server("slow-refs");
    let url = format!("http://127.0.0.1:{port}/web.git");
    let (_d, cache) = cache();
    let started = std::time::Instant::now();
    let e = cache
        .fetch_within(&url, None, std::time::Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "{e}"
    );
    // The fetch's thread stopped reading: the server saw the connection go.
    let mut closed = false;
    for _ in 0..100 {
        if std::fs::read_to_string(log.path())
            .unwrap()
            .contains("CLOSED")
        {
            closed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        closed,
        "the list was still being read after the timeout: {e}"
    );
}

#[tokio::test]
async fn an_answer_the_server_gave_is_not_unreachable_and_a_content_type_parameter_is_fine() {
    let (_d, cache) = cache();
    // A 500 to the pack's request: the server was reached; what it said is the error.
    let (mut child, port, _log) = bad_server("post-500");
    let e = cache
        .fetch(&format!("http://127.0.0.1:{port}/web.git"), None)
        .await
        .unwrap_err();
    let _ = child.kill();
    let _ = child.wait();
    assert!(matches!(e, Error::FetchFailed { .. }), "{e:?}");
    let shown = driftless::reconcile::error_chain(&e);
    assert!(shown.contains("500"), "{shown}");
    // `; charset=utf-8` after the advertisement's type is read as that type, as git does (the
    // repository is empty: what follows is about its refs, not the type).
    let (mut child, port, _log) = bad_server("refs-with-charset");
    let e = cache
        .fetch(&format!("http://127.0.0.1:{port}/empty.git"), None)
        .await
        .unwrap_err();
    let _ = child.kill();
    let _ = child.wait();
    let shown = format!("{e} {}", driftless::reconcile::error_chain(&e));
    assert!(!shown.contains("smart HTTP"), "{shown}");
}

#[tokio::test]
async fn credentials_in_urls_never_show_in_errors() {
    let (_d, cache) = cache();
    // Nothing listens on port 9 of loopback.
    let url = "https://x-access-token:ghp_SECRET@127.0.0.1:9/acme/web.git";
    let e = cache.fetch(url, None).await.unwrap_err();
    let shown = format!("{e} {e:?} {}", driftless::reconcile::error_chain(&e));
    assert!(!shown.contains("ghp_SECRET"), "{shown}");
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
    assert_eq!(
        driftless::source::redact_url(url),
        "https://***@127.0.0.1:9/acme/web.git"
    );
    assert_eq!(
        driftless::source::redact_url("ssh://git@github.com/acme/web.git"),
        "ssh://git@github.com/acme/web.git"
    );
}

#[tokio::test]
async fn ssh_keys_authenticate_and_host_keys_are_checked_strictly() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let head = repo.commit("c");
    let bare = tempfile::tempdir().unwrap();
    let bare_path = bare.path().join("web.git");
    repo.git(&["clone", "-q", "--bare", ".", bare_path.to_str().unwrap()]);
    let ssh = common::SshServer::start();
    let url = ssh.url(&bare_path);
    let key = std::fs::read_to_string(&ssh.client_key).unwrap();
    let known = std::fs::read_to_string(&ssh.known_hosts).unwrap();
    let auth = |known_hosts: &str, insecure: bool| driftless::source::Auth {
        ssh_key: Some(secrecy::SecretString::from(key.clone())),
        known_hosts: Some(known_hosts.to_string()),
        insecure_skip_host_key_check: insecure,
        ..Default::default()
    };
    let (_d, cache) = cache();
    cache.set_auth(&url, auth(&known, false));
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, head);
    // What `ssh-keyscan -H` writes (hashed names) works as well.
    let scan = std::process::Command::new("ssh-keyscan")
        .args([
            "-H",
            "-t",
            "ed25519",
            "-p",
            &ssh.port.to_string(),
            "127.0.0.1",
        ])
        .output()
        .unwrap();
    let hashed = String::from_utf8_lossy(&scan.stdout).to_string();
    assert!(hashed.starts_with("|1|"), "{hashed}");
    let (_d3, cache3) = self::cache();
    cache3.set_auth(&url, auth(&hashed, false));
    assert_eq!(cache3.fetch(&url, None).await.unwrap().revision.0, head);
    // Unknown host: an error naming the host and the key's fingerprint, as ssh-keygen -l
    // prints it.
    let (_d2, cache) = self::cache();
    cache.set_auth(&url, auth("", false));
    match cache.fetch(&url, None).await.unwrap_err() {
        Error::HostKeyMismatch {
            host,
            fingerprint,
            changed,
        } => {
            assert_eq!(host, "127.0.0.1");
            assert_eq!(fingerprint, ssh.fingerprint());
            assert!(!changed);
        }
        e => panic!("{e:?}"),
    }
    // A changed key: known_hosts has another one for the host.
    let other = common::SshServer::start();
    let other_known = std::fs::read_to_string(&other.known_hosts)
        .unwrap()
        .replace(&format!(":{}", other.port), &format!(":{}", ssh.port));
    cache.set_auth(&url, auth(&other_known, false));
    let e = cache.fetch(&url, None).await.unwrap_err();
    assert!(
        matches!(&e, Error::HostKeyMismatch { changed: true, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("changed"), "{e}");
    // Unchecked on request.
    cache.set_auth(&url, auth("", true));
    assert_eq!(cache.fetch(&url, None).await.unwrap().revision.0, head);
    // A key the server does not know: refused.
    let stranger = other.client_key.clone();
    cache.set_auth(
        &url,
        driftless::source::Auth {
            ssh_key: Some(secrecy::SecretString::from(
                std::fs::read_to_string(stranger).unwrap(),
            )),
            known_hosts: Some(known.clone()),
            ..Default::default()
        },
    );
    let e = cache.fetch(&url, None).await.unwrap_err();
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
}

#[tokio::test]
async fn credentials_never_follow_a_redirect_to_another_host() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    repo.commit("c");
    let target = common::HttpsGitServer::start_with(false, Some(("git", "s3cret-token")));
    target.publish(&repo, "web");
    // `localhost` is another host than `127.0.0.1` as far as credentials go.
    let redirector =
        common::HttpsGitServer::redirecting_to(&format!("http://localhost:{}", target.port));
    let url = format!("http://127.0.0.1:{}/web.git", redirector.port);
    let (_d, cache) = cache();
    cache.set_auth(&url, basic_auth("s3cret-token"));
    let e = cache.fetch(&url, None).await.unwrap_err();
    let shown = format!("{e} {}", driftless::reconcile::error_chain(&e));
    assert!(matches!(e, Error::AuthenticationFailed { .. }), "{e:?}");
    assert!(shown.contains("another host"), "{shown}");
}

#[tokio::test]
async fn a_tree_that_repeats_one_folder_is_refused_at_the_entry_bound() {
    // 2^24 files when walked (16 million), a few KB in Git.
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[])).commit("good");
    let bomb = repo.commit_tree_bomb(24);
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(
            &repo.url(),
            &Revision(bomb.clone()),
            "app",
            Limits::default(),
        )
        .await
        .unwrap();
    let errors: Vec<String> = files.diagnostics.iter().map(|d| d.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("more than 250000 files and folders")
            && errors[0].contains("source.limits.maxEntries"),
        "{errors:?}"
    );
    assert!(
        files.files.is_empty(),
        "a refused tree hands out nothing: {} files",
        files.files.len()
    );
    // A smaller bound stops sooner; a tree within it is read whole.
    let small = Limits {
        max_entries: 1000,
        ..Limits::default()
    };
    let files = cache
        .read(&repo.url(), &Revision(bomb), "app", small)
        .await
        .unwrap();
    assert!(files.files.is_empty() && files.diagnostics.len() == 1);
    let within = repo.commit_tree_bomb(8); // 256 files, 767 entries
    cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(&repo.url(), &Revision(within), "app", small)
        .await
        .unwrap();
    assert!(files.diagnostics.is_empty(), "{:?}", files.diagnostics);
    assert_eq!(files.files.len(), 256);
}

#[tokio::test]
async fn folders_too_deep_and_manifests_too_large_are_refused_naming_the_bound() {
    let repo = GitRepo::new();
    let deep = (0..6)
        .map(|i| format!("d{i}"))
        .collect::<Vec<_>>()
        .join("/");
    repo.write(&format!("app/{deep}/a.yaml"), configmap("a", &[]))
        .write("app/b.yaml", configmap("b", &[("k", &"x".repeat(2000))]));
    let id = repo.commit("deep and large");
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let read = |limits: Limits| {
        let (cache, url, id) = (cache.clone(), repo.url(), id.clone());
        async move {
            cache
                .read(&url, &Revision(id), "app", limits)
                .await
                .unwrap()
                .diagnostics
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(read(Limits::default()).await, Vec::<String>::new());
    let too_deep = read(Limits {
        max_depth: 5,
        ..Limits::default()
    })
    .await;
    assert!(
        too_deep.len() == 1
            && too_deep[0].starts_with("app/d0/d1/d2/d3/d4/d5:")
            && too_deep[0]
                .contains("more than 5 folders below the app's path (source.limits.maxDepth)"),
        "{too_deep:?}"
    );
    let too_large = read(Limits {
        max_bytes: 1000,
        ..Limits::default()
    })
    .await;
    assert!(
        too_large.len() == 1
            && too_large[0].contains("larger than 1000 bytes in all (source.limits.maxBytes)"),
        "{too_large:?}"
    );
}

/// A revision of many files is read after its walk on every core: the same files and bytes
/// as written, and a byte limit passed part way stops it where a walk reading each file as it
/// is met stops (the listed walk counts sizes in that order), reporting nothing walked after.
#[tokio::test]
async fn a_read_of_many_files_on_every_core_gives_the_files_and_limits_of_one_walk() {
    let repo = GitRepo::new();
    let mut written = Vec::new();
    for i in 0..300 {
        let path = format!("app/f{i:03}.yaml");
        let text = configmap(&format!("c{i}"), &[("k", &"v".repeat(i))]);
        repo.write(&path, text.clone());
        written.push((path, text));
    }
    // Walked last (tree order is by name): a finding only a walk that gets there reports.
    repo.symlink("app/zz-dangling.yaml", "nowhere.yaml");
    let id = Revision(repo.commit("many files"));
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let url = repo.url();
    let (read, listed) = read_and_list(&cache, &url, &id).await;
    let got: Vec<(String, String)> = read
        .files
        .iter()
        .map(|(p, c)| (p.clone(), String::from_utf8(c.clone()).unwrap()))
        .collect();
    assert_eq!(got, written);
    assert_eq!(read.blob_ids, listed.blob_ids);
    assert_eq!(read.content_id, listed.content_id);
    assert_eq!(
        shown(&read).len(),
        1,
        "the dangling link: {:?}",
        shown(&read)
    );

    // The limit passed at the 151st file, in walk order.
    let first: u64 = written[..150].iter().map(|(_, t)| t.len() as u64).sum();
    let limited = Limits {
        max_bytes: first + 1,
        ..Limits::default()
    };
    let full = cache.read(&url, &id, "app", limited).await.unwrap();
    let walked = list_within(&cache, &url, &id, limited).await;
    assert_eq!(shown(&full), shown(&walked));
    assert!(
        shown(&full).len() == 1
            && shown(&full)[0].starts_with("app/f150.yaml")
            && shown(&full)[0].contains("source.limits.maxBytes"),
        "{:?}",
        shown(&full)
    );
    assert!(full.files.is_empty() && full.blob_ids.is_empty());

    // A blob after that file gone from the objects (the repository on this machine is read in
    // place): the walk stops before it, as a walk reading each file as met does; the part read
    // beside the first (from `app/f150.yaml` on two cores) must not make it an error.
    remove_loose(&repo, &read.blob_ids["app/f150.yaml"]);
    let limited = Limits {
        max_bytes: first - 1,
        ..Limits::default()
    };
    let full = cache.read(&url, &id, "app", limited).await.unwrap();
    assert_eq!(
        shown(&full),
        shown(&list_within(&cache, &url, &id, limited).await)
    );
    assert!(
        shown(&full).len() == 1 && shown(&full)[0].starts_with("app/f149.yaml"),
        "{:?}",
        shown(&full)
    );
}

#[tokio::test]
async fn a_listed_read_reads_only_the_contents_asked_for_and_counts_sizes_the_same() {
    let repo = GitRepo::new();
    repo.write("shared/base.yaml", configmap("base", &[]))
        .write("app/a.yaml", configmap("a", &[("k", "1")]))
        .write(
            "app/sub/b.yaml",
            configmap("b", &[("k", &"x".repeat(2000))]),
        )
        .symlink("app/linked.yaml", "../shared/base.yaml")
        .symlink("app/dangling.yaml", "nowhere.yaml");
    let id = Revision(repo.commit("files"));
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let url = repo.url();
    let (read, listed) = read_and_list(&cache, &url, &id).await;
    assert!(!read.unread && listed.unread);
    // The same files, ids and findings; no contents yet.
    let paths =
        |f: &driftless::source::Files| f.files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        paths(&listed),
        ["app/a.yaml", "app/linked.yaml", "app/sub/b.yaml"]
    );
    assert_eq!(paths(&listed), paths(&read));
    assert_eq!(listed.blob_ids, read.blob_ids);
    assert_eq!(listed.content_id, read.content_id);
    assert_eq!(shown(&listed), shown(&read));
    assert_eq!(shown(&listed).len(), 1, "the dangling link");
    assert!(listed.files.iter().all(|(_, b)| b.is_empty()));

    // Only the files asked for are read, with the bytes a full read gives.
    let asked = ["app/linked.yaml".to_string(), "app/sub/b.yaml".to_string()];
    let filled = cache
        .read_contents(&url, listed.clone(), asked.iter().cloned().collect())
        .await
        .unwrap();
    assert!(!filled.unread);
    for ((path, got), (_, want)) in filled.files.iter().zip(&read.files) {
        if asked.contains(path) {
            assert_eq!(got, want, "{path}");
        } else {
            assert!(got.is_empty(), "{path} was not asked for");
        }
    }

    // Sizes come from the objects' headers: the byte limit refuses the same walk.
    let limited = Limits {
        max_bytes: 2000,
        ..Limits::default()
    };
    let too_large = list_within(&cache, &url, &id, limited).await;
    let full = cache.read(&url, &id, "app", limited).await.unwrap();
    assert_eq!(shown(&too_large), shown(&full));
    assert!(
        shown(&too_large)
            .iter()
            .any(|d| d.contains("larger than 2000 bytes in all (source.limits.maxBytes)")),
        "{:?}",
        shown(&too_large)
    );
    assert!(too_large.files.is_empty() && full.files.is_empty());

    // A blob gone by the time it is read (the repository on this machine is read in place)
    // is an error naming the file, not an empty file.
    remove_loose(&repo, &listed.blob_ids["app/a.yaml"]);
    let err = cache
        .read_contents(&url, listed, ["app/a.yaml".to_string()].into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ReadFailed { .. }), "{err}");
    assert!(err.to_string().contains("app/a.yaml"), "{err}");
}

#[tokio::test]
async fn many_files_read_in_parts_are_each_their_own() {
    let repo = GitRepo::new();
    for i in 0..300 {
        repo.write(
            &format!("app/d{}/f{i:03}.yaml", i % 7),
            configmap(&format!("c{i}"), &[("i", &i.to_string())]),
        );
    }
    let id = Revision(repo.commit("many"));
    let (_d, cache) = cache();
    let url = repo.url();
    cache.fetch(&url, None).await.unwrap();
    let (read, listed) = read_and_list(&cache, &url, &id).await;
    let all = listed.files.iter().map(|(p, _)| p.clone()).collect();
    let filled = cache.read_contents(&url, listed, all).await.unwrap();
    assert_eq!(filled.files.len(), 300);
    assert_eq!(filled.files, read.files);
}

#[tokio::test]
async fn a_submodule_under_the_path_is_an_error_naming_it() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let other = repo.commit("first");
    // A gitlink (mode 160000), as `git submodule add` leaves in the tree.
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{other},app/vendored"),
    ]);
    repo.git(&["commit", "-q", "-m", "submodule"]);
    let id = repo.head();
    let (_d, cache) = cache();
    cache.fetch(&repo.url(), None).await.unwrap();
    let files = cache
        .read(&repo.url(), &Revision(id), "app", Limits::default())
        .await
        .unwrap();
    let errors: Vec<String> = files.diagnostics.iter().map(|d| d.to_string()).collect();
    assert!(
        errors.len() == 1
            && errors[0].starts_with("app/vendored:1:1: error:")
            && errors[0].contains("is a Git submodule"),
        "{errors:?}"
    );
}
