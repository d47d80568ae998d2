//! One app's pull-request previews: discover the pull requests' refs, plan each new head
//! against the live store (a dry run: nothing of the app is written), report the plan on the
//! head commit and in one comment, and, with `preview.deploy`, run each pull request's objects
//! in its own namespace until its ref goes away.
//!
//! It runs in its own task beside the app's loop, so previewing many pull requests never delays
//! a drift revert. Nothing is torn down on incomplete data: a pass whose listing of the remote
//! failed forgets no preview.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;

use super::app::resource;
use super::{Error, error_chain};
use crate::config::{AppConfig, PreviewConfig};
use crate::diff::PlanOptions;
use crate::health::{self, Health};
use crate::manifest;
use crate::object::{Object, ObjectKey, Revision};
use crate::preview::{self, PreviewRecord, RefGlob};
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
            records,
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
        self.external_url
            .as_ref()
            .map(|u| format!("{u}/apps/{}/previews/{number}", self.name()))
    }

    /// One pass: list the pull requests, plan new heads, keep deployed previews reconciled,
    /// remove the previews whose ref went away. Never fails: problems are logged and recorded.
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
        let (eligible, skipped) = self.select(heads);
        report.skipped = skipped;
        let wanted: BTreeSet<String> = eligible.iter().map(|(n, _)| n.clone()).collect();
        // Gone: known previews (records, or deployed inventories left by an earlier run) whose
        // ref is no longer eligible. The listing succeeded, so this is complete information.
        let mut known: BTreeSet<String> = self.records.keys().cloned().collect();
        if self.preview.deploy {
            known.extend(self.deployed_numbers().await);
        }
        for number in known.difference(&wanted) {
            match self.remove(number).await {
                Ok(()) => report.removed.push(number.clone()),
                Err(e) => {
                    tracing::warn!(number = %number, error = %e, "Cannot remove the preview; trying again at the next pass")
                }
            }
        }
        for (number, head) in eligible {
            let fresh = self
                .records
                .get(&number)
                .is_none_or(|r| r.revision != head.revision.0);
            if !fresh && !self.preview.deploy {
                self.publish(&number).await;
                continue;
            }
            if fresh {
                report.planned.push(number.clone());
            }
            if let Err(e) = self.preview_one(&number, &head, fresh).await {
                tracing::warn!(number = %number, error = %e, "Preview failed; trying again at the next pass");
            }
        }
        report
    }

    /// The pull requests to preview (number → head), newest head commit first, at most
    /// `maxOpen`, none older than `maxAge`; and the numbers left out.
    fn select(&self, heads: Vec<RemoteHead>) -> (Vec<(String, RemoteHead)>, Vec<String>) {
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
                tracing::debug!(number = %number, "Head commit older than preview.maxAge; skipped");
                skipped.push(number);
                continue;
            }
            candidates.push((number, h));
        }
        candidates.sort_by(|a, b| {
            b.1.commit_time
                .cmp(&a.1.commit_time)
                .then_with(|| a.0.cmp(&b.0))
        });
        let max = self.preview.max_open.value;
        if candidates.len() > max {
            for (number, _) in candidates.drain(max..) {
                tracing::info!(number = %number, max_open = max, "More open pull requests than preview.maxOpen; skipped");
                skipped.push(number);
            }
        }
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
                .filter_map(|k| k.name.strip_prefix(&prefix).map(str::to_string))
                .collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "Cannot list deployed previews");
                Vec::new()
            }
        }
    }

    /// Deletes a preview: its deployed objects (its own inventory's, nothing else), its
    /// inventory and its record.
    async fn remove(&mut self, number: &str) -> Result<(), String> {
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
            let request = sync::Request {
                app: &inv_name,
                revision: &revision,
                source: &source,
                desired: &empty,
                scope: None,
                options: PlanOptions {
                    prune: true,
                    allow_empty: true,
                },
                dry_run: false,
                inventory: Some(&inventory),
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
        preview::delete(self.store.as_ref(), self.name(), number)
            .await
            .map_err(|e| error_chain(&e))?;
        self.records.remove(number);
        tracing::info!(number, "Preview removed: its ref is gone");
        Ok(())
    }

    /// Plans (when `fresh`) and deploys (with `preview.deploy`) one pull request, then records
    /// and reports it.
    async fn preview_one(
        &mut self,
        number: &str,
        head: &RemoteHead,
        fresh: bool,
    ) -> Result<(), String> {
        let repo = self.cfg.source.repo.value.clone();
        let base = self.records.get(number).filter(|_| !fresh).cloned();
        let mut rec = match base {
            Some(r) => r,
            None => self.plan(number, head, &repo).await?,
        };
        if self.preview.deploy && rec.state != State::Error {
            // The desired set again (parsing is cheap next to a sync, and the record keeps no
            // objects).
            let files = self
                .git
                .read(&repo, &head.revision, &self.cfg.source.path.value)
                .await
                .map_err(|e| error_chain(&e))?;
            let set = self.parse(files);
            let desired: BTreeMap<ObjectKey, Object> = set
                .objects
                .into_iter()
                .map(|(k, d)| (k, d.object))
                .collect();
            self.deploy(number, head, &desired, &mut rec).await?;
        }
        let mut changed = self.records.get(number).is_none_or(|old| {
            let mut a = old.clone();
            a.updated_at = rec.updated_at.clone();
            a != rec
        });
        if changed {
            rec.updated_at = store::now_rfc3339();
            preview::write(self.store.as_ref(), &rec)
                .await
                .map_err(|e| error_chain(&e))?;
            tracing::info!(number, revision = %head.revision.short(), state = ?rec.state, description = %rec.description, "Preview");
            self.records.insert(number.to_string(), rec);
        }
        changed |= fresh;
        if changed || self.reporter.is_some() {
            self.publish(number).await;
        }
        Ok(())
    }

    fn parse(&self, files: crate::source::Files) -> manifest::DesiredSet {
        let opts = manifest::Options {
            default_namespace: self.cfg.target.namespace.value.clone(),
        };
        manifest::parse_set(
            files.files.iter().map(|(p, b)| (p.as_str(), b.as_slice())),
            files.diagnostics,
            &opts,
        )
    }

    /// Parses the head's tree at the app's path and plans it against the live store as if it
    /// were the app's source: a dry run, nothing is written.
    async fn plan(
        &self,
        number: &str,
        head: &RemoteHead,
        repo: &str,
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
            updated_at: String::new(),
        };
        let files = match self
            .git
            .read(repo, &head.revision, &self.cfg.source.path.value)
            .await
        {
            Ok(f) => f,
            Err(e @ crate::source::Error::PathNotFound { .. }) => {
                rec.state = State::Error;
                rec.description = format!("{e} (source.path in the config)");
                return Ok(rec);
            }
            Err(e) => return Err(error_chain(&e)),
        };
        let set = self.parse(files);
        rec.diagnostics = set.diagnostics.clone();
        if let Some(first) = set.first_error() {
            rec.state = State::Error;
            rec.description = format!(
                "invalid manifest {}:{}:{}: {}",
                first.path, first.line, first.column, first.message
            );
            return Ok(rec);
        }
        let desired: BTreeMap<ObjectKey, Object> = set
            .objects
            .into_iter()
            .map(|(k, d)| (k, d.object))
            .collect();
        let inventory = Inventory::load(self.store.as_ref(), self.name())
            .await
            .map_err(|e| error_chain(&e))?;
        let source = format!("preview #{number}");
        let request = sync::Request {
            app: self.name(),
            revision: &head.revision,
            source: &source,
            desired: &desired,
            scope: None,
            options: PlanOptions {
                prune: self.cfg.sync.prune,
                allow_empty: self.cfg.sync.allow_empty,
            },
            dry_run: true,
            inventory: Some(&inventory),
            hold: None,
        };
        let outcome = sync::sync(self.store.as_ref(), &request)
            .await
            .map_err(|e| error_chain(&e))?;
        let summary = outcome.plan.summary();
        rec.description = preview::describe(&summary);
        rec.summary = Some(summary);
        rec.changes = preview::changes_of(&outcome.plan);
        rec.diff = preview::render_diff(&outcome.plan);
        Ok(rec)
    }

    /// Applies the pull request's objects into its namespace under its own inventory (never
    /// touching an object another app or preview owns), and records their health.
    async fn deploy(
        &self,
        number: &str,
        head: &RemoteHead,
        desired: &BTreeMap<ObjectKey, Object>,
        rec: &mut PreviewRecord,
    ) -> Result<(), String> {
        let namespace = match preview::namespace_for(&self.preview.namespace.value, number) {
            Ok(ns) => ns,
            Err(message) => {
                rec.state = State::Error;
                rec.description = message;
                return Ok(());
            }
        };
        let (moved, left_out) = preview::into_namespace(desired, &namespace);
        if !left_out.is_empty() {
            tracing::debug!(
                number,
                left_out = left_out.len(),
                "Cluster-scoped objects are not deployed in previews"
            );
        }
        let inv_name = preview::inventory_name(self.name(), number);
        let source = format!("preview of {} #{number}", self.name());
        let request = sync::Request {
            app: &inv_name,
            revision: &head.revision,
            source: &source,
            desired: &moved,
            scope: None,
            options: PlanOptions {
                prune: true,
                allow_empty: true,
            },
            dry_run: false,
            inventory: None,
            hold: None,
        };
        let outcome = {
            let _claim = self.claim.lock().await;
            sync::sync(self.store.as_ref(), &request).await
        }
        .map_err(|e| error_chain(&e))?;
        let mut resources = Vec::new();
        for key in moved.keys() {
            let live = outcome.live.get(key);
            let (sync, message) = match outcome.conflicts.get(key) {
                Some(owner) => (
                    SyncStatus::OutOfSync,
                    Some(format!("also declared by {owner}, which owns it")),
                ),
                None if live.is_some() => (SyncStatus::Synced, None),
                None => (SyncStatus::OutOfSync, Some("missing from the store".into())),
            };
            let version = moved[key].version().to_string();
            resources.push(resource(
                key,
                version,
                sync,
                health::assess(live, &self.health_rules),
                message,
            ));
        }
        let h = health::worst(resources.iter().map(|r| r.health));
        rec.state = match h {
            Health::Healthy => State::Success,
            Health::Degraded => State::Failure,
            _ => State::Pending,
        };
        if !outcome.conflicts.is_empty() {
            rec.state = State::Failure;
        }
        let plan = rec
            .summary
            .as_ref()
            .map_or_else(|| "no plan".to_string(), preview::describe);
        rec.description = format!("{plan}; {namespace}: {h}");
        if !outcome.conflicts.is_empty() {
            rec.description.push_str(&format!(
                ", {} owned by another app",
                outcome.conflicts.len()
            ));
        }
        rec.namespace = Some(namespace);
        rec.health = Some(h);
        rec.resources = resources;
        Ok(())
    }

    /// Posts the record's commit status and comment (each only when it changed).
    async fn publish(&mut self, number: &str) {
        let Some(rec) = self.records.get(number).cloned() else {
            return;
        };
        let url = self.url_of(number);
        if let Some(reporter) = &mut self.reporter {
            reporter.post(CommitStatus {
                sha: rec.revision.clone(),
                context: format!("driftless/{}/preview", rec.app),
                state: rec.state,
                description: rec.description.clone(),
                target_url: url.clone(),
            });
        }
        if let Some(commenter) = &self.commenter {
            match number.parse::<u64>() {
                Ok(n) => {
                    let body = preview::comment_body(&rec, url.as_deref());
                    commenter.update(n, &preview::comment_marker(&rec.app), body);
                }
                Err(_) => {
                    tracing::debug!(number, "Not a pull-request number; no comment")
                }
            }
        }
    }
}
