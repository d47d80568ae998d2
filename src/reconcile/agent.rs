//! Running the apps: one loop per app, one store watch feeding them, manual triggers and
//! readiness.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::{Action, App, Backoff, Previews, Requeue, Trigger, backoff::BACKOFF_MIN, error_chain};
use crate::object::ObjectKey;
use crate::store::{Fence, Store, WatchItem};

/// An app's gate with etcd replicas: `Some(fence)` while this replica holds the app.
pub type Gate = watch::Receiver<Option<Fence>>;

/// Which apps have finished their first reconcile (for `/readyz`).
#[derive(Debug, Default)]
pub struct Readiness {
    waiting: std::sync::Mutex<BTreeSet<String>>,
}

impl Readiness {
    fn new(apps: impl IntoIterator<Item = String>) -> Self {
        Self {
            waiting: std::sync::Mutex::new(apps.into_iter().collect()),
        }
    }

    fn done(&self, app: &str) {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(app);
    }

    /// The apps whose first reconcile has not finished, by name.
    pub fn waiting(&self) -> Vec<String> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

/// The status of each app as this agent last computed it, whether or not the store took it:
/// what the API shows when the store cannot be read (etcd down). An app this replica stands by
/// for keeps the status it had when the replica last ran it; one it never ran is absent.
///
/// The apps this agent runs now have a *current* status ([`Latest::current`]): the one it
/// wrote last. The pages and the API serve that from memory, so reading them never waits on
/// the store the reverts write to.
#[derive(Debug, Default)]
pub struct Latest {
    statuses: std::sync::Mutex<std::collections::BTreeMap<String, Published>>,
}

#[derive(Debug)]
struct Published {
    status: Arc<crate::status::AppStatus>,
    /// True while this agent runs the app (holds it, with replicas).
    running: bool,
}

impl Latest {
    fn publish(&self, status: Arc<crate::status::AppStatus>) {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                status.name.clone(),
                Published {
                    status,
                    running: true,
                },
            );
    }

    /// This agent no longer runs `app` (another replica holds it): its status is no longer
    /// current.
    fn stand_by(&self, app: &str) {
        if let Some(p) = self
            .statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(app)
        {
            p.running = false;
        }
    }

    /// The statuses, by app name.
    pub fn all(&self) -> Vec<crate::status::AppStatus> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .map(|p| (*p.status).clone())
            .collect()
    }

    /// The status of `app` when this agent runs it now (the one it last wrote); `None` when it
    /// does not run it, or has not finished a reconcile of it yet.
    pub fn current(&self, app: &str) -> Option<Arc<crate::status::AppStatus>> {
        self.statuses
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(app)
            .filter(|p| p.running)
            .map(|p| p.status.clone())
    }
}

/// Shortest time between two fetches requested by webhooks or manual syncs of one app.
pub const REQUEST_SPACING: std::time::Duration = std::time::Duration::from_secs(1);

const FETCH: u8 = 1;
const MANUAL: u8 = 2;

/// Requests to fetch now, collapsed: however many webhooks and manual syncs arrive while an
/// app is busy, it does one fetch afterwards (a manual one when any of them was manual).
#[derive(Debug, Default)]
struct Requested {
    /// 0 nothing, [`FETCH`], or [`MANUAL`]: the strongest request since the last take.
    level: AtomicU8,
    notify: Notify,
}

impl Requested {
    fn request(&self, level: u8) {
        self.level.fetch_max(level, Ordering::SeqCst);
        self.notify.notify_one();
    }

    fn take(&self) -> Option<Trigger> {
        match self.level.swap(0, Ordering::SeqCst) {
            0 => None,
            FETCH => Some(Trigger::Fetch),
            _ => Some(Trigger::Manual),
        }
    }
}

/// Most distinct keys one app's pending changes hold; beyond, the app looks at every object.
pub const PENDING_MAX_KEYS: usize = 100_000;

/// The store changes an app has not looked at yet, coalesced by key: however fast another
/// writer changes an object, the app sees it once per pass, with the newest revision (which is
/// what tells the app's own writes apart). The store watch adds to it without waiting, so a
/// busy app never makes the feed fall behind; a relist, or more than [`PENDING_MAX_KEYS`]
/// distinct keys, turns into one pass over every object.
#[derive(Debug, Default)]
struct Pending {
    changes: std::sync::Mutex<Changes>,
    notify: Notify,
    /// The keys the app cares about (`None`: not known yet, every change passes), and its
    /// inventory record, which always passes.
    interest: super::app::Interest,
    inventory: Option<ObjectKey>,
}

#[derive(Debug, Default)]
struct Changes {
    /// Key → newest revision seen.
    keys: HashMap<ObjectKey, u64>,
    /// Look at every object (a relist, or too many keys).
    all: bool,
}

impl Pending {
    fn add(&self, item: &WatchItem) {
        match item {
            // Nothing changed that the app loops have not been told of.
            WatchItem::Bookmark { .. } => return,
            WatchItem::Event(e) if self.inventory.as_ref() != Some(&e.key) => {
                let interest = self.interest.read().unwrap_or_else(|e| e.into_inner());
                if interest.as_ref().is_some_and(|keys| !keys.contains(&e.key)) {
                    // Another app's object: not this app's to hold or to wake for.
                    return;
                }
            }
            _ => {}
        }
        {
            let mut c = self.changes.lock().unwrap_or_else(|e| e.into_inner());
            match item {
                WatchItem::Event(e) if !c.all => {
                    let rev = c.keys.entry(e.key.clone()).or_insert(e.revision);
                    *rev = (*rev).max(e.revision);
                    if c.keys.len() > PENDING_MAX_KEYS {
                        c.keys = HashMap::new();
                        c.all = true;
                    }
                }
                WatchItem::Event(_) => {}
                WatchItem::Relist { .. } => {
                    c.keys = HashMap::new();
                    c.all = true;
                }
                WatchItem::Bookmark { .. } => {}
            }
        }
        self.notify.notify_one();
    }

    fn take(&self) -> Changes {
        std::mem::take(&mut *self.changes.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// A handle on a running agent: manual triggers and readiness.
#[derive(Clone, Debug)]
pub struct Handle {
    /// Per app: the pending request of a webhook or a person.
    triggers: HashMap<String, Arc<Requested>>,
    /// Per app with previews: a request for a preview pass now.
    previews: HashMap<String, Arc<Notify>>,
    readiness: Arc<Readiness>,
    latest: Arc<Latest>,
}

impl Handle {
    /// Asks `app` to fetch and reconcile now. False when there is no such app.
    pub fn trigger(&self, app: &str) -> bool {
        self.send(app, false)
    }

    /// Asks `app` for a manual sync now: a fetch and reconcile that sync windows with
    /// `manualSync: true` let through. False when there is no such app.
    pub fn manual_sync(&self, app: &str) -> bool {
        self.send(app, true)
    }

    fn send(&self, app: &str, manual: bool) -> bool {
        match self.triggers.get(app) {
            Some(r) => {
                r.request(if manual { MANUAL } else { FETCH });
                true
            }
            None => false,
        }
    }

    /// Asks `app`'s previews for a pass now (a pull-request webhook). False when the app has
    /// no previews. Requests made during a pass collapse into one more pass.
    pub fn trigger_previews(&self, app: &str) -> bool {
        match self.previews.get(app) {
            Some(n) => {
                n.notify_one();
                true
            }
            None => false,
        }
    }

    /// Which apps have finished their first reconcile.
    pub fn readiness(&self) -> &Readiness {
        &self.readiness
    }

    /// The statuses this agent last computed, for when the store cannot be read.
    pub fn latest(&self) -> &Latest {
        &self.latest
    }
}

/// The running agent: one loop per app, one store watch feeding them.
pub struct Agent {
    store: Arc<dyn Store>,
    apps: Vec<App>,
    previews: Vec<Previews>,
    gates: HashMap<String, Gate>,
    coordinated: Option<watch::Receiver<bool>>,
}

impl Agent {
    /// An agent running these apps (loaded with [`App::load`], which all share one claim lock)
    /// against `store`.
    pub fn new(store: Arc<dyn Store>, apps: Vec<App>) -> Self {
        Self {
            store,
            apps,
            previews: Vec::new(),
            gates: HashMap::new(),
            coordinated: None,
        }
    }

    /// Runs each app (and its previews) only while its gate is open: with etcd replicas, while
    /// this replica holds the app's lease. An app without a gate always runs. On taking an app
    /// the loop reads the state the previous holder left ([`App::take_over`]) and reconciles
    /// with a fetch; on losing it, it stops after the reconcile in progress, whose writes the
    /// fenced store refuses.
    ///
    /// `coordinated` turns true once the replicas know who holds what: until then an app this
    /// replica stands by for keeps `/readyz` waiting.
    pub fn with_gates(
        mut self,
        gates: HashMap<String, Gate>,
        coordinated: watch::Receiver<bool>,
    ) -> Self {
        self.gates = gates;
        self.coordinated = Some(coordinated);
        self
    }

    /// Also runs these apps' pull-request previews, each in its own task beside its app's loop.
    pub fn with_previews(mut self, previews: Vec<Previews>) -> Self {
        self.previews = previews;
        self
    }

    /// Starts the agent: watches the store and runs each app's loop until `shutdown` becomes
    /// true. Returns a handle for manual triggers and the task, which ends once every loop has
    /// finished its current reconcile.
    pub fn spawn(self, shutdown: watch::Receiver<bool>) -> (Handle, tokio::task::JoinHandle<()>) {
        let mut feeds = Vec::new();
        let mut triggers = HashMap::new();
        let mut loops = Vec::new();
        let readiness = Arc::new(Readiness::new(
            self.apps.iter().map(|a| a.name().to_string()),
        ));
        let gates = self.gates;
        let latest = Arc::new(Latest::default());
        let mut previews = HashMap::new();
        let mut preview_loops = Vec::new();
        for p in self.previews {
            let notify = Arc::new(Notify::new());
            previews.insert(p.name().to_string(), notify.clone());
            // The app's gate is shared: cloned for the app loop below.
            let gate = gates.get(p.name()).cloned();
            preview_loops.push((p, notify, shutdown.clone(), gate));
        }
        for app in self.apps {
            let requested = Arc::new(Requested::default());
            triggers.insert(app.name().to_string(), requested.clone());
            let pending = Arc::new(Pending {
                inventory: Some(crate::sync::Inventory::record_key(app.name())),
                ..Pending::default()
            });
            let mut app = app;
            app.share_interest(pending.interest.clone());
            let preview_notify = previews.get(app.name()).cloned();
            feeds.push(pending.clone());
            loops.push(AppLoop {
                coordinated: self.coordinated.clone(),
                gate: gates.get(app.name()).cloned(),
                app: app.with_stop(shutdown.clone()),
                pending,
                previews: preview_notify,
                requested,
                shutdown: shutdown.clone(),
                readiness: readiness.clone(),
                latest: latest.clone(),
            });
        }
        let store = self.store;
        let mut stop = shutdown.clone();
        let task = async move {
            let start = loop {
                match store.revision().await {
                    Ok(r) => break r,
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "Store unreachable; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(BACKOFF_MIN) => {}
                            _ = stop.changed() => return,
                        }
                    }
                }
            };
            let backend = store.backend();
            let watcher = tokio::spawn(
                watch_store(store, start, feeds, shutdown)
                    .instrument(tracing::info_span!("store_watch_loop", backend)),
            );
            let mut tasks = Vec::new();
            for l in loops {
                let span = tracing::info_span!("app", app = %l.app.name());
                tasks.push(tokio::spawn(l.run().instrument(span)));
            }
            for (p, notify, shutdown, gate) in preview_loops {
                let span = tracing::info_span!("previews", app = %p.name());
                tasks.push(tokio::spawn(
                    run_previews(p, notify, shutdown, gate).instrument(span),
                ));
            }
            for t in tasks {
                let _ = t.await;
            }
            let _ = watcher.await;
        };
        let join = tokio::spawn(task.instrument(tracing::info_span!("agent")));
        (
            Handle {
                triggers,
                previews,
                readiness,
                latest,
            },
            join,
        )
    }
}

/// One app's preview loop: a pass at every poll interval and on request (a pull-request
/// webhook), until shutdown (which abandons a pass in progress: each of its writes is a
/// transaction of its own, and the next start redoes what is missing).
async fn run_previews(
    mut previews: Previews,
    requested: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
    mut gate: Option<Gate>,
) {
    let mut next = Instant::now();
    loop {
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep_until(next) => {}
            _ = requested.notified() => {}
        }
        if let Some(g) = &mut gate
            && g.borrow_and_update().is_none()
        {
            // Another replica holds the app and runs its previews.
            tokio::select! {
                biased;
                _ = shutdown.changed() => break,
                r = g.wait_for(Option::is_some) => if r.is_err() { break },
            }
        }
        let report = tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            r = previews.pass() => r,
        };
        if !report.planned.is_empty() || !report.removed.is_empty() {
            tracing::info!(planned = ?report.planned, removed = ?report.removed, skipped = ?report.skipped, "Preview pass");
        }
        // A pass that waited for the app's first revision (`report.waiting`) runs again when
        // the app has applied one (its loop asks), or at the interval.
        next = Instant::now() + previews.interval();
    }
    tracing::info!("Previews stopped");
}

/// Follows the store's change feed and hands it to the app loops (each coalesces what it has
/// not looked at yet), resuming after errors.
async fn watch_store(
    store: Arc<dyn Store>,
    mut from: u64,
    feeds: Vec<Arc<Pending>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let by_inventory: HashMap<ObjectKey, Arc<Pending>> = feeds
        .iter()
        .filter_map(|f| f.inventory.clone().map(|k| (k, f.clone())))
        .collect();
    let mut backoff = Backoff::default();
    loop {
        match store.watch(from).await {
            Ok(mut w) => loop {
                tokio::select! {
                    item = w.recv() => match item {
                        Some(Ok(item)) => {
                            backoff.reset();
                            match &item {
                                // Resume from the previous revision: events of one revision
                                // may be split across a reconnect; duplicates are harmless.
                                WatchItem::Event(e) => from = e.revision.saturating_sub(1),
                                WatchItem::Relist { revision }
                                | WatchItem::Bookmark { revision } => from = *revision,
                            }
                            match &item {
                                // A record (inventories, statuses, the ownership index)
                                // concerns at most the app whose inventory it is: one lookup,
                                // not one look per app (1,000 apps each write a status record
                                // on a push).
                                WatchItem::Event(e) if e.key.is_reserved() => {
                                    if let Some(f) = by_inventory.get(&e.key) {
                                        f.add(&item);
                                    }
                                }
                                _ => {
                                    for f in &feeds {
                                        f.add(&item);
                                    }
                                }
                            }
                        }
                        Some(Err(e)) => {
                            tracing::warn!(error = %error_chain(&e), "Store watch failed; resuming");
                            break;
                        }
                        None => break,
                    },
                    _ = shutdown.changed() => return,
                }
            },
            Err(e) => tracing::warn!(error = %error_chain(&e), "Cannot watch the store; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.fail()) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Resolves when the replicas first know who holds what (never without replicas).
async fn coordinated_turns_true(coordinated: &mut Option<watch::Receiver<bool>>) {
    match coordinated {
        Some(c) => {
            let _ = c.wait_for(|known| *known).await;
        }
        None => std::future::pending().await,
    }
}

/// Resolves when `gate` closes (never without a gate).
async fn gate_closes(gate: &mut Option<Gate>) {
    match gate {
        Some(g) => {
            let _ = g.wait_for(Option::is_none).await;
        }
        None => std::future::pending().await,
    }
}

/// One app's loop: waits for a trigger, reconciles, repeats until shutdown.
struct AppLoop {
    app: App,
    /// With etcd replicas: run only while this replica holds the app.
    gate: Option<Gate>,
    /// With etcd replicas: true once the replicas know who holds what.
    coordinated: Option<watch::Receiver<bool>>,
    pending: Arc<Pending>,
    /// The app's preview loop, asked for a pass once the app has first applied a revision
    /// (previews are diffs against it).
    previews: Option<Arc<Notify>>,
    requested: Arc<Requested>,
    shutdown: watch::Receiver<bool>,
    readiness: Arc<Readiness>,
    latest: Arc<Latest>,
}

impl AppLoop {
    async fn run(mut self) {
        // No reconcile waits for the status record (see `status_writer`).
        self.app.defer_status_writes();
        let mut gate = self.gate.take();
        if gate.is_none() {
            self.app.announce().await;
        }
        let mut holding = gate.is_none();
        let mut published: Option<u64> = None;
        // The first pass fetches at once; then each reconcile says when to run again.
        let mut next = Action {
            at: std::time::Instant::now(),
            trigger: Trigger::Fetch,
            why: Requeue::Poll,
        };
        let mut last_requested: Option<Instant> = None;
        loop {
            if *self.shutdown.borrow() {
                break;
            }
            if let Some(g) = &mut gate
                && g.borrow_and_update().is_none()
            {
                if holding {
                    tracing::warn!("This replica no longer holds the app; standing by");
                    // What was pending is tried once (the holder writes from now on).
                    self.app.finish().await;
                    holding = false;
                }
                self.latest.stand_by(self.app.name());
                published = None;
                // A standby replica is ready once it knows who holds what: it serves, and takes
                // the app when it is free.
                let known = self.coordinated.as_ref().is_none_or(|c| *c.borrow());
                if known {
                    self.readiness.done(self.app.name());
                }
                tokio::select! {
                    biased;
                    _ = self.shutdown.changed() => break,
                    r = g.wait_for(Option::is_some) => if r.is_err() { break },
                    _ = coordinated_turns_true(&mut self.coordinated), if !known => continue,
                }
                tracing::info!("This replica holds the app now; taking it over");
                self.app.defer_status_writes();
                self.app.take_over().await;
                self.app.announce().await;
                holding = true;
                // What the feed said while standing by is covered by the full reconcile now.
                self.pending.take();
                self.app.fetch_now();
                next = Action {
                    at: std::time::Instant::now(),
                    trigger: Trigger::Fetch,
                    why: Requeue::Poll,
                };
                continue;
            }
            let trigger = tokio::select! {
                biased;
                _ = self.shutdown.changed() => break,
                _ = gate_closes(&mut gate) => continue,
                _ = tokio::time::sleep_until(next.at.into()) => next.trigger.clone(),
                _ = self.requested.notify.notified() => {
                    // At most one requested fetch per REQUEST_SPACING: a flood of webhooks or
                    // sync calls becomes one fetch a second, whatever its size.
                    if let Some(last) = last_requested {
                        tokio::select! {
                            biased;
                            _ = self.shutdown.changed() => break,
                            _ = tokio::time::sleep_until(last + REQUEST_SPACING) => {}
                        }
                    }
                    match self.requested.take() {
                        Some(t) => {
                            last_requested = Some(Instant::now());
                            t
                        }
                        None => continue,
                    }
                }
                _ = self.pending.notify.notified() => match self.collect() {
                    Some(t) => t,
                    None => continue,
                },
            };
            let applied_before = self.app.status().revision.is_some();
            let (action, _report) = self.app.reconcile(trigger).await;
            tracing::trace!(at = ?action.at, trigger = ?action.trigger, why = ?action.why, "Next reconcile");
            next = action;
            if !applied_before
                && self.app.status().revision.is_some()
                && let Some(p) = &self.previews
            {
                p.notify_one();
            }
            self.readiness.done(self.app.name());
            // Copy the status (it holds every object) only when it changed.
            if published != Some(self.app.status_changes()) {
                self.latest.publish(self.app.status_snapshot());
                published = Some(self.app.status_changes());
            }
        }
        // Only a replica that holds the app writes for it.
        if holding {
            self.app.stop().await;
        } else {
            self.app.finish().await;
        }
        tracing::info!("Stopped");
    }

    /// Turns the pending changes into a trigger (or nothing when none concerns this app).
    fn collect(&mut self) -> Option<Trigger> {
        let changes = self.pending.take();
        if changes.all {
            tracing::info!("Change feed relisted; enforcing every object");
            return Some(Trigger::Enforce);
        }
        let keys: BTreeSet<ObjectKey> = changes
            .keys
            .into_iter()
            .filter(|(k, rev)| self.app.cares_about(k, *rev))
            .map(|(k, _)| k)
            .collect();
        (!keys.is_empty()).then_some(Trigger::Keys(keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_collapse_and_a_manual_one_wins() {
        let r = Requested::default();
        assert_eq!(r.take(), None);
        for _ in 0..100 {
            r.request(FETCH);
        }
        assert_eq!(r.take(), Some(Trigger::Fetch));
        assert_eq!(r.take(), None, "a hundred webhooks are one fetch");
        r.request(FETCH);
        r.request(MANUAL);
        r.request(FETCH);
        assert_eq!(r.take(), Some(Trigger::Manual), "a manual sync is not lost");
        assert_eq!(r.take(), None);
    }

    fn event(name: &str, revision: u64) -> WatchItem {
        WatchItem::Event(crate::store::Event {
            revision,
            key: ObjectKey::new("", "ConfigMap", "default", name),
            deleted: false,
        })
    }

    #[test]
    fn a_flood_of_changes_to_a_few_objects_is_one_entry_each_with_the_newest_revision() {
        let p = Pending::default();
        for rev in 1..=100_000u64 {
            p.add(&event(&format!("o{}", rev % 20), rev));
        }
        let c = p.take();
        assert!(!c.all);
        assert_eq!(c.keys.len(), 20, "coalesced by key, nothing dropped");
        assert!(c.keys.values().all(|r| *r > 100_000 - 20));
        assert!(p.take().keys.is_empty(), "taken once");
    }

    #[test]
    fn changes_of_other_apps_objects_are_neither_held_nor_woken_for() {
        let p = Pending {
            inventory: Some(crate::sync::Inventory::record_key("web")),
            ..Pending::default()
        };
        // Before the app says what it cares about, everything passes.
        p.add(&event("other", 1));
        assert_eq!(p.take().keys.len(), 1);
        let mine = match event("mine", 0) {
            WatchItem::Event(e) => e.key,
            _ => unreachable!(),
        };
        *p.interest.write().unwrap() = Some(Arc::new([mine.clone()].into_iter().collect()));
        for rev in 2..1000 {
            p.add(&event(&format!("other-{rev}"), rev));
        }
        p.add(&event("mine", 1000));
        p.add(&WatchItem::Event(crate::store::Event {
            revision: 1001,
            key: crate::sync::Inventory::record_key("web"),
            deleted: false,
        }));
        p.add(&WatchItem::Event(crate::store::Event {
            revision: 1002,
            key: crate::sync::Inventory::record_key("api"),
            deleted: false,
        }));
        let c = p.take();
        let keys: Vec<&ObjectKey> = c.keys.keys().collect();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(c.keys.contains_key(&mine));
        assert!(
            c.keys
                .contains_key(&crate::sync::Inventory::record_key("web"))
        );
        // A relist still reaches every app.
        p.add(&WatchItem::Relist { revision: 2000 });
        assert!(p.take().all);
    }

    #[test]
    fn too_many_distinct_keys_or_a_relist_become_one_pass_over_everything() {
        let p = Pending::default();
        for rev in 0..=PENDING_MAX_KEYS as u64 {
            p.add(&event(&format!("o{rev}"), rev));
        }
        let c = p.take();
        assert!(c.all && c.keys.is_empty(), "bounded memory");
        p.add(&event("a", 1));
        p.add(&WatchItem::Relist { revision: 2 });
        p.add(&event("b", 3));
        let c = p.take();
        assert!(c.all && c.keys.is_empty());
    }

    #[test]
    fn readiness_waits_for_every_app_once() {
        let r = Readiness::new(["a".to_string(), "b".to_string()]);
        assert_eq!(r.waiting(), vec!["a", "b"]);
        r.done("a");
        r.done("a");
        assert_eq!(r.waiting(), vec!["b"]);
        r.done("b");
        assert!(r.waiting().is_empty());
    }
}
