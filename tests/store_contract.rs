//! The store contract of ARCHITECTURE.md section 4, run against every backend: memory, SQLite and,
//! with the `etcd` feature, a real etcd server (the one `.ci/run` starts, named by
//! `DRIFTLESS_TEST_ETCD`, else one started for each test). Revisions are checked relative to
//! the store's revision when the test began, since etcd's revision counts the whole cluster.

mod common;

use std::sync::Arc;
use std::time::Duration;

use driftless::object::{Object, RESERVED_GROUP};
use driftless::store::{
    self, Error, Precondition, Selector, Store, WatchItem, Write, memory::MemoryStore,
    sqlite::SqliteStore,
};
use serde_json::json;

use common::objects::{cm, key, put};

async fn next_event(w: &mut store::Watch) -> WatchItem {
    tokio::time::timeout(Duration::from_secs(5), w.recv())
        .await
        .expect("a watch item within 5 s")
        .expect("the watch is open")
        .expect("no backend error")
}

/// One backend under test.
struct Backend {
    store: Arc<dyn Store>,
    /// The store revision when the test began.
    base: u64,
    #[cfg(feature = "etcd")]
    etcd: Option<(store::etcd::EtcdStore, EtcdGuard)>,
}

impl Backend {
    /// The revision `n` commits after the test began.
    fn at(&self, n: u64) -> u64 {
        self.base + n
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

#[tokio::test]
async fn revisions_grow_and_each_write_carries_its_resource_version() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
        assert_eq!(s.revision().await.unwrap(), b.at(0), "{}", s.backend());
        let c1 = s
            .commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
            .await
            .unwrap();
        assert_eq!(c1.revision, b.at(1));
        let a = s.get(&key("a")).await.unwrap().unwrap();
        assert_eq!(a.resource_version(), Some(b.at(1)));
        assert_eq!(a.generation(), 1);
        assert!(a.metadata().get("creationTimestamp").is_some());
        // Two objects in one transaction share its revision.
        let c2 = s
            .commit(vec![
                put(cm("b", json!({})), Precondition::Absent),
                put(cm("c", json!({})), Precondition::Absent),
            ])
            .await
            .unwrap();
        assert_eq!(c2.revision, b.at(2));
        assert_eq!(c2.stored.len(), 2);
        assert!(
            c2.stored
                .iter()
                .all(|o| o.resource_version() == Some(b.at(2))),
            "{}: the stored objects carry the transaction's revision",
            s.backend()
        );
        assert_eq!(
            s.get(&key("c")).await.unwrap().unwrap().resource_version(),
            Some(b.at(2))
        );
        assert_eq!(s.revision().await.unwrap(), b.at(2), "{}", s.backend());
    }
}

#[tokio::test]
async fn generation_counts_spec_changes_only() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
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
}

#[tokio::test]
async fn compare_and_swap_conflicts_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
        s.commit(vec![put(cm("a", json!({"k": "1"})), Precondition::Absent)])
            .await
            .unwrap();
        // Stale resourceVersion.
        let err = s
            .commit(vec![
                put(cm("b", json!({})), Precondition::Absent),
                put(
                    cm("a", json!({"k": "2"})),
                    Precondition::ResourceVersion(b.at(99)),
                ),
            ])
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::Conflict { .. }),
            "{}: {err}",
            s.backend()
        );
        assert!(
            s.get(&key("b")).await.unwrap().is_none(),
            "{}: all or nothing",
            s.backend()
        );
        assert_eq!(s.revision().await.unwrap(), b.at(1));
        // Create over an existing object.
        assert!(matches!(
            s.commit(vec![put(cm("a", json!({})), Precondition::Absent)])
                .await,
            Err(Error::Conflict { .. })
        ));
        // Delete with a stale resourceVersion.
        assert!(matches!(
            s.commit(vec![Write::Delete {
                key: key("a"),
                precondition: Precondition::ResourceVersion(b.at(7))
            }])
            .await,
            Err(Error::Conflict { .. })
        ));
        // The right one works.
        s.commit(vec![Write::Delete {
            key: key("a"),
            precondition: Precondition::ResourceVersion(b.at(1)),
        }])
        .await
        .unwrap();
        assert!(s.get(&key("a")).await.unwrap().is_none());
        // Deleting what is gone, unconditionally, is no write at all.
        let c = s
            .commit(vec![Write::Delete {
                key: key("a"),
                precondition: Precondition::Any,
            }])
            .await
            .unwrap();
        assert_eq!(c.revision, 0);
        assert_eq!(s.revision().await.unwrap(), b.at(2), "{}", s.backend());
    }
}

#[tokio::test]
async fn listing_selects_by_group_kind_and_namespace_and_hides_reserved_records() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
        let dep = Object::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "prod"}}))
        .unwrap();
        let rec = Object::reserved("Inventory", "app", Default::default());
        s.commit(vec![
            put(cm("a", json!({})), Precondition::Any),
            put(dep, Precondition::Any),
            put(rec, Precondition::Any),
        ])
        .await
        .unwrap();
        let all = s.list(&Selector::default()).await.unwrap();
        assert_eq!(all.objects.len(), 2, "{}", s.backend());
        assert_eq!(all.revision, b.at(1));
        let apps = s
            .list(&Selector {
                group: Some("apps".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(apps.objects.keys().next().unwrap().name, "web");
        let ns = s
            .list(&Selector {
                namespace: Some("default".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(ns.objects.len(), 1);
        let reserved = s
            .list(&Selector {
                group: Some(RESERVED_GROUP.into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(reserved.objects.len(), 1);
        let many = s.get_many(&[key("a"), key("missing")]).await.unwrap();
        assert_eq!(many.objects.len(), 1);
        assert_eq!(
            s.version_of(&key("a")).await.unwrap(),
            Some(b.at(1)),
            "{}",
            s.backend()
        );
        assert_eq!(s.version_of(&key("missing")).await.unwrap(), None);
    }
}

#[tokio::test]
async fn watch_replays_history_in_order_then_follows_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
        s.commit(vec![put(cm("a", json!({})), Precondition::Absent)])
            .await
            .unwrap();
        s.commit(vec![put(cm("b", json!({})), Precondition::Absent)])
            .await
            .unwrap();
        let mut w = s.watch(b.at(1)).await.unwrap();
        let WatchItem::Event(e) = next_event(&mut w).await else {
            panic!("event")
        };
        assert_eq!(
            (e.revision, e.key.name.as_str(), e.deleted),
            (b.at(2), "b", false),
            "{}",
            s.backend()
        );
        s.commit(vec![Write::Delete {
            key: key("a"),
            precondition: Precondition::Any,
        }])
        .await
        .unwrap();
        let WatchItem::Event(e) = next_event(&mut w).await else {
            panic!("event")
        };
        assert_eq!(
            (e.revision, e.key.name.as_str(), e.deleted),
            (b.at(3), "a", true),
            "{}",
            s.backend()
        );
    }
}

#[tokio::test]
async fn watch_from_compacted_history_asks_for_a_relist() {
    let dir = tempfile::tempdir().unwrap();
    for b in backends(&dir).await {
        let s = &b.store;
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
