//! A Kubernetes API server as the target (cargo feature `kubernetes`), through kube-rs over
//! rustls.
//!
//! What it promises differs from SQLite and etcd (its [`Store::promises`]):
//!
//! - **Writes are server-side apply, one object at a time** (field manager `fieldManager`,
//!   default `driftless`): a `Put` sends the fields Git declares and nothing else (the sync
//!   hands it the declaration, not a merge with the live object, see
//!   [`Promises::server_side_apply`]). Its precondition becomes the apply's
//!   `metadata.resourceVersion` (the API server refuses the apply with 409 when the object
//!   changed); `Absent` applies without force, so an object that appeared meanwhile with
//!   fields another manager owns is refused. There is no cross-object transaction: a commit of
//!   several writes applies them in order, a run of writes that need nothing of each other
//!   16 at a time (a Namespace, a CRD or a record waits for what came before it), and stops
//!   after the run that holds the first refusal ([`Store::commits_atomically`] is false for
//!   more than one write).
//! - **Deletes** send the resourceVersion as a delete precondition, with background
//!   propagation (as `kubectl delete` and Flux).
//! - **Identity → endpoint by discovery:** (group, kind) → resource, scope and preferred
//!   version, cached, and looked up again when a kind is unknown (a CRD applied since).
//! - **Reads are per object**, not at one revision: [`Store::get_many`] reads each object on
//!   its own. A listing reflects the list's resourceVersion.
//! - **resourceVersion:** the API server calls it opaque; the ones kube-apiserver gives from
//!   etcd are etcd's revisions, decimal, and this backend relies on that to compare and order
//!   them (a server that gives anything else is refused with a clear error).
//! - **The change feed** is one watch per resource kind this store has read or written
//!   (selected by the label `driftless.io/app`, which the sync adds on apply) and one on its
//!   own records, merged in arrival order; each resumes from its last resourceVersion and asks
//!   for a relist after `410 Gone`.
//! - **Its own records** (inventories, app status, the ownership index, preview records) are
//!   ConfigMaps in `namespace` (default `driftless-system`, created when missing), named
//!   `<kind>.<name>` in lower case, labelled `driftless.io/record`: the JSON itself, its gzip,
//!   or (over 512 KiB of gzip) an index of shards written before it ([`records`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures_util::StreamExt as _;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions,
    PropagationPolicy, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{
    APP_LABEL, Committed, Error, Event, Listing, Precondition, Promises, Result, Selector, Store,
    Stored, Watch, WatchItem, Write,
};
use crate::object::{Object, ObjectKey, RESERVED_GROUP};

mod cache;
pub mod leases;
mod records;

pub use records::{RECORD_KEY_ANNOTATION, RECORD_LABEL, SHARD_DIGEST_LABEL, SHARD_OF_LABEL};

/// How long an applied CustomResourceDefinition may take to become `Established`.
const ESTABLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a watch may take to start answering before it is given up and started again
/// (kube-rs sets no read timeout by default; an API server that accepts a connection while it
/// starts may leave a request unanswered).
const WATCH_START_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long the listing that fills a kind's watch cache may take (10,000 objects of a kind on
/// a busy API server take seconds) before it is given up and tried again.
const LISTING_LIMIT: std::time::Duration = std::time::Duration::from_secs(120);

/// How long the API server may stay silent on a connection, reading an answer, before the
/// request fails (seconds; the client's read timeout, which `driftless` sets on the clients
/// it builds: kube-rs has none by default).
pub const REQUEST_SILENCE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long each watch request lasts (its `timeoutSeconds`): below
/// [`REQUEST_SILENCE_LIMIT`], so that a quiet watch ends on the server's word and starts again
/// from its last resourceVersion, never on the client's read timeout.
const WATCH_SECONDS: u32 = 50;

/// How long a watch may stay silent before it is started again: the API server ends each
/// watch after [`WATCH_SECONDS`], so a watch silent for longer is on a connection that died
/// without a word (a peer gone without a FIN), when the client has no read timeout of its own.
const WATCH_IDLE_LIMIT: std::time::Duration = std::time::Duration::from_secs(70);

/// The longest wait before a failed watch or listing is tried again (the first waits 0.5 s,
/// doubling): short, since drift is seen only while the watch runs.
const WATCH_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(8);

/// Above how many objects of one kind in one namespace [`Store::get_many`] lists the kind
/// rather than reading each object.
const LIST_ABOVE: usize = 20;

/// How many writes of one commit go to the API server at once (client-go's default QPS is 5,
/// kubectl apply's is 1 at a time; the floor of the benchmark uses 16).
const APPLY_CONCURRENCY: usize = 16;

/// A write the ones after it may need done first: a Namespace (what goes in it), a CRD (its
/// custom resources), a record (the inventory after the objects it lists).
fn is_barrier(w: &Write) -> bool {
    let key = w.key();
    key.is_reserved() || is_crd(&key) || (key.group().is_empty() && key.kind() == "Namespace")
}

fn is_crd(key: &ObjectKey) -> bool {
    key.group() == "apiextensions.k8s.io" && key.kind() == "CustomResourceDefinition"
}

/// How the store talks to the API server: `store.kubernetes` of the config.
#[derive(Clone, Debug)]
pub struct Options {
    /// Field manager of every apply (at most 128 characters). Default `driftless`.
    pub field_manager: String,
    /// Namespace of driftless's own records. Default `driftless-system`.
    pub namespace: String,
    /// Apply with `force`: take fields another manager holds (a `kubectl edit`) back for Git,
    /// as Flux and Argo CD do. Default true; false reports such a field as a conflict.
    pub force: bool,
    /// Create `namespace` when it is missing (the agent and `sync`); reading commands leave it.
    pub create_namespace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            field_manager: "driftless".into(),
            namespace: "driftless-system".into(),
            force: true,
            create_namespace: true,
        }
    }
}

/// A resource found by discovery.
#[derive(Clone, Debug)]
struct Resource {
    api: ApiResource,
    namespaced: bool,
}

/// The Kubernetes store. Cheap to clone (an `Arc` inside).
#[derive(Clone)]
pub struct KubeStore {
    inner: Arc<Inner>,
    /// With replicas: the gate of the one app this handle writes for ([`KubeStore::fenced`]).
    fence: Option<tokio::sync::watch::Receiver<Option<super::Fence>>>,
}

struct Inner {
    client: kube::Client,
    options: Options,
    /// (group, kind) → resource; refreshed when a kind is not found.
    discovered: Mutex<HashMap<(String, String), Resource>>,
    /// Kinds read or written through this store, which the change feed watches; a watch
    /// started before a kind was added learns of it through this channel.
    /// Each with the highest resourceVersion this store had seen when the kind was added: its
    /// watch starts there (or at the feed's start, when later), so a change made while the
    /// watch was being set up (a CRD's kind not served yet) is not missed.
    kinds: tokio::sync::watch::Sender<BTreeMap<(String, String), u64>>,
    /// The highest resourceVersion read or written through this store.
    seen: std::sync::atomic::AtomicU64,
    /// Server-side dry runs sent ([`KubeStore::dry_runs`]).
    dry_runs: std::sync::atomic::AtomicU64,
    /// The objects of the watched kinds, as the watches last saw them ([`cache`]).
    cache: cache::Cache,
    /// Objects read from the API server one by one ([`KubeStore::reads`]).
    reads: std::sync::atomic::AtomicU64,
}

fn backend(op: &'static str, e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Backend {
        op,
        source: Box::new(e),
    }
}

fn message(op: &'static str, text: String) -> Error {
    Error::Backend {
        op,
        source: text.into(),
    }
}

/// The status code of an API error, when the server answered with one.
fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

fn parse_rv(rv: Option<&str>) -> Result<Option<u64>> {
    match rv {
        None | Some("") => Ok(None),
        Some(s) => s.parse().map(Some).map_err(|_| {
            message(
                "read",
                format!("resourceVersion {s:?} is not a decimal etcd revision: this API server is not supported"),
            )
        }),
    }
}

impl KubeStore {
    /// Connects with `client` and makes sure the records' namespace exists (creating it when
    /// missing).
    ///
    /// # Errors
    ///
    /// [`Error::Backend`] when the API server cannot be reached or refuses (RBAC), naming the
    /// operation.
    pub async fn open(client: kube::Client, options: Options) -> Result<Self> {
        let store = KubeStore {
            fence: None,
            inner: Arc::new(Inner {
                client,
                options,
                discovered: Mutex::new(HashMap::new()),
                kinds: tokio::sync::watch::Sender::new(BTreeMap::new()),
                seen: std::sync::atomic::AtomicU64::new(0),
                dry_runs: std::sync::atomic::AtomicU64::new(0),
                cache: cache::Cache::default(),
                reads: std::sync::atomic::AtomicU64::new(0),
            }),
        };
        let namespaces: Api<DynamicObject> = Api::all_with(
            store.inner.client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace")),
        );
        let ns = &store.inner.options.namespace;
        if store.inner.options.create_namespace
            && namespaces
                .get_opt(ns)
                .await
                .map_err(|e| backend("open", e))?
                .is_none()
        {
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            namespaces
                .patch(
                    ns,
                    &PatchParams::apply(&store.inner.options.field_manager),
                    &Patch::Apply(&body),
                )
                .await
                .map_err(|e| backend("open", e))?;
        }
        Ok(store)
    }

    /// The kube-rs client.
    pub fn client(&self) -> &kube::Client {
        &self.inner.client
    }

    /// How many objects this store (and its clones) has read from the API server one by one
    /// (GET): what the watch cache answers is not counted.
    pub fn reads(&self) -> u64 {
        self.inner.reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many server-side dry runs this store (and its clones) has sent: a revision's check
    /// and each suspect's confirmation. A pass with nothing suspect sends none.
    pub fn dry_runs(&self) -> u64 {
        self.inner
            .dry_runs
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// A handle that writes only while `gate` is open: while this replica holds the app's
    /// Lease ([`leases`]). A commit, and each write in it, checks the gate first; a closed
    /// gate fails the commit with [`Error::Backend`]. There is no cross-object transaction to
    /// make the check and the write one (see [`leases`] for what that leaves).
    pub fn fenced(&self, gate: tokio::sync::watch::Receiver<Option<super::Fence>>) -> Self {
        Self {
            fence: Some(gate),
            ..self.clone()
        }
    }

    /// Fails when this handle is fenced and its gate is closed.
    fn check_fence(&self) -> Result<()> {
        match &self.fence {
            Some(gate) if gate.borrow().is_none() => Err(message(
                "commit",
                "this replica does not hold the app (its Lease is another replica's, or could not be renewed)".into(),
            )),
            _ => Ok(()),
        }
    }

    /// The resource of (group, kind): from the cache, else from discovery of its group (a
    /// kind not seen yet, or a CRD applied since). `None` when the API server does not serve
    /// that kind.
    async fn find(&self, group: &str, kind: &str) -> Result<Option<Resource>> {
        let k = (group.to_string(), kind.to_string());
        if let Some(r) = self.inner.discovered.lock().unwrap().get(&k) {
            return Ok(Some(r.clone()));
        }
        let found = match kube::discovery::oneshot::group(&self.inner.client, group).await {
            Ok(g) => g,
            Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingApiGroup(_))) => {
                return Ok(None);
            }
            Err(e) => return Err(backend("discovery", e)),
        };
        let mut cache = self.inner.discovered.lock().unwrap();
        for (api, caps) in found.recommended_resources() {
            let ApiCapabilities { scope, .. } = caps;
            cache.insert(
                (api.group.clone(), api.kind.clone()),
                Resource {
                    api,
                    namespaced: scope == Scope::Namespaced,
                },
            );
        }
        Ok(cache.get(&k).cloned())
    }

    /// [`KubeStore::find`], with an error naming the kind when it is not served.
    async fn resource(&self, group: &str, kind: &str) -> Result<Resource> {
        self.find(group, kind).await?.ok_or_else(|| {
            message(
                "discovery",
                format!(
                    "the API server serves no kind {kind} in group {:?}",
                    if group.is_empty() { "core" } else { group }
                ),
            )
        })
    }

    /// Notes that the change feed should watch (group, kind).
    fn watch_kind(&self, group: &str, kind: &str) {
        let k = (group.to_string(), kind.to_string());
        let seen = self.inner.seen.load(std::sync::atomic::Ordering::Relaxed);
        self.inner.kinds.send_if_modified(|kinds| {
            if kinds.contains_key(&k) {
                return false;
            }
            kinds.insert(k, seen);
            true
        });
    }

    /// Notes a resourceVersion read or written.
    fn saw(&self, rv: Option<u64>) {
        if let Some(rv) = rv {
            self.inner
                .seen
                .fetch_max(rv, std::sync::atomic::Ordering::Relaxed);
        }
    }

    async fn api_for(&self, key: &ObjectKey) -> Result<(Api<DynamicObject>, Resource)> {
        let r = self.resource(key.group(), key.kind()).await?;
        let api = if r.namespaced {
            Api::namespaced_with(self.inner.client.clone(), key.namespace(), &r.api)
        } else {
            Api::all_with(self.inner.client.clone(), &r.api)
        };
        Ok((api, r))
    }

    async fn get_object(&self, key: &ObjectKey) -> Result<Option<Object>> {
        if key.is_reserved() {
            return self.get_record(key).await;
        }
        self.watch_kind(key.group(), key.kind());
        // What the change feed's watch of the kind holds, it has seen last: no request.
        if let Some(cached) = self.inner.cache.get(key) {
            return Ok(Some(cached));
        }
        // A kind the server does not serve (yet: its CRD is in the same sync) has no objects.
        if self.find(key.group(), key.kind()).await?.is_none() {
            return Ok(None);
        }
        let (api, _) = self.api_for(key).await?;
        self.inner
            .reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let found = api
            .get_opt(key.name())
            .await
            .map_err(|e| backend("get", e))?;
        found.map(|o| to_object(key, o)).transpose()
    }

    async fn put(&self, object: Object, precondition: Precondition) -> Result<Object> {
        let key = object.key();
        if key.is_reserved() {
            return self.put_record(&key, object, precondition).await;
        }
        self.watch_kind(key.group(), key.kind());
        let (api, _) = self.api_for(&key).await?;
        let mut body = object.as_map().clone();
        body.remove("status");
        if let Some(Value::Object(meta)) = body.get_mut("metadata") {
            for server_set in [
                "resourceVersion",
                "uid",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
            ] {
                meta.remove(server_set);
            }
            if let Precondition::ResourceVersion(rv) = precondition {
                meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
            }
        }
        let mut params = PatchParams::apply(&self.inner.options.field_manager);
        if self.inner.options.force && precondition != Precondition::Absent {
            params = params.force();
        }
        match api
            .patch(key.name(), &params, &Patch::Apply(Value::Object(body)))
            .await
        {
            Ok(stored) if is_crd(&key) => {
                let stored = self.wait_established(&api, stored).await?;
                self.wrote(&key, to_object(&key, stored)?)
            }
            Ok(stored) => self.wrote(&key, to_object(&key, stored)?),
            Err(e) if code(&e) == Some(409) => Err(match precondition {
                // An apply cannot require absence: it is refused only when another manager
                // owns a field it sets.
                Precondition::Absent => Error::Conflict {
                    key: Box::new(key),
                    expected: "absent, or no field owned by another manager".into(),
                    found: api_message(&e),
                },
                _ => conflict(&key, precondition, api_message(&e)),
            }),
            Err(e) => Err(refused("apply", &key, &e)),
        }
    }

    /// A server-side dry run of applying `object` (its status left out) with force: what the
    /// API server would store, or its refusal. Counted in [`KubeStore::dry_runs`].
    async fn dry_run_apply(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
        object: &Object,
    ) -> kube::Result<DynamicObject> {
        let mut body = object.as_map().clone();
        body.remove("status");
        let params = PatchParams::apply(&self.inner.options.field_manager)
            .force()
            .dry_run();
        self.inner
            .dry_runs
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        api.patch(key.name(), &params, &Patch::Apply(Value::Object(body)))
            .await
    }

    /// Notes an object just written in the watch cache (a pass right after must not read it as
    /// it was) and hands it back.
    fn wrote(&self, key: &ObjectKey, stored: Object) -> Result<Object> {
        // Only what the watches select (the app label) is cached: the watch would never tell
        // of an unlabelled object's deletion.
        let labelled = stored
            .metadata()
            .get("labels")
            .and_then(|l| l.get(APP_LABEL))
            .is_some();
        if let Some(rv) = stored.resource_version() {
            self.inner.cache.saw(key, labelled.then_some(&stored), rv);
        }
        Ok(stored)
    }

    /// The server-side dry run of one object for [`Store::check`]: its refusal, if any.
    async fn check_one(
        self,
        o: Object,
        brought: Arc<Brought>,
    ) -> Result<Option<(ObjectKey, String)>> {
        let (kinds, namespaces) = (&brought.0, &brought.1);
        let key = o.key();
        let Some(r) = self.find(key.group(), key.kind()).await? else {
            if kinds.contains(&(key.group().to_string(), key.kind().to_string())) {
                return Ok(None);
            }
            let group = if key.group().is_empty() {
                "core"
            } else {
                key.group()
            };
            return Ok(Some((
                key.clone(),
                format!(
                    "the API server serves no kind {} in group {group} (apiVersion {})",
                    key.kind(),
                    o.api_version()
                ),
            )));
        };
        let api: Api<DynamicObject> = if r.namespaced {
            Api::namespaced_with(self.inner.client.clone(), key.namespace(), &r.api)
        } else {
            Api::all_with(self.inner.client.clone(), &r.api)
        };
        match self.dry_run_apply(&api, &key, &o).await {
            Ok(_) => Ok(None),
            Err(e)
                if code(&e) == Some(404)
                    && r.namespaced
                    && namespaces.contains(key.namespace()) =>
            {
                Ok(None)
            }
            Err(e) => match code(&e) {
                Some(c) => Ok(Some((key.clone(), format!("{} ({c})", api_message(&e))))),
                None => Err(backend("dry run", e)),
            },
        }
    }

    /// Waits until an applied CustomResourceDefinition is `Established` (its kind is served;
    /// at most [`ESTABLISH_TIMEOUT`]), then forgets what discovery knew of its group, so the
    /// custom resources after it in the same sync find their kind.
    async fn wait_established(
        &self,
        api: &Api<DynamicObject>,
        mut crd: DynamicObject,
    ) -> Result<DynamicObject> {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let deadline = tokio::time::Instant::now() + ESTABLISH_TIMEOUT;
        loop {
            let established = crd
                .data
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .is_some_and(|cs| {
                    cs.iter().any(|c| {
                        c.get("type").and_then(Value::as_str) == Some("Established")
                            && c.get("status").and_then(Value::as_str) == Some("True")
                    })
                });
            if established {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(message(
                    "apply",
                    format!(
                        "CustomResourceDefinition {name} is not Established after {} s",
                        ESTABLISH_TIMEOUT.as_secs()
                    ),
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            crd = api.get(&name).await.map_err(|e| backend("apply", e))?;
        }
        if let Some(group) = crd.data.pointer("/spec/group").and_then(Value::as_str) {
            self.inner
                .discovered
                .lock()
                .unwrap()
                .retain(|(g, _), _| g != group);
        }
        Ok(crd)
    }

    async fn delete(&self, key: &ObjectKey, precondition: Precondition) -> Result<Option<u64>> {
        if key.is_reserved() {
            return self.delete_record(key, precondition).await;
        }
        let api = self.api_for(key).await?.0;
        let deleted = self
            .delete_named(&api, key, key.name(), precondition)
            .await?;
        // Gone for the watch cache too (at the deletion's revision, or past anything held).
        self.inner.cache.saw(key, None, deleted.unwrap_or(u64::MAX));
        Ok(deleted)
    }

    /// Deletes `name` of `api` (the object of `key`) under `precondition`.
    async fn delete_named(
        &self,
        api: &Api<DynamicObject>,
        key: &ObjectKey,
        name: &str,
        precondition: Precondition,
    ) -> Result<Option<u64>> {
        let mut params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        if let Precondition::ResourceVersion(rv) = precondition {
            params.preconditions = Some(Preconditions {
                resource_version: Some(rv.to_string()),
                uid: None,
            });
        }
        let conflict = |found: String| conflict(key, precondition, found);
        if precondition == Precondition::Absent {
            return match api.get_opt(name).await.map_err(|e| backend("delete", e))? {
                None => Ok(None),
                Some(_) => Err(conflict("present".into())),
            };
        }
        match api.delete(name, &params).await {
            Ok(either) => match either.left() {
                // Still there (finalizers): the revision of the deletion's start.
                Some(o) => parse_rv(o.metadata.resource_version.as_deref()),
                // Gone, with a Status that names no revision: the store's revision now, at or
                // past the deletion's (the change feed carries the deletion by then).
                None => self.revision().await.map(Some),
            },
            Err(e) if code(&e) == Some(404) => match precondition {
                Precondition::Any => Ok(None),
                _ => Err(conflict("absent".into())),
            },
            Err(e) if code(&e) == Some(409) => Err(conflict(api_message(&e))),
            Err(e) => Err(refused("delete", key, &e)),
        }
    }
}

/// A refused precondition: what was expected of `key`, and what the API server said.
fn conflict(key: &ObjectKey, precondition: Precondition, found: String) -> Error {
    Error::Conflict {
        key: Box::new(key.clone()),
        expected: match precondition {
            Precondition::ResourceVersion(rv) => format!("resourceVersion {rv}"),
            Precondition::Absent => "absent".into(),
            Precondition::Any => "anything".into(),
        },
        found,
    }
}

/// The message of an API error (its `Status.message`), else the error.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        e => e.to_string(),
    }
}

/// An error the API server gave for `key`, with its message (a validation error, RBAC's
/// `forbidden`, an admission webhook's refusal).
fn refused(op: &'static str, key: &ObjectKey, e: &kube::Error) -> Error {
    message(
        op,
        format!(
            "the API server refused {key} ({}): {}",
            code(e).map_or_else(|| "no answer".to_string(), |c| c.to_string()),
            api_message(e)
        ),
    )
}

/// A live object as the core reads it, `managedFields` included (who set which field: named
/// with a revert; the comparison never looks at it).
fn to_object(key: &ObjectKey, o: DynamicObject) -> Result<Object> {
    parse_rv(o.metadata.resource_version.as_deref())?;
    let value = serde_json::to_value(o).map_err(|e| backend("read", e))?;
    Object::from_value(value).map_err(|e| Error::Corrupt {
        key: key.clone(),
        source: Box::new(e),
    })
}

#[async_trait]
impl Store for KubeStore {
    async fn get(&self, key: &ObjectKey) -> Result<Option<Object>> {
        let found = self.get_object(key).await?;
        self.saw(found.as_ref().and_then(Object::resource_version));
        Ok(found)
    }

    async fn version_of(&self, key: &ObjectKey) -> Result<Option<u64>> {
        if key.is_reserved() {
            return self.record_version(key).await;
        }
        Ok(self
            .get_object(key)
            .await?
            .and_then(|o| o.resource_version()))
    }

    /// From the watch cache only: the objects it holds (labelled, of a kind whose watch
    /// runs). The rest are left out, to be read.
    async fn versions(&self, keys: &[&ObjectKey]) -> Result<Vec<crate::store::Version>> {
        let mut watched: Option<(&str, &str)> = None;
        Ok(keys
            .iter()
            .map(|k| {
                if k.is_reserved() {
                    return crate::store::Version::Unknown;
                }
                if watched != Some((k.group(), k.kind())) {
                    self.watch_kind(k.group(), k.kind());
                    watched = Some((k.group(), k.kind()));
                }
                self.inner
                    .cache
                    .version(k)
                    .map_or(crate::store::Version::Unknown, crate::store::Version::At)
            })
            .collect())
    }

    async fn get_many(&self, keys: &[ObjectKey]) -> Result<Listing> {
        let mut listing = Listing::default();
        // What the watch cache holds needs no request; of the rest, a kind with many keys in
        // one namespace is read with one LIST (a cold sync asks for thousands of objects that
        // do not exist yet), the others one GET each.
        let mut by_kind: BTreeMap<(String, String, String), Vec<ObjectKey>> = BTreeMap::new();
        let mut single = Vec::new();
        for k in keys {
            if k.is_reserved() {
                single.push(k.clone());
                continue;
            }
            self.watch_kind(k.group(), k.kind());
            match self.inner.cache.get(k) {
                Some(o) => {
                    listing.objects.insert(k.clone(), o);
                }
                None => by_kind
                    .entry((
                        k.group().to_string(),
                        k.kind().to_string(),
                        k.namespace().to_string(),
                    ))
                    .or_default()
                    .push(k.clone()),
            }
        }
        for ((group, kind, namespace), ks) in by_kind {
            if ks.len() <= LIST_ABOVE {
                single.extend(ks);
                continue;
            }
            // Not served (yet): none of them exists.
            let Some(r) = self.find(&group, &kind).await? else {
                continue;
            };
            let api: Api<DynamicObject> = if r.namespaced {
                Api::namespaced_with(self.inner.client.clone(), &namespace, &r.api)
            } else {
                Api::all_with(self.inner.client.clone(), &r.api)
            };
            self.inner
                .reads
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| backend("get", e))?;
            let wanted: BTreeSet<&str> = ks.iter().map(|k| k.name()).collect();
            for mut o in list.items {
                let name = o.metadata.name.clone().unwrap_or_default();
                if !wanted.contains(name.as_str()) {
                    continue;
                }
                o.types = Some(kube::core::TypeMeta {
                    api_version: r.api.api_version.clone(),
                    kind: r.api.kind.clone(),
                });
                let key = ObjectKey::new(&group, &kind, &namespace, &name);
                listing.objects.insert(key.clone(), to_object(&key, o)?);
            }
        }
        for o in listing.objects.values() {
            listing.revision = listing.revision.max(o.resource_version().unwrap_or(0));
        }
        let reads = futures_util::stream::iter(single)
            .map(|k| async move {
                let o = self.get_object(&k).await;
                (k, o)
            })
            .buffer_unordered(16);
        let results: Vec<(ObjectKey, Result<Option<Object>>)> = reads.collect().await;
        for (k, o) in results {
            if let Some(o) = o? {
                listing.revision = listing.revision.max(o.resource_version().unwrap_or(0));
                listing.objects.insert(k, o);
            }
        }
        self.saw(Some(listing.revision));
        Ok(listing)
    }

    async fn list(&self, selector: &Selector) -> Result<Listing> {
        let mut listing = Listing::default();
        if selector.group.as_deref() == Some(RESERVED_GROUP) {
            let mut params = ListParams::default().labels(RECORD_LABEL);
            if let Some(kind) = &selector.kind {
                params = ListParams::default()
                    .labels(&format!("{RECORD_LABEL}={}", kind.to_ascii_lowercase()));
            }
            let list = self
                .records()
                .list(&params)
                .await
                .map_err(|e| backend("list", e))?;
            listing.revision = parse_rv(list.metadata.resource_version.as_deref())?.unwrap_or(0);
            for cm in &list.items {
                let Some(key) = records::record_key(cm) else {
                    listing.unreadable.insert(
                        ObjectKey::new(
                            RESERVED_GROUP,
                            "ConfigMap",
                            &self.inner.options.namespace,
                            cm.metadata.name.as_deref().unwrap_or_default(),
                        ),
                        "a record ConfigMap that names no record".into(),
                    );
                    continue;
                };
                if !selector.matches(&key) {
                    continue;
                }
                match self.record_from(&key, cm).await {
                    Ok(o) => {
                        listing.objects.insert(key, o);
                    }
                    Err(e) => {
                        listing.unreadable.insert(key, e.to_string());
                    }
                }
            }
            return Ok(listing);
        }
        // One kind, or (a kind not named: `driftless store list`) every kind the server
        // serves and can list, in the group when one is named, Events aside.
        let resources: Vec<Resource> = match (&selector.group, &selector.kind) {
            (Some(group), Some(kind)) => vec![self.resource(group, kind).await?],
            _ => {
                let discovery = kube::Discovery::new(self.inner.client.clone())
                    .run()
                    .await
                    .map_err(|e| backend("discovery", e))?;
                let mut all = Vec::new();
                for g in discovery.groups() {
                    for (api, caps) in g.recommended_resources() {
                        let wanted = selector
                            .group
                            .as_ref()
                            .is_none_or(|want| *want == api.group)
                            && selector.kind.as_ref().is_none_or(|want| *want == api.kind)
                            && api.kind != "Event"
                            && caps.supports_operation(kube::discovery::verbs::LIST);
                        if wanted {
                            all.push(Resource {
                                namespaced: caps.scope == Scope::Namespaced,
                                api,
                            });
                        }
                    }
                }
                all
            }
        };
        for r in resources {
            let api: Api<DynamicObject> = match &selector.namespace {
                Some(ns) if r.namespaced => {
                    Api::namespaced_with(self.inner.client.clone(), ns, &r.api)
                }
                // A namespace named: cluster-scoped kinds have none of its objects.
                Some(ns) if !ns.is_empty() => continue,
                _ => Api::all_with(self.inner.client.clone(), &r.api),
            };
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| backend("list", e))?;
            let rv = parse_rv(list.metadata.resource_version.as_deref())?.unwrap_or(0);
            listing.revision = listing.revision.max(rv);
            for mut o in list.items {
                o.types = Some(kube::core::TypeMeta {
                    api_version: r.api.api_version.clone(),
                    kind: r.api.kind.clone(),
                });
                let key = ObjectKey::new(
                    &r.api.group,
                    &r.api.kind,
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    o.metadata.name.as_deref().unwrap_or_default(),
                );
                match to_object(&key, o) {
                    Ok(obj) => {
                        listing.objects.insert(key, obj);
                    }
                    Err(e) => {
                        listing.unreadable.insert(key, e.to_string());
                    }
                }
            }
        }
        self.saw(Some(listing.revision));
        Ok(listing)
    }

    async fn commit(&self, writes: Vec<Write>) -> Result<Committed> {
        super::check_distinct(&writes)?;
        let mut committed = Committed::default();
        // In order, but a run of writes that need nothing of each other goes
        // [`APPLY_CONCURRENCY`] at a time (results kept in order); a Namespace, a CRD or a
        // record waits for what came before it and holds back what comes after.
        let mut rest = writes.into_iter().peekable();
        while let Some(first) = rest.next() {
            let mut run = vec![first];
            if !is_barrier(&run[0]) {
                while let Some(next) = rest.next_if(|w| !is_barrier(w)) {
                    run.push(next);
                }
            }
            let results: Vec<Result<(Option<Object>, Option<u64>)>> =
                futures_util::stream::iter(run)
                    .map(|w| async move {
                        self.check_fence()?;
                        match w {
                            // The JSON made already is not what server-side apply sends.
                            Write::Put {
                                object,
                                precondition,
                                ..
                            } => {
                                let stored = self.put(object, precondition).await?;
                                let rv = stored.resource_version();
                                Ok((Some(stored), rv))
                            }
                            Write::PutRecord {
                                record,
                                precondition,
                            } => {
                                let stored = self.put_record_text(record, precondition).await?;
                                let rv = stored.resource_version();
                                Ok((Some(stored), rv))
                            }
                            Write::Delete { key, precondition } => {
                                Ok((None, self.delete(&key, precondition).await?))
                            }
                        }
                    })
                    .buffered(APPLY_CONCURRENCY)
                    .collect()
                    .await;
            // The first refusal is the commit's error; what went in before (and beside) it
            // stays written, as with any commit of more than one write here.
            for r in results {
                let (stored, rv) = r?;
                committed.revision = committed.revision.max(rv.unwrap_or(0));
                committed.stored.extend(stored.map(Stored::from));
            }
        }
        self.saw(Some(committed.revision));
        Ok(committed)
    }

    async fn revision(&self) -> Result<u64> {
        let list = self
            .records()
            .list(&ListParams::default().labels(RECORD_LABEL).limit(1))
            .await
            .map_err(|e| backend("revision", e))?;
        Ok(parse_rv(list.metadata.resource_version.as_deref())?.unwrap_or(0))
    }

    async fn watch(&self, from_revision: u64) -> Result<Watch> {
        let (tx, rx) = mpsc::channel(1024);
        let store = self.clone();
        let span = tracing::info_span!("kubernetes_watch");
        tokio::spawn(tracing::Instrument::instrument(
            store.feed(from_revision, tx),
            span,
        ));
        Ok(rx)
    }

    async fn check(&self, objects: &[Object]) -> Result<Vec<(ObjectKey, String)>> {
        // Kinds and Namespaces the set brings itself: what depends on them is checked by the
        // apply, once they exist.
        let mut brought_kinds = BTreeSet::new();
        let mut brought_namespaces = BTreeSet::new();
        for o in objects {
            let key = o.key();
            if is_crd(&key) {
                let spec = o.get("spec");
                let group = spec.and_then(|s| s.get("group")).and_then(Value::as_str);
                let kind = spec
                    .and_then(|s| s.pointer("/names/kind"))
                    .and_then(Value::as_str);
                if let (Some(g), Some(k)) = (group, kind) {
                    brought_kinds.insert((g.to_string(), k.to_string()));
                }
            } else if key.group().is_empty() && key.kind() == "Namespace" {
                brought_namespaces.insert(key.name().to_string());
            }
        }
        let brought = Arc::new((brought_kinds, brought_namespaces));
        let checks: Vec<_> = objects
            .iter()
            .filter(|o| !o.key().is_reserved())
            .map(|o| self.clone().check_one(o.clone(), brought.clone()))
            .collect();
        let checks = futures_util::stream::iter(checks).buffer_unordered(16);
        let results: Vec<Result<Option<(ObjectKey, String)>>> = checks.collect().await;
        let mut refused = Vec::new();
        for r in results {
            if let Some(r) = r? {
                refused.push(r);
            }
        }
        refused.sort();
        Ok(refused)
    }

    async fn confirm_drift(&self, declared: &Object, live: &Object) -> Result<bool> {
        let key = declared.key();
        tracing::debug!(object = %key, "Drift suspected; confirming with a server-side dry run");
        let (api, _) = self.api_for(&key).await?;
        let would = self
            .dry_run_apply(&api, &key, declared)
            .await
            .map_err(|e| refused("dry run", &key, &e))?;
        let would = to_object(&key, would)?;
        // Who manages a field, and the bookkeeping of a write, are not drift.
        let strip = |o: &Object| {
            let mut v = o.as_map().clone();
            v.remove("status");
            if let Some(Value::Object(meta)) = v.get_mut("metadata") {
                for k in ["managedFields", "resourceVersion", "generation"] {
                    meta.remove(k);
                }
            }
            v
        };
        Ok(strip(&would) != strip(live))
    }

    fn backend(&self) -> &'static str {
        "kubernetes"
    }

    async fn holds_others(
        &self,
        container: &Object,
        owned: &BTreeSet<ObjectKey>,
    ) -> Result<Option<String>> {
        let key = container.key();
        // (resource, namespace to list in) of what the container holds.
        let mut lists: Vec<(ApiResource, Option<String>)> = Vec::new();
        if is_crd(&key) {
            let spec = container.get("spec");
            let group = spec.and_then(|s| s.get("group")).and_then(Value::as_str);
            let kind = spec
                .and_then(|s| s.pointer("/names/kind"))
                .and_then(Value::as_str);
            if let (Some(g), Some(k)) = (group, kind)
                && let Some(r) = self.find(g, k).await?
            {
                lists.push((r.api, None));
            }
        } else if key.group().is_empty() && key.kind() == "Namespace" {
            let discovery = kube::Discovery::new(self.inner.client.clone())
                .run()
                .await
                .map_err(|e| backend("discovery", e))?;
            for group in discovery.groups() {
                for (api, caps) in group.recommended_resources() {
                    let skip = api.kind == "Event"
                        || caps.scope != Scope::Namespaced
                        || !caps.supports_operation(kube::discovery::verbs::LIST);
                    if !skip {
                        lists.push((api, Some(key.name().to_string())));
                    }
                }
            }
        } else {
            return Ok(None);
        }
        let mut others: Vec<ObjectKey> = Vec::new();
        for (api, namespace) in lists {
            let client: Api<DynamicObject> = match &namespace {
                Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, &api),
                None => Api::all_with(self.inner.client.clone(), &api),
            };
            let list = client
                .list(&ListParams::default())
                .await
                .map_err(|e| backend("list", e))?;
            for o in list.items {
                let name = o.metadata.name.clone().unwrap_or_default();
                let kept_by_the_server = (api.kind == "ConfigMap" && name == "kube-root-ca.crt")
                    || (api.kind == "ServiceAccount" && name == "default");
                if kept_by_the_server
                    || o.metadata
                        .owner_references
                        .as_ref()
                        .is_some_and(|r| !r.is_empty())
                {
                    continue;
                }
                let k = ObjectKey::new(
                    &api.group,
                    &api.kind,
                    o.metadata.namespace.as_deref().unwrap_or_default(),
                    &name,
                );
                if !owned.contains(&k) {
                    others.push(k);
                }
            }
        }
        if others.is_empty() {
            return Ok(None);
        }
        let named: Vec<String> = others.iter().take(3).map(ToString::to_string).collect();
        Ok(Some(format!(
            "{key} holds {} object(s) the app does not own ({}{})",
            others.len(),
            named.join(", "),
            if others.len() > 3 { ", ..." } else { "" }
        )))
    }

    fn field_manager(&self) -> Option<&str> {
        Some(&self.inner.options.field_manager)
    }

    fn commits_atomically(&self, writes: &[Write]) -> bool {
        writes.len() <= 1
    }

    fn fenced(
        &self,
        gate: tokio::sync::watch::Receiver<Option<super::Fence>>,
    ) -> Option<Arc<dyn Store>> {
        Some(Arc::new(KubeStore::fenced(self, gate)))
    }

    fn promises(&self) -> Promises {
        Promises {
            transactions: false,
            global_revision: false,
            ordered_feed: false,
            server_side_apply: true,
        }
    }
}

type Sender = mpsc::Sender<Result<WatchItem>>;

/// A metadata-only watch event as the object-watch event it stands for (no body).
fn from_metadata(
    e: WatchEvent<kube::core::PartialObjectMeta<DynamicObject>>,
) -> WatchEvent<DynamicObject> {
    let object = |m: kube::core::PartialObjectMeta<DynamicObject>| DynamicObject {
        types: None,
        metadata: m.metadata,
        data: Value::Null,
    };
    match e {
        WatchEvent::Added(m) => WatchEvent::Added(object(m)),
        WatchEvent::Modified(m) => WatchEvent::Modified(object(m)),
        WatchEvent::Deleted(m) => WatchEvent::Deleted(object(m)),
        WatchEvent::Bookmark(b) => WatchEvent::Bookmark(b),
        WatchEvent::Error(s) => WatchEvent::Error(s),
    }
}

/// What a set brings itself, for [`Store::check`]: the (group, kind) its CRDs define, and the
/// Namespaces it declares.
type Brought = (BTreeSet<(String, String)>, BTreeSet<String>);

impl KubeStore {
    /// The change feed: a watch on the records, and one per kind as kinds are added, until
    /// the receiver is dropped.
    async fn feed(self, from: u64, tx: Sender) {
        let mut kinds = self.inner.kinds.subscribe();
        let mut running: BTreeSet<(String, String)> = BTreeSet::new();
        let mut tasks = tokio::task::JoinSet::new();
        let records = (
            ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
            Some(self.inner.options.namespace.clone()),
            RECORD_LABEL.to_string(),
            true,
        );
        tasks.spawn(tracing::Instrument::instrument(
            self.clone().watch_one(records, from, tx.clone()),
            tracing::info_span!("watch_records"),
        ));
        loop {
            let wanted: Vec<((String, String), u64)> = kinds
                .borrow_and_update()
                .iter()
                .filter(|(k, _)| !running.contains(*k))
                .map(|(k, at)| (k.clone(), *at))
                .collect();
            let mut unserved = false;
            for ((group, kind), added_at) in wanted {
                let r = match self.find(&group, &kind).await {
                    Ok(Some(r)) => r,
                    // Not served yet (its CRD is being applied): tried again shortly.
                    Ok(None) => {
                        unserved = true;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(group, kind, error = %super::error_chain(&e), "Cannot watch a kind; retrying");
                        unserved = true;
                        continue;
                    }
                };
                let start = from.max(added_at);
                tracing::debug!(group, kind, from = start, "Watching a kind");
                running.insert((group.clone(), kind.clone()));
                tasks.spawn(tracing::Instrument::instrument(
                    self.clone().watch_one(
                        (r.api, None, APP_LABEL.to_string(), false),
                        start,
                        tx.clone(),
                    ),
                    tracing::info_span!("watch_kind", group, kind),
                ));
            }
            let retry = async {
                if unserved {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                changed = kinds.changed() => if changed.is_err() { break },
                _ = tx.closed() => break,
                Some(_) = tasks.join_next() => {}
                _ = retry => {}
            }
        }
        tasks.abort_all();
    }

    /// Lists a kind's labelled objects into the watch cache.
    async fn fill_cache(
        &self,
        client: &Api<DynamicObject>,
        api: &ApiResource,
        label: &str,
    ) -> Result<()> {
        let list = client
            .list(&ListParams::default().labels(label))
            .await
            .map_err(|e| backend("list", e))?;
        let mut objects = Vec::with_capacity(list.items.len());
        for mut o in list.items {
            o.types = Some(kube::core::TypeMeta {
                api_version: api.api_version.clone(),
                kind: api.kind.clone(),
            });
            let key = ObjectKey::new(
                &api.group,
                &api.kind,
                o.metadata.namespace.as_deref().unwrap_or_default(),
                o.metadata.name.as_deref().unwrap_or_default(),
            );
            if let Ok(obj) = to_object(&key, o) {
                objects.push(obj);
            }
        }
        tracing::debug!(group = %api.group, kind = %api.kind, objects = objects.len(), "Watch cache listed");
        self.inner
            .cache
            .replace((api.group.clone(), api.kind.clone()), objects);
        Ok(())
    }

    /// Watches one resource (all namespaces, or one) selected by `label`, from `from`, sending
    /// events until the receiver is dropped. After `410 Gone`: a relist item, and the watch
    /// starts again from the current revision.
    async fn watch_one(
        self,
        (api, namespace, label, records): (ApiResource, Option<String>, String, bool),
        from: u64,
        tx: Sender,
    ) {
        let client: Api<DynamicObject> = match &namespace {
            Some(ns) => Api::namespaced_with(self.inner.client.clone(), ns, &api),
            None => Api::all_with(self.inner.client.clone(), &api),
        };
        let mut rv = from.to_string();
        let kind = (api.group.clone(), api.kind.clone());
        // Restarts after a failure wait 0.5 s, doubling to WATCH_RETRY_MAX.
        let mut delay = std::time::Duration::from_millis(500);
        loop {
            // The watch cache of a kind: listed before its watch starts (the watch then
            // replays from `rv`, so no event the feed owes is skipped; older news than the
            // listing does not move the cache back).
            let listed = if !records && !self.inner.cache.synced(&kind) {
                match tokio::time::timeout(LISTING_LIMIT, self.fill_cache(&client, &api, &label))
                    .await
                {
                    Ok(r) => r.map_err(|e| super::error_chain(&e)),
                    Err(_) => Err(format!("no answer within {LISTING_LIMIT:?}")),
                }
            } else {
                Ok(())
            };
            let started = match listed {
                Ok(()) => {
                    let params = WatchParams::default().labels(&label).timeout(WATCH_SECONDS);
                    tracing::debug!(from = %rv, "Watch starting");
                    // The records are watched for their keys only: metadata, not the bodies (an
                    // app status of 10,000 objects, rewritten every few seconds, is large).
                    let watch = async {
                        if records {
                            client
                                .watch_metadata(&params, &rv)
                                .await
                                .map(|s| s.map(|e| e.map(from_metadata)).boxed())
                        } else {
                            client.watch(&params, &rv).await.map(|s| s.boxed())
                        }
                    };
                    match tokio::time::timeout(WATCH_START_LIMIT, watch).await {
                        Ok(Ok(s)) => Ok(s),
                        Ok(Err(e)) => Err(format!("watch failed to start: {e}")),
                        Err(_) => Err(format!("watch did not start within {WATCH_START_LIMIT:?}")),
                    }
                }
                Err(e) => Err(format!("listing for the watch cache failed: {e}")),
            };
            let stream = match started {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, retry_in = ?delay, "Watch not running; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {
                            delay = (delay * 2).min(WATCH_RETRY_MAX);
                            continue;
                        }
                        _ = tx.closed() => return,
                    }
                }
            };
            let mut stream = std::pin::pin!(stream);
            loop {
                let next = tokio::select! {
                    n = tokio::time::timeout(WATCH_IDLE_LIMIT, stream.next()) => n,
                    _ = tx.closed() => return,
                };
                let Ok(next) = next else {
                    self.inner.cache.unsync(&kind);
                    tracing::debug!(from = %rv, "Watch silent for {WATCH_IDLE_LIMIT:?}; restarting");
                    break;
                };
                let Some(item) = next else {
                    tracing::debug!(from = %rv, "Watch ended; resuming");
                    break;
                };
                tracing::trace!(?item, "Watch event");
                let (obj, deleted) = match item {
                    Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => (o, false),
                    Ok(WatchEvent::Deleted(o)) => (o, true),
                    Ok(WatchEvent::Bookmark(b)) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    Ok(WatchEvent::Error(s)) if s.code == 410 => {
                        self.inner.cache.unsync(&kind);
                        // History is gone: ask for a relist from now.
                        let now = self.revision().await.unwrap_or(0);
                        rv = now.to_string();
                        if tx
                            .send(Ok(WatchItem::Relist { revision: now }))
                            .await
                            .is_err()
                        {
                            return;
                        }
                        break;
                    }
                    Ok(WatchEvent::Error(s)) => {
                        self.inner.cache.unsync(&kind);
                        tracing::debug!(code = s.code, detail = %s.message, "Watch error; restarting");
                        break;
                    }
                    Err(e) => {
                        self.inner.cache.unsync(&kind);
                        tracing::debug!(error = %e, "Watch stream failed; restarting");
                        break;
                    }
                };
                delay = std::time::Duration::from_millis(500);
                let Ok(Some(revision)) = parse_rv(obj.metadata.resource_version.as_deref()) else {
                    continue;
                };
                rv = revision.to_string();
                let key = if records {
                    match records::record_key(&obj) {
                        Some(key) => key,
                        None => continue,
                    }
                } else {
                    let key = ObjectKey::new(
                        &api.group,
                        &api.kind,
                        obj.metadata.namespace.as_deref().unwrap_or_default(),
                        obj.metadata.name.as_deref().unwrap_or_default(),
                    );
                    // The cache first: whoever acts on the event reads at least this.
                    if deleted {
                        self.inner.cache.saw(&key, None, revision);
                    } else {
                        let mut obj = obj;
                        obj.types = Some(kube::core::TypeMeta {
                            api_version: api.api_version.clone(),
                            kind: api.kind.clone(),
                        });
                        match to_object(&key, obj) {
                            Ok(o) => self.inner.cache.saw(&key, Some(&o), revision),
                            Err(_) => self.inner.cache.saw(&key, None, revision),
                        }
                    }
                    key
                };
                let event = WatchItem::Event(Event {
                    revision,
                    key,
                    deleted,
                });
                if tx.send(Ok(event)).await.is_err() {
                    return;
                }
            }
        }
    }
}
