//! The etcd store and replicas on a real etcd server: transaction limits, racing writers,
//! watch resume across an etcd restart, fencing, an agent riding out an etcd outage, and
//! several agents sharing apps, one of them killed.
#![cfg(feature = "etcd")]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::etcd::EtcdServer;
use common::{GitRepo, configmap, wait_for};
use driftless::object::ObjectKey;
use driftless::store::etcd::{EtcdStore, Options, Replicas};
use driftless::store::{Error, Precondition, Selector, Store, WatchItem, Write};
use serde_json::{Value, json};

use common::objects::{cm, key, put};

async fn store(server: &EtcdServer, prefix: &str, max_txn_ops: usize) -> EtcdStore {
    EtcdStore::connect(Options {
        endpoints: vec![server.endpoint()],
        prefix: prefix.into(),
        max_txn_ops,
        request_timeout: Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap()
}

/// A running replica of `app` named `name`: its stop switch, the gate of `app`, whether it
/// coordinates yet, and its task. Its lease lasts 10 s: these tests stop replicas (which
/// revokes the lease) rather than wait for one to expire, and a replica sharing the test's one
/// thread with a 2 MB value's serialization on a loaded machine must not miss its keep-alives.
struct RunningReplica {
    stop: tokio::sync::watch::Sender<bool>,
    gate: driftless::reconcile::Gate,
    coordinated: tokio::sync::watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

fn start_replica(s: &EtcdStore, name: &str) -> RunningReplica {
    let (stop, rx) = tokio::sync::watch::channel(false);
    let r = Replicas::new(s, name, Duration::from_secs(10), vec!["app".into()]);
    RunningReplica {
        stop,
        gate: r.gate("app").unwrap(),
        coordinated: r.coordinated(),
        task: tokio::spawn(r.run(rx)),
    }
}

/// Waits up to 10 s for `gate` to open, returning the fence.
async fn opened(gate: &mut driftless::reconcile::Gate) -> driftless::store::Fence {
    tokio::time::timeout(Duration::from_secs(10), gate.wait_for(Option::is_some))
        .await
        .expect("the gate opens within 10 s")
        .unwrap()
        .clone()
        .unwrap()
}

async fn start_etcd(extra: &'static [&'static str]) -> EtcdServer {
    tokio::task::spawn_blocking(move || EtcdServer::start_with(extra))
        .await
        .unwrap()
}

/// The version cache the agent puts in front of etcd knows it is current from the change
/// feed's bookmarks (etcd's progress notifications): after out-of-band writes by another
/// client, and after writes outside the prefix that move etcd's revision without an event
/// here, it catches up, answers version asks alone, and agrees with a fresh listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_version_cache_catches_up_through_progress_bookmarks_and_answers_alone() {
    use driftless::store::cached::VersionCache;
    let server = start_etcd(&[]).await;
    let agent: Arc<dyn Store> = Arc::new(store(&server, "/cache", 128).await);
    let cache = VersionCache::wrap(agent.clone()).await.unwrap();
    let other = store(&server, "/cache", 128).await;
    let elsewhere = store(&server, "/elsewhere", 128).await;
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    let keys: Vec<ObjectKey> = names.iter().map(|n| key(n)).collect();
    let refs: Vec<&ObjectKey> = keys.iter().collect();
    for round in 0..3 {
        // Out of band: puts and a delete by another client under the same prefix, then a
        // write under another prefix (the store's revision moves; no event comes here).
        let writes = names[round..]
            .iter()
            .map(|n| {
                put(
                    cm(n, json!({"round": round.to_string()})),
                    Precondition::Any,
                )
            })
            .collect();
        other.commit(writes).await.unwrap();
        other
            .commit(vec![Write::Delete {
                key: key(&names[round]),
                precondition: Precondition::Any,
            }])
            .await
            .unwrap();
        // After the feed has settled on those.
        tokio::time::sleep(Duration::from_millis(100)).await;
        elsewhere
            .commit(vec![put(
                cm("x", json!({"round": round.to_string()})),
                Precondition::Any,
            )])
            .await
            .unwrap();
        let view = cache
            .view(Duration::from_secs(5))
            .await
            .unwrap()
            .expect("the feed catches up with the store's revision (a bookmark)");
        cache.versions(&refs).await.unwrap();
        let served = cache.served();
        let cached = cache.versions(&refs).await.unwrap();
        assert_eq!(cache.served(), served + 1, "answered from the cache alone");
        assert_eq!(
            cached,
            agent.versions(&refs).await.unwrap(),
            "round {round}"
        );
        let listing = other.list(&Selector::default()).await.unwrap();
        for k in &keys {
            let live = listing.objects.get(k).and_then(|o| o.resource_version());
            if let Some(known) = view.get(k) {
                assert_eq!(*known, live, "{k} in round {round}");
            }
        }
    }
}

#[tokio::test]
async fn a_commit_larger_than_the_servers_transaction_limit_goes_in_chunks() {
    let server = start_etcd(&["--max-txn-ops=8"]).await;
    let writes = || {
        (0..50)
            .map(|i| {
                put(
                    cm(&format!("c{i:02}"), json!({"i": i})),
                    Precondition::Absent,
                )
            })
            .collect::<Vec<_>>()
    };
    // Without chunking the server refuses the transaction, and nothing is written.
    let unchunked = store(&server, "/one", 128).await;
    let err = unchunked.commit(writes()).await.unwrap_err();
    assert!(matches!(err, Error::Backend { .. }), "{err}");
    assert!(
        unchunked
            .list(&Selector::default())
            .await
            .unwrap()
            .objects
            .is_empty()
    );
    // Within the limit: seven transactions, every object written with its own revision.
    let s = store(&server, "/two", 8).await;
    let base = s.revision().await.unwrap();
    let c = s.commit(writes()).await.unwrap();
    assert_eq!(c.stored.len(), 50);
    assert_eq!(c.revision, base + 7, "ceil(50 / 8) transactions");
    let listing = s.list(&Selector::default()).await.unwrap();
    assert_eq!(listing.objects.len(), 50);
    let revisions: std::collections::BTreeSet<u64> = listing
        .objects
        .values()
        .map(|o| o.resource_version().unwrap())
        .collect();
    assert_eq!(revisions.len(), 7);
    // And a read of many keys spans several read transactions at one revision.
    let keys: Vec<ObjectKey> = (0..50).map(|i| key(&format!("c{i:02}"))).collect();
    let many = s.get_many(&keys).await.unwrap();
    assert_eq!(many.objects.len(), 50);
    assert_eq!(many.revision, c.revision);
}

#[tokio::test]
async fn racing_writers_compare_and_swap_exactly_one_wins_and_generations_count_every_change() {
    let server = start_etcd(&[]).await;
    let s = Arc::new(store(&server, "/race", 128).await);
    let c = s
        .commit(vec![put(cm("a", json!({"v": "0"})), Precondition::Absent)])
        .await
        .unwrap();
    let rv = c.revision;
    let mut tasks = Vec::new();
    for i in 0..10 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.commit(vec![put(
                cm("a", json!({"v": format!("cas-{i}")})),
                Precondition::ResourceVersion(rv),
            )])
            .await
        }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::Conflict { .. }) => {}
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(won, 1, "exactly one compare-and-swap wins");
    assert_eq!(s.get(&key("a")).await.unwrap().unwrap().generation(), 2);
    // Unconditional writers all land; each one's read-modify-write counts its change.
    let mut tasks = Vec::new();
    for i in 0..10 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            s.commit(vec![put(
                cm("a", json!({"v": format!("any-{i}")})),
                Precondition::Any,
            )])
            .await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(
        s.get(&key("a")).await.unwrap().unwrap().generation(),
        12,
        "no change lost between the read and the write"
    );
}

/// The next item of a watch that is not a bookmark (the feed asks etcd for its progress after
/// events and every 500 ms, so bookmarks come between any two items), within `secs` seconds.
async fn next_change(
    w: &mut driftless::store::Watch,
    secs: u64,
) -> Option<driftless::store::Result<WatchItem>> {
    tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            match w.recv().await {
                Some(Ok(WatchItem::Bookmark { .. })) => continue,
                other => return other,
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("an item other than a bookmark within {secs} s"))
}

#[tokio::test]
async fn a_watch_resumes_from_the_last_revision_after_etcd_restarts() {
    let mut server = start_etcd(&[]).await;
    let s = store(&server, "/resume", 128).await;
    let base = s.revision().await.unwrap();
    let mut w = s.watch(base).await.unwrap();
    s.commit(vec![put(cm("a", json!({})), Precondition::Absent)])
        .await
        .unwrap();
    let Some(Ok(WatchItem::Event(first))) = next_change(&mut w, 5).await else {
        panic!("an event")
    };
    assert_eq!(first.key, key("a"));
    server = tokio::task::spawn_blocking(move || {
        server.kill();
        server
    })
    .await
    .unwrap();
    // The watch reports the failure instead of hanging.
    let failed = next_change(&mut w, 30).await;
    assert!(matches!(failed, Some(Err(_)) | None), "{failed:?}");
    // Writes fail while etcd is down, with the reason.
    let down = s
        .commit(vec![put(cm("b", json!({})), Precondition::Absent)])
        .await
        .unwrap_err();
    assert!(matches!(down, Error::Backend { .. }), "{down}");
    let server = tokio::task::spawn_blocking(move || {
        server.resume();
        server
    })
    .await
    .unwrap();
    // The same client works again once etcd is back.
    let mut written = None;
    for _ in 0..100 {
        match s
            .commit(vec![put(cm("b", json!({})), Precondition::Absent)])
            .await
        {
            Ok(c) => {
                written = Some(c.revision);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let written = written.expect("a write succeeds once etcd is back");
    let mut w = s.watch(first.revision).await.unwrap();
    let Some(Ok(WatchItem::Event(next))) = next_change(&mut w, 5).await else {
        panic!("an event")
    };
    assert_eq!(
        (next.key, next.revision),
        (key("b"), written),
        "resumes after the last revision seen, nothing replayed, nothing lost"
    );
    drop(server);
}

#[tokio::test]
async fn a_replica_that_lost_an_apps_lease_cannot_write_for_it() {
    let server = start_etcd(&[]).await;
    let s = store(&server, "/fence", 128).await;
    let mut r1 = start_replica(&s, "r1");
    let fence = opened(&mut r1.gate).await;
    let holders = driftless::store::etcd::holders(&s).await.unwrap();
    assert_eq!(holders["app"].replica, "r1");
    let fenced = s.fenced(r1.gate.clone());
    fenced
        .commit(vec![put(
            cm("a", json!({"by": "r1"})),
            Precondition::Absent,
        )])
        .await
        .unwrap();
    // r1 stops (its lease is revoked) and r2 takes the app.
    r1.stop.send(true).unwrap();
    r1.task.await.unwrap();
    assert!(
        fenced
            .commit(vec![put(cm("a", json!({"by": "r1"})), Precondition::Any)])
            .await
            .is_err(),
        "a closed gate refuses writes"
    );
    let mut r2 = start_replica(&s, "r2");
    opened(&mut r2.gate).await;
    // A paused r1 that never noticed still holds its old fence: etcd refuses its write.
    let (_keep, stale) = tokio::sync::watch::channel(Some(fence));
    let err = s
        .fenced(stale)
        .commit(vec![put(
            cm("a", json!({"by": "stale r1"})),
            Precondition::Any,
        )])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("store backend failed"), "{err}");
    assert_eq!(
        s.get(&key("a")).await.unwrap().unwrap().get("data"),
        Some(&json!({"by": "r1"}))
    );
    let fenced2 = s.fenced(r2.gate.clone());
    fenced2
        .commit(vec![put(cm("a", json!({"by": "r2"})), Precondition::Any)])
        .await
        .unwrap();
    // A fenced commit of many objects: the fence is one more compare per transaction, and etcd
    // counts compares against its 128-operation limit.
    let many: Vec<Write> = (0..300)
        .map(|i| put(cm(&format!("m{i:03}"), json!({})), Precondition::Absent))
        .collect();
    let c = fenced2.commit(many).await.unwrap();
    assert_eq!(c.stored.len(), 300);
    // A value larger than one etcd request (1.5 MiB) is stored in parts and read back whole:
    // an app's inventory of 10,000 objects is about 3 MB.
    let big = "é".repeat(1_000_000); // 2 MB of UTF-8, cut only at character boundaries
    let c = fenced2
        .commit(vec![
            put(cm("small", json!({})), Precondition::Absent),
            put(cm("huge", json!({"blob": big})), Precondition::Absent),
        ])
        .await
        .expect("a large value is stored");
    let huge = s.get(&key("huge")).await.unwrap().unwrap();
    assert!(
        huge.get("data") == Some(&json!({"blob": big})),
        "read back whole"
    );
    assert_eq!(huge.resource_version(), Some(c.revision));
    let listed = s.list(&Selector::default()).await.unwrap();
    assert!(listed.objects[&key("huge")].get("data") == huge.get("data"));
    let raw = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    let parts = || {
        let mut kv = raw.kv_client();
        async move {
            kv.get(
                "/fence/_parts/",
                Some(
                    etcd_client::GetOptions::new()
                        .with_prefix()
                        .with_count_only(),
                ),
            )
            .await
            .unwrap()
            .count()
        }
    };
    assert_eq!(parts().await, 2, "two parts of at most 1 MiB");
    // Replaced by a small value, its parts go.
    fenced2
        .commit(vec![put(
            cm("huge", json!({"blob": "small now"})),
            Precondition::ResourceVersion(c.revision),
        )])
        .await
        .unwrap();
    assert_eq!(parts().await, 0, "the replaced parts are removed");
}

/// A project on etcd: a repository with one folder per app, a config per replica.
struct Project {
    repo: GitRepo,
    dir: tempfile::TempDir,
    endpoint: String,
}

impl Project {
    fn new(endpoint: &str, apps: &[&str], interval: &str) -> Self {
        let repo = GitRepo::new();
        for app in apps {
            repo.write(
                &format!("{app}/cm.yaml"),
                configmap(&format!("{app}-cm"), &[("k", "1")]),
            );
        }
        repo.commit("first");
        let dir = tempfile::tempdir().unwrap();
        let mut config = format!(
            "store:\n  etcd:\n    endpoints: [\"{endpoint}\"]\n    prefix: /project\n    leaseTTL: 3s\ncacheDir: cache\nserver: {{listen: \"127.0.0.1:0\"}}\napps:\n"
        );
        for app in apps {
            config.push_str(&format!(
                "  - name: {app}\n    source: {{repo: {}, path: {app}, interval: {interval}}}\n",
                repo.url()
            ));
        }
        std::fs::write(dir.path().join("driftless.yaml"), config).unwrap();
        Project {
            repo,
            dir,
            endpoint: endpoint.into(),
        }
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_driftless"));
        c.arg("-c")
            .arg(self.dir.path().join("driftless.yaml"))
            .current_dir(self.dir.path());
        c
    }

    fn log_path(&self, replica: &str) -> PathBuf {
        self.dir.path().join(format!("{replica}.log"))
    }

    fn log(&self, replica: &str) -> String {
        std::fs::read_to_string(self.log_path(replica)).unwrap_or_default()
    }

    fn agent(&self, replica: &str) -> Running {
        self.agent_logging_to(replica, replica)
    }

    /// An agent named `replica` whose log is `<log>.log` (two agents may share a name).
    fn agent_logging_to(&self, replica: &str, log: &str) -> Running {
        let log = std::fs::File::create(self.log_path(log)).unwrap();
        Running(
            self.cmd()
                .arg("run")
                .env("DRIFTLESS_REPLICA", replica)
                .env("RUST_LOG", "info,driftless=debug")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("agent starts"),
        )
    }

    /// The `data.k` of a live ConfigMap, `None` when absent or unreadable.
    fn value(&self, name: &str) -> Option<String> {
        let out = self
            .cmd()
            .args(["store", "get", "configmap", name, "-o", "json"])
            .output()
            .unwrap();
        if !out.status.success() {
            return None;
        }
        let v: Value = serde_json::from_slice(&out.stdout).ok()?;
        v["data"]["k"].as_str().map(str::to_string)
    }

    fn resource_version(&self, name: &str) -> String {
        let out = self
            .cmd()
            .args(["store", "get", "configmap", name, "-o", "json"])
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["metadata"]["resourceVersion"].as_str().unwrap().into()
    }

    fn put(&self, name: &str, k: &str) {
        let f = self.dir.path().join("put.yaml");
        std::fs::write(&f, configmap(name, &[("k", k)])).unwrap();
        let out = self
            .cmd()
            .args(["store", "put", "-f", f.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
    }

    /// `driftless status -o json`: app name to the replica holding it.
    fn holders(&self) -> BTreeMap<String, Option<String>> {
        let out = self.cmd().args(["status", "-o", "json"]).output().unwrap();
        if !out.status.success() {
            return BTreeMap::new();
        }
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["apps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["name"].as_str().unwrap().to_string(),
                    a["replica"].as_str().map(str::to_string),
                )
            })
            .collect()
    }

    /// The HTTP address the agent `replica` logged.
    fn addr(&self, replica: &str) -> String {
        let mut found = None;
        wait_for("the agent's address", Duration::from_secs(20), || {
            found = self
                .log(replica)
                .split("addr=")
                .nth(1)
                .map(|s| s.split_whitespace().next().unwrap().to_string());
            found.is_some()
        });
        found.unwrap()
    }

    fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

fn http_get(addr: &str, path: &str) -> (u16, Value) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let code = raw[9..12].parse().unwrap();
    let body = raw.split("\r\n\r\n").nth(1).unwrap_or_default();
    (code, serde_json::from_str(body).unwrap_or(Value::Null))
}

/// A running agent process, killed when dropped, so a failing test leaves none behind.
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        kill(&mut self.0);
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_agent_rides_out_an_etcd_outage_and_catches_up_without_a_restart() {
    let mut server = EtcdServer::start();
    let p = Project::new(&server.endpoint(), &["web"], "1s");
    let mut agent = p.agent("only");
    wait_for("the first sync", Duration::from_secs(60), || {
        p.value("web-cm").as_deref() == Some("1")
    });
    let addr = p.addr("only");
    server.kill();
    // A new commit while etcd is down: the agent fetches it and cannot apply it.
    p.repo
        .write("web/cm.yaml", configmap("web-cm", &[("k", "2")]));
    p.repo.commit("second");
    let mut why = String::new();
    wait_for(
        "the API to say why the app cannot sync",
        Duration::from_secs(60),
        || {
            let (code, body) = http_get(&addr, "/api/v1/apps/web");
            why = format!("{code} {body}");
            code == 503
                && body["error"]
                    .as_str()
                    .unwrap_or("")
                    .contains(&format!("etcd at {}", p.endpoint()))
                && body["apps"][0]["name"] == "web"
        },
    );
    assert!(
        agent.try_wait().unwrap().is_none(),
        "the agent keeps running"
    );
    server.resume();
    wait_for(
        "the commit made during the outage to be applied",
        Duration::from_secs(60),
        || p.value("web-cm").as_deref() == Some("2"),
    );
    // The change feed is back too: drift is reverted.
    p.put("web-cm", "drift");
    wait_for("the drift to be reverted", Duration::from_secs(20), || {
        p.value("web-cm").as_deref() == Some("2")
    });
    assert!(agent.try_wait().unwrap().is_none(), "never restarted");
    let log = p.log("only");
    assert!(
        log.contains("Replica coordination through etcd failed"),
        "{log}"
    );
    kill(&mut agent);
    eprintln!("while etcd was down the API said: {why}");
}

#[test]
fn replicas_share_the_apps_revert_drift_once_and_take_over_from_a_killed_replica() {
    let server = EtcdServer::start();
    let apps = ["one", "two", "three"];
    let p = Project::new(&server.endpoint(), &apps, "1h");
    let mut agents: BTreeMap<&str, Running> = BTreeMap::new();
    agents.insert("r1", p.agent("r1"));
    wait_for("r1 to apply every app", Duration::from_secs(60), || {
        apps.iter()
            .all(|a| p.value(&format!("{a}-cm")).as_deref() == Some("1"))
    });
    agents.insert("r2", p.agent("r2"));
    agents.insert("r3", p.agent("r3"));
    // The apps spread: one each.
    let mut holders = BTreeMap::new();
    wait_for("one app per replica", Duration::from_secs(60), || {
        holders = p.holders();
        let mut held: Vec<_> = holders.values().flatten().cloned().collect();
        held.sort();
        held == ["r1", "r2", "r3"]
    });
    // A fourth agent reusing r1's name takes nothing and never reports ready, while r1 does.
    let mut twin = p.agent_logging_to("r1", "r1-twin");
    let twin_addr = p.addr("r1-twin");
    let r1_addr = p.addr("r1");
    wait_for("r1 ready", Duration::from_secs(30), || {
        http_get(&r1_addr, "/readyz").0 == 200
    });
    wait_for(
        "the twin to see the name taken",
        Duration::from_secs(30),
        || p.log("r1-twin").contains("replica names must be unique"),
    );
    assert_eq!(
        http_get(&twin_addr, "/readyz").0,
        503,
        "{}",
        p.log("r1-twin")
    );
    kill(&mut twin);
    // Drift on `one` is reverted once, by its holder alone.
    let holder_of_one = holders["one"].clone().unwrap();
    p.put("one-cm", "drift");
    wait_for("the drift to be reverted", Duration::from_secs(20), || {
        p.value("one-cm").as_deref() == Some("1")
    });
    let after = p.resource_version("one-cm");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(p.resource_version("one-cm"), after, "nobody fights over it");
    let reverts: Vec<(&str, usize)> = agents
        .keys()
        .map(|r| (*r, p.log(r).matches("Drift reverted").count()))
        .collect();
    let total: usize = reverts.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 1, "reverted exactly once: {reverts:?}");
    assert_eq!(
        reverts.iter().find(|(_, n)| *n == 1).unwrap().0,
        holder_of_one
    );
    // Kill the holder of `two` outright: another replica takes it within the lease TTL.
    let victim = holders["two"].clone().unwrap();
    let killed_at = Instant::now();
    kill(agents.get_mut(victim.as_str()).unwrap());
    let mut new_holder = None;
    wait_for(
        "another replica to take `two`",
        Duration::from_secs(30),
        || {
            new_holder = p.holders().get("two").cloned().flatten();
            new_holder.as_ref().is_some_and(|h| *h != victim)
        },
    );
    let takeover = killed_at.elapsed();
    eprintln!(
        "`two` taken over by {} {takeover:?} after {victim} was killed (lease TTL 3 s)",
        new_holder.as_deref().unwrap()
    );
    assert!(
        takeover < Duration::from_secs(3) + Duration::from_secs(3),
        "taken over within the TTL and one keep-alive pass: {takeover:?}"
    );
    // The new holder reverts drift on `two`.
    p.put("two-cm", "drift");
    wait_for(
        "the new holder to revert the drift",
        Duration::from_secs(30),
        || p.value("two-cm").as_deref() == Some("1"),
    );
    let new_holder = new_holder.unwrap();
    assert!(
        p.log(&new_holder).contains("Drift reverted"),
        "{}",
        p.log(&new_holder)
    );
    for (_, mut c) in agents {
        kill(&mut c);
    }
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with `openssl`.
fn certificates(dir: &std::path::Path) {
    let pki = common::pki::Pki::new(dir);
    pki.server("server");
    pki.client("client", "/CN=driftless-test");
}

#[tokio::test]
async fn the_store_reaches_etcd_over_tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    certificates(certs.path());
    let at = |f: &str| certs.path().join(f).to_string_lossy().into_owned();
    let flags: Vec<String> = vec![
        format!("--cert-file={}", at("server.pem")),
        format!("--key-file={}", at("server.key")),
        format!("--trusted-ca-file={}", at("ca.pem")),
        "--client-cert-auth".into(),
    ];
    let flags: &'static [&'static str] = Box::leak(
        flags
            .into_iter()
            .map(|f| &*Box::leak(f.into_boxed_str()))
            .collect::<Vec<&'static str>>()
            .into_boxed_slice(),
    );
    let server = start_etcd(flags).await;
    assert!(server.endpoint().starts_with("https://"));
    let dir = tempfile::tempdir().unwrap();
    let write_config = |tls: &str| {
        let path = dir.path().join("driftless.yaml");
        std::fs::write(
            &path,
            format!(
                "store:\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /tls\n    dialTimeout: 2s\n{tls}",
                server.endpoint()
            ),
        )
        .unwrap();
        driftless::config::load(&path).unwrap()
    };
    let full = write_config(&format!(
        "    tls: {{ca: {}, cert: {}, key: {{file: {}}}}}\n",
        at("ca.pem"),
        at("client.pem"),
        at("client.key")
    ));
    let s = driftless::cli::open_etcd(&full).await.unwrap();
    s.commit(vec![put(
        cm("a", json!({"over": "tls"})),
        Precondition::Absent,
    )])
    .await
    .unwrap();
    assert_eq!(
        s.get(&key("a")).await.unwrap().unwrap().get("data"),
        Some(&json!({"over": "tls"}))
    );
    // Without the client certificate the server refuses the connection.
    let no_client = write_config(&format!("    tls: {{ca: {}}}\n", at("ca.pem")));
    let refused = match driftless::cli::open_etcd(&no_client).await {
        Ok(s) => s.get(&key("a")).await.map(|_| ()),
        Err(e) => Err(driftless::store::Error::Backend {
            op: "open",
            source: e.to_string().into(),
        }),
    };
    assert!(
        refused.is_err(),
        "a client without a certificate is refused"
    );
    // A wrong file is named at start, before any connection: a key given as the CA, a
    // certificate given as the key, text that is not PEM.
    std::fs::write(certs.path().join("garbage.pem"), "not a certificate\n").unwrap();
    for (tls, field, file) in [
        (
            format!("    tls: {{ca: {}}}\n", at("client.key")),
            "store.etcd.tls.ca",
            "client.key",
        ),
        (
            format!("    tls: {{ca: {}}}\n", at("garbage.pem")),
            "store.etcd.tls.ca",
            "garbage.pem",
        ),
        (
            format!(
                "    tls: {{ca: {}, cert: {}, key: {{file: {}}}}}\n",
                at("ca.pem"),
                at("garbage.pem"),
                at("client.key")
            ),
            "store.etcd.tls.cert",
            "garbage.pem",
        ),
        (
            format!(
                "    tls: {{ca: {}, cert: {}, key: {{file: {}}}}}\n",
                at("ca.pem"),
                at("client.pem"),
                at("client.pem")
            ),
            "store.etcd.tls.key",
            "",
        ),
    ] {
        let err = match driftless::cli::open_etcd(&write_config(&tls)).await {
            Ok(_) => panic!("{field} {file}: opened"),
            Err(e) => format!("{e:#}"),
        };
        assert!(err.starts_with(&format!("{field}: ")), "{err}");
        assert!(err.contains(file), "{err}");
        assert!(
            !err.contains("PRIVATE KEY-----\n"),
            "no key material: {err}"
        );
    }
}

#[tokio::test]
async fn the_store_signs_in_with_an_etcd_user_and_password() {
    let server = start_etcd(&[]).await;
    {
        let admin = etcd_client::Client::connect([server.endpoint()], None)
            .await
            .unwrap();
        let mut auth = admin.auth_client();
        auth.user_add("root", "root-secret", None).await.unwrap();
        auth.user_grant_role("root", "root").await.unwrap();
        auth.auth_enable().await.unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), "root-secret\n").unwrap();
    let load = |user: &str| {
        let path = dir.path().join("driftless.yaml");
        std::fs::write(
            &path,
            format!(
                "store:\n  etcd:\n    endpoints: [\"{}\"]\n    prefix: /auth\n{user}",
                server.endpoint()
            ),
        )
        .unwrap();
        driftless::config::load(&path).unwrap()
    };
    let signed_in = load("    username: root\n    password: {file: password}\n");
    let s = driftless::cli::open_etcd(&signed_in).await.unwrap();
    s.commit(vec![put(cm("a", json!({})), Precondition::Absent)])
        .await
        .unwrap();
    assert!(s.get(&key("a")).await.unwrap().is_some());
    // Anonymous requests are refused once auth is on.
    let anonymous = driftless::cli::open_etcd(&load("")).await.unwrap();
    let err = anonymous.get(&key("a")).await.unwrap_err();
    assert!(
        driftless::reconcile::error_chain(&err).contains("user name is empty"),
        "{}",
        driftless::reconcile::error_chain(&err)
    );
}

#[tokio::test]
async fn a_second_replica_with_the_same_name_takes_nothing() {
    let server = start_etcd(&[]).await;
    let s = store(&server, "/dup", 128).await;
    let mut first = start_replica(&s, "same");
    opened(&mut first.gate).await;
    let mut second = start_replica(&s, "same");
    // After its retries (1 s, then 2 s later) the second still holds nothing.
    let opened = tokio::time::timeout(
        Duration::from_secs(4),
        second.gate.wait_for(Option::is_some),
    )
    .await;
    assert!(
        opened.is_err(),
        "two replicas named alike both took the app"
    );
    assert!(first.gate.borrow().is_some(), "the first keeps it");
    // The first knows who holds what; the second never could, so its agent is not ready.
    assert!(*first.coordinated.borrow());
    assert!(!*second.coordinated.borrow());
}

#[test]
fn an_agent_started_while_etcd_is_down_answers_health_checks_and_joins_when_it_comes() {
    let mut server = EtcdServer::start();
    let p = Project::new(&server.endpoint(), &["web"], "1h");
    server.kill();
    let mut agent = p.agent("early");
    let addr = p.addr("early");
    let health = |path: &str| http_get(&addr, path).0;
    assert_eq!(
        health("/healthz"),
        200,
        "alive: a liveness probe must not kill it"
    );
    assert_eq!(health("/readyz"), 503, "not ready before the store answers");
    // The API answers in its own shape meanwhile: JSON with the reason.
    let (code, body) = http_get(&addr, "/api/v1/apps");
    assert_eq!(code, 503);
    assert_eq!(
        body["error"], "waiting for the store (see the log)",
        "{body}"
    );
    assert_eq!(body["apps"], serde_json::json!([]));
    server.resume();
    wait_for(
        "the first sync once etcd is up",
        Duration::from_secs(60),
        || p.value("web-cm").as_deref() == Some("1"),
    );
    wait_for("ready", Duration::from_secs(30), || {
        health("/readyz") == 200
    });
    assert!(agent.try_wait().unwrap().is_none());
    kill(&mut agent);
}

#[test]
fn until_a_new_revision_is_applied_whole_drift_is_reverted_to_the_one_applied() {
    // A server that takes requests of at most 64 KiB: a sync of small objects goes in, one
    // with a 200 KB object is refused whole.
    let server = EtcdServer::start_with(&["--max-request-bytes=65536"]);
    let p = Project::new(&server.endpoint(), &["web"], "1s");
    let mut agent = p.agent("only");
    wait_for("the first sync", Duration::from_secs(60), || {
        p.value("web-cm").as_deref() == Some("1")
    });
    // A new commit whose sync fails before it writes anything: it changes web-cm and adds an
    // object larger than the server takes in one request.
    p.repo
        .write("web/cm.yaml", configmap("web-cm", &[("k", "2")]))
        .write(
            "web/huge.yaml",
            configmap("huge", &[("k", &"x".repeat(200_000))]),
        );
    p.repo.commit("second, too large to apply");
    wait_for(
        "the sync of the new commit to fail",
        Duration::from_secs(60),
        || p.log("only").contains("Sync failed"),
    );
    // Drift now: web-cm is deleted behind Git's back. It comes back as the revision applied
    // whole has it, not as the commit that could not be applied.
    let out = p
        .cmd()
        .args(["store", "delete", "configmap", "web-cm"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
    wait_for("web-cm to be recreated", Duration::from_secs(30), || {
        p.value("web-cm").is_some()
    });
    assert_eq!(p.value("web-cm").as_deref(), Some("1"), "{}", p.log("only"));
    assert!(p.value("huge").is_none());
    kill(&mut agent);
}

#[tokio::test]
async fn a_record_another_writer_damaged_can_be_deleted_by_its_version() {
    let server = start_etcd(&[]).await;
    let s = store(&server, "/damaged", 128).await;
    s.commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Any)])
        .await
        .unwrap();
    // Another writer puts a value that is not an object under the key.
    let mut raw = etcd_client::Client::connect([server.endpoint()], None)
        .await
        .unwrap();
    raw.put("/damaged//ConfigMap/default/a", "not json {{{", None)
        .await
        .unwrap();
    assert!(s.get(&key("a")).await.is_err(), "reading it fails");
    // Its version is readable, and a delete compared against it removes it.
    let rv = s.version_of(&key("a")).await.unwrap().expect("present");
    s.commit(vec![driftless::store::Write::Delete {
        key: key("a"),
        precondition: driftless::store::Precondition::ResourceVersion(rv),
    }])
    .await
    .unwrap();
    assert_eq!(s.version_of(&key("a")).await.unwrap(), None);
}
