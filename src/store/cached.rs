//! Versions of objects kept current by the change feed: [`Store::versions`] answered without a
//! read of the objects.
//!
//! The running agent's periodic pass asks the versions of every object of every app
//! (`sync::nothing_moved`): at 10,000 objects that is a scan of the store's key columns each
//! time. [`VersionCache`] wraps a store and keeps, for each key it was asked of or heard of,
//! the version the change feed last said (the revision of its last put, or absent). It answers
//! from there only when it is current: the feed has sent a bookmark
//! ([`WatchItem::Bookmark`]: every change up to a revision sent) at or past the store's
//! revision, read first (one small read). Otherwise it waits a few milliseconds for the feed,
//! then asks the store. Keys it has never seen are asked of the store and remembered.
//!
//! What it remembers of a key says when it was true (`as_of`): an event only replaces an
//! older fact, so a version read from the store is never overwritten by an event the feed
//! delivers late. A relist (history gone) forgets everything; reads begun before it are not
//! remembered. Everything else (reads, writes, the feed itself) goes to the wrapped store.
//! A backend that sends no bookmarks is never current here, and every ask goes to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tracing::Instrument as _;

use super::{
    Committed, Listing, Promises, Result, Selector, Store, Version, Watch, WatchItem, Write,
};
use crate::object::{Object, ObjectKey};

/// How long an ask waits for the feed to reach the store's revision before it reads the store.
const CATCH_UP: Duration = Duration::from_millis(10);

/// What is known of one key: its version (`None`: absent) and the revision that was true at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fact {
    version: Option<u64>,
    as_of: u64,
}

#[derive(Debug, Default)]
struct State {
    known: crate::object::KeyMap<Fact>,
    /// Bumped by a relist: a read begun before it is not remembered.
    generation: u64,
}

/// A store whose [`Store::versions`] is answered from the change feed when it is current (see
/// the module documentation). Cloning gives another handle on the same cache.
#[derive(Clone)]
pub struct VersionCache {
    inner: Arc<dyn Store>,
    state: Arc<Mutex<State>>,
    /// The revision up to which every change has been applied (`None` while the feed is down).
    current: watch::Receiver<Option<u64>>,
    /// Asks answered from the cache alone, for tests and metrics.
    served: Arc<std::sync::atomic::AtomicU64>,
    _feed: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl VersionCache {
    /// Wraps `inner` and starts following its change feed from its current revision (a task
    /// in the span `version_cache`, stopped when the last handle is dropped).
    ///
    /// # Errors
    ///
    /// The store's error when its revision cannot be read.
    pub async fn wrap(inner: Arc<dyn Store>) -> Result<Self> {
        let from = inner.revision().await?;
        let (tx, rx) = watch::channel(Some(from));
        let state = Arc::new(Mutex::new(State::default()));
        let task = tokio::spawn(follow(inner.clone(), state.clone(), tx, from).instrument(
            tracing::info_span!("version_cache", backend = inner.backend()),
        ));
        Ok(Self {
            inner,
            state,
            current: rx,
            served: Default::default(),
            _feed: Arc::new(AbortOnDrop(task)),
        })
    }

    /// Another handle on the same cache (the same feed and facts) in front of `inner`, another
    /// handle on the same data (an app's fenced handle on the store): asks the cache cannot
    /// answer, reads, writes and watches go to `inner`.
    pub fn in_front_of(&self, inner: Arc<dyn Store>) -> Self {
        Self {
            inner,
            ..self.clone()
        }
    }

    /// How many asks were answered from the cache alone.
    pub fn served(&self) -> u64 {
        self.served.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Every key the cache knows with its version (`None`: absent), once the feed has caught
    /// up with the store's revision as read now; `None` when it does not within `wait`. For
    /// tests that hold it to a fresh read.
    ///
    /// # Errors
    ///
    /// The store's error when its revision cannot be read.
    pub async fn view(&self, wait: Duration) -> Result<Option<HashMap<ObjectKey, Option<u64>>>> {
        let now = self.inner.revision().await?;
        if !self.caught_up(now, wait).await {
            return Ok(None);
        }
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        Ok(Some(
            state
                .known
                .iter()
                .map(|(k, f)| (k.clone(), f.version))
                .collect(),
        ))
    }

    /// True once every change up to `revision` has been applied, waiting at most `wait`.
    async fn caught_up(&self, revision: u64, wait: Duration) -> bool {
        let mut current = self.current.clone();
        let reached = move |c: &Option<u64>| c.is_some_and(|c| c >= revision);
        if reached(&current.borrow()) {
            return true;
        }
        matches!(
            tokio::time::timeout(wait, current.wait_for(reached)).await,
            Ok(Ok(_))
        )
    }
}

/// Applies the change feed to `state` and publishes how far it got, resuming after errors.
async fn follow(
    store: Arc<dyn Store>,
    state: Arc<Mutex<State>>,
    current: watch::Sender<Option<u64>>,
    mut from: u64,
) {
    loop {
        match store.watch(from).await {
            Ok(mut w) => {
                while let Some(item) = w.recv().await {
                    let Ok(item) = item else { break };
                    let mut s = state.lock().unwrap_or_else(|e| e.into_inner());
                    match item {
                        WatchItem::Event(e) => {
                            let fact = Fact {
                                version: (!e.deleted).then_some(e.revision),
                                as_of: e.revision,
                            };
                            let known = s.known.entry(e.key).or_insert(fact);
                            if known.as_of < fact.as_of {
                                *known = fact;
                            }
                            // Events of this revision may still be on their way.
                            from = e.revision.saturating_sub(1).max(from);
                        }
                        WatchItem::Relist { revision } => {
                            s.known.clear();
                            s.generation += 1;
                            from = revision;
                            current.send_replace(Some(revision));
                        }
                        WatchItem::Bookmark { revision } => {
                            from = revision;
                            current.send_replace(Some(revision));
                        }
                    }
                }
            }
            Err(e) => tracing::debug!(error = %super::error_chain(&e), "Cannot watch the store"),
        }
        // Until the feed runs again, nothing is answered from the cache.
        current.send_replace(None);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[async_trait]
impl Store for VersionCache {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>> {
        self.inner.get(key).await
    }

    async fn get_json(&self, key: &ObjectKey) -> Result<Option<(String, u64)>> {
        self.inner.get_json(key).await
    }

    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>> {
        self.inner.version_of(key).await
    }

    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing> {
        self.inner.get_many(keys).await
    }

    /// From the cache when the feed has caught up with the store's revision (within 10 ms);
    /// the keys it does not know are read from the store and remembered.
    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<Version>> {
        let now = self.inner.revision().await?;
        if !self.caught_up(now, CATCH_UP).await {
            return self.inner.versions(keys).await;
        }
        let (mut out, missing, generation) = {
            let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let mut out = Vec::with_capacity(keys.len());
            let mut missing = Vec::new();
            for (i, k) in keys.iter().enumerate() {
                match state.known.get(*k) {
                    Some(f) => out.push(Version::from_lookup(f.version)),
                    None => {
                        out.push(Version::Unknown);
                        missing.push(i);
                    }
                }
            }
            (out, missing, state.generation)
        };
        if missing.is_empty() {
            self.served
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Ok(out);
        }
        let asked: Vec<&ObjectKey> = missing.iter().map(|i| keys[*i]).collect();
        let read = self.inner.versions(&asked).await?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for (i, v) in missing.into_iter().zip(read) {
            out[i] = v;
            let fact = match v {
                // A version is the revision of the object's last write: true as of then.
                Version::At(rv) => Fact {
                    version: Some(rv),
                    as_of: rv,
                },
                // Absent as of some revision at or after `now`; any event the feed still
                // brings for it is newer than nothing.
                Version::Absent => Fact {
                    version: None,
                    as_of: 0,
                },
                Version::Unknown => continue,
            };
            if state.generation == generation {
                let known = state.known.entry(keys[i].clone()).or_insert(fact);
                if known.as_of < fact.as_of {
                    *known = fact;
                }
            }
        }
        Ok(out)
    }

    async fn list(&self, selector: &Selector) -> Result<Listing> {
        self.inner.list(selector).await
    }

    async fn commit(&self, writes: Vec<Write>) -> Result<Committed> {
        self.inner.commit(writes).await
    }

    async fn revision(&self) -> Result<u64> {
        self.inner.revision().await
    }

    async fn watch(&self, from_revision: u64) -> Result<Watch> {
        self.inner.watch(from_revision).await
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn commits_atomically(&self, writes: &[Write]) -> bool {
        self.inner.commits_atomically(writes)
    }

    async fn check(&self, objects: &[Object]) -> Result<Vec<(ObjectKey, String)>> {
        self.inner.check(objects).await
    }

    async fn confirm_drift(&self, declared: &Object, live: &Object) -> Result<bool> {
        self.inner.confirm_drift(declared, live).await
    }

    async fn holds_others(
        &self,
        container: &Object,
        owned: &std::collections::BTreeSet<ObjectKey>,
    ) -> Result<Option<String>> {
        self.inner.holds_others(container, owned).await
    }

    fn field_manager(&self) -> Option<&str> {
        self.inner.field_manager()
    }

    fn fenced(&self, gate: watch::Receiver<Option<super::Fence>>) -> Option<Arc<dyn Store>> {
        self.inner.fenced(gate)
    }

    fn promises(&self) -> Promises {
        self.inner.promises()
    }

    async fn settle(&self, timeout: std::time::Duration) -> bool {
        self.inner.settle(timeout).await
    }
}
