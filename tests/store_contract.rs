//! The store contract of ARCHITECTURE.md section 4, run against every backend: memory, SQLite,
//! with the `etcd` feature a real etcd server (the one `.ci/run` starts, named by
//! `DRIFTLESS_TEST_ETCD`, else one started for each test), and with the `kubernetes` feature a
//! real `kube-apiserver` (one control plane runs every check in turn). Revisions are checked
//! relative to the store's revision when the test began, since etcd's revision counts the whole
//! cluster; where a backend promises less ([`Store::promises`]: no transactions, no one global
//! revision), a check asserts what it does promise (monotonic resourceVersions, per-object
//! preconditions) and says which part does not apply.

mod common;

use std::sync::Arc;
use std::time::Duration;

use driftless::object::{Object, ObjectKey, RESERVED_GROUP};
use driftless::store::{
    self, Error, Precondition, Selector, Store, WatchItem, Write, memory::MemoryStore,
    sqlite::SqliteStore,
};
use serde_json::json;

use common::objects::{key, put};

/// A ConfigMap `default/<name>` with `data`, labelled as an app's (a Kubernetes store watches
/// only objects with the label).
fn cm(name: &str, data: serde_json::Value) -> Object {
    let mut o = common::objects::cm(name, data);
    o.metadata_mut()
        .insert("labels".into(), json!({store::APP_LABEL: "contract"}));
    o
}

/// The next event or relist of a watch (bookmarks, which some backends send, skipped).
async fn next_event(w: &mut store::Watch) -> WatchItem {
    loop {
        let item = tokio::time::timeout(Duration::from_secs(5), w.recv())
            .await
            .expect("a watch item within 5 s")
            .expect("the watch is open")
            .expect("no backend error");
        if !matches!(item, WatchItem::Bookmark { .. }) {
            return item;
        }
    }
}

/// One backend under test.
struct Backend {
    store: Arc<dyn Store>,
    /// The store revision when the test began.
    base: u64,
    /// Whether revisions move only by this test's writes, one per commit (false for a
    /// Kubernetes API server, whose own writes move etcd's revision too).
    exact: bool,
    #[cfg(feature = "etcd")]
    etcd: Option<(store::etcd::EtcdStore, EtcdGuard)>,
}

impl Backend {
    /// The revision `n` commits after the test began.
    fn at(&self, n: u64) -> u64 {
        self.base + n
    }

    /// Asserts that `revision` is the one `n` commits after the test began where the backend
    /// counts revisions exactly, else that it is past `after` (revisions only grow).
    fn assert_revision(&self, revision: u64, n: u64, after: u64) {
        if self.exact {
            assert_eq!(revision, self.at(n), "{}", self.store.backend());
        } else {
            assert!(
                revision > after,
                "{}: revision {revision} is past {after}",
                self.store.backend()
            );
        }
    }

    /// Drops the change history up to `revision` where the backend does not do it by itself
    /// (etcd's compaction is an explicit request; memory and SQLite keep 4 revisions here).
    async fn compact(&self, _revision: u64) {
        #[cfg(feature = "etcd")]
        if let Some((e, _)) = &self.etcd {
            e.compact(_revision).await.unwrap();
        }
    }
}

/// Keeps the etcd server of a test: a private one, or the shared one (one test at a time, so
/// revisions move only by the test's own writes).
#[cfg(feature = "etcd")]
enum EtcdGuard {
    Own(#[allow(dead_code)] common::etcd::EtcdServer),
    Shared(#[allow(dead_code)] tokio::sync::MutexGuard<'static, ()>),
}

#[cfg(feature = "etcd")]
static SHARED_ETCD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[cfg(feature = "etcd")]
async fn etcd_backend() -> Backend {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let (endpoint, guard) = match common::etcd::shared_endpoint() {
        Some(e) => (e, EtcdGuard::Shared(SHARED_ETCD.lock().await)),
        None => {
            let server = tokio::task::spawn_blocking(common::etcd::EtcdServer::start)
                .await
                .unwrap();
            (server.endpoint(), EtcdGuard::Own(server))
        }
    };
    let prefix = format!(
        "/contract-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let e = store::etcd::EtcdStore::connect(store::etcd::Options {
        endpoints: vec![endpoint],
        prefix,
        ..Default::default()
    })
    .await
    .unwrap();
    let base = e.revision().await.unwrap();
    Backend {
        store: Arc::new(e.clone()),
        base,
        exact: true,
        etcd: Some((e, guard)),
    }
}

/// Every backend under test, fresh, with a small change-log retention so compaction shows.
async fn backends(dir: &tempfile::TempDir) -> Vec<Backend> {
    let sqlite = SqliteStore::open(
        &dir.path().join("store.db"),
        store::sqlite::Options {
            retain_revisions: 4,
            ..Default::default()
        },
    )
    .unwrap();
    let plain = |store: Arc<dyn Store>| Backend {
        store,
        base: 0,
        exact: true,
        #[cfg(feature = "etcd")]
        etcd: None,
    };
    #[allow(unused_mut)]
    let mut out = vec![
        plain(Arc::new(MemoryStore::with_retention(4))),
        plain(Arc::new(sqlite)),
    ];
    #[cfg(feature = "etcd")]
    out.push(etcd_backend().await);
    out
}

/// Runs `check` on every backend of [`backends`].
macro_rules! on_every_backend {
    ($check:ident) => {{
        let dir = tempfile::tempdir().unwrap();
        for b in backends(&dir).await {
            $check(&b).await;
        }
    }};
}

#[tokio::test]
async fn revisions_grow_and_each_write_carries_its_resource_version() {
    on_every_backend!(check_revisions);
}

async fn check_revisions(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let start = s.revision().await.unwrap();
    b.assert_revision(start, 0, 0);
    let c1 = s
        .commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
        .await
        .unwrap();
    b.assert_revision(c1.revision, 1, start);
    let a = s.get(&key("a")).await.unwrap().unwrap();
    assert_eq!(a.resource_version(), Some(c1.revision), "{name}");
    assert!(a.metadata().get("creationTimestamp").is_some(), "{name}");
    if s.promises().global_revision {
        // Kubernetes keeps metadata.generation only for kinds with a spec, not ConfigMaps.
        assert_eq!(a.generation(), 1, "{name}");
    }
    let c2 = s
        .commit(vec![
            put(cm("b", json!({})), Precondition::Absent),
            put(cm("c", json!({})), Precondition::Absent),
        ])
        .await
        .unwrap();
    b.assert_revision(c2.revision, 2, c1.revision);
    assert_eq!(c2.stored.len(), 2, "{name}");
    if s.promises().transactions {
        // Two objects in one transaction share its revision.
        assert!(
            c2.stored
                .iter()
                .all(|o| o.resource_version() == Some(b.at(2))),
            "{name}: the stored objects carry the transaction's revision"
        );
    } else {
        // Per object: each its own, the commit's the highest.
        let rvs: Vec<u64> = c2
            .stored
            .iter()
            .filter_map(|o| o.resource_version())
            .collect();
        assert!(rvs[0] < rvs[1] && rvs[1] == c2.revision, "{name}: {rvs:?}");
    }
    assert_eq!(
        s.get(&key("c")).await.unwrap().unwrap().resource_version(),
        c2.stored[1].resource_version(),
        "{name}"
    );
    if s.promises().global_revision {
        // What the commit gives back is what a read gives (the store's metadata and all),
        // however the backend kept it (a copy, or the object given and the metadata apart).
        for st in &c2.stored {
            let read = s.get(&st.key()).await.unwrap().unwrap();
            assert_eq!(*st.object(), read, "{name}");
            assert_eq!(st.clone().into_object(), read, "{name}");
            assert_eq!(st.unstamped().get("data"), read.get("data"), "{name}");
        }
    }
    let now = s.revision().await.unwrap();
    if b.exact {
        assert_eq!(now, b.at(2), "{name}");
    } else {
        assert!(now >= c2.revision, "{name}");
    }
}

#[tokio::test]
async fn generation_counts_spec_changes_only() {
    on_every_backend!(check_generation);
}

/// Applies where the backend keeps `metadata.generation` for every object (not Kubernetes,
/// which keeps it for kinds with a spec: its Deployments are checked in tests/kubernetes.rs).
async fn check_generation(b: &Backend) {
    let s = &b.store;
    if !s.promises().global_revision {
        return;
    }
    s.commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
        .await
        .unwrap();
    let mut a = s.get(&key("a")).await.unwrap().unwrap();
    a.metadata_mut().insert("labels".into(), json!({"x": "y"}));
    a.as_map_mut()
        .insert("status".into(), json!({"seen": true}));
    s.commit(vec![put(a, Precondition::ResourceVersion(b.at(1)))])
        .await
        .unwrap();
    let a = s.get(&key("a")).await.unwrap().unwrap();
    assert_eq!(
        (a.generation(), a.resource_version()),
        (1, Some(b.at(2))),
        "{}",
        s.backend()
    );
    let mut changed = a.clone();
    changed
        .as_map_mut()
        .insert("data".into(), json!({"k": "2"}));
    s.commit(vec![put(changed, Precondition::ResourceVersion(b.at(2)))])
        .await
        .unwrap();
    assert_eq!(s.get(&key("a")).await.unwrap().unwrap().generation(), 2);
}

#[tokio::test]
async fn compare_and_swap_conflicts_write_nothing() {
    on_every_backend!(check_compare_and_swap);
}

async fn check_compare_and_swap(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let c1 = s
        .commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
        .await
        .unwrap();
    let stale = c1.revision - 1;
    // Stale resourceVersion: refused, and the object keeps its value.
    let err = s
        .commit(vec![
            put(cm("b", json!({})), Precondition::Absent),
            put(
                cm("a", json!({"k": "2"})),
                Precondition::ResourceVersion(stale),
            ),
        ])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{name}: {err}");
    assert_eq!(
        s.get(&key("a")).await.unwrap().unwrap().get("data"),
        Some(&json!({"k": "1"})),
        "{name}"
    );
    if s.promises().transactions {
        assert!(
            s.get(&key("b")).await.unwrap().is_none(),
            "{name}: all or nothing"
        );
        assert_eq!(s.revision().await.unwrap(), b.at(1), "{name}");
    }
    if !s.promises().server_side_apply {
        // Create over an existing object. (An apply cannot require absence: on Kubernetes
        // `Absent` refuses only fields another manager owns, checked in tests/kubernetes.rs.)
        assert!(matches!(
            s.commit(vec![put(cm("a", json!({})), Precondition::Absent)])
                .await,
            Err(Error::Conflict { .. })
        ));
        assert_eq!(
            s.get(&key("a")).await.unwrap().unwrap().get("data"),
            Some(&json!({"k": "1"})),
            "{name}: a refused create changes nothing"
        );
    }
    // Delete with a stale resourceVersion.
    assert!(
        matches!(
            s.commit(vec![Write::Delete {
                key: key("a"),
                precondition: Precondition::ResourceVersion(stale)
            }])
            .await,
            Err(Error::Conflict { .. })
        ),
        "{name}"
    );
    // The right one works.
    let deleted = s
        .commit(vec![Write::Delete {
            key: key("a"),
            precondition: Precondition::ResourceVersion(c1.revision),
        }])
        .await
        .unwrap();
    assert!(s.get(&key("a")).await.unwrap().is_none(), "{name}");
    // Deleting what is gone, unconditionally, is no write at all.
    let c = s
        .commit(vec![Write::Delete {
            key: key("a"),
            precondition: Precondition::Any,
        }])
        .await
        .unwrap();
    assert_eq!(c.revision, 0, "{name}");
    if b.exact {
        assert_eq!(s.revision().await.unwrap(), b.at(2), "{name}");
    } else {
        assert!(
            deleted.revision > c1.revision,
            "{name}: deleted at {}, written at {}",
            deleted.revision,
            c1.revision
        );
    }
}

#[tokio::test]
async fn a_large_mixed_commit_stores_each_write_as_given_or_none_of_them() {
    on_every_backend!(check_large_commit);
}

/// A commit of many creates (SQLite makes their texts on a second thread) mixed with an
/// update and a delete: each object reads back as its own; one create over an existing object
/// refuses the commit, all of it where the store commits it atomically.
async fn check_large_commit(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let first = s
        .commit(vec![
            put(cm("big-old", json!({"v": "1"})), Precondition::Absent),
            put(cm("big-gone", json!({})), Precondition::Absent),
        ])
        .await
        .unwrap();
    let mut writes: Vec<Write> = (0..300)
        .map(|i| {
            put(
                cm(&format!("big-{i:03}"), json!({"i": i.to_string()})),
                Precondition::Absent,
            )
        })
        .collect();
    writes.insert(
        150,
        put(
            cm("big-old", json!({"v": "2"})),
            Precondition::ResourceVersion(first.revision),
        ),
    );
    writes.push(Write::Delete {
        key: key("big-gone"),
        precondition: Precondition::Any,
    });
    let c = s.commit(writes).await.unwrap();
    assert_eq!(c.stored.len(), 301, "{name}");
    let keys: Vec<ObjectKey> = (0..300)
        .map(|i| key(&format!("big-{i:03}")))
        .chain([key("big-old"), key("big-gone")])
        .collect();
    let read = s.get_many(&keys).await.unwrap().objects;
    assert_eq!(
        read.len(),
        301,
        "{name}: the 300, the updated one, not the deleted one"
    );
    for (k, o) in &read {
        let want = match k.name() {
            "big-old" => json!({"v": "2"}),
            n => json!({"i": n["big-".len()..].parse::<usize>().unwrap().to_string()}),
        };
        assert_eq!(o.get("data"), Some(&want), "{name}: {k}");
    }
    if s.promises().transactions && !s.promises().server_side_apply {
        let writes: Vec<Write> = (0..300)
            .map(|i| put(cm(&format!("big2-{i:03}"), json!({})), Precondition::Absent))
            .chain([put(cm("big-007", json!({})), Precondition::Absent)])
            .collect();
        // etcd commits past its transaction limits in several transactions.
        let atomic = s.commits_atomically(&writes);
        let err = s.commit(writes).await.unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{name}: {err}");
        if atomic {
            assert!(
                s.get(&key("big2-000")).await.unwrap().is_none(),
                "{name}: all or nothing"
            );
        }
        assert_eq!(
            s.get(&key("big-007")).await.unwrap().unwrap().get("data"),
            Some(&json!({"i": "7"})),
            "{name}"
        );
    }
}

#[tokio::test]
async fn a_commit_writing_a_key_twice_is_refused_whole() {
    on_every_backend!(check_twice);
}

/// Two writes of one key in a commit are a conflict, refused before anything of the commit is
/// stored: in a small commit, and in one of 300 (SQLite finds it on its serializing thread,
/// after the inserts before it), the second write first or last.
async fn check_twice(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let before = s.revision().await.unwrap();
    for (n, at) in [(2, 1), (300, 299), (300, 1)] {
        let mut writes: Vec<Write> = (0..n)
            .map(|i| {
                put(
                    cm(&format!("twice-{n}-{i:03}"), json!({})),
                    Precondition::Any,
                )
            })
            .collect();
        writes[at] = put(
            cm(&format!("twice-{n}-000"), json!({"again": "1"})),
            Precondition::Any,
        );
        let err = s.commit(writes).await.unwrap_err();
        assert!(
            matches!(&err, Error::Conflict { key, .. } if key.name() == format!("twice-{n}-000")),
            "{name}: {err}"
        );
        assert!(
            s.get(&key(&format!("twice-{n}-000")))
                .await
                .unwrap()
                .is_none(),
            "{name}: nothing of it stored"
        );
    }
    assert_eq!(s.revision().await.unwrap(), before, "{name}");
}

#[tokio::test]
async fn reading_many_keys_at_once_gives_exactly_those_present() {
    on_every_backend!(check_get_many);
}

async fn check_get_many(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    // Enough of one kind in one namespace for a backend to read them as a range.
    let writes = (0..100)
        .map(|i| {
            put(
                cm(&format!("bulk-{i:03}"), json!({"i": i.to_string()})),
                Precondition::Any,
            )
        })
        .collect();
    s.commit(writes).await.unwrap();
    let key = |i: usize| ObjectKey::new("", "ConfigMap", "default", format!("bulk-{i:03}"));
    // Every other one of them, and 20 that are not there.
    let asked: Vec<ObjectKey> = (0..120).step_by(2).map(key).collect();
    let many = s.get_many(&asked).await.unwrap();
    let found: Vec<&ObjectKey> = many.objects.keys().collect();
    let want: Vec<ObjectKey> = (0..100).step_by(2).map(key).collect();
    assert_eq!(found, want.iter().collect::<Vec<_>>(), "{name}");
    for (k, o) in &many.objects {
        let i: usize = k.name()["bulk-".len()..].parse().unwrap();
        assert_eq!(o.get("data").unwrap()["i"], json!(i.to_string()), "{name}");
        assert_eq!(&o.key(), k, "{name}");
    }
    // Asked out of order (in one run of the group, then between keys of another namespace),
    // one key twice: the same.
    let mut shuffled: Vec<ObjectKey> = asked.iter().rev().cloned().collect();
    for (n, k) in asked.iter().rev().enumerate() {
        shuffled.push(k.clone());
        if n % 3 == 0 {
            shuffled.push(ObjectKey::new("", "ConfigMap", "elsewhere", k.name()));
        }
    }
    shuffled.push(key(4));
    let again = s.get_many(&shuffled).await.unwrap();
    assert_eq!(again.objects, many.objects, "{name}");
}

#[tokio::test]
async fn listing_selects_by_group_kind_and_namespace_and_hides_reserved_records() {
    on_every_backend!(check_listing);
}

async fn check_listing(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let dep = Object::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod",
                "labels": {store::APP_LABEL: "contract"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}}))
    .unwrap();
    let rec = Object::reserved("Inventory", "app", Default::default());
    let c = s
        .commit(vec![
            put(cm("a", json!({})), Precondition::Any),
            put(dep, Precondition::Any),
            put(rec, Precondition::Any),
        ])
        .await
        .unwrap();
    // Of this test's objects: the listing of a live cluster holds the server's own too.
    let ours = |l: &store::Listing| -> Vec<String> {
        l.objects
            .keys()
            .filter(|k| ["a", "web"].contains(&k.name()))
            .map(|k| format!("{}/{}", k.kind(), k.name()))
            .collect()
    };
    let all = s.list(&Selector::default()).await.unwrap();
    assert_eq!(ours(&all), ["ConfigMap/a", "Deployment/web"], "{name}");
    assert!(all.objects.keys().all(|k| !k.is_reserved()), "{name}");
    if b.exact {
        assert_eq!(all.revision, b.at(1), "{name}");
    } else {
        assert!(all.revision >= c.revision, "{name}");
    }
    let apps = s
        .list(&Selector {
            group: Some("apps".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ours(&apps), ["Deployment/web"], "{name}");
    let ns = s
        .list(&Selector {
            namespace: Some("default".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(ours(&ns), ["ConfigMap/a"], "{name}");
    assert!(
        ns.objects.keys().all(|k| k.namespace() == "default"),
        "{name}"
    );
    let reserved = s
        .list(&Selector {
            group: Some(RESERVED_GROUP.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(reserved.objects.len(), 1, "{name}");
    let many = s.get_many(&[key("a"), key("missing")]).await.unwrap();
    assert_eq!(many.objects.len(), 1);
    let a_rv = c.stored[0].resource_version();
    assert_eq!(s.version_of(&key("a")).await.unwrap(), a_rv, "{name}");
    if b.exact {
        assert_eq!(a_rv, Some(b.at(1)), "{name}");
    }
    assert_eq!(s.version_of(&key("missing")).await.unwrap(), None);
    // A record's version without reading it is the one a read gives.
    let rec_key = Object::reserved("Inventory", "app", Default::default()).key();
    let rec_rv = s.get(&rec_key).await.unwrap().unwrap().resource_version();
    assert_eq!(s.version_of(&rec_key).await.unwrap(), rec_rv, "{name}");
    // What `versions` tells without reading never contradicts a read: the object's own
    // version, its absence, or "unknown" (only where a backend says it may not know: the
    // watch cache of an API server, which knows the app's labelled objects once its watch
    // has listed them).
    let asked = [key("a"), key("missing"), c.stored[1].key()];
    let refs: Vec<&driftless::object::ObjectKey> = asked.iter().collect();
    // (An API server's watch cache is kept by the change feed, as in the agent.)
    let _feed = s.watch(s.revision().await.unwrap()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let told = s.versions(&refs).await.unwrap();
        assert_eq!(told.len(), asked.len(), "{name}");
        for (k, v) in asked.iter().zip(&told) {
            let read = s.get(k).await.unwrap().and_then(|o| o.resource_version());
            match v {
                store::Version::Unknown => assert!(!b.exact, "{name}: {k} unknown"),
                store::Version::Absent => assert_eq!(read, None, "{name}: {k}"),
                store::Version::At(rv) => assert_eq!(read, Some(*rv), "{name}: {k}"),
            }
        }
        if told[0] == store::Version::At(a_rv.unwrap()) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name}: the version of a labelled object is never told"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn watch_replays_history_in_order_then_follows_new_writes() {
    on_every_backend!(check_watch);
}

async fn check_watch(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    let c1 = s
        .commit(vec![put(cm("a", json!({})), Precondition::Absent)])
        .await
        .unwrap();
    let c2 = s
        .commit(vec![put(cm("b", json!({})), Precondition::Absent)])
        .await
        .unwrap();
    b.assert_revision(c2.revision, 2, c1.revision);
    let mut w = s.watch(c1.revision).await.unwrap();
    let WatchItem::Event(e) = next_event(&mut w).await else {
        panic!("event")
    };
    assert_eq!(
        (e.revision, e.key.name(), e.deleted),
        (c2.revision, "b", false),
        "{name}"
    );
    let c3 = s
        .commit(vec![Write::Delete {
            key: key("a"),
            precondition: Precondition::Any,
        }])
        .await
        .unwrap();
    b.assert_revision(c3.revision, 3, c2.revision);
    let WatchItem::Event(e) = next_event(&mut w).await else {
        panic!("event")
    };
    assert_eq!(
        (e.revision, e.key.name(), e.deleted),
        (c3.revision, "a", true),
        "{name}"
    );
}

#[tokio::test]
async fn watch_from_compacted_history_asks_for_a_relist() {
    on_every_backend!(check_compaction);
}

/// Applies where the backend's change feed is its own history (not Kubernetes, whose API
/// server answers watches from its watch cache: the relist after `410 Gone` when the agent's
/// watch resumes after the API server restarts is tested in tests/kubernetes.rs).
async fn check_compaction(b: &Backend) {
    let s = &b.store;
    if !s.promises().ordered_feed {
        return;
    }
    for i in 0..70 {
        s.commit(vec![put(cm("a", json!({"i": i})), Precondition::Any)])
            .await
            .unwrap();
    }
    b.compact(b.at(60)).await;
    let mut w = s.watch(b.at(0)).await.unwrap();
    let first = next_event(&mut w).await;
    assert_eq!(
        first,
        WatchItem::Relist { revision: b.at(70) },
        "{}",
        s.backend()
    );
    s.commit(vec![put(cm("z", json!({})), Precondition::Any)])
        .await
        .unwrap();
    let WatchItem::Event(e) = next_event(&mut w).await else {
        panic!("event")
    };
    assert_eq!(e.revision, b.at(71), "{}", s.backend());
}

/// A record of any size is read back whole, and one whose parts are not all there is
/// unreadable, never shorter (on Kubernetes: compressed, then sharded over several ConfigMaps
/// behind a pointer written last).
async fn check_large_records(b: &Backend) {
    let s = &b.store;
    let name = s.backend();
    // 3 MB of hex: gzip halves it, so on Kubernetes it takes 3 shards of 512 KiB.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: String = (0..3_000_000 / 16)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            format!("{seed:016x}")
        })
        .collect();
    let spec = serde_json::Map::new();
    for (n, size) in [("small", 10), ("medium", 300_000), ("large", noise.len())] {
        let mut body = spec.clone();
        body.insert("noise".into(), json!(&noise[..size]));
        let rec = Object::reserved("Inventory", n, body);
        let result = s.commit(vec![put(rec.clone(), Precondition::Absent)]).await;
        let c = result.unwrap_or_else(|e| panic!("{name}: {n} record: {}", store::error_chain(&e)));
        let back = s
            .get(&c.stored[0].key())
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: {n} record read back"));
        assert_eq!(
            back.get("noise").and_then(|v| v.as_str()).map(str::len),
            Some(size),
            "{name}: {n}"
        );
        assert_eq!(back.resource_version(), Some(c.revision), "{name}");
        // Its stored text, for the callers that decode records into their own types.
        let (text, text_rv) = s.get_json(&back.key()).await.unwrap().unwrap();
        let from_text: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(from_text.get("noise"), back.get("noise"), "{name}: {n}");
        assert_eq!(text_rv, c.revision, "{name}: {n}");
    }
    // Replaced by a smaller one, under its precondition (a stale one is refused), keeping
    // when it was created, and listed once.
    let key = Object::reserved("Inventory", "large", Default::default()).key();
    let first = s.get(&key).await.unwrap().unwrap();
    let rv = s.version_of(&key).await.unwrap().unwrap();
    assert!(
        s.commit(vec![put(
            Object::reserved("Inventory", "large", Default::default()),
            Precondition::ResourceVersion(rv - 1),
        )])
        .await
        .is_err(),
        "{name}: a stale precondition on a record"
    );
    s.commit(vec![put(
        Object::reserved("Inventory", "large", Default::default()),
        Precondition::ResourceVersion(rv),
    )])
    .await
    .unwrap();
    let second = s.get(&key).await.unwrap().unwrap();
    assert_eq!(
        second.metadata().get("creationTimestamp"),
        first.metadata().get("creationTimestamp"),
        "{name}"
    );
    assert!(second.resource_version() > Some(rv), "{name}");
    assert_eq!(
        s.get_json(&Object::reserved("Inventory", "none", Default::default()).key())
            .await
            .unwrap(),
        None,
        "{name}"
    );
    // A record given as text (what the sync and the status writer hand over) is stored as the
    // same record given as an object: created, replaced under its precondition (a stale one
    // refused), keeping when it was created.
    let fields = json!({"spec": {"noise": &noise[..300_000], "n": 1}});
    let text = |n: u64| {
        let mut f = fields.clone();
        f["spec"]["n"] = json!(n);
        store::RecordText::new("Status", "text", "spec", &f["spec"]).unwrap()
    };
    let created = s
        .commit(vec![store::Write::PutRecord {
            record: text(1),
            precondition: Precondition::Absent,
        }])
        .await
        .unwrap_or_else(|e| panic!("{name}: a record as text: {}", store::error_chain(&e)));
    let key = text(1).key();
    // A field the head holds would override the store's metadata: refused.
    for field in ["apiVersion", "kind", "metadata"] {
        assert!(store::RecordText::new("Status", "text", field, &json!({})).is_err());
    }
    assert_eq!(created.stored[0].key(), key, "{name}");
    assert_eq!(
        created.stored[0].resource_version(),
        s.version_of(&key).await.unwrap(),
        "{name}"
    );
    let first = s.get(&key).await.unwrap().unwrap();
    assert_eq!(first.get("spec"), fields.get("spec"), "{name}");
    assert_eq!(first.api_version(), "driftless.io/v1", "{name}");
    let rv = first.resource_version().unwrap();
    assert!(
        s.commit(vec![store::Write::PutRecord {
            record: text(2),
            precondition: Precondition::ResourceVersion(rv - 1),
        }])
        .await
        .is_err(),
        "{name}: a stale precondition on a record as text"
    );
    assert!(
        s.commit(vec![store::Write::PutRecord {
            record: text(2),
            precondition: Precondition::Absent,
        }])
        .await
        .is_err(),
        "{name}: a record as text that exists, written as absent"
    );
    let replaced = s
        .commit(vec![store::Write::PutRecord {
            record: text(3),
            precondition: Precondition::ResourceVersion(rv),
        }])
        .await
        .unwrap();
    let second = s.get(&key).await.unwrap().unwrap();
    assert_eq!(second.get("spec").unwrap()["n"], json!(3), "{name}");
    assert_eq!(
        second.metadata().get("creationTimestamp"),
        first.metadata().get("creationTimestamp"),
        "{name}"
    );
    assert_eq!(
        second.resource_version(),
        replaced.stored[0].resource_version(),
        "{name}"
    );
    let listing = s
        .list(&Selector {
            group: Some(RESERVED_GROUP.into()),
            kind: Some("Inventory".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        listing.objects.len(),
        3,
        "{name}: {:?}",
        listing.objects.keys()
    );
    assert!(listing.unreadable.is_empty(), "{name}");
    // An ordinary object of 300 KB (a store may bind a body that large in place rather than
    // copy it): created, a second create refused as a conflict with the first left whole,
    // replaced under its precondition.
    let big = |v: &str| cm("big", json!({"noise": &noise[..300_000], "v": v}));
    let created = s
        .commit(vec![put(big("1"), Precondition::Absent)])
        .await
        .unwrap_or_else(|e| panic!("{name}: a large object: {}", store::error_chain(&e)));
    let big_key = common::objects::key("big");
    let back = s.get(&big_key).await.unwrap().unwrap();
    assert_eq!(back.get("data"), big("1").get("data"), "{name}");
    if !s.promises().server_side_apply {
        let err = s
            .commit(vec![put(big("2"), Precondition::Absent)])
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Conflict { .. }), "{name}: {err}");
        let kept = s.get(&big_key).await.unwrap().unwrap();
        assert_eq!(kept.get("data"), big("1").get("data"), "{name}");
        assert_eq!(
            kept.resource_version(),
            created.stored[0].resource_version(),
            "{name}"
        );
    }
    s.commit(vec![put(
        big("3"),
        Precondition::ResourceVersion(back.resource_version().unwrap()),
    )])
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{name}: a large object replaced: {}",
            store::error_chain(&e)
        )
    });
    assert_eq!(
        s.get(&big_key).await.unwrap().unwrap().get("data"),
        big("3").get("data"),
        "{name}"
    );
}

#[tokio::test]
async fn records_of_any_size_read_back_whole() {
    on_every_backend!(check_large_records);
}

#[tokio::test]
async fn sqlite_watch_sees_writes_of_another_connection() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let agent = SqliteStore::open(&path, Default::default()).unwrap();
    let other = SqliteStore::open(&path, Default::default()).unwrap();
    let mut w = agent.watch(0).await.unwrap();
    other
        .commit(vec![put(cm("a", json!({})), Precondition::Absent)])
        .await
        .unwrap();
    let WatchItem::Event(e) = next_event(&mut w).await else {
        panic!("event")
    };
    assert_eq!(e.key, key("a"));
    // And compare-and-swap holds across connections.
    let seen = agent.get(&key("a")).await.unwrap().unwrap();
    other
        .commit(vec![put(
            cm("a", json!({"k": "other"})),
            Precondition::ResourceVersion(1),
        )])
        .await
        .unwrap();
    let err = agent
        .commit(vec![put(seen, Precondition::ResourceVersion(1))])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }));
}

#[tokio::test]
async fn sqlite_store_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    {
        let s = SqliteStore::open(&path, Default::default()).unwrap();
        s.commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
            .await
            .unwrap();
    }
    let s = SqliteStore::open(&path, Default::default()).unwrap();
    assert_eq!(s.revision().await.unwrap(), 1);
    assert_eq!(
        s.get(&key("a")).await.unwrap().unwrap().get("data"),
        Some(&json!({"k": "1"}))
    );
}

#[test]
fn processes_opening_a_new_sqlite_store_at_once_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || SqliteStore::open(&path, Default::default()).map(|_| ()))
        })
        .collect();
    for t in threads {
        t.join().unwrap().expect("open succeeds despite the others");
    }
}

/// A fresh Kubernetes store on `client`: this test's ConfigMaps, Deployments and records of
/// the checks before are deleted first, so each check starts from an empty cluster of its own.
#[cfg(feature = "kubernetes")]
async fn kube_backend(client: &kube::Client) -> Backend {
    use k8s_openapi::api::{apps::v1::Deployment, core::v1::ConfigMap};
    use kube::api::{Api, DeleteParams, ListParams};
    for ns in ["default", "driftless-system"] {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        cms.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await
            .unwrap();
    }
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "prod");
    deps.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let s = store::kubernetes::KubeStore::open(client.clone(), Default::default())
        .await
        .unwrap();
    let base = s.revision().await.unwrap();
    Backend {
        store: Arc::new(s),
        base,
        exact: false,
        #[cfg(feature = "etcd")]
        etcd: None,
    }
}

/// The contract on a real `kube-apiserver` (and its etcd), every check in turn on one control
/// plane; then what only this backend has: a record whose shard is gone is unreadable, not
/// shorter, in a read and in a listing, and a replaced record leaves no shard behind.
#[cfg(feature = "kubernetes")]
#[tokio::test]
async fn a_kubernetes_api_server_keeps_the_contract_where_it_applies() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
    let cp = common::kube::ControlPlane::start().await;
    let client = cp.client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            "prod",
            &PatchParams::apply("contract-test"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}),
            ),
        )
        .await
        .unwrap();
    check_revisions(&kube_backend(&client).await).await;
    check_generation(&kube_backend(&client).await).await;
    check_compare_and_swap(&kube_backend(&client).await).await;
    check_listing(&kube_backend(&client).await).await;
    check_watch(&kube_backend(&client).await).await;
    check_compaction(&kube_backend(&client).await).await;
    let b = kube_backend(&client).await;
    check_large_records(&b).await;

    let records: Api<ConfigMap> = Api::namespaced(client.clone(), "driftless-system");
    let shards = || async {
        records
            .list_metadata(&ListParams::default().labels(store::kubernetes::SHARD_OF_LABEL))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|m| m.metadata.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shards().await,
        Vec::<String>::new(),
        "the replaced record's shards are collected"
    );
    // A sharded record again, then one of its shards goes.
    let body: serde_json::Map<String, serde_json::Value> = serde_json::from_value(json!({
        "spec": {"noise": (0..200_000u64).map(|i| format!("{:016x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15))).collect::<String>()}
    }))
    .unwrap();
    let rec = Object::reserved("Inventory", "torn", body);
    b.store
        .commit(vec![put(rec.clone(), Precondition::Absent)])
        .await
        .unwrap();
    let names = shards().await;
    assert!(names.len() >= 2, "sharded: {names:?}");
    assert!(b.store.get(&rec.key()).await.unwrap().is_some());
    records
        .delete(&names[1], &DeleteParams::default())
        .await
        .unwrap();
    let err = b.store.get(&rec.key()).await.unwrap_err();
    assert!(
        matches!(err, Error::Corrupt { .. }) && store::error_chain(&err).contains("missing"),
        "{}",
        store::error_chain(&err)
    );
    let listing = b
        .store
        .list(&Selector {
            group: Some(RESERVED_GROUP.into()),
            kind: Some("Inventory".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(
        listing.unreadable.contains_key(&rec.key()) && !listing.objects.contains_key(&rec.key()),
        "{:?}",
        listing.unreadable
    );

    // Many objects of one kind in one namespace are read with one LIST: 25 that exist and 5
    // that do not, answered right, in one request.
    let kube = store::kubernetes::KubeStore::open(client.clone(), Default::default())
        .await
        .unwrap();
    let writes: Vec<Write> = (0..25)
        .map(|i| {
            put(
                cm(&format!("many-{i}"), json!({"i": i.to_string()})),
                Precondition::Any,
            )
        })
        .collect();
    kube.commit(writes).await.unwrap();
    let keys: Vec<_> = (0..30).map(|i| key(&format!("many-{i}"))).collect();
    let reads = kube.reads();
    let many = kube.get_many(&keys).await.unwrap();
    assert_eq!(kube.reads(), reads + 1, "one LIST");
    assert_eq!(many.objects.len(), 25);
    assert_eq!(
        many.objects[&key("many-7")].get("data"),
        Some(&json!({"i": "7"}))
    );
    assert!(!many.objects.contains_key(&key("many-27")));

    // The watch cache: once the change feed watches a kind, reads of its objects are answered
    // from memory, and an event on the feed is never ahead of what a read returns.
    let kube = store::kubernetes::KubeStore::open(client.clone(), Default::default())
        .await
        .unwrap();
    kube.commit(vec![put(
        cm("cached", json!({"v": "1"})),
        Precondition::Any,
    )])
    .await
    .unwrap();
    let mut feed = kube.watch(kube.revision().await.unwrap()).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let before = kube.reads();
        kube.get(&key("cached")).await.unwrap().unwrap();
        if kube.reads() == before {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the watch cache never answered"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let other: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), "default");
    for i in 0..20 {
        other
            .patch(
                "cached",
                &kube::api::PatchParams::apply("kubectl-edit").force(),
                &kube::api::Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cached"}, "data": {"v": i.to_string()}})),
            )
            .await
            .unwrap();
        let event = loop {
            if let WatchItem::Event(e) = next_event(&mut feed).await
                && e.key == key("cached")
            {
                break e;
            }
        };
        let reads = kube.reads();
        let got = kube.get(&key("cached")).await.unwrap().unwrap();
        assert!(
            got.resource_version() >= Some(event.revision),
            "read {:?} after an event at {}",
            got.resource_version(),
            event.revision
        );
        assert_eq!(kube.reads(), reads, "answered by the cache");
    }
    // An object written without the app label is not cached (the watch, which selects by the
    // label, would never tell of its deletion): deleted behind the store's back, it is gone.
    kube.commit(vec![put(
        common::objects::cm("unlabelled", json!({})),
        Precondition::Any,
    )])
    .await
    .unwrap();
    other
        .delete("unlabelled", &Default::default())
        .await
        .unwrap();
    assert!(kube.get(&key("unlabelled")).await.unwrap().is_none());
}

/// SQLite keeps each record's store metadata as it last wrote it, so that writing an app's
/// status again does not load the old record (megabytes) to read it back; it is trusted only
/// while the row is still at the version it wrote.
#[tokio::test]
async fn sqlite_keeps_a_records_metadata_only_while_the_row_is_its_own_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let a = SqliteStore::open(&path, Default::default()).unwrap();
    let b = SqliteStore::open(&path, Default::default()).unwrap();
    fn text(n: u64) -> store::RecordText {
        store::RecordText::new("Status", "r", "spec", &json!({"n": n})).unwrap()
    }
    async fn write(s: &SqliteStore, n: u64) {
        s.commit(vec![store::Write::PutRecord {
            record: text(n),
            precondition: Precondition::Any,
        }])
        .await
        .unwrap();
    }
    async fn created(s: &SqliteStore) -> String {
        let o = s.get(&text(0).key()).await.unwrap().unwrap();
        o.metadata()["creationTimestamp"]
            .as_str()
            .unwrap()
            .to_string()
    }
    let raw = rusqlite::Connection::open(&path).unwrap();
    let set_created = |when: &str, bump: bool| {
        raw.execute(
            &format!(
                "UPDATE objects SET body = json_set(body, '$.metadata.creationTimestamp', ?1){} WHERE kind = 'Status'",
                if bump { ", rev = rev + 100" } else { "" }
            ),
            [when],
        )
        .unwrap();
    };
    write(&a, 1).await;
    let first = created(&a).await;
    // Written by another handle (another process): read from the row, kept.
    write(&b, 2).await;
    assert_eq!(created(&b).await, first);
    // Changed behind both at a new version: `a` reads the row again, not what it wrote.
    set_created("2001-01-01T00:00:00Z", true);
    write(&a, 3).await;
    assert_eq!(created(&a).await, "2001-01-01T00:00:00Z");
    // At the version `a` wrote, its own metadata is used: the row is not read for it.
    set_created("2002-02-02T00:00:00Z", false);
    write(&a, 4).await;
    assert_eq!(created(&a).await, "2001-01-01T00:00:00Z");
    assert_eq!(
        a.get(&text(0).key()).await.unwrap().unwrap().get("spec"),
        Some(&json!({"n": 4}))
    );
}
