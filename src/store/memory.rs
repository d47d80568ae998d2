//! An in-memory store for tests: the same contract as the others, in one process.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

use super::{
    Committed, Error, Event, Listing, Result, Selector, Store, Watch, WatchItem, Write,
    check_distinct, stamp,
};
use crate::object::{Object, ObjectKey};

struct Inner {
    revision: u64,
    objects: BTreeMap<ObjectKey, Object>,
    log: VecDeque<Event>,
    /// Every event at or below this revision may have been dropped from `log`.
    compacted: u64,
}

/// An in-memory store. Cloning gives another handle on the same data.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    notify: watch::Sender<u64>,
    retain: usize,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::with_retention(100_000)
    }
}

impl MemoryStore {
    /// An empty store keeping the last 100,000 change events.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store keeping the last `events` change events; older history is compacted
    /// and a watch from before it gets [`WatchItem::Relist`].
    pub fn with_retention(events: usize) -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                revision: 0,
                objects: BTreeMap::new(),
                log: VecDeque::new(),
                compacted: 0,
            })),
            notify: watch::channel(0).0,
            retain: events.max(1),
        }
    }

    fn lock(&self) -> Result<MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| Error::Backend {
            op: "lock",
            source: "memory store lock poisoned".into(),
        })
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>> {
        Ok(self.lock()?.objects.get(key).cloned())
    }

    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>> {
        Ok(self
            .lock()?
            .objects
            .get(key)
            .and_then(Object::resource_version))
    }

    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing> {
        let inner = self.lock()?;
        let objects = keys
            .iter()
            .filter_map(|k| inner.objects.get(k).map(|o| (k.clone(), o.clone())))
            .collect();
        Ok(Listing {
            revision: inner.revision,
            objects,
            unreadable: Default::default(),
        })
    }

    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<super::Version>> {
        let inner = self.lock()?;
        Ok(keys
            .iter()
            .map(|k| {
                super::Version::from_lookup(
                    inner.objects.get(*k).and_then(Object::resource_version),
                )
            })
            .collect())
    }

    async fn list(&self, selector: &Selector) -> Result<Listing> {
        let inner = self.lock()?;
        let objects = inner
            .objects
            .iter()
            .filter(|(k, _)| selector.matches(k))
            .map(|(k, o)| (k.clone(), o.clone()))
            .collect();
        Ok(Listing {
            revision: inner.revision,
            objects,
            unreadable: Default::default(),
        })
    }

    async fn commit(&self, writes: Vec<Write>) -> Result<Committed> {
        check_distinct(&writes)?;
        let writes = writes
            .into_iter()
            .map(Write::into_object_write)
            .collect::<Result<Vec<_>>>()?;
        let mut inner = self.lock()?;
        for w in &writes {
            let key = w.key();
            w.precondition().check(&key, inner.objects.get(&key))?;
        }
        let effective = writes.iter().any(|w| match w {
            Write::Put { .. } | Write::PutRecord { .. } => true,
            Write::Delete { key, .. } => inner.objects.contains_key(key),
        });
        if !effective {
            return Ok(Committed::default());
        }
        let revision = inner.revision + 1;
        let mut stored = Vec::new();
        for w in writes {
            match w {
                // Turned into `Put` above.
                Write::PutRecord { .. } => {}
                Write::Put { object, .. } => {
                    let key = object.key();
                    let new = stamp(inner.objects.get(&key), object, revision);
                    inner.objects.insert(key.clone(), new.clone());
                    inner.log.push_back(Event {
                        revision,
                        key,
                        deleted: false,
                    });
                    stored.push(new.into());
                }
                Write::Delete { key, .. } => {
                    if inner.objects.remove(&key).is_some() {
                        inner.log.push_back(Event {
                            revision,
                            key,
                            deleted: true,
                        });
                    }
                }
            }
        }
        inner.revision = revision;
        while inner.log.len() > self.retain {
            if let Some(e) = inner.log.pop_front() {
                inner.compacted = inner.compacted.max(e.revision);
            }
        }
        drop(inner);
        self.notify.send_replace(revision);
        Ok(Committed { revision, stored })
    }

    async fn revision(&self) -> Result<u64> {
        Ok(self.lock()?.revision)
    }

    async fn watch(&self, from_revision: u64) -> Result<Watch> {
        let (tx, rx) = mpsc::channel(1024);
        let store = self.clone();
        let mut changed = self.notify.subscribe();
        let task = async move {
            let mut cursor = from_revision;
            loop {
                let items = {
                    let Ok(inner) = store.lock() else { return };
                    let mut items = Vec::new();
                    if cursor < inner.compacted {
                        items.push(WatchItem::Relist {
                            revision: inner.revision,
                        });
                        cursor = inner.revision;
                    }
                    for e in inner.log.iter().filter(|e| e.revision > cursor) {
                        items.push(WatchItem::Event(e.clone()));
                    }
                    cursor = cursor.max(inner.revision);
                    items
                };
                for item in items {
                    if tx.send(Ok(item)).await.is_err() {
                        return;
                    }
                }
                tokio::select! {
                    r = changed.changed() => if r.is_err() { return },
                    _ = tx.closed() => return,
                }
            }
        };
        tokio::spawn(task.instrument(tracing::info_span!("store_watch", backend = "memory")));
        Ok(rx)
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}
