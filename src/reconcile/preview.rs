//! One app's pull-request previews: discover the pull requests' refs, plan each new head
//! against the live store (a dry run: nothing of the app is written), report the plan on the
//! head commit and in one comment, and, with `preview.deploy`, run each pull request's objects
//! in its own namespace until its ref goes away.
//!
//! It runs in its own task beside the app's loop, so previewing many pull requests never delays
//! a drift revert. Nothing is torn down on incomplete data: a pass whose listing of the remote
//! failed forgets no preview.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::app::resource;
use super::{Error, error_chain};
use crate::config::{AppConfig, PreviewConfig};
use crate::diff::PlanOptions;
use crate::health::{self, Health};
use crate::object::{Object, ObjectKey, Revision};
use crate::preview::{self, PreviewRecord, RefGlob, natural};
use crate::render::Render;
use crate::report::{Commenter, CommitStatus, Reporter, State};
use crate::source::{GitCache, RemoteHead};
use crate::status::SyncStatus;
use crate::store::{self, Precondition, Store, Write};
use crate::sync::{self, Inventory};

/// What one pass did, for logs and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Pull requests whose new head was planned.
    pub planned: Vec<String>,
    /// Pull requests skipped by `maxAge` or `maxOpen`.
    pub skipped: Vec<String>,
    /// Previews removed because their ref went away (or fell outside the limits).
    pub removed: Vec<String>,
    /// True when the remote could not be listed (nothing was removed).
    pub source_failed: bool,
    /// True when the app has not applied a revision yet: nothing was planned (previews are
    /// diffs against what the app applied).
    pub waiting: bool,
}

/// One app's previews and the handles they need.
pub struct Previews {
    cfg: AppConfig,
    preview: PreviewConfig,
    glob: RefGlob,
    store: Arc<dyn Store>,
    git: GitCache,
    /// Serializes writes with the agent's apps, so two writers never both claim a new key.
    claim: Arc<Mutex<()>>,
    reporter: Option<Reporter>,
    commenter: Option<Commenter>,
    external_url: Option<String>,
    health_rules: health::CustomRules,
    /// The records as last written, by number.
    records: BTreeMap<String, PreviewRecord>,
    /// The pull requests left out by the last pass (to log each only when it starts).
    skipped: BTreeSet<String>,
    /// The deployed desired set of each pull request, by the revision it was read at.
    desired: HashMap<String, (Revision, Arc<BTreeMap<ObjectKey, Object>>)>,
    /// True once the wait for the app's first applied revision was logged (logged once).
    waiting_logged: bool,
}

impl Previews {
    /// The previews of the app `cfg` (which has a `preview` section), with the records already
    /// in the store.
    ///
    /// # Errors
    ///
    /// [`Error::PreviewsUnreadable`], [`Error::InvalidPreview`] (which the config's validation
    /// prevents).
    pub async fn load(
        cfg: AppConfig,
        store: Arc<dyn Store>,
        git: GitCache,
        claim: Arc<Mutex<()>>,
    ) -> Result<Self, Error> {
        let app = cfg.name.value.clone();
        let preview = cfg.preview.clone().ok_or_else(|| Error::InvalidPreview {
            app: app.clone(),
            message: "no preview section".into(),
        })?;
        let glob = RefGlob::new(&preview.refs.value).map_err(|message| Error::InvalidPreview {
            app: app.clone(),
            message,
        })?;
        let records = preview::list(store.as_ref(), &app)
            .await
            .map_err(|source| Error::PreviewsUnreadable {
                app: app.clone(),
                source,
            })?
            .into_iter()
            .map(|r| (r.number.clone(), r))
            .collect();
        Ok(Self {
            cfg,
            preview,
            glob,
            store,
            git,
            claim,
            reporter: None,
            commenter: None,
            external_url: None,
            health_rules: health::CustomRules::none(),
            waiting_logged: false,
            records,
            skipped: BTreeSet::new(),
            desired: HashMap::new(),
        })
    }

    /// Posts preview statuses through `reporter`; with `comment`, also keeps one comment per
    /// pull request through the same provider.
    pub fn with_reporter(mut self, reporter: Reporter) -> Self {
        if self.preview.comment {
            self.commenter = Some(Commenter::new(reporter.provider()));
        }
        self.external_url = reporter.external_url().map(str::to_string);
        self.reporter = Some(reporter);
        self
    }

    /// Links statuses and comments to `<externalUrl>/apps/<app>/previews/<number>` (without a
    /// reporter, for the records alone).
    pub fn with_external_url(mut self, url: Option<String>) -> Self {
        if self.external_url.is_none() {
            self.external_url = url;
        }
        self
    }

    /// Assesses deployed previews with these custom rules before the built-in ones.
    pub fn with_health_rules(mut self, rules: health::CustomRules) -> Self {
        self.health_rules = rules;
        self
    }

    /// The app's name.
    pub fn name(&self) -> &str {
        &self.cfg.name.value
    }

    /// How often a pass runs: the app's poll interval.
    pub fn interval(&self) -> Duration {
        self.cfg.source.interval.value
    }

    fn url_of(&self, number: &str) -> Option<String> {
        self.external_url.as_ref().map(|u| {
            format!(
                "{}/apps/{}/previews/{number}",
                u.trim_end_matches('/'),
                self.name()
            )
        })
    }

    /// One pass: list the pull requests, plan new heads (and every head again when the app's
    /// inventory moved), keep deployed previews reconciled, remove the previews whose ref went
    /// away or fell outside the limits. Never fails: problems are logged and recorded.
    pub async fn pass(&mut self) -> PassReport {
        let mut report = PassReport::default();
        let glob = self.glob.clone();
        let heads = match self
            .git
            .fetch_matching(
                &self.cfg.source.repo.value,
                Arc::new(move |name| glob.number_of(name).is_some()),
                self.cfg.source.timeout.value,
            )
            .await
        {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot list the pull requests; previews stay as they are");
                report.source_failed = true;
                return report;
            }
        };
        // What the plans are made against: the app's inventory, as it is now. When it moves (a
        // new revision applied, drift reverted), every preview is planned again.
        let base = match Inventory::load(self.store.as_ref(), self.name()).await {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot read the app's inventory; previews stay as they are");
                return report;
            }
        };
        // A preview is a diff against what the app applied: until the app has applied a
        // revision whole, every object would read "to create", a wrong status on the pull
        // request that the next pass corrects.
        if base.revision.is_none() {
            if !self.waiting_logged {
                tracing::info!(
                    "Previews wait until the app applies its first revision (they are diffs against it)"
                );
                self.waiting_logged = true;
            }
            tracing::debug!("The app has not applied a revision yet; previews wait for it");
            report.waiting = true;
            return report;
        }
        if std::mem::take(&mut self.waiting_logged) {
            tracing::info!(revision = %base.revision.as_ref().map_or("", Revision::short), "The app applied a revision; planning previews");
        }
        let (eligible, skipped) = self.select(heads);
        let wanted: BTreeSet<String> = eligible.iter().map(|(n, _)| n.clone()).collect();
        // Known previews (records, or environments left by an earlier run or config) whose ref
        // is no longer eligible go. The listing succeeded: this is complete information.
        let deployed: BTreeSet<String> = self.deployed_numbers().await.into_iter().collect();
        let mut known: BTreeSet<String> = self.records.keys().cloned().collect();
        known.extend(deployed.iter().cloned());
        for number in known.difference(&wanted) {
            let reason = skipped.iter().find(|(n, _, _)| n == number);
            let result = match self.remove_environment(number).await {
                Ok(()) => {
                    match reason {
                        // Its ref is still there: say on the pull request why it has no
                        // preview any more, rather than leave a status that never changes.
                        Some((_, head, why)) if self.records.contains_key(number) => {
                            self.publish_skip(number, head, why);
                        }
                        None if self.records.contains_key(number) => {
                            let body = format!(
                                "**driftless preview of `{}`**: the pull request's ref is gone (merged or closed); its preview is removed.\n",
                                self.name()
                            );
                            self.comment(number, body);
                        }
                        _ => {}
                    }
                    self.desired.remove(number);
                    self.remove_record(number).await
                }
                Err(e) => Err(e),
            };
            match result {
                Ok(()) => report.removed.push(number.clone()),
                Err(e) => {
                    tracing::warn!(number = %number, error = %e, "Cannot remove the preview; trying again at the next pass")
                }
            }
        }
        // Environments of a config that no longer deploys.
        if !self.preview.deploy {
            for number in deployed.intersection(&wanted) {
                match self.remove_environment(number).await {
                    Ok(()) => {
                        if let Some(r) = self.records.get_mut(number) {
                            // Planned again below, without its environment.
                            r.planned_against = None;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(number = %number, error = %e, "Cannot delete the preview environment; trying again at the next pass")
                    }
                }
            }
        }
        report.skipped = skipped.into_iter().map(|(n, _, _)| n).collect();
        let mut published = BTreeSet::new();
        for (number, head) in eligible {
            let stale = self.records.get(&number).is_none_or(|r| {
                r.revision != head.revision.0 || r.planned_against != base.resource_version
            });
            if stale {
                report.planned.push(number.clone());
            }
            if (stale || self.preview.deploy)
                && let Err(e) = self.preview_one(&number, &head, stale, &base).await
            {
                tracing::warn!(number = %number, error = %e, "Preview failed; trying again at the next pass");
                continue;
            }
            // Two pull requests with one head commit share its status (the lowest number's).
            let first = published.insert(head.revision.0.clone());
            self.publish(&number, first);
        }
        report
    }

    /// The pull requests to preview (number → head) in number order: at most `maxOpen` (those
    /// already previewed first, then the highest numbers), none whose head commit is older than
    /// `maxAge`; and those left out, with why.
    fn select(&mut self, heads: Vec<RemoteHead>) -> (Vec<(String, RemoteHead)>, Vec<Skipped>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut skipped = Vec::new();
        let mut candidates: Vec<(String, RemoteHead)> = Vec::new();
        for h in heads {
            let Some(number) = self.glob.number_of(&h.name) else {
                continue;
            };
            if let Some(max_age) = &self.preview.max_age
                && now - h.commit_time > max_age.value.as_secs() as i64
            {
                let why = format!(
                    "no preview: the head commit is older than preview.maxAge ({})",
                    humantime::format_duration(max_age.value)
                );
                skipped.push((number, h, why));
                continue;
            }
            candidates.push((number, h));
        }
        // Previews already shown keep their place (a burst of new pull requests, whatever
        // their commit dates say, never evicts them); then the highest numbers, the newest
        // pull requests. Not commit dates: their authors set them.
        candidates.sort_by(|a, b| {
            let unseen = |n: &String| !self.records.contains_key(n);
            unseen(&a.0)
                .cmp(&unseen(&b.0))
                .then_with(|| natural(&b.0).cmp(&natural(&a.0)))
        });
        let max = self.preview.max_open.value;
        if candidates.len() > max {
            for (number, h) in candidates.drain(max..) {
                let why =
                    format!("no preview: more open pull requests than preview.maxOpen ({max})");
                skipped.push((number, h, why));
            }
        }
        let now_skipped: BTreeSet<String> = skipped.iter().map(|(n, _, _)| n.clone()).collect();
        for n in now_skipped.difference(&self.skipped) {
            tracing::info!(number = %n, "Pull request not previewed (preview.maxOpen or preview.maxAge)");
        }
        self.skipped = now_skipped;
        candidates.sort_by_key(|c| natural(&c.0));
        (candidates, skipped)
    }

    /// The numbers of previews deployed by this app (their inventories), even without a
    /// record.
    async fn deployed_numbers(&self) -> Vec<String> {
        let prefix = preview::inventory_name(self.name(), "");
        match self
            .store
            .list(&store::Selector {
                group: Some(crate::object::RESERVED_GROUP.into()),
                kind: Some(sync::INVENTORY_KIND.into()),
                namespace: None,
            })
            .await
        {
            Ok(l) => l
                .objects
                .keys()
                .chain(l.unreadable.keys())
                .filter_map(|k| k.name().strip_prefix(&prefix).map(str::to_string))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot list deployed previews");
                Vec::new()
            }
        }
    }

    /// Deletes a preview's environment: its deployed objects (its own inventory's, nothing
    /// else) and its inventory.
    async fn remove_environment(&self, number: &str) -> Result<(), String> {
        let inv_name = preview::inventory_name(self.name(), number);
        let inventory = Inventory::load(self.store.as_ref(), &inv_name)
            .await
            .map_err(|e| error_chain(&e))?;
        if !inventory.entries.is_empty() {
            let empty = BTreeMap::new();
            let revision = inventory
                .revision
                .clone()
                .unwrap_or(Revision(String::new()));
            let source = format!("preview of {} #{number}", self.name());
            let ignore = self.cfg.sync.ignore_rules();
            let request = sync::Request {
                entries_ahead: None,
                ignore: &ignore,
                app: &inv_name,
                revision: &revision,
                source: &source,
                desired: &empty,
                scope: None,
                options: PlanOptions {
                    prune: true,
                    allow_empty: true,
                    adopt: false,
                    prune_non_empty: false,
                },
                dry_run: false,
                inventory: Some(&inventory),
                verified: None,
                hold: None,
            };
            let outcome = {
                let _claim = self.claim.lock().await;
                sync::sync(self.store.as_ref(), &request).await
            }
            .map_err(|e| error_chain(&e))?;
            tracing::info!(
                number,
                deleted = outcome.plan.summary().delete,
                "Preview environment deleted"
            );
        }
        if inventory.resource_version.is_some() {
            self.store
                .commit(vec![Write::Delete {
                    key: Inventory::record_key(&inv_name),
                    precondition: Precondition::Any,
                }])
                .await
                .map_err(|e| error_chain(&e))?;
        }
        Ok(())
    }

    async fn remove_record(&mut self, number: &str) -> Result<(), String> {
        preview::delete(self.store.as_ref(), self.name(), number)
            .await
            .map_err(|e| error_chain(&e))?;
        if self.records.remove(number).is_some() {
            tracing::info!(number, "Preview removed");
        }
        Ok(())
    }

    /// Plans (when `stale`) and deploys (with `preview.deploy`) one pull request, and records
    /// it. A head that does not parse leaves the environment of the last good head in force.
    async fn preview_one(
        &mut self,
        number: &str,
        head: &RemoteHead,
        stale: bool,
        base: &Inventory,
    ) -> Result<(), String> {
        let old = self.records.get(number).cloned();
        let mut rec = match (&old, stale) {
            (Some(r), false) => r.clone(),
            _ => self.plan(number, head, base).await?,
        };
        if self.preview.deploy {
            let last_good = old.as_ref().and_then(|r| r.deployed_revision.clone());
            let source = if rec.state != State::Error {
                Some((head.revision.clone(), true))
            } else {
                last_good.map(|r| (Revision(r), false))
            };
            if let Some((revision, current)) = source {
                // Read and parsed once per head, not at every pass.
                let desired = match self.desired.get(number) {
                    Some((r, d)) if *r == revision => d.clone(),
                    _ => {
                        let set = Render::for_app(&self.cfg)
                            .read(&self.git, &self.cfg, &revision)
                            .await
                            .map_err(|e| error_chain(&e))?;
                        let d: Arc<BTreeMap<ObjectKey, Object>> = Arc::new(
                            set.objects
                                .into_iter()
                                .map(|(k, d)| (k, d.object))
                                .collect(),
                        );
                        self.desired
                            .insert(number.to_string(), (revision.clone(), d.clone()));
                        d
                    }
                };
                let reconciling = !stale;
                self.deploy(number, &revision, &desired, &mut rec, current, reconciling)
                    .await?;
            }
        }
        let changed = old.is_none_or(|old| {
            let mut a = old;
            a.updated_at = rec.updated_at.clone();
            a != rec
        });
        if changed {
            rec.updated_at = store::now_rfc3339();
            preview::write(self.store.as_ref(), &rec)
                .await
                .map_err(|e| error_chain(&e))?;
            // A preview that failed is a warning; one applied or under way is information.
            if matches!(rec.state, State::Error | State::Failure) {
                tracing::warn!(number = %number, revision = %head.revision.short(), state = ?rec.state, description = %rec.description, "Preview");
            } else {
                tracing::info!(number = %number, revision = %head.revision.short(), state = ?rec.state, description = %rec.description, "Preview");
            }
            self.records.insert(number.to_string(), rec);
        }
        Ok(())
    }

    /// Parses the head's tree at the app's path and plans it against the live store as if it
    /// were the app's source (with the app's inventory `base`): a dry run, nothing is written.
    async fn plan(
        &self,
        number: &str,
        head: &RemoteHead,
        base: &Inventory,
    ) -> Result<PreviewRecord, String> {
        let mut rec = PreviewRecord {
            app: self.name().to_string(),
            number: number.to_string(),
            git_ref: head.name.clone(),
            revision: head.revision.0.clone(),
            commit_time: head.commit_time,
            state: State::Success,
            description: String::new(),
            summary: None,
            changes: Vec::new(),
            diff: String::new(),
            diagnostics: Vec::new(),
            namespace: None,
            health: None,
            resources: Vec::new(),
            planned_against: base.resource_version,
            deployed_revision: None,
            updated_at: String::new(),
        };
        let set = match Render::for_app(&self.cfg)
            .read(&self.git, &self.cfg, &head.revision)
            .await
        {
            Ok(set) => set,
            Err(crate::render::Error::Source(e @ crate::source::Error::PathNotFound { .. })) => {
                rec.state = State::Error;
                rec.description = format!("{e} (source.path in the config)");
                return Ok(rec);
            }
            // The head cannot be rendered (a failing overlay, a chart that does not build):
            // the preview's error, as an invalid manifest is.
            Err(e @ crate::render::Error::Source(_)) => return Err(error_chain(&e)),
            Err(e) => {
                rec.state = State::Error;
                rec.description = format!("render failed: {}", error_chain(&e));
                return Ok(rec);
            }
        };
        rec.diagnostics = set.diagnostics.clone();
        if let Some(first) = set.first_error() {
            rec.state = State::Error;
            rec.description = format!(
                "invalid manifest {}:{}:{}: {}",
                first.path, first.line, first.column, first.message
            );
            return Ok(rec);
        }
        let positions: BTreeMap<ObjectKey, (String, u64, u64)> = set
            .objects
            .iter()
            .map(|(k, d)| (k.clone(), (d.path.clone(), d.line, d.column)))
            .collect();
        let desired: BTreeMap<ObjectKey, Object> = set
            .objects
            .into_iter()
            .map(|(k, d)| (k, d.object))
            .collect();
        let source = format!("preview #{number}");
        let ignore = self.cfg.sync.ignore_rules();
        let request = sync::Request {
            entries_ahead: None,
            ignore: &ignore,
            app: self.name(),
            revision: &head.revision,
            source: &source,
            desired: &desired,
            scope: None,
            options: PlanOptions {
                prune: self.cfg.sync.prune,
                allow_empty: self.cfg.sync.allow_empty,
                adopt: self.cfg.sync.adopt,
                prune_non_empty: self.cfg.sync.prune_non_empty,
            },
            dry_run: true,
            inventory: Some(base),
            verified: None,
            hold: None,
        };
        let outcome = sync::sync(self.store.as_ref(), &request)
            .await
            .map_err(|e| error_chain(&e))?;
        // A target that checks what it is given (Kubernetes: a server-side dry run of every
        // object) says now what it would refuse, as it would when the pull request is merged.
        let objects: Vec<Object> = desired.values().cloned().collect();
        let refused = self
            .store
            .check(&objects)
            .await
            .map_err(|e| error_chain(&e))?;
        if !refused.is_empty() {
            if let super::conditions::Problem::Invalid { message, .. } =
                super::revision::refusals(&refused, &positions)
            {
                rec.description = message;
            }
            rec.state = State::Error;
            for (key, message) in &refused {
                let (path, line, column) = positions
                    .get(key)
                    .cloned()
                    .unwrap_or_else(|| (String::new(), 1, 1));
                rec.diagnostics.push(crate::manifest::Diagnostic::error(
                    &path,
                    line,
                    column,
                    format!("{key}: {message}"),
                ));
            }
            rec.changes = preview::changes_of(&outcome.plan);
            rec.diff = preview::render_diff(&outcome.plan);
            return Ok(rec);
        }
        let summary = outcome.plan.summary();
        rec.description = preview::describe(&summary);
        rec.summary = Some(summary);
        rec.changes = preview::changes_of(&outcome.plan);
        rec.diff = preview::render_diff(&outcome.plan);
        Ok(rec)
    }

    /// Applies `desired` (read at `revision`) into the pull request's namespace under its own
    /// inventory (never touching an object another app or preview owns), and records their
    /// health. With `current`, the record's state and description become the environment's;
    /// otherwise (the last good head kept in force under a broken one) they stay as they are.
    /// `reconciling` (an unchanged head) logs what was reverted.
    async fn deploy(
        &self,
        number: &str,
        revision: &Revision,
        desired: &BTreeMap<ObjectKey, Object>,
        rec: &mut PreviewRecord,
        current: bool,
        reconciling: bool,
    ) -> Result<(), String> {
        let namespace = match preview::namespace_for(&self.preview.namespace.value, number) {
            Ok(ns) => ns,
            Err(message) => {
                rec.state = State::Error;
                rec.description = message;
                return Ok(());
            }
        };
        if namespace == self.cfg.target.namespace.value {
            rec.state = State::Error;
            rec.description = format!(
                "preview namespace `{namespace}` is the app's own target namespace (preview.namespace)"
            );
            return Ok(());
        }
        let mut moved = match preview::into_namespace(desired, &namespace) {
            Ok((moved, left_out)) => {
                if !left_out.is_empty() {
                    tracing::debug!(
                        number,
                        left_out = left_out.len(),
                        "Cluster-scoped objects are not deployed in previews"
                    );
                }
                moved
            }
            Err(message) => {
                rec.state = State::Error;
                rec.description = message;
                return Ok(());
            }
        };
        let inv_name = preview::inventory_name(self.name(), number);
        let inventory = Inventory::load(self.store.as_ref(), &inv_name)
            .await
            .map_err(|e| error_chain(&e))?;
        // A preview never takes over an object it did not create: one already in the store
        // (made by hand, by another app, by anything) is left alone, and said so.
        let keys: Vec<ObjectKey> = moved
            .keys()
            .filter(|k| !inventory.entries.contains_key(*k))
            .cloned()
            .collect();
        let existing = if keys.is_empty() {
            BTreeMap::new()
        } else {
            self.store
                .get_many(&keys)
                .await
                .map_err(|e| error_chain(&e))?
                .objects
        };
        let mut foreign = BTreeMap::new();
        for key in existing.keys() {
            if let Some(obj) = moved.remove(key) {
                foreign.insert(key.clone(), obj);
            }
        }
        // On a shared target (Kubernetes) the preview's namespace is made with it and goes
        // with it: the first object applied, the last pruned (and only while it holds nothing
        // the preview does not own). One that exists already is used as it is.
        if self.store.promises().server_side_apply {
            let ns = Object::from_value(serde_json::json!({
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace},
            }))
            .map_err(|e| e.to_string())?;
            if !existing.contains_key(&ns.key()) {
                moved.insert(ns.key(), ns);
            }
        }
        let source = format!("preview of {} #{number}", self.name());
        let ignore = self.cfg.sync.ignore_rules();
        let request = sync::Request {
            entries_ahead: None,
            ignore: &ignore,
            app: &inv_name,
            revision,
            source: &source,
            desired: &moved,
            scope: None,
            options: PlanOptions {
                prune: true,
                allow_empty: true,
                adopt: false,
                prune_non_empty: false,
            },
            dry_run: false,
            inventory: Some(&inventory),
            verified: None,
            hold: None,
        };
        let outcome = {
            let _claim = self.claim.lock().await;
            sync::sync(self.store.as_ref(), &request).await
        }
        .map_err(|e| error_chain(&e))?;
        let s = outcome.plan.summary();
        if reconciling && s.create + s.update + s.delete > 0 {
            tracing::info!(
                number,
                created = s.create,
                updated = s.update,
                deleted = s.delete,
                "Preview drift reverted"
            );
        }
        let status_kinds = health::StatusKinds::from_objects(moved.values());
        let mut resources = Vec::new();
        for key in moved.keys() {
            let live = outcome.live.get(key).map(|s| s.object());
            let live = live.as_deref();
            let (sync, message) = match outcome.conflicts.get(key) {
                Some(why) => (SyncStatus::OutOfSync, Some(why.clone())),
                None if live.is_some() => (SyncStatus::Synced, None),
                None => (SyncStatus::OutOfSync, Some("missing from the store".into())),
            };
            let version = moved[key].version().to_string();
            resources.push(resource(
                key,
                version,
                sync,
                super::assess_health(live, &self.health_rules, &status_kinds),
                message,
            ));
        }
        for (key, obj) in &foreign {
            resources.push(resource(
                key,
                obj.version().to_string(),
                SyncStatus::OutOfSync,
                super::assess_health(existing.get(key), &self.health_rules, &status_kinds),
                Some("already in the store and not created by this preview: left alone".into()),
            ));
        }
        resources.sort_by_key(|r| r.key());
        let conflicts = outcome.conflicts.len() + foreign.len();
        let h = health::worst(resources.iter().map(|r| r.health));
        if current {
            rec.state = match h {
                Health::Healthy => State::Success,
                Health::Degraded => State::Failure,
                _ => State::Pending,
            };
            if conflicts > 0 {
                rec.state = State::Failure;
            }
            let plan = rec
                .summary
                .as_ref()
                .map_or_else(|| "no plan".to_string(), preview::describe);
            rec.description = format!("{plan}; {namespace}: {h}");
            if conflicts > 0 {
                rec.description.push_str(&format!(
                    ", {conflicts} already in the store and left alone"
                ));
            }
        }
        rec.deployed_revision = Some(revision.0.clone());
        rec.namespace = Some(namespace);
        rec.health = Some(h);
        rec.resources = resources;
        Ok(())
    }

    /// Posts the record's commit status (unless `status` is false: another pull request with
    /// the same head posted it) and comment, each only when it changed.
    fn publish(&mut self, number: &str, status: bool) {
        let Some(rec) = self.records.get(number).cloned() else {
            return;
        };
        let url = self.url_of(number);
        if status && let Some(reporter) = &mut self.reporter {
            reporter.post(CommitStatus {
                sha: rec.revision.clone(),
                context: format!("driftless/{}/preview", rec.app),
                state: rec.state,
                description: rec.description.clone(),
                target_url: url.clone(),
            });
        }
        let body = preview::comment_body(&rec, url.as_deref());
        self.comment(number, body);
    }

    /// Says on a pull request that was previewed why it is not any more (`maxOpen`, `maxAge`).
    fn publish_skip(&mut self, number: &str, head: &RemoteHead, why: &str) {
        let app = self.name().to_string();
        if let Some(reporter) = &mut self.reporter {
            reporter.post(CommitStatus {
                sha: head.revision.0.clone(),
                context: format!("driftless/{app}/preview"),
                state: State::Error,
                description: why.to_string(),
                target_url: None,
            });
        }
        let body = format!("**driftless preview of `{app}`**: {why}.\n");
        self.comment(number, body);
    }

    fn comment(&self, number: &str, body: String) {
        let Some(commenter) = &self.commenter else {
            return;
        };
        match number.parse::<u64>() {
            Ok(n) => {
                commenter.update(n, self.name(), &body);
            }
            Err(_) => tracing::debug!(number, "Not a pull-request number; no comment"),
        }
    }
}

/// A pull request left out of the previews: (number, head, why).
type Skipped = (String, RemoteHead, String);
