//! The app's status record, written off the reconcile path in the running agent.
//!
//! The status record holds one entry per object: at 10,000 objects a few MB of JSON, which on
//! an API server is compressed and sharded over several ConfigMaps (see the Kubernetes store).
//! Written inline, each drift revert would wait for it before the next change could be looked
//! at. Here a task of its own writes the newest status it was given: statuses given while a
//! write is in flight replace each other (only the newest is written). A status whose summary
//! changed (revision, sync status, health, conditions) is written as soon as the write before
//! it is done; one that differs only in its per-object entries waits until [`SPACING`] after
//! the last write (1 ms per object for a large app, up to [`SPACING_MAX`]), so a burst of
//! reverts costs one write a second (one in 10 s at 10,000 objects). What the agent serves
//! (its HTTP API, its metrics, its commit statuses) never waits for the record; the per-object
//! entries of the record are at most that spacing plus one write behind, and
//! [`StatusWriter::finish`] writes what is pending before the agent exits.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};
use tracing::Instrument as _;

use crate::status::{self, AppStatus};
use crate::store::{Store, error_chain};

/// The least time between two writes of one app's status record.
pub const SPACING: Duration = Duration::from_secs(1);

/// The spacing of a large app's record: [`SPACING`] or 1 ms per object, whichever is longer,
/// up to this (10,000 objects: 10 s). The record's size grows with its objects; so does the
/// time between its rewrites, which keeps the bytes written per second (and the API server's
/// and etcd's work) about the same whatever the size of the app.
pub const SPACING_MAX: Duration = Duration::from_secs(10);

/// How long after writing `status` a status that differs only in its per-object entries waits.
fn spacing_after(status: &AppStatus, spacing: Duration) -> Duration {
    spacing.max(Duration::from_millis(status.resources.len() as u64).min(SPACING_MAX))
}

/// The first pause before a failed write is tried again (doubling to [`RETRY_MAX`]).
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Hands statuses to the writing task. See the module documentation.
pub struct StatusWriter {
    tx: watch::Sender<Option<Arc<AppStatus>>>,
    /// Ends the spacing wait early: a status whose summary changed is waiting.
    urgent: Arc<Urgent>,
    task: tokio::task::JoinHandle<Option<Written>>,
}

/// The last status the task wrote and the record's resourceVersion after that write.
pub type Written = (Arc<AppStatus>, u64);

impl StatusWriter {
    /// Starts the writing task for one app's records in `store`, in a `status_writer` span
    /// (a child of the caller's, which names the app).
    pub fn spawn(store: Arc<dyn Store>) -> Self {
        Self::spawn_with(store, SPACING)
    }

    fn spawn_with(store: Arc<dyn Store>, spacing: Duration) -> Self {
        let (tx, rx) = watch::channel(None);
        let urgent = Arc::new(Urgent::default());
        let task = tokio::spawn(
            run(store, rx, urgent.clone(), spacing)
                .instrument(tracing::info_span!("status_writer")),
        );
        Self { tx, urgent, task }
    }

    /// Gives the newest status: written as soon as the write in flight is done when `urgent`
    /// (its summary changed), else once the spacing allows; unless a newer one comes first.
    pub fn send(&self, status: Arc<AppStatus>, urgent: bool) {
        self.tx.send_replace(Some(status));
        if urgent {
            self.urgent.waiting.store(true, Ordering::SeqCst);
            self.urgent.wake.notify_one();
        }
    }

    /// Writes what is pending (one try), then ends the task; gives the last status written
    /// and its resourceVersion (`None` when none was, or the task failed).
    pub async fn finish(self) -> Option<Written> {
        drop(self.tx);
        self.task.await.ok().flatten()
    }
}

/// Set when a status whose summary changed is waiting (cleared by the writer as it takes the
/// newest status), with its wake-up.
#[derive(Default)]
struct Urgent {
    waiting: AtomicBool,
    wake: Notify,
}

/// Completes when the sending side is gone.
async fn closed(mut probe: watch::Receiver<Option<Arc<AppStatus>>>) {
    while probe.changed().await.is_ok() {}
}

async fn run(
    store: Arc<dyn Store>,
    mut rx: watch::Receiver<Option<Arc<AppStatus>>>,
    urgent: Arc<Urgent>,
    spacing: Duration,
) -> Option<Written> {
    let mut retry = RETRY_MIN;
    let mut written = None;
    // A value not yet seen is returned even after the sender is gone: what is pending at the
    // end is written once.
    while rx.changed().await.is_ok() {
        // Cleared before the newest is taken: an urgent one given after this is seen.
        urgent.waiting.store(false, Ordering::SeqCst);
        let Some(status) = rx.borrow_and_update().clone() else {
            continue;
        };
        let ending = rx.has_changed().is_err();
        match status::write(store.as_ref(), &status).await {
            Ok(rv) => {
                retry = RETRY_MIN;
                written = Some((status.clone(), rv));
                if !ending {
                    let wait = async {
                        while !urgent.waiting.load(Ordering::SeqCst) {
                            tokio::select! {
                                _ = closed(rx.clone()) => break,
                                _ = urgent.wake.notified() => {}
                            }
                        }
                    };
                    let _ = tokio::time::timeout(spacing_after(&status, spacing), wait).await;
                }
            }
            Err(e) if ending => {
                tracing::warn!(error = %error_chain(&e), "Cannot write status; stopping without it");
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), retry_in = ?retry, "Cannot write status");
                let _ = tokio::time::timeout(retry, closed(rx.clone())).await;
                retry = (retry * 2).min(RETRY_MAX);
                // Tried again with the newest status, this one if none came.
                rx.mark_changed();
            }
        }
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    fn status(name: &str, revision: &str) -> Arc<AppStatus> {
        let mut s = AppStatus::new(name);
        s.revision = Some(revision.into());
        Arc::new(s)
    }

    async fn written(store: &MemoryStore) -> Option<String> {
        status::read(store, "app")
            .await
            .unwrap()
            .and_then(|s| s.revision)
    }

    /// Waits (at most 10 s) until the record names `revision`.
    async fn until(store: &MemoryStore, revision: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while written(store).await.as_deref() != Some(revision) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{revision} never written"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn a_large_record_is_rewritten_less_often() {
        let with = |n: usize| {
            let mut s = AppStatus::new("app");
            let entry = Arc::new(crate::status::ResourceStatus {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: "ns".into(),
                name: "c".into(),
                sync: crate::status::SyncStatus::Synced,
                health: crate::health::Health::Healthy,
                health_message: None,
                message: None,
            });
            s.resources = vec![entry; n];
            s
        };
        assert_eq!(spacing_after(&with(10), SPACING), SPACING);
        assert_eq!(
            spacing_after(&with(2_500), SPACING),
            Duration::from_millis(2_500)
        );
        assert_eq!(
            spacing_after(&with(10_000), SPACING),
            Duration::from_secs(10)
        );
        assert_eq!(spacing_after(&with(100_000), SPACING), SPACING_MAX);
        // A spacing set longer than that is kept.
        assert_eq!(
            spacing_after(&with(10), Duration::from_secs(3)),
            Duration::from_secs(3)
        );
    }

    #[tokio::test]
    async fn a_burst_is_written_newest_last_with_spacing_and_the_end_flushes() {
        let store = Arc::new(MemoryStore::new());
        let w = StatusWriter::spawn_with(store.clone(), Duration::from_secs(2));
        w.send(status("app", "r1"), true);
        until(&store, "r1").await;
        let first = store.revision().await.unwrap();
        // Within the spacing: r2 and r3 replace each other; only r3 is written, after it.
        w.send(status("app", "r2"), false);
        w.send(status("app", "r3"), false);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            store.revision().await.unwrap(),
            first,
            "not before the spacing"
        );
        until(&store, "r3").await;
        assert_eq!(
            store.revision().await.unwrap(),
            first + 1,
            "one write for two"
        );
        // A status whose summary changed is not held for the spacing.
        w.send(status("app", "r4"), true);
        until(&store, "r4").await;
        // Given and finished at once: written before finish returns.
        let last = status("app", "r5");
        w.send(last.clone(), false);
        let (status, rv) = w.finish().await.expect("r5 written");
        assert_eq!(written(&store).await.as_deref(), Some("r5"));
        // What finish gives is that status and the version of the record holding it.
        assert!(Arc::ptr_eq(&status, &last));
        assert_eq!(
            store
                .version_of(&AppStatus::record_key("app"))
                .await
                .unwrap(),
            Some(rv)
        );
    }
}
