//! One app's reconcile: fetch, parse, plan, apply, assess, and the status it records.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::conditions::{self, Problem};
use super::revision;
use super::{Action, Backoff, Error, Failure, Fights, Report, Requeue, Trigger, error_chain};
use crate::config::AppConfig;
use crate::diff::{Action as Step, PlanOptions};
use crate::health::{self, Health};
use crate::manifest::Diagnostic;
use crate::object::{Object, ObjectKey, Revision};
use crate::render::Render;
use crate::source::{self, GitCache};
use crate::status::{
    self, AppStatus, ConditionStatus, ConditionType, Reason, ResourceStatus, SyncStatus,
    set_condition,
};
use crate::store::{self, Store};
use crate::sync::{self, Inventory};
use crate::window::{self, Window};

/// Where an app publishes the keys it cares about for the agent's change feed (see
/// [`App::share_interest`]); `None` until it is shared: every change passes.
pub type Interest = Arc<std::sync::RwLock<Option<Arc<BTreeSet<ObjectKey>>>>>;

/// Why the fetch stage ended early. Its problem (`SourceAvailable=False`) is already recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FetchFailed {
    /// The agent is stopping: the fetch was abandoned; nothing is written.
    Stopping,
    /// The source could not be fetched or read: the error policy backs the fetch off.
    Source,
}

/// The desired set in force.
#[derive(Clone, Debug)]
struct InForce {
    revision: Revision,
    /// [`App::source_identity`] of the config it was read with (from the inventory after a
    /// restart; empty when the record predates it, which forces a fresh read).
    source: String,
    /// Tree id at the app's path, when known: an equal tree needs no parsing.
    tree_id: Option<String>,
    /// [`crate::render::Prepared::reuse_key`] of what `desired` was read from, when it has
    /// one and the read reported nothing: written in the [`sync::Persisted`] record, so that
    /// a new process may take the set up from the inventory instead of reading it again.
    reuse: Option<String>,
    /// Shared: cloning the state in force must not copy every object.
    desired: Arc<BTreeMap<ObjectKey, Object>>,
    /// True when `desired` was restored from the inventory (a restart, a takeover, another
    /// process's sync): it holds what was applied, not what the revision declares (an object
    /// refused as a conflict is missing from it), so the next fetch reads the revision again
    /// even when it is the same one.
    restored: bool,
}

/// One app's reconciler: its config, the state it keeps between passes, and the handles it
/// needs. Reconciles are run one at a time per app.
pub struct App {
    cfg: AppConfig,
    store: Arc<dyn Store>,
    git: GitCache,
    /// Serializes the syncs of all apps of this agent, so two apps never both claim a new key.
    claim: Arc<Mutex<()>>,
    dry_run: bool,
    in_force: Option<InForce>,
    /// The revision recorded in the inventory (applied), to tell a new revision from drift.
    applied: Option<Revision>,
    /// Keys this app cares about: declared in force, or in its inventory. Shared with the
    /// agent's change feed through [`App::share_interest`].
    owned: Arc<BTreeSet<ObjectKey>>,
    /// Where the agent's change feed reads [`App::owned`] from, to pass on only the changes of
    /// those keys (and of this app's own records).
    interest: Option<Interest>,
    /// The desired set `owned` was last computed from with the inventory then held; `None`
    /// when it must be computed again at the next full pass.
    owned_from: Option<Arc<BTreeMap<ObjectKey, Object>>>,
    /// The app's inventory as of its last sync: change-feed syncs use it instead of reading
    /// and parsing the record again (a stale copy fails compare-and-swap and is re-read).
    inventory: Option<Inventory>,
    last_attempted: Option<Revision>,
    diagnostics: Vec<Diagnostic>,
    problem: Option<Problem>,
    sync_error: Option<String>,
    resources: BTreeMap<ObjectKey, Arc<ResourceStatus>>,
    /// True when `resources` changed since the status was last written.
    resources_dirty: bool,
    conflicts: BTreeMap<ObjectKey, String>,
    prune_blocked: Option<String>,
    /// Objects this app wrote, with the revision of the write: their change events are echoes.
    self_writes: crate::object::KeyMap<u64>,
    status: AppStatus,
    written: Option<Arc<AppStatus>>,
    /// The status as of the last change counted, shared ([`App::status_snapshot`]).
    snapshot: Option<Arc<AppStatus>>,
    /// In the running agent: writes the status record off the reconcile path.
    status_writer: Option<super::status_writer::StatusWriter>,
    /// How many times the status differed from the record written (whether or not the write
    /// took): lets a watcher copy the status only when it changed.
    status_changes: u64,
    backoff: Backoff,
    source_message: Option<String>,
    /// Commit statuses, when the app has a `status` section.
    reporter: Option<crate::report::Reporter>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
    health_rules: health::CustomRules,
    /// Becomes true when the agent stops: a fetch in progress is abandoned (it writes nothing
    /// the next start cannot redo).
    stop: Option<tokio::sync::watch::Receiver<bool>>,
    /// Set by a sync refused with [`sync::Error::Superseded`]; the reconcile adopts and
    /// fetches again.
    superseded: bool,
    /// The app's sync windows, and their state at the last reconcile.
    windows: Vec<Window>,
    window_state: Option<window::State>,
    /// True during a reconcile a person asked for.
    manual: bool,
    /// Objects another writer keeps changing back, and the reverts held for them.
    fights: Fights,
    held_keys: BTreeSet<ObjectKey>,
    /// The newest revision a sync window held back, once logged.
    held_revision: Option<Revision>,
    /// The progress clock and the start of a fought-over gap ([`conditions::Clocks`]).
    clocks: conditions::Clocks,
    /// When the next fetch is due: the poll interval after a good fetch, the backoff after a
    /// failure; now at the start.
    next_fetch: std::time::Instant,
    /// Files → desired set, with the parse cache of the newest tree.
    render: Render,
    /// With `source.verify`: the keys a commit must be signed by to be applied.
    signers: Option<Arc<source::Trust>>,
    /// What the last sync of the desired set in force found as declared (the set it holds
    /// for, by identity): the next pass skips what has not moved since ([`sync::Verified`]).
    verified: Option<(Arc<BTreeMap<ObjectKey, Object>>, sync::Verified)>,
    /// The last process's [`sync::Persisted`] record, read at load and looked at once, at the
    /// first fetch ([`App::restore_verified`]).
    persisted: Option<sync::Persisted>,
    /// The record as last written (or read): a pass writes it only when it changed.
    persisted_last: Option<sync::Persisted>,
    /// [`sync::desired_digest`] of a desired set, by identity (computed once per set, on a
    /// thread of its own from the moment the set is read: [`App::start_digest`]).
    digest: Option<(Arc<BTreeMap<ObjectKey, Object>>, Digest)>,
    /// The JSON of a new desired set's objects, made by its digest's thread for the sync that
    /// applies it ([`sync::EntriesAhead`]); dropped after that sync.
    entries_ahead: Option<(Arc<BTreeMap<ObjectKey, Object>>, sync::EntriesAhead)>,
    /// Counts changes of `verified`; `persisted_at` is the count the record was last written
    /// (or found current) at, so that a pass that changed nothing does not build it again.
    verified_changes: u64,
    persisted_at: Option<u64>,
    /// The status record's resourceVersion as this process last read or wrote it inline;
    /// `None` once it is handed to the status writer (not known to be written yet).
    status_rv: Option<u64>,
    /// The last pass neither failed to fetch nor to reach the store: what it found may be
    /// recorded for the next process when the agent stops ([`App::stop`]).
    last_pass_clean: bool,
}

/// How a resource's message starts after a revert that named who changed the object.
const APPLIED_OVER: &str = "applied over changes by ";

/// Desired sets of fewer objects have their digest made when needed, not on a thread of
/// their own ([`App::start_digest`]): an agent of 1,000 small apps starts no 1,000 threads.
const DIGEST_APART: usize = 512;

/// A desired set's digest ([`App::digest_of`]): made, being made on its own thread, or lost
/// with that thread (a panic: made again when needed).
enum Digest {
    Ready(String),
    Making(std::thread::JoinHandle<String>),
    Lost,
}

impl Digest {
    /// The digest, once its thread has ended (waited for); `None` when that thread panicked.
    fn ready(&mut self) -> Option<String> {
        if let Digest::Making(_) = self
            && let Digest::Making(handle) = std::mem::replace(self, Digest::Lost)
            && let Ok(digest) = handle.join()
        {
            *self = Digest::Ready(digest);
        }
        match self {
            Digest::Ready(d) => Some(d.clone()),
            Digest::Making(_) | Digest::Lost => None,
        }
    }
}

impl App {
    /// Loads an app's state from the store: its inventory (the desired set in force after a
    /// restart) and its last status record (so condition times carry over).
    ///
    /// # Errors
    ///
    /// [`Error::LoadFailed`], [`Error::StatusUnreadable`].
    pub async fn load(
        cfg: AppConfig,
        store: Arc<dyn Store>,
        git: GitCache,
        claim: Arc<Mutex<()>>,
        dry_run: bool,
    ) -> Result<Self, Error> {
        let name = cfg.name.value.clone();
        git.expect(&cfg.source.repo.value, cfg.source.reference.as_deref());
        let inventory = Inventory::load(store.as_ref(), &name)
            .await
            .map_err(|source| Error::LoadFailed {
                app: name.clone(),
                source,
            })?;
        let written = status::read_versioned(store.as_ref(), &name)
            .await
            .map_err(|source| Error::StatusUnreadable {
                app: name.clone(),
                source,
            })?;
        let status_rv = written.as_ref().map(|(_, rv)| *rv);
        let written = written.map(|(s, _)| s);
        let in_force = inventory.revision.clone().map(|revision| InForce {
            revision,
            source: inventory.source.clone().unwrap_or_default(),
            tree_id: None,
            reuse: None,
            desired: Arc::new(inventory.desired()),
            restored: true,
        });
        let mut status = written.clone().unwrap_or_else(|| AppStatus::new(&name));
        status.name = name.clone();
        let windows = cfg
            .sync
            .windows
            .iter()
            .filter_map(|w| match Window::new(w) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(error = %error_chain(&e), "Sync window ignored");
                    None
                }
            })
            .collect();
        let retry = &cfg.sync.retry;
        let backoff = Backoff::new(retry.backoff.value, retry.factor, retry.max_backoff.value);
        let progressing_since = status
            .progressing_since
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339(t).ok());
        let resources = status
            .resources
            .iter()
            .map(|r| (r.key(), r.clone()))
            .collect();
        let render = Render::for_app(&cfg);
        // A record that cannot be read or parsed is only a missed shortcut.
        let persisted = match store.get(&sync::Persisted::record_key(&name)).await {
            Ok(Some(o)) => sync::Persisted::from_record(&o),
            Ok(None) => None,
            Err(e) => {
                tracing::debug!(error = %error_chain(&e), "Verified record not read; every object is planned");
                None
            }
        };
        Ok(Self {
            owned: Arc::new(inventory.entries.keys().cloned().collect()),
            interest: None,
            owned_from: None,
            applied: inventory.revision.clone(),
            inventory: Some(inventory.clone()),
            last_attempted: status.last_attempted_revision.clone().map(Revision),
            in_force,
            cfg,
            store,
            git,
            claim,
            dry_run,
            diagnostics: Vec::new(),
            problem: None,
            sync_error: None,
            resources,
            resources_dirty: false,
            conflicts: BTreeMap::new(),
            prune_blocked: None,
            self_writes: Default::default(),
            status,
            written: written.map(Arc::new),
            status_changes: 0,
            backoff,
            source_message: None,
            windows,
            window_state: None,
            manual: false,
            fights: Fights::default(),

            held_keys: BTreeSet::new(),
            next_fetch: std::time::Instant::now(),
            held_revision: None,
            clocks: conditions::Clocks {
                progressing_since,
                fight_gap_start: None,
            },
            render,
            signers: None,
            verified: None,
            persisted_last: persisted.clone(),
            persisted,
            digest: None,
            entries_ahead: None,
            verified_changes: 0,
            persisted_at: None,
            status_rv,
            last_pass_clean: false,
            status_writer: None,
            snapshot: None,
            reporter: None,
            metrics: None,
            health_rules: health::CustomRules::none(),
            stop: None,
            superseded: false,
        })
    }

    /// Applies only commits signed by a key `signers` trusts (`source.verify`).
    pub fn with_signers(mut self, signers: Arc<source::Trust>) -> Self {
        self.signers = Some(signers);
        self
    }

    /// Assesses health with these custom rules before the built-in ones.
    pub fn with_health_rules(mut self, rules: health::CustomRules) -> Self {
        self.health_rules = rules;
        self
    }

    /// Writes the status record from a task of its own (the running agent), so that no
    /// reconcile waits for it; see [`super::status_writer`]. Call [`App::finish`] before
    /// the process ends. Needs a Tokio runtime.
    pub fn defer_status_writes(&mut self) {
        if self.status_writer.is_none() {
            self.status_writer = Some(super::status_writer::StatusWriter::spawn(
                self.store.clone(),
            ));
        }
    }

    /// Writes what status is pending (deferred writes), then stops writing from a task. When
    /// the last status handed over is the one written, its resourceVersion is known again.
    pub async fn finish(&mut self) {
        if let Some(w) = self.status_writer.take() {
            let written = w.finish().await;
            if let (Some((status, rv)), Some(handed)) = (written, &self.written)
                && Arc::ptr_eq(&status, handed)
            {
                self.status_rv = Some(rv);
            }
        }
    }

    /// The agent's end for this app: [`Self::finish`], then the [`sync::Persisted`] record
    /// of what its passes found as declared, written as a one-shot `driftless sync` writes it
    /// after each pass. The agent hands its statuses to the status writer, whose records'
    /// versions a pass does not know, so without this a restarted agent found no record and
    /// parsed the revision and read every object again (10,000 objects: 127 MiB at start
    /// instead of 44). Only after a pass that fetched and reached the store, and only when
    /// the status written last is the newest (its version is what the record names).
    pub async fn stop(&mut self) {
        self.finish().await;
        if self.last_pass_clean && !self.dry_run {
            self.persist_verified().await;
        }
    }

    /// Abandons a fetch in progress when `stop` becomes true.
    pub fn with_stop(mut self, stop: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stop = Some(stop);
        self
    }

    fn stopping(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| *s.borrow())
    }

    /// Reports commit statuses through `reporter`.
    pub fn with_reporter(mut self, reporter: crate::report::Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Records metrics in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.cfg.name.value
    }

    /// True after a failed reconcile not yet followed by a good one.
    pub fn failing(&self) -> bool {
        self.backoff.failing()
    }

    /// Ends a one-shot command's use of this app, before the process exits: the handles that
    /// must be closed (the store's connection, whose last close removes SQLite's log; the
    /// status writer) are dropped as usual, while the objects it holds (the desired set, the
    /// inventory, the resources' status: tens of MB at 10,000 objects) are left to the exit,
    /// which returns the memory at once: freeing them one by one took 40 ms of CPU beside the
    /// store's last checkpoint (issue 18). Not for an app the process goes on without.
    pub fn leave_to_exit(mut self) {
        let objects = (
            self.in_force.take(),
            std::mem::take(&mut self.owned),
            self.owned_from.take(),
            self.inventory.take(),
            std::mem::take(&mut self.resources),
            std::mem::take(&mut self.status.resources),
            self.written.take(),
            self.snapshot.take(),
            self.verified.take(),
            self.digest.take(),
            self.entries_ahead.take(),
            std::mem::take(&mut self.self_writes),
            std::mem::take(&mut self.render),
        );
        std::mem::forget(objects);
    }

    /// The status as last computed.
    pub fn status(&self) -> &AppStatus {
        &self.status
    }

    /// A shared copy of the status as of the last [`App::status_changes`] count (the one
    /// handed to the record's writer): publishing it copies nothing.
    pub fn status_snapshot(&self) -> Arc<AppStatus> {
        match &self.snapshot {
            Some(s) => s.clone(),
            None => Arc::new(self.status.clone()),
        }
    }

    /// A counter that moves whenever the computed status differs from the record written
    /// (also when writing it failed): a copy of [`App::status`] taken at the same count is
    /// still current.
    pub fn status_changes(&self) -> u64 {
        self.status_changes
    }

    /// Shares the keys this app cares about with the agent's change feed (`slot`), now and
    /// whenever they change: the feed then keeps only changes of those keys and of this app's
    /// inventory record, instead of every change of every app (with 1,000 apps, each would
    /// otherwise hold the keys of all the others until it looked).
    pub fn share_interest(&mut self, slot: Interest) {
        *slot.write().unwrap_or_else(|e| e.into_inner()) = Some(self.owned.clone());
        self.interest = Some(slot);
    }

    fn set_owned(&mut self, owned: BTreeSet<ObjectKey>) {
        self.owned = Arc::new(owned);
        if let Some(slot) = &self.interest {
            *slot.write().unwrap_or_else(|e| e.into_inner()) = Some(self.owned.clone());
        }
    }

    /// The keys of `desired` and of the inventory are the ones this app cares about: both in
    /// order, merged into one sorted list without a key twice (after a sync they are mostly the
    /// same 10,000), from which the set is built in one pass.
    fn own(&mut self, desired: &Arc<BTreeMap<ObjectKey, Object>>) {
        let inventoried = self.inventory.iter().flat_map(|i| i.entries.keys());
        let keys = crate::object::sorted_union(desired.keys(), inventoried);
        self.set_owned(keys.into_iter().collect());
        self.owned_from = Some(desired.clone());
    }

    /// True when a change of `key` at store revision `revision` concerns this app and is not
    /// the echo of its own write.
    pub fn cares_about(&self, key: &ObjectKey, revision: u64) -> bool {
        if *key == Inventory::record_key(self.name()) {
            // Another process (`driftless sync`) wrote this app's inventory.
            return self.inventory.as_ref().and_then(|i| i.resource_version) != Some(revision);
        }
        self.owned.contains(key) && self.self_writes.get(key) != Some(&revision)
    }

    /// Adopts the inventory another process wrote (a `driftless sync` beside the agent): what
    /// it applied is now what this app has applied, and a full pass follows. The revision in
    /// force stays this app's own when it has one (a newer commit it fetched is still applied
    /// when it may be).
    async fn adopt_inventory(&mut self) {
        match Inventory::load(self.store.as_ref(), self.name()).await {
            Ok(inv) => {
                tracing::info!(revision = %inv.revision.as_ref().map_or("(none)", Revision::short), "Inventory written by another process; adopting it");
                if self.in_force.is_none()
                    && let Some(revision) = &inv.revision
                {
                    self.in_force = Some(InForce {
                        revision: revision.clone(),
                        source: inv.source.clone().unwrap_or_default(),
                        tree_id: None,
                        reuse: None,
                        desired: Arc::new(inv.desired()),
                        restored: true,
                    });
                }
                self.applied = inv.revision.clone();
                let mut owned = (*self.owned).clone();
                owned.extend(inv.entries.keys().cloned());
                self.set_owned(owned);
                self.owned_from = None;
                self.inventory = Some(inv);
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot read the inventory another process wrote");
                self.inventory = None;
            }
        }
    }

    /// Takes the app over from another replica (etcd replicas): reads the inventory and the
    /// status record it left, so that what is in force is what the store holds, not what this
    /// replica last saw, and forgets its own echoes and fights. The reconcile that follows
    /// fetches.
    pub async fn take_over(&mut self) {
        match Inventory::load(self.store.as_ref(), self.name()).await {
            Ok(inv) => {
                self.in_force = inv.revision.clone().map(|revision| InForce {
                    revision,
                    source: inv.source.clone().unwrap_or_default(),
                    tree_id: None,
                    reuse: None,
                    desired: Arc::new(inv.desired()),
                    restored: true,
                });
                self.applied = inv.revision.clone();
                self.set_owned(inv.entries.keys().cloned().collect());
                self.owned_from = None;
                self.inventory = Some(inv);
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot read the inventory left by the previous holder; the next reconcile reads it again");
                self.inventory = None;
            }
        }
        match status::read(self.store.as_ref(), self.name()).await {
            Ok(written) => self.written = written.map(Arc::new),
            Err(e) => tracing::warn!(error = %error_chain(&e), "Cannot read the status record"),
        }
        self.self_writes.clear();
        self.fights = Fights::default();
        self.held_keys.clear();
    }

    /// Makes the app visible before its first reconcile ends (which a slow source can delay
    /// up to `source.timeout`): an app with no status record yet gets one saying it is
    /// initializing (`Ready=False`/`Initializing`, `Reconciling=True`), and the metrics get
    /// its series. Writes nothing in dry-run mode.
    pub async fn announce(&mut self) {
        if self.dry_run {
            return;
        }
        if self.written.is_none() {
            let now = store::now_rfc3339();
            set_condition(
                &mut self.status.conditions,
                ConditionType::Ready,
                false,
                Reason::Initializing,
                "no revision applied yet: the first reconcile is in progress",
                &now,
            );
            set_condition(
                &mut self.status.conditions,
                ConditionType::Reconciling,
                true,
                Reason::Initializing,
                "fetching the source for the first time",
                &now,
            );
            self.write_status().await;
        }
        if let Some(m) = &self.metrics {
            m.observe_status(&self.status);
        }
    }

    /// Runs one reconcile and returns what to do next ([`Action`]: when to run again and
    /// why) with what this one did. Never fails: failures are recorded in the status and go
    /// through [`App::error_policy`] into the backoff.
    pub async fn reconcile(&mut self, trigger: Trigger) -> (Action, Report) {
        let started = std::time::Instant::now();
        let fetch = matches!(trigger, Trigger::Fetch | Trigger::Manual);
        let (result, report) = self.pass(trigger, started).await;
        // The entries' text made ahead serves this pass's sync only: a pass that stopped before
        // it (a set with errors, a held revision) does not keep it.
        self.entries_ahead = None;
        if let Some(m) = &self.metrics {
            m.reconcile_duration(self.name(), started.elapsed().as_secs_f64());
            m.observe_status(&self.status);
            for (manager, n) in &report.reverted_by {
                m.drift_reverted(self.name(), manager, *n);
            }
        }
        let now = std::time::Instant::now();
        match result {
            Ok(()) => {
                self.backoff.reset();
                if fetch {
                    self.next_fetch = now + self.cfg.source.interval.value;
                }
            }
            Err(failure) => self.error_policy(failure, fetch, now),
        }
        (self.next_action(now), report)
    }

    /// The one error policy: a failed pass backs off its retries (5 s doubling to
    /// `sync.retry.maxBackoff`); trouble writing the store backs off the retries but never the
    /// fetches, so a new commit is still fetched (and tried) every poll interval.
    fn error_policy(&mut self, failure: Failure, fetched: bool, now: std::time::Instant) {
        let backoff = self.backoff.fail();
        self.next_fetch = retry_at(
            failure,
            fetched,
            self.next_fetch,
            now,
            backoff,
            self.cfg.source.interval.value,
        );
        tracing::info!(retry_in = ?self.next_fetch.saturating_duration_since(now), "Reconcile failed; backing off");
    }

    /// What to do next: fetch when the poll (or retry) is due, or earlier, reconcile without
    /// fetching when something timed is due ([`App::next_wakeup`]).
    fn next_action(&self, now: std::time::Instant) -> Action {
        let fetch = Action {
            at: self.next_fetch.max(now),
            trigger: Trigger::Fetch,
            why: if self.backoff.failing() {
                Requeue::Retry
            } else {
                Requeue::Poll
            },
        };
        match self.next_wakeup() {
            Some((t, why)) if t < fetch.at => Action {
                at: t,
                trigger: Trigger::Wake,
                why,
            },
            _ => fetch,
        }
    }

    /// Asks for a fetch at the next turn (the app was just taken over from another replica).
    pub fn fetch_now(&mut self) {
        self.next_fetch = std::time::Instant::now();
    }

    /// One pass: what [`App::reconcile`] does before its error policy.
    async fn pass(
        &mut self,
        trigger: Trigger,
        started: std::time::Instant,
    ) -> (Result<(), Failure>, Report) {
        let mut report = Report::default();
        let mut fetch = matches!(trigger, Trigger::Fetch | Trigger::Manual);
        self.manual = trigger == Trigger::Manual;
        self.fights.expire(started);
        let mut scope = match trigger {
            Trigger::Keys(keys) => Some(keys),
            // Held reverts that are due now; otherwise a full pass (a window changed, a
            // deadline passed).
            Trigger::Wake => {
                let due: BTreeSet<ObjectKey> = self
                    .held_keys
                    .iter()
                    .filter(|k| !self.fights.held(k, started))
                    .cloned()
                    .collect();
                (!due.is_empty()).then_some(due)
            }
            _ => None,
        };
        // The inventory changed under us: adopt it and look at everything, after a fetch, so
        // that a newer commit another process (`driftless sync`) applied is not undone by the
        // older one this app had in force.
        if let Some(keys) = &mut scope
            && keys.remove(&Inventory::record_key(self.name()))
        {
            self.adopt_inventory().await;
            scope = None;
            fetch = true;
        }
        // Objects being fought over wait for their hold to end; they are still planned (the
        // sync holds their writes back), so that their status says they differ from Git.
        if let Some(keys) = &scope {
            for k in keys {
                if self.fights.held(k, started) {
                    self.held_keys.insert(k.clone());
                } else {
                    self.held_keys.remove(k);
                }
            }
        }
        if !self.windows.is_empty() {
            self.window_state = Some(window::state(&self.windows, chrono::Utc::now()));
        }
        let mut fetch_failed = false;
        if fetch {
            match self.fetch_and_parse(&mut report).await {
                Ok(()) => {}
                // A fetch that failed as the agent stops writes nothing either.
                Err(FetchFailed::Stopping) => return (Ok(()), report),
                Err(FetchFailed::Source) if self.stopping() => return (Ok(()), report),
                Err(FetchFailed::Source) => fetch_failed = true,
            }
        }
        let mut store_failed = false;
        if self.in_force.is_some() && self.enforce(scope.as_ref(), &mut report).await.is_err() {
            store_failed = true;
        }
        // Another process (a `driftless sync`) applied a revision since this app last read
        // the inventory: adopt it, fetch (the newest commit, which is never older than what
        // it applied), and apply that instead of rolling the app back. Once per reconcile.
        if std::mem::take(&mut self.superseded) {
            self.adopt_inventory().await;
            store_failed = false;
            match self.fetch_and_parse(&mut report).await {
                Ok(()) => {}
                // A fetch that failed as the agent stops writes nothing either.
                Err(FetchFailed::Stopping) => return (Ok(()), report),
                Err(FetchFailed::Source) if self.stopping() => return (Ok(()), report),
                Err(FetchFailed::Source) => fetch_failed = true,
            }
            if self.in_force.is_some() && self.enforce(None, &mut report).await.is_err() {
                store_failed = true;
                if std::mem::take(&mut self.superseded) {
                    self.sync_error = Some(
                        "other processes keep applying revisions to this app; retrying".into(),
                    );
                }
            }
        }
        self.compute_status();
        if !self.dry_run {
            self.report_commit_statuses(false);
            self.write_status().await;
            if scope.is_none() && !fetch_failed && !store_failed {
                self.persist_verified().await;
            }
            self.last_pass_clean = !fetch_failed && !store_failed;
        }
        let result = if fetch_failed {
            Err(Failure::Source)
        } else if store_failed {
            Err(Failure::Store)
        } else {
            Ok(())
        };
        (result, report)
    }

    /// True when a sync may write now: no sync window holds the app, or one does and a person
    /// asked for this sync and every holding window allows manual syncs.
    fn may_apply(&self) -> bool {
        self.window_state
            .as_ref()
            .is_none_or(|w| w.automatic || (self.manual && w.manual))
    }

    /// When something timed is due for this app (a held revert, a sync window opening or
    /// closing, a progress deadline or a staleness threshold passing); the loop runs a
    /// [`Trigger::Wake`] reconcile then.
    pub fn next_wakeup(&self) -> Option<(std::time::Instant, Requeue)> {
        let now = std::time::Instant::now();
        let wall = std::time::SystemTime::now();
        let in_instant = |t: std::time::SystemTime| {
            let d = t.duration_since(wall).unwrap_or_default();
            now + d
        };
        let mut due: Vec<(std::time::Instant, Requeue)> = Vec::new();
        due.extend(
            self.held_keys
                .iter()
                .filter_map(|k| self.fights.hold_until(k))
                .map(|t| (t, Requeue::HeldRevert)),
        );
        due.extend(self.fights.next_due(now).map(|t| (t, Requeue::HeldRevert)));
        if let Some(t) = window::next_change(&self.windows, chrono::Utc::now()) {
            due.push((in_instant(t.into()), Requeue::SyncWindow));
        }
        if let Some(since) = self.clocks.progressing_since {
            let t = since + self.cfg.sync.progress_deadline.value;
            if t > wall {
                due.push((in_instant(t), Requeue::ProgressDeadline));
            }
        }
        if let (Some(stale), Some(since)) =
            (&self.cfg.sync.stale_after, &self.status.out_of_sync_since)
            && let Ok(since) = humantime::parse_rfc3339(since)
        {
            let t = since + stale.value;
            if t > wall {
                due.push((in_instant(t), Requeue::StaleAfter));
            }
        }
        // A second late, so the time has surely passed.
        due.into_iter()
            .min_by_key(|(t, _)| *t)
            .map(|(t, why)| (t + Duration::from_millis(1000), why))
    }

    /// What the app reads and how: the repository, the path and the default namespace. The
    /// same revision read with another of these is another desired set.
    fn source_identity(&self) -> String {
        // Stored in the inventory: the URL without credentials. Turning signature checks on
        // (or changing whom they trust) makes the revision in force be verified again.
        let verify = self
            .cfg
            .source
            .verify
            .as_ref()
            .map(|v| {
                let of = |f: &Option<serde_saphyr::Spanned<crate::config::SecretRef>>| {
                    f.as_ref()
                        .map(|f| format!("{:?}/{:?}", f.value.env, f.value.file))
                };
                format!(
                    " verify={:?}+{:?}",
                    of(&v.allowed_signers),
                    of(&v.openpgp_keys)
                )
            })
            .unwrap_or_default();
        format!(
            "repo={} path={} namespace={}{verify}{}",
            source::redact_url(&self.cfg.source.repo.value),
            self.cfg.source.path.value,
            self.cfg.target.namespace.value,
            self.render.identity()
        )
    }

    /// Logs a failure of the source stage (`step`: `fetch`, `chart`, `render`) once: retries
    /// failing the same way are debug lines (the condition and the backoff say it goes on).
    fn source_failed(&self, step: &'static str, message: &str) {
        let again =
            matches!(&self.problem, Some(Problem::Source { message: m, .. }) if m == message);
        if again {
            tracing::debug!(step, error = %message, "Source stage failed again");
        } else if self.in_force.is_some() {
            tracing::warn!(step, error = %message, "Source stage failed; the revision in force stays enforced");
        } else {
            tracing::warn!(step, error = %message, "Source stage failed; nothing is applied yet");
        }
    }

    /// Fetches the source and, when the newest revision is new and valid, makes it the one in
    /// force. `Err` when the source failed (a parse error is not a failure to retry: the same
    /// commit will not parse better).
    async fn fetch_and_parse(&mut self, report: &mut Report) -> Result<(), FetchFailed> {
        let repo = self.cfg.source.repo.value.clone();
        let fetch_started = std::time::Instant::now();
        let fetch = self.git.fetch_within(
            &repo,
            self.cfg.source.reference.as_deref(),
            self.cfg.source.timeout.value,
        );
        let fetched = match self.stop.clone() {
            Some(mut stop) => tokio::select! {
                f = fetch => f,
                // A dropped sender never stops the app.
                Ok(_) = stop.wait_for(|s| *s) => {
                    tracing::info!("Stopping: fetch abandoned");
                    return Err(FetchFailed::Stopping);
                }
            },
            None => fetch.await,
        };
        if let Some(m) = &self.metrics {
            m.fetch(
                self.name(),
                fetch_started.elapsed().as_secs_f64(),
                fetched.is_err(),
            );
        }
        let fetched = match fetched {
            Ok(f) => f,
            Err(e) => {
                let message = error_chain(&e);
                self.source_failed("fetch", &message);
                self.problem = Some(revision::fetch_problem(&e, message));
                return Err(FetchFailed::Source);
            }
        };
        if fetched.rewritten
            && let Some(old) = &fetched.previous
        {
            tracing::warn!(git_ref = %fetched.resolved_ref, old = %old.0, new = %fetched.revision.0, "History rewritten (force push): following the new tip");
        }
        // What a fetch that moved the ref said stays until the ref moves again.
        let keep = fetched.previous.is_none()
            && self
                .source_message
                .as_deref()
                .is_some_and(|m| m.contains(fetched.revision.short()));
        if !keep {
            self.source_message = Some(revision::fetch_message(
                &fetched.resolved_ref,
                &fetched.revision,
                fetched.previous.as_ref(),
                fetched.rewritten,
            ));
        }
        let revision = fetched.revision.clone();
        // A chart from a chart repository belongs to the source: resolved (and fetched when
        // new) before the revision is judged, since a new chart version or digest under the
        // same commit is a new desired set.
        let applied_as = self.inventory.as_ref().and_then(|i| i.source.clone());
        if let Err(e) = self
            .render
            .resolve_chart(&self.git, applied_as.as_deref())
            .await
        {
            let message = error_chain(&e);
            self.source_failed("chart", &message);
            self.last_attempted = Some(revision.clone());
            self.problem = Some(revision::render_problem(&e, message));
            return Err(FetchFailed::Source);
        }
        let identity = self.source_identity();
        // A set restored from the inventory lacks what was declared but not applied (a
        // conflict): the revision is read again, never taken as in force from it.
        let verdict = revision::classify(
            self.in_force
                .as_ref()
                .filter(|f| !f.restored)
                .map(|f| (&f.revision, f.source.as_str())),
            self.last_attempted.as_ref(),
            self.problem.as_ref(),
            &revision,
            &identity,
        );
        if matches!(self.problem, Some(Problem::Source { .. })) {
            self.problem = None;
        }
        match verdict {
            revision::Verdict::InForce => {
                if self.problem.is_some() {
                    self.problem = None;
                    self.diagnostics.clear();
                }
                self.last_attempted = Some(revision);
                return Ok(());
            }
            revision::Verdict::Refused => return Ok(()),
            revision::Verdict::New => {}
        }
        self.last_attempted = Some(revision.clone());
        if let Some(signers) = self.signers.clone() {
            match self.git.verify(&repo, &revision, signers).await {
                Ok(principal) => {
                    tracing::info!(revision = %revision.short(), signer = %principal, "Commit signature verified");
                }
                Err(e @ source::Error::SignatureRejected { .. }) => {
                    let message = format!("{e}; not applied (source.verify)");
                    tracing::warn!(error = %message, "Revision not applied; the revision in force stays enforced");
                    self.diagnostics.clear();
                    self.problem = Some(Problem::Invalid {
                        reason: Reason::SignatureRejected,
                        message,
                    });
                    return Ok(());
                }
                Err(e) => {
                    self.problem = Some(Problem::Source {
                        reason: Reason::FetchFailed,
                        message: error_chain(&e),
                    });
                    return Err(FetchFailed::Source);
                }
            }
        }
        let to_render = self.in_force.is_none();
        let prepared = match self
            .render
            .prepare(&self.git, &self.cfg, &revision, to_render)
            .await
        {
            Ok(p) => p,
            Err(crate::render::Error::Source(e @ source::Error::PathNotFound { .. })) => {
                let message = format!("{e} (source.path in the config)");
                self.diagnostics = vec![Diagnostic::error(
                    &self.cfg.source.path.value,
                    1,
                    1,
                    message.clone(),
                )];
                self.problem = Some(Problem::Invalid {
                    reason: Reason::PathNotFound,
                    message,
                });
                return Ok(());
            }
            Err(e) => {
                let message = error_chain(&e);
                self.problem = Some(revision::render_problem(&e, message));
                return Err(FetchFailed::Source);
            }
        };
        // After a restart: the set restored from the inventory is the one this revision reads
        // as, when the last process read it from files with this reuse key and the inventory
        // entries have the digest of what it read. Then nothing is parsed again.
        if self.take_up_restored(&prepared, &identity) {
            let f = self.in_force.as_ref().expect("taken up");
            tracing::debug!(revision = %revision.short(), objects = f.desired.len(), "The revision reads as the set the last process applied (same files, same build); taken up from the inventory, not parsed again");
            if self.applied.as_ref() == Some(&f.revision) {
                self.applied = Some(revision.clone());
            }
            let f = self.in_force.take().expect("taken up");
            self.in_force = Some(InForce {
                revision,
                tree_id: Some(prepared.key),
                restored: false,
                ..f
            });
            self.problem = None;
            self.diagnostics.clear();
            self.restore_verified();
            return Ok(());
        }
        // The same inputs read the same way as in force (the key covers the tree at the path,
        // what its overlays and charts reach, and the render settings): same objects, only the
        // revision moves.
        // A commit elsewhere in a monorepo: nothing to parse or plan again; the new commit is
        // what was applied (the inventory keeps the older id until something is written).
        if let Some(f) = &self.in_force
            && f.source == identity
            && f.tree_id.as_deref() == Some(prepared.key.as_str())
        {
            tracing::debug!(revision = %revision.short(), path = %self.cfg.source.path.value, "The app's path is unchanged in the new revision; not planned again");
            if let Some(m) = &self.metrics {
                for renderer in prepared.renderers() {
                    m.render(self.name(), renderer, false, true, 0.0);
                }
            }
            if self.applied.as_ref() == Some(&f.revision) {
                self.applied = Some(revision.clone());
            }
            let desired = f.desired.clone();
            let reuse = f.reuse.clone();
            self.in_force = Some(InForce {
                revision,
                source: identity,
                tree_id: Some(prepared.key),
                reuse,
                desired,
                restored: false,
            });
            self.problem = None;
            self.diagnostics.clear();
            return Ok(());
        }
        let tree_id = prepared.key.clone();
        let reuse = prepared.reuse_key();
        let rendered = self.render.render(&self.git, prepared).await;
        if let Some(m) = &self.metrics {
            for run in self.render.runs() {
                m.render(self.name(), run.renderer, run.rendered, run.ok, run.seconds);
            }
        }
        let mut set = match rendered {
            Ok(set) => set,
            Err(e) => {
                let message = error_chain(&e);
                self.source_failed("render", &message);
                self.diagnostics.clear();
                self.problem = Some(revision::render_problem(&e, message));
                return Err(FetchFailed::Source);
            }
        };
        self.diagnostics = set.diagnostics.clone();
        let reuse = reuse.filter(|_| set.diagnostics.is_empty());
        let owns_objects = self
            .inventory
            .as_ref()
            .is_some_and(|i| !i.entries.is_empty());
        // Each object's place, its path moved out (the set keeps only its objects from here).
        let positions: BTreeMap<ObjectKey, (String, u64, u64)> = set
            .objects
            .iter_mut()
            .map(|(k, d)| (k.clone(), (std::mem::take(&mut d.path), d.line, d.column)))
            .collect();
        let desired = match revision::admit(
            set,
            &revision,
            owns_objects,
            &self.cfg.sync,
            &self.cfg.source.path.value,
        ) {
            Ok(desired) => Arc::new(desired),
            Err(problem) => {
                match &problem {
                    Problem::Blocked { .. } => {
                        tracing::warn!(revision = %revision.short(), "Empty revision not applied; the revision in force stays enforced")
                    }
                    Problem::Invalid { message, .. } | Problem::Source { message, .. } => {
                        tracing::warn!(revision = %revision.short(), error = %message, "Revision not applied; the revision in force stays enforced")
                    }
                }
                self.problem = Some(problem);
                return Ok(());
            }
        };
        // The target checks the whole revision before anything of it is applied (Kubernetes:
        // a server-side dry run of every object); one refusal refuses the revision.
        let objects: Vec<Object> = desired.values().cloned().collect();
        match self.store.check(&objects).await {
            Ok(refused) if refused.is_empty() => {}
            Ok(refused) => {
                let problem = revision::refusals(&refused, &positions);
                self.diagnostics = refused
                    .iter()
                    .map(|(key, message)| {
                        let (path, line, column) = positions
                            .get(key)
                            .cloned()
                            .unwrap_or_else(|| (String::new(), 1, 1));
                        Diagnostic::error(&path, line, column, format!("{key}: {message}"))
                    })
                    .collect();
                // Checked again at every fetch: said once while it stays the same.
                let again = self.problem.as_ref() == Some(&problem);
                if let Problem::Invalid { message, .. } = &problem {
                    if again {
                        tracing::debug!(revision = %revision.short(), error = %message, "Revision still refused by the target");
                    } else {
                        tracing::warn!(revision = %revision.short(), error = %message, "Revision refused by the target; the revision in force stays enforced");
                    }
                }
                self.problem = Some(problem);
                return Ok(());
            }
            Err(e) => {
                self.problem = Some(Problem::Source {
                    reason: Reason::FetchFailed,
                    message: format!(
                        "cannot check the revision against the target: {}",
                        error_chain(&e)
                    ),
                });
                return Err(FetchFailed::Source);
            }
        }
        self.problem = None;
        // The same commit read another way than it was applied (other render settings, another
        // chart version or digest, another path): a new desired set, applied whole as a new
        // revision is (with `selfHeal: false` too), not reverted object by object as drift.
        let applied_as = self.inventory.as_ref().and_then(|i| i.source.as_deref());
        let read_anew = self.applied.as_ref() == Some(&revision)
            && applied_as.is_some_and(|s| !s.is_empty() && s != identity);
        if read_anew {
            self.applied = None;
        }
        // The revision in force read again after a restart: not a new one.
        let reread = !read_anew
            && self
                .in_force
                .as_ref()
                .is_some_and(|f| f.restored && f.revision == revision);
        if reread {
            tracing::debug!(revision = %revision.short(), objects = desired.len(), "Revision in force read again after a restart");
            // The inventory read at start-up holds its own copy of each object; in the
            // running agent (long-lived: a one-shot sync ends before it would matter), the
            // equal ones are shared with the set just parsed.
            if self.status_writer.is_some()
                && let Some(inventory) = self.inventory.as_mut()
            {
                let shared = inventory.share_with(&desired);
                tracing::debug!(
                    shared,
                    "Inventory entries shared with the revision parsed again"
                );
            }
        } else {
            tracing::info!(revision = %revision.short(), objects = desired.len(), "New revision");
        }
        if !self.dry_run {
            // A new revision that this pass applies: its inventory entries' text is made on
            // the digest's thread too.
            let ahead = !reread && self.may_apply();
            self.start_digest(&desired, ahead);
        }
        self.in_force = Some(InForce {
            revision,
            source: identity,
            tree_id: Some(tree_id),
            reuse,
            desired,
            restored: false,
        });
        self.restore_verified();
        report.applied_new_revision = !reread;
        if !reread && !self.dry_run && self.may_apply() {
            // Say what is happening before the (possibly long) apply.
            set_condition(
                &mut self.status.conditions,
                ConditionType::Reconciling,
                true,
                Reason::ApplyingRevision,
                format!(
                    "applying {}",
                    self.last_attempted.as_ref().map_or("", |r| r.short())
                ),
                &store::now_rfc3339(),
            );
            self.status.last_attempted_revision = self.last_attempted.as_ref().map(|r| r.0.clone());
            self.report_commit_statuses(true);
            self.write_status().await;
        }
        Ok(())
    }

    /// Makes the store match the revision in force (or, detect-only, finds where it does not).
    async fn enforce(
        &mut self,
        scope: Option<&BTreeSet<ObjectKey>>,
        report: &mut Report,
    ) -> Result<(), ()> {
        let Some(in_force) = self.in_force.clone() else {
            return Ok(());
        };
        let new_revision = self.applied.as_ref() != Some(&in_force.revision);
        // Detect-only: a new revision is applied, drift is only reported, unless a person
        // asked for this sync (as in Argo CD, selfHeal governs automatic reverts only). A sync
        // window that holds the app allows neither (unless a person asked and the window lets
        // them).
        let dry_run = self.dry_run
            || !self.may_apply()
            || (!self.cfg.sync.self_heal && !new_revision && !self.manual);
        // Objects being fought over wait for their hold to end in every pass, periodic ones
        // included; a new revision is applied whole (a commit is a deliberate change).
        // Until a revision is applied whole, drift is reverted to what was applied (the
        // inventory's last-applied copies), never to the pending revision: a failed sync of a
        // new commit must not leak into the store one revert at a time.
        let applied_copies: Option<BTreeMap<ObjectKey, Object>> = match (scope, new_revision) {
            (Some(scope), true) => {
                let Some(inv) = self.inventory.as_ref().filter(|i| i.revision.is_some()) else {
                    return Ok(()); // nothing applied whole yet: nothing to revert to
                };
                Some(
                    scope
                        .iter()
                        .filter_map(|k| inv.entries.get(k).map(|o| (k.clone(), o.clone())))
                        .collect(),
                )
            }
            _ => None,
        };
        let reverting = applied_copies.is_some();
        let desired = applied_copies.as_ref().unwrap_or(&in_force.desired);
        let revision = match (reverting, self.inventory.as_ref()) {
            (true, Some(inv)) => inv.revision.clone().unwrap_or(in_force.revision.clone()),
            _ => in_force.revision.clone(),
        };
        let now = std::time::Instant::now();
        let hold: Option<BTreeSet<ObjectKey>> = (!new_revision || reverting)
            .then(|| {
                self.fights
                    .held_now(now)
                    .filter(|k| desired.contains_key(*k))
                    .cloned()
                    .collect::<BTreeSet<_>>()
            })
            .filter(|h| !h.is_empty());
        if let Some(h) = &hold {
            self.held_keys.extend(h.iter().cloned());
        }
        let ignore = self.cfg.sync.ignore_rules();
        // The feed must pass on changes of what this sync applies from the moment it reads
        // them: what it declares newly is owned before the sync, not after.
        if scope.is_none()
            && !dry_run
            && !self
                .owned_from
                .as_ref()
                .is_some_and(|d| Arc::ptr_eq(d, &in_force.desired))
        {
            self.own(&in_force.desired);
        }
        let request = sync::Request {
            app: self.name(),
            revision: &revision,
            source: &in_force.source,
            desired,
            scope,
            options: self.plan_options(),
            ignore: &ignore,
            dry_run,
            inventory: self.inventory.as_ref(),
            hold: hold.as_ref(),
            verified: self
                .verified
                .as_ref()
                .filter(|(d, _)| !reverting && Arc::ptr_eq(d, &in_force.desired))
                .map(|(_, v)| v),
            entries_ahead: self
                .entries_ahead
                .as_ref()
                .filter(|(d, _)| scope.is_none() && Arc::ptr_eq(d, &in_force.desired))
                .map(|(_, t)| t),
        };
        // The periodic pass of a running agent over objects that have not moved since they
        // were last found as declared: nothing to read, plan or write.
        if let Ok(true) = sync::nothing_moved(self.store.as_ref(), &request).await {
            self.sync_error = None;
            report.summary.unchanged = in_force.desired.len();
            report.detect_only = dry_run && !self.dry_run;
            return Ok(());
        }
        // Only a sync that may claim or release objects (its desired keys are not exactly its
        // inventory's) waits for the other apps' syncs; one that cannot writes only its own
        // records and objects (a push that did not touch this app's files, a revert), and
        // never waits behind a thousand others.
        let may_claim = self.inventory.as_ref().is_none_or(|inv| {
            !inv.retained.is_empty()
                || inv.entries.len() != desired.len()
                || !inv.entries.keys().eq(desired.keys())
        });
        let outcome = {
            let _claim = if may_claim {
                Some(self.claim.lock().await)
            } else {
                None
            };
            sync::sync(self.store.as_ref(), &request).await
        };
        // Made for this sync only (taken by it, or of no use to a later one).
        self.entries_ahead = None;
        let mut outcome = match outcome {
            Ok(o) => o,
            Err(sync::Error::Superseded { found, .. }) => {
                tracing::info!(revision = %found.as_ref().map_or("(none)", Revision::short), "Another process applied a revision meanwhile; adopting it and fetching again before applying");
                self.superseded = true;
                return Err(());
            }
            Err(e) => {
                let message = error_chain(&e);
                tracing::warn!(error = %message, "Sync failed");
                self.sync_error = Some(message);
                return Err(());
            }
        };
        self.sync_error = None;
        if !reverting {
            let update = std::mem::take(&mut outcome.verified);
            self.verified_changes += 1;
            match &mut self.verified {
                Some((d, v)) if Arc::ptr_eq(d, &in_force.desired) => v.apply(update),
                _ => {
                    let mut v = sync::Verified::default();
                    v.apply(update);
                    self.verified = Some((in_force.desired.clone(), v));
                }
            }
        }
        report.summary = outcome.plan.summary();
        report.summary.unchanged += outcome.still_unchanged.len();
        report.detect_only = dry_run && !self.dry_run;
        report.committed_revision = outcome.committed_revision;
        if self.dry_run {
            report.dry_run_diff = crate::diff::render_plan(&outcome.plan);
        }
        self.self_writes.reserve(outcome.written.len());
        for (key, rv) in &outcome.written {
            self.self_writes.insert(key.clone(), *rv);
        }
        if !outcome.contested.is_empty() {
            tracing::warn!(objects = ?outcome.contested, "Another writer changed these during the sync; left out of sync, retried from the change feed");
        }
        let changed = report.summary.create + report.summary.update + report.summary.delete;
        // Writes of a pass that applies no new revision revert drift, whether the change feed
        // or a periodic pass found it: each is logged, counted and weighed by the fight rule.
        if (scope.is_some() || !new_revision) && !dry_run {
            report.drift_reverted = changed;
            for step in outcome
                .plan
                .steps
                .iter()
                .filter(|s| s.action != Step::Unchanged && s.skipped.is_none())
            {
                let fields: Vec<String> = step.changes.iter().map(|c| c.path.clone()).collect();
                let by = self.changed_by(step);
                let manager = by
                    .first()
                    .and_then(|who| who.split(" at ").next())
                    .unwrap_or(crate::metrics::UNKNOWN_MANAGER);
                *report.reverted_by.entry(manager.to_string()).or_default() += 1;
                match by.first() {
                    Some(who) => {
                        tracing::info!(object = %step.key, action = ?step.action, fields = ?fields, changed_by = %who, "Drift reverted")
                    }
                    None => {
                        tracing::info!(object = %step.key, action = ?step.action, fields = ?fields, "Drift reverted")
                    }
                }
                if let Some(hold) =
                    self.fights
                        .reverted(&step.key, fields.clone(), std::time::Instant::now())
                {
                    tracing::warn!(object = %step.key, fields = ?fields, hold = ?hold, "Another writer keeps changing it back; holding the next revert");
                }
            }
        } else if dry_run && !self.dry_run && new_revision {
            // A new revision a sync window holds back: not drift; said once per revision.
            if self.held_revision.as_ref() != Some(&in_force.revision) {
                tracing::info!(
                    revision = %in_force.revision.short(),
                    to_create = report.summary.create,
                    to_update = report.summary.update,
                    to_delete = report.summary.delete,
                    "Revision not applied yet: a sync window holds the app"
                );
                self.held_revision = Some(in_force.revision.clone());
            }
        } else if dry_run && !self.dry_run {
            // Drift found but not reverted (detect-only, or a sync window holds the app): each
            // object is logged once, when it starts to differ, with the fields that differ.
            let why = if self.may_apply() {
                "selfHeal is off"
            } else {
                "a sync window holds the app"
            };
            for step in outcome.plan.steps.iter().filter(|s| {
                s.action != Step::Unchanged
                    && self
                        .resources
                        .get(&s.key)
                        .is_none_or(|r| r.sync == SyncStatus::Synced)
            }) {
                let fields: Vec<String> = step.changes.iter().map(|c| c.path.clone()).collect();
                match self.changed_by(step).first() {
                    Some(who) => {
                        tracing::warn!(object = %step.key, action = ?step.action, fields = ?fields, changed_by = %who, why, "Drift detected; not reverted")
                    }
                    None => {
                        tracing::warn!(object = %step.key, action = ?step.action, fields = ?fields, why, "Drift detected; not reverted")
                    }
                }
            }
        } else if changed > 0 && !dry_run {
            tracing::info!(
                revision = %in_force.revision.short(),
                created = report.summary.create,
                updated = report.summary.update,
                deleted = report.summary.delete,
                "Applied"
            );
        }
        self.record_resources(&in_force, scope, &outcome, dry_run)
            .await;
        if let Some(inventory) = outcome.inventory {
            self.owned_from = None;
            if !dry_run {
                if new_revision && inventory.revision.is_some() {
                    // A new revision starts its own progress clock.
                    self.clocks.progressing_since = Some(std::time::SystemTime::now());
                }
                self.applied = inventory.revision.clone();
            }
            self.inventory = Some(inventory);
        }
        // Computed again when what it comes from changed (a full pass of the same desired set
        // and inventory would give the same set).
        let current = self
            .owned_from
            .as_ref()
            .is_some_and(|d| Arc::ptr_eq(d, &in_force.desired));
        if (scope.is_none() && !current) || self.owned.is_empty() {
            self.own(&in_force.desired);
        }
        Ok(())
    }

    /// Updates the per-object status from a sync's outcome: every declared object of the
    /// scope, and the deletes that did not happen. The stored objects' health is judged on
    /// all cores ([`crate::par::map`]) when no Lua rule is set.
    async fn record_resources(
        &mut self,
        in_force: &InForce,
        scope: Option<&BTreeSet<ObjectKey>>,
        outcome: &sync::Outcome,
        dry_run: bool,
    ) {
        let conflict_keys: Vec<ObjectKey> = outcome.conflicts.keys().cloned().collect();
        let conflict_live = if conflict_keys.is_empty() {
            BTreeMap::new()
        } else {
            self.store
                .get_many(&conflict_keys)
                .await
                .map(|l| l.objects)
                .unwrap_or_default()
        };
        let version_of =
            |key: &ObjectKey, live: Option<&Object>| version_text(in_force.desired.get(key), live);
        let mut status_kinds = health::StatusKinds::from_objects(crds(&in_force.desired));
        // An object with no status yet is Progressing when its kind's CRD declares a status
        // subresource: the CRDs not among the app's own are read from the store, only when
        // such an object is there to judge (a store without them leaves it Healthy).
        // The key names the group and kind: only an object of a custom kind not known is
        // looked up.
        let unjudged = outcome.plan.steps.iter().any(|step| {
            let key = &step.key;
            health::is_custom_group(key.group())
                && !status_kinds.knows(key.group(), key.kind())
                && outcome
                    .live
                    .get(key)
                    .is_some_and(|o| o.unstamped().get("status").is_none())
        });
        if unjudged {
            let selector = crate::store::Selector {
                group: Some("apiextensions.k8s.io".into()),
                kind: Some("CustomResourceDefinition".into()),
                namespace: None,
            };
            if let Ok(listing) = self.store.list(&selector).await {
                status_kinds.extend(&health::StatusKinds::from_objects(listing.objects.values()));
            }
        }
        // Objects still as declared since their last look keep their status as it was.
        // The keys judged now: sorted below, then walked beside the resources (in key order).
        let mut seen: Vec<&ObjectKey> = outcome.plan.steps.iter().map(|s| &s.key).collect();
        let mut judged = Vec::new();
        for step in &outcome.plan.steps {
            let (sync_status, message) = match (step.action, &step.skipped) {
                // The last revert stays told (who changed what) until the object drifts again
                // or a revision changes it.
                (Step::Unchanged, _) => (
                    SyncStatus::Synced,
                    self.resources
                        .get(&step.key)
                        .and_then(|r| r.message.clone())
                        .filter(|m| m.starts_with(APPLIED_OVER)),
                ),
                (Step::Update, None) if !dry_run => {
                    let by = self.changed_by(step);
                    let message = (!by.is_empty()).then(|| {
                        format!("{APPLIED_OVER}{}: {}", by.join(", "), first_fields(step))
                    });
                    (SyncStatus::Synced, message)
                }
                (Step::Create | Step::Update, None) if !dry_run => (SyncStatus::Synced, None),
                (Step::Create, why) => (
                    SyncStatus::OutOfSync,
                    Some(match why {
                        Some(why) => format!("missing from the store; not created: {why}"),
                        None => "missing from the store".to_string(),
                    }),
                ),
                (Step::Update, why) => {
                    let mut fields = first_fields(step);
                    let by = self.changed_by(step);
                    if !by.is_empty() {
                        fields = format!("{fields} (changed by {})", by.join(", "));
                    }
                    (
                        SyncStatus::OutOfSync,
                        Some(match why {
                            Some(why) => format!("differs from Git: {fields}; not reverted: {why}"),
                            None => format!("differs from Git: {fields}"),
                        }),
                    )
                }
                (Step::Delete, Some(why)) => (
                    SyncStatus::OutOfSync,
                    Some(format!("no longer in Git; not pruned: {why}")),
                ),
                (Step::Delete, None) if dry_run => (
                    SyncStatus::OutOfSync,
                    Some("no longer in Git; to be pruned".into()),
                ),
                (Step::Delete, None) => {
                    self.remove_resource(&step.key);
                    continue;
                }
            };
            judged.push((step, sync_status, message));
        }
        // The stored object's health: pure work on all cores, unless a Lua rule must run on
        // this thread (`assess_health` moves it off the runtime's). The built-in rules read
        // the store's `metadata.generation` in place of the object's; custom rules get the
        // object with the store's metadata set (a copy made per object, dropped once judged).
        let custom = !self.health_rules.is_empty();
        // What each judged object is stored and declared as, found in one walk of each map.
        let (mut stored, mut declared) = (
            crate::object::InOrder::new(&outcome.live),
            crate::object::InOrder::new(&in_force.desired),
        );
        let judged: Vec<Found<'_>> = judged
            .into_iter()
            .map(|j| (stored.get(&j.0.key), declared.get(&j.0.key), j))
            .collect();
        let judge = |(stored, declared, (step, sync_status, message)): &Found<'_>| {
            let stored = *stored;
            let health = match stored {
                Some(s) if !custom => {
                    health::assess_builtin_at(s.unstamped(), s.generation(), &status_kinds)
                }
                _ => super::assess_health(
                    stored.map(|s| s.object()).as_deref(),
                    &self.health_rules,
                    &status_kinds,
                ),
            };
            let version = version_text(*declared, stored.map(|s| s.unstamped()));
            // Shared from here on: the status keeps this one (no second copy of 100,000
            // of them next to the list they were judged into).
            let r = resource(&step.key, version, *sync_status, health, message.clone());
            (step.key.clone(), Arc::new(r))
        };
        let judged = if self.health_rules.has_lua() {
            judged.iter().map(judge).collect()
        } else {
            crate::par::map("resource status", &judged, 512, judge)
        };
        self.set_resources(judged);
        for (key, why) in &outcome.conflicts {
            seen.push(key);
            let live = conflict_live.get(key);
            self.set_resource(
                key.clone(),
                Arc::new(resource(
                    key,
                    version_of(key, live),
                    SyncStatus::OutOfSync,
                    super::assess_health(live, &self.health_rules, &status_kinds),
                    Some(why.clone()),
                )),
            );
        }
        // Sorted already but for the conflicts (a stable sort finds the runs).
        seen.sort();
        let is_seen = |k: &ObjectKey| seen.binary_search(&k).is_ok();
        match scope {
            None => {
                let before = self.resources.len();
                // One walk of the resources beside the keys kept (`retain` visits them in
                // ascending key order), not a search of each: 10,000 searches were a tenth of
                // a cold sync's thread.
                let mut kept = seen.iter().copied().peekable();
                let mut still = outcome.still_unchanged.iter().peekable();
                self.resources.retain(|k, _| {
                    while kept.next_if(|s| *s < k).is_some() {}
                    while still.next_if(|s| *s < k).is_some() {}
                    kept.peek() == Some(&k) || still.peek() == Some(&k)
                });
                self.resources_dirty |= self.resources.len() != before;
                self.conflicts = outcome.conflicts.clone();
                self.prune_blocked = outcome
                    .plan
                    .steps
                    .iter()
                    .find_map(|s| s.skipped.clone().filter(|w| w.contains("allowEmpty")));
            }
            Some(keys) => {
                for k in keys {
                    if !is_seen(k) && !outcome.still_unchanged.contains(k) {
                        self.remove_resource(k);
                    }
                    self.conflicts.remove(k);
                }
                self.conflicts.extend(outcome.conflicts.clone());
            }
        }
    }

    /// Who changed the fields a step reverts, from the live object's field ownership (the
    /// Kubernetes target's `managedFields`): `manager at time`, newest first, one per manager.
    /// Empty when the store keeps no such record (SQLite, etcd).
    fn changed_by(&self, step: &crate::diff::Step) -> Vec<String> {
        let Some(live) = step.live.as_ref() else {
            return Vec::new();
        };
        let ours: Vec<&str> = self.store.field_manager().into_iter().collect();
        let mut found: Vec<(String, String)> = step
            .changes
            .iter()
            .filter_map(|c| crate::diff::who_changed(live, &c.path, &ours))
            .collect();
        found.sort_by(|a, b| b.1.cmp(&a.1));
        let mut seen = BTreeSet::new();
        found
            .into_iter()
            .filter(|(m, _)| seen.insert(m.clone()))
            .map(|(m, t)| format!("{m} at {t}"))
            .collect()
    }

    fn set_resource(&mut self, key: ObjectKey, r: Arc<ResourceStatus>) {
        if self.resources.get(&key) != Some(&r) {
            self.resources.insert(key, r);
            self.resources_dirty = true;
        }
    }

    /// [`Self::set_resource`] of each of `judged` (a sync's, in key order): one walk beside the
    /// resources to see whether any changes, then the map built again at once
    /// ([`sync::settled`]) rather than searched 10,000 times.
    fn set_resources(&mut self, judged: Vec<(ObjectKey, Arc<ResourceStatus>)>) {
        let mut old = self.resources.iter().peekable();
        // Keys out of order are only missed here: taken as changed.
        let changed = judged.iter().any(|(k, r)| {
            while old.next_if(|(o, _)| *o < k).is_some() {}
            old.next_if(|(o, _)| *o == k).is_none_or(|(_, v)| v != r)
        });
        if !changed {
            return;
        }
        let old = std::mem::take(&mut self.resources);
        self.resources = sync::settled(
            old.into_iter()
                .map(|(k, v)| (k, Some(v)))
                .chain(judged.into_iter().map(|(k, r)| (k, Some(r))))
                .collect(),
        );
        self.resources_dirty = true;
    }

    fn remove_resource(&mut self, key: &ObjectKey) {
        if self.resources.remove(key).is_some() {
            self.resources_dirty = true;
        }
    }

    /// Recomputes the status from the state.
    fn compute_status(&mut self) {
        let before = self.status.conditions.clone();
        self.compute_conditions();
        // Every transition (a new status or reason) is one log line: what changed and why.
        for c in &self.status.conditions {
            let old = before.iter().find(|b| b.type_ == c.type_);
            if old.is_none_or(|o| o.status != c.status || o.reason != c.reason) {
                let level_warn = conditions::is_warning(c);
                if level_warn {
                    tracing::warn!(condition = %c.type_, status = %c.status, reason = %c.reason, detail = %c.message, "Condition changed");
                } else {
                    tracing::info!(condition = %c.type_, status = %c.status, reason = %c.reason, detail = %c.message, "Condition changed");
                }
            }
        }
    }

    /// Recomputes the status and its conditions from the state ([`conditions::compute`]).
    fn compute_conditions(&mut self) {
        let wall = std::time::SystemTime::now();
        let instant = std::time::Instant::now();
        if self.resources_dirty || self.status.resources.len() != self.resources.len() {
            self.status.resources = self.resources.values().cloned().collect();
        }
        self.status.diagnostics = self.diagnostics.clone();
        let fights = self.fights.active();
        let contest = fights.first().map(|(key, fight)| conditions::Contest {
            key: (*key).clone(),
            fields: fight.fields.clone(),
            reverts: fight.reverts,
            next_revert: wall
                + self
                    .fights
                    .hold_until(key)
                    .map(|t| t.saturating_duration_since(instant))
                    .unwrap_or_default(),
            objects: fights.len(),
        });
        // The chart of a chart repository is part of the source: say which one is in use.
        let source_message = self
            .source_message
            .as_ref()
            .map(|m| match self.render.chart() {
                Some(c) => format!(
                    "{m}; chart {} {} (sha256 {})",
                    c.name,
                    c.version,
                    &c.digest[..12]
                ),
                None => m.clone(),
            });
        let facts = conditions::Facts {
            in_force: self
                .in_force
                .as_ref()
                .map(|f| (&f.revision, f.desired.len())),
            applied: self.applied.as_ref(),
            last_attempted: self.last_attempted.as_ref(),
            problem: self.problem.as_ref(),
            sync_error: self.sync_error.as_deref(),
            conflicts: &self.conflicts,
            prune_blocked: self.prune_blocked.as_deref(),
            window: self.window_state.as_ref(),
            self_heal: self.cfg.sync.self_heal,
            progress_deadline: self.cfg.sync.progress_deadline.value,
            stale_after: self.cfg.sync.stale_after.as_ref().map(|d| d.value),
            failing: self.backoff.failing(),
            source_message: source_message.as_deref(),
            contest,
        };
        conditions::compute(&mut self.status, &facts, &mut self.clocks, wall);
    }

    /// Hands the commit statuses the state calls for to the reporter (which queues only
    /// changes; the writer posts them beside the loop). `applying`: the revision in force is
    /// about to be applied.
    fn report_commit_statuses(&mut self, applying: bool) {
        let Some(reporter) = &mut self.reporter else {
            return;
        };
        // A revision that cannot be rendered is that revision's error; the one in force keeps
        // its own status, unless it is the one that no longer renders.
        let attempted_is_new = self.last_attempted.as_ref().map(|r| &r.0)
            != self.in_force.as_ref().map(|f| &f.revision.0);
        let in_force_error = match &self.problem {
            Some(Problem::Source {
                reason: Reason::RenderFailed,
                ..
            }) if attempted_is_new => None,
            Some(Problem::Source { message, .. }) => Some(format!("source unavailable: {message}")),
            _ => None,
        }
        .or_else(|| {
            self.sync_error
                .as_ref()
                .map(|e| format!("cannot apply: {e}"))
        })
        .or_else(|| {
            self.conflicts
                .iter()
                .next()
                .map(|(key, why)| format!("cannot apply: {key} is {why}"))
        });
        let rejected = match &self.problem {
            Some(Problem::Invalid { message, .. }) => Some(message.clone()),
            Some(Problem::Source {
                reason: Reason::RenderFailed,
                message,
            }) => Some(format!("render failed: {message}")),
            Some(Problem::Blocked { message }) => Some(format!("not applied: {message}")),
            _ => None,
        };
        let attempted = self.last_attempted.as_ref().map(|r| r.0.as_str());
        let condition = |t: ConditionType| self.status.condition(t);
        let failing = condition(ConditionType::Progressing)
            .filter(|c| c.reason == Reason::ProgressDeadlineExceeded)
            .or_else(|| {
                condition(ConditionType::Stale).filter(|c| c.status == ConditionStatus::True)
            })
            .map(|c| c.message.clone());
        let held = condition(ConditionType::Ready)
            .filter(|c| c.reason == Reason::HeldBySyncWindow)
            .map(|c| c.message.clone());
        let resources = self.resources.values();
        let out_of_sync = resources
            .clone()
            .filter(|r| r.sync != SyncStatus::Synced)
            .count();
        let not_ready = resources
            .filter(|r| !matches!(r.health, Health::Healthy | Health::Suspended))
            .count();
        let facts = crate::report::Facts {
            app: &self.cfg.name.value,
            in_force: self.in_force.as_ref().map(|f| f.revision.0.as_str()),
            objects: self.in_force.as_ref().map_or(0, |f| f.desired.len()),
            applying,
            in_force_error,
            out_of_sync: if applying { 0 } else { out_of_sync },
            not_ready: if applying { 0 } else { not_ready },
            health: self.status.health,
            rejected: attempted.zip(rejected),
            failing,
            held,
        };
        reporter.observe(&facts);
    }

    /// How this app's plans treat deletions (its `sync:` section).
    fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            prune: self.cfg.sync.prune,
            allow_empty: self.cfg.sync.allow_empty,
            adopt: self.cfg.sync.adopt,
            prune_non_empty: self.cfg.sync.prune_non_empty,
        }
    }

    /// [`sync::desired_digest`] of `desired` with what else decides a sync's and a health
    /// check's verdicts on it: the ignore rules, the plan options, and whether custom health
    /// rules are set (a persisted record is only used without them: see
    /// [`App::restore_verified`]). Computed once per desired set.
    fn digest_of(&mut self, desired: &Arc<BTreeMap<ObjectKey, Object>>) -> String {
        if let Some((d, digest)) = &mut self.digest
            && Arc::ptr_eq(d, desired)
            && let Some(ready) = digest.ready()
        {
            return ready;
        }
        let digest = sync::desired_digest(desired, &self.digest_settings());
        self.digest = Some((desired.clone(), Digest::Ready(digest.clone())));
        digest
    }

    /// Starts [`App::digest_of`] `desired` on a thread of its own (`desired-digest`) at the
    /// lowest priority, unless it is known: the Verified record written after the sync needs
    /// it, and made while a core is idle (the store's commit keeps one busy) it costs the sync
    /// no time. A cold sync of 10,000 objects made it after its status, 12 to 15 ms on both
    /// cores.
    ///
    /// With `ahead`, the thread also leaves the objects' JSON for the sync that applies the
    /// set ([`sync::EntriesAhead`]: the texts it hashes, kept), and keeps its priority: that
    /// sync waits for it.
    fn start_digest(&mut self, desired: &Arc<BTreeMap<ObjectKey, Object>>, ahead: bool) {
        self.entries_ahead = None;
        if desired.len() < DIGEST_APART
            || self
                .digest
                .as_ref()
                .is_some_and(|(d, _)| Arc::ptr_eq(d, desired))
        {
            return;
        }
        let settings = self.digest_settings();
        let set = desired.clone();
        let text = ahead.then(sync::EntriesAhead::default);
        let left = text.clone();
        let span = tracing::debug_span!("desired_digest", app = %self.name(), objects = set.len());
        let started = std::thread::Builder::new()
            .name("desired-digest".into())
            .spawn(move || {
                let _span = span.entered();
                match &left {
                    // Waited for by the sync: at the priority of the rest of it.
                    Some(left) => sync::desired_digest_ahead(&set, &settings, left),
                    None => {
                        crate::par::lowest_priority();
                        sync::desired_digest_here(&set, &settings)
                    }
                }
            });
        // A thread that cannot start: the digest is made when needed.
        if let Ok(handle) = started {
            self.digest = Some((desired.clone(), Digest::Making(handle)));
            self.entries_ahead = text.map(|t| (desired.clone(), t));
        }
    }

    /// What besides the objects decides a sync's and a health check's verdicts on a desired
    /// set, as [`App::digest_of`] covers it.
    fn digest_settings(&self) -> String {
        format!(
            "{:?} {:?} health={}",
            self.cfg.sync.ignore_rules(),
            self.plan_options(),
            if self.health_rules.is_empty() {
                "built-in"
            } else {
                "custom"
            }
        )
    }

    /// True when the desired set in force, restored from the inventory after a restart, is
    /// what `prepared` reads as, so that it need not be read again; it then becomes the set in
    /// force read from files (with its reuse key), and its revision is left for the caller to
    /// move. Every condition must hold, else the revision is read as usual:
    /// - the set was restored (not read by this process) for the source identity `identity`;
    /// - `prepared` has a reuse key (plain manifests, nothing reported by the walk, this build)
    ///   equal to the one in the last process's [`sync::Persisted`] record, which was written
    ///   for that identity;
    /// - the inventory record is the one that record names, keeping no entry aside;
    /// - the restored set has the record's digest: the inventory's entries are, byte for byte
    ///   and with the same settings, the set the last process read from those files.
    fn take_up_restored(&mut self, prepared: &crate::render::Prepared, identity: &str) -> bool {
        let Some(f) = self.in_force.as_ref().filter(|f| f.restored) else {
            return false;
        };
        let Some(p) = self.persisted.as_ref() else {
            return false;
        };
        let Some(reuse) = prepared.reuse_key() else {
            return false;
        };
        let inventory_holds = self
            .inventory
            .as_ref()
            .is_some_and(|i| i.resource_version == Some(p.inventory) && i.retained.is_empty());
        if f.source != identity
            || p.source != identity
            || p.reuse.as_deref() != Some(reuse.as_str())
            || !inventory_holds
            || f.desired.len() != p.versions.len()
        {
            return false;
        }
        let (desired, digest) = (f.desired.clone(), p.digest.clone());
        if self.digest_of(&desired) != digest {
            tracing::debug!(
                "The inventory's entries are not the set the last process read; the revision is read again"
            );
            return false;
        }
        if let Some(f) = self.in_force.as_mut() {
            f.reuse = Some(reuse);
        }
        true
    }

    /// After a restart: takes up what the last process found as declared (its
    /// [`sync::Persisted`] record), once the revision has been read (rendered and parsed, or,
    /// for plain manifests this build reads alone, taken up from the inventory by
    /// [`App::take_up_restored`]: a rendered set is read by every new process, since no key
    /// covers the renderer binary itself), so that the sync neither reads nor plans objects
    /// that have not moved since. Used only when every condition holds:
    /// - no custom health rules, and the status record is still the one the record names
    ///   (objects not read keep the health that record gives them, which only the built-in
    ///   rules are sure to give again; a status written since, by any process or with other
    ///   rules, or deleted, voids it), and only for objects that status lists;
    /// - the inventory record is the one the record names, keeping no entry aside (`retained`);
    /// - the desired set just read has the record's digest (the same declarations, byte for
    ///   byte, with the same ignore rules and plan options).
    ///
    /// Each object is then still checked against the store's current resourceVersion before it
    /// is skipped ([`sync::nothing_moved`], [`sync::Request::verified`]).
    fn restore_verified(&mut self) {
        let Some(p) = self.persisted.take() else {
            return;
        };
        let Some(f) = self.in_force.clone() else {
            return;
        };
        let inventory_holds = self
            .inventory
            .as_ref()
            .is_some_and(|i| i.resource_version == Some(p.inventory) && i.retained.is_empty());
        if !self.health_rules.is_empty()
            || p.status == 0
            || self.status_rv != Some(p.status)
            || f.source != p.source
            || !inventory_holds
            || f.desired.len() != p.versions.len()
            || self.digest_of(&f.desired) != p.digest
        {
            tracing::debug!(
                "Verified record of the last process not used: it holds for another desired set, inventory, status record or settings"
            );
            return;
        }
        let mut verified = p.verified(&f.desired);
        verified
            .entries
            .retain(|k, _| self.resources.contains_key(k));
        tracing::debug!(
            objects = verified.len(),
            "Verified record of the last process taken up"
        );
        self.verified = Some((f.desired.clone(), verified));
        self.verified_changes += 1;
    }

    /// Writes the [`sync::Persisted`] record of what the passes of the desired set in force
    /// found as declared, when it changed since last written. Only for a set read from its
    /// revision (not restored); a failed write is only a missed
    /// shortcut for the next process.
    async fn persist_verified(&mut self) {
        // Objects the next process skips keep the health the status record gives them: only
        // once that record is written.
        // Only a status written inline, whose version is known (not one handed to the agent's
        // status writer, which may not be written yet when the process ends).
        let Some(status_rv) = self.status_rv.filter(|_| self.status_writer.is_none()) else {
            return;
        };
        if self.dry_run || self.resources_dirty || self.persisted_at == Some(self.verified_changes)
        {
            return;
        }
        let Some(f) = self.in_force.clone() else {
            return;
        };
        if f.restored {
            return;
        }
        let Some(verified) = self
            .verified
            .as_ref()
            .filter(|(d, _)| Arc::ptr_eq(d, &f.desired))
            .map(|(_, v)| v.clone())
        else {
            return;
        };
        let digest = self.digest_of(&f.desired);
        let Some(p) = sync::Persisted::of(
            &verified,
            &f.desired,
            &f.source,
            &digest,
            status_rv,
            f.reuse.as_deref(),
        ) else {
            return;
        };
        if self.persisted_last.as_ref() == Some(&p) {
            self.persisted_at = Some(self.verified_changes);
            return;
        }
        let write = store::Write::Put {
            object: p.to_record(self.name()),
            precondition: store::Precondition::Any,
            json: None,
        };
        match self.store.commit(vec![write]).await {
            Ok(_) => {
                self.persisted_last = Some(p);
                self.persisted_at = Some(self.verified_changes);
            }
            Err(e) => {
                tracing::debug!(error = %error_chain(&e), "Verified record not written")
            }
        }
    }

    /// Writes the status record when it differs from what was last written. The per-object
    /// list is compared only when it changed (it is the large part).
    async fn write_status(&mut self) {
        if let Some(w) = &self.written
            && !self.resources_dirty
            && same_except_resources(w, &self.status)
        {
            return;
        }
        self.status_changes += 1;
        let status = Arc::new(self.status.clone());
        self.snapshot = Some(status.clone());
        if let Some(w) = &self.status_writer {
            let summary_changed = self
                .written
                .as_ref()
                .is_none_or(|w| !same_except_resources(w, &self.status));
            w.send(status.clone(), summary_changed);
            self.status_rv = None;
            self.written = Some(status);
            self.resources_dirty = false;
            return;
        }
        match status::write(self.store.as_ref(), &status).await {
            Ok(rv) => {
                self.status_rv = Some(rv);
                self.written = Some(status);
                self.resources_dirty = false;
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot write status")
            }
        }
    }
}

/// When to fetch again after a failed pass, by [`App::error_policy`]'s rule: after `backoff`,
/// which store trouble never stretches past the poll `interval`; a failed pass that did not
/// fetch (a change-feed pass) keeps an earlier fetch already `due`. Never before `now` unless
/// that fetch was already due.
fn retry_at(
    failure: Failure,
    fetched: bool,
    due: std::time::Instant,
    now: std::time::Instant,
    backoff: Duration,
    interval: Duration,
) -> std::time::Instant {
    let d = match failure {
        Failure::Source => backoff,
        Failure::Store => backoff.min(interval),
    };
    if fetched || failure == Failure::Source {
        now + d
    } else {
        due.min(now + d)
    }
}

/// True when two statuses agree on everything but the per-object list.
fn same_except_resources(a: &AppStatus, b: &AppStatus) -> bool {
    a.name == b.name
        && a.revision == b.revision
        && a.last_attempted_revision == b.last_attempted_revision
        && a.sync == b.sync
        && a.health == b.health
        && a.out_of_sync_since == b.out_of_sync_since
        && a.progressing_since == b.progressing_since
        && a.conditions == b.conditions
        && a.diagnostics == b.diagnostics
}

/// The first five fields a step changes, for a status message.
fn first_fields(step: &crate::diff::Step) -> String {
    let fields: Vec<&str> = step
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .take(5)
        .collect();
    fields.join(", ")
}

/// A planned step whose resource status is still to judge: its sync status and message.
type Judged<'a> = (&'a crate::diff::Step, SyncStatus, Option<String>);

/// The version a resource's status names (`v1`, `v1beta1`): the declaration's, else the live
/// object's; empty without either.
fn version_text(declared: Option<&Object>, live: Option<&Object>) -> String {
    declared
        .or(live)
        .map_or(String::new(), |o| o.version().to_string())
}

/// A judged step with its object as stored and as declared.
type Found<'a> = (
    Option<&'a crate::store::Stored>,
    Option<&'a Object>,
    Judged<'a>,
);

pub(super) fn resource(
    key: &ObjectKey,
    version: String,
    sync: SyncStatus,
    health: health::Assessment,
    message: Option<String>,
) -> ResourceStatus {
    ResourceStatus {
        group: key.group().to_string(),
        version,
        kind: key.kind().to_string(),
        namespace: key.namespace().to_string(),
        name: key.name().to_string(),
        sync,
        health: health.health,
        health_message: (!health.message.is_empty()).then_some(health.message),
        message,
    }
}

/// The CustomResourceDefinitions of a desired set: one range of its keys, which sort by group
/// and kind first (a sync of 10,000 other objects does not walk them).
fn crds(desired: &BTreeMap<ObjectKey, Object>) -> impl Iterator<Item = &Object> {
    let (group, kind) = ("apiextensions.k8s.io", "CustomResourceDefinition");
    desired
        .range(ObjectKey::new(group, kind, "", "")..)
        .take_while(move |(k, _)| k.group() == group && k.kind() == kind)
        .map(|(_, o)| o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_pass_retries_after_its_backoff_and_store_trouble_never_delays_a_fetch() {
        let now = std::time::Instant::now();
        let s = Duration::from_secs;
        let interval = s(180);
        // A fetch that failed on the source: again after the backoff, whatever was due.
        assert_eq!(
            retry_at(Failure::Source, true, now, now, s(5), interval),
            now + s(5)
        );
        // A fetch whose writes failed: after the backoff, never past the poll interval; not
        // at once (the fetch that was due is the one that just ran).
        assert_eq!(
            retry_at(Failure::Store, true, now, now, s(5), interval),
            now + s(5)
        );
        assert_eq!(
            retry_at(Failure::Store, true, now, now, s(600), interval),
            now + interval
        );
        // A change-feed pass whose writes failed: a full pass after the backoff, or the fetch
        // already due if that comes first.
        assert_eq!(
            retry_at(Failure::Store, false, now + s(60), now, s(5), interval),
            now + s(5)
        );
        assert_eq!(
            retry_at(Failure::Store, false, now + s(2), now, s(5), interval),
            now + s(2)
        );
    }

    #[test]
    fn crds_are_the_range_of_the_desired_set_that_holds_them() {
        let mut desired = BTreeMap::new();
        for (api, kind, name) in [
            (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "a.example.com",
            ),
            (
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "b.example.com",
            ),
            ("apiextensions.k8s.io/v1", "Other", "x"),
            (
                "admissionregistration.k8s.io/v1",
                "ValidatingWebhookConfiguration",
                "y",
            ),
            ("v1", "ConfigMap", "z"),
            ("example.com/v1", "CustomResourceDefinition", "not-one"),
        ] {
            let o = Object::from_value(serde_json::json!({
                "apiVersion": api, "kind": kind, "metadata": {"name": name},
            }))
            .unwrap();
            desired.insert(o.key(), o);
        }
        let names: Vec<&str> = crds(&desired).map(|o| o.name()).collect();
        assert_eq!(names, ["a.example.com", "b.example.com"]);
    }
}
