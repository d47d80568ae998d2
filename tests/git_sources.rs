//! Git sources in the real world, end to end with the real binary: private repositories over
//! ssh (a real `sshd` with a test key and a known_hosts file) and over http with a token (`git
//! http-backend` behind Basic auth), host-key changes, outages, a connection cut in the middle
//! of a pack, and a force push whose old commit is gone from the server. Through all of them the
//! store keeps every object of the last good revision.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{Env, GitRepo, configmap, stderr, stdout};
use serde_json::Value;

fn condition(env: &Env, type_: &str) -> Value {
    env.status()["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_).cloned())
        .unwrap_or(Value::Null)
}

/// Writes a config whose one app follows `url` with these `auth` lines (indented 6).
fn config(env: &Env, url: &str, auth: &str) {
    let config = format!(
        "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n  - name: demo\n    source:\n      repo: {url}\n      path: app\n      interval: 1s\n      timeout: 5s\n{auth}"
    );
    std::fs::write(env.config(), config).unwrap();
}

fn bare_clone(repo: &GitRepo, dir: &Path) -> std::path::PathBuf {
    let bare = dir.join("web.git");
    repo.git(&["clone", "-q", "--bare", ".", bare.to_str().unwrap()]);
    bare
}

fn objects(env: &Env) -> Vec<(String, String)> {
    env.versions()
}

#[test]
fn ssh_sources_check_host_keys_survive_outages_and_follow_force_pushes() {
    let env = Env::new();
    let served = tempfile::tempdir().unwrap();
    let bare = bare_clone(&env.repo, served.path());
    let mut ssh = common::SshServer::start();
    config(
        &env,
        &ssh.url(&bare),
        &format!(
            "      auth:\n        sshKey: {{file: {}}}\n        knownHosts: {{file: {}}}\n",
            ssh.client_key.display(),
            ssh.known_hosts.display()
        ),
    );
    let agent = env.agent();
    env.wait("first sync over ssh", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let first = env.status()["revision"].as_str().unwrap().to_string();
    let kept = objects(&env);

    // Outage: the server is gone. Unreachable; every object stays.
    ssh.stop();
    env.wait("Unreachable", Duration::from_secs(30), || {
        condition(&env, "SourceAvailable")["reason"] == "Unreachable"
    });
    assert_eq!(condition(&env, "SourceAvailable")["status"], "False");
    assert_eq!(objects(&env), kept, "nothing deleted during an outage");
    // Not knowing of a newer commit is not drift: the outage opens no gap (and so no Stale).
    let st = env.status();
    assert!(st["outOfSyncSince"].is_null(), "{st}");
    assert!(st["progressingSince"].is_null(), "{st}");

    // Back, but with another host key: refused, naming the host and the new key.
    ssh.replace_host_key();
    env.wait("HostKeyMismatch", Duration::from_secs(30), || {
        condition(&env, "SourceAvailable")["reason"] == "HostKeyMismatch"
    });
    let message = condition(&env, "SourceAvailable")["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("127.0.0.1") && message.contains(&ssh.fingerprint()),
        "{message}"
    );
    assert!(message.contains("changed"), "{message}");
    assert_eq!(objects(&env), kept, "nothing deleted on a host key change");
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0));
    let key = std::fs::read_to_string(&ssh.client_key).unwrap();
    let secret_line = key.lines().nth(1).unwrap();
    assert!(
        !log.contains(secret_line),
        "the private key is never logged"
    );

    // The new key accepted (known_hosts updated): a force push to an unrelated history,
    // after which the server forgets the old commit.
    std::fs::write(
        &ssh.known_hosts,
        format!(
            "[127.0.0.1]:{} {}",
            ssh.port,
            std::fs::read_to_string(&ssh.host_key_pub)
                .unwrap()
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        ),
    )
    .unwrap();
    let agent = env.agent();
    env.repo.git(&["checkout", "-q", "--orphan", "rewritten"]);
    env.repo.git(&["rm", "-q", "-r", "--cached", "."]);
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "rewritten")]));
    env.repo.write("app/b.yaml", configmap("b", &[("k", "1")]));
    let rewritten = env.repo.commit("rewritten history");
    env.repo.git(&[
        "push",
        "-q",
        "--force",
        bare.to_str().unwrap(),
        "rewritten:main",
    ]);
    for args in [
        &["reflog", "expire", "--expire=now", "--all"][..],
        &["gc", "-q", "--prune=now"][..],
    ] {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(&bare)
            .output()
            .unwrap();
        assert!(out.status.success());
    }
    let gone = std::process::Command::new("git")
        .args(["cat-file", "-e", &first])
        .current_dir(&bare)
        .status()
        .unwrap();
    assert!(!gone.success(), "the old commit is gone from the server");
    env.wait("the new tip applied", Duration::from_secs(30), || {
        env.status()["revision"] == rewritten.as_str()
    });
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "rewritten");
    let source = condition(&env, "SourceAvailable");
    let m = source["message"].as_str().unwrap();
    assert!(
        m.contains(&rewritten[..12]) && m.contains(&first[..12]),
        "the status names the old and the new commit: {m}"
    );
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn http_tokens_authenticate_and_refusals_keep_the_revision_in_force() {
    let env = Env::new();
    let server = common::HttpsGitServer::start_with(false, Some(("git", "tok-s3cret")));
    let url = server.publish(&env.repo, "web");
    std::fs::write(env.dir.path().join("token"), "tok-s3cret\n").unwrap();
    config(&env, &url, "      auth:\n        token: {file: token}\n");
    let agent = env.agent();
    env.wait("first sync over http", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let kept = objects(&env);
    drop(agent);
    // The token revoked (the agent reads it at start): AuthenticationFailed, objects kept.
    std::fs::write(env.dir.path().join("token"), "revoked\n").unwrap();
    let agent = env.agent();
    env.wait("AuthenticationFailed", Duration::from_secs(30), || {
        condition(&env, "SourceAvailable")["reason"] == "AuthenticationFailed"
    });
    assert_eq!(objects(&env), kept);
    let status = env.run(&["status", "-o", "json"]);
    let shown = format!("{}{}", common::stdout(&status), env.log());
    assert!(
        !shown.contains("revoked") && !shown.contains("tok-s3cret"),
        "{shown}"
    );
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

/// A TCP proxy to `target` that, while `cut_after` is non-zero, closes each connection once it
/// has passed that many bytes from the server: a transfer cut in the middle of a pack.
async fn proxy(target: u16, cut_after: Arc<AtomicUsize>, connections: Arc<AtomicUsize>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            connections.fetch_add(1, Ordering::SeqCst);
            let cut = cut_after.load(Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                    return;
                };
                let (mut cr, mut cw) = client.into_split();
                let (mut sr, mut sw) = server.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                });
                let mut passed = 0usize;
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    let n = if cut > 0 { n.min(cut - passed) } else { n };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    passed += n;
                    if cut > 0 && passed >= cut {
                        break;
                    }
                }
                up.abort();
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pack_cut_in_the_middle_leaves_the_cache_usable_and_the_revision_in_force() {
    let env = Env::new();
    let served = tempfile::tempdir().unwrap();
    let bare = bare_clone(&env.repo, served.path());
    let daemon = common::GitDaemon::start(served.path());
    let cut_after = Arc::new(AtomicUsize::new(0));
    let port = proxy(daemon.port, cut_after.clone(), Arc::default()).await;
    config(&env, &format!("git://127.0.0.1:{port}/web.git"), "");
    let agent = env.agent();
    env.wait("first sync over git://", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let kept = objects(&env);
    // A big commit (about 2 MB that does not compress, in two objects each within the 1.5 MiB
    // an object may have), and a connection that breaks after 64 KiB of it.
    let mut x: u64 = 0x9e3779b97f4a7c15;
    for part in ["big1", "big2"] {
        let mut noise = String::new();
        while noise.len() < 1_000_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            noise.push_str(&format!("{x:016x}"));
        }
        env.repo.write(
            &format!("app/{part}.yaml"),
            configmap(part, &[("noise", &noise)]),
        );
    }
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    let new = env.repo.commit("big");
    cut_after.store(64 * 1024, Ordering::SeqCst);
    env.repo
        .git(&["push", "-q", bare.to_str().unwrap(), "main"]);
    let wait = |what: &str, f: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if f() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("timed out waiting for {what}\n{}", env.log());
    };
    wait("a failed fetch", &|| {
        condition(&env, "SourceAvailable")["status"] == "False"
    });
    let reason = condition(&env, "SourceAvailable")["reason"].clone();
    assert!(
        reason == "Unreachable" || reason == "FetchFailed",
        "{reason}"
    );
    assert_eq!(objects(&env), kept, "the revision in force stays");
    // The network heals: the same cache fetches the commit.
    cut_after.store(0, Ordering::SeqCst);
    wait("the new revision", &|| {
        env.status()["revision"] == new.as_str()
    });
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "2");
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn in_a_monorepo_a_commit_elsewhere_is_not_planned_again_and_unchanged_files_are_not_parsed() {
    let env = Env::new();
    env.repo
        .write("other/c.yaml", configmap("c", &[("k", "1")]));
    env.repo
        .write("other/d.yaml", configmap("d", &[("k", "1")]));
    env.repo.commit("two apps");
    let config = format!(
        "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n  - name: one\n    source: {{repo: {url}, path: app, interval: 1s}}\n  - name: two\n    source: {{repo: {url}, path: other, interval: 1s}}\n",
        url = env.repo.url()
    );
    std::fs::write(env.config(), config).unwrap();
    let agent = env.agent();
    env.wait("both apps", Duration::from_secs(30), || {
        env.get("configmap", "a").is_some() && env.get("configmap", "d").is_some()
    });
    let app_one = |env: &Env| -> Vec<(String, String)> {
        objects(env)
            .into_iter()
            .filter(|(k, _)| k.ends_with("\"a\"") || k.ends_with("\"b\""))
            .collect()
    };
    let before = app_one(&env);
    assert_eq!(before.len(), 2, "{before:?}");
    env.repo
        .write("other/c.yaml", configmap("c", &[("k", "2")]));
    let head = env.repo.commit("only other/c.yaml");
    env.wait("c applied", Duration::from_secs(30), || {
        env.get("configmap", "c")
            .is_some_and(|c| c["data"]["k"] == "2")
    });
    let revision_of = |env: &Env, app: &str| -> Value {
        let out = env.run(&["status", "-o", "json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["apps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == app)
            .unwrap()["revision"]
            .clone()
    };
    env.wait("app one at the new commit", Duration::from_secs(30), || {
        revision_of(&env, "one") == head.as_str()
    });
    assert_eq!(app_one(&env), before, "app one wrote nothing");
    let (code, log) = agent.stop();
    assert_eq!(code, Some(0));
    let lines = |app: &str, text: &str| {
        log.lines()
            .filter(|l| l.contains(&format!("app={app}")) && l.contains(text))
            .count()
    };
    assert!(lines("one", "not planned again") >= 1, "{log}");
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("app=one")
                && l.contains("New revision")
                && l.contains(&head[..12]))
            .count(),
        0,
        "app one did not parse the commit"
    );
    // App two parsed only the file that changed.
    assert!(
        log.lines().any(|l| l.contains("app=two")
            && l.contains("Manifests parsed")
            && l.contains("parsed=1")
            && l.contains("reused=1")),
        "{log}"
    );
}

/// The running agent's "path unchanged" shortcut covers what symlinks in the path lead to: a
/// commit that changes only a file outside the app's folder, which a link in it points to, is a
/// new desired set (the folder's tree id alone does not change).
#[test]
fn a_commit_changing_only_a_file_a_link_points_to_is_applied_by_the_running_agent() {
    let env = Env::with_options("1s", "");
    env.repo
        .write("shared/s.yaml", configmap("s", &[("k", "1")]));
    env.repo.symlink("app/s.yaml", "../shared/s.yaml");
    env.repo.commit("a linked file");
    let agent = env.agent();
    env.wait("the linked object", Duration::from_secs(30), || {
        env.get("configmap", "s")
            .is_some_and(|c| c["data"]["k"] == "1")
    });
    env.repo
        .write("shared/s.yaml", configmap("s", &[("k", "2")]));
    env.repo.commit("only the linked file");
    env.wait("the linked file's change", Duration::from_secs(30), || {
        env.get("configmap", "s")
            .is_some_and(|c| c["data"]["k"] == "2")
    });
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

fn ssh_keygen(path: &Path) -> String {
    let out = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "signer", "-f"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::read_to_string(path.with_extension("pub")).unwrap()
}

/// Commits everything, signed with the SSH key at `key` (`git -c gpg.format=ssh`).
fn signed_commit(repo: &GitRepo, key: &Path, message: &str) -> String {
    repo.git(&["add", "-A"]);
    repo.git(&[
        "-c",
        "gpg.format=ssh",
        "-c",
        &format!("user.signingkey={}", key.display()),
        "commit",
        "-q",
        "-S",
        "-m",
        message,
    ]);
    repo.head()
}

#[test]
fn only_commits_signed_by_an_allowed_key_are_applied() {
    let env = Env::new();
    let keys = tempfile::tempdir().unwrap();
    let trusted = keys.path().join("trusted");
    let stranger = keys.path().join("stranger");
    let trusted_pub = ssh_keygen(&trusted);
    ssh_keygen(&stranger);
    let fields: Vec<&str> = trusted_pub.split_whitespace().collect();
    std::fs::write(
        env.dir.path().join("allowed_signers"),
        format!(
            "# who may sign\nalice@example.com namespaces=\"git\" {} {}\n",
            fields[0], fields[1]
        ),
    )
    .unwrap();
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "signed")]));
    let good = signed_commit(&env.repo, &trusted, "signed");
    config(
        &env,
        &env.repo.url(),
        "      verify: {mode: head, allowedSigners: {file: allowed_signers}}\n",
    );
    let agent = env.agent();
    env.wait("the signed head applied", Duration::from_secs(30), || {
        env.status()["revision"] == good.as_str()
    });
    assert!(env.log().contains("Commit signature verified"));
    let rejected = |what: &str, head: &str| {
        env.wait(what, Duration::from_secs(30), || {
            env.status()["lastAttemptedRevision"] == head
        });
        let ready = condition(&env, "Ready");
        assert_eq!(ready["status"], "False", "{ready}");
        assert_eq!(ready["reason"], "SignatureRejected", "{ready}");
        assert_eq!(env.status()["revision"], good.as_str(), "still in force");
        assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "signed");
        ready["message"].as_str().unwrap().to_string()
    };
    // Unsigned.
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "unsigned")]));
    let unsigned = env.repo.commit("unsigned");
    let m = rejected("the unsigned commit refused", &unsigned);
    assert!(m.contains(&unsigned) && m.contains("is not signed"), "{m}");
    // Signed by a key that is not allowed.
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "stranger")]));
    let strange = signed_commit(&env.repo, &stranger, "stranger");
    let m = rejected("the stranger's commit refused", &strange);
    assert!(m.contains("not in allowedSigners"), "{m}");
    // Signed again by the trusted key: applied.
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "trusted again")]));
    let again = signed_commit(&env.repo, &trusted, "trusted again");
    env.wait(
        "the trusted commit applied",
        Duration::from_secs(30),
        || env.status()["revision"] == again.as_str(),
    );
    assert_eq!(
        env.get("configmap", "a").unwrap()["data"]["k"],
        "trusted again"
    );
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_of_one_repository_asking_together_share_one_fetch() {
    let repo = GitRepo::new();
    repo.write("app/a.yaml", configmap("a", &[]));
    let main = repo.commit("main");
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("app/b.yaml", configmap("b", &[]));
    let feature = repo.commit("feature");
    repo.git(&["checkout", "-q", "main"]);
    let served = tempfile::tempdir().unwrap();
    let bare = served.path().join("web.git");
    repo.git(&["clone", "-q", "--bare", ".", bare.to_str().unwrap()]);
    let daemon = common::GitDaemon::start(served.path());
    let connections = Arc::new(AtomicUsize::new(0));
    let port = proxy(daemon.port, Arc::default(), connections.clone()).await;
    let url = format!("git://127.0.0.1:{port}/web.git");
    let dir = tempfile::tempdir().unwrap();
    let cache = driftless::source::GitCache::new(dir.path());
    // Two apps (two branches) and a third on main, all at once: one listing, one transfer.
    let (a, b, c) = tokio::join!(
        cache.fetch(&url, Some("main")),
        cache.fetch(&url, Some("feature")),
        cache.fetch(&url, None),
    );
    let (a, b, c) = (a.unwrap(), b.unwrap(), c.unwrap());
    assert_eq!(a.revision.0, main);
    assert_eq!(b.revision.0, feature);
    assert_eq!(c.revision.0, main);
    assert_eq!(
        cache.transfers(),
        1,
        "one listing and one transfer for the three"
    );
    let mut received = [a.received_objects, b.received_objects, c.received_objects];
    received.sort();
    assert_eq!(received[..2], [0, 0], "two of them got the shared result");
    assert!(connections.load(Ordering::SeqCst) >= 2);
    // Asked later: a fetch of its own (a push may have come in between).
    repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    let newer = repo.commit("newer");
    repo.git(&["push", "-q", bare.to_str().unwrap(), "main"]);
    assert_eq!(
        cache.fetch(&url, Some("main")).await.unwrap().revision.0,
        newer
    );
    assert_eq!(cache.transfers(), 2);
}

#[test]
fn turning_verification_on_checks_the_revision_in_force() {
    let env = Env::new();
    let keys = tempfile::tempdir().unwrap();
    let trusted_pub = ssh_keygen(&keys.path().join("trusted"));
    let f: Vec<&str> = trusted_pub.split_whitespace().collect();
    std::fs::write(
        env.dir.path().join("allowed_signers"),
        format!("alice@example.com {} {}\n", f[0], f[1]),
    )
    .unwrap();
    config(&env, &env.repo.url(), "");
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(0), "{}", common::stderr(&out));
    let head = env.repo.head();
    config(
        &env,
        &env.repo.url(),
        "      verify: {mode: head, allowedSigners: {file: allowed_signers}}\n",
    );
    let out = env.run(&["sync"]);
    assert_eq!(out.status.code(), Some(1), "{}", common::stderr(&out));
    let ready = condition(&env, "Ready");
    assert_eq!(ready["reason"], "SignatureRejected", "{ready}");
    assert!(
        ready["message"].as_str().unwrap().contains(&head),
        "{ready}"
    );
}

#[test]
fn an_app_that_never_fetched_does_not_claim_to_have_converged() {
    let env = Env::new();
    let server = common::HttpsGitServer::start_with(false, Some(("git", "right")));
    let url = server.publish(&env.repo, "web");
    std::fs::write(env.dir.path().join("token"), "wrong\n").unwrap();
    config(&env, &url, "      auth:\n        token: {file: token}\n");
    let agent = env.agent();
    env.wait("AuthenticationFailed", Duration::from_secs(30), || {
        condition(&env, "SourceAvailable")["reason"] == "AuthenticationFailed"
    });
    let progressing = condition(&env, "Progressing");
    assert_eq!(progressing["reason"], "Initializing", "{progressing}");
    assert_eq!(condition(&env, "Ready")["status"], "False");
    assert_eq!(env.status()["revision"], Value::Null);
    drop(agent);
}

/// A GnuPG home with a new Ed25519 signing key for `email`; returns its armored public key.
fn gpg_key(home: &Path, email: &str) -> String {
    let gpg = |args: &[&str]| {
        let out = std::process::Command::new("gpg")
            .arg("--homedir")
            .arg(home)
            .args(["--batch", "--pinentry-mode", "loopback", "--passphrase", ""])
            .args(args)
            .output()
            .expect("gpg runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    gpg(&[
        "--quick-gen-key",
        &format!("Test <{email}>"),
        "ed25519",
        "sign",
        "never",
    ]);
    gpg(&["--armor", "--export", email])
}

fn gpg_commit(repo: &GitRepo, home: &Path, email: &str, message: &str) -> String {
    repo.git(&["add", "-A"]);
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            &format!("user.signingkey={email}"),
            "commit",
            "-q",
            "-S",
            "-m",
            message,
        ])
        .current_dir(repo.path())
        .env("GNUPGHOME", home)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    repo.head()
}

#[test]
fn openpgp_signed_commits_are_verified_against_the_given_keys() {
    let env = Env::new();
    let homes = tempfile::tempdir().unwrap();
    let (alice, mallory) = (homes.path().join("alice"), homes.path().join("mallory"));
    for h in [&alice, &mallory] {
        std::fs::create_dir(h).unwrap();
        let mut perms = std::fs::metadata(h).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o700);
        std::fs::set_permissions(h, perms).unwrap();
    }
    let public = gpg_key(&alice, "alice@example.com");
    gpg_key(&mallory, "mallory@example.com");
    std::fs::write(env.dir.path().join("keys.asc"), public).unwrap();
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "alice")]));
    let good = gpg_commit(&env.repo, &alice, "alice@example.com", "alice");
    config(
        &env,
        &env.repo.url(),
        "      verify: {mode: head, openpgpKeys: {file: keys.asc}}\n",
    );
    let agent = env.agent();
    env.wait("alice's commit applied", Duration::from_secs(30), || {
        env.status()["revision"] == good.as_str()
    });
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "mallory")]));
    let bad = gpg_commit(&env.repo, &mallory, "mallory@example.com", "mallory");
    env.wait("mallory's commit refused", Duration::from_secs(30), || {
        env.status()["lastAttemptedRevision"] == bad.as_str()
    });
    let ready = condition(&env, "Ready");
    assert_eq!(ready["reason"], "SignatureRejected", "{ready}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("not in openpgpKeys"),
        "{ready}"
    );
    assert_eq!(env.get("configmap", "a").unwrap()["data"]["k"], "alice");
    // An SSH-signed or unsigned commit is refused too (no allowedSigners given).
    env.repo
        .write("app/a.yaml", configmap("a", &[("k", "unsigned")]));
    let unsigned = env.repo.commit("unsigned");
    env.wait(
        "the unsigned commit refused",
        Duration::from_secs(30),
        || env.status()["lastAttemptedRevision"] == unsigned.as_str(),
    );
    assert_eq!(env.status()["revision"], good.as_str());
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_signature_is_reported_on_the_commit() {
    let github = common::github_status_host().await;
    let env = Env::new();
    let keys = tempfile::tempdir().unwrap();
    let trusted_pub = ssh_keygen(&keys.path().join("trusted"));
    let f: Vec<&str> = trusted_pub.split_whitespace().collect();
    std::fs::write(
        env.dir.path().join("allowed_signers"),
        format!("alice@example.com {} {}\n", f[0], f[1]),
    )
    .unwrap();
    // The head is unsigned.
    let unsigned = env.repo.head();
    config(
        &env,
        &env.repo.url(),
        &format!(
            "      verify: {{mode: head, allowedSigners: {{file: allowed_signers}}}}\n    status:\n      provider: github\n      apiUrl: {}\n      repository: acme/web\n      token: {{env: DRIFTLESS_TEST_GH_TOKEN}}\n",
            github.uri()
        ),
    );
    let agent = env.agent_with_env(&[("DRIFTLESS_TEST_GH_TOKEN", "gh-token")]);
    let mut posted = None;
    for _ in 0..300 {
        posted = common::posted_statuses(&github)
            .await
            .into_iter()
            .find(|(sha, _)| *sha == unsigned)
            .map(|(_, body)| body);
        if posted.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let body = posted.expect("a status on the refused commit");
    assert_eq!(body["state"], "error", "{body}");
    assert_eq!(body["context"], "driftless/demo");
    assert!(
        body["description"]
            .as_str()
            .unwrap()
            .contains("is not signed"),
        "{body}"
    );
    assert!(env.get("configmap", "a").is_none(), "nothing applied");
    drop(agent);
}

#[test]
fn a_deleted_branch_is_ref_not_found_and_deletes_nothing() {
    let env = Env::new();
    env.repo.git(&["checkout", "-q", "-b", "release"]);
    env.repo.git(&["checkout", "-q", "main"]);
    let config = format!(
        "store:\n  sqlite: {{path: store.db}}\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n  - name: demo\n    source: {{repo: {}, ref: release, path: app, interval: 1s}}\n",
        env.repo.url()
    );
    std::fs::write(env.config(), config).unwrap();
    let agent = env.agent();
    env.wait("first sync", Duration::from_secs(30), || {
        env.get("configmap", "b").is_some()
    });
    let kept = objects(&env);
    env.repo.git(&["branch", "-q", "-D", "release"]);
    env.wait("RefNotFound", Duration::from_secs(30), || {
        condition(&env, "SourceAvailable")["reason"] == "RefNotFound"
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(objects(&env), kept, "never \"delete everything\"");
    let (code, _) = agent.stop();
    assert_eq!(code, Some(0));
}

#[test]
fn diff_of_an_ancestor_deepens_a_shallow_cache() {
    // Over git:// the cache fetches one commit deep; HEAD~2 needs more history.
    let env = Env::new();
    env.repo.write("app/a.yaml", configmap("a", &[("k", "2")]));
    env.repo.commit("two");
    env.repo.write("app/a.yaml", configmap("a", &[("k", "3")]));
    env.repo.commit("three");
    let served = tempfile::tempdir().unwrap();
    bare_clone(&env.repo, served.path());
    let daemon = common::GitDaemon::start(served.path());
    config(
        &env,
        &format!("git://127.0.0.1:{}/web.git", daemon.port),
        "",
    );
    assert_eq!(env.run(&["sync"]).status.code(), Some(0));
    let out = env.run(&["diff", "--revision", "HEAD~2"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("-  k: \"3\""), "{}", stdout(&out));
    assert!(stdout(&out).contains("+  k: \"1\""), "{}", stdout(&out));
}
