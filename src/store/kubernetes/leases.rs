//! Replicas on the Kubernetes store: the agents of one deployment share the apps through
//! `coordination.k8s.io/v1` Leases in the records' namespace, with the etcd store's rules
//! ([`crate::replicas::plan_pass`]).
//!
//! - Each replica registers with a Lease `driftless-replica.<digest of its name>`
//!   (`holderIdentity` its name, the apps it can run in the annotation `driftless.io/apps`),
//!   renewed every third of the TTL.
//! - Each app has a Lease `driftless-app.<app>`: `holderIdentity` the replica that holds it,
//!   `renewTime` moved by the holder every third of the TTL. Taking a free app creates it
//!   (refused when it exists); taking over an expired one replaces it under its
//!   resourceVersion (refused when anyone changed it since), so of two replicas racing for an
//!   app one wins.
//! - **Liveness is observed, not computed from timestamps** (as client-go's leader election):
//!   a Lease is live while its resourceVersion moved within the TTL, by this replica's own
//!   clock; clocks of other machines never count. A replica that is killed stops renewing; the
//!   others see its Leases stand still for a TTL and take its apps over on their next pass:
//!   within the TTL and one third of it.
//! - A replica whose renewals fail for two thirds of the TTL closes every gate (stops its app
//!   loops) before another replica could see its Leases expire.
//!
//! **What fencing can promise here.** The API server has no transaction across objects: a
//! write cannot require "and this replica still holds the app's Lease" as etcd's can. The
//! store of an app ([`KubeStore::fenced`]) refuses writes once the gate is closed, and the
//! gate closes two thirds of a TTL after the last successful renewal, before anyone may take
//! the app; so two replicas write for one app at once only if a process stalls (a pause longer
//! than a third of the TTL) between its gate check and its write. Each write still carries its
//! object's resourceVersion precondition, so such a late write fails when the new holder
//! changed that object since, and is reverted as drift otherwise.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::watch;

use super::{KubeStore, backend, code};
use crate::replicas::{Holder, PassMemory, plan_pass};
use crate::store::{Fence, Result};

/// The label on driftless's Leases: `app` or `replica`.
pub const LEASE_LABEL: &str = "driftless.io/lease";

/// The annotation on a replica's Lease: the apps it can run, as a JSON list.
const APPS_ANNOTATION: &str = "driftless.io/apps";

/// The annotation on an app's Lease: the app's name.
const APP_ANNOTATION: &str = "driftless.io/app";

fn lease_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"))
}

/// The Lease of `app`.
pub fn app_lease(app: &str) -> String {
    format!("driftless-app.{app}")
}

/// The Lease of replica `name` (any characters but `/`, so its name is a digest).
fn replica_lease(name: &str) -> String {
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("driftless-replica.{hex}")
}

/// Now as a Kubernetes `MicroTime`: RFC 3339 with microseconds.
fn micro_time(t: SystemTime) -> String {
    humantime::format_rfc3339_micros(t).to_string()
}

/// A `MicroTime` as microseconds since the epoch; 0 when it does not parse.
fn micros(time: Option<&str>) -> i64 {
    time.and_then(|t| humantime::parse_rfc3339_weak(t).ok())
        .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_micros() as i64)
}

fn spec_str<'a>(lease: &'a DynamicObject, field: &str) -> Option<&'a str> {
    lease.data.get("spec")?.get(field)?.as_str()
}

fn spec_i64(lease: &DynamicObject, field: &str) -> Option<i64> {
    lease.data.get("spec")?.get(field)?.as_i64()
}

/// Which replica holds each app (app name to replica name), by the Leases' own timestamps
/// (`renewTime` plus `leaseDurationSeconds` not past): for `driftless status`, where one look
/// cannot observe a Lease moving. An expired hold is left out.
///
/// # Errors
///
/// [`crate::store::Error::Backend`] when the Leases cannot be listed.
pub async fn holders(store: &KubeStore) -> Result<BTreeMap<String, String>> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        store.inner.client.clone(),
        &store.inner.options.namespace,
        &lease_resource(),
    );
    let list = api
        .list(&ListParams::default().labels(&format!("{LEASE_LABEL}=app")))
        .await
        .map_err(|e| backend("holders", e))?;
    let now = micros(Some(&micro_time(SystemTime::now())));
    let mut out = BTreeMap::new();
    for lease in list.items {
        let Some(app) = lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APP_ANNOTATION))
        else {
            continue;
        };
        let renewed = micros(spec_str(&lease, "renewTime"));
        let duration = spec_i64(&lease, "leaseDurationSeconds").unwrap_or(0);
        if let Some(holder) = spec_str(&lease, "holderIdentity")
            && renewed + duration * 1_000_000 >= now
        {
            out.insert(app.clone(), holder.to_string());
        }
    }
    Ok(out)
}

/// The replicas of one agent deployment sharing apps through Leases (see the module
/// documentation).
pub struct Replicas {
    store: KubeStore,
    name: String,
    ttl: Duration,
    apps: Vec<String>,
    gates: HashMap<String, watch::Sender<Option<Fence>>>,
    coordinated: watch::Sender<bool>,
}

/// What a replica remembers between passes: the planner's memory, and when each Lease's
/// resourceVersion was last seen to move (by this replica's clock).
#[derive(Default)]
struct Memory {
    plan: PassMemory,
    moved: HashMap<String, (String, tokio::time::Instant)>,
}

impl Memory {
    /// Notes `lease` at resourceVersion `rv` seen now; true while it moved within `ttl` (a
    /// Lease seen for the first time counts as moving now).
    fn live(&mut self, lease: &str, rv: &str, now: tokio::time::Instant, ttl: Duration) -> bool {
        let seen = self
            .moved
            .entry(lease.to_string())
            .or_insert_with(|| (rv.to_string(), now));
        if seen.0 != rv {
            *seen = (rv.to_string(), now);
        }
        now.duration_since(seen.1) < ttl
    }
}

impl Replicas {
    /// Coordination for `apps` as replica `name` (unique among the replicas) with Leases of
    /// `ttl` (whole seconds, at least 2), in `store`'s records namespace.
    pub fn new(store: &KubeStore, name: &str, ttl: Duration, apps: Vec<String>) -> Self {
        let gates = apps
            .iter()
            .map(|a| (a.clone(), watch::Sender::new(None)))
            .collect();
        Self {
            store: store.clone(),
            name: name.to_string(),
            ttl,
            apps,
            gates,
            coordinated: watch::Sender::new(false),
        }
    }

    /// The replica's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Lease time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// True once this replica has read who holds what (its first pass succeeded).
    pub fn coordinated(&self) -> watch::Receiver<bool> {
        self.coordinated.subscribe()
    }

    /// The gate of `app`: `Some(fence)` while this replica holds it. `None` for an unknown app.
    pub fn gate(&self, app: &str) -> Option<watch::Receiver<Option<Fence>>> {
        self.gates.get(app).map(watch::Sender::subscribe)
    }

    fn leases(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.store.inner.client.clone(),
            &self.store.inner.options.namespace,
            &lease_resource(),
        )
    }

    fn drop_all(&self) {
        for (app, gate) in &self.gates {
            if gate.send_if_modified(|f| f.take().is_some()) {
                tracing::warn!(%app, replica = %self.name, "App released: this replica cannot renew its Leases");
            }
        }
    }

    /// Runs the coordination until `shutdown` becomes true, then gives every app back
    /// (deletes its Lease) so the other replicas take over at once.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let beat = self.ttl / 3;
        let mut tick = tokio::time::interval(beat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut memory = Memory::default();
        let mut renewed = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tick.tick() => {}
            }
            let started = tokio::time::Instant::now();
            // A pass that gets no answer is given up in half the TTL: the gates must close
            // before the Leases expire, whatever the API server does.
            let passed = tokio::time::timeout(self.ttl / 2, self.pass(&mut memory))
                .await
                .unwrap_or_else(|elapsed| Err(backend("lease", elapsed)));
            match passed {
                Ok(()) => renewed = started,
                Err(e) => {
                    tracing::warn!(error = %super::super::error_chain(&e), "Replica coordination through Leases failed; trying again");
                    if renewed.elapsed() > self.ttl * 2 / 3 {
                        self.drop_all();
                    }
                }
            }
        }
        self.release().await;
    }

    /// Closes every gate and deletes this replica's Leases (its apps' and its own).
    async fn release(&self) {
        let held: Vec<String> = self
            .gates
            .iter()
            .filter(|(_, g)| g.borrow().is_some())
            .map(|(a, _)| a.clone())
            .collect();
        self.drop_all();
        let api = self.leases();
        for app in held {
            if let Ok(Some(lease)) = api.get_opt(&app_lease(&app)).await
                && spec_str(&lease, "holderIdentity") == Some(self.name.as_str())
            {
                let _ = api.delete(&app_lease(&app), &precondition(&lease)).await;
            }
        }
        let _ = api
            .delete(&replica_lease(&self.name), &DeleteParams::default())
            .await;
        tracing::info!(replica = %self.name, "Replica Leases deleted; apps released");
    }

    /// A Lease body: `holderIdentity` this replica, renewed now.
    fn body(&self, name: &str, kind: &str, annotations: Value, acquired: Option<&str>) -> Value {
        let now = micro_time(SystemTime::now());
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": self.store.inner.options.namespace,
                "labels": {LEASE_LABEL: kind},
                "annotations": annotations,
            },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": self.ttl.as_secs(),
                "acquireTime": acquired.map_or(now.clone(), str::to_string),
                "renewTime": now,
            },
        })
    }

    /// Creates `body`, or replaces the Lease `current` with it under `current`'s
    /// resourceVersion. `None` when another writer got there first.
    async fn write(
        &self,
        body: Value,
        current: Option<&DynamicObject>,
    ) -> Result<Option<DynamicObject>> {
        let api = self.leases();
        let mut body = body;
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let written = match current {
            None => {
                let obj: DynamicObject =
                    serde_json::from_value(body).map_err(|e| backend("lease", e))?;
                api.create(&PostParams::default(), &obj).await
            }
            Some(cur) => {
                body["metadata"]["resourceVersion"] =
                    json!(cur.metadata.resource_version.clone().unwrap_or_default());
                // The count of holders goes on, unless the body moves it (a takeover).
                if body["spec"].get("leaseTransitions").is_none()
                    && let Some(t) = spec_i64(cur, "leaseTransitions")
                {
                    body["spec"]["leaseTransitions"] = json!(t);
                }
                let obj: DynamicObject =
                    serde_json::from_value(body).map_err(|e| backend("lease", e))?;
                api.replace(&name, &PostParams::default(), &obj).await
            }
        };
        match written {
            Ok(o) => Ok(Some(o)),
            Err(e) if matches!(code(&e), Some(409 | 404)) => Ok(None),
            Err(e) => Err(backend("lease", e)),
        }
    }

    /// One look at who holds what: renew this replica's registration and its apps' Leases,
    /// then take, clear and give back as [`plan_pass`] says.
    async fn pass(&self, memory: &mut Memory) -> Result<()> {
        let api = self.leases();
        let now = tokio::time::Instant::now();
        // The registration, renewed (or made).
        let mine = replica_lease(&self.name);
        let registration =
            json!({APPS_ANNOTATION: serde_json::to_string(&self.apps).unwrap_or_default()});
        let current = api.get_opt(&mine).await.map_err(|e| backend("lease", e))?;
        if let Some(cur) = &current
            && spec_str(cur, "holderIdentity") != Some(self.name.as_str())
        {
            return Err(crate::store::Error::Backend {
                op: "lease",
                source: format!("Lease {mine} names another replica").into(),
            });
        }
        let body = self.body(&mine, "replica", registration, None);
        if self.write(body, current.as_ref()).await?.is_none() {
            return Err(crate::store::Error::Backend {
                op: "lease",
                source: format!(
                    "Lease {mine} changed while being renewed: is another replica named `{}`?",
                    self.name
                )
                .into(),
            });
        }
        let list = api
            .list(&ListParams::default().labels(LEASE_LABEL))
            .await
            .map_err(|e| backend("lease", e))?;
        let mut replicas: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
        let mut app_leases: HashMap<String, DynamicObject> = HashMap::new();
        for lease in list.items {
            let name = lease.metadata.name.clone().unwrap_or_default();
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            let live = memory.live(&name, &rv, now, self.ttl);
            let labels = lease.metadata.labels.clone().unwrap_or_default();
            let annotations = lease.metadata.annotations.clone().unwrap_or_default();
            match labels.get(LEASE_LABEL).map(String::as_str) {
                Some("replica") if live || name == mine => {
                    if let Some(holder) = spec_str(&lease, "holderIdentity") {
                        let apps = annotations
                            .get(APPS_ANNOTATION)
                            .and_then(|a| serde_json::from_str(a).ok());
                        replicas.insert(holder.to_string(), apps);
                    }
                }
                Some("app") => {
                    if let Some(app) = annotations.get(APP_ANNOTATION) {
                        app_leases.insert(app.clone(), lease);
                    }
                }
                _ => {}
            }
        }
        // Renew what this replica holds; note who holds the rest.
        let mut holders: BTreeMap<String, Holder> = BTreeMap::new();
        let mut expired: HashMap<String, DynamicObject> = HashMap::new();
        for app in &self.apps {
            let Some(lease) = app_leases.remove(app) else {
                if self.gates[app].send_if_modified(|f| f.take().is_some()) {
                    tracing::warn!(%app, "App Lease gone; app released");
                }
                continue;
            };
            let name = app_lease(app);
            let holder = spec_str(&lease, "holderIdentity")
                .unwrap_or_default()
                .to_string();
            let rv: u64 = lease
                .metadata
                .resource_version
                .as_deref()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0);
            if holder == self.name {
                let acquired = spec_str(&lease, "acquireTime").map(str::to_string);
                let body = self.body(
                    &name,
                    "app",
                    json!({APP_ANNOTATION: app}),
                    acquired.as_deref(),
                );
                if self.write(body, Some(&lease)).await?.is_some() {
                    let fence = Fence {
                        key: name,
                        created: micros(acquired.as_deref()),
                    };
                    self.gates[app].send_if_modified(|f| {
                        let changed = f.as_ref() != Some(&fence);
                        *f = Some(fence.clone());
                        changed
                    });
                    holders.insert(
                        app.clone(),
                        Holder {
                            replica: holder,
                            since_revision: rv,
                            lease: 1,
                        },
                    );
                    continue;
                }
                // Changed under this replica: someone else took it.
                self.gates[app].send_replace(None);
                tracing::warn!(%app, "App Lease taken by another replica");
                continue;
            }
            if self.gates[app].send_if_modified(|f| f.take().is_some()) {
                tracing::warn!(%app, holder = %holder, "App taken by another replica");
            }
            let lease_rv = lease.metadata.resource_version.clone().unwrap_or_default();
            if memory.live(&name, &lease_rv, now, self.ttl) {
                holders.insert(
                    app.clone(),
                    Holder {
                        replica: holder,
                        since_revision: rv,
                        lease: 1,
                    },
                );
            } else {
                expired.insert(app.clone(), lease);
            }
        }
        let plan = plan_pass(
            &self.name,
            1,
            &self.apps,
            &replicas,
            &holders,
            &mut memory.plan,
            now,
            self.ttl / 3,
        );
        for (app, rv) in &plan.clear {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: Some(rv.to_string()),
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            if api.delete(&app_lease(app), &params).await.is_ok() {
                tracing::warn!(%app, "Stale app Lease removed: its replica is gone");
            }
        }
        for app in &plan.take {
            let name = app_lease(app);
            let body = self.body(&name, "app", json!({APP_ANNOTATION: app}), None);
            let taken = match expired.get(app) {
                Some(old) => {
                    let mut body = body;
                    body["spec"]["leaseTransitions"] =
                        json!(spec_i64(old, "leaseTransitions").unwrap_or(0) + 1);
                    self.write(body, Some(old)).await?
                }
                None => self.write(body, None).await?,
            };
            memory.plan.free_since.remove(app);
            if let Some(lease) = taken {
                let fence = Fence {
                    key: name,
                    created: micros(spec_str(&lease, "acquireTime")),
                };
                tracing::info!(%app, replica = %self.name, "App Lease taken");
                self.gates[app].send_replace(Some(fence));
            }
        }
        if let Some(app) = &plan.give_back
            && let Some(lease) = app_leases_get(&api, app).await?
        {
            self.gates[app].send_replace(None);
            memory.plan.last_give_back = Some(now);
            let _ = api.delete(&app_lease(app), &precondition(&lease)).await;
            tracing::info!(%app, replica = %self.name, "App Lease given back to balance the replicas");
        }
        self.coordinated
            .send_if_modified(|c| !std::mem::replace(c, true));
        Ok(())
    }
}

async fn app_leases_get(api: &Api<DynamicObject>, app: &str) -> Result<Option<DynamicObject>> {
    api.get_opt(&app_lease(app))
        .await
        .map_err(|e| backend("lease", e))
}

/// Delete parameters requiring `lease`'s resourceVersion.
fn precondition(lease: &DynamicObject) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: lease.metadata.resource_version.clone(),
            uid: None,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_live_while_its_resource_version_moves_by_this_clock() {
        let mut m = Memory::default();
        let t0 = tokio::time::Instant::now();
        let ttl = Duration::from_secs(3);
        assert!(m.live("l", "1", t0, ttl), "first seen: live");
        assert!(m.live("l", "1", t0 + Duration::from_secs(2), ttl));
        assert!(
            !m.live("l", "1", t0 + Duration::from_secs(3), ttl),
            "stood still a TTL"
        );
        assert!(
            m.live("l", "2", t0 + Duration::from_secs(4), ttl),
            "moved again"
        );
    }

    #[test]
    fn lease_names_are_valid_object_names_whatever_the_replica_is_called() {
        let r = replica_lease("Pod_Name With Spaces");
        assert!(r.starts_with("driftless-replica.") && r.len() == "driftless-replica.".len() + 16);
        assert_eq!(app_lease("guestbook"), "driftless-app.guestbook");
        let t = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        assert_eq!(micros(Some(&micro_time(t))), 1_764_000_000_123_456);
    }
}
